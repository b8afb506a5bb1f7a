"""A session's build-only state (the model's values, the per-node records) is freed
before the compile, the session's largest host memory, and the step still trains as
numpy does."""

from __future__ import annotations

import numpy as np
import pytest

import popart_api as popart
import popart_api.session as session_module
from tests.test_popart_training import _data, _mlp, _np_grads, _params


def test_values_and_records_are_freed_before_the_engine_compiles(monkeypatch):
    seen: dict[str, int] = {}
    built: list[dict] = []
    finish = session_module.TrainingSession._finish_build

    def finish_build(self, values):  # the build's values, as the session passes them
        built.append(values)
        seen["values_at_build"] = len(values)
        finish(self, values)

    engine = session_module.Engine

    class WatchedEngine(engine):
        def __init__(self, *args, **kwargs):
            seen["values_at_compile"] = len(built[0])
            seen["records_at_compile"] = len(current[0].lowered.records)
            super().__init__(*args, **kwargs)

    current: list = []
    init = session_module._Session.__init__

    def session_init(self, *args, **kwargs):
        current.append(self)
        init(self, *args, **kwargs)

    monkeypatch.setattr(session_module.TrainingSession, "_finish_build", finish_build)
    monkeypatch.setattr(session_module, "Engine", WatchedEngine)
    monkeypatch.setattr(session_module._Session, "__init__", session_init)
    bd, x, lab, loss = _mlp(reduction=popart.ReductionType.Sum)
    s = popart.TrainingSession(
        fnModel=bd.getModelProto(),
        dataFlow=popart.DataFlow(1, {loss: popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"numIPUs": 1, "tilesPerIPU": 8}),
        loss=loss,
        optimizer=popart.ConstSGD(0.1),
    )
    s.prepareDevice()
    assert seen["values_at_build"] >= 9  # inputs, weights and every node's output
    assert seen["values_at_compile"] == 0
    assert seen["records_at_compile"] == 0
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    X, L = _data(1)
    s.run(popart.PyStepIO({x: X[0], lab: L[0]}, anchors))
    p = {k: v.astype(np.float64) for k, v in _params().items()}
    want, _ = _np_grads(p, X[0], L[0], mean=False)
    assert float(np.asarray(anchors[loss]).reshape(-1)[0]) == pytest.approx(want, rel=1e-5)
