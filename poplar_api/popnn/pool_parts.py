"""The partitions of a pooling pass as columns, and what is worked out for all of them
at once: the positions of their boxes in a layout and the tile each is mapped to.

A pass has one partition per (batch range, channel-group range, output field range)
(:mod:`poplar_api.popnn.pool_plan`); a pass over a 28x28 field of 32 images has over
a thousand. Partitions of one shape (channel groups, batch size, box shape) differ only
in where their box starts, so their element positions are one pattern plus an origin
each, gathered in one array operation per shape; the tile choice of Poplibs'
``getTileToMap`` (``lib/popnn/Pooling.cpp`` at graphcore/poplibs ``7eac0f26``) is one
compiled pass over those positions' tiles.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from poplar_api.lowering.runs import read_only

__all__ = [
    "Parts",
    "box_positions",
    "box_values",
    "choose_tiles",
    "internal_layout",
    "put_in_order",
    "spans",
]


@dataclass
class Parts:
    """Partitions of a pass, partition ``k`` being batch range ``[b0[k], b1[k])``,
    channel groups ``[g0[k], g1[k])`` and the field geometry ``geos[geo[k]]`` (a
    ``pool_plan._Geometry``), in Poplibs' order (batch, channel groups, field)."""

    b0: np.ndarray
    b1: np.ndarray
    g0: np.ndarray
    g1: np.ndarray
    geo: np.ndarray
    geos: list[Any]

    def __len__(self) -> int:
        return int(self.b0.size)

    def take(self, which: np.ndarray) -> Parts:
        """The partitions at positions ``which`` (in that order)."""
        return Parts(self.b0[which], self.b1[which], self.g0[which], self.g1[which],
                     self.geo[which], self.geos)  # fmt: skip

    def geometries(self) -> list[Any]:
        """The geometry of every partition, in order."""
        geos = self.geos
        return [geos[i] for i in self.geo.tolist()]

    def flags(self, attr: str) -> np.ndarray:
        """The boolean attribute ``attr`` of every partition's geometry."""
        per_geo = np.fromiter((bool(getattr(g, attr)) for g in self.geos), bool, len(self.geos))
        return per_geo[self.geo]


