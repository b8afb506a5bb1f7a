"""Fields read and written where their elements lie, in every replica's memory image.

A batch kernel (``computeBatch``) normally receives its fields packed: the runner
gathers each vertex's elements into one array per field, replica after replica when
the replicas run as one batch. A vertex type that sets ``readsImages = True`` receives
:class:`ImageField` objects instead: the replicas' memory images (``[replicas, size]``
raw bits, :attr:`poplar_api.lowering.context.Storage.full`) and the element id of every
position of replica 0's packed layout. The ids are the same in every replica (a
replicated graph is lowered once), so a kernel computes an index or a strided view once
and reads every replica through it, and operands that many vertices share (the weights
of a convolution, read by every tile's partial sums) are not copied once per reader.

Values are those of the packed fields: an element is read as its type and converted to
the kernel dtype as the runner converts it, and a result is converted to the field's
type and stored as the runner stores it (for outputs whose elements are distinct, the
only ones a compute set may write; see ``validate.check_conflicts``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from poplar_api.fields import FieldBatch
from poplar_api.lowering.runs import read_only, rows_apart
from poplar_api.lowering.runs import take_rows as _take_rows

__all__ = ["ImageAccess", "ImageField", "tiled_offsets"]

#: Views a field keeps (of its accesses, read-only or writeable), at most.
VIEWS_KEPT = 1 << 8


@dataclass(frozen=True)
class ImageAccess:
    """How a block of a field's elements is reached in every replica's image: a strided
    view (``strides`` in elements, from element ``base`` of replica 0) when the ids are
    an affine function of the block's indices, else the ids (``index``) to gather."""

    shape: tuple[int, ...]
    base: int = 0
    strides: tuple[int, ...] | None = None
    index: np.ndarray | None = None


