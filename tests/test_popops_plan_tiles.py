"""popops plans each distinct list of region sizes once (``layout.plan_tiles``): the
vertices are those of planning every tile on its own (``tile_regions`` and the plan per
tile), vertex for vertex, for every kind of per-tile plan and irregular mappings."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, INT, Graph, IPUModel
from poplar_api.popops import plans
from poplar_api.popops.layout import PlannedVertices, plan_tiles, tile_regions
from poplar_api.popops.maps import _map_plan


def _graph(tiles: int) -> Graph:
    device = IPUModel("ipu2")
    device.tilesPerIPU = tiles
    return Graph(device.createDevice().getTarget())


def _mapped(graph: Graph, t, n: int, seed: int, shuffle: bool):
    """A tensor of ``n`` elements mapped in runs of random lengths to random tiles
    (several regions on some tiles, one on others, tiles in no order)."""
    rng = np.random.default_rng(seed)
    x = graph.addVariable(t, [n], "x")
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(n - 1, 40), replace=False))
    bounds = [0, *cuts.tolist(), n]
    tiles = rng.integers(0, graph.getTarget().getNumTiles(), len(bounds) - 1)
    for (a, b), tile in zip(itertools.pairwise(bounds), tiles, strict=True):
        graph.setTileMapping(x.slice(a, b), int(tile))
    view = x
    if shuffle:  # a permuted view: regions follow element ids, not view order
        view = x.reshape([n // 4, 4]).transpose().flatten() if n % 4 == 0 else x
    return view


def _per_tile(graph, ref, plan_tile) -> PlannedVertices:
    return PlannedVertices.of(
        [
            (tr.tile, cls, pieces, rows)
            for tr in tile_regions(graph, ref, "test")
            for cls, pieces, rows in plan_tile(tr.regions)
        ]
    )


def _plans(graph):
    return {
        "general": plans.general_plan(graph, 2, plans.region_limits(2, False), "A", "B"),
        "unary": plans.unary_plan(graph, "EXPONENT", FLOAT, False),
        "broadcast": plans.broadcast_scalar_plan(graph, "ADD", HALF, HALF, True),
        "ternary": plans.ternary_plan(graph, "Select", FLOAT, False),
        "cast": plans.cast_plan(graph, FLOAT, HALF),
        "scaled": plans.scaled_plan(graph, FLOAT, False),
        "fill": plans.fill_plan(graph, INT),
    }


KINDS = ["general", "unary", "broadcast", "ternary", "cast", "scaled", "fill"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("seed,n,shuffle", [(0, 4000, False), (1, 4000, True), (2, 37, False)])
def test_planned_once_per_region_sizes_equals_planned_per_tile(kind, seed, n, shuffle):
    graph = _graph(16)
    ref = _mapped(graph, FLOAT, n, seed, shuffle)
    plan_tile = _plans(graph)[kind]
    got, want = plan_tiles(graph, ref, "test", plan_tile), _per_tile(graph, ref, plan_tile)
    assert got.classes == want.classes
    for field in ("tiles", "rows", "counts", "sizes", "positions"):
        assert getattr(got, field).tolist() == getattr(want, field).tolist(), field


def test_map_plan_and_a_linear_mapping_over_a_full_chip():
    """The generated-map plan, and a tensor spread linearly over 1,472 tiles (one or
    two distinct region sizes)."""
    from poplar_api.popops import expr as pe
    from poplar_api.poputil import mapTensorLinearly

    graph = _graph(1472)
    x = graph.addVariable(FLOAT, [100_003], "x")
    mapTensorLinearly(graph, x)
    plan_tile = _map_plan(graph, pe.Add(pe._1, pe._2), (FLOAT, FLOAT), FLOAT, False)
    got, want = plan_tiles(graph, x, "test", plan_tile), _per_tile(graph, x, plan_tile)
    assert len(got.classes) == len(want.classes) > 1000
    assert got.classes == want.classes
    for field in ("tiles", "rows", "counts", "sizes", "positions"):
        assert getattr(got, field).tolist() == getattr(want, field).tolist(), field


@pytest.mark.parametrize("many", [6, 300])
def test_a_tile_of_many_regions_among_tiles_of_one(many: int) -> None:
    """Tiles grouped by their region sizes as rows padded to the most regions a tile
    has (6 on tile 0), or tile by tile when that would be far more than the regions
    (300 on tile 0, one on each of 63 others): the same plan as per tile either way."""
    from poplar_api.poputil import mapTensorLinearly

    graph = _graph(64)
    x = graph.addVariable(FLOAT, [4000], "x")
    mapTensorLinearly(graph, x)
    for i in range(0, 2 * many, 2):  # every other element of the first ones on tile 0
        graph.setTileMapping(x.slice(i + 100, i + 101), 0)
    for kind in ("general", "fill"):
        plan_tile = _plans(graph)[kind]
        got, want = plan_tiles(graph, x, "test", plan_tile), _per_tile(graph, x, plan_tile)
        assert got.classes == want.classes
        for field in ("tiles", "rows", "counts", "sizes", "positions"):
            assert getattr(got, field).tolist() == getattr(want, field).tolist(), field


@pytest.mark.parametrize(
    "case", ["permutation", "consecutive", "gaps", "spread", "repeats", "one", "empty"]
)
def test_regions_are_runs_of_consecutive_ids_on_one_tile(case: str) -> None:
    """layout._regions against numpy: the positions sorted by id (stable), cut where the
    next id is not one more or the tile changes; each region's tile; the regions
    listed tile by tile (stable)."""
    from poplar_api.popops.layout import _regions

    rng = np.random.default_rng(3)
    n = {"one": 1, "empty": 0}.get(case, 500)
    ids = {
        "permutation": rng.permutation(n) + 9,
        "consecutive": np.arange(n),
        "gaps": rng.choice(3 * n, n, replace=False),  # (scattered into their span)
        "spread": rng.choice(100 * n, n, replace=False),  # (sorted: too far apart)
        "repeats": rng.integers(0, 2 * n, n),
    }.get(case, np.arange(n))
    tiles = (
        np.repeat(np.arange(n // 7 + 1), 7)[:n] if case == "consecutive" else rng.integers(0, 3, n)
    )
    order = np.argsort(ids, kind="stable")
    sid, stile = ids[order], tiles[order]
    cut = [k for k in range(1, n) if sid[k] != sid[k - 1] + 1 or stile[k] != stile[k - 1]]
    start = np.array([0, *cut] if n else [], np.int64)
    end = np.array([*cut, n] if n else [], np.int64)
    rtile = stile[start]
    got = _regions(ids, tiles)
    want = (order, start, end, rtile, np.argsort(rtile, kind="stable"))
    for g, w in zip(got, want, strict=True):
        assert g.tolist() == w.tolist()


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64])
def test_region_tiles_keep_the_dtype_of_the_tiles(dtype) -> None:
    """layout._regions gives each region's tile in the dtype of the tiles it was given
    (a graph's element tiles are int32, small ones int16), with numpy's values."""
    from poplar_api.popops.layout import _regions

    rng = np.random.default_rng(5)
    ids = rng.permutation(300)
    tiles = rng.integers(0, 4, 300).astype(dtype)
    order = np.argsort(ids, kind="stable")
    sid, stile = ids[order], tiles[order]
    cut = [k for k in range(1, 300) if sid[k] != sid[k - 1] + 1 or stile[k] != stile[k - 1]]
    rtile = _regions(ids, tiles)[3]
    assert rtile.dtype == dtype
    assert rtile.tolist() == stile[[0, *cut]].tolist()


@pytest.mark.parametrize("columns", [0, 3])
@pytest.mark.parametrize("shape", ["one", "few", "one of many"])
def test_tile_groups_are_the_tiles_of_each_list_of_regions(columns: int, shape: str) -> None:
    """``tile_groups`` against a dict of each tile's tuple of regions built tile by
    tile (popops' region sizes, and the reductions' (width, rows, inner) rows): the
    same keys in order of first use, the same tiles in order."""
    from poplar_api.popops.layout import tile_groups

    rng = np.random.default_rng(columns)
    tiles = 200
    count = {"one": np.ones(tiles, np.int64), "few": rng.integers(1, 4, tiles),
             "one of many": np.where(np.arange(tiles) == 7, 900, 1)}[shape]  # fmt: skip
    regions = int(count.sum())
    size = (regions, columns) if columns else (regions,)
    values = rng.integers(1, 3, size)  # few distinct values: tiles share their lists
    first = np.cumsum(count) - count
    want: dict[tuple, list[int]] = {}
    for k, (f, n) in enumerate(zip(first.tolist(), count.tolist(), strict=True)):
        part = values[f : f + n].tolist()
        want.setdefault(tuple(map(tuple, part)) if columns else tuple(part), []).append(k)
    got = tile_groups(values, first, count)
    assert list(got) == list(want)
    assert got == want
