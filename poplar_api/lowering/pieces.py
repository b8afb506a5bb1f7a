"""The pieces of element ids a compute set's vertices read from other tiles, found in
compiled passes: the exchange planner's input.

A piece is a run of consecutive ids living on tiles other than the reading vertex's,
``(begin, length, dst)``; a field whose vertices read slices of tensors gives few
long pieces, a strided read one piece per element. The kernels find them without
building element-sized temporaries, and :class:`Pieces` gathers the pieces of all the
fields of a compute set into one set of arrays.
"""

from __future__ import annotations

import numba
import numpy as np

from poplar_api.lowering.runs import read_only, span

#: An empty int64 array: a kernel argument not given.
_NONE = np.zeros(0, np.int64)


@numba.njit(cache=True, nogil=True)
def _field_pieces(
    ids, starts, bounds, vtiles, owner, v0, count, out_begin, out_length, out_dst
):  # pragma: no cover
    # vertex v's ids are ids[bounds[v]:bounds[v + 1]], or when starts are given the
    # run of bounds[v + 1] - bounds[v] ids from starts[v]; vertices from v0 on, their
    # pieces written from row ``count`` on, stopping before a vertex whose pieces
    # (at most one per id) might not fit: returns (rows written, next vertex)
    by_run = starts.size > 0
    room = out_length.size
    for v in range(v0, bounds.size - 1):
        if count + bounds[v + 1] - bounds[v] > room:
            return count, v
        tile = vtiles[v]
        prev_id = -2
        first = starts[v] - bounds[v] if by_run else 0
        # most vertices read only their own tile's elements: a quick look for the
        # first remote one, from which the pieces are found
        remote = bounds[v + 1]
        for p in range(bounds[v], bounds[v + 1]):
            if owner[first + p if by_run else ids[p]] != tile:
                remote = p
                break
        for p in range(remote, bounds[v + 1]):
            i = first + p if by_run else ids[p]
            if owner[i] == tile:
                prev_id = -2
                continue
            count = put_piece(i, tile, prev_id, count, out_begin, out_length, out_dst)
            prev_id = i
    return count, bounds.size - 1


@numba.njit(cache=True, nogil=True, inline="always")
def put_piece(i, tile, prev_id, count, out_begin, out_length, out_dst):  # pragma: no cover
    """Remote id ``i`` read on ``tile`` into the pieces (rows ``0 .. count - 1``
    filled): the last piece grows when ``i`` follows ``prev_id``, else a piece
    starts; the rows filled after."""
    if i == prev_id + 1:
        out_length[count - 1] += 1
        return count
    out_begin[count] = i
    out_length[count] = 1
    out_dst[count] = tile
    return count + 1


@numba.njit(cache=True, nogil=True, inline="always")
def _on_own_tile(src, dst, local, p):  # pragma: no cover - compiled
    """Whether reference ``p`` is on its receiving tile already: ``local[p]`` when the
    caller gives that mask (``local`` not empty), else its two tiles are one."""
    if local.size:
        return local[p]
    return src[p] == dst[p]


@numba.njit(cache=True, nogil=True)
def _flat_pieces(ids, src, dst, local, out_begin, out_length, out_dst):  # pragma: no cover
    # _field_pieces with a sending and a receiving tile per reference (or the mask of
    # those on their receiving tile, ``local``); written out, as a shared helper made
    # both several times slower
    count = 0
    prev_id = -2
    prev_dst = -1
    for p in range(ids.size):
        i = ids[p]
        d = dst[p]
        if _on_own_tile(src, dst, local, p):
            prev_id = -2
            continue
        if i == prev_id + 1 and d == prev_dst:
            if count <= out_length.size:
                out_length[count - 1] += 1
        else:
            if count < out_length.size:
                out_begin[count] = i
                out_length[count] = 1
                out_dst[count] = d
            count += 1
        prev_id = i
        prev_dst = d
    return count


#: No sending tiles (:func:`flat_pieces` given ``local``) and no mask of references on
#: their receiving tile (given ``src``, or the owners); writable, as the arrays they
#: stand for are (one compiled signature for both)
_NO_TILES = np.zeros(0, np.int32)
_NO_LOCAL = np.zeros(0, np.bool_)

#: Ids of an element space up to which an id fits an int32.
_INT32_IDS = int(np.iinfo(np.int32).max) + 1

