"""popnn's tile helpers (``popnn.mapping``) against their former forms, written out
here: the same tiles, the same errors in the same order, on top-level and virtual
graphs, tensors mapped, partly unmapped and partly outside a virtual graph; and
``elementTiles`` gives a new array each call, which they hand on without a copy."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.errors import GraphError
from poplar_api.popnn.mapping import element_tiles, local_tiles


def _old_element_tiles(graph, t, what):
    tiles = graph.getTopLevelGraph().elementTiles(t)
    if (tiles == -1).any():
        first = int(np.flatnonzero(tiles == -1)[0])
        raise GraphError(
            f"{what}: element {first} of tensor '{t.name}' is not mapped to a tile; hint: "
            f"map it with graph.setTileMapping first"
        )
    return tiles


def _old_local_tiles(graph, t, what):
    tiles = graph.elementTiles(t)
    if (tiles == -1).any():
        first = int(np.flatnonzero(tiles == -1)[0])
        raise GraphError(
            f"{what}: element {first} of tensor '{t.name}' is not mapped to a tile; hint: "
            f"map it with graph.setTileMapping first"
        )
    if tiles.size and int(tiles.min()) < 0:
        first = int(np.flatnonzero(tiles < 0)[0])
        raise GraphError(
            f"{what}: element {first} of tensor '{t.name}' is mapped to a tile outside "
            f"this virtual graph's tiles; hint: map it to one of the graph's "
            f"{graph.getTarget().getNumTiles()} tiles"
        )
    return np.array(tiles, np.int64)


def _outcome(fn, *args):
    try:
        return np.asarray(fn(*args)).tolist()
    except GraphError as e:
        return str(e)


def _cases():
    rng = np.random.default_rng(31)
    top = Graph(IPUModel("ipu2").createDevice().getTarget())
    sub = top.createVirtualGraph(8, 24)
    cases = []
    for n in (0, 1, 7, 300):
        for how in ("all", "unmapped", "outside", "both"):
            v = top.addVariable(FLOAT, [n], f"v{n}{how}")
            tiles = rng.integers(8, 24, n)
            if n and how in ("outside", "both"):
                tiles[rng.integers(0, n, 1 + n // 10)] = rng.integers(30, 40)
            keep = np.ones(n, bool)
            if n and how in ("unmapped", "both"):
                keep[rng.integers(0, n, 1 + n // 10)] = False
            idx = np.flatnonzero(keep)
            top.mapElements(v.elements(idx), tiles[idx])
            view = v if n < 2 else v.elements(rng.permutation(n))
            cases += [(top, v), (sub, v), (top, view), (sub, view)]
    return cases


@pytest.mark.parametrize("k", range(64))
def test_helpers_match_their_former_forms(k: int) -> None:
    graph, t = _cases()[k]
    for new, old in ((element_tiles, _old_element_tiles), (local_tiles, _old_local_tiles)):
        assert _outcome(new, graph, t, "op") == _outcome(old, graph, t, "op")


def test_element_tiles_are_a_new_array_each_call() -> None:
    top = Graph(IPUModel("ipu2").createDevice().getTarget())
    sub = top.createVirtualGraph(8, 24)
    v = top.addVariable(FLOAT, [40], "v")
    top.mapElements(v, np.arange(40) % 16 + 8)
    unmapped_type = top.addVariable(FLOAT, [3], "w")  # mapped nowhere yet
    for graph in (top, sub):
        for t in (v, v.reshape([5, 8]).dimShuffle([1, 0]), v[3:9]):
            first = graph.elementTiles(t)
            expected = first.copy()
            first[...] = 99
            np.testing.assert_array_equal(graph.elementTiles(t), expected)
            assert local_tiles(graph, t, "op").dtype == np.int64
    first = top.elementTiles(unmapped_type)
    first[...] = 5
    assert (top.elementTiles(unmapped_type) == -1).all()


@pytest.mark.parametrize("virtual", [False, True])
def test_pool_gradient_hands_clone_like_the_tiles_it_would_ask(monkeypatch, virtual: bool) -> None:
    from poplar_api.popnn import PoolingType, PoolParams, pooling
    from poplar_api.program import Sequence

    handed = []
    real = pooling.clone_like

    def checked(graph, t, type_, name, what, tiles=None):
        if tiles is not None:  # the tiles clone_like would have asked for
            np.testing.assert_array_equal(tiles, local_tiles(graph, t, what))
            handed.append(name)
        out = real(graph, t, type_, name, what, tiles)
        np.testing.assert_array_equal(graph.elementTiles(out), graph.elementTiles(t))
        return out

    monkeypatch.setattr(pooling, "clone_like", checked)
    rng = np.random.default_rng(3)
    top = Graph(IPUModel("ipu2").createDevice().getTarget())
    graph = top.createVirtualGraph(8, 24) if virtual else top
    params = PoolParams(PoolingType.MAX, [6, 6], [2, 2], [2, 2], [0, 0], [0, 0], 4, 2, FLOAT)
    x = graph.addVariable(FLOAT, [2, 4, 6, 6], "x")
    graph.mapElements(x, rng.integers(0, 16, x.numElements()))
    g = graph.addVariable(FLOAT, [2, 4, 3, 3], "g")
    graph.mapElements(g, rng.integers(0, 16, g.numElements()))
    seq = Sequence()
    y = pooling.pool(graph, params, x, seq, "p")
    pooling.poolInputGradient(graph, params, x, y, g, False, seq, "p")
    # the output's (a top-level graph's checked tiles) and the rearranged gradients'
    # (pooled's tiles, which the pass's tile choice reads too)
    kinds = sorted(name.rsplit("/", 1)[-1] for name in handed)
    assert kinds == (["gradsRearranged"] if virtual else ["gradsRearranged", "out"])
    unmapped = graph.addVariable(FLOAT, [2, 4, 6, 6], "u")
    with pytest.raises(GraphError, match="poolInputGradient: in: element 0 of tensor 'u'"):
        pooling.poolInputGradient(graph, params, unmapped, y, g, False, seq, "p")


@pytest.mark.parametrize("virtual", [False, True])
@pytest.mark.parametrize("scaled", [False, True])
def test_pool_passes_read_the_tiles_they_are_handed(monkeypatch, virtual: bool, scaled: bool):
    """The tiles a pooling pass is handed for its tile choice (its input's, as the
    caller checked them) are those it would ask for, on random mappings, with and
    without the scaled gradient's extra pass."""
    from poplar_api.popnn import PoolingType, PoolParams, pool_plan, pooling
    from poplar_api.program import Sequence

    handed = []
    real = pool_plan._Builder.build

    def checked(self, operands, prog, intro, avg=False, scale_value=1.0, intro_tiles=None):
        if intro_tiles is not None:
            np.testing.assert_array_equal(intro_tiles, local_tiles(self.graph, intro.tensor, "t"))
            handed.append(self.name)
        return real(self, operands, prog, intro, avg, scale_value, intro_tiles)

    monkeypatch.setattr(pool_plan._Builder, "build", checked)
    rng = np.random.default_rng(5)
    top = Graph(IPUModel("ipu2").createDevice().getTarget())
    graph = top.createVirtualGraph(8, 24) if virtual else top
    for kind in (PoolingType.MAX, PoolingType.AVG):
        params = PoolParams(kind, [7, 6], [3, 2], [2, 2], [1, 0], [0, 1], 8, 3, FLOAT)
        x = graph.addVariable(FLOAT, [3, 8, 7, 6], "x")
        graph.mapElements(x, rng.integers(0, 16, x.numElements()))
        seq = Sequence()
        y = pooling.pool(graph, params, x, seq, "p")
        g = graph.addVariable(FLOAT, y.shape(), "g")
        graph.mapElements(g, rng.integers(0, 16, g.numElements()))
        if kind is PoolingType.MAX:
            pooling.poolInputGradient(graph, params, x, y, g, scaled, seq, "p")
    # the forward passes and the scale's on a top-level graph (the checked tiles are
    # the top level's); the MAX gradient's (pooled's tiles) on either
    assert len(handed) == (0 if virtual else 2 + scaled) + 1


