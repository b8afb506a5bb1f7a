"""popart_api elementwise-math, reduction and shape ops (``popart_api.ops_tensor``):
forward values against ONNX's reference evaluator, gradients against its central
finite differences (``popart_harness.check_gradients``), bad inputs by message."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from popart_harness import check_forward, check_gradients, device, run_model, simulator_gradients

import popart_api as popart

RNG = np.random.default_rng(2024)


def _rand(*shape: int, low: float | None = None) -> np.ndarray:
    """Standard normal float32; with ``low``, magnitudes at least ``low`` (kinks avoided)."""
    x = RNG.standard_normal(shape).astype(np.float32)
    if low is not None:
        x = (np.sign(x) * (np.abs(x) + low)).astype(np.float32)
    return x


def _positive(*shape: int) -> np.ndarray:
    return RNG.uniform(0.5, 2.0, shape).astype(np.float32)


def _distinct(*shape: int, gap: float = 0.05) -> np.ndarray:
    """Float32 values in random order, any two at least ``gap`` apart: a max or min has
    no near-tie that a finite difference of step ``eps < gap / 2`` would straddle."""
    n = int(np.prod(shape))
    return (RNG.permutation(n).reshape(shape) * gap - n * gap / 2).astype(np.float32)


def _i64(*values: int) -> np.ndarray:
    return np.asarray(values, np.int64)


def _run(proto: bytes, feeds: dict[str, np.ndarray], outs: list[str]) -> list[np.ndarray]:
    got = run_model(proto, feeds, outs)
    return [got[o] for o in outs]


def _check_exact(build, inputs: list[np.ndarray], opsets: dict | None = None) -> None:
    """Forward check of an op with a BOOL/INT output: equal to the reference."""
    b = popart.Builder(opsets=opsets)
    ids = []
    for k, x in enumerate(inputs):
        if x.dtype == np.int64:
            ids.append(b.addInitializedInputTensor(x, f"in{k}"))
        else:
            ids.append(b.addInputTensor(popart.TensorInfo(x.dtype, list(x.shape)), f"in{k}"))
    out = build(b, ids)
    b.addOutputTensor(out)
    proto = b.getModelProto()
    feeds = {i: x for i, x in zip(ids, inputs, strict=True) if x.dtype != np.int64}
    (got,) = _run(proto, feeds, [out])
    want = ReferenceEvaluator(onnx.load_from_string(proto)).run([out], feeds)[0]
    np.testing.assert_array_equal(got, want)
    assert got.dtype.kind == want.dtype.kind or want.dtype == np.int64


def _bad_model(
    op_type: str,
    inputs: dict[str, np.ndarray],
    inits: dict[str, np.ndarray] | None = None,
    opset: int = 13,
    names: list[str] | None = None,
    **attrs: object,
) -> bytes:
    """A one-node model, unchecked (the lowering must find what is wrong)."""
    inits = inits or {}
    node = helper.make_node(
        op_type, names or [*inputs, *inits], ["y"], name="bad", domain="", **attrs
    )
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info(
                k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape)
            )
            for k, v in inputs.items()
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model.SerializeToString()


def _raises(proto: bytes, feeds: dict[str, np.ndarray], *patterns: str) -> None:
    """The session fails with a message matching every regex of ``patterns``."""
    with pytest.raises(popart.popart_exception) as info:
        _run(proto, feeds, ["y"])
    for p in patterns:
        assert re.search(p, str(info.value)), (p, str(info.value))


OPS13 = {"ai.onnx": 13}
OPS18 = {"ai.onnx": 18}
OPS20 = {"ai.onnx": 20}


# ---------------------------------------------------------------- elementwise
@pytest.mark.parametrize("shape", [(5,), (3, 4), (2, 3, 4)])
@pytest.mark.parametrize("op", ["neg", "abs", "reciprocal", "erf"])
def test_unary_forward(op: str, shape: tuple[int, ...]) -> None:
    x = _rand(*shape, low=0.2)
    check_forward(lambda b, ids: getattr(b.aiOnnx, op)([ids[0]]), [x], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("xs", "ys"), [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (2, 1, 4)), ((2, 3), ())]
)
def test_pow_forward(xs: tuple, ys: tuple) -> None:
    check_forward(
        lambda b, ids: b.aiOnnx.pow(ids),
        [_positive(*xs), RNG.uniform(-2, 2, ys).astype(np.float32)],
        rtol=1e-5,
    )


def test_pow_integer_exponent() -> None:
    """A negative base with an INT64 constant exponent (opset 12+ mixes the types)."""
    check_forward(lambda b, ids: b.aiOnnx.pow(ids), [_rand(3, 4), _i64(3)], opsets=OPS13, rtol=1e-5)


@pytest.mark.parametrize(
    "shapes", [[(3, 4), (3, 4)], [(3, 4), (4,)], [(2, 1, 4), (3, 1), (4,)], [(5,)]]
)
@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_forward(op: str, shapes: list) -> None:
    check_forward(
        lambda b, ids: getattr(b.aiOnnx, op)(ids), [_rand(*s) for s in shapes], opsets=OPS13
    )


@pytest.mark.parametrize(
    ("cs", "xs", "ys"), [((3, 4),) * 3, ((4,), (3, 4), (3, 1)), ((), (2,), (2,))]
)
def test_where_forward(cs: tuple, xs: tuple, ys: tuple) -> None:
    cond = RNG.random(cs) < 0.5
    check_forward(lambda b, ids: b.aiOnnx.where(ids), [np.asarray(cond), _rand(*xs), _rand(*ys)])


@pytest.mark.parametrize("op", ["equal", "less", "greater", "lessorequal", "greaterorequal"])
def test_compare_forward(op: str) -> None:
    a = RNG.integers(-2, 3, (3, 4)).astype(np.float32)
    b_ = RNG.integers(-2, 3, (4,)).astype(np.float32)
    _check_exact(lambda b, ids: getattr(b.aiOnnx, op)(ids), [a, b_], opsets=OPS13)


def test_compare_int32() -> None:
    a = RNG.integers(-3, 3, (6,)).astype(np.int32)
    b_ = RNG.integers(-3, 3, (6,)).astype(np.int32)
    _check_exact(lambda b, ids: b.aiOnnx.less(ids), [a, b_])


@pytest.mark.parametrize(
    ("src", "to"),
    [
        (np.float32, "INT32"),
        (np.float32, "FLOAT16"),
        (np.int32, "FLOAT"),
        (np.float32, "BOOL"),
        (np.float32, "FLOAT"),
    ],
)
def test_cast_forward(src: type, to: str) -> None:
    x = (RNG.standard_normal((3, 5)) * 4).astype(src)
    if src == np.float32 and to == "BOOL":
        x[0, :2] = 0.0

    def build(b, ids):
        return b.aiOnnx.cast([ids[0]], to=getattr(TensorProto, to))

    if to in ("INT32", "BOOL"):
        _check_exact(build, [x])
    else:
        check_forward(build, [x], rtol=1e-3)


@pytest.mark.parametrize(
    ("opset", "lo", "hi"), [(6, -0.5, 0.7), (6, None, 0.2), (11, -0.3, 0.4), (13, None, 0.5)]
)
def test_clip_forward(opset: int, lo: float | None, hi: float | None) -> None:
    x = _rand(3, 5)

    def build(b, ids):
        if opset < 11:
            kw = {k: v for k, v in (("min", lo), ("max", hi)) if v is not None}
            return b.aiOnnx.clip([ids[0]], **kw)
        args = [ids[0]]
        args.append(b.aiOnnx.constant(np.float32(lo)) if lo is not None else "")
        args.append(b.aiOnnx.constant(np.float32(hi)) if hi is not None else "")
        return b.aiOnnx.clip(args)

    check_forward(build, [x], opsets={"ai.onnx": opset})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("shape", [(7,), (3, 5)])
def test_gelu_onnx_forward(approximate: str, shape: tuple) -> None:
    x = _rand(*shape) * 3
    check_forward(
        lambda b, ids: b.aiOnnx.gelu([ids[0]], approximate=approximate),
        [x],
        opsets=OPS20,
        rtol=1e-5,
        atol=1e-5,
    )


def _gelu_tanh64(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def test_graphcore_gelu_is_tanh_approximation() -> None:
    """PopART's ``aiGraphcore.gelu`` is the tanh approximation (its gelu_test.py)."""
    x = np.linspace(-6, 6, 40, dtype=np.float32)
    b = popart.Builder()
    i = b.addInputTensor(popart.TensorInfo("FLOAT", [40]), "x")
    y = b.aiGraphcore.gelu([i])
    b.addOutputTensor(y)
    (got,) = _run(b.getModelProto(), {i: x}, [y])
    np.testing.assert_allclose(got, _gelu_tanh64(x), rtol=1e-5, atol=1e-6)


