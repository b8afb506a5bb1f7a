"""Lowerings of InstanceNormalization, LRN, ConvTranspose and pooling with dilations.

``InstanceNormalization`` normalises each (sample, channel) over its field with the
two-pass moments of :mod:`popart_api.ops_nn` (PopART's ``InstanceNormOpx`` uses
popnn's group normalisation with one channel per group: the same statistics).
``LRN`` squares the input, sums ``size`` neighbouring channels (zero-padded slices of
the squares added with popops, as PopART's ``LRNOpx`` does with a padded sum) and
divides by ``(bias + alpha/size·sum)^beta``.

``MaxPool``/``AveragePool`` with dilations > 1, which popnn's pooling planner does not
take, and ``MaxPool`` with its ``Indices`` output (each window's first maximum, as ONNX
flat input indices, selected alongside the values) are the maximum (or the sum, divided
by the count) of the ``prod(kernel)`` dilated and strided views of the padded input, one
popops op each; the other poolings keep
``popnn.pooling.pool`` (the wrapped lowering).

``ConvTranspose`` is the convolution whose backward-data pass it is (see
:func:`_conv_transpose`).

``RoiAlign`` is Poplibs' ``roiAlignFwd`` (:mod:`poplar_api.popnn.roialign`), as
PopART's ``RoiAlignOpx`` calls it.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from popart_api.autodiff import GradContext, Grads, register_grad
from popart_api.errors import popart_exception
from popart_api.ops import REGISTRY, Lowering, context, float_check, register, tensor
from popart_api.ops_nn import _ints, _moments, _norm_grad_x, _pads, _pooled_sizes
from poplar_api import INT, UNSIGNED_INT, Graph, Tensor, poplin, popops
from poplar_api.popnn import roialign
from poplar_api.popops import Operation
from poplar_api.tensor import concat


# ------------------------------------------------------- InstanceNormalization
@register("InstanceNormalization", since=6)
def _instance_norm(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = float_check(tensor(graph, inputs[0], name), "InstanceNormalization", name)
    if x.rank() < 3:
        raise popart_exception(
            f"InstanceNormalization (node '{name}'): input '{x.name}' has shape {x.shape()}; "
            "required [N, C, D1, ...] (rank >= 3)"
        )
    eps = float(attrs.get("epsilon", 1e-5))
    dims = list(range(2, x.rank()))
    keep = [x.dim(0), x.dim(1)] + [1] * len(dims)
    _mean, _var, inv_std, xc = _moments(graph, x, dims, keep, eps, prog, name)
    xhat = popops.mul(graph, xc, inv_std, prog, f"{name}/normed")
    per_channel = [1, x.dim(1)] + [1] * len(dims)
    scale = tensor(graph, inputs[1], name, x).reshape(per_channel)
    bias = tensor(graph, inputs[2], name, x).reshape(per_channel)
    y = popops.mul(graph, xhat, scale, prog, f"{name}/scale")
    return [popops.add(graph, y, bias, prog, name), inv_std, xhat]


@register_grad("InstanceNormalization")
def _instance_norm_grad(g: GradContext) -> Grads:
    """dX by the normalisation gradient over each (sample, channel)'s field; dScale
    ``Σ dY·x̂`` and dB ``Σ dY`` over the samples and the field."""
    dy = g.grad_output(0)
    inv_std, xhat = g.outputs[1], g.outputs[2]
    rank = dy.rank()
    dims = list(range(2, rank))
    keep = [dy.dim(0), dy.dim(1)] + [1] * len(dims)
    per_channel = [1, dy.dim(1)] + [1] * len(dims)
    out: list[Tensor | None] = [None, None, None]
    if g.needs_grad(0):
        scale = tensor(g.graph, g.inputs[1], g.name, dy).reshape(per_channel)
        dxhat = popops.mul(g.graph, dy, scale, g.prog, f"{g.name}/dxhat")
        out[0] = _norm_grad_x(g, dxhat, xhat, inv_std, dims, keep)
    others = [0, *dims]
    if g.needs_grad(1):
        prod = popops.mul(g.graph, dy, xhat, g.prog, f"{g.name}/dyXhat")
        out[1] = popops.reduce(g.graph, prod, others, Operation.ADD, g.prog, f"{g.name}/dScale")
    if g.needs_grad(2):
        out[2] = popops.reduce(g.graph, dy, others, Operation.ADD, g.prog, f"{g.name}/dB")
    return out


# ------------------------------------------------------------------------- LRN
@register("LRN", since=1)
def _lrn(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    x = float_check(tensor(graph, inputs[0], name), "LRN", name)
    if "size" not in attrs or int(attrs["size"]) < 1 or x.rank() < 3:
        raise popart_exception(
            f"LRN (node '{name}'): needs attribute 'size' >= 1 and an [N, C, ...] input; got "
            f"size {attrs.get('size')}, shape {x.shape()}"
        )
    size = int(attrs["size"])
    alpha = float(attrs.get("alpha", 1e-4))
    beta = float(attrs.get("beta", 0.75))
    bias = float(attrs.get("bias", 1.0))
    sq = popops.square(graph, x, prog, f"{name}/square")
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    c = x.dim(1)
    pieces = []
    for count in (lo, hi):
        shape = x.shape()
        shape[1] = count
        pieces.append(tensor(graph, np.zeros(shape, np.float32), f"{name}/zeros", x))
    padded = concat([p for p in (pieces[0], sq, pieces[1]) if p.dim(1)], 1)
    total = padded.slice(0, c, 1)
    for k in range(1, size):
        total = popops.add(graph, total, padded.slice(k, k + c, 1), prog, f"{name}/sum{k}")
    den = popops.add(graph, popops.mul(graph, total, alpha / size, prog, f"{name}/alpha"), bias,
                     prog, f"{name}/bias")  # fmt: skip
    den = popops.pow(graph, den, beta, prog, f"{name}/pow")
    return [popops.div(graph, x, den, prog, name)]


# ------------------------------------------------------------ dilated pooling
def _indices(
    shape: list[int], outs: list[int], offsets: tuple, strides: list[int], dil: list[int],
    lower: list[int], order: int,
) -> np.ndarray:  # fmt: skip
    """ONNX's flat input index of each output's window element at ``offsets`` (-1 in the
    padding): ``storage_order`` 0 row-major, 1 the field dimensions column-major."""
    field = shape[2:]
    grids = np.meshgrid(*[np.arange(o) for o in outs], indexing="ij")
    pos = [
        g * s + o * d - lo
        for g, s, o, d, lo in zip(grids, strides, offsets, dil, lower, strict=True)
    ]
    valid = np.ones(outs, bool)
    for p, n in zip(pos, field, strict=True):
        valid &= (p >= 0) & (p < n)
    flat = np.zeros(outs, np.int64)
    dims = range(len(field)) if order == 0 else reversed(range(len(field)))
    for d in dims:
        flat = flat * field[d] + pos[d]
    per_plane = int(np.prod(field, dtype=np.int64))
    planes = np.arange(shape[0] * shape[1]).reshape(shape[0], shape[1], *[1] * len(field))
    out = planes * per_plane + flat
    return np.where(valid, out, -1).astype(np.int32)


def _dilated_pool(
    graph: Graph,
    x: Tensor,
    attrs: dict,
    kind: str,
    prog: Any,
    name: str,
    with_indices: bool = False,
):
    op = "MaxPool" if kind == "max" else "AveragePool"
    field = x.shape()[2:]
    n = len(field)
    kernel = _ints(attrs, "kernel_shape", n, 1, op, name)
    strides = _ints(attrs, "strides", n, 1, op, name)
    dil = _ints(attrs, "dilations", n, 1, op, name)
    window = [(k - 1) * d + 1 for k, d in zip(kernel, dil, strict=True)]
    lower, upper = _pads(attrs, field, window, strides, op, name)
    ceil_mode = bool(int(attrs.get("ceil_mode", 0)))
    outs = _pooled_sizes(
        field, window, strides, lower, upper, ceil_mode, op, name, "dilated kernel"
    )
    fill = -np.inf if kind == "max" else 0.0
    padded = x
    for d in range(n):
        need = (outs[d] - 1) * strides[d] + window[d]
        after = need - field[d] - lower[d]
        axis = 2 + d
        parts = []
        for count in (lower[d], max(after, 0)):
            shape = padded.shape()
            shape[axis] = count
            parts.append(tensor(graph, np.full(shape, fill, np.float32), f"{name}/pad", x))
        pieces = [p for p in (parts[0], padded, parts[1]) if p.dim(axis)]
        padded = concat(pieces, axis) if len(pieces) > 1 else padded
        if after < 0:
            padded = padded.slice(0, need, axis)
    result = idx = None
    order = int(attrs.get("storage_order", 0))
    for k, offsets in enumerate(itertools.product(*[range(kk) for kk in kernel])):
        view = padded
        for d, o in enumerate(offsets):
            axis = 2 + d
            start = o * dil[d]
            view = view.slice(start, start + (outs[d] - 1) * strides[d] + 1, axis)
            if strides[d] > 1:
                view = view.subSample(strides[d], axis)
        if with_indices:  # the first window element strictly greater wins, as ONNX's
            where = tensor(graph, _indices(x.shape(), outs, offsets, strides, dil, lower, order),
                           f"{name}/index{k}")  # fmt: skip
            if result is None:
                result, idx = popops.add(graph, view, 0.0, prog, f"{name}/first"), where
            else:
                better = popops.gt(graph, view, result, prog, f"{name}/better{k}")
                result = popops.select(graph, view, result, better, prog, f"{name}/max{k}")
                idx = popops.select(graph, where, idx, better, prog, f"{name}/argmax{k}")
        elif result is None:
            result = popops.add(graph, view, 0.0, prog, f"{name}/first")
        elif kind == "max":
            result = popops.max(graph, result, view, prog, f"{name}/max{k}")
        else:
            result = popops.add(graph, result, view, prog, f"{name}/sum{k}")
    if kind == "max":
        return [result, idx] if with_indices else result
    include = int(attrs.get("count_include_pad", 0))
    counts = np.ones(outs, np.float64)
    for d in range(n):
        pos = np.arange(outs[d])[:, None] * strides[d] + np.arange(kernel[d])[None, :] * dil[d]
        pos = pos - lower[d]
        hi = field[d] + (upper[d] if include else 0)
        lo = -lower[d] if include else 0
        valid = ((pos >= lo) & (pos < hi)).sum(axis=1).astype(np.float64)
        shape = [1] * n
        shape[d] = outs[d]
        counts = counts * valid.reshape(shape)
    scale = tensor(graph, (1.0 / counts).astype(np.float32).reshape([1, 1, *outs]), name, x)
    return popops.mul(graph, result, scale, prog, name)


def _with_dilations(fn: Lowering, kind: str) -> Lowering:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        dil = [int(d) for d in np.asarray(attrs.get("dilations", [])).reshape(-1)]
        with_indices = kind == "max" and context().num_outputs > 1
        dilated = dil and any(d != 1 for d in dil)
        if not (dilated or with_indices) or not isinstance(inputs[0], Tensor):
            return fn(graph, inputs, attrs, prog, name)
        op = "MaxPool" if kind == "max" else "AveragePool"
        x = float_check(inputs[0], op, name)
        if with_indices:
            return _dilated_pool(graph, x, attrs, kind, prog, name, with_indices=True)
        return [_dilated_pool(graph, x, attrs, kind, prog, name)]

    lower.__name__ = getattr(fn, "__name__", kind)
    lower.__doc__ = fn.__doc__
    return lower


for _op, _kind in (("MaxPool", "max"), ("AveragePool", "avg")):
    REGISTRY[("ai.onnx", _op)] = [
        (s, _with_dilations(f, _kind)) for s, f in REGISTRY.get(("ai.onnx", _op), [])
    ]

__all__: list[str] = []


# --------------------------------------------------------------- ConvTranspose
@register("ConvTranspose", since=1)
def _conv_transpose(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    """The convolution whose backward-data pass ConvTranspose is: the input dilated by
    the strides, padded by ``(k-1)·d - pad`` (plus ``output_padding`` at the end), the
    kernel flipped and its channels swapped (``poplin.convolution`` with
    ``transposeAndFlipWeights``), as PopART's ``ConvTransposeOpx`` lowers it."""
    op = "ConvTranspose"
    x = float_check(tensor(graph, inputs[0], name), op, name)
    w = tensor(graph, inputs[1], name, x)
    if x.rank() < 3 or w.rank() != x.rank():
        raise popart_exception(
            f"{op} (node '{name}'): X has shape {x.shape()} and W {w.shape()}; required X "
            "[N, C, *field] and W [C, M/group, *kernel] of the same rank"
        )
    n = x.rank() - 2
    group = int(attrs.get("group", 1))
    batch, chans, field = x.dim(0), x.dim(1), x.shape()[2:]
    kernel = w.shape()[2:]
    if group < 1 or chans % group or w.dim(0) != chans:
        raise popart_exception(
            f"{op} (node '{name}'): W {w.shape()} needs {chans} input channels (X's) and "
            f"group={group} must divide them"
        )
    co = w.dim(1)
    strides = _ints(attrs, "strides", n, 1, op, name)
    dil = _ints(attrs, "dilations", n, 1, op, name)
    out_pad = _ints(attrs, "output_padding", n, 0, op, name, minimum=0)
    window = [(k - 1) * d + 1 for k, d in zip(kernel, dil, strict=True)]
    full = [
        s * (i - 1) + p + win for s, i, p, win in zip(strides, field, out_pad, window, strict=True)
    ]
    auto = str(attrs.get("auto_pad", "NOTSET"))
    if "output_shape" in attrs or auto in ("SAME_UPPER", "SAME_LOWER"):
        if "output_shape" in attrs:
            target = [int(v) for v in attrs["output_shape"]][-n:]
        else:
            target = [i * s for i, s in zip(field, strides, strict=True)]
        total = [f - t for f, t in zip(full, target, strict=True)]
        upper_first = auto == "SAME_UPPER"  # the odd element at the end
        lower = [t // 2 if upper_first else t - t // 2 for t in total]
        upper = [t - lo for t, lo in zip(total, lower, strict=True)]
    elif auto == "VALID":
        lower, upper = [0] * n, [0] * n
    else:
        pads = [int(p) for p in np.asarray(attrs.get("pads", [0] * 2 * n)).reshape(-1)]
        if len(pads) != 2 * n:
            raise popart_exception(
                f"{op} (node '{name}'): attribute 'pads' is {pads}; required {2 * n} values"
            )
        lower, upper = pads[:n], pads[n:]
    conv_lower = [win - 1 - lo for win, lo in zip(window, lower, strict=True)]
    conv_upper = [win - 1 - up + p for win, up, p in zip(window, upper, out_pad, strict=True)]
    if min(conv_lower + conv_upper) < 0:
        raise popart_exception(
            f"{op} (node '{name}'): pads {lower + upper} exceed the dilated kernel {window}; "
            "required pads <= (kernel - 1)·dilation"
        )
    params = poplin.ConvParams(
        x.elementType(), batch, field, kernel, chans // group, co, group,
        paddingLower=conv_lower, paddingUpper=conv_upper, dilation=dil, inputDilation=strides,
    )  # fmt: skip
    weights = w.reshape([group, chans // group, co, *kernel])
    y = poplin.convolution(graph, x, weights, params, True, prog, f"{name}/conv",
                           {"pass": "INFERENCE_FWD"})  # fmt: skip
    if len(inputs) > 2 and inputs[2] is not None:
        b = tensor(graph, inputs[2], name, x)
        poplin.addBias(graph, y, b, prog, f"{name}/bias")
    return [y]


# ------------------------------------------------------------------- RoiAlign
#: ``coordinate_transformation_mode`` -> Poplibs' ``aligned`` (half-pixel shift).
_ROI_MODES = {"half_pixel": True, "output_half_pixel": False}


def _roi_operands(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> tuple:
    """``(X, rois, batch_indices, RoiAlignParams)`` of a RoiAlign node, checked; rois in
    X's type and the indices INT (casts appended to ``prog``)."""
    if len(inputs) != 3 or any(v is None for v in inputs):
        raise popart_exception(
            f"RoiAlign (node '{name}'): needs 3 inputs (X, rois, batch_indices), got {len(inputs)}"
        )
    x = float_check(tensor(graph, inputs[0], name), "RoiAlign", name)
    rois = tensor(graph, inputs[1], f"{name}/rois", x)
    index = tensor(graph, inputs[2], f"{name}/batchIndices")
    float_check(rois, "RoiAlign", name)
    if rois.elementType() != x.elementType():
        rois = popops.cast(graph, rois, x.elementType(), prog, f"{name}/roisCast")
    if index.elementType() not in (INT, UNSIGNED_INT):
        raise popart_exception(
            f"RoiAlign (node '{name}'): batch_indices '{index.name}' is "
            f"{index.elementType().name}; INT64 or INT32 is required"
        )
    if index.elementType() != INT:
        index = popops.cast(graph, index, INT, prog, f"{name}/indexCast")
    shapes = {"X": (x, 4), "rois": (rois, 2), "batch_indices": (index, 1)}
    for what, (t, rank) in shapes.items():
        if t.rank() != rank:
            raise popart_exception(
                f"RoiAlign (node '{name}'): input {what} '{t.name}' has shape {t.shape()}; "
                f"it must be {rank}-D"
            )
    if rois.dim(1) != 4 or index.dim(0) != rois.dim(0):
        raise popart_exception(
            f"RoiAlign (node '{name}'): rois '{rois.name}' {rois.shape()} and batch_indices "
            f"'{index.name}' {index.shape()}: required rois [R, 4] and batch_indices [R]"
        )
    ratio = int(attrs.get("sampling_ratio", 1))
    if ratio <= 0:
        raise popart_exception(
            f"RoiAlign (node '{name}'): sampling_ratio {ratio} (ONNX's adaptive sampling) is "
            "not supported: PopART's RoiAlign (Poplibs' roiAlignFwd) needs a fixed number "
            "of samples per bin; hint: set sampling_ratio >= 1"
        )
    default = "half_pixel" if context().opset >= 16 else "output_half_pixel"
    ctm = attrs.get("coordinate_transformation_mode", default)
    mode = attrs.get("mode", "avg")
    if ctm not in _ROI_MODES or mode not in ("avg", "max"):
        raise popart_exception(
            f"RoiAlign (node '{name}'): coordinate_transformation_mode {ctm!r} and mode "
            f"{mode!r}; supported: {sorted(_ROI_MODES)} and 'avg', 'max'"
        )
    params = roialign.RoiAlignParams(
        samplingRatio=ratio,
        alignedHeight=int(attrs.get("output_height", 7)),
        alignedWidth=int(attrs.get("output_width", 7)),
        aligned=_ROI_MODES[ctm],
        spatialScale=float(attrs.get("spatial_scale", 1.0)),
        mode=mode,
    )
    return x, rois, index, params


@register("RoiAlign", since=10)
def _roi_align(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
    """``popnn.roialign.roiAlignFwd`` (Poplibs' ``roiAlignFwd``, which PopART's
    ``RoiAlignOpx`` calls). Defaults are PopART's (``willow/src/op/roialign.cpp``):
    7x7 output, sampling ratio 1, scale 1. PopART (RoiAlign-10) always samples as
    ``output_half_pixel``; here ``coordinate_transformation_mode`` (opset 16, default
    ``half_pixel``) and ``mode="max"`` are honoured as ONNX defines them."""
    x, rois, index, params = _roi_operands(graph, inputs, attrs, prog, name)
    return [roialign.roiAlignFwd(graph, prog, x, rois, index, params, name)]


@register_grad("RoiAlign")
def _roi_align_grad(g: GradContext) -> Grads:
    """X's gradient by ``roiAlignInputGradient`` (PopART's ``RoiAlignGradOpx``); the
    regions and indices get none, as in PopART. ``mode="max"`` has no gradient."""
    x, rois, index, params = _roi_operands(g.graph, g.inputs, g.attrs, g.prog, g.name)
    if params.mode != "avg":
        raise popart_exception(
            f"RoiAlign (node '{g.name}'): mode 'max' has no gradient (PopART's RoiAlign "
            "averages); hint: mode='avg' for training"
        )
    dx = roialign.roiAlignInputGradient(
        g.graph, g.prog, x, rois, index, g.grad_output(0), params, g.name
    )
    return [dx, None, None]
