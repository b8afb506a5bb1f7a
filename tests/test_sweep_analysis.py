"""Sweep analysis: derived columns, effects and plots on a synthetic result frame, and
the ``ipusim sweep report`` command on a directory written by a real sweep.

The synthetic frame has closed-form cycles, so every expected value below comes from
the formulas, not from the code under test:

* ``compute = 24000 / tiles``, ``internal_exchange = 4800 / bw``, ``sync = 100``,
  ``global_exchange = host_exchange = 0``;
* ``total_cycles = compute + internal_exchange + sync``;
* metrics ``flops = 65536`` and ``peak_flops_per_cycle = 16 * tiles``;
* compute sets ``mm/Convolve = compute - 40`` and ``mm/Reduce = 40``.

One more point (bw 16, tiles 4) failed and has no cycles.
"""

from __future__ import annotations

import json
import math
from itertools import product
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ipusim.sweep.analysis import (
    AnalysisError,
    add_flops,
    add_speedup,
    axis_columns,
    axis_effects,
    axis_values,
    compute_set_frame,
    decode_json_columns,
    metric,
    pair_ratios,
    plot_cycles,
    plot_flops,
    plot_phases,
    plot_speedup,
)

BW = "exchange.bytes_per_cycle"
TILES = "tile.tiles_per_ipu"
BWS = (1, 2, 4, 8)
TILE_COUNTS = (4, 8, 16)


def phases(bw: float, tiles: int) -> dict[str, float]:
    return {
        "compute": 24000 / tiles,
        "internal_exchange": 4800 / bw,
        "global_exchange": 0.0,
        "host_exchange": 0.0,
        "sync": 100.0,
    }


def total(bw: float, tiles: int) -> float:
    return sum(phases(bw, tiles).values())


def synthetic_frame() -> pd.DataFrame:
    """Result rows as ``ResultStore.rows()`` gives them (JSON columns as text)."""
    rows = []
    for i, (bw, tiles) in enumerate(product(BWS, TILE_COUNTS)):
        ph = phases(bw, tiles)
        rows.append(
            {
                BW: bw,
                TILES: tiles,
                "workload": "mm",
                "repeat": 0,
                "key": f"k{i:02d}",
                "config_hash": f"c{i:02d}",
                "workload_hash": "w",
                "ipusim_version": "0.1.0",
                "status": "ok",
                "error": None,
                "total_cycles": total(bw, tiles),
                **ph,
                "memory_peak_bytes": 1000 * tiles,
                "host_seconds": 0.01,
                "compute_sets": json.dumps({"mm/Convolve": ph["compute"] - 40, "mm/Reduce": 40}),
                "metrics": json.dumps({"flops": 65536, "peak_flops_per_cycle": 16 * tiles}),
            }
        )
    nan = math.nan
    rows.append(
        {
            BW: 16,
            TILES: 4,
            "workload": "mm",
            "repeat": 0,
            "key": "bad",
            "config_hash": "cbad",
            "workload_hash": "w",
            "ipusim_version": "0.1.0",
            "status": "error",
            "error": "WorkloadError: out of memory",
            "total_cycles": nan,
            **dict.fromkeys(phases(1, 1), nan),
            "memory_peak_bytes": nan,
            "host_seconds": 0.01,
            "compute_sets": None,
            "metrics": None,
        }
    )
    return pd.DataFrame(rows)


@pytest.fixture
def df() -> pd.DataFrame:
    return decode_json_columns(synthetic_frame())


# ------------------------------------------------------------------ frame helpers
def test_axes_and_values(df):
    assert axis_columns(df) == [BW, TILES]
    assert axis_values(df, BW) == [1, 2, 4, 8, 16]
    assert axis_values(df, TILES) == [4, 8, 16]


def test_axis_values_orders_quantities_by_value():
    frame = pd.DataFrame({"tile.clock_hz": ["1.85 GHz", "800 MHz", "1.33 GHz"]})
    assert axis_values(frame, "tile.clock_hz") == ["800 MHz", "1.33 GHz", "1.85 GHz"]


