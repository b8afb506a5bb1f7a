"""The variables owning element ids or id runs, marked in compiled passes (liveness
asks which variables each node of a lowered program touches).

Variables are id ranges in id order: ``bases`` (ascending) holds each variable's
first id in an element space and ``var_ids`` its variable id. Ids mostly come in runs
within one variable, so a variable is looked up (a binary search of ``bases``) only
when an id or a run leaves the one found last.
"""

from __future__ import annotations

import numba
import numpy as np

from poplar_api.lowering.runs import read_only

__all__ = [
    "key_totals",
    "mark_runs_in",
    "mark_variable_runs",
    "mark_variables",
    "mark_variables_in",
    "variable_tile_counts",
]

#: :func:`key_totals` adds counts in one bin per key of the keys' span when the span is at
#: most this many times the number of keys (plus :data:`DENSE_SLACK`), else it sorts them.
DENSE_SPAN = 2
DENSE_SLACK = 1 << 16

#: Ids per chunk of :func:`_mark_variables`: a chunk within the variables marked last
#: is passed over by its least and greatest id (a loop that vectorises).
MARK_CHUNK = 256


@numba.njit(cache=True, nogil=True)
def _mark_variables(ids, bases, var_ids, mask):  # pragma: no cover - compiled
    n = bases.size
    top = np.iinfo(np.int64).max
    lo = 1
    hi = 0  # ids [lo, hi): every variable they hold is marked (empty before the first)
    lo2 = 1
    hi2 = 0  # the variable found before the last one (empty before there is one)
    size = ids.size
    for p in range(0, size, MARK_CHUNK):
        q = min(p + MARK_CHUNK, size)
        c_lo = c_hi = ids[p]
        for k in range(p + 1, q):  # min and max without branches: vectorises
            x = ids[k]
            c_lo = min(c_lo, x)
            c_hi = max(c_hi, x)
        if c_lo >= lo and c_hi < hi:
            continue  # the whole chunk in variables marked already
        # the variables of the chunk's least and greatest id hold an id of it each: when
        # they are one variable or neighbours, they are all it touches (ids going back
        # and forth between an operand and its padding: no look-up per id)
        j_lo = np.searchsorted(bases, c_lo, side="right") - 1
        j_hi = np.searchsorted(bases, c_hi, side="right") - 1
        if j_hi <= j_lo + 1:
            mask[var_ids[j_lo]] = True
            mask[var_ids[j_hi]] = True
            lo = bases[j_lo]
            hi = bases[j_hi + 1] if j_hi + 1 < n else top
            continue
        for k in range(p, q):
            i = ids[k]
            if i >= lo and i < hi:
                continue
            if i >= lo2 and i < hi2:  # back in the variable before: swap the two
                lo, hi, lo2, hi2 = lo2, hi2, lo, hi
                continue
            j = np.searchsorted(bases, i, side="right") - 1
            lo2, hi2 = lo, hi
            lo = bases[j]
            hi = bases[j + 1] if j + 1 < n else top
            mask[var_ids[j]] = True


def mark_variables(space: object, ids: np.ndarray, mask: np.ndarray) -> None:
    """Set ``mask[v]`` for every variable ``v`` owning an element of ``ids``.

    The result of ``mask[space.variables_of(ids)] = True`` in one pass: ids mostly
    come in runs within one variable, so the variable is looked up again only when an
    id leaves the range of the last one.
    """
    bases = np.asarray(space.var_bases, np.int64)
    mark_variables_in(bases, np.asarray(space.var_ids, np.int64), ids, mask)


def mark_variables_in(
    bases: np.ndarray, var_ids: np.ndarray, ids: np.ndarray, mask: np.ndarray
) -> None:
    """:func:`mark_variables` with the space's variable ``bases`` and ``var_ids`` given
    as arrays (made once per lowering, not per call).

    One compiled pass: ids mostly lie in one variable (a field reads one tensor), so
    the ids are taken a chunk of :data:`MARK_CHUNK` at a time and a chunk within the
    variable found last is passed over by its least and greatest id alone; the
    variable is looked up (a binary search of ``bases``) only for an id outside it.
    A chunk whose least and greatest ids lie in one variable or in two neighbours
    marks those two and no id of it is looked up (a transposing copy's ids alternate
    between an operand and its padding: 6 ns per id one by one)."""
    if ids.size and bases.size:
        _mark_variables(read_only(np.asarray(ids)), bases, var_ids, mask)


