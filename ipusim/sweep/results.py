"""Sweep results as a table: load them, and read their axes and JSON columns.

A sweep directory holds one result row per point (see ``docs/experiments.md``).
:func:`load_results` reads it into a :class:`pandas.DataFrame` with one column per
axis, named by the axis path (``"exchange.bytes_per_cycle"``, ``"workload.m"``), the
fixed result columns of :data:`RESULT_COLUMNS`, and the JSON columns ``compute_sets``
and ``metrics`` decoded into dicts. The analysis of such a table (speed-ups, flops,
effects of each axis, plots) is :mod:`ipusim.sweep.analysis`, which also exports
everything public here.
"""

from __future__ import annotations

import json
import math
from collections.abc import Hashable, Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ipusim.errors import IpusimError, short_repr
from ipusim.ir import PHASES

__all__ = [
    "DERIVED_COLUMNS",
    "JSON_COLUMNS",
    "MACHINE_COLUMNS",
    "PHASE_COLUMNS",
    "RESULT_COLUMNS",
    "AnalysisError",
    "axis_columns",
    "axis_values",
    "check_axis",
    "compute_set_frame",
    "decode_json_columns",
    "is_numeric_axis",
    "load_results",
    "metric",
    "metrics_frame",
    "ok_rows",
]

#: Cycle phases of a result row, in stacking order.
PHASE_COLUMNS: tuple[str, ...] = PHASES

#: Columns of a result row that are not axes.
RESULT_COLUMNS: tuple[str, ...] = (
    "point",
    "key",
    "workload",
    "repeat",
    "config",
    "params",
    "config_hash",
    "workload_hash",
    "ipusim_version",
    "status",
    "error",
    "check",
    "total_cycles",
    *PHASE_COLUMNS,
    "compute_active",
    "memory_peak_bytes",
    "host_seconds",
    "compute_sets",
    "metrics",
)

#: Result columns holding JSON objects (decoded into dicts by :func:`load_results`).
JSON_COLUMNS: tuple[str, ...] = ("params", "compute_sets", "metrics")

#: Columns :func:`load_results` adds from each point's machine config.
MACHINE_COLUMNS: tuple[str, ...] = ("num_tiles", "clock_hz")

#: Columns the functions of this module add; never taken for axes.
DERIVED_COLUMNS: tuple[str, ...] = (
    *MACHINE_COLUMNS,
    "speedup",
    "flops",
    "flops_per_cycle",
    "peak_flops_per_cycle",
    "fraction_of_peak",
    "flops_per_second",
)

_HINT_RUN = "hint: run `ipusim sweep EXP.yaml --out DIR` to fill it"


class AnalysisError(IpusimError, ValueError):
    """Sweep results cannot be loaded or analysed as asked (missing directory, unknown
    axis or column, malformed JSON, a baseline that matches no point)."""


# ------------------------------------------------------------------------- loading
def _short(value: Any) -> str:
    return short_repr(value, 80)


def _row_label(df: pd.DataFrame, index: Hashable) -> str:
    if "key" in df.columns:
        return f"point {df.at[index, 'key']!s}"
    return f"row {index!r}"


def _decode_one(value: Any, column: str, label: str) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, bytes | bytearray):
        value = value.decode("utf-8", errors="replace")
    if is_missing(value) or (isinstance(value, str) and not value.strip()):
        return {}
    if not isinstance(value, str):
        raise AnalysisError(
            f"column '{column}' of {label}: found {_short(value)} "
            f"({type(value).__name__}); expected a JSON object (text) or a dict"
        )
    try:
        decoded = json.loads(value)
    except json.JSONDecodeError as exc:
        raise AnalysisError(
            f"column '{column}' of {label}: {_short(value)} is not valid JSON ({exc.msg} at "
            f'character {exc.pos}); expected a JSON object such as {{"name": 123}}'
        ) from None
    if decoded is None:
        return {}
    if not isinstance(decoded, dict):
        raise AnalysisError(
            f"column '{column}' of {label}: {_short(value)} is a JSON "
            f"{type(decoded).__name__}; expected a JSON object"
        )
    return decoded


