"""Memory placement's host memory: narrow block columns, tables joined column by
column, a layout pass per chunk of tiles, joint groups found without sorting every
key (ipusim.tile.memory, poplar_api.lowering.memory). The placements are checked
against the placement rules written out plainly in ``test_tile_memory_joint``."""

from __future__ import annotations

import numpy as np
import pytest
from test_tile_memory_joint import SPEC, _reference

import ipusim.tile.memory as tile_memory
from ipusim.tile.memory import Block, BlockTable, _last_range_starts, allocate_table
from poplar_api.lowering.liveness import Liveness
from poplar_api.lowering.memory import _split_rows


def _random_blocks(rng: np.random.Generator, tiles: int, per_tile: int) -> list[Block]:
    """Blocks of several tiles: always live, live at no point, ranges, and joint groups
    of two or three disjoint ranges of one size."""
    blocks: list[Block] = []
    for tile in range(tiles):
        for k in range(per_tile):
            kind = rng.integers(0, 4)
            size = int(rng.integers(1, 6)) * 8  # (empty blocks: the plain rules differ)
            region = ("any", "interleaved", "nonInterleaved")[int(rng.integers(0, 3))]
            if kind == 0:
                blocks.append(Block(f"a{k}", "variable", tile, size, 4, region, None))
            elif kind == 1:
                blocks.append(Block(f"n{k}", "variable", tile, size, 4, region, (3, 2)))
            elif kind == 2:
                lo = int(rng.integers(0, 20))
                blocks.append(Block(f"r{k}", "variable", tile, size, 4, region,
                                    (lo, lo + int(rng.integers(0, 6)))))  # fmt: skip
            else:  # a joint group: disjoint ranges, one address
                key = 1000 + k
                starts = np.sort(rng.choice(np.arange(0, 30, 6), int(rng.integers(2, 4)), False))
                blocks += [Block(f"j{k}", "variable", tile, size, 4, region,
                                 (int(s), int(s) + 3), key) for s in starts]  # fmt: skip
    return blocks


@pytest.mark.parametrize("chunk", [1, 7, 40, 1 << 21])
@pytest.mark.parametrize("seed", [0, 1])
def test_placement_in_chunks_of_tiles_follows_the_rules(monkeypatch, chunk, seed):
    rng = np.random.default_rng(seed)
    blocks = _random_blocks(rng, tiles=6, per_tile=9)
    monkeypatch.setattr(tile_memory, "ALLOCATE_CHUNK_BLOCKS", chunk)
    region, offset = allocate_table(SPEC, 6, BlockTable.from_blocks(blocks))
    got = list(zip(region.tolist(), offset.tolist(), strict=True))
    assert got == _reference(SPEC, blocks)


def test_tile_chunks_cover_every_tile_once_and_never_split_one():
    counts = np.array([0, 5, 3, 0, 9, 1, 0])
    ends = np.cumsum(counts)
    for chunk in (1, 2, 4, 8, 100):
        chunks = tile_memory._tile_chunks(ends, chunk)
        tiles = [t for t0, t1 in chunks for t in range(t0, t1)]
        assert tiles == list(range(counts.size))
    assert tile_memory._tile_chunks(np.zeros(0, np.int64), 4) == []


def _plain_last_starts(tile, joint, first):
    out = first.astype(np.int64).copy()
    for i in range(tile.size):
        if joint[i] >= 0:
            same = (tile == tile[i]) & (joint == joint[i])
            out[i] = first[same].max()
    return out


@pytest.mark.parametrize("in_key_order", [True, False])
def test_joint_groups_take_their_last_range_start(in_key_order):
    rng = np.random.default_rng(3)
    n = 300
    joint = np.where(rng.random(n) < 0.6, rng.integers(0, 9, n), -1)
    tile = rng.integers(0, 5, n)
    if in_key_order:  # as lowering gives them: by variable, then tile
        order = np.lexsort((tile, joint))
        joint, tile = joint[order], tile[order]
    first = rng.integers(-1, 50, n).astype(np.int32)
    got = _last_range_starts(tile.astype(np.int16), joint.astype(np.int32), first)
    np.testing.assert_array_equal(got, _plain_last_starts(tile, joint, first))
    assert got.dtype == first.dtype


