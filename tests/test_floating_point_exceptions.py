"""Engine option ``debug.floatingPointExceptions``: a vertex that writes NaN or an
infinity into a FLOAT or HALF field stops the run with a FloatingPointException naming
the compute set, vertex, tile and field; off (the default) the values are stored."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.errors import FloatingPointException


class Gap(Vertex):
    """``out[i] = a[i] * b[i] - a[i] * b[i]``: 0 for finite products, NaN (inf - inf)
    when the FLOAT product overflows."""

    a = Input(Vector(FLOAT))
    b = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(a, b, out):
        for i in range(out.shape[0]):
            p = a[i] * b[i]
            out[i] = p - p
        return True


class ScaleHalf(Vertex):
    """``out[i] = a[i] * 1000`` into a HALF field (overflows past 65504)."""

    a = Input(Vector(HALF))
    out = Output(Vector(HALF))

    @staticmethod
    def compute(a, out):
        for i in range(out.shape[0]):
            out[i] = a[i] * 1000.0
        return True


def _run(cls, type_, a, b=None, options=None):
    device = IPUModel("tiny").createDevice()
    g = Graph(device.getTarget())
    g.addCodelets(cls)
    cs = g.addComputeSet("gap")
    ins = {"a": g.addConstant(type_, [len(a)], a, "a")}
    if b is not None:
        ins["b"] = g.addConstant(type_, [len(b)], b, "b")
    out = g.addVariable(type_, [len(a)], "out")
    for t in (*ins.values(), out):
        g.setTileMapping(t, 2)
    v = g.addVertex(cs, cls.__name__, {**ins, "out": out})
    g.setTileMapping(v, 2)
    g.setPerfEstimate(v, 10)
    g.createHostRead("out", out)
    engine = Engine(g, prog.Execute(cs), options or {})
    engine.load(device)
    engine.run(0)
    return engine.readTensor("out")


def test_off_by_default_the_nan_is_stored():
    out = _run(Gap, FLOAT, [1.0, 1e30, 1e30], [2.0, 1e30, 1e30])
    assert out[0] == 0.0 and np.isnan(out[1]) and np.isnan(out[2])


@pytest.mark.parametrize("option", ["debug.floatingPointExceptions", "debug.floatPointOpException"])
def test_on_a_nan_stops_the_run_naming_vertex_tile_compute_set_and_field(option):
    """Poplar's option name and ipusim's turn on the same check."""
    with pytest.raises(FloatingPointException) as info:
        _run(Gap, FLOAT, [1.0, 1e30, 1e30], [2.0, 1e30, 1e30], {option: "true"})
    exc = info.value
    assert (exc.compute_set, exc.tile, exc.field) == ("gap", 2, "out")
    assert np.isnan(exc.value)
    assert "compute set 'gap': vertex" in str(exc) and "on tile 2" in str(exc)
    assert "invalid operation" in str(exc) and "2 element(s)" in str(exc)


def test_on_a_half_overflow_stops_the_run():
    with pytest.raises(FloatingPointException, match=r"inf into its half field 'out'"):
        _run(ScaleHalf, HALF, [1.0, 100.0], options={"debug.floatingPointExceptions": "true"})
    out = _run(ScaleHalf, HALF, [1.0, 60.0], options={"debug.floatingPointExceptions": "true"})
    assert out.tolist() == [1000.0, 60000.0]


def test_finite_results_run_as_without_the_option():
    a, b = [1.0, 3.0], [2.0, 4.0]
    plain = _run(Gap, FLOAT, a, b)
    checked = _run(Gap, FLOAT, a, b, {"debug.floatingPointExceptions": "true"})
    assert np.array_equal(plain, checked) and np.array_equal(checked, [0.0, 0.0])


def test_the_option_value_is_checked():
    from poplar_api.errors import EngineError

    with pytest.raises(EngineError, match=r"debug\.floatingPointExceptions"):
        _run(Gap, FLOAT, [1.0], [1.0], {"debug.floatingPointExceptions": "maybe"})
