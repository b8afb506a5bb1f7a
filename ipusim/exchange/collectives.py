"""Collectives over IPU-Links: ring schedules and their cost.

A :class:`~ipusim.ir.Collective` step runs one ring per group of IPUs. With ``N``
members each holding ``B`` bytes (for ``all_gather``, ``B`` is the gathered size),
the data is cut into ``N`` chunks of ``c = ceil(B / N)`` bytes and the ring runs a
number of steps in which every member sends one chunk to the next member:

==================  ==========  =======================================
op                  steps       reduction after the step
==================  ==========  =======================================
``all_reduce``      2(N - 1)    the first N - 1 (reduce-scatter part)
``reduce_scatter``  N - 1       every step
``all_gather``      N - 1       none
``broadcast``       2(N - 1)    none (the root's chunks are pipelined
                                round the ring)
==================  ==========  =======================================

``bidirectional_ring`` splits every chunk in two halves of ``ceil(c / 2)`` bytes
that go round the ring in opposite directions at the same time.

One ring step costs

``sync + max(ceil(max over transfers (route latency + bytes / rate)), on_chip) + reduce``

* ``sync``: the external sync of the ring's IPUs that starts the step (their path
  through the sync fabric, :func:`ipusim.sync.placement.external_sync_cycles`);
* a transfer's rate is its share of the links it crosses (see
  :mod:`ipusim.exchange.fabric`; alone on its links, the link's full bandwidth). Every
  tile of a member that holds some of the data (``member_tiles``) sends its part of
  the chunk as one message, so a transfer carries its chunk plus
  ``links.message_overhead_bytes x member_tiles`` on every hop (the packet headers
  and gaps of :func:`ipusim.exchange.links.link_overhead_bytes`);
* ``on_chip = ceil(t / exchange.bytes_per_cycle) + ceil(exchange.cycles_per_message x
  m)`` with ``t = ceil(max_tile_bytes / N)``: the busiest tile sends its part of the
  chunk and receives the next one at the tile's exchange rate, overlapping the link
  transfer, and runs the exchange code of its ``m`` messages (one sent and one
  received per direction of the ring: 2, or 4 for ``bidirectional_ring``);
* ``reduce = ceil(t / memory.store_bytes_per_cycle)`` on reduction steps: the tile
  combines the received part with its own, limited by the store of the result
  (an estimate, docs/machine.md).

Uncontended, with every member one hop from the next, an all-reduce therefore takes
``2(N-1) (sync + max(latency + ceil(c / link), on_chip)) + (N-1) reduce``, that is
``2(N-1)/N x B / link bandwidth`` plus the latency terms. The machine runs the same
schedule in SimPy on the shared :class:`~ipusim.exchange.fabric.LinkFabric`, so
collectives running at the same time slow each other down where they share links;
:func:`collective_cost` is the uncontended figure.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

import numpy as np
import simpy

from ipusim import ir
from ipusim.config import MachineConfig
from ipusim.sync.placement import external_sync_cycles

__all__ = [
    "CollectiveCost",
    "RingPlan",
    "collective_cost",
    "ring_order",
    "ring_plan",
    "run_ring",
]


def ring_order(topology: Any, members: tuple[int, ...] | list[int]) -> tuple[int, ...]:
    """An order of ``members`` for a ring that follows the topology's links.

    A collective library lays its ring along physical links where it can (on an
    IPU-POD ladder, up one column and down the other, or zig-zagging over the rungs),
    so that each ring step crosses every link at most once. The order kept is the
    given one when every consecutive pair (and the last back to the first) are
    neighbours; otherwise a tour built from the first member by always going to the
    nearest member not yet visited (fewest hops, then lowest id), improved by 2-opt
    exchanges while that shortens the total route length. Deterministic.

    Parameters
    ----------
    topology
        Gives ``distances`` (hops between IPUs; see :mod:`ipusim.exchange.topology`),
        which do not depend on ``links.routing``.
    members
        The IPUs of the ring.
    """
    order = tuple(int(m) for m in members)
    n = len(order)
    if n < 3:
        return order
    cache = _RING_ORDERS.setdefault(id(topology), (topology, {}))[1]
    if order not in cache:
        cache[order] = _ring_order(topology, order)
    return cache[order]


#: id(topology) -> (topology, {members: ring}): orders found so far (topologies are
#: cached per config, so a model with many collectives asks for few distinct rings).
_RING_ORDERS: dict[int, tuple[Any, dict[tuple[int, ...], tuple[int, ...]]]] = {}


def _ring_order(topology: Any, order: tuple[int, ...]) -> tuple[int, ...]:
    n = len(order)
    # hops of the shortest route whatever links.routing says (-1: not connected)
    hops = np.asarray(topology.distances)
    dist = {(a, b): int(hops[a, b]) if hops[a, b] >= 0 else 10 * n for a in order for b in order}
    if all(dist[(order[i], order[(i + 1) % n])] == 1 for i in range(n)):
        return order
    tour = [order[0]]
    left = sorted(order[1:])  # a list: the tour is built from it
    while left:
        here = tour[-1]
        nxt = min(left, key=lambda m: (dist[(here, m)], m))
        tour.append(nxt)
        left.remove(nxt)

    improved = True
    while improved:  # 2-opt: reverse tour[i..j] while that shortens the ring
        improved = False
        for i in range(1, n - 1):
            for j in range(i + 1, n):
                a, b, c, d = tour[i - 1], tour[i], tour[j], tour[(j + 1) % n]
                if dist[(a, c)] + dist[(b, d)] < dist[(a, b)] + dist[(c, d)]:
                    tour[i : j + 1] = tour[i : j + 1][::-1]
                    improved = True
    return tuple(tour)


@dataclass(frozen=True)
class RingPlan:
    """The schedule of one group's ring.

    Attributes
    ----------
    members
        The group's IPUs in ring order.
    steps
        Number of ring steps.
    reduce_steps
        How many of the first steps end with a reduction.
    transfers
        ``(src_ipu, dst_ipu, bytes)`` every ring step makes (the same each step); the
        bytes include the per-message link overhead.
    on_chip_cycles, reduce_cycles, sync_cycles
        The per-step terms of the module docstring.
    """

    members: tuple[int, ...]
    steps: int
    reduce_steps: int
    transfers: tuple[tuple[int, int, int], ...]
    on_chip_cycles: int
    reduce_cycles: int
    sync_cycles: int


def ring_plan(cfg: MachineConfig, step: ir.Collective, group: int) -> RingPlan:
    """The ring schedule of group ``group`` of a collective step."""
    members = step.groups[group]
    n = len(members)
    total = step.num_bytes[group]
    if n < 2 or total == 0:
        return RingPlan(members, 0, 0, (), 0, 0, 0)
    steps = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1}.get(
        step.op, 2 * (n - 1)
    )
    reduce_steps = {"all_reduce": n - 1, "reduce_scatter": n - 1}.get(step.op, 0)
    chunk = -(-total // n)
    if step.algorithm == "bidirectional_ring":
        half = -(-chunk // 2)
        transfers = [(members[i], members[(i + 1) % n], half) for i in range(n)]
        transfers += [(members[i], members[(i - 1) % n], chunk - half) for i in range(n)]
        directions = 2
    else:
        transfers = [(members[i], members[(i + 1) % n], chunk) for i in range(n)]
        directions = 1
    tile_part = -(-step.max_tile_bytes[group] // n)
    ex = cfg.exchange
    on_chip = math.ceil(tile_part / ex.bytes_per_cycle)
    # the exchange code of one message sent and one received per ring direction
    on_chip += math.ceil(round(ex.cycles_per_message * 2 * directions, 9))
    reduce = math.ceil(tile_part / cfg.memory.store_bytes_per_cycle)
    overhead = int(cfg.links.message_overhead_bytes) * step.member_tiles[group]
    transfers = [(a, b, nbytes + overhead) for a, b, nbytes in transfers if nbytes > 0]
    sync = external_sync_cycles(cfg, members)
    return RingPlan(members, steps, reduce_steps, tuple(transfers), on_chip, reduce, sync)


@dataclass(frozen=True)
class CollectiveCost:
    """Uncontended cost of a collective step.

    Attributes
    ----------
    cycles
        The slowest group's cycles.
    group_cycles
        Cycles of each group.
    link_bytes
        Bytes each directed hop carries over the whole collective.
    """

    cycles: int
    group_cycles: tuple[int, ...]
    link_bytes: dict[tuple[int, int], int]


def _routes(topology: Any, plan: RingPlan) -> list[tuple[tuple[tuple[int, int], ...], int]]:
    return [(topology.route(a, b), nbytes) for a, b, nbytes in plan.transfers]


def collective_cost(cfg: MachineConfig, topology: Any, step: ir.Collective) -> CollectiveCost:
    """Cycles of a collective step when no other traffic shares its links.

    The groups run at the same time, so within one ring step a hop carrying ``k`` of
    the step's transfers (of any group) gives each ``1/k`` of its capacity, as the
    fabric would.
    """
    plans = [ring_plan(cfg, step, k) for k in range(len(step.groups))]
    routed = [_routes(topology, p) for p in plans]
    count: dict[tuple[int, int], int] = {}
    link_bytes: dict[tuple[int, int], int] = {}
    for plan, routes in zip(plans, routed, strict=True):
        for route, nbytes in routes:
            for hop in route:
                count[hop] = count.get(hop, 0) + 1
                link_bytes[hop] = link_bytes.get(hop, 0) + nbytes * plan.steps
    group_cycles = []
    for plan, routes in zip(plans, routed, strict=True):
        if plan.steps == 0:
            group_cycles.append(0)
            continue
        link = 0.0
        for route, nbytes in routes:
            rate = min(float(topology.capacity(h)) / count[h] for h in route)
            latency = sum(int(topology.latency(h)) for h in route)
            link = max(link, latency + nbytes / rate)
        per_step = plan.sync_cycles + max(_ceil(link), plan.on_chip_cycles)
        group_cycles.append(plan.steps * per_step + plan.reduce_steps * plan.reduce_cycles)
    return CollectiveCost(max(group_cycles, default=0), tuple(group_cycles), link_bytes)


def _ceil(x: float) -> int:
    """``ceil`` that ignores float noise below a millionth of a cycle."""
    return math.ceil(round(x, 6))


def run_ring(
    env: simpy.Environment, fabric: Any, topology: Any, plan: RingPlan
) -> Generator[simpy.Event, Any, None]:
    """Run one group's ring on the fabric from ``env.now`` (SimPy process generator).

    Each step: the sync, then every transfer of the step on the shared fabric, the
    step lasting at least its on-chip time; its end is rounded up to a whole cycle;
    then the reduction on reduction steps.
    """
    routes = _routes(topology, plan)
    for k in range(plan.steps):
        if plan.sync_cycles:
            yield env.timeout(plan.sync_cycles)
        start = env.now
        yield from fabric.transfer_all(routes)
        end = max(_ceil(env.now), _ceil(start) + plan.on_chip_cycles)
        if k < plan.reduce_steps:
            end += plan.reduce_cycles
        if end > env.now:
            yield env.timeout(end - env.now)
