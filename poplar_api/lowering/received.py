"""Received id ranges: sorted as packed keys and merged into what each tile receives,
in compiled passes (the exchange planner's core; :mod:`~poplar_api.lowering.exchange`).

A receiving tile's ranges ``[lo, lo + length)`` of keys ``tile * stride + id`` are
sorted (:func:`sorted_keys`: often in order already, or in few ascending stretches),
then merged into disjoint intervals in one pass (:func:`merge_received`) that also
counts the elements and messages each tile receives, its distinct senders and the
longest grid distance of its messages.
"""

from __future__ import annotations

import numba
import numpy as np

#: Ascending stretches per key up to which keys are sorted by merging their stretches
#: (numpy's stable sort finds and merges natural runs: ``n log(stretches)``) rather
#: than by a quicksort (``n log n``): a convolution's vertices read a few ascending
#: windows each, so their keys come in long ascending stretches.
MERGE_STRETCHES_PER_KEY = 1 / 16


@numba.njit(cache=True, nogil=True)
def _key_stats(dst, begin, other, stride, out):  # pragma: no cover - compiled
    # out[k] = dst[k] * stride + begin[k] (begin[k] when dst is empty), and in the same
    # pass: how often the keys descend, their min and max, and those of other
    tiled = dst.size > 0
    descents = 0
    for k in range(out.size):
        x = out[k] = np.int64(dst[k]) * stride + begin[k] if tiled else np.int64(begin[k])
        y = other[k]
        if k == 0:
            lo_min = lo_max = x
            o_min = o_max = y
            continue
        if x < out[k - 1]:
            descents += 1
        lo_min = min(lo_min, x)
        lo_max = max(lo_max, x)
        o_min = min(o_min, y)
        o_max = max(o_max, y)
    return descents, lo_min, lo_max, o_min, o_max


@numba.njit(cache=True, nogil=True)
def _pack_in_place(keys, other, bits):  # pragma: no cover - compiled
    for k in range(keys.size):
        keys[k] = (keys[k] << bits) | other[k]


@numba.njit(cache=True, nogil=True)
def _unpack(keys, bits, lo, other):  # pragma: no cover - compiled
    mask = (np.int64(1) << bits) - 1
    for k in range(keys.size):
        lo[k] = keys[k] >> bits
        other[k] = keys[k] & mask


_NO_TILES = np.zeros(0, np.int64)


