"""Inter-IPU exchange over IPU-Links.

Base machine: 8 tiles per IPU (IPU k holds tiles 8k .. 8k+7), exchange 4 B/cycle per
tile, one link hop 8 B/cycle (8 GB/s at 1 GHz).
"""

from __future__ import annotations

import numpy as np
import pytest
from links_common import exchange_cost, link_config

from ipusim.errors import IRValidationError
from ipusim.exchange.links import link_hops


def test_link_hops_per_topology(make_config):
    src = np.array([0, 0, 0, 3, 1, 3])
    dst = np.array([1, 2, 3, 0, 1, 1])
    # ring of 4: 0->1 1, 0->2 2, 0->3 1 (down), 3->0 1 (wrap), 1->1 0, 3->1 2
    np.testing.assert_array_equal(
        link_hops(link_config(make_config, 4), src, dst), [1, 2, 1, 1, 0, 2]
    )
    # line of 4: |d|
    line = link_config(make_config, 4, "line")
    np.testing.assert_array_equal(link_hops(line, src, dst), [1, 2, 3, 3, 0, 2])
    # fully connected: 1, same IPU 0
    full = link_config(make_config, 4, "full")
    np.testing.assert_array_equal(link_hops(full, src, dst), [1, 1, 1, 1, 0, 1])


def test_link_hops_rejects_unknown_ipu(make_config):
    with pytest.raises(IRValidationError, match=r"IPU id 4 .*\[0, 4\)"):
        link_hops(link_config(make_config, 4), np.array([0]), np.array([4]))


def test_two_ipus_tile_bound(make_config):
    cfg = link_config(make_config, 2, hop_latency=50)
    cost = exchange_cost(cfg, [0], [8], [800])
    # link: 800 / 8 = 100; tiles: 800 / 4 = 200; + 50 * 1 hop -> 250
    assert cost.link_bytes == {(0, 1): 800}
    assert cost.cycles == 250
    assert cost.bytes_sent[0] == 800 and cost.bytes_received[8] == 800
    assert cost.bytes_sent.shape == (16,)


def test_two_ipus_link_bound(make_config):
    cfg = link_config(make_config, 2, hop_latency=50)
    # three tiles of IPU 0 send 800 B each to three tiles of IPU 1:
    # link 2400 / 8 = 300 > tile 800 / 4 = 200 -> 300 + 50 = 350
    cost = exchange_cost(cfg, [0, 1, 2], [8, 9, 10], [800, 800, 800])
    assert cost.link_bytes == {(0, 1): 2400}
    assert cost.cycles == 350


def test_ring_two_hop_transfer_goes_upward_on_a_tie(make_config):
    cfg = link_config(make_config, 4, hop_latency=50)
    # IPU 0 -> IPU 2: 2 hops both ways; ties go upward 0 -> 1 -> 2.
    cost = exchange_cost(cfg, [0], [16], [400])
    assert cost.link_bytes == {(0, 1): 400, (1, 2): 400}
    # link 400 / 8 = 50, tile 400 / 4 = 100 -> 100 + 2 hops * 50 = 200
    assert cost.cycles == 200


def test_ring_wraps_around(make_config):
    cfg = link_config(make_config, 4)
    # IPU 3 -> IPU 1: tie -> upward 3 -> 0 -> 1; IPU 1 -> IPU 0: one hop down.
    cost = exchange_cost(cfg, [24, 8], [8, 0], [16, 24])
    assert cost.link_bytes == {(3, 0): 16, (0, 1): 16, (1, 0): 24}


def test_ring_downward_multi_hop(make_config):
    cfg = link_config(make_config, 5)
    # ring of 5, IPU 0 -> IPU 3: 3 hops up, 2 hops down -> 0 -> 4 -> 3
    cost = exchange_cost(cfg, [0], [24], [40])
    assert cost.link_bytes == {(0, 4): 40, (4, 3): 40}


