"""Sweeps in worker processes that used to hang for good, with no error and no CPU used.

* Each worker puts the key of the point it starts on a pipe to the sweep (who was at
  work, should the pool break). A pipe holds 64 KiB on Linux, about 1,870 keys: read only
  once the pool broke, it filled and every worker then waited in ``put``.
* A point that kills its worker while the sweep submits the next ones can break the pool
  while ``submit`` starts a new worker; concurrent.futures (CPython 3.11) neither stops
  that worker nor tells it to exit, and waits for it to exit in ``shutdown``. (Or it
  starts the worker after the pool closed its call queue: ``submit`` raises OSError.)

Each test runs the sweep in a subprocess, so that a hang fails the test (the sweep
killed after minutes) instead of hanging the suite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Seconds after which a sweep still running is taken for a hung one, and those added
#: for each point (160 points take under 10 s on a busy 2-core machine).
HANG_S = 120
HANG_S_PER_POINT = 0.1

#: The sweep, run as ``python sweep.py OUT POINTS PIPE_BYTES RACE``: its started-keys
#: pipe made PIPE_BYTES long (0: left as made); with RACE ("late" or "early", not
#: "none"), the pool breaks while it starts its second worker.
SCRIPT = '''
import fcntl
import os
import signal
import sys
import time

from ipusim.sweep import ResultStore, load_experiment, run_sweep
from ipusim.sweep import execute

WORKLOAD = """
from poplar_api import Graph
from poplar_api import program as prog
from poplar_api.workload import Workload


def workload(device, i: int = 0):
    return Workload(Graph(device.getTarget()), prog.Sequence())
"""


class SmallPipe(execute.ProcessPoolExecutor):
    """A pool whose workers' started-keys queue (its initializer's first argument) has a
    pipe of PIPE_BYTES."""

    def __init__(self, *args, initargs=(), **kwargs):
        fd = initargs[0]._writer.fileno()
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
        assert fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ) == PIPE_BYTES
        super().__init__(*args, initargs=initargs, **kwargs)


def break_pool(pool, first_pid):
    """Kill the pool's first worker (as a point that kills its worker does) and wait
    until the pool's manager thread has stopped the workers it knew of (it then closes
    the call queue's reader)."""
    BreaksWhileSpawning.raced = True
    os.kill(first_pid, signal.SIGKILL)
    deadline = time.monotonic() + 60
    while not (pool._broken and pool._call_queue._reader.closed):
        if time.monotonic() > deadline:
            sys.exit("the pool did not break")
        time.sleep(0.01)


class BreaksWhileSpawning(execute.ProcessPoolExecutor):
    """The first pool breaks while submit() starts its second worker: RACE "late", once
    the worker is started and before the pool records it; "early", before it is started."""

    raced = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._processes = RecordedLate(self)

    def _spawn_process(self):
        if RACE == "early" and self._processes and not BreaksWhileSpawning.raced:
            break_pool(self, next(iter(self._processes)))
        super()._spawn_process()


class RecordedLate(dict):
    def __init__(self, pool):
        super().__init__()
        self.pool = pool

    def __setitem__(self, pid, process):
        if RACE == "late" and self and not BreaksWhileSpawning.raced:
            break_pool(self.pool, next(iter(self)))
        super().__setitem__(pid, process)


if __name__ == "__main__":
    out, points, PIPE_BYTES, RACE = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    if PIPE_BYTES:
        execute.ProcessPoolExecutor = SmallPipe
    if RACE != "none":
        execute.ProcessPoolExecutor = BreaksWhileSpawning
    with open(out + ".py", "w") as f:
        f.write(WORKLOAD)
    exp = load_experiment(
        {
            "name": "many",
            "workloads": [{"spec": out + ".py"}],
            "config": "tiny",
            "axes": [{"path": "workload.i", "range": {"start": 0, "stop": points}}],
            "profiles": False,
        }
    )
    summary = run_sweep(exp, out, jobs=2, progress=False)
    rows = ResultStore(out).rows()
    died = rows["error"].str.contains("worker process died").sum()
    print(summary.ran, summary.failed, len(rows), (rows["status"] == "ok").sum(), died)
'''


def run_sweep_process(tmp_path: Path, points: int, pipe_bytes: int = 0, race: str = "none") -> str:
    """Run the sweep in a subprocess; what it printed. Fails the test (the subprocess
    and its workers killed) when it runs longer than :data:`HANG_S` and
    :data:`HANG_S_PER_POINT` for each point."""
    script = tmp_path / "sweep.py"
    script.write_text(SCRIPT)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    out_dir = tmp_path / "out"
    command = [sys.executable, str(script), str(out_dir), str(points), str(pipe_bytes)]
    process = subprocess.Popen(
        [*command, race],
        env=env,
        start_new_session=True,  # its own process group: the workers are killed with it
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = process.communicate(timeout=HANG_S + HANG_S_PER_POINT * points)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        stored = len(list((out_dir / "points").glob("*.parquet")))
        pytest.fail(f"the sweep of {points} points hung after {stored} rows")
    assert process.returncode == 0, err
    return out


@pytest.mark.skipif(sys.platform != "linux", reason="F_SETPIPE_SZ is Linux's")
@pytest.mark.parametrize(
    ("points", "pipe_bytes"),
    [(160, 4096), pytest.param(2500, 0, marks=pytest.mark.slow, id="2500-64KiB")],
)
def test_a_sweep_never_fills_the_started_keys_pipe(tmp_path, points, pipe_bytes):
    # One page holds 117 keys (35 bytes each); 64 KiB about 1,870.
    out = run_sweep_process(tmp_path, points, pipe_bytes)
    assert out.split() == [str(points), "0", str(points), str(points), "0"]


@pytest.mark.parametrize("race", ["late", "early"])
def test_a_pool_that_breaks_while_it_starts_a_worker(tmp_path, race):
    # Point 0 runs alone; the first worker is killed as the submission of the others
    # starts the second. "late": the sweep hung (the new worker was never stopped);
    # "early": submit() raised OSError (handle is closed) out of run_sweep. The points
    # the first worker was running run again: all four are stored.
    out = run_sweep_process(tmp_path, 4, race=race)
    assert out.split() == ["4", "0", "4", "4", "0"]


def test_each_point_is_sent_without_the_experiment(tmp_path, monkeypatch):
    """The worker processes get the experiment once, when they start: a point's
    submission carries the point alone (an experiment holds its axes' values, some
    370 KB for 100,000 of them, and was pickled again with every point)."""
    from ipusim.sweep import ResultStore, execute, load_experiment, run_sweep
    from ipusim.sweep.experiment import Experiment

    sent: list[tuple] = []

    class Recording(execute.ProcessPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            sent.append(args)
            return super().submit(fn, *args, **kwargs)

    monkeypatch.setattr(execute, "ProcessPoolExecutor", Recording)
    spec = tmp_path / "w.py"
    spec.write_text(SCRIPT.split('WORKLOAD = """', 1)[1].split('"""', 1)[0])
    exp = load_experiment(
        {
            "name": "few",
            "workloads": [{"spec": str(spec)}],
            "config": "tiny",
            "axes": [{"path": "workload.i", "values": [0, 1, 2, 3]}],
            "profiles": False,
        }
    )
    summary = run_sweep(exp, tmp_path / "out", jobs=2, progress=False)
    assert summary.ran == 4 and (ResultStore(tmp_path / "out").rows()["status"] == "ok").all()
    assert len(sent) == 4
    assert not any(isinstance(a, Experiment) for args in sent for a in args)
