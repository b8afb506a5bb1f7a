"""``popops.map`` and ``popops.mapInPlace``: elementwise expressions over tensors.

An expression of one operation on placeholders (``_1 + _2``, ``Exp(_1)``, ``_1 * 2``)
runs on the UnaryOp/BinaryOp/BroadcastScalar vertices, as Poplibs does; any other
expression gets a generated fused vertex (``popops::map::Expr1D<...>``) evaluating the
whole tree per element, rounding HALF results after every operation.
"""

from __future__ import annotations

from typing import Any

from poplar_api.errors import GraphError, TensorError
from poplar_api.graph import Graph
from poplar_api.popops import vertices as vx
from poplar_api.popops.elementwise import (
    _check_no_aliases,
    _describe,
    _elem,
    _execute,
    _graph,
    _prog,
    _result_shape,
    _tensor,
    binary_op,
    unary_op,
)
from poplar_api.popops.expr import BinaryOp, Const, Expr, PlaceHolder, UnaryOp, as_expr
from poplar_api.popops.layout import ATOMIC_STORE_GRANULARITY, split_pieces, split_regions
from poplar_api.poputil import cloneTensor
from poplar_api.program import Sequence
from poplar_api.tensor import Tensor

__all__ = ["map", "mapInPlace"]


def _map_impl(
    graph: Graph, expr: Any, ts: list[Tensor], prog: Sequence, debugName: str, in_place: bool
) -> Tensor | None:
    api = "mapInPlace" if in_place else "map"
    graph, prog = _graph(graph, api), _prog(prog, api)
    expr = as_expr(expr)
    if isinstance(ts, Tensor):
        ts = [ts]
    ts = [_tensor(graph, t, api, f"ts[{i}]") for i, t in enumerate(ts)]
    used = expr.placeholders()
    if not ts or (used and max(used) > len(ts)):
        raise GraphError(
            f"popops.{api}: expression {expr.key()} uses placeholders "
            f"{sorted(used)} but {len(ts)} tensor(s) were given"
        )
    single = _single_op(graph, expr, ts, prog, debugName, in_place)
    if single is not False:
        return single
    types = tuple(t.elementType() for t in ts)
    out_t = expr.result_type(list(types))
    shape = _result_shape(ts, api)
    name = debugName or api
    if in_place:
        if ts[0].shape() != shape or out_t != ts[0].elementType():
            raise TensorError(
                f"popops.mapInPlace: result ({out_t.name} {shape}) must match ts[0] "
                f"'{ts[0].name}' ({ts[0].elementType().name} {ts[0].shape()})"
            )
        _check_no_aliases(ts[0], api)
        out = ts[0]
    else:
        ref = next((t for t in ts if t.shape() == shape), None)
        if ref is None:
            raise TensorError(
                f"popops.map: no operand has the result shape {shape}: {_describe(ts)}"
            )
        out = cloneTensor(graph, ref, f"{name}/out", out_t)
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


def _single_op(graph, expr: Expr, ts, prog, debugName, in_place) -> Any:
    """Run a one-operation expression with the Unary/BinaryOp vertices; False if not one."""
    if isinstance(expr, UnaryOp) and isinstance(expr.a, PlaceHolder):
        if in_place and expr.a.index != 1:
            return False
        return unary_op(graph, expr.OP, ts[expr.a.index - 1], prog, debugName, "map", in_place)
    if isinstance(expr, BinaryOp) and isinstance(expr.a, PlaceHolder):
        if in_place and expr.a.index != 1:
            return False
        if isinstance(expr.b, PlaceHolder):
            b: Any = ts[expr.b.index - 1]
        elif isinstance(expr.b, Const) and expr.b.type is None:
            b = expr.b.value
        else:
            return False
        a = ts[expr.a.index - 1]
        return binary_op(graph, expr.OP, a, b, prog, debugName, "map", in_place)
    return False


def map(graph: Graph, expr: Expr, ts: list[Tensor], prog: Sequence, debugName: str = "") -> Tensor:
    """A new tensor holding ``expr`` evaluated elementwise over ``ts`` (``_1`` = ts[0])."""
    return _map_impl(graph, expr, ts, prog, debugName, False)


def mapInPlace(
    graph: Graph, expr: Expr, ts: list[Tensor], prog: Sequence, debugName: str = ""
) -> None:
    """Evaluate ``expr`` over ``ts`` and write the result into ``ts[0]``."""
    _map_impl(graph, expr, ts, prog, debugName, True)
