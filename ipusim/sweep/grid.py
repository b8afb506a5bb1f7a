"""The size of an experiment's grid, counted before anything of it is built, and the
positions in the file of the workloads and axes kept when some failed the schema.

:func:`check_size` refuses an experiment of more than :data:`MAX_POINTS` points from
the lengths of its axes alone, so a typo such as ``stop: 1.0e+9`` costs a message,
not the memory of a billion points.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_POINTS", "Numbers", "check_size", "grid_size", "numbering"]

#: Most points one experiment may have (workloads x grid x repeats), checked before
#: the grid is expanded.
MAX_POINTS = 1_000_000

#: Positions in the file of the workloads and axes an experiment kept:
#: ``{"workloads": [0, 2], "axes": [1]}``.
Numbers = dict[str, list[int]]


def numbering(numbers: Numbers | None) -> tuple[Any, Any]:
    """Functions giving the file position of workload ``i`` and axis ``i``."""
    if numbers is None:
        return (lambda i: i), (lambda i: i)
    return (lambda i: numbers["workloads"][i]), (lambda i: numbers["axes"][i])


def grid_size(exp: Any) -> int:
    """The number of points of experiment ``exp`` (workloads x grid x repeats),
    computed from the axis lengths without expanding anything."""
    lengths = [len(a.values or []) for a in exp.axes]
    zipped = min(lengths) if lengths else 1
    grid = zipped if exp.mode == "zip" else math.prod(lengths)
    return len(exp.workloads) * grid * exp.repeats


def check_size(exp: Any, label: str) -> list[str]:
    """The problem of an experiment with more than :data:`MAX_POINTS` points (its
    count and factors), or none."""
    size = grid_size(exp)
    if size <= MAX_POINTS:
        return []
    lengths = " x ".join(str(len(a.values or [])) for a in exp.axes) or "1"
    return [
        f"{label}: the experiment has {size:,} points ({len(exp.workloads)} workload(s) x "
        f"{lengths} axis values x {exp.repeats} repeat(s)); at most {MAX_POINTS:,} are "
        "allowed; hint: fewer axis values, mode: zip, or several experiments"
    ]
