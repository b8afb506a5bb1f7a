"""Lowerings and gradients of ONNX's elementwise-math ops.

Elementwise ops use popops (``neg``, ``abs``, ``inv``, ``erf``, ``sin``, ``cos``,
``floor``, ``ceil``, ``pow``, ``max``, ``min``, ``select``, ``clamp``, ``cast``,
comparisons and logical ops). ``Gelu`` (ONNX opset 20) uses ``popops.geluErf`` for
``approximate="none"`` and popnn's tanh-approximated GELU for ``"tanh"``; PopART's
``ai.graphcore`` ``Gelu`` is the tanh approximation. Ops whose inputs are all known
when the graph is built are folded with numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np
import onnx

from popart_api.autodiff import GradContext, Grads, register_grad, unbroadcast, zeros
from popart_api.builder import GRAPHCORE_DOMAIN
from popart_api.errors import popart_exception
from popart_api.ops import first_tensor, float_check, numeric_check, register, tensor, value_shape
from poplar_api import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Graph, Tensor, popnn, popops
from poplar_api.popnn import NonLinearityType

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


# ------------------------------------------------------------------ unary math
def _unary(fn: Callable, numpy_fn: Callable, floats_only: bool = True) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = inputs[0]
        if not isinstance(x, Tensor):
            return [numpy_fn(np.asarray(x))]
        if floats_only:
            float_check(x, name.split("_")[0], name)
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


def _minus_dy_times(g: GradContext, factor: Tensor) -> Tensor:
    """``-dy·factor``: the product is named after the op, its negation ``<name>/neg``."""
    product = popops.mul(g.graph, g.grad_output(0), factor, g.prog, g.name)
    return popops.neg(g.graph, product, g.prog, f"{g.name}/neg")


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
    return [_minus_dy_times(g, y2)]


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
    return [_minus_dy_times(g, s)]


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
        x = float_check(tensor(graph, inputs[0], name), "Gelu", name)
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
register("Gelu", domain=GRAPHCORE_DOMAIN)(_gelu(True))
register_grad("Gelu", domain=GRAPHCORE_DOMAIN)(_gelu_grad(True))


# --------------------------------------------------------------- binary math
def _binary(fn: Callable, numpy_fn: Callable) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        a, b = inputs[0], inputs[1]
        like = first_tensor([a, b])
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

    def dy_times(factor: Tensor, i: int, input_name: str) -> Tensor:
        """``dy·factor`` summed down to input ``i``'s shape."""
        product = popops.mul(g.graph, dy, factor, g.prog, f"{g.name}/d{input_name}")
        return unbroadcast(
            g.graph, product, value_shape(g.inputs[i]), g.prog, f"{g.name}/{input_name}"
        )

    out: list[Tensor | None] = [None, None]
    if g.needs_grad(0):  # b·a^(b-1)
        bm1 = popops.sub(g.graph, b, 1.0, g.prog, f"{g.name}/bMinus1")
        power = popops.pow(g.graph, a, bm1, g.prog, f"{g.name}/pow")
        factor = popops.mul(g.graph, power, b, g.prog, f"{g.name}/times_b")
        out[0] = dy_times(factor, 0, "a")
    if g.needs_grad(1):  # y·ln(a)
        log_a = popops.log(g.graph, a, g.prog, f"{g.name}/log")
        factor = popops.mul(g.graph, g.outputs[0], log_a, g.prog, f"{g.name}/yLogA")
        out[1] = dy_times(factor, 1, "b")
    return out


def _variadic(fn: Callable, numpy_fn: Callable) -> Callable:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        values = [v for v in inputs if v is not None]
        if not values:
            raise popart_exception(f"node '{name}': needs at least one input")
        like = first_tensor(values)
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
        out.append(unbroadcast(g.graph, part, value_shape(v), g.prog, f"{g.name}/{i}"))
    return out


register_grad("Max")(_select_grad)
register_grad("Min")(_select_grad)


@register_grad("Sum")
def _sum_grad(g: GradContext) -> Grads:
    dy = g.grad_output(0)
    return [
        unbroadcast(g.graph, dy, value_shape(v), g.prog, f"{g.name}/{i}")
        if g.needs_grad(i)
        else None
        for i, v in enumerate(g.inputs)
    ]


@register("Where", since=9)
def _where(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    cond, x, y = inputs
    like = first_tensor([x, y])
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
        out[1] = unbroadcast(g.graph, t, value_shape(g.inputs[1]), g.prog, f"{g.name}/x")
    if g.needs_grad(2):
        t = popops.select(g.graph, 0.0, dy, cond, g.prog, f"{g.name}/y")
        out[2] = unbroadcast(g.graph, t, value_shape(g.inputs[2]), g.prog, f"{g.name}/y")
    return out


@register("Clip", since=6)
def _clip(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = numeric_check(tensor(graph, inputs[0], name), "Clip", name)
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


__all__: list[str] = []
