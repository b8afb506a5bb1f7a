"""Joint groups in the tile memory allocator: one address over several disjoint live
ranges, other blocks in the gaps (ipusim.tile.memory, ipusim.tile.first_fit)."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.tile.memory import (
    Block,
    BlockTable,
    MemoryPlanError,
    MemorySpec,
    allocate,
    allocate_table,
    plan,
)

SPEC = MemorySpec(
    non_interleaved_bytes=256, interleaved_bytes=512, bank_bytes=64, alignment_bytes=8
)


def _reference(spec: MemorySpec, blocks: list[Block]) -> list[tuple[int, int]]:
    """The placement rules written out plainly: (region index, offset) per block.

    Blocks of one tile in order (always live first, then by live start, a joint
    group's blocks by the start of its last range, then given order); a joint group
    is placed when its first block in that order comes up, at the lowest aligned
    address free over all its ranges; every candidate address is checked."""
    out: list[tuple[int, int] | None] = [None] * len(blocks)
    try_order = {"nonInterleaved": (0, 2), "interleaved": (1, 2), "any": (1, 0, 2)}
    limits = (spec.non_interleaved_bytes, spec.interleaved_bytes, 1 << 40)
    big = 1 << 40
    for tile in sorted({b.tile for b in blocks}):
        rows = [i for i, b in enumerate(blocks) if b.tile == tile]

        def start(i: int, tile: int = tile) -> int:
            b = blocks[i]
            if b.live is None:
                return -1
            if b.joint < 0:
                return b.live[0]
            return max(c.live[0] for c in blocks if c.tile == tile and c.joint == b.joint)

        rows.sort(key=lambda i: (blocks[i].live is not None, start(i), i))
        placed: list[tuple[int, int, int, int, int]] = []  # region, start, end, lo, hi

        def span(b: Block) -> tuple[int, int]:
            if b.live is None:
                return (-1, big)
            if b.live[1] < b.live[0]:
                return (-1, -1)
            return b.live

        for i in rows:
            if out[i] is not None:
                continue
            b = blocks[i]
            group = [j for j in rows if b.joint >= 0 and blocks[j].joint == b.joint] or [i]
            align = max(spec.alignment_bytes, b.element_bytes)
            for region in try_order[b.region]:
                addr = 0
                while True:
                    clash = any(
                        r == region and s < addr + b.size and addr < e and lo <= span(blocks[j])[1]
                        and span(blocks[j])[0] <= hi
                        for j in group for (r, s, e, lo, hi) in placed
                    )  # fmt: skip
                    if not clash or b.size == 0:
                        break
                    addr += align
                if addr + b.size <= limits[region]:
                    break
            for j in group:
                lo, hi = span(blocks[j])
                if b.size:  # an empty block holds no byte
                    placed.append((region, addr, addr + b.size, lo, hi))
                out[j] = (region, addr)
    return [o for o in out if o is not None]


def _placed(blocks: list[Block]) -> list[tuple[int, int]]:
    region, offset = allocate_table(SPEC, 4, BlockTable.from_blocks(blocks))
    return list(zip(region.tolist(), offset.tolist(), strict=True))


def test_joint_ranges_share_an_address_and_leave_the_gap_to_others():
    blocks = [
        Block("fnvar", "variable", 0, 64, 4, live=(0, 2), joint=7),
        Block("fnvar", "variable", 0, 64, 4, live=(6, 8), joint=7),
        Block("between", "variable", 0, 64, 4, live=(3, 5)),
        Block("late", "variable", 0, 32, 4, live=(7, 7)),
    ]
    got = allocate(SPEC, 1, blocks)
    assert [(p.region, p.offset) for p in got] == [
        ("interleaved", 0),
        ("interleaved", 0),  # same address for both ranges
        ("interleaved", 0),  # in the gap between them
        ("interleaved", 64),  # live with the second range: above it
    ]
    assert [(r, o) for r, o in _placed(blocks)] == _reference(SPEC, blocks)


def test_a_joint_group_avoids_what_is_live_with_any_of_its_ranges():
    # "early" holds [0, 64) over points 5..9, which the group's second range meets:
    # the group, placed when its first range (point 0) comes up, must go above it even
    # though nothing is live with its first range
    blocks = [
        Block("early", "variable", 0, 64, 4, live=(0, 0)),
        Block("fn", "variable", 0, 64, 4, live=(1, 1), joint=1),
        Block("held", "variable", 0, 64, 4, live=(0, 9)),
        Block("fn", "variable", 0, 64, 4, live=(8, 8), joint=1),
    ]
    got = _placed(blocks)
    assert got == _reference(SPEC, blocks)
    assert got[1] == got[3]
    assert got[1][1] not in (got[2][1],)


def test_the_report_counts_a_joint_address_once_and_lets_the_gap_be_reused():
    blocks = [
        Block("a", "variable", 0, 128, 4, live=(0, 1), joint=3),
        Block("a", "variable", 0, 128, 4, live=(4, 5), joint=3),
        Block("b", "variable", 0, 128, 4, live=(2, 3)),
    ]
    report = plan(SPEC, 1, blocks, point_names=[f"p{k}" for k in range(6)])
    assert int(report.by_tile["total"][0]) == 128
    # without the group the second range would be a block of its own, but it still
    # fits at the address of the first (first fit); "b" in between shares it too
    free = [Block(b.name, b.category, b.tile, b.size, b.element_bytes, b.region, b.live)
            for b in blocks]  # fmt: skip
    assert int(plan(SPEC, 1, free).by_tile["total"][0]) == 128


@pytest.mark.parametrize("seed", range(6))
def test_random_tables_match_the_plain_rules(seed):
    rng = np.random.default_rng(seed)
    blocks: list[Block] = []
    for tile in range(2):
        for k in range(int(rng.integers(4, 14))):
            size = int(rng.integers(1, 9)) * 8
            elem = int(rng.choice([1, 2, 4, 8, 16]))
            region = str(rng.choice(["any", "interleaved", "nonInterleaved"]))
            if rng.random() < 0.15:
                blocks.append(Block(f"c{k}", "constant", tile, size, elem, region, None))
            elif rng.random() < 0.4:  # a group of 2-3 disjoint ranges
                start = int(rng.integers(0, 10))
                for _ in range(int(rng.integers(2, 4))):
                    lo = start + int(rng.integers(0, 3))
                    hi = lo + int(rng.integers(0, 3))
                    blocks.append(
                        Block(
                            f"g{k}",
                            "variable",
                            tile,
                            size,
                            elem,
                            region,
                            (lo, hi),
                            joint=100 * tile + k,
                        )
                    )
                    start = hi + 2
            else:
                lo = int(rng.integers(0, 20))
                blocks.append(
                    Block(f"v{k}", "variable", tile, size, elem, region,
                          (lo, lo + int(rng.integers(-1, 6))))
                )  # fmt: skip
    # the same tiles twice over: copies of a layout must keep the groups
    blocks += [Block(b.name, b.category, b.tile + 2, b.size, b.element_bytes, b.region,
                     b.live, b.joint + 200 if b.joint >= 0 else -1)
               for b in blocks if b.tile < 2]  # fmt: skip
    assert _placed(blocks) == _reference(SPEC, blocks)


def test_tiles_alike_but_for_their_groups_get_their_own_layouts():
    def tile_blocks(tile: int, joint: bool) -> list[Block]:
        key = 5 if joint else -1
        return [
            Block("x", "variable", tile, 64, 4, live=(0, 0), joint=key),
            Block("y", "variable", tile, 64, 4, live=(1, 3)),
            Block("x", "variable", tile, 64, 4, live=(2, 2), joint=key),
        ]

    blocks = tile_blocks(0, False) + tile_blocks(1, True)
    got = _placed(blocks)
    assert got == _reference(SPEC, blocks)
    assert got[:3] == [(1, 0), (1, 0), (1, 64)]
    # the group comes up at its last range (point 2), after y, and avoids it there
    assert got[3:] == [(1, 64), (1, 0), (1, 64)]


def test_a_joint_group_of_unequal_blocks_is_refused_by_name():
    blocks = [
        Block("fnvar", "variable", 2, 64, 4, live=(0, 1), joint=9),
        Block("fnvar", "variable", 2, 32, 4, live=(3, 4), joint=9),
    ]
    with pytest.raises(MemoryPlanError, match=r"'fnvar'.*tile 2.*joint group 9.*32 B"):
        allocate(SPEC, 4, blocks)


def test_table_columns_keep_the_groups():
    blocks = [
        Block("a", "variable", 0, 8, 4, live=(0, 0), joint=2),
        Block("b", "variable", 1, 8, 4, live=(0, 0)),
    ]
    table = BlockTable.concat(
        [BlockTable.from_blocks(blocks[:1]), BlockTable.from_blocks(blocks[1:])]
    )
    assert table.joint_keys().tolist() == [2, -1]
    assert table.compact().block(0).joint == 2
    assert table.take(np.array([1, 0])).joint_keys().tolist() == [-1, 2]
    assert BlockTable.from_blocks(blocks[1:]).joint is None
