"""The compiled and column-at-a-time paths of graph building and compiling, each against
an independent computation written here (numpy or plain Python): convolution field
assembly, run detection of connection pieces, the constant column checks, the vertex
types of a mixed ``addVertices`` call, the non-linearity plan per distinct region
sizes, remote writes found as runs, the stretches of variable placement, the union of
sent ranges and the placement order of memory blocks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from codelets_common import CopyVec, Scale, tiny_graph

from ipusim import ir
from ipusim.tile.memory import _placement_order
from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.graph_connections import _runs_of
from poplar_api.graph_constants import _fast_constants
from poplar_api.lowering import runs
from poplar_api.poplin.conv_blocks import Assembler
from poplar_api.popnn import nonlinearity
from poplar_api.popops.layout import (
    RPT_COUNT_MAX,
    UINT_MAX,
    PlannedVertices,
    split_pieces,
    split_regions,
    tile_regions,
)
from poplar_api.types import INT


# ----------------------------------------------------------------- field assembly
@pytest.mark.parametrize("seed", range(4))
def test_assembler_gathers_each_member_row_in_vertex_order(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = 40
    source = rng.integers(-1, 1000, 500)
    asm = Assembler(n)
    want: dict[int, tuple[list[int], list[int]]] = {}
    order = rng.permutation(n)
    for part in np.array_split(order, 4):  # shapes of different widths, members scattered
        members = np.sort(part) if seed % 2 else part
        width = int(rng.integers(1, 9))
        rel = rng.integers(0, 50, width)
        base = rng.integers(0, 400, members.size)
        psizes = rng.integers(1, 5, int(rng.integers(1, 4)))
        asm.gather(members, source, base, rel, psizes)
        for m, b in zip(members.tolist(), base.tolist(), strict=True):
            want[m] = ([int(source[b + r]) for r in rel], psizes.tolist())
    field = asm.field()
    flat = [x for v in range(n) for x in want[v][0]]
    sizes = [x for v in range(n) for x in want[v][1]]
    assert field.flat.tolist() == flat
    assert field.sizes.tolist() == sizes
    assert field.at.tolist() == [0, *itertools.accumulate(len(want[v][0]) for v in range(n))]


def test_assembler_rows_given_and_positions_from_the_end() -> None:
    asm = Assembler(3)
    asm.add(np.array([2, 0]), np.array([[7, 8], [5, 6]]), np.array([2]))
    # a negative position counts from the end of the source, as numpy indexing does
    asm.gather(np.array([1]), np.arange(10, 20), np.array([-1]), np.array([0]), np.array([1]))
    field = asm.field()
    assert field.flat.tolist() == [5, 6, 19, 7, 8]
    assert field.sizes.tolist() == [2, 1, 2]


# ----------------------------------------------------------------- runs of pieces
@pytest.mark.parametrize("seed", range(5))
def test_runs_of_pieces_match_a_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    ids = np.cumsum(rng.choice([1, 1, 1, 2, -3], 300))
    sizes = rng.integers(0, 6, 80)
    sizes = sizes[np.cumsum(sizes) <= ids.size]
    begins = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    want = [
        n > 0 and all(ids[k] == ids[k - 1] + 1 for k in range(b + 1, b + n))
        for b, n in zip(begins.tolist(), sizes.tolist(), strict=True)
    ]
    assert _runs_of(ids, begins, sizes).tolist() == want


# ----------------------------------------------------------------- constants
def test_constant_columns_checked_at_once() -> None:
    values = [np.arange(3.0), np.zeros(1)]
    labels = ["a", ""]
    sizes, arrays, dims = _fast_constants([FLOAT, FLOAT], [[3], [1]], values, labels, 7)
    assert sizes.tolist() == [3, 1] and dims == [(3,), (1,)] and arrays[0] is values[0]
    assert labels == ["a", "var8"]  # the unnamed one named after its variable id
    for shapes, vals in (
        ([(3,), [1]], values),  # a tuple shape
        ([[3], [True]], values),  # a bool is not a size
        ([[3], [1, 1]], values),  # two dimensions
        ([[3], [1]], [np.arange(3.0), np.zeros((1, 1))]),  # a 2-D value array
        ([[3], [2]], values),  # sizes and values disagree
    ):
        assert _fast_constants([FLOAT, FLOAT], shapes, vals, ["a", "b"], 0) is None
    assert _fast_constants([FLOAT, "float"], [[3], [1]], values, ["a", "b"], 0) is None


def test_add_constants_equal_one_add_constant_each() -> None:
    shapes = [[2], [3], [1], [4]]
    values = [np.array([1.0, 2.0]), np.array([3, 4, 5]), np.array([6.0]), np.arange(4.0)]
    types = [FLOAT, INT, HALF, FLOAT]
    names = ["", "b", "", "d"]
    g_bulk, g_one = tiny_graph(), tiny_graph()
    made = g_bulk.addConstants(types, shapes, values, names, [0, 1, 2, 3])
    one = []
    for i, (t, s, v) in enumerate(zip(types, shapes, values, strict=True)):
        one.append(g_one.addConstant(t, s, v, names[i]))
        g_one.setTileMapping(one[i], i)
    assert [made[i].name for i in range(4)] == [c.name for c in one]
    assert [made[i].shape() for i in range(4)] == [c.shape() for c in one]
    assert [made[i].elementType() for i in range(4)] == types
    for i in range(4):
        assert g_bulk.getTileMapping(made[i]) == g_one.getTileMapping(one[i])


# ----------------------------------------------------------------- vertex types
def test_mixed_vertex_types_numbered_by_first_appearance() -> None:
    graph = tiny_graph()
    cs = graph.addComputeSet("cs")
    order = [Scale, CopyVec, Scale, Scale, CopyVec]
    x = graph.addVariable(FLOAT, [len(order), 2], "x")
    y = graph.addVariable(FLOAT, [len(order), 2], "y")
    graph.setTileMapping(x, 0)
    graph.setTileMapping(y, 0)
    kinds, which = graph._vertex_kinds(order, len(order))
    assert [k.name for k in kinds] == [graph._vertex_type(Scale).name,
                                       graph._vertex_type(CopyVec).name]  # fmt: skip
    assert which.tolist() == [0, 1, 0, 0, 1]
    one, none = graph._vertex_kinds([Scale] * 3, 3)
    assert len(one) == 1 and none is None
    del cs


# ----------------------------------------------------------------- non-linearity plan
def _graph(tiles: int) -> Graph:
    device = IPUModel("ipu2")
    device.tilesPerIPU = tiles
    return Graph(device.createDevice().getTarget())


@pytest.mark.parametrize(("seed", "grad"), [(0, False), (1, True), (2, False), (3, True)])
def test_nonlinearity_plan_equals_planning_tile_by_tile(seed: int, grad: bool) -> None:
    rng = np.random.default_rng(seed)
    graph = _graph(16)
    n = 3000
    x = graph.addVariable(FLOAT, [n], "x")
    bounds = [0, *np.sort(rng.choice(np.arange(1, n), 30, replace=False)).tolist(), n]
    for (a, b), tile in zip(itertools.pairwise(bounds), rng.integers(0, 16, 31), strict=True):
        graph.setTileMapping(x.slice(a, b), int(tile))
    target = graph.getTarget()
    workers, vw = target.getNumWorkerContexts(), target.getVectorWidth(FLOAT)
    limit = 100
    want = []  # NonLinearity.cpp's choice, tile after tile
    for tr in tile_regions(graph, x, "test"):
        sizes = [int(r.size) for r in tr.regions]
        if len(sizes) == 1 and sizes[0] <= limit:
            want.append((tr.tile, "1D", tr.regions, False))
            continue
        least = (2 if grad or sum(sizes) > vw * workers else 1) * vw
        split = split_regions(sizes, vw, workers, least, UINT_MAX, RPT_COUNT_MAX * vw)
        want += [(tr.tile, "2D", p, True) for p in split_pieces(tr.regions, split)]
    got = nonlinearity._plan(graph, x, "1D", "2D", limit, grad)
    ref = PlannedVertices.of(want)
    assert got.classes == ref.classes
    for name in ("tiles", "rows", "counts", "sizes", "positions"):
        np.testing.assert_array_equal(getattr(got, name), getattr(ref, name))


# ----------------------------------------------------------------- remote writes
@pytest.mark.parametrize("seed", range(3))
def test_remote_writes_received_by_their_owners(seed: int) -> None:
    rng = np.random.default_rng(seed)
    graph = tiny_graph()
    tiles = graph.getTarget().getNumTiles()
    n = 96
    y = graph.addVariable(FLOAT, [n], "y")
    owner = np.repeat(rng.integers(0, tiles, n // 8), 8)
    graph.setTileMapping(y, 0)
    for k in range(n // 8):
        graph.setTileMapping(y.slice(8 * k, 8 * k + 8), int(owner[8 * k]))
    cs = graph.addComputeSet("cs")
    want = np.zeros(tiles, np.int64)
    for v, (a, b) in enumerate(itertools.pairwise(range(0, n + 1, 12))):
        written = np.arange(a, b) if v % 2 else a + rng.permutation(b - a)  # run or not
        tile = int(rng.integers(0, tiles))
        src = graph.addVariable(FLOAT, [b - a], f"src{v}")
        graph.setTileMapping(src, tile)
        vx = graph.addVertex(cs, CopyVec, {"src": src, "dst": y.elements(written)})
        graph.setTileMapping(vx, tile)
        graph.setPerfEstimate(vx, 10)
        np.add.at(want, owner[written][owner[written] != tile], 4)
    assert want.sum() > 0
    engine = Engine(graph, prog.Execute(cs))
    [out] = [s for s in ir.walk(engine.ir_program.entries[0])
             if isinstance(s, ir.Exchange) and s.name == "cs/ExchangeOut"]  # fmt: skip
    got = np.zeros(tiles, np.int64)
    got[out.tile] = out.bytes_received
    np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------- placement helpers
@pytest.mark.parametrize("seed", range(4))
def test_stretch_starts_merge_changes_and_bases(seed: int) -> None:
    rng = np.random.default_rng(seed)
    size = 200
    changes = np.unique(rng.integers(1, size, 25))
    bases = np.unique(rng.integers(0 if seed % 2 else 5, size + 20, 30))
    starts, holder = runs.stretch_starts(changes, bases, size)
    merged = np.unique(np.concatenate(([0], changes, bases[bases < size])))
    np.testing.assert_array_equal(starts, merged)
    want = (np.searchsorted(bases, merged, "right") - 1) % bases.size  # -1: the last
    np.testing.assert_array_equal(holder % bases.size, want)


@pytest.mark.parametrize("seed", range(4))
def test_union_of_sorted_ranges(seed: int) -> None:
    rng = np.random.default_rng(seed)
    lo = np.sort(rng.integers(0, 300, 60))
    hi = lo + rng.integers(0, 15, 60)
    covered = np.zeros(320, bool)
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        covered[a:b] = True
    got_lo, got_hi = runs.union_sorted(lo, hi)
    # every covered id inside exactly one interval, intervals apart by a gap
    mask = np.zeros(320, bool)
    for a, b in zip(got_lo.tolist(), got_hi.tolist(), strict=True):
        mask[a:b] = True
    np.testing.assert_array_equal(mask, covered)
    assert (got_lo[1:] > got_hi[:-1]).all()
    empty = runs.union_sorted(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert empty[0].size == empty[1].size == 0


def test_union_sorted_is_one_compiled_version_however_the_ranges_come() -> None:
    """Writeable, read-only, int32 and strided ranges give the same union through one
    machine-code version of the pass (each more is one more load per process)."""
    rng = np.random.default_rng(4)
    lo = np.sort(rng.integers(0, 300, 80))
    hi = lo + rng.integers(0, 15, 80)
    want = runs.union_sorted(lo, hi)
    frozen = lo.copy()
    frozen.flags.writeable = False
    wide = np.stack([lo, hi], axis=1)
    for a, b in ((frozen, hi), (lo.astype(np.int32), hi), (wide[:, 0], wide[:, 1])):
        got = runs.union_sorted(a, b)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert len(runs._union_sorted.signatures) == 1


def test_placement_order_is_the_lexicographic_order() -> None:
    rng = np.random.default_rng(0)
    n = 1000
    tile = rng.integers(0, 50, n)
    later = rng.integers(0, 2, n).astype(bool)
    first = rng.integers(-3, 40, n)
    want = np.lexsort((np.arange(n), first, later, tile))
    np.testing.assert_array_equal(_placement_order(tile, later, first), want)


@pytest.mark.parametrize("seed", range(3))
def test_fill_field_lays_out_runs_and_listed_ids(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, no_run = 30, -1
    lengths = rng.integers(0, 6, n)
    begin = np.where(rng.random(n) < 0.6, rng.integers(0, 1000, n), no_run)
    listed = np.flatnonzero(begin == no_run)
    lists = [rng.integers(0, 1000, int(lengths[v])) for v in listed.tolist()]
    want: list[int] = []
    for v in range(n):
        if begin[v] != no_run:
            want += range(int(begin[v]), int(begin[v] + lengths[v]))
        else:
            want += lists[int(np.searchsorted(listed, v))].tolist()
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    ids = np.empty(int(offsets[-1]), np.int32)
    joined = np.concatenate([np.zeros(0, np.int64), *lists])
    runs.fill_field(ids, offsets, begin, no_run, listed, joined)
    assert ids.tolist() == want
