"""Calibration fit: the parameters, the least-squares problem over pairs, and the fit.

A :class:`Parameter` is a config field with bounds taken from the schema and narrowed
by the user; a :class:`Pair` is a workload (or an IR program) with the profile measured
when it ran. The problem runs each workload once and then only re-times its machine
program for each trial parameter vector; the fit works in coordinates scaled to the
bounds and ends with a pattern search, because cycle counts are integers (see
:mod:`ipusim.calibrate`).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml
from annotated_types import Ge, Gt, Le, Lt
from pydantic import BeforeValidator

from ipusim import ir, progress
from ipusim.config import MachineConfig, with_overrides
from ipusim.config_sections import leaf_paths, section_model, suggest_path
from ipusim.errors import ConfigError, IpusimError

if TYPE_CHECKING:
    import pandas as pd

    from ipusim.measured import MeasuredProfile
    from ipusim.trace import Trace

__all__ = [
    "DEFAULT_SPAN",
    "DIFF_FRACTION",
    "LOG_RATIO",
    "PROBE_FRACTION",
    "READ_ONLY",
    "REAL_RESOLUTION",
    "CalibrationError",
    "FitProblem",
    "Pair",
    "Parameter",
    "WorkloadRuns",
    "config_value",
    "fit",
    "loss_of",
    "measured_value",
    "residual_frame",
    "resolve_parameters",
]


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
    "memory.bank_bytes": "a bank's size is a published hardware size, not a rate; it moves "
    "cycles only through memory.bank_conflicts, off in every preset",
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


def config_value(cfg: MachineConfig, path: str) -> Any:
    """The value of dotted field ``path`` (``exchange.bytes_per_cycle``) in ``cfg``."""
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
        current = config_value(base_config, path)
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


class WorkloadRuns:
    """Each distinct workload run once; later configs only re-time the lowered program."""

    def __init__(self, base: MachineConfig) -> None:
        self.base = base
        self._results: dict[Any, Any] = {}
        self.build_seconds = 0.0
        #: pair label -> the step names of its workload's run (workload specs only)
        self.step_names: dict[str, set[str]] = {}

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
        self.step_names[pair.label] = {step.name for step in result.measured().steps}

        def values(cfg: MachineConfig) -> dict[str, float]:
            trace = result.retime(cfg)
            return {**_simulated_values(trace), **result.metrics_of(trace)}

        return values


def foreign_pairs(pairs: Sequence[Pair], runs: WorkloadRuns) -> list[str]:
    """A warning for each pair whose measured step names and its run's have less than
    half of their names in common: the measurement is likely of another program (or
    other parameters), and fitting the machine to it would tune it to the wrong
    numbers. Profiles without steps (SDK summaries) are not judged."""
    notes = []
    for pair in pairs:
        run = runs.step_names.get(pair.label, set())
        measured = {step.name for step in pair.measured.steps}
        shared = run & measured
        if run and measured and 2 * len(shared) < len(run | measured):
            only = [
                f"{side} only e.g. {min(names - shared)!r}"
                for side, names in (("measured", measured), ("run", run))
                if names - shared
            ]
            notes.append(
                f"pair {pair.label}: only {len(shared)} of the {len(run | measured)} step "
                f"names of the measured profile ({len(measured)}) and of the run "
                f"({len(run)}) are shared ({'; '.join(only)}); the measured profile may be "
                "of another program or other parameters: check the pair"
            )
    return notes


def _simulated_values(trace: Trace) -> dict[str, float]:
    """Phases and metrics of a simulated trace, defined as in the measured profiles."""
    from ipusim.measured import measured_from_trace

    profile = measured_from_trace(trace)
    return {**profile.metrics, **profile.phases}


class FitProblem:
    """The pairs, the quantities compared and a cache of simulated values per config."""

    def __init__(
        self,
        pairs: list[Pair],
        base: MachineConfig,
        params: list[Parameter],
        quantities: list[str],
        loss: str,
        runs: WorkloadRuns,
    ) -> None:
        self.pairs = pairs
        self.base = base
        self.params = params
        self.quantities = quantities
        self.loss = loss
        self.retimers = []
        for pair in pairs:
            self.retimers.append(runs.retimer(pair))
            progress.advance(1)
        self.measured = np.array(
            [[measured_value(p, q) for q in quantities] for p in pairs], dtype=float
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
            progress.advance(1)
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


def measured_value(pair: Pair, quantity: str) -> float:
    """The measured value, NaN for a metric this pair's measurement does not have."""
    prof = pair.measured
    value = prof.phases.get(quantity, prof.metrics.get(quantity))
    return math.nan if value is None else float(value)


def loss_of(residuals: np.ndarray) -> float:
    """The loss of a residual vector: the sum of its squares."""
    return float(np.sum(residuals**2))


# Fitting ------------------------------------------------------------------------------------
class _Budget(Exception):
    """Raised inside the objective when the evaluation budget is spent."""


def fit(
    problem: FitProblem,
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
    best = {"x": x_full.copy(), "loss": loss_of(problem.residuals(x_full, rows))}
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
        loss = loss_of(res)
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
    problem: FitProblem,
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
            if loss_of(problem.residuals(trial, rows)) <= loss:
                x = trial
                break
    return x


def residual_frame(problem: FitProblem, x: np.ndarray, rows: Sequence[int]) -> pd.DataFrame:
    """One row per pair of ``rows`` and measured quantity at parameters ``x``:
    ``pair``, ``quantity``, ``measured``, ``simulated``, ``rel_error``."""
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
