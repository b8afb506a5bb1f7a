"""Run a *workload* (a function that builds a graph and its programs) and keep its result.

A workload is Python code of the layer above the machine (``poplar_api``), so this
module never imports that layer: it finds the function that runs a workload through
the entry-point group ``ipusim.runners`` (the ``poplar`` entry names
``poplar_api.workload:run``), falling back to importing ``poplar_api.workload`` when
the package metadata is missing. What comes back is a :class:`RunResult`, made of
ipusim types only (traces, the machine program, profiles as plain dicts), so a caller
can re-time the same machine program on another config (:meth:`RunResult.retime`)
without building the graph again.

The ``ipusim run`` command is registered here (:func:`register`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from ipusim import ir
from ipusim.config import MachineConfig, load_config, parse_overrides
from ipusim.dataplane import ScriptedDataPlane
from ipusim.errors import IpusimError
from ipusim.files import FileGroup, check_writable
from ipusim.progress import Progress, add_progress_arguments, progress_of
from ipusim.trace import Trace

if TYPE_CHECKING:  # pragma: no cover - typing only
    from ipusim.measured import MeasuredProfile

__all__ = [
    "RUNNER_GROUP",
    "RunResult",
    "WorkloadError",
    "check_workload_source",
    "find_runner",
    "register",
    "run_workload",
    "workload_stem",
]

#: Entry-point group of the functions that run a workload spec.
RUNNER_GROUP = "ipusim.runners"
#: The runner used when none is named (and its module, when metadata is missing).
DEFAULT_RUNNER = "poplar"
_FALLBACK_MODULE = "poplar_api.workload"


class WorkloadError(IpusimError, ValueError):
    """A workload cannot be loaded, called or run as asked (bad spec, file, function,
    parameter, or result)."""


@dataclass
class RunResult:
    """What one run of a workload produced.

    Attributes
    ----------
    workload
        The workload spec as given (``path/file.py[:func]`` or ``pkg.module[:func]``).
    params
        Parameters passed to the workload function.
    config
        The machine config the device was made from.
    trace
        The trace of the *last* program run (``traces[-1]``); earlier runs are in
        ``traces``.
    traces
        One trace per program run, in order.
    graph_profile, execution_profile
        The Poplar-format profiles (execution: every run of this result).
    summary
        The profile summary text, with the execution steps.
    metrics
        Named numbers returned by the workload's ``metrics`` function (empty if none).
    ok
        What the workload's ``check`` returned (None when it has none).
    host_seconds
        Wall-clock seconds spent in ``build``, ``compile`` and ``run``.
    ir_program
        The lowered machine program, so a caller can re-time it.
    metric_function
        The workload's metrics as a function of a trace (see :meth:`metrics_of`).
    stdout
        What the workload printed while running quietly.
    """

    workload: str
    params: dict[str, Any]
    config: MachineConfig
    trace: Trace
    traces: list[Trace]
    graph_profile: dict[str, Any] | None
    execution_profile: dict[str, Any] | None
    summary: str
    metrics: dict[str, float]
    ok: bool | None
    host_seconds: dict[str, float]
    ir_program: ir.Program
    metric_function: Callable[[Trace], Mapping[str, float]] | None = None
    stdout: str = ""

    def retime_all(self, config: MachineConfig | str) -> list[Trace]:
        """Run the machine program again on ``config``, timing only; one trace per run.

        The values are not recomputed: control flow (``RepeatWhile``, ``If``,
        ``Switch``) follows the predicate answers each trace recorded
        (``Trace.decisions``), which is exact because values never depend on timing.
        Memory placement is the one made at compile time, so changing memory sizes does
        not re-place anything.

        Raises
        ------
        WorkloadError
            ``config`` changes the machine's shape (IPUs or tiles per IPU), which
            would need the graph to be compiled again.
        """
        from ipusim.machine import Machine

        cfg = config if isinstance(config, MachineConfig) else load_config(config)
        old, new = self.config, cfg
        changed = [
            f"{name}: {a} -> {b}"
            for name, a, b in (
                ("num_ipus", old.num_ipus, new.num_ipus),
                ("tile.tiles_per_ipu", old.tile.tiles_per_ipu, new.tile.tiles_per_ipu),
            )
            if a != b
        ]
        if changed:
            raise WorkloadError(
                f"retime of {self.workload!r}: the config changes the machine's shape "
                f"({'; '.join(changed)}); the machine program was compiled for "
                f"{old.num_ipus} IPU(s) x {old.tile.tiles_per_ipu} tiles; hint: run the "
                "workload again with run_workload(spec, config) to recompile it"
            )
        machine = Machine(cfg)
        return [
            machine.run(self.ir_program, ScriptedDataPlane.from_trace(t), entry=t.entry)
            for t in self.traces
        ]

    def retime(self, config: MachineConfig | str) -> Trace:
        """The trace of the last program run, re-timed on ``config`` (see :meth:`retime_all`).

        With the unchanged config the trace is identical to :attr:`trace`
        (same :meth:`~ipusim.trace.Trace.fingerprint`).
        """
        return self.retime_all(config)[-1]

    def metrics_of(self, trace: Trace) -> dict[str, float]:
        """The workload's metrics computed on ``trace`` (a re-timed run of this result);
        empty when the workload defines none. A workload's ``metrics`` must read the
        trace it is given, not the engine's last trace, for this to be right."""
        if self.metric_function is None:
            return {}
        return {k: float(v) for k, v in self.metric_function(trace).items()}

    def measured(self) -> MeasuredProfile:
        """The last run's trace as a measured profile (for compare and calibrate)."""
        from ipusim.measured import measured_from_trace

        return measured_from_trace(self.trace)


