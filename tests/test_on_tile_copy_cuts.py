"""The chunking of an on-tile copy into worker vertices (ipusim.machine_copies) on
random pieces, against a reference that walks each tile's pieces one segment at a
time in plain Python, and the pieces of an on-tile copy (its strided regions too)
against a plain loop."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ipusim.config import load_config
from ipusim.machine_copies import on_tile_copy_vertices
from poplar_api.lowering.copies import _tile_regions

FIELDS = {
    "code.copy_gather_fixed_cycles": 100.0,
    "code.copy_gather_region_cycles": 10.5,
    "code.copy_scatter_fixed_cycles": 3.0,
    "code.copy_scatter_region_cycles": 20.0,
}


#: Bytes and Poplibs' transform granularity (getScaleFactorForTransform) of some types.
TYPES = {"float": (4, 2), "half": (2, 4), "int": (4, 4), "char": (1, 4)}


def walk(cfg, tiles, nbytes, gather, fresh, types=None) -> list[tuple[int, int]]:
    """Sorted ``(tile, cycles)`` of the copy vertices: each tile's pieces in the given
    order cut at multiples of its chunk, every segment priced on its own (the planner
    rule: as a fraction of a cycle, the vertex's sum rounded up once)."""
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
        planned: dict[int, Fraction] = {}
        offset = 0
        for n, k in enumerate(mine):
            x, end = offset, offset + nbytes[k]
            while x < end:
                v = x // chunk
                y = min(end, (v + 1) * chunk)
                first_of_vertex = v not in moves
                moves[v] = moves.get(v, 0) + math.ceil((y - x) / rate)
                per_piece[v] = per_piece.get(v, 0) + 35 + (y - x) // 4 + (y - x) % 4 * 5
                if types is not None:
                    size, grain = TYPES[types[k]]
                    f1 = 4 if (nbytes[k] // size) % grain == 0 else 3
                    share = Fraction((y - x) * 5, min(rate, size) * f1)
                    planned[v] = planned.get(v, Fraction(0)) + share
                starts_region = x == offset and (fresh[k] or n == 0)
                setups[v] = setups.get(v, 0) + (starts_region or first_of_vertex)
                x = y
            offset = end
        g = gather[mine[0]]
        for v in moves:
            if code.copy_estimate == "poplibs":
                cycles = 12 + per_piece[v]
            elif code.copy_estimate == "planner":
                cycles = round(code.copy_scatter_fixed_cycles) + math.ceil(planned[v])
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
        # element types: one for the copy, or one per piece (a mixed copy)
        names = list(TYPES)
        types = [names[trial % 4]] * n if trial % 5 else rng.choice(names, n).tolist()
        size = np.array([TYPES[t][0] for t in types])
        elements = rng.integers(1, 9, n) * (4 if trial % 2 else 1)
        if trial % 3 == 0:
            elements = rng.integers(1, 100, n)
        nbytes = (elements * size).tolist()
        tile_gather = rng.random(5) < 0.5
        gather = [bool(tile_gather[t]) for t in tiles]
        fresh = (rng.random(n) < 0.6).tolist()
        got_t, got_c = on_tile_copy_vertices(cfg, tiles, nbytes, gather, fresh, types)
        got = sorted(zip(got_t.tolist(), got_c.tolist(), strict=True))
        want = walk(cfg, tiles, nbytes, gather, fresh, types)
        assert got == want, (trial, tiles, nbytes, types)


def _pieces_reference(local, d_tile, src, dst) -> tuple[list, ...]:
    """The pieces of the marked elements by a plain loop: the elements by tile (in
    position order within one), a piece wherever a tile starts or either side's id does
    not follow the one before; per piece its tile, length, gather (more source runs than
    destination runs on its tile) and whether it starts a strided region."""
    order = sorted((int(d_tile[k]), k) for k in range(len(local)) if local[k])
    tile = [t for t, _ in order]
    s = [int(src[k]) for _, k in order]
    d = [int(dst[k]) for _, k in order]
    starts, runs = [], {}
    for i in range(len(tile)):
        new = i == 0 or tile[i] != tile[i - 1]
        s_break = new or s[i] != s[i - 1] + 1
        d_break = new or d[i] != d[i - 1] + 1
        s_runs, d_runs = runs.get(tile[i], (0, 0))
        runs[tile[i]] = (s_runs + s_break, d_runs + d_break)
        if s_break or d_break:
            starts.append(i)
    ends = [*starts[1:], len(tile)] if starts else []
    tiles = [tile[i] for i in starts]
    length = [b - a for a, b in zip(starts, ends, strict=True)]
    gather = [runs[t][1] < runs[t][0] for t in tiles]
    region, strides = [], None
    for k, i in enumerate(starts):
        step = (s[i] - s[starts[k - 1]], d[i] - d[starts[k - 1]]) if k else (s[i], d[i])
        if k == 0 or tiles[k] != tiles[k - 1] or length[k] != length[k - 1]:
            region.append(True)  # a tile's first piece, or another length
        elif region[-1]:
            region.append(False)  # a region's second piece: it sets the strides
        else:
            region.append(step != strides)
        strides = step
    return tiles, length, gather, region


def test_copy_pieces_match_a_plain_loop() -> None:
    rng = np.random.default_rng(11)
    for trial in range(300):
        n = int(rng.integers(0, 80))
        d_tile = rng.integers(0, 4, n).astype(np.int32)  # as copy_tiles gives them
        local = rng.random(n) < (0.9 if trial % 2 else 0.4)
        # runs of consecutive ids with random jumps, or steps repeating (strided
        # regions), on each side; a side given as a range (a tensor's consecutive ids)
        if trial % 3 == 0:
            src = np.cumsum(np.where(rng.random(n) < 0.7, 1, rng.integers(-5, 9, n)))
        else:
            src = (np.arange(n) % int(rng.integers(1, 4))) * int(rng.integers(1, 9))
            src = src + np.arange(n) // 3 * 40
        dst = np.cumsum(np.where(rng.random(n) < 0.5, 1, rng.integers(2, 9, n)))
        s_side = range(5, 5 + n) if trial % 7 == 0 else src.astype(np.int64)
        d_side = dst.astype(np.int32 if trial % 2 else np.int64)
        got = _tile_regions(s_side, d_side, d_tile, local)
        want = _pieces_reference(local, d_tile, np.asarray(list(s_side)), d_side)
        for g, w in zip(got, want, strict=True):
            assert g.tolist() == w, (trial, got, want)


def test_an_unmapped_local_element_is_refused() -> None:
    d_tile = np.array([0, -1, 1], np.int32)
    with pytest.raises(ValueError, match="no tile"):
        _tile_regions(range(3), range(10, 13), d_tile, np.array([True, True, False]))
    got = _tile_regions(range(3), range(10, 13), d_tile, np.array([True, False, True]))
    assert [a.tolist() for a in got] == [[0, 1], [1, 1], [False, False], [True, True]]
