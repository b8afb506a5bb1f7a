"""The machine: SimPy tile groups executing a machine program.

A *tile group* is a set of tiles that runs the control program between syncs: one
group per IPU by default (``sim.granularity: ipu``) or one per tile
(``sim.granularity: tile``); both give the identical trace. Each group is a SimPy
process. Per-tile state (the local clock of every tile) is one numpy array; within a
step every tile's cost is computed for the whole machine at once and cached, so a
group only slices it. SimPy orders the groups in time and models the collectives
(syncs, stream copies, global exchanges) and the contention for the shared host link.
"""

from __future__ import annotations

import math
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from os import PathLike
from typing import Any

import numba
import numpy as np
import simpy

from ipusim import ir
from ipusim.config import MachineConfig, config_hash, load_config
from ipusim.dataplane import DataPlane, NoDataPlane
from ipusim.errors import IpusimError, RunAborted, SimulationTimeout
from ipusim.exchange.collectives import ring_plan, run_ring
from ipusim.exchange.fabric import LinkFabric
from ipusim.host.link import check_copy_size
from ipusim.ir_validation import validate_program
from ipusim.sync.controller import sync_extra_cycles
from ipusim.timing import ControllerSync, TimingModel
from ipusim.trace import BlockRecord, StepRecord, Trace


@dataclass
class _Group:
    """Tiles ``lo:hi`` (global ids) of IPU ``ipu``, run by one SimPy process."""

    index: int
    ipu: int
    lo: int
    hi: int


@dataclass
class _Barrier:
    event: simpy.Event
    expected: int
    arrived: int = 0


@dataclass
class _Decision:
    value: int
    pending: int


@dataclass
class _Prefetch:
    """A background host-link transfer of a stream's next copy to one IPU."""

    num_bytes: int
    done: simpy.Process


