"""The MAC and HALF-partials candidates of Poplibs' planner cost model for a matMul product
(:mod:`poplar_api.poplin.poplibs_mac_estimates`, :mod:`poplar_api.poplin.poplibs_matmul_model`):
the closed forms against the estimators of ``PerformanceEstimation.hpp`` (graphcore/poplibs
7eac0f26) transcribed here loop by loop, the vertical MAC's floor against a search over
every split, the HALF-partials AMP against ipusim's vertex estimator of the same
``ConvPartial1x1Out`` formulas, and the plans of the 16 x 1000 x 1000 layer's passes
planned alone (docs/planner.md, rows 7-9)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim.config import load_config
from poplar_api import HALF, Graph, IPUModel
from poplar_api.poplin import amp
from poplar_api.poplin.conv_options import parse_options
from poplar_api.poplin.poplibs_mac_estimates import (
    hmac_partial_cycles,
    vmac_floor,
    vmac_partial_cycles,
)
from poplar_api.poplin.poplibs_matmul_model import (
    Product,
    _best,
    _prune,
    costs,
    partial_cycles,
    partitions,
    poplibs_matmul_plan,
    vertex_types,
)
from poplar_api.poplin.poplibs_plans import adopted_plan, model_plan

W = 6


def _target(preset: str):
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()


# --- PerformanceEstimation.hpp, transcribed loop by loop (HALF inputs, FLOAT partials) ----
def _dense_dot(vector_width: int, size: int) -> int:
    """``getDenseDotProductCycles(vw, false, true, size)``."""
    inner = (1 + 2) * 1 + 0 + 3 + 1
    for i in range(math.ceil(math.log2(vector_width)), -1, -1):
        width = 1 << i
        if size % width == 0:
            per = 1 if width >= 4 else 2
            extra = 1 if width < 4 else 0
            return inner + extra + (size // width) * per - 1
    raise AssertionError


def _hmac_worker(in_chans: int, out_chans: int, sizes: list[int]) -> int:
    """``getConvPartialHorizontalMacCycleEstimate``, the 1x1 implementation."""
    cycles = 16 - 15
    for s in sizes:
        if s == 0:
            cycles += 7
        else:
            cycles += 13
            if out_chans == 1:
                cycles += 1 + s * (2 + _dense_dot(4, in_chans))
            else:
                cycles += s * (7 + out_chans * _dense_dot(4, in_chans))
    return cycles


def _hmac_reference(ft: int, cit: int, cot: int, gt: int, icg: int) -> int:
    """``addPartialCalcCycleEstimate``'s horizontal MAC for a tile of a matMul product."""
    rows = 1  # the batch of the flattened convolution
    split = W // math.gcd(W, rows)
    max_part = (rows * split + W - 1) // W
    whole, part = max_part // split, max_part % split
    worker: list[int] = [ft] * whole
    if part:
        worker.append(part * (ft + split - 1) // split)
    partitions_ = [[worker]]  # one worker partition, one kernel position
    hi, lo = 0, 0  # (one used context, fewer than the workers: the least is 0)
    for ctx in partitions_:
        this = sum(_hmac_worker(icg, 1, ctx[k]) for k in range(1)) + 16
        hi = max(hi, W * this)
    inner = max(hi, lo)
    nig, nog, ncg = -(-cit // icg), cot, gt
    outer = 65 - 10 + W * 9 + W * 15 + ncg * (23 + nig * (15 + nog * (10 + inner)))
    zero = 0
    if nig != 1:  # estimateZeroSupervisorCycles, FLOAT partials, 64-bit data path
        worklist = [(ft * 1 + W - 1) // W] * W
        per = max((n + 1) // 2 + 14 - 9 for n in worklist)
        zero = per * W * nog * ncg
    return outer + zero


def _vmac_reference(ft: int, cit: int, gt: int) -> int:
    """``addPartialCalcCycleEstimate``'s vertical MAC (4 groups a group, one output
    channel) for a tile of a matMul product."""
    rows = ft
    split = W // math.gcd(W, rows)
    max_part = (rows * split + W - 1) // W
    whole, part = max_part // split, max_part % split
    worker = [1] * whole + [(1 + split - 1) // split] * part
    cycles = 19 + sum(7 + 5 + 3 + 2 * (s - 1) * (4 // 4) for s in worker)
    inner = W * cycles
    zero = 4 + -(-ft // 2)
    per_worker = (ft + W - 1) // W
    reduction = 10 - 1 + ((7 + 2 + 2 * (W - 1)) * per_worker) // 4
    ncg = -(-gt // 4)
    return 61 + 14 + 26 + (zero + 32 + cit * (24 + inner) + reduction) * ncg


@pytest.mark.parametrize("icg", [2, 4, 6, 8, 10, 16, 50, 100, 200, 1000])
def test_hmac_estimate_is_poplibs(icg) -> None:
    for ft in range(1, 61):
        for nig in (1, 2, 5):
            for cot, gt in ((1, 1), (3, 1), (7, 2)):
                cit = nig * icg
                got = int(hmac_partial_cycles(ft, cit, cot, gt, icg, W))
                assert got == _hmac_reference(ft, cit, cot, gt, icg), (ft, cit, cot, gt, icg)


def test_vmac_estimate_is_poplibs() -> None:
    for ft in range(1, 61):
        for cit in (1, 5, 17):
            for gt in (4, 8):
                got = int(vmac_partial_cycles(ft, cit, gt, W))
                assert got == _vmac_reference(ft, cit, gt), (ft, cit, gt)


@pytest.mark.parametrize("swapped", [True, False])
def test_vmac_floor_is_the_least_over_every_split(swapped) -> None:
    """Every split of the field (grains of 2), input channels and groups, the output
    channels split to one a tile, ``ceil(parts / tiles)`` serial passes."""
    target = _target("tiny")
    dims = (1, 6, 9, 10)
    _, m, k, n = dims
    field, co = (n, m) if swapped else (m, n)
    tiles = target.getNumTiles()
    best = None
    for tf in range(1, field // 2 + 1):
        for ti in range(1, k + 1):
            serial = max(1, -(-(tf * ti * co) // tiles))
            ft = -(-(field // 2) // tf) * 2
            c = serial * _vmac_reference(ft, -(-k // ti), 4)
            best = c if best is None else min(best, c)
    assert vmac_floor(dims, target, swapped) == best


@pytest.mark.parametrize("units", [16, 8])
def test_half_partials_amp_is_the_vertex_estimate(units) -> None:
    """The AMP with HALF partials (16 units: the common code path; 8: its own) against
    :func:`~poplar_api.poplin.amp.conv_partial_1x1_cycles` of the same tile."""
    target = _target("mk2-ipumodel")
    p = Product((1, 100, 16, 100), target, True, (16, units), "FC_TRAINING_WU", units,
                method="AMP", partials="half")  # fmt: skip
    for ft in range(1, 80):
        for nog in (1, 3):
            got = int(partial_cycles(p, np.int64(ft), np.int64(16), np.int64(nog * units),
                                     np.int64(1)))  # fmt: skip
            want = amp.conv_partial_1x1_cycles(
                [x for x in amp.split_field_elems(ft, W) if x], num_out_groups=nog,
                out_chans_per_group=units, weight_bytes_per_conv_unit=32,
                num_conv_units=units, coeff_load_bytes_per_cycle=8,
                num_worker_contexts=W, float_activations=False, float_partials=False,
            )  # fmt: skip
            assert got == want, (ft, nog)


def test_vertex_types_are_poplibs_candidates() -> None:
    """``getConvVertexHMACCandidates`` for 10 input channels: groupings 2, 4, 6, 10 (8
    gives as many groups as 6), ordered by padding; HALF partials only up to 16."""
    types = vertex_types(10, 8, True, 16)
    assert types[:2] == [("AMP", (16, 16), 16, "half"), ("AMP", (16, 8), 8, "half")]
    assert [t[1][0] for t in types if t[0] == "HMAC"] == [2, 10, 4, 6]
    assert all(t[3] == "float" for t in vertex_types(17, 8, True, 16))


def test_the_search_takes_the_least_hmac_plan() -> None:
    """A batch-1 1000 x 1000 forward pass on Mk2 planned alone: the model's plan is a
    horizontal MAC, and no one-pass HMAC candidate of any grouping is cheaper (each costed
    here over every partition)."""
    target = _target("mk2-ipumodel")
    bound = int(target.getBytesPerTile() * 0.6)
    plan = poplibs_matmul_plan((1, 1, 1000, 1000), target, "FC_TRAINING_FWD")
    assert plan["method"] == "HMAC" and plan["ties"] == 1
    amp_only = poplibs_matmul_plan((1, 1, 1000, 1000), target, "FC_TRAINING_FWD", mac=False)
    assert plan["cost"] < amp_only["cost"]
    least = None
    for swapped in (True, False):
        for method, groups, units, partials in vertex_types(1000, 8, True, 0):
            if method != "HMAC":
                continue
            p = Product((1, 1, 1000, 1000), target, swapped, groups, "FC_TRAINING_FWD", units,
                        method=method, partials=partials)  # fmt: skip
            c = costs(p, _prune(p, partitions(p), np.inf, bound))
            j = _best(c, bound)
            if j is not None:
                cost = (int(c.cycles[j]), int(c.temp_bytes[j]))
                least = cost if least is None else min(least, cost)
    assert plan["cost"] <= least


# the 16 x 1000 x 1000 layer's passes on Mk2, each planned alone (docs/planner.md rows 7-9)
ROWS = {
    "FC_TRAINING_FWD": ((1, 16, 1000, 1000), "AMP", (16, 8), "float", (3699, 4928)),
    "FC_TRAINING_BWD": ((1, 16, 1000, 1000), "AMP", (16, 8), "float", (3699, 4928)),
    "FC_TRAINING_WU": ((1, 1000, 16, 1000), "AMP", (16, 16), "half", (2587, 3328)),
}


@pytest.mark.parametrize("conv_pass", list(ROWS))
def test_the_passes_planned_alone(conv_pass) -> None:
    dims, method, groups, partials, cost = ROWS[conv_pass]
    target = _target("mk2-ipumodel")
    plan = poplibs_matmul_plan(dims, target, conv_pass)
    assert (plan["method"], plan["groups"], plan["partials"], plan["cost"]) == (
        method, groups, partials, cost,
    )  # fmt: skip
    assert plan["swapped"] and plan["ties"] == 1
    # the vertical MAC cannot be cheaper in either order
    assert min(vmac_floor(dims, target, s) for s in (True, False)) > cost[0]


def test_fully_connected_passes_below_the_mac_bound_are_covered() -> None:
    """The forward pass of rows 7-9: ``M K N / (4 T)`` (2,717) is below the plan's 3,699
    cycles, but the model searched the horizontal MAC, a fully-connected pass has no SLIC
    candidate and the vertical MAC's floor is far above: covered and adopted. The same
    product as a plain matMul is not (SLIC is not ruled out)."""
    target = _target("mk2-ipumodel")
    dims = (1, 16, 1000, 1000)
    fc = parse_options({"pass": "FC_TRAINING_FWD"}, "t")
    plain = parse_options({"pass": "NONE_MATMUL"}, "t")
    assert dims[1] * dims[2] * dims[3] // (4 * target.getNumTiles()) <= 3699
    assert model_plan(dims, fc, target) is not None
    assert adopted_plan(dims, HALF, HALF, fc, target) is not None
    assert model_plan(dims, plain, target) is None


def _model_parts(plan: dict) -> tuple[int, ...]:
    """The model's partition as a ConvPlan's parts ``(G, B, field, Co, Ci)``."""
    s = plan["splits"]
    return (s["convGroupSplit"], 1, s["fieldSplit"], s["outChanSplit.parallel"],
            s["inChanSplit.parallel"])  # fmt: skip


@pytest.mark.parametrize(
    ("release", "dims"), [("7eac0f26", (1, 1, 1000, 1000)), ("f927358", (1, 4, 1000, 1000))]
)
def test_a_horizontal_mac_plan_is_adopted(release, dims) -> None:
    """A pass the model plans on the horizontal MAC runs the model's plan: its operand
    order, partition and input grouping (the batch-4 forward pass of J's
    fc_layer_4_1000_1000_half on Mk2, planned as f927358: grouping 500, field 167 x Co 4 x
    Ci 2; docs/planner.md)."""
    cfg = load_config("mk2-ipumodel", overrides={"software.poplibs_release": release})
    target = Graph(IPUModel(cfg).createDevice().getTarget()).getTarget()
    fc = parse_options({"pass": "FC_TRAINING_FWD"}, "t")
    plan = model_plan(dims, fc, target)
    assert plan["method"] == "HMAC"
    _, conv = adopted_plan(dims, HALF, HALF, fc, target)
    assert (conv.method, conv.in_chans_per_group, conv.out_chans_per_group) == (
        "HMAC", plan["groups"][0], 1)  # fmt: skip
    assert conv.parts == _model_parts(plan) and conv.swapped == plan["swapped"]
    assert conv.release == release
    if release == "f927358":
        assert (plan["groups"], conv.parts) == ((500, 1), (1, 1, 167, 4, 2))


@pytest.mark.parametrize("dims", [(1, 4, 40, 40), (1, 2, 100, 100)])
def test_adopted_horizontal_mac_passes_match_numpy(dims) -> None:
    """Forward passes on the 8-tile target the model plans on the horizontal MAC: ipusim
    runs the model's partition and grouping, and the product's values are numpy's."""
    from poplar_api import poplin

    _, m, k, n = dims
    target = _target("tiny")
    opts = {"fullyConnectedPass": "TRAINING_FWD"}
    parsed = parse_options({"pass": "FC_TRAINING_FWD"}, "t")
    model = model_plan(dims, parsed, target)
    assert model["method"] == "HMAC"
    plan = poplin.getPlan(Graph(IPUModel("tiny").createDevice().getTarget()), dims, HALF, HALF,
                          opts)  # fmt: skip
    assert (plan.method, plan.in_chans_per_group, plan.parts) == (
        "HMAC", model["groups"][0], _model_parts(model))  # fmt: skip
    _assert_product_is_numpys(m, k, n, opts, 2829)


@pytest.mark.parametrize("dims", [(1, 4, 24, 16), (1, 8, 48, 40)])
def test_adopted_fully_connected_passes_match_numpy(dims) -> None:
    """Forward passes on the 8-tile target that only the vertical MAC's floor covers
    (``M K N / (4 T)`` below the plan's cycles; one unswapped, one swapped): ipusim plans
    the layer separately with the model's plan, and the product's values are numpy's."""
    from poplar_api import poplin

    _, m, k, n = dims
    target = _target("tiny")
    opts = {"fullyConnectedPass": "TRAINING_FWD"}
    parsed = parse_options({"pass": "FC_TRAINING_FWD"}, "t")
    assert (
        m * k * n // (4 * target.getNumTiles())
        <= poplibs_matmul_plan(dims, target, "FC_TRAINING_FWD")["cost"][0]
    )
    adopted = adopted_plan(dims, HALF, HALF, parsed, target)
    assert adopted is not None
    plan = poplin.getPlan(Graph(IPUModel("tiny").createDevice().getTarget()), dims, HALF, HALF,
                          opts)  # fmt: skip
    assert not plan.joint and (plan.parts, plan.swapped) == (adopted[1].parts, adopted[1].swapped)
    _assert_product_is_numpys(m, k, n, opts, 2828)


def test_a_poplibs_horizontal_mac_plan_runs_its_grouping() -> None:
    """The vertex estimate of a horizontal-MAC plan Poplibs' planner picked loops over the
    tile's input groups of the plan's grouping (``tileNumInGroups``); a plan of ipusim's
    own search runs a tile's channels as one group. Halving the grouping of an adopted plan
    (two groups a tile) changes its estimate; the same plan without the release does not."""
    import dataclasses

    from poplar_api.poplin.conv_vertex_estimates import largest_block_estimate

    target = _target("tiny")
    fc = parse_options({"pass": "FC_TRAINING_FWD"}, "t")
    params, conv = adopted_plan((1, 4, 40, 40), HALF, HALF, fc, target)
    assert conv.method == "HMAC" and conv.release and conv.blocks[-1] == conv.in_chans_per_group
    estimate = largest_block_estimate(params, target)
    halved = dataclasses.replace(conv, in_chans_per_group=conv.in_chans_per_group // 2)
    own = dataclasses.replace(conv, release="")
    own_halved = dataclasses.replace(halved, release="")
    assert estimate(halved) > estimate(conv)
    assert estimate(own_halved) == estimate(own) == estimate(conv)


def _assert_product_is_numpys(m: int, k: int, n: int, opts: dict, seed: int) -> None:
    """The HALF product of random ``m x k`` and ``k x n`` operands made by
    createMatMulInputLHS / RHS with ``opts``, run on the 8-tile target, is numpy's."""
    from tests.test_poplin import run_product

    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, (m, k)).astype(np.float16)
    b = rng.uniform(-1, 1, (k, n)).astype(np.float16)
    c, _, _ = run_product("tiny", a, b, HALF, opts=opts, layout="created")
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-3, atol=2e-2)
