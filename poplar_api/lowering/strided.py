"""Strided pieces: remote reads that step through element ids at a fixed stride,
planned as ``(first, count, stride)`` progressions instead of one piece per element.

A convolution's weight update reads its activations at a stride (the vector lists of
``ConvPartialHorizontalMac`` take every ninth element of conv1's input): each such
reference is its own one-element piece (:mod:`~poplar_api.lowering.pieces`), and a
small CNN step's compile spent a fifth of its time sorting and merging those pieces
one by one. Here a field's references are scanned once (:func:`field_pieces`, a
compiled pass): runs of at least :data:`MIN_STRIDED` remote references of one vertex
whose ids step by a constant ``stride >= 2`` and that one tile owns become one strided
piece ``(first, count, stride, dst, sender)``; every other remote reference stays an
ordinary piece.

The exchange planner counts a receiving tile's strided pieces without expanding them
when that is exact (:func:`isolated_tiles`): all its strided pieces have one stride,
no two of their residue classes are neighbours (so no two of their elements have
consecutive ids), no other piece it receives comes within one id of their span, and
what its exchange-bus partner receives in that span are only strided pieces of the
same stride that are counted so too. Then every element is a message of its own, the
union of a residue class is a merge of index intervals (:func:`merge_classes`), and
the bytes the bus pair both receive are those of their ordinary pieces plus those of
their progressions, class by class (:func:`pair_common`). Strided pieces of any other
tile are expanded into one-element pieces and planned as before, so the plan is
identical either way. (Bus partners of conv1's weight update in the CNN step read
the same input at stride 9: counted as progressions, the 1.58 million elements they
receive are neither expanded nor sorted.)

A vertex may also read a transposed block: rows of consecutive ids a fixed stride
apart, read column by column (``base + r * stride + c``, the rows in the inner order),
as the dense layers' and pooling gradients' vertices of the CNN step read their
operands (36 rows of 5 at stride 10, say). Its columns are progressions cut short
where the rows' owners change, so each reference was a one-element piece (the CNN
step's dense layers gave 474 k of them). Such a vertex's remote references are found
row by row instead (:func:`_block_rows`, :func:`_block_pieces`), a row's remote ids a
run: the same elements bound for the same tile, so the same plan, in a fifth of the
pieces there. A block whose columns hold a strided piece keeps the column order.
"""

from __future__ import annotations

import numba
import numpy as np

from poplar_api.lowering.bus import bus_pair
from poplar_api.lowering.pieces import grown, put_piece
from poplar_api.lowering.received import raise_distance
from poplar_api.lowering.runs import read_only

__all__ = [
    "MIN_STRIDED",
    "StridedPieces",
    "expand",
    "expand_into",
    "field_pieces",
    "isolated_tiles",
    "mark_senders",
    "merge_classes",
    "pair_common",
]

#: References of one vertex, at least, in a strided piece (shorter progressions stay
#: one-element pieces). Classifying a tile's strided pieces and expanding those that
#: cannot be counted as progressions costs about what planning their elements one by
#: one does: in the CNN step of ``examples/cnn``, vertices of pooling, non-linearity
#: gradients and dense layers read 8 elements at a stride (a batch of 8) on tiles that
#: could not be counted as progressions, and finding them as strided pieces made those
#: compute sets' planning slower; conv1's weight update reads 46 to 52.
MIN_STRIDED = 16


