"""The lowering's fast kernels against plain numpy written out in the test: ranges
sorted as packed keys, an interval's owner runs, undef counts per variable, a field of
mixed runs and ids, and the pieces of several fields gathered in one set of arrays."""

from types import SimpleNamespace

import numpy as np
import pytest

from poplar_api.lowering import pieces, received
from poplar_api.lowering.exchange import _owner_runs
from poplar_api.lowering.field_tables import _mixed_field
from poplar_api.lowering.liveness import VariableIndex
from poplar_api.vertices import NO_RUN


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("shape", ["small", "wide", "one_length", "sorted"])
def test_sort_ranges_orders_by_begin_then_other(seed, shape):
    """Every pair kept and ``lo`` ascending (all merging needs): ties by ``other`` with
    the packed key, in their first order by argsort when the bits do not fit (``wide``)
    and when already sorted; the keys alone for one length."""
    rng = np.random.default_rng(seed)
    n = 500
    top = 1 << 50 if shape == "wide" else 1000
    lo = rng.integers(0, top, n)
    lo[rng.integers(0, n, 50)] = lo[0]  # ties
    other = rng.integers(1, 1 << 20 if shape == "wide" else 40, n)
    if shape == "one_length":
        other[:] = 7
    if shape == "sorted":
        lo.sort()
    given = lo.astype(np.int32) if top < 1 << 31 else lo
    got_lo, got_other = received.sort_ranges(given, other)
    assert got_lo.tolist() == sorted(lo.tolist())
    # the same order as packed keys (begin << bits | other) when they are packed
    keys, rest, bits = received.sorted_keys(given, other)
    assert (bits > 0) == (shape == "small")
    if bits:
        assert rest.size == 0
        want = sorted(zip(lo.tolist(), other.tolist(), strict=True))
        assert keys.tolist() == [(a << bits) | b for a, b in want]
    unpacked = received.unpack(keys, rest, bits)
    assert [a.tolist() for a in unpacked] == [got_lo.tolist(), got_other.tolist()]
    pairs = sorted(zip(lo.tolist(), other.tolist(), strict=True))
    got = list(zip(got_lo.tolist(), got_other.tolist(), strict=True))
    if shape in ("sorted", "wide"):  # ties in their first order
        first = sorted(zip(lo.tolist(), other.tolist(), strict=True), key=lambda p: p[0])
        assert got == first
    else:
        assert got == pairs


def test_sort_ranges_at_the_bit_width_guard():
    """Keys whose bits together are 62 are packed (ties by ``other``), wider ones are
    sorted by argsort (ties in their first order); no bit of either is lost."""
    for lo_bits, packed in ((31, True), (32, False), (40, False)):
        lo = np.array([(1 << lo_bits) - 1, 5, (1 << lo_bits) - 1, 0], np.int64)
        other = np.array([(1 << 31) - 1, 3, 2, (1 << 31) - 1], np.int64)
        got_lo, got_other = received.sort_ranges(lo, other)
        pairs = list(zip(lo.tolist(), other.tolist(), strict=True))
        want = sorted(pairs) if packed else sorted(pairs, key=lambda p: p[0])
        assert list(zip(got_lo.tolist(), got_other.tolist(), strict=True)) == want


@pytest.mark.parametrize("seed", range(5))
def test_owner_runs_cut_intervals_at_owner_changes(seed):
    """Disjoint sorted intervals cut wherever the owner changes: (owner, length) of
    each run, element by element in the test."""
    rng = np.random.default_rng(seed)
    # the types the exchange planner passes: contiguous intervals, int16 owners (the
    # tiles of a space of fewer than 32,768 tiles) or int32 ones (more tiles)
    owner = np.repeat(rng.integers(0, 6, 80), rng.integers(1, 9, 80))
    owner = owner.astype(np.int32 if seed == 0 else np.int16)
    changes = np.flatnonzero(owner[1:] != owner[:-1]) + 1
    cuts = np.unique(rng.integers(0, owner.size, 40))
    lo, hi = cuts[:-1:2].copy(), cuts[1::2].copy()
    c_lo = np.searchsorted(changes, lo, side="right")
    c_hi = np.searchsorted(changes, hi, side="left")
    total = lo.size + int((c_hi - c_lo).sum())
    tiles, counts = np.empty(total, np.int64), np.empty(total, np.int64)
    _owner_runs(lo, hi, changes, c_lo, c_hi, owner, tiles, counts)
    want = []
    for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
        for i in range(a, b):
            if i > a and owner[i] == owner[i - 1]:
                want[-1][1] += 1
            else:
                want.append([int(owner[i]), 1])
    assert [[t, c] for t, c in zip(tiles.tolist(), counts.tolist(), strict=True)] == want


