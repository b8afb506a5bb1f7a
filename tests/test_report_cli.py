"""``ipusim report PROFILE_DIR`` on profile directories written by the tests."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ipusim import ir
from ipusim.cli import main
from ipusim.config import load_config
from ipusim.machine import Machine
from ipusim.report import ReportError, load_execution_steps

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# compute 0-100, sync 100-130, compute 130-200
EXECUTION = {
    "profilerMode": "IPU_MODEL",
    "simulation": {
        "cycles": 200,
        "tileCycles": {"compute": 900, "sync": 240},
        "steps": [
            {"type": "OnTileExecute", "name": "a", "cyclesFrom": 0, "cyclesTo": 100},
            {"type": "Sync", "name": "s", "cyclesFrom": 100, "cyclesTo": 130},
            {"type": "OnTileExecute", "name": "b", "cyclesFrom": 130, "cyclesTo": 200},
        ],
    },
}
SUMMARY = "Target:\n  Number of tiles: 8\nExecution:\n  Total cycles: 200\n"


def write_dir(path, summary=True, execution=EXECUTION, profile=None):
    path.mkdir(parents=True, exist_ok=True)
    if summary:
        (path / "summary.txt").write_text(SUMMARY)
    if execution is not None:
        (path / "execution.json").write_text(json.dumps(execution))
    if profile is not None:
        (path / "profile.json").write_text(json.dumps(profile))
    return path


def test_report_prints_summary_and_writes_steps_plot(tmp_path, capsys):
    d = write_dir(tmp_path / "profiles")
    assert main(["report", str(d)]) == 0
    out = capsys.readouterr().out
    assert SUMMARY in out
    assert f"wrote {d / 'steps.png'}" in out
    assert (d / "steps.png").read_bytes().startswith(PNG_MAGIC)


def test_report_out_directory(tmp_path):
    d = write_dir(tmp_path / "profiles")
    out = tmp_path / "plots" / "new"
    assert main(["report", str(d), "--out", str(out)]) == 0
    assert (out / "steps.png").read_bytes().startswith(PNG_MAGIC)
    assert not (d / "steps.png").exists()


def test_no_plots(tmp_path):
    d = write_dir(tmp_path / "profiles")
    assert main(["report", str(d), "--no-plots"]) == 0
    assert not (d / "steps.png").exists()


def test_execution_totals_without_summary(tmp_path, capsys):
    d = write_dir(tmp_path / "p", summary=False)
    assert main(["report", str(d)]) == 0
    out = capsys.readouterr().out
    assert "3 steps, 200 cycles" in out
    # OnTileExecute: 2 steps, 100 + 70 = 170 cycles; Sync: 1 step, 30 cycles
    lines = [line.split() for line in out.splitlines()]
    assert ["OnTileExecute", "2", "steps", "170", "cycles"] in lines
    assert ["Sync", "1", "steps", "30", "cycles"] in lines


def test_memory_plot_from_graph_profile(tmp_path):
    profile = {"target": {"bytesPerTile": 1000}, "memory": {"byTile": {"total": [10, 900, 1200]}}}
    d = write_dir(tmp_path / "p", execution=None, profile=profile)
    assert main(["report", str(d)]) == 0
    assert (d / "memory.png").read_bytes().startswith(PNG_MAGIC)


def test_missing_directory(tmp_path, capsys):
    missing = tmp_path / "nothing"
    assert main(["report", str(missing)]) == 2
    err = capsys.readouterr().err
    assert str(missing) in err and "does not exist" in err
    assert "summary.txt" in err and "execution.json" in err


def test_directory_without_profile_files(tmp_path, capsys):
    (tmp_path / "other.txt").write_text("x")
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path) in err and "none of the expected files" in err
    assert "summary.txt" in err and "execution.json" in err


def test_malformed_execution_profile(tmp_path, capsys):
    bad = json.loads(json.dumps(EXECUTION))
    del bad["simulation"]["steps"][1]["cyclesTo"]
    d = write_dir(tmp_path / "p", execution=bad)
    assert main(["report", str(d)]) == 2
    err = capsys.readouterr().err
    assert "simulation.steps[1] field 'cyclesTo'" in err and "required an integer" in err


def test_invalid_json(tmp_path):
    d = tmp_path / "p"
    d.mkdir()
    (d / "execution.json").write_text('{"simulation": ')
    with pytest.raises(ReportError, match="not valid JSON"):
        load_execution_steps(d / "execution.json")


def test_report_on_a_real_execution_profile(tmp_path):
    """The execution profile of a machine run reads back with steps that tile the run."""
    from ipusim.profile.execution import execution_profile

    cfg = load_config("tiny")
    compute = ir.Compute(name="c", vertex_tile=np.arange(8), vertex_cycles=np.arange(8) + 1)
    trace = Machine(cfg).run(ir.Sequence([compute, ir.Sync(name="s"), compute]))
    d = write_dir(tmp_path / "p", summary=False, execution=execution_profile([trace]))
    sim, steps = load_execution_steps(d / "execution.json")
    assert sim["cycles"] == trace.total_cycles
    assert [s["name"] for s in steps] == ["c", "s", "c"]
    assert steps[-1]["cyclesTo"] == trace.total_cycles
    assert main(["report", str(d)]) == 0
    assert (d / "steps.png").read_bytes().startswith(PNG_MAGIC)


def test_cbor_execution_profile(tmp_path, capsys):
    import cbor2

    d = tmp_path / "p"
    d.mkdir()
    with (d / "execution.cbor").open("wb") as f:
        cbor2.dump(EXECUTION, f)
    assert main(["report", str(d)]) == 0
    assert "3 steps, 200 cycles" in capsys.readouterr().out
    assert (d / "steps.png").read_bytes().startswith(PNG_MAGIC)


def test_report_writes_a_steps_timeline(tmp_path):
    profile = {"target": {"clockFrequency": 1e9}}  # 1 cycle = 1 ns = 0.001 us
    d = write_dir(tmp_path / "p", profile=profile)
    assert main(["report", str(d)]) == 0
    events = json.loads((d / "timeline.json").read_text())["traceEvents"]
    steps = [e for e in events if e["ph"] == "X"]
    assert [(e["name"], e["cat"]) for e in steps] == [
        ("a", "OnTileExecute"),
        ("s", "Sync"),
        ("b", "OnTileExecute"),
    ]
    # cycles 0-100, 100-130, 130-200 at 1 GHz, in microseconds
    assert [(e["ts"], e["dur"]) for e in steps] == [(0.0, 0.1), (0.1, 0.03), (0.13, 0.07)]


def test_report_keeps_an_existing_timeline(tmp_path):
    d = write_dir(tmp_path / "p", profile={"target": {"clockFrequency": 1e9}})
    (d / "timeline.json").write_text('{"traceEvents": []}')
    assert main(["report", str(d)]) == 0
    assert json.loads((d / "timeline.json").read_text()) == {"traceEvents": []}


# ------------------------------------------------------------------------ bad input
def hide_matplotlib(monkeypatch):
    """Make ``import matplotlib`` fail as it does when the plot extra is not installed."""
    import sys

    for name in ("matplotlib", "matplotlib.figure"):
        monkeypatch.setitem(sys.modules, name, None)  # None in sys.modules: ImportError


def test_missing_matplotlib_names_the_plot_extra(tmp_path, monkeypatch, capsys):
    d = write_dir(tmp_path / "p")
    hide_matplotlib(monkeypatch)
    assert main(["report", str(d)]) == 2
    captured = capsys.readouterr()
    assert "plots need matplotlib" in captured.err
    assert "pip install 'ipusim[plot]'" in captured.err and "--no-plots" in captured.err
    assert "Traceback" not in captured.err
    assert captured.out == ""  # nothing half done
    assert not (d / "steps.png").exists()


def test_missing_matplotlib_does_not_stop_a_text_report(tmp_path, monkeypatch, capsys):
    d = write_dir(tmp_path / "p")
    hide_matplotlib(monkeypatch)
    assert main(["report", str(d), "--no-plots"]) == 0
    assert SUMMARY in capsys.readouterr().out


def test_missing_matplotlib_through_an_import_hook(tmp_path, monkeypatch, capsys):
    """The same with an import hook that refuses matplotlib (as a fresh interpreter would)."""
    import sys
    from importlib.abc import MetaPathFinder

    class NoMatplotlib(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "matplotlib" or name.startswith("matplotlib."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [NoMatplotlib(), *sys.meta_path])
    d = write_dir(tmp_path / "p")
    assert main(["report", str(d)]) == 2
    err = capsys.readouterr().err
    assert "No module named 'matplotlib'" in err and "pip install 'ipusim[plot]'" in err


@pytest.mark.parametrize(
    ("profile", "field", "required"),
    [
        (
            {"target": {"bytesPerTile": 1000}, "memory": {"byTile": {"total": [10, "x", 3]}}},
            "field 'memory.byTile.total[1]': found 'x'",
            "required a non-negative number of bytes",
        ),
        (
            {"target": {"bytesPerTile": -4}, "memory": {"byTile": {"total": [10]}}},
            "field 'target.bytesPerTile': found -4",
            "required a positive number",
        ),
    ],
    ids=["memory", "capacity"],
)
def test_malformed_memory_field_names_file_and_field(tmp_path, capsys, profile, field, required):
    d = write_dir(tmp_path / "p", execution=None, profile=profile)
    assert main(["report", str(d)]) == 2
    err = capsys.readouterr().err
    assert f"{d / 'profile.json'}: {field}" in err
    assert required in err


def test_malformed_total_cycles_names_the_field(tmp_path, capsys):
    bad = json.loads(json.dumps(EXECUTION))
    bad["simulation"]["cycles"] = "200"
    d = write_dir(tmp_path / "p", summary=False, execution=bad)
    assert main(["report", str(d), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "field 'simulation.cycles': found '200'; required a non-negative integer" in err


def test_graph_profile_that_is_not_an_object(tmp_path, capsys):
    d = write_dir(tmp_path / "p")
    (d / "profile.json").write_text("[1, 2, 3]")
    assert main(["report", str(d)]) == 0  # no memory plot, no timeline: nothing to read
    out = capsys.readouterr().out
    assert "no memory.byTile.total and target.bytesPerTile" in out
    assert not (d / "timeline.json").exists()


def test_profile_nested_too_deeply(tmp_path, capsys):
    d = tmp_path / "p"
    d.mkdir()
    (d / "execution.json").write_text("[" * 100_000 + "]" * 100_000)
    assert main(["report", str(d), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"{d / 'execution.json'}: nested too deeply" in err


def test_unwritable_out_directory(tmp_path, capsys):
    d = write_dir(tmp_path / "p")
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert main(["report", str(d), "--out", str(blocker / "plots")]) == 2
    err = capsys.readouterr().err
    assert f"cannot read or write '{blocker / 'plots'}'" in err
    assert "Traceback" not in err


def test_missing_directory_through_the_cli_names_it(tmp_path, capsys):
    missing = tmp_path / "no" / "such"
    assert main(["report", str(missing), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ipusim: error: profile directory '{missing}' does not exist")
    assert "autoReport.all=true" in err


def test_steps_plot_names_its_bars(tmp_path, monkeypatch):
    import ipusim.plot

    drawn = []
    real = ipusim.plot.step_cycles_bars

    def keep(*args, **kwargs):
        drawn.append(real(*args, **kwargs))
        return drawn[-1]

    monkeypatch.setattr(ipusim.plot, "step_cycles_bars", keep)
    d = write_dir(tmp_path / "profiles")
    assert main(["report", str(d)]) == 0
    (fig,) = drawn
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == [s["name"] for s in EXECUTION["simulation"]["steps"]]
