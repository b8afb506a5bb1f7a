"""Exchange planning: totals per tile, computed by hand on the tiny machine."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim import ir
from poplar_api import FLOAT, HALF, Graph, IPUModel
from poplar_api.lowering import pieces as pk
from poplar_api.lowering.exchange import ExchangePlanner


def planner_and_graph():
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    f = graph.addVariable(FLOAT, [10], "f")
    h = graph.addVariable(HALF, [4], "h")
    return graph, ExchangePlanner(graph.getTarget(), graph._state), f, h


def test_each_element_received_once_and_sent_once():
    _graph, planner, f, _ = planner_and_graph()
    ids = f.flat_index()
    # tile 2 needs f[0..3] (owned by tile 0) twice over, plus f[5] (tile 1)
    planner.add(FLOAT, 2, ids[[0, 1, 2, 3, 0, 1, 5]], np.array([0, 0, 0, 0, 0, 0, 1]))
    # tile 3 needs f[0], f[1] (tile 0): a broadcast of elements tile 2 also receives
    planner.add(FLOAT, 3, ids[[0, 1]], np.array([0, 0]))
    ex = planner.build("ex", 0)
    assert ex.tile.tolist() == [0, 1, 2, 3]
    # tile 0 sends f[0..3] once (16 bytes) as one run; tile 1 sends f[5] (4 bytes)
    assert ex.bytes_sent.tolist() == [16, 4, 0, 0]
    assert ex.messages_sent.tolist() == [1, 1, 0, 0]
    # tile 2 receives 5 distinct floats in two runs (f[0..3] from 0, f[5] from 1)
    assert ex.bytes_received.tolist() == [0, 0, 20, 8]
    assert ex.messages_received.tolist() == [0, 0, 2, 1]
    # tiny layout: 2 columns of 4; tile t at (t // 4, t % 4): d(0,2)=2, d(1,2)=1, d(0,3)=3
    assert ex.max_distance.tolist() == [3, 1, 2, 3]


def test_local_references_are_free_and_types_are_sized():
    _graph, planner, _, h = planner_and_graph()
    ids = h.flat_index()
    planner.add(HALF, 4, ids, np.array([4, 4, 6, 6]))  # two local, two from tile 6
    ex = planner.build("ex", 0)
    assert ex.tile.tolist() == [4, 6]
    assert ex.bytes_received.tolist() == [4, 0]  # two halves
    assert ex.bytes_sent.tolist() == [0, 4]


def test_grouped_references():
    _graph, planner, f, _ = planner_and_graph()
    ids = f.flat_index()
    src = np.array([0, 0, 1, 1])
    dst = np.array([5, 6, 5, 1])  # the last is local
    planner.add_grouped(FLOAT, ids[:4], src, dst)
    ex = planner.build("ex", 0)
    got = dict(zip(ex.tile.tolist(), ex.bytes_received.tolist(), strict=True))
    assert got == {0: 0, 1: 0, 5: 8, 6: 4}


def test_nothing_remote_gives_no_exchange():
    _graph, planner, f, _ = planner_and_graph()
    planner.add(FLOAT, 3, f.flat_index()[:2], np.array([3, 3]))
    assert planner.build("ex", 0) is None


def _exchange_fields(ex):
    """The per-tile columns of an Exchange (``ir.TOTALS``) as lists."""
    return {k: getattr(ex, k).tolist() for k in ir.TOTALS}


@pytest.mark.parametrize("cover", [True, False])
@pytest.mark.parametrize("per_pass", [None, 2])
@pytest.mark.parametrize("grouped", [False, True])
def test_runs_plan_equals_tile_by_tile_plan(monkeypatch, per_pass, cover, grouped):
    """Random reads (runs, repeats, local and remote elements, owners changing inside
    runs) planned as id runs give the same exchange as tile by tile, element by element
    (also when the runs are planned a few tiles at a time, with the sent runs found
    by counting cover or by sorting the received intervals, and with a flat set of
    references grouped by tile into each tile's runs first)."""
    from poplar_api.lowering import exchange

    if per_pass is not None:
        monkeypatch.setattr(exchange, "PIECES_PER_PASS", per_pass)
    monkeypatch.setattr(pk, "SHORT_PIECES", -1 if grouped else 2)
    monkeypatch.setattr(exchange, "COVER_SPAN_PER_INTERVAL", 1 << 40 if cover else 0)
    rng = np.random.default_rng(7)
    for trial in range(30):
        graph = Graph(IPUModel("tiny").createDevice().getTarget())
        n_tiles = graph.getTarget().getNumTiles()
        size = int(rng.integers(5, 60))
        x = graph.addVariable(FLOAT, [size], "x")
        owner_runs = rng.integers(1, 6, size)
        tiles = np.repeat(rng.integers(0, n_tiles, size), owner_runs)[:size]
        graph._state.space(FLOAT).tile[x.flat_index()] = tiles.astype(np.int32)
        owner = graph._state.space(FLOAT).tile
        # vertices: each reads a few slices (some repeated) and sits on a random tile
        parts, bounds, vtiles = [], [0], []
        for _ in range(int(rng.integers(1, 12))):
            pieces = []
            for _ in range(int(rng.integers(1, 4))):
                a = int(rng.integers(0, size))
                b = int(rng.integers(a, min(size, a + 9) + 1))
                pieces.append(np.arange(a, b))
            ids = np.concatenate(pieces)
            parts.append(ids)
            bounds.append(bounds[-1] + ids.size)
            vtiles.append(int(rng.integers(0, n_tiles)))
        ids = np.concatenate(parts).astype(np.int64)
        bounds = np.asarray(bounds, np.int64)
        vtiles = np.asarray(vtiles, np.int64)
        if per_pass is not None:  # vertices grouped by tile, as libraries add them
            vtiles = np.sort(vtiles)
        dst = np.repeat(vtiles, np.diff(bounds))

        by_tile = ExchangePlanner(graph.getTarget(), graph._state)
        for tile in np.unique(dst).tolist():
            sel = ids[dst == tile]
            by_tile.add(FLOAT, tile, sel, owner[sel].astype(np.int64))
        as_runs = ExchangePlanner(graph.getTarget(), graph._state)
        as_runs.add_pieces(FLOAT, *pk.field_pieces(ids, bounds, vtiles, owner), owner)
        flat = ExchangePlanner(graph.getTarget(), graph._state)
        flat.add_owned(FLOAT, ids, dst, owner)

        want = by_tile.build("ex", 0)
        for got in (as_runs.build("ex", 0), flat.build("ex", 0)):
            if want is None:
                assert got is None, trial
            else:
                assert _exchange_fields(got) == _exchange_fields(want), trial


def test_mark_variables_equals_variables_of():
    from poplar_api.lowering import variable_marks

    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    for k, n in enumerate([3, 0, 5, 1, 7]):
        graph.addVariable(FLOAT, [n], f"v{k}")
    space = graph._state.space(FLOAT)
    rng = np.random.default_rng(3)
    for _ in range(20):
        ids = rng.integers(0, space.size, int(rng.integers(1, 30)))
        mask = np.zeros(len(graph._state.variables), bool)
        variable_marks.mark_variables(space, ids, mask)
        assert np.flatnonzero(mask).tolist() == np.unique(space.variables_of(ids)).tolist()


def test_runs_equal_their_expanded_ids():
    """The run forms of the field kernels agree with the id forms on the expanded ids:
    remote pieces, variables touched and hits of a mask (random cases, with empty runs
    and runs across variables)."""
    from poplar_api.lowering import runs, variable_marks

    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    for k, n in enumerate([7, 0, 12, 1, 30, 5]):
        graph.addVariable(FLOAT, [n], f"v{k}")
    space = graph._state.space(FLOAT)
    n_tiles = graph.getTarget().getNumTiles()
    rng = np.random.default_rng(11)
    owner = np.repeat(rng.integers(0, n_tiles, space.size), rng.integers(1, 5, space.size))
    owner = owner[: space.size].astype(np.int32)
    owner[rng.random(space.size) < 0.1] = -1  # unmapped: remote to every tile
    for trial in range(40):
        nv = int(rng.integers(0, 9))
        begin = rng.integers(0, space.size, nv)
        end = np.minimum(begin + rng.integers(0, 12, nv), space.size)
        vtiles = rng.integers(0, n_tiles, nv)
        ids = runs.expand(begin, end - begin)
        bounds = np.concatenate(([0], np.cumsum(end - begin)))
        assert ids.tolist() == [i for b, e in zip(begin, end, strict=True) for i in range(b, e)], (
            trial
        )
        got = pk.run_pieces(begin, end, vtiles, owner)
        want = pk.field_pieces(ids, bounds, vtiles, owner)
        assert [a.tolist() for a in got] == [a.tolist() for a in want], trial
        # by the stretches of one owner between change points: the same pieces,
        # and a block's elements and messages per tile the same as element by element
        changes = runs.change_points(owner, space.size)
        stretches = pk.tile_stretches(owner, changes, space.size)
        by_stretch = pk.run_pieces(begin, end, vtiles, owner, stretches)
        assert [a.tolist() for a in by_stretch] == [a.tolist() for a in want], trial
        lo, hi = sorted(rng.integers(0, space.size + 1, 2).tolist())
        counted = runs.tile_counts(owner, lo, hi, n_tiles, changes)
        assert counted.tolist() == runs.tile_counts(owner, lo, hi, n_tiles).tolist(), trial
        assert (
            counted.tolist()
            == np.bincount(owner[lo:hi][owner[lo:hi] >= 0], minlength=n_tiles).tolist()
        ), trial
        block = runs.transfer_counts(range(lo, hi), owner, n_tiles, changes)
        one_by_one = runs.transfer_counts(range(lo, hi), owner, n_tiles)
        assert [a.tolist() for a in block] == [a.tolist() for a in one_by_one], trial
        by_runs = np.zeros(len(graph._state.variables), bool)
        by_ids = np.zeros_like(by_runs)
        variable_marks.mark_variable_runs(space, begin, end, by_runs)
        variable_marks.mark_variables(space, ids, by_ids)
        assert by_runs.tolist() == by_ids.tolist(), trial
        mask = rng.random(space.size) < 0.1
        hit = runs.runs_hit(np.flatnonzero(mask), begin, end)
        assert hit.tolist() == [bool(mask[b:e].any()) for b, e in zip(begin, end, strict=True)], (
            trial
        )


def test_int32_ids_give_what_int64_ids_give():
    from poplar_api.lowering import runs

    ids = np.array([4, 5, 6, 9, 10, 2], np.int64)
    offsets = np.array([0, 3, 5, 6], np.int64)
    for dtype in (np.int32, np.int64):
        assert runs.as_index(np.arange(5, 9, dtype=dtype)) == slice(5, 9)
        assert isinstance(runs.as_index(ids.astype(dtype)), np.ndarray)
        begin, end = runs.vertex_runs(ids.astype(dtype), offsets)
        assert begin.tolist() == [4, 9, 2] and end.tolist() == [7, 11, 3]
        assert runs.vertex_runs(ids[::-1].astype(dtype), offsets) is None


def test_tile_cuts_match_a_plain_scan():
    """Cut points of a tile-sorted destination array: the first start of a tile's
    entries at or after each multiple of the step (a plain scan written here), or no
    cuts when a tile's entries are split."""
    from poplar_api.lowering.runs import tile_cuts

    def plain(dst, step):
        starts = [i for i in range(1, len(dst)) if dst[i] != dst[i - 1]]
        firsts = [dst[0]] + [dst[i] for i in starts]
        if len(set(firsts)) < len(firsts):
            return [], False
        cuts = [0]
        for target in range(step, len(dst), step):
            later = [s for s in starts if s >= target]
            if later and later[0] > cuts[-1]:
                cuts.append(later[0])
        return [*cuts, len(dst)], True

    rng = np.random.default_rng(3)
    split = 0
    for _ in range(400):
        n = int(rng.integers(1, 25))
        counts = rng.integers(0, 15, n)
        tiles = rng.permutation(n)
        dst = np.repeat(tiles, counts[tiles])
        if dst.size == 0:
            continue
        if rng.random() < 0.2:
            dst = rng.permutation(dst)
        step = int(rng.integers(1, 30))
        cuts, contiguous = tile_cuts(dst, n, step)
        expected = plain(dst.tolist(), step)
        assert (cuts.tolist(), contiguous) == expected
        split += not contiguous
    assert split > 10  # both outcomes are exercised


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("ipus", [1, 3])
def test_merge_received_equals_element_by_element(seed, ipus):
    """The compiled merge of id ranges against sets of elements, counted in numpy, on
    one IPU and on three (a tile's grid place is its place on its own IPU; each tile's
    receiving tile found once, not by a division per interval)."""
    from poplar_api.lowering import received, runs

    rng = np.random.default_rng(seed)
    tiles, space = 12, 300
    per_ipu = tiles // ipus
    owner = np.repeat(rng.integers(0, tiles, 40), rng.integers(1, 15, 40))[:space]
    owner = np.resize(owner, space).astype(np.int16)  # a space's tiles, as the graph holds them
    changes = runs.change_points(owner, space)
    column, row = np.arange(per_ipu) // 2, np.arange(per_ipu) % 2  # a grid of 2 rows
    dst = rng.integers(0, tiles, 200)
    begin = rng.integers(0, space - 20, 200)
    length = rng.integers(1, 20, 200)
    length[rng.random(200) < 0.4] = 1  # strided reads: single elements
    stride = space + 1
    lo = dst * stride + begin
    order = np.argsort(lo)
    pairs, senders = np.zeros(tiles * tiles, np.uint8), np.zeros(tiles, np.int64)  # stamp 1
    a, b, receiver, elements, messages, distance = received.merge_received(
        lo[order], length[order], stride, changes, owner, (column, row), tiles, (pairs, senders)
    )
    want_pairs = np.zeros((tiles, tiles), bool)
    want_elements = np.zeros(tiles, np.int64)
    want_messages = np.zeros(tiles, np.int64)
    want_distance = np.zeros(tiles, np.int64)
    for t in range(tiles):
        mine = zip(begin[dst == t], length[dst == t], strict=True)
        ids = np.unique(np.concatenate([np.arange(x, x + n) for x, n in mine] or [[]]))
        ids = ids.astype(np.int64)
        want_elements[t] = ids.size
        if ids.size == 0:
            continue
        # a message: a run of consecutive ids of one owner
        starts = np.r_[True, (np.diff(ids) != 1) | (np.diff(owner[ids]) != 0)]
        want_messages[t] += int(starts.sum())
        want_pairs[t, np.unique(owner[ids])] = True  # every tile it receives from
        for s in np.unique(owner[ids[starts]]):
            here, there = t % per_ipu, s % per_ipu
            d = abs(column[here] - column[there]) + abs(row[here] - row[there])
            want_distance[t] = max(want_distance[t], d)
            want_distance[s] = max(want_distance[s], d)
    assert elements.tolist() == want_elements.tolist()
    assert messages.tolist() == want_messages.tolist()
    assert distance.tolist() == want_distance.tolist()
    assert np.array_equal(pairs.reshape(tiles, tiles), want_pairs)
    assert senders.tolist() == want_pairs.sum(1).tolist()
    assert int((b - a).sum()) == int(want_elements.sum())
    # each interval's receiving tile: its ids are among the ids that tile asked for
    assert np.all(np.diff(receiver) >= 0)  # tile after tile
    for t, x, y in zip(receiver, a, b, strict=True):
        asked = np.zeros(space, bool)
        for s, n in zip(begin[dst == t], length[dst == t], strict=True):
            asked[s : s + n] = True
        assert asked[x:y].all()
    assert np.bincount(receiver, weights=b - a, minlength=tiles).tolist() == want_elements.tolist()


def test_pieces_beyond_the_first_room_are_the_same(monkeypatch):
    """A kernel that finds more pieces than it first has room for gives the same
    pieces (a field's arrays grown between vertices, a flat kernel's second pass with
    the room it counted)."""

    rng = np.random.default_rng(3)
    owner = rng.integers(0, 4, 500).astype(np.int32)
    ids = rng.permutation(500)[:300].astype(np.int64)  # scattered: most ids a piece
    bounds = np.array([0, 100, 180, 300])
    vtiles = np.array([0, 1, 2])
    dst = rng.integers(0, 4, ids.size)
    roomy = pk.field_pieces(ids, bounds, vtiles, owner), pk.flat_pieces(ids, dst, owner)
    monkeypatch.setattr(pk, "FIRST_ROOM", 16)
    monkeypatch.setattr(pk, "BOUNDED_ROOM", 16)  # the flat kernel's room: all pieces at most
    tight = pk.field_pieces(ids, bounds, vtiles, owner), pk.flat_pieces(ids, dst, owner)
    assert roomy[0][0].size > 16 and roomy[1][0].size > 16
    for a, b in zip(roomy, tight, strict=True):
        assert [x.tolist() for x in a] == [x.tolist() for x in b]


def test_pieces_of_several_fields_gathered_in_one_set_of_arrays(monkeypatch):
    """Fields added one after another to one
    :class:`~poplar_api.lowering.pieces.Pieces` (growing from 16 rows) give the
    concatenation of each field's own pieces, in field order."""

    rng = np.random.default_rng(5)
    owner = rng.integers(0, 4, 800).astype(np.int32)
    scattered = rng.permutation(800)[:400].astype(np.int64)
    bounds = np.array([0, 150, 260, 400])
    vtiles = np.array([0, 1, 2])
    begin, end = np.array([10, 300, 520]), np.array([90, 480, 800])
    alone = [
        pk.field_pieces(scattered, bounds, vtiles, owner),
        pk.run_pieces(begin, end, vtiles, owner),
    ]
    gathered = pk.Pieces(16)
    pk.field_pieces(scattered, bounds, vtiles, owner, gathered)
    together = pk.run_pieces(begin, end, vtiles, owner, None, gathered)
    for k in range(3):
        want = np.concatenate([alone[0][k], alone[1][k]])
        assert together[k].tolist() == want.tolist()
    # every remote reference is in exactly one piece: the pieces' lengths add up
    remote = (owner[scattered] != np.repeat(vtiles, np.diff(bounds))).sum()
    remote += sum(int((owner[b:e] != t).sum()) for b, e, t in zip(begin, end, vtiles, strict=True))
    assert int(together[1].sum()) == int(remote)


def test_planners_sharing_a_pair_bitmap_count_their_own_senders():
    """Planners of one lowering reuse one (receiving, sending) bitmap in turn: each
    counts the distinct tiles its receivers hear from, as counted here in numpy."""
    from poplar_api.lowering.exchange import OwnerCache

    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    n = graph.getTarget().getNumTiles()
    f = graph.addVariable(FLOAT, [64], "f")
    graph.setTileMapping(f, 0)
    rng = np.random.default_rng(7)
    ids = f.flat_index()
    owners = OwnerCache()
    for _ in range(4):
        src = rng.integers(0, n, 64)
        for i, t in enumerate(src):
            graph.setTileMapping(f[i], int(t))
        planner = ExchangePlanner(graph.getTarget(), graph._state, owners)
        wanted = {}
        for dst in rng.choice(n, 3, replace=False).tolist():
            pick = rng.choice(64, 10, replace=False)
            planner.add(FLOAT, dst, ids[pick], src[pick])
            wanted[dst] = len({int(s) for s in src[pick] if s != dst})
        ex = planner.build("ex", 0)
        got = dict(zip(ex.tile.tolist(), ex.senders_received.tolist(), strict=True))
        assert {t: got.get(t, 0) for t in wanted} == wanted
        with pytest.raises(RuntimeError, match="added after build"):
            planner.add(FLOAT, 0, ids[:2], np.array([1, 2]))
    (kept, *more) = owners.free_pairs[n]
    assert not more  # one map, handed back after each planner's turn
    seen, senders, stamp = owners.take_pairs(n)
    assert seen is kept[0] and stamp == kept[2] + 1
    assert not (seen == stamp).any() and not senders.any()  # no pair seen in the new turn


def test_merge_received_in_blocks_of_tiles_gives_every_pairs_distance():
    """A planner merges the ranges of a block of tiles at a time, sharing one pair
    bitmap; a pair seen in an earlier block is not measured again, and the largest
    distance per tile over the blocks is that of every message, counted in numpy."""
    from poplar_api.lowering import received, runs

    rng = np.random.default_rng(11)
    tiles, space = 16, 400
    owner = np.resize(np.repeat(rng.integers(0, tiles, 60), rng.integers(1, 12, 60)), space)
    owner = owner.astype(np.int16)  # a space's tiles, as the graph holds them
    changes = runs.change_points(owner, space)
    column, row = np.arange(tiles) // 4, np.arange(tiles) % 4
    dst = np.sort(rng.integers(0, tiles, 300))
    begin = rng.integers(0, space - 10, 300)
    length = rng.integers(1, 10, 300)
    stride = space + 1
    pairs = (np.zeros(tiles * tiles, np.uint8), np.zeros(tiles, np.int64))  # stamp 1
    got = np.zeros(tiles, np.int64)
    for block in (dst < 5, (dst >= 5) & (dst < 11), dst >= 11):
        lo, n = received.sort_ranges(dst[block] * stride + begin[block], length[block])
        *_, distance = received.merge_received(
            lo, n, stride, changes, owner, (column, row), tiles, pairs
        )
        np.maximum(got, distance, out=got)
    want = np.zeros(tiles, np.int64)
    for t, x, k in zip(dst, begin, length, strict=True):
        for s in np.unique(owner[x : x + k]):
            if s != t:
                d = abs(column[t] - column[s]) + abs(row[t] - row[s])
                want[t], want[s] = max(want[t], d), max(want[s], d)
    assert got.tolist() == want.tolist()
