"""Running the points of a sweep: one point, and the whole sweep on an executor.

:func:`run_point` runs one point with :func:`~ipusim.runner.run_workload` and returns
its row; a point that raises gives a row with status ``error`` and the exception's type
and message, so the sweep goes on. :func:`run_sweep` expands the experiment, skips the
points whose row is stored already, runs the others on an executor and writes each row
*in this process* as its result arrives, so a worker that dies loses only its point:

* ``jobs=1``: in this process, one point after the other;
* ``jobs=N``: N worker processes (:class:`concurrent.futures.ProcessPoolExecutor`,
  ``forkserver`` context where available, else ``spawn``). A worker that dies
  (segfault, out of memory, ``os._exit``) breaks the pool; the points it was running
  are run again each in a pool of its own, and the one that kills that worker too is
  recorded as failed. A pool runs its first point alone, so that the kernels it
  compiles are compiled once and loaded from the disk caches by the other workers;
* ``scheduler="local"``: a :class:`dask.distributed.LocalCluster` of ``jobs`` worker
  processes with one thread each, the first point alone too; ``scheduler="host:port"``:
  an existing dask cluster.
  Its workers need ipusim installed and the workload files at the same paths (a
  shared file system), and should run one thread each (``dask worker --nthreads 1``):
  a workload's captured output is process-wide.

The simulation is deterministic, so every executor gives the same rows apart from
``host_seconds``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ipusim import __version__
from ipusim.runner import RunResult, run_workload
from ipusim.sweep.experiment import Experiment, load_experiment
from ipusim.sweep.points import Point, expand_points
from ipusim.sweep.store import PHASE_COLUMNS, ResultStore, SweepError
from ipusim.sweep.workloads import canonical_json

__all__ = [
    "SCHEDULER_TIMEOUT_S",
    "PointProfiles",
    "SweepSummary",
    "run_point",
    "run_sweep",
]

#: Seconds to wait for a dask scheduler before giving up (before any point runs).
SCHEDULER_TIMEOUT_S = 5.0

_Outcome = tuple[Point, dict[str, Any], "PointProfiles | None"]


@dataclass(frozen=True)
class PointProfiles:
    """The profiles of one run, small enough to send from a worker to the writer.

    Has the attributes :func:`~ipusim.runner.write_profiles` reads.
    """

    graph_profile: dict[str, Any] | None
    execution_profile: dict[str, Any] | None
    summary: str


@dataclass(frozen=True)
class SweepSummary:
    """What :func:`run_sweep` did.

    Attributes
    ----------
    total
        Points of the experiment.
    ran
        Points run by this call.
    cached
        Points skipped because their row was stored already.
    failed
        Points whose stored row has status ``error`` after this call (run now or
        stored before and not retried).
    host_seconds
        Wall-clock seconds of the call.
    out_dir
        Where the rows are.
    """

    total: int
    ran: int
    cached: int
    failed: int
    host_seconds: float
    out_dir: Path | None = None

    def __str__(self) -> str:
        where = f"; results in {self.out_dir}" if self.out_dir is not None else ""
        return (
            f"{self.total} points: {self.ran} ran, {self.cached} cached, {self.failed} failed; "
            f"{self.host_seconds:.2f} host seconds{where}"
        )


# --------------------------------------------------------------------------- one point
def _base_row(point: Point, exp: Experiment) -> dict[str, Any]:
    row: dict[str, Any] = {"point": point.index, "key": point.key, "workload": point.workload_name}
    row.update(point.axes)
    row.update(
        {
            "repeat": point.repeat,
            "config": str(point.axes.get("config", exp.config.base)),
            "params": canonical_json(point.params),
            "config_hash": point.config_hash,
            "workload_hash": point.workload_hash,
            "ipusim_version": __version__,
            "status": "ok",
            "error": "",
            "check": None,
            "total_cycles": None,
            **dict.fromkeys(PHASE_COLUMNS),
            "memory_peak_bytes": None,
            "host_seconds": None,
            "compute_sets": "{}",
            "metrics": "{}",
        }
    )
    return row


def _error_text(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def error_row(point: Point, exp: Experiment, message: str, seconds: float | None) -> dict[str, Any]:
    """The row of a point that could not run: status ``error`` and ``message``."""
    row = _base_row(point, exp)
    row.update(status="error", error=message, host_seconds=seconds)
    return row


def _memory_peak(profile: dict[str, Any] | None) -> int | None:
    """Most bytes used on any tile, from the graph profile's ``memory.byTile.total``."""
    try:
        totals = profile["memory"]["byTile"]["total"]  # type: ignore[index]
        return int(max(totals)) if totals else 0
    except (KeyError, TypeError, ValueError):
        return None


