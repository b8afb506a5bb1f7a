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
from poplar_api.graph_bulk import bulk_construction
from poplar_api.popops import vertices as vx
from poplar_api.popops.layout import (
    ElemOperand,
    ScalarOperand,
    add_vertices,
    per_tile_constant,
    plan_tiles,
    tile_regions,
)
from poplar_api.popops.ops import (
    BINARY_OPS,
    SCALAR_ONLY_BINARY_OPS,
    TERNARY_TYPES,
    UNARY_OPS,
    result_type,
)
from poplar_api.popops.plans import (
    binary_vector_width,
    broadcast_scalar_plan,
    cast_plan,
    fill_plan,
    general_plan,
    grain_of,
    region_limits,
    scaled_plan,
    ternary_plan,
    unary_plan,
)
from poplar_api.popops.rearrange import regroupIfBeneficial
from poplar_api.poputil import cloneTensor, mapTensorLinearly
from poplar_api.program import Execute, Sequence
from poplar_api.tensor import Tensor
from poplar_api.types import ALL_TYPES, BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Type

__all__ = [
    "addCodelets",
    "binary_op",
    "cast",
    "fill",
    "scaledAddTo",
    "scaledSubtractFrom",
    "ternary_op",
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
    return _mapped(graph, t, api, what)[0]


def _mapped(graph: Graph, t: Any, api: str, what: str) -> tuple[Tensor, np.ndarray]:
    """``t`` checked to be a mapped tensor of ``graph``, and its elements' tiles (which
    the op hands to :func:`plan_tiles` when ``t``, or a clone mapped like it, is the
    tensor whose tiles it plans over: asked once, not again)."""
    if not isinstance(t, Tensor):
        raise GraphError(f"popops.{api}: {what} must be a Tensor, got {type(t).__name__}")
    if not graph.owns(t):
        raise GraphError(f"popops.{api}: {what} tensor '{t.name}' belongs to another graph")
    tiles = graph.elementTiles(t, readonly=True)
    if tiles.size and int(tiles.min()) < 0 and (tiles == UNMAPPED).any():
        first = int(np.flatnonzero(tiles == UNMAPPED)[0])
        raise GraphError(
            f"popops.{api}: {what} tensor '{t.name}' is not mapped to tiles (flat element "
            f"{first} has no tile); hint: map it first, e.g. poputil.mapTensorLinearly(graph, t)"
        )
    return t, tiles


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
    if t.containsAliases():
        raise TensorError(
            f"popops.{api}: the in-place operand '{t.name}' {t.shape()} refers to some "
            "element more than once (a broadcast view?); hint: use the out-of-place form"
        )


def _elem(t: Tensor, shape: list[int], name: str) -> ElemOperand:
    return ElemOperand(t.elementType(), _broadcast_to(t, shape).flatten(), name)


def _has_aliases(t: Tensor) -> bool:
    return t.containsAliases()


def _create_output(graph: Graph, inputs: list[Tensor], out_t: Type, name: str) -> Tensor:
    """``createOutputForElementWiseOp`` (``lib/popops/ElementWiseUtil.cpp``).

    ``inputs`` all have the result shape (broadcast views included). Inputs that
    refer to an element more than once (broadcasts) are skipped; of the others the
    one with the fewest elements on its busiest tile is cloned (ties: more tiles,
    then fewer contiguous regions). With none, a one-element first input is cloned,
    else a new variable is mapped linearly with grain ``dataPathWidth / (8 · size)``.
    """
    best: tuple | None = None
    best_t: Tensor | None = None
    for t in inputs:
        if _has_aliases(t):
            continue
        regions = tile_regions(graph, t, name)
        sizes = [sum(tr.sizes) for tr in regions]
        key = (max(sizes, default=0), -len(regions), sum(len(tr.regions) for tr in regions))
        if best is None or key < best:
            best, best_t = key, t
    if best_t is None and inputs[0].numElements() == 1:
        best_t = inputs[0]
    if best_t is not None:
        return cloneTensor(graph, best_t, f"{name}/out", out_t)
    out = graph.addVariable(out_t, inputs[0].shape(), f"{name}/out")
    grain = max(1, graph.getTarget().getDataPathWidth() // (8 * out_t.size))
    mapTensorLinearly(graph, out, 0, grain)
    return out


@bulk_construction
def _execute(
    graph: Graph,
    prog: Sequence,
    name: str,
    ref: Tensor,
    operands: dict[str, Any],
    plan_tile: Any,
    tiles: np.ndarray | None = None,
) -> None:
    """Add the vertices ``plan_tile(regions)`` chooses on every tile; append the Execute.
    ``tiles``: ``ref``'s elements' tiles when the op has them already."""
    cs = graph.addComputeSet(name)
    add_vertices(graph, cs, plan_tiles(graph, ref, name, plan_tile, tiles), operands)
    prog.add(Execute(cs))


def _scalar_const(graph: Graph, t: Type, value: Any, ref: Tensor, name: str) -> ScalarOperand:
    return per_tile_constant(graph, t, value, graph.elementTiles(ref, readonly=True), name)


def _scalar_tensor(t: Tensor) -> ScalarOperand:
    return ScalarOperand.single(t)


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
    A, a_tiles = _mapped(graph, A, api, "A")
    constant = isinstance(B, Number | np.number) and not isinstance(B, Tensor)
    b_tiles = None
    if not constant:
        B, b_tiles = _mapped(graph, B, api, "B")
    b_type = A.elementType() if constant else B.elementType()
    out_t = result_type(opdef, [A.elementType(), b_type], api)
    name = debugName or api
    shape = A.shape() if constant else _result_shape([A, B], api)
    if op in SCALAR_ONLY_BINARY_OPS and not constant and B.numElements() != 1:
        raise TensorError(
            f"popops.{api}: {op} needs a one-element second operand (Poplibs has only "
            f"BroadcastScalar vertices for it); B {_describe([B])} has "
            f"{B.numElements()} elements; hint: pass a number or a one-element tensor"
        )
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
        out_tiles = a_tiles
    else:
        ref = A if A.shape() == shape else B
        out_tiles = None
        if ref.shape() == shape and not _has_aliases(ref):
            out = cloneTensor(graph, ref, f"{name}/out", out_t)
            out_tiles = a_tiles if ref is A else b_tiles  # (the clone is mapped like ref)
        else:
            # An operand broadcast (e.g. [3,1] and [1,4], or a scalar expanded to
            # the result's shape): Poplibs' createOutputForElementWiseOp skips
            # aliased inputs, and maps a new variable linearly when none is left.
            views = [_broadcast_to(A, shape)]
            views += [] if constant else [_broadcast_to(B, shape)]
            out = _create_output(graph, views, out_t, name)
            ref = out
    dest = "in1Out" if in_place else "out"
    t = A.elementType()
    # ElementWise.cpp binaryOp: a one-element second operand always uses the
    # BroadcastScalar vertices; a one-element first operand does too when the op is
    # commutative and not in place (operands swapped). Every op/type ipusim supports
    # has a scalar-broadcast vertex (haveScalarBroadcastVertexForOp).
    scalar_b = constant or (ref is A and B.numElements() == 1)
    scalar_a = not scalar_b and not in_place and A.numElements() == 1 and op in _COMMUTATIVE
    operands: dict[str, Any]
    if scalar_b or scalar_a:
        if scalar_a:
            data, b = B, _scalar_tensor(A)
        else:
            data = A
            b = _scalar_const(graph, b_type, B, out, f"{name}/B") if constant else _scalar_tensor(B)
        operands = {"data": _elem(data, shape, data.name), "B": b}
        if not in_place:
            operands["out"] = _elem(out, shape, out.name)
        plan = broadcast_scalar_plan(graph, op, t, out_t, in_place)
    else:
        operands = {dest: _elem(out, shape, out.name)} if not in_place else {}
        operands["in1Out" if in_place else "in1"] = _elem(A, shape, A.name)
        operands["in2"] = _elem(B, shape, B.name)
        limits = region_limits(binary_vector_width(op, t, out_t), t != HALF and out_t != FLOAT)
        plan = general_plan(
            graph,
            grain_of(graph, t),
            limits,
            vx.binary_vertex(op, t, "1D", in_place),
            vx.binary_vertex(op, t, "2D", in_place),
        )

    _execute(graph, prog, name, out, operands, plan, out_tiles)
    return None if in_place else out


#: ``isBinaryOpCommutative`` (ElementWise.cpp).
_COMMUTATIVE = frozenset(
    {
        "ADD", "BITWISE_AND", "BITWISE_OR", "BITWISE_XOR", "BITWISE_XNOR", "EQUAL",
        "LOGICAL_AND", "LOGICAL_OR", "MAXIMUM", "MINIMUM", "MULTIPLY", "NOT_EQUAL",
    }
)  # fmt: skip


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
    A, a_tiles = _mapped(graph, A, api, "A")  # (out is A, or a clone mapped like it)
    out_t = result_type(UNARY_OPS[op], [A.elementType()], api)
    name = debugName or api
    if in_place:
        if out_t != A.elementType():
            raise TypeMismatchError(
                f"popops.{api}: {op} gives {out_t.name}, which cannot be written into "
                f"'{A.name}' ({A.elementType().name}); hint: use the out-of-place form"
            )
        _check_no_aliases(A, api)
        operands = {"inOut": _elem(A, A.shape(), A.name)}
        out = A
    else:
        out = cloneTensor(graph, A, f"{name}/out", out_t)
        operands = {"in": _elem(A, A.shape(), A.name), "out": _elem(out, A.shape(), out.name)}
    _execute(
        graph,
        prog,
        name,
        out,
        operands,
        unary_plan(graph, op, A.elementType(), in_place, out_t),
        a_tiles,
    )
    return None if in_place else out


# -------------------------------------------------------------------- ternary

_TERNARY_ARGS = {"SELECT": ("A", "B", "pred"), "CLAMP": ("A", "lower", "upper")}


def _operand(graph: Graph, x: Any, api: str, what: str, allow_number: bool) -> Tensor | Number:
    if isinstance(x, Tensor):
        return _tensor(graph, x, api, what)
    if allow_number and isinstance(x, Number | np.number) and not isinstance(x, bool | np.bool_):
        return x
    need = "a Tensor or a number" if allow_number else "a Tensor"
    raise GraphError(f"popops.{api}: {what} must be {need}, got {type(x).__name__} {x!r}")


def _shape_of(x: Tensor | Number) -> list[int]:
    return x.shape() if isinstance(x, Tensor) else []


def _count(x: Tensor | Number) -> int:
    return x.numElements() if isinstance(x, Tensor) else 1


def ternary_op(
    graph: Graph,
    op: str,
    in1: Tensor | Number,
    in2: Tensor | Number,
    in3: Tensor | Number,
    prog: Sequence,
    debugName: str = "",
    api: str = "",
    in_place: bool = False,
) -> Tensor | None:
    """``SELECT`` (``in3 ? in1 : in2``) or ``CLAMP`` (``min(max(in1, in2), in3)``).

    Restates ``ternaryOp`` (``lib/popops/ElementWise.cpp``): the vertex is chosen from
    which operands have one element (``BroadcastClamp`` when both bounds do;
    ``BroadcastSelect`` when both values do and the selector does not;
    ``BroadcastSelectorSelect`` when the selector does; else ``Select``/``Clamp`` with
    all operands broadcast numpy-style), the output is made by
    ``createOutputForElementWiseOp`` and every tile's output regions are split over
    worker vertices (grain ``max(VW, 4)``, at least two grains, pieces within the
    codelet's repeat limit). Numbers stand for one-element operands (held as a
    constant on each tile).
    """
    api = api or op.lower()
    graph, prog = _graph(graph, api), _prog(prog, api)
    names = _TERNARY_ARGS[op]
    select = op == "SELECT"
    a = _operand(graph, in1, api, names[0], allow_number=select and not in_place)
    b = _operand(graph, in2, api, names[1], allow_number=True)
    c = _operand(graph, in3, api, names[2], allow_number=not select)
    tensors = [x for x in (a, b) if isinstance(x, Tensor)]
    if not tensors:
        raise GraphError(
            f"popops.{api}: {names[0]} and {names[1]} are both numbers, so their element "
            f"type is unknown; hint: pass one of them as a tensor"
        )
    t = tensors[0].elementType()
    for what, x in zip(names[:2], (a, b), strict=True):
        if isinstance(x, Tensor) and x.elementType() != t:
            raise TypeMismatchError(
                f"popops.{api}: {names[0]} and {names[1]} must have one element type; "
                f"{what} '{x.name}' is {x.elementType().name}, the other is {t.name}; "
                f"hint: cast one with popops.cast"
            )
    if t not in TERNARY_TYPES[op]:
        supported = ", ".join(sorted(x.name for x in TERNARY_TYPES[op]))
        raise TypeMismatchError(
            f"popops.{api}: {op} does not support element type {t.name} "
            f"({names[0]}); supported types: {supported}"
        )
    want3 = BOOL if select else t
    if isinstance(c, Tensor) and c.elementType() != want3:
        hint = "make a mask with e.g. popops.neq(graph, x, 0, prog)" if select else "cast it"
        raise TypeMismatchError(
            f"popops.{api}: {names[2]} '{c.name}' is {c.elementType().name}; it must be "
            f"{want3.name}; hint: {hint}"
        )
    n1, n2, n3 = _count(a), _count(b), _count(c)
    if select:
        if n1 == 1 and n2 == 1 and n3 > 1:
            kind, refs = "BroadcastSelect", [c]
        elif n3 == 1:
            kind, refs = "BroadcastSelectorSelect", [a, b]
        else:
            kind, refs = "Select", [a, b, c]
    elif n2 == 1 and n3 == 1:
        kind, refs = "BroadcastClamp", [a]
    else:
        kind, refs = "Clamp", [a, b, c]
    args = [x for x in (a, b, c) if isinstance(x, Tensor)]
    shapes = [_shape_of(x) for x in refs]
    try:
        shape = list(np.broadcast_shapes(*(tuple(s) for s in shapes)))
    except ValueError:
        found = ", ".join(
            f"{n} {_shape_of(x)}"
            for n, x in zip(names, (a, b, c), strict=True)
            if any(x is r for r in refs)
        )
        raise TensorError(
            f"popops.{api}: shapes do not broadcast: {found}; each dimension must match "
            f"or be 1 (numpy rules)"
        ) from None
    name = debugName or api
    if in_place:
        if kind == "BroadcastSelect":
            raise TensorError(
                f"popops.{api}: A and B have one element but pred {_describe([c])} has "
                f"{n3}; the result cannot be written into A (Poplibs has no in-place "
                f"BroadcastSelect); hint: use popops.select"
            )
        if a.shape() != shape:
            raise TensorError(
                f"popops.{api}: in-place operand A {_describe([a])} must have the result "
                f"shape {shape} (the other operands are broadcast to A, not A to them)"
            )
        _check_no_aliases(a, api)
        out = a
    else:
        views = [_broadcast_to(x, shape) for x in refs if isinstance(x, Tensor)]
        if not views:
            views = [_broadcast_to(args[0], shape)]
        out = _create_output(graph, views, t, name)
    fields = ["in1Out" if in_place else "in1", "in2", "in3"]
    scalars = vx.TERNARY_KINDS[kind]
    operands: dict[str, Any] = {}
    for field, x, scalar, xt in zip(fields, (a, b, c), scalars, (t, t, want3), strict=True):
        if not scalar and not isinstance(x, Tensor):
            # A number in a per-element field: a one-element constant on the tile of
            # the first output element, broadcast (map puts its constants likewise).
            const = graph.addConstant(xt, [1], x, f"{name}/{field}")
            if out.numElements():
                graph.mapElements(const, graph.elementTiles(out.flatten().slice(0, 1)))
            operands[field] = _elem(const, shape, const.name)
        elif not scalar:
            operands[field] = _elem(x, shape, x.name)
        elif isinstance(x, Tensor):
            operands[field] = _scalar_tensor(x)
        else:
            operands[field] = _scalar_const(graph, xt, x, out, f"{name}/{field}")
    if not in_place:
        operands["out"] = _elem(out, shape, out.name)
    _execute(graph, prog, name, out, operands, ternary_plan(graph, kind, t, in_place))
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
        cast_plan(graph, src.elementType(), dstType),
    )
    return out


# --------------------------------------------------------------- scaled add
def _scaled(graph, A, B, scale, prog, debugName, subtract: bool) -> None:
    api = "scaledSubtractFrom" if subtract else "scaledAddTo"
    graph, prog = _graph(graph, api), _prog(prog, api)
    (A, a_tiles), B = _mapped(graph, A, api, "A"), _tensor(graph, B, api, "B")
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
    # ScaledAdd.cpp scaledArithmetic (attemptRegroup): B is first regrouped to A's
    # grouping when the two differ (popops::rearrange::regroupIfBeneficial).
    B = regroupIfBeneficial(graph, B, A, prog, f"{name}/regroup")
    operands = {"A": _elem(A, A.shape(), A.name), "B": _elem(B, A.shape(), B.name), "scaleB": s}
    _execute(graph, prog, name, A, operands, scaled_plan(graph, t, subtract), a_tiles)


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
    # Every element once, in element order, even when t is a broadcast view.
    _, first = np.unique(t.flat_index(), return_index=True)
    ref = t.flatten().elements(first)
    operands = {
        "out": ElemOperand(t.elementType(), ref, t.name),
        "in": _scalar_const(graph, t.elementType(), value, ref, f"{name}/value"),
    }
    _execute(graph, prog, name, ref, operands, fill_plan(graph, t.elementType()))


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
