"""Tile groups meeting at barriers: how the machine's SimPy processes sync.

A *tile group* (one IPU, or one tile with ``sim.granularity: tile``) is one SimPy
process. A sync, and every step on a shared link, is a *collective* of the groups in
its scope (an IPU, some IPUs, the machine): each group arrives at a barrier, and the
last to arrive works out the release for every tile in scope from their clocks alone,
so the order of arrival never changes a number. :class:`GroupBarriers` holds that part
of a run (:class:`ipusim.machine.Machine`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import simpy

from ipusim import ir
from ipusim.sync.controller import sync_extra_cycles
from ipusim.timing import TimingModel
from ipusim.trace import StepRecord

__all__ = [
    "Barrier",
    "GroupBarriers",
    "TileGroup",
]


@dataclass
class TileGroup:
    """Tiles ``lo:hi`` (global ids) of IPU ``ipu``, run by one SimPy process."""

    index: int
    ipu: int
    lo: int
    hi: int


@dataclass
class Barrier:
    """Where groups wait for the last of ``expected`` to arrive."""

    event: simpy.Event
    expected: int
    arrived: int = 0


class GroupBarriers:
    """Syncs and collectives of a run's tile groups (a part of the run's state).

    The run provides the attributes below; the methods count groups in at barriers,
    release the tiles in scope and charge their waits to the step's record.
    """

    env: simpy.Environment
    cfg: Any
    timing: TimingModel
    clock: np.ndarray
    delays: np.ndarray
    groups_per_ipu: int
    replicas: int
    replica_ipus: int
    max_cycles: int | None
    barriers: dict[tuple[int, int], Barrier]
    records: dict[int, StepRecord]
    _controller: bool
    _scopes: list[tuple[tuple[int, int, int, int], tuple[int, int, int, int]]]
    _scope_tiles: dict[frozenset[int], np.ndarray]
    _tile_scopes: dict[tuple[int, int], tuple[int, np.ndarray]]
    replica_tiles: int
    #: whether only replica 0's groups run (ipusim.machine_replicas, ReplicaSteps._lockstep)
    lockstep: bool
    _record: Callable[[int, ir.Step], StepRecord]
    _timeout: Callable[[int, ir.Step, int], None]

    def _machine_ipus(self, ipus: Any, replicated: bool = True) -> frozenset[int]:
        """Machine-wide IPUs of a scope given in replica-0 ids (every replica's copy)."""
        if ipus is None:
            return frozenset(range(self.cfg.num_ipus))
        if not replicated:
            return frozenset(int(i) for i in ipus)
        k = self.replica_ipus
        return frozenset(int(i) + r * k for i in ipus for r in range(self.replicas))

    def _simulated(self, ipus: frozenset[int]) -> frozenset[int]:
        """The IPUs of ``ipus`` whose groups run: all of them, or replica 0's in a run
        whose replicas go in lockstep (the others' take its clocks at the end)."""
        if not self.lockstep:
            return ipus
        return frozenset(i for i in ipus if i < self.replica_ipus)

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

    def _tile_scope(
        self, g: TileGroup, step: ir.Sync | ir.StreamCopy, machine_wide: bool
    ) -> tuple[int, int, np.ndarray] | None:
        """(key part, expected groups, global tiles) of a step that only some tiles take
        part in (``step.tiles``, replica 0's ids: every replica's copy of them, on the
        machine or on ``g``'s IPU only), or None when none of ``g``'s tiles do."""
        part = -1 if machine_wide else g.ipu
        found = self._tile_scopes.get((id(step), part))
        if found is None:
            tpi = self.cfg.tile.tiles_per_ipu
            copies = 1 if self.lockstep else self.replicas  # (replica 0's only in lockstep)
            replica = np.arange(copies, dtype=np.int64)[:, None] * self.replica_tiles
            tiles = (np.asarray(step.tiles, np.int64)[None, :] + replica).ravel()
            if not machine_wide:
                tiles = tiles[tiles // tpi == g.ipu]
            per_group = tpi // self.groups_per_ipu
            found = (int(np.unique(tiles // per_group).size), tiles)
            self._tile_scopes[(id(step), part)] = found
        expected, tiles = found
        lo, hi = np.searchsorted(tiles, (g.lo, g.hi))
        if hi <= lo:
            return None
        return part, expected, tiles

    @staticmethod
    def _span(rec: StepRecord, start: np.ndarray, end: np.ndarray) -> None:
        if start.size:
            rec.first_cycle = min(rec.first_cycle, int(start.min()))
            rec.last_cycle = max(rec.last_cycle, int(end.max()))

    # ------------------------------------------------------------- collectives
    def _collective(
        self,
        g: TileGroup,
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

    def _scope(self, g: TileGroup, ipu_only: bool) -> tuple[int, int, int, int]:
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

    def _sync(self, g: TileGroup, n: int, step: ir.Sync) -> simpy.Event | None:
        """Arrive at a sync; the event to wait for, or None when the group goes on.

        No wait in simulated time comes first: the release is worked out from the
        clocks of the tiles in scope alone, so the order of arrival does not matter.
        The last group to arrive releases every tile in scope.
        """
        rec = self.records.get(n)
        if rec is None:
            rec = self._record(n, step)
        kind = step.sync_kind
        if step.tiles is not None and kind != ir.SyncKind.EXTERNAL:  # some tiles only
            scope = self._tile_scope(g, step, kind is ir.SyncKind.HOST)
            if scope is None:
                return None  # none of this group's tiles take part
            part, expected, tiles = scope
            barrier = self._arrive((n, part), expected)
            if barrier is not None and barrier.arrived < expected:
                return barrier.event
            release = self.timing.sync.release(self.clock[tiles], self.delays[tiles], kind.value)
            self._settle_tiles(rec, tiles, release)
            self._leave(n, step, barrier)
            return None
        if step.ipus is not None and kind != ir.SyncKind.HOST:
            scope = self._machine_ipus(step.ipus)
            if g.ipu not in scope:
                return None  # this IPU takes no part
            if kind == ir.SyncKind.EXTERNAL:  # the IPUs in scope only
                running = self._simulated(scope)
                tiles = self._tiles_of(running)
                barrier = self._arrive((n, -1), len(running) * self.groups_per_ipu)
                if barrier is not None and barrier.arrived < barrier.expected:
                    return barrier.event
                release = self.timing.sync.release(
                    self.clock[tiles], self.delays[tiles], kind.value, tuple(sorted(scope))
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

    def _arrive(self, key: tuple[int, int], expected: int) -> Barrier | None:
        """Count a group in at barrier ``key`` (None when it is the only one)."""
        barrier = self.barriers.get(key)
        if barrier is None:
            if expected == 1:
                return None
            barrier = self.barriers[key] = Barrier(self.env.event(), expected)
        barrier.arrived += 1
        if barrier.arrived == expected:
            del self.barriers[key]
        return barrier

    def _leave(self, n: int, step: ir.Step, barrier: Barrier | None) -> None:
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
