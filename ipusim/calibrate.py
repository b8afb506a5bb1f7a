"""Calibration: fit machine-config parameters so simulated runs match measured profiles.

A calibration takes *pairs* (a workload with its arguments, and the profile measured
when it ran on a real IPU or the IPU Model), a base machine config and the dotted
config paths to fit (``exchange.bytes_per_cycle``, ``sync.min_sync_delay_cycles``,
...). It minimises the sum of squared relative errors of the chosen phases (``total``,
``sync``, ... see :data:`ipusim.measured.PHASES`) and named metrics with
:func:`scipy.optimize.least_squares`, within bounds taken from the config schema and
narrowed by the user.

Each workload is built, compiled and run once, under the base config; every trial
parameter vector then only *re-times* the lowered machine program
(:meth:`ipusim.runner.RunResult.retime`), so a fit costs one machine run per
evaluation, never a graph build. A pair may also carry an IR program
(:class:`ipusim.ir.Program` or a bare node) instead of a workload spec, to calibrate
the machine alone.

Cycle counts are integers, so the simulated response is a staircase in every
parameter: a tiny finite-difference step sees a flat function and a zero Jacobian.
The fit therefore works in coordinates scaled to the bounds ([0, 1] per parameter, on
a log scale for a real parameter whose bounds span two decades or more), takes
finite-difference steps of a few percent of the range (at least 1.5 units for integer
fields), rounds integer fields when building a config, and finishes with a
pattern search that shrinks its step down to one unit (integers) or a millionth of the
range (reals). Parameters whose perturbation does not move any residual are reported
as insensitive and left out of the fit.

The result is a :class:`CalibrationResult` with residual tables before and after,
leave-one-out errors (three pairs or more) and an overlay YAML (``extends:`` the base
plus the fitted fields and a ``provenance:`` record) that ``load_config`` reads.

This module checks the inputs, runs the fit and adds ``ipusim calibrate`` to the command
line; the parameters, the problem and the fit are in :mod:`ipusim.calibration_fit`, the
result and its report in :mod:`ipusim.calibration_result`.
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import time
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from ipusim import progress
from ipusim.calibration_fit import (
    PROBE_FRACTION,
    CalibrationError,
    FitProblem,
    Pair,
    Parameter,
    WorkloadRuns,
    fit,
    foreign_pairs,
    loss_of,
    measured_value,
    residual_frame,
    resolve_parameters,
)
from ipusim.calibration_result import CalibrationResult, Insensitivity, number_text
from ipusim.config import MachineConfig, list_presets, load_config
from ipusim.sweep.cli import positive_int

__all__ = [
    "CalibrationError",
    "CalibrationResult",
    "Insensitivity",
    "Pair",
    "Parameter",
    "calibrate",
    "register",
    "resolve_parameters",
]


# Checks -------------------------------------------------------------------------------------
def _phases() -> tuple[str, ...]:
    from ipusim.measured import PHASES

    return tuple(PHASES)


def _check_inputs(
    pairs: list[Pair],
    base: MachineConfig,
    phases: Sequence[str],
    metrics: Sequence[str],
    loss: str,
    max_evaluations: int,
) -> list[str]:
    if not pairs:
        raise CalibrationError(
            "no pairs to calibrate against; expected at least one (workload, measured "
            "profile) pair, e.g. --pair examples/tutorials/tut7.py@rows=100,cols=10=m.txt"
        )
    if loss not in ("relative", "absolute"):
        raise CalibrationError(f"loss {loss!r} is unknown; expected 'relative' or 'absolute'")
    if not isinstance(max_evaluations, int) or max_evaluations < 1:
        raise CalibrationError(
            f"max_evaluations is {max_evaluations!r}; expected a positive integer"
        )
    known = _phases()
    phases = list(phases)
    if not phases and not metrics:
        raise CalibrationError(
            f"no phases or metrics to compare; expected some of {', '.join(known)}"
        )
    for phase in phases:
        if phase not in known:
            close = difflib.get_close_matches(phase, known, n=1)
            hint = f"did you mean '{close[0]}'? " if close else ""
            raise CalibrationError(
                f"phase {phase!r} is unknown; {hint}expected one of {', '.join(known)}"
            )
    labels = [p.label for p in pairs]
    for pair in pairs:
        if labels.count(pair.label) > 1:
            raise CalibrationError(
                f"pair label {pair.label!r} is used twice; expected distinct labels "
                f"(give each pair its own label)"
            )
        prof = pair.measured
        for phase in phases:
            if phase not in prof.phases or prof.phases[phase] is None:
                raise CalibrationError(
                    f"pair {pair.label}: phase {phase!r} is not in the measured profile "
                    f"{prof.source} (it has: {', '.join(sorted(prof.phases)) or 'none'}); "
                    f"drop it from the phases or measure it"
                )
        for quantity in [*phases, *(m for m in metrics if m in prof.metrics)]:
            value = measured_value(pair, quantity)
            if not math.isfinite(value) or (loss == "relative" and value == 0):
                raise CalibrationError(
                    f"pair {pair.label}: measured {quantity} is {value!r} in {prof.source}; "
                    f"a relative error needs a finite non-zero value (drop the quantity or "
                    f"use loss='absolute')"
                )
        tiles = getattr(prof, "num_tiles", None)
        if tiles is not None and int(tiles) != base.num_tiles:
            raise CalibrationError(
                f"pair {pair.label}: the measured profile {prof.source} has {tiles} tiles but "
                f"the config {base.name!r} has {base.num_tiles}; use a config with the same "
                f"tile count (--tiles {tiles}, or tile.tiles_per_ipu={tiles})"
            )
    for metric in metrics:  # a pair compares the metrics its measurement has
        if not any(metric in pair.measured.metrics for pair in pairs):
            have = sorted({m for pair in pairs for m in pair.measured.metrics})
            raise CalibrationError(
                f"metric {metric!r} is in none of the measured profiles (they have: "
                f"{', '.join(have) or 'none'}); drop it or measure it"
            )
    return [*phases, *metrics]


def _resolve_base(base_config: Any, extends: str | None) -> tuple[MachineConfig, str | None]:
    """The base config and the ``extends`` reference of the overlay (None: write it all)."""
    if isinstance(base_config, MachineConfig):
        cfg = base_config
        if extends is None and cfg.name in list_presets():
            extends = cfg.name
    elif isinstance(base_config, str | os.PathLike):
        text = os.fspath(base_config)
        cfg = load_config(text)
        if extends is None:
            extends = text
    else:
        raise CalibrationError(
            f"base config {base_config!r} is a {type(base_config).__name__}; expected a "
            f"MachineConfig, a preset name ({', '.join(list_presets())}) or a YAML path"
        )
    if extends is not None and extends not in list_presets():
        extends = str(Path(extends).resolve())
    return cfg, extends


def _probe(problem: FitProblem, x0: np.ndarray, index: int) -> Insensitivity | None:
    """Move one parameter; evidence of insensitivity when no residual changes."""
    p = problem.params[index]
    span = p.upper - p.lower
    step = max(PROBE_FRACTION * span, 1.0 if p.integer else 0.0)
    tried = [x0[index], x0[index] - step, x0[index] + step, p.lower, p.upper]
    base = problem.residuals(x0)
    losses: dict[float, float] = {}
    for value in tried:
        value = min(max(value, p.lower), p.upper)
        x = x0.copy()
        x[index] = value
        res = problem.residuals(x)
        if not np.array_equal(res, base):
            return None
        losses[float(p.value(value))] = loss_of(res)
    return Insensitivity(p.path, losses)


def calibrate(
    pairs: Iterable[Pair],
    base_config: MachineConfig | str | os.PathLike[str],
    parameters: Sequence[str | tuple[str, Any, Any]],
    *,
    phases: Sequence[str] = ("total",),
    metrics: Sequence[str] | None = None,
    loss: str = "relative",
    max_evaluations: int = 200,
    extends: str | None = None,
) -> CalibrationResult:
    """Fit config parameters so that the simulated pairs match their measurements.

    Parameters
    ----------
    pairs
        Workloads with their measured profiles (:class:`Pair`).
    base_config
        The config to start from: a :class:`MachineConfig`, a preset name or a YAML path
        (the overlay ``extends`` it).
    parameters
        Dotted config paths to fit, or ``(path, lower, upper)`` to narrow the bounds
        (see :func:`resolve_parameters`).
    phases
        Phases compared (:data:`ipusim.measured.PHASES`; ``"total"`` = run cycles,
        the others tile-average cycles).
    metrics
        Named metrics of the measured profiles compared as well.
    loss
        ``"relative"``: residual ``(simulated - measured) / measured``; ``"absolute"``:
        ``simulated - measured``. The loss is the sum of squared residuals.
    max_evaluations
        Budget of simulations (distinct parameter vectors) of the main fit; each
        leave-one-out fit has the same budget.
    extends
        Preset name or YAML path the overlay extends; default ``base_config`` itself
        when it is a name or path, or the preset named like a MachineConfig. Fields of
        the calibrated config that differ from it are written to the overlay (the fitted
        ones, and any override of the base such as ``tile.tiles_per_ipu``). Without
        one, the overlay holds the whole config.

    Returns
    -------
    CalibrationResult

    Raises
    ------
    CalibrationError
        Bad parameters, bounds, phases, metrics, pairs or tile counts (see the message).

    Warns
    -----
    UserWarning
        A parameter does not change any residual (it is not fitted), or a fitted value
        ends on a bound.
    """
    start = time.perf_counter()
    pairs = list(pairs)
    base, extends = _resolve_base(base_config, extends)
    params = resolve_parameters(base, parameters)
    quantities = _check_inputs(pairs, base, phases, list(metrics or ()), loss, max_evaluations)
    runs = WorkloadRuns(base)
    progress.phase("run workloads", total=len(pairs), unit="pair")
    problem = FitProblem(pairs, base, params, quantities, loss, runs)
    progress.phase("probe parameters", unit="simulation")
    x0 = np.array([p.initial for p in params], dtype=float)
    notes: list[str] = []

    def warn(message: str) -> None:
        notes.append(message)
        warnings.warn(message, UserWarning, stacklevel=3)

    for note in foreign_pairs(pairs, runs):
        warn(note)
    insensitive = [ev for i in range(len(params)) if (ev := _probe(problem, x0, i)) is not None]
    for ev in insensitive:
        warn(f"insensitive parameter {ev}")
    dead = {ev.path for ev in insensitive}
    active = [i for i, p in enumerate(params) if p.path not in dead]
    progress.phase("fit", total=max_evaluations, unit="simulation")
    x1 = fit(problem, active, x0, None, max_evaluations)
    for i in active:
        p = params[i]
        if x1[i] in (p.value(p.lower), p.value(p.upper)) and x1[i] != x0[i]:
            warn(
                f"parameter {p.path} ended on a bound ({number_text(x1[i])} in "
                f"[{number_text(p.lower)}, {number_text(p.upper)}]); the best value may lie "
                f"outside: widen the bounds or check the model"
            )
    all_rows = list(range(len(pairs)))
    loo = None
    if len(pairs) >= 3:
        import pandas as pd

        frames = []
        for held in all_rows:
            others = [r for r in all_rows if r != held]
            progress.phase(
                f"leave-one-out fit {held + 1}/{len(pairs)}",
                total=max_evaluations,
                unit="simulation",
            )
            x_loo = fit(problem, active, x0, others, max_evaluations)
            frame = residual_frame(problem, x_loo, [held]).rename(columns={"pair": "held_out"})
            frame.insert(
                len(frame.columns), "train_loss", loss_of(problem.residuals(x_loo, others))
            )
            for i, p in enumerate(params):
                frame[p.path] = p.value(x_loo[i])
            frames.append(frame)
        loo = pd.concat(frames, ignore_index=True)
    values_before = {p.path: p.value(x0[i]) for i, p in enumerate(params)}
    values_after = {p.path: p.value(x1[i]) for i, p in enumerate(params)}
    return CalibrationResult(
        parameters=params,
        values_before=values_before,
        values_after=values_after,
        residuals_before=residual_frame(problem, x0, all_rows),
        residuals_after=residual_frame(problem, x1, all_rows),
        loss_before=loss_of(problem.residuals(x0)),
        loss_after=loss_of(problem.residuals(x1)),
        leave_one_out=loo,
        insensitive=insensitive,
        config=problem.config(x1),
        base_config=base,
        extends=extends,
        pairs=pairs,
        quantities=quantities,
        loss=loss,
        evaluations=problem.simulations,
        seconds=time.perf_counter() - start,
        build_seconds=runs.build_seconds,
        warnings=notes,
    )


# Command line -------------------------------------------------------------------------------
def _parse_param(text: str) -> str | tuple[str, str, str]:
    """``path`` or ``path=LO:HI`` (LO and HI may carry units: ``16 GB/s``)."""
    path, sep, bounds = text.partition("=")
    if not sep:
        return path.strip()
    lo, colon, hi = bounds.partition(":")
    if not colon or not lo.strip() or not hi.strip():
        raise CalibrationError(
            f"--param {text!r}: bounds must be LO:HI, e.g. "
            f"--param exchange.bytes_per_cycle=2:8; found {bounds!r}"
        )
    return path.strip(), lo.strip(), hi.strip()


def _parse_pair_text(text: str) -> tuple[str, dict[str, Any], str]:
    """``WORKLOAD[@k=v,k=v]=MEASURED`` -> (workload, params, measured path)."""
    left, sep, measured = text.rpartition("=")
    if not sep or not left or not measured.strip():
        raise CalibrationError(
            f"--pair {text!r}: expected WORKLOAD[@k=v,...]=MEASURED, e.g. "
            f"examples/tutorials/tut7.py@rows=100,cols=10=profile.txt"
        )
    workload, at, args = left.partition("@")
    params: dict[str, Any] = {}
    if at:
        for item in filter(None, (a.strip() for a in args.split(","))):
            key, eq, value = item.partition("=")
            if not eq or not key.strip():
                raise CalibrationError(
                    f"--pair {text!r}: workload argument {item!r} is not k=v; expected "
                    f"WORKLOAD@rows=100,cols=10=MEASURED"
                )
            if key.strip() in params:  # the later one silently won
                raise CalibrationError(
                    f"--pair {text!r}: workload argument {key.strip()!r} is given twice; "
                    "expected each argument once"
                )
            try:
                params[key.strip()] = yaml.safe_load(value)
            except yaml.YAMLError:
                params[key.strip()] = value
    return workload.strip(), params, measured.strip()


def _calibrate_command(args: argparse.Namespace) -> int:
    from ipusim.files import check_writable
    from ipusim.measured import read_profile

    if args.out:  # refused before the fit, not after it
        check_writable(args.out, "overlay")

    overrides = {"tile.tiles_per_ipu": args.tiles} if args.tiles else {}
    cfg = load_config(args.config, overrides=overrides)
    pairs = []
    for text in args.pair:
        workload, params, measured = _parse_pair_text(text)
        profile = read_profile(measured, num_tiles=args.tiles)
        pairs.append(Pair(workload, params, profile))
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    metrics = [m.strip() for m in (args.metrics or "").split(",") if m.strip()]
    with (
        warnings.catch_warnings(),
        progress.Progress("ipusim calibrate", progress.progress_of(args)),
    ):
        warnings.simplefilter("ignore")  # the report lists them
        result = calibrate(
            pairs,
            cfg,
            [_parse_param(p) for p in args.param],
            phases=phases,
            metrics=metrics,
            loss=args.loss,
            max_evaluations=args.max_evaluations,
            extends=args.config,
        )
    print(result.report())
    if args.out:
        path = result.to_overlay_yaml(args.out)
        print(f"wrote {path}")
    return 0


def register(subparsers: Any) -> None:
    """Add ``ipusim calibrate`` to the command line (a ``cli._REGISTRARS`` entry)."""
    parser = subparsers.add_parser(
        "calibrate",
        help="fit config parameters to measured profiles and write an overlay YAML",
        description="Run each workload once, re-time it under trial configs and fit the "
        "given parameters (least squares on relative errors of the chosen phases). Prints "
        "the residuals before and after, leave-one-out errors (3 pairs or more) and "
        "warnings, and writes an overlay YAML that extends the base config.",
    )
    parser.add_argument("--config", default="mk2", metavar="NAME|PATH", help="base config")
    parser.add_argument(
        "--param",
        action="append",
        required=True,
        metavar="PATH[=LO:HI]",
        help="a config field to fit, with optional bounds (repeatable), e.g. "
        "--param host.bandwidth_bytes_per_s='8 GB/s:64 GB/s'",
    )
    parser.add_argument(
        "--pair",
        action="append",
        required=True,
        metavar="WORKLOAD[@k=v,...]=MEASURED",
        help="a workload spec (path/file.py[:func] or module[:func]) with its arguments and "
        "the measured profile file (repeatable)",
    )
    parser.add_argument(
        "--phases", default="total", help="comma-separated phases to compare (default total)"
    )
    parser.add_argument("--metrics", default="", help="comma-separated named metrics")
    parser.add_argument(
        "--loss", default="relative", choices=("relative", "absolute"), help="residual kind"
    )
    parser.add_argument(
        "--max-evaluations", type=positive_int, default=200, help="simulation budget of the fit"
    )
    parser.add_argument(
        "--tiles", type=positive_int, default=None, metavar="N", help="tiles per IPU"
    )
    parser.add_argument("--out", metavar="overlay.yaml", help="write the overlay YAML here")
    progress.add_progress_arguments(parser)
    parser.set_defaults(handler=_calibrate_command)
