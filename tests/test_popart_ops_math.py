"""popart_api's elementwise-math, reduction and shape ops (popart_api/ops_tensor.py):
values against ONNX's reference evaluator on random inputs, gradients against central
finite differences of the reference in float64, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from popart_harness import check_forward, check_gradients, device

import popart_api as popart

RNG = np.random.default_rng(5)
OPSET13 = {"ai.onnx": 13, "ai.graphcore": 1}
OPSET18 = {"ai.onnx": 18, "ai.graphcore": 1}
OPSET20 = {"ai.onnx": 20, "ai.graphcore": 1}


def _r(*shape, positive=False, spaced=False):
    if spaced:  # distinct values 0.05 apart: no ties for max/min, no kinks for FD
        n = int(np.prod(shape))
        return (RNG.permutation(n).reshape(shape) * 0.05 - n * 0.025).astype(np.float32)
    x = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.5 if positive else x


def _i64(*values):
    return np.array(values, np.int64)


@pytest.mark.parametrize("op", ["neg", "abs", "erf", "sin", "cos"])
def test_unary_values_and_gradients(op):
    x = _r(3, 4, spaced=True) + np.float32(0.013)
    check_forward(lambda b, ids: getattr(b.aiOnnx, op)(ids), [x], rtol=1e-5, atol=1e-6)
    check_gradients(lambda b, ids: getattr(b.aiOnnx, op)(ids), [x])


def test_reciprocal_floor_ceil():
    x = _r(3, 4, positive=True)
    check_forward(lambda b, ids: b.aiOnnx.reciprocal(ids), [x], rtol=1e-5)
    check_gradients(lambda b, ids: b.aiOnnx.reciprocal(ids), [x])
    y = _r(3, 4) * 3
    check_forward(lambda b, ids: b.aiOnnx.floor(ids), [y])
    check_forward(lambda b, ids: b.aiOnnx.ceil(ids), [y])


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_opset20(approximate):
    x = _r(4, 5)
    check_forward(
        lambda b, ids: b.aiOnnx.gelu(ids, approximate=approximate),
        [x],
        opsets=OPSET20,
        rtol=1e-4,
        atol=1e-5,
    )
    check_gradients(lambda b, ids: b.aiOnnx.gelu(ids, approximate=approximate), [x], opsets=OPSET20)


@pytest.mark.parametrize("shapes", [[(3, 4), (3, 4)], [(2, 3, 4), (4,)]])
def test_pow_values_and_gradients(shapes):
    a = _r(*shapes[0], positive=True)
    b = _r(*shapes[1]) * 0.5
    check_forward(lambda bd, ids: bd.aiOnnx.pow(ids), [a, b], rtol=1e-4)
    check_gradients(lambda bd, ids: bd.aiOnnx.pow(ids), [a, b])


@pytest.mark.parametrize("op", ["max", "min", "sum"])
def test_variadic_values_and_gradients(op):
    xs = [_r(3, 4, spaced=True), _r(3, 4, spaced=True) + 0.01, _r(4, spaced=True) + 0.02]
    check_forward(lambda b, ids: getattr(b.aiOnnx, op)(ids), xs)
    check_gradients(lambda b, ids: getattr(b.aiOnnx, op)(ids), xs)


@pytest.mark.parametrize("op", ["equal", "less", "greater", "lessorequal", "greaterorequal"])
def test_comparisons(op):
    a = np.round(_r(3, 4)).astype(np.float32)
    b = np.round(_r(3, 4)).astype(np.float32)
    opsets = {"ai.onnx": 12, "ai.graphcore": 1}
    check_forward(lambda bd, ids: getattr(bd.aiOnnx, op)(ids), [a, b], opsets=opsets)


def test_where_values_and_gradients():
    x, y = _r(3, 4), _r(3, 4)

    def build(b, ids):
        cond = b.aiOnnx.greater([ids[0], ids[1]])
        return b.aiOnnx.where([cond, ids[0], ids[1]])

    check_forward(build, [x, y])
    check_gradients(build, [x, y])


def test_clip_values_and_gradients():
    x = _r(4, 5, spaced=True) + np.float32(0.013)  # no element on a bound
    lo, hi = np.array(-0.3, np.float32), np.array(0.4, np.float32)
    check_forward(lambda b, ids: b.aiOnnx.clip(ids), [x, lo, hi])

    def build(b, ids):
        return b.aiOnnx.clip([ids[0], b.aiOnnx.constant(lo), b.aiOnnx.constant(hi)])

    check_gradients(build, [x])


def test_cast_values_and_gradient():
    x = _r(3, 4) * 4
    check_forward(lambda b, ids: b.aiOnnx.cast(ids, to=6), [x])  # INT32: truncation
    check_gradients(lambda b, ids: b.aiOnnx.cast(ids, to=1), [x])  # FLOAT -> FLOAT


@pytest.mark.parametrize(
    "op, axes, keepdims",
    [
        ("reducesum", [1], 1),
        ("reducesum", [0, 2], 0),
        ("reducemean", [2], 1),
        ("reducemax", [1], 0),
        ("reducemin", [0, 1], 1),
        ("reducesumsquare", [2], 0),
    ],
)
def test_reductions(op, axes, keepdims):
    x = _r(2, 3, 4, spaced=True)

    def build(b, ids):
        return getattr(b.aiOnnx, op)([ids[0]], axes=axes, keepdims=keepdims)

    check_forward(build, [x], rtol=1e-5, atol=1e-5)
    check_gradients(build, [x])


def test_reduce_axes_as_input_opset18():
    x = _r(2, 3, 4, spaced=True)

    def build(b, ids):
        return b.aiOnnx.reducemax([ids[0], b.aiOnnx.constant(_i64(0, 2))], keepdims=0)

    check_forward(build, [x], opsets=OPSET18)
    check_gradients(build, [x], opsets=OPSET18)


@pytest.mark.parametrize("opsets, axis", [(None, 1), (OPSET13, -1), (OPSET13, 1)])
def test_log_softmax(opsets, axis):
    x = _r(2, 3, 4) if opsets else _r(3, 5)

    def build(b, ids):
        return b.aiOnnx.logsoftmax(ids, axis=axis)

    check_forward(build, [x], opsets=opsets, rtol=1e-5, atol=1e-5)
    check_gradients(build, [x], opsets=opsets)


def test_shape_ops_values_and_gradients():
    x = _r(2, 3, 4)

    def build(b, ids):
        t = b.aiOnnx.flatten([ids[0]], axis=2)  # [6, 4]
        t = b.aiOnnx.unsqueeze([t], axes=[0, 3])  # [1, 6, 4, 1]
        t = b.aiOnnx.squeeze([t], axes=[3])  # [1, 6, 4]
        t = b.aiOnnx.expand([t, b.aiOnnx.constant(_i64(2, 6, 4))])
        return b.aiOnnx.concat(
            [
                t,
                b.aiOnnx.slice(
                    [
                        t,
                        b.aiOnnx.constant(_i64(1)),
                        b.aiOnnx.constant(_i64(3)),
                        b.aiOnnx.constant(_i64(2)),
                    ]
                ),
            ],
            axis=2,
        )

    check_forward(build, [x])
    check_gradients(build, [x])


@pytest.mark.parametrize(
    "starts, ends, axes, steps",
    [
        ([1, 0], [3, 4], [0, 1], [1, 2]),
        ([-1], [-5], [1], [-1]),
        ([4], [0], [1], [-2]),
        ([0, 1], [100, -1], [0, 2], [2, 1]),
    ],
)
def test_slice_steps(starts, ends, axes, steps):
    x = _r(3, 5, 4)

    def build(b, ids):
        c = b.aiOnnx.constant
        return b.aiOnnx.slice(
            [ids[0], c(_i64(*starts)), c(_i64(*ends)), c(_i64(*axes)), c(_i64(*steps))]
        )

    check_forward(build, [x])
    check_gradients(build, [x])


@pytest.mark.parametrize("axis, indices", [(0, [[2, 0], [1, 2]]), (1, [3, -1, 0, 3])])
def test_gather_constant_indices(axis, indices):
    data = _r(3, 4, 2)
    idx = np.array(indices, np.int64)

    def build(b, ids):
        return b.aiOnnx.gather([ids[0], b.aiOnnx.constant(idx)], axis=axis)

    check_forward(build, [data])
    check_gradients(build, [data])


def test_gather_device_indices_embedding():
    """An embedding lookup with indices streamed in (INT32), repeated indices summed in
    the gradient."""
    table = _r(5, 3)
    idx = np.array([[4, 0, 4], [1, -1, 2]], np.int32)
    check_forward(lambda b, ids: b.aiOnnx.gather(ids, axis=0), [table, idx])
    check_gradients(lambda b, ids: b.aiOnnx.gather(ids, axis=0), [table, idx])


def test_shape_folds_on_the_host():
    x = _r(2, 3, 4)

    def build(b, ids):
        s = b.aiOnnx.shape([ids[0]])
        first = b.aiOnnx.gather([s, b.aiOnnx.constant(np.array(0, np.int64))], axis=0)
        new = b.aiOnnx.concat(
            [b.aiOnnx.unsqueeze([first], axes=[0]), b.aiOnnx.constant(_i64(-1))], axis=0
        )
        return b.aiOnnx.reshape([ids[0], new])

    out = check_forward(build, [x])
    assert out.shape == (2, 12)


def test_dropout_inference_and_training():
    """Inference: identity. Training: kept elements scaled by 1/(1-ratio), a fraction
    near 1-ratio kept, and the gradient is the output gradient through the same mask."""
    x = np.abs(_r(64, 32)) + 1.0
    check_forward(lambda b, ids: b.aiOnnx.dropout(ids, num_outputs=1, ratio=0.3)[0], [x])
    b = popart.Builder()
    xi = b.addInputTensor(popart.TensorInfo("FLOAT", list(x.shape)), "x")
    y = b.aiOnnx.dropout([xi], num_outputs=1, ratio=0.3)[0]
    loss = b.aiGraphcore.identityloss([y], reduction=popart.ReductionType.Sum)
    g = popart.reservedGradientPrefix() + xi
    flow = popart.DataFlow(
        1, {y: popart.AnchorReturnType("ALL"), g: popart.AnchorReturnType("ALL")}
    )
    s = popart.TrainingSession(
        b.getModelProto(), flow, device(), loss=loss, optimizer=popart.ConstSGD(0.0)
    )
    s.prepareDevice()
    s.weightsFromHost()
    a = s.initAnchorArrays()
    s.run(popart.PyStepIO({xi: x}, a))
    kept = a[y] != 0
    assert 0.6 < kept.mean() < 0.8
    np.testing.assert_allclose(a[y][kept], x[kept] / 0.7, rtol=1e-5)
    np.testing.assert_allclose(a[g], kept / 0.7, rtol=1e-5)


def test_bad_input_is_named():
    def run(build, inputs, match, opsets=None):
        with pytest.raises(popart.popart_exception, match=match):
            check_forward(build, inputs, opsets=opsets)

    x = _r(3, 4)
    run(
        lambda b, ids: b.aiOnnx.gather([ids[0], b.aiOnnx.constant(_i64(7))], axis=0),
        [x],
        r"Gather \(node .*\): index 7 is out of range for axis 0 of size 3",
    )
    run(
        lambda b, ids: b.aiOnnx.slice([ids[0], ids[1], b.aiOnnx.constant(_i64(2))]),
        [x, np.array([0], np.int32)],
        r"Slice \(node .*\): input 'starts' .* must be known",
    )
    run(
        lambda b, ids: b.aiOnnx.squeeze([ids[0]], axes=[0]),
        [x],
        r"Squeeze \(node .*\[3, 4\]\).*must be 1 instead of 3",
    )
    run(
        lambda b, ids: b.aiOnnx.reducesum([ids[0]], axes=[5]),
        [x],
        r"ReduceSum \(node .*\[3, 4\]\).*axis must be in",
    )
    # a model from elsewhere (not checked by the Builder): the lowering names the axis
    node = helper.make_node("ReduceSum", ["x"], ["y"], name="sum", axes=[5])
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    s = popart.InferenceSession(
        model.SerializeToString(),
        popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")}),
        device(),
    )
    with pytest.raises(popart.popart_exception, match=r"ReduceSum \(node 'sum'\): axis 5 is out"):
        s.prepareDevice()
