"""popnn non-linearities: forward (out of place and in place) and input gradients.

Vertex choice as ``lib/popnn/NonLinearity.cpp`` (graphcore/poplibs @7eac0f26):

* RELU, SIGMOID, TANH forward run on popops vertices (``isPopops``):
  ``popops::UnaryOp{1D,2D}[InPlace]<popops::expr::UnaryOpType::OP,T>``;
* GELU forward runs ``popnn::NonLinearity{1D,2D}InPlace`` (out of place: a ``Copy``
  to the output, then the in-place vertices on it); SWISH has out-of-place vertices
  ``popnn::NonLinearity{1D,2D}``;
* gradients of all of them run ``popnn::NonLinearityGrad{1D,2D}``.

Per tile, the elements there form sorted contiguous regions: a single region within
the 1-D limit (``min(65535 for the n field, rptCountMax x W x VW)``; popops
out-of-place vertices only the repeat limit) gets one 1-D MultiVertex; otherwise
``splitRegionsBetweenWorkers`` with grain VW makes 2-D worker vertices (minimum
``VW`` per vertex when the tile has at most ``VW x W`` elements, else ``2 VW``;
gradients always ``2 VW``; pieces at most ``rptCountMax x VW``).

Softmax works along the last dimension and, as ``softmaxImpl``, has no vertex of its
own: SOFTMAX_STABLE and SOFTMAX_SCALED take the row maximum (``popops::reduce`` MAX)
and subtract it (``popops::sub``, or ``subInPlace`` in place), SOFTMAX_SCALED then adds
``log(62000)``; then ``popops::exp``, a float ``popops::reduce`` ADD of each row,
``popops::invInPlace`` (times 62000 for SOFTMAX_SCALED, whose rows sum to 62000), a
cast to half for half tensors, and ``popops::mulInPlace`` by the broadcast reciprocal.
ipusim reductions keep their input type, so a half tensor is first cast to float for
the sum (one compute set more than Poplibs). The gradient, as
``softmaxInputGradientImpl``, is ``popops::mul`` (g·y), a row ``reduce`` ADD,
``popops::mul`` (y·Σ) and ``popops::subInPlace``, for all three softmax types.
"""

from __future__ import annotations

import enum
import math

import numpy as np

from poplar_api import popops
from poplar_api import program as _program
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.graph_bulk import bulk_construction
from poplar_api.library_checks import check_element_type, check_graph
from poplar_api.popnn import vertices as vx
from poplar_api.popnn.mapping import check_sequence, clone_like, element_tiles, local_tiles
from poplar_api.popops import vertices as popops_vx
from poplar_api.popops.layout import (
    RPT_COUNT_MAX,
    UINT_MAX,
    ElemOperand,
    PlannedVertices,
    add_vertices,
    plan_tiles,
    split_pieces,
    split_regions,
)
from poplar_api.popops.reduce import Operation
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF

__all__ = [
    "NonLinearityType",
    "nonLinearity",
    "nonLinearityInPlace",
    "nonLinearityInputGradient",
]


class NonLinearityType(enum.Enum):
    """Non-linearity (``popnn::NonLinearityType``)."""

    RELU = "RELU"
    SIGMOID = "SIGMOID"
    TANH = "TANH"
    GELU = "GELU"
    SWISH = "SWISH"
    SOFTMAX = "SOFTMAX"
    SOFTMAX_STABLE = "SOFTMAX_STABLE"
    SOFTMAX_SCALED = "SOFTMAX_SCALED"


_SOFTMAXES = (
    NonLinearityType.SOFTMAX,
    NonLinearityType.SOFTMAX_STABLE,
    NonLinearityType.SOFTMAX_SCALED,
)
#: ``SOFTMAX_SCALING`` (``lib/popnn/NonLinearityInternal.hpp``): SOFTMAX_SCALED outputs
#: sum to this instead of 1.
SOFTMAX_SCALING = 62000.0
_POPOPS = ("RELU", "SIGMOID", "TANH")
#: ``getMaxVertexFieldValue(codelet, "n")``: the codelets' ``n`` is an unsigned short.
_MAX_N_FIELD = 0xFFFF


