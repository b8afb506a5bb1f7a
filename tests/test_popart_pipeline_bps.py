"""Pipelined training without gradient accumulation (PopART pipelines over the
``batchesPerStep`` batches of a step and each stage updates its weights after every
backward) and automatic virtual graphs with pipelining.

The reference is a numpy replay of the same static schedule (graphcore/popart
``willow/src/transforms/pipeline.cpp``, ``PipelineInfo``: stage ``s`` runs the forward
of batch ``k`` in pipeline cycle ``k + s`` and its backward in ``k + 2S - 1 - s``),
in float64, with each stage's weights updated right after its backward: the forward
of a later batch sees the weights as they are at that point (stale by the pipeline's
depth), the backward the activations stashed by its own forward.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import popart_api as popart

B, D, H, C = 4, 6, 5, 3
LR = 0.05


def _model(seed=0):
    rng = np.random.default_rng(seed)
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, D]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [B]), "label")
    w = {
        "W0": (rng.standard_normal((D, H)) * 0.4).astype(np.float32),
        "W1": (rng.standard_normal((H, H)) * 0.4).astype(np.float32),
        "Wout": (rng.standard_normal((H, C)) * 0.4).astype(np.float32),
    }
    with bd.virtualGraph(0):
        t = bd.aiOnnx.relu([bd.aiOnnx.matmul([x, bd.addInitializedInputTensor(w["W0"], "W0")])])
    with bd.virtualGraph(1):
        t = bd.aiOnnx.relu([bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(w["W1"], "W1")])])
        z = bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(w["Wout"], "Wout")])
        p = bd.aiOnnx.softmax([z], axis=1)
        loss = bd.aiGraphcore.nllloss([p, lab], reduction=popart.ReductionType.Sum)
    return bd, x, lab, loss, w


def _session(bd, loss, bps, mode=popart.VirtualGraphMode.Manual, pipelining=True, ipus=2):
    o = popart.SessionOptions()
    o.virtualGraphMode = mode
    o.enablePipelining = pipelining
    s = popart.TrainingSession(
        fnModel=bd.getModelProto(),
        dataFlow=popart.DataFlow(bps, {loss: popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"numIPUs": ipus, "tilesPerIPU": 8}),
        loss=loss,
        optimizer=popart.ConstSGD(LR),
        userOptions=o,
    )
    s.prepareDevice()
    s.weightsFromHost()
    return s


def _numpy_pipeline(w, X, L):
    """Replay the 2-stage schedule in float64: returns (weights, per-batch losses)."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    n, stages = len(X), 2
    stash: dict = {}
    losses = [0.0] * n
    for c in range(n + 2 * stages - 1):
        for s in reversed(range(stages)):  # forwards, last stage first
            k = c - s
            if not 0 <= k < n:
                continue
            if s == 0:
                a = X[k].astype(np.float64)
                z0 = a @ w["W0"]
                stash[0, k] = (a, z0)
                stash["t0", k] = np.maximum(z0, 0)
            else:
                t0 = stash["t0", k]
                z1 = t0 @ w["W1"]
                t1 = np.maximum(z1, 0)
                z = t1 @ w["Wout"]
                e = np.exp(z - z.max(1, keepdims=True))
                p = e / e.sum(1, keepdims=True)
                losses[k] = -np.log(p[np.arange(B), L[k]]).sum()
                stash[1, k] = (t0, z1, t1, p)
        for s in range(stages):  # backwards, first stage first
            k = c - (2 * stages - 1 - s)
            if not 0 <= k < n:
                continue
            if s == 1:
                t0, z1, t1, p = stash[1, k]
                d = p.copy()
                d[np.arange(B), L[k]] -= 1
                g_out = t1.T @ d
                dz1 = (d @ w["Wout"].T) * (z1 > 0)
                g1 = t0.T @ dz1
                stash["dt0", k] = dz1 @ w["W1"].T
                w["Wout"] -= LR * g_out
                w["W1"] -= LR * g1
            else:
                a, z0 = stash[0, k]
                dz0 = stash["dt0", k] * (z0 > 0)
                w["W0"] -= LR * (a.T @ dz0)
    return w, losses


def _read(s, w0):
    s.weightsToHost()
    got = {k: np.zeros_like(v) for k, v in w0.items()}
    s.readWeights(popart.PyWeightsIO(got))
    return got


