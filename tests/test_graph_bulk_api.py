"""The Graph's bulk API against the one-at-a-time calls it stands for, and numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from codelets_common import Gather, ScaleBy, ShiftBy

from poplar_api import FLOAT, HALF, INT, Graph, IPUModel
from poplar_api.codelet import Input, VectorList, Vertex
from poplar_api.errors import GraphError, TensorError, TensorIndexError, TypeMismatchError
from poplar_api.graph import OUTSIDE, Segments, VertexRange
from poplar_api.tensor import concat
from poplar_api.vertices import UNMAPPED


class Pieces(Vertex):
    """A field ``in`` of another kind than Scale's."""

    in_ = Input(VectorList(FLOAT))

    @staticmethod
    def compute(in_):
        return True


def _graph() -> Graph:
    g = Graph(IPUModel("ipu2").createDevice().getTarget())
    g.addCodelets([ScaleBy, ShiftBy, Gather])
    return g


def _tiles_of(g: Graph, t) -> np.ndarray:
    """Root tile of each flat element, read through getTileMapping (the public
    one-at-a-time view of a mapping)."""
    out = np.full(t.numElements(), -1, np.int64)
    for tile, intervals in enumerate(g.getTileMapping(t, throwOnUnmapped=False)):
        for iv in intervals:
            out[iv.begin() : iv.end()] = tile
    return out


def _vertices(g: Graph) -> list[tuple]:
    """Every vertex as (type, compute set, tile, estimate, {field: ids})."""
    out = []
    for v in g._state.vertices:
        fields = {}
        for name, value in v.fields.items():
            if isinstance(value, list):
                fields[name] = [np.asarray(x).reshape(-1).tolist() for x in value]
            else:
                fields[name] = np.asarray(value).reshape(-1).tolist()
        out.append((v.vtype.name, v.cs, v.tile, v.perf_estimate, fields))
    return out


# ------------------------------------------------------------------ ownership
def test_owns_and_check_tensor_across_virtual_graphs() -> None:
    g, other = _graph(), _graph()
    sub = g.createVirtualGraph(4, 8)
    x = sub.addVariable(FLOAT, [3], "x")
    y = other.addVariable(FLOAT, [3], "y")
    assert g.owns(x) and sub.owns(x) and not other.owns(x) and not g.owns("x")
    assert g.checkTensor(x, "f") is x
    with pytest.raises(GraphError, match="tensor 'y' belongs to another graph"):
        g.checkTensor(y, "popops.add: A")


# --------------------------------------------------------------- element tiles
def test_element_tiles_match_get_tile_mapping_and_virtual_offsets() -> None:
    g = _graph()
    x = g.addVariable(FLOAT, [4, 5], "x")
    want = np.arange(20) % 7
    want[3] = -1
    for e, tile in enumerate(want.tolist()):
        if tile >= 0:
            g.setTileMapping(x.flatten()[e], tile)
    np.testing.assert_array_equal(g.elementTiles(x), want)
    np.testing.assert_array_equal(g.elementTiles(x), _tiles_of(g, x))
    sub = g.createVirtualGraph(2, 5)  # root tiles 2, 3, 4 are its 0, 1, 2
    local = np.where(want < 0, UNMAPPED, np.where((want >= 2) & (want < 5), want - 2, OUTSIDE))
    np.testing.assert_array_equal(sub.elementTiles(x), local)
    listed = g.createVirtualGraph([6, 0, 3])
    lookup = {6: 0, 0: 1, 3: 2}
    expect = [UNMAPPED if w < 0 else lookup.get(w, OUTSIDE) for w in want.tolist()]
    np.testing.assert_array_equal(listed.elementTiles(x), expect)
    np.testing.assert_array_equal(listed.rootTiles(), [6, 0, 3])
    assert sub.getTileRange() == (2, 5)
    with pytest.raises(GraphError, match="not a contiguous tile range"):
        listed.getTileRange()


