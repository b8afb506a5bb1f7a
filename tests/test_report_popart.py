"""PopART's session reports as the PopART User Guide states them ("Retrieving profiling
reports"): JSON text or CBOR, the runs forgotten after a fetch unless
``resetProfile=False``, "Execution profiling not enabled" and
``{"profilerMode":"NONE"}`` without profiling, ``reportOptions`` applied to the
summary."""

from __future__ import annotations

import json

import cbor2
import numpy as np
import pytest

import popart_api as popart
from popart_api.report import NOT_ENABLED, JsonReport


def _session(device=None, engine_options=None, report_options=None):
    b = popart.Builder()
    x = b.addInputTensor(popart.TensorInfo("FLOAT", [4, 8]))
    y = b.aiOnnx.relu([b.aiOnnx.add([x, x])])
    b.addOutputTensor(y)
    opts = popart.SessionOptions()
    if engine_options:
        opts.engineOptions = engine_options
    if report_options:
        opts.reportOptions = report_options
    flow = popart.DataFlow(1, {y: popart.AnchorReturnType("ALL")})
    device = device or popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 8})
    session = popart.InferenceSession(
        fnModel=b.getModelProto(), dataFlow=flow, deviceInfo=device, userOptions=opts
    )
    session.prepareDevice()
    session.weightsFromHost()
    feeds = {x: np.arange(32, dtype=np.float32).reshape(4, 8)}
    return session, lambda: session.run(popart.PyStepIO(feeds, session.initAnchorArrays()))


def test_graph_report_is_json_text_or_cbor_of_the_graph_profile():
    session, run = _session()
    run()
    profile = session.engine.getGraphProfile()
    text = session.getGraphReport()
    assert isinstance(text, str) and isinstance(text, JsonReport)
    assert json.loads(text) == json.loads(json.dumps(profile))
    assert text["graph"] == profile["graph"]  # also reads as the dict it encodes
    data = session.getGraphReport(useCbor=True)
    assert isinstance(data, bytes)
    assert cbor2.loads(data) == json.loads(json.dumps(profile))


def test_execution_report_resets_the_profile_unless_asked_not_to():
    session, run = _session()
    run()
    run()
    kept = json.loads(session.getExecutionReport(resetProfile=False))
    assert len(kept["runs"]) == 2
    first = cbor2.loads(session.getExecutionReport(useCbor=True))
    assert first["runs"] == kept["runs"]
    assert json.loads(session.getExecutionReport())["runs"] == []  # the fetch reset it
    run()
    assert len(session.getExecutionReport()["runs"]) == 1


@pytest.mark.parametrize("fetch", ["execution", "summary"])
def test_cycle_count_of_the_last_run_survives_a_report_fetch(fetch):
    session, run = _session()
    with pytest.raises(popart.popart_exception, match="no run yet"):
        session.getCycleCount()
    run()
    run_ = json.loads(session.getExecutionReport(resetProfile=False))["runs"][-1]
    cycles = run_["cyclesTo"] - run_["cyclesFrom"]
    assert cycles > 0
    if fetch == "execution":
        assert session.getExecutionReport()["runs"]  # this fetch resets the profile
    else:
        assert "Runs: 1;" in session.getSummaryReport()
    assert session.getExecutionReport(resetProfile=False)["runs"] == []
    assert session.getCycleCount() == cycles  # PopART keeps the last run's count
    run()
    again = session.getExecutionReport(resetProfile=False)["runs"]
    assert len(again) == 1
    assert session.getCycleCount() == again[0]["cyclesTo"] - again[0]["cyclesFrom"]


def test_summary_report_applies_report_options_and_resets():
    session, run = _session(report_options={"showExecutionSteps": "true"})
    run()
    text = session.getSummaryReport(resetProfile=False)
    assert "Steps:" in text and "OnTileExecute" in text
    assert "Runs: 1;" in text
    text = session.getSummaryReport()
    assert "Runs: 1;" in text
    assert "Runs: 1;" not in session.getSummaryReport()  # reset by the previous fetch
    plain, run2 = _session()
    run2()
    assert "Steps:" not in plain.getSummaryReport()


def test_without_profiling_the_reports_say_so():
    session, run = _session(device=popart.DeviceManager().createCpuDevice())
    run()
    summary = session.getSummaryReport()
    assert summary.rstrip().endswith(NOT_ENABLED)
    assert "Execution:" not in summary
    assert "Graph:" in summary  # the graph's sections are still there
    assert json.loads(session.getExecutionReport()) == {"profilerMode": "NONE"}
    assert cbor2.loads(session.getExecutionReport(useCbor=True)) == {"profilerMode": "NONE"}


@pytest.mark.parametrize("instrument", [False, True])
def test_a_hardware_device_is_profiled_only_when_instrumented(instrument):
    device = popart.DeviceManager().acquireAvailableDevice(1)
    try:
        opts = {"debug.instrument": "true"} if instrument else None
        session, run = _session(device=device, engine_options=opts)
        run()
        report = json.loads(session.getExecutionReport(resetProfile=False))
        summary = session.getSummaryReport()
    finally:
        device.detach()
    if instrument:
        assert report["profilerMode"] != "NONE" and report["runs"]
        assert NOT_ENABLED not in summary and "Execution:" in summary
    else:
        assert report == {"profilerMode": "NONE"}
        assert NOT_ENABLED in summary


def test_cycle_count_is_read_from_the_last_trace_without_making_the_profile(monkeypatch):
    """``getCycleCount`` reads the last run's trace: the execution profile (a record of
    every step of every run) is not made for it, and the count is the profile's span of
    that run."""
    session, run = _session()
    run()
    run()
    spans = [r["cyclesTo"] - r["cyclesFrom"] for r in session.engine.getExecutionProfile()["runs"]]
    assert len(spans) == 2

    def no_profile():
        raise AssertionError("getCycleCount made the execution profile")

    monkeypatch.setattr(session.engine, "getExecutionProfile", no_profile)
    assert session.getCycleCount() == spans[-1]
