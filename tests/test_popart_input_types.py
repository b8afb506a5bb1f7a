"""popart_api's input types and empty tensors: INT64 inputs held as INT32 (PopART's
default), 8/16-bit integer inputs, zero-element inputs and outputs, and a clear error
for a type the IPU does not take."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import popart_api as popart


def _run(nodes, inputs, outputs, feeds, opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    names = [o.name for o in outputs]
    flow = popart.DataFlow(1, {n: popart.AnchorReturnType("ALL") for n in names})
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4})
    s = popart.InferenceSession(fnModel=model.SerializeToString(), dataFlow=flow, deviceInfo=device)
    s.prepareDevice()
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(feeds, anchors))
    return anchors


def _vi(name, typ, shape):
    return helper.make_tensor_value_info(name, typ, shape)


def test_int64_inputs_are_held_as_int32() -> None:
    a = np.array([[3, -4, 2**20], [7, 0, -9]], np.int64)
    b = np.array([[1, 2, 3], [4, 5, 6]], np.int64)
    anchors = _run(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [_vi("a", TensorProto.INT64, [2, 3]), _vi("b", TensorProto.INT64, [2, 3])],
        [_vi("y", TensorProto.INT64, [2, 3])],
        {"a": a, "b": b},
    )
    assert anchors["y"].dtype == np.int32
    np.testing.assert_array_equal(anchors["y"], a + b)


def test_int64_indices_gather() -> None:
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    idx = np.array([3, 0, 2], np.int64)
    anchors = _run(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=0)],
        [_vi("x", TensorProto.FLOAT, [4, 3]), _vi("i", TensorProto.INT64, [3])],
        [_vi("y", TensorProto.FLOAT, [3, 3])],
        {"x": x, "i": idx},
    )
    np.testing.assert_array_equal(anchors["y"], x[[3, 0, 2]])


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.uint16])
def test_small_integer_inputs_round_trip(dtype) -> None:
    typ = {np.int8: TensorProto.INT8, np.uint8: TensorProto.UINT8}.get(dtype) or (
        TensorProto.INT16 if dtype is np.int16 else TensorProto.UINT16
    )
    x = np.array([[1, 2, 100], [0, 7, 3]], dtype)
    anchors = _run(
        [helper.make_node("Transpose", ["x"], ["y"])],
        [_vi("x", typ, [2, 3])],
        [_vi("y", typ, [3, 2])],
        {"x": x},
    )
    assert anchors["y"].dtype == dtype
    np.testing.assert_array_equal(anchors["y"], x.T)


@pytest.mark.parametrize(
    ("op", "dtype", "typ", "fn"),
    [
        ("Add", np.int8, TensorProto.INT8, np.add),
        ("Sub", np.uint8, TensorProto.UINT8, np.subtract),
        ("Max", np.int16, TensorProto.INT16, np.maximum),
        ("Mul", np.uint16, TensorProto.UINT16, np.multiply),
    ],
)
def test_small_integer_arithmetic_computes_in_int32(op, dtype, typ, fn) -> None:
    a = np.array([[7, 3, 100], [0, 12, 5]], dtype)
    b = np.array([[2, 3, 20], [0, 4, 5]], dtype)
    anchors = _run(
        [helper.make_node(op, ["a", "b"], ["y"])],
        [_vi("a", typ, [2, 3]), _vi("b", typ, [2, 3])],
        [_vi("y", typ, [2, 3])],
        {"a": a, "b": b},
    )
    assert anchors["y"].dtype == dtype
    np.testing.assert_array_equal(anchors["y"], fn(a, b))


def test_small_integer_comparison_and_integer_pow() -> None:
    a = np.array([-3, 5, 7], np.int8)
    b = np.array([4, 5, -1], np.int8)
    anchors = _run(
        [helper.make_node("Less", ["a", "b"], ["y"])],
        [_vi("a", TensorProto.INT8, [3]), _vi("b", TensorProto.INT8, [3])],
        [_vi("y", TensorProto.BOOL, [3])],
        {"a": a, "b": b},
    )
    np.testing.assert_array_equal(anchors["y"], a < b)
    x = np.array([2, -3, 5], np.int32)
    e = np.array([3, 2, 0], np.int32)
    anchors = _run(
        [helper.make_node("Pow", ["x", "e"], ["y"])],
        [_vi("x", TensorProto.INT32, [3]), _vi("e", TensorProto.INT32, [3])],
        [_vi("y", TensorProto.INT32, [3])],
        {"x": x, "e": e},
    )
    np.testing.assert_array_equal(anchors["y"], x**e)


def test_zero_element_tensors() -> None:
    x = np.zeros([0, 3], np.float32)
    graph_nodes = [
        helper.make_node(
            "Constant", [], ["axes"], value=helper.make_tensor("axes", TensorProto.INT64, [1], [0])
        ),
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("ReduceSum", ["x", "axes"], ["s"], keepdims=1),
        helper.make_node("ReduceMax", ["x"], ["m"], axes=[0], keepdims=0),
    ]
    anchors = _run(
        graph_nodes,
        [_vi("x", TensorProto.FLOAT, [0, 3])],
        [
            _vi("y", TensorProto.FLOAT, [0, 3]),
            _vi("s", TensorProto.FLOAT, [1, 3]),
            _vi("m", TensorProto.FLOAT, [3]),
        ],
        {"x": x},
    )
    assert anchors["y"].shape == (0, 3)
    np.testing.assert_array_equal(anchors["s"], np.sum(x, axis=0, keepdims=True))
    np.testing.assert_array_equal(anchors["m"], np.full(3, -np.inf, np.float32))


def test_a_type_the_ipu_does_not_take_is_named() -> None:
    with pytest.raises(popart.popart_exception, match="input 'x' has type DOUBLE"):
        _run(
            [helper.make_node("Relu", ["x"], ["y"])],
            [_vi("x", TensorProto.DOUBLE, [2])],
            [_vi("y", TensorProto.DOUBLE, [2])],
            {"x": np.zeros(2)},
        )


def test_integer_div_of_known_values_truncates() -> None:
    from popart_api.ops import divide

    a = np.array([7, -7, 6, -1], np.int64)
    b = np.array([2, 2, -4, 3], np.int64)
    got = divide(a, b)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [int(x / y) for x, y in zip(a, b, strict=True)])
    np.testing.assert_allclose(divide(np.float32([1.0]), np.float32([4.0])), [0.25])


def test_pow_of_a_float_base_keeps_its_type_with_an_integer_exponent() -> None:
    x = np.array([1.5, 2.0, 0.5], np.float32)
    e = np.array([2, 3, -1], np.int32)
    anchors = _run(
        [helper.make_node("Pow", ["x", "e"], ["y"])],
        [_vi("x", TensorProto.FLOAT, [3]), _vi("e", TensorProto.INT32, [3])],
        [_vi("y", TensorProto.FLOAT, [3])],
        {"x": x, "e": e},
    )
    assert anchors["y"].dtype == np.float32
    np.testing.assert_allclose(anchors["y"], x ** e.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize(
    ("typ", "value", "found"),
    [
        (TensorProto.INT64, np.int64(2**40), "value 1099511627776 at index [0, 1] (int64)"),
        (TensorProto.INT32, np.int64(-(2**31) - 1), "outside int32's range"),
        (TensorProto.FLOAT, np.float64(1e40), "value 1e+40 at index [0, 1] (float64)"),
        (TensorProto.FLOAT16, np.float32(7e4), "outside float16's largest magnitude 65504"),
    ],
)
def test_a_value_the_input_type_cannot_hold_is_named(typ, value, found) -> None:
    # It was cast silently: an integer wrapped (2**40 became 0), a float became inf.
    data = np.zeros([2, 3], value.dtype)
    data[0, 1] = value
    with pytest.raises(popart.popart_exception, match="input 'a': value") as info:
        _run(
            [helper.make_node("Identity", ["a"], ["y"])],
            [_vi("a", typ, [2, 3])],
            [_vi("y", typ, [2, 3])],
            {"a": data},
        )
    assert found in str(info.value) and "hint:" in str(info.value)


def test_values_within_the_held_type_are_cast_as_before() -> None:
    data = np.array([[-(2**31), 2**31 - 1, 5]], np.int64)
    anchors = _run(
        [helper.make_node("Identity", ["a"], ["y"])],
        [_vi("a", TensorProto.INT64, [1, 3])],
        [_vi("y", TensorProto.INT64, [1, 3])],
        {"a": data},
    )
    np.testing.assert_array_equal(anchors["y"], data)
