"""Vector fields given to ``addVertices`` as :class:`RunSegments`.

A library that finds its fields' ids as runs (the convolution's reduction) gives a
Vector field's pieces as runs; the graph must keep exactly what it keeps for the same
ids given as :class:`Segments` of a tensor view: a piece of consecutive ids as its run,
any other piece (several runs, or empty) as an array of its ids in the type the graph
keeps ids in. Compared here field by field, vertex by vertex, with the Segments path.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.codelet import Input, Vector, Vertex
from poplar_api.errors import GraphError
from poplar_api.graph_connections import RunSegments, Segments
from poplar_api.run_ids import RunIds


class VectorProbe(Vertex):
    a = Input(Vector(FLOAT))

    @staticmethod
    def compute(a):  # pragma: no cover - never run here
        return True


#: The pieces, vertex after vertex: one run; two runs; one run split in two runs of
#: the RunIds (they go on into each other); empty; a run ending where the next piece's
#: run begins (consecutive ids across two pieces); that next piece.
PIECES = [
    np.r_[0:50],
    np.r_[200:230, 100:120],
    np.r_[300:310],
    np.r_[0:0],
    np.r_[50:60],
    np.r_[60:64],
]


def _runs(flat: np.ndarray, split_at: int) -> RunIds:
    """``flat`` as runs, one of them cut at position ``split_at`` although its ids go on."""
    starts = np.flatnonzero(np.r_[True, np.diff(flat) != 1])
    starts = np.union1d(starts, [split_at])
    return RunIds(starts, flat[starts], flat.size)


def _fields(kind: str) -> list:
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    graph.addCodelets(VectorProbe)
    var = graph.addVariable(FLOAT, [400], "v")
    graph.mapElements(var, 0)
    flat = np.concatenate(PIECES)
    sizes = np.array([p.size for p in PIECES])
    cs = graph.addComputeSet("cs")
    if kind == "segments":
        value = Segments(var.elements(flat), sizes)
    else:
        split = int(sizes[:2].sum()) + 4  # inside the third piece's run
        value = RunSegments(var, _runs(flat, split), sizes)
    graph.addVertices(cs, VectorProbe, [0] * len(PIECES), {"a": value})
    table = graph._state.vertices
    return [table.get_field(v, "a") for v in range(len(PIECES))]


def test_vector_run_segments_keep_what_segments_keep():
    want, got = _fields("segments"), _fields("runs")
    for w, g, piece in zip(want, got, PIECES, strict=True):
        assert type(g) is type(w)
        np.testing.assert_array_equal(np.asarray(g), piece)
        if isinstance(w, np.ndarray):
            assert g.dtype == w.dtype
    # the pieces of one run are runs, the others ids (what Segments keeps)
    assert [isinstance(g, range) for g in got] == [True, False, True, False, True, True]


def test_vector_run_segments_take_one_piece_per_vertex():
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    graph.addCodelets(VectorProbe)
    var = graph.addVariable(FLOAT, [40], "v")
    graph.mapElements(var, 0)
    cs = graph.addComputeSet("cs")
    runs = RunIds(np.array([0]), np.array([0]), 30)
    with pytest.raises(GraphError, match="one piece for a Vector field"):
        graph.addVertices(
            cs, VectorProbe, [0, 0], {"a": RunSegments(var, runs, [10, 10, 10], [1, 2])}
        )
