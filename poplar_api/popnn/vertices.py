"""popnn vertex classes (vectorised ``computeBatch`` kernels) and their factories.

Each factory returns one cached class per template parameter combination, named as
Poplibs names its vertices (``popnn::NonLinearity1D<float,...RELU>``). Estimators are
in :mod:`poplar_api.popnn.estimators`.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np

from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from poplar_api.popnn import estimators as est
from poplar_api.types import FLOAT, HALF, UNSIGNED_INT, Type

# Label and count types are kept in a tuple class attribute ``types``: a bare Type
# attribute would be taken for a field declaration.

__all__ = [
    "MASKED_LABEL_CODE",
    "calc_accuracy_vertex",
    "class_gather_vertex",
    "class_sparse_vertex",
    "forward",
    "gather_worker_size",
    "gradient",
    "loss_transform_vertex",
    "nonlinearity_grad_vertex",
    "nonlinearity_vertex",
    "segment_ids",
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


@numba.njit(cache=True, nogil=True)
def _relu_gradient(act, g, out):  # pragma: no cover - compiled
    """``out = gradient("RELU", act, g)`` of float32 arrays in one pass: ``g`` where
    ``act > 0`` (its bits as they are), else +0 (a NaN ``act`` included). numpy's
    ``where`` and the casts made three temporaries of a replicated batch's size."""
    for i in range(out.shape[0]):
        out[i] = g[i] if act[i] > 0 else np.float32(0)


def segment_ids(offsets: np.ndarray) -> np.ndarray:
    """Vertex number of every element of a packed vector field."""
    return np.repeat(np.arange(offsets.size - 1), np.diff(offsets))


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
        if cls.op == "RELU" and x.dtype == dest.dtype == np.float32:  # no temporaries
            np.maximum(x, 0, out=dest)
            return
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
        act, g, dest = batches["out"].data, batches["outGrad"].data, batches["inGrad"].data
        if cls.op == "RELU" and act.dtype == g.dtype == dest.dtype == np.float32:
            _relu_gradient(act, g, dest)  # gradient()'s values, without its temporaries
            return
        dest[:] = gradient(cls.op, act.astype(np.float32), g.astype(np.float32))

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


# --------------------------------------------------------------------------- loss

#: ``EPS_LOG_N_FLOAT`` and ``EPS_LOG_N_HALF`` (``popops/EncodingConstants.hpp``): added to
#: the probability before the logarithm of the cross-entropy transform.
EPS_LOG_N_FLOAT = np.float32(1.17549435e-38)
EPS_LOG_N_HALF = np.float32(0.000000059605)


class _LossTransform(Vertex):
    """``popnn::Loss{SumSquared,CrossEntropy}Transform<FPType>`` (worker vertex).

    Per element of ``probs`` and the one-hot ``expected``: sum squared writes
    ``deltas = p - e`` and ``transformed = ½ deltas²``; cross entropy writes
    ``deltas = deltasScale / modelOutputScaling x (p - e x modelOutputScaling)`` and
    ``transformed = -e x (log(p + eps) - log(modelOutputScaling))``. ``size`` is the
    length of the connected vectors.
    """

    cross_entropy = True

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        ftype = np.float16 if cls.is_half else np.float32
        p = batches["probs"].data.astype(np.float32)
        e = batches["expected"].data.astype(np.float32)
        if not cls.cross_entropy:
            delta = (p - e).astype(ftype).astype(np.float32)
            batches["deltas"].data[:] = delta
            batches["transformed"].data[:] = np.float32(0.5) * delta * delta
            return
        seg = segment_ids(batches["probs"].offsets)
        mos = batches["modelOutputScaling"].data.astype(np.float32)
        scale = (batches["deltasScale"].data.astype(np.float32) / mos).astype(ftype)
        log_mos = np.log(mos).astype(ftype).astype(np.float32)
        eps = EPS_LOG_N_HALF if cls.is_half else EPS_LOG_N_FLOAT
        batches["deltas"].data[:] = scale[seg].astype(np.float32) * (p - e * mos[seg])
        logp = np.log(p + eps).astype(ftype).astype(np.float32)
        with np.errstate(invalid="ignore"):
            batches["transformed"].data[:] = -e * (logp - log_mos[seg])

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        return est.loss_transform(
            int(sizes["probs"]), half=cls.is_half, cross_entropy=cls.cross_entropy
        )


