"""PopART's outlining of repeated op sequences (``popart_api.outline.outline_repeats``):
which sequences are outlined, and that outlining changes code and cycles but never a
value."""

from __future__ import annotations

import numpy as np
import pytest
from test_popart_training import _deep_model, _device, _session

import popart_api as popart
import popart_api.session as session_module
import popart_api.training as training_module
from popart_api import outline
from popart_api.outline import HIGH_VALUE, LOW_VALUE, Match, find_matches

CODE = ("controlCode", "internalExchangeCode", "vertexCode")


def _always(_length: int, _s0: int, _s1: int) -> bool:
    return True


def test_a_repeated_pair_is_found_at_every_occurrence():
    ids = [0, 1, 0, 1, 0, 1]
    values = [HIGH_VALUE, LOW_VALUE] * 3
    got = find_matches(ids, values, _always, 1.0)
    # the pair (value 1000.1, 3 times) beats the single conv (1000, 3 times)
    assert got == [Match(2, (0, 2, 4), HIGH_VALUE + LOW_VALUE)]


def test_low_value_sequences_stay_below_the_threshold():
    ids, values = [0, 0, 0, 0], [LOW_VALUE] * 4
    assert find_matches(ids, values, _always, 1.0) == []
    # a negative threshold outlines everything repeated (PopART's sessionoptions.hpp)
    got = find_matches(ids, values, _always, -1.0)
    assert got[0] == Match(2, (0, 2), 2 * LOW_VALUE)


def test_never_outlined_ops_break_sequences_and_occurrences_do_not_overlap():
    # -1: an op of a class of its own (a random op): the sequences stop at it
    ids = [0, 0, 0, -1, 0, 0, 0]
    got = find_matches(ids, [HIGH_VALUE] * 7, _always, 1.0)
    assert got == [Match(3, (0, 4), 3 * HIGH_VALUE)]
    # three convs in a row: the triple does not repeat, the pair once, then singles
    got = find_matches([0, 0, 0], [HIGH_VALUE] * 3, _always, 1.0)
    assert got == [Match(1, (0, 1, 2), HIGH_VALUE)]


def test_occurrences_connected_differently_are_not_one_subgraph():
    def isomorphic(length: int, s0: int, s1: int) -> bool:
        return s0 != 2 and s1 != 2  # the occurrence at 2 is wired differently

    got = find_matches([0, 1, 0, 1, 0, 1], [HIGH_VALUE, LOW_VALUE] * 3, isomorphic, 1.0)
    assert got[0] == Match(2, (0, 4), HIGH_VALUE + LOW_VALUE)


def _cnn(blocks: int = 3, channels: int = 8, side: int = 8):
    """Convolution + ReLU blocks of one shape: the repeated sequence of the tests."""
    rng = np.random.default_rng(0)
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [2, channels, side, side]), "x")
    h, weights = x, []
    for i in range(blocks):
        w = (rng.standard_normal((channels, channels, 3, 3)) * 0.2).astype(np.float32)
        weights.append(w)
        h = b.aiOnnx.conv([h, b.addInitializedInputTensor(w, f"w{i}")], pads=[1, 1, 1, 1])
        h = b.aiOnnx.relu([h])
    b.addOutputTensor(h)
    data = rng.standard_normal((2, channels, side, side)).astype(np.float32)
    return b, x, h, weights, data


def _reference(data: np.ndarray, weights: list[np.ndarray]) -> np.ndarray:
    """The blocks in numpy (float64): 3x3 convolutions, padding 1, then ReLU."""
    h = data.astype(np.float64)
    for w in weights:
        padded = np.pad(h, ((0, 0), (0, 0), (1, 1), (1, 1)))
        out = np.zeros((h.shape[0], w.shape[0], h.shape[2], h.shape[3]))
        for dy in range(3):
            for dx in range(3):
                window = padded[:, :, dy : dy + h.shape[2], dx : dx + h.shape[3]]
                out += np.einsum("nchw,oc->nohw", window, w[:, :, dy, dx])
        h = np.maximum(out, 0.0)
    return h


@pytest.fixture
def matches_seen(monkeypatch):
    """The sequences each session outlined, in order of build."""
    seen: list[list[Match]] = []

    def spy(session, excluded=()):
        forward, matches = outline.outline_repeats(session, excluded)
        seen.append(matches)
        return forward, matches

    monkeypatch.setattr(session_module, "outline_repeats", spy)
    monkeypatch.setattr(training_module, "outline_repeats", spy)
    return seen