def test_pipelining_without_accumulation_updates_per_batch_as_popart():
    """4 batches per step, no gradient accumulation: weights and losses equal the numpy
    replay of PopART's schedule with per-batch (stale) updates."""
    bd, x, lab, loss, w0 = _model()
    s = _session(bd, loss, 4)
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4, B, D)).astype(np.float32)
    L = rng.integers(0, C, (4, B)).astype(np.int32)
    a = s.initAnchorArrays()
    assert a[loss].shape == (4,)
    s.run(popart.PyStepIO({x: X, lab: L}, a))
    want, losses = _numpy_pipeline(w0, X, L)
    got = _read(s, w0)
    for k in w0:
        np.testing.assert_allclose(got[k], want[k], atol=2e-5, err_msg=k)
    np.testing.assert_allclose(a[loss], losses, rtol=1e-5)
    # the staleness is real: updating after every batch without the pipeline differs
    plain = {k: v.astype(np.float64) for k, v in w0.items()}
    assert not np.allclose(got["W0"], _sequential_w0(plain, X, L), atol=1e-4)


def _sequential_w0(w, X, L):
    for k in range(len(X)):
        a = X[k].astype(np.float64)
        z0 = a @ w["W0"]
        t0 = np.maximum(z0, 0)
        z1 = t0 @ w["W1"]
        t1 = np.maximum(z1, 0)
        z = t1 @ w["Wout"]
        e = np.exp(z - z.max(1, keepdims=True))
        d = e / e.sum(1, keepdims=True)
        d[np.arange(B), L[k]] -= 1
        dz1 = (d @ w["Wout"].T) * (z1 > 0)
        dz0 = (dz1 @ w["W1"].T) * (z0 > 0)
        w["Wout"] -= LR * (t1.T @ d)
        w["W1"] -= LR * (t0.T @ dz1)
        w["W0"] -= LR * (a.T @ dz0)
    return w["W0"]


def test_pipelining_without_accumulation_needs_enough_batches_per_step():
    """PopART's PipelineInfo: main-phase cycles = batchesPerStep - (2S - 2) >= 1."""
    bd, _x, _lab, loss, _ = _model()
    with pytest.raises(popart.popart_exception, match="batchesPerStep >= 3"):
        _session(bd, loss, 2)


def test_auto_virtual_graphs_with_pipelining_train():
    """virtualGraphMode Auto with pipelining: the session places the nodes itself and
    the pipelined step trains (the loss falls over repeated steps on one batch)."""
    bd, x, lab, loss, _ = _model()
    s = _session(bd, loss, 3, mode=popart.VirtualGraphMode.Auto)
    rng = np.random.default_rng(4)
    X = np.repeat(rng.standard_normal((1, B, D)).astype(np.float32), 3, axis=0)
    L = np.repeat(rng.integers(0, C, (1, B)).astype(np.int32), 3, axis=0)
    a = s.initAnchorArrays()
    first = None
    for _ in range(4):
        s.run(popart.PyStepIO({x: X, lab: L}, a))
        first = a[loss][0] if first is None else first
    assert a[loss][-1] < first


def _linear_model():
    """The MNIST tutorial's model, no placement annotations: MatMul, Add, Softmax, Nll."""
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, 784]))
    w = bd.addInitializedInputTensor(np.zeros([784, 10], np.float32))
    b = bd.addInitializedInputTensor(np.zeros([10], np.float32))
    out = bd.aiOnnx.add([bd.aiOnnx.matmul([x, w]), b])
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [B]))
    loss = bd.aiGraphcore.nllloss([bd.aiOnnx.softmax([out]), lab], popart.ReductionType.Sum)
    return bd, x, lab, loss


def test_auto_virtual_graphs_cut_where_popart_does():
    """PopART's AutoVirtualGraph: budget half the cost; the split node closest to it
    is the MatMul (its weight is almost all the cost), so the MatMul stays on IPU 0
    and the rest goes to IPU 1; an even cost gives an even cut."""
    from popart_api.pipeline import auto_virtual_graphs

    bd, *_ = _linear_model()
    model = onnx.load_from_string(bd.getModelProto())
    assert auto_virtual_graphs(model, 2, True, "test") == [0, 1, 1, 1]
    bd4 = popart.Builder()
    t = bd4.addInputTensor(popart.TensorInfo("FLOAT", [2, 8]))
    for _ in range(4):
        t = bd4.aiOnnx.matmul([t, bd4.addInitializedInputTensor(np.ones([8, 8], np.float32))])
    model4 = onnx.load_from_string(bd4.getModelProto())
    assert auto_virtual_graphs(model4, 2, False, "test") == [0, 0, 1, 1]
    assert auto_virtual_graphs(model4, 4, False, "test") == [0, 1, 2, 3]
    with pytest.raises(popart.popart_exception, match="could not find 4 places"):
        auto_virtual_graphs(model4, 5, False, "test")


