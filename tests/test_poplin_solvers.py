"""poplin matrix-solver codelets (TriangularInverse, Cholesky, TriangularSolve).

Expected cycle counts are typed here from the Poplibs sources, without calling the
project's estimator: ``lib/poplin/poplinCycleEstimators.cpp``, functions
``MAKE_PERF_ESTIMATOR_NAME(TriangularInverse)``, ``(Cholesky)`` and
``(TriangularSolve)``, at graphcore/poplibs@1e4ea3b2 (v1) and @f9273583 (v2); ``//``
stands for the C++ unsigned/int division of each term. Values are checked against
numpy/scipy on well-conditioned random inputs.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
from codelets_common import mapped, tiny_device, tiny_graph

from poplar_api import FLOAT, HALF, INT, Device, Engine, Graph, IPUModel, Tensor
from poplar_api import program as prog
from poplar_api.codelet import vertex_type
from poplar_api.errors import CodeletError, TensorError, TypeMismatchError
from poplar_api.poplin import solvers
from poplar_api.poplin.solvers import (
    choleskyBlockInPlace,
    poplibs_cycles,
    solver_vertex,
    triangularInverseBlock,
    triangularSolveBlock,
)

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "tests" / "data" / "calibration" / "measurements.csv"
RNG = np.random.default_rng(2021)

# (version, codelet, dtype, lower) -> the C++ expression, typed from the source.
HAND = {
    ("v1", "TriangularInverse", "half", True):
        lambda d: 7 * d * d * d + 387 * d * d // 2 + 272 * d - 120,
    ("v1", "TriangularInverse", "half", False):
        lambda d: 7261 * d * d * d // 1024 + 14163 * d * d // 128 + 2099 * d // 4 - 1326,
    ("v1", "TriangularInverse", "float", True):
        lambda d: 6 * d * d * d + 264 * d * d + 78 * d - 120,
    ("v1", "TriangularInverse", "float", False):
        lambda d: 6 * d * d * d + 51 * d * d + 213 * d + 12,
    ("v1", "Cholesky", "half", True):
        lambda d: 311 * d * d * d // 64 + 1059 * d * d // 8 + 43 * d + 648,
    ("v1", "Cholesky", "half", False):
        lambda d: 6 * d * d * d + 249 * d * d // 2 + 165 * d + 72,
    ("v1", "Cholesky", "float", True): lambda d: 4 * d * d * d + 72 * d * d + 140 * d + 84,
    ("v1", "Cholesky", "float", False): lambda d: 5 * d * d * d + 66 * d * d + 97 * d + 48,
    ("v1", "TriangularSolve", "half", True): lambda a: 15 * a * a + 144 * a + 12,
    ("v1", "TriangularSolve", "half", False): lambda a: 24 * a * a + 153 * a + 60,
    ("v1", "TriangularSolve", "float", True): lambda a: 12 * a * (a + 5),
    ("v1", "TriangularSolve", "float", False): lambda a: 21 * a * a + 69 * a + 90,
    ("v2", "TriangularInverse", "half", True):
        lambda d: 7 * d * d * d + 387 * d * d // 2 + 272 * d - 120,
    ("v2", "TriangularInverse", "half", False):
        lambda d: 7 * d * d * d + 123 * d * d + 269 * d - 24,
    ("v2", "TriangularInverse", "float", True):
        lambda d: 6 * d * d * d + 264 * d * d + 78 * d - 120,
    ("v2", "TriangularInverse", "float", False):
        lambda d: 6 * d * d * d + 51 * d * d + 213 * d + 12,
    ("v2", "Cholesky", "half", True):
        lambda d: d * d * d // 2 + 795 * d * d // 4 + 191 * d // 2 + 426,
    ("v2", "Cholesky", "half", False):
        lambda d: d * d * d // 2 + 795 * d * d // 4 + 191 * d // 2 + 426,
    ("v2", "Cholesky", "float", True): lambda d: d * d * d + 102 * d * d + 101 * d + 102,
    ("v2", "Cholesky", "float", False): lambda d: d * d * d + 102 * d * d + 101 * d + 102,
    ("v2", "TriangularSolve", "half", True): lambda a: 3 * a * a // 4 + 318 * a - 150,
    ("v2", "TriangularSolve", "half", False): lambda a: 135 * a * a // 16 + 1089 * a // 4 + 12,
    ("v2", "TriangularSolve", "float", True): lambda a: 3 * a * a // 2 + 180 * a - 126,
    ("v2", "TriangularSolve", "float", False): lambda a: 27 * a * a // 4 + 327 * a // 2 + 54,
}  # fmt: skip


@pytest.mark.parametrize("key", sorted(HAND), ids=lambda k: ".".join(map(str, k)))
@pytest.mark.parametrize("n", [5, 24, 100])  # between, off and beyond the fitted samples
def test_estimator_is_the_poplibs_polynomial(key, n):
    version, codelet, dtype, lower = key
    assert poplibs_cycles(codelet, dtype, lower, n, version) == HAND[key](n)


def test_estimator_numbers_written_out():
    # A few evaluated fully by hand.
    # v1 TriangularInverse<half,false>, dim 8: 3630 + 7081 + 4198 - 1326 (truncated terms);
    # the fitted polynomial (the CSV) gives 13584.
    assert poplibs_cycles("TriangularInverse", HALF, False, 8, "v1") == 13583
    # v2 TriangularSolve<float,true>, an 16: 384 + 2880 - 126.
    assert poplibs_cycles("TriangularSolve", FLOAT, True, 16, "v2") == 3138
    # v2 Cholesky<half,*>, dim 8: 256 + 12720 + 764 + 426.
    assert poplibs_cycles("Cholesky", HALF, True, 8, "v2") == 14166
    assert poplibs_cycles("Cholesky", HALF, False, 8, "v2") == 14166
    # v1 TriangularSolve<float,true>, an 32: 12 * 32 * 37.
    assert poplibs_cycles("TriangularSolve", FLOAT, True, 32, "v1") == 14208
    # default version is v2: v2 TriangularInverse<half,false>, dim 16: 28672+31488+4304-24.
    assert poplibs_cycles("TriangularInverse", HALF, False, 16) == 64440


def test_vertex_estimate_is_thread_cycles_of_the_tile_polynomial():
    target = IPUModel("tiny").createDevice().getTarget()
    assert target.getNumWorkerContexts() == 6
    vt = vertex_type(solver_vertex("TriangularInverse", HALF, False, "v1"))
    assert vt.name == "poplin::TriangularInverse<half,false>"
    assert vt.estimate({"in": 64, "out": 64}, target) == math.ceil(13583 / 6) == 2264
    vt = vertex_type(solver_vertex("TriangularSolve", FLOAT, True))
    assert vt.name == "poplin::TriangularSolve<float,true>"
    assert vt.estimate({"a": 256, "b": 16, "x": 16}, target) == 3138 // 6 == 523
    vt = vertex_type(solver_vertex("Cholesky", FLOAT, False, "v1"))
    assert vt.estimate({"in": 25}, target) == math.ceil((625 + 1650 + 485 + 48) / 6)


# ----------------------------------------------------------------------- values
def _engine_run(graph, seq, device, writes, read):
    graph.createHostRead("res", read)
    engine = Engine(graph, seq)
    engine.load(device)
    for k, v in writes.items():
        engine.writeTensor(k, v)
    engine.run(0)
    return engine.readTensor("res").astype(np.float64), engine


TOL = {FLOAT: 1e-5, HALF: 2e-2}


def _host_block(t, n: int, tile: int) -> tuple[Device, Graph, Tensor]:
    """A tiny device, a graph for it and its ``n x n`` block ``a`` of type ``t`` on
    ``tile``, written from the host as ``"a"``."""
    device = tiny_device()
    graph = Graph(device.getTarget())
    a = mapped(graph, t, [n, n], "a", tile)
    graph.createHostWrite("a", a)
    return device, graph, a


@pytest.mark.parametrize("t", [FLOAT, HALF], ids=str)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("n", [1, 6, 17])
def test_triangular_inverse_values(t, lower, n):
    device, graph, a = _host_block(t, n, tile=3)
    seq = prog.Sequence()
    out = triangularInverseBlock(graph, a, lower, seq, "ti")
    host = (RNG.uniform(-0.5, 0.5, (n, n)) / n + np.diag(RNG.uniform(1, 2, n))).astype(t.numpy)
    got, _ = _engine_run(graph, seq, device, {"a": host}, out)
    tri = np.tril(host.astype(np.float64)) if lower else np.triu(host.astype(np.float64))
    want = np.linalg.inv(tri)  # zero outside the triangle up to rounding
    np.testing.assert_allclose(got, want, rtol=TOL[t], atol=TOL[t])
    other = np.triu(got, 1) if lower else np.tril(got, -1)
    assert not other.any()  # exactly zero, as the codelet writes


@pytest.mark.parametrize("t", [FLOAT, HALF], ids=str)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("n", [1, 5, 16])
def test_cholesky_values_in_place(t, lower, n):
    device, graph, a = _host_block(t, n, tile=0)
    seq = prog.Sequence()
    choleskyBlockInPlace(graph, a, lower, seq, "chol", estimatorVersion="v1")
    m = RNG.uniform(-1, 1, (n, n))
    spd = m @ m.T / n + np.eye(n)
    # only one triangle is read: put garbage in the other, which must stay as it was
    host = (
        np.tril(spd) + np.triu(RNG.uniform(5, 9, (n, n)), 1)
        if lower
        else (np.triu(spd) + np.tril(RNG.uniform(5, 9, (n, n)), -1))
    )
    host = host.astype(t.numpy)
    got, _ = _engine_run(graph, seq, device, {"a": host}, a)
    h = host.astype(np.float64)
    sym = np.tril(h) + np.tril(h, -1).T if lower else np.triu(h) + np.triu(h, 1).T
    factor = scipy.linalg.cholesky(sym, lower=lower)
    tri, rest = (np.tril, np.triu) if lower else (np.triu, np.tril)
    np.testing.assert_allclose(tri(got), factor, rtol=TOL[t], atol=TOL[t])
    k = 1 if lower else -1
    np.testing.assert_array_equal(rest(got, k), rest(h, k))


def test_cholesky_of_a_non_positive_definite_block_is_nan():
    device, graph, a = _host_block(FLOAT, 2, tile=0)
    seq = prog.Sequence()
    choleskyBlockInPlace(graph, a, True, seq)
    got, _ = _engine_run(graph, seq, device, {"a": np.array([[1, 0], [3, 1]], np.float32)}, a)
    assert np.isnan(got[1, 1])


@pytest.mark.parametrize("t", [FLOAT, HALF], ids=str)
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("n", [1, 7, 16])
def test_triangular_solve_values_unit_diagonal(t, lower, n):
    device, graph, a = _host_block(t, n, tile=2)
    b = mapped(graph, t, [n], "b", 2)
    graph.createHostWrite("b", b)
    seq = prog.Sequence()
    x = triangularSolveBlock(graph, a, b, lower, seq, "ts")
    # the diagonal is never read: make it large so using it would show
    host_a = (RNG.uniform(-1, 1, (n, n)) / n + 50 * np.eye(n)).astype(t.numpy)
    host_b = RNG.uniform(-1, 1, n).astype(t.numpy)
    got, engine = _engine_run(graph, seq, device, {"a": host_a, "b": host_b}, x)
    h = host_a.astype(np.float64)
    unit = (np.tril(h, -1) if lower else np.triu(h, 1)) + np.eye(n)
    want = np.linalg.solve(unit, host_b.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=TOL[t], atol=TOL[t])
    rec = next(r for r in engine.getTrace().records if r.name == "ts/triangularSolve")
    hand = HAND[("v2", "TriangularSolve", t.name, lower)](n)
    assert int(rec.tile_cycles[2]) == 6 * math.ceil(hand / 6)


# ----------------------------------------------------------------------- errors
def _graph_with(shape, t=FLOAT, name="a"):
    graph = tiny_graph()
    return graph, mapped(graph, t, shape, name)


def test_non_square_input_is_rejected_naming_it():
    graph, a = _graph_with([4, 5])
    with pytest.raises(TensorError, match=r"a 'a' has shape \[4, 5\].*square"):
        triangularInverseBlock(graph, a, True, prog.Sequence())
    graph, a = _graph_with([16])
    with pytest.raises(TensorError, match=r"shape \[16\].*\[n, n\]"):
        choleskyBlockInPlace(graph, a, True, prog.Sequence())


def test_wrongly_sized_rhs_and_types_are_rejected():
    graph, a = _graph_with([4, 4])
    b = graph.addVariable(FLOAT, [3], "rhs")
    graph.setTileMapping(b, 0)
    with pytest.raises(TensorError, match=r"b 'rhs' has shape \[3\]; it must be \[4\]"):
        triangularSolveBlock(graph, a, b, True, prog.Sequence())
    h = graph.addVariable(HALF, [4], "hb")
    graph.setTileMapping(h, 0)
    with pytest.raises(TypeMismatchError, match="a is float, b is half"):
        triangularSolveBlock(graph, a, h, True, prog.Sequence())
    graph, i = _graph_with([4, 4], INT, "ints")
    with pytest.raises(TypeMismatchError, match="'ints' is int; it must be float or half"):
        triangularInverseBlock(graph, i, True, prog.Sequence())


def test_bad_version_size_and_field_sizes():
    graph, a = _graph_with([4, 4])
    with pytest.raises(ValueError, match=r"version='v3'.*'v1', 'v2'"):
        triangularInverseBlock(graph, a, True, prog.Sequence(), estimatorVersion="v3")
    with pytest.raises(ValueError, match="n=0 must be an int >= 1"):
        poplibs_cycles("Cholesky", FLOAT, True, 0)
    with pytest.raises(ValueError, match="codelet='QR'"):
        poplibs_cycles("QR", FLOAT, True, 4)
    target = IPUModel("tiny").createDevice().getTarget()
    vt = vertex_type(solver_vertex("Cholesky", FLOAT, True))
    with pytest.raises(CodeletError, match="field 'in' has 10 elements"):
        vt.estimate({"in": 10}, target)
    vt = vertex_type(solver_vertex("TriangularSolve", HALF, False))
    with pytest.raises(CodeletError, match="a=16, b=4, x=3"):
        vt.estimate({"a": 16, "b": 4, "x": 3}, target)


# --------------------------------------------------------------------- workload
def test_points_cover_every_k_row_with_its_parameters():
    import sys

    sys.path.insert(0, str(ROOT / "examples" / "calibration"))
    import points

    module = points.load(ROOT / "examples" / "calibration" / "k_matrix_solver.py")
    with open(CSV, newline="", encoding="utf-8") as f:
        rows = {r["id"]: r for r in csv.DictReader(f) if r["id"].startswith("K-")}
    assert len(rows) == 68 and set(module.POINTS) == set(rows)
    assert module.POINTS["K-v1.TriangularInverse.half.upper.32"] == {
        "codelet": "TriangularInverse", "dtype": "half", "lower": False, "size": 32,
        "version": "v1",
    }  # fmt: skip
    assert module.POINTS["K-v2.Cholesky.float.both.16"]["lower"] is True
    assert {r["metric"] for r in rows.values()} == {"step_cycles"}


def test_workload_small_on_tiny():
    from ipusim.runner import run_workload

    path = str(ROOT / "examples" / "calibration" / "k_matrix_solver.py")
    result = run_workload(path, "tiny", {"codelet": "Cholesky", "dtype": "half", "size": 8})
    assert result.ok in (None, True)
    assert math.isfinite(result.metrics["step_cycles"])
    # v2 Cholesky<half>, dim 8, by hand: 256 + 12720 + 764 + 426 = 14166 = 6 * 2361.
    assert result.metrics["step_cycles"] == 14166
    assert solvers.VERSIONS["v2"].startswith("graphcore/poplibs@f9273583")
