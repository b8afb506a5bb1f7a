"""The compile's fast paths against independent computations written out in the test.

* :func:`~poplar_api.lowering.received.merge_received` with its intervals written over
  its keys equals a merge into fresh arrays (``tests/test_exchange_planner.py`` checks
  the merge against element sets on one IPU and several).
* :func:`~poplar_api.lowering.received.sorted_keys` merges the ascending stretches of keys
  that come in few of them: the same keys in the same order as Python's ``sorted``.
* A Copy's on-tile vertices, remote pieces and overlap check, validation's bitmap of
  written ids, liveness marks from spans and each variable's elements per tile: each
  against the path it replaced (kept here) or a loop written out in the test.
"""

import numpy as np
import pytest

from poplar_api.lowering import received, runs, variable_marks


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("one_length", [False, True])
def test_keys_in_few_ascending_stretches_sort_as_sorted_does(seed, one_length):
    """Keys made of a few ascending stretches (the windows a convolution's vertex reads)
    take the merging sort: the result is Python's ``sorted`` of the (lo, other) pairs."""
    rng = np.random.default_rng(seed)
    stretches = [np.sort(rng.integers(0, 10_000, int(rng.integers(50, 200)))) for _ in range(5)]
    lo = np.concatenate(stretches)
    assert int((np.diff(lo) < 0).sum()) <= received.MERGE_STRETCHES_PER_KEY * lo.size
    other = np.full(lo.size, 3) if one_length else rng.integers(1, 30, lo.size)
    got_lo, got_other = received.sort_ranges(lo, other)
    want = sorted(zip(lo.tolist(), other.tolist(), strict=True))
    if one_length:
        assert got_lo.tolist() == [p[0] for p in want]
        assert got_other.tolist() == [3] * lo.size
    else:
        assert list(zip(got_lo.tolist(), got_other.tolist(), strict=True)) == want


@pytest.mark.parametrize("seed", range(6))
def test_runs_hit_bitmap_equals_a_set_lookup(seed):
    """Whether any id of some runs is set in a bitmap of a span (runs inside, across
    and outside the span), against Python sets."""
    rng = np.random.default_rng(seed)
    lo, size = int(rng.integers(0, 50)), int(rng.integers(1, 200))
    marked = rng.random(size) < rng.choice([0.0, 0.01, 0.2])
    begin = rng.integers(0, lo + size + 50, int(rng.integers(0, 6)))
    end = begin + rng.integers(0, 30, begin.size)
    want = {lo + int(i) for i in np.flatnonzero(marked)}
    hit = any(
        i in want for b, e in zip(begin.tolist(), end.tolist(), strict=True) for i in range(b, e)
    )
    assert runs.runs_hit_bitmap(marked, lo, begin, end) == hit


def _old_copy_steps(cfg, s_ids, d_ids, d_tile, local, item_bytes):
    """The on-tile part of a Copy as it was found before the fused pass: a stable
    argsort by tile, then the pieces and regions in whole-array numpy steps."""
    from ipusim.machine_copies import on_tile_copy_vertices

    idx = np.flatnonzero(local)
    order = idx[np.argsort(d_tile[idx], kind="stable")]
    tile = d_tile[order]
    src = np.asarray(s_ids)[order].astype(np.int64)
    dst = np.asarray(d_ids)[order].astype(np.int64)
    n = tile.size
    new_tile = np.r_[True, tile[1:] != tile[:-1]]
    s_break = new_tile | np.r_[True, src[1:] != src[:-1] + 1]
    d_break = new_tile | np.r_[True, dst[1:] != dst[:-1] + 1]
    starts = np.flatnonzero(s_break | d_break)
    first = new_tile[starts]
    group = np.cumsum(new_tile) - 1
    s_runs = np.bincount(group, weights=s_break, minlength=group.max() + 1 if n else 0)
    d_runs = np.bincount(group, weights=d_break, minlength=group.max() + 1 if n else 0)
    gather = (d_runs < s_runs)[group[starts]]
    length = np.diff(np.r_[starts, n])
    step_s = np.diff(src[starts], prepend=0)
    step_d = np.diff(dst[starts], prepend=0)
    same = np.r_[False, length[1:] == length[:-1]]
    kept = np.r_[False, (step_s[1:] == step_s[:-1]) & (step_d[1:] == step_d[:-1])]
    forced = first | ~same
    new_region = np.zeros(starts.size, bool)
    for k in range(starts.size):
        new_region[k] = forced[k] or (k > 0 and not new_region[k - 1] and not kept[k])
    return on_tile_copy_vertices(cfg, tile[starts], length * item_bytes, gather, new_region)


