"""Graph and execution profiles, engine options and autoReport.

Expected values are recomputed here from the traces, the IR and the graph (or by hand
for the synthetic trace), never read back from the profile code.
"""

from __future__ import annotations

import itertools
import json
from types import ModuleType

import cbor2
import numpy as np
import pytest
from examples_common import load_example

from ipusim import ir
from ipusim.profile.execution import execution_profile, program_table
from ipusim.trace import StepRecord, Trace
from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import EngineError, PoplarError
from poplar_api.profiling import ENGINE_OPTIONS


def tutorial(name: str) -> ModuleType:
    """Import ``examples/tutorials/<name>.py`` as a module (once per session)."""
    return load_example(f"tutorials/{name}.py")


def tiny_device():
    return IPUModel("tiny").createDevice()


@pytest.fixture(scope="module")
def tut7_engine():
    t7 = tutorial("tut7")
    return t7.run(tiny_device(), 24, 40, profile=False).engine


# ------------------------------------------------------------ synthetic trace
def _record(i, kind, first, last, tile_cycles, active=None, step=None):
    return StepRecord(
        index=i,
        kind=kind,
        phase={"compute": "compute", "sync": "sync", "exchange": "internal_exchange"}[kind],
        name=f"s{i}",
        program_id=i,
        first_cycle=first,
        last_cycle=last,
        tile_cycles=np.asarray(tile_cycles, np.int64),
        active_cycles=None if active is None else np.asarray(active, np.int64),
        step=step,
    )


def _trace(records, end):
    return Trace(
        config_name="t",
        config_hash="h",
        clock_hz=1e9,
        num_tiles=4,
        tiles_per_ipu=4,
        records=records,
        tile_end_cycles=np.asarray(end, np.int64),
    )


def test_steps_are_laid_end_to_end_with_overlap_by_hand():
    # spans [0,100), [80,150), [90,120): the second overlaps the first by 20 cycles, the
    # third lies inside the second (30 cycles before the cursor at 150) and adds nothing.
    recs = [
        _record(0, "compute", 0, 100, [10, 0, 30, 20], active=[5, 0, 15, 10]),
        _record(1, "sync", 80, 150, [70, 70, 70, 70]),
        _record(2, "compute", 90, 120, [0, 0, 0, 0], active=[0, 0, 0, 0]),
    ]
    ep = execution_profile([_trace(recs, [150, 150, 140, 120])])
    steps = ep["simulation"]["steps"]
    assert [(s["cyclesFrom"], s["cyclesTo"], s["cycles"]) for s in steps] == [
        (0, 100, 100),
        (100, 150, 50),
        (150, 150, 0),
    ]
    assert [s["cyclesOverlapped"] for s in steps] == [0, 100 - 80, 120 - 90]
    assert ep["simulation"]["cycles"] == 150
    first = steps[0]
    assert first["type"] == "OnTileExecute" and steps[1]["type"] == "Sync"
    assert first["activeTiles"] == 3
    assert first["tileBalance"] == pytest.approx(60 / (4 * 30))  # Σ=60, 4 tiles, max 30
    assert first["activeTileBalance"] == pytest.approx(60 / (3 * 30))
    assert first["threadBalance"] == pytest.approx(30 / 60)  # Σ active 30 of Σ tile 60
    assert steps[2]["tileBalance"] == 0.0 and steps[2]["threadBalance"] == 0.0
    assert "threadBalance" not in steps[1]
    # without a program table the IR program ids are the program numbers
    assert ep["programTrace"] == [0, 1, 2]


