"""M: Poplibs ``Delay1000`` test: a supervisor codelet executing ``delay 1000``,
bracketed by cycle-count reads; the simulator had to count 1000 <= cycles < 1150.

Rebuilt: the codelet as Poplibs writes it (``tests/codelets/Delay1000.S``: a
``.supervisor`` function of one instruction, ``delay 1000``, and its return), a
:class:`~poplar_api.codelet.SupervisorVertex` on tile 0 whose kernel is
:func:`poplar_api.ipu_intrinsics.delay` of :data:`DELAY` cycles, in one compute set.
Counted (``debug.vertexCycles``, docs/counted_cycles.md) it takes what the
instruction takes; its estimate (the IPU Model's) is the ``delay`` parameter
(``delay N`` idles the supervisor for N cycles by definition of the instruction).
Approximated: ``poplar_api`` has no counter reads; ``measured_cycles_upper_bound`` is
the tile's cycles in that compute set and its sync: the number the bound applies to.
"""

from __future__ import annotations

from ipusim.trace import Trace
from poplar_api import UNSIGNED_INT, Device, Graph, Output
from poplar_api import program as prog
from poplar_api.codelet import SupervisorVertex
from poplar_api.ipu_intrinsics import delay as ipu_delay
from poplar_api.workload import Workload

CONFIG = "mk2"
TEST_CONFIG = "tiny"
NAME = "delay"

#: The operand of the measured codelet's ``delay`` (an immediate: fixed in the kernel).
DELAY = 1000

POINTS: dict[str, dict] = {"M.delay1000": {"delay": DELAY}}


class DelayVertex(SupervisorVertex):
    """``delay 1000`` (:data:`DELAY`); writes 1 to ``done`` (so a run can be checked)."""

    done = Output(UNSIGNED_INT)

    @staticmethod
    def compute(done):
        ipu_delay(DELAY)
        done[0] = 1
        return True


def workload(device: Device, delay: int = 1000, tile: int = 0) -> Workload:
    """One DelayVertex on ``tile``: ``delay`` cycles as its estimate; counted, the
    kernel's ``delay`` (:data:`DELAY`) whatever ``delay`` is."""
    graph = Graph(device.getTarget())
    graph.addCodelets(DelayVertex)
    done = graph.addVariable(UNSIGNED_INT, [1], "done")
    graph.setTileMapping(done, tile)
    cs = graph.addComputeSet(NAME)
    v = graph.addVertex(cs, "DelayVertex", {"done": done[0]})
    graph.setTileMapping(v, tile)
    graph.setPerfEstimate(v, delay)
    graph.createHostRead("done", done)

    def metrics(engine, trace: Trace) -> dict[str, float]:
        steps = [r for r in trace.records if r.name == NAME or r.name.startswith(NAME + "/")]
        return {"measured_cycles_upper_bound": float(sum(int(r.tile_cycles[tile]) for r in steps))}

    return Workload(
        graph,
        prog.Execute(cs),
        check=lambda e: int(e.readTensor("done")[0]) == 1,
        metrics=metrics,
    )
