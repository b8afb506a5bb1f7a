"""Engine behaviour: control flow, copies, streams, host access, codelets and traces.

Every expected value is computed here independently: with numpy, or by hand with the
arithmetic written in a comment. Graphs use the 8-tile ``tiny`` preset. Vertex
classes are defined once at module level because each costs a Numba compile.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import Bump, ListSums, Scale, mapped, vertex_on

from poplar_api import FLOAT, HALF, INT, Device, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, Vertex
from poplar_api.errors import EngineError, PoplarError

#: Worker contexts of the tiny preset (it extends mk2: 6 workers per tile).
WORKERS = 6

# ----------------------------------------------------------------- vertex classes


class CountTest(Vertex):
    """``count += 1``; ``flag`` = ``count < limit`` when ``less`` else ``count >= limit``."""

    count = InOut(INT)
    limit = Input(INT)
    less = Input(INT)
    flag = Output(INT)

    @staticmethod
    def compute(count, limit, less, flag):
        count[0] += 1
        below = count[0] < limit[0]
        if less[0] != 0:
            flag[0] = 1 if below else 0
        else:
            flag[0] = 0 if below else 1
        return True


class AddVec(Vertex):
    """``out = a + b`` (element-wise)."""

    a = Input(Vector(FLOAT))
    b = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(a, b, out):
        for i in range(a.shape[0]):
            out[i] = a[i] + b[i]
        return True


class AddHalf(AddVec):
    """``out = a + b`` on HALF data (AddVec's kernel; it sees float32)."""

    a = Input(Vector(HALF))
    b = Input(Vector(HALF))
    out = Output(Vector(HALF))


class Triple(MultiVertex):
    """Every worker triples the elements ``worker_id, worker_id + W, ...``."""

    data = InOut(Vector(FLOAT))

    @staticmethod
    def compute(worker_id, num_workers, data):
        for i in range(worker_id, data.shape[0], num_workers):
            data[i] = data[i] * 3.0
        return True


class Scaled(Scale):
    """``out = 2 * in``, with a cycle estimate of ``10 + 2 * len(in)`` thread cycles."""

    @classmethod
    def getCycleEstimate(cls, sizes, target):
        return 10 + 2 * sizes["in"]


# ------------------------------------------------------------------- helpers


def ipu() -> Device:
    return IPUModel("tiny").createDevice()


def new_graph() -> Graph:
    return Graph(ipu().getTarget())


def run_engine(graph: Graph, programs, device: Device | None = None, runs: int = 1) -> Engine:
    engine = Engine(graph, programs)
    engine.load(device or ipu())
    for _ in range(runs):
        engine.run(0)
    return engine


def int_var(graph: Graph, name: str, tile: int = 0, value: int = 0, size: int = 1):
    t = graph.addVariable(INT, [size] if size > 1 else [], name)
    graph.setTileMapping(t, tile)
    graph.setInitialValue(t, value)
    graph.createHostRead(name, t)
    graph.createHostWrite(name + "-w", t)
    return t


def incr_cs(graph: Graph, counter, tile: int = 0, name: str = "incr"):
    cs = graph.addComputeSet(name)
    vertex_on(graph, cs, Bump, {"c": counter}, tile, 5)
    return cs


def records(engine: Engine, kind: str):
    return [r for r in engine.getTrace().records if r.kind == kind]


# --------------------------------------------------------------- control flow


def test_repeat_increments_counter_n_times():
    g = new_graph()
    c = int_var(g, "c")
    n = 7
    e = run_engine(g, prog.Repeat(n, prog.Execute(incr_cs(g, c))))
    assert int(e.readTensor("c")) == n
    assert len(records(e, "compute")) == n


@pytest.mark.parametrize(("cls", "less"), [(prog.RepeatWhileTrue, 1), (prog.RepeatWhileFalse, 0)])
def test_repeat_while_counts_loops(cls, less):
    g = new_graph()
    count, body_count = int_var(g, "count"), int_var(g, "body")
    flag = int_var(g, "flag", value=-1)
    limit = g.addConstant(INT, [], 5, "limit")
    sense = g.addConstant(INT, [], less, "sense")
    g.setTileMapping(limit, 0)
    g.setTileMapping(sense, 0)
    cond_cs = g.addComputeSet("cond")
    v = g.addVertex(
        cond_cs, CountTest, {"count": count, "limit": limit, "less": sense, "flag": flag}
    )
    g.setTileMapping(v, 0)
    g.setPerfEstimate(v, 3)
    loop = cls(prog.Execute(cond_cs), flag, prog.Execute(incr_cs(g, body_count)))
    e = run_engine(g, loop)
    # cond runs with count 1..5; the flag says "go on" for counts 1..4 (count < 5),
    # so the body runs 4 times and the condition 5 times.
    assert int(e.readTensor("count")) == 5
    assert int(e.readTensor("body")) == 4
    assert int(e.readTensor("flag")) == (0 if less else 1)


def test_if_runs_each_branch():
    g = new_graph()
    pred = int_var(g, "pred")
    a, b = int_var(g, "a", tile=1), int_var(g, "b", tile=2)
    program = prog.If(
        pred, prog.Execute(incr_cs(g, a, 1, "A")), prog.Execute(incr_cs(g, b, 2, "B"))
    )
    e = Engine(g, program)
    e.load(ipu())
    for p in (1, 0, 0, 5):  # any non-zero value is true
        e.writeTensor("pred-w", np.array([p], np.int32))
        e.run(0)
    assert int(e.readTensor("a")) == 2  # runs with pred 1 and 5
    assert int(e.readTensor("b")) == 2  # runs with pred 0 twice


@pytest.mark.parametrize("device", ["ipu", "cpu"])
def test_switch_cases_and_default(device):
    g = new_graph()
    ctl = int_var(g, "ctl")
    a, b, d = int_var(g, "a"), int_var(g, "b"), int_var(g, "d")
    sw = prog.Switch(
        ctl,
        [(0, prog.Execute(incr_cs(g, a, 0, "A"))), (2, prog.Execute(incr_cs(g, b, 0, "B")))],
        prog.Execute(incr_cs(g, d, 0, "D")),
    )
    e = Engine(g, sw)
    e.load(ipu() if device == "ipu" else Device.createCPUDevice("tiny"))
    for value in (0, 2, 2, 7, 1, 2):
        e.writeTensor("ctl-w", np.array([value], np.int32))
        e.run(0)
    assert int(e.readTensor("a")) == 1  # value 0 once
    assert int(e.readTensor("b")) == 3  # value 2 three times
    assert int(e.readTensor("d")) == 2  # values 7 and 1 fall to the default


@pytest.mark.parametrize("device", ["ipu", "cpu"])
def test_if_float_predicate_is_true_when_non_zero(device):
    g = new_graph()
    p = g.addVariable(FLOAT, [], "p")
    g.setTileMapping(p, 0)
    g.createHostWrite("p", p)
    hits = int_var(g, "hits")
    e = Engine(g, prog.If(p, prog.Execute(incr_cs(g, hits))))
    e.load(ipu() if device == "ipu" else Device.createCPUDevice("tiny"))
    for value in (0.5, 0.0, -1e-3, -0.0, np.nan):
        e.writeTensor("p", np.array([value], np.float32))
        e.run(0)
    assert int(e.readTensor("hits")) == 3  # 0.5, -1e-3 and nan are non-zero


def test_repeat_accepts_numpy_count():
    g = new_graph()
    c = int_var(g, "c")
    e = run_engine(g, prog.Repeat(np.int64(3), prog.Execute(incr_cs(g, c))))
    assert int(e.readTensor("c")) == 3


def test_call_function_twice():
    g = new_graph()
    c = int_var(g, "c")
    fn = g.addFunction(
        prog.Sequence(prog.Execute(incr_cs(g, c)), prog.Execute(incr_cs(g, c, 0, "i2")))
    )
    e = run_engine(g, prog.Sequence(prog.Call(fn), prog.Call(fn)))
    assert int(e.readTensor("c")) == 4  # 2 calls x 2 increments
    assert [r.name for r in records(e, "compute")] == ["incr", "i2", "incr", "i2"]


def test_sync_programs_in_trace():
    g = new_graph()
    seq = prog.Sequence(
        prog.Sync(prog.SyncType.INTERNAL, "s-int"),
        prog.Sync(prog.SyncType.EXTERNAL, "s-ext"),
        prog.Sync(prog.SyncType.GLOBAL, "s-glob"),
    )
    e = run_engine(g, seq)
    syncs = records(e, "sync")
    assert [r.name for r in syncs] == ["s-int", "s-ext", "s-glob", "EndOfRun/Sync"]
    # A global sync includes the host; every run ends with an internal sync.
    assert [r.step.sync_kind for r in syncs] == ["internal", "external", "host", "internal"]
    assert all(r.phase == "sync" for r in syncs)


# ----------------------------------------------------------------------- copies


def _copy_case(view_src, view_dst, src_shape, dst_shape, src_tile=0, dst_tile=0):
    g = new_graph()
    src = mapped(g, FLOAT, src_shape, "src", src_tile)
    dst = mapped(g, FLOAT, dst_shape, "dst", dst_tile)
    values = np.arange(np.prod(src_shape), dtype=np.float32).reshape(src_shape) * 1.5 - 4
    g.setInitialValue(src, values)
    g.setInitialValue(dst, -1.0)
    g.createHostRead("dst", dst)
    e = run_engine(g, prog.Copy(view_src(src), view_dst(dst)))
    return values, e.readTensor("dst"), e


def test_copy_transpose_view():
    values, got, _ = _copy_case(lambda s: s.transpose(), lambda d: d, [3, 4], [4, 3])
    np.testing.assert_array_equal(got, values.T)


def test_copy_into_slice_of_reversed_destination():
    # dst.reverse(1)[1:3, :] receives src[0:2, 1:4] (a 2x3 block).
    values, got, _ = _copy_case(
        lambda s: s.slice([0, 1], [2, 4]),
        lambda d: d.reverse(1).slice([1, 0], [3, 3]),
        [3, 4],
        [3, 3],
    )
    expected = np.full((3, 3), -1.0, np.float32)
    expected[:, ::-1][1:3, :] = values[0:2, 1:4]
    np.testing.assert_array_equal(got, expected)


def test_copy_reverse_source():
    values, got, _ = _copy_case(lambda s: s.reverse(0), lambda d: d, [5], [5])
    np.testing.assert_array_equal(got, values[::-1])


def test_on_tile_copy_has_no_exchange():
    values, got, e = _copy_case(lambda s: s, lambda d: d, [6], [6], src_tile=3, dst_tile=3)
    np.testing.assert_array_equal(got, values)
    assert records(e, "exchange") == []
    [comp] = records(e, "compute")
    assert np.flatnonzero(comp.tile_cycles).tolist() == [3]


def test_cross_tile_copy_exchanges():
    values, got, e = _copy_case(lambda s: s, lambda d: d, [6], [6], src_tile=1, dst_tile=5)
    np.testing.assert_array_equal(got, values)
    assert records(e, "compute") == []
    [ex] = records(e, "exchange")
    # The 6 contiguous floats go from tile 1 to tile 5: 24 bytes in one message.
    assert ex.step.tile.tolist() == [1, 5]
    assert ex.step.bytes_sent.tolist() == [24, 0]
    assert ex.step.bytes_received.tolist() == [0, 24]
    assert ex.step.messages_sent.tolist() == [1, 0]
    assert ex.step.messages_received.tolist() == [0, 1]
    # tiny: 2 columns of 4 tiles; tile 1 at (0, 1), tile 5 at (1, 1): distance 1
    assert ex.step.max_distance.tolist() == [1, 1]
    # 24 bytes at 4 bytes per cycle on both tiles (tiny has no fixed or hop latency)
    assert ex.tile_cycles[[1, 5]].tolist() == [6, 6]


# ---------------------------------------------------------------------- streams


def test_host_to_device_stream_wraps_around():
    g = new_graph()
    v = g.addVariable(INT, [4], "v")
    g.setTileMapping(v, 0)
    g.createHostRead("v", v)
    s = g.addHostToDeviceFIFO("in", INT, 4)
    e = Engine(g, prog.Copy(s, v))
    e.load(ipu())
    buf = np.arange(10, dtype=np.int32) * 10  # 0, 10, ..., 90
    e.connectStream("in", buf)
    got = []
    for _ in range(3):
        e.run(0)
        got.append(e.readTensor("v").tolist())
    # Reads elements 0-3, 4-7, then 8, 9 and wraps to 0, 1.
    assert got == [[0, 10, 20, 30], [40, 50, 60, 70], [80, 90, 0, 10]]


def _d2h_graph():
    g = new_graph()
    v = int_var(g, "v", tile=2, size=3)
    s = g.addDeviceToHostFIFO("out", INT, 3)
    return g, Engine(g, prog.Copy(v, s))


def test_device_to_host_stream_into_buffer():
    _, e = _d2h_graph()
    e.load(ipu())
    buf = np.full(5, -1, np.int32)
    e.connectStream("out", buf)
    e.writeTensor("v-w", np.array([1, 2, 3], np.int32))
    e.run(0)
    e.writeTensor("v-w", np.array([4, 5, 6], np.int32))
    e.run(0)
    # Run 1 fills positions 0-2; run 2 fills 3, 4 and wraps to 0.
    assert buf.tolist() == [6, 2, 3, 4, 5]


def test_device_to_host_stream_into_callback():
    _, e = _d2h_graph()
    e.load(ipu())
    seen = []
    e.connectStreamToCallback("out", lambda arr: seen.append(arr.tolist()))
    e.writeTensor("v-w", np.array([7, 8, 9], np.int32))
    e.run(0)
    e.run(0)
    assert seen == [[7, 8, 9], [7, 8, 9]]
    streams = records(e, "stream_copy")
    assert len(streams) == 1
    assert streams[0].step.direction == "device_to_host"


def test_host_to_device_callback():
    g = new_graph()
    v = int_var(g, "v", tile=1, size=4)
    s = g.addHostToDeviceFIFO("in", INT, 4)
    e = Engine(g, prog.Copy(s, v))
    e.load(ipu())
    calls = []

    def fill(arr: np.ndarray) -> None:
        calls.append(arr.size)
        arr[:] = np.arange(arr.size) + 100 * len(calls)

    e.connectStreamToCallback("in", fill)
    e.run(0)
    assert e.readTensor("v").tolist() == [100, 101, 102, 103]
    e.run(0)
    assert e.readTensor("v").tolist() == [200, 201, 202, 203]
    assert calls == [4, 4]


def test_write_read_tensor_round_trip():
    g = new_graph()
    t = g.addVariable(FLOAT, [2, 3], "t")
    g.setTileMapping(t.slice(0, 1, 0), 6)
    g.setTileMapping(t.slice(1, 2, 0), 7)
    g.createHostWrite("t-w", t)
    g.createHostRead("t", t)
    e = Engine(g, prog.Sequence())
    e.load(ipu())
    values = np.array([[1.25, -2, 3], [4, 5e6, -0.5]], np.float32)
    e.writeTensor("t-w", values)
    out = np.zeros(6, np.float32)
    assert e.readTensor("t", out) is out
    np.testing.assert_array_equal(out, values.reshape(-1))
    np.testing.assert_array_equal(e.readTensor("t"), values)


def test_print_tensor_2d(capsys):
    g = new_graph()
    m = g.addConstant(FLOAT, [2, 3], [[1, 2.5, -3], [0.25, 1e6, 7]], "m")
    g.setTileMapping(m, 0)
    run_engine(g, prog.Sequence(prog.PrintTensor(m), prog.PrintTensor("title", m.transpose())))
    out = capsys.readouterr().out
    assert out == (
        "m: {\n {1,2.5,-3},\n {0.25,1e+06,7}\n}\ntitle: {\n {1,0.25},\n {2.5,1e+06},\n {-3,7}\n}\n"
    )


# ----------------------------------------------------------------------- codelets


def test_multivertex_codelet():
    g = new_graph()
    data = g.addVariable(FLOAT, [15], "data")
    g.setTileMapping(data, 4)
    values = np.linspace(-3, 4, 15, dtype=np.float32)
    g.setInitialValue(data, values)
    g.createHostRead("data", data)
    cs = g.addComputeSet("triple")
    vertex_on(g, cs, Triple, {"data": data}, 4, 40)
    e = run_engine(g, prog.Execute(cs))
    np.testing.assert_array_equal(e.readTensor("data"), values * np.float32(3))
    [comp] = records(e, "compute")
    # A multi-vertex estimate is in tile cycles already: 40 (launch cost 0 in the preset).
    assert int(comp.tile_cycles[4]) == 40


def test_vectorlist_codelet():
    g = new_graph()
    src = mapped(g, FLOAT, [10], "src")
    out = mapped(g, FLOAT, [3], "out")
    values = np.arange(10, dtype=np.float32) + 0.5
    g.setInitialValue(src, values)
    g.createHostRead("out", out)
    cs = g.addComputeSet("sums")
    v = g.addVertex(cs, ListSums, {"out": out})
    g.setFieldSize(v["in"], 3)
    g.connect(v["in"][0], src.slice(0, 2))
    g.connect(v["in"][1], src.slice(2, 7))
    g.connect(v["in"][2], src.slice(7, 10).reverse(0))
    g.setTileMapping(v, 0)
    g.setPerfEstimate(v, 30)
    e = run_engine(g, prog.Execute(cs))
    expected = [values[0:2].sum(), values[2:7].sum(), values[7:10].sum()]
    np.testing.assert_allclose(e.readTensor("out"), expected, rtol=1e-6)


def test_cycle_estimate_used_in_trace():
    g = new_graph()
    x = mapped(g, FLOAT, [5], "x", 3)
    y = mapped(g, FLOAT, [5], "y", 3)
    g.setInitialValue(x, [1, 2, 3, 4, 5])
    g.createHostRead("y", y)
    cs = g.addComputeSet("scale")
    v = g.addVertex(cs, Scaled, {"in": x, "out": y})
    g.setTileMapping(v, 3)
    e = run_engine(g, prog.Execute(cs))
    np.testing.assert_array_equal(e.readTensor("y"), [2, 4, 6, 8, 10])
    [comp] = records(e, "compute")
    # estimate = 10 + 2 * 5 = 20 thread cycles; one worker vertex: tile = 6 * 20 = 120.
    assert int(comp.tile_cycles[3]) == 120
    assert comp.tile_cycles.sum() == 120


def test_half_tensors_round_like_numpy():
    g = new_graph()
    a = g.addVariable(HALF, [4], "a")
    b = g.addVariable(HALF, [4], "b")
    out = g.addVariable(HALF, [4], "out")
    for t in (a, b, out):
        g.setTileMapping(t, 1)
    g.createHostWrite("a", a)
    g.createHostWrite("b", b)
    g.createHostRead("a", a)
    g.createHostRead("out", out)
    cs = g.addComputeSet("add")
    vertex_on(g, cs, AddHalf, {"a": a, "b": b, "out": out}, 1, 10)
    e = Engine(g, prog.Execute(cs))
    e.load(ipu())
    av = np.array([1 / 3, 0.1, 1000.3, 65504.0], np.float64)
    bv = np.array([2 / 3, 0.2, 0.4, 100.0], np.float64)
    e.writeTensor("a", av)
    e.writeTensor("b", bv)
    e.run(0)
    a16, b16 = av.astype(np.float16), bv.astype(np.float16)
    np.testing.assert_array_equal(e.readTensor("a"), a16)
    with np.errstate(over="ignore"):
        expected = (a16.astype(np.float32) + b16.astype(np.float32)).astype(np.float16)
    got = e.readTensor("out")
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, expected)  # 65504 + 100 overflows to inf
    assert np.isinf(got[3])


