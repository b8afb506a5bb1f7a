"""Lowerings and gradients of ONNX's elementwise-math, reduction and shape ops.

Elementwise ops use popops (``neg``, ``abs``, ``inv``, ``erf``, ``pow``, ``max``,
``min``, ``select``, ``clamp``, ``cast``, comparisons), reductions ``popops.reduce``,
shape ops are views of the input (``reshape``, ``dimShuffle``, ``slice``, ``concat``,
``expand``/``broadcast``). ``Gather`` is a one-hot encoding of the indices
(``popnn.encodeOneHot``) times the data (``poplin.matMul``), the way a lookup is
commonly written for the IPU without a dynamic-slice codelet; its gradient is the
transposed product. ``Dropout`` in training draws its mask with ``poprand.bernoulli``
and keeps it for the gradient. ``Gelu`` (ONNX opset 20) uses ``popops.geluErf`` for
``approximate="none"`` and popnn's tanh-approximated GELU for ``"tanh"``; PopART's
``ai.graphcore`` ``Gelu`` is the tanh approximation.

Ops whose inputs are all known when the graph is built (shapes, axes: numpy arrays)
are folded with numpy, as exported models compute shapes with ``Shape``, ``Gather``,
``Concat``, ``Unsqueeze`` and ``Slice``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx

from popart_api.autodiff import GradContext, register_grad, unbroadcast, zeros
from popart_api.errors import popart_exception
from popart_api.ops import _first_tensor, _float_check, context, register, tensor
from poplar_api import (
    BOOL,
    FLOAT,
    HALF,
    INT,
    UNSIGNED_INT,
    Graph,
    Tensor,
    poplin,
    popnn,
    popops,
    poprand,
)
from poplar_api import program as pprog
from poplar_api.popnn import NonLinearityType
from poplar_api.popops import Operation
from poplar_api.poputil import mapTensorLinearly
from poplar_api.tensor import concat

Grads = Sequence[Tensor | None]
GRAPHCORE = "ai.graphcore"

_ONNX_TO_TYPE = {
    onnx.TensorProto.FLOAT: FLOAT,
    onnx.TensorProto.FLOAT16: HALF,
    onnx.TensorProto.INT32: INT,
    onnx.TensorProto.INT64: INT,  # the device has no 64-bit integers
    onnx.TensorProto.UINT32: UNSIGNED_INT,
    onnx.TensorProto.BOOL: BOOL,
}
_ONNX_TO_NUMPY = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.UINT32: np.uint32,
    onnx.TensorProto.BOOL: np.bool_,
}


def _shape(v: Any) -> list[int]:
    return v.shape() if isinstance(v, Tensor) else list(np.shape(v))


def _rank(v: Any) -> int:
    return len(_shape(v))


def _const_ints(v: Any, op: str, name: str, what: str) -> list[int]:
    if isinstance(v, Tensor):
        raise popart_exception(
            f"{op} (node '{name}'): input '{what}' ('{v.name}') must be known when the graph "
            "is built; hint: make it with aiOnnx.constant or addInitializedInputTensor"
        )
    return [int(d) for d in np.asarray(v).reshape(-1)]


def _norm_axes(axes: Sequence[int], rank: int, op: str, name: str) -> list[int]:
    out = []
    for a in axes:
        if not -rank <= a < max(rank, 1):
            raise popart_exception(
                f"{op} (node '{name}'): axis {a} is out of range for a rank-{rank} input; "
                f"required: -{rank} <= axis < {rank}"
            )
        out.append(a % max(rank, 1))
    return out


# ------------------------------------------------------------------ unary math
def _unary(fn: Callable, numpy_fn: Callable, floats_only: bool = True) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = inputs[0]
        if not isinstance(x, Tensor):
            return [numpy_fn(np.asarray(x))]
        if floats_only:
            _float_check(x, name.split("_")[0], name)
        return [fn(graph, x, prog, name)]

    return lower


register("Neg", since=6)(_unary(popops.neg, np.negative, floats_only=False))
register("Abs", since=6)(_unary(popops.abs, np.abs, floats_only=False))
register("Reciprocal", since=6)(_unary(popops.inv, np.reciprocal))
register("Erf", since=9)(_unary(popops.erf, np.vectorize(math.erf)))
register("Sin", since=7)(_unary(popops.sin, np.sin))
register("Cos", since=7)(_unary(popops.cos, np.cos))
register("Floor", since=6)(_unary(popops.floor, np.floor))
register("Ceil", since=6)(_unary(popops.ceil, np.ceil))
register("Not", since=1)(_unary(popops.logicalNot, np.logical_not, floats_only=False))


@register_grad("Neg")
def _neg_grad(g: GradContext) -> Grads:
    return [popops.neg(g.graph, g.grad_output(0), g.prog, g.name)]


@register_grad("Abs")
def _abs_grad(g: GradContext) -> Grads:
    sign = popops.signum(g.graph, g.inputs[0], g.prog, f"{g.name}/sign")
    return [popops.mul(g.graph, g.grad_output(0), sign, g.prog, g.name)]


@register_grad("Reciprocal")
def _reciprocal_grad(g: GradContext) -> Grads:
    """``-dy·y²``."""
    y2 = popops.square(g.graph, g.outputs[0], g.prog, f"{g.name}/ySquared")
    return [
        popops.neg(
            g.graph,
            popops.mul(g.graph, g.grad_output(0), y2, g.prog, g.name),
            g.prog,
            f"{g.name}/neg",
        )
    ]


@register_grad("Erf")
def _erf_grad(g: GradContext) -> Grads:
    """``dy·2/sqrt(pi)·exp(-x²)``."""
    x = g.inputs[0]
    e = popops.exp(
        g.graph,
        popops.neg(
            g.graph, popops.square(g.graph, x, g.prog, f"{g.name}/x2"), g.prog, f"{g.name}/negX2"
        ),
        g.prog,
        f"{g.name}/exp",
    )
    d = popops.mul(g.graph, e, 2.0 / math.sqrt(math.pi), g.prog, f"{g.name}/scale")
    return [popops.mul(g.graph, g.grad_output(0), d, g.prog, g.name)]


@register_grad("Sin")
def _sin_grad(g: GradContext) -> Grads:
    return [
        popops.mul(
            g.graph,
            g.grad_output(0),
            popops.cos(g.graph, g.inputs[0], g.prog, f"{g.name}/cos"),
            g.prog,
            g.name,
        )
    ]


@register_grad("Cos")
def _cos_grad(g: GradContext) -> Grads:
    s = popops.sin(g.graph, g.inputs[0], g.prog, f"{g.name}/sin")
    return [
        popops.neg(
            g.graph,
            popops.mul(g.graph, g.grad_output(0), s, g.prog, g.name),
            g.prog,
            f"{g.name}/neg",
        )
    ]


def _zero_grad(g: GradContext) -> Grads:
    """Piecewise-constant ops (Floor, Ceil): zero gradient."""
    x = g.inputs[0]
    return [zeros(g.graph, x.elementType(), x.shape(), g.prog, f"{g.name}/zero")]


register_grad("Floor")(_zero_grad)
register_grad("Ceil")(_zero_grad)


# ----------------------------------------------------------------------- GELU
def _gelu_kind(attrs: dict, domain_graphcore: bool, name: str) -> str:
    if domain_graphcore:
        return "tanh"
    kind = str(attrs.get("approximate", "none"))
    if kind not in ("none", "tanh"):
        raise popart_exception(
            f"Gelu (node '{name}'): approximate '{kind}' is not 'none' or 'tanh'"
        )
    return kind


def _gelu(domain_graphcore: bool) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = _float_check(tensor(graph, inputs[0], name), "Gelu", name)
        if _gelu_kind(attrs, domain_graphcore, name) == "none":
            return [popops.geluErf(graph, x, prog, name)]
        return [popnn.nonLinearity(graph, NonLinearityType.GELU, x, prog, name)]

    return lower


def _gelu_grad(domain_graphcore: bool) -> Callable:
    def grad(g: GradContext) -> Grads:
        x, dy = g.inputs[0], g.grad_output(0)
        if _gelu_kind(g.attrs, domain_graphcore, g.name) == "tanh":
            # popnn's GELU gradient takes the forward *input*
            return [
                popnn.nonLinearityInputGradient(
                    g.graph, NonLinearityType.GELU, x, dy, g.prog, g.name
                )
            ]
        # d/dx x·Phi(x) = Phi(x) + x·phi(x)
        cdf = popops.erf(
            g.graph,
            popops.mul(g.graph, x, 1 / math.sqrt(2), g.prog, f"{g.name}/scaled"),
            g.prog,
            f"{g.name}/erf",
        )
        cdf = popops.mul(
            g.graph,
            popops.add(g.graph, cdf, 1.0, g.prog, f"{g.name}/one"),
            0.5,
            g.prog,
            f"{g.name}/cdf",
        )
        pdf = popops.exp(
            g.graph,
            popops.mul(
                g.graph,
                popops.square(g.graph, x, g.prog, f"{g.name}/x2"),
                -0.5,
                g.prog,
                f"{g.name}/half",
            ),
            g.prog,
            f"{g.name}/exp",
        )
        pdf = popops.mul(g.graph, pdf, 1 / math.sqrt(2 * math.pi), g.prog, f"{g.name}/pdf")
        d = popops.add(
            g.graph,
            cdf,
            popops.mul(g.graph, x, pdf, g.prog, f"{g.name}/xPdf"),
            g.prog,
            f"{g.name}/d",
        )
        return [popops.mul(g.graph, dy, d, g.prog, g.name)]

    return grad


register("Gelu", since=20)(_gelu(False))
register_grad("Gelu")(_gelu_grad(False))
register("Gelu", domain=GRAPHCORE)(_gelu(True))
register_grad("Gelu", domain=GRAPHCORE)(_gelu_grad(True))


# --------------------------------------------------------------- binary math
def _binary(fn: Callable, numpy_fn: Callable) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        a, b = inputs[0], inputs[1]
        like = _first_tensor([a, b])
        if like is None:
            return [numpy_fn(np.asarray(a), np.asarray(b))]
        return [fn(graph, tensor(graph, a, name, like), tensor(graph, b, name, like), prog, name)]

    return lower


@register("Pow", since=7)
def _pow(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    """``a ** b`` in ``a``'s type (ONNX: the exponent may have another type)."""
    a, b = inputs[0], inputs[1]
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        return [np.power(np.asarray(a), np.asarray(b)).astype(np.asarray(a).dtype)]
    a = tensor(graph, a, name, b if not isinstance(a, Tensor) else None)
    if isinstance(b, Tensor) and b.elementType() != a.elementType():
        b = popops.cast(graph, b, a.elementType(), prog, f"{name}/exponent")
    return [popops.pow(graph, a, tensor(graph, b, name, a), prog, name)]


