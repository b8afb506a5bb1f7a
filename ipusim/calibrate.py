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
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import difflib
import math
import os
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BeforeValidator

from ipusim import ir
from ipusim.config import MachineConfig, list_presets, load_config, with_overrides
from ipusim.config_sections import leaf_paths, section_model, suggest_path
from ipusim.errors import ConfigError, IpusimError

if TYPE_CHECKING:
    import pandas as pd

    from ipusim.measured import MeasuredProfile
    from ipusim.trace import Trace

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

#: Config paths that cannot be fitted, with the reason (a path ending in "." is a prefix).
READ_ONLY: dict[str, str] = {
    "name": "it is a label, not a number",
    "description": "it is a label, not a number",
    "arch": "it is a label (a Poplar target name), not a number",
    "num_ipus": "the machine program is lowered for a fixed number of IPUs",
    "tile.tiles_per_ipu": "the machine program is lowered for a fixed number of tiles",
    "tile.columns": "it fixes the tile layout the program was lowered for",
    "sync.controller_tile": "it is a tile id, not a rate or a latency",
    "memory.tile_memory_bytes": "memory is placed when the program is lowered; re-timing "
    "does not place it again",
    "memory.non_interleaved_bytes": "memory is placed when the program is lowered; re-timing "
    "does not place it again",
    "memory.interleaved_bytes": "memory is placed when the program is lowered; re-timing "
    "does not place it again",
    "memory.bank_bytes": "memory is placed when the program is lowered; re-timing does not "
    "place it again",
    "memory.alignment_bytes": "memory is placed when the program is lowered; re-timing does "
    "not place it again",
    "sim.": "simulation settings do not change simulated numbers",
    "provenance": "it records where a config's values came from, it is not a number",
}
#: Reason for ``code.*_bytes``: code and stack sizes only matter to memory placement.
_CODE_BYTES_REASON = (
    "code and stack sizes are placed in memory when the program is lowered; re-timing "
    "does not place them again"
)

#: Relative size of the insensitivity probe: a tenth of the parameter's range.
PROBE_FRACTION = 0.1
#: Finite-difference step of the fit, as a fraction of the parameter's range.
DIFF_FRACTION = 0.02
#: Smallest pattern-search step of a real parameter, as a fraction of its range.
REAL_RESOLUTION = 1e-6
#: A real parameter whose bounds span this ratio or more is searched on a log scale.
LOG_RATIO = 100.0
#: An unbounded side of the schema defaults to this multiple of the initial value.
DEFAULT_SPAN = 10.0


class CalibrationError(IpusimError, ValueError):
    """A calibration cannot run: a bad parameter, bound, phase, pair or profile."""


# Parameters ----------------------------------------------------------------------------------
@dataclass
class Parameter:
    """One config field to fit.

    Attributes
    ----------
    path
        Dotted config path (``exchange.bytes_per_cycle``).
    lower, upper
        Search bounds, in the field's base unit: the schema's (``ge``/``gt``/``le``),
        narrowed by the user; an unbounded side defaults to ``DEFAULT_SPAN`` times the
        initial value (see :func:`resolve_parameters`).
    initial
        Start value: the base config's value.
    integer
        Whether the field is an ``int`` (values are rounded when building a config).
    """

    path: str
    lower: float
    upper: float
    initial: float
    integer: bool

    def value(self, x: float) -> float | int:
        """``x`` as the field stores it: rounded for an integer field."""
        return round(x) if self.integer else float(x)


@dataclass(frozen=True)
class _Schema:
    """What the config schema says about one numeric field."""

    integer: bool
    optional: bool
    lower: float | None
    lower_open: bool
    upper: float | None
    upper_open: bool
    validators: tuple[Any, ...]


def _field_info(path: str) -> Any:
    parts = tuple(path.split("."))
    model = section_model(parts[:-1])
    return None if model is None else model.model_fields.get(parts[-1])


