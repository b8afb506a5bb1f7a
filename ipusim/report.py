"""``ipusim report PROFILE_DIR``: show and plot a profile directory.

A profile directory is what the engine's ``autoReport`` option writes:

``summary.txt``
    The profile summary text; printed as is.
``execution.json``
    The execution profile (Poplar layout): ``simulation.steps`` is a list of
    ``{type, name, cyclesFrom, cyclesTo, ...}``. Its cycles per step are plotted to
    ``steps.png`` and, when there is no ``summary.txt``, its totals are printed.
``profile.json``
    The graph profile; when it holds ``memory.byTile.total`` and
    ``target.bytesPerTile`` the memory per tile is plotted to ``memory.png``.
``timeline.json``
    A Chrome trace-event timeline (open it in https://ui.perfetto.dev); when the
    directory has none, one is written from the execution profile's steps.

With ``profiler.format=cbor`` the two profiles are ``execution.cbor`` and
``profile.cbor`` instead; they are read the same way.

Plots go to the profile directory or to ``out``; they need matplotlib, the ``plot``
extra (``pip install 'ipusim[plot]'``). Every problem (a missing directory or extra, a
malformed file or field) is a :class:`ReportError` naming it, never a traceback.
"""

from __future__ import annotations

import json
import math
import os
import sys
from os import PathLike
from pathlib import Path
from typing import Any, TextIO

from ipusim import progress
from ipusim.files import check_writable, make_directory, write_text
from ipusim.profile.timeline import TraceViewError, steps_timeline

__all__ = ["EXPECTED_FILES", "ReportError", "load_execution_steps", "run_report"]

#: Files of a profile directory the report reads (at least one must be present).
EXPECTED_FILES = (
    "summary.txt",
    "execution.json",
    "profile.json",
    "timeline.json",
    "execution.cbor",
    "profile.cbor",
)


class ReportError(TraceViewError):
    """A profile directory is missing, empty or holds a malformed file."""


def _expected() -> str:
    return ", ".join(EXPECTED_FILES)


#: The extra that installs what plotting needs.
PLOT_EXTRA_HINT = "pip install 'ipusim[plot]'"


def require_matplotlib() -> None:
    """Raise a :class:`ReportError` naming the ``plot`` extra if matplotlib is missing.

    Checked before anything is printed or written, so that a report either does all
    it was asked or nothing.
    """
    try:
        import matplotlib
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise ReportError(
            f"plots need matplotlib, which cannot be imported ({exc}); hint: install the "
            f"plot extra with `{PLOT_EXTRA_HINT}`, or run `ipusim report --no-plots` to "
            "print the summary only"
        ) from None


#: Bytes of Python objects per byte of a profile file, at most: a JSON profile is
#: mostly lists of integers (about 6 characters each, each a 28-byte int object and an
#: 8-byte list slot), so parsing needs about 6 times its size; 8 leaves room.
PARSE_BYTES_PER_FILE_BYTE = 8


def _available_memory() -> int | None:
    """Bytes of physical memory free now (None where the system does not say)."""
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def check_profile_size(path: Path) -> None:
    """Refuse, before reading it, a profile that cannot be parsed in the memory free now.

    Raises
    ------
    ReportError
        Naming the file, its size, the memory parsing would need and the memory free,
        with a hint.
    """
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ReportError(f"{path}: cannot read the file ({exc.strerror})") from None
    free = _available_memory()
    need = size * PARSE_BYTES_PER_FILE_BYTE
    if free is not None and need > free:
        raise ReportError(
            f"{path}: the profile is {size:,} bytes; reading it needs about {need:,} bytes "
            f"of memory and {free:,} are free; hint: report on a machine with more memory, "
            "or write fewer runs into the profile (engine.resetExecutionProfile())"
        )