def test_auto_virtual_graphs_with_pipelining_on_an_unannotated_model():
    """The tutorial's case: Auto placement and pipelining without accumulation."""
    bd, x, lab, loss = _linear_model()
    s = _session(bd, loss, 3, mode=popart.VirtualGraphMode.Auto)
    rng = np.random.default_rng(0)
    data = {
        x: rng.standard_normal((3, B, 784)).astype(np.float32),
        lab: rng.integers(0, 10, (3, B)).astype(np.int32),
    }
    a = s.initAnchorArrays()
    s.run(popart.PyStepIO(data, a))
    # zero weights: uniform probabilities, a loss of B log 10, for the batches whose
    # forwards run before the first update (batch 0's backward of stage 1, cycle 2,
    # after that cycle's forwards); batch 2's second stage sees the updated bias
    np.testing.assert_allclose(a[loss][:2], np.full(2, B * np.log(10)), rtol=1e-5)
    assert abs(a[loss][2] - B * np.log(10)) > 1e-3


def test_older_virtual_graph_options_set_the_mode():
    """PopART's older enableVirtualGraphs / autoVirtualGraph set virtualGraphMode."""
    o = popart.SessionOptions()
    o.enableVirtualGraphs = True
    assert o.virtualGraphMode is popart.VirtualGraphMode.Manual
    o.autoVirtualGraph = True
    assert o.virtualGraphMode is popart.VirtualGraphMode.Auto
    with pytest.raises(popart.popart_exception, match="must be True or False"):
        o.autoVirtualGraph = 1


def _memory(s) -> int:
    return sum(int(t.memory.totalIncludingGaps) for t in s.getReport().compilation.tiles)


def test_main_phase_repeats_one_cycle_with_counter_addressed_stash():
    """9 batches per step: fill (3 cycles), the main cycle repeated 6 times, flush
    (3 cycles), as PopART's ``getFullProgramFromPipelineFragments``. The values are the
    numpy replay's; the compiled graph does not grow with the batches per step (one
    main cycle, a stash addressed by counters), and the stash and restore are
    DynamicUpdateSlice / DynamicSlice vertices, as PopART's StashOpx and RestoreOpx."""
    bd, x, lab, loss, w0 = _model()
    sizes = {}
    for bps in (5, 9):
        s = _session(bd, loss, bps)
        sizes[bps] = _memory(s)
    rng = np.random.default_rng(4)
    weights = _step_equals_numpy(s, x, lab, loss, w0, w0, rng, 9, 2e-5)
    assert sizes[5] == sizes[9]
    names = {cs.name for cs in s.getReport().compilation.computeSets}
    assert any(n.startswith("stash/stage0/") and n.endswith("/update") for n in names)
    assert any(n.startswith("stash/stage1/") and n.endswith("/restore/slice") for n in names)
    # a second step continues from the indices the first left (9 mod depth)
    start = {k: v.astype(np.float32) for k, v in weights.items()}
    _step_equals_numpy(s, x, lab, loss, w0, start, rng, 9, 5e-5)


def _step_equals_numpy(s, x, lab, loss, w0, start, rng, bps, atol):
    """Run one step of ``bps`` random batches; its losses and the weights after it
    equal the numpy replay from weights ``start``. Returns the replay's weights."""
    X = rng.standard_normal((bps, B, D)).astype(np.float32)
    L = rng.integers(0, C, (bps, B)).astype(np.int32)
    a = s.initAnchorArrays()
    s.run(popart.PyStepIO({x: X, lab: L}, a))
    want, losses = _numpy_pipeline(start, X, L)
    np.testing.assert_allclose(a[loss], losses, rtol=1e-4)
    got = _read(s, w0)
    for k in w0:
        np.testing.assert_allclose(got[k], want[k], atol=atol, err_msg=k)
    return want


def test_a_node_reading_a_later_stage_is_refused():
    # Stage 1 made what stage 0 read: each batch's Neg read another batch's Relu (or a
    # zero before the first), and the anchors came back shifted by one batch.
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, 3]), "x")
    with b.virtualGraph(0), b.pipelineStage(1):
        z = b.aiOnnx.relu([x])
    with b.virtualGraph(1), b.pipelineStage(0):
        y = b.aiOnnx.neg([z])
    o = popart.SessionOptions()
    o.virtualGraphMode = popart.VirtualGraphMode.Manual
    o.enablePipelining = True
    s = popart.InferenceSession(
        b.getModelProto(), popart.DataFlow(4, {y: popart.AnchorReturnType("ALL")}),
        popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4, "numIPUs": 2}),
        userOptions=o,
    )  # fmt: skip
    with pytest.raises(popart.popart_exception, match=r"Neg \(node 'Neg'\) in pipeline stage 0 "):
        s.prepareDevice()
