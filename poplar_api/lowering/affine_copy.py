"""Copies by index whose two sides are strided layouts of one array of positions.

A ``Copy`` between tensors moves elements ``src`` of a memory image to elements
``dst`` (``image[dst] = image[src]``). Where both index arrays are affine functions of
one multi-dimensional position (``ids[i, j, ...] = base + i * s0 + j * s1 + ...``: a
transpose of a weight matrix, a strided slice of a block), the same copy is one
assignment between two strided views of the image, with no index arrays read and no
gathered temporary. Where the two views' spans overlap the source view is copied
first, so the result is that of the indexed copy (every source element read before any
is written): numpy's assignment does not do this for every overlap by itself (between
two one-dimensional views stepping the same way it leaves the overlap to its inner
loop, which is right only for equal steps). The destination's positions must be
distinct, which the strides prove; a copy that fits neither condition stays indexed.

The layout is found once, when the copy is lowered: each side is split greedily into
axes (an axis as long as the run of its first step), the two sides' axes are merged
into the finest common shape, and both index arrays are checked element by element
against the strided functions of that shape. Both are compiled passes without
temporaries: a split reads each run only up to its first other step, and the check
is one pass over each side's ids.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from itertools import pairwise

import numba
import numpy as np

__all__ = ["AffineCopy", "affine_copy", "copy_views"]

#: Copies of fewer elements stay indexed: making two views costs about what numpy's
#: indexed copy of a few thousand elements costs.
MIN_ELEMENTS = 1 << 12

#: Axes the compiled pass (:meth:`AffineCopy.copy_rows`) takes; a copy of more, after
#: merging, is copied by numpy.
PASS_AXES = 4


@dataclass(frozen=True)
class AffineCopy:
    """A copy ``image[dst] = image[src]`` as views: ``shape`` and, per side, the id of
    position 0 and the strides (in elements)."""

    shape: tuple[int, ...]
    src_base: int
    src_strides: tuple[int, ...]
    dst_base: int
    dst_strides: tuple[int, ...]

    def _view(self, image: np.ndarray, base: int, strides: tuple[int, ...]) -> np.ndarray:
        item = image.itemsize
        return np.ndarray(
            self.shape,
            image.dtype,
            buffer=image,
            offset=base * item,
            strides=tuple(s * item for s in strides),
        )

    def copy(self, image: np.ndarray) -> None:
        """Copy in ``image`` (one replica's contiguous memory image of one element
        size); where the two sides' spans overlap the source is read first."""
        self.copy_rows(image[None])

    def copy_rows(self, full: np.ndarray) -> None:
        """Copy in every row of ``full`` (``[replicas, size]``, C-contiguous: each row
        one replica's memory image of one element size), as :meth:`copy` in each row.

        Where the two sides' spans do not overlap and the copy has at most
        :data:`PASS_AXES` axes, one compiled pass (:func:`_copy_pass`) copies every
        row, its loops ordered by the strides of the side whose unit-stride axis is
        the longer: numpy's assignment orders them by the destination, so a
        transpose whose destination runs are short (the ``[128, 98, 8]`` copy of a
        matMul's activations, runs of 8) pays its inner loop's overhead every few
        elements while the source runs on. Otherwise each row's views are copied as
        :meth:`copy` would (the source read first where they overlap)."""
        plan = self._pass
        if plan is None or not full.flags.c_contiguous:  # (callers that copy often keep
            # each row's views instead: :attr:`compiled`)
            for row in full:
                copy_views(*self.views(row))
            return
        shape, s_strides, d_strides = plan
        rows, size = full.shape
        _copy_pass(full.reshape(-1), rows, size, shape, self.src_base, s_strides,
                   self.dst_base, d_strides)  # fmt: skip

    @property
    def compiled(self) -> bool:
        """Whether :meth:`copy_rows` copies by its compiled pass (for C-contiguous
        images), rather than through each row's views."""
        return self._pass is not None

    @cached_property
    def _pass(self) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(shape, source strides, destination strides)`` of :func:`_copy_pass`
        (:data:`PASS_AXES` axes, outermost first, padded with axes of one position),
        or None where the spans overlap or more axes are left after merging."""
        if _spans_overlap(self):
            return None
        axes = [(n, s, d) for n, s, d in zip(self.shape, self.src_strides, self.dst_strides,
                                             strict=True) if n > 1]  # fmt: skip
        s_run = max((n for n, s, _ in axes if abs(s) == 1), default=0)
        d_run = max((n for n, _, d in axes if abs(d) == 1), default=0)
        lead = 1 if s_run > d_run else 2  # (the side whose strides order the loops)
        axes.sort(key=lambda a: -abs(a[lead]))
        merged: list[tuple[int, int, int]] = []
        for n, s, d in axes:  # an axis stepping one outer step of the next is one axis
            if merged and merged[-1][1] == s * n and merged[-1][2] == d * n:
                merged[-1] = (merged[-1][0] * n, s, d)
            else:
                merged.append((n, s, d))
        if len(merged) > PASS_AXES:
            return None
        merged = [(1, 0, 0)] * (PASS_AXES - len(merged)) + merged
        return tuple(np.array(col, np.int64) for col in zip(*merged, strict=True))

    def views(self, image: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
        """The destination and source views in ``image`` and whether their spans
        overlap: what :meth:`copy` does, for a caller that keeps them (an image that is
        never reallocated) and copies with :func:`copy_views`."""
        dst = self._view(image, self.dst_base, self.dst_strides)
        src = self._view(image, self.src_base, self.src_strides)
        return dst, src, bool(np.may_share_memory(dst, src))  # (compares the spans only)


def copy_views(dst: np.ndarray, src: np.ndarray, overlap: bool) -> None:
    """``dst[...] = src``, the source read first where the spans overlap."""
    dst[...] = src.copy() if overlap else src


def _spans_overlap(copy: AffineCopy) -> bool:
    """Whether the ids the two sides reach, from least to greatest, overlap (what
    ``np.may_share_memory`` compares for the two views)."""

    def span(base: int, strides: tuple[int, ...]) -> tuple[int, int]:
        reach = [(n - 1) * s for n, s in zip(copy.shape, strides, strict=True)]
        return base + sum(min(r, 0) for r in reach), base + sum(max(r, 0) for r in reach)

    s_lo, s_hi = span(copy.src_base, copy.src_strides)
    d_lo, d_hi = span(copy.dst_base, copy.dst_strides)
    return s_lo <= d_hi and d_lo <= s_hi


@numba.njit(cache=True, nogil=True, boundscheck=False)
def _copy_pass(flat, rows, size, shape, s_base, s_st, d_base, d_st):  # pragma: no cover - compiled
    # flat[d] = flat[s] for every position of the 4-axis shape in every row of size
    # ``size``; the innermost axis indexed unsigned, which spares each access numba's
    # negative-index wraparound and lets LLVM vectorize the loop (a negative stride
    # wraps to the same id in unsigned arithmetic)
    u = np.uint64
    ds, ss = u(d_st[3]), u(s_st[3])
    for r in range(rows):
        s_row, d_row = r * size + s_base, r * size + d_base
        for i0 in range(shape[0]):
            for i1 in range(shape[1]):
                for i2 in range(shape[2]):
                    s = s_row + i0 * s_st[0] + i1 * s_st[1] + i2 * s_st[2]
                    d = d_row + i0 * d_st[0] + i1 * d_st[1] + i2 * d_st[2]
                    s_at, d_at = u(s), u(d)
                    for i3 in range(shape[3]):
                        k = u(i3)
                        flat[d_at + k * ds] = flat[s_at + k * ss]


def _ids(where: np.ndarray | slice) -> np.ndarray:
    """The ids of a side (a slice of consecutive ids, or an index array) as int64, a
    read-only view however the caller holds them: Numba types a writable array apart
    from a read-only one, and index arrays come both ways, so :func:`_split` and
    :func:`_on_grid` were compiled twice each."""
    if isinstance(where, slice):
        ids = np.arange(where.start, where.stop, where.step or 1, dtype=np.int64)
    else:
        ids = np.ascontiguousarray(where, dtype=np.int64).reshape(-1).view()
    ids.flags.writeable = False
    return ids


def _axes(ids: np.ndarray) -> list[int] | None:
    """Lengths, innermost first, of the axes of a greedy affine split of ``ids``: the
    innermost axis is the run of ``ids``' first step, the next the run of the step
    between those runs' first ids, and so on (None when a run does not divide the
    rest). The split is a guess that :func:`_strides` checks. Each run is read only
    up to its first other step (:func:`_split`)."""
    out = np.empty(64, np.int64)  # an axis has two positions at least: 63 at most
    k = _split(ids, out)
    return None if k < 0 else out[:k].tolist()


@numba.njit(cache=True, nogil=True)
def _split(ids, out):  # pragma: no cover - compiled
    # _axes into out: the axes' count, or -1 when a run does not divide the rest; the
    # ids of one level are every ``every``-th of the level below (the runs' first ids)
    k = 0
    every = 1
    size = ids.size
    while size > 1:
        first = ids[every] - ids[0]
        n = size
        for j in range(1, size - 1):
            if ids[(j + 1) * every] - ids[j * every] != first:
                n = j + 1
                break
        if size % n:
            return -1
        out[k] = n
        k += 1
        every *= n
        size //= n
    return k


def _common(a: list[int], b: list[int]) -> tuple[int, ...] | None:
    """The finest shape (outermost first) that both splits ``a`` and ``b`` (innermost
    first, of one total size) refine to, or None when their axes cross."""
    bounds = sorted(set(np.cumprod(a).tolist()) | set(np.cumprod(b).tolist()))
    lengths = [bounds[0]]
    for lo, hi in pairwise(bounds):
        if hi % lo:
            return None
        lengths.append(hi // lo)
    return tuple(reversed(lengths))


def _strides(ids: np.ndarray, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides ``s`` with ``ids == ids[0] + sum(position * s)`` over ``shape``, else
    None (every id checked in one compiled pass, :func:`_on_grid`)."""
    origin = int(ids[0])
    strides = []
    inner = int(np.prod(shape))
    for n in shape:  # the position one step along each axis, in C order
        inner //= n
        strides.append(int(ids[inner]) - origin if n > 1 else 0)
    steps = np.array(strides, np.int64)
    return tuple(strides) if _on_grid(ids, np.array(shape, np.int64), steps) else None


