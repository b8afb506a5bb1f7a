"""Lowering of ONNX's ``Resize`` (opsets 10-19) and ``Upsample`` (opset 9).

Resize is separable: along each resized axis every output element is a fixed
combination of input elements, given by the attributes and the shapes alone. The
lowering computes, on the host when the graph is built, the ``[out, in]`` weights of
each axis from ONNX's definition (the coordinate transformation, then the nearest,
linear or cubic coefficients of the nearest input positions, the edge clamped,
``exclude_outside`` renormalising, ``tf_crop_and_resize`` extrapolating) and applies
them on the device: ``nearest`` as a view (the input elements picked by slices and a
concatenation, no compute, as PopART's ``ResizeOpx`` does for nearest mode), ``linear``
and ``cubic`` as a ``poplin::matMul`` of the input (axis last) with the transposed
weights.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from popart_api.errors import popart_exception
from popart_api.ops import context, float_check, matmul, register, tensor, value_shape
from popart_api.ops_tensor import _norm_axes
from poplar_api import Graph, Tensor, popops
from poplar_api.tensor import concat

_MODES = ("nearest", "linear", "cubic")
_TRANSFORMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_crop_and_resize",
)


def _nearest_coeffs(ratio: float, mode: str) -> np.ndarray:
    if float(ratio).is_integer():
        return np.array([0.0, 1.0])
    if mode == "round_prefer_floor":
        return np.array([ratio <= 0.5, ratio > 0.5], np.float64)
    if mode == "round_prefer_ceil":
        return np.array([ratio < 0.5, ratio >= 0.5], np.float64)
    if mode == "floor":
        return np.array([1.0, 0.0])
    return np.array([0.0, 1.0])  # ceil


def _cubic_kernel(x: np.ndarray, a: float) -> np.ndarray:
    x = np.abs(x)
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1, near, np.where(x < 2, far, 0.0))


def _coeffs(ratio: float, scale: float, attrs: dict) -> np.ndarray:
    mode = attrs["mode"]
    if mode == "nearest":
        return _nearest_coeffs(ratio, attrs["nearest_mode"])
    antialias = attrs["antialias"] and scale < 1
    if mode == "linear":
        if not antialias:
            return np.array([1 - ratio, ratio])
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    a = attrs["cubic_coeff_a"]
    if not antialias:
        return _cubic_kernel(np.array([ratio + 1, ratio, 1 - ratio, 2 - ratio]), a)
    start = int(np.floor(-2 / scale) + 1)
    args = (np.arange(start, 2 - start) - ratio) * scale
    c = _cubic_kernel(args, a)
    return c / c.sum()


def _neighbours(x: float, n: int, size: int) -> np.ndarray:
    """The ``n`` positions nearest ``x`` (ties to the lower), of the input padded by
    ``ceil(n/2)`` edge elements each side, as input positions (may lie outside)."""
    pad = math.ceil(n / 2)
    xp = x + pad
    order = sorted(range(size + 2 * pad), key=lambda i: (abs(xp - i), i))[:n]
    return np.array(sorted(order)) - pad


def axis_weights(
    size: int, out: int, scale: float, roi: tuple[float, float], attrs: dict
) -> tuple[np.ndarray, np.ndarray]:
    """``(W, b)``: output ``o`` of one axis is ``W[o] @ input + b[o]``."""
    weights = np.zeros([out, size])
    bias = np.zeros(out)
    ctm = attrs["coordinate_transformation_mode"]
    out_float = scale * size
    for o in range(out):
        if ctm == "align_corners":
            x = 0.0 if out_float == 1 else o * (size - 1) / (out_float - 1)
        elif ctm == "asymmetric":
            x = o / scale
        elif ctm == "tf_crop_and_resize":
            start, end = roi
            if out == 1:
                x = (end - start) * (size - 1) / 2
            else:
                x = o * (end - start) * (size - 1) / (out - 1)
            x += start * (size - 1)
            if x < 0 or x > size - 1:
                bias[o] = attrs["extrapolation_value"]
                continue
        elif ctm == "pytorch_half_pixel":
            x = (o + 0.5) / scale - 0.5 if out != 1 else -0.5
        elif ctm == "half_pixel":
            x = (o + 0.5) / scale - 0.5
        else:  # half_pixel_symmetric
            adjustment = out / out_float
            x = size / 2 * (1 - adjustment) + (o + 0.5) / scale - 0.5
        base = math.floor(x)
        ratio = 1.0 if float(x).is_integer() else x - base
        c = _coeffs(ratio, scale, attrs).astype(np.float64)
        idx = _neighbours(x, len(c), size)
        if attrs["exclude_outside"]:
            c = np.where((idx < 0) | (idx >= size), 0.0, c)
            c = c / c.sum()
        for k, i in zip(idx, c, strict=True):
            weights[o, min(max(int(k), 0), size - 1)] += i
    return weights, bias


def _attrs(attrs: dict, opset: int, op: str, name: str) -> dict:
    mode = str(attrs.get("mode", "nearest"))
    if mode not in _MODES:
        raise popart_exception(f"{op} (node '{name}'): mode '{mode}' is not one of {_MODES}")
    old = op == "Upsample" or opset < 11
    ctm = "asymmetric" if old else str(attrs.get("coordinate_transformation_mode", "half_pixel"))
    if ctm not in _TRANSFORMS:
        raise popart_exception(
            f"{op} (node '{name}'): coordinate_transformation_mode '{ctm}' is not one of "
            f"{_TRANSFORMS}"
        )
    return {
        "mode": mode,
        "coordinate_transformation_mode": ctm,
        "nearest_mode": "floor" if old else str(attrs.get("nearest_mode", "round_prefer_floor")),
        "cubic_coeff_a": float(attrs.get("cubic_coeff_a", -0.75)),
        "exclude_outside": int(attrs.get("exclude_outside", 0)),
        "extrapolation_value": float(attrs.get("extrapolation_value", 0.0)),
        "antialias": int(attrs.get("antialias", 0)),
    }


def _optional_const(inputs: list, i: int) -> np.ndarray | None:
    if len(inputs) <= i or inputs[i] is None:
        return None
    v = inputs[i]
    if isinstance(v, Tensor):
        return v  # refused by the caller, with the input's name
    arr = np.asarray(v)
    return arr if arr.size else None


def _nearest_view(x: Tensor, axis: int, weights: np.ndarray) -> Tensor:
    """The input elements nearest mode picks along ``axis``: slices of runs, concatenated."""
    picks = [int(np.argmax(row)) for row in weights]
    pieces, start = [], 0
    while start < len(picks):
        end = start + 1
        while end < len(picks) and picks[end] == picks[end - 1] + 1:
            end += 1
        first = picks[start]
        piece = x.slice(first, first + (end - start), axis)
        pieces.append(piece)
        start = end
    return concat(pieces, axis) if len(pieces) > 1 else pieces[0]


def _resize(op: str) -> Any:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        opset = context().opset or 11
        x = inputs[0]
        shape = value_shape(x)
        rank = len(shape)
        a = _attrs(attrs, opset, op, name)
        if op == "Upsample" or opset < 11:
            roi, scales, sizes = None, _optional_const(inputs, 1), None
            if scales is None and "scales" in attrs:
                scales = np.asarray(attrs["scales"], np.float32)
        else:
            roi = _optional_const(inputs, 1)
            scales = _optional_const(inputs, 2)
            sizes = _optional_const(inputs, 3)
        for what, v in (("roi", roi), ("scales", scales), ("sizes", sizes)):
            if isinstance(v, Tensor):
                raise popart_exception(
                    f"{op} (node '{name}'): input '{what}' ('{v.name}') must be known when the "
                    "graph is built; hint: make it with aiOnnx.constant"
                )
        axes = _norm_axes([int(d) for d in attrs.get("axes", range(rank))], rank, op, name)
        if (scales is None) == (sizes is None):
            raise popart_exception(
                f"{op} (node '{name}'): exactly one of 'scales' and 'sizes' must be given"
            )
        if sizes is not None:
            want = [int(s) for s in np.asarray(sizes).reshape(-1)]
            factor = np.array(want, np.float64) / np.array([shape[d] for d in axes], np.float64)
            policy = str(attrs.get("keep_aspect_ratio_policy", "stretch"))
            if policy != "stretch":
                s = factor.min() if policy == "not_larger" else factor.max()
                factor = np.full(len(axes), s)
                want = [int(s * shape[d] + 0.5) for d in axes]
        else:
            factor = np.asarray(scales, np.float64).reshape(-1)
            want = [int(shape[d] * f) for d, f in zip(axes, factor, strict=True)]
        if len(factor) != len(axes) or np.any(factor <= 0):
            raise popart_exception(
                f"{op} (node '{name}'): {len(factor)} scales/sizes for {len(axes)} axes, "
                f"{factor.tolist()}; required one positive value per axis"
            )
        starts = ends = None
        if roi is not None:
            r = np.asarray(roi, np.float64).reshape(-1)
            if r.size == 2 * rank:
                starts, ends = r[:rank][axes], r[rank:][axes]
            else:
                starts, ends = r[: len(axes)], r[len(axes) :]
        x = tensor(graph, x, name)
        nearest = a["mode"] == "nearest"
        if not nearest:
            float_check(x, op, name)
        out = x
        for k, d in enumerate(axes):
            if (
                want[k] == shape[d]
                and factor[k] == 1
                and a["coordinate_transformation_mode"] != ("tf_crop_and_resize")
            ):
                continue
            span = (float(starts[k]), float(ends[k])) if starts is not None else (0.0, 1.0)
            w, b = axis_weights(shape[d], want[k], float(factor[k]), span, a)
            if nearest and not b.any() and np.all(np.isin(w, (0.0, 1.0))):
                out = _nearest_view(out, d, w)
                continue
            float_check(x, op, name)
            last = out.rank() - 1
            moved = out.dimShufflePartial([d], [last]) if d != last else out
            rows = moved.reshape([int(np.prod(moved.shape()[:-1], dtype=np.int64)), shape[d]])
            wt = tensor(graph, w.T.astype(np.float32), f"{name}/weights{d}", out)
            res = matmul(graph, rows, wt, prog, f"{name}/axis{d}")
            if b.any():
                res = popops.add(graph, res, tensor(graph, b.astype(np.float32), name, out), prog,
                                 f"{name}/extrapolation{d}")  # fmt: skip
            res = res.reshape([*moved.shape()[:-1], want[k]])
            out = res.dimShufflePartial([last], [d]) if d != last else res
        return [popops.add(graph, out, 0, prog, name) if out is x or nearest else out]

    return lower


register("Resize", since=10)(_resize("Resize"))
register("Upsample", since=9)(_resize("Upsample"))

__all__ = ["axis_weights"]
