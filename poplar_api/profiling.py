"""Profiles of a compiled graph and its runs, with Poplar's names.

* :func:`graph_profile` builds what ``Engine.getGraphProfile()`` returns: the static
  picture of the compiled graph (target, graph sizes, vertex types, compute sets and
  their cycle estimates, exchanges, the program tree, memory). Everything is a plain
  JSON type; per-tile arrays are lists of ints over every tile of the machine.
* :func:`serializeToJSON` and :func:`serializeToCBOR` write a profile as Poplar's
  functions of the same names do.
* :func:`printProfileSummary` prints the summary of a graph profile and an execution
  profile (the same text as ``Engine.printProfileSummary``).
* :func:`check_engine_options` validates engine options against
  :data:`ENGINE_OPTIONS`, and :func:`write_auto_report` writes the ``autoReport.*``
  files after a run.

Program ids: ``programs`` lists every node of the lowered machine program once, in
the order of :func:`ipusim.profile.execution.program_table`; the execution profile's
steps refer to the same indices.
"""

from __future__ import annotations

import io
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import cbor2
import numpy as np

from ipusim import ir
from ipusim.config import MachineConfig, config_hash
from ipusim.files import FileGroup
from ipusim.profile.execution import ProgramTable, program_table
from ipusim.profile.memory_categories import (
    by_category,
    by_compute_set,
    by_vertex_type,
    liveness,
)
from ipusim.sync.controller import relative_sync_delays
from ipusim.tile.compute import ComputeCost
from ipusim.tile.counted import CountedCompute, CountedComputeCost
from ipusim.timing import TimingModel
from poplar_api.engine_options import (
    ENGINE_OPTIONS,
    EngineOption,
    check_engine_options,
    option,
)
from poplar_api.errors import EngineError
from poplar_api.logging_config import logger
from poplar_api.lowering.memory import exchange_code

__all__ = [
    "ENGINE_OPTIONS",
    "EngineOption",
    "check_engine_options",
    "graph_profile",
    "instrument_execution_profile",
    "instrumentation",
    "printProfileSummary",
    "profiler_mode",
    "serializeToCBOR",
    "serializeToJSON",
    "write_auto_report",
    "write_graph_report",
]


#: The graph profile's table of the steps of each phase (a sync has none): compute
#: sets, internal exchanges, global exchanges and collectives, host copies.
_PHASE_TABLES = {
    "compute": "computeSets",
    "internal_exchange": "exchanges",
    "global_exchange": "externalExchanges",
    "host_exchange": "hostExchanges",
}
#: Program type tags of the steps that compute instrumentation gives per-tile cycles
#: (on-tile execution), and of those external-exchange instrumentation does.
_COMPUTE_TAGS = frozenset(k.tag for k in ir.STEP_KINDS.values() if k.phase == "compute")
_EXTERNAL_TAGS = frozenset(
    k.tag for k in ir.STEP_KINDS.values() if k.phase in ("global_exchange", "host_exchange")
)


#: ``debug.executionProfile`` (SDK 1.x) -> the compute instrumentation level it asks for.
_MODE_LEVEL = {"compute_sets": "tile", "vertices": "vertex", "single_tile_compute_sets": "ipu"}


def instrumentation(options: Mapping[str, str]) -> dict[str, Any]:
    """What the execution profile records, from the ``debug.instrument*`` options.

    ``debug.instrument`` turns on every kind of instrumentation, as on Poplar. The
    SDK 1.x option ``debug.executionProfile`` names the same choices by the profile's
    ``profilerMode`` (``compute_sets``: compute at level ``tile``, ``vertices``: level
    ``vertex``, ``single_tile_compute_sets``: level ``ipu``, ``external_exchanges``:
    the stream copies); an explicit ``debug.computeInstrumentationLevel`` wins over
    the level it implies.

    Returns
    -------
    dict
        ``compute`` (bool), ``externalExchange`` (bool), ``controlFlow`` (bool) and
        ``computeLevel`` (``vertex``, ``tile`` or ``ipu``; ``device`` is read as ``ipu``).
    """
    every = option(options, "debug.instrument") == "true"
    mode = option(options, "debug.executionProfile")
    mode_level = _MODE_LEVEL.get(mode)
    level = option(options, "debug.computeInstrumentationLevel")
    if mode_level is not None and "debug.computeInstrumentationLevel" not in options:
        level = mode_level
    return {
        "compute": every
        or mode_level is not None
        or option(options, "debug.instrumentCompute") == "true",
        "externalExchange": every
        or mode == "external_exchanges"
        or option(options, "debug.instrumentExternalExchange") == "true",
        "controlFlow": every or option(options, "debug.instrumentControlFlow") == "true",
        "computeLevel": "ipu" if level == "device" else level,
    }


