"""Plots of a run (matplotlib, imported only when a plot is made).

Every function draws into ``ax`` when given (a matplotlib Axes), else into a new
:class:`matplotlib.figure.Figure`; it returns the Figure and saves it to ``path``
(PNG, SVG or PDF, by suffix) when ``path`` is given. New figures are made without
``pyplot``, so plotting works without a display and leaves no global figure state;
in Jupyter the returned Figure shows as an image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ipusim import files
from ipusim.profile.timeline import TraceViewError
from ipusim.trace import PHASES, StepRecord, Trace

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "compute_balance_heatmap",
    "figure_and_axes",
    "find_record",
    "memory_per_tile_histogram",
    "outside_legend",
    "phase_cycles_by_step",
    "save_figure",
    "step_cycles_bars",
    "tile_grid",
    "wants_log_scale",
]

_FORMATS = (".png", ".svg", ".pdf")


def figure_and_axes(ax: Axes | None, size: tuple[float, float] = (8.0, 4.0)) -> tuple[Any, Any]:
    """``(figure, axes)``: those of ``ax``, or a new figure of ``size`` inches with one
    axes (no pyplot state, so plots work in scripts, servers and notebooks alike)."""
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure  # lazy: importing ipusim never loads matplotlib

    fig = Figure(figsize=size, layout="constrained")
    return fig, fig.add_subplot()


def save_figure(
    fig: Figure, path: str | PathLike[str] | None, error: type[Exception] = TraceViewError
) -> None:
    """Write ``fig`` to ``path`` (PNG, SVG or PDF by suffix); nothing when ``path`` is
    None. Another suffix raises ``error`` naming the path and the suffixes allowed.

    The file appears only once complete (:func:`ipusim.files.save_figure`); a failed
    write raises :class:`ipusim.files.FileWriteError` naming the path."""
    if path is None:
        return
    path = Path(path)
    if path.suffix.lower() not in _FORMATS:
        raise error(
            f"plot path '{path}': suffix {path.suffix!r} is not supported; required one of "
            f"{', '.join(_FORMATS)}"
        )
    files.save_figure(fig, path, what="plot")


#: Steps whose values span this ratio (largest / smallest non-zero) or more are drawn
#: on a log scale: one long host stream copy would flatten every other bar.
LOG_SPAN = 100.0
#: Up to this many steps every step is named on the x axis; beyond it only the
#: :data:`NAMED_LARGEST` longest steps are.
MAX_NAMED_STEPS = 60
NAMED_LARGEST = 12


def outside_legend(ax: Axes) -> None:
    """The legend to the right of the axes, where it cannot cover bars or lines."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small")


def wants_log_scale(values: Any) -> bool:
    """True when the positive ``values`` span :data:`LOG_SPAN` or more."""
    positive = np.asarray(values, np.float64)
    positive = positive[positive > 0]
    return bool(positive.size >= 2 and positive.max() >= LOG_SPAN * positive.min())


def _name_steps(ax: Axes, names: Sequence[str], values: np.ndarray) -> None:
    """Step names as x tick labels: every step, or the longest ones when there are many."""
    if len(names) != values.size:
        raise TraceViewError(
            f"step_cycles_bars: {values.size} cycle counts but {len(names)} names; required "
            "one name per step"
        )
    if values.size <= MAX_NAMED_STEPS:
        shown = np.arange(values.size)
    else:
        gap = values.size / (2 * NAMED_LARGEST)  # labels far enough apart to read
        picked: list[int] = []
        for i in np.argsort(-values, kind="stable"):
            if all(abs(int(i) - j) >= gap for j in picked):
                picked.append(int(i))
            if len(picked) == NAMED_LARGEST:
                break
        shown = np.sort(np.asarray(picked, np.int64))
    labels = [f"{names[i]} ({i})" if values.size > MAX_NAMED_STEPS else names[i] for i in shown]
    ax.set_xticks(shown, labels, rotation=60, ha="right", rotation_mode="anchor")
    ax.tick_params(axis="x", labelsize="small")


