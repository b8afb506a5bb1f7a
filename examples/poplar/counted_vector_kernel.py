"""The same codelet written scalar and with IPU vector instructions, counted on hardware.

STREAM Triad, ``a = b + 3 c``, on every worker of a (simulated) hardware IPU, with no
perf estimate: each vertex takes the cycles its kernel executes (counted execution,
docs/counted_cycles.md). ``ScalarTriad`` is the plain C++ loop (per element two
loads, a multiply, an add, a store and a loop step); ``VectorTriad`` is the
hand-written assembly of simehaa/IPU's ``TriadVertexAssembly``, written with
:mod:`poplar_api.ipu_intrinsics`: an ``rpt`` loop of one bundle per two floats
(``ld2xst64pace`` with ``f32v2axpy``). The program prints each kernel's compute cycles
and the operations counted.

Run::

    python examples/poplar/counted_vector_kernel.py [--n 7500] [--config mk2]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from poplar_api import FLOAT, DeviceManager, Engine, Graph, TargetType
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.counted import operationCounts
from poplar_api.ipu_intrinsics import f32v2axpy, ld2x64pace, ld2xst64pace, rpt, store_float2

#: The triad's scalar.
Q = 3.0


class ScalarTriad(Vertex):
    """``a[i] = b[i] + Q c[i]``, one float at a time."""

    a = Output(Vector(FLOAT))
    b = Input(Vector(FLOAT))
    c = Input(Vector(FLOAT))

    @staticmethod
    def compute(a, b, c):
        q = np.float32(Q)
        for i in range(a.shape[0]):
            a[i] = b[i] + q * c[i]
        return True


class VectorTriad(ScalarTriad):
    """The same, two floats per bundle of an ``rpt`` loop (``a``'s size even)."""

    @staticmethod
    def compute(a, b, c):
        pairs = a.shape[0] >> 1
        q = np.float32(Q)
        x = ld2x64pace(b, c, 0)
        r = f32v2axpy(q, x[1], x[0])
        for i in rpt(pairs - 1):
            x = ld2xst64pace(b, c, i + 1, a, i, r)
            r = f32v2axpy(q, x[1], x[0])
        store_float2(a, pairs - 1, r)
        return True


def run(codelet: type[Vertex], n: int, config: str) -> tuple[int, dict[str, int]]:
    """Compute cycles of tile 0 and the operations counted, for ``codelet`` over ``n``
    floats per worker on every tile of one hardware IPU of ``config``."""
    device = DeviceManager(config, 1).getDevices(TargetType.IPU, 1)[0]
    if not device.attach():
        raise RuntimeError("No IPU hardware available.")
    graph = Graph(device.getTarget())
    graph.addCodelets(codelet)
    tiles = graph.getTarget().getNumTiles()
    workers = graph.getTarget().getNumWorkerContexts()
    shape = [tiles, workers, n]
    a, b, c = (graph.addVariable(FLOAT, shape, name) for name in "abc")
    cs = graph.addComputeSet("triad")
    for t in range(tiles):
        for x in (a, b, c):
            graph.setTileMapping(x[t], t)
        for w in range(workers):
            v = graph.addVertex(cs, codelet.__name__, {"a": a[t][w], "b": b[t][w], "c": c[t][w]})
            graph.setTileMapping(v, t)
    rng = np.random.default_rng(0)
    hb, hc = rng.standard_normal((2, *shape)).astype(np.float32)
    graph.setInitialValue(b, hb)
    graph.setInitialValue(c, hc)
    graph.createHostRead("a", a)
    engine = Engine(graph, prog.Execute(cs), {"debug.vertexCycles": "auto"})
    engine.load(device)
    engine.run()
    if not np.array_equal(engine.readTensor("a"), hb + np.float32(Q) * hc):
        raise RuntimeError(f"{codelet.__name__}: wrong result")
    trace = engine.getTraces()[-1]
    cycles = sum(int(r.tile_cycles[0]) for r in trace.records if r.kind == "compute")
    return cycles, operationCounts(trace)[codelet.__name__]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=64, help="floats per worker (even)")
    parser.add_argument("--config", default="tiny", help="machine preset")
    args = parser.parse_args(argv)
    if args.n < 2 or args.n % 2:
        parser.error(f"--n {args.n}: an even number >= 2 (the vector kernel works on float2)")
    for codelet in (ScalarTriad, VectorTriad):
        cycles, ops = run(codelet, args.n, args.config)
        print(f"{codelet.__name__}: {cycles} compute cycles on tile 0")
        print("  " + ", ".join(f"{k} {v}" for k, v in ops.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
