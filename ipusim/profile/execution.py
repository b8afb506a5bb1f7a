"""The execution profile of simulated runs, in the layout of Poplar's execution profile.

Two things live here, both machine side (no ``poplar_api``):

* :func:`program_table` numbers every node of a machine program (IR) in a fixed
  tree order. The graph profile's ``programs`` list and the execution profile's
  ``program`` fields use these numbers, so the two profiles agree.
* :func:`execution_profile` turns the traces of one or more runs into a plain JSON
  dict: ``profilerMode``, ``programTrace`` and ``simulation`` (``cycles``,
  ``tileCycles`` and one entry per executed step).

Steps tile the run
------------------
Each tile keeps its own clock, so the spans ``[first_cycle, last_cycle)`` of two
consecutive records may overlap (a fast tile starts the next compute set while a slow
one still finishes the last). The profile's steps are laid end to end instead::

    cyclesFrom       = cyclesTo of the previous step (0 for the first step of the run)
    cyclesTo         = max(cyclesFrom, record.last_cycle)
    cyclesOverlapped = the part of the record's own span before cyclesFrom

so ``Σ steps' cycles == simulation.cycles`` and each step is charged only the cycles
by which it pushed the end of the run further. Runs follow each other: the steps of
run ``k`` are offset by the total cycles of runs ``0..k-1``.

Balances (each in [0, 1]; 0 when no tile spent a cycle in the step)
-------------------------------------------------------------------
``tileBalance``
    ``Σ_tiles tile cycles / (num_tiles * max tile cycles)``: 1 when every tile of the
    machine is busy for the whole step.
``activeTileBalance``
    The same over the ``activeTiles`` (tiles with a non-zero tile cycle count).
``threadBalance`` (OnTileExecute only)
    ``Σ active cycles / Σ tile cycles``: the active cycles of a tile are the sum of its
    vertex estimates (thread cycles, plus launch), its tile cycles are
    ``worker_contexts * max(context load)`` plus multi-vertex cycles. 1 when every
    worker context of every busy tile is busy for the whole compute set.
``totalData``, ``dataBalance`` (DoExchange, GlobalExchange, StreamCopy)
    The bytes each tile takes part with: received for internal and global exchanges,
    the tile's share of the copy for stream copies. ``totalData`` is their sum and
    ``dataBalance`` is ``totalData / (tiles with data * max tile data)``.

Several IPUs
------------
On a machine of more than one IPU (only then, so one-IPU profiles keep their layout)
the profile also splits its cycles per IPU: ``simulation.tileCyclesByIPU`` lists, per
IPU, the keys of ``tileCycles`` summed over that IPU's tiles (their sum over the IPUs
is ``tileCycles``), and each step has ``cyclesAllTilesByIPU`` and
``maxTileCyclesByIPU`` (Σ and maximum of its tile cycles on each IPU) and ``ipus``
(the IPUs that spent cycles in it). A global exchange or an external sync thus shows
what each IPU it joined spent in it, waiting included.

Lightweight profile (``lightweightProfile.blocks``)
---------------------------------------------------
One entry per execution of a profiled block (an :class:`ipusim.ir.Block`, made from a
Poplar ``Block`` program or an implicit block) and per tile whose clock moved while it
ran, as PopVision's lightweight profiling reports them: ``name``, ``program``, ``run``,
``execution`` (the block executions of a run numbered in order of entry), ``tile``
and ``cyclesFrom``/``cyclesTo`` (that tile's clock at the block's start and end,
offset like the steps), ``cycles`` their difference. A block in which no tile spent a
cycle is reported once, on tile 0 (the tile Poplar instruments by default).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ipusim import ir
from ipusim.errors import IpusimError
from ipusim.trace import Trace

__all__ = [
    "SCHEMA_DIR",
    "STEP_TYPES",
    "ProfileError",
    "ProgramTable",
    "block_records",
    "execution_profile",
    "program_table",
    "schema",
    "step_type",
]

#: Directory of the JSON Schemas (draft 2020-12) of the graph and execution profiles.
SCHEMA_DIR = Path(__file__).resolve().parent / "schema"


def schema(name: str) -> dict[str, Any]:
    """The JSON Schema of profile ``name`` (``"graph_profile"`` or ``"execution_profile"``).

    Raises
    ------
    ProfileError
        For any other name (the error lists the known ones); a ``ValueError``.
    """
    known = sorted(p.name.removesuffix(".schema.json") for p in SCHEMA_DIR.glob("*.schema.json"))
    if name not in known:
        raise ProfileError(f"unknown profile schema {name!r}; known: {', '.join(known)}")
    return json.loads((SCHEMA_DIR / f"{name}.schema.json").read_text(encoding="utf-8"))


#: Poplar's program type tag of each IR step kind.
STEP_TYPES: dict[str, str] = {name: kind.tag for name, kind in ir.STEP_KINDS.items()}


class ProfileError(IpusimError, ValueError):
    """A profile was asked for something that does not exist."""


def step_type(kind: str) -> str:
    """Poplar's type tag (``OnTileExecute``, ``DoExchange``, ...) of an IR step kind."""
    return STEP_TYPES.get(kind, kind)


