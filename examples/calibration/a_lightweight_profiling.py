"""A: PopVision lightweight-profiling tutorial (HW): blocks around one-vertex compute sets.

Approximated: the measured vertex is a ``SupervisorVertex`` running an empty
100-iteration loop on a ``volatile int`` (``iterations`` times in example 2), timed by
``Block`` instrumentation. Rebuilt: one :class:`DummyVertex` (a MultiVertex whose
worker 0 runs the loop, which occupies the tile like a supervisor; the workload
predates ``poplar_api``'s ``SupervisorVertex``, and its rows keep it:
``examples/poplar/lightweight_profiling_counted.py`` runs the tutorial's
``SupervisorVertex`` itself, 12 cycles fewer per block counted, without the worker
test) per compute set on the measured tile, in the measured program
(``example='a3'``: ``Repeat(5, Execute(cs))``; ``example='a2o'``: two IPUs,
``Repeat(5, {stage1, stage2})`` with op1, op2 on tile 0 of each IPU). Its estimate is
an instruction count, :data:`INSTRUCTIONS_PER_LOOP_ITERATION` supervisor instructions
(load, add, store, load, compare, branch) issued every 6 cycles, times the loop count;
the estimate is fixed at compile time, so A3's growing ``iterations`` is a parameter.
``block_cycles`` = mean cycles of the measured compute set on the tile (compute + its
sync); ``first_block_cycles`` those of its first execution (A3.i in counted execution,
where the loop runs ``iterations`` times and the time grows with it; the kernel runs
the tutorial's loop, so its operations can be counted). A5 (control stream copies)
and A6 (StreamCopy Begin/Mid/End) are not rebuilt: ipusim models a stream copy as one
step, without the host-side phases.
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import UNSIGNED_INT, Device, Graph, InOut, MultiVertex
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "mk2"
TEST_CONFIG = "tiny"
#: estimate: ld, add, st, ld, cmp, br per iteration of the volatile loop.
INSTRUCTIONS_PER_LOOP_ITERATION = 6
#: The loop length of the tutorial's vertex.
LOOP_ITERATIONS = 100

POINTS: dict[str, dict] = {
    **{f"A3.{i}": {"example": "a3", "iterations": i} for i in range(1, 6)},
    **{f"A2o.stage{s}.{e}": {"example": "a2o", "ipu": s - 1} for s in (1, 2) for e in range(1, 6)},
}
POINT_OVERRIDES: dict[str, dict] = {row: {"num_ipus": 2} for row in POINTS if row.startswith("A2o")}


class DummyVertex(MultiVertex):
    """Runs the tutorial's loop ``iterations`` times on worker 0, then increments
    ``iterations`` (the loop has no effect on values).

    The loop is the C++ one on a ``volatile`` loop variable: every test and increment
    reads and writes it in memory (``j[0]``), so counted execution sees the loads and
    stores the compiled code makes.
    """

    iterations = InOut(UNSIGNED_INT)

    @staticmethod
    def compute(worker_id, num_workers, iterations):
        if worker_id == 0:
            j = np.zeros(1, np.int32)
            for _ in range(iterations[0]):
                j[0] = 0
                while j[0] < 100:
                    j[0] += 1
            iterations[0] += 1
        return True


def vertex_cycles(device: Device, iterations: int) -> int:
    """Tile cycles of the estimate: ``iterations`` loops of 100 iterations."""
    contexts = device.getTarget().getNumWorkerContexts()
    return iterations * LOOP_ITERATIONS * INSTRUCTIONS_PER_LOOP_ITERATION * contexts


def workload(device: Device, example: str = "a3", iterations: int = 1, ipu: int = 0) -> Workload:
    """Example 2 (``a3``) or example 1 (``a2o``, needs 2 IPUs) of the tutorial."""
    graph = Graph(device.getTarget())
    graph.addCodelets(DummyVertex)
    per_ipu = device.getTarget().getTilesPerIPU()

    def operation(name: str, tile: int) -> prog.Program:
        counter = graph.addVariable(UNSIGNED_INT, [1], f"{name}/iterations")
        graph.setTileMapping(counter, tile)
        graph.setInitialValue(counter, np.array([iterations], np.uint32))
        cs = graph.addComputeSet(name)
        v = graph.addVertex(cs, "DummyVertex", {"iterations": counter[0]})
        graph.setTileMapping(v, tile)
        graph.setPerfEstimate(v, vertex_cycles(device, iterations))
        return prog.Execute(cs)

    if example == "a3":
        program = prog.Repeat(5, operation("operation", 0))
        measured, tile = "operation", 0
    elif example == "a2o":
        if device.getTarget().getNumIPUs() < 2:
            raise ValueError("a_lightweight_profiling a2o needs 2 IPUs; --set num_ipus=2")
        stages = [
            prog.Sequence(
                operation(f"op1_ipu{i}", i * per_ipu), operation(f"op2_ipu{i}", i * per_ipu)
            )
            for i in range(2)
        ]
        program = prog.Repeat(5, prog.Sequence(*stages))
        measured, tile = f"op2_ipu{ipu}", ipu * per_ipu
    else:
        raise ValueError(f"a_lightweight_profiling: example={example!r}; expected 'a3' or 'a2o'")

    def metrics(engine, trace: Trace) -> dict[str, float]:
        steps = [
            r for r in trace.records if r.name == measured or r.name.startswith(measured + "/")
        ]
        runs = sum(1 for r in steps if r.kind == "compute")
        total = sum(int(r.tile_cycles[tile]) for r in steps)
        # the first execution: its steps up to the next compute record (counted cycles
        # grow with ``iterations`` from one execution to the next)
        first, computes = 0, 0
        for r in steps:
            computes += r.kind == "compute"
            if computes > 1:
                break
            first += int(r.tile_cycles[tile])
        return {"block_cycles": total / runs, "first_block_cycles": float(first)}

    return Workload(graph, program, metrics=metrics)
