"""Comparison of measured and simulated profiles, and ``ipusim compare``."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from ipusim.cli import main
from ipusim.compare import CompareError, compare, compare_many
from ipusim.errors import IpusimError
from ipusim.measured import MeasuredProfile, MeasuredStep, read_profile

DATA = Path(__file__).parent / "data" / "calibration"
IPUMODEL = DATA / "tut7_10000x1000_mk2_ipumodel_sdk2.txt"
HARDWARE = DATA / "tut7_10000x1000_mk2_hardware.txt"


def profile(phases=None, steps=(), metrics=None, tiles=None, source="p") -> MeasuredProfile:
    return MeasuredProfile(
        source=source,
        format="csv",
        phases=dict(phases or {}),
        steps=tuple(MeasuredStep(n, t, c) for n, t, c in steps),
        metrics=dict(metrics or {}),
        num_tiles=tiles,
    )


def row(result, level: str, name: str) -> pd.Series:
    rows = result.rows
    match = rows[(rows["level"] == level) & (rows["name"] == name)]
    assert len(match) == 1, (level, name, rows)
    return match.iloc[0]


def test_phase_rows_and_errors() -> None:
    meas = profile({"total": 100, "compute": 50, "sync": 0, "compute_active": 7})
    sim = profile({"total": 110, "compute": 40, "sync": 5, "host_exchange": 3})
    result = compare(meas, sim)
    assert list(result.rows.columns) == [
        "level",
        "name",
        "measured",
        "simulated",
        "abs_error",
        "rel_error",
    ]
    assert list(result.rows["name"]) == ["total", "compute", "sync"]  # PHASES order
    total = row(result, "phase", "total")
    assert (total.measured, total.simulated, total.abs_error) == (100, 110, 10)
    assert total.rel_error == pytest.approx(0.10)
    assert row(result, "phase", "compute").rel_error == pytest.approx(-0.20)
    sync = row(result, "phase", "sync")
    assert sync.abs_error == 5 and math.isnan(sync.rel_error)
    assert result.mape == {"phase": pytest.approx(0.15), "all": pytest.approx(0.15)}
    assert result.worst_rel_error == pytest.approx(-0.20)
    assert result.unmatched["phase"] == (["compute_active"], ["host_exchange"])
    assert list(result.failures(15)["name"]) == ["compute"]


def test_steps_align_by_name_and_type_summing_repeats() -> None:
    meas = profile(
        {"total": 1},
        steps=[("a", "OnTileExecute", 10), ("s", "Sync", 5), ("a", "OnTileExecute", 20)],
    )
    sim = profile(
        {"total": 1},
        steps=[("a", "OnTileExecute", 33), ("b", "OnTileExecute", 7), ("a", "DoExchange", 4)],
    )
    result = compare(meas, sim)
    step = row(result, "step", "a [OnTileExecute]")
    assert (step.measured, step.simulated) == (30, 33)
    assert step.rel_error == pytest.approx(0.10)
    assert (result.rows["level"] == "step").sum() == 1
    assert result.unmatched["step"] == (
        ["s [Sync]"],
        ["b [OnTileExecute]", "a [DoExchange]"],
    )
    only_phases = compare(meas, sim, levels=["phase"])
    assert list(only_phases.rows["level"]) == ["phase"]


def test_metrics_by_name_with_ids_and_total_cycles_alias() -> None:
    meas = profile(metrics={"tile_cycles[A]": 100, "tile_cycles[B]": 200, "total_cycles": 50})
    sim = profile({"total": 60}, metrics={"tile_cycles": 150, "tflops": 1})
    result = compare(meas, sim)
    assert row(result, "metric", "tile_cycles[A]").rel_error == pytest.approx(0.5)
    assert row(result, "metric", "tile_cycles[B]").rel_error == pytest.approx(-0.25)
    assert row(result, "metric", "total_cycles").simulated == 60
    assert result.unmatched["metric"] == ([], ["tflops"])
    assert result.mape["metric"] == pytest.approx((0.5 + 0.25 + 0.2) / 3)


def test_mismatched_targets_and_bad_arguments_are_errors() -> None:
    with pytest.raises(CompareError, match=r"says 1,216 tiles .* 1,472") as err:
        compare(profile({"total": 1}, tiles=1216), profile({"total": 1}, tiles=1472))
    assert isinstance(err.value, IpusimError) and isinstance(err.value, ValueError)
    with pytest.raises(CompareError, match=r"unknown phase\(s\) 'comput'; required a subset"):
        compare(profile({"total": 1}), profile({"total": 1}), phases=["comput"])
    with pytest.raises(CompareError, match=r"nothing to compare"):
        compare(profile({"total": 1}), profile(metrics={"x": 1}))
    result = compare(
        profile({"total": 1, "sync": 2}), profile({"total": 2, "sync": 2}), phases=["sync"]
    )
    assert list(result.rows["name"]) == ["sync"]


def test_calibration_summaries_compare() -> None:
    result = compare(read_profile(IPUMODEL), read_profile(HARDWARE))
    total = row(result, "phase", "total")
    assert total.rel_error == pytest.approx((25_444_984 - 6_681_766) / 6_681_766)
    assert row(result, "phase", "sync").abs_error == pytest.approx(135_849.6 - 1_134.8)
    assert "compute_active" not in set(result.rows["name"])
    text = result.table()
    assert "phase  total                6,681,766   25,444,984   +18,763,218     +280.8%" in text
    assert "phase  sync                   1,134.8    135,849.6    +134,714.8  +11,871.2%" in text
    assert "not compared (phases on one side only): measured compute_active" in text


def test_table_shows_the_largest_step_errors() -> None:
    steps = [(f"cs{i}", "OnTileExecute", 100) for i in range(30)]
    sim_steps = [(f"cs{i}", "OnTileExecute", 100 + i) for i in range(30)]
    result = compare(profile({"total": 1}, steps=steps), profile({"total": 1}, steps=sim_steps))
    text = result.table(max_steps=3)
    shown = [ln.split()[1] for ln in text.splitlines() if ln.startswith("step")]
    assert shown == ["cs27", "cs28", "cs29"]
    assert "... 27 more step rows" in text
    assert (
        len([ln for ln in result.table(max_steps=None).splitlines() if ln.startswith("step")]) == 30
    )


def test_compare_many_pools_rows() -> None:
    a = (profile({"total": 100}), profile({"total": 110}))
    b = ("b", profile({"total": 200, "sync": 10}), profile({"total": 150, "sync": 10}))
    rows, overall = compare_many([a, b])
    assert list(rows["pair"]) == ["p", "b", "b"]
    assert overall == pytest.approx((0.10 + 0.25 + 0.0) / 3)


def test_plot_draws_bars(tmp_path: Path) -> None:
    result = compare(read_profile(IPUMODEL), read_profile(HARDWARE))
    fig = result.plot(path=tmp_path / "c.png")
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"
    assert len(fig.axes[0].patches) == 2 * len(result.rows)


# ------------------------------------------------------------------------ CLI
def test_cli_prints_the_table(capsys) -> None:
    assert main(["compare", str(IPUMODEL), str(HARDWARE)]) == 0
    out = capsys.readouterr().out
    assert "+280.8%" in out and "internal_exchange" in out and "MAPE: phase" in out


def test_cli_fail_above(capsys, tmp_path: Path) -> None:
    args = ["compare", str(IPUMODEL), str(HARDWARE)]
    assert main([*args, "--fail-above", "12000"]) == 0  # worst is sync, +11,871.2%
    assert main([*args, "--fail-above", "11000"]) == 1
    err = capsys.readouterr().err
    assert "1 row(s) above 11000%: phase sync +11,871.2%" in err
    assert main([*args, "--phases", "internal_exchange", "--fail-above", "1"]) == 0  # +0.5%
    assert main([*args, "--phases", "internal_exchange", "--fail-above", "0.5"]) == 1
    out = tmp_path / "rows.csv"
    assert main([*args, "--csv", str(out), "--plot", str(tmp_path / "c.png")]) == 0
    rows = pd.read_csv(out)
    assert list(rows["name"]) == [
        "total",
        "compute",
        "internal_exchange",
        "global_exchange",
        "host_exchange",
        "sync",
    ]
    assert rows["measured"].iloc[0] == 6_681_766 and rows["simulated"].iloc[0] == 25_444_984
    assert (tmp_path / "c.png").exists()


def test_cli_errors_without_traceback(capsys, tmp_path: Path) -> None:
    assert main(["compare", str(IPUMODEL), str(tmp_path / "missing.txt")]) == 2
    assert "missing.txt: no such file" in capsys.readouterr().err
    a = tmp_path / "a.txt"
    b = tmp_path / "b.txt"
    body = "Execution:\n  Total cycles: 10\n  Total sync cycles: 80\n"
    a.write_text("Target:\n  Total Tiles: 1,216\n" + body)
    b.write_text("Target:\n  Total Tiles: 1,472\n" + body)
    assert main(["compare", str(a), str(b)]) == 2
    assert "1,216 tiles and the simulated side" in capsys.readouterr().err
    c = tmp_path / "c.txt"
    c.write_text(body)
    assert main(["compare", str(c), str(c)]) == 2
    assert "--tiles" in capsys.readouterr().err
    assert main(["compare", str(c), str(a), "--tiles", "1216"]) == 0
    assert "phase  sync    0.06579    0.06579" in capsys.readouterr().out  # 80 / 1,216


def test_cli_measurements_csv_ids(capsys, tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text(
        "id,source,device,sdk,workload,parameters,metric,value,unit,notes\n"
        "J1.a,J,m,s,w,tiles=4,total_cycles,8,cycles,\n"
        "J1.b,J,m,s,w,tiles=4,total_cycles,12,cycles,\n"
        "K1,K,m,s,w,,step_cycles,5,cycles,\n"
    )
    assert main(["compare", str(path), str(IPUMODEL), "--ids", "J1.*"]) == 0
    out = capsys.readouterr().out
    assert "total_cycles[J1.a]" in out and "+83,521,975.0%" in out  # 6,681,766 / 8 - 1
    assert main(["compare", str(path), str(IPUMODEL), "--ids", "K*"]) == 2
    assert "nothing to compare" in capsys.readouterr().err


WORKLOAD = """
from poplar_api import FLOAT, Graph
from poplar_api import program as prog
from poplar_api.workload import Workload

