"""Vertices stored as columns: rows, handles, connections as element ids, pickling."""

from __future__ import annotations

import gc
import itertools
import pickle
from typing import Any

import numpy as np
import pytest
from codelets_common import Gather, ScaleBy

from poplar_api import FLOAT, INT, Graph, IPUModel
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Segments
from poplar_api.tensor import Tensor
from poplar_api.vertices import NO_ESTIMATE, UNMAPPED, VertexTable


@pytest.fixture()
def graph() -> Graph:
    g = Graph(IPUModel("ipu2").createDevice().getTarget())
    g.addCodelets([ScaleBy, Gather])
    return g


def test_rows_hold_type_compute_set_tile_and_estimate(graph: Graph) -> None:
    a, b = graph.addComputeSet("a"), graph.addComputeSet("b")
    x = graph.addVariable(FLOAT, [6], "x")
    v0 = graph.addVertex(a, "ScaleBy", {"in": x.slice(0, 3), "k": x[5], "out": x.slice(3, 5)})
    v1 = graph.addVertex(b, "Gather")
    v2 = graph.addVertex(a, "ScaleBy")
    graph.setTileMapping(v0, 7)
    graph.setTileMapping(v2, 3)
    graph.setPerfEstimate(v2, 99)
    table = graph._state.vertices
    assert len(table) == 3 and [t.name for t in table.types] == ["ScaleBy", "Gather"]
    assert table.column("type_code", [0, 1, 2]).tolist() == [0, 1, 0]
    assert table.column("cs", [0, 1, 2]).tolist() == [a.id, b.id, a.id]
    assert table.column("tile", [2, 0, 1]).tolist() == [3, 7, UNMAPPED]
    assert table.column("estimate", [0, 2]).tolist() == [NO_ESTIMATE, 99]
    inst = table[v0.id]
    assert (inst.vtype.name, inst.cs, inst.tile, inst.perf_estimate) == ("ScaleBy", a.id, 7, None)
    assert table[-1].id == v2.id and table[v2.id].perf_estimate == 99
    assert [i.id for i in table] == [0, 1, 2]
    # the connections are the element ids of the connected views: ranges, as they
    # are consecutive
    assert inst.fields == {"in": range(0, 3), "k": range(5, 6), "out": range(3, 5)}
    assert table[v1.id].fields == {} and table[v1.id].describe() == "vertex 1 (Gather)"
    with pytest.raises(IndexError, match="vertex 3 does not exist"):
        table[3]


