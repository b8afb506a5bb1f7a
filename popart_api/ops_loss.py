"""PopART's loss ops (domain ``ai.graphcore``): ``Nll``, ``L1`` and ``IdentityLoss``.

As in PopART (``willow/src/builder.cpp``, ``popx/op/nllx.cpp``, ``popx/op/l1x.cpp``):

* every loss has a ``reduction`` attribute, ``"Sum"``, ``"Mean"`` or ``"NoReduction"``
  (:class:`ReductionType`);
* ``Nll(probs [..., C], label [...])`` is ``-log(probs[label])`` per sample
  (``-probs[label]`` with ``inputIsLogProbability``); samples whose label equals
  ``ignoreIndex`` count zero, and ``Mean`` divides by the number of samples not
  ignored (at least 1);
* ``L1(x)`` is ``lambda·|x|``; ``Mean`` divides by the number of elements of ``x``;
* ``IdentityLoss(x)`` is ``x`` reduced (sum or mean over all elements).

Each loss keeps, for its gradient, what the forward pass made (the one-hot labels and
the per-sample weights of ``Nll``). When ``Nll``'s probabilities come straight from a
``Softmax`` over the last dimension that nothing else reads, the gradient of the
softmax input is ``(p - onehot)·w`` in one step, as PopART's
``NlllWithSoftmaxGradDirect`` pattern does; without the pattern ``-onehot·w/p`` would
be passed back through the softmax gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from popart_api.autodiff import GradContext, NodeRecord, register_fused_grad, register_grad
from popart_api.builder import GRAPHCORE_DOMAIN
from popart_api.errors import popart_exception
from popart_api.ops import float_check, register, tensor
from popart_api.options import ReductionType
from poplar_api import HALF, INT, UNSIGNED_INT, Graph, Tensor, popnn, popops
from poplar_api.popops import Operation
from poplar_api.poputil import mapTensorLinearly


def reduction_of(attrs: dict[str, Any], op: str, name: str) -> ReductionType:
    """The ``reduction`` attribute of a loss node (default ``Mean``, as PopART)."""
    value = attrs.get("reduction", "Mean")
    if isinstance(value, ReductionType):
        return value
    aliases = {"sum": "Sum", "mean": "Mean", "noreduction": "NoReduction", "none": "NoReduction"}
    key = aliases.get(str(value).lower())
    if key is None:
        raise popart_exception(
            f"{op} (node '{name}'): reduction '{value}' is not one of Sum, Mean, NoReduction; "
            "hint: popart.ReductionType.Mean"
        )
    return ReductionType(key)


def _reduce_all(graph: Graph, t: Tensor, prog: Any, name: str) -> Tensor:
    flat = t.reshape([max(t.numElements(), 1)]) if t.rank() != 1 else t
    return popops.reduce(graph, flat, [0], Operation.ADD, prog, f"{name}/sum")


def _scalar_like(graph: Graph, dy: Tensor, shape: Sequence[int]) -> Tensor:
    """``dy`` (a scalar) viewed with ``shape`` (every element the same value)."""
    view = dy.reshape([1] * len(shape))
    for d, n in enumerate(shape):
        if n != 1:
            view = view.broadcast(int(n), d)
    return view


# ------------------------------------------------------------------------ Nll
#: The smallest probability the loss takes the log of (PopART's ``NllOpx``: 1e-7, for
#: FLOAT16 6.104e-5), and the one its gradient divides by (1e-10; FLOAT16 6.104e-5).
NLL_EPS = 1.0e-7
NLL_EPS_HALF = 6.104e-05
NLL_GRAD_EPS = 1.0e-10
NLL_GRAD_EPS_HALF = 6.104e-05


@register("Nll", domain=GRAPHCORE_DOMAIN)
def _nll(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    if len(inputs) != 2 or not all(isinstance(v, Tensor) for v in inputs):
        raise popart_exception(
            f"Nll (node '{name}'): needs two tensor inputs, probabilities [..., C] and "
            f"labels [...]; got {len(inputs)}"
        )
    probs = float_check(inputs[0], "Nll", name)
    label = inputs[1]
    if label.elementType() not in (INT, UNSIGNED_INT):
        raise popart_exception(
            f"Nll (node '{name}'): label '{label.name}' is {label.elementType().name}; "
            "labels must be INT32 or UINT32"
        )
    if probs.rank() < 1 or probs.shape()[:-1] != label.shape():
        raise popart_exception(
            f"Nll (node '{name}'): probabilities {probs.shape()} and labels {label.shape()} "
            "do not match; required: probabilities [..., C] with labels [...]"
        )
    reduction = reduction_of(attrs, "Nll", name)
    classes = probs.dim(probs.rank() - 1)
    n = max(label.numElements(), 1)
    flat_p = probs.reshape([n, classes])
    flat_l = label.reshape([n])
    weight = None  # per-sample weight: 1, or 0 for ignored samples
    if "ignoreIndex" in attrs:
        ignore = int(attrs["ignoreIndex"])
        keep = popops.neq(graph, flat_l, ignore, prog, f"{name}/keep")
        weight = popops.cast(graph, keep, probs.elementType(), prog, f"{name}/weight")
        if not 0 <= ignore < classes:  # e.g. -100: an all-zero one-hot row
            flat_l = popops.select(
                graph,
                flat_l,
                -1 if flat_l.elementType() == INT else popnn.MASKED_LABEL_CODE,
                keep,
                prog,
                f"{name}/mask",
            )
    onehot = graph.addVariable(probs.elementType(), [n, classes], f"{name}/onehot")
    mapTensorLinearly(graph, onehot)
    popnn.encodeOneHot(graph, flat_l, onehot, prog, f"{name}/onehot")
    # as PopART's NllOpx: pick each sample's probability, then log(max(p, eps)) so a
    # zero probability gives a large finite loss, not inf
    picked = popops.mul(graph, flat_p, onehot, prog, f"{name}/pick")
    per_sample = popops.reduce(graph, picked, [1], Operation.ADD, prog, f"{name}/pickSum")
    if not int(attrs.get("inputIsLogProbability", 0)):
        eps = NLL_EPS_HALF if probs.elementType() == HALF else NLL_EPS
        per_sample = popops.log(
            graph, popops.max(graph, per_sample, eps, prog, f"{name}/clamp"), prog, f"{name}/log"
        )
    per_sample = popops.neg(graph, per_sample, prog, f"{name}/neg")
    if weight is not None:
        per_sample = popops.mul(graph, per_sample, weight, prog, f"{name}/ignore")
    count = None
    if reduction is ReductionType.NoReduction:
        loss = per_sample.reshape(label.shape())
    else:
        loss = _reduce_all(graph, per_sample, prog, name)
        if reduction is ReductionType.Mean:
            if weight is None:
                count = float(n)
                loss = popops.mul(graph, loss, 1.0 / n, prog, f"{name}/mean")
            else:
                kept = _reduce_all(graph, weight, prog, f"{name}/count")
                count = popops.max(graph, kept, 1.0, prog, f"{name}/countMin1")
                loss = popops.div(graph, loss, count, prog, f"{name}/mean")
    return [loss, onehot, weight, count, reduction]


def nll_sample_weights(g: GradContext) -> Tensor:
    """``w`` per sample [n]: the loss gradient spread over the samples (``/count``
    for Mean, zero for ignored samples)."""
    onehot, weight, count, reduction = g.outputs[1:5]
    n = onehot.dim(0)
    dy = g.grad_output(0)
    if reduction is ReductionType.NoReduction:
        w = dy.reshape([n])
    else:
        w = _scalar_like(g.graph, dy.reshape([]), [n])
        if reduction is ReductionType.Mean:
            if isinstance(count, Tensor):
                w = popops.div(g.graph, w, count, g.prog, f"{g.name}/mean")
            else:
                w = popops.mul(g.graph, w, 1.0 / float(count), g.prog, f"{g.name}/mean")
    if weight is not None:
        w = popops.mul(g.graph, w, weight, g.prog, f"{g.name}/ignore")
    return w


@register_grad("Nll", domain=GRAPHCORE_DOMAIN)
def _nll_grad(g: GradContext) -> list:
    probs = g.inputs[0]
    onehot = g.outputs[1]
    n, classes = onehot.shape()
    w = nll_sample_weights(g).expand([1])
    scaled = popops.mul(g.graph, onehot, w, g.prog, f"{g.name}/weighted")
    if int(g.attrs.get("inputIsLogProbability", 0)):
        dp = popops.neg(g.graph, scaled, g.prog, f"{g.name}/neg")
    else:
        flat_p = probs.reshape([n, classes])
        eps = NLL_GRAD_EPS_HALF if probs.elementType() == HALF else NLL_GRAD_EPS
        safe = popops.max(g.graph, flat_p, eps, g.prog, f"{g.name}/clamp")
        dp = popops.div(g.graph, scaled, safe, g.prog, f"{g.name}/overP")
        dp = popops.neg(g.graph, dp, g.prog, f"{g.name}/neg")
    return [dp.reshape(probs.shape()), None]


def nll_softmax_grad(g: GradContext, softmax_out: Tensor) -> Tensor:
    """Gradient of the logits of ``Softmax -> Nll``: ``(p - onehot)·w``."""
    onehot = g.outputs[1]
    n, classes = onehot.shape()
    p = softmax_out.reshape([n, classes])
    diff = popops.sub(g.graph, p, onehot, g.prog, f"{g.name}/pMinusOnehot")
    w = nll_sample_weights(g).expand([1])
    return popops.mul(g.graph, diff, w, g.prog, f"{g.name}/weighted").reshape(softmax_out.shape())


@register_fused_grad(("ai.onnx", "Softmax"), (GRAPHCORE_DOMAIN, "Nll"))
def _softmax_nll_grad(g: GradContext, softmax: NodeRecord) -> Tensor:
    """Softmax over the last dimension straight into Nll: ``(p - onehot)·w``; other
    axes fall back to the two gradients one after the other."""
    y = softmax.outputs[0]
    rank = y.rank()
    default = 1 if softmax.opset < 13 else -1
    axis = int(softmax.attrs.get("axis", default)) % max(rank, 1)
    if axis != rank - 1 or int(g.attrs.get("inputIsLogProbability", 0)):
        from popart_api.autodiff import GRAD_REGISTRY

        dp = _nll_grad(g)[0]
        sctx = GradContext(
            graph=g.graph,
            prog=g.prog,
            name=f"{softmax.name}/grad",
            op_type="Softmax",
            attrs=softmax.attrs,
            opset=softmax.opset,
            inputs=softmax.inputs,
            outputs=softmax.outputs,
            grad_outputs=[dp],
            wanted=[True],
        )
        return GRAD_REGISTRY[("ai.onnx", "Softmax")](sctx)[0]
    return nll_softmax_grad(g, y)


# ------------------------------------------------------------------------- L1
@register("L1", domain=GRAPHCORE_DOMAIN)
def _l1(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = float_check(tensor(graph, inputs[0], name), "L1", name)
    if "lambda" not in attrs:
        raise popart_exception(f"L1 (node '{name}'): attribute 'lambda' is required")
    lam = float(attrs["lambda"])
    reduction = reduction_of(attrs, "L1", name)
    a = popops.abs(graph, x, prog, f"{name}/abs")
    if reduction is ReductionType.NoReduction:
        return [popops.mul(graph, a, lam, prog, f"{name}/lambda")]
    total = _reduce_all(graph, a, prog, name)
    scale = lam / max(x.numElements(), 1) if reduction is ReductionType.Mean else lam
    return [popops.mul(graph, total, scale, prog, f"{name}/scale")]


@register_grad("L1", domain=GRAPHCORE_DOMAIN)
def _l1_grad(g: GradContext) -> list:
    x = g.inputs[0]
    lam = float(g.attrs["lambda"])
    reduction = reduction_of(g.attrs, "L1", g.name)
    sign = popops.signum(g.graph, x, g.prog, f"{g.name}/sign")
    dy = g.grad_output(0)
    if reduction is ReductionType.NoReduction:
        scaled = popops.mul(g.graph, dy, lam, g.prog, f"{g.name}/lambda")
        return [popops.mul(g.graph, sign, scaled, g.prog, g.name)]
    scale = lam / max(x.numElements(), 1) if reduction is ReductionType.Mean else lam
    dys = popops.mul(g.graph, dy.reshape([]), scale, g.prog, f"{g.name}/scale")
    return [popops.mul(g.graph, sign, _scalar_like(g.graph, dys, x.shape()), g.prog, g.name)]


# --------------------------------------------------------------- IdentityLoss
@register("IdentityLoss", domain=GRAPHCORE_DOMAIN)
def _identity_loss(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = float_check(tensor(graph, inputs[0], name), "IdentityLoss", name)
    reduction = reduction_of(attrs, "IdentityLoss", name)
    if reduction is ReductionType.NoReduction:
        return [x]
    total = _reduce_all(graph, x, prog, name)
    if reduction is ReductionType.Mean:
        total = popops.mul(graph, total, 1.0 / max(x.numElements(), 1), prog, f"{name}/mean")
    return [total]


@register_grad("IdentityLoss", domain=GRAPHCORE_DOMAIN)
def _identity_loss_grad(g: GradContext) -> list:
    x = g.inputs[0]
    reduction = reduction_of(g.attrs, "IdentityLoss", g.name)
    dy = g.grad_output(0)
    if reduction is ReductionType.NoReduction:
        return [dy]
    if reduction is ReductionType.Mean:
        dy = popops.mul(g.graph, dy, 1.0 / max(x.numElements(), 1), g.prog, f"{g.name}/mean")
    # A new tensor, not a view, so later in-place accumulation cannot alias.
    return [
        popops.add(g.graph, _scalar_like(g.graph, dy.reshape([]), x.shape()), 0.0, g.prog, g.name)
    ]


__all__ = [
    "ReductionType",
    "nll_sample_weights",
    "nll_softmax_grad",
    "reduction_of",
]
