"""Field tables of bulk-connected VectorLists: the ids are taken straight from the list
blocks (arrays or runs) and must be exactly those of the former way, which made an
array of positions and an array per block and then joined them (kept here as the
reference, :func:`_reference_block_lists`)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.graph_connections import RunSegments, Segments
from poplar_api.lowering import runs
from poplar_api.lowering.field_tables import (
    _block_lists,
    _block_parts,
    _join,
    _one_block_parts,
    _ranges,
)
from poplar_api.run_ids import RunIds
from tests.test_library_build_fast_paths import _vertex_class


def _reference_block_lists(table, members, name, dtype):
    """The former reading of VectorList ``name`` of ``members`` from the list blocks."""
    firsts = np.asarray(table.block_first, np.int64)
    k = np.searchsorted(firsts, members, side="right") - 1
    if (k < 0).any():
        return None
    counts = np.zeros(members.size, np.int64)
    parts, order = [], []
    for b in np.unique(k).tolist():
        at = np.flatnonzero(k == b)
        block = table.list_blocks[b]
        local = members[at] - block.first
        if (local >= block.n).any() or block.moved[local].any() or name not in block.fields:
            return None
        vec_offsets, begins, ends, ids = block.fields[name]
        counts[at] = vec_offsets[local + 1] - vec_offsets[local]
        order.append(at)
        vectors = _ranges(vec_offsets[local], vec_offsets[local + 1])
        b_, e_ = begins[vectors], ends[vectors]
        parts.append((b_, e_, np.asarray(ids[_ranges(b_, e_)])))
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    if len(order) > 1 and (np.diff(np.concatenate(order)) < 0).any():
        return None
    lengths = np.concatenate([e - b for b, e, _ in parts]) if parts else np.zeros(0, np.int64)
    inner_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    return offsets, inner_offsets, _join([ids for _, _, ids in parts], dtype)


def _all_runs(flat: np.ndarray) -> RunIds:
    starts = np.flatnonzero(np.r_[True, np.diff(flat) != 1])
    return RunIds(starts, flat[starts].astype(np.int64), flat.size, np.int32)


@pytest.fixture(scope="module")
def blocks_graph():
    """A graph with three list blocks: ids as runs, ids that are no runs, runs again."""
    cls = _vertex_class()
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    graph.addCodelets(cls)
    var = graph.addVariable(FLOAT, [2000], "v")
    graph.mapElements(var, 0)
    cs = graph.addComputeSet("cs")
    rng = np.random.default_rng(7)
    # block 0: 6 vertices, runs of consecutive ids (pieces across run borders)
    flat = np.r_[0:100, 300:420, 50:90, 1000:1130]
    sizes = np.array([30, 70, 20, 60, 40, 40, 5, 45, 50, 30])
    vectors = np.array([1, 2, 0, 3, 2, 2])
    graph.addVertices(cs, cls, [0] * 6, {"a": RunSegments(var, _all_runs(flat), sizes, vectors)})
    # block 1: 5 vertices, scattered ids (kept as an array)
    ids = rng.permutation(2000)[:300]
    sizes = np.array([10, 50, 40, 100, 20, 30, 50])
    vectors = np.array([2, 1, 1, 2, 1])
    graph.addVertices(cs, cls, [0] * 5, {"a": Segments(var.elements(ids), sizes, vectors)})
    # block 2: 4 vertices, one long run each
    flat = np.arange(1200, 1600)
    graph.addVertices(
        cs, cls, [0] * 4, {"a": RunSegments(var, _all_runs(flat), [100] * 4, [1] * 4)}
    )
    return graph


def _member_sets(n: int) -> list[np.ndarray]:
    every = np.arange(n)
    return [
        every,
        every[:6],
        every[6:11],
        every[11:],
        every[::2],
        every[[1, 3, 4, 7, 12]],
        np.array([2]),
        every[2:5],  # consecutive vertices inside one block
        every[4:8],  # consecutive vertices of two blocks
        every[::-1],  # out of order: read one vertex at a time
        np.array([11, 0, 1]),
        np.zeros(0, np.int64),
    ]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_block_lists_match_the_former_way(blocks_graph, dtype) -> None:
    table = blocks_graph._state.vertices
    kinds = {type(b.fields["a"][3]).__name__ for b in table.list_blocks}
    assert kinds == {"RunIds", "ndarray"}  # both ways of holding ids are read
    read = []
    for members in _member_sets(15):
        got = _block_lists(table, members.astype(np.int64), "a", dtype)
        want = _reference_block_lists(table, members.astype(np.int64), "a", dtype)
        if want is None:
            assert got is None
            continue
        offsets, inner, ids, held = got
        if held is not None:  # kept as the runs of its vectors: the same ids
            assert ids is None
            ids = runs.expand(held[0], held[1] - held[0])
        else:
            assert ids.dtype == dtype
        read.append(int(ids.size))
        for g, w in zip((offsets, inner, ids), want, strict=True):
            np.testing.assert_array_equal(g, w)
    # sizes per vertex: 30, 90, 0, 140, 50, 80 | 60, 40, 100, 50, 50 | 100 x 4
    # (all but the two out of order)
    assert read == [1090, 390, 300, 400, 490, 420, 0, 190, 230, 0]


def _parts_equal(got: tuple, want: tuple) -> None:
    """Two ``(offsets, parts)`` of :func:`_block_parts` alike: the same offsets, and per
    part the same piece begins and ends of the same block ids."""
    np.testing.assert_array_equal(got[0], want[0])
    assert got[0].dtype == want[0].dtype == np.int64
    assert len(got[1]) == len(want[1])
    for (gb, ge, gi), (wb, we, wi) in zip(got[1], want[1], strict=True):
        np.testing.assert_array_equal(gb, wb)
        np.testing.assert_array_equal(ge, we)
        assert gi is wi


def test_consecutive_members_of_one_block_are_its_slice(blocks_graph) -> None:
    """Every run of consecutive vertex ids: within one block (none moved) its vectors are
    read as the block's slice, alike the general reading; across blocks, or with a
    vertex whose lists moved, it is left to the general reading."""
    table = blocks_graph._state.vertices
    bounds = [(b.first, b.first + b.n) for b in table.list_blocks]
    taken = 0
    for lo, hi in itertools.combinations(range(16), 2):
        members = np.arange(lo, hi, dtype=np.int64)
        got = _one_block_parts(table, members, "a")
        inside = any(a <= lo and hi <= b for a, b in bounds)
        assert (got is not None) == inside, (lo, hi)
        if got is not None:
            _parts_equal(got, _block_parts(table, members, "a"))
            taken += 1
    assert taken == 21 + 15 + 10  # the runs inside blocks of 6, 5 and 4 vertices
    block = table.list_blocks[1]
    block.moved[2] = True  # (vertex 8's lists held by the table's dicts)
    try:
        assert _one_block_parts(table, np.arange(6, 11), "a") is None
        assert _block_lists(table, np.arange(6, 11), "a", np.int64) is None
        _parts_equal(_one_block_parts(table, np.arange(6, 8), "a"),
                     _block_parts(table, np.arange(6, 8), "a"))  # fmt: skip
    finally:
        block.moved[2] = False
    assert _one_block_parts(table, np.array([3, 4, 5], np.int32), "missing") is None


def test_take_ranges_of_runs_and_arrays_equal_numpy() -> None:
    rng = np.random.default_rng(3)
    flat = np.concatenate(
        [np.arange(s, s + n) for s, n in zip([5, 900, 40, 0], [30, 7, 60, 3], strict=True)]
    )
    held = _all_runs(flat)
    begins = rng.integers(0, flat.size, 40)
    ends = np.minimum(begins + rng.integers(0, 25, 40), flat.size)
    want = np.concatenate([flat[b:e] for b, e in zip(begins, ends, strict=True)])
    for dtype in (np.int32, np.int64):
        a = np.full(want.size + 2, -9, dtype)
        b = np.full(want.size + 2, -9, dtype)
        assert runs.take_run_ranges(held.starts, held.firsts, held.size, begins, ends, a, 1) == (
            want.size + 1
        )
        assert runs.take_ranges(flat, begins, ends, b, 1) == want.size + 1
        for out in (a, b):
            assert out[0] == -9 and out[-1] == -9
            np.testing.assert_array_equal(out[1:-1], want)


def test_expand_as_equals_expand() -> None:
    begin = np.array([7, 0, 100, 3], np.int64)
    length = np.array([4, 0, 9, 1], np.int64)
    for dtype in (np.int32, np.int64):
        got = runs.expand_as(begin, length, dtype)
        assert got.dtype == dtype
        np.testing.assert_array_equal(got, runs.expand(begin, length))
    assert list(
        itertools.chain(*(range(b, b + n) for b, n in zip(begin, length, strict=True)))
    ) == (runs.expand(begin, length).tolist())


def test_joined_slices_of_one_array_in_order_are_a_view_of_it() -> None:
    """Consecutive slices of one array, in order (empty ones too), join as a read-only
    view of it when they are long (1,024 ids or more on average); slices out of order,
    with a gap, of another type, of two arrays or short ones are copied. Either way the
    ids are those numpy's concatenation gives."""
    scale = 200  # slices of 1,400 to 4,200 ids
    ids = np.arange(100, 100 + 60 * scale, dtype=np.int32)
    other = np.arange(0, 10 * scale, dtype=np.int32)
    cuts = [scale * c for c in (0, 7, 7, 20, 41, 60)]
    in_order = [ids[a:b] for a, b in itertools.pairwise(cuts)]
    short = [ids[a : a + 7] for a in range(0, 700, 7)]  # consecutive, 7 ids each
    cases = {
        "in order": (in_order, True),
        "from the middle": (in_order[2:4], True),
        "out of order": ([*in_order[:2], in_order[3], in_order[2], in_order[4]], False),
        "a gap": ([in_order[0], in_order[3]], False),
        "two arrays": ([in_order[0], other[0 : 4 * scale]], False),
        "a stride": ([ids[0 : 10 * scale : 2], ids[10 * scale : 20 * scale : 2]], False),
        "short slices": (short, False),
    }
    for name, (arrays, shared) in cases.items():
        got = _join(arrays, np.int32)
        np.testing.assert_array_equal(got, np.concatenate(arrays), err_msg=name)
        assert np.shares_memory(got, ids) == shared, name
        if shared:
            assert not got.flags.writeable, name
    wider = _join(in_order, np.int64)  # another type: converted
    assert wider.dtype == np.int64 and not np.shares_memory(wider, ids)
    np.testing.assert_array_equal(wider, ids)