def test_graphcore_gelu_gradient() -> None:
    x = _rand(12) * 2
    r = RNG.standard_normal(12)
    _, grads, *_ = simulator_gradients(lambda b, ids: b.aiGraphcore.gelu([ids[0]]), [x], r)
    eps = 1e-4
    x64 = x.astype(np.float64)
    numeric = r * (_gelu_tanh64(x64 + eps) - _gelu_tanh64(x64 - eps)) / (2 * eps)
    np.testing.assert_allclose(next(iter(grads.values())), numeric, rtol=1e-4, atol=1e-5)


# --------------------------------------------------------------- LogSoftmax
def _coerced_log_softmax64(x: np.ndarray, axis: int) -> np.ndarray:
    """Opsets 1-12 semantics: over ``x`` coerced to ``[prod(:axis), prod(axis:)]``."""
    x = np.asarray(x, np.float64)
    f = x.reshape(int(np.prod(x.shape[:axis])), -1)
    s = f - f.max(axis=1, keepdims=True)
    return (s - np.log(np.exp(s).sum(axis=1, keepdims=True))).reshape(x.shape)


@pytest.mark.parametrize(
    ("opset", "axis", "shape"),
    [(11, None, (3, 5)), (11, 2, (2, 3, 4)), (13, None, (2, 3, 4)), (13, 0, (3, 4)),
     (13, 1, (2, 3, 4))],
)  # fmt: skip
def test_logsoftmax_forward(opset: int, axis: int | None, shape: tuple) -> None:
    x = _rand(*shape) * 5
    kw = {} if axis is None else {"axis": axis}
    check_forward(
        lambda b, ids: b.aiOnnx.logsoftmax([ids[0]], **kw),
        [x],
        opsets={"ai.onnx": opset},
        rtol=1e-5,
        atol=1e-5,
    )


