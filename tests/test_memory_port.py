"""Counted compute sets are held to the tile's load and store bandwidth."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.machine import Machine
from ipusim.tile.counted import OP_CLASSES, CountedCompute, CountedExecution, CountedPart
from ipusim.tile.memory_port import memory_may_bind


def counted_step(op: str, runs: int = 100, workers: int = 6) -> ir.Sequence:
    """One multi-vertex on tile 0 whose ``workers`` workers each ran ``runs`` ``op``s."""
    profile = np.zeros((1, len(OP_CLASSES)), np.int64)
    profile[0, OP_CLASSES.index(op)] = 1
    part = CountedPart.of(np.array([0]), "multi", workers, profile, np.full((workers, 1), runs))
    step = CountedCompute(name="cs", vertex_tile=[0], vertex_cycles=[0], vertex_multi=[True])
    step.counted.put(CountedExecution(static=np.zeros(1, np.int64), parts=(part,)))
    return ir.Sequence([step])


def tile0_cycles(op: str, **overrides) -> int:
    trace = Machine(load_config("tiny", overrides)).run(counted_step(op))
    return int(trace.records[0].tile_cycles[0])


# issue: 6 contexts x (100 operations + 6 entry cycles) + 11 supervisor cycles
ISSUE = 6 * (100 + 6) + 11


@pytest.mark.parametrize(
    ("op", "field", "per_cycle", "moved"),
    [
        ("load_64", "memory.load_bytes_per_cycle", 2, 6 * 100 * 8),
        ("load_32", "memory.load_bytes_per_cycle", 1, 6 * 100 * 4),
        ("store_64", "memory.store_bytes_per_cycle", 4, 6 * 100 * 8),
        ("store_narrow", "memory.store_bytes_per_cycle", 1, 6 * 100 * 4),
    ],
)
def test_a_narrow_path_holds_the_tile(op, field, per_cycle, moved) -> None:
    assert tile0_cycles(op) == ISSUE + (op == "store_narrow") * 6 * 100 * 2  # 3 per store
    assert tile0_cycles(op, **{field: per_cycle}) == -(-moved // per_cycle)


def test_loads_and_stores_use_separate_paths() -> None:
    # 4,800 bytes loaded at 8 per cycle is 600 cycles, under the issue time: no change
    assert tile0_cycles("load_64", **{"memory.store_bytes_per_cycle": 1}) == ISSUE


@pytest.mark.parametrize("preset", ["mk1", "mk2", "bow", "tiny", "mk2-ipumodel"])
def test_the_paths_never_bind_at_published_bandwidths(preset) -> None:
    cfg = load_config(preset)
    assert not memory_may_bind(cfg.memory, cfg.counted)
