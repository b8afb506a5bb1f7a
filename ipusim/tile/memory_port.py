"""The tile memory's load and store bandwidth, charged from counted loads and stores.

A tile's memory serves all of its contexts through one load path and one store path
(docs/sources.md, grade A: up to ``memory.load_bytes_per_cycle`` = 16 bytes per tile
cycle loaded, with 128-bit loads from the interleaved region, 8 from one memory
element; ``memory.store_bytes_per_cycle`` = 8 stored). The barrel issues at most one
instruction per tile cycle and the widest counted access loads 128 bits (a dual 64-bit
load) and stores 64, so at the presets' figures memory never limits a compute set: the
rule below only binds when an architect lowers a bandwidth (a sweep over it is no
longer flat).

When a compute set's cycles are counted (:mod:`ipusim.tile.counted`), every tile moves
the bytes its vertices' loads and stores moved, and cannot finish sooner than its
memory ports allow::

    tile cycles >= max(ceil(bytes loaded / memory.load_bytes_per_cycle),
                       ceil(bytes stored / memory.store_bytes_per_cycle))

Loads and stores use separate paths (a Colossus instruction can load and store in the
same cycle), so the two floors do not add. An 8- or 16-bit access moves the 32-bit
word that holds it (estimate: sub-word accesses read the whole word). Counted
operations do not say which region an address lies in; a 64-bit load takes a cycle of
one bank in either region, and the tile's 16 bytes per cycle need the two accesses of a
dual load to hit different banks. With ``memory.bank_conflicts`` on, those collisions
are charged from where memory placement put the data (:func:`conflict_cycles`,
:mod:`ipusim.tile.banks`): that is where the regions differ, the interleaved region
spreading consecutive 64-bit words over a pair of banks.
"""

from __future__ import annotations

import numpy as np

from ipusim.config import CountedConfig, MemoryConfig
from ipusim.tile.banks import PlacedData, collision_rates
from ipusim.tile.counted import OP_CLASSES, CountedExecution

__all__ = [
    "ACCESS_BYTES",
    "LOADED_BYTES",
    "STORED_BYTES",
    "conflict_cycles",
    "memory_floor_cycles",
    "memory_may_bind",
    "tile_access_bytes",
]

#: Bytes one operation of each counted class loads and stores through the memory paths
#: (8- and 16-bit accesses move their 32-bit word: an estimate). Classes not listed
#: move nothing.
LOADED_BYTES: dict[str, int] = {
    "load_narrow": 4,
    "load_32": 4,
    "load_64": 8,
    "load_2x64": 16,
    "load_2x64_store_64": 16,
}
STORED_BYTES: dict[str, int] = {
    "store_narrow": 4,
    "store_32": 4,
    "store_64": 8,
    "load_2x64_store_64": 8,
}
#: Every class that loads or stores, with the bytes it moves (both paths together).
ACCESS_BYTES: dict[str, int] = {
    c: LOADED_BYTES.get(c, 0) + STORED_BYTES.get(c, 0) for c in {**LOADED_BYTES, **STORED_BYTES}
}

_LOAD = np.array([LOADED_BYTES.get(c, 0) for c in OP_CLASSES], np.int64)
_STORE = np.array([STORED_BYTES.get(c, 0) for c in OP_CLASSES], np.int64)


def tile_access_bytes(
    execution: CountedExecution, vertex_tile: np.ndarray, num_tiles: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(loaded, stored)``: int64[num_tiles] bytes the counted vertices of one
    execution loaded and stored on each tile (vertices not counted move nothing here)."""
    loaded = np.zeros(num_tiles, np.int64)
    stored = np.zeros(num_tiles, np.int64)
    for part in execution.parts:
        ops = part.operations()
        tiles = np.asarray(vertex_tile)[part.positions]
        loaded += np.bincount(tiles, weights=ops @ _LOAD, minlength=num_tiles).astype(np.int64)
        stored += np.bincount(tiles, weights=ops @ _STORE, minlength=num_tiles).astype(np.int64)
    return loaded, stored


def memory_may_bind(memory: MemoryConfig, counted: CountedConfig) -> bool:
    """Whether the memory floor can ever exceed a counted compute set's barrel time.

    A tile issues at most one instruction per tile cycle (one per ``contexts`` cycles on
    each of ``contexts`` contexts), so when every load and store class costs at least
    one thread cycle and each path moves its widest access per cycle (16 bytes loaded
    by a dual load, 8 stored), no tile
    can move bytes faster than its paths allow and the floor is skipped.
    """
    issue = [getattr(counted, f"{c}_cycles", 1.0) for c in ACCESS_BYTES if c in OP_CLASSES]
    return (
        min(issue, default=1.0) < 1.0
        or memory.load_bytes_per_cycle < max(LOADED_BYTES.values())
        or memory.store_bytes_per_cycle < max(STORED_BYTES.values())
    )


def memory_floor_cycles(
    memory: MemoryConfig,
    executions: list[CountedExecution],
    vertex_tile: np.ndarray,
    num_tiles: int,
) -> np.ndarray:
    """int64[num_tiles]: the fewest tile cycles each tile's memory paths allow for one
    counted execution of a compute set (module docstring); with several replicas'
    executions, the largest of theirs."""
    floor = np.zeros(num_tiles, np.int64)
    for execution in executions:
        loaded, stored = tile_access_bytes(execution, vertex_tile, num_tiles)
        loads = -(-loaded // int(memory.load_bytes_per_cycle))
        stores = -(-stored // int(memory.store_bytes_per_cycle))
        np.maximum(floor, np.maximum(loads, stores), out=floor)
    return floor


_TWO_LOADS = OP_CLASSES.index("load_2x64")
_TWO_LOADS_STORE = OP_CLASSES.index("load_2x64_store_64")


def conflict_cycles(
    memory: MemoryConfig,
    executions: list[CountedExecution],
    vertex_tile: np.ndarray,
    num_tiles: int,
    placed: PlacedData,
) -> np.ndarray:
    """int64[num_tiles]: the tile cycles bank conflicts add to one counted execution of
    a compute set (with several replicas' executions, the largest of theirs).

    Each tile's ``ld2x64pace`` and ``ld2xst64pace`` instructions, as counted, times the
    expected extra cycles of one of them on that tile
    (:func:`ipusim.tile.banks.collision_rates`), rounded up: a colliding access waits a
    cycle of the tile's memory, and the tile's pipeline with it.
    """
    two, three = collision_rates(memory, placed, num_tiles)
    extra = np.zeros(num_tiles, np.int64)
    tiles_of = np.asarray(vertex_tile)
    for execution in executions:
        expected = np.zeros(num_tiles, np.float64)
        for part in execution.parts:
            ops = part.operations()
            tiles = tiles_of[part.positions]
            expected += np.bincount(tiles, weights=ops[:, _TWO_LOADS], minlength=num_tiles) * two
            expected += (
                np.bincount(tiles, weights=ops[:, _TWO_LOADS_STORE], minlength=num_tiles) * three
            )
        np.maximum(extra, np.ceil(np.round(expected, 9)).astype(np.int64), out=extra)
    return extra
