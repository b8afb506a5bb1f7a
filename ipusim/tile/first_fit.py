"""Compiled first-fit placement of one tile's blocks, for :mod:`ipusim.tile.memory`.

Each tile's blocks arrive in placement order (rows ``starts[t]:ends[t]``). A block
takes the lowest aligned address of the first region it may use where it overlaps no
placed block it is live together with. Blocks of one *joint group* (the live ranges
of one variable on one tile that must keep one address, e.g. those of a variable a
function touches: its code is compiled once, at fixed addresses, and runs at every
call) are placed together when the first of them comes up in placement order
(:mod:`ipusim.tile.memory` gives a group the place of its last range): at the lowest address
free over every one of their ranges, and each range is then recorded at that address
on its own, so that other blocks may use the address in the gaps between the ranges.
This is how an interference-based allocator treats a variable with a live range of
several disjoint intervals.

Tiles whose sequences of blocks are equal (sizes, alignments, regions, live ranges
and joint groups) get one layout, computed once and copied.

A first fit scans the placed blocks of the region in address order, and only those
live together with the new block matter. Blocks come in order of their first live
point, so a placed block that died before one block began is dead for every later
block of ordinary range too: each region keeps, besides all its placed blocks, a
list of those that may still matter (``floor``: the first point of the latest block
that pruned it; every block dead before it is dropped as a scan passes it). A block
whose range starts below the floor (never live, or of a joint group) scans them all.
Either way the live blocks are met in the same order, so the layout is the same as a
scan of every block gives; the CNN step of ``examples/cnn`` has some 120 always-live
and 53 other blocks per tile, whose scans over each other made placement quadratic.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["joint_links", "place", "sequence_hash"]


def joint_links(tile: np.ndarray, joint: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Links of the joint groups of blocks given in placement order.

    Parameters
    ----------
    tile
        Tile of each block, in placement order.
    joint
        Joint group key of each block (``-1``: none); blocks of one key on one tile
        share an address.

    Returns
    -------
    lead, after
        Per block: the position of its group's first block (itself when it is not
        in a group or leads it), and of the next block of its group (``-1`` at the
        last or outside a group).
    """
    n = tile.size
    lead = np.arange(n, dtype=np.int64)
    after = np.full(n, -1, np.int64)
    grouped = np.flatnonzero(joint >= 0)
    if grouped.size < 2:
        return lead, after
    order = grouped[np.lexsort((grouped, joint[grouped], tile[grouped]))]
    same = (tile[order][1:] == tile[order][:-1]) & (joint[order][1:] == joint[order][:-1])
    after[order[:-1][same]] = order[1:][same]
    starts = np.concatenate(([True], ~same))
    run_lead = order[starts]
    lead[order] = run_lead[np.cumsum(starts) - 1]
    return lead, after


@numba.njit(cache=True, nogil=True)
def sequence_hash(sizes, aligns, regions, lo, hi, link, starts, ends):  # pragma: no cover
    """A hash of each tile's sequence of blocks (tiles with equal sequences share it);
    ``link`` is each block's distance back to its joint group's first block."""
    out = np.empty(starts.shape[0], np.uint64)
    for t in range(starts.shape[0]):
        h = np.uint64(1469598103934665603) ^ np.uint64(ends[t] - starts[t])
        for i in range(starts[t], ends[t]):
            for v in (sizes[i], aligns[i], regions[i], lo[i], hi[i], link[i]):
                h = (h ^ np.uint64(v)) * np.uint64(1099511628211)
        out[t] = h
    return out


@numba.njit(cache=True, nogil=True)
def _same_sequence(sizes, aligns, regions, lo, hi, link, a, b, n):  # pragma: no cover
    for k in range(n):
        i, j = a + k, b + k
        if (
            sizes[i] != sizes[j]
            or aligns[i] != aligns[j]
            or regions[i] != regions[j]
            or lo[i] != lo[j]
            or hi[i] != hi[j]
            or link[i] != link[j]
        ):
            return False
    return True


