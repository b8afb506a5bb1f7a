"""The poplin reduction of split partial sums: ``poplin::ReduceAdd``.

:class:`~poplar_api.codelet.MultiVertex` library vertices with vectorised numpy
``computeBatch`` and ``getCycleEstimate`` from :mod:`poplar_api.poplin.estimators`,
one class per element types and variant, named as Poplar's templates are
(``poplin::ReduceAdd<out,partials,singleInput,constrainPartials>``, graphcore/poplibs
7eac0f26 ``lib/poplin/codelets/ReduceAdd.cpp``):

* several inputs (``singleInput`` false): ``partials`` is a list of one vector per
  partial;
* single input: the tile's own partial is ``initialPartial`` and the others one flat
  ``partials`` vector of ``numPartials * numElems`` elements (one exchanged region); with
  ``constrainPartials`` they are in interleaved memory, so the vertex loads two vectors
  a cycle (the ``enableFastReduce`` option).

Convolutions and matMul use them when the input channels are split over tiles
(:mod:`poplar_api.poplin.conv_reduce`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numba
import numpy as np

from poplar_api.codelet import FieldBatch, InOut, Input, MultiVertex, Output, Vector, VectorList
from poplar_api.field_images import ImageAccess, ImageField
from poplar_api.poplin.estimators import reduce_add_cycles
from poplar_api.types import FLOAT, HALF, Type

#: Element types a matmul operand, partial or output may have.
MATMUL_TYPES = (FLOAT, HALF)


class _ReduceAddBase(MultiVertex):
    """``out = sum(partials)`` (or ``out += scale * sum`` when ``update``), float64 sum:
    the several-input ReduceAdd."""

    update: bool = False
    #: ``(partials type, output type)``.
    element_types: tuple[Type, Type] = (FLOAT, FLOAT)
    #: With the replicas run as one batch, the runner hands every replica's image
    #: (:class:`~poplar_api.field_images.ImageField`): FLOAT partials are summed where
    #: they lie (:func:`_reduce_in_place`), not gathered into a packed copy first.
    readsImages: bool = True

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        if any(isinstance(f, ImageField) for f in batches.values()):
            ok = _reduce_in_place(cls.update, batches, num_vertices)
            if ok is not None:
                return ok
            packed = {k: f.packed() if isinstance(f, ImageField) else f for k, f in batches.items()}
            ok = cls.computeBatch(packed, num_vertices, num_workers)
            out = batches["out"]
            if isinstance(out, ImageField):  # (the runner stores no in-place output)
                out.store_packed(packed["out"])
            return ok
        p, out = batches["partials"], batches["out"]
        out_len = np.diff(out.offsets)
        ok = np.ones(num_vertices, dtype=bool)
        sums = np.zeros(out.data.size, np.float64)
        _sum_lists(p.data, p.offsets, p.inner_offsets, out.offsets, ok, sums)
        return _store(cls.update, batches, sums, out_len, ok)

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        return reduce_add_cycles(
            len(sizes["partials"]),
            int(sizes["out"]),
            cls.element_types[0].size,
            cls.element_types[1].size,
            target.getNumWorkerContexts(),
            update=cls.update,
            single_input=False,
        )


@numba.njit(cache=True, nogil=True)
def _sum_lists(data, offsets, inner_offsets, out_offsets, ok, sums):  # pragma: no cover
    """Several-input sums: vertex ``v``'s partials (inner vectors ``offsets[v]`` to
    ``offsets[v + 1]``) added element by element into ``sums`` at ``out_offsets[v]``,
    in float64, partial after partial; a vertex with a partial whose length is not its
    output's is marked not ``ok`` and adds nothing."""
    for v in range(ok.size):
        base = out_offsets[v]
        size = out_offsets[v + 1] - base
        for j in range(offsets[v], offsets[v + 1]):
            if inner_offsets[j + 1] - inner_offsets[j] != size:
                ok[v] = False
        if not ok[v]:
            continue
        for j in range(offsets[v], offsets[v + 1]):
            at = inner_offsets[j]
            for e in range(size):
                sums[base + e] += np.float64(data[at + e])


