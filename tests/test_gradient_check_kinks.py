"""The training reference check of ``examples/models/run_model.py`` differentiates the
model with its ReLU and max pool branches frozen (``freeze_kinks``): exact for a
gradient written out by hand here even at a step that crosses kinks, where the plain
central difference of the model is not."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.reference
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))

from run_model import directional_check, float64_model, freeze_kinks


def _model(w: np.ndarray) -> onnx.ModelProto:
    """``loss = sum(maxpool2x2(relu(a @ w)) ** 2)`` for ``a`` of shape [1, 1, 4, 6]."""
    nodes = [
        helper.make_node("MatMul", ["a", "w"], ["z"]),
        helper.make_node("Relu", ["z"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Mul", ["p", "p"], ["sq"]),
        helper.make_node("ReduceSum", ["sq"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "kinks",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, [1, 1, 4, 6])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=[numpy_helper.from_array(w.astype(np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def _hand_gradient(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """d loss / d w: 2p at each window's largest element, through ReLU's x > 0."""
    z = a[0, 0].astype(np.float64) @ w.astype(np.float64)  # [4, 4]
    r = np.maximum(z, 0)
    dr = np.zeros_like(r)
    for i in range(0, 4, 2):
        for j in range(0, 4, 2):
            window = r[i : i + 2, j : j + 2]
            k = np.unravel_index(np.argmax(window), window.shape)
            dr[i + k[0], j + k[1]] = 2 * window[k]
    return a[0, 0].astype(np.float64).T @ (dr * (z > 0))


def _plain_difference(proto, feeds, g: np.ndarray, eps: float) -> float:
    wide = float64_model(proto)
    d = g / np.linalg.norm(g)
    w = numpy_helper.to_array(wide.graph.initializer[0])

    def at(sign: float) -> float:
        m = onnx.ModelProto()
        m.CopyFrom(wide)
        m.graph.initializer[0].CopyFrom(numpy_helper.from_array(w + sign * eps * d, "w"))
        return float(onnx.reference.ReferenceEvaluator(m).run(["loss"], feeds)[0])

    return (at(1.0) - at(-1.0)) / (2 * eps)


def test_frozen_difference_is_exact_where_the_plain_one_crosses_kinks():
    rng = np.random.default_rng(10)
    a = rng.standard_normal((1, 1, 4, 6)).astype(np.float32)
    w = rng.standard_normal((6, 4)).astype(np.float32)
    proto, feeds = _model(w), {"a": a.astype(np.float64)}
    g = _hand_gradient(a, w)
    eps = 1.0  # a step that moves some ReLU inputs across zero
    d = g / np.linalg.norm(g)
    signs = [np.sign(a[0, 0] @ (w + s * eps * d)) for s in (-1, 0, 1)]
    assert not np.array_equal(signs[0], signs[1]) or not np.array_equal(signs[2], signs[1])
    norm, numeric = directional_check(proto, {"a": a}, "loss", {"w": g}, eps=eps)
    assert norm == pytest.approx(np.linalg.norm(g), rel=1e-12)
    # frozen, the loss is a quadratic in w: its central difference is exact
    assert numeric == pytest.approx(norm, rel=1e-9)
    plain = _plain_difference(proto, feeds, g, eps)
    assert abs(plain - norm) > 0.01 * norm  # the plain difference is off at this step
    # at a step that crosses no kink the plain difference agrees
    assert _plain_difference(proto, feeds, g, 1e-6) == pytest.approx(norm, rel=1e-6)


def test_frozen_model_has_the_model_value_and_catches_a_wrong_gradient():
    rng = np.random.default_rng(8)
    a = rng.standard_normal((1, 1, 4, 6))
    w = rng.standard_normal((6, 4))
    wide = float64_model(_model(w))
    frozen = freeze_kinks(wide, {"a": a})
    assert {n.op_type for n in frozen.graph.node} >= {"Gather", "Mul"}
    assert "Relu" not in {n.op_type for n in frozen.graph.node}
    want = onnx.reference.ReferenceEvaluator(wide).run(["loss"], {"a": a})[0]
    got = onnx.reference.ReferenceEvaluator(frozen).run(["loss"], {"a": a})[0]
    assert float(got) == float(want)
    g = _hand_gradient(a, w)
    scaled = directional_check(_model(w), {"a": a}, "loss", {"w": 1.1 * g})
    assert scaled[0] != pytest.approx(scaled[1], rel=1e-2)


def test_freeze_kinks_names_a_max_pool_with_indices():
    m = _model(np.ones((6, 4)))
    m.graph.node[2].output.append("idx")
    with pytest.raises(ValueError, match=r"MaxPool .* has 2 outputs, 1 required"):
        freeze_kinks(m, {"a": np.ones((1, 1, 4, 6))})
