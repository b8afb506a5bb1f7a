"""The IPU-Link hop joining the two IPUs of a card has ``links.links_within_card`` links.

Poplibs' multi-IPU test model (graphcore/poplibs 7eac0f26, ``lib/poplibs_test/Util.cpp``,
``addGlobalExchangeConstraints``) gives the traffic between the two IPUs of a card
(``ipu / 2 == otherIpu / 2``) four links of 128 x 1024^3 bit/s x 0.85 and every other
hop two; the ``m2000`` preset takes the four (docs/machine.md, "IPU-Links"). The
expected cycles below are written out from the config's bandwidth and clock, not read
from the code under test.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim.config import config_hash, load_config
from ipusim.exchange.links import global_exchange_cost
from tests.conftest import config_problems

#: Tiles sending on each IPU and bytes per tile: the links, not the tiles, bind.
TILES = 32
BYTES_PER_TILE = 64 * 1024


def _cycles(cfg, src_ipu: int, dst_ipu: int) -> int:
    per_ipu = cfg.tile.tiles_per_ipu
    tiles = np.arange(TILES)
    return global_exchange_cost(
        cfg,
        src_ipu * per_ipu + tiles,
        dst_ipu * per_ipu + tiles,
        np.full(TILES, BYTES_PER_TILE),
    ).cycles


def _expected(cfg, links: int, hops: int) -> int:
    """The most loaded hop at ``links`` links, or the busiest tile, plus the route's
    latency; every hop of the route carries all the bytes."""
    per_cycle = cfg.links.bandwidth_bytes_per_s * links / cfg.tile.clock_hz
    link = math.ceil(TILES * BYTES_PER_TILE / per_cycle)
    tile = math.ceil(BYTES_PER_TILE / cfg.exchange.bytes_per_cycle)
    return max(link, tile) + hops * cfg.links.hop_latency_cycles


def test_m2000_gives_the_card_pair_four_links() -> None:
    cfg = load_config("m2000")
    assert cfg.links.links_within_card == 4
    assert cfg.links.links_between_neighbours == 2
    # IPUs 2 and 3 share a card (the measured pair of N2): four links each way.
    assert _cycles(cfg, 2, 3) == _expected(cfg, 4, 1)
    assert _cycles(cfg, 3, 2) == _expected(cfg, 4, 1)
    # IPUs 0 and 2 are column neighbours on two cards: two links.
    assert _cycles(cfg, 0, 2) == _expected(cfg, 2, 1)
    # IPU 0 to 3 crosses the rung 0 -> 1 and the column 1 -> 3: the column binds.
    assert _cycles(cfg, 0, 3) == _expected(cfg, 2, 2)


def test_unset_the_card_hop_is_any_other_hop() -> None:
    cfg = load_config("m2000", overrides={"links.links_within_card": None})
    assert cfg.card_link_bytes_per_cycle is None
    assert _cycles(cfg, 2, 3) == _expected(cfg, 2, 1)


@pytest.mark.parametrize("topology", ["ring", "line", "full"])
def test_only_the_hops_within_a_card_change(topology: str) -> None:
    """On 4 IPUs, hops 0-1 and 2-3 join card partners; 1-2 (and 3-0, 0-2, 1-3) do not."""
    over = {"num_ipus": 4, "links.topology": topology, "links.links_within_card": 3}
    cfg = load_config("mk2", overrides=over)
    assert _cycles(cfg, 0, 1) == _expected(cfg, 3, 1)
    assert _cycles(cfg, 3, 2) == _expected(cfg, 3, 1)
    other = cfg.links.links_between_neighbours
    assert other != 3
    assert _cycles(cfg, 1, 2) == _expected(cfg, other, 1)


def test_an_unset_field_keeps_the_content_hash() -> None:
    cfg = load_config("mk2")
    assert "links_within_card" not in cfg.model_dump()["links"]
    explicit = load_config("mk2", overrides={"links.links_within_card": None})
    assert config_hash(explicit) == config_hash(cfg)
    set_ = load_config("mk2", overrides={"links.links_within_card": 4})
    assert config_hash(set_) != config_hash(cfg)


def test_a_card_hop_too_slow_for_int64_is_refused() -> None:
    """Moving one IPU's memory over the slowest IPU-Link hop must take at most 2^48
    cycles; with ``links_within_card`` below ``links_between_neighbours`` the card's
    hop is the slowest (1472 tiles of 16 MiB at 1 MB/s and 100 GHz: 2.6e15 cycles over
    one link, 4.0e13 over 64)."""
    big = {
        "tile.tiles_per_ipu": 1472,
        "memory.tile_memory_bytes": 16 << 20,
        "memory.non_interleaved_bytes": 8 << 20,
        "memory.interleaved_bytes": 8 << 20,
        "links.bandwidth_bytes_per_s": 1e6,
        "links.links_between_neighbours": 64,
        "tile.clock_hz": 100e9,
    }
    assert load_config("mk2", overrides=big).links.links_within_card is None
    (line,) = config_problems("mk2", {**big, "links.links_within_card": 1})
    assert line.startswith("<overrides>: links.bandwidth_bytes_per_s: found")
    assert "2^48 cycles" in line