def _reduce_in_place(update: bool, batches: Mapping[str, Any], num_vertices: int) -> Any:
    """The several-input ReduceAdd of every replica's vertices, the partials read where
    they lie in each replica's image (:class:`ImageField`, replica 0's layout, the same
    in every replica) and the sums stored where the outputs lie: the float64 sums of
    :func:`_sum_lists`, element by element and partial after partial, rounded to the
    kernel dtype and then to the output's type as the packed run stores them. None,
    having written nothing, when the fields are not such (HALF partials, which the
    compiled pass cannot read as they lie; then the batch runs packed)."""
    p, out = batches["partials"], batches["out"]
    fields = [p, out, batches["scale"]] if update else [p, out]
    if not all(isinstance(f, ImageField) for f in fields) or p.dtype != np.float32:
        return None
    replicas, n = p.replicas, p.offsets.size - 1
    if num_vertices != n * replicas or out.offsets.size != n + 1:
        return None
    ok, has_out, ids, every_ok = _reduce_layout(p, out, replicas)
    sums = np.zeros((replicas, out.ids.size), np.float64)
    src, dst, lengths = _segments(p.ids, p.offsets, p.inner_offsets, out.offsets, ok)
    _sum_segments(p.image.view(np.float32), src, dst, lengths, sums)
    if has_out is not None:  # (outputs of vertices not ok are left as they are)
        sums = sums[:, has_out]
    if update:  # out += scale * sums, as _store computes it on the packed fields
        out_len = np.diff(out.offsets)
        scale = np.repeat(_kernel_values(batches["scale"], batches["scale"].ids), out_len, axis=1)
        scale = scale if has_out is None else scale[:, has_out]
        sums = _kernel_values(out, ids) + scale * sums
    out.write(ImageAccess((ids.size,), index=ids), sums.astype(out.kernel_dtype), True)
    return every_ok


#: What :func:`_reduce_layout` found for the layouts summed lately, by the identity of
#: the partials' ids: ``(arrays it was found from, replicas, found)``.
_LAYOUTS: dict[int, tuple[tuple[np.ndarray, ...], int, tuple[Any, ...]]] = {}


def _reduce_layout(
    p: ImageField, out: ImageField, replicas: int
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray, np.ndarray]:
    """``(ok, has_out, ids, every_ok)`` of a several-input ReduceAdd's layout, found once
    per layout (the runner hands every execution the same id and offset arrays): which
    of replica 0's vertices are ok (none of its partials has another length than its
    output: a vertex that is not adds nothing), which output elements they own (None
    when every vertex is ok), those elements' ids (read-only) and ``ok`` of every
    replica's vertices, replica after replica (a copy per call: the caller's)."""
    arrays = (p.ids, p.offsets, p.inner_offsets, out.offsets, out.ids)
    hit = _LAYOUTS.get(id(p.ids))
    if (
        hit is not None
        and all(a is b for a, b in zip(hit[0], arrays, strict=True))
        and hit[1] == replicas
    ):
        ok, has_out, ids, every_ok = hit[2]
        return ok, has_out, ids, every_ok.copy()
    n = p.offsets.size - 1
    out_len = np.diff(out.offsets)
    vertex = np.repeat(np.arange(n), np.diff(p.offsets))
    wrong = np.diff(p.inner_offsets) != out_len[vertex]
    ok = np.bincount(vertex[wrong], minlength=n) == 0
    has_out = None if ok.all() else np.repeat(ok, out_len)
    ids = (out.ids if has_out is None else out.ids[has_out]).view()
    ids.flags.writeable = False  # (the runner's gathers take read-only ids)
    found = (ok, has_out, ids, np.tile(ok, replicas))
    if len(_LAYOUTS) >= KEPT_LAYOUTS:
        _LAYOUTS.clear()
    _LAYOUTS[id(p.ids)] = (arrays, replicas, found)
    return ok, has_out, ids, found[3].copy()


def _kernel_values(field: ImageField, ids: np.ndarray) -> np.ndarray:
    """``[replicas, ids.size]`` float64 values of elements ``ids`` of ``field`` in every
    replica, converted to the kernel dtype first (as the runner packs them)."""
    typed = field.image.view(field.dtype)[:, ids]
    return typed.astype(field.kernel_dtype).astype(np.float64)


#: The segments of each partials layout summed lately (:func:`_segments`), by the
#: identity of its ids: ``(ids, offsets, inner_offsets, out_offsets, ok, segments)``.
_SEGMENTS: dict[int, tuple[Any, ...]] = {}
#: Layouts whose segments are kept, at most.
KEPT_LAYOUTS = 1 << 8


