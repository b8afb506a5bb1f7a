"""The compile pipeline's steps, each checked on its own typed result.

validate -> emit IR -> liveness -> place memory (``poplar_api.lowering.pipeline``);
``Engine`` and ``compileGraph`` both run it. Expected values come from formulas in
the tests (live ranges from the touched points and loops, vertex state from the
config's ``code`` sizes, exchange code from the message counts), not from the code
under test.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from codelets_common import tiny_graph, variables

from ipusim import ir
from ipusim.timing import TimingModel
from poplar_api import FLOAT, Engine, Graph, IPUModel, compileGraph, lowering
from poplar_api import engine as engine_module
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, VectorList, Vertex
from poplar_api.errors import EngineError, GraphValidationError
from poplar_api.lowering.context import Lowered, Storage
from poplar_api.lowering.emission import HostIO
from poplar_api.lowering.liveness import liveness
from poplar_api.lowering.memory import place_memory
from poplar_api.lowering.pipeline import Compiled, emit, validate_graph


class SumRows(Vertex):
    """``out[0] = sum of every row``; its estimate grows with the rows' lengths."""

    rows = Input(VectorList(FLOAT))
    scale = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        pass

    @classmethod
    def getCycleEstimate(cls, sizes, target):
        return 7 + 3 * sum(sizes["rows"]) + len(sizes["rows"]) + sizes["scale"]


class Twice(Vertex):
    """``out = 2 * x``."""

    x = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        batches["out"].data[:] = 2 * batches["x"].data

    @classmethod
    def getCycleEstimate(cls, sizes, target):
        return 5 + sizes["x"]


@pytest.fixture
def graph() -> Graph:
    return tiny_graph()


def _emitted(g: Graph, programs: list):
    state = g._state
    lowered = Lowered(Storage(state))
    return emit(state, programs, lowered, HostIO())


# ------------------------------------------------------------------ validate
def test_validate_names_every_unmapped_variable(graph):
    graph.addVariable(FLOAT, [3], "loose")
    variables(graph, "m")
    graph.addVariable(FLOAT, [2], "adrift")
    result = validate_graph(graph._state)
    assert len(result.problems) == 2
    assert "'loose'" in result.problems[0] and "'adrift'" in result.problems[1]
    assert all("setTileMapping" in p for p in result.problems)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.problems = ()  # type: ignore[misc]


@pytest.mark.parametrize("mapped", ["none", "half"])
def test_a_copy_from_unmapped_elements_is_a_validation_error(graph, mapped):
    x = graph.addVariable(FLOAT, [4], "x")
    if mapped == "half":
        graph.setTileMapping(x[:2], 0)
    (y,) = variables(graph, "y", tile=1)
    with pytest.raises(GraphValidationError) as err:
        Engine(graph, prog.Sequence(prog.Copy(x, y)))
    first = 0 if mapped == "none" else 2
    assert f"variable 'x' (shape [4]): {4 - first} of 4 element(s) are not mapped" in str(err.value)
    assert f"(first: element {first})" in str(err.value)


# ---------------------------------------------------------------------- emit
def test_emit_records_vertex_state_and_estimates(graph):
    code = graph.getTarget().config.code
    x = graph.addVariable(FLOAT, [12], "x")
    graph.setTileMapping(x, 1)
    out = graph.addVariable(FLOAT, [3], "out")
    graph.setTileMapping(out, 1)
    cs = graph.addComputeSet("sum")
    # vertex k sums k + 1 rows of 2 elements each, on tile 1 (k = 0) or 2 (k > 0)
    for k in range(3):
        v = graph.addVertex(cs, SumRows)
        graph.connect(v["rows"], [x[2 * j : 2 * j + 2] for j in range(k + 1)])
        graph.connect(v["scale"], x[: k + 1])
        graph.connect(v["out"], out[k : k + 1])
        graph.setTileMapping(v, 1 if k == 0 else 2)
    emitted = _emitted(graph, [prog.Execute(cs)])
    assert emitted.problems == ()
    (record,) = emitted.compute_sets
    assert record.name == "sum"
    # header, three field pointers, size words of two vectors and a vector list, and
    # a descriptor per row of the vector list
    fixed = code.vertex_header_bytes + 3 * code.field_pointer_bytes + 3 * code.vector_size_bytes
    per_vertex = [fixed + code.vectorlist_descriptor_bytes * (k + 1) for k in range(3)]
    want = np.zeros(graph.getTarget().getNumTiles(), np.int64)
    want[1] = per_vertex[0]
    want[2] = per_vertex[1] + per_vertex[2]
    assert record.state_per_tile.tolist() == want.tolist()
    assert record.state_by_type == (("SumRows", sum(per_vertex)),)
    (compute,) = [s for s in ir.iter_steps(emitted.program) if isinstance(s, ir.Compute)]
    # 7 + 3 * (elements in rows) + rows + scale elements
    assert compute.vertex_cycles.tolist() == [
        7 + 3 * 2 * (k + 1) + (k + 1) + (k + 1) for k in range(3)
    ]
    assert id(record.node) in emitted.accesses.executes