def loss_transform_vertex(type_: Type, cross_entropy: bool) -> type:
    """``popnn::LossCrossEntropyTransform<T>`` or ``popnn::LossSumSquaredTransform<T>``.

    Fields as the codelets: ``probs``, ``expected`` (the one-hot rows), ``deltas``,
    ``transformed``; cross entropy also ``deltasScale`` and ``modelOutputScaling``.
    """
    kind = "LossCrossEntropyTransform" if cross_entropy else "LossSumSquaredTransform"
    attrs: dict[str, Any] = {
        "cross_entropy": cross_entropy,
        "is_half": type_ == HALF,
        "probs": Input(Vector(type_)),
        "expected": Input(Vector(type_)),
        "deltas": Output(Vector(type_)),
        "transformed": Output(Vector(type_)),
    }
    if cross_entropy:
        attrs["deltasScale"] = Input(type_)
        attrs["modelOutputScaling"] = Input(type_)
    return _make(
        ("lt", type_, cross_entropy), _LossTransform, f"popnn::{kind}<{type_.name}>", attrs
    )


# ------------------------------------------------------- arg-max / arg-min reductions


def _first_extreme(values: np.ndarray, is_max: bool) -> int:
    """Position of the first maximum (minimum) as the codelets' strict ``>`` (``<``)."""
    return int(np.argmax(values) if is_max else np.argmin(values))


