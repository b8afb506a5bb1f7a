"""The graph profile's memory by Poplar's storage categories (``memory.byCategory``):
every category of the guide, in its region/overlap shape, adding up to what the memory
model placed; and the guide's ``WriteUndef`` tag and ``estimatedCyclesByTile`` name.

Sums are checked against the placements themselves (``engine.memory.placements``),
with overlaps found byte by byte here, not by the profile's code.
"""

from __future__ import annotations

import jsonschema
import numpy as np
from codelets_common import tiny_graph

from ipusim.profile.execution import schema
from ipusim.profile.memory_categories import (
    IPUSIM_TO_POPLAR,
    STORAGE_CATEGORIES,
    category_totals,
    overlapped_blocks,
)
from poplar_api import FLOAT, Engine
from poplar_api import program as prog

REGIONS = ("nonInterleaved", "interleaved", "overflowed")


def _engine(with_undef: bool) -> Engine:
    """A and B (16 floats, tile 2) live one after the other, A twice; the results go
    to tile 3 (an exchange each)."""
    g = tiny_graph()
    x = np.arange(16, dtype=np.float32)
    src = [g.addConstant(FLOAT, [16], x * (k + 1), f"src{k}") for k in range(3)]
    for s in src:
        g.setTileMapping(s, 2)
    a, b = g.addVariable(FLOAT, [16], "A"), g.addVariable(FLOAT, [16], "B")
    g.setTileMapping(a, 2)
    g.setTileMapping(b, 2)
    outs = [g.addVariable(FLOAT, [16], f"out{k}") for k in range(3)]
    for o in outs:
        g.setTileMapping(o, 3)
    steps = [prog.Copy(src[0], a), prog.Copy(a, outs[0])]
    steps += [prog.WriteUndef(a)] if with_undef else []
    steps += [prog.Copy(src[1], b), prog.Copy(b, outs[1])]
    steps += [prog.Copy(src[2], a), prog.Copy(a, outs[2])]
    return Engine(g, prog.Sequence(steps))


def _covered(placements, tiles: int, region: str, which) -> np.ndarray:
    """Bytes per tile covered by the placements in ``region`` that ``which`` selects
    (each byte once), from a byte map per tile."""
    out = np.zeros(tiles, np.int64)
    for t in range(tiles):
        mine = [p for p in placements if p.region == region and p.block.tile == t and which(p)]
        if not mine:
            continue
        top = max(p.end for p in mine)
        used = np.zeros(top, bool)
        for p in mine:
            used[p.offset : p.end] = True
        out[t] = int(used.sum())
    return out


def _shares_memory(p, placements) -> bool:
    return any(
        q is not p
        and q.region == p.region
        and q.block.tile == p.block.tile
        and p.block.size > 0
        and q.block.size > 0
        and q.offset < p.end
        and p.offset < q.end
        for q in placements
    )


def test_by_category_has_every_category_and_adds_up_to_the_placements():
    e = _engine(with_undef=True)
    gp = e.getGraphProfile()
    jsonschema.validate(gp, schema("graph_profile"))
    by_cat = gp["memory"]["byCategory"]
    tiles = gp["target"]["numTiles"]
    assert set(STORAGE_CATEGORIES) <= set(by_cat)
    for regions in by_cat.values():
        assert set(regions) == set(REGIONS)
        for kinds in regions.values():
            assert set(kinds) == {"nonOverlapped", "overlapped"}
            assert all(len(v) == tiles for v in kinds.values())
    placements = e.memory.placements
    shared = {id(p): _shares_memory(p, placements) for p in placements}
    assert any(shared.values())  # B reuses A's bytes after the WriteUndef
    for cat, regions in by_cat.items():
        for region, kinds in regions.items():
            for kind, got in kinds.items():
                want = np.zeros(tiles, np.int64)
                for p in placements:
                    if (
                        IPUSIM_TO_POPLAR.get(p.block.category, p.block.category) == cat
                        and p.region == region
                        and shared[id(p)] == (kind == "overlapped")
                    ):
                        want[p.block.tile] += p.block.size
                np.testing.assert_array_equal(got, want, err_msg=f"{cat} {region} {kind}")
    # the categories the model places are all there, under Poplar's names
    totals = {k: int(v.sum()) for k, v in category_totals(by_cat).items()}
    for cat in ("variable", "constant", "controlCode", "stack", "internalExchangeCode"):
        assert totals[cat] > 0, cat
    assert "messageBuffer" not in by_cat


def test_non_overlapped_bytes_and_the_overlapped_union_are_the_region_totals():
    e = _engine(with_undef=True)
    gp = e.getGraphProfile()
    mem, tiles = gp["memory"], gp["target"]["numTiles"]
    placements = e.memory.placements
    shared = {id(p): _shares_memory(p, placements) for p in placements}
    for region in REGIONS:
        non = np.sum(
            [np.asarray(r[region]["nonOverlapped"]) for r in mem["byCategory"].values()], 0
        )
        union = _covered(placements, tiles, region, lambda p: shared[id(p)])
        np.testing.assert_array_equal(non + union, mem["byTile"][region], err_msg=region)


def test_without_shared_memory_the_categories_are_the_memory_reports():
    e = _engine(with_undef=False)
    gp = e.getGraphProfile()
    totals = category_totals(gp["memory"]["byCategory"])
    for name, per_tile in e.memory.by_category.items():
        np.testing.assert_array_equal(totals[IPUSIM_TO_POPLAR[name]], per_tile, err_msg=name)
    placed = {IPUSIM_TO_POPLAR[c] for c in e.memory.by_category}
    for name, per_tile in totals.items():
        if name not in placed:
            assert not per_tile.any(), name


def test_overlapped_blocks_by_hand():
    # tile 0: [0,8) and [4,12) overlap, [16,20) alone; tile 1: [0,8) alone; region 1 of
    # tile 0: [0,8) alone (another region); an empty block never overlaps
    tile = np.array([0, 0, 0, 1, 0, 0])
    region = np.array([0, 0, 0, 0, 1, 0])
    start = np.array([4, 0, 16, 0, 0, 6])
    size = np.array([8, 8, 4, 8, 8, 0])
    got = overlapped_blocks(tile, region, start, size)
    assert got.tolist() == [True, True, False, False, False, False]
    # one block inside a long one, a third after both
    got = overlapped_blocks(np.zeros(3), np.zeros(3), np.array([0, 2, 40]), np.array([32, 4, 4]))
    assert got.tolist() == [True, True, False]


def test_write_undef_is_tagged_and_exchanges_use_the_guides_name():
    gp = _engine(with_undef=True).getGraphProfile()
    tags = [p["type"] for p in gp["programs"]]
    assert tags.count("WriteUndef") == 1
    assert "cyclesByTile" not in gp["exchanges"]
    assert len(gp["exchanges"]["estimatedCyclesByTile"]) == len(gp["exchanges"]["names"]) > 0
    assert "WriteUndef" not in [p["type"] for p in _engine(False).getGraphProfile()["programs"]]


def test_the_docs_table_lists_the_categories_with_their_sources():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "profiles.md").read_text()
    start = text.index("### Memory by storage category")
    rows = re.findall(r"^\| `(\w+)` \| (guide|Graphcore code|unconfirmed) \|", text[start:], re.M)
    sources = {"guide": "guide", "Graphcore code": "graphcore", "unconfirmed": "unconfirmed"}
    assert {name: sources[src] for name, src in rows} == STORAGE_CATEGORIES
