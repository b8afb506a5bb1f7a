"""A float matrix product ``C = A @ B`` through ``poplin.matMul``, as a sweep workload.

The host writes the operands straight into tile memory (``writeTensor``, outside the
program, so the run is the product alone), the product is planned by the Poplibs
planner over the tiles of the device, and the host reads the result back and checks
it against a float64 numpy product. The metrics let the analysis of a sweep
(:func:`ipusim.sweep.analysis.add_flops`) relate a run to the machine's peak:

``flops``
    ``2 m k n``, the multiply-adds of the product counted as two flops.
``peak_flops_per_cycle``
    The device's peak FLOAT flops per cycle: per-tile peak x tiles.

Run::

    ipusim run examples/notebooks/matmul_workload.py --config tiny -p m=32 -p k=32 -p n=32
"""

from __future__ import annotations

import numpy as np

from ipusim.trace import Trace
from poplar_api import FLOAT, Device, Engine, Graph, poplin
from poplar_api import program as prog
from poplar_api.workload import Workload

#: Largest error of the check, relative to the largest magnitude of the float64 product.
RELATIVE_TOLERANCE = 1e-4
#: Prefix of the product's compute sets.
NAME = "matmul"


def host_operands(m: int, k: int, n: int, seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    """Operands ``A`` [m, k] and ``B`` [k, n] (float32, uniform in [-1, 1))."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1.0, 1.0, size=(m, k)).astype(np.float32)
    b = rng.uniform(-1.0, 1.0, size=(k, n)).astype(np.float32)
    return a, b


def workload(device: Device, m: int = 64, k: int = 64, n: int = 64) -> Workload:
    """``C = A @ B`` with ``A`` [m, k] and ``B`` [k, n] in FLOAT (see the module doc)."""
    for name, value in (("m", m), ("k", k), ("n", n)):
        if int(value) != value or value < 1:
            raise ValueError(f"matmul workload: {name}={value!r}; required an integer >= 1")
    m, k, n = int(m), int(k), int(n)
    target = device.getTarget()
    graph = Graph(target)
    a = poplin.createMatMulInputLHS(graph, FLOAT, [m, k], [k, n], "A")
    b = poplin.createMatMulInputRHS(graph, FLOAT, [m, k], [k, n], "B")
    seq = prog.Sequence()
    c = poplin.matMul(graph, a, b, seq, NAME)
    graph.createHostWrite("A", a)
    graph.createHostWrite("B", b)
    graph.createHostRead("C", c)
    host_a, host_b = host_operands(m, k, n)

    def prepare(engine: Engine) -> None:
        engine.writeTensor("A", host_a)
        engine.writeTensor("B", host_b)

    def check(engine: Engine) -> bool:
        expected = host_a.astype(np.float64) @ host_b.astype(np.float64)
        error = np.abs(engine.readTensor("C") - expected)
        return bool(np.all(error <= RELATIVE_TOLERANCE * max(1.0, float(np.abs(expected).max()))))

    peak = float(target.getFpFlopsPerCycle(FLOAT) * target.getNumTiles())

    def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
        return {"flops": 2.0 * m * k * n, "peak_flops_per_cycle": peak}

    return Workload(graph, seq, prepare=prepare, check=check, metrics=metrics)
