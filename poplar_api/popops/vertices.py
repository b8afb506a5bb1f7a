"""Library vertex classes of popops, generated per (operation, type, layout) and cached.

Every class runs through ``computeBatch``: one numpy call over the packed elements of
all its vertices in a compute set. The element fields of one vertex are aligned
(element ``i`` of ``out`` comes from element ``i`` of each input), so a whole batch is
one array operation; scalar fields are repeated over their vertex's elements.

Names are those Poplar profiles show (``popops::BinaryOp1D<popops::expr::BinaryOpType::
ADD,float>``). Layouts follow Poplibs: ``1D`` classes are multi-vertices over one
contiguous region (estimates in tile cycles), ``2D`` classes worker vertices over a list
of regions (thread cycles); ``Fill`` and ``Cast1DSingleWorker`` are one-region workers.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

import numba
import numpy as np

from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from poplar_api.field_images import ImageField, read_only
from poplar_api.fields import FieldBatch
from poplar_api.popops import estimators as est
from poplar_api.popops.expr import Expr, _round
from poplar_api.popops.ops import BINARY_OPS, UNARY_OPS
from poplar_api.types import BOOL, FLOAT, HALF, Type

__all__ = [
    "binary_vertex",
    "broadcast_scalar_vertex",
    "cast_vertex",
    "fill_vertex",
    "map_vertex",
    "scaled_add_vertex",
    "ternary_vertex",
    "unary_vertex",
]

#: Ternary vertex kinds (``lib/popops/ElementWise.cpp`` ``ternaryOp``): which of
#: ``in1``, ``in2``, ``in3`` are one-element (scalar) fields.
TERNARY_KINDS: dict[str, tuple[bool, bool, bool]] = {
    "Select": (False, False, False),
    "BroadcastSelect": (True, True, False),
    "BroadcastSelectorSelect": (False, False, True),
    "Clamp": (False, False, False),
    "BroadcastClamp": (False, True, True),
}


def _counts(batch: FieldBatch) -> np.ndarray:
    """Elements of each vertex in a vector or vector-list field batch."""
    if batch.inner_offsets is None:
        return np.diff(batch.offsets)
    inner = batch.inner_offsets
    return inner[batch.offsets[1:]] - inner[batch.offsets[:-1]]


def _rows(value: Any) -> list[int]:
    return list(value) if isinstance(value, list) else [int(value)]


def _total(value: Any) -> int:
    return int(sum(value)) if isinstance(value, list) else int(value)


def _make(
    name: str,
    multi: bool,
    fields: dict[str, Any],
    compute: Callable[[dict[str, FieldBatch]], None],
    estimate: Callable[[dict[str, Any], Any], int],
    doc: str,
) -> type:
    """A codelet class called ``name`` with ``fields``, a batch kernel and an estimator."""

    def compute_batch(cls, batches, num_vertices, num_workers):
        compute(batches)

    def get_cycle_estimate(cls, sizes, target):
        return int(estimate(sizes, target))

    attrs: dict[str, Any] = dict(fields)
    attrs.update(
        typeName=name,
        __doc__=doc,
        __module__=__name__,
        computeBatch=classmethod(compute_batch),
        getCycleEstimate=classmethod(get_cycle_estimate),
    )
    py_name = re.sub(r"\W+", "_", name).strip("_")
    return type(py_name, (MultiVertex if multi else Vertex,), attrs)


def _shape(elem: Type, layout: str) -> Any:
    return Vector(elem) if layout == "1D" else VectorList(elem)


def _check_layout(layout: str) -> None:
    if layout not in ("1D", "2D"):
        raise ValueError(f"layout must be '1D' or '2D', got {layout!r}")


def _workers_vw(target: Any, t: Type) -> tuple[int, int]:
    return target.getNumWorkerContexts(), target.getVectorWidth(t)


def _op_estimate(
    one_d: Callable[..., int],
    two_d: Callable[..., int],
    op: str,
    t: Type,
    layout: str,
    field: str,
    in_place: bool,
) -> Callable[[dict[str, Any], Any], int]:
    """The estimator of an elementwise op vertex: ``one_d(op, type, total elements of
    field, workers, vector width, in_place)`` for the 1D (multi-vertex) layout, else
    ``two_d(op, type, row sizes of field, vector width, in_place)``."""

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        w, vw = _workers_vw(target, t)
        if layout == "1D":
            return one_d(op, t.name, _total(sizes[field]), w, vw, in_place)
        return two_d(op, t.name, _rows(sizes[field]), vw, in_place)

    return estimate


def _op_name(op: str, binary: bool) -> str:
    """The template argument Poplar profiles show for an op (``ExprOpUtil.hpp``)."""
    kind = "BinaryOpType" if binary else "UnaryOpType"
    return f"popops::expr::{kind}::{op}"


@cache
def binary_vertex(op: str, t: Type, layout: str, in_place: bool = False) -> type:
    """``popops::BinaryOp{1D,2D}[InPlace]<popops::expr::BinaryOpType::op,t>``."""
    _check_layout(layout)
    opdef = BINARY_OPS[op]
    out_t = opdef.out_type(t)
    suffix = "InPlace" if in_place else ""
    name = f"popops::BinaryOp{layout}{suffix}<{_op_name(op, True)},{t.name}>"
    first = "in1Out" if in_place else "in1"
    fields = {
        first: (InOut if in_place else Input)(_shape(t, layout)),
        "in2": Input(_shape(t, layout)),
    }
    if not in_place:
        fields["out"] = Output(_shape(out_t, layout))
    dest = first if in_place else "out"

    def compute(b: dict[str, FieldBatch]) -> None:
        b[dest].data[:] = opdef.fn(b[first].data, b["in2"].data)

    estimate = _op_estimate(est.binary_op_1d, est.binary_op_2d, op, t, layout, first, in_place)
    return _make(name, layout == "1D", fields, compute, estimate, f"Elementwise {op} of {t.name}.")


@cache
def unary_vertex(op: str, t: Type, layout: str, in_place: bool = False) -> type:
    """``popops::UnaryOp{1D,2D}[InPlace]<popops::expr::UnaryOpType::op,t>``."""
    _check_layout(layout)
    opdef = UNARY_OPS[op]
    out_t = opdef.out_type(t)
    suffix = "InPlace" if in_place else ""
    name = f"popops::UnaryOp{layout}{suffix}<{_op_name(op, False)},{t.name}>"
    if in_place:
        fields = {"inOut": InOut(_shape(t, layout))}
        src = dest = "inOut"
    else:
        fields = {"in_": Input(_shape(t, layout)), "out": Output(_shape(out_t, layout))}
        src, dest = "in", "out"

    def compute(b: dict[str, FieldBatch]) -> None:
        b[dest].data[:] = opdef.fn(b[src].data)

    estimate = _op_estimate(est.unary_op_1d, est.unary_op_2d, op, t, layout, src, in_place)
    return _make(name, layout == "1D", fields, compute, estimate, f"Elementwise {op} of {t.name}.")


@cache
def broadcast_scalar_vertex(op: str, t: Type, layout: str, in_place: bool = False) -> type:
    """``popops::BroadcastScalar1D[InPlace]`` / ``BroadcastScalar2DData[InPlace]``."""
    _check_layout(layout)
    opdef = BINARY_OPS[op]
    out_t = opdef.out_type(t)
    kind = "1D" if layout == "1D" else "2DData"
    suffix = "InPlace" if in_place else ""
    name = f"popops::BroadcastScalar{kind}{suffix}<{_op_name(op, True)},{t.name}>"
    fields = {"data": (InOut if in_place else Input)(_shape(t, layout)), "B": Input(t)}
    if not in_place:
        fields["out"] = Output(_shape(out_t, layout))
    dest = "data" if in_place else "out"

    def compute(b: dict[str, FieldBatch]) -> None:
        scalar = np.repeat(b["B"].data, _counts(b["data"]))
        b[dest].data[:] = opdef.fn(b["data"].data, scalar)

    estimate = _op_estimate(
        est.broadcast_scalar_1d, est.broadcast_scalar_2d_data, op, t, layout, "data", in_place
    )
    return _make(name, layout == "1D", fields, compute, estimate, f"{op} of a vector and a scalar.")


@numba.njit(cache=True, nogil=True)
def _scaled_add(a, b, scale, counts, subtract):  # pragma: no cover - compiled
    """``a ± scale[v] * b`` over vertex ``v``'s ``counts[v]`` elements, rounding the
    product to float32 and then the sum, as the numpy expression does."""
    at = 0
    for v in range(counts.size):
        s = scale[v]
        end = at + counts[v]
        if subtract:
            for i in range(at, end):
                a[i] = a[i] - s * b[i]
        else:
            for i in range(at, end):
                a[i] = a[i] + s * b[i]
        at = end


def _scaled_add_compiled(
    a: np.ndarray, b: np.ndarray, scale: np.ndarray, counts: np.ndarray, subtract: bool
) -> bool:
    """:func:`_scaled_add` on float32 batches (the FLOAT and HALF kernels' arrays: the
    half codelets scale and accumulate in single precision); whether it ran (other
    types, or batches not one element of ``B`` per element of ``A``, take numpy)."""
    f32 = np.dtype(np.float32)
    if a.dtype != f32 or b.dtype != f32 or scale.dtype != f32 or a.size != b.size:
        return False
    if scale.size != counts.size or int(counts.sum()) != a.size:
        return False
    _scaled_add(a, b, scale, counts.astype(np.int64, copy=False), bool(subtract))
    return True


def _scaled_add_in_place(b: dict[str, Any], subtract: bool) -> bool:
    """:func:`_scaled_add` of every replica's vertices on FLOAT fields lying in every
    replica's image (:class:`ImageField`, replica 0's layout): each element of ``A``
    read, updated and stored where it lies, with the arithmetic of the packed pass.
    False, having written nothing, when the fields are not such or when ``B``'s
    elements may be among ``A``'s (the packed pass reads all of ``B`` before it writes
    ``A``): then the batch runs packed."""
    a, other, scale = b["A"], b["B"], b["scaleB"]
    fields = (a, other, scale)
    f32 = np.dtype(np.float32)
    if not all(isinstance(f, ImageField) and f.dtype == f32 for f in fields):
        return False
    counts = _counts(a).astype(np.int64)
    if other.ids.size != a.ids.size or scale.ids.size != counts.size:
        return False
    if int(counts.sum()) != a.ids.size or not _apart(a.ids, other.ids):
        return False
    scales = np.ascontiguousarray(scale.image.view(f32)[:, scale.ids])
    a_img, b_img = a.image.view(f32), other.image.view(f32)
    ids = [read_only(a.ids), read_only(other.ids)]
    first = _block_start(a.ids)
    if first is not None:  # A one block: read and written as a slice of each row
        if SHARED_B and _b_alike(other, scales):  # B read once, in replica 0's row
            rows = a_img[:1] if SHARED_A and _a_alike(a) else a_img  # A too: replica 0's
            _scaled_add_block_shared_b(rows, first, b_img[0], ids[1], scales[0], counts,
                                       bool(subtract))  # fmt: skip
            if rows.shape[0] < a_img.shape[0]:  # its block, updated once, in every replica
                a_img[1:, first : first + a.ids.size] = a_img[0, first : first + a.ids.size]
            return True
        _scaled_add_block(a_img, first, b_img, ids[1], scales, counts, bool(subtract))
        return True
    _scaled_add_images(a_img, ids[0], b_img, ids[1], scales, counts, bool(subtract))
    return True


#: Id arrays lately asked about by :func:`_block_start`, by identity: ``(ids, first)``.
_BLOCKS: dict[int, tuple[np.ndarray, int | None]] = {}
#: Id arrays kept, at most.
KEPT_BLOCKS = 1 << 8


def _block_start(ids: np.ndarray) -> int | None:
    """The first id of ``ids`` when they are consecutive (one block), else None; found
    once per array (the runner hands every execution the same id arrays)."""
    hit = _BLOCKS.get(id(ids))
    if hit is not None and hit[0] is ids:
        return hit[1]
    first = None
    span = ids.size and int(ids[-1]) - int(ids[0]) == ids.size - 1
    if span and (ids.size == 1 or bool((np.diff(ids) == 1).all())):
        first = int(ids[0])
    if len(_BLOCKS) >= KEPT_BLOCKS:
        _BLOCKS.clear()
    _BLOCKS[id(ids)] = (ids, first)
    return first


@numba.njit(cache=True, nogil=True)
def _scaled_add_block(a, first, b, b_ids, scale, counts, subtract):  # pragma: no cover
    """:func:`_scaled_add_images` where ``A``'s ids are the block ``first`` to ``first
    + b_ids.size``: each row's block updated as a slice (no ids of ``A`` read), with
    element ``b_ids[i]`` of the row of ``b`` and vertex ``v``'s ``scale[r, v]``, in
    float32 as the packed pass computes it."""
    for r in range(a.shape[0]):
        arow, brow = a[r, first : first + b_ids.size], b[r]
        at = 0
        for v in range(counts.size):
            s = scale[r, v]
            end = at + counts[v]
            if subtract:
                for i in range(at, end):
                    arow[i] = arow[i] - s * brow[b_ids[i]]
            else:
                for i in range(at, end):
                    arow[i] = arow[i] + s * brow[b_ids[i]]
            at = end


#: Whether a weight update whose ``B`` every replica holds alike reads it once
#: (:func:`_b_alike`; a switch for tests comparing it with the general path).
SHARED_B = True
#: Whether an update whose ``A`` every replica also holds alike (the images' record,
#: :mod:`poplar_api.replica_alike`) computes replica 0's block once and copies it into
#: every other replica (:func:`_a_alike`; a switch for tests, as :data:`SHARED_B`).
SHARED_A = True
#: Elements of ``B`` read and used together for every replica by
#: :func:`_scaled_add_block_shared_b` (they stay in the first-level cache).
SHARED_CHUNK = 1024


def _b_alike(b: ImageField, scales: np.ndarray) -> bool:
    """Whether every replica's ``B`` and scales have replica 0's bits: ``B``'s elements
    are known to (the effect just before stored the same values in every replica:
    :mod:`poplar_api.replica_equal`, the gradients' all-reduce before a weight update;
    or the images' record, :mod:`poplar_api.replica_alike`) and the scales, a few values
    per replica, compare equal bit for bit."""
    if scales.shape[0] < 2 or b.declared is None:
        return False
    if not b.declared.holds_alike(b.image, b.ids) and not (
        b.alike is not None and b.alike.holds(b.image.dtype.itemsize, b.ids)
    ):
        return False
    bits = scales.view(np.int32)
    return bool((bits == bits[:1]).all())


def _a_alike(a: ImageField) -> bool:
    """Whether every replica holds ``A``'s elements alike before the update (which reads
    each element before it writes it): then every replica's update gives replica 0's
    bits, with ``B`` and the scales alike (:func:`_b_alike`)."""
    return a.alike is not None and a.alike.holds(a.image.dtype.itemsize, a.ids, in_place=True)


@numba.njit(cache=True, nogil=True)
def _scaled_add_block_shared_b(a, first, brow, b_ids, scale, counts, subtract):  # pragma: no cover
    """:func:`_scaled_add_block` where every replica's ``B`` and scales are replica 0's
    (``brow``, ``scale[v]``): per chunk of :data:`SHARED_CHUNK` elements, ``B``'s are
    gathered once and every replica's block of ``A`` updated with them, the same float32
    product and difference (or sum) per element as the per-replica pass."""
    n = b_ids.size
    g = np.empty(SHARED_CHUNK, np.float32)
    s = np.empty(SHARED_CHUNK, np.float32)
    v, end = 0, 0
    for lo in range(0, n, SHARED_CHUNK):
        hi = min(lo + SHARED_CHUNK, n)
        for i in range(lo, hi):
            while i >= end:  # the vertex of element i, and its scale
                end += counts[v]
                v += 1
            g[i - lo] = brow[b_ids[i]]
            s[i - lo] = scale[v - 1]
        for r in range(a.shape[0]):
            arow = a[r, first + lo : first + hi]
            if subtract:
                for i in range(hi - lo):
                    arow[i] = arow[i] - s[i] * g[i]
            else:
                for i in range(hi - lo):
                    arow[i] = arow[i] + s[i] * g[i]


#: Pairs of id arrays lately asked about by :func:`_apart`, by identity: ``(a_ids,
#: b_ids, apart)``.
_APART: dict[tuple[int, int], tuple[np.ndarray, np.ndarray, bool]] = {}


def _apart(a_ids: np.ndarray, b_ids: np.ndarray) -> bool:
    """Whether no id of ``b_ids`` is one of ``a_ids`` (spans apart, else exactly); found
    once per pair of arrays, as :func:`_block_start` finds its answer (the runner hands
    every execution the same read-only id arrays; the first layer's update of the MLP
    step compares two arrays of 100,352 ids, four passes over them)."""
    key = (id(a_ids), id(b_ids))
    hit = _APART.get(key)
    if hit is not None and hit[0] is a_ids and hit[1] is b_ids:
        return hit[2]
    apart = (
        not a_ids.size
        or not b_ids.size
        or a_ids.max() < b_ids.min()  # spans apart
        or b_ids.max() < a_ids.min()
        or not np.isin(b_ids, a_ids).any()
    )
    apart = bool(apart)
    if len(_APART) >= KEPT_BLOCKS:
        _APART.clear()
    _APART[key] = (a_ids, b_ids, apart)
    return apart


@numba.njit(cache=True, nogil=True)
def _scaled_add_images(a, a_ids, b, b_ids, scale, counts, subtract):  # pragma: no cover
    """:func:`_scaled_add` of every replica ``r``: element ``a_ids[i]`` of row ``r`` of
    ``a`` updated with element ``b_ids[i]`` of row ``r`` of ``b`` and vertex ``v``'s
    ``scale[r, v]``, in float32 as the packed pass computes it."""
    for r in range(a.shape[0]):
        arow, brow = a[r], b[r]
        at = 0
        for v in range(counts.size):
            s = scale[r, v]
            end = at + counts[v]
            if subtract:
                for i in range(at, end):
                    arow[a_ids[i]] = arow[a_ids[i]] - s * brow[b_ids[i]]
            else:
                for i in range(at, end):
                    arow[a_ids[i]] = arow[a_ids[i]] + s * brow[b_ids[i]]
            at = end


@cache
def scaled_add_vertex(t: Type, layout: str, subtract: bool = False) -> type:
    """``popops::ScaledAddSupervisor`` / ``ScaledAdd2D`` (or the Subtract forms): A += s*B.

    Names as ``lib/popops/ScaledAdd.cpp`` builds them, with the scale of A's type and
    ``addConstraints`` false (the ``optimizeForSpeed`` option's default).
    """
    _check_layout(layout)
    verb = "ScaledSubtract" if subtract else "ScaledAdd"
    kind = "Supervisor" if layout == "1D" else "2D"
    n = t.name
    params = f"{n},{n},false" if (subtract and layout == "2D") else f"{n},{n},{n},false"
    name = f"popops::{verb}{kind}<{params}>"
    fields = {"A": InOut(_shape(t, layout)), "B": Input(_shape(t, layout)), "scaleB": Input(t)}
    sign = -1 if subtract else 1

    def compute(b: dict[str, FieldBatch]) -> None:
        if isinstance(b["A"], ImageField):  # every replica, where the fields lie
            if _scaled_add_in_place(b, subtract):
                return
            packed = {k: f.packed() if isinstance(f, ImageField) else f for k, f in b.items()}
            compute(packed)
            b["A"].store_packed(packed["A"])
            return
        a, scales = b["A"].data, b["scaleB"].data
        if _scaled_add_compiled(a, b["B"].data, scales, _counts(b["A"]), subtract):
            return
        scale = np.repeat(scales, _counts(b["A"]))
        if t is HALF:
            # The half codelets scale and accumulate in single precision.
            a[:] = a + sign * scale * b["B"].data
        else:
            prod = np.multiply(scale, b["B"].data, dtype=a.dtype)
            a[:] = np.subtract(a, prod) if subtract else np.add(a, prod)

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        w, vw = _workers_vw(target, t)
        if layout == "1D":
            return est.scaled_add_supervisor(t.name, _total(sizes["A"]), w, vw, subtract)
        return est.scaled_add_2d(t.name, _rows(sizes["A"]), vw, subtract)

    cls = _make(name, layout == "1D", fields, compute, estimate, "A += scale * B.")
    # FLOAT: with the replicas run as one batch, the fields come where they lie in every
    # replica's image (ImageField) and the update is done there (_scaled_add_in_place)
    cls.readsImages = t is FLOAT
    return cls


@cache
def fill_vertex(t: Type, layout: str) -> type:
    """``popops::Fill<t>`` (one region) / ``popops::Fill2d<t>`` (several); worker vertices."""
    _check_layout(layout)
    name = f"popops::{'Fill' if layout == '1D' else 'Fill2d'}<{t.name}>"
    fields = {"in_": Input(t), "out": Output(_shape(t, layout))}

    def compute(b: dict[str, FieldBatch]) -> None:
        b["out"].data[:] = np.repeat(b["in"].data, _counts(b["out"]))

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        if layout == "1D":
            return est.fill(t.size, _total(sizes["out"]), t is HALF)
        return est.fill_2d(t.size, t is HALF, _rows(sizes["out"]))

    return _make(name, False, fields, compute, estimate, f"Sets every element to a {t.name}.")


@cache
def cast_vertex(src: Type, dst: Type, layout: str) -> type:
    """``popops::Cast1D`` (multi-vertex), ``Cast1DSingleWorker`` or ``Cast2D`` <src,dst>.

    ``layout`` is ``"1D"``, ``"1DSingleWorker"`` or ``"2D"``.
    """
    if layout not in ("1D", "1DSingleWorker", "2D"):
        raise ValueError(f"cast layout must be '1D', '1DSingleWorker' or '2D', got {layout!r}")
    name = f"popops::Cast{layout}<{src.name},{dst.name}>"
    shape = "2D" if layout == "2D" else "1D"
    fields = {"src": Input(_shape(src, shape)), "dst": Output(_shape(dst, shape))}

    def compute(b: dict[str, FieldBatch]) -> None:
        with np.errstate(all="ignore"):
            stored = b["src"].data.astype(dst.numpy)
        b["dst"].data[:] = stored.astype(dst.kernel_numpy)

    def worker(n: int) -> int:
        return est.cast_worker_cycles(n, src.name, dst.name, src.size, dst.size)

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        if layout == "1D":
            return est.cast_1d(_total(sizes["src"]), target.getNumWorkerContexts(), worker)
        if layout == "1DSingleWorker":
            return est.cast_1d_single_worker(_total(sizes["src"]), worker)
        return est.cast_2d(_rows(sizes["src"]), worker)

    return _make(name, layout == "1D", fields, compute, estimate, f"{src.name} to {dst.name}.")


@cache
def ternary_vertex(kind: str, t: Type, in_place: bool = False) -> type:
    """``popops::{kind}[InPlace]<t>``: Select, BroadcastSelect, BroadcastSelectorSelect,
    Clamp or BroadcastClamp (worker vertices over rows; scalars are single fields).

    ``t`` is the type of ``in1``/``in2`` (and of Clamp's ``in3``); Select's ``in3`` is
    BOOL. ``BroadcastSelect`` has no in-place form (its output would be the BOOL
    selector). Estimates: :func:`~.estimators.select`, ``select_in_place``,
    ``broadcast_select``, ``broadcast_selector_select``, ``clamp``.
    """
    if kind not in TERNARY_KINDS:
        raise ValueError(
            f"ternary vertex kind must be one of {sorted(TERNARY_KINDS)}, got {kind!r}"
        )
    if kind == "BroadcastSelect" and in_place:
        raise ValueError("popops::BroadcastSelect has no in-place form")
    scalars = TERNARY_KINDS[kind]
    is_select = "Select" in kind
    types = (t, t, BOOL if is_select else t)
    suffix = "InPlace" if in_place else ""
    name = f"popops::{kind}{suffix}<{t.name}>"
    names = ["in1Out" if in_place else "in1", "in2", "in3"]
    fields: dict[str, Any] = {}
    for i, (field, ft, scalar) in enumerate(zip(names, types, scalars, strict=True)):
        spec = ft if scalar else VectorList(ft)
        fields[field] = (InOut if in_place and i == 0 else Input)(spec)
    rows_field = names[next(i for i, s in enumerate(scalars) if not s)]
    if not in_place:
        fields["out"] = Output(VectorList(t))
    dest = names[0] if in_place else "out"

    def compute(b: dict[str, FieldBatch]) -> None:
        counts = _counts(b[rows_field])
        vals = [
            np.repeat(b[f].data, counts) if scalar else b[f].data
            for f, scalar in zip(names, scalars, strict=True)
        ]
        if is_select:
            result = np.where(vals[2].astype(bool), vals[0], vals[1])
        else:
            result = np.minimum(np.maximum(vals[0], vals[1]), vals[2])
        b[dest].data[:] = result

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        rows = _rows(sizes[rows_field])
        if kind == "Select":
            return est.select_in_place(rows) if in_place else est.select(rows)
        if kind == "BroadcastSelect":
            return est.broadcast_select(t.size, rows)
        if kind == "BroadcastSelectorSelect":
            return est.broadcast_selector_select(t.size, rows)
        return est.clamp(t.name, rows, target.getDataPathWidth())

    what = "select(in1, in2, in3)" if is_select else "clamp(in1, in2, in3)"
    return _make(name, False, fields, compute, estimate, f"Elementwise {what} of {t.name}.")


_MAP_CLASSES: dict[tuple[str, tuple[Type, ...], bool, bool], type] = {}


def _map_vertex(key: str, expr: Expr, types: tuple[Type, ...], multi: bool, in_place: bool):
    out_t = expr.result_type(list(types))
    # Derived name: Poplibs names a generated codelet ``popops::map::`` + the expression's
    # own text, the in-place and all-scalar flags, one is-scalar flag per input and
    # ``_MultiVertex``; ipusim's expression text stands in for Poplibs' ``Expr::name``.
    flags = f"{int(in_place)}0" + "0" * len(types)
    name = f"popops::map::{key}{flags}{'_MultiVertex' if multi else ''}"
    names = [f"in{i + 1}" for i in range(len(types))]
    if in_place:
        names[0] = "in1Out"
    fields: dict[str, Any] = {}
    for i, (n, t) in enumerate(zip(names, types, strict=True)):
        fields[n] = (InOut if in_place and i == 0 else Input)(Vector(t))
    if not in_place:
        fields["out"] = Output(Vector(out_t))
    dest = names[0] if in_place else "out"
    num_ops = len(expr.ops())

    def compute(b: dict[str, FieldBatch]) -> None:
        arrays = [b[n].data for n in names]
        value, _ = expr.evaluate(arrays, list(types))
        b[dest].data[:] = _round(np.asarray(value), out_t)

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        w, vw = _workers_vw(target, types[0])
        elems = [_total(sizes[n]) for n in names]
        return est.map_expr(elems, num_ops, vw, w, multi)

    return _make(name, multi, fields, compute, estimate, f"Fused map of {key}.")


def map_vertex(expr: Expr, types: tuple[Type, ...], multi: bool, in_place: bool = False) -> type:
    """A generated fused-expression vertex (a multi-vertex when ``multi``)."""
    cache_key = (expr.key(), tuple(types), bool(multi), bool(in_place))
    cls = _MAP_CLASSES.get(cache_key)
    if cls is None:
        cls = _MAP_CLASSES[cache_key] = _map_vertex(cache_key[0], expr, *cache_key[1:])
    return cls
