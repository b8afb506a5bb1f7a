"""Lowerings and gradients of ONNX's activation, trigonometric and rounding ops.

Each op is a short composition of popops elementwise calls, as PopART's opx classes
build them (``LeakyReluOpx``, ``EluOpx``, ``SeluOpx``, ``HardSigmoidOpx``,
``SoftPlusOpx``, ``SoftSignOpx``, ``ThresholdedReluOpx``, ``ShrinkOpx``, ``PReluOpx``
map popops expressions over the input). The inverse-trigonometric and hyperbolic ops
PopART does not lower itself are rewritten the way its ONNX-to-ONNX pass
(``onnxpasses/nodepatterns/trig.cpp``) does: ``Tan = Sin/Cos``, ``Acos = pi/2 -
Asin``, ``Asinh = log(x + sqrt(x²+1))``, ``Acosh = log(x + sqrt(x²-1))``, ``Atanh =
log((1+x)/(1-x))/2``; ``Mod`` as its ``Mod``/``Remainder`` patterns do (``fmod`` and a
correction to the divisor's sign). Inputs known when the graph is built are folded
with numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from popart_api.autodiff import GradContext, Grads, register_grad, unbroadcast, zeros
from popart_api.errors import popart_exception
from popart_api.ops import first_tensor, float_check, register, tensor
from poplar_api import BOOL, Graph, Tensor, popops


def _x(graph: Graph, inputs: list, op: str, name: str) -> Tensor:
    return float_check(tensor(graph, inputs[0], name), op, name)


def _elementwise(op: str, build: Callable, numpy_fn: Callable, since: int) -> None:
    """Register ``op``: ``build(graph, x, attrs, prog, name)`` on a float tensor, or
    ``numpy_fn(x, attrs)`` on a value known when the graph is built."""

    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        if not isinstance(inputs[0], Tensor):
            with np.errstate(all="ignore"):
                return [np.asarray(numpy_fn(np.asarray(inputs[0]), attrs))]
        return [build(graph, _x(graph, inputs, op, name), attrs, prog, name)]

    register(op, since=since)(lower)


# ---------------------------------------------------------------- activations
def _leaky_relu(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    alpha = float(attrs.get("alpha", 0.01))
    scaled = popops.mul(graph, x, alpha, prog, f"{name}/scaled")
    positive = popops.gt(graph, x, 0.0, prog, f"{name}/positive")
    return popops.select(graph, x, scaled, positive, prog, name)


def _elu_core(graph: Graph, x: Tensor, alpha: float, prog: Any, name: str) -> Tensor:
    negative = popops.mul(graph, popops.expm1(graph, x, prog, f"{name}/expm1"), alpha, prog,
                          f"{name}/alpha")  # fmt: skip
    positive = popops.gt(graph, x, 0.0, prog, f"{name}/positive")
    return popops.select(graph, x, negative, positive, prog, name)


def _elu(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    return _elu_core(graph, x, float(attrs.get("alpha", 1.0)), prog, name)


_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875


def _selu(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    alpha = float(attrs.get("alpha", _SELU_ALPHA))
    gamma = float(attrs.get("gamma", _SELU_GAMMA))
    y = _elu_core(graph, x, alpha, prog, f"{name}/elu")
    return popops.mul(graph, y, gamma, prog, name)


def _hard_sigmoid(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    alpha = float(attrs.get("alpha", 0.2))
    beta = float(attrs.get("beta", 0.5))
    lin = popops.add(graph, popops.mul(graph, x, alpha, prog, f"{name}/alpha"), beta, prog,
                     f"{name}/beta")  # fmt: skip
    return popops.clamp(graph, lin, 0.0, 1.0, prog, name)


def _softplus(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    """``max(x, 0) + log1p(exp(-|x|))``: no overflow for large ``|x|``."""
    neg_abs = popops.neg(graph, popops.abs(graph, x, prog, f"{name}/abs"), prog, f"{name}/neg")
    tail = popops.log1p(graph, popops.exp(graph, neg_abs, prog, f"{name}/exp"), prog,
                        f"{name}/log1p")  # fmt: skip
    return popops.add(graph, popops.max(graph, x, 0.0, prog, f"{name}/relu"), tail, prog, name)


def _softsign(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    den = popops.add(graph, popops.abs(graph, x, prog, f"{name}/abs"), 1.0, prog, f"{name}/den")
    return popops.div(graph, x, den, prog, name)


def _thresholded_relu(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    above = popops.gt(graph, x, float(attrs.get("alpha", 1.0)), prog, f"{name}/above")
    return popops.select(graph, x, 0.0, above, prog, name)


def _shrink(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    lambd = float(attrs.get("lambd", 0.5))
    bias = float(attrs.get("bias", 0.0))
    low = popops.lt(graph, x, -lambd, prog, f"{name}/low")
    high = popops.gt(graph, x, lambd, prog, f"{name}/high")
    up = popops.add(graph, x, bias, prog, f"{name}/plusBias")
    down = popops.sub(graph, x, bias, prog, f"{name}/minusBias")
    inner = popops.select(graph, down, 0.0, high, prog, f"{name}/high")
    return popops.select(graph, up, inner, low, prog, name)


def _np_elu(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(x)).astype(x.dtype)


_elementwise(
    "LeakyRelu",
    _leaky_relu,
    lambda x, a: np.where(x > 0, x, x * float(a.get("alpha", 0.01))).astype(x.dtype),
    6,
)
_elementwise("Elu", _elu, lambda x, a: _np_elu(x, float(a.get("alpha", 1.0))), 6)
_elementwise(
    "Selu",
    _selu,
    lambda x, a: (
        float(a.get("gamma", _SELU_GAMMA)) * _np_elu(x, float(a.get("alpha", _SELU_ALPHA)))
    ).astype(x.dtype),
    6,
)
_elementwise(
    "HardSigmoid",
    _hard_sigmoid,
    lambda x, a: np.clip(float(a.get("alpha", 0.2)) * x + float(a.get("beta", 0.5)), 0, 1).astype(
        x.dtype
    ),
    6,
)
_elementwise("Softplus", _softplus, lambda x, a: np.logaddexp(x, 0).astype(x.dtype), 1)
_elementwise("Softsign", _softsign, lambda x, a: (x / (1 + np.abs(x))).astype(x.dtype), 1)
_elementwise(
    "ThresholdedRelu",
    _thresholded_relu,
    lambda x, a: np.where(x > float(a.get("alpha", 1.0)), x, 0).astype(x.dtype),
    10,
)
_elementwise(
    "Shrink",
    _shrink,
    lambda x, a: np.where(
        x < -float(a.get("lambd", 0.5)),
        x + float(a.get("bias", 0.0)),
        np.where(x > float(a.get("lambd", 0.5)), x - float(a.get("bias", 0.0)), 0),
    ).astype(x.dtype),
    9,
)


@register("PRelu", since=6)
def _prelu(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x, slope = inputs
    if not isinstance(x, Tensor) and not isinstance(slope, Tensor):
        x, slope = np.asarray(x), np.asarray(slope)
        return [np.where(x < 0, x * slope, x).astype(x.dtype)]
    x = float_check(tensor(graph, x, name), "PRelu", name)
    slope = tensor(graph, slope, name, x)
    scaled = popops.mul(graph, x, slope, prog, f"{name}/scaled")
    negative = popops.lt(graph, x, 0.0, prog, f"{name}/negative")
    return [popops.select(graph, scaled, x, negative, prog, name)]


# ------------------------------------------------------------------ gradients
def _dy_times(g: GradContext, factor: Tensor) -> Tensor:
    return popops.mul(g.graph, g.grad_output(0), factor, g.prog, g.name)


@register_grad("LeakyRelu")
def _leaky_relu_grad(g: GradContext) -> Grads:
    x = g.inputs[0]
    alpha = float(g.attrs.get("alpha", 0.01))
    positive = popops.gt(g.graph, x, 0.0, g.prog, f"{g.name}/positive")
    dy = g.grad_output(0)
    scaled = popops.mul(g.graph, dy, alpha, g.prog, f"{g.name}/scaled")
    return [popops.select(g.graph, dy, scaled, positive, g.prog, g.name)]


def _elu_grad_core(g: GradContext, alpha: float, gamma: float) -> Tensor:
    """``dy·gamma`` where ``x > 0``, else ``dy·gamma·alpha·exp(x)``."""
    x = g.inputs[0]
    e = popops.mul(g.graph, popops.exp(g.graph, x, g.prog, f"{g.name}/exp"), alpha * gamma,
                   g.prog, f"{g.name}/negSlope")  # fmt: skip
    positive = popops.gt(g.graph, x, 0.0, g.prog, f"{g.name}/positive")
    slope = popops.select(g.graph, gamma, e, positive, g.prog, f"{g.name}/slope")
    return _dy_times(g, slope)


@register_grad("Elu")
def _elu_grad(g: GradContext) -> Grads:
    return [_elu_grad_core(g, float(g.attrs.get("alpha", 1.0)), 1.0)]


@register_grad("Selu")
def _selu_grad(g: GradContext) -> Grads:
    alpha = float(g.attrs.get("alpha", _SELU_ALPHA))
    return [_elu_grad_core(g, alpha, float(g.attrs.get("gamma", _SELU_GAMMA)))]


@register_grad("HardSigmoid")
def _hard_sigmoid_grad(g: GradContext) -> Grads:
    """``alpha·dy`` where ``0 < alpha·x + beta < 1``, else 0."""
    x = g.inputs[0]
    alpha = float(g.attrs.get("alpha", 0.2))
    beta = float(g.attrs.get("beta", 0.5))
    lin = popops.add(g.graph, popops.mul(g.graph, x, alpha, g.prog, f"{g.name}/alpha"), beta,
                     g.prog, f"{g.name}/beta")  # fmt: skip
    inside = popops.logicalAnd(
        g.graph,
        popops.gt(g.graph, lin, 0.0, g.prog, f"{g.name}/aboveZero"),
        popops.lt(g.graph, lin, 1.0, g.prog, f"{g.name}/belowOne"),
        g.prog,
        f"{g.name}/inside",
    )
    scaled = popops.mul(g.graph, g.grad_output(0), alpha, g.prog, f"{g.name}/scaled")
    return [popops.select(g.graph, scaled, 0.0, inside, g.prog, g.name)]


@register_grad("Softplus")
def _softplus_grad(g: GradContext) -> Grads:
    """``dy·sigmoid(x)``."""
    return [_dy_times(g, popops.sigmoid(g.graph, g.inputs[0], g.prog, f"{g.name}/sigmoid"))]


@register_grad("Softsign")
def _softsign_grad(g: GradContext) -> Grads:
    """``dy / (1 + |x|)²``."""
    x = g.inputs[0]
    den = popops.add(g.graph, popops.abs(g.graph, x, g.prog, f"{g.name}/abs"), 1.0, g.prog,
                     f"{g.name}/den")  # fmt: skip
    den2 = popops.square(g.graph, den, g.prog, f"{g.name}/den2")
    return [popops.div(g.graph, g.grad_output(0), den2, g.prog, g.name)]


@register_grad("ThresholdedRelu")
def _thresholded_relu_grad(g: GradContext) -> Grads:
    above = popops.gt(g.graph, g.inputs[0], float(g.attrs.get("alpha", 1.0)), g.prog,
                      f"{g.name}/above")  # fmt: skip
    return [popops.select(g.graph, g.grad_output(0), 0.0, above, g.prog, g.name)]


@register_grad("PRelu")
def _prelu_grad(g: GradContext) -> Grads:
    """``dx = dy·(x < 0 ? slope : 1)``, ``dslope = sum(dy·(x < 0 ? x : 0))``."""
    x, slope = g.inputs[0], g.inputs[1]
    dy = g.grad_output(0)
    negative = popops.lt(g.graph, x, 0.0, g.prog, f"{g.name}/negative")
    dx = popops.select(g.graph, popops.mul(g.graph, dy, slope, g.prog, f"{g.name}/dySlope"), dy,
                       negative, g.prog, f"{g.name}/dx")  # fmt: skip
    dslope = popops.select(g.graph, popops.mul(g.graph, dy, x, g.prog, f"{g.name}/dyX"), 0.0,
                           negative, g.prog, f"{g.name}/dslope")  # fmt: skip
    grads: list = [unbroadcast(g.graph, dx, x.shape(), g.prog, f"{g.name}/dxSum")]
    if isinstance(slope, Tensor):
        grads.append(unbroadcast(g.graph, dslope, slope.shape(), g.prog, f"{g.name}/slopeSum"))
    else:
        grads.append(None)
    return grads


# --------------------------------------------------------- sign and rounding
def _plain(op: str, fn: Callable, numpy_fn: Callable, since: int, floats: bool) -> None:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        x = inputs[0]
        if not isinstance(x, Tensor):
            return [numpy_fn(np.asarray(x))]
        if floats:
            float_check(x, op, name)
        return [fn(graph, x, prog, name)]

    register(op, since=since)(lower)


_plain("Sign", popops.signum, np.sign, 9, floats=False)
# ONNX rounds halves to even: popops' NEARBY_INT (round to nearest, ties to even)
_plain("Round", popops.nearbyint, np.round, 11, floats=True)
_plain("IsNaN", popops.isNaN, np.isnan, 9, floats=True)


@register("IsInf", since=10)
def _is_inf(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    negative = int(attrs.get("detect_negative", 1))
    positive = int(attrs.get("detect_positive", 1))
    x = inputs[0]
    if not isinstance(x, Tensor):
        x = np.asarray(x)
        return [np.isinf(x) & (((x > 0) & bool(positive)) | ((x < 0) & bool(negative)))]
    x = float_check(x, "IsInf", name)
    inf = popops.isInf(graph, x, prog, f"{name}/isInf" if not (negative and positive) else name)
    if negative and positive:
        return [inf]
    if not negative and not positive:
        return [popops.logicalAnd(graph, inf, False, prog, name)]
    side = (
        popops.gt(graph, x, 0.0, prog, f"{name}/side")
        if positive
        else popops.lt(graph, x, 0.0, prog, f"{name}/side")
    )
    return [popops.logicalAnd(graph, inf, side, prog, name)]


def _zero_grad(g: GradContext) -> Grads:
    x = g.inputs[0]
    return [zeros(g.graph, x.elementType(), x.shape(), g.prog, f"{g.name}/zero")]


register_grad("Sign")(_zero_grad)
register_grad("Round")(_zero_grad)


# -------------------------------------------------------------- trigonometry
def _tan(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    return popops.div(graph, popops.sin(graph, x, prog, f"{name}/sin"),
                      popops.cos(graph, x, prog, f"{name}/cos"), prog, name)  # fmt: skip


def _asin(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    return popops.asin(graph, x, prog, name)


def _acos(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    a = popops.asin(graph, x, prog, f"{name}/asin")
    return popops.sub(graph, tensor(graph, np.float32(math.pi / 2), name, x), a, prog, name)


def _atan(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    one = tensor(graph, np.ones(x.shape(), np.float32), f"{name}/one", x)
    return popops.atan2(graph, x, one, prog, name)


def _sinh(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    """``(exp(x) - exp(-x)) / 2``."""
    e = popops.exp(graph, x, prog, f"{name}/exp")
    en = popops.exp(graph, popops.neg(graph, x, prog, f"{name}/neg"), prog, f"{name}/expNeg")
    return popops.mul(graph, popops.sub(graph, e, en, prog, f"{name}/diff"), 0.5, prog, name)


def _cosh(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    """``(exp(x) + exp(-x)) / 2``."""
    e = popops.exp(graph, x, prog, f"{name}/exp")
    en = popops.exp(graph, popops.neg(graph, x, prog, f"{name}/neg"), prog, f"{name}/expNeg")
    return popops.mul(graph, popops.add(graph, e, en, prog, f"{name}/sum"), 0.5, prog, name)


def _log_x_plus_root(graph: Graph, x: Tensor, c: float, prog: Any, name: str) -> Tensor:
    """``log(x + sqrt(x² + c))`` (Asinh: c = 1, Acosh: c = -1)."""
    x2 = popops.add(graph, popops.square(graph, x, prog, f"{name}/x2"), c, prog, f"{name}/x2c")
    root = popops.sqrt(graph, x2, prog, f"{name}/sqrt")
    return popops.log(graph, popops.add(graph, x, root, prog, f"{name}/sum"), prog, name)


def _atanh(graph: Graph, x: Tensor, attrs: dict, prog: Any, name: str) -> Tensor:
    """``log((1 + x) / (1 - x)) / 2``."""
    num = popops.add(graph, x, 1.0, prog, f"{name}/onePlus")
    den = popops.sub(graph, tensor(graph, np.float32(1.0), name, x), x, prog, f"{name}/oneMinus")
    ratio = popops.div(graph, num, den, prog, f"{name}/ratio")
    return popops.mul(graph, popops.log(graph, ratio, prog, f"{name}/log"), 0.5, prog, name)


_elementwise("Tan", _tan, lambda x, a: np.tan(x), 7)
_elementwise("Asin", _asin, lambda x, a: np.arcsin(x), 7)
_elementwise("Acos", _acos, lambda x, a: np.arccos(x), 7)
_elementwise("Atan", _atan, lambda x, a: np.arctan(x), 7)
_elementwise("Sinh", _sinh, lambda x, a: np.sinh(x), 9)
_elementwise("Cosh", _cosh, lambda x, a: np.cosh(x), 9)
_elementwise(
    "Asinh", lambda g, x, a, p, n: _log_x_plus_root(g, x, 1.0, p, n), lambda x, a: np.arcsinh(x), 9
)
_elementwise(
    "Acosh", lambda g, x, a, p, n: _log_x_plus_root(g, x, -1.0, p, n), lambda x, a: np.arccosh(x), 9
)
_elementwise("Atanh", _atanh, lambda x, a: np.arctanh(x), 9)


@register_grad("Tan")
def _tan_grad(g: GradContext) -> Grads:
    """``dy / cos²(x)``."""
    c = popops.cos(g.graph, g.inputs[0], g.prog, f"{g.name}/cos")
    return [popops.div(g.graph, g.grad_output(0), popops.square(g.graph, c, g.prog,
                       f"{g.name}/cos2"), g.prog, g.name)]  # fmt: skip


def _one_minus_x2_root(g: GradContext) -> Tensor:
    x = g.inputs[0]
    x2 = popops.square(g.graph, x, g.prog, f"{g.name}/x2")
    one = popops.sub(g.graph, tensor(g.graph, np.float32(1.0), g.name, x), x2, g.prog,
                     f"{g.name}/oneMinusX2")  # fmt: skip
    return popops.sqrt(g.graph, one, g.prog, f"{g.name}/sqrt")


@register_grad("Asin")
def _asin_grad(g: GradContext) -> Grads:
    """``dy / sqrt(1 - x²)``."""
    return [popops.div(g.graph, g.grad_output(0), _one_minus_x2_root(g), g.prog, g.name)]


@register_grad("Acos")
def _acos_grad(g: GradContext) -> Grads:
    """``-dy / sqrt(1 - x²)``."""
    d = popops.div(g.graph, g.grad_output(0), _one_minus_x2_root(g), g.prog, f"{g.name}/d")
    return [popops.neg(g.graph, d, g.prog, g.name)]


@register_grad("Atan")
def _atan_grad(g: GradContext) -> Grads:
    """``dy / (1 + x²)``."""
    x2 = popops.square(g.graph, g.inputs[0], g.prog, f"{g.name}/x2")
    den = popops.add(g.graph, x2, 1.0, g.prog, f"{g.name}/den")
    return [popops.div(g.graph, g.grad_output(0), den, g.prog, g.name)]


@register_grad("Sinh")
def _sinh_grad(g: GradContext) -> Grads:
    return [_dy_times(g, _cosh(g.graph, g.inputs[0], {}, g.prog, f"{g.name}/cosh"))]


@register_grad("Cosh")
def _cosh_grad(g: GradContext) -> Grads:
    return [_dy_times(g, _sinh(g.graph, g.inputs[0], {}, g.prog, f"{g.name}/sinh"))]


# ------------------------------------------------------------------ Mean, Mod
@register("Mean", since=8)
def _mean(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    if first_tensor(inputs) is None:
        arrays = [np.asarray(v) for v in inputs]
        return [(sum(arrays[1:], arrays[0]) / len(arrays)).astype(arrays[0].dtype)]
    like = first_tensor(inputs)
    float_check(like, "Mean", name)
    total = tensor(graph, inputs[0], name, like)
    for i, v in enumerate(inputs[1:], 1):
        total = popops.add(graph, total, tensor(graph, v, name, like), prog, f"{name}/sum{i}")
    if len(inputs) == 1:
        return [popops.add(graph, total, 0.0, prog, name)]
    return [popops.mul(graph, total, 1.0 / len(inputs), prog, name)]


@register_grad("Mean")
def _mean_grad(g: GradContext) -> Grads:
    n = len(g.inputs)
    d = popops.mul(g.graph, g.grad_output(0), 1.0 / n, g.prog, g.name)
    return [
        unbroadcast(g.graph, d, x.shape(), g.prog, f"{g.name}/sum{i}")
        if isinstance(x, Tensor)
        else None
        for i, x in enumerate(g.inputs)
    ]


def _np_mod(a: np.ndarray, b: np.ndarray, fmod: int) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.fmod(a, b) if fmod else np.mod(a, b)


@register("Mod", since=10)
def _mod(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    """``fmod=1``: C's ``fmod`` (the dividend's sign, ``popops.rem``); ``fmod=0``:
    Python's ``%`` (the divisor's sign), ``r + b`` where ``r != 0`` and the signs of
    ``r`` and ``b`` differ."""
    fmod = int(attrs.get("fmod", 0))
    a, b = inputs
    like = first_tensor([a, b])
    if like is None:
        return [_np_mod(np.asarray(a), np.asarray(b), fmod)]
    a = tensor(graph, a, name, like)
    b = tensor(graph, b, name, like)
    if like.elementType() == BOOL:
        raise popart_exception(f"Mod (node '{name}'): BOOL inputs; required numbers")
    r = popops.rem(graph, a, b, prog, f"{name}/rem" if not fmod else name)
    if fmod:
        return [r]
    nonzero = popops.neq(graph, r, 0, prog, f"{name}/nonZero")
    differ = popops.neq(
        graph,
        popops.lt(graph, r, 0, prog, f"{name}/rNeg"),
        popops.lt(graph, b, 0, prog, f"{name}/bNeg"),
        prog,
        f"{name}/signsDiffer",
    )
    fix = popops.logicalAnd(graph, nonzero, differ, prog, f"{name}/fix")
    shifted = popops.add(graph, r, b, prog, f"{name}/shifted")
    return [popops.select(graph, shifted, r, fix, prog, name)]


__all__: list[str] = []


# ------------------------------------------------ gradients of the rewritten ops
@register_grad("Asinh")
def _asinh_grad(g: GradContext) -> Grads:
    """``dy / sqrt(x² + 1)``."""
    x2 = popops.square(g.graph, g.inputs[0], g.prog, f"{g.name}/x2")
    root = popops.sqrt(g.graph, popops.add(g.graph, x2, 1.0, g.prog, f"{g.name}/plus1"), g.prog,
                       f"{g.name}/sqrt")  # fmt: skip
    return [popops.div(g.graph, g.grad_output(0), root, g.prog, g.name)]


@register_grad("Acosh")
def _acosh_grad(g: GradContext) -> Grads:
    """``dy / sqrt(x² - 1)``."""
    x2 = popops.square(g.graph, g.inputs[0], g.prog, f"{g.name}/x2")
    root = popops.sqrt(g.graph, popops.sub(g.graph, x2, 1.0, g.prog, f"{g.name}/minus1"),
                       g.prog, f"{g.name}/sqrt")  # fmt: skip
    return [popops.div(g.graph, g.grad_output(0), root, g.prog, g.name)]


@register_grad("Atanh")
def _atanh_grad(g: GradContext) -> Grads:
    """``dy / (1 - x²)``."""
    x = g.inputs[0]
    x2 = popops.square(g.graph, x, g.prog, f"{g.name}/x2")
    den = popops.sub(g.graph, tensor(g.graph, np.float32(1.0), g.name, x), x2, g.prog,
                     f"{g.name}/oneMinusX2")  # fmt: skip
    return [popops.div(g.graph, g.grad_output(0), den, g.prog, g.name)]


@register_grad("Shrink")
def _shrink_grad(g: GradContext) -> Grads:
    """``dy`` where ``|x| > lambd``, else 0."""
    lambd = float(g.attrs.get("lambd", 0.5))
    outside = popops.gt(g.graph, popops.abs(g.graph, g.inputs[0], g.prog, f"{g.name}/abs"),
                        lambd, g.prog, f"{g.name}/outside")  # fmt: skip
    return [popops.select(g.graph, g.grad_output(0), 0.0, outside, g.prog, g.name)]