from codelets_common import Scale  # on sys.path under pytest


def workload(device, n: int = 4):
    graph = Graph(device.getTarget())
    graph.addCodelets(Scale)
    x = graph.addVariable(FLOAT, [n], "x")
    y = graph.addVariable(FLOAT, [n], "y")
    graph.setTileMapping(x, 0)
    graph.setTileMapping(y, 1)
    cs = graph.addComputeSet("twice")
    v = graph.addVertex(cs, "Scale", {"in": x, "out": y})
    graph.setTileMapping(v, 1)
    graph.setPerfEstimate(v, 10 * n)
    return Workload(graph, prog.Sequence(prog.Execute(cs)))
"""


def test_cli_runs_a_workload(capsys, tmp_path: Path) -> None:
    pytest.importorskip("ipusim.runner")
    spec = tmp_path / "twice_workload.py"
    spec.write_text(WORKLOAD)
    summary = tmp_path / "measured.txt"
    summary.write_text(
        "Target:\n  Total Tiles: 8\nExecution:\n  Total cycles: 1,000\n"
        "  Total compute cycles (excluding idle threads): 80\n"
    )
    code = main(["compare", str(summary), str(spec), "--config", "tiny", "-p", "n=6"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"simulated: {spec} on tiny (ipusim-run; IPU_MODEL, 8 tiles" in out
    line = next(ln for ln in out.splitlines() if ln.startswith("phase  compute_active"))
    # one vertex with perf estimate 60 on one of 8 tiles, plus any launch cycles
    assert float(line.split()[3].replace(",", "")) >= 60 / 8


@pytest.mark.parametrize(
    "options",
    [
        ["--config", "tiny"],
        ["--set", "exchange.bytes_per_cycle=8"],
        ["-p", "n=6"],
        ["--engine-option", "debug.maxCycles=10"],
    ],
)
def test_cli_refuses_workload_options_with_a_profile_as_run(capsys, options) -> None:
    # They were ignored: the profile's numbers were compared as if the machine asked
    # for had run.
    assert main(["compare", str(IPUMODEL), str(HARDWARE), *options]) == 2
    err = capsys.readouterr().err
    assert f"{options[0]} {options[1]} given, but RUN '{HARDWARE}' is a profile" in err
    assert "hint: drop them" in err


def test_cli_refuses_ids_without_a_measurements_csv(capsys) -> None:
    assert main(["compare", str(IPUMODEL), str(HARDWARE), "--ids", "J1.*"]) == 2
    err = capsys.readouterr().err
    assert f"--ids 'J1.*' given, but MEASURED '{IPUMODEL}' is not a measurements .csv" in err


def test_cli_names_a_workload_given_as_measured(capsys, tmp_path: Path) -> None:
    # It was read as a summary: "no 'Execution:' section in N line(s)".
    spec = tmp_path / "twice_workload.py"
    spec.write_text(WORKLOAD)
    assert main(["compare", str(spec), str(IPUMODEL)]) == 2
    err = capsys.readouterr().err
    assert f"MEASURED '{spec}' is a workload; MEASURED must be a measured profile" in err
    assert "the arguments swapped?" in err
