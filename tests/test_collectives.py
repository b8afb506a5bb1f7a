"""Collectives and inter-IPU transfers on the shared IPU-Link fabric.

Expected cycles are written here from the cost model of docs/machine.md
("Collectives"), independently of ipusim.exchange.collectives.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import simpy

from ipusim import ir
from ipusim.config import load_config
from ipusim.errors import IRValidationError
from ipusim.exchange.fabric import LinkFabric
from ipusim.machine import Machine


class LineTopology:
    """IPUs 0-1-2-... in a line: every hop 4 bytes/cycle, latency 10 cycles."""

    def capacity(self, hop):
        return 4.0

    def latency(self, hop):
        return 10


def run_transfers(transfers):
    """End time of each ``(start, route, bytes)`` transfer on one fabric."""
    env = simpy.Environment()
    fabric = LinkFabric(env, LineTopology())
    ends = {}

    def one(k, start, route, nbytes):
        yield env.timeout(start)
        yield from fabric.transfer(route, nbytes)
        ends[k] = env.now

    for k, (start, route, nbytes) in enumerate(transfers):
        env.process(one(k, start, route, nbytes))
    env.run()
    return [ends[k] for k in range(len(transfers))], fabric


def test_a_transfer_alone_moves_at_the_link_rate_after_its_latency():
    (end,), fabric = run_transfers([(0, ((0, 1), (1, 2)), 400)])
    assert end == pytest.approx(2 * 10 + 400 / 4)
    assert fabric.link_bytes == {(0, 1): 400, (1, 2): 400}


def test_transfers_sharing_a_link_each_get_half_of_it():
    # both cross hop (1, 2): 400 bytes at 2 B/cycle each
    ends, _ = run_transfers([(0, ((0, 1), (1, 2)), 400), (0, ((1, 2), (2, 3)), 400)])
    assert ends == pytest.approx([20 + 200, 20 + 200])


def test_a_transfer_speeds_up_when_the_other_ends():
    # the short one (200 B) shares at 2 B/cycle until it ends at 10 + 100; the long
    # one has then moved 200 of 1000 bytes and moves the other 800 at 4 B/cycle
    ends, _ = run_transfers([(0, ((0, 1),), 200), (0, ((0, 1),), 1000)])
    assert ends == pytest.approx([110, 110 + 800 / 4])


def test_transfers_on_disjoint_links_do_not_interact():
    ends, _ = run_transfers([(0, ((0, 1),), 400), (0, ((2, 3),), 400)])
    assert ends == pytest.approx([110, 110])


# ------------------------------------------------------------------ collectives
MK2X4 = load_config("mk2", overrides={"num_ipus": 4, "links.topology": "ring"})


def link_per_cycle(cfg):
    return cfg.links.bandwidth_bytes_per_s * cfg.links.links_between_neighbours / cfg.tile.clock_hz


def ring_all_reduce_cycles(cfg, n, nbytes, tile_bytes, directions=1):
    """The documented ring: 2(N-1) steps of sync + max(hop latency + chunk / link,
    on-chip), plus N-1 reductions of the busiest tile's part of a chunk."""
    chunk = math.ceil(nbytes / n)
    per_dir = math.ceil(chunk / directions)
    tile_part = math.ceil(tile_bytes / n)
    link = cfg.links.hop_latency_cycles + per_dir / link_per_cycle(cfg)
    on_chip = math.ceil(tile_part / cfg.exchange.bytes_per_cycle)
    step = cfg.global_sync_cycles + max(math.ceil(round(link, 6)), on_chip)
    reduce = math.ceil(tile_part / cfg.memory.store_bytes_per_cycle)
    return 2 * (n - 1) * step + (n - 1) * reduce


def all_reduce(groups, nbytes, tile_bytes, algorithm="ring", name="ar"):
    return ir.Collective(
        name=name,
        op="all_reduce",
        groups=groups,
        num_bytes=[nbytes] * len(groups),
        max_tile_bytes=[tile_bytes] * len(groups),
        algorithm=algorithm,
    )


def collective_cycles(trace, name):
    (rec,) = [r for r in trace.records if r.name == name]
    return rec.cycles