# ---------------------------------------------------------------- mapElements
def test_map_elements_equals_per_element_set_tile_mapping() -> None:
    rng = np.random.default_rng(1)
    a, b = _graph(), _graph()
    sa, sb = a.createVirtualGraph(10, 30), b.createVirtualGraph(10, 30)
    xa, xb = sa.addVariable(FLOAT, [6, 4], "x"), sb.addVariable(FLOAT, [6, 4], "x")
    tiles = rng.integers(0, 20, size=24)
    view_a, view_b = xa.transpose(), xb.transpose()  # a view of scattered elements
    sa.mapElements(view_a, tiles.reshape(4, 6))
    for e, tile in enumerate(tiles.tolist()):
        sb.setTileMapping(view_b.flatten()[e], tile)
    np.testing.assert_array_equal(a.elementTiles(xa), b.elementTiles(xb))
    np.testing.assert_array_equal(sa.elementTiles(view_a), tiles)
    sa.mapElements(xa, 3)
    np.testing.assert_array_equal(a.elementTiles(xa), np.full(24, 13))


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int32, np.uint64])
def test_map_elements_takes_tiles_of_any_integer_width(dtype) -> None:
    """Tiles of any integer type map as int64 ones do (a variable's consecutive ids,
    tiles in a transposed order), and one out of range is named whatever its width."""
    rng = np.random.default_rng(2)
    g = _graph()
    x, y = g.addVariable(FLOAT, [6, 4], "x"), g.addVariable(FLOAT, [6, 4], "y")
    tiles = rng.integers(0, 100, size=(4, 6))
    g.mapElements(x, tiles.T)
    g.mapElements(y, tiles.astype(dtype).T)
    np.testing.assert_array_equal(g.elementTiles(y), g.elementTiles(x))
    np.testing.assert_array_equal(g.elementTiles(y), tiles.T.reshape(-1))
    bad = np.zeros(24, dtype)
    bad[5] = -3 if np.issubdtype(dtype, np.signedinteger) else 60000
    with pytest.raises(GraphError, match=rf"element 5 has tile {bad[5]}, out of range"):
        g.mapElements(y, bad)


def test_map_elements_errors_name_element_tile_and_tensor() -> None:
    g, other = _graph(), _graph()
    sub = g.createVirtualGraph(0, 8)
    x = sub.addVariable(FLOAT, [5], "x")
    with pytest.raises(GraphError, match=r"element 2 has tile 8, out of range \[0, 8\)"):
        sub.mapElements(x, [0, 1, 8, 9, 1])
    with pytest.raises(GraphError, match=r"tensor 'x'.*3 tiles given for 5 elements"):
        sub.mapElements(x, [0, 1, 2])
    with pytest.raises(GraphError, match="expected integers"):
        sub.mapElements(x, [0.5] * 5)
    with pytest.raises(GraphError, match="belongs to another graph"):
        other.mapElements(x, 0)
    assert (g.elementTiles(x) == UNMAPPED).all()  # a refused call maps nothing


# ------------------------------------------------------------------- vertices
def _one_at_a_time(g: Graph, cs, n: int, tiles, conns, est=None) -> None:
    for i in range(n):
        v = g.addVertex(cs, "ScaleBy", {k: c[i] for k, c in conns.items()})
        g.setTileMapping(v, int(tiles[i]))
        if est is not None:
            g.setPerfEstimate(v, int(est[i]))


@pytest.mark.parametrize("layout", ["consecutive", "transposed", "mixed"])
def test_add_vertices_equals_add_vertex_calls(layout: str) -> None:
    n, width = 5, 3
    rng = np.random.default_rng(7)
    tiles = rng.integers(0, 16, size=n)
    est = rng.integers(0, 1000, size=n)
    built = []
    for bulk in (True, False):
        g = _graph()
        sub = g.createVirtualGraph(100, 116)
        cs0 = sub.addComputeSet("first")
        sub.addVertex(cs0, "Gather")  # vertices before and after the bulk ones
        cs = sub.addComputeSet("bulk")
        x = sub.addVariable(FLOAT, [n, width], "x")
        y = sub.addVariable(FLOAT, [width, n], "y")
        k = sub.addVariable(FLOAT, [n], "k")
        if layout == "consecutive":
            src, dst = x, y.flatten().reshape([n, width])
        elif layout == "transposed":
            src, dst = y.transpose(), x
        else:  # rows 0, 2, 4 are runs of ids, rows 1, 3 are not
            rows = [x[i] if i % 2 == 0 else y.transpose()[i] for i in range(n)]
            src, dst = concat([r.expand([0]) for r in rows]), x
        conns = {"in": src, "out": dst, "k": k}
        if bulk:
            vs = sub.addVertices(cs, "ScaleBy", tiles, conns, perfEstimates=est)
            assert isinstance(vs, VertexRange) and len(vs) == n and vs.ids == range(1, n + 1)
            assert vs[2].id == 3 and repr(vs[-1]) == "vertex 5 (ScaleBy)"
        else:
            _one_at_a_time(sub, cs, n, tiles, conns, est)
        sub.addVertex(cs0, "Gather")
        built.append((_vertices(g), [list(c.vertices) for c in g._state.compute_sets]))
    assert built[0] == built[1]


