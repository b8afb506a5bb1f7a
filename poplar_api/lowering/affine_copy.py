"""Copies by index whose two sides are strided layouts of one array of positions.

A ``Copy`` between tensors moves elements ``src`` of a memory image to elements
``dst`` (``image[dst] = image[src]``). Where both index arrays are affine functions of
one multi-dimensional position (``ids[i, j, ...] = base + i * s0 + j * s1 + ...``: a
transpose of a weight matrix, a strided slice of a block), the same copy is one
assignment between two strided views of the image, with no index arrays read and no
gathered temporary: numpy's assignment copies through a temporary where the two views
overlap, so the result is that of the indexed copy (every source element read before
any is written). The destination's positions must be distinct, which the strides
prove; a copy that fits neither condition stays indexed.

The layout is found once, when the copy is lowered: each side is split greedily into
axes (an axis as long as the run of its first step), the two sides' axes are merged
into the finest common shape, and both index arrays are checked element by element
against the strided functions of that shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

import numpy as np

__all__ = ["AffineCopy", "affine_copy"]

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
        size); where the two sides overlap numpy reads the source first."""
        self._view(image, self.dst_base, self.dst_strides)[...] = self._view(
            image, self.src_base, self.src_strides
        )


def _ids(where: np.ndarray | slice) -> np.ndarray:
    """The ids of a side (a slice of consecutive ids, or an index array) as int64."""
    if isinstance(where, slice):
        return np.arange(where.start, where.stop, where.step or 1, dtype=np.int64)
    return np.asarray(where, dtype=np.int64).reshape(-1)


def _axes(ids: np.ndarray) -> list[int] | None:
    """Lengths, innermost first, of the axes of a greedy affine split of ``ids``: the
    innermost axis is the run of ``ids``' first step, the next the run of the step
    between those runs' first ids, and so on (None when a run does not divide the
    rest). The split is a guess that :func:`_strides` checks."""
    lengths = []
    cur = ids
    while cur.size > 1:
        steps = np.diff(cur)
        other = np.flatnonzero(steps != steps[0])
        n = int(other[0]) + 1 if other.size else cur.size
        if cur.size % n:
            return None
        lengths.append(n)
        cur = cur[::n]
    return lengths


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
    None."""
    grid = ids.reshape(shape)
    origin = int(ids[0])
    strides = []
    for axis, n in enumerate(shape):
        at = [0] * len(shape)
        at[axis] = 1
        strides.append(int(grid[tuple(at)]) - origin if n > 1 else 0)
    expect = np.full(shape, origin, np.int64)
    for axis, (n, step) in enumerate(zip(shape, strides, strict=True)):
        dims = [1] * len(shape)
        dims[axis] = n
        expect += (np.arange(n, dtype=np.int64) * step).reshape(dims)
    return tuple(strides) if np.array_equal(expect, grid) else None


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
