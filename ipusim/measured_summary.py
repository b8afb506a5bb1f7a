"""Reading Poplar's profile summary (``printProfileSummary`` text) into a profile.

Both layouts are read: SDK 1.x prints totals summed over tiles ("Total compute cycles
(including idle threads): 5,572,980"), SDK 2.x/3.x tile averages ("Tile average compute
cycles (...): 3,801.8 (0.1% of total)"). ipusim's own ``printProfileSummary`` uses the
SDK 1.x layout, with a "Steps" table.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ipusim import ir
from ipusim.measured_json import check_phases_within_total
from ipusim.measured_profile import (
    PHASES,
    MeasuredProfile,
    MeasuredProfileError,
    MeasuredStep,
    parse_number,
)

__all__ = [
    "read_summary",
]

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
            value = parse_number(rest.split()[0]) if rest else None
            if value is None or value < 1 or value != int(value):
                raise _fail(source, i + 1, line, "expected a positive whole tile count")
            tiles = int(value)
        elif key == "clock speed (approx)":
            parts = rest.split()
            value = parse_number(parts[0]) if parts else None
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
            last_from: tuple[int, float] | None = None  # (line, from) of the last row
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
                start = float(m["from"].replace(",", ""))
                stop = float(m["to"].replace(",", ""))
                if stop < start:
                    raise _fail(
                        source, i + 1, lines[i], "the step ends ('to') before it starts ('from')"
                    )
                if last_from is not None and start < last_from[1]:
                    raise _fail(
                        source,
                        i + 1,
                        lines[i],
                        f"the step starts before the step on line {last_from[0]} did; "
                        "required steps in the order they ran (cycles never decrease)",
                    )
                last_from = (i + 1, start)
                steps.append(
                    MeasuredStep(m["name"] or "", m["type"], float(m["cycles"].replace(",", "")))
                )
                i += 1
            continue
        vm = _VERTEX_ROW.match(line)
        if vm is not None:
            value = parse_number(vm["value"])
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
            value = parse_number(token.removesuffix("%")) if token.endswith("%") else None
            if value is None or not 0 <= value <= 100:
                raise _fail(source, lineno, line, "expected a percentage such as 83.9% (0-100%)")
            metrics[metric] = value / 100.0
            continue
        value = parse_number(token)
        if value is None:
            raise _fail(
                source,
                lineno,
                line,
                f"expected a number such as 6,681,766 or 3,801.8 after the colon, found {token!r}",
            )
        if value < 0:
            raise _fail(
                source,
                lineno,
                line,
                f"found {token}; required a number of cycles >= 0 (a negative count means a "
                "corrupt or hand-edited summary)",
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
                approx_us = parse_number(um[1])
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
    if "total" in phases:
        check_phases_within_total(phases, source, f"line {raw['total'][2]} and the phase lines")
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