def test_emit_collects_problems_without_raising(graph):
    (a,) = variables(graph, "a")
    cs = graph.addComputeSet("bad")
    v = graph.addVertex(cs, Twice)
    graph.connect(v["x"], a)  # "out" left unconnected
    graph.setTileMapping(v, 0)
    emitted = _emitted(graph, [prog.Execute(cs)])
    assert len(emitted.problems) == 1 and "'out'" in emitted.problems[0]
    assert emitted.compute_sets == ()


# ------------------------------------------------------------------ liveness
def _expected_ranges(touches: dict[str, list[int]], loops: list[tuple[int, int]]):
    """First and last live point: the touched points, widened to every loop touched."""
    out = {}
    for name, points in touches.items():
        lo, hi = min(points), max(points)
        for _ in range(2):
            for a, b in loops:
                if lo <= b and hi >= a:
                    lo, hi = min(lo, a), max(hi, b)
        out[name] = (lo, hi)
    return out


def test_liveness_ranges_follow_touches_and_loops(graph):
    a, b, c, d, e = variables(graph, "abcde")  # one tile: every copy is one step
    program = prog.Sequence(
        [
            prog.Copy(a, b),  # point 0
            prog.Repeat(3, prog.Sequence([prog.Copy(b, c), prog.Copy(c, d)])),  # 1, 2
            prog.Copy(d, e),  # point 3
        ]
    )
    emitted = _emitted(graph, [program])
    live = liveness(graph._state, emitted.program, emitted.accesses)
    # point 4: the sync that ends the run
    assert len(live.points.steps) == 5 and live.points.loops == ((1, 2),)
    want = _expected_ranges({"a": [0], "b": [0, 1], "c": [1, 2], "d": [2, 3], "e": [3]}, [(1, 2)])
    by_name = {v.name: v.id for v in graph._state.variables}
    for name, rng in want.items():
        assert live.ranges_of(by_name[name]) == [rng], name
    assert not live.always.any()


def test_liveness_always_live_constants_initial_values_and_handles(graph):
    a, b, _ = variables(graph, "abu")
    k = graph.addConstant(FLOAT, [4], np.arange(4, dtype=np.float32), "k")
    graph.setTileMapping(k, 0)
    graph.setInitialValue(b, np.ones(4, np.float32))
    graph.createHostRead("read_a", a)
    emitted = _emitted(graph, [prog.Copy(k, b)])
    live = liveness(graph._state, emitted.program, emitted.accesses)
    by_name = {v.name: v.id for v in graph._state.variables}
    assert live.always[[by_name["a"], by_name["b"], by_name["k"]]].all()
    assert live.ranges_of(by_name["u"]) == [(0, -1)]  # touched by no program


# ------------------------------------------------------------ place memory
class ThriceMessagesSent(TimingModel):
    """A timing model whose internal exchanges send three times the messages."""

    def cost(self, step):
        cost = super().cost(step)
        if isinstance(step, ir.Exchange) and not step.host:
            return dataclasses.replace(cost, messages_sent=3 * cost.messages_sent)
        return cost


