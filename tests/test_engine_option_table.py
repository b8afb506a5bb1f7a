"""The Engine option table of docs/poplar_api.md ("Every option, with its status") is
the truth: every option it lists is accepted by an Engine, its status is what the
engine does with it, and no accepted option is missing from it.

The values used here are read from the table's "Values (default)" column, not from
``ENGINE_OPTIONS``; inert options are checked to change nothing in a run.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from codelets_common import Scale, tiny_graph, variables, vertex_on

from poplar_api import FLOAT, Engine, IPUModel
from poplar_api import program as prog
from poplar_api.engine_options import ENGINE_OPTIONS
from poplar_api.errors import EngineError

DOC = Path(__file__).resolve().parents[1] / "docs" / "poplar_api.md"
ROW = re.compile(r"^\| `([A-Za-z.0-9]+)` \| ([^|]+) \| ([a-z ]+) \|")


def table() -> dict[str, tuple[str, str]]:
    """Option name -> (values column, status) from the documented table."""
    text = DOC.read_text()
    start = text.index("### Every option, with its status")
    end = text.index("### ", start + 10)
    rows = {}
    for line in text[start:end].splitlines():
        m = ROW.match(line)
        if m:
            rows[m.group(1)] = (m.group(2).strip(), m.group(3).strip())
    return rows


def default_of(values: str) -> str | None:
    m = re.search(r"\(`([^`]*)`\)$", values)
    return m.group(1) if m else None


def other_value(values: str) -> str:
    """A value of the option's kind that is not its default, from the Values column."""
    default = default_of(values)
    if values.startswith("bool"):
        return "false" if default == "true" else "true"
    if values.startswith("integer"):
        return "0x20"  # hexadecimal, as Poplar's option parser accepts
    if values.startswith("decimal"):
        return "12.5"
    if values.startswith("regular expression"):
        return "stage.*"
    if values.startswith("string"):
        return "x"
    words = re.findall(r"`([^`]+)`", values.split("(")[0])
    return next(w for w in words if w != default)


def build():
    graph = tiny_graph()
    x, y = variables(graph, "xy", tile=1, n=8)
    cs = graph.addComputeSet("twice")
    vertex_on(graph, cs, Scale, {"in": x, "out": y}, tile=1, cycles=40)
    inq = graph.addHostToDeviceFIFO("in", FLOAT, 8)
    outq = graph.addDeviceToHostFIFO("out", FLOAT, 8)
    return graph, [prog.Sequence([prog.Copy(inq, x), prog.Execute(cs), prog.Copy(y, outq)])]


def run(options):
    graph, programs = build()
    engine = Engine(graph, programs, options)
    data = np.arange(8, dtype=np.float32)
    got = np.zeros(8, np.float32)
    engine.connectStream("in", data)
    engine.connectStream("out", got)
    engine.load(IPUModel("tiny").createDevice())
    engine.run(0)
    return got, engine.getExecutionProfile()["simulation"]["cycles"]


def test_every_accepted_option_is_in_the_table_with_its_status():
    rows = table()
    assert set(rows) == set(ENGINE_OPTIONS)
    for name, (_, status) in rows.items():
        spec = ENGINE_OPTIONS[name]
        if status == "inert":
            assert not spec.honoured, name
        else:
            assert status in ("honoured", "ipusim extension"), (name, status)
            assert spec.honoured, name


def test_the_options_the_issue_names_are_listed():
    rows = table()
    for name in (
        "debug.nanOverflowException",
        "opt.enableSwSyncs",
        "debug.checkForSpuriousCycles",
        "debug.supervisorStackSizeInBytes",
        "debug.runtimeVerify",
    ):
        assert name in rows


def test_every_listed_option_is_accepted_with_its_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = {}
    for name, (values, _) in table().items():
        default = default_of(values)
        options[name] = default if default is not None else other_value(values)
    got, _ = run(options)
    np.testing.assert_array_equal(got, 2 * np.arange(8, dtype=np.float32))


def test_inert_options_change_nothing_in_a_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inert = {n: other_value(v) for n, (v, status) in table().items() if status == "inert"}
    assert len(inert) > 40
    base_values, base_cycles = run({})
    values, cycles = run(inert)
    np.testing.assert_array_equal(values, base_values)
    assert cycles == base_cycles
    assert list(tmp_path.iterdir()) == []  # no inert option wrote a file


def test_hexadecimal_integers_are_read_as_poplar_does():
    from poplar_api.engine_options import check_engine_options

    check_engine_options({"opt.maxCopyMergeSize": "0x100000", "prng.seed": "0XfF"})
    with pytest.raises(EngineError, match=r"opt\.maxCopyMergeSize"):
        check_engine_options({"opt.maxCopyMergeSize": "0xZZ"})
