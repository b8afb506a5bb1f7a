"""Measured (or recorded) cycle profiles, read into one typed object.

A :class:`MeasuredProfile` holds the cycles of one run per *phase*, per *step* and any
other named numbers (*metrics*), whatever the source was:

* a Poplar profile summary (``printProfileSummary`` text) in either layout: SDK 1.x prints
  totals summed over tiles ("Total compute cycles (including idle threads): 5,572,980"),
  SDK 2.x/3.x tile averages ("Tile average compute cycles (...): 3,801.8 (0.1% of total)").
  ipusim's own ``printProfileSummary`` uses the SDK 1.x layout, with a "Steps" table;
* a Poplar or ipusim execution profile (JSON or CBOR, optionally with the graph profile,
  or a profile directory written by the engine's ``autoReport`` options);
* an ipusim :class:`~ipusim.trace.Trace` (:func:`measured_from_trace`);
* rows of the calibration table ``measurements.csv`` (:func:`read_measurements_csv`,
  :func:`profile_from_points`).

Normalisation
-------------
``phases["total"]`` is the run's total cycles. Every other phase is a *tile average*:
cycles summed over all tiles divided by the number of tiles, which is what SDK 2.x prints.
Totals over tiles (SDK 1.x summaries, execution profiles, traces) are divided by the tile
count of the source (its Target section or graph profile, else the ``num_tiles`` argument).

The profile types are in :mod:`ipusim.measured_profile`, the summary reader in
:mod:`ipusim.measured_summary`, the JSON/CBOR reader in :mod:`ipusim.measured_json`; this
module reads traces and the calibration table, and sniffs the format.
"""

from __future__ import annotations

import csv
import fnmatch
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ipusim.measured_json import find_profile, read_poplar_json
from ipusim.measured_profile import (
    PHASES,
    MeasuredPoint,
    MeasuredProfile,
    MeasuredProfileError,
    MeasuredStep,
)
from ipusim.measured_summary import read_summary

if TYPE_CHECKING:
    from ipusim.trace import Trace

__all__ = [
    "CSV_COLUMNS",
    "PHASES",
    "MeasuredPoint",
    "MeasuredProfile",
    "MeasuredProfileError",
    "MeasuredStep",
    "measured_from_trace",
    "profile_from_points",
    "read_measurements_csv",
    "read_poplar_json",
    "read_profile",
    "read_summary",
]


#: Columns of ``measurements.csv`` in the calibration data.
CSV_COLUMNS = (
    "id",
    "source",
    "device",
    "sdk",
    "workload",
    "parameters",
    "metric",
    "value",
    "unit",
    "notes",
)


# ---------------------------------------------------------------------------- traces
def measured_from_trace(trace: Trace, source: str = "<run>") -> MeasuredProfile:
    """The profile of an ipusim run (format ``ipusim-run``).

    Phases are ``Trace.totals`` divided by ``trace.num_tiles``; ``total`` is
    ``trace.total_cycles``. Step cycles are laid end to end exactly as in the execution
    profile (:mod:`ipusim.profile.execution`: each step is charged the cycles by which it
    pushed the end of the run further, the last step reaches the run's end), so a run and
    its own execution profile or summary compare with zero error. They differ from
    ``record.cycles`` only where consecutive steps overlap.

    Parameters
    ----------
    trace
        The trace of one run (``engine.getTrace()``, ``Machine.run``).
    source
        Label of the run.
    """
    from ipusim.profile.execution import step_type

    tiles = int(trace.num_tiles)
    totals = trace.totals
    phases = {"total": float(trace.total_cycles)}
    for phase in PHASES[1:]:
        phases[phase] = totals[phase] / tiles
    records = trace.records
    first = np.fromiter((r.first_cycle for r in records), np.int64, len(records))
    last = np.fromiter((r.last_cycle for r in records), np.int64, len(records))
    last = np.where(first <= last, last, 0)
    ends = np.maximum.accumulate(np.maximum(last, 0)) if len(records) else last
    starts = np.concatenate(([0], ends[:-1])) if len(records) else ends
    cycles = ends - starts
    if len(records) and ends[-1] < trace.total_cycles:
        cycles[-1] += trace.total_cycles - ends[-1]
    steps = tuple(
        MeasuredStep(r.name, step_type(r.kind), float(c), int(r.program_id))
        for r, c in zip(records, cycles.tolist(), strict=True)
    )
    return MeasuredProfile(
        source=source,
        format="ipusim-run",
        phases=phases,
        steps=steps,
        num_tiles=tiles,
        clock_hz=float(trace.clock_hz),
        target_type="IPU_MODEL",
    )


