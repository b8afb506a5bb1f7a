"""Supersteps per second of the ipusim machine model.

A superstep is one compute set (six worker vertices per tile with varied estimates),
an internal sync and an internal exchange in which every tile sends 256 bytes to its
right-hand neighbour on the same IPU. The program is ``Repeat(N, superstep)`` built
directly as machine IR, so the numbers measure the machine model alone (no graph
building or lowering). Each preset is run at granularity ``ipu`` (one SimPy process
per IPU) and ``tile`` (one process per tile).

Run::

    python benchmarks/bench_machine.py [--quick] [--target-seconds S]

``N`` is chosen per row from a short calibration run so that the timed run takes about
``--target-seconds`` of host time.

A second table gives host RAM per executed superstep: the peak RAM of a child process
running ``Repeat(N, superstep)`` on mk1 for two ``N``, and the difference per
superstep between them (what a longer run costs; the trace keeps a record of every
executed step).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from child import child_peak

from ipusim import ir
from ipusim.config import MachineConfig, load_config
from ipusim.machine import Machine

#: Worker vertices per tile in the compute step (one per worker context on Mk1/Mk2).
VERTICES_PER_TILE = 6
#: Bytes each tile sends to its neighbour in the exchange step.
EXCHANGE_BYTES = 256
#: Supersteps of the two runs whose peak RAM is compared (``--quick``: the second pair).
RAM_COUNTS = ((10_000, 100_000), (1_000, 5_000))
#: Presets and granularities measured, in table order.
PRESETS = ("mk1", "mk2")
GRANULARITIES = ("ipu", "tile")


def superstep(cfg: MachineConfig, seed: int = 0) -> ir.Sequence:
    """One compute + internal sync + internal exchange step for every tile of ``cfg``.

    Vertex estimates are drawn uniformly from 50..499 thread cycles (fixed seed), so
    tiles finish the compute step at different times and the sync has work to do.
    """
    tiles = cfg.num_tiles
    tpi = cfg.tile.tiles_per_ipu
    rng = np.random.default_rng(seed)
    vertex_tile = np.repeat(np.arange(tiles), VERTICES_PER_TILE)
    vertex_cycles = rng.integers(50, 500, size=vertex_tile.size)
    src = np.arange(tiles)
    # neighbour on the same IPU (wraps round within the IPU)
    dst = (src // tpi) * tpi + (src % tpi + 1) % tpi
    return ir.Sequence(
        (
            ir.Compute(name="bench_compute", vertex_tile=vertex_tile, vertex_cycles=vertex_cycles),
            ir.Sync(name="bench_sync", sync_kind=ir.SyncKind.INTERNAL),
            ir.Exchange(
                name="bench_exchange",
                src_tile=src,
                dst_tile=dst,
                num_bytes=np.full(tiles, EXCHANGE_BYTES),
            ),
        ),
        name="superstep",
    )


@dataclass(frozen=True)
class Row:
    """One measured row of the table."""

    preset: str
    tiles: int
    granularity: str
    supersteps: int
    host_seconds: float
    total_cycles: int
    trace_cycles_per_host_second: float

    @property
    def supersteps_per_second(self) -> float:
        """Supersteps per host second (timed around ``Machine.run``)."""
        return self.supersteps / self.host_seconds

    @property
    def cycles_per_host_second(self) -> float:
        """Simulated cycles per host second (timed around ``Machine.run``)."""
        return self.total_cycles / self.host_seconds


def measure(preset: str, granularity: str, count: int) -> Row:
    """Run ``Repeat(count, superstep)`` once on ``preset`` and time ``Machine.run``."""
    cfg = load_config(preset, overrides={"sim.granularity": granularity})
    machine = Machine(cfg)
    program = ir.Repeat(count, superstep(cfg))
    start = time.perf_counter()
    trace = machine.run(program)
    elapsed = time.perf_counter() - start
    return Row(
        preset,
        cfg.num_tiles,
        granularity,
        count,
        elapsed,
        trace.total_cycles,
        trace.cycles_per_host_second,
    )


def warm_up(preset: str, granularity: str) -> None:
    """One untimed superstep, so that Numba compilation and first-use costs are not timed."""
    measure(preset, granularity, 1)


def choose_count(preset: str, granularity: str, target_seconds: float) -> int:
    """Supersteps that should take about ``target_seconds`` of host time.

    Probe runs double in length until one takes at least a tenth of the target, and
    the count is scaled from that probe's time per superstep.
    """
    probe = 2
    while True:
        row = measure(preset, granularity, probe)
        if row.host_seconds >= target_seconds / 10:
            break
        probe *= 2
    return max(1, round(target_seconds * probe / row.host_seconds))


def format_table(rows: Sequence[Row]) -> str:
    """The rows as a markdown table.

    "host s", "supersteps/s" and "sim cycles / host s" use ``time.perf_counter`` around
    ``Machine.run`` (validation included); the last column is the trace's own
    ``cycles_per_host_second`` (the SimPy run only).
    """
    head = (
        "| preset | tiles | granularity | supersteps | host s | supersteps/s "
        "| simulated cycles | sim cycles / host s | trace cycles / host s |"
    )
    lines = [head, "|---|---:|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(
            f"| {r.preset} | {r.tiles:,} | {r.granularity} | {r.supersteps:,} "
            f"| {r.host_seconds:.2f} | {r.supersteps_per_second:,.1f} "
            f"| {r.total_cycles:,} | {r.cycles_per_host_second:,.0f} "
            f"| {r.trace_cycles_per_host_second:,.0f} |"
        )
    return "\n".join(lines)


def run_child(preset: str, granularity: str, count: int) -> None:
    """Run ``Repeat(count, superstep)`` once (the child of :func:`ram_row`)."""
    cfg = load_config(preset, overrides={"sim.granularity": granularity})
    trace = Machine(cfg).run(ir.Repeat(count, superstep(cfg)))
    print(len(trace.records), trace.total_cycles)


@dataclass(frozen=True)
class RamRow:
    """Peak host RAM of two runs of ``Repeat(N, superstep)`` in child processes."""

    preset: str
    granularity: str
    counts: tuple[int, int]
    peaks: tuple[int, int]

    @property
    def bytes_per_superstep(self) -> float:
        """Extra peak RAM per extra executed superstep."""
        return (self.peaks[1] - self.peaks[0]) / (self.counts[1] - self.counts[0])


def ram_row(preset: str, granularity: str, counts: tuple[int, int]) -> RamRow:
    """Peak RAM of ``Repeat(N, superstep)`` for both ``counts``, each in a child."""
    peaks = []
    for count in counts:
        cmd = [sys.executable, __file__, "--child", preset, granularity, str(count)]
        status, _, rss, out = child_peak(cmd)
        if status != 0 or int(out.split()[0]) != 3 * count:
            raise RuntimeError(f"{preset}/{granularity} x{count}: exit {status}, {out!r}")
        peaks.append(rss)
    return RamRow(preset, granularity, counts, (peaks[0], peaks[1]))


def format_ram_table(rows: Sequence[RamRow]) -> str:
    """The RAM rows as a markdown table."""
    lines = [
        "| preset | granularity | supersteps | peak RAM MB | bytes per extra superstep |",
        "|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.preset} | {r.granularity} | {r.counts[0]:,} / {r.counts[1]:,} "
            f"| {r.peaks[0] / 2**20:,.0f} / {r.peaks[1] / 2**20:,.0f} "
            f"| {r.bytes_per_superstep:,.0f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Measure every preset and granularity and print the table; returns 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: a few supersteps per row, no calibration"
    )
    parser.add_argument(
        "--target-seconds",
        type=float,
        default=2.0,
        help="host seconds aimed for per row (default 2; ignored with --quick)",
    )
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        preset, granularity, count = args.child
        run_child(preset, granularity, int(count))
        return 0
    if args.target_seconds <= 0:
        parser.error(f"--target-seconds must be > 0, got {args.target_seconds}")
    rows = []
    for preset in PRESETS:
        for granularity in GRANULARITIES:
            warm_up(preset, granularity)
            quick = args.quick
            count = 3 if quick else choose_count(preset, granularity, args.target_seconds)
            row = measure(preset, granularity, count)
            rows.append(row)
            print(
                f"{preset}/{granularity}: {count} supersteps in {row.host_seconds:.2f} s",
                file=sys.stderr,
                flush=True,
            )
    print(format_table(rows))
    counts = RAM_COUNTS[1] if args.quick else RAM_COUNTS[0]
    ram = [ram_row("mk1", "ipu", counts)]
    print()
    print(format_ram_table(ram))
    return 0


if __name__ == "__main__":
    sys.exit(main())