def _schema(path: str) -> _Schema:
    """The numeric schema of ``path``, or a CalibrationError saying why it cannot be fitted."""
    info = _field_info(path)
    annotation = info.annotation
    args = getattr(annotation, "__args__", None)
    optional = False
    if args is not None and type(None) in args and len(args) == 2:
        optional = True
        annotation = next(a for a in args if a is not type(None))
    if annotation not in (int, float):
        raise CalibrationError(
            f"parameter {path}: the field is of type {_type_name(info.annotation)}, not a "
            f"number, so it cannot be fitted; expected an int or float config field (see "
            f"`ipusim config show` for the fields)"
        )
    lower = upper = None
    lower_open = upper_open = False
    for meta in info.metadata:
        if isinstance(meta, Ge):
            lower = float(meta.ge)
        elif isinstance(meta, Gt):
            lower, lower_open = float(meta.gt), True
        elif isinstance(meta, Le):
            upper = float(meta.le)
        elif isinstance(meta, Lt):
            upper, upper_open = float(meta.lt), True
    validators = tuple(m for m in info.metadata if isinstance(m, BeforeValidator))
    return _Schema(annotation is int, optional, lower, lower_open, upper, upper_open, validators)


def _type_name(annotation: Any) -> str:
    return getattr(annotation, "__name__", None) or str(annotation).replace("typing.", "")


def _read_only_reason(path: str) -> str | None:
    if path.startswith("code.") and path.endswith("_bytes"):
        return _CODE_BYTES_REASON
    for key, reason in READ_ONLY.items():
        if path == key or (key.endswith(".") and path.startswith(key)):
            return reason
    return None


