"""The Builder's op methods take their parameters in PopART's order.

Each row was read from PopART's source, graphcore/popart commit d2f20d78db91
(2023-09-11): the ``aiOnnx`` rows from the generated bindings
``python/popart/popart_opsetN/popart_opsetN.gen.cpp`` (N the row's opset), the
``aiGraphcore`` rows from ``python/popart/popart_core/popart.cpp``
(``AiGraphcoreOpset1``). A parameter out of place binds a positional value to another
attribute without a word, so the order is pinned here op by op.
"""

from __future__ import annotations

import inspect

import numpy as np
import pytest
from popart_harness import run_session

import popart_api as popart

GEN = "python/popart/popart_opset{}/popart_opset{}.gen.cpp"
CORE = "python/popart/popart_core/popart.cpp"

#: (opset, method, parameters in order, returns a list, where it was read)
AI_ONNX_ROWS = [
    (11, "conv", "args dilations group kernel_shape pads strides", False),
    (
        11,
        "convtranspose",
        "args dilations group kernel_shape output_padding output_shape pads strides",
        False,
    ),
    (11, "averagepool", "args kernel_shape ceil_mode count_include_pad pads strides", False),
    (7, "averagepool", "args kernel_shape count_include_pad pads strides", False),
    (
        11,
        "maxpool",
        "args num_outputs kernel_shape ceil_mode dilations pads storage_order strides",
        True,
    ),
    (7, "maxpool", "args kernel_shape pads strides", False),  # MaxPool-1: one output
    (
        11,
        "lstm",
        "args num_outputs activation_alpha activation_beta activations clip "
        "direction hidden_size input_forget",
        True,
    ),
    (
        11,
        "gru",
        "args num_outputs activation_alpha activation_beta activations clip "
        "direction hidden_size linear_before_reset",
        True,
    ),
    (
        11,
        "resize",
        "args coordinate_transformation_mode cubic_coeff_a exclude_outside "
        "extrapolation_value mode nearest_mode",
        False,
    ),
    (10, "resize", "args mode", False),
    (9, "batchnormalization", "args num_outputs epsilon momentum", True),
    (6, "batchnormalization", "args num_outputs epsilon is_test momentum spatial", True),
    (11, "gather", "args axis", False),
    (10, "slice", "args", False),
    (9, "slice", "args ends starts axes", False),
    (11, "topk", "args axis largest sorted", True),  # no num_outputs: 2 fixed outputs
    (9, "topk", "args k axis", True),
    (9, "cast", "args to", False),
    (11, "concat", "args axis", False),
    (11, "gemm", "args alpha beta transA transB", False),
    (11, "reducesum", "args axes keepdims", False),
    (11, "reducemean", "args axes keepdims", False),
    (11, "softmax", "args axis", False),
    (11, "leakyrelu", "args alpha", False),
    (11, "dropout", "args num_outputs ratio", True),
    (11, "split", "args num_outputs axis split", True),
    (11, "lrn", "args size alpha beta bias", False),
    (6, "clip", "args max min", False),
    (11, "clip", "args", False),
    (11, "cumsum", "args exclusive reverse", False),
    (
        11,
        "roialign",
        "args mode output_height output_width sampling_ratio spatial_scale",
        False,
    ),
    (11, "randomnormal", "shape dtype mean scale seed", False),
    (11, "depthtospace", "args blocksize mode", False),
    (11, "shrink", "args bias lambd", False),
    (11, "constantofshape", "args value", False),
    (11, "logical_and", "args", False),
]


