"""Training through ``If`` (PopART's ``IfGradOp``): each branch's backward pass runs
under the forward condition and gives the gradients of the weights and inputs the
branches read from the enclosing graph. Checked against numpy (float64) per branch,
and against central finite differences of ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import popart_api as popart

F = TensorProto.FLOAT
LR = 0.1
GX = popart.reservedGradientPrefix() + "x"


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _weights(seed=0):
    rng = np.random.default_rng(seed)
    return {
        "W": (rng.standard_normal((4, 3)) * 0.5).astype(np.float32),
        "V": (rng.standard_normal(3) * 0.5).astype(np.float32),
    }


def _model(nested: bool = False) -> onnx.ModelProto:
    """loss = sum(|If(c, tanh(x @ W) * V, (x @ W) - V)|); the else branch optionally
    holds a second If on ``d`` (``x @ W`` or ``sigmoid(x @ W)``)."""
    then_g = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["tm"]),
            helper.make_node("Tanh", ["tm"], ["tt"]),
            helper.make_node("Mul", ["tt", "V"], ["ty"]),
        ],
        "then",
        [],
        [_vi("ty", F, [2, 3])],
    )
    if nested:
        inner_then = helper.make_graph(
            [helper.make_node("MatMul", ["x", "W"], ["im"])], "ithen", [], [_vi("im", F, [2, 3])]
        )
        inner_else = helper.make_graph(
            [
                helper.make_node("MatMul", ["x", "W"], ["jm"]),
                helper.make_node("Sigmoid", ["jm"], ["js"]),
            ],
            "ielse",
            [],
            [_vi("js", F, [2, 3])],
        )
        first = helper.make_node(
            "If", ["d"], ["em"], then_branch=inner_then, else_branch=inner_else
        )
    else:
        first = helper.make_node("MatMul", ["x", "W"], ["em"])
    else_g = helper.make_graph(
        [first, helper.make_node("Sub", ["em", "V"], ["ey"])], "else", [], [_vi("ey", F, [2, 3])]
    )
    nodes = [
        helper.make_node("If", ["c"], ["y"], name="gate", then_branch=then_g, else_branch=else_g),
        helper.make_node(
            "L1", ["y"], ["loss"], domain="ai.graphcore", reduction="Sum", **{"lambda": 1.0}
        ),
    ]
    inputs = [_vi("c", TensorProto.BOOL, []), _vi("x", F, [2, 4])]
    if nested:
        inputs.append(_vi("d", TensorProto.BOOL, []))
    inits = [numpy_helper.from_array(v, k) for k, v in _weights().items()]
    graph = helper.make_graph(nodes, "g", inputs, [_vi("loss", F, [])], initializer=inits)
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("ai.graphcore", 1)]
    )


def _train(model: onnx.ModelProto, feed: dict) -> tuple[dict, np.ndarray]:
    s = popart.TrainingSession(
        fnModel=model.SerializeToString(),
        dataFlow=popart.DataFlow(
            1, {"loss": popart.AnchorReturnType("ALL"), GX: popart.AnchorReturnType("ALL")}
        ),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
        loss="loss",
        optimizer=popart.ConstSGD(LR),
    )
    s.prepareDevice()
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(feed, anchors))
    s.weightsToHost()
    out = {k: np.zeros_like(v) for k, v in _weights().items()}
    s.readWeights(popart.PyWeightsIO(out))
    return out, np.array(anchors[GX])


def _numpy_grads(x, W, V, taken: bool, inner: bool | None = None):
    """Gradients of loss w.r.t. W, V and x in float64."""
    x, W, V = (a.astype(np.float64) for a in (x, W, V))
    m = x @ W
    if taken:
        t = np.tanh(m)
        s = np.sign(t * V)
        dV = (s * t).sum(0)
        dm = s * V * (1 - t * t)
    else:
        e = m if inner in (None, True) else 1 / (1 + np.exp(-m))
        s = np.sign(e - V)
        dV = -s.sum(0)
        dm = s if inner in (None, True) else s * e * (1 - e)
    return x.T @ dm, dV, dm @ W.T


@pytest.mark.parametrize("taken", [True, False])
def test_if_trains_the_branch_the_condition_takes(taken):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w = _weights()
    got, gx = _train(_model(), {"c": np.array(taken), "x": x})
    dW, dV, dx = _numpy_grads(x, w["W"], w["V"], taken)
    np.testing.assert_allclose(got["W"], w["W"] - LR * dW, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["V"], w["V"] - LR * dV, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, dx, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("taken", "inner"), [(False, True), (False, False), (True, False)])
def test_nested_if_gradients(taken, inner):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    w = _weights()
    got, gx = _train(_model(nested=True), {"c": np.array(taken), "d": np.array(inner), "x": x})
    dW, dV, dx = _numpy_grads(x, w["W"], w["V"], taken, inner)
    np.testing.assert_allclose(got["W"], w["W"] - LR * dW, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got["V"], w["V"] - LR * dV, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(gx, dx, rtol=1e-5, atol=1e-6)


def test_if_input_gradient_matches_finite_differences():
    """The gradient of the input x against central differences of ONNX's reference
    evaluator on the same model (L1 written as ReduceSum(Abs) for it)."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 4)).astype(np.float32)
    model = _model()
    ref = onnx.ModelProto()
    ref.CopyFrom(model)
    del ref.graph.node[1]
    ref.graph.node.extend(
        [
            helper.make_node("Abs", ["y"], ["a"]),
            helper.make_node("ReduceSum", ["a"], ["loss"], keepdims=0),
        ]
    )
    del ref.opset_import[1]
    evaluator = ReferenceEvaluator(ref)

    def loss(xv):
        return float(evaluator.run(None, {"c": np.array(True), "x": xv})[0])

    h = 1e-3
    fd = np.zeros_like(x, dtype=np.float64)
    for i in np.ndindex(x.shape):
        up, down = x.astype(np.float64), x.astype(np.float64)
        up[i] += h
        down[i] -= h
        fd[i] = (loss(up.astype(np.float32)) - loss(down.astype(np.float32))) / (2 * h)
    _, gx = _train(model, {"c": np.array(True), "x": x})
    np.testing.assert_allclose(gx, fd, rtol=2e-2, atol=2e-3)