def test_decode_json_columns(df):
    first = df.iloc[0]
    assert first["metrics"] == {"flops": 65536, "peak_flops_per_cycle": 64}
    assert first["compute_sets"] == {"mm/Convolve": 24000 / 4 - 40, "mm/Reduce": 40}
    assert df.iloc[-1]["metrics"] == {} and df.iloc[-1]["compute_sets"] == {}


def test_decode_json_columns_names_the_bad_point():
    frame = synthetic_frame()
    frame.loc[3, "metrics"] = "{not json"
    with pytest.raises(AnalysisError, match=r"column 'metrics' of point k03.*not valid JSON"):
        decode_json_columns(frame)
    frame.loc[3, "metrics"] = "[1, 2]"
    with pytest.raises(AnalysisError, match=r"point k03.*JSON list; expected a JSON object"):
        decode_json_columns(frame)


def test_metric_and_missing_metric(df):
    flops = metric(df, "flops")
    assert flops.iloc[:12].tolist() == [65536.0] * 12 and math.isnan(flops.iloc[12])
    with pytest.raises(AnalysisError, match=r"'bytes'.*reported are: flops, peak_flops_per_cyc"):
        metric(df, "bytes")


def test_compute_set_frame(df):
    sets = compute_set_frame(df)
    assert list(sets.columns) == ["key", "workload", "repeat", BW, TILES, "compute_set", "cycles"]
    assert len(sets) == 12 * 2  # the failed point has none
    conv = sets[sets["compute_set"] == "mm/Convolve"].set_index([BW, TILES])["cycles"]
    for bw, tiles in product(BWS, TILE_COUNTS):
        assert conv[(bw, tiles)] == pytest.approx(24000 / tiles - 40)
    assert set(sets.loc[sets["compute_set"] == "mm/Reduce", "cycles"]) == {40.0}


# ---------------------------------------------------------------- derived columns
def test_speedup_matches_other_axes(df):
    out = add_speedup(df, {BW: 1})
    for _, row in out.iloc[:12].iterrows():
        expected = total(1, row[TILES]) / total(row[BW], row[TILES])
        assert row["speedup"] == pytest.approx(expected, rel=1e-12)
    assert math.isnan(out.iloc[12]["speedup"])  # failed point
    assert "speedup" not in df.columns  # a copy


def test_speedup_single_baseline_and_phase_column(df):
    out = add_speedup(df, {BW: 2, TILES: 8}, column="internal_exchange", name="x_speedup")
    expected = [(4800 / 2) / (4800 / bw) for bw, _ in product(BWS, TILE_COUNTS)]
    assert out["x_speedup"].iloc[:12].to_numpy() == pytest.approx(expected)


def test_speedup_bad_baseline(df):
    with pytest.raises(AnalysisError, match=r"'tile.clock_hz' is not an axis.*axes are: "):
        add_speedup(df, {"tile.clock_hz": 1})
    with pytest.raises(AnalysisError, match=r"matches no point.*exchange.bytes_per_cycle: \[1,"):
        add_speedup(df, {BW: 3})
    with pytest.raises(AnalysisError, match="matches no point"):  # only the failed point
        add_speedup(df, {BW: 16})


def test_add_flops(df):
    out = add_flops(df, clock_hz=1.0e9)
    for _, row in out.iloc[:12].iterrows():
        per_cycle = 65536 / total(row[BW], row[TILES])
        assert row["flops_per_cycle"] == pytest.approx(per_cycle)
        assert row["peak_flops_per_cycle"] == 16 * row[TILES]
        assert row["fraction_of_peak"] == pytest.approx(per_cycle / (16 * row[TILES]))
        assert row["flops_per_second"] == pytest.approx(per_cycle * 1e9)
    assert out.iloc[12][["flops_per_cycle", "fraction_of_peak"]].isna().all()


