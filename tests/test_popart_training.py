"""popart_api TrainingSession: weights after training steps against numpy implementations
of the same model, loss and optimizer (PopART's update equations); gradient
accumulation, replication, recomputation, optimizer updates and bad input."""

from __future__ import annotations

import os

import numpy as np
import pytest

import popart_api as popart

B, D, H, C = 4, 6, 5, 3


def _device(tiles: int = 8, ipus: int = 1) -> popart.DeviceInfo:
    return popart.DeviceManager().createIpuModelDevice({"numIPUs": ipus, "tilesPerIPU": tiles})


def _params(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "W1": (rng.standard_normal((D, H)) * 0.5).astype(np.float32),
        "b1": (rng.standard_normal(H) * 0.1).astype(np.float32),
        "W2": (rng.standard_normal((H, C)) * 0.5).astype(np.float32),
    }


def _mlp(batch: int = B, reduction=popart.ReductionType.Mean, ignore=None):
    """x -> relu(x W1 + b1) W2 -> softmax -> nll."""
    p0 = _params()
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [batch, D]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [batch]), "label")
    w1 = bd.addInitializedInputTensor(p0["W1"], "W1")
    b1 = bd.addInitializedInputTensor(p0["b1"], "b1")
    w2 = bd.addInitializedInputTensor(p0["W2"], "W2")
    h = bd.aiOnnx.relu([bd.aiOnnx.add([bd.aiOnnx.matmul([x, w1]), b1])])
    p = bd.aiOnnx.softmax([bd.aiOnnx.matmul([h, w2])], axis=1)
    loss = bd.aiGraphcore.nllloss([p, lab], reduction=reduction, ignoreIndex=ignore)
    return bd, x, lab, loss


def _np_grads(p: dict, X: np.ndarray, L: np.ndarray, mean: bool = True, ignore=None):
    """Loss and parameter gradients of the MLP in float64."""
    w1, b1, w2 = (p[k].astype(np.float64) for k in ("W1", "b1", "W2"))
    z1 = X @ w1 + b1
    h = np.maximum(z1, 0)
    z2 = h @ w2
    e = np.exp(z2 - z2.max(1, keepdims=True))
    prob = e / e.sum(1, keepdims=True)
    n = X.shape[0]
    keep = np.ones(n) if ignore is None else (ignore != L).astype(np.float64)
    safe = np.where(keep > 0, L, 0)
    per = -np.log(prob[np.arange(n), safe]) * keep
    count = max(keep.sum(), 1.0) if mean else 1.0
    d2 = prob.copy()
    d2[np.arange(n), safe] -= 1
    d2 *= (keep / count)[:, None]
    gw2 = h.T @ d2
    dz1 = (d2 @ w2.T) * (z1 > 0)
    return per.sum() / count, {"W1": X.T @ dz1, "b1": dz1.sum(0), "W2": gw2}


def _session(bd, loss, optimizer, bps=1, anchors=None, options=None, device=None, patterns=None):
    flow = popart.DataFlow(
        bps, anchors if anchors is not None else {loss: popart.AnchorReturnType("ALL")}
    )
    s = popart.TrainingSession(
        fnModel=bd.getModelProto(),
        dataFlow=flow,
        deviceInfo=device or _device(),
        loss=loss,
        optimizer=optimizer,
        userOptions=options,
        patterns=patterns,
    )
    s.prepareDevice()
    s.weightsFromHost()
    return s


def _weights(s) -> dict[str, np.ndarray]:
    s.weightsToHost()
    out = {k: np.zeros_like(v) for k, v in _params().items()}
    s.readWeights(popart.PyWeightsIO(out))
    return out


def _data(steps: int, batch: int = B, seed: int = 1):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((steps, batch, D)).astype(np.float32)
    L = rng.integers(0, C, (steps, batch)).astype(np.int32)
    return X, L


def test_sgd_steps_equal_numpy_and_loss_is_anchored():
    bd, x, lab, loss = _mlp()
    s = _session(bd, loss, popart.ConstSGD(0.1), bps=3)
    anchors = s.initAnchorArrays()
    assert anchors[loss].shape == (3,)
    X, L = _data(3)
    s.run(popart.PyStepIO({x: X, lab: L}, anchors))
    p = {k: v.astype(np.float64) for k, v in _params().items()}
    for k in range(3):
        value, g = _np_grads(p, X[k], L[k])
        assert anchors[loss][k] == pytest.approx(value, rel=1e-5)
        for name in p:
            p[name] -= 0.1 * g[name]
    got = _weights(s)
    for name in p:
        np.testing.assert_allclose(got[name], p[name], atol=1e-5)


def test_gradient_anchors_equal_numpy():
    bd, x, lab, loss = _mlp(reduction=popart.ReductionType.Sum)
    g_id = popart.reservedGradientPrefix() + "W1"
    anchors = {loss: popart.AnchorReturnType("ALL"), g_id: popart.AnchorReturnType("ALL")}
    s = _session(bd, loss, popart.ConstSGD(0.0), anchors=anchors)
    a = s.initAnchorArrays()
    X, L = _data(1)
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, a))
    _, g = _np_grads(_params(), X[0], L[0], mean=False)
    np.testing.assert_allclose(a[g_id], g["W1"], rtol=1e-5, atol=1e-6)


def test_ignore_index_masks_samples():
    bd, x, lab, loss = _mlp(ignore=2)
    s = _session(bd, loss, popart.ConstSGD(0.5))
    a = s.initAnchorArrays()
    X, L = _data(1)
    L[0, :2] = 2
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, a))
    value, g = _np_grads(_params(), X[0], L[0], ignore=2)
    assert a[loss] == pytest.approx(value, rel=1e-5)
    got = _weights(s)
    np.testing.assert_allclose(got["W2"], _params()["W2"] - 0.5 * g["W2"], atol=1e-5)


