"""A run as a timeline in the Chrome trace-event JSON format (Perfetto, chrome://tracing).

Layout of the timeline
----------------------
* One *process* per IPU (``pid`` = IPU index, named ``IPU <i>``): one track per IPU.
* In each process a ``steps`` thread (``tid`` 0) with one complete event (``ph: "X"``)
  per step record the IPU takes part in (on one IPU: every record; on several: the
  records in which a tile of the IPU spent cycles, or whose IR step names the IPU — a
  sync or global exchange listing it, a sync of every IPU —, so IPUs that run
  different steps at the same time, such as the stages of a pipeline, show them
  side by side): ``name`` is the step name, ``cat`` its kind, ``args`` hold the
  step's phase, program id, record index, active tiles and its own span on that IPU
  (``first_cycle``, ``last_cycle``). Tiles keep their own clocks, so the spans of
  consecutive steps may overlap (a fast tile starts the next compute set while a slow
  one finishes the last); events of one thread must not partly overlap, so the steps
  are laid end to end as in the execution profile: a step starts where the previous
  one ended (0 for the first) and ends at ``max(start, last_cycle)``; ``args.cycles``
  is that length and ``args.overlapped`` the part of the step's own span before it.
* One thread per chosen tile (``tid`` = global tile id + 1, named ``tile <t>``) with
  one complete event per step in which the tile spent cycles.
* A counter track ``active tiles`` per IPU: at the start of each compute step the
  number of the IPU's tiles with compute cycles in it, back to 0 when the step ends
  before the next compute step starts.
* Metadata events (``ph: "M"``) name the processes and threads and fix their order.

Timestamps (``ts``) and durations (``dur``) are microseconds of simulated time,
``cycles / clock_hz * 1e6``, rounded to 1e-6 us (one picosecond: well below one cycle
at any IPU clock).

Where a tile's slice of a step lies
-----------------------------------
A record keeps only the span of the whole step (earliest start, latest end) and the
cycles each tile spent in it. The start of each tile is still exact: every tile's
clock starts at 0 and only ever moves by the cycles charged to it in a step (compute
and exchange add their cost; syncs, stream copies and global exchanges move the tile
to the collective's end and charge the difference, waiting included). Every tile
runs the records in the same order, so

    start of tile t in record k = sum of tile_cycles[t] over records 0..k-1
    end   of tile t in record k = start + tile_cycles[t]

and after the last record each tile's clock equals ``trace.tile_end_cycles``. The
span of a record on one IPU, ``[min start, max end]`` over the IPU's tiles, is then
exactly the record's ``[first_cycle, last_cycle)`` when the machine has one IPU.
For a run that stopped early (``trace.complete`` False) tile slices that would end
after the tile's final clock were never run and are left out.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from ipusim import ir
from ipusim.errors import IpusimError
from ipusim.trace import Trace

__all__ = ["TraceViewError", "choose_tiles", "step_ipus", "trace_events", "write_timeline"]

#: Decimal places kept in microsecond timestamps (1e-6 us = 1 ps).
_TS_DECIMALS = 6


class TraceViewError(IpusimError, ValueError):
    """A view of a trace (timeline, table, plot, report) was asked for something invalid."""


def choose_tiles(trace: Trace, tiles: Any = None, max_tiles: int = 16) -> np.ndarray:
    """The global tile ids that get a thread of their own in the timeline.

    Parameters
    ----------
    trace
        The run.
    tiles
        Explicit global tile ids, or None for the default choice.
    max_tiles
        With ``tiles`` None: how many of the tiles busiest in compute to take (ties
        go to the lower tile id; tiles without compute cycles are not taken). Tile 0
        is always added, so at most ``max_tiles + 1`` tiles are chosen.

    Returns
    -------
    numpy.ndarray
        Sorted, distinct int64 tile ids.

    Raises
    ------
    TraceViewError
        A tile id is out of range or not an integer, or ``max_tiles`` is negative.
    """
    if tiles is not None:
        arr = np.asarray(tiles)
        if arr.ndim == 0:
            arr = arr.reshape(1)
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            raise TraceViewError(
                f"timeline tiles: found {tiles!r} (dtype {arr.dtype}); required integer "
                "global tile ids"
            )
        arr = arr.astype(np.int64).reshape(-1)
        bad = (arr < 0) | (arr >= trace.num_tiles)
        if np.any(bad):
            raise TraceViewError(
                f"timeline tiles: tile {int(arr[bad][0])} is out of range "
                f"[0, {trace.num_tiles}); hint: the trace of '{trace.config_name}' has "
                f"{trace.num_tiles} tiles (global ids)"
            )
        return np.unique(arr)
    if int(max_tiles) < 0:
        raise TraceViewError(f"timeline max_tiles: found {max_tiles}; required an int >= 0")
    compute = trace.phase_tile_cycles("compute")
    order = np.argsort(-compute, kind="stable")[: int(max_tiles)]
    busiest = order[compute[order] > 0]
    return np.unique(np.concatenate([busiest, [0]]).astype(np.int64))


def _us(cycles: Any, scale: float) -> Any:
    """Cycles -> microseconds (rounded); scalar in, float out; array in, array out."""
    out = np.round(np.asarray(cycles, np.float64) * scale, _TS_DECIMALS)
    return float(out) if out.ndim == 0 else out


def _slice(rec: Any, ts: float, te: float, pid: int, tid: int, args: dict) -> dict[str, Any]:
    """The complete event ("ph": "X") of step record ``rec`` on track ``(pid, tid)``, from
    ``ts`` to ``te`` microseconds: an IPU's step row (tid 0) or a tile's slice."""
    return {
        "name": rec.name,
        "cat": rec.kind,
        "ph": "X",
        "ts": ts,
        "dur": round(te - ts, _TS_DECIMALS),
        "pid": pid,
        "tid": tid,
        "args": args,
    }


def _metadata(num_ipus: int, chosen: np.ndarray, tiles_per_ipu: int) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for ipu in range(num_ipus):
        events.append(
            {
                "name": "process_name",
                "ph": "M",
                "pid": ipu,
                "tid": 0,
                "args": {"name": f"IPU {ipu}"},
            }
        )
        events.append(
            {
                "name": "process_sort_index",
                "ph": "M",
                "pid": ipu,
                "tid": 0,
                "args": {"sort_index": ipu},
            }
        )
        events.append(
            {"name": "thread_name", "ph": "M", "pid": ipu, "tid": 0, "args": {"name": "steps"}}
        )
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": ipu,
                "tid": 0,
                "args": {"sort_index": 0},
            }
        )
    for t in chosen.tolist():
        pid, tid = t // tiles_per_ipu, t + 1
        events.append(
            {
                "name": "thread_name",
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "args": {"name": f"tile {t}"},
            }
        )
        events.append(
            {
                "name": "thread_sort_index",
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "args": {"sort_index": tid},
            }
        )
    return events


def _counter_events(samples: list[tuple[int, int, int, int]], scale: float) -> list[dict[str, Any]]:
    """``(ipu, start, end, active)`` per compute step -> ``C`` events (0 in the gaps)."""
    events: list[dict[str, Any]] = []
    by_ipu: dict[int, list[tuple[int, int, int]]] = {}
    for ipu, start, end, active in samples:
        by_ipu.setdefault(ipu, []).append((start, end, active))
    for ipu, steps in by_ipu.items():
        for k, (start, end, active) in enumerate(steps):
            events.append(
                {
                    "name": "active tiles",
                    "ph": "C",
                    "ts": _us(start, scale),
                    "pid": ipu,
                    "tid": 0,
                    "args": {"active tiles": active},
                }
            )
            next_start = steps[k + 1][0] if k + 1 < len(steps) else None
            if next_start is None or next_start > end:
                events.append(
                    {
                        "name": "active tiles",
                        "ph": "C",
                        "ts": _us(end, scale),
                        "pid": ipu,
                        "tid": 0,
                        "args": {"active tiles": 0},
                    }
                )
    return events


def step_ipus(rec: Any, num_ipus: int, tiles_per_ipu: int) -> np.ndarray:
    """bool[num_ipus]: the IPUs that take part in a step record.

    An IPU takes part when one of its tiles spent cycles in the step, or when the
    record's IR step names it: a sync listing it (or a host sync, or a sync without
    ``ipus``: every IPU), a global exchange whose transfers leave from or arrive at it
    (or whose ``ipus`` list it), a collective of which it is a member, a compute set,
    exchange or stream copy with tiles on it. A record without its IR step (a trace
    built by hand) involves every IPU.
    """
    cycles = np.asarray(rec.tile_cycles, np.int64).reshape(num_ipus, -1)
    part = cycles.max(axis=1, initial=0) > 0
    step = rec.step
    named: Any = ()
    if step is None:
        named = range(num_ipus)
    elif isinstance(step, ir.Sync):
        every = step.sync_kind is ir.SyncKind.HOST or step.ipus is None
        named = range(num_ipus) if every else step.ipus
    elif isinstance(step, ir.GlobalExchange):
        ends = np.concatenate((step.src_tile, step.dst_tile)) // tiles_per_ipu
        named = [*ends.tolist(), *(step.ipus or ())]
    elif isinstance(step, ir.Compute):
        named = (step.vertex_tile // tiles_per_ipu).tolist()
    elif isinstance(step, ir.StreamCopy):
        named = (step.tile // tiles_per_ipu).tolist()
    elif isinstance(step, ir.Exchange):
        tiles = step.tile if step.is_totals else np.concatenate((step.src_tile, step.dst_tile))
        named = (tiles // tiles_per_ipu).tolist()
    elif isinstance(getattr(step, "ipus", None), tuple):
        named = step.ipus
    for i in set(named):
        if 0 <= int(i) < num_ipus:
            part[int(i)] = True
    return part


def trace_events(trace: Trace, tiles: Any = None, max_tiles: int = 16) -> dict[str, Any]:
    """The timeline of ``trace`` as a Chrome trace-event JSON object.

    Parameters
    ----------
    trace
        The run (:class:`ipusim.trace.Trace`).
    tiles
        Global ids of the tiles that get a thread each; None for the tiles busiest in
        compute (at most ``max_tiles``) plus tile 0 (see :func:`choose_tiles`).
    max_tiles
        Limit of the default tile choice.

    Returns
    -------
    dict
        ``{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}``: plain
        JSON types; metadata events first, then the others in time order. See the
        module docstring for the layout and the placement rule of tile slices.
    """
    chosen = choose_tiles(trace, tiles, max_tiles)
    tpi = int(trace.tiles_per_ipu)
    num_ipus = max(1, int(trace.num_tiles) // tpi)
    scale = 1e6 / float(trace.clock_hz)
    tile_end = np.asarray(trace.tile_end_cycles, np.int64)
    clock = np.zeros(trace.num_tiles, np.int64)
    timed: list[dict[str, Any]] = []
    samples: list[tuple[int, int, int, int]] = []
    cursor = np.zeros(num_ipus, np.int64)  # end of the previous step, per IPU
    for rec in trace.records:
        cycles = np.asarray(rec.tile_cycles, np.int64)
        start = clock
        end = clock + cycles
        ipu_start = start.reshape(num_ipus, -1).min(axis=1)
        ipu_end = end.reshape(num_ipus, -1).max(axis=1)
        ipu_active = np.count_nonzero(cycles.reshape(num_ipus, -1), axis=1)
        step_to = np.maximum(cursor, ipu_end)
        ts, te = _us(cursor, scale), _us(step_to, scale)
        shown = step_ipus(rec, num_ipus, tpi) if num_ipus > 1 else np.ones(1, bool)
        for ipu in np.flatnonzero(shown).tolist():
            lo, hi = int(ipu_start[ipu]), int(ipu_end[ipu])
            args = {
                "cycles": int(step_to[ipu] - cursor[ipu]),
                "overlapped": max(0, min(int(cursor[ipu]), hi) - lo),
                "first_cycle": lo,
                "last_cycle": hi,
                "phase": rec.phase,
                "program_id": int(rec.program_id),
                "step": int(rec.index),
                "active_tiles": int(ipu_active[ipu]),
            }
            timed.append(_slice(rec, float(ts[ipu]), float(te[ipu]), ipu, 0, args))
            if rec.kind == "compute":
                samples.append((ipu, lo, hi, int(ipu_active[ipu])))
        run = chosen[(cycles[chosen] > 0) & (end[chosen] <= tile_end[chosen])]
        t_start, t_end = _us(start[run], scale), _us(end[run], scale)
        for j, t in enumerate(run.tolist()):
            args = {
                "cycles": int(cycles[t]),
                "first_cycle": int(start[t]),
                "phase": rec.phase,
                "step": int(rec.index),
            }
            timed.append(_slice(rec, float(t_start[j]), float(t_end[j]), t // tpi, t + 1, args))
        clock = end
        cursor = step_to
    timed.extend(_counter_events(samples, scale))
    timed.sort(key=lambda e: e["ts"])  # stable: same-time events keep record order
    return {
        "traceEvents": [*_metadata(num_ipus, chosen, tpi), *timed],
        "displayTimeUnit": "ns",
        "otherData": {
            "config_name": trace.config_name,
            "config_hash": trace.config_hash,
            "clock_hz": float(trace.clock_hz),
            "total_cycles": int(trace.total_cycles),
            "complete": bool(trace.complete),
            "tiles": chosen.tolist(),
            "tile_clocks_match": bool(np.array_equal(clock, tile_end)),
        },
    }


def write_timeline(
    trace: Trace, path: str | PathLike[str], tiles: Any = None, max_tiles: int = 16
) -> Path:
    """Write the timeline of ``trace`` (:func:`trace_events`) as JSON to ``path``.

    Open the file in https://ui.perfetto.dev or chrome://tracing. The file appears
    only once complete (:func:`ipusim.files.write_json`).

    Returns
    -------
    pathlib.Path
        The path written.
    """
    from ipusim.files import write_json

    data = trace_events(trace, tiles=tiles, max_tiles=max_tiles)
    return write_json(path, data, what="timeline")


def steps_timeline(steps: list[dict[str, Any]], clock_hz: float) -> dict[str, Any]:
    """A steps-only timeline from an execution profile's ``simulation.steps``.

    For a profile directory, where no trace is at hand: one complete event per step
    (``cyclesFrom`` to ``cyclesTo``) on a single "steps" track. A profile of several
    IPUs (steps with ``ipus``, docs/profiles.md "Several IPUs") gets one track per
    IPU instead, each step on the tracks of the IPUs that spent cycles in it.
    """
    if clock_hz <= 0:
        raise TraceViewError(f"clock_hz is {clock_hz}; a positive tile clock is required")
    scale = 1e6 / float(clock_hz)
    num_ipus = max((len(s.get("maxTileCyclesByIPU", ())) for s in steps), default=0)
    if num_ipus < 2:
        events: list[dict[str, Any]] = [
            {"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "IPU"}},
            {"name": "thread_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": "steps"}},
        ]
    else:
        events = []
        for ipu in range(num_ipus):
            name = {"name": f"IPU {ipu}"}
            events.append({"name": "process_name", "ph": "M", "pid": ipu, "tid": 0, "args": name})
            events.append(
                {"name": "thread_name", "ph": "M", "pid": ipu, "tid": 0, "args": {"name": "steps"}}
            )
    for i, step in enumerate(steps):
        start, end = int(step["cyclesFrom"]), int(step["cyclesTo"])
        pids = step.get("ipus", [0]) if num_ipus >= 2 else [0]
        for pid in pids:
            events.append(
                {
                    "name": str(step.get("name", "")),
                    "cat": str(step.get("type", "")),
                    "ph": "X",
                    "pid": int(pid),
                    "tid": 0,
                    "ts": _us(start, scale),
                    "dur": _us(end - start, scale),
                    "args": {"index": i, "cycles": end - start},
                }
            )
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"clock_hz": clock_hz}}
