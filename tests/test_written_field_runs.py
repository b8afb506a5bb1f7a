"""Written fields stored through their runs of ids: a field the table holds as runs (one
per vertex, or a vector list's runs) is checked for conflicts, read and stored by its
runs, and its table keeps no ids (a ResNet-50 training step's written fields kept 1 GB
of them). The values are computed here with numpy over the fields' ids."""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import SumVertex

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel
from poplar_api.codelet import InOut, Input, Output, Vector, VectorList, Vertex
from poplar_api.fields import FieldSpec
from poplar_api.graph_connections import RunSegments
from poplar_api.lowering import context, runs, validate
from poplar_api.lowering.context import Storage
from poplar_api.lowering.field_tables import build_table
from poplar_api.program import Execute, Sequence
from poplar_api.run_ids import RunIds


def test_put_ranges_stores_as_an_index_assignment() -> None:
    rng = np.random.default_rng(3)
    for _ in range(40):
        begins = rng.integers(0, 90, rng.integers(0, 12))
        ends = begins + rng.integers(0, 10, begins.size)  # overlapping, some empty
        ids = runs.expand(begins, ends - begins)
        src = rng.integers(0, 1 << 30, ids.size).astype(np.uint32)
        want = np.zeros(100, np.uint32)
        want[ids] = src  # numpy: an id listed twice keeps the later value
        got = np.zeros(100, np.uint32)
        runs.put_ranges(got, begins.astype(np.int32), ends.astype(np.int32), src)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_one_block_is_the_slice_of_ranges_that_follow_one_another(dtype) -> None:
    rng = np.random.default_rng(5)
    src = rng.integers(0, 1 << 30, 200).astype(np.uint32)
    found = 0
    for _ in range(300):
        n = int(rng.integers(1, 10))
        lengths = rng.integers(0, 5, n)
        begins = int(rng.integers(0, 100)) + np.concatenate(([0], np.cumsum(lengths)[:-1]))
        if rng.random() < 0.5:  # one range moved: no longer one block (unless it is empty
            q = int(rng.integers(0, n))  # and lands where it was)
            begins[q] += int(rng.integers(1, 3))
        ends = begins + lengths
        ids = runs.expand(begins, lengths)
        one = (begins[1:] == ends[:-1]).all()  # each range starts where the last ended
        block = runs.one_block(begins.astype(dtype), ends.astype(dtype))
        if not one:
            assert block is None
            continue
        found += 1
        assert block == (begins[0], ends[-1])
        np.testing.assert_array_equal(src[block[0] : block[1]], src[ids])
    assert found > 100
    assert runs.one_block(np.zeros(0, dtype), np.zeros(0, dtype)) is None


@pytest.mark.parametrize("typ", [FLOAT, HALF])
def test_write_runs_stores_the_bits_write_stores(typ) -> None:
    class _Space:
        size = 64

    class _State:
        spaces = {typ.size: _Space()}
        initial_parts: list = []

    begins, ends = np.array([3, 40, 10]), np.array([9, 41, 20])
    ids = runs.expand(begins, ends - begins)
    values = np.linspace(-3.3, 7.7, ids.size).astype(np.float32)  # the kernel's dtype
    by_ids, by_runs = Storage(_State()), Storage(_State())
    by_ids.write(typ, ids, values)
    by_runs.write_runs(typ, begins, ends, values)
    np.testing.assert_array_equal(by_runs.arrays[typ.size], by_ids.arrays[typ.size])
    by_runs.write_runs(typ, begins, ends, values.astype(typ.numpy))  # bits as they are
    np.testing.assert_array_equal(by_runs.arrays[typ.size], by_ids.arrays[typ.size])


class Scale(Vertex):
    """``out[i] = 2 * in_[i] + out[i]`` (``out`` is read as well: an InOut)."""

    in_ = Input(Vector(FLOAT))
    out = InOut(Vector(FLOAT))

    @staticmethod
    def compute(in_, out):
        for i in range(out.shape[0]):
            out[i] = 2 * in_[i] + out[i]
        return True

    @staticmethod
    def getCycleEstimate(sizes, target):
        return 10 + sizes["out"]