def _np_sgd(steps, lr, wd, mm, dm, vs, ls, nesterov=False):
    """PopART's SGD (sgd.hpp) in numpy over the MLP, one batch per step."""
    X, L = _data(steps)
    p = {k: v.astype(np.float64) for k, v in _params().items()}
    v = {k: np.zeros_like(val) for k, val in p.items()}
    for k in range(steps):
        _, g = _np_grads(p, X[k], L[k])
        for n in p:
            a = g[n] * ls  # the backward pass runs on the scaled loss
            if mm == 0 and not nesterov:
                p[n] = p[n] * (1 - lr * (1 - dm) * wd) - lr * (1 - dm) / ls * a
                continue
            v[n] = v[n] * mm + (1 - dm) * vs / ls * a + (1 - dm) * wd * vs * p[n]
            if nesterov:
                step = vs * (a / ls + wd * p[n]) + mm * v[n]
                p[n] = p[n] - lr / vs * step
            else:
                p[n] = p[n] - lr / vs * v[n]
    return X, L, p


@pytest.mark.parametrize(
    "lr, wd, mm, dm, vs, ls, nesterov",
    [
        (0.1, 0.01, 0.0, 0.0, 1.0, 1.0, False),
        (0.05, 0.0, 0.9, 0.0, 1.0, 1.0, False),
        (0.05, 0.02, 0.8, 0.2, 2.0, 8.0, False),
        (0.05, 0.01, 0.9, 0.0, 1.0, 4.0, True),
    ],
)
def test_sgd_hyperparameters_follow_popart_equations(lr, wd, mm, dm, vs, ls, nesterov):
    steps = 3
    X, L, want = _np_sgd(steps, lr, wd, mm, dm, vs, ls, nesterov)
    opt = popart.SGD(
        {
            "defaultLearningRate": (lr, False),
            "defaultWeightDecay": (wd, False),
            "defaultMomentum": (mm, True),
            "defaultDampening": (dm, True),
            "defaultVelocityScaling": (vs, True),
            "defaultNesterov": (float(nesterov), True),
            "lossScaling": (ls, True),
        }
    )
    bd, x, lab, loss = _mlp()
    s = _session(bd, loss, opt, bps=steps)
    s.run(popart.PyStepIO({x: X, lab: L}, s.initAnchorArrays()))
    got = _weights(s)
    for n in want:
        np.testing.assert_allclose(got[n], want[n], atol=2e-5, err_msg=n)


@pytest.mark.parametrize("mode", ["Adam", "AdamNoBias"])
@pytest.mark.parametrize("decay_mode", ["Decay", "L2Regularization"])
def test_adam_follows_popart_equations(mode, decay_mode):
    steps, lr, b1, b2, eps, wd, ls = 3, 0.01, 0.9, 0.99, 1e-6, 0.05, 2.0
    X, L = _data(steps)
    p = {k: v.astype(np.float64) for k, v in _params().items()}
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(val) for k, val in p.items()}
    for t in range(1, steps + 1):
        _, g = _np_grads(p, X[t - 1], L[t - 1])
        for n in p:
            s_ = g[n]
            if decay_mode == "L2Regularization":
                s_ = s_ + wd * p[n]
            m[n] = b1 * m[n] + (1 - b1) * s_
            v[n] = b2 * v[n] + (1 - b2) * s_**2
            mc, vc = m[n], v[n]
            if mode == "Adam":
                mc, vc = m[n] / (1 - b1**t), v[n] / (1 - b2**t)
            x_ = mc / (np.sqrt(vc) + eps)
            if decay_mode == "Decay":
                x_ = x_ + wd * p[n]
            p[n] = p[n] - lr * x_
    opt = popart.Adam(
        {
            "defaultLearningRate": (lr, False),
            "defaultBeta1": (b1, True),
            "defaultBeta2": (b2, True),
            "defaultEps": (eps, True),
            "defaultWeightDecay": (wd, False),
            "lossScaling": (ls, True),
        },
        mode=popart.AdamMode(mode),
        weight_decay_mode=popart.WeightDecayMode(decay_mode),
    )
    bd, x, lab, loss = _mlp()
    s = _session(bd, loss, opt, bps=steps)
    s.run(popart.PyStepIO({x: X, lab: L}, s.initAnchorArrays()))
    got = _weights(s)
    for n in p:
        np.testing.assert_allclose(got[n], p[n], atol=1e-5, err_msg=n)


def test_gradient_accumulation_equals_one_big_batch_sum():
    """Sum reduction: 2 micro-batches of B accumulated = one batch of 2B (Sum loss)."""
    bd, x, lab, loss = _mlp(reduction=popart.ReductionType.Sum)
    o = popart.SessionOptions()
    o.enableGradientAccumulation = True
    o.accumulationFactor = 2
    s = _session(bd, loss, popart.ConstSGD(0.05), bps=2, options=o)
    a = s.initAnchorArrays()
    assert a[loss].shape == (2, 2)
    X, L = _data(4)
    s.run(popart.PyStepIO({x: X.reshape(2, 2, B, D), lab: L.reshape(2, 2, B)}, a))
    p = {k: v.astype(np.float64) for k, v in _params().items()}
    for step in range(2):
        xs = np.concatenate([X[2 * step], X[2 * step + 1]])
        ls_ = np.concatenate([L[2 * step], L[2 * step + 1]])
        _, g = _np_grads(p, xs, ls_, mean=False)
        for n in p:
            p[n] -= 0.05 * g[n]
    got = _weights(s)
    for n in p:
        np.testing.assert_allclose(got[n], p[n], atol=2e-5, err_msg=n)


def test_replicas_with_mean_reduction_equal_one_replica_on_the_whole_batch():
    """2 replicas x 2 accumulated micro-batches of B, Mean loss and Mean reduction =
    one batch of 4B with a Mean loss."""
    bd, x, lab, loss = _mlp()
    o = popart.SessionOptions()
    o.enableReplicatedGraphs = True
    o.replicatedGraphCount = 2
    o.enableGradientAccumulation = True
    o.accumulationFactor = 2
    o.accumulationAndReplicationReductionType = popart.ReductionType.Mean
    s = _session(bd, loss, popart.ConstSGD(0.2), options=o, device=_device(8, ipus=2))
    a = s.initAnchorArrays()
    assert a[loss].shape == (2, 2)
    X, L = _data(4)
    s.run(popart.PyStepIO({x: X.reshape(2, 2, B, D), lab: L.reshape(2, 2, B)}, a))
    _, g = _np_grads(_params(), X.reshape(4 * B, D), L.reshape(4 * B))
    got = _weights(s)
    for n, v in _params().items():
        np.testing.assert_allclose(got[n], v - 0.2 * g[n], atol=2e-5, err_msg=n)
    for k in range(4):  # each micro-batch's own loss, in [accumulation, replica] order
        want, _ = _np_grads(_params(), X[k], L[k])
        assert a[loss].reshape(-1)[k] == pytest.approx(want, rel=1e-5)