@pytest.mark.parametrize("axis", [0, 1])
def test_logsoftmax_coerced_forward_and_gradient(axis: int) -> None:
    """Opset 11 with an axis before the last: onnx.reference applies the opset-13
    semantics to every opset, so the reference here is numpy's coerced 2-D form."""
    x = _rand(2, 3, 4) * 3
    r = RNG.standard_normal(x.shape)

    def build(b, ids):
        return b.aiOnnx.logsoftmax([ids[0]], axis=axis)

    y, grads, *_ = simulator_gradients(build, [x], r)
    np.testing.assert_allclose(y, _coerced_log_softmax64(x, axis), rtol=1e-5, atol=1e-5)
    eps, x64 = 1e-4, x.astype(np.float64)
    numeric = np.zeros_like(x64)
    for k in range(x.size):
        d = np.zeros(x.size)
        d[k] = eps
        d = d.reshape(x.shape)
        plus = np.sum(_coerced_log_softmax64(x64 + d, axis) * r)
        minus = np.sum(_coerced_log_softmax64(x64 - d, axis) * r)
        numeric.reshape(-1)[k] = (plus - minus) / (2 * eps)
    np.testing.assert_allclose(next(iter(grads.values())), numeric, rtol=1e-3, atol=1e-4)


# -------------------------------------------------------------------- Dropout
@pytest.mark.parametrize("opset", [11, 13])
def test_dropout_inference_is_identity(opset: int) -> None:
    x = _rand(4, 6)

    def build(b, ids):
        if opset < 12:
            return b.aiOnnx.dropout([ids[0]], num_outputs=2, ratio=0.4)[1]
        return b.aiOnnx.dropout([ids[0], b.aiOnnx.constant(np.float32(0.4))], num_outputs=2)[1]

    _check_exact(build, [x], opsets={"ai.onnx": opset})
    check_forward(lambda b, ids: b.aiOnnx.dropout([ids[0]], num_outputs=1, ratio=0.4)[0], [x])


