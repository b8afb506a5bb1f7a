"""The Engine: compiles a graph and its programs, loads them onto a device and runs them.

Compiling validates the graph (every problem at once), lowers the programs to the
machine IR and lays out device memory. On an IPU Model device a run is simulated by
:class:`ipusim.machine.Machine`, with the Engine as its data plane; on a CPU device
the same IR is interpreted for values only.

Replicated graphs
-----------------
A graph of ``r`` replicas (``Graph(target, replication_factor=r)``) is lowered once,
for replica 0, into an ``ir.Program`` with ``replicas=r``; the machine runs each step
on every replica's IPUs. The data plane keeps one device memory image per replica
(:class:`~poplar_api.lowering.context.Storage`) and host ends per replica
(:class:`~poplar_api.streams.HostStreams`): it applies an ordinary effect once per
replica, in replica order, with that replica's image and host ends selected, and a
collective or cross-replica effect once. It asks a control-flow predicate in every
replica and stops the run with an :class:`~poplar_api.errors.EngineError` naming the
replicas and values when they disagree (every replica must follow the same control
flow, as in Poplar). Host buffers of replicated tensors and streams are
replica-major: ``readTensor`` returns ``[r, *shape]``, ``writeTensor`` takes
``[r, *shape]`` (or the tensor's own size, written to every replica), and
``connectStream`` splits its buffer into ``r`` equal parts, replica ``k`` using part
``k`` (the layout Poplar's replicated streams use).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import IO, Any

import numpy as np

from ipusim import ir, progress
from ipusim.errors import IpusimError, SimulationTimeout
from ipusim.machine import Machine
from ipusim.timing import TimingModel
from ipusim.trace import Trace
from poplar_api import profiling
from poplar_api.codelet import vertex_bounds_checks
from poplar_api.codelet_base import floating_point_exceptions
from poplar_api.device import Device
from poplar_api.engine_device import check_device_fits
from poplar_api.errors import (
    ApplicationRuntimeError,
    EngineError,
)
from poplar_api.executable import (
    Executable,
    TimingChoice,
    compile_inputs,
    compile_programs,
    timing_for,
)
from poplar_api.graph import DataStream, Graph, is_nonreplicated, replication_factor
from poplar_api.graph_bulk import collect_new_objects_only
from poplar_api.host_transfers import run_host_transfer
from poplar_api.lowering import runs
from poplar_api.lowering.context import Lowered
from poplar_api.lowering.pipeline import Compiled
from poplar_api.program import Program
from poplar_api.remote import numeric_buffer
from poplar_api.streams import (
    HostStreams,
    as_stream_callback,
    check_replica_index,
    connect_callback_args,
)


class _EngineDataPlane:
    """The Engine as the machine's data plane: applies effects, answers predicates.

    With several replicas an ordinary effect runs once per replica (that replica's
    memory image and host ends selected) unless it serves every replica in turn
    itself (``Lowered.every_replica``), a global one (``Lowered.global_effects``)
    once; a predicate is asked in every replica and its answers combine as
    ``Lowered.combine`` says (control flow: all replicas must agree).
    """

    def __init__(
        self,
        lowered: Lowered,
        check_bounds: bool = True,
        host: HostStreams | None = None,
        state: Any = None,
    ) -> None:
        self.lowered = lowered
        self.check_bounds = check_bounds
        self.replicas = lowered.storage.replicas
        self.host = host
        self.state = state
        self.declared = lowered.storage.declared
        self.declared.forget()  # a run starts: the host may have written the images

    def _select(self, replica: int) -> None:
        self.lowered.storage.select(replica)
        if self.host is not None:
            self.host.select(replica)

    def apply(self, effect: int) -> None:
        # vertex bounds checks are set for the whole run (Engine._run_program)
        self.declared.next_effect()  # what the last effect stored alike, for this one
        fn = self.lowered.effects[effect]
        if self.replicas == 1:
            fn()
            return
        alike, done = self.lowered.storage.alike, False  # blocks every replica holds alike
        alike.begin(effect, self.lowered.writes.get(effect))  # (what it writes, if described)
        try:
            if effect in self.lowered.global_effects:
                fn()
            elif (every := self.lowered.every_replica.get(effect)) is None or not every():
                for k in range(self.replicas):  # (else each replica in turn, none selected)
                    self._select(k)
                    fn()
            done = True
        finally:
            self._select(0)
            alike.end(done)

    def predicate(self, predicate: int) -> int:
        fn = self.lowered.predicates[predicate]
        if self.replicas == 1:
            return fn()
        values = []
        try:
            for k in range(self.replicas):
                self._select(k)
                values.append(int(fn()))
        finally:
            self._select(0)
        if self.lowered.combine.get(predicate) == "all":
            return int(all(values))
        if len(set(values)) > 1:
            raise EngineError(_divergence_message(fn, predicate, values, self.state))
        return values[0]


def _divergence_message(fn: Any, predicate: int, values: list[int], state: Any) -> str:
    """Why replicas that disagree on a control value stop the run, naming them."""
    first = values[0]
    other = next(k for k, v in enumerate(values) if v != first)
    by_value: dict[int, list[int]] = {}
    for k, v in enumerate(values):
        by_value.setdefault(v, []).append(k)
    seen = "; ".join(f"replica(s) {ks} have {v}" for v, ks in by_value.items())
    return (
        f"Engine.run: the replicas disagree on the control value of an If, Switch, "
        f"RepeatWhile or AbortOnCondition ({_predicate_source(fn, state)}, predicate "
        f"#{predicate}): replica 0 has {first}, replica {other} has {values[other]} ({seen}); "
        "every replica must take the same control flow (as in Poplar); hint: compute the "
        "condition from values equal in every replica, e.g. after an all-reduce "
        "(gcl.allReduceCrossReplica)"
    )


def _predicate_source(fn: Any, state: Any) -> str:
    """The variable(s) a predicate reads, found in its closure (for error messages)."""
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=False))
    try:
        typ, ids = cells["typ"].cell_contents, cells["ids"].cell_contents
        space = state.find_space(typ)
        names = sorted({state.variables[v].name for v in space.variables_of(ids).tolist()})
        return f"read from variable(s) {names}"
    except (KeyError, AttributeError, ValueError, IndexError, TypeError):
        return "a device value"


def _interpret(node: ir.Node, program: ir.Program, dp: _EngineDataPlane) -> None:
    """Run a machine program for its values only (the CPU device): the steps in the
    order :class:`ipusim.ir.ExecutionOrder` walks them, each step's effect applied."""
    for step in ir.ExecutionOrder(program, dp.predicate).visit(node):
        if step.effect is not None:
            dp.apply(step.effect)