# ---------------------------------------------------------------------------- CSV
#: Units of ``measurements.csv`` whose values count something and cannot be negative.
_COUNT_UNITS = frozenset(
    {"cycles", "cycle", "bytes", "byte", "s", "ms", "us", "ns", "seconds", "tiles", "flops"}
)
_KEY = re.compile(r"[A-Za-z_][\w.\-]*")


def _parameters(text: str) -> dict[str, str]:
    """``"rows=10;cols=5;free text"`` -> ``{"rows": "10", "cols": "5", "note": "free text"}``."""
    out: dict[str, str] = {}
    notes = []
    for part in text.split(";"):
        key, sep, value = part.partition("=")
        if sep and _KEY.fullmatch(key.strip()):
            out[key.strip()] = value.strip()
        elif part.strip():
            notes.append(part.strip())
    if notes:
        out["note"] = "; ".join(notes)
    return out


def read_measurements_csv(path: str | PathLike[str]) -> list[MeasuredPoint]:
    """Read the 10-column calibration table (``measurements.csv``).

    Parameters
    ----------
    path
        The CSV file (columns :data:`CSV_COLUMNS`, any order, header first).

    Returns
    -------
    list of MeasuredPoint
        One per row, in file order; ``value`` as a float, ``parameters`` parsed.

    Raises
    ------
    MeasuredProfileError
        Missing columns (named), an empty or duplicated id, or a value that is not a
        number (naming the row id, line and column).
    """
    path = Path(path)
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            header = list(reader.fieldnames or [])
            missing = [c for c in CSV_COLUMNS if c not in header]
            if missing:
                raise MeasuredProfileError(
                    f"{path}, line 1: missing column(s) {', '.join(missing)}; found "
                    f"{', '.join(header) or 'no header'}; required {', '.join(CSV_COLUMNS)}"
                )
            points: list[MeasuredPoint] = []
            seen: dict[str, int] = {}
            for row in reader:
                line = reader.line_num
                rid = (row.get("id") or "").strip()
                if not rid:
                    raise MeasuredProfileError(f"{path}, line {line}: empty 'id'; required a name")
                if rid in seen:
                    raise MeasuredProfileError(
                        f"{path}, line {line}: id {rid!r} repeats line {seen[rid]}; ids must "
                        "be unique"
                    )
                seen[rid] = line
                short = [c for c in CSV_COLUMNS if row.get(c) is None]
                if short:
                    raise MeasuredProfileError(
                        f"{path}, line {line}, row id {rid!r}: no value for column(s) "
                        f"{', '.join(short)}; the row has too few fields"
                    )
                text = row["value"].strip()
                try:
                    value = float(text.replace(",", ""))
                except ValueError:
                    value = math.nan
                if not math.isfinite(value):
                    raise MeasuredProfileError(
                        f"{path}, line {line}, row id {rid!r}, column 'value': {text!r} is not "
                        "a number; required a finite number such as 3623 or 0.178"
                    )
                if value < 0 and row["unit"].strip().lower() in _COUNT_UNITS:
                    raise MeasuredProfileError(
                        f"{path}, line {line}, row id {rid!r}, column 'value': {text} "
                        f"{row['unit'].strip()}; required a count >= 0 (a negative count "
                        "means a corrupt or mistyped row)"
                    )
                points.append(
                    MeasuredPoint(
                        id=rid,
                        source=row["source"],
                        device=row["device"],
                        sdk=row["sdk"],
                        workload=row["workload"],
                        parameters=_parameters(row["parameters"]),
                        metric=row["metric"].strip(),
                        value=value,
                        unit=row["unit"],
                        notes=row["notes"],
                    )
                )
    except OSError as exc:
        raise MeasuredProfileError(f"{path}: cannot be read ({exc.strerror})") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise MeasuredProfileError(f"{path}: not a readable CSV file ({exc})") from None
    return points


