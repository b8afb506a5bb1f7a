"""The ``ipusim sweep`` command: ``ipusim sweep EXPERIMENT.yaml`` and its sub-commands.

``sweep`` has sub-commands: ``run`` (the default, so ``ipusim sweep EXP.yaml`` is
``ipusim sweep run EXP.yaml``) and ``report`` when :mod:`ipusim.sweep.report` is there
(it adds itself through its ``register_report(subparsers)``). :func:`normalize_argv`
inserts the ``run``: the word after ``sweep`` is taken as a sub-command when it is one,
else as the start of ``run``'s arguments (write ``./report`` for a file named
``report``).

This module is imported by ``ipusim --help``; it imports nothing heavy until a
command runs.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ipusim.files import Interrupted
from ipusim.progress import add_progress_arguments, progress_of

__all__ = ["DEFAULT_OUT_ROOT", "SUBCOMMANDS", "normalize_argv", "register"]

#: The default output directory is ``<cwd>/sweeps/<experiment name>``.
DEFAULT_OUT_ROOT = Path("sweeps")
#: Sub-commands of ``ipusim sweep`` (filled by :func:`register`).
SUBCOMMANDS: set[str] = set()
_HELP = {"-h", "--help"}
_MAX_ERRORS_SHOWN = 5


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """``ipusim sweep EXP.yaml ...`` -> ``ipusim sweep run EXP.yaml ...``; anything else
    is returned unchanged."""
    args = list(argv)
    command = next((i for i, a in enumerate(args) if not a.startswith("-")), None)
    if command is None or args[command] != "sweep" or command + 1 >= len(args):
        return args
    after = args[command + 1]
    if after in SUBCOMMANDS or after in _HELP:
        return args
    return [*args[: command + 1], "run", *args[command + 1 :]]


def whole_number(text: str, minimum: int, required: str) -> int:
    """``text`` read as a whole number of at least ``minimum``: the body of an argparse
    ``type`` for a count on the command line.

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` is not a whole number or is below ``minimum``, with the value found
        and ``required`` (what the option needs, e.g. ``"at least 1"``).
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"found {text!r}; required a whole number") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"found {value}; required {required}")
    return value


def positive_int(text: str) -> int:
    """An argparse ``type`` for a whole number of at least 1 (a count on the command line).

    Raises
    ------
    argparse.ArgumentTypeError
        If ``text`` is not a whole number or is below 1, with the value found.
    """
    return whole_number(text, 1, "at least 1")


def _run(args: argparse.Namespace) -> int:
    from ipusim.sweep.execute import run_sweep
    from ipusim.sweep.experiment import load_experiment
    from ipusim.sweep.points import expand_points
    from ipusim.sweep.store import ResultStore

    exp = load_experiment(args.experiment)
    out = Path(args.out) if args.out else DEFAULT_OUT_ROOT / exp.name
    if args.dry_run:
        points = expand_points(exp)
        done = ResultStore(out).statuses()
        stored = sum(p.key in done for p in points)
        print(f"Experiment {exp.name}: {len(points)} points ({stored} stored in {out})")
        for point in points[:20]:
            axes = ", ".join(f"{k}={v}" for k, v in point.axes.items())
            mark = "stored" if point.key in done else "to run"
            print(f"  {point.index:>5} {point.key} {point.workload_name} {axes} [{mark}]")
        if len(points) > 20:
            print(f"  ... and {len(points) - 20} more")
        return 0
    try:
        summary = run_sweep(
            exp,
            out,
            jobs=args.jobs,
            scheduler=args.scheduler,
            progress=progress_of(args),
            retry_failed=args.retry_failed,
        )
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP (ipusim.files.Interrupted)
        stored = len(ResultStore(out).done_keys())
        how = f"stopped by {exc.args[0]}" if isinstance(exc, Interrupted) else "interrupted"
        print(
            f"\nipusim: sweep {exp.name} {how}; {stored} point(s) stored in {out}; run "
            "the same command again to go on",
            file=sys.stderr,
        )
        return exc.exit_status if isinstance(exc, Interrupted) else 130
    print(
        f"Sweep {exp.name}: {summary.total} points, {summary.ran} ran, {summary.cached} "
        f"cached, {summary.failed} failed; {summary.host_seconds:.2f} host seconds"
    )
    print(f"Results in {out} (ipusim.sweep.ResultStore({str(out)!r}).rows())")
    if summary.failed:
        rows = ResultStore(out).rows()
        failed = rows[rows["status"] != "ok"]
        for _, row in failed.head(_MAX_ERRORS_SHOWN).iterrows():
            first = str(row["error"]).splitlines()[0] if row["error"] else "?"
            print(f"  failed: point {row['point']} ({row['workload']}): {first}", file=sys.stderr)
        if len(failed) > _MAX_ERRORS_SHOWN:
            print(f"  ... and {len(failed) - _MAX_ERRORS_SHOWN} more", file=sys.stderr)
        print("Rerun only the failed points with --retry-failed", file=sys.stderr)
        return 1
    return 0


def _register_run(commands: Any) -> None:
    parser = commands.add_parser(
        "run",
        help="run an experiment (the default: ipusim sweep EXP.yaml)",
        description="Run every point of EXPERIMENT (workloads x axes x repeats) whose "
        "result is not in --out yet, write one Parquet row per point (and its profiles) "
        "and print a summary. A sweep stopped at any moment resumes where it was when run "
        "again. Exit status 1 when a point failed.",
    )
    parser.add_argument("experiment", metavar="EXPERIMENT", help="the experiment YAML file")
    parser.add_argument(
        "--out",
        metavar="DIR",
        help=f"result directory (default ./{DEFAULT_OUT_ROOT}/<experiment name>)",
    )
    parser.add_argument(
        "-j",
        "--jobs",
        type=positive_int,
        default=1,
        metavar="N",
        help="worker processes (1: run in this process; with --scheduler local, the "
        "cluster's workers)",
    )
    parser.add_argument(
        "--scheduler",
        metavar="ADDR|local",
        help="run on a dask cluster: 'local' for a LocalCluster, or a scheduler's host:port",
    )
    parser.add_argument(
        "--retry-failed", action="store_true", help="run again the points that failed before"
    )
    add_progress_arguments(parser)
    parser.add_argument(
        "--dry-run", action="store_true", help="check the experiment and list its points only"
    )
    parser.set_defaults(handler=_run)


def _report_missing(message: str) -> Any:
    def handler(args: argparse.Namespace) -> int:
        from ipusim.errors import IpusimError

        raise IpusimError(f"ipusim sweep report is unavailable: {message}")

    return handler


def _register_report(commands: Any) -> None:
    """Let :mod:`ipusim.sweep.report` add its ``report`` sub-command, when it exists."""
    try:
        found = importlib.util.find_spec("ipusim.sweep.report") is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return
    try:
        module = importlib.import_module("ipusim.sweep.report")
    except ImportError as exc:  # e.g. an optional plotting dependency is missing
        parser = commands.add_parser("report", help="report on a sweep (unavailable)")
        parser.add_argument("args", nargs=argparse.REMAINDER)
        parser.set_defaults(handler=_report_missing(f"{type(exc).__name__}: {exc}"))
        SUBCOMMANDS.add("report")
        return
    hook = getattr(module, "register_report", None)
    if hook is not None:
        hook(commands)
        SUBCOMMANDS.add("report")


def register(subparsers: Any) -> None:
    """Add the ``sweep`` command (``run``, and ``report`` when available)."""
    parser = subparsers.add_parser(
        "sweep",
        help="run architecture experiments over a grid of configs and workloads",
        description="ipusim sweep EXPERIMENT.yaml [options] runs an experiment (the 'run' "
        "sub-command, the default). See 'ipusim sweep run --help'.",
    )
    commands = parser.add_subparsers(dest="sweep_command")
    commands.required = True
    _register_run(commands)
    SUBCOMMANDS.add("run")
    _register_report(commands)
    commands.metavar = "{" + ",".join(sorted(SUBCOMMANDS, key=("run", "report").index)) + "}"
