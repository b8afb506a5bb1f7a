"""Analysis of sweep results: load them, derive speed-ups and flops, and plot them.

A sweep directory holds one result row per point (see ``docs/experiments.md``).
:func:`load_results` reads it into a :class:`pandas.DataFrame` with one column per
axis, named by the axis path (``"exchange.bytes_per_cycle"``, ``"workload.m"``), the
fixed result columns of :data:`RESULT_COLUMNS`, and the JSON columns ``compute_sets``
and ``metrics`` decoded into dicts (:mod:`ipusim.sweep.results`, whose public names this
module exports too). Every other function takes such a frame, so they also work on
frames built by hand::

    df = load_results("runs/exchange")
    df = add_speedup(df, {"exchange.bytes_per_cycle": 4})   # adds "speedup"
    plot_cycles(df, x="exchange.bytes_per_cycle", hue="tile.tiles_per_ipu", path="c.png")

Averages: a value plotted or tabled for one value of an axis is the mean over the
``ok`` rows with that value, over every other axis and repeat. Failed points
(``status != "ok"``) are kept in the frame but never enter a mean, a ratio or a plot.

Ratios between axis values are *matched*: a point is only compared with the point
that has the same value on every other axis (and the same workload), so
:func:`axis_effects` and :func:`pair_ratios` measure one axis at a time even when the
others change the cycles a lot.

Plots follow :mod:`ipusim.plot`: each draws into ``ax`` when given, else into a new
:class:`matplotlib.figure.Figure` made without ``pyplot``; it returns the Figure and
saves it to ``path`` (PNG, SVG or PDF, by suffix) when given.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ipusim.errors import short_repr
from ipusim.sweep.results import (
    DERIVED_COLUMNS,
    JSON_COLUMNS,
    MACHINE_COLUMNS,
    PHASE_COLUMNS,
    RESULT_COLUMNS,
    AnalysisError,
    as_hashable,
    as_number,
    axis_columns,
    axis_values,
    check_axis,
    check_column,
    compute_set_frame,
    decode_json_columns,
    is_missing,
    is_numeric_axis,
    load_results,
    metric,
    metrics_frame,
    numeric_column,
    ok_rows,
)

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "DERIVED_COLUMNS",
    "JSON_COLUMNS",
    "MACHINE_COLUMNS",
    "PHASE_COLUMNS",
    "RESULT_COLUMNS",
    "AnalysisError",
    "add_flops",
    "add_speedup",
    "axis_columns",
    "axis_effects",
    "axis_values",
    "check_axis",
    "compute_set_frame",
    "decode_json_columns",
    "is_numeric_axis",
    "load_results",
    "metric",
    "metrics_frame",
    "ok_rows",
    "pair_ratios",
    "plot_cycles",
    "plot_flops",
    "plot_phases",
    "plot_speedup",
]


# ---------------------------------------------------------------- matching
def _match_columns(df: pd.DataFrame, exclude: Iterable[str]) -> list[str]:
    """Axes (and ``workload``) a point is matched on, leaving out ``exclude``."""
    skip = set(exclude)
    cols = [c for c in axis_columns(df) if c not in skip]
    if "workload" in df.columns and "workload" not in skip:
        cols.append("workload")
    return cols


def _norm(value: Any) -> Any:
    """A value's matching key: numbers by value (4 == 4.0), missing as None."""
    if is_missing(value):
        return None
    value = as_hashable(value)
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    return value


def _keys(df: pd.DataFrame, columns: Sequence[str]) -> list[tuple[Any, ...]]:
    if not columns:
        return [()] * len(df)
    return [tuple(_norm(v) for v in row) for row in df[list(columns)].itertuples(index=False)]


