"""Host memory of large graphs: compact id tables that read back as the ids they hold.

A real model's convolutions connect hundreds of millions of element ids through
VectorList fields. The graph keeps a bulk-added VectorList block's ids as int32 when
its id space fits (half the bytes of int64), compute sets share a single such block
instead of copying it, and a session's variable tensors are consecutive views made
without an index array. Each must read back exactly what was connected.
"""

from __future__ import annotations

import numpy as np
from codelets_common import Gather

from poplar_api import FLOAT, ComputeSet, Graph, IPUModel, Tensor
from poplar_api.graph import Segments, variable_count, variable_tensors
from poplar_api.lowering.computeset import build_table


def _graph() -> Graph:
    g = Graph(IPUModel("ipu2").createDevice().getTarget())
    g.addCodelets([Gather])
    return g


def _scattered(rows: int, cols: int, other: int) -> tuple[Graph, ComputeSet, Tensor, Tensor]:
    """A graph, a compute set, the transpose of a ``rows x cols`` variable flattened
    (ids 0, cols, 2 cols, ...: no two consecutive) and another variable of ``other``
    elements, each mapped to one tile."""
    g = _graph()
    y = g.addVariable(FLOAT, [rows, cols], "y")
    z = g.addVariable(FLOAT, [other], "z")
    g.setTileMapping(y, 0)
    g.setTileMapping(z, 1)
    return g, g.addComputeSet("cs"), y.transpose().flatten(), z


def test_list_block_ids_are_int32_and_read_back_as_the_int64_ids_connected() -> None:
    g, cs, scattered, out = _scattered(4, 5, 2)
    sizes, vectors = [3, 2, 15], [2, 1]
    g.addVertices(cs, Gather, [0, 1], {"parts": Segments(scattered, sizes, vectors), "out": out})
    ids = scattered.flat_index()
    want = [[ids[0:3], ids[3:5]], [ids[5:20]]]  # the pieces in order, per vertex
    table = g._state.vertices
    (block,) = table.list_blocks
    # piece begins, piece ends and ids as int32 (vector offsets stay int64)
    assert [a.dtype for a in block.fields["parts"]] == [np.dtype(np.int64)] + [
        np.dtype(np.int32)
    ] * 3
    for k, vid in enumerate(range(block.first, block.first + block.n)):
        got = table.get_field(vid, "parts")
        assert [v.dtype for v in got] == [np.dtype(np.int64)] * len(want[k])
        assert all(not v.flags.writeable for v in got)
        assert [v.tolist() for v in got] == [w.tolist() for w in want[k]]
    # the compute set's table reads the block: every vertex's ids in vertex order
    (group,) = build_table(g._state, g._state.compute_sets[cs.id]).groups
    parts = next(ft for ft in group.fields if ft.spec.name == "parts")
    assert parts.ids.tolist() == ids.tolist()
    assert not parts.ids.flags.writeable
    # a field held as runs expands to int32 ids when they fit
    outs = next(ft for ft in group.fields if ft.spec.name == "out")
    assert outs.ids.dtype == np.int32
    assert outs.ids.tolist() == out.flat_index().tolist()  # one element per vertex


def test_variable_tensors_are_the_variables_ids_without_an_index_array() -> None:
    g = _graph()
    first = variable_count(g)
    a = g.addVariable(FLOAT, [3, 4], "a")
    b = g.addVariable(FLOAT, [5], "b")
    got = variable_tensors(g, first, variable_count(g))
    assert [t.shape() for t in got] == [[3, 4], [5]]
    assert got[0].flat_index().tolist() == a.flat_index().tolist()
    assert got[1].flat_index().tolist() == b.flat_index().tolist()


def test_pieces_that_are_not_runs_are_int32_and_read_back_as_int64() -> None:
    g, cs, scattered, parts = _scattered(4, 3, 4)
    sizes = [5, 7]
    g.addVertices(
        cs,
        Gather,
        [0, 1],
        {"parts": Segments(parts, [2, 2], [1, 1]), "out": Segments(scattered, sizes)},
    )
    ids = scattered.flat_index()
    table = g._state.vertices
    first = len(table) - 2
    assert [table.extra[first + k]["out"].dtype for k in range(2)] == [np.dtype(np.int32)] * 2
    for k, (a, b) in enumerate([(0, 5), (5, 12)]):
        got = table.get_field(first + k, "out")
        assert got.dtype == np.int64 and not got.flags.writeable
        assert got.tolist() == ids[a:b].tolist()