@numba.njit(cache=True, nogil=True)
def _field_pieces(
    ids, bounds, vtiles, owner, v0, count, s_count, min_run,
    out_begin, out_length, out_dst, s_first, s_n, s_stride, s_dst, s_sender,
):  # pragma: no cover - compiled  # fmt: skip
    # like pieces._field_pieces (vertex v's ids are ids[bounds[v]:bounds[v + 1]]), and
    # runs of >= min_run remote refs of one owner stepping by a constant stride >= 2
    # go to the strided outputs; stops before a vertex whose pieces might not fit
    room = out_length.size
    s_room = s_first.size
    for v in range(v0, bounds.size - 1):
        refs = bounds[v + 1] - bounds[v]
        if count + refs > room or s_count + refs // min_run + 1 > s_room:
            return count, s_count, v
        tile = vtiles[v]
        prev_id = -2
        p = bounds[v]
        end = bounds[v + 1]
        rows, r0 = _block_rows(ids, p, end, tile, owner, min_run)
        if rows:  # a transposed block: its pieces row by row, each row a run of ids
            count = _block_pieces(ids, p, end, rows, r0, tile, owner, count,
                                  out_begin, out_length, out_dst)  # fmt: skip
            continue
        while p < end:
            i = np.int64(ids[p])
            o = owner[i]
            if o == tile:
                prev_id = -2
                p += 1
                continue
            q = p + 1
            step = 0
            if o >= 0 and q < end:
                step = np.int64(ids[q]) - i
                if step >= 2:
                    while q < end and np.int64(ids[q]) - np.int64(ids[q - 1]) == step:
                        if owner[ids[q]] != o:
                            break
                        q += 1
            if step >= 2 and q - p >= min_run:
                s_first[s_count] = i
                s_n[s_count] = q - p
                s_stride[s_count] = step
                s_dst[s_count] = tile
                s_sender[s_count] = o
                s_count += 1
                prev_id = -2
                p = q
                continue
            # too short: refs p .. q - 1 are ordinary pieces (a progression starting
            # among them with this step would end at q too)
            if step < 2:
                q = p + 1
            for r in range(p, q):
                i = np.int64(ids[r])
                count = put_piece(i, tile, prev_id, count, out_begin, out_length, out_dst)
                prev_id = i
            p = q
    return count, s_count, bounds.size - 1


@numba.njit(cache=True, nogil=True)
def _block_rows(ids, lo, hi, tile, owner, min_run):  # pragma: no cover - compiled
    # whether refs ids[lo:hi] read a transposed block: rows of ids stepping by one,
    # read column by column (a row stepping by s >= 2 ids to the next, a column wrapping
    # to the next id of the first row), the first ref in row r0; and no ref of it in a
    # strided piece (a column's refs of one remote owner, min_run or more, in a row).
    # Returns (rows, r0), rows 0 when not
    n = hi - lo
    if n < 3:
        return 0, 0
    s = np.int64(ids[lo + 1]) - np.int64(ids[lo])
    if s < 2:
        return 0, 0
    wrap = -1
    for p in range(lo + 1, hi - 1):
        if np.int64(ids[p + 1]) - np.int64(ids[p]) != s:
            wrap = p - lo
            break
    if wrap < 0:
        return 0, 0
    back = 1 - (np.int64(ids[lo + wrap + 1]) - np.int64(ids[lo + wrap]))
    if back <= 0 or back % s:
        return 0, 0
    rows = back // s + 1
    if wrap > rows - 1:
        return 0, 0
    r0 = rows - 1 - wrap
    r = r0
    expected = np.int64(ids[lo])
    run = 0
    last = -1
    for p in range(lo, hi):
        i = np.int64(ids[p])
        if i != expected:
            return 0, 0
        o = owner[i]
        if o < 0 or o == tile:
            run = 0
        elif r > 0 and run > 0 and o == last:
            run += 1
            if run >= min_run:
                return 0, 0
        else:
            run = 1
        last = o
        if r + 1 < rows:
            r += 1
            expected = i + s
        else:
            r = 0
            expected = i + 1 - (rows - 1) * s
    return rows, r0