def _multi_step(device: Device) -> tuple[np.ndarray, np.ndarray, list[list[float]]]:
    g = Graph(device.getTarget())
    a = g.addVariable(FLOAT, [4], "a")
    b = g.addVariable(FLOAT, [4], "b")
    c = g.addVariable(FLOAT, [4], "c")
    for i in range(4):
        g.setTileMapping(a[i], i)
        g.setTileMapping(b[i], 7 - i)
    g.setTileMapping(c, 5)
    g.setInitialValue(b, [10, 20, 30, 40])
    g.createHostRead("c", c)
    g.createHostRead("b", b)
    s_in = g.addHostToDeviceFIFO("in", FLOAT, 4)
    s_out = g.addDeviceToHostFIFO("out", FLOAT, 4)
    cs = g.addComputeSet("add")
    vertex_on(g, cs, AddVec, {"a": a, "b": b, "out": c}, 5, 12)
    body = prog.Sequence(
        prog.Copy(s_in, a), prog.Execute(cs), prog.Copy(c, b.reverse(0)), prog.Copy(c, s_out)
    )
    e = Engine(g, prog.Repeat(2, body))
    e.load(device)
    e.connectStream("in", np.array([1, 2, 3, 4, 5, 6, 7, 8], np.float32))
    pushed: list[list[float]] = []
    e.connectStreamToCallback("out", lambda arr: pushed.append(arr.tolist()))
    e.run(0)
    return e.readTensor("c"), e.readTensor("b"), pushed