def test_add_flops_without_peak_or_clock(df):
    out = add_flops(df, peak_metric="none_reported")
    assert out["fraction_of_peak"].isna().all()
    assert "flops_per_second" not in out.columns  # no clock axis, argument or metric
    with pytest.raises(AnalysisError, match="reports the metric 'macs'"):
        add_flops(df, flops_metric="macs")


# ------------------------------------------------------------------------ effects
def test_pair_ratios_give_each_doubling(df):
    ratios = pair_ratios(df, BW, "internal_exchange")
    assert list(ratios.columns) == [TILES, "workload", "from", "to", "before", "after", "ratio"]
    # the failed bw=16 point gives no 8 -> 16 pair
    assert len(ratios) == 3 * len(TILE_COUNTS)
    assert ratios["ratio"].to_numpy() == pytest.approx(0.5)
    totals = pair_ratios(df, BW).set_index([TILES, "from"])["ratio"]
    assert totals[(8, 2)] == pytest.approx(total(4, 8) / total(2, 8))


def test_axis_effects(df):
    eff = axis_effects(df).set_index(["axis", "value"])
    row = eff.loc[(TILES, 16)]
    expected = np.exp(np.mean([np.log(total(bw, 16) / total(bw, 4)) for bw in BWS]))
    assert row["vs_first"] == pytest.approx(expected)
    assert row["matched"] == 4 and row["points"] == 4
    assert row["mean"] == pytest.approx(np.mean([total(bw, 16) for bw in BWS]))
    assert eff.loc[(BW, 1), "vs_first"] == pytest.approx(1.0)
    assert eff.loc[(BW, 16), "points"] == 0 and math.isnan(eff.loc[(BW, 16), "vs_first"])


# -------------------------------------------------------------------------- plots
def test_plot_cycles_lines_and_labels(df, tmp_path):
    path = tmp_path / "cycles.png"
    fig = plot_cycles(df, x=BW, hue=TILES, path=path)
    ax = fig.axes[0]
    assert len(ax.get_lines()) == len(TILE_COUNTS)
    assert ax.get_xlabel() == BW and ax.get_ylabel() == "total cycles"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        f"{TILES}={t}" for t in TILE_COUNTS
    ]
    line = ax.get_lines()[1]  # tiles = 8
    assert list(line.get_xdata()) == [1, 2, 4, 8]
    assert line.get_ydata() == pytest.approx([total(bw, 8) for bw in BWS])
    assert path.stat().st_size > 0


def test_plot_cycles_mean_over_the_other_axis(df):
    fig = plot_cycles(df, x=TILES, y="compute")
    ax = fig.axes[0]
    (line,) = ax.get_lines()
    assert line.get_ydata() == pytest.approx([24000 / t for t in TILE_COUNTS])
    assert "mean over exchange.bytes_per_cycle" in ax.get_title()


def test_plot_phases_bars(df):
    fig = plot_phases(df, by=BW)
    ax = fig.axes[0]
    # three phases are non-zero (compute, internal exchange, sync); bw=16 has no ok
    # point, so no bar
    assert len(ax.patches) == 3 * len(BWS)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "compute",
        "internal exchange",
        "sync",
    ]
    tops = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), patch.get_y() + patch.get_height())
    expected = [np.mean([total(bw, t) for t in TILE_COUNTS]) for bw in BWS]
    assert [tops[i] for i in range(4)] == pytest.approx(expected)
    assert ax.get_xlabel() == BW and ax.get_ylabel() == "cycles summed over tiles"


def test_plot_phases_legend_is_beside_the_bars(df):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    fig = plot_phases(df, by=BW)
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # right of the axes: covers no bar
    assert legend.x1 <= fig.bbox.x1  # and inside the figure


