"""popnn: non-linearities, gradients, softmax, losses and accuracy against numpy."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import VertexError
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.popnn import (
    MASKED_LABEL_CODE,
    LossType,
    NonLinearityType,
    argMax,
    calcAccuracy,
    calcLoss,
    maxAndArgMax,
    minAndArgMin,
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


@pytest.mark.parametrize("kind", [k for k in NL if k is not NL.SOFTMAX_SCALED])
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


def test_bad_label_fails_the_run_naming_the_index():
    h = Harness()
    probs = h.var(FLOAT, (2, 3), "p")
    labels = h.var(UNSIGNED_INT, (2,), "labels", tile=0)
    loss = h.var(FLOAT, (2,), "loss", tile=0)
    deltas = h.var(FLOAT, (2, 3), "deltas", tile=0)
    calcLoss(h.graph, probs, labels, loss, deltas, lossType=LossType.SUM_SQUARED_LOSS, prog=h.seq)
    with pytest.raises(VertexError, match=r"'indices' holds 3 at position 1, outside .*\[0, 3\)"):
        h.run(p=np.ones((2, 3), np.float32), labels=np.array([0, 3], np.uint32))


@pytest.mark.parametrize("loss_type", list(LossType))
def test_masked_label_of_a_single_item_batch_gives_zero_loss_and_deltas(loss_type):
    h = Harness()
    probs = h.var(FLOAT, (1, 4), "p")
    labels = h.var(INT, (1,), "labels", tile=0)
    loss = h.var(FLOAT, (1,), "loss", tile=0)
    deltas = h.var(FLOAT, (1, 4), "deltas", tile=0)
    calcLoss(h.graph, probs, labels, loss, deltas, lossType=loss_type, prog=h.seq)
    h.read("loss", loss)
    h.read("deltas", deltas)
    res = h.run(p=np.full((1, 4), 0.25, np.float32), labels=np.array([-1], np.int32))
    np.testing.assert_array_equal(res["loss"], [0])
    np.testing.assert_array_equal(res["deltas"], np.zeros((1, 4)))


def test_scaled_softmax_and_cross_entropy_with_model_output_scaling():
    rng = np.random.default_rng(11)
    h = Harness()
    x = h.var(FLOAT, (4, 6), "x")
    g = h.var(FLOAT, (4, 6), "g")
    labels = h.var(UNSIGNED_INT, (4,), "labels", tile=1)
    y = nonLinearity(h.graph, NL.SOFTMAX_SCALED, x, h.seq)
    dx = nonLinearityInputGradient(h.graph, NL.SOFTMAX_SCALED, y, g, h.seq)
    loss = h.var(FLOAT, (4,), "loss", tile=2)
    deltas = h.var(FLOAT, (4, 6), "deltas")
    ds = h.var(FLOAT, (1,), "ds", tile=3)
    mos = h.graph.addConstant(FLOAT, [1], 62000.0, "mos")
    h.graph.setTileMapping(mos, 4)
    calcLoss(h.graph, y, labels, loss, deltas, ds, None, LossType.CROSS_ENTROPY_LOSS, h.seq,
             modelOutputScaling=mos)  # fmt: skip
    for name, t in (("y", y), ("dx", dx), ("loss", loss), ("deltas", deltas)):
        h.read(name, t)
    xv = rng.normal(size=(4, 6)).astype(np.float32)
    gv = rng.normal(size=(4, 6)).astype(np.float32)
    lab = np.array([0, 5, 2, 2])
    res = h.run(x=xv, g=gv, labels=lab.astype(np.uint32), ds=np.array([2.0], np.float32))
    p = np_forward(NL.SOFTMAX, xv)
    np.testing.assert_allclose(res["y"], 62000 * p, rtol=1e-5)
    ys = 62000 * p
    np.testing.assert_allclose(
        res["dx"], ys * (gv - (gv * ys).sum(axis=1, keepdims=True)), rtol=1e-4
    )
    # LossCrossEntropyTransform: -log(y + eps) + log(mos), deltas ds / mos (y - e mos)
    np.testing.assert_allclose(res["loss"], -np.log(p[np.arange(4), lab]), rtol=1e-4)
    np.testing.assert_allclose(res["deltas"], 2.0 * (p - np.eye(6)[lab]), rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("type_", [FLOAT, HALF, INT, UNSIGNED_INT])
def test_arg_max_and_min_take_the_first_extreme(type_):
    rng = np.random.default_rng(12)
    rows, cols = 5, 700  # 3500 elements over the 8 tiles: pieces cross rows and tiles
    h = Harness()
    x = h.var(type_, (rows, cols), "x")
    values, am = maxAndArgMax(h.graph, x, h.seq)
    vmin, amin = minAndArgMin(h.graph, x, h.seq)
    am2 = argMax(h.graph, x, h.seq)
    for name, t in (("v", values), ("am", am), ("vmin", vmin), ("amin", amin), ("am2", am2)):
        h.read(name, t)
    xv = rng.integers(0, 9, size=(rows, cols)).astype(type_.numpy)  # many ties
    res = h.run(x=xv)
    np.testing.assert_array_equal(res["am"], xv.argmax(axis=1))
    np.testing.assert_array_equal(res["am2"], xv.argmax(axis=1))
    np.testing.assert_array_equal(res["amin"], xv.argmin(axis=1))
    np.testing.assert_array_equal(res["v"], xv.max(axis=1))
    np.testing.assert_array_equal(res["vmin"], xv.min(axis=1))
    assert values.elementType() == type_ and am.elementType() == UNSIGNED_INT


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


@pytest.mark.parametrize(
    ("kind", "type_", "ops"),
    [
        (NL.SOFTMAX_STABLE, FLOAT, ["ReduceMax", "SUBTRACT", "EXPONENT", "ReduceAdd", "INVERSE",
                                    "MULTIPLY"]),
        (NL.SOFTMAX, FLOAT, ["EXPONENT", "ReduceAdd", "INVERSE", "MULTIPLY"]),
        (NL.SOFTMAX_SCALED, HALF, ["ReduceMax", "SUBTRACT", "ADD", "EXPONENT", "<half,float>",
                                   "ReduceAdd", "INVERSE", "MULTIPLY", "<float,half>",
                                   "MULTIPLY"]),
    ],
)  # fmt: skip
def test_softmax_is_built_from_popops_operations(kind, type_, ops):
    # NonLinearity.cpp softmaxImpl: reduce MAX, sub, (add log 62000), exp, reduce ADD,
    # invInPlace, (mul 62000), (cast to half), mulInPlace; no popnn vertex. Half: ipusim
    # casts to float before the sum (its reductions keep the input type).
    h = Harness()
    x = h.var(type_, (3, 10), "x", tile=1)
    nonLinearity(h.graph, kind, x, h.seq, "sm")
    h.run()
    profile = h.engine.getGraphProfile()
    names = profile["vertexTypes"]["names"]
    assert not [n for n in names if n.startswith("popnn::")]
    records = [r for r in h.engine.getTrace().records if r.kind == "compute"]
    assert all(r.name.startswith("sm/SoftMax") for r in records)
    assert len(records) == len(ops)
    assert all(any(op in n for n in names) for op in ops)


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


def test_calc_loss_on_a_virtual_graph_names_model_outputs_outside_its_tiles():
    """The loss vertices go where the model outputs are: outputs mapped to a tile the
    virtual graph does not have are refused up front, naming the tensor."""
    device = IPUModel("tiny").createDevice()
    top = Graph(device.getTarget())
    n = top.getTarget().getNumTiles()
    half = top.createVirtualGraph(0, n // 2)
    tensors = {}
    for name, type_, shape in (("x", FLOAT, [4, 6]), ("labels", UNSIGNED_INT, [4]),
                               ("loss", FLOAT, [4]), ("deltas", FLOAT, [4, 6])):  # fmt: skip
        tensors[name] = top.addVariable(type_, shape, name)
        top.setTileMapping(tensors[name], n - 1)
    with pytest.raises(GraphError, match="tensor 'x' is mapped to a tile outside"):
        calcLoss(half, *tensors.values(), lossType=LossType.SUM_SQUARED_LOSS,
                 prog=prog.Sequence())  # fmt: skip


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


def test_loss_and_accuracy_estimates_follow_the_poplibs_source():
    h = Harness()
    probs = h.var(FLOAT, (3, 5), "p", tile=0)
    labels = h.var(UNSIGNED_INT, (3,), "labels", tile=0)
    loss = h.var(FLOAT, (3,), "loss", tile=0)
    deltas = h.var(FLOAT, (3, 5), "deltas", tile=0)
    count = h.var(UNSIGNED_INT, (1,), "count", tile=5)
    calcLoss(h.graph, probs, labels, loss, deltas, None, count, LossType.CROSS_ENTROPY_LOSS,
             h.seq, "ce")  # fmt: skip
    act = h.var(FLOAT, (100,), "act", tile=2)
    nonLinearityInputGradient(h.graph, NL.RELU, act, act, h.seq, "g")
    h.run(p=np.full((3, 5), 0.2, np.float32), labels=np.zeros(3, np.uint32))
    records = {r.name: r for r in h.engine.getTrace().records if r.kind == "compute"}
    # getLossTransformCycles(float, softmax, size 15): one vertex (fewer than 0xFFF
    # elements on the tile): 5 + 6 + 5 + 0 + 2 + 1 + 9 * 15 + 1
    transform = records["ce/LossCrossEntropy/on_tile_transform"]
    assert transform.active_cycles[0] == 5 + 6 + 5 + 0 + 2 + 1 + 9 * 15 + 1
    # ReduceMaxClassGather<float>: one vertex per row of 5 on the last tile (7), worker
    # size 32: (3 + 2 + 4 + 3 + 1 + 3 + 1 + 3 * min(31, 4) + 3 + 6 + 4) * 6 + 5 + 4
    gather = records["ce/Accuracy/maxMinArgMaxMin(max)/ReduceClass[0]"]
    per_vertex = (3 + 2 + 4 + 3 + 1 + 3 + 1 + 3 * 4 + 3 + 6 + 4) * 6 + 5 + 4
    assert gather.active_cycles[7] == 3 * per_vertex
    # CalcAccuracy on numCorrect's tile: 5 + 4 + 2 + 1 + 1 + 3 * (2 + 1 + 1) + 1
    assert records["ce/Accuracy/CalcAccuracy"].active_cycles[5] == 5 + 4 + 2 + 1 + 1 + 12 + 1
    # NonLinearityGrad1D (popnnCycleEstimators.cpp), RELU float, n = 100: 50 vectors,
    # 9 per worker, op 3: worker 3+5+2+3+3+3+1 + (4 + 8*3 + 1) + 2+2 (no remainder)
    worker = 3 + 5 + 2 + 3 + 3 + 3 + 1 + (4 + 8 * 3 + 1) + 2 + 2
    assert records["g/NonLinearityGrad"].active_cycles[2] == 9 + 6 * worker


def test_arg_max_two_stage_estimates_follow_the_poplibs_source():
    # 2 x 3000 on the tiny machine (8 tiles, W = 6): argMinMaxSplitFirstReduction gives
    # each tile max(6 * 32, 6000 / 8) = 750 elements, from tile 7 down; a vertex of 750
    # has 6 workers of ceil(750 / 6) = 125. Each row has 4 x 6 = 24 partials, which one
    # ReduceMaxClassSparse per row reduces (tiles 7, then 6).
    h = Harness()
    x = h.var(FLOAT, (2, 3000), "x", tile=0)
    out = argMax(h.graph, x, h.seq, "am")
    h.read("am", out)
    xv = np.random.default_rng(13).normal(size=(2, 3000)).astype(np.float32)
    res = h.run(x=xv)
    np.testing.assert_array_equal(res["am"], xv.argmax(axis=1))
    records = {r.name: r for r in h.engine.getTrace().records if r.kind == "compute"}
    gather = (3 + 2 + 4 + 3 + 1 + 3 + 1 + 3 * min(125 - 1, 750 - 1) + 3 + 6 + 4) * 6 + 5 + 4
    stage0 = records["am/maxMinArgMaxMin(max)/ReduceClass[0]"]
    np.testing.assert_array_equal(stage0.active_cycles, [gather] * 8)
    sparse = 5 + 2 + 3 + 3 + 1 + (24 - 1) * 3 + 3 + 6 + 4
    stage1 = records["am/maxMinArgMaxMin(max)/ReduceClass[1]"]
    np.testing.assert_array_equal(stage1.active_cycles, [0] * 6 + [sparse, sparse])


def _special_floats(rng, n):
    """float32 values where a ReLU or its gradient could go wrong: signed zeros,
    infinities, NaNs (quiet, with payloads, signalling), subnormals, wide magnitudes."""
    specials = np.array(
        [0x00000000, 0x80000000, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00001,
         0x7FA00001, 0x00000001, 0x80000001, 0x007FFFFF, 0x7F7FFFFF, 0xFF7FFFFF],
        np.uint32,
    ).view(np.float32)  # fmt: skip
    x = (rng.standard_normal(n) * 10.0 ** rng.integers(-40, 39, n)).astype(np.float32)
    x[rng.integers(0, n, n // 4)] = rng.choice(specials, n // 4)
    return x


@pytest.mark.parametrize("layout", ["1D", "2D"])
def test_relu_kernels_give_the_numpy_formula_bit_for_bit(layout):
    from types import SimpleNamespace

    from poplar_api.popnn.vertices import nonlinearity_grad_vertex, nonlinearity_vertex

    rng = np.random.default_rng(7)
    for n in (0, 1, 7, 33, 4099):
        act, g = _special_floats(rng, n), _special_floats(rng, n)
        grad = nonlinearity_grad_vertex("RELU", FLOAT, layout)
        out = np.full(n, 5.0, np.float32)
        fields = {"out": act, "outGrad": g, "inGrad": out}
        grad.computeBatch({k: SimpleNamespace(data=v) for k, v in fields.items()}, 1, 6)
        want = np.where(act > 0, g, np.float32(0))  # g's bits where act > 0, else +0
        assert out.view(np.uint32).tolist() == want.view(np.uint32).tolist()
        for in_place in (True, False):
            fwd = nonlinearity_vertex("RELU", FLOAT, layout, in_place)
            data, dest = act.copy(), np.full(n, 5.0, np.float32)
            fields = {"data": data} if in_place else {"data": data, "out": dest}
            fwd.computeBatch({k: SimpleNamespace(data=v) for k, v in fields.items()}, 1, 6)
            got = data if in_place else dest
            want = np.maximum(act.astype(np.float32), 0)
            assert got.view(np.uint32).tolist() == want.view(np.uint32).tolist()
