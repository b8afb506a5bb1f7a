"""Vertex kinds (Vertex, MultiVertex, SupervisorVertex), InOut state, layouts and
codelets loaded from a file.

Every value is checked against numpy, and every cycle count against the compute
model written out here: a tile's worker vertices go, in order, to the context that
frees first; tile cycles = ``contexts * max(context load) + Σ (multi-vertex estimate
+ multi launch)``, where a worker vertex loads its context with its estimate plus the
vertex launch cycles. All runs use the ``tiny`` machine.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import Scale, mapped, vertex_on

from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import (
    CodeletFileError,
    InOut,
    Input,
    MultiVertex,
    Output,
    SupervisorVertex,
    Vector,
    VectorLayout,
    VectorList,
    VectorListLayout,
    Vertex,
    load_codelet_file,
    numWorkers,
    vertex_type,
)
from poplar_api.errors import CodeletError, GraphError


class DoubleMulti(MultiVertex):
    """Poplar-style MultiVertex: worker ``w`` doubles elements w, w + n, w + 2n, ..."""

    in_ = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(workerId, in_, out):
        n = numWorkers()
        for i in range(workerId, in_.shape[0], n):
            out[i] = 2.0 * in_[i]
        return True


class WorkerIds(MultiVertex):
    """Each worker writes its id and the worker count (via the class) into its slot."""

    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(workerId, out):
        out[workerId] = workerId * 100 + WorkerIds.numWorkers()


class SumSupervisor(SupervisorVertex):
    """Runs once per vertex: ``out = sum(in)`` and counts its own calls in ``calls``."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)
    calls = InOut(FLOAT)

    @staticmethod
    def compute(in_, out, calls):
        s = np.float32(0.0)
        for i in range(in_.shape[0]):
            s += in_[i]
        out[0] = s
        calls[0] += 1.0


class Accumulate(Vertex):
    """``acc += x`` elementwise: its state lives in ``acc`` across runs."""

    x = Input(Vector(FLOAT))
    acc = InOut(Vector(FLOAT))

    @staticmethod
    def compute(x, acc):
        for i in range(x.shape[0]):
            acc[i] += x[i]


def tiny():
    device = IPUModel("tiny").createDevice()
    return device, Graph(device.getTarget())


def compute_steps(engine: Engine) -> list:
    trace = engine.getTrace()
    return [r for r in trace.records if r.kind == "compute"]


def tile_cfg(device):
    return device.getTarget().config.tile


# ------------------------------------------------------------------ MultiVertex
def test_multivertex_runs_every_worker_and_costs_its_estimate_in_tile_cycles():
    device, graph = tiny()
    x = graph.addVariable(FLOAT, [20], "x")
    y = graph.addVariable(FLOAT, [20], "y")
    w = graph.addVariable(FLOAT, [8], "w")
    for t in (x, y, w):
        graph.setTileMapping(t, 2)
    cs = graph.addComputeSet("multi")
    v = graph.addVertex(cs, DoubleMulti, {"in": x, "out": y})
    ids = graph.addVertex(cs, WorkerIds, {"out": w})
    for vert, cycles in ((v, 40), (ids, 7)):
        graph.setTileMapping(vert, 2)
        graph.setPerfEstimate(vert, cycles)
    graph.createHostWrite("x", x)
    graph.createHostRead("y", y)
    graph.createHostRead("w", w)
    engine = Engine(graph, prog.Execute(cs))
    engine.load(device)
    data = np.arange(20, dtype=np.float32) - 7.5
    engine.writeTensor("x", data)
    engine.run(0)
    np.testing.assert_array_equal(engine.readTensor("y"), 2 * data)
    contexts = tile_cfg(device).worker_contexts
    expected_ids = np.zeros(8, np.float32)
    expected_ids[:contexts] = np.arange(contexts) * 100 + contexts
    np.testing.assert_array_equal(engine.readTensor("w"), expected_ids)
    (step,) = compute_steps(engine)
    assert step.step.vertex_multi.tolist() == [True, True]
    launch = tile_cfg(device).multi_vertex_launch_cycles
    assert int(step.tile_cycles[2]) == 40 + 7 + 2 * launch
    assert MultiVertex.numWorkers() == 6 and numWorkers() == 6  # outside a run


def test_legacy_multivertex_signature_still_works():
    class Legacy(MultiVertex):
        out = Output(Vector(FLOAT))

        @staticmethod
        def compute(worker_id, num_workers, out):
            out[worker_id] = num_workers

    vt = vertex_type(Legacy)
    assert vt.kind == "multi" and vt.passes_num_workers and vt.is_multi


