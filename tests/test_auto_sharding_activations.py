"""``VirtualGraphMode.Auto`` in training counts the activations a node keeps for its
gradient (PopART's ``AutoVirtualGraph::costFn``), also for a model built with
``onnx.helper`` that records no ``value_info``: their shapes come from ONNX's shape
inference, as PopART knows every tensor's info when it places ops."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from popart_api.pipeline import auto_virtual_graphs

N = 256  # elements of the wide tensors


def _chain() -> onnx.ModelProto:
    """x[1, N] -> Relu -> Relu -> Relu -> MatMul W1[N, 1] -> MatMul W2[1, N]; no value_info."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r0"]),
        helper.make_node("Relu", ["r0"], ["r1"]),
        helper.make_node("Relu", ["r1"], ["r2"]),
        helper.make_node("MatMul", ["r2", "w1"], ["m1"]),
        helper.make_node("MatMul", ["m1", "w2"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(np.ones((N, 1), np.float32), "w1"),
        numpy_helper.from_array(np.ones((1, N), np.float32), "w2"),
    ]
    graph = helper.make_graph(
        nodes,
        "chain",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, N])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, N])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


def _expected(costs: list[float]) -> list[int]:
    """Two IPUs, every node a split node: cut after the cumulative cost closest to half
    of the total, taking the first at or above it unless the one below is closer."""
    total, cum = sum(costs), np.cumsum(costs)[:-1]
    above = int(np.argmax(cum >= total / 2))
    cut = above - 1 if above and total / 2 - cum[above - 1] < cum[above] - total / 2 else above
    return [0 if k <= cut else 1 for k in range(len(costs))]


def test_training_cost_counts_activations_without_value_info():
    model = _chain()
    assert len(model.graph.value_info) == 0
    b = 4  # bytes of a float
    # weights + every input and output (the ReLUs move N floats in and out)
    training = [2 * b * N, 2 * b * N, 2 * b * N, b * N + b * N + b, b * N + b + b * N]
    assert _expected(training) == [0, 0, 0, 1, 1]
    assert auto_virtual_graphs(model, 2, True, "test") == _expected(training)
    # inference counts the weights alone: all before the second MatMul on IPU 0
    inference = [0, 0, 0, b * N, b * N]
    assert _expected(inference) == [0, 0, 0, 0, 1]
    assert auto_virtual_graphs(model, 2, False, "test") == _expected(inference)


def test_inferred_shapes_give_the_placement_of_a_model_with_value_info():
    model = _chain()
    inferred = onnx.shape_inference.infer_shapes(model)
    assert len(inferred.graph.value_info) == 4
    for training in (True, False):
        assert auto_virtual_graphs(model, 2, training, "t") == auto_virtual_graphs(
            inferred, 2, training, "t"
        )