def mark_variable_runs(space: object, begin: np.ndarray, end: np.ndarray, mask: np.ndarray) -> None:
    """:func:`mark_variables` of the ids ``begin[k] .. end[k] - 1`` of every run ``k``."""
    bases = np.asarray(space.var_bases, np.int64)
    nonempty = np.diff(bases, append=space.size) > 0
    mark_runs_in(bases, np.asarray(space.var_ids, np.int64), nonempty, begin, end, mask)


@numba.njit(cache=True, nogil=True)
def _mark_runs(bases, var_ids, nonempty, begin, end, mask):  # pragma: no cover - compiled
    n = bases.size
    top = np.iinfo(np.int64).max
    lo = 1
    hi = 0  # the id range of the variable found last (empty before the first)
    j = -1
    for r in range(begin.size):
        b = begin[r]
        e = end[r]
        if e <= b:
            continue
        if b < lo or b >= hi:  # the run starts outside the variable found last
            j = np.searchsorted(bases, b, side="right") - 1
            lo = bases[j]
            hi = bases[j + 1] if j + 1 < n else top
        if nonempty[j]:
            mask[var_ids[j]] = True
        while e > hi:  # the run reaches the next variables: each with elements
            j += 1
            lo = bases[j]
            hi = bases[j + 1] if j + 1 < n else top
            if nonempty[j]:
                mask[var_ids[j]] = True


def mark_runs_in(
    bases: np.ndarray,
    var_ids: np.ndarray,
    nonempty: np.ndarray,
    begin: np.ndarray,
    end: np.ndarray,
    mask: np.ndarray,
) -> None:
    """:func:`mark_variable_runs` with the space's variable ``bases``, ``var_ids`` and
    whether each variable has elements (``nonempty``) given as arrays.

    Variables are id ranges in id order: a run covers every variable from its first
    element's to its last element's, except variables of no elements. One compiled
    pass over the runs, the variable looked up (a binary search of ``bases``) only for
    a run starting outside the one found last (a field's runs mostly lie in one)."""
    if begin.size == 0 or bases.size == 0:
        return
    begin = read_only(np.asarray(begin, np.int64))
    end = read_only(np.asarray(end, np.int64))
    _mark_runs(bases, var_ids, nonempty, begin, end, mask)


@numba.njit(cache=True, inline="always")
def _range_at(starts, values, i):  # pragma: no cover - compiled
    # (lo, hi, value) of the range [lo, hi) holding id i, of ranges from the ascending
    # starts on (the last one open-ended) with a value each: a variable from bases and
    # var_ids, a tile run from its starts and tiles
    k = np.searchsorted(starts, i, side="right") - 1
    hi = starts[k + 1] if k + 1 < starts.size else np.iinfo(np.int64).max
    return starts[k], hi, values[k]


@numba.njit(cache=True, nogil=True)
def _variable_tile_counts(
    begin, end, runs, tile, bases, var_ids, nt, keys, counts
):  # pragma: no cover - compiled
    # the ids begin[k] (or, with runs, begin[k] .. end[k] - 1), each stretch of them in
    # one variable and on one tile as one key (variable * nt + tile) and its number of
    # ids, into keys and counts when they have room; returns how many stretches
    fill = keys.size > 0
    lo = 1
    hi = 0  # the id range of the variable found last (empty before the first)
    vid = np.int64(0)
    last = np.int64(-1)
    m = 0
    for r in range(begin.size):
        b = np.int64(begin[r])
        e = np.int64(end[r]) if runs else b + 1
        for i in range(b, e):
            if i < lo or i >= hi:
                lo, hi, vid = _range_at(bases, var_ids, i)
            key = vid * nt + np.int64(tile[i])
            if m and key == last:
                if fill:
                    counts[m - 1] += 1
                continue
            if fill:
                keys[m] = key
                counts[m] = 1
            last = key
            m += 1
    return m


