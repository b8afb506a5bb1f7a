"""Poplibs' reduction plan: vertex choice per tile layout, stages, values.

The expected plans are reasoned in each test from graphcore/poplibs at 7eac0f26
(``lib/popops/reduction/ReductionConnection.cpp``, ``ReductionStages.cpp``,
``ReductionPlan.cpp``, ``Reduction.cpp``); the values are compared with numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from popops_harness import run_graph

from poplar_api import FLOAT, HALF, INT, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.popops.reduce import Operation, ReduceParams, reduce, reduceWithOutput
from poplar_api.popops.reduce_connect import Ctx, choose_specialisation, connect_tile
from poplar_api.popops.reduce_plan import _hash_combine
from poplar_api.poputil import mapTensorLinearly

ALL = "ALL_REGIONS_CONTINUOUS"
SSI = "SCALAR_OUTPUT_SINGLE_INPUT"
STRIDED = "STRIDED_REDUCE"
SOR = "SCALAR_OUTPUT_REGIONS"
DEFAULT = "DEFAULT"


def _ctx(op, in_type, part_type, out_type, *, uses_input=True, split=True, update=False,
         scaled=False) -> Ctx:  # fmt: skip
    return Ctx(op, update, scaled, in_type, part_type, out_type, uses_input, split, 6)


def _summary(template):
    """(compute set, kind, specialisation, outputs, partials of the first output)."""
    return [(v.cs, v.kind, v.spec, len(v.outs), int(v.plen[0])) for v in template.vertices]


# ------------------------------------------------------------- vertex choice per layout


def test_max_half_region_is_split_by_columns_into_strided_vertices():
    # 8 columns x 32 rows (one tile of J-bert_reduce-1). dividePartials: MAX's grain is
    # the half vector width 4, so 2 pieces of 4 columns. 2 reductions < 6 workers, but
    # splitTwoStage does not pay: 30 + ceil(4*32 / opsPerCycle = 4) = 62 cycles, split in
    # 2 it is 60 + 32 // 2 = 76. Each piece: one region, 4 half outputs (8 bytes,
    # a multiple of 4 and 8), regular partials: isStridedReduction -> STRIDED_REDUCE.
    t = connect_tile(((8, 32, 1),), _ctx(Operation.MAX, HALF, HALF, HALF))
    assert _summary(t) == [(0, "single", STRIDED, 4, 32)] * 2
    assert t.temp_size == 0


def test_add_half_region_is_split_by_rows_over_the_workers():
    # The same layout with ADD into FLOAT partials (J-bert_reduce-2): the grain is 2 * 4
    # = 8, one piece. approx = 30 + ceil(256 / 4) = 94 (opsPerCycle(8, float, ADD) = 4);
    # maxSplit = min(32 / 2, 94 / 4) = 16; each extra split lowers 60 + 64 // k, so all 6
    # workers: splitRowsToWorkers(32, 6, 1) = [6, 6, 5, 5, 5, 5]. The first stage writes
    # 8 float partials per worker (STRIDED_REDUCE), the second compute set reduces the
    # 6 x 8 partials (one irregular piece of 48, a multiple of 8: STRIDED_REDUCE).
    t = connect_tile(((8, 32, 1),), _ctx(Operation.ADD, HALF, FLOAT, FLOAT))
    rows = [6, 6, 5, 5, 5, 5]
    assert _summary(t) == [(0, "first", STRIDED, 8, r) for r in rows] + [
        (1, "second", STRIDED, 8, 6)
    ]
    assert t.temp_size == 48


def test_large_inner_factor_makes_continuous_vertices_per_worker():
    # 12 columns, each 5 contiguous elements (innerFactor 5 = rows, outerFactor 1):
    # connectLargeInnerFactorReductions, findSplitsBetweenWorkers(6, 12) = 6 splits of 2
    # single-output reductions with equal, contiguous partials: ALL_REGIONS_CONTINUOUS.
    t = connect_tile(((12, 5, 5),), _ctx(Operation.ADD, FLOAT, FLOAT, FLOAT))
    assert _summary(t) == [(0, "single", ALL, 2, 5)] * 6


def test_long_vector_to_scalar_is_two_continuous_stages():
    # 1,000 contiguous floats to one output on one tile. No inner-factor path takes a
    # one-column region; 1 reduction < 6 workers: approx = 30 + 1000 / 4 = 280, maxSplit
    # = min(500, 70): 6 splits (60 + 250 // 6 = 101 < 280). splitRowsToWorkers(1000, 6,
    # grain 2) = [168, 168, 166, 166, 166, 166]. Every vertex has one output with
    # contiguous partials, and getReductionVertexSpecialisation tries
    # ALL_REGIONS_CONTINUOUS before SCALAR_OUTPUT_SINGLE_INPUT.
    t = connect_tile(((1, 1000, 1000),), _ctx(Operation.ADD, FLOAT, FLOAT, FLOAT))
    rows = [168, 168, 166, 166, 166, 166]
    assert _summary(t) == [(0, "first", ALL, 1, r) for r in rows] + [(1, "second", ALL, 1, 6)]


def test_small_inner_factor_splits_columns_then_reduces_the_runs():
    # 8 columns in runs of 4 (innerFactor 4), 8 runs each (J-bert_reduce-3):
    # connectSmallInnerFactorReductions. findMaxSplits(6, 1, 1) = 6;
    # getAllowedColumnSplits keeps i with 8 % i == 0 and (8 * 4 / i) % 4 == 0: 4 splits of
    # 2 columns. First stage: 2 * 4 = 8 float partials over the 8 runs (STRIDED_REDUCE);
    # second: 2 outputs of 4 contiguous partials (ALL_REGIONS_CONTINUOUS).
    t = connect_tile(((8, 32, 4),), _ctx(Operation.ADD, HALF, FLOAT, FLOAT))
    assert _summary(t) == [(0, "first", STRIDED, 8, 8), (1, "second", ALL, 2, 4)] * 4
    assert t.temp_size == 32


def test_intermediate_region_of_three_floats_is_default():
    # An intermediate stage (reductionUsesInput false, no worker split): 3 float outputs
    # of 18 partials. 12 bytes of partials is not a multiple of 8, so not strided; the
    # outputs are not single elements: DEFAULT. splitTwoStage: 30 + 54 (opsPerCycle 1)
    # = 84 against 60 + 27 = 87 split in two: one stage.
    ctx = _ctx(Operation.ADD, FLOAT, FLOAT, FLOAT, uses_input=False, split=False)
    assert _summary(connect_tile(((3, 18, 1),), ctx)) == [(0, "single", DEFAULT, 3, 18)]


# (op, in type, out type, widths, per output, contiguous, cheap, regular, uses input,
#  update/scale, expected): getReductionVertexSpecialisation's order of tests.
SPEC_TABLE = [
    # one output, contiguous partials: ALL_REGIONS_CONTINUOUS (ADD, SQUARE_ADD, MAX, MIN)
    (Operation.ADD, FLOAT, FLOAT, [1], [10], True, True, True, True, False, ALL),
    (Operation.MIN, HALF, HALF, [1, 1], [7, 7], True, True, True, True, False, ALL),
    # unequal partial counts: not continuous; one ADD output -> single input; two -> regions
    (Operation.MAX, FLOAT, FLOAT, [1, 1], [3, 4], True, True, True, True, False, SOR),
    # neither contiguous nor cheap to gather, reading the input: allRegionsContinuous
    # fails; isScalarOutputReduction with regular float partials (4 bytes) holds
    (Operation.ADD, FLOAT, FLOAT, [1], [9], False, False, True, True, False, SSI),
    # ... not with a scale or an update (SCALAR_OUTPUT_REGIONS), nor for half (2 bytes)
    (Operation.ADD, FLOAT, FLOAT, [1], [9], False, False, True, True, True, SOR),
    (Operation.ADD, HALF, HALF, [1], [9], False, False, True, True, False, SOR),
    # MUL has no continuous or strided assembly
    (Operation.MUL, FLOAT, FLOAT, [1], [9], True, True, True, True, False, SOR),
    (Operation.MUL, FLOAT, FLOAT, [4], [9], True, True, True, True, False, DEFAULT),
    # 4 half outputs: 8 bytes -> STRIDED_REDUCE; 2 half outputs: 4 bytes, not 8: DEFAULT
    (Operation.ADD, HALF, HALF, [4], [5], False, True, True, True, False, STRIDED),
    (Operation.ADD, HALF, HALF, [2], [5], False, True, True, True, False, DEFAULT),
    # 2 float outputs from float partials: 8 bytes each way -> STRIDED_REDUCE
    (Operation.MAX, FLOAT, FLOAT, [2], [5], False, True, True, True, False, STRIDED),
    # integer outputs have no strided assembly: DEFAULT
    (Operation.ADD, INT, INT, [2], [5], False, True, True, True, False, DEFAULT),
]


@pytest.mark.parametrize(
    ("op", "p", "o", "widths", "per_out", "contig", "cheap", "regular", "uses", "upd", "want"),
    SPEC_TABLE,
)
def test_specialisation_table(op, p, o, widths, per_out, contig, cheap, regular, uses, upd, want):
    ctx = _ctx(op, p, p, o, uses_input=uses, update=upd)
    got = choose_specialisation(
        ctx, "single", widths, per_out, contiguous=contig, cheap=cheap, regular=regular
    )
    assert got == want


def test_boost_hash_combine():
    # boost::hash_combine(seed, v): seed ^ (v + 0x9e3779b9 + (seed << 6) + (seed >> 2))
    assert _hash_combine(0, 0) == 0x9E3779B9
    seed = 0x9E3779B9
    want = (seed ^ (5 + 0x9E3779B9 + ((seed << 6) & (2**64 - 1)) + (seed >> 2))) & (2**64 - 1)
    assert _hash_combine(seed, 5) == want


# ------------------------------------------------------------------- stages and values


def _names(graph):
    return [cs.name for cs in graph._state.compute_sets]


@pytest.mark.parametrize("op", [Operation.ADD, Operation.MAX, Operation.SQUARE_ADD])
def test_many_tile_reduction_adds_an_intermediate_stage(op):
    # J-bert_reduce-5's shape in float over a Mk1 IPU: every output's 1,024 elements lie
    # on ~128 tiles, more than 2 * sqrt(1216) = 69.7 sources, and the on-tile stage leaves
    # more than 64 partials per output: calculateNextStep adds an intermediate stage.
    device = IPUModel("mk1").createDevice()
    graph = Graph(device.getTarget())
    shape = [128, 16, 8, 16]
    x = graph.addVariable(FLOAT, shape, "x")
    mapTensorLinearly(graph, x, 32, 2)
    seq = prog.Sequence()
    out = reduce(graph, x, [0, 2], ReduceParams(op), seq, "r")
    assert _names(graph) == ["r/ReduceOnTile/Reduce", "r/ReduceStage0/Reduce",
                             "r/ReduceFinalStage/Reduce"]  # fmt: skip
    graph.createHostWrite("x", x)
    graph.createHostRead("out", out)
    data = np.random.default_rng(1).uniform(-1, 1, size=shape).astype(np.float32)
    res, _ = run_graph(graph, seq, device, {"x": data}, {"out": ([16, 16], np.float32)})
    ref = {
        Operation.ADD: data.astype(np.float64).sum(axis=(0, 2)),
        Operation.MAX: data.max(axis=(0, 2)),
        Operation.SQUARE_ADD: (data.astype(np.float64) ** 2).sum(axis=(0, 2)),
    }[op]
    np.testing.assert_allclose(res["out"], ref, rtol=1e-4, atol=1e-4)


def test_update_and_scale_through_the_stages():
    device = IPUModel("mk1").createDevice()
    graph = Graph(device.getTarget())
    shape = [128, 16, 8, 16]
    x = graph.addVariable(FLOAT, shape, "x")
    mapTensorLinearly(graph, x, 32, 2)
    acc = graph.addVariable(FLOAT, [16, 16], "acc")
    mapTensorLinearly(graph, acc)
    seq = prog.Sequence()
    reduceWithOutput(graph, x, acc, [0, 2], ReduceParams(Operation.ADD, True, 0.5), seq, "u")
    graph.createHostWrite("x", x)
    graph.createHostWrite("acc", acc)
    graph.createHostRead("acc-read", acc)
    rng = np.random.default_rng(2)
    data = rng.uniform(-1, 1, size=shape).astype(np.float32)
    start = rng.uniform(-1, 1, size=[16, 16]).astype(np.float32)
    res, _ = run_graph(
        graph, seq, device, {"x": data, "acc": start}, {"acc-read": ([16, 16], np.float32)}
    )
    want = start + 0.5 * data.astype(np.float64).sum(axis=(0, 2))
    np.testing.assert_allclose(res["acc-read"], want, rtol=1e-4, atol=1e-4)


def test_half_add_layout_of_bert_reduce_2():
    # [16, 4, 16, 32, 8] over 1,024 tiles (256 elements, 32 rows x 8 columns, per tile):
    # every column on 4 tiles, several elements of a column on a tile: the on-tile stage
    # (two compute sets, rows split over the workers), then calculateNextStep goes to the
    # output (4 sources, 1,024 of 1,216 tiles used), mapped 8 floats per tile.
    device = IPUModel("mk1").createDevice()
    graph = Graph(device.getTarget())
    sub = graph.createVirtualGraph(0, 1024)
    shape = [16, 4, 16, 32, 8]
    x = sub.addVariable(HALF, shape, "x")
    mapTensorLinearly(sub, x, 64, 4)
    seq = prog.Sequence()
    out = reduce(sub, x, [1, 3], Operation.ADD, seq, "b")
    assert _names(graph) == ["b/ReduceOnTile/Reduce", "b/ReduceOnTile/Reduce_Second_Stage",
                             "b/ReduceFinalStage/Reduce"]  # fmt: skip
    tiles = graph.elementTiles(out).reshape(-1)
    # calcLinearTileMapping(2048, minElementsPerTile = 4 * 2, grain 2): 8 per tile
    np.testing.assert_array_equal(tiles, np.arange(2048) // 8)
    graph.createHostWrite("x", x)
    graph.createHostRead("out", out)
    data = np.random.default_rng(3).uniform(0, 1, size=shape).astype(np.float16)
    res, _ = run_graph(graph, seq, device, {"x": data}, {"out": ([16, 16, 8], np.float16)})
    ref = data.astype(np.float64).sum(axis=(1, 3))
    np.testing.assert_allclose(res["out"], ref, rtol=2e-3)


def test_bias_gradient_like_reduction_does_not_gather_from_every_tile():
    # 1,216 x 64 floats, 64 per tile of a Mk1 IPU, summed to one value. The on-tile stage
    # leaves 1,216 partials; calculateNextStep: 1,216 sources >= 2 * sqrt(1216) and
    # 1,216 > 64 partials per output, so an intermediate stage. calculateSplit: one
    # interval of depth 1,216, ideal piece 1,216 / 1,216 tiles = 1 partial; N = 1,216,
    # but 1,216 / N < 64 so N = 1,216 // 64 = 19 (rows per piece 64 >= 2): 19 tiles each
    # reduce 64 partials. Then 19 partials on 19 tiles: straight to the output.
    device = IPUModel("mk1").createDevice()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [1216 * 64], "x")
    mapTensorLinearly(graph, x)
    seq = prog.Sequence()
    out = reduce(graph, x, [0], Operation.ADD, seq, "bias")
    assert _names(graph) == ["bias/ReduceOnTile/Reduce", "bias/ReduceStage0/Reduce",
                             "bias/ReduceFinalStage/Reduce"]  # fmt: skip
    graph.createHostWrite("x", x)
    graph.createHostRead("out", out)
    data = np.random.default_rng(4).uniform(-1, 1, size=1216 * 64).astype(np.float32)
    res, engine = run_graph(graph, seq, device, {"x": data}, {"out": ([], np.float32)})
    np.testing.assert_allclose(res["out"], data.astype(np.float64).sum(), rtol=1e-4, atol=1e-3)
    active = {r.name: int((r.active_cycles > 0).sum()) for r in engine.getTrace().records
              if r.kind == "compute"}  # fmt: skip
    assert active == {"bias/ReduceOnTile/Reduce": 1216, "bias/ReduceStage0/Reduce": 19,
                      "bias/ReduceFinalStage/Reduce": 1}  # fmt: skip


def test_arg_max_first_stage_split_follows_poplibs():
    # popnn Loss.cpp argMinMaxSplitFirstReduction: at least 6 workers x 32 = 192
    # elements a tile, tiles counted down from the last. 32 x 10 on 1,472 tiles: 320
    # elements, so 2 tiles of 160 (16 rows each), every row one worker.
    from poplar_api.popnn.loss import split_first_reduction

    partials, info = split_first_reduction(1472, 6, 32, 10)
    assert partials == [1] * 32
    assert sorted({i[0] for i in info}) == [1470, 1471]
    # 4 x 1,000 on 1,216 tiles: 4,000 / 192 -> 21 tiles, boundaries t * 4000 // 21;
    # row 0 covers tiles 0..4 (190 or 191 elements, 6 workers of 32) and 48 elements of
    # tile 5 (2 workers): 32 partials.
    partials, info = split_first_reduction(1216, 6, 4, 1000)
    assert len({i[0] for i in info}) == 21
    assert partials[0] == 32
    assert [i[3] for i in info if i[1] == 0] == [190, 190, 191, 190, 191, 48]


def test_tiles_per_output_agrees_with_counting_each_rows_distinct_tiles():
    """Whether every output's inputs are on one tile and whether some output has two
    inputs on one tile (which choose the stages), against each row's distinct tiles
    counted with numpy, on layouts from one tile per output to more inputs than tiles."""
    from poplar_api.popops.reduce import _tiles_per_output

    rng = np.random.default_rng(3)
    cases = [
        np.full((3, 5), 7),
        np.arange(12).reshape(3, 4),
        np.repeat([[2], [9]], 6, 1),
        np.arange(12).reshape(3, 4) % 2,
        np.array([[4]]),
        np.array([[0, 1], [1, 1]]),
        np.array([[0, 1, 2], [2, 0, 1]]),
    ]  # (as many tiles as inputs, each once)
    for _ in range(200):
        rows, cols, span = (int(x) for x in rng.integers(1, 40, 3))
        cases.append(rng.integers(-2, span, (rows, cols)))
    for tiles in cases:
        distinct = np.array([np.unique(row).size for row in tiles])
        want = (bool((distinct == 1).all()), bool((distinct < tiles.shape[1]).any()))
        assert _tiles_per_output(tiles) == want, tiles


def _groups_by_numpy(pos: np.ndarray, tiles: np.ndarray) -> tuple[np.ndarray, ...]:
    """``input_groups`` in numpy array passes: keys scattered to memory order, a stable
    sort, group starts where the key changes, runs where positions are not consecutive."""
    n_out, n_red = pos.shape
    key_m = np.empty(pos.size, np.int64)
    key_m[pos.reshape(-1)] = tiles.reshape(-1) * n_out + np.repeat(np.arange(n_out), n_red)
    s_pos = np.argsort(key_m, kind="stable")
    key = key_m[s_pos]
    first = np.flatnonzero(np.r_[True, key[1:] != key[:-1]])
    g_len = np.diff(np.append(first, s_pos.size))
    brk = np.r_[True, (s_pos[1:] != s_pos[:-1] + 1) | (key[1:] != key[:-1])]
    runs = np.add.reduceat(brk.astype(np.int64), first)
    inner = np.where(g_len % runs == 0, g_len // runs, 1)
    run_len = np.bincount(np.cumsum(brk) - 1)
    g_of_run = np.repeat(np.arange(first.size), runs)
    uneven = np.bincount(g_of_run, weights=run_len != inner[g_of_run], minlength=first.size)
    inner = np.where(uneven > 0, 1, inner)
    return s_pos, key[first] // n_out, key[first] % n_out, g_len, inner


@pytest.mark.parametrize("seed", range(6))
def test_input_groups_are_those_of_numpy_array_passes(seed: int):
    """The compiled grouping of an on-tile stage's inputs against numpy's passes, on
    layouts of runs of random lengths on random tiles (even and uneven runs, groups
    of one element, a tile's column in several pieces) and a transposed input."""
    _compare_groups(seed)


def _compare_groups(seed: int) -> np.ndarray:
    """``input_groups`` of a random layout (see above) against numpy's; its inner factors."""
    from poplar_api.popops.reduce_plan import input_groups

    rng = np.random.default_rng(seed)
    n_out, n_red = int(rng.integers(1, 9)), int(rng.integers(1, 300))
    size = n_out * n_red
    lengths = rng.choice([1, 2, 4, 4, 4, 7], size)  # runs of one tile
    tile_mem = np.repeat(rng.integers(0, 16, size), lengths)[:size]
    if seed % 3 == 0:  # columns inner in memory ([rows, columns] reduced over rows)
        pos = np.arange(size).reshape(n_red, n_out).T
    elif seed % 3 == 1:  # each column's rows consecutive in memory, tiles over them
        pos = np.arange(size).reshape(n_out, n_red)
        tile_mem = np.repeat(rng.integers(0, 16, size), 12)[:size]
    else:
        pos = rng.permutation(size).reshape(n_out, n_red)
    tiles = tile_mem[pos]
    got = input_groups(pos, tiles)
    for g, w in zip(got, _groups_by_numpy(pos, tiles), strict=True):
        assert g.dtype == np.int64 and np.array_equal(g, w)
    return got[4]


def test_input_groups_cover_inner_factors_above_one():
    """The layouts above include groups whose runs give an inner factor above 1."""
    assert max(int(_compare_groups(seed).max()) for seed in (1, 4)) > 1
