"""Progress of library work outside a command (a user's own script): nothing for quick
work, one line for work that lasts, on a terminal or when ``IPUSIM_PROGRESS=1`` asks,
never inside a command's own progress; a graph's construction shown while it grows."""

from __future__ import annotations

import io
import time

import numpy as np
import pytest

from ipusim import progress
from ipusim.progress import Activity, Progress, activity, activity_wanted
from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog


class FakeTerminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def fast(monkeypatch):
    """Lines after 0.05 s, refreshed every 0.02 s, a graph idle after 0.2 s."""
    monkeypatch.setattr(progress, "ACTIVITY_DELAY", 0.05)
    monkeypatch.setattr(progress, "REFRESH_SECONDS", 0.02)
    monkeypatch.setattr(progress, "IDLE_SECONDS", 0.2)


def test_the_environment_variable_overrides_the_terminal_check(monkeypatch):
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    assert activity_wanted(FakeTerminal()) is True
    assert activity_wanted(io.StringIO()) is False
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    assert activity_wanted(io.StringIO()) is True
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")
    assert activity_wanted(FakeTerminal()) is False


def test_quick_work_prints_nothing(monkeypatch):
    monkeypatch.setattr(progress, "ACTIVITY_DELAY", 5.0)
    out = FakeTerminal()
    with Activity("Graph compilation", stream=out):
        pass
    assert out.getvalue() == ""


def test_lasting_work_shows_its_label_status_and_time_and_ends_the_line(fast):
    out = FakeTerminal()
    with Activity("Graph compilation", status=lambda: "7 steps", stream=out):
        time.sleep(0.2)
    text = out.getvalue()
    assert text.startswith("\rGraph compilation: 7 steps, ")
    assert text.endswith("\x1b[K\n")  # the line stays, ended, with the final time
    final = text.rstrip("\n").rsplit("\r", 1)[-1]
    seconds = float(final.split(", ")[-1].split(" s")[0])
    assert 0.2 <= seconds < 5.0


def test_a_log_gets_two_lines_not_a_redraw_per_refresh(fast):
    out = io.StringIO()  # not a terminal: shown only when asked (IPUSIM_PROGRESS=1)
    with Activity("Engine.run(0)", stream=out):
        time.sleep(0.2)
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and all(x.startswith("Engine.run(0): ") for x in lines)
    assert "\r" not in out.getvalue()


def test_nested_work_is_shown_as_a_stage_of_the_outer_line(fast, monkeypatch, capsys):
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    seen = []
    with activity("TrainingSession.prepareDevice"):
        with activity("Graph compilation"):
            time.sleep(0.15)
            seen.append(progress._ACTIVITY.get().stage)
        time.sleep(0.1)
    err = capsys.readouterr().err
    assert seen == ["Graph compilation"]
    assert err.splitlines()[0].startswith("TrainingSession.prepareDevice: Graph compilation, ")
    assert err.count("TrainingSession.prepareDevice") == 2  # one line shown, one ended
    assert "\nGraph compilation" not in err  # no second line of its own


def test_nothing_inside_a_commands_progress_or_when_switched_off(fast, monkeypatch, capsys):
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    with Progress("run", enabled=False), activity("Graph compilation"):
        time.sleep(0.15)
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")
    with activity("Graph compilation"):
        time.sleep(0.15)
    assert capsys.readouterr().err == ""


def _add_program(graph: Graph, n: int) -> prog.Program:
    """``n`` variables, each doubled in place by its own vertex on its own tile."""
    from poplar_api import popops

    seq = prog.Sequence()
    for i in range(n):
        v = graph.addVariable(FLOAT, [4], f"v{i}")
        graph.setTileMapping(v, i % graph.getTarget().getNumTiles())
        popops.mulInPlace(graph, v, 2.0, seq, f"double{i}")
    return seq


def test_engine_compile_and_run_show_their_lines_when_asked(fast, monkeypatch, capsys):
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    monkeypatch.setattr(progress, "ACTIVITY_DELAY", 0.0)
    device = IPUModel("ipu2").createDevice()
    graph = Graph(device.getTarget())
    engine = Engine(graph, [_add_program(graph, 3)])
    engine.load(device)
    engine.run(0)
    err = capsys.readouterr().err
    assert "Graph compilation: " in err
    assert "Engine.run(0): " in err


def test_a_growing_graph_shows_its_vertices_then_ends_the_line(fast, monkeypatch, capsys):
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    deadline = time.monotonic() + 0.4
    while time.monotonic() < deadline:  # construction that takes a while
        _add_program(graph, 2)
        time.sleep(0.01)
    n = graph.getNumVertices()
    time.sleep(0.6)  # idle: the line is ended
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.startswith("Graph construction: ")]
    assert lines, err
    counts = [int(x.split(": ")[1].split(" vertices")[0].replace(",", "")) for x in lines]
    assert counts == sorted(counts) and 0 < counts[-1] <= n
    assert np.all(np.diff(counts) >= 0)


def test_a_graph_that_is_gone_leaves_no_line(fast, monkeypatch, capsys):
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    _add_program(graph, 2)
    del graph
    import gc

    gc.collect()
    capsys.readouterr()
    time.sleep(0.3)
    assert "Graph construction" not in capsys.readouterr().err
