"""PF: TessellateIPU "IPU Peak Flops": one AMP ``ConvPartial1x1`` vertex per tile,
fp16 ``[N,16] x [16,16]``, on all 1472 tiles of a Bow IPU.

Approximated: ``poplar_api`` has no ``ConvPartial1x1`` vertex; the closest is
``poplin``'s AMP partial-matmul MultiVertex (``matmul_partial_vertex(HALF, HALF)``,
estimated with the AMP partial-matmul cost). One per tile, inputs on the tile, one
compute set. ``throughput`` (TFLOPS) = ``2 N 16 16 tiles`` flop over the mean over
tiles of the compute set's tile cycles at the tile clock, as the notebook computes it
(it subtracted the counter overhead, which ipusim does not model).
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import HALF, Device, Graph
from poplar_api import program as prog
from poplar_api.poplin.vertices import matmul_partial_vertex
from poplar_api.workload import Workload

CONFIG = "bow"
TEST_CONFIG = "tiny"
K = M = 16
NAME = "amp_matmul"

POINTS: dict[str, dict] = {f"PF.N{n}": {"n": n} for n in (16, 64, 256, 1024, 2048)}


def workload(device: Device, n: int = 16, tiles: int = 0) -> Workload:
    """``out[t] = lhs[t] @ rhs[t]`` on every tile (``tiles`` 0 = all)."""
    graph = Graph(device.getTarget())
    tiles = tiles or graph.getTarget().getNumTiles()
    cls = matmul_partial_vertex(HALF, HALF)
    lhs = graph.addVariable(HALF, [tiles, n, K], "lhs")
    rhs = graph.addVariable(HALF, [tiles, K, M], "rhs")
    out = graph.addVariable(HALF, [tiles, n, M], "out")
    cs = graph.addComputeSet(NAME)
    for t in range(tiles):
        for x in (lhs[t], rhs[t], out[t]):
            graph.setTileMapping(x, t)
        v = graph.addVertex(
            cs, cls, {"in": lhs[t].flatten(), "weights": rhs[t].flatten(), "out": out[t].flatten()}
        )
        graph.setTileMapping(v, t)

    def metrics(engine, trace: Trace) -> dict[str, float]:
        rec = next(r for r in trace.records if r.kind == "compute" and r.name == NAME)
        cycles = float(np.mean(rec.tile_cycles[:tiles]))
        flop = 2.0 * n * K * M * tiles
        return {"throughput": flop / (cycles / trace.clock_hz) / 1e12, "tile_cycles": cycles}

    return Workload(graph, prog.Execute(cs), metrics=metrics)