def decode_json_columns(df: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``df`` whose :data:`JSON_COLUMNS` hold dicts instead of JSON text.

    Missing values (a failed point) become empty dicts; dicts are kept as they are.

    Raises
    ------
    AnalysisError
        A value is not valid JSON or not a JSON object (the message names the column
        and the point's key).
    """
    out = df.copy()
    for column in JSON_COLUMNS:
        if column in out.columns:
            out[column] = pd.Series(
                [_decode_one(v, column, _row_label(out, i)) for i, v in out[column].items()],
                index=out.index,
                dtype=object,
            )
    return out


def as_hashable(value: Any) -> Any:
    """Axis values that are lists or mappings (shapes, option sets) as JSON text."""
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, sort_keys=True)
    return value


def _experiment_file(path: Path) -> dict[str, Any] | None:
    """The experiment as the sweep stored it (``experiment.json``), or None."""
    try:
        data = json.loads((path / "experiment.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _machine_columns(df: pd.DataFrame, experiment: Mapping[str, Any]) -> pd.DataFrame | None:
    """``num_tiles`` and ``clock_hz`` of every row, from its machine config.

    A row's config is its base (the ``config`` column) with the experiment's
    ``config.set`` and the row's values of the config-field axes. None when a config
    cannot be rebuilt (a base file moved, the experiment is not readable).
    """
    from ipusim.config import load_config, with_overrides
    from ipusim.sweep.experiment import Experiment, layout_overrides

    fields = {k: v for k, v in experiment.items() if k in Experiment.model_fields}
    try:
        exp = Experiment.model_validate(fields)
    except ValueError:
        return None
    field_axes = [a.path for a in exp.axes if a.kind == "field" and a.path in df.columns]
    bases: dict[str, Any] = {}
    machines: dict[str, tuple[float, float]] = {}
    values = []
    for _, row in df.iterrows():
        base = str(row["config"]) if "config" in df.columns else exp.config.base
        overrides = {**exp.config.set, **{a: _plain(row[a]) for a in field_axes}}
        cache = json.dumps([base, overrides], sort_keys=True, default=str)
        if cache not in machines:
            try:
                if base not in bases:
                    bases[base] = load_config(exp.resolve_config(base))
                cfg = with_overrides(bases[base], layout_overrides(bases[base], overrides))
            except (IpusimError, OSError, ValueError):
                return None
            machines[cache] = (float(cfg.num_tiles), float(cfg.tile.clock_hz))
        values.append(machines[cache])
    return pd.DataFrame(values, columns=list(MACHINE_COLUMNS), index=df.index)


def load_results(
    out_dir: str | PathLike[str], ok_only: bool = False, all_versions: bool = False
) -> pd.DataFrame:
    """The results of a sweep directory, one row per point.

    Parameters
    ----------
    out_dir
        The directory ``ipusim sweep`` wrote (its ``--out``).
    ok_only
        Keep only the points whose ``status`` is ``"ok"``.
    all_versions
        Also keep the rows of earlier versions of the experiment run into the same
        directory (another workload file, config or grid). By default only the points
        of the experiment as last run are read (the keys in ``experiment.json``), so a
        failed row of an older workload version does not show up.

    Returns
    -------
    pandas.DataFrame
        The rows of :class:`ipusim.sweep.ResultStore` with ``params``,
        ``compute_sets`` and ``metrics`` decoded into dicts, axis values that are
        lists or mappings turned into JSON text (so that they can be grouped), and,
        when the machine config of every point can be rebuilt from the stored
        experiment, ``num_tiles`` (tiles of the whole machine) and ``clock_hz``.
        ``df.attrs["axes"]`` lists the axis columns, ``df.attrs["out_dir"]`` the
        directory and ``df.attrs["other_versions"]`` how many stored rows of other
        versions were left out.

    Raises
    ------
    AnalysisError
        ``out_dir`` does not exist, is not a directory, or holds no results; a JSON
        column is malformed.
    """
    path = Path(out_dir)
    if not path.exists():
        raise AnalysisError(f"sweep directory '{path}' does not exist; {_HINT_RUN}")
    if not path.is_dir():
        raise AnalysisError(f"'{path}' is not a directory; expected a sweep output directory")
    from ipusim.sweep import ResultStore  # lazy: the sweep core imports more than we need

    store = ResultStore(path)
    keys = None if all_versions else store.experiment_keys()
    rows = store.rows(keys)
    other_versions = 0 if keys is None else len(store.done_keys() - set(keys))
    if rows is None or len(rows) == 0:
        raise AnalysisError(f"sweep directory '{path}' holds no results; {_HINT_RUN}")
    experiment = _experiment_file(path)
    axes = rows.attrs.get("axes")
    if axes is None and experiment is not None:
        axes = [a.get("path") for a in experiment.get("axes") or [] if isinstance(a, dict)]
    df = decode_json_columns(rows.reset_index(drop=True))
    df.attrs = {}
    axes = [a for a in axes if a in df.columns] if axes is not None else axis_columns(df)
    for column in axes:
        df[column] = df[column].map(as_hashable)
    machine = _machine_columns(df, experiment) if experiment is not None else None
    if machine is not None:
        df = pd.concat([df, machine], axis=1)
    if ok_only:
        df = ok_rows(df).reset_index(drop=True)
    df.attrs["axes"] = list(axes)
    df.attrs["out_dir"] = str(path)
    df.attrs["other_versions"] = other_versions
    return df


# --------------------------------------------------------------------------- axes
def axis_columns(df: pd.DataFrame) -> list[str]:
    """The axis columns of ``df``, in column order.

    ``df.attrs["axes"]`` when :func:`load_results` set it (the columns still present),
    else every column that is neither a result column (:data:`RESULT_COLUMNS`), a
    derived one (:data:`DERIVED_COLUMNS`) nor private (leading ``_``).
    """
    known = df.attrs.get("axes")
    if known is not None:
        return [c for c in known if c in df.columns]
    skip = set(RESULT_COLUMNS) | set(DERIVED_COLUMNS)
    return [c for c in df.columns if isinstance(c, str) and c not in skip and c[:1] != "_"]


def check_axis(df: pd.DataFrame, name: str, role: str = "axis") -> None:
    """Raise an :class:`AnalysisError` listing the axes unless ``name`` is one of them
    (or ``"workload"``); ``role`` names the argument in the message."""
    axes = axis_columns(df)
    if name in axes or (name == "workload" and "workload" in df.columns):
        return
    listed = ", ".join(axes) if axes else "none"
    raise AnalysisError(
        f"{role} {name!r} is not an axis of these results; the axes are: {listed}"
        + ("; 'workload' may also be used" if "workload" in df.columns else "")
    )


def check_column(df: pd.DataFrame, name: str) -> None:
    """Raise an :class:`AnalysisError` listing the numeric columns when ``name`` is not a
    column of ``df``."""
    if name not in df.columns:
        numeric = [
            c for c in df.columns if isinstance(c, str) and pd.api.types.is_numeric_dtype(df[c])
        ]
        raise AnalysisError(
            f"column {name!r} is not in the results; numeric columns: {', '.join(numeric)}"
        )


def as_number(value: Any) -> float | None:
    """``value`` as a float: a number, a numeric string or a quantity ("1.33 GHz")."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float | np.integer | np.floating):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        from ipusim.units import UnitError, parse_quantity

        for kind in ("hertz", "bytes", "bytes_per_second", "seconds"):
            try:
                return float(parse_quantity(value, kind))  # type: ignore[arg-type]
            except UnitError:
                continue
    return None


def _sort_key(value: Any) -> tuple[int, float, str]:
    number = as_number(value)
    if number is not None and math.isfinite(number):
        return (0, number, "")
    return (1, 0.0, str(value))


def _plain(value: Any) -> Any:
    """numpy scalars as Python numbers (for messages and labels)."""
    return value.item() if isinstance(value, np.generic) else value


def is_missing(value: Any) -> bool:
    """None, NaN or pandas' NA."""
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def axis_values(df: pd.DataFrame, axis: str) -> list[Any]:
    """The distinct values of ``axis`` in ``df``, numbers (and quantities) in numeric
    order, then the rest by their text; missing values are left out."""
    check_axis(df, axis)
    values = [_plain(v) for v in pd.unique(df[axis].map(as_hashable)) if not is_missing(v)]
    return sorted(values, key=_sort_key)


def is_numeric_axis(df: pd.DataFrame, axis: str) -> bool:
    """Whether every value of ``axis`` is a number or a quantity such as ``"1.33 GHz"``."""
    values = axis_values(df, axis)
    return bool(values) and all(as_number(v) is not None for v in values)


def ok_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The rows of points that ran (``status == "ok"``; all rows without a status)."""
    if "status" not in df.columns:
        return df
    return df[(df["status"] == "ok").fillna(False).astype(bool)]


def numeric_column(series: pd.Series, what: str) -> pd.Series:
    """``series`` as numbers; an :class:`AnalysisError` naming ``what`` if a value is not."""
    out = pd.to_numeric(series, errors="coerce")
    bad = out.isna() & series.notna()
    if bad.any():
        first = series[bad].iloc[0]
        raise AnalysisError(f"{what}: found {_short(first)}; expected numbers")
    return out.astype(float)


# ------------------------------------------------------------------ JSON columns
def _dicts(df: pd.DataFrame, column: str) -> list[dict[str, Any]]:
    check_column(df, column)
    return [_decode_one(v, column, _row_label(df, i)) for i, v in df[column].items()]


def metrics_frame(df: pd.DataFrame) -> pd.DataFrame:
    """One column per metric name reported by any point, aligned with ``df``'s index;
    NaN where a point did not report the metric."""
    dicts = _dicts(df, "metrics")
    frame = pd.DataFrame.from_records(dicts, index=df.index)
    return frame.apply(pd.to_numeric, errors="coerce") if len(frame.columns) else frame


def metric(df: pd.DataFrame, name: str) -> pd.Series:
    """The metric ``name`` of every point (float; NaN where not reported).

    Raises
    ------
    AnalysisError
        No point reports ``name`` (the message lists the metrics that are reported).
    """
    frame = metrics_frame(df)
    if name not in frame.columns:
        have = ", ".join(map(str, frame.columns)) or "none"
        raise AnalysisError(
            f"no point reports the metric {name!r}; the metrics reported are: {have}; hint: "
            "return it from the workload's metrics function (Workload(metrics=...))"
        )
    return frame[name].astype(float).rename(name)


def compute_set_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The cycles of each compute set of each point, one row per (point, compute set).

    Columns: ``key`` (when ``df`` has it), ``workload``, ``repeat``, the axes, then
    ``compute_set`` and ``cycles``. Failed points have no compute sets and give no rows.
    """
    dicts = _dicts(df, "compute_sets")
    ids = [c for c in ("key", "workload", "repeat") if c in df.columns] + axis_columns(df)
    records = []
    for (_, row), sets in zip(df[ids].iterrows(), dicts, strict=True):
        for name, cycles in sets.items():
            records.append({**row.to_dict(), "compute_set": str(name), "cycles": cycles})
    out = pd.DataFrame.from_records(records, columns=[*ids, "compute_set", "cycles"])
    out["cycles"] = numeric_column(out["cycles"], "column 'compute_sets' (cycles)")
    return out