def _dropout_training(x: np.ndarray, ratio: float, opset: int, steps: int = 1):
    """(y, mask, dx) per step of ``sum(Dropout(x) * R)`` in a TrainingSession."""
    b = popart.Builder(opsets={"ai.onnx": opset})
    w = b.addInitializedInputTensor(x, "w")
    if opset < 12:
        y, mask = b.aiOnnx.dropout([w], num_outputs=2, ratio=ratio)
    else:
        y, mask = b.aiOnnx.dropout([w, b.aiOnnx.constant(np.float32(ratio))], num_outputs=2)
    r = RNG.standard_normal(x.shape).astype(np.float32)
    loss = b.aiGraphcore.identityloss(
        [b.aiOnnx.mul([y, b.addInitializedInputTensor(r, "R")])],
        reduction=popart.ReductionType.Sum,
    )
    grad = popart.reservedGradientPrefix() + w
    art = popart.AnchorReturnType("ALL")
    s = popart.TrainingSession(
        fnModel=b.getModelProto(),
        dataFlow=popart.DataFlow(1, {y: art, mask: art, grad: art}),
        deviceInfo=device(),
        loss=loss,
        optimizer=popart.ConstSGD(0.0),
    )
    s.prepareDevice()
    s.weightsFromHost()
    out = []
    for _ in range(steps):
        anchors = s.initAnchorArrays()
        s.run(popart.PyStepIO({}, anchors))
        out.append((anchors[y], anchors[mask], anchors[grad]))
    return out, r


@pytest.mark.parametrize(("ratio", "opset"), [(0.3, 11), (0.5, 13)])
def test_dropout_training_statistics_and_gradient(ratio: float, opset: int) -> None:
    x = _rand(40, 50, low=0.1)
    (step1, step2), r = _dropout_training(x, ratio, opset, steps=2)
    y, mask, dx = step1
    assert mask.dtype == np.bool_
    kept = mask.mean()
    # 2000 Bernoulli draws: the kept fraction is within 4 standard deviations
    assert abs(kept - (1 - ratio)) < 4 * np.sqrt(ratio * (1 - ratio) / mask.size)
    np.testing.assert_allclose(y, np.where(mask, x / (1 - ratio), 0), rtol=1e-6)
    np.testing.assert_allclose(dx, np.where(mask, r / (1 - ratio), 0), rtol=1e-6)
    np.testing.assert_allclose(step2[0], np.where(step2[1], x / (1 - ratio), 0), rtol=1e-6)


def test_dropout_new_mask_each_step() -> None:
    """PopART draws a new mask every step (its seed advances); one fixed mask for the
    whole training would drop the same units forever."""
    (step1, step2), _ = _dropout_training(_rand(20, 30, low=0.1), 0.5, 13, steps=2)
    assert (step2[1] != step1[1]).any(), "the second step drew the same mask as the first"


# --------------------------------------------------------------------- Gather
@pytest.mark.parametrize(
    ("shape", "axis", "indices"),
    [((5, 3), 0, [0, 4, -1, 2]), ((5, 3), 1, [[2, 0], [-3, 1]]), ((2, 4, 3), -2, [3, 3, 0]),
     ((2, 4, 3), 2, 1)],
)  # fmt: skip
def test_gather_constant_indices(shape: tuple, axis: int, indices: list) -> None:
    check_forward(
        lambda b, ids: b.aiOnnx.gather(ids, axis=axis),
        [_rand(*shape), np.asarray(indices, np.int64)],
    )


@pytest.mark.parametrize(
    ("shape", "axis", "indices"),
    [((6, 3), 0, [0, 5, -1, 2, 2]), ((2, 5, 3), 1, [[4, -5], [1, 1]]), ((3, 4), -1, [3])],
)
def test_gather_device_indices(shape: tuple, axis: int, indices: list) -> None:
    check_forward(
        lambda b, ids: b.aiOnnx.gather(ids, axis=axis),
        [_rand(*shape), np.asarray(indices, np.int32)],
    )


