"""Elementwise popops operations: one compute set per call, appended to a Sequence.

Each function checks its operands, makes the output (a new variable with the shape
and tile mapping of the first input that has the full result shape), lays the work
out as :mod:`poplar_api.popops.layout` describes and appends one ``Execute`` to
``prog``. Operands broadcast with numpy's rules; a one-element second operand (or a
Python number) uses the BroadcastScalar vertices.
"""

from __future__ import annotations

from numbers import Number
from typing import Any

import numpy as np

from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph import UNMAPPED, Graph
from poplar_api.popops import vertices as vx
from poplar_api.popops.layout import (
    ElemOperand,
    ScalarOperand,
    add_vertices,
    per_tile_constant,
    plan_regions,
)
from poplar_api.popops.ops import BINARY_OPS, UNARY_OPS, result_type
from poplar_api.poputil import cloneTensor
from poplar_api.program import Execute, Sequence
from poplar_api.tensor import Tensor
from poplar_api.types import ALL_TYPES, FLOAT, HALF, INT, UNSIGNED_INT, Type

__all__ = [
    "addCodelets",
    "binary_op",
    "cast",
    "fill",
    "scaledAddTo",
    "scaledSubtractFrom",
    "unary_op",
    "zero",
]

_SCALED_TYPES = (FLOAT, HALF, INT, UNSIGNED_INT)


# ---------------------------------------------------------------------- checks
def _graph(graph: Any, api: str) -> Graph:
    if not isinstance(graph, Graph):
        raise GraphError(f"popops.{api}: expected a Graph, got {type(graph).__name__}")
    return graph


def _prog(prog: Any, api: str) -> Sequence:
    if not isinstance(prog, Sequence):
        raise GraphError(
            f"popops.{api}: prog must be a program.Sequence to append to, got {type(prog).__name__}"
        )
    return prog