for _op, _fn, _np in (
    ("Equal", popops.eq, np.equal),
    ("Less", popops.lt, np.less),
    ("Greater", popops.gt, np.greater),
    ("LessOrEqual", popops.lteq, np.less_equal),
    ("GreaterOrEqual", popops.gteq, np.greater_equal),
    ("And", popops.logicalAnd, np.logical_and),
    ("Or", popops.logicalOr, np.logical_or),
):
    register(_op, since=1)(_binary(_fn, _np))


@register_grad("Pow")
def _pow_grad(g: GradContext) -> Grads:
    """``da = dy·b·a^(b-1)``, ``db = dy·y·log(a)``."""
    dy = g.grad_output(0)
    a = tensor(g.graph, g.inputs[0], g.name, dy)
    b = g.inputs[1]
    if isinstance(b, Tensor) and b.elementType() != dy.elementType():  # an INT32 exponent
        b = popops.cast(g.graph, b, dy.elementType(), g.prog, f"{g.name}/exponent")
    b = tensor(g.graph, b, g.name, dy)
    out: list[Tensor | None] = [None, None]
    if g.needs_grad(0):
        bm1 = popops.sub(g.graph, b, 1.0, g.prog, f"{g.name}/bMinus1")
        t = popops.mul(
            g.graph,
            popops.pow(g.graph, a, bm1, g.prog, f"{g.name}/pow"),
            b,
            g.prog,
            f"{g.name}/times_b",
        )
        out[0] = unbroadcast(
            g.graph,
            popops.mul(g.graph, dy, t, g.prog, f"{g.name}/da"),
            _shape(g.inputs[0]),
            g.prog,
            f"{g.name}/a",
        )
    if g.needs_grad(1):
        t = popops.mul(
            g.graph,
            g.outputs[0],
            popops.log(g.graph, a, g.prog, f"{g.name}/log"),
            g.prog,
            f"{g.name}/yLogA",
        )
        out[1] = unbroadcast(
            g.graph,
            popops.mul(g.graph, dy, t, g.prog, f"{g.name}/db"),
            _shape(g.inputs[1]),
            g.prog,
            f"{g.name}/b",
        )
    return out


