"""Wall time of ``ipusim sweep``: a 64-point sweep of tutorial 7, then its cached rerun.

By default the sweep is ``examples/experiments/tut7_exchange.yaml`` (tutorial 7 on the
Mk1 and Mk2 IPU Models x 4 exchange rates x 2 row counts x 4 column counts) run with
``--jobs`` worker processes (2) into a fresh temporary directory; the rerun of the same
sweep finds every row stored and runs nothing, so its time is the fixed cost of a
sweep (loading and checking the experiment, expanding the points, reading the store).
``--quick`` uses the same grid on the 8-tile ``tiny`` machine and a 16-tile variant at
tiny sizes (the grid of ``tests/test_sweep.py``). Printed: total wall seconds, points
per second, the mean host seconds of one point (from the rows), and the rerun's wall
seconds. Exits 1 if a point failed or the rerun ran anything.

Run::

    python benchmarks/bench_sweep.py [--quick] [--jobs N] [--scheduler local|HOST:PORT]
        [--experiment PATH] [--out DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from ipusim.sweep import ResultStore, load_experiment, run_sweep

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "experiments" / "tut7_exchange.yaml"
TUT7 = ROOT / "examples" / "tutorials" / "tut7.py"


def quick_experiment(directory: Path) -> Path:
    """Write the tiny 64-point grid (and its 16-tile machine) to ``directory``."""
    (directory / "tiny16.yaml").write_text(
        yaml.safe_dump({"extends": "tiny", "name": "tiny16", "tile": {"tiles_per_ipu": 16}})
    )
    data = {
        "name": "bench_quick",
        "workloads": [{"spec": str(TUT7), "name": "tut7"}],
        "config": {"base": "tiny", "set": {"sync.relative_delay": "none"}},
        "axes": [
            {"path": "config", "values": ["tiny", "tiny16.yaml"]},
            {"path": "exchange.bytes_per_cycle", "values": [2, 4, 8, 16]},
            {"path": "workload.rows", "values": [4, 8]},
            {"path": "workload.cols", "values": [4, 8, 12, 16]},
        ],
    }
    path = directory / "bench_quick.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; 0 when every point ran and the rerun ran none."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny machines and sizes")
    parser.add_argument("--jobs", "-j", type=int, default=2, help="worker processes (2)")
    parser.add_argument("--scheduler", help="dask: 'local' or HOST:PORT")
    parser.add_argument("--experiment", type=Path, help=f"experiment YAML (default {EXAMPLE})")
    parser.add_argument("--out", type=Path, help="result directory (default: a fresh temp dir)")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="bench_sweep_") as tmp:
        tmp_dir = Path(tmp)
        path = args.experiment or (quick_experiment(tmp_dir) if args.quick else EXAMPLE)
        out = args.out or tmp_dir / "out"
        exp = load_experiment(path)
        how = f"dask {args.scheduler}" if args.scheduler else f"{args.jobs} job(s)"
        print(f"Experiment {exp.name} ({path}), {how}, results in {out}")

        t0 = time.perf_counter()
        first = run_sweep(exp, out, jobs=args.jobs, scheduler=args.scheduler, progress=False)
        sweep_s = time.perf_counter() - t0
        rows = ResultStore(out).rows()
        t0 = time.perf_counter()
        again = run_sweep(path, out, jobs=args.jobs, scheduler=args.scheduler, progress=False)
        rerun_s = time.perf_counter() - t0

        point_s = rows["host_seconds"].mean()
        print(f"{'':<14}{'points':>8}{'ran':>6}{'cached':>8}{'failed':>8}{'wall s':>9}")
        for label, summary, seconds in (
            ("sweep", first, sweep_s),
            ("cached rerun", again, rerun_s),
        ):
            print(
                f"{label:<14}{summary.total:>8}{summary.ran:>6}{summary.cached:>8}"
                f"{summary.failed:>8}{seconds:>9.2f}"
            )
        print(
            f"sweep: {first.ran / sweep_s:.1f} points per wall second; mean host seconds "
            f"of one point {point_s:.3f} (sum {rows['host_seconds'].sum():.1f})"
        )
    return 0 if first.failed == 0 and again.ran == 0 else 1


if __name__ == "__main__":  # the worker processes import this file: keep the guard
    sys.exit(main())