def _means(df: pd.DataFrame, by: Sequence[str], column: str) -> dict[tuple[Any, ...], float]:
    """Mean of ``column`` over the ok rows of each distinct ``by`` key."""
    rows = ok_rows(df)
    values = numeric_column(rows[column], f"column {column!r}")
    sums: dict[tuple[Any, ...], list[float]] = {}
    for key, value in zip(_keys(rows, by), values, strict=True):
        if not math.isnan(value):
            sums.setdefault(key, []).append(float(value))
    return {k: float(np.mean(v)) for k, v in sums.items()}


# --------------------------------------------------------------- derived columns
def add_speedup(
    df: pd.DataFrame,
    baseline: Mapping[str, Any],
    column: str = "total_cycles",
    name: str = "speedup",
) -> pd.DataFrame:
    """A copy of ``df`` with ``name`` = baseline ``column`` / the point's ``column``.

    Parameters
    ----------
    baseline
        Axis values that pick the baseline, e.g. ``{"exchange.bytes_per_cycle": 4}``.
        Each point is compared with the baseline point that has the same value on
        every axis *not* named here (and the same workload); naming every axis gives
        one baseline for all points. Repeats of the baseline are averaged.
    column
        The cycles compared (``total_cycles`` or a phase column).

    Returns
    -------
    pandas.DataFrame
        ``df`` with the new column: > 1 where the point is faster than its baseline;
        NaN for failed points, points whose baseline did not run, and zero cycles.

    Raises
    ------
    AnalysisError
        ``baseline`` names an unknown axis, or matches no point that ran (the message
        lists the values each named axis takes).
    """
    check_column(df, column)
    if not isinstance(baseline, Mapping) or not baseline:
        raise AnalysisError(
            f"baseline: found {short_repr(baseline, 80)}; expected a mapping of axis values, e.g. "
            f"{{{axis_columns(df)[0]!r}: ...}}"
            if axis_columns(df)
            else f"baseline: found {short_repr(baseline, 80)}; expected a mapping of axis values"
        )
    for axis in baseline:
        check_axis(df, axis, "baseline axis")
    named = list(baseline)
    wanted = tuple(_norm(baseline[a]) for a in named)
    rows = ok_rows(df)
    chosen = rows[[k == wanted for k in _keys(rows, named)]]
    if chosen.empty:
        values = "; ".join(f"{a}: {axis_values(df, a)}" for a in named)
        raise AnalysisError(
            f"baseline {dict(baseline)} matches no point that ran (status ok); the axes "
            f"take these values: {values}"
        )
    match = _match_columns(df, named)
    base = _means(chosen, match, column)
    own = numeric_column(df[column], f"column {column!r}")
    ran = df.index.isin(ok_rows(df).index)
    ratio = []
    for key, value, ok in zip(_keys(df, match), own, ran, strict=True):
        reference = base.get(key, math.nan)
        good = ok and value > 0 and not math.isnan(value)
        ratio.append(reference / value if good else math.nan)
    out = df.copy()
    out[name] = np.asarray(ratio, dtype=float)
    return out


def _per_row(df: pd.DataFrame, source: float | str | None, metric_name: str) -> pd.Series | None:
    """A per-row quantity: a number, a column, or (None) a metric if any point has it."""
    if source is None:
        frame = metrics_frame(df)
        if metric_name not in frame.columns:
            return None
        return frame[metric_name].astype(float)
    if isinstance(source, str):
        check_column(df, source)
        values = [as_number(v) for v in df[source]]
        return pd.Series([math.nan if v is None else v for v in values], index=df.index)
    return pd.Series(float(source), index=df.index)