@pytest.mark.parametrize("seed", range(8))
def test_on_tile_copy_steps_in_one_pass_equal_the_whole_array_steps(seed):
    """The fused pass (counting sort by tile, pieces and regions together) gives the
    copy vertices of the numpy steps it replaced: tiles in any order, some elements
    not local, ids given as arrays or ranges."""
    from ipusim.config import load_config
    from poplar_api.lowering.copies import on_tile_copy_steps

    rng = np.random.default_rng(seed)
    cfg = load_config("tiny", {"code.copy_estimate": "runtime"})
    n = int(rng.integers(1, 300))
    blocks = rng.integers(1, 6, n)
    # int32 tiles, as the lowering of a Copy passes them (_planned_copy_steps)
    d_tile = np.repeat(rng.integers(0, 4, n), blocks)[:n].astype(np.int32)
    if seed % 2:
        d_tile = np.sort(d_tile)
    local = rng.random(n) < 0.8
    src = np.cumsum(np.where(rng.random(n) < 0.6, 1, rng.integers(-4, 12, n))) + 100
    dst = range(5, 5 + n) if seed % 3 == 0 else np.cumsum(rng.integers(1, 3, n))
    got = on_tile_copy_steps(cfg, src, dst, d_tile, local, 4)
    want = _old_copy_steps(cfg, src, np.asarray(dst), d_tile, local, 4)
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_copy_pieces_from_known_source_tiles_equal_a_plain_loop(seed):
    """A Copy's remote pieces found from the tiles it compared (int32, no owner looked
    up again) against a loop over the references."""
    from poplar_api.lowering import pieces

    rng = np.random.default_rng(seed)
    owner = rng.integers(0, 4, 300).astype(np.int32)
    ids = np.where(rng.random(200) < 0.7, np.arange(200) + 50, rng.integers(0, 300, 200))
    ids = ids.astype(np.int32)
    dst = np.repeat(rng.integers(0, 4, 40), 5)[:200].astype(np.int32)
    got = pieces.flat_pieces(ids, dst, owner, owner[ids])
    want: list[list[int]] = []  # [begin, length, dst]
    prev = None
    for i, d in zip(ids.tolist(), dst.tolist(), strict=True):
        if owner[i] == d:
            prev = None
            continue
        if prev is not None and i == prev[0] + 1 and d == prev[1]:
            want[-1][1] += 1
        else:
            want.append([i, 1, d])
        prev = (i, d)
    assert [list(x) for x in zip(*(a.tolist() for a in got), strict=True)] == want


