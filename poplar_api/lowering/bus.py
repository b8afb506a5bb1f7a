"""Exchange-bus sharing: the bytes two tiles of a bus pair both receive.

Local tiles ``2k`` and ``2k + 1`` of an IPU share an exchange bus. An element is sent
once by one tile, so the same element received by both tiles of a pair is one message
on their shared bus (``ir.Exchange.bytes_shared``). The exchange planner
(:mod:`~poplar_api.lowering.exchange`) keeps what each tile receives as id intervals;
:func:`shared_bytes` intersects the intervals of the two tiles of every pair in one
compiled walk.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["bus_pair", "pair_overlap", "shared_bytes"]


def shared_bytes(
    received_runs: dict[int, list[tuple[np.ndarray, np.ndarray, np.ndarray]]],
    num_tiles: int,
    tiles_per_ipu: int,
) -> np.ndarray:
    """int64 per tile: bytes it receives that its exchange-bus partner receives too.

    Parameters
    ----------
    received_runs
        Element size -> parts ``(tile, lo, hi)``: id intervals ``[lo, hi)`` each
        receiving tile gets (overlapping or not, mostly in (tile, id) order).
    num_tiles, tiles_per_ipu
        Tiles of the target and of one IPU.
    """
    shared = np.zeros(num_tiles, np.int64)
    for size, parts in received_runs.items():
        if len(parts) == 1:
            tile, lo, hi = parts[0]
        else:
            tile, lo, hi = (np.concatenate([p[i] for p in parts]) for i in range(3))
        if tile.size < 2:
            continue
        if not _in_order(tile, lo):  # planned in (tile, id) order, mostly
            order = np.lexsort((lo, tile))
            tile, lo, hi = tile[order], lo[order], hi[order]
        common = np.zeros(num_tiles, np.int64)
        pair_overlap(tile, lo, hi, tiles_per_ipu, common)
        shared += common * size
    return shared


@numba.njit(cache=True)
def _in_order(tile, lo):  # pragma: no cover - compiled
    """Whether ranges are sorted by (tile, lo)."""
    for i in range(1, tile.shape[0]):
        if tile[i] < tile[i - 1] or (tile[i] == tile[i - 1] and lo[i] < lo[i - 1]):
            return False
    return True


@numba.njit(cache=True, inline="always")
def bus_pair(tile, i, tiles_per_ipu):  # pragma: no cover - compiled
    """From the first entry ``i`` of a tile in ``tile`` (sorted): ``(j, k)``, the tile's
    entries ``[i, j)`` and its bus partner's ``[j, k)``; ``k == j`` when the tile is not
    the even tile of a pair (local tile ``2k`` with ``2k + 1``) or its partner has none.
    The next tile's entries begin at ``k`` either way. Inlined into the pair walks
    (:func:`pair_overlap`, :func:`~poplar_api.lowering.strided.pair_common`)."""
    m = tile.shape[0]
    t = tile[i]
    j = i
    while j < m and tile[j] == t:
        j += 1
    k = j
    local = t % tiles_per_ipu
    if local % 2 == 0 and local + 1 < tiles_per_ipu:
        while k < m and tile[k] == t + 1:
            k += 1
    return j, k


@numba.njit(cache=True)
def pair_overlap(tile, lo, hi, tiles_per_ipu, common):  # pragma: no cover - compiled
    """Per tile, the ids it receives that its bus partner (local tile ``2k`` with
    ``2k + 1``) receives too (``common``, added to), from id ranges ``[lo, hi)`` sorted
    by (tile, lo), overlapping or not: a walk over the pair's two lists of ranges, each
    side's overlapping or touching ranges joined as it goes.

    The join is written out on each side rather than called as a helper: inlined
    into this walk by Numba (``inline="always"``, which typed it once) it made the
    walk three to four times slower than the loops written here."""
    i = 0
    m = tile.shape[0]
    while i < m:
        j, k = bus_pair(tile, i, tiles_per_ipu)
        if k > j:
            # side a: the tile's ranges [i, j), side b: its partner's [j, k); (a0, a1)
            # and (b0, b1) the joined range each side is at, a and b its next range
            a, b = i, j
            a0 = a1 = b0 = b1 = 0
            both = 0
            next_a = next_b = True
            while True:
                if next_a:
                    if a == j:
                        break
                    a0, a1 = lo[a], hi[a]
                    a += 1
                    while a < j and lo[a] <= a1:
                        if hi[a] > a1:
                            a1 = hi[a]
                        a += 1
                if next_b:
                    if b == k:
                        break
                    b0, b1 = lo[b], hi[b]
                    b += 1
                    while b < k and lo[b] <= b1:
                        if hi[b] > b1:
                            b1 = hi[b]
                        b += 1
                overlap = min(a1, b1) - max(a0, b0)
                if overlap > 0:
                    both += overlap
                next_a = a1 < b1
                next_b = not next_a
            common[tile[i]] += both
            common[tile[j]] += both
        i = k