class Engine:
    """Compile ``programs`` of ``graph``; then ``load(device)`` and ``run(index)``.

    Parameters
    ----------
    graph
        The graph (its target decides the tile count), or an
        :class:`~poplar_api.executable.Executable` from ``compileGraph`` or
        ``Executable.deserialize``: ``Engine(executable, options)`` runs it exactly as
        ``Engine(graph, programs)`` would, without compiling again.
    programs
        One program or a list; ``run(i)`` runs the i-th (not given with an executable).
    options
        Engine options (strings), merged over ``POPLAR_ENGINE_OPTIONS``.
    timing
        The timing model (an ipusim extension): a :class:`~ipusim.timing.TimingModel`
        subclass, or a function making one from a machine config. Memory placement
        and the loaded IPU Model both use it, each for its own config (one replica's,
        the whole device's). With an executable it must be the one ``compileGraph``
        was given.

    Raises
    ------
    GraphValidationError
        Listing every problem that stops the graph compiling (the compile pipeline:
        :func:`poplar_api.lowering.compile`).
    OutOfMemoryError
        The graph does not fit in tile memory (unless ``debug.allowOutOfMemory``).
    """

    def __init__(
        self,
        graph: Graph | Executable,
        programs: Program | Sequence[Program] | Mapping[str, Any] | None = None,
        options: Mapping[str, Any] | None = None,
        *,
        timing: TimingChoice = None,
    ) -> None:
        if isinstance(graph, Executable):  # Engine(executable, options): compiled already
            if options is None and isinstance(programs, Mapping):
                programs, options = None, programs
            if programs is not None:
                raise EngineError(
                    "Engine(executable, ...): the programs were fixed by compileGraph; "
                    "hint: Engine(executable, options)"
                )
            compiled, progs, merged, timing = graph._take(options, timing)
            self._adopt(graph._state, compiled, progs, merged, timing)
            return
        if programs is None:
            raise EngineError("Engine: no programs given; hint: Engine(graph, programs)")
        progs, merged = compile_inputs(graph, programs, options, "Engine")
        compiled = compile_programs(graph._state, progs, merged, timing)
        self._adopt(graph._state, compiled, progs, merged, timing)

    def _adopt(
        self,
        state: Any,
        compiled: Compiled,
        programs: list[Program],
        options: dict[str, str],
        timing: TimingChoice,
    ) -> None:
        """Take over a compiled graph (from :func:`~poplar_api.lowering.compile`)."""
        self._state = state
        self.options = options
        #: replicas of the graph (each with its own memory image and host ends)
        self.replicas = replication_factor(state)
        host = compiled.host
        if not isinstance(host, HostStreams):
            raise EngineError(
                f"Engine: the compiled graph's host side is a {type(host).__name__}; an "
                "engine needs HostStreams; hint: compile with compileGraph"
            )
        self._host = host
        self._storage = compiled.storage
        self._lowered: Lowered = compiled.lowered
        self.ir_program = compiled.program
        self._programs = programs
        #: how the engine's timing model is made (None: the default model)
        self._timing_choice = timing
        self._device: Device | None = None
        self._machine: Machine | None = None
        #: The timing model of the loaded IPU Model device (None before load or on a CPU).
        self.timing: TimingModel | None = None
        self._trace: Trace | None = None
        self._traces: list[Trace] = []
        self._host_traces: list[Trace] = []
        #: The tile memory placement of the compiled graph.
        self.memory = compiled.memory
        self.undef_nodes = frozenset(k for k, *_ in compiled.liveness.points.undefs)  # WriteUndefs
        profiling.write_graph_report(self)  # where POPLAR_GRAPH_REPORT_DEST says, if set

    # -------------------------------------------------------------------- device
    def load(self, device: Device) -> None:
        """Attach the compiled graph to ``device``."""
        if not isinstance(device, Device):
            raise EngineError(f"Engine.load: expected a Device, got {type(device).__name__}")
        check_device_fits(self._state.target, device, self.replicas)
        if not device.attached and not device.attach():
            raise EngineError(
                f"Engine.load: device {device.getId()} cannot be attached: another device holds "
                "its IPUs; hint: detach that device, or load onto one that device.attach() took"
            )
        self._device = device
        self._storage.load()
        if device.isTimed:
            config = device.getTarget().config
            self._machine = Machine(config, timing_for(self._timing_choice, config))
        else:
            self._machine = None
        self.timing = self._machine.timing if self._machine is not None else None
        if self._machine is not None:  # a copy the device cannot carry fails here
            self._machine.prepare(self.ir_program)

    def run(self, index: int = 0, debugName: str = "") -> None:
        """Run program ``index``; on the IPU Model its trace is kept (``getTrace``).

        When the run ends (or stops on an error), stream callbacks holding prefetched
        data that no copy used are told so (``invalidatePrefetched``).

        Raises
        ------
        ApplicationRuntimeError
            The program stopped itself (``Abort``, ``AbortOnCondition``,
            ``ErrorProgram``); the error carries the program's message and, on an IPU
            Model, the trace until then (also ``getTrace()``).
        SimulationTimeout
            The run passed ``debug.maxCycles``.
        """
        self._host.begin_run(index, debugName)  # named in stream callbacks' errors
        try:
            with progress.activity(f"Engine.run({index})"), collect_new_objects_only(self):
                self._run_program(index, debugName)
        finally:
            self._host.end_run()

    def _run_program(self, index: int = 0, debugName: str = "") -> None:
        """Run program ``index`` (the body of :meth:`run`)."""
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
        fp = any(  # Poplar's option, and ipusim's name for the same check
            self.options.get(name, "false").strip().lower() == "true"
            for name in ("debug.floatPointOpException", "debug.floatingPointExceptions")
        )
        dp = _EngineDataPlane(self._lowered, checks, self._host, self._state)
        if self._machine is None:
            with vertex_bounds_checks(checks), floating_point_exceptions(fp):
                _interpret(self.ir_program.entries[index], self.ir_program, dp)
            return
        max_cycles = _max_cycles(self.options)
        try:
            with vertex_bounds_checks(checks), floating_point_exceptions(fp):
                trace = self._machine.run(
                    self.ir_program, data_plane=dp, entry=index, max_cycles=max_cycles
                )
        except IpusimError as exc:
            partial = getattr(exc, "trace", None)
            if partial is not None:
                self._trace = partial
                self._traces.append(partial)
            if isinstance(exc, SimulationTimeout):
                raise SimulationTimeout(
                    f"Engine.run: program {index} passed the cycle limit debug.maxCycles="
                    f"{max_cycles:,} and was stopped ({str(exc).split('; hint:')[0]}); the "
                    "partial profile is kept: "
                    "engine.getTrace(), engine.getExecutionProfile(); hint: raise "
                    "debug.maxCycles, or check for a RepeatWhileTrue/RepeatWhileFalse whose "
                    "condition never changes",
                    partial,
                ) from None
            if isinstance(exc, ApplicationRuntimeError) and partial is not None:
                raise ApplicationRuntimeError(
                    f"Engine.run: program {index}: {exc}; the run had taken "
                    f"{partial.total_cycles:,} cycles; the partial profile is kept: "
                    "engine.getTrace(), engine.getExecutionProfile()",
                    exc.message,
                    exc.program,
                    partial,
                ) from None
            raise
        self._trace = trace
        self._traces.append(trace)
        profiling.write_auto_report(self)  # the autoReport.* files the options ask for

    def getTrace(self) -> Trace | None:
        """The trace of the last run on an IPU Model (None before a run or on a CPU)."""
        return self._trace

    def getTraces(self) -> list[Trace]:
        """Traces of every run since the engine was made or the profile was reset."""
        return list(self._traces)

    def resetExecutionProfile(self) -> None:
        """Forget the traces of earlier runs."""
        self._traces.clear()
        self._host_traces.clear()
        self._trace = None

    # ---------------------------------------------------------------- host data
    def _handle(self, table: dict, handle: str, what: str):
        t = table.get(handle)
        if t is None:
            known = sorted(table)
            raise EngineError(f"{what}: unknown handle '{handle}' (known: {known or 'none'})")
        return t

    def _per_replica(self, t: Any) -> bool:
        """Whether host access to ``t`` has one part per replica (a replicated tensor of
        a graph of several replicas; not a non-replicated view)."""
        return self.replicas > 1 and not is_nonreplicated(t, self._state)

    def writeTensor(self, handle: str, buffer: Any) -> None:
        """Write host data into the tensor of a ``createHostWrite`` handle.

        In a replicated graph ``buffer`` holds every replica's values, replica-major
        (``[replicas, *shape]``), or the tensor's own number of values, written to
        every replica. A non-replicated view (``getNonReplicatedTensor``) takes its own
        shape, ``[replicas, *shape]``.

        On an IPU Model the write takes simulated time on the host link
        (:mod:`poplar_api.host_transfers`, :meth:`getHostTransferTraces`).
        """
        t = self._handle(self._state.host_writes, handle, "writeTensor")
        self._write_values(t, handle, buffer)
        self._time_host_transfer(t, True, f"writeTensor('{handle}')")

    def getHostTransferTraces(self) -> list[Trace]:
        """Traces of the host reads and writes (``writeTensor``, ``readTensor``) on an
        IPU Model since the engine was made or the profile was reset, in order."""
        return list(self._host_traces)

    def _time_host_transfer(self, t: Any, to_device: bool, name: str) -> None:
        """Run the host transfer of ``t`` on the device's machine (IPU Model only)."""
        if self._machine is not None:
            trace = run_host_transfer(self._machine, self._state, t, to_device, name,
                                      self.ir_program.replicas)  # fmt: skip
            if trace is not None:
                self._host_traces.append(trace)

    def _write_values(self, t: Any, handle: str, buffer: Any) -> None:
        """Move ``buffer`` into the tensor's storage (the values of :meth:`writeTensor`)."""
        what = f"writeTensor('{handle}')"
        typ = t.elementType()
        if self._storage.alike is not None:  # (inside a run: a stream callback's write)
            self._storage.alike.host_writing()
        if is_nonreplicated(t, self._state):
            self._storage.write_wide(typ, t.flat_index(), host_values(buffer, t, what))
            return
        if not self._per_replica(t):  # a variable's block needs no index array
            self._storage.write(typ, runs.as_index(t._flat_ids()), host_values(buffer, t, what))
            return
        ids = t.flat_index()
        arr = np.asarray(buffer)
        r, n = self.replicas, t.numElements()
        if arr.size not in (n, r * n):
            raise EngineError(
                f"{what}: buffer has {arr.size} elements (shape {list(arr.shape)}); tensor "
                f"'{t.name}' (shape {t.shape()}) of a graph of {r} replicas takes "
                f"{r} x {n} = {r * n} values, replica-major (shape {[r, *t.shape()]}), or "
                f"{n} values written to every replica"
            )
        if arr.dtype.kind not in "biuf":
            host_values(arr, t, what)  # raises the non-numeric buffer error
        values = fit_values(arr.reshape(-1), typ, f"{what}: tensor '{t.name}'")
        self._storage.write_replicas(typ, ids, values.reshape(-1 if arr.size == n else r, n))

    def readTensor(self, handle: str, buffer: np.ndarray | None = None) -> np.ndarray:
        """Read the tensor of a ``createHostRead`` handle into ``buffer`` (and return it).

        In a replicated graph the result holds every replica's values, replica-major:
        shape ``[replicas, *shape]`` (``buffer``, if given, needs that many elements).
        """
        t = self._handle(self._state.host_reads, handle, "readTensor")
        typ = t.elementType()
        shape = t.shape()
        if is_nonreplicated(t, self._state):
            values = self._storage.read_wide(typ, t.flat_index())
        elif self._per_replica(t):
            values = self._storage.read_replicas(typ, t.flat_index()).reshape(-1)
            shape = [self.replicas, *shape]
        else:  # a variable's block needs no index array
            values = self._storage.read(typ, runs.as_index(t._flat_ids()))
        self._time_host_transfer(t, False, f"readTensor('{handle}')")
        if buffer is None:
            return values.reshape(shape)
        what = f"readTensor('{handle}')"
        if self._per_replica(t) and getattr(buffer, "size", values.size) != values.size:
            raise EngineError(
                f"{what}: buffer has {buffer.size} elements (shape {list(buffer.shape)}); "
                f"tensor '{t.name}' (shape {t.shape()}) of a graph of {self.replicas} "
                f"replicas reads {values.size} values, replica-major (shape {shape}); they "
                "must be equal"
            )
        fill_host_buffer(buffer, values, t, what)
        return buffer

    def connectStream(self, handle: str, *args: Any) -> None:
        """Use a buffer as the stream's circular buffer (read or written in place):
        ``connectStream(handle, buffer)`` or, for one replica of a replicated graph,
        ``connectStream(handle, replicaIndex, buffer)``.

        For a stream of a replicated graph (``REPLICATE``, or any device-to-host one)
        ``connectStream(handle, buffer)`` serves every replica from one buffer,
        replica-major: its size must be a multiple of the replica count, and replica
        ``k`` uses the ``k``-th of the equal parts as its own circular buffer. A
        ``BROADCAST`` stream's buffer feeds every replica as it is.
        """
        s = self._handle(self._state.streams, handle, "connectStream")
        what = f"connectStream('{handle}')"
        if len(args) == 2:
            index, buffer = args
            replicas = s.replicationFactor if s.perReplica else 1
            k = check_replica_index(index, replicas, what)
            self._connect_buffer(s, buffer, k)
            return
        if len(args) != 1:
            raise EngineError(
                f"{what}: takes (handle, buffer) or (handle, replicaIndex, buffer); got "
                f"{len(args) + 1} argument(s)"
            )
        buffer = args[0]
        if not s.perReplica:
            self._connect_buffer(s, buffer, 0)
            return
        r, n = s.replicationFactor, s.numElements
        size = buffer.size if isinstance(buffer, np.ndarray) else 0
        if size == 0 or size % r or size // r < n:
            raise EngineError(
                f"{what}: stream '{handle}' serves each of the graph's {r} replicas, so the "
                f"buffer holds every replica's data, replica-major (replica k uses the k-th "
                f"of {r} equal parts): its size must be a multiple of {r} with at least "
                f"numElements = {n} per replica; got "
                f"{size if isinstance(buffer, np.ndarray) else type(buffer).__name__}; hint: "
                f"np.zeros(({r}, {n}), ...), or connectStream(handle, replicaIndex, buffer) "
                "per replica"
            )
        check_stream_buffer(buffer, s)
        parts = buffer.reshape(r, -1)
        for k in range(r):
            self._connect_buffer(s, parts[k], k)
        self._host.join_rows(handle, parts)

    def _connect_buffer(self, s: DataStream, buffer: Any, replica: int) -> None:
        """Connect ``buffer`` (checked) as ``replica``'s circular buffer of stream ``s``."""
        handle = s.handle
        check_stream_buffer(buffer, s)
        flat = buffer.reshape(-1)
        if not np.shares_memory(flat, buffer):
            raise EngineError(f"connectStream('{handle}'): the buffer must be contiguous")
        if not s.toDevice and not flat.flags.writeable:
            raise EngineError(
                f"connectStream('{handle}'): a device-to-host buffer must be writable"
            )
        self._host.connect_buffer(handle, flat, replica)

    def connectStreamToCallback(self, handle: str, *args: Any) -> None:
        """Serve a stream with a callback: ``connectStreamToCallback(handle, callback)``
        or, as Poplar's replicated form, ``connectStreamToCallback(handle, index,
        callback)`` for replica ``index`` only.

        ``callback`` is a function ``f(buffer)`` that fills ``buffer`` (host-to-device)
        or reads it (device-to-host), or an object with Poplar's stream callback
        protocol (``prefetch``, ``fetch``, ``complete``, ``invalidatePrefetched``); the
        order of the calls is in :mod:`poplar_api.streams`. Without an index, a stream
        of a replicated graph calls the callback for every replica, in replica order;
        a ``BROADCAST`` stream calls it once per copy (its index can only be 0).
        """
        s = self._handle(self._state.streams, handle, "connectStreamToCallback")
        what = f"connectStreamToCallback('{handle}')"
        replicas = s.replicationFactor if s.perReplica else 1
        try:
            index, callback = connect_callback_args(args, what, replicas)
        except EngineError as exc:
            if s.broadcast and s.replicationFactor > 1 and len(args) == 2:
                raise EngineError(
                    f"{exc}; stream '{handle}' is a BROADCAST stream: one host end feeds "
                    "every replica; hint: connect it without an index"
                ) from None
            raise
        cb = as_stream_callback(callback, what)
        for k in range(replicas) if index is None else (index,):
            self._host.connect_callback(handle, cb, k)

    # ----------------------------------------------------------- remote buffers
    def copyToRemoteBuffer(
        self, srcBuffer: Any, dstHandle: str, repeatIndex: int, replicationIndex: int = 0
    ) -> None:
        """Write row ``repeatIndex`` of remote buffer ``dstHandle`` (of replica
        ``replicationIndex``) from the host."""
        from poplar_api.remote import copy_to_remote

        copy_to_remote(self._state, self._host, srcBuffer, dstHandle, repeatIndex, replicationIndex)

    def copyFromRemoteBuffer(
        self, srcHandle: str, dstBuffer: Any, repeatIndex: int, replicationIndex: int = 0
    ) -> np.ndarray:
        """Read row ``repeatIndex`` of remote buffer ``srcHandle`` (of replica
        ``replicationIndex``) into ``dstBuffer`` (a numpy array of ``numElements``
        elements, filled in place and returned)."""
        from poplar_api.remote import copy_from_remote

        return copy_from_remote(
            self._state, self._host, srcHandle, dstBuffer, repeatIndex, replicationIndex
        )

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
        device = getattr(self, "_device", None)
        kind = device.getTarget().getTargetType().value if device is not None else "IPU_MODEL"
        return ExecutionProfile(
            instrument_execution_profile(profile, self._traces, self.options, kind)
        )

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


