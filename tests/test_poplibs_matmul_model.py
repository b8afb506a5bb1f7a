"""Poplibs' planner cost model of a matMul product (:mod:`poplar_api.poplin.poplibs_matmul_model`):
its terms for given partitions against the formulas of ``ConvModel.cpp``,
``ExchangeEstimator.hpp`` and ``PerformanceEstimation.hpp`` (graphcore/poplibs 7eac0f26)
evaluated here by hand, its reduction plans against ``getMultiStageReducePlanAndCost``
worked by hand, its rearrangement terms against the restatement the planner uses
(:func:`~poplar_api.poplin.conv_transform.transform_estimates`), and its search against
a direct minimum over the candidates."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import Graph, IPUModel
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_transform import transform_estimates
from poplar_api.poplin.poplibs_matmul_model import (
    SPLIT_NAMES,
    Product,
    _reduce_plan,
    _transforms,
    costs,
    partitions,
    poplibs_matmul_plan,
)
from poplar_api.types import HALF


def _target(preset: str):
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()


def _one(**splits: int) -> dict[str, np.ndarray]:
    full = {k: 1 for k in SPLIT_NAMES} | splits
    return {k: np.array([v], np.int64) for k, v in full.items()}


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def test_reduce_plans_are_poplibs_multi_stage_plans() -> None:
    # getMultiStageReducePlanAndCost by hand: 16 -> 2 stages, 4 + 16/4 = 8 < 5 + 16/5;
    # 32 -> 5 + 32/5 = 11.4 > 6 + 32/6 = 11.33; 125 -> 3 stages: 24 (= int(125^(2/3)),
    # cost 9.8 + 125/24 = 15.01) against 25 (cost 10 + 5 = 15)
    assert _reduce_plan(4) == [] and _reduce_plan(15) == []
    assert _reduce_plan(16) == [4]
    assert _reduce_plan(32) == [6]
    assert _reduce_plan(125) == [25, 5]


def test_terms_of_a_serial_candidate() -> None:
    """1000 x 512 x 30000 on Mk2, swapped: field 30000, Co = 1000 (125 grains of 8),
    Ci = 512; fieldSplit 105, outChanSplit 14 parallel x 3 serial."""
    t = _target("mk2-ipumodel")
    p = Product((1, 1000, 512, 30000), t, True, (16, 8))
    c = costs(p, _one(fieldSplit=105, **{"outChanSplit.parallel": 14,
                                         "outChanSplit.serial": 3}))  # fmt: skip
    ft, cot, cit = _ceil(30000, 105), _ceil(125, 14 * 3) * 8, 512
    inputs, weights, outputs = ft * cit, cit * cot, ft * cot
    scaled = round(t.getExchangeBytesPerCycle() * 16)
    x_in = _ceil((inputs - inputs // 14) * 2 * 16, scaled * 2)  # 14 tiles: pairs share a bus
    x_w = _ceil((weights - weights // 105) * 2 * 16, scaled)
    x_p = _ceil(outputs * 4 * 16, scaled)
    # regroupOutput (8 partial channels, not 16): the output spread over 1470 tiles
    out_bytes = _ceil(30000 * 1000, 1470) * 2
    transform = _ceil(out_bytes * 5, 8 * 4)
    # ConvPartial1x1Out: 286 positions over 6 workers (48 x 4, 47 x 2); 32 input and 3
    # output groups; weights loaded at 8 bytes a cycle (128-bit loads off)
    w = 6
    inner_z = max(w * (37 + (48 - 3) * 4 - 7), w * (37 + (47 - 3) * 4 - 7) + 14)
    inner_nz = max(w * (38 + (48 - 3) * 4 - 7), w * (38 + (47 - 3) * 4 - 7) + 14)
    loads = 8 * 32 // 8
    nig, nog = 32, 3
    compute = (50 + w * (7 + 3 * (nig - 1)) + 13
               + (nig - 1) * (15 + nog * (19 + 6 + loads + inner_nz))
               + 11 + nog * (18 + 7 + loads + inner_z))  # fmt: skip
    per_worker = _ceil(outputs, w)
    cast = (max(_ceil(per_worker, 2), _ceil(per_worker, 4)) + 26) * w
    assert c.terms["input exchange"].tolist() == [x_in, x_in]  # (and broadcast once)
    assert c.terms["weight exchange"][0] == x_w
    assert c.terms["partials exchange"][0] == x_p
    assert c.terms["transform"][0] == transform
    assert c.terms["compute"][0] == compute
    assert c.terms["reduce"][0] == cast
    per_iter = x_in + x_w + x_p + transform + compute + cast + c.terms["serial"][0]
    assert c.cycles.tolist() == [3 * per_iter, 3 * (per_iter - x_in) + x_in]
    assert c.broadcast.tolist() == [False, True]
    conv_in, conv_rest = 2 * inputs, 2 * weights + 4 * outputs
    assert c.temp_bytes.tolist() == [
        max(2 * out_bytes, conv_in + conv_rest),
        conv_in + max(2 * out_bytes, conv_rest),
    ]


def test_a_reduction_over_split_input_channels() -> None:
    """600 x 512 x 10000 on Mk1, swapped, inChanSplit 4: each tile reduces a quarter of
    its 167 x 120 outputs over 4 partials (one stage), with the several-input
    ReduceAdd (the exchanged partials are not under 1/16 of the tile)."""
    t = _target("mk1-ipumodel")
    p = Product((1, 600, 512, 10000), t, True, (16, 8))
    c = costs(p, _one(fieldSplit=60, **{"outChanSplit.parallel": 5,
                                        "inChanSplit.parallel": 4}))  # fmt: skip
    outputs = 167 * 120
    n = _ceil(outputs, 4)  # 5010 outputs of 4 partials each
    # getReduceCycleEstimate, several inputs, FLOAT partials, HALF output
    loops = n // 4 + ((n & 1) != 0) + ((n & 2) != 0)
    per, rem = divmod(loops, 6)
    extra = 2 * 4 + 13 if rem and n % 4 else 0
    per += 1 if rem and not n % 4 else 0
    reduce = (32 + extra + ((4 // 2 + 1) * 4 + 6) * per) * 6
    assert c.terms["reduce"][0] == reduce
    scaled = round(t.getExchangeBytesPerCycle() * 16)
    assert c.terms["partials exchange"][0] == _ceil(outputs * 4 * 16, scaled)
    # the reduction's temporary bytes: all partials of the tile's outputs
    assert c.temp_bytes[0] >= 4 * outputs


@pytest.mark.parametrize(
    ("dims", "conv_pass", "swapped", "groups"),
    [
        ((1, 1000, 256, 10000), "NONE_MATMUL", True, (16, 8)),
        ((1, 1000, 256, 10000), "NONE_MATMUL", False, (16, 16)),
        ((1, 1440, 400, 200), "FC_TRAINING_BWD", True, (16, 8)),
        ((2, 200, 1440, 400), "FC_TRAINING_WU", False, (16, 8)),
        ((1, 30, 40, 50), "NONE_MATMUL", True, (16, 8)),
    ],
)
def test_rearrangements_agree_with_the_planners(dims, conv_pass, swapped, groups) -> None:
    """The itemised ``addTransformCycleEstimate`` here sums to what ipusim's planner
    charges (:func:`transform_estimates`, a separate restatement) on every partition."""
    t = _target("mk2-ipumodel")
    p = Product(dims, t, swapped, groups, conv_pass)
    splits = partitions(p)
    used = splits["convGroupSplit"] * splits["fieldSplit"] * splits["outChanSplit.parallel"]
    used = used * splits["inChanSplit.parallel"]
    tr = _transforms(p, used)
    g, m, k, n = dims
    params = ConvParams(HALF, 1, [n if swapped else m], [1], k, m if swapped else n, g,
                        outputType=HALF)  # fmt: skip
    icg, ocg = (np.full(used.size, x) for x in groups)
    cycles, temp = transform_estimates(params, conv_pass, swapped, icg, ocg, used, t, 16)
    assert np.array_equal(tr["in"] + tr["w"] + tr["out"], cycles)
    assert np.array_equal(2 * np.maximum.reduce([tr["in_bytes"], tr["w_bytes"],
                                                 tr["out_bytes"]]), temp)  # fmt: skip


def test_the_plan_is_the_least_fitting_candidate() -> None:
    """200 x 64 x 10000 on Mk2: the least (cycles, bytes) within 0.6 of the tile over
    every one-pass partition of both orders and both AMP partial groupings."""
    t = _target("mk2-ipumodel")
    plan = poplibs_matmul_plan((1, 200, 64, 10000), t)
    bound = int(t.getBytesPerTile() * 0.6)
    best = None
    for swapped in (True, False):
        for groups in ((16, 8), (16, 16)):
            p = Product((1, 200, 64, 10000), t, swapped, groups)
            c = costs(p, partitions(p))
            ok = c.temp_bytes <= bound
            for cyc, b in zip(c.cycles[ok].tolist(), c.temp_bytes[ok].tolist(), strict=True):
                if best is None or (cyc, b) < best:
                    best = (cyc, b)
    assert plan["cost"] == best
    assert plan["one_pass"] == best and plan["ties"] == 1


def test_the_amp_inner_loop_is_the_vertex_estimators() -> None:
    """The closed form of the planner's ``ConvPartial1x1Out`` inner loop equals the vertex
    estimator's (:func:`~poplar_api.poplin.amp.inner_loop_cycles`) on every tile field up
    to 400 positions, with and without zeroing."""
    from poplar_api.poplin import amp
    from poplar_api.poplin.poplibs_amp_estimates import amp_1x1_inner as _amp_inner

    fields = np.arange(1, 401)
    for zeroing in (True, False):
        got = _amp_inner(fields, 6, zeroing)
        want = [
            amp.inner_loop_cycles([n for n in amp.split_field_elems(int(f), 6) if n],
                                  6, zeroing, False, True, 8)
            for f in fields
        ]  # fmt: skip
        assert got.tolist() == want


def test_no_operand_order_is_refused_by_name() -> None:
    """An empty ``swaps`` searches nothing: the error names the argument and what it
    needs, not a plan that does not fit (a product that fits in either order)."""
    t = _target("mk2-ipumodel")
    assert poplibs_matmul_plan((1, 200, 64, 10000), t, swaps=(False,))["swapped"] is False
    with pytest.raises(ValueError, match=r"swaps=\(\) names no operand order") as err:
        poplibs_matmul_plan((1, 200, 64, 10000), t, swaps=())
    assert "fits" not in str(err.value)