@pytest.mark.parametrize(("opset", "method", "params", "many"), AI_ONNX_ROWS)
def test_ai_onnx_parameters_are_popart_generated_ones(opset, method, params, many) -> None:
    where = GEN.format(opset, opset)
    b = popart.Builder(opsets={"ai.onnx": opset})
    fn = getattr(b.aiOnnx, method)
    got = [p for p in inspect.signature(fn).parameters if p != "debugContext"]
    assert got == params.split(), f"{method} at opset {opset}, read in {where}"
    assert list(inspect.signature(fn).parameters)[-1] == "debugContext"
    assert ("list" in (fn.__doc__ or "")) == many, f"return kind of {method}, {where}"


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("groupnormalization", "args num_groups epsilon debugContext"),
        ("scale", "args scale debugContext"),
        ("nllloss", "args reduction ignoreIndex inputIsLogProbability debugContext"),
        ("identityloss", "args reduction debugContext"),
        ("l1loss", "args lambda_ reduction debugContext kw"),  # lambda is a keyword
        ("gelu", "args debugContext"),
    ],
)
def test_ai_graphcore_parameters_are_popart_ones(method, params) -> None:
    fn = getattr(popart.Builder().aiGraphcore, method)
    assert list(inspect.signature(fn).parameters) == params.split(), f"read in {CORE}"


def _run(b: popart.Builder, feeds: dict, out: str) -> np.ndarray:
    b.addOutputTensor(out)
    return run_session(b.getModelProto(), feeds, [out])[1][out]


def test_topk_takes_its_axis_second_and_makes_both_outputs() -> None:
    # TopK has two fixed outputs, so PopART's topk has no num_outputs: topk([x, k], 0)
    # was refused ("num_outputs 0 must be an int >= 1") and topk([x, k]) failed.
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [3, 4]), "x")
    k = b.aiOnnx.constant(np.array([2], np.int64))
    values, _indices = b.aiOnnx.topk([x, k], 0)
    assert len(b.aiOnnx.topk([x, k])) == 2
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(_run(b, {x: data}, values), data[[2, 1]])
    with pytest.raises(popart.popart_exception, match="always has 2 output"):
        b.aiOnnx.topk([x, k], num_outputs=1)


def test_maxpool_before_opset_8_has_one_output_and_no_num_outputs() -> None:
    # MaxPool-1's method is maxpool(args, kernel_shape, pads, strides): [2, 2] was
    # taken as num_outputs.
    b = popart.Builder(opsets={"ai.onnx": 7})
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [1, 1, 4, 4]), "x")
    y = b.aiOnnx.maxpool([x], [2, 2], [0, 0, 0, 0], [2, 2])
    assert isinstance(y, str)
    data = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    want = data.reshape(2, 2, 2, 2).max(axis=(1, 3)).reshape(1, 1, 2, 2)
    np.testing.assert_array_equal(_run(b, {x: data}, y), want)


def test_empty_optional_lists_are_left_out_as_popart_does() -> None:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [1, 1, 4, 4]), "x")
    (y,) = b.aiOnnx.maxpool([x], 1, [2, 2], 0, [], [], 0, [2, 2])
    data = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    want = data.reshape(2, 2, 2, 2).max(axis=(1, 3)).reshape(1, 1, 2, 2)
    np.testing.assert_array_equal(_run(b, {x: data}, y), want)


def test_constant_and_constant_of_shape_take_popart_arguments() -> None:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    shape = b.aiOnnx.constant(np.array([2, 3], np.int64), False, "shape")
    fill = b.aiOnnx.constantofshape([shape], np.array([1.5], np.float32))
    y = b.aiOnnx.logical_and([b.aiOnnx.greater([x, fill]), b.aiOnnx.less([x, fill])])
    out = b.aiOnnx.add([x, b.aiOnnx.cast([y], "FLOAT")])
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(_run(b, {x: data}, out), data)
    with pytest.raises(popart.popart_exception, match="sparse constants are not supported"):
        b.aiOnnx.constant(np.ones(2, np.float32), True)


def test_group_normalization_takes_groups_by_position_and_returns_three_ids() -> None:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 4, 3]), "x")
    scale = b.addInitializedInputTensor(np.ones(4, np.float32))
    bias = b.addInitializedInputTensor(np.zeros(4, np.float32))
    outs = b.aiGraphcore.groupnormalization([x, scale, bias], 2, 1e-5)
    assert len(outs) == 3
    data = np.random.default_rng(0).standard_normal([2, 4, 3]).astype(np.float32)
    g = data.reshape(2, 2, 6)
    want = (g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + 1e-5)
    np.testing.assert_allclose(_run(b, {x: data}, outs[0]), want.reshape(2, 4, 3), atol=1e-5)