def test_plot_phases_per_tile(df):
    frame = df.assign(num_tiles=df[TILES].astype(float))
    ax = plot_phases(frame, by=TILES).axes[0]
    assert ax.get_ylabel() == "tile-average cycles"
    tops = {}
    for patch in ax.patches:
        x = round(patch.get_x() + patch.get_width() / 2)
        tops[x] = max(tops.get(x, 0.0), patch.get_y() + patch.get_height())
    expected = [np.mean([total(bw, t) / t for bw in BWS]) for t in TILE_COUNTS]
    assert [tops[i] for i in range(3)] == pytest.approx(expected)
    with pytest.raises(AnalysisError, match="per_tile needs a 'num_tiles' column"):
        plot_phases(df, by=TILES, per_tile=True)


def test_plot_speedup_starts_at_one(df):
    fig = plot_speedup(df, x=BW, hue=TILES)
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if ln.get_label().startswith(TILES)]
    assert len(lines) == len(TILE_COUNTS)
    for line, tiles in zip(lines, TILE_COUNTS, strict=True):
        expected = [total(1, tiles) / total(bw, tiles) for bw in BWS]
        assert line.get_ydata() == pytest.approx(expected)
    assert ax.get_ylabel() == "speed-up of total cycles"


def test_plot_flops_percent_of_peak(df):
    fig = plot_flops(df, x=TILES)
    ax = fig.axes[0]
    (line,) = ax.get_lines()
    expected = [100 * np.mean([65536 / total(bw, t) / (16 * t) for bw in BWS]) for t in TILE_COUNTS]
    assert line.get_ydata() == pytest.approx(expected)
    assert ax.get_ylabel() == "% of peak flops"


def test_plot_errors(df, tmp_path):
    with pytest.raises(AnalysisError, match=r"x 'tiles' is not an axis.*exchange.bytes_per_cyc"):
        plot_cycles(df, x="tiles")
    with pytest.raises(AnalysisError, match=r"hue .* is the x axis"):
        plot_cycles(df, x=BW, hue=BW)
    with pytest.raises(AnalysisError, match=r"suffix '.txt' is not supported"):
        plot_phases(df, by=BW, path=tmp_path / "p.txt")
    with pytest.raises(AnalysisError, match="no point ran"):
        plot_cycles(df[df["status"] != "ok"], x=BW)


# ------------------------------------------------- a real sweep and the report CLI
MATMUL = Path(__file__).resolve().parents[1] / "examples" / "notebooks" / "matmul_workload.py"
M = "workload.m"
K = N = 16


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """2 exchange rates x 2 tile counts x m in {8, 0} on ``tiny``: m = 0 fails."""
    from ipusim.sweep import load_experiment, run_sweep

    root = tmp_path_factory.mktemp("sweep")
    (root / "exp.yaml").write_text(
        f"""
name: report_test
workloads:
  - spec: {MATMUL}
    params: {{k: {K}, n: {N}}}
config: tiny
axes:
  - path: {BW}
    values: [2, 8]
  - path: {TILES}
    values: [4, 8]
  - path: {M}
    values: [8, 0]
profiles: false
"""
    )
    summary = run_sweep(load_experiment(root / "exp.yaml"), root / "out", progress=False)
    assert (summary.total, summary.failed) == (8, 4)
    return root / "out"


def test_load_results_of_a_sweep(sweep_dir):
    from ipusim.config import load_config
    from ipusim.sweep import ResultStore
    from ipusim.sweep.analysis import load_results

    tiny = load_config("tiny")
    df = load_results(sweep_dir)
    assert df.attrs["axes"] == [BW, TILES, M]
    assert axis_columns(df) == [BW, TILES, M]
    assert len(df) == 8
    ok = df[df["status"] == "ok"]
    assert sorted(ok[M].unique()) == [8]
    for _, row in ok.iterrows():
        assert row["metrics"]["flops"] == 2 * row[M] * K * N
        peak = tiny.tile.peak_flops_per_cycle_fp32 * row[TILES]
        assert row["metrics"]["peak_flops_per_cycle"] == peak
        assert row["params"] == {"k": K, "n": N, "m": row[M]}
        assert row["num_tiles"] == row[TILES]
        assert row["clock_hz"] == tiny.tile.clock_hz
        assert set(row["compute_sets"]) >= {"matmul/Convolve"}
    bad = df[df["status"] != "ok"]
    assert (bad[M] == 0).all() and bad["error"].str.contains("m=0").all()
    # the same rows as the store's
    raw = ResultStore(sweep_dir).rows()
    assert sorted(df["key"]) == sorted(raw["key"])
    assert load_results(sweep_dir, ok_only=True)["key"].tolist() == ok["key"].tolist()


