"""popart_api neural-network ops (Conv, pooling, normalisations): forward values against
ONNX's reference evaluator (numpy where it has no reference), gradients against finite
differences (``popart_harness.check_gradients``) or a float64 numpy derivation."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from codelets_common import read_floats
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from popart_harness import run_session

import popart_api as popart
from popart_api import ops_nn
from popart_api.ops import LoweringContext

RNG = np.random.default_rng(1234)


# ------------------------------------------------------------------ helpers
def _rand(*shape: int, positive: bool = False) -> np.ndarray:
    x = RNG.standard_normal(shape).astype(np.float32)
    return (np.abs(x) + 0.5).astype(np.float32) if positive else x


def _model(
    op_type: str,
    feeds: dict[str, np.ndarray],
    inits: dict[str, np.ndarray] | None = None,
    input_names: list[str] | None = None,
    n_out: int = 1,
    domain: str = "",
    opsets: dict[str, int] | None = None,
    **attrs: object,
) -> tuple[bytes, list[str]]:
    """A one-node model: ``feeds`` become graph inputs, ``inits`` initializers."""
    inits = inits or {}
    names = input_names or [*feeds, *inits]
    outs = [f"y{i}" for i in range(n_out)]
    node = helper.make_node(op_type, names, outs, name="node", domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info(k, TensorProto.FLOAT, v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    versions = {"": 11, **(opsets or {})}
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid(d, v) for d, v in versions.items()]
    )
    return model.SerializeToString(), outs


def _device(tiles: int = 8) -> popart.DeviceInfo:
    return popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": tiles})


def _run(proto: bytes, outs: list[str], feeds: dict[str, np.ndarray]):
    session, got = run_session(proto, feeds, outs)
    return session, [got[o] for o in outs]


def _refused(proto: onnx.ModelProto, match: str) -> str:
    """The message of the error that preparing a session of ``proto`` (output ``y0``
    anchored) raises; it must match ``match``."""
    flow = popart.DataFlow(1, {"y0": popart.AnchorReturnType("ALL")})
    session = popart.InferenceSession(
        fnModel=proto.SerializeToString(), dataFlow=flow, deviceInfo=_device()
    )
    with pytest.raises(popart.popart_exception, match=match) as info:
        session.prepareDevice()
    return str(info.value)


def _reference(proto: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ReferenceEvaluator(onnx.load_from_string(proto)).run(None, feeds)


def _check_forward(proto, outs, feeds, rtol=1e-4, atol=1e-5):
    _, got = _run(proto, outs, feeds)
    want = _reference(proto, feeds)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return got


# ------------------------------------------------------------------ Conv forward
CONV_CASES = [
    # (x shape, w shape, attrs, bias)
    ((2, 3, 8, 8), (4, 3, 3, 3), {}, True),
    ((1, 2, 8, 8), (3, 2, 3, 3), {"pads": [1, 1, 1, 1]}, False),
    ((1, 2, 8, 8), (2, 2, 3, 3), {"strides": [2, 2], "pads": [1, 0, 0, 1]}, True),
    ((1, 2, 8, 7), (2, 2, 2, 3), {"dilations": [2, 1]}, False),
    ((1, 4, 8, 8), (4, 2, 3, 3), {"group": 2, "pads": [1, 1, 1, 1]}, True),
    ((1, 4, 6, 6), (4, 1, 3, 3), {"group": 4}, False),  # depthwise
    ((1, 2, 7, 7), (3, 2, 3, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 2]}, False),
    ((1, 2, 8, 8), (3, 2, 2, 2), {"auto_pad": "SAME_LOWER"}, True),
    ((1, 2, 8, 8), (3, 2, 3, 3), {"auto_pad": "VALID", "kernel_shape": [3, 3]}, False),
    ((2, 3, 9), (2, 3, 3), {"strides": [2], "pads": [1, 1]}, True),  # 1-D
    ((1, 2, 4, 4, 4), (2, 2, 2, 2, 2), {"pads": [1, 0, 0, 0, 1, 0]}, True),  # 3-D
]


@pytest.mark.parametrize(("xs", "ws", "attrs", "bias"), CONV_CASES)
def test_conv_matches_reference(xs, ws, attrs, bias):
    feeds = {"x": _rand(*xs)}
    inits = {"w": _rand(*ws)}
    if bias:
        inits["b"] = _rand(ws[0])
    proto, outs = _model("Conv", feeds, inits, **attrs)
    _check_forward(proto, outs, feeds)


@pytest.mark.slow
def test_conv_bigger_matches_reference():
    feeds = {"x": _rand(2, 16, 16, 16)}
    inits = {"w": _rand(32, 16, 3, 3), "b": _rand(32)}
    proto, outs = _model("Conv", feeds, inits, pads=[1, 1, 1, 1], strides=[1, 1])
    _check_forward(proto, outs, feeds, rtol=1e-4, atol=1e-4)


def test_conv_profile_has_cycles_and_memory():
    feeds = {"x": _rand(1, 4, 8, 8)}
    proto, outs = _model("Conv", feeds, {"w": _rand(8, 4, 3, 3)}, pads=[1, 1, 1, 1])
    session, _ = _run(proto, outs, feeds)
    graph = json.loads(session.getGraphReport())
    execution = json.loads(session.getExecutionReport())
    summary = session.getSummaryReport()
    assert summary.strip()
    text = repr(graph)
    assert "Conv" in text or "conv" in text
    cycles = _find_numbers(execution, ("cycles", "totalCycles", "total_cycles"))
    memory = _find_numbers(graph, ("memory", "total", "bytes", "totalMemory"))
    assert max(cycles, default=0) > 0, execution.keys()
    assert max(memory, default=0) > 0, graph.keys()


def _find_numbers(obj: object, keys: tuple[str, ...]) -> list[float]:
    """Every number stored under a key containing one of ``keys`` (case-insensitive)."""
    found: list[float] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(v, int | float) and any(s.lower() in str(k).lower() for s in keys):
                found.append(float(v))
            else:
                found.extend(_find_numbers(v, keys))
    elif isinstance(obj, list):
        for v in obj:
            found.extend(_find_numbers(v, keys))
    return found


@pytest.mark.parametrize("training", [False, True])
def test_conv_passes_session_and_node_options_to_poplin(monkeypatch, training):
    """``setAvailableMemoryProportion`` and ``SessionOptions.convolutionOptions`` reach
    every ``poplin.convolution`` of the node (forward, backward-data and weight-update
    passes), each with its pass."""
    from poplar_api import poplin

    seen: list[dict] = []
    real = poplin.convolution

    def spy(*args, **kwargs):
        seen.append(dict(args[7] if len(args) > 7 else kwargs.get("options") or {}))
        return real(*args, **kwargs)

    calls: list[dict] = []
    real_wu = poplin.calculateWeightDeltas

    def spy_wu(*args, **kwargs):
        calls.append(dict(args[6] if len(args) > 6 else kwargs.get("options") or {}))
        return real_wu(*args, **kwargs)

    monkeypatch.setattr(poplin, "convolution", spy)
    monkeypatch.setattr(poplin, "calculateWeightDeltas", spy_wu)
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [1, 2, 8, 8]))
    w = b.addInitializedInputTensor(_rand(3, 2, 3, 3))
    y = b.aiOnnx.conv([x, w], pads=[1, 1, 1, 1])
    b.setAvailableMemoryProportion(y, 0.3)
    opts = popart.SessionOptions()
    opts.convolutionOptions = {"partialsType": "float"}
    anchors = {y: popart.AnchorReturnType("ALL")}
    if training:
        loss = b.aiGraphcore.l1loss([y], 1.0)
        b.addOutputTensor(loss)
        anchors[popart.reservedGradientPrefix() + x] = popart.AnchorReturnType("ALL")
        session = popart.TrainingSession(
            fnModel=b.getModelProto(), dataFlow=popart.DataFlow(1, anchors),
            deviceInfo=_device(), loss=loss, optimizer=popart.ConstSGD(0.01), userOptions=opts,
        )  # fmt: skip
    else:
        b.addOutputTensor(y)
        session = popart.InferenceSession(
            fnModel=b.getModelProto(), dataFlow=popart.DataFlow(1, anchors),
            deviceInfo=_device(), userOptions=opts,
        )  # fmt: skip
    session.prepareDevice()
    every = seen + calls
    passes = sorted(o["pass"] for o in every)
    want = ["TRAINING_BWD", "TRAINING_FWD", "TRAINING_WU"] if training else ["INFERENCE_FWD"]
    assert passes == want
    for o in every:
        assert float(o["availableMemoryProportion"]) == pytest.approx(0.3)
        assert o["partialsType"] == "float"


@pytest.mark.parametrize(
    ("xs", "ws", "attrs", "match"),
    [
        ((1, 3, 8, 8), (4, 2, 3, 3), {}, "input channels per group"),
        ((1, 4, 8, 8), (4, 2, 3, 3), {"group": 3}, "group=3"),
        ((1, 2, 8, 8), (4, 2, 3, 3), {"auto_pad": "SAME"}, "auto_pad 'SAME'"),
        ((1, 2, 8, 8), (4, 2, 3), {}, "same rank"),
        ((1, 2, 8, 8), (4, 2, 3, 3), {"kernel_shape": [2, 2]}, "kernel_shape"),
        ((1, 2, 8, 8), (4, 2, 3, 3), {"pads": [1, 1]}, "'pads'"),
    ],
)
def test_conv_errors_name_the_problem(xs, ws, attrs, match):
    inits = {"w": _rand(*ws)}
    node = helper.make_node("Conv", ["x", "w"], ["y0"], name="node", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, xs)],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(inits["w"], "w")],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    assert "node" in _refused(proto, match)


# ------------------------------------------------------------------ pooling forward
POOL_CASES = [
    ("MaxPool", (2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("MaxPool", (1, 2, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    ("MaxPool", (1, 2, 8, 8), {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [0, 1, 1, 0]}),
    (
        "MaxPool",
        (1, 2, 7, 7),
        {"kernel_shape": [2, 2], "auto_pad": "SAME_UPPER", "strides": [2, 2]},
    ),
    ("MaxPool", (2, 3, 9), {"kernel_shape": [3], "strides": [2]}),
    ("MaxPool", (1, 2, 4, 4, 4), {"kernel_shape": [2, 2, 2], "strides": [2, 2, 2]}),
    ("AveragePool", (2, 3, 8, 8), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("AveragePool", (1, 2, 7, 7), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    (
        "AveragePool",
        (1, 2, 7, 7),
        {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
    ),
    (
        "AveragePool",
        (1, 2, 8, 8),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 0, 1], "count_include_pad": 1},
    ),
    ("AveragePool", (1, 2, 7, 7), {"kernel_shape": [2, 2], "auto_pad": "SAME_LOWER"}),
    ("AveragePool", (2, 3, 9), {"kernel_shape": [3], "strides": [3]}),
    ("GlobalAveragePool", (2, 3, 5, 4), {}),
    ("GlobalMaxPool", (2, 3, 5, 4), {}),
    ("GlobalAveragePool", (2, 3, 6), {}),
]


@pytest.mark.parametrize(("op", "xs", "attrs"), POOL_CASES)
def test_pool_matches_reference(op, xs, attrs):
    feeds = {"x": _rand(*xs)}
    proto, outs = _model(op, feeds, **attrs)
    _check_forward(proto, outs, feeds)


def _torch_like_pool(x, kernel, stride, pads, kind, include_pad, ceil):
    """numpy 2-D pooling with PyTorch's ceil_mode rule (windows start inside the
    padded-at-start input; elements past the end padding are not counted)."""
    n, c, h, w = x.shape
    outs = []
    for d, size in enumerate((h, w)):
        span = size + pads[d] + pads[d + 2] - kernel[d]
        o = -(-span // stride[d]) + 1 if ceil else span // stride[d] + 1
        if ceil and (o - 1) * stride[d] >= size + pads[d]:
            o -= 1
        outs.append(o)
    y = np.zeros((n, c, *outs))
    for i in range(outs[0]):
        for j in range(outs[1]):
            r0, c0 = i * stride[0] - pads[0], j * stride[1] - pads[1]
            r1, c1 = r0 + kernel[0], c0 + kernel[1]
            win = x[:, :, max(r0, 0) : min(r1, h), max(c0, 0) : min(c1, w)].astype(np.float64)
            if kind == "max":
                y[:, :, i, j] = win.max(axis=(2, 3))
            else:
                cnt = (min(r1, h + pads[2]) - r0) * (min(c1, w + pads[3]) - c0)
                cnt = cnt if include_pad else win.shape[2] * win.shape[3]
                y[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
    return y


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("MaxPool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ("MaxPool", {"kernel_shape": [2, 2], "strides": [2, 2], "pads": [1, 1, 0, 0],
                     "ceil_mode": 1}),
        ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "ceil_mode": 1}),
        ("AveragePool", {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1],
                         "ceil_mode": 1}),
        (
            "AveragePool",
            {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": 1,
             "count_include_pad": 1},
        ),
    ],
)  # fmt: skip
def test_pool_ceil_mode_matches_numpy(op, attrs):
    x = _rand(1, 2, 8, 8)
    proto, outs = _model(op, {"x": x}, opsets={"": 12}, **attrs)
    _, (got,) = _run(proto, outs, {"x": x})
    want = _torch_like_pool(
        x, attrs["kernel_shape"], attrs["strides"], attrs.get("pads", [0] * 4),
        "max" if op == "MaxPool" else "avg", attrs.get("count_include_pad", 0), True,
    )  # fmt: skip
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "attrs", "match"),
    [
        ("MaxPool", {"kernel_shape": [2, 2], "dilations": [0, 2]}, "dilations"),
        ("MaxPool", {"strides": [2, 2]}, "kernel_shape"),
        ("AveragePool", {"kernel_shape": [2, 2], "auto_pad": "BAD"}, "auto_pad"),
        ("MaxPool", {"kernel_shape": [2, 2], "storage_order": 1}, "storage_order"),
    ],
)
def test_pool_errors_name_the_problem(op, attrs, match):
    node = helper.make_node(op, ["x"], ["y0"], name="node", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, (1, 2, 8, 8))],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    _refused(proto, match)


# ------------------------------------------------------------------ normalisation forward
@pytest.mark.parametrize("xs", [(2, 3, 4, 4), (4, 3), (2, 3, 5)])
@pytest.mark.parametrize("opset", [11, 15])
def test_batchnorm_inference_matches_reference(xs, opset):
    """Opset 15 (training_mode 0) against the reference evaluator; opset 11 against
    numpy (the evaluator's opset-9 kernel mixes batch statistics into inference)."""
    c = xs[1]
    feeds = {"x": _rand(*xs)}
    inits = {
        "scale": _rand(c),
        "b": _rand(c),
        "mean": _rand(c),
        "var": _rand(c, positive=True),
    }
    proto, outs = _model("BatchNormalization", feeds, inits, opsets={"": opset}, epsilon=1e-3)
    if opset >= 14:
        _check_forward(proto, outs, feeds)
        return
    _, (got,) = _run(proto, outs, feeds)
    shape = [1, c] + [1] * (len(xs) - 2)
    want = (feeds["x"] - inits["mean"].reshape(shape)) / np.sqrt(
        inits["var"].reshape(shape).astype(np.float64) + 1e-3
    ) * inits["scale"].reshape(shape) + inits["b"].reshape(shape)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    ("op", "shapes", "attrs", "opset", "domain", "match"),
    [
        ("BatchNormalization", [(2, 3, 4), (4,), (3,), (3,), (3,)], {}, 11, "", "scale"),
        ("BatchNormalization", [(2, 3, 4), (3,), (3,), (3,), (3,)], {"spatial": 0}, 7, "",
         "spatial"),
        ("LayerNormalization", [(2, 3), (3,)], {"axis": 2}, 17, "", "axis 2"),
        ("LayerNormalization", [(2, 3), (2,)], {}, 17, "", "normalised shape"),
        ("GroupNormalization", [(2, 6, 2), (6,), (6,)], {"num_groups": 4}, 1, "ai.graphcore",
         "num_groups=4"),
    ],
)  # fmt: skip
def test_norm_errors_name_the_problem(op, shapes, attrs, opset, domain, match):
    names = [f"i{k}" for k in range(len(shapes))]
    node = helper.make_node(op, names, ["y0"], name="node", domain=domain, **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
            for n, s in zip(names, shapes, strict=True)
        ],
        [helper.make_tensor_value_info("y0", TensorProto.FLOAT, None)],
    )
    imports = [helper.make_opsetid("", 17 if domain else opset)]
    if domain:
        imports.append(helper.make_opsetid(domain, opset))
    proto = helper.make_model(graph, opset_imports=imports)
    assert "node 'node'" in _refused(proto, match)


