"""The trace of a run: one record per executed step, totals per phase.

Per-tile arrays are int64 over every tile of the machine (global tile ids). The same
config, program and data plane always give an identical trace (``fingerprint``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ipusim.ir import PHASE_NAMES, PHASES

__all__ = [
    "PHASES",
    "SUMMARY_LAYOUTS",
    "BlockRecord",
    "ReplicaRecord",
    "StepRecord",
    "Trace",
    "ipu_sums",
]

#: Layouts of :meth:`Trace.summary` (named as ``printProfileSummary``'s ``summaryLayout``).
SUMMARY_LAYOUTS = ("sdk1", "sdk2")
#: Architectures whose summary is in the SDK 1.x layout (sums over tiles) by default.
SDK1_ARCHS = frozenset({"ipu1"})


def ipu_sums(per_tile: np.ndarray, num_ipus: int) -> np.ndarray:
    """int64[num_ipus]: a per-tile array (global tile ids) summed over each IPU's tiles."""
    arr = np.asarray(per_tile, np.int64)
    return arr.reshape(num_ipus, -1).sum(axis=1)


@dataclass(slots=True)  # a long run keeps one per executed step
class StepRecord:
    """One executed step.

    Attributes
    ----------
    index
        Position of the step in execution order.
    kind, phase
        The IR step kind (``compute``, ``exchange``, ...) and the phase it counts in.
    name, program_id
        Debug name and user-level program id carried by the IR step.
    first_cycle, last_cycle
        Earliest start and latest end over all tiles (``last_cycle`` exclusive).
    tile_cycles
        Cycles each tile spent in the step (waiting included for collective steps).
    active_cycles
        For compute steps, Σ of vertex estimates per tile; None otherwise.
    """

    index: int
    kind: str
    phase: str
    name: str
    program_id: int
    first_cycle: int
    last_cycle: int
    tile_cycles: np.ndarray
    active_cycles: np.ndarray | None = None
    step: object = field(default=None, repr=False, compare=False)
    details: object = field(default=None, repr=False, compare=False)

    @property
    def cycles(self) -> int:
        """Duration of the step: ``last_cycle - first_cycle``."""
        return self.last_cycle - self.first_cycle


#: The slots of a record's per-tile arrays (a :class:`ReplicaRecord` reads them under
#: properties of the same names).
_TILE_CYCLES = StepRecord.tile_cycles
_ACTIVE_CYCLES = StepRecord.active_cycles


