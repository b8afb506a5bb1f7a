"""Exchange planning: which elements must cross tiles, as IR transfers.

An element needed on a tile other than the one it lives on becomes a transfer from its
owner to that tile. Every element is sent once by its owner however many tiles receive
it (one message, broadcast), so the sender's cost counts it once.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ipusim import ir


@dataclass
class Traffic:
    """Element references of one element type: id, owner tile and tile needing it."""

    type_size: int
    type_key: int
    ids: np.ndarray
    src_tile: np.ndarray
    dst_tile: np.ndarray


def plan_exchange(
    traffic: list[Traffic], name: str, program_id: int, num_tiles: int
) -> ir.Exchange | None:
    """The exchange moving every remote reference, or None when all are local.

    Parameters
    ----------
    traffic
        References per element type; local ones (``src == dst``) are dropped.
    num_tiles
        Tiles of the machine (to build unique keys).
    """
    srcs, dsts, sizes, messages = [], [], [], []
    next_message = 0
    for t in traffic:
        remote = t.src_tile != t.dst_tile
        if not remote.any():
            continue
        ids, src, dst = t.ids[remote], t.src_tile[remote], t.dst_tile[remote]
        # one transfer per (element, receiving tile); hashing keeps this O(n)
        first = ~pd.Index(ids * num_tiles + dst).duplicated(keep="first")
        ids, src, dst = ids[first], src[first], dst[first]
        # one message per element, broadcast to all its receivers
        msg, uniq = pd.factorize(ids, sort=True)
        srcs.append(src)
        dsts.append(dst)
        sizes.append(np.full(ids.size, t.type_size, np.int64))
        messages.append(msg.astype(np.int64) + next_message)
        next_message += uniq.size
    if not srcs:
        return None
    return ir.Exchange(
        name=name,
        program_id=program_id,
        src_tile=np.concatenate(srcs),
        dst_tile=np.concatenate(dsts),
        num_bytes=np.concatenate(sizes),
        message=np.concatenate(messages),
    )