def test_add_vertices_vector_list_and_per_vertex_values() -> None:
    built = []
    for bulk in (True, False):
        g = _graph()
        cs = g.addComputeSet("cs")
        p = g.addVariable(FLOAT, [3, 4], "p")
        out = g.addVariable(FLOAT, [3, 1], "out")
        lists = [[p[0]], [p[1].slice(0, 2), p[2]], [p[2].reverse(0)]]
        if bulk:
            g.addVertices(cs, Gather, [1, 2, 3], {"parts": lists, "out": out})
            g.addVertices(cs, Gather, [4, 5, 6], {"parts": p, "out": out})
        else:
            for i in range(3):
                v = g.addVertex(cs, Gather, {"parts": lists[i], "out": out[i]})
                g.setTileMapping(v, i + 1)
            for i in range(3):
                v = g.addVertex(cs, Gather, {"parts": p[i], "out": out[i]})
                g.setTileMapping(v, i + 4)
        built.append(_vertices(g))
    assert built[0] == built[1]


def test_add_vertices_segments_equal_add_vertex_calls() -> None:
    sizes = [3, 0, 2, 4, 1]
    vectors = [2, 0, 3]  # VectorList vertices: 2, 0 and 3 of the pieces
    built = []
    for bulk in (True, False):
        g = _graph()
        cs = g.addComputeSet("cs")
        x = g.addVariable(FLOAT, [10], "x")
        y = g.addVariable(FLOAT, [2, 5], "y")
        k = g.addVariable(FLOAT, [5], "k")
        scattered = y.transpose().flatten()  # ids 5, 0, 6, 1, ...: runs of one only
        mixed = concat([x.slice(0, 3), scattered.slice(0, 2), x.slice(3, 8)])
        offsets = np.concatenate(([0], np.cumsum(sizes)))
        if bulk:
            g.addVertices(
                cs,
                "ScaleBy",
                [0, 1, 2, 3, 4],
                {"in": Segments(x, sizes), "out": Segments(mixed, sizes), "k": k},
            )
            g.addVertices(
                cs,
                Gather,
                [5, 6, 7],
                {
                    "parts": Segments(scattered, sizes, vectors),
                    "out": Segments(x.slice(0, 3), [1, 1, 1]),
                },
            )
        else:
            for i, (a, b) in enumerate(itertools.pairwise(offsets.tolist())):
                v = g.addVertex(
                    cs, "ScaleBy", {"in": x.slice(a, b), "out": mixed.slice(a, b), "k": k[i]}
                )
                g.setTileMapping(v, i)
            at = 0
            for i, count in enumerate(vectors):
                parts = [
                    scattered.slice(a, b)
                    for a, b in itertools.pairwise(offsets[at : at + count + 1].tolist())
                ]
                v = g.addVertex(cs, Gather, {"parts": parts, "out": x.slice(i, i + 1)})
                g.setTileMapping(v, 5 + i)
                at += count
        built.append(_vertices(g))
    assert built[0] == built[1]
    g = _graph()
    x = g.addVariable(FLOAT, [4], "x")
    with pytest.raises(GraphError, match="pieces hold 3 elements"):
        Segments(x, [1, 2])
    with pytest.raises(GraphError, match=r"feeds 2 vertices but 3 are added"):
        g.addVertices(g.addComputeSet("c"), "ScaleBy", [0, 0, 0], {"in": Segments(x, [2, 2])})


def test_add_vertices_of_several_types_equal_add_vertex_calls() -> None:
    kinds = ["ScaleBy", "ShiftBy", "ShiftBy", "ScaleBy", "ShiftBy"]
    built = []
    for bulk in (True, False):
        g = _graph()
        cs = g.addComputeSet("cs")
        y = g.addVariable(FLOAT, [3, 5], "y")
        x = g.addVariable(FLOAT, [5, 3], "x")
        k = g.addVariable(FLOAT, [5], "k")
        conns = {"in": y.transpose(), "out": x, "k": k}
        if bulk:
            g.addVertices(cs, kinds, [4, 3, 2, 1, 0], conns)
        else:
            for i, kind in enumerate(kinds):
                v = g.addVertex(cs, kind, {f: c[i] for f, c in conns.items()})
                g.setTileMapping(v, 4 - i)
        table = g._state.vertices
        built.append((_vertices(g), [t.name for t in table.types], list(table.row)))
    assert built[0] == built[1]
    g = _graph()
    cs = g.addComputeSet("cs")
    x = g.addVariable(FLOAT, [2, 3], "x")
    with pytest.raises(GraphError, match=r"field 'in' is .*Vector.* in ScaleBy but .* in Pieces"):
        g.addVertices(cs, ["ScaleBy", Pieces], [0, 1], {"in": x})
    with pytest.raises(GraphError, match="3 vertex types given for 2 tiles"):
        g.addVertices(cs, ["ScaleBy"] * 3, [0, 1], {"out": x})