def gather_worker_size(size: int, workers: int) -> int:
    """``workerSize`` of a ``Reduce{Max,Min}ClassGather`` vertex of ``size`` elements, as
    ``argMinMaxSplitFirstReduction`` sets it (32 minimum per worker; the split never
    gives a vertex more than ``W x rptCountMax``, so the cap needs no restating here)."""
    if size // workers >= 32:
        return -(-size // workers)
    return 32


class _ClassExtreme:
    """What the ``Reduce{Max,Min}Class*`` vertices share: the extreme they look for, and
    their result fields ``{max,min}Value`` and ``{max,min}Index``."""

    is_max = True
    integral = False

    @classmethod
    def results(cls, batches):
        """The value and index result batches."""
        which = "max" if cls.is_max else "min"
        return batches[f"{which}Value"], batches[f"{which}Index"]


def _class_extreme_vertex(
    kind: str, base: type, in_type: Type, label_type: Type, is_max: bool, inputs: dict,
    value: Any, index: Any,
) -> type:  # fmt: skip
    """``popnn::Reduce{Max,Min}Class<kind><in_type,label_type>`` from ``base``: its
    ``inputs``, then the ``value`` and ``index`` result fields (the codelet's order)."""
    which = "Max" if is_max else "Min"
    attrs = {
        "is_max": is_max,
        "integral": in_type not in (FLOAT, HALF),
        **inputs,
        f"{which.lower()}Value": value,
        f"{which.lower()}Index": index,
    }
    name = f"popnn::Reduce{which}Class{kind}<{in_type.name},{label_type.name}>"
    return _make((kind.lower(), in_type, label_type, is_max), base, name, attrs)


class _ClassGather(_ClassExtreme, MultiVertex):
    """``popnn::Reduce{Max,Min}ClassGather<InType, LabelType>``.

    ``activations`` is a piece of one row; workers take ``workerSize`` elements each and
    write the extreme value (float for float and half inputs) and its index plus
    ``index`` (the piece's offset in the row) into ``{max,min}Value`` and
    ``{max,min}Index``. ``params`` holds the vertex state ``(index, workerSize)``.
    """

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        acts, par = batches["activations"], batches["params"]
        val, idx = cls.results(batches)
        for v in range(num_vertices):
            data = acts.data[acts.offsets[v] : acts.offsets[v + 1]]
            index, worker_size = (int(x) for x in par.data[par.offsets[v] : par.offsets[v] + 2])
            for i, start in enumerate(range(0, data.size, worker_size)):
                chunk = data[start : start + worker_size]
                j = _first_extreme(chunk, cls.is_max)
                val.data[val.offsets[v] + i] = chunk[j]
                idx.data[idx.offsets[v] + i] = start + j + index

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        size = int(sizes["activations"])
        workers = target.getNumWorkerContexts()
        return est.reduce_class_gather(
            size, gather_worker_size(size, workers), integral=cls.integral, workers=workers
        )


def class_gather_vertex(in_type: Type, label_type: Type, is_max: bool = True) -> type:
    """``popnn::Reduce{Max,Min}ClassGather<InType,LabelType>`` (a MultiVertex)."""
    out_type = FLOAT if in_type in (FLOAT, HALF) else in_type
    inputs = {"activations": Input(Vector(in_type)), "params": Input(Vector(UNSIGNED_INT))}
    return _class_extreme_vertex(
        "Gather", _ClassGather, in_type, label_type, is_max, inputs,
        Output(Vector(out_type)), Output(Vector(label_type)),
    )  # fmt: skip


class _ClassSparse(_ClassExtreme, Vertex):
    """``popnn::Reduce{Max,Min}ClassSparse<InOutType, LabelType>``: the extreme of
    ``activations`` and the ``labels`` entry at its position."""

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        acts, labels = batches["activations"], batches["labels"]
        val, idx = cls.results(batches)
        for v in range(num_vertices):
            data = acts.data[acts.offsets[v] : acts.offsets[v + 1]]
            j = _first_extreme(data, cls.is_max)
            val.data[v] = data[j]
            idx.data[v] = labels.data[labels.offsets[v] + j]

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        return est.reduce_class_sparse(int(sizes["activations"]), integral=cls.integral)


def class_sparse_vertex(in_out_type: Type, label_type: Type, is_max: bool = True) -> type:
    """``popnn::Reduce{Max,Min}ClassSparse<InOutType,LabelType>`` (a worker vertex)."""
    inputs = {"activations": Input(Vector(in_out_type)), "labels": Input(Vector(label_type))}
    return _class_extreme_vertex(
        "Sparse", _ClassSparse, in_out_type, label_type, is_max, inputs,
        Output(in_out_type), Output(label_type),
    )  # fmt: skip


# ----------------------------------------------------------------------- accuracy


class _CalcAccuracy(Vertex):
    """``popnn::CalcAccuracy<LabelType>``: adds to ``numCorrect`` the positions where
    ``maxPerBatch`` equals ``expected`` and ``expected`` is not ``MASKED_LABEL_CODE``."""

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        got, want = batches["maxPerBatch"], batches["expected"]
        mask = np.uint64(MASKED_LABEL_CODE)
        for v in range(num_vertices):
            a = got.data[got.offsets[v] : got.offsets[v + 1]].astype(np.int64) & 0xFFFFFFFF
            n = a.size
            e = want.data[want.offsets[v] : want.offsets[v] + n].astype(np.int64) & 0xFFFFFFFF
            hits = int(((a == e) & (e.astype(np.uint64) != mask)).sum())
            batches["numCorrect"].data[v] += hits

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        return est.calc_accuracy(int(sizes["maxPerBatch"]))


def calc_accuracy_vertex(label_type: Type, count_type: Type = UNSIGNED_INT) -> type:
    """``popnn::CalcAccuracy<LabelType>``: ``maxPerBatch``, ``expected``, ``numCorrect``.

    Poplibs' ``numCorrect`` is ``InOut<unsigned>``; an INT count (accepted by ipusim)
    gets the ipusim-only class ``popnn::CalcAccuracy<LabelType,int>``.
    """
    name = f"popnn::CalcAccuracy<{label_type.name}>"
    if count_type != UNSIGNED_INT:
        name = f"popnn::CalcAccuracy<{label_type.name},{count_type.name}>"
    attrs = {
        "maxPerBatch": Input(Vector(label_type)),
        "expected": Input(Vector(label_type)),
        "numCorrect": InOut(count_type),
    }
    return _make(("acc", label_type, count_type), _CalcAccuracy, name, attrs)
