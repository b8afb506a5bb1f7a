"""The per-compute-set parts of the compile that cost the same however few vertices a
compute set has: vertex state counted per tile, a compute set's type groups, and the
exchanges around a compute set that moves nothing between tiles.

Each is checked against a value worked out independently (per vertex, from the config's
byte sizes; the order types first appear in), not against the lowering's own output.
"""

from __future__ import annotations

import numpy as np
from codelets_common import ListSums, mapped

from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.executable import HostStreams
from poplar_api.lowering.computeset import plan_reads, plan_writes, vertex_state
from poplar_api.lowering.context import Lowered, Storage
from poplar_api.lowering.emission import Emission
from poplar_api.lowering.exchange import ExchangePlanner, OwnerCache
from poplar_api.lowering.field_tables import _run_offsets, build_table
from poplar_api.vertices import type_groups

NUM_TILES = 8


class AddOne(Vertex):
    """``out = in + 1``: two Vector fields."""

    in_ = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(in_, out):
        for i in range(in_.shape[0]):
            out[i] = in_[i] + 1.0
        return True


def _graph() -> Graph:
    model = IPUModel()
    model.tilesPerIPU = NUM_TILES
    graph = Graph(model.createDevice().getTarget())
    graph.addCodelets(AddOne)
    graph.addCodelets(ListSums)
    return graph


def _mixed(graph: Graph):
    """A compute set of AddOne and ListSums vertices on several tiles, each vertex
    reading and writing elements of its own tile; returns it with each vertex's tile
    and vectors in its VectorList (None for AddOne)."""
    v = graph.addVariable(FLOAT, [NUM_TILES, 16], "v")
    w = graph.addVariable(FLOAT, [NUM_TILES, 16], "w")
    for t in range(NUM_TILES):
        graph.setTileMapping(v[t], t)
        graph.setTileMapping(w[t], t)
    cs = graph.addComputeSet("mixed")
    made = []
    for k, (tile, kind) in enumerate([(3, "l"), (0, "a"), (3, "a"), (5, "l"), (5, "l"), (0, "a")]):
        if kind == "a":
            fields = {"in": v[tile].slice(0, 4), "out": w[tile][k : k + 1]}
            vx = graph.addVertex(cs, "AddOne", fields)
            made.append((tile, None))
        else:
            vectors = 1 + k % 3
            parts = [v[tile].slice(2 * i, 2 * i + 2) for i in range(vectors)]
            fields = {"in": parts, "out": w[tile].slice(k, k + vectors)}
            vx = graph.addVertex(cs, "ListSums", fields)
            made.append((tile, vectors))
        graph.setTileMapping(vx, tile)
        graph.setPerfEstimate(vx, 10)
    return cs, made


def test_vertex_state_counts_each_vertex_s_bytes_on_its_tile():
    graph = _graph()
    cs, made = _mixed(graph)
    state = graph._state
    code = state.target.config.code
    header, pointer = code.vertex_header_bytes, code.field_pointer_bytes
    size, descriptor = code.vector_size_bytes, code.vectorlist_descriptor_bytes
    # every vertex here has two fields, each a Vector or a VectorList (a size word each)
    per_tile = np.zeros(NUM_TILES, np.int64)
    lists = np.zeros(NUM_TILES, np.int64)
    by_type = {"AddOne": 0, "ListSums": 0}
    type_tile = {name: np.zeros(NUM_TILES, np.int64) for name in by_type}
    type_lists = {name: np.zeros(NUM_TILES, np.int64) for name in by_type}
    edges = {name: np.zeros(NUM_TILES, np.int64) for name in by_type}
    for tile, vectors in made:
        name = "AddOne" if vectors is None else "ListSums"
        own = header + 2 * (pointer + size) + descriptor * (vectors or 0)
        per_tile[tile] += own
        lists[tile] += descriptor * (vectors or 0)
        by_type[name] += own
        type_tile[name][tile] += own
        type_lists[name][tile] += descriptor * (vectors or 0)
        edges[name][tile] += 2 * (pointer + size)
    got = vertex_state(build_table(state, cs), code, NUM_TILES)
    np.testing.assert_array_equal(got.per_tile, per_tile)
    np.testing.assert_array_equal(got.descriptors_per_tile, lists)
    assert got.per_tile.dtype == np.int64 and got.descriptors_per_tile.dtype == np.int64
    # types in the order they first appear: ListSums (vertex 0), then AddOne
    assert got.by_type == (("ListSums", by_type["ListSums"]), ("AddOne", by_type["AddOne"]))
    for (name, on_tiles), (name2, on_edges, on_lists) in zip(
        got.by_type_tile, got.parts_by_type_tile, strict=True
    ):
        assert name == name2
        np.testing.assert_array_equal(on_tiles, type_tile[name])
        np.testing.assert_array_equal(on_edges, edges[name])
        np.testing.assert_array_equal(on_lists, type_lists[name])
        assert on_tiles.dtype == on_edges.dtype == on_lists.dtype == np.int64
    # the arrays handed out are distinct (memory placement adds to them by name)
    held = [got.per_tile, got.descriptors_per_tile]
    held += [a for _, a in got.by_type_tile] + [a for p in got.parts_by_type_tile for a in p[1:]]
    assert len({id(a) for a in held}) == len(held)
    assert not any(np.shares_memory(a, b) for i, a in enumerate(held) for b in held[i + 1 :])