# ------------------------------------------------------------------------------- running
Runner = Callable[..., RunResult]


def find_runner(name: str = DEFAULT_RUNNER) -> Runner:
    """The workload runner registered as ``name`` in the ``ipusim.runners`` group.

    Falls back to ``poplar_api.workload.run`` for the default runner when the package
    metadata is not installed (a source checkout on ``sys.path``).

    Raises
    ------
    WorkloadError
        No runner of that name is registered (the message lists those that are).
    """
    entries = {ep.name: ep for ep in metadata.entry_points(group=RUNNER_GROUP)}
    ep = entries.get(name)
    if ep is not None:
        return ep.load()
    if name == DEFAULT_RUNNER:
        try:
            module = importlib.import_module(_FALLBACK_MODULE)
        except ImportError as exc:
            raise WorkloadError(
                f"no workload runner: entry point group {RUNNER_GROUP!r} has no {name!r} "
                f"and {_FALLBACK_MODULE} cannot be imported ({exc}); hint: pip install -e ."
            ) from None
        return module.run
    raise WorkloadError(
        f"no workload runner named {name!r} in entry point group {RUNNER_GROUP!r}; "
        f"registered: {sorted(entries) or 'none'}"
    )


def check_workload_source(spec: str) -> None:
    """Refuse a workload file or module that defines no workload function, before
    anything of it runs.

    The source is parsed, not imported (a plain script would run as a side effect of
    importing it): the function must be bound at its top level (``def workload``, an
    import or an assignment). A file or module that cannot be found is left to the
    runner, whose message says where it looked.

    Raises
    ------
    WorkloadError
        The file has no such function or does not parse; the message names the file,
        the functions it has and points to ``docs/workloads.md``.
    """
    from ipusim.sweep.workloads import resolve_workload

    source = resolve_workload(spec, Path.cwd())
    if source.problem is None or source.path is None or not source.path.is_file():
        return
    target = spec.rsplit(":", 1)[0] if ":" in spec else spec
    problem = source.problem.split("; hint:")[0]
    raise WorkloadError(
        f"{problem}; nothing of it was run; hint: a workload file defines "
        f"def {source.function}(device, **params) returning poplar_api.workload.Workload "
        f"(or name another function with {target}:FUNCTION) and keeps script code under "
        "if __name__ == '__main__': (see docs/workloads.md)"
    )


def run_workload(
    spec: str,
    config: MachineConfig | str,
    params: Mapping[str, Any] | None = None,
    *,
    options: Mapping[str, str] | None = None,
    quiet: bool = True,
    runner: str = DEFAULT_RUNNER,
) -> RunResult:
    """Load the workload ``spec``, build it on a device made from ``config`` and run it.

    Parameters
    ----------
    spec
        ``path/to/file.py``, ``path/to/file.py:func``, ``package.module`` or
        ``package.module:func`` (default function ``workload``).
    config
        A machine config, a preset name or a YAML path.
    params
        Keyword arguments of the workload function.
    options
        Engine options, over those the workload asks for.
    quiet
        Capture what the workload prints (kept in :attr:`RunResult.stdout`).
    runner
        Name of the runner in the ``ipusim.runners`` entry-point group.

    Raises
    ------
    WorkloadError
        The workload cannot be loaded or called (see the message), or its source
        defines no workload function (:func:`check_workload_source`; nothing runs).
    """
    if not isinstance(spec, str | os.PathLike):
        raise WorkloadError(
            f"workload spec {spec!r} is a {type(spec).__name__}; expected a string "
            "path/to/file.py[:func] or package.module[:func]"
        )
    spec = os.fspath(spec)
    examples = {"params": "{'rows': 100}", "options": "{'debug.maxCycles': '1000000'}"}
    for name, value in (("params", params), ("options", options)):
        if value is not None and not isinstance(value, Mapping):
            raise WorkloadError(
                f"workload {spec!r}: {name} is a {type(value).__name__} ({value!r:.60}); "
                f"expected a mapping of name -> value, e.g. {name}={examples[name]}"
            )
    check_workload_source(spec)
    cfg = config if isinstance(config, MachineConfig) else load_config(config)
    run = find_runner(runner)
    return run(spec, cfg, dict(params or {}), dict(options or {}), quiet)


def workload_stem(spec: str) -> str:
    """A short name for ``spec``: the file stem or the last module part (no function)."""
    target = spec.rsplit(":", 1)[0] if ":" in spec else spec
    if target.endswith(".py") or "/" in target or "\\" in target:
        return Path(target).stem
    return target.rsplit(".", 1)[-1]