def _exchanging_graph(g: Graph):
    x = g.addVariable(FLOAT, [8], "x")
    g.setTileMapping(x[:4], 0)
    g.setTileMapping(x[4:], 3)
    y = g.addVariable(FLOAT, [8], "y")
    g.setTileMapping(y, 5)
    cs = g.addComputeSet("twice")
    for part in range(2):
        v = g.addVertex(cs, Twice)
        g.connect(v["x"], x[4 * part : 4 * part + 4])
        g.connect(v["out"], y[4 * part : 4 * part + 4])
        g.setTileMapping(v, 5)
    return [prog.Execute(cs)]


def test_custom_timing_model_shapes_exchange_code(graph):
    programs = _exchanging_graph(graph)
    state = graph._state
    emitted = _emitted(graph, programs)
    live = liveness(state, emitted.program, emitted.accesses)
    cfg = graph.getTarget().config
    plain = place_memory(state, live, emitted.compute_sets, TimingModel(cfg))
    custom = place_memory(state, live, emitted.compute_sets, ThriceMessagesSent(cfg))
    # every internal exchange's code grows by two more messages sent per message sent
    extra = np.zeros(cfg.num_tiles, np.int64)
    for step in ir.iter_steps(emitted.program):
        if isinstance(step, ir.Exchange) and not step.host:
            extra += 2 * TimingModel(cfg).cost(step).messages_sent
    assert extra.any()
    per_message = cfg.code.exchange_code_bytes_per_message
    got = custom.by_category["internalExchangeCode"] - plain.by_category["internalExchangeCode"]
    assert got.tolist() == (per_message * extra).tolist()


def test_engine_honours_a_timing_model_class(graph):
    programs = _exchanging_graph(graph)
    plain = Engine(graph, programs)
    custom = Engine(graph, programs, timing=ThriceMessagesSent)
    code = "internalExchangeCode"
    assert (custom.memory.by_category[code] > plain.memory.by_category[code]).any()
    device = IPUModel("tiny").createDevice()
    custom.load(device)
    assert isinstance(custom.timing, ThriceMessagesSent)
    with pytest.raises(EngineError, match="TimingModel"):
        Engine(graph, programs, timing=lambda cfg: 42)


# ----------------------------------------------------------------- compile
def test_compile_graph_makes_no_engine(graph, monkeypatch):
    programs = _exchanging_graph(graph)

    def refuse(self, *args, **kwargs):
        raise AssertionError("compileGraph constructed an Engine")

    original = engine_module.Engine.__init__
    monkeypatch.setattr(engine_module.Engine, "__init__", refuse)
    exe = compileGraph(graph, programs)
    monkeypatch.setattr(engine_module.Engine, "__init__", original)
    from_exe = Engine(exe)
    direct = Engine(graph, programs)
    for category, per_tile in direct.memory.by_category.items():
        assert from_exe.memory.by_category[category].tolist() == per_tile.tolist(), category
    traces = []
    for engine in (from_exe, direct):
        engine.load(IPUModel("tiny").createDevice())
        engine.run(0)
        traces.append(engine.getTrace().fingerprint())
    assert traces[0] == traces[1]


def test_lowering_compile_is_the_pipeline(graph):
    programs = _exchanging_graph(graph)
    compiled = lowering.compile(graph._state, programs, HostIO())
    assert isinstance(compiled, Compiled)
    assert len(compiled.program.entries) == 1
    assert compiled.memory.num_tiles == graph.getTarget().getNumTiles()
    bad = Graph(graph.getTarget())
    bad.addVariable(FLOAT, [2], "nowhere")
    with pytest.raises(GraphValidationError, match="nowhere"):
        lowering.compile(bad._state, [prog.Sequence()], HostIO())


def test_compile_graph_keeps_its_timing_model(graph):
    programs = _exchanging_graph(graph)
    exe = compileGraph(graph, programs, timing=ThriceMessagesSent)
    direct = Engine(graph, programs, timing=ThriceMessagesSent)
    from_exe = Engine(exe)
    code = "internalExchangeCode"
    assert from_exe.memory.by_category[code].tolist() == direct.memory.by_category[code].tolist()
    from_exe.load(IPUModel("tiny").createDevice())
    assert isinstance(from_exe.timing, ThriceMessagesSent)
    again = compileGraph(graph, programs, timing=ThriceMessagesSent)
    with pytest.raises(EngineError, match="compileGraph"):
        Engine(again, timing=TimingModel)


