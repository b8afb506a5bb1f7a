"""popart_api's activation, trigonometric, rounding, Mean and Mod ops
(popart_api/ops_activation.py): values against ONNX's reference evaluator, gradients
against central finite differences of the reference, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from popart_harness import check_forward, check_gradients

OPSET13 = {"ai.onnx": 13, "ai.graphcore": 1}
RNG = np.random.default_rng(11)


def _spaced(*shape: int, scale: float = 0.05) -> np.ndarray:
    """Distinct values ``scale`` apart around 0 (no kinks hit by finite differences)."""
    n = int(np.prod(shape))
    return ((RNG.permutation(n).reshape(shape) - n / 2 + 0.37) * scale).astype(np.float32)


ACTIVATIONS = [
    ("leakyrelu", {"alpha": 0.1}),
    ("elu", {"alpha": 0.7}),
    ("selu", {}),
    ("hardsigmoid", {"alpha": 0.3, "beta": 0.4}),
    ("softplus", {}),
    ("softsign", {}),
    ("thresholdedrelu", {"alpha": 0.2}),
]


@pytest.mark.parametrize(("op", "attrs"), ACTIVATIONS, ids=[a[0] for a in ACTIVATIONS])
def test_activation_values_and_gradients(op: str, attrs: dict) -> None:
    x = _spaced(3, 8, scale=0.21)
    check_forward(lambda b, ids: getattr(b.aiOnnx, op)(ids, **attrs), [x], opsets=OPSET13)
    check_gradients(lambda b, ids: getattr(b.aiOnnx, op)(ids, **attrs), [x], opsets=OPSET13)


def test_softplus_large_inputs_do_not_overflow() -> None:
    x = np.array([[-100.0, -20.0, 0.0, 20.0, 100.0]], np.float32)
    got = check_forward(lambda b, ids: b.aiOnnx.softplus(ids), [x], opsets=OPSET13)
    np.testing.assert_allclose(got[0, [0, 4]], [0.0, 100.0], atol=1e-6)


def test_shrink_and_prelu() -> None:
    x = _spaced(4, 6, scale=0.1)
    check_forward(lambda b, ids: b.aiOnnx.shrink(ids, lambd=0.6, bias=0.25), [x], opsets=OPSET13)
    slope = np.linspace(0.1, 0.6, 6).astype(np.float32)
    check_forward(lambda b, ids: b.aiOnnx.prelu(ids), [x, slope], opsets=OPSET13)
    check_gradients(lambda b, ids: b.aiOnnx.prelu(ids), [x, slope], opsets=OPSET13)


@pytest.mark.parametrize("op", ["tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "atanh"])
def test_trigonometric_values_and_gradients(op: str) -> None:
    x = _spaced(3, 5, scale=0.06)  # inside (-1, 1) for asin, acos, atanh
    check_forward(lambda b, ids: getattr(b.aiOnnx, op)(ids), [x], opsets=OPSET13, rtol=2e-5)
    if op in ("tan", "asin", "acos", "atan", "sinh", "cosh"):
        check_gradients(lambda b, ids: getattr(b.aiOnnx, op)(ids), [x], opsets=OPSET13)


def test_acosh() -> None:
    x = (1.5 + np.abs(_spaced(2, 6))).astype(np.float32)
    check_forward(lambda b, ids: b.aiOnnx.acosh(ids), [x], opsets=OPSET13, rtol=2e-5)


def test_sign_round_isnan_isinf() -> None:
    x = np.array([[-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 3.7]], np.float32)
    got = check_forward(lambda b, ids: b.aiOnnx.round(ids), [x], opsets=OPSET13)
    np.testing.assert_array_equal(got, [[-2, -2, -0, 0, 0, 2, 2, 4]])  # halves to even
    check_forward(lambda b, ids: b.aiOnnx.sign(ids), [x], opsets=OPSET13)
    y = np.array([[np.nan, np.inf, -np.inf, 1.0, -3.0]], np.float32)
    got = check_forward(lambda b, ids: b.aiOnnx.isnan(ids), [y], opsets=OPSET13)
    np.testing.assert_array_equal(got, [[True, False, False, False, False]])
    got = check_forward(lambda b, ids: b.aiOnnx.isinf(ids, detect_negative=0), [y], opsets=OPSET13)
    np.testing.assert_array_equal(got, [[False, True, False, False, False]])
    check_forward(lambda b, ids: b.aiOnnx.isinf(ids, detect_positive=0), [y], opsets=OPSET13)


def test_mean_values_and_gradients() -> None:
    a, b_, c = _spaced(2, 3), _spaced(3), _spaced(2, 1)
    check_forward(lambda b, ids: b.aiOnnx.mean(ids), [a, b_, c], opsets=OPSET13)
    check_gradients(lambda b, ids: b.aiOnnx.mean(ids), [a, b_, c], opsets=OPSET13)


def test_mod_integers_and_floats() -> None:
    a = np.array([-7, -5, 5, 7, 0, 9], np.int32)
    d = np.array([3, -3, 3, -3, 2, 4], np.int32)
    got = check_forward(lambda b, ids: b.aiOnnx.mod(ids), [a, d], opsets=OPSET13)
    np.testing.assert_array_equal(got, np.mod(a, d))  # the divisor's sign
    got = check_forward(lambda b, ids: b.aiOnnx.mod(ids, fmod=1), [a, d], opsets=OPSET13)
    np.testing.assert_array_equal(got, np.fmod(a, d))  # the dividend's sign
    x = np.array([-7.5, 5.25, 4.0, -1.0], np.float32)
    y = np.array([2.0, -2.0, 1.5, 3.0], np.float32)
    check_forward(lambda b, ids: b.aiOnnx.mod(ids, fmod=1), [x, y], opsets=OPSET13)


@pytest.mark.parametrize("op", ["asinh", "atanh", "shrink"])
def test_rewritten_op_gradients(op: str) -> None:
    x = _spaced(3, 5, scale=0.06)
    check_gradients(lambda b, ids: getattr(b.aiOnnx, op)(ids), [x], opsets=OPSET13)


def test_acosh_gradient() -> None:
    x = (1.5 + np.abs(_spaced(2, 6))).astype(np.float32)
    check_gradients(lambda b, ids: b.aiOnnx.acosh(ids), [x], opsets=OPSET13)