def _variadic(fn: Callable, numpy_fn: Callable) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        values = [v for v in inputs if v is not None]
        if not values:
            raise popart_exception(f"node '{name}': needs at least one input")
        like = _first_tensor(values)
        if like is None:
            out = np.asarray(values[0])
            for v in values[1:]:
                out = numpy_fn(out, np.asarray(v))
            return [out]
        out = tensor(graph, values[0], name, like)
        if len(values) == 1:
            return [popops.add(graph, out, 0, prog, name)]  # a copy, as ONNX makes one
        for k, v in enumerate(values[1:]):
            out = fn(graph, out, tensor(graph, v, name, like), prog, f"{name}/{k}")
        return [out]

    return lower


register("Max", since=8)(_variadic(popops.max, np.maximum))
register("Min", since=8)(_variadic(popops.min, np.minimum))
register("Sum", since=8)(_variadic(popops.add, np.add))


def _select_grad(g: GradContext) -> Grads:
    """Max/Min: the gradient goes to every input equal to the result."""
    dy = g.grad_output(0)
    out = []
    for i, v in enumerate(g.inputs):
        if not g.needs_grad(i):
            out.append(None)
            continue
        hit = popops.eq(
            g.graph, tensor(g.graph, v, g.name, dy), g.outputs[0], g.prog, f"{g.name}/hit{i}"
        )
        part = popops.select(g.graph, dy, 0.0, hit, g.prog, f"{g.name}/select{i}")
        out.append(unbroadcast(g.graph, part, _shape(v), g.prog, f"{g.name}/{i}"))
    return out


register_grad("Max")(_select_grad)
register_grad("Min")(_select_grad)


@register_grad("Sum")
def _sum_grad(g: GradContext) -> Grads:
    dy = g.grad_output(0)
    return [
        unbroadcast(g.graph, dy, _shape(v), g.prog, f"{g.name}/{i}") if g.needs_grad(i) else None
        for i, v in enumerate(g.inputs)
    ]