def test_type_groups_in_order_of_first_appearance():
    codes = np.array([4, 1, 4, 2, 1], np.int64)
    groups = [(k, p.tolist()) for k, p in type_groups(codes)]
    assert groups == [(4, [0, 2]), (1, [1, 4]), (2, [3])]
    one = type_groups(np.array([7, 7, 7], np.int64))
    assert [(k, p.tolist()) for k, p in one] == [(7, [0, 1, 2])]
    assert isinstance(one[0][0], int) and one[0][1].dtype == np.int64
    assert type_groups(np.zeros(0, np.int64)) == []


def _exchange_steps(graph: Graph, cs, plan) -> list:
    state = graph._state
    em = Emission(state, Lowered(Storage(state, 1)), HostStreams(False, 1), {})
    planner = ExchangePlanner(state.target, state, OwnerCache())
    plan(planner, build_table(state, cs), state)
    return em.exchange_steps(planner, "cs/ExchangeIn", "cs/Sync", 0, "In")


def test_a_compute_set_on_its_own_tiles_plans_no_exchange():
    graph = _graph()
    cs, _ = _mixed(graph)
    assert _exchange_steps(graph, cs, plan_reads) == []
    assert _exchange_steps(graph, cs, plan_writes) == []


def test_an_element_read_from_another_tile_is_still_exchanged():
    graph = _graph()
    v = mapped(graph, FLOAT, [4], "v", 1)
    w = mapped(graph, FLOAT, [4], "w", 2)
    cs = graph.addComputeSet("remote")
    vx = graph.addVertex(cs, "AddOne", {"in": v, "out": w})
    graph.setTileMapping(vx, 2)
    graph.setPerfEstimate(vx, 10)
    steps = _exchange_steps(graph, cs, plan_reads)
    assert [type(s).__name__ for s in steps] == ["Sync", "Exchange"]
    exchange = steps[1]
    assert exchange.tile.tolist() == [1, 2]
    assert exchange.bytes_sent.tolist() == [16, 0]
    assert exchange.bytes_received.tolist() == [0, 16]
    # the vertex on tile 0 writing tile 2's elements: planned from the writes
    vy = graph.addVertex(cs2 := graph.addComputeSet("write"), "AddOne", {"in": w, "out": v})
    graph.setTileMapping(vy, 2)
    graph.setPerfEstimate(vy, 10)
    steps = _exchange_steps(graph, cs2, plan_writes)
    assert [type(s).__name__ for s in steps] == ["Sync", "Exchange"]
    assert steps[1].bytes_sent.tolist() == [0, 16]


def test_a_type_in_several_compute_sets_sums_its_state_parts_in_the_profile():
    # byVertexType adds each type's parts over every compute set it is in (and the
    # copies' pointers under the copy vertex type); byComputeSet keeps each set's own
    graph = _graph()
    code = graph._state.target.config.code
    one, _ = _mixed(graph)
    two = graph.addComputeSet("second")
    x = graph.addVariable(FLOAT, [2, 6], "x")
    graph.setTileMapping(x, 6)
    for k in range(2):
        vx = graph.addVertex(two, "ListSums", {"in": [x[k].slice(0, 3)], "out": x[k].slice(3, 4)})
        graph.setTileMapping(vx, 6)
        graph.setPerfEstimate(vx, 10)
    a = mapped(graph, FLOAT, [8], "a", 4)
    b = mapped(graph, FLOAT, [8], "b", 4)
    engine = Engine(graph, prog.Sequence([prog.Execute(one), prog.Execute(two), prog.Copy(a, b)]))
    profile = engine.getGraphProfile()
    mem, names = profile["memory"], profile["vertexTypes"]["names"]
    by_type = {k: np.asarray(v) for k, v in mem["byVertexType"].items()}
    by_cs = {k: np.asarray(v) for k, v in mem["byComputeSet"].items()}
    edges_per_vertex = 2 * (code.field_pointer_bytes + code.vector_size_bytes)
    # ListSums: tiles 3 and 5 (the first set: 1, 1 and 2 vectors), tile 6 (1 vector each)
    edges, descs = np.zeros(NUM_TILES, np.int64), np.zeros(NUM_TILES, np.int64)
    for tile, vectors in ((3, 1), (5, 1), (5, 2), (6, 1), (6, 1)):
        edges[tile] += edges_per_vertex
        descs[tile] += code.vectorlist_descriptor_bytes * vectors
    row = names.index("ListSums")
    assert by_type["edgePtrBytes"][row].tolist() == edges.tolist()
    assert by_type["descriptorBytes"][row].tolist() == descs.tolist()
    assert not by_type["copyPtrBytes"][row].any()
    second = profile["computeSets"]["names"].index("second")
    want = np.zeros(NUM_TILES, np.int64)
    want[6] = 2 * edges_per_vertex
    assert by_cs["edgePtrBytes"][second].tolist() == want.tolist()
    copy_row = next(i for i, n in enumerate(names) if n not in ("ListSums", "AddOne"))
    copies = by_type["copyPtrBytes"][copy_row]
    assert copies[4] > 0 and copies.sum() == copies[4]
    assert not by_type["edgePtrBytes"][copy_row].any()


def test_run_offsets_are_the_running_total_of_the_run_lengths():
    rng = np.random.default_rng(7)
    begin = rng.integers(0, 1000, 50).astype(np.int64)
    end = begin + rng.integers(0, 20, 50)
    got = _run_offsets(begin, end)
    want = [0]
    for b, e in zip(begin.tolist(), end.tolist(), strict=True):
        want.append(want[-1] + e - b)
    assert got.dtype == np.int64 and got.tolist() == want
    none = np.zeros(0, np.int64)
    assert _run_offsets(none, none).tolist() == [0]
