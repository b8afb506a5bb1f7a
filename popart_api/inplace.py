"""PopART's ``InPlace`` pattern: which ops overwrite their input, and view ops' copies.

PopART (graphcore/popart d2f20d78) gives every op that can run in place an
``...Inplace`` variant (``Op::getInplaceVariant``; e.g. ``ReluInplaceOp``,
``AddLhsInplaceOp`` / ``AddRhsInplaceOp``, ``MulLhsInplaceOp``, ``ReshapeInplaceOp``,
``SliceInplaceOp``, ``ConcatInplaceOp``) and the ``InPlace`` pattern
(``willow/src/patterns/inplace.cpp``, applied by ``Ir::applyInplacePattern`` in
``willow/src/ir.cpp``) swaps an op for its variant when that is safe: no op scheduled
after it reads the tensor it would overwrite. This module decides the same per node
of the ONNX graph:

* **Modifying ops** (:data:`UNARY`, :data:`BINARY`): the op writes its result into
  its input (``popops::<op>InPlace``, ``popnn::nonLinearityInPlace``) instead of a
  new tensor. The input must be a fresh activation (made by one of
  :data:`FRESH_PRODUCERS`, not a weight, a model input or a view), read by this node
  only (directly or through views of it: Identity, Reshape, Transpose, ... each read
  by the next only), neither a graph output nor anchored nor read inside a
  subgraph. In training
  the overwritten values must not be read by a gradient either (PopART's gradient ops
  are later consumers of the forward tensors, which blocks the in-place variant): the
  op's own gradient must not read that input, and its producer's gradient must not
  read its output. A recomputed op is in place only together with its producer and
  every node between them (one replay writes the input again before the op
  overwrites it).
* **View ops** (:data:`VIEW_OPS`: Reshape, Transpose, Flatten, Squeeze, Unsqueeze,
  Slice, Concat, Identity): with ``InPlace`` on they are views of their inputs (the
  ``...InplaceOpx`` classes, ``willow/src/popx/op/reshapex.cpp``, ``slicex.cpp``,
  ``concatx.cpp``, ``transposex.cpp``); with it off, PopART's plain ``ReshapeOpx``,
  ``SliceOpx``, ``ConcatOpx`` and ``TransposeOpx`` copy their result into a new
  tensor (``cloneNcopy``), so they do here too.

The gradient tables describe this layer's gradient functions (``grads.py``,
``ops_math.py``): which forward values each reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from popart_api import ops
from popart_api.graph_patterns import subgraph_reads
from poplar_api import FLOAT, HALF, Tensor, popnn, popops
from poplar_api import program as pprog
from poplar_api.graph import variable_count
from poplar_api.popnn import NonLinearityType
from poplar_api.poputil import cloneTensor

__all__ = [
    "BINARY",
    "FRESH_PRODUCERS",
    "UNARY",
    "VIEW_OPS",
    "copied_view_lowering",
    "inplace_candidates",
    "inplace_lowering",
]


def _nonlinearity(kind: NonLinearityType) -> Callable:
    def run(graph: Any, x: Tensor, attrs: dict, prog: Any, name: str) -> None:
        popnn.nonLinearityInPlace(graph, kind, x, prog, name)

    return run


def _popops(fn: Callable) -> Callable:
    def run(graph: Any, x: Tensor, attrs: dict, prog: Any, name: str) -> None:
        fn(graph, x, prog, name)

    return run


def _scale(graph: Any, x: Tensor, attrs: dict, prog: Any, name: str) -> None:
    popops.mulInPlace(graph, x, float(attrs["scale"]), prog, name)


#: Unary ops with an in-place variant: op -> (in-place lowering, whether the op's
#: gradient reads its input's values, whether it reads its output's values).
UNARY: dict[str, tuple[Callable, bool, bool]] = {
    "Relu": (_nonlinearity(NonLinearityType.RELU), False, True),
    "Sigmoid": (_nonlinearity(NonLinearityType.SIGMOID), False, True),
    "Tanh": (_nonlinearity(NonLinearityType.TANH), False, True),
    "Exp": (_popops(popops.expInPlace), False, True),
    "Sqrt": (_popops(popops.sqrtInPlace), False, True),
    "Reciprocal": (_popops(popops.invInPlace), False, True),
    "Neg": (_popops(popops.negInPlace), False, False),
    "Floor": (_popops(popops.floorInPlace), False, False),
    "Ceil": (_popops(popops.ceilInPlace), False, False),
    "Log": (_popops(popops.logInPlace), True, False),
    "Abs": (_popops(popops.absInPlace), True, False),
    "Sin": (_popops(popops.sinInPlace), True, False),
    "Cos": (_popops(popops.cosInPlace), True, False),
    "Erf": (_popops(popops.erfInPlace), True, False),
    "Scale": (_scale, False, False),
}

#: Binary ops with in-place variants: op -> (popops in-place function, the operands it
#: may overwrite (PopART's Lhs/Rhs variants), the operands whose values its gradient
#: reads, whether the gradient reads the output).
BINARY: dict[str, tuple[Callable, tuple[int, ...], frozenset[int], bool]] = {
    "Add": (popops.addInPlace, (0, 1), frozenset(), False),
    "Sub": (popops.subInPlace, (0,), frozenset(), False),
    "Mul": (popops.mulInPlace, (0, 1), frozenset({0, 1}), False),
    "Div": (popops.divInPlace, (0,), frozenset({1}), True),
    "Pow": (popops.powInPlace, (0,), frozenset({0, 1}), True),
}

#: Producers of fresh activations a following op may overwrite: op -> whether the
#: producer's gradient reads its output (then only inference may overwrite it).
FRESH_PRODUCERS: dict[str, bool] = {
    "MatMul": False,
    "Gemm": False,
    "Conv": False,
    **{op: reads_out for op, (_, _, reads_out) in UNARY.items()},
    **{op: reads_out for op, (_, _, _, reads_out) in BINARY.items()},
}

#: Ops that are views of their inputs when in place, copies when not.
VIEW_OPS = frozenset(
    {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Slice", "Concat", "Identity"}
)


#: Views of their first input whose gradients read no forward value: an op may
#: overwrite a fresh activation through them (PopART's in-place variants alias along
#: such chains).
_LOOK_THROUGH = frozenset({"Identity", "Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze"})


def inplace_candidates(
    model: Any,
    recomputed: list[bool] | None,
    anchors: Iterable[str] = (),
    training: bool = False,
) -> dict[int, int]:
    """The nodes ``InPlace`` runs in place: node index -> the input it overwrites.

    Parameters
    ----------
    model
        The ONNX model (nodes in topological order).
    recomputed
        Per node whether the backward pass recomputes it (None: no recomputation).
    anchors
        Anchored tensor ids (never overwritten).
    training
        Whether gradients read the forward values (see the module docstring).
    """
    nodes = list(model.graph.node)
    made_by = {o: k for k, n in enumerate(nodes) for o in n.output if o}
    readers: dict[str, int] = {}
    for n in nodes:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    blocked = {o.name for o in model.graph.output} | set(anchors)
    for n in nodes:  # read inside an If/Loop/Scan body: the body runs later
        blocked |= subgraph_reads(n)
    out: dict[int, int] = {}
    for k, node in enumerate(nodes):
        if (node.domain or "ai.onnx") not in ("ai.onnx", "ai.graphcore"):
            continue
        if node.op_type in UNARY and node.input:
            _, reads_in, _ = UNARY[node.op_type]
            options = [] if training and reads_in else [0]
        elif node.op_type in BINARY and len(node.input) == 2:
            _, sides, reads, _ = BINARY[node.op_type]
            options = [j for j in sides if not (training and j in reads)]
        else:
            continue
        for j in options:
            src = node.input[j]
            p = made_by.get(src)
            # through views of one input (each read by the next only) to their source
            while p is not None and nodes[p].op_type in _LOOK_THROUGH and nodes[p].input:
                if readers.get(src, 0) != 1 or src in blocked:
                    break
                src = nodes[p].input[0]
                p = made_by.get(src)
            if p is None or nodes[p].op_type not in FRESH_PRODUCERS:
                continue
            if training and FRESH_PRODUCERS[nodes[p].op_type]:
                continue  # the producer's gradient reads what would be overwritten
            if readers.get(src, 0) != 1 or src in blocked:
                continue
            partly = recomputed and (recomputed[k] or recomputed[p])
            if partly and not all(recomputed[p : k + 1]):
                continue
            out[k] = j
            break
    return out


def _float(t: Any) -> bool:
    return isinstance(t, Tensor) and t.elementType() in (FLOAT, HALF)


def inplace_lowering(op_type: str, operand: int, fallback: Callable) -> Callable:
    """The lowering of an in-placed ``op_type`` node: its in-place variant writing into
    input ``operand``, which becomes the output; ``fallback`` (the op's own lowering)
    when that input is not a float tensor of the output's shape and type (a value
    known when the graph is built, a broadcast operand, an opset-6 ``broadcast``
    attribute)."""

    def lower(graph: Any, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = inputs[operand] if operand < len(inputs) else None
        if not _float(x) or "broadcast" in attrs or (op_type == "Scale" and "scale" not in attrs):
            return fallback(graph, inputs, attrs, prog, name)
        if op_type in UNARY:
            UNARY[op_type][0](graph, x, attrs, prog, f"{name}/inplace")
            return [x]
        other = inputs[1 - operand]
        if isinstance(other, Tensor):
            if other.elementType() != x.elementType():
                return fallback(graph, inputs, attrs, prog, name)
            shape = other.shape()
        else:
            other = np.asarray(other)
            shape = list(other.shape)
            if other.size == 1:
                other = float(other.reshape(-1)[0])
            else:
                other = ops.tensor(graph, other, name, x)
        try:
            out_shape = list(np.broadcast_shapes(tuple(x.shape()), tuple(shape)))
        except ValueError:
            return fallback(graph, inputs, attrs, prog, name)
        if out_shape != x.shape():
            return fallback(graph, inputs, attrs, prog, name)
        BINARY[op_type][0](graph, x, other, prog, f"{name}/inplace")
        return [x]

    return lower


def copied_view_lowering(fallback: Callable) -> Callable:
    """The lowering of a view op with ``InPlace`` off: the view, copied into a new
    tensor (PopART's ``cloneNcopy`` in ``ReshapeOpx::grow`` and the others); outputs
    the op made as new variables, or values known when the graph is built, stay."""

    def lower(graph: Any, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        before = variable_count(graph)
        outs = list(fallback(graph, inputs, attrs, prog, name))
        if variable_count(graph) != before:  # the op made its own tensors
            return outs
        copied = []
        for k, t in enumerate(outs):
            if isinstance(t, Tensor) and t.numElements():
                new = cloneTensor(graph, t, f"{name}/copy{k}")
                prog.add(pprog.Copy(t, new))
                t = new
            copied.append(t)
        return copied

    return lower
