"""popnn: non-linearities, gradients, softmax, losses and accuracy against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import EngineError, GraphError, TypeMismatchError
from poplar_api.popnn import (
    MASKED_LABEL_CODE,
    LossType,
    NonLinearityType,
    calcAccuracy,
    calcLoss,
    nonLinearity,
    nonLinearityInPlace,
    nonLinearityInputGradient,
)

NL = NonLinearityType
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def np_forward(kind, x):
    x = x.astype(np.float64)
    if kind is NL.RELU:
        return np.maximum(x, 0)
    if kind is NL.SIGMOID:
        return 1 / (1 + np.exp(-x))
    if kind is NL.TANH:
        return np.tanh(x)
    if kind is NL.GELU:
        return 0.5 * x * (1 + np.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x**3)))
    if kind is NL.SWISH:
        return x / (1 + np.exp(-x))
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def np_grad(kind, x, g):
    """Input gradient from the forward input ``x`` (finite-difference free, by hand)."""
    x, g = x.astype(np.float64), g.astype(np.float64)
    if kind is NL.RELU:
        return g * (x > 0)
    if kind is NL.SIGMOID:
        s = 1 / (1 + np.exp(-x))
        return g * s * (1 - s)
    if kind is NL.TANH:
        return g * (1 - np.tanh(x) ** 2)
    if kind is NL.GELU:
        # d/dx of 0.5 x (1 + tanh(c (x + a x^3)))
        u = SQRT_2_OVER_PI * (x + 0.044715 * x**3)
        du = SQRT_2_OVER_PI * (1 + 3 * 0.044715 * x**2)
        return g * (0.5 * (1 + np.tanh(u)) + 0.5 * x * (1 - np.tanh(u) ** 2) * du)
    if kind is NL.SWISH:  # d/dx of x sigmoid(x)
        s = 1 / (1 + np.exp(-x))
        return g * (s + x * s * (1 - s))
    y = np_forward(kind, x)
    return y * (g - (g * y).sum(axis=-1, keepdims=True))


def _scatter(graph, t, tiles=8):
    flat = t.flatten()
    for i in range(flat.numElements()):
        graph.setTileMapping(flat[i], (i * 5 // 7) % tiles)


class Harness:
    """Build a graph on the tiny machine, then run it with host handles."""

    def __init__(self, preset: str = "tiny") -> None:
        self.device = IPUModel(preset).createDevice()
        self.graph = Graph(self.device.getTarget())
        self.seq = prog.Sequence()
        self.reads: dict[str, tuple] = {}

    def var(self, type_, shape, name, tile=None):
        t = self.graph.addVariable(type_, list(shape), name)
        if tile is None:
            _scatter(self.graph, t)
        else:
            self.graph.setTileMapping(t, tile)
        self.graph.createHostWrite(name, t)
        return t

    def read(self, name, t):
        self.graph.createHostRead(f"{name}-read", t)
        self.reads[name] = (t.shape(), t.elementType().numpy)

    def run(self, **inputs):
        engine = Engine(self.graph, self.seq)
        engine.load(self.device)
        for name, value in inputs.items():
            engine.writeTensor(name, value)
        engine.run(0)
        out = {}
        for name, (shape, dtype) in self.reads.items():
            buf = np.zeros(shape, dtype)
            engine.readTensor(f"{name}-read", buf)
            out[name] = buf
        self.engine = engine
        return out


@pytest.mark.parametrize("kind", list(NL))
@pytest.mark.parametrize("type_", [FLOAT, HALF])
def test_forward_and_gradient_match_numpy(kind, type_):
    rng = np.random.default_rng(7)
    h = Harness()
    x = h.var(type_, (5, 9), "x")
    g = h.var(type_, (5, 9), "g")
    y = nonLinearity(h.graph, kind, x, h.seq)
    # Gradient takes the forward output (GELU, SWISH: the forward input).
    act = x if kind in (NL.GELU, NL.SWISH) else y
    dx = nonLinearityInputGradient(h.graph, kind, act, g, h.seq)
    h.read("y", y)
    h.read("dx", dx)
    xv = rng.normal(size=(5, 9)).astype(type_.numpy)
    gv = rng.normal(size=(5, 9)).astype(type_.numpy)
    res = h.run(x=xv, g=gv)
    tol = dict(rtol=1e-2, atol=4e-3) if type_ == HALF else dict(rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(res["y"].astype(np.float64), np_forward(kind, xv), **tol)
    np.testing.assert_allclose(res["dx"].astype(np.float64), np_grad(kind, xv, gv), **tol)


def test_plain_softmax_of_a_view_and_in_place_relu():
    rng = np.random.default_rng(8)
    h = Harness()
    x = h.var(FLOAT, (6, 4), "x")
    view = x.transpose()  # rows of the view are columns of x
    y = nonLinearity(h.graph, NL.SOFTMAX, view, h.seq)
    nonLinearityInPlace(h.graph, NL.RELU, x, h.seq)
    h.read("y", y)
    h.read("x", x)
    xv = rng.normal(size=(6, 4)).astype(np.float32)
    res = h.run(x=xv)
    e = np.exp(xv.T.astype(np.float64))
    np.testing.assert_allclose(res["y"], e / e.sum(axis=1, keepdims=True), rtol=1e-5)
    np.testing.assert_array_equal(res["x"], np.maximum(xv, 0))


def test_stable_softmax_survives_large_inputs():
    h = Harness()
    x = h.var(FLOAT, (2, 3), "x", tile=1)
    y = nonLinearity(h.graph, NL.SOFTMAX_STABLE, x, h.seq)
    h.read("y", y)
    xv = np.array([[1000.0, 1001.0, 1002.0], [-5.0, 0.0, 5.0]], np.float32)
    res = h.run(x=xv)
    # softmax(1000, 1001, 1002) = softmax(0, 1, 2)
    e = np.exp(np.array([[0.0, 1.0, 2.0], [-5.0, 0.0, 5.0]]))
    np.testing.assert_allclose(res["y"], e / e.sum(axis=1, keepdims=True), rtol=1e-6)


@pytest.mark.parametrize("loss_type", list(LossType))
@pytest.mark.parametrize("label_type", [UNSIGNED_INT, INT])
def test_calc_loss_values_deltas_and_correct_count(loss_type, label_type):
    rng = np.random.default_rng(9)
    batch, classes = 7, 5
    h = Harness()
    probs = h.var(FLOAT, (batch, classes), "p")
    labels = h.var(label_type, (batch,), "labels", tile=2)
    loss = h.var(FLOAT, (batch,), "loss", tile=3)
    deltas = h.var(FLOAT, (batch, classes), "deltas")
    scale = h.var(FLOAT, (1,), "scale", tile=4)
    count = h.var(label_type, (1,), "count", tile=6)
    calcLoss(h.graph, probs, labels, loss, deltas, scale, count, loss_type, h.seq)
    h.read("loss", loss)
    h.read("deltas", deltas)
    h.read("count", count)
    logits = rng.normal(size=(batch, classes))
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    lab = rng.integers(0, classes, size=batch)
    lab[:3] = p[:3].argmax(axis=1)  # at least three correct
    masked_code = -1 if label_type == INT else MASKED_LABEL_CODE
    lab_dev = lab.astype(np.int64)
    lab_dev[4] = masked_code
    res = h.run(
        p=p.astype(np.float32),
        labels=lab_dev.astype(label_type.numpy),
        scale=np.array([0.5], np.float32),
        count=np.array([10], label_type.numpy),
    )
    onehot = np.eye(classes)[lab]
    if loss_type is LossType.CROSS_ENTROPY_LOSS:
        exp_loss = -np.log(p[np.arange(batch), lab])
        exp_delta = 0.5 * (p - onehot)
    else:
        exp_delta = p - onehot
        exp_loss = 0.5 * (exp_delta**2).sum(axis=1)
    exp_loss[4] = 0
    exp_delta[4] = 0
    np.testing.assert_allclose(res["loss"], exp_loss, rtol=1e-5)
    np.testing.assert_allclose(res["deltas"], exp_delta, rtol=1e-5, atol=1e-7)
    correct = (p.argmax(axis=1) == lab) & (np.arange(batch) != 4)
    assert int(res["count"][0]) == 10 + int(correct.sum())


def test_calc_accuracy_counts_first_maximum():
    h = Harness()
    probs = h.var(HALF, (4, 3), "p")
    labels = h.var(UNSIGNED_INT, (4,), "labels", tile=0)
    count = h.var(UNSIGNED_INT, (1,), "count", tile=5)
    calcAccuracy(h.graph, probs, labels, count, h.seq)
    h.read("count", count)
    p = np.array([[1, 1, 0], [0, 2, 2], [3, 0, 1], [0, 0, 1]], np.float16)
    # first maxima: 0, 1, 0, 2; labels 0, 2, 0, 1 -> rows 0 and 2 correct.
    res = h.run(p=p, labels=np.array([0, 2, 0, 1], np.uint32), count=np.zeros(1, np.uint32))
    assert int(res["count"][0]) == 2


def test_bad_label_fails_the_run_with_an_engine_error():
    h = Harness()
    probs = h.var(FLOAT, (2, 3), "p")
    labels = h.var(UNSIGNED_INT, (2,), "labels", tile=0)
    loss = h.var(FLOAT, (2,), "loss", tile=0)
    deltas = h.var(FLOAT, (2, 3), "deltas", tile=0)
    calcLoss(h.graph, probs, labels, loss, deltas, lossType=LossType.SUM_SQUARED_LOSS, prog=h.seq)
    with pytest.raises(EngineError, match="LossTransform"):
        h.run(p=np.ones((2, 3), np.float32), labels=np.array([0, 3], np.uint32))


# ------------------------------------------------------------------------ estimators


def test_nonlinearity_estimate_is_the_unary_1d_formula():
    h = Harness()
    x = h.graph.addVariable(FLOAT, [100], "x")
    h.graph.setTileMapping(x, 2)
    nonLinearity(h.graph, NL.SIGMOID, x, h.seq, "sig")
    h.run()
    rec = next(r for r in h.engine.getTrace().records if r.name == "sig/Nonlinearity")
    # SIGMOID runs popops::UnaryOp1D (NonLinearity.cpp isPopops): its estimator,
    # (17 + iceil(iceil(100, 6) = 17, unroll 2) * 12) * 6 + 9 + 11
    expected = (17 + math.ceil(17 / 2) * 12) * 6 + 9 + 11
    assert rec.active_cycles[2] == expected
    assert rec.tile_cycles[2] == expected  # a MultiVertex estimate is already tile cycles


def test_softmax_estimate_is_the_documented_derivation():
    h = Harness()
    x = h.graph.addVariable(FLOAT, [3, 10], "x")
    h.graph.setTileMapping(x, 1)
    nonLinearity(h.graph, NL.SOFTMAX_STABLE, x, h.seq, "sm")
    h.run()
    rec = next(r for r in h.engine.getTrace().records if r.name == "sm/SoftMax")
    # per row: 20 + 10 + iceil(10, 2) * (max 3 + sub 1 + exp 6 + acc 1 + scale 1)
    per_row = 20 + 10 + 5 * (3 + 1 + 6 + 1 + 1)
    assert rec.active_cycles[1] == 3 * per_row
    assert rec.tile_cycles[1] == 6 * per_row  # three worker vertices, one per context


# ---------------------------------------------------------------------------- errors


def test_errors_name_the_problem():
    h = Harness()
    ints = h.var(INT, (2, 2), "i", tile=0)
    with pytest.raises(TypeMismatchError, match="support float and half"):
        nonLinearity(h.graph, NL.RELU, ints, h.seq)
    x = h.var(FLOAT, (2, 2), "x", tile=0)
    with pytest.raises(GraphError, match="not a NonLinearityType"):
        nonLinearity(h.graph, "RELU", x, h.seq)
    labels = h.var(FLOAT, (2,), "l", tile=0)
    with pytest.raises(TypeMismatchError, match="labels must be unsigned int or int"):
        calcAccuracy(h.graph, x, labels, x, h.seq)
    bad_labels = h.var(UNSIGNED_INT, (3,), "bl", tile=0)
    with pytest.raises(GraphError, match="one label per row"):
        calcAccuracy(h.graph, x, bad_labels, x, h.seq)


def test_in_place_softmax_on_mk2():
    rng = np.random.default_rng(10)
    h = Harness("mk2")
    x = h.graph.addVariable(FLOAT, [4, 300], "x")
    for col in range(3):  # rows spread over three far-apart tiles
        h.graph.setTileMapping(x.slice(col * 100, (col + 1) * 100, 1), col * 700)
    h.graph.createHostWrite("x", x)
    nonLinearityInPlace(h.graph, NL.SOFTMAX_STABLE, x, h.seq)
    h.read("x", x)
    xv = rng.normal(size=(4, 300)).astype(np.float32)
    res = h.run(x=xv)
    np.testing.assert_allclose(res["x"], np_forward(NL.SOFTMAX, xv), rtol=1e-5)


def test_loss_layer_and_gradient_estimates_are_the_documented_derivations():
    h = Harness()
    probs = h.var(FLOAT, (3, 5), "p", tile=0)
    labels = h.var(UNSIGNED_INT, (3,), "labels", tile=0)
    loss = h.var(FLOAT, (3,), "loss", tile=0)
    deltas = h.var(FLOAT, (3, 5), "deltas", tile=0)
    count = h.var(UNSIGNED_INT, (1,), "count", tile=0)
    calcLoss(h.graph, probs, labels, loss, deltas, None, count, LossType.CROSS_ENTROPY_LOSS,
             h.seq, "ce")  # fmt: skip
    act = h.var(FLOAT, (100,), "act", tile=2)
    nonLinearityInputGradient(h.graph, NL.RELU, act, act, h.seq, "g")
    h.run(p=np.full((3, 5), 0.2, np.float32), labels=np.zeros(3, np.uint32))
    records = {r.name: r for r in h.engine.getTrace().records if r.kind == "compute"}
    # loss row: 20 + iceil(5, 2) * (subtract 1 + scale 1) + log 12 + store 5 = 43
    # arg-max row: 20 + iceil(5, 2) * 3 + 5 = 34; three rows of each on tile 0
    assert records["ce/LossLayer"].active_cycles[0] == 3 * (20 + 3 * 2 + 12 + 5) + 3 * (
        20 + 3 * 3 + 5
    )
    # BinaryOp1D shape: W * (29 + iceil(iceil(100, 6) = 17, 2) * (2 + 2)) + 11
    # NonLinearityGrad1D (popnnCycleEstimators.cpp), RELU float, n = 100: 50 vectors,
    # 9 per worker, op 3: worker 3+5+2+3+3+3+1 + (4 + 8*3 + 1) + 2+2 (no remainder)
    worker = 3 + 5 + 2 + 3 + 3 + 3 + 1 + (4 + 8 * 3 + 1) + 2 + 2
    assert records["g/NonLinearityGrad"].active_cycles[2] == 9 + 6 * worker
