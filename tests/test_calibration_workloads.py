"""The calibration workloads of examples/calibration: each runs at its small default
parameters, returns finite metrics, and every row id in its POINTS is a measured row."""

from __future__ import annotations

import csv
import math
import sys
from pathlib import Path

import numpy as np
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
    config = load_config(module.TEST_CONFIG, overrides=getattr(module, "TEST_OVERRIDES", {}))
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


def test_gaussian_blur_splits_the_image_over_ipus_as_the_program_does():
    h = points.load(CAL / "h_gaussian_blur.py")
    # 1400 x 2000 on 16 IPUs: 2000 % 16 == 0 < 1400 % 16, so whole columns, 125 per IPU
    # (the border columns 0 and 1999 are not computed).
    slices = h.ipu_slices(1400, 2000, 16)
    assert [c.size for _, c in slices] == [124] + [125] * 14 + [124]
    assert all(r.size == 1398 for r, _ in slices)
    assert slices[1][1][0] == 125 and slices[15][1][-1] == 1998
    # rows divide more evenly: whole rows
    assert [r.size for r, _ in h.ipu_slices(32, 30, 4)] == [7, 8, 8, 7]
    assert [r.size for r, _ in h.ipu_slices(20, 24, 1)] == [18]
    # every tile used, blocks as square as possible, >= 6 rows per block
    assert h.tile_grid(1216, 1398, 1998) == (32, 38)  # the 1-IPU rows' grid
    assert h.tile_grid(1216, 1398, 125) == (152, 8)
    assert h.tile_grid(8, 18, 22) == (2, 4)
    assert h.tile_grid(8, 11, 22) == (1, 8)
    assert h.tile_grid(8, 5, 22) is None  # fewer rows than workers
    pts = {p.row: p for p in points.iter_points(CSV)}
    cfg = pts["H1.16ipu.float.globExchange"].config()
    assert (cfg.name, cfg.num_ipus, cfg.tile.tiles_per_ipu) == ("mk1", 16, 1216)
    assert pts["H1.1ipu.float.globExchange"].config().num_ipus == 1
    assert pts["H1.16ipu.half4.sync"].params == pts["H1.1ipu.half4.sync"].params


def test_gaussian_blur_on_two_ipus_exchanges_the_halo_over_the_links():
    rows = csv_rows()
    module = points.load(CAL / "h_gaussian_blur.py")
    assert {r for r in module.POINTS if r.startswith("H1.16ipu.")} == {
        r for r in rows if r.startswith("H1.16ipu.")
    }
    two = load_config("tiny", overrides={"num_ipus": 2})
    one = run_workload(str(CAL / "h_gaussian_blur.py"), "tiny", {"data_type": "float"})
    compute = {}
    for data_type, pixel_bytes in (("float", 16), ("half4", 8)):
        h = run_workload(str(CAL / "h_gaussian_blur.py"), two, {"data_type": data_type})
        assert h.ok, data_type
        m = h.metrics
        compute[data_type] = m["phase_cycles.compute"]
        # 20 x 24 on 2 IPUs: columns 0-11 and 12-23; one column of the 18 interior rows
        # plus the two corner pixels crosses each way
        assert m["global_exchange_bytes"] == 2 * (18 + 2) * pixel_bytes
        assert m["phase_cycles.globExchange"] > 0
        # the superstep's sync is the external sync plus the internal one
        assert m["phase_cycles.externalSync"] > 0
        assert m["phase_cycles.sync"] > m["phase_cycles.externalSync"]
        kinds = [r.kind for r in h.trace.records if r.name.startswith("inToOut")]
        # the pre copy (on-tile, no exchange), the blur's superstep, the post copy
        assert kinds == ["compute", "sync", "global_exchange", "sync", "exchange", "compute",
                         "compute"]  # fmt: skip
    # half the image per IPU (same tiles per IPU): less compute per tile than on one IPU
    assert compute["float"] < one.metrics["phase_cycles.compute"]


