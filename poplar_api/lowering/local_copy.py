"""The on-tile part of a ``Copy`` between tensors: Poplar's runtime copy vertices of the
elements a copy moves within a tile, costed by :mod:`ipusim.machine_copies`.

A piece is a run of copied elements on one tile whose source and destination element
ids both step by one; pieces of one length at constant strides on both sides form one
strided region; a tile's copy is a gather or a scatter by the side with more runs
(:func:`on_tile_copy_steps`). The pieces are found in one compiled pass
(:func:`_local_regions`, also the pieces of a copy planned a row at a time); for a
whole copy the same pass cuts them into the copy vertices as it finds them
(:func:`_local_vertices`): no array of pieces is made, where a transposing copy has
one piece per element (215,832 of a small CNN's weight-update rearrangement).
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

from ipusim.machine_copies import (
    _F0,
    ELEMENT_BYTES,
    _granularity,
    copy_bytes_per_cycle,
    memcpy_row_cycles,
    on_tile_copy_vertices,
)
from poplar_api.lowering import runs

__all__ = ["on_tile_copy_steps"]


def on_tile_copy_steps(
    cfg: Any,
    s_ids: np.ndarray | range,
    d_ids: np.ndarray | range,
    d_tile: np.ndarray,
    local: np.ndarray,
    item_bytes: int,
    element_type: str | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Copy vertices ``(tile, thread cycles)`` of the elements a ``Copy`` moves within a
    tile (``local``): Poplar's runtime copy vertices
    (:func:`ipusim.machine_copies.on_tile_copy_vertices`).

    A piece is a run of copied elements on one tile whose source and destination
    element ids both step by one (a variable's elements on a tile lie in one block of
    memory in id order); consecutive pieces of one length whose starts step by the same
    strides on both sides form one strided region (a transpose's column, say), which a
    copy vertex sets up once. A tile's copy is a gather when its source side has more
    runs than its destination side (strided reads into a contiguous buffer), else a
    scatter. ``element_type`` (Poplar's name of the elements' type, ``item_bytes`` each)
    sets the rate of the default ``planner`` estimate.

    The vertices are cut from the pieces as they are found (:func:`_local_vertices`),
    the same vertices as :func:`~ipusim.machine_copies.on_tile_copy_vertices` of
    every piece; a piece of no whole number of ``element_type``'s elements, or no
    type given to the ``planner`` estimate, takes that way (which names the problem).
    """
    estimate = cfg.code.copy_estimate
    size = ELEMENT_BYTES.get(element_type) if isinstance(element_type, str) else None
    if estimate == "planner" and (size is None or item_bytes % size):
        tiles, length, gather, new_region = _tile_regions(s_ids, d_ids, d_tile, local)
        pieces = length * item_bytes
        return on_tile_copy_vertices(cfg, tiles, pieces, gather, new_region, element_type)
    # (``block``: bytes of a piece whose length is a multiple of the type's granularity)
    block = size * _granularity(element_type) if size else 1
    contexts = int(cfg.tile.worker_contexts)
    v_tile, gather, moves, memcpy, setups, fours, threes, kinds = _local_vertices(
        local, d_tile, *_id_source(s_ids), *_id_source(d_ids),
        item_bytes, contexts, copy_bytes_per_cycle(cfg), block,
    )  # fmt: skip
    code = cfg.code
    if estimate == "poplibs":
        return v_tile, 12 + memcpy
    if estimate == "planner":  # the planner rule (ipusim.machine_copies._planner_weights)
        rate = min(copy_bytes_per_cycle(cfg), size)
        # the denominators ``rate * f1`` of the pieces there are (f1 4, or 3)
        denominators = [rate * 4] * bool(kinds & 1) + [rate * 3] * bool(kinds & 2)
        scale = math.lcm(*denominators) if denominators else 1
        weighed = fours * (_F0 * (scale // (rate * 4))) + threes * (_F0 * (scale // (rate * 3)))
        return v_tile, round(code.copy_scatter_fixed_cycles) + -(-weighed // scale)
    fixed = np.where(gather, code.copy_gather_fixed_cycles, code.copy_scatter_fixed_cycles)
    per = np.where(gather, code.copy_gather_region_cycles, code.copy_scatter_region_cycles)
    return v_tile, np.rint(fixed + setups * per).astype(np.int64) + moves


def _tile_regions(
    s_ids: np.ndarray | range, d_ids: np.ndarray | range, d_tile: np.ndarray, local: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The pieces of the elements ``local`` marks (see :func:`on_tile_copy_steps`):
    ``(tile, length in elements, gather, new_region)`` each, tile after tile."""
    return _local_regions(local, d_tile, *_id_source(s_ids), *_id_source(d_ids))


_NO_IDS = runs.read_only(np.zeros(0, np.int64))


def _id_source(ids: np.ndarray | range) -> tuple[np.ndarray, bool, int, int]:
    """A side's ids for :func:`_local_regions`: ``(ids, is_range, start, step)``, a
    ``range`` as its start and step (its ids are computed, not made as an array)."""
    if isinstance(ids, range):
        return _NO_IDS, True, ids.start, ids.step
    return runs.read_only(np.asarray(ids)), False, 0, 0


@numba.njit(cache=True, nogil=True)
def _tile_bound(local, d_tile):  # pragma: no cover - compiled
    # (one more than the highest tile ``d_tile`` gives a position ``local`` marks, at
    # least 1; whether those tiles ascend with the positions)
    bound = 1
    least = 0  # (a raise inside the loop keeps it from being vectorised: 3x slower)
    last = 0
    ascending = True
    for k in range(local.size):
        if local[k]:
            t = d_tile[k]
            least = min(least, t)
            bound = max(bound, t + 1)
            ascending &= t >= last
            last = t
    if least < 0:  # (an unmapped element: the graph's validation names it)
        raise ValueError(
            "Copy: an element the copy moves within a tile has no tile (tile -1); "
            "the graph's validation refuses unmapped elements before lowering, so "
            "this is a defect of ipusim's lowering; hint: map every element of the "
            "copy's source and destination (graph.setTileMapping) and report it"
        )
    return bound, ascending


@numba.njit(cache=True, nogil=True)
def _sort_by_tile(
    local, d_tile, bound, s_ids, s_range, s_start, s_step, d_ids, d_range, d_start, d_step
):  # pragma: no cover - compiled
    # the source and destination ids of the positions ``local`` marks, in a stable
    # counting sort by their tile in ``d_tile`` (below ``bound``; a side's id of
    # position k being ``ids[k]`` or ``start + step * k`` for a range), with each
    # tile's first place in them (``starts``, one more than the tiles up to ``bound``)
    starts = np.zeros(bound + 1, np.int64)
    for k in range(local.size):
        if local[k]:
            starts[d_tile[k] + 1] += 1
    for t in range(bound):
        starts[t + 1] += starts[t]
    n = starts[bound]
    src = np.empty(n, np.int64)
    dst = np.empty(n, np.int64)
    at = starts[:bound].copy()
    for k in range(local.size):
        if local[k]:
            t = d_tile[k]
            src[at[t]] = s_start + s_step * k if s_range else s_ids[k]
            dst[at[t]] = d_start + d_step * k if d_range else d_ids[k]
            at[t] += 1
    return starts, src, dst


@numba.njit(cache=True, nogil=True)
def _by_tile(
    local, d_tile, s_ids, s_range, s_start, s_step, d_ids, d_range, d_start, d_step
):  # pragma: no cover - compiled
    # _sort_by_tile of every marked position (its tiles' bound found first)
    bound, _ = _tile_bound(local, d_tile)
    return _sort_by_tile(
        local, d_tile, bound, s_ids, s_range, s_start, s_step, d_ids, d_range, d_start, d_step
    )


@numba.njit(cache=True, nogil=True)
def _local_regions(
    local, d_tile, s_ids, s_range, s_start, s_step, d_ids, d_range, d_start, d_step
):  # pragma: no cover - compiled
    # the pieces of the positions ``local`` marks, taken by their tile in ``d_tile``
    # (ascending) and by position within a tile, a side's id of position k being
    # ``ids[k]`` or ``start + step * k`` for a range: a stable counting sort of their
    # source and destination ids, then one pass over them. A piece starts at a tile's
    # first element and where either side's id does not follow the one before; per
    # piece its tile, its length, whether its tile's copy is a gather (more runs on
    # the source side than on the destination side) and whether it starts a strided
    # region (a tile's first piece, the first piece, another length than the piece
    # before, or, when the piece before continues a region, other strides on either
    # side than those from it: a region's second piece sets its strides, whatever
    # they are). A piece's length and region are settled when the next one starts
    # (no array of piece starts, nor of each element's tile)
    starts, src, dst = _by_tile(
        local, d_tile, s_ids, s_range, s_start, s_step, d_ids, d_range, d_start, d_step
    )
    bound = starts.size - 1
    n = starts[bound]
    tiles = np.empty(n, np.int64)
    length = np.empty(n, np.int64)
    gather = np.empty(n, np.bool_)
    new_region = np.empty(n, np.bool_)
    m = 0
    open_at = 0  # first element of the open piece (m - 1)
    step_s = step_d = 0  # its strides from the piece before (from 0 for the first)
    prev_s = prev_d = 0  # its first ids
    prev_len = 0
    prev_new = True  # of the piece before it: its length, whether it started a region
    kept = first = False  # whether it keeps the strides, whether it starts its tile
    for t in range(bound):
        lo = starts[t]
        hi = starts[t + 1]
        tile_first = m
        src_runs = dst_runs = 0
        for i in range(lo, hi):
            new_tile = i == lo
            src_break = new_tile or src[i] != src[i - 1] + 1
            dst_break = new_tile or dst[i] != dst[i - 1] + 1
            src_runs += src_break
            dst_runs += dst_break
            if not (src_break or dst_break):
                continue
            if m > 0:  # the open piece ends at i
                size = i - open_at
                length[m - 1] = size
                fresh = first or m == 1 or size != prev_len or (not prev_new and not kept)
                new_region[m - 1] = fresh
                prev_new, prev_len = fresh, size
            new_s, new_d = src[i] - prev_s, dst[i] - prev_d
            kept = m > 0 and new_s == step_s and new_d == step_d
            step_s, step_d, prev_s, prev_d = new_s, new_d, src[i], dst[i]
            first = new_tile
            tiles[m] = t
            open_at = i
            m += 1
        is_gather = dst_runs < src_runs
        for p in range(tile_first, m):
            gather[p] = is_gather
    if m > 0:
        size = n - open_at
        length[m - 1] = size
        new_region[m - 1] = first or m == 1 or size != prev_len or (not prev_new and not kept)
    return tiles[:m], length[:m], gather[:m], new_region[:m]


@numba.njit(cache=True, nogil=True, inline="always")
def _cut(
    nbytes, fresh, four, t, offset, limit, chunk, nv, rate, shift,
    v_tile, moves, memcpy, setups, fours, threes,
):  # pragma: no cover - compiled  # fmt: skip
    # a piece of ``nbytes`` on tile ``t`` into the tile's chunks, as
    # ipusim.machine_copies._chunk_walk cuts it (``offset``: the tile's bytes before
    # it; ``limit``: where the open chunk ends; ``nv``: vertices so far): a vertex
    # starts at each chunk start and sets up its first region, and a piece starting
    # a region inside a vertex sets up one more; each segment's moves at ``rate``,
    # Poplibs' memcpy estimate and its bytes by the piece's transform factor (``four``)
    x = offset
    end = offset + nbytes
    while x < end:
        starts = x == limit
        if starts:
            limit += chunk
            v_tile[nv] = t
            nv += 1
            setups[nv - 1] += 1
        elif x == offset and fresh:
            setups[nv - 1] += 1
        y = min(end, limit)
        seg = y - x
        if shift >= 0:
            moves[nv - 1] += (seg + rate - 1) >> shift
        else:
            moves[nv - 1] += -(-seg // rate)
        memcpy[nv - 1] += memcpy_row_cycles(seg)
        if four:
            fours[nv - 1] += seg
        else:
            threes[nv - 1] += seg
        x = y
    return end, limit, nv


@numba.njit(cache=True, nogil=True)
def _local_vertices(
    local, d_tile, s_ids, s_range, s_start, s_step, d_ids, d_range, d_start, d_step,
    item_bytes, contexts, rate, block,
):  # pragma: no cover - compiled  # fmt: skip
    # _local_regions' pieces cut into copy vertices as each is settled (no array of
    # pieces; _cut_vertices). When the marked positions' tiles ascend (each tile's
    # elements one stretch of positions, as most copies of a library's tensors are),
    # the ids are read where they lie, each tile's stretch walked past the positions
    # not marked: no sorted copy of them is made (the counting sort's two passes and
    # its two id arrays cost the whole copy's walk again)
    bound, ascending = _tile_bound(local, d_tile)
    if ascending:
        first = np.zeros(bound, np.int64)
        end = np.zeros(bound, np.int64)
        count = np.zeros(bound, np.int64)
        for k in range(local.size):
            if local[k]:
                t = d_tile[k]
                if count[t] == 0:
                    first[t] = k
                count[t] += 1
                end[t] = k + 1
        return _cut_vertices(
            local, True, first, end, count, s_ids, s_range, s_start, s_step,
            d_ids, d_range, d_start, d_step, item_bytes, contexts, rate, block,
        )  # fmt: skip
    starts, src, dst = _sort_by_tile(
        local, d_tile, bound, s_ids, s_range, s_start, s_step, d_ids, d_range, d_start, d_step
    )
    return _cut_vertices(
        local, False, starts[:-1], starts[1:], starts[1:] - starts[:-1], src, False, 0, 0,
        dst, False, 0, 0, item_bytes, contexts, rate, block,
    )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _cut_vertices(
    local, masked, first, end, count, s_ids, s_range, s_start, s_step,
    d_ids, d_range, d_start, d_step, item_bytes, contexts, rate, block,
):  # pragma: no cover - compiled  # fmt: skip
    # the pieces of tile t's ``count[t]`` elements, at positions ``first[t]`` up to
    # ``end[t]`` (those ``local`` marks when ``masked``, else all; a side's id of
    # position k being ``ids[k]`` or ``start + step * k`` for a range), tile after
    # tile, cut into copy vertices as each is settled: per tile, chunks of
    # ceil(tile bytes / (contexts * 8)) * 8 bytes, one vertex each
    # (ipusim.machine_copies.on_tile_copy_vertices). Per vertex: its tile, whether its
    # tile's copy is a gather, its moves at ``rate`` bytes a cycle, Poplibs' memcpy
    # estimate, its region setups and its bytes of pieces whose bytes are a multiple
    # of ``block`` (transform factor 4) and of the others (3); and which of the two
    # kinds of piece there are (bit 0: some of the first, bit 1: of the second). A
    # tile's last piece is settled at the tile's end, with what _local_regions
    # settles it with at the next tile's first element
    bound = count.size
    used = 0  # tiles with local elements
    for t in range(bound):
        used += count[t] > 0
    room = used * contexts  # (at most ``contexts`` vertices per tile)
    v_tile = np.empty(room, np.int64)
    gather = np.empty(room, np.bool_)
    moves = np.zeros(room, np.int64)
    memcpy = np.zeros(room, np.int64)
    setups = np.zeros(room, np.int64)
    fours = np.zeros(room, np.int64)
    threes = np.zeros(room, np.int64)
    shift = -1  # log2 of a rate that is a power of two: a segment's moves by a shift
    if rate > 0 and (rate & (rate - 1)) == 0:
        shift = 0
        while (1 << shift) < rate:
            shift += 1
    kinds = 0
    nv = 0
    m = 0  # pieces started
    open_at = 0  # the open piece's (m - 1) first element, counted within its tile
    step_s = step_d = 0  # its strides from the piece before (from 0 for the first)
    prev_s = prev_d = 0  # its first ids
    prev_len = 0
    prev_new = True  # of the piece before it: its length, whether it started a region
    kept = starts_tile = False  # whether it keeps the strides, whether it starts its tile
    for t in range(bound):
        if count[t] == 0:
            continue
        chunk = -(-(count[t] * item_bytes) // (contexts * 8)) * 8
        offset = 0
        limit = 0
        v_first = nv
        src_runs = dst_runs = 0
        i = 0  # the element's place among its tile's
        last_s = last_d = 0  # the ids of the element before it
        for k in range(first[t], end[t]):
            if masked and not local[k]:
                continue
            s = s_start + s_step * k if s_range else s_ids[k]
            d = d_start + d_step * k if d_range else d_ids[k]
            new_tile = i == 0
            src_break = new_tile or s != last_s + 1
            dst_break = new_tile or d != last_d + 1
            last_s, last_d = s, d
            i += 1
            src_runs += src_break
            dst_runs += dst_break
            if not (src_break or dst_break):
                continue
            if not new_tile:  # the open piece ends at this element
                size = i - 1 - open_at
                fresh = starts_tile or m == 1 or size != prev_len or (not prev_new and not kept)
                prev_new, prev_len = fresh, size
                nbytes = size * item_bytes
                four = nbytes % block == 0
                kinds |= 1 if four else 2
                offset, limit, nv = _cut(
                    nbytes, fresh, four, t, offset, limit, chunk, nv, rate, shift,
                    v_tile, moves, memcpy, setups, fours, threes,
                )  # fmt: skip
            new_s, new_d = s - prev_s, d - prev_d
            kept = m > 0 and new_s == step_s and new_d == step_d
            step_s, step_d, prev_s, prev_d = new_s, new_d, s, d
            starts_tile = new_tile
            open_at = i - 1
            m += 1
        size = count[t] - open_at  # the tile's last piece
        fresh = starts_tile or m == 1 or size != prev_len or (not prev_new and not kept)
        prev_new, prev_len = fresh, size
        nbytes = size * item_bytes
        four = nbytes % block == 0
        kinds |= 1 if four else 2
        offset, limit, nv = _cut(
            nbytes, fresh, four, t, offset, limit, chunk, nv, rate, shift,
            v_tile, moves, memcpy, setups, fours, threes,
        )  # fmt: skip
        is_gather = dst_runs < src_runs
        for v in range(v_first, nv):
            gather[v] = is_gather
    return (
        v_tile[:nv], gather[:nv], moves[:nv], memcpy[:nv], setups[:nv], fours[:nv],
        threes[:nv], kinds,
    )  # fmt: skip
