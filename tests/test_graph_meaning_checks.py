"""Checks of meaning at the Graph, Engine and program entry points: a value of the
wrong kind, out of its type's range or too large for the host is a named error, not
silence or a numpy/attribute error."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import CHAR, FLOAT, HALF, UNSIGNED_SHORT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import EngineError, GraphError, TensorError


def _graph() -> Graph:
    return Graph(IPUModel("tiny").createDevice().getTarget())


@pytest.mark.parametrize(
    ("type_", "values", "bad"),
    [
        (CHAR, [300, 1], "300"),
        (CHAR, [-500, 1], "-500"),
        (UNSIGNED_SHORT, [-1, 2], "-1"),
        (UNSIGNED_SHORT, 70000, "70000"),
        (HALF, [1e6, 0.0], "1e\\+06"),
    ],
)
def test_initial_values_outside_the_types_range_are_refused(type_, values, bad):
    g = _graph()
    t = g.addVariable(type_, [2], "t")
    with pytest.raises(TensorError, match=rf"tensor 't'.*{bad}.*{type_.name}"):
        g.setInitialValue(t, values)


def test_initial_values_at_the_types_bounds_and_infinities_are_kept():
    g = _graph()
    c = g.addVariable(CHAR, [2], "c")
    g.setInitialValue(c, [-128, 127])
    h = g.addVariable(HALF, [2], "h")
    g.setInitialValue(h, [65504.0, np.inf])


def test_strings_as_initial_values_are_refused_naming_the_tensor():
    g = _graph()
    x = g.addVariable(FLOAT, [2], "x")
    with pytest.raises(TensorError, match=r"tensor 'x': initial values must be numbers"):
        g.setInitialValue(x, ["a", "b"])
    with pytest.raises(TensorError, match=r"must be numbers"):
        g.addConstant(FLOAT, [2], ["1", "2"], "k")


def test_a_tensor_too_large_for_the_host_is_a_named_error():
    with pytest.raises(GraphError, match=r"tensor 'big': 1,000,000,000,000 elements"):
        _graph().addVariable(FLOAT, [10**12], "big")


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ("autoReport.all", "must be a mapping"),
        ({"autoReport.directory": None}, "'autoReport.directory': found None"),
    ],
)
def test_engine_options_of_the_wrong_kind_are_refused(options, needle):
    g = _graph()
    with pytest.raises(EngineError, match=needle):
        Engine(g, prog.Sequence(), options)


def test_a_boolean_option_is_written_as_poplar_writes_it():
    g = _graph()
    engine = Engine(g, prog.Sequence(), {"debug.allowOutOfMemory": True})
    assert engine.options["debug.allowOutOfMemory"] == "true"


def test_a_compute_set_where_a_program_is_expected_names_the_fix():
    g = _graph()
    cs = g.addComputeSet("cs")
    with pytest.raises(GraphError, match=r"Sequence: expected a program.*Execute\(cs\)"):
        prog.Sequence(cs)
    with pytest.raises(GraphError, match=r"expected a program"):
        prog.Sequence([prog.Sequence(), cs])
