"""Lowering paths for blocks of consecutive element ids agree with the general ones.

Copies whose element ids form one ascending block are lowered as block copies, and the
constants such a block overlaps are found from its bounds; copies of scattered ids
take the general path. Both must give the same values and the same errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.errors import PoplarError
from poplar_api.tensor import concat


def _graph() -> Graph:
    return Graph(IPUModel("ipu2").createDevice().getTarget())


@pytest.mark.parametrize("scattered", [False, True])
def test_stream_copy_into_a_constant_is_refused(scattered: bool) -> None:
    graph = _graph()
    v = graph.addVariable(FLOAT, [4], "v")
    c = graph.addConstant(FLOAT, [2], 1.0, "c")  # ids follow v's: [v, c] is one block
    w = graph.addVariable(FLOAT, [3], "w")
    for t in (v, c, w):
        graph.setTileMapping(t, 0)
    # one block of ids covering v and c, or the same elements out of order
    dst = concat([c, v]) if scattered else concat([v, c])
    stream = graph.addHostToDeviceFIFO("in", FLOAT, 6)
    with pytest.raises(PoplarError, match="constant 'c'"):
        Engine(graph, prog.Copy(stream, dst))
    ok = graph.addHostToDeviceFIFO("ok", FLOAT, 7)
    Engine(graph, prog.Copy(ok, concat([v, w])))  # v and w only: no constant


@pytest.mark.parametrize("reverse", [False, True])
def test_copies_of_blocks_and_scattered_ids_move_the_same_values(reverse: bool) -> None:
    graph = _graph()
    n = 300
    src = graph.addVariable(FLOAT, [n], "src")
    dst = graph.addVariable(FLOAT, [n], "dst")
    graph.setTileMapping(src, 0)
    for i in range(n):  # dst spread over tiles: the copy is an exchange
        graph.setTileMapping(dst[i], i % 7 + 1)
    s = src.reverse(0) if reverse else src
    inp = graph.addHostToDeviceFIFO("in", FLOAT, n)
    out = graph.addDeviceToHostFIFO("out", FLOAT, n)
    engine = Engine(
        graph, prog.Sequence([prog.Copy(inp, src), prog.Copy(s, dst), prog.Copy(dst, out)])
    )
    engine.load(IPUModel("ipu2").createDevice())
    values = np.arange(n, dtype=np.float32) * 0.5
    result = np.zeros(n, np.float32)
    engine.connectStream("in", values)
    engine.connectStream("out", result)
    engine.run(0)
    np.testing.assert_array_equal(result, values[::-1] if reverse else values)


def test_vertex_runs_finds_per_vertex_runs() -> None:
    from poplar_api.lowering.runs import vertex_runs

    ids = np.array([4, 5, 6, 9, 0, 1], np.int64)
    begin, end = vertex_runs(ids, np.array([0, 3, 3, 4, 6]))  # a vertex without elements
    assert begin.tolist() == [4, 0, 9, 0] and end.tolist() == [7, 0, 10, 2]
    assert vertex_runs(ids, np.array([0, 4, 6])) is None  # 4, 5, 6, 9 is not one run


class RowSum(Vertex):
    """``out = sum(in) + 10 * in[0]``."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        s = np.float32(0)
        for i in range(in_.shape[0]):
            s += in_[i]
        out[0] = s + np.float32(10) * in_[0]


@pytest.mark.parametrize("checks", ["true", "false"])
@pytest.mark.parametrize("transpose", [False, True])
def test_fields_read_in_place_or_gathered_give_numpy(checks: str, transpose: bool) -> None:
    """Rows of a matrix (a run of ids per vertex: read where they lie when checks are
    on) and columns (gathered) give numpy's sums, with checks on and off."""
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets([RowSum])
    m = graph.addVariable(FLOAT, [6, 5], "m")
    out = graph.addVariable(FLOAT, [6 if not transpose else 5], "out")
    graph.setTileMapping(m, 0)
    graph.setTileMapping(out, 1)
    src = m.transpose() if transpose else m
    cs = graph.addComputeSet("sums")
    for r in range(src.shape()[0]):
        v = graph.addVertex(cs, "RowSum", {"in": src[r], "out": out[r]})
        graph.setTileMapping(v, r % 4)
        graph.setPerfEstimate(v, 20)
    graph.createHostWrite("m", m)
    graph.createHostRead("out", out)
    engine = Engine(graph, prog.Execute(cs), {"debug.checkVertexBounds": checks})
    engine.load(device)
    values = np.arange(30, dtype=np.float32).reshape(6, 5) * 0.5
    engine.writeTensor("m", values)
    engine.run(0)
    rows = values.T if transpose else values
    np.testing.assert_allclose(engine.readTensor("out"), rows.sum(axis=1) + 10 * rows[:, 0])


class WritesItsInput(Vertex):
    """Writes an Input field: refused when compiled, whether the field is read where
    it lies or gathered."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        in_[0] = np.float32(1)
        out[0] = in_[0]


def test_an_input_read_in_place_is_still_read_only() -> None:
    from poplar_api.errors import CodeletError

    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets([WritesItsInput])
    x = graph.addVariable(FLOAT, [4], "x")
    y = graph.addVariable(FLOAT, [1], "y")
    graph.setTileMapping(x, 0)
    graph.setTileMapping(y, 0)
    cs = graph.addComputeSet("cs")
    v = graph.addVertex(cs, "WritesItsInput", {"in": x, "out": y[0]})  # one run of ids
    graph.setTileMapping(v, 0)
    graph.setPerfEstimate(v, 5)
    engine = Engine(graph, prog.Execute(cs))
    engine.load(device)
    with pytest.raises(CodeletError, match="Input fields are read-only"):
        engine.run(0)


def test_loading_writes_the_image_without_changing_it():
    from poplar_api.lowering.context import Storage

    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    x = graph.addConstant(FLOAT, [5], [1.5, -2.0, 0.0, 3.25, 7.0], "x")
    graph.setTileMapping(x, 1)
    storage = Storage(graph._state)
    before = {size: arr.copy() for size, arr in storage.full.items()}
    storage.load()
    assert before.keys() == storage.full.keys()
    for size, arr in storage.full.items():
        np.testing.assert_array_equal(arr, before[size])
    assert storage.read(FLOAT, x.flat_index()).tolist() == [1.5, -2.0, 0.0, 3.25, 7.0]
