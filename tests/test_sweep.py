"""``ipusim sweep``: experiment checks, point expansion and keys, the result store, the
executors (in-process, worker processes, dask), resuming after SIGKILL, and the CLI."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml

from ipusim import __version__, cli
from ipusim.config import config_hash, load_config
from ipusim.runner import run_workload
from ipusim.sweep import (
    ExperimentError,
    ResultStore,
    SweepError,
    expand_points,
    load_experiment,
    run_point,
    run_sweep,
)
from ipusim.sweep import execute as sweep_execute
from ipusim.sweep.cli import normalize_argv

ROOT = Path(__file__).resolve().parents[1]
TUT7 = ROOT / "examples" / "tutorials" / "tut7.py"
EXAMPLE = ROOT / "examples" / "experiments" / "tut7_exchange.yaml"
#: A second tiny-like machine: tiny with 16 tiles in 4 columns.
TINY16 = {"extends": "tiny", "name": "tiny16", "tile": {"tiles_per_ipu": 16, "columns": 4}}
PHASES = ("compute", "internal_exchange", "global_exchange", "host_exchange", "sync")


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def grid_experiment(directory: Path, name: str = "grid", **extra: Any) -> Path:
    """tut7 on tiny and tiny16 x 4 exchange rates x 2 row counts x 4 column counts (64)."""
    write_yaml(directory / "tiny16.yaml", TINY16)
    data = {
        "name": name,
        "workloads": [{"spec": os.path.relpath(TUT7, directory), "name": "tut7"}],
        "config": {"base": "tiny", "set": {"sync.relative_delay": "none"}},
        "axes": [
            {"path": "config", "values": ["tiny", "tiny16.yaml"]},
            {"path": "exchange.bytes_per_cycle", "values": [2, 4, 8, 16]},
            {"path": "workload.rows", "values": [4, 8]},
            {"path": "workload.cols", "range": {"start": 4, "stop": 20, "step": 4}},
        ],
        **extra,
    }
    return write_yaml(directory / f"{name}.yaml", data)


def small_experiment(directory: Path, name: str = "small", **extra: Any) -> dict[str, Any]:
    """A mapping: tut7 on tiny over two exchange rates and two column counts (4 points)."""
    data = {
        "name": name,
        "workloads": [{"spec": str(TUT7), "params": {"rows": 4}}],
        "config": "tiny",
        "axes": [
            {"path": "exchange.bytes_per_cycle", "values": [4, 8]},
            {"path": "workload.cols", "values": [4, 6]},
        ],
    }
    data.update(extra)
    return data


def write_beside_tut7(path: Path, source: str) -> None:
    """Write the workload file ``path`` and, next to it, the tutorial 7 workload it
    imports (``from tut7 import workload``)."""
    path.write_text(source)
    (path.parent / "tut7.py").write_text(TUT7.read_text())


def problems_of(source: Any, **kwargs: Any) -> list[str]:
    with pytest.raises(ExperimentError) as info:
        load_experiment(source, **kwargs)
    return info.value.problems


# ------------------------------------------------------------------------ bad input
def test_unknown_config_path_is_named_with_a_suggestion(tmp_path):
    data = small_experiment(tmp_path)
    data["axes"][0]["path"] = "exchange.bytes_per_cycl"
    (problem,) = problems_of(data)
    assert "axes[0] (exchange.bytes_per_cycl)" in problem
    assert "not a config field" in problem
    assert "did you mean 'exchange.bytes_per_cycle'" in problem


def test_a_value_the_config_rejects_is_named_with_the_reason(tmp_path):
    data = small_experiment(tmp_path)
    data["axes"][0]["values"] = [4, -1, 0]
    problems = problems_of(data)
    assert len(problems) == 2
    assert "axes[0] (exchange.bytes_per_cycle): value -1 is rejected" in problems[0]
    assert "value 0 is rejected" in problems[1]
    assert "greater than 0" in problems[0]


def test_missing_workload_file_is_named_relative_to_the_experiment(tmp_path):
    path = write_yaml(
        tmp_path / "exp.yaml",
        {"name": "x", "workloads": [{"spec": "nope/wl.py"}], "config": "tiny"},
    )
    (problem,) = problems_of(path)
    assert "workloads[0].spec" in problem and "'nope/wl.py' not found" in problem
    assert str(tmp_path / "nope" / "wl.py") in problem
    assert "relative to the experiment file" in problem


def test_workload_without_the_function_lists_those_it_has(tmp_path):
    (tmp_path / "wl.py").write_text("def build(device):\n    pass\n\ndef helper():\n    pass\n")
    data = {"name": "x", "workloads": [{"spec": "wl.py"}], "config": "tiny"}
    (problem,) = problems_of(data, base_dir=tmp_path)
    assert "no function 'workload'" in problem and "build, helper" in problem


def test_missing_module_is_named():
    data = {"name": "x", "workloads": [{"spec": "no_such_pkg_xyz.mod"}], "config": "tiny"}
    (problem,) = problems_of(data)
    assert "workload module 'no_such_pkg_xyz.mod' not found" in problem


def test_zip_axes_of_unequal_length(tmp_path):
    data = small_experiment(tmp_path, mode="zip")
    data["axes"][1]["values"] = [4, 6, 8]
    (problem,) = problems_of(data)
    assert "mode zip needs axes of equal length" in problem
    assert "exchange.bytes_per_cycle has 2" in problem and "workload.cols has 3" in problem


def test_unknown_workload_parameter_lists_those_taken(tmp_path):
    data = small_experiment(tmp_path)
    data["axes"][1]["path"] = "workload.colz"
    (problem,) = problems_of(data)
    assert "'colz' is not a parameter of workload()" in problem and "rows, cols" in problem


def test_workload_values_of_the_wrong_type(tmp_path):
    data = small_experiment(tmp_path)
    data["workloads"][0]["params"] = {"rows": "4"}
    data["axes"][1]["values"] = [4, 6.5]
    problems = problems_of(data)
    assert problems == [
        "<mapping>: workloads[0].params.rows: '4' is a str; workload() expects int",
        "<mapping>: axes[1] (workload.cols): value 6.5 is a float; workload() expects int "
        "(workloads[0]); hint: YAML reads 8 as an int, 8.0 as a float, '8' as text",
    ]


def test_every_problem_is_reported_at_once_with_the_file_name(tmp_path):
    path = write_yaml(
        tmp_path / "bad.yaml",
        {
            "name": "bad",
            "workloads": [{"spec": "missing.py"}],
            "config": {"base": "tiny", "set": {"sync.relative_dely": "none"}},
            "axes": [{"path": "exchange.bytes_per_cycle", "values": ["fast"]}],
            "repeats": 0,
            "axis": [],
        },
    )
    problems = problems_of(path)
    text = "\n".join(problems)
    assert "repeats: found 0" in text and "greater than or equal to 1" in text
    assert "axis: unknown key" in text and "did you mean 'axes'" in text
    assert all(str(path) in p for p in problems)
    # Schema errors stop the deeper checks; fix them and the rest is reported together.
    data = yaml.safe_load(path.read_text())
    del data["axis"]
    data["repeats"] = 1
    write_yaml(path, data)
    problems = problems_of(path)
    assert len(problems) == 3
    assert "missing.py' not found" in problems[0]
    assert "sync.relative_dely" in problems[1] and "relative_delay" in problems[1]
    assert "value 'fast' is rejected" in problems[2]


def test_one_of_values_range_geomspace(tmp_path):
    data = small_experiment(tmp_path)
    data["axes"][0] = {
        "path": "exchange.bytes_per_cycle",
        "values": [1],
        "range": {"start": 1, "stop": 3},
    }
    problems = problems_of(data)
    assert any("exactly one of values, range, geomspace" in p for p in problems)
    data["axes"][0] = {"path": "exchange.bytes_per_cycle", "range": {"start": 5, "stop": 1}}
    (problem,) = problems_of(data)
    assert "axes[0]" in problem and "is empty" in problem


def test_a_combination_the_config_rejects_fails_before_running(tmp_path):
    data = small_experiment(tmp_path)
    data["axes"] = [
        {"path": "tile.tiles_per_ipu", "values": [8, 4]},
        {"path": "tile.columns", "values": [2, 8]},
    ]
    exp = load_experiment(data)  # each value is fine with the base config's other fields
    with pytest.raises(ExperimentError) as info:
        expand_points(exp)
    text = str(info.value)
    assert "tile.tiles_per_ipu': 4, 'tile.columns': 8" in text
    assert "expected at most 4 columns" in text and "1 problem(s)" in text


def test_duplicate_points_are_refused(tmp_path):
    data = small_experiment(tmp_path)
    data["axes"][0]["values"] = [4, 4.0]
    with pytest.raises(ExperimentError, match="same run"):
        expand_points(load_experiment(data))


def test_cli_reports_a_bad_experiment_without_a_traceback(tmp_path, capsys):
    path = write_yaml(tmp_path / "bad.yaml", {"name": "bad", "workloads": []})
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "workloads: found []" in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()


# ---------------------------------------------------------------------------- points
def test_product_expansion_order_and_values(tmp_path):
    exp = load_experiment(grid_experiment(tmp_path))
    points = expand_points(exp)
    assert len(points) == 2 * 4 * 2 * 4
    assert [p.index for p in points] == list(range(64))
    first, last = points[0], points[-1]
    assert first.axes == {
        "config": "tiny",
        "exchange.bytes_per_cycle": 2,
        "workload.rows": 4,
        "workload.cols": 4,
    }
    assert last.axes["config"] == "tiny16.yaml" and last.axes["workload.cols"] == 16
    assert points[1].axes["workload.cols"] == 8  # the last axis varies fastest
    assert last.config == str(tmp_path / "tiny16.yaml")
    assert last.params == {"rows": 8, "cols": 16}
    assert last.overrides == {"sync.relative_delay": "none", "exchange.bytes_per_cycle": 16}
    expected = load_config(tmp_path / "tiny16.yaml", overrides=last.overrides)
    assert last.machine == expected and last.config_hash == config_hash(expected)
    assert last.machine.tile.tiles_per_ipu == 16 and last.machine.exchange.bytes_per_cycle == 16


def test_zip_expansion_repeats_and_sugar(tmp_path):
    data = small_experiment(tmp_path, mode="zip", repeats=2)
    data["axes"] = [
        {"path": "exchange.bytes_per_cycle", "geomspace": {"start": 2, "stop": 16, "num": 4}},
        {"path": "workload.cols", "range": {"start": 4, "stop": 12, "step": 2}},
    ]
    exp = load_experiment(data)
    assert exp.axes[0].values == [2, 4, 8, 16] and exp.axes[1].values == [4, 6, 8, 10]
    points = expand_points(exp)
    assert [(p.axes["exchange.bytes_per_cycle"], p.params["cols"], p.repeat) for p in points] == [
        (2, 4, 0),
        (2, 4, 1),
        (4, 6, 0),
        (4, 6, 1),
        (8, 8, 0),
        (8, 8, 1),
        (16, 10, 0),
        (16, 10, 1),
    ]


def test_keys_are_stable_distinct_and_computed_from_the_hashes(tmp_path):
    path = grid_experiment(tmp_path)
    points = expand_points(load_experiment(path))
    assert len({p.key for p in points}) == 64
    again = expand_points(load_experiment(path))
    assert [p.key for p in again] == [p.key for p in points]
    # Independently: the key is SHA-256 of the config hash, the workload hash (file
    # content, function, params), the version and the repeat.
    point = points[37]
    source = hashlib.sha256(TUT7.read_bytes()).hexdigest()
    w_text = json.dumps(
        {"source": source, "function": "workload", "params": point.params},
        sort_keys=True,
        separators=(",", ":"),
    )
    w_hash = hashlib.sha256(w_text.encode()).hexdigest()[:16]
    assert point.workload_hash == w_hash
    c_hash = config_hash(load_config(point.config, overrides=point.overrides))
    k_text = json.dumps(
        {"config": c_hash, "workload": w_hash, "ipusim": __version__, "repeat": 0},
        sort_keys=True,
        separators=(",", ":"),
    )
    assert point.key == hashlib.sha256(k_text.encode()).hexdigest()[:16]


def test_keys_do_not_depend_on_order_or_location(tmp_path):
    path = grid_experiment(tmp_path)
    keys = {p.key for p in expand_points(load_experiment(path))}
    data = yaml.safe_load(path.read_text())
    data["axes"].reverse()
    moved = tmp_path / "elsewhere"
    moved.mkdir()
    write_yaml(moved / "tiny16.yaml", TINY16)
    data["workloads"][0]["spec"] = str(TUT7)
    assert {p.key for p in expand_points(load_experiment(data, base_dir=moved))} == keys
    # A changed workload file changes every key.
    copy = moved / "tut7.py"
    copy.write_text(TUT7.read_text() + "\n# changed\n")
    data["workloads"][0]["spec"] = "tut7.py"
    changed = {p.key for p in expand_points(load_experiment(data, base_dir=moved))}
    assert not changed & keys


def test_the_example_experiment_has_64_points():
    exp = load_experiment(EXAMPLE)
    points = expand_points(exp)
    assert len(points) == 64 and len({p.key for p in points}) == 64
    assert {p.axes["config"] for p in points} == {"mk1-ipumodel", "mk2-ipumodel"}
    assert sorted({p.axes["exchange.bytes_per_cycle"] for p in points}) == [2, 4, 8, 16]
    assert sorted({p.params["cols"] for p in points}) == [32, 96, 160, 224]


# --------------------------------------------------------------------- the 64 points
@pytest.fixture(scope="module")
def grid_sweep(tmp_path_factory):
    """The 64-point grid run with two worker processes."""
    directory = tmp_path_factory.mktemp("grid")
    path = grid_experiment(directory)
    out = directory / "out"
    summary = run_sweep(path, out, jobs=2, progress=False)
    return path, out, summary


def test_grid_sweep_runs_every_point_once(grid_sweep):
    path, out, summary = grid_sweep
    assert (summary.total, summary.ran, summary.cached, summary.failed) == (64, 64, 0, 0)
    rows = ResultStore(out).rows()
    points = expand_points(load_experiment(path))
    assert len(rows) == 64 and rows["key"].is_unique
    assert list(rows["key"]) == [p.key for p in points]
    assert ResultStore(out).experiment_keys() == [p.key for p in points]
    assert (rows["status"] == "ok").all() and (rows["error"] == "").all()
    assert rows["check"].all()
    assert rows.attrs["axes"] == [
        "config",
        "exchange.bytes_per_cycle",
        "workload.rows",
        "workload.cols",
    ]
    for point, (_, row) in zip(points, rows.iterrows(), strict=True):
        assert row["point"] == point.index
        assert {axis: row[axis] for axis in point.axes} == point.axes
        assert json.loads(row["params"]) == point.params
        assert row["ipusim_version"] == __version__
    # Profiles beside each row.
    for key in rows["key"][:3]:
        names = sorted(p.name for p in (out / "points" / key).iterdir())
        assert names == ["execution.json", "profile.json", "summary.txt"]


@pytest.mark.parametrize("index", [0, 29, 63])
def test_grid_values_equal_a_direct_run(grid_sweep, tmp_path, index):
    path, out, _ = grid_sweep
    rows = ResultStore(out).rows().set_index("point")
    row = rows.loc[index]
    # The point's config and params, rebuilt here from the grid definition.
    rates, rows_, cols = [2, 4, 8, 16], [4, 8], [4, 8, 12, 16]
    config_i, rest = divmod(index, 32)
    rate_i, rest = divmod(rest, 8)
    row_i, col_i = divmod(rest, 4)
    base = "tiny" if config_i == 0 else path.parent / "tiny16.yaml"
    cfg = load_config(
        base,
        overrides={"sync.relative_delay": "none", "exchange.bytes_per_cycle": rates[rate_i]},
    )
    result = run_workload(str(TUT7), cfg, {"rows": rows_[row_i], "cols": cols[col_i]})
    assert row["total_cycles"] == result.trace.total_cycles
    totals = result.trace.totals
    for phase in PHASES:
        assert row[phase] == totals[phase]
    assert row["compute_active"] == totals["compute_active"]
    expected_sets = {r.name: r.cycles for r in result.trace.records if r.kind == "compute"}
    assert json.loads(row["compute_sets"]) == expected_sets
    assert row["memory_peak_bytes"] == max(result.graph_profile["memory"]["byTile"]["total"])
    assert row["config_hash"] == config_hash(cfg)
    assert json.loads(row["metrics"]) == result.metrics
    assert row["host_seconds"] > 0


def test_run_point_gives_the_stored_row(grid_sweep):
    path, out, _ = grid_sweep
    exp = load_experiment(path)
    point = expand_points(exp)[42]
    row = run_point(point, exp)
    stored = ResultStore(out).rows().iloc[42]
    for column, value in row.items():
        if column != "host_seconds":
            assert stored[column] == value, column


def test_rerun_runs_nothing(grid_sweep):
    path, out, _ = grid_sweep
    before = ResultStore(out).rows()
    summary = run_sweep(path, out, jobs=2, progress=False)
    assert (summary.total, summary.ran, summary.cached, summary.failed) == (64, 0, 64, 0)
    pd.testing.assert_frame_equal(ResultStore(out).rows(), before)


@pytest.mark.slow
def test_sigkill_mid_sweep_then_restart_gives_each_row_once(grid_sweep, tmp_path):
    path, reference_out, _ = grid_sweep
    out = tmp_path / "killed"
    command = [sys.executable, "-m", "ipusim", "sweep", str(path), "--out", str(out), "-j", "2"]
    process = subprocess.Popen(
        [*command, "--no-progress"],
        start_new_session=True,  # its own process group: the workers die with it
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 120
        while len(list((out / "points").glob("*.parquet"))) < 6:
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "the sweep stored no rows in time"
            time.sleep(0.05)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    stored = len(list((out / "points").glob("*.parquet")))
    assert 6 <= stored < 64
    # Whatever the kill left half-written: a temporary row file (never read).
    (out / "points" / ".0123456789abcdef.half.tmp").write_bytes(b"PAR1")
    summary = run_sweep(path, out, jobs=1, progress=False)
    assert (summary.total, summary.cached, summary.ran) == (64, stored, 64 - stored)
    rows = ResultStore(out).rows()
    assert len(rows) == 64 and rows["key"].is_unique
    assert not list((out / "points").glob("*.tmp"))
    reference = ResultStore(reference_out).rows()
    pd.testing.assert_frame_equal(
        rows.drop(columns="host_seconds"), reference.drop(columns="host_seconds")
    )


# ----------------------------------------------------------------- failures, executors
def test_a_failing_point_is_recorded_and_the_others_run(tmp_path):
    data = small_experiment(tmp_path)
    data["axes"][1]["values"] = [1, 4]  # tut7 needs cols >= 2 to split the columns
    out = tmp_path / "out"
    summary = run_sweep(load_experiment(data), out, progress=False)
    assert (summary.total, summary.ran, summary.failed) == (4, 4, 2)
    rows = ResultStore(out).rows()
    bad = rows[rows["workload.cols"] == 1]
    good = rows[rows["workload.cols"] == 4]
    assert (bad["status"] == "error").all() and (good["status"] == "ok").all()
    assert bad["error"].str.startswith("GraphError: tut7 cost model: a 4x1 matrix").all()
    assert "Traceback" not in "".join(bad["error"])
    assert bad["total_cycles"].isna().all() and good["total_cycles"].notna().all()
    assert not (out / "points" / bad["key"].iloc[0]).exists()  # no profiles without a run
    # Failed points are not rerun unless asked.
    again = run_sweep(load_experiment(data), out, progress=False)
    assert (again.ran, again.cached, again.failed) == (0, 4, 2)
    retried = run_sweep(load_experiment(data), out, progress=False, retry_failed=True)
    assert (retried.ran, retried.cached, retried.failed) == (2, 2, 2)
    assert len(ResultStore(out).rows()) == 4


def test_a_worker_that_dies_costs_only_its_point(tmp_path):
    write_beside_tut7(
        tmp_path / "crashy.py",
        "import os\n"
        "from tut7 import workload as tut7\n\n"
        "def workload(device, cols: int = 4, crash: bool = False):\n"
        "    if crash:\n"
        "        os._exit(3)\n"
        "    return tut7(device, rows=4, cols=cols)\n",
    )
    data = {
        "name": "crashy",
        "workloads": [{"spec": "crashy.py"}],
        "config": "tiny",
        "axes": [
            {"path": "workload.cols", "values": [4, 6, 8]},
            {"path": "workload.crash", "values": [False, True]},
        ],
        "mode": "product",
        "profiles": False,
    }
    exp = load_experiment(data, base_dir=tmp_path)
    summary = run_sweep(exp, tmp_path / "out", jobs=2, progress=False)
    assert (summary.total, summary.ran, summary.failed) == (6, 6, 3)
    rows = ResultStore(tmp_path / "out").rows()
    assert len(rows) == 6 and rows["key"].is_unique
    crashed = rows[rows["workload.crash"]]
    assert (crashed["status"] == "error").all()
    assert crashed["error"].str.contains("worker process died").all()
    assert (rows[~rows["workload.crash"]]["status"] == "ok").all()


def test_a_pool_that_breaks_while_points_are_submitted_runs_them_again(tmp_path, monkeypatch):
    """A point can kill its worker before the points after it are submitted (the pool then
    refuses them with BrokenProcessPool, as seen when the crashing point above started
    first): those never ran and run again in a new pool, with no error. Simulated: the
    pool refuses the third submission (the second of the points held back while the
    first ran alone)."""
    from concurrent.futures.process import BrokenProcessPool

    class RefusesThirdSubmission(sweep_execute.ProcessPoolExecutor):
        calls = 0

        def submit(self, fn, /, *args, **kwargs):
            type(self).calls += 1
            if type(self).calls == 3:
                raise BrokenProcessPool("a child process terminated abruptly")
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(sweep_execute, "ProcessPoolExecutor", RefusesThirdSubmission)
    data = {
        "name": "refused",
        "workloads": [{"spec": str(TUT7), "params": {"rows": 4}}],
        "config": "tiny",
        "axes": [{"path": "workload.cols", "values": [4, 6, 8]}],
        "profiles": False,
    }
    exp = load_experiment(data, base_dir=tmp_path)
    summary = run_sweep(exp, tmp_path / "out", jobs=2, progress=False)
    assert RefusesThirdSubmission.calls == 4  # the refused point submitted again
    assert (summary.total, summary.ran, summary.failed) == (3, 3, 0)
    rows = ResultStore(tmp_path / "out").rows()
    assert sorted(rows["workload.cols"]) == [4, 6, 8] and (rows["status"] == "ok").all()


def logged_experiment(tmp_path: Path, crash_first: bool = False) -> Any:
    """tut7 at three column counts, each point appending ``start COLS PID`` when its
    workload is made and ``end COLS PID`` when its check has run to ``log.txt``; the
    first point (4 columns) waits 1 s before it starts its run, or (``crash_first``)
    kills its worker."""
    write_beside_tut7(
        tmp_path / "logged.py",
        "import os, time\n"
        "from tut7 import workload as tut7\n\n"
        "def note(text):\n"
        "    with open(os.path.join(os.path.dirname(__file__), 'log.txt'), 'a') as log:\n"
        "        log.write(f'{text} {os.getpid()}\\n')\n\n"
        "def workload(device, cols: int = 4, crash: bool = False):\n"
        "    note(f'start {cols}')\n"
        "    if cols == 4:\n"
        "        if crash:\n"
        "            os._exit(3)\n"
        "        time.sleep(1.0)\n"
        "    made = tut7(device, rows=4, cols=cols)\n"
        "    check = made.check\n\n"
        "    def logged_check(engine):\n"
        "        ok = check(engine)\n"
        "        note(f'end {cols}')\n"
        "        return ok\n\n"
        "    made.check = logged_check\n"
        "    return made\n",
    )
    data = {
        "name": "logged",
        "workloads": [{"spec": "logged.py", "params": {"crash": crash_first}}],
        "config": "tiny",
        "axes": [{"path": "workload.cols", "values": [4, 6, 8]}],
        "profiles": False,
    }
    return load_experiment(data, base_dir=tmp_path)


def test_a_pool_runs_its_first_point_alone(tmp_path):
    # With empty caches every worker started at once compiled every kernel; the first
    # point runs alone so that the workers started after it load them from the caches.
    summary = run_sweep(logged_experiment(tmp_path), tmp_path / "out", jobs=2, progress=False)
    assert (summary.ran, summary.failed) == (3, 0)
    log = [line.split() for line in (tmp_path / "log.txt").read_text().splitlines()]
    assert [line[:2] for line in log[:2]] == [["start", "4"], ["end", "4"]]
    assert sorted(tuple(line[:2]) for line in log[2:]) == [
        ("end", "6"),
        ("end", "8"),
        ("start", "6"),
        ("start", "8"),
    ]


def test_a_first_point_that_kills_its_worker_costs_only_its_point(tmp_path):
    exp = logged_experiment(tmp_path, crash_first=True)
    summary = run_sweep(exp, tmp_path / "out", jobs=2, progress=False)
    assert (summary.total, summary.ran, summary.failed) == (3, 3, 1)
    rows = ResultStore(tmp_path / "out").rows().set_index("workload.cols")
    assert "worker process died" in rows.loc[4, "error"]
    assert (rows.loc[[6, 8], "status"] == "ok").all()


@pytest.mark.slow
def test_dask_local_cluster_gives_the_same_rows(tmp_path):
    exp = load_experiment(small_experiment(tmp_path))
    run_sweep(exp, tmp_path / "serial", progress=False)
    summary = run_sweep(exp, tmp_path / "dask", jobs=2, scheduler="local", progress=False)
    assert (summary.total, summary.ran, summary.failed) == (4, 4, 0)
    serial = ResultStore(tmp_path / "serial").rows().drop(columns="host_seconds")
    dask = ResultStore(tmp_path / "dask").rows().drop(columns="host_seconds")
    pd.testing.assert_frame_equal(dask, serial)


def test_unreachable_scheduler_fails_before_any_point(tmp_path, monkeypatch):
    monkeypatch.setattr(sweep_execute, "SCHEDULER_TIMEOUT_S", 0.5)
    exp = load_experiment(small_experiment(tmp_path))
    with pytest.raises(SweepError, match="no dask scheduler answered") as info:
        run_sweep(exp, tmp_path / "out", scheduler="127.0.0.1:9", progress=False)
    assert "--scheduler local" in str(info.value)
    assert ResultStore(tmp_path / "out").done_keys() == set()


def test_a_busy_output_directory_is_refused(tmp_path):
    exp = load_experiment(small_experiment(tmp_path))
    store = ResultStore(tmp_path / "out")
    with store.lock(), pytest.raises(SweepError, match="in use by another sweep"):
        run_sweep(exp, tmp_path / "out", progress=False)


def test_an_unreadable_row_is_recomputed(tmp_path):
    exp = load_experiment(small_experiment(tmp_path, profiles=False))
    out = tmp_path / "out"
    run_sweep(exp, out, progress=False)
    key = expand_points(exp)[2].key
    (out / "points" / f"{key}.parquet").write_bytes(b"not parquet")
    with pytest.raises(SweepError, match="not a readable result row"):
        ResultStore(out).rows()
    with pytest.warns(UserWarning, match="unreadable row ignored"):
        summary = run_sweep(exp, out, progress=False)
    assert (summary.ran, summary.cached) == (1, 3)
    assert len(ResultStore(out).rows()) == 4


def test_store_rows_of_mixed_axis_types(tmp_path):
    store = ResultStore(tmp_path)
    base = {"status": "ok", "error": "", "total_cycles": 10}
    store.write({"point": 2, "key": "c" * 16, "a": "fast", "b": 1.5, **base}, axes=["a", "b"])
    store.write({"point": 0, "key": "a" * 16, "a": 3, "b": 2, **base}, axes=["a", "b"])
    store.write({"point": 1, "key": "b" * 16, "a": 4, "b": 3, "status": "error"}, axes=["a", "b"])
    rows = store.rows()
    assert list(rows["point"]) == [0, 1, 2] and rows.attrs["axes"] == ["a", "b"]
    assert list(rows["a"]) == [3, 4, "fast"] and list(rows["b"]) == [2.0, 3.0, 1.5]
    assert rows["total_cycles"].dtype == "Int64" and rows["total_cycles"].isna().tolist() == [
        False,
        True,
        False,
    ]
    assert store.done_keys() == {"a" * 16, "b" * 16, "c" * 16}
    assert store.done_keys(include_failed=False) == {"a" * 16, "c" * 16}
    assert list(store.rows(["c" * 16])["a"]) == ["fast"]


# ------------------------------------------------------------------------------- CLI
def test_cli_runs_and_reruns_a_sweep(tmp_path, capsys):
    path = write_yaml(tmp_path / "small.yaml", small_experiment(tmp_path))
    out = tmp_path / "out"
    argv = ["sweep", str(path), "--out", str(out), "--no-progress"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "Sweep small: 4 points, 4 ran, 0 cached, 0 failed" in text
    assert cli.main([*argv, "-j", "1"]) == 0
    assert "4 points, 0 ran, 4 cached, 0 failed" in capsys.readouterr().out
    assert cli.main(["sweep", "run", str(path), "--out", str(out), "--dry-run"]) == 0
    assert "4 points (4 stored" in capsys.readouterr().out


def test_cli_default_out_is_sweeps_name_in_the_working_directory(tmp_path, monkeypatch):
    path = write_yaml(tmp_path / "small.yaml", small_experiment(tmp_path, name="dflt"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["sweep", str(path), "--no-progress", "--dry-run"]) == 0
    assert cli.main(["sweep", str(path), "--no-progress"]) == 0
    assert len(ResultStore(tmp_path / "sweeps" / "dflt").done_keys()) == 4


def test_cli_exit_status_1_when_a_point_failed(tmp_path, capsys):
    data = small_experiment(tmp_path)
    data["axes"][1]["values"] = [1, 4]
    path = write_yaml(tmp_path / "small.yaml", data)
    assert cli.main(["sweep", str(path), "--out", str(tmp_path / "o"), "--no-progress"]) == 1
    captured = capsys.readouterr()
    assert "2 failed" in captured.out and "GraphError" in captured.err


def test_sweep_argv_gets_its_default_subcommand():
    assert normalize_argv(["sweep", "x.yaml", "-j", "2"]) == ["sweep", "run", "x.yaml", "-j", "2"]
    assert normalize_argv(["sweep", "-j", "2", "x.yaml"]) == ["sweep", "run", "-j", "2", "x.yaml"]
    assert normalize_argv(["sweep", "run", "x.yaml"]) == ["sweep", "run", "x.yaml"]
    assert normalize_argv(["sweep", "--help"]) == ["sweep", "--help"]
    assert normalize_argv(["run", "sweep"]) == ["run", "sweep"]
    cli.build_parser()  # registers the sub-commands
    assert normalize_argv(["sweep", "report", "d"]) == ["sweep", "report", "d"]


def test_version(capsys):
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"ipusim {__version__}"
