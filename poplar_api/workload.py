"""Workloads: a function that builds a graph and its programs on a given device.

A workload file (or module) exposes ``workload(device, **params) -> Workload``::

    def workload(device, rows: int = 100):
        graph = Graph(device.getTarget())
        ...
        return Workload(graph, program, prepare=connect_streams, check=verify)

:func:`load_workload` finds the function from a spec string and :func:`run` builds,
compiles, runs and checks it on an IPU Model made from a machine config, returning an
:class:`ipusim.runner.RunResult`. ``ipusim run`` and :func:`ipusim.runner.run_workload`
reach :func:`run` through the ``ipusim.runners`` entry point, since ``ipusim`` never
imports this package.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import io
import math
import sys
import time
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from ipusim import progress
from ipusim.config import MachineConfig, load_config
from ipusim.runner import RunResult, WorkloadError
from ipusim.trace import Trace
from poplar_api.device import Device, IPUModel
from poplar_api.engine import Engine
from poplar_api.graph import Graph
from poplar_api.program import Program

__all__ = ["DEFAULT_FUNCTION", "Workload", "WorkloadError", "load_workload", "run"]

#: Name of the workload function when the spec names none.
DEFAULT_FUNCTION = "workload"


@dataclass
class Workload:
    """A built graph and what to do with it.

    Attributes
    ----------
    graph
        The graph, built on the device's target.
    programs
        One program or a list (``run`` indexes into it).
    prepare
        Called with the loaded engine before the first run: connect streams, write
        tensors.
    check
        Called after the runs: True when the values are right.
    run
        Program indices to run, in order.
    options
        Engine options.
    metrics
        Called after the runs with the engine and the last trace: named numbers to
        compare with measurements (for example ``{"block_cycles": ...}``).
    """

    graph: Graph
    programs: Program | list[Program]
    prepare: Callable[[Engine], None] | None = None
    check: Callable[[Engine], bool] | None = None
    run: Sequence[int] = (0,)
    options: dict[str, str] = field(default_factory=dict)
    metrics: Callable[[Engine, Trace], dict[str, float]] | None = None


# ---------------------------------------------------------------------------- loading
_FILE_MODULES: dict[tuple[str, int], ModuleType] = {}


def _split_spec(spec: str) -> tuple[str, str]:
    if not isinstance(spec, str) or not spec.strip():
        raise WorkloadError(
            f"workload spec {spec!r} is empty; expected path/to/file.py[:func] or "
            "package.module[:func]"
        )
    target, sep, func = spec.rpartition(":")
    # "C:\\x.py" or a spec without ":func": everything is the target.
    if not sep or not func.isidentifier():
        return spec, DEFAULT_FUNCTION
    return target, func


def _is_file_spec(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target or Path(target).is_file()


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _load_file(target: str) -> ModuleType:
    path = Path(target).expanduser()
    if not path.is_file():
        hint = "" if path.suffix == ".py" else " (a module spec has no '/' and no '.py')"
        raise WorkloadError(
            f"workload file {str(path)!r} not found{hint}; hint: give a path to a .py "
            "file relative to the current directory, or package.module"
        )
    path = path.resolve()
    key = (str(path), path.stat().st_mtime_ns)
    cached = _FILE_MODULES.get(key)
    if cached is not None:
        return cached
    # The stem as module name when free (codelet kernels are cached by module name);
    # otherwise a name unique to the path.
    name = path.stem if path.stem.isidentifier() else "workload"
    existing = sys.modules.get(name)
    if existing is not None and getattr(existing, "__file__", None) != str(path):
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
        name = f"_ipusim_workload_{name}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise WorkloadError(f"workload file {str(path)!r} cannot be imported as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    # As when the file runs as a script: its directory is importable (helpers next to it).
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise WorkloadError(
            f"workload file {str(path)!r} failed to import: {_one_line(exc)}"
        ) from exc
    _FILE_MODULES[key] = module
    return module


def _load_module(target: str) -> ModuleType:
    try:
        return importlib.import_module(target)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (target == exc.name or target.startswith(exc.name + ".")):
            raise WorkloadError(
                f"workload module {target!r} not found ({_one_line(exc)}); hint: give a "
                "path to a .py file, or a module importable from sys.path"
            ) from None
        raise WorkloadError(
            f"workload module {target!r} failed to import: {_one_line(exc)}"
        ) from exc
    except Exception as exc:
        raise WorkloadError(
            f"workload module {target!r} failed to import: {_one_line(exc)}"
        ) from exc


def _callables(module: ModuleType) -> list[str]:
    return sorted(
        name
        for name, value in vars(module).items()
        if not name.startswith("_")
        and inspect.isfunction(value)
        and value.__module__ == module.__name__
    )


def load_workload(spec: str) -> Callable[..., Workload]:
    """The workload function named by ``spec``.

    Parameters
    ----------
    spec
        ``path/to/file.py``, ``path/to/file.py:func``, ``package.module`` or
        ``package.module:func``; the function defaults to ``workload``.

    Raises
    ------
    WorkloadError
        The file or module is missing or fails to import (the message names it and
        gives the original error on one line), or has no such function (the message
        lists the functions it has).
    """
    target, func = _split_spec(spec)
    is_file = _is_file_spec(target)
    module = _load_file(target) if is_file else _load_module(target)
    fn = getattr(module, func, None)
    where = f"workload file {target!r}" if is_file else f"workload module {target!r}"
    if fn is None or not callable(fn):
        have = _callables(module)
        found = "" if fn is None else f" ({func!r} is a {type(fn).__name__})"
        raise WorkloadError(
            f"{where} has no function {func!r}{found}; its functions are "
            f"{', '.join(have) or '(none)'}; hint: define def {func}(device, **params) "
            f"or name another with {target}:FUNCTION"
        )
    return fn


# ---------------------------------------------------------------------- parameters
def _type_ok(value: Any, want: Any) -> bool:
    if want is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if want is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(want, type):
        return isinstance(value, want)
    return True


def _expected_type(param: inspect.Parameter, hints: Mapping[str, Any]) -> Any:
    hint = hints.get(param.name)
    if hint is not None:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if isinstance(hint, type):
            return hint
        if len(args) == 1 and isinstance(args[0], type):
            return args[0]
        return None
    default = param.default
    if default is not inspect.Parameter.empty and default is not None:
        return type(default)
    return None


def check_params(fn: Callable[..., Any], params: Mapping[str, Any], spec: str) -> None:
    """Check that ``fn(device, **params)`` takes every parameter, with the right types.

    Raises
    ------
    WorkloadError
        A parameter the function does not take (the message lists those it takes),
        or a value whose type is not the annotated (or default's) type.
    """
    sig = inspect.signature(fn)
    plist = list(sig.parameters.values())
    _check_takes_device(fn, plist, spec)
    takes = [
        p
        for p in plist[1:]
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    ]
    var_kw = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in plist)
    names = {p.name: p for p in takes}
    unknown = [k for k in params if k not in names]
    if unknown and not var_kw:
        listing = ", ".join(
            p.name if p.default is inspect.Parameter.empty else f"{p.name}={p.default!r}"
            for p in takes
        )
        raise WorkloadError(
            f"workload {spec!r}: function {fn.__name__} takes no parameter "
            f"{', '.join(repr(k) for k in unknown)}; it takes: {listing or '(none)'}"
        )
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        hints = {}
    for key, value in params.items():
        param = names.get(key)
        if param is None:
            continue
        want = _expected_type(param, hints)
        if want is not None and not _type_ok(value, want):
            raise WorkloadError(
                f"workload {spec!r}: parameter {key!r} = {value!r} is a "
                f"{type(value).__name__}; {fn.__name__} expects {want.__name__}; hint: "
                f"-p {key}=VALUE is read as YAML (100 is an int, 1.5 a float, 'x' a str)"
            )
    missing = [
        p.name for p in takes if p.default is inspect.Parameter.empty and p.name not in params
    ]
    if missing:
        raise WorkloadError(
            f"workload {spec!r}: function {fn.__name__} needs parameter(s) "
            f"{', '.join(missing)}; hint: -p {missing[0]}=VALUE"
        )


def _check_takes_device(fn: Callable[..., Any], plist: list[inspect.Parameter], spec: str) -> None:
    """Refuse a function that cannot be called as ``fn(device, ...)``: the tools pass the
    device first, positionally, and a function without that parameter would fail inside
    them with a bare TypeError."""
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    name = getattr(fn, "__name__", "function")
    found = "does not take the device as its first positional parameter"
    if plist and plist[0].kind is inspect.Parameter.VAR_POSITIONAL:
        return
    if plist and plist[0].kind in positional:
        first = plist[0]
        # A parameter with a value default or a number/str annotation is a workload
        # parameter: the device would be passed as its value.
        default = first.default not in (inspect.Parameter.empty, None)
        scalar = (int, float, str, bool, "int", "float", "str", "bool")
        if not default and first.annotation not in scalar:
            return
        kind = getattr(first.annotation, "__name__", first.annotation)
        shown = f"default {first.default!r}" if default else f"type {kind}"
        found = (
            f"takes {first.name!r} first, which looks like a workload parameter (its "
            f"{shown}), so the device would be passed as its value"
        )
    raise WorkloadError(
        f"workload {spec!r}: function {name}{inspect.signature(fn)} {found}; required "
        f"{name}(device, **params); hint: add the device first, e.g. def {name}(device, "
        "rows: int = 100) (see docs/workloads.md)"
    )


def _check_fields(built: Workload, spec: str) -> None:
    """Refuse Workload fields the run would misread: ``run`` must be program indices
    (1.7 ran program 1 and "01" programs 0 and 1), the functions callable (a value
    failed only once the compilation was done)."""
    run = built.run
    if (
        isinstance(run, str | bytes)
        or not isinstance(run, Sequence)
        or any(isinstance(i, bool) or not isinstance(i, int | np.integer) for i in run)
    ):
        raise WorkloadError(
            f"workload {spec!r}: Workload.run is {run!r:.60}; required a sequence of program "
            "indices (ints), e.g. run=(0,) or run=[0, 1, 1]"
        )
    for name in ("prepare", "check", "metrics"):
        value = getattr(built, name)
        if value is not None and not callable(value):
            raise WorkloadError(
                f"workload {spec!r}: Workload.{name} is {value!r:.60} of type "
                f"{type(value).__name__}; required a function or None"
            )


def _check_result(value: Any, spec: str) -> bool:
    """The workload check's answer as a bool: True, False (or numpy's bool_). Anything
    else is refused: None (a check that forgot its ``return``) would read as a failed
    check, and an array has no single truth value."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    hint = (
        "hint: does the check end with return ...? an array check reads "
        "return bool(np.allclose(got, want))"
    )
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    raise WorkloadError(
        f"workload {spec!r}: check returned {shown} of type {type(value).__name__}; "
        f"required True or False; {hint}"
    )


