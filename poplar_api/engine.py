"""The Engine: compiles a graph and its programs, loads them onto a device and runs them.

Compiling validates the graph (every problem at once), lowers the programs to the
machine IR and lays out device memory. On an IPU Model device a run is simulated by
:class:`ipusim.machine.Machine`, with the Engine as its data plane; on a CPU device
the same IR is interpreted for values only.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import IO, Any

import numpy as np

from ipusim import ir
from ipusim.errors import IpusimError
from ipusim.machine import Machine
from ipusim.timing import TimingModel
from ipusim.trace import Trace
from poplar_api.codelet import vertex_bounds_checks
from poplar_api.device import Device
from poplar_api.errors import EngineError, GraphValidationError, OutOfMemoryError
from poplar_api.graph import DataStream, Graph
from poplar_api.lowering import validate
from poplar_api.lowering.context import Lowered, Storage
from poplar_api.lowering.emit import Emitter, HostIO
from poplar_api.lowering.memory import out_of_memory_message, plan_memory
from poplar_api.program import Program


class _HostStreams(HostIO):
    """Host ends of the data streams: circular buffers or callbacks, and stdout."""

    def __init__(self) -> None:
        self.buffers: dict[str, np.ndarray] = {}
        self.positions: dict[str, int] = {}
        self.callbacks: dict[str, Callable[[np.ndarray], Any]] = {}

    def _unconnected(self, stream: DataStream) -> EngineError:
        return EngineError(
            f"stream '{stream.handle}' is not connected; hint: engine.connectStream"
            f"('{stream.handle}', buffer) or connectStreamToCallback before engine.run"
        )

    def pull(self, stream: DataStream) -> np.ndarray:
        n = stream.numElements
        cb = self.callbacks.get(stream.handle)
        if cb is not None:
            out = np.zeros(n, stream.elementType.numpy)
            cb(out)
            return out
        buf = self.buffers.get(stream.handle)
        if buf is None:
            raise self._unconnected(stream)
        pos = self.positions[stream.handle]
        idx = (pos + np.arange(n)) % buf.size
        self.positions[stream.handle] = (pos + n) % buf.size
        return buf[idx]

    def push(self, stream: DataStream, values: np.ndarray) -> None:
        cb = self.callbacks.get(stream.handle)
        if cb is not None:
            cb(values.copy())
            return
        buf = self.buffers.get(stream.handle)
        if buf is None:
            raise self._unconnected(stream)
        n = values.size
        pos = self.positions[stream.handle]
        buf[(pos + np.arange(n)) % buf.size] = values
        self.positions[stream.handle] = (pos + n) % buf.size

    def print(self, text: str) -> None:
        sys.stdout.write(text + "\n")


class _EngineDataPlane:
    def __init__(self, lowered: Lowered, check_bounds: bool = True) -> None:
        self.lowered = lowered
        self.check_bounds = check_bounds

    def apply(self, effect: int) -> None:
        with vertex_bounds_checks(self.check_bounds):
            self.lowered.effects[effect]()

    def predicate(self, predicate: int) -> int:
        return self.lowered.predicates[predicate]()


def _interpret(node: ir.Node, program: ir.Program, dp: _EngineDataPlane) -> None:
    """Run a machine program for its values only (the CPU device)."""
    if isinstance(node, ir.Step):
        if node.effect is not None:
            dp.apply(node.effect)
    elif isinstance(node, ir.Sequence):
        for child in node.body:
            _interpret(child, program, dp)
    elif isinstance(node, ir.Repeat):
        for _ in range(node.count):
            _interpret(node.body, program, dp)
    elif isinstance(node, ir.RepeatWhile):
        while True:
            _interpret(node.condition, program, dp)
            if bool(dp.predicate(node.predicate)) != node.while_true:
                break
            _interpret(node.body, program, dp)
    elif isinstance(node, ir.If):
        _interpret(node.then if dp.predicate(node.predicate) else node.else_, program, dp)
    elif isinstance(node, ir.Switch):
        value = dp.predicate(node.control)
        _interpret(next((n for v, n in node.cases if v == value), node.default), program, dp)
    elif isinstance(node, ir.Call):
        _interpret(program.functions[node.function], program, dp)


def engine_options(options: Mapping[str, Any] | None) -> dict[str, str]:
    """Engine options: ``POPLAR_ENGINE_OPTIONS`` (JSON) overridden by ``options``."""
    merged: dict[str, str] = {}
    env = os.environ.get("POPLAR_ENGINE_OPTIONS")
    if env:
        try:
            parsed = json.loads(env)
        except json.JSONDecodeError as exc:
            raise EngineError(
                f"POPLAR_ENGINE_OPTIONS is not valid JSON ({exc.msg} at position {exc.pos}): "
                f"{env!r}"
            ) from None
        if not isinstance(parsed, dict):
            raise EngineError(f"POPLAR_ENGINE_OPTIONS must be a JSON object, got {env!r}")
        merged.update({str(k): str(v) for k, v in parsed.items()})
    merged.update({str(k): str(v) for k, v in (options or {}).items()})
    return merged


class Engine:
    """Compile ``programs`` of ``graph``; then ``load(device)`` and ``run(index)``.

    Parameters
    ----------
    graph
        The graph (its target decides the tile count).
    programs
        One program or a list; ``run(i)`` runs the i-th.
    options
        Engine options (strings), merged over ``POPLAR_ENGINE_OPTIONS``.

    Raises
    ------
    GraphValidationError
        Listing every problem that stops the graph compiling.
    """

    def __init__(
        self,
        graph: Graph,
        programs: Program | Sequence[Program],
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if not isinstance(graph, Graph):
            raise EngineError(f"Engine: expected a Graph, got {type(graph).__name__}")
        self._graph = graph
        self.options = engine_options(options)
        _check_options(self.options)
        progs = [programs] if isinstance(programs, Program) else list(programs)
        if not progs:
            raise EngineError("Engine: no programs given")
        state = graph._state
        target = state.target
        self._state = state
        self._host = _HostStreams()
        self._storage = Storage(state)
        self._lowered = Lowered(self._storage)
        emitter = Emitter(state, target, self._lowered, self._host, self.options)
        problems = validate.check_variables(state, target.getNumTiles())
        entries = [emitter.lower(p) for p in progs]
        problems += emitter.problems
        if problems:
            raise GraphValidationError(problems)
        self.ir_program = ir.Program(entries=tuple(entries), functions=emitter.function_nodes())
        self._programs = progs
        self._device: Device | None = None
        self._machine: Machine | None = None
        #: The timing model of the loaded IPU Model device (None before load or on a CPU).
        self.timing: TimingModel | None = None
        self._trace: Trace | None = None
        self._traces: list[Trace] = []
        self.memory = plan_memory(state, self.ir_program, emitter)
        allow_oom = self.options.get("debug.allowOutOfMemory", "false").lower() == "true"
        if self.memory.out_of_memory and not allow_oom:
            raise OutOfMemoryError(out_of_memory_message(self.memory), self.memory)

    # -------------------------------------------------------------------- device
    def load(self, device: Device) -> None:
        """Attach the compiled graph to ``device``."""
        if not isinstance(device, Device):
            raise EngineError(f"Engine.load: expected a Device, got {type(device).__name__}")
        want = self._state.target.getNumTiles()
        have = device.getTarget().getNumTiles()
        if have < want:
            raise EngineError(
                f"Engine.load: the graph was built for {want} tiles but the device has {have}; "
                "hint: build the graph with the device's target"
            )
        device.attach()
        self._device = device
        self._machine = Machine(device.getTarget().config) if device.isIPUModel else None
        self.timing = self._machine.timing if self._machine is not None else None

    def run(self, index: int = 0, debugName: str = "") -> None:
        """Run program ``index``; on the IPU Model its trace is kept (``getTrace``)."""
        if self._device is None:
            raise EngineError("Engine.run: no device loaded; hint: engine.load(device) first")
        if isinstance(index, bool) or not isinstance(index, int | np.integer):
            raise EngineError(f"Engine.run: program index {index!r} must be an int")
        if not 0 <= index < len(self._programs):
            raise EngineError(
                f"Engine.run: program index {index} out of range (the engine has "
                f"{len(self._programs)} program(s))"
            )
        checks = self.options.get("debug.checkVertexBounds", "true").strip().lower() == "true"
        dp = _EngineDataPlane(self._lowered, checks)
        if self._machine is None:
            _interpret(self.ir_program.entries[index], self.ir_program, dp)
            return
        try:
            trace = self._machine.run(self.ir_program, data_plane=dp, entry=index)
        except IpusimError as exc:
            partial = getattr(exc, "trace", None)
            if partial is not None:
                self._trace = partial
                self._traces.append(partial)
            raise
        self._trace = trace
        self._traces.append(trace)
        self._auto_report()

    def getTrace(self) -> Trace | None:
        """The trace of the last run on an IPU Model (None before a run or on a CPU)."""
        return self._trace

    def getTraces(self) -> list[Trace]:
        """Traces of every run since the engine was made or the profile was reset."""
        return list(self._traces)

    def resetExecutionProfile(self) -> None:
        """Forget the traces of earlier runs."""
        self._traces.clear()
        self._trace = None

    # ---------------------------------------------------------------- host data
    def _handle(self, table: dict, handle: str, what: str):
        t = table.get(handle)
        if t is None:
            known = sorted(table)
            raise EngineError(f"{what}: unknown handle '{handle}' (known: {known or 'none'})")
        return t

    def writeTensor(self, handle: str, buffer: Any) -> None:
        """Write host data into the tensor of a ``createHostWrite`` handle."""
        t = self._handle(self._state.host_writes, handle, "writeTensor")
        data = np.asarray(buffer).reshape(-1)
        if data.size != t.numElements():
            raise EngineError(
                f"writeTensor('{handle}'): buffer has {data.size} elements, tensor '{t.name}' "
                f"has {t.numElements()}"
            )
        self._storage.write(t.elementType(), t.flat_index(), data)

    def readTensor(self, handle: str, buffer: np.ndarray | None = None) -> np.ndarray:
        """Read the tensor of a ``createHostRead`` handle into ``buffer`` (and return it)."""
        t = self._handle(self._state.host_reads, handle, "readTensor")
        values = self._storage.read(t.elementType(), t.flat_index())
        if buffer is None:
            return values.reshape(t.shape())
        if buffer.size != values.size:
            raise EngineError(
                f"readTensor('{handle}'): buffer has {buffer.size} elements, tensor '{t.name}' "
                f"has {values.size}"
            )
        buffer.reshape(-1)[...] = values.astype(buffer.dtype, copy=False)
        return buffer

    def connectStream(self, handle: str, buffer: np.ndarray) -> None:
        """Use ``buffer`` as the stream's circular buffer (read or written in place)."""
        s = self._handle(self._state.streams, handle, "connectStream")
        if not isinstance(buffer, np.ndarray) or buffer.size == 0:
            raise EngineError(f"connectStream('{handle}'): needs a non-empty numpy array")
        flat = buffer.reshape(-1)
        if not np.shares_memory(flat, buffer):
            raise EngineError(f"connectStream('{handle}'): the buffer must be contiguous")
        if not s.toDevice and not flat.flags.writeable:
            raise EngineError(
                f"connectStream('{handle}'): a device-to-host buffer must be writable"
            )
        self._host.buffers[handle] = flat
        self._host.positions[handle] = 0
        self._host.callbacks.pop(handle, None)

    def connectStreamToCallback(self, handle: str, callback: Callable[[np.ndarray], Any]) -> None:
        """Call ``callback(array)`` for each transfer: fill it (to device) or read it."""
        self._handle(self._state.streams, handle, "connectStreamToCallback")
        if not callable(callback):
            raise EngineError(f"connectStreamToCallback('{handle}'): callback is not callable")
        self._host.callbacks[handle] = callback
        self._host.buffers.pop(handle, None)

    # --------------------------------------------------------------- reporting
    def printProfileSummary(
        self, stream: IO[str] | None = None, options: Mapping[str, Any] | None = None
    ) -> None:
        """Print the profile summary of the runs so far."""
        from poplar_api.summary import print_summary

        print_summary(self, stream or sys.stdout, options or {})

    # ---------------------------------------------------------------- profiles
    def getGraphProfile(self) -> dict[str, Any]:
        """The graph profile (a dict of JSON types that renders in notebooks)."""
        from ipusim.profile.html import GraphProfile
        from poplar_api.profiling import graph_profile

        return GraphProfile(graph_profile(self))

    def getExecutionProfile(self) -> dict[str, Any]:
        """The execution profile of the runs since the last reset (a dict of JSON types
        that renders in notebooks)."""
        from ipusim.profile.execution import execution_profile
        from ipusim.profile.html import ExecutionProfile
        from poplar_api.profiling import instrument_execution_profile

        profile = execution_profile(self._traces, self.ir_program, self.options)
        return ExecutionProfile(instrument_execution_profile(profile, self._traces, self.options))

    def getBlockRecords(self, tile: int | None = None) -> list[dict[str, Any]]:
        """Lightweight-profiling block records of the runs since the last reset.

        The ipusim stand-in for libpva's ``report.execution().blocks(tile)``: one dict
        per execution of a profiled block (``profiler.blocks.filter``,
        ``profiler.programs.filter``) and per tile it ran on, with ``name``,
        ``program``, ``run``, ``execution``, ``tile``, ``cyclesFrom``, ``cyclesTo`` and
        ``cycles``; only those of ``tile`` when given. The same list is the execution
        profile's ``lightweightProfile.blocks``.
        """
        from ipusim.profile.execution import block_records, program_table

        records = block_records(self._traces, program_table(self.ir_program))
        return [r for r in records if tile is None or r["tile"] == tile]

    def _auto_report(self) -> None:
        """Write the ``autoReport.*`` files the options ask for (after each run)."""
        from poplar_api.profiling import write_auto_report

        write_auto_report(self)


def _check_options(options: Mapping[str, str]) -> None:
    from poplar_api.profiling import check_engine_options

    check_engine_options(options)


__all__ = ["Engine"]
