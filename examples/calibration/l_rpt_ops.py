"""L: Poplibs ``UnaryOp1DSupervisor`` / ``BinaryOp1DSupervisor`` vs the cycle-accurate
simulator (the test allowed < 3 % between estimate and simulator).

Rebuilt: one vertex of the op over 1800 elements on tile 0 (``popops`` makes the
``UnaryOp1D`` / ``BinaryOp1D`` MultiVertex, the successors of the supervisor
vertices, with the Poplibs estimator of our table). The CSV value is a tolerance,
not a measurement, so the metric is ``vertex_cycles`` (the compute set's cycles on
the tile): compare it with the Poplibs estimator of the commit, within 3 %.
Not rebuilt: ``inverse`` and ``rsqrt`` (no such op in ``poplar_api.popops``).
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, HALF, Device, Graph, popops
from poplar_api import program as prog
from poplar_api.workload import Workload

CONFIG = "mk2"
TEST_CONFIG = "tiny"
NAME = "op"

#: CSV op name -> (popops function, number of inputs).
OPS = {
    "sqrt": ("sqrt", 1),
    "exponent": ("exp", 1),
    "logarithm": ("log", 1),
    "negate": ("neg", 1),
    "square": ("square", 1),
    "maximum": ("max", 2),
    "minimum": ("min", 2),
}
_ROWS = [
    ("UnaryOp1DSupervisor", "sqrt", "float"),
    *[("UnaryOp1DSupervisor", op, t) for op in ("exponent", "logarithm", "negate", "square")
      for t in ("float", "half")],
    *[("BinaryOp1DSupervisor", op, t) for op in ("maximum", "minimum") for t in ("float", "half")],
]  # fmt: skip
POINTS: dict[str, dict] = {
    f"L.{v}.{op}.{t}": {"op": op, "dtype": t, "size": 1800} for v, op, t in _ROWS
}


def workload(device: Device, op: str = "exponent", dtype: str = "float", size: int = 1800):
    """One elementwise op over ``size`` elements on tile 0."""
    if op not in OPS or dtype not in ("float", "half"):
        raise ValueError(
            f"l_rpt_ops: op={op!r}, dtype={dtype!r}; expected op in {sorted(OPS)} and "
            "dtype 'float' or 'half'"
        )
    fn_name, arity = OPS[op]
    t = FLOAT if dtype == "float" else HALF
    graph = Graph(device.getTarget())
    ins = [graph.addVariable(t, [size], f"in{i}") for i in range(arity)]
    for x in ins:
        graph.setTileMapping(x, 0)
    seq = prog.Sequence()
    getattr(popops, fn_name)(graph, *ins, seq, NAME)

    def metrics(engine, trace: Trace) -> dict[str, float]:
        cycles = [int(r.tile_cycles[0]) for r in trace.records if r.kind == "compute"]
        return {"vertex_cycles": float(np.sum(cycles))}

    return Workload(graph, seq, metrics=metrics)