@dataclass(frozen=True)
class ProgramTable:
    """Every node of a machine program, numbered once each in tree order.

    Attributes
    ----------
    nodes
        The distinct nodes (steps and control nodes), index = program id in profiles.
    index
        ``id(node) -> index``; a node shared by several parents (a compute set run
        twice) has one index.
    entries, functions
        Indices of the entry programs and of the functions.
    """

    nodes: tuple[Any, ...]
    index: dict[int, int]
    entries: tuple[int, ...]
    functions: tuple[int, ...]

    def children(self, node: Any) -> list[Any]:
        """Child nodes of a control node in profile order (none for a step)."""
        return ir.children(node)


def program_table(program: ir.Program) -> ProgramTable:
    """Number the nodes of ``program``: entries first, then functions, depth first.

    Parameters
    ----------
    program
        A machine program.

    Returns
    -------
    ProgramTable
        The same program always gives the same numbering.
    """
    nodes: list[Any] = []
    index: dict[int, int] = {}
    probe = ProgramTable((), {}, (), ())

    def visit(root: Any) -> int:
        # iterative pre-order walk: deep programs must not hit the recursion limit
        stack = [root]
        while stack:
            node = stack.pop()
            if id(node) in index:
                continue
            index[id(node)] = len(nodes)
            nodes.append(node)
            stack.extend(reversed(probe.children(node)))
        return index[id(root)]

    entries = tuple(visit(e) for e in program.entries)
    functions = tuple(visit(f) for f in program.functions)
    return ProgramTable(tuple(nodes), index, entries, functions)


def _balance(total: int, count: int, peak: int) -> float:
    return float(total) / (count * peak) if count and peak else 0.0


#: Kinds whose records carry the bytes each tile exchanged (in their details), and
#: kinds whose steps list the bytes each tile copies.
_EXCHANGE_KINDS = ir.kinds_of(ir.Exchange, ir.GlobalExchange)
_COPY_KINDS = ir.kinds_of(ir.StreamCopy)


def _step_data(rec: Any) -> np.ndarray | None:
    """Bytes each tile takes part with in an exchange or copy record (None otherwise)."""
    details = rec.details
    if rec.kind in _EXCHANGE_KINDS and details is not None:
        # a tile takes part with what it receives, or sends (a gather to the host)
        return np.maximum(details.bytes_received, details.bytes_sent).astype(np.int64)
    if rec.kind in _COPY_KINDS and rec.step is not None:
        return np.asarray(rec.step.num_bytes, np.int64)
    return None


def _step_entry(
    rec: Any, num_tiles: int, program: int, cycles_from: int, cycles_to: int, num_ipus: int = 1
) -> dict[str, Any]:
    tile = np.asarray(rec.tile_cycles, np.int64)
    total = int(tile.sum())
    peak = int(tile.max(initial=0))
    active_tiles = int(np.count_nonzero(tile))
    first, last = int(rec.first_cycle), int(rec.last_cycle)
    overlapped = max(0, min(cycles_from, last) - first) if first <= last else 0
    entry: dict[str, Any] = {
        "type": step_type(rec.kind),
        "program": program,
        "name": rec.name,
        "cyclesFrom": cycles_from,
        "cyclesTo": cycles_to,
        "cycles": cycles_to - cycles_from,
        "cyclesOverlapped": overlapped,
        "cyclesAllTiles": total,
        "maxTileCycles": peak,
        "activeTiles": active_tiles,
        "tileBalance": _balance(total, num_tiles, peak),
        "activeTileBalance": _balance(total, active_tiles, peak),
    }
    if rec.kind == "compute":
        active = 0 if rec.active_cycles is None else int(np.asarray(rec.active_cycles).sum())
        entry["activeCycles"] = active
        entry["threadBalance"] = float(active) / total if total else 0.0
    if num_ipus > 1:
        by_ipu = tile.reshape(num_ipus, -1)
        entry["cyclesAllTilesByIPU"] = [int(v) for v in by_ipu.sum(axis=1)]
        entry["maxTileCyclesByIPU"] = [int(v) for v in by_ipu.max(axis=1)]
        entry["ipus"] = [int(i) for i in np.flatnonzero(by_ipu.max(axis=1))]
    data = _step_data(rec)
    if data is not None:
        total_data = int(data.sum())
        entry["totalData"] = total_data
        entry["dataBalance"] = _balance(
            total_data, int(np.count_nonzero(data)), int(data.max(initial=0))
        )
    return entry


#: ``simulation.tileCycles`` keys and the trace phase each sums (``activeCompute`` is
#: the Σ of vertex estimates, ``copySharedStructure`` is not modelled and stays 0).
TILE_CYCLE_PHASES: dict[str, str] = {
    ir.PHASE_NAMES[phase].profile_key: phase for phase in ir.PHASES
}


