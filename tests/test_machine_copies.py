"""Poplar's runtime copy vertices (ipusim.machine_copies): fixed + per region + bytes at
the load/store path's rate, by kind."""

from __future__ import annotations

import pytest

from ipusim.config import load_config
from ipusim.machine_copies import copy_bytes_per_cycle, copy_vertex_cycles


def test_gather_and_scatter_cost_fixed_regions_and_eight_bytes_per_cycle() -> None:
    cfg = load_config(
        "mk1",
        {
            "code.copy_gather_fixed_cycles": 100.0,
            "code.copy_gather_region_cycles": 10.5,
            "code.copy_scatter_fixed_cycles": 3.0,
            "code.copy_scatter_region_cycles": 20.0,
        },
    )
    assert copy_bytes_per_cycle(cfg) == 8  # mk1: 16 B loads, 8 B stores
    # three regions: 848 B (106 moves), 12 B (2: the last 64-bit access is whole), 0 B
    regions = [848, 12, 0]
    assert copy_vertex_cycles(cfg, regions, "gather") == round(100 + 3 * 10.5) + 106 + 2
    assert copy_vertex_cycles(cfg, regions, "scatter") == 3 + 3 * 20 + 108
    assert copy_vertex_cycles(cfg, [], "gather") == 100


def test_the_rate_is_the_slower_memory_path() -> None:
    cfg = load_config("mk1", {"memory.store_bytes_per_cycle": 4})
    base = copy_vertex_cycles(cfg, [], "scatter")
    assert (
        copy_vertex_cycles(cfg, [64], "scatter") - base
        == round(cfg.code.copy_scatter_region_cycles) + 16
    )


def test_bad_kind_and_negative_sizes_are_named() -> None:
    cfg = load_config("mk1")
    with pytest.raises(ValueError, match=r"kind='memcpy'.*gather, scatter"):
        copy_vertex_cycles(cfg, [8], "memcpy")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="-4 bytes"):
        copy_vertex_cycles(cfg, [8, -4], "gather")
