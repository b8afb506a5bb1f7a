"""Serial splits over input channels (Poplibs' ``inChanSplit.serial``) and the costs a
serial split adds (``addEstimates`` in ``lib/poplin/ConvModel.cpp`` at graphcore/poplibs
7eac0f26): estimates worked out by hand from Poplibs' formulas, plans whose one-pass
candidates do not fit, their products against numpy, and the operands' layout."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin, poputil
from poplar_api import program as prog
from poplar_api.poplin.conv_planner import memory_limit
from poplar_api.poplin.serial_estimates import serial_options, serial_terms
from tests.test_poplin import run_product

RNG = np.random.default_rng(28)

#: (m, k, n) and availableMemoryProportion on the tiny device (8 tiles of 64 KiB) at
#: which no one-pass plan of the FLOAT product fits and the planner splits the input
#: channels serially (the bound is 600 bytes).
SHAPE, PROPORTION = (8, 512, 8), "0.009155"


def _slice(elements: int, serial: int, vw: int, workers: int = 6) -> int:
    """``getDynamicSlice1DEstimate`` (popopsCycleEstimators.cpp) of ``ceil(elements /
    serial)`` 32-bit elements, one sub-element: supervisor ``11 + 1 + 6 + 1 + 6``, per
    worker ``39 + 24 + 2 * (ceil(region / workers) // vw)``."""
    region = -(-elements // serial)
    copies = -(-region // workers) // vw
    return 25 + workers * (39 + 24 + 2 * copies)


def _cat() -> dict[str, np.ndarray]:
    """One candidate of a 16-way input-channel split of the product's convolution
    (``Ci`` 512 -> 32 an iteration): 8 tiles, blocks field 4 x Co 8 x Ci 8."""
    return {
        "used": np.array([8]),
        "parts": np.array([[1, 1, 2, 1, 4]]),
        "blocks": np.array([[1, 1, 4, 8, 8]]),
        "ocg": np.array([8]),
    }


def test_input_channel_serial_terms_are_poplibs_estimates() -> None:
    """Per iteration: the slices of the tile's share of the weights and of the inputs
    (512 elements each, sliced 16 ways), and the in-place ADD of its 8 outputs
    (``getBinaryOp1DInPlaceEstimate``: ``6 (58 + 3) + 11``, a float vector of 2 a
    3-cycle loop); once: the cast of the 8 outputs (``estimateCastCycles``: ``6 (1 +
    26)``); bytes: the 8 accumulated float partials."""
    target = IPUModel("tiny").createDevice().getTarget()
    params = poplin.ConvParams(FLOAT, 1, [8], [1], 512, 8)
    per_iter, once, extra = serial_terms(params, _cat(), 16, "in", FLOAT, target)
    assert _slice(512, 16, 2) == 439
    assert per_iter.tolist() == [439 + 439 + 377]
    assert once.tolist() == [162]
    assert extra.tolist() == [32]


def test_output_channel_serial_terms_are_poplibs_estimates() -> None:
    """Split over output channels: the weights' slice and the update of the tile's
    outputs (``addDynamicUpdateEstimate``: 8 float outputs sliced by ``S``), nothing
    once, no extra bytes."""
    target = IPUModel("tiny").createDevice().getTarget()
    params = poplin.ConvParams(FLOAT, 1, [8], [1], 512, 8)
    per_iter, once, extra = serial_terms(params, _cat(), 2, "out", FLOAT, target)
    assert per_iter.tolist() == [_slice(512, 2, 2) + _slice(8, 2, 2)] == [655 + 403]
    assert once.tolist() == [0] and extra.tolist() == [0]


def test_serial_options_are_divisors_up_to_sixteen() -> None:
    assert serial_options(512) == [2, 4, 8, 16]
    assert serial_options(30) == [2, 3, 5, 6, 10, 15]
    assert serial_options(7) == [7]


def test_a_product_whose_partials_are_small_splits_its_input_channels() -> None:
    """8 x 512 x 8 FLOAT with a 600-byte bound: a tile's inputs and weights over its share
    of the 512 input channels take at least ``4 (8 + 8) 512 / 8 = 4,096`` bytes when every
    tile works on different channels (more when it does not), so no one-pass plan fits,
    nor one split over output channels (each iteration has every input channel); a
    16-way split over input channels divides them, so the plan splits the input channels
    and fits."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    opts = {"availableMemoryProportion": PROPORTION}
    limit = memory_limit(graph.getTarget(), opts)
    assert limit < 4 * (8 + 8) * 512 // 8
    plan = poplin.getPlan(graph, (1, *SHAPE), FLOAT, options=opts)
    assert plan.in_serial > 1 and plan.serial == 1
    assert plan.memory_bytes <= limit
    total = sum(v for k, v in plan.cost.items() if k != "total")
    assert plan.cost["total"] == total and plan.cost["serial_copy"] > 0


@pytest.mark.parametrize("dtype", [FLOAT, HALF])
def test_input_channel_serial_plans_compute_the_product(dtype) -> None:
    """Poplibs' loop (``Convolution.cpp``): each iteration slices its inputs and weights at
    the loop counter; the first iteration's partials are copied into an accumulator, the
    others added to it in place, and (HALF) the sum is cast once after the loop."""
    m, k, n = SHAPE
    opts = {"availableMemoryProportion": PROPORTION}
    plan = poplin.getPlan(Graph(IPUModel("tiny").createDevice().getTarget()), (1, m, k, n),
                          dtype, options=opts)  # fmt: skip
    assert plan.in_serial > 1
    host = np.float16 if dtype == HALF else np.float32
    av = RNG.uniform(0.5, 1.5, (m, k)).astype(host)
    bv = RNG.uniform(0.5, 1.5, (k, n)).astype(host)
    c, engine, _ = run_product("tiny", av, bv, dtype, opts=opts, layout="linear")
    want = av.astype(np.float64) @ bv.astype(np.float64)
    rtol = 2e-3 if dtype == HALF else 1e-5
    np.testing.assert_allclose(c, want, rtol=rtol)
    names = [r.name for r in engine.getTrace().records]
    n = plan.in_serial
    # one loop body run n times: the slices at the counter, the convolution, the sum
    for step in ("inputSerialSlice/slice", "weightsSerialSlice/slice", "serial/Convolve",
                 "loopIncrement"):  # fmt: skip
        assert names.count(f"mm/{step}") == n, step
    # the first iteration's partials are copied into the accumulator where they lie
    assert names.count("mm/serialInChanAccum") == n - 1
    first = [x for x in names if x.startswith("mm/serialInChanAccum/")]
    assert first == ["mm/serialInChanAccum/OnTileCopy"]
    assert any(x == "mm/cast" for x in names) == (dtype == HALF)


def test_operands_of_an_input_channel_serial_plan_are_spread_over_its_tiles() -> None:
    """Each iteration uses the same blocks, so every tile holds its block's share of the
    input channels of every iteration: the operands laid out for the plan spread evenly
    (all but the first iteration's channels went to the last input-channel part before)."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    opts = {"availableMemoryProportion": PROPORTION}
    m, k, n = SHAPE
    plan = poplin.getPlan(graph, (1, m, k, n), FLOAT, options=opts)
    assert plan.in_serial > 1 and plan.num_tiles_used == 8
    for t in (
        poplin.createMatMulInputLHS(graph, FLOAT, [m, k], [k, n], "a", opts),
        poplin.createMatMulInputRHS(graph, FLOAT, [m, k], [k, n], "b", opts),
    ):
        counts = np.bincount(graph.elementTiles(t).reshape(-1), minlength=8)
        assert counts.max() <= 2 * counts.mean(), counts


def test_the_cheapest_serial_split_is_taken_not_the_first_that_fits(monkeypatch) -> None:
    """J GEMM 1000 x 256 x 30000 on Mk1 (swapped: 1000 output channels, 256 input
    channels): Poplibs minimises cycles over every serial split within the bound
    (``minimizeCycles``). 4 output-channel passes are the fewest that fit, 5 are cheaper
    by the closed forms; no input-channel split fits (a tile's partials and accumulated
    partials take at least ``2 x 4 x ceil(1000 x 30000 / 1216)`` bytes). (ipusim's own
    search: the product is planned as Poplibs' planner picks it, 3 passes of which the
    last is padded, ``tests/test_poplibs_plans.py``.)"""
    from poplar_api.poplin import conv_planner as cp

    graph = Graph(IPUModel("mk1-ipumodel").createDevice().getTarget())
    target = graph.getTarget()
    limit = memory_limit(target, {})
    assert limit < 2 * 4 * -(-1000 * 30000 // 1216)
    params = poplin.matmul._params((1, 30000, 256, 1000), HALF, HALF)
    best = {}
    for kind, chans in (("out", 1000), ("in", 256)):
        for s in serial_options(chans):
            c = cp._gather(params, [("AMP", 8), "HMAC"], FLOAT, target, s, False, False,
                           "NONE_MATMUL", True, kind)  # fmt: skip
            fits = c["memory"] <= limit
            if fits.any():
                best[(kind, s)] = int(c["total"][fits].min())
    assert min(best) == ("out", 4) and all(kind == "out" for kind, _ in best)
    cheapest = min(best, key=best.get)
    assert cheapest == ("out", 5) and best[cheapest] < best[("out", 4)]
    monkeypatch.setattr(poplin.matmul, "adopted_plan", lambda *a, **k: None)
    plan = poplin.getPlan(graph, (1, 1000, 256, 30000), HALF)
    assert plan.swapped and plan.serial == 5 and plan.in_serial == 1


def test_an_input_channel_loop_leaves_the_plans_of_other_products_alone() -> None:
    """The product of one iteration's input channels, built after the loop in the same
    graph, is planned as in a graph of its own (not as the loop's cached iteration)."""
    m, k, n = SHAPE
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    opts = {"availableMemoryProportion": PROPORTION}
    serial = poplin.getPlan(graph, (1, m, k, n), FLOAT, options=opts).in_serial
    assert serial > 1
    a = graph.addVariable(FLOAT, [m, k], "a")
    b = graph.addVariable(FLOAT, [k, n], "b")
    poputil.mapTensorLinearly(graph, a)
    poputil.mapTensorLinearly(graph, b)
    poplin.matMul(graph, a, b, prog.Sequence(), "mm", opts)
    shape = (1, m, k // serial, n)
    alone = Graph(IPUModel("tiny").createDevice().getTarget())
    assert poplin.getPlan(graph, shape, FLOAT, options=opts) == poplin.getPlan(
        alone, shape, FLOAT, options=opts
    )
