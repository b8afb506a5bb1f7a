"""Architecture experiments: run workloads over a grid of machine configs and parameters.

An *experiment* (a YAML file, see :mod:`ipusim.sweep.experiment`) names workloads, a
base config and *axes* (config fields by dotted path, workload parameters, the base
config itself); :func:`expand_points` turns it into :class:`Point` s, :func:`run_sweep`
runs those whose result is not stored yet, in this process, in local worker processes
or on a dask cluster, and a :class:`ResultStore` keeps one Parquet row per point
(``ResultStore(out).rows()`` is the table to analyse). ``ipusim sweep EXP.yaml`` is the
command line.

Example
-------
>>> from ipusim.sweep import load_experiment, run_sweep, ResultStore  # doctest: +SKIP
>>> exp = load_experiment("examples/experiments/tut7_exchange.yaml")  # doctest: +SKIP
>>> run_sweep(exp, "sweeps/tut7_exchange", jobs=2)  # doctest: +SKIP
>>> ResultStore("sweeps/tut7_exchange").rows()  # doctest: +SKIP
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only; at run time names load lazily
    from ipusim.sweep.execute import PointProfiles, SweepSummary, run_point, run_sweep
    from ipusim.sweep.experiment import (
        Axis,
        ConfigSection,
        Experiment,
        ExperimentError,
        WorkloadEntry,
        load_experiment,
    )
    from ipusim.sweep.points import Point, expand_points, point_key
    from ipusim.sweep.store import PHASE_COLUMNS, ROW_COLUMNS, ResultStore, SweepError

#: Public name -> the module defining it. Loaded on first use, so that ``ipusim --help``
#: (which imports :mod:`ipusim.sweep.cli`) does not pay for pandas and pyarrow.
_EXPORTS = {
    **dict.fromkeys(
        ("PointProfiles", "SweepSummary", "run_point", "run_sweep"), "ipusim.sweep.execute"
    ),
    **dict.fromkeys(
        (
            "Axis",
            "ConfigSection",
            "Experiment",
            "ExperimentError",
            "WorkloadEntry",
            "load_experiment",
        ),
        "ipusim.sweep.experiment",
    ),
    **dict.fromkeys(("Point", "expand_points", "point_key"), "ipusim.sweep.points"),
    **dict.fromkeys(
        ("PHASE_COLUMNS", "ROW_COLUMNS", "ResultStore", "SweepError"), "ipusim.sweep.store"
    ),
}

__all__ = [
    "PHASE_COLUMNS",
    "ROW_COLUMNS",
    "Axis",
    "ConfigSection",
    "Experiment",
    "ExperimentError",
    "Point",
    "PointProfiles",
    "ResultStore",
    "SweepError",
    "SweepSummary",
    "WorkloadEntry",
    "expand_points",
    "load_experiment",
    "point_key",
    "run_point",
    "run_sweep",
]


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (PEP 562)."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'ipusim.sweep' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