def profiler_mode(target_type: str, options: Mapping[str, str]) -> str:
    """The execution profile's ``profilerMode`` (Poplar Profile Data, 4.2.1) for a
    device of ``target_type`` (``IPU_MODEL``, ``IPU``, ``CPU``) and the engine options.

    An IPU Model's profile is ``IPU_MODEL`` and a CPU's ``CPU``. On hardware Poplar
    names the instrumentation that gathered the cycles: compute sets per tile
    (``COMPUTE_SETS``, level ``tile``), per compute set (``SINGLE_TILE_COMPUTE_SETS``,
    levels ``ipu``/``device``), per vertex (``VERTICES``), external exchanges alone
    (``EXTERNAL_EXCHANGES``), or ``NONE``. ipusim's steps keep their simulated cycles
    in every mode.
    """
    if target_type in ("IPU_MODEL", "CPU"):
        return target_type
    inst = instrumentation(options)
    if inst["compute"]:
        level = inst["computeLevel"]
        return {"vertex": "VERTICES", "tile": "COMPUTE_SETS"}.get(level, "SINGLE_TILE_COMPUTE_SETS")
    return "EXTERNAL_EXCHANGES" if inst["externalExchange"] else "NONE"


def instrument_execution_profile(
    profile: dict[str, Any],
    traces: Sequence[Any],
    options: Mapping[str, str],
    target_type: str = "IPU_MODEL",
) -> dict[str, Any]:
    """Add to an execution profile what the instrumentation options ask for (in place).

    * ``profilerMode``: :func:`profiler_mode` of the device's ``target_type``.
    * ``simulation.instrumentation``: the :func:`instrumentation` settings, always.
    * ``simulation.vertexCycleSources``: vertex type -> ``counted`` or ``estimate``
      (where its cycles came from), and ``simulation.cyclesByVertexType``: vertex type
      -> its cycles summed over the run's executions (counted ones where counted),
      only in runs with counted vertices (docs/counted_cycles.md).
    * Compute instrumented (``debug.instrumentCompute`` or ``debug.instrument``):
      level ``tile`` gives every OnTileExecute step ``tileCycles`` (cycles of each
      tile of the machine); level ``vertex`` gives it ``vertexCycles`` instead
      (``tiles``, ``types`` and ``cycles`` of every vertex, in the order of the compute
      set: thread cycles for worker vertices, tile cycles for multi/supervisor
      vertices; a counted execution's own cycles); level ``ipu`` adds nothing (one
      cycle count per step, as without instrumentation).
    * External exchange instrumented: every StreamCopy and GlobalExchange step gets
      ``tileCycles``.

    The steps of ``profile`` must be those of ``traces`` (one per record, in order).
    """
    inst = instrumentation(options)
    profile["profilerMode"] = profiler_mode(target_type, options)
    simulation = profile["simulation"]
    simulation["instrumentation"] = inst
    records = [rec for trace in traces for rec in trace.records]
    sources = _cycle_sources(records)
    if sources:  # only runs with counted vertices: others keep their profile as it was
        simulation["vertexCycleSources"] = sources
        simulation["cyclesByVertexType"] = _cycles_by_vertex_type(records)
    if not (inst["compute"] or inst["externalExchange"]):
        return profile
    for step, rec in zip(simulation["steps"], records, strict=False):
        if step["type"] in _COMPUTE_TAGS and inst["compute"]:
            if inst["computeLevel"] == "tile":
                step["tileCycles"] = _ints(rec.tile_cycles)
            elif inst["computeLevel"] == "vertex" and isinstance(rec.step, ir.Compute):
                cs = rec.step
                names = cs.vertex_type_names
                kinds = (
                    np.zeros(len(cs.vertex_tile), np.int64)
                    if cs.vertex_type is None
                    else np.asarray(cs.vertex_type, np.int64)
                )
                cost = rec.details  # a counted execution: the cycles it counted
                counted = cost.inputs[3] if isinstance(cost, CountedComputeCost) else None
                step["vertexCycles"] = {
                    "tiles": _ints(cs.vertex_tile),
                    "types": [names[k] for k in kinds.tolist()],
                    "cycles": _ints(cs.vertex_cycles if counted is None else counted),
                }
        elif step["type"] in _EXTERNAL_TAGS and inst["externalExchange"]:
            step["tileCycles"] = _ints(rec.tile_cycles)
    return profile