@numba.njit(cache=True, nogil=True)
def _variable_run_tile_counts(
    begin, end, runs, tile_starts, tile_values, bases, var_ids, nt, keys, counts
):  # pragma: no cover - compiled
    # _variable_tile_counts with the tiles held as runs (run k from id tile_starts[k] on
    # tile tile_values[k]): the run of an id is looked up (a binary search) only when the
    # id leaves the run found last, as the variable is
    fill = keys.size > 0
    lo = 1
    hi = 0  # the id range of the variable found last (empty before the first)
    tlo = 1
    thi = 0  # the id range of the tile run found last
    vid = np.int64(0)
    t = np.int64(0)
    last = np.int64(-1)
    m = 0
    for r in range(begin.size):
        b = np.int64(begin[r])
        e = np.int64(end[r]) if runs else b + 1
        for i in range(b, e):
            if i < lo or i >= hi:
                lo, hi, vid = _range_at(bases, var_ids, i)
            if i < tlo or i >= thi:
                tlo, thi, tv = _range_at(tile_starts, tile_values, i)
                t = np.int64(tv)
            key = vid * nt + t
            if m and key == last:
                if fill:
                    counts[m - 1] += 1
                continue
            if fill:
                keys[m] = key
                counts[m] = 1
            last = key
            m += 1
    return m


def variable_tile_counts(
    held: np.ndarray | tuple[np.ndarray, np.ndarray],
    tile: np.ndarray | tuple[np.ndarray, np.ndarray],
    bases: np.ndarray,
    var_ids: np.ndarray,
    nt: int,
) -> tuple[np.ndarray, np.ndarray]:
    """``(keys, counts)``: ``variable * nt + tile`` of the ids ``held`` (an id array, or
    runs ``(begin, end)``), the variable from ``bases`` and ``var_ids`` and the tile from
    ``tile`` (by id, or as runs ``(starts, tiles)`` of a compacted space, read as runs
    without making the array), one key per stretch of consecutive ids with the same key and how
    many ids it holds (keys repeat when a stretch comes back; sum the counts per key).

    Two compiled passes (a count, then the stretches): runs are never expanded into ids
    and there is no sort, where a per-id lookup, gather and sort of a counted compute
    set's ids took most of its compile."""
    is_runs = isinstance(held, tuple)
    begin = read_only(np.asarray(held[0] if is_runs else held))
    end = read_only(np.asarray(held[1], begin.dtype)) if is_runs else begin
    none = np.zeros(0, np.int64)
    if isinstance(tile, tuple):
        starts = read_only(np.asarray(tile[0], np.int64))
        args = (begin, end, is_runs, starts, tile[1], bases, var_ids, np.int64(nt))
        kernel = _variable_run_tile_counts
    else:
        args = (begin, end, is_runs, tile, bases, var_ids, np.int64(nt))
        kernel = _variable_tile_counts
    m = int(kernel(*args, none, none))
    keys, counts = np.empty(m, np.int64), np.empty(m, np.int64)
    kernel(*args, keys, counts)
    return keys, counts


def key_totals(keys: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(distinct, totals)``: the distinct ``keys`` in ascending order and the sum of
    the ``counts`` (each at least 1) of each, as int64; what ``np.unique(keys,
    return_inverse=True)`` and a ``bincount`` of the counts by the inverse give.

    A counted compute set's stretches of one key (:func:`variable_tile_counts`) come
    back to a key again and again when its fields read a vector spread over the tiles
    from every vertex (tutorial 7's ten million reads of ``x`` are as many stretches);
    sorting them took most of the compile. Keys ``variable * tiles + tile`` lie within a
    span not much wider than their number there, so they are added in one bin per key of
    the span (no sort); a wider span is sorted as before."""
    keys = np.asarray(keys, np.int64).reshape(-1)
    counts = np.asarray(counts).reshape(-1)
    if keys.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    low = int(keys.min())
    span = int(keys.max()) - low + 1
    if span <= DENSE_SPAN * keys.size + DENSE_SLACK:
        total = np.bincount(keys - low, counts, span)
        present = np.flatnonzero(total)
        return present + low, total[present].astype(np.int64)
    distinct, at = np.unique(keys, return_inverse=True)
    return distinct, np.bincount(at.reshape(-1), counts, distinct.size).astype(np.int64)
