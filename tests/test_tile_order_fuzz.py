"""``layout._tile_order`` (plan_tiles' positions, copied run by run of the template)
against the element-by-element formula it replaced, restated in numpy, on random
templates, regions and groups of tiles."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.popops import layout


def _by_element(parts, lens, r_start, order) -> np.ndarray:
    """``out[at[m] + i] = order[r_start[f[m] + j[i]] + o[i]]``, position by position."""
    out = np.full(int(lens.sum()), -1, np.int64)
    at = np.cumsum(lens) - lens
    for part in parts:
        firsts, j_of, offsets = part[5]
        for m, k in enumerate(part[0].tolist()):
            for i in range(j_of.size):
                out[at[k] + i] = order[r_start[firsts[m] + j_of[i]] + offsets[i]]
    return out


@pytest.mark.parametrize("seed", range(4))
def test_tile_order_matches_the_positions_one_by_one(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(200):
        regions = int(rng.integers(1, 6))  # regions a tile of each group has
        sizes = rng.integers(1, 30, regions)
        tiles = int(rng.integers(1, 9))
        # every tile's regions, one after another in order (their starts in it)
        order = rng.permutation(tiles * int(sizes.sum())).astype(np.int64)
        r_start = np.concatenate(([0], np.cumsum(np.tile(sizes, tiles))[:-1]))
        members = rng.permutation(tiles)
        groups = np.array_split(members, int(rng.integers(1, tiles + 1)))
        lens = np.zeros(tiles, np.int64)
        parts = []
        for ks in groups:
            if not ks.size:
                continue
            # a template: pieces of regions (region, offset, length), some repeated or
            # out of order, as splits of regions between workers give them
            j_of, offsets = [], []
            for _ in range(int(rng.integers(0, 6))):
                j = int(rng.integers(0, regions))
                o = int(rng.integers(0, sizes[j]))
                n = int(rng.integers(1, sizes[j] - o + 1))
                j_of += [j] * n
                offsets += list(range(o, o + n))
            j_of_a = np.asarray(j_of, np.int64)
            offsets_a = np.asarray(offsets, np.int64)
            firsts = ks.astype(np.int64) * regions
            parts.append((ks.astype(np.int64), None, None, None, None, (firsts, j_of_a, offsets_a)))
            lens[ks] = j_of_a.size
        got = layout._tile_order(parts, lens, r_start, order)
        np.testing.assert_array_equal(got, _by_element(parts, lens, r_start, order))
