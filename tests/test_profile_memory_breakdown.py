"""Vertex memory in the graph profile: vector-list descriptors and on-tile copies as
Poplar's own storage categories (``vectorListDescriptor``, ``copyDescriptor``), and
``memory.byComputeSet`` / ``memory.byVertexType`` as per-tile ``codeBytes``,
``vertexDataBytes``, ``edgePtrBytes``, ``descriptorBytes``, ``copyPtrBytes`` (the names
a Graphcore tool reads from Poplar's profile) and ``totalBytes`` tables.

Expected bytes are worked out here from the vertices built and the config's ``code``
sizes (header, field pointers, size words, one descriptor per inner vector).
"""

from __future__ import annotations

import jsonschema
import numpy as np
from codelets_common import ListSums, SumVertex, mapped, tiny_graph

from ipusim.profile.execution import schema
from ipusim.profile.memory_categories import DATA_PARTS, category_totals
from poplar_api import FLOAT, Engine
from poplar_api import program as prog

#: inner vectors of each ListSums vertex: two on tile 1 (3 and 2 vectors), one on
#: tile 2 (1 vector)
LISTS = ((1, 3), (1, 2), (2, 1))


def _engine() -> tuple[Engine, int]:
    """A compute set ``lists`` of ListSums vertices (vector lists) and SumVertex ones,
    and an on-tile copy of 8 floats on tile 5 (its copy vertices there)."""
    g = tiny_graph()
    cs = g.addComputeSet("lists")
    for k, (tile, count) in enumerate(LISTS):
        x = mapped(g, FLOAT, [count, 2], f"x{k}", tile)
        out = mapped(g, FLOAT, [count], f"out{k}", tile)
        v = g.addVertex(cs, ListSums)
        g.connect(v["in"], [x[j] for j in range(count)])
        g.connect(v["out"], out)
        g.setTileMapping(v, tile)
        g.setPerfEstimate(v, 10)
    y = mapped(g, FLOAT, [4], "y", 1)
    s = mapped(g, FLOAT, [1], "s", 1)
    v = g.addVertex(cs, SumVertex, {"in": y, "out": s[0]})
    g.setTileMapping(v, 1)
    g.setPerfEstimate(v, 10)
    a, b = mapped(g, FLOAT, [8], "a", 5), mapped(g, FLOAT, [8], "b", 5)
    engine = Engine(g, prog.Sequence([prog.Execute(cs), prog.Copy(a, b)]))
    return engine, g.getTarget().getNumTiles()


def _copy_state(code) -> int:
    """State bytes of one copy vertex: a header and two vector fields."""
    return code.vertex_header_bytes + 2 * (code.field_pointer_bytes + code.vector_size_bytes)