def _index(sizes: np.ndarray) -> tuple[VariableIndex, SimpleNamespace]:
    bases = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    space = SimpleNamespace(
        var_bases=bases.tolist(), var_ids=list(range(sizes.size)), size=int(sizes.sum())
    )
    state = SimpleNamespace(variables=[None] * sizes.size, spaces={4: space})
    return VariableIndex(state), SimpleNamespace(size=4)


def _random_space(seed: int, count: int, max_size: int, end_size: int) -> tuple:
    """A space of ``count`` variables of random sizes in ``[0, max_size)`` (empty ones
    among them), the first and the last ``end_size`` long, and its index:
    ``(rng, sizes, index, t, owner_of, space)``, with ``rng`` for the test's further
    draws, ``owner_of[id]`` the variable of each id and ``space`` the number of ids."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, max_size, count)
    sizes[0] = sizes[-1] = end_size
    index, t = _index(sizes)
    return rng, sizes, index, t, np.repeat(np.arange(sizes.size), sizes), int(sizes.sum())


@pytest.mark.parametrize("seed", range(5))
def test_counts_of_counts_each_variables_ids(seed):
    """How many of some sorted ids each variable owns (empty variables among them, ids
    at either end of the space, one small variable among many): counted in the test."""
    rng, sizes, index, t, owner_of, space = _random_space(seed, 300, 6, 3)
    picks = [
        np.unique(rng.integers(0, space, 40)),
        np.arange(space),
        np.arange(0, 3),
        np.arange(space - 3, space),
        np.arange(int(sizes[:150].sum()), int(sizes[:151].sum())),
    ]
    for ids in picks:
        vids, counts = index.counts_of(t, ids)
        want_v, want_c = np.unique(owner_of[ids], return_counts=True)
        assert vids.tolist() == want_v.tolist()
        assert counts.tolist() == want_c.tolist()


def test_mixed_field_lays_out_runs_and_ids_in_vertex_order():
    """Vertices holding a run, ids (1-D and 2-D), or nothing (flagged): the ids in
    vertex order, offsets per vertex."""
    begin = np.array([4, NO_RUN, 10, NO_RUN, NO_RUN, 0], np.int64)
    end = np.array([7, 0, 10, 0, 0, 2], np.int64)
    extras = [{}, {"in": np.array([9, 1])}, {}, {"in": np.array([[3, 5], [6, 8]])}, {}, {}]
    bad = np.zeros(6, bool)
    offsets, ids = _mixed_field(begin, end, extras, "in", bad, np.int32)
    assert offsets.tolist() == [0, 3, 5, 5, 9, 9, 11]
    assert ids.tolist() == [4, 5, 6, 9, 1, 3, 5, 6, 8, 0, 1]
    assert ids.dtype == np.int32
    assert bad.tolist() == [False, False, False, False, True, False]


def test_pieces_with_room_for_every_id_are_the_pieces_found_alone():
    """A compute set's pieces gathered into room for one per id read, a field of
    scattered ids with all its references remote, then a run field: each field's own
    pieces, in field order."""
    owner = np.repeat(np.arange(4), 50).astype(np.int32)
    ids = np.arange(199, -1, -1, dtype=np.int64)  # descending: one piece per id
    bounds = np.array([0, 200])
    vtiles = np.array([9])  # a tile that owns nothing: every reference remote
    begin, end = np.array([0, 120]), np.array([100, 200])
    run_tiles = np.array([0, 3])
    found = pieces.Pieces(ids.size + 180)
    pieces.field_pieces(ids, bounds, vtiles, owner, found)
    got = pieces.run_pieces(begin, end, run_tiles, owner, None, found)
    assert got[0][:200].tolist() == ids.tolist() and (got[1][:200] == 1).all()
    assert got[0][200:].tolist() == [50, 120] and got[1][200:].tolist() == [50, 30]
    assert got[2][200:].tolist() == [0, 3]