def test_gather_folds_shape_arithmetic() -> None:
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exported models do."""

    def build(b, ids):
        shape = b.aiOnnx.shape([ids[0]])
        first = b.aiOnnx.gather([shape, b.aiOnnx.constant(_i64(0))], axis=0)
        dims = b.aiOnnx.concat([first, b.aiOnnx.constant(_i64(-1))], axis=0)
        return b.aiOnnx.reshape([ids[0], dims])

    check_forward(build, [_rand(2, 3, 4)])


# --------------------------------------------------------------- Concat etc.
@pytest.mark.parametrize(
    ("shapes", "axis"),
    [([(2, 3), (4, 3)], 0), ([(2, 3), (2, 1), (2, 2)], 1), ([(2, 3, 1), (2, 3, 2)], -1)],
)
def test_concat_forward(shapes: list, axis: int) -> None:
    check_forward(lambda b, ids: b.aiOnnx.concat(ids, axis=axis), [_rand(*s) for s in shapes])


def test_concat_with_constant() -> None:
    c = _rand(1, 3)
    check_forward(
        lambda b, ids: b.aiOnnx.concat([ids[0], b.aiOnnx.constant(c)], axis=0), [_rand(2, 3)]
    )


@pytest.mark.parametrize(
    ("starts", "ends", "axes"),
    [([1], [3], [0]), ([0, -3], [2, 100], None), ([1, -4], [3, -1], [0, 1])],
)
def test_slice_attributes(starts: list, ends: list, axes: list | None) -> None:
    kw = {"starts": starts, "ends": ends}
    if axes is not None:
        kw["axes"] = axes
    check_forward(
        lambda b, ids: b.aiOnnx.slice([ids[0]], **kw), [_rand(4, 5)], opsets={"ai.onnx": 9}
    )


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [
        ([1], [4], [1], [2]),
        ([-1], [-100], [0], [-1]),
        ([4, 0], [0, 5], [1, 0], [-2, 3]),
        ([10, 1], [-10, 2], [0, 2], [-3, 1]),
        ([0, 0], [2, 5], None, None),
    ],
)
def test_slice_inputs(starts: list, ends: list, axes: list | None, steps: list | None) -> None:
    x = _rand(6, 5, 3)
    ins = [x, _i64(*starts), _i64(*ends)]
    if axes is not None:
        ins.append(_i64(*axes))
    if steps is not None:
        ins.append(_i64(*steps))
    check_forward(lambda b, ids: b.aiOnnx.slice(ids), ins, opsets=OPS13)


@pytest.mark.parametrize(("axis", "opset"), [(0, 11), (1, 11), (2, 11), (3, 11), (-1, 13)])
def test_flatten(axis: int, opset: int) -> None:
    check_forward(
        lambda b, ids: b.aiOnnx.flatten([ids[0]], axis=axis),
        [_rand(2, 3, 4)],
        opsets={"ai.onnx": opset},
    )


@pytest.mark.parametrize(
    ("opset", "axes"), [(11, [1]), (11, None), (11, [-1, 0]), (13, [3]), (13, None)]
)
def test_squeeze(opset: int, axes: list | None) -> None:
    x = _rand(1, 1, 3, 1)

    def build(b, ids):
        if opset < 13:
            return b.aiOnnx.squeeze([ids[0]], **({} if axes is None else {"axes": axes}))
        extra = [] if axes is None else [b.aiOnnx.constant(_i64(*axes))]
        return b.aiOnnx.squeeze([ids[0], *extra])

    check_forward(build, [x], opsets={"ai.onnx": opset})


@pytest.mark.parametrize(("opset", "axes"), [(11, [0]), (11, [-1, 1]), (13, [0, 3]), (13, [-1])])
def test_unsqueeze(opset: int, axes: list) -> None:
    def build(b, ids):
        if opset < 13:
            return b.aiOnnx.unsqueeze([ids[0]], axes=axes)
        return b.aiOnnx.unsqueeze([ids[0], b.aiOnnx.constant(_i64(*axes))])

    check_forward(build, [_rand(2, 3)], opsets={"ai.onnx": opset})


@pytest.mark.parametrize(
    ("src", "shape"), [((3, 1), (3, 4)), ((4,), (2, 3, 4)), ((2, 1), (1, 1, 5))]
)
def test_expand(src: tuple, shape: tuple) -> None:
    check_forward(lambda b, ids: b.aiOnnx.expand(ids), [_rand(*src), _i64(*shape)])


def test_shape_with_start_folds() -> None:
    _check_exact(
        lambda b, ids: b.aiOnnx.shape([ids[0]], start=1), [_rand(2, 3, 4)], {"ai.onnx": 15}
    )


# ----------------------------------------------------------------- reductions
REDUCE_CASES = [
    (11, [1], 1, 0),
    (11, [0, -1], 0, 0),
    (11, None, 1, 0),
    (11, None, 0, 0),
    (18, [2], 0, 0),
    (18, None, 1, 1),
    (18, None, 0, 0),
]


@pytest.mark.parametrize(("opset", "axes", "keepdims", "noop"), REDUCE_CASES)
@pytest.mark.parametrize("op", ["reducesum", "reducemean", "reducemax", "reducemin"])
def test_reduce_forward(op: str, opset: int, axes: list | None, keepdims: int, noop: int) -> None:
    opset = 13 if op == "reducesum" and opset == 18 else opset
    x = _rand(2, 3, 4)

    def build(b, ids):
        fn = getattr(b.aiOnnx, op)
        kw = {"keepdims": keepdims}
        if noop:
            kw["noop_with_empty_axes"] = noop
        if opset < 13 or (op != "reducesum" and opset < 18):
            return fn([ids[0]], **({} if axes is None else {"axes": axes}), **kw)
        extra = [] if axes is None else [b.aiOnnx.constant(_i64(*axes))]
        return fn([ids[0], *extra], **kw)

    check_forward(build, [x], opsets={"ai.onnx": opset}, rtol=1e-5, atol=1e-5)


def test_reduce_int32() -> None:
    x = RNG.integers(-5, 5, (3, 4)).astype(np.int32)
    _check_exact(lambda b, ids: b.aiOnnx.reducesum([ids[0]], axes=[1], keepdims=0), [x])
    _check_exact(lambda b, ids: b.aiOnnx.reducemax([ids[0]], axes=[0]), [x])


# ------------------------------------------------------------------ gradients
@pytest.mark.parametrize(
    ("op", "low"), [("neg", None), ("abs", 0.1), ("reciprocal", 0.5), ("erf", None)]
)
def test_unary_gradients(op: str, low: float | None) -> None:
    check_gradients(lambda b, ids: getattr(b.aiOnnx, op)([ids[0]]), [_rand(3, 4, low=low)])


@pytest.mark.parametrize(("xs", "ys"), [((3, 4), (3, 4)), ((3, 4), (4,)), ((4,), (2, 4))])
def test_pow_gradients(xs: tuple, ys: tuple) -> None:
    check_gradients(
        lambda b, ids: b.aiOnnx.pow(ids),
        [_positive(*xs), RNG.uniform(-2, 2, ys).astype(np.float32)],
    )


def test_pow_gradient_constant_exponent() -> None:
    check_gradients(lambda b, ids: b.aiOnnx.pow(ids), [_rand(3, 4, low=0.2), _i64(2)], opsets=OPS13)


def test_pow_gradient_int32_exponent() -> None:
    """An INT32 device exponent: the base's gradient casts it as the forward does."""
    e = RNG.integers(0, 4, (4,)).astype(np.int32)
    check_gradients(lambda b, ids: b.aiOnnx.pow(ids), [_positive(3, 4), e], opsets=OPS13)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_gradients(op: str) -> None:
    check_gradients(
        lambda b, ids: getattr(b.aiOnnx, op)(ids),
        [_rand(3, 4), _rand(4), _rand(3, 1)],
        opsets=OPS13,
    )


