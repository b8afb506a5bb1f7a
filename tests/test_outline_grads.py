"""PopART's outlining of the backward pass (``popart_api.outline_grads``).

Equivalent gradient ops of high subgraph value (matmuls, convolutions,
normalisations) are lowered once as a Poplar function and called at each
occurrence, their operands copied in and gradients copied out. The gradients are
those of a numpy backward pass written here and bit-identical to outlining off; the
code of the repeated gradients is stored once.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from popart_harness import device, train_once

import popart_api as popart

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))

from run_model import _initializers, build

#: Code and per-program state (stored once per function).
CODE = ("internalExchangeCode", "vertexInstanceState", "vectorListDescriptor", "controlCode")


def _mlp(rng: np.random.Generator, width: int = 32, layers: int = 4):
    """``tanh(x W0) ... W{layers-1}``, then logits by Wout, softmax and Nll (mean):
    the hidden layers' products (W1 ...) have equal shapes, so their gradients are
    equivalent. Returns the builder, loss, data and weights."""
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [48, 16]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [48]), "label")
    weights: dict[str, np.ndarray] = {}
    t, d = x, 16
    for k in range(layers):
        w = (rng.standard_normal((d, width)) * 0.3).astype(np.float32)
        weights[f"W{k}"] = w
        t = bd.aiOnnx.tanh([bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(w, f"W{k}")])])
        d = width
    wout = (rng.standard_normal((d, 10)) * 0.3).astype(np.float32)
    weights["Wout"] = wout
    logits = bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(wout, "Wout")])
    loss = bd.aiGraphcore.nllloss([bd.aiOnnx.softmax([logits], axis=1), lab])
    data = {
        x: rng.standard_normal((48, 16)).astype(np.float32),
        lab: rng.integers(0, 10, 48).astype(np.int32),
    }
    return bd, loss, data, weights


def _numpy_grads(x: np.ndarray, label: np.ndarray, weights: dict[str, np.ndarray]):
    """The loss's gradient of every weight, by a backward pass in float64."""
    hs = [x.astype(np.float64)]
    names = [n for n in weights if n != "Wout"]
    for n in names:
        hs.append(np.tanh(hs[-1] @ weights[n]))
    logits = hs[-1] @ weights["Wout"]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    dlogits = p.copy()
    dlogits[np.arange(len(label)), label] -= 1.0
    dlogits /= len(label)
    grads = {"Wout": hs[-1].T @ dlogits}
    dh = dlogits @ weights["Wout"].T
    for k in range(len(names) - 1, -1, -1):
        dz = dh * (1.0 - hs[k + 1] ** 2)
        grads[names[k]] = hs[k].T @ dz
        dh = dz @ weights[names[k]].T
    return grads


def _step(
    model, loss: str, data: dict, weights, tiles: int, outline: bool, recompute="NoRecompute"
):
    """One ``ConstSGD(0)`` step with outlining on or off (and the ``autoRecomputation``
    mode named): each weight's gradient and the session."""
    prefix = popart.reservedGradientPrefix()
    opts = popart.SessionOptions()
    opts.enableOutlining = outline
    opts.autoRecomputation = popart.RecomputationType(recompute)
    s, anchors = train_once(
        data,
        fnModel=model,
        dataFlow=popart.DataFlow(1, {prefix + w: popart.AnchorReturnType("ALL") for w in weights}),
        deviceInfo=device(tiles),
        loss=loss,
        optimizer=popart.ConstSGD(0.0),
        userOptions=opts,
    )
    return {w: np.asarray(anchors[prefix + w]) for w in weights}, s


def _grads(outline: bool):
    bd, loss, data, weights = _mlp(np.random.default_rng(3))
    got, s = _step(bd.getModelProto(), loss, data, weights, 8, outline)
    calls = Counter(p["function"] for p in s.getGraphReport()["programs"] if p["type"] == "Call")
    return got, data, weights, sorted(calls.values())


@pytest.fixture(scope="module")
def mlp_runs():
    return {outline: _grads(outline) for outline in (True, False)}


def test_outlined_matmul_gradients_match_numpy(mlp_runs):
    got, data, weights, _ = mlp_runs[True]
    x, label = (data[k] for k in sorted(data, key=lambda k: data[k].dtype != np.float32))
    want = _numpy_grads(x, label, weights)
    for w in weights:
        np.testing.assert_allclose(got[w], want[w], rtol=2e-4, atol=2e-6, err_msg=w)


def test_outlined_gradients_are_bit_identical_to_outlining_off(mlp_runs):
    on, off = mlp_runs[True][0], mlp_runs[False][0]
    for w in on:
        assert np.array_equal(on[w], off[w]), w


def test_equivalent_gradients_are_calls_of_one_function(mlp_runs):
    # W1..W3's products (32x32, equal shapes and operands) are one function called
    # three times in the forward pass and their gradients another, called three times
    # in the backward pass; W0 (16x32) and Wout (32x10) are alone of their kind,
    # lowered in place
    assert mlp_runs[False][3] == []
    assert mlp_runs[True][3] == [3, 3]


def _conv_step(outline: bool):
    """One training step of the scaled-down ResNet (width 8 on 32x32, 16 tiles): every
    weight's gradient and the code bytes over all tiles."""
    proto, inputs, _outputs, loss = build("resnet-tiny", True)
    names = list(_initializers(proto))
    got, s = _step(proto.SerializeToString(), loss, inputs, names, 16, outline)
    cats = s.getGraphReport()["memory"]["byCategory"]
    code = {
        c: sum(sum(part) for region in cats[c].values() for part in region.values()) for c in CODE
    }
    return got, code


@pytest.mark.slow
def test_outlined_convolution_and_batchnorm_gradients_are_bit_identical():
    """The ResNet's repeated convolutions and batch norms: gradients equal to outlining
    off (the reference check of the same step is tests/test_models.py), and their
    vertex state, descriptors and exchange code stored once."""
    on, code_on = _conv_step(True)
    off, code_off = _conv_step(False)
    assert on.keys() == off.keys()
    for w in on:
        assert np.array_equal(on[w], off[w]), w
    for c in ("vertexInstanceState", "vectorListDescriptor"):
        assert code_on[c] < code_off[c], (c, code_on[c], code_off[c])
