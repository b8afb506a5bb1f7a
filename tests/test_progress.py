"""Progress of long commands: shown on a terminal's stderr, silent when stderr is a pipe
or a file unless ``--progress``, silenced by ``--no-progress``; and ``ipusim run``
refusing a file without a workload function before any of it runs."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from ipusim import progress
from ipusim.cli import main
from ipusim.progress import Progress, progress_wanted
from ipusim.runner import WorkloadError, check_workload_source

WORKLOAD = Path(__file__).parent / "data" / "calibrate_sum.py"


class FakeTerminal(io.StringIO):
    """A stderr that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_progress_is_wanted_on_a_terminal_only_unless_a_flag_says():
    assert progress_wanted(None, FakeTerminal()) is True
    assert progress_wanted(None, io.StringIO()) is False
    assert progress_wanted(True, io.StringIO()) is True
    assert progress_wanted(False, FakeTerminal()) is False


def test_a_reporter_prints_its_phases_and_counts():
    out = FakeTerminal()
    with Progress("demo", stream=out) as reporter:
        assert progress.current() is reporter
        progress.phase("first")
        progress.phase("second", total=3, unit="point")
        for _ in range(3):
            progress.advance(1, failed=0)
    text = out.getvalue()
    assert "demo: first" in text and "demo: second" in text
    assert "3/3" in text and "failed=0" in text
    assert progress.current() is None
    assert reporter.phases == ["first", "second"]


def test_a_detail_is_shown_after_the_phase_without_starting_one():
    out = FakeTerminal()
    with Progress("demo", stream=out) as reporter:
        progress.phase("run workloads", total=1, unit="pair")
        progress.detail("compile")
        progress.advance(1)
    assert "demo: run workloads" in out.getvalue() and "compile" in out.getvalue()
    assert reporter.phases == ["run workloads"]
    progress.detail("outside")  # no reporter open: nothing happens


def test_counting_past_the_total_grows_the_bar():
    out = FakeTerminal()
    with Progress("demo", stream=out):
        progress.phase("fit", total=2, unit="simulation")
        progress.advance(3)
    assert "3/3" in out.getvalue()


def test_a_disabled_reporter_and_no_reporter_print_nothing():
    out = FakeTerminal()
    with Progress("demo", enabled=False, stream=out) as reporter:
        progress.phase("first", total=2)
        progress.advance(2)
    assert out.getvalue() == ""
    assert reporter.phases == ["first"]
    progress.phase("outside")  # no reporter open: nothing happens, nothing raised
    progress.advance(1)


def run_cli(monkeypatch, tmp_path, *flags: str, terminal: bool) -> tuple[int, str, str]:
    err = FakeTerminal() if terminal else io.StringIO()
    out = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    argv = ["run", str(WORKLOAD), "--config", "tiny", "-p", "n=16", "--out", str(tmp_path)]
    code = main([*argv, *flags])
    return code, out.getvalue(), err.getvalue()


RUN_PHASES = ("check workload", "load, build, compile and run", "write profiles")


def test_run_on_a_terminal_names_its_phases_on_stderr(monkeypatch, tmp_path):
    code, out, err = run_cli(monkeypatch, tmp_path, terminal=True)
    assert code == 0
    for name in RUN_PHASES:
        assert f"ipusim run: {name}" in err
    assert "ipusim run:" not in out  # stdout keeps only the summary
    assert "Total cycles" in out


def test_run_into_a_pipe_is_quiet_unless_asked(monkeypatch, tmp_path):
    code, _, err = run_cli(monkeypatch, tmp_path, terminal=False)
    assert code == 0 and err == ""
    code, _, err = run_cli(monkeypatch, tmp_path, "--progress", terminal=False)
    assert code == 0
    assert all(f"ipusim run: {name}" in err for name in RUN_PHASES)


def test_no_progress_silences_a_terminal(monkeypatch, tmp_path):
    code, _, err = run_cli(monkeypatch, tmp_path, "--no-progress", terminal=True)
    assert code == 0 and err == ""


def test_a_graph_built_inside_a_command_is_not_watched(monkeypatch):
    """A command's graph shows no construction line of its own, even when building it
    takes long (``--no-progress`` on a loaded machine printed one): only graphs built
    outside a command's reporter are watched."""
    monkeypatch.setattr(sys, "stderr", FakeTerminal())

    class Graph:
        pass

    for enabled in (False, True):
        graph = Graph()
        with Progress("demo", enabled=enabled, stream=io.StringIO()):
            progress.watch_graph(graph, lambda g: (0, 0))
        assert graph not in progress._WATCHER.graphs


def test_progress_and_no_progress_together_are_a_usage_error(monkeypatch, tmp_path):
    code, _, err = run_cli(monkeypatch, tmp_path, "--progress", "--no-progress", terminal=False)
    assert code == 2 and "not allowed with argument" in err


