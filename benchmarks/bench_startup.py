"""Per-process cost of running a script: the disk cache of compiled vertex drivers.

Each row runs a script in a fresh Python process several times, interleaving three
settings of the driver cache (:mod:`poplar_api.driver_cache`) so that changes in the
machine's load fall on all three alike:

* ``off``: ``IPUSIM_DRIVER_CACHE=0``, every driver compiled in the process (what every
  process paid before the cache);
* ``cold``: the cache directory emptied before the run (the first run of a script);
* ``warm``: the entries the previous run left (every later run).

Reported: the median CPU time (user + system, from ``getrusage`` of the child) and
the median wall time. Numba's own cache of the library's functions is warm in all
three (one untimed run first), and so is Python's bytecode cache unless the
environment turns it off (``PYTHONDONTWRITEBYTECODE``: every process then compiles
the modules it imports from source, about 1 s more).

Run::

    python benchmarks/bench_startup.py [--rounds N] [--cnn]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: name -> script and arguments (paths from the checkout)
WORKLOADS = {
    "tutorial 7, 100x100": ["examples/tutorials/tut7.py", "100", "100"],
    "CNN step, 32 tiles": [
        "examples/cnn/cnn_digits.py",
        "--tiles",
        "32",
        "--steps",
        "1",
        "--no-eval",
    ],
}
MODES = ("off", "cold", "warm")


def run_once(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """CPU seconds (user + system) and wall seconds of one run of ``command``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def measure(script: list[str], rounds: int, cache: Path) -> dict[str, list[tuple[float, float]]]:
    """``rounds`` interleaved runs of each mode of :data:`MODES`."""
    command = [sys.executable, *script]
    base = {**os.environ, "IPUSIM_CACHE_DIR": str(cache)}
    base.pop("IPUSIM_DRIVER_CACHE", None)
    run_once(command, base)  # bytecode and Numba's library cache
    results: dict[str, list[tuple[float, float]]] = {mode: [] for mode in MODES}
    for _ in range(rounds):
        for mode in MODES:
            env = dict(base)
            if mode == "off":
                env["IPUSIM_DRIVER_CACHE"] = "0"
            elif mode == "cold":
                shutil.rmtree(cache / "numba", ignore_errors=True)
            results[mode].append(run_once(command, env))
            print(f"  {script[0]} {mode}: {results[mode][-1]}", file=sys.stderr)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode (3)")
    parser.add_argument("--cnn", action="store_true", help="also the CNN training step")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    names = list(WORKLOADS) if args.cnn else list(WORKLOADS)[:1]
    print("| workload | driver cache | CPU s, median (runs) | wall s, median |")
    print("| --- | --- | --- | --- |")
    with tempfile.TemporaryDirectory(prefix="ipusim-bench-startup-") as tmp:
        for name in names:
            results = measure(WORKLOADS[name], args.rounds, Path(tmp))
            for mode, runs in results.items():
                cpu = statistics.median(c for c, _ in runs)
                wall = statistics.median(w for _, w in runs)
                listed = ", ".join(f"{c:.2f}" for c, _ in runs)
                print(f"| {name} | {mode} | {cpu:.2f} ({listed}) | {wall:.2f} |")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
