"""Inter-IPU exchange over IPU-Links (and GW-Links between racks).

Transfers are routed by the machine's :class:`~ipusim.exchange.topology.Topology`
(:func:`~ipusim.exchange.topology.topology_of`): the shortest route, ties going to the
neighbour met first going upward, so that

* ``ring``: ``min(|d|, n - |d|)`` hops; when both ways are equally long the transfer
  goes upward (IPU ``a`` to ``a + 1`` ...);
* ``line``: ``|d|`` hops, no wrap-around;
* ``full``: one direct hop between any two IPUs;
* ``ladder`` and ``custom``: the fewest hops of their links (docs/machine.md).

Every directed hop carries the sum of the bytes routed over it, plus
``links.message_overhead_bytes`` for every message (non-empty transfer) routed over
it. The exchange lasts as long as its most loaded hop (at that hop's capacity) or its
most loaded tile, plus the latency of its slowest route (the sum of its hops'
latencies). A tile's side is its bytes at ``exchange.bytes_per_cycle`` (the larger
direction) plus the exchange code it runs per message,
``ceil(exchange.cycles_per_message x (messages sent + messages received))``, every
non-empty transfer being one message at each end, as on chip
(:mod:`ipusim.exchange.internal`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ipusim.config import MachineConfig
from ipusim.errors import IRValidationError
from ipusim.exchange.internal import ceil_ratio, validate_transfers
from ipusim.exchange.topology import LinkRoutingError, topology_of

__all__ = [
    "GlobalExchangeCost",
    "global_exchange_cost",
    "global_tile_cycles",
    "link_hops",
    "link_overhead_bytes",
]


def _ipu_ids(cfg: MachineConfig, values: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise IRValidationError([f"link_hops: '{name}' must be integers, got dtype {arr.dtype}"])
    arr = arr.astype(np.int64, copy=False)
    bad = (arr < 0) | (arr >= cfg.num_ipus)
    if np.any(bad):
        raise IRValidationError(
            [
                f"link_hops: IPU id {int(arr[bad].flat[0])} in '{name}' is outside "
                f"[0, {cfg.num_ipus}) (num_ipus = {cfg.num_ipus})"
            ]
        )
    return arr


def link_hops(cfg: MachineConfig, src_ipu: np.ndarray, dst_ipu: np.ndarray) -> np.ndarray:
    """Number of link hops on the route between IPUs.

    Parameters
    ----------
    cfg
        Machine config (``num_ipus``, ``links``).
    src_ipu, dst_ipu
        IPU ids; any shapes that broadcast.

    Returns
    -------
    numpy.ndarray
        int64 hop counts: ring ``min(|d|, n-|d|)``, line ``|d|``, full 1, ladder and
        custom the fewest hops (0 for the same IPU).

    Raises
    ------
    IRValidationError
        An IPU id is not an integer or outside the machine.
    LinkRoutingError
        Two IPUs the topology does not connect (or, with ``links.routing: false``, that
        are not direct neighbours).
    """
    src = _ipu_ids(cfg, src_ipu, "src_ipu")
    dst = _ipu_ids(cfg, dst_ipu, "dst_ipu")
    return topology_of(cfg).hop_counts(src, dst)


def link_overhead_bytes(
    cfg: MachineConfig, pair_of: np.ndarray, num_bytes: np.ndarray, num_pairs: int
) -> np.ndarray:
    """Link capacity the messages of each IPU pair take beyond their payload.

    Every non-empty transfer between two IPUs is one message; on each hop of its route
    it takes ``links.message_overhead_bytes`` of link capacity besides its payload
    (packet headers and the gap between messages on the link). The overhead is per
    message, so many small messages cost more link time than one large one of the
    same bytes.

    Parameters
    ----------
    cfg
        Machine config (``links.message_overhead_bytes``).
    pair_of
        int[num_transfers]: the IPU pair (0 .. ``num_pairs`` - 1) of each transfer.
    num_bytes
        int[num_transfers]: payload of each transfer (empty transfers are no message).
    num_pairs
        Number of IPU pairs.

    Returns
    -------
    numpy.ndarray
        int64[num_pairs]: ``message_overhead_bytes x (messages of the pair)``.
    """
    overhead = int(cfg.links.message_overhead_bytes)
    if overhead == 0 or num_pairs == 0:
        return np.zeros(num_pairs, dtype=np.int64)
    messages = np.bincount(pair_of[np.asarray(num_bytes) > 0], minlength=num_pairs)
    return messages.astype(np.int64) * overhead


def global_tile_cycles(
    cfg: MachineConfig, src_tile: np.ndarray, dst_tile: np.ndarray, num_bytes: np.ndarray
) -> int:
    """The busiest tile's side of a global exchange, in cycles.

    A tile pushes out what it sends and takes in what it receives at
    ``exchange.bytes_per_cycle`` (the larger direction counts, both run at once), and
    runs the exchange code of every message it sends or receives on its one
    instruction stream: ``ceil(exchange.cycles_per_message x (messages sent +
    messages received))``, each non-empty transfer being one message at either end.
    This is the on-chip exchange's rule (:mod:`ipusim.exchange.internal`) without its
    fixed latency, which the links' route latency takes the place of.

    Parameters
    ----------
    cfg
        Machine config (``exchange.bytes_per_cycle``, ``exchange.cycles_per_message``).
    src_tile, dst_tile, num_bytes
        int[num_transfers]: the transfers (global tile ids, checked by the caller).

    Returns
    -------
    int
        The largest ``ceil(max(sent, received) / bytes_per_cycle) + ceil(cycles_per_message
        x messages)`` over the tiles; 0 without transfers.
    """
    src = np.asarray(src_tile, np.int64)
    if src.size == 0:
        return 0
    dst = np.asarray(dst_tile, np.int64)
    nbytes = np.asarray(num_bytes, np.int64)
    size = int(max(src.max(), dst.max())) + 1
    sent = np.bincount(src, weights=nbytes, minlength=size)
    received = np.bincount(dst, weights=nbytes, minlength=size)
    ex = cfg.exchange
    cycles = ceil_ratio(np.maximum(sent, received), ex.bytes_per_cycle)
    if ex.cycles_per_message:
        real = nbytes > 0
        messages = np.bincount(src[real], minlength=size) + np.bincount(dst[real], minlength=size)
        cycles = cycles + ceil_ratio(ex.cycles_per_message * messages, 1.0)
    return int(cycles.max())


@dataclass(frozen=True)
class GlobalExchangeCost:
    """Cost of one inter-IPU (global) exchange.

    Attributes
    ----------
    cycles
        Duration of the whole global exchange in tile cycles.
    bytes_sent
        int64[num_tiles]: bytes sent by each tile.
    bytes_received
        int64[num_tiles]: bytes received by each tile.
    link_bytes
        Bytes carried by each directed hop ``(a, b)`` between neighbouring IPUs (only
        hops that carry bytes are listed).
    """

    cycles: int
    bytes_sent: np.ndarray
    bytes_received: np.ndarray
    link_bytes: dict[tuple[int, int], int]


def global_exchange_cost(
    cfg: MachineConfig,
    src_tile: np.ndarray,
    dst_tile: np.ndarray,
    num_bytes: np.ndarray,
) -> GlobalExchangeCost:
    """Cost of a global exchange given as parallel transfer arrays.

    Parameters
    ----------
    cfg
        Machine config (``links``, ``exchange.bytes_per_cycle``, ``num_ipus``).
    src_tile, dst_tile
        int[num_transfers]: global tile ids; transfers within one IPU are allowed and
        use no link.
    num_bytes
        int[num_transfers]: bytes of each transfer.

    Returns
    -------
    GlobalExchangeCost
        ``cycles = max(max_hop ceil(hop_bytes / hop capacity), max_tile (ceil(max(sent,
        received) / exchange.bytes_per_cycle) + ceil(exchange.cycles_per_message x
        messages))) + max_route (sum of its hops' latencies)``; 0 without transfers
        (:func:`global_tile_cycles` is the tile term). With IPU-Links
        only, the capacity is ``link_bytes_per_cycle`` and the last term
        ``links.hop_latency_cycles * (longest route in hops)``.

    Raises
    ------
    IRValidationError
        If the arrays are inconsistent, a tile is outside the machine or a byte count
        is negative.
    LinkRoutingError
        A transfer between IPUs the topology does not connect (or, with
        ``links.routing: false``, that are not direct neighbours); the message names the
        transfer, its tiles and IPUs.
    """
    src, dst, nbytes = validate_transfers(cfg, src_tile, dst_tile, num_bytes, "global exchange")
    num_tiles = cfg.num_tiles
    bytes_sent = np.zeros(num_tiles, dtype=np.int64)
    bytes_received = np.zeros(num_tiles, dtype=np.int64)
    if src.size == 0:
        return GlobalExchangeCost(0, bytes_sent, bytes_received, {})
    np.add.at(bytes_sent, src, nbytes)
    np.add.at(bytes_received, dst, nbytes)

    n = cfg.num_ipus
    src_ipu = src // cfg.tile.tiles_per_ipu
    dst_ipu = dst // cfg.tile.tiles_per_ipu
    topology = topology_of(cfg)
    bad = topology.unroutable(src_ipu, dst_ipu)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        a, b = int(src_ipu[i]), int(dst_ipu[i])
        raise LinkRoutingError(
            f"global exchange: transfer {i} (tile {int(src[i])} on IPU {a} -> tile "
            f"{int(dst[i])} on IPU {b}): {topology.no_route_reason(a, b)}"
        )

    # Aggregate the transfers per (source IPU, destination IPU) pair first.
    remote = src_ipu != dst_ipu
    pair_key, pair_of = np.unique(src_ipu[remote] * n + dst_ipu[remote], return_inverse=True)
    pair_bytes = np.zeros(pair_key.size, dtype=np.int64)
    np.add.at(pair_bytes, pair_of.reshape(-1), nbytes[remote])
    pair_bytes += link_overhead_bytes(cfg, pair_of.reshape(-1), nbytes[remote], pair_key.size)
    link_bytes, route_latency = topology.route_traffic(pair_key // n, pair_key % n, pair_bytes)

    link_cycles = 0
    if link_bytes:
        hops = np.array(list(link_bytes), dtype=np.int64)
        loads = np.fromiter(link_bytes.values(), dtype=np.int64, count=len(link_bytes))
        capacity = topology.capacities(hops[:, 0], hops[:, 1])
        link_cycles = int(np.ceil(np.round(loads / capacity, 9)).max())
    tile_cycles = global_tile_cycles(cfg, src, dst, nbytes)
    latency = int(route_latency.max()) if route_latency.size else 0
    cycles = max(link_cycles, tile_cycles) + latency
    return GlobalExchangeCost(int(cycles), bytes_sent, bytes_received, link_bytes)