def test_calibrate_names_its_fits_and_counts_simulations():
    from ipusim import ir
    from ipusim.calibrate import Pair, calibrate
    from ipusim.config import load_config, with_overrides
    from ipusim.machine import Machine
    from ipusim.measured import measured_from_trace

    tiny = load_config("tiny")
    bpc = "exchange.bytes_per_cycle"

    def program(num_bytes: int) -> ir.Sequence:
        return ir.Sequence(
            [
                ir.Compute(name="cs", vertex_tile=[0, 1], vertex_cycles=[60, 60]),
                ir.Exchange(name="ex", src_tile=[0], dst_tile=[1], num_bytes=[num_bytes]),
            ]
        )

    truth = with_overrides(tiny, {bpc: 2.0})
    pairs = [
        Pair(program(b), {}, measured_from_trace(Machine(truth).run(program(b))), f"ex{b}")
        for b in (1000, 3000, 7000)
    ]
    out = FakeTerminal()
    with Progress("ipusim calibrate", stream=out) as reporter:
        calibrate(pairs, tiny, [bpc], phases=("internal_exchange",), max_evaluations=20)
    loo = [f"leave-one-out fit {k}/3" for k in (1, 2, 3)]
    assert reporter.phases == ["run workloads", "probe parameters", "fit", *loo]
    text = out.getvalue()
    assert "ipusim calibrate: fit" in text and "/20" in text and "simulation" in text
    assert "3/3" in text  # the three pairs of "run workloads"


def test_run_refuses_a_plain_script_before_running_it(tmp_path, monkeypatch, capsys):
    marker = tmp_path / "ran.txt"
    script = tmp_path / "plain_script.py"
    script.write_text(
        "from pathlib import Path\n"
        f"Path({str(marker)!r}).write_text('ran')\n\n"
        "def main():\n    pass\n\n"
        "def helper(x):\n    return x\n"
    )
    monkeypatch.chdir(tmp_path)
    code = main(["run", "plain_script.py", "--config", "tiny", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert not marker.exists(), "the script ran before it was refused"
    assert "'plain_script.py' has no function 'workload'" in err
    assert "its functions: helper, main" in err
    assert "docs/workloads.md" in err and "nothing of it was run" in err


def test_a_module_without_the_function_is_refused_without_importing_it(tmp_path, monkeypatch):
    marker = tmp_path / "imported.txt"
    (tmp_path / "plain_module_xyz.py").write_text(
        f"from pathlib import Path\nPath({str(marker)!r}).write_text('x')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(WorkloadError, match="no function 'build'") as info:
        check_workload_source("plain_module_xyz:build")
    assert "plain_module_xyz:FUNCTION" in str(info.value)
    assert not marker.exists()


def test_a_workload_bound_by_import_or_a_missing_file_passes_the_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "alias.py").write_text("from calibrate_sum import workload\n")
    check_workload_source("alias.py")  # bound by an import: accepted, checked when run
    check_workload_source(str(WORKLOAD))
    check_workload_source("missing.py")  # not found: the runner's message says where


def test_a_syntax_error_is_reported_with_its_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken.py").write_text("def workload(device):\n    return (\n")
    with pytest.raises(WorkloadError, match="syntax error at line"):
        check_workload_source("broken.py")


def test_report_names_its_plots_on_a_terminal_and_keeps_stdout_clean(monkeypatch, tmp_path):
    code, _, _ = run_cli(monkeypatch, tmp_path, "--no-progress", terminal=False)
    assert code == 0
    err, out = FakeTerminal(), io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    monkeypatch.setattr(sys, "stdout", out)
    assert main(["report", str(tmp_path)]) == 0
    for name in ("read execution.json", "draw steps.png", "draw memory.png"):
        assert f"ipusim report: {name}" in err.getvalue()
    assert "ipusim report:" not in out.getvalue() and "wrote " in out.getvalue()
    quiet = io.StringIO()
    monkeypatch.setattr(sys, "stderr", quiet)
    assert main(["report", str(tmp_path), "--no-plots"]) == 0
    assert quiet.getvalue() == ""


def test_sweep_shows_its_bar_on_a_terminal_only(monkeypatch, tmp_path):
    import yaml

    exp = tmp_path / "one.yaml"
    exp.write_text(
        yaml.safe_dump(
            {
                "name": "one",
                "workloads": [{"spec": str(WORKLOAD), "params": {"n": 16}}],
                "config": "tiny",
            }
        )
    )
    for terminal, out_dir in ((True, "a"), (False, "b")):
        err = FakeTerminal() if terminal else io.StringIO()
        monkeypatch.setattr(sys, "stderr", err)
        monkeypatch.setattr(sys, "stdout", io.StringIO())
        assert main(["sweep", str(exp), "--out", str(tmp_path / out_dir)]) == 0
        assert ("one: 100%" in err.getvalue() and "1/1" in err.getvalue()) is terminal
        assert (err.getvalue() == "") is not terminal
