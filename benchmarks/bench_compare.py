"""Wall time of ``ipusim.compare`` on two profiles of 10,000 steps each.

Builds a machine program of distinct supersteps (sync, exchange, compute, each with
its own name) on a full Mk2, runs it under two configs (the second with half the
exchange bandwidth, so every exchange step differs), turns both traces into measured
profiles and times the comparison, phase by phase and step by step. Target: under 2 s.

Run::

    python benchmarks/bench_compare.py [--steps N]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence

import numpy as np

from ipusim import ir
from ipusim.compare import compare
from ipusim.config import load_config
from ipusim.machine import Machine
from ipusim.measured import measured_from_trace


def program(num_steps: int, num_tiles: int) -> ir.Sequence:
    """``num_steps`` steps, a third each of syncs, exchanges and compute sets."""
    rng = np.random.default_rng(0)
    body: list[ir.Step] = []
    tiles = np.arange(num_tiles)
    for k in range(num_steps):
        if k % 3 == 0:
            body.append(ir.Sync(name=f"sync{k}"))
        elif k % 3 == 1:
            nbytes = rng.integers(0, 4096, num_tiles)
            body.append(
                ir.Exchange(
                    name=f"exchange{k}",
                    tile=tiles,
                    bytes_sent=nbytes,
                    bytes_received=np.roll(nbytes, 1),
                    messages_sent=np.ones(num_tiles, np.int64),
                    messages_received=np.ones(num_tiles, np.int64),
                    max_distance=np.zeros(num_tiles, np.int64),
                )
            )
        else:
            body.append(
                ir.Compute(
                    name=f"cs{k}", vertex_tile=tiles, vertex_cycles=rng.integers(10, 500, num_tiles)
                )
            )
    return ir.Sequence(body)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    args = parser.parse_args(argv)
    cfg = load_config("mk2")
    prog = program(args.steps, cfg.num_tiles)
    slow = load_config("mk2", overrides={"exchange.bytes_per_cycle": 2})
    measured = measured_from_trace(Machine(cfg).run(prog), source="mk2")
    simulated = measured_from_trace(Machine(slow).run(prog), source="mk2, half exchange")
    start = time.perf_counter()
    result = compare(measured, simulated)
    seconds = time.perf_counter() - start
    print(f"{'steps':>8}  {'rows':>8}  {'compare s':>10}  target")
    print(f"{args.steps:>8,}  {len(result.rows):>8,}  {seconds:>10.3f}  < 2 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
