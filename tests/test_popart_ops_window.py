"""popart_api's InstanceNormalization, LRN and dilated pooling
(popart_api/ops_window.py): values against ONNX's reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest
from popart_harness import check_forward, simulate

OPSET13 = {"ai.onnx": 13, "ai.graphcore": 1}
RNG = np.random.default_rng(23)


def _instance_normalization(b, ids):
    return b.aiOnnx.instancenormalization(ids, epsilon=1e-3)


def _instance_normalization_inputs(shape: list[int]) -> list[np.ndarray]:
    """``x`` of ``shape`` (channels second) and a scale and bias per channel."""
    x = RNG.standard_normal(shape).astype(np.float32)
    return [x, *(RNG.standard_normal([shape[1]]).astype(np.float32) for _ in range(2))]


def test_instance_normalization() -> None:
    check_forward(
        _instance_normalization,
        _instance_normalization_inputs([2, 3, 4, 5]),
        opsets=OPSET13,
        rtol=1e-4,
        atol=1e-5,
    )


def _run(build, x: np.ndarray) -> np.ndarray:
    return simulate(build, [x], opsets=OPSET13, tiles=4)


@pytest.mark.parametrize("size", [3, 4])
def test_lrn(size: int) -> None:
    """Against the ONNX spec's formula (onnx.reference 1.23's LRN loops over the batch
    dimension where it means the channels)."""
    x = RNG.standard_normal([2, 6, 3, 3]).astype(np.float32)
    alpha, beta, bias = 0.02, 0.6, 1.5
    got = _run(lambda b, ids: b.aiOnnx.lrn(ids, size=size, alpha=alpha, beta=beta, bias=bias), x)
    lo, hi = (size - 1) // 2, size - 1 - (size - 1) // 2
    square_sum = np.zeros_like(x, np.float64)
    for c in range(x.shape[1]):
        window = x[:, max(0, c - lo) : min(x.shape[1], c + hi + 1)].astype(np.float64)
        square_sum[:, c] = np.sum(window**2, axis=1)
    want = x / (bias + alpha / size * square_sum) ** beta
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


POOLS = {
    "max_2d": ("maxpool", dict(kernel_shape=[2, 2], dilations=[2, 2])),
    "max_strided_padded": (
        "maxpool",
        dict(kernel_shape=[3, 2], dilations=[2, 3], strides=[2, 1], pads=[1, 0, 2, 1]),
    ),
    "avg_ceil": (
        "averagepool",
        dict(kernel_shape=[2, 2], dilations=[2, 2], strides=[2, 2], ceil_mode=1),
    ),
    "avg_count_pad": (
        "averagepool",
        dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 1, 2, 1], count_include_pad=1),
    ),
    "avg_no_count_pad": (
        "averagepool",
        dict(kernel_shape=[3, 3], dilations=[2, 2], pads=[2, 1, 2, 1], count_include_pad=0),
    ),
}


@pytest.mark.parametrize("case", list(POOLS))
def test_dilated_pooling(case: str) -> None:
    op, attrs = POOLS[case]
    x = RNG.standard_normal([1, 2, 7, 8]).astype(np.float32)

    def build(b, ids):
        out = getattr(b.aiOnnx, op)(ids, **attrs, num_outputs=1)
        return out[0] if isinstance(out, list) else out

    opsets = {"ai.onnx": 19, "ai.graphcore": 1}
    check_forward(build, [x], opsets=opsets, rtol=1e-5)


CONV_T = {
    "plain": ([1, 2, 3, 3], [2, 3, 3, 3], {}),
    "strided_padded": ([1, 2, 4, 3], [2, 2, 3, 2], dict(strides=[2, 3], pads=[1, 0, 1, 1])),
    "output_padding_dilated": (
        [2, 2, 3, 4],
        [2, 1, 2, 3],
        dict(strides=[2, 2], output_padding=[1, 0], dilations=[2, 1]),
    ),
}


@pytest.mark.parametrize("case", list(CONV_T))
def test_conv_transpose(case: str) -> None:
    xs, ws, attrs = CONV_T[case]
    x = RNG.standard_normal(xs).astype(np.float32)
    w = RNG.standard_normal(ws).astype(np.float32)
    bias = RNG.standard_normal([ws[1] * attrs.get("group", 1)]).astype(np.float32)
    check_forward(
        lambda b, ids: b.aiOnnx.convtranspose(ids, **attrs), [x, w, bias], opsets=OPSET13,
        rtol=1e-4, atol=1e-5,
    )  # fmt: skip


@pytest.mark.parametrize("order", [0, 1])
def test_maxpool_indices(order: int) -> None:
    x = RNG.permutation(2 * 3 * 5 * 6).reshape(2, 3, 5, 6).astype(np.float32)
    attrs = dict(kernel_shape=[2, 3], strides=[2, 2], pads=[1, 1, 0, 1], storage_order=order)

    def build(b, ids):
        return b.aiOnnx.maxpool(ids, num_outputs=2, **attrs)[1]

    got = check_forward(build, [x], opsets=OPSET13)
    assert got.dtype == np.int32


def test_instance_normalization_gradients() -> None:
    from popart_harness import check_gradients

    check_gradients(
        _instance_normalization, _instance_normalization_inputs([2, 3, 2, 3]), opsets=OPSET13
    )
