"""PopART API items scripts call: PyStepIOCallback, ``with device:``,
tryAcquireAvailableDevice, getLogger, getReport, setRandomSeed, the opset check and the
Nll loss's clamped log (values computed independently)."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from popart_harness import relu_model, run_session

import popart_api as popart


def _relu_session(batches: int = 2):
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    y = b.aiOnnx.relu([x])
    b.addOutputTensor(y)
    s = popart.InferenceSession(
        fnModel=b.getModelProto(),
        dataFlow=popart.DataFlow(batches, {y: popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
    )
    s.prepareDevice()
    return s, x, y


def test_pystepio_callback_feeds_and_collects_each_batch() -> None:
    s, x, y = _relu_session(batches=3)
    batches = [np.full([2, 3], v, np.float32) for v in (-1.0, 2.0, 3.5)]
    fed, consumed, written, done = [], [], [], []

    def input_callback(tid, prefetch):
        fed.append(tid)
        return batches[len(fed) - 1]

    def output_callback(tid):
        out = np.zeros([2, 3], np.float32)
        written.append(out)
        return out

    s.run(popart.PyStepIOCallback(input_callback, consumed.append, output_callback, done.append))
    assert fed == [x] * 3 and consumed == [x] * 3 and done == [y] * 3
    for got, want in zip(written, batches, strict=True):
        np.testing.assert_array_equal(got, np.maximum(want, 0))


def test_pystepio_callback_wrong_shape_is_named() -> None:
    s, x, _y = _relu_session(batches=1)
    cb = popart.PyStepIOCallback(
        lambda t, p: np.zeros([3], np.float32), lambda t: None, lambda t: None, lambda t: None
    )
    with pytest.raises(popart.popart_exception, match=rf"input '{x}'.*\[3\].*\[2, 3\]"):
        s.run(cb)


def test_with_device_detaches_and_try_acquire() -> None:
    manager = popart.DeviceManager()
    device = manager.tryAcquireAvailableDevice(1)
    assert device is not None and device.isAttached
    with device as d:
        assert d is device
    assert not device.isAttached
    many = [manager.tryAcquireAvailableDevice(1) for _ in range(64)]
    assert any(d is None for d in many)  # the simulated system runs out of IPUs
    for d in many:
        if d is not None:
            d.detach()


def test_get_logger_sets_the_popart_level() -> None:
    logger = popart.getLogger()
    logger.setLevel("DEBUG")
    assert logging.getLogger("popart").level == logging.DEBUG
    logger.setLevel("WARN")
    assert logging.getLogger("popart").level == logging.WARNING
    with pytest.raises(popart.popart_exception, match="LOUD"):
        logger.setLevel("LOUD")


def test_get_report_lists_compute_sets_steps_and_memory() -> None:
    s, x, _y = _relu_session(batches=1)
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO({x: np.ones([2, 3], np.float32)}, anchors))
    report = s.getReport()
    names = [c.name for c in report.compilation.computeSets]
    assert any("Relu" in n for n in names)
    assert len(report.compilation.tiles) == 4
    assert all(t.memory.total > 0 for t in report.compilation.tiles)
    assert report.execution.steps and report.execution.cycles == s.getCycleCount()
    assert report.execution.steps[-1].cyclesTo <= report.execution.cycles


def test_set_random_seed_is_recorded() -> None:
    s, _x, _y = _relu_session(batches=1)
    s.setRandomSeed(1234)
    assert s.options.randomSeed == 1234


def test_opsets_newer_than_onnx_are_refused() -> None:
    model = relu_model(99)
    with pytest.raises(popart.popart_exception, match=r"opset 99 of 'ai\.onnx'"):
        popart.InferenceSession(
            fnModel=model.SerializeToString(),
            dataFlow=popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")}),
            deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
        )


def test_nll_clamps_a_zero_probability() -> None:
    b = popart.Builder()
    p = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "p")
    label = b.addInputTensor(popart.TensorInfo("INT32", [2]), "label")
    loss = b.aiGraphcore.nllloss([p, label], reduction=popart.ReductionType.NoReduction)
    probs = np.array([[0.0, 0.5, 0.5], [0.2, 0.3, 0.5]], np.float32)
    feeds = {p: probs, label: np.array([0, 2], np.int32)}
    _, anchors = run_session(b.getModelProto(), feeds, [loss], tiles=4)
    np.testing.assert_allclose(anchors[loss], [-np.log(1e-7), -np.log(0.5)], rtol=1e-5)


def test_init_anchor_arrays_before_prepare_device() -> None:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    y = b.aiOnnx.reducesum([x], axes=[1], keepdims=0)
    i = b.aiOnnx.argmax([x], axis=1, keepdims=0)
    b.addOutputTensor(y)
    b.addOutputTensor(i)
    s = popart.InferenceSession(
        fnModel=b.getModelProto(),
        dataFlow=popart.DataFlow(
            4, {y: popart.AnchorReturnType("ALL"), i: popart.AnchorReturnType("FINAL")}
        ),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
    )
    early = s.initAnchorArrays()
    s.prepareDevice()
    late = s.initAnchorArrays()
    assert early[y].shape == late[y].shape == (4, 2)
    assert early[i].shape == late[i].shape == (2,)
    assert early[i].dtype == late[i].dtype == np.int32
    data = np.arange(24, dtype=np.float32).reshape(4, 2, 3)
    s.run(popart.PyStepIO({x: data}, early))
    np.testing.assert_allclose(early[y], data.sum(axis=2))


def test_inputs_are_checked_by_element_count_as_popart_does() -> None:
    s, x, y = _relu_session(batches=2)
    anchors = s.initAnchorArrays()
    data = np.arange(-6, 6, dtype=np.float32)
    s.run(popart.PyStepIO({x: data.reshape(2, 6)}, anchors))  # [batches, 2*3]
    np.testing.assert_array_equal(anchors[y], np.maximum(data, 0).reshape(2, 2, 3))
    with pytest.raises(popart.popart_exception, match=r"input '.*' has shape \[2, 5\]"):
        s.run(popart.PyStepIO({x: np.zeros([2, 5], np.float32)}, anchors))


def _built(op) -> tuple[np.ndarray, np.ndarray]:
    """``op(builder, x)`` on a [1, 1, 4, 4] input run once: (input, output)."""
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [1, 1, 4, 4]), "x")
    y = op(b, x)
    y = y[0] if isinstance(y, list) else y
    b.addOutputTensor(y)
    data = (np.arange(16, dtype=np.float32) - 6).reshape(1, 1, 4, 4)
    _, out = run_session(b.getModelProto(), {x: data}, [y])
    return data, out[y]


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        # PopART's order: num_outputs, required attributes, optional ones by name
        (lambda b, x: b.aiOnnx.concat([x, x], 3), lambda d: np.concatenate([d, d], 3)),
        (lambda b, x: b.aiOnnx.transpose([x], [0, 1, 3, 2]), lambda d: d.transpose(0, 1, 3, 2)),
        (lambda b, x: b.aiOnnx.leakyrelu([x], 0.5), lambda d: np.where(d < 0, d / 2, d)),
        (lambda b, x: b.aiOnnx.cast([x], "INT32"), lambda d: d.astype(np.int32)),
        (
            lambda b, x: b.aiOnnx.maxpool([x], 1, [2, 2], 0, [1, 1], [0, 0, 0, 0], 0, [2, 2]),
            lambda d: d.reshape(2, 2, 2, 2).max(axis=(1, 3)).reshape(1, 1, 2, 2),
        ),
    ],
)
def test_attributes_given_by_position_as_popart_takes_them(op, expected) -> None:
    # They were taken as num_outputs (concat([x, x], 0): "num_outputs 0 must be an int
    # >= 1") or as the debug context (cast([x], "INT32"): "attribute to not specified").
    data, out = _built(op)
    np.testing.assert_array_equal(out, expected(data))


def test_positional_attributes_that_do_not_fit_are_named() -> None:
    with pytest.raises(popart.popart_exception, match=r"Relu: 1 attribute value\(s\) given"):
        _built(lambda b, x: b.aiOnnx.relu([x], 3))
    with pytest.raises(popart.popart_exception, match="'axis' is given both by position"):
        _built(lambda b, x: b.aiOnnx.softmax([x], 1, axis=1))
    with pytest.raises(popart.popart_exception, match="'to' type 'FLOATY' is not a data type"):
        _built(lambda b, x: b.aiOnnx.cast([x], to="FLOATY"))


def test_name_scopes_prefix_the_nodes_added_inside() -> None:
    # Builder had no nameScope: PopART scripts' `with builder.nameScope(...)` failed.
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    with b.nameScope("layer1"):
        with b.nameScope("inner"):
            y = b.aiOnnx.relu([x])
        z = b.aiOnnx.neg([y])
    out = b.aiOnnx.abs([z])
    assert (y, z, out) == ("layer1/inner/Relu:0", "layer1/Neg:0", "Abs:0")
    data = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    _, values = run_session(b.getModelProto(), {x: data}, [out])
    np.testing.assert_array_equal(values[out], np.maximum(data, 0))
    refused = pytest.raises(popart.popart_exception, match="nameScope: '' must be a non-empty")
    with refused, b.nameScope(""):
        pass


@pytest.mark.parametrize("shape", [[2.5], "23", [2, True], 3])
def test_a_tensor_info_shape_that_is_not_ints_is_refused(shape) -> None:
    # [2.5] was read as [2] and "23" as [2, 3].
    with pytest.raises(popart.popart_exception, match="must be a list of ints"):
        popart.TensorInfo("FLOAT", shape)
    assert popart.TensorInfo("FLOAT", (np.int64(2), 3)).shape() == [2, 3]


@pytest.mark.parametrize(
    ("anchors", "found"),
    [("loss", "anchorTensors 'loss' is a str"), ({3: popart.AnchorReturnType("ALL")}, "anchor 3")],
)
def test_data_flow_anchors_that_are_not_ids_are_refused(anchors, found) -> None:
    # "loss" became the anchors 'l', 'o', 's' (refused later as unknown tensors).
    with pytest.raises(popart.popart_exception, match=found):
        popart.DataFlow(1, anchors)
    assert popart.DataFlow(1, ("a", "b")).anchors() == ["a", "b"]


def test_input_shape_info_takes_a_tensor_info() -> None:
    with pytest.raises(popart.popart_exception, match=r"\[2, 3\] is a list; expected a popart"):
        popart.InputShapeInfo().add("x", [2, 3])


@pytest.mark.parametrize("shape", [[2**40, 2**40], [2**63], [2**32, 2**31, 2]])
def test_a_tensor_info_with_more_elements_than_int64_holds_is_refused(shape) -> None:
    # [2**40, 2**40] was accepted, nelms() 0 (numpy's int64 product wrapped).
    with pytest.raises(popart.popart_exception, match="more than an int64 holds"):
        popart.TensorInfo("FLOAT", shape)
    assert popart.TensorInfo("FLOAT", [2**31, 2**31]).nelms() == 2**62


@pytest.mark.parametrize(
    ("make", "found"),
    [
        (lambda: popart.Adam({"defaultEps": (-1e-8, False)}), "default eps is -1e-08"),
        (lambda: popart.Adam({"defaultEps": (0.0, True)}), "default eps is 0.0"),
        (lambda: popart.SGD({"defaultLearningRate": (-0.1, False)}), "learningRate is -0.1"),
        (lambda: popart.SGD({"defaultMomentum": (-0.5, True)}), "momentum is -0.5"),
        (lambda: popart.SGD({"defaultDampening": (-0.1, True)}), "dampening is -0.1"),
        (lambda: popart.SGD({"defaultWeightDecay": (-1.0, True)}), "weightDecay is -1.0"),
        (
            lambda: popart.SGD({"defaultNesterov": (1.0, True), "defaultDampening": (0.5, True)}),
            "Nesterov momentum with dampening 0.5",
        ),
        (
            lambda: popart.SGD(0.1).insertSpecific("w", {"weightDecay": (-1.0, True)}),
            "weight 'w' weightDecay is -1.0",
        ),
    ],
)
def test_optimizer_values_popart_refuses_are_refused(make, found) -> None:
    # As PopART's SGD/Adam runValueChecks: they were accepted (a negative eps made NaNs).
    with pytest.raises(popart.popart_exception, match=found):
        make()
    popart.SGD({"defaultMomentum": (2.0, True)})  # PopART bounds momentum only below


def _half_matmul(partials: str | None):
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT16", [16, 64]), "x")
    w = b.addInitializedInputTensor(np.ones([64, 32], np.float16), "w")
    y = b.aiOnnx.matmul([x, w])
    if partials is not None:
        b.setPartialsType(y, partials)
    b.addOutputTensor(y)
    session, out = run_session(b.getModelProto(), {x: np.ones([16, 64], np.float16)}, [y])
    return b, y, session.getCycleCount(), out[y]


def test_set_partials_type_reaches_the_matmul_lowering() -> None:
    # Builder had no setPartialsType/getPartialsType (AttributeError).
    b, y, default_cycles, out = _half_matmul(None)
    assert b.getPartialsType(y) == "FLOAT"  # Poplar's default, as PopART's
    _, _, float_cycles, _ = _half_matmul("FLOAT")
    b, y, half_cycles, half_out = _half_matmul("HALF")
    assert b.getPartialsType(y) == "HALF"
    assert float_cycles == default_cycles and half_cycles < float_cycles  # half partials
    np.testing.assert_array_equal(half_out, out)
    with pytest.raises(popart.popart_exception, match="applies to Conv, MatMul only"):
        b.setPartialsType(b.aiOnnx.relu([y]), "HALF")
    with pytest.raises(popart.popart_exception, match="required 'FLOAT' or 'HALF'"):
        b.setPartialsType(y, "DOUBLE")


def test_save_model_proto_and_trainable_ids(tmp_path) -> None:
    # Both raised AttributeError.
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = b.addInitializedInputTensor(np.ones([3, 2], np.float32), "w")
    b.aiOnnx.matmul([x, w])
    assert b.getTrainableTensorIds() == [w]
    b.saveModelProto(str(tmp_path / "m.onnx"))
    assert (tmp_path / "m.onnx").read_bytes() == b.getModelProto()
    with pytest.raises(popart.popart_exception, match=r"saveModelProto.*no/m\.onnx"):
        b.saveModelProto(str(tmp_path / "no" / "m.onnx"))


@pytest.mark.parametrize(
    ("method", "args"),
    [("setSerializeMatMul", ({"y"}, "output_channels", 2)), ("schedulePriority", (1.0,)),
     ("outputTensorLocation", ("y",))],
)  # fmt: skip
def test_builder_options_not_modelled_are_refused_by_name(method, args) -> None:
    # They raised a bare AttributeError.
    with pytest.raises(popart.popart_exception, match=rf"Builder\.{method}: not supported.*hint"):
        getattr(popart.Builder(), method)(*args)
