"""The experiment file of ``ipusim sweep``: its schema and every check made before a run.

An experiment is a YAML file (or a mapping) such as::

    name: tut7_exchange
    workloads:
      - spec: ../tutorials/tut7.py        # file.py[:func] or package.module[:func]
        params: {rows: 16, cols: 32}
    config:
      base: mk2                           # preset or YAML path (or just `config: mk2`)
      set: {sync.min_sync_delay_cycles: 0}
    axes:
      - path: config                      # the base config itself, per point
        values: [mk1, mk2]
      - path: exchange.bytes_per_cycle    # any MachineConfig field, by dotted path
        values: [2, 4, 8, 16]
      - path: workload.rows               # a parameter of the workload function
        range: {start: 16, stop: 80, step: 16}
    mode: product                         # or zip: the axes side by side
    repeats: 1

:func:`load_experiment` validates it with pydantic and then checks what the schema
cannot: that every workload exists and has its function, that every axis path is a real
config field or workload parameter, that every axis value is accepted by the config
(tried on the base config with ``set``), that ``zip`` axes have equal lengths. Every
problem is reported at once in one :class:`ExperimentError`, each naming the file, the
place in it (``axes[1].values``), the value found, what is required and a hint, before
any point runs. Paths in the file are relative to the file's directory.

Two kinds of sugar build an axis's ``values``: ``range: {start, stop, step}`` (stop
excluded, as Python's ``range``) and ``geomspace: {start, stop, num}`` (both ends
included, as :func:`numpy.geomspace`; whole numbers stay integers when ``start`` and
``stop`` are). After loading, ``values`` always holds the list.
"""

from __future__ import annotations

import difflib
import math
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)

from ipusim.config import (
    MachineConfig,
    OverrideCheck,
    list_presets,
    load_config,
    with_overrides,
)
from ipusim.config_files import read_yaml_mapping
from ipusim.config_sections import leaf_paths, suggest_path
from ipusim.errors import ConfigError, IpusimError
from ipusim.errors import short_repr as _show
from ipusim.runner import workload_stem
from ipusim.sweep.grid import MAX_POINTS, Numbers, check_size, grid_size, numbering
from ipusim.sweep.workloads import WorkloadSource, canonical_json, resolve_workload

#: The tile count and the layout fields derived from it (:func:`layout_overrides`).
TILES_FIELD = "tile.tiles_per_ipu"
COLUMNS_FIELD = "tile.columns"
CONTROLLER_FIELD = "sync.controller_tile"

__all__ = [
    "CONFIG_AXIS",
    "MAX_POINTS",
    "WORKLOAD_PREFIX",
    "Axis",
    "ConfigSection",
    "Experiment",
    "ExperimentError",
    "GeomSpace",
    "Range",
    "WorkloadEntry",
    "grid_size",
    "layout_overrides",
    "load_experiment",
]

#: Axis path that chooses the base config (a preset name or a YAML path) per point.
CONFIG_AXIS = "config"
#: Prefix of the axis paths that set a workload parameter (``workload.rows``).
WORKLOAD_PREFIX = "workload."
#: Most values one axis may have (a larger grid is almost surely a typo in a range).
MAX_AXIS_VALUES = 100_000
#: Most problems listed per axis; the rest are counted.
_MAX_PROBLEMS_PER_AXIS = 8
_NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"


class ExperimentError(IpusimError, ValueError):
    """An experiment is invalid; ``problems`` lists every problem found.

    Parameters
    ----------
    problems
        One line per problem, each naming the file, the place in it, the value found,
        what is required and a hint.
    header
        First line of the message.
    """

    def __init__(self, problems: list[str], header: str = "invalid experiment") -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{header} ({len(self.problems)} problem(s)):\n{lines}")


# ----------------------------------------------------------------------------- the schema
class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


Number = StrictInt | StrictFloat