def test_columns_grow_after_being_read(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    table = graph._state.vertices
    for tile in range(40):
        graph.setTileMapping(graph.addVertex(cs, "Gather"), tile)
        assert table.column("tile", np.arange(tile + 1)).tolist() == list(range(tile + 1))


def test_connected_vertices_keep_no_object_for_the_cycle_collector(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    x = graph.addVariable(FLOAT, [2000, 4], "x")
    add = graph.addVertex
    add(cs, "ScaleBy", {"in": x[0], "k": x[0][0], "out": x[0]})  # first of its type
    gc.collect()
    before = len(gc.get_objects())
    for r in range(1, 2000):
        row = x[r]
        add(cs, "ScaleBy", {"in": row.slice(0, 3), "k": row[3], "out": row.slice(0, 3)})
    del row
    gc.collect()
    grown = len(gc.get_objects()) - before
    # a vertex with a Tensor object per connection kept 4 tracked objects
    assert grown < 100, f"{grown} tracked objects for 1,999 vertices"
    # every connection is a run in the columns of the type: no per-vertex dict
    assert graph._state.vertices.extra == {}


def test_consecutive_ids_are_kept_as_ranges_others_as_arrays(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    m = graph.addVariable(FLOAT, [5, 6], "m")
    m.flat_index()  # the ids of the views below, by numpy, for comparison
    ids = np.arange(30).reshape(5, 6) + m.flat_index()[0]
    cases = {
        "row": (m[3], ids[3]),
        "last row": (m[-1], ids[-1]),
        "rows": (m.slice(1, 3), ids[1:3]),
        "slice of a row": (m[2].slice(1, 5), ids[2, 1:5]),
        "element": (m[4][5], ids[4, 5]),
        "negative element": (m[-2][-1], ids[-2, -1]),
        "empty slice": (m[1].slice(3, 3), ids[1, 3:3]),
        "column": (m[:, 2], ids[:, 2]),
        "transposed": (m.transpose(), ids.T),
        "strided": (m[0][::2], ids[0, ::2]),
        "reversed rows": (m.reverse(0)[1], ids[::-1][1]),
        "flattened": (m.flatten(), ids.reshape(-1)),
        "reshaped rows": (m.slice(1, 3).reshape([3, 4]), ids[1:3].reshape(3, 4)),
        "expanded element": (m[1][2].expand([0]), ids[1, 2:3]),
        "flattened columns": (m[:, 1:3].flatten(), ids[:, 1:3].reshape(-1)),
    }
    for what, (view, want) in cases.items():
        v = graph.addVertex(cs, "ScaleBy", {"in": view})
        got = graph._state.vertices[v.id].fields["in"]
        assert np.asarray(got).reshape(-1).tolist() == want.reshape(-1).tolist(), what
        if what in ("column", "transposed", "strided", "flattened columns"):  # never a range
            assert type(got) is not range, what
        elif what != "reversed rows":  # known consecutive (a reversed view is not tracked)
            assert type(got) is range, what


def test_tensor_of_a_field_is_a_view_of_the_connected_elements(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    x = graph.addVariable(FLOAT, [3, 4], "x")
    v = graph.addVertex(cs, "ScaleBy", {"in": x[:, 1], "k": x[2][3]})
    g = graph.addVertex(cs, "Gather")
    graph.setFieldSize(g["parts"], 3)
    graph.connect(g["parts"][1], x[0])
    table = graph._state.vertices
    t = table[v.id].tensor("in", graph._state)
    assert isinstance(t, Tensor) and t.elementType() == FLOAT
    assert t.flat_index().tolist() == x[:, 1].flat_index().tolist() == [1, 5, 9]
    assert table[v.id].tensor("out", graph._state) is None
    parts = table[g.id].tensor("parts", graph._state)
    assert parts[0] is None and parts[2] is None
    assert parts[1].flat_index().tolist() == [0, 1, 2, 3]
    assert table[g.id].list_sizes == {"parts": 3}


def test_table_pickles_and_keeps_its_type_codes(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    x = graph.addVariable(FLOAT, [4], "x")
    v = graph.addVertex(cs, "ScaleBy", {"in": x, "k": x[0], "out": x})
    graph.setTileMapping(v, 2)
    copy: VertexTable = pickle.loads(pickle.dumps(graph._state.vertices))
    assert len(copy) == 1 and copy[0].tile == 2 and copy[0].fields["in"] == range(4)
    scale = copy.types[0]
    assert copy.append(scale, cs.id) == 1 and copy.column("type_code", [0, 1]).tolist() == [0, 0]


def test_estimate_out_of_range_is_refused(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    v = graph.addVertex(cs, "Gather")
    with pytest.raises(GraphError, match=r"vertex 0 \(Gather\): 4611686018427387904 must be"):
        graph.setPerfEstimate(v, 2**62)
    graph.setPerfEstimate(v, 2**62 - 1)
    assert graph._state.vertices[v.id].perf_estimate == 2**62 - 1


def test_field_tables_hold_runs_or_int32_ids(graph: Graph) -> None:
    from poplar_api.lowering.computeset import build_table

    cs = graph.addComputeSet("cs")
    m = graph.addVariable(FLOAT, [4, 3], "m")
    for r in range(4):
        graph.addVertex(cs, "ScaleBy", {"in": m[r], "k": m[r][0], "out": m[:, r % 3]})
    g = graph.addVertex(cs, "Gather", {"parts": [m[1], m[:, 0]], "out": m[0]})
    table = build_table(graph._state, cs)
    scale, gather = table.groups
    assert [ft.spec.name for ft in scale.fields] == ["in", "k", "out"]
    ins, ks, outs = scale.fields
    # rows: runs, and the ids only when asked for
    assert ins.runs is not None and ins.touched() is ins.runs
    assert ins.runs[0].tolist() == [0, 3, 6, 9] and ins.runs[1].tolist() == [3, 6, 9, 12]
    assert ins.ids.tolist() == list(range(12)) and ks.ids.tolist() == [0, 3, 6, 9]
    # columns: int32 ids (the id space is small), column after column
    assert outs.runs is None and outs.ids.dtype == np.int32
    assert outs.ids.tolist() == [0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, 0, 3, 6, 9]
    parts, out = gather.fields
    assert out.runs is not None and out.ids.tolist() == [0, 1, 2]
    assert parts.ids.dtype == np.int32 and parts.ids.tolist() == [3, 4, 5, 0, 3, 6, 9]
    assert parts.offsets.tolist() == [0, 2] and parts.inner_offsets.tolist() == [0, 3, 7]
    assert gather.positions.tolist() == [g.id]


def test_estimators_see_the_sizes_of_ranges_and_arrays(graph: Graph) -> None:
    from poplar_api.lowering.computeset import connection_sizes
    from poplar_api.vertices import id_array, id_count

    assert id_count(range(7, 107)) == 100 and id_count(np.zeros((3, 4), np.int64)) == 12
    assert id_array(range(3, 6)).tolist() == [3, 4, 5]
    assert id_array(range(9, 2, -3)).tolist() == list(range(9, 2, -3)) == [9, 6, 3]
    assert id_array(np.array([[4, 2], [9, 1]])).tolist() == [4, 2, 9, 1]
    cs = graph.addComputeSet("cs")
    m = graph.addVariable(FLOAT, [3, 5], "m")
    v = graph.addVertex(cs, "ScaleBy", {"in": m[1], "k": m[0][0], "out": m[:, 2]})
    g = graph.addVertex(cs, "Gather", {"parts": [m[2], m[:, 1]], "out": m[0]})
    table = graph._state.vertices
    sizes = connection_sizes(table[v.id].vtype, table[v.id].fields)
    assert sizes == {"in": 5, "k": 1, "out": 3}
    assert connection_sizes(table[g.id].vtype, table[g.id].fields) == {"parts": [5, 3], "out": 5}


def test_a_field_moves_between_run_columns_and_id_arrays(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    m = graph.addVariable(FLOAT, [4, 5], "m")
    table = graph._state.vertices
    v = graph.addVertex(cs, "ScaleBy", {"in": m[1], "k": m[0][0]})
    fields = table[v.id].fields
    assert dict(fields) == {"in": range(5, 10), "k": range(0, 1)} and len(fields) == 2
    assert "out" not in fields and fields.get("out") is None and table.extra == {}
    graph.connect(v["in"], m[:, 3])  # strided: an id array beside the columns
    assert type(fields["in"]) is np.ndarray and fields["in"].tolist() == [3, 8, 13, 18]
    assert list(table.extra) == [v.id]
    graph.connect(v["in"], m[2])  # a run again: the id array is dropped
    assert fields["in"] == range(10, 15) and table.extra == {}
    graph.connect(v["out"], m[3].slice(0, 0))  # an empty run is connected, not absent
    assert fields["out"] == range(15, 15) and "out" in fields
    del fields["out"]
    assert "out" not in fields and list(fields) == ["in", "k"]
    with pytest.raises(KeyError):
        fields["out"]
    # a Gather's VectorList is kept beside the columns; its own Vector field in them
    g = graph.addVertex(cs, "Gather", {"parts": [m[0], m[:, 1]], "out": m[1]})
    assert table[g.id].fields["out"] == range(5, 10)
    assert [a.tolist() for a in table[g.id].fields["parts"]] == [
        list(range(5)),
        [1, 6, 11, 16],
    ]
    # edges: Scale in, k (2) + Gather out and two vectors (3)
    assert table.edge_count() == 5


def test_failed_add_vertex_leaves_the_columns_as_they_were(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    m = graph.addVariable(FLOAT, [4, 5], "m")
    table = graph._state.vertices
    a = graph.addVertex(cs, "ScaleBy", {"in": m[0], "k": m[1][0], "out": m[0]})
    before = (bytes(table.type_runs[0].runs), len(table), dict(table.extra))
    with pytest.raises(GraphError, match="needs exactly 1 element"):
        # "in" and "out" are stored before "k" is found wrong
        graph.addVertex(cs, "ScaleBy", {"in": m[2], "out": m[:, 0], "k": m[3]})
    assert (bytes(table.type_runs[0].runs), len(table), dict(table.extra)) == before
    b = graph.addVertex(cs, "ScaleBy", {"in": m[3]})
    assert table.column("row", [a.id, b.id]).tolist() == [0, 1]
    assert dict(table[b.id].fields) == {"in": range(15, 20)}


def test_a_field_mixing_runs_and_id_arrays_runs_right(graph: Graph) -> None:
    from poplar_api import Engine
    from poplar_api import program as prog

    cs = graph.addComputeSet("cs")
    x = graph.addVariable(FLOAT, [4, 4], "x")
    k = graph.addVariable(FLOAT, [1], "k")
    y = graph.addVariable(FLOAT, [4, 4], "y")
    graph.setTileMapping(x, 0)
    graph.setTileMapping(k, 0)
    graph.setTileMapping(y, 1)
    views = [x[0], x[:, 1], x[2], x.transpose()[3]]  # runs and strided views by turns
    for i, view in enumerate(views):
        v = graph.addVertex(cs, "ScaleBy", {"in": view, "k": k[0], "out": y[i]})
        graph.setTileMapping(v, 1)
        graph.setPerfEstimate(v, 10)
    values = np.arange(16, dtype=np.float32).reshape(4, 4)
    graph.setInitialValue(x, values)
    graph.setInitialValue(k, np.array([3.0], np.float32))
    graph.createHostRead("y", y)
    engine = Engine(graph, prog.Execute(cs))
    engine.load(IPUModel("ipu2").createDevice())
    engine.run(0)
    got = np.zeros((4, 4), np.float32)
    engine.readTensor("y", got)
    want = 3 * np.stack([values[0], values[:, 1], values[2], values.T[3]])
    np.testing.assert_array_equal(got, want)


def test_fields_of_a_negative_vertex_id_are_the_last_vertexs(graph: Graph) -> None:
    cs = graph.addComputeSet("cs")
    x = graph.addVariable(FLOAT, [4, 4], "x")
    graph.addVertex(cs, "ScaleBy", {"in": x[0]})
    graph.addVertex(cs, "ScaleBy", {"in": x.transpose()[1], "k": x[2][0]})
    table = graph._state.vertices
    assert np.asarray(table.fields[-1]["in"]).tolist() == [1, 5, 9, 13]
    assert sorted(table.fields[-1]) == ["in", "k"]
    with pytest.raises(IndexError, match="vertex 2 does not exist"):
        table.fields[2]


def _lists_graph(bulk: bool) -> tuple[Graph, Any, list, Tensor]:
    """A Gather vertex in compute set "first", then five in "cs" whose VectorLists are
    pieces of a transposed variable: added in bulk with Segments (two calls) or one
    vertex at a time."""
    sizes, vectors = [2, 1, 3, 2, 2], [2, 0, 1, 2]
    g = Graph(IPUModel("ipu2").createDevice().getTarget())
    g.addCodelets([Gather])
    first, cs = g.addComputeSet("first"), g.addComputeSet("cs")
    x = g.addVariable(FLOAT, [2, 5], "x")
    out = g.addVariable(FLOAT, [6], "out")
    g.setTileMapping(x, 0)
    g.setTileMapping(out, 1)
    src = x.transpose().flatten()  # ids 0, 5, 1, 6, ...: not consecutive
    handles = [g.addVertex(first, Gather, {"parts": [x[0]], "out": out.slice(0, 1)})]
    if bulk:
        parts = Segments(src, sizes, vectors)
        handles += list(
            g.addVertices(
                cs,
                Gather,
                [1, 2, 3, 4],
                {"parts": parts, "out": Segments(out.slice(1, 5), [1] * 4)},
            )
        )
        handles += list(
            g.addVertices(cs, Gather, [5], {"parts": Segments(x[1], [5], [1]), "out": out[5:]})
        )
    else:
        bounds = np.concatenate(([0], np.cumsum(sizes))).tolist()
        pieces = [src.slice(a, b) for a, b in itertools.pairwise(bounds)]
        at = 0
        for i, count in enumerate(vectors):
            v = g.addVertex(
                cs, Gather, {"parts": pieces[at : at + count], "out": out[i + 1 : i + 2]}
            )
            g.setTileMapping(v, i + 1)
            handles.append(v)
            at += count
        v = g.addVertex(cs, Gather, {"parts": [x[1]], "out": out[5:]})
        g.setTileMapping(v, 5)
        handles.append(v)
    g.setTileMapping(handles[0], 0)
    return g, cs, handles, x


def _set_one_at_a_time(g: Graph, v: Any, x: Tensor) -> None:
    """Set vertex ``v``'s list again to two pieces of ``x``, one vector at a time."""
    g.setFieldSize(v["parts"], 2)
    g.connect(v["parts"][0], x[1].slice(0, 1))
    g.connect(v["parts"][1], x[0].slice(1, 3))


def _compare_tables(graphs: list[Graph]) -> None:
    """build_table of each compute set is the same for every graph of ``graphs``."""
    from poplar_api.lowering.computeset import build_table

    for k in range(len(graphs[0]._state.compute_sets)):
        a, b = (build_table(g._state, g._state.compute_sets[k]) for g in graphs)
        assert not a.unconnected.any() and not b.unconnected.any()
        for ga, gb in zip(a.groups, b.groups, strict=True):
            for fa, fb in zip(ga.fields, gb.fields, strict=True):
                assert fa.ids.tolist() == fb.ids.tolist()
                assert fa.bounds.tolist() == fb.bounds.tolist()
                assert fa.offsets.tolist() == fb.offsets.tolist()


def _read_fields(table: VertexTable) -> list[dict]:
    return [
        {
            k: [np.asarray(a).tolist() for a in v] if isinstance(v, list) else list(v)
            for k, v in f.items()
        }
        for f in table.fields
    ]


def test_bulk_vector_lists_read_back_like_one_at_a_time(tmp_path) -> None:
    from poplar_api import program as prog
    from poplar_api.executable import Executable, compileGraph

    built = {bulk: _lists_graph(bulk) for bulk in (True, False)}
    (bulk_g, cs, handles, x), (one_g, *_) = built[True], built[False]
    bulk_t, one_t = bulk_g._state.vertices, one_g._state.vertices
    _compare_tables([bulk_g, one_g])  # every list in blocks, read with numpy
    assert _read_fields(bulk_t)[3]["parts"] == [[6, 2, 7]]
    for g, _, vs, var in built.values():
        _set_one_at_a_time(g, vs[3], var)
    _compare_tables([bulk_g, one_g])  # vertex 3's list moved to the per-vertex store
    fields = _read_fields(bulk_t)
    assert fields == _read_fields(one_t)
    # vertex 1: pieces 0 and 1 of x's columns (ids 0 5 | 1); vertex 2 none; vertex 4
    # the last two pieces; vertex 3 was set again one vector at a time
    assert fields[1]["parts"] == [[0, 5], [1]]
    assert fields[2]["parts"] == [] and fields[3]["parts"] == [[5], [1, 2]]
    assert fields[4]["parts"] == [[3, 8], [4, 9]] and fields[5]["parts"] == [[5, 6, 7, 8, 9]]
    assert [bulk_t[v].list_sizes for v in range(6)] == [{"parts": n} for n in (1, 2, 0, 2, 2, 1)]
    assert bulk_t.edge_count() == one_t.edge_count() == 6 + (1 + 2 + 0 + 2 + 2 + 1)
    for v in handles:
        bulk_g.setPerfEstimate(v, 10)
    program = prog.Execute(cs)
    compileGraph(bulk_g, program).serialize(tmp_path / "lists.ipuexe")
    loaded = Executable.deserialize(tmp_path / "lists.ipuexe")._state.vertices
    assert _read_fields(loaded) == fields and loaded.edge_count() == bulk_t.edge_count()
    copied = pickle.loads(pickle.dumps(bulk_t))
    assert _read_fields(copied) == fields and copied.edge_count() == bulk_t.edge_count()
    # a bulk add failing at its last, per-vertex connection leaves no block behind
    y = bulk_g.addVariable(INT, [1], "y")
    with pytest.raises(TypeMismatchError, match=r"field 'out'.*element type int"):
        parts = Segments(x[0], [2, 3], [1, 1])
        bulk_g.addVertices(cs, Gather, [1, 2], {"parts": parts, "out": [y, y]})
    assert len(bulk_t) == 6 and len(bulk_t.list_blocks) == 2 and _read_fields(bulk_t) == fields
