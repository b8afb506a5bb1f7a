"""``conv_rearrange._same`` (whether Poplar elides a rearranging copy) against its
former form, written out here: two stable sorts, one by the source's ids and one by
the destination's, compared, and their contiguous regions compared. The compiled
walk along the source's order must answer the same on fuzzed layouts: equal ones,
ones that differ in order, in adjacency or in one tile, sources holding an element
twice, unmapped positions, int32 and strided ids."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.poplin.conv_rearrange import _same


def _old_region_starts(tiles, ids, order):
    t, i = tiles[order], ids[order]
    starts = np.ones(order.size, bool)
    starts[1:] = (t[1:] != t[:-1]) | (order[1:] != order[:-1] + 1) | (i[1:] != i[:-1] + 1)
    return starts


def _old_same(ts, td, s_ids, d_ids):
    if int(ts.min()) < 0 or not np.array_equal(ts, td):
        return False
    s_order = np.lexsort((s_ids, ts))
    in_order = s_ids[s_order]
    if (in_order[1:] == in_order[:-1]).any():
        return False
    d_order = np.lexsort((d_ids, ts))
    if not np.array_equal(s_order, d_order):
        return False
    return np.array_equal(
        _old_region_starts(ts, s_ids, s_order), _old_region_starts(ts, d_ids, d_order)
    )


def _layout(rng, n, tiles):
    """A tile per position and ids laid out tile by tile in runs, as a copy's operands
    are: positions dealt to tiles in runs, each tile's ids consecutive in runs."""
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, rng.integers(0, 8)), replace=False))
    ts = np.repeat(rng.integers(0, tiles, cuts.size + 1), np.diff(np.r_[0, cuts, n]))
    ids = np.empty(n, np.int64)
    base = 0
    for t in np.unique(ts):
        at = np.flatnonzero(ts == t)
        ids[at] = base + np.arange(at.size)
        base += at.size + int(rng.integers(0, 3))  # gaps between tiles' memory
    return ts, ids


def _variants(rng, ts, ids):
    """Destinations (tiles, ids) related to a source's: the same, shifted, with a swap,
    a gap, a tile changed, a repeat; and arbitrary ones."""
    n = ids.size
    yield ts, ids
    yield ts, ids + 1000
    if n > 1:
        d = ids.copy()
        i, j = rng.choice(n, 2, replace=False)
        d[[i, j]] = d[[j, i]]
        yield ts, d
        d = ids.copy()
        d[rng.integers(0, n) :] += 1  # a gap: the regions differ
        yield ts, d
        d = ids.copy()
        d[rng.integers(0, n)] = d[rng.integers(0, n)]  # a repeat in the destination
        yield ts, d
        t2 = ts.copy()
        t2[rng.integers(0, n)] += 1
        yield t2, ids
        yield ts, rng.permutation(ids)
        yield ts, -ids  # descending
    yield ts, rng.integers(0, 2 * n + 1, n)


@pytest.mark.parametrize("seed", range(40))
def test_same_answers_as_the_two_sorts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    ts, s_ids = _layout(rng, n, int(rng.integers(1, 6)))
    sources = [s_ids, s_ids.copy()]
    if n > 1:
        dup = s_ids.copy()
        dup[rng.integers(0, n)] = dup[rng.integers(0, n)]  # the source holds one twice
        sources.append(dup)
        sources.append(rng.permutation(s_ids))
    answers = []
    for src in sources:
        for td, d_ids in _variants(rng, ts, src):
            for cast in (np.int64, np.int32):
                got = _same(ts, td.astype(cast), src.astype(cast), d_ids.astype(cast))
                assert got == _old_same(ts, td, src, d_ids)
                answers.append(got)
    assert True in answers  # (each seed has equal layouts)


def test_same_reads_strided_ids_and_refuses_unmapped() -> None:
    rng = np.random.default_rng(7)
    ts, ids = _layout(rng, 400, 4)
    wide = np.stack([ids, ids + 5], 1)  # ids[:, 0] is a strided view
    assert _same(ts, ts, wide[:, 0], wide[:, 1]) == _old_same(ts, ts, ids, ids + 5)
    assert _same(ts[::2], ts[::2], ids[::2], ids[::2] * 2) == _old_same(
        ts[::2], ts[::2], ids[::2], ids[::2] * 2
    )
    unmapped = ts.copy()
    unmapped[3] = -1
    assert not _same(unmapped, unmapped, ids, ids)
    one = np.array([2])
    assert _same(one, one, np.array([5]), np.array([9]))
