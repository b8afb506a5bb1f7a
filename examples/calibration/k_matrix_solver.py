"""K: Poplibs matrix-solver codelets: one ``TriangularInverse`` / ``Cholesky`` /
``TriangularSolve`` vertex on one tile.

Rebuilt: the compute set of one ``poplin::<codelet><type,lower>`` worker vertex
(:mod:`poplar_api.poplin.solvers`) over a ``size x size`` block on tile 0, with the
Poplibs estimator of the row's version (``v1`` = poplibs@1e4ea3b2, ``v2`` =
poplibs@f9273583). ``step_cycles`` = the tile's cycles in that compute set, read from the
trace, the counterpart of the profile step ``.../triangularInverse``, ``.../cholesky``
or ``.../triangularSolve`` that Poplibs measured on hardware with ``tools/matrix_solver``
(TriangularInverse rows ran with ``a_rank = 2 * block_size``; only the block size
matters to the codelet). The values are checked against numpy/scipy.

Honest scope: the Poplibs estimator *was fitted to these very measurements*
(``tools/generate_cycle_estimate.py`` drew a Lagrange polynomial through them), so this
source checks the plumbing -- the vertex chosen, its sizes, and what the machine adds to
a one-vertex compute set -- not the simulator's fidelity. The vertex reports
``ceil(polynomial / contexts)`` thread cycles (the polynomial is a lone worker's tile
cycles; see the solvers module), so the simulated step is the polynomial plus up to
``contexts - 1`` cycles of rounding, the per-vertex launch and the per-step costs of the
config; ``TriangularInverse<half,false>`` v1 at 8 also differs by 1 because Poplibs
truncates each term of the polynomial in integer arithmetic.

v2 rows exist only for the polynomials the v2 commit changed; its Cholesky rows are
``lower_upper=both`` (one polynomial), rebuilt with ``Cholesky<T,true>``, the instance the
v2 library always uses.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, HALF, Device, Engine, Graph
from poplar_api import program as prog
from poplar_api.poplin import solvers
from poplar_api.workload import Workload

CONFIG = "mk2"
TEST_CONFIG = "tiny"
NAME = "solver"
STEPS = {
    "TriangularInverse": "triangularInverse",
    "Cholesky": "cholesky",
    "TriangularSolve": "triangularSolve",
}
_CSV = Path(__file__).resolve().parents[2] / "tests" / "data" / "calibration" / "measurements.csv"


def _points() -> dict[str, dict]:
    """Every ``K-`` row of the calibration CSV -> workload parameters."""
    out: dict[str, dict] = {}
    with open(_CSV, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            if not row["id"].startswith("K-"):
                continue
            p = dict(kv.split("=", 1) for kv in row["parameters"].split(";"))
            codelet = p["codelet"]
            size = p["block_size"] if codelet == "TriangularInverse" else p["a_rank"]
            out[row["id"]] = {
                "codelet": codelet,
                "dtype": p["dtype"],
                "lower": p["lower_upper"] != "upper",  # "both" (v2 Cholesky): lower
                "size": int(size),
                "version": row["id"].split(".")[0].removeprefix("K-"),
            }
    return out


POINTS: dict[str, dict] = _points()


def _inputs(codelet: str, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Well-conditioned inputs: a diagonally dominant triangle, an SPD matrix, a vector."""
    m = rng.uniform(-0.5, 0.5, (n, n)) / n
    if codelet == "TriangularInverse":
        return {"a": m + np.diag(rng.uniform(1.0, 2.0, n))}
    if codelet == "Cholesky":
        return {"a": m @ m.T + np.eye(n)}
    return {"a": m + np.eye(n), "b": rng.uniform(-1.0, 1.0, n)}


def _expected(codelet: str, lower: bool, ins: dict[str, np.ndarray]) -> np.ndarray:
    a = ins["a"]
    tri = np.tril(a) if lower else np.triu(a)
    if codelet == "TriangularInverse":
        return np.linalg.inv(tri)
    if codelet == "Cholesky":
        low = np.linalg.cholesky(a)
        rest = np.triu(a, 1) if lower else np.tril(a, -1)
        return low + rest if lower else low.T + rest
    unit = tri - np.diag(np.diag(tri)) + np.eye(a.shape[0])
    return np.linalg.solve(unit, ins["b"])


def workload(
    device: Device,
    codelet: str = "TriangularSolve",
    dtype: str = "float",
    lower: bool = True,
    size: int = 16,
    version: str = "v2",
    tile: int = 0,
) -> Workload:
    """One ``poplin::<codelet><dtype,lower>`` vertex over a ``size`` block on ``tile``."""
    if codelet not in STEPS or dtype not in ("float", "half"):
        raise ValueError(
            f"k_matrix_solver: codelet={codelet!r}, dtype={dtype!r}; expected codelet in "
            f"{sorted(STEPS)} and dtype 'float' or 'half'"
        )
    t = FLOAT if dtype == "float" else HALF
    graph = Graph(device.getTarget())
    a = graph.addVariable(t, [size, size], "a")
    graph.setTileMapping(a, tile)
    graph.createHostWrite("a", a)
    seq = prog.Sequence()
    ins = _inputs(codelet, size, np.random.default_rng(size))
    kw = {"estimatorVersion": version, "tile": tile}
    if codelet == "TriangularInverse":
        result = solvers.triangularInverseBlock(graph, a, lower, seq, NAME, **kw)
    elif codelet == "Cholesky":
        solvers.choleskyBlockInPlace(graph, a, lower, seq, NAME, **kw)
        result = a
    else:
        b = graph.addVariable(t, [size], "b")
        graph.setTileMapping(b, tile)
        graph.createHostWrite("b", b)
        result = solvers.triangularSolveBlock(graph, a, b, lower, seq, NAME, **kw)
    graph.createHostRead("result", result)
    host = {k: v.astype(t.numpy) for k, v in ins.items()}
    want = _expected(codelet, lower, {k: v.astype(np.float64) for k, v in host.items()})
    rtol = 1e-5 if t is FLOAT else 2e-2

    def prepare(engine: Engine) -> None:
        for k, v in host.items():
            engine.writeTensor(k, v)

    def check(engine: Engine) -> bool:
        got = engine.readTensor("result").astype(np.float64)
        return bool(np.allclose(got, want, rtol=rtol, atol=rtol))

    def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
        name = f"{NAME}/{STEPS[codelet]}"
        steps = [r for r in trace.records if r.kind == "compute" and r.name == name]
        return {"step_cycles": float(sum(int(r.tile_cycles[tile]) for r in steps))}

    return Workload(graph, seq, prepare=prepare, check=check, metrics=metrics)
