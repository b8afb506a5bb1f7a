"""Graph validation and Engine misuse: every problem named clearly, all reported together.

Problems that only the whole graph reveals (unmapped tensors, unconnected fields,
write conflicts, program mismatches) are collected at Engine construction into one
:class:`GraphValidationError`; problems visible at the call (a wrong connection, a
tile out of range, an unknown name) raise there. Every message must name the tensor,
vertex or field at fault and the value found.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from codelets_common import Bump, Scale, mapped, tiny_device, tiny_graph, vertex_on

from poplar_api import FLOAT, INT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, VectorList, Vertex
from poplar_api.errors import (
    EngineError,
    GraphError,
    GraphValidationError,
    PoplarError,
    TypeMismatchError,
)

# ----------------------------------------------------------------- vertex classes


class Lists(Vertex):
    """Reads a list of vectors, writes one scalar."""

    in_ = Input(VectorList(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        out[0] = 0.0
        return True


# ------------------------------------------------------------------- helpers


def problems_of(graph: Graph, program) -> list[str]:
    """The problem list of the GraphValidationError raised building an Engine."""
    with pytest.raises(GraphValidationError) as info:
        Engine(graph, program)
    err = info.value
    assert isinstance(err, PoplarError) and isinstance(err, ValueError)
    for p in err.problems:  # every problem is in the message too
        assert p in str(err)
    assert f"({len(err.problems)} problem(s))" in str(err)
    return err.problems


def scale_vertex(graph: Graph, cs, x, y, tile: int = 0, estimate: int | None = 7):
    v = graph.addVertex(cs, Scale, {"in": x, "out": y})
    if tile is not None:
        graph.setTileMapping(v, tile)
    if estimate is not None:
        graph.setPerfEstimate(v, estimate)
    return v


# ----------------------------------------------------------- mapping problems


def test_unmapped_and_partially_mapped_variables():
    g = tiny_graph()
    g.addVariable(FLOAT, [4], "whole")
    part = g.addVariable(FLOAT, [2, 3], "part")
    g.setTileMapping(part[0], 1)  # elements 0-2 mapped, 3-5 not
    problems = problems_of(g, prog.Sequence())
    assert len(problems) == 2
    whole, partial = problems
    assert "variable 'whole'" in whole and "4 of 4 element(s)" in whole and "[4]" in whole
    assert "variable 'part'" in partial and "3 of 6 element(s)" in partial
    assert "first: element 3" in partial
    assert "setTileMapping" in partial  # the hint


def test_large_variables_are_checked_by_stretches_alike():
    # spaces of several thousand elements are first checked stretch by stretch
    g = tiny_graph()
    big = g.addVariable(FLOAT, [3, 4000], "big")
    other = g.addVariable(FLOAT, [5000], "other")
    for r in range(3):
        g.setTileMapping(big[r], r)
    g.setTileMapping(other, 7)
    Engine(g, prog.Sequence())  # no problem
    hole = g.addVariable(FLOAT, [4500], "hole")
    g.setTileMapping(hole.slice(0, 1234), 2)
    g.setTileMapping(hole.slice(1235, 4500), 3)  # element 1234 left out
    [problem] = problems_of(g, prog.Sequence())
    assert "variable 'hole'" in problem and "1 of 4500 element(s)" in problem
    assert "first: element 1234" in problem


@pytest.mark.parametrize("shape", [[2**40, 2**40], [10**20]])
def test_a_shape_beyond_numpy_is_named(shape):
    # numpy's "Maximum allowed dimension exceeded" came out bare, naming nothing.
    with pytest.raises(GraphError, match=r"tensor 'huge': [\d,]+ elements are more than"):
        tiny_graph().addVariable(FLOAT, shape, "huge")


def test_unmapped_constant():
    g = tiny_graph()
    g.addConstant(INT, [3], [1, 2, 3], "k")
    [problem] = problems_of(g, prog.Sequence())
    assert "constant 'k'" in problem and "3 of 3 element(s)" in problem


@pytest.mark.parametrize(
    ("missing", "required"),
    [
        pytest.param("tile", ["compute set 'cs-a'", "not mapped to a tile"], id="unmapped"),
        pytest.param(
            "estimate",
            ["vertex type 'Scale' declares no getCycleEstimate", "setPerfEstimate"],
            id="no-estimate-and-no-estimator",
        ),
    ],
)
def test_vertex_without_a_tile_or_an_estimate(missing, required):
    g = tiny_graph()
    x, y = mapped(g, FLOAT, [4], "x"), mapped(g, FLOAT, [4], "y")
    cs = g.addComputeSet("cs-a")
    v = scale_vertex(g, cs, x, y, **{missing: None})
    [problem] = problems_of(g, prog.Execute(cs))
    for fragment in (f"vertex {v.id} (Scale)", *required):
        assert fragment in problem


def test_unconnected_field():
    g = tiny_graph()
    x = mapped(g, FLOAT, [4], "x")
    cs = g.addComputeSet("cs")
    v = vertex_on(g, cs, Scale, {"in": x}, tile=0, cycles=3)
    [problem] = problems_of(g, prog.Execute(cs))
    assert f"vertex {v.id} (Scale)" in problem
    assert "field 'out'" in problem and "Output(Vector(" in problem
    assert "not connected" in problem


def test_unconnected_vectorlist_slot():
    g = tiny_graph()
    x, out = mapped(g, FLOAT, [6], "x"), mapped(g, FLOAT, [], "out")
    cs = g.addComputeSet("cs")
    v = g.addVertex(cs, Lists, {"out": out})
    g.setFieldSize(v["in"], 4)
    g.connect(v["in"][0], x.slice(0, 2))
    g.connect(v["in"][2], x.slice(2, 6))
    g.setTileMapping(v, 0)
    g.setPerfEstimate(v, 3)
    [problem] = problems_of(g, prog.Execute(cs))
    assert f"vertex {v.id} (Lists)" in problem and "field 'in'" in problem
    assert "vectors [1, 3]" in problem and "field size 4" in problem


def test_wrong_size_scalar_field_at_connect():
    g = tiny_graph()
    c = mapped(g, INT, [3], "three")
    cs = g.addComputeSet("cs")
    v = g.addVertex(cs, Bump)
    with pytest.raises(GraphError) as info:
        g.connect(v["c"], c)
    msg = str(info.value)
    assert f"vertex {v.id} (Bump) field 'c'" in msg
    assert "exactly 1 element" in msg and "has 3" in msg


def test_wrong_element_type_at_connect():
    g = tiny_graph()
    ints = mapped(g, INT, [4], "ints")
    y = mapped(g, FLOAT, [4], "y")
    cs = g.addComputeSet("cs")
    with pytest.raises(TypeMismatchError) as info:
        g.addVertex(cs, Scale, {"out": y, "in": ints})
    msg = str(info.value)
    assert isinstance(info.value, TypeError) and isinstance(info.value, PoplarError)
    assert "(Scale) field 'in'" in msg and "int" in msg.lower() and "float" in msg.lower()


def test_tile_out_of_range_tensor_and_vertex():
    g = tiny_graph()
    t = g.addVariable(FLOAT, [2], "t")
    with pytest.raises(GraphError, match=r"tensor 't'.*tile 8 is out of range \[0, 8\)"):
        g.setTileMapping(t, 8)
    with pytest.raises(GraphError, match=r"tile -1 is out of range"):
        g.setTileMapping(t, -1)
    cs = g.addComputeSet("cs")
    v = g.addVertex(cs, Bump)
    with pytest.raises(GraphError, match=rf"vertex {v.id} \(Bump\).*tile 100 is out of range"):
        g.setTileMapping(v, 100)


def test_tile_out_of_range_virtual_graph():
    g = tiny_graph()
    vg = g.createVirtualGraph(2, 6)  # 4 tiles: parent tiles 2..5
    t = vg.addVariable(FLOAT, [2], "vt")
    with pytest.raises(GraphError, match=r"tensor 'vt'.*tile 4 is out of range \[0, 4\)"):
        vg.setTileMapping(t, 4)
    vg.setTileMapping(t, 3)
    assert g.getTileMapping(t)[5] != []  # virtual tile 3 is parent tile 5
    with pytest.raises(GraphError, match=r"\[5, 9\).*\[0, 8\)"):
        g.createVirtualGraph(5, 9)
    with pytest.raises(GraphError, match=r"\[1, 5\).*\[0, 4\)"):
        vg.createVirtualGraph(1, 5)


# ----------------------------------------------------------- compute set conflicts


def test_two_vertices_write_same_element():
    g = tiny_graph()
    x, y = mapped(g, FLOAT, [4], "x"), mapped(g, FLOAT, [6], "y")
    cs = g.addComputeSet("clash")
    a = scale_vertex(g, cs, x, y.slice(0, 4))
    b = scale_vertex(g, cs, x, y.slice(2, 6))
    [problem] = problems_of(g, prog.Execute(cs))
    assert "compute set 'clash'" in problem
    assert f"vertex {a.id} (Scale)" in problem and f"vertex {b.id} (Scale)" in problem
    # y elements 2 and 3 have two writers; the first is named.
    assert "tensor 'y' element 2" in problem and "(2 such element(s))" in problem


def test_vertex_reads_what_another_writes():
    g = tiny_graph()
    x, y = mapped(g, FLOAT, [4], "x"), mapped(g, FLOAT, [4], "y")
    z = mapped(g, FLOAT, [2], "z")
    cs = g.addComputeSet("race")
    writer = scale_vertex(g, cs, x, y)
    reader = scale_vertex(g, cs, y.slice(1, 3), z)
    [problem] = problems_of(g, prog.Execute(cs))
    # reader reads y[1], y[2]; writer writes all of y: 2 racing reads, the first named.
    assert "compute set 'race'" in problem
    assert f"vertex {reader.id} (Scale) field 'in' reads tensor 'y' element 1" in problem
    assert f"vertex {writer.id} (Scale) writes through field 'out'" in problem
    assert "(2 such read(s))" in problem


def test_read_of_an_element_written_twice_names_its_first_writer():
    g = tiny_graph()
    x, y = mapped(g, FLOAT, [4], "x"), mapped(g, FLOAT, [6], "y")
    z = mapped(g, FLOAT, [1], "z")
    cs = g.addComputeSet("both")
    first = scale_vertex(g, cs, x, y.slice(0, 4))
    scale_vertex(g, cs, x, y.slice(2, 6))
    reader = scale_vertex(g, cs, y.slice(3, 4), z)
    clash, race = problems_of(g, prog.Execute(cs))
    assert "both write tensor 'y' element 2" in clash
    assert f"vertex {reader.id} (Scale) field 'in' reads tensor 'y' element 3" in race
    assert f"vertex {first.id} (Scale) writes through field 'out'" in race


def test_inout_field_is_not_a_conflict_with_itself():
    g = tiny_graph()
    c = mapped(g, INT, [2], "c")
    cs = g.addComputeSet("bumps")
    for i in range(2):
        vertex_on(g, cs, Bump, {"c": c[i]}, tile=0, cycles=1)
    Engine(g, prog.Execute(cs))  # each vertex reads and writes only its own element


# -------------------------------------------------------------- program problems


def test_copy_type_and_size_mismatch():
    g = tiny_graph()
    f4, i4 = mapped(g, FLOAT, [4], "f4"), mapped(g, INT, [4], "i4")
    f5 = mapped(g, FLOAT, [5], "f5")
    problems = problems_of(g, prog.Sequence(prog.Copy(f4, i4), prog.Copy(f5, f4)))
    assert len(problems) == 2
    types_, sizes = problems
    assert "'f4'" in types_ and "'i4'" in types_ and "element types differ" in types_
    assert "float" in types_.lower() and "int" in types_.lower()
    assert "'f5'" in sizes and "5 elements" in sizes and "4 elements" in sizes


def test_stream_size_mismatch():
    g = tiny_graph()
    t = mapped(g, INT, [4], "t")
    s = g.addHostToDeviceFIFO("feed", INT, 6)
    [problem] = problems_of(g, prog.Copy(s, t))
    assert "stream 'feed'" in problem and "6 elements" in problem
    assert "tensor 't'" in problem and "4 elements" in problem


def test_wrong_direction_streams():
    g = tiny_graph()
    t = mapped(g, INT, [4], "t")
    h2d = g.addHostToDeviceFIFO("to-dev", INT, 4)
    d2h = g.addDeviceToHostFIFO("to-host", INT, 4)
    problems = problems_of(g, prog.Sequence(prog.Copy(t, h2d), prog.Copy(d2h, t)))
    assert len(problems) == 2
    assert "stream 'to-dev'" in problems[0] and "host-to-device" in problems[0]
    assert "stream 'to-host'" in problems[1] and "device-to-host" in problems[1]


def test_non_scalar_if_predicate():
    g = tiny_graph()
    p = mapped(g, INT, [2, 2], "pred")
    [problem] = problems_of(g, prog.If(p, prog.Sequence()))
    assert "If" in problem and "'pred'" in problem
    assert "4 elements" in problem and "[2, 2]" in problem and "scalar" in problem


def test_float_switch_control():
    g = tiny_graph()
    ctl = mapped(g, FLOAT, [], "ctl")
    [problem] = problems_of(g, prog.Switch(ctl, [(1, prog.Sequence())]))
    assert "Switch" in problem and "'ctl'" in problem
    assert "float" in problem.lower() and "integral" in problem


def test_unknown_vertex_type_name_suggests_closest():
    g = tiny_graph()
    g.addCodelets([Scale, Bump])
    cs = g.addComputeSet("cs")
    with pytest.raises(GraphError) as info:
        g.addVertex(cs, "Scal")
    msg = str(info.value)
    assert "unknown vertex type 'Scal'" in msg and "did you mean 'Scale'?" in msg


def test_unknown_field_name():
    g = tiny_graph()
    cs = g.addComputeSet("cs")
    v = g.addVertex(cs, Scale)
    with pytest.raises(GraphError) as info:
        v["ot"]
    msg = str(info.value)
    assert "'Scale' has no field 'ot'" in msg and "did you mean 'out'?" in msg
    with pytest.raises(GraphError, match="has no field 'inn'"):
        g.addVertex(cs, Scale, {"inn": mapped(g, FLOAT, [2], "z")})


def test_three_problems_reported_together():
    g = tiny_graph()
    g.addVariable(FLOAT, [3], "lost")  # 1: unmapped
    x, y = mapped(g, FLOAT, [4], "x"), mapped(g, FLOAT, [4], "y")
    cs = g.addComputeSet("cs")
    scale_vertex(g, cs, x, y, estimate=None)  # 2: no estimate
    s = g.addDeviceToHostFIFO("out", FLOAT, 2)
    program = prog.Sequence(prog.Execute(cs), prog.Copy(x, s))  # 3: stream size
    problems = problems_of(g, program)
    assert len(problems) == 3
    joined = "\n".join(problems)
    assert "variable 'lost'" in joined
    assert "declares no getCycleEstimate" in joined
    assert "stream 'out'" in joined


# ------------------------------------------------------------------ engine misuse


def _simple_engine():
    g = tiny_graph()
    t = mapped(g, INT, [4], "t")
    g.createHostRead("t-read", t)
    g.createHostWrite("t-write", t)
    s = g.addHostToDeviceFIFO("feed", INT, 4)
    return Engine(g, [prog.Copy(s, t), prog.Sequence()])


def test_run_before_load():
    e = _simple_engine()
    with pytest.raises(EngineError, match=r"no device loaded.*engine.load"):
        e.run(1)


def test_bad_program_index():
    e = _simple_engine()
    e.load(tiny_device())
    with pytest.raises(EngineError, match=r"program index 2 out of range.*2 program"):
        e.run(2)
    with pytest.raises(EngineError, match=r"program index -1 out of range"):
        e.run(-1)


def test_unknown_handles():
    e = _simple_engine()
    e.load(tiny_device())
    with pytest.raises(EngineError, match=r"readTensor: unknown handle 't-red'.*'t-read'"):
        e.readTensor("t-red")
    with pytest.raises(EngineError, match=r"writeTensor: unknown handle 't-read'.*'t-write'"):
        e.writeTensor("t-read", np.zeros(4, np.int32))
    with pytest.raises(EngineError, match=r"connectStream: unknown handle 'fed'.*'feed'"):
        e.connectStream("fed", np.zeros(4, np.int32))
    with pytest.raises(EngineError, match=r"connectStreamToCallback: unknown handle 'x'"):
        e.connectStreamToCallback("x", print)


def test_unconnected_stream_at_run():
    e = _simple_engine()
    e.load(tiny_device())
    with pytest.raises(PoplarError, match=re.escape("stream 'feed' is not connected")):
        e.run(0)
    e.run(1)  # the program without the stream still runs


def test_load_on_device_with_fewer_tiles():
    g = Graph(IPUModel("ipu2").createDevice().getTarget())
    mapped(g, FLOAT, [2], "t", tile=1000)
    e = Engine(g, prog.Sequence())
    with pytest.raises(EngineError, match=r"built for 1472 tiles but the device has 8"):
        e.load(tiny_device())


def test_load_on_a_device_of_another_target_is_refused():
    # A graph built for tiny ran on an mk2 device (timed as mk2's 1472 tiles) without a
    # word: only a device with fewer tiles was refused.
    g = Graph(IPUModel("tiny").createDevice().getTarget())
    mapped(g, FLOAT, [2], "t", tile=1)
    e = Engine(g, prog.Sequence())
    with pytest.raises(EngineError, match=r"built for 1 x \S+ IPU\(s\) of 8 tiles.* device is "):
        e.load(IPUModel("mk2").createDevice())
    e.load(IPUModel("tiny").createDevice())  # the graph's own target loads


def test_failed_addVertex_leaves_no_half_built_vertex():
    class Half(Vertex):
        a = Input(Vector(FLOAT))
        b = Output(FLOAT)

        @staticmethod
        def compute(a, b):
            b[0] = a[0]

    g = Graph(tiny_device())
    x = g.addVariable(FLOAT, [2], "x")
    cs = g.addComputeSet("cs")
    with pytest.raises(GraphError, match="no field 'c'"):
        g.addVertex(cs, Half, {"a": x, "c": x[0]})
    assert cs.vertices == [] and g.getNumVertices() == 0


def test_shape_must_be_whole_numbers():
    g = Graph(tiny_device())
    with pytest.raises(GraphError, match=r"tensor 'v': shape \[2.5\] must be a list of ints"):
        g.addVariable(FLOAT, [2.5], "v")