def _copy_vertices(engine: Engine) -> int:
    """Copy vertices of the 32 bytes copied on tile 5: one per worker context, each a
    chunk of whole 64-bit words (``ceil(32 / (contexts * 8)) * 8`` bytes)."""
    contexts = engine._state.target.config.tile.worker_contexts
    chunk = -(-32 // (contexts * 8)) * 8
    return -(-32 // chunk)


def test_descriptors_are_their_own_categories():
    engine, nt = _engine()
    code = engine._state.target.config.code
    gp = engine.getGraphProfile()
    jsonschema.validate(gp, schema("graph_profile"))
    totals = category_totals(gp["memory"]["byCategory"])
    lists = np.zeros(nt, np.int64)
    for tile, count in LISTS:
        lists[tile] += code.vectorlist_descriptor_bytes * count
    assert totals["vectorListDescriptor"].tolist() == lists.tolist()
    # the copy vertices on tile 5: a header and two vector fields (pointer and size) each
    copy = np.zeros(nt, np.int64)
    copy[5] = _copy_vertices(engine) * _copy_state(code)
    assert totals["copyDescriptor"].tolist() == copy.tolist()
    # the rest of the state: header, a pointer per field, a size word per vector and list
    state = np.zeros(nt, np.int64)
    list_vertex = code.vertex_header_bytes + 2 * code.field_pointer_bytes
    list_vertex += 2 * code.vector_size_bytes  # the list and the output vector
    for tile, _ in LISTS:
        state[tile] += list_vertex
    state[1] += code.vertex_header_bytes + 2 * code.field_pointer_bytes + code.vector_size_bytes
    assert totals["vertexInstanceState"].tolist() == state.tolist()


def test_by_vertex_type_and_by_compute_set_are_code_and_data_per_tile():
    engine, nt = _engine()
    code = engine._state.target.config.code
    gp = engine.getGraphProfile()
    mem = gp["memory"]
    totals = category_totals(mem["byCategory"])
    names = gp["vertexTypes"]["names"]
    by_type = {k: np.asarray(v) for k, v in mem["byVertexType"].items()}
    assert all(t.shape == (len(names), nt) for t in by_type.values())
    data = sum(by_type[k] for k in ("vertexDataBytes", *DATA_PARTS))
    np.testing.assert_array_equal(by_type["totalBytes"], by_type["codeBytes"] + data)
    # over all types: the vertex code and the three vertex-state categories
    np.testing.assert_array_equal(by_type["codeBytes"].sum(0), totals["vertexCode"])
    np.testing.assert_array_equal(by_type["descriptorBytes"].sum(0), totals["vectorListDescriptor"])
    np.testing.assert_array_equal(by_type["copyPtrBytes"].sum(0), totals["copyDescriptor"])
    np.testing.assert_array_equal(
        (by_type["vertexDataBytes"] + by_type["edgePtrBytes"]).sum(0),
        totals["vertexInstanceState"],
    )
    lists = names.index("ListSums")
    want = np.zeros(nt, np.int64)
    want[[1, 2]] = code.vertex_code_bytes  # ListSums runs on tiles 1 and 2
    assert by_type["codeBytes"][lists].tolist() == want.tolist()
    # ListSums: a header each (its own state), two field pointers and two size words
    # each (edge pointers), one descriptor per inner vector
    headers, edges, descs = (np.zeros(nt, np.int64) for _ in range(3))
    for tile, count in LISTS:
        headers[tile] += code.vertex_header_bytes
        edges[tile] += 2 * (code.field_pointer_bytes + code.vector_size_bytes)
        descs[tile] += code.vectorlist_descriptor_bytes * count
    assert by_type["vertexDataBytes"][lists].tolist() == headers.tolist()
    assert by_type["edgePtrBytes"][lists].tolist() == edges.tolist()
    assert by_type["descriptorBytes"][lists].tolist() == descs.tolist()
    # the copy vertex type: all its state is copy pointers
    copy_row = next(i for i, n in enumerate(names) if n not in ("ListSums", "SumVertex"))
    copy = np.zeros(nt, np.int64)
    copy[5] = _copy_vertices(engine) * _copy_state(code)
    assert by_type["copyPtrBytes"][copy_row].tolist() == copy.tolist()
    assert not by_type["vertexDataBytes"][copy_row].any()
    # the compute set ``lists``: two types on tile 1, one on tile 2
    by_cs = {k: np.asarray(v) for k, v in mem["byComputeSet"].items()}
    row = gp["computeSets"]["names"].index("lists")
    want = np.zeros(nt, np.int64)
    want[1], want[2] = 2 * code.vertex_code_bytes, code.vertex_code_bytes
    assert by_cs["codeBytes"][row].tolist() == want.tolist()
    # SumVertex on tile 1: a header, two field pointers and one size word
    headers[1] += code.vertex_header_bytes
    edges[1] += 2 * code.field_pointer_bytes + code.vector_size_bytes
    assert by_cs["vertexDataBytes"][row].tolist() == headers.tolist()
    assert by_cs["edgePtrBytes"][row].tolist() == edges.tolist()
    assert by_cs["descriptorBytes"][row].tolist() == descs.tolist()
    assert not by_cs["copyPtrBytes"][row].any()
    for k in ("vertexDataBytes", *DATA_PARTS):
        np.testing.assert_array_equal(by_cs[k].sum(0), by_type[k].sum(0))
