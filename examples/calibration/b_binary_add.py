"""B: TessellateIPU ``tile_map(add)``: one ``popops::BinaryOp1D<ADD,float>`` per tile (Bow).

Rebuilt: lhs ``[tiles, n]`` float32, row ``t`` on tile ``t``; rhs replicated, i.e. a
copy of the ``n`` values on every tile (``tile_put_replicated``), so the add needs no
exchange; ``popops.add`` then makes one ``BinaryOp1D`` MultiVertex per tile with the
Poplibs estimator. The hardware timer (``ipu_cycle_count`` before and after) surrounds
the add's steps on the tile (its sync and compute set) and one counter read; ipusim
has no counter-read cost, so ``tile_cycles`` = the tile's cycles in the add's steps,
and the report takes the counter read off the measured cycles and times alike. The
sync is the barrier the rows' notes name inside the interval ("includes one counter
overhead (~45) and the barrier"): an internal sync before the add (lowering inserts
none, the add needing no exchange), with the preset's sync delays (estimates, not
fitted). ``printed_time`` (us): run A prints the maximum over tiles of the tile
cycles, run B the span from the first start to the last end, both at the tile clock.
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, Device, Engine, Graph, popops
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "bow"
TEST_CONFIG = "tiny"
NAME = "tile_map_add"

#: The measured B1 intervals (in cycles) hold one cycle-counter read, which costs
#: ``C1.overhead`` cycles (the report subtracts it; ipusim does not model the counter).
COUNTER_READS_IN_INTERVAL = 1

POINTS: dict[str, dict] = {
    **{f"B1.runA.tile{t}": {"elements_per_tile": 10, "tile": t} for t in range(3)},
    "B1.runA.time": {"elements_per_tile": 10, "run": "A"},
    **{f"B1.runB.tile{t}": {"elements_per_tile": 5, "tile": t, "run": "B"} for t in range(3)},
    "B1.runB.time": {"elements_per_tile": 5, "run": "B"},
}


def add_steps(trace: Trace) -> list:
    """The records of the add: its compute set and the steps named under it."""
    return [r for r in trace.records if r.name == NAME or r.name.startswith(NAME + "/")]


def workload(
    device: Device, elements_per_tile: int = 10, tiles: int = 3, tile: int = 0, run: str = "A"
) -> Workload:
    """``out[t] = lhs[t] + rhs`` on tiles ``0 .. tiles-1`` (see module doc)."""
    if run not in ("A", "B"):
        raise ValueError(f"b_binary_add: run={run!r}; expected 'A' or 'B'")
    graph = Graph(device.getTarget())
    popops.addCodelets(graph)
    lhs = graph.addVariable(FLOAT, [tiles, elements_per_tile], "lhs")
    rhs = graph.addVariable(FLOAT, [tiles, elements_per_tile], "rhs_replicated")
    for t in range(tiles):
        graph.setTileMapping(lhs[t], t)
        graph.setTileMapping(rhs[t], t)
    graph.createHostWrite("lhs", lhs)
    graph.createHostWrite("rhs", rhs)
    seq = prog.Sequence()
    # the barrier the measured interval holds (the row notes: "includes one counter
    # overhead (~45) and the barrier"): the tiles sync before the add
    seq.add(prog.Sync(prog.SyncType.INTERNAL, f"{NAME}/Barrier"))
    out = popops.add(graph, lhs, rhs, seq, NAME)
    graph.createHostRead("out", out)
    a = np.arange(tiles * elements_per_tile, dtype=np.float32).reshape(tiles, -1)
    b = np.tile(np.linspace(0.5, 1.5, elements_per_tile, dtype=np.float32), (tiles, 1))

    def prepare(engine: Engine) -> None:
        engine.writeTensor("lhs", a)
        engine.writeTensor("rhs", b)

    def check(engine: Engine) -> bool:
        return bool(np.array_equal(engine.readTensor("out"), a + b))

    def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
        steps = add_steps(trace)
        per_tile = sum(r.tile_cycles for r in steps)
        if run == "A":
            cycles = float(per_tile[:tiles].max())
        else:
            cycles = float(max(r.last_cycle for r in steps) - min(r.first_cycle for r in steps))
        return {
            "tile_cycles": float(per_tile[tile]),
            "printed_time": cycles / trace.clock_hz * 1e6,
        }

    return Workload(graph, seq, prepare=prepare, check=check, metrics=metrics)
