"""Reading Poplar (or ipusim) execution profiles, JSON or CBOR, into a profile.

An execution profile's ``simulation.tileCycles`` holds cycles summed over tiles per
phase; they are divided by the tile count of the graph profile beside it (or the
``num_tiles`` given). A profile directory written by the engine's ``autoReport`` options
is read whole.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from ipusim import ir
from ipusim.measured_profile import PHASES, MeasuredProfile, MeasuredProfileError, MeasuredStep

__all__ = [
    "check_phases_within_total",
    "find_profile",
    "read_poplar_json",
]

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
    except RecursionError:  # JSON or CBOR: not "not valid CBOR"
        raise MeasuredProfileError(
            f"{path}: nested too deeply to read; expected a Poplar/ipusim execution profile"
        ) from None
    except Exception as exc:  # cbor2 decode errors have no common base we can import
        raise MeasuredProfileError(
            f"{path}: not valid CBOR ({exc}); expected a profile written with profiler.format=cbor"
        ) from None


def check_phases_within_total(phases: Mapping[str, float], source: str, where: str) -> None:
    """Every tile-average phase at most the run's total (no tile can spend more cycles
    in a phase than the run lasted); a little slack for rounded printed averages.

    Raises
    ------
    MeasuredProfileError
        Naming the phase, both values and ``where`` they came from.
    """
    total = phases.get("total")
    if total is None:
        return
    for phase, value in phases.items():
        if phase != "total" and value > total * (1 + 1e-9) + 0.5:
            raise MeasuredProfileError(
                f"{source}: {where}: the tile average of phase {phase!r} is {value:,.6g} "
                f"cycles, more than the run's total of {total:,.6g}; required at most the "
                "total (hint: a wrong tile count, --tiles, makes averages too large)"
            )


def find_profile(directory: Path, stem: str) -> Path | None:
    """``<stem>.json`` or else ``<stem>.cbor`` in ``directory``, or None."""
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
    """A cycle count: a finite number, not negative."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise MeasuredProfileError(
            f"{source}: field '{where}' is {value!r}; required a finite number of cycles"
        )
    if value < 0:
        raise MeasuredProfileError(
            f"{source}: field '{where}' is {value!r}; required a number of cycles >= 0 (a "
            "negative count means a corrupt or hand-edited profile)"
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
        if not isinstance(path_or_obj, str | PathLike):
            raise MeasuredProfileError(
                f"{source or 'read_poplar_json'}: found {type(path_or_obj).__name__} "
                f"{path_or_obj!r:.60}; required a path, a profile directory or the "
                "execution profile as a dict"
            )
        path = Path(path_or_obj)
        label = source or str(path)
        if path.is_dir():
            exec_path = find_profile(path, "execution")
            if exec_path is None:
                raise MeasuredProfileError(
                    f"{path}: no execution.json or execution.cbor in this directory; expected "
                    "a profile directory written with engine option autoReport.all=true"
                )
            if gp is None:
                gp = find_profile(path, "profile")
            path = exec_path
        elif not path.exists():
            raise MeasuredProfileError(f"{path}: no such file or directory")
        elif gp is None and path.stem == "execution":
            gp = find_profile(path.parent, "profile")  # autoReport writes them side by side
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
            if arr.ndim != 1 or not np.issubdtype(arr.dtype, np.number) or arr.dtype == bool:
                raise MeasuredProfileError(
                    f"{label}: field '{where}' is not a list of numbers; required one count "
                    "per tile"
                )
            bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
            if bad.size:
                raise MeasuredProfileError(
                    f"{label}: field '{where}[{int(bad[0])}]' is {arr[bad[0]].item()!r} "
                    f"({bad.size} such tile(s)); required finite cycle counts >= 0"
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
    if num_tiles is not None and (isinstance(num_tiles, bool) or num_tiles < 1):
        raise MeasuredProfileError(
            f"{label}: the tile count is {num_tiles!r}; required a whole number >= 1"
        )
    for phase in PHASES[1:]:
        if phase in sums:
            phases[phase] = sums[phase] / num_tiles  # type: ignore[operator]
    check_phases_within_total(phases, label, "simulation.tileCycles")

    raw_steps = sim.get("steps", []) if isinstance(sim, Mapping) else []
    if not isinstance(raw_steps, list):
        raise MeasuredProfileError(
            f"{label}: field 'simulation.steps' is a {type(raw_steps).__name__}; required a list"
        )
    steps = []
    last_start: tuple[int, float] | None = None  # (step, cyclesFrom) of the last step
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
            start = _count(s["cyclesFrom"], f"{where}.cyclesFrom", label)
            end = _count(s["cyclesTo"], f"{where}.cyclesTo", label)
            if end < start:
                raise MeasuredProfileError(
                    f"{label}: {where}: cyclesTo {s['cyclesTo']!r} < cyclesFrom "
                    f"{s['cyclesFrom']!r}; required cyclesTo >= cyclesFrom (a step cannot "
                    "end before it starts)"
                )
            if last_start is not None and start < last_start[1]:
                raise MeasuredProfileError(
                    f"{label}: {where}: cyclesFrom {s['cyclesFrom']!r} is before "
                    f"simulation.steps[{last_start[0]}].cyclesFrom {last_start[1]:g}; required "
                    "steps in the order they ran (cycles never decrease)"
                )
            last_start = (k, start)
            cycles = end - start
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