def _deep_model(rng: np.random.Generator):
    """Four sigmoid/tanh layers (256x64 input, 128 wide) and an Nll loss: the builder,
    the loss and a batch of data."""
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [256, 64]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [256]), "label")
    t, d = x, 64
    for k in range(4):
        w = bd.addInitializedInputTensor(
            (rng.standard_normal((d, 128)) * 0.1).astype(np.float32), f"W{k}"
        )
        t = bd.aiOnnx.tanh([bd.aiOnnx.sigmoid([bd.aiOnnx.matmul([t, w])])])
        d = 128
    w = bd.addInitializedInputTensor(
        (rng.standard_normal((d, 10)) * 0.1).astype(np.float32), "Wout"
    )
    loss = bd.aiGraphcore.nllloss([bd.aiOnnx.softmax([bd.aiOnnx.matmul([t, w])], axis=1), lab])
    data = {
        x: rng.standard_normal((256, 64)).astype(np.float32),
        lab: rng.integers(0, 10, 256).astype(np.int32),
    }
    return bd, loss, data


def _deep(mode: str):
    rng = np.random.default_rng(0)
    bd, loss, data = _deep_model(rng)
    o = popart.SessionOptions()
    o.autoRecomputation = popart.RecomputationType(mode)
    # recomputation alone: the replay compiled again, no outlined functions (with
    # PopART's default outlining the recomputed nodes' variables keep one address over
    # the forward pass and the replay: docs/popart.md, Outlining)
    o.enableOutlining = False
    s = _session(bd, loss, popart.ConstSGD(0.1), options=o, device=_device(16))
    a = s.initAnchorArrays()
    s.run(popart.PyStepIO(data, a))
    report = s.getSummaryReport()
    total = int(
        next(ln for ln in report.splitlines() if "Total cycles" in ln).split()[2].replace(",", "")
    )
    memory = int(
        next(ln for ln in report.splitlines() if "Including gaps" in ln).split()[2].replace(",", "")
    )
    s.weightsToHost()
    weights = {f"W{k}": np.zeros((64 if k == 0 else 128, 128), np.float32) for k in range(4)}
    s.readWeights(popart.PyWeightsIO(weights))
    return a[loss], weights, total, memory


def test_recomputation_same_values_more_cycles_less_memory():
    """Standard recomputation replays the non-matmul ops before their gradients: the
    values are identical, the step takes more cycles and the activations' memory is
    free between the forward pass and the replay."""
    loss0, w0, cycles0, mem0 = _deep("NoRecompute")
    loss1, w1, cycles1, mem1 = _deep("Standard")
    assert loss1 == loss0
    for k in w0:
        np.testing.assert_array_equal(w1[k], w0[k])
    # measured: 687,829 against 574,109 cycles; 2,829,040 against 3,003,632 B
    assert cycles1 > cycles0
    assert mem1 < 0.95 * mem0


def test_update_optimizer_from_host_changes_the_learning_rate():
    bd, x, lab, loss = _mlp()
    s = _session(bd, loss, popart.SGD({"defaultLearningRate": (0.1, False)}))
    X, L = _data(2)
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, s.initAnchorArrays()))
    s.updateOptimizerFromHost(popart.SGD({"defaultLearningRate": (0.3, False)}))
    s.run(popart.PyStepIO({x: X[1], lab: L[1]}, s.initAnchorArrays()))
    p = {k: v.astype(np.float64) for k, v in _params().items()}
    for k, lr in ((0, 0.1), (1, 0.3)):
        _, g = _np_grads(p, X[k], L[k])
        for n in p:
            p[n] -= lr * g[n]
    got = _weights(s)
    for n in p:
        np.testing.assert_allclose(got[n], p[n], atol=1e-5)
    with pytest.raises(popart.popart_exception, match=r"momentum.*constant"):
        s.updateOptimizerFromHost(popart.SGD({"defaultMomentum": (0.5, True)}))
    with pytest.raises(popart.popart_exception, match="built with SGD; got Adam"):
        s.updateOptimizerFromHost(popart.Adam({}))


def test_model_to_host_round_trip(tmp_path):
    bd, x, lab, loss = _mlp()
    s = _session(bd, loss, popart.ConstSGD(0.1))
    X, L = _data(1)
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, s.initAnchorArrays()))
    path = tmp_path / "trained.onnx"
    s.modelToHost(str(path))
    trained = _weights(s)
    import onnx
    from onnx import numpy_helper

    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(path)).graph.initializer}
    for n, v in trained.items():
        np.testing.assert_array_equal(inits[n], v)
    s2 = _session(popart.Builder(str(path)), loss, popart.ConstSGD(0.0))
    np.testing.assert_array_equal(_weights(s2)["W1"], trained["W1"])


def test_a_run_without_weights_from_host_is_warned_of_once(caplog):
    # The device's weights and learning rate were zeros: training did nothing, and
    # nothing said why.
    bd, x, lab, loss = _mlp()
    flow = popart.DataFlow(1, {loss: popart.AnchorReturnType("ALL")})
    s = popart.TrainingSession(
        fnModel=bd.getModelProto(), dataFlow=flow, deviceInfo=_device(), loss=loss,
        optimizer=popart.ConstSGD(0.1),
    )  # fmt: skip
    s.prepareDevice()
    X, L = _data(2)
    with caplog.at_level("WARNING", logger="popart"):
        for k in range(2):
            s.run(popart.PyStepIO({x: X[k], lab: L[k]}, s.initAnchorArrays()))
    said = [r.getMessage() for r in caplog.records if "weightsFromHost() was not" in r.getMessage()]
    assert len(said) == 1 and "hint: call session.weightsFromHost()" in said[0]
    caplog.clear()
    s2 = _session(bd, loss, popart.ConstSGD(0.1))
    with caplog.at_level("WARNING", logger="popart"):
        s2.run(popart.PyStepIO({x: X[0], lab: L[0]}, s2.initAnchorArrays()))
    assert not [r for r in caplog.records if "weightsFromHost" in r.getMessage()]


