"""The IPU-Link fabric in SimPy: transfers in flight share the links they cross.

Every directed hop of the topology is a link with a capacity in bytes per tile cycle
(all parallel links of the hop together). A transfer follows its route: it first
waits the route's latency (the sum of its hops' latencies; latency is pipelined and
does not hold a link), then moves its bytes over every hop of the route at once (the
links forward the data as it arrives, cut-through). While ``n`` transfers cross a
hop, each gets ``capacity / n`` of it, and a transfer moves at the rate of its most
contended hop: ``rate = min over its hops of capacity / n``. Two transfers that share
one hop therefore each see half of it, and a transfer alone on its route sees the
full link.

Rates change only when a transfer starts or ends, so the fabric advances from event
to event (a fluid model). Only the transfers sharing a hop with one that started or
ended are updated; each keeps the bytes it had left at its last update and its rate
since, and the projected ends wait in a heap. The transfer whose projected end comes
up is finished when its timer fires (with any others ending within a billionth of
the time), so the fabric always makes progress, however late in a run. Callers
round every transfer's end up to a whole cycle.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator, Sequence
from typing import Any, Protocol

import numpy as np
import simpy

__all__ = ["LinkFabric", "Route"]

#: A route: the directed hops ``(a, b)`` a transfer crosses, in order.
Route = tuple[tuple[int, int], ...]

#: Transfers whose projected ends lie within this fraction of the current time of the
#: one ending now end together (float noise of absolute times).
_SAME_TIME = 1e-12


class _Topology(Protocol):
    def capacity(self, hop: tuple[int, int]) -> float: ...

    def latency(self, hop: tuple[int, int]) -> int: ...


class _Flow:
    """A transfer on the fabric: bytes left at time ``t0`` and its rate since."""

    __slots__ = ("done", "hop_index", "hops", "rate", "remaining", "serial", "t0", "version")

    def __init__(
        self, serial: int, remaining: float, hops: Route, hop_index: np.ndarray, now: float
    ) -> None:
        self.serial = serial
        self.remaining = remaining
        self.hops = hops
        self.hop_index = hop_index
        self.t0 = now
        self.rate = 0.0
        self.version = 0
        self.done: simpy.Event | None = None


class LinkFabric:
    """The IPU-Links of one machine during one run.

    Parameters
    ----------
    env
        SimPy environment (time unit: tile cycles).
    topology
        Gives each hop's capacity (bytes per cycle) and latency (cycles); see
        :mod:`ipusim.exchange.topology`.

    Attributes
    ----------
    link_bytes
        Bytes carried by each directed hop so far, over the whole run.
    """

    def __init__(self, env: simpy.Environment, topology: Any) -> None:
        self.env = env
        self.topology: _Topology = topology
        self.link_bytes: dict[tuple[int, int], int] = {}
        self._on: dict[tuple[int, int], dict[int, _Flow]] = {}
        self._heap: list[tuple[float, int, int, _Flow]] = []
        self._starting: list[_Flow] = []
        self._serial = 0
        self._timer = 0
        #: each hop seen so far: its index into the arrays below
        self._hop_ids: dict[tuple[int, int], int] = {}
        self._caps = np.zeros(16, np.float64)  # capacity of each hop
        self._count = np.zeros(16, np.int64)  # transfers on each hop now
        self._latency: dict[Route, int] = {}
        self._hop_latency: dict[tuple[int, int], int] = {}

    def route_latency(self, route: Route) -> int:
        """Latency of a route in cycles: the sum of its hops' latencies."""
        latency = self._latency.get(route)
        if latency is None:
            hops = self._hop_latency
            for hop in route:
                if hop not in hops:
                    hops[hop] = int(self.topology.latency(hop))
            latency = self._latency[route] = sum(map(hops.__getitem__, route))
        return latency

    def _hop_index(self, route: Route) -> np.ndarray:
        """The indices of a route's hops (new hops get their capacity recorded)."""
        out = np.empty(len(route), np.int64)
        for k, hop in enumerate(route):
            i = self._hop_ids.get(hop)
            if i is None:
                i = self._hop_ids[hop] = len(self._hop_ids)
                if i >= self._caps.size:
                    self._caps = np.concatenate((self._caps, np.zeros(self._caps.size)))
                    self._count = np.concatenate(
                        (self._count, np.zeros(self._count.size, np.int64))
                    )
                self._caps[i] = float(self.topology.capacity(hop))
            out[k] = i
        return out

    def transfer(self, route: Route, num_bytes: int) -> Generator[simpy.Event, Any, None]:
        """Move ``num_bytes`` along ``route`` (SimPy process generator).

        Waits the route's latency, then moves the bytes at the rate the fabric gives
        the transfer, which changes as other transfers start and end. An empty route
        or 0 bytes return at once.
        """
        if num_bytes <= 0 or not route:
            return
        route = tuple(route)
        for hop in route:
            self.link_bytes[hop] = self.link_bytes.get(hop, 0) + int(num_bytes)
        latency = self.route_latency(route)
        if latency:
            yield self.env.timeout(latency)
        flow = _Flow(self._serial, float(num_bytes), route, self._hop_index(route),
                     float(self.env.now))  # fmt: skip
        self._serial += 1
        flow.done = self.env.event()
        if not self._starting:  # transfers starting at the same time: one update
            self.env.timeout(0).callbacks.append(self._start)
        self._starting.append(flow)
        yield flow.done

    def transfer_all(
        self, transfers: Sequence[tuple[Route, int]]
    ) -> Generator[simpy.Event, Any, None]:
        """Start every ``(route, bytes)`` transfer now and wait until all have ended."""
        procs = [self.env.process(self.transfer(r, b)) for r, b in transfers if b > 0 and r]
        if procs:
            yield simpy.AllOf(self.env, procs)

    # ---------------------------------------------------------------- fluid model
    def _start(self, _event: simpy.Event) -> None:
        starting, self._starting = self._starting, []
        for flow in starting:
            for hop in flow.hops:
                self._on.setdefault(hop, {})[flow.serial] = flow
            self._count[flow.hop_index] += 1  # a route crosses a hop once
        self._update(starting)

    def _update(self, changed: list[_Flow]) -> None:
        """New rates for every flow sharing a hop with ``changed``; re-arm the timer.

        A flow's rate is the smallest share ``capacity / transfers on the hop`` over its
        hops, worked out for all affected flows at once (the same arithmetic, one
        division per hop crossing).
        """
        now = float(self.env.now)
        affected: dict[int, _Flow] = {}
        for hop in {hop for flow in changed for hop in flow.hops}:
            affected.update(self._on.get(hop, {}))
        if affected:
            flows = [affected[serial] for serial in sorted(affected)]
            index = np.concatenate([f.hop_index for f in flows])
            starts = np.zeros(len(flows), np.int64)
            np.cumsum([f.hop_index.size for f in flows[:-1]], out=starts[1:])
            rates = np.minimum.reduceat(self._caps[index] / self._count[index], starts).tolist()
            for flow, rate in zip(flows, rates, strict=True):
                flow.remaining = max(flow.remaining - flow.rate * (now - flow.t0), 0.0)
                flow.t0 = now
                flow.rate = rate
                flow.version += 1
                end = now + flow.remaining / flow.rate
                heapq.heappush(self._heap, (end, flow.serial, flow.version, flow))
        self._arm()

    def _valid(self, entry: tuple[float, int, int, _Flow]) -> bool:
        flow = entry[3]
        return flow.version == entry[2] and flow.serial in self._on.get(flow.hops[0], {})

    def _arm(self) -> None:
        """Schedule the next projected end; earlier timers go stale."""
        while self._heap and not self._valid(self._heap[0]):
            heapq.heappop(self._heap)
        self._timer += 1
        if not self._heap:
            return
        token = self._timer
        wait = max(self._heap[0][0] - float(self.env.now), 0.0)
        self.env.timeout(wait).callbacks.append(lambda _event: self._fire(token))

    def _fire(self, token: int) -> None:
        if token != self._timer:
            return
        now = float(self.env.now)
        horizon = now * (1 + _SAME_TIME) + 1e-9
        finished: list[_Flow] = []
        while self._heap and (not finished or self._heap[0][0] <= horizon):
            entry = heapq.heappop(self._heap)
            if self._valid(entry):
                finished.append(entry[3])  # the first one is due now by construction
        for flow in finished:
            for hop in flow.hops:
                del self._on[hop][flow.serial]
            self._count[flow.hop_index] -= 1
        for flow in finished:
            assert flow.done is not None
            flow.done.succeed()
        self._update(finished)