class ReplicaRecord(StepRecord):
    """A :class:`StepRecord` of a run whose replicas went in lockstep: every replica's
    per-tile cycles are replica 0's, so the record holds replica 0's part of each array
    (``tile_part``, ``active_part``: the first ``tiles / replicas`` tiles) and makes
    ``tile_cycles`` and ``active_cycles`` over every tile of the machine when they are
    first read, through ``whole`` (a callable from a part to its array over every
    replica, read-only, which hands records of one part the same array).

    A POD16's run of a hundred steps otherwise makes a hundred arrays of 23,552 tiles
    (188 KB each, every page of them touched for the first time in a process's first
    run), which only a reader of the trace's per-tile cycles needs; the values read are
    the same. Setting ``tile_cycles`` or ``active_cycles`` sets the whole array.
    """

    __slots__ = ("active_part", "tile_part", "whole")

    tile_part: np.ndarray | None
    active_part: np.ndarray | None
    whole: Any

    @classmethod
    def of(cls, rec: StepRecord, whole: Any) -> ReplicaRecord:
        """``rec`` (whose per-tile arrays are replica 0's parts) as a replica record."""
        out = cls.__new__(cls)  # (slot by slot: a quarter of the time of a loop over them)
        out.index, out.kind, out.phase, out.name = rec.index, rec.kind, rec.phase, rec.name
        out.program_id, out.step, out.details = rec.program_id, rec.step, rec.details
        out.first_cycle, out.last_cycle = rec.first_cycle, rec.last_cycle
        _TILE_CYCLES.__set__(out, None)
        _ACTIVE_CYCLES.__set__(out, None)
        out.tile_part = _TILE_CYCLES.__get__(rec)
        out.active_part = _ACTIVE_CYCLES.__get__(rec)
        out.whole = whole
        return out

    def _get_tile_cycles(self) -> np.ndarray:
        full = _TILE_CYCLES.__get__(self)
        if full is None:
            full = self.whole(self.tile_part)
            _TILE_CYCLES.__set__(self, full)
        return full

    def _set_tile_cycles(self, value: np.ndarray) -> None:
        _TILE_CYCLES.__set__(self, value)
        self.tile_part = None

    def _get_active_cycles(self) -> np.ndarray | None:
        full = _ACTIVE_CYCLES.__get__(self)
        if full is None and getattr(self, "active_part", None) is not None:
            full = self.whole(self.active_part)
            _ACTIVE_CYCLES.__set__(self, full)
        return full

    def _set_active_cycles(self, value: np.ndarray | None) -> None:
        _ACTIVE_CYCLES.__set__(self, value)
        self.active_part = None

    def __reduce__(self) -> tuple:
        """Pickled (and copied) as a :class:`StepRecord` of the whole arrays."""
        return StepRecord, tuple(getattr(self, name) for name in StepRecord.__slots__)

    tile_cycles = property(_get_tile_cycles, _set_tile_cycles)  # type: ignore[assignment]
    active_cycles = property(_get_active_cycles, _set_active_cycles)  # type: ignore[assignment]


@dataclass
class BlockRecord:
    """One execution of a lightweight-profiling block (an :class:`ipusim.ir.Block`).

    Attributes
    ----------
    index
        Position of the execution among the run's block executions (order of entry,
        so an enclosing block comes before the blocks nested in it).
    name, program_id
        The block's name and the user-level program id it carries.
    cycles_from, cycles_to
        Per tile (global ids): the tile's clock when the block started and when it
        ended, so ``cycles_to - cycles_from`` is the sum of the tile cycles of the
        block's steps on that tile. ``-1`` in ``cycles_to`` when the run stopped
        inside the block.
    node
        The IR node (for program numbering in profiles).
    """

    index: int
    name: str
    program_id: int
    cycles_from: np.ndarray
    cycles_to: np.ndarray
    node: object = field(default=None, repr=False, compare=False)


