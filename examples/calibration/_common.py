"""Helpers shared by the calibration workloads: reading steps out of a trace.

The measurements of the calibration data set (``tests/data/calibration``) are cycles
of one step (a compute set, a stream copy) on one tile, or totals of a whole run;
these functions pick those numbers out of an :class:`ipusim.trace.Trace` by step kind
and debug name, so every workload's ``metrics`` reads the trace the same way.
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import StepRecord, Trace

__all__ = ["records", "step_tile_cycles", "total_tile_cycles"]


def records(trace: Trace, kind: str, name: str | None = None) -> list[StepRecord]:
    """The executed steps of ``kind`` (``compute``, ``exchange``, ``sync``,
    ``stream_copy``) whose debug name is ``name`` (any name when None), in order.

    Raises
    ------
    ValueError
        No such step ran (the message lists the names of that kind that did).
    """
    found = [r for r in trace.records if r.kind == kind and (name is None or r.name == name)]
    if not found:
        names = sorted({r.name for r in trace.records if r.kind == kind})
        raise ValueError(
            f"no executed {kind} step named {name!r}; the {kind} steps were: "
            f"{', '.join(names) or '(none)'}"
        )
    return found


def step_tile_cycles(trace: Trace, kind: str, name: str | None, tile: int) -> np.ndarray:
    """Cycles ``tile`` spent in each execution of the steps :func:`records` selects."""
    return np.array([int(r.tile_cycles[tile]) for r in records(trace, kind, name)], np.int64)


def total_tile_cycles(trace: Trace, kind: str, name: str | None = None) -> np.ndarray:
    """Per tile, the cycles of every selected step added up (over executions)."""
    out = np.zeros(trace.num_tiles, np.int64)
    for r in records(trace, kind, name):
        out += r.tile_cycles
    return out