def _cycle_sources(records: Sequence[Any]) -> dict[str, str]:
    """Where each vertex type's cycles came from (``counted`` or ``estimate``), for runs
    with counted compute steps (docs/counted_cycles.md); empty for the others."""
    sources: dict[str, str] = {}
    seen: set[int] = set()
    for rec in records:
        step = rec.step
        if not isinstance(step, CountedCompute) or id(step) in seen:
            continue
        seen.add(id(step))
        for name, source in zip(step.vertex_type_names, step.cycle_sources, strict=False):
            sources[name] = source if sources.get(name, source) == source else "mixed"
    return dict(sorted(sources.items()))


def _cycles_by_vertex_type(records: Sequence[Any]) -> dict[str, int]:
    """Σ over the run's compute steps of each vertex type's cycles (its vertices'
    cycles plus launch, as ``activeCyclesByVertexType``), each execution with the
    cycles it took: counted ones for counted executions, estimates for the others."""
    totals: dict[str, int] = {}
    for rec in records:
        step = rec.step
        if not isinstance(step, ir.Compute):
            continue
        cost = rec.details  # what the execution was costed from (counted or not)
        known = isinstance(cost, ComputeCost) and cost.inputs is not None
        tile = cost.inputs[0] if known else None
        cycles = np.asarray(cost.inputs[3] if known else step.vertex_cycles, np.int64)
        if tile is not None:
            launch = np.where(
                step.vertex_multi, tile.multi_vertex_launch_cycles, tile.vertex_launch_cycles
            )
            cycles = cycles + launch
        by_type = np.bincount(
            step.vertex_type, weights=cycles, minlength=len(step.vertex_type_names)
        )
        for name, value in zip(step.vertex_type_names, by_type.tolist(), strict=True):
            totals[name] = totals.get(name, 0) + int(value)
    return dict(sorted(totals.items()))


def _ints(values: Any) -> list[int]:
    return np.asarray(values, np.int64).reshape(-1).tolist()


def _config(engine: Any) -> MachineConfig:
    """The device's config once loaded (its sync settings may differ), else the graph's.

    A replicated graph's collectives and cross-replica copies name the IPUs of every
    replica, so its profile is costed on the whole device's machine (the loaded timed
    device, else the device the graph was made for), never on one replica's.
    """
    device = getattr(engine, "_device", None)
    state = engine._state
    if getattr(engine, "replicas", 1) > 1 and (device is None or not device.isTimed):
        return state.device_target.config
    if device is not None:
        return device.getTarget().config
    return state.target.config


def _timing(engine: Any, cfg: MachineConfig) -> TimingModel:
    """The timing model the engine's runs use (the same object), else one for ``cfg``."""
    timing = getattr(engine, "timing", None)
    return timing if timing is not None and timing.config is cfg else TimingModel(cfg)