def test_pipelined_training_through_an_if_is_refused():
    """Pipelined, the stash holds node inputs and outputs, not the activations of an
    If's branches its gradient reads: a named error instead of a silently wrong
    gradient."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["h", "V"], ["ty"])], "then", [], [_vi("ty", F, [2, 3])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["h", "V"], ["ey"])], "else", [], [_vi("ey", F, [2, 3])]
    )

    def place(ipu):
        return {"__ipu_number": ipu, "__pipeline_stage": ipu}

    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], **place(0)),
        helper.make_node(
            "If", ["c"], ["y"], name="gate", then_branch=then_g, else_branch=else_g, **place(1)
        ),
        helper.make_node(
            "L1",
            ["y"],
            ["loss"],
            domain="ai.graphcore",
            reduction="Sum",
            **{"lambda": 1.0},
            **place(1),
        ),
    ]
    inits = [numpy_helper.from_array(v, k) for k, v in _weights().items()]
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("c", TensorProto.BOOL, []), _vi("x", F, [2, 4])],
        [_vi("loss", F, [])],
        initializer=inits,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 11), helper.make_opsetid("ai.graphcore", 1)]
    )
    o = popart.SessionOptions()
    o.virtualGraphMode = popart.VirtualGraphMode.Manual
    o.enablePipelining = True
    s = popart.TrainingSession(
        fnModel=model.SerializeToString(),
        dataFlow=popart.DataFlow(3, {"loss": popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"numIPUs": 2, "tilesPerIPU": 4}),
        loss="loss",
        optimizer=popart.ConstSGD(LR),
        userOptions=o,
    )
    with pytest.raises(popart.popart_exception, match=r"If \(node 'gate'\).*pipelining"):
        s.prepareDevice()


def test_an_if_on_another_ipu_reads_the_enclosing_value_there():
    """Sharded: the If's branch on IPU 1 reads ``h`` made on IPU 0; the value is copied
    to IPU 1 (PopART's IpuCopy) and the output is numpy's."""
    then_g = helper.make_graph(
        [helper.make_node("Mul", ["h", "V"], ["ty"])], "then", [], [_vi("ty", F, [2, 3])]
    )
    else_g = helper.make_graph(
        [helper.make_node("Sub", ["h", "V"], ["ey"])], "else", [], [_vi("ey", F, [2, 3])]
    )
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["h"], __ipu_number=0),
        helper.make_node(
            "If", ["c"], ["y"], then_branch=then_g, else_branch=else_g, __ipu_number=1
        ),
    ]
    w = _weights()
    graph = helper.make_graph(
        nodes,
        "g",
        [_vi("c", TensorProto.BOOL, []), _vi("x", F, [2, 4])],
        [_vi("y", F, [2, 3])],
        initializer=[numpy_helper.from_array(v, k) for k, v in w.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    o = popart.SessionOptions()
    o.virtualGraphMode = popart.VirtualGraphMode.Manual
    s = popart.InferenceSession(
        fnModel=model.SerializeToString(),
        dataFlow=popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"numIPUs": 2, "tilesPerIPU": 4}),
        userOptions=o,
    )
    s.prepareDevice()
    s.weightsFromHost()
    x = np.random.default_rng(8).standard_normal((2, 4)).astype(np.float32)
    for taken in (True, False):
        anchors = s.initAnchorArrays()
        s.run(popart.PyStepIO({"c": np.array(taken), "x": x}, anchors))
        h = x @ w["W"]
        want = h * w["V"] if taken else h - w["V"]
        np.testing.assert_allclose(anchors["y"], want, rtol=1e-5, atol=1e-6)
