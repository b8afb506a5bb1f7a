"""Property tests of popart_api ops: random shapes (with numpy broadcasting), random
attributes and random values, each model's outputs against ONNX's reference
evaluator, and a training step's gradients against finite differences."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from popart_harness import check_forward, check_gradients

UNARY = ["relu", "sigmoid", "tanh", "exp", "neg", "abs", "erf", "sin", "cos"]
POSITIVE = ["sqrt", "log", "reciprocal"]
BINARY = ["add", "sub", "mul", "div", "max", "min"]
REDUCE = ["reducesum", "reducemean", "reducemax", "reducemin", "reducesumsquare"]
SETTINGS = settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)


@st.composite
def _shape(draw, min_rank=1, max_rank=3):
    rank = draw(st.integers(min_rank, max_rank))
    return tuple(draw(st.integers(1, 5)) for _ in range(rank))


@st.composite
def _broadcast_pair(draw):
    """Two shapes that broadcast: the second drops leading dims or has ones."""
    a = draw(_shape())
    cut = draw(st.integers(0, len(a) - 1))
    b = tuple(1 if draw(st.booleans()) else n for n in a[cut:])
    return (a, b) if draw(st.booleans()) else (b, a)


def _values(seed: int, shape: tuple, positive: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(np.float32)
    return (np.abs(x) + 0.5).astype(np.float32) if positive else x


@SETTINGS
@given(op=st.sampled_from(UNARY + POSITIVE), shape=_shape(), seed=st.integers(0, 2**16))
def test_unary_ops_match_reference(op, shape, seed):
    x = _values(seed, shape, positive=op in POSITIVE)
    check_forward(lambda b, ids: getattr(b.aiOnnx, op)(ids), [x], rtol=1e-5, atol=1e-6)


@SETTINGS
@given(op=st.sampled_from(BINARY), shapes=_broadcast_pair(), seed=st.integers(0, 2**16))
def test_binary_ops_broadcast_like_numpy(op, shapes, seed):
    a = _values(seed, shapes[0])
    b = _values(seed + 1, shapes[1], positive=op == "div")
    check_forward(lambda bd, ids: getattr(bd.aiOnnx, op)(ids), [a, b], rtol=1e-5, atol=1e-6)


@SETTINGS
@given(
    op=st.sampled_from(REDUCE),
    shape=_shape(min_rank=2),
    data=st.data(),
    keepdims=st.integers(0, 1),
    seed=st.integers(0, 2**16),
)
def test_reductions_match_reference(op, shape, data, keepdims, seed):
    axes = data.draw(st.lists(st.integers(0, len(shape) - 1), min_size=1, unique=True))
    x = _values(seed, shape)
    check_forward(
        lambda b, ids: getattr(b.aiOnnx, op)(ids, axes=sorted(axes), keepdims=keepdims),
        [x],
        rtol=1e-5,
        atol=1e-5,
    )


@SETTINGS
@given(shape=_shape(min_rank=2), data=st.data(), seed=st.integers(0, 2**16))
def test_transpose_slice_concat_match_reference(shape, data, seed):
    x = _values(seed, shape)
    perm = data.draw(st.permutations(range(len(shape))))
    axis = data.draw(st.integers(0, len(shape) - 1))

    def build(b, ids):
        t = b.aiOnnx.transpose(ids, perm=list(perm))
        return b.aiOnnx.concat([t, t], axis=axis)

    check_forward(build, [x])


@settings(max_examples=6, deadline=None, derandomize=True)
@given(m=st.integers(1, 4), k=st.integers(1, 5), n=st.integers(1, 4), seed=st.integers(0, 2**16))
def test_matmul_softmax_gradients(m, k, n, seed):
    a, b = _values(seed, (m, k)), _values(seed + 1, (k, n))

    def build(bd, ids):
        return bd.aiOnnx.softmax([bd.aiOnnx.matmul(ids)], axis=1)

    check_gradients(build, [a, b])