def test_ring_all_reduce_of_100_mb_on_four_ipus_matches_the_analytic_ring():
    nbytes = 100_000_000
    tile_bytes = math.ceil(nbytes / MK2X4.tile.tiles_per_ipu)
    trace = Machine(MK2X4).run(all_reduce([(0, 1, 2, 3)], nbytes, tile_bytes))
    cycles = collective_cycles(trace, "ar")
    n = 4
    # the textbook figure: 2(N-1)/N x bytes / link bandwidth, plus per-step latency terms
    textbook = 2 * (n - 1) / n * nbytes / link_per_cycle(MK2X4) + 2 * (n - 1) * (
        MK2X4.links.hop_latency_cycles + MK2X4.global_sync_cycles
    )
    assert cycles == pytest.approx(textbook, rel=0.01)
    assert cycles == ring_all_reduce_cycles(MK2X4, n, nbytes, tile_bytes)
    # every IPU of the ring is busy for the whole collective
    per_ipu = trace.tile_end_cycles.reshape(4, -1)
    assert (per_ipu == cycles).all()
    assert trace.totals["global_exchange"] == cycles * MK2X4.num_tiles


def test_bidirectional_ring_halves_the_link_time():
    nbytes, tile_bytes = 8_000_000, 8_000
    uni = Machine(MK2X4).run(all_reduce([(0, 1, 2, 3)], nbytes, tile_bytes))
    bi = Machine(MK2X4).run(all_reduce([(0, 1, 2, 3)], nbytes, tile_bytes, "bidirectional_ring"))
    assert collective_cycles(uni, "ar") == ring_all_reduce_cycles(MK2X4, 4, nbytes, tile_bytes)
    assert collective_cycles(bi, "ar") == ring_all_reduce_cycles(MK2X4, 4, nbytes, tile_bytes, 2)


def test_two_collectives_sharing_links_each_see_half_the_bandwidth():
    """IPUs {0, 2} and {1, 3} of a 4-IPU ring reduce at the same time. Their members
    are two hops apart, so both rings cross every hop of the ring: each transfer gets
    half a link."""
    nbytes, tile_bytes = 4_000_000, 4_000
    a = all_reduce([(0, 2)], nbytes, tile_bytes, name="a")
    b = all_reduce([(1, 3)], nbytes, tile_bytes, name="b")
    alone = collective_cycles(Machine(MK2X4).run(a), "a")
    both = Machine(MK2X4).run(ir.Sequence([a, b]))
    cfg = MK2X4
    chunk = nbytes // 2
    hop2 = 2 * cfg.links.hop_latency_cycles

    # N = 2: two steps (one reduce-scatter, one all-gather), one reduction
    def expected(rate):
        step = cfg.global_sync_cycles + math.ceil(round(hop2 + chunk / rate, 6))
        return 2 * step + math.ceil(math.ceil(tile_bytes / 2) / cfg.memory.store_bytes_per_cycle)

    assert alone == expected(link_per_cycle(cfg))
    assert collective_cycles(both, "a") == expected(link_per_cycle(cfg) / 2)
    assert collective_cycles(both, "b") == expected(link_per_cycle(cfg) / 2)
    # they ran at the same time: neither waited for the other
    ends = both.tile_end_cycles.reshape(4, -1)[:, 0]
    assert ends.tolist() == [collective_cycles(both, "a")] * 4


def test_ipus_outside_a_collective_do_not_wait_for_it():
    coll = all_reduce([(0, 1)], 1_000_000, 1_000)
    work = ir.Compute(name="work", vertex_tile=[2 * MK2X4.tile.tiles_per_ipu], vertex_cycles=[60])
    trace = Machine(MK2X4).run(ir.Sequence([coll, work]))
    per_ipu = trace.tile_end_cycles.reshape(4, -1).max(axis=1)
    assert per_ipu[2] == 6 * 60  # IPU 2 ran its compute at once
    assert per_ipu[0] == per_ipu[1] == collective_cycles(trace, "ar")


def test_machine_run_matches_the_uncontended_cost_of_the_timing_model():
    machine = Machine(MK2X4)
    step = all_reduce([(0, 1), (2, 3)], 3_000_000, 3_000, name="pairs")
    expected = machine.timing.cost(step)
    assert collective_cycles(machine.run(step), "pairs") == expected.cycles


