"""Join the calibration CSV with the workloads' ``POINTS``: which workload, with which
parameters and config, rebuilds each measured row.

Every workload module here has ``POINTS`` (row id -> parameters), ``CONFIG`` (preset),
optionally ``CONFIG_OVERRIDES``, ``POINT_CONFIGS`` (row -> preset) and
``POINT_OVERRIDES`` (row -> dotted overrides), and ``TEST_CONFIG`` (preset for a quick
run at the default parameters; optionally ``TEST_OVERRIDES``, dotted overrides of it,
e.g. ``{"num_ipus": 2}`` for a workload that needs two IPUs). ``T7.*`` ids name the two
summary ``.txt`` files.

A row is simulated with the software its measurement names: where the CSV's ``sdk``
column names a Poplibs commit whose planning ipusim models (``Poplibs f927358 (...)``,
or a commit that plans as a modelled release, ``poplibs_release.PLANS_AS``), the row's
config sets ``software.poplibs_release`` to that release (:func:`software_overrides`);
other rows keep the config's default release.

Run ``python examples/calibration/points.py [CSV]`` to list the CSV rows no workload
covers.
"""

from __future__ import annotations

import csv
import functools
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

from ipusim.config import MachineConfig, load_config
from poplar_api.poplin.poplibs_release import planning_release_of

HERE = Path(__file__).resolve().parent
DEFAULT_CSV = HERE.parents[1] / "tests" / "data" / "calibration" / "measurements.csv"
#: Ids backed by the summary text files rather than CSV rows.
TXT_POINTS = {
    "T7.ipumodel": "tut7_10000x1000_mk2_ipumodel_sdk2.txt",
    "T7.hardware": "tut7_10000x1000_mk2_hardware.txt",
}


class Point(NamedTuple):
    """One measured row and how to rebuild it."""

    row: str
    workload: str
    params: dict[str, Any]

    def config(self) -> MachineConfig:
        """The machine config the row's workload runs on."""
        return point_config(self.workload, self.row)


def workload_files() -> list[Path]:
    """The workload files of this directory (every ``*.py`` but helpers)."""
    tools = {"points", "make_presets", "report"}
    return sorted(
        p for p in HERE.glob("*.py") if not p.name.startswith("_") and p.stem not in tools
    )


def load(path: Path) -> ModuleType:
    """Import a workload file (once)."""
    name = f"_calibration_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


#: A Poplibs commit named in the ``sdk`` column ("Poplibs f927358 (2021-03-10; ...)").
_POPLIBS_COMMIT = re.compile(r"\bPoplibs ([0-9a-f]{7,40})\b")


@functools.lru_cache(maxsize=4)
def _sdk_column(csv_path: str) -> dict[str, str]:
    with open(csv_path, newline="", encoding="utf-8") as f:
        return {r["id"]: r["sdk"] for r in csv.DictReader(f)}


def poplibs_release_of(sdk: str) -> str | None:
    """The modelled Poplibs release an ``sdk`` text names: the first named commit that
    is a release of ``ipusim.config_software.POPLIBS_RELEASES`` or plans as one
    (``poplar_api.poplin.poplibs_release.planning_release_of``); None when it names no
    Poplibs commit or only ones whose planning is not modelled."""
    for commit in _POPLIBS_COMMIT.findall(sdk):
        release = planning_release_of(commit)
        if release is not None:
            return release
    return None


def software_overrides(row: str | None, csv_path: Path | str = DEFAULT_CSV) -> dict[str, str]:
    """``{"software.poplibs_release": release}`` when the row ``row`` of the CSV at
    ``csv_path`` was measured with a Poplibs release ipusim models (its ``sdk`` column),
    ``{}`` otherwise (also for a row that CSV does not have)."""
    release = poplibs_release_of(_sdk_column(str(csv_path)).get(row or "", ""))
    return {} if release is None else {"software.poplibs_release": release}


def point_config(
    workload: str, row: str | None = None, csv_path: Path | str = DEFAULT_CSV
) -> MachineConfig:
    """Config of ``workload`` (a file path) for ``row`` (its default when None), with
    the Poplibs release the row's measurement in ``csv_path`` names
    (:func:`software_overrides`)."""
    m = load(Path(workload))
    preset = getattr(m, "POINT_CONFIGS", {}).get(row, m.CONFIG)
    overrides = {
        **software_overrides(row, csv_path),
        **getattr(m, "CONFIG_OVERRIDES", {}),
        **getattr(m, "POINT_OVERRIDES", {}).get(row, {}),
    }
    return load_config(preset, overrides=overrides)


def all_points() -> dict[str, tuple[str, dict[str, Any]]]:
    """Row id -> (workload file, params) over every workload's POINTS."""
    out: dict[str, tuple[str, dict[str, Any]]] = {}
    for path in workload_files():
        for row, params in load(path).POINTS.items():
            if row in out:
                raise ValueError(f"row {row!r} is in POINTS of both {out[row][0]} and {path}")
            out[row] = (str(path), dict(params))
    return out


def csv_ids(csv_path: Path | str = DEFAULT_CSV) -> list[str]:
    """Row ids of the calibration CSV, in file order."""
    with open(csv_path, newline="", encoding="utf-8") as f:
        return [r["id"] for r in csv.DictReader(f)]


def iter_points(csv_path: Path | str = DEFAULT_CSV) -> list[Point]:
    """The CSV rows some workload rebuilds, in CSV order, then the T7 summaries."""
    points = all_points()
    rows = [r for r in csv_ids(csv_path) if r in points] + [r for r in TXT_POINTS if r in points]
    return [Point(r, *points[r]) for r in rows]


def uncovered(csv_path: Path | str = DEFAULT_CSV) -> list[str]:
    """CSV row ids that no workload's POINTS covers."""
    points = all_points()
    return [r for r in csv_ids(csv_path) if r not in points]


def main(argv: list[str] | None = None) -> int:
    """Print covered and uncovered counts per source, then the uncovered ids."""
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0]) if args else DEFAULT_CSV
    missing = uncovered(path)
    print(f"{len(iter_points(path))} points rebuilt; {len(missing)} CSV rows not covered:")
    for row in missing:
        print(f"  {row}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
