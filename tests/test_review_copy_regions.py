"""The strided regions of a ``Copy``'s on-tile part (``on_tile_copy_steps``), against
the definition written out here: a region is a maximal run of pieces on one tile of one
length whose starts step by the same strides on both sides; a region of one piece has
no stride yet, so the next piece of its length continues it whatever its stride."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ipusim.config import load_config
from ipusim.machine_copies import on_tile_copy_vertices
from poplar_api.lowering.copies import on_tile_copy_steps

RUNTIME = {"code.copy_estimate": "runtime"}


def reference_regions(tile: list[int], src: list[int], dst: list[int]):
    """Pieces (tile, first element, length) and whether each starts a region, by the
    definition in the module docstring (elements already in copy order per tile)."""
    pieces: list[list[int]] = []  # [tile, position, length]
    for k in range(len(tile)):
        if (
            pieces
            and tile[k] == pieces[-1][0]
            and src[k] == src[k - 1] + 1
            and dst[k] == dst[k - 1] + 1
        ):
            pieces[-1][2] += 1
        else:
            pieces.append([tile[k], k, 1])
    new = []
    for j, (t, pos, n) in enumerate(pieces):
        if j == 0 or t != pieces[j - 1][0] or n != pieces[j - 1][2]:
            new.append(True)
            continue
        prev = pieces[j - 1][1]
        stride = (src[pos] - src[prev], dst[pos] - dst[prev])
        if new[j - 1]:  # the region has one piece: this one sets its stride
            new.append(False)
            continue
        before = pieces[j - 2][1]
        new.append(stride != (src[prev] - src[before], dst[prev] - dst[before]))
    return pieces, new


def _check(tile: list[int], src: list[int], dst: list[int], item: int = 4) -> None:
    cfg = load_config("tiny", RUNTIME)
    t = np.asarray(tile, np.int32)  # as the lowering of a Copy passes its tiles
    got = on_tile_copy_steps(cfg, np.asarray(src), np.asarray(dst), t, np.ones(t.size, bool), item)
    pieces, new = reference_regions(tile, src, dst)
    # the tile's copy is a gather when its source side has more runs than its destination
    gather = {}
    for u in set(tile):
        at = [k for k in range(len(tile)) if tile[k] == u]
        s_runs = 1 + sum(src[b] != src[a] + 1 for a, b in itertools.pairwise(at))
        d_runs = 1 + sum(dst[b] != dst[a] + 1 for a, b in itertools.pairwise(at))
        gather[u] = d_runs < s_runs
    want = on_tile_copy_vertices(
        cfg,
        [p[0] for p in pieces],
        [p[2] * item for p in pieces],
        [gather[p[0]] for p in pieces],
        new,
    )
    assert got[0].tolist() == want[0].tolist()
    assert got[1].tolist() == want[1].tolist()


def test_a_strided_region_after_a_piece_of_another_length_is_one_region() -> None:
    # one single element, then three pairs at source stride 10 and destination stride
    # 2: two regions ({single}, {three pairs}), the pairs' stride set by the first two
    src = [100, 0, 1, 10, 11, 20, 21]
    dst = [50, 0, 1, 2, 3, 4, 5]
    _check([0] * 7, src, dst)


@pytest.mark.parametrize("seed", range(20))
def test_regions_follow_the_definition_on_random_copies(seed: int) -> None:
    rng = np.random.default_rng(seed)
    tile, src, dst = [], [], []
    s = d = 0
    for _ in range(int(rng.integers(1, 25))):
        n = int(rng.choice([1, 2, 2, 3]))
        s += int(rng.choice([3, 7, 7, 7, 50]))
        d += int(rng.choice([n, n, 4, 9]))
        t = int(rng.integers(0, 2))
        for i in range(n):
            tile.append(t)
            src.append(s + i)
            dst.append(d + i)
        s += n
        d += n
    order = np.argsort(tile, kind="stable")  # the copy's elements come in tile order
    _check(*([x[i] for i in order] for x in (tile, src, dst)))
