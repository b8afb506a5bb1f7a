"""Host link: copy-size limit, transfer time and bandwidth sharing in SimPy.

Test link: 4 GB/s at a 1 GHz clock = 4 bytes per cycle, latency 50 ns = 50 cycles.
"""

from __future__ import annotations

import pytest
import simpy

from ipusim.errors import HostLinkError
from ipusim.host.link import HostLink, check_copy_size, transfer_cycles

L = 50  # latency cycles
BPC = 4  # bytes per cycle


@pytest.fixture
def cfg(make_config):
    return make_config(
        host={
            "bandwidth_bytes_per_s": 4e9,
            "latency_s": 50e-9,
            "max_copy_bytes": 1000,
        }
    )


def _run(cfg, starts_and_bytes):
    """Start one transfer per (start time, bytes); return finish times and the link."""
    env = simpy.Environment()
    link = HostLink(env, cfg)
    finish: dict[int, float] = {}

    def job(i, start, num_bytes):
        yield env.timeout(start)
        yield env.process(link.transfer(num_bytes))
        finish[i] = env.now

    for i, (start, num_bytes) in enumerate(starts_and_bytes):
        env.process(job(i, start, num_bytes))
    env.run()
    return [finish[i] for i in range(len(starts_and_bytes))], link


def test_transfer_cycles(cfg):
    assert cfg.host_latency_cycles == L
    assert transfer_cycles(cfg, 800) == L + 800 // BPC  # 250
    assert transfer_cycles(cfg, 801) == L + 201  # ceil(801 / 4) = 201
    assert transfer_cycles(cfg, 0) == 0


def test_one_transfer_alone(cfg):
    # 1000 bytes -> C = 250 cycles of link work
    finish, link = _run(cfg, [(0, 1000)])
    assert finish == [L + 250]
    assert link.busy_cycles == 250
    assert finish[0] == transfer_cycles(cfg, 1000)


def test_two_transfers_share_the_bandwidth(cfg):
    # Each needs C = 1600 / 4 = 400 cycles of link work. Both are ready at L and share
    # the link at half rate each, so both finish at L + 2 * 400.
    finish, link = _run(cfg, [(0, 1600), (0, 1600)])
    assert finish == [L + 800, L + 800]
    assert link.busy_cycles == 800


def test_unequal_transfers_share_then_run_alone(cfg):
    # A: 400 cycles of work, B: 200, both ready at L. Shared at half rate until B is
    # done at L + 2 * 200 = L + 400 (A has done 200); A then runs alone: L + 600.
    finish, _ = _run(cfg, [(0, 1600), (0, 800)])
    assert finish == [L + 600, L + 400]


def test_transfer_started_while_another_is_half_done(cfg):
    # A: 400 cycles of work from L. B: 200 cycles, started at 250 so ready at 250 + L.
    # A alone for 250 cycles (150 left), then both at half rate: B's 200 needs 400,
    # A's 150 needs 300 -> A done at L + 250 + 300; B has 50 left, alone -> + 50.
    finish, link = _run(cfg, [(0, 1600), (250, 800)])
    assert finish == [L + 550, L + 600]
    assert link.busy_cycles == 600


def test_fractional_shares_are_exact(cfg):
    # three transfers of 1 cycle of work each (4 bytes): each at 1/3 rate, all done at L + 3
    finish, _ = _run(cfg, [(0, 4), (0, 4), (0, 4)])
    assert finish == [L + 3, L + 3, L + 3]


def test_zero_byte_transfer_is_instant(cfg):
    finish, link = _run(cfg, [(7, 0)])
    assert finish == [7]
    assert link.busy_cycles == 0


def test_copy_size_limit(cfg):
    check_copy_size(cfg, 1000, "inputMatrix")  # at the limit: fine
    with pytest.raises(HostLinkError) as info:
        check_copy_size(cfg, 2500, "inputMatrix")
    text = str(info.value)
    assert "inputMatrix" in text and "2500" in text and "1000" in text and "split" in text
    assert isinstance(info.value, ValueError)
    with pytest.raises(HostLinkError, match="num_bytes is -1"):
        check_copy_size(cfg, -1, "out")


def test_ipus_of_different_machines_use_their_own_host_links(make_config):
    """host.ipus_per_link = 2 on 4 IPUs: IPUs 0 and 1 share a link, IPU 2 has another."""
    from ipusim import ir
    from ipusim.machine import Machine

    cfg = make_config(
        num_ipus=4,
        host={
            "bandwidth_bytes_per_s": 4e9,
            "latency_s": 50e-9,
            "max_copy_bytes": 10_000,
            "ipus_per_link": 2,
        },
    )
    tpi = cfg.tile.tiles_per_ipu

    def copy_on(ipus):
        return ir.StreamCopy(
            name="in",
            direction="host_to_device",
            tile=[i * tpi for i in ipus],
            num_bytes=[400] * len(ipus),
            exchanged=True,
        )

    def end_of(ipus, ipu):
        trace = Machine(cfg).run(copy_on(ipus))
        return int(trace.tile_end_cycles[ipu * tpi])

    alone = end_of([0], 0)
    assert alone == L + 400 // BPC
    assert end_of([0, 1], 0) == L + 2 * 400 // BPC  # same machine: half the link each
    assert end_of([0, 2], 0) == alone  # different machines: a link each
    assert end_of([0, 2], 2) == alone


def test_link_groups_make_a_link_when_it_is_first_used():
    """A group of links (one per IPU for Streaming Memory, one per host.ipus_per_link
    IPUs for the host) makes each link at its first transfer: the same transfers end at
    the same cycles as on a lone link of the same rate, links no IPU used are not made
    and did no work, and ``links`` gives every link in order."""
    from ipusim.config import load_config
    from ipusim.host.link import HostLinks, StreamingMemoryLinks

    cfg = load_config("tiny", overrides={"num_ipus": 4, "host.ipus_per_link": 2})
    ends = {}
    for kind in (HostLinks, StreamingMemoryLinks):
        env = simpy.Environment()
        group = kind(env, cfg)
        assert group._made == {} and group.busy_cycles == 0

        def job(g, ipu, num_bytes, key, env=env):
            yield from g.transfer(num_bytes, ipu=ipu)
            ends[key] = env.now

        env.process(job(group, 3, 5000, (kind, "a")))
        env.process(job(group, 3, 3000, (kind, "b")))
        env.run()
        index = 3 // group.ipus_per_link
        assert list(group._made) == [index]
        lone_env = simpy.Environment()
        made = group._made[index]
        lone = HostLink(lone_env, cfg, made.bytes_per_cycle, made.latency_cycles)
        lone_env.process(job(lone, 0, 5000, (kind, "lone a"), lone_env))
        lone_env.process(job(lone, 0, 3000, (kind, "lone b"), lone_env))
        lone_env.run()
        assert (ends[(kind, "a")], ends[(kind, "b")]) == (
            ends[(kind, "lone a")],
            ends[(kind, "lone b")],
        )
        assert group.busy_cycles == lone.busy_cycles > 0
        every = group.links
        assert len(every) == -(-4 // group.ipus_per_link) and every[index] is made
        with pytest.raises(IndexError):
            group.link(len(every))
