"""``Graph.addPackedConstants``: 1-D constants whose values are segments of one array
make the graph ``addConstants`` makes of those segments (variables, element ids,
names, tiles and initial values), and bad input fails naming what is wrong."""

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, INT, UNSIGNED_INT, UNSIGNED_SHORT, Engine, Graph, IPUModel
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.program import Sequence

# (type, start, size, name, tile) over POOL: segments shared, overlapping and out of
# order, an empty one, types of every element size interleaved, float values cast
POOL = np.array([3.0, 65535.0, 7.0, 4000000000.0, -1.5, 2.25, 9.0, 0.0, -3.0, 11.0])
SPECS = [
    (UNSIGNED_SHORT, 0, 3, "wl", 0),
    (UNSIGNED_INT, 2, 2, "params", 5),
    (FLOAT, 4, 3, "scale", 3),
    (UNSIGNED_SHORT, 0, 3, "wl", 3),
    (INT, 8, 2, "", 1),
    (HALF, 4, 2, "h", 2),
    (UNSIGNED_SHORT, 9, 0, "empty", 4),
    (INT, 5, 1, "one", 4),
]


def _graph() -> Graph:
    g = Graph(IPUModel("tiny").createDevice().getTarget())
    v = g.addVariable(FLOAT, [5], "x")  # ids do not start at zero
    g.setTileMapping(v, 1)
    return g


def _reads(g: Graph, made) -> list[np.ndarray]:
    """The constants' values as the engine holds them once loaded."""
    for i, c in enumerate(made):
        if c.numElements():
            g.createHostRead(f"r{i}", c)
    eng = Engine(g, Sequence())
    eng.load(IPUModel("tiny").createDevice())
    out = []
    for i, c in enumerate(made):
        got = np.zeros(c.numElements(), c.elementType().numpy)
        if c.numElements():
            eng.readTensor(f"r{i}", got)
        out.append(got)
    return out


def test_packed_constants_are_the_constants_of_their_segments():
    types, starts, sizes, names, tiles = zip(*SPECS, strict=True)
    g_list, g_packed = _graph(), _graph()
    segments = [POOL[a : a + n] for a, n in zip(starts, sizes, strict=True)]
    listed = g_list.addConstants(
        list(types), [[n] for n in sizes], segments, list(names), list(tiles)
    )
    packed = g_packed.addPackedConstants(
        list(types), np.array(sizes), POOL, list(names), np.array(tiles), np.array(starts)
    )
    assert g_packed.getVariables() == g_list.getVariables()
    assert [v.name for v in g_packed.getVariables()][1:] == [
        "wl", "params", "scale", "wl", "var5", "h", "empty", "one",
    ]  # fmt: skip
    for p, q, (t, _, n, _, tile) in zip(packed, listed, SPECS, strict=True):
        assert p.shape() == q.shape() == [n] and p.elementType() == t
        np.testing.assert_array_equal(p.flat_index(), q.flat_index())
        assert g_packed.elementTiles(p).tolist() == [tile] * n
    for p, q, (t, a, n, _, _) in zip(
        _reads(g_packed, packed), _reads(g_list, listed), SPECS, strict=True
    ):
        np.testing.assert_array_equal(p, q)
        np.testing.assert_array_equal(p, POOL[a : a + n].astype(t.numpy))
    idx = [0, 3]  # one type: joined as the listed constants are
    np.testing.assert_array_equal(packed.concat(idx).flat_index(), listed.concat(idx).flat_index())


def test_values_one_after_another_without_starts():
    g = _graph()
    made = g.addPackedConstants(INT, np.array([2, 0, 3]), np.arange(5), "k", np.array([0, 1, 2]))
    assert [c.shape() for c in made] == [[2], [0], [3]]
    assert [r.tolist() for r in _reads(g, made)] == [[0, 1], [], [2, 3, 4]]


@pytest.mark.parametrize(
    ("args", "error", "words"),
    [
        ((INT, [2, -1], np.arange(3)), GraphError, "sizes must be"),
        ((INT, [2, 2], np.arange(3)), TensorError, "hold 4 elements but 3 values"),
        ((INT, [2], np.zeros((1, 2))), TensorError, "must be 1-D"),
        ((INT, [2, 2], np.arange(3), "", None, [0, 2]), TensorError, "constant 1: values [2, 4)"),
        ((INT, [2, 2], np.arange(4), "", None, [0]), GraphError, "1 starts for 2 sizes"),
        (([INT, np.int32], [1, 1], np.arange(2)), TypeMismatchError, "constant 1: element"),
        ((INT, [1, 1], np.arange(2), "", [0, 99]), GraphError, "tile 99 is out of range"),
        ((INT, [1, 1], np.arange(2), ["a"]), GraphError, "2 shapes but 1 names"),
    ],
)
def test_bad_input_names_what_is_wrong(args, error, words):
    with pytest.raises(error, match=None) as info:
        _graph().addPackedConstants(*args)
    assert words in str(info.value)
