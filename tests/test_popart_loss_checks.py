"""A TrainingSession trains on a scalar loss: a loss of several elements is refused
with its shape and a hint, before anything is compiled."""

from __future__ import annotations

import numpy as np
import pytest

import popart_api as popart


def _session(reduce: bool) -> popart.TrainingSession:
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 3]), "x")
    w = b.addInitializedInputTensor(np.ones([3, 2], np.float32), "w")
    y = b.aiOnnx.matmul([x, w])
    loss = b.aiOnnx.reducemean([y], keepdims=0) if reduce else y
    return popart.TrainingSession(
        fnModel=b.getModelProto(),
        dataFlow=popart.DataFlow(1, {loss: popart.AnchorReturnType("ALL")}),
        loss=loss,
        optimizer=popart.ConstSGD(0.1),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
    )


def test_a_loss_of_several_elements_is_refused_with_its_shape():
    with pytest.raises(popart.popart_exception, match=r"has shape \[4, 2\] \(8 elements\)"):
        _session(reduce=False).prepareDevice()


def test_a_reduced_loss_trains():
    session = _session(reduce=True)
    session.prepareDevice()
    anchors = session.initAnchorArrays()
    data = np.arange(12, dtype=np.float32).reshape(4, 3) / 10
    session.weightsFromHost()
    session.run(popart.PyStepIO({"x": data}, anchors))
    (loss,) = anchors.values()
    assert np.isclose(float(np.asarray(loss).reshape(-1)[0]), (data @ np.ones((3, 2))).mean())
