"""poplin matMul workloads on the GC200 IPU Model: host time, cycles, share of peak.

Two workloads:

* ``tut4`` — tutorial 4's chained products ``(m1 @ m2) @ m3`` with m1 {900,600},
  m2 {600,300}, m3 {300,200}, built by ``examples/tutorials/tut4.py``'s ``build``;
* ``mlp`` — one training step of a 3-layer perceptron without nonlinearities (batch B,
  sizes 784-256-128-10): forward ``h1 = x W1``, ``h2 = h1 W2``, ``y = h2 W3``; backward
  ``dh2 = dy W3^T``, ``dh1 = dh2 W2^T`` and the weight updates ``W -= lr a^T d`` with
  ``matMulAcc`` (8 products).

For each: wall seconds (build + compile + load + run), simulated cycles of the run,
model flops (2 M K N per product) and the achieved fraction of peak =
``flops / (cycles x tiles x peak flops per tile cycle)``. The MLP result is checked
against a float64 numpy step; the script exits 1 when it is wrong.

Run::

    python benchmarks/bench_poplibs.py [--quick] [--device ipu2]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.poplin import matMul, matMulAcc
from poplar_api.poputil import mapTensorLinearly

TUT4_PATH = Path(__file__).resolve().parent.parent / "examples" / "tutorials" / "tut4.py"
#: Layer sizes of the MLP (input, hidden, hidden, output).
MLP_SIZES = (784, 256, 128, 10)
#: Learning rate of the MLP weight update.
LEARNING_RATE = 0.01


@dataclass(frozen=True)
class Row:
    """One benchmark result."""

    workload: str
    wall_s: float
    cycles: int
    flops: int
    peak_fraction: float
    ok: bool


def _load_tut4():
    spec = importlib.util.spec_from_file_location("tut4", TUT4_PATH)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import tutorial 4 from {TUT4_PATH}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(
    device_name: str,
    workload: str,
    build: Callable[[Graph, prog.Sequence], tuple[int, Callable[[Engine], bool]]],
) -> Row:
    """Build, compile, load and run one workload; measure it."""
    start = time.perf_counter()
    device = IPUModel(device_name).createDevice()
    graph = Graph(device.getTarget())
    seq = prog.Sequence()
    flops, check = build(graph, seq)
    engine = Engine(graph, seq)
    engine.load(device)
    prepare = getattr(check, "prepare", None)
    if prepare is not None:
        prepare(engine)
    engine.run(0)
    wall = time.perf_counter() - start
    cycles = engine.getTrace().total_cycles
    target = graph.getTarget()
    peak = cycles * target.getNumTiles() * target.getFpFlopsPerCycle(FLOAT)
    return Row(workload, wall, cycles, flops, flops / peak, check(engine))


def build_tut4(graph: Graph, seq: prog.Sequence) -> tuple[int, Callable[[Engine], bool]]:
    """Tutorial 4's graph (values unchecked: the tutorial does not set any)."""
    tut4 = _load_tut4()
    program, _ = tut4.build(graph, tut4.SHAPES)
    seq.add(program)
    (m, k), (_, n), (_, n2) = tut4.SHAPES["m1"], tut4.SHAPES["m2"], tut4.SHAPES["m3"]
    return 2 * m * k * n + 2 * m * n * n2, lambda engine: True


def make_mlp(batch: int) -> Callable[[Graph, prog.Sequence], tuple[int, Callable[[Engine], bool]]]:
    """An MLP training step of ``batch`` rows (see module docstring)."""

    def build(graph: Graph, seq: prog.Sequence) -> tuple[int, Callable[[Engine], bool]]:
        d0, d1, d2, d3 = MLP_SIZES
        x = graph.addVariable(FLOAT, [batch, d0], "x")
        dy = graph.addVariable(FLOAT, [batch, d3], "dy")
        ws = [graph.addVariable(FLOAT, [a, b], f"W{i + 1}") for i, (a, b) in
              enumerate(((d0, d1), (d1, d2), (d2, d3)))]  # fmt: skip
        for t in (x, dy, *ws):
            mapTensorLinearly(graph, t)
        h1 = matMul(graph, x, ws[0], seq, "fwd1")
        h2 = matMul(graph, h1, ws[1], seq, "fwd2")
        matMul(graph, h2, ws[2], seq, "fwd3")
        dh2 = matMul(graph, dy, ws[2].transpose(), seq, "bwd3")
        dh1 = matMul(graph, dh2, ws[1].transpose(), seq, "bwd2")
        for w, act, grad, name in ((ws[2], h2, dy, "upd3"), (ws[1], h1, dh2, "upd2"),
                                   (ws[0], x, dh1, "upd1")):  # fmt: skip
            matMulAcc(graph, w, -LEARNING_RATE, act.transpose(), grad, seq, name)
        for name, t in (("x", x), ("dy", dy), *((f"W{i + 1}", w) for i, w in enumerate(ws))):
            graph.createHostWrite(name, t)
        graph.createHostRead("W1", ws[0])
        rng = np.random.default_rng(0)
        host = {
            "x": rng.uniform(-1, 1, (batch, d0)).astype(np.float32),
            "dy": rng.uniform(-1, 1, (batch, d3)).astype(np.float32),
            "W1": rng.uniform(-0.1, 0.1, (d0, d1)).astype(np.float32),
            "W2": rng.uniform(-0.1, 0.1, (d1, d2)).astype(np.float32),
            "W3": rng.uniform(-0.1, 0.1, (d2, d3)).astype(np.float32),
        }
        f = {k: v.astype(np.float64) for k, v in host.items()}
        ref_w1 = f["W1"] - LEARNING_RATE * f["x"].T @ (f["dy"] @ f["W3"].T @ f["W2"].T)

        def check(engine: Engine) -> bool:
            got = engine.readTensor("W1")
            return bool(np.allclose(got, ref_w1, rtol=1e-4, atol=1e-5))

        def prepare(engine: Engine) -> None:
            for name, value in host.items():
                engine.writeTensor(name, value)

        check.prepare = prepare  # type: ignore[attr-defined]
        products = [
            (batch, d0, d1), (batch, d1, d2), (batch, d2, d3),  # forward
            (batch, d3, d2), (batch, d2, d1),  # backward activations
            (d2, batch, d3), (d1, batch, d2), (d0, batch, d1),  # weight gradients
        ]  # fmt: skip
        return sum(2 * m * k * n for m, k, n in products), check

    return build


def main(argv: Sequence[str] | None = None) -> int:
    """Run the workloads and print the table; 1 if a checked result is wrong."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="MLP batch 16 instead of 256")
    parser.add_argument("--device", default="ipu2", help="IPU Model version or preset")
    args = parser.parse_args(argv)
    batch = 16 if args.quick else 256
    rows = [
        _run(args.device, "tut4 (900x600x300, 900x300x200)", build_tut4),
        _run(args.device, f"mlp step (batch {batch}, 784-256-128-10)", make_mlp(batch)),
    ]
    print(f"poplin on {args.device}")
    print(f"{'workload':<40} {'wall s':>8} {'cycles':>10} {'GFLOP':>8} {'of peak':>8}  ok")
    for r in rows:
        print(
            f"{r.workload:<40} {r.wall_s:8.2f} {r.cycles:10,d} {r.flops / 1e9:8.3f} "
            f"{r.peak_fraction:8.1%}  {'yes' if r.ok else 'NO'}"
        )
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
