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
"""

from __future__ import annotations

import csv
import fnmatch
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ipusim import ir
from ipusim.errors import IpusimError

if TYPE_CHECKING:
    import pandas as pd

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

#: Phases of a profile. ``total`` is the run's total cycles, every other phase is a tile
#: average (cycles summed over tiles / tiles). ``compute`` includes idle worker threads,
#: ``compute_active`` excludes them.
PHASES: tuple[str, ...] = ("total", ir.PHASES[0], "compute_active", *ir.PHASES[1:])

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


class MeasuredProfileError(IpusimError, ValueError):
    """A measured profile cannot be read: names the source, the line or field, the value
    found and what was expected."""


@dataclass(frozen=True)
class MeasuredStep:
    """One executed step (program) of a profile.

    Attributes
    ----------
    name
        Debug name of the step (compute set, exchange, stream).
    type
        Poplar's program tag: ``OnTileExecute``, ``DoExchange``, ``StreamCopy``, ``Sync``,
        ``GlobalExchange``, ...
    cycles
        Cycles of the step (``cyclesTo - cyclesFrom``: steps laid end to end).
    program
        Program index in the graph profile, when the source has one.
    """

    name: str
    type: str
    cycles: float
    program: int | None = None


@dataclass(frozen=True)
class MeasuredProfile:
    """The cycles of one run from any source, normalised to tile averages.

    Attributes
    ----------
    source
        File path or label of where the numbers came from.
    format
        ``summary-sdk1``, ``summary-sdk2``, ``poplar-json``, ``ipusim-json``,
        ``ipusim-run`` or ``csv``.
    phases
        Phase name (one of :data:`PHASES`) -> cycles; only the phases the source has.
        ``total`` is the run's total, every other phase a tile average.
    steps
        Executed steps in order (empty when the source lists none).
    metrics
        Other named numbers (``tile_balance``, ``block_cycles``, ``tflops`` ...).
    num_tiles, clock_hz, target_type
        The target, when the source says (``target_type`` ``IPU_MODEL``, ``IPU``, ...).
    """

    source: str
    format: str
    phases: dict[str, float]
    steps: tuple[MeasuredStep, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict)
    num_tiles: int | None = None
    clock_hz: float | None = None
    target_type: str | None = None

    def __post_init__(self) -> None:
        unknown = sorted(set(self.phases) - set(PHASES))
        if unknown:
            raise MeasuredProfileError(
                f"{self.source}: unknown phase(s) {', '.join(map(repr, unknown))}; "
                f"required one of {', '.join(PHASES)}"
            )

    def frame(self) -> pd.DataFrame:
        """One row per phase, step and metric, for analysis with pandas.

        Returns
        -------
        pandas.DataFrame
            Columns ``kind`` (``phase``, ``step`` or ``metric``), ``name``, ``value`` and
            ``type`` (the step's Poplar tag; empty for phases and metrics), phases in
            :data:`PHASES` order, then steps in execution order, then metrics.
        """
        import pandas as pd

        phases = [p for p in PHASES if p in self.phases]
        n_p, n_s, n_m = len(phases), len(self.steps), len(self.metrics)
        return pd.DataFrame(
            {
                "kind": ["phase"] * n_p + ["step"] * n_s + ["metric"] * n_m,
                "name": phases + [s.name for s in self.steps] + list(self.metrics),
                "value": np.array(
                    [self.phases[p] for p in phases]
                    + [s.cycles for s in self.steps]
                    + list(self.metrics.values()),
                    dtype=float,
                ),
                "type": [""] * n_p + [s.type for s in self.steps] + [""] * n_m,
            }
        )

    def describe(self) -> str:
        """One line: source, format and target (for table headers)."""
        target = []
        if self.target_type:
            target.append(self.target_type)
        if self.num_tiles:
            target.append(f"{self.num_tiles:,} tiles")
        if self.clock_hz:
            target.append(f"{self.clock_hz / 1e9:.3g} GHz")
        where = f"; {', '.join(target)}" if target else ""
        return f"{self.source} ({self.format}{where})"


@dataclass(frozen=True)
class MeasuredPoint:
    """One row of ``measurements.csv``: a measured or recorded number.

    ``parameters`` is the ``k=v;k=v`` column parsed into a dict; parts without a key
    (free text) are joined under ``"note"``.
    """

    id: str
    source: str
    device: str
    sdk: str
    workload: str
    parameters: dict[str, str]
    metric: str
    value: float
    unit: str
    notes: str


# ---------------------------------------------------------------------------- numbers
_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def _number(token: str) -> float | None:
    """``"6,681,766"`` -> 6681766.0, ``"3,801.8"`` -> 3801.8; None if not such a number."""
    if not _NUMBER.fullmatch(token):
        return None
    return float(token.replace(",", ""))


# ---------------------------------------------------------------------------- summaries
# label (lower case, after "Total " / "Tile average ") -> phase
_PHASE_LABELS = {
    "cycles": "total",
    **{f"{names.label.lower()} cycles": phase for phase, names in ir.PHASE_NAMES.items()},
    "compute cycles (excluding idle threads)": "compute_active",
}
# other labels of the same phases (SDK versions differ), with the label they stand for
_LABEL_ALIASES = {
    "compute cycles (including idle threads)": "compute cycles",
    "exchange cycles": "ipu exchange cycles",
}
_PHASE_LABELS |= {alias: _PHASE_LABELS[label] for alias, label in _LABEL_ALIASES.items()}
# label -> metric (per-tile cycles are normalised like the phases; balances are fractions)
_METRIC_LABELS = {
    "shared structure copy cycles": "shared_structure_copy",
    "tile balance": "tile_balance",
    "thread balance": "thread_balance",
}
_SECTIONS = ("Target:", "Graph:", "Memory Usage:", "Execution:")
_LABEL_LINE = re.compile(r"^\s*(Total|Tile average)\s+(.+?):\s*(.*?)\s*$")
_APPROX_US = re.compile(r"\(approx\.?\s+(\S+)\s+microseconds\)")
_STEP_HEADER = re.compile(r"^\s*#\s+type\s+from\s+to\s+cycles\b")
_STEP_ROW = re.compile(
    r"^\s*(?P<index>\d+)\s+(?P<type>\S+)\s+(?P<from>[\d,]+)\s+(?P<to>[\d,]+)\s+"
    r"(?P<cycles>[\d,]+)\s+(?P<tiles>[\d,]+)\s+(?P<tb>[\d.]+%)\s+(?P<ob>-|[\d.]+%)"
    r"(?:  (?P<name>.*))?$"
)
_VERTEX_ROW = re.compile(r"^\s+(?P<name>\S+)\s+\((?P<count>[\d,]+) instances\):\s*(?P<value>\S+)$")


def _fail(source: str, lineno: int, line: str, expected: str) -> MeasuredProfileError:
    return MeasuredProfileError(f"{source}, line {lineno}: {line.strip()!r}: {expected}")


def _sections(lines: Sequence[str]) -> dict[str, tuple[int, int]]:
    """Section header -> (first line index after it, end index), for the known sections."""
    starts = [(i, ln.strip()) for i, ln in enumerate(lines) if ln.strip() in _SECTIONS]
    out: dict[str, tuple[int, int]] = {}
    for k, (i, name) in enumerate(starts):
        end = starts[k + 1][0] if k + 1 < len(starts) else len(lines)
        out.setdefault(name, (i + 1, end))
    return out


def _read_target(
    lines: Sequence[str], span: tuple[int, int] | None, source: str
) -> tuple[int | None, float | None, str | None]:
    """Tiles, clock (Hz) and type of a summary's Target section."""
    tiles: int | None = None
    clock: float | None = None
    ttype: str | None = None
    if span is None:
        return tiles, clock, ttype
    for i in range(*span):
        line = lines[i]
        key, sep, rest = line.strip().partition(":")
        if not sep:
            continue
        key, rest = key.strip().lower(), rest.strip()
        if key == "total tiles":
            value = _number(rest.split()[0]) if rest else None
            if value is None or value < 1 or value != int(value):
                raise _fail(source, i + 1, line, "expected a positive whole tile count")
            tiles = int(value)
        elif key == "clock speed (approx)":
            parts = rest.split()
            value = _number(parts[0]) if parts else None
            unit = parts[1].lower() if len(parts) > 1 else ""
            scale = {"hz": 1.0, "khz": 1e3, "mhz": 1e6, "ghz": 1e9}.get(unit)
            if value is None or scale is None:
                raise _fail(source, i + 1, line, "expected a clock such as '1,330.0 MHz'")
            clock = value * scale
        elif key == "type" and rest:
            ttype = rest.split()[0]
    return tiles, clock, ttype


def read_summary(
    text: str, source: str = "<text>", num_tiles: int | None = None
) -> MeasuredProfile:
    """Read the "Execution" section of a Poplar profile summary (``printProfileSummary``).

    Both Poplar layouts are read: SDK 1.x totals summed over tiles ("Total compute cycles
    ...", also ipusim's own summary) are divided by the tile count; SDK 2.x/3.x tile
    averages ("Tile average compute cycles ...") are taken as they are. Percentages are
    ignored. ipusim's "Steps" table becomes :attr:`MeasuredProfile.steps`, its "Cycles by
    vertex type" lines metrics ``vertex_cycles.<type>`` (summed over tiles, as printed).

    Parameters
    ----------
    text
        The summary text (other output around it is ignored).
    source
        Name of the text in error messages and in the profile.
    num_tiles
        Tile count when the text has no Target section ("Total Tiles:"); needed only to
        convert SDK 1.x totals. A Target section that disagrees is an error.

    Returns
    -------
    MeasuredProfile
        Format ``summary-sdk2`` when any phase is printed as a tile average, else
        ``summary-sdk1``. ``clock_hz`` from the Target section, else from "(approx N
        microseconds)" as total cycles / µs.

    Raises
    ------
    MeasuredProfileError
        Empty text, no Execution section, no phase in it, a value that is not a number,
        a phase printed twice, a malformed steps row, or totals without a tile count; each
        names the line number and the line.
    """
    if not text.strip():
        raise MeasuredProfileError(
            f"{source}: the summary is empty; expected the text of printProfileSummary "
            "with an 'Execution:' section"
        )
    lines = text.splitlines()
    sections = _sections(lines)
    if "Execution:" not in sections:
        raise MeasuredProfileError(
            f"{source}: no 'Execution:' section in {len(lines)} line(s); expected the output "
            "of printProfileSummary after a run (hint: enable the execution profile, e.g. "
            "engine option autoReport.all=true)"
        )
    tiles_t, clock_t, target_type = _read_target(lines, sections.get("Target:"), source)
    if tiles_t is not None and num_tiles is not None and tiles_t != num_tiles:
        raise MeasuredProfileError(
            f"{source}: the Target section says {tiles_t:,} tiles but {num_tiles:,} were "
            "given (--tiles); drop --tiles or give the matching count"
        )
    tiles = tiles_t if tiles_t is not None else num_tiles

    raw: dict[str, tuple[float, bool, int]] = {}  # phase -> (value, is a sum, line)
    metrics: dict[str, float] = {}
    metric_sums: set[str] = set()
    steps: list[MeasuredStep] = []
    approx_us: float | None = None
    first, end = sections["Execution:"]
    i = first
    while i < end:
        line = lines[i]
        lineno = i + 1
        i += 1
        if _STEP_HEADER.match(line):
            while i < end and re.match(r"^\s*\d", lines[i]):
                m = _STEP_ROW.match(lines[i])
                if m is None:
                    raise _fail(
                        source,
                        i + 1,
                        lines[i],
                        "expected a steps row: '#  type  from  to  cycles  tiles  tile bal  "
                        "thread/data bal  name'",
                    )
                steps.append(
                    MeasuredStep(m["name"] or "", m["type"], float(m["cycles"].replace(",", "")))
                )
                i += 1
            continue
        vm = _VERTEX_ROW.match(line)
        if vm is not None:
            value = _number(vm["value"])
            if value is None:
                raise _fail(source, lineno, line, "expected vertex cycles such as 92,000")
            metrics[f"vertex_cycles.{vm['name']}"] = value
            continue
        m = _LABEL_LINE.match(line)
        if m is None:
            continue
        prefix, label, rest = m[1], m[2].strip().lower(), m[3]
        phase = _PHASE_LABELS.get(label)
        metric = _METRIC_LABELS.get(label)
        if phase is None and metric is None:
            continue  # a line this reader does not use (it is not an error)
        token = rest.split()[0] if rest else ""
        if metric in ("tile_balance", "thread_balance"):
            value = _number(token.removesuffix("%")) if token.endswith("%") else None
            if value is None:
                raise _fail(source, lineno, line, "expected a percentage such as 83.9%")
            metrics[metric] = value / 100.0
            continue
        value = _number(token)
        if value is None:
            raise _fail(
                source,
                lineno,
                line,
                f"expected a number such as 6,681,766 or 3,801.8 after the colon, found {token!r}",
            )
        is_sum = prefix == "Total" and phase != "total"
        if metric is not None:
            metrics[metric] = value
            if is_sum:
                metric_sums.add(metric)
            continue
        assert phase is not None
        if phase in raw:
            raise _fail(
                source,
                lineno,
                line,
                f"duplicated phase {phase!r} (first on line {raw[phase][2]}); expected one "
                "Execution section with each phase once",
            )
        raw[phase] = (value, is_sum, lineno)
        if phase == "total":
            um = _APPROX_US.search(rest)
            if um is not None:
                approx_us = _number(um[1])
    if not raw:
        raise MeasuredProfileError(
            f"{source}: the 'Execution:' section (lines {first}-{end}) has no phase line; "
            "expected lines such as 'Total cycles: 6,681,766' or 'Tile average compute "
            "cycles (including idle threads): 3,801.8'"
        )
    sums = [(p, ln) for p, (_, s, ln) in raw.items() if s] + [(m, 0) for m in metric_sums]
    if sums and tiles is None:
        phase, ln = sums[0]
        raise MeasuredProfileError(
            f"{source}, line {ln}: {lines[ln - 1].strip()!r}: SDK 1.x totals are summed over "
            "tiles and need the tile count to become tile averages, but the text has no "
            "Target section ('Total Tiles:'); hint: give the tile count (--tiles 1472)"
        )
    phases = {}
    for p in PHASES:
        if p in raw:
            value, is_sum, _ = raw[p]
            phases[p] = value / tiles if is_sum and tiles else value
    for m in metric_sums:
        metrics[m] = metrics[m] / tiles  # type: ignore[operator]
    clock = clock_t
    if clock is None and approx_us and "total" in phases:
        clock = phases["total"] / approx_us * 1e6
    averaged = any(not s for p, (_, s, _) in raw.items() if p != "total")
    layout = "summary-sdk2" if averaged else "summary-sdk1"
    return MeasuredProfile(
        source=source,
        format=layout,
        phases=phases,
        steps=tuple(steps),
        metrics=metrics,
        num_tiles=tiles,
        clock_hz=clock,
        target_type=target_type,
    )


# ---------------------------------------------------------------------------- JSON / CBOR
#: ``simulation.tileCycles`` key -> phase.
_TILE_CYCLE_KEYS = {
    **{ir.PHASE_NAMES[phase].profile_key: phase for phase in ir.PHASES},
    "activeCompute": "compute_active",
}


def _load_file(path: Path) -> Any:
    """A JSON or CBOR (by suffix) file as plain Python objects."""
    try:
        if path.suffix.lower() == ".cbor":
            import cbor2

            with open(path, "rb") as f:
                return cbor2.load(f)
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise MeasuredProfileError(
            f"{path}, line {exc.lineno} column {exc.colno}: not valid JSON ({exc.msg}); "
            "expected a Poplar/ipusim execution profile"
        ) from None
    except UnicodeDecodeError as exc:
        raise MeasuredProfileError(f"{path}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise MeasuredProfileError(f"{path}: cannot be read ({exc.strerror})") from None
    except Exception as exc:  # cbor2 decode errors have no common base we can import
        raise MeasuredProfileError(
            f"{path}: not valid CBOR ({exc}); expected a profile written with profiler.format=cbor"
        ) from None


def _find_profile(directory: Path, stem: str) -> Path | None:
    for suffix in (".json", ".cbor"):
        if (directory / f"{stem}{suffix}").is_file():
            return directory / f"{stem}{suffix}"
    return None


def _field(obj: Any, path: str, source: str) -> Any:
    """``obj`` at dotted ``path``; a clear error naming the first missing field."""
    cur = obj
    done: list[str] = []
    for key in path.split("."):
        if not isinstance(cur, Mapping) or key not in cur:
            where = ".".join(done) or "the top level"
            found = sorted(cur)[:8] if isinstance(cur, Mapping) else type(cur).__name__
            raise MeasuredProfileError(
                f"{source}: missing field '{path}' (no '{key}' in {where}; found {found}); "
                "expected an execution profile with simulation.cycles, simulation.tileCycles "
                "and simulation.steps"
            )
        cur = cur[key]
        done.append(key)
    return cur


def _count(value: Any, where: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MeasuredProfileError(
            f"{source}: field '{where}' is {value!r}; required a finite number of cycles"
        )
    return float(value)


def read_poplar_json(
    path_or_obj: str | PathLike[str] | Mapping[str, Any],
    *,
    graph_profile: str | PathLike[str] | Mapping[str, Any] | None = None,
    num_tiles: int | None = None,
    clock_hz: float | None = None,
    source: str | None = None,
) -> MeasuredProfile:
    """Read a Poplar or ipusim execution profile (JSON, or CBOR for ``.cbor`` files).

    Parameters
    ----------
    path_or_obj
        An execution profile file (a file named ``execution.*`` picks up ``profile.json``
        or ``profile.cbor`` next to it), a profile directory (``execution.json`` or
        ``execution.cbor``, with ``profile.json``/``.cbor`` when present, as written by the
        engine's ``autoReport`` options) or the profile as a dict. A dict with keys
        ``executionProfile`` (and ``graphProfile``) is accepted too.
    graph_profile
        The graph profile (file or dict) giving the target: ``target.numTiles``,
        ``clockFrequency`` and ``type``.
    num_tiles, clock_hz
        The target when no graph profile gives it. Per-tile ``tileCycles`` arrays give the
        tile count themselves.
    source
        Label for errors and the profile (default the path).

    Returns
    -------
    MeasuredProfile
        ``total`` = ``simulation.cycles``; phases from ``simulation.tileCycles`` (per-tile
        arrays or sums over tiles) divided by the tile count; steps from
        ``simulation.steps`` (``cycles`` or ``cyclesTo - cyclesFrom``). Format
        ``ipusim-json`` when the profile has ipusim's ``runs`` and ``hostSeconds``, else
        ``poplar-json``.

    Raises
    ------
    MeasuredProfileError
        Unreadable file, missing ``simulation.cycles`` (the error names the field), a value
        that is not a number, or per-tile sums without a tile count.
    """
    gp: Any = graph_profile
    if isinstance(path_or_obj, Mapping):
        ep: Any = path_or_obj
        label = source or "<execution profile>"
    else:
        path = Path(path_or_obj)
        label = source or str(path)
        if path.is_dir():
            exec_path = _find_profile(path, "execution")
            if exec_path is None:
                raise MeasuredProfileError(
                    f"{path}: no execution.json or execution.cbor in this directory; expected "
                    "a profile directory written with engine option autoReport.all=true"
                )
            if gp is None:
                gp = _find_profile(path, "profile")
            path = exec_path
        elif not path.exists():
            raise MeasuredProfileError(f"{path}: no such file or directory")
        elif gp is None and path.stem == "execution":
            gp = _find_profile(path.parent, "profile")  # autoReport writes them side by side
        ep = _load_file(path)
    if isinstance(ep, Mapping) and "executionProfile" in ep:
        gp = ep.get("graphProfile", gp)
        ep = ep["executionProfile"]
    if isinstance(gp, (str, PathLike)):
        gp = _load_file(Path(gp))
    if not isinstance(ep, Mapping):
        raise MeasuredProfileError(
            f"{label}: the profile is a {type(ep).__name__}; expected a JSON object with "
            "'simulation'"
        )

    total = _count(_field(ep, "simulation.cycles", label), "simulation.cycles", label)
    target_type: str | None = None
    if isinstance(gp, Mapping) and isinstance(gp.get("target"), Mapping):
        target = gp["target"]
        gp_tiles = target.get("numTiles")
        if isinstance(gp_tiles, int) and not isinstance(gp_tiles, bool):
            if num_tiles is not None and num_tiles != gp_tiles:
                raise MeasuredProfileError(
                    f"{label}: the graph profile says {gp_tiles:,} tiles but {num_tiles:,} "
                    "were given (--tiles); drop --tiles or give the matching count"
                )
            num_tiles = gp_tiles
        clock = target.get("clockFrequency")
        if isinstance(clock, (int, float)) and clock > 0:
            clock_hz = float(clock)
        if isinstance(target.get("type"), str):
            target_type = target["type"]
    sim = ep["simulation"]
    tile_cycles = sim.get("tileCycles", {}) if isinstance(sim, Mapping) else {}
    if not isinstance(tile_cycles, Mapping):
        raise MeasuredProfileError(
            f"{label}: field 'simulation.tileCycles' is a {type(tile_cycles).__name__}; "
            "required an object of per-phase cycles"
        )
    phases: dict[str, float] = {"total": total}
    sums: dict[str, float] = {}
    for key, phase in _TILE_CYCLE_KEYS.items():
        if key not in tile_cycles:
            continue
        value = tile_cycles[key]
        where = f"simulation.tileCycles.{key}"
        if isinstance(value, list):
            arr = np.asarray(value)
            if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.number):
                raise MeasuredProfileError(
                    f"{label}: field '{where}' is not a list of numbers; required one count "
                    "per tile"
                )
            if num_tiles is None:
                num_tiles = len(arr)
            elif len(arr) != num_tiles:
                raise MeasuredProfileError(
                    f"{label}: field '{where}' has {len(arr):,} entries but the target has "
                    f"{num_tiles:,} tiles; required one count per tile"
                )
            sums[phase] = float(arr.sum())
        else:
            sums[phase] = _count(value, where, label)
    if sums and num_tiles is None:
        raise MeasuredProfileError(
            f"{label}: simulation.tileCycles holds sums over tiles and no tile count is known "
            "(no graph profile with target.numTiles); hint: put profile.json next to it or "
            "give the tile count (--tiles 1472)"
        )
    for phase in PHASES[1:]:
        if phase in sums:
            phases[phase] = sums[phase] / num_tiles  # type: ignore[operator]

    raw_steps = sim.get("steps", []) if isinstance(sim, Mapping) else []
    if not isinstance(raw_steps, list):
        raise MeasuredProfileError(
            f"{label}: field 'simulation.steps' is a {type(raw_steps).__name__}; required a list"
        )
    steps = []
    for k, s in enumerate(raw_steps):
        where = f"simulation.steps[{k}]"
        if not isinstance(s, Mapping) or not isinstance(s.get("type"), str):
            raise MeasuredProfileError(
                f"{label}: {where} has no 'type'; required an object with type, name and "
                "cyclesFrom/cyclesTo"
            )
        if "cycles" in s:
            cycles = _count(s["cycles"], f"{where}.cycles", label)
        elif "cyclesFrom" in s and "cyclesTo" in s:
            cycles = _count(s["cyclesTo"], f"{where}.cyclesTo", label) - _count(
                s["cyclesFrom"], f"{where}.cyclesFrom", label
            )
        else:
            raise MeasuredProfileError(
                f"{label}: {where} has neither 'cycles' nor 'cyclesFrom'/'cyclesTo'"
            )
        program = s.get("program")
        steps.append(
            MeasuredStep(
                str(s.get("name", "")),
                s["type"],
                cycles,
                program if isinstance(program, int) and not isinstance(program, bool) else None,
            )
        )
    is_ipusim = "runs" in ep and isinstance(sim, Mapping) and "hostSeconds" in sim
    return MeasuredProfile(
        source=label,
        format="ipusim-json" if is_ipusim else "poplar-json",
        phases=phases,
        steps=tuple(steps),
        num_tiles=num_tiles,
        clock_hz=clock_hz,
        target_type=target_type,
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
    if isinstance(path_or_text, str) and "\n" in path_or_text:
        profile = read_summary(path_or_text, "<text>", num_tiles)
        return _with_clock(profile, clock_hz)
    path = Path(path_or_text)
    if path.is_dir():
        if _find_profile(path, "execution") is not None:
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