@dataclass(frozen=True)
class ImageField:
    """One field of a vertex type over every replica, where its elements lie.

    Attributes
    ----------
    image
        ``[replicas, size]`` raw bits of the field's element size (rows of
        ``Storage.full``; a single replica's row when the runner runs replica by
        replica).
    dtype
        The numpy dtype of the field's element type (the bits are read as it).
    ids
        Element id of every position of the field's packed layout (replica 0's, the
        same in every replica).
    offsets, inner_offsets
        The packed layout, as :class:`~poplar_api.fields.FieldBatch` has it, for the
        vertices of one replica.
    kernel_dtype
        The dtype the kernel computes in (HALF fields are float32).
    constants
        The images' record of constants that nothing writes
        (:class:`~poplar_api.replica_constants.ConstantsAlike`), or None: where every
        element of the field is such, :meth:`first_replica` is found once.
    declared
        The images' record of what the effect applied before this one stored alike in
        every replica (:class:`~poplar_api.replica_equal.DeclaredAlike`), or None.
    alike
        The images' record of the blocks every replica holds alike, from effect to
        effect (:class:`~poplar_api.replica_alike.AlikeRecord`), or None.
    """

    image: np.ndarray
    dtype: np.dtype
    ids: np.ndarray
    offsets: np.ndarray
    inner_offsets: np.ndarray | None
    kernel_dtype: np.dtype
    constants: Any = None
    declared: Any = None
    alike: Any = None

    def __post_init__(self) -> None:
        # the ids reach compiled passes (the replicas' gathers, ReduceAdd's sums)
        # read-only and contiguous however they were made: one signature of each
        object.__setattr__(self, "ids", read_only(self.ids))

    @property
    def replicas(self) -> int:
        """Replicas the image holds."""
        return int(self.image.shape[0])

    @property
    def data(self) -> np.ndarray:
        """The raw image (so that code handling packed fields can pass it along)."""
        return self.image

    def _typed(self, raw: np.ndarray) -> np.ndarray:
        return raw.view(self.dtype).astype(self.kernel_dtype, copy=False)

    def first_replica(self) -> FieldBatch | None:
        """Replica 0's elements packed in the kernel dtype, when every replica holds
        the same bits in this field (else None). Where the field lies in constants that
        nothing writes (:attr:`constants`) it is found once and the same batch returned
        on every call (its values cannot change); a caller does not write it."""
        kept = self.__dict__.get("_kept")
        if kept is None:  # (frozen: the cache is set through object.__setattr__)
            alike = self.constants is not None and self.constants.never_written(
                self.image.dtype.itemsize, self.ids
            )
            kept = (alike, self._replica_zero() if alike else None)
            object.__setattr__(self, "_kept", kept)
        return kept[1] if kept[0] else self._first_replica()

    def _replica_zero(self) -> FieldBatch:
        """Replica 0's elements packed in the kernel dtype (not compared with the other
        replicas': for a field every replica holds alike)."""
        return FieldBatch(self._typed(self.image[0, self.ids]), self.offsets, self.inner_offsets)

    def _first_replica(self) -> FieldBatch | None:
        """:meth:`first_replica` found by reading every replica."""
        raw = self.image[0, self.ids]  # (numpy's gathers: no compiled signature per type)
        if (
            self.replicas > 1
            and not self._same_span()
            and not (
                all(np.array_equal(row[self.ids], raw) for row in self.image[1:])
                if rows_apart(self.ids)
                else (self.image[1:, self.ids] == raw).all()
            )
        ):
            return None
        return FieldBatch(self._typed(raw), self.offsets, self.inner_offsets)

    def _same_span(self) -> bool:
        """Whether every replica holds replica 0's bits throughout the span of the ids
        (then it does at each id), compared as one block where the span is not much
        wider than the ids: a field's elements usually lie together (worklists, params),
        and a block compares at the speed of memory where a gather per replica does not.
        False says nothing (an element between the ids may differ)."""
        ids = self.ids
        if not ids.size:
            return True
        lo, hi = int(ids.min()), int(ids.max()) + 1
        if hi - lo > 2 * ids.size:
            return False
        block = self.image[:, lo:hi]
        return bool((block[1:] == block[0]).all())

    def packed(self) -> FieldBatch:
        """Every replica's elements packed replica after replica (a copy), as the runner
        packs a field for a batch of every replica's vertices."""
        r, n = self.replicas, self.ids.size
        raw = np.empty((r, n), self.image.dtype)
        _take_rows(self.image, read_only(self.ids), raw)
        data = self._typed(raw.reshape(-1))
        outer = tiled_offsets(self.offsets, r)
        inner = None if self.inner_offsets is None else tiled_offsets(self.inner_offsets, r)
        return FieldBatch(data, outer, inner)

    def store_packed(self, batch: FieldBatch) -> None:
        """Store a batch made by :meth:`packed` (after a kernel wrote it) back."""
        values = _raw(batch.data, self.dtype, self.image.dtype)
        self.image[:, self.ids] = values.reshape(self.replicas, -1)

    def access(self, starts: np.ndarray, size: int) -> ImageAccess:
        """How to reach, in every replica, the ``size`` elements from each packed
        position of ``starts`` (any shape): ``read`` gives ``[replicas, *starts.shape,
        size]``, a view when the ids are an affine function of the indices with
        consecutive elements in each block. Worth keeping: it looks at every id once."""
        shape = (*starts.shape, size)
        ids = self.ids[starts.reshape(-1)[:, None] + np.arange(size)].reshape(shape)
        strides = _affine_strides(ids)
        if strides is not None and size == 1:  # (any stride: the packed one)
            strides = (*strides[:-1], 1)
        if strides is None or strides[-1] != 1:
            # a view only where each block's elements follow one another, as packed:
            # a kernel's products then see the strides they see on packed fields
            return ImageAccess(shape, index=read_only(ids.reshape(-1)))
        return ImageAccess(shape, int(ids.reshape(-1)[0]) if ids.size else 0, strides)

    def piece_accesses(self, starts: np.ndarray, size: int, cuts: list[int]) -> list:
        """:meth:`access` of each piece ``starts[cuts[k]:cuts[k + 1]]`` of a ``[members,
        count]`` array of packed positions, found for all pieces in a few array passes
        (a piece is a view when its ids follow the affine function its first ids give)."""
        m, count = starts.shape
        # every block's elements consecutive (no break in the ids between its first and
        # last position: counted once over the positions the blocks span, not looked at
        # block by block), and its first id the piece's function
        fits = _consecutive(self.ids, starts, size).all(axis=1)
        first = self.ids[starts].astype(np.int64)
        lo, hi = np.asarray(cuts[:-1], np.int64), np.asarray(cuts[1:], np.int64)
        piece = np.repeat(np.arange(lo.size), hi - lo)
        base = first[lo, 0]
        member = np.where(hi - lo > 1, first[np.minimum(lo + 1, m - 1), 0] - base, 0)
        block = first[lo, 1] - base if count > 1 else np.zeros(lo.size, np.int64)
        at = np.arange(m, dtype=np.int64) - lo[piece]
        guess = base[piece][:, None] + (at * member[piece])[:, None]
        guess = guess + np.arange(count)[None, :] * block[piece][:, None]
        fits &= (guess == first).all(axis=1)
        fits = np.logical_and.reduceat(fits, lo)
        found = []
        for k in range(lo.size):
            shape = (int(hi[k] - lo[k]), count, size)
            if fits[k]:
                steps = (int(member[k]), int(block[k]), 1)
                found.append(ImageAccess(shape, int(base[k]), steps))
            else:
                index = self.ids[starts[lo[k] : hi[k], :, None] + np.arange(size)].reshape(-1)
                found.append(ImageAccess(shape, index=read_only(index)))
        return found

    def _view(self, acc: ImageAccess, writeable: bool, first: bool = False) -> np.ndarray:
        """The view of ``acc`` in every replica (with ``first``, replica 0's for every
        replica: a stride of 0 on the replicas), made once per access and kind: the
        images are never reallocated, and a kernel reads the same accesses (kept with
        its plan) on every run, where making a view costs some microseconds of Python."""
        views = self.__dict__.get("_views")
        if views is None:  # (frozen: the cache is set through object.__setattr__)
            views = {}
            object.__setattr__(self, "_views", views)
        hit = views.get((id(acc), writeable, first))
        if hit is not None and hit[0] is acc:
            return hit[1]
        view = self._new_view(acc, writeable, first)
        if len(views) >= VIEWS_KEPT:  # (accesses of plans not kept are new each run)
            views.clear()
        views[id(acc), writeable, first] = (acc, view)
        return view

    def _new_view(self, acc: ImageAccess, writeable: bool, first: bool = False) -> np.ndarray:
        typed = self.image.view(self.dtype)
        item = typed.itemsize
        assert acc.strides is not None
        shape = (self.replicas, *acc.shape)
        strides = (0 if first else typed.strides[0], *(s * item for s in acc.strides))
        if not typed.flags.c_contiguous:  # (rows of a wider array, say)
            return np.lib.stride_tricks.as_strided(
                typed[0, acc.base :], shape=shape, strides=strides, writeable=writeable
            )
        # made directly on the image's buffer: a fraction of as_strided's Python, which
        # a kernel pays per class and operand on every run
        view = np.ndarray(shape, typed.dtype, buffer=typed, offset=acc.base * item, strides=strides)
        if not writeable:
            view.flags.writeable = False
        return view

    def read(self, acc: ImageAccess) -> np.ndarray:
        """The elements of ``acc`` in every replica, in the kernel dtype (a read-only
        view where the dtypes agree and the ids are affine, else a copy)."""
        if acc.strides is not None:  # (the kept view itself where no conversion)
            view = self._view(acc, False)
            return view if view.dtype == self.kernel_dtype else view.astype(self.kernel_dtype)
        assert acc.index is not None
        raw = np.empty((self.replicas, acc.index.size), self.image.dtype)
        _take_rows(self.image, acc.index, raw)
        return self._typed(raw).reshape(self.replicas, *acc.shape)

    def held_alike(self) -> bool:
        """Whether every replica holds the same bits at every element of the field, as
        the images' record (:attr:`alike`) knows without reading them, for the effect
        being applied, which does not write them: then :meth:`read_first` gives the
        values :meth:`read` gives. False with one replica or no record."""
        return (
            self.alike is not None
            and self.replicas > 1
            and self.alike.holds(self.image.dtype.itemsize, self.ids)
        )

    def read_first(self, acc: ImageAccess) -> np.ndarray:
        """:meth:`read` of a field every replica holds alike (:meth:`held_alike`): replica
        0's elements of ``acc`` seen as every replica's (``[replicas, *acc.shape]``, read
        only, a stride of 0 on the replicas), so that a kernel reads one copy of them,
        not one per replica."""
        shape = (self.replicas, *acc.shape)
        if acc.strides is not None:
            view = self._view(acc, False, first=True)
            if view.dtype == self.kernel_dtype:
                return view
            return np.broadcast_to(view[:1].astype(self.kernel_dtype), shape)
        assert acc.index is not None
        raw = np.empty((1, acc.index.size), self.image.dtype)
        _take_rows(self.image[:1], acc.index, raw)
        return np.broadcast_to(self._typed(raw).reshape(1, *acc.shape), shape)

    def store_view(self, acc: ImageAccess, distinct: bool) -> np.ndarray | None:
        """A writeable view of the elements of ``acc`` in every replica
        (``[replicas, *acc.shape]``, the field's dtype), where :meth:`write` stores
        through one (``acc`` affine, no element twice); else None. A kernel can store
        its results into it instead of handing them to :meth:`write`."""
        if acc.strides is None or not distinct:
            return None
        return self._view(acc, True)

    def write(self, acc: ImageAccess, values: np.ndarray, distinct: bool) -> None:
        """Store ``values`` (``[replicas, *acc.shape]``) into the elements of ``acc``,
        converted to the field's type. ``distinct``: no element appears twice in
        ``acc`` (then a view is written; else the positions are stored in order)."""
        if acc.strides is not None and distinct:
            if isinstance(values, np.ndarray) and values.dtype == self.dtype:  # no conversion:
                # nothing can overflow (and numpy checks no error flags)
                self._view(acc, True)[...] = values
                return
            with np.errstate(over="ignore"):  # HALF overflows to inf, as stored
                self._view(acc, True)[...] = values
            return
        index = acc.index
        if index is None:  # affine, but an element appears twice: the ids in order
            index = read_only(_ids_of(acc).astype(self.ids.dtype))
        raw = _raw(values, self.dtype, self.image.dtype)
        self.image[:, index] = raw.reshape(self.replicas, -1)


