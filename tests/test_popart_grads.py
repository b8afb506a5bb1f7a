"""Gradients of popart_api's core ops (popart_api/grads.py) against central finite
differences of ONNX's reference evaluator in float64 (tests/popart_harness.py)."""

from __future__ import annotations

import numpy as np
import pytest
from popart_harness import check_gradients

RNG = np.random.default_rng(11)


def _r(*shape, positive=False):
    x = RNG.standard_normal(shape).astype(np.float32)
    return np.abs(x) + 0.5 if positive else x


@pytest.mark.parametrize(
    "op, shapes",
    [
        ("add", [(3, 4), (3, 4)]),
        ("add", [(2, 3, 4), (4,)]),
        ("sub", [(3, 4), (3, 1)]),
        ("mul", [(3, 4), (1, 4)]),
        ("mul", [(3, 4), (3, 4)]),
    ],
)
def test_binary_broadcast_gradients(op, shapes):
    check_gradients(lambda b, ids: getattr(b.aiOnnx, op)(ids), [_r(*s) for s in shapes])


def test_div_gradient():
    check_gradients(lambda b, ids: b.aiOnnx.div(ids), [_r(3, 4), _r(1, 4, positive=True)])


@pytest.mark.parametrize("op", ["relu", "sigmoid", "tanh", "exp"])
def test_unary_gradients(op):
    x = _r(3, 5)
    if op == "relu":
        x = np.where(np.abs(x) < 0.05, 0.3, x).astype(np.float32)  # away from the kink
    check_gradients(lambda b, ids: getattr(b.aiOnnx, op)(ids), [x])


@pytest.mark.parametrize("op", ["sqrt", "log"])
def test_positive_domain_gradients(op):
    check_gradients(lambda b, ids: getattr(b.aiOnnx, op)(ids), [_r(2, 5, positive=True)])


@pytest.mark.parametrize(
    "a, b",
    [((3, 4), (4, 5)), ((4,), (4, 5)), ((3, 4), (4,)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (1, 4, 2))],
)
def test_matmul_gradients(a, b):
    check_gradients(lambda bd, ids: bd.aiOnnx.matmul(ids), [_r(*a), _r(*b)])


@pytest.mark.parametrize("trans_a, trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_gemm_gradients(trans_a, trans_b):
    a = _r(4, 3) if trans_a else _r(3, 4)
    b = _r(5, 4) if trans_b else _r(4, 5)
    check_gradients(
        lambda bd, ids: bd.aiOnnx.gemm(ids, alpha=0.7, beta=1.5, transA=trans_a, transB=trans_b),
        [a, b, _r(5)],
    )


# opset 11 with axis = rank - 1 only: the reference evaluator applies the opset-13 rule
@pytest.mark.parametrize(
    "opset, axis, shape",
    [(11, 1, (3, 4)), (11, 2, (2, 3, 4)), (13, -1, (2, 3, 4)), (13, 1, (2, 3, 4))],
)
def test_softmax_gradients(opset, axis, shape):
    check_gradients(
        lambda bd, ids: bd.aiOnnx.softmax(ids, axis=axis),
        [_r(*shape)],
        opsets={"ai.onnx": opset, "ai.graphcore": 1},
    )


def test_view_gradients():
    shape = np.array([4, 6], np.int64)

    def build(bd, ids):
        t = bd.aiOnnx.transpose([ids[0]], perm=[2, 0, 1])
        return bd.aiOnnx.identity([bd.aiOnnx.reshape([t, ids[1]])])

    check_gradients(build, [_r(2, 3, 4), shape])