@pytest.mark.parametrize("seed", range(4))
def test_copy_pieces_grouped_by_tile_are_each_tiles_runs(seed):
    """References whose neighbours go to different tiles and whose ids repeat (a
    transposing copy of an expanded input): the pieces are, per receiving tile, the
    maximal runs of the distinct remote ids it needs (ids at both ends of the space
    included), found against sets built in Python."""
    from poplar_api.lowering import pieces

    rng = np.random.default_rng(seed)
    size, n_tiles, n = 400, 6, 3000
    owner = np.repeat(rng.integers(0, n_tiles, 80), 5)[:size].astype(np.int32)
    ids = np.concatenate(([0, size - 1], rng.integers(0, size, n - 2)))
    dst = rng.integers(0, n_tiles, n).astype(np.int32)
    got = pieces.flat_pieces(ids, dst, owner, owner[ids], n_tiles)
    want = _tile_runs(ids, dst, owner, n_tiles)
    rows = list(zip(*(a.tolist() for a in got), strict=True))
    assert len(rows) == len(want)
    assert set(rows) == want
    # with a kept map of marks: the same pieces, twice, from one map left all False
    marks: dict = {}
    for _ in range(2):
        again = pieces.flat_pieces(ids, dst, owner, owner[ids], n_tiles, marks)
        assert [a.tolist() for a in again] == [a.tolist() for a in got]
        assert list(marks) == [size] and not marks[size].any()


def _tile_runs(ids, dst, owner, n_tiles):
    """Per receiving tile, the maximal runs of the distinct remote ids it needs (sets)."""
    want = set()
    pairs = list(zip(ids.tolist(), dst.tolist(), strict=True))
    for t in range(n_tiles):
        needed = {i for i, d in pairs if d == t and owner[i] != t}
        for i in needed:
            if i - 1 not in needed:
                j = i
                while j + 1 in needed:
                    j += 1
                want.add((i, j + 1 - i, t))
    return want


@pytest.mark.parametrize("seed", range(4))
def test_copy_pieces_grouped_by_tile_mark_the_span_of_their_ids_only(seed):
    """The tile-grouped pass marks ids in a map of their span (not of the space): ids
    far from both ends of a large space give each tile's maximal runs, a kept map
    serves a later call of a span as long or shorter (and grows for a longer one),
    and is left all False after each."""
    from poplar_api.lowering import pieces

    rng = np.random.default_rng(50 + seed)
    size, n_tiles, n = 5000, 6, 3000
    owner = np.repeat(rng.integers(0, n_tiles, 1000), 5)[:size].astype(np.int32)
    marks: dict = {}
    for width in (300, 120, 900, 900, 40):
        lo = int(rng.integers(1, size - width - 1))
        ids = np.concatenate(([lo, lo + width - 1], rng.integers(lo, lo + width, n - 2)))
        dst = rng.integers(0, n_tiles, n).astype(np.int32)
        for kept in (None, marks):
            got = pieces.flat_pieces(ids, dst, owner, owner[ids], n_tiles, kept)
            rows = list(zip(*(a.tolist() for a in got), strict=True))
            assert len(rows) == len(set(rows))
            assert set(rows) == _tile_runs(ids, dst, owner, n_tiles)
        assert list(marks) == [size] and not marks[size].any()
        assert width <= marks[size].size < size


def test_copy_pieces_grouped_by_tile_keep_to_the_room_they_are_given(monkeypatch):
    """With less room than pieces, the tile-grouped pass writes only the rows that fit
    (nothing past them) and counts them all; the second pass, with that room, gives
    the pieces found with room for every one."""
    from poplar_api.lowering import pieces

    rng = np.random.default_rng(5)
    size, n_tiles, n = 400, 6, 3000
    owner = np.repeat(rng.integers(0, n_tiles, 80), 5)[:size].astype(np.int32)
    ids = rng.integers(0, size, n)
    dst = rng.integers(0, n_tiles, n).astype(np.int32)
    want = pieces.flat_pieces(ids, dst, owner, owner[ids], n_tiles)
    assert want[0].size > 64
    # one pass of the kernel, into the first rows of larger arrays holding a mark
    room, marked = 16, np.zeros(size, bool)
    by_tile = np.empty(n, np.int32)
    outs = [np.full(want[0].size + 8, -7, np.int64) for _ in range(3)]
    # read-only ids, as flat_pieces hands them on (runs.read_only)
    count = pieces._tile_pieces(runs.read_only(ids), owner[ids], dst, pieces._NO_LOCAL,
                                n_tiles, marked, 0, by_tile, *(o[:room] for o in outs))  # fmt: skip
    assert count == want[0].size
    for out, column in zip(outs, want, strict=True):
        assert out[:room].tolist() == column[:room].tolist()
        assert (out[room:] == -7).all()  # nothing written past the room
    assert not marked.any()
    monkeypatch.setattr(pieces, "BOUNDED_ROOM", room)  # so: a second pass
    got = pieces.flat_pieces(ids, dst, owner, owner[ids], n_tiles)
    assert [a.tolist() for a in got] == [a.tolist() for a in want]


