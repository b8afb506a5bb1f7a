"""Opset-6 forms of the ops PopART registers at older versions
(popart_api/ops_legacy.py): legacy broadcasting, same-shape variadics, GRU-3, LSTM-1."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from popart_harness import run_model

import popart_api as popart

F = TensorProto.FLOAT


def _model(nodes, inputs, outputs, opset=6) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _run(model: onnx.ModelProto, feeds: dict) -> dict:
    outs = [o.name for o in model.graph.output]
    return run_model(model.SerializeToString(), feeds, outs, tiles=4)


@pytest.mark.parametrize(
    ("op", "b_shape", "axis", "fn"),
    [
        ("Add", [4], None, np.add),
        ("Sub", [3, 4], None, np.subtract),
        ("Mul", [3], 1, np.multiply),
        ("Div", [2, 1], 0, np.divide),
        ("Pow", [1, 1], None, np.power),
    ],
)
def test_legacy_broadcast_aligns_b_from_axis(op, b_shape, axis, fn):
    rng = np.random.default_rng(1)
    a = rng.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    b = rng.uniform(0.5, 2.0, b_shape).astype(np.float32)
    attrs = {"broadcast": 1} | ({} if axis is None else {"axis": axis})
    node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
    got = _run(_model([node], [_vi("a", [2, 3, 4]), _vi("b", b_shape)], [_vi("y", [2, 3, 4])]),
               {"a": a, "b": b})["y"]  # fmt: skip
    start = 3 - len(b_shape) if axis is None else axis
    aligned = b.reshape([1] * start + b_shape + [1] * (3 - start - len(b_shape)))
    np.testing.assert_allclose(got, fn(a, aligned), rtol=1e-5)


def test_legacy_broadcast_errors_name_the_node_and_shapes():
    inputs = [_vi("a", [2, 3]), _vi("b", [3])]
    no_bc = _model([helper.make_node("Add", ["a", "b"], ["y"], name="old")], inputs,
                   [_vi("y", [2, 3])])  # fmt: skip
    with pytest.raises(popart.popart_exception, match=r"Add \(node 'old'\).*\[2, 3\].*\[3\]"):
        _run(no_bc, {"a": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32)})
    bad_axis = _model(
        [helper.make_node("Mul", ["a", "b"], ["y"], name="m", broadcast=1, axis=0)], inputs,
        [_vi("y", [2, 3])],
    )  # fmt: skip
    with pytest.raises(popart.popart_exception, match=r"Mul \(node 'm'\).*'b' \[3\].*axis 0"):
        _run(bad_axis, {"a": np.ones((2, 3), np.float32), "b": np.ones(3, np.float32)})


def test_opset6_variadics_need_one_shape():
    rng = np.random.default_rng(2)
    x, y = (rng.standard_normal((2, 3)).astype(np.float32) for _ in range(2))
    nodes = [helper.make_node(op, ["x", "y"], [op.lower()]) for op in ("Max", "Min", "Sum", "Mean")]
    outs = [_vi(op.lower(), [2, 3]) for op in ("Max", "Min", "Sum", "Mean")]
    got = _run(_model(nodes, [_vi("x", [2, 3]), _vi("y", [2, 3])], outs), {"x": x, "y": y})
    for key, want in (("max", np.maximum(x, y)), ("min", np.minimum(x, y)), ("sum", x + y),
                      ("mean", (x + y) / 2)):  # fmt: skip
        np.testing.assert_allclose(got[key], want, rtol=1e-6)
    bad = _model([helper.make_node("Max", ["x", "z"], ["m"], name="mx")],
                 [_vi("x", [2, 3]), _vi("z", [3])], [_vi("m", [2, 3])])  # fmt: skip
    with pytest.raises(popart.popart_exception, match=r"Max \(node 'mx'\).*'z' \[3\].*one shape"):
        _run(bad, {"x": x, "z": np.ones(3, np.float32)})


@pytest.mark.parametrize(("op", "opset", "gates"), [("LSTM", 6, 4), ("GRU", 6, 3)])
def test_old_recurrent_forms_match_their_opset7_reference(op, opset, gates):
    seq, batch, inp, hidden = 3, 2, 4, 5
    rng = np.random.default_rng(5)
    feeds = {
        "X": rng.standard_normal((seq, batch, inp)).astype(np.float32),
        "W": (0.3 * rng.standard_normal((1, gates * hidden, inp))).astype(np.float32),
        "R": (0.3 * rng.standard_normal((1, gates * hidden, hidden))).astype(np.float32),
    }
    node = helper.make_node(op, ["X", "W", "R"], ["Y", "Y_h"], hidden_size=hidden,
                            output_sequence=1)  # fmt: skip
    inputs = [_vi(k, list(v.shape)) for k, v in feeds.items()]
    outputs = [_vi("Y", [seq, 1, batch, hidden]), _vi("Y_h", [1, batch, hidden])]
    got = _run(_model([node], inputs, outputs, opset=opset), feeds)
    del node.attribute[[a.name for a in node.attribute].index("output_sequence")]
    ref = ReferenceEvaluator(_model([node], inputs, outputs, opset=7)).run(None, feeds)
    np.testing.assert_allclose(got["Y"], ref[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["Y_h"], ref[1], rtol=1e-4, atol=1e-5)