def test_multivertex_with_wrong_parameters_names_both_forms():
    class Bad(MultiVertex):
        out = Output(Vector(FLOAT))

        @staticmethod
        def compute(out):
            out[0] = 1.0

    with pytest.raises(CodeletError, match=r"(?s)needs 2 positional .*compute\(workerId, out\)"):
        vertex_type(Bad)


# ------------------------------------------------------------------ SupervisorVertex
def test_supervisor_vertex_runs_once_and_occupies_the_tile():
    device, graph = tiny()
    x = graph.addVariable(FLOAT, [6], "x")
    s = graph.addVariable(FLOAT, [1], "s")
    calls = graph.addVariable(FLOAT, [1], "calls")
    a = graph.addVariable(FLOAT, [3], "a")
    b = graph.addVariable(FLOAT, [3], "b")
    for t in (x, s, calls, a, b):
        graph.setTileMapping(t, 1)
    graph.setInitialValue(calls, np.zeros(1, np.float32))
    cs = graph.addComputeSet("sup")
    sup = graph.addVertex(cs, SumSupervisor, {"in": x, "out": s[0], "calls": calls[0]})
    work = graph.addVertex(cs, Scale, {"in": a, "out": b})
    graph.setTileMapping(sup, 1)
    graph.setTileMapping(work, 1)
    graph.setPerfEstimate(sup, 90)  # tile cycles
    graph.setCycleEstimate(work, 11)  # thread cycles, SDK 1.x name
    for h, t in (("x", x), ("a", a)):
        graph.createHostWrite(h, t)
    for h, t in (("s", s), ("calls", calls), ("b", b)):
        graph.createHostRead(h, t)
    engine = Engine(graph, prog.Execute(cs))
    engine.load(device)
    xs = np.array([1.5, -2, 3, 4, 0.25, 8], np.float32)
    av = np.array([1, 2, -3], np.float32)
    engine.writeTensor("x", xs)
    engine.writeTensor("a", av)
    engine.run(0)
    assert engine.readTensor("s")[0] == pytest.approx(float(xs.sum()))
    assert engine.readTensor("calls")[0] == 1.0  # once, not once per worker
    np.testing.assert_array_equal(engine.readTensor("b"), 2 * av)
    (step,) = compute_steps(engine)
    assert step.step.vertex_multi.tolist() == [True, False]
    cfg = tile_cfg(device)
    expected = (
        cfg.worker_contexts * (11 + cfg.vertex_launch_cycles) + 90 + cfg.multi_vertex_launch_cycles
    )
    assert int(step.tile_cycles[1]) == expected
    assert vertex_type(SumSupervisor).kind == "supervisor"


def test_a_class_cannot_be_both_multi_and_supervisor():
    class Both(MultiVertex, SupervisorVertex):
        out = Output(FLOAT)

        @staticmethod
        def compute(workerId, out):
            out[0] = 1.0

    with pytest.raises(CodeletError, match="both MultiVertex and SupervisorVertex"):
        vertex_type(Both)


# ------------------------------------------------------------------ InOut state
def test_inout_state_is_kept_across_runs():
    device, graph = tiny()
    x = mapped(graph, FLOAT, [5], "x", tile=0)
    acc = mapped(graph, FLOAT, [5], "acc", tile=3)  # read and written back over the exchange
    start = np.array([10, 20, 30, 40, 50], np.float32)
    graph.setInitialValue(acc, start)
    cs = graph.addComputeSet("acc")
    vertex_on(graph, cs, Accumulate, {"x": x, "acc": acc}, tile=3, cycles=5)
    graph.createHostWrite("x", x)
    graph.createHostRead("acc", acc)
    engine = Engine(graph, prog.Execute(cs))
    engine.load(device)
    first = np.array([1, -2, 3, -4, 5], np.float32)
    second = np.array([0.5, 0.5, 0.5, 0.5, 0.5], np.float32)
    engine.writeTensor("x", first)
    engine.run(0)
    np.testing.assert_array_equal(engine.readTensor("acc"), start + first)
    engine.writeTensor("x", second)
    engine.run(0)
    np.testing.assert_array_equal(engine.readTensor("acc"), start + first + second)


