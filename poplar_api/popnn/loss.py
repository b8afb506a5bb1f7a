"""popnn losses: ``calcLoss`` (loss, deltas, correct count) and ``calcAccuracy``.

Following ``popnn::calcLoss``: ``modelOutputs`` is ``[batch, classes]`` (for
CROSS_ENTROPY_LOSS the output of a softmax), ``expected`` holds one label per batch
item. Per batch item ``b`` with one-hot label vector ``e``:

* CROSS_ENTROPY_LOSS: ``loss[b] = -log(p[b, label])`` (the probability is clamped to
  the smallest normal number of the type), ``deltas[b] = deltasScale · (p[b] - e)`` —
  the gradient of the loss with respect to the softmax *input*;
* SUM_SQUARED_LOSS: ``deltas[b] = p[b] - e``, ``loss[b] = ½ Σ deltas[b]²``
  (``deltasScale`` is not used, as in Poplibs).

A label equal to ``MASKED_LABEL_CODE`` (``0xFFFFFFFF``, or -1 for INT labels) gives
zero loss and deltas and never counts as correct; any other label outside
``0..classes-1`` makes the run fail with an engine error naming the vertex.

``numCorrect`` (one UNSIGNED_INT or INT element) is **incremented** by the number of
items whose arg-max (first maximum) equals the label, so a training loop zeroes it
before a batch and reads it after, as the Poplar tutorial does.
"""

from __future__ import annotations

import enum

import numpy as np

from poplar_api import program as _program
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.popnn import vertices as vx
from poplar_api.popnn.mapping import element_tiles, place, view
from poplar_api.popops.reduce import Operation, ReduceParams, reduceWithOutput
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT

__all__ = ["MASKED_LABEL_CODE", "LossType", "calcAccuracy", "calcLoss"]

MASKED_LABEL_CODE = vx.MASKED_LABEL_CODE


class LossType(enum.Enum):
    """Loss function (``popnn::LossType``)."""

    SUM_SQUARED_LOSS = "SUM_SQUARED_LOSS"
    CROSS_ENTROPY_LOSS = "CROSS_ENTROPY_LOSS"


def _tensor(graph: Graph, t: object, what: str) -> Tensor:
    if not isinstance(t, Tensor) or t.graph is not graph._state:
        raise GraphError(f"{what} must be a Tensor of this graph, got {t!r}")
    return t


def _check_outputs_labels(graph: Graph, model: object, expected: object, fn: str) -> tuple:
    if not isinstance(graph, Graph):
        raise GraphError(f"{fn}: graph must be a poplar_api Graph, got {type(graph).__name__}")
    model = _tensor(graph, model, f"{fn}: modelOutputs")
    expected = _tensor(graph, expected, f"{fn}: expected")
    if model.rank() != 2:
        raise GraphError(
            f"{fn}: modelOutputs '{model.name}' has shape {model.shape()}; it must be "
            f"[batch, classes]"
        )
    if model.elementType() not in (FLOAT, HALF):
        raise TypeMismatchError(
            f"{fn}: modelOutputs '{model.name}' is {model.elementType().name}; float or half "
            f"is required"
        )
    if expected.elementType() not in (UNSIGNED_INT, INT):
        raise TypeMismatchError(
            f"{fn}: expected '{expected.name}' is {expected.elementType().name}; labels must "
            f"be unsigned int or int"
        )
    if expected.shape() != [model.dim(0)]:
        raise GraphError(
            f"{fn}: expected '{expected.name}' has shape {expected.shape()}, needs "
            f"[{model.dim(0)}] (one label per row of modelOutputs {model.shape()})"
        )
    return model, expected


def _row_tiles(graph: Graph, model: Tensor, fn: str) -> np.ndarray:
    tiles = element_tiles(graph, model, fn).reshape(model.shape())
    if model.dim(1) == 0:
        raise GraphError(
            f"{fn}: modelOutputs '{model.name}' has no classes (shape {model.shape()})"
        )
    return tiles[:, 0]


def _accuracy(graph, model, expected, num_correct, cs, rows_tiles, prog, name) -> None:
    num_correct = _tensor(graph, num_correct, "calcAccuracy: numCorrect")
    count_type = num_correct.elementType()
    if count_type not in (UNSIGNED_INT, INT) or num_correct.numElements() != 1:
        raise TypeMismatchError(
            f"calcAccuracy: numCorrect '{num_correct.name}' is {count_type.name} "
            f"{num_correct.shape()}; it must be one unsigned int or int element"
        )
    element_tiles(graph, num_correct, "calcAccuracy: numCorrect")
    batch = model.dim(0)
    flags = graph.addVariable(count_type, [batch], f"{name}/correct")
    graph._state.space(count_type).tile[flags.flat_index()] = rows_tiles
    cls = vx.accuracy_vertex(model.elementType(), expected.elementType(), count_type)
    m, e, f = model.index, expected.flat_index(), flags.flat_index()
    for b in range(batch):
        conns = {
            "probs": view(graph, model.elementType(), m[b], name),
            "label": view(graph, expected.elementType(), e[b : b + 1], name),
            "correct": view(graph, count_type, f[b : b + 1], name),
        }
        place(graph, graph.addVertex(cs, cls, conns), rows_tiles[b])
    prog.add(_program.Execute(cs))
    params = ReduceParams(Operation.ADD, update=True)
    reduceWithOutput(graph, flags, num_correct.reshape([]), [0], params, prog, f"{name}/sum")


