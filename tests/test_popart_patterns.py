"""``popart.Patterns``: PopART's pattern names, levels and checks, and what switching
the modelled patterns off changes: InPlace (a Relu into its MatMul's output) and the
direct Softmax -> Nll gradient. Off, each costs more memory and cycles, as in PopART,
and the values are the same (in-placing exactly; the unfused gradient to rounding)."""

from __future__ import annotations

import numpy as np
import pytest

import popart_api as popart

B, D, C = 64, 64, 10


def _model(seed=0):
    rng = np.random.default_rng(seed)
    bd = popart.Builder()
    x = bd.addInputTensor(popart.TensorInfo("FLOAT", [B, D]), "x")
    lab = bd.addInputTensor(popart.TensorInfo("INT32", [B]), "label")
    t = x
    for k in range(3):
        w = (rng.standard_normal((D, D)) * 0.2).astype(np.float32)
        t = bd.aiOnnx.relu([bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(w, f"W{k}")])])
    w = (rng.standard_normal((D, C)) * 0.2).astype(np.float32)
    p = bd.aiOnnx.softmax([bd.aiOnnx.matmul([t, bd.addInitializedInputTensor(w, "Wo")])], axis=1)
    loss = bd.aiGraphcore.nllloss([p, lab])
    data = {
        x: rng.standard_normal((B, D)).astype(np.float32),
        lab: rng.integers(0, C, B).astype(np.int32),
    }
    return bd, p, loss, data


def _run(patterns, training: bool, options=None):
    bd, p, loss, data = _model()
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 16})
    if training:
        s = popart.TrainingSession(
            fnModel=bd.getModelProto(),
            dataFlow=popart.DataFlow(1, {loss: popart.AnchorReturnType("ALL")}),
            deviceInfo=device,
            loss=loss,
            optimizer=popart.ConstSGD(0.1),
            patterns=patterns,
            userOptions=options,
        )
    else:
        s = popart.InferenceSession(
            fnModel=bd.getModelProto(),
            dataFlow=popart.DataFlow(1, {p: popart.AnchorReturnType("ALL")}),
            deviceInfo=device,
            patterns=patterns,
        )
    s.prepareDevice()
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(data, anchors))
    memory = sum(t.memory.total for t in s.getReport().compilation.tiles)
    weights = {}
    if training:
        s.weightsToHost()
        weights = {k: np.zeros((D, C if k == "Wo" else D), np.float32) for k in ("W0", "Wo")}
        s.readWeights(popart.PyWeightsIO(weights))
    out = anchors[loss if training else p]
    return s.getCycleCount(), memory, out, weights


def _without(*names):
    patterns = popart.Patterns()
    for name in names:
        patterns.enablePattern(name, False)
    return patterns


@pytest.mark.parametrize("training", [False, True])
def test_inplace_off_costs_memory_and_cycles_values_equal(training):
    """InPlace (on by default): the Relus overwrite their MatMul's output; off, each
    writes a new tensor: more memory, the same values. (The cycles stay within a few
    per op: Poplibs' in-place and out-of-place non-linearity vertices cost about the
    same.)"""
    on = _run(None, training)
    off = _run(_without("InPlace"), training)
    assert off[1] > on[1]
    assert abs(off[0] - on[0]) < 0.05 * on[0]
    np.testing.assert_array_equal(off[2], on[2])
    for k in on[3]:
        np.testing.assert_array_equal(off[3][k], on[3][k])


def test_softmax_grad_direct_off_costs_cycles_values_close():
    """Without SoftmaxGradDirect and NlllWithSoftmaxGradDirect the Nll gradient and the
    Softmax gradient run one after the other: more cycles and memory than the direct
    (p - onehot)·w, the same update to rounding."""
    on = _run(None, True)
    off = _run(_without("SoftmaxGradDirect", "NlllWithSoftmaxGradDirect"), True)
    assert off[0] > on[0] and off[1] > on[1]
    np.testing.assert_array_equal(off[2], on[2])  # the forward pass is the same
    for k in on[3]:
        np.testing.assert_allclose(off[3][k], on[3][k], rtol=1e-5, atol=1e-6)
    # one of the two is enough for the direct gradient, as in PopART
    one = _run(_without("NlllWithSoftmaxGradDirect"), True)
    assert one[0] == on[0]


def test_inplace_with_recomputation_keeps_the_values():
    """A recomputed node is not in-placed (its replay would read the overwritten
    input): Standard recomputation with InPlace on gives NoRecompute's values."""
    o = popart.SessionOptions()
    o.autoRecomputation = popart.RecomputationType.Standard
    recomputed = _run(None, True, o)
    plain = _run(None, True)
    np.testing.assert_array_equal(recomputed[2], plain[2])
    for k in plain[3]:
        np.testing.assert_array_equal(recomputed[3][k], plain[3][k])


def test_levels_and_names_as_popart():
    default = popart.Patterns()
    assert default.InPlace and default.SoftMaxGradDirect and default.MatMulOp
    assert default.isPatternEnabled("OpToIdentity")
    assert not default.isPatternEnabled("SplitGather")  # off by default in PopART
    minimal = popart.Patterns(popart.PatternsLevel.Minimal)
    assert not minimal.InPlace and not minimal.SoftMaxGradDirect and minimal.MatMulOp
    everything = popart.Patterns(popart.PatternsLevel.All)
    assert everything.isPatternEnabled("SplitGather") and everything.InPlace
    listed = popart.Patterns(["InPlace", "MatMulOp"])
    assert listed.InPlace and listed.MatMulOp and not listed.isPatternEnabled("PreUniRepl")
    listed.PreUniRepl = True
    assert listed.isPatternEnabled("PreUniRepl")


def test_pattern_errors_name_the_pattern():
    with pytest.raises(popart.popart_exception, match=r"unknown pattern 'Inplace'.*InPlace"):
        popart.Patterns(["Inplace"])
    with pytest.raises(popart.popart_exception, match="'MatMulOp' is mandatory"):
        popart.Patterns().enablePattern("MatMulOp", False)
    bd, _p, loss, _ = _model()
    kwargs = {
        "fnModel": bd.getModelProto(),
        "dataFlow": popart.DataFlow(1, {loss: popart.AnchorReturnType("ALL")}),
        "deviceInfo": popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
    }
    none = popart.Patterns(popart.PatternsLevel.NoPatterns)
    with pytest.raises(popart.popart_exception, match=r"pattern '.*' must be enabled"):
        popart.InferenceSession(patterns=none, **kwargs)
    popart.InferenceSession(patterns=none.enableRuntimeAsserts(False), **kwargs)
    with pytest.raises(popart.popart_exception, match=r"patterns must be a popart\.Patterns"):
        popart.InferenceSession(patterns=["InPlace"], **kwargs)