def _bn_train_numpy(x, scale, b, mean, var, eps, momentum):
    x = x.astype(np.float64)
    dims = (0, *range(2, x.ndim))
    shape = [1, x.shape[1]] + [1] * (x.ndim - 2)
    mu = x.mean(dims)
    v = x.var(dims)
    y = (x - mu.reshape(shape)) / np.sqrt(v.reshape(shape) + eps)
    y = y * scale.reshape(shape) + b.reshape(shape)
    return y, momentum * mean + (1 - momentum) * mu, momentum * var + (1 - momentum) * v, mu, v


@pytest.mark.parametrize(("opset", "n_out"), [(11, 5), (15, 3)])
def test_batchnorm_training_forward_and_running_stats(opset, n_out, monkeypatch):
    """Batch statistics and running statistics; the running statistics are written back
    into the mean/var weights (a second step starts from them)."""
    c = 3
    x = _rand(4, c, 3, 3)
    w = {"scale": _rand(c), "b": _rand(c), "mean": _rand(c), "var": _rand(c, positive=True)}
    attrs = {"epsilon": 1e-4, "momentum": 0.8}
    if opset >= 14:
        attrs["training_mode"] = 1
    proto, outs = _model(
        "BatchNormalization", {"x": x}, w, n_out=n_out, opsets={"": opset}, **attrs
    )
    # An InferenceSession lowers with training=False; make this op see a training
    # context (as a TrainingSession's lowering does) to check its training forward.
    monkeypatch.setattr(ops_nn, "context", lambda: LoweringContext(training=True))
    flow = popart.DataFlow(2, {o: popart.AnchorReturnType("ALL") for o in outs})
    session = popart.InferenceSession(fnModel=proto, dataFlow=flow, deviceInfo=_device())
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    x2 = _rand(4, c, 3, 3)
    session.run(popart.PyStepIO({"x": np.stack([x, x2])}, anchors))
    mean, var = w["mean"].astype(np.float64), w["var"].astype(np.float64)
    for step, xs in enumerate((x, x2)):
        want = _bn_train_numpy(xs, w["scale"], w["b"], mean, var, 1e-4, 0.8)
        for i, o in enumerate(outs):
            np.testing.assert_allclose(anchors[o][step], want[i], rtol=1e-4, atol=1e-5)
        mean, var = want[1], want[2]
    if opset >= 14:  # the reference evaluator implements opset 14+ training mode
        ref = _reference(proto, {"x": x})
        np.testing.assert_allclose(anchors[outs[0]][0], ref[0], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("xs", "axis", "bias"), [((3, 8), -1, True), ((2, 3, 4), 1, True), ((2, 3, 4), -1, False)]
)
def test_layernorm_matches_reference(xs, axis, bias):
    feeds = {"x": _rand(*xs)}
    norm = xs[axis % len(xs) :]
    inits = {"scale": _rand(*norm)}
    if bias:
        inits["b"] = _rand(*norm)
    proto, outs = _model(
        "LayerNormalization", feeds, inits, n_out=3, opsets={"": 17}, axis=axis, epsilon=1e-4
    )
    _check_forward(proto, outs, feeds)