@numba.njit(cache=True, nogil=True)
def _first_fit(starts, ends, los, his, count, size, align, lo, hi, addr):  # pragma: no cover
    """Lowest ``align``-aligned offset from ``addr`` (aligned) where ``size`` bytes
    overlap none of the first ``count`` placed blocks live together with ``lo..hi``
    (the placed blocks kept in order of start address, ties in order of placement)."""
    for k in range(count):
        if los[k] <= hi and lo <= his[k]:
            if addr + size <= starts[k]:
                break
            aligned = -(-ends[k] // align) * align
            if aligned > addr:
                addr = aligned
    return addr


@numba.njit(cache=True, nogil=True)
def _after_packed(
    starts, ends, los, his, count, size, align, lo, hi, fixed, fixed_top, min_align
):  # pragma: no cover - compiled
    """:func:`_first_fit` from address 0, when the first ``fixed`` placed blocks are
    always live and packed from address 0, each at the ``min_align``-aligned end of the
    one before (``fixed_top`` the end of the last).

    Such blocks overlap every live range and leave no gap a block of ``size > 0``
    bytes fits in when ``align`` is a multiple of ``min_align`` (the gaps are shorter
    than ``min_align`` and end at an aligned address), so the scan over them ends at
    the aligned ``fixed_top``; the rest is scanned from there. Otherwise (an empty
    block, another alignment) every block is scanned."""
    # one call with an int64 ``addr``: a call with the constant 0 would compile a
    # second specialisation of _first_fit (for the literal type of 0)
    skip = 0
    addr = np.int64(0)
    if fixed != 0 and size != 0 and align % min_align == 0:
        skip = fixed
        addr = -(-fixed_top // align) * align
    return _first_fit(
        starts[skip:], ends[skip:], los[skip:], his[skip:], count - skip, size, align,
        lo, hi, addr,
    )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _pruned_fit(
    starts, ends, los, his, r, count, size, align, lo, hi, fixed, fixed_top, min_align
):  # pragma: no cover - compiled
    """:func:`_after_packed` over the first ``count`` blocks of region ``r``'s list of
    blocks that may still matter (row ``r`` of the 2-D arrays), dropping from it, as
    the scan passes them, those dead before ``lo`` (no later block of ordinary range is
    live with them); returns the address and the list's new length."""
    skip = 0
    addr = np.int64(0)
    if fixed != 0 and size != 0 and align % min_align == 0:
        skip = fixed
        addr = -(-fixed_top // align) * align
    w = skip
    k = skip
    while k < count:
        if his[r, k] < lo:
            k += 1
            continue
        if los[r, k] <= hi:
            if addr + size <= starts[r, k]:
                break
            aligned = -(-ends[r, k] // align) * align
            if aligned > addr:
                addr = aligned
        if w != k:
            starts[r, w] = starts[r, k]
            ends[r, w] = ends[r, k]
            los[r, w] = los[r, k]
            his[r, w] = his[r, k]
        w += 1
        k += 1
    if w != k:  # the rest moved up behind the blocks kept
        for j in range(k, count):
            starts[r, w + j - k] = starts[r, j]
            ends[r, w + j - k] = ends[r, j]
            los[r, w + j - k] = los[r, j]
            his[r, w + j - k] = his[r, j]
    return addr, w + count - k


@numba.njit(cache=True, nogil=True)
def _joint_fit(
    starts, ends, los, his, count, size, align, lo, hi, first, after
):  # pragma: no cover
    """Lowest aligned offset free over the live ranges of every block of the joint
    group that starts at block ``first`` (linked by ``after``).

    One first fit (:func:`_first_fit`) over the placed blocks live together with any
    of the group's ranges: the offsets free over every range are those free of each
    range's blocks, so the lowest of them is the lowest free of their union. (A first
    fit per range from the current candidate, repeated until no range moves it, gives
    the same offset after several scans of every placed block; with ResNet-50's
    joint groups those scans were most of the placement's time.)"""
    glo, ghi = lo[first], hi[first]  # the group's span: a quick test of most blocks
    j = after[first]
    while j >= 0:
        glo = min(glo, lo[j])
        ghi = max(ghi, hi[j])
        j = after[j]
    addr = np.int64(0)
    for k in range(count):
        if los[k] > ghi or his[k] < glo:
            continue
        j = first
        while j >= 0 and not (los[k] <= hi[j] and lo[j] <= his[k]):
            j = after[j]
        if j < 0:
            continue  # live with none of the group's ranges
        if addr + size <= starts[k]:
            break
        aligned = -(-ends[k] // align) * align
        if aligned > addr:
            addr = aligned
    return addr


@numba.njit(cache=True, nogil=True)
def _insert(starts, ends, los, his, r, count, start, end, lo, hi):  # pragma: no cover
    """Insert a placed block into the first ``count`` entries of row ``r`` (a region)
    of the 2-D arrays, kept in order of start address (after the blocks of an equal
    start)."""
    k = count
    while k > 0 and starts[r, k - 1] > start:
        starts[r, k] = starts[r, k - 1]
        ends[r, k] = ends[r, k - 1]
        los[r, k] = los[r, k - 1]
        his[r, k] = his[r, k - 1]
        k -= 1
    starts[r, k] = start
    ends[r, k] = end
    los[r, k] = lo
    his[r, k] = hi


@numba.njit(cache=True, nogil=True)
def place(
    sizes,
    aligns,
    regions,
    ident,
    lo,
    hi,
    always,
    lead,
    after,
    starts,
    ends,
    tile_order,
    hashes,
    min_align,
    limits,
    out_region,
    out_offset,
    out_covered,
    out_top,
):  # pragma: no cover - compiled
    """Lay out every tile's blocks (rows ``starts[t]:ends[t]`` in placement order),
    tiles taken in ``tile_order``; a tile whose sequence equals the previous one of the
    same hash copies its layout. A block leading a joint group (``after[i] >= 0``)
    places its whole group (see the module docstring); the group's later blocks are
    then skipped. ``out_covered[t, r]`` and ``out_top[t, r]`` get the bytes of region
    ``r`` that blocks cover (their union) and the highest end."""
    try_order = np.array([[0, 2, -1], [1, 2, -1], [1, 0, 2]], np.int64)
    link = np.arange(sizes.shape[0]) - lead
    rep = -1
    most = 0
    for t in range(starts.shape[0]):
        most = max(most, ends[t] - starts[t])
    # per region: every placed block (p_*) and those that may still matter (a_*), each
    # in order of start address; room for the largest tile, reused tile after tile. A
    # block's start, end and live range lie side by side (columns of one array), as
    # the scans read them together and an insert moves them together (ResNet-50's
    # placement replayed: 0.64 s with an array per column, 0.52 s so)
    placed = np.empty((3, most, 4), np.int64)
    alive = np.empty((3, most, 4), np.int64)
    p_start, p_end, p_lo, p_hi = placed[:, :, 0], placed[:, :, 1], placed[:, :, 2], placed[:, :, 3]
    a_start, a_end, a_lo, a_hi = alive[:, :, 0], alive[:, :, 1], alive[:, :, 2], alive[:, :, 3]
    count = np.zeros(3, np.int64)
    a_count = np.zeros(3, np.int64)
    floor = np.zeros(3, np.int64)
    top = np.zeros(3, np.int64)
    packed = np.ones(3, np.bool_)
    # the always-live blocks packed from address 0 while the region was packed:
    # the first ``fixed[r]`` rows of region r (no later block goes below their
    # top), so a first fit needs no look at them (see _after_packed)
    fixed = np.zeros(3, np.int64)
    fixed_top = np.zeros(3, np.int64)
    low = np.iinfo(np.int64).min
    for position in range(tile_order.shape[0]):
        t = tile_order[position]
        a, b = starts[t], ends[t]
        n = b - a
        if rep >= 0 and hashes[rep] == hashes[t] and ends[rep] - starts[rep] == n:
            r0 = starts[rep]
            if _same_sequence(sizes, aligns, ident, lo, hi, link, r0, a, n):
                for k in range(n):
                    out_region[a + k] = out_region[r0 + k]
                    out_offset[a + k] = out_offset[r0 + k]
                for r in range(3):
                    out_covered[t, r] = out_covered[rep, r]
                    out_top[t, r] = out_top[rep, r]
                continue
        rep = t
        count[:] = 0
        a_count[:] = 0
        floor[:] = low
        top[:] = 0
        packed[:] = True
        fixed[:] = 0
        fixed_top[:] = 0
        for i in range(a, b):
            if lead[i] != i:
                continue  # placed with its group's first block
            size, align = sizes[i], aligns[i]
            group = after[i] >= 0
            fast = always[i] and align == min_align and not group
            chosen, addr = 2, 0
            for c in range(3):
                region = try_order[regions[i], c]
                if region < 0:
                    break
                if fast and packed[region]:
                    addr = -(-top[region] // align) * align
                elif group:
                    addr = _joint_fit(
                        p_start[region], p_end[region], p_lo[region], p_hi[region],
                        count[region], size, align, lo, hi, i, after,
                    )  # fmt: skip
                elif lo[i] >= floor[region]:  # the blocks that may still matter
                    floor[region] = lo[i]
                    addr, a_count[region] = _pruned_fit(
                        a_start, a_end, a_lo, a_hi, region, a_count[region], size, align,
                        lo[i], hi[i], fixed[region], fixed_top[region], min_align,
                    )  # fmt: skip
                else:
                    addr = _after_packed(
                        p_start[region], p_end[region], p_lo[region], p_hi[region],
                        count[region], size, align, lo[i], hi[i], fixed[region],
                        fixed_top[region], min_align,
                    )  # fmt: skip
                if addr + size <= limits[region]:
                    chosen = region
                    break
            j = i
            while j >= 0:
                if size:
                    _insert(
                        p_start, p_end, p_lo, p_hi, chosen, count[chosen], addr, addr + size,
                        lo[j], hi[j],
                    )  # fmt: skip
                    count[chosen] += 1
                    _insert(
                        a_start, a_end, a_lo, a_hi, chosen, a_count[chosen], addr, addr + size,
                        lo[j], hi[j],
                    )  # fmt: skip
                    a_count[chosen] += 1
                out_region[j] = chosen
                out_offset[j] = addr
                j = after[j]
            if size:
                top[chosen] = max(top[chosen], addr + size)
                packed[chosen] = packed[chosen] and fast
                if packed[chosen]:
                    fixed[chosen] = count[chosen]
                    fixed_top[chosen] = top[chosen]
            out_top[t, chosen] = max(out_top[t, chosen], addr + size)
        for r in range(3):  # the union of the region's blocks, in address order
            covered, reach = 0, 0
            for k in range(count[r]):
                s, e = max(p_start[r, k], reach), p_end[r, k]
                if e > s:
                    covered += e - s
                    reach = e
            out_covered[t, r] = covered