@pytest.mark.parametrize(
    "begins,ends,room,match",
    [
        ([1, -2], [3, 1], 5, r"positions -2\.\.2 lie outside the 8 held"),
        ([6, 2], [9, 4], 5, r"positions 2\.\.8 lie outside the 8 held"),
        ([0, 5], [4, 8], 6, r"7 ids from position 0 do not fit the 6 entries of out"),
    ],
)
def test_take_run_ranges_refuses_ranges_it_cannot_take(begins, ends, room, match) -> None:
    """Positions outside the runs, or more ids than ``out`` has room for, raise a
    ``ValueError`` naming the function (as ``run_ranges`` does) instead of a wrong id,
    an endless walk or a write past ``out`` in the compiled pass."""
    starts, firsts = np.array([0, 4], np.int64), np.array([10, 100], np.int64)
    b, e = np.array(begins, np.int64), np.array(ends, np.int64)
    out = np.zeros(room, np.int64)
    with pytest.raises(ValueError, match=f"^take_run_ranges: {match}$"):
        runs.take_run_ranges(starts, firsts, 8, b, e, out, 0)
    assert not out.any()  # nothing written


def test_take_run_ranges_needs_runs_and_ignores_empty_ranges() -> None:
    """No runs to take from is refused; ranges with no positions (even outside the runs)
    take nothing, as in ``run_ranges``; a range ending at the last position is taken."""
    none, out = np.zeros(0, np.int64), np.zeros(4, np.int64)
    with pytest.raises(ValueError, match=r"positions 0\.\.1 lie outside the 0 held"):
        runs.take_run_ranges(none, none, 0, np.array([0]), np.array([2]), out, 0)
    starts, firsts = np.array([0, 4], np.int64), np.array([10, 100], np.int64)
    b, e = np.array([9, 6, -3], np.int64), np.array([9, 8, -5], np.int64)
    assert runs.take_run_ranges(starts, firsts, 8, b, e, out, 1) == 3
    assert out.tolist() == [0, 102, 103, 0]
    lo, hi = runs.run_ranges(starts, firsts, 8, b, e)
    assert (lo.tolist(), hi.tolist()) == ([102], [104])
