"""Lowering paths for blocks of consecutive element ids agree with the general ones.

Copies whose element ids form one ascending block are lowered as block copies, and the
constants such a block overlaps are found from its bounds; copies of scattered ids
take the general path. Both must give the same values and the same errors.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, INT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.errors import PoplarError
from poplar_api.lowering import runs
from poplar_api.tensor import Tensor, concat


def _graph() -> Graph:
    return Graph(IPUModel("ipu2").createDevice().getTarget())


@pytest.mark.parametrize("scattered", [False, True])
def test_stream_copy_into_a_constant_is_refused(scattered: bool) -> None:
    graph = _graph()
    v = graph.addVariable(FLOAT, [4], "v")
    c = graph.addConstant(FLOAT, [2], 1.0, "c")  # ids follow v's: [v, c] is one block
    w = graph.addVariable(FLOAT, [3], "w")
    for t in (v, c, w):
        graph.setTileMapping(t, 0)
    # one block of ids covering v and c, or the same elements out of order
    dst = concat([c, v]) if scattered else concat([v, c])
    stream = graph.addHostToDeviceFIFO("in", FLOAT, 6)
    with pytest.raises(PoplarError, match="constant 'c'"):
        Engine(graph, prog.Copy(stream, dst))
    ok = graph.addHostToDeviceFIFO("ok", FLOAT, 7)
    Engine(graph, prog.Copy(ok, concat([v, w])))  # v and w only: no constant


@pytest.mark.parametrize("reverse", [False, True])
def test_copies_of_blocks_and_scattered_ids_move_the_same_values(reverse: bool) -> None:
    graph = _graph()
    n = 300
    src = graph.addVariable(FLOAT, [n], "src")
    dst = graph.addVariable(FLOAT, [n], "dst")
    graph.setTileMapping(src, 0)
    for i in range(n):  # dst spread over tiles: the copy is an exchange
        graph.setTileMapping(dst[i], i % 7 + 1)
    s = src.reverse(0) if reverse else src
    inp = graph.addHostToDeviceFIFO("in", FLOAT, n)
    out = graph.addDeviceToHostFIFO("out", FLOAT, n)
    engine = Engine(
        graph, prog.Sequence([prog.Copy(inp, src), prog.Copy(s, dst), prog.Copy(dst, out)])
    )
    engine.load(IPUModel("ipu2").createDevice())
    values = np.arange(n, dtype=np.float32) * 0.5
    result = np.zeros(n, np.float32)
    engine.connectStream("in", values)
    engine.connectStream("out", result)
    engine.run(0)
    np.testing.assert_array_equal(result, values[::-1] if reverse else values)


def test_vertex_runs_finds_per_vertex_runs() -> None:
    from poplar_api.lowering.runs import vertex_runs

    ids = np.array([4, 5, 6, 9, 0, 1], np.int64)
    begin, end = vertex_runs(ids, np.array([0, 3, 3, 4, 6]))  # a vertex without elements
    assert begin.tolist() == [4, 0, 9, 0] and end.tolist() == [7, 0, 10, 2]
    assert vertex_runs(ids, np.array([0, 4, 6])) is None  # 4, 5, 6, 9 is not one run


class RowSum(Vertex):
    """``out = sum(in) + 10 * in[0]``."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        s = np.float32(0)
        for i in range(in_.shape[0]):
            s += in_[i]
        out[0] = s + np.float32(10) * in_[0]


@pytest.mark.parametrize("checks", ["true", "false"])
@pytest.mark.parametrize("transpose", [False, True])
def test_fields_read_in_place_or_gathered_give_numpy(checks: str, transpose: bool) -> None:
    """Rows of a matrix (a run of ids per vertex: read where they lie when checks are
    on) and columns (gathered) give numpy's sums, with checks on and off."""
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets([RowSum])
    m = graph.addVariable(FLOAT, [6, 5], "m")
    out = graph.addVariable(FLOAT, [6 if not transpose else 5], "out")
    graph.setTileMapping(m, 0)
    graph.setTileMapping(out, 1)
    src = m.transpose() if transpose else m
    cs = graph.addComputeSet("sums")
    for r in range(src.shape()[0]):
        v = graph.addVertex(cs, "RowSum", {"in": src[r], "out": out[r]})
        graph.setTileMapping(v, r % 4)
        graph.setPerfEstimate(v, 20)
    graph.createHostWrite("m", m)
    graph.createHostRead("out", out)
    engine = Engine(graph, prog.Execute(cs), {"debug.checkVertexBounds": checks})
    engine.load(device)
    values = np.arange(30, dtype=np.float32).reshape(6, 5) * 0.5
    engine.writeTensor("m", values)
    engine.run(0)
    rows = values.T if transpose else values
    np.testing.assert_allclose(engine.readTensor("out"), rows.sum(axis=1) + 10 * rows[:, 0])


