"""Plots: files written, and the drawn data equal to the trace's."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from ipusim import ir, plot
from ipusim.config import load_config
from ipusim.errors import IpusimError
from ipusim.machine import Machine
from ipusim.profile.timeline import TraceViewError
from ipusim.tile.layout import tile_coordinates

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cfg():
    return load_config("tiny", overrides={"tile.columns": 2})


@pytest.fixture(scope="module")
def trace(cfg):
    # compute on tiles 0..6 (tile 7 idle) with distinct costs, then a sync, an
    # exchange and a second compute set
    compute = ir.Compute(name="work", vertex_tile=np.arange(7), vertex_cycles=10 * np.arange(1, 8))
    other = ir.Compute(name="other", vertex_tile=[3], vertex_cycles=[5])
    program = ir.Sequence(
        [
            compute,
            ir.Sync(name="sync"),
            ir.Exchange(name="ex", src_tile=[0], dst_tile=[5], num_bytes=[64]),
            other,
        ]
    )
    return Machine(cfg).run(program)


def test_phase_cycles_by_step(trace, tmp_path):
    path = tmp_path / "phases.png"
    fig = plot.phase_cycles_by_step(trace, path=path)
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000
    ax = fig.axes[0]
    # one filled step line per phase present, stacked: their heights add up per step
    heights = np.zeros(len(trace.records))
    labels = []
    for patch in ax.patches:
        values, edges, baseline = patch.get_data()
        assert len(edges) == len(trace.records) + 1
        heights += values - baseline
        labels.append(patch.get_label())
    assert labels == ["compute", "internal_exchange", "sync"]  # PHASES order
    expected = [r.last_cycle - r.first_cycle for r in trace.records]
    np.testing.assert_allclose(heights, expected)


def test_compute_balance_heatmap_on_the_tile_layout(trace, cfg, tmp_path):
    path = tmp_path / "heat.svg"
    fig = plot.compute_balance_heatmap(trace, "work", path=path, columns=cfg.tile.columns)
    assert b"<svg" in path.read_bytes()
    grid = np.asarray(fig.axes[0].images[0].get_array())
    # independent placement: tile i at (row, column) from ipusim.tile.layout
    column, row = tile_coordinates(cfg.tile)
    expected = np.zeros((row.max() + 1, column.max() + 1))
    expected[row, column] = trace.records[0].tile_cycles
    np.testing.assert_array_equal(grid, expected)


def test_heatmap_default_layout_is_near_square(trace, tmp_path):
    path = tmp_path / "heat.png"
    fig = plot.compute_balance_heatmap(trace, 3, path=path)  # step 3 = "other"
    assert path.read_bytes().startswith(PNG_MAGIC)
    grid = np.ma.filled(fig.axes[0].images[0].get_array(), np.nan)
    # 8 tiles, ceil(sqrt(8)) = 3 columns of ceil(8/3) = 3 rows: 9 cells, one empty;
    # only tile 3 works (column 3 // 3 = 1, row 3 % 3 = 0)
    assert grid.shape == (3, 3)
    assert np.isnan(grid).sum() == 1
    assert np.nansum(grid) == grid[0, 1] == trace.records[3].tile_cycles[3]


@pytest.mark.parametrize(
    ("step", "needle"),
    [("sync", "is a sync step"), ("nope", "no step named 'nope'"), (9, "step 9 does not exist")],
)
def test_heatmap_bad_step(trace, step, needle):
    with pytest.raises(TraceViewError, match=needle) as info:
        plot.compute_balance_heatmap(trace, step)
    assert isinstance(info.value, IpusimError)


def test_memory_histogram(tmp_path):
    used = np.arange(8) * 1000  # 0 .. 7000 B; 6000 and 7000 exceed 5000
    path = tmp_path / "mem.png"
    fig = plot.memory_per_tile_histogram(used, 5000, path=path, bins=7)
    assert path.read_bytes().startswith(PNG_MAGIC)
    ax = fig.axes[0]
    counts = [p.get_height() for p in ax.patches]
    assert len(counts) == 7 and sum(counts) == 8
    assert "2 over capacity" in ax.get_title()
    assert _legend_right_of_axes(fig)


def test_memory_histogram_bad_input():
    with pytest.raises(TraceViewError, match="non-empty 1-D"):
        plot.memory_per_tile_histogram(np.zeros((2, 2)), 10)
    with pytest.raises(TraceViewError, match="capacity"):
        plot.memory_per_tile_histogram([1, 2], 0)


def test_draws_into_a_given_axes(trace):
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot()
    assert plot.phase_cycles_by_step(trace, ax=ax) is fig
    assert len(ax.patches) == 3


def test_unsupported_suffix(trace, tmp_path):
    with pytest.raises(TraceViewError, match=r"'\.txt' is not supported"):
        plot.phase_cycles_by_step(trace, path=tmp_path / "x.txt")


def test_importing_ipusim_loads_no_matplotlib():
    code = (
        "import sys, ipusim, ipusim.plot, ipusim.report, ipusim.cli, "
        "ipusim.profile.timeline, ipusim.profile.frames; print('matplotlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def _legend_right_of_axes(fig) -> bool:
    """The legend box starts right of the axes box (so it covers no bar)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(renderer)
    return legend.x0 >= ax.get_window_extent(renderer).x1


