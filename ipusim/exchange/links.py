"""Inter-IPU exchange over IPU-Links.

Transfers are routed on the shortest path of the configured topology:

* ``ring``: ``min(|d|, n - |d|)`` hops; when both ways are equally long the transfer
  goes upward (IPU ``a`` to ``a + 1`` ...).
* ``line``: ``|d|`` hops, no wrap-around.
* ``full``: one direct hop between any two IPUs.

Every directed hop carries the sum of the bytes routed over it. The exchange lasts as
long as its most loaded hop or its most loaded tile, plus the per-hop latency times the
longest route.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ipusim.config import MachineConfig
from ipusim.errors import IRValidationError
from ipusim.exchange.internal import ceil_ratio, validate_transfers

__all__ = ["GlobalExchangeCost", "global_exchange_cost", "link_hops"]


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
    """Number of IPU-Link hops on the shortest route between IPUs.

    Parameters
    ----------
    cfg
        Machine config (``num_ipus``, ``links.topology``).
    src_ipu, dst_ipu
        IPU ids; any shapes that broadcast.

    Returns
    -------
    numpy.ndarray
        int64 hop counts: ring ``min(|d|, n-|d|)``, line ``|d|``, full 1 (0 for the
        same IPU).
    """
    src = _ipu_ids(cfg, src_ipu, "src_ipu")
    dst = _ipu_ids(cfg, dst_ipu, "dst_ipu")
    n = cfg.num_ipus
    topology = cfg.links.topology
    if topology == "ring":
        up = (dst - src) % n
        return np.minimum(up, n - up) * (up != 0)
    if topology == "line":
        return np.abs(dst - src)
    return (src != dst).astype(np.int64)


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


def _upward_loads(n: int, start: np.ndarray, hops: np.ndarray, load: np.ndarray) -> np.ndarray:
    """Load of each upward ring hop ``k -> (k + 1) % n`` from routes starting at
    ``start`` and going ``hops`` steps up (a difference array over two turns)."""
    diff = np.zeros(2 * n + 1, dtype=np.int64)
    np.add.at(diff, start, load)
    np.add.at(diff, start + hops, -load)
    running = np.cumsum(diff[: 2 * n])
    return running[:n] + running[n:]


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
        ``cycles = max(max_hop ceil(link_bytes / link_bytes_per_cycle),
        max_tile ceil(max(sent, received) / exchange.bytes_per_cycle))
        + links.hop_latency_cycles * (longest route in hops)``; 0 without transfers.

    Raises
    ------
    IRValidationError
        If the arrays are inconsistent, a tile is outside the machine or a byte count
        is negative.
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
    hops = link_hops(cfg, src_ipu, dst_ipu)

    # Aggregate the transfers per (source IPU, destination IPU) pair first.
    remote = src_ipu != dst_ipu
    pair_key, pair_of = np.unique(src_ipu[remote] * n + dst_ipu[remote], return_inverse=True)
    pair_bytes = np.zeros(pair_key.size, dtype=np.int64)
    np.add.at(pair_bytes, pair_of.reshape(-1), nbytes[remote])
    a = pair_key // n
    b = pair_key % n

    link_bytes: dict[tuple[int, int], int] = {}

    def add_hops(srcs: np.ndarray, dsts: np.ndarray, loads: np.ndarray) -> None:
        for s, d, v in zip(srcs.tolist(), dsts.tolist(), loads.tolist(), strict=True):
            if v > 0:
                link_bytes[(s, d)] = link_bytes.get((s, d), 0) + v

    if cfg.links.topology == "full":
        add_hops(a, b, pair_bytes)
    else:
        if cfg.links.topology == "ring":
            up_steps = (b - a) % n
            upward = up_steps <= n - up_steps
            steps = np.where(upward, up_steps, n - up_steps)
        else:
            upward = b > a
            steps = np.abs(b - a)
        ks = np.arange(n, dtype=np.int64)
        up = _upward_loads(n, a[upward], steps[upward], pair_bytes[upward])
        add_hops(ks, (ks + 1) % n, up)
        # A downward route from a is an upward route from n-1-a in mirrored numbering;
        # mirrored hop j -> j+1 is the real hop n-1-j -> n-2-j.
        down_mirror = _upward_loads(n, n - 1 - a[~upward], steps[~upward], pair_bytes[~upward])
        add_hops(n - 1 - ks, (n - 2 - ks) % n, down_mirror)

    link_cycles = 0
    if link_bytes:
        loads = np.fromiter(link_bytes.values(), dtype=np.int64, count=len(link_bytes))
        link_cycles = int(ceil_ratio(loads, cfg.link_bytes_per_cycle).max())
    tile_cycles = int(
        ceil_ratio(np.maximum(bytes_sent, bytes_received), cfg.exchange.bytes_per_cycle).max()
    )
    cycles = max(link_cycles, tile_cycles) + cfg.links.hop_latency_cycles * int(hops.max())
    return GlobalExchangeCost(int(cycles), bytes_sent, bytes_received, link_bytes)