def _max_cycles(options: Mapping[str, str]) -> int | None:
    """The ``debug.maxCycles`` engine option: a cycle count, or None for ``unlimited``."""
    value = options.get("debug.maxCycles", "unlimited").strip().lower()
    return None if value == "unlimited" else int(value)


def host_values(buffer: Any, t: Any, what: str) -> np.ndarray:
    """The values of a host buffer for tensor ``t``, flattened, in ``t``'s dtype.

    Any numeric buffer (a list, a non-contiguous view, another dtype) of the right
    size is accepted and copied; values are converted only when they fit the tensor's
    element type.

    Raises
    ------
    EngineError
        A non-numeric buffer, a size other than the tensor's, or a value that does not
        fit the element type (out of range, NaN or a fraction for an integer type, not
        0 or 1 for BOOL, a finite value that overflows FLOAT or HALF); the message
        names the tensor, the value and its position.
    """
    typ = t.elementType()
    arr = numeric_buffer(buffer, what, f"tensor '{t.name}'", typ)
    if arr.size != t.numElements():
        raise EngineError(
            f"{what}: buffer has {arr.size} elements (shape {list(arr.shape)}), tensor "
            f"'{t.name}' has {t.numElements()} (shape {t.shape()}); they must be equal"
        )
    flat = arr.reshape(-1)  # a copy when the buffer is a non-contiguous view
    return fit_values(flat, typ, f"{what}: tensor '{t.name}'")