def in_memory(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """``(memory, strides, first)``: a flat array holding ``a``'s elements, ``a``'s
    strides in elements of it and where ``a``'s first element is, so that
    ``a[i] == memory[first + i @ strides]``: the array ``a`` views when ``a`` is a view
    (a transposed or regrouped array: nothing copied), else ``a`` made contiguous."""
    owner = a.base
    if (
        isinstance(owner, np.ndarray) and owner.dtype == a.dtype and owner.flags.c_contiguous
        and all(s % a.itemsize == 0 for s in a.strides)
    ):  # fmt: skip
        skip = a.__array_interface__["data"][0] - owner.__array_interface__["data"][0]
        if skip % a.itemsize == 0:
            steps = np.array(a.strides, np.int64) // a.itemsize
            return owner.reshape(-1), steps, skip // a.itemsize
    c = np.ascontiguousarray(a)
    return c.reshape(-1), np.array(c.strides, np.int64) // max(c.itemsize, 1), 0


def box_positions(
    strides: np.ndarray, origins: np.ndarray, shapes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The flat positions of boxes in a C-ordered layout of element ``strides``: box
    ``k`` holds the positions ``origins[k] + sum_d i_d * strides[d]`` for every index
    ``i`` of a box of shape ``shapes[k]`` (row-major), the boxes concatenated in order;
    and each box's size.

    Boxes of one shape share their pattern, made once; the boxes are written in one
    compiled pass (no array of every position's destination is made)."""
    return box_values(None, strides, origins, shapes)


def box_values(
    values: np.ndarray | None, strides: np.ndarray, origins: np.ndarray, shapes: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``values[box_positions(strides, origins, shapes)[0]]`` and each box's size, the
    values read as the boxes are placed (no array of the positions made first);
    ``values`` None: the positions themselves (:func:`box_positions`). ``values`` is a
    1-D int64 array holding every position of the boxes."""
    n = origins.size
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    try:  # one integer per shape: a unique of rows is much slower
        codes = np.ravel_multi_index(shapes.T, shapes.max(0) + 1)
        _, first, group = np.unique(codes, return_index=True, return_inverse=True)
        kinds = shapes[first]
    except ValueError:  # (shapes too large to number)
        kinds, group = np.unique(shapes, axis=0, return_inverse=True)
    group = group.reshape(-1)
    rel = []
    steps = np.asarray(strides, np.int64).tolist()
    for shape in kinds.tolist():  # sum_d i_d * strides[d], row-major, a dimension a pass
        pattern = np.zeros(1, np.int64)
        for extent, step in zip(shape, steps, strict=True):
            pattern = (pattern[:, None] + np.arange(extent, dtype=np.int64) * step).reshape(-1)
        rel.append(pattern)
    kind_sizes = np.array([r.size for r in rel], np.int64)
    pattern_at = np.zeros(kind_sizes.size + 1, np.int64)
    np.cumsum(kind_sizes, out=pattern_at[1:])
    patterns = np.concatenate(rel).astype(np.int64, copy=False)
    sizes = kind_sizes[group]
    out = np.empty(int(sizes.sum()), np.int64)
    origins, group = np.asarray(origins, np.int64), group.astype(np.int64, copy=False)
    if values is None:
        _place_boxes(out, origins, group, patterns, pattern_at)
    else:
        _read_boxes(out, _readonly(values), origins, group, patterns, pattern_at)
    return out, sizes


# The kernels index with unsigned integers (every index here is >= 0): Numba adds a
# test for a negative index (counted from the end) to every access by a signed one,
# which costs these loops about as much as their work.
_ONE = np.uint64(1)


@numba.njit(cache=True, nogil=True)
def _place_boxes(out, origins, group, patterns, pattern_at):  # pragma: no cover - compiled
    """Box after box: ``origins[k]`` plus the pattern of its shape ``group[k]``."""
    at = np.uint64(0)
    for k in range(group.size):
        g = np.uint64(group[k])
        o = origins[k]
        for j in range(np.uint64(pattern_at[g]), np.uint64(pattern_at[g + _ONE])):
            out[at] = o + patterns[j]
            at += _ONE


@numba.njit(cache=True, nogil=True)
def _read_boxes(out, values, origins, group, patterns, pattern_at):  # pragma: no cover
    """:func:`_place_boxes`, each position's value read from ``values`` (compiled)."""
    at = np.uint64(0)
    for k in range(group.size):
        g = np.uint64(group[k])
        o = origins[k]
        for j in range(np.uint64(pattern_at[g]), np.uint64(pattern_at[g + _ONE])):
            out[at] = values[np.uint64(o + patterns[j])]
            at += _ONE


def _readonly(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous read-only int64 array (one compiled form of the kernels)."""
    return read_only(a, np.int64)


@numba.njit(cache=True, nogil=True)
def _put(out, pos, values):  # pragma: no cover - compiled
    for k in range(np.uint64(pos.size)):
        out[np.uint64(pos[k])] = values[k]


def put_in_order(out: np.ndarray, pos: np.ndarray, values: np.ndarray) -> None:
    """``out[pos[k]] = values[k]`` for ``k`` in order, so that of positions given more
    than once the last one's value stays (numpy's ``out[pos] = values`` does not
    promise which). ``pos`` must lie within ``out``."""
    _put(out, np.ascontiguousarray(pos, np.int64), np.ascontiguousarray(values, out.dtype))


@numba.njit(cache=True, nogil=True)
def _count(tiles, counts):  # pragma: no cover - compiled
    """``counts[t] += 1`` for each of ``tiles``; False (counts unfinished) at the first
    tile outside ``[0, counts.size)``."""
    n = np.uint64(counts.size)
    for k in range(np.uint64(tiles.size)):
        t = np.uint64(tiles[k])  # (a negative tile wraps to a large one)
        if t >= n:
            return False
        counts[t] += 1
    return True


@numba.njit(cache=True, nogil=True)
def _greedy(tiles, sizes, rank, n):  # pragma: no cover - compiled
    # per box in order: the untaken tile holding most of its elements (ties: lowest
    # rank), else the first untaken rank; returns ranks
    count = np.zeros(n, np.int64)
    touched = np.empty(n, np.int64)
    taken = np.zeros(n, np.bool_)
    chosen = np.empty(sizes.size, np.int64)
    free = 0
    at = np.uint64(0)
    for k in range(sizes.size):
        nt = 0
        end = at + np.uint64(sizes[k])
        for j in range(at, end):
            t = np.uint64(tiles[j])
            if count[t] == 0:
                touched[nt] = t
                nt += 1
            count[t] += 1
        at = end
        best, best_count = -1, -1
        for i in range(nt):
            t = touched[i]
            r = rank[t]
            c = count[t]
            count[t] = 0
            if not taken[r] and (c > best_count or (c == best_count and r < best)):
                best, best_count = r, c
        if best < 0:
            while free < n and taken[free]:
                free += 1
            best = free if free < n else 0
        taken[best] = True
        chosen[k] = best
    return chosen


def choose_tiles(owner: np.ndarray, tiles: np.ndarray, sizes: np.ndarray, n: int) -> np.ndarray:
    """``getTileToMap`` for each box in turn: the tile holding most of its elements,
    each tile once, first in the order of fewest elements mapped (``owner``: the tile
    of every element of the tensor whose mapping decides) on ties; when every holder
    is taken, the first free tile in that order.

    ``tiles`` are the tiles of the boxes' elements, concatenated (``sizes`` each), all
    in ``[0, n)``."""
    counts = np.zeros(n, np.int64)
    if not _count(_readonly(owner.reshape(-1)), counts):  # (a tile outside [0, n))
        counts = np.bincount(owner.ravel(), minlength=n)
    map_order = np.argsort(counts, kind="stable")
    rank = np.empty(n, np.int64)
    rank[map_order] = np.arange(n)
    chosen = _greedy(np.ascontiguousarray(tiles, np.int64), np.ascontiguousarray(sizes, np.int64),
                     rank, n)  # fmt: skip
    return map_order[chosen]


def spans(begins: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The integers ``begins[k] .. begins[k] + lengths[k] - 1`` of each span in turn."""
    total = int(lengths.sum())
    firsts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) + np.repeat(begins - firsts, lengths)


def internal_layout(shape: list[int], fold_batch: bool) -> tuple[tuple[int, ...], list[int]]:
    """A tensor of ``shape`` ``[batch, channels, *field]`` in a pass's internal layout
    ``[channels, batch, *field]`` (with ``fold_batch``, ``[batch x channels, 1,
    *field]``: the batch folded into the channels): that layout's shape and its strides
    in the tensor's flat (row-major) positions, so that element ``i`` of the layout is
    flat position ``i @ strides``."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    if fold_batch:  # (b, c) is channel b x C + c: flat b x C x s_c + c x s_c
        return (shape[0] * shape[1], 1, *shape[2:]), [strides[1], 0, *strides[2:]]
    return (shape[1], shape[0], *shape[2:]), [strides[1], strides[0], *strides[2:]]