def test_where_gradients() -> None:
    cond = RNG.random((3, 4)) < 0.5
    check_gradients(lambda b, ids: b.aiOnnx.where(ids), [cond, _rand(3, 4), _rand(4)])


def test_cast_gradient() -> None:
    check_gradients(lambda b, ids: b.aiOnnx.cast([ids[0]], to=TensorProto.FLOAT), [_rand(3, 4)])


def test_clip_int32() -> None:
    x = RNG.integers(-5, 6, (10,)).astype(np.int32)

    def build(b, ids):
        lo, hi = b.aiOnnx.constant(np.int32(-2)), b.aiOnnx.constant(np.int32(3))
        return b.aiOnnx.clip([ids[0], lo, hi])

    _check_exact(build, [x], opsets=OPS13)


@pytest.mark.parametrize("opset", [10, 11])
def test_clip_gradient(opset: int) -> None:
    x = np.array([-1.2, -0.6, -0.2, 0.1, 0.3, 0.9, 1.5, -0.9], np.float32)

    def build(b, ids):
        if opset < 11:
            return b.aiOnnx.clip([ids[0]], min=-0.5, max=0.6)
        lo, hi = b.aiOnnx.constant(np.float32(-0.5)), b.aiOnnx.constant(np.float32(0.6))
        return b.aiOnnx.clip([ids[0], lo, hi])

    check_gradients(build, [x], opsets={"ai.onnx": opset})


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_gradients(approximate: str) -> None:
    check_gradients(
        lambda b, ids: b.aiOnnx.gelu([ids[0]], approximate=approximate),
        [_rand(3, 4) * 2],
        opsets=OPS20,
    )


@pytest.mark.parametrize(("opset", "axis"), [(11, 2), (13, 0), (13, -1)])
def test_logsoftmax_gradients(opset: int, axis: int) -> None:
    check_gradients(
        lambda b, ids: b.aiOnnx.logsoftmax([ids[0]], axis=axis),
        [_rand(2, 3, 4)],
        opsets={"ai.onnx": opset},
    )


