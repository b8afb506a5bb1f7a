"""Operand element ids that are a sum of one term per dimension: fields without gathers.

The convolution's operands are views of variables laid out in Poplibs' grouped
memory orders (:mod:`~poplar_api.poplin.conv_layout`): the id at position
``(i_0, ..., i_{n-1})`` of such a view is ``T_0[i_0] + ... + T_{n-1}[i_{n-1}]``, one
table per dimension (a stride times the index, or for a dimension split into groups
in memory, ``(i // g) * hi + (i % g) * lo``). A vertex field gathered from the view
by one index pattern plus a base per block
(:class:`~poplar_api.poplin.conv_blocks.Assembler`) is then one id pattern plus one
id base per block, for the blocks whose tables read the same from their first index
on (all of them for a linear dimension; those at the same place in a group for a
grouped one). The ids are then computed rather than read from an array of every id
at positions far apart (reads that wait on memory), and the runs of consecutive ids
are those of the pattern, found once per shape of block.
"""

from __future__ import annotations

from collections.abc import Sequence

import numba
import numpy as np

from poplar_api.popops.layout import first_rows

__all__ = ["SeparableIds", "column_terms", "first_rows", "piece_positions", "separable_ids"]

_NONE = np.zeros(0, np.int64)

Pieces = Sequence[tuple[Sequence[int], Sequence[int]]]


class SeparableIds:
    """The ids of an array as the sum of one table per dimension.

    Parameters
    ----------
    tables
        int64 per dimension, the term of each index (the first holds the id at
        position 0 in its entry 0; the others are 0 there).
    """

    def __init__(self, tables: list[np.ndarray]) -> None:
        self.tables = tables
        self.size = np.array([t.size for t in tables], np.int64)
        #: each table's first step, and whether it keeps that step throughout (every
        #: block then reads it alike)
        self.steps = np.array([t[1] - t[0] if t.size > 1 else 0 for t in tables], np.int64)
        self.linear = [
            bool((np.diff(t) == st).all()) for t, st in zip(tables, self.steps, strict=True)
        ]
        self.first = sum(int(t[0]) for t in tables)

    @property
    def shape(self) -> tuple[int, ...]:
        """The shape of the array whose ids these are."""
        return tuple(int(n) for n in self.size)

    def array(self) -> np.ndarray:
        """The ids as an int64 array of :attr:`shape` (row-major): the leading tables
        summed over their grid, then the last one added in one pass over the result."""
        *lead, last = self.tables
        outer = np.zeros([t.size for t in lead], np.int64)
        for d, t in enumerate(lead):
            ax = [1] * len(lead)
            ax[d] = t.size
            outer += t.reshape(ax)
        return np.add(outer[..., None], last)

    def flat(self) -> np.ndarray:
        """:meth:`array` in one dimension."""
        return self.array().reshape(-1)

    def blocks(
        self, index: np.ndarray, rel: np.ndarray
    ) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]] | None:
        """The blocks beginning at positions ``index`` (int64 ``[k, ndim]``) that read
        the positions ``rel`` (int64 ``[width, ndim]``, relative to a block's first
        position, in the order read), as ``(which, id base per block, id pattern)``
        per set of blocks with one pattern: the ids block ``which[j]`` reads are
        ``base[j] + pattern``. None when a block reads outside the array."""
        nd = len(self.tables)
        if index.shape[0] == 0:
            return []
        if rel.shape[0] == 0:
            return [(np.arange(index.shape[0]), np.zeros(index.shape[0], np.int64), _NONE)]
        # each column's bounds, and the terms of the tables that keep one step: one
        # pass over each
        rel_lo, rel_hi, pattern = column_terms(rel, self.steps)
        index_lo, index_hi, bases = column_terms(index, self.steps)
        ext = rel_hi + 1
        if (index_lo < 0).any() or (rel_lo < 0).any():
            return None
        if (index_hi + ext > self.size).any():
            return None
        # per dimension, blocks whose tables read the same from their first index on
        # share a class (all of them on a table that keeps one step)
        odd = [d for d in range(nd) if not self.linear[d]]
        classes = np.zeros((index.shape[0], len(odd)), np.int64)
        for c, d in enumerate(odd):
            table = self.tables[d]
            starts, inverse = np.unique(index[:, d], return_inverse=True)
            seen: dict[bytes, int] = {}
            of_start = np.array(
                [
                    seen.setdefault((table[s : s + ext[d]] - table[s]).tobytes(), len(seen))
                    for s in starts.tolist()
                ],
                np.int64,
            )
            classes[:, c] = of_start[inverse.reshape(-1)]
        bases += self.first
        for d in odd:  # (its entry 0 is in ``first`` already: the first table's holds it)
            table = self.tables[d]
            bases += table[index[:, d]] - table[0] - index[:, d] * self.steps[d]
            pattern -= rel[:, d] * self.steps[d]
        if not classes.any():
            everyone = np.arange(index.shape[0])
            return [(everyone, bases, pattern + self._odd_terms(index[0], rel, odd))]
        first, which = first_rows(classes)
        out = []
        for c, f in enumerate(first.tolist()):
            sel = np.flatnonzero(which == c)
            out.append((sel, bases[sel], pattern + self._odd_terms(index[f], rel, odd)))
        return out

    def _odd_terms(self, at: np.ndarray, rel: np.ndarray, odd: list[int]) -> np.ndarray:
        """The terms of the tables ``odd`` at positions ``rel`` from ``at``, less those
        at ``at``."""
        out = np.zeros(rel.shape[0], np.int64)
        for d in odd:
            table = self.tables[d]
            out += table[at[d] + rel[:, d]] - table[at[d]]
        return out