def sorted_keys(lo: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Ranges ``(lo, other)`` (an end or a length each) in order of ``lo``, as
    ``(keys, other, bits)``: with ``bits == 0`` the keys are the ``lo`` in order and
    ``other`` is beside them; with ``bits > 0`` each key is ``lo << bits | other`` and
    the returned ``other`` is empty (:func:`merge_received` reads such keys as they
    are, so they are never unpacked into two arrays).

    Merging into disjoint intervals only needs ``lo`` sorted; ties come in order of
    ``other`` when packed, in their first order otherwise. The keys are made in one
    array (an int64 copy of ``lo``) with their bounds and order in the same compiled
    pass: often in order already (no more work then); when every range has the same
    ``other`` (a strided read gives single-element ranges) only the keys are sorted.
    Otherwise, when both fit in one int64 (non-negative, their bits together at most
    62), the pairs are packed into the keys in place and sorted there, several times
    faster than a stable ``argsort`` and two gathers on the interleaved windows a
    convolution's vertices read; else sorted with ``argsort``. Keys in few ascending
    stretches are sorted by merging them (:data:`MERGE_STRETCHES_PER_KEY`).
    """
    return tile_sorted_keys(_NO_TILES, lo, other, 0)


def tile_sorted_keys(
    dst: np.ndarray, begin: np.ndarray, other: np.ndarray, stride: int, in_place: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """:func:`sorted_keys` of the ranges ``(dst * stride + begin, other)`` (of ``begin``
    when ``dst`` is empty), made in one array: the keys are computed, packed and
    sorted in place (a large exchange's temporaries cost more in fresh pages than the
    passes that fill them). With ``in_place`` the keys are written over ``begin`` when
    it is a writable int64 array (the caller no longer needs it): no fresh array then."""
    n = begin.size
    keys = begin if in_place and _scratch(begin) else np.empty(n, np.int64)
    if n == 0:
        return keys, other, 0
    descents, lo_min, lo_max, o_min, o_max = _key_stats(dst, begin, other, stride, keys)
    if not descents:
        return keys, other, 0
    # the sorted values are the same whichever way they are sorted
    kind = "stable" if descents <= MERGE_STRETCHES_PER_KEY * n else "quicksort"
    other = other.astype(np.int64, copy=False)
    if o_min == o_max:  # one length for all (often single elements): keys only
        keys.sort(kind=kind)
        return keys, other, 0
    bits = int(o_max).bit_length()
    if lo_min >= 0 and o_min >= 0 and int(lo_max).bit_length() + bits <= 62:
        _pack_in_place(keys, other, bits)
        keys.sort(kind=kind)
        return keys, other[:0], bits
    order = np.argsort(keys, kind="stable")
    return keys[order], other[order], 0


def _scratch(a: np.ndarray) -> bool:
    """Whether results may be written over ``a``: a writable, contiguous int64 array."""
    return a.dtype == np.int64 and a.flags.writeable and a.flags.c_contiguous


def unpack(keys: np.ndarray, other: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``(lo, other)`` of what :func:`sorted_keys` returns, as two arrays."""
    if bits == 0:
        return keys, other
    lo, other = np.empty(keys.size, np.int64), np.empty(keys.size, np.int64)
    _unpack(keys, bits, lo, other)
    return lo, other


def sort_ranges(lo: np.ndarray, other: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Ranges ``(lo, other)`` (an end or a length each) in order of ``lo``, as two
    arrays (:func:`sorted_keys` says how and in which order ties come)."""
    return unpack(*sorted_keys(lo, other))


@numba.njit(cache=True, nogil=True, inline="always")
def _gallop(arr, x, start, right):  # pragma: no cover - compiled
    # first i >= start with arr[i] > x (right) or arr[i] >= x (left); arr sorted and
    # the answer known to be at or after start: an exponential then a binary search
    n = arr.size
    lo = start
    step = 1
    hi = start
    while hi < n and (arr[hi] <= x if right else arr[hi] < x):
        lo = hi + 1
        hi = lo + step
        step *= 2
    if hi > n:
        hi = n
    while lo < hi:
        mid = (lo + hi) // 2
        if arr[mid] <= x if right else arr[mid] < x:
            lo = mid + 1
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True, inline="always")
def raise_distance(dst, sender, here, per_ipu, column, row, distance):  # pragma: no cover
    """Raise the longest grid distance of tiles ``dst`` (at local place ``here``) and
    ``sender`` to that of a message between them (``column``, ``row``: the places of
    one IPU's tiles; ``distance`` over every tile)."""
    there = sender if distance.size <= per_ipu else sender % per_ipu
    d = abs(column[here] - column[there]) + abs(row[here] - row[there])
    if d > distance[dst]:
        distance[dst] = d
    if d > distance[sender]:
        distance[sender] = d


#: Ids up to which an interval's senders and messages are found by reading its ids'
#: owners one by one rather than by searching the owner changes for its ends (two
#: searches of an array of a change per stretch of one owner, each a cache miss or more
#: on a large space). The CNN step of ``examples/cnn``: 609 k intervals from 1.04 M
#: ranges in 67 merges, replayed: 33.2 ms searching every interval, 26.3 ms reading
#: up to 8 ids, 28.1 up to 16, 31.2 up to 32 (medians of six, load 6.6-7.5).
WALK_IDS = 8


@numba.njit(cache=True, nogil=True)
def _merge_received(
    lo,
    length,
    stride,
    changes,
    stretch_owner,
    owner,
    column,
    row,
    elements,
    messages,
    distance,
    out_a,
    out_b,
    out_tile,
    pairs,
    senders,
    bits,
    stamp,
):  # pragma: no cover - compiled
    # lo sorted; a range is [lo[k], lo[k] + length[k]) of key dst * stride + id, or
    # with bits > 0 lo[k] is that key << bits | length[k]; stretch_owner[s] is the tile
    # of the ids from change s - 1 (from id 0 for s = 0) up to change s
    m = 0
    mask = (np.int64(1) << bits) - 1
    if bits:
        cur_lo = lo[0] >> bits
        cur_hi = cur_lo + (lo[0] & mask)
    else:
        cur_lo = lo[0]
        cur_hi = lo[0] + length[0]
    last_dst = -1
    pos = 0
    per_ipu = column.size
    n_tiles = elements.size
    n_pairs = n_tiles if pairs.size else 0  # pairs[dst * tiles + sender]
    # keys ascend, so the receiving tile only grows: it is found by division only when
    # a key passes the current tile's end (a division per interval cost more than the
    # rest of the interval's work); tiles' grid places likewise, once per tile
    base = hi_key = 0
    here = 0
    x = ln = 0
    for k in range(1, lo.size + 1):
        if k < lo.size:
            if bits:
                x = lo[k] >> bits
                ln = lo[k] & mask
            else:
                x = lo[k]
                ln = length[k]
            if x <= cur_hi:  # overlapping or touching: the same interval
                if x + ln > cur_hi:
                    cur_hi = x + ln
                continue
        if cur_lo >= hi_key:  # the intervals of one tile come in id order
            last_dst = cur_lo // stride
            base = last_dst * stride
            hi_key = base + stride
            here = last_dst % per_ipu
            pos = 0
        dst = last_dst
        a = cur_lo - base
        b = cur_hi - base
        out_a[m] = a
        out_b[m] = b
        out_tile[m] = dst
        m += 1
        elements[dst] += b - a
        if b - a <= WALK_IDS:
            # a short interval: its ids' owners read one by one (the owner of its first
            # id, then each change of owner), where searching the changes for both ends
            # costs a look-up or more of a large array each
            sender = owner[a]
            n_msgs = 1
            for i in range(a, b):
                if i > a:
                    if owner[i] == sender:
                        continue
                    sender = owner[i]
                    n_msgs += 1
                if n_pairs:
                    if pairs[dst * n_pairs + sender] == stamp:
                        continue  # a pair seen before: its distance is counted already
                    pairs[dst * n_pairs + sender] = stamp
                    senders[dst] += 1
                raise_distance(dst, sender, here, per_ipu, column, row, distance)
            messages[dst] += n_msgs
        else:
            c_lo = _gallop(changes, a, pos, True)
            c_hi = _gallop(changes, b, c_lo, False)
            pos = c_lo
            messages[dst] += 1 + c_hi - c_lo
            # the stretch holding the interval's first id (c_lo changes lie at or
            # before it), then the stretch begun at each change inside: their owners,
            # read from an array of one entry per stretch where the changes are
            # searched, not from the space's tile array (a cache miss per interval)
            for c in range(c_lo, c_hi + 1):
                sender = stretch_owner[c]
                if n_pairs:
                    if pairs[dst * n_pairs + sender] == stamp:
                        continue  # a pair seen before: its distance is counted already
                    pairs[dst * n_pairs + sender] = stamp
                    senders[dst] += 1
                raise_distance(dst, sender, here, per_ipu, column, row, distance)
        if k < lo.size:
            cur_lo = x
            cur_hi = x + ln
    return m


# uint8 as the planners' pair maps are: a call without pairs shares their compiled pass
_NO_PAIRS = (np.zeros(0, np.uint8), np.zeros(0, np.int64))


def merge_received(
    lo: np.ndarray,
    length: np.ndarray,
    stride: int,
    changes: np.ndarray,
    owner: np.ndarray,
    coordinates: tuple[np.ndarray, np.ndarray],
    num_tiles: int,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
    bits: int = 0,
    stamp: int = 1,
    in_place: bool = False,
    scratch: tuple[np.ndarray, np.ndarray] | None = None,
    stretch_owner: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """What each receiving tile gets of id ranges, in one compiled pass.

    Parameters
    ----------
    lo, length
        Ranges ``[lo, lo + length)`` of keys ``dst * stride + id`` (``stride`` above
        every id, so the ranges of two tiles never touch), ``lo`` sorted; or, when
        ``bits > 0``, ``lo`` holds the packed keys of :func:`sorted_keys` (each
        range's key shifted left by ``bits``, its length in the low bits) and
        ``length`` is not read.
    changes
        Sorted ids where the owning tile changes (:func:`change_points`).
    owner
        Tile of each id.
    coordinates
        ``(column, row)`` of each tile of an IPU on the layout grid
        (:func:`ipusim.tile.layout.tile_coordinates`).
    num_tiles
        Tiles of the target.
    pairs
        Optional ``(seen, senders)``: an array of ``num_tiles ** 2`` where
        ``seen[dst * num_tiles + sender]`` is set to ``stamp`` for every tile a
        receiving tile gets a message from (a pair holding ``stamp`` already is seen;
        a bool array with ``stamp`` 1 is a plain bitmap), and per receiving tile the
        count of such senders (raised when a pair is first seen).
    in_place
        Write the intervals' begins over ``lo`` (an int64 array the caller no longer
        needs; the returned ``a`` is then a view of it).
    scratch
        Optional ``(ends, tiles)``: arrays of at least ``lo.size`` rows the caller no
        longer needs, written over with the intervals' ends and receiving tiles where
        they are writable int64 arrays (``length`` itself may be one: the m-th interval
        is written once the m-th range at least is read).
    stretch_owner
        The owner of each stretch between changes (:func:`stretch_owners` of
        ``owner`` and ``changes``), when the caller keeps it (a planner's lowering
        makes it once per element space); made here when None.

    Returns
    -------
    tuple of numpy.ndarray
        ``(a, b, tile, elements, messages, distance)``: the union of the ranges of
        each tile as disjoint id intervals ``[a, b)`` (touching ones joined), tile
        after tile, and the receiving tile of each (``lo // stride``, known to the
        pass, so no search of the per-tile element counts finds it again); the
        elements and messages each tile receives (a message per interval and per
        change of owner inside it); and per tile the longest grid distance of a
        message it sends or receives.
    """
    elements = np.zeros(num_tiles, np.int64)
    messages = np.zeros(num_tiles, np.int64)
    distance = np.zeros(num_tiles, np.int64)
    # the intervals' begins may overwrite the keys: the m-th interval is written once
    # keys up to the m-th at least are read
    out_a = lo if in_place else np.empty(lo.size, np.int64)
    spare_b, spare_tile = (None, None) if scratch is None else scratch
    out_b = _rows_for(spare_b, lo.size)
    out_tile = _rows_for(spare_tile, lo.size)
    m = 0
    if lo.size:
        column, row = coordinates
        if stretch_owner is None:
            stretch_owner = stretch_owners(owner, changes)
        m = _merge_received(
            lo, length, stride, changes, stretch_owner, owner, column, row, elements, messages,
            distance,
            out_a, out_b, out_tile, *(_NO_PAIRS if pairs is None else pairs), int(bits),
            int(stamp),
        )  # fmt: skip
    return out_a[:m], out_b[:m], out_tile[:m], elements, messages, distance


def stretch_owners(owner: np.ndarray, changes: np.ndarray) -> np.ndarray:
    """The tile of each stretch of one owner: ``owner`` at id 0 and at each of
    ``changes`` (the :func:`~poplar_api.lowering.runs.change_points` of ``owner``), in
    ``owner``'s dtype. Stretch ``s`` holds the ids from ``changes[s - 1]`` (0 for the
    first) up to ``changes[s]``, so an id with ``c`` changes at or before it lies in
    stretch ``c``."""
    if not owner.size:
        return owner[:0].copy()
    out = np.empty(changes.size + 1, owner.dtype)
    out[0] = owner[0]
    np.take(owner, changes, out=out[1:])
    return out


def _rows_for(spare: np.ndarray | None, n: int) -> np.ndarray:
    """``spare[:n]`` when results may be written over it (:func:`_scratch`), else a new
    int64 array of ``n`` rows."""
    if spare is not None and spare.size >= n and _scratch(spare):
        return spare[:n]
    return np.empty(n, np.int64)
