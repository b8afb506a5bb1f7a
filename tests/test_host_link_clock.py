"""The host link keeps an exact clock of its own and reports ends at whole cycles.

Test link (as ``test_host_link.py``): 4 bytes per cycle, latency 50 cycles.
"""

from __future__ import annotations

import pytest
import simpy

from ipusim.host.link import HostLink

L = 50  # latency cycles


@pytest.fixture
def cfg(make_config):
    return make_config(
        host={"bandwidth_bytes_per_s": 4e9, "latency_s": 50e-9, "max_copy_bytes": 1000}
    )


def _finishes(cfg, starts_and_bytes):
    """(finish time, type of the SimPy clock then) of one transfer per (start, bytes)."""
    env = simpy.Environment()
    link = HostLink(env, cfg)
    finish: dict[int, tuple[object, type]] = {}

    def job(i, start, num_bytes):
        yield env.timeout(start)
        yield env.process(link.transfer(num_bytes))
        finish[i] = (env.now, type(env.now))

    for i, (start, num_bytes) in enumerate(starts_and_bytes):
        env.process(job(i, start, num_bytes))
    env.run()
    return [finish[i] for i in range(len(starts_and_bytes))]


def test_a_fractional_end_is_reported_at_the_next_whole_cycle(cfg):
    # A and B (1 cycle of work each) share the link from L: 1/2 each until C arrives
    # at L + 1, then 1/3 each. A and B have 1/2 left: they end at exactly L + 2.5.
    # C has had 1/2 by then and runs alone: it ends at L + 3. A and B are reported at
    # ceil(L + 2.5) = L + 3; had the link taken their end as L + 3, C would have had
    # only 2/3 by then and ended at L + 3 1/3, reported at L + 4.
    got = _finishes(cfg, [(0, 4), (0, 4), (1, 4)])
    assert [t for t, _ in got] == [L + 3, L + 3, L + 3]
    assert {kind for _, kind in got} == {int}  # the simulation clock holds whole cycles


def test_an_arrival_after_an_exact_end_sees_the_link_free(cfg):
    # A (3 cycles) and B (1 cycle) from L: B ends at L + 2 with A at 2 left, then A
    # runs alone; C (2 cycles) arrives at L + 3 with A at 1 left; A and C share:
    # A ends at L + 5, C has had 1 and ends alone at L + 6.
    got = _finishes(cfg, [(0, 12), (0, 4), (3, 8)])
    assert [t for t, _ in got] == [L + 5, L + 2, L + 6]