def _groupnorm_numpy(x, scale, bias, groups, eps):
    n, c = x.shape[:2]
    xg = x.astype(np.float64).reshape(n, groups, -1)
    mu = xg.mean(2, keepdims=True)
    inv = 1 / np.sqrt(xg.var(2, keepdims=True) + eps)
    shape = [1, c] + [1] * (x.ndim - 2)
    y = ((xg - mu) * inv).reshape(x.shape) * scale.reshape(shape) + bias.reshape(shape)
    return y, mu.reshape(-1), inv.reshape(-1)


@pytest.mark.parametrize(("xs", "groups"), [((2, 4, 3, 3), 2), ((2, 6, 5), 3), ((1, 4, 2, 2), 4)])
def test_graphcore_groupnorm_matches_numpy(xs, groups):
    x = _rand(*xs)
    w = {"scale": _rand(xs[1]), "b": _rand(xs[1])}
    proto, outs = _model(
        "GroupNormalization", {"x": x}, w, n_out=3, domain="ai.graphcore",
        opsets={"ai.graphcore": 1}, num_groups=groups, epsilon=1e-4,
    )  # fmt: skip
    _, got = _run(proto, outs, {"x": x})
    want = _groupnorm_numpy(x, w["scale"], w["b"], groups, 1e-4)
    for g, wv in zip(got, want, strict=True):
        np.testing.assert_allclose(g, wv, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("opset", "per_group"), [(18, True), (21, False)])