def _target(engine: Any, cfg: MachineConfig) -> dict[str, Any]:
    device = getattr(engine, "_device", None)
    target = device.getTarget() if device is not None else engine._state.target
    per_tile = cfg.memory.tile_memory_bytes
    out = {
        "type": target.getTargetType().value,
        "configName": cfg.name,
        "arch": target.getTargetArchString(),
        "configHash": config_hash(cfg),
        "bytesPerIPU": per_tile * cfg.tile.tiles_per_ipu,
        "bytesPerTile": per_tile,
        "clockFrequency": float(cfg.tile.clock_hz),
        "numIPUs": cfg.num_ipus,
        "tilesPerIPU": cfg.tile.tiles_per_ipu,
        "numTiles": cfg.num_tiles,
        "numWorkerContexts": cfg.tile.worker_contexts,
        "totalMemory": per_tile * cfg.num_tiles,
        "relativeSyncDelayByTile": _ints(relative_sync_delays(cfg)),
        "minSyncDelay": int(cfg.sync.min_sync_delay_cycles),
    }
    replicas = int(getattr(engine, "replicas", 1))
    if replicas > 1:  # a replicated graph: each replica's share of the device
        ipus = max(cfg.num_ipus // replicas, 1)
        tiles = ipus * cfg.tile.tiles_per_ipu
        out.update(
            numReplicas=replicas,
            ipusPerReplica=ipus,
            tilesPerReplica=tiles,
            memoryPerReplica=tiles * per_tile,
        )
    return out


def _graph(state: Any) -> dict[str, int]:
    edges = state.vertices.edge_count()
    return {
        "numComputeSets": len(state.compute_sets),
        "numEdges": edges,
        "numVars": len(state.variables),
        "numVertices": len(state.vertices),
    }


def _compute_sets(
    timing: TimingModel, steps: list[ir.Compute], type_names: list[str]
) -> dict[str, Any]:
    index = {n: i for i, n in enumerate(type_names)}
    out: dict[str, list[Any]] = {
        "names": [],
        "vertexCounts": [],
        "vertexTypes": [],
        "vertexCountsByType": [],
    }
    est: dict[str, list[Any]] = {
        "activeCyclesByTile": [],
        "activeCyclesByVertexType": [],
        "cyclesByTile": [],
    }
    tile = timing.config.tile
    for step in steps:
        cost = timing.cost(step)
        glob = np.array([index[n] for n in step.vertex_type_names], np.int64)[step.vertex_type]
        counts = np.bincount(glob, minlength=len(type_names))
        by_type = np.zeros(len(type_names), np.int64)
        launch = np.where(
            step.vertex_multi, tile.multi_vertex_launch_cycles, tile.vertex_launch_cycles
        )
        np.add.at(by_type, glob, step.vertex_cycles + launch)
        out["names"].append(step.name)
        out["vertexCounts"].append(step.num_vertices)
        out["vertexTypes"].append(_ints(np.flatnonzero(counts)))
        out["vertexCountsByType"].append(_ints(counts))
        est["activeCyclesByTile"].append(_ints(cost.active_cycles))
        est["activeCyclesByVertexType"].append(_ints(by_type))
        est["cyclesByTile"].append(_ints(cost.tile_cycles))
    out["cycleEstimates"] = est
    return out


def _exchanges(timing: TimingModel, steps: list[ir.Exchange]) -> dict[str, Any]:
    """Internal exchanges; ``memoryByInstruction`` holds each one's exchange code per
    tile by what the code does (``setup``, ``send``, ``receive``: the blocks memory
    placement charges to ``internalExchangeCode``; none for the on-chip side of a
    stream copy, whose code is the copy's ``hostExchangeCode``), ``codeBytesByTile``
    their sum on each tile (the name Poplar's profile gives it: graphcore/poplibs
    ``tools/plot_metric_variation.py`` sums ``exchanges.codeBytesByTile``)."""
    out: dict[str, list[Any]] = {
        "names": [],
        "bytesReceivedByTile": [],
        "bytesSentByTile": [],
        "estimatedCyclesByTile": [],
        "memoryByInstruction": [],
        "codeBytesByTile": [],
    }
    none = np.zeros(timing.config.num_tiles, np.int64)
    for step in steps:
        cost = timing.cost(step)
        out["names"].append(step.name)
        out["bytesReceivedByTile"].append(_ints(cost.bytes_received))
        out["bytesSentByTile"].append(_ints(cost.bytes_sent))
        out["estimatedCyclesByTile"].append(_ints(cost.cycles))
        code = (
            {k: none for k in ("setup", "send", "receive")}
            if step.host
            else exchange_code(timing, step)
        )
        out["memoryByInstruction"].append({k: _ints(v) for k, v in code.items()})
        out["codeBytesByTile"].append(_ints(sum(code.values(), none)))
    return out


def _external_exchanges(timing: TimingModel, steps: list[ir.Step]) -> dict[str, Any]:
    """Global exchanges and collectives (a collective's cost has no per-tile bytes:
    they are listed as 0)."""
    out: dict[str, list[Any]] = {
        "names": [],
        "bytesReceivedByTile": [],
        "bytesSentByTile": [],
        "cycles": [],
    }
    none = np.zeros(timing.config.num_tiles, np.int64)
    for step in steps:
        cost = timing.cost(step)
        out["names"].append(step.name)
        out["bytesReceivedByTile"].append(_ints(getattr(cost, "bytes_received", none)))
        out["bytesSentByTile"].append(_ints(getattr(cost, "bytes_sent", none)))
        out["cycles"].append(int(cost.cycles))
    return out


def _host_exchanges(timing: TimingModel, steps: list[ir.StreamCopy]) -> dict[str, Any]:
    """Host copies; ``cycles`` per IPU with the link to itself (a run may share it)."""
    out: dict[str, list[Any]] = {
        "names": [],
        "streams": [],
        "directions": [],
        "bytesByTile": [],
        "cycles": [],
    }
    num_tiles = timing.config.num_tiles
    for step in steps:
        per_tile = np.bincount(step.tile, weights=step.num_bytes, minlength=num_tiles)
        per_tile = np.rint(per_tile).astype(np.int64)
        out["names"].append(step.name)
        out["streams"].append(step.stream)
        out["directions"].append(step.direction.value)
        out["bytesByTile"].append(_ints(per_tile))
        out["cycles"].append(int(timing.stream_copy_cycles(step).max(initial=0)))
    return out


def _global_ipus(step: ir.GlobalExchange, tiles_per_ipu: int) -> list[int]:
    """The IPUs a global exchange involves: its transfers' ends and its ``ipus``."""
    ends = np.concatenate((step.src_tile, step.dst_tile)) // tiles_per_ipu
    return sorted({*(int(i) for i in ends), *(step.ipus or ())})


class _ProgramDetails(ir.Visitor):
    """What the graph profile says of one program node besides its children: Poplar's
    type tag, its name and what its kind adds (one method per kind of node; a
    :class:`~ipusim.ir.Block` is listed as the Sequence it is)."""

    def __init__(
        self, where: dict[int, int], tiles_per_ipu: int, undefs: frozenset[int] = frozenset()
    ) -> None:
        self.where = where
        self.tiles_per_ipu = tiles_per_ipu
        self.undefs = undefs

    def visit_step(self, node: ir.Step) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "type": node.tag,
            "name": node.name,
            "programId": int(node.program_id),
        }
        if isinstance(node, ir.Compute):
            entry["computeSet"] = self.where[id(node)]
        elif isinstance(node, ir.Sync):
            entry["syncType"] = node.sync_kind.value.upper()
            if node.ipus is not None:
                entry["ipus"] = [int(i) for i in node.ipus]
        else:
            entry["exchange"] = self.where[id(node)]
            if isinstance(node, ir.StreamCopy):
                entry["direction"] = node.direction.value
                entry["stream"] = node.stream
            elif isinstance(node, ir.GlobalExchange):
                entry["ipus"] = _global_ipus(node, self.tiles_per_ipu)
            elif isinstance(node, ir.Collective):
                entry["ipus"] = [int(i) for i in node.ipus]
        return entry

    def visit_sequence(self, node: ir.Sequence) -> dict[str, Any]:
        # a WriteUndef takes no cycles and lowers to an empty node: Poplar tags it
        tag = "WriteUndef" if id(node) in self.undefs else "Sequence"
        return {"type": tag, "name": node.name}

    def visit_repeat(self, node: ir.Repeat) -> dict[str, Any]:
        return {"type": "Repeat", "count": int(node.count)}

    def visit_repeat_while(self, node: ir.RepeatWhile) -> dict[str, Any]:
        tag = "RepeatWhileTrue" if node.while_true else "RepeatWhileFalse"
        return {"type": tag, "whileTrue": bool(node.while_true)}

    def visit_if(self, node: ir.If) -> dict[str, Any]:
        return {"type": "IfElse"}

    def visit_switch(self, node: ir.Switch) -> dict[str, Any]:
        return {"type": "Switch", "cases": [int(v) for v, _ in node.cases]}

    def visit_call(self, node: ir.Call) -> dict[str, Any]:
        return {"type": "Call", "function": int(node.function)}

    def visit_other(self, node: object) -> dict[str, Any]:
        return {}