def test_deserialize_names_a_vertex_class_stored_by_value_that_is_lost():
    import io
    import pickle
    import sys
    import types

    from poplar_api.executable import ExecutableError, _Unpickler

    module = types.ModuleType("lost_codelets_for_test")
    sys.modules[module.__name__] = module
    try:
        lost = type("Lost", (), {"__module__": module.__name__})
        module.Lost = lost
        stored = pickle.dumps(lost)  # by reference to a name the module will not have
        del module.Lost
        reader = _Unpickler(io.BytesIO(b""), "saved.exe")
        with pytest.raises(ExecutableError, match=r"'Lost'.*stored by value.*cannot be loaded"):
            reader.persistent_load(("vertex", "Lost", ("value", stored)))
    finally:
        del sys.modules[module.__name__]


@pytest.mark.parametrize("width", [1, 2, 3, 5])
def test_unique_rows_equals_numpy_unique(width):
    """The packed-key row unique gives what ``np.unique(axis=0)`` gives, in its order."""
    from poplar_api.lowering.computeset import _unique_rows

    rng = np.random.default_rng(width)
    for _ in range(20):
        rows = rng.integers(-3, int(rng.integers(1, 50)), (int(rng.integers(1, 200)), width))
        want = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        got = _unique_rows(rows)
        assert np.array_equal(got[0], want[0])
        assert np.array_equal(got[1], want[1])
        assert np.array_equal(got[2], want[2].reshape(-1))
    for n in (1, 2, 150):  # one row repeated (every vertex of one shape)
        rows = np.repeat(rng.integers(-3, 50, (1, width)), n, axis=0)
        want = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        got = _unique_rows(rows)
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w.reshape(g.shape)) and g.dtype == w.dtype
    wide = np.array([[2**40, 0], [0, 2**40], [2**40, 0]])  # too wide to pack: numpy's own
    assert _unique_rows(wide)[2].tolist() == [1, 0, 1]


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_unique_rows_dense_and_sorted_paths_equal_numpy_unique(dtype):
    """Rows of few distinct sizes (keys marked over their span, no sort) and rows of
    many (keys sorted) both give ``np.unique(axis=0)``'s rows, first indices and
    inverse, for the int32 and int64 matrices the lowering passes."""
    from poplar_api.lowering.computeset import DENSE_KEYS_PER_ROW, _unique_rows

    rng = np.random.default_rng(7)
    n = 3000
    few = rng.choice(np.array([[4, 8, 1], [16, 8, 1], [4, 9, 2], [-5, 0, 7]]), n).astype(dtype)
    many = rng.integers(-(10**6), 10**6, (n, 3)).astype(dtype)  # span far above 4 per row
    spans = [int(np.prod(r.max(axis=0).astype(float) - r.min(axis=0) + 1)) for r in (few, many)]
    assert spans[0] <= DENSE_KEYS_PER_ROW * n < spans[1]  # one of each path
    for rows in (few, many):
        want = np.unique(rows, axis=0, return_index=True, return_inverse=True)
        got = _unique_rows(rows)
        assert np.array_equal(got[0], want[0]) and got[0].dtype == rows.dtype
        assert np.array_equal(got[1], want[1])
        assert np.array_equal(got[2], want[2].reshape(-1))


def test_unique_rows_keys_exact_when_spans_pass_float_precision():
    """Rows whose columns' spans multiply past 2**53 (below 2**62, so still packed)
    keep distinct keys: ``[1, 0, 0]`` and ``[0, 2**27, 2**27]`` collide when a key's
    weights are rounded floats (``(2**27 + 1)**2`` is not a float); and columns whose
    span passes int64 go to numpy's unique, not a wrapped span."""
    from poplar_api.lowering.computeset import _unique_rows

    big = 2**27
    rows = np.array([[0, 0, 0], [1, 0, 0], [0, big, big], [2, 0, 0]], np.int64)
    extreme = np.array([[np.iinfo(np.int64).min, 0], [np.iinfo(np.int64).max, 1], [0, 0]])
    for r in (rows, np.tile(rows, (3, 1)), extreme):
        want = np.unique(r, axis=0, return_index=True, return_inverse=True)
        got = _unique_rows(r)
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == want[1].tolist()
        assert got[2].tolist() == want[2].reshape(-1).tolist()
