"""The machine: SimPy tile groups executing a machine program.

A *tile group* is a set of tiles that runs the control program between syncs: one
group per IPU by default (``sim.granularity: ipu``) or one per tile
(``sim.granularity: tile``); both give the identical trace. Each group is a SimPy
process. Per-tile state (the local clock of every tile) is one numpy array; within a
step every tile's cost is computed for the whole machine at once and cached, so a
group only slices it. SimPy orders the groups in time and models the collectives
(syncs, stream copies, global exchanges) and the contention for the shared host link.

This module runs a program (:class:`Machine`, the walk and the local steps); the groups'
barriers and syncs are in :mod:`ipusim.machine_groups`, the steps over shared links in
:mod:`ipusim.machine_links`.
"""

from __future__ import annotations

import dataclasses
import sys
import time
import weakref
from collections.abc import Generator, Iterator
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
from ipusim.exchange.fabric import LinkFabric
from ipusim.host.link import check_copy_size
from ipusim.ir_validation import validate_program
from ipusim.machine_groups import Barrier, TileGroup
from ipusim.machine_links import LinkSteps, Prefetch
from ipusim.machine_replicas import (
    BLOCK_FROM,
    BLOCK_TO,
    KEPT_STEPS,
    RECORD,
    KeptArrays,
    ReplicaSteps,
    Segment,
    own_sync,
)
from ipusim.tile.compute import ComputeCost
from ipusim.tile.counted import CountedCompute, CountedComputeCost, execution_cycles
from ipusim.tile.memory_port import conflict_cycles, memory_floor_cycles, memory_may_bind
from ipusim.timing import BarrelCompute, ControllerSync, TimingModel
from ipusim.trace import BlockRecord, StepRecord, Trace


@dataclass
class _Decision:
    value: int
    pending: int


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
        #: a replicated program's step costs, kept from run to run (_Run._replicated,
        #: _Run._replica_cost): by step id, with the step (its id not reused while kept);
        #: read-only arrays shared by every run's records and by steps of equal costs
        self._replicas_of: dict[int, tuple[ir.Step, np.ndarray, np.ndarray | None]] = {}
        self._replicated_values = KeptArrays()
        self._replica_costs: dict[int, tuple[ir.Step, Any]] = {}
        #: per step (by id, with the step): the last final per-tile array of a record
        #: filled in as it ran (see _Run._passed), shared, read-only, by the records of
        #: later executions and runs that end with the same cycles; and arrays such
        #: records filled and then gave up, to be filled again (a fresh array of every
        #: tile's cycles costs its pages' first touch, about a tenth of a millisecond on
        #: a POD16's 23,552 tiles)
        self._final_cycles: dict[int, tuple[ir.Step, np.ndarray, bool]] = {}
        self._spare_cycles: list[np.ndarray] = []
        #: per read-only per-tile array of a local step (by id, with the array): which IPUs
        #: have a tile with cycles in it (_Run._ipu_takes_part), kept as the arrays are
        self._active_ipus: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        #: whether a replicated run whose replicas cannot differ runs replica 0's IPUs
        #: only (see ipusim.machine_replicas.ReplicaSteps._lockstep); False runs every
        #: IPU's group, for the same trace
        self.replica_lockstep = True
        #: per collective step (by id) and start time: the ring's plans and end when it
        #: ran alone on an idle fabric in lockstep (see LinkSteps._collective_step)
        self._rings: dict[tuple[int, float], tuple[ir.Step, Any, list, float]] = {}
        #: the end clocks of the last lockstep run's trace and its replica's tiles,
        #: shared by later ones that end alike (see ReplicaSteps._end_clocks); the
        #: stock sync delays, replicas and whether they are equal (_equal_delays)
        self._end_clocks: tuple[np.ndarray, int] | None = None
        self._equal_delays: tuple[np.ndarray, int, bool] | None = None
        self._symmetric_programs: weakref.WeakKeyDictionary[ir.Program, bool] = (
            weakref.WeakKeyDictionary()
        )

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
        try:
            return run.execute(program.entries[entry])
        finally:
            run.release()

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