def _programs(
    table: ProgramTable,
    where: dict[int, int],
    tiles_per_ipu: int,
    undefs: frozenset[int] = frozenset(),
) -> list[dict[str, Any]]:
    """One entry per node: Poplar's type tag, name, children (indices) and details
    (``ipus``: the IPUs a global exchange involves, or those a sync lists);
    ``undefs`` are the ids of the nodes ``WriteUndef`` programs lowered to."""
    details = _ProgramDetails(where, tiles_per_ipu, undefs)
    progs: list[dict[str, Any]] = []
    for node in table.nodes:
        children = [table.index[id(c)] for c in ir.children(node)]
        entry: dict[str, Any] = {"type": "", "name": "", "children": children}
        entry.update(details.visit(node))
        progs.append(entry)
    return progs


def _memory(
    report: Any, computes: list[ir.Compute], type_names: list[str]
) -> dict[str, Any] | None:
    """The memory section from a ``MemoryReport`` (None when the engine has none);
    ``byComputeSet`` and ``byVertexType`` follow the order of the profile's
    ``computeSets`` and ``vertexTypes``."""
    if report is None:
        return None
    return {
        "capacity": {k: int(v) for k, v in report.capacity.items()},
        "byTile": {k: _ints(v) for k, v in report.by_tile.items()},
        "byCategory": by_category(report),
        "byComputeSet": by_compute_set(report, computes, type_names),
        "byVertexType": by_vertex_type(report, type_names),
        "liveness": liveness(report),
        "outOfMemory": bool(report.out_of_memory),
        "tilesOutOfMemory": _ints(report.tiles_out_of_memory),
    }


