"""Runs of element ids, found in one compiled pass: the exchange planner's input.

A vertex usually reads a slice of a tensor, so the element ids of its fields come in
runs of consecutive ids living on one tile. The planner works on such runs (id
intervals) instead of one entry per element; these kernels find them without building
element-sized temporaries (on a large graph each such array costs as much as the
pass that uses it).
"""

from __future__ import annotations

import numba
import numpy as np

#: The greatest int32 and int64 (``np.iinfo`` makes an object per call: a few
#: microseconds each on paths taken per compute set and per exchange).
INT32_MAX = int(np.iinfo(np.int32).max)
INT64_MAX = int(np.iinfo(np.int64).max)

#: Elements from which a block is counted by its stretches of one owner (a few numpy
#: calls) rather than element by element (one compiled pass).
STRETCHES_FROM = 4096


@numba.njit(cache=True, nogil=True)
def _change_points(owner, size, out):  # pragma: no cover
    count = 0
    for i in range(1, size):
        if owner[i] != owner[i - 1]:
            if out.size:
                out[count] = i
            count += 1
    return count


def change_points(owner: np.ndarray, size: int) -> np.ndarray:
    """Ids ``i`` in ``[1, size)`` where ``owner[i] != owner[i - 1]`` (int64, sorted)."""
    n = _change_points(owner, size, np.zeros(0, np.int64))
    out = np.empty(n, np.int64)
    _change_points(owner, size, out)
    return out


#: Elements gathered or scattered by index from which every replica's row is moved
#: apart: numpy's ``full[:, index]`` moves a column of every replica per element, which
#: past the caches costs about three times as much (a copy of 100,352 elements on 16
#: replicas: 18 against 6 ms; the same either way from 2,048 to 12,544).
ROWS_APART = 1 << 12


def rows_apart(*where: np.ndarray | slice) -> bool:
    """Whether elements ``where`` (slices, or index arrays of one length) of every
    replica move row by row (see :data:`ROWS_APART`)."""
    index = [w for w in where if not isinstance(w, slice)]
    return bool(index) and index[0].size >= ROWS_APART


@numba.njit(cache=True, nogil=True)
def _rows(full, ix, other, put):  # pragma: no cover
    """With ``put``, ``full[r, ix] = other[r]``, else ``other[r] = full[r, ix]``, for
    every row ``r`` (:func:`take_rows`, :func:`put_rows`; numba types both directions,
    so both arrays come writeable): one compiled pass for both directions, whose
    arguments have the same types, so that a process loads one
    machine-code version where it loaded two (2-5 ms each). The ids index unsigned,
    which spares each access numba's negative-index wraparound (a third to two fifths
    less time)."""
    if put:
        for r in range(full.shape[0]):
            row, src = full[r], other[r]
            for i in range(ix.shape[0]):
                row[np.uint64(ix[i])] = src[i]
    else:
        for r in range(full.shape[0]):
            row, dst = full[r], other[r]
            for i in range(ix.shape[0]):
                dst[i] = row[np.uint64(ix[i])]


def take_rows(full: np.ndarray, ix: np.ndarray, out: np.ndarray) -> None:
    """``out[r] = full[r, ix]`` for every row ``r`` (every replica's elements ``ix``,
    which are ids: not negative; a third faster than ``np.take`` on axis 1, which moves
    an element at a time through a generic loop); a read-only ``full`` copied first."""
    _rows(full if full.flags.writeable else full.copy(), ix, out, False)


def put_rows(full: np.ndarray, ix: np.ndarray, values: np.ndarray) -> None:
    """``full[r, ix] = values[r]`` for every row ``r`` (every replica's elements ``ix``,
    ids, not negative, in order, so a repeated id keeps its last value, as numpy's
    assignment does); a third to a fifth of the time of numpy's ``full[:, ix] =
    values``, which moves one column of every row per id through a generic loop;
    read-only ``values`` (``np.frombuffer``'s, a memory map) copied first."""
    _rows(full, ix, values if values.flags.writeable else values.copy(), True)


