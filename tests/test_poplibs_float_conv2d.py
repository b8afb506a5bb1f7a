"""poplibs_float_conv2d: Poplibs' cost of the unswapped AMP plans of a FLOAT 2-D
convolution in each expanded form, and the bounds of its other forms (docs/planner.md,
row 13). The forms' shapes and the cost terms of one partition are recomputed here from
Poplibs' formulas written out independently (graphcore/poplibs 7eac0f26,
``ConvModel.cpp``: ``calculateFlattenedParams``, ``addTransformCycleEstimate``,
``addExchangeCycleEstimates``, ``addTileLevelTransformEstimates``;
``PerformanceEstimation.hpp``: the ``ConvPartialnx1`` supervisor loop)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api.poplin import poplibs_float_conv2d as pfc
from poplar_api.poplin.poplibs_conv2d_model import SPLITS

CONV1 = poplin.ConvParams(FLOAT, 32, [28, 28], [3, 3], 1, 8, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip


def _target(preset: str = "mk2-ipumodel"):
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()


def _shape(p) -> tuple:
    return (p.batchSize, list(p.inputFieldShape), list(p.kernelShape),
            p.inputChannelsPerConvGroup, p.outputChannelsPerConvGroup,
            list(p.inputTransform.paddingLower), list(p.getOutputFieldShape()))  # fmt: skip


@pytest.mark.parametrize(
    ("dims", "shape"),
    [
        ((), (32, [28, 28], [3, 3], 1, 8, [1, 1], [28, 28])),
        # dimension 0 expanded: its kernel into the channels, the batch into it
        ((0,), (1, [32 * 28, 28], [1, 3], 3, 8, [0, 1], [896, 28])),
        ((1,), (1, [28, 32 * 28], [3, 1], 3, 8, [1, 0], [28, 896])),
        # both: one row of every position, 9 channels
        ((0, 1), (1, [1, 32 * 28 * 28], [1, 1], 9, 8, [0, 0], [1, 25088])),
    ],
)
def test_forms_expand_and_flatten(dims, shape) -> None:
    assert _shape(pfc.form_params(CONV1, dims)) == shape


@pytest.mark.parametrize(
    ("flat", "shape"),
    [
        # swapped: batch the 8 output channels, output channels the batch of 32, the kernel
        # the input's 28 x 28 (its padding left out)
        ((), (8, [55, 55], [28, 28], 1, 32, [0, 0], [28, 28])),
        # dimension 1's outputs into the output channels, its kernel into the input
        # channels, the batch into dimension 1
        ((1,), (1, [55, 8], [28, 1], 3, 32 * 28, [0, 0], [28, 8])),
        ((0,), (1, [8, 55], [1, 28], 3, 32 * 28, [0, 0], [8, 28])),
        ((0, 1), (1, [1, 8], [1, 1], 9, 32 * 28 * 28, [0, 0], [1, 8])),
    ],
)
def test_swapped_forms(flat, shape) -> None:
    assert _shape(pfc.swapped_params(CONV1, flat)) == shape


def test_terms_of_one_partition() -> None:
    """Dimension 1 expanded, AMP 4 / 8 on 8 units, field 14 x 100: tiles of 2 x 9
    outputs, a 3 x 1 kernel, 4 input channels (3 padded) and 8 output channels."""
    target = _target()
    sub = pfc.form_params(CONV1, (1,))
    splits = {k: np.array([v]) for k, v in zip(
        SPLITS, (1, 14, 100, 1, 1, 1), strict=True)}  # fmt: skip
    c = pfc.form_costs(sub, target, (8, 4, 8), splits, (True, True, False))
    e = float(target.getExchangeBytesPerCycle())
    used, cit, cot = 1400, 4, 8

    def exch(elements: int) -> int:  # ExchangeEstimator: bytes over round(16 E) / 16
        return math.ceil(elements * 4 * 16 / round(16 * e))

    weights = 3 * 1 * cit * cot
    assert c["weight exchange"][0] == exch(weights - weights // 1400)
    assert c["partials exchange"][0] == exch(2 * 9 * cot)
    assert c["input exchange"][0] == 0  # (one output-channel part: every input is there)
    memcpy = target.getDataPathWidth() // 8
    # the expanded input (28 rows x 896, 4 channels) and the weights rearranged, channels'
    # product 3 x 8 even: a factor of 4 / 5
    in_b = math.ceil(28 * 896 * 4 * 4 / used)
    assert c["input transform"][0] == math.ceil(in_b * 5 / (min(memcpy, 4) * 4)) + math.ceil(
        in_b / e
    )
    w_b = math.ceil(3 * 4 * 8 * 4 / used)
    assert c["weight transform"][0] == math.ceil(w_b * 5 / (min(memcpy, 4) * 4)) + math.ceil(
        w_b / e
    )
    assert c["output transform"][0] == 0  # (partials grouped by 8, no padding)
    # the kernel's 3 rows padded to the weight height 2: one row of zeros, and one more
    # input row for each of the tile's 9 columns
    assert c["padding"][0] == exch(1 * 1 * cit * cot) + exch((3 * 9 - 2 * 9) * cit)
    assert c["reduce"][0] == 0
    assert c["cycles"][0] == sum(int(c[k][0]) for k in c if k not in ("cycles", "bytes", "ok"))


def test_inner_kernel_floor() -> None:
    """Every tile of a kernel 28 wide in its inner dimension: 28 times the supervisor's
    12 + (weight loads 8 units x 32 bytes / 8 + 15 + 3) cycles, the outer loops' 14 and
    the least vertex's 44."""
    assert pfc._inner_kernel_floor(28, _target()) == 44 + 14 + 28 * (12 + 32 + 15 + 3)


