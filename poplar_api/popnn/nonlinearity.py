"""popnn non-linearities: forward (out of place and in place) and input gradients.

Elementwise types (RELU, SIGMOID, TANH, GELU) run one MultiVertex per tile over the
elements the tile holds. Softmax works along the last dimension: one worker vertex per
row, on the tile of the row's first element (the rest of the row is exchanged there).
SOFTMAX_STABLE subtracts the row maximum before the exponential; SOFTMAX does not.
"""

from __future__ import annotations

import enum

import numpy as np

from poplar_api import program as _program
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.popnn import vertices as vx
from poplar_api.popnn.mapping import (
    check_sequence,
    clone_like,
    element_tiles,
    place,
    tile_groups,
    view,
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
    SOFTMAX = "SOFTMAX"
    SOFTMAX_STABLE = "SOFTMAX_STABLE"


_SOFTMAXES = (NonLinearityType.SOFTMAX, NonLinearityType.SOFTMAX_STABLE)


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
    cls = vx.nonlinearity_vertex(nonLinearityType.name, t.elementType(), False)
    cs = graph.addComputeSet(f"{name}/NonLinearity")
    tiles = element_tiles(graph, t, "nonLinearity")
    src, dst = t.flat_index(), out.flat_index()
    typ = t.elementType()
    for tile, pos in tile_groups(tiles):
        conns = {"in": view(graph, typ, src[pos], name), "out": view(graph, typ, dst[pos], name)}
        place(graph, graph.addVertex(cs, cls, conns), tile)
    prog.add(_program.Execute(cs))
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
    cls = vx.nonlinearity_vertex(nonLinearityType.name, t.elementType(), True)
    cs = graph.addComputeSet(f"{name}/NonLinearity")
    tiles = element_tiles(graph, t, "nonLinearityInPlace")
    ids = t.flat_index()
    for tile, pos in tile_groups(tiles):
        v = graph.addVertex(cs, cls, {"data": view(graph, t.elementType(), ids[pos], name)})
        place(graph, v, tile)
    prog.add(_program.Execute(cs))


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
        cls = vx.nonlinearity_grad_vertex(nonLinearityType.name, typ)
        cs = graph.addComputeSet(f"{name}/NonLinearityGrad")
        o, g, d = out.flat_index(), outGradient.flat_index(), in_grad.flat_index()
        for tile, pos in tile_groups(tiles):
            conns = {
                "out": view(graph, typ, o[pos], name),
                "outGrad": view(graph, typ, g[pos], name),
                "inGrad": view(graph, typ, d[pos], name),
            }
            place(graph, graph.addVertex(cs, cls, conns), tile)
    prog.add(_program.Execute(cs))
    return in_grad
