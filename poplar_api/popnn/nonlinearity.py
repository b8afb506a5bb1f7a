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

Softmax (derived, see ``docs/estimators.md``) works along the last dimension: one
worker vertex per row, on the tile of the row's first element. SOFTMAX_STABLE
subtracts the row maximum before the exponential; SOFTMAX does not.
"""

from __future__ import annotations

import enum

import numpy as np

from poplar_api import program as _program
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.popnn import vertices as vx
from poplar_api.popnn.mapping import check_sequence, clone_like, element_tiles, place, view
from poplar_api.popops import vertices as popops_vx
from poplar_api.popops.layout import (
    RPT_COUNT_MAX,
    UINT_MAX,
    ElemOperand,
    add_vertex,
    split_pieces,
    split_regions,
    tile_regions,
)
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


_SOFTMAXES = (NonLinearityType.SOFTMAX, NonLinearityType.SOFTMAX_STABLE)
_POPOPS = ("RELU", "SIGMOID", "TANH")
#: ``getMaxVertexFieldValue(codelet, "n")``: the codelets' ``n`` is an unsigned short.
_MAX_N_FIELD = 0xFFFF


def _plan(graph: Graph, ref: Tensor, cls_1d: type, cls_2d: type, limit_1d: int, grad: bool):
    """``(tile, class, pieces, rows)`` per vertex, as ``NonLinearity.cpp`` chooses."""
    target = graph.getTarget()
    workers = target.getNumWorkerContexts()
    vw = target.getVectorWidth(ref.elementType())
    max_2d = RPT_COUNT_MAX * vw
    out = []
    for tr in tile_regions(graph, ref, "nonLinearity"):
        sizes = tr.sizes
        if len(sizes) == 1 and sizes[0] <= limit_1d:
            out.append((tr.tile, cls_1d, tr.regions, False))
            continue
        total = sum(sizes)
        min_vectors = 2 if grad or total > vw * workers else 1
        split = split_regions(sizes, vw, workers, min_vectors * vw, UINT_MAX, max_2d)
        out.extend((tr.tile, cls_2d, p, True) for p in split_pieces(tr.regions, split))
    return out


def _elementwise(graph, op: str, t: Tensor, out: Tensor | None, prog, name: str) -> None:
    """Forward RELU/SIGMOID/TANH/GELU/SWISH over ``t`` (into ``out`` unless in place)."""
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
    operands = {
        f: ElemOperand(typ, x.flat_index(), x.name) for f, x in zip(names, tensors, strict=True)
    }
    cs = graph.addComputeSet(f"{name}/Nonlinearity")
    for tile, cls, pieces, rows in _plan(graph, t, cls_1d, cls_2d, limit, grad=False):
        add_vertex(graph, cs, tile, cls, pieces, operands, rows)
    prog.add(_program.Execute(cs))


def _check(graph: object, nl: object, t: object, prog: object, what: str) -> None:
    if not isinstance(graph, Graph):
        raise GraphError(f"{what}: graph must be a poplar_api Graph, got {type(graph).__name__}")
    if not isinstance(nl, NonLinearityType):
        names = ", ".join(n.name for n in NonLinearityType)
        raise GraphError(f"{what}: {nl!r} is not a NonLinearityType; use one of {names}")
    if not isinstance(t, Tensor) or t.graph is not graph._state:
        raise GraphError(f"{what}: expected a Tensor of this graph, got {t!r}")
    if t.elementType() not in (FLOAT, HALF):
        raise TypeMismatchError(
            f"{what}: tensor '{t.name}' is {t.elementType().name}; non-linearities support "
            f"float and half; hint: cast it first"
        )
    if nl in _SOFTMAXES and t.rank() == 0:
        raise GraphError(f"{what}: softmax needs a tensor of rank >= 1, '{t.name}' is a scalar")
    check_sequence(prog, what)


def _rows(t: Tensor) -> np.ndarray:
    """Flat element ids of ``t`` as rows along the last dimension."""
    return t.flat_index().reshape(-1, t.dim(t.rank() - 1) if t.rank() else 1)


def _softmax(graph, nl, t, out, prog, name) -> None:
    cs = graph.addComputeSet(f"{name}/SoftMax")
    cls = vx.softmax_vertex(t.elementType(), nl is NonLinearityType.SOFTMAX_STABLE)
    tiles = element_tiles(graph, t, name)
    src, dst = _rows(t), _rows(out)
    row_tiles = tiles.reshape(src.shape)[:, 0] if src.shape[1] else tiles[:0]
    typ = t.elementType()
    for r in range(src.shape[0] if src.shape[1] else 0):
        v = graph.addVertex(
            cs, cls, {"in": view(graph, typ, src[r], name), "out": view(graph, typ, dst[r], name)}
        )
        place(graph, v, row_tiles[r])
    prog.add(_program.Execute(cs))


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
    out = clone_like(graph, t, t.elementType(), f"{name}/out", "nonLinearity")
    if nonLinearityType in _SOFTMAXES:
        _softmax(graph, nonLinearityType, t, out, prog, name)
        return out
    op = nonLinearityType.name
    if op == "GELU":  # no out-of-place vertex: copy, then the in-place vertices
        prog.add(_program.Copy(t, out))
        _elementwise(graph, op, out, None, prog, name)
    else:
        _elementwise(graph, op, t, out, prog, name)
    return out


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
        _softmax(graph, nonLinearityType, t, t, prog, name)
        return
    _elementwise(graph, nonLinearityType.name, t, None, prog, name)


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
    if not isinstance(outGradient, Tensor) or outGradient.graph is not graph._state:
        raise GraphError(f"nonLinearityInputGradient: outGradient {outGradient!r} is not a Tensor")
    if outGradient.shape() != out.shape() or outGradient.elementType() != out.elementType():
        raise TypeMismatchError(
            f"nonLinearityInputGradient: outGradient '{outGradient.name}' "
            f"({outGradient.elementType().name} {outGradient.shape()}) must match out "
            f"'{out.name}' ({out.elementType().name} {out.shape()})"
        )
    typ = out.elementType()
    in_grad = clone_like(graph, out, typ, f"{name}/inGrad", "nonLinearityInputGradient")
    tiles = element_tiles(graph, out, "nonLinearityInputGradient")
    if nonLinearityType in _SOFTMAXES:
        cls = vx.softmax_grad_vertex(typ)
        o, g, d = _rows(out), _rows(outGradient), _rows(in_grad)
        cs = graph.addComputeSet(f"{name}/SoftMaxGrad")
        row_tiles = tiles.reshape(o.shape)[:, 0] if o.shape[1] else tiles[:0]
        for r in range(o.shape[0] if o.shape[1] else 0):
            conns = {
                "out": view(graph, typ, o[r], name),
                "outGrad": view(graph, typ, g[r], name),
                "inGrad": view(graph, typ, d[r], name),
            }
            place(graph, graph.addVertex(cs, cls, conns), row_tiles[r])
    else:
        op = nonLinearityType.name
        target = graph.getTarget()
        vw = target.getVectorWidth(typ)
        limit = min(_MAX_N_FIELD, RPT_COUNT_MAX * target.getNumWorkerContexts() * vw)
        cls_1d = vx.nonlinearity_grad_vertex(op, typ, "1D")
        cls_2d = vx.nonlinearity_grad_vertex(op, typ, "2D")
        operands = {
            "out": ElemOperand(typ, out.flat_index(), out.name),
            "outGrad": ElemOperand(typ, outGradient.flat_index(), outGradient.name),
            "inGrad": ElemOperand(typ, in_grad.flat_index(), in_grad.name),
        }
        cs = graph.addComputeSet(f"{name}/NonLinearityGrad")
        for tile, cls, pieces, rows in _plan(graph, out, cls_1d, cls_2d, limit, grad=True):
            add_vertex(graph, cs, tile, cls, pieces, operands, rows)
    prog.add(_program.Execute(cs))
    return in_grad
