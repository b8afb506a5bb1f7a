"""Acceptance: the first compute set of tut7 (10000 x 1000), built directly as IR.

Tile and estimate of every vertex follow the formulas of the tutorial; the expected
numbers come from the tutorial's own cost model, written out here.
"""

from __future__ import annotations

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.machine import Machine


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def mul_cs(rows: int, cols: int, split: int, tiles: int) -> ir.Compute:
    vertex_tile, vertex_cycles = [], []
    row = np.arange(rows)
    for i in range(split):
        b, e = i * cols // split, (i + 1) * cols // split
        if e == b:
            continue
        vertex_tile.append((i * rows + row) * tiles // (split * rows))
        vertex_cycles.append(np.full(rows, 5 + ((e - b) + 1) // 2))
    return ir.Compute(
        name="mulCS",
        vertex_tile=np.concatenate(vertex_tile),
        vertex_cycles=np.concatenate(vertex_cycles),
        vertex_type_names=("DotProductVertex",),
    )


def cost_model_compute(rows: int, cols: int, split: int, tiles: int, workers: int = 6) -> int:
    max_v = max(cdiv(rows * split, tiles), 1)
    cycles_per_v = 5 + (cdiv(cols, split) + 1) // 2
    return cdiv(max_v, workers) * workers * cycles_per_v


@pytest.mark.parametrize(
    ("preset", "tiles", "split", "slowest"), [("mk1", 1216, 5, 4410), ("mk2", 1472, 7, 3696)]
)
def test_tut7_mul_cs_slowest_tile(preset, tiles, split, slowest):
    cfg = load_config(preset)
    assert cfg.num_tiles == tiles
    assert cost_model_compute(10000, 1000, split, tiles) == slowest
    trace = Machine(cfg).run(mul_cs(10000, 1000, split, tiles))
    (rec,) = trace.records
    assert int(rec.tile_cycles.max()) == slowest
    assert rec.cycles == slowest
    if preset == "mk1":
        # 10000 rows x 5 segments of 200 columns, each 5 + 201 // 2 = 105 cycles
        assert trace.totals["compute_active"] == 10000 * 5 * 105 == 5_250_000
    # including idle threads can only be more than the estimates themselves
    assert trace.totals["compute"] >= trace.totals["compute_active"]
