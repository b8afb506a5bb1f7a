"""A tiny workload for the calibration tests: stream ``n`` floats in, sum them on 7 tiles.

``x`` (``n`` floats) lives on tile 0 and is streamed from the host; one SumVertex per
tile 1..7 reads all of ``x`` (an on-chip exchange of ``4 n`` bytes, broadcast from
tile 0), and the sums go back to the host. So the run has host exchange, internal
exchange, compute and syncs, each scaling with ``n``.
"""

from __future__ import annotations

import numpy as np

from poplar_api import FLOAT, Graph
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.device import Device
from poplar_api.engine import Engine
from poplar_api.workload import Workload

READERS = 7


class CalibSumVertex(Vertex):
    """``out`` = sum of ``in``."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        s = np.float32(0.0)
        for i in range(in_.shape[0]):
            s += in_[i]
        out[0] = s
        return True


def workload(device: Device, n: int = 64) -> Workload:
    """Sum ``n`` streamed floats on tiles 1..7 and stream the 7 sums back."""
    graph = Graph(device.getTarget())
    graph.addCodelets(CalibSumVertex)
    x = graph.addVariable(FLOAT, [n], "x")
    y = graph.addVariable(FLOAT, [READERS], "y")
    graph.setTileMapping(x, 0)
    cs = graph.addComputeSet("sum")
    for k in range(READERS):
        graph.setTileMapping(y[k], k + 1)
        v = graph.addVertex(cs, "CalibSumVertex", {"in": x, "out": y[k]})
        graph.setTileMapping(v, k + 1)
        graph.setPerfEstimate(v, 10 + n)
    in_stream = graph.addHostToDeviceFIFO("x-in", FLOAT, n)
    out_stream = graph.addDeviceToHostFIFO("y-out", FLOAT, READERS)
    program = prog.Sequence([prog.Copy(in_stream, x), prog.Execute(cs), prog.Copy(y, out_stream)])
    data = np.arange(n, dtype=np.float32)
    result = np.zeros(READERS, np.float32)

    def prepare(engine: Engine) -> None:
        engine.connectStream("x-in", data)
        engine.connectStream("y-out", result)

    def check(engine: Engine) -> bool:
        return bool(np.allclose(result, data.sum()))

    def metrics(engine: Engine, trace) -> dict[str, float]:
        """``exchange_cycles``: the slowest tile's cycles in the compute set's exchange."""
        steps = [r for r in trace.records if r.kind == "exchange" and r.name.startswith("sum")]
        return {"exchange_cycles": float(sum(int(r.tile_cycles.max()) for r in steps))}

    return Workload(graph, program, prepare=prepare, check=check, metrics=metrics)