def graph_profile(engine: Any) -> dict[str, Any]:
    """The graph profile of a compiled engine (``Engine.getGraphProfile``).

    Cycle estimates are those of the loaded device's config (the graph's target
    before ``load``). ``vertexTypes.sizes`` are the bytes of each type's state and
    code over all tiles when the engine has a memory report, else 0.
    """
    cfg = _config(engine)
    timing = _timing(engine, cfg)
    table = program_table(engine.ir_program)
    groups: dict[str, list[Any]] = {name: [] for name in _PHASE_TABLES.values()}
    where: dict[int, int] = {}  # a step's index in its table
    for node in table.nodes:
        found = groups.get(_PHASE_TABLES.get(node.phase, "")) if isinstance(node, ir.Step) else None
        if found is not None:
            where[id(node)] = len(found)
            found.append(node)
    computes = groups["computeSets"]
    type_names = list(dict.fromkeys(n for s in computes for n in s.vertex_type_names))
    memory = getattr(engine, "memory", None)
    by_type = getattr(memory, "by_vertex_type", None) or {}
    options = dict(getattr(engine, "options", {}))
    return {
        "target": _target(engine, cfg),
        # Poplar lists the compiler's optimisations here; ipusim's compiler runs none
        "optimizationInfo": {},
        "graph": _graph(engine._state),
        "vertexTypes": {
            "names": type_names,
            "sizes": [int(by_type.get(n, 0)) for n in type_names],
        },
        "computeSets": _compute_sets(timing, computes, type_names),
        "exchanges": _exchanges(timing, groups["exchanges"]),
        "externalExchanges": _external_exchanges(timing, groups["externalExchanges"]),
        "hostExchanges": _host_exchanges(timing, groups["hostExchanges"]),
        "programs": _programs(
            table, where, cfg.tile.tiles_per_ipu, getattr(engine, "undef_nodes", frozenset())
        ),
        "controlPrograms": list(table.entries),
        "functionPrograms": list(table.functions),
        "memory": _memory(memory, computes, type_names),
        "engineOptions": options,
        "debug": {"instrument": option(options, "debug.instrument") == "true"},
    }


# ------------------------------------------------------------------ serialisation
def serializeToJSON(stream: IO[str], profile: Mapping[str, Any], pretty: bool = False) -> None:
    """Write ``profile`` to the text ``stream`` as JSON (indented when ``pretty``)."""
    json.dump(
        profile, stream, indent=2 if pretty else None, separators=None if pretty else (",", ":")
    )
    if pretty:
        stream.write("\n")


def serializeToCBOR(stream: IO[bytes], profile: Mapping[str, Any]) -> None:
    """Write ``profile`` to the binary ``stream`` as CBOR."""
    cbor2.dump(profile, stream)