class Range(_Model):
    """``range: {start, stop, step}``: ``start, start+step, ...`` while before ``stop``."""

    start: Number
    stop: Number
    step: Number = 1

    @field_validator("step")
    @classmethod
    def _step_not_zero(cls, value: float) -> float:
        if value == 0 or not math.isfinite(value):
            raise ValueError("step must be a finite non-zero number")
        return value

    def values(self) -> list[int | float]:
        """The numbers of the range (ints when start, stop and step are ints)."""
        span = (float(self.stop) - float(self.start)) / float(self.step)
        if not math.isfinite(span) or span > MAX_AXIS_VALUES:
            shown = f"{span:.3g}" if math.isfinite(span) else "too many"
            raise ValueError(
                f"range from {_show(self.start)} to {_show(self.stop)} by {_show(self.step)} has "
                f"{shown} values; "
                f"at most {MAX_AXIS_VALUES} are allowed; hint: a larger step"
            )
        count = math.ceil(span)
        if count < 1:
            raise ValueError(
                f"range from {self.start} to {self.stop} by {self.step} is empty; hint: stop "
                "is excluded, and a negative step counts down"
            )
        if count > MAX_AXIS_VALUES:
            raise ValueError(f"range has {count} values; at most {MAX_AXIS_VALUES} are allowed")
        if all(isinstance(v, int) for v in (self.start, self.stop, self.step)):
            return [int(self.start + i * self.step) for i in range(count)]
        return [_tidy(self.start + i * self.step) for i in range(count)]


class GeomSpace(_Model):
    """``geomspace: {start, stop, num}``: ``num`` numbers evenly spaced on a log scale."""

    start: Number = Field(gt=0)
    stop: Number = Field(gt=0)
    num: StrictInt = Field(ge=1, le=MAX_AXIS_VALUES)

    def values(self) -> list[int | float]:
        """The numbers, both ends included (whole numbers as ints when start and stop are)."""
        try:
            ends = float(self.start), float(self.stop)
        except OverflowError:
            ends = (math.inf, math.inf)
        if not all(math.isfinite(e) for e in ends):
            raise ValueError(
                f"geomspace from {_show(self.start)} to {_show(self.stop)}: the ends must be "
                "finite numbers (at most about 1.8e308)"
            )
        raw = np.geomspace(*ends, self.num).tolist()
        raw[0], raw[-1] = self.start, self.stop  # exact ends
        whole = isinstance(self.start, int) and isinstance(self.stop, int)
        out: list[int | float] = []
        for value in raw:
            tidy = _tidy(float(value))
            out.append(round(tidy) if whole and float(tidy).is_integer() else tidy)
        return out


def _tidy(value: float) -> float:
    """``value`` rounded to 12 significant digits (``0.1 * 3`` -> ``0.3``)."""
    return float(f"{value:.12g}")


class Axis(_Model):
    """One axis of the grid: a path and its values.

    ``path`` is a dotted MachineConfig field (``exchange.bytes_per_cycle``), a workload
    parameter (``workload.rows``) or ``config`` (the base config: preset names or YAML
    paths). Exactly one of ``values``, ``range`` and ``geomspace`` is given; after
    loading, ``values`` holds the list.
    """

    path: str = Field(min_length=1)
    values: list[Any] | None = Field(default=None, min_length=1, max_length=MAX_AXIS_VALUES)
    range: Range | None = None
    geomspace: GeomSpace | None = None

    @model_validator(mode="after")
    def _one_source_of_values(self) -> Axis:
        given = [
            name for name in ("values", "range", "geomspace") if getattr(self, name) is not None
        ]
        if len(given) != 1:
            found = " and ".join(given) if given else "none of them"
            raise ValueError(
                f"axis {self.path!r}: give exactly one of values, range, geomspace; found "
                f"{found}; hint: values: [1, 2, 4] or range: {{start: 1, stop: 9, step: 2}}"
            )
        sugar = self.range or self.geomspace
        if sugar is not None:
            self.values = sugar.values()
            self.range = self.geomspace = None
        return self

    @property
    def kind(self) -> Literal["config", "workload", "field"]:
        """``config`` (the base config), ``workload`` (a parameter) or ``field``."""
        if self.path == CONFIG_AXIS:
            return "config"
        if self.path.startswith(WORKLOAD_PREFIX):
            return "workload"
        return "field"

    @property
    def param(self) -> str:
        """The workload parameter of a ``workload.<param>`` axis."""
        return self.path.removeprefix(WORKLOAD_PREFIX)