def _segments(
    ids: np.ndarray, offsets: np.ndarray, inner: np.ndarray, out_offsets: np.ndarray,
    ok: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """The additions of :func:`_sum_lists` of every replica's vertices ``ok``, their
    partials' elements at ``ids`` (replica 0's packed layout) read in each replica's
    image, as runs of consecutive elements: first partial id, first output position
    and length of each, in the order to add them.

    Every vertex ``ok`` adds its partials into its outputs partial after partial; the
    additions are taken partial rank by partial rank (every vertex's first partial,
    then every vertex's second, ...) and, within a rank, by output position, which
    keeps each output element's additions in their order (an element meets each rank
    once). Where a rank's partials of neighbouring vertices lie one after another in
    memory, as a split matMul's partials do (one block of a tile's partial sums per
    input-channel group), they become one run. Found once per layout (the runner hands
    every execution the same id and offset arrays; ``ok`` is compared)."""
    hit = _SEGMENTS.get(id(ids))
    if (
        hit is not None
        and hit[0] is ids
        and hit[1] is offsets
        and hit[2] is inner
        and hit[3] is out_offsets
        and np.array_equal(hit[4], ok)
    ):
        return hit[5]
    found = _segments_of(ids, offsets, inner, out_offsets, ok)
    if len(_SEGMENTS) >= KEPT_LAYOUTS:
        _SEGMENTS.clear()
    _SEGMENTS[id(ids)] = (ids, offsets, inner, out_offsets, ok.copy(), found)
    return found


def _segments_of(
    ids: np.ndarray, offsets: np.ndarray, inner: np.ndarray, out_offsets: np.ndarray,
    ok: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:  # fmt: skip
    """:func:`_segments`, found from *pieces*, not elements: the runs of consecutive
    ids within a partial (one per partial where each lies in one run, as a matMul's
    partials do), each with its first id, first output position and length. The
    pieces are put in rank order by a stable sort of their ranks: each rank's pieces
    then come in packed order, which is output order (a vertex's outputs follow the
    previous vertex's, and a piece's elements one another). A piece that goes on
    where the one before it ended, in ids and in outputs, joins its segment. Pieces
    are about half as many as elements here, and no array of every element but one
    bool mark is made: the temporaries of a 100,352-element layout, first touched in
    a fresh process, were most of its cost."""
    n = ids.size
    cut = np.zeros(n + 1, bool)  # where a piece starts: a partial, or a break in the ids
    cut[inner] = True
    cut[1:n] |= np.diff(ids) != 1
    starts = np.flatnonzero(cut[:n])
    del cut
    length = np.diff(starts, append=n)
    part = np.searchsorted(inner, starts, side="right") - 1  # of each piece
    vertex = np.searchsorted(offsets, part, side="right") - 1
    keep = ok[vertex]
    if not keep.all():
        starts, length, part, vertex = starts[keep], length[keep], part[keep], vertex[keep]
    dst = out_offsets[vertex].astype(np.int64)  # (int64 whatever the offsets' type)
    dst += starts
    dst -= inner[part]
    rank = part
    rank -= offsets[vertex]
    del vertex
    if rank.size and int(rank.max()) < 1 << 15 and bool((np.diff(out_offsets) >= 0).all()):
        order = np.argsort(rank.astype(np.int16), kind="stable")  # (a radix sort)
    else:  # (outputs not in vertex order: sorted by output within a rank)
        order = np.lexsort((dst, rank))
    del rank
    src = ids[starts[order]].astype(np.int64)
    dst, length = dst[order], length[order]
    new = np.ones(src.size, bool)  # a piece that starts a segment
    new[1:] = (src[1:] != src[:-1] + length[:-1]) | (dst[1:] != dst[:-1] + length[:-1])
    first = np.flatnonzero(new)
    if not first.size:
        return src, dst, length
    return src[first], dst[first], np.add.reduceat(length, first)


@numba.njit(cache=True, nogil=True)
def _sum_segments(images, src, dst, lengths, sums):  # pragma: no cover - compiled
    """Add, in every row ``r``, elements ``src[s]`` to ``src[s] + lengths[s]`` of
    ``images[r]`` (widened to float64) into ``sums[r]`` from ``dst[s]``, segment after
    segment (:func:`_segments`)."""
    for r in range(images.shape[0]):
        image, total = images[r], sums[r]
        for s in range(src.size):
            n = lengths[s]
            a = image[src[s] : src[s] + n]  # (slices: the loop vectorizes)
            b = total[dst[s] : dst[s] + n]
            for i in range(n):
                b[i] += np.float64(a[i])


@numba.njit(cache=True, nogil=True)
def _sum_flat(data, offsets, out_offsets, ok, sums):  # pragma: no cover
    """Single-input sums: element ``k`` of vertex ``v``'s flat partials added into
    ``sums`` at ``out_offsets[v] + k % size``, in float64 and in order (vertices not
    ``ok`` add nothing)."""
    for v in range(ok.size):
        if not ok[v]:
            continue
        base = out_offsets[v]
        size = out_offsets[v + 1] - base
        if size == 0:  # no output: nothing to add into
            continue
        lo = offsets[v]
        for k in range(offsets[v + 1] - lo):
            sums[base + k % size] += np.float64(data[lo + k])


def _store(
    update: bool, batches: Mapping[str, FieldBatch], sums: np.ndarray, out_len: np.ndarray,
    ok: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Write the float64 ``sums`` to the ``out`` of the vertices ``ok`` (with ``update``,
    ``out += scale * sums``); return ``ok``."""
    out = batches["out"]
    if update:
        scale = np.repeat(batches["scale"].data.astype(np.float64), out_len)
        sums = out.data.astype(np.float64) + scale * sums
    has_out = np.repeat(ok, out_len)
    out.data[has_out] = sums[has_out]
    return ok


class _ReduceAddSingleBase(MultiVertex):
    """``out = initialPartial + sum(partials)``: the single-input ReduceAdd, float64 sum."""

    update: bool = False
    constrain: bool = False
    element_types: tuple[Type, Type] = (FLOAT, FLOAT)

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        p, init, out = batches["partials"], batches["initialPartial"], batches["out"]
        out_len = np.diff(out.offsets)
        p_len = np.diff(p.offsets)
        safe = np.maximum(out_len, 1)
        ok = (np.diff(init.offsets) == out_len) & (p_len % safe == 0)
        sums = np.zeros(out.data.size, np.float64)
        _sum_flat(p.data, p.offsets, out.offsets, ok, sums)
        sums = sums + init.data.astype(np.float64)
        return _store(cls.update, batches, sums, out_len, ok)

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        n = int(sizes["out"])
        return reduce_add_cycles(
            int(sizes["partials"]) // max(n, 1),
            n,
            cls.element_types[0].size,
            cls.element_types[1].size,
            target.getNumWorkerContexts(),
            update=cls.update,
            single_input=True,
            constrain_partials=cls.constrain,
        )


def _tname(t: Type) -> str:
    return t.name


def _make_reduce(
    partials_type: Type, out_type: Type, update: bool, single: bool = False, constrain: bool = False
) -> type:
    kind = "ReduceAddScaledUpdate" if update else "ReduceAdd"
    variant = f"{str(single).lower()},{str(constrain).lower()}"
    name = f"{kind}_{out_type.constant}_{partials_type.constant}_{int(single)}{int(constrain)}"
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"{kind}: {partials_type.name} partials into {out_type.name} output"
        + (" (single input)." if single else "."),
        "typeName": f"poplin::{kind}<{_tname(out_type)},{_tname(partials_type)},{variant}>",
        "update": update,
        "element_types": (partials_type, out_type),
        "partials": Input(Vector(partials_type) if single else VectorList(partials_type)),
        "out": (InOut if update else Output)(Vector(out_type)),
    }
    if single:
        attrs["initialPartial"] = Input(Vector(partials_type))
        attrs["constrain"] = constrain
    if update:
        attrs["scale"] = Input(FLOAT)
    return type(name, (_ReduceAddSingleBase if single else _ReduceAddBase,), attrs)


#: (single input, constrain partials) of Poplibs' ReduceAdd templates.
_VARIANTS = ((False, False), (True, False), (True, True))
_REDUCE = {
    (p, o, u, si, c): _make_reduce(p, o, u, si, c)
    for p in MATMUL_TYPES
    for o in MATMUL_TYPES
    for u in (False, True)
    for si, c in _VARIANTS
}


def reduce_add_vertex(
    partials_type: Type,
    out_type: Type,
    update: bool = False,
    single_input: bool = False,
    constrain_partials: bool = False,
) -> type:
    """The ReduceAdd (or scaled-update) class for partials and output element types and
    the variant (``single_input``, ``constrain_partials``; see the module docstring)."""
    if constrain_partials and not single_input:
        raise ValueError(
            "reduce_add_vertex: constrain_partials=True needs single_input=True (Poplibs "
            "has no several-input ReduceAdd with constrained partials)"
        )
    return _REDUCE[(partials_type, out_type, update, single_input, constrain_partials)]


__all__ = ["MATMUL_TYPES", "reduce_add_vertex"]