def step_cycles_bars(
    categories: Sequence[str],
    cycles: Any,
    path: str | PathLike[str] | None = None,
    ax: Axes | None = None,
    order: Sequence[str] | None = None,
    title: str = "Cycles per step",
    names: Sequence[str] | None = None,
    log: bool | None = None,
) -> Figure:
    """Bars of cycles per step (x = step position), coloured by category.

    One filled step line per category (fast for any number of steps): a step's bar
    is its ``cycles`` in its own category's colour. The legend sits to the right of
    the bars, so it never covers one.

    Parameters
    ----------
    categories
        Category of each step (phase, or Poplar step type).
    cycles
        Cycles of each step (same length, >= 0).
    order
        Categories in stacking and legend order; default: first appearance.
    names
        Name of each step, shown under its bar (up to :data:`MAX_NAMED_STEPS` steps;
        beyond, the :data:`NAMED_LARGEST` longest steps are named, with their
        position).
    log
        Log-scale cycle axis; default when the non-zero cycles span :data:`LOG_SPAN`
        or more, as when one host stream copy dwarfs the compute sets.
    """
    cats = np.asarray([str(c) for c in categories], dtype=object)
    values = np.asarray(cycles, np.float64).reshape(-1)
    if values.size != cats.size:
        raise TraceViewError(
            f"step_cycles_bars: {cats.size} categories but {values.size} cycle counts; "
            "required one of each per step"
        )
    if values.size and (not np.all(np.isfinite(values)) or values.min() < 0):
        raise TraceViewError("step_cycles_bars: cycles must be finite and >= 0")
    names_list = None if names is None else [str(n) for n in names]
    order_names = list(order) if order is not None else list(dict.fromkeys(cats.tolist()))
    order_names += [c for c in dict.fromkeys(cats.tolist()) if c not in order_names]
    many = names_list is not None and values.size <= MAX_NAMED_STEPS
    size = (min(16.0, max(8.0, 3.0 + 0.3 * values.size)), 5.0) if many else (9.0, 4.5)
    fig, ax = figure_and_axes(ax, size)
    edges = np.arange(values.size + 1) - 0.5
    bottom = np.zeros(values.size)
    for name in order_names:
        part = np.where(cats == name, values, 0.0)
        if not part.any():
            continue
        ax.stairs(bottom + part, edges, baseline=bottom.copy(), fill=True, label=name)
        bottom += part
    use_log = wants_log_scale(values) if log is None else bool(log)
    ax.set_xlabel("step")
    ax.set_ylabel("cycles (log scale)" if use_log else "cycles")
    ax.set_title(title)
    if values.size:
        ax.set_xlim(-0.5, values.size - 0.5)
        if use_log and (values > 0).any():
            ax.set_yscale("log")
            ax.set_ylim(bottom=float(values[values > 0].min()) / 2)
        if names_list is not None:
            _name_steps(ax, names_list, values)
        outside_legend(ax)
    save_figure(fig, path)
    return fig


def phase_cycles_by_step(
    trace: Trace, path: str | PathLike[str] | None = None, ax: Axes | None = None
) -> Figure:
    """Cycles of every step (its span ``last_cycle - first_cycle``), coloured by phase
    and named by step (see :func:`step_cycles_bars` for the names and the log scale).

    The legend lists the phases in the order of :data:`ipusim.trace.PHASES`; each step
    counts in exactly one phase.
    """
    phases = [rec.phase for rec in trace.records]
    cycles = [max(0, rec.last_cycle - rec.first_cycle) for rec in trace.records]
    names = [rec.name for rec in trace.records]
    title = f"Cycles per step by phase ({trace.config_name}, {trace.total_cycles:,} cycles)"
    return step_cycles_bars(
        phases, cycles, path=path, ax=ax, order=PHASES, title=title, names=names
    )


def find_record(trace: Trace, step: int | str) -> StepRecord:
    """The record of ``step``: a position in ``trace.records`` or a step name.

    A name run several times (a compute set in a loop) gives its first run.

    Raises
    ------
    TraceViewError
        No such step.
    """
    if isinstance(step, int | np.integer) and not isinstance(step, bool):
        if not 0 <= int(step) < len(trace.records):
            raise TraceViewError(
                f"step {int(step)} does not exist: the trace has {len(trace.records)} step "
                f"record(s) (positions 0..{len(trace.records) - 1})"
            )
        return trace.records[int(step)]
    if isinstance(step, str):
        for rec in trace.records:
            if rec.name == step:
                return rec
        names = list(dict.fromkeys(r.name for r in trace.records if r.kind == "compute"))
        raise TraceViewError(
            f"no step named {step!r} in the trace; compute steps: "
            f"{', '.join(map(repr, names[:10]))}{' ...' if len(names) > 10 else ''}"
        )
    raise TraceViewError(f"step: found {step!r}; required a record position (int) or a name")


