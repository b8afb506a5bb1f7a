"""Which ONNX node tests are in PopART's scope, and which of their inputs PopART needs
as constants (used by :mod:`popart_api.onnx_tests`).

:data:`POPART_OPS` lists the ``ai.onnx`` op types PopART supports: those its op
registry creates (``OpCreator``s in graphcore/popart ``willow/src/op``), those its
ONNX-to-ONNX pass rewrites into others before building its IR
(``onnxpasses/nodepatterns``: Tan, Asinh, Acosh, Atanh, Acos, Mod, DepthToSpace,
SpaceToDepth, Gemm) and those it folds as constant expressions (``ces``: Constant,
ConstantOfShape, Shape): 117 types. The pass rate is measured on the tests whose every
node is one of them and whose every graph input and output is a tensor of a type the
IPU takes (:func:`in_popart_scope`).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx
from onnx import TensorProto

from popart_api.onnx_model import ONNX_TYPES

#: Element types the IPU takes (INT64 as INT32, as PopART does).
IPU_TYPES = frozenset(ONNX_TYPES)

#: The ``ai.onnx`` op types PopART supports (see the module docstring).
POPART_OPS = frozenset(
    """Abs Acos Acosh Add And ArgMax ArgMin Asin Asinh Atan Atanh AveragePool
    BatchNormalization Cast Ceil Clip Concat Constant ConstantOfShape Conv ConvTranspose Cos
    Cosh CumSum DepthToSpace Div Dropout Elu Equal Erf Exp Expand Flatten Floor GRU Gather
    Gemm GlobalAveragePool GlobalMaxPool Greater HardSigmoid Identity If
    InstanceNormalization IsInf IsNaN LRN LSTM LeakyRelu Less Log LogSoftmax Loop MatMul Max
    MaxPool Mean Min Mod Mul Neg Not OneHot Or PRelu Pad Pow RNN RandomNormal
    RandomNormalLike RandomUniform RandomUniformLike Reciprocal ReduceL1 ReduceL2
    ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd ReduceSum
    ReduceSumSquare Relu Reshape Resize RoiAlign Round Scan Scatter ScatterElements Selu
    Shape Shrink Sigmoid Sign Sin Sinh Slice Softmax Softplus Softsign SpaceToDepth Split
    Sqrt Squeeze Sub Sum Tan Tanh ThresholdedRelu Tile TopK Transpose Unsqueeze Upsample
    Where""".split()  # noqa: SIM905
)

_REDUCE_OPS = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"]
_REDUCE_OPS += ["ReduceSumSquare", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp"]
#: Op type -> positions of the operands PopART needs known when it builds its graph
#: (shapes, axes, pads, repeats, k, ratios, Clip's bounds, a Loop's trip count: ``LoopOp``
#: reads its value). A test feeding one of them from a graph input gets it as a
#: ``Constant`` node, as a PopART user would write it.
CONST_OPERANDS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,),
    "Expand": (1,),
    "Slice": (1, 2, 3, 4),
    "Squeeze": (1,),
    "Unsqueeze": (1,),
    "Tile": (1,),
    "Pad": (1, 2, 3),
    "Split": (1,),
    "TopK": (1,),
    "OneHot": (1, 2),
    "ConstantOfShape": (0,),
    "Resize": (1, 2, 3),
    "Upsample": (1,),
    "CumSum": (1,),
    "Clip": (1, 2),
    "Dropout": (1, 2),
    "Loop": (0,),
    **{op: (1,) for op in _REDUCE_OPS},
}


def walk_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs."""
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from walk_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from walk_nodes(g)


def in_popart_scope(model: onnx.ModelProto) -> bool:
    """Whether every node of ``model`` is an ``ai.onnx`` op PopART supports
    (:data:`POPART_OPS`) and every graph input and output is a tensor of a type the
    IPU takes (:data:`IPU_TYPES`): the tests the pass rate is measured on."""
    for node in walk_nodes(model.graph):
        if node.domain not in ("", "ai.onnx") or node.op_type not in POPART_OPS:
            return False
    for vi in [*model.graph.input, *model.graph.output]:
        if vi.type.WhichOneof("value") != "tensor_type":
            return False
        if vi.type.tensor_type.elem_type not in IPU_TYPES:
            return False
    return True


def constant_inputs(model: onnx.ModelProto) -> set[str]:
    """Graph inputs of ``model`` that feed an operand PopART needs known when it builds
    its graph (:data:`CONST_OPERANDS`), directly or, for INT64 and scalar inputs, through
    arithmetic (``Max(Shape(x), shape)`` feeding a ``Pad``; ``Range``'s start, limit and
    delta giving a ``Loop``'s trip count): the harness makes them ``Constant`` nodes."""
    inits = {t.name for t in model.graph.initializer}
    inputs = {v.name: v for v in model.graph.input if v.name not in inits}
    needed: set[str] = set()
    for node in model.graph.node:
        for i in CONST_OPERANDS.get(node.op_type, ()):
            if i < len(node.input) and node.input[i]:
                needed.add(node.input[i])
    for node in reversed(model.graph.node):  # what the needed values are computed from
        if any(o in needed for o in node.output):
            needed.update(i for i in node.input if i)
    out: set[str] = set()
    direct = {
        node.input[i]
        for node in model.graph.node
        for i in CONST_OPERANDS.get(node.op_type, ())
        if i < len(node.input)
    }
    for name, vi in inputs.items():
        tt = vi.type.tensor_type
        scalar = tt.HasField("shape") and len(tt.shape.dim) == 0
        shape_like = (tt.elem_type == TensorProto.INT64 or scalar) and name in needed
        if name in direct or shape_like:
            out.add(name)
    return out


__all__ = [
    "CONST_OPERANDS",
    "IPU_TYPES",
    "POPART_OPS",
    "constant_inputs",
    "in_popart_scope",
    "walk_nodes",
]
