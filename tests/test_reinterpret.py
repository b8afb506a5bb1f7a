"""``Tensor.reinterpret``: views of the same device memory as another element type.

Every value is checked bit for bit against numpy's ``ndarray.view`` of the data that
was written; memory and exchange totals are counted by hand. Graphs run on the 8-tile
``tiny`` preset.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import loaded, mapped, tiny_device, tiny_graph, vertex_on

from ipusim import ir
from poplar_api import (
    BOOL,
    CHAR,
    FLOAT,
    HALF,
    INT,
    SHORT,
    UNSIGNED_CHAR,
    UNSIGNED_INT,
    UNSIGNED_SHORT,
    Device,
    Engine,
)
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.errors import GraphValidationError, TypeMismatchError

SAMPLES = {
    FLOAT: np.array([1.5, -0.0, np.inf, 3.0e-39, -2.75], np.float32),
    HALF: np.array([1.5, -0.0, np.inf, 6.0e-8, -2.75], np.float16),
    INT: np.array([0, -1, 2**31 - 1, -(2**31), 1065353216], np.int32),
    UNSIGNED_INT: np.array([0, 1, 2**32 - 1, 2**31, 0x7FC00000], np.uint32),
    SHORT: np.array([0, -1, 32767, -32768, 15360], np.int16),
    UNSIGNED_SHORT: np.array([0, 1, 65535, 32768, 0x7C00], np.uint16),
    CHAR: np.array([0, -1, 127, -128, 1], np.int8),
    UNSIGNED_CHAR: np.array([0, 1, 255, 128, 7], np.uint8),
}
PAIRS = [
    (a, b)
    for group in ((FLOAT, INT, UNSIGNED_INT), (HALF, SHORT, UNSIGNED_SHORT), (CHAR, UNSIGNED_CHAR))
    for a in group
    for b in group
    if a is not b
]


class IntToUnsigned(Vertex):
    """``out[i] = in[i] ^ 0x80000000`` on the bits (flips the sign bit of a float)."""

    in_ = Input(Vector(INT))
    out = Output(Vector(UNSIGNED_INT))

    @staticmethod
    def compute(in_, out):
        for i in range(in_.shape[0]):
            out[i] = np.uint32(in_[i]) ^ np.uint32(0x80000000)
        return True


class FloatSum(Vertex):
    """``out = sum(a) + sum(b)`` with ``b`` an INT field (its values, not its bits)."""

    a = Input(Vector(FLOAT))
    b = Input(Vector(INT))
    out = Output(FLOAT)

    @staticmethod
    def compute(a, b, out):
        s = 0.0
        for i in range(a.shape[0]):
            s += a[i]
        for i in range(b.shape[0]):
            s += b[i]
        out[0] = s
        return True


# ------------------------------------------------------------------ host access


def viewed_variable(type_, view_type, size: int, tile: int):
    """A variable ``x`` of ``size`` elements of ``type_`` on ``tile`` and an engine with
    host handles on it and on its view as ``view_type``: ``x`` writes and ``x-r`` reads
    the variable, ``view-w`` writes and ``view`` reads the view."""
    g = tiny_graph()
    x = g.addVariable(type_, [size], "x")
    g.setTileMapping(x, tile)
    view = x.reinterpret(view_type)
    g.createHostWrite("x", x)
    g.createHostRead("x-r", x)
    g.createHostWrite("view-w", view)
    g.createHostRead("view", view)
    return x, loaded(g, prog.Sequence())


@pytest.mark.parametrize(("src", "dst"), PAIRS, ids=lambda t: t.constant)
def test_write_one_type_read_the_other_bit_exact(src, dst):
    _, e = viewed_variable(src, dst, 5, tile=2)
    e.writeTensor("x", SAMPLES[src])
    got = e.readTensor("view")
    assert got.dtype == dst.numpy
    np.testing.assert_array_equal(got.view(np.uint8), SAMPLES[src].view(np.uint8))
    e.writeTensor("view-w", SAMPLES[dst])  # and back: write the view, read the source
    np.testing.assert_array_equal(
        e.readTensor("x-r").view(np.uint8), SAMPLES[dst].view(src.numpy).view(np.uint8)
    )


def test_bool_views_of_bytes():
    b, e = viewed_variable(BOOL, UNSIGNED_CHAR, 4, tile=0)
    e.writeTensor("view-w", np.array([0, 1, 2, 255], np.uint8))
    # any non-zero byte is true
    assert e.readTensor("x-r").tolist() == [False, True, True, True]
    e.writeTensor("x", np.array([True, False, True, False]))
    assert e.readTensor("view").tolist() == [1, 0, 1, 0]
    assert b.reinterpret(CHAR).reinterpret(BOOL) == b


def test_initial_values_and_constants_through_a_view():
    g = tiny_graph()
    x = mapped(g, FLOAT, [3], "x", tile=1)
    g.setInitialValue(x.reinterpret(UNSIGNED_INT), [0x3F800000, 0x40000000, 0xBF800000])
    k = g.addConstant(INT, [2], [1065353216, -1082130432], "k")
    g.setTileMapping(k, 1)
    g.createHostRead("x", x)
    g.createHostRead("k", k.reinterpret(FLOAT))
    e = loaded(g, prog.Sequence())
    assert e.readTensor("x").tolist() == [1.0, 2.0, -1.0]
    assert e.readTensor("k").tolist() == [1.0, -1.0]


def test_views_of_views_keep_shape_mapping_and_elements():
    g = tiny_graph()
    x = g.addVariable(HALF, [2, 3], "x")
    g.setTileMapping(x, [[(0, 3)], [(3, 6)]])
    v = x.transpose().reinterpret(SHORT)[1:]
    assert v.shape() == [2, 2] and v.elementType() is SHORT
    assert v.name == "x.transpose().reinterpret(short)[1:]"
    assert v.intersectsWith(x) and x.intersectsWith(v)
    assert x.reinterpret(SHORT).reinterpret(HALF) == x
    assert x.reinterpret(HALF) is x
    assert g.getTileMapping(x.reinterpret(UNSIGNED_SHORT)) == g.getTileMapping(x)
    other = g.addVariable(SHORT, [6], "other")
    assert not other.intersectsWith(x)


# --------------------------------------------------------------- device access


def test_vertex_reads_and_writes_through_views():
    g = tiny_graph()
    x = mapped(g, FLOAT, [4], "x", tile=0)
    y = mapped(g, FLOAT, [4], "y", tile=3)
    cs = g.addComputeSet("flip")
    vertex_on(
        g,
        cs,
        IntToUnsigned,
        {"in": x.reinterpret(INT), "out": y.reinterpret(UNSIGNED_INT)},
        tile=3,
        cycles=10,
    )
    g.createHostWrite("x", x)
    g.createHostRead("y", y)
    values = np.array([1.0, -2.5, 0.0, np.inf], np.float32)
    for device in (tiny_device(), Device.createCPUDevice()):
        e = loaded(g, prog.Execute(cs), device)
        e.writeTensor("x", values)
        e.run(0)
        np.testing.assert_array_equal(e.readTensor("y").view(np.uint32), (-values).view(np.uint32))


def test_element_read_through_two_views_is_received_once():
    g = tiny_graph()
    x = mapped(g, FLOAT, [8], "x", tile=0)
    out = mapped(g, FLOAT, [1], "out", tile=5)
    cs = g.addComputeSet("sum")
    vertex_on(g, cs, FloatSum, {"a": x, "b": x.reinterpret(INT), "out": out}, tile=5, cycles=10)
    g.createHostWrite("x", x)
    g.createHostRead("out", out)
    e = loaded(g, prog.Execute(cs))
    ints = np.array([0, 1, 2, 3, 4, 5, 6, 7], np.int32)
    e.writeTensor("x", ints.view(np.float32))
    e.run(0)
    # the FLOAT field sees denormals (about 4e-44 in all), the INT field 0 + 1 + ... + 7
    assert e.readTensor("out")[0] == pytest.approx(28.0, abs=1e-30)
    exchanges = [s for s in ir.iter_steps(e.ir_program) if isinstance(s, ir.Exchange)]
    assert [int(s.bytes_received.sum()) for s in exchanges] == [8 * 4]  # not 2 x 32


def test_two_vertices_writing_one_element_through_views_are_refused():
    g = tiny_graph()
    x = mapped(g, UNSIGNED_INT, [4], "x", tile=0)
    src = mapped(g, INT, [4], "src", tile=0)
    cs = g.addComputeSet("clash")
    for out in (x, x.reinterpret(UNSIGNED_INT)[0:4]):
        vertex_on(g, cs, IntToUnsigned, {"in": src, "out": out}, tile=0, cycles=1)
    with pytest.raises(GraphValidationError, match=r"both write tensor 'x' element 0"):
        Engine(g, prog.Execute(cs))
    g2 = tiny_graph()
    y = mapped(g2, FLOAT, [4], "y", tile=0)
    s2 = mapped(g2, INT, [4], "s2", tile=0)
    cs2 = g2.addComputeSet("clash2")
    for out in (y.reinterpret(UNSIGNED_INT), y.reinterpret(INT).reinterpret(UNSIGNED_INT)):
        vertex_on(g2, cs2, IntToUnsigned, {"in": s2, "out": out}, tile=0, cycles=1)
    with pytest.raises(GraphValidationError, match=r"both write tensor 'y'"):
        Engine(g2, prog.Execute(cs2))


def test_copies_to_and_from_views():
    g = tiny_graph()
    x = g.addVariable(FLOAT, [4], "x")
    bits = g.addVariable(UNSIGNED_INT, [4], "bits")
    back = g.addVariable(FLOAT, [4], "back")
    g.setTileMapping(x, 0)
    g.setTileMapping(bits, 6)  # exchanged
    g.setTileMapping(back, 0)  # on-tile
    s = g.addHostToDeviceFIFO("in", INT, 4)
    g.createHostRead("bits", bits)
    g.createHostRead("back", back)
    g.createHostRead("x", x)
    e = loaded(
        g,
        prog.Sequence(
            prog.Copy(s, x.reinterpret(INT)),
            prog.Copy(x.reinterpret(UNSIGNED_INT), bits),
            prog.Copy(bits, back.reinterpret(UNSIGNED_INT)),
        ),
    )
    data = np.array([0x3F800000, 0x40490FDB, -1, 0], np.int32)
    e.connectStream("in", data)
    e.run(0)
    np.testing.assert_array_equal(e.readTensor("x").view(np.int32), data)
    np.testing.assert_array_equal(e.readTensor("bits"), data.view(np.uint32))
    np.testing.assert_array_equal(e.readTensor("back").view(np.int32), data)
    assert e.readTensor("x")[:2].tolist() == [1.0, pytest.approx(np.pi)]


def test_copy_between_views_of_one_variable_is_checked_for_overlap():
    g = tiny_graph()
    x = mapped(g, FLOAT, [4], "x", tile=0)
    xi = x.reinterpret(INT)
    with pytest.raises(GraphValidationError, match=r"overlap \(1 of 2 element"):
        Engine(g, prog.Copy(xi[0:2], xi[1:3]))
    with pytest.raises(GraphValidationError, match=r"element types differ \(source int, dest"):
        Engine(g, prog.Copy(xi[0:2], x[2:4]))
    Engine(g, prog.Copy(xi[0:2], x[2:4].reinterpret(INT)))  # disjoint: fine


def test_memory_is_counted_once_for_a_variable_and_its_views():
    def build(use_view: bool) -> Engine:
        g = tiny_graph()
        x = mapped(g, FLOAT, [16], "x", 1)
        y = mapped(g, UNSIGNED_INT, [16], "y", 1)
        cs = g.addComputeSet("flip")
        source = x.reinterpret(INT) if use_view else g.addVariable(INT, [16], "z")
        if not use_view:
            g.setTileMapping(source, 1)
        vertex_on(g, cs, IntToUnsigned, {"in": source, "out": y}, tile=1, cycles=5)
        g.createHostWrite("x", x)
        return Engine(g, prog.Execute(cs))

    with_view, separate = build(True), build(False)
    assert with_view.memory.by_category["variable"][1] == 2 * 16 * 4  # x and y
    assert separate.memory.by_category["variable"][1] == 3 * 16 * 4  # x, y and z
    names = [p.block.name for p in with_view.memory.placements if p.block.category == "variable"]
    assert sorted(names) == ["x", "y"]


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("src", "dst", "sizes"),
    [(FLOAT, HALF, "4 byte.*2 byte"), (CHAR, SHORT, "1 byte.*2 byte"), (BOOL, INT, "1 byte.*4")],
)
def test_different_sizes_are_refused_naming_both_types(src, dst, sizes):
    g = tiny_graph()
    x = g.addVariable(src, [2], "x")
    with pytest.raises(TypeMismatchError, match=rf"tensor 'x'.*reinterpret {src.name} \({sizes}"):
        x.reinterpret(dst)
    with pytest.raises(TypeMismatchError, match=rf"as {dst.name}.*same size; hint:"):
        x.reinterpret(dst)


def test_non_type_argument_is_refused():
    g = tiny_graph()
    x = g.addVariable(FLOAT, [2], "x")
    with pytest.raises(TypeMismatchError, match=r"reinterpret needs an element type.*str 'int'"):
        x.reinterpret("int")


def test_copy_between_scattered_views_counts_the_shared_elements():
    """Scattered (non-block) source and destination ids: the overlap is the number of
    distinct elements in both, and disjoint scattered views copy."""
    g = tiny_graph()
    x = mapped(g, FLOAT, [4, 4], "x", tile=0)
    src = x.dimShuffle([1, 0])[0:2]  # column-major: elements 0,4,8,12 and 1,5,9,13
    dst = x[1:3]  # elements 4..11
    shared = np.intersect1d(src.flatten().index, dst.flatten().index).size
    assert shared == 4
    with pytest.raises(GraphValidationError, match=rf"overlap \({shared} of 8 element"):
        Engine(g, prog.Copy(src, dst))
    Engine(g, prog.Copy(x.dimShuffle([1, 0])[0:1, 0:2], x[3:4, 2:4]))  # disjoint: fine