def test_row13_plan_and_floors() -> None:
    """Row 13 (docs/planner.md): the least unswapped form is dimension 1 expanded, on
    ConvPartialnx1 with 4 input channels a group (a weight height of 2), unique; every
    other form's bound is above it."""
    target = _target()
    best = pfc.best_plan(CONV1, "TRAINING_FWD", target)
    assert best["form"] == "expanded 1" and best["vertex"] == (8, 4, 8)
    assert best["vertex name"] == "ConvPartialnx1" and best["ties"] == 1
    others = [v[0] for k, v in best["forms"].items() if k != "expanded 1"]
    assert min(others) > best["cost"][0]
    floors = pfc.form_floors(CONV1, "TRAINING_FWD", target, best["cost"][0])
    assert floors["plain serial"] is None  # (one input-channel grain, one output grain)
    assert all(v > best["cost"][0] for v in floors.values() if v is not None)


def test_canonical_gradient() -> None:
    """conv2's input gradient as ipusim's getGradientParams gives it (padding 2, the output
    truncated by 1 a side) is planned canonicalized: the truncation taken off the padding
    (ConvParams::canonicalize), the same 14 x 14 output."""
    conv2 = poplin.ConvParams(FLOAT, 32, [14, 14], [3, 3], 8, 16, paddingLower=[1, 1],
                              paddingUpper=[1, 1])  # fmt: skip
    grad = poplin.getGradientParams(conv2)
    assert list(grad.inputTransform.paddingLower) == [2, 2]
    c = pfc.canonical(grad)
    assert list(c.inputTransform.paddingLower) == list(c.inputTransform.paddingUpper) == [1, 1]
    assert not any(c.outputTransform.truncationLower + c.outputTransform.truncationUpper)
    assert list(c.getOutputFieldShape()) == list(grad.getOutputFieldShape()) == [14, 14]
    assert pfc.canonical(CONV1) is CONV1


def test_not_covered() -> None:
    half = poplin.ConvParams(HALF, 1, [8, 8], [3, 3], 4, 4)
    with pytest.raises(ValueError, match="FLOAT/FLOAT needed"):
        pfc.form_plan(half, "TRAINING_FWD", _target(), "plain")
    with pytest.raises(ValueError, match="pass 'FC_TRAINING_WU'"):
        pfc.form_plan(CONV1, "FC_TRAINING_WU", _target(), "plain")
    with pytest.raises(ValueError, match="form 'swapped'"):
        pfc.form_plan(CONV1, "TRAINING_FWD", _target(), "swapped")