def test_add_vertices_errors_leave_the_graph_unchanged() -> None:
    g, other = _graph(), _graph()
    sub = g.createVirtualGraph(0, 4)
    cs = sub.addComputeSet("cs")
    x = sub.addVariable(FLOAT, [3, 2], "x")
    k = sub.addVariable(FLOAT, [3], "k")
    foreign = other.addVariable(FLOAT, [3], "f")
    ints = sub.addVariable(INT, [3], "i")
    good = {"in": x, "out": x, "k": k}
    with pytest.raises(GraphError, match="tensor 'x' has shape \\[3, 2\\] but 2 vertices"):
        sub.addVertices(cs, "ScaleBy", [0, 1], good)
    with pytest.raises(GraphError, match=r"vertex 1 has tile 4, out of range \[0, 4\)"):
        sub.addVertices(cs, "ScaleBy", [0, 4, 1], good)
    with pytest.raises(GraphError, match="'f' belongs to another graph"):
        sub.addVertices(cs, "ScaleBy", [0, 1, 2], {**good, "k": foreign})
    with pytest.raises(TypeMismatchError, match="element type"):
        sub.addVertices(cs, "ScaleBy", [0, 1, 2], {**good, "k": ints})
    with pytest.raises(GraphError, match="scalar field"):
        sub.addVertices(cs, "ScaleBy", [0, 1, 2], {**good, "k": x})
    with pytest.raises(GraphError, match="vertex type 'ScaleBy' has no field 'bad'"):
        sub.addVertices(cs, "ScaleBy", [0, 1, 2], {"bad": k})
    with pytest.raises(GraphError, match="2 values given for 3 vertices"):
        sub.addVertices(cs, Gather, [0, 1, 2], {"parts": [[x[0]], [x[1]]]})
    with pytest.raises(GraphError, match=r"perfEstimates\[1\] = -5"):
        sub.addVertices(cs, "ScaleBy", [0, 1, 2], good, perfEstimates=[1, -5, 2])
    with pytest.raises(GraphError, match="not a compute set of this graph"):
        sub.addVertices(other.addComputeSet("o"), "ScaleBy", [0, 1, 2], good)
    assert g.getNumVertices() == 0 and cs.vertices == []


def test_set_vertex_tiles_equals_set_tile_mapping() -> None:
    g = _graph()
    sub = g.createVirtualGraph(20, 30)
    cs = sub.addComputeSet("cs")
    vs = sub.addVertices(cs, "ScaleBy", np.zeros(4, np.int64))
    one = sub.addVertex(cs, "ScaleBy")
    sub.setVertexTiles(vs, [3, 1, 4, 1])
    sub.setVertexTiles([one], 9)
    assert [g._state.vertices[i].tile for i in range(5)] == [23, 21, 24, 21, 29]
    with pytest.raises(GraphError, match=r"vertex 2 has tile 10, out of range \[0, 10\)"):
        sub.setVertexTiles(vs, [0, 1, 10, 2])
    with pytest.raises(GraphError, match="belongs to another graph"):
        _graph().setVertexTiles(vs, 0)


# ------------------------------------------------------------- initial values
def _initial(g: Graph) -> dict[int, float]:
    values: dict[int, float] = {}
    for _type, ids, vals in g._state.initial_parts:
        values.update(zip(np.asarray(ids).tolist(), np.asarray(vals).tolist(), strict=True))
    return values


def test_set_initial_values_equals_set_initial_value_per_element() -> None:
    a, b = _graph(), _graph()
    xa, xb = a.addVariable(FLOAT, [3, 4], "x"), b.addVariable(FLOAT, [3, 4], "x")
    rows = np.arange(4, dtype=np.float32) * 2.5
    a.setInitialValues(xa.transpose(), rows[:, None])  # broadcast over the columns
    for i in range(3):
        for j in range(4):
            b.setInitialValue(xb[i][j], rows[j])
    assert _initial(a) == _initial(b)
    with pytest.raises(TensorError, match="do not broadcast to tensor 'x"):
        a.setInitialValues(xa, [1.0, 2.0])