def tile_grid(values: Any, columns: int) -> np.ndarray:
    """Per-tile values of one IPU on the tile layout: ``[rows, columns]`` float array.

    Tiles go column by column as in :mod:`ipusim.tile.layout`: tile ``i`` sits in
    column ``i // rows`` and row ``i % rows`` with ``rows = ceil(n / columns)``; cells
    with no tile are NaN.
    """
    values = np.asarray(values, np.float64).reshape(-1)
    if int(columns) < 1:
        raise TraceViewError(f"tile layout columns: found {columns}; required an int >= 1")
    rows = math.ceil(values.size / int(columns)) if values.size else 0
    cells = np.full(rows * int(columns), np.nan)
    cells[: values.size] = values
    return cells.reshape(int(columns), rows).T


def compute_balance_heatmap(
    trace: Trace,
    step: int | str,
    path: str | PathLike[str] | None = None,
    ax: Axes | None = None,
    columns: int | None = None,
    ipu: int = 0,
) -> Figure:
    """Compute cycles of every tile of one IPU in one compute step, on the tile layout.

    Parameters
    ----------
    trace
        The run.
    step
        The compute step: position in ``trace.records`` or name (first run).
    columns
        Columns of the tile layout (the config's ``tile.columns``; the trace does not
        keep it); default a near-square layout, ``ceil(sqrt(tiles_per_ipu))``.
    ipu
        Which IPU to show.
    """
    rec = find_record(trace, step)
    if rec.kind != "compute":
        raise TraceViewError(
            f"step {rec.index} '{rec.name}' is a {rec.kind} step; the balance heatmap "
            "needs a compute step"
        )
    tpi = int(trace.tiles_per_ipu)
    num_ipus = max(1, int(trace.num_tiles) // tpi)
    if not 0 <= int(ipu) < num_ipus:
        raise TraceViewError(f"ipu {ipu} does not exist: the trace has {num_ipus} IPU(s)")
    cols = math.ceil(math.sqrt(tpi)) if columns is None else int(columns)
    tile_cycles = np.asarray(rec.tile_cycles, np.int64)[int(ipu) * tpi : (int(ipu) + 1) * tpi]
    grid = tile_grid(tile_cycles, cols)
    fig, ax = figure_and_axes(ax, (7.0, 5.0))
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", origin="lower", cmap="viridis")
    fig.colorbar(image, ax=ax, label="compute cycles")
    peak = int(tile_cycles.max(initial=0))
    balance = float(tile_cycles.mean()) / peak if peak else 0.0
    ax.set_title(f"'{rec.name}' (step {rec.index}, IPU {ipu}): max {peak:,}, balance {balance:.2f}")
    ax.set_xlabel("tile column")
    ax.set_ylabel("tile row")
    save_figure(fig, path)
    return fig


def memory_per_tile_histogram(
    bytes_per_tile: Any,
    capacity: int,
    path: str | PathLike[str] | None = None,
    ax: Axes | None = None,
    bins: int = 50,
) -> Figure:
    """Histogram of memory use per tile with the tile capacity marked.

    Parameters
    ----------
    bytes_per_tile
        Bytes used on each tile (1-D, >= 0).
    capacity
        Bytes of memory per tile (> 0); tiles above it are out of memory.
    bins
        Number of histogram bins.
    """
    used = np.asarray(bytes_per_tile, np.float64)
    if used.ndim != 1 or used.size == 0:
        raise TraceViewError(
            f"memory_per_tile_histogram: bytes_per_tile has shape {used.shape}; required a "
            "non-empty 1-D array (one value per tile)"
        )
    if not np.all(np.isfinite(used)) or used.min() < 0:
        raise TraceViewError("memory_per_tile_histogram: bytes_per_tile must be finite and >= 0")
    if not capacity > 0:
        raise TraceViewError(
            f"memory_per_tile_histogram: capacity {capacity!r}; required bytes per tile > 0"
        )
    fig, ax = figure_and_axes(ax)
    top = max(float(used.max()), float(capacity))
    ax.hist(used, bins=int(bins), range=(0.0, top), color="tab:blue")
    ax.axvline(float(capacity), color="tab:red", linestyle="--", label="capacity")
    over = int(np.count_nonzero(used > capacity))
    ax.set_title(
        f"Memory per tile: {used.size:,} tiles, max {int(used.max()):,} B, {over:,} over capacity"
    )
    ax.set_xlabel("bytes")
    ax.set_ylabel("tiles")
    if wants_log_scale(np.histogram(used, bins=int(bins), range=(0.0, top))[0]):
        ax.set_yscale("log")  # a few full tiles stay visible next to many light ones
        ax.set_ylabel("tiles (log scale)")
    outside_legend(ax)
    save_figure(fig, path)
    return fig
