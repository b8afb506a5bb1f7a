"""examples/calibration/report.py and the hardware presets' provenance."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest

from ipusim.config import load_config

ROOT = Path(__file__).resolve().parents[1]
CAL = ROOT / "examples" / "calibration"
CSV = ROOT / "tests" / "data" / "calibration" / "measurements.csv"
sys.path.insert(0, str(CAL))

import report  # noqa: E402


def measured_values() -> dict[str, float]:
    with open(CSV, newline="", encoding="utf-8") as f:
        return {r["id"]: float(r["value"]) for r in csv.DictReader(f)}


@pytest.fixture(scope="module")
def results():
    return report.collect(["C", "M"], quick=True)


#: Poplibs float ScaledAddSupervisor estimates (data README, DERIVED): 279, 369, 567, 945.
SCALED_ADD = {"C2.N64": 279, "C2.N128": 369, "C2.N256": 567, "C2.N512": 945}


def test_rows_are_the_csv_rows_with_their_measured_values(results):
    values = measured_values()
    assert sorted(r.row for r in results) == ["C2.N128", "C2.N256", "C2.N512", "C2.N64",
                                              "M.delay1000"]  # fmt: skip
    for r in results:
        # a C2 interval holds one counter read of C1.overhead cycles
        read = values["C1.overhead"] if r.row.startswith("C2") else 0
        assert r.measured == values[r.row] - read


def test_scaled_add_is_the_poplibs_estimate_plus_the_fitted_launch(results):
    # one supervisor vertex, no exchange: the estimate, plus the calibrated preset's
    # supervisor launch (the uncalibrated baseline has none)
    launch = load_config("mk2").tile.multi_vertex_launch_cycles
    assert launch > 0
    for r in results:
        if r.row in SCALED_ADD:
            assert (r.uncalibrated, r.calibrated) == (SCALED_ADD[r.row], SCALED_ADD[r.row] + launch)


def test_table_mae_is_recomputed_from_the_rows(results):
    values = measured_values()
    launch = load_config("mk2").tile.multi_vertex_launch_cycles
    meas = {k: values[k] - values["C1.overhead"] for k in SCALED_ADD}
    by_hand = sum(abs(e + launch - meas[k]) / meas[k] for k, e in SCALED_ADD.items()) / 4
    line = next(s for s in report.summarise(results) if s["source"] == "C")
    assert line["rows"] == 4
    assert line["mae_calibrated_pct"] == pytest.approx(100 * by_hand)
    text = report.table(results)
    assert f"{100 * by_hand:.1f}%" in text and text.splitlines()[0].startswith("source")


def test_csv_output_has_one_line_per_row(results, tmp_path):
    out = tmp_path / "rows.csv"
    report.write_csv(results, out)
    with open(out, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(results)
    first = rows[0]
    assert float(first["rel_calibrated"]) == pytest.approx(
        (float(first["calibrated"]) - float(first["measured"])) / float(first["measured"])
    )


def test_zero_measurement_is_left_out_of_the_mae():
    rows = [report.RowResult("X", "a", "m", 0.0, 1.0, 1.0),
            report.RowResult("X", "b", "m", 10.0, 12.0, 11.0)]  # fmt: skip
    assert math.isnan(rows[0].rel("calibrated"))
    assert report.mae(rows, "uncalibrated") == pytest.approx(0.2)
    assert report.mae(rows, "calibrated") == pytest.approx(0.1)


def test_baseline_presets_are_the_uncalibrated_values():
    base = report.preset_config("mk2", {}, calibrated=False)
    assert base.host.bandwidth_bytes_per_s == 32e9
    assert base.sync.host_sync_cycles == 0
    now = report.preset_config("mk2", {}, calibrated=True)
    assert now.host.bandwidth_bytes_per_s != base.host.bandwidth_bytes_per_s


def test_uncalibrated_and_calibrated_differ_where_the_fit_applies():
    out = report.collect(["N"], quick=True)
    host = [r for r in out if r.row.startswith("N1.")]
    assert len(host) == 3
    for r in host:
        assert r.uncalibrated != r.calibrated
        assert abs(r.rel("calibrated")) < abs(r.rel("uncalibrated"))
    # N2 (IPU-Links, m2000) is compared but not fitted: the same on both sides
    (links,) = [r for r in out if r.row.startswith("N2.")]
    assert links.uncalibrated == links.calibrated > 0


@pytest.mark.parametrize(
    "preset, sources",
    [
        ("mk2", {"A6.t1.Mid", "A6.t5.Mid", "T7.hardware"}),
        ("mk1", {"H1.1ipu.float.exchange", "H1.1ipu.half4.exchange"}),
        ("bow", {"A6.t1.Mid", "T7.hardware"}),
    ],
)
def test_presets_load_and_name_their_measured_sources(preset, sources):
    cfg = load_config(preset)
    prov = cfg.provenance
    named = set(prov.get("sources", []))
    for step in prov.get("steps", []):
        named |= set(step["sources"])
    assert sources <= named
    known = set(measured_values()) | {"T7.hardware", "T7.ipumodel"}
    assert named <= known


def test_fitted_values_are_marked_in_the_yaml():
    text = (ROOT / "configs" / "mk2.yaml").read_text(encoding="utf-8")
    for key in ("bandwidth_bytes_per_s: 20198800000.0", "latency_s: 1.1545e-06",
                "host_sync_cycles: 45123"):  # fmt: skip
        line = next(x for x in text.splitlines() if key in x)
        assert "# estimate: fitted (docs/calibration.md)" in line


def one_row_csv(tmp_path: Path, row: str, **changes: str) -> Path:
    """A copy of the calibration CSV holding ``row`` (with ``changes`` to its columns) and
    the counter row the report checks, in ``tmp_path``."""
    with open(CSV, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    one = tmp_path / "one_row.csv"
    with open(one, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows({**r, **changes} if r["id"] == row else r for r in rows
                         if r["id"] in (row, report.COUNTER_ROW))  # fmt: skip
    return one


def test_a_workload_reading_every_run_is_reported_as_run_directly(tmp_path):
    """The fully-connected rows' metrics read each of the tool's two runs
    (``engine.getTraces()``): the report gives them every re-timed run of a config,
    so its cycles are those of the workload run directly on that config."""
    from ipusim.runner import run_workload

    row = "J-fc_layer_1_1000_5_half.ipum2"
    (got,) = report.collect(["J"], csv_path=one_row_csv(tmp_path, row))
    workload = CAL / "fc_fully_connected.py"
    params = report.points.load(workload).POINTS[row]
    for calibrated, value in ((False, got.uncalibrated), (True, got.calibrated)):
        cfg = report.row_config(str(workload), row, calibrated)
        direct = run_workload(str(workload), cfg, params)
        assert len(direct.traces) == 2
        assert value == direct.metrics["total_cycles"]


def test_an_unknown_source_key_is_refused_before_anything_runs(capsys, monkeypatch):
    def no_run(*args, **kwargs):
        raise AssertionError("a workload ran")

    monkeypatch.setattr(report, "run_group", no_run)
    assert report.main(["--sources", "B,N2"]) == 2
    err = capsys.readouterr().err
    assert "unknown source key(s) N2" in err
    assert "rows N2.* belong to source N" in err
    assert "B" in err.split("the keys are")[1]


def test_rows_of_two_poplibs_releases_are_never_run_as_one_graph(monkeypatch):
    """A group of rows is planned and compiled once, on its first config: rows of one
    workload and parameters measured with different Poplibs releases must be run apart,
    each graph planned as its rows' release."""
    workload = str(CAL / "j_poplibs_bench.py")
    params = report.points.load(Path(workload)).POINTS["J-gemm-7.ipum2"]
    rows = ["J-gemm-7.ipum2", "J-gemm-8.ipum2"]  # (both given J-gemm-7's product)
    monkeypatch.setattr(
        report.points,
        "iter_points",
        lambda csv_path=None: [report.points.Point(r, workload, dict(params)) for r in rows],
    )
    releases = {"J-gemm-7.ipum2": {"software.poplibs_release": "f927358"}}
    monkeypatch.setattr(
        report.points, "software_overrides", lambda r, _csv=None: releases.get(r, {})
    )
    runs = []

    def fake_run(_workload, _params, configs):
        runs.append({c.software.poplibs_release for c in configs})
        return [object()] * len(configs), lambda _engine, _trace: {"total_cycles": 1.0}

    monkeypatch.setattr(report, "run_group", fake_run)
    assert len(report.collect(["J"])) == 2
    assert sorted(map(sorted, runs)) == [["7eac0f26"], ["f927358"]]


def test_the_release_is_read_from_the_csv_the_report_is_given(tmp_path, monkeypatch):
    """A row's Poplibs release comes from the ``sdk`` column of the CSV ``collect`` reads,
    not from the default CSV: J-gemm-7.ipum2 in a copy whose ``sdk`` names 7eac0f26 (the
    default CSV: f927358) is configured and run as 7eac0f26."""
    row = "J-gemm-7.ipum2"
    one = one_row_csv(tmp_path, row, sdk="Poplibs 7eac0f26 (2023-08-11)")
    workload = str(CAL / "j_poplibs_bench.py")
    assert report.row_config(workload, row, True).software.poplibs_release == "f927358"
    for calibrated in (True, False):
        cfg = report.row_config(workload, row, calibrated, csv_path=one)
        assert cfg.software.poplibs_release == "7eac0f26"
    runs = []

    def fake_run(_workload, _params, configs):
        runs.append({c.software.poplibs_release for c in configs})
        return [object()] * len(configs), lambda _engine, _trace: {"total_cycles": 1.0}

    monkeypatch.setattr(report, "run_group", fake_run)
    assert len(report.collect(["J"], csv_path=one)) == 1
    assert runs == [{"7eac0f26"}]
