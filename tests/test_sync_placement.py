"""External sync by placement (ipusim.sync.placement, docs/machine.md "Sync").

Expected cycles are written out here from the documented path: one hop from an IPU to
its card's hub, ``span // 2`` hops along the chain of cards of a chassis, of chassis of
a rack and of racks, and back: ``ceil(2 x clock x sum of the hops' latencies)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.machine import Machine
from ipusim.sync.controller import sync_extra_cycles
from ipusim.sync.placement import external_sync_cycles, sync_path_hops

HOP = 15e-9  # Poplibs' sync latency per hop
CLOCK = 1.33e9


def _cycles(*seconds: float) -> int:
    return math.ceil(round(2 * CLOCK * sum(seconds), 9))


@pytest.mark.parametrize("num_ipus", [1, 2, 4, 6, 8, 16, 32, 64])
def test_all_ipus_without_chassis_give_poplibs_test_model(num_ipus: int) -> None:
    """Poplibs: hops = 1 + (numIPUs / 2) / 2, ceil(15 ns x clock x hops x 2)."""
    cfg = load_config("mk2", {"num_ipus": num_ipus})
    hops = 1 + (num_ipus // 2) // 2
    assert cfg.global_sync_cycles == math.ceil(HOP * CLOCK * hops * 2)
    assert external_sync_cycles(cfg, range(num_ipus)) == cfg.global_sync_cycles


@pytest.mark.parametrize(("num_ipus", "hops"), [(3, 2), (5, 2), (7, 3), (11, 4)])
def test_an_odd_ipu_count_counts_its_half_card(num_ipus: int, hops: int) -> None:
    """With an odd number of IPUs the last card holds one IPU and is a card of the chain
    (Poplibs' comment: "one hop per card pair"); Poplibs' integer division
    ``(numIPUs / 2) / 2`` drops it for 3, 7, 11 (1, 2, 3 hops there). Hops written out:
    ``ceil(num_ipus / 2)`` cards, ``1 + cards // 2``."""
    cfg = load_config("mk2", {"num_ipus": num_ipus})
    assert cfg.global_sync_cycles == _cycles(hops * HOP)
    poplibs = 1 + (num_ipus // 2) // 2
    assert (hops == poplibs) == (num_ipus % 4 == 1)


def test_mk1_keeps_its_fitted_16_ipu_sync() -> None:
    # 34.2 ns per hop (fitted on H's 16-IPU rows), 5 hops at 1.6 GHz
    assert load_config("mk1", {"num_ipus": 16}).global_sync_cycles == math.ceil(
        round(34.2e-9 * 1.6e9 * 5 * 2, 9)
    )


def test_an_m2000_syncs_a_card_in_one_hop_and_the_machine_in_two() -> None:
    cfg = load_config("m2000")
    assert external_sync_cycles(cfg, (2, 3)) == _cycles(HOP) == 40  # IPUs of one card
    assert external_sync_cycles(cfg, (1, 2)) == _cycles(2 * HOP) == 80  # two cards
    assert cfg.global_sync_cycles == external_sync_cycles(cfg, range(4)) == 80
    assert sync_extra_cycles(cfg, "external", (2, 3)) == 40


def test_pods_cross_chassis_over_sync_links() -> None:
    pod16 = load_config("pod16")
    chassis = pod16.sync.chassis_hop_ns * 1e-9
    # four machines: two card hops, and two chassis hops from the middle machine
    assert pod16.global_sync_cycles == _cycles(2 * HOP, 2 * chassis)
    # IPU 0 of machine 0 and IPU 0 of machine 1: one card hop, one chassis hop
    assert external_sync_cycles(pod16, (0, 4)) == _cycles(HOP, chassis)
    assert sync_path_hops((0, 4), 2, 4, 16) == (1, 1, 0)
    pod64 = load_config("pod64")
    assert pod64.global_sync_cycles == _cycles(2 * HOP, 8 * chassis)


def test_racks_sync_over_the_gw_links() -> None:
    cfg = load_config("pod64", {"num_ipus": 128})
    chassis = cfg.sync.chassis_hop_ns * 1e-9
    gw = cfg.links.gw_links.hop_latency_s
    assert cfg.global_sync_cycles == _cycles(2 * HOP, 8 * chassis, gw)
    # one machine in each rack: the card hop, no chassis chain, one GW-Link hop
    assert external_sync_cycles(cfg, (0, 64)) == _cycles(HOP, gw)
    assert external_sync_cycles(cfg, range(64)) == load_config("pod64").global_sync_cycles


def test_an_explicit_global_sync_cycles_wins_for_any_ipus() -> None:
    cfg = load_config("m2000", {"sync.global_sync_cycles": 600})
    assert {external_sync_cycles(cfg, s) for s in ((0,), (2, 3), range(4))} == {600}


def _external_sync_cycles(cfg, ipus: tuple[int, ...]) -> int:
    program = ir.Sequence([ir.Sync(name="ext", sync_kind="external", ipus=ipus)])
    (rec,) = [r for r in Machine(cfg).run(program).records if r.name == "ext"]
    return int(rec.tile_cycles.max())


def test_the_machine_releases_an_external_sync_after_its_ipus_path() -> None:
    cfg = load_config("tiny", {"num_ipus": 4, "sync.ipus_per_chassis": 4})
    delay = int(cfg.sync.min_sync_delay_cycles + cfg.sync.max_relative_delay_cycles)
    one_card = _external_sync_cycles(cfg, (2, 3))
    two_cards = _external_sync_cycles(cfg, (1, 2))
    assert one_card == _cycles(HOP) + delay
    assert two_cards == _cycles(2 * HOP) + delay


def test_a_collective_ring_step_syncs_its_own_ipus() -> None:
    """A ring of the two IPUs of one card syncs in one hop per step, on a machine
    whose all-IPU sync takes two."""
    cfg = load_config("m2000")
    step = ir.Collective(name="ar", op="all_reduce", groups=((2, 3),), num_bytes=(64,))
    trace = Machine(cfg).run(ir.Sequence([step]))
    (rec,) = [r for r in trace.records if r.name == "ar"]
    # IPUs 2 and 3 share a card: the hop between them has links.links_within_card links
    link = cfg.links.hop_latency_cycles + 32 / cfg.card_link_bytes_per_cycle
    on_chip = math.ceil(32 / cfg.exchange.bytes_per_cycle)
    per_step = 40 + max(math.ceil(round(link, 6)), on_chip)
    reduce = math.ceil(32 / cfg.memory.store_bytes_per_cycle)
    assert rec.cycles == 2 * per_step + reduce
    assert np.all(trace.tile_end_cycles.reshape(4, -1)[2:] == rec.cycles)


def test_a_sync_of_an_ipu_the_machine_does_not_have_is_refused() -> None:
    """An IPU id past the machine (or negative) would be priced as a chassis or rack the
    machine does not have: refused with the id and the machine's range, with an
    explicit global_sync_cycles too."""
    cfg = load_config("m2000")
    with pytest.raises(ValueError, match=r"IPU 4 is not on this machine of 4 IPUs \(ids 0\.\.3\)"):
        external_sync_cycles(cfg, (2, 4))
    with pytest.raises(ValueError, match=r"IPU -1 is not on this machine"):
        external_sync_cycles(cfg, (-1, 0))
    bow = load_config("bow2000")
    assert bow.sync.global_sync_cycles is not None
    with pytest.raises(ValueError, match=r"IPU 9 is not on this machine"):
        external_sync_cycles(bow, (9,))