def _old_variable_tiles(starts, holder, size, tile, var_ids, nt):
    """Elements per (variable, tile) as they were counted before the compiled pass:
    stretch lengths, then a stable argsort of packed (variable, tile) keys."""
    lengths = np.append(starts[1:], size) - starts
    tiles = tile[starts].astype(np.int64)
    mapped = tiles >= 0
    vids = var_ids[holder[mapped]]
    tiles, lengths = tiles[mapped], lengths[mapped]
    if not vids.size:
        return vids, tiles, lengths
    new = np.concatenate(([True], vids[1:] != vids[:-1]))
    present = vids[new]
    key = (np.cumsum(new) - 1) * nt + tiles
    order = np.argsort(key, kind="stable")
    key = key[order]
    at = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    totals = np.add.reduceat(lengths[order], at)
    key = key[at]
    return present[key // nt], key % nt, totals.astype(np.int64)


@pytest.mark.parametrize("seed", range(6))
def test_variable_tile_counts_equal_the_sorted_pair_counts(seed):
    """Each variable's elements per tile in one compiled pass (tiles revisited out of
    order, unmapped stretches, variables of no mapped element) against the argsort of
    (variable, tile) keys."""
    rng = np.random.default_rng(seed)
    nt, size = 9, 600
    tile = np.repeat(rng.integers(-1, nt, 120), rng.integers(1, 10, 120))[:size]
    tile = np.resize(tile, size).astype(np.int32)
    if seed % 2:  # ascending tiles within variables, as linear mappings give
        tile = np.sort(tile)
    bases = np.unique(np.r_[0, rng.integers(0, size, 25)])
    var_ids = rng.permutation(bases.size).astype(np.int64)
    var_ids.sort()
    changes = runs.change_points(tile, size)
    starts, holder = runs.stretch_starts(changes, bases, size)
    got = runs.variable_tile_counts(starts, holder, size, tile, var_ids, nt)
    want = _old_variable_tiles(starts, holder, size, tile, var_ids, nt)
    for g, w in zip(got, want, strict=True):
        assert g.tolist() == w.tolist()
    k = int(np.argmax(tile[starts]))  # the stretch on the highest tile
    named = rf"variable id {var_ids[holder[k]]} is mapped to tile {tile[starts][k]}, "
    with pytest.raises(ValueError, match=named + "beyond the target's 3 tiles"):
        runs.variable_tile_counts(starts, holder, size, tile, var_ids, 3)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("shape", ["sorted", "stretches", "random", "one_length", "wide", "one"])
def test_tile_keys_made_in_place_equal_sorted_keys(seed, shape):
    """Keys computed, packed and sorted in one array, and intervals written over them,
    equal :func:`sorted_keys` of ``dst * stride + begin`` and a merge into fresh arrays
    (every branch: sorted already, few stretches, random, one length, keys too wide to
    pack, a single range)."""
    rng = np.random.default_rng(seed)
    n = 1 if shape == "one" else 400
    tiles, space = 6, 1 << 40 if shape == "wide" else 500
    stride = space + 1
    owner = np.resize(np.repeat(rng.integers(0, tiles, 50), rng.integers(1, 20, 50)), 500)
    owner = owner.astype(np.int16)  # a space's tiles, as the graph holds them
    dst = rng.integers(0, tiles, n)
    begin = rng.integers(0, 480, n)
    length = np.full(n, 2) if shape == "one_length" else rng.integers(1, 20, n)
    if shape == "sorted":
        order = np.lexsort((begin, dst))
        dst, begin = dst[order], begin[order]
    elif shape == "stretches":
        dst = np.sort(dst)
        begin = np.concatenate([np.sort(part) for part in np.array_split(begin, 8)])
    want = received.sorted_keys(dst * stride + begin, length)
    got = received.tile_sorted_keys(dst, begin, length, stride)
    assert got[2] == want[2]
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()
    if shape == "wide":
        return  # ids beyond the owner array: the merge is not asked for them
    changes = runs.change_points(owner, 500)
    column, row = np.arange(tiles) // 2, np.arange(tiles) % 2
    fresh = received.merge_received(
        want[0].copy(), want[1], stride, changes, owner, (column, row), tiles, None, want[2]
    )
    kept = received.merge_received(
        got[0], got[1], stride, changes, owner, (column, row), tiles, None, got[2], 1, True
    )
    for a, b in zip(fresh, kept, strict=True):
        assert a.tolist() == b.tolist()


@pytest.mark.parametrize("seed", range(8))
def test_copy_sides_same_or_overlapping_as_sets_say(seed):
    """A copy's sides compared through their spans first (blocks given as ranges, no
    arrays made) against Python sets: the same view, or how many ids both hold."""
    from poplar_api.lowering.copies import _same_or_overlap

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 40))
    s = rng.permutation(200)[:n] + int(rng.integers(0, 100))
    if seed % 4 == 0:
        d = s.copy()  # the same view
    elif seed % 4 == 1:
        d = range(int(rng.integers(0, 400)), 0)  # a block
        d = range(d.start, d.start + n)
    else:
        d = rng.permutation(200)[:n] + int(rng.integers(0, 300))
    s_side = range(int(s.min()), int(s.min()) + n) if seed % 3 == 0 else s
    same, overlap = _same_or_overlap(s_side, d)
    s_list, d_list = list(s_side), list(d)
    assert same == (s_list == d_list)
    assert (overlap if not same else 0) == (0 if same else len(set(s_list) & set(d_list)))