def _consecutive(ids: np.ndarray, starts: np.ndarray, size: int) -> np.ndarray:
    """Whether the ``size`` ids from each packed position of ``starts`` are consecutive
    (each one more than the one before), for every position: the breaks between
    neighbouring ids counted once over the span the blocks cover, a block consecutive
    where no break falls inside it (a few array passes over the span, where a look at
    every block's ids gathers and compares each of them)."""
    if size <= 1 or not starts.size:
        return np.ones(starts.shape, bool)
    lo = int(starts.min())
    span = ids[lo : int(starts.max()) + size]
    # (ids are under 2**31 when int32, so the differences of int32 ids fit int32)
    breaks = np.flatnonzero(np.diff(span) != 1)  # between positions k and k + 1
    at = starts - lo
    return np.searchsorted(breaks, at + (size - 1)) == np.searchsorted(breaks, at)


def _ids_of(acc: ImageAccess) -> np.ndarray:
    """The ids of an affine access, in order."""
    assert acc.strides is not None
    ids = np.full(acc.shape, acc.base, np.int64)
    for axis, (n, s) in enumerate(zip(acc.shape, acc.strides, strict=True)):
        shape = [1] * len(acc.shape)
        shape[axis] = n
        ids += (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return ids.reshape(-1)


def _affine_strides(ids: np.ndarray) -> tuple[int, ...] | None:
    """Strides ``s`` with ``ids[i] == ids[0] + sum(i * s)`` for every index ``i``, or
    None when the ids are no such function of their indices."""
    if ids.size == 0:
        return None
    origin = int(ids[(0,) * ids.ndim])
    strides = []
    for axis, n in enumerate(ids.shape):
        at = [0] * ids.ndim
        at[axis] = 1
        strides.append(int(ids[tuple(at)]) - origin if n > 1 else 0)
    last = tuple(n - 1 for n in ids.shape)  # most ids that are not affine fail here
    if int(ids[last]) != origin + sum(i * s for i, s in zip(last, strides, strict=True)):
        return None
    expect = np.full(ids.shape, origin, np.int64)
    for axis, (n, step) in enumerate(zip(ids.shape, strides, strict=True)):
        shape = [1] * ids.ndim
        shape[axis] = n
        expect += (np.arange(n, dtype=np.int64) * step).reshape(shape)
    if not np.array_equal(expect, ids):
        return None
    return tuple(strides)


def _raw(values: np.ndarray, dtype: np.dtype, raw: np.dtype) -> np.ndarray:
    """``values`` converted to ``dtype`` (rounding, overflowing to inf), as raw bits."""
    with np.errstate(over="ignore"):
        typed = np.ascontiguousarray(np.asarray(values).astype(dtype, copy=False))
    return typed.view(raw)


def tiled_offsets(offsets: np.ndarray, replicas: int) -> np.ndarray:
    """``offsets`` (``n + 1`` bounds) of ``replicas`` copies of a layout, each copy
    ``offsets[-1]`` further (a packed field of every replica, replica after replica)."""
    step, n = int(offsets[-1]), offsets.size - 1
    out = np.empty(n * replicas + 1, np.int64)  # (written in place: no temporary copy)
    body = out[:-1].reshape(replicas, n)
    body[...] = offsets[:-1]
    body += (np.arange(replicas, dtype=np.int64) * step)[:, None]
    out[-1] = step * replicas
    return out
