"""Lowering of the program tree to the machine's IR.

* ``Execute``: remote vertex inputs become a sync and an exchange before the compute
  set, remote outputs a sync and an exchange after it.
* ``Copy`` between tensors: elements already on their destination tile are copied by
  an on-tile copy vertex per tile, the rest by an exchange.
* Exchanges on a target of several IPUs (:meth:`Emitter._exchange_steps`): elements
  that cross IPUs go first, as an external sync of the IPUs involved and a
  ``GlobalExchange`` (once per destination IPU, see
  :mod:`poplar_api.lowering.exchange`); the on-chip rest follows, as an internal sync
  listing the IPUs its exchange involves (the others skip it) and an ``Exchange``.
  Global first because the on-chip part fans out what the links delivered to a
  landing tile. A single-IPU target lowers exactly as before (no ``ipus``).
* ``Copy`` from or to a stream, and ``PrintTensor``: a host sync and a stream copy.
  With the engine option ``exchange.enablePrefetch`` (default true) a host-to-device
  copy is marked ``prefetch`` and asks the host, after its effect, whether the
  stream's next data is ready (docs/machine.md, "Prefetch").
* ``Copy`` between a tensor and a remote buffer: an internal sync, the Streaming
  Memory transfer (``RemoteBufferCopy``) and its on-chip exchange; the rows are
  chosen by the offset tensor when the copy runs.
* Control flow becomes IR control nodes; predicates are read from device memory
  after an internal sync, or on several IPUs after an external sync of all of them
  (every IPU follows the same control flow, so the value must reach each).
* ``Block`` programs whose name matches the engine option ``profiler.blocks.filter``,
  and every named program whose name matches ``profiler.programs.filter`` (implicit
  blocks), become IR ``Block`` nodes; the machine records their per-tile cycles. Both
  options are regular expressions that must match the whole name (``re.fullmatch``).
  Other ``Block`` programs lower to their body alone.
* ``WriteUndef`` lowers to no step; it is recorded for memory liveness
  (``Emitter.undefs``). ``Call`` lowers a function's program once.
* ``Abort`` is an internal sync whose effect stops the run
  (:class:`~poplar_api.errors.ApplicationRuntimeError`); ``AbortOnCondition`` is an
  ``If`` around one; ``ErrorProgram`` is a ``PrintTensor`` of its debug tensor whose
  effect prints the message and stops the run. ``AssumeEqualAcrossReplicas`` lowers
  to nothing (the Engine checks at run time that replicas agree on every predicate).
* ``CrossReplicaCopy``, copies of non-replicated views and GCL collectives are
  lowered by :mod:`poplar_api.lowering.collective`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from ipusim import ir
from poplar_api import program as P  # noqa: N812 - short alias for program classes
from poplar_api.errors import ApplicationRuntimeError, EngineError
from poplar_api.graph import DataStream, replication_factor
from poplar_api.lowering import runs, validate
from poplar_api.lowering.computeset import (
    build_table,
    connection_sizes,
    make_runner,
    plan_reads,
    plan_writes,
)
from poplar_api.lowering.context import Lowered
from poplar_api.lowering.exchange import ExchangePlanner, OwnerCache, exchange_ipus
from poplar_api.printing import format_tensor
from poplar_api.remote import RemoteBuffer, remote_buffers
from poplar_api.tensor import Tensor
from poplar_api.vertices import NO_ESTIMATE, id_array


def _filter(options: Mapping[str, str], name: str) -> re.Pattern[str] | None:
    """The compiled regular expression of option ``name`` (None when empty or unset).

    The Engine validates its options first; the error here only guards an Emitter
    made without an Engine.
    """
    value = str(options.get(name, "") or "")
    if not value:
        return None
    try:
        return re.compile(value)
    except re.error as exc:
        raise EngineError(
            f"engine option {name!r}: value {value!r} is not a valid regular expression "
            f"({exc}); hint: the filter must match whole block or program names, e.g. "
            "'stage.*' or 'op1|op2'"
        ) from None


def prefetch_option(options: Mapping[str, str]) -> bool:
    """The engine option ``exchange.enablePrefetch`` (default true, as in Poplar)."""
    return str(options.get("exchange.enablePrefetch", "true")).strip().lower() == "true"


class HostIO:
    """What the host side of effects needs: stream buffers, callbacks, remote buffers
    and stdout (``poplar_api.streams.HostStreams`` is the engine's)."""

    def pull(self, stream: DataStream) -> np.ndarray:  # pragma: no cover - interface
        """The data of one copy from a host-to-device stream."""
        raise NotImplementedError

    def pulled(self, stream: DataStream) -> None:  # pragma: no cover - interface
        """The data of the last :meth:`pull` is on the device."""

    def prefetched(self, stream: DataStream) -> bool:  # pragma: no cover - interface
        """Whether the data of the stream's next copy is ready on the host now."""
        return False

    def push(self, stream: DataStream, values: np.ndarray) -> None:  # pragma: no cover
        """Hand the data of one copy to a device-to-host stream."""
        raise NotImplementedError

    def remote_data(self, buffer: Any) -> np.ndarray:  # pragma: no cover - interface
        """The contents of a remote buffer, [repeats, numElements] (written in place)."""
        raise NotImplementedError

    def print(self, text: str) -> None:  # pragma: no cover - interface
        raise NotImplementedError


class Emitter:
    """Lowers programs of one graph; problems are collected, not raised."""

    def __init__(
        self,
        state,
        target,
        lowered: Lowered,
        host: HostIO,
        options: Mapping[str, str] | None = None,
    ) -> None:
        self.state = state
        self.cfg = target.config
        self.num_tiles = target.getNumTiles()
        self.tiles_per_ipu = int(self.cfg.tile.tiles_per_ipu)
        self.num_ipus = max(1, self.num_tiles // self.tiles_per_ipu)
        self.lowered = lowered
        self.host = host
        self.problems: list[str] = []
        self.tables: dict[int, Any] = {}
        self.cs_nodes: dict[int, ir.Node] = {}
        self.functions: dict[int, ir.Node] = {}
        #: where element owners change, for every planner of this lowering
        self.owners = OwnerCache()
        self.copy_vertex_type: tuple[str, ...] = ("Copy",)
        #: id of an id array -> (the array, its slice or itself): see :meth:`_index`
        self._indices: dict[int, tuple[np.ndarray, np.ndarray | slice]] = {}
        self.program_ids: dict[int, int] = {}
        self.programs: list[P.Program] = []  # keeps lowered programs alive (ids stay unique)
        #: id(IR node) -> (element type, element ids) its steps read or write (liveness)
        self.touches: dict[int, list[tuple[Any, np.ndarray]]] = {}
        #: id(IR node of a WriteUndef) -> (element type, element ids) it makes undefined
        self.undefs: dict[int, list[tuple[Any, np.ndarray]]] = {}
        options = options or {}
        self.blocks_filter = _filter(options, "profiler.blocks.filter")
        self.programs_filter = _filter(options, "profiler.programs.filter")
        #: exchange.enablePrefetch: host-to-device stream copies are prefetched
        self.prefetch = prefetch_option(options)

    # ----------------------------------------------------------------- helpers
    def _pid(self, prog: P.Program) -> int:
        """Program id for profiles: numbered in lowering order, so deterministic."""
        return self.program_ids.setdefault(id(prog), len(self.program_ids))

    def _tensor(self, t: Any, what: str) -> Tensor | None:
        if not isinstance(t, Tensor) or t.graph is not self.state:
            self.problems.append(f"{what}: expected a tensor of this graph, got {t!r}")
            return None
        return t

    def _index(self, ids: np.ndarray) -> np.ndarray | slice:
        """:func:`~poplar_api.lowering.runs.as_index` of a tensor's id array, once per
        array (a tensor's flat ids are one cached array, checked by several copies)."""
        known = self._indices.get(id(ids))
        if known is None or known[0] is not ids:
            known = self._indices[id(ids)] = (ids, runs.as_index(ids))
        return known[1]

    def _where(self, ids: np.ndarray | range) -> np.ndarray | slice:
        """:meth:`_index` of a tensor's ids as :meth:`Tensor._flat_ids` gives them."""
        return runs.as_index(ids) if isinstance(ids, range) else self._index(ids)

    def _tiles(self, t: Tensor) -> np.ndarray:
        return self.state.space(t.elementType()).tile[t._id_index()].astype(np.int64)

    def _predicate(
        self, t: Any, what: str, integral: bool = False, cases: tuple[int, ...] | None = None
    ) -> int | None:
        t = self._tensor(t, what)
        if t is None:
            return None
        if t.numElements() != 1:
            self.problems.append(
                f"{what}: predicate tensor '{t.name}' has {t.numElements()} elements (shape "
                f"{t.shape()}); it must be a scalar"
            )
            return None
        if integral and t.elementType().is_floating:
            self.problems.append(
                f"{what}: control tensor '{t.name}' has element type {t.elementType()}; it "
                "must be of an integral type (INT, UNSIGNED_INT, ...); hint: cast it with popops"
            )
            return None
        storage, typ, ids = self.lowered.storage, t.elementType(), t.flat_index()
        if cases is not None:  # a Switch that must match a case
            name = t.name

            def checked() -> int:
                value = int(storage.read(typ, ids)[0])
                if value not in cases:
                    raise EngineError(
                        f"{what}: control tensor '{name}' has value {value}, which matches "
                        f"no case (cases: {list(cases)}); this Switch has no default to run; "
                        "hint: keep the control within the case values"
                    )
                return value

            return self.lowered.predicate(checked)
        if integral:  # Switch: the value itself selects the case
            return self.lowered.predicate(lambda: int(storage.read(typ, ids)[0]))
        # If / RepeatWhile: any non-zero value is true (int() would turn 0.5 into false)
        return self.lowered.predicate(lambda: int(storage.read(typ, ids)[0] != 0))

    def _sync(
        self,
        pid: int,
        kind: str = "internal",
        name: str = "Sync",
        ipus: tuple[int, ...] | None = None,
    ) -> ir.Sync:
        return ir.Sync(name=name, program_id=pid, sync_kind=kind, ipus=ipus)

    def _predicate_sync(self, pid: int) -> ir.Sync:
        """The sync before a control-flow predicate is read: internal on one IPU; on
        several, external over all of them (each IPU needs the predicate's value)."""
        return self._sync(pid, "external" if self.num_ipus > 1 else "internal")

    def _exchange_steps(
        self, planner: ExchangePlanner, name: str, sync_name: str, pid: int, suffix: str = ""
    ) -> list[ir.Node]:
        """The steps of a planned exchange, in order (none when nothing moves).

        Elements that cross IPUs: an external sync of the IPUs involved and a
        ``GlobalExchange``; then the on-chip part: an internal sync and the
        ``Exchange``. On a target of several IPUs the
        internal sync lists the IPUs its exchange involves; on one IPU it stays
        without ``ipus``, as before. Names: ``{name}`` for the on-chip exchange,
        ``{sync_name}`` for its sync, ``{base}/GlobalExchange{suffix}`` and
        ``{base}/ExternalSync{suffix}`` for the global part (``base`` is ``name``
        up to its last ``/``).
        """
        nodes: list[ir.Node] = []
        base = name.rsplit("/", 1)[0]
        glob = planner.build_global(f"{base}/GlobalExchange{suffix}", pid)
        if glob is not None:
            ipus = exchange_ipus(glob, self.tiles_per_ipu)
            sync = self._sync(pid, "external", f"{base}/ExternalSync{suffix}", ipus)
            nodes += [sync, glob]
        on_chip = planner.build(name, pid)
        if on_chip is not None:
            ipus = exchange_ipus(on_chip, self.tiles_per_ipu) if self.num_ipus > 1 else None
            nodes += [self._sync(pid, name=sync_name, ipus=ipus), on_chip]
        return nodes

    def _touch(self, node: Any, *tensors: Any) -> Any:
        """Record that ``node``'s steps access ``tensors`` (for memory liveness): their
        ids, or one run ``(begin, end)`` for a tensor of consecutive ids."""
        parts = [
            (t.elementType(), runs.ids_or_run(t._flat_ids()))
            for t in tensors
            if isinstance(t, Tensor) and t.graph is self.state
        ]
        self.touches.setdefault(id(node), []).extend(parts)
        return node

    # ----------------------------------------------------------------- dispatch
    def lower(self, prog: P.Program) -> ir.Node:
        """IR of one program (problems are appended to ``self.problems``)."""
        method: Callable[[Any], ir.Node] | None = getattr(self, f"_{type(prog).__name__}", None)
        if method is None:
            for base in type(prog).__mro__[1:]:
                method = getattr(self, f"_{base.__name__}", None)
                if method is not None:
                    break
        if method is None or not isinstance(prog, P.Program):
            self.problems.append(f"{prog!r} is not a program this engine can run")
            return ir.Sequence()
        self.programs.append(prog)
        node = method(prog)
        name = _program_name(prog)
        implicit = self.programs_filter
        # profiler.programs.filter: a named program it matches runs in an implicit Block
        wrap = implicit is not None and name and not isinstance(prog, P.Block)
        if wrap and implicit.fullmatch(name):
            node = ir.Block((node,), name=name, program_id=self._pid(prog))
        return node

    def _Block(self, prog: P.Block) -> ir.Node:
        body = self.lower(prog.program)
        selected = self.blocks_filter
        if selected is None or not selected.fullmatch(prog.debugName):
            return body  # an unselected Block is its program alone, as in Poplar
        return ir.Block((body,), name=prog.debugName, program_id=self._pid(prog))

    def _Sequence(self, prog: P.Sequence) -> ir.Node:
        return ir.Sequence([self.lower(p) for p in prog.programs], name=prog.debugName)

    def _Repeat(self, prog: P.Repeat) -> ir.Node:
        return ir.Repeat(prog.count, self.lower(prog.body))

    def _RepeatWhileTrue(self, prog: P.RepeatWhileTrue) -> ir.Node:
        pred = self._predicate(prog.predicate, type(prog).__name__)
        sync = self._touch(self._predicate_sync(self._pid(prog)), prog.predicate)
        cond = ir.Sequence([self.lower(prog.cond), sync])
        return ir.RepeatWhile(
            cond, -1 if pred is None else pred, self.lower(prog.body), prog.whileTrue
        )

    def _If(self, prog: P.If) -> ir.Node:
        pred = self._predicate(prog.predicate, "If")
        node = ir.If(
            -1 if pred is None else pred, self.lower(prog.trueBody), self.lower(prog.falseBody)
        )
        return ir.Sequence(
            [self._touch(self._predicate_sync(self._pid(prog)), prog.predicate), node]
        )

    def _Switch(self, prog: P.Switch) -> ir.Node:
        what = "Switch" + (f" '{prog.debugName}'" if prog.debugName else "")
        strict = tuple(v for v, _ in prog.cases) if prog.noCase else None
        ctl = self._predicate(prog.control, what, integral=True, cases=strict)
        cases = [(v, self.lower(b)) for v, b in prog.cases]
        node = ir.Switch(-1 if ctl is None else ctl, cases, self.lower(prog.defaultCaseBody))
        return ir.Sequence([self._touch(self._predicate_sync(self._pid(prog)), prog.control), node])

    def _Sync(self, prog: P.Sync) -> ir.Node:
        kind = {"internal": "internal", "external": "external", "global": "host"}
        return self._sync(self._pid(prog), kind[prog.syncType.value], prog.debugName or "sync")

    def _Call(self, prog: P.Call) -> ir.Node:
        fn = prog.function
        funcs = self.state.functions
        if not (0 <= fn.index < len(funcs) and funcs[fn.index] is fn):
            self.problems.append(
                f"Call #{self._pid(prog)}: function {fn.index} (of {fn.program!r}) was made by "
                "another graph's addFunction; hint: call graph.addFunction on the engine's graph"
            )
            return ir.Sequence()
        if fn.index not in self.functions:
            self.functions[fn.index] = ir.Sequence()  # placeholder while lowering
            self.functions[fn.index] = self.lower(fn.program)
        return ir.Call(fn.index)

    def _WriteUndef(self, prog: P.WriteUndef) -> ir.Node:
        t = self._tensor(prog.tensor, "WriteUndef")
        node = ir.Sequence(name=prog.debugName or "WriteUndef")
        if t is not None:
            self.undefs[id(node)] = [(t.elementType(), t.flat_index())]
        return node

    # ------------------------------------------------------------------ abort
    def _abort_effect(self, prog: P.Program, message: str, before: Callable[[], None] | None):
        """An effect that (after ``before``) stops the run with ``message``."""
        label = repr(prog)
        text = f"{label} stopped the run" + (f": {message}" if message else " (no message)")

        def stop() -> None:
            if before is not None:
                before()
            raise ApplicationRuntimeError(text, message, label)

        return self.lowered.effect(stop)

    def _abort_step(self, prog: P.Program, message: str) -> ir.Step:
        name = prog.debugName or type(prog).__name__
        step = self._sync(self._pid(prog), "internal", f"{name}/Abort")
        return _with_effect(step, self._abort_effect(prog, message, None))

    def _Abort(self, prog: P.Abort) -> ir.Node:
        return self._abort_step(prog, prog.message)

    def _AbortOnCondition(self, prog: P.AbortOnCondition) -> ir.Node:
        pred = self._predicate(prog.predicate, f"AbortOnCondition #{self._pid(prog)}")
        node = ir.If(-1 if pred is None else pred, self._abort_step(prog, prog.message))
        return ir.Sequence(
            [self._touch(self._predicate_sync(self._pid(prog)), prog.predicate), node]
        )

    def _ErrorProgram(self, prog: P.ErrorProgram) -> ir.Node:
        t = self._tensor(prog.debugTensor, f"ErrorProgram #{self._pid(prog)} debugTensor")
        if t is None:
            return ir.Sequence()
        storage, host, typ, ids, shape = (
            self.lowered.storage, self.host, t.elementType(), t.flat_index(), t.shape()
        )  # fmt: skip
        message, name = prog.message, t.name

        def report() -> None:
            host.print(message)
            host.print(format_tensor(name, storage.read(typ, ids).reshape(shape), typ))

        effect = self._abort_effect(prog, message, report)
        label = prog.debugName or f"ErrorProgram {name}"
        return self._host_transfer(prog, t, label, False, effect)

    def _AssumeEqualAcrossReplicas(self, prog: P.AssumeEqualAcrossReplicas) -> ir.Node:
        self._tensor(prog.tensor, f"AssumeEqualAcrossReplicas #{self._pid(prog)}")
        return ir.Sequence(name=prog.debugName)

    def _CrossReplicaCopy(self, prog: P.CrossReplicaCopy) -> ir.Node:
        from poplar_api.lowering.collective import lower_cross_replica_copy

        return lower_cross_replica_copy(self, prog)

    def _NonReplicatedCopy(self, prog: P.NonReplicatedCopy) -> ir.Node:
        from poplar_api.lowering.collective import lower_nonreplicated_copy

        return lower_nonreplicated_copy(self, prog)

    def _GclCollective(self, prog: Any) -> ir.Node:
        from poplar_api.lowering.collective import lower_collective

        return lower_collective(self, prog)

    def function_nodes(self) -> tuple[ir.Node, ...]:
        """Lowered functions, indexed as ``graph.addFunction`` numbered them."""
        n = len(self.state.functions)
        return tuple(self.functions.get(i, ir.Sequence()) for i in range(n))

    # ------------------------------------------------------------------ execute
    def _Execute(self, prog: P.Execute) -> ir.Node:
        cs = prog.computeSet
        sets = self.state.compute_sets
        if not (0 <= cs.id < len(sets) and sets[cs.id] is cs):
            self.problems.append(
                f"Execute #{self._pid(prog)}: compute set '{cs.name}' belongs to another "
                "graph; hint: make it with the engine's graph.addComputeSet"
            )
            return ir.Sequence()
        if cs.id in self.cs_nodes:
            return self.cs_nodes[cs.id]
        problems = validate.check_vertices(self.state, cs, self.num_tiles)
        table = build_table(self.state, cs)
        problems += validate.check_conflicts(self.state, table)
        self.problems += problems
        if problems:
            return ir.Sequence()
        target = self.state.target
        vertices = self.state.vertices
        cycles = vertices.column("estimate", table.vertex_ids)
        multi = np.zeros(cycles.size, bool)
        type_of = np.zeros(cycles.size, np.int64)
        for k, group in enumerate(table.groups):  # types in order of first appearance
            type_of[group.positions] = k
            multi[group.positions] = group.vtype.is_multi
            at = group.positions[cycles[group.positions] == NO_ESTIMATE]
            for pos, vid in zip(at.tolist(), table.vertex_ids[at].tolist(), strict=True):
                sizes = connection_sizes(group.vtype, vertices.fields[vid])
                cycles[pos] = group.vtype.estimate(sizes, target)
        names = [g.vtype.name for g in table.groups]
        runner = make_runner(table, self.lowered.storage, self.cfg.tile.worker_contexts)
        nodes: list[ir.Node] = []
        planner = ExchangePlanner(self.state.target, self.state, self.owners)
        plan_reads(planner, table, self.state)
        pid = self._pid(prog)
        nodes += self._exchange_steps(
            planner, f"{cs.name}/ExchangeIn", f"{cs.name}/Sync", pid, "In"
        )
        nodes.append(
            ir.Compute(
                name=cs.name,
                effect=self.lowered.effect(runner),
                program_id=self._pid(prog),
                vertex_tile=table.tiles,
                vertex_cycles=cycles,
                vertex_multi=multi,
                vertex_type=type_of,
                vertex_type_names=tuple(names),
            )
        )
        planner = ExchangePlanner(self.state.target, self.state, self.owners)
        plan_writes(planner, table, self.state)
        nodes += self._exchange_steps(
            planner, f"{cs.name}/ExchangeOut", f"{cs.name}/SyncOut", pid, "Out"
        )
        node = ir.Sequence(nodes, name=cs.name)
        self.touches[id(node)] = [(ft.type, ft.touched()) for g in table.groups for ft in g.fields]
        self.cs_nodes[cs.id] = node
        return node

    # --------------------------------------------------------------------- copy
    def _Copy(self, prog: P.Copy) -> ir.Node:
        src, dst = prog.src, prog.dst
        if isinstance(src, DataStream) and isinstance(dst, Tensor):
            return self._stream_copy(prog, src, dst, to_device=True)
        if isinstance(src, Tensor) and isinstance(dst, DataStream):
            return self._stream_copy(prog, dst, src, to_device=False)
        if isinstance(src, RemoteBuffer):
            return self._remote_copy(prog, src, dst, to_device=True)
        if isinstance(dst, RemoteBuffer):
            return self._remote_copy(prog, dst, src, to_device=False)
        s = self._tensor(src, f"Copy #{self._pid(prog)} source")
        d = self._tensor(dst, f"Copy #{self._pid(prog)} destination")
        if s is None or d is None:
            return ir.Sequence()
        where = f"Copy from '{s.name}' to '{d.name}'"
        problems = []
        if s.elementType() != d.elementType():
            problems.append(
                f"{where}: element types differ (source {s.elementType()}, destination "
                f"{d.elementType()}); they must be equal; hint: cast with popops.cast"
            )
        if s.numElements() != d.numElements():
            # Poplar copies in row-major order between any shapes of equal size (its
            # first tutorial copies a [3] slice into a [1, 3] one)
            problems.append(
                f"{where}: sizes differ (source shape {s.shape()} with {s.numElements()} "
                f"elements, destination shape {d.shape()} with {d.numElements()} elements); "
                "they must have the same number of elements; hint: slice or reshape one"
            )
        const = self._constant_of(d)
        if const is not None:
            problems.append(
                f"{where}: the destination is (part of) constant '{const}'; constants cannot "
                "be written; hint: copy into a variable (graph.addVariable)"
            )
        if not problems and s.elementType() == d.elementType():
            s_ids, d_ids = s._flat_ids(), d._flat_ids()
            if isinstance(s_ids, range) and isinstance(d_ids, range):  # two blocks
                same = s_ids == d_ids
                overlap = max(0, min(s_ids.stop, d_ids.stop) - max(s_ids.start, d_ids.start))
            else:
                s_ids, d_ids = id_array(s_ids), id_array(d_ids)
                same = np.array_equal(s_ids, d_ids)
                overlap = 0 if same else np.intersect1d(s_ids, d_ids).size
            if overlap and not same:  # copying a view onto itself is allowed
                problems.append(
                    f"{where}: source and destination overlap ({overlap} of "
                    f"{d.numElements()} element(s) are in both); they must be disjoint "
                    "(or the same view); hint: copy through a temporary variable"
                )
        if problems:
            self.problems += problems
            return ir.Sequence()
        return self._device_copy(prog, s, d)

    def _constant_of(self, t: Tensor) -> str | None:
        """Name of a constant that ``t`` has elements of, or None."""
        space = self.state.find_space(t.elementType())
        if space is None or t.numElements() == 0:
            return None
        touched = np.zeros(len(self.state.variables), bool)
        where = self._where(t._flat_ids())
        if isinstance(where, slice):  # one block of ids: the variables it overlaps
            bases = np.asarray(space.var_bases, np.int64)
            k0, k1 = np.searchsorted(bases, [where.start, where.stop - 1], side="right") - 1
            for k in range(int(k0), int(k1) + 1):
                var = self.state.variables[space.var_ids[k]]
                touched[var.id] = var.size > 0
        else:
            runs.mark_variables(space, where, touched)
        for vid in np.flatnonzero(touched).tolist():
            if self.state.variables[vid].constant:
                return self.state.variables[vid].name
        return None

    def _device_copy(self, prog: P.Copy, s: Tensor, d: Tensor) -> ir.Node:
        typ = s.elementType()
        s_ids, d_ids = s._flat_ids(), d._flat_ids()
        s_tile, d_tile = self._tiles(s), self._tiles(d)
        storage = self.lowered.storage
        s_where, d_where = self._where(s_ids), self._where(d_ids)

        def copy() -> None:
            storage.copy(typ, d_where, s_where)

        name = prog.debugName or f"Copy {s.name} -> {d.name}"
        nodes: list[ir.Node] = []
        local = s_tile == d_tile
        if local.any():
            nbytes = np.bincount(d_tile[local], minlength=self.num_tiles) * typ.size
            tiles = np.flatnonzero(nbytes)
            # A copy vertex: fixed set-up (code.copy_vertex_fixed_cycles), then moves the
            # data at the slower of the tile's load and store bandwidths.
            mem = self.cfg.memory
            per_cycle = min(mem.load_bytes_per_cycle, mem.store_bytes_per_cycle)
            cycles = self.cfg.code.copy_vertex_fixed_cycles + -(-nbytes[tiles] // per_cycle)
            nodes.append(
                ir.Compute(
                    name=f"{name}/OnTileCopy",
                    program_id=self._pid(prog),
                    vertex_tile=tiles,
                    vertex_cycles=cycles,
                    vertex_type_names=self.copy_vertex_type,
                )
            )
        planner = ExchangePlanner(self.state.target, self.state, self.owners)
        planner.add_owned(typ, id_array(s_ids), d_tile, self.state.space(typ).tile)
        nodes += self._exchange_steps(planner, f"{name}/Exchange", f"{name}/Sync", self._pid(prog))
        if not nodes:  # nothing to copy
            return ir.Sequence()
        last = nodes[-1]
        nodes[-1] = _with_effect(last, self.lowered.effect(copy))
        return self._touch(ir.Sequence(nodes, name=name), s, d)

    def _stream_copy(
        self, prog: P.Program, stream: DataStream, t: Tensor, to_device: bool
    ) -> ir.Node:
        if t.graph is not self.state or self.state.streams.get(stream.handle) is not stream:
            self.problems.append(f"Copy with stream '{stream.handle}': not a stream of this graph")
            return ir.Sequence()
        replicas = replication_factor(self.state)
        if replicas > 1 and stream.replicationFactor == 1 and not stream.broadcast:
            self.problems.append(
                f"Copy between stream '{stream.handle}' and tensor '{t.name}': the stream was "
                f"made by the non-replicated graph, the tensor is replicated ({replicas} "
                "replicas), so it is not defined which host data each replica would get; "
                "hint: make the stream with the replicated graph (per-replica data) or with "
                "ReplicatedStreamMode.BROADCAST (the same data for every replica)"
            )
            return ir.Sequence()
        if stream.toDevice != to_device:
            way = "host-to-device" if stream.toDevice else "device-to-host"
            self.problems.append(
                f"Copy with stream '{stream.handle}': it is a {way} FIFO and cannot be used "
                f"{'as a source' if to_device else 'as a destination'} here"
            )
            return ir.Sequence()
        if stream.elementType != t.elementType() or stream.numElements != t.numElements():
            self.problems.append(
                f"Copy between stream '{stream.handle}' ({stream.elementType}, "
                f"{stream.numElements} elements) and tensor '{t.name}' ({t.elementType()}, "
                f"{t.numElements()} elements): type and size must match"
            )
            return ir.Sequence()
        const = self._constant_of(t) if to_device else None
        if const is not None:
            self.problems.append(
                f"Copy from stream '{stream.handle}' into tensor '{t.name}': the destination "
                f"is (part of) constant '{const}'; constants cannot be written; hint: copy "
                "into a variable"
            )
            return ir.Sequence()
        storage, host, typ, ids = self.lowered.storage, self.host, t.elementType(), t._flat_ids()
        size = getattr(prog, "expectedSize", None)
        if to_device and size is not None:
            what = f"Copy from stream '{stream.handle}' into '{t.name}': expectedSize"
            n_of = self._predicate(size, what, integral=True)
            if n_of is None:
                return ir.Sequence()
            predicates, limit = self.lowered.predicates, t.numElements()
            size_name = size.name

            def effect() -> None:
                n = predicates[n_of]()
                if not 0 <= n <= limit:
                    raise EngineError(
                        f"{what}: tensor '{size_name}' holds {n}; it must be in [0, {limit}] "
                        f"(the size of '{t.name}')"
                    )
                storage.write(typ, runs.as_index(ids[:n]), host.pull(stream)[:n])
                host.pulled(stream)
        elif to_device:
            where = self._where(ids)

            def effect() -> None:
                storage.write(typ, where, host.pull(stream))
                host.pulled(stream)
        else:
            where = self._where(ids)

            def effect() -> None:
                host.push(stream, storage.read(typ, where))

        ready = None
        if to_device and self.prefetch:
            ready = self.lowered.predicate(lambda: int(host.prefetched(stream)))
        return self._host_transfer(
            prog, t, stream.handle, to_device, self.lowered.effect(effect), prefetch=ready
        )

    def _remote_copy(self, prog: P.Copy, buffer: RemoteBuffer, t: Any, to_device: bool) -> ir.Node:
        """A copy between tensor ``t`` and rows of a remote buffer (see
        :mod:`poplar_api.remote`): an internal sync, the Streaming Memory transfer and
        the on-chip exchange delivering (or gathering) the data."""
        handle = buffer.handle()
        way = "from remote buffer '%s' into" if to_device else "into remote buffer '%s' from"
        way = way % handle
        what = f"Copy {way} tensor '{getattr(t, 'name', t)}'"
        if remote_buffers(self.state).get(handle) is not buffer:
            self.problems.append(
                f"{what}: remote buffer '{handle}' is not a buffer of this graph; hint: make "
                "it with the engine's graph.addRemoteBuffer"
            )
            return ir.Sequence()
        t = self._tensor(t, what)
        if t is None:
            return ir.Sequence()
        offset = prog.offset
        if offset is not None and self._tensor(offset, f"{what}: offset") is None:
            return ir.Sequence()
        rows = 1 if offset is None else offset.numElements()
        n, repeats, typ = buffer.numElements(), buffer.getRepeats(), buffer.elementType()
        problems = []
        if t.elementType() != typ:
            problems.append(
                f"{what}: element types differ (remote buffer {typ}, tensor "
                f"{t.elementType()}); they must be equal; hint: cast with popops.cast"
            )
        if t.numElements() != rows * n:
            of = "no offset: one row"
            if offset is not None:
                of = f"offset '{offset.name}': {rows} row(s)"
            problems.append(
                f"{what}: the tensor has {t.numElements()} elements (shape {t.shape()}); "
                f"the copy moves {rows} x {n} = {rows * n} ({of} of numElements {n}); "
                "hint: give the tensor numElements elements per offset"
            )
        if offset is not None and (offset.elementType().is_floating or rows == 0):
            problems.append(
                f"{what}: offset '{offset.name}' has element type {offset.elementType()} and "
                f"{rows} element(s); it must hold at least one integral row index "
                "(UNSIGNED_INT or INT); hint: cast it with popops"
            )
        const = self._constant_of(t) if to_device else None
        if const is not None:
            problems.append(
                f"{what}: the destination is (part of) constant '{const}'; constants cannot "
                "be written; hint: copy into a variable"
            )
        if problems:
            self.problems += problems
            return ir.Sequence()
        storage, host, ids = self.lowered.storage, self.host, t.flat_index()
        off_type = None if offset is None else offset.elementType()
        off_ids = None if offset is None else offset.flat_index()

        def effect() -> None:
            if off_ids is None:
                index = np.zeros(1, np.int64)
            else:
                index = storage.read(off_type, off_ids).astype(np.int64)
            bad = np.flatnonzero((index < 0) | (index >= repeats))
            if bad.size:
                raise EngineError(
                    f"{what}: offset {int(index[bad[0]])} (element {int(bad[0])} of "
                    f"'{offset.name}') is out of range; remote buffer '{handle}' has "
                    f"{repeats} repeat(s), so offsets must be in [0, {repeats}); hint: keep "
                    f"the offsets below {repeats} or make the buffer with more repeats"
                )
            data = host.remote_data(buffer)
            if to_device:
                storage.write(typ, ids, data[index].reshape(-1))
            else:
                data[index] = storage.read(typ, ids).reshape(rows, n)

        node = self._host_transfer(
            prog, t, prog.debugName or handle, to_device, self.lowered.effect(effect),
            remote=handle,
        )  # fmt: skip
        return self._touch(node, offset) if offset is not None else node

    def _host_transfer(
        self,
        prog: P.Program,
        t: Tensor,
        label: str,
        to_device: bool,
        effect: int,
        prefetch: int | None = None,
        remote: str | None = None,
    ) -> ir.Node:
        """A host transfer as the machine runs it: a host sync, then the host link part
        (``StreamCopy``) and the on-chip part (an ``Exchange`` delivering the data to its
        tiles, or gathering it from them first).

        The on-chip part moves each tile's bytes in messages, one per run of elements
        that are consecutive in the stream and in the tensor's element ids.
        ``prefetch`` is the predicate telling whether the stream's next data is ready
        (the copy is then prefetched). With ``remote`` (a remote buffer's handle) it is a
        Streaming Memory transfer instead: an internal sync (the host takes no part)
        and a ``RemoteBufferCopy``.
        """
        space = self.state.space(t.elementType())
        ids = t._flat_ids()
        changes = None
        if type(ids) is range and len(ids) >= runs.STRETCHES_FROM:
            changes = self.owners.changes_of(t.elementType().size, space.tile, space.size)
        elements, messages = runs.transfer_counts(ids, space.tile, self.num_tiles, changes)
        nbytes = elements * t.elementType().size
        tiles = np.flatnonzero(nbytes)
        pid = self._pid(prog)
        common = {
            "name": label,
            "effect": effect,
            "program_id": pid,
            "direction": "host_to_device" if to_device else "device_to_host",
            "tile": tiles,
            "num_bytes": nbytes[tiles],
            "exchanged": True,
        }
        if remote is not None:
            step: ir.StreamCopy = ir.RemoteBufferCopy(stream=remote, **common)
        else:
            step = ir.StreamCopy(
                stream=label, prefetch=prefetch is not None, prefetch_predicate=prefetch, **common
            )
        messages = messages[tiles]
        none = np.zeros(tiles.size, np.int64)
        on_chip = ir.Exchange(
            name=f"{label}/StreamExchange",
            program_id=pid,
            host=True,
            tile=tiles,
            bytes_sent=none if to_device else nbytes[tiles],
            bytes_received=nbytes[tiles] if to_device else none,
            messages_sent=none if to_device else messages,
            messages_received=messages if to_device else none,
            max_distance=none,
        )
        parts = [step, on_chip] if to_device else [on_chip, step]
        if remote is not None:
            sync = self._sync(pid, "internal", f"{label}/Sync")
        else:
            sync = self._sync(pid, "host", f"{label}/HostSync")
        node = ir.Sequence([sync, *parts], name=label)
        return self._touch(node, t)

    def _PrintTensor(self, prog: P.PrintTensor) -> ir.Node:
        t = self._tensor(prog.tensor, "PrintTensor")
        if t is None:
            return ir.Sequence()
        title = prog.title if prog.title is not None else t.name
        storage, host, typ, ids, shape = (
            self.lowered.storage,
            self.host,
            t.elementType(),
            t.flat_index(),
            t.shape(),
        )

        def effect() -> None:
            host.print(format_tensor(title, storage.read(typ, ids).reshape(shape), typ))

        return self._host_transfer(
            prog, t, f"PrintTensor {title}", False, self.lowered.effect(effect)
        )


def _program_name(prog: P.Program) -> str:
    """The name ``profiler.programs.filter`` matches: the debug name, or for an
    ``Execute`` without one the compute set's name."""
    if prog.debugName:
        return prog.debugName
    if isinstance(prog, P.Execute):
        return prog.computeSet.name
    return ""


def _with_effect(step: ir.Step, effect: int) -> ir.Step:
    """A copy of ``step`` carrying ``effect``."""
    import dataclasses

    return dataclasses.replace(step, effect=effect)