def test_onnx_groupnorm_matches_reference(opset, per_group):
    x = _rand(2, 4, 3, 3)
    n = 2 if per_group else 4
    w = {"scale": _rand(n), "b": _rand(n)}
    proto, outs = _model(
        "GroupNormalization", {"x": x}, w, opsets={"": opset}, num_groups=2, epsilon=1e-4
    )
    _check_forward(proto, outs, {"x": x})


# ------------------------------------------------------------------ gradients
def _harness():
    return pytest.importorskip("popart_harness", reason="tests/popart_harness.py not there yet")


def _first(out: object) -> str:
    """The first output id of a Builder op (multi-output ops return a list)."""
    return out[0] if isinstance(out, list | tuple) else out


def _conv_build(attrs: dict):
    return lambda b, ids: b.aiOnnx.conv(list(ids), **attrs)


GRAD_CONV_CASES = [
    ([(2, 3, 6, 6), (4, 3, 3, 3), (4,)], {}),
    ([(1, 2, 7, 7), (2, 2, 3, 3)], {"strides": [2, 2], "pads": [1, 0, 0, 1]}),
    ([(1, 4, 6, 6), (4, 2, 2, 3), (4,)], {"group": 2, "dilations": [2, 1], "pads": [1, 1, 1, 1]}),
    ([(1, 2, 7, 7), (3, 2, 3, 3)], {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ([(2, 3, 9), (2, 3, 3), (2,)], {"strides": [2], "pads": [1, 1]}),
    ([(1, 2, 4, 5, 3), (2, 2, 2, 2, 2)], {"strides": [1, 2, 1]}),
]


@pytest.mark.parametrize(("shapes", "attrs"), GRAD_CONV_CASES)
def test_conv_gradients(shapes, attrs):
    _harness().check_gradients(_conv_build(attrs), [_rand(*s) for s in shapes])


GRAD_POOL_CASES = [
    ("maxpool", (2, 3, 6, 6), {"kernel_shape": [2, 2], "strides": [2, 2]}),
    ("maxpool", (1, 2, 7, 7), {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    ("averagepool", (1, 2, 5, 5), {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1]}),
    (
        "averagepool",
        (1, 2, 6, 6),
        {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 0, 0, 1], "count_include_pad": 1},
    ),
    ("averagepool", (2, 2, 9), {"kernel_shape": [3], "strides": [2]}),
    ("globalaveragepool", (2, 3, 4, 4), {}),
    ("globalmaxpool", (2, 3, 4, 4), {}),
]


@pytest.mark.parametrize(("method", "shape", "attrs"), GRAD_POOL_CASES)
def test_pool_gradients(method, shape, attrs):
    def build(b, ids):
        return _first(getattr(b.aiOnnx, method)(list(ids), **attrs))

    # distinct values 0.01 apart: finite differences (eps 1e-3) never swap a maximum
    size = int(np.prod(shape))
    x = ((RNG.permutation(size) - size / 2) * 0.01).astype(np.float32).reshape(shape)
    _harness().check_gradients(build, [x])


@pytest.mark.parametrize(("shape", "axis"), [((3, 6), -1), ((2, 3, 4), 1)])
def test_layernorm_gradients(shape, axis):
    norm = shape[axis % len(shape) :]

    def build(b, ids):
        out = b.aiOnnx.layernormalization(list(ids), axis=axis, epsilon=1e-3)
        return _first(out)

    arrays = [_rand(*shape), _rand(*norm), _rand(*norm)]
    _harness().check_gradients(build, arrays, opsets={"ai.onnx": 17})


def test_batchnorm_training_gradients():
    """Opset 15 ``training_mode=1``: the reference evaluator normalises with the batch
    statistics, so its finite differences are the training-mode derivative."""
    c = 3
    arrays = [_rand(2, c, 3, 3), _rand(c), _rand(c)]
    stats = {"mean": _rand(c), "var": _rand(c, positive=True)}

    def build(b, ids):
        mean = b.aiOnnx.constant(stats["mean"])
        var = b.aiOnnx.constant(stats["var"])
        out = b.aiOnnx.batchnormalization(
            [*ids, mean, var], num_outputs=3, epsilon=1e-3, training_mode=1
        )
        return _first(out)

    _harness().check_gradients(build, arrays, opsets={"ai.onnx": 15})


# ----------------------------------------------- gradients without a session
def _direct(op, attrs, arrays, dy, *, opset=11, domain="ai.onnx", training=True):
    """Lower ``op`` and its gradient function straight onto a poplar_api graph (no
    session); return ``(forward outputs, input gradients)`` for output gradient ``dy``."""
    from popart_api.autodiff import GRAD_REGISTRY, GradContext
    from popart_api.ops import lookup, lowering_context
    from poplar_api import FLOAT, Engine, Graph, IPUModel
    from poplar_api import program as pprog
    from poplar_api.poputil import mapTensorLinearly

    model = IPUModel("ipu2")
    model.tilesPerIPU = 8
    device = model.createDevice()
    graph = Graph(device.getTarget())
    seq = pprog.Sequence()
    ins = []
    for i, a in enumerate(arrays):
        t = graph.addVariable(FLOAT, list(a.shape), f"in{i}")
        mapTensorLinearly(graph, t)
        graph.createHostWrite(f"in{i}", t)
        ins.append(t)
    with lowering_context(LoweringContext(training=training)):
        outs = lookup(domain, op, opset, "node")(graph, list(ins), dict(attrs), seq, "node")
        g = graph.addVariable(FLOAT, list(dy.shape), "dy")
        mapTensorLinearly(graph, g)
        graph.createHostWrite("dy", g)
        ctx = GradContext(
            graph=graph, prog=seq, name="node/grad", op_type=op, attrs=dict(attrs), opset=opset,
            inputs=ins, outputs=outs, grad_outputs=[g], wanted=[True] * len(ins),
        )  # fmt: skip
        grads = GRAD_REGISTRY[(domain, op)](ctx)
    reads = {f"out{i}": o for i, o in enumerate(outs)}
    reads.update({f"grad{i}": t for i, t in enumerate(grads) if t is not None})
    for k, t in reads.items():
        graph.createHostRead(k, t)
    engine = Engine(graph, [seq])
    engine.load(device)
    for i, a in enumerate(arrays):
        engine.writeTensor(f"in{i}", a)
    engine.writeTensor("dy", dy)
    engine.run(0)
    values = read_floats(engine, reads)
    n_out = len(outs)
    return [values[f"out{i}"] for i in range(n_out)], [
        values.get(f"grad{i}") for i in range(len(grads))
    ]


def _numeric_grad(fn, arrays, k, r, eps=1e-4):
    """Central differences of ``sum(fn(arrays) * r)`` with respect to ``arrays[k]``."""
    base = [a.astype(np.float64) for a in arrays]
    out = np.zeros(base[k].shape)
    for idx in np.ndindex(out.shape):
        plus = [a.copy() for a in base]
        minus = [a.copy() for a in base]
        plus[k][idx] += eps
        minus[k][idx] -= eps
        out[idx] = ((fn(plus) - fn(minus)) * r).sum() / (2 * eps)
    return out


@pytest.mark.parametrize("shape", [(4, 3, 2, 2), (5, 2)])
def test_batchnorm_training_gradients_match_numpy(shape):
    """PopART-style 5-output training BatchNormalization: Y's gradients with respect to
    X, scale and B against finite differences of a float64 numpy batch norm."""
    c = shape[1]
    arrays = [_rand(*shape), _rand(c), _rand(c), _rand(c), _rand(c, positive=True)]
    dy = _rand(*shape)
    outs, grads = _direct("BatchNormalization", {"epsilon": 1e-3}, arrays, dy)

    def forward(a):
        return _bn_train_numpy(a[0], a[1], a[2], a[3], a[4], 1e-3, 0.9)[0]

    np.testing.assert_allclose(outs[0], forward(arrays), rtol=1e-4, atol=1e-5)
    for k in range(3):
        want = _numeric_grad(forward, arrays, k, dy)
        np.testing.assert_allclose(grads[k], want, rtol=2e-3, atol=2e-4, err_msg=f"input {k}")
    assert grads[3] is None and grads[4] is None


def test_graphcore_groupnorm_gradients_match_numpy():
    x = _rand(2, 4, 3, 3)
    arrays = [x, _rand(4), _rand(4)]
    dy = _rand(*x.shape)
    attrs = {"num_groups": 2, "epsilon": 1e-3}
    outs, grads = _direct("GroupNormalization", attrs, arrays, dy, domain="ai.graphcore", opset=1)

    def forward(a):
        return _groupnorm_numpy(a[0], a[1], a[2], 2, 1e-3)[0]

    np.testing.assert_allclose(outs[0], forward(arrays), rtol=1e-4, atol=1e-5)
    for k in range(3):
        want = _numeric_grad(forward, arrays, k, dy)
        np.testing.assert_allclose(grads[k], want, rtol=2e-3, atol=2e-4, err_msg=f"input {k}")


def test_batchnorm_in_training_session_updates_running_stats():
    """In a TrainingSession BatchNormalization normalises with the batch statistics and
    writes the running mean/var back into its mean/var weights (the optimizer leaves
    them alone: they have no gradient)."""
    c, momentum, lr = 3, 0.8, 0.01
    # Drawn here, not from the module's generator: under xdist the draws of RNG depend on
    # which tests ran before in the worker, and a channel whose outputs all have one sign
    # has a scale gradient of exactly zero (its normalised inputs sum to zero).
    rng = np.random.default_rng(20261201)
    x = rng.standard_normal((4, c, 2, 2)).astype(np.float32)
    w = {k: rng.standard_normal(c).astype(np.float32) for k in ("scale", "b", "mean")}
    w["var"] = (np.abs(rng.standard_normal(c)) + 0.5).astype(np.float32)
    w["b"] *= np.float32(0.1)  # outputs of both signs in every channel
    b = popart.Builder()
    xid = b.addInputTensor(popart.TensorInfo("FLOAT", list(x.shape)))
    wid = {k: b.addInitializedInputTensor(v) for k, v in w.items()}
    (y,) = b.aiOnnx.batchnormalization(
        [xid, wid["scale"], wid["b"], wid["mean"], wid["var"]],
        num_outputs=1,
        epsilon=1e-4,
        momentum=momentum,
    )
    loss = b.aiGraphcore.l1loss([y], 1.0)
    b.addOutputTensor(loss)
    flow = popart.DataFlow(1, {y: popart.AnchorReturnType("ALL")})
    session = popart.TrainingSession(
        fnModel=b.getModelProto(), dataFlow=flow, deviceInfo=_device(), loss=loss,
        optimizer=popart.ConstSGD(lr),
    )  # fmt: skip
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO({xid: x}, anchors))
    want = _bn_train_numpy(x, w["scale"], w["b"], w["mean"], w["var"], 1e-4, momentum)
    dims, shape = (0, 2, 3), (1, c, 1, 1)
    xhat = (x - want[3].reshape(shape)) / np.sqrt(want[4].reshape(shape) + 1e-4)
    sign = np.sign(want[0])  # d|y|/dy of the mean L1 loss, times its element count
    d_scale = (sign * xhat).sum(dims) / x.size
    d_b = sign.sum(dims) / x.size
    assert np.all(np.abs(d_scale) > 1e-3), d_scale  # the data trains every channel
    np.testing.assert_allclose(anchors[y], want[0], rtol=1e-4, atol=1e-5)
    session.weightsToHost()
    out = {wid[k]: np.zeros(c, np.float32) for k in w}
    session.readWeights(popart.PyWeightsIO(out))
    np.testing.assert_allclose(out[wid["mean"]], want[1], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[wid["var"]], want[2], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[wid["scale"]], w["scale"] - lr * d_scale, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out[wid["b"]], w["b"] - lr * d_b, rtol=1e-5, atol=1e-6)


def _reference_fn(op_type: str, attrs: dict, n_in: int, opset: int):
    """``arrays -> output 0`` of a one-node model by the reference evaluator (float64)."""
    names = [f"in{i}" for i in range(n_in)]
    node = helper.make_node(op_type, names, ["y"], **attrs)

    def run(arrays):
        graph = helper.make_graph(
            [node],
            "g",
            [
                helper.make_tensor_value_info(n, TensorProto.DOUBLE, a.shape)
                for n, a in zip(names, arrays, strict=True)
            ],
            [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
        return ReferenceEvaluator(model).run(None, dict(zip(names, arrays, strict=True)))[0]

    return run


@pytest.mark.parametrize(("opset", "per_group"), [(18, True), (21, False)])
def test_onnx_groupnorm_gradients(opset, per_group):
    """ONNX GroupNormalization (the Builder cannot infer its shape, so the lowering and
    gradient run directly) against finite differences: of the reference evaluator for
    opset 21, of numpy for opset 18 (whose reference cannot run in float64)."""
    n = 2 if per_group else 4
    attrs = {"num_groups": 2, "epsilon": 1e-3}
    arrays = [_rand(2, 4, 3, 3), _rand(n), _rand(n)]
    dy = _rand(2, 4, 3, 3)
    outs, grads = _direct("GroupNormalization", attrs, arrays, dy, opset=opset)
    if per_group:

        def ref(a):
            return _groupnorm_numpy(a[0], np.repeat(a[1], 2), np.repeat(a[2], 2), 2, 1e-3)[0]
    else:
        ref = _reference_fn("GroupNormalization", attrs, 3, opset)
    np.testing.assert_allclose(outs[0], ref(arrays), rtol=1e-4, atol=1e-5)
    for k in range(3):
        # opset 21's reference computes in float32 (stash_type): a coarser step
        want = _numeric_grad(ref, arrays, k, dy, eps=1e-4 if per_group else 1e-2)
        np.testing.assert_allclose(grads[k], want, rtol=2e-3, atol=5e-4, err_msg=f"input {k}")
