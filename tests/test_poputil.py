"""poputil: linear tile mapping, clones and duplicate."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, INT, Engine, Graph, Interval, IPUModel, poputil
from poplar_api import program as prog
from poplar_api.errors import GraphError


@pytest.fixture
def graph() -> Graph:
    return Graph(IPUModel("tiny").createDevice().getTarget())  # 8 tiles


def tiles_of(graph: Graph, t) -> np.ndarray:
    return graph._state.space(t.elementType()).tile[t.flat_index()]


def intervals(per_tile: list[tuple[int, int]], num_tiles: int = 8) -> list[list[Interval]]:
    out: list[list[Interval]] = [[] for _ in range(num_tiles)]
    for tile, (a, b) in enumerate(per_tile):
        out[tile].append(Interval(a, b))
    return out


def test_linear_mapping_spreads_evenly(graph):
    t = graph.addVariable(FLOAT, [20], "t")
    poputil.mapTensorLinearly(graph, t)
    # ceil(20 / 8) = 3 elements per tile: tiles 0..5 get 3, tile 6 gets 2, tile 7 none
    want = intervals([(0, 3), (3, 6), (6, 9), (9, 12), (12, 15), (15, 18), (18, 20)])
    assert graph.getTileMapping(t) == want
    assert poputil.calcLinearTileMapping(graph, t) == want
    assert poputil.calcLinearTileMapping(graph, [4, 5]) == want


def test_grain_size_and_minimum_per_tile(graph):
    t = graph.addVariable(FLOAT, [20], "t")
    poputil.mapTensorLinearly(graph, t, grainSize=4)
    # 5 grains of 4 over 8 tiles: one grain per tile on tiles 0..4
    assert graph.getTileMapping(t) == intervals([(4 * k, 4 * k + 4) for k in range(5)])
    poputil.mapTensorLinearly(graph, t, minElementsPerTile=10)
    # ceil(20/8) = 3 < 10, so 10 per tile: tiles 0 and 1
    assert graph.getTileMapping(t) == intervals([(0, 10), (10, 20)])
    u = graph.addVariable(INT, [10], "u")
    poputil.mapTensorLinearly(graph, u, minElementsPerTile=5, grainSize=3)
    # grains of 3 (last one short); at least 5 elements -> ceil(5/3) = 2 grains = 6 per tile
    assert graph.getTileMapping(u) == intervals([(0, 6), (6, 10)])


def test_mapping_follows_the_flat_order_of_a_view(graph):
    v = graph.addVariable(FLOAT, [4, 6], "v")
    poputil.mapTensorLinearly(graph, v.transpose())  # 24 elements: 3 per tile
    expected = np.empty((4, 6), np.int32)
    for i in range(6):  # row i of the transpose is column i of v
        for j in range(4):
            expected[j, i] = (i * 4 + j) // 3
    np.testing.assert_array_equal(tiles_of(graph, v).reshape(4, 6), expected)


def test_virtual_graph_maps_onto_its_own_tiles(graph):
    sub = graph.createVirtualGraph(4, 8)
    t = sub.addVariable(FLOAT, [8], "t")
    poputil.mapTensorLinearly(sub, t)
    # 8 elements over 4 tiles: 2 each, on parent tiles 4..7
    np.testing.assert_array_equal(tiles_of(graph, t), [4, 4, 5, 5, 6, 6, 7, 7])


def test_bad_arguments_are_named(graph):
    t = graph.addVariable(FLOAT, [8], "t")
    with pytest.raises(GraphError, match="grainSize must be an int >= 1, got 0"):
        poputil.mapTensorLinearly(graph, t, grainSize=0)
    with pytest.raises(GraphError, match="minElementsPerTile must be an int >= 0, got -1"):
        poputil.mapTensorLinearly(graph, t, minElementsPerTile=-1)
    with pytest.raises(GraphError, match="expected a Tensor"):
        poputil.mapTensorLinearly(graph, [1, 2])


def test_clone_of_a_view_copies_its_mapping_element_by_element(graph):
    v = graph.addVariable(FLOAT, [3, 4], "v")
    for r in range(3):
        for c in range(4):
            graph.setTileMapping(v[r][c], (r + 2 * c) % 8)
    view = v.transpose().slice(1, 3, 1)  # shape [4, 2]: v[1:3, :]^T
    clone = poputil.cloneTensor(graph, view, "clone")
    assert clone.shape() == [4, 2]
    assert not clone.intersectsWith(v)
    want = [[(r + 2 * c) % 8 for r in (1, 2)] for c in range(4)]
    np.testing.assert_array_equal(tiles_of(graph, clone).reshape(4, 2), want)
    many = poputil.cloneN(graph, view, 3, "many")
    assert many.shape() == [3, 4, 2]
    for k in range(3):
        np.testing.assert_array_equal(tiles_of(graph, many[k]).reshape(4, 2), want)


def test_duplicate_copies_the_values():
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    src = graph.addVariable(INT, [2, 5], "src")
    poputil.mapTensorLinearly(graph, src)
    seq = prog.Sequence()
    copy = poputil.duplicate(graph, src, seq, "dup")
    assert len(seq.children()) == 1 and isinstance(seq.children()[0], prog.Copy)
    assert graph.getTileMapping(copy) == graph.getTileMapping(src)
    graph.createHostWrite("w", src)
    graph.createHostRead("r", copy)
    engine = Engine(graph, seq)
    engine.load(device)
    values = np.arange(10, dtype=np.int32) * 3 - 7
    engine.writeTensor("w", values)
    engine.run(0)
    out = np.zeros(10, np.int32)
    engine.readTensor("r", out)
    np.testing.assert_array_equal(out, values)


def test_duplicate_of_unmapped_tensor_is_rejected(graph):
    src = graph.addVariable(FLOAT, [3], "loose")
    with pytest.raises(GraphError, match="'loose' has unmapped elements"):
        poputil.duplicate(graph, src, prog.Sequence())