def test_model_to_host_is_whole_or_nothing(tmp_path, monkeypatch):
    # onnx.save wrote in place: a bad path raised a bare NotADirectoryError, and a
    # write stopped before its end left part of a model over the old one.
    bd, _x, _lab, loss = _mlp()
    s = _session(bd, loss, popart.ConstSGD(0.1))
    (tmp_path / "afile").write_text("")
    with pytest.raises(popart.popart_exception, match=r"modelToHost: cannot write .*afile/m"):
        s.modelToHost(str(tmp_path / "afile" / "m.onnx"))
    path = tmp_path / "kept.onnx"
    path.write_bytes(b"old")

    def stopped(fd):  # Ctrl-C once the bytes are written, before they are committed
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "fsync", stopped)
    with pytest.raises(KeyboardInterrupt):
        s.modelToHost(str(path))
    monkeypatch.undo()
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "kept.onnx"]


def test_l1_loss_gradient():
    rng = np.random.default_rng(3)
    w0 = rng.standard_normal((3, 4)).astype(np.float32)
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    w = bd.addInitializedInputTensor(w0, "W")
    y = bd.aiOnnx.matmul([x, w])
    loss = bd.aiGraphcore.l1loss([y], 0.5, reduction=popart.ReductionType.Mean)
    s = _session(bd, loss, popart.ConstSGD(0.1))
    a = s.initAnchorArrays()
    xv = rng.standard_normal((2, 3)).astype(np.float32)
    s.run(popart.PyStepIO({x: xv}, a))
    yv = xv.astype(np.float64) @ w0
    assert a[loss] == pytest.approx(0.5 * np.abs(yv).mean(), rel=1e-5)
    grad = xv.T @ (0.5 * np.sign(yv) / yv.size)
    s.weightsToHost()
    out = {"W": np.zeros_like(w0)}
    s.readWeights(popart.PyWeightsIO(out))
    np.testing.assert_allclose(out["W"], w0 - 0.1 * grad, atol=1e-6)


def test_bad_training_input_is_a_clear_error():
    bd, x, lab, loss = _mlp()
    proto = bd.getModelProto()
    flow = popart.DataFlow(1, {loss: popart.AnchorReturnType("ALL")})
    with pytest.raises(popart.popart_exception, match="loss 'nope' is not a tensor"):
        popart.TrainingSession(proto, flow, _device(), loss="nope", optimizer=popart.ConstSGD(0.1))
    with pytest.raises(popart.popart_exception, match="optimizer must be"):
        popart.TrainingSession(proto, flow, _device(), loss=loss, optimizer=0.1)
    with pytest.raises(popart.popart_exception, match="anchor 'missing' is not a tensor"):
        popart.TrainingSession(
            proto,
            popart.DataFlow(1, {"missing": popart.AnchorReturnType("ALL")}),
            _device(),
            loss=loss,
            optimizer=popart.ConstSGD(0.1),
        )
    o = popart.SessionOptions()
    with pytest.raises(popart.popart_exception, match="no option 'acumulationFactor'"):
        o.acumulationFactor = 2
    with pytest.raises(popart.popart_exception, match="accumulationFactor is 4 but"):
        o.accumulationFactor = 4
        popart.TrainingSession(
            proto, flow, _device(), loss=loss, optimizer=popart.ConstSGD(0.1), userOptions=o
        )
    with pytest.raises(popart.popart_exception, match="unknown hyperparameter 'defaultLearnRate'"):
        popart.SGD({"defaultLearnRate": (0.1, False)})
    s = _session(bd, loss, popart.ConstSGD(0.1))
    with pytest.raises(popart.popart_exception, match="no data for input 'label'"):
        s.run(popart.PyStepIO({x: np.zeros((B, D), np.float32)}, s.initAnchorArrays()))
    with pytest.raises(popart.popart_exception, match=r"input 'x' has shape \[3, 6\]"):
        s.run(
            popart.PyStepIO(
                {x: np.zeros((3, D), np.float32), lab: np.zeros(B, np.int32)}, s.initAnchorArrays()
            )
        )


def _two_stage(batch=B, d=D, h=H, layers=1, seed=0):
    """An MLP split into two pipeline stages on two IPUs (Sum loss)."""
    rng = np.random.default_rng(seed)
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [batch, d]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [batch]), "label")
    weights = {}
    t, width = x, d
    for stage in range(2):
        with bd.virtualGraph(stage), bd.pipelineStage(stage):
            for k in range(layers):
                w = (rng.standard_normal((width, h)) * 0.3).astype(np.float32)
                weights[f"W{stage}{k}"] = w
                t = bd.aiOnnx.relu(
                    [bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(w, f"W{stage}{k}")])]
                )
                width = h
            if stage == 1:
                w = (rng.standard_normal((width, C)) * 0.3).astype(np.float32)
                weights["Wout"] = w
                p = bd.aiOnnx.softmax(
                    [bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(w, "Wout")])], axis=1
                )
                loss = bd.aiGraphcore.nllloss([p, lab], reduction=popart.ReductionType.Sum)
    return bd, x, lab, loss, weights


def _np_stack_grads(weights, X, L, layers):
    acts, t = [], X.astype(np.float64)
    names = [f"W{s}{k}" for s in range(2) for k in range(layers)]
    for n in names:
        z = t @ weights[n]
        acts.append((t, z))
        t = np.maximum(z, 0)
    z = t @ weights["Wout"]
    e = np.exp(z - z.max(1, keepdims=True))
    prob = e / e.sum(1, keepdims=True)
    d = prob.copy()
    d[np.arange(len(L)), L] -= 1
    grads = {"Wout": t.T @ d}
    dt = d @ weights["Wout"].T
    for n, (inp, z) in zip(reversed(names), reversed(acts), strict=True):
        dz = dt * (z > 0)
        grads[n] = inp.T @ dz
        dt = dz @ weights[n].T
    return grads