def _load_profile(path: Path) -> Any:
    check_profile_size(path)
    if path.suffix == ".cbor":
        import cbor2

        try:
            with path.open("rb") as f:
                return cbor2.load(f)
        except (cbor2.CBORDecodeError, EOFError, ValueError, RecursionError) as exc:
            raise ReportError(f"{path}: not valid CBOR ({exc})") from None
        except OSError as exc:
            raise ReportError(f"{path}: cannot read the file ({exc})") from None
    try:
        with path.open(encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise ReportError(f"{path}: cannot read the file ({exc})") from None
    except RecursionError:
        raise ReportError(
            f"{path}: nested too deeply to read; expected a profile written by ipusim"
        ) from None
    except json.JSONDecodeError as exc:
        raise ReportError(
            f"{path}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); "
            "hint: the file may be truncated or written in CBOR (profiler.format=cbor)"
        ) from None
    except UnicodeDecodeError:
        raise ReportError(
            f"{path}: not UTF-8 text; hint: a CBOR profile (profiler.format=cbor) cannot be "
            "read by the report, write JSON instead"
        ) from None
    except ValueError as exc:  # e.g. an integer of more than 4300 digits
        raise ReportError(f"{path}: a value cannot be read ({exc})") from None


def load_execution_steps(path: str | PathLike[str]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Read an execution profile and check the fields the report uses.

    Returns
    -------
    tuple
        ``(simulation, steps)``: the ``simulation`` object and its ``steps`` list.

    Raises
    ------
    ReportError
        The file is not JSON, or ``simulation.steps`` is missing or a step lacks
        ``type``/``name`` (strings) or ``cyclesFrom``/``cyclesTo`` (integers,
        ``cyclesTo >= cyclesFrom``); the message names the step and field.
    """
    path = Path(path)
    data = _load_profile(path)
    sim = data.get("simulation") if isinstance(data, dict) else None
    steps = sim.get("steps") if isinstance(sim, dict) else None
    if not isinstance(steps, list):
        raise ReportError(
            f"{path}: field 'simulation.steps' is missing or not a list; required an "
            "execution profile with simulation.steps = [{type, name, cyclesFrom, cyclesTo}]"
        )
    for i, step in enumerate(steps):
        where = f"{path}: simulation.steps[{i}]"
        if not isinstance(step, dict):
            raise ReportError(f"{where}: found {type(step).__name__}; required an object")
        for key in ("type", "name"):
            if not isinstance(step.get(key), str):
                raise ReportError(
                    f"{where} field '{key}': found {step.get(key)!r}; required a string"
                )
        for key in ("cyclesFrom", "cyclesTo"):
            value = step.get(key)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ReportError(f"{where} field '{key}': found {value!r}; required an integer")
        if step["cyclesTo"] < step["cyclesFrom"]:
            raise ReportError(
                f"{where}: cyclesTo {step['cyclesTo']} < cyclesFrom {step['cyclesFrom']}; "
                "required cyclesTo >= cyclesFrom"
            )
    cycles = sim.get("cycles", 0)
    if not isinstance(cycles, int) or isinstance(cycles, bool) or cycles < 0:
        raise ReportError(
            f"{path}: field 'simulation.cycles': found {cycles!r}; required a non-negative integer"
        )
    return sim, steps


def _execution_totals(sim: dict[str, Any], steps: list[dict[str, Any]]) -> list[str]:
    by_type: dict[str, list[int]] = {}
    for step in steps:
        entry = by_type.setdefault(step["type"], [0, 0])
        entry[0] += 1
        entry[1] += step["cyclesTo"] - step["cyclesFrom"]
    total = sim.get("cycles", sum(v[1] for v in by_type.values()))
    lines = [f"Execution profile: {len(steps):,} steps, {total:,} cycles"]
    width = max((len(t) for t in by_type), default=0)
    lines += [
        f"  {kind:<{width}}  {count:>8,} steps  {cycles:>14,} cycles"
        for kind, (count, cycles) in sorted(by_type.items(), key=lambda kv: -kv[1][1])
    ]
    tile_cycles = sim.get("tileCycles")
    if isinstance(tile_cycles, dict):
        lines.append(
            "  tile cycles (sum over tiles): "
            + ", ".join(f"{k} {v:,}" for k, v in tile_cycles.items() if isinstance(v, int))
        )
    return lines


def _memory_data(profile_path: Path) -> tuple[list[Any], float] | str:
    """``(bytes per tile, bytes per tile available)`` of a graph profile, checked; or
    the note to print when the profile has no memory figures.

    Raises
    ------
    ReportError
        ``target.bytesPerTile`` is not a positive number or ``memory.byTile.total`` is
        not a non-empty list of non-negative numbers (naming the field and the value).
    """
    data = _load_profile(profile_path)
    memory = data.get("memory") if isinstance(data, dict) else None
    by_tile = memory.get("byTile") if isinstance(memory, dict) else None
    total = by_tile.get("total") if isinstance(by_tile, dict) else None
    target = data.get("target") if isinstance(data, dict) else None
    capacity = target.get("bytesPerTile") if isinstance(target, dict) else None
    if total is None or capacity is None:
        return (
            f"{profile_path.name}: no memory.byTile.total and target.bytesPerTile; "
            "memory.png not written"
        )
    if not _is_number(capacity) or not capacity > 0:
        raise ReportError(
            f"{profile_path}: field 'target.bytesPerTile': found {capacity!r}; required a "
            "positive number"
        )
    if not isinstance(total, list) or not total:
        raise ReportError(
            f"{profile_path}: field 'memory.byTile.total': found {_brief(total)}; required a "
            "non-empty list of bytes per tile"
        )
    for tile, used in enumerate(total):
        if not _is_number(used) or not used >= 0:
            raise ReportError(
                f"{profile_path}: field 'memory.byTile.total[{tile}]': found {_brief(used)}; "
                "required a non-negative number of bytes"
            )
    return total, capacity


def _is_number(value: Any) -> bool:
    """A finite int or float (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _brief(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _clock_hz(profile_path: Path) -> float | None:
    """The tile clock recorded in a graph profile, or None."""
    try:
        data = _load_profile(profile_path)
    except ReportError:
        return None
    target = data.get("target", {}) if isinstance(data, dict) else None
    clock = target.get("clockFrequency") if isinstance(target, dict) else None
    return float(clock) if _is_number(clock) and clock > 0 else None


def _profile_file(directory: Path, stem: str) -> Path | None:
    """``<stem>.json``, else ``<stem>.cbor``, else None."""
    for suffix in (".json", ".cbor"):
        if (directory / f"{stem}{suffix}").is_file():
            return directory / f"{stem}{suffix}"
    return None


def run_report(
    directory: str | PathLike[str],
    out: str | PathLike[str] | None = None,
    stream: TextIO | None = None,
    plots: bool = True,
) -> list[Path]:
    """Print the summary of a profile directory and write its plots.

    Parameters
    ----------
    directory
        The profile directory (see the module docstring for its files).
    out
        Where the plots go (created if missing); default ``directory``.
    stream
        Where the text goes; default standard output.
    plots
        False to print only.

    Returns
    -------
    list of pathlib.Path
        The files written.

    Raises
    ------
    ReportError
        ``directory`` does not exist, is not a directory, holds none of
        :data:`EXPECTED_FILES`, or holds a malformed profile; plots are asked for but
        matplotlib is missing (the message names the ``plot`` extra); a file cannot be
        read or written.
    """
    stream = sys.stdout if stream is None else stream
    directory = Path(directory)
    hint = "hint: run with engine option autoReport.all=true (autoReport.directory sets where)"
    if not directory.exists():
        raise ReportError(
            f"profile directory '{directory}' does not exist; expected a directory holding "
            f"any of {_expected()}; {hint}"
        )
    if not directory.is_dir():
        raise ReportError(
            f"'{directory}' is not a directory; expected a profile directory holding any of "
            f"{_expected()}"
        )
    present = [name for name in EXPECTED_FILES if (directory / name).is_file()]
    if not present:
        raise ReportError(
            f"profile directory '{directory}' holds none of the expected files "
            f"({_expected()}); {hint}"
        )
    out_dir = directory if out is None else Path(out)
    if out_dir.exists() and not out_dir.is_dir():
        raise ReportError(f"--out '{out_dir}' is a file; required a directory for the plots")
    try:
        # every file is read and checked before anything is printed, written or imported
        # for plotting: a malformed profile is reported as such, with or without
        # matplotlib, and a report either does all it was asked or nothing
        if plots and out is not None:
            check_writable(out_dir, "--out", directory=True)
        execution = _profile_file(directory, "execution")
        loaded = None
        if execution is not None:
            progress.phase(f"read {execution.name}")
            loaded = load_execution_steps(execution)
            progress.end()
        profile = _profile_file(directory, "profile")
        memory = _memory_data(profile) if plots and profile is not None else None
        if plots:
            require_matplotlib()
        return _report(directory, out_dir, present, stream, plots, loaded, memory, profile)
    except OSError as exc:  # unreadable summary, unwritable output directory, ...
        where = f" '{exc.filename}'" if exc.filename else ""
        raise ReportError(
            f"cannot read or write{where} ({exc.strerror or exc}); hint: check the "
            "permissions of the profile directory and of --out"
        ) from None


def _report(
    directory: Path,
    out_dir: Path,
    present: list[str],
    stream: TextIO,
    plots: bool,
    loaded: tuple[dict[str, Any], list[dict[str, Any]]] | None,
    memory: tuple[list[Any], float] | str | None,
    profile: Path | None,
) -> list[Path]:
    """The body of :func:`run_report`, once every file is read and checked."""
    written: list[Path] = []
    print(f"Profile directory {directory}: {', '.join(present)}", file=stream)
    summary = directory / "summary.txt"
    if summary.is_file():
        text = summary.read_text(encoding="utf-8", errors="replace")
        stream.write(text if text.endswith("\n") else text + "\n")
    steps: list[dict[str, Any]] = []
    if loaded is not None:
        sim, steps = loaded
        if not summary.is_file():
            print("\n".join(_execution_totals(sim, steps)), file=stream)
        if plots and steps:
            from ipusim.plot import step_cycles_bars

            make_directory(out_dir, "--out")
            path = out_dir / "steps.png"
            progress.phase("draw steps.png")
            step_cycles_bars(
                [s["type"] for s in steps],
                [s["cyclesTo"] - s["cyclesFrom"] for s in steps],
                path=path,
                names=[s["name"] for s in steps],
                title=f"Cycles per step ({len(steps):,} steps)",
            )
            written.append(path)
    if isinstance(memory, str):
        print(memory, file=stream)
    elif memory is not None:
        from ipusim.plot import memory_per_tile_histogram

        make_directory(out_dir, "--out")
        progress.phase("draw memory.png")
        path = out_dir / "memory.png"
        memory_per_tile_histogram(memory[0], memory[1], path=path)
        written.append(path)
    timeline = directory / "timeline.json"
    if not timeline.is_file() and loaded is not None and profile is not None and plots:
        clock = _clock_hz(profile)
        if clock:
            make_directory(out_dir, "--out")
            timeline = out_dir / "timeline.json"
            progress.phase("write timeline.json")
            write_text(timeline, json.dumps(steps_timeline(steps, clock)), what="timeline")
            written.append(timeline)
    progress.end()
    if timeline.is_file():
        print(f"Timeline: {timeline} (open in https://ui.perfetto.dev)", file=stream)
    for path in written:
        print(f"wrote {path}", file=stream)
    return written
