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
since. The transfers in flight are held as numpy arrays (bytes left, time of the last
update, rate, projected end, and the hops of each as one index array), so that an
event costs a few array passes over the transfers in flight and no Python per
transfer: the transfers sharing a changed hop, their new rates and projected ends,
the next end (the earliest projected end; the first started on a tie) and the
transfers ending with it (those within a billionth of the time: float noise of
absolute times) are each found at once. The fabric always makes progress, however
late in a run. Callers round every transfer's end up to a whole cycle.

``transfer_all`` starts its transfers without a SimPy process each: one process per
distinct route latency registers its transfers together, and one event tells the
caller when the last has ended.
"""

from __future__ import annotations

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


class _Waiter:
    """What a set of transfers reports to: ``event`` succeeds when ``left`` reaches 0."""

    __slots__ = ("event", "left")

    def __init__(self, event: simpy.Event, left: int) -> None:
        self.event = event
        self.left = left


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
        self._timer = 0
        #: each hop seen so far: its index into the arrays below, and back
        self._hop_ids: dict[tuple[int, int], int] = {}
        self._hops: list[tuple[int, int]] = []
        self._caps = np.zeros(16, np.float64)  # capacity of each hop
        self._count = np.zeros(16, np.int64)  # transfers on each hop now
        self._latency: dict[Route, int] = {}
        self._hop_latency: dict[tuple[int, int], int] = {}
        self._route_index: dict[Route, np.ndarray] = {}
        # the transfers in flight, in the order they started (their serial numbers rise)
        self._serial = np.zeros(0, np.int64)
        self._remaining = np.zeros(0, np.float64)  # bytes left at time _t0
        self._t0 = np.zeros(0, np.float64)
        self._rate = np.zeros(0, np.float64)  # bytes per cycle since _t0
        self._end = np.zeros(0, np.float64)  # projected end
        self._ptr = np.zeros(1, np.int64)  # transfer k's hops: _idx[_ptr[k]:_ptr[k + 1]]
        self._idx = np.zeros(0, np.int64)
        self._group = np.zeros(0, np.int64)  # whom each transfer in flight reports to
        self._waiters: dict[int, _Waiter] = {}
        self._next_serial = 0
        self._next_waiter = 0
        #: transfers registered at this time, started together by one update
        self._starting: list[tuple[list[np.ndarray], list[float], _Waiter]] = []

    @property
    def idle(self) -> bool:
        """Whether no transfer is in flight or about to start."""
        return not (self._serial.size or self._starting or self._waiters)

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
        found = self._route_index.get(route)
        if found is not None:
            return found
        out = np.empty(len(route), np.int64)
        for k, hop in enumerate(route):
            i = self._hop_ids.get(hop)
            if i is None:
                i = self._hop_ids[hop] = len(self._hop_ids)
                self._hops.append(hop)
                if i >= self._caps.size:
                    self._caps = np.concatenate((self._caps, np.zeros(self._caps.size)))
                    self._count = np.concatenate(
                        (self._count, np.zeros(self._count.size, np.int64))
                    )
                self._caps[i] = float(self.topology.capacity(hop))
            out[k] = i
        self._route_index[route] = out
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
        waiter = _Waiter(self.env.event(), 1)
        self._register([self._hop_index(route)], [float(num_bytes)], waiter)
        yield waiter.event

    def transfer_all(
        self, transfers: Sequence[tuple[Route, int]]
    ) -> Generator[simpy.Event, Any, None]:
        """Start every ``(route, bytes)`` transfer now and wait until all have ended.

        The same as one :meth:`transfer` process per transfer: those of one route
        latency start together, in the order given, when their latency has passed.
        """
        by_latency: dict[int, tuple[list[np.ndarray], list[float]]] = {}
        routes: list[np.ndarray] = []
        sizes: list[int] = []
        for route, num_bytes in transfers:
            if num_bytes <= 0 or not route:
                continue
            route = tuple(route)
            index = self._hop_index(route)
            routes.append(index)
            sizes.append(int(num_bytes))
            group = by_latency.setdefault(self.route_latency(route), ([], []))
            group[0].append(index)
            group[1].append(float(num_bytes))
        if not routes:
            return
        self._count_bytes(routes, sizes)
        waiter = _Waiter(self.env.event(), len(routes))
        for latency, (indices, amounts) in by_latency.items():
            if latency:
                self.env.process(self._register_after(latency, indices, amounts, waiter))
            else:
                self._register(indices, amounts, waiter)
        yield waiter.event

    def _count_bytes(self, routes: list[np.ndarray], sizes: list[int]) -> None:
        """Add each transfer's bytes to every hop of its route (:attr:`link_bytes`)."""
        lengths = np.fromiter((r.size for r in routes), np.int64, len(routes))
        index = np.concatenate(routes)
        per_hop = np.zeros(len(self._hops), np.int64)
        np.add.at(per_hop, index, np.repeat(np.asarray(sizes, np.int64), lengths))
        for i in np.flatnonzero(per_hop).tolist():
            hop = self._hops[i]
            self.link_bytes[hop] = self.link_bytes.get(hop, 0) + int(per_hop[i])

    def _register_after(
        self, latency: int, indices: list[np.ndarray], amounts: list[float], waiter: _Waiter
    ) -> Generator[simpy.Event, Any, None]:
        yield self.env.timeout(latency)
        self._register(indices, amounts, waiter)

    def _register(self, indices: list[np.ndarray], amounts: list[float], waiter: _Waiter) -> None:
        """Transfers whose latency has passed: they start at the end of this time step
        with every other transfer registered at this time (one update)."""
        if not self._starting:
            self.env.timeout(0).callbacks.append(self._start)
        self._starting.append((indices, amounts, waiter))

    # ---------------------------------------------------------------- fluid model
    def _start(self, _event: simpy.Event) -> None:
        starting, self._starting = self._starting, []
        indices = [i for part in starting for i in part[0]]
        n = len(indices)
        lengths = np.fromiter((i.size for i in indices), np.int64, n)
        new_idx = np.concatenate(indices)
        now = float(self.env.now)
        self._serial = np.concatenate(
            (self._serial, np.arange(self._next_serial, self._next_serial + n, dtype=np.int64))
        )
        self._next_serial += n
        amounts = np.fromiter((a for part in starting for a in part[1]), np.float64, n)
        self._remaining = np.concatenate((self._remaining, amounts))
        self._t0 = np.concatenate((self._t0, np.full(n, now)))
        self._rate = np.concatenate((self._rate, np.zeros(n)))
        self._end = np.concatenate((self._end, np.full(n, np.inf)))
        self._ptr = np.concatenate((self._ptr, self._ptr[-1] + np.cumsum(lengths)))
        self._idx = np.concatenate((self._idx, new_idx))
        groups = []
        for _, amounts_of, waiter in starting:
            key = self._next_waiter
            self._next_waiter += 1
            self._waiters[key] = waiter
            groups.append(np.full(len(amounts_of), key, np.int64))
        self._group = np.concatenate((self._group, *groups))
        np.add.at(self._count, new_idx, 1)  # a route crosses a hop once
        self._update(new_idx)

    def _update(self, changed_hops: np.ndarray) -> None:
        """New rates for every transfer crossing one of ``changed_hops``; re-arm the
        timer.

        A transfer's rate is the smallest share ``capacity / transfers on the hop`` over
        its hops. The others keep their rates and the bytes they had at their last
        update (so each transfer's figures are those of updating it alone).
        """
        if self._serial.size:
            now = float(self.env.now)
            marked = np.zeros(self._caps.size, np.bool_)
            marked[changed_hops] = True
            starts = self._ptr[:-1]
            hit = np.flatnonzero(np.logical_or.reduceat(marked[self._idx], starts))
            if hit.size:
                shares = self._caps[self._idx] / self._count[self._idx]
                rates = np.minimum.reduceat(shares, starts)[hit]
                left = self._remaining[hit] - self._rate[hit] * (now - self._t0[hit])
                left = np.maximum(left, 0.0)
                self._remaining[hit] = left
                self._t0[hit] = now
                self._rate[hit] = rates
                self._end[hit] = now + left / rates
        self._arm()

    def _arm(self) -> None:
        """Schedule the next projected end; earlier timers go stale."""
        self._timer += 1
        if not self._serial.size:
            return
        token = self._timer
        wait = max(float(self._end.min()) - float(self.env.now), 0.0)
        self.env.timeout(wait).callbacks.append(lambda _event: self._fire(token))

    def _fire(self, token: int) -> None:
        if token != self._timer:
            return
        now = float(self.env.now)
        horizon = now * (1 + _SAME_TIME) + 1e-9
        end = self._end
        due = end <= horizon
        due[int(np.argmin(end))] = True  # the first one is due now by construction
        finished = np.flatnonzero(due)
        finished = finished[np.lexsort((self._serial[finished], end[finished]))]
        lengths = np.diff(self._ptr)
        crossing = np.repeat(due, lengths)
        gone = self._idx[crossing]
        np.subtract.at(self._count, gone, 1)
        reporting = self._group[finished].tolist()
        keep = ~due
        self._idx = self._idx[~crossing]
        self._ptr = np.concatenate(([0], np.cumsum(lengths[keep])))
        for name in ("_serial", "_remaining", "_t0", "_rate", "_end", "_group"):
            setattr(self, name, getattr(self, name)[keep])
        for key in reporting:
            waiter = self._waiters[key]
            waiter.left -= 1
            if waiter.left == 0:
                del self._waiters[key]
                waiter.event.succeed()
        self._update(gone)
