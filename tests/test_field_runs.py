"""Vector lists kept as runs of ids through the compile: a field whose list block holds
its ids as runs (:class:`~poplar_api.run_ids.RunIds`) is tabled as the id runs of its
vectors (:attr:`FieldTable.ref_runs`), its exchanges planned from them and its values
gathered by them, never as one id per reference. Everything must be what the same
field tabled as ids gives: the compiled program, its cycles and the values, computed
here independently with numpy over the field's ids."""

from __future__ import annotations

import dataclasses
import enum
import hashlib
import itertools

import numpy as np
import pytest

from poplar_api import BOOL, FLOAT, HALF, INT, Engine, Graph, IPUModel
from poplar_api.codelet import Input, Output, VectorList, Vertex
from poplar_api.graph_connections import RunSegments
from poplar_api.lowering import field_tables, runs
from poplar_api.lowering.field_tables import build_table
from poplar_api.program import Execute
from poplar_api.run_ids import RunIds

#: Elements of the variable read.
N = 160


def _held(flat: np.ndarray) -> RunIds:
    """``flat`` as runs of consecutive ids."""
    starts = np.flatnonzero(np.r_[True, np.diff(flat) != 1])
    return RunIds(starts, flat[starts].astype(np.int64), flat.size, np.int32)


def test_run_ranges_are_the_runs_of_the_ids_at_the_positions() -> None:
    rng = np.random.default_rng(5)
    for _ in range(50):
        lengths = rng.integers(1, 12, rng.integers(1, 20))
        firsts = rng.integers(0, 500, lengths.size)
        flat = np.concatenate([f + np.arange(n) for f, n in zip(firsts, lengths, strict=True)])
        held = _held(flat)
        begins = rng.integers(0, flat.size, 30)
        ends = np.minimum(begins + rng.integers(0, 30, 30), flat.size)
        b, e = runs.run_ranges(held.starts, held.firsts, held.size, begins, ends)
        want = np.concatenate([flat[x:y] for x, y in zip(begins, ends, strict=True)])
        np.testing.assert_array_equal(runs.expand(b, e - b), want)
        assert (e > b).all()
        # no run crosses from one range to the next
        cut = np.cumsum(ends - begins)
        assert set(cut[ends > begins].tolist()) <= set(np.cumsum(e - b).tolist())


def test_run_ranges_refuses_ranges_outside_the_sequence() -> None:
    """A range beyond the held positions (or any non-empty range of a sequence without
    runs) would read past the run arrays in the compiled pass: refused with the
    positions; empty ranges of an empty sequence are no rows."""
    held = _held(np.arange(10, 20))
    with pytest.raises(ValueError, match=r"positions 8\.\.10 lie outside the 10 held"):
        runs.run_ranges(held.starts, held.firsts, held.size, np.array([8]), np.array([11]))
    none = np.zeros(0, np.int64)
    with pytest.raises(ValueError, match=r"positions 0\.\.0 lie outside the 0 held"):
        runs.run_ranges(none, none, 0, np.array([0]), np.array([1]))
    b, e = runs.run_ranges(none, none, 0, np.array([0, 0]), np.array([0, 0]))
    assert b.size == e.size == 0


def _probe(typ):
    class RunsSum(Vertex):
        """``out`` = the sum of every element of every vector of ``in_``."""

        in_ = Input(VectorList(typ))
        out = Output(FLOAT)

        @staticmethod
        def compute(in_, out):
            s = 0.0
            for k in range(len(in_)):
                vec = in_[k]
                for i in range(vec.shape[0]):
                    s += vec[i] * 1.0
            out[0] = s
            return True

        @staticmethod
        def getCycleEstimate(sizes, target):
            return 10 + 2 * sum(sizes["in"])

    RunsSum.__name__ = f"RunsSum{typ.name}"
    return RunsSum


