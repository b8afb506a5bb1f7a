"""popart_api's data-movement ops and extra reductions (popart_api/ops_shape.py):
values against ONNX's reference evaluator, gradients against central finite
differences of the reference, and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from popart_harness import check_forward, check_gradients, simulate

import popart_api as popart

OPSET13 = {"ai.onnx": 13, "ai.graphcore": 1}
OPSET18 = {"ai.onnx": 18, "ai.graphcore": 1}
RNG = np.random.default_rng(17)


def _spaced(*shape: int, scale: float = 0.05) -> np.ndarray:
    n = int(np.prod(shape))
    return ((RNG.permutation(n).reshape(shape) - n / 2 + 0.37) * scale).astype(np.float32)


def _i64(*values: int) -> np.ndarray:
    return np.array(values, np.int64)


def test_split_sizes_and_even_parts() -> None:
    x = _spaced(4, 7)

    def sizes(b, ids):
        return b.aiOnnx.split([ids[0], ids[1]], num_outputs=3, axis=1)[1]

    got = check_forward(sizes, [x, _i64(2, 4, 1)], opsets=OPSET13)
    np.testing.assert_array_equal(got, x[:, 2:6])
    check_gradients(sizes, [x, _i64(2, 4, 1)], opsets=OPSET13)

    def even(b, ids):
        return b.aiOnnx.split(ids, num_outputs=2, axis=0)[1]

    got = check_forward(even, [x], opsets=OPSET13)
    np.testing.assert_array_equal(got, x[2:])


@pytest.mark.parametrize("mode", ["constant", "edge", "reflect"])
def test_pad_modes(mode: str) -> None:
    x = _spaced(3, 4)
    pads = _i64(1, 2, 2, 0)  # begin dim0, begin dim1, end dim0, end dim1

    def build(b, ids):
        inputs = [ids[0], ids[1]]
        if mode == "constant":
            inputs.append(b.aiOnnx.constant(np.array(1.5, np.float32)))
        return b.aiOnnx.pad(inputs, mode=mode)

    got = check_forward(build, [x, pads], opsets=OPSET13)
    want_mode = {"constant": "constant", "edge": "edge", "reflect": "reflect"}[mode]
    extra = {"constant_values": 1.5} if mode == "constant" else {}
    np.testing.assert_array_equal(got, np.pad(x, [(1, 2), (2, 0)], mode=want_mode, **extra))
    if mode == "constant":
        check_gradients(build, [x, pads], opsets=OPSET13)


def _run(build, inputs: list[np.ndarray]) -> np.ndarray:
    """Our output only (for cases onnx.reference does not evaluate)."""
    return simulate(build, inputs, opsets=OPSET13, tiles=4)


def test_negative_pads_crop() -> None:
    x = _spaced(3, 5)
    got = _run(lambda b, ids: b.aiOnnx.pad(ids), [x, _i64(0, -1, 1, -2)])
    np.testing.assert_array_equal(got, np.pad(x[:, 1:3], [(0, 1), (0, 0)]))


def test_tile_values_and_gradient() -> None:
    x = _spaced(2, 3)
    got = check_forward(lambda b, ids: b.aiOnnx.tile(ids), [x, _i64(2, 3)], opsets=OPSET13)
    np.testing.assert_array_equal(got, np.tile(x, (2, 3)))
    check_gradients(lambda b, ids: b.aiOnnx.tile(ids), [x, _i64(3, 1)], opsets=OPSET13)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_round_trip(mode: str) -> None:
    x = _spaced(1, 8, 2, 3)
    check_forward(lambda b, ids: b.aiOnnx.depthtospace(ids, blocksize=2, mode=mode), [x],
                  opsets=OPSET13)  # fmt: skip
    y = _spaced(2, 2, 4, 6)
    check_forward(lambda b, ids: b.aiOnnx.spacetodepth(ids, blocksize=2), [y], opsets=OPSET13)


@pytest.mark.parametrize("op", ["reducel1", "reducel2", "reducelogsum", "reducelogsumexp"])
def test_extra_reductions(op: str) -> None:
    x = np.abs(_spaced(3, 4, 2)) + np.float32(0.1)  # positive: log of a sum is defined

    def build(b, ids):
        return getattr(b.aiOnnx, op)([ids[0], ids[1]], keepdims=0)

    check_forward(build, [x, _i64(1)], opsets=OPSET18, rtol=2e-5)
    check_gradients(build, [x, _i64(1)], opsets=OPSET18)


@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_arg_extrema(op: str) -> None:
    x = np.array([[3, 1, 3, 0], [2, 2, 5, 5], [0, 0, 0, 0]], np.float32)
    fn = np.argmax if op == "argmax" else np.argmin
    got = check_forward(lambda b, ids: getattr(b.aiOnnx, op)(ids, axis=1, keepdims=0), [x])
    np.testing.assert_array_equal(got, fn(x, axis=1))  # the first extreme
    got = check_forward(
        lambda b, ids: getattr(b.aiOnnx, op)(ids, axis=1, keepdims=1, select_last_index=1),
        [x],
        opsets=OPSET13,
    )
    np.testing.assert_array_equal(got[:, 0], 3 - fn(x[:, ::-1], axis=1))
    check_forward(lambda b, ids: getattr(b.aiOnnx, op)(ids, axis=0), [_spaced(3, 5)])


@pytest.mark.parametrize("largest", [1, 0])
def test_topk(largest: int) -> None:
    x = _spaced(3, 6)

    def build(out):
        return lambda b, ids: b.aiOnnx.topk([ids[0], ids[1]], axis=1, largest=largest,
                                            num_outputs=2)[out]  # fmt: skip

    vals = check_forward(build(0), [x, _i64(3)], opsets=OPSET13)
    idx = check_forward(build(1), [x, _i64(3)], opsets=OPSET13)
    order = np.argsort(-x if largest else x, axis=1, kind="stable")[:, :3]
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(vals, np.take_along_axis(x, order, axis=1))


def test_one_hot_and_cumsum() -> None:
    idx = np.array([[1, -1], [3, 0]], np.float32)  # -1 wraps to depth-1
    depth, values = np.array(4, np.int64), np.array([0.5, 2.0], np.float32)

    def one_hot(b, ids):
        return b.aiOnnx.onehot([ids[0], ids[1], b.aiOnnx.constant(values)], axis=1)

    got = _run(one_hot, [idx, depth])
    want = np.full([2, 4, 2], 0.5, np.float32)
    for i in range(2):
        for j in range(2):
            want[i, int(idx[i, j]) % 4, j] = 2.0
    np.testing.assert_array_equal(got, want)
    x = _spaced(3, 5)

    def cumsum(axis, **attrs):
        def build(b, ids):
            return b.aiOnnx.cumsum([ids[0], b.aiOnnx.constant(np.array(axis, np.int64))], **attrs)

        return build

    for attrs in ({}, {"exclusive": 1}, {"reverse": 1}, {"exclusive": 1, "reverse": 1}):
        check_forward(cumsum(1, **attrs), [x], opsets=OPSET13, rtol=2e-5)
    got = check_forward(cumsum(0), [np.arange(6, dtype=np.int32)], opsets=OPSET13)
    np.testing.assert_array_equal(got, np.cumsum(np.arange(6)))


def test_constant_of_shape_is_folded() -> None:
    from onnx import helper

    value = helper.make_tensor("v", 1, [1], [2.5])  # FLOAT

    def build(b, ids):
        c = b.aiOnnx.constantofshape([ids[1]], value=value)
        return b.aiOnnx.add([ids[0], c])

    x = _spaced(2, 3)
    got = check_forward(build, [x, _i64(2, 3)], opsets=OPSET13)
    np.testing.assert_allclose(got, x + 2.5)


def test_bad_split_sizes_are_named() -> None:
    b = popart.Builder(opsets=OPSET13)
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 6]), "x")
    sizes = b.aiOnnx.constant(_i64(2, 2, 1))
    with pytest.raises(popart.popart_exception, match=r"Split \(node 'Split'.*sum of 'split'"):
        b.aiOnnx.split([x, sizes], num_outputs=3, axis=1)


@pytest.mark.parametrize("attrs", [{}, {"exclusive": 1, "reverse": 1}])
def test_cumsum_gradient(attrs: dict) -> None:
    def build(b, ids):
        return b.aiOnnx.cumsum([ids[0], b.aiOnnx.constant(np.array(1, np.int64))], **attrs)

    check_gradients(build, [_spaced(3, 4)], opsets=OPSET13)


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_space_depth_gradients(mode: str) -> None:
    check_gradients(lambda b, ids: b.aiOnnx.depthtospace(ids, blocksize=2, mode=mode),
                    [_spaced(1, 8, 2, 3)], opsets=OPSET13)  # fmt: skip
    check_gradients(lambda b, ids: b.aiOnnx.spacetodepth(ids, blocksize=2),
                    [_spaced(1, 2, 4, 2)], opsets=OPSET13)  # fmt: skip