@numba.njit(cache=True, nogil=True)
def _on_grid(ids, shape, strides):  # pragma: no cover - compiled
    # whether ids (C order over shape) are ids[0] + sum(position * strides): the
    # expected id is carried along as the position steps like an odometer
    at = np.zeros(shape.size, np.int64)
    expected = ids[0]
    for p in range(ids.size):
        if ids[p] != expected:
            return False
        axis = shape.size - 1
        while axis >= 0:
            at[axis] += 1
            expected += strides[axis]
            if at[axis] < shape[axis]:
                break
            expected -= strides[axis] * shape[axis]
            at[axis] = 0
            axis -= 1
    return True


def _distinct(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """Whether a strided layout names every position's element once: with the axes
    ordered by the size of their steps, each step passes everything the smaller axes
    reach (a sufficient condition)."""
    reach = 0
    for step, n in sorted((abs(s), n) for s, n in zip(strides, shape, strict=True) if n > 1):
        if step <= reach:
            return False
        reach += step * (n - 1)
    return True


def affine_copy(src: np.ndarray | slice, dst: np.ndarray | slice) -> AffineCopy | None:
    """The copy ``image[dst] = image[src]`` (index arrays or slices of one length, one
    replica's element ids) as two strided views, or None when it is short (under
    :data:`MIN_ELEMENTS`), a side is no strided layout of a common shape, or the
    destination may name an element twice."""
    if isinstance(src, slice) and isinstance(dst, slice):
        return None  # (two blocks: numpy copies them directly)
    index = src if not isinstance(src, slice) else dst
    if np.asarray(index).size < MIN_ELEMENTS:
        return None
    s, d = _ids(src), _ids(dst)
    if s.size != d.size:
        return None
    a, b = _axes(s), _axes(d)
    if a is None or b is None:
        return None
    shape = _common(a, b)
    if shape is None:
        return None
    s_st, d_st = _strides(s, shape), _strides(d, shape)
    if s_st is None or d_st is None or not _distinct(shape, d_st):
        return None
    return AffineCopy(shape, int(s[0]), s_st, int(d[0]), d_st)
