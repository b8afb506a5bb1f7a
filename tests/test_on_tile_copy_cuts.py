"""The chunking of an on-tile copy into worker vertices (ipusim.machine_copies) on
random pieces, against a reference that walks each tile's pieces one segment at a
time in plain Python, and the merge of piece starts with chunk cuts against
``np.union1d``."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim.config import load_config
from ipusim.machine_copies import _cut_pieces, on_tile_copy_vertices

FIELDS = {
    "code.copy_gather_fixed_cycles": 100.0,
    "code.copy_gather_region_cycles": 10.5,
    "code.copy_scatter_fixed_cycles": 3.0,
    "code.copy_scatter_region_cycles": 20.0,
}


def walk(cfg, tiles, nbytes, gather, fresh) -> list[tuple[int, int]]:
    """Sorted ``(tile, cycles)`` of the copy vertices: each tile's pieces in the given
    order cut at multiples of its chunk, every segment priced on its own."""
    contexts = cfg.tile.worker_contexts
    rate = min(cfg.memory.load_bytes_per_cycle, cfg.memory.store_bytes_per_cycle)
    code = cfg.code
    out = []
    for t in sorted(set(tiles)):
        mine = [k for k in range(len(tiles)) if tiles[k] == t]
        total = sum(nbytes[k] for k in mine)
        chunk = math.ceil(total / (contexts * 8)) * 8
        moves: dict[int, int] = {}
        setups: dict[int, int] = {}
        per_piece: dict[int, int] = {}
        offset = 0
        for n, k in enumerate(mine):
            x, end = offset, offset + nbytes[k]
            while x < end:
                v = x // chunk
                y = min(end, (v + 1) * chunk)
                first_of_vertex = v not in moves
                moves[v] = moves.get(v, 0) + math.ceil((y - x) / rate)
                per_piece[v] = per_piece.get(v, 0) + 35 + (y - x) // 4 + (y - x) % 4 * 5
                starts_region = x == offset and (fresh[k] or n == 0)
                setups[v] = setups.get(v, 0) + (starts_region or first_of_vertex)
                x = y
            offset = end
        g = gather[mine[0]]
        for v in moves:
            if code.copy_estimate == "poplibs":
                cycles = 12 + per_piece[v]
            elif code.copy_estimate == "planner":
                cycles = round(code.copy_scatter_fixed_cycles) + moves[v]
            else:
                fixed = code.copy_gather_fixed_cycles if g else code.copy_scatter_fixed_cycles
                per = code.copy_gather_region_cycles if g else code.copy_scatter_region_cycles
                cycles = round(fixed + setups[v] * per) + moves[v]
            out.append((t, cycles))
    return sorted(out)


@pytest.mark.parametrize("estimate", ["runtime", "planner", "poplibs"])
def test_vertices_match_a_segment_walk(estimate: str) -> None:
    cfg = load_config("tiny", {**FIELDS, "code.copy_estimate": estimate})
    rng = np.random.default_rng(7)
    for trial in range(40):
        n = int(rng.integers(1, 60))
        tiles = rng.integers(0, 5, n).tolist()
        # small pieces (many in one chunk) and large ones (cut by several chunk bounds)
        nbytes = (rng.integers(1, 9, n) * (4 if trial % 2 else 1)).tolist()
        if trial % 3 == 0:
            nbytes = rng.integers(1, 400, n).tolist()
        tile_gather = rng.random(5) < 0.5
        gather = [bool(tile_gather[t]) for t in tiles]
        fresh = (rng.random(n) < 0.6).tolist()
        got_t, got_c = on_tile_copy_vertices(cfg, tiles, nbytes, gather, fresh)
        got = sorted(zip(got_t.tolist(), got_c.tolist(), strict=True))
        assert got == walk(cfg, tiles, nbytes, gather, fresh), (trial, tiles, nbytes)


def test_cuts_merge_like_a_union() -> None:
    rng = np.random.default_rng(3)
    for _ in range(200):
        start = np.cumsum(rng.integers(1, 6, int(rng.integers(1, 30)))) - 1
        cuts = np.sort(
            rng.choice(
                start[-1] + 4, min(int(rng.integers(0, 12)), int(start[-1]) + 4), replace=False
            )
        )
        starts, piece, whole = _cut_pieces(start, cuts)
        want = np.union1d(start, cuts)
        assert starts.tolist() == want.tolist()
        assert piece.tolist() == (np.searchsorted(start, want, side="right") - 1).tolist()
        assert whole.tolist() == np.isin(want, start).tolist()
