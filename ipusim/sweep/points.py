"""The points of an experiment: one per workload x grid combination x repeat.

Each :class:`Point` carries everything a worker needs to run it (the resolved
workload spec, its parameters, the machine config already validated) and its *key*,
a hash that names its result: SHA-256 of the config hash of the point's full config,
the workload hash (source, function, parameters), the ipusim version and the repeat
number. The same point in a later run of the sweep has the same key, so a result
already stored is found again whatever the order or the grid around it; moving the
experiment, renaming a preset or a workload does not change it.
"""

from __future__ import annotations

import hashlib
import itertools
from dataclasses import dataclass, field
from typing import Any

from ipusim import __version__
from ipusim.config import MachineConfig, config_hash, load_config, with_overrides
from ipusim.errors import ConfigError
from ipusim.sweep.experiment import (
    Experiment,
    ExperimentError,
    _config_message,
    layout_overrides,
)
from ipusim.sweep.grid import check_size
from ipusim.sweep.workloads import canonical_json, workload_hash

__all__ = ["Point", "expand_points", "point_key"]


@dataclass(frozen=True)
class Point:
    """One run of a sweep.

    Attributes
    ----------
    index
        Position in :func:`expand_points` order (workloads outermost, then the axes in
        file order, repeats innermost).
    key
        16 hex digits naming the point's result (see :func:`point_key`).
    workload
        The workload spec to run, file paths made absolute.
    workload_name
        The workload's name in the results.
    params
        Workload parameters: the workload's ``params`` with the ``workload.*`` axes.
    config
        The base config: a preset name or an absolute YAML path.
    overrides
        Dotted config overrides: ``config.set`` with the config axes' values.
    repeat
        Repeat number, from 0.
    axes
        Axis path -> this point's value, as written in the experiment.
    config_hash, workload_hash
        Hashes of the full config and of the workload (source, function, params).
    machine
        The validated config the point runs on.
    """

    index: int
    key: str
    workload: str
    workload_name: str
    params: dict[str, Any]
    config: str
    overrides: dict[str, Any]
    repeat: int
    axes: dict[str, Any]
    config_hash: str
    workload_hash: str
    machine: MachineConfig = field(repr=False, compare=False)


def point_key(
    config_hash_: str, workload_hash_: str, repeat: int, version: str = __version__
) -> str:
    """16 hex digits of SHA-256 over the config hash, workload hash, version and repeat."""
    text = canonical_json(
        {"config": config_hash_, "workload": workload_hash_, "ipusim": version, "repeat": repeat}
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _combinations(exp: Experiment) -> list[dict[str, Any]]:
    """Axis path -> value, one dict per combination of the grid."""
    paths = [a.path for a in exp.axes]
    lists = [list(a.values or []) for a in exp.axes]
    rows = itertools.product(*lists) if exp.mode == "product" else zip(*lists, strict=True)
    return [dict(zip(paths, row, strict=True)) for row in rows]


def expand_points(exp: Experiment) -> list[Point]:
    """Every point of ``exp``, in a deterministic order.

    Workloads are outermost, then the axes (the first axis varies slowest in
    ``product`` mode), then the repeats.

    Raises
    ------
    ExperimentError
        More than :data:`~ipusim.sweep.grid.MAX_POINTS` points (refused before
        any is built); a combination of values the config rejects as a whole (for example more
        columns than tiles), or two points that are the same run (same config, workload
        and repeat, e.g. a duplicated value); each is named with its axis values.
    """
    too_many = check_size(exp, f"experiment {exp.name!r}")
    if too_many:  # refused before anything of the grid is built
        raise ExperimentError(too_many, header=f"experiment {exp.name!r}: too many points")
    kinds = {a.path: a.kind for a in exp.axes}
    bases: dict[str, MachineConfig] = {}
    configs: dict[str, MachineConfig | ConfigError] = {}
    problems: list[str] = []
    points: list[Point] = []
    seen: dict[str, Point] = {}
    combos = _combinations(exp)
    for w, entry in enumerate(exp.workloads):
        source = exp.workload_source(w)
        if source.problem is not None:  # load_experiment reports it; expand_points too
            raise ExperimentError([f"workloads[{w}].spec: {source.problem}"])
        for combo in combos:
            base_value = combo.get("config", exp.config.base)
            base = exp.resolve_config(base_value)
            overrides = dict(exp.config.set)
            overrides.update({p: v for p, v in combo.items() if kinds[p] == "field"})
            params = dict(entry.params)
            params.update(
                {p.removeprefix("workload."): v for p, v in combo.items() if kinds[p] == "workload"}
            )
            cache_key = canonical_json([base, overrides])
            if cache_key not in configs:
                try:
                    if base not in bases:
                        bases[base] = load_config(base)
                    configs[cache_key] = with_overrides(
                        bases[base], layout_overrides(bases[base], overrides)
                    )
                except ConfigError as exc:
                    configs[cache_key] = exc
            cfg = configs[cache_key]
            if isinstance(cfg, ConfigError):
                problems.append(
                    f"point {combo}: the config rejects this combination: {_config_message(cfg)}"
                )
                continue
            c_hash = config_hash(cfg)
            w_hash = workload_hash(source, params)
            for repeat in range(exp.repeats):
                key = point_key(c_hash, w_hash, repeat)
                point = Point(
                    index=len(points),
                    key=key,
                    workload=source.spec,
                    workload_name=entry.label,
                    params=params,
                    config=base,
                    overrides=overrides,
                    repeat=repeat,
                    axes=dict(combo),
                    config_hash=c_hash,
                    workload_hash=w_hash,
                    machine=cfg,
                )
                twin = seen.get(key)
                if twin is not None:
                    problems.append(
                        f"point {point.axes} of workload {entry.label!r} is the same run as "
                        f"point {twin.axes} of {twin.workload_name!r} (same config hash "
                        f"{c_hash}, workload and repeat); hint: remove duplicate axis values, "
                        "or an axis over a field that changes nothing (name, description)"
                    )
                    continue
                seen[key] = point
                points.append(point)
    if problems:
        shown = problems[:20]
        if len(problems) > 20:
            shown.append(f"... and {len(problems) - 20} more")
        raise ExperimentError(shown, header=f"experiment {exp.name!r}: bad points")
    return points