# ------------------------------------------------------------------ replication
def test_a_replicated_program_runs_replica_zero_steps_on_every_replica():
    cfg = MK2X4
    tpi = cfg.tile.tiles_per_ipu
    cs = ir.Compute(name="cs", vertex_tile=[0, tpi + 5], vertex_cycles=[10, 30])
    prog = ir.Program(entries=(ir.Sequence([cs, ir.Sync(name="s", sync_kind="internal")]),),
                      replicas=2)  # fmt: skip
    trace = Machine(cfg).run(prog)
    (rec,) = [r for r in trace.records if r.name == "cs"]
    expected = np.zeros(2 * tpi, np.int64)
    expected[0], expected[tpi + 5] = 60, 180
    np.testing.assert_array_equal(rec.tile_cycles, np.tile(expected, 2))


def test_a_replicated_global_exchange_runs_in_every_replica_on_its_own_links():
    cfg = load_config("tiny", overrides={"num_ipus": 4, "links.topology": "line"})
    tpi = cfg.tile.tiles_per_ipu
    step = ir.GlobalExchange(name="g", src_tile=[0], dst_tile=[tpi], num_bytes=[400])
    single = Machine(cfg).run(step)
    replicated = Machine(cfg).run(ir.Program(entries=(step,), replicas=2))
    # replica 1 sends IPU 2 -> IPU 3 over its own hop, so both replicas take as long
    # as one alone
    assert replicated.records[0].cycles == single.records[0].cycles
    assert (replicated.tile_end_cycles == single.records[0].cycles).all()


def test_bad_replication_and_collective_input_is_named():
    cfg = MK2X4
    cs = ir.Compute(name="cs", vertex_tile=[0], vertex_cycles=[1])
    with pytest.raises(IRValidationError, match=r"replicas: found 3.*divides the machine's 4"):
        Machine(cfg).run(ir.Program(entries=(cs,), replicas=3))
    far = ir.Compute(name="far", vertex_tile=[3 * cfg.tile.tiles_per_ipu], vertex_cycles=[1])
    with pytest.raises(IRValidationError, match=r"far.*out of range.*replica 0 has"):
        Machine(cfg).run(ir.Program(entries=(far,), replicas=2))
    with pytest.raises(IRValidationError, match="IPU 7 is out of range"):
        Machine(cfg).run(all_reduce([(0, 7)], 10, 10))
    with pytest.raises(IRValidationError, match="IPU 1 takes part more than once"):
        Machine(cfg).run(all_reduce([(0, 1), (1, 2)], 10, 10))
    bad_op = ir.Collective(name="c", op="scan", groups=[(0, 1)], num_bytes=[4])
    with pytest.raises(IRValidationError, match="'op': found 'scan'"):
        Machine(cfg).run(bad_op)


@pytest.mark.parametrize("preset", ["m2000", "pod16", "pod64"])
def test_ring_order_follows_the_links_of_the_pod_ladders(preset):
    from ipusim.exchange.collectives import ring_order
    from ipusim.exchange.topology import topology_of

    topology = topology_of(load_config(preset))
    n = topology.num_ipus
    order = ring_order(topology, list(range(n)))
    assert sorted(order) == list(range(n))
    for i in range(n):  # every step of the ring is one direct link
        assert order[(i + 1) % n] in topology.neighbours(order[i])


def test_ring_order_keeps_a_ring_that_already_follows_links():
    from ipusim.exchange.collectives import ring_order
    from ipusim.exchange.topology import topology_of

    topology = topology_of(load_config("pod16"))
    column = (0, 2, 4, 6, 8, 10, 12, 14)  # one column of the torus ladder
    assert ring_order(topology, column) == column


def test_a_copy_the_topology_does_not_connect_is_refused_before_the_run():
    from ipusim.exchange.topology import LinkRoutingError

    cfg = load_config("m2000", overrides={"links.routing": False})
    tpi = cfg.tile.tiles_per_ipu
    near = ir.GlobalExchange(name="near", src_tile=[0], dst_tile=[tpi], num_bytes=[64])
    Machine(cfg).run(near)  # IPUs 0 and 1 share a rung
    far = ir.GlobalExchange(name="far", src_tile=[0], dst_tile=[3 * tpi], num_bytes=[64])
    with pytest.raises(LinkRoutingError, match=r"global_exchange step 'far'.*IPU 0.*IPU 3"):
        Machine(cfg).run(ir.Sequence([near, far]))
    ring = all_reduce([(0, 3, 1, 2)], 64, 64, name="badring")
    with pytest.raises(LinkRoutingError, match="collective step 'badring'"):
        Machine(cfg).run(ring)