class WritesItsInput(Vertex):
    """Writes an Input field: refused when compiled, whether the field is read where
    it lies or gathered."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        in_[0] = np.float32(1)
        out[0] = in_[0]


def test_an_input_read_in_place_is_still_read_only() -> None:
    from poplar_api.errors import CodeletError

    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets([WritesItsInput])
    x = graph.addVariable(FLOAT, [4], "x")
    y = graph.addVariable(FLOAT, [1], "y")
    graph.setTileMapping(x, 0)
    graph.setTileMapping(y, 0)
    cs = graph.addComputeSet("cs")
    v = graph.addVertex(cs, "WritesItsInput", {"in": x, "out": y[0]})  # one run of ids
    graph.setTileMapping(v, 0)
    graph.setPerfEstimate(v, 5)
    engine = Engine(graph, prog.Execute(cs))
    engine.load(device)
    with pytest.raises(CodeletError, match="Input fields are read-only"):
        engine.run(0)


def test_loading_writes_the_image_without_changing_it():
    from poplar_api.lowering.context import Storage

    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    x = graph.addConstant(FLOAT, [5], [1.5, -2.0, 0.0, 3.25, 7.0], "x")
    graph.setTileMapping(x, 1)
    storage = Storage(graph._state)
    before = {size: arr.copy() for size, arr in storage.full.items()}
    storage.load()
    assert before.keys() == storage.full.keys()
    for size, arr in storage.full.items():
        np.testing.assert_array_equal(arr, before[size])
    assert storage.read(FLOAT, x.flat_index()).tolist() == [1.5, -2.0, 0.0, 3.25, 7.0]


def test_storage_copy_and_write_and_fast_paths_store_what_the_plain_rule_stores() -> None:
    """``copy``, ``write`` (its fast path) and ``readonly`` against writing the values
    read, with raw bit patterns that a conversion would change (NaN payloads, bytes
    other than 0/1 read as BOOL), slices that overlap and id arrays."""
    from poplar_api import BOOL, HALF, UNSIGNED_CHAR
    from poplar_api.lowering.context import Storage

    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    for t, name in [(FLOAT, "f"), (HALF, "h"), (INT, "i"), (BOOL, "b"), (UNSIGNED_CHAR, "u")]:
        v = graph.addVariable(t, [64], name)
        graph.setTileMapping(v, 0)
    rng = np.random.default_rng(11)
    storage, reference = Storage(graph._state), Storage(graph._state)
    for size, arr in storage.full.items():
        arr[:] = rng.integers(0, np.iinfo(arr.dtype).max, arr.shape, dtype=arr.dtype)
        reference.full[size][:] = arr
    cases = [(slice(0, 40), slice(8, 48)), (slice(10, 50), slice(0, 40))]
    cases += [(rng.permutation(60)[:25], rng.permutation(60)[:25]) for _ in range(4)]
    for t in (FLOAT, HALF, INT, BOOL, UNSIGNED_CHAR):
        for dst, src in cases:
            storage.copy(t, dst, src)
            reference.arrays[t.size][dst] = _plain_raw(t, reference.read(t, src))
            for size in storage.full:
                np.testing.assert_array_equal(storage.full[size], reference.full[size])
            values = rng.standard_normal(40 if isinstance(dst, slice) else len(dst))
            typed = values.astype(t.numpy)
            storage.write(t, dst, typed)
            reference.arrays[t.size][dst] = _plain_raw(t, typed)
            for size in storage.full:
                np.testing.assert_array_equal(storage.full[size], reference.full[size])
    image = storage.readonly(FLOAT)
    assert not image.flags.writeable and storage.readonly(FLOAT) is image
    assert np.shares_memory(image, storage.arrays[4]) and storage.readonly(BOOL) is None


def _plain_raw(t, values: np.ndarray) -> np.ndarray:
    """The raw bits stored for ``values`` of type ``t``, by the rule written plainly."""
    from poplar_api.lowering.context import RAW_DTYPES

    return np.ascontiguousarray(np.asarray(values).astype(t.numpy)).view(RAW_DTYPES[t.size])


def test_a_variable_makes_its_index_array_only_when_asked() -> None:
    graph = _graph()
    m = graph.addVariable(FLOAT, [50, 40], "m")
    views = {
        "row": m[7],
        "negative row": m[-3],
        "rows": m.slice(3, 9),
        "row of rows": m.slice(3, 9)[2],
        "slice of a row": m[5].slice(10, 30),
        "element": m[4][39],
        "reshaped": m.reshape([40, 50]),
        "row of reshaped": m.reshape([40, 50])[2],
        "flattened": m.flatten(),
        "expanded": m.expand([0, 2]),
        "squeezed": m[1].expand([0]).squeeze([0]),
        "reinterpreted": m[2].reinterpret(INT),
    }
    for r in range(50):  # mapping and connecting rows needs no index array either
        graph.setTileMapping(m[r], r % 5)
    assert m._ix is None and all(v._ix is None for v in views.values())
    assert [views["rows"].shape(), views["expanded"].shape()] == [[6, 40], [1, 50, 40, 1]]
    assert views["flattened"].numElements() == 2000 and len(views["reshaped"]) == 40
    assert views["element"].rank() == 0 and views["element"].numElements() == 1

    ids = m.index  # made now, by numpy, as for any tensor
    assert ids.dtype == np.int64 and not ids.flags.writeable
    np.testing.assert_array_equal(ids.reshape(-1), np.arange(2000) + ids.flat[0])
    want = {
        "row": ids[7],
        "negative row": ids[-3],
        "rows": ids[3:9],
        "row of rows": ids[3:9][2],
        "slice of a row": ids[5, 10:30],
        "element": ids[4, 39],
        "reshaped": ids.reshape(40, 50),
        "row of reshaped": ids.reshape(40, 50)[2],
        "flattened": ids.reshape(-1),
        "expanded": ids.reshape(1, 50, 40, 1),
        "squeezed": ids[1],
        "reinterpreted": ids[2],
    }
    for what, view in views.items():
        np.testing.assert_array_equal(view.index, want[what], err_msg=what)
        assert view == Tensor._of_ids(m.graph, view.elementType(), np.array(want[what]), "x")
    assert views["reinterpreted"].elementType() == INT
    assert m[1] != m[2] and m.slice(2, 3)[0] == m[2] and m[0].slice(0, 0) == m[1].slice(5, 5)


def _moved(as_ids: bool) -> tuple[np.ndarray, bool, tuple[object, ...]]:
    """Stream into x, copy x to y, stream y out; x and y given as blocks or (as_ids)
    as views of the same elements by explicit ids. (values out, whether x and y
    made index arrays, (trace fingerprint, memory report))."""
    graph = _graph()
    rows, cols = 60, 9
    x = graph.addVariable(FLOAT, [rows, cols], "x")
    y = graph.addVariable(FLOAT, [rows, cols], "y")
    for r in range(rows):
        graph.setTileMapping(x[r], r % 11)
        graph.setTileMapping(y[r], (r + 4) % 13)
    src, dst = x, y
    if as_ids:  # the same elements, without the knowledge that they are a block
        src = Tensor._of_ids(graph._state, FLOAT, x.index.copy(), "x")
        dst = Tensor._of_ids(graph._state, FLOAT, y.index.copy(), "y")
    inp = graph.addHostToDeviceFIFO("in", FLOAT, rows * cols)
    out = graph.addDeviceToHostFIFO("out", FLOAT, rows * cols)
    program = prog.Sequence([prog.Copy(inp, src), prog.Copy(src, dst), prog.Copy(dst, out)])
    engine = Engine(graph, program)
    lazy = x._ix is None and y._ix is None
    engine.load(IPUModel("ipu2").createDevice())
    result = np.zeros(rows * cols, np.float32)
    engine.connectStream("in", np.arange(rows * cols, dtype=np.float32) * 0.25)
    engine.connectStream("out", result)
    engine.run(0)
    return result, lazy, (engine.getTrace().fingerprint(), engine.getGraphProfile()["memory"])


def test_streams_and_copies_of_blocks_match_those_of_explicit_ids() -> None:
    """Copies of variables compile without their index arrays and give the values,
    trace and memory plan of the same copies given element by element."""
    blocks, lazy, seen = _moved(as_ids=False)
    ids, _, seen_ids = _moved(as_ids=True)
    assert lazy
    np.testing.assert_array_equal(blocks, np.arange(540, dtype=np.float32) * 0.25)
    np.testing.assert_array_equal(ids, blocks)
    assert seen == seen_ids


def test_transfer_counts_of_a_block_equal_those_of_its_ids() -> None:
    rng = np.random.default_rng(3)
    for _ in range(50):
        size, tiles = int(rng.integers(0, 400)), int(rng.integers(1, 9))
        owner = rng.integers(-1, tiles, size).astype(np.int32)
        owner[rng.random(size) < 0.6] = 2  # long runs on one tile
        lo = int(rng.integers(0, size + 1))
        hi = int(rng.integers(lo, size + 1))
        got = runs.transfer_counts(range(lo, hi), owner, tiles)
        want = runs.transfer_counts(np.arange(lo, hi), owner, tiles)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
    assert runs.as_index(range(4, 9)) == slice(4, 9)
    assert runs.as_index(range(3, 3)).size == 0


def test_overlapping_blocks_of_a_variable_are_refused_with_the_overlap() -> None:
    graph = _graph()
    x = graph.addVariable(FLOAT, [6, 9], "x")
    graph.setTileMapping(x, 0)
    with pytest.raises(PoplarError, match=r"overlap \(9 of 18 element\(s\)"):
        Engine(graph, prog.Copy(x.slice(0, 2), x.slice(1, 3)))
    with pytest.raises(PoplarError, match=r"overlap \(4 of 9 element\(s\)"):
        Engine(graph, prog.Copy(x[2], x.flatten().slice(23, 32)))
    Engine(graph, prog.Sequence([prog.Copy(x[2], x[2]), prog.Copy(x[0], x[1])]))


def test_mapping_a_variable_needs_no_index_array() -> None:
    from poplar_api import poputil

    graph = _graph()
    big = graph.addVariable(FLOAT, [300, 40], "big")
    poputil.mapTensorLinearly(graph, big, grainSize=8)
    clone = poputil.cloneTensor(graph, big, "clone")
    other = graph.addVariable(FLOAT, [12], "other")
    graph.setTileMapping(other, [[(0, 5)], [], [(5, 12)]])  # a whole mapping
    mapping = graph.getTileMapping(big)
    assert big._ix is None and clone._ix is None and other._ix is None
    # the same mappings as numpy's ids give
    owner = graph._state.space(FLOAT).tile
    tiles = owner[big.flat_index()]
    assert owner[clone.flat_index()].tolist() == tiles.tolist()
    per_tile = [[(iv.begin(), iv.end()) for iv in ivs] for ivs in mapping]
    for tile, ivs in enumerate(per_tile):
        for b, e in ivs:
            assert (tiles[b:e] == tile).all()
    assert sum(e - b for ivs in per_tile for b, e in ivs) == 12000
    assert owner[other.flat_index()].tolist() == [0] * 5 + [2] * 7


def test_id_scans_match_numpy() -> None:
    """``span``, ``mark_new`` and ``marked_refs`` (one-pass kernels of the conflict
    check) agree with the numpy expressions they replace."""
    rng = np.random.default_rng(5)
    ids = rng.integers(100, 900, 5000)
    assert runs.span(ids) == (int(ids.min()), int(ids.max()) + 1)
    lo, hi = runs.span(ids)
    marked = np.zeros(hi - lo, bool)
    again = runs.mark_new(ids[:3000], lo, marked) + runs.mark_new(ids[3000:], lo, marked)
    assert again == ids.size - np.unique(ids).size
    assert np.array_equal(np.flatnonzero(marked) + lo, np.unique(ids))
    reads = rng.integers(0, 1000, 7000)
    inside = (reads >= lo) & (reads < hi)
    expect = np.flatnonzero(inside)[marked[reads[inside] - lo]]
    assert np.array_equal(runs.marked_refs(reads, lo, marked), expect)
