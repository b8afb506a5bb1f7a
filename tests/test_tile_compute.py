"""Barrel-scheduled compute cost of one compute set."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.errors import IRValidationError
from ipusim.tile.compute import ComputeCost, compute_cost


def _tile_cfg(make_config, **tile):
    return make_config(tile=tile).tile


def _run(tile_cfg, num_tiles, tiles, cycles, multi=None):
    tiles = np.asarray(tiles, dtype=np.int64)
    cycles = np.asarray(cycles, dtype=np.int64)
    if multi is None:
        multi = np.zeros(tiles.size, dtype=bool)
    return compute_cost(tile_cfg, num_tiles, tiles, cycles, np.asarray(multi, dtype=bool))


def test_seven_equal_vertices_six_contexts(make_config):
    cfg = _tile_cfg(make_config, worker_contexts=6)
    cost = _run(cfg, 1, [0] * 7, [10] * 7)
    # 6 vertices fill the contexts, the 7th goes to context 0 (tie -> lowest index).
    np.testing.assert_array_equal(cost.context_load, [[20, 10, 10, 10, 10, 10]])
    np.testing.assert_array_equal(cost.tile_cycles, [6 * 20])  # 120
    np.testing.assert_array_equal(cost.active_cycles, [7 * 10])  # 70
    np.testing.assert_array_equal(cost.vertex_count, [7])
    np.testing.assert_array_equal(cost.vertex_context, [0, 1, 2, 3, 4, 5, 0])
    assert cost.vertex_context.dtype == np.int32
    assert cost.tile_cycles.dtype == np.int64


def test_mixed_sizes_hand_trace(make_config):
    cfg = _tile_cfg(make_config, worker_contexts=6)
    cost = _run(cfg, 1, [0] * 8, [50, 10, 20, 30, 5, 40, 15, 25])
    # v0..v5 fill contexts 0..5: [50, 10, 20, 30, 5, 40]
    # v6 (15) -> least loaded is context 4 (5):  [50, 10, 20, 30, 20, 40]
    # v7 (25) -> least loaded is context 1 (10): [50, 35, 20, 30, 20, 40]
    np.testing.assert_array_equal(cost.context_load, [[50, 35, 20, 30, 20, 40]])
    np.testing.assert_array_equal(cost.vertex_context, [0, 1, 2, 3, 4, 5, 4, 1])
    np.testing.assert_array_equal(cost.tile_cycles, [6 * 50])  # 300
    np.testing.assert_array_equal(cost.active_cycles, [50 + 10 + 20 + 30 + 5 + 40 + 15 + 25])


def test_ties_go_to_lowest_context(make_config):
    cfg = _tile_cfg(make_config, worker_contexts=3)
    cost = _run(cfg, 1, [0] * 5, [10, 10, 5, 5, 10])
    # [10,0,0] -> [10,10,0] -> [10,10,5] -> v3 to ctx 2: [10,10,10] -> v4 tie -> ctx 0
    np.testing.assert_array_equal(cost.context_load, [[20, 10, 10]])
    np.testing.assert_array_equal(cost.vertex_context, [0, 1, 2, 2, 0])
    np.testing.assert_array_equal(cost.tile_cycles, [3 * 20])


def test_multi_vertex_plus_workers(make_config):
    cfg = _tile_cfg(make_config, worker_contexts=6)
    cost = _run(cfg, 1, [0, 0, 0, 0], [12, 100, 7, 50], multi=[False, True, False, True])
    # workers: 12 -> ctx 0, 7 -> ctx 1; multi-vertices add their tile cycles 100 + 50.
    np.testing.assert_array_equal(cost.context_load, [[12, 7, 0, 0, 0, 0]])
    np.testing.assert_array_equal(cost.multi_cycles, [150])
    np.testing.assert_array_equal(cost.tile_cycles, [6 * 12 + 150])  # 222
    np.testing.assert_array_equal(cost.active_cycles, [12 + 100 + 7 + 50])
    np.testing.assert_array_equal(cost.vertex_context, [0, -1, 1, -1])


def test_interleaved_tiles(make_config):
    cfg = _tile_cfg(make_config, worker_contexts=2)
    cost = _run(cfg, 3, [1, 0, 1, 0, 1], [4, 9, 6, 3, 8])
    # tile 1: 4 -> c0 [4,0]; 6 -> c1 [4,6]; 8 -> c0 [12,6] -> 2*12 = 24
    # tile 0: 9 -> c0 [9,0]; 3 -> c1 [9,3]               -> 2*9  = 18
    # tile 2: no vertices -> 0
    np.testing.assert_array_equal(cost.context_load, [[9, 3], [12, 6], [0, 0]])
    np.testing.assert_array_equal(cost.tile_cycles, [18, 24, 0])
    np.testing.assert_array_equal(cost.active_cycles, [12, 18, 0])
    np.testing.assert_array_equal(cost.vertex_count, [2, 3, 0])
    np.testing.assert_array_equal(cost.vertex_context, [0, 0, 1, 1, 0])


def test_launch_cycles(make_config):
    cfg = _tile_cfg(
        make_config, worker_contexts=2, vertex_launch_cycles=2, multi_vertex_launch_cycles=5
    )
    cost = _run(cfg, 1, [0, 0, 0, 0], [10, 10, 10, 30], multi=[False, False, False, True])
    # workers cost 10 + 2 = 12 thread cycles each: [12, 12] -> [24, 12]; the multi-vertex
    # 30 + 5 = 35 tile cycles
    np.testing.assert_array_equal(cost.context_load, [[24, 12]])
    np.testing.assert_array_equal(cost.tile_cycles, [2 * 24 + 35])  # 83
    np.testing.assert_array_equal(cost.active_cycles, [3 * 12 + 35])  # 71
    np.testing.assert_array_equal(cost.multi_cycles, [35])


def test_empty_compute_set(make_config):
    cfg = _tile_cfg(make_config, worker_contexts=6)
    cost = _run(cfg, 4, [], [])
    np.testing.assert_array_equal(cost.tile_cycles, np.zeros(4))
    np.testing.assert_array_equal(cost.active_cycles, np.zeros(4))
    assert cost.context_load.shape == (4, 6) and not cost.context_load.any()
    assert cost.vertex_context.shape == (0,)


def test_validation_errors(make_config):
    cfg = _tile_cfg(make_config)
    with pytest.raises(IRValidationError, match="differ in length"):
        _run(cfg, 2, [0, 1], [5])
    with pytest.raises(IRValidationError, match=r"vertex 1 is on tile 2, outside \[0, 2\)"):
        _run(cfg, 2, [0, 2], [5, 5])
    with pytest.raises(IRValidationError, match="vertex 0 has a negative cycle estimate -1"):
        _run(cfg, 2, [0, 1], [-1, 5])


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def _tut7_vertices(R: int, C: int, s: int, T: int) -> tuple[np.ndarray, np.ndarray]:
    """The "mulCS" vertices of tutorial 7, in the tutorial's order (segment, then row)."""
    tiles, cycles = [], []
    rows = np.arange(R, dtype=np.int64)
    for i in range(s):
        b, e = i * C // s, (i + 1) * C // s
        if e == b:
            continue
        tiles.append((i * R + rows) * T // (s * R))
        cycles.append(np.full(R, 5 + ((e - b) + 1) // 2, dtype=np.int64))
    return np.concatenate(tiles), np.concatenate(cycles)


def _tut7_compute_cost_model(R: int, C: int, s: int, T: int, W: int) -> int:
    """tut7's own cost model for "mulCS" (tutorials.md)."""
    max_v = max(_cdiv(R * s, T), 1)
    cycles_per_v = 5 + (_cdiv(C, s) + 1) // 2
    return _cdiv(max_v, W) * W * cycles_per_v


@pytest.mark.parametrize(
    ("tiles", "split", "expected_max", "expected_active"),
    [
        # mk1: 50000 vertices, C/s = 200 columns each -> 5 + 201//2 = 105 cycles;
        # Σ active = 50000 * 105 = 5,250,000
        (1216, 5, 4410, 50_000 * 105),
        # mk2: widths 142 (segment 0) and 143 (segments 1-6) -> 76 and 77 cycles;
        # Σ active = 10000 * (76 + 6 * 77)
        (1472, 7, 3696, 10_000 * (76 + 6 * 77)),
    ],
)
def test_tut7_matches_the_tutorial_cost_model(
    make_config, tiles, split, expected_max, expected_active
):
    R, C, W = 10_000, 1_000, 6
    cfg = _tile_cfg(make_config, tiles_per_ipu=tiles, worker_contexts=W)
    vtile, vcycles = _tut7_vertices(R, C, split, tiles)
    cost = compute_cost(cfg, tiles, vtile, vcycles, np.zeros(vtile.size, dtype=bool))
    assert int(cost.tile_cycles.max()) == expected_max
    assert int(cost.tile_cycles.max()) == _tut7_compute_cost_model(R, C, split, tiles, W)
    assert int(cost.active_cycles.sum()) == expected_active
    # IPU Model invariant: Σ active = Σ vertex estimates.
    assert int(cost.active_cycles.sum()) == int(vcycles.sum())


def test_cost_without_inputs_has_cycles_only():
    """A compute model of one's own may return a ComputeCost of cycles alone; asking it
    for assignment details says why there are none."""
    cost = ComputeCost(tile_cycles=np.array([6, 0]), active_cycles=np.array([1, 0]))
    assert cost.tile_cycles.tolist() == [6, 0]
    with pytest.raises(AttributeError, match="no assignment details"):
        _ = cost.context_load


def _plain_assignment(contexts, launch, multi_launch, num_tiles, tiles, cycles, multi):
    """The barrel-scheduling rule written out plainly: each worker vertex, in order, to
    the lowest-numbered context with the least load on its tile."""
    load = [[0] * contexts for _ in range(num_tiles)]
    multis = [0] * num_tiles
    context = []
    for t, c, m in zip(tiles.tolist(), cycles.tolist(), multi.tolist(), strict=True):
        if m:
            multis[t] += c + multi_launch
            context.append(-1)
        else:
            best = min(range(contexts), key=lambda k, row=load[t]: (row[k], k))
            load[t][best] += c + launch
            context.append(best)
    cycles_of = [contexts * max(row) + m for row, m in zip(load, multis, strict=True)]
    return np.array(load), np.array(cycles_of), np.array(context)


@pytest.mark.parametrize("seed", range(6))
def test_assignment_matches_the_rule_written_plainly(make_config, seed):
    rng = np.random.default_rng(seed)
    contexts = int(rng.integers(1, 8))
    launch = int(rng.integers(0, 3)) * (seed % 2)  # no launch cycles: zero-cost vertices
    cfg = _tile_cfg(
        make_config, worker_contexts=contexts, vertex_launch_cycles=launch,
        multi_vertex_launch_cycles=int(rng.integers(0, 5)),
    )  # fmt: skip
    num_tiles = int(rng.integers(1, 9))
    n = int(rng.integers(0, 300))
    tiles = rng.integers(0, num_tiles, n)
    if seed % 3 == 0:
        tiles = np.sort(tiles)  # tile by tile, as lowering orders them
    cycles = rng.integers(0, 40, n) * (rng.random(n) < 0.8)  # many of no cost
    multi = rng.random(n) < 0.1
    cost = _run(cfg, num_tiles, tiles, cycles, multi)
    load, want, context = _plain_assignment(
        contexts, launch, cfg.multi_vertex_launch_cycles, num_tiles, tiles, cycles, multi
    )
    np.testing.assert_array_equal(cost.tile_cycles, want)
    np.testing.assert_array_equal(cost.context_load, load)
    np.testing.assert_array_equal(cost.vertex_context, context)


@pytest.mark.parametrize("seed", range(8))
def test_first_costs_equal_the_full_assignment(seed):
    """compute_cost's tile and active cycles come from _tile_costs, which takes a tile's
    costliest worker vertex while no tile has more worker vertices than contexts, else
    the assignment; they must be the full assignment's, bit for bit, both ways: tiles
    with no vertex, multi-vertices, zero-cost vertices, few or many per context, the
    extra vertex early or late."""
    from ipusim.tile.compute import _assign_vertices, _tile_costs

    rng = np.random.default_rng(100 + seed)
    simple = 0
    for _ in range(40):
        contexts = int(rng.integers(1, 8))
        launch, multi_launch = int(rng.integers(0, 3)) * (seed % 2), int(rng.integers(0, 5))
        num_tiles = int(rng.integers(1, 40))
        few = rng.random() < 0.5  # at most one worker vertex a context on each tile
        n = int(rng.integers(0, num_tiles * contexts + 1 if few else 400))
        if few:
            tiles = rng.permutation(np.repeat(np.arange(num_tiles), contexts))[:n]
        else:
            tiles = rng.integers(0, max(num_tiles // 2, 1), n) * 2  # odd tiles have none
            tiles = np.minimum(tiles, num_tiles - 1)
        if seed % 3 == 0:
            tiles = np.sort(tiles)
        tiles = tiles.astype(np.int64)
        cycles = (rng.integers(0, 1 << 20, n) * (rng.random(n) < 0.8)).astype(np.int64)
        multi = rng.random(n) < 0.15
        args = (num_tiles, contexts, launch, multi_launch, tiles, cycles, multi)
        _, _, active, _, _, want, bad = _assign_vertices(*args)
        got_active, got, got_bad = _tile_costs(*args)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_active, active)
        assert got_bad == bad == -1
        simple += int(np.bincount(tiles[~multi], minlength=num_tiles).max(initial=0) <= contexts)
    assert simple >= 10  # the one-pass way is taken often
    # a bad vertex is found by both, with nothing assigned
    tiles = np.array([0, 3, 1], np.int64)
    args = (2, 6, 0, 0, tiles, np.array([1, 2, 3], np.int64), np.zeros(3, bool))
    assert _tile_costs(*args)[2] == _assign_vertices(*args)[6] == 1