def row_ids(where: np.ndarray | slice, size: int) -> np.ndarray:
    """Element ids ``where`` (ids, or a slice of consecutive ids) as :func:`take_rows`
    and :func:`put_rows` take them in a replicated copy: read-only, int32 where an image
    of ``size`` elements allows (the runner's gathers' type: one compiled signature)."""
    dtype = np.int32 if size <= INT32_MAX else np.int64
    if isinstance(where, slice):
        return read_only(np.arange(where.start, where.stop, where.step or 1, dtype=dtype))
    return read_only(np.asarray(where, dtype).reshape(-1))


def move_rows(full: np.ndarray, s_ix: np.ndarray, d_ix: np.ndarray) -> None:
    """``full[:, d_ix] = full[:, s_ix]`` (ids of :func:`row_ids`) as numpy makes it:
    every row's elements ``s_ix`` read before any is written (the two may overlap), a
    repeated destination keeping its last value; by the compiled gather and store (a
    copy of 2,048 elements of 16 rows: 16 against 34 us alone)."""
    values = np.empty((full.shape[0], s_ix.size), full.dtype)
    take_rows(full, s_ix, values)
    put_rows(full, d_ix, values)


@numba.njit(cache=True, nogil=True)
def copy_ranges(target, source, begin, end):  # pragma: no cover
    """``target[begin[k]:end[k]] = source[begin[k]:end[k]]`` for every ``k``."""
    for k in range(begin.size):
        for i in range(begin[k], end[k]):
            target[i] = source[i]


