"""Library vertex classes of popops, generated per (operation, type, layout) and cached.

Every class runs through ``computeBatch``: one numpy call over the packed elements of
all its vertices in a compute set. The element fields of one vertex are aligned
(element ``i`` of ``out`` comes from element ``i`` of each input), so a whole batch is
one array operation; scalar fields are repeated over their vertex's elements.

Layouts follow Poplibs: ``1D`` classes are multi-vertices over one contiguous region
(estimates in tile cycles), ``2D`` classes are worker vertices over a list of regions
(estimates in thread cycles).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from poplar_api.fields import FieldBatch
from poplar_api.popops import estimators as est
from poplar_api.popops.expr import Expr, _round
from poplar_api.popops.ops import BINARY_OPS, UNARY_OPS
from poplar_api.types import HALF, Type

__all__ = [
    "binary_vertex",
    "broadcast_scalar_vertex",
    "cast_vertex",
    "fill_vertex",
    "map_vertex",
    "scaled_add_vertex",
    "unary_vertex",
]


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


@cache
def binary_vertex(op: str, t: Type, layout: str, in_place: bool = False) -> type:
    """``popops::BinaryOp{1D,2D}[InPlace]<op,t>``."""
    _check_layout(layout)
    opdef = BINARY_OPS[op]
    out_t = opdef.out_type(t)
    suffix = "InPlace" if in_place else ""
    name = f"popops::BinaryOp{layout}{suffix}<{op},{t.name}>"
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

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        w, vw = _workers_vw(target, t)
        if layout == "1D":
            fn = est.binary_op_1d_in_place if in_place else est.binary_op_1d
            return fn(op, t.name, _total(sizes[first]), w, vw)
        fn2 = est.binary_op_2d_in_place if in_place else est.binary_op_2d
        return fn2(op, t.name, _rows(sizes[first]), vw)

    return _make(name, layout == "1D", fields, compute, estimate, f"Elementwise {op} of {t.name}.")


@cache
def unary_vertex(op: str, t: Type, layout: str, in_place: bool = False) -> type:
    """``popops::UnaryOp{1D,2D}[InPlace]<op,t>``."""
    _check_layout(layout)
    opdef = UNARY_OPS[op]
    suffix = "InPlace" if in_place else ""
    name = f"popops::UnaryOp{layout}{suffix}<{op},{t.name}>"
    if in_place:
        fields = {"inOut": InOut(_shape(t, layout))}
        src = dest = "inOut"
    else:
        fields = {"in_": Input(_shape(t, layout)), "out": Output(_shape(t, layout))}
        src, dest = "in", "out"

    def compute(b: dict[str, FieldBatch]) -> None:
        b[dest].data[:] = opdef.fn(b[src].data)

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        w, vw = _workers_vw(target, t)
        if layout == "1D":
            return est.unary_op_1d(op, t.name, _total(sizes[src]), w, vw, in_place)
        return est.unary_op_2d(op, t.name, _rows(sizes[src]), vw)

    return _make(name, layout == "1D", fields, compute, estimate, f"Elementwise {op} of {t.name}.")


@cache
def broadcast_scalar_vertex(op: str, t: Type, layout: str, in_place: bool = False) -> type:
    """``popops::BroadcastScalar1D[InPlace]`` / ``BroadcastScalar2DData[InPlace]``."""
    _check_layout(layout)
    opdef = BINARY_OPS[op]
    out_t = opdef.out_type(t)
    kind = "1D" if layout == "1D" else "2DData"
    name = f"popops::BroadcastScalar{kind}{'InPlace' if in_place else ''}<{op},{t.name}>"
    fields = {"data": (InOut if in_place else Input)(_shape(t, layout)), "B": Input(t)}
    if not in_place:
        fields["out"] = Output(_shape(out_t, layout))
    dest = "data" if in_place else "out"

    def compute(b: dict[str, FieldBatch]) -> None:
        scalar = np.repeat(b["B"].data, _counts(b["data"]))
        b[dest].data[:] = opdef.fn(b["data"].data, scalar)

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        w, vw = _workers_vw(target, t)
        if layout == "1D":
            return est.broadcast_scalar_1d(op, t.name, _total(sizes["data"]), w, vw)
        return est.broadcast_scalar_2d(op, t.name, _rows(sizes["data"]), vw)

    return _make(name, layout == "1D", fields, compute, estimate, f"{op} of a vector and a scalar.")


@cache
def scaled_add_vertex(t: Type, layout: str, subtract: bool = False) -> type:
    """``popops::ScaledAddSupervisor`` / ``ScaledAdd2D`` (or the Subtract forms): A += s*B."""
    _check_layout(layout)
    verb = "ScaledSubtract" if subtract else "ScaledAdd"
    kind = "Supervisor" if layout == "1D" else "2D"
    name = f"popops::{verb}{kind}<{t.name},{t.name}>"
    fields = {"A": InOut(_shape(t, layout)), "B": Input(_shape(t, layout)), "scaleB": Input(t)}
    sign = -1 if subtract else 1

    def compute(b: dict[str, FieldBatch]) -> None:
        scale = np.repeat(b["scaleB"].data, _counts(b["A"]))
        a = b["A"].data
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

    return _make(name, layout == "1D", fields, compute, estimate, "A += scale * B.")


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
            return est.fill(t.size, _total(sizes["out"]))
        return est.fill_2d(t.size, t is HALF, _rows(sizes["out"]))

    return _make(name, False, fields, compute, estimate, f"Sets every element to a {t.name}.")


@cache
def cast_vertex(src: Type, dst: Type, layout: str) -> type:
    """``popops::Cast1D<src,dst>`` (multi-vertex) / ``popops::Cast2D<src,dst>``."""
    _check_layout(layout)
    name = f"popops::Cast{layout}<{src.name},{dst.name}>"
    fields = {"src": Input(_shape(src, layout)), "dst": Output(_shape(dst, layout))}

    def compute(b: dict[str, FieldBatch]) -> None:
        with np.errstate(all="ignore"):
            stored = b["src"].data.astype(dst.numpy)
        b["dst"].data[:] = stored.astype(dst.kernel_numpy)

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        w = target.getNumWorkerContexts()
        vw = max(target.getVectorWidth(src), target.getVectorWidth(dst))
        if layout == "1D":
            return est.cast_1d(_total(sizes["src"]), w, vw)
        return est.cast_2d(_rows(sizes["src"]), vw)

    return _make(name, layout == "1D", fields, compute, estimate, f"{src.name} to {dst.name}.")


def _op_costs(expr: Expr, t: Type, vw: int) -> list[tuple[int, int]]:
    """(cycles, elements) per loop of each op of ``expr`` on data of type ``t``.

    Ops with a table entry for ``t`` use it (natural-width ops as BinaryOp does);
    others (casts, mixed types) are taken as a 3-cycle scalar loop, like float MAXIMUM.
    """
    costs = []
    for op, binary in expr.ops():
        try:
            info = est.binary_info(op, t.name) if binary else est.unary_info(op, t.name)
        except KeyError:
            costs.append((3, 1))
            continue
        if info.natural_vector_width:
            costs.append((info.cycles_per_loop + 2, vw))
        else:
            costs.append((info.cycles_per_loop, max(info.loop_unroll_factor, 1)))
    return costs


_MAP_CLASSES: dict[tuple[str, tuple[Type, ...], str, bool], type] = {}


def _map_vertex(key: str, expr: Expr, types: tuple[Type, ...], layout: str, in_place: bool):
    out_t = expr.result_type(list(types))
    type_list = ",".join(t.name for t in types)
    name = f"popops::map::Expr{layout}{'InPlace' if in_place else ''}<{key},{type_list}>"
    names = [f"in{i + 1}" for i in range(len(types))]
    if in_place:
        names[0] = "in1Out"
    fields: dict[str, Any] = {}
    for i, (n, t) in enumerate(zip(names, types, strict=True)):
        fields[n] = (InOut if in_place and i == 0 else Input)(_shape(t, layout))
    if not in_place:
        fields["out"] = Output(_shape(out_t, layout))
    dest = names[0] if in_place else "out"

    def compute(b: dict[str, FieldBatch]) -> None:
        arrays = [b[n].data for n in names]
        value, _ = expr.evaluate(arrays, list(types))
        b[dest].data[:] = _round(np.asarray(value), out_t)

    def estimate(sizes: dict[str, Any], target: Any) -> int:
        w, vw = _workers_vw(target, types[0])
        costs = _op_costs(expr, types[0], vw)
        if layout == "1D":
            return est.map_expr_1d(costs, _total(sizes[names[0]]), w)
        return est.map_expr_2d(costs, _rows(sizes[names[0]]))

    return _make(name, layout == "1D", fields, compute, estimate, f"Fused map of {key}.")


def map_vertex(expr: Expr, types: tuple[Type, ...], layout: str, in_place: bool = False) -> type:
    """``popops::map::Expr{1D,2D}[InPlace]<expr,types>``: a fused expression vertex."""
    _check_layout(layout)
    cache_key = (expr.key(), tuple(types), layout, in_place)
    cls = _MAP_CLASSES.get(cache_key)
    if cls is None:
        cls = _MAP_CLASSES[cache_key] = _map_vertex(*cache_key[:1], expr, *cache_key[1:])
    return cls