@dataclass
class Trace:
    """Result of :meth:`ipusim.machine.Machine.run`.

    Attributes
    ----------
    records
        Executed steps in order.
    tile_end_cycles
        Final clock of every tile; ``total_cycles`` is their maximum.
    host_seconds
        Wall-clock seconds the simulation took (not part of the fingerprint).
    complete
        False when the run stopped early (timeout or error); the records are what
        was measured until then.
    entry
        Index of the entry program that ran.
    decisions
        ``(predicate, value)`` of every control decision, in order: enough to run the
        same path again without the values (:meth:`ScriptedDataPlane.from_trace`).
    blocks
        Every execution of a lightweight-profiling block, in order of entry.
    arch
        The config's ``arch`` (``ipu1``, ``ipu2``, ``ipu21``, ``custom``): it chooses
        the default layout of :meth:`summary`. Not part of the fingerprint.
    """

    config_name: str
    config_hash: str
    clock_hz: float
    num_tiles: int
    tiles_per_ipu: int
    records: list[StepRecord]
    tile_end_cycles: np.ndarray
    host_seconds: float = 0.0
    complete: bool = True
    entry: int = 0
    decisions: list[tuple[int, int]] = field(default_factory=list)
    blocks: list[BlockRecord] = field(default_factory=list)
    arch: str = "custom"

    @property
    def total_cycles(self) -> int:
        """Cycles from the start of the run until the last tile finished."""
        return int(self.tile_end_cycles.max(initial=0))

    @property
    def simulated_seconds(self) -> float:
        """``total_cycles`` at the tile clock."""
        return self.total_cycles / self.clock_hz

    @property
    def cycles_per_host_second(self) -> float:
        """Simulated cycles per second of host time (0 when not measured)."""
        return self.total_cycles / self.host_seconds if self.host_seconds > 0 else 0.0

    def phase_tile_cycles(self, phase: str) -> np.ndarray:
        """Per-tile cycles spent in ``phase`` over the whole run."""
        if phase not in PHASES:
            raise ValueError(f"unknown phase {phase!r}; expected one of {PHASES}")
        out = np.zeros(self.num_tiles, np.int64)
        for rec in self.records:
            if rec.phase == phase:
                out += rec.tile_cycles
        return out

    @property
    def totals(self) -> dict[str, int]:
        """Cycles per phase summed over tiles.

        ``compute`` includes idle threads (tile cycles); ``compute_active`` excludes
        them (Σ vertex estimates).
        """
        out = dict.fromkeys(("compute", "compute_active", *PHASES[1:]), 0)
        for rec in self.records:
            out[rec.phase] += int(rec.tile_cycles.sum())
            if rec.active_cycles is not None:
                out["compute_active"] += int(rec.active_cycles.sum())
        return out

    @property
    def num_ipus(self) -> int:
        """IPUs of the machine the run was on."""
        return max(1, int(self.num_tiles) // int(self.tiles_per_ipu))

    def ipu_totals(self) -> list[dict[str, int]]:
        """Cycles per phase summed over the tiles of each IPU (list index = IPU).

        The keys are those of :attr:`totals` plus ``end_cycle``, the IPU's last tile
        clock. Summed over the IPUs each phase equals :attr:`totals`; on several IPUs
        this is where the global exchange and the syncs (waits included) of each IPU
        show separately.
        """
        n = self.num_ipus
        keys = ("compute", "compute_active", *PHASES[1:])
        sums = {k: np.zeros(n, np.int64) for k in keys}
        for rec in self.records:
            sums[rec.phase] += ipu_sums(rec.tile_cycles, n)
            if rec.active_cycles is not None:
                sums["compute_active"] += ipu_sums(rec.active_cycles, n)
        end = np.asarray(self.tile_end_cycles, np.int64).reshape(n, -1).max(axis=1, initial=0)
        return [{**{k: int(sums[k][i]) for k in keys}, "end_cycle": int(end[i])} for i in range(n)]

    def fingerprint(self) -> str:
        """A hash of everything simulated: equal traces, equal hashes.

        Host time and the config hash are left out, so runs that differ only in
        simulation settings (``sim.granularity``) must fingerprint the same.
        """
        h = hashlib.sha256()
        h.update(f"{self.num_tiles}|{self.clock_hz}|{self.complete}".encode())
        for r in self.records:
            h.update(
                f"{r.index}|{r.kind}|{r.phase}|{r.name}|{r.program_id}|"
                f"{r.first_cycle}|{r.last_cycle}".encode()
            )
            h.update(np.ascontiguousarray(r.tile_cycles, np.int64).tobytes())
            if r.active_cycles is not None:
                h.update(np.ascontiguousarray(r.active_cycles, np.int64).tobytes())
        for b in self.blocks:
            h.update(f"block|{b.index}|{b.name}|{b.program_id}".encode())
            h.update(np.ascontiguousarray(b.cycles_from, np.int64).tobytes())
            h.update(np.ascontiguousarray(b.cycles_to, np.int64).tobytes())
        h.update(np.ascontiguousarray(self.tile_end_cycles, np.int64).tobytes())
        return h.hexdigest()

    def _repr_html_(self) -> str:
        """Totals and the first steps as an HTML table, for notebooks."""
        from ipusim.profile.frames import trace_html

        return trace_html(self)

    def summary_layout(self, layout: str | None = None) -> str:
        """``layout`` checked, or the default of this trace's ``arch``: ``sdk1`` for
        ``ipu1`` (Poplar SDK 1.x summed the phases over tiles), ``sdk2`` otherwise
        (SDK 2.x/3.x and PopVision show tile averages) -- the rule of the engine's
        ``printProfileSummary`` option ``summaryLayout``.

        Raises
        ------
        ValueError
            ``layout`` is not one of :data:`SUMMARY_LAYOUTS`.
        """
        if layout is None:
            return "sdk1" if self.arch in SDK1_ARCHS else "sdk2"
        if layout not in SUMMARY_LAYOUTS:
            raise ValueError(
                f"Trace.summary layout: found {layout!r}; expected one of "
                f"{', '.join(SUMMARY_LAYOUTS)} (sdk2: tile averages, as Poplar SDK 2.x/3.x "
                "and PopVision show; sdk1: sums over tiles, as SDK 1.x did)"
            )
        return layout

    def summary(self, layout: str | None = None) -> str:
        """A short text summary: cycles per phase and simulation speed.

        Parameters
        ----------
        layout
            ``sdk2``: each phase as a tile average (summed over the tiles, divided by
            the tile count) with its share of the total cycles, so the phases compare
            with the total; ``sdk1``: each phase summed over the tiles. Default by
            ``arch`` (:meth:`summary_layout`). The second line says which it is.
        """
        layout = self.summary_layout(layout)
        t = self.totals
        tiles = int(self.num_tiles)
        lines = [
            f"Machine: {self.config_name} ({tiles} tiles, "
            f"{self.clock_hz / 1e9:.3g} GHz), config hash {self.config_hash}",
        ]
        rows = [
            ("compute cycles (including idle threads)", t["compute"]),
            ("compute cycles (excluding idle threads)", t["compute_active"]),
            *((f"{PHASE_NAMES[p].label} cycles", t[p]) for p in PHASES[1:]),
        ]
        total = f"{self.total_cycles:,} ({self.simulated_seconds * 1e6:.2f} us)"
        if layout == "sdk2":
            lines.append(
                f"Layout sdk2: tile averages (each phase summed over the {tiles} tiles, "
                f"divided by {tiles})"
            )
            lines.append(f"{'Total cycles:':<55}{total}")
            for label, value in rows:
                average = value / tiles if tiles else 0.0
                share = average / self.total_cycles if self.total_cycles else 0.0
                lines.append(f"{f'Tile average {label}:':<55}{average:,.1f} ({share:.1%} of total)")
        else:
            lines.append(f"Layout sdk1: sums over tiles (each phase summed over the {tiles} tiles)")
            lines.append(f"{'Total cycles:':<47}{total}")
            lines += [f"{f'Total {label}:':<47}{value:,}" for label, value in rows]
        lines.append(
            f"Steps executed: {len(self.records):,}; host time {self.host_seconds:.3f} s; "
            f"{self.cycles_per_host_second:,.0f} simulated cycles per host second"
        )
        if self.num_ipus > 1:
            per = int(self.tiles_per_ipu)
            kind = (
                f"tile average over its {per} tiles" if layout == "sdk2" else "sum over its tiles"
            )
            labels = " / ".join(PHASE_NAMES[p].label for p in PHASES)
            lines.append(f"Cycles by IPU ({kind}): {labels}; last tile clock")
            for i, u in enumerate(self.ipu_totals()):
                if layout == "sdk2":
                    cells = " / ".join(f"{u[k] / per:,.1f}" for k in PHASES)
                else:
                    cells = " / ".join(f"{u[k]:,}" for k in PHASES)
                lines.append(f"  IPU {i}: {cells}; {u['end_cycle']:,}")
        if not self.complete:
            lines.append("(incomplete run: the records end where the run stopped)")
        return "\n".join(lines)
