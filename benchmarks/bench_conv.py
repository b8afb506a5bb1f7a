"""poplin convolution on the GC200 IPU Model: host seconds per phase, cycles, share of peak.

The workload of the issue: a 3x3 convolution, 64 -> 64 channels, on a 32x32 field with
padding 1, batch 8, on the ``ipu2`` model (1,472 tiles), in FLOAT and in HALF (float
partials); optionally its backward-data and weight-update passes (``--passes``).

For each: host seconds to build the graph (plan + lowering), compile (``Engine``), and
load + run; simulated cycles of the run; flops (``poplin.getFwdFlops`` and friends: 2 per
multiply-accumulate on real data) and the achieved fraction of peak = ``flops / (cycles
x tiles x peak flops per tile cycle)``. The forward result is checked against a float64
numpy convolution on a sample of output positions; the script exits 1 when it is wrong.

Run::

    python benchmarks/bench_conv.py [--device ipu2] [--passes]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.tensor import Tensor

BATCH, CHANS, FIELD, KERNEL = 8, 64, 32, 3


@dataclass(frozen=True)
class Row:
    """One benchmark result."""

    workload: str
    build_s: float
    compile_s: float
    run_s: float
    cycles: int
    flops: int
    peak_fraction: float
    plan: str
    ok: bool


def _reference_sample(x: np.ndarray, w: np.ndarray, rng: np.random.Generator) -> tuple:
    """float64 outputs at 64 random (b, co, y, x) positions (3x3, padding 1)."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    idx = [rng.integers(0, n, 64) for n in (BATCH, CHANS, FIELD, FIELD)]
    vals = np.array([
        np.sum(xp[b, :, i : i + KERNEL, j : j + KERNEL] * w[0, o].astype(np.float64))
        for b, o, i, j in zip(*idx, strict=True)
    ])  # fmt: skip
    return tuple(idx), vals


def conv_params(dtype) -> poplin.ConvParams:
    """The benchmark's convolution: 3x3, CHANS -> CHANS, FIELD x FIELD, padding 1."""
    return poplin.ConvParams(dtype, BATCH, [FIELD, FIELD], [KERNEL, KERNEL], CHANS, CHANS, 1,
                             paddingLower=[1, 1], paddingUpper=[1, 1])  # fmt: skip


def build(
    graph: Graph, params: poplin.ConvParams, passes: bool
) -> tuple[prog.Sequence, Tensor, Tensor, Tensor]:
    """Add the forward convolution (and with ``passes`` its backward-data and
    weight-update passes) to ``graph``: ``(program, x, w, y)``."""
    x_t = poplin.createInput(graph, params, "x")
    w_t = poplin.createWeights(graph, params, "w")
    seq = prog.Sequence()
    y_t = poplin.convolution(graph, x_t, w_t, params, False, seq, "fwd")
    if passes:
        poplin.convolution(graph, y_t, w_t, poplin.getGradientParams(params), True, seq, "bwd")
        poplin.calculateWeightDeltas(graph, y_t, x_t, params, seq, "wu")
    return seq, x_t, w_t, y_t


def run(device_name: str, dtype, passes: bool) -> Row:
    """Build, compile and run the convolution (and its gradients with ``passes``)."""
    params = conv_params(dtype)
    device = IPUModel(device_name).createDevice()
    t0 = time.perf_counter()
    graph = Graph(device.getTarget())
    seq, x_t, w_t, y_t = build(graph, params, passes)
    flops = poplin.getFwdFlops(params)
    if passes:
        flops += poplin.getBwdFlops(params) + poplin.getWuFlops(params)
    graph.createHostWrite("x", x_t)
    graph.createHostWrite("w", w_t)
    graph.createHostRead("y", y_t)
    t1 = time.perf_counter()
    engine = Engine(graph, seq)
    t2 = time.perf_counter()
    engine.load(device)
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, params.inputShape()).astype(dtype.numpy)
    w = rng.uniform(-0.1, 0.1, params.weightsShape()).astype(dtype.numpy)
    engine.writeTensor("x", x)
    engine.writeTensor("w", w)
    engine.run(0)
    t3 = time.perf_counter()
    idx, ref = _reference_sample(x, w, rng)
    got = engine.readTensor("y")[idx].astype(np.float64)
    tol = 1e-4 if dtype == FLOAT else 2e-2
    ok = bool(np.allclose(got, ref, rtol=tol, atol=tol * 10))
    cycles = engine.getTrace().total_cycles
    target = graph.getTarget()
    peak = cycles * target.getNumTiles() * target.getFpFlopsPerCycle(dtype)
    plan = poplin.getConvPlan(graph, params)
    name = f"{'fwd+bwd+wu' if passes else 'fwd'} {dtype.name}"
    return Row(name, t1 - t0, t2 - t1, t3 - t2, cycles, flops, flops / peak,
               f"{plan.method} parts {list(plan.parts)}", ok)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """Run the workloads and print the table; 1 if a checked result is wrong."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="ipu2", help="IPU Model version or preset")
    parser.add_argument("--passes", action="store_true", help="also backward and weight update")
    args = parser.parse_args(argv)
    rows = [run(args.device, t, False) for t in (FLOAT, HALF)]
    if args.passes:
        rows += [run(args.device, t, True) for t in (FLOAT, HALF)]
    print(f"3x3 conv {CHANS}->{CHANS}, {FIELD}x{FIELD}, batch {BATCH}, on {args.device}")
    print(f"{'workload':<18} {'build s':>8} {'compile s':>9} {'run s':>7} {'cycles':>9} "
          f"{'GFLOP':>7} {'of peak':>8}  ok  plan (G, B, H, W, Co, Ci)")  # fmt: skip
    for r in rows:
        print(
            f"{r.workload:<18} {r.build_s:8.2f} {r.compile_s:9.2f} {r.run_s:7.2f} "
            f"{r.cycles:9,d} {r.flops / 1e9:7.3f} {r.peak_fraction:8.1%}  "
            f"{'yes' if r.ok else 'NO ':<3} {r.plan}"
        )
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