def test_steps_are_named_and_the_legend_is_beside_the_bars(trace, tmp_path):
    fig = plot.phase_cycles_by_step(trace, path=tmp_path / "steps.png")
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert labels == [r.name for r in trace.records]
    assert _legend_right_of_axes(fig)


def test_log_scale_when_steps_span_decades(tmp_path):
    # one host copy of 200,000 cycles next to compute sets of 50..400 cycles
    cycles = [50, 400, 200_000, 120, 0]
    cats = ["OnTileExecute", "DoExchange", "StreamCopy", "OnTileExecute", "Sync"]
    fig = plot.step_cycles_bars(cats, cycles, names=list("abcde"), path=tmp_path / "s.png")
    ax = fig.axes[0]
    assert ax.get_yscale() == "log" and "log scale" in ax.get_ylabel()
    assert ax.get_ylim()[0] == pytest.approx(25)  # half the smallest non-zero bar
    # within a factor of 100: linear, unless asked
    fig = plot.step_cycles_bars(cats[:2], cycles[:2])
    assert fig.axes[0].get_yscale() == "linear"
    assert plot.step_cycles_bars(cats[:2], cycles[:2], log=True).axes[0].get_yscale() == "log"


def test_many_steps_name_only_the_longest(tmp_path):
    n = 500
    cycles = np.full(n, 10.0)
    longest = [20, 140, 260, 380, 490]  # far apart, so every one gets its label
    cycles[longest] = 1e5
    names = [f"cs{i}" for i in range(n)]
    fig = plot.step_cycles_bars(["OnTileExecute"] * n, cycles, names=names)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert len(labels) <= plot.NAMED_LARGEST
    assert {f"cs{i} ({i})" for i in longest} <= set(labels)
    positions = ax.get_xticks()
    assert np.all(np.diff(positions) >= n / (2 * plot.NAMED_LARGEST))


def test_step_names_must_match_the_steps():
    with pytest.raises(TraceViewError, match="3 cycle counts but 2 names"):
        plot.step_cycles_bars(["a", "b", "c"], [1, 2, 3], names=["x", "y"])


def test_compare_plot_legend_is_beside_the_bars(tmp_path):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from ipusim.compare import compare
    from ipusim.measured import MeasuredProfile

    measured = MeasuredProfile("m", "test", {"total": 1000.0, "sync": 10.0}, num_tiles=8)
    simulated = MeasuredProfile("s", "test", {"total": 1100.0, "sync": 12.0}, num_tiles=8)
    fig = compare(measured, simulated).plot(path=tmp_path / "c.png")
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # right of the bars, never over one
    assert legend.x1 <= fig.bbox.x1
