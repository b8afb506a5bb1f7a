"""The convolution planner's structure: candidate enumeration, Poplibs' temporary-memory
model, output-channel serial splits, the grouped output layout, order-preserving clones
and ``reportPlanInfo``.

References are computed here: brute-force enumerations, the memory formula of Poplibs'
``addConvTempMemoryEstimate`` written out, float64 numpy products.
"""

from __future__ import annotations

import io
import itertools
import math
import threading
from collections.abc import Callable

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin, poputil
from poplar_api import program as prog
from poplar_api.poplin import conv_planner, conv_splits
from poplar_api.poplin.conv_params import dim_maps
from poplar_api.poplin.conv_planner import _windows, memory_limit
from poplar_api.poplin.conv_splits import feasible as _feasible
from tests.test_poplin import run_product

RNG = np.random.default_rng(28)


def _graph(preset: str) -> Graph:
    return Graph(IPUModel(preset).createDevice().getTarget())


def test_feasible_splits_are_the_full_product_under_the_tile_count() -> None:
    opts = []
    for n in (3, 5, 4, 6):
        parts = np.sort(RNG.choice(np.arange(1, 12), n, replace=False))
        opts.append((parts, np.arange(n)))
    tiles = 60
    got = {tuple(int(x) for x in row) for row in zip(*_feasible(opts, tiles), strict=True)}
    want = {
        ix
        for ix in itertools.product(*[range(o[0].size) for o in opts])
        if math.prod(int(opts[d][0][i]) for d, i in enumerate(ix)) <= tiles
    }
    assert got == want


@pytest.mark.parametrize(
    "kernel,kwargs",
    [
        (3, {}),
        (3, {"stride": [2]}),
        (3, {"paddingLower": [2], "paddingUpper": [1]}),
        (3, {"dilation": [2]}),
        (1, {}),  # one-to-one: the block itself
        (1, {"stride": [2]}),
        (1, {"paddingLower": [4], "paddingUpper": [3]}),  # outputs reading only padding
        (23, {"paddingLower": [1], "paddingUpper": [1]}),  # a weight update's kernel
    ],
)
def test_windows_are_the_largest_input_range_of_any_block(kernel, kwargs) -> None:
    p = poplin.ConvParams(FLOAT, 1, [23], [kernel], 2, 2, **kwargs)
    m = dim_maps(p)[0]
    blocks = np.array([1, 2, 3, 5, 8, m.shape[1], m.shape[1] + 4])
    got = _windows([m], blocks, 0)
    for b, w in zip(blocks.tolist(), got.tolist(), strict=True):
        best = 0
        for lo in range(0, m.shape[1], b):
            cols = m[:, lo : lo + b]
            used = cols[cols >= 0]
            if used.size:
                best = max(best, int(used.max() - used.min() + 1))
        assert w == best


def test_temporary_memory_is_poplibs_window_weights_and_partials() -> None:
    """Poplibs' ``convTempBytes``: the tile's inputs and weights (input type) and its
    partials (vertex output type), whatever part of them was already on the tile."""
    graph = _graph("ipu2")
    plan = poplin.getPlan(graph, (1, 600, 256, 1000), HALF)
    _, _, mb, nb, kb = plan.blocks
    assert plan.serial == 1
    assert plan.memory_bytes == 2 * (mb * kb + kb * nb) + 4 * mb * nb


def _lower_bound(m: int, k: int, n: int, tiles: int, pk: int) -> float:
    """Least temporary bytes of a one-pass half product with ``pk`` input-channel parts."""
    per_tile = m * n * pk / tiles
    return 2 * (k / pk) * 2 * math.sqrt(per_tile) + 4 * per_tile


