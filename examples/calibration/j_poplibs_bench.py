"""J: Poplibs benchmark table (IPU Model Mk1/Mk2): GEMM and BERT reductions.

GEMM rebuilt as Poplibs' ``tools/general_matrix_multiply.cpp`` (f927358) builds it:
half ``A[m,k]`` and ``B[k,n]`` (laid out by ``createMatMulInputLHS/RHS``),
``D = poplin.matMul(A, B)``, half ``C[m,n]`` cloned from ``D`` (the tool's
``graph.clone(outputType, matAxB)``: same tile mapping), then
``popops.scaledAddTo(C, D, 1)`` (alpha = beta = 1), no host transfers
(``--ignore-data``). bert_reduce rebuilt: half input mapped linearly over the first
``tiles`` tiles, ``popops.reduce`` over ``dims`` with ``op`` (scale 1, no update).
Metric ``total_cycles`` = the run's total cycles. Approximated: our ``matMul``
planner and ``reduce`` are not Poplibs' (plans differ, so totals differ by the plan,
not only by the timing model); ``.ipum1`` rows run on the IPU Model preset
``mk1-ipumodel``, ``.ipum2`` on ``mk2-ipumodel``, each compiled with
``debug.allowOutOfMemory`` (a plan of ours may not fit where Poplibs' does).
"""

from __future__ import annotations

import csv
from pathlib import Path

from ipusim.trace import Trace
from poplar_api import HALF, Device, Graph, poplin, popops, poputil
from poplar_api import program as prog
from poplar_api.popops import Operation
from poplar_api.workload import Workload

CONFIG = "mk2"
TEST_CONFIG = "tiny"

_GEMM = {
    1: (1000, 256, 10000), 2: (1000, 256, 20000), 3: (1000, 256, 30000),
    4: (1000, 512, 10000), 5: (1000, 512, 20000), 6: (1000, 512, 30000),
    7: (1000, 64, 10000), 8: (1000, 64, 20000), 9: (1000, 64, 30000),
    10: (200, 256, 10000), 11: (200, 256, 20000), 12: (200, 256, 30000),
    13: (200, 512, 10000), 14: (200, 512, 20000), 15: (200, 512, 30000),
    16: (200, 64, 10000), 17: (200, 64, 20000), 18: (200, 64, 30000),
    19: (600, 256, 10000), 20: (600, 256, 20000), 21: (600, 256, 30000),
    22: (600, 512, 10000), 23: (600, 512, 20000), 24: (600, 512, 30000),
    25: (600, 64, 10000), 26: (600, 64, 20000), 27: (600, 64, 30000),
}  # fmt: skip
_REDUCE = {
    1: ([16, 4, 16, 32, 8], [1, 3], "MAX", 1024),
    2: ([16, 4, 16, 32, 8], [1, 3], "ADD", 1024),
    3: ([16, 256, 8, 4], [1, 3], "ADD", 1024),
    4: ([16, 256, 8, 4], [1, 3], "SQUARE_ADD", 1024),
    5: ([128, 16, 8, 16], [0, 2], "ADD", 0),
}
POINTS: dict[str, dict] = {}
POINT_CONFIGS: dict[str, str] = {}
for _model, _preset in (("ipum1", "mk1-ipumodel"), ("ipum2", "mk2-ipumodel")):
    for _i, (_m, _k, _n) in _GEMM.items():
        POINTS[f"J-gemm-{_i}.{_model}"] = {"kind": "gemm", "m": _m, "k": _k, "n": _n}
        POINT_CONFIGS[f"J-gemm-{_i}.{_model}"] = _preset
    for _i, (_shape, _dims, _op, _tiles) in _REDUCE.items():
        row = f"J-bert_reduce-{_i}.{_model}"
        POINTS[row] = {"kind": "reduce", "shape": _shape, "dims": _dims, "op": _op, "tiles": _tiles}
        POINT_CONFIGS[row] = _preset


def metrics(engine, trace: Trace) -> dict[str, float]:
    """The run's total cycles (``executionProfile.simulation.cycles``)."""
    return {"total_cycles": float(trace.total_cycles)}


def workload(
    device: Device,
    kind: str = "gemm",
    m: int = 16,
    k: int = 16,
    n: int = 64,
    shape: list | None = None,
    dims: list | None = None,
    op: str = "ADD",
    tiles: int = 0,
) -> Workload:
    """A GEMM ``C += A B`` (``kind='gemm'``) or a reduction (``kind='reduce'``); ``tiles``
    0 means every tile.

    The run ends with the engine's end-of-run sync, as Poplar's does; on the IPU Model
    presets every sync pays their default sync delay, fitted on these reductions
    (``_fit_ipumodel_sync.py``; docs/reductions.md, "J-bert_reduce residuals").
    """
    graph = Graph(device.getTarget())
    seq = prog.Sequence()
    if kind == "gemm":
        a = poplin.createMatMulInputLHS(graph, HALF, [m, k], [k, n], "A")
        b = poplin.createMatMulInputRHS(graph, HALF, [m, k], [k, n], "B")
        d = poplin.matMul(graph, a, b, seq, "gemm")
        # the tool clones C from the product (``graph.clone(outputType, matAxB)``), so
        # the update C += A B reads and writes where the product lies: no exchange
        c = poputil.cloneTensor(graph, d, "C")
        popops.scaledAddTo(graph, c, d, 1.0, seq, "gemm/update")
    elif kind == "reduce":
        shape = shape or [4, 8, 16]
        dims = dims or [1]
        sub = graph if not tiles else graph.createVirtualGraph(0, tiles)
        x = sub.addVariable(HALF, list(shape), "in")
        # Poplibs' mapTensorLinearly(graph, t) default (calcLinearTileMapping by type):
        # grains of the vector width, at least 128 bytes per tile
        target = sub.getTarget()
        poputil.mapTensorLinearly(sub, x, -(-128 // target.getTypeSize(HALF)),
                                  target.getVectorWidth(HALF))  # fmt: skip
        popops.reduce(sub, x, list(dims), Operation[op], seq, "reduce")
    else:
        raise ValueError(f"j_poplibs_bench: kind={kind!r}; expected 'gemm' or 'reduce'")
    # ipusim's matMul planner is not Poplibs': a plan that does not fit a Mk1 tile is
    # still timed (its memory report says by how much it overflows)
    return Workload(graph, seq, metrics=metrics, options={"debug.allowOutOfMemory": "true"})


def _check_table() -> None:  # pragma: no cover - a maintenance aid
    """Print POINTS rows whose sizes disagree with measurements.csv."""
    path = (
        Path(__file__).resolve().parents[2] / "tests" / "data" / "calibration" / "measurements.csv"
    )
    for r in csv.DictReader(path.open()):
        if r["id"] in POINTS and POINTS[r["id"]]["kind"] == "gemm":
            p = POINTS[r["id"]]
            if f"m={p['m']};k={p['k']};n={p['n']}" not in r["parameters"]:
                print("mismatch", r["id"])


if __name__ == "__main__":  # pragma: no cover
    _check_table()