def profile_from_points(
    points: Iterable[MeasuredPoint],
    ids: Sequence[str] | None = None,
    source: str = "measurements.csv",
) -> MeasuredProfile:
    """The rows of a calibration table as metrics of one profile (format ``csv``).

    Each selected row is a metric named by its ``metric`` column; when several selected
    rows share a metric, each is named ``metric[id]`` (compare matches them all against
    the simulated metric ``metric``).

    Parameters
    ----------
    points
        Rows from :func:`read_measurements_csv`.
    ids
        Glob patterns of ids to keep (``"B1.*"``); None keeps every row.
    source
        Label of the profile.

    Raises
    ------
    MeasuredProfileError
        When no row matches the patterns.
    """
    points = list(points)
    if ids:
        chosen = [p for p in points if any(fnmatch.fnmatchcase(p.id, pat) for pat in ids)]
    else:
        chosen = points
    if not chosen:
        sample = ", ".join(p.id for p in points[:5])
        raise MeasuredProfileError(
            f"{source}: no row id matches {', '.join(ids or [])}; ids look like {sample}, ... "
            "(hint: --ids 'B1.*')"
        )
    counts: dict[str, int] = {}
    for p in chosen:
        counts[p.metric] = counts.get(p.metric, 0) + 1
    metrics = {
        (p.metric if counts[p.metric] == 1 else f"{p.metric}[{p.id}]"): p.value for p in chosen
    }
    label = f"{source} [{', '.join(ids)}]" if ids else source
    return MeasuredProfile(source=label, format="csv", phases={}, metrics=metrics)


# ---------------------------------------------------------------------------- sniffing
def read_profile(
    path_or_text: str | PathLike[str] | Mapping[str, Any],
    *,
    num_tiles: int | None = None,
    clock_hz: float | None = None,
) -> MeasuredProfile:
    """Read any supported profile, sniffing its format.

    Parameters
    ----------
    path_or_text
        A profile directory (``execution.json``/``.cbor`` [+ ``profile.json``], or only
        ``summary.txt``), a ``.json``/``.cbor`` execution profile, a ``.csv`` calibration
        table (every row, see :func:`profile_from_points`), a summary text file, the
        summary text itself (a string with a newline) or an execution profile dict.
    num_tiles, clock_hz
        The target when the source does not say (needed to turn totals into averages).

    Raises
    ------
    MeasuredProfileError
        A path that does not exist or a source no reader accepts.
    """
    if isinstance(path_or_text, Mapping):
        return read_poplar_json(path_or_text, num_tiles=num_tiles, clock_hz=clock_hz)
    if not isinstance(path_or_text, str | PathLike):
        raise MeasuredProfileError(
            f"read_profile: found {type(path_or_text).__name__} {path_or_text!r:.60}; required "
            "a path, the summary text or an execution profile dict"
        )
    if isinstance(path_or_text, str) and "\n" in path_or_text:
        profile = read_summary(path_or_text, "<text>", num_tiles)
        return _with_clock(profile, clock_hz)
    path = Path(path_or_text)
    if path.is_dir():
        if find_profile(path, "execution") is not None:
            return read_poplar_json(path, num_tiles=num_tiles, clock_hz=clock_hz)
        if (path / "summary.txt").is_file():
            return read_profile(path / "summary.txt", num_tiles=num_tiles, clock_hz=clock_hz)
        raise MeasuredProfileError(
            f"{path}: a directory without execution.json, execution.cbor or summary.txt; "
            "expected a profile directory written with engine option autoReport.all=true"
        )
    if not path.is_file():
        raise MeasuredProfileError(
            f"{path}: no such file or directory; expected a profile summary, execution "
            "profile (.json/.cbor), profile directory or measurements .csv"
        )
    suffix = path.suffix.lower()
    if suffix in (".json", ".cbor"):
        return read_poplar_json(path, num_tiles=num_tiles, clock_hz=clock_hz)
    if suffix == ".csv":
        return profile_from_points(read_measurements_csv(path), source=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MeasuredProfileError(
            f"{path}: not UTF-8 text; expected a profile summary (or name a CBOR profile *.cbor)"
        ) from None
    except OSError as exc:
        raise MeasuredProfileError(f"{path}: cannot be read ({exc.strerror})") from None
    if text.lstrip().startswith("{"):
        return read_poplar_json(path, num_tiles=num_tiles, clock_hz=clock_hz)
    return _with_clock(read_summary(text, str(path), num_tiles), clock_hz)


def _with_clock(profile: MeasuredProfile, clock_hz: float | None) -> MeasuredProfile:
    if clock_hz is None or profile.clock_hz is not None:
        return profile
    from dataclasses import replace

    return replace(profile, clock_hz=float(clock_hz))
