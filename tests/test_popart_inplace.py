"""PopART's ``InPlace`` pattern beyond the non-linearities: elementwise unary and
binary ops overwrite a fresh input read by nothing else, and view ops (Reshape,
Transpose, Slice, Concat, ...) are views, copied (PopART's ``cloneNcopy``) when the
pattern is off. Values are checked against numpy; memory and cycles move the way
PopART's would (in place: less memory; views: no copies)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from popart_harness import device, run_session, train_once

import popart_api as popart
from popart_api.inplace import inplace_candidates

B, D = 32, 48


def _session(bd, anchor, patterns, data, training_loss=None):
    if training_loss is None:
        s, out = run_session(bd.getModelProto(), data, [anchor], patterns=patterns)
    else:
        s, out = train_once(
            data,
            fnModel=bd.getModelProto(),
            dataFlow=popart.DataFlow(1, {anchor: popart.AnchorReturnType("ALL")}),
            deviceInfo=device(8),
            loss=training_loss,
            optimizer=popart.ConstSGD(0.05),
            patterns=patterns,
        )
    memory = sum(t.memory.total for t in s.getReport().compilation.tiles)
    return s, out[anchor], memory, s.getCycleCount()


def _off():
    return popart.Patterns().enablePattern("InPlace", False)


def _elementwise_model():
    rng = np.random.default_rng(1)
    w = (rng.standard_normal((D, D)) * 0.1).astype(np.float32)
    bias = rng.standard_normal(D).astype(np.float32)
    x = rng.standard_normal((B, D)).astype(np.float32)
    bd = popart.Builder()
    xi = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, D]), "x")
    t = bd.aiOnnx.matmul([xi, bd.addInitializedInputTensor(w, "w")])
    t = bd.aiOnnx.add([t, bd.aiOnnx.constant(bias)])  # Add in place on the MatMul
    t = bd.aiOnnx.exp([bd.aiOnnx.neg([t])])  # Neg, then Exp, each in place
    t = bd.aiGraphcore.scale([t], 0.5)
    t = bd.aiOnnx.log([bd.aiOnnx.add([t, bd.aiOnnx.constant(np.float32(1.0))])])
    y = bd.aiOnnx.sqrt([t])
    z = 0.5 * np.exp(-(x @ w + bias))
    want = np.sqrt(np.log(z + 1.0))
    return bd, xi, y, x, want


def test_elementwise_ops_in_place_save_memory_values_equal_numpy():
    bd, xi, y, x, want = _elementwise_model()
    _, on, mem_on, _ = _session(bd, y, None, {xi: x})
    bd, xi, y, x, _ = _elementwise_model()
    _, off, mem_off, _ = _session(bd, y, _off(), {xi: x})
    np.testing.assert_allclose(on, want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(on, off)
    # one [B, D] activation held instead of an input and an output per op; the peak
    # is the MatMul's, so the difference is small
    assert mem_off > mem_on


def _view_model():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 6, 8)).astype(np.float32)
    bd = popart.Builder()
    xi = bd.addInputTensor(popart.TensorInfo("FLOAT", [4, 6, 8]), "x")
    t = bd.aiOnnx.transpose([xi], perm=[2, 0, 1])
    t = bd.aiOnnx.reshape([t, bd.aiOnnx.constant(np.array([8, 24], np.int64))])
    ints = [bd.aiOnnx.constant(np.array(v, np.int64)) for v in ([0, 4], [8, 20], [0, 1])]
    a = bd.aiOnnx.slice([t, *ints])
    y = bd.aiOnnx.concat([a, bd.aiOnnx.identity([t])], axis=1)
    r = x.transpose(2, 0, 1).reshape(8, 24)
    return bd, xi, y, x, np.concatenate([r[:, 4:20], r], axis=1)


def test_view_ops_copy_when_inplace_is_off():
    """PopART's ReshapeOpx, TransposeOpx, SliceOpx, ConcatOpx and IdentityOpx copy their
    result into a new tensor; the Inplace variants are views: off, more cycles (the
    copies) and more memory, the same values."""
    bd, xi, y, x, want = _view_model()
    _, on, mem_on, cyc_on = _session(bd, y, None, {xi: x})
    bd, xi, y, x, _ = _view_model()
    _, off, mem_off, cyc_off = _session(bd, y, _off(), {xi: x})
    np.testing.assert_array_equal(on, want)
    np.testing.assert_array_equal(off, want)
    assert cyc_off > cyc_on
    assert mem_off > mem_on


def _training_model():
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((D, D)) * 0.1).astype(np.float32)
    bias = (rng.standard_normal(D) * 0.1).astype(np.float32)
    x = rng.standard_normal((B, D)).astype(np.float32)
    bd = popart.Builder()
    xi = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, D]), "x")
    wi = bd.addInitializedInputTensor(w, "w")
    bi = bd.addInitializedInputTensor(bias, "b")
    t = bd.aiOnnx.add([bd.aiOnnx.matmul([xi, wi]), bi])
    t = bd.aiOnnx.sub([bd.aiOnnx.tanh([t]), bd.aiOnnx.constant(np.float32(0.25))])
    t = bd.aiOnnx.mul([t, t])  # read twice: not in place
    loss = bd.aiGraphcore.identityloss([t], reduction=popart.ReductionType.Sum)
    return bd, xi, loss, x, w, bias


def _numpy_step(x, w, b, lr=0.05):
    h = np.tanh(x.astype(np.float64) @ w + b)
    d = 2 * (h - 0.25) * (1 - h * h)
    return w - lr * (x.T @ d), b - lr * d.sum(0)


def test_training_in_place_updates_as_numpy():
    """Add in place on the MatMul and Tanh on the Add (their gradients read no
    overwritten value), Sub on the Tanh only in inference (Tanh's gradient reads its
    output): the trained weights match numpy with the pattern on and off."""
    bd, xi, loss, x, w, b = _training_model()
    model = popart.Builder(bd.getModelProto())
    assert set(inplace_candidates(_proto(model), None, (), training=True)) == {1, 2}
    assert set(inplace_candidates(_proto(model), None, ())) == {1, 2, 4}
    results = []
    for patterns in (None, _off()):
        bd, xi, loss, x, w, b = _training_model()
        s, _, mem, _ = _session(bd, loss, patterns, {xi: x}, training_loss=loss)
        out = {"w": np.zeros_like(w), "b": np.zeros_like(b)}
        s.weightsToHost()
        s.readWeights(popart.PyWeightsIO(out))
        results.append((out, mem))
    want_w, want_b = _numpy_step(x, w, b)
    for out, _ in results:
        np.testing.assert_allclose(out["w"], want_w, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out["b"], want_b, rtol=1e-4, atol=1e-5)
    assert results[1][1] > results[0][1]


def _proto(bd):
    import onnx

    return onnx.load_from_string(bd.getModelProto())


def _node_model(nodes, outputs=("y",)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    w = helper.make_tensor("w", TensorProto.FLOAT, [3, 3], np.ones(9, np.float32))
    graph = helper.make_graph(
        nodes,
        "g",
        [x],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs],
        [w],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


@pytest.mark.parametrize(
    ("ops", "training", "expected"),
    [
        (["Log"], False, {1: 0}),  # Log's gradient reads its input: inference only
        (["Log"], True, {}),
        (["Sigmoid", "Neg"], True, {1: 0}),  # Neg may not overwrite Sigmoid's output
        (["Sigmoid", "Neg"], False, {1: 0, 2: 0}),
        (["Reshape"], False, {}),  # a view: no modifying in-place variant
    ],
)
def test_which_nodes_are_in_place(ops, training, expected):
    nodes = [helper.make_node("MatMul", ["x", "w"], ["t0"])]
    for k, op in enumerate(ops):
        extra = []
        if op == "Reshape":
            nodes.append(helper.make_node("Constant", [], ["shape"], value_ints=[3, 2]))
            extra = ["shape"]
        nodes.append(helper.make_node(op, [f"t{k}", *extra], [f"t{k + 1}"]))
    nodes.append(helper.make_node("Identity", [f"t{len(ops)}"], ["y"]))
    got = inplace_candidates(_node_model(nodes), None, (), training)
    # indices shift by one when a Constant was inserted
    assert got == {k + ("Reshape" in ops): v for k, v in expected.items()}


def test_overwritten_inputs_are_read_by_nothing_else():
    """A MatMul output read by two nodes, anchored, a graph output or read inside an If
    branch is not overwritten."""
    mm = helper.make_node("MatMul", ["x", "w"], ["t"])
    relu = helper.make_node("Relu", ["t"], ["y"])
    two = [mm, relu, helper.make_node("Neg", ["t"], ["z"])]
    assert inplace_candidates(_node_model(two, ("y", "z")), None, ()) == {}
    assert inplace_candidates(_node_model([mm, relu]), None, ["t"]) == {}
    assert inplace_candidates(_node_model([mm, relu], ("y", "t")), None, ()) == {}
    assert inplace_candidates(_node_model([mm, relu]), None, ()) == {1: 0}
    then = helper.make_graph(
        [helper.make_node("Identity", ["t"], ["o"])],
        "then",
        [],
        [helper.make_tensor_value_info("o", TensorProto.FLOAT, None)],
    )
    cond = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", 9, [], [1]))
    branch = helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=then)
    model = _node_model([mm, relu, cond, branch], ("y", "z"))
    assert inplace_candidates(model, None, ()) == {}


def _view_training_model():
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((D, D)) * 0.1).astype(np.float32)
    x = rng.standard_normal((B, D)).astype(np.float32)
    bd = popart.Builder()
    xi = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, D]), "x")
    t = bd.aiOnnx.matmul([xi, bd.addInitializedInputTensor(w, "w")])
    t = bd.aiOnnx.transpose([t], perm=[1, 0])
    t = bd.aiOnnx.reshape([t, bd.aiOnnx.constant(np.array([D * B], np.int64))])
    t = bd.aiOnnx.sigmoid([t])
    loss = bd.aiGraphcore.identityloss([t], reduction=popart.ReductionType.Sum)
    return bd, xi, loss, x, w


def test_training_through_views_is_the_same_copied_or_not():
    """Transpose and Reshape between a MatMul and a Sigmoid: views with InPlace (the
    Sigmoid overwrites the MatMul's output through them), copies without; the trained
    weight is numpy's either way."""
    bd, *_ = _view_training_model()
    model = _proto(bd)
    sigmoid = [n.op_type for n in model.graph.node].index("Sigmoid")
    assert inplace_candidates(model, None, (), training=True) == {sigmoid: 0}
    outs = []
    for patterns in (None, _off()):
        bd, xi, loss, x, w = _view_training_model()
        s, _, _, _ = _session(bd, loss, patterns, {xi: x}, training_loss=loss)
        got = {"w": np.zeros_like(w)}
        s.weightsToHost()
        s.readWeights(popart.PyWeightsIO(got))
        outs.append(got["w"])
    m = x.astype(np.float64) @ w
    sig = 1 / (1 + np.exp(-m))
    want = w - 0.05 * (x.T @ (sig * (1 - sig)))
    for got in outs:
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