def runs_hit(marked: np.ndarray, begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Whether any of ids ``begin[k] .. end[k] - 1`` is in ``marked`` (sorted ids), per
    run ``k``: a look-up per run, however long the runs."""
    return np.searchsorted(marked, begin) < np.searchsorted(marked, end)


@numba.njit(cache=True, nogil=True)
def _runs_hit_bitmap(marked, lo, begin, end):  # pragma: no cover - compiled
    hi = lo + marked.size
    for k in range(begin.size):
        a = max(begin[k], lo)
        b = min(end[k], hi)
        for i in range(a, b):
            if marked[i - lo]:
                return True
    return False


def runs_hit_bitmap(marked: np.ndarray, lo: int, begin: np.ndarray, end: np.ndarray) -> bool:
    """Whether any id of the runs ``begin[k] .. end[k] - 1`` is set in ``marked`` (a
    bitmap of ids ``lo, lo + 1, ...``): one compiled pass over the runs' ids inside the
    bitmap, stopping at the first set one (no list of the set ids is made)."""
    if begin.size == 0:
        return False
    return bool(_runs_hit_bitmap(marked, int(lo), begin, end))


@numba.njit(cache=True, nogil=True)
def _span(ids):  # pragma: no cover - compiled
    # min and max without branches: the loop vectorises (several times faster)
    lo = hi = ids[0]
    for k in range(1, ids.size):
        x = ids[k]
        lo = min(lo, x)
        hi = max(hi, x)
    return lo, hi + 1


def read_only(ids: np.ndarray, dtype: type | None = None) -> np.ndarray:
    """``ids`` as the compiled passes here take them: C-contiguous and read-only (a
    read-only view where they are writeable, a copy where they are strided or, with
    ``dtype``, of another type).

    Numba compiles, and every process then loads from its cache, one machine-code
    version of a pass per argument type, and writeable, read-only and strided arrays
    are three types: the ids of fields and tensors come all three ways, so a pass
    called with each as it comes had up to three versions per id type to compile on
    a fresh checkout and to load in every process."""
    ids = np.ascontiguousarray(ids, dtype)
    if ids.flags.writeable:
        ids = ids.view()
        ids.flags.writeable = False
    return ids


def span(ids: np.ndarray) -> tuple[int, int]:
    """``(min, max + 1)`` of a non-empty id array, in one pass."""
    lo, hi = _span(read_only(ids))
    return int(lo), int(hi)


@numba.njit(cache=True, nogil=True)
def _mark_new(ids, lo, marked):  # pragma: no cover - compiled
    again = 0
    for k in range(ids.size):
        i = ids[k] - lo
        if marked[i]:
            again += 1
        marked[i] = True
    return again


def mark_new(ids: np.ndarray, lo: int, marked: np.ndarray) -> int:
    """Set the bits of ``ids`` in ``marked`` (a bitmap of ids ``lo, lo + 1, ...`` that
    holds them all); return how many were set already."""
    return int(_mark_new(read_only(ids), lo, marked))


@numba.njit(cache=True, nogil=True)
def _mark_new_runs(begin, end, lo, marked):  # pragma: no cover - compiled
    again = 0
    for k in range(begin.size):
        for i in range(begin[k] - lo, end[k] - lo):
            if marked[i]:
                again += 1
            marked[i] = True
    return again


def mark_new_runs(begin: np.ndarray, end: np.ndarray, lo: int, marked: np.ndarray) -> int:
    """:func:`mark_new` of the ids ``begin[k] .. end[k] - 1`` of every run ``k``, in
    order (the same count, without the ids made)."""
    begin = read_only(np.asarray(begin, np.int64))
    end = read_only(np.asarray(end, np.int64))
    return int(_mark_new_runs(begin, end, np.int64(lo), marked))


def runs_span(begin: np.ndarray, end: np.ndarray) -> tuple[int, int] | None:
    """``(least id, greatest id + 1)`` of the ids of runs ``[begin[k], end[k])``, or
    None when every run is empty."""
    full = end > begin
    held = np.count_nonzero(full)  # (one C call: ndarray.any and .all wrap more)
    if not held:
        return None
    if held < full.size:
        begin, end = begin[full], end[full]
    return int(begin.min()), int(end.max())


@numba.njit(cache=True, nogil=True)
def _marked_refs(ids, lo, marked, out):  # pragma: no cover - compiled
    count = 0
    n = marked.size
    for p in range(ids.size):
        k = ids[p] - lo
        if k >= 0 and k < n and marked[k]:
            out[count] = p
            count += 1
    return count


def marked_refs(ids: np.ndarray, lo: int, marked: np.ndarray) -> np.ndarray:
    """Positions in ``ids`` of the ids set in ``marked`` (a bitmap of ids ``lo,
    lo + 1, ...``), in one pass without element-sized temporaries."""
    out = np.empty(ids.size, np.int64)
    return out[: _marked_refs(read_only(ids), lo, marked, out)].copy()


@numba.njit(cache=True, nogil=True)
def _transfer_counts(ids, owner, elements, messages):  # pragma: no cover
    prev_id = -2
    prev_tile = -1
    for p in range(ids.size):
        i = ids[p]
        t = owner[i]
        if t < 0:  # unmapped: validation reports it
            prev_id = -2
            continue
        elements[t] += 1
        if i != prev_id + 1 or t != prev_tile:
            messages[t] += 1
        prev_id = i
        prev_tile = t


@numba.njit(cache=True, nogil=True)
def _block_transfer_counts(owner, lo, hi, elements, messages):  # pragma: no cover
    prev_tile = -1
    for i in range(lo, hi):
        t = owner[i]
        if t < 0:  # unmapped: validation reports it
            prev_tile = -1
            continue
        elements[t] += 1
        if t != prev_tile:
            messages[t] += 1
        prev_tile = t


def transfer_counts(
    ids: np.ndarray | range,
    owner: np.ndarray,
    num_tiles: int,
    changes: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Elements and messages per tile of a transfer of elements ``ids`` (in order; a
    ``range`` of step 1 for a block of consecutive ids).

    A message is a run of elements consecutive both in the transfer and in element
    ids, on one tile. Every element must be mapped (``0 <= owner[id] < num_tiles``).
    With ``changes`` (:func:`change_points` of the space), a block is counted by its
    stretches of one owner, not element by element.
    """
    elements = np.zeros(num_tiles, np.int64)
    messages = np.zeros(num_tiles, np.int64)
    if isinstance(ids, range) and ids.step == 1:
        if len(ids) and changes is not None:
            tiles, lengths = block_stretches(owner, changes, ids.start, ids.stop)
            mapped = tiles >= 0
            np.add.at(elements, tiles[mapped], lengths[mapped])
            np.add.at(messages, tiles[mapped], 1)
        elif len(ids):
            _block_transfer_counts(owner, ids.start, ids.stop, elements, messages)
    elif len(ids):
        _transfer_counts(read_only(np.asarray(ids, np.int64)), owner, elements, messages)
    return elements, messages


@numba.njit(cache=True, nogil=True)
def _tile_counts(owner, lo, hi, counts):  # pragma: no cover
    for i in range(lo, hi):
        t = owner[i]
        if t >= 0:
            counts[t] += 1


def tile_counts(
    owner: np.ndarray, lo: int, hi: int, num_tiles: int, changes: np.ndarray | None = None
) -> np.ndarray:
    """Elements ``lo .. hi - 1`` on each tile (unmapped ones, ``owner < 0``, left out);
    by stretches of one owner with ``changes`` (:func:`change_points` of the space)."""
    counts = np.zeros(num_tiles, np.int64)
    if changes is not None:
        tiles, lengths = block_stretches(owner, changes, lo, hi)
        mapped = tiles >= 0
        np.add.at(counts, tiles[mapped], lengths[mapped])
    else:
        _tile_counts(owner, lo, hi, counts)
    return counts


def block_stretches(
    owner: np.ndarray, changes: np.ndarray, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(owning tile, length)`` of each stretch of one owner in the ids ``lo .. hi -
    1``, in id order; ``changes`` are the :func:`change_points` of the space."""
    if hi <= lo:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    cuts = changes[np.searchsorted(changes, lo, side="right") : np.searchsorted(changes, hi)]
    starts = np.concatenate(([lo], cuts)).astype(np.int64)
    ends = np.append(cuts, hi).astype(np.int64)
    return owner[starts].astype(np.int64), ends - starts


@numba.njit(cache=True, nogil=True)
def _consecutive(ids):  # pragma: no cover
    for p in range(1, ids.size):  # noqa: SIM110 (a loop Numba compiles)
        if ids[p] != ids[p - 1] + 1:
            return False
    return True


#: Id array types the kernels are compiled for.
_ID_TYPES = (np.dtype(np.int32), np.dtype(np.int64))


def ids_or_run(ids: np.ndarray | range) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """A tensor's ids (:meth:`~poplar_api.tensor.Tensor._flat_ids`) as the memory
    planner takes them: an id array, or one run ``(begin, end)`` for a block."""
    if isinstance(ids, range) and ids.step == 1:
        return np.array([ids.start], np.int64), np.array([ids.stop], np.int64)
    return np.asarray(ids, np.int64)


def as_index(ids: np.ndarray | range) -> np.ndarray | slice:
    """``ids`` as a slice when they are one ascending run of consecutive ids (then
    reads and writes of the elements are copies of a block, not a gather or scatter),
    else unchanged (a ``range`` of step 1, a tensor's consecutive ids, is a slice
    without looking at it)."""
    if isinstance(ids, range) and ids.step == 1:
        return slice(ids.start, ids.stop) if len(ids) else np.empty(0, np.int64)
    ids = np.asarray(ids)
    if ids.ndim == 1 and ids.size and ids.dtype in _ID_TYPES and _consecutive(read_only(ids)):
        return slice(int(ids[0]), int(ids[0]) + ids.size)
    return ids


@numba.njit(cache=True, nogil=True)
def _tile_cuts(dst, num_tiles, step):  # pragma: no cover - compiled
    seen = np.zeros(num_tiles, np.bool_)
    cuts = np.empty(dst.shape[0] // step + 2, np.int64)
    cuts[0] = 0
    count = 1
    target = step
    if dst.shape[0]:
        seen[dst[0]] = True
    for i in range(1, dst.shape[0]):
        if dst[i] == dst[i - 1]:
            continue
        if seen[dst[i]]:
            return cuts[:0], False
        seen[dst[i]] = True
        if i >= target:
            cuts[count] = i
            count += 1
            target = (i // step + 1) * step
    if dst.shape[0] > 0:
        cuts[count] = dst.shape[0]
        count += 1
    return cuts[:count], True


def tile_cuts(dst: np.ndarray, num_tiles: int, step: int) -> tuple[np.ndarray, bool]:
    """Cut points splitting ``dst`` (tile ids) into parts of about ``step`` entries
    without splitting a tile's entries: 0, then the first start of a tile's entries at
    or after each multiple of ``step``, then ``len(dst)``; and whether every tile's
    entries are contiguous (when not, the cuts are empty)."""
    return _tile_cuts(np.asarray(dst, np.int64), int(num_tiles), int(step))


@numba.njit(cache=True, nogil=True)
def _stretch_starts(changes, bases, size):  # pragma: no cover - compiled
    # one merge of the two ascending arrays: each start and the last base at or before it
    starts = np.empty(1 + changes.size + bases.size, np.int64)
    holder = np.empty(starts.size, np.int64)
    i = j = k = 0
    x = 0
    while True:
        while j < bases.size and bases[j] <= x:
            j += 1
        starts[k] = x
        holder[k] = j - 1 if j > 0 else bases.size - 1  # numpy's index -1 when none
        k += 1
        while i < changes.size and changes[i] <= x:
            i += 1
        nxt = size
        if i < changes.size and changes[i] < nxt:
            nxt = changes[i]
        if j < bases.size and bases[j] < nxt:
            nxt = bases[j]
        if nxt >= size:
            return starts[:k], holder[:k]
        x = nxt


def stretch_starts(
    changes: np.ndarray, bases: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray]:
    """The starts of the stretches of ``[0, size)`` cut at owner ``changes`` and at
    variable ``bases`` (both ascending): the distinct values of ``0``, ``changes`` and
    ``bases`` below ``size``, in order, and for each the position in ``bases`` of the
    last base at or before it (``np.searchsorted(bases, starts, "right") - 1``, with
    ``-1`` taken as numpy takes it: the last), in one pass instead of a sort."""
    return _stretch_starts(np.asarray(changes, np.int64), np.asarray(bases, np.int64), int(size))


@numba.njit(cache=True, nogil=True)
def _variable_tile_counts(starts, holder, size, tile, var_ids, num_tiles):  # pragma: no cover
    # stretches starts[k] .. starts[k + 1] - 1 (the last to size) of one owner, in id
    # order, held by variable var_ids[holder[k]] (non-decreasing): elements per
    # (variable, tile), variable after variable, tiles ascending; a per-tile
    # accumulator and the list of tiles each variable touches, sorted when they are
    # not already in order (a variable mapped over ascending tiles, mostly)
    m = starts.size
    out_var = np.empty(m, np.int64)
    out_tile = np.empty(m, np.int64)
    out_count = np.empty(m, np.int64)
    acc = np.zeros(num_tiles, np.int64)
    touched = np.empty(num_tiles, np.int64)
    r = 0
    k = 0
    while k < m:
        vid = var_ids[holder[k]]
        count = 0
        ascending = True
        while k < m and var_ids[holder[k]] == vid:
            t = tile[starts[k]]
            if t >= num_tiles:  # not a tile of the target: validation reports it
                return out_var[:0], out_tile[:0], out_count[:0], False
            if t >= 0:  # unmapped elements belong to no tile
                if acc[t] == 0:
                    if count > 0 and t < touched[count - 1]:
                        ascending = False
                    touched[count] = t
                    count += 1
                acc[t] += (starts[k + 1] if k + 1 < m else size) - starts[k]
            k += 1
        if not ascending:
            touched[:count].sort()
        for j in range(count):
            t = touched[j]
            out_var[r] = vid
            out_tile[r] = t
            out_count[r] = acc[t]
            acc[t] = 0
            r += 1
    return out_var[:r], out_tile[:r], out_count[:r], True


def variable_tile_counts(
    starts: np.ndarray,
    holder: np.ndarray,
    size: int,
    tile: np.ndarray,
    var_ids: np.ndarray,
    num_tiles: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Elements of each variable on each tile from the stretches of
    :func:`stretch_starts` (``starts``, each ``holder``'s variable ``var_ids[holder]``,
    non-decreasing; the last stretch ends at ``size``) of a space with tile array
    ``tile``, in one compiled pass: ``(variable, tile, elements)`` sorted by variable
    then tile; unmapped stretches left out."""
    var, tiles, count, ok = _variable_tile_counts(
        np.asarray(starts, np.int64), np.asarray(holder, np.int64), int(size), tile,
        np.asarray(var_ids, np.int64), int(num_tiles),
    )  # fmt: skip
    if not ok:
        at = tile[np.asarray(starts, np.int64)]
        k = int(np.argmax(at))
        bad, vid = int(at[k]), int(np.asarray(var_ids, np.int64)[np.asarray(holder)[k]])
        raise ValueError(
            f"an element of variable id {vid} is mapped to tile {bad}, beyond the "
            f"target's {num_tiles} tiles; "
            "hint: validate the graph's tile mapping first"
        )
    return var, tiles, count


@numba.njit(cache=True, nogil=True)
def _union_sorted(lo, hi):  # pragma: no cover - compiled
    out_lo = np.empty(lo.size, np.int64)
    out_hi = np.empty(lo.size, np.int64)
    k = 0
    out_lo[0], reach = lo[0], hi[0]
    for i in range(1, lo.size):
        if lo[i] > reach:  # a gap: the interval so far is complete
            out_hi[k] = reach
            k += 1
            out_lo[k], reach = lo[i], hi[i]
        elif hi[i] > reach:
            reach = hi[i]
    out_hi[k] = reach
    return out_lo[: k + 1], out_hi[: k + 1]


def union_sorted(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of ranges ``[lo, hi)`` (``lo`` ascending, ``hi >= lo``) as disjoint
    ranges in order, touching ones joined, in one pass (one compiled version however
    the ranges come: read-only, see :func:`read_only`)."""
    if lo.size == 0:
        return lo.astype(np.int64), hi.astype(np.int64)
    return _union_sorted(
        read_only(lo.astype(np.int64, copy=False)), read_only(hi.astype(np.int64, copy=False))
    )


@numba.njit(cache=True, nogil=True)
def _fill_field(ids, offsets, begin, no_run, listed, joined):  # pragma: no cover
    for v in range(begin.shape[0]):  # the runs
        b = begin[v]
        if b != no_run:
            at = offsets[v]
            for k in range(offsets[v + 1] - at):
                ids[at + k] = b + k
    j = 0
    for v in listed:  # the others' ids, one vertex after another
        for k in range(offsets[v], offsets[v + 1]):
            ids[k] = joined[j]
            j += 1


def fill_field(
    ids: np.ndarray,
    offsets: np.ndarray,
    begin: np.ndarray,
    no_run: int,
    listed: np.ndarray,
    joined: np.ndarray,
) -> None:
    """Lay out a field's ids in vertex order (``ids[offsets[v]:offsets[v + 1]]``):
    vertex ``v`` with ``begin[v] != no_run`` holds the run from ``begin[v]``; the
    vertices ``listed`` (ascending) hold the ids ``joined``, one after another."""
    if int(offsets[-1]) != ids.size or ids.size < joined.size:
        raise ValueError(f"a field of {ids.size} ids laid out over {int(offsets[-1])}")
    _fill_field(ids, offsets, begin, no_run, listed, read_only(joined))  # one compiled kind


def expand(begin: np.ndarray, length: np.ndarray) -> np.ndarray:
    """The ids of runs ``[begin, begin + length)``, run after run (int64)."""
    length = np.asarray(length, np.int64)
    total = int(length.sum())
    starts = np.cumsum(length) - length
    return np.arange(total, dtype=np.int64) - np.repeat(starts - begin, length)


@numba.njit(cache=True, nogil=True)
def _vertex_runs(ids, offsets):  # pragma: no cover - compiled
    n = offsets.shape[0] - 1
    begin = np.zeros(n, np.int64)
    end = np.zeros(n, np.int64)
    for v in range(n):
        a, b = offsets[v], offsets[v + 1]
        if b > a:
            for k in range(a + 1, b):
                if ids[k] != ids[k - 1] + 1:
                    return begin, end, False
            begin[v] = ids[a]
            end[v] = ids[a] + (b - a)
    return begin, end, True


def vertex_runs(ids: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """``(begin, end)`` with ``ids[offsets[v]:offsets[v + 1]] == range(begin[v], end[v])``
    for every vertex ``v`` (each vertex's ids one ascending run), else None."""
    ids = np.asarray(ids)
    if ids.dtype not in _ID_TYPES:
        ids = ids.astype(np.int64)
    begin, end, ok = _vertex_runs(ids, np.asarray(offsets, np.int64))
    return (begin, end) if ok else None


def expand_as(begin: np.ndarray, length: np.ndarray, dtype: type) -> np.ndarray:
    """:func:`expand`'s ids written straight into an array of ``dtype`` (int32 where the
    ids fit: no int64 copy of every id on the way)."""
    length = np.asarray(length, np.int64)
    out = np.empty(int(length.sum()), dtype)
    _fill_runs(np.asarray(begin, np.int64), length, out)
    return out


@numba.njit(cache=True, nogil=True)
def _fill_runs(begin, length, out):  # pragma: no cover - compiled
    j = 0
    for r in range(begin.shape[0]):
        b = begin[r]
        for k in range(length[r]):
            out[j] = b + k
            j += 1


@numba.njit(cache=True, nogil=True)
def take_ranges(src, begins, ends, out, at):  # pragma: no cover - compiled
    """Write ``src[begins[q]:ends[q]]``, range after range, into ``out`` from ``at``;
    return the position after the last written (no array of positions is made)."""
    j = at
    for q in range(begins.shape[0]):
        for p in range(begins[q], ends[q]):
            out[j] = src[p]
            j += 1
    return j


@numba.njit(cache=True, nogil=True)
def put_ranges(dst, begins, ends, src):  # pragma: no cover - compiled
    """The inverse of :func:`take_ranges`: ``src``, in order, into ``dst[begins[q]:ends[q]]``
    range after range (an element listed twice keeps the later value, as a numpy
    assignment through an index array)."""
    j = 0
    for q in range(begins.shape[0]):
        for p in range(begins[q], ends[q]):
            dst[p] = src[j]
            j += 1


@numba.njit(cache=True, nogil=True)
def _one_block(begins, ends):  # pragma: no cover - compiled
    joined = True
    for q in range(1, begins.shape[0]):
        if begins[q] != ends[q - 1]:
            joined = False
            break
    return joined


def one_block(begins: np.ndarray, ends: np.ndarray) -> tuple[int, int] | None:
    """``(begin, end)`` of the one block the ranges ``[begins[q], ends[q])`` make when
    each starts where the one before it ended (a field whose vertices' runs follow one
    another in memory), else None: :func:`take_ranges` and :func:`put_ranges` over the
    ranges then move the elements of that slice, in its order."""
    if begins.shape[0] == 0 or not _one_block(begins, ends):
        return None
    return int(begins[0]), int(ends[-1])


def take_run_ranges(
    starts: np.ndarray,
    firsts: np.ndarray,
    size: int,
    begins: np.ndarray,
    ends: np.ndarray,
    out: np.ndarray,
    at: int,
) -> int:
    """:func:`take_ranges` over a sequence held as runs of consecutive ids (run ``r``
    starts at position ``starts[r]`` with id ``firsts[r]``; ``size`` positions in all,
    as :class:`~poplar_api.run_ids.RunIds` keeps them): the ids are made from the runs
    as they are written, never expanded first. Returns where the next id would go.

    Raises ``ValueError``, as :func:`run_ranges` does, when a non-empty range reaches a
    position outside the ``size`` held (or there are no runs), and when ``out`` has no
    room for the ids from ``at`` on: the compiled pass checks no bounds, and would read
    past the runs or write past ``out``."""
    _check_positions("take_run_ranges", starts, size, begins, ends)
    room = int(np.maximum(np.asarray(ends) - np.asarray(begins), 0).sum())
    if at < 0 or at + room > out.shape[0]:
        raise ValueError(
            f"take_run_ranges: {room} ids from position {at} do not fit the {out.shape[0]} "
            "entries of out"
        )
    return _take_run_ranges(starts, firsts, size, begins, ends, out, at)


@numba.njit(cache=True, nogil=True)
def _take_run_ranges(starts, firsts, size, begins, ends, out, at):  # pragma: no cover
    # the pass of take_run_ranges (its arguments checked there)
    j = at
    nruns = starts.shape[0]
    for q in range(begins.shape[0]):
        p, hi = begins[q], ends[q]
        if hi <= p:
            continue
        r = _last_at_or_before(starts, 0, nruns, p)
        while p < hi:
            stop = min(starts[r + 1] if r + 1 < nruns else size, hi)
            base = firsts[r] - starts[r]
            while p < stop:
                out[j] = base + p
                p += 1
                j += 1
            r += 1
    return j


@numba.njit(cache=True, nogil=True, inline="always")  # inlined: no version per caller
def _last_at_or_before(starts, lo, hi, p):  # pragma: no cover - compiled
    # binary search in starts[lo:hi] (ascending, starts[lo] <= p or lo == 0): the last
    # index whose start is at or before p
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if starts[mid] <= p:
            lo = mid
        else:
            hi = mid
    return lo


@numba.njit(cache=True, nogil=True)
def _run_ranges(starts, firsts, size, begins, ends, out_lo, out_hi, fill):  # pragma: no cover
    # rows of every non-empty range: each run from the last starting at or before its
    # first position to the last starting at or before its last (counted, or written
    # with ``fill``)
    j = r = 0
    nruns = starts.shape[0]
    for q in range(begins.shape[0]):
        b, e = begins[q], ends[q]
        if e <= b:
            continue
        lo_r, hi_r = 0, nruns  # the last run starting at or before b: searched from
        if starts[r] <= b:  # the last range's when after it (ranges mostly ascend)
            lo_r, hi_r, step = r, r + 1, 1
            while hi_r < nruns and starts[hi_r] <= b:
                lo_r, hi_r, step = hi_r, hi_r + step, 2 * step
            hi_r = min(hi_r, nruns)
        r = _last_at_or_before(starts, lo_r, hi_r, b)
        while True:
            if fill:
                stop = starts[r + 1] if r + 1 < nruns else size
                shift = firsts[r] - starts[r]
                out_lo[j] = max(starts[r], b) + shift
                out_hi[j] = min(stop, e) + shift
            j += 1
            if r + 1 >= nruns or starts[r + 1] > e - 1:
                break
            r += 1
    return j


def run_ranges(
    starts: np.ndarray, firsts: np.ndarray, size: int, begins: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The ids at positions ``begins[q] .. ends[q] - 1`` of a sequence held as runs of
    consecutive ids, as id runs ``[begin, end)``, range after range, a run cut where a
    range ends: :func:`take_run_ranges`' ids without an entry per id (two passes)."""
    starts, firsts = (read_only(np.asarray(a, np.int64)) for a in (starts, firsts))
    begins, ends = (read_only(np.asarray(a, np.int64)) for a in (begins, ends))
    size = np.int64(size)
    _check_positions("run_ranges", starts, size, begins, ends)
    n = _run_ranges(starts, firsts, size, begins, ends, _NO_ROWS, _NO_ROWS, False)
    lo, hi = np.empty(n, np.int64), np.empty(n, np.int64)
    _run_ranges(starts, firsts, size, begins, ends, lo, hi, True)
    return lo, hi


_NO_ROWS = np.zeros(0, np.int64)


def _check_positions(
    api: str, starts: np.ndarray, size: int, begins: np.ndarray, ends: np.ndarray
) -> None:
    """Raise ``ValueError`` (naming ``api``) when a non-empty range ``[begins[q],
    ends[q])`` reaches a position outside the ``size`` held as runs from ``starts``, or
    there are no runs to take from: the compiled passes check no bounds."""
    begins, ends = np.asarray(begins), np.asarray(ends)
    if begins.size and (starts.size == 0 or begins.min() < 0 or ends.max() > size):
        used = ends > begins  # masks only when a range may lie outside (rare)
        if used.any() and (starts.size == 0 or begins[used].min() < 0 or ends[used].max() > size):
            lo, hi = int(begins[used].min()), int(ends[used].max())
            raise ValueError(f"{api}: positions {lo}..{hi - 1} lie outside the {size} held")