def test_ring_contention_sums_bytes_on_a_shared_hop(make_config):
    cfg = link_config(make_config, 4, link_gbs=2.0, hop_latency=10)
    # tile 0 (IPU 0) -> tile 16 (IPU 2): hops (0,1), (1,2); 1000 B
    # tile 8 (IPU 1) -> tile 17 (IPU 2): hop (1,2); 600 B
    cost = exchange_cost(cfg, [0, 8], [16, 17], [1000, 600])
    assert cost.link_bytes == {(0, 1): 1000, (1, 2): 1600}
    # hop (1,2): 1600 / 2 = 800 > tile 0: 1000 / 4 = 250; + 10 * 2 hops -> 820
    assert cost.cycles == 820


def test_line_topology_does_not_wrap(make_config):
    cfg = link_config(make_config, 4, "line", hop_latency=5)
    # IPU 3 -> IPU 0 has to walk 3 -> 2 -> 1 -> 0; IPU 0 -> IPU 3 walks upward.
    cost = exchange_cost(cfg, [24, 0], [0, 24], [80, 8])
    assert cost.link_bytes == {
        (3, 2): 80, (2, 1): 80, (1, 0): 80, (0, 1): 8, (1, 2): 8, (2, 3): 8,
    }  # fmt: skip
    # link 80 / 8 = 10; tile 24 sends 80 and receives 8: 80 / 4 = 20; + 5 * 3 hops -> 35
    assert cost.cycles == 35


def test_full_topology_direct_hops(make_config):
    cfg = link_config(make_config, 4, "full", hop_latency=7)
    cost = exchange_cost(cfg, [0, 8, 24], [16, 17, 18], [80, 80, 80])
    assert cost.link_bytes == {(0, 2): 80, (1, 2): 80, (3, 2): 80}
    # link 80 / 8 = 10, tile 80 / 4 = 20; + 7 * 1 hop -> 27
    assert cost.cycles == 27


def test_same_ipu_transfers_use_no_link(make_config):
    cfg = link_config(make_config, 2, hop_latency=50)
    cost = exchange_cost(cfg, [0], [1], [40])
    assert cost.link_bytes == {}
    assert cost.cycles == 10  # 40 / 4, no hop latency


def test_empty_global_exchange(make_config):
    cost = exchange_cost(link_config(make_config, 4), [], [], [])
    assert cost.cycles == 0
    assert cost.link_bytes == {}
    assert not cost.bytes_sent.any()


def _reference_link_bytes(n, topology, src_ipu, dst_ipu, nbytes):
    """Route each transfer hop by hop with a plain loop."""
    out = {}
    for a, b, v in zip(src_ipu, dst_ipu, nbytes, strict=True):
        a, b, v = int(a), int(b), int(v)
        if a == b:
            continue
        if topology == "full":
            path = [(a, b)]
        elif topology == "line":
            step = 1 if b > a else -1
            path = [(k, k + step) for k in range(a, b, step)]
        else:
            up = (b - a) % n
            step = 1 if up <= n - up else -1
            path, k = [], a
            while k != b:
                path.append((k, (k + step) % n))
                k = (k + step) % n
        for hop in path:
            out[hop] = out.get(hop, 0) + v
    return {k: v for k, v in out.items() if v > 0}


@pytest.mark.parametrize(("n", "topology"), [(5, "ring"), (6, "ring"), (6, "line"), (4, "full")])
def test_random_routing_matches_a_hop_by_hop_reference(make_config, n, topology):
    cfg = link_config(make_config, n, topology)
    rng = np.random.default_rng(n)
    src = rng.integers(0, cfg.num_tiles, 200)
    dst = rng.integers(0, cfg.num_tiles, 200)
    nbytes = rng.integers(0, 1000, 200)
    cost = exchange_cost(cfg, src, dst, nbytes)
    expected = _reference_link_bytes(n, topology, src // 8, dst // 8, nbytes)
    assert cost.link_bytes == expected


def test_bad_transfer_is_rejected(make_config):
    with pytest.raises(IRValidationError, match=r"global exchange: transfer 0 has dst_tile 32"):
        exchange_cost(link_config(make_config, 4), [0], [32], [4])