def calcLoss(
    graph: Graph,
    modelOutputs: Tensor,
    expected: Tensor,
    loss: Tensor,
    deltas: Tensor,
    deltasScale: Tensor | None = None,
    numCorrect: Tensor | None = None,
    lossType: LossType = LossType.CROSS_ENTROPY_LOSS,
    prog: _program.Sequence | None = None,
    debugName: str = "",
) -> _program.Sequence:
    """Loss per batch item, deltas and (optionally) the count of correct items.

    Parameters
    ----------
    modelOutputs
        ``[batch, classes]`` float or half.
    expected
        ``[batch]`` labels (unsigned int or int).
    loss, deltas
        Mapped outputs: ``[batch]`` and ``[batch, classes]`` of the model output type.
    deltasScale
        Optional one-element tensor of the model output type scaling cross-entropy
        deltas (1 when omitted).
    numCorrect
        Optional one-element unsigned int / int tensor incremented by the correct count.
    lossType
        :class:`LossType`.
    prog
        Sequence to append to; a new one is made when omitted.

    Returns
    -------
    program.Sequence
        ``prog`` (or the new sequence) holding the loss compute sets.
    """
    fn = "calcLoss"
    model, expected = _check_outputs_labels(graph, modelOutputs, expected, fn)
    if not isinstance(lossType, LossType):
        raise GraphError(f"{fn}: lossType {lossType!r} is not a LossType")
    prog = _program.Sequence() if prog is None else prog
    if not isinstance(prog, _program.Sequence):
        raise GraphError(f"{fn}: prog must be a program.Sequence, got {type(prog).__name__}")
    typ = model.elementType()
    loss = _tensor(graph, loss, f"{fn}: loss")
    deltas = _tensor(graph, deltas, f"{fn}: deltas")
    for t, shape in ((loss, [model.dim(0)]), (deltas, model.shape())):
        if t.shape() != shape or t.elementType() != typ:
            raise TypeMismatchError(
                f"{fn}: '{t.name}' is {t.elementType().name} {t.shape()}; it must be "
                f"{typ.name} {shape} to match modelOutputs '{model.name}'"
            )
        element_tiles(graph, t, fn)
    rows_tiles = _row_tiles(graph, model, fn)
    name = debugName or "calcLoss"
    if deltasScale is None:
        used = np.unique(rows_tiles)
        const = graph.addConstant(typ, [used.size], 1.0, f"{name}/deltasScale")
        graph._state.space(typ).tile[const.flat_index()] = used
        scale_of = dict(zip(used.tolist(), [const[i] for i in range(used.size)], strict=True))
    else:
        deltasScale = _tensor(graph, deltasScale, f"{fn}: deltasScale")
        if deltasScale.numElements() != 1 or deltasScale.elementType() != typ:
            raise TypeMismatchError(
                f"{fn}: deltasScale '{deltasScale.name}' must be one {typ.name} element, "
                f"got {deltasScale.elementType().name} {deltasScale.shape()}"
            )
        scale_of = None
    cs = graph.addComputeSet(f"{name}/LossLayer")
    cross = lossType is LossType.CROSS_ENTROPY_LOSS
    cls = vx.loss_vertex(typ, expected.elementType(), cross)
    m, e = model.index, expected.flat_index()
    d, lo = deltas.index, loss.flat_index()
    for b in range(model.dim(0)):
        scale = scale_of[int(rows_tiles[b])] if scale_of else deltasScale.reshape([])
        conns = {
            "probs": view(graph, typ, m[b], name),
            "label": view(graph, expected.elementType(), e[b : b + 1], name),
            "scale": scale,
            "deltas": view(graph, typ, d[b], name),
            "loss": view(graph, typ, lo[b : b + 1], name),
        }
        place(graph, graph.addVertex(cs, cls, conns), rows_tiles[b])
    if numCorrect is None:
        prog.add(_program.Execute(cs))
    else:
        _accuracy(graph, model, expected, numCorrect, cs, rows_tiles, prog, name)
    return prog


def calcAccuracy(
    graph: Graph,
    modelOutputs: Tensor,
    expected: Tensor,
    numCorrect: Tensor,
    prog: _program.Sequence | None = None,
    debugName: str = "",
) -> _program.Sequence:
    """Increment ``numCorrect`` by the rows whose arg-max equals the label.

    Returns ``prog`` (or a new sequence) holding the compute sets.
    """
    fn = "calcAccuracy"
    model, expected = _check_outputs_labels(graph, modelOutputs, expected, fn)
    prog = _program.Sequence() if prog is None else prog
    if not isinstance(prog, _program.Sequence):
        raise GraphError(f"{fn}: prog must be a program.Sequence, got {type(prog).__name__}")
    rows_tiles = _row_tiles(graph, model, fn)
    name = debugName or "calcAccuracy"
    cs = graph.addComputeSet(f"{name}/Accuracy")
    _accuracy(graph, model, expected, numCorrect, cs, rows_tiles, prog, name)
    return prog
