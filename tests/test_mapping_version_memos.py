"""The Graph's mapping version and what is kept by it: ``elementTiles(t,
readonly=True)`` of a top-level graph, and popops' tile layouts of planned tensors.

A remap of any element already mapped (``setTileMapping`` in every form,
``mapElements``) counts a new version, a first mapping does not; tiles and layouts
asked again after a remap are the new mapping's; and plans made with the layouts kept
equal those made afresh (random tensors, views and mappings)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, Interval, IPUModel
from poplar_api.graph_state import TilesMemo
from poplar_api.popops import layout
from poplar_api.popops.plans import unary_plan


def _graph(tiles: int = 16) -> Graph:
    device = IPUModel("ipu2")
    device.tilesPerIPU = tiles
    return Graph(device.createDevice().getTarget())


def test_first_mappings_leave_the_version_and_remaps_count() -> None:
    g = _graph()
    v0 = g.getMappingVersion()
    a = g.addVariable(FLOAT, [6, 8], "a")
    b = g.addVariable(HALF, [40], "b")
    g.setTileMapping(a, 3)  # first mappings, every form
    g.mapElements(b, np.arange(40) % 16)
    c = g.addVariable(FLOAT, [4], "c")
    g.setTileMapping(c, [[Interval(0, 2)], [Interval(2, 4)]])
    d = g.addVariable(FLOAT, [10], "d")
    g.mapElements(d.reshape([2, 5]).dimShuffle([1, 0]), np.arange(10) % 3)  # ids not a run
    e = g.addVariable(FLOAT, [5], "e")
    g.setTileMapping(e[4], 1)
    g.setTileMapping(e.slice(0, 4).reverse(0), 2)
    const = g.addConstant(FLOAT, [3], 1.0, "k")
    g.setTileMapping(const, 0)
    assert g.getMappingVersion() == v0
    remaps = [
        lambda: g.setTileMapping(a, 4),
        lambda: g.setTileMapping(a[1], 5),  # part of a, consecutive ids
        lambda: g.setTileMapping(a.dimShuffle([1, 0])[2], 6),  # a view of scattered ids
        lambda: g.setTileMapping(c, np.int64(7)),
        lambda: g.setTileMapping(c, [[Interval(0, 4)]]),
        lambda: g.mapElements(b, 2),
        lambda: g.mapElements(d.reshape([2, 5]).dimShuffle([1, 0]), np.zeros(10, np.int64)),
        lambda: g.setTileMapping(e[4], 1),  # to the tile it had: still a write over a mapping
    ]
    for k, remap in enumerate(remaps):
        before = g.getMappingVersion()
        remap()
        assert g.getMappingVersion() > before, k


def test_remaps_are_counted_from_the_first_ask() -> None:
    """Before anyone asks for the version (or keeps tiles by it) a remap only writes:
    nothing found from the tiles is held, and hand-built graphs map element by
    element. From the first ask on, each remap changes it, and tiles kept after a
    remap made before that ask are the new ones."""
    g = _graph()
    a = g.addVariable(FLOAT, [6, 8], "a")
    g.setTileMapping(a, 3)
    g.setTileMapping(a, 4)  # a remap nobody watches
    g.setTileMapping(a[0][0], 5)
    assert g._state.remapped_since(0, 4, 0, 1 << 40) is False
    assert g.elementTiles(a, readonly=True).tolist() == [5] + [4] * 47
    before = g.getMappingVersion()
    g.setTileMapping(a[0][0], 6)  # one element, consecutive ids
    assert g.getMappingVersion() > before
    assert g.elementTiles(a, readonly=True)[0] == 6
    before = g.getMappingVersion()
    g.setTileMapping(a[1], 7)  # a block
    assert g.getMappingVersion() > before
    assert g.elementTiles(a, readonly=True).tolist() == [6] + [4] * 7 + [7] * 8 + [4] * 32


def test_readonly_tiles_are_kept_until_a_remap() -> None:
    g = _graph()
    x = g.addVariable(FLOAT, [8, 16], "x")
    g.mapElements(x, np.arange(128) // 8)
    view = x.dimShuffle([1, 0])
    first = g.elementTiles(view, readonly=True)
    assert not first.flags.writeable
    assert g.elementTiles(view, readonly=True) is first  # kept for the same view
    fresh = g.elementTiles(view)
    assert fresh.flags.writeable and fresh is not first
    np.testing.assert_array_equal(fresh, first)
    fresh[:] = 0  # the caller's own array: the kept one is untouched
    np.testing.assert_array_equal(
        g.elementTiles(view, readonly=True), np.arange(128).reshape(8, 16).T.reshape(-1) // 8
    )
    # a new variable mapped for the first time keeps what was found
    y = g.addVariable(FLOAT, [32], "y")
    g.setTileMapping(y, 9)
    assert g.elementTiles(view, readonly=True) is first
    g.setTileMapping(x[3], 15)  # a remap
    again = g.elementTiles(view, readonly=True)
    want = np.arange(128).reshape(8, 16) // 8
    want[3] = 15
    np.testing.assert_array_equal(again, want.T.reshape(-1))
    np.testing.assert_array_equal(g.elementTiles(x.flatten(), readonly=True), want.reshape(-1))


def test_a_remap_elsewhere_keeps_the_tiles_of_other_tensors() -> None:
    """Kept tiles stay while remaps write over other ids (as pooling maps its new
    output linearly, then again where its vertices go); a remap within a tensor's id
    span drops its tiles, for a view of scattered ids too."""
    g = _graph()
    x = g.addVariable(FLOAT, [8, 16], "x")
    g.mapElements(x, np.arange(128) % 16)
    view = x.dimShuffle([1, 0])
    kept_x = g.elementTiles(x, readonly=True)
    kept_view = g.elementTiles(view, readonly=True)
    y = g.addVariable(FLOAT, [50], "y")
    g.setTileMapping(y, 1)
    g.setTileMapping(y, 2)  # a remap of y alone
    h = g.addVariable(HALF, [128], "h")  # ids of another element size
    g.setTileMapping(h, 0)
    g.mapElements(h, np.arange(128) % 16)
    assert g.elementTiles(x, readonly=True) is kept_x
    assert g.elementTiles(view, readonly=True) is kept_view
    g.setTileMapping(x[7][15], 3)  # the last element of x
    for t, kept in ((x, kept_x), (view, kept_view)):
        got = g.elementTiles(t, readonly=True)
        assert got is not kept
        np.testing.assert_array_equal(got, g.elementTiles(t))
    assert int(g.elementTiles(x, readonly=True)[-1]) == 3


def test_tiles_of_unmapped_elements_are_not_kept() -> None:
    g = _graph()
    x = g.addVariable(FLOAT, [10], "x")
    g.setTileMapping(x.slice(0, 5), 1)
    assert (g.elementTiles(x, readonly=True)[5:] == -1).all()
    g.setTileMapping(x.slice(5, 10), 2)  # a first mapping: the version holds
    np.testing.assert_array_equal(g.elementTiles(x, readonly=True), [1] * 5 + [2] * 5)


def test_virtual_graph_tiles_read_only_in_its_numbering() -> None:
    g = _graph()
    v = g.createVirtualGraph(4, 8)
    x = g.addVariable(FLOAT, [8], "x")
    g.mapElements(x, [4, 5, 6, 7, 0, 1, 4, 4])
    got = v.elementTiles(x, readonly=True)
    assert not got.flags.writeable
    np.testing.assert_array_equal(got, [0, 1, 2, 3, -2, -2, 0, 0])
    v.setTileMapping(x, 2)
    np.testing.assert_array_equal(v.elementTiles(x, readonly=True), [2] * 8)
    np.testing.assert_array_equal(g.elementTiles(x, readonly=True), [6] * 8)


def test_the_tiles_memo_keeps_a_budget_and_drops_the_least_recent(monkeypatch) -> None:
    monkeypatch.setattr(TilesMemo, "BUDGET", 100)
    g = _graph()
    ts = [g.addVariable(FLOAT, [40], f"t{i}") for i in range(4)]
    for i, t in enumerate(ts):
        g.setTileMapping(t, i)
    kept = [g.elementTiles(t, readonly=True) for t in ts[:2]]
    assert g.elementTiles(ts[0], readonly=True) is kept[0]  # t0 the most recent now
    g.elementTiles(ts[2], readonly=True)  # 120 > 100: t1 is dropped
    memo = g.__dict__["_tiles_memo"]
    assert memo.held <= 100
    assert g.elementTiles(ts[0], readonly=True) is kept[0]
    assert g.elementTiles(ts[1], readonly=True) is not kept[1]
    big = g.addVariable(FLOAT, [101], "big")
    g.setTileMapping(big, 0)
    assert g.elementTiles(big, readonly=True) is not g.elementTiles(big, readonly=True)


def test_a_view_gone_is_not_confused_with_a_new_one() -> None:
    g = _graph()
    x = g.addVariable(FLOAT, [64], "x")
    g.mapElements(x, np.arange(64) % 16)
    for k in range(30):  # new views, whose index arrays may reuse a freed one's id
        perm = np.random.default_rng(k).permutation(64)
        view = x.elements(perm)
        np.testing.assert_array_equal(g.elementTiles(view, readonly=True), perm % 16)
        del view
        gc.collect()


def _plan(g: Graph, t, tiles=None) -> layout.PlannedVertices:
    return layout.plan_tiles(g, t, "test", unary_plan(g, "RELU", FLOAT, False, FLOAT), tiles)


def _same(a: layout.PlannedVertices, b: layout.PlannedVertices) -> None:
    assert a.classes == b.classes
    for field in ("tiles", "rows", "counts", "sizes", "positions"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


@pytest.mark.parametrize("seed", range(3))
def test_plans_with_layouts_kept_equal_plans_made_afresh(seed: int) -> None:
    rng = np.random.default_rng(seed)
    g = _graph(int(rng.integers(2, 24)))
    n_tiles = g.getTarget().getNumTiles()
    held = []
    for _ in range(40):
        shape = [int(rng.integers(1, 9)), int(rng.integers(1, 40))]
        x = g.addVariable(FLOAT, shape, "x")
        run = int(rng.integers(1, 12))
        g.mapElements(
            x, np.repeat(rng.integers(0, n_tiles, x.numElements()), run)[: x.numElements()]
        )
        views = [x, x.dimShuffle([1, 0]), x.elements(rng.permutation(x.numElements()))]
        for view in views:
            kept = _plan(g, view)  # kept, then asked again with tiles given or not
            again = _plan(g, view, g.elementTiles(view) if rng.random() < 0.5 else None)
            layout._LAYOUTS.entries.clear()
            layout._LAYOUTS.held = 0
            afresh = _plan(g, view)
            _same(again, afresh)
            _same(kept, afresh)
            if rng.random() < 0.3:  # remap some of it: the plan follows
                part = x.flatten().slice(0, int(rng.integers(1, x.numElements() + 1)))
                g.setTileMapping(part, int(rng.integers(0, n_tiles)))
                after = _plan(g, view)
                layout._LAYOUTS.entries.clear()
                layout._LAYOUTS.held = 0
                _same(after, _plan(g, view))
        held.append(views)


def test_layouts_of_a_tensor_gone_are_dropped() -> None:
    g = _graph()
    x = g.addVariable(FLOAT, [16, 16], "x")
    g.mapElements(x, np.arange(256) % 16)
    view = x.dimShuffle([1, 0])
    _plan(g, view)
    assert id(view.flat_index()) in layout._LAYOUTS.entries
    key = id(view.flat_index())
    del view
    gc.collect()
    assert key not in layout._LAYOUTS.entries
    consecutive = g.addVariable(FLOAT, [64], "c")  # its ids are made at each use
    g.setTileMapping(consecutive, 1)
    held = layout._LAYOUTS.held
    _plan(g, consecutive)
    gc.collect()
    assert layout._LAYOUTS.held == held