def test_load_results_errors(tmp_path):
    from ipusim.sweep.analysis import load_results

    with pytest.raises(AnalysisError, match=r"'.*nowhere' does not exist; hint: run `ipusim"):
        load_results(tmp_path / "nowhere")
    with pytest.raises(AnalysisError, match="holds no results"):
        load_results(tmp_path)
    (tmp_path / "file").write_text("x")
    with pytest.raises(AnalysisError, match="is not a directory"):
        load_results(tmp_path / "file")


def test_sweep_report_command(sweep_dir, tmp_path, capsys):
    from ipusim.cli import main
    from ipusim.sweep import ResultStore

    out = tmp_path / "plots"
    assert main(["sweep", "report", str(sweep_dir), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"sweep {sweep_dir}: 8 points, 4 ok, 4 failed; workloads: matmul_workload" in text
    assert f"  {BW}: 2 value(s): 2, 8" in text and f"  {M}: 2 value(s): 0, 8" in text
    rows = ResultStore(sweep_dir).rows()
    ok = rows[rows["status"] == "ok"]
    fastest = ok.sort_values("total_cycles").iloc[0]
    block = text.split("fastest 3 point(s):\n")[1].splitlines()
    assert block[1].split() == [
        f"{int(fastest['total_cycles']):,}",
        str(fastest[BW]),
        str(fastest[TILES]),
        "8",
    ]
    assert "failed points (4):" in text and "m=0" in text
    assert f"plots (x={BW}, hue={TILES}):" in text
    for name in ("cycles.png", "phases.png", "speedup.png", "flops.png"):
        assert (out / name).stat().st_size > 0


def test_sweep_report_default_out_and_no_plots(sweep_dir, tmp_path, capsys):
    import shutil

    from ipusim.cli import main

    copy = tmp_path / "copy"
    shutil.copytree(sweep_dir, copy)
    assert main(["sweep", "report", str(copy), "--no-plots", "--top", "1"]) == 0
    text = capsys.readouterr().out
    assert "fastest 1 point(s):" in text and "plots" not in text
    assert not (copy / "report").exists()
    assert main(["sweep", "report", str(copy), "--x", TILES, "--hue", M]) == 0
    assert f"plots (x={TILES}, hue={M}):" in capsys.readouterr().out
    assert sorted(p.name for p in (copy / "report").iterdir()) == [
        "cycles.png",
        "flops.png",
        "phases.png",
        "speedup.png",
    ]


def test_sweep_report_errors(sweep_dir, tmp_path, capsys):
    from ipusim.cli import main

    assert main(["sweep", "report", str(tmp_path / "missing")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["sweep", "report", str(tmp_path)]) == 2
    assert "holds no results" in capsys.readouterr().err
    assert main(["sweep", "report", str(sweep_dir), "--x", "tiles", "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert f"--x 'tiles' is not an axis of these results; the axes are: {BW}, {TILES}, {M}" in err
    assert main(["sweep", "report", str(sweep_dir), "--x", BW, "--hue", BW]) == 2
    assert "is the same axis as --x" in capsys.readouterr().err
    (tmp_path / "f.png").write_text("")
    assert main(["sweep", "report", str(sweep_dir), "--out", str(tmp_path / "f.png")]) == 2
    assert "is a file" in capsys.readouterr().err