# -------------------------------------------------------------- Tensor.elements
def test_elements_gathers_flat_positions_like_numpy() -> None:
    g = _graph()
    x = g.addVariable(FLOAT, [4, 6], "x")
    view = x.dimShuffle([1, 0])
    idx = np.array([[5, 0, 23], [7, 7, 1]])
    np.testing.assert_array_equal(x.elements(idx).index, x.index.reshape(-1)[idx])
    np.testing.assert_array_equal(view.elements(idx).index, view.index.reshape(-1)[idx])
    run = x.elements(np.arange(6, 12).reshape(2, 3))
    assert run._start == 6 and run.shape() == [2, 3]  # consecutive: kept as a run
    assert x.elements(range(3, 9))._start == 3
    assert x[1].elements([1, 2, 3])._start == 7
    # consecutive ids from a scattered view are recognised too
    assert view.elements([0, 1, 2, 3]).index.tolist() == [0, 6, 12, 18]
    assert view.dimShuffle([1, 0]).elements([2, 3])._start == 2
    with pytest.raises(TensorIndexError, match=r"indices\[2\] = 24 is out of range"):
        x.elements([0, 1, 24])
    with pytest.raises(TensorIndexError, match="out of range"):
        x.elements([-1])
    with pytest.raises(TypeMismatchError, match="integer positions"):
        x.elements([0.5])


def test_elements_of_many_positions_find_runs_and_range_errors() -> None:
    """Index arrays beyond 64 positions take the one-pass scan: the same runs, the same
    gathered ids and the same first out-of-range position as short ones."""
    g = _graph()
    x = g.addVariable(FLOAT, [40, 50], "x")
    view = x.dimShuffle([1, 0])
    assert x.elements(np.arange(100, 1100))._start == 100
    rng = np.random.default_rng(2)
    idx = rng.integers(0, 2000, (30, 40))
    np.testing.assert_array_equal(view.elements(idx).index, view.index.reshape(-1)[idx])
    assert view.dimShuffle([1, 0]).elements(np.arange(300, 900))._start == 300
    bad = np.arange(500, 600)
    bad[70] = 2000
    with pytest.raises(TensorIndexError, match=r"indices\[70\] = 2000 is out of range"):
        x.elements(bad)
    bad[70] = -3
    with pytest.raises(TensorIndexError, match=r"indices\[70\] = -3 is out of range"):
        x.elements(bad)
    # unsigned positions that would wrap if subtracted in their own type, and
    # positions in the other byte order: the elements numpy's gather gives
    for idx in (np.array([1999, 0], np.uint16), np.array([255, 0], np.uint8),
                np.arange(100, 200, dtype=">i8"), np.array([3, 4, 5], ">u4")):  # fmt: skip
        np.testing.assert_array_equal(x.elements(idx).index, x.index.reshape(-1)[idx])


def test_concat_of_runs_in_order_is_a_run() -> None:
    g = _graph()
    x = g.addVariable(FLOAT, [6, 2], "x")
    joined = concat([x.slice(0, 2), x.slice(2, 3), x.slice(3, 6)])
    assert joined._start == x._start and joined.shape() == [6, 2]
    np.testing.assert_array_equal(joined.index, x.index)
    swapped = concat([x.slice(3, 6), x.slice(0, 3)])  # not in order: ids as numpy joins them
    assert swapped._start < 0
    np.testing.assert_array_equal(swapped.index, np.concatenate([x.index[3:], x.index[:3]]))


def test_library_cache_is_per_top_level_graph() -> None:
    g, other = _graph(), _graph()
    cache = g.libraryCache("poplin.conv")
    cache["plan"] = 1
    assert g.createVirtualGraph(0, 4).libraryCache("poplin.conv") is cache
    assert other.libraryCache("poplin.conv") == {}
    assert g.libraryCache("popops") == {}