def test_an_engine_refuses_at_load_a_copy_its_device_links_cannot_carry():
    from ipusim.exchange.topology import LinkRoutingError
    from poplar_api import FLOAT, Engine, Graph, IPUModel
    from poplar_api import program as prog

    small = {"tile.tiles_per_ipu": 8, "tile.columns": 2, "sync.controller_tile": 4}
    cfg = load_config("m2000", overrides={"links.routing": False, **small})
    device = IPUModel(cfg).createDevice()
    g = Graph(device.getTarget())
    a = g.addVariable(FLOAT, [4], "a")
    b = g.addVariable(FLOAT, [4], "b")
    g.setTileMapping(a, 0)
    g.setTileMapping(b, 3 * 8)  # IPU 3: not a neighbour of IPU 0 on the ladder
    engine = Engine(g, prog.Copy(a, b))
    with pytest.raises(LinkRoutingError, match=r"'Copy a -> b/GlobalExchange'.*IPU 0 to IPU 3"):
        engine.load(device)


@pytest.mark.parametrize("start", [0, 10**9, 10**11])
def test_transfers_end_at_the_same_offsets_however_late_in_a_run(start):
    """Two transfers sharing a hop, starting after ``start`` cycles of compute: their
    offsets from the start do not depend on how large the absolute time is."""
    fast_tiles = {"exchange.bytes_per_cycle": 64}  # so that the shared hop sets the time
    cfg = load_config("tiny", overrides={"num_ipus": 4, "links.topology": "ring", **fast_tiles})
    tpi = cfg.tile.tiles_per_ipu
    wait = ir.Compute(
        name="wait", vertex_tile=[0], vertex_cycles=[start // 6], vertex_multi=[False]
    )
    # 0 -> 2 and 1 -> 3 both cross hop 1 -> 2 (equal ways on a ring of 4 go upward)
    g = ir.GlobalExchange(
        name="g", src_tile=[0, tpi], dst_tile=[2 * tpi, 3 * tpi], num_bytes=[40_000, 40_000]
    )
    trace = Machine(cfg).run(ir.Sequence([wait, g]))
    rec = next(r for r in trace.records if r.name == "g")
    link = math.ceil(round(40_000 / (link_per_cycle(cfg) / 2), 6))  # half the shared hop
    tiles = math.ceil(40_000 / cfg.exchange.bytes_per_cycle)  # one tile sends each copy
    expected = 2 * cfg.links.hop_latency_cycles + max(link, tiles)
    assert link > tiles
    assert rec.tile_cycles[0] == expected
    assert rec.tile_cycles[tpi] == expected + 6 * (start // 6)  # IPU 1 waited for IPU 0


def test_a_replicated_all_reduce_compiles_and_runs_with_routing_off_on_a_ring():
    from poplar_api import FLOAT, Engine, Graph, IPUModel, gcl, poputil
    from poplar_api import program as prog

    cfg = load_config("tiny", overrides={"num_ipus": 4, "links.routing": False})
    device = IPUModel(cfg).createDevice()
    g = Graph(device.getTarget(), replication_factor=4)
    x = g.addVariable(FLOAT, [8], "x")
    poputil.mapTensorLinearly(g, x)
    g.createHostWrite("x", x)
    g.createHostRead("x", x)
    seq = prog.Sequence()
    gcl.allReduceInPlaceCrossReplica(g, x, gcl.CollectiveOperator.ADD, seq, "ar")
    engine = Engine(g, seq)  # the ring 0-1-2-3 is made of neighbours only
    engine.load(device)
    values = np.arange(32, dtype=np.float32).reshape(4, 8)
    engine.writeTensor("x", values)
    engine.run(0)
    np.testing.assert_allclose(engine.readTensor("x"), np.tile(values.sum(axis=0), (4, 1)))
