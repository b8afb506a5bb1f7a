"""Exchange planning: which elements must cross tiles, as IR exchange totals.

An element needed on a tile other than the one it comes from must be sent there.
Each receiving tile gets every element once, however many of its vertices read it;
each sender sends an element once however many tiles receive it (a broadcast). The
planner works one receiving tile at a time and keeps only per-tile totals and one
flag per element, so graphs with hundreds of millions of element references plan in
bounded host memory. Elements with consecutive ids from one sender travel as one
message. The result is an IR ``Exchange`` in its per-tile form.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ipusim import ir
from ipusim.tile.layout import tile_distance
from poplar_api.errors import GraphError
from poplar_api.types import Type


class ExchangePlanner:
    """Accumulates the references of one exchange, destination tile by destination tile.

    Parameters
    ----------
    target
        The graph's target (tile count, tiles per IPU, layout).
    state
        The graph state (element spaces).
    """

    def __init__(self, target, state) -> None:
        self.cfg = target.config
        self.state = state
        n = target.getNumTiles()
        self.num_tiles = n
        self.received = np.zeros(n, np.int64)
        self.messages_received = np.zeros(n, np.int64)
        self.max_distance = np.zeros(n, np.int64)
        #: element size -> (element id -> tile that sends it, or -1); types of one size
        #: share element ids, so a reinterpreted view's element is sent once
        self.sender: dict[int, np.ndarray] = {}

    def add(self, element_type: Type, dst: int, ids: np.ndarray, src: np.ndarray) -> None:
        """Elements ``ids`` (from tiles ``src``) needed on tile ``dst``.

        Every reference of ``element_type`` (or another type of its size) bound for
        ``dst`` must come in one call, so that an element is received once.
        """
        remote = src != dst
        if not remote.any():
            return
        ids, src = ids[remote], src[remote]
        first = ~pd.Index(ids).duplicated(keep="first")
        ids, src = ids[first], src[first].astype(np.int64)
        tpi = self.cfg.tile.tiles_per_ipu
        crossing = np.flatnonzero(src // tpi != dst // tpi)
        if crossing.size:
            raise GraphError(
                f"tile {dst} (IPU {dst // tpi}) needs element {int(ids[crossing[0]])} of type "
                f"{element_type} from tile {int(src[crossing[0]])} on another IPU; data "
                "read by a vertex or copied must be on the same IPU; hint: map the tensor "
                "to tiles of that IPU"
            )
        self.received[dst] += ids.size * element_type.size
        self.messages_received[dst] += _runs(np.sort(ids), src[np.argsort(ids)]).size
        sender = self.sender.get(element_type.size)
        if sender is None:
            size = self.state.space(element_type).size
            sender = self.sender[element_type.size] = np.full(size, -1, np.int32)
        sender[ids] = src
        peers = np.unique(src)
        dist = tile_distance(self.cfg.tile, peers % tpi, np.full(peers.size, dst % tpi))
        self.max_distance[dst] = max(int(self.max_distance[dst]), int(dist.max()))
        np.maximum.at(self.max_distance, peers, dist.astype(np.int64))

    def add_grouped(
        self, element_type: Type, ids: np.ndarray, src: np.ndarray, dst: np.ndarray
    ) -> None:
        """References with arbitrary destinations: grouped by destination, then added."""
        remote = np.flatnonzero(src != dst)
        if remote.size == 0:
            return
        ids, src, dst = ids[remote], src[remote], dst[remote]
        order = np.argsort(dst, kind="stable")
        ids, src, dst = ids[order], src[order], dst[order]
        cuts = np.flatnonzero(np.diff(dst)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [dst.size]))
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            self.add(element_type, int(dst[a]), ids[a:b], src[a:b])

    def build(self, name: str, program_id: int) -> ir.Exchange | None:
        """The IR exchange of everything added, or None when nothing crosses tiles."""
        n = self.num_tiles
        sent = np.zeros(n, np.int64)
        messages_sent = np.zeros(n, np.int64)
        for element_size, sender in self.sender.items():
            ids = np.flatnonzero(sender >= 0)
            tiles = sender[ids].astype(np.int64)
            sent += np.bincount(tiles, minlength=n).astype(np.int64) * element_size
            messages_sent += np.bincount(tiles[_runs(ids, tiles)], minlength=n).astype(np.int64)
        tiles = np.flatnonzero((sent > 0) | (self.received > 0))
        if tiles.size == 0:
            return None
        return ir.Exchange(
            name=name,
            program_id=program_id,
            tile=tiles,
            bytes_sent=sent[tiles],
            bytes_received=self.received[tiles],
            messages_sent=messages_sent[tiles],
            messages_received=self.messages_received[tiles],
            max_distance=self.max_distance[tiles],
        )


def _runs(ids: np.ndarray, src: np.ndarray) -> np.ndarray:
    """Start index of each message: a run of consecutive element ids from one sender.

    ``ids`` must be sorted; elements laid out contiguously travel as one message.
    """
    if ids.size == 0:
        return np.zeros(0, np.int64)
    new = np.ones(ids.size, bool)
    new[1:] = (np.diff(ids) != 1) | (np.diff(src) != 0)
    return np.flatnonzero(new)