def _tensor(graph: Graph, t: Any, api: str, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise GraphError(f"popops.{api}: {what} must be a Tensor, got {type(t).__name__}")
    if t.graph is not graph._state:
        raise GraphError(f"popops.{api}: {what} tensor '{t.name}' belongs to another graph")
    tiles = graph._state.space(t.elementType()).tile[t.flat_index()]
    if (tiles == UNMAPPED).any():
        first = int(np.flatnonzero(tiles == UNMAPPED)[0])
        raise GraphError(
            f"popops.{api}: {what} tensor '{t.name}' is not mapped to tiles (flat element "
            f"{first} has no tile); hint: map it first, e.g. poputil.mapTensorLinearly(graph, t)"
        )
    return t


def _describe(tensors: list[Tensor]) -> str:
    return ", ".join(f"'{t.name}' {t.shape()}" for t in tensors)


def _result_shape(tensors: list[Tensor], api: str) -> list[int]:
    try:
        return list(np.broadcast_shapes(*(tuple(t.shape()) for t in tensors)))
    except ValueError:
        raise TensorError(
            f"popops.{api}: shapes do not broadcast: {_describe(tensors)}; each dimension "
            "must match or be 1 (numpy rules)"
        ) from None


def _broadcast_to(t: Tensor, shape: list[int]) -> Tensor:
    """A view of ``t`` broadcast to ``shape`` (already checked to be compatible)."""
    if t.shape() == shape:
        return t
    view = t.reshape([1] * (len(shape) - t.rank()) + t.shape())
    for d, n in enumerate(shape):
        if view.dim(d) == 1 and n != 1:
            view = view.broadcast(n, d)
    return view


def _check_no_aliases(t: Tensor, api: str) -> None:
    ids = t.flat_index()
    if np.unique(ids).size != ids.size:
        raise TensorError(
            f"popops.{api}: the in-place operand '{t.name}' {t.shape()} refers to some "
            "element more than once (a broadcast view?); hint: use the out-of-place form"
        )


def _elem(t: Tensor, shape: list[int], name: str) -> ElemOperand:
    return ElemOperand(t.elementType(), _broadcast_to(t, shape).flat_index(), name)


def _execute(graph: Graph, prog: Sequence, name: str, ref: Tensor, operands, classes) -> None:
    """Plan the regions of ``ref``, add the vertices and append the Execute."""
    cs = graph.addComputeSet(name)
    if ref.numElements():
        workers = graph.getTarget().getNumWorkerContexts()
        add_vertices(graph, cs, plan_regions(graph, ref, name, workers), operands, classes)
    prog.add(Execute(cs))


def _scalar_const(graph: Graph, t: Type, value: Any, ref: Tensor, name: str) -> ScalarOperand:
    tiles = graph._state.space(ref.elementType()).tile[ref.flat_index()]
    return ScalarOperand(t, per_tile_constant(graph, t, value, tiles, name), name)


def _scalar_tensor(t: Tensor) -> ScalarOperand:
    element = int(t.flat_index()[0])
    return ScalarOperand(t.elementType(), lambda tile: element, t.name)


# --------------------------------------------------------------------- binary
def binary_op(
    graph: Graph,
    op: str,
    A: Tensor,
    B: Tensor | Number,
    prog: Sequence,
    debugName: str = "",
    api: str = "",
    in_place: bool = False,
) -> Tensor | None:
    """``A op B`` elementwise (in place into ``A`` when ``in_place``); see module doc."""
    api = api or op.lower()
    graph, prog = _graph(graph, api), _prog(prog, api)
    opdef = BINARY_OPS[op]
    A = _tensor(graph, A, api, "A")
    constant = isinstance(B, Number | np.number) and not isinstance(B, Tensor)
    if not constant:
        B = _tensor(graph, B, api, "B")
    b_type = A.elementType() if constant else B.elementType()
    out_t = result_type(opdef, [A.elementType(), b_type], api)
    name = debugName or api
    shape = A.shape() if constant else _result_shape([A, B], api)
    if in_place:
        if out_t != A.elementType():
            raise TypeMismatchError(
                f"popops.{api}: {op} gives {out_t.name}, which cannot be written into "
                f"'{A.name}' ({A.elementType().name}); hint: use the out-of-place form"
            )
        if shape != A.shape():
            raise TensorError(
                f"popops.{api}: in-place operand A {_describe([A])} must have the result "
                f"shape {shape} (B {_describe([B])} is broadcast to A, not A to B)"
            )
        _check_no_aliases(A, api)
        ref = out = A
    else:
        ref = A if A.shape() == shape else B
        if ref.shape() != shape:
            raise TensorError(
                f"popops.{api}: neither operand has the result shape {shape}: "
                f"{_describe([A, B])}; hint: broadcast one operand explicitly"
            )
        out = cloneTensor(graph, ref, f"{name}/out", out_t)
    dest = "in1Out" if in_place else "out"
    scalar_b = constant or (ref is A and B.numElements() == 1 and A.numElements() > 1)
    operands: dict[str, Any]
    if scalar_b:
        b = _scalar_const(graph, b_type, B, out, f"{name}/B") if constant else _scalar_tensor(B)
        operands = {"data": _elem(A, shape, A.name), "B": b}
        if not in_place:
            operands["out"] = _elem(out, shape, out.name)

        def classes(layout: str) -> type:
            return vx.broadcast_scalar_vertex(op, A.elementType(), layout, in_place)

    else:
        operands = {dest: _elem(out, shape, out.name)} if not in_place else {}
        operands["in1Out" if in_place else "in1"] = _elem(A, shape, A.name)
        operands["in2"] = _elem(B, shape, B.name)

        def classes(layout: str) -> type:
            return vx.binary_vertex(op, A.elementType(), layout, in_place)

    _execute(graph, prog, name, out, operands, classes)
    return None if in_place else out


# ---------------------------------------------------------------------- unary
def unary_op(
    graph: Graph,
    op: str,
    A: Tensor,
    prog: Sequence,
    debugName: str = "",
    api: str = "",
    in_place: bool = False,
) -> Tensor | None:
    """``op(A)`` elementwise (in place into ``A`` when ``in_place``)."""
    api = api or op.lower()
    graph, prog = _graph(graph, api), _prog(prog, api)
    A = _tensor(graph, A, api, "A")
    result_type(UNARY_OPS[op], [A.elementType()], api)
    name = debugName or api
    if in_place:
        _check_no_aliases(A, api)
        operands = {"inOut": _elem(A, A.shape(), A.name)}
        out = A
    else:
        out = cloneTensor(graph, A, f"{name}/out")
        operands = {"in": _elem(A, A.shape(), A.name), "out": _elem(out, A.shape(), out.name)}
    _execute(
        graph,
        prog,
        name,
        out,
        operands,
        lambda layout: vx.unary_vertex(op, A.elementType(), layout, in_place),
    )
    return None if in_place else out


def cast(graph: Graph, src: Tensor, dstType: Type, prog: Sequence, debugName: str = "") -> Tensor:
    """A new tensor holding ``src`` converted to ``dstType`` (C conversion rules)."""
    api = "cast"
    graph, prog = _graph(graph, api), _prog(prog, api)
    src = _tensor(graph, src, api, "src")
    if dstType not in ALL_TYPES:
        raise TypeMismatchError(f"popops.cast: {dstType!r} is not a poplar_api element type")
    name = debugName or "cast"
    out = cloneTensor(graph, src, f"{name}/out", dstType)
    shape = src.shape()
    operands = {"src": _elem(src, shape, src.name), "dst": _elem(out, shape, out.name)}
    _execute(
        graph,
        prog,
        name,
        out,
        operands,
        lambda layout: vx.cast_vertex(src.elementType(), dstType, layout),
    )
    return out


# --------------------------------------------------------------- scaled add
def _scaled(graph, A, B, scale, prog, debugName, subtract: bool) -> None:
    api = "scaledSubtractFrom" if subtract else "scaledAddTo"
    graph, prog = _graph(graph, api), _prog(prog, api)
    A, B = _tensor(graph, A, api, "A"), _tensor(graph, B, api, "B")
    t = A.elementType()
    if B.elementType() != t or t not in _SCALED_TYPES:
        raise TypeMismatchError(
            f"popops.{api}: A '{A.name}' is {t.name} and B '{B.name}' is "
            f"{B.elementType().name}; both must be one of "
            f"{', '.join(x.name for x in _SCALED_TYPES)}"
        )
    if A.shape() != B.shape():
        raise TensorError(f"popops.{api}: A and B must have the same shape: {_describe([A, B])}")
    _check_no_aliases(A, api)
    name = debugName or api
    if isinstance(scale, Tensor):
        scale = _tensor(graph, scale, api, "scale")
        if scale.numElements() != 1:
            raise TensorError(
                f"popops.{api}: scale tensor '{scale.name}' has shape {scale.shape()} "
                f"({scale.numElements()} elements); it must hold exactly one element"
            )
        if scale.elementType() != t:
            raise TypeMismatchError(
                f"popops.{api}: scale '{scale.name}' is {scale.elementType().name}, A is "
                f"{t.name}; hint: cast the scale to {t.name}"
            )
        s = _scalar_tensor(scale)
    elif isinstance(scale, Number | np.number) and not isinstance(scale, bool):
        s = _scalar_const(graph, t, scale, A, f"{name}/scale")
    else:
        raise GraphError(
            f"popops.{api}: scale must be a number or a one-element Tensor, got {scale!r}"
        )
    operands = {"A": _elem(A, A.shape(), A.name), "B": _elem(B, A.shape(), B.name), "scaleB": s}
    _execute(
        graph, prog, name, A, operands, lambda layout: vx.scaled_add_vertex(t, layout, subtract)
    )


def scaledAddTo(
    graph: Graph,
    A: Tensor,
    B: Tensor,
    scale: float | Tensor,
    prog: Sequence,
    debugName: str = "",
) -> None:
    """``A += scale * B``; ``scale`` is a number or a one-element tensor of A's type."""
    _scaled(graph, A, B, scale, prog, debugName, False)


def scaledSubtractFrom(
    graph: Graph,
    A: Tensor,
    B: Tensor,
    scale: float | Tensor,
    prog: Sequence,
    debugName: str = "",
) -> None:
    """``A -= scale * B``; ``scale`` is a number or a one-element tensor of A's type."""
    _scaled(graph, A, B, scale, prog, debugName, True)


# ----------------------------------------------------------------------- fill
def fill(graph: Graph, t: Tensor, value: Any, prog: Sequence, debugName: str = "") -> None:
    """Set every element of ``t`` to ``value`` (Fill / Fill2d worker vertices)."""
    api = "fill"
    graph, prog = _graph(graph, api), _prog(prog, api)
    t = _tensor(graph, t, api, "t")
    if not isinstance(value, Number | np.number):
        raise GraphError(f"popops.fill: value must be a number, got {value!r}")
    name = debugName or api
    # Every element once, even when t is a broadcast view.
    ids = np.unique(t.flat_index())
    ref = Tensor(graph._state, t.elementType(), ids, t.name)
    operands = {
        "out": ElemOperand(t.elementType(), ids, t.name),
        "in": _scalar_const(graph, t.elementType(), value, ref, f"{name}/value"),
    }
    _execute(
        graph, prog, name, ref, operands, lambda layout: vx.fill_vertex(t.elementType(), layout)
    )


def zero(graph: Graph, t: Tensor, prog: Sequence, debugName: str = "") -> None:
    """Set every element of ``t`` to 0."""
    fill(graph, t, 0, prog, debugName or "zero")


def addCodelets(graph: Graph) -> None:
    """Make the popops vertices available to ``graph``.

    The vertex classes are generated per operation, type and layout when first used
    and registered by ``addVertex``, so this only checks the argument; it exists so
    Poplar programs port unchanged.
    """
    _graph(graph, "addCodelets")
