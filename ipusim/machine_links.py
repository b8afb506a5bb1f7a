"""Steps over shared links: host stream copies, IPU-Link exchanges and collectives.

Each such step is a collective of the tile groups taking part
(:class:`~ipusim.machine_groups.GroupBarriers`): the last group to arrive moves the
data over the SimPy model of the link (the host link, Streaming Memory, or the IPU-Link
fabric, where transfers of different steps contend) and releases the tiles when the data
has arrived. :class:`LinkSteps` holds that part of a run (:class:`ipusim.machine.Machine`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from ipusim import ir
from ipusim.exchange.collectives import ring_plan, run_ring
from ipusim.exchange.fabric import LinkFabric
from ipusim.exchange.links import global_tile_cycles, link_overhead_bytes
from ipusim.host.link import host_work_cycles
from ipusim.machine_groups import GroupBarriers, TileGroup
from ipusim.machine_replicas import KEPT_STEPS
from ipusim.trace import StepRecord

__all__ = [
    "LinkSteps",
    "Prefetch",
]


@dataclass
class Prefetch:
    """A background host-link transfer of a stream's next copy to one IPU."""

    num_bytes: int
    done: simpy.Process


class LinkSteps(GroupBarriers):
    """Stream copies, global exchanges and collectives of a run (a part of the run's
    state; the run provides the attributes below)."""

    host_link: Any
    remote_link: Any
    prefetched: dict[tuple[str, int], Prefetch]
    _fabric: LinkFabric | None
    _flow_cache: dict[int, tuple[ir.GlobalExchange, Any]]
    _decide: Callable[[TileGroup, int], int]

    @property
    def fabric(self) -> LinkFabric:
        """The IPU-Link fabric of this run (made on first use)."""
        if self._fabric is None:
            self._fabric = LinkFabric(self.env, self.timing.topology)
        return self._fabric

    def _stream_copy(
        self, g: TileGroup, n: int, rec: StepRecord, step: ir.StreamCopy
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
        scoped = None
        if step.tiles is not None:  # only some tiles (I/O tiles) wait for the copy
            scope = self._tile_scope(g, step, False)
            if scope is None:
                return
            part, expected, scoped = scope
        else:
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
        to_device = step.direction == ir.Direction.HOST_TO_DEVICE
        # the host's own work around the copy (StreamCopyBegin/End): the tiles wait,
        # booked in no phase (host.link.host_work_cycles); remote buffers have none
        before, after = (0, 0) if remote else host_work_cycles(self.cfg, total, to_device)

        def finish() -> Generator[simpy.Event, Any, None]:
            begin = int((self.clock[lo:hi] if scoped is None else self.clock[scoped]).max())
            ahead = self.prefetched.pop((step.stream, ipu), None) if step.prefetch else None
            if ahead is not None and ahead.num_bytes == total:
                yield ahead.done  # prepared and sent from the previous copy's end
                end = max(int(np.ceil(self.env.now)), begin + floor)
                for copy in self._replica_copies(ipu):
                    rec.details = _prefetched_ipus(rec.details, copy)
                waited = after
            else:
                if before:
                    yield self.env.timeout(before)
                yield from _transfer(link, total, ipu, False, self._copies(link, ipu))
                end = max(
                    int(np.ceil(self.env.now)), begin + before + demand.latency_cycles + floor
                )
                waited = before + after
            if scoped is None:
                self._settle(rec, lo, hi, end + after)
            else:
                self._settle_tiles(rec, scoped, end + after)
            if waited:  # the host's work is in the total, not in the copy's cycles
                rec.tile_cycles[slice(lo, hi) if scoped is None else scoped] -= waited
            if next_ready:
                start = end + after
                copies = self._copies(link, ipu)
                self.prefetched[(step.stream, ipu)] = Prefetch(
                    total,
                    self.env.process(self._transfer_at(link, start, total, ipu, before, copies)),
                )

        yield from self._collective(g, (n, part), expected, finish)

    def _replica_copies(self, ipu: int) -> range:
        """IPU ``ipu`` and, when only replica 0's groups run (lockstep), every other
        replica's copy of it."""
        step = self.replica_ipus if self.lockstep else self.cfg.num_ipus
        return range(ipu, self.cfg.num_ipus if self.lockstep else ipu + 1, step)

    def _copies(self, link: Any, ipu: int) -> int:
        """How many equal transfers IPU ``ipu``'s one stands for on its link: 1, or in
        lockstep the replicas' copies of the IPU that share its link (the links of the
        other copies carry the same transfers, and no link slows another down)."""
        if not self.lockstep:
            return 1
        per_link = getattr(link, "ipus_per_link", None)
        if per_link is None:  # one link for the machine
            return self.replicas
        mine = ipu // per_link
        return sum(1 for copy in self._replica_copies(ipu) if copy // per_link == mine)

    def _transfer_at(
        self,
        link: Any,
        start: int,
        num_bytes: int,
        ipu: int,
        prepare: int = 0,
        copies: int = 1,
    ) -> Generator[simpy.Event, Any, None]:
        """A background transfer of ``num_bytes`` over ``link`` from cycle ``start``,
        after ``prepare`` cycles of the host's preparation: it uses the link only while
        no copy the tiles wait for is in flight (``copies``: see :meth:`_copies`)."""
        start += prepare
        if start > self.env.now:
            yield self.env.timeout(start - self.env.now)
        yield from _transfer(link, num_bytes, ipu, True, copies)

    def _global_exchange(
        self, g: TileGroup, n: int, rec: StepRecord, step: ir.GlobalExchange
    ) -> Generator[simpy.Event, Any, None]:
        """Inter-IPU transfers on the shared IPU-Link fabric.

        The IPUs taking part (the transfers' ends, plus ``step.ipus``, in every
        replica) start together when the last arrives. Transfers are aggregated per
        (source IPU, destination IPU) pair and routed on the topology; the step ends
        for all of them when the last transfer has arrived, and lasts at least as long
        as its busiest tile needs at ``exchange.bytes_per_cycle`` plus the longest
        route's latency; a tile's side includes the exchange code it runs per message
        (:func:`~ipusim.exchange.links.global_tile_cycles`).
        """
        flows, ipus, floor = self._global_flows(step)
        if g.ipu not in ipus:
            return
        rec.details = self.timing.cost(step)
        ipus = self._simulated(ipus)  # (every replica's flows move on the fabric)
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
        pair_bytes += link_overhead_bytes(cfg, inverse.reshape(-1), nbytes, key.size)
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
        floor = global_tile_cycles(cfg, src, dst, nbytes)
        result = (flows, ipus, floor)
        self._flow_cache[id(step)] = (step, result)
        return result

    def _collective_step(
        self, g: TileGroup, n: int, rec: StepRecord, step: ir.Collective
    ) -> Generator[simpy.Event, Any, None]:
        """A collective: its IPUs start together when the last arrives, each group runs
        its ring on the shared fabric (ipusim.exchange.collectives), and the step
        ends for every IPU taking part when the slowest ring has finished."""
        ipus = self._simulated(frozenset(step.ipus))  # (every group's ring runs)
        if g.ipu not in ipus:
            return
        tiles = self._tiles_of(ipus)

        def finish() -> Generator[simpy.Event, Any, None]:
            begin = int(self.clock[tiles].max())
            if self.env.now < begin:
                yield self.env.timeout(begin - self.env.now)
            env, topology = self.env, self.timing.topology
            start, alone = env.now, self._ring_alone(ipus)
            kept = self.machine._rings.get((id(step), start)) if alone else None
            if kept is not None and kept[0] is step and kept[1] is topology:
                plans, end = kept[2], kept[3]
                if end > start:
                    yield env.timeout(end - start)
            else:
                plans = [ring_plan(self.cfg, step, k) for k in range(len(step.groups))]
                fabric = self.fabric
                procs = [env.process(run_ring(env, fabric, topology, p)) for p in plans]
                if procs:
                    yield simpy.AllOf(env, procs)
                if alone and start + (env.now - start) == env.now:
                    rings = self.machine._rings
                    if len(rings) >= KEPT_STEPS:
                        rings.clear()
                    rings[(id(step), start)] = (step, topology, plans, env.now)
            rec.details = {"begin": begin, "plans": plans}
            self._settle_tiles(rec, tiles, max(begin, _ceil(self.env.now)))

        yield from self._collective(g, (n, -1), len(ipus) * self.groups_per_ipu, finish)

    def _ring_alone(self, ipus: frozenset[int]) -> bool:
        """Whether a collective's rings run alone on the fabric: in lockstep, with every
        group that runs taking part (so no other step can start a transfer until the
        rings end) and no transfer in flight. Their end is then a function of the step
        and the time they start only, and is kept by the machine for later runs."""
        if not self.lockstep or len(ipus) * self.groups_per_ipu != len(self.groups):
            return False
        return self._fabric is None or self._fabric.idle


def _transfer(
    link: Any, num_bytes: int, ipu: int, background: bool, copies: int
) -> Generator[simpy.Event, Any, None]:
    """``link.transfer`` (a link model of the user's need not know ``copies``: it is
    passed only for replicas in lockstep, which run on the stock links only)."""
    if copies == 1:
        return link.transfer(num_bytes, ipu=ipu, background=background)
    return link.transfer(num_bytes, ipu=ipu, background=background, copies=copies)


def _ceil(x: float) -> int:
    """``ceil`` that ignores float noise below a millionth of a cycle."""
    return math.ceil(round(float(x), 6))


def _prefetched_ipus(details: object, ipu: int) -> dict[str, list[int]]:
    """A stream copy record's details: the IPUs whose data had been prefetched."""
    ipus = list(details.get("prefetched_ipus", [])) if isinstance(details, dict) else []
    return {"prefetched_ipus": sorted({*ipus, ipu})}
