"""How a class of convolution partial vertices (:mod:`poplar_api.poplin.conv_vertices`)
reaches its vectors.

Packed fields (a batch the runner gathered, replica after replica when the replicas run
together): a class's vectors are a view of the batch where they lie one after another,
else copied block by block (:func:`_gather`, :func:`_scatter`). Fields in every
replica's image (:class:`~poplar_api.field_images.ImageField`): per class, one view or
one index for all replicas, the class cut into pieces whose vectors lie evenly spaced
when that saves copying enough elements (:func:`_accesses`, :func:`_pieces`).
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from poplar_api.codelet_base import RUN_REPLICAS
from poplar_api.field_images import ImageAccess, ImageField
from poplar_api.fields import FieldBatch

__all__: list[str] = []


def _segment_rows(batch: FieldBatch, members: np.ndarray, count: int) -> np.ndarray:
    """``[len(members), count]`` indices into ``batch.inner_offsets`` of the inner
    vectors of ``members`` (each has ``count``)."""
    return batch.offsets[members][:, None] + np.arange(count, dtype=np.int64)


@numba.njit(cache=True, nogil=True)
def _copy_blocks(data, starts, size, out):  # pragma: no cover - compiled
    """``out[i] = data[starts[i]:starts[i] + size]`` for every block ``i``."""
    for i in range(starts.size):
        at = starts[i]
        for j in range(size):  # (an element loop: a slice per block costs more)
            out[i, j] = data[at + j]


@numba.njit(cache=True, nogil=True)
def _store_blocks(values, starts, size, data):  # pragma: no cover - compiled
    """``data[starts[i]:starts[i] + size] = values[i]`` for every block ``i``."""
    for i in range(starts.size):
        at = starts[i]
        for j in range(size):
            data[at + j] = values[i, j]


def _gather(batch: FieldBatch, members: np.ndarray, count: int, size: int) -> np.ndarray:
    """``[*lead, count, size]`` float32: the inner vectors (all of ``size`` elements) of
    ``members``, where ``lead`` is ``(replicas, len(members) // replicas)`` when the batch
    is replicas (``RUN_REPLICAS``, members listed replica after replica) and
    ``(len(members),)`` otherwise.

    Where the vectors lie one after another in the batch (for the members of one
    replica, each replica's at the same distance from the previous one's), the result
    is a view of the batch's data: no copy.
    """
    g = members.size
    replicas = RUN_REPLICAS.get()
    lead = (replicas, g // replicas) if replicas > 1 and g % replicas == 0 else (g,)
    starts = batch.inner_offsets[_segment_rows(batch, members, count)].reshape(lead[0], -1)
    if batch.data.dtype == np.float32:
        view = _block_view(batch.data, starts, size)
        if view is not None:
            return view.reshape(*lead, count, size)
        out = np.empty((starts.size, size), np.float32)
        _copy_blocks(batch.data, starts.reshape(-1).astype(np.int64, copy=False), size, out)
        return out.reshape(*lead, count, size)
    flat = starts.reshape(-1)
    return (
        batch.data[flat[:, None] + np.arange(size)]
        .astype(np.float32, copy=False)
        .reshape(*lead, count, size)
    )


def _block_view(
    data: np.ndarray, starts: np.ndarray, size: int, writeable: bool = False
) -> np.ndarray | None:
    """``data`` seen as ``[len(starts), starts.shape[1] * size]``, row ``r`` beginning at
    ``starts[r, 0]``, when each row's blocks follow one another and the rows are evenly
    spaced and do not overlap (a view, not a copy); else None."""
    rows, per_row = starts.shape
    first = starts[:, 0]
    if per_row == 0 or not (starts == first[:, None] + np.arange(per_row) * size).all():
        return None
    step = int(first[1] - first[0]) if rows > 1 else 0
    if rows > 1 and (step < 0 or not (np.diff(first) == step).all()):
        return None
    if writeable and rows > 1 and step < per_row * size:  # rows that overlap
        return None
    base = int(first[0])
    if base + step * (rows - 1) + per_row * size > data.size:
        return None
    item = data.itemsize
    return np.lib.stride_tricks.as_strided(
        data[base:], shape=(rows, per_row * size), strides=(step * item, item), writeable=writeable
    )


def _scatter(batch: FieldBatch, members: np.ndarray, count: int, values: np.ndarray) -> None:
    """Store ``values`` (``[len(members), count, size]`` float32) into the inner
    vectors of ``members``, converted to the field's dtype (through a view of the
    batch where the vectors lie one after another, as :func:`_gather` reads them)."""
    g, size = members.size, values.shape[2]
    replicas = RUN_REPLICAS.get()
    rows = replicas if replicas > 1 and g % replicas == 0 else g
    starts = batch.inner_offsets[_segment_rows(batch, members, count)].reshape(rows, -1)
    view = _block_view(batch.data, starts, size, writeable=True)
    if view is not None:
        view[...] = values.reshape(view.shape)
        return
    if batch.data.dtype == np.float32:
        flat = np.ascontiguousarray(values).reshape(-1, size)
        _store_blocks(flat, starts.reshape(-1).astype(np.int64, copy=False), size, batch.data)
        return
    batch.data[starts.reshape(-1)[:, None] + np.arange(size)] = values.reshape(-1, size)


#: Per plan of classes and fields in place: how each class reaches its operands (see
#: :func:`_accesses`), with the objects keyed on kept alive; cleared past a budget.
_ACCESSES: dict[tuple[int, ...], tuple] = {}
_ACCESSES_BYTES = 64 << 20
_accesses_bytes = [0]


def _accesses(fields: tuple[Any, ...], classes: list, shapes: list[Any]) -> list:
    """Per class (``shapes``: their geometries, as ``conv_vertices._geometry`` finds
    them), its pieces (:func:`_pieces`), each as ``(in, weights, out)`` accesses
    of its members' vectors, whether its output elements are distinct and whether they
    are apart from its operands' (:func:`_apart`): found once per plan (they depend
    only on the fields' ids and the classes) and kept."""
    a, b, c = fields[:3]
    key = (id(classes), id(a.ids), id(b.ids), id(c.ids), a.replicas)
    hit = _ACCESSES.get(key)
    if (
        hit is not None
        and hit[0][0] is classes
        and all(x is y.ids for x, y in zip(hit[0][1:], (a, b, c), strict=True))
    ):
        return hit[1]
    found, size = [], 0
    meet = _spans_meet(a, c) or _spans_meet(b, c)  # (else every class's output is apart)
    for (members, _), geo in zip(classes, shapes, strict=True):
        parts = [
            (f, f.inner_offsets[_segment_rows(f, members, count)], width)
            for f, count, width in (
                (a, geo.ncg * geo.nig, geo.in_size),
                (b, geo.ncg * geo.nog * geo.nig, geo.weight_size),
                (c, geo.ncg * geo.nog, geo.out_size),
            )
        ]
        apart = not meet or _apart(parts)
        cuts = _pieces(parts, a.replicas)
        if len(cuts) == 2:  # one piece: a view or an index for the whole class
            each = [[f.access(starts, width)] for f, starts, width in parts]
        else:
            each = [f.piece_accesses(starts, width, cuts) for f, starts, width in parts]
        pieces = []
        for per in zip(*each, strict=True):
            out: ImageAccess = per[2]
            pieces.append((*per, out.strides is not None and _distinct(out), apart))
            size += sum(x.index.nbytes for x in per if x.index is not None)
        found.append(pieces)
    if _accesses_bytes[0] + size > _ACCESSES_BYTES:
        _ACCESSES.clear()
        _accesses_bytes[0] = 0
    if size <= _ACCESSES_BYTES // 4:
        _ACCESSES[key] = ((classes, a.ids, b.ids, c.ids), found)
        _accesses_bytes[0] += size
    return found