def _result_columns(result: RunResult) -> dict[str, Any]:
    trace = result.trace
    totals = trace.totals
    compute_sets: dict[str, int] = {}
    for record in trace.records:
        if record.kind == "compute":
            compute_sets[record.name] = compute_sets.get(record.name, 0) + int(record.cycles)
    columns: dict[str, Any] = {
        "check": result.ok,
        "total_cycles": int(trace.total_cycles),
        **{phase: int(totals[phase]) for phase in PHASE_COLUMNS},
        "memory_peak_bytes": _memory_peak(result.graph_profile),
        "compute_sets": json.dumps(compute_sets, separators=(",", ":")),
        "metrics": json.dumps(result.metrics, separators=(",", ":"), allow_nan=False),
    }
    if not trace.complete:
        columns.update(status="error", error="the run stopped early (incomplete trace)")
    elif result.ok is False:
        columns.update(status="error", error="check failed: the workload's check returned False")
    return columns


def _execute(
    point: Point, exp: Experiment, keep_profiles: bool = False
) -> tuple[dict[str, Any], PointProfiles | None]:
    """Run ``point``; its row and (with ``keep_profiles``) its profiles. Never raises
    for a failing workload: the row says what went wrong."""
    started = time.perf_counter()
    try:
        result = run_workload(
            point.workload, point.machine, point.params, options=exp.options, quiet=True
        )
        row = _base_row(point, exp)
        row.update(_result_columns(result))
    except (Exception, SystemExit) as exc:
        return error_row(point, exp, _error_text(exc), time.perf_counter() - started), None
    row["host_seconds"] = time.perf_counter() - started
    profiles = None
    if keep_profiles:
        profiles = PointProfiles(
            None if result.graph_profile is None else dict(result.graph_profile),
            None if result.execution_profile is None else dict(result.execution_profile),
            result.summary,
        )
    return row, profiles


def run_point(point: Point, exp: Experiment) -> dict[str, Any]:
    """Run one point and return its row.

    The row has: ``point`` (index), ``key``, ``workload`` (name), one column per axis
    (named by its path) with this point's value, ``repeat``, ``config`` (base config
    as written), ``params`` (JSON), ``config_hash``, ``workload_hash``,
    ``ipusim_version``, ``status`` (``ok`` | ``error``), ``error`` (``""`` when ok),
    ``check`` (the workload's check, None without one), ``total_cycles``, one column
    per phase total (``compute``, ``internal_exchange``, ``global_exchange``,
    ``host_exchange``, ``sync``, and ``compute_active``), ``memory_peak_bytes`` (the
    most bytes used on any tile), ``host_seconds`` (wall seconds of the point),
    ``compute_sets`` (JSON: compute set name -> cycles) and ``metrics`` (JSON).

    A workload that raises gives status ``error`` with ``"Type: message"`` and empty
    numbers; a failed check or an incomplete run gives status ``error`` with the
    numbers measured.
    """
    return _execute(point, exp)[0]


# ---------------------------------------------------------------------------- executors
class _Serial:
    """Points one after the other, in this process."""

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def imap(self, points: Sequence[Point], exp: Experiment, keep: bool) -> Iterator[_Outcome]:
        for point in points:
            row, profiles = _execute(point, exp, keep)
            yield point, row, profiles


_STARTED: Any = None
#: The experiment and whether to keep profiles, handed to each worker once when it starts
#: (``_init_worker``) rather than pickled again with every point: an experiment holds
#: its axes' values, some 370 KB for an axis of 100,000 values.
_RUN: tuple[Experiment, bool] | None = None


def _watch_parent(parent: int) -> None:
    """Exit when this worker's parent goes: the sweep (spawn) or its fork server, which
    ends with the sweep. So a killed sweep leaves no orphaned worker behind."""
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)


def _init_worker(started: Any, exp: Experiment, keep: bool) -> None:
    global _STARTED, _RUN
    _STARTED, _RUN = started, (exp, keep)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()


def _execute_in_worker(point: Point) -> tuple[dict[str, Any], PointProfiles | None]:
    if _STARTED is not None:
        _STARTED.put(point.key)  # before running: tells the parent who was at work
    assert _RUN is not None, "a sweep worker runs points only after _init_worker"
    return _execute(point, *_RUN)


