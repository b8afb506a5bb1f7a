"""``popops.map`` and ``popops.mapInPlace``: elementwise expressions over tensors.

Restates ``popops::map`` / ``mapInPlace`` (``lib/popops/ElementWise.cpp``):

* **Fused** (``analyseExpr``, ``lib/popops/ExpressionGenerator.cpp``): when every tensor
  passed has one shape or one element, none refers to an element twice, and the
  expression has more than one operation (or a single one on one-element tensors
  with a small constant or one of ADD/MULTIPLY/SUBTRACT/EQUAL,
  ``validateScalarOperations``), one generated vertex (``popops::map::Expr1D<...>``)
  evaluates the whole tree per element, rounding HALF results after every operation.
  One-element tensors are broadcast to the common shape.
* **Op by op** otherwise: every operation node runs as its own popops call
  (``unary_op``, ``binary_op``, ``ternary_op``, ``cast``; one compute set each), whose
  operands broadcast numpy-style (``broadcastToMatch``). So the result has the
  broadcast shape of the operands the expression *uses*; tensors it does not use do
  not matter. A bare placeholder (``map(_1)``) is a copy. Constants become one-element
  constants; an untyped constant takes the type of the other operand.
* **In place** (op by op): the operations on the leftmost path run in place when its
  leaf is the last use of ``_1`` in the expression; otherwise the result is copied
  into ``ts[0]`` (``mapInPlace``, ``doInPlace``).

Incompatible shapes raise a :class:`TensorError` naming the shapes.
Not modelled: Poplibs' expression optimiser (``optimise``, e.g. ``Pow(x, 2)`` ->
``Square``) and the mixed-precision scalar-multiply special case.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.errors import GraphError, TensorError
from poplar_api.graph import Graph
from poplar_api.popops import vertices as vx
from poplar_api.popops.elementwise import (
    _check_no_aliases,
    _create_output,
    _elem,
    _execute,
    _graph,
    _has_aliases,
    _prog,
    _tensor,
    binary_op,
    cast,
    ternary_op,
    unary_op,
)
from poplar_api.popops.expr import (
    BinaryOp,
    Cast,
    Const,
    Expr,
    PlaceHolder,
    TernaryOp,
    UnaryOp,
    as_expr,
)
from poplar_api.popops.layout import ATOMIC_STORE_GRANULARITY, split_pieces, split_regions
from poplar_api.poputil import cloneTensor
from poplar_api.program import Copy, Sequence
from poplar_api.tensor import Tensor
from poplar_api.types import BOOL, FLOAT, HALF, INT, Type

__all__ = ["map", "mapInPlace"]

#: ``validateScalarOperations`` (ExpressionGenerator.cpp): constants and binary ops
#: for which a one-operation expression on one-element tensors is still fused.
_SCALAR_FLOAT_CONSTANTS = (-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0)
_SCALAR_UINT_CONSTANTS = (0, 1, 2)
_SCALAR_INT_CONSTANTS = (-2, -1, 0, 1, 2)
_SCALAR_BINARY_OPS = frozenset({"ADD", "MULTIPLY", "SUBTRACT", "EQUAL"})
_NOT_FUSABLE = frozenset({"VARIANCE_TO_INV_STD_DEV", "INV_STD_DEV_TO_VARIANCE"})


def _children(e: Expr) -> list[Expr]:
    if isinstance(e, TernaryOp):
        return [e.a, e.b, e.c]
    if isinstance(e, BinaryOp):
        return [e.a, e.b]
    if isinstance(e, UnaryOp | Cast):
        return [e.a]
    return []


def _nodes(e: Expr) -> list[Expr]:
    """Every node, parents before children, left to right."""
    out = [e]
    for child in _children(e):
        out.extend(_nodes(child))
    return out


def _const_types(e: Expr, types: list[Type], want: Type | None = None) -> dict[int, Type]:
    """``getConstType``: the type of every constant node (by ``id``), as evaluation
    types it (an untyped constant takes its sibling's type)."""
    found: dict[int, Type] = {}

    def walk(node: Expr, hint: Type | None) -> None:
        if isinstance(node, Const):
            found[id(node)] = node.type or hint or node.default_type()
            return
        kids = _children(node)
        if not kids:
            return
        if isinstance(node, Cast):
            walk(node.a, None)
            return
        if isinstance(node, UnaryOp):
            walk(node.a, hint)
            return
        untyped = [isinstance(k, Const) and k.type is None for k in kids]
        value_kids = kids[:2] if isinstance(node, TernaryOp | BinaryOp) else kids
        typed = [k for k, u in zip(value_kids, untyped, strict=False) if not u]
        sibling = typed[0].result_type(types) if typed else None
        for i, k in enumerate(kids):
            if isinstance(node, TernaryOp) and i == 2:
                walk(k, BOOL if node.OP == "SELECT" else sibling)
            elif isinstance(node, BinaryOp) and i == 1 and not untyped[0]:
                walk(k, kids[0].result_type(types))
            else:
                walk(k, sibling if untyped[i] else hint)

    walk(e, want)
    return found


def _scalar_ok(e: Expr, const_types: dict[int, Type]) -> bool:
    """``validateScalarOperations`` for a one-operation expression on scalars."""
    consts = [n for n in _nodes(e) if isinstance(n, Const)]
    if len(consts) == 1:
        c = consts[0]
        t = const_types[id(c)]
        if t in (FLOAT, HALF):
            return float(c.value) in _SCALAR_FLOAT_CONSTANTS
        if t is INT:
            return int(c.value) in _SCALAR_INT_CONSTANTS
        return int(c.value) in _SCALAR_UINT_CONSTANTS
    binary = [n.OP for n in _nodes(e) if isinstance(n, BinaryOp)]
    return len(binary) == 1 and binary[0] in _SCALAR_BINARY_OPS


def _fusable(e: Expr, ts: list[Tensor], const_types: dict[int, Type]) -> bool:
    """``analyseExpr``: may one generated vertex evaluate ``e`` over ``ts``?"""
    shape: list[int] | None = None
    for t in ts:
        if t.numElements() == 1:
            continue
        if shape is None:
            shape = t.shape()
        if t.shape() != shape:
            return False
    if any(_has_aliases(t) for t in ts):
        return False
    nodes = _nodes(e)
    for n in nodes:
        if isinstance(n, BinaryOp) and n.OP in _NOT_FUSABLE:
            return False
        if isinstance(n, Const) and isinstance(n.value, float) and not np.isfinite(n.value):
            return False
    num_ops = sum(isinstance(n, UnaryOp | BinaryOp | TernaryOp | Cast) for n in nodes)
    if num_ops > 1:
        return True
    return shape is None and num_ops == 1 and _scalar_ok(e, const_types)


def _map_impl(
    graph: Graph, expr: Any, ts: list[Tensor], prog: Sequence, debugName: str, in_place: bool
) -> Tensor | None:
    api = "mapInPlace" if in_place else "map"
    graph, prog = _graph(graph, api), _prog(prog, api)
    expr = as_expr(expr)
    if isinstance(ts, Tensor):
        ts = [ts]
    if not isinstance(ts, list | tuple):
        raise GraphError(
            f"popops.{api}: ts must be a list of Tensors, got {type(ts).__name__}; hint: "
            f"pass [a, b] for placeholders _1, _2"
        )
    ts = [_tensor(graph, t, api, f"ts[{i}]") for i, t in enumerate(ts)]
    used = expr.placeholders()
    if not ts or (used and max(used) > len(ts)):
        raise GraphError(
            f"popops.{api}: expression {expr.key()} uses placeholders "
            f"{sorted(used)} but {len(ts)} tensor(s) were given"
        )
    types = [t.elementType() for t in ts]
    out_t = expr.result_type(types)
    const_types = _const_types(expr, types)
    name = debugName or api
    if _fusable(expr, ts, const_types):
        return _fused(graph, expr, ts, tuple(types), out_t, prog, name, in_place)
    if in_place and out_t != ts[0].elementType():
        raise TensorError(
            f"popops.mapInPlace: result ({out_t.name}) must have the type of ts[0] "
            f"'{ts[0].name}' ({ts[0].elementType().name})"
        )
    return _op_by_op(graph, expr, ts, const_types, prog, name, in_place)


def _fused(
    graph: Graph,
    expr: Expr,
    ts: list[Tensor],
    types: tuple[Type, ...],
    out_t: Type,
    prog: Sequence,
    name: str,
    in_place: bool,
) -> Tensor | None:
    """``generateAndExecuteMappedOperations``: one generated vertex per tile region set."""
    vectors = [t for t in ts if t.numElements() != 1]
    # all one element: the highest-rank input's shape
    shape = vectors[0].shape() if vectors else max(ts, key=lambda t: t.rank()).shape()
    if in_place:
        if ts[0].shape() != shape or out_t != ts[0].elementType():
            raise TensorError(
                f"popops.mapInPlace: result ({out_t.name} {shape}) must match ts[0] "
                f"'{ts[0].name}' ({ts[0].elementType().name} {ts[0].shape()})"
            )
        _check_no_aliases(ts[0], "mapInPlace")
        out = ts[0]
    elif vectors:
        out = _create_output(graph, vectors, out_t, name)
    else:
        out = cloneTensor(graph, max(ts, key=lambda t: t.rank()), f"{name}/out", out_t)
    operands: dict[str, Any] = {
        ("in1Out" if in_place and i == 0 else f"in{i + 1}"): _elem(t, shape, t.name)
        for i, t in enumerate(ts)
    }
    if not in_place:
        operands["out"] = _elem(out, shape, out.name)
    _execute(graph, prog, name, out, operands, _map_plan(graph, expr, types, out_t, in_place))
    return None if in_place else out


def _map_plan(graph: Graph, expr: Expr, types: tuple, out_t: Any, in_place: bool) -> Any:
    """``executeCodelet`` (ExpressionGenerator.cpp) per tile.

    A tile with one region gets the generated multi-vertex unless that region holds at
    most one vector; otherwise the regions are split over the workers (grain
    ``max(VW, atomic store granularity)``, at least two grains) and each worker vertex
    gets its pieces concatenated. The multi-vertex exists when the output writes of one
    vectorisation width are atomic (``outSize * vectorisationWidth >= 4`` bytes).
    """
    target = graph.getTarget()
    workers = target.getNumWorkerContexts()
    vw = target.getVectorWidth(types[0])
    grain = max(vw, ATOMIC_STORE_GRANULARITY)
    vect = min(min(target.getVectorWidth(t), 8 // t.size) for t in (*types, out_t))
    has_multi = out_t.size * vect >= ATOMIC_STORE_GRANULARITY
    worker_cls = vx.map_vertex(expr, types, False, in_place)
    multi_cls = vx.map_vertex(expr, types, True, in_place) if has_multi else None

    def plan(regions: list) -> list:
        small = len(regions) == 1 and regions[0].size <= vw
        if multi_cls is not None and len(regions) == 1 and not small:
            return [(multi_cls, regions, False)]
        split = split_regions([int(r.size) for r in regions], grain, workers, 2 * grain)
        return [(worker_cls, p, False) for p in split_pieces(regions, split)]

    return plan


class _OpByOp:
    """The non-fused ``map``: one popops call per operation node (``map`` in
    ElementWise.cpp's anonymous namespace), tracking in-place use of ``ts[0]``."""

    def __init__(self, graph, ts, const_types, prog, name, in_place) -> None:
        self.graph, self.ts, self.prog, self.name = graph, ts, prog, name
        self.const_types = const_types
        self.in_place = in_place
        self.visit = 0  # placeholder visits in traversal order
        self.in_place_visit = -1
        tiles = graph.elementTiles(ts[0].flatten().slice(0, min(1, ts[0].numElements())))
        self.const_tile = int(tiles[0]) if tiles.size and tiles[0] >= 0 else 0

    def find_last_first_placeholder(self, e: Expr) -> None:
        """The dry run: remember the last visit of ``_1`` (``inPlaceExpr``)."""
        if isinstance(e, PlaceHolder):
            if e.index == 1:
                self.in_place_visit = self.visit
            self.visit += 1
            return
        for child in _children(e):
            self.find_last_first_placeholder(child)

    def const(self, c: Const) -> Tensor:
        t = self.const_types[id(c)]
        tensor = self.graph.addConstant(t, [], c.value, f"{self.name}/<const>")
        self.graph.mapElements(tensor, self.const_tile)
        return tensor

    def value(self, e: Expr, in_place: bool, top: bool = False) -> tuple[Any, bool]:
        """(result tensor or number, whether it is ``ts[0]`` updated in place)."""
        g, prog, name = self.graph, self.prog, self.name
        if isinstance(e, Const):
            return self.const(e), False
        if isinstance(e, PlaceHolder):
            visit = self.visit
            self.visit += 1
            t = self.ts[e.index - 1]
            use = in_place and e.index == 1 and visit == self.in_place_visit
            if top and not use:
                copy = cloneTensor(g, t, f"{name}/copy")
                prog.add(Copy(t, copy))
                return copy, False
            return t, use
        if isinstance(e, Cast):
            a, _ = self.value(e.a, False)
            return cast(g, a, e.type, prog, name), False
        if isinstance(e, UnaryOp):
            a, ip = self.value(e.a, in_place)
            out = unary_op(g, e.OP, a, prog, name, "map", in_place=ip)
            return (a if ip else out), ip
        if isinstance(e, BinaryOp):
            a, ip = self.value(e.a, in_place)
            b = self.operand(e.b)
            out = binary_op(g, e.OP, a, b, prog, name, "map", in_place=ip)
            return (a if ip else out), ip
        if isinstance(e, TernaryOp):
            a, ip = self.value(e.a, in_place)
            b, c = self.operand(e.b), self.operand(e.c)
            out = ternary_op(g, e.OP, a, b, c, prog, name, "map", in_place=ip)
            return (a if ip else out), ip
        raise GraphError(f"popops.map: unknown expression node {e!r}")

    def operand(self, e: Expr) -> Any:
        """A non-leftmost operand: an untyped constant stays a number (a one-element
        constant per tile, as ``binary_op`` makes it)."""
        if isinstance(e, Const) and e.type is None:
            return e.value
        return self.value(e, False)[0]


def _op_by_op(
    graph: Graph,
    expr: Expr,
    ts: list[Tensor],
    const_types: dict[int, Type],
    prog: Sequence,
    name: str,
    in_place: bool,
) -> Tensor | None:
    run = _OpByOp(graph, ts, const_types, prog, name, in_place)
    do_in_place = in_place and not _has_aliases(ts[0])
    if do_in_place:
        run.find_last_first_placeholder(expr)
        run.visit = 0
    result, updated = run.value(expr, do_in_place, top=True)
    if not isinstance(result, Tensor):  # a bare constant
        result = run.const(expr)
    if not in_place:
        return result
    if not updated:
        if result.numElements() != ts[0].numElements() or result.shape() != ts[0].shape():
            raise TensorError(
                f"popops.mapInPlace: the result has shape {result.shape()}, which cannot "
                f"be written into ts[0] '{ts[0].name}' {ts[0].shape()}; hint: use "
                f"popops.map"
            )
        prog.add(Copy(result, ts[0]))
    return None


def map(graph: Graph, expr: Expr, ts: list[Tensor], prog: Sequence, debugName: str = "") -> Tensor:
    """A new tensor holding ``expr`` evaluated elementwise over ``ts`` (``_1`` = ts[0]).

    Operands broadcast numpy-style; see the module doc for when one fused vertex is
    used and when each operation runs on its own.

    Raises
    ------
    TensorError
        The shapes of the operands an operation uses do not broadcast.
    TypeMismatchError
        An operation does not support its operands' element types.
    """
    return _map_impl(graph, expr, ts, prog, debugName, False)


def mapInPlace(
    graph: Graph, expr: Expr, ts: list[Tensor], prog: Sequence, debugName: str = ""
) -> None:
    """Evaluate ``expr`` over ``ts`` and write the result into ``ts[0]``."""
    _map_impl(graph, expr, ts, prog, debugName, True)