def _pipeline_session(pipelining: bool, accumulation: int, tiles: int = 8, **kw):
    bd, x, lab, loss, weights = _two_stage(**kw)
    o = popart.SessionOptions()
    o.virtualGraphMode = popart.VirtualGraphMode.Manual
    o.enablePipelining = pipelining
    o.enableGradientAccumulation = True
    o.accumulationFactor = accumulation
    s = _session(bd, loss, popart.ConstSGD(0.05), options=o, device=_device(tiles, ipus=2))
    return s, x, lab, loss, weights


def test_pipelined_training_equals_numpy():
    """2 stages, 4 micro-batches accumulated: the same update as one batch of 4B."""
    s, x, lab, loss, w0 = _pipeline_session(True, 4)
    X, L = _data(4)
    a = s.initAnchorArrays()
    s.run(popart.PyStepIO({x: X, lab: L}, a))
    g = _np_stack_grads(
        {k: v.astype(np.float64) for k, v in w0.items()}, X.reshape(-1, D), L.reshape(-1), 1
    )
    s.weightsToHost()
    got = {k: np.zeros_like(v) for k, v in w0.items()}
    s.readWeights(popart.PyWeightsIO(got))
    for n, v in w0.items():
        np.testing.assert_allclose(got[n], v - 0.05 * g[n], atol=2e-5, err_msg=n)
    for k in range(4):  # every micro-batch's loss comes back in order
        t = X[k].astype(np.float64)
        for n in ("W00", "W10"):
            t = np.maximum(t @ w0[n], 0)
        z = t @ w0["Wout"]
        e = np.exp(z - z.max(1, keepdims=True))
        prob = e / e.sum(1, keepdims=True)
        assert a[loss][k] == pytest.approx(-np.log(prob[np.arange(B), L[k]]).sum(), rel=1e-5)


def test_pipelining_needs_enough_micro_batches():
    with pytest.raises(popart.popart_exception, match="accumulationFactor >= 3"):
        _pipeline_session(True, 2)


def test_pipelined_stages_overlap():
    """Pipelined, the stages of a pipeline cycle run on their IPUs at the same time: a
    larger share of the compute cycles overlap another IPU's work than when the same
    stages run one after the other, and the step takes fewer cycles once the stages'
    compute outweighs what the pipeline adds (each stashed activation's dynamic update,
    dynamic slice and index updates, as PopART's StashOp and RestoreOp)."""
    kw = {"batch": 64, "d": 64, "h": 256, "layers": 2}
    shares, totals = {}, {}
    for pipelining in (False, True):
        s, x, lab, _loss, _ = _pipeline_session(pipelining, 6, tiles=16, **kw)
        rng = np.random.default_rng(2)
        data = {
            x: rng.standard_normal((6, 64, 64)).astype(np.float32),
            lab: rng.integers(0, C, (6, 64)).astype(np.int32),
        }
        s.run(popart.PyStepIO(data, s.initAnchorArrays()))
        report = s.getExecutionReport()  # PopART's fetch resets the profile
        steps = report["simulation"]["steps"]
        compute = [st for st in steps if st["type"] == "OnTileExecute"]
        overlapped = sum(st["cyclesOverlapped"] for st in compute)
        shares[pipelining] = overlapped / sum(
            st["cyclesOverlapped"] + st["cycles"] for st in compute
        )
        totals[pipelining] = report["simulation"]["cycles"]
    # measured on 8 tiles per IPU: 3,910,649 cycles against 4,489,107 (at batch 16 and
    # width 128 the stash costs more than the overlap gains: 926,322 against 790,275);
    # 16 tiles per IPU since matMul plans swapped operands, whose plans leave 8 tiles of
    # the 8-tile IPUs about 65 KB over their memory
    assert shares[True] > shares[False] + 0.1
    assert totals[True] < 0.95 * totals[False]


def test_log_level_and_tensor_tile_map(tmp_path, monkeypatch, caplog):
    """POPART_LOG_LEVEL sets the ``popart`` logger's level; POPART_TENSOR_TILE_MAP
    writes every tensor's tile intervals, which cover each tensor's elements once."""
    import json
    import logging

    path = tmp_path / "tiles.json"
    monkeypatch.setenv("POPART_LOG_LEVEL", "INFO")
    monkeypatch.setenv("POPART_TENSOR_TILE_MAP", str(path))
    bd, _x, _lab, loss = _mlp()
    with caplog.at_level(logging.INFO, logger="popart"):
        _session(bd, loss, popart.ConstSGD(0.1))
    assert any("prepareDevice: 6 nodes" in r.getMessage() for r in caplog.records)
    tiles = json.loads(path.read_text())
    assert sum(e - b for _, b, e in tiles["W1"]) == D * H
    assert all(0 <= t < 8 for t, _, _ in tiles["W1"])
    monkeypatch.setenv("POPART_LOG_LEVEL", "LOUD")
    with pytest.raises(popart.popart_exception, match="POPART_LOG_LEVEL='LOUD'"):
        _session(bd, loss, popart.ConstSGD(0.1))


def _inference(bd, out, flow_art, bps, options=None, ipus=1):
    s = popart.InferenceSession(
        fnModel=bd.getModelProto(),
        dataFlow=popart.DataFlow(bps, {out: flow_art}),
        deviceInfo=_device(8, ipus=ipus),
        userOptions=options,
    )
    s.prepareDevice()
    s.weightsFromHost()
    return s


def _np_forward(weights, X, layers=1):
    t = X.astype(np.float64)
    for n in [f"W{s}{k}" for s in range(2) for k in range(layers)]:
        t = np.maximum(t @ weights[n], 0)
    z = t @ weights["Wout"]
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


