"""Shared checks of popart_api ops: forward values against ONNX's reference evaluator
and gradients against central finite differences of the reference evaluator.

``build(builder, ids)`` adds the op(s) under test to a ``popart.Builder`` whose inputs
``ids`` were made from ``inputs`` (float and int32 arrays become model inputs, int64
arrays initializers) and returns the output id.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import popart_api as popart

Build = Callable[[popart.Builder, list[str]], str]


def device(tiles: int = 8) -> popart.DeviceInfo:
    """A small IPU Model device."""
    return popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": tiles})


def _builder(inputs: Sequence[np.ndarray], opsets: dict | None) -> tuple[popart.Builder, list[str]]:
    b = popart.Builder(opsets=opsets)
    ids = []
    for k, x in enumerate(inputs):
        x = np.asarray(x)
        if x.dtype == np.int64:
            ids.append(b.addInitializedInputTensor(x, f"in{k}"))
        else:
            ids.append(b.addInputTensor(popart.TensorInfo(x.dtype, list(x.shape)), f"in{k}"))
    return b, ids


def _feeds(inputs: Sequence[np.ndarray], ids: list[str]) -> dict[str, np.ndarray]:
    return {
        i: np.asarray(x)
        for i, x in zip(ids, inputs, strict=True)
        if np.asarray(x).dtype != np.int64
    }


def relu_model(opset: int) -> onnx.ModelProto:
    """A one-node ONNX model, ``y = Relu(x)`` on two floats, importing ``ai.onnx`` at
    ``opset``: the smallest model a check of opsets or of the op registry needs."""
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def train_once(
    data: dict[str, np.ndarray], **session_args: Any
) -> tuple[popart.TrainingSession, dict[str, np.ndarray]]:
    """PopART's training sequence: a ``TrainingSession(**session_args)`` prepared, its
    weights written to the device and one run fed ``data``; the session and its anchors."""
    s = popart.TrainingSession(**session_args)
    s.prepareDevice()
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(data, anchors))
    return s, anchors


def run_session(
    proto: bytes,
    feeds: dict[str, np.ndarray],
    outputs: Sequence[str],
    *,
    tiles: int = 8,
    patterns: popart.Patterns | None = None,
) -> tuple[popart.InferenceSession, dict[str, np.ndarray]]:
    """Run the model ``proto`` once on the simulator (an InferenceSession on a
    ``tiles``-tile IPU Model, with ``patterns``) with ``outputs`` anchored: the session
    (for its reports and cycle count) and the outputs' values."""
    flow = popart.DataFlow(1, {o: popart.AnchorReturnType("ALL") for o in outputs})
    s = popart.InferenceSession(
        fnModel=proto, dataFlow=flow, deviceInfo=device(tiles), patterns=patterns
    )
    s.prepareDevice()
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(feeds, anchors))
    return s, {o: np.array(anchors[o]) for o in outputs}


def run_model(
    proto: bytes, feeds: dict[str, np.ndarray], outputs: Sequence[str], *, tiles: int = 8
) -> dict[str, np.ndarray]:
    """The values of ``outputs`` of one run of the model ``proto`` (:func:`run_session`)."""
    return run_session(proto, feeds, outputs, tiles=tiles)[1]


def simulate(
    build: Build, inputs: Sequence[np.ndarray], *, opsets: dict | None = None, tiles: int = 8
) -> np.ndarray:
    """Our output of the model ``build`` makes on ``inputs``, without a reference (for
    cases ``onnx.reference`` does not evaluate, or that must fail)."""
    b, ids = _builder(inputs, opsets)
    out = build(b, ids)
    b.addOutputTensor(out)
    return run_model(b.getModelProto(), _feeds(inputs, ids), [out], tiles=tiles)[out]


def reference(proto: bytes, feeds: dict[str, np.ndarray], out: str) -> np.ndarray:
    """``out`` of the model by ``onnx.reference`` (the ai.graphcore ops excluded)."""
    model = onnx.load_from_string(proto)
    return ReferenceEvaluator(model).run([out], feeds)[0]