def block_records(
    traces: Sequence[Trace] | Iterable[Trace], table: ProgramTable | None = None
) -> list[dict[str, Any]]:
    """The ``lightweightProfile.blocks`` entries of ``traces`` (runs in order).

    Parameters
    ----------
    traces
        Traces of the runs, oldest first; run ``k``'s cycles are offset by the total
        cycles of runs ``0..k-1``, as the steps are.
    table
        Numbers the ``program`` field (the block node's index); without it the IR
        ``program_id`` is used.
    """
    out: list[dict[str, Any]] = []
    offset = 0
    for run, trace in enumerate(traces):
        for rec in trace.blocks:
            if table is not None and rec.node is not None and id(rec.node) in table.index:
                pid = table.index[id(rec.node)]
            else:
                pid = int(rec.program_id)
            start, end = rec.cycles_from, rec.cycles_to
            if (end < 0).any():
                continue  # the run stopped inside the block
            tiles = np.flatnonzero(end > start)
            for tile in tiles.tolist() if tiles.size else [0]:
                out.append(
                    {
                        "name": rec.name,
                        "program": pid,
                        "run": run,
                        "execution": int(rec.index),
                        "tile": int(tile),
                        "cyclesFrom": offset + int(start[tile]),
                        "cyclesTo": offset + int(end[tile]),
                        "cycles": int(end[tile] - start[tile]),
                    }
                )
        offset += int(trace.total_cycles)
    return out


def execution_profile(
    traces: Sequence[Trace] | Iterable[Trace],
    program: ir.Program | None = None,
    options: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The execution profile of ``traces`` (runs in order) as a plain JSON dict.

    Parameters
    ----------
    traces
        Traces of the runs, oldest first.
    program
        The machine program the runs executed; its :func:`program_table` numbers the
        ``program`` field of each step. Without it the IR ``program_id`` is used.
    options
        Engine options to record (strings), or None.

    Returns
    -------
    dict
        ``profilerMode``, ``programTrace`` (program index of every executed step),
        ``options``, ``runs`` (``cyclesFrom``/``cyclesTo``/``steps`` of each run),
        ``simulation`` (``cycles``, ``tileCycles``, ``steps``, ``hostSeconds``; on
        several IPUs also ``tileCyclesByIPU``) and
        ``lightweightProfile`` (``blocks``: see :func:`block_records`).
    """
    traces = list(traces)
    table = program_table(program) if program is not None else None
    steps: list[dict[str, Any]] = []
    trace_ids: list[int] = []
    runs: list[dict[str, Any]] = []
    tile_keys = ("activeCompute", *TILE_CYCLE_PHASES, "copySharedStructure")
    tile_cycles = dict.fromkeys(tile_keys, 0)
    num_ipus = max((t.num_ipus for t in traces), default=1)
    by_ipu = [dict.fromkeys(tile_keys, 0) for _ in range(num_ipus)]
    offset = 0
    for trace in traces:
        totals = trace.totals
        tile_cycles["activeCompute"] += int(totals["compute_active"])
        for key, phase in TILE_CYCLE_PHASES.items():
            tile_cycles[key] += int(totals[phase])
        if num_ipus > 1:
            for ipu, u in enumerate(trace.ipu_totals()):
                by_ipu[ipu]["activeCompute"] += u["compute_active"]
                for key, phase in TILE_CYCLE_PHASES.items():
                    by_ipu[ipu][key] += u[phase]
        run_first = len(steps)
        cursor = 0
        for rec in trace.records:
            if table is not None and rec.step is not None and id(rec.step) in table.index:
                pid = table.index[id(rec.step)]
            else:
                pid = int(rec.program_id)
            last = int(rec.last_cycle) if rec.first_cycle <= rec.last_cycle else cursor
            end = max(cursor, last)
            entry = _step_entry(rec, trace.num_tiles, pid, cursor, end, trace.num_ipus)
            entry["cyclesFrom"] += offset
            entry["cyclesTo"] += offset
            steps.append(entry)
            trace_ids.append(pid)
            cursor = end
        total = int(trace.total_cycles)
        if cursor < total and len(steps) > run_first:
            # tiles idle after their last step still count: stretch the last step
            steps[-1]["cyclesTo"] = offset + total
            steps[-1]["cycles"] = steps[-1]["cyclesTo"] - steps[-1]["cyclesFrom"]
        runs.append(
            {
                "cyclesFrom": offset,
                "cyclesTo": offset + total,
                "steps": len(steps) - run_first,
                "complete": bool(trace.complete),
            }
        )
        offset += total
    simulation: dict[str, Any] = {
        "cycles": offset,
        "tileCycles": tile_cycles,
        "steps": steps,
        "hostSeconds": float(sum(t.host_seconds for t in traces)),
    }
    if num_ipus > 1:
        simulation["tileCyclesByIPU"] = by_ipu
    return {
        "profilerMode": "IPU_MODEL",
        "programTrace": trace_ids,
        "options": dict(options or {}),
        "runs": runs,
        "simulation": simulation,
        "lightweightProfile": {"blocks": block_records(traces, table)},
    }