@pytest.mark.parametrize("virtual", [False, True])
def test_nonlinearity_plans_over_the_tiles_it_cloned_by(monkeypatch, virtual: bool) -> None:
    """``nonLinearity`` and ``nonLinearityInputGradient`` plan their vertices over the
    tiles their clone was mapped by: those ``plan_tiles`` would ask for."""
    from poplar_api.popnn import NonLinearityType, nonlinearity
    from poplar_api.program import Sequence

    seen = []
    real = nonlinearity.plan_tiles

    def checked(graph, ref, api, plan_tile, tiles=None):
        assert tiles is not None
        np.testing.assert_array_equal(tiles, graph.elementTiles(ref))
        seen.append(api)
        return real(graph, ref, api, plan_tile, tiles)

    monkeypatch.setattr(nonlinearity, "plan_tiles", checked)
    rng = np.random.default_rng(9)
    top = Graph(IPUModel("ipu2").createDevice().getTarget())
    graph = top.createVirtualGraph(8, 24) if virtual else top
    seq = Sequence()
    for op in (NonLinearityType.RELU, NonLinearityType.GELU):
        x = graph.addVariable(FLOAT, [5, 37], "x")
        graph.mapElements(x, rng.integers(0, 16, x.numElements()))
        y = nonlinearity.nonLinearity(graph, op, x, seq)
        np.testing.assert_array_equal(graph.elementTiles(y), graph.elementTiles(x))
        g = graph.addVariable(FLOAT, [5, 37], "g")
        graph.mapElements(g, rng.integers(0, 16, g.numElements()))
        dx = nonlinearity.nonLinearityInputGradient(graph, op, y, g, seq)
        np.testing.assert_array_equal(graph.elementTiles(dx), graph.elementTiles(y))
    assert len(seen) == 4
