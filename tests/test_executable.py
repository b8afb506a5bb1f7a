"""compileGraph, Executable files and Engine(executable).

Expected values are worked out by hand in comments; "the same run" is checked with the
trace fingerprint of ``Engine(graph, programs)`` on a second, identically built graph.
Graphs use the 8-tile ``tiny`` preset.
"""

from __future__ import annotations

import inspect
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from codelets_common import Bump, mapped, tiny_device, tiny_graph, vertex_on

from poplar_api import FLOAT, INT, Engine, Executable, ExecutableError
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, VectorList, Vertex
from poplar_api.errors import EngineError
from poplar_api.executable import MAGIC, compileGraph


class ScaleSum(Vertex):
    """``out = 2 * sum(in)``."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        s = 0.0
        for i in range(in_.shape[0]):
            s += in_[i]
        out[0] = 2.0 * s
        return True


def build(codelets=None):
    """x[4] on tile 0 -> ScaleSum on tile 1 -> y; a counter bumped 3 times; a stream."""
    g = tiny_graph()
    if codelets is not None:
        g.addCodelets(codelets)
    x = g.addVariable(FLOAT, [4], "x")
    y = g.addVariable(FLOAT, [1], "y")
    c = g.addVariable(INT, [1], "c")
    g.setTileMapping(x, 0)
    g.setTileMapping(y, 1)
    g.setTileMapping(c, 2)
    g.setInitialValue(c, 5)
    cs = g.addComputeSet("sum")
    v = g.addVertex(cs, "ScaleSum" if codelets is not None else ScaleSum, {"in": x, "out": y[0]})
    g.setTileMapping(v, 1)
    g.setPerfEstimate(v, 40)
    inc = g.addComputeSet("inc")
    w = g.addVertex(inc, "Bump" if codelets is not None else Bump, {"c": c[0]})
    g.setTileMapping(w, 2)
    g.setPerfEstimate(w, 7)
    s = g.addHostToDeviceFIFO("x-in", FLOAT, 4)
    g.createHostRead("y", y)
    g.createHostRead("c", c)
    programs = [
        prog.Sequence(prog.Copy(s, x), prog.Execute(cs)),
        prog.Repeat(3, prog.Execute(inc)),
    ]
    return g, programs


def run(engine):
    """Runs both programs; returns (y, c, fingerprints)."""
    engine.load(tiny_device())
    engine.connectStream("x-in", np.array([1, 2, 3, 4], np.float32))
    prints = []
    for i in (0, 1):
        engine.run(i)
        prints.append(engine.getTrace().fingerprint())
    return engine.readTensor("y").tolist(), engine.readTensor("c").tolist(), prints


# 2 * (1 + 2 + 3 + 4) = 20; the counter starts at 5 and is bumped 3 times: 8.
EXPECTED = ([20.0], [8])


def test_engine_of_compiled_graph_runs_as_engine_of_graph():
    g1, p1 = build()
    y1, c1, fp1 = run(Engine(g1, p1))
    g2, p2 = build()
    steps = []
    exe = compileGraph(g2, p2, progressCallback=lambda i, n: steps.append((i, n)))
    assert steps == [(0, 1), (1, 1)]
    assert exe.getNumPrograms() == 2
    y2, c2, fp2 = run(Engine(exe))
    assert (y1, c1) == (y2, c2) == EXPECTED
    assert fp1 == fp2


def test_serialize_round_trip_in_process(tmp_path):
    g1, p1 = build()
    *_, fp1 = run(Engine(g1, p1))
    g2, p2 = build()
    path = tmp_path / "prog.ipuexe"
    compileGraph(g2, p2).serialize(path)
    assert path.read_bytes().startswith(MAGIC)
    exe = Executable.deserialize(path)
    y, c, fp = run(Engine(exe, {"debug.instrument": "true"}))
    assert (y, c) == EXPECTED
    assert fp == fp1


class Gather(Vertex):
    """``out = sum of every part``."""

    parts = Input(VectorList(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(parts, out):
        s = 0.0
        for j in range(len(parts)):
            for i in range(parts[j].shape[0]):
                s += parts[j][i]
        out[0] = s
        return True


def test_connections_of_every_kind_survive_a_file(tmp_path):
    """Rows (ranges), columns and shuffled views (id arrays, one shared by two vertices)
    and VectorLists come back with the same ids, and the graph runs alike."""
    g = tiny_graph()
    g.addCodelets([ScaleSum, Gather])
    m = g.addVariable(FLOAT, [4, 6], "m")
    out = g.addVariable(FLOAT, [7], "out")
    for r in range(4):
        g.setTileMapping(m[r], r)
    g.setTileMapping(out, 5)
    cs = g.addComputeSet("cs")
    shuffled = m[1].slice(0, 6)[::-1]
    views = [m[0], m[:, 2], shuffled, shuffled, m[3].slice(1, 4)]
    for k, view in enumerate(views):
        v = g.addVertex(cs, "ScaleSum", {"in": view, "out": out[k]})
        g.setTileMapping(v, k)
        g.setPerfEstimate(v, 5 + k)
    v = g.addVertex(cs, "Gather", {"parts": [m[2], m[:, 0]], "out": out[5]})
    g.setTileMapping(v, 6)
    g.setPerfEstimate(v, 9)
    values = np.arange(24, dtype=np.float32).reshape(4, 6)
    program = prog.Sequence([prog.Execute(cs)])

    def result(engine):
        engine.load(tiny_device())
        engine.writeTensor("m", values)
        engine.run(0)
        return engine.readTensor("out")

    g.createHostWrite("m", m)
    g.createHostRead("out", out)
    path = tmp_path / "views.ipuexe"
    compileGraph(g, program).serialize(path)
    exe = Executable.deserialize(path)
    # a tensor of consecutive ids comes back as a block, its index array made on use
    m_back = exe._state.host_writes["m"]
    assert m_back._ix is None and m_back.shape() == [4, 6] and m_back.isContiguous()
    assert m_back.index.tolist() == m.index.tolist()
    out_back = exe._state.host_reads["out"]
    assert out_back.index.tolist() == out.index.tolist()
    loaded = exe._state.vertices
    original = g._state.vertices
    for vid in range(len(original)):
        for name, ids in original.fields[vid].items():
            got = loaded.fields[vid][name]
            if isinstance(ids, list):
                assert [a.tolist() for a in got] == [np.asarray(a).tolist() for a in ids]
            else:
                assert type(got) is type(ids), (vid, name)
                assert np.asarray(got).tolist() == np.asarray(ids).tolist(), (vid, name)
    assert loaded.fields[2]["in"] is loaded.fields[3]["in"]  # still one shared array
    # evenly spaced ids (a column, a reversed row) are stored as ranges, not arrays
    from poplar_api.executable import _pack_vertices

    _, (state,) = _pack_vertices(original)
    assert state["extra"][1]["in"] == ("ids", ("range", 2, 6, (4,)))
    assert state["extra"][2]["in"] == ("ids", ("range", 11, -1, (6,)))
    assert state["extra"][2]["in"] is state["extra"][3]["in"]
    assert not loaded.fields[1]["in"].flags.writeable
    want = [2 * float(values.reshape(-1)[np.asarray(v.flat_index())].sum()) for v in views]
    want += [float(values[2].sum() + values[:, 0].sum()), 0.0]
    assert result(Engine(exe)).tolist() == want
    assert result(Engine(g, program)).tolist() == want


def test_serialize_to_a_stream():
    g, p = build()
    buf = io.BytesIO()
    compileGraph(g, p).serialize(buf)
    buf.seek(0)
    y, c, _ = run(Engine(Executable.deserialize(buf)))
    assert (y, c) == EXPECTED


def test_a_second_engine_of_one_executable_compiles_again():
    g, p = build()
    exe = compileGraph(g, p)
    first = run(Engine(exe))
    second = run(Engine(exe))
    assert first == second
    assert first[:2] == EXPECTED


#: ``ScaleSum`` and ``Bump`` as a codelet file: the same vertices as the classes above.
CODELETS = "\n".join(
    [
        "from poplar_api import FLOAT, INT",
        "from poplar_api.codelet import InOut, Input, Output, Vector, Vertex",
        inspect.getsource(ScaleSum),
        inspect.getsource(Bump),
    ]
)

LOADER = textwrap.dedent(
    """
    import sys
    import numpy as np
    from poplar_api import Engine, Executable, IPUModel

    engine = Engine(Executable.deserialize(sys.argv[1]))
    engine.load(IPUModel("tiny").createDevice())
    engine.connectStream("x-in", np.array([1, 2, 3, 4], np.float32))
    for i in (0, 1):
        engine.run(i)
        print(engine.getTrace().fingerprint())
    print(engine.readTensor("y").tolist(), engine.readTensor("c").tolist())
    """
)


def test_file_loads_in_another_process(tmp_path):
    """Codelets from a codelet file are found again by path in a new process."""
    codelets = tmp_path / "my_codelets.py"
    codelets.write_text(CODELETS)
    g1, p1 = build(str(codelets))
    *_, fp1 = run(Engine(g1, p1))
    g2, p2 = build(str(codelets))
    path = tmp_path / "prog.ipuexe"
    compileGraph(g2, p2).serialize(str(path))
    script = tmp_path / "load.py"
    script.write_text(LOADER)
    env = dict(os.environ)
    env.pop("POPLAR_ENGINE_OPTIONS", None)
    out = subprocess.run(
        [sys.executable, str(script), str(path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[:2] == fp1
    assert lines[2] == "[20.0] [8]"


# ------------------------------------------------------------------ errors


def test_foreign_file_is_refused_naming_it(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("hello, not an executable\n")
    with pytest.raises(ExecutableError, match=r"notes\.txt.*not an ipusim executable"):
        Executable.deserialize(path)


def test_truncated_file_is_refused_naming_it(tmp_path):
    g, p = build()
    path = tmp_path / "cut.ipuexe"
    compileGraph(g, p).serialize(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 10])
    with pytest.raises(ExecutableError, match=r"cut\.ipuexe.*truncated or corrupt"):
        Executable.deserialize(path)


def test_corrupt_byte_is_refused(tmp_path):
    g, p = build()
    path = tmp_path / "bad.ipuexe"
    compileGraph(g, p).serialize(path)
    data = bytearray(path.read_bytes())
    data[-5] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ExecutableError, match=r"bad\.ipuexe.*SHA-256"):
        Executable.deserialize(path)


def test_other_format_version_is_refused(tmp_path):
    g, p = build()
    path = tmp_path / "old.ipuexe"
    compileGraph(g, p).serialize(path)
    data = path.read_bytes().replace(b'"format": 5', b'"format": 99', 1)
    path.write_bytes(data)
    with pytest.raises(ExecutableError, match=r"old\.ipuexe.*format version 99.*version 5"):
        Executable.deserialize(path)


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ExecutableError, match=r"absent\.ipuexe"):
        Executable.deserialize(tmp_path / "absent.ipuexe")


def test_lost_codelet_file_names_vertex_type_and_file(tmp_path):
    codelets = tmp_path / "gone.py"
    codelets.write_text(CODELETS)
    g, p = build(str(codelets))
    path = tmp_path / "prog.ipuexe"
    compileGraph(g, p).serialize(path)
    codelets.unlink()
    with pytest.raises(ExecutableError, match=r"prog\.ipuexe.*vertex type '\w+'.*gone\.py"):
        Executable.deserialize(path)


def test_compile_time_option_cannot_change_at_engine(tmp_path):
    g, p = build()
    exe = compileGraph(g, p, {"profiler.blocks.filter": "a.*"})
    with pytest.raises(EngineError, match=r"profiler\.blocks\.filter.*'b'.*'a\.\*'"):
        Engine(exe, {"profiler.blocks.filter": "b"})
    with pytest.raises(EngineError, match="programs were fixed by compileGraph"):
        Engine(exe, prog.Sequence())


def test_text_stream_is_refused():
    g, p = build()
    with pytest.raises(ExecutableError, match="binary mode"):
        compileGraph(g, p).serialize(io.StringIO())


def test_local_class_is_stored_by_value(tmp_path):
    """A vertex class made inside a function cannot be imported: it is pickled by value."""

    class LocalBump(Bump):
        """``c += 2``: a vertex class of this function only."""

        @staticmethod
        def compute(c):
            c[0] += 2
            return True

    g = tiny_graph()
    c = mapped(g, INT, [1], "c")
    g.setInitialValue(c, 1)
    cs = g.addComputeSet("cs")
    vertex_on(g, cs, LocalBump, {"c": c[0]}, tile=0, cycles=3)
    g.createHostRead("c", c)
    path = Path(tmp_path) / "local.ipuexe"
    compileGraph(g, prog.Execute(cs)).serialize(path)
    e = Engine(Executable.deserialize(path))
    e.load(tiny_device())
    e.run(0)
    assert e.readTensor("c").tolist() == [3]  # 1 + 2