def test_concat_keeps_narrow_columns_and_release_empties_the_parts():
    a = BlockTable.rows("x", "variable", np.array([0, 3]), np.array([8, 16]), 4, "any", (1, 2))
    b = BlockTable.rows("y", "stack", np.array([2]), np.array([70000]), 1, "nonInterleaved")
    b.joint = np.array([5], np.int64)
    want = BlockTable.concat([a, b])
    assert want.size.dtype == np.int32 and want.tile.dtype == np.int8
    assert want.joint is not None and want.joint.tolist() == [-1, -1, 5]
    got = BlockTable.concat([a, b], release=True)
    for col in ("name", "category", "tile", "size", "element_bytes", "region", "live_first",
                "live_last", "always", "joint"):  # fmt: skip
        np.testing.assert_array_equal(getattr(got, col), getattr(want, col))
    assert got.names == ["x", "y"] and got.categories == ["variable", "stack"]
    assert a.tile.size == 0 and b.size.size == 0 and b.joint is None


def test_split_rows_repeat_each_split_variable_once_per_range():
    ranges = {4: ((0, 3), (7, 9)), 9: ((1, 1), (5, 6), (8, 8)), 11: ()}
    live = Liveness(None, np.zeros(12), np.zeros(12), np.zeros(12, bool), ranges)  # type: ignore[arg-type]
    var = np.array([1, 4, 4, 9, 10, 11])
    split, rows, copy = _split_rows(live, var)
    assert split is not None and rows is not None and copy is not None
    want_rows, want_copy, want_ranges = [], [], []
    for i, v in enumerate(var.tolist()):
        own = ranges.get(v) or (None,)
        for k, r in enumerate(own):
            want_rows.append(i)
            want_copy.append(k)
            want_ranges.append(r)
    assert rows.tolist() == want_rows and copy.tolist() == want_copy
    vids, range_at, flat = split
    for i, c, r in zip(rows.tolist(), copy.tolist(), want_ranges, strict=True):
        if r is not None:
            at = int(np.searchsorted(vids, var[i]))
            assert tuple(flat[range_at[at] + c]) == r
    assert _split_rows(live, np.array([0, 1, 2])) == (None, None, None)


def test_exchange_totals_read_from_the_step_equal_the_cost_and_stay_out_of_its_cache():
    """Placement reads a per-tile-totals exchange's totals from its step: the values
    its cost gives (transfers and totals forms, the phase model too), while the
    timing model's cached cost is not asked for them; a model whose ``cost`` is its
    own is asked."""
    from ipusim import ir
    from ipusim.config import load_config
    from ipusim.timing import TimingModel
    from poplar_api.lowering.memory import _step_totals, exchange_code

    cfg = load_config("mk2")
    timing = TimingModel(cfg)
    totals = ir.Exchange(
        name="ex", tile=[3, 7, 1200], bytes_sent=[64, 0, 12], bytes_received=[0, 76, 0],
        messages_sent=[2, 0, 1], messages_received=[0, 3, 0], max_distance=[1, 1, 2],
    )  # fmt: skip
    transfers = ir.Exchange(name="tx", src_tile=[0, 0, 5], dst_tile=[9, 4, 0],
                            num_bytes=[8, 16, 4])  # fmt: skip

    class Own(TimingModel):
        def cost(self, step):
            return super().cost(step)

    for step in (totals, transfers):
        cost = TimingModel(cfg).cost(step)
        want = (cost.bytes_sent, cost.bytes_received, cost.messages_sent, cost.messages_received)
        for model in (timing, Own(cfg)):
            got = _step_totals(model, step)
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)
    exchange_code(timing, totals)
    cached = timing._cache.get(id(totals))
    assert cached is None or "bytes_sent" not in cached[1].__dict__