def test_variables_of_ids_alternating_between_variables_are_all_marked():
    """Ids that go back and forth between two variables (a transposing copy's operand
    and padding), then on to others and back, mark every variable they touch and no
    other, as numpy's search of every id says."""
    bases = np.array([0, 10, 25, 40, 41, 60], np.int64)  # variable 3 holds one id
    var_ids = np.array([4, 2, 0, 5, 1, 3], np.int64)
    pattern = np.array([12, 3, 13, 4, 14, 5, 15, 6, 40, 13, 45, 2])  # ends back in two
    for ids in (pattern, np.tile(pattern, 300), np.r_[np.tile([11, 1], 500), 70]):
        mask = np.zeros(bases.size, bool)
        variable_marks.mark_variables_in(bases, var_ids, ids, mask)
        want = np.zeros(bases.size, bool)
        want[var_ids[np.searchsorted(bases, ids, side="right") - 1]] = True
        assert mask.tolist() == want.tolist()


@pytest.mark.parametrize("seed", range(6))
def test_variables_marked_from_a_span_equal_a_lookup_per_id(seed):
    """Ids within one variable are marked from their span; ids of several variables one
    by one: both as numpy's search of every id says."""
    rng = np.random.default_rng(seed)
    bases = np.unique(np.r_[0, rng.integers(1, 1000, 30)]).astype(np.int64)
    var_ids = rng.permutation(bases.size).astype(np.int64)
    k = int(rng.integers(0, bases.size - 1))
    inside = rng.integers(bases[k], bases[k + 1], 50)
    anywhere = rng.integers(0, 1100, 50)
    for ids in (inside, anywhere, inside.astype(np.int32), np.array([bases[-1] + 5])):
        mask = np.zeros(bases.size, bool)
        variable_marks.mark_variables_in(bases, var_ids, ids, mask)
        want = np.zeros(bases.size, bool)
        want[var_ids[np.searchsorted(bases, ids, side="right") - 1]] = True
        assert mask.tolist() == want.tolist()
    assert runs.span(np.array([5, -3, 9, 2], np.int32)) == (-3, 10)