class WorkloadEntry(_Model):
    """A workload: its spec, fixed parameters and (optional) name in the results."""

    spec: str = Field(min_length=1, description="path/file.py[:func] or package.module[:func]")
    params: dict[str, Any] = Field(default_factory=dict)
    name: str | None = Field(default=None, min_length=1)

    @property
    def label(self) -> str:
        """The name in the results: ``name``, or the spec's file stem / module name."""
        return self.name or workload_stem(self.spec)


class ConfigSection(_Model):
    """The base machine config (preset or YAML path) and dotted overrides of every point."""

    base: str = Field(default="mk2", min_length=1)
    set: dict[str, Any] = Field(default_factory=dict)


class Experiment(_Model):
    """A sweep: workloads x a grid of config and workload values x repeats.

    Attributes
    ----------
    name
        Names the results (default output directory ``sweeps/<name>``).
    description
        Free text.
    workloads
        The workloads; every point of the grid runs each of them.
    config
        Base config and ``set`` overrides; a ``config`` axis replaces the base per point.
    axes
        The grid's axes, first axis outermost.
    mode
        ``product``: every combination; ``zip``: the i-th values of all axes together.
    repeats
        Runs of each point (the simulation is deterministic: repeats measure host time).
    options
        Engine options of every run (``debug.maxCycles: 1000000``).
    profiles
        Keep each point's profiles (``profile.json``, ``execution.json``,
        ``summary.txt``) next to its row.
    base_dir
        Directory that relative paths are resolved against (the file's directory; set
        by :func:`load_experiment`).
    """

    name: str = Field(min_length=1, max_length=100, pattern=_NAME_PATTERN)
    description: str = ""
    workloads: list[WorkloadEntry] = Field(min_length=1)
    config: ConfigSection = Field(default_factory=ConfigSection)
    axes: list[Axis] = Field(default_factory=list)
    mode: Literal["product", "zip"] = "product"
    repeats: int = Field(default=1, ge=1, le=10_000)
    options: dict[str, str] = Field(default_factory=dict)
    profiles: bool = True
    base_dir: str = ""

    @field_validator("config", mode="before")
    @classmethod
    def _config_shorthand(cls, value: Any) -> Any:
        return {"base": value} if isinstance(value, str | os.PathLike) else value

    @field_validator("options", mode="before")
    @classmethod
    def _options_as_text(cls, value: Any) -> Any:
        if not isinstance(value, Mapping):
            return value
        out = {}
        for key, item in value.items():
            if isinstance(item, bool):
                item = "true" if item else "false"
            elif isinstance(item, int | float):
                item = str(item)
            out[key] = item
        return out

    def resolve_config(self, value: str) -> str:
        """A config value as written (preset name or path) -> what :func:`load_config`
        takes: the preset name, or the path made absolute against :attr:`base_dir`."""
        if value in list_presets():
            return value
        return str((Path(self.base_dir or ".") / Path(value).expanduser()).resolve())

    def workload_source(self, index: int) -> WorkloadSource:
        """Workload ``index`` resolved against :attr:`base_dir` (see
        :func:`~ipusim.sweep.workloads.resolve_workload`)."""
        return resolve_workload(self.workloads[index].spec, Path(self.base_dir or "."))


# ------------------------------------------------------------------------ reading the file
def _location(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif str(part) in ("function-after", "function-before"):
            continue
        else:
            out += f".{part}" if out else str(part)
    return out or "top level"


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: type[BaseModel] | None = Experiment
    for part in loc:
        if model is None or isinstance(part, int):
            continue
        field = model.model_fields.get(str(part))
        if field is None:
            return None
        annotation = field.annotation
        candidates = [annotation, *getattr(annotation, "__args__", ())]
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)),
            None,
        )
        if model is None:
            inner = [a for c in candidates for a in getattr(c, "__args__", ())]
            model = next(
                (c for c in inner if isinstance(c, type) and issubclass(c, BaseModel)), None
            )
    return model


