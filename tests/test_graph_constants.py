"""``Graph.addConstants``: many constants in one call, the same graph as one
``addConstant`` + ``setTileMapping`` per constant (variables, element ids, names,
initial values, tiles), and clear errors for bad input."""

import numpy as np
import pytest

from poplar_api import (
    FLOAT,
    HALF,
    INT,
    UNSIGNED_INT,
    UNSIGNED_SHORT,
    Engine,
    Graph,
    IPUModel,
)
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.program import Sequence
from poplar_api.tensor import concat

# (type, shape, values, name, tile): mixed types and sizes, a repeated value, an
# empty constant, UNSIGNED_INT and INT sharing the 4-byte space between FLOATs
SPECS = [
    (UNSIGNED_SHORT, [3], [1, 2, 65535], "a", 0),
    (UNSIGNED_INT, [2], [7, 4000000000], "b", 5),
    (FLOAT, [2, 2], [0.5, -1.5, 2.0, 3.25], "c", 3),
    (UNSIGNED_SHORT, [1], [9], "", 3),
    (INT, [4], 6, "d", 1),
    (HALF, [2], [1.5, -2.0], "e", 2),
    (UNSIGNED_SHORT, [0], np.zeros(0, np.int64), "empty", 4),
    (FLOAT, [1], [8.0], "f", 4),
    (INT, [2], [-3, 11], "g", 0),
]


def _graph() -> Graph:
    return Graph(IPUModel("ipu2").createDevice().getTarget())


def _prefix(g: Graph) -> None:
    """Elements made before the constants, so ids do not start at zero."""
    v = g.addVariable(FLOAT, [5], "x")
    g.setTileMapping(v, 1)
    w = g.addVariable(UNSIGNED_SHORT, [3], "y")
    g.setTileMapping(w, 2)


def _singles():
    g = _graph()
    _prefix(g)
    out = []
    for t, shape, vals, name, tile in SPECS:
        c = g.addConstant(t, shape, vals, name)
        g.setTileMapping(c, tile)
        out.append(c)
    return g, out


def _bulk():
    g = _graph()
    _prefix(g)
    types, shapes, vals, names, tiles = zip(*SPECS, strict=True)
    return g, g.addConstants(list(types), list(shapes), list(vals), list(names), list(tiles))


def _expected(t, shape, vals):
    """The values ``addConstant`` is asked for, in the element type's dtype."""
    n = int(np.prod(shape))
    arr = np.asarray(vals)
    return np.broadcast_to(arr.reshape(()), (n,)) if arr.size == 1 and n != 1 else arr


def test_bulk_matches_single_calls():
    gs, single = _singles()
    gb, bulk = _bulk()
    assert gb.getVariables() == gs.getVariables()
    assert [v.name for v in gb.getVariables()[2:]] == ["a", "b", "c", "var5", "d", "e",
                                                       "empty", "f", "g"]  # fmt: skip
    for s, b, (t, shape, _, _, tile) in zip(single, bulk, SPECS, strict=True):
        assert b.shape() == s.shape() == shape
        assert b.elementType() == t
        np.testing.assert_array_equal(b.flat_index(), s.flat_index())
        assert gb.getTileMapping(b) == gs.getTileMapping(s)
        if b.numElements():
            assert gb.getTileMapping(b)[tile]  # on its tile
        assert gb.elementTiles(b).tolist() == [tile] * b.numElements()


def test_bulk_values_read_back_from_the_engine():
    g, bulk = _bulk()
    for i, c in enumerate(bulk):
        if c.numElements():
            g.createHostRead(f"r{i}", c)
    eng = Engine(g, Sequence())
    eng.load(IPUModel("ipu2").createDevice())
    for i, (c, (t, shape, vals, _, _)) in enumerate(zip(bulk, SPECS, strict=True)):
        if not c.numElements():
            continue
        got = np.zeros(c.numElements(), t.numpy)
        eng.readTensor(f"r{i}", got)
        np.testing.assert_array_equal(got, np.asarray(_expected(t, shape, vals), t.numpy))


def test_one_type_one_name_and_no_tiles_leave_constants_unmapped():
    g = _graph()
    cs = g.addConstants(UNSIGNED_SHORT, [[2], 3], [[1, 2], [3, 4, 5]], "wl")
    assert [c.shape() for c in cs] == [[2], [3]]
    assert [v.name for v in g.getVariables()] == ["wl", "wl"]
    assert [g.elementTiles(c).tolist() for c in cs] == [[-1] * 2, [-1] * 3]


def test_wrong_value_count_names_the_constant():
    with pytest.raises(TensorError, match=r"constant 1 'p'.*3 elements.*2 values"):
        _graph().addConstants(INT, [[1], [3]], [[1], [1, 2]], ["q", "p"])


