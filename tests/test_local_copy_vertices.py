"""The on-tile part of a whole ``Copy`` cut into copy vertices as its pieces are found
(``local_copy._local_vertices``) against the pieces found first and then cut by
:func:`ipusim.machine_copies.on_tile_copy_vertices` (the way a copy planned a row at a
time, or of an unknown type, still takes), on fuzzed copies: every estimate, element
type and size, tiles in order or not, some elements not local, ids as arrays or ranges."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.config import load_config
from ipusim.machine_copies import ELEMENT_BYTES, on_tile_copy_vertices
from poplar_api.lowering.local_copy import (
    _cut_vertices,
    _id_source,
    _local_vertices,
    _sort_by_tile,
    _tile_bound,
    _tile_regions,
    on_tile_copy_steps,
)


def _by_pieces(cfg, s_ids, d_ids, d_tile, local, item_bytes, element_type):
    tiles, length, gather, new_region = _tile_regions(s_ids, d_ids, d_tile, local)
    return on_tile_copy_vertices(cfg, tiles, length * item_bytes, gather, new_region, element_type)


def _fuzzed_copy(rng: np.random.Generator):
    n = int(rng.integers(1, 2000))
    blocks = rng.integers(1, 40, n)
    d_tile = np.repeat(rng.integers(0, 6, n), blocks)[:n].astype(np.int32)
    if rng.random() < 0.5:
        d_tile = np.sort(d_tile)
    local = rng.random(n) < rng.choice([0.3, 0.9, 1.0])
    kind = rng.integers(0, 3)
    if kind == 0:  # a transpose: one-element pieces at strides
        rows = int(rng.integers(1, 9))
        src = (np.arange(n) % rows) * n + np.arange(n) // rows
    elif kind == 1:  # runs with jumps
        src = np.cumsum(np.where(rng.random(n) < 0.7, 1, rng.integers(-6, 30, n))) + 500
    else:  # pieces of one length at a stride (strided regions)
        length = int(rng.integers(1, 9))
        src = (np.arange(n) // length) * (length + int(rng.integers(0, 5))) + np.arange(n) % length
    src = range(3, 3 + n) if rng.random() < 0.15 else src
    dst = range(7, 7 + n) if rng.random() < 0.4 else np.cumsum(rng.integers(1, 3, n))
    return src, dst, d_tile, local


@pytest.mark.parametrize("estimate", ["planner", "runtime", "poplibs"])
@pytest.mark.parametrize("seed", range(6))
def test_vertices_cut_as_pieces_are_found_equal_those_of_the_pieces(estimate, seed):
    rng = np.random.default_rng(seed)
    cfg = load_config("tiny", {"code.copy_estimate": estimate})
    names = list(ELEMENT_BYTES)
    for _ in range(25):
        src, dst, d_tile, local = _fuzzed_copy(rng)
        name = names[int(rng.integers(0, len(names)))]
        item = ELEMENT_BYTES[name]
        got = on_tile_copy_steps(cfg, src, dst, d_tile, local, item, name)
        want = _by_pieces(cfg, src, dst, d_tile, local, item, name)
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == want[1].tolist()


def test_the_planner_without_a_type_or_of_broken_elements_names_the_problem():
    cfg = load_config("tiny", {"code.copy_estimate": "planner"})
    d_tile = np.zeros(4, np.int32)
    local = np.ones(4, bool)
    with pytest.raises(ValueError, match="needs the copied elements' type"):
        on_tile_copy_steps(cfg, range(4), range(10, 14), d_tile, local, 4)
    with pytest.raises(ValueError, match="whole elements"):  # (a piece of 15 bytes)
        on_tile_copy_steps(
            cfg, range(5), range(10, 15), d_tile[:1].repeat(5), local[:1].repeat(5), 3, "float"
        )


def test_an_unmapped_element_is_refused():
    cfg = load_config("tiny", {"code.copy_estimate": "runtime"})
    with pytest.raises(ValueError, match="has no tile"):
        on_tile_copy_steps(
            cfg, range(3), range(10, 13), np.array([0, -1, 0], np.int32), np.ones(3, bool), 4
        )


@pytest.mark.parametrize("seed", range(4))
def test_tiles_in_order_are_walked_where_they_lie_as_sorted(seed):
    """A copy whose local elements' tiles ascend is walked in place (no sorted copy of
    its ids); the vertices equal those of the counting sort's arrays walked instead."""
    rng = np.random.default_rng(100 + seed)
    for _ in range(25):
        src, dst, d_tile, local = _fuzzed_copy(rng)
        d_tile = np.sort(d_tile)
        sides = (*_id_source(src), *_id_source(dst))
        rest = (int(rng.choice([1, 2, 4, 8])), 6, int(rng.choice([4, 8, 3])), 8)
        bound = int(d_tile[local].max()) + 1 if local.any() else 1
        starts, s, d = _sort_by_tile(local, d_tile, bound, *sides)
        sorted_walk = _cut_vertices(
            local, False, starts[:-1], starts[1:], np.diff(starts), s, False, 0, 0,
            d, False, 0, 0, *rest,
        )  # fmt: skip
        assert _tile_bound(local, d_tile)[1]
        in_place = _local_vertices(local, d_tile, *sides, *rest)
        for got, want in zip(in_place[:-1], sorted_walk[:-1], strict=True):
            assert got.tolist() == want.tolist()
        assert in_place[-1] == sorted_walk[-1]