_HINTS = {
    "name": "a short name of letters, digits, '_', '.', '-' (it names the output directory)",
    "workloads": "a list of {spec: path/file.py[:func] or module[:func], params: {...}}",
    "axes": "a list of {path: exchange.bytes_per_cycle | workload.rows | config, values: [...]}",
    "mode": "product (every combination) or zip (axes side by side)",
    "repeats": "a whole number of runs per point, at least 1",
    "options": "engine options as a mapping of name: value",
}


def _schema_problem(label: str, error: Mapping[str, Any]) -> str:
    loc = tuple(error["loc"])
    where = _location(loc)
    kind = error["type"]
    value = error.get("input")
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        keys = list(model.model_fields) if model is not None else []
        keys = [k for k in keys if k != "base_dir"]
        match = difflib.get_close_matches(str(loc[-1]), keys, n=1, cutoff=0.6)
        hint = f"did you mean {match[0]!r}?" if match else f"valid keys: {', '.join(keys)}"
        return f"{label}: {where}: unknown key (found with value {_show(value)}); {hint}"
    if kind == "missing":
        hint = _HINTS.get(str(loc[-1]) if loc else "", "")
        return f"{label}: {where}: missing; required{': ' + hint if hint else ''}"
    message = str(error["msg"]).removeprefix("Value error, ")
    hint = _HINTS.get(str(loc[0]) if loc else "", "") if len(loc) == 1 else ""
    tail = f"; hint: {hint}" if hint else ""
    if kind == "value_error":
        return f"{label}: {where}: {message}"
    return f"{label}: {where}: found {_show(value)}; {message[:1].lower()}{message[1:]}{tail}"


def _read(source: str | os.PathLike[str]) -> tuple[dict[str, Any], str, Path]:
    path = Path(source)
    label = str(path)
    try:
        data = read_yaml_mapping(
            path,
            label,
            "hint: give the path of an experiment YAML file",
            "required a mapping with name, workloads, config, axes",
        )
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ExperimentError(
            [f"{label}: {where}YAML syntax error: {problem}; hint: check indentation and quotes"]
        ) from None
    except ConfigError as exc:  # unreadable, not a mapping, duplicate keys, alias bombs, ...
        raise ExperimentError(exc.problems) from None
    return data, label, path.resolve().parent


def load_experiment(
    source: str | os.PathLike[str] | Mapping[str, Any] | Experiment,
    base_dir: str | os.PathLike[str] | None = None,
) -> Experiment:
    """Read and check an experiment.

    Parameters
    ----------
    source
        Path of a YAML file, a mapping with the same content, or an Experiment
        (checked again).
    base_dir
        Directory relative paths are resolved against: default the file's directory,
        or the working directory for a mapping.

    Returns
    -------
    Experiment
        The validated experiment, with ``base_dir`` set and axis values expanded.

    Raises
    ------
    ExperimentError
        Every problem found (schema, workloads, config paths and values, zip lengths).
    """
    if isinstance(source, Experiment):
        data: dict[str, Any] = source.model_dump(exclude={"base_dir"})
        label, directory = f"<experiment {source.name!r}>", Path(source.base_dir or ".")
    elif isinstance(source, Mapping):
        data, label, directory = dict(source), "<mapping>", Path.cwd()
    elif isinstance(source, str | os.PathLike):
        data, label, directory = _read(source)
    else:
        raise ExperimentError(
            [
                f"experiment: found {_show(source)} ({type(source).__name__}); required a "
                "YAML path, a mapping or an Experiment"
            ]
        )
    if base_dir is not None:
        directory = Path(base_dir)
    data.pop("base_dir", None)
    base = str(directory.resolve())
    try:
        exp = Experiment.model_validate({**data, "base_dir": base})
    except ValidationError as exc:
        # one pass: the parts that passed the schema are checked further all the same,
        # so the file's every problem is listed at once
        problems = [_schema_problem(label, err) for err in exc.errors()]
        partial, skip, numbers = _salvage(data, base)
        problems += check_experiment(partial, label, skip, numbers)
        raise ExperimentError(problems, header=f"invalid experiment {label}") from None
    problems = check_experiment(exp, label)
    if problems:
        raise ExperimentError(problems, header=f"invalid experiment {label}")
    return exp