def _runner_module() -> str:
    """The module of the default workload runner, named without importing it."""
    from importlib import metadata

    from ipusim.runner import _FALLBACK_MODULE, DEFAULT_RUNNER, RUNNER_GROUP

    for entry in metadata.entry_points(group=RUNNER_GROUP):
        if entry.name == DEFAULT_RUNNER:
            return entry.module
    return _FALLBACK_MODULE


def _worker_context() -> multiprocessing.context.BaseContext:
    """``forkserver`` where there is one, else ``spawn``: both start each worker from a
    fresh interpreter (no state copied from this process). The fork server imports the
    simulator and the workload runner once, so each new worker starts in milliseconds
    instead of seconds (which matters when a crashed pool is replaced)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload([__name__, _runner_module()])
        return context
    return multiprocessing.get_context("spawn")


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the worker processes of ``pool`` (which this sweep started), so that an
    interrupted sweep exits at once instead of waiting for the points at work."""
    kill = getattr(pool, "kill_workers", None)  # Python 3.14+
    if kill is not None:
        kill()
        return
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(Exception):
            process.kill()


#: Longest the parent waits for a point without reading the keys the workers started
#: (seconds). It reads them whenever a point finishes, too; this bounds the wait when
#: none does, however many workers put keys meanwhile.
_READ_STARTED_S = 1.0


class _StartedKeys:
    """The keys of the points a pool's workers started whose results have not come:
    those at work, should the pool break.

    Each worker puts a point's key on ``queue`` (a pipe) before running it. A pipe holds
    64 KiB on Linux, about 1,870 keys: left unread until the pool broke, it filled and
    every worker then waited in ``put`` for good, so the sweep hung with no error. The
    parent calls :meth:`read` each time it wakes up and :meth:`finished` for each point
    whose result came, so the pipe never fills and :attr:`keys` holds no more than the
    points submitted.
    """

    def __init__(self, queue: Any) -> None:
        self.queue = queue
        self.keys: set[str] = set()

    def read(self) -> None:
        """Move the keys waiting in the queue into :attr:`keys`."""
        while not self.queue.empty():
            self.keys.add(self.queue.get())

    def finished(self, key: str) -> None:
        """Forget ``key``: its point's result came (read its key first)."""
        self.keys.discard(key)


@dataclass
class _BrokenPool:
    """Points a broken pool left unfinished, and the keys of those it was running."""

    unfinished: list[Point]
    at_work: set[str]


class _Processes:
    """Points in ``jobs`` spawned worker processes; a crashed worker costs its point.

    Each pool runs its first point alone and the others once it has finished. A
    point's first run in a process compiles the simulator's Numba kernels and vertex
    drivers unless their disk caches hold them (about 27 s of CPU for tutorial 7 with
    empty caches); workers started together would each compile all of them at the same
    time, while those started after the first point load what its worker saved. With
    filled caches this keeps the other workers idle for one point's time.
    """

    def __init__(self, jobs: int) -> None:
        self.jobs = jobs
        self.context = _worker_context()

    def __enter__(self) -> _Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def _batch(
        self,
        points: Sequence[Point],
        exp: Experiment,
        keep: bool,
        workers: int,
        broken: list[_BrokenPool],
    ) -> Iterator[_Outcome]:
        """Run ``points`` in a new pool of ``workers`` and yield each outcome; if the pool
        breaks, append the points left unfinished (and which of them were at work) to
        ``broken``."""
        queue = self.context.SimpleQueue()
        started = _StartedKeys(queue)
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=self.context,
            initializer=_init_worker,
            initargs=(queue, exp, keep),
        )
        clean = False
        unfinished: list[Point] = []
        # The first point runs alone (see _Processes): its worker compiles the kernels
        # and fills the disk caches, from which the workers started after it load them.
        held = list(points[1:]) if workers > 1 else []
        try:
            first = points[:1] if held else points
            pending = {pool.submit(_execute_in_worker, p): p for p in first}
            while pending:
                started.read()  # the workers may have started many points while rows were stored
                done, _ = wait(pending, timeout=_READ_STARTED_S, return_when=FIRST_COMPLETED)
                started.read()  # among them the keys of the points in done
                for future in done:
                    point = pending.pop(future)
                    try:
                        row, profiles = future.result()
                    except BrokenProcessPool:
                        unfinished.append(point)
                        continue
                    except Exception as exc:  # e.g. a result that cannot be pickled
                        row, profiles = error_row(point, exp, _error_text(exc), None), None
                    started.finished(point.key)
                    yield point, row, profiles
                if held and not pending:
                    if unfinished:  # the first point broke the pool: the rest never ran
                        unfinished.extend(held)
                    else:
                        pending = _submit(pool, held, unfinished, started)
                    held = []
            if unfinished:
                started.read()
                unfinished.sort(key=lambda p: p.index)
                broken.append(_BrokenPool(unfinished, set(started.keys)))
            clean = True
        finally:
            # Interrupted (Ctrl-C) or failing: stop this pool's workers now. After a break
            # too: a worker that submit() started while the pool was breaking is neither
            # stopped nor sent the sentinel by concurrent.futures (CPython 3.11), whose
            # manager thread then waits for it to exit for good, and shutdown() with it.
            if not clean or unfinished:
                _kill_workers(pool)
            pool.shutdown(wait=clean, cancel_futures=True)

    def imap(self, points: Sequence[Point], exp: Experiment, keep: bool) -> Iterator[_Outcome]:
        queue = list(points)
        suspects: list[Point] = []
        idle_breaks = 0
        while queue or suspects:
            if queue:
                batch, workers, isolated = queue, self.jobs, False
            else:
                batch, workers, isolated = [suspects.pop(0)], 1, True
            queue = []
            broken: list[_BrokenPool] = []
            yield from self._batch(batch, exp, keep, workers, broken)
            if not broken:
                continue
            unfinished, at_work = broken[0].unfinished, broken[0].at_work
            if isolated:
                (point,) = unfinished
                message = (
                    "worker process died while running this point (run again alone in a "
                    "fresh worker, it died too): a crash, os._exit or the machine running "
                    "out of memory"
                )
                yield point, error_row(point, exp, message, None), None
                continue
            if not any(p.key in at_work for p in unfinished):
                idle_breaks += 1
                if idle_breaks > 1:
                    raise SweepError(
                        "the worker processes keep dying before running a point; hint: a "
                        "script that calls run_sweep(jobs>1) must guard its entry with "
                        "if __name__ == '__main__': (the workers import it), or use jobs=1"
                    )
            suspects += [p for p in unfinished if p.key in at_work]
            queue = [p for p in unfinished if p.key not in at_work]


