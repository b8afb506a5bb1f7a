"""Strided pieces (``poplar_api.lowering.strided``) against plain per-element plans.

Remote reads that step through the ids at a stride are found as progressions
``(first, count, stride, dst, sender)`` and, on the tiles where that is exact, planned
without expanding them. Every result here is compared with the element-by-element
computation: the remote references themselves, and the exchange planned element by
element from the ids (``ExchangePlanner.add_grouped``).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from ipusim import ir
from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.lowering import exchange
from poplar_api.lowering import pieces as pk
from poplar_api.lowering import strided as sp
from poplar_api.lowering.exchange import ExchangePlanner


def _remote_refs(ids, bounds, vtiles, owner):
    """Counter of (dst, id) of every reference whose element another tile owns."""
    dst = np.repeat(vtiles, np.diff(bounds))
    remote = owner[ids] != dst
    return Counter(zip(dst[remote].tolist(), ids[remote].tolist(), strict=True))


def _found_refs(into, steps):
    """Counter of (dst, id) named by ordinary and strided pieces."""
    begin, length, dst = into.arrays()
    first, count, stride, sdst, _ = steps.arrays()
    got = Counter()
    for b, n, d in zip(begin.tolist(), length.tolist(), dst.tolist(), strict=True):
        got.update((d, i) for i in range(b, b + n))
    for f, n, s, d in zip(
        first.tolist(), count.tolist(), stride.tolist(), sdst.tolist(), strict=True
    ):
        got.update((d, f + k * s) for k in range(n))
    return got


def _random_field(rng, size, n_tiles, min_run):
    """Vertices each reading a few progressions (strides 1 to 12, some long enough to
    be strided pieces, some crossing owners) and a few loose ids."""
    parts, bounds, vtiles = [], [0], []
    for _ in range(int(rng.integers(1, 10))):
        refs = []
        for _ in range(int(rng.integers(1, 4))):
            step = int(rng.integers(1, 13))
            n = int(rng.integers(1, 2 * min_run + 4))
            a = int(rng.integers(0, size))
            refs.append(np.arange(a, min(size, a + n * step), step))
        refs.append(rng.integers(0, size, int(rng.integers(0, 4))))
        ids = np.concatenate(refs).astype(np.int64)
        parts.append(ids)
        bounds.append(bounds[-1] + ids.size)
        vtiles.append(int(rng.integers(0, n_tiles)))
    return (
        np.concatenate(parts),
        np.asarray(bounds, np.int64),
        np.asarray(vtiles, np.int64),
    )


def _owner(rng, size, n_tiles, period):
    """Owning tiles in stretches, interleaved with ``period`` (ids ``i`` and ``i +
    period`` of one stretch share an owner, as conv1's input in the CNN step)."""
    stretch = np.repeat(rng.integers(0, n_tiles, size), rng.integers(1, 40, size))[:size]
    lanes = rng.integers(0, n_tiles, period)
    return ((stretch + lanes[np.arange(size) % period]) % n_tiles).astype(np.int32)


@pytest.mark.parametrize("min_run", [2, 4, sp.MIN_STRIDED])
def test_pieces_name_every_remote_reference_once(min_run):
    rng = np.random.default_rng(5)
    for trial in range(60):
        size = int(rng.integers(20, 400))
        owner = _owner(rng, size, 8, int(rng.integers(1, 5)))
        ids, bounds, vtiles = _random_field(rng, size, 8, min_run)
        into, steps = pk.Pieces(4), sp.StridedPieces(1)  # small: grown as they fill
        sp.field_pieces(ids, bounds, vtiles, owner, into, steps, min_run)
        assert _found_refs(into, steps) == _remote_refs(ids, bounds, vtiles, owner), trial
        _, count, stride, _, _ = steps.arrays()
        assert (stride >= 2).all() and (count >= min_run).all(), trial
        for f, n, s, d, o in zip(*(a.tolist() for a in steps.arrays()), strict=True):
            # one owner per progression, never the reading tile
            assert set(owner[f : f + n * s : s].tolist()) == {o} and o != d, trial


def test_stride_one_and_short_progressions_stay_ordinary():
    owner = np.zeros(100, np.int32)  # tile 0 owns everything; the vertex is on tile 1
    ids = np.concatenate((np.arange(0, 40), np.arange(50, 50 + 3 * 5, 3))).astype(np.int64)
    into, steps = pk.Pieces(4), sp.StridedPieces()
    sp.field_pieces(ids, np.array([0, ids.size]), np.array([1]), owner, into, steps, 8)
    assert steps.rows == 0  # stride 1 is a run; five at stride 3 are too few
    begin, length, _ = into.arrays()
    assert begin.tolist() == [0, 50, 53, 56, 59, 62] and length.tolist() == [40, 1, 1, 1, 1, 1]


def test_a_stride_across_owners_is_cut_where_the_owner_changes():
    owner = np.repeat(np.array([2, 3], np.int32), 50)  # ids 0..49 on tile 2, 50.. on 3
    ids = np.arange(4, 100, 4).astype(np.int64)  # 24 refs at stride 4, across both
    into, steps = pk.Pieces(4), sp.StridedPieces()
    sp.field_pieces(ids, np.array([0, ids.size]), np.array([0]), owner, into, steps, 4)
    first, count, stride, dst, sender = (a.tolist() for a in steps.arrays())
    assert (first, count, stride, dst, sender) == ([4, 52], [12, 12], [4, 4], [0, 0], [2, 3])
    assert into.count == 0


@pytest.mark.parametrize(
    ("first", "count", "stride", "word"),
    [([0], [-1], [2], "count -1"), ([0], [0], [2], "count 0"), ([0], [3], [0], "stride 0")],
)
def test_bad_progressions_are_rejected(first, count, stride, word):
    with pytest.raises(ValueError, match=word):
        sp.expand(np.array(first), np.array(count), np.array(stride))


def test_min_run_below_two_is_rejected():
    ids = np.arange(3, dtype=np.int64)
    with pytest.raises(ValueError, match="min_run 1"):
        sp.field_pieces(
            ids, np.array([0, 3]), np.array([0]), np.ones(3, np.int32), pk.Pieces(4),
            sp.StridedPieces(), 1,
        )  # fmt: skip


def test_expand_lists_each_progression():
    got = sp.expand(np.array([3, 10]), np.array([3, 2]), np.array([4, 7]))
    assert got.tolist() == [3, 7, 11, 10, 17]


def _plan_both(graph, ids, bounds, vtiles, min_run):
    """The exchange planned from strided pieces (as ``plan_reads``) and element by
    element (every reference with its receiving and sending tile)."""
    owner = graph._state.space(FLOAT).tile
    by_element = ExchangePlanner(graph.getTarget(), graph._state)
    by_element.add_grouped(
        FLOAT, ids, owner[ids].astype(np.int64), np.repeat(vtiles, np.diff(bounds))
    )
    planner = ExchangePlanner(graph.getTarget(), graph._state)
    into, steps = pk.Pieces(ids.size), sp.StridedPieces()
    sp.field_pieces(ids, bounds, vtiles, owner, into, steps, min_run)
    planned = np.zeros(0, bool)
    if steps.rows:
        planned = planner.add_strided(FLOAT, into.arrays(), steps.arrays(), owner)
        sp.expand_into(into, steps.arrays(), planned)
    planner.add_pieces(FLOAT, *into.arrays(), owner, scratch=True)
    return by_element.build("ex", 0), planner.build("ex", 0), planned


@pytest.mark.parametrize("cover", [True, False])
def test_strided_plan_equals_element_by_element_plan(monkeypatch, cover):
    """Random strided reads (interleaved residues, neighbouring residues, bus partners
    reading inside each other's spans, owners changing along a stride) give the same
    exchange as planned element by element; some tiles' progressions are counted as
    such, others expanded."""
    monkeypatch.setattr(exchange, "COVER_SPAN_PER_INTERVAL", 1 << 40 if cover else 0)
    rng = np.random.default_rng(17)
    counted = expanded = 0
    for trial in range(80):
        graph = Graph(IPUModel("tiny").createDevice().getTarget())
        n_tiles = graph.getTarget().getNumTiles()
        size = int(rng.integers(50, 600))
        x = graph.addVariable(FLOAT, [size], "x")
        owner = _owner(rng, size, n_tiles, int(rng.integers(1, 4)))
        graph._state.space(FLOAT).tile[x.flat_index()] = owner
        min_run = int(rng.integers(2, 6))
        ids, bounds, vtiles = _random_field(rng, size, n_tiles, min_run)
        want, got, planned = _plan_both(graph, ids, bounds, vtiles, min_run)
        counted += int(planned.sum())
        expanded += int((~planned).sum())
        if want is None:
            assert got is None, trial
        else:
            fields = ir.TOTALS
            assert {k: getattr(got, k).tolist() for k in fields} == {
                k: getattr(want, k).tolist() for k in fields
            }, trial
            shared = [(e.bytes_shared if e.bytes_shared is not None else 0) for e in (got, want)]
            assert np.array_equal(shared[0], shared[1]), trial
    assert counted and expanded  # both paths taken


def test_interleaved_progressions_of_one_tile_are_counted_once():
    """Three progressions at stride 9, offset by 3 (conv1's weight update reads its
    input so): each element is a message of its own; elements read twice count once;
    the tile receiving them is counted as progressions."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    x = graph.addVariable(FLOAT, [400], "x")
    owner = np.where(np.arange(400) < 200, 2, 5).astype(np.int32)
    graph._state.space(FLOAT).tile[x.flat_index()] = owner
    reads = [np.arange(o, o + 9 * 20, 9) for o in (0, 3, 6)] + [np.arange(9, 9 * 10, 9)]
    ids = np.concatenate(reads).astype(np.int64)  # the last repeats part of the first
    want, got, planned = _plan_both(graph, ids, np.array([0, ids.size]), np.array([0]), 8)
    assert planned.all()
    assert {k: getattr(got, k).tolist() for k in ir.TOTALS} == {
        k: getattr(want, k).tolist() for k in ir.TOTALS
    }
    assert got.bytes_received[got.tile == 0].tolist() == [60 * 4]  # 60 distinct floats
    assert got.messages_received[got.tile == 0].tolist() == [60]


def _equal_plans(want, got):
    """Whether two exchanges agree in every per-tile total and in the bytes shared."""
    same = {k: getattr(got, k).tolist() for k in ir.TOTALS} == {
        k: getattr(want, k).tolist() for k in ir.TOTALS
    }
    shared = [(e.bytes_shared if e.bytes_shared is not None else 0) for e in (got, want)]
    return same and np.array_equal(shared[0], shared[1])


def test_bus_partners_reading_one_span_at_one_stride_are_counted_as_progressions():
    """Tiles 0 and 1 share an exchange bus and read interleaved progressions of one
    span at stride 9 (as conv1's weight update in the CNN step): both are counted as
    progressions, and the bytes both receive are those of the classes they share,
    as planned element by element. Tile 2 reads at stride 9 in the span of tile 3's
    stride-7 reads: those two are expanded."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    x = graph.addVariable(FLOAT, [1000], "x")
    owner = np.where(np.arange(1000) < 500, 5, 6).astype(np.int32)
    graph._state.space(FLOAT).tile[x.flat_index()] = owner
    t0 = [np.arange(o, o + 9 * 20, 9) for o in (0, 3, 6)]
    t1 = [np.arange(o, o + 9 * 30, 9) for o in (45, 48)]  # residues 0 and 3, shifted
    t2 = [np.arange(600, 600 + 9 * 20, 9)]
    t3 = [np.arange(601, 601 + 7 * 20, 7)]
    parts = [np.concatenate(t).astype(np.int64) for t in (t0, t1, t2, t3)]
    ids = np.concatenate(parts)
    bounds = np.cumsum([0] + [p.size for p in parts])
    want, got, planned = _plan_both(graph, ids, bounds, np.arange(4), 8)
    assert planned.tolist() == [True] * 5 + [False, False]
    assert _equal_plans(want, got)
    # residue 0: indices [0, 20) and [5, 35) share 15; residue 3 likewise: 30 floats
    assert got.bytes_shared[got.tile == 0].tolist() == [30 * 4]


def test_a_partner_expanded_makes_the_other_expanded_where_its_pieces_reach():
    """Tile 1's progressions have neighbouring residues (so they are expanded) and lie
    in tile 0's span: tile 0 must be expanded too, as planned element by element."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    x = graph.addVariable(FLOAT, [400], "x")
    graph._state.space(FLOAT).tile[x.flat_index()] = 5
    t0 = np.arange(0, 9 * 30, 9)
    t1 = np.concatenate([np.arange(o, o + 9 * 10, 9) for o in (18, 19)])
    ids = np.concatenate((t0, t1)).astype(np.int64)
    bounds = np.array([0, t0.size, ids.size])
    want, got, planned = _plan_both(graph, ids, bounds, np.arange(2), 8)
    assert not planned.any()
    assert _equal_plans(want, got)
    assert got.bytes_shared[got.tile == 0].tolist() == [10 * 4]


def test_room_grows_with_the_pieces_found_not_with_each_stop():
    # many vertices, each with one long progression and no ordinary piece: the strided
    # room fills again and again, and the ordinary room must not double each time it does
    vertices, n, stride = 4096, 32, 3
    size = n * stride * vertices
    owner = np.zeros(size, np.int32)  # tile 0 owns everything; the vertices are on tile 1
    ids = np.arange(0, size, stride, dtype=np.int64)
    bounds = np.arange(0, ids.size + 1, n, dtype=np.int64)
    into, steps = pk.Pieces(4), sp.StridedPieces(1)
    sp.field_pieces(ids, bounds, np.ones(vertices, np.int64), owner, into, steps, 16)
    assert steps.rows == vertices and into.count == 0
    assert steps.first.size <= 2 * vertices + 16  # grown by doubling
    assert into.begin.size <= 2 * n + 16  # one vertex's refs at most, doubled once


def test_bus_partners_at_one_stride_give_the_element_by_element_plan():
    """Random bus partners reading progressions (stride 9 mostly, some 7 or 5) over
    one span with overlapping index ranges, in residues that are sometimes neighbours
    (3 and 4: that tile is expanded) and sometimes with a loose id in the span: the
    plan equals the one made element by element, including the bytes a pair both
    receive. Pairs counted as progressions with bytes in common occur, and so do
    expanded tiles (the random test above never gives a pair bytes in common)."""
    rng = np.random.default_rng(29)
    shared_counted = expanded = 0
    for trial in range(60):
        graph = Graph(IPUModel("tiny").createDevice().getTarget())
        size = 2000
        x = graph.addVariable(FLOAT, [size], "x")
        owner = np.repeat(rng.integers(4, 8, 2), 1000).astype(np.int32)
        graph._state.space(FLOAT).tile[x.flat_index()] = owner
        parts = []
        for _ in range(int(rng.integers(2, 5))):  # tiles 0 .. 3: two bus pairs
            s = int(rng.choice([9, 9, 9, 9, 9, 7, 5]))
            refs = []
            for r in rng.choice([0, 3, 4, 6], int(rng.integers(1, 3)), replace=False):
                for _ in range(int(rng.integers(1, 4))):
                    a = int(rng.integers(0, 80)) * s + int(r)
                    refs.append(np.arange(a, min(size, a + int(rng.integers(4, 40)) * s), s))
            if rng.random() < 0.2:
                refs.append(rng.integers(0, size, 3))
            parts.append(np.concatenate(refs).astype(np.int64))
        ids = np.concatenate(parts)
        bounds = np.cumsum([0] + [p.size for p in parts])
        vtiles = np.arange(len(parts))
        want, got, planned = _plan_both(graph, ids, bounds, vtiles, 4)
        assert _equal_plans(want, got), trial
        mine = ExchangePlanner(graph.getTarget(), graph._state)
        into, steps = pk.Pieces(ids.size), sp.StridedPieces()
        sp.field_pieces(ids, bounds, vtiles, owner, into, steps, 4)
        mine.add_strided(FLOAT, into.arrays(), steps.arrays(), owner)
        if mine.strided_shared is not None and mine.strided_shared.any():
            shared_counted += 1
        expanded += int((~planned).sum())
    assert shared_counted >= 5 and expanded  # both paths taken, often