# --------------------------------------------------------------------------- running
def _metric_function(
    built: Workload, engine: Engine, spec: str
) -> Callable[[Trace], dict[str, float]]:
    """The workload's metrics as a function of a trace (for re-timed runs)."""
    metrics = built.metrics
    assert metrics is not None

    def of(trace: Trace) -> dict[str, float]:
        return _finite_metrics(metrics(engine, trace), spec)

    return of


def _finite_metrics(values: Any, spec: str) -> dict[str, float]:
    if not isinstance(values, Mapping):
        raise WorkloadError(
            f"workload {spec!r}: metrics returned {type(values).__name__}; expected a dict "
            "of name -> number"
        )
    out: dict[str, float] = {}
    for key, value in values.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise WorkloadError(
                f"workload {spec!r}: metric {key!r} = {value!r} is not a number"
            ) from None
        if not math.isfinite(number):
            raise WorkloadError(f"workload {spec!r}: metric {key!r} = {number} is not finite")
        out[str(key)] = number
    return out


def run(
    spec: str,
    config: MachineConfig | str,
    params: Mapping[str, Any] | None = None,
    options: Mapping[str, str] | None = None,
    quiet: bool = True,
) -> RunResult:
    """Build the workload ``spec`` on an IPU Model of ``config``, run it and check it.

    The device is ``IPUModel(config).createDevice()``; the engine gets the workload's
    options updated with ``options``. Each index of ``Workload.run`` is run in order;
    the result's ``trace`` is that of the last run. With ``quiet`` what the workload
    prints is captured into ``RunResult.stdout``.

    Raises
    ------
    WorkloadError
        Loading or calling the workload failed, it returned something that is not a
        :class:`Workload`, or its metrics are not finite numbers.
    """
    params = dict(params or {})
    cfg = config if isinstance(config, MachineConfig) else load_config(config)
    progress.detail("load workload")
    fn = load_workload(spec)
    check_params(fn, params, spec)
    captured = io.StringIO()
    redirect = contextlib.redirect_stdout(captured) if quiet else contextlib.nullcontext()
    seconds: dict[str, float] = {}
    with redirect:
        device: Device = IPUModel(cfg).createDevice()
        t0 = time.perf_counter()
        progress.detail("build")
        built = fn(device, **params)
        seconds["build"] = time.perf_counter() - t0
        if not isinstance(built, Workload):
            raise WorkloadError(
                f"workload {spec!r}: {getattr(fn, '__name__', 'function')} returned "
                f"{type(built).__name__}; expected poplar_api.workload.Workload(graph, "
                "programs, ...)"
            )
        _check_fields(built, spec)
        t0 = time.perf_counter()
        progress.detail("compile")
        engine = Engine(built.graph, built.programs, {**built.options, **dict(options or {})})
        engine.load(device)
        seconds["compile"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        progress.detail("run")
        if built.prepare is not None:
            built.prepare(engine)
        for index in built.run:
            engine.run(int(index))  # ints (_check_fields)
        if not built.run:
            raise WorkloadError(f"workload {spec!r}: Workload.run is empty; nothing was run")
        progress.detail("check")
        ok = None if built.check is None else _check_result(built.check(engine), spec)
        traces = engine.getTraces()
        trace = traces[-1]
        metrics = {} if built.metrics is None else built.metrics(engine, trace)
        seconds["run"] = time.perf_counter() - t0
        summary = io.StringIO()
        engine.printProfileSummary(summary, {"showExecutionSteps": "true"})
    return RunResult(
        workload=spec,
        params=params,
        config=device.getTarget().config,
        trace=trace,
        traces=traces,
        graph_profile=dict(engine.getGraphProfile()),
        execution_profile=dict(engine.getExecutionProfile()),
        summary=summary.getvalue(),
        metrics=_finite_metrics(metrics, spec),
        metric_function=None if built.metrics is None else _metric_function(built, engine, spec),
        ok=ok,
        host_seconds=seconds,
        ir_program=engine.ir_program,
        stdout=captured.getvalue(),
    )