def test_tile_out_of_range_names_constant_and_tile():
    g = _graph()
    n = g.getTarget().getNumTiles()
    with pytest.raises(GraphError, match=rf"constant 1 'w'.*tile {n} is out of range"):
        g.addConstants(INT, [[1], [1]], [[1], [2]], ["v", "w"], [0, n])
    assert g.getVariables() == []  # nothing made


def test_non_type_and_list_length_errors():
    g = _graph()
    with pytest.raises(TypeMismatchError, match=r"constant 0 'k'.*not a poplar_api Type"):
        g.addConstants([np.float32], [[1]], [[1.0]], ["k"])
    with pytest.raises(TensorError, match=r"2 shapes but 1 value lists"):
        g.addConstants(INT, [[1], [1]], [[1]])
    with pytest.raises(GraphError, match=r"2 shapes but 1 tiles"):
        g.addConstants(INT, [[1], [1]], [[1], [2]], "", [0])


def test_concat_of_constants_is_the_concat_of_their_tensors():
    g = _graph()
    made = g.addConstants(
        [UNSIGNED_SHORT, INT, UNSIGNED_SHORT, UNSIGNED_SHORT, INT],
        [[2], [1], [3], [0], [2]],
        [[1, 2], [7], [3, 4, 5], [], [8, 9]],
        ["wl0", "p0", "wl1", "wl2", "p1"],
        [0, 0, 1, 1, 2],
    )
    assert len(made) == 5 and made[1:3] == [made[1], made[2]]
    for idx in ([0, 2, 3], [2, 0], [1, 4], [2, 3], [0]):
        joined = made.concat(idx)
        expected = concat([made[i] for i in idx]) if len(idx) > 1 else made[idx[0]]
        assert joined.name == expected.name
        assert joined.shape() == expected.shape()
        assert np.array_equal(joined.flat_index(), expected.flat_index())
    assert made.numElements([0, 2, 3]).tolist() == [2, 3, 0]


def test_concat_of_constants_of_two_types_is_refused_as_concat_refuses():
    made = _graph().addConstants([UNSIGNED_SHORT, INT], [[1], [1]], [[1], [2]], ["a", "b"])
    with pytest.raises(TypeMismatchError, match="element type"):
        made.concat([0, 1])
    with pytest.raises(TensorError, match="at least one"):
        made.concat([])


@pytest.mark.parametrize("shapes", [[[2], [0], [3], [1]], [[1, 2], [0, 2], [2, 2], [1, 2]]])
def test_concat_of_constants_of_one_type_is_the_concat_of_their_tensors(shapes):
    # one element type: 1-D constants are joined without a look at each (their rows
    # are their sizes), 2-D ones with it; either way as concat of their tensors
    g = _graph()
    values = [np.arange(int(np.prod(s)), dtype=np.int64) + 10 * i for i, s in enumerate(shapes)]
    made = g.addConstants(UNSIGNED_SHORT, shapes, values, ["a", "b", "c", "d"], [0, 1, 1, 2])
    for idx in ([0, 1, 2, 3], [3, 0], [2, 1, 0], [1, 1]):
        joined = made.concat(idx)
        expected = concat([made[i] for i in idx])
        assert joined.name == expected.name
        assert joined.shape() == expected.shape()
        assert np.array_equal(joined.flat_index(), expected.flat_index())


def test_variable_tensors_are_the_written_variables_in_the_range() -> None:
    """``variable_tensors`` (PopART's transient activations) gives, in id order, a whole
    tensor of every non-constant variable with elements among the ids asked for, as the
    graph's variables list them: constants and empty variables left out."""
    from poplar_api.graph import variable_count, variable_tensors

    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    graph.addVariable(FLOAT, [3], "a")
    graph.addConstants(FLOAT, [[1], [2], [1]], [[1.0], [2.0, 3.0], [4.0]], "c")
    graph.addVariable(FLOAT, [0], "empty")
    graph.addConstant(FLOAT, [2], 5.0, "k")
    graph.addVariable(FLOAT, [2, 4], "b")
    graph.addVariable(HALF, [5], "h")
    n = variable_count(graph)
    every = graph.getVariables()
    for lo, hi in ((0, n), (1, n), (0, 3), (2, 2), (n - 1, n + 5), (-3, n)):
        want = [v for v in every[lo:hi] if not v.constant and v.size > 0]
        got = variable_tensors(graph, lo, hi)
        assert [t.name for t in got] == [v.name for v in want], (lo, hi)
        for t, v in zip(got, want, strict=True):
            assert t.shape() == list(v.shape) and t.elementType() == v.type
            assert np.array_equal(t.flat_index(), np.arange(v.base, v.base + v.size))
