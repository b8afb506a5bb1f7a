"""The calibration workloads of examples/calibration: each runs at its small default
parameters, returns finite metrics, and every row id in its POINTS is a measured row."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import pytest

from ipusim.config import load_config
from ipusim.runner import run_workload

ROOT = Path(__file__).resolve().parents[1]
CAL = ROOT / "examples" / "calibration"
CSV = ROOT / "tests" / "data" / "calibration" / "measurements.csv"
sys.path.insert(0, str(CAL))

import points  # noqa: E402

FILES = points.workload_files()


def csv_rows() -> dict[str, dict[str, str]]:
    with open(CSV, newline="", encoding="utf-8") as f:
        return {r["id"]: r for r in csv.DictReader(f)}


def test_every_source_but_the_missing_ones_has_a_workload():
    stems = {p.stem.split("_")[0] for p in FILES}
    assert {"t7", "a", "b", "c", "d", "j", "l", "m", "pf"} <= stems


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_points_name_measured_rows(path):
    module = points.load(path)
    known = set(csv_rows()) | set(points.TXT_POINTS)
    assert module.POINTS, f"{path.name} has no POINTS"
    assert sorted(set(module.POINTS) - known) == []


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_runs_at_default_params_with_finite_metrics(path):
    module = points.load(path)
    config = load_config(module.TEST_CONFIG)
    result = run_workload(str(path), config)
    assert result.metrics, f"{path.name} returned no metrics"
    assert all(math.isfinite(v) for v in result.metrics.values())
    assert result.ok in (None, True)


def test_metric_names_are_those_of_the_csv():
    rows = csv_rows()
    # One row per file whose metric is the CSV's, run small on tiny.
    cases = {"b_binary_add": "B1.runA.tile0", "c_scaled_add": "C2.N64",
             "d_pi": "D1.n1000", "m_delay": "M.delay1000", "pf_amp_matmul": "PF.N16",
             "a_lightweight_profiling": "A3.1", "j_poplibs_bench": "J-gemm-16.ipum2"}  # fmt: skip
    for stem, row in cases.items():
        result = run_workload(str(CAL / f"{stem}.py"), "tiny")
        assert rows[row]["metric"] in result.metrics, (stem, result.metrics)


def test_scaled_add_matches_the_poplibs_supervisor_estimate():
    # README of the calibration data: the Poplibs estimate for float N=64 is 279 (DERIVED).
    result = run_workload(str(CAL / "c_scaled_add.py"), "tiny", {"n": 64})
    assert result.metrics["tile_cycles"] == 279


def test_iter_points_joins_csv_and_points():
    pts = points.iter_points(CSV)
    ids = [p.row for p in pts]
    assert "C2.N512" in ids and "T7.ipumodel" in ids
    p = next(p for p in pts if p.row == "J-gemm-1.ipum1")
    assert p.params == {"kind": "gemm", "m": 1000, "k": 256, "n": 10000}
    assert p.config().name == "mk1-ipumodel"  # J is IPU Model data
    assert next(p for p in pts if p.row == "A2o.stage2.1").config().num_ipus == 2
    missing = points.uncovered(CSV)
    assert len(missing) + sum(1 for p in pts if not p.row.startswith("T7")) == len(csv_rows())
    assert "K-v1.Cholesky.half.lower.8" not in missing
    assert sum(1 for p in pts if p.row.startswith("K-")) == 68  # every K row of the CSV


def test_new_workloads_give_the_csv_metrics():
    rows = csv_rows()
    f = run_workload(str(CAL / "f_stream_triad.py"), "tiny", {"n": 8, "repeats": 3})
    for row in ("F1.tflops", "F1.bw", "F1.pct"):
        assert rows[row]["metric"] in f.metrics
    # 8 tiles x 6 workers x 8 floats, per repeat 6 x (ceil(8 / 2) + 10) tile cycles.
    assert f.metrics["cycles_per_repeat"] == 6 * (4 + 10)
    n = run_workload(str(CAL / "n_host_traffic.py"), "tiny", {"tiles": 8})
    assert rows["N1.host_to_buffer_to_tile.tile"]["metric"] in n.metrics
    h_module = points.load(CAL / "h_gaussian_blur.py")
    h = run_workload(str(CAL / "h_gaussian_blur.py"), "tiny", {"data_type": "half4"})
    assert h.ok and {h_module.POINT_METRICS[r] for r in h_module.POINTS} <= set(h.metrics)
    assert h.metrics["phase_cycles.globExchange"] == 0