def _salvage(data: Mapping[str, Any], base_dir: str) -> tuple[Experiment, set[str], Numbers]:
    """The parts of an experiment that pass the schema on their own, as an unvalidated
    Experiment, and what the deeper checks must skip because a part is missing
    (``config``: the base config is unknown; ``zip``: an axis was dropped; ``axis
    params:<name>``: a dropped axis sets parameter ``name``), with the positions in the
    file of the workloads and axes kept."""
    skip: set[str] = set()

    def valid(model: type[BaseModel], value: Any) -> BaseModel | None:
        try:
            return model.model_validate(value)
        except (ValidationError, TypeError, ValueError, OverflowError):
            return None

    workloads = data.get("workloads")
    entries = [valid(WorkloadEntry, w) for w in workloads] if isinstance(workloads, list) else []
    numbers: Numbers = {
        "workloads": [i for i, e in enumerate(entries) if isinstance(e, WorkloadEntry)],
        "axes": [],
    }
    axes_raw = data.get("axes", [])
    axes: list[Axis] = []
    for i, item in enumerate(axes_raw if isinstance(axes_raw, list) else []):
        axis = valid(Axis, item)
        if isinstance(axis, Axis):
            axes.append(axis)
            numbers["axes"].append(i)
            continue
        skip.add("zip")
        path = item.get("path") if isinstance(item, Mapping) else None
        if isinstance(path, str) and path.startswith(WORKLOAD_PREFIX):
            skip.add(f"axis param:{path.removeprefix(WORKLOAD_PREFIX)}")
    if not isinstance(axes_raw, list):
        skip.add("zip")
    config_raw = data.get("config", {})
    if isinstance(config_raw, str | os.PathLike):
        config_raw = {"base": os.fspath(config_raw)}
    config = valid(ConfigSection, config_raw)
    if not isinstance(config, ConfigSection):
        config = ConfigSection()
        skip.add("config")
    mode = data.get("mode", "product")
    repeats = data.get("repeats", 1)
    partial = Experiment.model_construct(
        name=str(data.get("name", "experiment")),
        description="",
        workloads=[e for e in entries if isinstance(e, WorkloadEntry)],
        config=config,
        axes=axes,
        mode=mode if mode in ("product", "zip") else "product",
        repeats=repeats if isinstance(repeats, int) and 1 <= repeats <= 10_000 else 1,
        options={},
        profiles=True,
        base_dir=base_dir,
    )
    if mode not in ("product", "zip"):
        skip.add("zip")
    return partial, skip, numbers


# --------------------------------------------------------------------- the deeper checks
def _json_problem(value: Any) -> str | None:
    try:
        canonical_json(value)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def _config_message(exc: ConfigError) -> str:
    """The problems of a ConfigError on one line, without their ``<label>:`` prefixes."""
    lines = [re.sub(r"^<[^>]*>: ", "", p) for p in exc.problems]
    return "; ".join(lines)