# ------------------------------------------------------------------ layouts
def test_vector_layouts_are_kept_and_checked():
    class Laid(Vertex):
        a = Input(Vector(FLOAT, VectorLayout.ONE_PTR, 8))
        b = Input(VectorList(FLOAT, VectorListLayout.DELTAN, 4))
        c = Output(Vector(FLOAT, "SCALED_PTR64"))

        @staticmethod
        def compute(a, b, c):
            c[0] = a[0] + b[0][0]

    vt = vertex_type(Laid)
    assert [(f.layout, f.min_align) for f in vt.fields] == [
        ("ONE_PTR", 8),
        ("DELTAN", 4),
        ("SCALED_PTR64", 1),
    ]
    with pytest.raises(CodeletError, match=r"layout 'DELTA'.*allowed: ONE_PTR, SPAN"):
        Vector(FLOAT, "DELTA")
    with pytest.raises(CodeletError, match=r"layout 'SPAN'.*allowed: DELTAN"):
        VectorList(FLOAT, "SPAN")
    with pytest.raises(CodeletError, match="power of two, got 6"):
        Vector(FLOAT, minAlign=6)


# ------------------------------------------------------------------ codelet files
GOOD_FILE = """
import numpy as np
from poplar_api import FLOAT
from poplar_api.codelet import Input, MultiVertex, Output, SupervisorVertex, Vector, Vertex


class FileNeg(Vertex):
    in_ = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(in_, out):
        for i in range(in_.shape[0]):
            out[i] = -in_[i]


class FileMulti(MultiVertex):
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(workerId, out):
        out[workerId] = workerId


class FileSup(SupervisorVertex):
    out = Output(FLOAT)

    @staticmethod
    def compute(out):
        out[0] = 7.0
"""


def test_add_codelets_from_a_file(tmp_path):
    path = tmp_path / "my_codelets.py"
    path.write_text(GOOD_FILE)
    device, graph = tiny()
    graph.addCodelets(str(path))
    graph.addCodelets(path)  # again, as a Path: the same classes, no conflict
    x = mapped(graph, FLOAT, [4], "x", tile=0)
    y = mapped(graph, FLOAT, [4], "y", tile=0)
    cs = graph.addComputeSet("neg")
    vertex_on(graph, cs, "FileNeg", {"in": x, "out": y}, tile=0, cycles=4)
    graph.createHostWrite("x", x)
    graph.createHostRead("y", y)
    engine = Engine(graph, prog.Execute(cs))
    engine.load(device)
    data = np.array([1, -2, 3.5, 0], np.float32)
    engine.writeTensor("x", data)
    engine.run(0)
    np.testing.assert_array_equal(engine.readTensor("y"), -data)
    module = load_codelet_file(path)
    kinds = {name: vertex_type(getattr(module, name)).kind for name in ("FileMulti", "FileSup")}
    assert kinds == {"FileMulti": "multi", "FileSup": "supervisor"}


def test_missing_codelet_file(tmp_path):
    missing = tmp_path / "nope.py"
    _, graph = tiny()
    with pytest.raises(CodeletFileError, match=r"nope\.py.*does not exist") as info:
        graph.addCodelets(str(missing))
    assert isinstance(info.value, FileNotFoundError)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        pytest.param(
            "broken.py",
            "from poplar_api.codelet import Vertex\n\nclass X(Vertex)\n    pass\n",
            r"syntax error in codelet file .*broken\.py.* line 3",
            id="syntax-error-names-file-and-line",
        ),
        pytest.param(
            "raises.py",
            "x = 1\ny = undefined_name\n",
            r"raises\.py.*NameError at line 2",
            id="raising-on-import-names-file-and-line",
        ),
        pytest.param(
            "empty.py",
            "from poplar_api.codelet import Vertex  # imported, not defined\nX = 1\n",
            r"empty\.py.*defines no Vertex, MultiVertex or Sup",
            id="without-vertices",
        ),
        pytest.param(
            "codelets.cpp",
            "class X : public poplar::Vertex {};\n",
            r"\.cpp file.*port the codelet",
            id="cpp-file-explains-the-port",
        ),
    ],
)
def test_bad_codelet_file_is_named_with_its_fault(tmp_path, name, text, message):
    path = tmp_path / name
    path.write_text(text)
    _, graph = tiny()
    with pytest.raises(CodeletError, match=message):
        graph.addCodelets(str(path))


def test_set_cycle_estimate_is_set_perf_estimate():
    _, graph = tiny()
    cs = graph.addComputeSet("c")
    x = mapped(graph, FLOAT, [2], "x", tile=0)
    v = graph.addVertex(cs, Scale, {"in": x, "out": x})
    graph.setCycleEstimate(v, 12)
    assert graph._state.vertices[v.id].perf_estimate == 12
    with pytest.raises(GraphError, match="must be an int >= 0"):
        graph.setCycleEstimate(v, -1)
