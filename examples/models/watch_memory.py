"""Run a model of ``examples/models`` with its host memory watched.

A thread samples the process's resident set every ``--every`` seconds together with
the main thread's innermost project frames (where the build or the compile is), and
writes one line per sample to stderr (and to ``--log``): wall seconds, CPU seconds,
resident GB, the frames. Past ``--limit`` GB it prints the last sample and ends the
process with exit status 3, so a run that would fill a shared machine stops cleanly
at a known point. The peak resident set sampled, the phase it was sampled in and the
kernel's maximum resident set are printed at the end (``--json``: one JSON object with
the run's figures as well).

Usage::

    flock /tmp/model.lock .venv/bin/python examples/models/watch_memory.py \
        resnet50 --train --ipus 4 --limit 15 --log /tmp/r50.log

Why: a model-size compile that runs out of memory is killed by the kernel with no
word of where it was; the samples say which phase holds the bytes.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import IO

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run_model import MODELS, run_model

#: Path fragments of the frames worth naming in a sample (the project's own code).
PROJECT_DIRS = ("poplar_api", "popart_api", "ipusim", "examples")


def resident_bytes() -> int:
    """The process's resident set in bytes (``VmRSS`` of ``/proc/self/status``)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("/proc/self/status has no VmRSS line; a Linux host is needed")


def where(thread_id: int, depth: int = 4) -> str:
    """The innermost ``depth`` project frames of thread ``thread_id``, outermost first."""
    frame = sys._current_frames().get(thread_id)
    if frame is None:
        return "?"
    frames = [
        f"{Path(fs.filename).stem}.{fs.name}:{fs.lineno}"
        for fs in traceback.extract_stack(frame)
        if any(f"/{d}/" in fs.filename for d in PROJECT_DIRS)
    ]
    return " > ".join(frames[-depth:]) or "?"


class Watch(threading.Thread):
    """Samples the resident set and the main thread's place; stops the process past
    ``limit`` bytes (exit status 3)."""

    def __init__(self, every: float, limit: float, log: IO[str] | None) -> None:
        super().__init__(daemon=True)
        self.every, self.limit, self.log = every, limit, log
        self.main = threading.main_thread().ident or 0
        self.t0 = time.perf_counter()
        self.peak, self.peak_at = 0, ""
        self.halt = threading.Event()

    def sample(self) -> str:
        """One line: wall s, CPU s, resident GB and the main thread's frames."""
        rss = resident_bytes()
        here = where(self.main)
        if rss > self.peak:
            self.peak, self.peak_at = rss, here
        cpu = sum(os.times()[:2])
        line = f"{time.perf_counter() - self.t0:7.1f} s {cpu:7.1f} cpu {rss / 1e9:6.2f} GB {here}"
        for out in (sys.stderr, self.log):
            if out is not None:
                print(line, file=out, flush=True)
        if rss > self.limit:
            print(f"stopped: resident set over {self.limit / 1e9:.2f} GB", file=sys.stderr)
            if self.log is not None:
                self.log.flush()
            os._exit(3)
        return line

    def run(self) -> None:
        while not self.halt.wait(self.every):
            self.sample()


def main(argv: list[str] | None = None) -> int:
    """Command line: run one model under the watch; print its figures and the peak."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("--train", action="store_true")
    parser.add_argument("--tiles", type=int, default=None)
    parser.add_argument("--ipus", type=int, default=1)
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples")
    parser.add_argument("--limit", type=float, default=15.0, help="GB at which to stop")
    parser.add_argument("--log", type=Path, default=None, help="also write samples here")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--allow-oom", action="store_true", help="run even if over tile memory")
    args = parser.parse_args(argv)
    log = args.log.open("w") if args.log else None
    watch = Watch(args.every, args.limit * 1e9, log)
    watch.start()
    result = run_model(args.model, args.train, args.tiles, args.ipus, allow_oom=args.allow_oom)
    watch.halt.set()
    watch.sample()
    figures = {
        **asdict(result),
        "wall": time.perf_counter() - watch.t0,
        "cpu": sum(os.times()[:2]),
        "peak_gb": watch.peak / 1e9,
        "maxrss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
        "peak_at": watch.peak_at,
    }
    if args.json:
        print(json.dumps(figures))
    else:
        for key, value in figures.items():
            print(f"{key}: {value}")
    if log is not None:
        log.close()
    return 0 if result.matched else 1


if __name__ == "__main__":
    sys.exit(main())
