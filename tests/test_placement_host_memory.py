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


@pytest.mark.parametrize("seed", [0, 1])
def test_concat_of_many_parts_numbers_names_and_narrows_as_one_table(seed):
    # hundreds of small tables (per-tile blocks), one large one with repeated names
    # (variables of one name) and parts whose extremes fall in different chunks of
    # the bounds pass: every column's values and type against numpy on the parts
    rng = np.random.default_rng(seed)
    tables = []
    for k in range(300):
        n = int(rng.integers(1, 1500))
        tiles = rng.integers(0, 1472, n)
        tables.append(BlockTable.rows(f"cs{k % 40}", ["stack", "vertexCode"][k % 2], tiles,
                                      rng.integers(1, 5000, n), 4, "any", (k, k + 3)))  # fmt: skip
    big = 70_000
    names = [f"v{i}" for i in rng.integers(0, 5000, 3000)]
    tables.insert(150, BlockTable(
        names=names, categories=["variable"], name=rng.integers(0, 3000, big),
        category=np.zeros(big, np.int64), tile=rng.integers(0, 1472, big),
        size=rng.integers(1, 2**20, big), element_bytes=np.full(big, 4),
        region=np.full(big, 2), live_first=np.zeros(big, np.int64),
        live_last=np.full(big, 7), always=np.zeros(big, bool),
    ))  # fmt: skip
    tables[-1].size[0] = 3_000_000_000  # the largest value in the last, small part
    got = BlockTable.concat(tables)
    order: dict[str, int] = {}
    want_name = []
    for t in tables:
        labels = [t.names[i] for i in t.name.tolist()]
        for x in t.names:
            order.setdefault(x, len(order))
        want_name += [order[x] for x in labels]
    assert got.names == list(order)
    np.testing.assert_array_equal(got.name, want_name)
    for col in ("tile", "size", "element_bytes", "region", "live_first", "live_last"):
        want = np.concatenate([getattr(t, col).astype(np.int64) for t in tables])
        np.testing.assert_array_equal(getattr(got, col), want)
        lo, hi = int(want.min()), int(want.max())
        narrowest = next(d for d in (np.int8, np.int16, np.int32, np.int64)
                         if np.iinfo(d).min <= lo and hi <= np.iinfo(d).max)  # fmt: skip
        assert getattr(got, col).dtype == narrowest, col
    assert got.size.dtype == np.int64 and got.tile.dtype == np.int16
