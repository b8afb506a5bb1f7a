"""Graphs that span several IPUs: lowering of inter-IPU data, control flow, profiles.

Expected transfers are counted here from the tile mappings, independently of the
exchange planner; expected cycles are the formula of docs/machine.md ("Cost of a
global exchange") written out with the config's numbers.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from types import ModuleType

import numpy as np
import pytest
from codelets_common import mapped, vertex_on
from examples_common import load_example

from ipusim import ir
from ipusim.profile.frames import ipus_frame
from ipusim.profile.timeline import steps_timeline, trace_events
from poplar_api import FLOAT, INT, Engine, Graph, IPUModel, SyncDelayType, concat
from poplar_api import program as prog
from poplar_api.codelet import InOut, Input, Output, Vector, Vertex

TPI = 8  # tiles per IPU of the tiny preset


def example(name: str) -> ModuleType:
    """``examples/multi_ipu/<name>.py`` as a module."""
    return load_example(f"multi_ipu/{name}.py")


def tiny_device(num_ipus: int = 2, aligned: bool = False):
    """The tiny preset with ``num_ipus`` IPUs; ``aligned``: no sync delays, so a sync
    releases every tile at once."""
    model = IPUModel("tiny")
    model.numIPUs = num_ipus
    if aligned:
        model.minIPUSyncDelay = 0
        model.relativeSyncDelay = SyncDelayType.NO_DELAY
    return model.createDevice()


def steps(engine: Engine) -> list[ir.Step]:
    return ir.iter_steps(engine.ir_program)


def run_copy(engine: Engine, src_values: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, np.float32)
    engine.connectStream("in", src_values)
    engine.connectStream("out", out)
    engine.run(0)
    return out


def copy_graph(src_tiles: np.ndarray, dst_tiles: np.ndarray, aligned: bool = False):
    """``Copy(in -> a)``, ``Copy(a -> b)``, ``Copy(b -> out)`` with the given mappings."""
    device = tiny_device(2, aligned)
    graph = Graph(device.getTarget())
    n = src_tiles.size
    a = graph.addVariable(FLOAT, [n], "a")
    b = graph.addVariable(FLOAT, [n], "b")
    for i in range(n):
        graph.setTileMapping(a[i], int(src_tiles[i]))
        graph.setTileMapping(b[i], int(dst_tiles[i]))
    h = graph.addHostToDeviceFIFO("in", FLOAT, n)
    o = graph.addDeviceToHostFIFO("out", FLOAT, n)
    copy = prog.Copy(a, b, "a->b")
    engine = Engine(graph, prog.Sequence([prog.Copy(h, a), copy, prog.Copy(b, o)]))
    engine.load(device)
    return engine


# ------------------------------------------------------------------- (a) Copy IR
def test_copy_between_ipus_is_one_global_exchange_per_tile_pair():
    rng = np.random.default_rng(3)
    n = 200
    src = rng.integers(0, TPI, n)  # IPU 0
    dst = rng.integers(TPI, 2 * TPI, n)  # IPU 1
    engine = copy_graph(src, dst)
    got = [s for s in steps(engine) if s.name.startswith("a->b")]
    assert [(s.kind, s.name) for s in got] == [
        ("sync", "a->b/ExternalSync"),
        ("global_exchange", "a->b/GlobalExchange"),
    ]
    sync, glob = got
    assert sync.sync_kind is ir.SyncKind.EXTERNAL and sync.ipus == (0, 1)
    expected = Counter()
    for s, d in zip(src.tolist(), dst.tolist(), strict=True):
        expected[(s, d)] += 4  # one FLOAT
    pairs = zip(
        glob.src_tile.tolist(), glob.dst_tile.tolist(), glob.num_bytes.tolist(), strict=True
    )
    assert {(s, d): b for s, d, b in pairs} == dict(expected)
    assert len(glob.src_tile) == len(expected)  # one transfer per pair
    values = rng.standard_normal(n).astype(np.float32)
    np.testing.assert_array_equal(run_copy(engine, values, n), values)


def test_copy_mixing_local_ipu_and_remote_elements():
    # elements 0..3 stay on IPU 0 (one on its own tile), 4..7 go to IPU 1
    src = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    dst = np.array([0, 5, 6, 7, 8, 8, 15, 15])
    engine = copy_graph(src, dst)
    got = [(s.kind, s.name) for s in steps(engine) if s.name.startswith("a->b")]
    assert got == [
        ("compute", "a->b/OnTileCopy"),
        ("sync", "a->b/ExternalSync"),
        ("global_exchange", "a->b/GlobalExchange"),
        ("sync", "a->b/Sync"),
        ("exchange", "a->b/Exchange"),
    ]
    by_name = {s.name: s for s in steps(engine)}
    glob = by_name["a->b/GlobalExchange"]
    transfers = zip(glob.src_tile, glob.dst_tile, glob.num_bytes, strict=True)
    assert sorted((int(s), int(d), int(b)) for s, d, b in transfers) == [
        (0, 8, 4), (1, 8, 4), (2, 15, 4), (3, 15, 4),
    ]  # fmt: skip
    internal = by_name["a->b/Sync"]
    assert internal.sync_kind is ir.SyncKind.INTERNAL and internal.ipus == (0,)
    values = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(run_copy(engine, values, 8), values)


class Sum(Vertex):
    a = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(a, out):
        out[0] = a.sum()
        return True


# -------------------------------------------------------- (b) Execute, remote in
def test_execute_reads_a_vector_on_another_ipu_landed_once_then_fanned_out():
    device = tiny_device()
    graph = Graph(device.getTarget())
    graph.addCodelets([Sum])
    x = graph.addVariable(FLOAT, [6], "x")
    y = graph.addVariable(FLOAT, [3], "y")
    graph.setTileMapping(x.slice(0, 3), 0)  # IPU 0
    graph.setTileMapping(x.slice(3, 6), 9)  # IPU 1
    cs = graph.addComputeSet("cs")
    for k, tile in enumerate((8, 10, 12)):  # three readers on IPU 1
        graph.setTileMapping(y[k], tile if k else 1)  # y[0] lives on IPU 0: remote output
        vertex_on(graph, cs, "Sum", {"a": x, "out": y[k]}, tile=tile, cycles=10)
    h = graph.addHostToDeviceFIFO("in", FLOAT, 6)
    o = graph.addDeviceToHostFIFO("out", FLOAT, 3)
    engine = Engine(graph, prog.Sequence([prog.Copy(h, x), prog.Execute(cs), prog.Copy(y, o)]))
    got = [s for s in steps(engine) if s.name.startswith("cs")]
    assert [s.name for s in got] == [
        "cs/ExternalSyncIn", "cs/GlobalExchangeIn", "cs/Sync", "cs/ExchangeIn", "cs",
        "cs/ExternalSyncOut", "cs/GlobalExchangeOut",
    ]  # fmt: skip
    by_name = {s.name: s for s in got}
    # x[0..2] (12 bytes on tile 0) cross the links once, to tile 8, the first reader
    g_in = by_name["cs/GlobalExchangeIn"]
    assert (g_in.src_tile.tolist(), g_in.dst_tile.tolist(), g_in.num_bytes.tolist()) == (
        [0], [8], [12],
    )  # fmt: skip
    assert by_name["cs/ExternalSyncIn"].ipus == (0, 1)
    # on chip: tile 8 forwards them to 10 and 12 (a broadcast: sent once), tile 9
    # sends x[3..5] to 8, 10 and 12
    ex = by_name["cs/ExchangeIn"]
    rows = zip(ex.tile.tolist(), ex.bytes_sent.tolist(), ex.bytes_received.tolist(), strict=True)
    assert {t: (s, r) for t, s, r in rows} == {8: (12, 12), 9: (12, 0), 10: (0, 24), 12: (0, 24)}
    assert by_name["cs/Sync"].ipus == (1,)  # IPU 0 takes no part in the on-chip exchange
    g_out = by_name["cs/GlobalExchangeOut"]
    assert (g_out.src_tile.tolist(), g_out.dst_tile.tolist(), g_out.num_bytes.tolist()) == (
        [8], [1], [4],
    )  # fmt: skip
    engine.load(device)
    out = np.zeros(3, np.float32)
    engine.connectStream("in", np.arange(6, dtype=np.float32))
    engine.connectStream("out", out)
    engine.run(0)
    np.testing.assert_array_equal(out, [15.0, 15.0, 15.0])
    # memory: the global exchange has its own code category
    assert engine.memory.by_category["globalExchangeCode"][[0, 1, 8]].min() > 0


def test_random_reads_over_three_ipus_cross_each_link_once_per_destination_ipu():
    rng = np.random.default_rng(11)
    device = tiny_device(3)
    graph = Graph(device.getTarget())
    graph.addCodelets([Sum])
    n, readers = 40, 12
    x = graph.addVariable(FLOAT, [n], "x")
    owner = rng.integers(0, 3 * TPI, n)
    for i in range(n):
        graph.setTileMapping(x[i], int(owner[i]))
    y = graph.addVariable(FLOAT, [readers], "y")
    cs = graph.addComputeSet("cs")
    reads: dict[int, set[int]] = {}
    for k in range(readers):
        tile = int(rng.integers(0, 3 * TPI))
        picked = np.sort(rng.choice(n, size=int(rng.integers(1, 8)), replace=False))
        reads.setdefault(tile, set()).update(picked.tolist())
        graph.setTileMapping(y[k], tile)
        a = concat([x[int(e) : int(e) + 1] for e in picked])
        vertex_on(graph, cs, "Sum", {"a": a, "out": y[k]}, tile=tile, cycles=3)
    engine = Engine(graph, prog.Execute(cs))
    # brute force: element e lands on the lowest reading tile of each other IPU
    landing: dict[tuple[int, int], int] = {}
    for tile in sorted(reads):
        for e in reads[tile]:
            if int(owner[e]) // TPI != tile // TPI:
                landing.setdefault((e, tile // TPI), tile)
    expected = Counter()
    for (e, _ipu), tile in landing.items():
        expected[(int(owner[e]), tile)] += 4
    by_name = {s.name: s for s in steps(engine)}
    glob = by_name.get("cs/GlobalExchangeIn")
    got = {}
    if glob is not None:
        pairs = zip(glob.src_tile, glob.dst_tile, glob.num_bytes, strict=True)
        got = {(int(s), int(d)): int(b) for s, d, b in pairs}
    assert got == dict(expected)
    # on chip, each tile receives every remote element it reads that did not land on it
    ex = by_name["cs/ExchangeIn"]
    received = dict(zip(ex.tile.tolist(), ex.bytes_received.tolist(), strict=True))
    for tile, elems in reads.items():
        remote = {e for e in elems if int(owner[e]) != tile}
        landed = {e for e in remote if landing.get((e, tile // TPI)) == tile}
        assert received.get(tile, 0) == 4 * len(remote - landed)


# ----------------------------------------------------- (c) one IPU: as before
def test_single_ipu_lowering_is_unchanged():
    device = tiny_device(1)
    graph = Graph(device.getTarget())
    graph.addCodelets([Sum])
    x = graph.addVariable(FLOAT, [4], "x")
    y = graph.addVariable(FLOAT, [2], "y")
    z = graph.addVariable(FLOAT, [4], "z")
    graph.setTileMapping(x, 0)
    graph.setTileMapping(y[0], 1)
    graph.setTileMapping(y[1], 2)
    graph.setTileMapping(z, 3)
    cs = graph.addComputeSet("cs")
    for k in range(2):
        v = graph.addVertex(cs, "Sum", {"a": x, "out": y[k]})
        graph.setTileMapping(v, 1 + 2 * k)  # y[1] on tile 2 is written from tile 3
        graph.setPerfEstimate(v, 5)
    flag = mapped(graph, INT, [], "flag", tile=5)
    program = prog.Sequence(
        [prog.Execute(cs), prog.Copy(x, z), prog.If(flag, prog.Copy(z, x), prog.Sequence())]
    )
    engine = Engine(graph, program)
    got = [(s.kind, s.name) for s in steps(engine)]
    assert got == [
        ("sync", "cs/Sync"),
        ("exchange", "cs/ExchangeIn"),
        ("compute", "cs"),
        ("sync", "cs/SyncOut"),
        ("exchange", "cs/ExchangeOut"),
        ("sync", "Copy x -> z/Sync"),
        ("exchange", "Copy x -> z/Exchange"),
        ("sync", "Sync"),
        ("sync", "Copy z -> x/Sync"),
        ("exchange", "Copy z -> x/Exchange"),
        ("sync", "EndOfRun/Sync"),
    ]
    syncs = [s for s in steps(engine) if isinstance(s, ir.Sync)]
    assert all(s.ipus is None and s.sync_kind is ir.SyncKind.INTERNAL for s in syncs)


# -------------------------------------------------------------- (d) tut7
def test_tut7_on_two_ipus_matches_numpy_and_has_one_track_per_ipu(capsys):
    tut = example("tut7_two_ipus")
    outcome = tut.run(tut.create_device(IPUModel("tiny")), 40, 12)
    assert outcome.ok
    np.testing.assert_allclose(outcome.result, outcome.expected, rtol=1e-5)
    text = capsys.readouterr().out
    assert "Multiplication result OK" in text
    assert "Tile average cycles by IPU (over the IPU's tiles):" in text  # ipu2 (SDK 2 layout)
    kinds = [s.kind for s in steps(outcome.engine)]
    assert "global_exchange" in kinds  # x crossed to IPU 1
    trace = outcome.engine.getTraces()[-1]
    data = trace_events(trace)
    names = {
        e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"
    }
    assert names == {0: "IPU 0", 1: "IPU 1"}
    for pid in (0, 1):  # both IPUs compute, each on its own track
        track = {e["name"] for e in data["traceEvents"] if e["ph"] == "X" and e["pid"] == pid}
        assert {"mulCS", "reduceCS", "x to IPU 1/GlobalExchange"} <= track
    # the profile splits the cycles per IPU, adding up to the totals
    profile = outcome.engine.getExecutionProfile()
    by_ipu = profile["simulation"]["tileCyclesByIPU"]
    assert len(by_ipu) == 2
    for key, total in profile["simulation"]["tileCycles"].items():
        assert by_ipu[0][key] + by_ipu[1][key] == total
    assert by_ipu[0]["globalExchange"] > 0 and by_ipu[1]["globalExchange"] > 0
    glob = [s for s in profile["simulation"]["steps"] if s["type"] == "GlobalExchange"]
    assert glob and glob[0]["ipus"] == [0, 1] and len(glob[0]["maxTileCyclesByIPU"]) == 2
    frame = ipus_frame(trace)
    assert frame["global_exchange"].sum() == trace.totals["global_exchange"]
    assert "IPU 1:" in trace.summary()


def test_execution_profile_of_two_ipus_is_valid_against_its_schema():
    jsonschema = pytest.importorskip("jsonschema")
    from ipusim.profile.execution import schema

    engine = copy_graph(np.array([0, 1]), np.array([8, 9]))
    run_copy(engine, np.ones(2, np.float32), 2)
    jsonschema.validate(engine.getExecutionProfile(), schema("execution_profile"))
    jsonschema.validate(engine.getGraphProfile(), schema("graph_profile"))
    progs = engine.getGraphProfile()["programs"]
    assert [p["ipus"] for p in progs if p["type"] == "GlobalExchange"] == [[0, 1]]
    # a profile directory's timeline (no trace): one track per IPU as well
    steps_ = engine.getExecutionProfile()["simulation"]["steps"]
    data = steps_timeline(steps_, 1e9)
    tracks = {e["pid"] for e in data["traceEvents"] if e["ph"] == "X"}
    assert tracks == {0, 1}
    glob = [e for e in data["traceEvents"] if e["ph"] == "X" and e["cat"] == "GlobalExchange"]
    assert sorted(e["pid"] for e in glob) == [0, 1]


# ---------------------------------------------------------- (e) pipeline
def test_pipeline_stages_overlap_and_values_match_numpy(capsys):
    pipe = example("pipeline")
    shape = pipe.Shape(micro_batches=4, batch=8, features=128, io_features=16, layers=2)
    outcome = pipe.run(pipe.create_device(), shape)
    assert outcome.ok
    np.testing.assert_allclose(outcome.result, outcome.expected, rtol=1e-4, atol=1e-4)
    stage1, stage2 = outcome.stage_cycles
    assert stage1 > 0 and stage2 > 0
    assert outcome.total_cycles < stage1 + stage2  # the stages ran at the same time
    trace = outcome.engine.getTraces()[-1]
    data = trace_events(trace)
    on = {
        pid: {e["name"].split("/")[0] for e in data["traceEvents"] if e["ph"] == "X"
              and e["pid"] == pid and e["tid"] == 0}
        for pid in (0, 1)
    }  # fmt: skip
    assert "stage1" in on[0] and "stage2" not in on[0]
    assert "stage2" in on[1] and "stage1" not in on[1]
    assert "Overlap:" in capsys.readouterr().out


# ------------------------------------------------------ (f) control flow
class Step(Vertex):
    """Count down ``c`` and raise ``done`` when it reaches 0."""

    c = InOut(INT)
    done = Output(INT)

    @staticmethod
    def compute(c, done):
        c[0] -= 1
        done[0] = 1 if c[0] != 0 else 0
        return True


class Add(Vertex):
    acc = InOut(FLOAT)
    x = Input(FLOAT)

    @staticmethod
    def compute(acc, x):
        acc[0] += x[0]
        return True


def test_repeat_while_true_with_a_predicate_on_ipu_1():
    device = tiny_device()
    graph = Graph(device.getTarget())
    graph.addCodelets([Step, Add])
    c = graph.addVariable(INT, [1], "c")
    pred = graph.addVariable(INT, [], "pred")
    acc = graph.addVariable(FLOAT, [1], "acc")
    x1 = graph.addVariable(FLOAT, [1], "x1")  # on IPU 1, added on IPU 0 each iteration
    graph.setTileMapping(c, 9)
    graph.setTileMapping(pred, 10)
    graph.setTileMapping(acc, 2)
    graph.setTileMapping(x1, 12)
    cond = graph.addComputeSet("cond")
    vertex_on(graph, cond, "Step", {"c": c, "done": pred.reshape([1])}, tile=9, cycles=10)
    body = graph.addComputeSet("body")
    vertex_on(graph, body, "Add", {"acc": acc, "x": x1}, tile=2, cycles=10)
    for t, name in ((c, "c"), (acc, "acc"), (x1, "x1")):
        graph.createHostWrite(name, t)
        graph.createHostRead(name, t)
    loop = prog.RepeatWhileTrue(prog.Execute(cond), pred, prog.Execute(body))
    engine = Engine(graph, loop)
    syncs = [s for s in steps(engine) if isinstance(s, ir.Sync) and s.name == "Sync"]
    assert len(syncs) == 1 and syncs[0].sync_kind is ir.SyncKind.EXTERNAL
    assert syncs[0].ipus is None  # every IPU follows the loop
    engine.load(device)
    engine.writeTensor("c", np.array([5], np.int32))
    engine.writeTensor("acc", np.array([0.5], np.float32))
    engine.writeTensor("x1", np.array([2.0], np.float32))
    engine.run(0)
    got_c, got_acc = np.zeros(1, np.int32), np.zeros(1, np.float32)
    engine.readTensor("c", got_c)
    engine.readTensor("acc", got_acc)
    assert got_c.tolist() == [0]
    assert got_acc.tolist() == [0.5 + 4 * 2.0]  # the body ran while c was 4, 3, 2, 1
    trace = engine.getTraces()[-1]
    assert [d[1] for d in trace.decisions] == [1, 1, 1, 1, 0]


# ------------------------------------------------------------ (g) cycles
def global_exchange_formula(cfg, sent: int, received: int, link_bytes: int, hops: int) -> int:
    """docs/machine.md, "Cost of a global exchange", with IPU-Links only: the busiest
    hop at link_bytes_per_cycle or the busiest tile at exchange.bytes_per_cycle, plus
    links.hop_latency_cycles per hop of the longest route."""
    link = math.ceil(link_bytes / cfg.link_bytes_per_cycle)
    tile = math.ceil(max(sent, received) / cfg.exchange.bytes_per_cycle)
    return max(link, tile) + cfg.links.hop_latency_cycles * hops


@pytest.mark.parametrize(
    ("senders", "elements"),
    [(1, 1000), (8, 1000)],  # one tile pair (tile-bound); 8 pairs (link-bound)
)
def test_global_exchange_cycles_follow_the_documented_formula(senders, elements):
    n = senders * elements
    src = np.repeat(np.arange(senders), elements)  # IPU 0
    dst = src + TPI  # IPU 1, one tile per sender
    engine = copy_graph(src, dst, aligned=True)
    values = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(run_copy(engine, values, n), values)
    cfg = tiny_device(aligned=True).getTarget().config
    trace = engine.getTraces()[-1]
    (rec,) = [r for r in trace.records if r.kind == "global_exchange"]
    per_tile = elements * 4
    expected = global_exchange_formula(cfg, per_tile, per_tile, n * 4, hops=1)
    assert rec.cycles == expected
    # every tile of both IPUs waits for it (both take part)
    assert (rec.tile_cycles == expected).all()


def test_example_command_lines(tmp_path, capsys):
    assert example("tut7_two_ipus").main(["--device", "model-ipu1", "30", "10"]) == 0
    assert "Multiplication result OK" in capsys.readouterr().out
    path = tmp_path / "pipeline.json"
    args = ["--micro-batches", "2", "--batch", "4", "--features", "32", "--io-features", "8"]
    assert example("pipeline").main([*args, "--layers", "1", "--timeline", str(path)]) == 0
    events = json.loads(path.read_text())["traceEvents"]
    assert {e["args"]["name"] for e in events if e["name"] == "process_name"} == {"IPU 0", "IPU 1"}
