"""Lowerings and gradients of ONNX's neural-network ops (convolution, pooling,
normalisation).

Convolutions lower onto ``poplin.convolution`` (any number of field dimensions,
groups, asymmetric padding, strides, dilations) with the backward-data pass
(``poplin.getGradientParams``) and ``poplin.calculateWeightDeltas`` for the weight
gradient, so a training profile shows the three planned convolution passes Poplibs
would run. Poolings lower onto ``popnn.pooling.pool`` / ``poolInputGradient``.
There is no ``popnn`` normalisation module in ipusim, so BatchNormalization,
LayerNormalization and GroupNormalization are composed from ``popops`` reductions
and broadcast elementwise ops (the same passes over the data ``popnn::bn`` makes:
statistics, then whitening).

Forward lowerings return, after the node's outputs, values their gradients reuse
(batch statistics, the whitened input); gradient functions find them at fixed
positions of ``GradContext.outputs``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from popart_api.autodiff import GradContext, Grads, register_grad, unbroadcast
from popart_api.errors import popart_exception
from popart_api.ops import Value, context, float_check, register, tensor
from poplar_api import Graph, Tensor, poplin, popops
from poplar_api import program as pprog
from poplar_api.popnn import pooling
from poplar_api.popops import Operation, ReduceParams

_AUTO_PADS = ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER")


# ------------------------------------------------------------------ helpers
def _str_attr(attrs: dict, key: str, default: str) -> str:
    v = attrs.get(key, default)
    return v.decode() if isinstance(v, bytes) else str(v)


def _ints(
    attrs: dict, key: str, n: int, default: int, op: str, name: str, minimum: int = 1
) -> list[int]:
    """Attribute ``key``: ``n`` ints (one per field dimension), each ``>= minimum``."""
    if key not in attrs:
        return [default] * n
    vals = [int(v) for v in np.asarray(attrs[key]).reshape(-1)]
    if len(vals) != n:
        raise popart_exception(
            f"{op} (node '{name}'): attribute '{key}' is {vals} ({len(vals)} values); required "
            f"{n} values, one per field dimension of the input"
        )
    if any(v < minimum for v in vals):
        raise popart_exception(
            f"{op} (node '{name}'): attribute '{key}' is {vals}; every value must be >= {minimum}"
        )
    return vals


def _pads(
    attrs: dict,
    field: Sequence[int],
    window: Sequence[int],
    strides: Sequence[int],
    op: str,
    name: str,
) -> tuple[list[int], list[int]]:
    """Lower and upper padding of each field dimension from ``pads`` / ``auto_pad``.

    ``window`` is the extent of the (dilated) kernel. ``SAME_UPPER``/``SAME_LOWER``
    give ``ceil(in / stride)`` outputs, the odd padding element going at the end /
    start, as the ONNX spec says.
    """
    n = len(field)
    auto = _str_attr(attrs, "auto_pad", "NOTSET")
    if auto not in _AUTO_PADS:
        raise popart_exception(
            f"{op} (node '{name}'): auto_pad '{auto}' is not supported; required one of "
            f"{', '.join(_AUTO_PADS)}"
        )
    if auto == "NOTSET":
        pads = [int(p) for p in np.asarray(attrs.get("pads", [0] * 2 * n)).reshape(-1)]
        if len(pads) != 2 * n or any(p < 0 for p in pads):
            raise popart_exception(
                f"{op} (node '{name}'): attribute 'pads' is {pads}; required {2 * n} values "
                f">= 0 ([begin of each field dim..., end of each...])"
            )
        return pads[:n], pads[n:]
    if auto == "VALID":
        return [0] * n, [0] * n
    lower, upper = [], []
    for size, w, s in zip(field, window, strides, strict=True):
        out = -(-size // s)
        total = max(0, (out - 1) * s + w - size)
        small, big = total // 2, total - total // 2
        lower.append(small if auto == "SAME_UPPER" else big)
        upper.append(big if auto == "SAME_UPPER" else small)
    return lower, upper


def _pooled_sizes(
    field: Sequence[int],
    window: Sequence[int],
    strides: Sequence[int],
    lower: Sequence[int],
    upper: Sequence[int],
    ceil_mode: bool,
    op: str,
    name: str,
    what: str,
) -> list[int]:
    """Output size of each field dimension of a pooling window of extent ``window``
    (``what`` in errors: the kernel, or the dilated kernel) over the input padded by
    ``lower`` and ``upper``: ``span // stride + 1``, ``span`` the padded input less the
    window; with ``ceil_mode`` the span divided rounding up, less one window when the
    last would start in the end padding (ONNX's rule)."""
    outs = []
    for d, (f, w, s, lo, up) in enumerate(zip(field, window, strides, lower, upper, strict=True)):
        span = f + lo + up - w
        if span < 0:
            raise popart_exception(
                f"{op} (node '{name}'): {what} {w} of field dim {d} is larger than the "
                f"padded input ({f} + {lo} + {up})"
            )
        out = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (out - 1) * s >= f + lo:  # the last window starts in the padding
            out -= 1
        outs.append(out)
    return outs


def _operand(graph: Graph, v: Value, name: str, like: Tensor, op: str) -> Tensor:
    t = float_check(tensor(graph, v, name, like), op, name)
    if t.elementType() != like.elementType():
        raise popart_exception(
            f"{op} (node '{name}'): input '{t.name}' is {t.elementType().name} but '{like.name}' "
            f"is {like.elementType().name}; required: the same float type (hint: add a Cast)"
        )
    return t


def _channel_view(v: Tensor, rank: int) -> Tensor:
    """``[C]`` viewed as ``[1, C, 1, ...]`` to broadcast against ``[N, C, *field]``."""
    return v.reshape([1, v.numElements(), *([1] * (rank - 2))])


def _input_shape(v: Value) -> list[int]:
    return v.shape() if isinstance(v, Tensor) else list(np.shape(v))


def _optional(inputs: list[Value], i: int) -> Value:
    return inputs[i] if len(inputs) > i else None


# ------------------------------------------------------------------ Conv
def _conv_params(
    x_shape: Sequence[int], w_shape: Sequence[int], attrs: dict, dtype: Any, name: str
) -> poplin.ConvParams:
    """The ``poplin.ConvParams`` of an ONNX Conv of ``x_shape`` and ``w_shape``.

    Raises
    ------
    popart_exception
        Rank, channel, group or kernel_shape mismatches, bad attributes.
    """
    op = "Conv"
    rank = len(x_shape)
    if rank < 3 or len(w_shape) != rank:
        raise popart_exception(
            f"{op} (node '{name}'): X has shape {list(x_shape)} and W {list(w_shape)}; required: "
            "X [N, C, *field] with at least one field dimension and W [M, C/group, *kernel] of "
            "the same rank"
        )
    n = rank - 2
    group = int(attrs.get("group", 1))
    batch, chans, field = x_shape[0], x_shape[1], list(x_shape[2:])
    m, ci, kernel = w_shape[0], w_shape[1], list(w_shape[2:])
    if group < 1 or chans % group or m % group:
        raise popart_exception(
            f"{op} (node '{name}'): group={group} must be >= 1 and divide both the input "
            f"channels ({chans}) and the output channels ({m})"
        )
    if ci * group != chans:
        raise popart_exception(
            f"{op} (node '{name}'): W has {ci} input channels per group (shape {list(w_shape)}) "
            f"but X has {chans} channels with group={group}; required W.shape[1] = "
            f"{chans // group} (X channels / group)"
        )
    if "kernel_shape" in attrs:
        ks = [int(k) for k in attrs["kernel_shape"]]
        if ks != kernel:
            raise popart_exception(
                f"{op} (node '{name}'): attribute kernel_shape {ks} differs from W's kernel "
                f"{kernel}; required: equal (hint: drop kernel_shape, it is inferred from W)"
            )
    strides = _ints(attrs, "strides", n, 1, op, name)
    dilations = _ints(attrs, "dilations", n, 1, op, name)
    window = [(k - 1) * d + 1 for k, d in zip(kernel, dilations, strict=True)]
    lower, upper = _pads(attrs, field, window, strides, op, name)
    for d in range(n):
        if field[d] + lower[d] + upper[d] < window[d]:
            raise popart_exception(
                f"{op} (node '{name}'): field dim {d} of size {field[d]} padded by "
                f"{lower[d]}+{upper[d]} is smaller than the dilated kernel ({window[d]}); the "
                "output would be empty"
            )
    return poplin.ConvParams(
        dtype, batch, field, kernel, ci, m // group, group,
        paddingLower=lower, paddingUpper=upper, stride=strides, dilation=dilations,
    )  # fmt: skip


def _conv_options(base: dict[str, str], pass_: str) -> dict[str, str]:
    """The node's Poplibs options ``base`` plus the convolution ``pass``."""
    opts = dict(base)
    opts["pass"] = pass_
    return opts


@register("Conv", since=1)
def _conv(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    """``poplin.convolution`` of X with W (reshaped ``[G, M/G, C/G, *k]``), plus the
    optional bias B by ``poplin.addBias``. Returns ``[Y, options]``: the node's Poplibs
    options are kept for the backward passes (lowered outside the node's context)."""
    x = float_check(tensor(graph, inputs[0], name), "Conv", name)
    w = _operand(graph, inputs[1], name, x, "Conv")
    params = _conv_params(x.shape(), w.shape(), attrs, x.elementType(), name)
    base = dict(context().options)
    pass_ = "TRAINING_FWD" if context().training else "INFERENCE_FWD"
    y = poplin.convolution(
        graph, x, w.reshape(params.weightsShape()), params, False, prog, f"{name}/conv",
        _conv_options(base, pass_),
    )  # fmt: skip
    b = _optional(inputs, 2)
    if b is not None:
        bt = _operand(graph, b, name, x, "Conv")
        if bt.shape() != [y.dim(1)]:
            raise popart_exception(
                f"Conv (node '{name}'): bias B has shape {bt.shape()}; required [{y.dim(1)}] "
                "(one per output channel, W.shape[0])"
            )
        poplin.addBias(graph, y, bt, prog, f"{name}/bias")
    return [y, base]


@register_grad("Conv")
def _conv_grad(g: GradContext) -> Grads:
    """dX by the backward-data convolution, dW by ``calculateWeightDeltas``, dB by summing
    dY over batch and field."""
    dy = g.grad_output(0)
    x = tensor(g.graph, g.inputs[0], g.name, dy)
    w = tensor(g.graph, g.inputs[1], g.name, dy)
    params = _conv_params(x.shape(), w.shape(), g.attrs, x.elementType(), g.name)
    saved = g.outputs[1] if len(g.outputs) > 1 and isinstance(g.outputs[1], dict) else None
    base = saved if saved is not None else dict(context().options)
    out: list[Tensor | None] = [None] * len(g.inputs)
    if g.needs_grad(0):
        out[0] = poplin.convolution(
            g.graph, dy, w.reshape(params.weightsShape()), poplin.getGradientParams(params),
            True, g.prog, f"{g.name}/bwd", _conv_options(base, "TRAINING_BWD"),
        )  # fmt: skip
    if g.needs_grad(1):
        dw = poplin.calculateWeightDeltas(
            g.graph, dy, x, params, g.prog, f"{g.name}/wu", _conv_options(base, "TRAINING_WU")
        )
        out[1] = dw.reshape(w.shape())
    if len(g.inputs) > 2 and g.needs_grad(2):
        dims = [0, *range(2, dy.rank())]
        out[2] = popops.reduce(g.graph, dy, dims, Operation.ADD, g.prog, f"{g.name}/bias")
    return out


# ------------------------------------------------------------------ pooling
class _Pool:
    """An ONNX pooling node as a ``popnn`` pooling.

    Attributes
    ----------
    params
        The ``PoolParams`` run on the device (SUM for an average that counts padding).
    scale
        Per-output divisor reciprocals ``[1, 1, *outField]`` to multiply the SUM by
        (``count_include_pad=1`` with padding), else None.
    """

    def __init__(self, x_shape: Sequence[int], attrs: dict, kind: str, name: str, dtype: Any):
        op = op_name(kind)
        rank = len(x_shape)
        if rank < 3:
            raise popart_exception(
                f"{op} (node '{name}'): X has shape {list(x_shape)}; required [N, C, *field] "
                "with at least one field dimension"
            )
        n = rank - 2
        batch, chans, field = x_shape[0], x_shape[1], list(x_shape[2:])
        self.scale: np.ndarray | None = None
        if kind in ("GlobalAveragePool", "GlobalMaxPool"):
            ptype = pooling.PoolingType.MAX if kind == "GlobalMaxPool" else pooling.PoolingType.AVG
            self.params = pooling.PoolParams(
                ptype, field, field, [1] * n, [0] * n, [0] * n, chans, batch, dtype
            )
            return
        if "kernel_shape" not in attrs:
            raise popart_exception(f"{op} (node '{name}'): attribute 'kernel_shape' is required")
        kernel = _ints(attrs, "kernel_shape", n, 1, op, name)
        strides = _ints(attrs, "strides", n, 1, op, name)
        dilations = _ints(attrs, "dilations", n, 1, op, name)
        if any(d != 1 for d in dilations):
            raise popart_exception(
                f"{op} (node '{name}'): dilations {dilations} are not supported (popnn pooling "
                "has no dilation); required all 1"
            )
        if int(attrs.get("storage_order", 0)) != 0:
            raise popart_exception(
                f"{op} (node '{name}'): storage_order={attrs['storage_order']} is not "
                "supported; required 0 (the Indices output is not supported either)"
            )
        lower, upper = _pads(attrs, field, kernel, strides, op, name)
        ceil_mode = bool(int(attrs.get("ceil_mode", 0)))
        outs = _pooled_sizes(field, kernel, strides, lower, upper, ceil_mode, op, name, "kernel")
        # the end padding the last window reads beyond upper (ceil_mode only)
        extra = [max(0, (o - 1) * s - (f + lo + up - k))
                 for o, s, f, lo, up, k in zip(outs, strides, field, lower, upper, kernel,
                                               strict=True)]  # fmt: skip
        ptype = pooling.PoolingType.MAX if kind == "max" else pooling.PoolingType.AVG
        padded = any(lower) or any(upper)
        if kind == "avg" and int(attrs.get("count_include_pad", 0)) and padded:
            # popnn's AVG divides by the non-padding inputs; ONNX counts the padding
            # (but not the ceil_mode extension): SUM, then scale by 1 / count.
            ptype = pooling.PoolingType.SUM
            counts = np.ones(outs, np.float64)
            for d in range(n):
                start = np.arange(outs[d]) * strides[d] - lower[d]
                stop = np.minimum(start + kernel[d], field[d] + upper[d])
                shape = [1] * n
                shape[d] = outs[d]
                counts = counts * (stop - start).reshape(shape)
            self.scale = (1.0 / counts).reshape([1, 1, *outs])
        up = [u + e for u, e in zip(upper, extra, strict=True)]
        self.params = pooling.PoolParams(
            ptype, field, kernel, strides, lower, up, chans, batch, dtype
        )

    def scale_tensor(self, graph: Graph, like: Tensor, name: str) -> Tensor:
        """The divisor reciprocals as a constant of ``like``'s type."""
        return tensor(graph, self.scale.astype(np.float32), f"{name}/countScale", like)


def _pool_lowering(kind: str) -> Any:
    def lower(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
        op = op_name(kind)
        x = float_check(tensor(graph, inputs[0], name), op, name)
        p = _Pool(x.shape(), attrs, kind, name, x.elementType())
        y = pooling.pool(graph, p.params, x, prog, f"{name}/pool")
        if p.scale is not None:
            y = popops.mul(graph, y, p.scale_tensor(graph, y, name), prog, f"{name}/count")
        return [y]

    lower.__name__ = f"_{kind}_pool"
    lower.__doc__ = f"ONNX {op_name(kind)} by ``popnn.pooling.pool``."
    return lower


def _pool_grad(kind: str) -> Any:
    def grad(g: GradContext) -> Grads:
        dy = g.grad_output(0)
        x = tensor(g.graph, g.inputs[0], g.name, dy)
        p = _Pool(x.shape(), g.attrs, kind, g.name, x.elementType())
        if p.scale is not None:
            dy = popops.mul(g.graph, dy, p.scale_tensor(g.graph, dy, g.name), g.prog, g.name)
        # useScaledVariant: inputs tied for a window's maximum share its gradient.
        dx = pooling.poolInputGradient(
            g.graph, p.params, x, g.outputs[0], dy, True, g.prog, f"{g.name}/pool"
        )
        return [dx]

    grad.__name__ = f"_{kind}_pool_grad"
    return grad


def op_name(kind: str) -> str:
    """The ONNX op type of a pooling ``kind`` (``max``, ``avg`` or a Global op type)."""
    return {"max": "MaxPool", "avg": "AveragePool"}.get(kind, kind)


for _kind in ("max", "avg", "GlobalAveragePool", "GlobalMaxPool"):
    register(op_name(_kind), since=1)(_pool_lowering(_kind))
    register_grad(op_name(_kind))(_pool_grad(_kind))


# ------------------------------------------------------------------ normalisation
def _moments(
    graph: Graph, x: Tensor, dims: list[int], keep: list[int], eps: float, prog: Any, name: str
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Mean, (biased) variance, ``1/sqrt(var + eps)`` and ``x - mean`` over ``dims``.

    The statistics are returned reshaped to ``keep`` (broadcastable against ``x``).
    Two passes (mean, then the mean square of ``x - mean``) for accuracy.
    """
    count = int(np.prod([x.dim(d) for d in dims], dtype=np.int64))
    inv = 1.0 / max(count, 1)
    mean = popops.reduce(
        graph, x, dims, ReduceParams(Operation.ADD, scale=inv), prog, f"{name}/mean"
    )
    mean = mean.reshape(keep)
    xc = popops.sub(graph, x, mean, prog, f"{name}/centre")
    var = popops.reduce(
        graph, xc, dims, ReduceParams(Operation.SQUARE_ADD, scale=inv), prog, f"{name}/var"
    ).reshape(keep)
    inv_std = popops.rsqrt(
        graph, popops.add(graph, var, eps, prog, f"{name}/eps"), prog, f"{name}/invStd"
    )
    return mean, var, inv_std, xc


def _bn_training(attrs: dict) -> bool:
    """``training_mode`` (opset 14+) or ``is_test`` (opset < 7) when set, else the
    session's mode (PopART's)."""
    if "training_mode" in attrs:
        return bool(int(attrs["training_mode"]))
    if "is_test" in attrs:
        return not int(attrs["is_test"])
    return context().training


@register("BatchNormalization", since=1)
def _batchnorm(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    """Inference: ``(x - mean)·scale/sqrt(var + eps) + B`` with the given statistics.
    Training (``context().training`` or ``training_mode=1``): batch statistics over
    batch and field, and the running statistics ``momentum·old + (1 - momentum)·batch``
    written back into the mean/var weights.

    Returns ``[Y, running_mean, running_var, saved_mean, saved_var, invStd, xHat]``
    (PopART's five outputs; opset 14's three are the first three), inference
    ``[Y, mean, var, mean, var, invStd]``.

    The write-back is part of the node's program: a backward pass that recomputes
    the node (``autoRecomputation``) replays it and applies the momentum twice.
    """
    op = "BatchNormalization"
    if len(inputs) < 5 or any(v is None for v in inputs[:5]):
        raise popart_exception(f"{op} (node '{name}'): needs the 5 inputs X, scale, B, mean, var")
    if int(attrs.get("spatial", 1)) != 1:
        raise popart_exception(
            f"{op} (node '{name}'): spatial={attrs['spatial']} is not supported; required 1"
        )
    x = float_check(tensor(graph, inputs[0], name), op, name)
    if x.rank() < 2:
        raise popart_exception(
            f"{op} (node '{name}'): X has shape {x.shape()}; required [N, C, ...] (rank >= 2)"
        )
    c, rank = x.dim(1), x.rank()
    ins = [_operand(graph, v, name, x, op) for v in inputs[1:5]]
    for label, t in zip(("scale", "B", "mean", "var"), ins, strict=True):
        if t.shape() != [c]:
            raise popart_exception(
                f"{op} (node '{name}'): input {label} has shape {t.shape()}; required [{c}] "
                f"(one per channel of X {x.shape()})"
            )
    scale, bias, mean_in, var_in = ins
    eps = float(attrs.get("epsilon", 1e-5))
    momentum = float(attrs.get("momentum", 0.9))
    sv, bv = _channel_view(scale, rank), _channel_view(bias, rank)
    if not _bn_training(attrs):
        inv_std = popops.rsqrt(
            graph, popops.add(graph, var_in, eps, prog, f"{name}/eps"), prog, f"{name}/invStd"
        )
        coeff = popops.mul(graph, scale, inv_std, prog, f"{name}/coeff")
        shift = popops.sub(
            graph, bias, popops.mul(graph, mean_in, coeff, prog, f"{name}/meanCoeff"), prog,
            f"{name}/shift",
        )  # fmt: skip
        y = popops.mul(graph, x, _channel_view(coeff, rank), prog, f"{name}/scale")
        popops.addInPlace(graph, y, _channel_view(shift, rank), prog, f"{name}/shiftAdd")
        return [y, mean_in, var_in, mean_in, var_in, inv_std]
    dims = [0, *range(2, rank)]
    keep = [1, c, *([1] * (rank - 2))]
    mean, var, inv_std, xc = _moments(graph, x, dims, keep, eps, prog, f"{name}/stats")
    xhat = popops.mul(graph, xc, inv_std, prog, f"{name}/whiten")
    y = popops.mul(graph, xhat, sv, prog, f"{name}/scale")
    popops.addInPlace(graph, y, bv, prog, f"{name}/bias")
    mean, var, inv_std = mean.reshape([c]), var.reshape([c]), inv_std.reshape([c])
    batch_var = var
    if int(attrs.get("unbiased_variance", 0)):
        m = x.numElements() // c
        batch_var = popops.mul(graph, var, m / max(m - 1, 1), prog, f"{name}/unbias")
    run_mean = _running(graph, mean_in, mean, momentum, prog, f"{name}/runningMean")
    run_var = _running(graph, var_in, batch_var, momentum, prog, f"{name}/runningVar")
    for src, v in ((run_mean, inputs[3]), (run_var, inputs[4])):
        if isinstance(v, Tensor):  # the running statistics are weights: update in place,
            # once per forward pass (not again when the node is recomputed)
            (context().side_effects or prog).add(pprog.Copy(src, v))
    return [y, run_mean, run_var, mean, batch_var, inv_std, xhat]


def _running(
    graph: Graph, old: Tensor, new: Tensor, momentum: float, prog: Any, name: str
) -> Tensor:
    """``momentum·old + (1 - momentum)·new`` as a new tensor."""
    out = popops.mul(graph, old, momentum, prog, f"{name}/old")
    popops.scaledAddTo(graph, out, new, 1.0 - momentum, prog, f"{name}/new")
    return out


@register_grad("BatchNormalization")
def _batchnorm_grad(g: GradContext) -> Grads:
    """Training: ``dX = scale·invStd·(dY - mean(dY) - x̂·mean(dY·x̂))`` (means over
    batch and field), ``dscale = Σ dY·x̂``, ``dB = Σ dY``. Inference: the statistics are
    constants, ``dX = dY·scale·invStd``. The mean/var inputs get no gradient."""
    dy = g.grad_output(0)
    rank, c = dy.rank(), dy.dim(1)
    dims = [0, *range(2, rank)]
    scale = tensor(g.graph, g.inputs[1], g.name, dy)
    inv_std = g.outputs[5]
    training = len(g.outputs) > 6
    if training:
        xhat = g.outputs[6]
    else:
        mean = tensor(g.graph, g.inputs[3], g.name, dy)
        x = g.inputs[0]  # read only here: training reads x̂
        xc = popops.sub(g.graph, x, _channel_view(mean, rank), g.prog, f"{g.name}/centre")
        xhat = popops.mul(g.graph, xc, _channel_view(inv_std, rank), g.prog, f"{g.name}/whiten")
    out: list[Tensor | None] = [None] * len(g.inputs)
    need_stats = g.needs_grad(1) or g.needs_grad(2) or (training and g.needs_grad(0))
    d_bias = d_scale = None
    if need_stats:
        d_bias = popops.reduce(g.graph, dy, dims, Operation.ADD, g.prog, f"{g.name}/dB")
        prod = popops.mul(g.graph, dy, xhat, g.prog, f"{g.name}/dyXhat")
        d_scale = popops.reduce(g.graph, prod, dims, Operation.ADD, g.prog, f"{g.name}/dScale")
    if g.needs_grad(0):
        coeff = popops.mul(g.graph, scale, inv_std, g.prog, f"{g.name}/coeff")
        if training:
            m = dy.numElements() // c
            mb = popops.mul(g.graph, d_bias, 1.0 / m, g.prog, f"{g.name}/meanDy")
            ms = popops.mul(g.graph, d_scale, 1.0 / m, g.prog, f"{g.name}/meanDyXhat")
            t = popops.mul(g.graph, xhat, _channel_view(ms, rank), g.prog, f"{g.name}/xhatTerm")
            t = popops.sub(g.graph, dy, t, g.prog, f"{g.name}/sub1")
            t = popops.sub(g.graph, t, _channel_view(mb, rank), g.prog, f"{g.name}/sub2")
        else:
            t = dy
        out[0] = popops.mul(g.graph, t, _channel_view(coeff, rank), g.prog, f"{g.name}/dX")
    if g.needs_grad(1):
        out[1] = d_scale
    if g.needs_grad(2):
        out[2] = d_bias
    return out


def _norm_grad_x(
    g: GradContext, dxhat: Tensor, xhat: Tensor, inv_std: Tensor, dims: list[int], keep: list[int]
) -> Tensor:
    """``invStd·(dx̂ - mean(dx̂) - x̂·mean(dx̂·x̂))`` with the means over ``dims``."""
    count = int(np.prod([dxhat.dim(d) for d in dims], dtype=np.int64))
    inv = 1.0 / max(count, 1)
    graph, prog, name = g.graph, g.prog, g.name
    m1 = popops.reduce(
        graph, dxhat, dims, ReduceParams(Operation.ADD, scale=inv), prog, f"{name}/m1"
    )
    prod = popops.mul(graph, dxhat, xhat, prog, f"{name}/dxhatXhat")
    m2 = popops.reduce(
        graph, prod, dims, ReduceParams(Operation.ADD, scale=inv), prog, f"{name}/m2"
    )
    t = popops.mul(graph, xhat, m2.reshape(keep), prog, f"{name}/xhatM2")
    t = popops.sub(graph, dxhat, t, prog, f"{name}/sub1")
    t = popops.sub(graph, t, m1.reshape(keep), prog, f"{name}/sub2")
    return popops.mul(graph, t, inv_std, prog, f"{name}/dX")


@register("LayerNormalization", since=17)
def _layernorm(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    """Normalise over the dimensions from ``axis`` on; returns ``[Y, Mean, InvStdDev, x̂]``
    (Mean and InvStdDev shaped ``X.shape[:axis] + [1, ...]``, as ONNX)."""
    op = "LayerNormalization"
    x = float_check(tensor(graph, inputs[0], name), op, name)
    rank = x.rank()
    axis = int(attrs.get("axis", -1))
    if not -rank <= axis < rank:
        raise popart_exception(
            f"{op} (node '{name}'): axis {axis} is out of range for X of shape {x.shape()}; "
            f"required -{rank} <= axis < {rank}"
        )
    axis %= rank
    dims = list(range(axis, rank))
    keep = [*x.shape()[:axis], *([1] * (rank - axis))]
    eps = float(attrs.get("epsilon", 1e-5))
    norm_shape = tuple(x.shape()[axis:])
    params = []
    for label, v in (
        ("Scale", inputs[1] if len(inputs) > 1 else None),
        ("B", _optional(inputs, 2)),
    ):
        if v is None:
            params.append(None)
            continue
        t = _operand(graph, v, name, x, op)
        try:
            ok = np.broadcast_shapes(tuple(t.shape()), norm_shape) == norm_shape
        except ValueError:
            ok = False
        if not ok:
            raise popart_exception(
                f"{op} (node '{name}'): {label} has shape {t.shape()}; required broadcastable "
                f"to the normalised shape {list(norm_shape)} (X {x.shape()}, axis {axis})"
            )
        params.append(t)
    if params[0] is None:
        raise popart_exception(f"{op} (node '{name}'): input Scale is required")
    mean, _var, inv_std, xc = _moments(graph, x, dims, keep, eps, prog, f"{name}/stats")
    xhat = popops.mul(graph, xc, inv_std, prog, f"{name}/whiten")
    y = popops.mul(graph, xhat, params[0], prog, f"{name}/scale")
    if params[1] is not None:
        popops.addInPlace(graph, y, params[1], prog, f"{name}/bias")
    return [y, mean, inv_std, xhat]


@register_grad("LayerNormalization")
def _layernorm_grad(g: GradContext) -> Grads:
    """dX by :func:`_norm_grad_x` of ``dx̂ = dY·scale``; dScale ``Σ dY·x̂`` and dB ``Σ dY``
    over the dimensions Scale and B were broadcast along."""
    dy = g.grad_output(0)
    rank = dy.rank()
    axis = int(g.attrs.get("axis", -1)) % rank
    dims = list(range(axis, rank))
    keep = [*dy.shape()[:axis], *([1] * (rank - axis))]
    inv_std, xhat = g.outputs[2], g.outputs[3]
    out: list[Tensor | None] = [None] * len(g.inputs)
    if g.needs_grad(0):
        scale = tensor(g.graph, g.inputs[1], g.name, dy)
        dxhat = popops.mul(g.graph, dy, scale, g.prog, f"{g.name}/dxhat")
        out[0] = _norm_grad_x(g, dxhat, xhat, inv_std, dims, keep)
    if g.needs_grad(1):
        prod = popops.mul(g.graph, dy, xhat, g.prog, f"{g.name}/dyXhat")
        out[1] = unbroadcast(g.graph, prod, _input_shape(g.inputs[1]), g.prog, f"{g.name}/dScale")
    if len(g.inputs) > 2 and g.needs_grad(2):
        out[2] = unbroadcast(g.graph, dy, _input_shape(g.inputs[2]), g.prog, f"{g.name}/dB")
    return out


# -------------------------------------------------------------- GroupNormalization
def _group_view(t: Tensor, groups: int) -> Tensor:
    """``[N, C, *field]`` viewed as ``[N, G, C/G · prod(field)]``."""
    return t.reshape([t.dim(0), groups, t.numElements() // (t.dim(0) * groups)])


def _per_channel(graph: Graph, v: Value, name: str, like: Tensor, groups: int, op: str) -> Tensor:
    """Scale or bias as ``[C]``: a per-group ``[G]`` one (ONNX opset 18) is repeated."""
    t = _operand(graph, v, name, like, op)
    c = like.dim(1)
    if t.shape() == [c]:
        return t
    if t.shape() == [groups]:
        return t.reshape([groups, 1]).broadcast(c // groups, 1).reshape([c])
    raise popart_exception(
        f"{op} (node '{name}'): scale/bias '{t.name}' has shape {t.shape()}; required [{c}] "
        f"(one per channel of X {like.shape()})"
    )


def _groupnorm(graph: Graph, inputs: list[Value], attrs: dict, prog: Any, name: str) -> list:
    op = "GroupNormalization"
    x = float_check(tensor(graph, inputs[0], name), op, name)
    if x.rank() < 2 or len(inputs) < 3:
        raise popart_exception(
            f"{op} (node '{name}'): needs X [N, C, ...], scale and bias; got X {x.shape()} and "
            f"{len(inputs)} inputs"
        )
    if "num_groups" not in attrs:
        raise popart_exception(f"{op} (node '{name}'): attribute 'num_groups' is required")
    groups = int(attrs["num_groups"])
    c, rank, n = x.dim(1), x.rank(), x.dim(0)
    if groups < 1 or c % groups:
        raise popart_exception(
            f"{op} (node '{name}'): num_groups={groups} must be >= 1 and divide the {c} "
            f"channels of X {x.shape()}"
        )
    scale = _per_channel(graph, inputs[1], name, x, groups, op)
    bias = _per_channel(graph, inputs[2], name, x, groups, op)
    eps = float(attrs.get("epsilon", 1e-5))
    xg = _group_view(x, groups)
    mean, _var, inv_std, xc = _moments(graph, xg, [2], [n, groups, 1], eps, prog, f"{name}/stats")
    xhat = popops.mul(graph, xc, inv_std, prog, f"{name}/whiten").reshape(x.shape())
    y = popops.mul(graph, xhat, _channel_view(scale, rank), prog, f"{name}/scale")
    popops.addInPlace(graph, y, _channel_view(bias, rank), prog, f"{name}/bias")
    return [y, mean.reshape([n * groups]), inv_std.reshape([n * groups]), xhat]


def _groupnorm_grad(g: GradContext) -> Grads:
    """As LayerNormalization's over each (sample, group); dScale and dB sum over batch
    and field (and over a group's channels for a per-group scale)."""
    dy = g.grad_output(0)
    groups = int(g.attrs["num_groups"])
    rank, n, c = dy.rank(), dy.dim(0), dy.dim(1)
    xhat = g.outputs[3]
    inv_std = g.outputs[2].reshape([n, groups, 1])
    dims = [0, *range(2, rank)]
    out: list[Tensor | None] = [None] * len(g.inputs)
    if g.needs_grad(0):
        scale = _per_channel(g.graph, g.inputs[1], g.name, dy, groups, "GroupNormalization")
        dxhat = popops.mul(g.graph, dy, _channel_view(scale, rank), g.prog, f"{g.name}/dxhat")
        dx = _norm_grad_x(
            g, _group_view(dxhat, groups), _group_view(xhat, groups), inv_std, [2],
            [n, groups, 1],
        )  # fmt: skip
        out[0] = dx.reshape(dy.shape())
    for i, src in ((1, "scale"), (2, "bias")):
        if not g.needs_grad(i):
            continue
        t = dy
        if src == "scale":
            t = popops.mul(g.graph, dy, xhat, g.prog, f"{g.name}/dyXhat")
        red = popops.reduce(g.graph, t, dims, Operation.ADD, g.prog, f"{g.name}/d{src}")
        if _input_shape(g.inputs[i]) == [groups] and groups != c:
            red = popops.reduce(
                g.graph, red.reshape([groups, c // groups]), [1], Operation.ADD, g.prog,
                f"{g.name}/d{src}Group",
            )  # fmt: skip
        out[i] = red
    return out


register("GroupNormalization", domain="ai.graphcore", since=1)(_groupnorm)
register_grad("GroupNormalization", domain="ai.graphcore")(_groupnorm_grad)
register("GroupNormalization", since=18)(_groupnorm)
register_grad("GroupNormalization")(_groupnorm_grad)

__all__ = ["op_name"]
