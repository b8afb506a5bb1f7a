"""Lightweight profiling example 2 on a hardware IPU: block cycles that grow with the work.

Port of ``tutorials/tutorials/popvision/lightweight_profiling/examples/example_2.cpp``
("Example 2: implicit Block programs" of its README) of the public
``graphcore/examples`` repository (Poplar SDK 3.4), as it behaves on hardware. A
``SupervisorVertex``, ``DummyVertex``, has an ``InOut<unsigned>`` field ``iterations``
(initially 1); each execution runs a 100-iteration loop on a ``volatile`` int
``iterations`` times, then increments ``iterations``. ``Repeat(5, Execute(cs))`` runs
it five times, and the engine option ``profiler.programs.filter=operation`` puts an
implicit block around the compute set. No perf estimate is set: on a hardware device
the vertex's cycles are what its kernel executes (counted execution,
docs/counted_cycles.md), so the five figures grow with ``iterations``, as the README
shows for hardware (``operation: 3905``, ``7555``, ``11203``, ``14857``, ``18505``).

The kernel is the C++ loop: the loop variable is ``volatile``, so every test and
increment reads and writes it in memory; here it lives in a one-element array, whose
loads and stores counted execution sees. ``lightweight_profiling_implicit_blocks.py``
is the same program with a fixed perf estimate, as the IPU Model runs it.

Run::

    python examples/poplar/lightweight_profiling_counted.py
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
#: Iterations of the vertex's inner loop.
LOOP = 100


class DummyVertex(SupervisorVertex):
    """Runs a ``LOOP``-iteration loop on a volatile int ``iterations`` times, then
    increments ``iterations``."""

    iterations = InOut(UNSIGNED_INT)

    @staticmethod
    def compute(iterations):
        j = np.zeros(1, np.int32)  # the volatile loop variable, in memory
        for _ in range(iterations[0]):
            j[0] = 0
            while j[0] < LOOP:
                j[0] += 1
        iterations[0] += 1
        return True


def build(device: Device) -> Engine:
    """Build and compile the example (vertex cycles as on the device: counted on
    hardware), load it and run it once."""
    graph = Graph(device.getTarget())
    graph.addCodelets(DummyVertex)

    vIterations = graph.addVariable(UNSIGNED_INT, [], "iterations")
    graph.setTileMapping(vIterations, 0)
    cs = graph.addComputeSet("operation")
    v = graph.addVertex(cs, "DummyVertex")
    graph.setTileMapping(v, 0)
    graph.connect(v["iterations"], vIterations)
    graph.setInitialValue(vIterations, 1)
    graph.createHostRead("iterations", vIterations)

    loop = prog.Repeat(REPEATS, prog.Execute(cs))
    # debug.vertexCycles "auto": as Poplar, counted on hardware, estimates on IPU Models
    engineOpts = {"profiler.programs.filter": "operation", "debug.vertexCycles": "auto"}
    engine = Engine(graph, loop, engineOpts)
    engine.load(device)
    engine.run()
    return engine


def main(argv: Sequence[str] | None = None) -> int:
    """Command-line entry point; returns the process exit code."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    device = getIpuHwDevice(1)
    engine = build(device)
    for block in engine.getBlockRecords(0):
        print(f"{block['name']}: {block['cycles']}")
    device.detach()
    return 0


if __name__ == "__main__":
    sys.exit(main())