def _submit(
    pool: ProcessPoolExecutor,
    points: Sequence[Point],
    unfinished: list[Point],
    started: _StartedKeys,
) -> dict[Any, Point]:
    """Submit ``points`` to ``pool``; their futures. A point submitted before it may
    already have killed its worker (a crash, ``os._exit``), which breaks the pool while
    the rest are submitted: those never ran and join ``unfinished``, as the points whose
    futures then fail do.

    ``started`` is read after each submission, as the workers run points meanwhile
    (100,000 points take about 3 s to submit, 31 us each). Left unread, its pipe would
    fill and the workers wait; the pool's manager thread, unable to hand them more work,
    would stop reading its wake-up pipe, which ``submit`` writes to: once full, this
    loop would wait too, for good."""
    pending: dict[Any, Point] = {}
    for k, point in enumerate(points):
        try:
            pending[pool.submit(_execute_in_worker, point)] = point
        except (BrokenProcessPool, OSError) as exc:
            # OSError: the worker submit() started was handed the call queue after the
            # breaking pool had closed it ("handle is closed").
            if isinstance(exc, OSError) and not getattr(pool, "_broken", False):
                raise
            unfinished.extend(points[k:])
            break
        started.read()
    return pending


class _Dask:
    """Points on a dask.distributed cluster: a LocalCluster or one at an address."""

    def __init__(self, scheduler: str, jobs: int) -> None:
        try:
            from dask.distributed import Client, LocalCluster
        except ImportError as exc:  # pragma: no cover - a dependency of ipusim
            raise SweepError(
                f"scheduler {scheduler!r} needs dask.distributed ({exc}); hint: "
                "pip install 'dask[distributed]'"
            ) from None
        self.cluster = None
        if scheduler == "local":
            self.cluster = LocalCluster(
                n_workers=max(1, jobs),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster)
            return
        address = scheduler if "://" in scheduler else f"tcp://{scheduler}"
        try:
            self.client = Client(address, timeout=SCHEDULER_TIMEOUT_S)
        except Exception as exc:
            raise SweepError(
                f"--scheduler {scheduler!r}: no dask scheduler answered within "
                f"{SCHEDULER_TIMEOUT_S:g} s ({_error_text(exc)}); hint: start one with "
                "`dask scheduler` and workers with `dask worker ADDRESS --nthreads 1`, or "
                "use --scheduler local for a cluster on this machine"
            ) from None

    def __enter__(self) -> _Dask:
        return self

    def __exit__(self, *exc: object) -> None:
        with contextlib.suppress(Exception):
            self.client.close()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.close()

    def imap(self, points: Sequence[Point], exp: Experiment, keep: bool) -> Iterator[_Outcome]:
        # A LocalCluster's workers share this machine's disk caches: as in _Processes,
        # the first point runs alone and the others load the kernels its worker saved.
        # (The workers of a cluster elsewhere may not share them.)
        if self.cluster is not None and len(points) > 1:
            yield from self._run(points[:1], exp, keep)
            points = points[1:]
        yield from self._run(points, exp, keep)

    def _run(self, points: Sequence[Point], exp: Experiment, keep: bool) -> Iterator[_Outcome]:
        from dask.distributed import as_completed

        # the experiment sent to every worker once, each task naming it (not pickled with
        # every point: an experiment holds its axes' values)
        shared = self.client.scatter(exp, broadcast=True, hash=False)
        futures = {
            self.client.submit(
                _execute, p, shared, keep, pure=False, key=f"ipusim-sweep-{p.key}-{time.time_ns()}"
            ): p
            for p in points
        }
        try:
            for future in as_completed(futures):
                point = futures[future]
                try:
                    row, profiles = future.result()
                except Exception as exc:  # KilledWorker, a lost connection, ...
                    row, profiles = error_row(point, exp, _error_text(exc), None), None
                yield point, row, profiles
        finally:
            with contextlib.suppress(Exception):
                self.client.cancel(list(futures))


