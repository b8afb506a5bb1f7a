"""pandas views of a run: one row per step, one row per tile, and an HTML summary.

These are for notebooks and scripts: ``steps_frame(trace).sort_values("cycles")``
finds the longest steps, ``tiles_frame(trace)`` the busiest tiles.
"""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ipusim.ir import PHASES

if TYPE_CHECKING:  # a trace shows itself through trace_html, so Trace is named for types only
    from ipusim.trace import Trace

__all__ = [
    "IPU_COLUMNS",
    "STEP_COLUMNS",
    "TILE_COLUMNS",
    "ipus_frame",
    "steps_frame",
    "tiles_frame",
    "trace_html",
]

#: Columns of :func:`steps_frame`, in order.
STEP_COLUMNS = (
    "index",
    "kind",
    "phase",
    "name",
    "program_id",
    "first_cycle",
    "last_cycle",
    "cycles",
    "active_tiles",
    "tile_balance",
    "total_tile_cycles",
    "max_tile_cycles",
    "active_cycles",
)

#: Columns of :func:`tiles_frame`, in order.
TILE_COLUMNS = ("ipu", "tile", *PHASES, "compute_active", "end_cycle")

#: Columns of :func:`ipus_frame`, in order.
IPU_COLUMNS = ("ipu", *PHASES, "compute_active", "end_cycle")


def steps_frame(trace: Trace) -> pd.DataFrame:
    """One row per step record, in execution order.

    Columns
    -------
    index, kind, phase, name, program_id
        As in the record.
    first_cycle, last_cycle
        The record's span (``last_cycle`` exclusive); ``<NA>`` for a step no tile
        took part in (an empty stream copy).
    cycles
        ``last_cycle - first_cycle`` (0 for such an empty step).
    active_tiles
        Tiles with ``tile_cycles > 0``.
    tile_balance
        ``mean / max`` of ``tile_cycles`` over all tiles of the machine, 0 when the
        maximum is 0: 1 when every tile is busy for the whole step.
    total_tile_cycles, max_tile_cycles
        Sum and maximum of ``tile_cycles``.
    active_cycles
        Compute steps: sum of vertex estimates over tiles; 0 otherwise.
    """
    rows = []
    for rec in trace.records:
        tc = np.asarray(rec.tile_cycles, np.int64)
        total = int(tc.sum())
        peak = int(tc.max(initial=0))
        ran = rec.first_cycle <= rec.last_cycle
        rows.append(
            (
                int(rec.index),
                rec.kind,
                rec.phase,
                rec.name,
                int(rec.program_id),
                int(rec.first_cycle) if ran else pd.NA,
                int(rec.last_cycle) if ran else pd.NA,
                int(rec.last_cycle - rec.first_cycle) if ran else 0,
                int(np.count_nonzero(tc)),
                total / (tc.size * peak) if peak else 0.0,
                total,
                peak,
                0 if rec.active_cycles is None else int(np.asarray(rec.active_cycles).sum()),
            )
        )
    frame = pd.DataFrame.from_records(rows, columns=list(STEP_COLUMNS))
    return frame.astype(
        {
            "index": "int64",
            "kind": "object",
            "phase": "object",
            "name": "object",
            "program_id": "int64",
            "first_cycle": "Int64",
            "last_cycle": "Int64",
            "cycles": "int64",
            "active_tiles": "int64",
            "tile_balance": "float64",
            "total_tile_cycles": "int64",
            "max_tile_cycles": "int64",
            "active_cycles": "int64",
        }
    )


def tiles_frame(trace: Trace) -> pd.DataFrame:
    """One row per tile of the machine (global ids), the whole run summed.

    Columns
    -------
    ipu, tile
        IPU index and global tile id.
    compute, internal_exchange, global_exchange, host_exchange, sync
        Cycles the tile spent in each phase (:data:`ipusim.trace.PHASES`).
    compute_active
        Sum of the tile's vertex estimates (compute without idle worker threads).
    end_cycle
        The tile's final clock (``trace.tile_end_cycles``).
    """
    n = int(trace.num_tiles)
    by_phase = np.zeros((len(PHASES), n), np.int64)
    row = {p: i for i, p in enumerate(PHASES)}
    active = np.zeros(n, np.int64)
    for rec in trace.records:
        by_phase[row[rec.phase]] += np.asarray(rec.tile_cycles, np.int64)
        if rec.active_cycles is not None:
            active += np.asarray(rec.active_cycles, np.int64)
    tiles = np.arange(n, dtype=np.int64)
    data = {
        "ipu": tiles // int(trace.tiles_per_ipu),
        "tile": tiles,
        **{p: by_phase[i] for i, p in enumerate(PHASES)},
        "compute_active": active,
        "end_cycle": np.asarray(trace.tile_end_cycles, np.int64),
    }
    return pd.DataFrame(data, columns=list(TILE_COLUMNS))


def ipus_frame(trace: Trace) -> pd.DataFrame:
    """One row per IPU: the cycles of each phase summed over the IPU's tiles.

    Columns as in :func:`tiles_frame` (``end_cycle`` is the IPU's last tile clock);
    the sum of a phase over the rows is the trace's total for it
    (:meth:`ipusim.trace.Trace.ipu_totals`). On several IPUs this is where the global
    exchange and the sync waits of each IPU show apart.
    """
    rows = trace.ipu_totals()
    data = {"ipu": np.arange(len(rows), dtype=np.int64)}
    for col in IPU_COLUMNS[1:]:
        data[col] = np.array([r[col] for r in rows], np.int64)
    return pd.DataFrame(data, columns=list(IPU_COLUMNS))


def trace_html(trace: Trace, head: int = 10) -> str:
    """A small HTML view of a run: machine, totals per phase and the first steps.

    Meant for ``Trace._repr_html_`` so a trace shows as a table in Jupyter.

    Parameters
    ----------
    trace
        The run.
    head
        How many step rows to show.
    """
    totals = trace.totals
    cells = [
        (
            "machine",
            f"{trace.config_name} ({trace.num_tiles:,} tiles, {trace.clock_hz / 1e9:.3g} GHz)",
        ),
        ("total cycles", f"{trace.total_cycles:,} ({trace.simulated_seconds * 1e6:.3f} us)"),
        *((f"{key} cycles (sum over tiles)", f"{value:,}") for key, value in totals.items()),
        ("steps", f"{len(trace.records):,}" + ("" if trace.complete else " (incomplete run)")),
    ]
    body = "".join(
        f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
        for k, v in cells
    )
    steps = steps_frame(trace).head(max(0, int(head)))
    more = len(trace.records) - len(steps)
    tail = f"<p>... {more:,} more step(s)</p>" if more > 0 else ""
    return (
        f"<div><table>{body}</table>{steps.to_html(index=False, escape=True, border=0)}{tail}</div>"
    )