def _check_workloads(
    exp: Experiment, label: str, skip: set[str] = frozenset(), numbers: Numbers | None = None
) -> list[str]:
    wn, an = numbering(numbers)
    problems: list[str] = []
    axis_params = [a.param for a in exp.axes if a.kind == "workload"]
    axis_params += [k.removeprefix("axis param:") for k in skip if k.startswith("axis param:")]
    seen: dict[str, int] = {}
    for i, entry in enumerate(exp.workloads):
        where = f"{label}: workloads[{wn(i)}]"
        source = exp.workload_source(i)
        if source.problem is not None:
            problems.append(f"{where}.spec: {source.problem}")
            continue
        if entry.label in seen:
            problems.append(
                f"{where}: name {entry.label!r} is also workloads[{wn(seen[entry.label])}]'s; "
                "required: unique names; hint: add name: ... to one of them"
            )
        seen.setdefault(entry.label, i)
        bad = _json_problem(entry.params)
        if bad is not None:
            problems.append(f"{where}.params: cannot be hashed as JSON ({bad})")
        if source.parameters is None:
            continue
        takes = ", ".join(source.parameters) or "(none)"
        for key, value in entry.params.items():
            if key not in source.parameters:
                problems.append(
                    f"{where}.params: {key!r} is not a parameter of {source.function}() in "
                    f"{entry.spec!r}; it takes: {takes}"
                )
            elif (bad := source.type_problem(key, value)) is not None:
                problems.append(f"{where}.params.{key}: {bad}")
        for axis_index, axis in enumerate(exp.axes):
            if axis.kind != "workload" or axis.param not in source.parameters:
                continue
            for value in axis.values or []:
                bad = source.type_problem(axis.param, value)
                if bad is not None:
                    problems.append(
                        f"{label}: axes[{an(axis_index)}] ({axis.path}): value {bad} "
                        f"(workloads[{wn(i)}]); hint: YAML reads 8 as an int, 8.0 as a float, "
                        "'8' as text"
                    )
        for param in (a.param for a in exp.axes if a.kind == "workload"):
            if param not in source.parameters:
                problems.append(
                    f"{label}: axis 'workload.{param}': {param!r} is not a parameter of "
                    f"{source.function}() of workloads[{wn(i)}] ({entry.spec!r}); it takes: {takes}"
                )
        missing = [p for p in source.required if p not in entry.params and p not in axis_params]
        if missing:
            problems.append(
                f"{where}.params: {source.function}() of {entry.spec!r} needs "
                f"{', '.join(missing)}; hint: params: {{{missing[0]}: ...}}"
            )
    return problems