def _executor(jobs: int, scheduler: str | None) -> _Serial | _Processes | _Dask:
    if scheduler is not None:
        return _Dask(scheduler, jobs)
    return _Serial() if jobs <= 1 else _Processes(jobs)


# ------------------------------------------------------------------------------ a sweep
def run_sweep(
    exp: Experiment | str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    jobs: int = 1,
    scheduler: str | None = None,
    progress: bool = True,
    retry_failed: bool = False,
    on_row: Callable[[dict[str, Any]], None] | None = None,
) -> SweepSummary:
    """Run every point of ``exp`` whose row is not stored in ``out_dir`` yet.

    Parameters
    ----------
    exp
        The experiment, or the path of its YAML file.
    out_dir
        The result store (see :class:`~ipusim.sweep.ResultStore`).
    jobs
        Worker processes (1: run in this process); with ``scheduler="local"`` the
        LocalCluster's workers.
    scheduler
        None (local processes), ``"local"`` (a dask LocalCluster) or a dask scheduler's
        ``host:port``.
    progress
        Show a tqdm bar (ETA, failures in the postfix).
    retry_failed
        Run again the points stored with status ``error``.
    on_row
        Called with each new row, as it is stored.

    Returns
    -------
    SweepSummary
        Counts of points and the wall-clock seconds.

    Raises
    ------
    ExperimentError
        The experiment is invalid (before any point runs).
    SweepError
        The output directory is unusable or busy, or the scheduler cannot be reached
        (before any point runs).
    """
    from tqdm.auto import tqdm

    started = time.perf_counter()
    if not isinstance(exp, Experiment):
        exp = load_experiment(exp)
    if int(jobs) < 1:
        raise SweepError(f"jobs: found {jobs!r}; required a whole number >= 1")
    points = expand_points(exp)
    store = ResultStore(out_dir)
    with store.lock():
        store.clean_temporary()
        store.write_json(
            "experiment.json",
            {
                "ipusim_version": __version__,
                **exp.model_dump(mode="json"),
                "points": len(points),
                "keys": [p.key for p in points],
            },
        )
        statuses = store.statuses()
        wanted = {"ok"} if retry_failed else {"ok", "error"}
        todo = [p for p in points if statuses.get(p.key) not in wanted]
        cached = len(points) - len(todo)
        failed_now = 0
        keep = exp.profiles
        with (
            _executor(int(jobs), scheduler) as executor,
            tqdm(
                total=len(todo),
                desc=exp.name,
                unit="point",
                disable=not progress,
                dynamic_ncols=True,
            ) as bar,
        ):
            bar.set_postfix(failed=0, cached=cached, refresh=False)
            for point, row, profiles in executor.imap(todo, exp, keep):
                store.write(row, profiles, axes=list(point.axes))
                statuses[point.key] = row["status"]
                failed_now += row["status"] != "ok"
                bar.set_postfix(failed=failed_now, cached=cached, refresh=False)
                bar.update(1)
                if on_row is not None:
                    on_row(row)
    failed = sum(statuses.get(p.key) == "error" for p in points)
    return SweepSummary(
        total=len(points),
        ran=len(todo),
        cached=cached,
        failed=failed,
        host_seconds=time.perf_counter() - started,
        out_dir=Path(out_dir),
    )