def test_cpu_device_matches_ipu_model():
    cpu = _multi_step(Device.createCPUDevice("tiny"))
    model = _multi_step(ipu())
    # Iteration 1: c = [1,2,3,4] + [10,20,30,40] = [11,22,33,44]; b = c reversed.
    # Iteration 2: c = [5,6,7,8] + [44,33,22,11] = [49,39,29,19]; b = [19,29,39,49].
    assert model[2] == [[11, 22, 33, 44], [49, 39, 29, 19]]
    np.testing.assert_array_equal(model[0], [49, 39, 29, 19])
    np.testing.assert_array_equal(model[1], [19, 29, 39, 49])
    for x, y in zip(cpu, model, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_cpu_device_has_no_trace():
    g = Graph(Device.createCPUDevice("tiny").getTarget())
    e = Engine(g, prog.Sequence())
    e.load(Device.createCPUDevice("tiny"))
    e.run(0)
    assert e.getTrace() is None


def test_compute_record_with_perf_estimates():
    g = new_graph()
    estimates = [10, 20, 30, 5, 5, 5, 40, 7]
    counters = g.addVariable(INT, [len(estimates) + 1], "counters")
    g.setTileMapping(counters, 1)
    cs = g.addComputeSet("spread")
    for i, cycles in enumerate(estimates):
        vertex_on(g, cs, Bump, {"c": counters[i]}, 1, cycles)
    vertex_on(g, cs, Bump, {"c": counters[len(estimates)]}, 6, 9)
    g.createHostRead("counters", counters)
    e = run_engine(g, prog.Execute(cs))
    assert e.readTensor("counters").tolist() == [1] * 9
    comps = records(e, "compute")
    [comp] = [r for r in comps if r.name == "spread"]
    # Tile 1, W = 6 contexts, each vertex to the least-loaded context (lowest index on ties):
    #   10->c0, 20->c1, 30->c2, 5->c3, 5->c4, 5->c5 : loads [10,20,30,5,5,5]
    #   40->c3 (5 is the first minimum)            : loads [10,20,30,45,5,5]
    #   7->c4                                      : loads [10,20,30,45,12,5]
    # tile cycles = 6 * max load = 6 * 45 = 270. Tile 6: one vertex of 9 -> 6 * 9 = 54.
    expected = np.zeros(8, np.int64)
    expected[1], expected[6] = 270, 54
    np.testing.assert_array_equal(comp.tile_cycles, expected)
    # Counters on tile 1 updated by a vertex on tile 6: one element goes out and back.
    names = [r.name for r in e.getTrace().records]
    assert "spread/ExchangeIn" in names and "spread/ExchangeOut" in names


def test_invalid_engine_options_json(monkeypatch):
    monkeypatch.setenv("POPLAR_ENGINE_OPTIONS", '{"autoReport.all": true,')
    g = new_graph()
    with pytest.raises(EngineError, match="POPLAR_ENGINE_OPTIONS is not valid JSON") as info:
        Engine(g, prog.Sequence())
    assert '{"autoReport.all": true,' in str(info.value)
    assert isinstance(info.value, PoplarError)


@pytest.mark.parametrize(
    ("programs", "found"),
    [
        ("main", "programs is 'main' of type str"),
        ({"main": prog.Sequence()}, "of type dict"),
        (3, "programs is 3 of type int"),
        ([prog.Sequence(), None], "programs[1] is None of type NoneType"),
        ([[prog.Sequence()]], "programs[0] is [Sequence"),
    ],
)
def test_programs_that_are_not_programs_are_named(programs, found):
    # A string or a dict was taken apart into characters or keys and failed deep in
    # the compilation with an AttributeError.
    g = new_graph()
    with pytest.raises(EngineError, match="expected a Program") as info:
        Engine(g, programs)
    assert found in str(info.value) and "hint:" in str(info.value)


def test_programs_may_be_any_iterable_of_programs():
    g = new_graph()
    engine = Engine(g, (p for p in [prog.Sequence(), prog.Sequence()]))
    engine.load(IPUModel("tiny").createDevice())
    engine.run(1)


def test_virtual_graph_tiles_shift_in_parent():
    g = new_graph()
    vg = g.createVirtualGraph(4, 8)
    assert vg.getTarget().getNumTiles() == 4
    c = vg.addVariable(INT, [], "c")
    vg.setTileMapping(c, 0)
    g.createHostRead("c", c)
    cs = vg.addComputeSet("virt")
    vertex_on(vg, cs, Bump, {"c": c}, 0, 8)
    e = run_engine(g, prog.Execute(cs))
    assert int(e.readTensor("c")) == 1
    [comp] = records(e, "compute")
    # Virtual tile 0 of [4, 8) is tile 4 of the parent: 6 * 8 = 48 cycles there only.
    expected = np.zeros(8, np.int64)
    expected[4] = 48
    np.testing.assert_array_equal(comp.tile_cycles, expected)
    mapping = g.getTileMapping(c)
    assert [k for k, intervals in enumerate(mapping) if intervals] == [4]
