"""Sync controller: per-tile delays, release times and extra cycles.

Base layout: 8 tiles in 2 columns (4 rows):
    tile:   0     1     2     3     4     5     6     7
    (c,r): (0,0) (0,1) (0,2) (0,3) (1,0) (1,1) (1,2) (1,3)
"""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.errors import IRValidationError
from ipusim.sync.controller import (
    relative_sync_delays,
    sync_delays,
    sync_extra_cycles,
    sync_release,
)


def test_no_relative_delay(make_config):
    cfg = make_config(sync={"relative_delay": "none", "max_relative_delay_cycles": 10})
    np.testing.assert_array_equal(relative_sync_delays(cfg), np.zeros(8))


def test_auto_delay_grows_with_distance(make_config):
    cfg = make_config(sync={"relative_delay": "auto", "max_relative_delay_cycles": 10})
    # distances to tile 0: [0, 1, 2, 3, 1, 2, 3, 4], d_max = 4
    # 10 * d / 4 = [0, 2.5, 5, 7.5, 2.5, 5, 7.5, 10]; np.rint rounds halves to even:
    # 2.5 -> 2, 7.5 -> 8
    delays = relative_sync_delays(cfg)
    np.testing.assert_array_equal(delays, [0, 2, 5, 8, 2, 5, 8, 10])
    assert delays.dtype == np.int64


def test_auto_delay_other_controller(make_config):
    cfg = make_config(
        sync={"relative_delay": "auto", "max_relative_delay_cycles": 6, "controller_tile": 5}
    )
    # controller at (1,1): distances [2, 1, 2, 3, 1, 0, 1, 2], d_max = 3 -> 6 * d / 3 = 2 d
    np.testing.assert_array_equal(relative_sync_delays(cfg), [4, 2, 4, 6, 2, 0, 2, 4])


def test_single_tile_has_no_relative_delay(make_config):
    cfg = make_config(
        tile={"tiles_per_ipu": 1, "columns": 1},
        sync={"relative_delay": "auto", "max_relative_delay_cycles": 10},
    )
    np.testing.assert_array_equal(relative_sync_delays(cfg), [0])  # d_max = 0


def test_sync_delays_add_minimum_and_tile_over_ipus(make_config):
    cfg = make_config(
        num_ipus=2,
        sync={
            "relative_delay": "auto",
            "max_relative_delay_cycles": 10,
            "min_sync_delay_cycles": 3,
        },
    )
    per_ipu = [3 + d for d in (0, 2, 5, 8, 2, 5, 8, 10)]
    np.testing.assert_array_equal(sync_delays(cfg), per_ipu + per_ipu)
    assert sync_delays(cfg).dtype == np.int64


def test_release_waits_for_the_last_tile():
    arrival = np.array([100, 130, 90, 120])
    delays = np.array([0, 2, 5, 1])
    exit_time = sync_release(arrival, delays)
    # last arrival 130 -> tile i leaves at 130 + delay[i]
    np.testing.assert_array_equal(exit_time, [130, 132, 135, 131])
    # the wait includes the idle time before the release
    np.testing.assert_array_equal(exit_time - arrival, [30, 2, 45, 11])
    assert exit_time.dtype == np.int64


def test_release_with_extra_cycles():
    exit_time = sync_release(np.array([10, 20]), np.array([1, 0]), extra_cycles=40)
    np.testing.assert_array_equal(exit_time, [61, 60])  # 20 + 40 + delay


def test_release_of_empty_group():
    assert sync_release(np.array([], dtype=np.int64), np.array([], dtype=np.int64)).size == 0


def test_release_rejects_mismatched_shapes():
    with pytest.raises(IRValidationError, match="one delay per arriving tile"):
        sync_release(np.array([1, 2, 3]), np.array([0, 0]))


def test_extra_cycles_per_kind(make_config):
    cfg = make_config(
        tile={"clock_hz": 1.33e9}, sync={"host_sync_cycles": 77, "relative_delay": "none"}
    )
    assert sync_extra_cycles(cfg, "internal") == 0
    # 15 ns * 1.33 GHz * 1 hop * 2 = 39.9 -> 40   (1 IPU: hops = 1 + (1 // 2) // 2 = 1)
    assert sync_extra_cycles(cfg, "external") == 40
    assert sync_extra_cycles(cfg, "host") == 77
    with pytest.raises(IRValidationError, match="unknown sync kind 'remote'"):
        sync_extra_cycles(cfg, "remote")


def test_global_sync_cycles_derivation(make_config):
    # 4 IPUs: hops = 1 + (4 // 2) // 2 = 2 -> 15 ns * 1.33 GHz * 2 * 2 = 79.8 -> 80
    cfg = make_config(num_ipus=4, tile={"clock_hz": 1.33e9})
    assert cfg.global_sync_cycles == 80
    assert sync_extra_cycles(cfg, "external") == 80
    # an explicit value wins over the formula
    fixed = make_config(num_ipus=4, sync={"global_sync_cycles": 600})
    assert sync_extra_cycles(fixed, "external") == 600


@pytest.mark.parametrize("used", [1, 2, 4, 8])
def test_a_compute_set_after_a_sync_spans_the_release_skew_of_its_tiles(make_config, used):
    """Each tile starts the compute set when the sync's release reaches it, so the compute
    set's span (first start to last end) is one tile's compute plus the spread of the
    release delays over the tiles it uses: it grows with the farthest tile."""
    from ipusim import ir
    from ipusim.machine import Machine

    cfg = make_config(
        sync={"relative_delay": "auto", "max_relative_delay_cycles": 10, "min_sync_delay_cycles": 3}
    )
    relative = [0, 2, 5, 8, 2, 5, 8, 10]  # as in test_auto_delay_grows_with_distance

    def span(tiles: int) -> int:
        compute = ir.Compute(
            vertex_tile=np.arange(tiles), vertex_cycles=np.full(tiles, 60), name="cs"
        )
        trace = Machine(cfg).run(ir.Program(entries=(ir.Sequence([ir.Sync(name="s"), compute]),)))
        return next(r for r in trace.records if r.name == "cs").cycles

    one_tile = span(1)  # tile 0, the controller's: no relative delay
    assert span(used) == one_tile + max(relative[:used]) - min(relative[:used])