def test_a_product_no_one_pass_plan_fits_is_split_serially() -> None:
    """J GEMM 1000x256x30000 on Mk1: every one-pass plan needs more than 0.6 of a tile
    (a bound computed here), so the plan splits the output channels serially; each pass
    fits. A matmul is no fully-connected pass: the weights held before the loop are not
    counted (Poplibs' ``addRearrangeBeforeSliceEstimate``); a backward fully-connected
    pass counts them."""
    graph = _graph("mk1-ipumodel")
    target = graph.getTarget()
    limit = memory_limit(target, {})
    m, k, n = 1000, 256, 30000
    assert min(_lower_bound(m, k, n, target.getNumTiles(), pk) for pk in (1, 2, 4)) > limit
    plan = poplin.getPlan(graph, (1, m, k, n), HALF)
    co = m if plan.swapped else n  # a swapped product's output channels are A's rows
    # one pass's channels: a share of the channels, or (Poplibs' plan, the last pass
    # padded) whole grains of 8 rounded up
    per = plan.serial_chans or co // plan.serial
    assert plan.method == "AMP" and plan.serial > 1
    assert (plan.serial - 1) * per < co <= plan.serial * per
    assert plan.memory_bytes <= limit
    _, _, mb, nb, kb = plan.blocks
    assert plan.memory_bytes == 2 * (mb * kb + kb * nb) + 4 * mb * nb
    assert plan.parts[-2] * plan.blocks[-2] >= per
    params = poplin.ConvParams(HALF, m, [1], [1], k, n)
    fc = poplin.getConvPlan(graph, params, {"pass": "FC_TRAINING_BWD"})
    assert fc.serial > 1
    _, bb, fb, nb, kb = fc.blocks  # (G, B, field, Co, Ci): rows are batch x field
    mb = bb * fb
    weights = -(-2 * k * n // fc.num_tiles_used)
    assert fc.memory_bytes == 2 * (mb * kb + kb * nb) + 4 * mb * nb + weights


@pytest.mark.parametrize(
    "preset,shape",
    [
        ("mk1-ipumodel", (1, 200, 512, 30000)),
        ("mk1-ipumodel", (1, 600, 512, 10000)),
        ("mk2-ipumodel", (1, 1000, 512, 30000)),
    ],
)
def test_products_that_fit_with_amp_do_not_fall_back_to_the_mac(preset, shape) -> None:
    """Where an AMP plan fits the bound (shown by the plan itself), the planner must not
    settle for the horizontal MAC (which once took 5x the cycles on these rows)."""
    graph = _graph(preset)
    plan = poplin.getPlan(graph, shape, HALF)
    assert plan.method == "AMP"
    assert plan.memory_bytes <= memory_limit(graph.getTarget(), {})


def _serial_options(graph: Graph, m: int, k: int, n: int) -> dict[str, str]:
    """A memory proportion at which no one-pass plan fits but a serial one does."""
    for prop in np.arange(0.04, 0.4, 0.01):
        opts = {"availableMemoryProportion": f"{prop:.2f}"}
        plan = poplin.getPlan(graph, (1, m, k, n), FLOAT, options=opts)
        if plan.serial > 1 and plan.memory_bytes <= memory_limit(graph.getTarget(), opts):
            return opts
    raise AssertionError("no proportion gives a serial plan")


@pytest.mark.parametrize("shape", [(40, 64, 96), (17, 32, 48)])
def test_serial_plans_compute_the_product(shape) -> None:
    m, k, n = shape
    opts = _serial_options(Graph(IPUModel("tiny").createDevice().getTarget()), m, k, n)
    av = RNG.uniform(0.5, 1.5, (m, k)).astype(np.float32)
    bv = RNG.uniform(0.5, 1.5, (k, n)).astype(np.float32)
    out, engine, graph = run_product("tiny", av, bv, opts=opts, layout="linear")
    np.testing.assert_allclose(out, av.astype(np.float64) @ bv.astype(np.float64), rtol=1e-5)
    plan = poplin.getPlan(graph, (1, m, k, n), FLOAT, options=opts)
    passes = [r for r in engine.getTrace().records if r.name.endswith("/Convolve")]
    assert len(passes) == plan.serial
    # Poplibs' loop: one body, run once per pass, slices the weights at the loop counter
    # and updates the output at it (Convolution.cpp's weightsSerialSlice, serialUpdate)
    names = [r.name for r in engine.getTrace().records]
    for step in ("weightsSerialSlice/slice", "serial/Convolve", "serialUpdate/update",
                 "loopIncrement"):  # fmt: skip
        assert names.count(f"mm/{step}") == plan.serial, step


def test_a_serial_product_leaves_the_plans_of_other_products_alone() -> None:
    """A serial plan's loop body is lowered with the plan of one iteration; a product of
    the iteration's shape built later in the same graph is planned as in a graph of its
    own (before, it found the serial plan's iteration in the graph's plan cache, with
    the whole loop's cost, and took the other operand order)."""
    m, k, n = 40, 64, 96
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    opts = _serial_options(graph, m, k, n)
    serial = poplin.getPlan(graph, (1, m, k, n), FLOAT, options=opts).serial
    a = graph.addVariable(FLOAT, [m, k], "a")
    b = graph.addVariable(FLOAT, [k, n], "b")
    poputil.mapTensorLinearly(graph, a)
    poputil.mapTensorLinearly(graph, b)
    poplin.matMul(graph, a, b, prog.Sequence(), "mm", opts)
    for shape in ((1, m, k, n // serial), (1, m // serial, k, n)):
        alone = Graph(IPUModel("tiny").createDevice().getTarget())
        assert poplin.getPlan(graph, shape, FLOAT, options=opts) == poplin.getPlan(
            alone, shape, FLOAT, options=opts
        ), shape


def _runs(ids: np.ndarray) -> int:
    """Number of runs of consecutive element ids."""
    s = np.sort(ids)
    return int(1 + np.count_nonzero(np.diff(s) != 1)) if s.size else 0


def test_product_output_lies_in_runs_of_channel_groups() -> None:
    """Poplibs' partials shape ``[Co / cpg][B][field][cpg]``: on each tile the output's
    elements are one run per group of ``cpg`` output channels of the tile's block."""
    graph = _graph("ipu2")
    m, k, n = 64, 32, 96
    a = poplin.createMatMulInputLHS(graph, HALF, [m, k], [k, n], "a")
    b = poplin.createMatMulInputRHS(graph, HALF, [m, k], [k, n], "b")
    c = poplin.matMul(graph, a, b, prog.Sequence(), "mm")
    plan = poplin.getPlan(graph, (1, m, k, n), HALF)
    cpg = math.gcd(n, plan.out_chans_per_group)
    tiles = graph.elementTiles(c).reshape(-1)
    ids = c.flat_index()
    for t in np.unique(tiles):
        cols = np.unique(np.nonzero(tiles.reshape(m, n) == t)[1])
        groups = np.unique(cols // cpg).size
        assert _runs(ids[tiles == t]) <= groups


def test_clone_keeps_the_memory_order_of_its_source() -> None:
    """As Poplar's ``Graph::clone``: a transposed view's clone is the same view of a new
    variable (same relative order of elements, same tiles); a broadcast (aliases) clone
    is a plain row-major variable."""
    graph = _graph("tiny")
    v = graph.addVariable(FLOAT, [4, 6], "v")
    poputil.mapTensorLinearly(graph, v)
    src = v.transpose()
    clone = poputil.cloneTensor(graph, src, "c")
    assert clone.shape() == src.shape()
    np.testing.assert_array_equal(np.argsort(clone.flat_index()), np.argsort(src.flat_index()))
    np.testing.assert_array_equal(graph.elementTiles(clone), graph.elementTiles(src))
    wide = v[0].expand([0]).broadcast(3, 0)
    plain = poputil.cloneTensor(graph, wide, "p")
    assert np.all(np.diff(plain.flat_index()) == 1)


def test_report_plan_info_prints_the_levels_of_the_plan() -> None:
    graph = _graph("mk1-ipumodel")
    params = poplin.ConvParams(HALF, 1000, [1], [1], 256, 30000)
    out = io.StringIO()
    poplin.reportPlanInfo(out, graph, params)
    text = out.getvalue()
    plan = poplin.getConvPlan(graph, params)
    assert f"Estimated cost {{cycles {plan.cost['total']}, temporary bytes" in text
    for label, value in (
        ("outChanSplit.serial", plan.serial),
        ("outChanSplit.parallel", plan.parts[-2]),
        ("inChanSplit.parallel", plan.parts[-1]),
        ("batchSplit", plan.parts[1]),
        ("totalTiles", plan.num_tiles_used),
        ("method", plan.method),
    ):
        assert f"{label} " in text and str(value) in text.split(f"{label} ")[1].split("\n")[0]
    assert "partition #0" in text and "types #1" in text
    assert "vertex                   poplin::ConvPartial1x1Out" in text
    mm = io.StringIO()
    poplin.matMulReportPlan(mm, graph, HALF, HALF, [1000, 256], [256, 30000])
    assert mm.getvalue().splitlines()[0].startswith("  Estimated cost {cycles")


def test_planning_a_large_product_is_quick() -> None:
    """The candidate search builds only splits within the tile count (no thinning of
    the options at these sizes): a J GEMM plans in well under a second."""
    import time

    graph = _graph("mk2-ipumodel")
    start = time.perf_counter()
    poplin.getPlan(graph, (1, 1000, 512, 30000), HALF)
    assert time.perf_counter() - start < 3.0
    assert conv_splits.MAX_OPTIONS >= 300


def _poplibs_tile(g, b, f, co, ci, parts):
    """graphcore/poplibs ``linearizeConvIndices`` (7eac0f26) for one field dimension:
    conv group, input channels, batch, field, output channels innermost."""
    _, pb, pf, pco, pci = parts
    return (((g * pci + ci) * pb + b) * pf + f) * pco + co


@pytest.mark.parametrize("parts", [(1, 1, 35, 42, 1), (2, 3, 5, 4, 2), (1, 1, 67, 9, 2)])
def test_blocks_go_to_tiles_in_poplibs_order_on_one_ipu(parts) -> None:
    tiles = conv_planner.block_tiles(parts, 1472, 1472)
    assert tiles.shape == parts
    for index in itertools.product(*(range(p) for p in parts)):
        assert tiles[index] == _poplibs_tile(*index, parts)


def test_both_tiles_of_a_bus_pair_receive_one_input_block() -> None:
    """J-gemm-1.ipum2's swapped product split as Poplibs' cost model splits it (field
    35 x Co 42 on 1472 tiles): the tiles 2k and 2k + 1 hold two output-channel parts of
    one field block, so both receive its inputs (Poplibs' estimator counts them at
    twice a tile's rate). Spread evenly over the 1472 tiles, as before, 17 pairs held
    blocks of two field parts."""
    parts = (1, 1, 35, 42, 1)
    field_of = {}
    for index in itertools.product(*(range(p) for p in parts)):
        field_of[int(conv_planner.block_tiles(parts, 1472, 1472)[index])] = index[2]
    assert all(field_of[2 * k] == field_of[2 * k + 1] for k in range(35 * 42 // 2))
    spread = (np.arange(35 * 42) * 1472 // (35 * 42)).reshape(parts)
    old = {int(spread[i]): i[2] for i in itertools.product(*(range(p) for p in parts))}
    split = [k for k in range(736) if 2 * k in old and 2 * k + 1 in old]
    assert sum(old[2 * k] != old[2 * k + 1] for k in split) == 17


def test_blocks_are_spread_over_the_tiles_of_several_ipus() -> None:
    tiles = conv_planner.block_tiles((1, 1, 3, 2, 1), 16, 8)
    assert tiles.reshape(-1).tolist() == [0, 2, 5, 8, 10, 13]


#: Seconds a call that must return at once may take before it counts as hung.
HANG_SECONDS = 60.0


def _within_time(call: Callable[[], object], seconds: float = HANG_SECONDS) -> object:
    """``call()``'s result (or its exception, raised here), failing the test when it has
    not returned within ``seconds``: a compiled loop that never advances holds no lock
    a signal could break into, so it runs in a daemon thread that is left behind."""
    outcome: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            outcome.append((True, call()))
        except BaseException as exc:  # handed to the test's thread
            outcome.append((False, exc))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    if not outcome:
        pytest.fail(f"the call did not return within {seconds:g} s (a loop that never ends?)")
    ok, value = outcome[0]
    if not ok:
        raise value  # type: ignore[misc]
    return value


@pytest.mark.parametrize("bad", [0, -3])
def test_windows_rejects_a_block_size_below_one(bad) -> None:
    """A block of 0 (or less) cannot cut the outputs into chunks: the walk over the
    chunks would never advance, so the entry refuses it and names the value (within
    a time limit: the walk given such a block would hang the test run)."""
    p = poplin.ConvParams(FLOAT, 1, [23], [3], 2, 2, stride=[2])
    m = dim_maps(p)[0]
    with pytest.raises(ValueError, match=rf"block size must be at least 1.*smallest {bad}"):
        _within_time(lambda: _windows([m], np.array([4, bad, 2]), 0))
