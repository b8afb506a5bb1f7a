"""IPU-Link topologies: which IPUs are joined, how a copy is routed, what each hop carries.

The rules (stated in docs/machine.md, "IPU-Links"):

* **Racks.** The machine's IPUs are split into racks (IPU-Link domains) of
  ``links.gw_links.ipus_per_rack`` consecutive IPUs; unset, the whole machine is one
  rack. Every rack is wired alike by ``links.topology``, with rack-local ids ``i``
  (global id ``r * rack_size + i``):

  - ``ring``: ``i - (i + 1) mod n``; ``line``: ``i - (i + 1)``; ``full``: every pair;
  - ``ladder``: two columns, IPU ``i`` in row ``i // 2``, column ``i % 2``: rungs
    ``2r - (2r + 1)`` and column links ``i - (i + 2)``; with ``links.torus`` also
    ``(n - 2) - 0`` and ``(n - 1) - 1``, closing each column into a loop;
  - ``custom``: the pairs of ``links.edges``.

  A pair is joined once, however many rules name it.
* **GW-Links.** Racks are joined by ``links.gw_links.topology`` (ring, line or full over
  the rack numbers); for two joined racks ``r`` and ``s`` the first IPU of every group of
  ``ipus_per_gateway`` (the IPU standing for that IPU-Machine's gateway) is joined to the
  IPU at the same place of the other rack.
* **Hops.** Every pair is two directed hops ``(a, b)`` and ``(b, a)``, each with the
  capacity of all its parallel links in one direction (bytes per tile cycle) and a
  latency in cycles: IPU-Links ``links.bandwidth_bytes_per_s x links_between_neighbours``
  (``x links_within_card``, when set, for the hop joining the two IPUs of a card, IPUs
  ``2k`` and ``2k + 1``) and ``links.hop_latency_cycles``; GW-Links
  ``gw_links.bandwidth_bytes_per_s x links_between_racks`` and
  ``ceil(gw_links.hop_latency_s x clock)``.
* **Routing.** A copy follows a shortest route (fewest hops). Where several neighbours
  of the current IPU ``u`` lie on a shortest route to the destination, the route takes
  the one met first going upward from ``u``: the smallest ``(v - u) mod num_ipus``. On a
  ring this is "equal ways go upward". With ``links.routing: false`` only direct
  neighbours exchange; any other copy is a :class:`LinkRoutingError`.

Distances come from :func:`scipy.sparse.csgraph.shortest_path` and the next hop of every
(IPU, destination) pair is tabulated once per topology, so routing a copy is a walk
through a table; :func:`topology_of` caches the topology of a config.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ipusim.errors import IpusimError

if TYPE_CHECKING:
    from scipy.sparse import csr_matrix

    from ipusim.config import LinksConfig, MachineConfig

__all__ = [
    "LinkRoutingError",
    "Topology",
    "Wiring",
    "components",
    "domain_pairs",
    "topology_of",
    "wiring",
]

Hop = tuple[int, int]

#: Most IPU ids listed in one error message.
_MAX_LISTED = 12


#: Machines of at most this many IPUs have their hop distances found with dense numpy
#: products (no scipy import: a fresh process would spend about 0.2 s importing it).
_DENSE_BFS_IPUS = 256


class LinkRoutingError(IpusimError, ValueError):
    """A copy between two IPUs that the topology does not connect.

    Raised when no route exists, or when ``links.routing`` is false and the two IPUs
    are not direct neighbours; the message names both IPUs, the topology and a hint.
    """


# ------------------------------------------------------------------------------ wiring
def _pairs(a: np.ndarray, b: np.ndarray, n: int) -> np.ndarray:
    """Undirected pairs ``(lo, hi)``, self-pairs dropped, each once, sorted: int64[k, 2]."""
    a = np.asarray(a, dtype=np.int64).ravel()
    b = np.asarray(b, dtype=np.int64).ravel()
    lo, hi = np.minimum(a, b), np.maximum(a, b)
    keep = lo != hi
    key = np.unique(lo[keep] * max(n, 1) + hi[keep])
    return np.stack([key // max(n, 1), key % max(n, 1)], axis=1).astype(np.int64)


def domain_pairs(
    topology: str, n: int, *, torus: bool = False, edges: tuple[tuple[int, int], ...] = ()
) -> np.ndarray:
    """IPU-Link pairs of one rack of ``n`` IPUs, rack-local ids.

    Parameters
    ----------
    topology
        ``ring``, ``line``, ``full``, ``ladder`` or ``custom``.
    n
        IPUs of the rack.
    torus
        Ladder only: join the ends of both columns.
    edges
        Custom only: the pairs.

    Returns
    -------
    numpy.ndarray
        int64[k, 2]: pairs ``(a, b)`` with ``a < b``, each once, sorted.
    """
    i = np.arange(n, dtype=np.int64)
    if topology == "ring":
        return _pairs(i, (i + 1) % max(n, 1), n)
    if topology == "line":
        return _pairs(i[:-1], i[1:], n)
    if topology == "full":
        a, b = np.triu_indices(n, 1)
        return _pairs(a, b, n)
    if topology == "ladder":
        rungs = i[(i % 2 == 0) & (i + 1 < n)]
        columns = i[i + 2 < n]
        a = [rungs, columns]
        b = [rungs + 1, columns + 2]
        if torus and n >= 4:
            a.append(np.array([n - 2, n - 1]))
            b.append(np.array([0, 1]))
        return _pairs(np.concatenate(a), np.concatenate(b), n)
    if topology == "custom":
        arr = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
        return _pairs(arr[:, 0], arr[:, 1], n)
    raise ValueError(f"unknown IPU-Link topology {topology!r}")


@dataclass(frozen=True)
class Wiring:
    """The links of a whole machine.

    Attributes
    ----------
    num_ipus
        IPUs of the machine.
    rack_size
        IPUs per rack (``num_ipus`` for one rack).
    ipu_links
        int64[k, 2]: IPU-Link pairs ``(a, b)``, ``a < b``, global ids, sorted.
    gw_links
        int64[g, 2]: GW-Link pairs, global ids, sorted.
    """

    num_ipus: int
    rack_size: int
    ipu_links: np.ndarray
    gw_links: np.ndarray

    @property
    def num_racks(self) -> int:
        return self.num_ipus // self.rack_size


def _rack_pairs(topology: str, racks: int) -> np.ndarray:
    if topology == "full":
        return domain_pairs("full", racks)
    return domain_pairs("ring" if topology == "ring" else "line", racks)


def wiring(num_ipus: int, links: LinksConfig) -> Wiring:
    """IPU-Link and GW-Link pairs of ``num_ipus`` IPUs wired as ``links`` says.

    The config's checks (whole racks, an even ladder, edges in range) are assumed.
    """
    gw = links.gw_links
    size = num_ipus if gw.ipus_per_rack is None else min(gw.ipus_per_rack, num_ipus)
    racks = num_ipus // size
    local = domain_pairs(links.topology, size, torus=links.torus, edges=links.edges)
    offsets = np.arange(racks, dtype=np.int64) * size
    ipu = (local[None, :, :] + offsets[:, None, None]).reshape(-1, 2)
    joined = _rack_pairs(gw.topology, racks)
    gates = np.arange(0, size, gw.ipus_per_gateway, dtype=np.int64)
    a = (joined[:, 0, None] * size + gates[None, :]).ravel()
    b = (joined[:, 1, None] * size + gates[None, :]).ravel()
    return Wiring(num_ipus, size, _pairs(ipu[:, 0], ipu[:, 1], num_ipus), _pairs(a, b, num_ipus))


def _graph(n: int, pairs: np.ndarray) -> csr_matrix:
    from scipy.sparse import csr_matrix  # scipy is loaded only by multi-IPU routing

    rows = np.concatenate([pairs[:, 0], pairs[:, 1]])
    cols = np.concatenate([pairs[:, 1], pairs[:, 0]])
    return csr_matrix((np.ones(rows.size, dtype=np.int8), (rows, cols)), shape=(n, n))


def components(w: Wiring) -> list[list[int]]:
    """Groups of IPUs joined by some path of links, each sorted, ordered by first IPU."""
    from scipy.sparse.csgraph import connected_components

    pairs = np.concatenate([w.ipu_links, w.gw_links])
    _, label = connected_components(_graph(w.num_ipus, pairs), directed=False)
    groups: dict[int, list[int]] = {}
    for ipu, lab in enumerate(label.tolist()):
        groups.setdefault(lab, []).append(ipu)
    return sorted(groups.values(), key=lambda g: g[0])


def _ids(values: np.ndarray | list[int]) -> str:
    items = [int(v) for v in values]
    if len(items) <= _MAX_LISTED:
        return str(items)
    head = ", ".join(str(v) for v in items[:_MAX_LISTED])
    return f"[{head}, ... ({len(items)} in all)]"


# ---------------------------------------------------------------------------- topology
class Topology:
    """Routes, capacities and latencies of the links of one machine.

    Parameters
    ----------
    w
        The links (:func:`wiring`).
    ipu_capacity, ipu_latency
        Bytes per tile cycle (all parallel links, one direction) and cycles of an
        IPU-Link hop.
    card_capacity
        Bytes per tile cycle of an IPU-Link hop joining the two IPUs of a card (``a // 2
        == b // 2``); None: ``ipu_capacity``.
    gw_capacity, gw_latency
        The same for a GW-Link hop.
    routing
        False: only direct neighbours exchange.
    name
        The topology as named in messages, e.g. ``'ladder' (torus)``.

    Attributes
    ----------
    num_ipus
        IPUs of the machine.
    routing
        Whether copies may pass through other IPUs.
    name
        The topology as named in messages.
    wiring
        The links it was built from.
    distances
        int64[num_ipus, num_ipus]: hops of the shortest route (-1: not connected),
        whatever ``routing`` says.
    """

    def __init__(
        self,
        w: Wiring,
        *,
        ipu_capacity: float,
        ipu_latency: int,
        card_capacity: float | None = None,
        gw_capacity: float = 1.0,
        gw_latency: int = 0,
        routing: bool = True,
        name: str = "'custom'",
    ) -> None:
        n = w.num_ipus
        self.num_ipus = n
        self.routing = bool(routing)
        self.name = name
        self.wiring = w
        kinds = [
            (w.ipu_links, ipu_capacity, ipu_latency, False),
            (w.gw_links, gw_capacity, gw_latency, True),
        ]
        src, dst, cap, lat, gw = [], [], [], [], []
        for pairs, capacity, latency, is_gw in kinds:
            for a, b in ((pairs[:, 0], pairs[:, 1]), (pairs[:, 1], pairs[:, 0])):
                src.append(a)
                dst.append(b)
                hop_cap = np.full(a.size, float(capacity))
                if card_capacity is not None and not is_gw:
                    hop_cap[a // 2 == b // 2] = float(card_capacity)
                cap.append(hop_cap)
                lat.append(np.full(a.size, int(latency), dtype=np.int64))
                gw.append(np.full(a.size, is_gw))
        a_all, b_all = np.concatenate(src), np.concatenate(dst)
        order = np.lexsort((b_all, a_all))
        self._hop_src = a_all[order]
        self._hop_dst = b_all[order]
        self._capacity = np.concatenate(cap)[order]
        self._latency = np.concatenate(lat)[order]
        self._is_gw = np.concatenate(gw)[order]
        self._hop_id = np.full((n, n), -1, dtype=np.int64)
        self._hop_id[self._hop_src, self._hop_dst] = np.arange(order.size)
        starts = np.searchsorted(self._hop_src, np.arange(n + 1))
        self._neighbours = [self._hop_dst[starts[u] : starts[u + 1]] for u in range(n)]
        self.distances = self._distances()
        self._next_hop = self._next_hops()
        for arr in (self._hop_src, self._hop_dst, self._capacity, self._latency, self._hop_id):
            arr.setflags(write=False)
        self.distances.setflags(write=False)
        self._next_hop.setflags(write=False)
        self._routes: dict[Hop, tuple[Hop, ...]] = {}

    # ---------------------------------------------------------------- construction
    def _distances(self) -> np.ndarray:
        n = self.num_ipus
        if self._hop_src.size == n * (n - 1):  # fully connected: every pair one hop
            return (1 - np.eye(n, dtype=np.int64)).astype(np.int64)
        if self._hop_src.size == 0:
            dist = np.full((n, n), -1, dtype=np.int64)
            np.fill_diagonal(dist, 0)
            return dist
        if n <= _DENSE_BFS_IPUS:  # breadth first, a level per product of n x n matrices
            adjacent = np.zeros((n, n), np.int64)
            adjacent[self._hop_src, self._hop_dst] = 1
            dist = np.full((n, n), -1, dtype=np.int64)
            np.fill_diagonal(dist, 0)
            frontier = np.eye(n, dtype=np.int64)
            for level in range(1, n):
                frontier = ((frontier @ adjacent) > 0) & (dist < 0)
                if not frontier.any():
                    break
                dist[frontier] = level
                frontier = frontier.astype(np.int64)
            return dist
        from scipy.sparse import csr_matrix
        from scipy.sparse.csgraph import shortest_path

        graph = csr_matrix(
            (np.ones(self._hop_src.size), (self._hop_src, self._hop_dst)), shape=(n, n)
        )
        found = shortest_path(graph, method="D", directed=True, unweighted=True)
        dist = np.where(np.isinf(found), -1, found).astype(np.int64)
        return dist

    def _next_hops(self) -> np.ndarray:
        """next_hop[u, d]: the neighbour of ``u`` a route to ``d`` takes (``u`` when
        ``u == d``, -1 when not connected); ties go to the smallest ``(v - u) mod n``."""
        n = self.num_ipus
        dist = self.distances
        table = np.full((n, n), -1, dtype=np.int64)
        table[np.arange(n), np.arange(n)] = np.arange(n)
        for u in range(n):
            nb = self._neighbours[u]
            if nb.size == 0:
                continue
            nb = nb[np.argsort((nb - u) % n, kind="stable")]
            table[u, nb] = nb
            targets = np.flatnonzero(dist[u] >= 2)
            if targets.size == 0:
                continue
            on_route = dist[np.ix_(nb, targets)] == dist[u, targets] - 1
            table[u, targets] = nb[on_route.argmax(axis=0)]
        return table

    # ------------------------------------------------------------------ public API
    def _check_ipu(self, ipu: int, name: str) -> int:
        if isinstance(ipu, bool) or not isinstance(ipu, int | np.integer):
            raise LinkRoutingError(f"{name}: found {ipu!r}; expected an IPU id (an integer)")
        if not 0 <= ipu < self.num_ipus:
            raise LinkRoutingError(
                f"{name}: found IPU {ipu}; expected an IPU of the machine, 0..{self.num_ipus - 1} "
                f"(num_ipus = {self.num_ipus})"
            )
        return int(ipu)

    def _hop(self, hop: Hop) -> int:
        try:
            a, b = hop
        except (TypeError, ValueError):
            raise LinkRoutingError(
                f"hop: found {hop!r}; expected a pair of IPU ids (a, b)"
            ) from None
        a, b = self._check_ipu(a, "hop"), self._check_ipu(b, "hop")
        index = int(self._hop_id[a, b])
        if index < 0:
            raise LinkRoutingError(
                f"hop ({a}, {b}): IPU {a} and IPU {b} are not joined by a link in topology "
                f"{self.name} (neighbours of IPU {a}: {_ids(self._neighbours[a])}); hint: "
                f"use the hops of Topology.route or Topology.hops()"
            )
        return index

    def no_route_reason(self, src_ipu: int, dst_ipu: int) -> str | None:
        """Why a copy from ``src_ipu`` to ``dst_ipu`` cannot be routed, or None."""
        a, b = int(src_ipu), int(dst_ipu)
        if a == b:
            return None
        if not self.routing:
            if self._hop_id[a, b] >= 0:
                return None
            return (
                f"no IPU-Link route from IPU {a} to IPU {b}: topology {self.name} has "
                f"links.routing: false and IPU {b} is not a direct neighbour of IPU {a} "
                f"(neighbours of IPU {a}: {_ids(self._neighbours[a])}); hint: set "
                f"links.routing: true to route through other IPUs, or copy between "
                f"neighbours only"
            )
        if self.distances[a, b] >= 0:
            return None
        reach = np.flatnonzero(self.distances[a] >= 0)
        return (
            f"no IPU-Link route from IPU {a} to IPU {b}: topology {self.name} does not "
            f"connect them (IPU {a} reaches only IPUs {_ids(reach)}); hint: add a link "
            f"joining the two groups (links.edges)"
        )

    def route(self, src_ipu: int, dst_ipu: int) -> tuple[Hop, ...]:
        """Directed hops ``(a, b)`` of the route from ``src_ipu`` to ``dst_ipu``.

        Returns
        -------
        tuple
            ``()`` when ``src_ipu == dst_ipu``.

        Raises
        ------
        LinkRoutingError
            No route exists, or ``links.routing`` is false and the IPUs are not direct
            neighbours; the message names both IPUs, the topology and a hint.
        """
        a = self._check_ipu(src_ipu, "route: src_ipu")
        b = self._check_ipu(dst_ipu, "route: dst_ipu")
        key = (a, b)
        cached = self._routes.get(key)
        if cached is not None:
            return cached
        reason = self.no_route_reason(a, b)
        if reason is not None:
            raise LinkRoutingError(reason)
        hops = []
        u = a
        while u != b:
            v = int(self._next_hop[u, b])
            hops.append((u, v))
            u = v
        route = tuple(hops)
        self._routes[key] = route
        return route

    def capacity(self, hop: Hop) -> float:
        """Bytes per tile clock cycle of the directed ``hop``, all its parallel links
        together."""
        return float(self._capacity[self._hop(hop)])

    def latency(self, hop: Hop) -> int:
        """Cycles for one crossing of ``hop``."""
        return int(self._latency[self._hop(hop)])

    def is_gw_link(self, hop: Hop) -> bool:
        """Whether ``hop`` is a GW-Link (between racks) rather than an IPU-Link."""
        return bool(self._is_gw[self._hop(hop)])

    def hops(self) -> list[Hop]:
        """Every directed hop, sorted."""
        return list(zip(self._hop_src.tolist(), self._hop_dst.tolist(), strict=True))

    def neighbours(self, ipu: int) -> list[int]:
        """IPUs joined to ``ipu`` by a link, ascending."""
        return self._neighbours[self._check_ipu(ipu, "neighbours: ipu")].tolist()

    # ------------------------------------------------------------ vectorised helpers
    def capacities(self, src_ipu: np.ndarray, dst_ipu: np.ndarray) -> np.ndarray:
        """float64 capacity (bytes per cycle) of many hops ``(src_ipu[i], dst_ipu[i])``.

        Raises
        ------
        LinkRoutingError
            For the first pair that is not a hop.
        """
        src, dst = np.broadcast_arrays(np.asarray(src_ipu), np.asarray(dst_ipu))
        index = self._hop_id[src, dst]
        if (index < 0).any():
            i = np.unravel_index(int(np.flatnonzero(index.ravel() < 0)[0]), index.shape)
            self._hop((int(src[i]), int(dst[i])))
        return self._capacity[index]

    def unroutable(self, src_ipu: np.ndarray, dst_ipu: np.ndarray) -> np.ndarray:
        """bool mask (broadcast shape): copies that :meth:`route` would refuse.

        IPU ids are assumed to be in range.
        """
        src, dst = np.broadcast_arrays(np.asarray(src_ipu), np.asarray(dst_ipu))
        remote = src != dst
        if self.routing:
            return remote & (self.distances[src, dst] < 0)
        return remote & (self._hop_id[src, dst] < 0)

    def hop_counts(self, src_ipu: np.ndarray, dst_ipu: np.ndarray) -> np.ndarray:
        """int64 hops of the routes of many copies (broadcast shape; 0 for the same IPU).

        Raises
        ------
        LinkRoutingError
            For the first copy that cannot be routed.
        """
        src, dst = np.broadcast_arrays(np.asarray(src_ipu), np.asarray(dst_ipu))
        bad = self.unroutable(src, dst)
        if bad.any():
            i = np.unravel_index(int(np.flatnonzero(bad.ravel())[0]), bad.shape)
            raise LinkRoutingError(str(self.no_route_reason(src[i], dst[i])))
        return self.distances[src, dst].astype(np.int64)

    def route_traffic(
        self, src_ipu: np.ndarray, dst_ipu: np.ndarray, num_bytes: np.ndarray
    ) -> tuple[dict[Hop, int], np.ndarray]:
        """Bytes per directed hop and latency of each route, for many copies at once.

        Parameters
        ----------
        src_ipu, dst_ipu, num_bytes
            int[k]: copies (the same IPU twice: no hop).

        Returns
        -------
        tuple
            ``(hop_bytes, latency)``: bytes carried by each hop that carries some, and
            int64[k] cycles of each copy's route (sum of its hops' latencies).

        Raises
        ------
        LinkRoutingError
            For the first copy that cannot be routed.
        """
        src = np.asarray(src_ipu, dtype=np.int64).ravel()
        dst = np.asarray(dst_ipu, dtype=np.int64).ravel()
        nbytes = np.asarray(num_bytes, dtype=np.int64).ravel()
        self.hop_counts(src, dst)  # raises for an unroutable copy
        loads = np.zeros(self._hop_src.size, dtype=np.int64)
        latency = np.zeros(src.size, dtype=np.int64)
        pos = np.flatnonzero(src != dst)
        cur, dest, load = src[pos], dst[pos], nbytes[pos]
        while pos.size:
            nxt = self._next_hop[cur, dest]
            hop = self._hop_id[cur, nxt]
            np.add.at(loads, hop, load)
            latency[pos] += self._latency[hop]
            going = nxt != dest
            pos, cur, dest, load = pos[going], nxt[going], dest[going], load[going]
        carried = np.flatnonzero(loads > 0)
        hop_bytes = {(int(self._hop_src[h]), int(self._hop_dst[h])): int(loads[h]) for h in carried}
        return hop_bytes, latency

    def __repr__(self) -> str:
        return (
            f"Topology({self.name}, {self.num_ipus} IPUs, {self._hop_src.size} hops, "
            f"routing={'on' if self.routing else 'off'})"
        )


# --------------------------------------------------------------------------- configs
def _name(cfg: MachineConfig, w: Wiring) -> str:
    links = cfg.links
    name = f"{links.topology!r}"
    if links.topology == "ladder":
        name += " (torus)" if links.torus else " (no wrap)"
    elif links.topology == "custom":
        name += f" ({len(links.edges)} edge(s))"
    if w.num_racks > 1:
        name += (
            f" in {w.num_racks} racks of {w.rack_size} IPUs joined by GW-Links "
            f"({links.gw_links.topology!r})"
        )
    return name


def _build(cfg: MachineConfig) -> Topology:
    w = wiring(cfg.num_ipus, cfg.links)
    gw = cfg.links.gw_links
    clock = cfg.tile.clock_hz
    return Topology(
        w,
        ipu_capacity=cfg.link_bytes_per_cycle,
        ipu_latency=cfg.links.hop_latency_cycles,
        card_capacity=cfg.card_link_bytes_per_cycle,
        gw_capacity=gw.bandwidth_bytes_per_s * gw.links_between_racks / clock,
        gw_latency=math.ceil(round(gw.hop_latency_s * clock, 9)),
        routing=cfg.links.routing,
        name=_name(cfg, w),
    )


_CACHE: OrderedDict[tuple[int, float, str], Topology] = OrderedDict()
_CACHE_SIZE = 32


def topology_of(cfg: MachineConfig) -> Topology:
    """The topology of a config, built once per distinct (``num_ipus``, clock, ``links``)
    and kept in a small cache (the 32 most recently used)."""
    key = (cfg.num_ipus, cfg.tile.clock_hz, cfg.links.model_dump_json())
    topology = _CACHE.get(key)
    if topology is None:
        topology = _build(cfg)
        _CACHE[key] = topology
        if len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(key)
    return topology