#: Rows of pieces a kernel gets room for at first (more: a second pass, so that no
#: temporary grows with the elements of a large graph).
FIRST_ROOM = 1 << 22


#: Rows up to which a kernel whose pieces are bounded (at most one per reference) gets
#: room for all of them at once: one pass, however many there are (a transpose's
#: copy gives a piece per element; a second pass and fresh arrays cost more than the
#: first). Pages no piece is written to are never touched.
BOUNDED_ROOM = 1 << 26


def _collect(
    kernel, guess: int, *args, bounded: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The pieces a kernel finds, into arrays of ``guess`` rows (at most
    :data:`FIRST_ROOM`, or :data:`BOUNDED_ROOM` when ``guess`` is ``bounded``: the most
    there can be); a second pass with the room it counted when there were more (a
    kernel writes the pieces that fit and counts them all)."""
    n = -1
    room = min(max(int(guess), 16), BOUNDED_ROOM if bounded else FIRST_ROOM)
    while True:
        begin, length, dst = (np.empty(room, np.int64) for _ in range(3))
        n = kernel(*args, begin, length, dst)
        if n <= room:
            return begin[:n], length[:n], dst[:n]
        room = n


def grown(columns: tuple[np.ndarray, ...], filled: int, rows: int) -> tuple[np.ndarray, ...]:
    """``columns`` (int64 arrays of one length, ``filled`` rows used) with room for at
    least ``rows`` more: the same arrays when they have it, else new ones of twice the
    length or more, the used rows copied."""
    need = filled + int(rows)
    if need <= columns[0].size:
        return columns
    room = max(need, 2 * columns[0].size)
    out = []
    for old in columns:
        new = np.empty(room, np.int64)
        new[:filled] = old[:filled]
        out.append(new)
    return tuple(out)


class Pieces:
    """Pieces ``(begin, length, dst)`` gathered from several fields into one set of
    arrays, grown as needed (no concatenation of per-field parts afterwards, and a
    field's pieces found in one pass however many there are).

    Parameters
    ----------
    room
        Rows to start with (grown by doubling).
    """

    def __init__(self, room: int) -> None:
        room = max(int(room), 16)
        self.begin, self.length, self.dst = (np.empty(room, np.int64) for _ in range(3))
        #: rows filled so far
        self.count = 0

    def reserve(self, rows: int) -> None:
        """Room for at least ``rows`` more rows."""
        self.begin, self.length, self.dst = grown(
            (self.begin, self.length, self.dst), self.count, rows
        )

    def append(self, begin: np.ndarray, length: np.ndarray, dst: np.ndarray) -> None:
        """Add rows found elsewhere."""
        self.reserve(begin.size)
        end = self.count + begin.size
        self.begin[self.count : end] = begin
        self.length[self.count : end] = length
        self.dst[self.count : end] = dst
        self.count = end

    def field(self, ids: np.ndarray, starts: np.ndarray, bounds: np.ndarray, vtiles, owner) -> None:
        """Add the pieces of a field (see :func:`field_pieces`)."""
        vertices = bounds.size - 1
        ids = read_only(ids)
        bounds = read_only(bounds)  # a table's offsets, or a vector list's frozen bounds
        v = 0
        while v < vertices:
            self.count, v = _field_pieces(
                ids, starts, bounds, vtiles, owner, v, self.count, self.begin, self.length, self.dst
            )
            if v < vertices:  # the next vertex might not fit: make room for it and more
                self.reserve(int(bounds[v + 1] - bounds[v]) + self.begin.size - self.count)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(begin, length, dst)`` of the rows filled."""
        n = self.count
        return self.begin[:n], self.length[:n], self.dst[:n]


def field_pieces(
    ids: np.ndarray,
    bounds: np.ndarray,
    vtiles: np.ndarray,
    owner: np.ndarray,
    into: Pieces | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The remote reads of a field, as runs.

    Parameters
    ----------
    ids
        Element ids of the field, vertex after vertex (int64).
    bounds
        ``ids[bounds[v]:bounds[v + 1]]`` are vertex ``v``'s (int64, one more than
        the vertices).
    vtiles
        Tile of each vertex (int64).
    owner
        Tile of each element id (the element space's tile array).
    into
        Pieces to add them to (then the returned arrays are all of its rows).

    Returns
    -------
    tuple of numpy.ndarray
        ``(begin, length, dst)``: ids ``begin .. begin + length - 1`` live on tiles
        other than ``dst`` and are read by a vertex on tile ``dst``; every remote
        reference is in exactly one run, in reference order.
    """
    if into is None:
        into = Pieces(min(ids.size, FIRST_ROOM))
    into.field(ids, _NONE, bounds, vtiles, owner)
    return into.arrays()


def run_pieces(
    begin: np.ndarray,
    end: np.ndarray,
    vtiles: np.ndarray,
    owner: np.ndarray,
    stretches: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    into: Pieces | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`field_pieces` of a field whose vertex ``v`` reads the ids
    ``begin[v] .. end[v] - 1`` (the same pieces, without the ids array).

    With ``stretches`` (:func:`tile_stretches` of ``owner``), a run's pieces are what
    is left of it between the stretches its vertex's tile owns: the cost follows
    those stretches, not the elements read.
    """
    if into is None:
        into = Pieces(min(2 * begin.size, FIRST_ROOM))
    if stretches is not None:
        into.append(*_collect(_stretch_pieces, 2 * begin.size, begin, end, vtiles, *stretches))
    else:
        into.field(_NONE, begin, np.concatenate(([0], np.cumsum(end - begin))), vtiles, owner)
    return into.arrays()


def tile_stretches(
    owner: np.ndarray, changes: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The stretches of one owner between change points (``changes``, the
    :func:`change_points` of ``owner[:size]``), grouped by owning tile.

    Returns
    -------
    tuple of numpy.ndarray
        ``(starts, ends, offsets)``: tile ``t``'s stretches are ``starts[k] ..
        ends[k] - 1`` for ``offsets[t] <= k < offsets[t + 1]``, in id order. Unmapped
        stretches belong to no tile.
    """
    starts = np.concatenate(([0], changes)).astype(np.int64) if size else _NONE
    ends = np.append(starts[1:], size).astype(np.int64)
    owners = owner[starts].astype(np.int64)
    mapped = owners >= 0
    starts, ends, owners = starts[mapped], ends[mapped], owners[mapped]
    order = np.argsort(owners, kind="stable")
    counts = np.bincount(owners, minlength=1)
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    return starts[order], ends[order], offsets


@numba.njit(cache=True, nogil=True)
def _stretch_pieces(
    begin, end, vtiles, starts, ends, offsets, out_begin, out_length, out_dst
):  # pragma: no cover
    # the pieces of _field_pieces: the parts of each run outside the stretches its
    # vertex's tile owns (a stretch it owns ends a piece; other tiles' stretches next
    # to each other make one piece)
    count = 0
    tiles = offsets.size - 1
    for v in range(begin.size):
        i = begin[v]
        e = end[v]
        tile = vtiles[v]
        lo = 0
        hi = 0
        if 0 <= tile < tiles:
            lo = offsets[tile]
            hi = offsets[tile + 1]
        j = lo + np.searchsorted(starts[lo:hi], i, side="right") - 1
        if j < lo:
            j = lo
        while i < e:
            while j < hi and ends[j] <= i:
                j += 1
            stop = e
            if j < hi and starts[j] < e:
                stop = max(starts[j], i)
            if stop > i:
                if count < out_length.size:
                    out_begin[count] = i
                    out_length[count] = stop - i
                    out_dst[count] = tile
                count += 1
            if stop < e:  # a stretch of the vertex's own tile
                i = min(ends[j], e)
                j += 1
            else:
                i = e
    return count


@numba.njit(cache=True, nogil=True)
def _tile_pieces(
    ids, src, dst, local, num_tiles, marked, base, by_tile, out_begin, out_length, out_dst
):  # pragma: no cover - compiled
    # the remote references grouped by receiving tile (a counting sort into
    # ``by_tile``, room for every reference), then per tile the maximal runs of the
    # ids it needs, with no sort: its ids are marked (id i at marked[i - base]: the
    # map covers the ids' span from ``base``), and from each marked id with no marked
    # id before it the run is walked (and unmarked; ``marked`` is all False again at
    # the end): the rows found, of which those that fit are written
    ends = np.zeros(num_tiles + 1, np.int64)
    for p in range(ids.size):
        if not _on_own_tile(src, dst, local, p):
            ends[dst[p] + 1] += 1
    for t in range(num_tiles):
        ends[t + 1] += ends[t]
    for p in range(ids.size):
        d = dst[p]
        if not _on_own_tile(src, dst, local, p):
            by_tile[ends[d]] = ids[p]
            ends[d] += 1
    count = 0
    lo = 0
    last = marked.size - 1
    for t in range(num_tiles):  # (ends[t] is now the end of tile t's references)
        for k in range(lo, ends[t]):
            marked[by_tile[k] - base] = True
        for k in range(lo, ends[t]):
            i = by_tile[k] - base
            if not marked[i] or (i > 0 and marked[i - 1]):
                continue  # in a run found already, or not its first id
            j = i
            while True:
                marked[j] = False
                if j == last or not marked[j + 1]:
                    break
                j += 1
            i += base
            j += base
            if count < out_begin.size:  # (past the room: counted only)
                out_begin[count] = i
                out_length[count] = j + 1 - i
                out_dst[count] = t
            count += 1
        lo = ends[t]
    return count


#: Pieces per reference above which :func:`flat_pieces` groups the references by
#: receiving tile and finds each tile's runs as a set (mostly single-element pieces:
#: a transposing copy, or an expanded input whose ids repeat on a tile), judged on
#: the first :data:`SAMPLE` references.
SHORT_PIECES = 1 / 4
SAMPLE = 1 << 16


def flat_pieces(
    ids: np.ndarray,
    dst: np.ndarray,
    owner: np.ndarray,
    src: np.ndarray | None = None,
    num_tiles: int | None = None,
    marks: dict[int, np.ndarray] | None = None,
    local: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`field_pieces` for references with one destination tile each (``dst``).

    ``src`` is the owning tile of each reference when the caller has it already; or
    ``local``, whether each reference is on its receiving tile already (a ``Copy``
    compares both sides' tiles anyway: then no tile array of its sending side is kept,
    4.7 million int32 for ``bench_conv``'s weight update copy). With either, no owner
    is looked up again.

    With ``num_tiles`` (above every tile), references whose runs in their own order
    are short (more than :data:`SHORT_PIECES` pieces per reference: neighbouring
    references go to different tiles, or repeat ids) are grouped by receiving tile
    and each tile's maximal runs found, in compiled passes: the runs then cover the
    same ids of each tile (what the planner merges them into), in fewer pieces, with
    no repeats and no longer in reference order. The ids are marked in a bool map of
    their span, all False again after the pass: kept in ``marks`` (by space size) when
    given, for the next call of a span as long or shorter (a fresh map costs its
    zeroing)."""
    ids = read_only(ids)
    if local is not None:
        src = _NO_TILES
    elif src is None:
        src = owner[ids]
    if local is None:
        local = _NO_LOCAL
    if num_tiles is None:
        return _collect(_flat_pieces, ids.size, ids, src, dst, local, bounded=True)
    k = min(ids.size, SAMPLE)
    found = _collect(_flat_pieces, k, ids[:k], src[:k], dst[:k], local[:k], bounded=True)
    if found[0].size > SHORT_PIECES * k:
        # the map covers the ids' span only (a space's tile array may have room for
        # ten times the ids a copy reads: the PopART CNN's 20.7 million, zeroed once,
        # for ids within 2.2 million); a kept map of its size or more is reused
        base, end = span(ids)
        marked = None if marks is None else marks.get(owner.size)
        if marked is None or marked.size < end - base:
            marked = np.zeros(end - base, bool)
            if marks is not None:
                marks[owner.size] = marked
        # the references' ids grouped by tile: int32 where every id fits (the counting
        # sort writes them to places far apart; half the bytes, half the memory
        # traffic: 80 -> 45 ms for the 4.7 million references of bench_conv's weight
        # update copy)
        by_tile = np.empty(ids.size, np.int32 if owner.size <= _INT32_IDS else np.int64)
        return _collect(_tile_pieces, ids.size, ids, src, dst, local, num_tiles,
                        marked[: end - base], base, by_tile, bounded=True)  # fmt: skip
    if k == ids.size:
        return found
    return _collect(_flat_pieces, ids.size, ids, src, dst, local, bounded=True)
