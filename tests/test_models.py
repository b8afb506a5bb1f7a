"""Real models (``examples/models``): scaled-down versions run in the default suite,
checked against ``onnx.reference``; the full-size ones are ``slow``.

Parameter counts are checked against the published figures of the architectures
(torchvision's ResNet-18 11,689,512 and ResNet-50 25,557,032 trainable parameters;
a BERT-base encoder layer's 7,087,872), so the graphs built are the models named.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))

from bert import BERT_BASE, build_bert_layer
from resnet import RESNET18, RESNET50, build_resnet
from run_model import build, directional_check, run_model

import popart_api as popart


def _trainable(proto) -> int:
    """Float initializers except BatchNormalization's running statistics."""
    stats = {n for node in proto.graph.node if node.op_type == "BatchNormalization"
             for n in node.input[3:5]}  # fmt: skip
    return sum(
        int(np.prod(t.dims))
        for t in proto.graph.initializer
        if t.data_type == TensorProto.FLOAT and t.name not in stats
    )


def test_parameter_counts_are_the_published_ones():
    assert _trainable(build_resnet(RESNET18).proto) == 11_689_512
    assert _trainable(build_resnet(RESNET50).proto) == 25_557_032
    h, f = 768, 3072
    assert (
        _trainable(build_bert_layer(BERT_BASE).proto) == 4 * (h * h + h) + 2 * h * f + f + h + 4 * h
    )


def test_models_are_deterministic_in_their_seed():
    a, b = build_resnet(RESNET18, seed=3).proto, build_resnet(RESNET18, seed=3).proto
    assert a.SerializeToString() == b.SerializeToString()
    c = build_bert_layer(BERT_BASE, seed=4).proto
    first = numpy_helper.to_array(c.graph.initializer[0])
    other = numpy_helper.to_array(build_bert_layer(BERT_BASE, seed=5).proto.graph.initializer[0])
    assert not np.array_equal(first, other)


@pytest.mark.parametrize("model", ["bert-tiny", "resnet-tiny"])
def test_scaled_down_inference_matches_onnx_reference(model):
    result = run_model(model, tiles=16)
    assert result.matched, result
    assert result.max_error < 1e-4
    assert result.cycles > 0 and result.vertices > 0


@pytest.mark.parametrize("model", ["bert-tiny", "resnet-tiny"])
def test_scaled_down_training_step_matches_finite_differences(model):
    result = run_model(model, train=True, tiles=16)
    assert result.matched, result
    analytic, numeric = result.gradient_check
    assert abs(numeric) > 1e-4  # the direction moves the loss: the check has teeth
    assert analytic == pytest.approx(numeric, rel=1e-3)


def test_directional_check_detects_a_wrong_gradient():
    """The check passes for a session's gradient and fails for it 10 % too large
    or with its elements shuffled."""
    proto, inputs, _outputs, loss = build("bert-tiny", train=True)
    grad = _session_gradient(proto, inputs, loss, "ffn.in.weight")
    good = directional_check(proto, inputs, loss, {"ffn.in.weight": grad})
    scaled = directional_check(proto, inputs, loss, {"ffn.in.weight": 1.1 * grad})
    shuffled = np.random.default_rng(0).permutation(grad.ravel()).reshape(grad.shape)
    turned = directional_check(proto, inputs, loss, {"ffn.in.weight": shuffled})
    assert good[0] == pytest.approx(good[1], rel=1e-3)
    assert scaled[0] != pytest.approx(scaled[1], rel=1e-2)
    assert turned[0] != pytest.approx(turned[1], rel=1e-1)


def _session_gradient(proto, inputs, loss: str, weight: str) -> np.ndarray:
    grad = popart.reservedGradientPrefix() + weight
    session = popart.TrainingSession(
        fnModel=proto.SerializeToString(),
        dataFlow=popart.DataFlow(1, {grad: popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 16}),
        loss=loss,
        optimizer=popart.ConstSGD(0.0),
    )
    session.prepareDevice()
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO(inputs, anchors))
    return np.asarray(anchors[grad], np.float64)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "train"),
    [("bert-base", False), ("bert-base", True), ("resnet18", False), ("resnet18", True)],
)
def test_full_size_model_on_one_mk2_matches_reference(model, train):
    result = run_model(model, train=train)
    assert result.matched, result


@pytest.mark.slow
def test_resnet50_inference_on_one_mk2():
    # fits since a tile's receive code is per sender, not per region received
    assert run_model("resnet50").matched