def test_add_vertices_of_1d_and_2d_forms_in_one_call_equal_add_vertex_calls() -> None:
    """A field that is a Vector in one type (ScaleBy's ``in``) and a VectorList in the
    other (Pieces'), given as Segments with vectors: a Vector vertex takes one piece,
    a VectorList vertex its vectors."""
    kinds = ["ScaleBy", Pieces, "ScaleBy", Pieces, Pieces]
    vectors = [1, 2, 1, 3, 0]
    sizes = [4, 1, 2, 3, 2, 1, 1]  # pieces, vertex after vertex
    built = []
    for bulk in (True, False):
        g = _graph()
        g.addCodelets([Pieces])
        cs = g.addComputeSet("cs")
        y = g.addVariable(FLOAT, [2, 7], "y")
        src = y.transpose().flatten()  # ids not in runs
        if bulk:
            g.addVertices(cs, kinds, [0, 1, 2, 3, 4], {"in": Segments(src, sizes, vectors)})
        else:
            offsets = np.concatenate(([0], np.cumsum(sizes))).tolist()
            at = 0
            for i, (kind, count) in enumerate(zip(kinds, vectors, strict=True)):
                spans = list(itertools.pairwise(offsets[at : at + count + 1]))
                if kind == "ScaleBy":
                    (a, b), = spans  # fmt: skip
                    conns = {"in": src.slice(a, b)}
                else:
                    conns = {"in": [src.slice(a, b) for a, b in spans]}
                g.setTileMapping(g.addVertex(cs, kind, conns), i)
                at += count
        built.append(_vertices(g))
    assert built[0] == built[1]
    # a Vector vertex connected again later keeps its other fields
    g = _graph()
    g.addCodelets([Pieces])
    cs = g.addComputeSet("cs")
    x = g.addVariable(FLOAT, [6], "x")
    vs = g.addVertices(cs, ["ScaleBy", Pieces], [0, 1], {"in": Segments(x, [2, 2, 2], [1, 2])})
    g.connect(vs[0]["out"], x.slice(4, 6))
    assert list(g._state.vertices.get_field(vs.start, "in")) == [0, 1]
    with pytest.raises(GraphError, match="vertex 0 has a Vector field but is given 2 pieces"):
        g.addVertices(cs, ["ScaleBy", Pieces], [0, 1], {"in": Segments(x, [2, 2, 2], [2, 1])})


@pytest.mark.parametrize(
    "case", ["permutation", "repeats", "sparse", "tiny", "int32", "blocks", "late repeat"]
)
def test_id_order_equals_a_stable_argsort(case: str) -> None:
    from poplar_api.graph_bulk import id_order

    rng = np.random.default_rng(5)
    ids = {
        "permutation": rng.permutation(1000) + 77,
        "repeats": rng.integers(0, 50, 400),
        "sparse": rng.choice(10**7, 300, replace=False),
        "tiny": np.array([4]),
        "int32": (rng.permutation(500) + 3).astype(np.int32),
        # copies of regions laid out copy after copy (a sliceable tensor's view)
        "blocks": np.arange(60).reshape(4, 3, 5).transpose(1, 0, 2).reshape(-1),
        "late repeat": np.append(rng.permutation(300), 299),
    }[case]
    assert id_order(ids).tolist() == np.argsort(ids, kind="stable").tolist()


def test_variables_as_columns_give_the_variables_made() -> None:
    """The graph's variables (held as columns) read back as the variables and constants
    made, by index, slice and iteration, with their constant flags and element sizes."""
    g = _graph()
    a = g.addVariable(FLOAT, [2, 3], "a")
    consts = g.addConstants([HALF, INT], [[4], [1]], [np.zeros(4), np.ones(1)], ["c0", "c1"])
    table = g._state.variables
    assert len(table) == 3 and [v.name for v in table] == ["a", "c0", "c1"]
    v = table[0]
    assert (v.id, v.type, v.size, v.shape, v.constant) == (0, FLOAT, 6, (2, 3), False)
    assert v.base == a._start
    assert table[-1].name == "c1" and [x.id for x in table[1:]] == [1, 2]
    assert table[1].base == consts[0]._start and table[2].type == INT
    np.testing.assert_array_equal(table.constant_flags(), [False, True, True])
    np.testing.assert_array_equal(table.element_sizes(), [4, 2, 4])
    assert g.getVariables()[1].name == "c0"
    # flags are bools whichever way a variable is read; the columns are copies
    assert table[1].constant is True and [x.constant for x in table] == [False, True, True]
    flags, sizes = table.constant_flags(), table.element_sizes()
    assert flags.dtype == bool and sizes.dtype == np.int64
    flags[:], sizes[:] = True, 0
    assert table.constant_flags().tolist() == [False, True, True]
    assert table.element_sizes().tolist() == [4, 2, 4]
    assert table.names(np.array([2, 0, 2])) == ["c1", "a", "c1"]