def _spans_meet(field: ImageField, out: ImageField) -> bool:
    """Whether the ids of ``field`` and of output field ``out`` in one image have
    spans that meet (else no vertex's output can lie over its operands of ``field``)."""
    if not (field.ids.size and out.ids.size and np.may_share_memory(field.image, out.image)):
        return False
    return int(field.ids.min()) <= int(out.ids.max()) and int(out.ids.min()) <= int(field.ids.max())


def _apart(parts: list[tuple[ImageField, np.ndarray, int]]) -> bool:
    """Whether a class's output vectors (``parts[2]``) share no element with its input
    and weight vectors (``parts[0]``, ``parts[1]``: each field with the packed position
    where each of its members' vectors starts, and their size) in one image.

    A vertex may store its partials over its own operands (the conflict check refuses
    only another vertex's reads). The compiled pass stores as it goes, so a class that
    does is computed before any sum is stored, as its packed fields (copies) give it;
    else the sums are stored where they lie."""
    out_field, out_starts, out_width = parts[2]
    out_ids = None
    for field, starts, width in parts[:2]:
        if not np.may_share_memory(field.image, out_field.image):
            continue  # (another element size: other elements)
        if out_ids is None:
            out_ids = _element_ids(out_field, out_starts, out_width)
            if not out_ids.size:
                return True
            lo = int(out_ids.min())
            written = np.zeros(int(out_ids.max()) - lo + 1, bool)
            written[out_ids - lo] = True
        ids = _element_ids(field, starts, width) - lo
        ids = ids[(ids >= 0) & (ids < written.size)]
        if written[ids].any():
            return False
    return True


