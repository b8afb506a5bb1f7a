"""``session.getReport()``: the graph and execution profiles as objects, shaped like
what Graphcore's libpva (``pva.openReport``) gives a script.

``report.compilation.computeSets`` (each with ``name``, ``vertexCount``,
``cycleEstimate``: the largest tile's), ``report.compilation.tiles`` (each with
``memory.total`` and ``memory.totalIncludingGaps`` in bytes; ``memory.total`` also
has libpva's ``excludingGaps`` and ``includingGaps``),
``report.compilation.target`` (``totalMemory``, ``bytesPerTile``, ``numTiles``,
``clockFrequency``) and ``report.execution.steps`` (each with ``name``, ``type``,
``cyclesFrom``, ``cyclesTo``, ``cycles``) and ``report.execution.cycles`` (libpva's
``report.execution.totalCycles.total``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ComputeSet:
    """One compute set of the graph."""

    name: str
    vertexCount: int
    cycleEstimate: int


class MemoryTotal(int):
    """A tile's total bytes (an int, gaps excluded) with libpva's
    ``excludingGaps`` and ``includingGaps`` attributes (``t.memory.total.excludingGaps``)."""

    includingGaps: int

    def __new__(cls, excluding: int, including: int) -> MemoryTotal:
        obj = super().__new__(cls, excluding)
        obj.includingGaps = int(including)
        return obj

    @property
    def excludingGaps(self) -> int:
        """Bytes without the gaps between allocations."""
        return int(self)


@dataclass(frozen=True)
class TileMemory:
    """Bytes of one tile."""

    total: MemoryTotal
    totalIncludingGaps: int


@dataclass(frozen=True)
class Tile:
    """One tile of the compiled graph."""

    number: int
    memory: TileMemory


@dataclass(frozen=True)
class Target:
    """The device compiled for."""

    numTiles: int
    bytesPerTile: int
    totalMemory: int
    clockFrequency: float


@dataclass(frozen=True)
class Compilation:
    """What compiling the graph made."""

    target: Target
    computeSets: list[ComputeSet]
    tiles: list[Tile]


@dataclass(frozen=True)
class Step:
    """One step of the execution trace."""

    name: str
    type: str
    cyclesFrom: int
    cyclesTo: int
    cycles: int


@dataclass(frozen=True)
class TotalCycles:
    """libpva's ``execution.totalCycles``: ``total`` cycles of the runs so far."""

    total: int = 0


@dataclass(frozen=True)
class Execution:
    """The runs so far."""

    steps: list[Step] = field(default_factory=list)
    cycles: int = 0

    @property
    def totalCycles(self) -> TotalCycles:
        """The cycles as libpva gives them (``report.execution.totalCycles.total``)."""
        return TotalCycles(self.cycles)


@dataclass(frozen=True)
class Report:
    """``session.getReport()``."""

    compilation: Compilation
    execution: Execution


def make_report(graph: dict[str, Any], execution: dict[str, Any]) -> Report:
    """The report of a graph profile and an execution profile (poplar_api's dicts)."""
    cs = graph.get("computeSets", {})
    per_tile = cs.get("cycleEstimates", {}).get("cyclesByTile", [])
    sets = [
        ComputeSet(
            name, int(count), int(max(per_tile[i])) if i < len(per_tile) and per_tile[i] else 0
        )
        for i, (name, count) in enumerate(
            zip(cs.get("names", []), cs.get("vertexCounts", []), strict=False)
        )
    ]
    mem = graph.get("memory", {}).get("byTile", {})
    totals = mem.get("total", [])
    gaps = mem.get("totalIncludingGaps", totals)
    tiles = [
        Tile(i, TileMemory(MemoryTotal(int(t), int(g)), int(g)))
        for i, (t, g) in enumerate(zip(totals, gaps, strict=False))
    ]
    target = graph.get("target", {})
    bytes_per_tile = int(target.get("bytesPerTile", 0))
    num_tiles = len(tiles)
    compilation = Compilation(
        Target(
            num_tiles,
            bytes_per_tile,
            bytes_per_tile * num_tiles,
            float(target.get("clockFrequency", 0.0)),
        ),
        sets,
        tiles,
    )
    sim = execution.get("simulation", {})
    steps = [
        Step(
            str(s.get("name", "")),
            str(s.get("type", "")),
            int(s.get("cyclesFrom", 0)),
            int(s.get("cyclesTo", 0)),
            int(s.get("cycles", 0)),
        )
        for s in sim.get("steps", [])
    ]
    runs = execution.get("runs", [])
    cycles = sum(int(r["cyclesTo"] - r["cyclesFrom"]) for r in runs)
    return Report(compilation, Execution(steps, cycles))


__all__ = ["MemoryTotal", "Report", "TotalCycles", "make_report"]