def add_flops(
    df: pd.DataFrame,
    flops_metric: str = "flops",
    peak: float | str | None = None,
    peak_metric: str = "peak_flops_per_cycle",
    clock_hz: float | str | None = None,
) -> pd.DataFrame:
    """A copy of ``df`` with the flops achieved, and against the peak where known.

    Added columns: ``flops`` (the metric ``flops_metric``: flops of one run),
    ``flops_per_cycle`` (``flops / total_cycles``), ``peak_flops_per_cycle``,
    ``fraction_of_peak`` (``flops_per_cycle / peak_flops_per_cycle``, 0..1), and, when
    the clock is known, ``clock_hz`` and ``flops_per_second``.

    Parameters
    ----------
    flops_metric
        The metric that counts the flops of a run (a workload reports it from its
        ``metrics`` function).
    peak
        Peak flops per cycle of the machine: a number, or a column name; default the
        metric ``peak_flops_per_cycle`` (NaN where no point reports it).
    clock_hz
        The clock: a number or a column (quantities such as ``"1.33 GHz"`` are read);
        default the column ``clock_hz`` (:func:`load_results` adds it), else the axis
        ``tile.clock_hz``, else the metric ``clock_hz``.

    Raises
    ------
    AnalysisError
        No point reports ``flops_metric``, or a named column is missing.
    """
    check_column(df, "total_cycles")
    flops = metric(df, flops_metric)
    cycles = numeric_column(df["total_cycles"], "column 'total_cycles'")
    per_cycle = (flops / cycles.where(cycles > 0)).astype(float)
    peaks = _per_row(df, peak, peak_metric)
    if clock_hz is None:
        clock_hz = next((c for c in ("clock_hz", "tile.clock_hz") if c in df.columns), None)
    clocks = _per_row(df, clock_hz, "clock_hz")
    out = df.copy()
    out["flops"] = flops.to_numpy()
    out["flops_per_cycle"] = per_cycle.to_numpy()
    out["peak_flops_per_cycle"] = math.nan if peaks is None else peaks.to_numpy()
    out["fraction_of_peak"] = out["flops_per_cycle"] / out["peak_flops_per_cycle"]
    if clocks is not None:
        out["clock_hz"] = clocks.to_numpy()
        out["flops_per_second"] = out["flops_per_cycle"] * out["clock_hz"]
    if "status" in out.columns:  # a failed point has no cycles to divide by
        added = ["flops_per_cycle", "fraction_of_peak"]
        added += ["flops_per_second"] if "flops_per_second" in out.columns else []
        out.loc[~out.index.isin(ok_rows(out).index), added] = math.nan
    return out


# ------------------------------------------------------------------------ effects
def pair_ratios(df: pd.DataFrame, axis: str, column: str = "total_cycles") -> pd.DataFrame:
    """Matched ratios of ``column`` between consecutive values of ``axis``.

    For each pair of neighbouring values ``a < b`` of the axis (see :func:`axis_values`)
    and each combination of the other axes (and workload) that ran with both, one row:
    the other axes' values, ``from`` (a), ``to`` (b), ``before`` and ``after`` (the mean
    of ``column`` at a and at b) and ``ratio = after / before`` (NaN when ``before``
    is 0). Doubling sweeps (1, 2, 4, 8) thus give the effect of each doubling.
    """
    check_axis(df, axis)
    check_column(df, column)
    others = _match_columns(df, [axis])
    values = axis_values(df, axis)
    means = _means(df, [*others, axis], column)
    records = []
    for a, b in itertools.pairwise(values):
        ka, kb = _norm(a), _norm(b)
        for key, before in means.items():
            if key[-1] != ka:
                continue
            after = means.get((*key[:-1], kb))
            if after is None:
                continue
            ratio = after / before if before != 0 else math.nan
            records.append((*key[:-1], a, b, before, after, ratio))
    return pd.DataFrame.from_records(
        records, columns=[*others, "from", "to", "before", "after", "ratio"]
    )


def _geomean(values: Iterable[float]) -> float:
    good = [v for v in values if v > 0 and math.isfinite(v)]
    return float(np.exp(np.mean(np.log(good)))) if good else math.nan


