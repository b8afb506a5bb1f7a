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
from itertools import pairwise

import numba
import numpy as np

__all__ = ["AffineCopy", "affine_copy", "copy_views"]

#: Copies of fewer elements stay indexed: making two views costs about what numpy's
#: indexed copy of a few thousand elements costs.
MIN_ELEMENTS = 1 << 12


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
        copy_views(*self.views(image))

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
    s_strides, d_strides = _strides(s, shape), _strides(d, shape)
    if s_strides is None or d_strides is None or not _distinct(shape, d_strides):
        return None
    return AffineCopy(shape, int(s[0]), s_strides, int(d[0]), d_strides)