@pytest.mark.parametrize("mode", ["pipelined", "auto", "sum"])
def test_inference_placements_and_sum_anchor(mode):
    """Pipelined inference over 4 batches, Auto virtual graphs, and a SUM anchor give
    numpy's softmax outputs."""
    bd, x, lab, _loss, w = _two_stage()
    probs = next(i for i in reversed(bd._info) if i.startswith("Softmax"))
    o = popart.SessionOptions()
    art = popart.AnchorReturnType("ALL")
    ipus = 2
    if mode == "pipelined":
        o.virtualGraphMode = popart.VirtualGraphMode.Manual
        o.enablePipelining = True
    elif mode == "auto":
        o.virtualGraphMode = popart.VirtualGraphMode.Auto
    else:
        art, ipus = popart.AnchorReturnType("SUM"), 1
    s = _inference(bd, probs, art, 4, o, ipus)
    X, L = _data(4)
    a = s.initAnchorArrays()
    s.run(popart.PyStepIO({x: X, lab: L}, a))
    want = _np_forward({k: v.astype(np.float64) for k, v in w.items()}, X)
    if mode == "sum":
        want = want.sum(0)
    np.testing.assert_allclose(a[probs], want, rtol=1e-5, atol=1e-6)


def _wide_step(batch: int, accumulation: int) -> tuple[int, int]:
    """Cycles and memory of one training step of a 3-layer, 256-wide tanh MLP."""
    rng = np.random.default_rng(0)
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [batch, 32]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [batch]), "label")
    t, d = x, 32
    for k in range(3):
        w = bd.addInitializedInputTensor(
            (rng.standard_normal((d, 256)) * 0.1).astype(np.float32), f"W{k}"
        )
        t = bd.aiOnnx.tanh([bd.aiOnnx.matmul([t, w])])
        d = 256
    w = bd.addInitializedInputTensor((rng.standard_normal((d, 10)) * 0.1).astype(np.float32), "Wo")
    p = bd.aiOnnx.softmax([bd.aiOnnx.matmul([t, w])], axis=1)
    loss = bd.aiGraphcore.nllloss([p, lab], reduction=popart.ReductionType.Sum)
    o = popart.SessionOptions()
    if accumulation > 1:
        o.enableGradientAccumulation = True
        o.accumulationFactor = accumulation
    s = _session(bd, loss, popart.ConstSGD(0.01), anchors={}, options=o, device=_device(16))
    lead = [accumulation] if accumulation > 1 else []
    data = {
        x: rng.standard_normal([*lead, batch, 32]).astype(np.float32),
        lab: rng.integers(0, 10, [*lead, batch]).astype(np.int32),
    }
    s.run(popart.PyStepIO(data, s.initAnchorArrays()))
    report = s.getSummaryReport().splitlines()
    total = int(next(ln for ln in report if "Total cycles" in ln).split()[2].replace(",", ""))
    memory = int(next(ln for ln in report if "Including gaps" in ln).split()[2].replace(",", ""))
    return total, memory


def test_gradient_accumulation_trades_cycles_for_memory():
    """256 samples per step as one batch, or as 4 accumulated micro-batches of 64: the
    micro-batches need far less memory (activations of 64 samples, plus accumulators)
    and more cycles (each matmul is smaller, and the weights are read four times)."""
    cycles1, memory1 = _wide_step(256, 1)
    cycles4, memory4 = _wide_step(64, 4)
    # measured: 968,072 cycles and 4,948,968 B against 1,295,734 and 3,003,496 B
    assert memory4 < 0.75 * memory1
    assert cycles4 > cycles1


def test_acquire_device_by_id_and_enumerate():
    m = popart.DeviceManager()
    devices = m.enumerateDevices()
    assert devices and all(d.numIpus >= 1 for d in devices)
    d = m.acquireDeviceById(devices[1].id)
    assert d.id == devices[1].id and d.isAttached
    with pytest.raises(popart.popart_exception, match="attached already"):
        m.acquireDeviceById(devices[1].id)
    with pytest.raises(popart.popart_exception, match="no device has id 99999"):
        m.acquireDeviceById(99999)
    d.detach()


def test_out_of_memory_keeps_the_memory_report():
    """A model too big for 4 tiles: OutOfMemoryException with the per-tile report;
    with debug.allowOutOfMemory the session compiles and reports anyway."""
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [256, 512]), "x")
    w = bd.addInitializedInputTensor(np.ones((512, 512), np.float32), "W")
    y = bd.aiOnnx.matmul([x, w])
    flow = popart.DataFlow(1, {y: popart.AnchorReturnType("ALL")})
    s = popart.InferenceSession(bd.getModelProto(), flow, _device(4))
    with pytest.raises(popart.OutOfMemoryException, match=r"tile \d+: needs") as info:
        s.prepareDevice()
    assert "allowOutOfMemory" in info.value.getSummaryReport()
    assert info.value.report is not None
    o = popart.SessionOptions()
    o.engineOptions = {"debug.allowOutOfMemory": "true"}
    s = popart.InferenceSession(bd.getModelProto(), flow, _device(4), userOptions=o)
    s.prepareDevice(loadEngine=False)
    assert "Memory Usage" in s.getSummaryReport()


def test_malformed_models_are_clear_errors(tmp_path):
    flow = popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")})
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not protobuf\xff\xff")
    with pytest.raises(popart.popart_exception, match=r"cannot read '.*bad.onnx' as ONNX"):
        popart.InferenceSession(str(bad), flow, _device())
    with pytest.raises(popart.popart_exception, match="not a serialized ONNX ModelProto"):
        popart.InferenceSession(b"\xff\xfe\x00garbage", flow, _device())
    with pytest.raises(popart.popart_exception, match=r"model file '.*missing.onnx' does not"):
        popart.InferenceSession(str(tmp_path / "missing.onnx"), flow, _device())