def axis_effects(df: pd.DataFrame, column: str = "total_cycles") -> pd.DataFrame:
    """The effect of each axis on ``column``, one row per (axis, value).

    Columns: ``axis``, ``value``, ``points`` (rows that ran with that value), ``mean``
    (mean ``column`` over them), ``vs_first`` (geometric mean, over the combinations
    of the other axes that ran with both, of ``column`` at this value / at the axis's
    first value; NaN when no combination matches, as in a ``zip`` sweep) and
    ``matched`` (how many combinations entered ``vs_first``). Axes with one value
    are left out.
    """
    check_column(df, column)
    rows = ok_rows(df)
    records = []
    for axis in axis_columns(df):
        values = axis_values(df, axis)
        if len(values) < 2:
            continue
        others = _match_columns(df, [axis])
        means = _means(df, [*others, axis], column)
        first = _norm(values[0])
        base = {k[:-1]: v for k, v in means.items() if k[-1] == first}
        axis_keys = [_norm(v) for v in rows[axis]]
        for value in values:
            kv = _norm(value)
            selected = rows[[k == kv for k in axis_keys]]
            ratios = [
                v / base[k[:-1]]
                for k, v in means.items()
                if k[-1] == kv and k[:-1] in base and base[k[:-1]] > 0
            ]
            cycles = numeric_column(selected[column], f"column {column!r}")
            records.append(
                {
                    "axis": axis,
                    "value": value,
                    "points": len(selected),
                    "mean": float(cycles.mean()) if len(selected) else math.nan,
                    "vs_first": _geomean(ratios),
                    "matched": sum(1 for r in ratios if r > 0 and math.isfinite(r)),
                }
            )
    return pd.DataFrame.from_records(
        records, columns=["axis", "value", "points", "mean", "vs_first", "matched"]
    )


# -------------------------------------------------------------------------- plots
def _figure_and_axes(ax: Axes | None, size: tuple[float, float] = (7.0, 4.5)) -> tuple[Any, Any]:
    from ipusim.plot import figure_and_axes

    return figure_and_axes(ax, size)


def _save(fig: Figure, path: str | PathLike[str] | None) -> None:
    from ipusim.plot import save_figure

    save_figure(fig, path, AnalysisError)


def _positions(values: list[Any]) -> tuple[list[float], bool]:
    """x positions of axis values: the numbers themselves, else 0, 1, 2, ..."""
    numbers = [as_number(v) for v in values]
    if values and all(n is not None and math.isfinite(n) for n in numbers):
        return [float(n) for n in numbers], True  # type: ignore[arg-type]
    return [float(i) for i in range(len(values))], False


