"""Replicated programs on the machine: a step's costs on replica 0's tiles, repeated
for every replica and kept from run to run, and the stretches of a program that every
replica's IPU runs alike, run once (a part of a run's state,
:class:`ipusim.machine.Machine`).

A replicated program's steps name replica 0's tiles (see :class:`ipusim.ir.Program`);
every replica runs the same steps on its own IPUs, so a local step's per-tile costs are
replica 0's repeated.

Between two items of the program's walk where an IPU meets others or a shared link (a
sync beyond the IPU, a stream copy, a global exchange, a collective), an IPU's group
runs a *segment*: compute sets and on-chip exchanges (each tile adds its own cost),
syncs of its own tiles and block marks. What a segment does to the IPU's tile clocks
and to its slices of the records depends only on the clocks it starts from and on the
steps' per-tile costs, which are the same on every replica's copy of an IPU; and no
group waits in simulated time inside one (no SimPy event). So the first group to run
a segment keeps what it did (:class:`Segment`), and every other replica's copy of that
IPU reaching the segment with the same tile clocks takes the result instead of running
it step by step: the same clocks, records and SimPy events, without the Python of
every step on every IPU. A group whose clocks differ (the host links or the fabric
ended its last copy at another time) runs the segment itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numba
import numpy as np

from ipusim import ir
from ipusim.exchange.internal import ExchangeCost
from ipusim.host.link import HostLink, HostLinks, StreamingMemoryLinks
from ipusim.tile.compute import ComputeCost, compute_cost
from ipusim.timing import PhaseExchange, SharedArrays, StaticExchange
from ipusim.trace import ReplicaRecord, StepRecord

__all__ = [
    "BLOCK_FROM",
    "BLOCK_TO",
    "KEPT_BYTES",
    "KEPT_STEPS",
    "RECORD",
    "KeptArrays",
    "ReplicaSteps",
    "Segment",
    "own_sync",
]

#: What a segment wrote besides the clocks: a record's per-tile cycles, a block's
#: clocks at its start, at its end.
RECORD, BLOCK_FROM, BLOCK_TO = range(3)


@dataclass
class Segment:
    """What one group did from item ``start`` of the walk up to item ``end``.

    Attributes
    ----------
    end
        The item after the segment (it involves other groups or a link).
    clock_in, clock_out
        The group's tile clocks when the segment started and ended.
    writes
        ``(what, number, values)``: the group's slice of record ``number``'s per-tile
        cycles (a sync of its tiles), or of block ``number``'s clocks at start or end.
    left
        Groups (other replicas' copies of the IPU) still to reach the segment.
    """

    end: int
    clock_in: np.ndarray
    clock_out: np.ndarray
    writes: list[tuple[int, int, np.ndarray]] = field(default_factory=list)
    left: int = 0


def own_sync(step: ir.Sync) -> bool:
    """Whether a sync involves only the tiles of the IPU that reaches it (an internal
    sync of all its tiles): part of a segment."""
    return step.sync_kind is ir.SyncKind.INTERNAL and step.tiles is None and step.ipus is None


class ReplicaSteps:
    """Costs of a replicated run's steps (the run provides the attributes below)."""

    cfg: Any
    one_ipu: bool
    replicas: int
    replica_tiles: int
    lockstep: bool
    _replicas_of: dict[int, tuple[ir.Step, np.ndarray, np.ndarray | None]]
    _replica_costs: dict[int, tuple[ir.Step, Any]] | None
    #: the stock exchange model on a machine of one replica's IPUs, made when first
    #: needed (False: the run's exchange model is not a stock one)
    _exchange_apart: Any = None
    timing: Any
    _active_ipus: dict[int, tuple[np.ndarray, np.ndarray]]
    _run_active_ipus: dict[int, tuple[np.ndarray, np.ndarray]]
    clock: np.ndarray
    delays: np.ndarray
    replica_ipus: int
    stop_at: int
    _segments: dict[tuple[int, int], Segment] | None
    pending: dict[int, int]
    records: dict[int, StepRecord]
    blocks: dict[int, Any]
    _passed: Any
    machine: Any
    program: ir.Program
    groups: list[Any]
    _scopes: list[tuple[tuple[int, int, int, int], tuple[int, int, int, int]]]
    host_link: Any
    remote_link: Any

    def _segment_table(self, shared: bool) -> dict[tuple[int, int], Segment] | None:
        """An empty table of segments by (first item, IPU within the replica), or None
        when groups do not share segments: one replica, a group other than a whole IPU,
        a timing model or sync model of the user's (their costs need not repeat per
        replica), ``max_cycles`` (every group yields after each step), or sync delays
        that differ between the replicas' copies of a tile (``shared`` says whether
        the run allows it)."""
        if not shared or self.replicas == 1 or not self._equal_delays():
            return None
        return {}

    def _lockstep(self, allowed: bool) -> bool:
        """Whether the replicas go in lockstep, and if so keep only replica 0's groups.

        Every replica runs the same walk (control flow is global) and the same local
        steps (replica 0's costs, :meth:`_replicated`); they stay in lockstep, every
        replica's copy of a tile at replica 0's clock, when nothing that meets several
        replicas treats them differently: the sync delays of every replica's copy of a
        tile are equal, every host and Streaming Memory link carries the same IPUs of
        each replica (links shared processor-fairly finish equal transfers started
        together at the same exact time), every global exchange is replicated, every
        collective's IPUs are each replica's copy of the same IPUs (both end at one
        cycle for all their IPUs), and the stock syncs (a release from the latest
        arrival in scope) and no ``max_cycles``. Then only replica 0's groups run: a
        step that meets other replicas counts replica 0's copies in and releases
        theirs, while every replica's transfers still load the links and the fabric;
        the other replicas' clocks and blocks are replica 0's, copied when the run ends
        (:meth:`_mirror_run`), and a record holds replica 0's part of its per-tile
        arrays, which makes every replica's when a reader asks
        (:class:`~ipusim.trace.ReplicaRecord`).
        ``allowed`` is what the run allows (whole-IPU groups, stock timing and syncs,
        no ``max_cycles``, ``Machine.replica_lockstep``).
        """
        if not allowed or self.replicas == 1 or not self._equal_delays():
            return False
        ri, ipus = self.replica_ipus, self.cfg.num_ipus
        if not (_symmetric(self.host_link, ri, ipus) and _symmetric(self.remote_link, ri, ipus)):
            return False
        if not _program_symmetric(self.machine, self.program, ri, ipus):
            return False
        self.groups = self.groups[:ri]
        self._scopes = [(own, (-1, ri, 0, self.replica_tiles)) for own, _ in self._scopes[:ri]]
        return True

    def _equal_delays(self) -> bool:
        """Whether every replica's copy of a tile has the same sync delay. Asked only
        of the stock sync controller's delays (a run allows lockstep or shared segments
        with it only), a fixed array of the machine's config: the answer is kept by the
        machine, so that a later run does not read a POD16's 23,552 delays again."""
        kept = self.machine._equal_delays
        if kept is not None and kept[0] is self.delays and kept[1] == self.replicas:
            return kept[2]
        delays = np.asarray(self.delays).reshape(self.replicas, -1)
        found = bool((delays == delays[0]).all())
        self.machine._equal_delays = (self.delays, self.replicas, found)
        return found

    @property
    def _pending_size(self) -> int:
        """Tiles of a record's per-tile array filled in as its step runs: replica 0's
        in lockstep (the groups that run are its), else every tile's."""
        return self.replica_tiles if self.lockstep else self.cfg.num_tiles

    def _mirror(self, per_tile: np.ndarray) -> None:
        """Copy replica 0's part of a per-tile array into every other replica's (none
        for an array of replica 0's tiles only: a record's part in lockstep)."""
        if per_tile.size != self.replica_tiles:
            per_tile.reshape(self.replicas, -1)[1:] = per_tile[: self.replica_tiles]

    def _same_final(self, final: tuple[ir.Step, np.ndarray, bool], own: np.ndarray) -> bool:
        """Whether a record's per-tile array ``own``, just filled in, equals the last
        final array of its step (``final``: the step, the array, whether every replica's
        part of it is replica 0's).

        In lockstep ``own`` holds replica 0's tiles only (every replica's are its, see
        :meth:`_replicated`), and is compared with a final array of the same kind (of a
        run in lockstep, a sixteenth of a POD16's tiles); an array of every tile (a run
        not in lockstep) is not shared with it.
        """
        if not self.lockstep:
            return bool(np.array_equal(final[1], own))
        return final[2] and final[1].size == own.size and bool(np.array_equal(final[1], own))

    def _mirror_run(self) -> None:
        """At the end of a lockstep run: every replica's blocks are replica 0's (and its
        clocks, in the trace's copy: :meth:`_end_clocks`), and a record holding replica
        0's part of its per-tile arrays becomes a :class:`~ipusim.trace.ReplicaRecord`
        of them, which makes every replica's array when a reader asks for it."""
        for block in self.blocks.values():
            self._mirror(block.cycles_from)
            self._mirror(block.cycles_to)
        rt, records = self.replica_tiles, self.records
        whole = None
        for n, rec in records.items():
            if rec.tile_cycles.size == rt:
                if whole is None:
                    whole = Whole.of(self.machine, self.replicas)
                records[n] = ReplicaRecord.of(rec, whole)

    def _end_clocks(self) -> np.ndarray:
        """Every tile's clock at the end of the run, for its trace: a copy of the clocks,
        or in lockstep the machine's last copy made in lockstep (read-only) with as many
        replicas when replica 0's part equals this run's (every replica's clocks are
        replica 0's). A run of the same program ends with the same clocks, and the
        traces an engine keeps would otherwise each hold fresh pages of every replica's
        clocks (188 KB of a POD16's, about 46 first touches a run)."""
        clock, rt = self.clock, self.replica_tiles
        if not self.lockstep:
            return clock.copy()
        kept = self.machine._end_clocks
        same = kept is not None and kept[1] == rt and kept[0].size == clock.size
        if same and _equal(kept[0][:rt], clock[:rt]):
            return kept[0]
        self._mirror(clock)
        ends = clock.copy()
        ends.flags.writeable = False
        self.machine._end_clocks = (ends, rt)
        return ends

    def _keep_segment(
        self, g: Any, start: int, clock_in: np.ndarray, writes: list, end: int
    ) -> None:
        """Keep what group ``g`` did from item ``start`` to ``end`` (its clocks now)."""
        key = (start, g.ipu % self.replica_ipus)
        if key in self._segments:
            return
        lo, hi = g.lo, g.hi
        kept = []
        for what, n in writes:
            if what == RECORD:
                values = self.records[n].tile_cycles[lo:hi]
            elif what == BLOCK_FROM:
                values = self.blocks[n].cycles_from[lo:hi]
            else:
                values = self.blocks[n].cycles_to[lo:hi]
            kept.append((what, n, values.copy()))
        out = self.clock[lo:hi].copy()
        self._segments[key] = Segment(end, clock_in, out, kept, self.replicas - 1)

    def _take_segment(self, g: Any, start: int) -> int:
        """Apply the kept segment starting at item ``start`` to group ``g`` when its
        clocks are those it started from: the item after it, else ``start``."""
        key = (start, g.ipu % self.replica_ipus)
        seg = self._segments.get(key)
        if seg is None:
            return start
        seg.left -= 1
        if seg.left <= 0:
            del self._segments[key]
        if 0 <= self.stop_at < seg.end:  # a failure inside it: run up to it step by step
            return start
        lo, hi = g.lo, g.hi
        clock = self.clock[lo:hi]
        if not np.array_equal(clock, seg.clock_in):
            return start
        clock[...] = seg.clock_out
        for what, n, values in seg.writes:
            if what == RECORD:
                self.records[n].tile_cycles[lo:hi] = values
                if n in self.pending:
                    self._passed(n)
            elif what == BLOCK_FROM:
                self.blocks[n].cycles_from[lo:hi] = values
            else:
                self.blocks[n].cycles_to[lo:hi] = values
        return seg.end

    def _replica_cost(
        self, step: ir.Step
    ) -> tuple[ComputeCost | ExchangeCost, np.ndarray, np.ndarray | None] | None:
        """A local step's cost on replica 0's tiles only, with its per-tile cycles and
        active cycles (kept per step), or None for a step not costed so.

        A compute step's vertices are on replica 0's tiles, and a tile's cycles depend
        on its own vertices only, so a replicated program assigns its vertices once,
        not on every replica's tiles. An on-chip exchange whose tiles are all replica
        0's is costed by the stock exchange model on a machine of one replica's IPUs
        (:meth:`_exchange_cost`): every tile of replica 0 takes what it takes on the
        whole machine (a tile's cost depends on its own transfers, an IPU's phase on its
        own tiles), and the machine reads only replica 0's part of the per-tile cycles
        (:meth:`_replicated`); a record's totals (``details``) then cover replica 0's
        tiles, the only ones with traffic. Costing over every replica's tiles made
        and kept an array of the whole machine's tiles per exchange."""
        costs = self._replica_costs
        assert costs is not None
        if not isinstance(step, ir.Compute | ir.Exchange):
            return None
        hit = costs.get(id(step))
        if hit is not None and hit[0] is step:
            return hit[1]
        if isinstance(step, ir.Compute):
            cost = compute_cost(
                self.cfg.tile, self.replica_tiles, step.vertex_tile, step.vertex_cycles,
                step.vertex_multi,
            )  # fmt: skip
            found = (cost, cost.tile_cycles, cost.active_cycles)
        else:
            exchange = self._exchange_cost(step)
            found = None if exchange is None else (exchange, exchange.cycles, None)
        costs[id(step)] = (step, found)
        return found

    def _exchange_cost(self, step: ir.Exchange) -> ExchangeCost | None:
        """:meth:`_replica_cost` of an on-chip exchange: None when the run's exchange
        model is not a stock one or a tile of the step is not replica 0's."""
        model = self._exchange_apart
        if model is None:
            kind = type(self.timing.exchange)
            if kind in (StaticExchange, PhaseExchange):
                one = self.cfg.model_copy(update={"num_ipus": self.replica_ipus})
                model = kind(one)
            else:
                model = False
            self._exchange_apart = model
        if model is False:
            return None
        lists = (step.src_tile, step.dst_tile) if step.tile is None else (step.tile,)
        for tiles in lists:
            tiles = np.asarray(tiles)
            if tiles.size and (int(tiles.min()) < 0 or int(tiles.max()) >= self.replica_tiles):
                return None
        return model.cost(step)

    def _replicated(
        self, step: ir.Step, tile_cycles: np.ndarray, active: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray | None]:
        """A local step's per-tile cycles and active cycles for every replica (made once
        per step, as its costs are); in lockstep, replica 0's part of them only, read
        only and shared by steps of equal costs (the groups that run are replica 0's,
        and the record of a run in lockstep makes every replica's array from it when
        a reader asks: :meth:`_mirror_run`)."""
        size = self.replica_tiles if self.lockstep else self.cfg.num_tiles
        hit = self._replicas_of.get(id(step))
        if hit is None or hit[0] is not step or hit[1].size != size:
            made = self._replica_part if self.lockstep else self._replicated_array
            hit = (step, made(tile_cycles), None if active is None else made(active))
            self._replicas_of[id(step)] = hit
        return hit[1], hit[2]

    def _replica_part(self, per_tile: np.ndarray) -> np.ndarray:
        """Replica 0's part of ``per_tile``, read-only, one array per contents
        (:meth:`KeptArrays.part`, the table :meth:`_replicated_array` uses)."""
        return self.machine._replicated_values.part(
            np.asarray(per_tile)[: self.replica_tiles].view()
        )

    def _replicated_array(self, per_tile: np.ndarray) -> np.ndarray:
        """:meth:`_replicate` of ``per_tile``, read-only, made once per contents of
        replica 0's part: steps of equal costs share one array, as their replica 0's
        costs are shared (:class:`~ipusim.timing.SharedArrays`). A fresh array of every
        tile's values costs its pages' first touch, about a tenth of a millisecond on a
        POD16's 23,552 tiles, and the arrays are kept with the trace."""
        kept = self.machine._replicated_values
        first = kept.part(np.asarray(per_tile)[: self.replica_tiles].view())
        whole = kept.whole(first)  # (an equal part met before, else this one)
        if whole is None:
            whole = kept.keep(first, _read_only(self._replicate(first)))
        return whole

    def _ipu_takes_part(self, rec: StepRecord, ipu: int) -> bool:
        """Whether IPU ``ipu`` has a tile with cycles in a compute or exchange step.

        Only those IPUs place the step in time (its first and last cycle), so a step
        of one IPU is not stretched by another IPU's clock; a step with no cycles
        anywhere spans every IPU, as on a single IPU. Found once per per-tile array: a
        read-only array (a local step's, the same in every execution and run) in the
        machine's table, kept from run to run, any other in this run's.
        """
        if self.one_ipu:  # one IPU runs (see _Run.one_ipu): it places every step
            return True
        cycles = rec.tile_cycles  # (in lockstep, replica 0's IPUs' part: theirs run)
        table = self._run_active_ipus if cycles.flags.writeable else self._active_ipus
        active = table.get(id(cycles))
        if active is None or active[0] is not cycles:
            busy = cycles.reshape(-1, self.cfg.tile.tiles_per_ipu).any(axis=1)
            if not busy.any():
                busy[:] = True
            active = table[id(cycles)] = (cycles, busy)
        return bool(active[1][ipu])

    def _replicate(self, per_tile: np.ndarray) -> np.ndarray:
        """A per-tile array of replica 0 repeated for every replica (one broadcast copy:
        ``np.tile`` goes through ``repeat``, several times slower on 23,552 tiles)."""
        first = np.asarray(per_tile)[: self.replica_tiles]
        out = np.empty((self.replicas, first.size), first.dtype)
        out[...] = first
        return out.reshape(-1)


def _symmetric(link: Any, replica_ipus: int, ipus: int) -> bool:
    """Whether a link model treats every replica alike: one link for the machine, or
    links of ``ipus_per_link`` IPUs each, all full, each holding whole replicas or a
    part of one (then every link carries the same IPUs of each replica)."""
    if type(link) is HostLink:
        return True
    if type(link) not in (HostLinks, StreamingMemoryLinks):
        return False
    per_link = link.ipus_per_link
    return ipus % per_link == 0 and (per_link % replica_ipus == 0 or replica_ipus % per_link == 0)


def _program_symmetric(machine: Any, program: ir.Program, replica_ipus: int, ipus: int) -> bool:
    """Whether every global exchange of ``program`` is replicated and every collective's
    IPUs are each replica's copy of the same IPUs (kept per program by the machine)."""
    kept = machine._symmetric_programs
    found = kept.get(program)
    if found is None:
        found = True
        for step in ir.iter_steps(program):
            if isinstance(step, ir.GlobalExchange) and not step.replicated:
                found = False
            elif isinstance(step, ir.Collective):
                own = set(step.ipus)
                found = own == {(i + k) % ipus for i in own for k in range(0, ipus, replica_ipus)}
            if not found:
                break
        kept[program] = found
    return found


#: Steps whose replicated costs a machine keeps from run to run, at most.
KEPT_STEPS = 1 << 14
#: Bytes of every replica's arrays a machine keeps from run to run, at most (a
#: thousand arrays over a POD64's 94,208 tiles, say).
KEPT_BYTES = 1 << 30


class KeptArrays:
    """A machine's replicated per-tile arrays, kept from run to run: replica 0's parts,
    one array per contents (:class:`~ipusim.timing.SharedArrays`), and every replica's
    array made from each part, shared by every record and cost of that part.

    They live as long as the machine, so they are bounded: past :data:`KEPT_STEPS`
    parts or arrays, or :data:`KEPT_BYTES` bytes of every replica's arrays (another
    program's, say), all are let go, and the runs after make them again.
    """

    __slots__ = ("made", "nbytes", "parts")

    def __init__(self) -> None:
        self.parts = SharedArrays()
        self.made: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self.nbytes = 0

    def part(self, values: np.ndarray) -> np.ndarray:
        """``values``, or an equal part met before; read-only."""
        if len(self.parts) >= KEPT_STEPS:
            self.parts = SharedArrays()
        return self.parts.get(values)

    def whole(self, part: np.ndarray) -> np.ndarray | None:
        """Every replica's array kept for ``part`` (the same object), or None."""
        hit = self.made.get(id(part))
        return hit[1] if hit is not None and hit[0] is part else None

    def keep(self, part: np.ndarray, whole: np.ndarray) -> np.ndarray:
        """Keep ``whole`` as every replica's array of ``part``; returns ``whole``."""
        if len(self.made) >= KEPT_STEPS or self.nbytes + whole.nbytes > KEPT_BYTES:
            self.made.clear()
            self.nbytes = 0
        self.made[id(part)] = (part, whole)
        self.nbytes += whole.nbytes
        return whole


class Whole:
    """Every replica's per-tile array from replica 0's part (:class:`~ipusim.trace.
    ReplicaRecord`'s ``whole``), read-only, made once per part that is final (read
    only) and shared by every record of it, kept by the machine with its replicated
    costs (:class:`KeptArrays`)."""

    __slots__ = ("kept", "replicas")

    def __init__(self, kept: KeptArrays, replicas: int) -> None:
        self.kept = kept
        self.replicas = replicas

    @classmethod
    def of(cls, machine: Any, replicas: int) -> Whole:
        """The arrays ``machine`` keeps (shared with its replicated costs,
        :meth:`ReplicaSteps._replicated_array`)."""
        return cls(machine._replicated_values, replicas)

    def __call__(self, part: np.ndarray) -> np.ndarray:
        whole = self.kept.whole(part)
        if whole is not None:
            return whole
        out = np.empty((self.replicas, part.size), part.dtype)
        out[...] = part
        whole = _read_only(out.reshape(-1))
        if not part.flags.writeable:  # (a part still written is not kept)
            self.kept.keep(part, whole)
        return whole


@numba.njit(cache=True)
def _equal(a, b):  # pragma: no cover - compiled
    """Whether int64 arrays ``a`` and ``b`` of one size are equal element for element."""
    for i in range(a.shape[0]):  # noqa: SIM110 (a loop Numba compiles)
        if a[i] != b[i]:
            return False
    return True


def _read_only(values: np.ndarray) -> np.ndarray:
    values.flags.writeable = False
    return values