@pytest.mark.parametrize("content", [b"", b"\x08\x07"])
def test_a_model_without_a_graph_is_refused(tmp_path, content):
    # Protobuf reads an empty file (or one cut before its graph) as an empty model,
    # which ran as a model of nothing.
    path = tmp_path / "cut.onnx"
    path.write_bytes(content)
    with pytest.raises(popart.popart_exception, match=r"cut.onnx' \(\d bytes\) holds no ONNX"):
        popart.InferenceSession(str(path), popart.DataFlow(1, {}), _device())
    with pytest.raises(popart.popart_exception, match="bytes given holds no ONNX graph"):
        popart.Builder(content)


def test_unsupported_op_names_node_and_opset():
    from onnx import TensorProto, helper

    node = helper.make_node("Det", ["x"], ["y"], name="det1")
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    s = popart.InferenceSession(
        model.SerializeToString(),
        popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")}),
        _device(),
    )
    with pytest.raises(
        popart.popart_exception, match=r"'Det' \(domain 'ai.onnx', opset 13, node 'det1'\)"
    ):
        s.prepareDevice()


def test_scale_gradient():
    """ai.graphcore Scale: the gradient of sum(R · scale · x) is scale · R."""
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [3, 4]), "x")
    r = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    y = bd.aiGraphcore.scale([x], 0.25)
    loss = bd.aiGraphcore.identityloss(
        [bd.aiOnnx.mul([y, bd.addInitializedInputTensor(r, "R")])],
        reduction=popart.ReductionType.Sum,
    )
    g = popart.reservedGradientPrefix() + x
    s = _session(bd, loss, popart.ConstSGD(0.0), anchors={g: popart.AnchorReturnType("ALL")})
    a = s.initAnchorArrays()
    s.run(popart.PyStepIO({x: np.ones((3, 4), np.float32)}, a))
    np.testing.assert_allclose(a[g], 0.25 * r)


def test_insert_specific_learning_rate_on_one_weight_only():
    """A weight's own learning rate applies to it alone; the others keep the default."""
    bd, x, lab, loss = _mlp()
    opt = popart.SGD({"defaultLearningRate": (0.1, False)})
    opt.insertSpecific("W1", {"learningRate": (0.01, False)})
    s = _session(bd, loss, opt)
    X, L = _data(1)
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, s.initAnchorArrays()))
    _, g = _np_grads(_params(), X[0], L[0])
    got = _weights(s)
    for n, lr in (("W1", 0.01), ("b1", 0.1), ("W2", 0.1)):
        np.testing.assert_allclose(got[n], _params()[n] - lr * g[n], atol=1e-6, err_msg=n)


def test_non_constant_momentum_and_eps_can_change():
    """Momentum built as a non-constant 0 can become 0.9; Adam's non-constant eps too."""
    bd, x, lab, loss = _mlp()
    s = _session(
        bd, loss, popart.SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.0, False)})
    )
    X, L = _data(2)
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, s.initAnchorArrays()))
    s.updateOptimizerFromHost(
        popart.SGD({"defaultLearningRate": (0.1, False), "defaultMomentum": (0.9, False)})
    )
    s.run(popart.PyStepIO({x: X[1], lab: L[1]}, s.initAnchorArrays()))
    p = {k: v.astype(np.float64) for k, v in _params().items()}
    v = {k: np.zeros_like(a) for k, a in p.items()}
    for k, mm in ((0, 0.0), (1, 0.9)):
        _, g = _np_grads(p, X[k], L[k])
        for n in p:
            v[n] = mm * v[n] + g[n]
            p[n] -= 0.1 * v[n]
    got = _weights(s)
    for n in p:
        np.testing.assert_allclose(got[n], p[n], atol=1e-5, err_msg=n)
    bd, x, lab, loss = _mlp()
    s = _session(
        bd, loss, popart.Adam({"defaultLearningRate": (0.01, False), "defaultEps": (1e-6, False)})
    )
    s.updateOptimizerFromHost(
        popart.Adam({"defaultLearningRate": (0.01, False), "defaultEps": (100.0, False)})
    )
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, s.initAnchorArrays()))
    _, g = _np_grads(_params(), X[0], L[0])
    m, vv = 0.1 * g["W2"], 0.001 * g["W2"] ** 2
    want = _params()["W2"] - 0.01 * (m / 0.1) / (np.sqrt(vv / 0.001) + 100.0)
    np.testing.assert_allclose(_weights(s)["W2"], want, rtol=1e-4, atol=1e-7)


def test_nll_ignore_index_outside_the_classes():
    """ignoreIndex -100 (PyTorch's default): those samples count zero."""
    bd, x, lab, loss = _mlp(ignore=-100)
    s = _session(bd, loss, popart.ConstSGD(0.5))
    a = s.initAnchorArrays()
    X, L = _data(1)
    L[0, 1] = -100
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, a))
    value, g = _np_grads(_params(), X[0], L[0], ignore=-100)
    assert a[loss] == pytest.approx(value, rel=1e-5)
    np.testing.assert_allclose(_weights(s)["W1"], _params()["W1"] - 0.5 * g["W1"], atol=1e-5)


@pytest.mark.parametrize("mode", ["Zeros", "RandomNormal"])
def test_synthetic_data_needs_no_host_inputs(mode):
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [64, 8]), "x")
    y = bd.aiOnnx.add([x, bd.addInitializedInputTensor(np.full([8], 3.0, np.float32), "c")])
    o = popart.SessionOptions()
    o.syntheticDataMode = popart.SyntheticDataMode(mode)
    s = popart.InferenceSession(
        bd.getModelProto(),
        popart.DataFlow(1, {y: popart.AnchorReturnType("ALL")}),
        _device(),
        userOptions=o,
    )
    s.prepareDevice()
    s.weightsFromHost()
    a = s.initAnchorArrays()
    s.run(popart.PyStepIO({}, a))
    if mode == "Zeros":
        np.testing.assert_array_equal(a[y], 3.0)
    else:
        assert abs(a[y].mean() - 3.0) < 0.2 and 0.8 < a[y].std() < 1.2


