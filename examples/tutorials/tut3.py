"""Tutorial 3: writing a vertex (codelet) and running it in a compute set.

Four ``SumVertex`` vertices, one per tile: vertex ``i`` sums elements ``i..3`` of
``v1`` into ``v2[i]``. Vertex ``i`` needs elements held by other tiles, so the
program exchanges them before the compute set runs.

Run::

    python examples/tutorials/tut3.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from poplar_api import FLOAT, Device, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.workload import Workload

#: Values copied into ``v1`` from a constant.
C1_VALUES = [1.0, 1.5, 2.0, 2.5]
#: Cycle estimate given to every SumVertex.
SUM_VERTEX_CYCLES = 20


class SumVertex(Vertex):
    """``out`` = sum of the elements of ``in``, accumulated from zero in order."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        total = np.float32(0.0)
        for i in range(in_.shape[0]):
            total += in_[i]
        out[0] = total
        return True


def build(graph: Graph) -> tuple[prog.Sequence, object]:
    """Add the tensors and the compute set to ``graph``.

    Returns
    -------
    program, v2
        The program (copy, execute, print) and the output tensor ``v2``.
    """
    graph.addCodelets(SumVertex)
    v1 = graph.addVariable(FLOAT, [4], "v1")
    v2 = graph.addVariable(FLOAT, [4], "v2")
    for i in range(4):
        graph.setTileMapping(v1[i], i)
        graph.setTileMapping(v2[i], i)
    c1 = graph.addConstant(FLOAT, [4], C1_VALUES, "c1")
    graph.setTileMapping(c1, 0)

    compute_set = graph.addComputeSet("computeSet")
    for i in range(4):
        vertex = graph.addVertex(compute_set, "SumVertex", {"in": v1.slice(i, 4), "out": v2[i]})
        graph.setTileMapping(vertex, i)
        graph.setPerfEstimate(vertex, SUM_VERTEX_CYCLES)

    seq = prog.Sequence()
    seq.add(prog.Copy(c1, v1))
    seq.add(prog.Execute(compute_set))
    seq.add(prog.PrintTensor("v2", v2))
    return seq, v2


def run(device: Device) -> tuple[np.ndarray, Engine]:
    """Build, load and run the tutorial on ``device``.

    Returns
    -------
    v2, engine
        The four sums as read back by the host, and the engine.
    """
    graph = Graph(device.getTarget())
    seq, v2 = build(graph)
    graph.createHostRead("v2-read", v2)
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    result = np.zeros(4, np.float32)
    engine.readTensor("v2-read", result)
    return result, engine


def workload(device: Device) -> Workload:
    """The tutorial as a workload; the check compares v2[i] with sum(c1[i:])."""
    graph = Graph(device.getTarget())
    seq, v2 = build(graph)
    graph.createHostRead("v2-read", v2)

    def check(engine: Engine) -> bool:
        c1 = np.asarray(C1_VALUES, np.float32)
        expected = np.array([c1[i:].sum() for i in range(4)], np.float32)
        return bool(np.array_equal(engine.readTensor("v2-read"), expected))

    return Workload(graph, seq, check=check)


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    device = Device.createCPUDevice("ipu2") if args.cpu else IPUModel("ipu2").createDevice()
    run(device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
