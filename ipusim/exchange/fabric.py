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
to event (a fluid model); times are kept as floats and every transfer's end is
rounded up to a whole cycle by its caller.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any, Protocol

import simpy

__all__ = ["LinkFabric", "Route"]

#: A route: the directed hops ``(a, b)`` a transfer crosses, in order.
Route = tuple[tuple[int, int], ...]

#: Bytes below which a transfer counts as finished (float rounding).
_DONE_BYTES = 1e-6


class _Topology(Protocol):
    def capacity(self, hop: tuple[int, int]) -> float: ...

    def latency(self, hop: tuple[int, int]) -> int: ...


class _Flow:
    __slots__ = ("done", "rate", "remaining", "route")

    def __init__(self, remaining: float, route: Route, done: simpy.Event) -> None:
        self.remaining = remaining
        self.route = route
        self.done = done
        self.rate = 0.0


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
        self._flows: list[_Flow] = []
        self._last = float(env.now)
        self._version = 0
        self._pending = False

    def route_latency(self, route: Route) -> int:
        """Latency of a route in cycles: the sum of its hops' latencies."""
        return sum(int(self.topology.latency(h)) for h in route)

    def transfer(self, route: Route, num_bytes: int) -> Generator[simpy.Event, Any, None]:
        """Move ``num_bytes`` along ``route`` (SimPy process generator).

        Waits the route's latency, then moves the bytes at the rate the fabric gives
        the transfer, which changes as other transfers start and end. An empty route
        or 0 bytes return at once.
        """
        if num_bytes <= 0 or not route:
            return
        for hop in route:
            self.link_bytes[hop] = self.link_bytes.get(hop, 0) + int(num_bytes)
        latency = self.route_latency(route)
        if latency:
            yield self.env.timeout(latency)
        self._advance()
        flow = _Flow(float(num_bytes), tuple(route), self.env.event())
        self._flows.append(flow)
        if not self._pending:  # transfers starting at the same cycle: one reschedule
            self._pending = True
            self.env.timeout(0).callbacks.append(self._flush)
        yield flow.done

    def transfer_all(
        self, transfers: Sequence[tuple[Route, int]]
    ) -> Generator[simpy.Event, Any, None]:
        """Start every ``(route, bytes)`` transfer now and wait until all have ended."""
        procs = [self.env.process(self.transfer(r, b)) for r, b in transfers if b > 0 and r]
        if procs:
            yield simpy.AllOf(self.env, procs)

    # ---------------------------------------------------------------- fluid model
    def _advance(self) -> None:
        """Credit every flow with what it moved since the last event."""
        now = float(self.env.now)
        dt = now - self._last
        if dt > 0:
            for flow in self._flows:
                flow.remaining -= flow.rate * dt
        self._last = now

    def _set_rates(self) -> None:
        count: dict[tuple[int, int], int] = {}
        for flow in self._flows:
            for hop in flow.route:
                count[hop] = count.get(hop, 0) + 1
        cap = self.topology.capacity
        for flow in self._flows:
            flow.rate = min(float(cap(h)) / count[h] for h in flow.route)

    def _reschedule(self) -> None:
        """Recompute the rates and schedule the next end; older schedules go stale."""
        self._version += 1
        if not self._flows:
            return
        self._set_rates()
        version = self._version
        wait = min(max(f.remaining, 0.0) / f.rate for f in self._flows)
        timer = self.env.timeout(wait)
        timer.callbacks.append(lambda _event: self._complete(version))

    def _flush(self, _event: simpy.Event) -> None:
        self._pending = False
        self._reschedule()

    def _complete(self, version: int) -> None:
        if version != self._version:
            return
        self._advance()
        # a flow ends when what is left would take under a millionth of a cycle
        finished = [f for f in self._flows if f.remaining <= max(_DONE_BYTES, f.rate * 1e-6)]
        self._flows = [f for f in self._flows if f not in finished]
        for flow in finished:
            flow.done.succeed()
        self._reschedule()