def check_forward(
    build: Build,
    inputs: Sequence[np.ndarray],
    *,
    opsets: dict | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-5,
    tiles: int = 8,
) -> np.ndarray:
    """Run the model on the simulator and compare with the reference; returns ours."""
    b, ids = _builder(inputs, opsets)
    out = build(b, ids)
    b.addOutputTensor(out)
    proto = b.getModelProto()
    feeds = _feeds(inputs, ids)
    got = run_model(proto, feeds, [out], tiles=tiles)[out]
    want = reference(proto, feeds, out)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)
    return got


def simulator_gradients(
    build: Build,
    inputs: Sequence[np.ndarray],
    weights: np.ndarray | None = None,
    *,
    opsets: dict | None = None,
    tiles: int = 8,
) -> tuple[np.ndarray, dict[str, np.ndarray], bytes, list[str], str]:
    """Output and input gradients of ``loss = sum(out * R)`` from a TrainingSession
    (``identityloss`` with Sum); ``R`` is ``weights`` (random when None)."""
    b, ids = _builder(inputs, opsets)
    out = build(b, ids)
    b.addOutputTensor(out)
    forward_proto = b.getModelProto()
    shape = b.getTensorShape(out)
    rng = np.random.default_rng(123)
    r = weights if weights is not None else rng.standard_normal(shape).astype(np.float32)
    r_id = b.addInitializedInputTensor(np.asarray(r, np.float32), "R")
    weighted = b.aiOnnx.mul([out, r_id])
    loss = b.aiGraphcore.identityloss([weighted], reduction=popart.ReductionType.Sum)
    proto = b.getModelProto()
    floats = [i for i, x in zip(ids, inputs, strict=True) if np.asarray(x).dtype.kind == "f"]
    anchors_wanted = {out: popart.AnchorReturnType("ALL")}
    for i in floats:
        anchors_wanted[popart.reservedGradientPrefix() + i] = popart.AnchorReturnType("ALL")
    _, anchors = train_once(
        _feeds(inputs, ids),
        fnModel=proto,
        dataFlow=popart.DataFlow(1, anchors_wanted),
        deviceInfo=device(tiles),
        loss=loss,
        optimizer=popart.ConstSGD(0.0),
    )
    grads = {i: anchors[popart.reservedGradientPrefix() + i] for i in floats}
    return anchors[out], grads, forward_proto, ids, out, np.asarray(r, np.float64)


def check_gradients(
    build: Build,
    inputs: Sequence[np.ndarray],
    *,
    opsets: dict | None = None,
    rtol: float = 2e-3,
    atol: float = 2e-4,
    eps: float = 1e-3,
    wrt: Sequence[int] | None = None,
    tiles: int = 8,
) -> dict[str, np.ndarray]:
    """Compare the simulator's input gradients of ``sum(out * R)`` with central finite
    differences of the reference evaluator, computed in float64."""
    _out_val, grads, proto, ids, out, r = simulator_gradients(
        build, inputs, opsets=opsets, tiles=tiles
    )
    model = onnx.load_from_string(proto)
    ref = ReferenceEvaluator(model)
    feeds64 = {
        i: (np.asarray(x, np.float64) if np.asarray(x).dtype.kind == "f" else np.asarray(x))
        for i, x in zip(ids, inputs, strict=True)
        if np.asarray(x).dtype != np.int64
    }

    def objective(feeds: dict[str, np.ndarray]) -> float:
        y = ref.run([out], feeds)[0]
        return float(np.sum(np.asarray(y, np.float64) * r))

    chosen = range(len(ids)) if wrt is None else wrt
    for k in chosen:
        tid = ids[k]
        if tid not in grads:
            continue
        x = feeds64[tid]
        numeric = np.zeros_like(x)
        flat = x.reshape(-1)
        nflat = numeric.reshape(-1)
        for j in range(flat.size):
            old = flat[j]
            flat[j] = old + eps
            plus = objective(feeds64)
            flat[j] = old - eps
            minus = objective(feeds64)
            flat[j] = old
            nflat[j] = (plus - minus) / (2 * eps)
        np.testing.assert_allclose(
            grads[tid], numeric, rtol=rtol, atol=atol, err_msg=f"gradient of input {k} ('{tid}')"
        )
    return grads


__all__ = [
    "check_forward",
    "check_gradients",
    "device",
    "reference",
    "relu_model",
    "simulator_gradients",
    "train_once",
]