@numba.njit(cache=True, nogil=True)
def _block_pieces(
    ids, lo, hi, rows, r0, tile, owner, count, out_begin, out_length, out_dst
):  # pragma: no cover - compiled
    # the remote refs of a transposed block (_block_rows) as pieces, row after row:
    # row r's refs are consecutive ids from its first ref's, one per column
    n = hi - lo
    prev_id = -2
    for r in range(rows):
        first = r - r0 if r >= r0 else rows - r0 + r  # the row's first ref
        if first >= n:
            continue
        start = np.int64(ids[lo + first])
        for k in range((n - first + rows - 1) // rows):
            i = start + k
            if owner[i] == tile:
                prev_id = -2
                continue
            count = put_piece(i, tile, prev_id, count, out_begin, out_length, out_dst)
            prev_id = i
    return count


class StridedPieces:
    """Strided pieces ``(first, count, stride, dst, sender)`` gathered from several
    fields, grown as needed: the elements ``first + k * stride`` for ``0 <= k <
    count`` live on tile ``sender`` (not ``dst``) and are read by a vertex on ``dst``.
    """

    _COLUMNS = ("first", "count", "stride", "dst", "sender")

    def __init__(self, room: int = 16) -> None:
        room = max(int(room), 16)
        for name in self._COLUMNS:
            setattr(self, name, np.empty(room, np.int64))
        #: rows filled so far
        self.rows = 0

    def reserve(self, rows: int) -> None:
        """Room for at least ``rows`` more rows."""
        columns = grown(tuple(getattr(self, c) for c in self._COLUMNS), self.rows, rows)
        for name, column in zip(self._COLUMNS, columns, strict=True):
            setattr(self, name, column)

    def arrays(self) -> tuple[np.ndarray, ...]:
        """``(first, count, stride, dst, sender)`` of the rows filled."""
        n = self.rows
        return tuple(getattr(self, name)[:n] for name in self._COLUMNS)


def field_pieces(
    ids: np.ndarray,
    bounds: np.ndarray,
    vtiles: np.ndarray,
    owner: np.ndarray,
    into,
    strided: StridedPieces,
    min_run: int = MIN_STRIDED,
) -> None:
    """The remote reads of a field (:func:`~poplar_api.lowering.pieces.field_pieces`)
    as ordinary pieces added to ``into`` (a :class:`~poplar_api.lowering.pieces.Pieces`)
    and strided pieces added to ``strided``: together they name every remote
    reference exactly once.

    Raises
    ------
    ValueError
        ``min_run`` below 2 (a strided piece steps at least once).
    """
    if min_run < 2:
        raise ValueError(
            f"strided pieces: min_run {min_run} is below 2; hint: a strided piece needs "
            "two references at least"
        )
    vertices = bounds.size - 1
    ids = read_only(ids)
    bounds = read_only(bounds)  # a table's offsets, or a vector list's frozen bounds
    v = 0
    while v < vertices:
        into.count, strided.rows, v = _field_pieces(
            ids, bounds, vtiles, owner, v, into.count, strided.rows, min_run,
            into.begin, into.length, into.dst, *(getattr(strided, c) for c in strided._COLUMNS),
        )  # fmt: skip
        if v < vertices:  # the next vertex might not fit: room for it (grown by doubling)
            refs = int(bounds[v + 1] - bounds[v])
            if into.count + refs > into.begin.size:
                into.reserve(refs)
            if strided.rows + refs // min_run + 1 > strided.first.size:
                strided.reserve(refs // min_run + 1)


@numba.njit(cache=True, nogil=True)
def _expand_into(
    first, count, stride, dst, skip, out_begin, out_length, out_dst, at
):  # pragma: no cover - compiled
    for k in range(first.size):
        if skip[k]:
            continue
        for j in range(count[k]):
            out_begin[at] = first[k] + j * stride[k]
            out_length[at] = 1
            out_dst[at] = dst[k]
            at += 1
    return at


def expand_into(into, found: tuple[np.ndarray, ...], planned: np.ndarray) -> None:
    """Add the strided pieces ``found`` not ``planned`` (bool per piece) to ``into`` (a
    :class:`~poplar_api.lowering.pieces.Pieces`) as one-element pieces, written into
    its room (no temporary per element)."""
    first, count, stride, dst, _ = found
    into.reserve(int(count[~planned].sum()))
    into.count = _expand_into(
        first, count, stride, dst, planned, into.begin, into.length, into.dst, into.count
    )


def expand(first: np.ndarray, count: np.ndarray, stride: np.ndarray) -> np.ndarray:
    """The ids of progressions ``first + k * stride`` (``0 <= k < count``), one
    after another (int64).

    Raises
    ------
    ValueError
        A count below 1 or a stride below 1.
    """
    count = np.asarray(count, np.int64)
    if count.size and int(count.min()) < 1:
        raise ValueError(
            f"strided pieces: count {int(count.min())} is below 1; hint: a strided piece "
            "names one element at least"
        )
    if np.size(stride) and int(np.min(stride)) < 1:
        raise ValueError(
            f"strided pieces: stride {int(np.min(stride))} is below 1; hint: a "
            "progression steps up through the ids"
        )
    total = int(count.sum())
    starts = np.cumsum(count) - count
    k = np.arange(total, dtype=np.int64) - np.repeat(starts, count)
    return np.repeat(np.asarray(first, np.int64), count) + k * np.repeat(
        np.asarray(stride, np.int64), count
    )


def isolated_tiles(
    begin: np.ndarray,
    length: np.ndarray,
    dst: np.ndarray,
    strided: tuple[np.ndarray, ...],
    num_tiles: int,
    tiles_per_ipu: int,
) -> np.ndarray:
    """bool per strided piece: whether its receiving tile's strided pieces can be
    counted without expanding them (see the module docstring for the conditions).

    ``begin, length, dst`` are the ordinary pieces planned with them (the same call).
    """
    first, count, stride, sdst, _ = strided
    if first.size == 0:
        return np.zeros(0, bool)
    bad = np.zeros(num_tiles, bool)
    hit = np.zeros(num_tiles, bool)  # strided pieces of the bus partner in the span
    step = _spans(begin, length, dst, first, count, stride, sdst, tiles_per_ipu, bad, hit)
    # residue classes of one tile that are neighbours (r and r + 1 mod stride)
    residue = first % stride
    order = np.lexsort((residue, sdst))
    t, r, s = sdst[order], residue[order], stride[order]
    keep = np.ones(t.size, bool)
    keep[1:] = (t[1:] != t[:-1]) | (r[1:] != r[:-1])
    t, r, s = t[keep], r[keep], s[keep]
    same = t[1:] == t[:-1]
    bad[t[1:][same & (r[1:] - r[:-1] == 1)]] = True
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    ends = np.append(starts[1:] - 1, t.size - 1)
    wrap = (starts != ends) & (r[starts] == 0) & (r[ends] == s[ends] - 1)
    bad[t[starts[wrap]]] = True
    # a partner's strided pieces in a tile's span are exact only when both tiles'
    # pieces are counted as progressions of one stride (a partner expanded makes them
    # ordinary pieces there); a pair settles in two rounds
    if hit.any():
        mate = _mates(num_tiles, tiles_per_ipu)
        for _ in range(2):
            bad |= hit & (bad[mate] | (step != step[mate]))
    return ~bad[sdst]


def _mates(num_tiles: int, tiles_per_ipu: int) -> np.ndarray:
    """int64 per tile: its exchange-bus partner (local tile ``2k`` with ``2k + 1``),
    itself where it has none (the last tile of an IPU of an odd tile count)."""
    tile = np.arange(num_tiles, dtype=np.int64)
    local = tile % tiles_per_ipu
    mate = np.where(local % 2 == 0, tile + 1, tile - 1)
    return np.where((local % 2 == 0) & (local + 1 >= tiles_per_ipu), tile, mate)


@numba.njit(cache=True, nogil=True)
def _spans(
    begin, length, dst, first, count, stride, sdst, tiles_per_ipu, bad, hit
):  # pragma: no cover - compiled
    # each tile's strided span [lo, hi] (hi -1: none); marks in bad the tiles whose
    # strided pieces have several strides, that receive an ordinary piece within one
    # id of their span, or whose bus partner receives an ordinary piece in it; in hit
    # those whose partner's strided pieces reach into it. Returns each tile's stride
    n = bad.size
    lo = np.full(n, np.iinfo(np.int64).max, np.int64)
    hi = np.full(n, -1, np.int64)
    step = np.zeros(n, np.int64)
    for k in range(first.size):
        t = sdst[k]
        lo[t] = min(lo[t], first[k])
        hi[t] = max(hi[t], first[k] + (count[k] - 1) * stride[k])
        if step[t] == 0:
            step[t] = stride[k]
        elif step[t] != stride[k]:
            bad[t] = True
    for k in range(begin.size):
        t = dst[k]
        a = begin[k]
        b = a + length[k] - 1
        if hi[t] >= 0 and a <= hi[t] + 1 and b >= lo[t] - 1:
            bad[t] = True
        p = _mate(t, tiles_per_ipu)
        if p >= 0 and hi[p] >= 0 and a <= hi[p] and b >= lo[p]:
            bad[p] = True
    for k in range(first.size):
        p = _mate(sdst[k], tiles_per_ipu)
        b = first[k] + (count[k] - 1) * stride[k]
        if p >= 0 and hi[p] >= 0 and first[k] <= hi[p] and b >= lo[p]:
            hit[p] = True
    return step


@numba.njit(cache=True, nogil=True, inline="always")
def _mate(t, tiles_per_ipu):  # pragma: no cover - compiled
    # the exchange-bus partner of tile t (local tile 2k with 2k + 1), or -1
    local = t % tiles_per_ipu
    if local % 2 == 0:
        return t + 1 if local + 1 < tiles_per_ipu else -1
    return t - 1


@numba.njit(cache=True, nogil=True)
def _merge_classes(t, s, r, idx, n, out_first, out_count, out_stride, out_tile):  # pragma: no cover
    # pieces sorted by (tile, stride, residue, index): index intervals [idx, idx + n)
    # of one (tile, stride, residue) class joined where they overlap or touch
    m = 0
    k = 0
    while k < t.size:
        a = idx[k]
        b = idx[k] + n[k]
        j = k + 1
        while j < t.size and t[j] == t[k] and s[j] == s[k] and r[j] == r[k] and idx[j] <= b:
            b = max(b, idx[j] + n[j])
            j += 1
        out_first[m] = r[k] + a * s[k]
        out_count[m] = b - a
        out_stride[m] = s[k]
        out_tile[m] = t[k]
        m += 1
        k = j
    return m


def merge_classes(
    first: np.ndarray, count: np.ndarray, stride: np.ndarray, dst: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The union of each tile's strided pieces, as disjoint progressions ``(first,
    count, stride, tile)`` when the tile's classes are disjoint (as on the tiles of
    :func:`isolated_tiles`): pieces of one class (the same tile, stride and
    ``first % stride``) joined where they share or touch an index, in order of
    (tile, stride, residue, first)."""
    residue = first % stride
    idx = first // stride
    order = np.lexsort((idx, residue, stride, dst))
    out = [np.empty(first.size, np.int64) for _ in range(4)]
    m = _merge_classes(dst[order], stride[order], residue[order], idx[order], count[order], *out)
    o_first, o_count, o_stride, o_tile = (x[:m] for x in out)
    return o_first, o_count, o_stride, o_tile


@numba.njit(cache=True, nogil=True)
def pair_common(first, count, stride, tile, tiles_per_ipu, common):  # pragma: no cover
    """Per tile, the elements of its progressions that its bus partner (local tile
    ``2k`` with ``2k + 1``) receives in its progressions too (``common``, added to).

    The progressions are those of :func:`merge_classes` (in order of tile, stride,
    residue and first; disjoint within a tile) of tiles with one stride each: a pair of
    one stride has its elements in common class by class, where the index intervals
    ``[first // stride, + count)`` of one residue overlap; a pair of two strides has
    none in common (:func:`isolated_tiles` counts no such pair whose spans meet)."""
    i = 0
    while i < tile.size:
        j, k = bus_pair(tile, i, tiles_per_ipu)
        if k > j and stride[i] == stride[j]:
            s = stride[i]
            a = i
            b = j
            both = 0
            while a < j and b < k:
                ra = first[a] % s
                rb = first[b] % s
                if ra != rb:  # classes apart: the lower residue goes on
                    if ra < rb:
                        a += 1
                    else:
                        b += 1
                    continue
                a0 = first[a] // s
                b0 = first[b] // s
                a1 = a0 + count[a]
                b1 = b0 + count[b]
                overlap = min(a1, b1) - max(a0, b0)
                if overlap > 0:
                    both += overlap
                if a1 < b1:
                    a += 1
                else:
                    b += 1
            common[tile[i]] += both
            common[tile[j]] += both
        i = k


@numba.njit(cache=True, nogil=True)
def mark_senders(
    dst, sender, per_ipu, column, row, pairs, senders, distance, stamp
):  # pragma: no cover - compiled
    """Mark each (receiving, sending) tile pair of ``dst``/``sender`` in ``pairs``
    (``pairs[dst * tiles + sender] == stamp`` once seen), count its distinct senders
    per receiving tile and raise both tiles' longest grid distance: what
    :func:`~poplar_api.lowering.received.merge_received` does for the owner of each
    message it counts."""
    n_tiles = distance.size
    for k in range(dst.size):
        d_tile = dst[k]
        s_tile = sender[k]
        at = d_tile * n_tiles + s_tile
        if pairs[at] == stamp:
            continue
        pairs[at] = stamp
        senders[d_tile] += 1
        raise_distance(d_tile, s_tile, d_tile % per_ipu, per_ipu, column, row, distance)
