"""Engine options: every documented name is accepted, values are validated, a
misspelling names the closest option, and the instrumentation options change the
execution profile as docs/poplar_api.md ("Engine options") says.
"""

from __future__ import annotations

import json

import jsonschema
import numpy as np
import pytest
from codelets_common import Scale, vertex_on

from ipusim.profile.execution import schema
from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import EngineError
from poplar_api.profiling import ENGINE_OPTIONS

#: The option names Poplar programs pass, with a valid value each (written out here,
#: independently of ENGINE_OPTIONS).
VALID = {
    "autoReport.all": "false",
    "autoReport.directory": "./profiles",
    "autoReport.outputGraphProfile": "false",
    "autoReport.outputExecutionProfile": "false",
    "autoReport.outputLoweredVars": "true",
    "autoReport.outputArchive": "false",
    "autoReport.outputSerializedGraph": "true",
    "autoReport.outputDebugInfo": "true",
    "autoReport.executionProfileProgramRunCount": "2",
    "autoReport.streamAtEachRun": "false",
    "debug.allowOutOfMemory": "true",
    "debug.instrument": "true",
    "debug.instrumentCompute": "true",
    "debug.instrumentControlFlow": "true",
    "debug.instrumentExternalExchange": "true",
    "debug.computeInstrumentationLevel": "vertex",
    "debug.outputAllSymbols": "true",
    "debug.retainDebugInformation": "true",
    "debug.loweredVarDumpFile": "vars.capnp",
    "debug.verify": "false",
    "debug.checkVertexBounds": "true",
    "exchange.streamBufferOverlap": "hostRearrangeOnly",
    "exchange.enablePrefetch": "true",
    "exchange.multicastPolicy": "balanced",
    "opt.maxCopyMergeSize": "8388608",
    "opt.enableMultiAccessCopies": "false",
    "opt.useAutoloader": "true",
    "opt.internalExchangeOptimisationTarget": "memory",
    "opt.maxCompilationThreads": "40",
    "profiler.format": "v3",
    "profiler.programs.filter": "operation",
    "profiler.blocks.filter": "stage.|op2",
    "profiler.blocks.implicitFlush": "true",
    "profiler.includeFlopEstimates": "true",
    "profiler.includeCycleEstimates": "true",
    "profiler.perExecutionStreamCopyCycles": "false",
    "profiler.replicaToProfile": "0",
    "streamCallbacks.maxLookahead": "unlimited",
    "streamCallbacks.multiThreadMode": "collaborative",
    "streamCallbacks.numWorkerThreads": "auto",
    "streamCallbacks.numaAware": "true",
    "target.syncReplicasIndependently": "true",
    "target.hostSyncTimeout": "900",
    "target.saveArchive": "archive.a",
    "target.extendedMemory": "true",
    "target.deterministicWorkers": "true",
    "target.workerStackSizeInBytes": "4096",
    "target.firstRuntimeReplica": "0",
    "target.numberRuntimeReplica": "1",
}


ESTIMATES = {0: 12, 3: 30}  # tile -> estimate (thread cycles) of its one vertex


def graph_and_program():
    """A host-to-device copy, one compute set (a vertex on tiles 0 and 3), a copy back."""
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [8], "x")
    y = graph.addVariable(FLOAT, [8], "y")
    cs = graph.addComputeSet("twice")
    for k, (tile, est) in enumerate(ESTIMATES.items()):
        graph.setTileMapping(x.slice(4 * k, 4 * k + 4), tile)
        graph.setTileMapping(y.slice(4 * k, 4 * k + 4), tile)
        fields = {"in": x.slice(4 * k, 4 * k + 4), "out": y.slice(4 * k, 4 * k + 4)}
        vertex_on(graph, cs, Scale, fields, tile, est)
    inq = graph.addHostToDeviceFIFO("in", FLOAT, 8)
    outq = graph.addDeviceToHostFIFO("out", FLOAT, 8)
    program = prog.Sequence([prog.Copy(inq, x), prog.Execute(cs), prog.Copy(y, outq)])
    return device, graph, program


def run_with(options):
    device, graph, program = graph_and_program()
    engine = Engine(graph, program, options)
    engine.load(device)
    data = np.arange(8, dtype=np.float32)
    result = np.zeros(8, np.float32)
    engine.connectStream("in", data)
    engine.connectStream("out", result)
    engine.run(0)
    np.testing.assert_array_equal(result, 2 * data)
    profile = engine.getExecutionProfile()
    jsonschema.validate(json.loads(json.dumps(profile)), schema("execution_profile"))
    return device, profile


# ------------------------------------------------------------------ names and values
def test_every_listed_option_is_known_and_accepted(tmp_path):
    assert set(VALID) <= set(ENGINE_OPTIONS)
    options = dict(VALID, **{"autoReport.directory": str(tmp_path)})
    run_with(options)


