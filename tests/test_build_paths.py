"""The inline paths of graph building agree with the general ones.

``t[i]``, ``t.slice(b, e)``, ``setTileMapping(x, tile)``, ``addVertex`` with tensor
connections and ``setPerfEstimate`` take a short path for the common argument kinds;
every other kind goes through the checked general path. Both must give the same views,
names, mappings and vertices, and bad arguments must still raise the general path's
errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import ShiftBy

from poplar_api import FLOAT, INT, Graph, IPUModel
from poplar_api.errors import GraphError, TensorIndexError, TypeMismatchError
from poplar_api.tensor import Interval


@pytest.fixture()
def graph() -> Graph:
    return Graph(IPUModel("ipu2").createDevice().getTarget())


def test_int_index_equals_tuple_index(graph: Graph) -> None:
    t = graph.addVariable(FLOAT, [4, 3], "t")
    for i in (0, 3, -1, -4):
        fast, general = t[i], t[(i,)]
        assert fast.name == general.name == f"t[{i}]"
        np.testing.assert_array_equal(fast.index, general.index)
        np.testing.assert_array_equal(fast.index, np.arange(12).reshape(4, 3)[i])
    with pytest.raises(TensorIndexError, match="index 4 of dimension 0 is out of range"):
        t[4]
    scalar = t[1][2]
    assert scalar.rank() == 0 and int(scalar.index) == 5
    with pytest.raises(TensorIndexError):
        scalar[0]


def test_slice_equals_interval_slice(graph: Graph) -> None:
    t = graph.addVariable(FLOAT, [6, 2], "t")
    fast, general = t.slice(1, 4), t.slice(Interval(1, 4))
    assert fast.name == general.name == "t.slice(1,4)"
    np.testing.assert_array_equal(fast.index, general.index)
    np.testing.assert_array_equal(fast.index, np.arange(12).reshape(6, 2)[1:4])
    with pytest.raises(TensorIndexError, match="require 0 <= begin <= end <= 6"):
        t.slice(4, 7)
    with pytest.raises(TypeMismatchError):
        t.slice(1, 2, True)  # a bool is not a dimension
    short = graph.addVariable(FLOAT, [100], "x" * 60)
    view = short.slice(0, 50)
    assert view.slice(1, 2).name == "x" * 60 + ".(...).slice(1,2)"  # clipped derived name
    assert view[1].name == view[(1,)].name == "x" * 60 + ".slice(0,50)[1]"
    long = graph.addVariable(FLOAT, [100], "y" * 78)
    assert long.slice(1, 2).name == "y" * 78 + ".(...)"


def test_tile_mapping_of_one_tile_equals_whole_mapping(graph: Graph) -> None:
    a = graph.addVariable(FLOAT, [8], "a")
    b = graph.addVariable(FLOAT, [8], "b")
    graph.setTileMapping(a.slice(0, 5), 3)
    graph.setTileMapping(a.slice(5, 8), np.int64(7))
    whole = [[] for _ in range(8)]
    whole[3], whole[7] = [Interval(0, 5)], [Interval(5, 8)]
    graph.setTileMapping(b, whole)
    assert graph.getTileMapping(a) == graph.getTileMapping(b)
    graph.setTileMapping(a[2], 1)  # a later mapping of an element wins
    assert graph.getTileMapping(a)[1] == [Interval(2, 3)]
    n = graph.getTarget().getNumTiles()
    with pytest.raises(GraphError, match=f"tile {n} is out of range"):
        graph.setTileMapping(a, n)
    with pytest.raises(GraphError, match="mapping True must be a tile"):
        graph.setTileMapping(a, True)


def test_tile_mapping_of_virtual_graph_is_shifted(graph: Graph) -> None:
    sub = graph.createVirtualGraph(10, 20)
    x = sub.addVariable(FLOAT, [2], "x")
    sub.setTileMapping(x, 4)
    assert graph.getTileMapping(x)[14] == [Interval(0, 2)]
    cs = sub.addComputeSet("cs")
    graph.addCodelets(ShiftBy)
    k = sub.addConstant(FLOAT, [], 1.0, "k")
    sub.setTileMapping(k, 4)
    v = sub.addVertex(cs, "ShiftBy", {"in": x, "k": k, "out": x})
    sub.setTileMapping(v, 5)
    assert graph._state.vertices[v.id].tile == 15


def test_add_vertex_connections_and_errors(graph: Graph) -> None:
    graph.addCodelets(ShiftBy)
    cs = graph.addComputeSet("cs")
    x = graph.addVariable(FLOAT, [4], "x")
    k = graph.addVariable(FLOAT, [1], "k")
    v = graph.addVertex(cs, "ShiftBy", {"in": x, "k": k[0], "out": x})
    inst = graph._state.vertices[v.id]
    assert set(inst.fields) == {"in", "k", "out"}
    # consecutive ids are kept as ranges
    assert inst.fields["in"] == range(0, 4) and inst.fields["k"] == range(4, 5)
    graph.setPerfEstimate(v, 42)
    assert inst.perf_estimate == 42
    with pytest.raises(GraphError, match="must be an int >= 0"):
        graph.setPerfEstimate(v, -1)
    before = graph.getNumVertices()
    with pytest.raises(GraphError, match=r"scalar field .* needs exactly 1 element"):
        graph.addVertex(cs, "ShiftBy", {"in": x, "k": x, "out": x})
    with pytest.raises(TypeMismatchError, match="element type int"):
        graph.addVertex(cs, "ShiftBy", {"in": graph.addVariable(INT, [4], "i"), "out": x})
    with pytest.raises(GraphError, match="has no field 'inn'"):
        graph.addVertex(cs, "ShiftBy", {"inn": x})
    other = Graph(graph.getTarget()).addVariable(FLOAT, [4], "y")
    with pytest.raises(GraphError, match="belongs to another graph"):
        graph.addVertex(cs, "ShiftBy", {"in": other})
    assert graph.getNumVertices() == before  # failed calls leave no vertex
    assert cs.vertices == [v.id]


def test_view_names_follow_the_parent_name_rule_whenever_read(graph: Graph) -> None:
    from poplar_api.tensor import MAX_NAME_LENGTH

    base = graph.addVariable(FLOAT, [64, 64], "w" * 40)

    def expected(parent: str, op: str) -> str:
        name = parent + op
        if len(name) > MAX_NAME_LENGTH:
            name = "w" * 40 + ".(...)" + op
            if len(name) > MAX_NAME_LENGTH:
                name = "w" * 40 + ".(...)"
        return name

    # a chain of views; names read at the end (parents not yet named) and in order
    steps = [
        (lambda t: t.slice(1, 64), ".slice(1,64)"),
        (lambda t: t[2], "[2]"),
        (lambda t: t.slice(3, 60), ".slice(3,60)"),
        (lambda t: t.reshape([3, 19]), ".reshape([3,19])"),
        (lambda t: t[-1], "[-1]"),
        (lambda t: t.slice(0, 10), ".slice(0,10)"),
        (lambda t: t.expand([0]), ".expand([0])"),
        (lambda t: t[0], "[0]"),
        (lambda t: t.slice(2, 9), ".slice(2,9)"),
        (lambda t: t.slice(1, 2), ".slice(1,2)"),
    ]
    for read_along in (False, True):
        t, chain, want = base, [], [base.name]
        for make, op in steps:
            t = make(t)
            chain.append(t)
            want.append(expected(want[-1], op))
            if read_along:
                assert t.name == want[-1]
        assert [c.name for c in reversed(chain)][::-1] == want[1:]
    assert any(".(...)" in w for w in want) and all(len(w) <= MAX_NAME_LENGTH for w in want)
    again = base[3][5]
    assert again.name == "w" * 40 + "[3][5]" and repr(again).startswith("Tensor('" + "w" * 40)


def test_initial_values_of_blocks_make_no_index_array(graph: Graph) -> None:
    from poplar_api import Engine
    from poplar_api import program as prog

    k = graph.addConstant(INT, [3, 4], np.arange(12).reshape(3, 4), "k")
    v = graph.addVariable(INT, [3, 4], "v")
    graph.setTileMapping(k, 0)
    graph.setTileMapping(v, 1)
    graph.setInitialValue(v[1], [7, 8, 9, 10])  # a row: a block as well
    assert k._ix is None and v._ix is None  # neither tensor's index array was made
    assert type(graph._state.initial_parts[-1][1]) is range
    graph.setInitialValue(v[:, 0], [-1, -2, -3])  # a column: its ids
    graph.createHostRead("k", k)
    graph.createHostRead("v", v)
    engine = Engine(graph, prog.Sequence())
    engine.load(IPUModel("ipu2").createDevice())
    got_k, got_v = np.zeros((3, 4), np.int32), np.zeros((3, 4), np.int32)
    engine.readTensor("k", got_k)
    engine.readTensor("v", got_v)
    assert got_k.tolist() == np.arange(12).reshape(3, 4).tolist()
    assert got_v.tolist() == [[-1, 0, 0, 0], [-2, 8, 9, 10], [-3, 0, 0, 0]]


def test_long_chains_of_views_pickle_and_name_in_linear_time(graph: Graph) -> None:
    import copy
    import pickle

    x = graph.addVariable(FLOAT, [20], "x")
    t, chain = x, []
    for _ in range(5000):  # deeper than Python's recursion limit
        t = t.slice(0, 10)
        chain.append(t)
    assert copy.deepcopy(t).shape() == [10]
    assert pickle.loads(pickle.dumps(t)).shape() == [10]
    names = [c.name for c in chain]  # each in constant time: parents are named
    assert names[0] == "x.slice(0,10)" and all(len(n) <= 80 for n in names)
    want, name = [], "x"
    for _ in range(5000):  # the naming rule: parent + op, clipped to root.(...)op
        name += ".slice(0,10)"
        if len(name) > 80:
            name = "x.(...).slice(0,10)"
        want.append(name)
    assert names == want