def printProfileSummary(
    stream: IO[str],
    graphProfile: Mapping[str, Any],
    executionProfile: Mapping[str, Any] | None = None,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Print the profile summary of two profiles (as ``Engine.printProfileSummary``)."""
    from poplar_api.summary import render_summary

    render_summary(stream, graphProfile, executionProfile, options or {})


# ------------------------------------------------------------- graph report dest
#: Environment variable naming where every engine writes its graph summary once
#: compiled: ``stdout``, ``stderr`` or a file name (unset or empty: nowhere).
GRAPH_REPORT_DEST = "POPLAR_GRAPH_REPORT_DEST"


def write_graph_report(engine: Any, environ: Mapping[str, str] | None = None) -> str | None:
    """Write the graph summary of a compiled ``engine`` (Target, Graph and Memory
    Usage, as :func:`~poplar_api.summary.printGraphSummary`) where
    ``POPLAR_GRAPH_REPORT_DEST`` says: ``stdout``, ``stderr``, or a file (replaced
    whole, atomically, by each engine's report).

    Returns
    -------
    str or None
        The destination written, or None when the variable is unset or empty.

    Raises
    ------
    ipusim.files.FileWriteError
        The file cannot be written (the message names the variable and the file).
    """
    from ipusim.files import write_text
    from poplar_api.summary import printGraphSummary

    dest = (os.environ if environ is None else environ).get(GRAPH_REPORT_DEST, "").strip()
    if not dest:
        return None
    text = io.StringIO()
    printGraphSummary(text, engine.getGraphProfile(), {})
    if dest in ("stdout", "stderr"):
        stream = getattr(sys, dest)
        stream.write(text.getvalue())
        stream.flush()
    else:
        write_text(dest, text.getvalue(), what=GRAPH_REPORT_DEST)
    return dest


# --------------------------------------------------------------------- autoReport
def write_auto_report(engine: Any) -> Path | None:
    """Write the ``autoReport`` files of ``engine`` if its options ask for them.

    ``autoReport.all`` writes ``profile.json`` (graph profile), ``execution.json``,
    ``summary.txt`` (with the execution steps) and, when the timeline writer exists,
    ``timeline.json``. ``autoReport.outputGraphProfile`` / ``outputExecutionProfile``
    ask for one profile each. With ``profiler.format`` ``cbor`` the profiles are
    ``.cbor`` files.

    Returns
    -------
    pathlib.Path or None
        The directory written, or None when nothing was asked for.
    """
    opts = engine.options
    every = option(opts, "autoReport.all") == "true"
    want_graph = every or option(opts, "autoReport.outputGraphProfile") == "true"
    want_exec = every or option(opts, "autoReport.outputExecutionProfile") == "true"
    if not (want_graph or want_exec):
        return None
    directory = Path(option(opts, "autoReport.directory"))
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise EngineError(
            f"autoReport.directory {str(directory)!r} cannot be created ({exc.strerror}); "
            "hint: set autoReport.directory to a writable path"
        ) from None
    fmt = option(opts, "profiler.format")
    logger("PROFILER").info("Writing the autoReport profiles (%s) to %s", fmt, directory)
    gp = engine.getGraphProfile()
    ep = engine.getExecutionProfile()
    profiles = []
    if want_graph:
        profiles.append(("profile", gp))
    if want_exec:
        profiles.append(("execution", ep))
    # the files appear together, whole, or not at all (a stopped run leaves the old ones)
    with FileGroup(directory, "autoReport.directory") as group:
        for stem, profile in profiles:
            if fmt == "cbor":
                with group.open(f"{stem}.cbor", "wb") as f:
                    serializeToCBOR(f, profile)
            else:
                with group.open(f"{stem}.json") as f:
                    serializeToJSON(f, profile)
        if every:
            with group.open("summary.txt") as f:
                printProfileSummary(f, gp, ep, {"showExecutionSteps": "true"})
    if every:
        trace = engine.getTrace()
        writer = _timeline_writer()
        if writer is not None and trace is not None:
            writer(trace, directory / "timeline.json")
    return directory


def _timeline_writer() -> Any:
    try:
        from ipusim.profile import timeline
    except ImportError:
        return None
    return getattr(timeline, "write_timeline", None)