def test_runs_are_concatenated_with_an_offset():
    a = _trace([_record(0, "compute", 0, 40, [40, 0, 0, 0], active=[40, 0, 0, 0])], [40, 0, 0, 0])
    b = _trace([_record(0, "sync", 0, 25, [25] * 4)], [25] * 4)
    ep = execution_profile([a, b])
    steps = ep["simulation"]["steps"]
    assert [(s["cyclesFrom"], s["cyclesTo"]) for s in steps] == [(0, 40), (40, 65)]
    assert ep["runs"] == [
        {"cyclesFrom": 0, "cyclesTo": 40, "steps": 1, "complete": True},
        {"cyclesFrom": 40, "cyclesTo": 65, "steps": 1, "complete": True},
    ]
    assert ep["simulation"]["tileCycles"]["compute"] == 40
    assert ep["simulation"]["tileCycles"]["sync"] == 100  # 4 tiles x 25


def test_idle_tail_stretches_the_last_step():
    # every tile ends at 90 but the only record's span ends at 60 (tiles moved on
    # without a record): the last step absorbs the tail so Σ cycles == run cycles
    t = _trace([_record(0, "sync", 0, 60, [60] * 4)], [90] * 4)
    steps = execution_profile([t])["simulation"]["steps"]
    assert (steps[0]["cyclesFrom"], steps[0]["cyclesTo"], steps[0]["cycles"]) == (0, 90, 90)


# ---------------------------------------------------------- real runs (tiny)
def test_execution_profile_of_tut7_tiles_the_run(tut7_engine):
    traces = tut7_engine.getTraces()
    ep = tut7_engine.getExecutionProfile()
    steps = ep["simulation"]["steps"]
    trace = traces[0]
    assert len(steps) == len(trace.records)
    assert steps[0]["cyclesFrom"] == 0
    for prev, step in itertools.pairwise(steps):
        assert step["cyclesFrom"] == prev["cyclesTo"]
    assert sum(s["cycles"] for s in steps) == ep["simulation"]["cycles"] == trace.total_cycles
    cursor = 0
    for rec, step in zip(trace.records, steps, strict=True):
        assert step["name"] == rec.name
        want = max(0, min(cursor, rec.last_cycle) - rec.first_cycle)
        assert step["cyclesOverlapped"] == want
        assert step["cyclesAllTiles"] == int(rec.tile_cycles.sum())
        cursor = max(cursor, rec.last_cycle)
    tc = ep["simulation"]["tileCycles"]
    phases = {
        "compute": "compute",
        "doExchange": "internal_exchange",
        "globalExchange": "global_exchange",
        "streamCopy": "host_exchange",
        "sync": "sync",
    }
    for key, phase in phases.items():
        assert tc[key] == int(trace.phase_tile_cycles(phase).sum()), key
    active = sum(int(r.active_cycles.sum()) for r in trace.records if r.active_cycles is not None)
    assert tc["activeCompute"] == active
    assert tc["copySharedStructure"] == 0


def test_two_runs_then_reset(tut7_engine):
    t7 = tutorial("tut7")
    engine = t7.run(tiny_device(), 8, 16, profile=False).engine
    engine.run(0)
    first, second = engine.getTraces()
    ep = engine.getExecutionProfile()
    n1 = len(first.records)
    assert ep["simulation"]["cycles"] == first.total_cycles + second.total_cycles
    assert ep["simulation"]["steps"][n1]["cyclesFrom"] == first.total_cycles
    assert len(ep["programTrace"]) == n1 + len(second.records)
    engine.resetExecutionProfile()
    empty = engine.getExecutionProfile()
    assert empty["simulation"]["steps"] == [] and empty["simulation"]["cycles"] == 0


def test_program_ids_agree_between_profiles(tut7_engine):
    gp = tut7_engine.getGraphProfile()
    ep = tut7_engine.getExecutionProfile()
    progs = gp["programs"]
    for step, rec in zip(ep["simulation"]["steps"], tut7_engine.getTrace().records, strict=True):
        node = progs[step["program"]]
        assert node["type"] == step["type"]
        assert node["name"] == rec.name
        if node["type"] == "OnTileExecute":
            assert gp["computeSets"]["names"][node["computeSet"]] == rec.name
    entry = progs[gp["controlPrograms"][0]]
    assert entry["type"] == "Sequence"
    # every program is reachable from the entry: the tree covers the table
    seen, stack = set(), list(gp["controlPrograms"])
    while stack:
        i = stack.pop()
        if i not in seen:
            seen.add(i)
            stack.extend(progs[i]["children"])
    assert seen == set(range(len(progs)))