def _pieces() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Ids read (runs: overlapping, crossing tiles, of one element, a stride made of
    runs of two), the elements of each vector (some empty) and the vectors of each
    vertex (one with none), and each vertex's tile."""
    parts = [
        np.arange(0, 30),  # crosses tiles 0 and 1 (20 elements per tile)
        np.arange(10, 40),  # overlaps the first
        np.arange(35, 36),
        np.arange(100, 160),  # crosses three tiles
        np.concatenate([np.arange(s, s + 2) for s in range(40, 100, 6)]),  # strided pairs
        np.arange(0, 20),
    ]
    flat = np.concatenate(parts)
    sizes = np.array([30, 0, 30, 1, 60, 20, 0, 20])
    vectors = np.array([2, 2, 1, 0, 3])
    tiles = np.array([2, 0, 5, 1, 7])
    return flat, sizes, vectors, tiles


def _build(typ, ipus: int, replicas: int):
    model = IPUModel("tiny")
    model.numIPUs = ipus * replicas
    device = model.createDevice()
    graph = Graph(device.getTarget(), replication_factor=replicas)
    cls = _probe(typ)
    graph.addCodelets(cls)
    x = graph.addVariable(typ, [N], "x")
    per_tile = N // graph.getTarget().getNumTiles() if ipus > 1 else 20
    graph.mapElements(x, np.minimum(np.arange(N) // per_tile, graph.getTarget().getNumTiles() - 1))
    values = (np.arange(N) % 7 == 0) if typ is BOOL else (np.arange(N) % 13) - 4
    graph.setInitialValues(x, values.astype(typ.numpy))
    flat, sizes, vectors, tiles = _pieces()
    out = graph.addVariable(FLOAT, [vectors.size], "out")
    graph.mapElements(out, tiles)
    cs = graph.addComputeSet("cs")
    graph.addVertices(
        cs, cls, tiles.tolist(), {"in": RunSegments(x, _held(flat), sizes, vectors), "out": out}
    )
    graph.createHostRead("out", out)
    return graph, device, Execute(cs), cs, values.astype(np.float64), out


def _feed(h, value, seen: dict) -> None:
    """Hash ``value``: IR nodes and reports field by field, arrays by their bytes."""
    if isinstance(value, np.ndarray):
        h.update(f"{value.dtype}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, bool | int | float | str | type(None) | np.generic | enum.Enum):
        h.update(repr(value).encode())
    elif isinstance(value, list | tuple):
        h.update(f"[{len(value)}".encode())
        for x in value:
            _feed(h, x, seen)
    elif isinstance(value, dict):
        h.update(f"{{{len(value)}".encode())
        for k, x in value.items():
            _feed(h, k, seen)
            _feed(h, x, seen)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        if id(value) in seen:
            h.update(f"ref{seen[id(value)]}".encode())
            return
        seen[id(value)] = len(seen)
        h.update(type(value).__name__.encode())
        for f in dataclasses.fields(value):
            h.update(f.name.encode())
            _feed(h, getattr(value, f.name), seen)
    else:  # effects and predicates: closures, not compared
        h.update(type(value).__name__.encode())


def _ir_hash(engine: Engine) -> str:
    """A hash of the compiled program (every node's per-tile arrays and cycles) and of
    the memory placement."""
    h = hashlib.sha256()
    _feed(h, engine.ir_program, {})
    _feed(h, engine.memory, {})
    return h.hexdigest()


def _compiled(typ, ipus: int, replicas: int, as_ids: bool, monkeypatch) -> tuple:
    with monkeypatch.context() as m:
        if as_ids:  # the same field tabled as one id per reference (not as its runs
            m.setattr(field_tables, "_ref_runs", lambda parts, total: None)  # either)
            m.setattr(field_tables, "read_runs", lambda ft: ft)
        graph, device, prog, cs, values, out = _build(typ, ipus, replicas)
        (group,) = build_table(graph._state, graph._state.compute_sets[cs.id]).groups
        (ft,) = [f for f in group.fields if f.spec.name == "in"]
        engine = Engine(graph, prog)
        engine.load(device)
        engine.run(0)
        got = np.zeros((replicas, *out.shape()), np.float32)  # replica-major
        engine.readTensor("out", got.reshape(-1) if replicas > 1 else got[0])
    return ft, _ir_hash(engine), engine.getTrace().fingerprint(), got, values


@pytest.mark.parametrize(
    ("typ", "ipus", "replicas"),
    [(FLOAT, 1, 1), (HALF, 1, 1), (INT, 1, 1), (BOOL, 1, 1), (FLOAT, 2, 1), (FLOAT, 1, 2)],
)
def test_a_field_of_runs_compiles_and_runs_as_its_ids(typ, ipus, replicas, monkeypatch) -> None:
    ft, ir_runs, trace_runs, got_runs, values = _compiled(typ, ipus, replicas, False, monkeypatch)
    ft_ids, ir_ids, trace_ids, got_ids, _ = _compiled(typ, ipus, replicas, True, monkeypatch)
    assert ft.ref_runs is not None and ft_ids.ref_runs is None
    flat, sizes, vectors, _ = _pieces()
    # the runs are the field's ids, and none crosses from one vertex to the next
    lengths = ft.ref_runs[1] - ft.ref_runs[0]
    np.testing.assert_array_equal(runs.expand(ft.ref_runs[0], lengths), flat)
    np.testing.assert_array_equal(ft.ids, flat)
    starts = np.cumsum(lengths) - lengths
    ends = starts + lengths
    vertex_of = np.searchsorted(ft.bounds, starts, side="right")
    assert (vertex_of == np.searchsorted(ft.bounds, ends - 1, side="right")).all()
    vtiles = np.array([2, 0, 5, 1, 7])
    owners = [
        next(v for v in range(vectors.size) if ft.bounds[v] <= p < ft.bounds[v + 1])
        for p in starts.tolist()
    ]
    assert ft.run_tiles(vtiles).tolist() == vtiles[owners].tolist()
    assert ir_runs == ir_ids and trace_runs == trace_ids
    # each vertex's sum, from numpy over the ids it reads
    piece_at = np.r_[0, np.cumsum(sizes)]
    vector_at = np.r_[0, np.cumsum(vectors)]
    want = [
        sum(values[flat[piece_at[k] : piece_at[k + 1]]].sum() for k in range(a, b))
        for a, b in itertools.pairwise(vector_at)
    ]
    for replica in got_runs:  # every replica computes from the same initial values
        np.testing.assert_allclose(replica, np.array(want, np.float32), rtol=1e-3)
    np.testing.assert_array_equal(got_runs, got_ids)


def test_a_field_of_empty_vectors_is_no_runs() -> None:
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    cls = _probe(FLOAT)
    graph.addCodelets(cls)
    x = graph.addVariable(FLOAT, [40], "x")
    graph.mapElements(x, np.arange(40) // 5)
    out = graph.addVariable(FLOAT, [3], "out")
    graph.mapElements(out, [0, 1, 2])
    cs = graph.addComputeSet("cs")
    # the first vertex reads its run; the other two vertices' vectors are all empty
    flat = np.arange(0, 40)
    graph.addVertices(cs, cls, [0], {"in": RunSegments(x, _held(flat), [40], [1]), "out": out[:1]})
    empty = RunIds(np.zeros(0, np.int64), np.zeros(0, np.int64), 0, np.int32)
    graph.addVertices(
        cs, cls, [1, 2], {"in": RunSegments(x, empty, [0, 0], [1, 1]), "out": out[1:]}
    )
    groups = build_table(graph._state, graph._state.compute_sets[cs.id]).groups
    (ft,) = [f for f in groups[0].fields if f.spec.name == "in"]
    assert ft.ref_runs is not None
    assert (ft.ref_runs[1] - ft.ref_runs[0]).tolist() == [40]
    assert ft.bounds.tolist() == [0, 40, 40, 40]
    graph.setInitialValues(x, np.arange(40, dtype=np.float32))
    graph.createHostRead("out", out)
    engine = Engine(graph, Execute(cs))
    engine.load(IPUModel("tiny").createDevice())
    engine.run(0)
    got = np.zeros(3, np.float32)
    engine.readTensor("out", got)
    assert got.tolist() == [float(np.arange(40).sum()), 0.0, 0.0]