def layout_overrides(base: MachineConfig, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` with the tile layout that a changed tile count implies.

    Tiles are numbered column by column in ``tile.columns`` columns of
    ``ceil(tiles_per_ipu / columns)`` tiles; the presets fix the column count (16 on
    Mk1/Mk2). A tile count below it leaves one tile per column; a chip too small for
    the sync controller's tile (736 on Mk2, the middle) gets it on its middle tile,
    ``tiles_per_ipu // 2``. These are the rules of an ``IPUModel`` with ``tilesPerIPU``
    set, so an axis over ``tile.tiles_per_ipu`` needs neither field beside it. A
    ``tile.columns`` or ``sync.controller_tile`` given in ``config.set`` or on an axis
    is kept as given.
    """
    out = dict(overrides)
    if TILES_FIELD not in out:
        return out
    try:
        tiles = int(out[TILES_FIELD])
    except (TypeError, ValueError):
        return out  # not a number: the config's own check names it
    if tiles < 1:
        return out
    if COLUMNS_FIELD not in out and tiles < base.tile.columns:
        out[COLUMNS_FIELD] = tiles
    if CONTROLLER_FIELD not in out and base.sync.controller_tile >= tiles:
        out[CONTROLLER_FIELD] = tiles // 2
    return out


def _load_base(
    exp: Experiment, value: str, overrides: Mapping[str, Any], where: str
) -> tuple[MachineConfig | None, str | None]:
    """The config ``value`` (preset or path) with ``overrides``, or a problem line."""
    resolved = exp.resolve_config(value)
    if resolved not in list_presets() and not Path(resolved).is_file():
        return None, (
            f"{where}: {value!r} is neither a preset nor a file (looked for {resolved!r}); "
            f"required one of {', '.join(list_presets())} or a YAML path relative to the "
            "experiment file"
        )
    try:
        base = load_config(resolved)
        return with_overrides(base, layout_overrides(base, overrides)), None
    except ConfigError as exc:
        with_set = " with config.set" if overrides else ""
        return None, f"{where}: config {value!r}{with_set} is invalid: {_config_message(exc)}"


def _check_axes(
    exp: Experiment, label: str, skip: set[str] = frozenset(), numbers: Numbers | None = None
) -> list[str]:
    _, an = numbering(numbers)
    problems: list[str] = []
    leaves = set(leaf_paths())
    fixed: dict[str, Any] = {}  # config.set without its unknown paths (reported once)
    for key, value in exp.config.set.items():
        if key in leaves:
            fixed[key] = value
        else:
            problems.append(
                f"{label}: config.set: {key!r} is not a config field (found with value "
                f"{_show(value)}); {suggest_path(tuple(str(key).split('.')))}"
            )
    bases: dict[str, MachineConfig] = {}
    base_values: list[Any] = [exp.config.base]
    base_where = f"{label}: config.base"
    for i, axis in enumerate(exp.axes):
        if axis.kind == "config":
            base_values, base_where = list(axis.values or []), f"{label}: axes[{an(i)}] (config)"
            break
    if "config" in skip:  # the config section is invalid: nothing to try values on
        base_values = []
    for value in base_values:
        if not isinstance(value, str):
            problems.append(
                f"{base_where}: found {_show(value)}; required a preset name or a YAML path"
            )
            continue
        cfg, problem = _load_base(exp, value, fixed, base_where)
        if problem is not None:
            problems.append(problem)
        elif cfg is not None:
            bases[value] = cfg

    checks = {name: OverrideCheck(cfg) for name, cfg in bases.items()}
    seen: set[str] = set()
    for i, axis in enumerate(exp.axes):
        where = f"{label}: axes[{an(i)}] ({axis.path})"
        if axis.path in seen:
            problems.append(f"{where}: the path is also an earlier axis; required: unique paths")
            continue
        seen.add(axis.path)
        values = axis.values or []
        bad_json = next((v for v in values if _json_problem(v) is not None), None)
        if bad_json is not None:
            problems.append(
                f"{where}: value {_show(bad_json)} cannot be stored; required numbers, text, "
                "booleans or lists of them"
            )
            continue
        if axis.kind == "workload":
            if not axis.param.isidentifier():
                problems.append(
                    f"{where}: {axis.param!r} is not a parameter name; required "
                    "workload.<identifier>, e.g. workload.rows"
                )
            continue
        if axis.kind == "config":
            continue  # checked with the bases above
        if axis.path not in leaves:
            hint = suggest_path(tuple(axis.path.split(".")), ("config", "workload"))
            problems.append(
                f"{where}: {axis.path!r} is not a config field nor workload.<param> nor "
                f"'config'; {hint} (every field: ipusim config show {exp.config.base})"
            )
            continue
        rejected: list[str] = []
        for value in values:
            for base_name, cfg in bases.items():
                overrides = layout_overrides(cfg, {**fixed, axis.path: value})
                if checks[base_name].accepts(overrides):
                    continue
                if len(rejected) >= _MAX_PROBLEMS_PER_AXIS:  # counted, not listed
                    rejected.append("")
                    break
                try:
                    with_overrides(cfg, overrides)
                except ConfigError as exc:
                    on = f" on config {base_name!r}" if len(bases) > 1 else ""
                    rejected.append(
                        f"{where}: value {_show(value)} is rejected{on}: {_config_message(exc)}"
                    )
                    break
        if len(rejected) > _MAX_PROBLEMS_PER_AXIS:
            more = len(rejected) - _MAX_PROBLEMS_PER_AXIS
            rejected = [*rejected[:_MAX_PROBLEMS_PER_AXIS], f"{where}: ... and {more} more values"]
        problems += rejected

    if exp.mode == "zip" and exp.axes and "zip" not in skip:
        lengths = {a.path: len(a.values or []) for a in exp.axes}
        if len(set(lengths.values())) > 1:
            listing = ", ".join(f"{p} has {n}" for p, n in lengths.items())
            problems.append(
                f"{label}: mode zip needs axes of equal length; found {listing}; hint: give "
                "each axis the same number of values, or use mode: product"
            )
    return problems


def check_experiment(
    exp: Experiment,
    label: str = "experiment",
    skip: set[str] = frozenset(),
    numbers: Numbers | None = None,
) -> list[str]:
    """Every problem of a schema-valid experiment that the schema cannot see (one line
    each); empty when it can run. ``skip`` names checks whose input was dropped because
    it failed the schema, ``numbers`` the position in the file of each workload and axis
    kept (see :func:`load_experiment`)."""
    return (
        check_size(exp, label)
        + _check_workloads(exp, label, skip, numbers)
        + _check_axes(exp, label, skip, numbers)
    )