def _plan(
    graph: Graph,
    ref: Tensor,
    cls_1d: type,
    cls_2d: type,
    limit_1d: int,
    grad: bool,
    tiles: np.ndarray | None = None,
) -> PlannedVertices:
    """The vertices of every tile, as ``NonLinearity.cpp`` chooses them from the sizes
    of the tile's regions (planned once per distinct list of sizes, see
    :func:`~poplar_api.popops.layout.plan_tiles`); ``tiles``: ``ref``'s elements' tiles
    when the caller has them already."""
    target = graph.getTarget()
    workers = target.getNumWorkerContexts()
    vw = target.getVectorWidth(ref.elementType())
    max_2d = RPT_COUNT_MAX * vw

    def plan_tile(regions: list[np.ndarray]) -> list[tuple[type, list[np.ndarray], bool]]:
        sizes = [int(r.size) for r in regions]
        if len(sizes) == 1 and sizes[0] <= limit_1d:
            return [(cls_1d, regions, False)]
        total = sum(sizes)
        min_vectors = 2 if grad or total > vw * workers else 1
        split = split_regions(sizes, vw, workers, min_vectors * vw, UINT_MAX, max_2d)
        return [(cls_2d, p, True) for p in split_pieces(regions, split)]

    return plan_tiles(graph, ref, "nonLinearity", plan_tile, tiles)


def _elementwise(
    graph, op: str, t: Tensor, out: Tensor | None, prog, name: str, tiles=None
) -> None:
    """Forward RELU/SIGMOID/TANH/GELU/SWISH over ``t`` (into ``out`` unless in place);
    ``tiles``: ``t``'s elements' tiles when the caller has them already."""
    target = graph.getTarget()
    typ = t.elementType()
    rpt_1d = RPT_COUNT_MAX * target.getNumWorkerContexts() * target.getVectorWidth(typ)
    in_place = out is None
    if op in _POPOPS:
        cls_1d = popops_vx.unary_vertex(op, typ, "1D", in_place)
        cls_2d = popops_vx.unary_vertex(op, typ, "2D", in_place)
        limit = rpt_1d if not in_place else min(_MAX_N_FIELD, rpt_1d)
        names = ("inOut",) if in_place else ("in", "out")
    else:
        cls_1d = vx.nonlinearity_vertex(op, typ, "1D", in_place)
        cls_2d = vx.nonlinearity_vertex(op, typ, "2D", in_place)
        limit = min(_MAX_N_FIELD, rpt_1d)
        names = ("data",) if in_place else ("data", "out")
    tensors = (t,) if in_place else (t, out)
    operands = {f: ElemOperand(typ, x, x.name) for f, x in zip(names, tensors, strict=True)}
    cs = graph.addComputeSet(f"{name}/Nonlinearity")
    add_vertices(graph, cs, _plan(graph, t, cls_1d, cls_2d, limit, False, tiles), operands)
    prog.add(_program.Execute(cs))


def _check(graph: object, nl: object, t: object, prog: object, what: str) -> None:
    check_graph(graph, what)
    if not isinstance(nl, NonLinearityType):
        names = ", ".join(n.name for n in NonLinearityType)
        raise GraphError(f"{what}: {nl!r} is not a NonLinearityType; use one of {names}")
    if not graph.owns(t):
        raise GraphError(f"{what}: expected a Tensor of this graph, got {t!r}")
    check_element_type(
        t,
        "tensor",
        (FLOAT, HALF),
        what,
        "non-linearities support float and half; hint: cast it first",
    )
    if nl in _SOFTMAXES and t.rank() == 0:
        raise GraphError(f"{what}: softmax needs a tensor of rank >= 1, '{t.name}' is a scalar")
    check_sequence(prog, what)