def test_large_space_passed_from_its_stretch_owners_only_when_all_are_mapped():
    """A space of several thousand elements is passed at once when the owner at id 0
    and at every change is a tile of the target: an unmapped first element (one change
    after it), or a space with no change and nothing mapped, is still reported."""
    from codelets_common import tiny_graph

    from poplar_api import FLOAT, Engine
    from poplar_api import program as prog
    from poplar_api.errors import GraphValidationError

    g = tiny_graph()
    first = g.addVariable(FLOAT, [5000], "first")
    g.setTileMapping(first.slice(1, 5000), 3)  # element 0 left out
    with pytest.raises(GraphValidationError, match=r"variable 'first'.*1 of 5000"):
        Engine(g, prog.Sequence())
    g = tiny_graph()
    g.addVariable(FLOAT, [5000], "none")
    with pytest.raises(GraphValidationError, match=r"variable 'none'.*5000 of 5000"):
        Engine(g, prog.Sequence())
    g = tiny_graph()
    g.setTileMapping(g.addVariable(FLOAT, [5000], "all"), 1)
    Engine(g, prog.Sequence())


@pytest.mark.parametrize("seed", range(6))
def test_written_runs_marked_and_spanned_as_their_ids(seed):
    """Validation marks written fields held as runs from the runs: the bitmap and the
    count of ids met again equal those of the ids written out in the test, and the span
    is that of the ids (None with no id)."""
    rng = np.random.default_rng(seed)
    begin = rng.integers(0, 300, int(rng.integers(0, 12)))
    end = begin + rng.integers(0, 25, begin.size) * (rng.random(begin.size) < 0.8)
    ids = [i for b, e in zip(begin.tolist(), end.tolist(), strict=True) for i in range(b, e)]
    got = runs.runs_span(begin, end)
    assert got == ((min(ids), max(ids) + 1) if ids else None)
    if not ids:
        return
    lo = min(ids) - int(rng.integers(0, 5))
    marked = np.zeros(max(ids) + 1 - lo, bool)
    again = runs.mark_new_runs(begin, end, lo, marked)
    assert again == len(ids) - len(set(ids))
    assert set((np.flatnonzero(marked) + lo).tolist()) == set(ids)


@pytest.mark.parametrize("seed", range(6))
def test_variables_marked_chunk_by_chunk_and_by_runs_equal_a_lookup_per_id(seed):
    """Liveness marks the variables of ids a chunk at a time (chunks inside the variable
    found last passed over) and of runs one run at a time (runs across several
    variables, empty ones among them): both as numpy's search of every id says, empty
    variables never marked."""
    rng = np.random.default_rng(seed)
    bases = np.sort(np.r_[0, rng.integers(1, 5000, 40), rng.integers(1, 5000, 5)])
    bases = bases.astype(np.int64)  # repeated bases: variables without elements
    space = 5200
    var_ids = rng.permutation(bases.size).astype(np.int64)
    nonempty = np.diff(bases, append=space) > 0

    def want_of(ids):
        want = np.zeros(bases.size, bool)
        want[var_ids[np.searchsorted(bases, ids, side="right") - 1]] = True
        return want

    # long stretches of ascending ids (many whole chunks in one variable), then noise
    stretches = [np.arange(a, a + int(rng.integers(1, 900))) for a in rng.integers(0, 4000, 6)]
    ids = np.concatenate([*stretches, rng.integers(0, space, 40)])
    for dtype in (np.int64, np.int32):
        mask = np.zeros(bases.size, bool)
        variable_marks.mark_variables_in(bases, var_ids, ids.astype(dtype), mask)
        assert mask.tolist() == want_of(ids).tolist()
    begin = rng.integers(0, space, 60)
    end = np.minimum(begin + rng.integers(0, 400, begin.size), space)
    end[::7] = begin[::7]  # empty runs mark nothing
    mask = np.zeros(bases.size, bool)
    variable_marks.mark_runs_in(bases, var_ids, nonempty, begin, end, mask)
    expanded = np.concatenate([np.arange(b, e) for b, e in zip(begin, end, strict=True)])
    assert mask.tolist() == want_of(expanded).tolist()
    assert not mask[var_ids[~nonempty]].any()


