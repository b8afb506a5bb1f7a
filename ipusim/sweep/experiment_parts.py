"""The parts of an experiment file that pass the schema on their own.

An experiment with a schema error is still checked further (workload files, config
paths and values), on the workloads and axes that are valid by themselves, so that
:func:`~ipusim.sweep.experiment.load_experiment` lists every problem of a file in one
pass; a user fixes them all at once instead of meeting them one run at a time.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from ipusim.sweep.experiment import (
    WORKLOAD_PREFIX,
    Axis,
    ConfigSection,
    Experiment,
    WorkloadEntry,
    _Numbers,
)

__all__ = ["salvage"]


def salvage(data: Mapping[str, Any], base_dir: str) -> tuple[Experiment, set[str], _Numbers]:
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
    numbers: _Numbers = {
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
