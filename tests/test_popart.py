"""popart_api: ONNX models built with the Builder (or loaded from a file) run by an
InferenceSession on a small IPU Model, compared with ONNX's reference evaluator."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator
from onnx.reference.op_run import OpRun

import popart_api as popart


class Scale(OpRun):
    """ai.graphcore Scale for the reference evaluator: ``x * scale``."""

    op_domain = "ai.graphcore"

    def _run(self, x, scale=None):
        return (x * np.float32(scale),)


def _reference(proto: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ReferenceEvaluator(onnx.load_from_string(proto), new_ops=[Scale]).run(None, feeds)


def _device(tiles: int = 8) -> popart.DeviceInfo:
    return popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": tiles})


def _run(proto, out_ids, feeds, bps=1, art="ALL", device=None):
    flow = popart.DataFlow(bps, {o: popart.AnchorReturnType(art) for o in out_ids})
    session = popart.InferenceSession(fnModel=proto, dataFlow=flow, deviceInfo=device or _device())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO(feeds, anchors))
    return session, anchors


RNG = np.random.default_rng(0)


def _rand(*shape, positive=False):
    x = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.5 if positive else x


def _unary_model(method, shape=(3, 5), positive=False, opsets=None, **attrs):
    b = popart.Builder(opsets=opsets)
    x = b.addInputTensor(popart.TensorInfo("FLOAT", list(shape)))
    y = getattr(b.aiOnnx, method)([x], **attrs)
    b.addOutputTensor(y)
    return b.getModelProto(), x, y, {x: _rand(*shape, positive=positive)}


UNARY = [
    ("relu", {}, False, None),
    ("sigmoid", {}, False, None),
    ("tanh", {}, False, None),
    ("sqrt", {}, True, None),
    ("exp", {}, False, None),
    ("log", {}, True, None),
    ("identity", {}, False, None),
    ("softmax", {"axis": 1}, False, None),
    ("softmax", {"axis": -1}, False, {"ai.onnx": 13}),
    ("softmax", {"axis": 0}, False, {"ai.onnx": 13}),
    ("transpose", {"perm": [1, 0]}, False, None),
]


@pytest.mark.parametrize(("method", "attrs", "positive", "opsets"), UNARY)
def test_unary_ops_match_reference(method, attrs, positive, opsets):
    proto, _x, y, feeds = _unary_model(method, positive=positive, opsets=opsets, **attrs)
    _, anchors = _run(proto, [y], feeds)
    np.testing.assert_allclose(anchors[y], _reference(proto, feeds)[0], rtol=1e-5, atol=1e-6)


def test_softmax_opset11_coerces_to_2d():
    proto, _x, y, feeds = _unary_model("softmax", shape=(2, 3, 4), axis=1)
    _, anchors = _run(proto, [y], feeds)
    # onnx.reference applies opset-13 semantics here, so the reference is numpy:
    flat = np.exp(feeds[_x].reshape(2, 12).astype(np.float64))
    want = (flat / flat.sum(1, keepdims=True)).reshape(2, 3, 4)
    np.testing.assert_allclose(anchors[y], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("method", ["add", "sub", "mul", "div"])
@pytest.mark.parametrize("b_shape", [(3, 4), (4,), (1, 4)])
def test_binary_ops_broadcast_match_reference(method, b_shape):
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [3, 4]))
    w = b.addInitializedInputTensor(_rand(*b_shape, positive=True))
    y = getattr(b.aiOnnx, method)([x, w])
    b.addOutputTensor(y)
    proto = b.getModelProto()
    feeds = {x: _rand(3, 4)}
    _, anchors = _run(proto, [y], feeds)
    np.testing.assert_allclose(anchors[y], _reference(proto, feeds)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(("a_shape", "b_shape"), [((3, 4), (4, 5)), ((2, 3, 4), (4, 5))])
def test_matmul_matches_reference(a_shape, b_shape):
    b = popart.Builder()
    a = b.addInputTensor(popart.TensorInfo(np.float32, list(a_shape)))
    w = b.addInitializedInputTensor(_rand(*b_shape))
    y = b.aiOnnx.matmul([a, w])
    b.addOutputTensor(y)
    assert b.getTensorShape(y) == [*a_shape[:-1], b_shape[-1]]
    proto = b.getModelProto()
    feeds = {a: _rand(*a_shape)}
    _, anchors = _run(proto, [y], feeds)
    np.testing.assert_allclose(anchors[y], _reference(proto, feeds)[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("trans_a", "trans_b", "alpha", "beta"), [(0, 0, 1.0, 1.0), (1, 1, 0.5, 2.0)]
)
def test_gemm_matches_reference(trans_a, trans_b, alpha, beta):
    b = popart.Builder()
    a = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 3] if trans_a else [3, 4]))
    w = b.addInitializedInputTensor(_rand(*([5, 4] if trans_b else [4, 5])))
    c = b.addInitializedInputTensor(_rand(5))
    y = b.aiOnnx.gemm([a, w, c], alpha=alpha, beta=beta, transA=trans_a, transB=trans_b)
    b.addOutputTensor(y)
    proto = b.getModelProto()
    feeds = {a: _rand(*([4, 3] if trans_a else [3, 4]))}
    _, anchors = _run(proto, [y], feeds)
    np.testing.assert_allclose(anchors[y], _reference(proto, feeds)[0], rtol=1e-5, atol=1e-5)


def test_reshape_constant_and_scale_match_reference():
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 6]))
    shape = b.aiOnnx.constant(np.array([3, -1], dtype=np.int64))
    r = b.aiOnnx.reshape([x, shape])
    k = b.aiOnnx.constant(np.full([3, 4], 0.25, np.float32))
    s = b.aiGraphcore.scale([b.aiOnnx.add([r, k])], 3.0)
    b.addOutputTensor(s)
    assert b.getTensorShape(r) == [3, 4]
    proto = b.getModelProto()
    feeds = {x: _rand(2, 6)}
    _, anchors = _run(proto, [s], feeds)
    np.testing.assert_allclose(anchors[s], _reference(proto, feeds)[0], rtol=1e-6)


def _mlp():
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 8]), "x")
    w1 = b.addInitializedInputTensor(_rand(8, 16) * 0.3, "w1")
    b1 = b.addInitializedInputTensor(_rand(16), "b1")
    w2 = b.addInitializedInputTensor(_rand(16, 10) * 0.3, "w2")
    b2 = b.addInitializedInputTensor(_rand(10), "b2")
    h = b.aiOnnx.relu([b.aiOnnx.gemm([x, w1, b1])])
    p = b.aiOnnx.softmax([b.aiOnnx.gemm([h, w2, b2])], axis=1)
    b.addOutputTensor(p)
    return b, x, h, p


def test_mlp_inference_matches_reference_and_reports():
    b, x, _h, p = _mlp()
    proto = b.getModelProto()
    feeds = {x: _rand(4, 8)}
    session, anchors = _run(proto, [p], feeds)
    np.testing.assert_allclose(anchors[p], _reference(proto, feeds)[0], rtol=1e-5, atol=1e-6)
    summary = session.getSummaryReport()
    assert "Tiles per IPU:          8" in summary
    assert isinstance(json.loads(session.getExecutionReport()), dict)
    assert isinstance(json.loads(session.getGraphReport()), dict)


def test_batches_per_step_all_and_final_anchors():
    b, x, h, p = _mlp()
    proto = b.getModelProto()
    xs = _rand(3, 4, 8)
    flow = popart.DataFlow(
        3, {p: popart.AnchorReturnType("ALL"), h: popart.AnchorReturnType("FINAL")}
    )
    session = popart.InferenceSession(fnModel=proto, dataFlow=flow, deviceInfo=_device())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    assert anchors[p].shape == (3, 4, 10) and anchors[h].shape == (4, 16)
    session.run(popart.PyStepIO({x: xs}, anchors))
    ref = ReferenceEvaluator(onnx.load_from_string(proto))
    for k in range(3):
        want_p, want_h = ref.run([p, h], {x: xs[k]})
        np.testing.assert_allclose(anchors[p][k], want_p, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(anchors[h], want_h, rtol=1e-5, atol=1e-5)


def test_everyn_anchor():
    b, x, _h, p = _mlp()
    proto = b.getModelProto()
    xs = _rand(4, 4, 8)
    flow = popart.DataFlow(4, {p: popart.AnchorReturnType("EVERYN", 2)})
    session = popart.InferenceSession(fnModel=proto, dataFlow=flow, deviceInfo=_device())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    assert anchors[p].shape == (2, 4, 10)
    session.run(popart.PyStepIO({x: xs}, anchors))
    ref = ReferenceEvaluator(onnx.load_from_string(proto))
    for i, k in enumerate((1, 3)):
        np.testing.assert_allclose(anchors[p][i], ref.run(None, {x: xs[k]})[0], rtol=1e-5)


def test_model_loaded_from_file(tmp_path):
    b, x, _h, p = _mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(onnx.load_from_string(b.getModelProto()), str(path))
    feeds = {x: _rand(4, 8)}
    _, anchors = _run(str(path), [p], feeds, device=popart.DeviceManager().createCpuDevice())
    want = ReferenceEvaluator(str(path)).run(None, feeds)[0]
    np.testing.assert_allclose(anchors[p], want, rtol=1e-5, atol=1e-6)


def test_virtual_graph_recorded_as_attribute():
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2]))
    with b.virtualGraph(0):
        y = b.aiOnnx.relu([x])
    z = b.aiOnnx.exp([y])
    b.virtualGraph(z, 0)
    b.addOutputTensor(z)
    model = onnx.load_from_string(b.getModelProto())
    onnx.checker.check_model(model)
    assert all(a.name == "__ipu_number" and a.i == 0 for n in model.graph.node for a in n.attribute)
    assert b.getVirtualGraph(y) == 0


def test_unknown_op_is_a_clear_error():
    x = onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 2])
    y = onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2, 2])
    node = onnx.helper.make_node("Det", ["x"], ["y"], name="myDet")
    model = onnx.helper.make_model(onnx.helper.make_graph([node], "g", [x], [y]))
    session = popart.InferenceSession(
        fnModel=model.SerializeToString(),
        dataFlow=popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")}),
        deviceInfo=_device(),
    )
    with pytest.raises(popart.popart_exception, match=r"'Det'.*'myDet'.*supported: .*Relu"):
        session.prepareDevice()
    with pytest.raises(AttributeError, match=r"notAnOp.*known: .*relu"):
        _ = popart.Builder().aiOnnx.notAnOp


def test_bad_step_inputs_are_clear_errors():
    b, x, _h, p = _mlp()
    flow = popart.DataFlow(2, {p: popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(b.getModelProto(), flow, _device())
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    with pytest.raises(popart.popart_exception, match=r"'x' has shape \[4, 8\].*\[2, 4, 8\]"):
        session.run(popart.PyStepIO({x: _rand(4, 8)}, anchors))
    with pytest.raises(popart.popart_exception, match="no data for input 'x'"):
        session.run(popart.PyStepIO({}, anchors))
    with pytest.raises(popart.popart_exception, match=r"anchor 'Softmax:0'.*\[2, 4, 10\]"):
        session.run(popart.PyStepIO({x: _rand(2, 4, 8)}, {}))


def test_bad_builder_and_session_arguments():
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [3, 4]))
    w = b.addInitializedInputTensor(_rand(5, 2))
    with pytest.raises(popart.popart_exception, match="MatMul"):
        b.aiOnnx.matmul([x, w])
    with pytest.raises(popart.popart_exception, match="no tensor 'nope'"):
        b.aiOnnx.relu(["nope"])
    with pytest.raises(popart.popart_exception, match="data type 'FLOAT3'"):
        popart.TensorInfo("FLOAT3", [1])
    with pytest.raises(popart.popart_exception, match="does not exist"):
        popart.InferenceSession("/no/such.onnx", popart.DataFlow(1, {}), _device())
    b.addOutputTensor(b.aiOnnx.relu([x]))
    with pytest.raises(popart.popart_exception, match="anchor 'zz'"):
        popart.InferenceSession(
            b.getModelProto(),
            popart.DataFlow(1, {"zz": popart.AnchorReturnType("ALL")}),
            _device(),
        )
    with pytest.raises(popart.popart_exception, match="unknown option"):
        popart.DeviceManager().createIpuModelDevice({"tiles": 4})


def test_session_names_keep_their_import_paths():
    from popart_api import dataflow, session

    for name in ("AnchorReturnType", "DataFlow", "InputShapeInfo", "PyStepIO", "PyWeightsIO"):
        assert getattr(session, name) is getattr(dataflow, name) is getattr(popart, name)
    assert session.InferenceSession is popart.InferenceSession
    assert [n for n in session.__all__ if not hasattr(session, n)] == []