def test_space_runs_from_the_lowering_change_points_equal_those_found_again():
    """A compile compacts each element space from the change points its lowering found
    (the ids where the tile changes): the runs kept, and every element's tile read from
    them, are those found from the tile array itself, empty space included."""
    from poplar_api import FLOAT, Graph, IPUModel

    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    rng = np.random.default_rng(11)
    for k in range(5):
        v = graph.addVariable(FLOAT, [int(rng.integers(1, 60))], f"v{k}")
        graph.mapElements(v, np.repeat(rng.integers(0, 4, 8), 8)[: v.numElements()])
    space = graph._state.space(FLOAT)
    want_tiles = space.tile[: space.size].copy()
    want = space.runs()
    changes = runs.change_points(space.tile, space.size)
    got = space.runs(changes)
    assert [a.tolist() for a in got] == [a.tolist() for a in want]
    assert got[0].dtype == want[0].dtype and got[1].dtype == want[1].dtype
    space.compact(changes)
    assert space.tiles_of(np.arange(space.size)).tolist() == want_tiles.tolist()
    empty = Graph(IPUModel("tiny").createDevice().getTarget())._state.space(FLOAT)
    assert [a.size for a in empty.runs(np.zeros(0, np.int64))] == [0, 0]


def test_variable_tiles_of_several_spaces_are_ordered_by_variable_then_tile():
    """Variables of several element sizes made in turn (their ids interleave across the
    spaces), mapped to tiles at random: memory placement's (variable, tile, elements)
    rows are every pair with elements, in order of variable then tile, with the counts
    numpy finds from the tile of each element."""
    from poplar_api import FLOAT, HALF, INT, Graph, IPUModel
    from poplar_api.lowering.exchange import OwnerCache
    from poplar_api.lowering.liveness import VariableIndex
    from poplar_api.lowering.memory import variable_tiles

    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    nt = graph.getTarget().getNumTiles()
    rng = np.random.default_rng(4)
    made = []
    for k in range(12):
        v = graph.addVariable([FLOAT, HALF, INT][k % 3], [int(rng.integers(1, 40))], f"v{k}")
        tiles = rng.permutation(nt)[rng.integers(0, nt, v.numElements())]  # any order
        graph.mapElements(v, tiles)
        made.append((k, tiles))
    state = graph._state
    var, tile, count = variable_tiles(state, VariableIndex(state), OwnerCache(), nt)
    want = [
        (k, t, int(n))
        for k, tiles in made
        for t, n in enumerate(np.bincount(tiles, minlength=nt))
        if n
    ]
    assert list(zip(var.tolist(), tile.tolist(), count.tolist(), strict=True)) == want