class Spread(Vertex):
    """Every vector ``k`` of ``out`` set to ``x[0] + k`` and its position."""

    x = Input(Vector(FLOAT))
    out = Output(VectorList(FLOAT))

    @staticmethod
    def compute(x, out):
        for k in range(len(out)):
            vec = out[k]
            for i in range(vec.shape[0]):
                vec[i] = x[0] + k + 0.25 * i
        return True

    @staticmethod
    def getCycleEstimate(sizes, target):
        return 10 + sum(sizes["out"])


def _held(flat: np.ndarray) -> RunIds:
    starts = np.flatnonzero(np.r_[True, np.diff(flat) != 1])
    return RunIds(starts, flat[starts].astype(np.int64), flat.size, np.int32)


def test_written_fields_are_stored_by_their_runs_and_keep_no_ids(monkeypatch) -> None:
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets([Scale, Spread])
    n = 48
    y = graph.addVariable(FLOAT, [n], "y")  # first: its element ids are 0 to n - 1
    a = graph.addVariable(FLOAT, [4, 12], "a")
    b = graph.addVariable(FLOAT, [4, 12], "b")
    xs = graph.addVariable(FLOAT, [2, 1], "xs")
    for v in (y, a, b):
        graph.mapElements(v, np.arange(n) // 12)
    graph.setTileMapping(xs, 0)
    a0 = np.arange(n, dtype=np.float32).reshape(4, 12) - 7
    b0 = np.arange(n, dtype=np.float32).reshape(4, 12) * 0.5
    x0 = np.array([[1.5], [-2.0]], np.float32)
    for v, values in ((y, np.zeros(n, np.float32)), (a, a0), (b, b0), (xs, x0)):
        graph.setInitialValues(v, values)
    cs = graph.addComputeSet("cs")
    for t in range(4):  # a row of b per vertex: one run each
        graph.setTileMapping(graph.addVertex(cs, Scale, {"in": a[t], "out": b[t]}), t)
    # vector lists of y whose vectors are runs: vertex 0 writes ids 0 to 9 and 20 to 23,
    # vertex 1 writes 30 to 47 as two vectors
    flat = np.r_[np.arange(0, 10), np.arange(20, 24), np.arange(30, 40), np.arange(40, 48)]
    sizes, vectors = np.array([10, 4, 10, 8]), np.array([2, 2])
    graph.addVertices(
        cs, Spread, [0, 3], {"x": xs, "out": RunSegments(y, _held(flat), sizes, vectors)}
    )
    for name, v in (("b", b), ("y", y)):
        graph.createHostRead(name, v)

    table = build_table(graph._state, graph._state.compute_sets[cs.id])
    written = {g.vtype.name: ft for g in table.groups for ft in g.fields if ft.spec.writes}
    assert written["Scale"].runs is not None and written["Spread"].ref_runs is not None
    assert validate.check_conflicts(graph._state, table) == []
    for ft in written.values():  # checked without keeping the ids
        assert isinstance(ft.touched(), tuple)

    stored = []
    plain = context.Storage.write_runs

    def spy(self, t, begin, end, values):
        stored.append(runs.expand(begin, end - begin))
        plain(self, t, begin, end, values)

    plain_write = context.Storage.write
    by_ids = []

    def spy_write(self, t, ids, values):  # b's runs follow one another: one slice
        if isinstance(ids, slice):
            stored.append(np.arange(ids.start, ids.stop))
        else:
            by_ids.append(ids)
        plain_write(self, t, ids, values)

    monkeypatch.setattr(context.Storage, "write_runs", spy)
    engine = Engine(graph, Execute(cs))
    engine.load(device)
    monkeypatch.setattr(context.Storage, "write", spy_write)  # (load writes by ids)

    def searched(*args):
        raise AssertionError("a field's one block was searched for as the compute set ran")

    monkeypatch.setattr(runs, "one_block", searched)  # found while lowering, not run
    engine.run(0)
    b_ids = np.arange(2 * n, 3 * n)  # (y, then a, then b)
    assert sorted(np.concatenate(stored).tolist()) == sorted([*flat.tolist(), *b_ids.tolist()])
    assert by_ids == []

    got_b, got_y = np.zeros((4, 12), np.float32), np.zeros(n, np.float32)
    engine.readTensor("b", got_b)
    engine.readTensor("y", got_y)
    np.testing.assert_array_equal(got_b, 2 * a0 + b0)
    want_y = np.zeros(n, np.float32)
    at = 0
    for vertex in range(2):
        for k in range(vectors[vertex]):
            size = sizes[vertex * 2 + k]
            want_y[flat[at : at + size]] = x0[vertex, 0] + k + 0.25 * np.arange(size)
            at += size
    np.testing.assert_array_equal(got_y, want_y)


def test_read_ids_in_long_runs_are_kept_as_runs_cut_at_each_vertex(monkeypatch) -> None:
    from poplar_api.lowering import field_tables
    from poplar_api.lowering.computeset import _kept_table
    from poplar_api.tensor import concat

    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets(SumVertex)
    m = graph.addVariable(FLOAT, [6, 8], "m")
    s = graph.addVariable(FLOAT, [3], "s")  # SumVertex: out = the sum of in
    graph.mapElements(m, np.repeat(np.arange(3), 16))
    graph.mapElements(s, np.arange(3))
    m0 = np.arange(48, dtype=np.float32).reshape(6, 8) * 0.5 - 3
    graph.setInitialValues(m, m0)
    cs = graph.addComputeSet("cs")
    # vertex t reads rows 2t + 1 and 2t, in that order: two runs of 8, the second of
    # vertex t followed by the first of vertex t + 1 in id order only across vertices
    rows = [concat([m[2 * t + 1], m[2 * t]]) for t in range(3)]
    for t in range(3):
        v = graph.addVertex(cs, SumVertex, {"in": rows[t], "out": s[t]})
        graph.setTileMapping(v, t)
        graph.setPerfEstimate(v, 30)
    # columns: runs of one id, kept as ids
    cols = graph.addComputeSet("cols")
    c = graph.addVariable(FLOAT, [8], "c")
    graph.mapElements(c, np.arange(8) % 3)
    for j in range(8):
        v = graph.addVertex(cols, SumVertex, {"in": m[:, j], "out": c[j]})
        graph.setTileMapping(v, j % 3)
        graph.setPerfEstimate(v, 30)
    graph.createHostRead("s", s)
    graph.createHostRead("c", c)

    # the runs are found when the compute set's table is built (every pass after it
    # reads them), and the runner keeps that table
    (group,) = build_table(graph._state, graph._state.compute_sets[cs.id]).groups
    ft = next(f for f in group.fields if f.spec.name == "in")
    assert ft.runs is None and ft.touched() is ft.ref_runs  # no ids made
    begin, end = ft.ref_runs
    want = np.concatenate([r.flat_index() for r in rows])
    np.testing.assert_array_equal(runs.expand(begin, end - begin), want)
    starts = np.cumsum(end - begin) - (end - begin)
    assert set(ft.bounds[:-1].tolist()) <= set(starts.tolist())  # cut at each vertex
    assert begin.size == 6
    assert _kept_table(ft, None) is ft
    assert ft.vertex_runs() is None  # two runs a vertex: not read in place
    (group,) = build_table(graph._state, graph._state.compute_sets[cols.id]).groups
    by_column = next(f for f in group.fields if f.spec.name == "in")
    assert by_column.ref_runs is None and by_column.runs_sought
    with monkeypatch.context() as patched:  # runs sought once: not looked for again
        patched.setattr(field_tables, "vertex_id_runs", None)
        assert _kept_table(by_column, None) is by_column

    engine = Engine(graph, Sequence([Execute(cs), Execute(cols)]))
    engine.load(device)
    engine.run(0)
    got_s, got_c = np.zeros(3, np.float32), np.zeros(8, np.float32)
    engine.readTensor("s", got_s)
    engine.readTensor("c", got_c)
    want_s = [np.float32(0) + np.add.reduce(np.r_[m0[2 * t + 1], m0[2 * t]]) for t in range(3)]
    np.testing.assert_allclose(got_s, want_s, rtol=1e-6)
    np.testing.assert_allclose(got_c, m0.sum(axis=0), rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_runs_of_random_reads_match_runs_found_one_by_one(seed) -> None:
    """Random reads (runs of random lengths, strided stretches, vertices of random
    sizes, near the threshold of runs per reference both ways): kept as runs exactly
    when, cut at each vertex, they average MIN_REFS_PER_RUN references or more, and
    then the runs are those found reference by reference."""
    from poplar_api.lowering.computeset import _kept_table
    from poplar_api.lowering.field_tables import MIN_REFS_PER_RUN, FieldTable

    spec = FieldSpec("in", "in", "vector", FLOAT)
    rng = np.random.default_rng(seed)
    outcomes = set()
    for trial in range(60):
        parts, at = [], int(rng.integers(0, 50))
        share = rng.uniform(0.5, 1.0)  # of runs among the parts
        for _ in range(int(rng.integers(1, 40))):
            if rng.random() < share:  # a run
                n = int(rng.integers(1, 3 * MIN_REFS_PER_RUN + 2))
                parts.append(np.arange(at, at + n))
            else:  # a strided stretch: every id a run of its own
                n = int(rng.integers(1, 12))
                parts.append(at + 3 * np.arange(n))
            at += int(rng.integers(-30, 80)) + 3 * n
            at = max(at, 0)
        ids = np.concatenate(parts).astype(np.int32)
        cuts = np.sort(rng.choice(np.arange(1, ids.size), min(ids.size - 1, 5), replace=False))
        offsets = np.concatenate(([0], cuts, [ids.size])).astype(np.int64)
        ft = FieldTable(spec, ids, offsets, None, np.arange(offsets.size - 1))
        starts = [k for k in range(ids.size)
                  if k == 0 or ids[k] != ids[k - 1] + 1 or k in offsets[1:-1]]  # fmt: skip
        kept = _kept_table(ft, None)
        if ids.size < 2 * MIN_REFS_PER_RUN or len(starts) * MIN_REFS_PER_RUN > ids.size:
            assert kept is ft, trial
            outcomes.add(False)
            continue
        outcomes.add(True)
        begin, end = kept.ref_runs
        ends = [*starts[1:], ids.size]
        assert begin.tolist() == [int(ids[s]) for s in starts], trial
        assert end.tolist() == [int(ids[e - 1]) + 1 for e in ends], trial
    assert outcomes == {True, False}  # both kept and left as ids


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_vertex_id_runs_cut_at_vertices_keep_the_id_type_and_stop_past_most(dtype) -> None:
    """The runs of a field's ids cut at each vertex's first reference (empty vertices
    too) are those found reference by reference, in the ids' type; more than ``most``
    of them give None."""
    from poplar_api.lowering.field_tables import vertex_id_runs

    ids = np.array([5, 6, 7, 9, 10, 11, 12, 3, 4, 20, 21, 22, 23, 24], dtype)
    bounds = np.array([0, 2, 2, 7, 7, 11, 14], np.int64)  # vertices 1 and 3 hold nothing
    begin, end = vertex_id_runs(ids, bounds, 6)
    # runs: 5-6 | 7 | 9-12 | 3-4 | 20-21 (cut at vertex 5's start, position 11) | 22-24
    assert begin.tolist() == [5, 7, 9, 3, 20, 22] and end.tolist() == [7, 8, 13, 5, 22, 25]
    assert begin.dtype == dtype and end.dtype == dtype
    assert vertex_id_runs(ids, bounds, 5) is None
    one = vertex_id_runs(ids[:3], np.array([0, 3], np.int64), 1)
    assert one[0].tolist() == [5] and one[1].tolist() == [8]


def test_vertex_runs_of_a_table_held_as_runs_match_those_found_in_its_ids() -> None:
    """``FieldTable.vertex_runs`` (a vector read as its runs, whether each vertex reads
    one run or none) against ``runs.vertex_runs`` of the ids, on random vertices with
    empty ones and with a vertex of two runs."""
    from poplar_api.lowering.field_tables import FieldTable, read_runs

    spec = FieldSpec("in", "in", "vector", FLOAT)
    rng = np.random.default_rng(11)
    seen = set()
    for trial in range(200):
        n = int(rng.integers(1, 12))
        lengths = rng.integers(0, 20, n) * (rng.random(n) < 0.8)
        lengths[int(rng.integers(0, n))] = int(rng.integers(8, 20))  # runs sought
        begins = rng.integers(0, 500, n)
        parts = [np.arange(b, b + k) for b, k in zip(begins, lengths, strict=True)]
        if rng.random() < 0.4:  # one vertex reads two runs
            v = int(np.flatnonzero(lengths)[0])
            parts[v] = np.concatenate([parts[v], np.arange(900, 904)])
        ids = np.concatenate(parts).astype(np.int32)
        offsets = np.concatenate(([0], np.cumsum([p.size for p in parts]))).astype(np.int64)
        ft = read_runs(FieldTable(spec, ids, offsets, None, np.arange(n)))
        want = runs.vertex_runs(ids, offsets)
        if ft.ref_runs is None:  # too few references per run to be held as runs
            continue
        got = ft.vertex_runs()
        seen.add(want is None)
        if want is None:
            assert got is None, trial
            continue
        assert got[0].dtype == got[1].dtype == np.int64
        np.testing.assert_array_equal(got[0], want[0], err_msg=str(trial))
        np.testing.assert_array_equal(got[1], want[1], err_msg=str(trial))
    assert seen == {True, False}


@pytest.mark.parametrize("seed", [0, 1])
def test_read_fields_held_as_runs_compile_and_run_as_their_ids(seed, monkeypatch) -> None:
    """Vectors read as runs of ids (concatenated slices, some vertices one slice read
    in place, some several, some remote) compile to the program, memory placement and
    trace they compile to when the table keeps their ids (the runner then found the
    runs), and give numpy's sums."""
    from poplar_api.lowering import field_tables
    from poplar_api.tensor import concat
    from tests.test_field_runs import _ir_hash

    def compiled(as_ids: bool) -> tuple:
        with monkeypatch.context() as patched:
            if as_ids:
                patched.setattr(field_tables, "read_runs", lambda ft: ft)
            rng = np.random.default_rng(seed)
            device = IPUModel("tiny").createDevice()
            graph = Graph(device.getTarget())
            graph.addCodelets(SumVertex)
            tiles = graph.getTarget().getNumTiles()
            n = 400
            x = graph.addVariable(FLOAT, [n], "x")
            graph.mapElements(x, np.arange(n) * tiles // n)
            x0 = (rng.standard_normal(n) * 4).astype(np.float32)
            graph.setInitialValues(x, x0)
            vertices = 24
            out = graph.addVariable(FLOAT, [vertices], "out")
            graph.mapElements(out, np.arange(vertices) % tiles)
            cs = graph.addComputeSet("sums")
            want = np.zeros(vertices, np.float32)
            for v in range(vertices):
                pieces = []
                for _ in range(int(rng.integers(1, 4))):
                    a = int(rng.integers(0, n - 20))
                    pieces.append(x[a : a + int(rng.integers(5, 20))])
                t = pieces[0] if len(pieces) == 1 else concat(pieces)
                vx = graph.addVertex(cs, SumVertex, {"in": t, "out": out[v]})
                graph.setTileMapping(vx, int(rng.integers(0, tiles)))
                graph.setPerfEstimate(vx, 20)
                want[v] = np.add.reduce(x0[t.flat_index()], dtype=np.float32)
            graph.createHostRead("out", out)
            (group,) = build_table(graph._state, graph._state.compute_sets[cs.id]).groups
            ft = next(f for f in group.fields if f.spec.name == "in")
            engine = Engine(graph, Sequence([Execute(cs)]))
            engine.load(device)
            engine.run(0)
            got = np.zeros(vertices, np.float32)
            engine.readTensor("out", got)
        return ft, _ir_hash(engine), engine.getTrace().fingerprint(), got, want

    ft, ir_runs, trace_runs, got_runs, want = compiled(False)
    ft_ids, ir_ids, trace_ids, got_ids, _ = compiled(True)
    assert ft.ref_runs is not None and ft_ids.ref_runs is None
    np.testing.assert_array_equal(ft.ids, ft_ids.ids)
    np.testing.assert_allclose(got_runs, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(got_runs, got_ids)
    assert trace_runs == trace_ids
    assert ir_runs == ir_ids