@pytest.mark.parametrize(
    ("wrong", "right"),
    [
        ("debug.instrumentComptue", "debug.instrumentCompute"),
        ("autoReport.al", "autoReport.all"),
        ("autoreport.all", "autoReport.all"),
        ("target.hostSyncTimout", "target.hostSyncTimeout"),
        ("streamCallbacks.maxLookAhead", "streamCallbacks.maxLookahead"),
    ],
)
def test_misspelled_option_suggests_the_closest_name(wrong, right):
    _, graph, program = graph_and_program()
    with pytest.raises(EngineError) as info:
        Engine(graph, program, {wrong: "true"})
    msg = str(info.value)
    assert f"unknown engine option '{wrong}' (value 'true'); did you mean '{right}'?" in msg


@pytest.mark.parametrize(
    ("name", "value", "allowed"),
    [
        ("debug.instrument", "yes", "allowed: true, false"),
        ("debug.computeInstrumentationLevel", "thread", "allowed: vertex, tile, ipu, device"),
        ("exchange.streamBufferOverlap", "some", "allowed: none, hostRearrangeOnly, any"),
        ("opt.maxCopyMergeSize", "-3", "allowed: a non-negative integer"),
        ("target.hostSyncTimeout", "soon", "allowed: a non-negative decimal"),
        ("streamCallbacks.maxLookahead", "lots", "a non-negative integer or unlimited"),
        ("profiler.blocks.filter", "stage(", "not a regular expression"),
        ("opt.enableSwSyncs", "yes", "allowed: true, false"),
        ("debug.supervisorStackSizeInBytes", "-4", "non-negative integer"),
        ("target.syncMethod", "interrupt", "allowed: polling, hybrid, default"),
        ("target.hostSyncTimeout", "-1.5", "non-negative decimal"),
    ],
)
def test_invalid_value_names_option_value_and_allowed(name, value, allowed):
    _, graph, program = graph_and_program()
    with pytest.raises(EngineError) as info:
        Engine(graph, program, {name: value})
    msg = str(info.value)
    assert f"engine option {name!r} has value {value!r}" in msg
    assert allowed in msg


def test_options_from_the_environment_accept_json_types(monkeypatch, tmp_path):
    env = {
        "opt.maxCopyMergeSize": 8388608,
        "debug.allowOutOfMemory": True,
        "autoReport.outputArchive": False,
    }
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps(env))
    run_with({})
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", json.dumps({"debug.instrumentt": True}))
    _, graph, program = graph_and_program()
    with pytest.raises(EngineError, match=r"did you mean 'debug\.instrument'"):
        Engine(graph, program)


# ------------------------------------------------------------------ instrumentation
def compute_step(profile):
    (step,) = [s for s in profile["simulation"]["steps"] if s["type"] == "OnTileExecute"]
    return step


def test_no_instrumentation_adds_nothing():
    _, profile = run_with({})
    inst = profile["simulation"]["instrumentation"]
    assert inst == {
        "compute": False,
        "externalExchange": False,
        "controlFlow": False,
        "computeLevel": "tile",
    }
    assert all(
        "tileCycles" not in s and "vertexCycles" not in s for s in profile["simulation"]["steps"]
    )


def test_tile_level_records_cycles_of_every_tile():
    device, profile = run_with({"debug.instrumentCompute": "true"})
    cfg = device.getTarget().config
    expected = [0] * cfg.num_tiles
    for tile, est in ESTIMATES.items():
        expected[tile] = cfg.tile.worker_contexts * (est + cfg.tile.vertex_launch_cycles)
    step = compute_step(profile)
    assert step["tileCycles"] == expected
    assert "vertexCycles" not in step
    assert all(
        "tileCycles" not in s for s in profile["simulation"]["steps"] if s["type"] == "StreamCopy"
    )


def test_vertex_level_records_every_vertex():
    _, profile = run_with(
        {"debug.instrumentCompute": "true", "debug.computeInstrumentationLevel": "vertex"}
    )
    step = compute_step(profile)
    assert step["vertexCycles"] == {
        "tiles": list(ESTIMATES),
        "types": ["Scale", "Scale"],
        "cycles": list(ESTIMATES.values()),
    }
    assert "tileCycles" not in step


@pytest.mark.parametrize("level", ["ipu", "device"])
def test_device_level_records_step_totals_only(level):
    _, profile = run_with({"debug.instrument": "true", "debug.computeInstrumentationLevel": level})
    assert profile["simulation"]["instrumentation"]["computeLevel"] == "ipu"
    step = compute_step(profile)
    assert "tileCycles" not in step and "vertexCycles" not in step


def test_external_exchange_records_stream_copy_cycles_per_tile():
    device, profile = run_with({"debug.instrumentExternalExchange": "true"})
    copies = [s for s in profile["simulation"]["steps"] if s["type"] == "StreamCopy"]
    assert len(copies) == 2
    num_tiles = device.getTarget().config.num_tiles
    for s in copies:
        cycles = s["tileCycles"]
        assert len(cycles) == num_tiles
        assert max(cycles) == s["maxTileCycles"] and sum(cycles) == s["cyclesAllTiles"]
        assert all(cycles[t] > 0 for t in ESTIMATES)  # the tiles holding x and y take part
    assert "tileCycles" not in compute_step(profile)
