"""``POPLAR_GRAPH_REPORT_DEST`` (every compiled engine's graph summary to stdout,
stderr or a file) and the summary option ``showOptimizations`` (the graph profile's
``optimizationInfo``)."""

from __future__ import annotations

import io

import pytest
from codelets_common import mapped, tiny_graph

from ipusim.files import FileWriteError
from poplar_api import FLOAT, Engine
from poplar_api import program as prog
from poplar_api.profiling import GRAPH_REPORT_DEST, printProfileSummary
from poplar_api.summary import printGraphSummary


def _engine() -> Engine:
    g = tiny_graph()
    a, b = mapped(g, FLOAT, [8], "a", 0), mapped(g, FLOAT, [8], "b", 3)
    return Engine(g, prog.Sequence([prog.Copy(a, b)]))


def _graph_summary(engine: Engine) -> str:
    out = io.StringIO()
    printGraphSummary(out, engine.getGraphProfile(), {})
    return out.getvalue()


def test_graph_report_goes_to_a_file(tmp_path, monkeypatch):
    dest = tmp_path / "graph.txt"
    monkeypatch.setenv(GRAPH_REPORT_DEST, str(dest))
    engine = _engine()
    text = dest.read_text()
    assert text == _graph_summary(engine)
    assert text.startswith("Target:\n") and "Memory Usage:" in text and "Execution:" not in text


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_graph_report_goes_to_stdout_or_stderr(stream, monkeypatch, capsys):
    monkeypatch.setenv(GRAPH_REPORT_DEST, stream)
    engine = _engine()
    out, err = capsys.readouterr()
    written, other = (out, err) if stream == "stdout" else (err, out)
    assert written == _graph_summary(engine)
    assert other == ""


def test_without_the_variable_nothing_is_written(monkeypatch, capsys):
    monkeypatch.delenv(GRAPH_REPORT_DEST, raising=False)
    _engine()
    assert capsys.readouterr() == ("", "")


def test_an_unwritable_destination_names_the_variable(tmp_path, monkeypatch):
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv(GRAPH_REPORT_DEST, str(tmp_path / "file" / "graph.txt"))
    with pytest.raises(FileWriteError, match=GRAPH_REPORT_DEST):
        _engine()


def test_show_optimizations_prints_the_optimization_info(monkeypatch):
    monkeypatch.delenv(GRAPH_REPORT_DEST, raising=False)
    gp = _engine().getGraphProfile()
    plain, shown = io.StringIO(), io.StringIO()
    printProfileSummary(plain, gp, None, {})
    printProfileSummary(shown, gp, None, {"showOptimizations": "true"})
    assert "Optimizations:" not in plain.getvalue()
    assert "Optimizations:\n  (none: no optimisation pass reported anything)\n" in shown.getvalue()
    # a profile whose compiler reported optimisations (as Poplar's would)
    gp = dict(gp, optimizationInfo={"copiesElided": 12345, "pass": "outlining"})
    out = io.StringIO()
    printGraphSummary(out, gp, {"showOptimizations": "true"})
    section = out.getvalue().split("Optimizations:\n", 1)[1].splitlines()[:2]
    assert section == ["  copiesElided: 12,345", "  pass:         outlining"]
