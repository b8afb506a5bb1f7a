"""Host cost of counted execution: tutorial 7 (10000 x 1000, ``mk2``) estimated and counted.

Each mode runs the calibration workload ``examples/calibration/t7_matvec.py`` (the
tutorial's graph, one ``engine.run``) in its own child process, twice: the first run
also pays Numba's compiling of the kernels (the counted mode compiles a second,
counting kernel), the second is the warm figure. The row gives the host seconds of
building, compiling and running, and the run's simulated compute cycles (tile average:
the estimates' 3,786 and the counted figure against the hardware summary's 28,300.3).
The issue's bound: counted at most 3 x the host time of estimated, and estimate-mode
runs unchanged by the feature (nothing is counted when it is off).

Run::

    python benchmarks/bench_counted.py [--rows 10000 --cols 1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from ipusim.config import load_config  # noqa: E402
from poplar_api.counted import vertexCycles  # noqa: E402
from poplar_api.workload import run  # noqa: E402

WORKLOAD = str(ROOT / "examples" / "calibration" / "t7_matvec.py")


def one(mode: str, rows: int, cols: int) -> tuple[float, dict[str, float], float]:
    """Host seconds of one run in ``mode``, its host seconds by stage and compute cycles."""
    start = time.perf_counter()
    with vertexCycles(mode):
        result = run(WORKLOAD, load_config("mk2"), {"rows": rows, "cols": cols})
    seconds = time.perf_counter() - start
    return seconds, result.host_seconds, result.metrics["tile_avg_compute_cycles"]


def child(mode: str, rows: int, cols: int) -> None:
    """Run ``mode`` twice in this process and print both as JSON."""
    cold, _, _ = one(mode, rows, cols)
    seconds, stages, compute = one(mode, rows, cols)
    print(json.dumps({"cold": cold, "warm": seconds, "stages": stages, "compute": compute}))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--cols", type=int, default=1000)
    parser.add_argument("--child", choices=("estimate", "counted"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child, args.rows, args.cols)
        return 0
    print(f"tutorial 7, {args.rows} x {args.cols}, mk2")
    print(f"{'mode':<9} {'cold s':>7} {'warm s':>7} {'build':>6} {'compile':>7} {'run':>6} "
          f"{'compute cycles':>15}")  # fmt: skip
    warm = {}
    for mode in ("estimate", "counted"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", mode, "--rows", str(args.rows),
             "--cols", str(args.cols)],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        row = json.loads(out.strip().splitlines()[-1])
        stages = row["stages"]
        warm[mode] = row["warm"]
        print(
            f"{mode:<9} {row['cold']:7.2f} {row['warm']:7.2f} {stages['build']:6.2f} "
            f"{stages['compile']:7.2f} {stages['run']:6.2f} {row['compute']:15,.1f}"
        )
    print(f"counted / estimate (warm): {warm['counted'] / warm['estimate']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
