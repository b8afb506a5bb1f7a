"""Wall time of a calibration: tutorial 7 (10000 x 1000) against the recorded IPU Model summary.

Fits four parameters of the ``mk2`` preset (host bandwidth and latency, host sync
cycles, exchange bytes per cycle) to the Poplar IPU Model profile summary of tutorial 7
(``tests/data/calibration/tut7_10000x1000_mk2_ipumodel_sdk2.txt``) on the phases
``total``, ``internal_exchange``, ``host_exchange`` and ``sync``. The workload is built,
compiled and run once; every trial config only re-times the lowered program. Target:
under 2 minutes on 2 cores.

Prints the time of the one workload run, of the whole calibration, the number of
simulations and the time per simulation, then the calibration report.

Run::

    python benchmarks/bench_calibrate.py [--rows R] [--cols C] [--measured PATH]
        [--max-evaluations N] [--out overlay.yaml]
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

from ipusim.calibrate import Pair, calibrate
from ipusim.config import load_config
from ipusim.measured import read_profile
from ipusim.runner import run_workload

ROOT = Path(__file__).resolve().parent.parent
TUT7 = str(ROOT / "examples" / "tutorials" / "tut7.py")
MEASURED = ROOT / "tests" / "data" / "calibration" / "tut7_10000x1000_mk2_ipumodel_sdk2.txt"
PARAMETERS = [
    "host.bandwidth_bytes_per_s",
    "host.latency_s",
    "sync.host_sync_cycles",
    "exchange.bytes_per_cycle",
]
PHASES = ("total", "internal_exchange", "host_exchange", "sync")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when it finished under the 2-minute target, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10000)
    parser.add_argument("--cols", type=int, default=1000)
    parser.add_argument("--measured", type=Path, default=MEASURED)
    parser.add_argument("--config", default="mk2")
    parser.add_argument("--max-evaluations", type=int, default=200)
    parser.add_argument("--out", type=Path, default=None, help="write the overlay here")
    args = parser.parse_args(argv)

    cfg = load_config(args.config)
    measured = read_profile(args.measured)
    params = {"rows": args.rows, "cols": args.cols}

    # Warm-up: compile the codelets once (not charged to the calibration).
    t0 = time.perf_counter()
    run_workload(TUT7, load_config("tiny"), {"rows": 64, "cols": 8})
    warm = time.perf_counter() - t0

    t0 = time.perf_counter()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        result = calibrate(
            [Pair(TUT7, params, measured)],
            cfg,
            PARAMETERS,
            phases=PHASES,
            max_evaluations=args.max_evaluations,
        )
    total = time.perf_counter() - t0
    print(result.report())
    print()
    print(f"warm-up (JIT, tiny tut7):        {warm:8.2f} s")
    print(f"workload run (build+compile+run): {result.build_seconds:8.2f} s")
    fit = total - result.build_seconds
    print(
        f"fit: {result.evaluations} simulations in {fit:.2f} s "
        f"({fit / max(result.evaluations, 1) * 1e3:.1f} ms each)"
    )
    print(f"calibration total:               {total:8.2f} s (target < 120 s)")
    if args.out is not None:
        result.to_overlay_yaml(args.out)
        print(f"wrote {args.out}")
    return 0 if total < 120 else 1


if __name__ == "__main__":
    sys.exit(main())