def _label(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{int(value)}"
    return f"{value}"


def _x_axis(ax: Any, x: str, values: list[Any], logx: bool | None) -> list[float]:
    positions, numeric = _positions(values)
    if logx is None:
        logx = (
            numeric
            and len(positions) >= 3
            and min(positions) > 0
            and max(positions) / min(positions) >= 8
        )
    if logx:
        if not numeric or min(positions) <= 0:
            raise AnalysisError(f"logx: axis {x!r} has values {values}; a log scale needs > 0")
        ax.set_xscale("log", base=2)
    ax.set_xticks(positions, [_label(v) for v in values])
    ax.minorticks_off()
    ax.set_xlabel(x)
    return positions


def _others_note(df: pd.DataFrame, used: Sequence[str]) -> str:
    varying = [
        a for a in _match_columns(df, used) if len(pd.unique(ok_rows(df)[a].map(as_hashable))) > 1
    ]
    return f"\nmean over {', '.join(varying)}" if varying else ""


def _title(ax: Any, text: str) -> None:
    """A title whose second line (the axes averaged over) is set smaller."""
    ax.set_title(text, fontsize="medium")


def _lines(
    df: pd.DataFrame,
    x: str,
    hue: str | None,
    column: str,
    ax: Any,
    logx: bool | None,
) -> None:
    """One line (mean of ``column`` against ``x``) per value of ``hue``."""
    check_axis(df, x, "x")
    if hue is not None:
        check_axis(df, hue, "hue")
        if hue == x:
            raise AnalysisError(f"hue {hue!r} is the x axis; choose another axis for hue")
    check_column(df, column)
    if ok_rows(df).empty:
        raise AnalysisError("no point ran (status ok): nothing to plot")
    xs = axis_values(ok_rows(df), x)
    positions = _x_axis(ax, x, xs, logx)
    groups: list[Any] = axis_values(ok_rows(df), hue) if hue is not None else [None]
    by = [x] if hue is None else [hue, x]
    means = _means(df, by, column)
    for group in groups:
        prefix = () if hue is None else (_norm(group),)
        points = [
            (p, means[(*prefix, _norm(v))])
            for p, v in zip(positions, xs, strict=True)
            if (*prefix, _norm(v)) in means
        ]
        if not points:
            continue
        px, py = zip(*points, strict=True)
        label = None if hue is None else f"{hue}={_label(group)}"
        ax.plot(px, py, marker="o", label=label)
    if hue is not None:
        ax.legend(loc="best", fontsize="small")
    ax.grid(True, alpha=0.3)


def plot_cycles(
    df: pd.DataFrame,
    x: str,
    hue: str | None = None,
    y: str = "total_cycles",
    path: str | PathLike[str] | None = None,
    ax: Axes | None = None,
    logx: bool | None = None,
    logy: bool = False,
) -> Figure:
    """Lines of ``y`` (mean cycles) against axis ``x``, one line per value of ``hue``.

    Parameters
    ----------
    df
        Sweep results (:func:`load_results`).
    x, hue
        Axis names (column names such as ``"tile.tiles_per_ipu"``, or ``"workload"``).
    y
        The column plotted: ``total_cycles``, a phase, or any numeric column.
    logx
        Base-2 log scale on x; default when x is numeric, positive and spans 8x or more.
    logy
        Log scale on y.

    Raises
    ------
    AnalysisError
        An unknown axis (the message lists the axes) or column, or no point ran.
    """
    fig, ax = _figure_and_axes(ax)
    _lines(df, x, hue, y, ax, logx)
    if logy:
        ax.set_yscale("log")
    ax.set_ylabel(y.replace("_", " ") if y != "total_cycles" else "total cycles")
    what = "Total cycles" if y == "total_cycles" else y.replace("_", " ").capitalize()
    _title(ax, f"{what} against {x}{_others_note(df, [x] if hue is None else [x, hue])}")
    _save(fig, path)
    return fig


def plot_phases(
    df: pd.DataFrame,
    by: str,
    phases: Sequence[str] = PHASE_COLUMNS,
    per_tile: bool | None = None,
    path: str | PathLike[str] | None = None,
    ax: Axes | None = None,
) -> Figure:
    """Stacked bars of the phase cycles, one bar per value of axis ``by``.

    The phase columns of a sweep are cycles summed over the tiles of the machine. Each
    bar stacks the mean of every phase over the points with that value, divided by
    the point's ``num_tiles`` first when ``per_tile`` (tile averages, as Poplar's
    summary prints them, which compare across tile counts); phases that are zero
    everywhere are left out of the stack and the legend.

    Parameters
    ----------
    per_tile
        Divide by ``num_tiles``; default: when the column is there
        (:func:`load_results` adds it).

    Raises
    ------
    AnalysisError
        An unknown axis or phase column, ``per_tile`` without a ``num_tiles`` column,
        or no point ran.
    """
    check_axis(df, by)
    for phase in phases:
        check_column(df, phase)
    rows = ok_rows(df)
    if rows.empty:
        raise AnalysisError("no point ran (status ok): nothing to plot")
    if per_tile is None:
        per_tile = "num_tiles" in rows.columns and bool(rows["num_tiles"].notna().all())
    if per_tile:
        if "num_tiles" not in rows.columns:
            raise AnalysisError(
                "per_tile needs a 'num_tiles' column (load_results adds it from the points' "
                "configs); hint: pass per_tile=False to plot the sums over tiles"
            )
        tiles = numeric_column(rows["num_tiles"], "column 'num_tiles'")
        rows = rows.assign(**{p: numeric_column(rows[p], f"column {p!r}") / tiles for p in phases})
    values = axis_values(rows, by)
    fig, ax = _figure_and_axes(ax)
    positions = np.arange(len(values), dtype=float)
    bottom = np.zeros(len(values))
    for phase in phases:
        means = _means(rows, [by], phase)
        heights = np.array([means.get((_norm(v),), 0.0) for v in values])
        if not np.any(heights):
            continue
        ax.bar(positions, heights, bottom=bottom, label=phase.replace("_", " "), width=0.7)
        bottom += heights
    ax.set_xticks(positions, [_label(v) for v in values])
    ax.set_xlabel(by)
    ax.set_ylabel("tile-average cycles" if per_tile else "cycles summed over tiles")
    _title(ax, f"Cycles by phase against {by}{_others_note(df, [by])}")
    if bottom.any():
        from ipusim.plot import outside_legend

        outside_legend(ax)  # to the right: a stacked bar reaches any corner
    _save(fig, path)
    return fig


def plot_speedup(
    df: pd.DataFrame,
    x: str,
    baseline: Mapping[str, Any] | None = None,
    hue: str | None = None,
    column: str = "total_cycles",
    path: str | PathLike[str] | None = None,
    ax: Axes | None = None,
    logx: bool | None = None,
) -> Figure:
    """Speed-up of ``column`` against axis ``x``, one line per value of ``hue``.

    Parameters
    ----------
    baseline
        Axis values of the baseline (see :func:`add_speedup`); default the first
        value of ``x``, so every line starts at 1.

    Raises
    ------
    AnalysisError
        An unknown axis or column, a baseline that matches no point, or no point ran.
    """
    check_axis(df, x, "x")
    if ok_rows(df).empty:
        raise AnalysisError("no point ran (status ok): nothing to plot")
    if baseline is None:
        baseline = {x: axis_values(ok_rows(df), x)[0]}
    data = add_speedup(df, baseline, column=column)
    fig, ax = _figure_and_axes(ax)
    _lines(data, x, hue, "speedup", ax, logx)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    base = ", ".join(f"{k}={_label(v)}" for k, v in baseline.items())
    ax.set_ylabel(f"speed-up of {column.replace('_', ' ')}")
    _title(ax, f"Speed-up against {base}{_others_note(df, [x] if hue is None else [x, hue])}")
    _save(fig, path)
    return fig


def plot_flops(
    df: pd.DataFrame,
    x: str,
    hue: str | None = None,
    flops_metric: str = "flops",
    peak: float | str | None = None,
    path: str | PathLike[str] | None = None,
    ax: Axes | None = None,
    logx: bool | None = None,
) -> Figure:
    """Achieved flops against axis ``x``: percent of peak when the peak is known (see
    :func:`add_flops`), else flops per cycle; one line per value of ``hue``.

    Raises
    ------
    AnalysisError
        No point reports ``flops_metric``, an unknown axis, or no point ran.
    """
    data = add_flops(df, flops_metric=flops_metric, peak=peak)
    fig, ax = _figure_and_axes(ax)
    if data["fraction_of_peak"].notna().any():
        data["_percent_of_peak"] = 100.0 * data["fraction_of_peak"]
        _lines(data, x, hue, "_percent_of_peak", ax, logx)
        ax.set_ylabel("% of peak flops")
        what = "Flops achieved, % of peak"
    else:
        _lines(data, x, hue, "flops_per_cycle", ax, logx)
        ax.set_ylabel("flops per cycle")
        what = "Flops per cycle"
    ax.set_ylim(bottom=0)
    _title(ax, f"{what}{_others_note(df, [x] if hue is None else [x, hue])}")
    _save(fig, path)
    return fig