@pytest.mark.parametrize(
    ("axis", "indices"), [(0, _i64(0, 3, -1, 0, 0)), (1, np.array([[2, 0], [2, -3]], np.int64))]
)
def test_gather_gradient_constant_indices(axis: int, indices: np.ndarray) -> None:
    check_gradients(lambda b, ids: b.aiOnnx.gather(ids, axis=axis), [_rand(4, 3), indices])


@pytest.mark.parametrize("axis", [0, 1])
def test_gather_gradient_device_indices(axis: int) -> None:
    idx = np.array([[1, -1], [1, 0]], np.int32)
    check_gradients(lambda b, ids: b.aiOnnx.gather(ids, axis=axis), [_rand(3, 3, 2), idx])


def test_gradient_accumulates_over_views() -> None:
    """x read by a reversed Slice and by Concat directly: the two gradients add."""

    def build(b, ids):
        c = [b.aiOnnx.constant(_i64(v)) for v in (3, 0, 0, -1)]
        rev = b.aiOnnx.slice([ids[0], *c])
        return b.aiOnnx.concat([rev, ids[0]], axis=0)

    check_gradients(build, [_rand(4, 2)], opsets=OPS13)


def test_gather_gradient_scalar_indices() -> None:
    check_gradients(
        lambda b, ids: b.aiOnnx.gather([ids[0], b.aiOnnx.constant(np.int64(-1))], axis=1),
        [_rand(3, 4)],
    )
    check_gradients(lambda b, ids: b.aiOnnx.gather(ids), [_rand(3, 4), np.array(2, np.int32)])


def test_concat_gradient() -> None:
    check_gradients(lambda b, ids: b.aiOnnx.concat(ids, axis=1), [_rand(2, 3), _rand(2, 2)])


@pytest.mark.parametrize(
    ("starts", "ends", "axes", "steps"),
    [([1], [4], [1], [2]), ([4, 0], [0, 5], [1, 0], [-2, 3]), ([-1], [-100], [0], [-1])],
)
def test_slice_gradient(starts: list, ends: list, axes: list, steps: list) -> None:
    check_gradients(
        lambda b, ids: b.aiOnnx.slice(ids),
        [_rand(5, 5), _i64(*starts), _i64(*ends), _i64(*axes), _i64(*steps)],
        opsets=OPS13,
    )


def test_slice_gradient_attributes() -> None:
    check_gradients(
        lambda b, ids: b.aiOnnx.slice([ids[0]], starts=[1, 0], ends=[3, -1]),
        [_rand(4, 3)],
        opsets={"ai.onnx": 9},
    )


@pytest.mark.parametrize("case", ["flatten", "squeeze", "unsqueeze", "expand"])
def test_view_gradients(case: str) -> None:
    builds = {
        "flatten": (lambda b, ids: b.aiOnnx.flatten([ids[0]], axis=2), [_rand(2, 3, 2)]),
        "squeeze": (lambda b, ids: b.aiOnnx.squeeze([ids[0]], axes=[1]), [_rand(3, 1, 2)]),
        "unsqueeze": (lambda b, ids: b.aiOnnx.unsqueeze([ids[0]], axes=[0, 3]), [_rand(3, 2)]),
        "expand": (lambda b, ids: b.aiOnnx.expand(ids), [_rand(3, 1), _i64(2, 3, 4)]),
    }
    build, inputs = builds[case]
    check_gradients(build, inputs)


@pytest.mark.parametrize(
    ("opset", "axes", "keepdims"), [(11, [1], 1), (11, None, 0), (18, [0, 2], 0)]
)
@pytest.mark.parametrize("op", ["reducesum", "reducemean", "reducemax", "reducemin"])
def test_reduce_gradients(op: str, opset: int, axes: list | None, keepdims: int) -> None:
    opset = 13 if op == "reducesum" and opset == 18 else opset

    def build(b, ids):
        fn = getattr(b.aiOnnx, op)
        if opset < 13 or (op != "reducesum" and opset < 18):
            return fn([ids[0]], **({} if axes is None else {"axes": axes}), keepdims=keepdims)
        extra = [] if axes is None else [b.aiOnnx.constant(_i64(*axes))]
        return fn([ids[0], *extra], keepdims=keepdims)

    # max and min: inputs without near-ties, whose finite differences would split
    x = _distinct(2, 3, 4) if op in ("reducemax", "reducemin") else _rand(2, 3, 4)
    check_gradients(build, [x], opsets={"ai.onnx": opset})


