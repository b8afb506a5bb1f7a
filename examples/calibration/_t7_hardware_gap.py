"""Tutorial 7 on Mk2 hardware: the cycles outside every phase, and what could hold them.

The hardware summary's total (25,444,984 cycles) is nine times the sum of its phases;
the tutorial puts the rest in ``StreamCopyBegin``, the host preparing I/O. This script
runs the tutorial's workload on ``mk2`` with counted compute, takes the simulated
total from the measured one, and prints what each candidate mechanism would add, each
with a figure from a source other than T7 (docs/calibration.md, "Tutorial 7 on
hardware: where the total goes"):

* the host moving the bytes copied to the device into the transfer buffers at each
  host-to-buffer rate gc-hosttraffictest measured on an IPU-M2000 (rows
  ``N1.host_to_buffer_*.host``, taken with tile traffic at the same time);
* the start-of-run control copy of a first ``engine.run`` (rows ``A5.t2.*``).

Nothing is fitted and nothing is written. Run from the repository root::

    .venv/bin/python examples/calibration/_t7_hardware_gap.py
"""

from __future__ import annotations

import csv
from pathlib import Path

from ipusim.measured import read_profile
from ipusim.runner import run_workload
from poplar_api.counted import vertexCycles

HERE = Path(__file__).resolve().parent
DATA = HERE.parents[1] / "tests" / "data" / "calibration"
#: Bytes tutorial 7 copies to the device at 10000 x 1000: the vector and the matrix.
BYTES_TO_DEVICE = 4 * (1000 + 10000 * 1000)
#: The N1 rows of the host writing a remote buffer (Gbit/s, 1e9 bit per second).
HOST_TO_BUFFER_ROWS = ("N1.host_to_buffer_to_tile.host", "N1.host_to_buffer_from_tile.host")
#: The start-of-run control copy's phases (cycles).
START_ROWS = ("A5.t2.Begin", "A5.t2.Mid", "A5.t2.End")


def candidates(
    simulated_total: float, rows: dict[str, dict[str, str]], clock_hz: float
) -> list[tuple[str, float]]:
    """``(mechanism, T7 total with it)`` for each candidate, from ``simulated_total``."""
    out = []
    for rid in HOST_TO_BUFFER_ROWS:
        bytes_per_s = float(rows[rid]["value"]) * 1e9 / 8
        seconds = BYTES_TO_DEVICE / bytes_per_s
        label = f"prepare at {bytes_per_s / 1e9:.2f} GB/s ({rid})"
        out.append((label, simulated_total + seconds * clock_hz))
    start = sum(float(rows[rid]["value"]) for rid in START_ROWS)
    out.append(("start-of-run control copy (A5.t2)", simulated_total + start))
    return out


def main() -> int:
    with open(DATA / "measurements.csv", newline="", encoding="utf-8") as f:
        rows = {r["id"]: r for r in csv.DictReader(f)}
    hw = read_profile(DATA / "tut7_10000x1000_mk2_hardware.txt")
    measured = hw.phases["total"]
    with vertexCycles("counted"):
        run = run_workload(str(HERE / "t7_matvec.py"), "mk2", {"rows": 10000, "cols": 1000})
    simulated = run.metrics["total_cycles"]
    clock = hw.clock_hz
    gap = measured - simulated
    print(f"measured total {measured:,.0f}; simulated (mk2, counted) {simulated:,.0f}")
    print(f"outside every simulated step: {gap:,.0f} cycles = {gap / clock * 1e3:.2f} ms")
    print(f"rate that would move {BYTES_TO_DEVICE:,} B in that time: "
          f"{BYTES_TO_DEVICE / (gap / clock) / 1e9:.2f} GB/s")  # fmt: skip
    for label, total in candidates(simulated, rows, clock):
        print(f"{label:60s} total {total:>12,.0f}  {100 * (total / measured - 1):+.1f} %")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
