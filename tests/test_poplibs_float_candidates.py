"""poplibs_float_candidates: Poplibs' vertex candidates of a FLOAT convolution and the
bounds that establish its method (docs/planner.md, rows 13 to 15 of the convolution
table). The floors and the AMP plan's terms are recomputed here from Poplibs' formulas
written out independently (graphcore/poplibs 7eac0f26, ``PerformanceEstimation.hpp`` and
``ConvModel.cpp``), and the horizontal MAC's floor is checked against its estimate of
concrete tiles."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api.poplin import poplibs_float_candidates as pfc

CONV1 = poplin.ConvParams(FLOAT, 32, [28, 28], [3, 3], 1, 8, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip


def _target(preset: str = "mk2-ipumodel"):
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()


def test_candidates_on_mk2_and_mk1() -> None:
    """The AMP's FLOAT groupings (8, 4, 2 input channels; partials by the units), then
    the horizontal MAC's groupings and the outer product."""
    assert pfc.amp_candidates(_target()) == [
        (16, 8, 16), (16, 4, 16), (16, 2, 16), (8, 8, 8), (8, 4, 8), (8, 2, 8),
    ]  # fmt: skip
    assert pfc.amp_candidates(_target("mk1-ipumodel")) == [(8, 8, 8), (8, 4, 8), (8, 2, 8)]
    assert pfc.candidates(CONV1, _target())[-2:] == [("HMAC", 1, 1), ("OUTER_PRODUCT", 1, 2)]


@pytest.mark.parametrize(
    ("chans", "groupings"),
    [(1, [1]), (8, [1, 2, 3, 4, 8]), (16, [1, 2, 3, 4, 6, 8, 16]), (9, [1, 2, 3, 5, 9])],
)
def test_hmac_groupings_lower_the_groups(chans, groupings) -> None:
    assert pfc.hmac_groupings(chans) == groupings


def _macs(params) -> int:
    """Multiply-accumulates reading a real input element, counted position by position."""
    (h, w), (kh, kw) = params.inputFieldShape, params.kernelShape
    (ph, pw), (oh, ow) = params.inputTransform.paddingLower, params.getOutputFieldShape()
    count = sum(
        0 <= y + i - ph < h and 0 <= x + j - pw < w
        for y in range(oh) for x in range(ow) for i in range(kh) for j in range(kw)
    )  # fmt: skip
    return (count * params.batchSize * params.inputChannelsPerConvGroup
            * params.outputChannelsPerConvGroup)  # fmt: skip


def test_floors_of_conv1() -> None:
    """conv1's floors from the formulas: 7 cycles a MAC for the outer product; for the
    horizontal MAC 496 fixed cycles a tile plus the least family (9 kernel positions,
    3, or both dimensions expanded with the expanded input's rearrangement)."""
    target, tiles = _target(), 1472
    macs = _macs(CONV1)
    assert macs == 1_721_344
    out = 32 * 28 * 28 * 8
    assert pfc.outer_product_floor(CONV1, target) == math.ceil(7 * macs / tiles)
    fixed = 58 + 9 * 6 + 23 + 15 + 10 + 6 * (16 + 16 + 19) + 5 * 6
    assert fixed == 496
    by_kernel = [fixed + math.ceil((14 * out * k + macs / 2) / tiles) for k in (9, 3)]
    b = math.ceil(32 * 28 * 28 * 9 * 4 / tiles)  # expanded input bytes a tile
    rearrange = math.ceil(5 * b / (4 * 4)) + math.ceil(b / 4)
    expanded = fixed + math.ceil(out * (14 + 9 / 2) / tiles) + rearrange
    assert pfc.hmac_floor(CONV1, target) == min(*by_kernel, expanded) == 3_365


def _dense(icg: int) -> int:
    """``getDenseDotProductCycles(2, true, true, icg)``."""
    return 7 + icg // 2 if icg % 2 == 0 else 7 + 1 + 2 * icg