def _infer(enable: bool, **options):
    b, x, out, weights, data = _cnn()
    opts = popart.SessionOptions()
    opts.enableOutlining = enable
    for key, value in options.items():
        setattr(opts, key, value)
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": 1, "tilesPerIPU": 16})
    s = popart.InferenceSession(
        b.getModelProto(), popart.DataFlow(1, {out: popart.AnchorReturnType("All")}), device,
        userOptions=opts,
    )  # fmt: skip
    s.prepareDevice()
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO({x: data}, anchors))
    cats = s.getGraphReport()["memory"]["byCategory"]
    code = {
        c: sum(sum(part) for region in cats[c].values() for part in region.values()) for c in CODE
    }
    return anchors[out], code, s.getReport().execution.totalCycles.total, (data, weights)


def test_repeated_blocks_run_as_one_function_with_the_same_values(matches_seen):
    on, code_on, cycles_on, (data, weights) = _infer(True)
    off, code_off, cycles_off, _ = _infer(False)
    # conv + relu at nodes 0, 2 and 4 (the copy-cost pruning keeps the pair)
    assert matches_seen[0] == [Match(2, (0, 2, 4), HIGH_VALUE + LOW_VALUE)]
    assert matches_seen[1] == []
    np.testing.assert_array_equal(on, off)
    np.testing.assert_allclose(on, _reference(data, weights), rtol=1e-4, atol=1e-4)
    # the blocks' compute sets and exchanges are stored once (the vertex code, one
    # copy per codelet per tile, may gain the copies' codelets); the copies in and out
    # take cycles
    assert code_on["controlCode"] < code_off["controlCode"]
    assert code_on["internalExchangeCode"] < code_off["internalExchangeCode"]
    assert cycles_on > cycles_off


def test_an_infinite_threshold_outlines_nothing(matches_seen):
    same, code, cycles, _ = _infer(True, outlineThreshold=float("inf"))
    off, code_off, cycles_off, _ = _infer(False)
    assert matches_seen[0] == []
    np.testing.assert_array_equal(same, off)
    assert code == code_off and cycles == cycles_off


def _train(enable: bool, pruning: bool = True):
    bd, loss, data = _deep_model(np.random.default_rng(0))
    opts = popart.SessionOptions()
    opts.enableOutlining = enable
    opts.enableOutliningCopyCostPruning = pruning
    s = _session(bd, loss, popart.ConstSGD(0.1), options=opts, device=_device(16))
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(data, anchors))
    s.weightsToHost()
    weights = {f"W{k}": np.zeros((64 if k == 0 else 128, 128), np.float32) for k in range(4)}
    s.readWeights(popart.PyWeightsIO(weights))
    return anchors[loss], weights


def test_training_with_outlined_layers_gives_the_same_loss_and_weights(matches_seen):
    loss_on, w_on = _train(True)
    loss_all, w_all = _train(True, pruning=False)
    loss_off, w_off = _train(False)
    # the layers are MatMul, Sigmoid, Tanh; the first MatMul reads 64 features, the
    # others 128. In training every output is copied out (the backward pass reads
    # them), so the copy-cost pruning keeps the MatMul alone; without it the whole
    # (Sigmoid, Tanh, MatMul) sequence of the three later layers is outlined
    assert matches_seen[0] == [Match(1, (3, 6, 9), HIGH_VALUE)]
    assert matches_seen[1] == [Match(3, (1, 4, 7), HIGH_VALUE + 2 * LOW_VALUE)]
    for loss, w in ((loss_on, w_on), (loss_all, w_all)):
        np.testing.assert_array_equal(loss, loss_off)
        for k in w_off:
            np.testing.assert_array_equal(w[k], w_off[k])


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("outlineThreshold", "high", "outlineThreshold: 'high' must be a number"),
        ("outlineSequenceBreakCost", True, "outlineSequenceBreakCost: True must be a number"),
        ("enableOutliningCopyCostPruning", 1, "must be True or False"),
    ],
)
def test_outlining_options_are_checked(key, value, message):
    opts = popart.SessionOptions()
    with pytest.raises(popart.popart_exception, match=message):
        setattr(opts, key, value)


def test_outlining_defaults_are_popart_s():
    # willow/include/popart/sessionoptions.hpp
    opts = popart.SessionOptions()
    assert opts.enableOutlining is True
    assert opts.outlineThreshold == 1.0
    assert opts.outlineSequenceBreakCost == 10000.0
    assert opts.enableOutliningCopyCostPruning is True
