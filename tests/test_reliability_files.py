"""Nothing lost, nothing silent: files appear whole or not at all, whatever stops a write.

The writer of :mod:`ipusim.files` is tested directly (an exception, an OSError, a file
size limit at any point of a write), then every command that writes files is stopped
in the middle of a write by a real signal sent from inside the write (a subprocess
whose ``ipusim.files._finish`` sends it, so the point is the same at every run) and
the output directory is inspected: every file in it is complete, no temporary file is
left, and stderr holds one line without a traceback.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ipusim import cli, files
from ipusim.files import FileGroup, FileWriteError, atomic_open, write_json, write_text

ROOT = Path(__file__).resolve().parents[1]
TUT3 = str(ROOT / "examples" / "tutorials" / "tut3.py")
SUM_WORKLOAD = str(ROOT / "tests" / "data" / "calibrate_sum.py")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PNG_END = b"IEND\xaeB`\x82"


def leftovers(directory: Path) -> list[str]:
    """Temporary files of the writer left in ``directory`` (recursively)."""
    return sorted(p.name for p in directory.rglob(f"*{files.TMP_SUFFIX}"))


# ------------------------------------------------------------------------ the writer
def test_a_write_appears_whole(tmp_path):
    path = write_text(tmp_path / "a.txt", "hello\n")
    assert path.read_text() == "hello\n"
    assert leftovers(tmp_path) == []


def test_an_exception_mid_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"old": 1}')
    with pytest.raises(RuntimeError, match="stop"), atomic_open(path) as f:
        f.write('{"new": ')
        raise RuntimeError("stop")
    assert path.read_text() == '{"old": 1}'
    assert leftovers(tmp_path) == []


def test_a_keyboard_interrupt_mid_write_leaves_no_file(tmp_path):
    path = tmp_path / "new.json"
    with pytest.raises(KeyboardInterrupt), atomic_open(path) as f:
        f.write("[1, 2,")
        raise KeyboardInterrupt
    assert not path.exists()
    assert leftovers(tmp_path) == []


def test_an_os_error_names_the_path_and_leaves_nothing(tmp_path, monkeypatch):
    path = tmp_path / "big.json"

    def full_disk(handle):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files, "_finish", full_disk)
    with pytest.raises(FileWriteError) as info:
        write_json(path, {"x": list(range(100))}, what="profile")
    message = str(info.value)
    assert f"'{path}'" in message and "No space left on device" in message
    assert "hint: free some space" in message
    assert info.value.filename == str(path) and info.value.errno == errno.ENOSPC
    assert isinstance(info.value, OSError)  # callers catching OSError still catch it
    assert not path.exists() and leftovers(tmp_path) == []


def test_a_missing_directory_is_named(tmp_path):
    path = tmp_path / "no" / "such" / "x.txt"
    with pytest.raises(FileWriteError, match=r"cannot write '.*x\.txt' \(No such file"):
        write_text(path, "x")


def test_a_group_appears_together_or_not_at_all(tmp_path):
    out = tmp_path / "profiles"
    with pytest.raises(ValueError, match="second"), FileGroup(out) as group:
        group.write_text("summary.txt", "complete\n")
        with group.open("execution.json") as f:
            f.write('{"simulation": ')
            raise ValueError("second file failed")
    assert sorted(p.name for p in out.iterdir()) == []
    with FileGroup(out) as group:
        group.write_text("summary.txt", "s")
        group.write_json("execution.json", {"a": 1})
    assert sorted(p.name for p in out.iterdir()) == ["execution.json", "summary.txt"]
    assert json.loads((out / "execution.json").read_text()) == {"a": 1}


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "private.yaml"
    path.write_text("old")
    path.chmod(0o600)
    write_text(path, "new")
    assert path.read_text() == "new" and (path.stat().st_mode & 0o777) == 0o600


def test_writing_through_a_symbolic_link_keeps_the_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("[]")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_json(link, [1, 2])
    assert link.is_symlink() and json.loads(real.read_text()) == [1, 2]


def wait_for_signal_handlers() -> None:
    """Give Python the chance to run a pending signal handler (it runs them in the main
    thread, between bytecodes)."""
    for _ in range(20):
        time.sleep(0.01)


@pytest.mark.parametrize(
    ("signum", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, files.Interrupted)]
)
def test_a_signal_during_the_renames_takes_effect_after_them(tmp_path, signum, raised):
    """A signal that arrives while a group is renamed is held until every file is in
    place, then raises as it would have."""
    renamed = []
    # Python's own SIGINT handler, as in a foreground run (a suite started in the
    # background inherits SIGINT ignored, and an ignored signal rightly stays ignored).
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with files.signals_as_exceptions(), pytest.raises(raised), files._signals_held():
            os.kill(os.getpid(), signum)
            wait_for_signal_handlers()
            renamed.append("all renames done")
        assert renamed == ["all renames done"]
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                          capture_output=True, text=True)  # fmt: skip
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".out.json.{dead_pid}.0123abcd{files.TMP_SUFFIX}"
    alive = tmp_path / f".out.json.{os.getppid()}.0123abcd{files.TMP_SUFFIX}"
    other = tmp_path / f".other.json.{dead_pid}.0123abcd{files.TMP_SUFFIX}"
    for p in (stale, alive, other):
        p.write_text("partial")
    write_json(tmp_path / "out.json", [1])
    assert not stale.exists()  # its writer is gone: removed
    assert alive.exists()  # a live process may still be writing it
    assert other.exists()  # another file's temporary: not this write's business


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=5000), cut=st.integers(min_value=0, max_value=5000))
def test_a_write_stopped_at_any_byte_keeps_the_old_content(tmp_path, data, cut):
    """Hypothesis: a write that fails after any number of bytes leaves the old file as
    it was and no temporary file; one that completes leaves exactly the new bytes."""
    path = tmp_path / "f.bin"
    path.write_bytes(b"old content")
    with pytest.raises(OSError), atomic_open(path, "wb") as f:
        f.write(data[:cut])
        raise OSError(errno.EFBIG, "File too large")
    assert path.read_bytes() == b"old content"
    assert leftovers(tmp_path) == []
    files.write_bytes(path, data)
    assert path.read_bytes() == data


def test_the_file_size_limit_is_one_line_naming_the_file(tmp_path):
    """A real EFBIG (RLIMIT_FSIZE, with SIGXFSZ ignored) while `ipusim run` writes its
    profiles: one line naming the file, exit status 2, no profile left.

    Before the limit the child imports everything and runs once, so that Numba's kernel
    cache is on disk (a cold cache would hit the limit first); it writes no bytecode
    (``-B``): under the limit Python would leave truncated ``.pyc`` files behind."""
    out = tmp_path / "out"
    warm = tmp_path / "warm"
    code = textwrap.dedent(
        f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from ipusim.cli import main
        import ipusim.runner  # everything imported before the limit
        assert main(["run", {TUT3!r}, "--config", "tiny", "--out", {str(warm)!r}]) == 0
        resource.setrlimit(resource.RLIMIT_FSIZE, (2000, 2000))
        sys.exit(main(["run", {TUT3!r}, "--config", "tiny", "--out", {str(out)!r}]))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-B", "-c", code], capture_output=True, text=True, cwd=ROOT
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "File too large" in lines[0] and str(out) in lines[0]
    assert sorted(p.name for p in out.iterdir()) == []


# ------------------------------------------------------------------ the CLI, stopped
#: Runs the CLI with ipusim.files._finish sending SIGNAL to the process at its NTH
#: call: after the content of the NTH file is written, before it is renamed.
DRIVER = """
import os, signal, sys, time
import ipusim.files as files

