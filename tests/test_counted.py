"""Counted execution: exact operation counts of a kernel, their cycles, and vertices whose
cycles follow their data on hardware devices (docs/counted_cycles.md)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from ipusim.config import config_hash, load_config
from ipusim.dataplane import ScriptedDataPlane
from ipusim.errors import ConfigError
from ipusim.machine import Machine
from ipusim.tile.counted import (
    OP_CLASSES,
    CountedCompute,
    CountedPart,
    block_cycles,
    class_costs,
    multi_vertex_cycles,
    worker_vertex_cycles,
)
from poplar_api import UNSIGNED_INT, DeviceManager, Engine, Graph, IPUModel, TargetType
from poplar_api import program as prog
from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, Vertex
from poplar_api.counted import counting_kernel, operationCounts, vertexCycles
from poplar_api.errors import CodeletError, GraphValidationError
from poplar_api.types import FLOAT


def dot(a, b, out):
    total = np.float32(0.0)
    for i in range(a.shape[0]):
        total += a[i] * b[i]
    out[0] = total
    return True


def clip_exp(n, x):
    k = 0
    while k < n[0]:
        if x[k] > 0:
            x[k] = math.exp(x[k])
        k += 1


def _counts(func, *args) -> dict[str, int]:
    kernel = counting_kernel(func, None, False, None)
    runs = np.zeros(kernel.num_blocks, np.int64)
    kernel.dispatcher(*args, runs)
    totals = runs @ kernel.profile()
    return {OP_CLASSES[k]: int(v) for k, v in enumerate(totals) if v}


@pytest.mark.parametrize("n", [0, 1, 7, 40])
def test_a_dot_product_counts_two_loads_two_float_ops_and_one_loop_step_per_element(n):
    a = np.arange(n, dtype=np.float32)
    out = np.zeros(1, np.float32)
    got = _counts(dot, a, a, out)
    assert out[0] == np.float32(np.dot(a, a))
    want = {
        "load_32": 2 * n + 1,  # a[i], b[i]; a.shape once
        "float_arith": 2 * n,  # mul, add
        "loop_backedge": n + 1,  # one brnzdec per iteration, and the exit test
        "store_32": 1,
        "int_alu": 1,  # the loop's set-up
    }
    assert got == {k: v for k, v in want.items() if v}


def test_counts_follow_the_branches_the_data_takes():
    x = np.array([1.0, -1.0, 2.0, -3.0, 0.5, 0.0], np.float32)
    n = np.array([x.size], np.int32)
    positive = int((x > 0).sum())
    got = _counts(clip_exp, n, x.copy())
    tests = x.size + 1  # while tests, the last one fails
    assert got == {
        "load_32": tests + x.size + positive,  # n[0] per test, x[k] per test, x[k] for exp
        "int_compare": tests,
        "float_compare": x.size,
        "branch": tests + x.size,
        "math_call": positive,
        "store_32": positive,
        "int_alu": x.size,  # k += 1
    }


def test_block_cycles_price_each_class_and_bundle_the_shorter_pipeline():
    cfg = load_config("tiny", overrides={"counted.pairing": 0.5}).counted
    profile = np.zeros((2, len(OP_CLASSES)), np.int64)
    profile[0, OP_CLASSES.index("load_32")] = 3
    profile[0, OP_CLASSES.index("float_arith")] = 2
    profile[1, OP_CLASSES.index("int_div")] = 1
    main0 = 3 * cfg.load_32_cycles
    float0 = 2 * cfg.float_arith_cycles
    want0 = main0 + float0 - 0.5 * min(main0, float0)
    assert block_cycles(cfg, profile).tolist() == [want0, cfg.int_div_cycles]
    runs = np.array([[1, 0], [4, 2]])
    got = worker_vertex_cycles(cfg, profile, runs)
    assert got.tolist() == [
        math.ceil(want0 + cfg.worker_entry_cycles),
        math.ceil(4 * want0 + 2 * cfg.int_div_cycles + cfg.worker_entry_cycles),
    ]
    assert multi_vertex_cycles(cfg, np.array([[3, 9, 4]]), 6).tolist() == [
        9 * 6 + math.ceil(cfg.supervisor_cycles)
    ]
    assert class_costs(cfg).shape == (len(OP_CLASSES),)


def test_the_default_cost_table_leaves_a_config_hash_unchanged_and_an_override_changes_it():
    base = load_config("tiny")
    assert "counted" not in base.model_dump()
    changed = load_config("tiny", overrides={"counted.float_arith_cycles": 2})
    assert config_hash(changed) != config_hash(base)
    assert changed.model_dump()["counted"]["float_arith_cycles"] == 2
    with pytest.raises(ConfigError, match="pairing"):
        load_config("tiny", overrides={"counted.pairing": 1.5})


# ------------------------------------------------------------------ on a device
class Loops(Vertex):
    """Loops ``iterations`` times (one float add each), then counts one more."""

    iterations = InOut(UNSIGNED_INT)
    acc = Output(FLOAT)

    @staticmethod
    def compute(iterations, acc):
        total = np.float32(0.0)
        for _ in range(iterations[0] * 10):
            total += np.float32(1.0)
        acc[0] = total
        iterations[0] += 1
        return True


class Halves(MultiVertex):
    """Each worker sums its share of ``a``; worker 0 has the most elements."""

    a = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(worker_id, num_workers, a, out):
        total = np.float32(0.0)
        for i in range(worker_id, a.shape[0], num_workers):
            total += a[i]
        out[worker_id] = total
        return True


def _add_loops(graph, estimate: int | None = None):
    """One Loops vertex on tile 0 in a new compute set ``loops`` (its cycle estimate
    ``estimate`` when given); returns the compute set and the iteration count."""
    graph.addCodelets(Loops)
    it = graph.addVariable(UNSIGNED_INT, [], "iterations")
    acc = graph.addVariable(FLOAT, [1], "acc")
    graph.setTileMapping(it, 0)
    graph.setTileMapping(acc, 0)
    cs = graph.addComputeSet("loops")
    v = graph.addVertex(cs, "Loops", {"iterations": it, "acc": acc[0]})
    graph.setTileMapping(v, 0)
    if estimate is not None:
        graph.setPerfEstimate(v, estimate)
    return cs, it


def _loops_graph(device, estimate: int | None = None):
    """:func:`_add_loops` on a new graph, the iteration count 1 and read as ``iterations``."""
    graph = Graph(device.getTarget())
    cs, it = _add_loops(graph, estimate)
    graph.setInitialValue(it, 1)
    graph.createHostRead("iterations", it)
    return graph, cs


def _loops_engine(device, repeats: int, estimate: int | None = None, options=None):
    graph, cs = _loops_graph(device, estimate)
    engine = Engine(
        graph,
        prog.Repeat(repeats, prog.Execute(cs)),
        {"profiler.programs.filter": "loops", **(options or {})},
    )
    engine.load(device)
    return engine


def _hardware():
    device = DeviceManager("tiny", 1).getDevices(TargetType.IPU, 1)[0]
    assert device.attach()
    return device


def test_on_hardware_a_vertex_without_estimate_runs_and_its_cycles_grow_with_its_loop():
    with vertexCycles("auto"):
        engine = _loops_engine(_hardware(), repeats=4)
    engine.run()
    cycles = [b["cycles"] for b in engine.getBlockRecords(0)]
    assert len(cycles) == 4
    steps = np.diff(cycles)
    # ten more float adds and loop steps per execution, the same growth every time; the
    # add (loop body) and the loop step (loop header) are in different basic blocks, so
    # they do not pair
    assert (steps > 0).all() and len(set(steps.tolist())) == 1
    cfg = load_config("tiny").counted
    per_iteration = cfg.float_arith_cycles + cfg.loop_backedge_cycles
    assert steps[0] == 10 * per_iteration * load_config("tiny").tile.worker_contexts
    assert int(engine.readTensor("iterations")) == 5


def test_on_an_ipu_model_auto_keeps_the_estimate_and_needs_one():
    with vertexCycles("auto"):
        engine = _loops_engine(IPUModel("tiny").createDevice(), repeats=3, estimate=100)
        engine.run()
        cycles = [b["cycles"] for b in engine.getBlockRecords(0)]
        assert len(set(cycles)) == 1
        with pytest.raises(GraphValidationError, match="no cycle estimate"):
            _loops_engine(IPUModel("tiny").createDevice(), repeats=1)


def test_counted_mode_replaces_the_estimate_and_estimate_mode_ignores_the_kernel():
    with vertexCycles("counted"):
        counted = _loops_engine(IPUModel("tiny").createDevice(), repeats=2, estimate=5)
    counted.run()
    growing = [b["cycles"] for b in counted.getBlockRecords(0)]
    with vertexCycles("estimate"):
        fixed = _loops_engine(_hardware(), repeats=2, estimate=5)
    fixed.run()
    same = [b["cycles"] for b in fixed.getBlockRecords(0)]
    assert growing[1] > growing[0] and same[0] == same[1]


def test_the_engine_option_chooses_the_mode_and_overrides_the_enclosing_block():
    counted = _loops_engine(
        IPUModel("tiny").createDevice(), 2, 5, {"debug.vertexCycles": "counted"}
    )
    counted.run()
    growing = [b["cycles"] for b in counted.getBlockRecords(0)]
    with vertexCycles("counted"):
        fixed = _loops_engine(_hardware(), 2, 5, {"debug.vertexCycles": "estimate"})
    fixed.run()
    same = [b["cycles"] for b in fixed.getBlockRecords(0)]
    assert growing[1] > growing[0] and same[0] == same[1]


def test_a_compiled_executable_keeps_its_mode_and_refuses_another():
    from poplar_api import compileGraph
    from poplar_api.errors import EngineError

    graph, cs = _loops_graph(IPUModel("tiny").createDevice(), estimate=5)
    exe = compileGraph(graph, prog.Execute(cs), {"debug.vertexCycles": "counted"})
    with pytest.raises(EngineError, match=r"debug\.vertexCycles"):
        Engine(exe, {"debug.vertexCycles": "estimate"})


def test_a_multi_vertex_takes_its_slowest_worker_on_every_context_plus_the_supervisor():
    cfg = load_config("tiny")
    contexts = cfg.tile.worker_contexts
    n = 3 * contexts + 2  # workers 0 and 1 get one element more
    with vertexCycles("counted"):
        graph = Graph(IPUModel("tiny").createDevice().getTarget())
        graph.addCodelets(Halves)
        a = graph.addConstant(FLOAT, [n], np.arange(n, dtype=np.float32), "a")
        out = graph.addVariable(FLOAT, [contexts], "out")
        for t in (a, out):
            graph.setTileMapping(t, 0)
        graph.createHostRead("out", out)
        cs = graph.addComputeSet("halves")
        v = graph.addVertex(cs, "Halves", {"a": a, "out": out})
        graph.setTileMapping(v, 0)
        engine = Engine(graph, prog.Execute(cs))
        engine.load(IPUModel("tiny").createDevice())
    engine.run()
    want_out = [np.arange(n, dtype=np.float32)[w::contexts].sum() for w in range(contexts)]
    assert np.allclose(engine.readTensor("out"), want_out)
    c = cfg.counted
    iterations = n // contexts + 1  # worker 0
    # per worker: a.shape and the loop set-up; per element a load and an add (one basic
    # block: the add pairs with the load by the fraction `pairing`) and a loop step (the
    # loop header), one more for the exit test; the store of its total
    body = c.load_32_cycles + c.float_arith_cycles
    body -= c.pairing * min(c.load_32_cycles, c.float_arith_cycles)
    thread = (
        c.load_32_cycles
        + c.int_alu_cycles
        + body * iterations
        + c.loop_backedge_cycles * (iterations + 1)
        + c.store_32_cycles
        + c.worker_entry_cycles
    )
    rec = next(r for r in engine.getTraces()[-1].records if r.kind == "compute")
    assert (
        int(rec.tile_cycles[0])
        == math.ceil(thread) * contexts
        + math.ceil(c.supervisor_cycles)
        + cfg.tile.multi_vertex_launch_cycles
    )


def test_a_kernel_without_source_cannot_be_counted_and_says_why():
    namespace: dict = {}
    exec("def k(a):\n    a[0] = 1\n", namespace)
    with pytest.raises(CodeletError, match="source"):
        counting_kernel(namespace["k"], None, False, None)


def test_an_unknown_mode_is_refused():
    with pytest.raises(CodeletError, match="estimate, auto, counted"), vertexCycles("fast"):
        pass


def test_a_counted_run_re_times_on_another_cost_table_from_what_it_counted():
    with vertexCycles("counted"):
        engine = _loops_engine(IPUModel("tiny").createDevice(), repeats=3)
    engine.run()
    trace = engine.getTraces()[-1]
    base = load_config("tiny")
    same = Machine(base).run(engine.ir_program, ScriptedDataPlane.from_trace(trace), entry=0)
    assert same.fingerprint() == trace.fingerprint()
    dearer = load_config("tiny", overrides={"counted.float_arith_cycles": 3})
    again = Machine(dearer).run(engine.ir_program, ScriptedDataPlane.from_trace(trace), entry=0)
    before = [int(r.tile_cycles[0]) for r in trace.records if r.kind == "compute"]
    after = [int(r.tile_cycles[0]) for r in again.records if r.kind == "compute"]
    contexts = base.tile.worker_contexts
    # execution k ran 10 * (k + 1) float adds, each 2 thread cycles dearer (its loop
    # step, on the other pipeline, is paired as before: it is the shorter one)
    assert [a - b for a, b in zip(after, before, strict=True)] == [
        10 * (k + 1) * 2 * contexts for k in range(3)
    ]


def test_the_ported_example_2_grows_as_the_tutorial_measured_on_hardware(capsys):
    """examples/poplar/lightweight_profiling_counted.py: five block figures, the README's
    hardware ones (``operation: 3905 ... 18505``) within 5 %, with no estimate set."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "examples/poplar/lightweight_profiling_counted.py"
    spec = importlib.util.spec_from_file_location("lightweight_profiling_counted", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([]) == 0
    lines = capsys.readouterr().out.split()
    got = [int(x) for x in lines if x.isdigit()]
    readme = [3905, 7555, 11203, 14857, 18505]
    assert len(got) == 5 and all(b > a for a, b in itertools.pairwise(got))
    assert all(abs(g - m) / m < 0.05 for g, m in zip(got, readme, strict=True))


def test_the_execution_profile_names_where_each_vertex_types_cycles_came_from():
    device = _hardware()
    with vertexCycles("auto"):
        engine = _loops_engine(device, repeats=2)
    engine.run()
    profile = engine.getExecutionProfile()
    assert profile["simulation"]["vertexCycleSources"] == {"Loops": "counted"}
    computes = [r for r in engine.getTraces()[-1].records if r.kind == "compute"]
    assert profile["simulation"]["cyclesByVertexType"] == {
        "Loops": sum(int(r.active_cycles.sum()) for r in computes)  # one vertex: its cycles
    }
    assert computes[1].active_cycles[0] > computes[0].active_cycles[0]
    estimated = _loops_engine(device, repeats=1, estimate=7)  # default: estimate
    estimated.run()
    assert "vertexCycleSources" not in estimated.getExecutionProfile()["simulation"]


def _library_add(mode: str):
    """``f + g`` by popops on a hardware device, with the mode given; the engine and
    its compute step's (cycles, whether it is counted)."""
    from poplar_api import popops

    device = _hardware()
    graph = Graph(device.getTarget())
    f = graph.addVariable(FLOAT, [64], "f")
    g = graph.addVariable(FLOAT, [64], "g")
    for t in (f, g):
        graph.setTileMapping(t, 0)
    seq = prog.Sequence()
    out = popops.add(graph, f, g, seq)
    graph.createHostRead("out", out)
    with vertexCycles(mode):
        engine = Engine(graph, seq)
    engine.load(device)
    engine.run()
    trace = engine.getTraces()[-1]
    rec = next(r for r in trace.records if r.kind == "compute")
    device.detach()
    return rec


def test_library_vertices_keep_their_poplibs_estimators():
    """popops' elementwise vertex runs as a vectorised ``computeBatch`` (no compiled
    kernel to count): every mode keeps its Poplibs estimate on a hardware device."""
    recs = {mode: _library_add(mode) for mode in ("estimate", "auto", "counted")}
    assert not any(isinstance(r.step, CountedCompute) for r in recs.values())
    cycles = {mode: r.tile_cycles.tolist() for mode, r in recs.items()}
    assert cycles["auto"] == cycles["estimate"] == cycles["counted"]
    assert max(cycles["auto"]) > 0


def test_auto_counts_codelets_on_hardware_only_and_never_library_vertices():
    from poplar_api.codelet import vertex_type
    from poplar_api.lowering.execute import counts_vertex_type

    user = vertex_type(Loops)

    class LibraryLoops(Loops):
        pass

    LibraryLoops.__module__ = "poplar_api.popops.vertices"
    library = vertex_type(LibraryLoops)
    table = {
        (mode, hardware): (counts_vertex_type(user, mode, hardware),
                           counts_vertex_type(library, mode, hardware))
        for mode in ("estimate", "auto", "counted")
        for hardware in (False, True)
    }  # fmt: skip
    assert table == {
        ("estimate", False): (False, False),
        ("estimate", True): (False, False),
        ("auto", False): (False, False),
        ("auto", True): (True, False),
        ("counted", False): (True, True),
        ("counted", True): (True, True),
    }


def test_operation_counts_of_a_run_are_the_kernels_operations_summed_over_executions():
    with vertexCycles("counted"):
        engine = _loops_engine(IPUModel("tiny").createDevice(), repeats=3)
    engine.run()
    adds = 10 * (1 + 2 + 3)  # iterations 1, 2, 3 in the three executions
    runs = 3
    # per execution: iterations[0] read twice, `* 10`, the loop's set-up and `+ 1`,
    # acc[0] and iterations[0] written; per loop iteration an add and a loop step, and
    # one more loop step (the exit test)
    assert operationCounts(engine.getTraces()[-1]) == {
        "Loops": {
            "load_32": 2 * runs,
            "store_32": 2 * runs,
            "int_alu": 2 * runs,
            "int_mul": runs,
            "float_arith": adds,
            "loop_backedge": adds + runs,
        }
    }


def test_replicas_with_different_work_take_the_slower_replicas_counted_time():
    """Two replicas, each its own ``iterations`` (1 and 3): every replica's step lasts
    as long as the one that loops most (replica 0's tiles are costed for all)."""
    device = DeviceManager("tiny", 2).getDevices(TargetType.IPU, 2)[0]
    assert device.attach()
    tiles = device.getTarget().getTilesPerIPU()

    def run(replicas: int, first: list[int]) -> list[int]:
        graph = Graph(device.getTarget(), replication_factor=replicas)
        cs, it = _add_loops(graph)
        graph.createHostWrite("it", it)
        with vertexCycles("counted"):
            engine = Engine(graph, prog.Execute(cs))
        engine.load(device)
        engine.writeTensor("it", np.array(first, np.uint32))
        engine.run()
        rec = next(r for r in engine.getTraces()[-1].records if r.kind == "compute")
        return (
            [int(rec.tile_cycles[0]), int(rec.tile_cycles[tiles])]
            if replicas > 1
            else [int(rec.tile_cycles[0])]
        )

    both = run(2, [1, 3])
    alone = run(1, [3])
    device.detach()
    assert both == [alone[0], alone[0]]


def test_a_part_keeps_its_distinct_block_runs_and_gives_back_every_executions():
    cfg = load_config("tiny").counted
    rng = np.random.default_rng(3)
    profile = rng.integers(0, 4, (3, len(OP_CLASSES)))
    distinct = rng.integers(0, 50, (4, 3))
    runs = distinct[rng.integers(0, 4, 40)]
    part = CountedPart.of(np.arange(40), "worker", 1, profile, runs)
    assert part.rows.shape[0] <= 4 and part.runs.tolist() == runs.tolist()
    assert part.thread_cycles(cfg).tolist() == worker_vertex_cycles(cfg, profile, runs).tolist()
    assert part.operations().tolist() == (runs @ profile).tolist()
    same = CountedPart.of(np.arange(5), "multi", 2, profile, np.ones((10, 3), np.int64))
    assert same.which is None and same.rows.shape == (1, 3)
    assert same.operations().tolist() == [(2 * profile.sum(axis=0)).tolist()] * 5


def test_the_summary_gives_a_counted_types_counted_cycles():
    import io
    import re

    engine = _loops_engine(IPUModel("tiny").createDevice(), 3, 5, {"debug.vertexCycles": "counted"})
    engine.run()
    out = io.StringIO()
    engine.printProfileSummary(out)
    shown = int(
        re.search(r"Loops +\(1 instances\): ([\d,]+)", out.getvalue()).group(1).replace(",", "")
    )
    sim = engine.getExecutionProfile()["simulation"]
    assert sim["vertexCycleSources"]["Loops"] == "counted"
    assert shown == sim["cyclesByVertexType"]["Loops"]
    assert shown != 3 * 5  # not the three executions' estimates
