"""Lightweight profiling with implicit blocks, and ``InOut`` vertex state.

Port of ``tutorials/tutorials/popvision/lightweight_profiling/examples/example_2.cpp``
("Example 2: implicit Block programs" of its README) of the public
``graphcore/examples`` repository (Poplar SDK 3.4). A ``SupervisorVertex``,
``DummyVertex``, has an ``InOut<unsigned>`` field ``iterations`` connected to a scalar
variable whose initial value is 1; each execution loops ``iterations`` times and then
increments it, so the state lives in the tensor from one execution (and one
``engine.run``) to the next. ``Repeat(5, Execute(cs))`` runs it five times; no
``Block`` is written in the program: the engine option ``profiler.programs.filter``
set to ``operation`` wraps the compute set's program in an implicit block. The
records of tile 0 are printed as ``<program name>: <cycles>``, as the original prints
libpva's ``report.execution().blocks(0)`` (ipusim's stand-in is
``engine.getBlockRecords(0)``).

Printed lines: five ``operation: <cycles>``. The README documents ``operation: 3905``,
``7555``, ``11203``, ``14857``, ``18505`` on hardware: the vertex's time grows with
``iterations`` (about 3650 cycles per loop of 100 ``volatile`` iterations). In
ipusim a vertex's cycles are its estimate, fixed when the graph is compiled, so every
execution takes the same time: the estimate is :data:`CYCLES_PER_ITERATION` (one loop
of the first execution) and each line reads ``operation: <that + sync>``. The vertex's
values do follow the data: ``iterations`` is 6 after the run and 11 after a second
one (``--runs 2``). The port adds a host read of ``iterations`` (the original has
none) so that it can be checked; it changes no program.

Run::

    python examples/poplar/lightweight_profiling_implicit_blocks.py
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from poplar_api import UNSIGNED_INT, Device, Engine, Graph, InOut
from poplar_api import program as prog
from poplar_api.codelet import SupervisorVertex

sys.path.insert(0, str(Path(__file__).resolve().parent))

from poplar_common import getIpuHwDevice

#: Executions of the compute set in one run.
REPEATS = 5
#: Tile cycles given as the vertex's estimate: one loop of 100 ``volatile`` iterations
#: at 6 supervisor instructions each, issued every 6 cycles (the README measures about
#: 3650 per loop on hardware).
CYCLES_PER_ITERATION = 3600


class DummyVertex(SupervisorVertex):
    """Loops ``iterations`` times (work with no effect on values), then increments it."""

    iterations = InOut(UNSIGNED_INT)

    @staticmethod
    def compute(iterations):
        count = 0
        for _ in range(iterations[0]):
            for _ in range(100):
                count += 1
        iterations[0] += 1
        return count >= 0


def build(device: Device, runs: int = 1) -> Engine:
    """Build and compile the example, load it and run it ``runs`` times."""
    graph = Graph(device.getTarget())
    graph.addCodelets(DummyVertex)

    # A compute set with one vertex whose variable sets its number of loops, executed
    # five times.
    vIterations = graph.addVariable(UNSIGNED_INT, [], "iterations")
    graph.setTileMapping(vIterations, 0)
    cs = graph.addComputeSet("operation")
    v = graph.addVertex(cs, "DummyVertex")
    graph.setTileMapping(v, 0)
    graph.setPerfEstimate(v, CYCLES_PER_ITERATION)

    graph.connect(v["iterations"], vIterations)
    graph.setInitialValue(vIterations, 1)
    graph.createHostRead("iterations", vIterations)

    loop = prog.Repeat(REPEATS, prog.Execute(cs))

    engineOpts = {"profiler.programs.filter": "operation"}
    engine = Engine(graph, loop, engineOpts)
    engine.load(device)
    for _ in range(runs):
        engine.run()
    return engine


def iterations(engine: Engine) -> int:
    """The value of the vertex's ``iterations`` state now."""
    out = np.zeros(1, np.uint32)
    engine.readTensor("iterations", out)
    return int(out[0])


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--runs", type=int, default=1, help="engine.run calls (the original makes one)"
    )
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error(f"--runs must be at least 1, got {args.runs}")

    device = getIpuHwDevice(1)
    engine = build(device, args.runs)
    tile = 0
    for block in engine.getBlockRecords(tile):
        print(f"{block['name']}: {block['cycles']}")
    device.detach()
    return 0


if __name__ == "__main__":
    sys.exit(main())