def _softmax(graph: Graph, nl: NonLinearityType, t: Tensor, in_place: bool, prog, name: str):
    """``softmaxImpl``: softmax along the innermost dimension from popops operations."""
    fn = f"{name}/SoftMax"
    stable = nl in (NonLinearityType.SOFTMAX_STABLE, NonLinearityType.SOFTMAX_SCALED)
    scaled = nl is NonLinearityType.SOFTMAX_SCALED
    expand = t.rank() == 1
    if expand:
        t = t.expand([0])
    rank = t.rank()
    inner = t.dim(rank - 1)
    shuf = t.dimShufflePartial([0, rank - 1], [rank - 1, 0])
    needs_copy = not in_place
    if stable:
        mx = popops.reduce(graph, shuf, [0], Operation.MAX, prog, f"{fn}/max")
        mx = mx.expand([0]).broadcast(inner, 0)
        if needs_copy:
            shuf = popops.sub(graph, shuf, mx, prog, f"{fn}/sub")
            needs_copy = False
        else:
            popops.subInPlace(graph, shuf, mx, prog, f"{fn}/sub")
        if scaled:
            popops.addInPlace(graph, shuf, math.log(SOFTMAX_SCALING), prog, f"{fn}/addLogScaling")
    if needs_copy:
        shuf = popops.exp(graph, shuf, prog, f"{fn}/exp")
    else:
        popops.expInPlace(graph, shuf, prog, f"{fn}/exp")
    half = t.elementType() == HALF
    # Poplibs reduces straight to a float sum; ipusim reductions keep the input type,
    # so half is cast to float first (one more compute set).
    summed = popops.cast(graph, shuf, FLOAT, prog, f"{fn}/toFloat") if half else shuf
    sum_f = popops.reduce(graph, summed, [0], Operation.ADD, prog, f"{fn}/sum")
    popops.invInPlace(graph, sum_f, prog, f"{fn}/inv")
    if scaled:
        popops.mulInPlace(graph, sum_f, SOFTMAX_SCALING, prog, f"{fn}/scaling")
    total = popops.cast(graph, sum_f, HALF, prog, f"{fn}/toHalf") if half else sum_f
    popops.mulInPlace(graph, shuf, total.expand([0]).broadcast(inner, 0), prog, f"{fn}/invScale")
    out = shuf.dimShufflePartial([0, rank - 1], [rank - 1, 0])
    return out.squeeze([0]) if expand else out


def _softmax_grad(graph: Graph, out: Tensor, out_grad: Tensor, prog, name: str) -> Tensor:
    """``softmaxInputGradientImpl``: ``g·y - y·Σ(g·y)`` along the innermost dimension."""
    fn = f"{name}/SoftMaxGradient"
    y, g = out, out_grad
    if y.rank() < 2:
        y, g = y.flatten().expand([0]), g.flatten().expand([0])
    y, g = y.flatten(0, y.rank() - 1), g.flatten(0, g.rank() - 1)
    g_y = popops.mul(graph, y, g, prog, f"{fn}/gXy")
    sum_g_y = popops.reduce(graph, g_y, [1], Operation.ADD, prog, f"{fn}/sum").expand([1])
    y_sum = popops.mul(graph, y, sum_g_y, prog, f"{fn}/yXsum")
    popops.subInPlace(graph, g_y, y_sum, prog, f"{fn}/sub")
    return g_y.reshape(out_grad.shape())


@bulk_construction
def nonLinearity(
    graph: Graph,
    nonLinearityType: NonLinearityType,
    t: Tensor,
    prog: _program.Sequence,
    debugName: str = "",
) -> Tensor:
    """Apply a non-linearity to ``t``; return a new tensor mapped like ``t``.

    Raises
    ------
    TypeMismatchError
        ``t`` is not float or half.
    GraphError
        Unknown type, unmapped input, a scalar softmax or a bad program.
    """
    name = debugName or f"nonLinearity/{getattr(nonLinearityType, 'name', '?')}"
    _check(graph, nonLinearityType, t, prog, "nonLinearity")
    if nonLinearityType in _SOFTMAXES:
        element_tiles(graph, t, "nonLinearity")
        return _softmax(graph, nonLinearityType, t, False, prog, name)
    # t's tiles (as clone_like asks for them, naming an unmapped element) map the clone
    # and plan the vertices over either: out is mapped as t is
    tiles = local_tiles(graph, t, "nonLinearity")
    out = clone_like(graph, t, t.elementType(), f"{name}/out", "nonLinearity", tiles)
    op = nonLinearityType.name
    if op == "GELU":  # no out-of-place vertex: copy, then the in-place vertices
        prog.add(_program.Copy(t, out))
        _elementwise(graph, op, out, None, prog, name, tiles)
    else:
        _elementwise(graph, op, t, out, prog, name, tiles)
    return out


