"""D: UCL-RITS ``pi`` (C++ codelet): one plain vertex per tile on every tile, each
summing ``4 / (1 + x^2)`` over its ``n`` midpoints in float32.

Rebuilt: the graph (one :class:`PiVertex` per tile, its partial sum on the tile, one
compute set) and the loop itself (the kernel runs). Approximated: the cycles of the
compiled ``-O3`` loop are not known to ``poplar_api``; the vertex estimate is an
instruction count of the loop body, :data:`ISSUE_SLOTS_PER_ITERATION` worker
instructions per iteration (an estimate to calibrate, not the measured slope) plus
:data:`FIXED_INSTRUCTIONS`. ``vertex_loop_cycles`` = the maximum over tiles of the
compute set's tile cycles (a lone worker issues every 6 tile cycles).
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, UNSIGNED_INT, Device, Graph, Input, Output, Vector, Vertex
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "bow"
TEST_CONFIG = "tiny"
NAME = "pi"
#: estimate: loop counter add, compare-branch, int->float convert, sub, mul (slice),
#: mul (x*x), add (1 + x^2), divide (reciprocal + 2 Newton steps, ~4), accumulate.
ISSUE_SLOTS_PER_ITERATION = 12
#: estimate: prologue/epilogue of the vertex (argument loads, store, return).
FIXED_INSTRUCTIONS = 14

POINTS: dict[str, dict] = {"D1.n1000": {"n": 1000}, "D1.n2917776": {"n": 2917776}}


class PiVertex(Vertex):
    """``sum[0]`` = sum over j in [first, first+n) of 4 / (1 + x^2), x = (j - 0.5) * step."""

    first = Input(Vector(UNSIGNED_INT))
    step = Input(FLOAT)
    sum = Output(FLOAT)

    @staticmethod
    def compute(first, step, sum):
        total = np.float32(0.0)
        for j in range(first[0], first[0] + first[1]):
            x = (np.float32(j) - np.float32(0.5)) * step[0]
            total += np.float32(4.0) / (np.float32(1.0) + x * x)
        sum[0] = total
        return True


def loop_cycles(n: int) -> int:
    """Worker (thread) cycles of the estimate for ``n`` iterations."""
    return ISSUE_SLOTS_PER_ITERATION * n + FIXED_INSTRUCTIONS


def workload(device: Device, n: int = 100, tiles: int = 0) -> Workload:
    """pi by the midpoint rule, ``n`` points per tile on ``tiles`` tiles (0 = all)."""
    graph = Graph(device.getTarget())
    tiles = tiles or graph.getTarget().getNumTiles()
    graph.addCodelets(PiVertex)
    sums = graph.addVariable(FLOAT, [tiles], "sums")
    ranges = graph.addConstant(
        UNSIGNED_INT, [tiles, 2], np.array([[t * n, n] for t in range(tiles)]), "ranges"
    )
    step = np.float32(1.0 / (tiles * n))
    cs = graph.addComputeSet(NAME)
    for t in range(tiles):
        st = graph.addConstant(FLOAT, [1], [step], f"step{t}")
        for x in (sums[t], ranges[t], st):
            graph.setTileMapping(x, t)
        v = graph.addVertex(cs, "PiVertex", {"first": ranges[t], "step": st[0], "sum": sums[t]})
        graph.setTileMapping(v, t)
        graph.setPerfEstimate(v, loop_cycles(n))
    graph.createHostRead("sums", sums)

    def check(engine) -> bool:
        return abs(float(engine.readTensor("sums").astype(np.float64).sum() * step) - np.pi) < 1e-2

    def metrics(engine, trace: Trace) -> dict[str, float]:
        rec = next(r for r in trace.records if r.kind == "compute" and r.name == NAME)
        return {"vertex_loop_cycles": float(rec.tile_cycles.max())}

    return Workload(graph, prog.Execute(cs), check=check, metrics=metrics)
