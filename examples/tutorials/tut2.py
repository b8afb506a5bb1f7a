"""Tutorial 2: using Poplibs — elementwise additions with popops.

Two 2x2 variables spread over four tiles (``v2`` mapped transposed to ``v1``) are
filled from constants and added three times with ``popops.add``; the sums are printed
with ``PrintTensor`` while the program runs.

Run::

    python examples/tutorials/tut2.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import numpy as np

from poplar_api import FLOAT, Device, Engine, Graph, IPUModel, Tensor, popops
from poplar_api import program as prog
from poplar_api.workload import Workload

#: Values copied into the flattened ``v1``.
C1_VALUES = [1.0, 1.5, 2.0, 2.5]
#: Values copied into the flattened ``v2``.
C2_VALUES = [4.0, 3.0, 2.0, 1.0]


def build(graph: Graph) -> tuple[prog.Sequence, dict[str, Tensor]]:
    """Add the tutorial's tensors and program to ``graph``.

    ``v1[i][j]`` lives on tile ``i*2+j`` and ``v2[i][j]`` on tile ``j*2+i``. The
    program copies the constants in, then computes and prints ``v3 = v1 + v2``,
    ``v4 = v3 + v2`` and ``v5 = v1 + v2^T``.

    Returns
    -------
    program, tensors
        The program and the tensors by name (``v1`` .. ``v5``).
    """
    popops.addCodelets(graph)
    v1 = graph.addVariable(FLOAT, [2, 2], "v1")
    v2 = graph.addVariable(FLOAT, [2, 2], "v2")
    for i in range(2):
        for j in range(2):
            graph.setTileMapping(v1[i][j], i * 2 + j)
            graph.setTileMapping(v2[i][j], j * 2 + i)

    c1 = graph.addConstant(FLOAT, [4], C1_VALUES, "c1")
    c2 = graph.addConstant(FLOAT, [4], C2_VALUES, "c2")
    graph.setTileMapping(c1, 0)
    graph.setTileMapping(c2, 0)

    seq = prog.Sequence()
    seq.add(prog.Copy(c1, v1.flatten()))
    seq.add(prog.Copy(c2, v2.flatten()))

    v3 = popops.add(graph, v1, v2, seq, "Add")
    seq.add(prog.PrintTensor("v3", v3))
    v4 = popops.add(graph, v3, v2, seq, "Add")
    seq.add(prog.PrintTensor("v4", v4))
    # v2's transpose lives on the tiles of v1, so this addition needs no exchange of v2.
    v5 = popops.add(graph, v1, v2.transpose(), seq, "Add")
    seq.add(prog.PrintTensor("v5", v5))
    return seq, {"v1": v1, "v2": v2, "v3": v3, "v4": v4, "v5": v5}


def run(device: Device) -> tuple[dict[str, np.ndarray], Engine]:
    """Build, load and run the tutorial on ``device``.

    Returns
    -------
    values, engine
        ``v3``, ``v4`` and ``v5`` as read back by the host (2x2 float arrays), and
        the engine.
    """
    graph = Graph(device.getTarget())
    seq, tensors = build(graph)
    for name in ("v3", "v4", "v5"):
        graph.createHostRead(f"{name}-read", tensors[name])
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    values = {}
    for name in ("v3", "v4", "v5"):
        values[name] = np.zeros((2, 2), np.float32)
        engine.readTensor(f"{name}-read", values[name])
    return values, engine


def workload(device: Device) -> Workload:
    """The tutorial as a workload; the check recomputes v4 = v3 + v2 and v5 = v1 + v2^T."""
    graph = Graph(device.getTarget())
    seq, tensors = build(graph)
    for name in ("v1", "v2", "v3", "v4", "v5"):
        graph.createHostRead(f"{name}-read", tensors[name])

    def check(engine: Engine) -> bool:
        v = {n: engine.readTensor(f"{n}-read") for n in ("v1", "v2", "v3", "v4", "v5")}
        return bool(
            np.array_equal(v["v4"], v["v3"] + v["v2"])
            and np.array_equal(v["v5"], v["v1"] + v["v2"].T)
        )

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
