"""Which references of an exchange cross IPUs, found from runs of element ids.

On a target of several IPUs, an exchange's references are runs of element ids bound
for receiving tiles (:meth:`~poplar_api.lowering.exchange.ExchangePlanner.add_pieces`).
A run whose elements all live on its receiving tile's own IPU is planned on chip, as
on one IPU, from the run itself; only the receiving tiles that get some element from
another IPU need the element-by-element planning that lands an element once per IPU
(:meth:`~poplar_api.lowering.exchange.ExchangePlanner.add`). In a sharded or
pipelined model the elements that cross IPUs are the few tensors copied between
stages, so telling the two apart without expanding the runs keeps the planning of
every other exchange of a multi-IPU graph at the cost of one IPU's.

The owning IPU of every id is looked up through the space's *IPU stretches*: the ids
where the owning tile's IPU changes, found once per element space from the ids where
the owning tile changes (:func:`ipu_stretches`).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from ipusim.tile.layout import tile_distance
from poplar_api.types import Type

__all__ = ["LandingMap", "ipu_stretches", "plan_references", "receivers_from_other_ipus"]


def ipu_stretches(
    owner: np.ndarray, changes: np.ndarray, tiles_per_ipu: int, space: int
) -> tuple[np.ndarray, np.ndarray]:
    """Stretches of consecutive ids owned on one IPU.

    Parameters
    ----------
    owner
        Tile of each id of an element space (-1 where unmapped).
    changes
        Sorted ids where the owning tile changes
        (:func:`~poplar_api.lowering.runs.change_points` of ``owner``).
    tiles_per_ipu
        Tiles of one IPU.
    space
        Ids of the space.

    Returns
    -------
    tuple of numpy.ndarray
        ``(ends, ipu)``: int64 end (exclusive) of each stretch, ascending, the last
        one ``space``, and the IPU owning the stretch (-1 for unmapped ids).
    """
    starts = np.concatenate((np.zeros(1, np.int64), np.asarray(changes, np.int64)))
    ipu = np.asarray(owner[starts], np.int64) // tiles_per_ipu  # -1 stays -1
    new = np.ones(starts.size, bool)
    new[1:] = ipu[1:] != ipu[:-1]
    first = np.flatnonzero(new)
    ends = np.append(starts[first[1:]], np.int64(space))
    return ends, ipu[first]


def receivers_from_other_ipus(
    begin: np.ndarray,
    length: np.ndarray,
    dst: np.ndarray,
    stretches: tuple[np.ndarray, np.ndarray],
    tiles_per_ipu: int,
) -> np.ndarray:
    """Whether each run's receiving tile gets some element from another IPU.

    A run ``[begin, begin + length)`` bound for tile ``dst`` stays on chip when it
    lies within one IPU stretch owned by ``dst``'s IPU; a receiving tile with any
    other run is marked on all its runs (its references must be planned together).

    Parameters
    ----------
    begin, length, dst
        The runs and their receiving tiles (int arrays of one length).
    stretches
        :func:`ipu_stretches` of the runs' element space.
    tiles_per_ipu
        Tiles of one IPU.

    Returns
    -------
    numpy.ndarray
        bool per run: its receiving tile gets elements from another IPU.
    """
    ends, ipu = stretches
    dst = np.asarray(dst)
    far = np.zeros(int(dst.max()) + 1 if dst.size else 0, bool)
    if not _mark_far(np.asarray(begin), np.asarray(length), dst, ends, ipu, tiles_per_ipu, far):
        return np.zeros(dst.size, bool)
    return far[dst]


@numba.njit(cache=True, nogil=True)
def _mark_far(begin, length, dst, ends, ipu, tiles_per_ipu, far):  # pragma: no cover - compiled
    # far[t] for every receiving tile t with a run not within one stretch of t's IPU;
    # whether there is any. Runs come mostly in id order: the stretch of the last run
    # is tried before a binary search
    found = False
    m = ends.size
    k = 0
    for i in range(begin.size):
        b = begin[i]
        if not (ends[k] > b and (k == 0 or ends[k - 1] <= b)):
            lo, hi = 0, m - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if ends[mid] <= b:
                    lo = mid + 1
                else:
                    hi = mid
            k = lo
        d = dst[i]
        if ipu[k] != d // tiles_per_ipu or b + length[i] > ends[k]:
            far[d] = True
            found = True
    return found


class LandingMap:
    """Element id -> the tile of one IPU it landed on from another IPU, for the few
    elements of a large id space that crossed (sorted keys; an id without one gives
    -1)."""

    def __init__(self) -> None:
        self.keys = np.zeros(0, np.int64)
        self.tiles = np.zeros(0, np.int64)

    def get(self, ids: np.ndarray) -> np.ndarray:
        """int64 tile of each id, -1 where none is set."""
        ids = np.asarray(ids, np.int64)
        if self.keys.size == 0:
            return np.full(ids.size, -1, np.int64)
        pos = np.minimum(np.searchsorted(self.keys, ids), self.keys.size - 1)
        return np.where(self.keys[pos] == ids, self.tiles[pos], -1)

    def insert(self, ids: np.ndarray, tiles: np.ndarray | int) -> None:
        """Set ``tiles`` (one per id, or one for all) for ``ids`` (distinct, none set
        before)."""
        ids = np.asarray(ids, np.int64)
        keys = np.concatenate((self.keys, ids))
        tiles = np.concatenate((self.tiles, np.broadcast_to(np.int64(tiles), ids.shape)))
        order = np.argsort(keys, kind="stable")
        self.keys, self.tiles = keys[order], tiles[order]


def plan_references(planner: Any, element_type: Type, ids: Any, src: Any, dst: Any) -> None:
    """References ``ids`` (sent by tiles ``src``) needed on tiles ``dst``, added to an
    :class:`~poplar_api.lowering.exchange.ExchangePlanner` for every receiving tile at
    once, as if tile after tile in ascending order.

    A reference on its own tile costs nothing; a tile receives each id once (the first
    reference's sender sends it). An id from another IPU crosses the links once per
    destination IPU: it lands on the lowest tile of that IPU that needs it (a global
    transfer from its sender), unless it landed there in an earlier call, and every
    other tile of the IPU needing it gets it on chip from the landing tile. Every
    reference bound for a tile must come in one call.
    """
    n, tpi, size = planner.num_tiles, planner.tiles_per_ipu, element_type.size
    ids, src, dst = (np.asarray(a, np.int64).reshape(-1) for a in (ids, src, dst))
    remote = src != dst
    if not remote.any():
        return
    ids, src, dst = ids[remote], src[remote], dst[remote]
    order = np.lexsort((ids, dst))  # stable: a tile's first reference of an id first
    ids, src, dst = ids[order], src[order], dst[order]
    first = np.ones(ids.size, bool)
    first[1:] = (ids[1:] != ids[:-1]) | (dst[1:] != dst[:-1])
    ids, src, dst = ids[first], src[first], dst[first]
    relayed = np.zeros(ids.size, bool)
    if planner.num_ipus > 1:
        crossing = src // tpi != dst // tpi
        if crossing.any():
            landed = _land(planner, size, ids, src, dst, crossing)
            relayed = crossing[~landed]
            ids, src, dst = ids[~landed], src[~landed], dst[~landed]
            if ids.size == 0:
                return
    planner.received += np.bincount(dst, minlength=n).astype(np.int64) * size
    step = np.ones(ids.size, bool)  # a new run of consecutive ids on a tile
    step[1:] = (dst[1:] != dst[:-1]) | (ids[1:] != ids[:-1] + 1)
    message = step.copy()  # ... or of one sender
    message[1:] |= src[1:] != src[:-1]
    planner.messages_received += np.bincount(dst[message], minlength=n).astype(np.int64)
    starts = np.flatnonzero(step)
    ends = np.append(starts[1:], ids.size) - 1
    planner.received_runs.setdefault(size, []).append((dst[starts], ids[starts], ids[ends] + 1))
    keys = np.unique(dst * n + src)
    pairs = planner.take_pair_map()
    if pairs is None:
        planner.sender_keys.append(keys)
    else:
        seen, senders, stamp = pairs
        new = keys[seen[keys] != stamp]
        seen[new] = stamp
        senders += np.bincount(new // n, minlength=n).astype(np.int64)
    if relayed.any():
        for ipu in np.unique(dst[relayed] // tpi).tolist():
            here = relayed & (dst // tpi == ipu)
            planner.relayed.setdefault((size, ipu), []).append(ids[here])
    if not relayed.all():
        planner.sent_one_by_one(element_type, ids[~relayed], src[~relayed])
    to, peer = keys // n, keys % n
    dist = tile_distance(planner.cfg.tile, peer % tpi, to % tpi).astype(np.int64)
    np.maximum.at(planner.max_distance, to, dist)
    np.maximum.at(planner.max_distance, peer, dist)


def _land(
    planner: Any, size: int, ids: np.ndarray, src: np.ndarray, dst: np.ndarray, crossing: np.ndarray
) -> np.ndarray:
    """Plan the references (sorted by tile, then id) that come from another IPU: an id
    not on the tile's IPU yet lands on the lowest tile needing it (a global transfer
    from its sender); the other tiles get it from there. Writes the landing tile as
    the sender of the relayed ones (``src``); returns which references landed."""
    n, tpi = planner.num_tiles, planner.tiles_per_ipu
    landed = np.zeros(ids.size, bool)
    cross = np.flatnonzero(crossing)
    ipu = dst[cross] // tpi
    for i in np.unique(ipu).tolist():
        at = cross[ipu == i]  # ascending tile, then id
        landing = planner.landing.get((size, i))
        if landing is None:
            landing = planner.landing[(size, i)] = LandingMap()
        prior = landing.get(ids[at])
        fresh = at[prior < 0]
        by_id = fresh[np.argsort(ids[fresh], kind="stable")]  # lowest tile first per id
        lead = np.ones(by_id.size, bool)
        lead[1:] = ids[by_id[1:]] != ids[by_id[:-1]]
        lands = by_id[lead]
        landed[lands] = True
        landing.insert(ids[lands], dst[lands])
        planner.global_keys.append(src[lands] * n + dst[lands])
        planner.global_bytes.append(np.full(lands.size, size, np.int64))
        src[at] = np.where(prior >= 0, prior, src[at])
        follower = by_id[~lead]  # relayed from the id's landing tile in this call
        src[follower] = np.repeat(
            dst[lands], np.diff(np.append(np.flatnonzero(lead), by_id.size)) - 1
        )
    return landed