class _Run(LinkSteps, ReplicaSteps):
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
            self.groups = [TileGroup(t, t // tpi, t, t + 1) for t in range(cfg.num_tiles)]
        else:
            self.groups = [TileGroup(i, i, i * tpi, (i + 1) * tpi) for i in range(cfg.num_ipus)]
        self.groups_per_ipu = len(self.groups) // cfg.num_ipus
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
        whole_ipus = self.groups_per_ipu == 1 and self._stock_timing and self._controller
        self.lockstep = self._lockstep(
            whole_ipus and max_cycles is None and machine.replica_lockstep
        )
        #: one IPU's group runs: every local step spans it (in lockstep with one IPU a
        #: replica, the other replicas' copies of a step's costs are replica 0's)
        self.one_ipu = cfg.num_ipus == 1 or (self.lockstep and self.replica_ipus == 1)
        self._fabric: LinkFabric | None = None
        self._scope_tiles: dict[frozenset[int], np.ndarray] = {}
        #: (step id, IPU or -1) -> (expected groups, tiles) of steps on some tiles only
        self._tile_scopes: dict[tuple[int, int], tuple[int, np.ndarray]] = {}
        self._flow_cache: dict[int, tuple[ir.GlobalExchange, Any]] = {}
        #: which IPUs take part in a local step's per-tile array: the machine's, kept
        #: from run to run, for read-only arrays; this run's own for the others
        self._active_ipus = machine._active_ipus
        self._run_active_ipus: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        #: per step (by id): replica 0's costs repeated for every replica (_replicated)
        self._replicas_of = machine._replicas_of
        #: per compute step (by id) of a replicated program: its cost on replica 0's
        #: tiles (_replica_cost); None when replicas are not costed apart
        self._replica_costs: dict[int, tuple[ir.Step, Any]] | None = None
        if self.replicas > 1 and type(self.timing.compute) is BarrelCompute:
            self._replica_costs = machine._replica_costs
        if len(self._replicas_of) + len(machine._replica_costs) > KEPT_STEPS:
            self._replicas_of.clear()
            machine._replica_costs.clear()
        if len(machine._final_cycles) > KEPT_STEPS:
            machine._final_cycles.clear()
        if len(machine._active_ipus) > KEPT_STEPS:
            machine._active_ipus.clear()
        #: record -> groups not yet done with it, for records whose per-tile array is
        #: their own (see _passed); per step, the last final such array (kept by the
        #: machine from run to run) and arrays to fill again
        self.pending: dict[int, int] = {}
        self._final_cycles = machine._final_cycles
        self._spare_cycles = machine._spare_cycles
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
        self.barriers: dict[tuple[int, int], Barrier] = {}
        #: (stream, ipu) -> the prefetched transfer its next host-to-device copy uses
        self.prefetched: dict[tuple[str, int], Prefetch] = {}
        #: segments a group ran, for the other replicas' copies of its IPU (see
        #: ipusim.machine_replicas)
        self._segments: dict[tuple[int, int], Segment] | None = self._segment_table(
            whole_ipus and max_cycles is None and not self.lockstep
        )

    # ------------------------------------------------------------------ driver
    def release(self) -> None:
        """Drop this finished run's state (records, clocks, cached costs, the SimPy
        environment and its processes).

        The environment's processes are generators of this run's methods, so the run,
        its environment and its processes refer to one another: a cycle that only the
        cyclic collector frees, and not at once: while every run of an engine froze the
        objects alive before it (:func:`poplar_api.graph_bulk.collect_new_objects_only`,
        now an engine's first run only), a previous run stayed in memory through the next
        one (1.9 GB of the peak of ResNet-50's 4-IPU training step). The trace returned
        keeps what it needs.
        """
        self.__dict__.clear()

    def execute(self, root: ir.Node) -> Trace:
        start = time.perf_counter()
        self.walker = self._walk(root)
        procs = [self.env.process(self._group_main(g)) for g in self.groups]
        error: BaseException | None = None
        try:
            self.env.run(simpy.AllOf(self.env, procs))
        except (SimulationTimeout, RunAborted) as exc:
            error = exc
        if self.lockstep:
            self._mirror_run()
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
            tile_end_cycles=self._end_clocks(),
            host_seconds=time.perf_counter() - start,
            complete=error is None,
            entry=self.entry,
            decisions=list(self.decision_log),
            blocks=[self.blocks[k] for k in sorted(self.blocks)],
            arch=self.cfg.arch,
        )
        if isinstance(error, RunAborted):
            error.trace = trace
            raise error
        if error is not None:
            raise SimulationTimeout(str(error), trace) from None
        return trace

    def _group_main(self, g: TileGroup) -> Generator[simpy.Event, Any, None]:
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
        segments = self._segments  # (None: every group runs every step itself)
        seg_start, seg_clock, seg_writes = -1, self.clock[:0], []
        i = 0
        while self.stop_at < 0 or i < self.stop_at:
            if segments is not None and seg_start < 0 and segments:
                # another replica ran the segment from these clocks: take its result
                j = self._take_segment(g, i)
                if j != i:
                    i = j
                    continue
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
                if segments is not None:
                    inside = code in (local, enter, leave)
                    if inside or (code == sync and own_sync(obj)):
                        if seg_start < 0:
                            seg_start, seg_clock, seg_writes = i, self.clock[g.lo : g.hi].copy(), []
                        if code != local:
                            seg_writes.append((_WRITES[code], n))
                    elif seg_start >= 0:
                        self._keep_segment(g, seg_start, seg_clock, seg_writes, i)
                        seg_start = -1
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

    def _enter_block(self, g: TileGroup, n: int, node: ir.Block) -> None:
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

    def _decide(self, g: TileGroup, predicate: int) -> int:
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
            if isinstance(step, CountedCompute):  # costed from what its effect counts
                return self._counted_record(n, step)
            rec = self._new_record(n, step)
            if step.effect is not None:
                self.data_plane.apply(step.effect)
        return rec

    def _counted_record(self, n: int, step: CountedCompute) -> StepRecord:
        """The record of a counted compute step: its effect runs first, and this
        execution is costed from what it counted (or, in a re-timed run, from the counts
        the data plane replays); with no counts, from the step's static cycles."""
        if step.effect is not None:
            self.data_plane.apply(step.effect)
        executions = step.counted.take()
        if not executions:
            replay = getattr(self.data_plane, "counted_executions", None)
            executions = list(replay(step)) if replay is not None else []
        if not executions:
            return self._new_record(n, step)
        cfg = self.cfg
        cycles = execution_cycles(cfg.counted, cfg.tile.worker_contexts, executions)
        rec = self._new_record(n, step, step.with_cycles(cycles))
        # the memory paths: a tile cannot move its counted bytes faster (tile.memory_port)
        floor = None
        if memory_may_bind(cfg.memory, cfg.counted):
            floor = memory_floor_cycles(cfg.memory, executions, step.vertex_tile, cfg.num_tiles)
            bound = floor if self.replicas == 1 else self._replicate(floor)
            if (bound > rec.tile_cycles).any():
                rec.tile_cycles = np.maximum(rec.tile_cycles, bound)
        # bank conflicts of dual-access instructions, where an architect asks (tile.banks)
        waits, placed = None, step.placement.data
        if cfg.memory.bank_conflicts and placed is not None:
            waits = conflict_cycles(cfg.memory, executions, step.vertex_tile, cfg.num_tiles, placed)
            if waits.any():
                rec.tile_cycles = rec.tile_cycles + (
                    waits if self.replicas == 1 else self._replicate(waits)
                )
        cost = rec.details
        if type(cost) is ComputeCost:
            if floor is not None:
                cost = dataclasses.replace(cost, tile_cycles=np.maximum(cost.tile_cycles, floor))
            if waits is not None:
                cost = dataclasses.replace(cost, tile_cycles=cost.tile_cycles + waits)
            rec.details = CountedComputeCost(
                tile_cycles=cost.tile_cycles,
                active_cycles=cost.active_cycles,
                inputs=cost.inputs,
                executions=tuple(executions),
            )
        return rec

    def _local_step(self, g: TileGroup, n: int, step: ir.Compute | ir.Exchange) -> None:
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
            cycles = rec.tile_cycles[lo : g.hi]
            if cycles.flags.writeable:  # a view: _advance has one, read-only, version
                cycles.flags.writeable = False
            first, end = _advance(self.clock[lo : g.hi], cycles)
        if self.one_ipu or self._ipu_takes_part(rec, g.ipu):
            if first < rec.first_cycle:
                rec.first_cycle = first
            if end > rec.last_cycle:
                rec.last_cycle = end
        if self.max_cycles is not None and end > self.max_cycles:
            self._timeout(n, step, end)

    def _step(self, g: TileGroup, n: int, step: ir.Step) -> Generator[simpy.Event, Any, None]:
        """A step that uses a shared link (stream copy, global exchange, collective).

        The group first yields to its latest tile's clock, so that groups meet the
        step in simulated-time order and the link sees each transfer when it really
        starts.
        """
        rec = self._record(n, step)
        end = self._group_end(g)
        if isinstance(step, ir.StreamCopy) and step.tiles is not None:
            # only some tiles (I/O tiles) take part: their clocks say when it starts
            local = np.arange(g.lo, g.hi) % self.replica_tiles  # replica 0's ids
            mine = self.clock[g.lo : g.hi][np.isin(local, step.tiles)]
            end = int(mine.max()) if mine.size else end
        if end > self.env.now:
            yield self.env.timeout(end - self.env.now)
        if isinstance(step, ir.StreamCopy):
            yield from self._stream_copy(g, n, rec, step)
        elif isinstance(step, ir.GlobalExchange):
            yield from self._global_exchange(g, n, rec, step)
        elif isinstance(step, ir.Collective):
            yield from self._collective_step(g, n, rec, step)
        self._check_end(g, n, step)

    def _check_end(self, g: TileGroup, n: int, step: ir.Step) -> None:
        if self.max_cycles is not None:
            end = self._group_end(g)
            if end > self.max_cycles:
                self._timeout(n, step, end)

    def _group_end(self, g: TileGroup) -> int:
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

    def _new_record(self, n: int, step: ir.Step, costed: ir.Step | None = None) -> StepRecord:
        """The record of step ``n``, costed as ``costed`` (a counted compute step's
        execution, costed once and not cached) or as the step itself."""
        active = None
        details = None
        tile_cycles = None
        once = costed is not None and costed is not step
        costed = step if costed is None else costed
        if not self._stock_timing:  # a TimingModel subclass: its own tile_cycles
            tile_cycles = self.timing.tile_cycles(costed)
            if tile_cycles is not None:
                details = self.timing.cost(costed)
                active = getattr(details, "active_cycles", None)
        elif not once and self._replica_costs is not None and (found := self._replica_cost(step)):
            details, tile_cycles, active = found  # (on replica 0's tiles)
        elif isinstance(step, _LOCAL_STEPS):  # what TimingModel.tile_cycles gives
            details = self.timing.compute.cost(costed) if once else self.timing.cost(step)
            if isinstance(step, ir.Compute):
                tile_cycles = details.tile_cycles
                active = getattr(details, "active_cycles", None)
            else:
                tile_cycles = details.cycles
        if tile_cycles is not None:
            if self.replicas > 1 and once:  # this execution's costs, for every replica
                tile_cycles = self._replicate(tile_cycles)
                tile_cycles.flags.writeable = False  # as every local step's: one _advance
                active = None if active is None else self._replicate(active)
            elif self.replicas > 1:  # replica 0's costs are every replica's
                tile_cycles, active = self._replicated(step, tile_cycles, active)
        else:  # filled in as the step runs (in lockstep, replica 0's part: _mirror_run)
            if self._spare_cycles and not self.lockstep:
                tile_cycles = self._spare_cycles.pop()
                tile_cycles[...] = 0
            else:
                tile_cycles = np.zeros(self._pending_size, np.int64)
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
        hit = self._final_cycles.get(id(rec.step))  # (the entry keeps its step alive)
        if hit is not None and hit[0] is rec.step and self._same_final(hit, rec.tile_cycles):
            own, rec.tile_cycles = rec.tile_cycles, hit[1]
            self._spare(own)
        else:
            rec.tile_cycles.flags.writeable = False  # final, and maybe shared from now
            self._final_cycles[id(rec.step)] = (rec.step, rec.tile_cycles, self.lockstep)

    def _spare(self, own: np.ndarray) -> None:
        """Keep a record's array it gave up for a later record to fill, when nothing
        else refers to it (no view, no cache: the references counted are the caller's
        and this call's)."""
        if (
            len(self._spare_cycles) < _SPARE_ARRAYS
            and own.base is None
            and own.size == self.cfg.num_tiles
            and sys.getrefcount(own) <= _OWN_REFERENCES
        ):
            self._spare_cycles.append(own)


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


#: Steps whose cost each tile adds to its own clock (no collective).
_LOCAL_STEPS = (ir.Compute, ir.Exchange)
#: Codes of the items of a program's walk: a step of _LOCAL_STEPS, a sync, another
#: step, a block's start and end.
_LOCAL, _SYNC, _STEP, _ENTER, _EXIT = range(5)
#: What an item of a segment writes besides the clocks (see _group_main).
_WRITES = {_SYNC: RECORD, _ENTER: BLOCK_FROM, _EXIT: BLOCK_TO}


#: Arrays given up by records kept for later records to fill, at most.
_SPARE_ARRAYS = 256


def _references(own: np.ndarray) -> int:
    # called as Machine._spare calls getrefcount: one frame's name, one parameter
    return sys.getrefcount(own)


def _unshared_references() -> int:
    # what getrefcount reports for an array held by a caller's name and a parameter only,
    # as _passed and _spare hold a record's array: measured, not assumed, since
    # interpreters differ in the references they count (borrowed stack references)
    held = np.zeros(1)
    return _references(held)


#: References to an array given up by a record when only _passed and _spare hold it.
_OWN_REFERENCES = _unshared_references()

#: ``first_cycle`` of a record no tile has entered yet.
_NOT_STARTED = int(np.iinfo(np.int64).max)


__all__ = ["Machine"]
