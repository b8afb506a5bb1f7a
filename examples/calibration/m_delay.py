"""M: Poplibs ``Delay1000`` test: a supervisor codelet executing ``delay 1000``,
bracketed by cycle-count reads; the simulator had to count 1000 <= cycles < 1150.

Approximated: ``poplar_api`` has no supervisor vertex nor counter reads, so a
:class:`~poplar_api.codelet.MultiVertex` on tile 0 whose estimate is the ``delay``
operand (``delay N`` idles the supervisor for N cycles by definition of the
instruction), in one compute set. ``measured_cycles_upper_bound`` is the tile's
cycles in that compute set and its sync: the number the bound applies to.
"""

from __future__ import annotations

from ipusim.trace import Trace
from poplar_api import UNSIGNED_INT, Device, Graph, MultiVertex, Output
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "mk2"
TEST_CONFIG = "tiny"
NAME = "delay"

POINTS: dict[str, dict] = {"M.delay1000": {"delay": 1000}}


class DelayVertex(MultiVertex):
    """Does nothing for ``delay`` cycles (its estimate); writes 1 to ``done``."""

    done = Output(UNSIGNED_INT)

    @staticmethod
    def compute(worker_id, num_workers, done):
        if worker_id == 0:
            done[0] = 1
        return True


def workload(device: Device, delay: int = 1000, tile: int = 0) -> Workload:
    """One DelayVertex of ``delay`` cycles on ``tile``."""
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
