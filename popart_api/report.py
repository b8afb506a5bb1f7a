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

The session's text and JSON reports follow the PopART User Guide ("Retrieving
profiling reports", graphcore/popart ``docs/user_guide/executing.rst``) and PopART's
``Devicex::getSummaryReport``/``getGraphReport``/``getExecutionReport``
(``willow/src/popx/devicex.cpp``, commit 28498dc): :func:`graph_report`,
:func:`execution_report` and :func:`summary_report`.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import cbor2

from poplar_api.summary import printGraphSummary

#: What the summary says in place of its Execution section, and the whole execution
#: report, when profiling is not enabled (the PopART User Guide's words).
NOT_ENABLED = "Execution profiling not enabled"
NOT_ENABLED_PROFILE: dict[str, str] = {"profilerMode": "NONE"}


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


class JsonReport(str):
    """A JSON report as PopART returns it: the text (``json.loads`` reads it), which
    also reads as the object it encodes (``report["memory"]``, ``get``, ``keys``,
    ``items``; ``report.json()`` is the whole dict), as ipusim's reports always did."""

    _data: dict[str, Any]

    def __new__(cls, data: Mapping[str, Any]) -> JsonReport:
        obj = super().__new__(cls, json.dumps(data, separators=(",", ":")))
        obj._data = dict(data)
        return obj

    def __getitem__(self, key: Any) -> Any:  # type: ignore[override]
        if isinstance(key, str):
            return self._data[key]
        return str.__getitem__(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key`` in the report, else ``default``."""
        return self._data.get(key, default)

    def keys(self) -> Iterator[str]:
        """The report's top-level keys."""
        return iter(self._data.keys())

    def items(self) -> Iterator[tuple[str, Any]]:
        """The report's top-level items."""
        return iter(self._data.items())

    def json(self) -> dict[str, Any]:
        """The report as a dict of JSON types."""
        return self._data


def profiling_enabled(execution: Mapping[str, Any]) -> bool:
    """Whether an execution profile holds profiling: runs on an IPU Model device are
    always simulated and profiled (``profilerMode`` ``IPU_MODEL``); a hardware device
    is profiled only when instrumented (``debug.instrument`` and its kin, anything but
    ``NONE``); a CPU device never is."""
    return execution.get("profilerMode") not in ("NONE", "CPU")


def _encode(profile: Mapping[str, Any], use_cbor: bool) -> JsonReport | bytes:
    return cbor2.dumps(dict(profile)) if use_cbor else JsonReport(profile)


def graph_report(engine: Any, use_cbor: bool = False) -> JsonReport | bytes:
    """``getGraphReport(useCbor)``: the graph profile as JSON text, or CBOR bytes."""
    return _encode(engine.getGraphProfile(), use_cbor)


def execution_report(
    engine: Any, use_cbor: bool = False, reset_profile: bool = True
) -> JsonReport | bytes:
    """``getExecutionReport(useCbor, resetProfile)``: the execution profile of the runs
    since the last reset, as JSON text or CBOR bytes; ``{"profilerMode":"NONE"}`` when
    profiling is not enabled. ``reset_profile`` forgets those runs afterwards."""
    profile = engine.getExecutionProfile()
    if not profiling_enabled(profile):
        profile = NOT_ENABLED_PROFILE
    if reset_profile:
        engine.resetExecutionProfile()
    return _encode(profile, use_cbor)


def summary_report(
    engine: Any, options: Mapping[str, Any] | None = None, reset_profile: bool = True
) -> str:
    """``getSummaryReport(resetProfile)``: the profile summary printed with the
    session's ``reportOptions``; when profiling is not enabled, the graph's sections
    and the line :data:`NOT_ENABLED` in place of the Execution section.
    ``reset_profile`` forgets the runs afterwards."""
    options = dict(options or {})
    out = io.StringIO()
    if profiling_enabled(engine.getExecutionProfile()):
        engine.printProfileSummary(out, options)
    else:
        printGraphSummary(out, engine.getGraphProfile(), options)
        out.write(NOT_ENABLED + "\n")
    if reset_profile:
        engine.resetExecutionProfile()
    return out.getvalue()


__all__ = [
    "NOT_ENABLED",
    "JsonReport",
    "MemoryTotal",
    "Report",
    "TotalCycles",
    "execution_report",
    "graph_report",
    "make_report",
    "profiling_enabled",
    "summary_report",
]