@register("Where", since=9)
def _where(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    cond, x, y = inputs
    like = _first_tensor([x, y])
    if like is None and not isinstance(cond, Tensor):
        return [np.where(np.asarray(cond), np.asarray(x), np.asarray(y))]
    if like is None:  # values known, condition on the device
        x = tensor(graph, np.asarray(x), name)
        y = tensor(graph, np.asarray(y), name, x)
    else:
        x, y = tensor(graph, x, name, like), tensor(graph, y, name, like)
    c = tensor(graph, cond, name)
    if c.elementType() != BOOL:
        raise popart_exception(
            f"Where (node '{name}'): condition '{c.name}' is {c.elementType().name}; it must "
            "be BOOL"
        )
    return [popops.select(graph, x, y, c, prog, name)]


@register_grad("Where")
def _where_grad(g: GradContext) -> Grads:
    dy = g.grad_output(0)
    cond = tensor(g.graph, g.inputs[0], g.name)
    out: list[Tensor | None] = [None, None, None]
    if g.needs_grad(1):
        t = popops.select(g.graph, dy, 0.0, cond, g.prog, f"{g.name}/x")
        out[1] = unbroadcast(g.graph, t, _shape(g.inputs[1]), g.prog, f"{g.name}/x")
    if g.needs_grad(2):
        t = popops.select(g.graph, 0.0, dy, cond, g.prog, f"{g.name}/y")
        out[2] = unbroadcast(g.graph, t, _shape(g.inputs[2]), g.prog, f"{g.name}/y")
    return out


@register("Clip", since=6)
def _clip(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = tensor(graph, inputs[0], name)
    if x.elementType() not in (FLOAT, HALF, INT):
        raise popart_exception(
            f"Clip (node '{name}'): input '{x.name}' is {x.elementType().name}; this op needs "
            "FLOAT, FLOAT16 or INT32"
        )
    if len(inputs) > 1:  # opset 11+: min and max are optional inputs
        lo = inputs[1] if len(inputs) > 1 and inputs[1] is not None else -np.inf
        hi = inputs[2] if len(inputs) > 2 and inputs[2] is not None else np.inf
    else:
        lo, hi = attrs.get("min", -np.inf), attrs.get("max", np.inf)
    lo = float(np.asarray(lo)) if not isinstance(lo, Tensor) else lo
    hi = float(np.asarray(hi)) if not isinstance(hi, Tensor) else hi
    info = np.iinfo(np.int32) if x.elementType() == INT else np.finfo(np.float32)
    lo = max(lo, float(info.min)) if isinstance(lo, float) else lo
    hi = min(hi, float(info.max)) if isinstance(hi, float) else hi
    return [popops.clamp(graph, x, lo, hi, prog, name)]


@register_grad("Clip")
def _clip_grad(g: GradContext) -> Grads:
    """``dy`` where the input was inside the bounds (the output equals the input)."""
    x = g.inputs[0]
    inside = popops.eq(g.graph, x, g.outputs[0], g.prog, f"{g.name}/inside")
    return [popops.select(g.graph, g.grad_output(0), 0.0, inside, g.prog, g.name)]


@register("Cast", since=6)
def _cast(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    to = int(attrs.get("to", 0))
    if to not in _ONNX_TO_TYPE:
        raise popart_exception(
            f"Cast (node '{name}'): target type {onnx.TensorProto.DataType.Name(to) if to else to}"
            " is not supported; supported: FLOAT, FLOAT16, INT32, INT64 (as INT32), UINT32, BOOL"
        )
    x = inputs[0]
    if not isinstance(x, Tensor):
        return [np.asarray(x).astype(_ONNX_TO_NUMPY[to])]
    typ = _ONNX_TO_TYPE[to]
    if typ == x.elementType():
        return [x]
    return [popops.cast(graph, x, typ, prog, name)]


@register_grad("Cast")
def _cast_grad(g: GradContext) -> Grads:
    x = g.inputs[0]
    dy = g.grad_output(0)
    if dy.elementType() not in (FLOAT, HALF):
        return [None]
    if dy.elementType() == x.elementType():
        return [dy]
    return [popops.cast(g.graph, dy, x.elementType(), g.prog, g.name)]


# ----------------------------------------------------------------- reductions
def _reduce_axes(inputs: list, attrs: dict, rank: int, op: str, name: str, from_input: bool):
    if from_input:
        axes = (
            _const_ints(inputs[1], op, name, "axes")
            if len(inputs) > 1 and inputs[1] is not None
            else []
        )
    else:
        axes = [int(a) for a in attrs.get("axes", [])]
    if not axes:
        if int(attrs.get("noop_with_empty_axes", 0)):
            return None
        return list(range(rank))
    return sorted(set(_norm_axes(axes, rank, op, name)))


_NUMPY_REDUCE = {
    "ReduceSum": np.sum,
    "ReduceMean": np.mean,
    "ReduceMax": np.max,
    "ReduceMin": np.min,
    "ReduceSumSquare": lambda x, axis, keepdims: np.sum(x * x, axis=axis, keepdims=keepdims),
    "ReduceProd": np.prod,
}
_REDUCE_OPS = {
    "ReduceSum": Operation.ADD,
    "ReduceMean": Operation.ADD,
    "ReduceMax": Operation.MAX,
    "ReduceMin": Operation.MIN,
    "ReduceSumSquare": Operation.SQUARE_ADD,
    "ReduceProd": Operation.MUL,
}


def _reduce(op: str, axes_input_since: int) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        opset = context().opset or axes_input_since
        x = inputs[0]
        rank = _rank(x)
        axes = _reduce_axes(inputs, attrs, rank, op, name, opset >= axes_input_since)
        keep = int(attrs.get("keepdims", 1))
        if axes is None:
            return [x if not isinstance(x, Tensor) else popops.add(graph, x, 0, prog, name), None]
        if not isinstance(x, Tensor):
            return [_NUMPY_REDUCE[op](np.asarray(x), axis=tuple(axes), keepdims=bool(keep)), axes]
        if not axes or x.numElements() == 0:
            return [popops.add(graph, x, 0, prog, name), axes]
        out = popops.reduce(graph, x, axes, _REDUCE_OPS[op], prog, name)
        if op == "ReduceMean":
            count = int(np.prod([x.dim(a) for a in axes], dtype=np.int64))
            out = popops.mul(graph, out, 1.0 / max(count, 1), prog, f"{name}/mean")
        if keep:
            out = out.reshape([1 if d in axes else n for d, n in enumerate(x.shape())])
        return [out, axes]

    return lower


for _op, _since in (
    ("ReduceSum", 13),
    ("ReduceMean", 18),
    ("ReduceMax", 18),
    ("ReduceMin", 18),
    ("ReduceSumSquare", 18),
    ("ReduceProd", 18),
):
    register(_op, since=1)(_reduce(_op, _since))


def _expand_back(g: GradContext, t: Tensor, axes: list[int]) -> Tensor:
    """``t`` (the reduced shape, with or without kept dims) broadcast to the input."""
    x = g.inputs[0]
    shape = x.shape()
    kept = t.reshape([1 if d in axes else n for d, n in enumerate(shape)])
    view = kept
    for d in axes:
        if shape[d] != 1:
            view = view.broadcast(shape[d], d)
    return view


def _reduce_grad(op: str) -> Callable:
    def grad(g: GradContext) -> Grads:
        x = g.inputs[0]
        axes = g.outputs[1]
        dy = g.grad_output(0)
        if axes is None:
            return [dy, None]
        if op in ("ReduceSum", "ReduceMean"):
            d = _expand_back(g, dy, axes)
            scale = 1.0
            if op == "ReduceMean":
                scale = 1.0 / max(int(np.prod([x.dim(a) for a in axes], dtype=np.int64)), 1)
            return [popops.mul(g.graph, d, scale, g.prog, g.name), None]
        if op == "ReduceSumSquare":
            d = _expand_back(g, dy, axes)
            two_x = popops.mul(g.graph, x, 2.0, g.prog, f"{g.name}/twoX")
            return [popops.mul(g.graph, two_x, d, g.prog, g.name), None]
        if op == "ReduceProd":
            y = _expand_back(g, g.outputs[0], axes)
            d = popops.div(
                g.graph,
                popops.mul(g.graph, _expand_back(g, dy, axes), y, g.prog, f"{g.name}/dyY"),
                x,
                g.prog,
                g.name,
            )
            return [d, None]
        y = _expand_back(g, g.outputs[0], axes)  # Max / Min: to every element equal to it
        hit = popops.eq(g.graph, x, y, g.prog, f"{g.name}/hit")
        return [popops.select(g.graph, _expand_back(g, dy, axes), 0.0, hit, g.prog, g.name), None]

    return grad


for _op in _REDUCE_OPS:
    register_grad(_op)(_reduce_grad(_op))


# ---------------------------------------------------------------- LogSoftmax
def _log_softmax_last(graph: Graph, x: Tensor, prog: Any, name: str) -> Tensor:
    last = x.rank() - 1
    m = popops.reduce(graph, x, [last], Operation.MAX, prog, f"{name}/max").expand([last])
    s = popops.sub(graph, x, m, prog, f"{name}/shift")
    e = popops.exp(graph, s, prog, f"{name}/exp")
    lse = popops.log(
        graph,
        popops.reduce(graph, e, [last], Operation.ADD, prog, f"{name}/sum"),
        prog,
        f"{name}/log",
    ).expand([last])
    return popops.sub(graph, s, lse, prog, name)


def _softmax_layout(x: Tensor, attrs: dict, opset_13: bool, name: str):
    """(view with the softmax axis last, function restoring the layout)."""
    rank = x.rank()
    if not opset_13:
        axis = int(attrs.get("axis", 1)) % max(rank, 1)
        shape = x.shape()
        rows = int(np.prod(shape[:axis], dtype=np.int64))
        flat = x.reshape([rows, int(np.prod(shape[axis:], dtype=np.int64))])
        return flat, lambda t: t.reshape(shape)
    axis = int(attrs.get("axis", -1)) % max(rank, 1)
    last = rank - 1
    if axis == last:
        return x, lambda t: t
    return x.dimShufflePartial([axis], [last]), lambda t: t.dimShufflePartial([last], [axis])


def _log_softmax(opset_13: bool) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = _float_check(tensor(graph, inputs[0], name), "LogSoftmax", name)
        view, back = _softmax_layout(x, attrs, opset_13, name)
        return [back(_log_softmax_last(graph, view, prog, name))]

    return lower


register("LogSoftmax", since=1)(_log_softmax(False))
register("LogSoftmax", since=13)(_log_softmax(True))


@register_grad("LogSoftmax")
def _log_softmax_grad(g: GradContext) -> Grads:
    """``dx = dy - exp(y)·sum(dy)`` along the axis."""
    y, dy = g.outputs[0], g.grad_output(0)
    yv, back = _softmax_layout(y, g.attrs, g.opset >= 13, g.name)
    dv, _ = _softmax_layout(dy, g.attrs, g.opset >= 13, g.name)
    last = yv.rank() - 1
    total = popops.reduce(g.graph, dv, [last], Operation.ADD, g.prog, f"{g.name}/sum")
    p = popops.exp(g.graph, yv, g.prog, f"{g.name}/p")
    t = popops.mul(g.graph, p, total.expand([last]), g.prog, f"{g.name}/pSum")
    return [back(popops.sub(g.graph, dv, t, g.prog, g.name))]


# -------------------------------------------------------------------- Dropout
@register("Dropout", since=1)
def _dropout(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = _float_check(tensor(graph, inputs[0], name), "Dropout", name)
    ratio = float(attrs.get("ratio", 0.5))
    if len(inputs) > 1 and inputs[1] is not None:
        ratio = float(np.asarray(_const_value(inputs[1], "Dropout", name, "ratio")))
    training = context().training
    if len(inputs) > 2 and inputs[2] is not None:
        training = bool(np.asarray(_const_value(inputs[2], "Dropout", name, "training_mode")))
    if not 0.0 <= ratio < 1.0:
        raise popart_exception(f"Dropout (node '{name}'): ratio {ratio} must be in [0, 1)")
    if not training or ratio == 0.0:
        mask = graph.addConstant(BOOL, x.shape(), True, f"{name}/mask")
        mapTensorLinearly(graph, mask)
        return [x, mask, None, 1.0]
    seed = context().seed_tensor
    if seed is None:  # outside a session: a fixed seed
        seed = graph.addConstant(
            UNSIGNED_INT, [2], np.array([context().seed, 0], np.uint32), f"{name}/seed"
        )
        graph.setTileMapping(seed, 0)
    modifier = sum(ord(c) for c in name) & 0xFFFFFFFF
    keep = poprand.bernoulli(
        graph, seed, modifier, x, x.elementType(), 1.0 - ratio, prog, f"{name}/mask"
    )
    scale = 1.0 / (1.0 - ratio)
    y = popops.mul(
        graph, popops.mul(graph, x, keep, prog, f"{name}/apply"), scale, prog, f"{name}/scale"
    )
    mask = popops.cast(graph, keep, BOOL, prog, f"{name}/maskBool")
    return [y, mask, keep, scale]


def _const_value(v: Any, op: str, name: str, what: str) -> np.ndarray:
    if isinstance(v, Tensor):
        raise popart_exception(
            f"{op} (node '{name}'): '{what}' must be a constant or initializer, got a tensor"
        )
    return np.asarray(v)


@register_grad("Dropout")
def _dropout_grad(g: GradContext) -> Grads:
    keep, scale = g.outputs[2], g.outputs[3]
    dy = g.grad_output(0)
    if keep is None:
        return [dy]
    return [
        popops.mul(
            g.graph, popops.mul(g.graph, dy, keep, g.prog, f"{g.name}/mask"), scale, g.prog, g.name
        )
    ]


# ---------------------------------------------------------------- shape ops
@register("Shape", since=1)
def _shape_op(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    shape = np.asarray(_shape(inputs[0]), np.int64)
    start, end = int(attrs.get("start", 0)), attrs.get("end")
    return [shape[start : None if end is None else int(end)]]


@register("Flatten", since=1)
def _flatten(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    shape = _shape(x)
    axis = int(attrs.get("axis", 1))
    if not -len(shape) <= axis <= len(shape):
        raise popart_exception(
            f"Flatten (node '{name}'): axis {axis} is out of range for rank {len(shape)}"
        )
    if axis < 0:
        axis += len(shape)
    dims = [int(np.prod(shape[:axis], dtype=np.int64)), int(np.prod(shape[axis:], dtype=np.int64))]
    return [x.reshape(dims) if isinstance(x, Tensor) else np.asarray(x).reshape(dims)]


def _axes_attr_or_input(inputs: list, attrs: dict, op: str, name: str) -> list[int] | None:
    if len(inputs) > 1 and inputs[1] is not None:
        return _const_ints(inputs[1], op, name, "axes")
    if "axes" in attrs:
        return [int(a) for a in attrs["axes"]]
    return None


@register("Squeeze", since=1)
def _squeeze(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    shape = _shape(x)
    axes = _axes_attr_or_input(inputs, attrs, "Squeeze", name)
    if axes is None:
        axes = [d for d, n in enumerate(shape) if n == 1]
    axes = _norm_axes(axes, len(shape), "Squeeze", name)
    bad = [a for a in axes if shape[a] != 1]
    if bad:
        raise popart_exception(
            f"Squeeze (node '{name}'): axes {bad} of shape {shape} are not of size 1"
        )
    dims = [n for d, n in enumerate(shape) if d not in axes]
    return [x.reshape(dims) if isinstance(x, Tensor) else np.asarray(x).reshape(dims)]


@register("Unsqueeze", since=1)
def _unsqueeze(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    shape = _shape(x)
    axes = _axes_attr_or_input(inputs, attrs, "Unsqueeze", name)
    if axes is None:
        raise popart_exception(f"Unsqueeze (node '{name}'): 'axes' is required")
    rank = len(shape) + len(axes)
    axes = sorted(_norm_axes(axes, rank, "Unsqueeze", name))
    dims = list(shape)
    for a in axes:
        dims.insert(a, 1)
    return [x.reshape(dims) if isinstance(x, Tensor) else np.asarray(x).reshape(dims)]


def _reshape_grad(g: GradContext) -> Grads:
    return [g.grad_output(0).reshape(_shape(g.inputs[0])), None]


for _op in ("Flatten", "Squeeze", "Unsqueeze"):
    register_grad(_op)(_reshape_grad)


@register("Expand", since=8)
def _expand(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    want = _const_ints(inputs[1], "Expand", name, "shape")
    try:
        shape = list(np.broadcast_shapes(tuple(_shape(x)), tuple(want)))
    except ValueError:
        raise popart_exception(
            f"Expand (node '{name}'): shape {_shape(x)} does not broadcast to {want}"
        ) from None
    if not isinstance(x, Tensor):
        return [np.broadcast_to(np.asarray(x), shape).copy()]
    view = x.reshape([1] * (len(shape) - x.rank()) + x.shape())
    for d, n in enumerate(shape):
        if view.dim(d) != n:
            view = view.broadcast(n, d)
    return [popops.add(graph, view, 0, prog, name)]  # a new tensor, as ONNX's output is


@register_grad("Expand")
def _expand_grad(g: GradContext) -> Grads:
    return [unbroadcast(g.graph, g.grad_output(0), _shape(g.inputs[0]), g.prog, g.name), None]


@register("Concat", since=4)
def _concat(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    values = [v for v in inputs if v is not None]
    if "axis" not in attrs:
        raise popart_exception(f"Concat (node '{name}'): attribute 'axis' is required")
    rank = _rank(values[0])
    axis = _norm_axes([int(attrs["axis"])], rank, "Concat", name)[0]
    for v in values:
        s0, s = _shape(values[0]), _shape(v)
        if len(s) != rank or any(
            a != b for d, (a, b) in enumerate(zip(s0, s, strict=False)) if d != axis
        ):
            raise popart_exception(
                f"Concat (node '{name}'): input shapes {[_shape(u) for u in values]} differ "
                f"outside axis {axis}"
            )
    like = _first_tensor(values)
    if like is None:
        return [np.concatenate([np.asarray(v) for v in values], axis=axis)]
    return [concat([tensor(graph, v, name, like) for v in values], axis)]


@register_grad("Concat")
def _concat_grad(g: GradContext) -> Grads:
    dy = g.grad_output(0)
    axis = int(g.attrs["axis"]) % dy.rank()
    out, start = [], 0
    for i, v in enumerate(g.inputs):
        n = _shape(v)[axis]
        out.append(dy.slice(start, start + n, axis) if g.needs_grad(i) else None)
        start += n
    return out


def _slice_params(inputs: list, attrs: dict, shape: list[int], name: str, from_inputs: bool):
    if from_inputs:
        starts = _const_ints(inputs[1], "Slice", name, "starts")
        ends = _const_ints(inputs[2], "Slice", name, "ends")
        axes = (
            _const_ints(inputs[3], "Slice", name, "axes")
            if len(inputs) > 3 and inputs[3] is not None
            else list(range(len(starts)))
        )
        steps = (
            _const_ints(inputs[4], "Slice", name, "steps")
            if len(inputs) > 4 and inputs[4] is not None
            else [1] * len(starts)
        )
    else:
        starts, ends = [int(a) for a in attrs["starts"]], [int(a) for a in attrs["ends"]]
        axes = [int(a) for a in attrs.get("axes", range(len(starts)))]
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise popart_exception(
            f"Slice (node '{name}'): starts, ends, axes and steps differ in length"
        )
    axes = _norm_axes(axes, len(shape), "Slice", name)
    if any(s == 0 for s in steps):
        raise popart_exception(f"Slice (node '{name}'): a step of 0 is not allowed")
    out = []
    for a, b, e, st in zip(axes, starts, ends, steps, strict=True):
        out.append((a, *slice(b, e, st).indices(shape[a])))
    return out


def _slice_view(t: Tensor, params: list[tuple[int, int, int, int]]) -> Tensor:
    """``t[begin:end:step]`` along each axis (``slice().indices`` bounds) as a view."""
    for axis, begin, end, step in params:
        if step > 0:
            t = t.slice(begin, max(end, begin), axis)
        else:  # element i is element n-1-i of the reversed axis
            n = t.dim(axis)
            t = t.reverse(axis).slice(n - 1 - begin, max(n - 1 - end, n - 1 - begin), axis)
        if abs(step) > 1 and t.dim(axis):
            t = t.subSample(abs(step), axis)
    return t


@register("Slice", since=1)
def _slice_op(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = inputs[0]
    params = _slice_params(inputs, attrs, _shape(x), name, len(inputs) > 1)
    if not isinstance(x, Tensor):
        index = [slice(None)] * np.ndim(x)
        for axis, begin, end, step in params:
            index[axis] = slice(begin, end if end >= 0 else None, step)
        return [np.asarray(x)[tuple(index)], params]
    return [_slice_view(x, params), params]


@register_grad("Slice")
def _slice_grad(g: GradContext) -> Grads:
    x = g.inputs[0]
    params = g.outputs[1]
    dx = zeros(g.graph, g.grad_output(0).elementType(), x.shape(), g.prog, f"{g.name}/zero")
    g.prog.add(pprog.Copy(g.grad_output(0), _slice_view(dx, params)))
    return [dx] + [None] * (len(g.inputs) - 1)


# --------------------------------------------------------------------- Gather
def _one_hot(graph: Graph, idx: Tensor, n: int, typ: Any, prog: Any, name: str) -> Tensor:
    flat = idx.reshape([max(idx.numElements(), 1)])
    if flat.elementType() not in (INT, UNSIGNED_INT):
        flat = popops.cast(graph, flat, INT, prog, f"{name}/indices")
    if flat.elementType() == INT:  # negative indices count from the end
        neg = popops.lt(graph, flat, 0, prog, f"{name}/negative")
        flat = popops.select(
            graph,
            popops.add(graph, flat, n, prog, f"{name}/wrap"),
            flat,
            neg,
            prog,
            f"{name}/normalise",
        )
    enc = graph.addVariable(typ, [flat.numElements(), n], f"{name}/onehot")
    mapTensorLinearly(graph, enc)
    popnn.encodeOneHot(graph, flat, enc, prog, f"{name}/onehot")
    return enc


@register("Gather", since=1)
def _gather(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    data, idx = inputs
    rank = _rank(data)
    axis = _norm_axes([int(attrs.get("axis", 0))], rank, "Gather", name)[0]
    n = _shape(data)[axis]
    if not isinstance(idx, Tensor):
        ids = np.asarray(idx).astype(np.int64)
        bad = ids[(ids < -n) | (ids >= n)]
        if bad.size:
            raise popart_exception(
                f"Gather (node '{name}'): index {int(bad[0])} is out of range for axis {axis} "
                f"of size {n}; required: -{n} <= index < {n}"
            )
        if not isinstance(data, Tensor):
            return [np.take(np.asarray(data), ids, axis=axis), None]
        idx = graph.addConstant(
            INT, list(ids.shape), (ids % n).astype(np.int32).reshape(-1), f"{name}/indices"
        )
        mapTensorLinearly(graph, idx)
    data = tensor(graph, data, name)
    if data.elementType() not in (FLOAT, HALF):
        raise popart_exception(
            f"Gather (node '{name}'): data '{data.name}' is {data.elementType().name}; "
            "gathering from a device tensor needs FLOAT or FLOAT16 data"
        )
    moved = data.dimShufflePartial([axis], [0]) if axis else data
    rest = moved.shape()[1:]
    enc = _one_hot(graph, idx, n, data.elementType(), prog, name)
    table = moved.reshape([n, int(np.prod(rest, dtype=np.int64))])
    rows = poplin.matMul(graph, enc, table, prog, f"{name}/lookup", context().options or None)
    ishape = _shape(idx)
    out = rows.reshape([*ishape, *rest])
    if axis:  # indices' dimensions go where the axis was
        k = len(ishape)
        perm = list(range(k, k + axis)) + list(range(k)) + list(range(k + axis, k + len(rest)))
        out = out.dimShuffle(perm)
    return [out, enc]


@register_grad("Gather")
def _gather_grad(g: GradContext) -> Grads:
    """The one-hot matrix transposed times the output gradient: every row of the data
    gets the sum of the gradients of the positions that read it."""
    data, enc = g.inputs[0], g.outputs[1]
    axis = int(g.attrs.get("axis", 0)) % data.rank()
    dy = g.grad_output(0)
    k = _rank(g.inputs[1])
    if axis:  # undo the output permutation: indices' dimensions first
        perm = list(range(axis, axis + k)) + list(range(axis)) + list(range(axis + k, dy.rank()))
        dy = dy.dimShuffle(perm)
    rest = dy.shape()[k:]
    flat = dy.reshape([enc.dim(0), int(np.prod(rest, dtype=np.int64))])
    d = poplin.matMul(g.graph, enc.transpose(), flat, g.prog, f"{g.name}/scatter")
    d = d.reshape([data.dim(axis), *rest])
    if axis:
        d = d.dimShufflePartial([0], [axis])
    return [d, None]


__all__: list[str] = []
