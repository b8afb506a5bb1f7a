"""Outlining of the backward pass with a weight used by several equivalent matmuls (its
gradient summed over the calls of one function) and a product whose operands are one
tensor (``h h``: another pattern of shared operands, so not the same function): the
gradients are bit-identical to outlining off and equal a float64 numpy backward pass."""

from __future__ import annotations

from collections import Counter

import numpy as np
from test_outline_grads import _step

import popart_api as popart


def _model(rng: np.random.Generator):
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [32, 32]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [32]), "label")
    weights = {k: (rng.standard_normal((32, 32)) * 0.2).astype(np.float32) for k in "AB"}
    weights["O"] = (rng.standard_normal((32, 10)) * 0.2).astype(np.float32)
    t = {k: bd.addInitializedInputTensor(v, k) for k, v in weights.items()}
    h1 = bd.aiOnnx.tanh([bd.aiOnnx.matmul([x, t["A"]])])
    h2 = bd.aiOnnx.tanh([bd.aiOnnx.matmul([h1, t["B"]])])
    h3 = bd.aiOnnx.tanh([bd.aiOnnx.matmul([h2, t["A"]])])  # A again
    h4 = bd.aiOnnx.tanh([bd.aiOnnx.matmul([h3, h3])])  # both operands one tensor
    logits = bd.aiOnnx.matmul([h4, t["O"]])
    loss = bd.aiGraphcore.nllloss([bd.aiOnnx.softmax([logits], axis=1), lab])
    data = {
        x: rng.standard_normal((32, 32)).astype(np.float32),
        lab: rng.integers(0, 10, 32).astype(np.int32),
    }
    return bd, loss, data, weights, x, lab


def _numpy(x, label, w):
    x = x.astype(np.float64)
    a, b, o = (w[k].astype(np.float64) for k in "ABO")
    h1 = np.tanh(x @ a)
    h2 = np.tanh(h1 @ b)
    h3 = np.tanh(h2 @ a)
    h4 = np.tanh(h3 @ h3)
    z = h4 @ o
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    dz = p
    dz[np.arange(len(label)), label] -= 1
    dz /= len(label)
    g = {"O": h4.T @ dz}
    d4 = (dz @ o.T) * (1 - h4**2)
    dh3 = d4 @ h3.T + h3.T @ d4
    d3 = dh3 * (1 - h3**2)
    g["A"] = h2.T @ d3
    d2 = (d3 @ a.T) * (1 - h2**2)
    g["B"] = h1.T @ d2
    d1 = (d2 @ b.T) * (1 - h1**2)
    g["A"] = g["A"] + x.T @ d1
    return g


def test_tied_weights_and_a_self_product_outlined_as_off() -> None:
    runs, calls = {}, {}
    for outline in (True, False):
        bd, loss, data, weights, x, lab = _model(np.random.default_rng(7))
        runs[outline], s = _step(bd.getModelProto(), loss, data, weights, 8, outline)
        calls[outline] = sorted(
            Counter(
                p["function"] for p in s.getGraphReport()["programs"] if p["type"] == "Call"
            ).values()
        )
    # forward: x A, h1 B and h2 A are one function (three calls); backward: the
    # gradients of h1 B and h2 A (both operands need one) are one function (two
    # calls), x A's (x needs none) and h3 h3's (one tensor twice) are alone
    assert calls == {True: [2, 3], False: []}
    for w in runs[True]:
        assert np.array_equal(runs[True][w], runs[False][w]), w
    want = _numpy(data[x], data[lab], weights)
    for w in want:
        np.testing.assert_allclose(runs[True][w], want[w], rtol=2e-4, atol=2e-6, err_msg=w)