def _hmac_tile(rows: int, width: int, kernel: int, icg: int, cit: int, cot: int) -> int:
    """Poplibs' horizontal-MAC estimate of one tile, FLOAT inputs and partials (no 1x1
    path), ``rows`` output rows (batch included) of ``width``, one conv group."""
    w = 6
    rsf = w // math.gcd(w, rows)
    max_part = -(-rows * rsf // w)
    runs = [width] * (max_part // rsf)
    if max_part % rsf:
        runs.append((max_part % rsf) * (width + rsf - 1) // rsf)
    per_k = 16 + sum(19 + s * (7 + _dense(icg)) if s else 7 for s in runs)
    inner = w * (16 + kernel * per_k)
    outer = 58 + 9 * w + (23 + -(-cit // icg) * (15 + cot * (10 + inner)))
    per_worker = math.ceil(rows * width / w)  # (one partial channel a group)
    zero = (math.ceil(per_worker / 2) + 14 - 9) * w * cot
    return outer + zero


def test_hmac_floor_is_below_its_estimates() -> None:
    """Every horizontal-MAC tile tried, unexpanded (batch 32 by rows) or expanded (the
    flattened field split, with the expanded input's rearrangement), costs more than
    the floor."""
    target = _target()
    floor = pfc.hmac_floor(CONV1, target)
    costs = [_hmac_tile(-(-28 // r), 28, 9, 1, 1, 8) for r in (1, 7, 14, 28, 46)]
    for fs in (1472, 1394, 1000, 500):
        b = math.ceil(25088 * 9 * 4 / fs)
        rearrange = math.ceil(5 * b / 16) + math.ceil(b / 4)
        for icg in pfc.hmac_groupings(9):
            costs.append(_hmac_tile(1, -(-25088 // fs), 1, icg, 9, 8) + rearrange)
    assert min(costs) > floor


def test_amp_bound_of_conv1_term_by_term() -> None:
    """conv1's expanded AMP plan (field 1394, AMP 8 / 8 on 8 units): 18 positions, 16
    input channels (9 padded), 8 output channels a tile, each term from its formula."""
    target = _target()
    best = pfc.amp_expanded_bound(CONV1, "TRAINING_FWD", target)
    assert (best["splits"], best["units"], best["groups"]) == ((1394, 1, 1), 8, (8, 8))
    ft, cit, cot = 18, 16, 8
    weights = math.ceil((cit * cot - cit * cot // 1394) * 4 / 4)
    partials = ft * cot * 4 // 4
    in_b, w_b = math.ceil(25088 * 16 * 4 / 1394), math.ceil(16 * 8 * 4 / 1394)
    transform = sum(math.ceil(5 * b / (4 * 4)) + math.ceil(b / 4) for b in (in_b, w_b))
    # ConvPartial1x1Out, FLOAT: 3 positions a worker, zeroing 4 a position (8 units)
    inner_z = max(6 * (46 + 2 + 4 * 3), 6 * (46 + 2 + 4 * 3) + 14)
    inner_nz = 6 * 46 + 14
    loads = 8 * 32 // 8
    compute = 50 + 13 + (15 + 19 + 6 + loads + inner_nz) + (11 + 18 + 7 + loads + inner_z)
    assert best["terms"] == {
        "input exchange": 0, "weight exchange": weights, "partials exchange": partials,
        "transform": transform, "compute": compute, "reduce": 0,
    }  # fmt: skip
    assert best["cycles"] == weights + partials + transform + compute == 1_789


def test_float_method_of_the_cnn_step() -> None:
    """The three CNN convolutions: the AMP bound below both floors."""
    target = _target()
    conv2 = poplin.ConvParams(FLOAT, 32, [14, 14], [3, 3], 8, 16, paddingLower=[1, 1],
                              paddingUpper=[1, 1])  # fmt: skip
    cases = [(CONV1, "TRAINING_FWD"), (conv2, "TRAINING_FWD"),
             (poplin.getGradientParams(conv2), "TRAINING_BWD")]  # fmt: skip
    for params, conv_pass in cases:
        r = pfc.float_method(params, conv_pass, target)
        assert r["method"] == "AMP"
        assert r["amp"]["cycles"] < min(r["hmac"], r["outer product"])
        assert np.isfinite(r["amp"]["temp bytes"])


def test_errors_name_what_is_wrong() -> None:
    half = poplin.ConvParams(HALF, 1, [8, 8], [3, 3], 4, 4)
    with pytest.raises(ValueError, match="required FLOAT inputs"):
        pfc.hmac_floor(half, _target())
    with pytest.raises(ValueError, match="pass 'TRAINING_WU'"):
        pfc.amp_expanded_costs(CONV1, "TRAINING_WU", _target(), 8, 8)
