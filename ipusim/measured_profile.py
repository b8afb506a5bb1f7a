"""A measured (or recorded) cycle profile: phases, steps and metrics of one run.

``phases["total"]`` is the run's total cycles. Every other phase is a *tile average*:
cycles summed over all tiles divided by the number of tiles, which is what SDK 2.x prints.
The readers (:mod:`ipusim.measured`) bring every source to this form.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ipusim import ir
from ipusim.errors import IpusimError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "PHASES",
    "MeasuredPoint",
    "MeasuredProfile",
    "MeasuredProfileError",
    "MeasuredStep",
    "parse_number",
]


#: Phases of a profile. ``total`` is the run's total cycles, every other phase is a tile
#: average (cycles summed over tiles / tiles). ``compute`` includes idle worker threads,
#: ``compute_active`` excludes them.
PHASES: tuple[str, ...] = ("total", ir.PHASES[0], "compute_active", *ir.PHASES[1:])


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
        for name, value in self.phases.items():
            if not _is_count(value):
                raise MeasuredProfileError(
                    f"{self.source}: phase {name!r} is {value!r}; required a finite number "
                    "of cycles >= 0"
                )
        for k, step in enumerate(self.steps):
            if not _is_count(step.cycles):
                raise MeasuredProfileError(
                    f"{self.source}: step {k} ({step.name!r}, {step.type}) has {step.cycles!r} "
                    "cycles; required a finite number >= 0"
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
def _is_count(value: object) -> bool:
    """A finite real number >= 0 (not a bool): a cycle count."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        return False
    return bool(np.isfinite(value)) and value >= 0


_NUMBER = re.compile(r"[+-]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?")


def parse_number(token: str) -> float | None:
    """``"6,681,766"`` -> 6681766.0, ``"3,801.8"`` -> 3801.8; None if not such a number."""
    if not _NUMBER.fullmatch(token):
        return None
    return float(token.replace(",", ""))
