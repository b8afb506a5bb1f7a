"""IPU-Link topologies: wiring, routing, GW-Links, the multi-IPU presets and bad configs.

Base machine (tests/conftest.py): 8 tiles per IPU (IPU k holds tiles 8k .. 8k+7),
1 GHz clock, exchange 4 B/cycle per tile, one IPU-Link hop 8 B/cycle (8 GB/s).
Routes are checked against a breadth-first search written here, not against the
module's own tables.
"""

from __future__ import annotations

import re
import time
from collections import deque

import numpy as np
import pytest
from links_common import exchange_cost, link_config
from pydantic import ValidationError

from ipusim.config import list_presets, load_config, preset_path
from ipusim.errors import ConfigError, IpusimError
from ipusim.exchange.links import link_hops
from ipusim.exchange.topology import LinkRoutingError, Topology, topology_of

NEW_PRESETS = ("m2000", "bow2000", "pod16", "pod64")


# ------------------------------------------------------------------ reference routing
def _adjacency(n, pairs):
    adj = {u: set() for u in range(n)}
    for a, b in pairs:
        adj[a].add(b)
        adj[b].add(a)
    return adj


def _bfs(adj, start):
    dist = {start: 0}
    queue = deque([start])
    while queue:
        u = queue.popleft()
        for v in adj[u]:
            if v not in dist:
                dist[v] = dist[u] + 1
                queue.append(v)
    return dist


def _reference_route(adj, n, src, dst):
    """Shortest route; ties to the neighbour v with the smallest (v - u) mod n."""
    to_dst = _bfs(adj, dst)
    route, u = [], src
    while u != dst:
        v = min((v for v in adj[u] if to_dst.get(v) == to_dst[u] - 1), key=lambda v: (v - u) % n)
        route.append((u, v))
        u = v
    return tuple(route)


def _ring(n):
    return {(i, (i + 1) % n) for i in range(n)} if n > 1 else set()