def _lookup(cfg: MachineConfig, path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        node = getattr(node, part)
    return node


def _parse_bound(path: str, schema: _Schema, value: Any, which: str) -> float:
    """A bound given by the user (number or unit string) in the field's base unit."""
    if isinstance(value, str):
        with contextlib.suppress(yaml.YAMLError):
            value = yaml.safe_load(value)
    if isinstance(value, str) and schema.validators:
        try:
            value = schema.validators[0].func(value)
        except (ValueError, TypeError) as exc:
            raise CalibrationError(
                f"parameter {path}: {which} bound {value!r} cannot be read ({exc}); expected "
                f"a number in the field's base unit or a quantity such as '32 GB/s'"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise CalibrationError(
            f"parameter {path}: {which} bound {value!r} is not a finite number; expected e.g. "
            f"{path}=LO:HI with numbers (or quantities with units)"
        )
    return float(value)


def _default_bounds(schema: _Schema, initial: float) -> tuple[float, float]:
    """Search bounds when the user gives none: the schema's, finite."""
    magnitude = abs(initial) if initial != 0 else (1000.0 if schema.integer else 1.0)
    if schema.lower is None:
        lower = initial - DEFAULT_SPAN * magnitude
    elif schema.lower_open:
        lower = schema.lower + (magnitude / 1000 if not schema.integer else 1.0)
    else:
        lower = schema.lower
    # the schema's upper bound is a physical limit (often far beyond any plausible value):
    # search up to DEFAULT_SPAN times the start value unless the schema is tighter
    heuristic = max(initial * DEFAULT_SPAN, lower + magnitude) if initial > 0 else lower + magnitude
    if schema.upper is None or schema.upper > heuristic:
        upper = heuristic
    elif schema.upper_open:
        upper = schema.upper - (magnitude / 1000 if not schema.integer else 1.0)
    else:
        upper = schema.upper
    return lower, upper


def _schema_range_text(schema: _Schema) -> str:
    lo = "-inf" if schema.lower is None else f"{schema.lower:g}"
    hi = "+inf" if schema.upper is None else f"{schema.upper:g}"
    return f"{'(' if schema.lower_open else '['}{lo}, {hi}{')' if schema.upper_open else ']'}"


def resolve_parameters(
    base_config: MachineConfig, parameters: Sequence[str | tuple[str, Any, Any]]
) -> list[Parameter]:
    """Check the parameters to fit and give each its bounds and start value.

    Parameters
    ----------
    base_config
        The config the fit starts from (initial values).
    parameters
        Dotted paths, or ``(path, lower, upper)`` to narrow the schema's bounds (numbers
        in the base unit, or quantity strings such as ``"16 GB/s"``).

    Returns
    -------
    list[Parameter]
        One per entry, in order.

    Raises
    ------
    CalibrationError
        Unknown path (with the closest valid one), a read-only or non-numeric field,
        bounds outside the schema's, ``lower >= upper``, or a path given twice.
    """
    if not parameters:
        raise CalibrationError(
            "no parameters to fit; expected at least one dotted config path, e.g. "
            "exchange.bytes_per_cycle or sync.min_sync_delay_cycles"
        )
    leaves = set(leaf_paths())
    out: list[Parameter] = []
    seen: set[str] = set()
    for spec in parameters:
        if isinstance(spec, str):
            path, bounds = spec, None
        elif isinstance(spec, tuple | list) and len(spec) == 3 and isinstance(spec[0], str):
            path, bounds = spec[0], (spec[1], spec[2])
        else:
            raise CalibrationError(
                f"parameter {spec!r}: expected a dotted config path or (path, lower, upper)"
            )
        path = path.strip()
        if path not in leaves:
            raise CalibrationError(
                f"parameter {path!r}: unknown config path; {suggest_path(tuple(path.split('.')))}"
            )
        if path in seen:
            raise CalibrationError(f"parameter {path}: given twice; expected each path once")
        seen.add(path)
        reason = _read_only_reason(path)
        if reason is not None:
            raise CalibrationError(
                f"parameter {path}: cannot be fitted: {reason}; expected a rate, latency or "
                f"cycle-count field such as exchange.bytes_per_cycle"
            )
        schema = _schema(path)
        current = _lookup(base_config, path)
        if current is None and bounds is None:
            raise CalibrationError(
                f"parameter {path}: the base config leaves it unset (None, a derived value), "
                f"so there is no start value; give bounds ({path}=LO:HI) and the fit starts "
                f"at their middle"
            )
        if bounds is None:
            lower, upper = _default_bounds(schema, float(current))
        else:
            lower = _parse_bound(path, schema, bounds[0], "lower")
            upper = _parse_bound(path, schema, bounds[1], "upper")
            _check_bounds(path, schema, lower, upper)
        middle = (lower + upper) / 2
        initial = middle if current is None else min(max(float(current), lower), upper)
        if schema.integer:
            initial = float(round(initial))
        out.append(Parameter(path, lower, upper, initial, schema.integer))
    return out


def _check_bounds(path: str, schema: _Schema, lower: float, upper: float) -> None:
    allowed = _schema_range_text(schema)
    bad_low = schema.lower is not None and (
        lower < schema.lower or (schema.lower_open and lower == schema.lower)
    )
    bad_high = schema.upper is not None and (
        upper > schema.upper or (schema.upper_open and upper == schema.upper)
    )
    if bad_low or bad_high:
        which, value = ("lower", lower) if bad_low else ("upper", upper)
        raise CalibrationError(
            f"parameter {path}: {which} bound {value:g} is outside the schema's range "
            f"{allowed}; expected bounds inside it"
        )
    if not lower < upper:
        raise CalibrationError(
            f"parameter {path}: bounds {lower:g}:{upper:g} have lower >= upper; expected "
            f"LO < HI (the schema allows {allowed})"
        )


# Pairs and evaluation ------------------------------------------------------------------------
@dataclass
class Pair:
    """A workload and the profile measured when it ran.

    Attributes
    ----------
    workload
        A workload spec for :func:`ipusim.runner.run_workload` (``path/file.py[:func]``
        or ``module[:func]``), or an IR program (:class:`ipusim.ir.Program` or a node)
        to calibrate the machine alone.
    params
        Workload arguments (for example tut7's ``rows`` and ``cols``).
    measured
        The measured profile (:class:`ipusim.measured.MeasuredProfile`).
    label
        Name in tables and messages; default ``workload@k=v,...``.
    """

    workload: Any
    params: dict[str, Any]
    measured: MeasuredProfile
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            name = self.workload if isinstance(self.workload, str) else "<ir program>"
            args = ",".join(f"{k}={v}" for k, v in (self.params or {}).items())
            self.label = f"{name}@{args}" if args else str(name)


def _is_ir(workload: Any) -> bool:
    return isinstance(workload, (ir.Program, *ir.NODE_CLASSES))


class _Runs:
    """Each distinct workload run once; later configs only re-time the lowered program."""

    def __init__(self, base: MachineConfig) -> None:
        self.base = base
        self._results: dict[Any, Any] = {}
        self.build_seconds = 0.0

    def retimer(self, pair: Pair) -> Callable[[MachineConfig], dict[str, float]]:
        """A function from a trial config to the pair's simulated phases and metrics."""
        if _is_ir(pair.workload):
            from ipusim.machine import Machine

            program = pair.workload
            return lambda cfg: _simulated_values(Machine(cfg).run(program))
        if not isinstance(pair.workload, str):
            raise CalibrationError(
                f"pair {pair.label}: workload {pair.workload!r} is a "
                f"{type(pair.workload).__name__}; expected a workload spec "
                f"('path/file.py[:func]' or 'module[:func]') or an ipusim.ir program"
            )
        key = (pair.workload, tuple(sorted((pair.params or {}).items(), key=str)))
        if key not in self._results:
            from ipusim.runner import run_workload

            start = time.perf_counter()
            self._results[key] = run_workload(
                pair.workload, self.base, dict(pair.params or {}), quiet=True
            )
            self.build_seconds += time.perf_counter() - start
        result = self._results[key]

        def values(cfg: MachineConfig) -> dict[str, float]:
            trace = result.retime(cfg)
            return {**_simulated_values(trace), **result.metrics_of(trace)}

        return values


def _simulated_values(trace: Trace) -> dict[str, float]:
    """Phases and metrics of a simulated trace, defined as in the measured profiles."""
    from ipusim.measured import measured_from_trace

    profile = measured_from_trace(trace)
    return {**profile.metrics, **profile.phases}


class _Problem:
    """The pairs, the quantities compared and a cache of simulated values per config."""

    def __init__(
        self,
        pairs: list[Pair],
        base: MachineConfig,
        params: list[Parameter],
        quantities: list[str],
        loss: str,
        runs: _Runs,
    ) -> None:
        self.pairs = pairs
        self.base = base
        self.params = params
        self.quantities = quantities
        self.loss = loss
        self.retimers = [runs.retimer(p) for p in pairs]
        self.measured = np.array(
            [[_measured_value(p, q) for q in quantities] for p in pairs], dtype=float
        )
        self._cache: dict[tuple[float | int, ...], np.ndarray] = {}
        self.simulations = 0

    def key(self, x: Sequence[float]) -> tuple[float | int, ...]:
        return tuple(p.value(v) for p, v in zip(self.params, x, strict=True))

    def config(self, x: Sequence[float]) -> MachineConfig:
        overrides = dict(zip((p.path for p in self.params), self.key(x), strict=True))
        try:
            return with_overrides(self.base, overrides)
        except ConfigError as exc:
            raise CalibrationError(
                f"the trial values {overrides} make an invalid config: {exc}; narrow the "
                f"bounds of the parameters named there"
            ) from None

    def simulated(self, x: Sequence[float]) -> np.ndarray:
        """Simulated quantities, one row per pair (cached per rounded parameter vector)."""
        key = self.key(x)
        if key not in self._cache:
            cfg = self.config(x)
            rows = []
            for pair, retime in zip(self.pairs, self.retimers, strict=True):
                values = retime(cfg)
                measured = dict(zip(self.quantities, self.measured[len(rows)], strict=True))
                missing = [
                    q for q in self.quantities if q not in values and math.isfinite(measured[q])
                ]
                if missing:
                    raise CalibrationError(
                        f"pair {pair.label}: metric {missing[0]!r} is measured but the "
                        f"simulated run has no such quantity (a re-timed run gives: "
                        f"{', '.join(sorted(values))}); compare phases instead, or drop it"
                    )
                rows.append([float(values.get(q, math.nan)) for q in self.quantities])
            self.simulations += 1
            self._cache[key] = np.array(rows, dtype=float)
        return self._cache[key]

    def residuals(self, x: Sequence[float], rows: Sequence[int] | None = None) -> np.ndarray:
        sim = self.simulated(x)
        meas = self.measured
        if rows is not None:
            sim, meas = sim[list(rows)], meas[list(rows)]
        diff = sim - meas
        res = diff / meas if self.loss == "relative" else diff
        # a quantity the pair did not measure does not count; a simulated NaN is an error
        res = np.where(np.isnan(meas), 0.0, np.nan_to_num(res, nan=1e6))
        return res.reshape(-1)


def _measured_value(pair: Pair, quantity: str) -> float:
    """The measured value, NaN for a metric this pair's measurement does not have."""
    prof = pair.measured
    value = prof.phases.get(quantity, prof.metrics.get(quantity))
    return math.nan if value is None else float(value)


def _loss(residuals: np.ndarray) -> float:
    return float(np.sum(residuals**2))


# Fitting ------------------------------------------------------------------------------------
class _Budget(Exception):
    """Raised inside the objective when the evaluation budget is spent."""


def _fit(
    problem: _Problem,
    active: list[int],
    start: np.ndarray,
    rows: Sequence[int] | None,
    max_evaluations: int,
) -> np.ndarray:
    """Minimise the loss over the ``active`` parameters from ``start``; the best x found."""
    from scipy.optimize import least_squares

    params = problem.params
    lo = np.array([params[i].lower for i in active])
    hi = np.array([params[i].upper for i in active])
    # Real parameters spanning decades are searched on a log scale (w = log x).
    logs = np.array(
        [
            not params[i].integer and lo_ > 0 and hi_ / lo_ >= LOG_RATIO
            for i, lo_, hi_ in zip(active, lo, hi, strict=True)
        ]
    )
    a = np.where(logs, np.log(np.where(logs, lo, 1.0)), lo)
    b = np.where(logs, np.log(np.where(logs, hi, 1.0)), hi)
    span = b - a
    x_full = start.astype(float).copy()
    best = {"x": x_full.copy(), "loss": _loss(problem.residuals(x_full, rows))}
    spent = {"n": 0}

    def full(u: np.ndarray) -> np.ndarray:
        x = x_full.copy()
        w = a + np.clip(u, 0.0, 1.0) * span
        x[active] = np.where(logs, np.exp(np.where(logs, w, 0.0)), w)
        return x

    def to_w(x: np.ndarray) -> np.ndarray:
        return np.where(logs, np.log(np.where(logs, x, 1.0)), x)

    def objective(u: np.ndarray) -> np.ndarray:
        x = full(u)
        before = problem.simulations
        res = problem.residuals(x, rows)
        spent["n"] += problem.simulations - before
        loss = _loss(res)
        if loss < best["loss"]:
            best.update(x=x, loss=loss)
        if spent["n"] > max_evaluations:
            raise _Budget
        return res

    if not active:
        return best["x"]
    u0 = (to_w(x_full[active]) - a) / span
    steps = np.array(
        [
            max(DIFF_FRACTION, 1.5 / s) if params[i].integer else DIFF_FRACTION
            for i, s in zip(active, span, strict=True)
        ]
    )
    with contextlib.suppress(_Budget):
        least_squares(
            objective,
            u0,
            bounds=(np.zeros(len(active)), np.ones(len(active))),
            x_scale=np.ones(len(active)),
            diff_step=steps,
            method="trf",
            # About half the budget (each iteration costs n + 1 simulations); the
            # pattern search below gets the rest.
            max_nfev=max(5, max_evaluations // (2 * (len(active) + 1))),
        )
    # Pattern search: the staircase response leaves flats that least_squares cannot see.
    # It works in the field's own units (their log for log-scaled ones), integer fields on
    # integers, and stops when no move by the smallest step (one unit, or a millionth of
    # the range) improves the loss.
    ints = np.array([params[i].integer for i in active])
    floor = np.where(ints, 1.0, REAL_RESOLUTION * span)
    step = np.maximum(steps * span, floor)
    step = np.where(ints, np.round(step), step).astype(float)
    xa = np.array([params[i].value(v) for i, v in zip(active, best["x"][active], strict=True)])
    xa = to_w(xa)
    low = np.where(ints, np.ceil(a), a)
    high = np.where(ints, np.floor(b), b)
    with contextlib.suppress(_Budget):
        while best["loss"] > 0:
            improved = False
            for k in range(len(active)):
                for sign in (1.0, -1.0):
                    trial = xa.copy()
                    trial[k] = min(max(xa[k] + sign * step[k], low[k]), high[k])
                    if trial[k] == xa[k]:
                        continue
                    old = best["loss"]
                    objective((trial - a) / span)
                    if best["loss"] < old:
                        # A move that helps is tried again twice as far next sweep.
                        xa, improved = trial, True
                        step[k] = min(2 * step[k], high[k] - low[k])
                        break
            if not improved:
                if np.all(step <= floor):
                    break
                step = np.maximum(step / 2, floor)
                step = np.where(ints, np.round(step), step)
    x = best["x"].copy()
    for i in active:
        x[i] = params[i].value(x[i])
    return _shorten(problem, active, x, rows, best["loss"])


def _shorten(
    problem: _Problem,
    active: list[int],
    x: np.ndarray,
    rows: Sequence[int] | None,
    loss: float,
) -> np.ndarray:
    """Round each real parameter to the fewest significant digits (3 or more) that keep
    the loss, so the overlay says 2.0 rather than 2.0002884728652313 when both fit alike."""
    for i in active:
        p = problem.params[i]
        if p.integer:
            continue
        for digits in range(3, 16):
            short = float(f"{x[i]:.{digits}g}")
            if short == x[i]:
                break
            if not p.lower <= short <= p.upper:
                continue
            trial = x.copy()
            trial[i] = short
            if _loss(problem.residuals(trial, rows)) <= loss:
                x = trial
                break
    return x


# Results ------------------------------------------------------------------------------------
@dataclass
class Insensitivity:
    """Evidence that the loss does not depend on a parameter.

    Attributes
    ----------
    path
        The parameter.
    losses
        Value tried -> loss there (the initial value, ±``PROBE_FRACTION`` of the
        range and both bounds); all equal.
    """

    path: str
    losses: dict[float, float]

    def __str__(self) -> str:
        tried = ", ".join(f"{v:g} -> {loss:.6g}" for v, loss in self.losses.items())
        return (
            f"{self.path}: the residuals do not change when it moves (value -> loss: "
            f"{tried}); it is left out of the fit (the simulated quantities do not depend "
            f"on it, or re-timing cannot see it)"
        )


@dataclass
class CalibrationResult:
    """Outcome of :func:`calibrate`.

    Attributes
    ----------
    parameters
        The fitted parameters with their bounds.
    values_before, values_after
        Dotted path -> value at the start and after the fit.
    residuals_before, residuals_after
        One row per pair and quantity: ``pair``, ``quantity`` (phase or metric),
        ``measured``, ``simulated``, ``rel_error`` (``(simulated - measured) /
        measured``).
    loss_before, loss_after
        Sum of squared residuals (relative or absolute, see ``loss``).
    leave_one_out
        With three pairs or more: for each pair, the parameters fitted on the other
        pairs and that pair's errors under them (``held_out``, ``quantity``,
        ``measured``, ``simulated``, ``rel_error``, one column per parameter).
        Otherwise ``None``.
    insensitive
        Parameters the loss does not depend on, with the evidence; not fitted.
    config
        The calibrated machine config.
    base_config, extends
        The config the fit started from, and the preset or path the overlay extends
        (None: the overlay holds the whole config).
    pairs, quantities, loss
        What was fitted: the pairs, the phases and metrics compared, the loss kind.
    evaluations
        Simulations run (distinct parameter vectors, each re-timing every pair).
    seconds, build_seconds
        Wall time of the whole calibration, and of the workload runs within it.
    warnings
        Every warning issued, as text.
    """

    parameters: list[Parameter]
    values_before: dict[str, float | int]
    values_after: dict[str, float | int]
    residuals_before: pd.DataFrame
    residuals_after: pd.DataFrame
    loss_before: float
    loss_after: float
    leave_one_out: pd.DataFrame | None
    insensitive: list[Insensitivity]
    config: MachineConfig
    base_config: MachineConfig
    extends: str | None
    pairs: list[Pair]
    quantities: list[str]
    loss: str
    evaluations: int
    seconds: float
    build_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def overlay(self) -> dict[str, Any]:
        """The overlay as a mapping: ``extends``, the changed fields, ``provenance``."""
        changed: dict[str, Any] = {}
        fitted = set(self.values_after) - set(self.insensitive_paths)
        if self.extends is not None:
            reference = load_config(self.extends)
            paths = [
                p
                for p in leaf_paths()
                if p not in ("name", "description")
                and (p in fitted or _lookup(self.config, p) != _lookup(reference, p))
            ]
        else:
            paths = list(leaf_paths())
        for path in paths:
            node = changed
            parts = path.split(".")
            for part in parts[:-1]:
                node = node.setdefault(part, {})
            node[parts[-1]] = _plain(_lookup(self.config, path))
        out: dict[str, Any] = {}
        if self.extends is not None:
            out["extends"] = self.extends
        out.update(changed)
        out["provenance"] = self.provenance()
        return out

    def provenance(self) -> dict[str, Any]:
        """Where the fitted values come from: sources, workloads, losses, values."""
        try:
            from importlib.metadata import version

            ipusim_version = version("ipusim")
        except Exception:  # a source tree without package metadata
            ipusim_version = "unknown"
        return {
            "tool": "ipusim calibrate",
            "ipusim_version": ipusim_version,
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "base": self.extends if self.extends is not None else self.base_config.name,
            "loss": self.loss,
            "quantities": list(self.quantities),
            "loss_before": float(self.loss_before),
            "loss_after": float(self.loss_after),
            "parameters": {
                p.path: {
                    "before": _plain(self.values_before[p.path]),
                    "after": _plain(self.values_after[p.path]),
                    "lower": _plain(p.lower),
                    "upper": _plain(p.upper),
                }
                for p in self.parameters
            },
            "insensitive": [i.path for i in self.insensitive],
            "pairs": [
                {
                    "label": pair.label,
                    "workload": pair.workload if isinstance(pair.workload, str) else "<ir program>",
                    "params": {k: _plain(v) for k, v in (pair.params or {}).items()},
                    "measured": str(getattr(pair.measured, "source", "")),
                    "format": str(getattr(pair.measured, "format", "")),
                }
                for pair in self.pairs
            ],
        }

    def overlay_text(self) -> str:
        """The overlay YAML text (loadable by :func:`ipusim.config.load_config`)."""
        header = (
            "# Written by `ipusim calibrate`: the fitted fields over the base config;\n"
            "# provenance records the measurements, workloads and losses behind them.\n"
        )
        return header + yaml.safe_dump(
            self.overlay(), sort_keys=False, allow_unicode=True, width=100
        )

    def to_overlay_yaml(self, path: str | os.PathLike[str]) -> Path:
        """Write :meth:`overlay_text` to ``path``; return the path.

        ``extends`` is written as given (a preset name, or a path: made absolute so the
        overlay loads from any directory).
        """
        out = Path(path)
        out.write_text(self.overlay_text(), encoding="utf-8")
        return out

    def report(self) -> str:
        """Residual tables before and after, leave-one-out, insensitive parameters."""
        lines = [f"Parameters ({self.loss} loss over {', '.join(self.quantities)}):"]
        for p in self.parameters:
            mark = " (insensitive, not fitted)" if p.path in self.insensitive_paths else ""
            lines.append(
                f"  {p.path}: {_num(self.values_before[p.path])} -> "
                f"{_num(self.values_after[p.path])}  [{_num(p.lower)}, {_num(p.upper)}]{mark}"
            )
        lines += [
            "",
            f"Residuals before (loss {self.loss_before:.6g}):",
            _table(self.residuals_before),
            "",
            f"Residuals after (loss {self.loss_after:.6g}):",
            _table(self.residuals_after),
        ]
        if self.leave_one_out is not None:
            lines += ["", "Leave-one-out (each pair predicted by a fit on the others):"]
            lines.append(_table(self.leave_one_out))
        if self.warnings:
            lines += ["", "Warnings:"] + [f"  - {w}" for w in self.warnings]
        lines.append(
            f"\n{self.evaluations} simulations of {len(self.pairs)} pair(s) in {self.seconds:.1f} s"
        )
        return "\n".join(lines)

    @property
    def insensitive_paths(self) -> list[str]:
        """Paths of the insensitive parameters."""
        return [i.path for i in self.insensitive]


def _plain(value: Any) -> Any:
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value)
    return value


def _num(value: float) -> str:
    return f"{value:.6g}"


def _table(frame: pd.DataFrame) -> str:
    if frame.empty:
        return "  (empty)"
    return frame.to_string(index=False, float_format=lambda v: f"{v:.6g}")


def _residual_frame(problem: _Problem, x: np.ndarray, rows: Sequence[int]) -> pd.DataFrame:
    import pandas as pd

    sim = problem.simulated(x)
    records = []
    for r in rows:
        for q, quantity in enumerate(problem.quantities):
            m, s = problem.measured[r, q], sim[r, q]
            if math.isnan(m):  # not measured for this pair
                continue
            records.append(
                {
                    "pair": problem.pairs[r].label,
                    "quantity": quantity,
                    "measured": m,
                    "simulated": s,
                    "rel_error": (s - m) / m if m != 0 else math.nan,
                }
            )
    return pd.DataFrame.from_records(
        records, columns=["pair", "quantity", "measured", "simulated", "rel_error"]
    )


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
            value = _measured_value(pair, quantity)
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


def _probe(problem: _Problem, x0: np.ndarray, index: int) -> Insensitivity | None:
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
        losses[float(p.value(value))] = _loss(res)
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
    runs = _Runs(base)
    problem = _Problem(pairs, base, params, quantities, loss, runs)
    x0 = np.array([p.initial for p in params], dtype=float)
    notes: list[str] = []

    def warn(message: str) -> None:
        notes.append(message)
        warnings.warn(message, UserWarning, stacklevel=3)

    insensitive = [ev for i in range(len(params)) if (ev := _probe(problem, x0, i)) is not None]
    for ev in insensitive:
        warn(f"insensitive parameter {ev}")
    dead = {ev.path for ev in insensitive}
    active = [i for i, p in enumerate(params) if p.path not in dead]
    x1 = _fit(problem, active, x0, None, max_evaluations)
    for i in active:
        p = params[i]
        if x1[i] in (p.value(p.lower), p.value(p.upper)) and x1[i] != x0[i]:
            warn(
                f"parameter {p.path} ended on a bound ({_num(x1[i])} in [{_num(p.lower)}, "
                f"{_num(p.upper)}]); the best value may lie outside: widen the bounds or "
                f"check the model"
            )
    all_rows = list(range(len(pairs)))
    loo = None
    if len(pairs) >= 3:
        import pandas as pd

        frames = []
        for held in all_rows:
            others = [r for r in all_rows if r != held]
            x_loo = _fit(problem, active, x0, others, max_evaluations)
            frame = _residual_frame(problem, x_loo, [held]).rename(columns={"pair": "held_out"})
            frame.insert(len(frame.columns), "train_loss", _loss(problem.residuals(x_loo, others)))
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
        residuals_before=_residual_frame(problem, x0, all_rows),
        residuals_after=_residual_frame(problem, x1, all_rows),
        loss_before=_loss(problem.residuals(x0)),
        loss_after=_loss(problem.residuals(x1)),
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
            try:
                params[key.strip()] = yaml.safe_load(value)
            except yaml.YAMLError:
                params[key.strip()] = value
    return workload.strip(), params, measured.strip()


def _calibrate_command(args: argparse.Namespace) -> int:
    from ipusim.measured import read_profile

    overrides = {"tile.tiles_per_ipu": args.tiles} if args.tiles else {}
    cfg = load_config(args.config, overrides=overrides)
    pairs = []
    for text in args.pair:
        workload, params, measured = _parse_pair_text(text)
        profile = read_profile(measured, num_tiles=args.tiles)
        pairs.append(Pair(workload, params, profile))
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    metrics = [m.strip() for m in (args.metrics or "").split(",") if m.strip()]
    with warnings.catch_warnings():
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
        "--max-evaluations", type=int, default=200, help="simulation budget of the fit"
    )
    parser.add_argument("--tiles", type=int, default=None, metavar="N", help="tiles per IPU")
    parser.add_argument("--out", metavar="overlay.yaml", help="write the overlay YAML here")
    parser.set_defaults(handler=_calibrate_command)