def column_terms(rows: np.ndarray, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each column's least and greatest entry of the 2-D int array ``rows`` (at least
    one row) and each row's sum of its entries times ``steps`` (one per column), as
    int64: ``rows.min(0), rows.max(0), rows @ steps`` in one compiled pass. numpy
    reduces a tall array of a few columns (a block pattern's positions) along its
    rows some ten times slower per entry than the same entries in one dimension (its
    inner loop runs over the few columns), and its integer ``@`` is no faster."""
    rows = np.ascontiguousarray(rows, np.int64)
    if rows.flags.writeable:  # (one compiled form: read-only, C-contiguous int64)
        rows = rows.view()
        rows.flags.writeable = False
    steps = np.ascontiguousarray(steps, np.int64)
    lo, hi = rows[0].copy(), rows[0].copy()
    dot = np.empty(rows.shape[0], np.int64)
    _column_terms(rows, steps, lo, hi, dot)
    return lo, hi, dot


@numba.njit(cache=True, nogil=True)
def _column_terms(rows, steps, lo, hi, dot):  # pragma: no cover - compiled
    for i in range(rows.shape[0]):
        total = np.int64(0)
        for j in range(rows.shape[1]):
            v = rows[i, j]
            total += v * steps[j]
            if v < lo[j]:
                lo[j] = v
            elif v > hi[j]:
                hi[j] = v
        dot[i] = total


def piece_positions(pieces: Pieces) -> np.ndarray:
    """The positions (int64 ``[elements, ndim]``) of ``pieces`` (each ``(offsets,
    shape)`` per dimension) one after the other, each in row-major order: the order
    of :func:`~poplar_api.poplin.conv_blocks.pattern`."""
    grids: dict[tuple[int, ...], np.ndarray] = {}  # each shape's positions (made once)
    out = []
    shapes = [tuple(int(n) for n in shape) for _, shape in pieces]
    if len(shapes) > 1 and shapes.count(shapes[0]) == len(shapes):  # (one shape: common)
        key = shapes[0]
        grid = np.indices(key).reshape(len(key), -1).T
        starts = np.array([o for o, _ in pieces], np.int64).reshape(len(shapes), 1, -1)
        return (starts + grid[None]).reshape(-1, len(key)).astype(np.int64)
    for (offsets, _), key in zip(pieces, shapes, strict=True):
        grid = grids.get(key)
        if grid is None:
            grid = grids[key] = np.indices(key).reshape(len(key), -1).T
        out.append(grid + np.asarray(offsets))
    return np.concatenate(out).astype(np.int64) if out else np.zeros((0, 0), np.int64)


def separable_ids(ids: np.ndarray) -> SeparableIds | None:
    """``ids`` (a C-contiguous int array of at least one dimension) as
    :class:`SeparableIds`, or None when they are not such a sum (checked on every
    id, in one pass)."""
    if ids.ndim == 0 or ids.size == 0:
        return None
    first = int(ids.flat[0])
    tables = []
    for d in range(ids.ndim):
        sel = [0] * ids.ndim
        sel[d] = slice(None)
        tables.append(np.asarray(ids[tuple(sel)], np.int64) - first)
    tables[0] = tables[0] + first
    dims = np.array(ids.shape, np.int64)
    flat_tables = np.concatenate(tables)
    offsets = np.concatenate(([0], np.cumsum(dims)[:-1])).astype(np.int64)
    # read-only whatever the caller holds: one machine-code version of the pass
    flat = ids.reshape(-1).view()
    flat.flags.writeable = False
    if not _is_separable(flat, dims, flat_tables, offsets):
        return None
    return SeparableIds(tables)


@numba.njit(cache=True, nogil=True)
def _is_separable(flat, dims, tables, offsets):  # pragma: no cover - compiled
    """Whether ``flat`` (row-major, of shape ``dims``) holds the sum of the tables
    (dimension ``d``'s at ``tables[offsets[d]:]``) everywhere."""
    nd = dims.shape[0]
    last = tables[offsets[nd - 1] : offsets[nd - 1] + dims[nd - 1]]
    width = dims[nd - 1]
    idx = np.zeros(nd, np.int64)
    base = np.int64(0)  # the leading dimensions' terms
    for d in range(nd - 1):
        base += tables[offsets[d]]
    p = 0
    while p < flat.shape[0]:
        for c in range(width):
            if flat[p + c] != base + last[c]:
                return False
        p += width
        d = nd - 2  # the next row of the leading dimensions (an odometer)
        while d >= 0:
            base -= tables[offsets[d] + idx[d]]
            idx[d] += 1
            if idx[d] < dims[d]:
                base += tables[offsets[d] + idx[d]]
                break
            idx[d] = 0
            base += tables[offsets[d]]
            d -= 1
    return True
