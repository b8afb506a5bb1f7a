"""C: TessellateIPU ``scale_add`` reference: one ``ScaledAddSupervisor`` vertex on one tile.

C2 rebuilt: ``A += scale * B`` with A, B float32 ``[N]`` on tile 0 through
``popops.scaledAddTo`` (one ``popops::ScaledAddSupervisor<float,float>`` MultiVertex
with the Poplibs estimator). ``tile_cycles`` = the tile's cycles in the operation's
steps (its sync and compute set), what ``ipu_cycle_count`` brackets apart from the
counter read itself. C1 (the cost of the counter read) is *not* rebuilt:
``poplar_api`` has no cycle-counter vertex and ipusim no instrumentation cost.
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, Device, Engine, Graph, popops
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "bow"
TEST_CONFIG = "tiny"
NAME = "scale_add"
SCALE = 0.5

#: The measured C2 intervals (in cycles) hold one cycle-counter read, which costs
#: ``C1.overhead`` cycles (the report subtracts it; ipusim does not model the counter).
COUNTER_READS_IN_INTERVAL = 1

POINTS: dict[str, dict] = {f"C2.N{n}": {"n": n} for n in (64, 128, 256, 512)}


def workload(device: Device, n: int = 64, tile: int = 0) -> Workload:
    """``A += 0.5 * B`` over ``n`` floats on ``tile``."""
    graph = Graph(device.getTarget())
    a = graph.addVariable(FLOAT, [n], "A")
    b = graph.addVariable(FLOAT, [n], "B")
    graph.setTileMapping(a, tile)
    graph.setTileMapping(b, tile)
    graph.createHostWrite("A", a)
    graph.createHostWrite("B", b)
    graph.createHostRead("A-read", a)
    seq = prog.Sequence()
    popops.scaledAddTo(graph, a, b, SCALE, seq, NAME)
    ha = np.arange(n, dtype=np.float32)
    hb = np.full(n, 2.0, np.float32)

    def prepare(engine: Engine) -> None:
        engine.writeTensor("A", ha)
        engine.writeTensor("B", hb)

    def check(engine: Engine) -> bool:
        return bool(np.array_equal(engine.readTensor("A-read"), ha + np.float32(SCALE) * hb))

    def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
        steps = [r for r in trace.records if r.name == NAME or r.name.startswith(NAME + "/")]
        return {"tile_cycles": float(sum(int(r.tile_cycles[tile]) for r in steps))}

    return Workload(graph, seq, prepare=prepare, check=check, metrics=metrics)