@bulk_construction
def nonLinearityInPlace(
    graph: Graph,
    nonLinearityType: NonLinearityType,
    t: Tensor,
    prog: _program.Sequence,
    debugName: str = "",
) -> None:
    """Apply a non-linearity to ``t`` in place (same checks as :func:`nonLinearity`)."""
    name = debugName or f"nonLinearityInPlace/{getattr(nonLinearityType, 'name', '?')}"
    _check(graph, nonLinearityType, t, prog, "nonLinearityInPlace")
    if nonLinearityType in _SOFTMAXES:
        element_tiles(graph, t, "nonLinearityInPlace")
        _softmax(graph, nonLinearityType, t, True, prog, name)
        return
    _elementwise(graph, nonLinearityType.name, t, None, prog, name)


@bulk_construction
def nonLinearityInputGradient(
    graph: Graph,
    nonLinearityType: NonLinearityType,
    out: Tensor,
    outGradient: Tensor,
    prog: _program.Sequence,
    debugName: str = "",
) -> Tensor:
    """Gradient with respect to the non-linearity's input, mapped like ``out``.

    Parameters
    ----------
    out
        The forward output (for GELU: the forward *input*, which its derivative needs).
    outGradient
        Gradient with respect to the output; same shape and type as ``out``.
    """
    name = debugName or f"nonLinearityInputGradient/{getattr(nonLinearityType, 'name', '?')}"
    _check(graph, nonLinearityType, out, prog, "nonLinearityInputGradient")
    if not graph.owns(outGradient):
        raise GraphError(f"nonLinearityInputGradient: outGradient {outGradient!r} is not a Tensor")
    if outGradient.shape() != out.shape() or outGradient.elementType() != out.elementType():
        raise TypeMismatchError(
            f"nonLinearityInputGradient: outGradient '{outGradient.name}' "
            f"({outGradient.elementType().name} {outGradient.shape()}) must match out "
            f"'{out.name}' ({out.elementType().name} {out.shape()})"
        )
    typ = out.elementType()
    if nonLinearityType in _SOFTMAXES:
        element_tiles(graph, out, "nonLinearityInputGradient")
        return _softmax_grad(graph, out, outGradient, prog, name)
    # (local_tiles names an unmapped element as element_tiles; the vertices are planned
    # over out's tiles, those of the clone)
    tiles = local_tiles(graph, out, "nonLinearityInputGradient")
    in_grad = clone_like(graph, out, typ, f"{name}/inGrad", "nonLinearityInputGradient", tiles)
    op = nonLinearityType.name
    target = graph.getTarget()
    vw = target.getVectorWidth(typ)
    limit = min(_MAX_N_FIELD, RPT_COUNT_MAX * target.getNumWorkerContexts() * vw)
    cls_1d = vx.nonlinearity_grad_vertex(op, typ, "1D")
    cls_2d = vx.nonlinearity_grad_vertex(op, typ, "2D")
    operands = {
        "out": ElemOperand(typ, out, out.name),
        "outGrad": ElemOperand(typ, outGradient, outGradient.name),
        "inGrad": ElemOperand(typ, in_grad, in_grad.name),
    }
    cs = graph.addComputeSet(f"{name}/NonLinearityGrad")
    add_vertices(graph, cs, _plan(graph, out, cls_1d, cls_2d, limit, True, tiles), operands)
    prog.add(_program.Execute(cs))
    return in_grad