def fit_values(values: np.ndarray, typ: Any, what: str) -> np.ndarray:
    """``values`` converted to ``typ``'s dtype, or an error naming the first misfit."""
    target = typ.numpy
    if values.dtype == target:
        return values
    bad: np.ndarray
    reason = ""
    if target.kind == "b":
        bad = (values != 0) & (values != 1)
        reason = "is not 0 or 1"
    elif target.kind in "iu":
        info = np.iinfo(target)
        if values.dtype.kind == "f":
            finite = np.isfinite(values)
            bad = ~finite | (values != np.trunc(np.where(finite, values, 0)))
            if bad.any():
                reason = "is not an integer"
            else:
                bad = (values < info.min) | (values > info.max)
                reason = f"is outside the range {info.min}..{info.max}"
        else:
            as_obj = values.astype(object) if values.dtype == np.uint64 else values
            bad = (as_obj < info.min) | (as_obj > info.max)
            reason = f"is outside the range {info.min}..{info.max}"
    else:
        with np.errstate(over="ignore", invalid="ignore"):
            converted = values.astype(target)
        bad = np.isfinite(values) & ~np.isfinite(converted)
        reason = f"overflows {typ} (largest {np.finfo(target).max})"
    bad = np.asarray(bad, bool)
    if bad.any():
        k = int(np.flatnonzero(bad)[0])
        raise EngineError(
            f"{what} has element type {typ}: value {values[k].item()!r} at element {k} "
            f"{reason} ({int(bad.sum())} such value(s)); hint: convert or clip the values "
            f"on the host first"
        )
    with np.errstate(over="ignore", invalid="ignore"):
        return values.astype(target)