# ----------------------------------------------------------------- bad inputs
# The messages must name the op and node and the value found; the patterns accept any
# reasonable wording of what was required.
def test_bad_reduce_axes() -> None:
    x = _rand(2, 3)
    proto = _bad_model("ReduceSum", {"x": x}, {"axes": _i64(2)})
    _raises(proto, {"x": x}, r"ReduceSum \(node 'bad'\)", r"\b2\b", "-2 <= axis < 2")


def test_slice_starts_must_be_constant() -> None:
    x = _rand(4, 3)
    starts = np.array([1], np.int32)
    proto = _bad_model("Slice", {"x": x, "s": starts}, {"e": _i64(3)})
    _raises(proto, {"x": x, "s": starts}, r"Slice \(node 'bad'\)", "starts", "built", "hint")


def test_slice_zero_step() -> None:
    x = _rand(4, 3)
    proto = _bad_model("Slice", {"x": x}, {"s": _i64(0), "e": _i64(2), "a": _i64(0), "st": _i64(0)})
    _raises(proto, {"x": x}, r"Slice \(node 'bad'\)", r"step.*\b0\b")


def test_gather_constant_index_out_of_range() -> None:
    x = _rand(4, 3)
    proto = _bad_model("Gather", {"x": x}, {"i": _i64(1, 3)}, axis=1)
    _raises(proto, {"x": x}, r"Gather \(node 'bad'\)", r"\b3\b", "out of range", "axis 1")


def test_gather_device_indices_need_float_data() -> None:
    x = RNG.integers(0, 4, (4, 3)).astype(np.int32)
    i = np.array([0, 1], np.int32)
    proto = _bad_model("Gather", {"x": x, "i": i})
    _raises(proto, {"x": x, "i": i}, r"Gather \(node 'bad'\)", "'x'", "FLOAT")


def test_concat_shape_mismatch() -> None:
    a, c = _rand(2, 3), _rand(3, 2)
    proto = _bad_model("Concat", {"a": a, "c": c}, axis=0)
    _raises(proto, {"a": a, "c": c}, r"Concat \(node 'bad'\)", r"\[3, 2\]", "axis 0")


def test_concat_axis_out_of_range() -> None:
    a = _rand(2, 3)
    proto = _bad_model("Concat", {"a": a}, axis=2)
    _raises(proto, {"a": a}, r"Concat \(node 'bad'\)", "axis 2", "out of range")


def test_squeeze_non_unit_axis() -> None:
    x = _rand(2, 1)
    proto = _bad_model("Squeeze", {"x": x}, opset=11, axes=[0])
    _raises(proto, {"x": x}, r"Squeeze \(node 'bad'\)", r"\[2, 1\]|size 2", "size.1")


def test_expand_incompatible() -> None:
    x = _rand(3, 2)
    proto = _bad_model("Expand", {"x": x}, {"s": _i64(3, 4)})
    _raises(proto, {"x": x}, r"Expand \(node 'bad'\)", r"\[3, 2\]", r"\[3, 4\]")


def test_cast_unsupported_type() -> None:
    x = _rand(2)
    proto = _bad_model("Cast", {"x": x}, to=TensorProto.DOUBLE)
    _raises(proto, {"x": x}, r"Cast \(node 'bad'\)", "DOUBLE|11", "supported")


def test_gelu_bad_approximate() -> None:
    x = _rand(2)
    proto = _bad_model("Gelu", {"x": x}, opset=20, approximate="fast")
    _raises(proto, {"x": x}, r"Gelu \(node 'bad'\)", "'fast'", "'none' or 'tanh'")


def test_dropout_bad_ratio() -> None:
    x = _rand(2)
    proto = _bad_model("Dropout", {"x": x}, opset=11, ratio=1.5)
    _raises(proto, {"x": x}, r"Dropout \(node 'bad'\)", "ratio 1.5", r"0 <= ratio < 1|\[0, 1\)")


def test_flatten_bad_axis() -> None:
    x = _rand(2, 3)
    proto = _bad_model("Flatten", {"x": x}, opset=11, axis=3)
    _raises(proto, {"x": x}, r"Flatten \(node 'bad'\)", "axis 3", "rank.2")