@pytest.mark.parametrize("seed", range(4))
def test_variable_tile_counts_sum_to_a_lookup_per_id(seed):
    """The (variable, tile) keys of ids and of runs, one per stretch with its number of
    ids, sum per key to the counts of numpy's lookup of every id (empty variables,
    tiles changing inside a variable, ids going back to a key seen before; int32 and
    int64 ids; the tiles as an array and as the runs of a compacted space)."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 40, 30)
    sizes[[3, 7]] = 0
    bases = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    var_ids = rng.permutation(bases.size).astype(np.int64)
    space = int(sizes.sum())
    tile = np.repeat(rng.integers(-1, 6, space // 5 + 1), 5)[:space].astype(np.int16)
    nt = 6

    def want(ids):
        keys = var_ids[np.searchsorted(bases, ids, side="right") - 1] * nt + tile[ids]
        return np.unique(keys, return_counts=True)

    def summed(keys, counts):
        distinct, at = np.unique(keys, return_inverse=True)
        return distinct, np.bincount(at, counts, distinct.size).astype(np.int64)

    ids = np.concatenate([np.arange(10, 60), rng.integers(0, space, 200), np.arange(5, 15)])
    begin = rng.integers(0, space, 40)
    end = np.minimum(begin + rng.integers(0, 30, begin.size), space)
    expanded = np.concatenate([np.arange(b, e) for b, e in zip(begin, end, strict=True)])
    starts = np.flatnonzero(np.diff(tile, prepend=tile[0] - 1)).astype(np.int64)
    for dtype in (np.int64, np.int32):
        for tiles in (tile, (starts, tile[starts])):
            got = summed(*variable_marks.variable_tile_counts(ids.astype(dtype), tiles, bases,
                                                              var_ids, nt))  # fmt: skip
            assert [g.tolist() for g in got] == [w.tolist() for w in want(ids)]
            held = (begin.astype(dtype), end.astype(dtype))
            got = summed(*variable_marks.variable_tile_counts(held, tiles, bases, var_ids, nt))
            assert [g.tolist() for g in got] == [w.tolist() for w in want(expanded)]
    keys, counts = variable_marks.variable_tile_counts(np.arange(10, 20), tile, bases, var_ids, nt)
    assert counts.sum() == 10 and keys.size < 10  # stretches, not ids


@pytest.mark.parametrize("seed", range(6))
def test_copy_pieces_from_a_mask_of_local_references_equal_those_from_tiles(seed):
    """A Copy's remote pieces found from the mask of its references on their receiving
    tile (``local``: no tile array of its source side) are those found from the source
    tiles, in reference order and grouped by tile, with and without a kept map of
    marks; the mask is the only thing read of the source (a mask that disagrees with
    the tiles gives other pieces)."""
    from poplar_api.lowering import pieces

    rng = np.random.default_rng(seed)
    size, n_tiles = 500, 7
    owner = np.repeat(rng.integers(0, n_tiles, 100), 5)[:size].astype(np.int32)
    n = 300 if seed % 2 else 4000  # short runs (grouped by tile) at 4000 when mixed
    if seed % 3 == 0:  # long runs of ids to one tile: pieces in reference order
        ids = (np.arange(n) * 7 // 5) % size
        dst = np.repeat(rng.integers(0, n_tiles, n // 50 + 1), 50)[:n]
    else:  # neighbours bound for different tiles, ids repeating
        ids = rng.integers(0, size, n)
        dst = rng.integers(0, n_tiles, n)
    dst = dst.astype(np.int32)
    src = owner[ids].astype(np.int32)
    local = src == dst
    for tiles in (None, n_tiles):
        want = pieces.flat_pieces(ids, dst, owner, src, tiles)
        got = pieces.flat_pieces(ids, dst, owner, None, tiles, local=local)
        assert [a.tolist() for a in got] == [a.tolist() for a in want], tiles
        marks: dict = {}
        kept = pieces.flat_pieces(ids, dst, owner, None, tiles, marks, local)
        assert [a.tolist() for a in kept] == [a.tolist() for a in want], tiles
        assert want[0].size
        every = np.ones(n, bool)  # every reference called local: nothing to exchange
        assert pieces.flat_pieces(ids, dst, owner, None, tiles, local=every)[0].size == 0