def fill_host_buffer(buffer: Any, values: np.ndarray, t: Any, what: str) -> None:
    """Copy tensor values into a caller's buffer in place (any layout, a safe dtype).

    Raises
    ------
    EngineError
        ``buffer`` is not a writable numpy array, its size differs from the tensor's,
        or its dtype cannot hold every value of the tensor's type (``np.can_cast``
        ``safe``: float32 into float64 is fine, float32 into int32 is not).
    """
    if not isinstance(buffer, np.ndarray):
        raise EngineError(
            f"{what}: buffer must be a numpy array, got {type(buffer).__name__}; hint: "
            "omit it to get a new array"
        )
    if not buffer.flags.writeable:
        raise EngineError(f"{what}: buffer is read-only; hint: pass a writable array")
    if buffer.size != values.size:
        raise EngineError(
            f"{what}: buffer has {buffer.size} elements (shape {list(buffer.shape)}), tensor "
            f"'{t.name}' has {values.size} (shape {t.shape()}); they must be equal"
        )
    if not np.can_cast(values.dtype, buffer.dtype, "safe"):
        raise EngineError(
            f"{what}: buffer dtype {buffer.dtype} cannot hold the values of tensor "
            f"'{t.name}' ({t.elementType()}, dtype {values.dtype}) without loss; hint: "
            f"use a buffer of dtype {values.dtype}"
        )
    buffer[...] = values.reshape(buffer.shape)  # fills views with any strides in place


