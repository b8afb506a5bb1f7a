"""External sync by placement: the sync fabric's latency from where the IPUs sit.

An external sync is a barrier of several IPUs, carried by sync signals that leave each
IPU, meet at a master and come back as the release. The signal crosses one hop per
level of packaging between the IPUs taking part:

* **card**: every IPU reaches its card's sync hub in one hop; the cards of one chassis
  (``sync.ipus_per_card`` IPUs each) are chained, the master in the middle of the
  cards taking part, so the farthest is ``span // 2`` card hops away. This is Poplibs'
  own multi-IPU test model ("one hop within a card plus one hop per card pair",
  ``hops = 1 + (numIPUs / 2) / 2`` for all IPUs of C2 cards of two, 15 ns per hop,
  graphcore/poplibs ``poplibs_test/Util.cpp`` ``setGlobalSyncLatency``, grade A),
  written for any set of IPUs;
* **chassis**: the chassis (IPU-Machines, ``sync.ipus_per_chassis`` IPUs each) of one
  rack are joined by Sync-Link cables (IPU-M2000: 8 Sync-Link ports "for connection
  between IPU-M2000s", grade A), chained with the master in the middle, at
  ``sync.chassis_hop_ns`` per hop;
* **rack**: racks (``links.gw_links.ipus_per_rack`` IPUs) sync over the GW-Links
  (packetised sync in switched GW-Link systems, grade A), at
  ``links.gw_links.hop_latency_s`` per hop, chained likewise.

The release comes back the same way, so the sync costs twice the one-way path:
``ceil(2 x clock x (ns_per_hop x (1 + card hops) + chassis_hop x chassis hops +
gw hop x rack hops))`` cycles. With no chassis and no racks configured (one chassis,
one rack) this is Poplibs' formula for all IPUs of a machine with an even number of
them. With an odd number the last card holds one IPU and is a card of the chain, as
Poplibs' comment ("one hop per card pair") counts it, where its integer division
``(numIPUs / 2) / 2`` drops it: 3 IPUs take 2 hops here, 1 there (7: 3 and 2). A
subset of the IPUs takes the hops of the cards it spans, not those of its count. An
explicit ``sync.global_sync_cycles`` replaces the whole path (Bow: 600 cycles, grade B).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ipusim.config import MachineConfig

__all__ = ["external_sync_cycles", "sync_path_hops"]


def _half_span(groups: np.ndarray, positions: np.ndarray) -> int:
    """The largest ``(last - first + 1) // 2`` of ``positions`` within one group: the
    hops from the middle of a chain to its farthest member."""
    worst = 0
    for group in np.unique(groups):
        pos = positions[groups == group]
        worst = max(worst, (int(pos.max()) - int(pos.min()) + 1) // 2)
    return worst


def sync_path_hops(
    ipus: Iterable[int], ipus_per_card: int, ipus_per_chassis: int, ipus_per_rack: int
) -> tuple[int, int, int]:
    """Hops of the sync path of a set of IPUs at each level.

    Parameters
    ----------
    ipus
        The IPUs taking part (machine-wide ids; at least one).
    ipus_per_card, ipus_per_chassis, ipus_per_rack
        Consecutive IPUs per card, chassis and rack (a chassis within its rack and a
        card within its chassis are counted from the first IPU of the rack or chassis).

    Returns
    -------
    tuple of int
        ``(card, chassis, rack)``: ``1 + span // 2`` of the cards within a chassis (the
        IPU's own hop to its card's hub plus the chain), ``span // 2`` of the chassis
        within a rack and of the racks (the largest over the groups taking part).
    """
    ids = np.unique(np.fromiter((int(i) for i in ipus), np.int64))
    if ids.size == 0:
        raise ValueError("sync_path_hops: no IPUs")
    rack, in_rack = np.divmod(ids, ipus_per_rack)
    chassis, in_chassis = np.divmod(in_rack, ipus_per_chassis)
    card = in_chassis // ipus_per_card
    where = rack * (ipus_per_rack // ipus_per_chassis + 1) + chassis  # one id per chassis
    card_hops = 1 + _half_span(where, card)
    chassis_hops = _half_span(rack, chassis)
    rack_hops = (int(rack.max()) - int(rack.min()) + 1) // 2
    return card_hops, chassis_hops, rack_hops


def external_sync_cycles(cfg: MachineConfig, ipus: Iterable[int] | None = None) -> int:
    """Extra cycles of an external sync of ``ipus`` (all of the machine when None).

    Parameters
    ----------
    cfg
        The machine: its IPU count, clock, ``sync`` placement fields and GW-Links.
    ipus
        The IPUs the sync joins (machine-wide ids), or None for every IPU.

    Returns
    -------
    int
        ``sync.global_sync_cycles`` when set, whatever the IPUs; otherwise the path of
        the module docstring. Cached per distinct parameters and set of IPUs.

    Raises
    ------
    ValueError
        An IPU id outside ``0 .. num_ipus - 1``.
    """
    sync = cfg.sync
    if ipus is not None:
        ipus = tuple(sorted({int(i) for i in ipus}))
        bad = [i for i in ipus if not 0 <= i < cfg.num_ipus]
        if bad:
            raise ValueError(
                f"external sync: IPU {bad[0]} is not on this machine of {cfg.num_ipus} "
                f"IPUs (ids 0..{cfg.num_ipus - 1}); a sync may join only the machine's IPUs"
            )
    if sync.global_sync_cycles is not None:
        return int(sync.global_sync_cycles)
    gw = cfg.links.gw_links
    key = (
        int(cfg.num_ipus),
        float(cfg.tile.clock_hz),
        float(sync.global_sync_ns_per_hop),
        sync.chassis_hop_ns,
        int(sync.ipus_per_card),
        sync.ipus_per_chassis,
        gw.ipus_per_rack,
        float(gw.hop_latency_s),
    )
    return _cycles(key, ipus)


@functools.lru_cache(maxsize=4096)
def _cycles(key: tuple, ipus: tuple[int, ...] | None) -> int:
    num_ipus, clock, ns_per_hop, chassis_ns, per_card, per_chassis, per_rack, gw_s = key
    rack_size = per_rack or num_ipus
    chassis_size = min(per_chassis or rack_size, rack_size)
    members = range(num_ipus) if ipus is None else ipus
    cards, chassis, racks = sync_path_hops(members, per_card, chassis_size, rack_size)
    ns = ns_per_hop * 1e-9
    cycles = ns * clock * cards * 2  # Poplibs' order of operations, for the same float
    if chassis:
        hop = ns if chassis_ns is None else chassis_ns * 1e-9
        cycles += hop * clock * chassis * 2
    if racks:
        cycles += gw_s * clock * racks * 2
    return math.ceil(round(cycles, 9))
