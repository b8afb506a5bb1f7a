"""The tile memory allocator on its own: regions, alignment, liveness sharing, overflow."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.config import load_config
from ipusim.errors import IpusimError
from ipusim.tile.memory import (
    ANY,
    INTERLEAVED,
    NON_INTERLEAVED,
    Block,
    BlockTable,
    MemoryPlanError,
    MemorySpec,
    align_up,
    allocate,
    plan,
)

#: The tiny machine's tile: 16 KiB non-interleaved + 48 KiB interleaved, 16 KiB banks.
TINY = MemorySpec(16 * 1024, 48 * 1024, 16 * 1024, 8)


def where(placements, name):
    """(region, offset) of the placement of the block called ``name``."""
    (p,) = [p for p in placements if p.block.name == name]
    return p.region, p.offset


def test_spec_from_tiny_config():
    spec = MemorySpec.from_config(load_config("tiny").memory)
    assert spec == TINY
    assert spec.capacity == {"nonInterleaved": 16384, "interleaved": 49152, "total": 65536}
    # interleaved offset 0 is byte 16384 of the tile: bank 1; its last byte is in bank 3
    assert spec.bank(INTERLEAVED, 0) == 1
    assert spec.bank(INTERLEAVED, 49151) == 3
    assert spec.bank(NON_INTERLEAVED, 16383) == 0
    # the interleaved element of banks 1 and 2 alternates them by 64-bit word; tiny's
    # third interleaved bank has no partner and holds its 16 KiB alone
    assert [spec.bank(INTERLEAVED, o) for o in (7, 8, 16, 16384, 16392, 32768, 32776)] == [
        1, 2, 1, 1, 2, 3, 3,
    ]  # fmt: skip


def test_align_up():
    assert [align_up(v, 8) for v in (0, 1, 6, 8, 9)] == [0, 8, 8, 8, 16]


def test_alignment_gap_half_then_float():
    # HALF[3] = 6 B at 0; the FLOAT block must start at a multiple of 8: 8 (2 B gap)
    blocks = [Block("h", "variable", 0, 6, 2), Block("f", "variable", 0, 8, 4)]
    r = plan(TINY, 2, blocks)
    assert where(r.placements, "h") == (INTERLEAVED, 0)
    assert where(r.placements, "f") == (INTERLEAVED, 8)
    assert r.by_tile["interleaved"].tolist() == [6 + 8, 0]
    assert r.by_tile["interleavedIncludingGaps"].tolist() == [8 + 8, 0]
    assert r.by_tile["total"].tolist() == [14, 0]
    assert r.by_tile["totalIncludingGaps"].tolist() == [16, 0]
    assert r.by_category["variable"].tolist() == [14, 0]


def test_alignment_to_element_size_larger_than_minimum():
    # a 16-byte element aligns to 16, not 8: after a 4 B block it starts at 16
    blocks = [Block("a", "variable", 0, 4, 4), Block("w", "variable", 0, 32, 16)]
    p = allocate(TINY, 1, blocks)
    assert where(p, "w") == (INTERLEAVED, 16)


def test_disjoint_liveness_shares_overlapping_does_not():
    blocks = [
        Block("a", "variable", 0, 16, 4, live=(0, 2)),
        Block("b", "variable", 0, 16, 4, live=(3, 5)),  # after a: same address
        Block("c", "variable", 0, 16, 4, live=(2, 4)),  # meets a and b: after both
    ]
    r = plan(TINY, 1, blocks, [f"p{i}" for i in range(6)])
    assert where(r.placements, "a") == (INTERLEAVED, 0)
    assert where(r.placements, "b") == (INTERLEAVED, 0)
    assert where(r.placements, "c") == (INTERLEAVED, 16)
    # occupied bytes count the shared range once; categories count every block
    assert r.by_tile["interleaved"].tolist() == [32]
    assert r.by_category["variable"].tolist() == [48]
    # live bytes per point: a on 0..2, c on 2..4, b on 3..5
    assert [n for n, _, _ in r.liveness] == [f"p{i}" for i in range(6)]
    assert [b for _, b, _ in r.liveness] == [16, 16, 32, 32, 32, 16]
    assert all(a == 0 for _, _, a in r.liveness)


def test_always_live_never_shares():
    blocks = [
        Block("k", "constant", 0, 16, 4),  # always live
        Block("a", "variable", 0, 16, 4, live=(0, 0)),
        Block("b", "variable", 0, 16, 4, live=(1, 1)),
        Block("n", "variable", 0, 16, 4, live=(0, -1)),  # live at no point
    ]
    r = plan(TINY, 1, blocks, ["p0", "p1"])
    assert where(r.placements, "k") == (INTERLEAVED, 0)
    assert where(r.placements, "a") == (INTERLEAVED, 16)
    assert where(r.placements, "b") == (INTERLEAVED, 16)
    # a never-live block only avoids always-live data
    assert where(r.placements, "n") == (INTERLEAVED, 16)
    assert [(b, a) for _, b, a in r.liveness] == [(16, 16), (16, 16)]


def test_always_live_placed_before_later_blocks_in_list_order():
    # always-live blocks go first even when listed last
    blocks = [Block("late", "variable", 0, 8, live=(0, 0)), Block("k", "constant", 0, 8)]
    p = allocate(TINY, 1, blocks)
    assert where(p, "k") == (INTERLEAVED, 0)
    assert where(p, "late") == (INTERLEAVED, 8)


def test_regions_code_data_and_spill():
    blocks = [
        Block("code", "vertexCode", 0, 100, region=NON_INTERLEAVED),
        Block("big", "variable", 0, 48 * 1024 - 8, 4),  # fills interleaved but 8 B
        Block("small", "variable", 0, 8, 4),  # fits the last 8 B of interleaved
        Block("spill", "variable", 0, 16, 4),  # interleaved full: non-interleaved
    ]
    r = plan(TINY, 1, blocks)
    assert where(r.placements, "code") == (NON_INTERLEAVED, 0)
    assert where(r.placements, "big") == (INTERLEAVED, 0)
    assert where(r.placements, "small") == (INTERLEAVED, 48 * 1024 - 8)
    assert where(r.placements, "spill") == (NON_INTERLEAVED, 104)  # align_up(100, 8)
    assert r.by_tile["nonInterleaved"].tolist() == [116]
    assert r.by_tile["nonInterleavedIncludingGaps"].tolist() == [120]
    assert not r.out_of_memory
    assert r.tiles_out_of_memory.size == 0


def test_overflow_marks_tile_out_of_memory():
    blocks = [
        Block("fill", "variable", 1, 48 * 1024, 4),
        Block("must", "variable", 1, 64, 4, region=INTERLEAVED),  # no room: overflow
        Block("huge", "variable", 2, 70000, 4),  # bigger than either region
        Block("ok", "variable", 0, 64, 4),
    ]
    r = plan(TINY, 3, blocks)
    assert where(r.placements, "must") == ("overflowed", 0)
    assert where(r.placements, "huge") == ("overflowed", 0)
    assert r.out_of_memory
    assert r.tiles_out_of_memory.tolist() == [1, 2]
    assert r.by_tile["overflowed"].tolist() == [0, 64, 70000]
    assert r.by_tile["totalIncludingGaps"].tolist() == [64, 48 * 1024 + 64, 70000]
    # out-of-memory tiles first, most overflow first
    assert r.worst_tiles(5) == [(2, 70000, 65536), (1, 49216, 65536), (0, 64, 65536)]
    assert r.worst_tiles(1) == [(2, 70000, 65536)]
    assert r.variables_on_tile(1) == [("fill", 49152), ("must", 64)]


def test_variables_on_tile_sums_pieces_and_skips_code():
    blocks = [
        Block("v", "variable", 0, 8, 4),
        Block("v", "variable", 0, 8, 4, live=(0, 0)),
        Block("c", "constant", 0, 12, 4),
        Block("code", "vertexCode", 0, 400, region=NON_INTERLEAVED),
    ]
    assert plan(TINY, 1, blocks).variables_on_tile(0) == [("v", 16), ("c", 12)]


def test_by_category_per_tile():
    blocks = [Block("s", "stack", t, 560, region=NON_INTERLEAVED) for t in range(4)] + [
        Block("x", "variable", 2, 40, 4),
        Block("y", "variable", 2, 4, 4, live=(0, 0)),
    ]
    r = plan(TINY, 4, blocks, ["p"])
    assert r.by_category["stack"].tolist() == [560] * 4
    assert r.by_category["variable"].tolist() == [0, 0, 44, 0]
    assert r.by_tile["total"].tolist() == [560, 560, 604, 560]
    # y: after x at align_up(40, 8) = 40; ends at 44
    assert r.by_tile["interleavedIncludingGaps"].tolist() == [0, 0, 44, 0]
    assert r.liveness == [("p", 4, 4 * 560 + 40)]


def test_by_category_in_order_of_first_block_sums_every_block():
    # category codes out of order of appearance (a table's rows need not follow its
    # list of categories), one category without blocks, categories coming back
    codes = np.array([2, 2, 0, 2, 1, 0, 0, 2, 1])
    tiles = np.array([0, 1, 1, 3, 0, 0, 2, 0, 3])
    sizes = np.array([8, 16, 24, 32, 40, 48, 56, 64, 72])
    names = ["stack", "vertexCode", "constant", "messageBuffer"]
    parts = [
        BlockTable.rows("b", names[c], tiles[[k]], sizes[[k]], region=NON_INTERLEAVED)
        for k, c in enumerate(codes)
    ]
    table = BlockTable.concat(parts)
    table.categories = names  # the codes above, against the list of four
    table.category = codes.copy()
    r = plan(TINY, 4, table)
    assert list(r.by_category) == ["constant", "stack", "vertexCode"]
    rows = list(zip(codes.tolist(), tiles.tolist(), sizes.tolist(), strict=True))
    for k, name in enumerate(names[:3]):
        expected = [sum(s for c, t, s in rows if c == k and t == tile) for tile in range(4)]
        assert r.by_category[name].tolist() == expected
        assert r.by_category[name].dtype == np.int64


@pytest.mark.parametrize(
    ("block", "words"),
    [
        (Block("v", "variable", 9, 4), "tile 9"),
        (Block("v", "variable", 0, -1), "size -1"),
        (Block("v", "variable", 0, 4, region="fast"), "region 'fast'"),
        (Block("v", "variable", 0, 4, 0), "element_bytes 0"),
    ],
)
def test_bad_blocks_are_named(block, words):
    with pytest.raises(MemoryPlanError, match=words) as info:
        allocate(TINY, 8, [block])
    assert isinstance(info.value, IpusimError)
    assert isinstance(info.value, ValueError)
    assert "'v'" in str(info.value)


def test_random_blocks_live_together_never_overlap():
    rng = np.random.default_rng(7)
    blocks = []
    for i in range(300):
        lo = int(rng.integers(0, 20))
        live = None if rng.random() < 0.2 else (lo, lo + int(rng.integers(0, 6)))
        region = [ANY, ANY, INTERLEAVED, NON_INTERLEAVED][int(rng.integers(0, 4))]
        size = int(rng.integers(1, 3000))
        elem = [1, 2, 4, 8][int(rng.integers(0, 4))]
        blocks.append(Block(f"b{i}", "variable", int(rng.integers(0, 3)), size, elem, region, live))
    placed = allocate(TINY, 3, blocks)
    big = 10**9
    for i, p in enumerate(placed):
        b = p.block
        assert p.offset % max(8, b.element_bytes) == 0
        limit = {NON_INTERLEAVED: 16384, INTERLEAVED: 49152, "overflowed": big}[p.region]
        assert p.end <= limit
        if p.region != "overflowed":
            assert b.region in (ANY, p.region)
        for q in placed[i + 1 :]:
            c = q.block
            if c.tile != b.tile or q.region != p.region:
                continue
            lb, lc = b.live or (-1, big), c.live or (-1, big)
            together = lb[0] <= lc[1] and lc[0] <= lb[1]
            if together:
                assert p.end <= q.offset or q.end <= p.offset, (b, c, p.offset, q.offset)


# ----------------------------------------------------- against a reference first fit
def reference_allocate(spec, blocks):
    """The placement rules of the module docstring, written plainly: blocks in order
    (always-live first, then by live start, then list order), each at the lowest
    aligned offset of the first region where it overlaps no placed block it is live
    together with; the overflow area takes what fits nowhere."""
    always_range, never = (-1, 2**62), (-1, -1)

    def live_range(b):
        if b.live is None:
            return always_range
        return never if b.live[1] < b.live[0] else b.live

    limits = [spec.non_interleaved_bytes, spec.interleaved_bytes, 2**62]
    tries = {NON_INTERLEAVED: (0, 2), INTERLEAVED: (1, 2), ANY: (1, 0, 2)}
    order = sorted(
        range(len(blocks)),
        key=lambda i: (blocks[i].live is not None, (blocks[i].live or always_range)[0], i),
    )
    placed = {}  # (tile, region) -> [(start, end, lo, hi)]
    out = [None] * len(blocks)
    for i in order:
        b = blocks[i]
        lo, hi = live_range(b)
        align = max(spec.alignment_bytes, b.element_bytes)
        for region in tries[b.region]:
            busy = sorted(
                (s, e) for s, e, a, z in placed.get((b.tile, region), []) if a <= hi and lo <= z
            )
            addr = 0
            for s, e in busy:
                if addr + b.size <= s:
                    break
                addr = max(addr, align_up(e, align))
            if addr + b.size <= limits[region]:
                break
        if b.size:
            placed.setdefault((b.tile, region), []).append((addr, addr + b.size, lo, hi))
        out[i] = ((NON_INTERLEAVED, INTERLEAVED, "overflowed")[region], addr)
    return out


def random_case(seed):
    """Random blocks on six tiles; tiles 0-2 are given the same blocks (their layout
    is shared), the others the same blocks in other orders; tiles interleaved."""
    rng = np.random.default_rng(seed)
    spec = MemorySpec(512, 1024, 256, 8)
    pattern = []
    for k in range(int(rng.integers(5, 40))):
        live = None if rng.random() < 0.3 else tuple(sorted(rng.integers(-1, 12, size=2)))
        if live is not None and rng.random() < 0.1:
            live = (5, 2)  # live at no point
        pattern.append(
            (
                f"b{k}",
                int(rng.integers(0, 300)),
                int(rng.choice([1, 2, 4, 8, 16])),
                str(rng.choice([ANY, ANY, INTERLEAVED, NON_INTERLEAVED])),
                live,
            )
        )
    per_tile = []
    for tile in range(6):
        mine = pattern if tile < 3 else [pattern[j] for j in rng.permutation(len(pattern))]
        per_tile.append([Block(n, "variable", tile, s, e, r, lv) for n, s, e, r, lv in mine])
    # a random interleaving of the tiles that keeps each tile's own order
    turns = rng.permutation(np.repeat(np.arange(6), len(pattern)))
    return spec, [per_tile[t].pop(0) for t in turns]


@pytest.mark.parametrize("seed", range(8))
def test_compiled_allocator_matches_the_rules(seed):
    """Random blocks land where the plainly written rules put them, overflow included."""
    spec, blocks = random_case(seed)
    got = [(p.region, p.offset) for p in allocate(spec, 6, blocks)]
    assert got == reference_allocate(spec, blocks)


@pytest.mark.parametrize("seed", range(6))
def test_short_lived_blocks_dropped_from_scans_land_by_the_rules(seed):
    """Many short-lived blocks (as a training step's temporaries and message buffers):
    the scans drop the blocks dead before each new one begins, and blocks of earlier
    or no live range (always live, never live) scan them all; every block lands where
    the plainly written rules put it."""
    rng = np.random.default_rng(100 + seed)
    spec = MemorySpec(2048, 4096, 256, 8)
    blocks = []
    for k in range(160):
        tile = int(rng.integers(0, 2))
        kind = rng.random()
        if kind < 0.15:
            live = None  # always live
        elif kind < 0.2:
            live = (9, 3)  # live at no point
        else:
            first = int(rng.integers(0, 60))
            live = (first, first + int(rng.integers(0, 4)))
        region = str(rng.choice([ANY, ANY, ANY, INTERLEAVED, NON_INTERLEAVED]))
        size = int(rng.integers(0, 200))
        blocks.append(Block(f"b{k}", "variable", tile, size, int(rng.choice([1, 4, 8, 16])),
                            region, live))  # fmt: skip
    got = [(p.region, p.offset) for p in allocate(spec, 2, blocks)]
    assert got == reference_allocate(spec, blocks)


def test_random_cases_reach_every_region():
    """The random cases above exercise both regions and the overflow area."""
    seen = set()
    for seed in range(8):
        spec, blocks = random_case(seed)
        seen |= {p.region for p in allocate(spec, 6, blocks)}
    assert seen == {NON_INTERLEAVED, INTERLEAVED, "overflowed"}


def test_hole_left_by_wider_alignment_is_used():
    """Once a block aligned wider than the minimum leaves a hole, later always-live
    blocks are placed first fit, not at the top."""
    blocks = [
        Block("a", "variable", 0, 4, 4),  # 0..4
        Block("v", "variable", 0, 16, 16),  # aligned to 16: 16..32
        Block("c", "variable", 0, 8, 4),  # fits the hole at 8..16
    ]
    p = allocate(TINY, 1, blocks)
    assert [where(p, n) for n in "avc"] == [(INTERLEAVED, 0), (INTERLEAVED, 16), (INTERLEAVED, 8)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_region_totals_are_the_union_of_the_placed_blocks(seed):
    """Per tile and region, ``total`` is the bytes the placed blocks cover (blocks live
    at different points may share bytes) and ``IncludingGaps`` the highest end,
    recomputed from the placements byte by byte."""
    rng = np.random.default_rng(seed)
    blocks = []
    for k in range(60):
        first = int(rng.integers(0, 6))
        live = None if rng.random() < 0.3 else (first, first + int(rng.integers(-1, 4)))
        region = [ANY, INTERLEAVED, NON_INTERLEAVED][int(rng.integers(0, 3))]
        size = int(rng.integers(0, 3000))
        blocks.append(Block(f"b{k}", "variable", int(rng.integers(0, 3)), size, 4, region, live))
    r = plan(TINY, 3, blocks)
    names = {"nonInterleaved": 0, "interleaved": 1, "overflowed": 2}
    for name, index in names.items():
        for tile in range(3):
            mine = [p for p in r.placements if p.block.tile == tile and names[p.region] == index]
            used = np.zeros(1 << 20, bool)
            for p in mine:
                used[p.offset : p.offset + p.block.size] = True
            top = max((p.offset + p.block.size for p in mine), default=0)
            assert r.by_tile[name][tile] == int(used.sum())
            assert r.by_tile[f"{name}IncludingGaps"][tile] == top


@pytest.mark.parametrize("first_span", [50, 1 << 60])
def test_placement_order_is_tile_then_always_live_then_first_point_then_row(first_span):
    """The packed-key sort and its lexicographic fallback (keys beyond 63 bits) give the
    order a lexicographic sort by (tile, not always live, first live point, row) gives."""
    from ipusim.tile.memory import _placement_order

    rng = np.random.default_rng(3)
    n = 2000
    tile = rng.integers(0, 40, n)
    later = rng.random(n) < 0.7
    first = rng.integers(0, first_span, n, dtype=np.int64)
    expect = np.lexsort((np.arange(n), first, later, tile))
    assert np.array_equal(_placement_order(tile, later, first), expect)