def test_options_that_cannot_apply_are_refused():
    bd, _x, _lab, loss = _mlp()
    o = popart.SessionOptions()
    o.enableGradientAccumulation = True
    o.accumulationFactor = 2
    flow = popart.DataFlow(1, {loss: popart.AnchorReturnType("ALL")})
    with pytest.raises(popart.popart_exception, match=r"gradient accumulation .* is for training"):
        popart.InferenceSession(bd.getModelProto(), flow, _device(), userOptions=o)
    every = popart.DataFlow(2, {loss: popart.AnchorReturnType("EVERYN", 2)})
    with pytest.raises(
        popart.popart_exception, match=r"EVERYN anchors .* with gradient accumulation"
    ):
        popart.TrainingSession(
            bd.getModelProto(),
            every,
            _device(),
            loss=loss,
            optimizer=popart.ConstSGD(0.1),
            userOptions=o,
        )
    s = _session(bd, loss, popart.SGD({"defaultLearningRate": (0.1, False)}))
    new = popart.SGD({"defaultLearningRate": (0.1, False)})
    new.insertSpecific("W1", {"learningRate": (0.5, False)})
    with pytest.raises(popart.popart_exception, match=r"weights \['W1'\] have their own values"):
        s.updateOptimizerFromHost(new)


def _pool_model(ipu_of_pool: int | None, seed: int = 3):
    """x W0 -> [B, 2, 4] -> MaxPool(2) -> flatten -> W1 -> softmax -> nll; with
    ``ipu_of_pool`` the first matmul and the pool are on that IPU, the rest on the
    other one (the pool's output gradient comes from the other IPU)."""
    import contextlib

    rng = np.random.default_rng(seed)
    w0 = (rng.standard_normal((D, 8)) * 0.5).astype(np.float32)
    w1 = (rng.standard_normal((4, C)) * 0.5).astype(np.float32)
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, D]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [B]), "label")

    def on(ipu: int):
        return bd.virtualGraph(ipu) if ipu_of_pool is not None else contextlib.nullcontext()

    first = ipu_of_pool or 0
    with on(first):
        h = bd.aiOnnx.matmul([x, bd.addInitializedInputTensor(w0, "W0")])
        shape = bd.aiOnnx.constant(np.array([B, 2, 4], np.int64))
        h = bd.aiOnnx.reshape([h, shape])
        h = bd.aiOnnx.maxpool([h], kernel_shape=[2], strides=[2])[0]
    with on(1 - first):
        h = bd.aiOnnx.flatten([h], axis=1)
        p = bd.aiOnnx.softmax([bd.aiOnnx.matmul([h, bd.addInitializedInputTensor(w1, "W1")])])
        loss = bd.aiGraphcore.nllloss([p, lab], reduction=popart.ReductionType.Sum)
    return bd, x, lab, loss, {"W0": w0, "W1": w1}


@pytest.mark.parametrize("pipelining", [False, True])
def test_gradient_crossing_ipus_reaches_a_pool_on_the_other_ipu(pipelining):
    """A max pool on IPU 0 whose output gradient is made on IPU 1: the two-IPU run
    updates the weights as the one-IPU run of the same model does."""
    updated = {}
    X, L = _data(3)
    for ipus in (1, 2):
        bd, x, lab, loss, w0 = _pool_model(0 if ipus == 2 else None)
        o = popart.SessionOptions()
        o.enableGradientAccumulation = True
        o.accumulationFactor = 3
        if ipus == 2:
            o.virtualGraphMode = popart.VirtualGraphMode.Manual
            o.enablePipelining = pipelining
        s = _session(bd, loss, popart.ConstSGD(0.1), options=o, device=_device(8, ipus=ipus))
        s.run(popart.PyStepIO({x: X, lab: L}, s.initAnchorArrays()))
        s.weightsToHost()
        updated[ipus] = {k: np.zeros_like(v) for k, v in w0.items()}
        s.readWeights(popart.PyWeightsIO(updated[ipus]))
    for name, v in updated[1].items():
        assert not np.allclose(v, w0[name])  # the step changed it
        np.testing.assert_allclose(updated[2][name], v, rtol=1e-5, atol=1e-6, err_msg=name)


def test_gradient_of_a_tensor_read_on_both_ipus_is_summed():
    """h (IPU 0) is read by a Relu on IPU 0 and by a MatMul on IPU 1: its gradient is
    the sum of a gradient made on each IPU, and the two-IPU run updates the weights as
    the one-IPU run does."""
    import contextlib

    rng = np.random.default_rng(0)
    w0 = {n: (rng.standard_normal(s) * 0.4).astype(np.float32)
          for n, s in (("W0", (D, 5)), ("W1", (5, C)), ("W2", (5, C)))}  # fmt: skip
    X, L = _data(1)
    updated = {}
    for ipus in (1, 2):
        bd = popart.Builder()
        x = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, D]), "x")
        lab = bd.addInputTensor(popart.TensorInfo("INT32", [B]), "label")

        def on(ipu: int, bd=bd, ipus=ipus):
            return bd.virtualGraph(ipu) if ipus == 2 else contextlib.nullcontext()

        w = {n: bd.addInitializedInputTensor(v, n) for n, v in w0.items()}
        with on(0):
            h = bd.aiOnnx.matmul([x, w["W0"]])
            a = bd.aiOnnx.matmul([bd.aiOnnx.relu([h]), w["W2"]])
        with on(1):
            z = bd.aiOnnx.add([a, bd.aiOnnx.matmul([h, w["W1"]])])
            loss = bd.aiGraphcore.nllloss(
                [bd.aiOnnx.softmax([z]), lab], reduction=popart.ReductionType.Sum
            )
        o = popart.SessionOptions()
        if ipus == 2:
            o.virtualGraphMode = popart.VirtualGraphMode.Manual
        s = _session(bd, loss, popart.ConstSGD(0.1), options=o, device=_device(8, ipus=ipus))
        s.run(popart.PyStepIO({x: X[0], lab: L[0]}, s.initAnchorArrays()))
        s.weightsToHost()
        updated[ipus] = {k: np.zeros_like(v) for k, v in w0.items()}
        s.readWeights(popart.PyWeightsIO(updated[ipus]))
    for name, v in updated[1].items():
        assert not np.allclose(v, w0[name])
        np.testing.assert_allclose(updated[2][name], v, rtol=1e-5, atol=1e-6, err_msg=name)
