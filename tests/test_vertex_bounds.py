"""Vertex code is bounds-checked: an index past a field is a clear VertexError.

The error names the vertex (type, id, tile), the field, the index and the field's
size; with the ipusim engine option ``debug.checkVertexBounds=false`` the checks are
off (the kernel then reads whatever follows in the packed batch, without crashing
for reads inside it).
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import (
    FieldBatch,
    Input,
    MultiVertex,
    Output,
    Vector,
    VectorList,
    Vertex,
    VertexError,
    execute,
    vertex_bounds_checks,
    vertex_type,
)
from poplar_api.errors import CodeletError


class OverRead(Vertex):
    """Sums one element too many."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        s = np.float32(0.0)
        for i in range(in_.shape[0] + 1):
            s += in_[i]
        out[0] = s


class OverWrite(Vertex):
    """Writes its scalar output at index 1."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        out[1] = in_[0]


class ListOverRead(Vertex):
    """Reads vector 2 of a list of two."""

    in_ = Input(VectorList(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        out[0] = in_[2][0]


class MultiOverWrite(MultiVertex):
    """Worker w writes out[w]; the field has fewer elements than workers."""

    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(workerId, out):
        out[workerId] = workerId


def build(vertex_cls, sizes=(4, 4), options=None):
    """Two vertices of ``vertex_cls`` on tiles 5 and 6, reading ``x0`` and ``x1``."""
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    cs = graph.addComputeSet("cs")
    vids = []
    for k, n in enumerate(sizes):
        x = graph.addVariable(FLOAT, [n], f"x{k}")
        y = graph.addVariable(FLOAT, [1], f"y{k}")
        graph.setTileMapping(x, 5 + k)
        graph.setTileMapping(y, 5 + k)
        v = graph.addVertex(cs, vertex_cls, {"in": x, "out": y[0]})
        graph.setTileMapping(v, 5 + k)
        graph.setPerfEstimate(v, 10)
        graph.createHostWrite(f"x{k}", x)
        graph.createHostRead(f"y{k}", y)
        vids.append(v.id)
    engine = Engine(graph, prog.Execute(cs), options or {})
    engine.load(device)
    for k, n in enumerate(sizes):
        engine.writeTensor(f"x{k}", np.arange(n, dtype=np.float32) + 10 * k)
    return engine, vids


def test_reading_past_a_field_names_vertex_field_index_and_size():
    engine, vids = build(OverRead)
    with pytest.raises(VertexError) as info:
        engine.run(0)
    err = info.value
    msg = str(err)
    assert f"vertex {vids[0]} (type 'OverRead', tile 5)" in msg
    assert "read field 'in' at index 4" in msg
    assert "has 4 element(s)" in msg and "debug.checkVertexBounds" in msg
    assert (err.vertex, err.field, err.index, err.size) == (vids[0], "in", 4, 4)
    assert isinstance(err, IndexError) and isinstance(err, CodeletError)


def test_writing_past_a_scalar_output():
    engine, vids = build(OverWrite)
    with pytest.raises(VertexError, match=r"wrote field 'out' at index 1.*has 1 element") as info:
        engine.run(0)
    assert info.value.vertex == vids[0]


def test_the_second_vertex_is_named_when_it_is_the_one_at_fault():
    class ReadFour(Vertex):
        in_ = Input(Vector(FLOAT))
        out = Output(FLOAT)

        @staticmethod
        def compute(in_, out):
            out[0] = in_[3]

    engine, vids = build(ReadFour, sizes=(4, 2))
    with pytest.raises(VertexError, match=r"tile 6\).*index 3.*has 2 element") as info:
        engine.run(0)
    assert info.value.vertex == vids[1]


def test_vector_list_and_multivertex_errors():
    batches = {
        "in": FieldBatch.pack_lists([[np.ones(2), np.ones(3)]], np.float32),
        "out": FieldBatch.pack([0.0], np.float32),
    }
    with pytest.raises(VertexError, match=r"read field 'in' at index 2.*has 2 element"):
        execute(vertex_type(ListOverRead), batches, 1)
    batches = {"out": FieldBatch.pack([np.zeros(4)], np.float32)}
    with pytest.raises(VertexError, match=r"worker 4: compute wrote field 'out' at index 4"):
        execute(vertex_type(MultiOverWrite), batches, 1, num_workers=6)


def test_checks_off_reads_the_neighbour_without_crashing():
    # vertex 0 over-reads by one: index 4 is the first element of the data that follows
    data = np.concatenate([np.arange(4), np.arange(4) + 10]).astype(np.float32)
    one = {
        "in": FieldBatch(data, np.array([0, 4], np.int64)),
        "out": FieldBatch(np.zeros(1, np.float32), np.array([0, 1], np.int64)),
    }
    with vertex_bounds_checks(False):
        execute(vertex_type(OverRead), one, 1)
    assert one["out"].data[0] == 0 + 1 + 2 + 3 + 10  # its 4 elements plus the neighbour's
    with pytest.raises(VertexError, match="index 4"):
        execute(vertex_type(OverRead), one, 1)  # checks are on by default


class ReadIndexThree(Vertex):
    """``out = in[3]``: out of bounds for a field of fewer than 4 elements."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        out[0] = in_[3]


def test_engine_option_turns_checks_off():
    # x0 = [0, 1], x1 = [10, 11, 12, 13]: unchecked, vertex 0's in[3] is x1[1] (packed after it)
    engine, _ = build(ReadIndexThree, sizes=(2, 4), options={"debug.checkVertexBounds": "false"})
    engine.run(0)
    assert engine.readTensor("y0")[0] == 11.0
    assert engine.readTensor("y1")[0] == 13.0
    checked, vids = build(ReadIndexThree, sizes=(2, 4))
    with pytest.raises(VertexError, match=r"tile 5\).*index 3.*has 2 element") as info:
        checked.run(0)
    assert info.value.vertex == vids[0]
