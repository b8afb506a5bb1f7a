"""Peak host RAM of a command run in a child process (for the benchmarks)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Sequence

#: Runs ``argv[1:]`` as a grandchild and prints its exit status and peak RSS (KiB). On
#: Linux a child's ``ru_maxrss`` starts at its parent's peak when forked, so the child
#: is forked from this small launcher, not from the (large) benchmark process.
LAUNCHER = (
    "import os, sys\n"
    "pid = os.fork()\n"
    "if pid == 0:\n"
    "    os.execv(sys.argv[1], sys.argv[1:])\n"
    "_, status, usage = os.wait4(pid, 0)\n"
    "print(os.waitstatus_to_exitcode(status), usage.ru_maxrss, file=sys.stderr)\n"
)


def child_peak(cmd: Sequence[str]) -> tuple[int, float, int, str]:
    """Run ``cmd``; return (exit status, wall seconds, peak RSS in bytes, stdout)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *cmd], capture_output=True, text=True, check=False
    )
    status, kib = proc.stderr.strip().splitlines()[-1].split()
    return int(status), time.perf_counter() - t0, int(kib) * 1024, proc.stdout