name, nth, argv = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
calls = [0]
finish = files._finish

def stopping_finish(handle):
    calls[0] += 1
    if calls[0] == nth:
        os.kill(os.getpid(), getattr(signal, name))
        for _ in range(1000):  # Python handles it in this (the main) thread: wait for it
            time.sleep(0.01)
    return finish(handle)

files._finish = stopping_finish
from ipusim.cli import main
sys.exit(main(argv))
"""


def sigint_default() -> None:
    """Start a child with SIGINT's default action, as a shell starts a foreground command:
    a suite run in the background inherits SIGINT ignored, and a child that ignores it
    (as ipusim rightly keeps it ignored) would never be stopped."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stopped(tmp_path: Path, name: str, nth: int, argv: list[str]) -> subprocess.CompletedProcess:
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    return subprocess.run(
        [sys.executable, str(driver), name, str(nth), *argv],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "IPUSIM_PROGRESS": "0"},
        preexec_fn=sigint_default,
    )


def assert_one_line(proc: subprocess.CompletedProcess, status: int, words: str) -> None:
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0], proc.stderr


def run_args(out: Path) -> list[str]:
    return ["run", TUT3, "--config", "tiny", "--out", str(out)]


@pytest.mark.parametrize(("name", "status"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_run_stopped_while_writing_profiles_leaves_none(tmp_path, name, status):
    out = tmp_path / "out"
    proc = stopped(tmp_path, name, 2, run_args(out))  # profile.json done, execution.json not
    words = "interrupted (Ctrl-C)" if name == "SIGINT" else "stopped by SIGTERM"
    assert_one_line(proc, status, f"ipusim: run {words}")
    assert sorted(p.name for p in out.iterdir()) == []


def test_run_stopped_while_rewriting_keeps_the_old_profiles(tmp_path):
    out = tmp_path / "out"
    assert cli.main(run_args(out)) == 0
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(before) == ["execution.json", "profile.json", "summary.txt"]
    proc = stopped(tmp_path, "SIGTERM", 3, run_args(out))
    assert_one_line(proc, 143, "stopped by SIGTERM")
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_run_killed_outright_leaves_no_partial_profile(tmp_path):
    """SIGKILL cannot be caught: the temporary file stays, the final names do not
    appear; the next run removes the dead writer's temporary file."""
    out = tmp_path / "out"
    proc = stopped(tmp_path, "SIGKILL", 2, run_args(out))
    assert proc.returncode == -signal.SIGKILL
    assert [p.name for p in out.iterdir() if not p.name.startswith(".")] == []
    assert leftovers(out)  # the killed writer's
    assert cli.main(run_args(out)) == 0
    assert leftovers(out) == []
    assert sorted(p.name for p in out.iterdir()) == [
        "execution.json",
        "profile.json",
        "summary.txt",
    ]
    json.loads((out / "execution.json").read_text())


@pytest.fixture(scope="module")
def profile_dir(tmp_path_factory) -> Path:
    """A profile directory written by `ipusim run` of tutorial 3."""
    out = tmp_path_factory.mktemp("profile") / "tut3"
    assert cli.main(run_args(out)) == 0
    return out


def test_report_stopped_while_plotting_leaves_only_complete_plots(tmp_path, profile_dir):
    plots = tmp_path / "plots"
    proc = stopped(tmp_path, "SIGTERM", 2, ["report", str(profile_dir), "--out", str(plots)])
    assert_one_line(proc, 143, "ipusim: report stopped by SIGTERM")
    names = sorted(p.name for p in plots.iterdir())
    assert names == ["steps.png"]  # the first plot was complete; the second never appeared
    data = (plots / "steps.png").read_bytes()
    assert data.startswith(PNG_MAGIC) and data.endswith(PNG_END)
    assert leftovers(plots) == []


def _compare_to_itself(tmp_path, profile_dir):
    """``ipusim compare`` of ``profile_dir`` with itself, writing rows.csv and rows.png
    in ``tmp_path``: the two paths and the argument list."""
    csv, plot = tmp_path / "rows.csv", tmp_path / "rows.png"
    argv = ["compare", str(profile_dir), str(profile_dir), "--csv", str(csv), "--plot", str(plot)]
    return csv, plot, argv


def test_compare_stopped_while_writing_csv_leaves_nothing(tmp_path, profile_dir):
    csv, plot, argv = _compare_to_itself(tmp_path, profile_dir)
    proc = stopped(tmp_path, "SIGINT", 1, argv)
    assert_one_line(proc, 130, "ipusim: compare interrupted (Ctrl-C)")
    assert not csv.exists() and not plot.exists()
    assert leftovers(tmp_path) == []


def test_compare_stopped_while_plotting_keeps_the_complete_csv(tmp_path, profile_dir):
    csv, plot, argv = _compare_to_itself(tmp_path, profile_dir)
    proc = stopped(tmp_path, "SIGTERM", 2, argv)
    assert_one_line(proc, 143, "stopped by SIGTERM")
    lines = csv.read_text().splitlines()
    assert lines[0] == "level,name,measured,simulated,abs_error,rel_error"
    assert len(lines) > 1 and not plot.exists() and leftovers(tmp_path) == []


def test_calibrate_stopped_while_writing_the_overlay_leaves_none(tmp_path):
    measured = tmp_path / "measured"
    assert (
        cli.main(["run", SUM_WORKLOAD, "--config", "tiny", "-p", "n=64", "--out", str(measured)])
        == 0
    )
    overlay = tmp_path / "overlay.yaml"
    argv = [
        "calibrate", "--config", "tiny", "--param", "sync.min_sync_delay_cycles=0:100",
        "--pair", f"{SUM_WORKLOAD}@n=64={measured / 'summary.txt'}",
        "--max-evaluations", "6", "--out", str(overlay),
    ]  # fmt: skip
    proc = stopped(tmp_path, "SIGTERM", 1, argv)
    assert_one_line(proc, 143, "ipusim: calibrate stopped by SIGTERM")
    assert not overlay.exists() and leftovers(tmp_path) == []


# ---------------------------------------------------------- the CLI, other failures
def test_an_unwritable_csv_is_one_line(tmp_path, profile_dir, capsys):
    target = tmp_path / "missing" / "rows.csv"
    status = cli.main(["compare", str(profile_dir), str(profile_dir), "--csv", str(target)])
    err = capsys.readouterr().err
    assert status == 2 and "Traceback" not in err
    assert f"cannot write --csv '{target}' (No such file or directory)" in err


def test_an_os_error_of_any_command_is_one_line(monkeypatch, capsys):
    def handler(args):
        raise PermissionError(errno.EACCES, "Permission denied", "/some/file")

    monkeypatch.setattr(cli, "_config_list", handler)
    assert cli.main(["config", "list"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "ipusim: error: '/some/file': Permission denied; hint: check the path, its "
        "permissions and the free space"
    )


def test_an_internal_error_is_one_line_and_its_traceback_is_on_request(monkeypatch, capsys):
    """An exception raised inside ipusim's own code (here: a Path made of the parsed
    arguments) is an internal error: status 70, one line, the traceback on request."""
    monkeypatch.setattr(cli, "_config_list", functools.partial(files.make_directory))
    monkeypatch.delenv(cli.TRACEBACK_ENV, raising=False)
    assert cli.main(["config", "list"]) == 70
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("ipusim: internal error in config: TypeError: ")
    assert f"{cli.TRACEBACK_ENV}=1" in err and "report it" in err
    monkeypatch.setenv(cli.TRACEBACK_ENV, "1")
    with pytest.raises(TypeError):
        cli.main(["config", "list"])


def test_an_exception_of_the_users_workload_names_where_it_was_raised(tmp_path, capsys):
    spec = tmp_path / "broken.py"
    spec.write_text("def workload(device):\n    x = 1\n    raise ValueError('no data here')\n")
    assert cli.main(["run", str(spec), "--config", "tiny", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        f"ipusim: error: run: ValueError: no data here (raised at {spec}:3); hint: set "
        f"{cli.TRACEBACK_ENV}=1 to see the traceback"
    )
    assert not (tmp_path / "o").exists()


def test_an_error_of_the_poplar_layer_is_bad_input(tmp_path, capsys):
    out = tmp_path / "o"
    argv = [*run_args(out), "--engine-option", "debug.maxCycles=-5"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ipusim: error: EngineError: bad engine options")
    assert "'debug.maxCycles' has value '-5'" in err and "Traceback" not in err


def test_a_graph_out_of_tile_memory_shows_its_report(tmp_path, capsys):
    # OutOfMemoryError is a MemoryError: the command printed "run ran out of memory"
    # with a hint about host memory, hiding the tiles, bytes and variables.
    spec = tmp_path / "big.py"
    spec.write_text(
        "from poplar_api import FLOAT, Graph\nfrom poplar_api import program as prog\n"
        "from poplar_api.workload import Workload\n\ndef workload(device):\n"
        "    graph = Graph(device.getTarget())\n"
        "    x = graph.addVariable(FLOAT, [20000], 'big')\n    graph.setTileMapping(x, 3)\n"
        "    return Workload(graph, prog.Sequence(prog.WriteUndef(x)))\n"
    )
    assert cli.main(["run", str(spec), "--config", "tiny", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ipusim: error: OutOfMemoryError: graph does not fit in tile memory")
    assert "tile 3: needs" in err and "'big' 80000 B" in err and "allowOutOfMemory" in err


def test_the_traceback_of_an_ipusim_error_is_shown_on_request(monkeypatch, capsys):
    monkeypatch.setenv(cli.TRACEBACK_ENV, "1")
    assert cli.main(["config", "show", "no-such-preset"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("Traceback") and "\nipusim: error: invalid machine config" in err


def test_signal_handlers_are_restored_after_a_command():
    before = signal.getsignal(signal.SIGTERM)
    assert cli.main(["config", "list"]) == 0
    assert signal.getsignal(signal.SIGTERM) is before


def test_file_size_limit_in_process_for_the_writer(tmp_path):
    """The writer under a real RLIMIT_FSIZE (in a child process): EFBIG becomes a
    FileWriteError naming the file and its hint."""
    code = textwrap.dedent(
        f"""
        import resource, signal
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        from ipusim.files import FileWriteError, write_bytes
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, 1000))
        try:
            write_bytes({str(tmp_path / "big.bin")!r}, b"x" * 100_000)
        except FileWriteError as exc:
            print(exc)
        """
    )
    # -B: no bytecode written under the limit (it would be left truncated)
    proc = subprocess.run(
        [sys.executable, "-B", "-c", code], capture_output=True, text=True, cwd=ROOT
    )
    assert "File too large" in proc.stdout and "file size limit" in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] != 1000  # this process untouched


# ------------------------------------------------- outputs checked before the work
CALIBRATE = [
    "calibrate",
    "--param",
    "sync.min_sync_delay_cycles",
    "--pair",
    f"{SUM_WORKLOAD}=no.txt",
]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["run", TUT3, "--config", "tiny", "--out", "{file}/x"],
            "cannot write --out '{file}/x' ('{file}' is a file)",
        ),
        (
            [*CALIBRATE, "--out", "{tmp}/missing/o.yaml"],
            "cannot write overlay '{tmp}/missing/o.yaml' (No such file or directory)",
        ),
        (["compare", "a", TUT3, "--csv", "{tmp}"], "cannot write --csv '{tmp}' (Is a directory)"),
        (["compare", "a", TUT3, "--plot", "{tmp}/p.gif"], "suffix '.gif' is not supported"),
    ],
)
def test_an_unwritable_output_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch, argv, expected
):
    """The output is checked first: no workload is run, no profile is read (here they
    would fail: 'a' and 'none.txt' do not exist, and the run would have to be timed)."""
    blocker = tmp_path / "file"
    blocker.write_text("x")
    fill = {"file": str(blocker), "tmp": str(tmp_path)}
    argv = [a.format(**fill) for a in argv]

    def no_work(*args, **kwargs):
        raise AssertionError("work started before the output was checked")

    monkeypatch.setattr("ipusim.runner.run_workload", no_work)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert expected.format(**fill) in err and "Traceback" not in err


def test_sweep_stopped_mid_point_keeps_whole_rows_and_resumes(tmp_path):
    """experiment.json is the 1st file written, point 1 the 2nd to 5th (three profile
    files, then its row), so the 6th is point 2's first profile file: SIGTERM there."""
    exp = tmp_path / "exp.yaml"
    exp.write_text(
        f"name: e\nworkloads:\n  - spec: {TUT3}\nconfig: tiny\n"
        "axes:\n  - {path: exchange.bytes_per_cycle, values: [4, 8]}\n"
    )
    out = tmp_path / "out"
    proc = stopped(tmp_path, "SIGTERM", 6, ["sweep", str(exp), "--out", str(out)])
    assert_one_line(proc, 143, "ipusim: sweep e stopped by SIGTERM; 1 point(s) stored")
    rows = sorted((out / "points").glob("*.parquet"))
    assert len(rows) == 1 and leftovers(out) == []
    profile_dirs = [d for d in (out / "points").iterdir() if d.is_dir()]
    complete = {"execution.json", "profile.json", "summary.txt"}
    for d in profile_dirs:  # point 1's three files, or none of point 2's
        assert {p.name for p in d.iterdir()} in (complete, set())
    assert cli.main(["sweep", str(exp), "--out", str(out), "--no-progress"]) == 0
    assert len(sorted((out / "points").glob("*.parquet"))) == 2
