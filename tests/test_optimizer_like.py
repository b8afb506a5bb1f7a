"""``popart_api.optimizers.like``: a new variable mapped as a tensor is, element by
element in one bulk call; the same mapping as through the tensor's per-tile interval
lists (the computation kept here as the reference)."""

from __future__ import annotations

import numpy as np
import pytest

from popart_api.optimizers import like
from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.poputil import mapTensorLinearly


def _old_like(graph: Graph, t, name: str):
    """The former ``like``: ``getTileMapping`` handed to ``setTileMapping``, spread
    linearly when ``t`` has no whole mapping on this graph."""
    new = graph.addVariable(t.elementType(), t.shape(), name)
    try:
        graph.setTileMapping(new, graph.getTileMapping(t))
    except Exception:
        mapTensorLinearly(graph, new)
    return new


@pytest.mark.parametrize("virtual", [False, True])
def test_like_maps_as_the_interval_lists_did(virtual):
    """Random element mappings, seen through views (transposes, slices, broadcasts),
    on the whole device and on a virtual graph of some of its tiles; tensors with an
    unmapped element or elements on tiles outside the virtual graph are spread."""
    root = Graph(IPUModel("tiny").createDevice().getTarget())
    graph = root.createVirtualGraph(2, 7) if virtual else root
    rng = np.random.default_rng(4)
    n_tiles = graph.getTarget().getNumTiles()
    for trial in range(20):
        x = graph.addVariable(FLOAT, [6, 10], f"x{trial}")
        graph.mapElements(x, rng.integers(0, n_tiles, 60))
        views = [x, x.transpose(), x[1:4], x.slice(2, 9, 1), x[2].broadcast(3, 0)]
        if virtual:  # an element on a tile the virtual graph does not have
            y = root.addVariable(FLOAT, [4], f"y{trial}")
            root.mapElements(y, [0, 3, 4, 7])
            views.append(y)
        z = graph.addVariable(FLOAT, [5], f"z{trial}")
        graph.mapElements(z[:4], rng.integers(0, n_tiles, 4))  # z[4] is unmapped
        views.append(z)
        for k, t in enumerate(views):
            got = like(graph, t, f"new{trial}.{k}")
            want = _old_like(graph, t, f"old{trial}.{k}")
            assert got.shape() == want.shape()
            np.testing.assert_array_equal(graph.elementTiles(got), graph.elementTiles(want))