def _element_ids(field: ImageField, starts: np.ndarray, width: int) -> np.ndarray:
    """Element ids (replica 0's, int64) of the vectors of ``width`` elements of
    ``field`` starting at the packed positions ``starts``."""
    at = starts.reshape(-1, 1).astype(np.int64) + np.arange(width, dtype=np.int64)
    return field.ids[at.reshape(-1)].astype(np.int64)


#: Elements of every replica a piece of a class should read, on average, to be run as
#: views of its own (about what copying them costs against the numpy calls of a piece).
_PIECE_ELEMENTS = 1 << 14


def _pieces(parts: list[tuple[ImageField, np.ndarray, int]], replicas: int) -> list[int]:
    """Cuts of a class's members into ranges in which every field's vectors start at
    evenly spaced ids (their blocks are then strided views of the images, read and
    written with no copy), when the pieces are large enough to be worth a call each;
    else ``[0, members]``: the whole class as one piece."""
    m = parts[0][1].shape[0]
    if m < 3:
        return [0, m]
    firsts = [f.ids[starts].astype(np.int64).reshape(m, -1) for f, starts, _ in parts]
    steps = np.concatenate([np.diff(x, axis=0) for x in firsts], axis=1)
    # member i continues its piece when the step into it is the step into i - 1
    breaks = np.flatnonzero((steps[1:] != steps[:-1]).any(axis=1)) + 2
    cuts = [0]
    while cuts[-1] < m:
        k = int(np.searchsorted(breaks, cuts[-1] + 2))
        cuts.append(int(breaks[k]) if k < breaks.size else m)
    per_member = sum(s.shape[1] * width for _, s, width in parts) * replicas
    if m * per_member < _PIECE_ELEMENTS * (len(cuts) - 1):
        return [0, m]
    return cuts


def _distinct(acc: ImageAccess) -> bool:
    """Whether an affine access reaches every element once (its axes, largest stride
    first, each step past everything the axes below it span)."""
    assert acc.strides is not None
    axes = sorted(
        ((abs(s), n) for s, n in zip(acc.strides, acc.shape, strict=True) if n > 1),
        reverse=True,
    )
    span = 1
    for stride, n in reversed(axes):
        if stride < span:
            return False
        span = stride * (n - 1) + span
    return True
