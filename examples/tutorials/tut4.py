"""Tutorial 4: profiling two chained matrix multiplications.

``m4 = m1 @ m2`` and ``m5 = m4 @ m3`` with poplin's planned matMul, on one GC200 IPU
Model; then the profile summary with the execution steps. ``--oom`` builds the
oversized variant (m1 {9000,7500}, m2 {7500,300}) whose graph does not fit in tile
memory: compiling it fails with an out-of-memory error naming the worst tiles, unless
``--allow-oom`` sets the engine option ``debug.allowOutOfMemory``, in which case the
summary is still printed.

Run::

    python examples/tutorials/tut4.py [--oom [--allow-oom]]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from poplar_api import FLOAT, Device, Engine, Graph, IPUModel, Tensor
from poplar_api import program as prog
from poplar_api.errors import OutOfMemoryError
from poplar_api.poplin import matMul
from poplar_api.workload import Workload

#: Shapes of m1, m2 and m3 in the normal run.
SHAPES = {"m1": (900, 600), "m2": (600, 300), "m3": (300, 200)}
#: Shapes in the out-of-memory variant.
OOM_SHAPES = {"m1": (9000, 7500), "m2": (7500, 300), "m3": (300, 200)}


def map_linearly(graph: Graph, t: Tensor) -> None:
    """Map ``t`` linearly over the tiles (poputil's mapTensorLinearly)."""
    from poplar_api.poputil import mapTensorLinearly

    mapTensorLinearly(graph, t)


def build(graph: Graph, shapes: dict[str, tuple[int, int]]) -> tuple[prog.Sequence, dict]:
    """Add m1..m3, the two products and the program; return it and the tensors."""
    tensors = {}
    for name, shape in shapes.items():
        tensors[name] = graph.addVariable(FLOAT, list(shape), name)
        map_linearly(graph, tensors[name])
    seq = prog.Sequence()
    tensors["m4"] = matMul(graph, tensors["m1"], tensors["m2"], seq, "m4")
    tensors["m5"] = matMul(graph, tensors["m4"], tensors["m3"], seq, "m5")
    return seq, tensors


def workload(device: Device, oom: bool = False) -> Workload:
    """The tutorial as a workload: the two products m4 = m1 m2 and m5 = m4 m3.

    ``oom`` builds the oversized variant (it fails to compile unless the engine option
    ``debug.allowOutOfMemory=true`` is given). The inputs are not written, as in the
    tutorial, so there is no value check.
    """
    graph = Graph(device.getTarget())
    seq, _ = build(graph, OOM_SHAPES if oom else SHAPES)
    return Workload(graph, seq)


def main(argv: Sequence[str] | None = None) -> int:
    """Build, compile, run and profile; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--oom", action="store_true", help="build the oversized variant")
    parser.add_argument(
        "--allow-oom", action="store_true", help="set debug.allowOutOfMemory (with --oom)"
    )
    args = parser.parse_args(argv)

    device = IPUModel("ipu2").createDevice()
    graph = Graph(device.getTarget())
    seq, _ = build(graph, OOM_SHAPES if args.oom else SHAPES)
    options = {"debug.allowOutOfMemory": "true"} if args.allow_oom else {}
    try:
        engine = Engine(graph, seq, options)
    except OutOfMemoryError as exc:
        print(f"Out of memory: {exc}", file=sys.stderr)
        return 1
    except MemoryError:
        print(
            "the host's memory was exhausted while compiling the graph (the simulator "
            "keeps per-element tables); hint: run on a host with more RAM",
            file=sys.stderr,
        )
        return 2
    engine.load(device)
    engine.run(0)
    print("Program complete")
    engine.printProfileSummary(sys.stdout, {"showExecutionSteps": "true"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