def test_graph_profile_estimates_of_tut7(tut7_engine):
    gp = tut7_engine.getGraphProfile()
    state = tut7_engine._state
    cfg = IPUModel("tiny").config
    assert gp["target"]["numTiles"] == 8 == len(gp["target"]["relativeSyncDelayByTile"])
    assert gp["target"]["bytesPerTile"] == 64 * 1024
    assert gp["target"]["totalMemory"] == 8 * 64 * 1024
    assert gp["graph"]["numVertices"] == len(state.vertices)
    assert gp["graph"]["numComputeSets"] == 2
    cs = gp["computeSets"]
    w = cfg.tile.worker_contexts
    for name in ("mulCS", "reduceCS"):
        k = cs["names"].index(name)
        cs_id = next(c.id for c in state.compute_sets if c.name == name)
        verts = [v for v in state.vertices if v.cs == cs_id]
        tiles = np.array([v.tile for v in verts])
        est = np.array([v.perf_estimate for v in verts])
        active = np.bincount(tiles, weights=est, minlength=8).astype(np.int64)
        assert cs["cycleEstimates"]["activeCyclesByTile"][k] == active.tolist()
        assert cs["vertexCounts"][k] == len(verts)
        # round-robin over w contexts in vertex order: brute force per tile
        expect = np.zeros(8, np.int64)
        for t in range(8):
            loads = [0] * w
            for c in est[tiles == t]:
                loads[loads.index(min(loads))] += int(c)
            expect[t] = w * max(loads)
        assert cs["cycleEstimates"]["cyclesByTile"][k] == expect.tolist()
        by_type = cs["cycleEstimates"]["activeCyclesByVertexType"][k]
        assert sum(by_type) == int(est.sum())
    # exchanges: the bytes received equal the IR's per-tile totals
    steps = [s for s in ir.iter_steps(tut7_engine.ir_program) if isinstance(s, ir.Exchange)]
    assert steps
    ex = gp["exchanges"]
    for step in steps:
        k = ex["names"].index(step.name)
        want = np.zeros(8, np.int64)
        want[step.tile] = step.bytes_received
        assert ex["bytesReceivedByTile"][k] == want.tolist()
    host = gp["hostExchanges"]
    k = host["names"].index("inputMatrix")
    assert sum(host["bytesByTile"][k]) == 24 * 40 * 4  # rows * cols * float bytes
    assert host["directions"][k] == "host_to_device"
    assert gp["memory"] is None or isinstance(gp["memory"], dict)


def test_graph_profile_tables_hold_every_step_of_their_phase(tut7_engine):
    # Poplar's graph profile: one table per phase of steps; a sync is only a program
    tables = {
        "compute": "computeSets",
        "internal_exchange": "exchanges",
        "global_exchange": "externalExchanges",
        "host_exchange": "hostExchanges",
    }
    assert set(tables) == set(ir.PHASES) - {"sync"}
    gp = tut7_engine.getGraphProfile()
    steps = ir.iter_steps(tut7_engine.ir_program)
    for phase, key in tables.items():
        want = sorted(s.name for s in steps if ir.STEP_KINDS[s.kind].phase == phase)
        assert sorted(gp[key]["names"]) == want, key
    assert gp["computeSets"]["names"] and gp["exchanges"]["names"]
    assert gp["hostExchanges"]["names"]


def test_profiles_are_plain_json(tut7_engine):
    for profile in (tut7_engine.getGraphProfile(), tut7_engine.getExecutionProfile()):
        assert json.loads(json.dumps(profile)) == profile