def test_ipu_link_traffic_moves_both_directions_at_the_link_rate():
    rows = csv_rows()
    module = points.load(CAL / "n2_ipu_link_traffic.py")
    assert set(module.POINTS) == {"N2.ipu2_ipu3"}
    point = next(p for p in points.iter_points(CSV) if p.row == "N2.ipu2_ipu3")
    assert point.config().name == "m2000"
    # 32 tiles x 64 KiB each way x 1000 rounds = the row's 4,096,000 KB in total
    p = point.params
    assert 2 * p["tiles"] * p["bytes_per_tile"] * 1000 == 4096000 * 1024
    two = load_config("tiny", overrides={"num_ipus": 2})
    params = {"tiles": 8, "bytes_per_tile": 16384, "iterations": 2}
    n = run_workload(str(CAL / "n2_ipu_link_traffic.py"), two, params)
    assert n.ok
    assert rows["N2.ipu2_ipu3"]["metric"] in n.metrics
    m = n.metrics
    assert m["bidirectional_bandwidth"] == pytest.approx(16 * m["gbytes_per_s_per_direction"])
    # one external sync and one global exchange (both directions) per round, then the
    # internal sync that ends the run
    assert [r.kind for r in n.trace.records] == ["sync", "global_exchange"] * 2 + ["sync"]
    glob = n.trace.records[1].step
    assert int(glob.num_bytes.sum()) == 2 * 8 * 16384
    pairs = zip(glob.src_tile // 8, glob.dst_tile // 8, strict=True)
    assert {(int(a), int(b)) for a, b in pairs} == {(0, 1), (1, 0)}
    # each direction has a hop of its own: close to, never above, the hop's capacity
    hop = two.links.bandwidth_bytes_per_s * two.links.links_between_neighbours / 1e9
    assert 0.9 * hop < m["gbytes_per_s_per_direction"] <= hop


def test_gaussian_blur_halo_copies_cost_the_runtime_copy_vertices():
    """The ``pre`` copy of each worker's rows is a gather vertex, the ``post`` copy a
    scatter vertex (ipusim.machine_copies): fixed + rows x per row + 8 bytes per thread
    cycle (the ldst64pace path), the fixed and per-row parts the config's, one vertex per
    worker, so a tile takes six times its busiest worker. Changing the config's copy
    fields moves the rows as the formula says."""
    module = points.load(CAL / "h_gaussian_blur.py")
    tiles = load_config("tiny").tile.tiles_per_ipu
    fields = {
        "code.copy_gather_fixed_cycles": 100.0,
        "code.copy_gather_region_cycles": 30.0,
        "code.copy_scatter_fixed_cycles": 7.0,
        "code.copy_scatter_region_cycles": 55.0,
    }
    base = load_config("tiny", overrides=fields)
    for data_type, pixel_bytes in (("float", 16), ("half4", 8)):
        h = run_workload(str(CAL / "h_gaussian_blur.py"), base, {"data_type": data_type})
        assert h.ok, data_type  # the copies feed the blur: the image is still right
        ((rows, cols),) = module.ipu_slices(20, 24, 1)
        grid_r, grid_c = module.tile_grid(tiles, rows.size, cols.size)
        worst = {"pre": 0.0, "post": 0.0}
        for band_rows in np.array_split(rows, grid_r):
            for band_cols in np.array_split(cols, grid_c):
                for part in np.array_split(band_rows, 6):
                    moves = part.size * -(-band_cols.size * pixel_bytes // 8)
                    pre = round(100.0 + 30.0 * part.size) + moves
                    post = round(7.0 + 55.0 * part.size) + moves
                    worst = {"pre": max(worst["pre"], pre), "post": max(worst["post"], post)}
        assert h.metrics["phase_cycles.pre"] == 6 * worst["pre"]
        assert h.metrics["phase_cycles.post"] == 6 * worst["post"]


def test_t7_hardware_gap_candidates_use_the_independent_rows():
    """The T7 gap script adds to a simulated total the time of the 40,004,000 bytes at
    each N1 host-to-buffer rate and the A5 start-of-run copy (values worked out by hand:
    4e7 B / (56.487 Gbit/s / 8) x 1.33 GHz, and so on)."""
    gap = points.load(CAL / "_t7_hardware_gap.py")
    rows = csv_rows()
    got = [round(total) for _, total in gap.candidates(0.0, rows, 1.33e9)]
    assert got == [7_535_177, 19_567_457, 35_183_056 + 1_531 + 205_246]
    assert gap.BYTES_TO_DEVICE == 40_004_000


def test_the_calibration_doc_gives_the_rounds_n2_runs():
    """docs/calibration.md describes the N2 workload with the rounds its points run
    (the run's closing sync weighs on the row by the round count)."""
    module = points.load(CAL / "n2_ipu_link_traffic.py")
    text = (ROOT / "docs" / "calibration.md").read_text(encoding="utf-8")
    start = text.index("**N2**: `n2_ipu_link_traffic.py`")
    described = " ".join(text[start : text.index("\n\n", start)].split())
    assert f"{module.POINT_ITERATIONS} rounds as the tool ran" in described
