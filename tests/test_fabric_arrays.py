"""The IPU-Link fabric's transfers in flight, held as arrays: end times against a
reference fluid model written here (every rate worked out again from scratch at every
start and end), and ``transfer_all`` against one ``transfer`` process per transfer."""

from __future__ import annotations

import random

import numpy as np
import pytest
import simpy

from ipusim.exchange.fabric import LinkFabric


class RingTopology:
    """Six IPUs in a ring; each hop's capacity and latency follow from its ends."""

    def capacity(self, hop):
        return (1.0, 2.0, 3.5, 4.0)[(7 * hop[0] + 3 * hop[1]) % 4]

    def latency(self, hop):
        return (0, 0, 3, 10)[(5 * hop[0] + hop[1]) % 4]


def random_transfers(seed: int) -> list[tuple[float, tuple, int]]:
    """``(start, route, bytes)`` transfers on the ring, some starting together."""
    rng = random.Random(seed)
    out = []
    for _ in range(rng.randrange(1, 30)):
        a, hops = rng.randrange(6), []
        for _ in range(rng.randrange(1, 4)):
            b = (a + rng.choice((1, -1))) % 6
            hops.append((a, b))
            a = b
        start = rng.choice((0.0, 0.0, 5.0, float(rng.randrange(400))))
        out.append((start, tuple(dict.fromkeys(hops)), rng.randrange(1, 5000)))
    return out


def reference_ends(transfers, topology) -> list[float]:
    """End of each transfer: after its route's latency it joins the fluid; between two
    events every rate is ``min over its hops of capacity / transfers on the hop``."""
    arrive = [s + sum(topology.latency(h) for h in r) for s, r, _ in transfers]
    left = [float(b) for _, _, b in transfers]
    ends: list[float | None] = [None] * len(transfers)
    now = 0.0
    while any(e is None for e in ends):
        live = [k for k, e in enumerate(ends) if e is None and arrive[k] <= now]
        count: dict = {}
        for k in live:
            for hop in transfers[k][1]:
                count[hop] = count.get(hop, 0) + 1
        rate = {k: min(topology.capacity(h) / count[h] for h in transfers[k][1]) for k in live}
        waiting = [arrive[k] for k, e in enumerate(ends) if e is None and arrive[k] > now]
        finish = [now + left[k] / rate[k] for k in live]
        nxt = min(waiting + finish)
        for k, end in zip(live, finish, strict=True):
            left[k] -= rate[k] * (nxt - now)
            if end <= nxt * (1 + 1e-12) + 1e-9:
                ends[k] = nxt
        now = nxt
    return [float(e) for e in ends]


def fabric_ends(transfers, grouped: bool) -> tuple[list[float], dict]:
    """End of each transfer on a LinkFabric: each in its own process, or (``grouped``)
    those starting at one time through one ``transfer_all``."""
    env = simpy.Environment()
    fabric = LinkFabric(env, RingTopology())
    ends: dict[int, float] = {}

    def one(k, start, route, nbytes):
        yield env.timeout(start)
        yield from fabric.transfer(route, nbytes)
        ends[k] = env.now

    def together(ks, start):
        yield env.timeout(start)
        yield from fabric.transfer_all([(transfers[k][1], transfers[k][2]) for k in ks])
        for k in ks:
            ends[k] = env.now

    if grouped:
        by_start: dict[float, list[int]] = {}
        for k, (start, _, _) in enumerate(transfers):
            by_start.setdefault(start, []).append(k)
        for start, ks in by_start.items():
            env.process(together(ks, start))
    else:
        for k, (start, route, nbytes) in enumerate(transfers):
            env.process(one(k, start, route, nbytes))
    env.run()
    return [ends[k] for k in range(len(transfers))], fabric.link_bytes


@pytest.mark.parametrize("seed", range(40))
def test_transfer_ends_match_a_fluid_model_recomputed_at_every_event(seed):
    transfers = random_transfers(seed)
    ends, link_bytes = fabric_ends(transfers, grouped=False)
    assert ends == pytest.approx(reference_ends(transfers, RingTopology()), rel=1e-9)
    expected: dict = {}
    for _, route, nbytes in transfers:
        for hop in route:
            expected[hop] = expected.get(hop, 0) + nbytes
    assert link_bytes == expected


@pytest.mark.parametrize("seed", range(40))
def test_transfer_all_ends_when_its_last_transfer_would_have_ended_alone(seed):
    transfers = random_transfers(seed)
    alone, bytes_alone = fabric_ends(transfers, grouped=False)
    together, bytes_together = fabric_ends(transfers, grouped=True)
    by_start: dict[float, list[int]] = {}
    for k, (start, _, _) in enumerate(transfers):
        by_start.setdefault(start, []).append(k)
    for ks in by_start.values():  # each group waits for its slowest transfer
        assert {together[k] for k in ks} == {max(alone[k] for k in ks)}
    assert bytes_together == bytes_alone


def test_a_fabric_with_nothing_in_flight_returns_at_once():
    env = simpy.Environment()
    fabric = LinkFabric(env, RingTopology())

    def run():
        yield from fabric.transfer_all([(((0, 1),), 0), ((), 100)])
        yield from fabric.transfer(((0, 1),), 0)

    env.process(run())
    env.run()
    assert env.now == 0 and fabric.link_bytes == {}
    assert np.all(fabric._count == 0)