# ------------------------------------------------------------------------------------ CLI
def _parse_params(items: list[str]) -> dict[str, Any]:
    """``["rows=100", "name=x"]`` -> ``{"rows": 100, "name": "x"}`` (values read as YAML)."""
    params: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key.strip().isidentifier():
            raise WorkloadError(
                f"-p: found {item!r}; expected KEY=VALUE with KEY a Python identifier, "
                "e.g. -p rows=100"
            )
        try:
            value = yaml.safe_load(text) if text.strip() else text
        except yaml.YAMLError:
            value = text
        params[key.strip()] = value
    return params


def _parse_options(items: list[str]) -> dict[str, str]:
    options: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise WorkloadError(
                f"--engine-option: found {item!r}; expected KEY=VALUE, "
                "e.g. --engine-option debug.allowOutOfMemory=true"
            )
        options[key.strip()] = value
    return options


def write_profiles(result: RunResult, out: Path) -> Path:
    """Write ``profile.json``, ``execution.json`` and ``summary.txt`` of ``result`` to ``out``.

    The three files appear together or not at all (:class:`ipusim.files.FileGroup`):
    a run stopped while writing them (Ctrl-C, SIGTERM, a full disk) leaves the
    directory as it was, never a truncated profile.

    Raises
    ------
    WorkloadError
        ``out`` cannot be created.
    ipusim.files.FileWriteError
        A file cannot be written (naming it; nothing of the three is left).
    """
    out = Path(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WorkloadError(
            f"--out {str(out)!r} cannot be created ({exc.strerror}); hint: choose a "
            "writable directory"
        ) from None
    with FileGroup(out, "profile file") as group:
        for stem, profile in (
            ("profile", result.graph_profile),
            ("execution", result.execution_profile),
        ):
            if profile is not None:
                group.write_json(f"{stem}.json", profile)
        group.write_text("summary.txt", result.summary)
    return out


def add_workload_arguments(parser: Any) -> None:
    """Add the options that choose a workload's machine, parameters and engine options
    (``--config``, ``--set``, ``-p``, ``--engine-option``) to a parser or group."""
    parser.add_argument(
        "--config", default="mk2", metavar="NAME|PATH", help="machine preset or YAML (mk2)"
    )
    parser.add_argument(
        "--set",
        action="append",
        metavar="PATH=VALUE",
        help="override a config field by dotted path (repeatable)",
    )
    parser.add_argument(
        "-p",
        "--param",
        action="append",
        metavar="KEY=VALUE",
        help="workload parameter, value read as YAML, e.g. -p rows=100 (repeatable)",
    )
    parser.add_argument(
        "--engine-option", action="append", metavar="K=V", help="engine option (repeatable)"
    )


def run_from_arguments(spec: str, args: argparse.Namespace, quiet: bool = True) -> RunResult:
    """Run workload ``spec`` with the options of :func:`add_workload_arguments`."""
    cfg = load_config(args.config, overrides=parse_overrides(args.set or []))
    return run_workload(
        spec,
        cfg,
        _parse_params(args.param or []),
        options=_parse_options(args.engine_option or []),
        quiet=quiet,
    )


def _run_command(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else Path("profiles") / workload_stem(args.workload)
    with Progress("ipusim run", progress_of(args)) as progress:
        progress.phase("check workload")
        check_writable(out, "--out", directory=True)  # before the run, not after it
        check_workload_source(args.workload)
        # A runner may name its current step (ipusim.progress.detail) after this phase.
        progress.phase("load, build, compile and run")
        result = run_from_arguments(args.workload, args, quiet=not args.verbose)
        progress.phase("write profiles")
        write_profiles(result, out)
    sys.stdout.write(result.summary)
    if result.metrics:
        print("Metrics:")
        width = max(len(k) for k in result.metrics)
        for key, value in result.metrics.items():
            print(f"  {key:<{width}}  {value:.6g}")
    seconds = ", ".join(f"{k} {v:.2f} s" for k, v in result.host_seconds.items())
    print(f"Host time: {seconds}")
    print(f"Profiles written to {out}")
    if result.ok is False:
        print(f"ipusim: check of workload {args.workload!r} failed", file=sys.stderr)
        return 1
    return 0


def register(subparsers: Any) -> None:
    """Add the ``run`` command to the ``ipusim`` sub-parsers."""
    parser = subparsers.add_parser(
        "run",
        help="build and run a workload, print its profile summary and write its profiles",
        description="Load WORKLOAD (path/to/file.py[:func] or package.module[:func], "
        "default function 'workload'), build it on an IPU Model made from --config, run "
        "it, print the profile summary with steps and write profile.json, execution.json "
        "and summary.txt to --out. Exit status 1 when the workload's check fails.",
    )
    parser.add_argument("workload", metavar="WORKLOAD", help="file.py[:func] or module[:func]")
    add_workload_arguments(parser)
    parser.add_argument(
        "--out", metavar="DIR", help="profile directory (default ./profiles/<workload stem>)"
    )
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="let the workload print while it runs"
    )
    add_progress_arguments(parser)
    parser.set_defaults(handler=_run_command)