def test_program_table_shares_a_reused_node():
    step = ir.Sync(name="s")
    seq = ir.Sequence([step, ir.Repeat(3, step)])
    table = program_table(ir.Program(entries=(seq,), functions=(ir.Sequence([step]),)))
    # seq, step, repeat, function: the shared step is numbered once
    assert len(table.nodes) == 4
    assert table.entries == (0,) and table.functions == (3,)
    assert table.index[id(step)] == 1


# ------------------------------------------------------------------ options
def small_graph():
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    v = graph.addVariable(FLOAT, [4], "v")
    graph.setTileMapping(v, 0)
    return graph, prog.Sequence([prog.Copy(v, v)])


def test_unknown_engine_option_lists_the_known_ones():
    graph, seq = small_graph()
    with pytest.raises(EngineError) as info:
        Engine(graph, seq, {"autoReport.al": "true"})
    msg = str(info.value)
    assert "autoReport.al" in msg
    for name in ENGINE_OPTIONS:
        assert name in msg
    assert isinstance(info.value, PoplarError)


def test_unknown_option_from_the_environment(monkeypatch):
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"bogus.option": "1"}')
    graph, seq = small_graph()
    with pytest.raises(EngineError, match=r"bogus\.option"):
        Engine(graph, seq)


def test_bad_option_value():
    graph, seq = small_graph()
    with pytest.raises(EngineError, match=r"profiler.format.*'xml'.*json, cbor"):
        Engine(graph, seq, {"profiler.format": "xml"})


def test_debug_instrument_is_recorded():
    graph, seq = small_graph()
    engine = Engine(graph, seq, {"debug.instrument": "true"})
    gp = engine.getGraphProfile()
    assert gp["debug"]["instrument"] is True
    assert gp["engineOptions"] == {"debug.instrument": "true"}
    assert Engine(graph, seq).getGraphProfile()["debug"]["instrument"] is False


def test_auto_report_writes_the_files(tmp_path):
    t1 = tutorial("tut1")
    graph = Graph(tiny_device().getTarget())
    seq = t1.build(graph)
    out = tmp_path / "reports"
    engine = Engine(graph, seq, {"autoReport.all": "true", "autoReport.directory": str(out)})
    engine.load(tiny_device())
    engine.writeTensor("v3-write", np.zeros(16, np.float32))
    engine.connectStream("v4-input-stream", np.arange(30, dtype=np.int32))
    engine.run(0)
    assert json.loads((out / "profile.json").read_text()) == engine.getGraphProfile()
    ep = json.loads((out / "execution.json").read_text())
    assert ep["simulation"]["cycles"] == engine.getTrace().total_cycles
    summary = (out / "summary.txt").read_text()
    assert "Total cycles" in summary and "Steps:" in summary


def test_auto_report_cbor_and_single_profile(tmp_path):
    graph, seq = small_graph()
    opts = {
        "autoReport.outputExecutionProfile": "true",
        "autoReport.directory": str(tmp_path),
        "profiler.format": "cbor",
    }
    engine = Engine(graph, seq, opts)
    engine.load(tiny_device())
    engine.run(0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["execution.cbor"]
    with open(tmp_path / "execution.cbor", "rb") as f:
        assert cbor2.load(f) == engine.getExecutionProfile()


def test_no_auto_report_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    graph, seq = small_graph()
    engine = Engine(graph, seq)
    engine.load(tiny_device())
    engine.run(0)
    assert list(tmp_path.iterdir()) == []


def test_profiles_render_in_notebooks(tut7_engine):
    gp, ep = tut7_engine.getGraphProfile(), tut7_engine.getExecutionProfile()
    assert isinstance(gp, dict) and isinstance(ep, dict)
    page = gp._repr_html_()
    assert "<table" in page and "mulCS" in page and "reduceCS" in page
    page = ep._repr_html_()
    assert f"{ep['simulation']['cycles']:,}" in page and "OnTileExecute" in page
    # still plain JSON underneath
    assert json.loads(json.dumps(ep)) == ep