class Machine:
    """A modelled IPU machine that runs machine programs.

    Parameters
    ----------
    config
        A :class:`~ipusim.config.MachineConfig`, a preset name or a YAML path.
    timing
        The timing model to use; by default the one the config selects.
    """

    def __init__(
        self, config: MachineConfig | str | PathLike[str], timing: TimingModel | None = None
    ) -> None:
        self.config = config if isinstance(config, MachineConfig) else load_config(config)
        self.config_hash = config_hash(self.config)
        self.timing = timing if timing is not None else TimingModel(self.config)
        #: programs checked by :meth:`prepare` (IR arrays are read-only, so a program
        #: once checked stays valid)
        self._prepared: weakref.WeakSet[ir.Program] = weakref.WeakSet()

    @property
    def num_tiles(self) -> int:
        """Tiles over all IPUs."""
        return self.config.num_tiles

    def run(
        self,
        program: ir.Program | ir.Node,
        data_plane: DataPlane | None = None,
        max_cycles: int | None = None,
        entry: int = 0,
    ) -> Trace:
        """Run entry ``entry`` of ``program`` and return its trace.

        Parameters
        ----------
        program
            A machine program or a bare node.
        data_plane
            Applies functional effects and answers predicates; None for timing only.
        max_cycles
            Stop with :class:`~ipusim.errors.SimulationTimeout` (carrying the partial
            trace) when any tile's clock passes this.
        entry
            Index of the entry program to run.

        Raises
        ------
        IRValidationError
            The program does not fit this machine.
        HostLinkError
            A stream copy is larger than the per-copy limit.
        SimulationTimeout
            ``max_cycles`` was exceeded.
        RunAborted
            An effect stopped the run (raised by the data plane); its ``trace`` is the
            partial trace.
        """
        program = self.prepare(program)
        if not 0 <= entry < len(program.entries):
            raise IpusimError(
                f"entry {entry} does not exist: the program has {len(program.entries)} "
                f"entr{'y' if len(program.entries) == 1 else 'ies'}"
            )
        run = _Run(self, program, data_plane or NoDataPlane(), max_cycles)
        run.entry = entry
        return run.execute(program.entries[entry])

    def prepare(self, program: ir.Program | ir.Node) -> ir.Program:
        """Check a program against this machine once: its steps and tree
        (:func:`~ipusim.ir_validation.validate_program`), the size of every stream copy
        and the route of every inter-IPU transfer. ``run`` calls it; a program object
        already checked is not checked again (an engine prepares its program when it is
        loaded, as Poplar checks a graph when compiling it).

        Raises
        ------
        IRValidationError, HostLinkError, LinkRoutingError
            As :meth:`run`.
        """
        if isinstance(program, ir.Program) and program in self._prepared:
            return program
        cfg = self.config
        program = validate_program(program, cfg.num_tiles, cfg.tile.tiles_per_ipu)
        for step in ir.iter_steps(program):
            if isinstance(step, ir.StreamCopy):
                per_ipu = np.bincount(
                    step.tile // cfg.tile.tiles_per_ipu, step.num_bytes, minlength=cfg.num_ipus
                )
                check_copy_size(cfg, int(per_ipu.max(initial=0)), f"{step.kind} '{step.name}'")
        self.check_routes(program)
        self._prepared.add(program)
        return program

    def check_routes(self, program: ir.Program | ir.Node) -> None:
        """Route every inter-IPU transfer of the program before running it, so that a
        copy the topology cannot carry is an error naming its step, not a failure
        half-way through the run (``run`` calls it; an engine calls it at load).

        Raises
        ------
        LinkRoutingError
            A global exchange or collective between IPUs that the topology does not
            connect (or, with ``links.routing: false``, that are not neighbours).
        """
        program = ir.as_program(program)
        cfg = self.config
        tpi = cfg.tile.tiles_per_ipu
        replica_ipus = cfg.num_ipus // program.replicas
        topology = None
        for step in ir.iter_steps(program):
            if isinstance(step, ir.GlobalExchange):
                src, dst = (step.src_tile // tpi).tolist(), (step.dst_tile // tpi).tolist()
                pairs = set(zip(src, dst, strict=True))
                shifts = range(program.replicas) if step.replicated else range(1)
                pairs = {
                    (a + k * replica_ipus, b + k * replica_ipus) for a, b in pairs for k in shifts
                }
            elif isinstance(step, ir.Collective):
                pairs = set()
                for group in step.groups:
                    n = len(group)
                    for i in range(n if n > 1 else 0):
                        pairs.add((group[i], group[(i + 1) % n]))
                        if step.algorithm == "bidirectional_ring":
                            pairs.add((group[i], group[(i - 1) % n]))
            else:
                continue
            topology = topology or self.timing.topology
            for a, b in sorted(pairs):
                if a == b:
                    continue
                try:
                    topology.route(a, b)
                except IpusimError as exc:
                    raise type(exc)(f"{step.kind} step '{step.name}': {exc}") from None


class _Run:
    """State of one run: clocks, records, barriers, cached step costs."""

    def __init__(
        self, machine: Machine, program: ir.Program, data_plane: DataPlane, max_cycles: int | None
    ) -> None:
        cfg = machine.config
        self.machine = machine
        self.cfg = cfg
        self.program = program
        self.data_plane = data_plane
        self.max_cycles = max_cycles
        self.env = simpy.Environment()
        self.timing = machine.timing
        self._stock_timing = (
            getattr(type(self.timing), "tile_cycles", None) is TimingModel.tile_cycles
        )
        self.host_link = self.timing.host.link(self.env)
        self.remote_link = self.timing.remote.link(self.env) or self.host_link
        self.clock = np.zeros(cfg.num_tiles, np.int64)
        self.delays = self.timing.sync.delays()
        # the stock sync controller: release and clock moves in one compiled pass
        self._controller = type(self.timing.sync) is ControllerSync
        tpi = cfg.tile.tiles_per_ipu
        if cfg.sim.granularity == "tile":
            self.groups = [_Group(t, t // tpi, t, t + 1) for t in range(cfg.num_tiles)]
        else:
            self.groups = [_Group(i, i, i * tpi, (i + 1) * tpi) for i in range(cfg.num_ipus)]
        self.groups_per_ipu = len(self.groups) // cfg.num_ipus
        self.one_ipu = cfg.num_ipus == 1
        #: per group: (key part, expected groups, lo, hi) of its IPU's scope, then of
        #: the machine's (see _scope)
        self._scopes = [
            (
                (g.ipu, self.groups_per_ipu, g.ipu * tpi, (g.ipu + 1) * tpi),
                (-1, len(self.groups), 0, cfg.num_tiles),
            )
            for g in self.groups
        ]
        #: replicas of the program; steps name replica 0's tiles (see ir.Program)
        self.replicas = program.replicas
        self.replica_ipus = cfg.num_ipus // self.replicas
        self.replica_tiles = self.replica_ipus * tpi
        self._fabric: LinkFabric | None = None
        self._scope_tiles: dict[frozenset[int], np.ndarray] = {}
        self._flow_cache: dict[int, tuple[ir.GlobalExchange, Any]] = {}
        self._active_ipus: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        #: per step (by id): replica 0's costs repeated for every replica (_replicated)
        self._replicas_of: dict[int, tuple[ir.Step, np.ndarray, np.ndarray | None]] = {}
        #: record -> groups not yet done with it, for records whose per-tile array is
        #: their own (see _passed); per step (by id), the last final such array
        self.pending: dict[int, int] = {}
        self._final_cycles: dict[int, np.ndarray] = {}
        #: the items of the program's walk so far, shared by every group (see _walk)
        self.path: list[tuple[int, Any, int]] = []
        #: the error an effect or predicate raised, and the item of the path where
        #: every group stops because of it (see _group_main)
        self.failure: Exception | None = None
        self.stop_at = -1
        self.walker: Iterator[tuple[int, Any, int]] = iter(())
        self.step_total = 0
        self.block_total = 0
        self.blocks: dict[int, BlockRecord] = {}
        self.decision_count = [0] * len(self.groups)
        self.records: dict[int, StepRecord] = {}
        self.decisions: dict[int, _Decision] = {}
        self.decision_log: list[tuple[int, int]] = []
        self.entry = 0
        self.barriers: dict[tuple[int, int], _Barrier] = {}
        #: (stream, ipu) -> the prefetched transfer its next host-to-device copy uses
        self.prefetched: dict[tuple[str, int], _Prefetch] = {}

    # ------------------------------------------------------------------ driver
    def execute(self, root: ir.Node) -> Trace:
        start = time.perf_counter()
        self.walker = self._walk(root)
        procs = [self.env.process(self._group_main(g)) for g in self.groups]
        error: BaseException | None = None
        try:
            self.env.run(simpy.AllOf(self.env, procs))
        except (SimulationTimeout, RunAborted) as exc:
            error = exc
        if error is None and self.failure is not None:
            if not isinstance(self.failure, RunAborted):
                raise self.failure
            error = self.failure
        records = [self.records[k] for k in sorted(self.records)]
        previous_end = 0
        for rec in records:  # a step no tile took part in sits where the previous one ended
            if rec.first_cycle > rec.last_cycle:
                rec.first_cycle = rec.last_cycle = previous_end
            previous_end = rec.last_cycle
        trace = Trace(
            config_name=self.cfg.name,
            config_hash=self.machine.config_hash,
            clock_hz=self.cfg.tile.clock_hz,
            num_tiles=self.cfg.num_tiles,
            tiles_per_ipu=self.cfg.tile.tiles_per_ipu,
            records=records,
            tile_end_cycles=self.clock.copy(),
            host_seconds=time.perf_counter() - start,
            complete=error is None,
            entry=self.entry,
            decisions=list(self.decision_log),
            blocks=[self.blocks[k] for k in sorted(self.blocks)],
        )
        if isinstance(error, RunAborted):
            error.trace = trace
            raise error
        if error is not None:
            raise SimulationTimeout(str(error), trace) from None
        return trace

    def _group_main(self, g: _Group) -> Generator[simpy.Event, Any, None]:
        """Run the program's path (:meth:`_walk`) on the group's tiles.

        When an effect or a predicate raises (an ``Abort``, a failing vertex), the
        group stops there and every other group runs up to the same item, so the
        partial trace has every tile up to the failure and no effect after it; the
        run then raises the error. With ``max_cycles`` set, every group yields to its
        clock after each step, so that the first step to pass the limit in simulated
        time is the one reported.
        """
        path = self.path
        walker = self.walker
        local, sync, step, enter, leave = _LOCAL, _SYNC, _STEP, _ENTER, _EXIT
        limited = self.max_cycles is not None
        replayed = len(self.groups) > 1  # a lone group keeps no path: none replays it
        pending = self.pending
        i = 0
        while self.stop_at < 0 or i < self.stop_at:
            try:
                if replayed and i < len(path):
                    code, obj, n = path[i]
                else:  # this group leads: take the program one item further
                    item = next(walker, None)
                    if item is None:
                        return
                    if replayed:
                        path.append(item)
                    code, obj, n = item
                if code == local:
                    self._local_step(g, n, obj)
                elif code == sync:
                    event = self._sync(g, n, obj)
                    if event is not None:
                        yield event
                    if n in pending:
                        self._passed(n)
                elif code == step:
                    yield from self._step(g, n, obj)
                    if n in pending:
                        self._passed(n)
                elif code == enter:
                    self._enter_block(g, n, obj)
                elif code == leave:
                    self.blocks[n].cycles_to[g.lo : g.hi] = self.clock[g.lo : g.hi]
            except SimulationTimeout:
                raise
            except Exception as exc:
                if self.failure is None or i < self.stop_at:  # the earliest one counts
                    self.failure, self.stop_at = exc, i
                return
            i += 1
            if limited and code != enter and code != leave:
                end = self._group_end(g)
                if end > self.env.now:
                    yield self.env.timeout(end - self.env.now)

    # --------------------------------------------------------------- control
    def _walk(self, node: ir.Node) -> Iterator[tuple[int, Any, int]]:
        """The items every group runs, in order: ``(code, step or block, number)``.

        Control flow is global, so the program is walked once for all groups: the
        group furthest ahead takes the walk one item further and the others replay
        the items it recorded (:attr:`path`). Predicates are asked when that group
        reaches them, after the effects of every step before them.
        """
        numbered = self._numbered
        open_blocks: list[int] = []
        order = ir.ExecutionOrder(self.program, self._predicate, blocks=True)
        for item in order.visit(node):
            if type(item) is not tuple:
                yield numbered(item)
            elif item[0] == ir.BLOCK_ENTER:
                n = self.block_total
                self.block_total = n + 1
                open_blocks.append(n)
                yield (_ENTER, item[1], n)
            else:
                yield (_EXIT, None, open_blocks.pop())

    def _numbered(self, step: ir.Step) -> tuple[int, ir.Step, int]:
        n = self.step_total
        self.step_total = n + 1
        if isinstance(step, _LOCAL_STEPS):
            return (_LOCAL, step, n)
        return (_SYNC if isinstance(step, ir.Sync) else _STEP, step, n)

    def _predicate(self, predicate: int) -> int:
        """The data plane's value of a control predicate (asked once for all groups)."""
        value = int(self.data_plane.predicate(predicate))
        self.decision_log.append((int(predicate), value))
        return value

    def _enter_block(self, g: _Group, n: int, node: ir.Block) -> None:
        """Record the group's tile clocks at the start of block ``n``: the groups fill
        in their tiles of one shared record."""
        rec = self.blocks.get(n)
        if rec is None:
            nt = self.cfg.num_tiles
            rec = self.blocks[n] = BlockRecord(
                index=n,
                name=node.name,
                program_id=node.program_id,
                cycles_from=np.zeros(nt, np.int64),
                cycles_to=np.full(nt, -1, np.int64),
                node=node,
            )
        rec.cycles_from[g.lo : g.hi] = self.clock[g.lo : g.hi]

    def _decide(self, g: _Group, predicate: int) -> int:
        """Value of this group's next prefetch predicate; asked once for all groups.

        Only stream copies' prefetch predicates are numbered here (every group asks
        them in the same order); control-flow predicates are asked by the walk."""
        n = self.decision_count[g.index]
        self.decision_count[g.index] = n + 1
        decision = self.decisions.get(n)
        if decision is None:
            value = int(self.data_plane.predicate(predicate))
            decision = self.decisions[n] = _Decision(value, len(self.groups))
            self.decision_log.append((int(predicate), value))
        decision.pending -= 1
        if decision.pending == 0:
            del self.decisions[n]
        return decision.value

    # ------------------------------------------------------------------ steps
    def _record(self, n: int, step: ir.Step) -> StepRecord:
        """The (shared) record of step ``n``; the first group to reach the step makes
        it and applies the step's effect."""
        rec = self.records.get(n)
        if rec is None:
            rec = self._new_record(n, step)
            if step.effect is not None:
                self.data_plane.apply(step.effect)
        return rec

    def _local_step(self, g: _Group, n: int, step: ir.Compute | ir.Exchange) -> None:
        """A compute or on-chip exchange step: each tile adds its own cost.

        No other group reads these tiles' clocks before the next sync or link step, so
        the group yields to its clock only before a link step (:meth:`_step`), not after
        every step.
        """
        rec = self.records.get(n)
        if rec is None:
            rec = self._record(n, step)
        lo = g.lo
        if g.hi - lo == 1:  # one tile (granularity tile): plain integers
            clock = self.clock
            first = clock.item(lo)
            end = first + rec.tile_cycles.item(lo)
            clock[lo] = end
        else:
            first, end = _advance(self.clock[lo : g.hi], rec.tile_cycles[lo : g.hi])
        if self.one_ipu or self._ipu_takes_part(rec, g.ipu):
            if first < rec.first_cycle:
                rec.first_cycle = first
            if end > rec.last_cycle:
                rec.last_cycle = end
        if self.max_cycles is not None and end > self.max_cycles:
            self._timeout(n, step, end)

    def _step(self, g: _Group, n: int, step: ir.Step) -> Generator[simpy.Event, Any, None]:
        """A step that uses a shared link (stream copy, global exchange, collective).

        The group first yields to its latest tile's clock, so that groups meet the
        step in simulated-time order and the link sees each transfer when it really
        starts.
        """
        rec = self._record(n, step)
        end = self._group_end(g)
        if end > self.env.now:
            yield self.env.timeout(end - self.env.now)
        if isinstance(step, ir.StreamCopy):
            yield from self._stream_copy(g, n, rec, step)
        elif isinstance(step, ir.GlobalExchange):
            yield from self._global_exchange(g, n, rec, step)
        elif isinstance(step, ir.Collective):
            yield from self._collective_step(g, n, rec, step)
        self._check_end(g, n, step)

    def _check_end(self, g: _Group, n: int, step: ir.Step) -> None:
        if self.max_cycles is not None:
            end = self._group_end(g)
            if end > self.max_cycles:
                self._timeout(n, step, end)

    def _group_end(self, g: _Group) -> int:
        """The latest clock of the group's tiles."""
        if g.hi - g.lo == 1:
            return int(self.clock[g.lo])
        return int(self.clock[g.lo : g.hi].max())

    def _timeout(self, n: int, step: ir.Step, end: int) -> None:
        raise SimulationTimeout(
            f"the run passed max_cycles={self.max_cycles:,}: tile clock reached "
            f"{end:,} in {step.kind} step '{step.name}' (step {n}); hint: raise "
            "max_cycles or check for a loop that never ends"
        )

    def _new_record(self, n: int, step: ir.Step) -> StepRecord:
        active = None
        details = None
        tile_cycles = None
        if not self._stock_timing:  # a TimingModel subclass: its own tile_cycles
            tile_cycles = self.timing.tile_cycles(step)
            if tile_cycles is not None:
                details = self.timing.cost(step)
                active = getattr(details, "active_cycles", None)
        elif isinstance(step, _LOCAL_STEPS):  # what TimingModel.tile_cycles gives
            details = self.timing.cost(step)
            if isinstance(step, ir.Compute):
                tile_cycles = details.tile_cycles
                active = getattr(details, "active_cycles", None)
            else:
                tile_cycles = details.cycles
        if tile_cycles is not None:
            if self.replicas > 1:  # replica 0's costs are every replica's
                tile_cycles, active = self._replicated(step, tile_cycles, active)
        else:  # filled in as the step runs
            tile_cycles = np.zeros(self.cfg.num_tiles, np.int64)
            self.pending[n] = len(self.groups)
        rec = StepRecord(
            index=n,
            kind=step.kind,
            phase=step.phase,
            name=step.name,
            program_id=step.program_id,
            first_cycle=_NOT_STARTED,
            last_cycle=0,
            tile_cycles=tile_cycles,
            active_cycles=active,
            step=step,
            details=details,
        )
        self.records[n] = rec
        return rec

    def _passed(self, n: int) -> None:
        """A group is done with step ``n``, whose record has a per-tile array of its
        own; once every group is, the array is final and, when it equals the last final
        array of the same step, the record shares that one (a loop's later iterations
        then keep no array of their own)."""
        left = self.pending[n] - 1
        if left:
            self.pending[n] = left
            return
        del self.pending[n]
        rec = self.records[n]
        key = id(rec.step)  # the program, and so the step, lives as long as the run
        last = self._final_cycles.get(key)
        if last is not None and np.array_equal(last, rec.tile_cycles):
            rec.tile_cycles = last
        else:
            self._final_cycles[key] = rec.tile_cycles

    def _replicated(
        self, step: ir.Step, tile_cycles: np.ndarray, active: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """A local step's per-tile cycles and active cycles for every replica (made once
        per step, as its costs are)."""
        hit = self._replicas_of.get(id(step))
        if hit is None or hit[0] is not step:
            hit = (
                step,
                self._replicate(tile_cycles),
                None if active is None else self._replicate(active),
            )
            self._replicas_of[id(step)] = hit
        return hit[1], hit[2]

    def _ipu_takes_part(self, rec: StepRecord, ipu: int) -> bool:
        """Whether IPU ``ipu`` has a tile with cycles in a compute or exchange step.

        Only those IPUs place the step in time (its first and last cycle), so a step
        of one IPU is not stretched by another IPU's clock; a step with no cycles
        anywhere spans every IPU, as on a single IPU.
        """
        if self.one_ipu:  # a step with no cycles anywhere spans every IPU
            return True
        key = id(rec.tile_cycles)  # a local step's array is the same in every execution
        active = self._active_ipus.get(key)
        if active is None or active[0] is not rec.tile_cycles:
            cfg = self.cfg
            busy = rec.tile_cycles.reshape(cfg.num_ipus, cfg.tile.tiles_per_ipu).any(axis=1)
            if not busy.any():
                busy[:] = True
            active = self._active_ipus[key] = (rec.tile_cycles, busy)
        return bool(active[1][ipu])

    def _replicate(self, per_tile: np.ndarray) -> np.ndarray:
        """A per-tile array of replica 0 repeated for every replica."""
        return np.tile(np.asarray(per_tile)[: self.replica_tiles], self.replicas)

    @property
    def fabric(self) -> LinkFabric:
        """The IPU-Link fabric of this run (made on first use)."""
        if self._fabric is None:
            self._fabric = LinkFabric(self.env, self.timing.topology)
        return self._fabric

    def _machine_ipus(self, ipus: Any, replicated: bool = True) -> frozenset[int]:
        """Machine-wide IPUs of a scope given in replica-0 ids (every replica's copy)."""
        if ipus is None:
            return frozenset(range(self.cfg.num_ipus))
        if not replicated:
            return frozenset(int(i) for i in ipus)
        k = self.replica_ipus
        return frozenset(int(i) + r * k for i in ipus for r in range(self.replicas))

    def _tiles_of(self, ipus: frozenset[int]) -> np.ndarray:
        """Global tile ids of the IPUs ``ipus``, ascending (cached)."""
        tiles = self._scope_tiles.get(ipus)
        if tiles is None:
            tpi = self.cfg.tile.tiles_per_ipu
            tiles = np.concatenate(
                [np.arange(i * tpi, (i + 1) * tpi, dtype=np.int64) for i in sorted(ipus)]
            )
            self._scope_tiles[ipus] = tiles
        return tiles

    @staticmethod
    def _span(rec: StepRecord, start: np.ndarray, end: np.ndarray) -> None:
        if start.size:
            rec.first_cycle = min(rec.first_cycle, int(start.min()))
            rec.last_cycle = max(rec.last_cycle, int(end.max()))

    # ------------------------------------------------------------- collectives
    def _collective(
        self,
        g: _Group,
        key: tuple[int, int],
        expected: int,
        finish: Callable[[], Generator[simpy.Event, Any, None]],
    ) -> Generator[simpy.Event, Any, None]:
        """Wait until ``expected`` groups arrived; the last one runs ``finish``.

        Groups arrive in simulated-time order (each has yielded to its latest tile's
        clock), so when the last one arrives ``env.now`` is the latest clock in scope.
        """
        barrier = self._arrive(key, expected)
        if barrier is not None and barrier.arrived < expected:
            yield barrier.event
            return
        yield from finish()
        if barrier is not None:
            barrier.event.succeed()

    def _scope(self, g: _Group, ipu_only: bool) -> tuple[int, int, int, int]:
        """(key part, expected groups, lo, hi) of an IPU-wide or machine-wide scope."""
        return self._scopes[g.index][0 if ipu_only else 1]

    def _settle(self, rec: StepRecord, lo: int, hi: int, end: np.ndarray | int) -> None:
        """Move tiles ``lo:hi`` to ``end``, charging the difference to the record."""
        if hi <= lo:
            return
        if np.ndim(end) == 0:  # one end for every tile (a stream copy)
            end = np.full(hi - lo, int(end), np.int64)
        first, last = _move(self.clock[lo:hi], np.asarray(end, np.int64), rec.tile_cycles[lo:hi])
        rec.first_cycle = min(rec.first_cycle, first)
        rec.last_cycle = max(rec.last_cycle, last)

    def _settle_tiles(self, rec: StepRecord, tiles: np.ndarray, end: np.ndarray | int) -> None:
        """Move the tiles ``tiles`` to ``end``, charging the difference to the record."""
        start = self.clock[tiles]
        end = np.broadcast_to(np.asarray(end, np.int64), start.shape)
        rec.tile_cycles[tiles] = end - start
        self._span(rec, start, end)
        self.clock[tiles] = end

    def _sync(self, g: _Group, n: int, step: ir.Sync) -> simpy.Event | None:
        """Arrive at a sync; the event to wait for, or None when the group goes on.

        No wait in simulated time comes first: the release is worked out from the
        clocks of the tiles in scope alone, so the order of arrival does not matter.
        The last group to arrive releases every tile in scope.
        """
        rec = self.records.get(n)
        if rec is None:
            rec = self._record(n, step)
        kind = step.sync_kind
        if step.ipus is not None and kind != ir.SyncKind.HOST:
            scope = self._machine_ipus(step.ipus)
            if g.ipu not in scope:
                return None  # this IPU takes no part
            if kind == ir.SyncKind.EXTERNAL:  # the IPUs in scope only
                tiles = self._tiles_of(scope)
                barrier = self._arrive((n, -1), len(scope) * self.groups_per_ipu)
                if barrier is not None and barrier.arrived < barrier.expected:
                    return barrier.event
                release = self.timing.sync.release(
                    self.clock[tiles], self.delays[tiles], kind.value
                )
                self._settle_tiles(rec, tiles, release)
                self._leave(n, step, barrier)
                return None
        part, expected, lo, hi = self._scope(g, kind is ir.SyncKind.INTERNAL)
        barrier = self._arrive((n, part), expected)
        if barrier is not None and barrier.arrived < expected:
            return barrier.event
        self._sync_release(rec, kind, lo, hi)
        self._leave(n, step, barrier)
        return None

    def _arrive(self, key: tuple[int, int], expected: int) -> _Barrier | None:
        """Count a group in at barrier ``key`` (None when it is the only one)."""
        barrier = self.barriers.get(key)
        if barrier is None:
            if expected == 1:
                return None
            barrier = self.barriers[key] = _Barrier(self.env.event(), expected)
        barrier.arrived += 1
        if barrier.arrived == expected:
            del self.barriers[key]
        return barrier

    def _leave(self, n: int, step: ir.Step, barrier: _Barrier | None) -> None:
        """The last group to arrive at ``barrier``, having released the tiles in scope,
        lets the others go on (unless a release passed ``max_cycles``: the run ends
        here)."""
        if self.max_cycles is not None and self.records[n].last_cycle > self.max_cycles:
            self._timeout(n, step, self.records[n].last_cycle)
        if barrier is not None:
            barrier.event.succeed()

    def _sync_release(self, rec: StepRecord, kind: ir.SyncKind, lo: int, hi: int) -> None:
        """Release tiles ``lo:hi`` from a sync all of them have reached."""
        if self._controller and hi > lo:  # sync_release and _settle, fused
            extra = sync_extra_cycles(self.timing.sync.cfg, kind.value)
            first, last = _release(
                self.clock[lo:hi], self.delays[lo:hi], extra, rec.tile_cycles[lo:hi]
            )
            rec.first_cycle = min(rec.first_cycle, first)
            rec.last_cycle = max(rec.last_cycle, last)
        else:
            release = self.timing.sync.release(self.clock[lo:hi], self.delays[lo:hi], kind.value)
            self._settle(rec, lo, hi, release)

    def _stream_copy(
        self, g: _Group, n: int, rec: StepRecord, step: ir.StreamCopy
    ) -> Generator[simpy.Event, Any, None]:
        """A stream (or remote-buffer) copy: a collective of the IPU's tiles.

        Prefetch (``step.prefetch``): when the copy ends and the host had the data of
        the stream's next copy ready (the data plane's answer to the step's prefetch
        predicate, asked by every group in the same order), that data starts moving
        over the link in the background at once (with lower priority than the copies
        the tiles wait for). The next copy of the same stream on this IPU, if it moves
        as many bytes, waits only for what is left of that transfer (no new latency);
        otherwise it transfers its data itself.
        """
        part, expected, lo, hi = self._scope(g, True)
        demand = self.timing.cost(step)
        next_ready = step.prefetch
        if step.prefetch and step.prefetch_predicate is not None:
            next_ready = bool(self._decide(g, step.prefetch_predicate))
        of = g.ipu % self.replica_ipus  # every replica moves replica 0's bytes
        total, floor = int(demand.bytes_per_ipu[of]), int(demand.floor_cycles[of])
        if total == 0:  # nothing for this IPU: the step takes no time here
            return
        remote = isinstance(step, ir.RemoteBufferCopy)
        link = self.remote_link if remote else self.host_link
        ipu = g.ipu

        def finish() -> Generator[simpy.Event, Any, None]:
            begin = int(self.clock[lo:hi].max())
            ahead = self.prefetched.pop((step.stream, ipu), None) if step.prefetch else None
            if ahead is not None and ahead.num_bytes == total:
                yield ahead.done  # the transfer started at the previous copy's end
                end = max(int(np.ceil(self.env.now)), begin + floor)
                rec.details = _prefetched_ipus(rec.details, ipu)
            else:
                yield from link.transfer(total, ipu=ipu)
                end = max(int(np.ceil(self.env.now)), begin + demand.latency_cycles + floor)
            self._settle(rec, lo, hi, end)
            if next_ready:
                self.prefetched[(step.stream, ipu)] = _Prefetch(
                    total, self.env.process(self._transfer_at(link, end, total, ipu))
                )

        yield from self._collective(g, (n, part), expected, finish)

    def _transfer_at(
        self, link: Any, start: int, num_bytes: int, ipu: int
    ) -> Generator[simpy.Event, Any, None]:
        """A background transfer of ``num_bytes`` over ``link`` from cycle ``start``: it
        uses the link only while no copy the tiles wait for is in flight."""
        if start > self.env.now:
            yield self.env.timeout(start - self.env.now)
        yield from link.transfer(num_bytes, ipu=ipu, background=True)

    def _global_exchange(
        self, g: _Group, n: int, rec: StepRecord, step: ir.GlobalExchange
    ) -> Generator[simpy.Event, Any, None]:
        """Inter-IPU transfers on the shared IPU-Link fabric.

        The IPUs taking part (the transfers' ends, plus ``step.ipus``, in every
        replica) start together when the last arrives. Transfers are aggregated per
        (source IPU, destination IPU) pair and routed on the topology; the step ends
        for all of them when the last transfer has arrived, and lasts at least as long
        as its busiest tile needs at ``exchange.bytes_per_cycle`` plus the longest
        route's latency.
        """
        flows, ipus, floor = self._global_flows(step)
        if g.ipu not in ipus:
            return
        rec.details = self.timing.cost(step)
        tiles = self._tiles_of(ipus)

        def finish() -> Generator[simpy.Event, Any, None]:
            begin = int(self.clock[tiles].max())
            fabric = self.fabric
            latency = max((fabric.route_latency(r) for r, _ in flows), default=0)
            yield from fabric.transfer_all(flows)
            end = max(_ceil(self.env.now), begin + floor + latency)
            self._settle_tiles(rec, tiles, end)

        yield from self._collective(g, (n, -1), len(ipus) * self.groups_per_ipu, finish)

    def _global_flows(
        self, step: ir.GlobalExchange
    ) -> tuple[list[tuple[tuple[tuple[int, int], ...], int]], frozenset[int], int]:
        """(routed transfers per IPU pair over all replicas, IPUs taking part, tile floor)."""
        cached = self._flow_cache.get(id(step))
        if cached is not None and cached[0] is step:
            return cached[1]
        cfg = self.cfg
        tpi = cfg.tile.tiles_per_ipu
        src, dst, nbytes = step.src_tile, step.dst_tile, step.num_bytes
        src_ipu, dst_ipu = src // tpi, dst // tpi
        n = cfg.num_ipus
        key, inverse = np.unique(src_ipu * n + dst_ipu, return_inverse=True)
        pair_bytes = np.bincount(inverse.reshape(-1), weights=nbytes, minlength=key.size)
        pairs = [(int(k // n), int(k % n), int(b)) for k, b in zip(key, pair_bytes, strict=True)]
        shifts = (
            [0] if not step.replicated else [r * self.replica_ipus for r in range(self.replicas)]
        )
        topology = self.timing.topology
        flows = [
            (topology.route(a + s, b + s), nb)
            for s in shifts
            for a, b, nb in pairs
            if nb > 0 and a != b
        ]
        own = {int(i) for i in np.concatenate((src_ipu, dst_ipu))} | set(step.ipus or ())
        ipus = self._machine_ipus(sorted(own), step.replicated)
        sent = np.bincount(src, weights=nbytes, minlength=1)
        received = np.bincount(dst, weights=nbytes, minlength=1)
        busiest = max(float(sent.max(initial=0)), float(received.max(initial=0)))
        floor = math.ceil(busiest / cfg.exchange.bytes_per_cycle)
        result = (flows, ipus, floor)
        self._flow_cache[id(step)] = (step, result)
        return result

    def _collective_step(
        self, g: _Group, n: int, rec: StepRecord, step: ir.Collective
    ) -> Generator[simpy.Event, Any, None]:
        """A collective: its IPUs start together when the last arrives, each group runs
        its ring on the shared fabric (ipusim.exchange.collectives), and the step
        ends for every IPU taking part when the slowest ring has finished."""
        ipus = frozenset(step.ipus)
        if g.ipu not in ipus:
            return
        tiles = self._tiles_of(ipus)

        def finish() -> Generator[simpy.Event, Any, None]:
            begin = int(self.clock[tiles].max())
            if self.env.now < begin:
                yield self.env.timeout(begin - self.env.now)
            plans = [ring_plan(self.cfg, step, k) for k in range(len(step.groups))]
            topology, fabric = self.timing.topology, self.fabric
            procs = [self.env.process(run_ring(self.env, fabric, topology, p)) for p in plans]
            if procs:
                yield simpy.AllOf(self.env, procs)
            rec.details = {"begin": begin, "plans": plans}
            self._settle_tiles(rec, tiles, max(begin, _ceil(self.env.now)))

        yield from self._collective(g, (n, -1), len(ipus) * self.groups_per_ipu, finish)


@numba.njit(cache=True)
def _advance(clock, cycles):  # pragma: no cover - compiled
    """Add ``cycles`` to ``clock`` in place; (earliest start, latest end)."""
    first = clock[0]
    last = clock[0] + cycles[0]
    for t in range(clock.shape[0]):
        first = min(first, clock[t])
        clock[t] += cycles[t]
        last = max(last, clock[t])
    return first, last


@numba.njit(cache=True)
def _move(clock, end, spent):  # pragma: no cover - compiled
    """Move ``clock`` to ``end`` in place, ``spent`` the difference; (earliest start,
    latest end)."""
    first = clock[0]
    last = end[0]
    for t in range(clock.shape[0]):
        first = min(first, clock[t])
        last = max(last, end[t])
        spent[t] = end[t] - clock[t]
        clock[t] = end[t]
    return first, last


@numba.njit(cache=True)
def _release(clock, delays, extra, spent):  # pragma: no cover - compiled
    """The sync controller's release of tiles with clocks ``clock`` (the latest arrival
    plus ``extra``, plus each tile's delay), moving the clocks there in place, ``spent``
    the difference; (earliest arrival, latest release). Equal to
    :func:`~ipusim.sync.controller.sync_release` followed by :func:`_move`."""
    latest = clock[0]
    first = clock[0]
    for t in range(clock.shape[0]):
        latest = max(latest, clock[t])
        first = min(first, clock[t])
    last = latest + extra + delays[0]
    for t in range(clock.shape[0]):
        end = latest + extra + delays[t]
        last = max(last, end)
        spent[t] = end - clock[t]
        clock[t] = end
    return first, last


#: Steps whose cost each tile adds to its own clock (no collective).
_LOCAL_STEPS = (ir.Compute, ir.Exchange)
#: Codes of the items of a program's walk: a step of _LOCAL_STEPS, a sync, another
#: step, a block's start and end.
_LOCAL, _SYNC, _STEP, _ENTER, _EXIT = range(5)


#: ``first_cycle`` of a record no tile has entered yet.
_NOT_STARTED = int(np.iinfo(np.int64).max)


def _ceil(x: float) -> int:
    """``ceil`` that ignores float noise below a millionth of a cycle."""
    return math.ceil(round(float(x), 6))


def _prefetched_ipus(details: object, ipu: int) -> dict[str, list[int]]:
    """A stream copy record's details: the IPUs whose data had been prefetched."""
    ipus = list(details.get("prefetched_ipus", [])) if isinstance(details, dict) else []
    return {"prefetched_ipus": sorted({*ipus, ipu})}


__all__ = ["Machine"]
