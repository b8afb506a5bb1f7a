"""PF: TessellateIPU "IPU Peak Flops": one AMP ``ConvPartial1x1Out`` vertex per tile,
fp16 ``[N,16] x [16,16]`` (rhs contracted on its second axis), on all 1472 tiles of a Bow.

The vertex is the one the notebook ran, ``poplin::ConvPartial1x1Out<half,half,true,true,
16,4,false>`` (:mod:`poplar_api.poplin.amp`), one per tile with its own worklist (the N
rows split evenly over the 6 workers, as tessellate-ipu splits them); its values are
computed and its cycles are the Poplibs estimator for that worklist.

Metrics, as PF computed them: the notebook's cycles are the per-tile counter difference
minus the 45-cycle counter read, i.e. the vertex call including the compute set's fixed
costs on the machine. Here ``cycles_per_call`` is the simulated cycles of the compute
set on the preset (every trace step of the compute set, per tile, averaged over the
tiles used) and ``throughput`` = ``2 N 16 16 tiles / (cycles_per_call / clock) / 1e12``
TFLOPS. ``vertex_cycles`` is the vertex estimate alone.
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import HALF, Device, Graph
from poplar_api import program as prog
from poplar_api.poplin.amp import add_conv_partial_1x1_out, conv_partial_1x1_out_vertex
from poplar_api.workload import Workload

CONFIG = "bow"
TEST_CONFIG = "tiny"
K = M = 16
NAME = "amp_matmul"

POINTS: dict[str, dict] = {f"PF.N{n}": {"n": n} for n in (16, 64, 256, 1024, 2048)}


def compute_set_cycles(trace: Trace, name: str, tiles: int) -> float:
    """Mean over the first ``tiles`` tiles of the cycles of every step of compute set
    ``name`` (the compute step and any sync or exchange it lowered to)."""
    steps = [r for r in trace.records if r.name == name or r.name.startswith(name + "/")]
    if not steps:
        raise ValueError(f"no trace step of compute set {name!r}")
    per_tile = np.sum([r.tile_cycles[:tiles] for r in steps], axis=0)
    return float(np.mean(per_tile))


def workload(device: Device, n: int = 16, tiles: int = 0) -> Workload:
    """``out[t] = lhs[t] @ rhs[t].T`` on every tile (``tiles`` 0 = all)."""
    graph = Graph(device.getTarget())
    tiles = tiles or graph.getTarget().getNumTiles()
    lhs = graph.addVariable(HALF, [tiles, n, K], "lhs")
    rhs = graph.addVariable(HALF, [tiles, M, K], "rhs")
    out = graph.addVariable(HALF, [tiles, n, M], "out")
    cs = graph.addComputeSet(NAME)
    for t in range(tiles):
        for x in (lhs[t], rhs[t], out[t]):
            graph.setTileMapping(x, t)
        add_conv_partial_1x1_out(graph, cs, t, lhs[t], rhs[t], out[t], name=f"worklists{t}")
    sizes = {"in": [n * K], "weights": [M * K], "out": [n * M]}
    vertex_cycles = conv_partial_1x1_out_vertex(HALF, HALF).getCycleEstimate(
        {**sizes, "worklists": 3 * graph.getTarget().getNumWorkerContexts()}, graph.getTarget()
    )

    def metrics(engine, trace: Trace) -> dict[str, float]:
        cycles = compute_set_cycles(trace, NAME, tiles)
        flop = 2.0 * n * K * M * tiles
        return {
            "throughput": flop / (cycles / trace.clock_hz) / 1e12,
            "cycles_per_call": cycles,
            "vertex_cycles": float(vertex_cycles),
        }

    return Workload(graph, prog.Execute(cs), metrics=metrics)