def _ladder(n, torus):
    """By hand: rungs 2r-(2r+1), columns i-(i+2), torus (n-2)-0 and (n-1)-1."""
    pairs = {(2 * r, 2 * r + 1) for r in range(n // 2)}
    pairs |= {(i, i + 2) for i in range(n - 2)}
    if torus and n >= 4:
        pairs |= {(n - 2, 0), (n - 1, 1)}
    return pairs


CASES = [
    ("ring", 7, {}, _ring(7)),
    ("ring", 8, {}, _ring(8)),
    ("line", 6, {}, {(i, i + 1) for i in range(5)}),
    ("full", 5, {}, {(a, b) for a in range(5) for b in range(a + 1, 5)}),
    ("ladder", 8, {}, _ladder(8, False)),
    ("ladder", 12, {"torus": True}, _ladder(12, True)),
    ("custom", 6, {"edges": [[0, 3], [3, 5], [5, 1], [1, 4], [4, 2], [0, 2]]}, None),
]


@pytest.mark.parametrize(("topology", "n", "extra", "pairs"), CASES)
def test_every_route_is_a_shortest_path_with_the_upward_tie_break(
    make_config, topology, n, extra, pairs
):
    if pairs is None:
        pairs = {tuple(e) for e in extra["edges"]}
    cfg = link_config(make_config, n, topology, **extra)
    topo = topology_of(cfg)
    adj = _adjacency(n, pairs)
    expected_hops = sorted({(a, b) for a, b in pairs} | {(b, a) for a, b in pairs})
    assert topo.hops() == expected_hops
    for u in range(n):
        assert topo.neighbours(u) == sorted(adj[u])
        dist = _bfs(adj, u)
        for d in range(n):
            route = topo.route(u, d)
            assert route == _reference_route(adj, n, u, d), (u, d)
            assert len(route) == dist[d] == topo.distances[u, d]
    src, dst = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    hops = link_hops(cfg, src, dst)
    assert hops.shape == (n, n)
    assert all(hops[u, d] == _bfs(adj, u)[d] for u in range(n) for d in range(n))


def test_ring_line_and_full_keep_their_hop_formulas(make_config):
    rng = np.random.default_rng(3)
    src, dst = rng.integers(0, 9, 100), rng.integers(0, 9, 100)
    d = np.abs(dst - src)
    ring = link_hops(link_config(make_config, 9, "ring"), src, dst)
    np.testing.assert_array_equal(ring, np.minimum(d, 9 - d))
    np.testing.assert_array_equal(link_hops(link_config(make_config, 9, "line"), src, dst), d)
    np.testing.assert_array_equal(link_hops(link_config(make_config, 9, "full"), src, dst), d > 0)


def test_ring_ties_go_upward_and_shorter_ways_win(make_config):
    topo = topology_of(link_config(make_config, 6))
    assert topo.route(0, 3) == ((0, 1), (1, 2), (2, 3))  # 3 both ways: upward
    assert topo.route(4, 1) == ((4, 5), (5, 0), (0, 1))  # tie, upward across the wrap
    assert topo.route(0, 4) == ((0, 5), (5, 4))  # downward is shorter
    assert topo.route(2, 2) == ()


# ------------------------------------------------------------------------------ ladder
def test_ladder_of_eight_by_hand(make_config):
    topo = topology_of(link_config(make_config, 8, "ladder"))
    # row r holds IPUs 2r (column 0) and 2r + 1 (column 1)
    assert topo.neighbours(0) == [1, 2]
    assert topo.neighbours(3) == [1, 2, 5]
    assert topo.neighbours(7) == [5, 6]
    assert topo.route(0, 7) == ((0, 1), (1, 3), (3, 5), (5, 7))
    assert topo.route(1, 2) == ((1, 3), (3, 2))  # (3 - 1) mod 8 = 2 beats (0 - 1) mod 8 = 7
    assert int(topo.distances.max()) == 4
    torus = topology_of(link_config(make_config, 8, "ladder", torus=True))
    assert torus.neighbours(0) == [1, 2, 6]
    assert torus.neighbours(7) == [1, 5, 6]
    assert torus.route(0, 7) == ((0, 1), (1, 7))  # over the loop-back link
    assert int(torus.distances.max()) == 3


def test_small_ladders(make_config):
    assert topology_of(link_config(make_config, 2, "ladder")).hops() == [(0, 1), (1, 0)]
    two_rows = topology_of(link_config(make_config, 4, "ladder"))
    wrapped = topology_of(link_config(make_config, 4, "ladder", torus=True))
    assert two_rows.hops() == wrapped.hops()  # the wrap repeats the column links
    assert len(two_rows.hops()) == 8  # the 2 x 2 ladder is a ring 0-1-3-2
    assert topology_of(link_config(make_config, 1, "ladder")).hops() == []


def test_ladder_exchange_cost_by_hand(make_config):
    cfg = link_config(make_config, 8, "ladder", hop_latency=10)
    # IPU 0 -> IPU 7: 0 -> 1 -> 3 -> 5 -> 7; IPU 2 -> IPU 3: rung 2 -> 3
    cost = exchange_cost(cfg, [0, 16], [56, 24], [800, 80])
    assert cost.link_bytes == {(0, 1): 800, (1, 3): 800, (3, 5): 800, (5, 7): 800, (2, 3): 80}
    # hops 800 / 8 = 100; tiles 800 / 4 = 200; + 10 x 4 hops -> 240
    assert cost.cycles == 240


# ------------------------------------------------------------------------------ custom
def test_custom_edges_route_and_carry_bytes(make_config):
    # a star around IPU 2 plus the edge 3-4
    cfg = link_config(
        make_config, 5, "custom", hop_latency=5, edges=[[2, 0], [2, 1], [2, 3], [3, 4]]
    )
    topo = topology_of(cfg)
    assert topo.neighbours(2) == [0, 1, 3]
    assert topo.route(0, 4) == ((0, 2), (2, 3), (3, 4))
    assert topo.capacity((2, 3)) == 8.0 and topo.latency((2, 3)) == 5
    cost = exchange_cost(cfg, [0, 8], [32, 16], [160, 40])
    assert cost.link_bytes == {(0, 2): 160, (2, 3): 160, (3, 4): 160, (1, 2): 40}
    assert cost.cycles == 40 + 3 * 5  # tile 0: 160 / 4 = 40 > hop 160 / 8 = 20


def test_routing_off_allows_only_neighbours(make_config):
    cfg = link_config(make_config, 4, "ring", routing=False)
    topo = topology_of(cfg)
    assert topo.route(0, 1) == ((0, 1),)
    assert topo.route(0, 3) == ((0, 3),)
    with pytest.raises(LinkRoutingError) as info:
        topo.route(0, 2)
    message = str(info.value)
    assert "IPU 0" in message and "IPU 2" in message and "'ring'" in message
    assert "links.routing: false" in message and "hint:" in message
    assert isinstance(info.value, IpusimError)
    with pytest.raises(LinkRoutingError, match=r"IPU 1 to IPU 3"):
        link_hops(cfg, np.array([0, 1]), np.array([1, 3]))
    np.testing.assert_array_equal(link_hops(cfg, np.array([0, 2]), np.array([1, 2])), [1, 0])
    # a global exchange names the transfer, its tiles and IPUs
    assert exchange_cost(cfg, [0], [8], [4]).link_bytes == {(0, 1): 4}
    with pytest.raises(LinkRoutingError, match=r"transfer 1 \(tile 9 on IPU 1 -> tile 26"):
        exchange_cost(cfg, [0, 9], [8, 26], [4, 4])


def test_routing_off_may_leave_a_custom_graph_disconnected(make_config):
    cfg = link_config(make_config, 4, "custom", edges=[[0, 1], [2, 3]], routing=False)
    topo = topology_of(cfg)
    assert topo.route(3, 2) == ((3, 2),)
    with pytest.raises(LinkRoutingError, match=r"from IPU 1 to IPU 2.*neighbours of IPU 1: \[0\]"):
        topo.route(1, 2)


def test_a_disconnected_topology_built_directly_names_what_is_reached():
    from ipusim.exchange.topology import Wiring

    w = Wiring(4, 4, np.array([[0, 1], [2, 3]]), np.zeros((0, 2), dtype=np.int64))
    topo = Topology(w, ipu_capacity=1.0, ipu_latency=0)
    with pytest.raises(LinkRoutingError, match=r"IPU 0 to IPU 3.*reaches only IPUs \[0, 1\]"):
        topo.route(0, 3)
    with pytest.raises(LinkRoutingError, match=r"found IPU 4; expected an IPU of the machine"):
        topo.route(0, 4)
    with pytest.raises(LinkRoutingError, match=r"not joined by a link"):
        topo.capacity((0, 2))


# ---------------------------------------------------------------------------- GW-Links
def _racks(make_config, n=16, gw_topology="ring", **gw):
    return link_config(
        make_config,
        n,
        "ring",
        hop_latency=10,
        gw_links={
            "ipus_per_rack": 8,
            "ipus_per_gateway": 4,
            "topology": gw_topology,
            "bandwidth_bytes_per_s": 2e9,  # 2 bytes per cycle at 1 GHz
            "hop_latency_s": 1e-6,  # 1000 cycles
            **gw,
        },
    )


def test_gw_links_join_the_gateways_of_neighbouring_racks(make_config):
    topo = topology_of(_racks(make_config))
    gw = [h for h in topo.hops() if topo.is_gw_link(h)]
    # two racks of 8 IPUs, gateways at IPUs 0 and 4 of each rack
    assert gw == [(0, 8), (4, 12), (8, 0), (12, 4)]
    assert topo.capacity((0, 8)) == 2.0 and topo.latency((0, 8)) == 1000
    assert topo.capacity((0, 1)) == 8.0 and topo.latency((0, 1)) == 10
    assert not topo.is_gw_link((8, 9))
    # each rack is its own ring of 8: IPU 7 and IPU 8 are not joined
    assert topo.neighbours(7) == [0, 6]
    assert topo.route(1, 9) == ((1, 0), (0, 8), (8, 9))


def test_inter_rack_exchange_pays_gw_capacity_and_latency(make_config):
    cfg = _racks(make_config, links_between_racks=2)  # 2 links: 4 bytes per cycle
    # tile 8 (IPU 1) -> tile 72 (IPU 9): route 1 -> 0 -> 8 -> 9
    cost = exchange_cost(cfg, [8], [72], [2000])
    assert cost.link_bytes == {(1, 0): 2000, (0, 8): 2000, (8, 9): 2000}
    # GW hop 2000 / 4 = 500 = tile 2000 / 4 = 500 > IPU-Link 2000 / 8 = 250;
    # latency 10 + 1000 + 10
    assert cost.cycles == 500 + 1020
    single = exchange_cost(_racks(make_config), [8], [72], [2000])
    assert single.cycles == 1000 + 1020  # one GW-Link: 2000 / 2


@pytest.mark.parametrize(
    ("gw_topology", "rack_pairs"),
    [("ring", {(0, 1), (1, 2), (2, 3), (0, 3)}), ("line", {(0, 1), (1, 2), (2, 3)}),
     ("full", {(a, b) for a in range(4) for b in range(a + 1, 4)})],
)  # fmt: skip
def test_racks_are_joined_by_the_gw_topology(make_config, gw_topology, rack_pairs):
    topo = topology_of(_racks(make_config, 32, gw_topology))
    joined = {(a // 8, b // 8) for a, b in topo.hops() if topo.is_gw_link((a, b)) and a < b}
    assert joined == rack_pairs
    assert all(a % 4 == 0 and b % 8 == a % 8 for a, b in topo.hops() if topo.is_gw_link((a, b)))


def test_racks_must_be_whole(make_config):
    with pytest.raises(ValidationError, match=r"links.gw_links.ipus_per_rack: found 8 with num_i"):
        _racks(make_config, 12)
    # fewer IPUs than a rack: one rack, no GW-Links
    topo = topology_of(_racks(make_config, 4))
    assert not any(topo.is_gw_link(h) for h in topo.hops())


# ----------------------------------------------------------------------------- presets
@pytest.mark.parametrize(
    ("name", "num_ipus", "arch", "torus", "rack"),
    [("m2000", 4, "ipu2", False, None), ("bow2000", 4, "ipu21", False, None),
     ("pod16", 16, "ipu2", True, None), ("pod64", 64, "ipu2", True, 64)],
)  # fmt: skip
def test_new_presets_load_with_their_ipus_and_topology(name, num_ipus, arch, torus, rack):
    assert name in list_presets()
    cfg = load_config(name)
    assert (cfg.name, cfg.num_ipus, cfg.arch) == (name, num_ipus, arch)
    assert cfg.links.topology == "ladder" and cfg.links.torus is torus
    assert cfg.links.routing is True
    assert cfg.links.gw_links.ipus_per_rack == rack
    assert cfg.tile.tiles_per_ipu == 1472
    topo = topology_of(cfg)
    assert topo.num_ipus == num_ipus
    assert not any(topo.is_gw_link(h) for h in topo.hops())  # one rack each


def test_preset_numbers():
    m2000, mk2 = load_config("m2000"), load_config("mk2")
    # the ladder, and four links within each card (Poplibs' numIntraIpuLinks)
    assert m2000.links == mk2.links.model_copy(
        update={"topology": "ladder", "links_within_card": 4}
    )
    assert load_config("bow2000").tile == load_config("bow").tile
    pod64 = load_config("pod64")
    gw = pod64.links.gw_links
    assert gw.bandwidth_bytes_per_s == 100e9 / 8
    assert (gw.ipus_per_gateway, gw.topology, gw.links_between_racks) == (4, "ring", 1)
    topo = topology_of(pod64)
    assert int(topo.distances.max()) == 17  # 16 rows along a column loop of 32, one rung
    assert topology_of(load_config("pod16")).distances.max() == 5  # 4 + 1


def test_pod64_scales_to_multi_rack_pods_with_gw_links():
    cfg = load_config("pod64", {"num_ipus": 256})
    topo = topology_of(cfg)
    gw = [h for h in topo.hops() if topo.is_gw_link(h)]
    assert len(gw) == 4 * 16 * 2  # 4 racks in a ring, 16 gateways each, both directions
    route = topo.route(1, 200)  # rack 0 to rack 3 (neighbours on the ring of racks)
    assert sum(topo.is_gw_link(h) for h in route) == 1
    clock = cfg.tile.clock_hz
    assert topo.capacity((0, 64)) == pytest.approx(12.5e9 / clock)
    assert topo.latency((0, 64)) == int(np.ceil(round(2e-6 * clock, 9)))
    with pytest.raises(
        ConfigError, match=r"links.gw_links.ipus_per_rack: found 64 with num_ipus = 96"
    ):
        load_config("pod64", {"num_ipus": 96})


@pytest.mark.parametrize("name", NEW_PRESETS)
def test_every_new_preset_value_says_where_it_comes_from(name):
    lines = preset_path(name).read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#")
    for line in lines:
        match = re.match(r"^\s*(\w+):\s*[^\s#]", line)
        if match is None or match.group(1) in ("name", "description", "extends"):
            continue
        assert re.search(r"estimate:|sources.md#", line.partition("#")[2]), line


def test_routing_a_64_ipu_machine_is_cheap():
    cfg = load_config("pod64")
    links = cfg.links.model_copy(update={"hop_latency_cycles": 99})  # not in the cache yet
    start = time.perf_counter()
    topo = topology_of(cfg.model_copy(update={"links": links}))
    n = cfg.num_ipus
    src, dst = np.divmod(np.arange(n * n), n)
    traffic, latency = topo.route_traffic(src, dst, np.full(n * n, 1000))
    assert time.perf_counter() - start < 2.0
    assert latency.max() == 17 * 99
    # all-to-all on a vertex-transitive torus: every directed hop is used
    assert len(traffic) == len(topo.hops())


def test_topology_of_is_cached_by_content(make_config):
    a = topology_of(link_config(make_config, 6, "ladder"))
    assert topology_of(link_config(make_config, 6, "ladder")) is a
    assert topology_of(link_config(make_config, 6, "ring")) is not a


# ------------------------------------------------------------------------- bad configs
def _problems(source, overrides=None):
    with pytest.raises(ConfigError) as info:
        load_config(source, overrides)
    return info.value.problems


def test_edge_out_of_range_names_the_file_and_path(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(
        "extends: tiny\nnum_ipus: 4\nlinks:\n  topology: custom\n  edges: [[0, 1], [1, 4]]\n",
        encoding="utf-8",
    )
    (line,) = _problems(path)
    assert line.startswith(f"{path}: links.edges: found edge [1, 4] with 4 IPUs per rack")
    assert "expected IPU ids 0..3" in line and "hint:" in line


@pytest.mark.parametrize(
    ("edges", "needle"),
    [([[1, 1]], "edge 0: found [1, 1], an IPU joined to itself"),
     ([[0, 1], [1, 0]], "edge 1: found [1, 0], already given as edge 0"),
     ([[0, True]], "edge 0: found [0, True]; expected a pair of IPU ids"),
     ([[0, -1]], "edge 0: found [0, -1]; expected IPU ids >= 0")],
)  # fmt: skip
def test_bad_edges(edges, needle):
    (line,) = _problems("tiny", {"num_ipus": 4, "links.topology": "custom", "links.edges": edges})
    assert line.startswith("<overrides>: links.edges: ")
    assert needle in line


def test_disconnected_custom_graph_with_routing_on():
    overrides = {"num_ipus": 5, "links.topology": "custom", "links.edges": [[0, 1], [2, 3]]}
    (line,) = _problems("tiny", overrides)
    assert line.startswith("<overrides>: links.edges: found 2 edge(s) leaving the IPUs in 3")
    assert "[0, 1]; [2, 3]; [4]" in line and "links.routing: false" in line


def test_bad_topology_name():
    (line,) = _problems("tiny", {"links.topology": "torus"})
    assert line.startswith("<overrides>: links.topology: found 'torus'; input should be")
    assert "'ladder'" in line and "links.torus: true" in line


RACK = "links.gw_links.ipus_per_rack"


@pytest.mark.parametrize(
    ("overrides", "start"),
    [({"num_ipus": 6, "links.topology": "ladder", "links.torus": True, RACK: 3},
      "links.topology: found 'ladder' with 3 IPUs per rack"),
     ({"num_ipus": 5, "links.topology": "ladder"}, "links.topology: found 'ladder' with 5"),
     ({"links.torus": True}, "links.torus: found true with links.topology = 'ring'"),
     ({"links.edges": [[0, 1]]}, "links.edges: found 1 edge(s) with links.topology"),
     ({RACK: 8, "links.gw_links.ipus_per_gateway": 3},
      f"links.gw_links.ipus_per_gateway: found 3 with {RACK} = 8")],
)  # fmt: skip
def test_inconsistent_link_fields(overrides, start):
    (line,) = _problems("tiny", overrides)
    assert line.startswith(f"<overrides>: {start}"), line
    assert "expected" in line


def test_new_fields_default_to_the_old_behaviour():
    cfg = load_config("tiny")
    links = cfg.links
    assert (links.torus, links.edges, links.routing) == (False, (), True)
    assert links.gw_links.ipus_per_rack is None