def check_stream_buffer(buffer: Any, stream: DataStream) -> None:
    """A stream's host buffer: a non-empty C-contiguous numpy array of its dtype.

    The buffer is read or written in place at every transfer, as Poplar does with the
    memory it is given, so it is never converted or copied: a dtype other than the
    stream's or a non-contiguous view would leave the caller's array unfilled.

    Raises
    ------
    EngineError
        Naming the stream, what was found and what is required.
    """
    what = f"connectStream('{stream.handle}')"
    want = stream.elementType.numpy
    if not isinstance(buffer, np.ndarray) or buffer.size == 0:
        raise EngineError(
            f"{what}: needs a non-empty numpy array of dtype {want}, got "
            f"{type(buffer).__name__}{' of size 0' if isinstance(buffer, np.ndarray) else ''}"
        )
    if buffer.dtype != want:
        raise EngineError(
            f"{what}: buffer has dtype {buffer.dtype}, the stream carries "
            f"{stream.elementType} (dtype {want}); they must match because the buffer is "
            f"used in place; hint: np.asarray(buffer, dtype=np.{want.name})"
            + (" and read the converted array" if not stream.toDevice else "")
        )
    if not buffer.flags.c_contiguous:
        raise EngineError(
            f"{what}: buffer is a non-contiguous view (shape {list(buffer.shape)}, strides "
            f"{list(buffer.strides)}); it is used in place, so it must be C-contiguous; "
            "hint: np.ascontiguousarray(buffer)"
            + (" and read the new array" if not stream.toDevice else "")
        )
    if buffer.size < stream.numElements:
        raise EngineError(
            f"{what}: buffer has {buffer.size} elements, fewer than the stream's "
            f"{stream.numElements} per transfer; hint: at least {stream.numElements} "
            "(a multiple is read or written round-robin)"
        )


__all__ = ["Engine"]
