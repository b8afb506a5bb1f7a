"""popnn vertex classes (vectorised ``computeBatch`` kernels) and their factories.

Each factory returns one cached class per template parameter combination, named as
Poplibs names its vertices (``popnn::NonLinearity1D<float,...RELU>``). Estimators are
in :mod:`poplar_api.popnn.estimators`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from poplar_api.popnn import estimators as est
from poplar_api.types import HALF, INT, Type

# Label and count types are kept in a tuple class attribute ``types``: a bare Type
# attribute would be taken for a field declaration.

__all__ = [
    "MASKED_LABEL_CODE",
    "accuracy_vertex",
    "forward",
    "gradient",
    "loss_vertex",
    "nonlinearity_grad_vertex",
    "nonlinearity_vertex",
    "segment_ids",
    "softmax_grad_vertex",
    "softmax_vertex",
]

#: Label value that excludes a batch item from loss and accuracy (Poplibs' ~0u).
MASKED_LABEL_CODE = 0xFFFFFFFF

_GELU_C = math.sqrt(2.0 / math.pi)
_GELU_A = 0.044715


def forward(op: str, x: np.ndarray) -> np.ndarray:
    """Elementwise non-linearity ``op`` of float32 ``x``."""
    if op == "RELU":
        return np.maximum(x, 0)
    if op == "SIGMOID":
        return 1 / (1 + np.exp(-x))
    if op == "TANH":
        return np.tanh(x)
    if op == "SWISH":
        return x / (1 + np.exp(-x))
    # GELU, tanh approximation
    return 0.5 * x * (1 + np.tanh(_GELU_C * (x + _GELU_A * x**3)))


def gradient(op: str, act: np.ndarray, g: np.ndarray) -> np.ndarray:
    """Input gradient of ``op`` from the forward output (GELU, SWISH: the forward input)."""
    if op == "RELU":
        return np.where(act > 0, g, 0).astype(g.dtype)
    if op == "SIGMOID":
        return g * act * (1 - act)
    if op == "TANH":
        return g * (1 - act * act)
    if op == "SWISH":  # from the forward input, as Poplibs' swish_derivative
        sig = 1 / (1 + np.exp(-act))
        return g * (sig * (1 + act * (1 - sig)))
    t = np.tanh(_GELU_C * (act + _GELU_A * act**3))
    deriv = 0.5 * (1 + t) + 0.5 * act * (1 - t * t) * _GELU_C * (1 + 3 * _GELU_A * act * act)
    return g * deriv


def segment_ids(offsets: np.ndarray) -> np.ndarray:
    """Vertex number of every element of a packed vector field."""
    return np.repeat(np.arange(offsets.size - 1), np.diff(offsets))


def _segment_max(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    lengths = np.diff(offsets)
    out = np.full(lengths.size, -np.inf, dtype=np.float64)
    nz = lengths > 0
    if nz.any():
        out[nz] = np.maximum.reduceat(data, offsets[:-1][nz])
    return out


def _segment_sum(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    lengths = np.diff(offsets)
    out = np.zeros(lengths.size, dtype=data.dtype)
    nz = lengths > 0
    if nz.any():
        out[nz] = np.add.reduceat(data, offsets[:-1][nz])
    return out


_CACHE: dict[tuple, type] = {}


def _make(key: tuple, base: type, name: str, attrs: dict[str, Any]) -> type:
    cls = _CACHE.get(key)
    if cls is None:
        attrs = {"typeName": name, "__module__": __name__, **attrs}
        cls = type(f"PopnnVertex_{len(_CACHE)}", (base,), attrs)
        _CACHE[key] = cls
    return cls


# ------------------------------------------------------------------ non-linearities


def _nl_rows(value: Any) -> list[int]:
    return list(value) if isinstance(value, list) else [int(value)]


class _NonLinearity(MultiVertex):
    """``popnn::NonLinearity{1D,2D}[InPlace]<type, op>`` (GELU, SWISH)."""

    op = "GELU"
    layout = "1D"
    in_place = True

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        x = batches["data"].data
        dest = x if cls.in_place else batches["out"].data
        dest[:] = forward(cls.op, x.astype(np.float32))

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        vw = target.getVectorWidth(cls.types[0])
        if cls.layout == "1D":
            return est.nonlinearity_1d(
                cls.op, int(sizes["data"]), half=cls.is_half,
                workers=target.getNumWorkerContexts(), vw=vw, in_place=cls.in_place,
            )  # fmt: skip
        rows = _nl_rows(sizes["data"])
        return est.nonlinearity_2d(cls.op, rows, half=cls.is_half, vw=vw, in_place=cls.in_place)


def nonlinearity_vertex(op: str, type_: Type, layout: str, in_place: bool) -> type:
    """``popnn::NonLinearity{layout}[InPlace]<type,popnn::NonLinearityType::op>``.

    Fields as the codelets: ``data`` (InOut in place, else Input) and ``out``; ``1D``
    is a MultiVertex over one region, ``2D`` a worker vertex over a list of regions.
    """
    kind = f"NonLinearity{layout}{'InPlace' if in_place else ''}"
    name = f"popnn::{kind}<{type_.name},popnn::NonLinearityType::{op}>"
    shape = Vector(type_) if layout == "1D" else VectorList(type_)
    fields: dict[str, Any] = (
        {"data": InOut(shape)} if in_place else {"data": Input(shape), "out": Output(shape)}
    )
    attrs = {"op": op, "layout": layout, "in_place": in_place, "is_half": type_ == HALF,
             "types": (type_,), **fields}  # fmt: skip
    base = _NonLinearity if layout == "1D" else _NonLinearity2D
    return _make(("nl", op, type_, layout, in_place), base, name, attrs)


class _NonLinearity2D(Vertex):
    op = "GELU"
    layout = "2D"
    in_place = True
    computeBatch = _NonLinearity.__dict__["computeBatch"]
    getCycleEstimate = _NonLinearity.__dict__["getCycleEstimate"]


class _NonLinearityGrad(MultiVertex):
    """``popnn::NonLinearityGrad{1D,2D}<type, op>``: ``out``, ``outGrad`` -> ``inGrad``."""

    op = "RELU"
    layout = "1D"

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        act = batches["out"].data.astype(np.float32)
        g = batches["outGrad"].data
        batches["inGrad"].data[:] = gradient(cls.op, act, g.astype(np.float32))

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        vw = target.getVectorWidth(cls.types[0])
        if cls.layout == "1D":
            return est.nonlinearity_grad_1d(
                cls.op, int(sizes["inGrad"]), half=cls.is_half,
                workers=target.getNumWorkerContexts(), vw=vw,
            )  # fmt: skip
        return est.nonlinearity_grad_2d(cls.op, _nl_rows(sizes["inGrad"]), half=cls.is_half, vw=vw)


class _NonLinearityGrad2D(Vertex):
    op = "RELU"
    layout = "2D"
    computeBatch = _NonLinearityGrad.__dict__["computeBatch"]
    getCycleEstimate = _NonLinearityGrad.__dict__["getCycleEstimate"]


def nonlinearity_grad_vertex(op: str, type_: Type, layout: str = "1D") -> type:
    """``popnn::NonLinearityGrad{layout}<type,popnn::NonLinearityType::op>``."""
    name = f"popnn::NonLinearityGrad{layout}<{type_.name},popnn::NonLinearityType::{op}>"
    shape = Vector(type_) if layout == "1D" else VectorList(type_)
    attrs = {
        "op": op,
        "layout": layout,
        "is_half": type_ == HALF,
        "types": (type_,),
        "outGrad": Input(shape),
        "out": Input(shape),
        "inGrad": Output(shape),
    }
    base = _NonLinearityGrad if layout == "1D" else _NonLinearityGrad2D
    return _make(("nlg", op, type_, layout), base, name, attrs)


# ------------------------------------------------------------------------ softmax


class _SoftMax(Vertex):
    stable = True

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        x = batches["in"].data.astype(np.float64)
        offsets = batches["in"].offsets
        seg = segment_ids(offsets)
        if cls.stable:
            x = x - _segment_max(x, offsets)[seg]
        e = np.exp(x)
        batches["out"].data[:] = e / _segment_sum(e, offsets)[seg]

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        return est.softmax_row(sizes["in"], half=cls.is_half, stable=cls.stable)


def softmax_vertex(type_: Type, stable: bool) -> type:
    """``popnn::SoftMax<type, stable>``: softmax of one row ``in`` into ``out``."""
    name = f"popnn::SoftMax<{type_.name},{str(stable).lower()}>"
    attrs = {
        "stable": stable,
        "is_half": type_ == HALF,
        "in_": Input(Vector(type_)),
        "out": Output(Vector(type_)),
    }
    return _make(("sm", type_, stable), _SoftMax, name, attrs)


class _SoftMaxGrad(Vertex):
    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        y = batches["out"].data
        g = batches["outGrad"].data
        offsets = batches["out"].offsets
        dot = _segment_sum(y * g, offsets)[segment_ids(offsets)]
        batches["inGrad"].data[:] = y * (g - dot)

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        return est.softmax_grad_row(sizes["out"], half=cls.is_half)


def softmax_grad_vertex(type_: Type) -> type:
    """``popnn::SoftMaxGrad<type>``: ``inGrad = out · (outGrad - Σ out·outGrad)`` per row."""
    attrs = {
        "is_half": type_ == HALF,
        "out": Input(Vector(type_)),
        "outGrad": Input(Vector(type_)),
        "inGrad": Output(Vector(type_)),
    }
    return _make(("smg", type_), _SoftMaxGrad, f"popnn::SoftMaxGrad<{type_.name}>", attrs)


# --------------------------------------------------------------------------- loss


def _labels(batch_label: np.ndarray, label_type: Type) -> tuple[np.ndarray, np.ndarray]:
    """(labels as int64, masked flags)."""
    labels = batch_label.astype(np.int64)
    code = -1 if label_type == INT else MASKED_LABEL_CODE
    return labels, labels == code


class _Loss(Vertex):
    cross_entropy = True

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        probs = batches["probs"].data
        offsets = batches["probs"].offsets
        lengths = np.diff(offsets)
        labels, masked = _labels(batches["label"].data, cls.types[0])
        valid = (labels >= 0) & (labels < lengths) & ~masked
        seg = segment_ids(offsets)
        onehot = np.zeros(probs.size, dtype=probs.dtype)
        onehot[(offsets[:-1] + labels)[valid]] = 1
        keep = (~masked)[seg]
        delta = np.where(keep, probs - onehot, 0)
        if cls.cross_entropy:
            scale = batches["scale"].data[seg]
            batches["deltas"].data[:] = delta * scale
            tiny = np.finfo(np.float16 if cls.is_half else np.float32).tiny
            picked = np.ones(num_vertices, dtype=np.float64)
            picked[valid] = probs[(offsets[:-1] + labels)[valid]]
            loss = -np.log(np.maximum(picked, tiny))
        else:
            batches["deltas"].data[:] = delta
            loss = 0.5 * _segment_sum((delta * delta).astype(np.float64), offsets)
        batches["loss"].data[:] = np.where(masked, 0, loss)
        return valid | masked

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        return est.loss_row(sizes["probs"], half=cls.is_half, cross_entropy=cls.cross_entropy)


def loss_vertex(type_: Type, label_type: Type, cross_entropy: bool) -> type:
    """``popnn::LossTransform<type, labelType, kind>``: loss and deltas of one row.

    Fields: ``probs`` (row of model outputs), ``label``, ``scale`` (deltas scale,
    used by cross entropy), ``deltas`` and ``loss``. A label that is neither masked nor
    in ``0..len(row)-1`` makes the vertex fail (the engine reports it).
    """
    kind = "CROSS_ENTROPY_LOSS" if cross_entropy else "SUM_SQUARED_LOSS"
    name = f"popnn::LossTransform<{type_.name},{label_type.name},popnn::{kind}>"
    attrs = {
        "cross_entropy": cross_entropy,
        "is_half": type_ == HALF,
        "types": (label_type,),
        "probs": Input(Vector(type_)),
        "label": Input(label_type),
        "scale": Input(type_),
        "deltas": Output(Vector(type_)),
        "loss": Output(type_),
    }
    return _make(("loss", type_, label_type, cross_entropy), _Loss, name, attrs)


class _Accuracy(Vertex):
    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        probs = batches["probs"].data.astype(np.float64)
        offsets = batches["probs"].offsets
        lengths = np.diff(offsets)
        seg = segment_ids(offsets)
        best = _segment_max(probs, offsets)[seg]
        local = np.arange(probs.size) - offsets[:-1][seg]
        first = np.where(probs == best, local, np.iinfo(np.int64).max)
        argmax = np.full(num_vertices, -1, dtype=np.int64)
        nz = lengths > 0
        if nz.any():
            argmax[nz] = np.minimum.reduceat(first, offsets[:-1][nz])
        labels, masked = _labels(batches["label"].data, cls.types[0])
        batches["correct"].data[:] = ((argmax == labels) & ~masked).astype(np.int64)

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        return est.argmax_row(sizes["probs"], half=cls.is_half)


def accuracy_vertex(type_: Type, label_type: Type, count_type: Type) -> type:
    """``popnn::CalcAccuracy<type, labelType>``: ``correct`` = 1 if argmax(row) == label."""
    name = f"popnn::CalcAccuracy<{type_.name},{label_type.name},{count_type.name}>"
    attrs = {
        "is_half": type_ == HALF,
        "types": (label_type,),
        "probs": Input(Vector(type_)),
        "label": Input(label_type),
        "correct": Output(count_type),
    }
    return _make(("acc", type_, label_type, count_type), _Accuracy, name, attrs)
