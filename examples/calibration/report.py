"""Residuals of every calibration source, uncalibrated versus calibrated presets.

For every source of the calibration data, each workload is run once per distinct
parameter set (``ipusim.runner.run_workload``) on the row's config built from the
**calibrated** presets (``configs/``), then re-timed (``RunResult.retime``) on the same
config built from the **uncalibrated** presets, the copies of the presets before the
hardware fit kept in ``examples/calibration/baseline/`` (taken from git ``HEAD`` when
the fit was made). Each row's metric is compared with the CSV value; the T7 summaries
are compared phase by phase with ``ipusim.compare.compare``. One table is printed:
source, rows covered, MAE (mean absolute relative error, %) uncalibrated and
calibrated, and the worst row.

Run from the repository root::

    .venv/bin/python examples/calibration/report.py [--sources B,C] [--quick] [--csv OUT]

``--quick`` skips the big points (:data:`BIG_ROWS`). Rows whose measured value is 0
are listed but left out of the MAE (no relative error).
"""

from __future__ import annotations

import argparse
import csv
import fnmatch
import functools
import inspect
import math
import sys
import types
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import points  # noqa: E402

from ipusim.compare import compare  # noqa: E402
from ipusim.config import MachineConfig, load_config  # noqa: E402
from ipusim.measured import measured_from_trace, read_profile  # noqa: E402
from ipusim.runner import run_workload  # noqa: E402
from ipusim.trace import Trace  # noqa: E402

CSV_PATH = ROOT / "tests" / "data" / "calibration" / "measurements.csv"
TXT_DIR = ROOT / "tests" / "data" / "calibration"
BASELINE_DIR = HERE / "baseline"
#: Points skipped by ``--quick`` (minutes of host time each).
BIG_ROWS = ("T7.*", "F1.*", "H1.*", "J-*", "D1.n2917776", "PF.N1024", "PF.N2048")
#: The IPU Model settings tutorial 7 ran with.
T7_DEVICE = {"sync.min_sync_delay_cycles": 0, "sync.relative_delay": "none"}
#: Row -> (preset, overrides) replacing the workload's own config: the IPU Model summary
#: is compared with the IPU Model preset, the hardware summary with the hardware one.
ROW_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "T7.ipumodel": ("mk2-ipumodel", T7_DEVICE),
    "T7.hardware": ("mk2", {}),
}
#: T7 phases compared (those both summaries print).
T7_PHASES = ("total", "compute", "internal_exchange", "host_exchange", "sync")
#: Sources whose CSV values are bounds or tolerances, not measured cycles (L: the 3 %
#: tolerance of the estimator test); left out of the report.
BOUND_SOURCES = {"L"}
_CAPTURE = "_ipusim_report_capture"


@dataclass
class RowResult:
    """One compared number: a CSV row's metric or a phase of a T7 summary."""

    source: str
    row: str
    metric: str
    measured: float
    uncalibrated: float
    calibrated: float

    def rel(self, which: str) -> float:
        """Relative error of ``which`` (``uncalibrated``/``calibrated``), NaN if measured is 0."""
        if self.measured == 0:
            return math.nan
        return (getattr(self, which) - self.measured) / self.measured


# ----------------------------------------------------------------------- configs
def preset_config(
    preset: str, overrides: dict[str, Any], calibrated: bool, baseline_dir: Path = BASELINE_DIR
) -> MachineConfig:
    """``preset`` with ``overrides``, from ``configs/`` or from the baseline copies.

    A preset without a baseline copy (``tiny``, a path) is the same in both.
    """
    copy = baseline_dir / f"{preset}.yaml"
    source: str | Path = preset if calibrated or not copy.is_file() else copy
    return load_config(source, overrides=overrides)


def row_config(
    workload: str,
    row: str,
    calibrated: bool,
    baseline_dir: Path = BASELINE_DIR,
    csv_path: Path = CSV_PATH,
) -> MachineConfig:
    """The config ``row`` is simulated on (see :data:`ROW_CONFIGS`, ``points.point_config``:
    the Poplibs release the row's measurement in ``csv_path`` names, the workload's preset
    and overrides)."""
    if row in ROW_CONFIGS:
        preset, overrides = ROW_CONFIGS[row]
    else:
        m = points.load(Path(workload))
        preset = getattr(m, "POINT_CONFIGS", {}).get(row, m.CONFIG)
        overrides = {
            **points.software_overrides(row, csv_path),
            **getattr(m, "CONFIG_OVERRIDES", {}),
            **getattr(m, "POINT_OVERRIDES", {}).get(row, {}),
        }
    return preset_config(preset, overrides, calibrated, baseline_dir)


# ---------------------------------------------------------------------- running
def _capturing_spec(workload: str, params: dict[str, Any], sink: list) -> str:
    """A module spec whose ``workload`` builds ``workload`` and keeps its metrics function.

    ``RunResult`` keeps no metrics function, and a re-timed trace needs one; the wrapper
    has the real function's signature, so ``run_workload`` checks parameters as usual.
    """
    from poplar_api.workload import load_workload

    fn = load_workload(workload)

    @functools.wraps(fn)
    def wrapper(device, **kwargs):
        built = fn(device, **kwargs)
        sink.append(built.metrics)
        return built

    wrapper.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    module = types.ModuleType(_CAPTURE)
    module.workload = wrapper  # type: ignore[attr-defined]
    sys.modules[_CAPTURE] = module
    return f"{_CAPTURE}:workload"


def run_group(
    workload: str, params: dict[str, Any], configs: Sequence[MachineConfig]
) -> tuple[list[Trace], Callable[[Any, Trace], dict[str, float]] | None]:
    """Run ``workload`` once on ``configs[0]``, re-time it on every config.

    Returns the traces (one per config) and the workload's metrics function.
    """
    sink: list = []
    spec = _capturing_spec(workload, params, sink)
    result = run_workload(spec, configs[0], params)
    if result.ok is False:
        raise RuntimeError(f"report: workload {workload} {params}: its check failed")
    runs = [result.traces if i == 0 else result.retime_all(c) for i, c in enumerate(configs)]
    fn = sink[-1] if sink else None
    if fn is None:
        return [r[-1] for r in runs], None
    # a workload's metrics may read every run of its engine (``engine.getTraces()``, as
    # the fully-connected tool's forward and backward runs): each config's metrics are
    # given that config's re-timed runs
    by_trace = {id(r[-1]): _RetimedRuns(r) for r in runs}
    return [r[-1] for r in runs], lambda _engine, t: fn(by_trace[id(t)], t)


@dataclass(frozen=True)
class _RetimedRuns:
    """What a workload's ``metrics`` reads of its engine, for a re-timed result: the
    trace of every run, in order (``Engine.getTraces``)."""

    traces: list[Trace]

    def getTraces(self) -> list[Trace]:
        return list(self.traces)


def _metric_value(metrics: dict[str, float], key: str, row: str) -> float:
    if key not in metrics:
        raise KeyError(
            f"report: row {row!r} needs metric {key!r}; the workload returned "
            f"{sorted(metrics)}; hint: add the row to POINT_METRICS of its workload"
        )
    return metrics[key]


def source_of(row: str, csv_rows: dict[str, dict[str, str]]) -> str:
    """Source key of a row: the CSV ``source`` up to its first ``-`` (``T7`` for summaries)."""
    if row in points.TXT_POINTS:
        return "T7"
    return csv_rows[row]["source"].split("-")[0]


def check_sources(
    wanted: set[str], every: list[points.Point], csv_rows: dict[str, dict[str, str]]
) -> None:
    """Refuse source keys that no covered row has, before anything runs.

    A key such as ``N2`` names rows (``N2.ipu2_ipu3``) of source ``N``, not a source:
    taken silently, it would run nothing for it and report the other keys as if it had
    been covered.

    Raises
    ------
    ValueError
        Naming each unknown key, the keys there are, and the source a key's rows belong
        to where it is the start of row names.
    """
    known = {source_of(p.row, csv_rows).upper() for p in every}
    unknown = sorted(wanted - known)
    if not unknown:
        return
    hints = []
    for key in unknown:
        owners = sorted(
            {source_of(p.row, csv_rows) for p in every if p.row.upper().startswith(key)}
        )
        if owners:
            hints.append(f"rows {key}.* belong to source {', '.join(owners)}")
    raise ValueError(
        f"--sources: unknown source key(s) {', '.join(unknown)}; the keys are "
        f"{', '.join(sorted(known))}" + (f" ({'; '.join(hints)})" if hints else "")
    )


#: The row giving the cycles one ``ipu_cycle_count`` adds to a bracketed interval.
COUNTER_ROW = "C1.overhead"


def collect(
    sources: Iterable[str] | None = None,
    quick: bool = False,
    csv_path: Path = CSV_PATH,
    baseline_dir: Path = BASELINE_DIR,
    progress: Callable[[str], None] | None = None,
) -> list[RowResult]:
    """Every covered row of the chosen sources, simulated uncalibrated and calibrated."""
    with open(csv_path, newline="", encoding="utf-8") as f:
        csv_rows = {r["id"]: r for r in csv.DictReader(f)}
    wanted = None if sources is None else {s.upper() for s in sources}
    every = list(points.iter_points(csv_path))
    if wanted is not None:
        check_sources(wanted, every, csv_rows)
    todo = [
        p
        for p in every
        if source_of(p.row, csv_rows) not in BOUND_SOURCES
        and (wanted is None or source_of(p.row, csv_rows).upper() in wanted)
        and not (quick and any(fnmatch.fnmatch(p.row, g) for g in BIG_ROWS))
    ]
    groups: dict[tuple[str, str, int, int, str], list[points.Point]] = {}
    for p in todo:  # params may hold lists: group by their repr; one machine shape a group,
        # and one Poplibs release (the graph is planned, and compiled, once per group)
        cfg = row_config(p.workload, p.row, True, baseline_dir, csv_path)
        key = (p.workload, repr(sorted(p.params.items())), cfg.num_ipus, cfg.tile.tiles_per_ipu,
               cfg.software.poplibs_release)  # fmt: skip
        groups.setdefault(key, []).append(p)
    out: list[RowResult] = []
    for (workload, *_), pts in groups.items():
        params = dict(pts[0].params)
        configs: list[MachineConfig] = []
        index: dict[tuple[str, bool], int] = {}
        for p in pts:
            for calibrated in (True, False):
                cfg = row_config(workload, p.row, calibrated, baseline_dir, csv_path)
                key = cfg.model_dump_json()
                if key not in index:
                    index[key] = len(configs)
                    configs.append(cfg)
                index[(p.row, calibrated)] = index[key]
        # The graph is compiled on the first config; every config of a group has one shape.
        if progress:
            progress(f"{Path(workload).stem} {params} ({len(pts)} rows, {len(configs)} configs)")
        traces, metrics_fn = run_group(workload, params, configs)
        module = points.load(Path(workload))
        for p in pts:
            cal = traces[index[(p.row, True)]]
            unc = traces[index[(p.row, False)]]
            if p.row in points.TXT_POINTS:
                out += _t7_rows(p.row, unc, cal)
                continue
            metric = getattr(module, "POINT_METRICS", {}).get(p.row, csv_rows[p.row]["metric"])
            values = [_metric_value(metrics_fn(None, t), metric, p.row) for t in (unc, cal)]
            measured = float(csv_rows[p.row]["value"])
            # the measured interval holds the workload's counter reads (C1), which the
            # simulated steps do not: in cycles, or in microseconds at the tile clock
            reads = getattr(module, "COUNTER_READS_IN_INTERVAL", 0)
            counter = reads * float(csv_rows[COUNTER_ROW]["value"])
            if csv_rows[p.row]["unit"] == "cycles":
                measured -= counter
            elif csv_rows[p.row]["unit"] == "us" and counter:
                measured -= counter / cal.clock_hz * 1e6
            out.append(RowResult(source_of(p.row, csv_rows), p.row, metric, measured, *values))
            if progress:
                r = out[-1]
                progress(f"  {r.row}: measured {r.measured:g}, uncalibrated {r.uncalibrated:g}, "
                         f"calibrated {r.calibrated:g}")  # fmt: skip
    return out


def _t7_rows(row: str, uncalibrated: Trace, calibrated: Trace) -> list[RowResult]:
    """Phase rows of one T7 summary (``ipusim.compare.compare``)."""
    measured = read_profile(TXT_DIR / points.TXT_POINTS[row])
    tables = [
        compare(measured, measured_from_trace(t), phases=T7_PHASES).rows
        for t in (uncalibrated, calibrated)
    ]
    unc, cal = (t[t["level"] == "phase"].set_index("name") for t in tables)
    return [
        RowResult("T7", f"{row}:{name}", name, float(unc.at[name, "measured"]),
                  float(unc.at[name, "simulated"]), float(cal.at[name, "simulated"]))
        for name in unc.index
    ]  # fmt: skip


# ---------------------------------------------------------------------- summary
def mae(rows: Iterable[RowResult], which: str) -> float:
    """Mean absolute relative error (fraction) over rows with a measured value != 0."""
    errs = [abs(r.rel(which)) for r in rows if not math.isnan(r.rel(which))]
    return sum(errs) / len(errs) if errs else math.nan


def summarise(results: list[RowResult]) -> list[dict[str, Any]]:
    """One line per source: rows, MAE uncalibrated and calibrated (%), worst row."""
    lines = []
    for source in dict.fromkeys(r.source for r in results):
        rows = [r for r in results if r.source == source]
        scored = [r for r in rows if r.measured != 0]
        worst = max(scored, key=lambda r: abs(r.rel("calibrated")), default=None)
        lines.append(
            {
                "source": source,
                "rows": len(rows),
                "mae_uncalibrated_pct": 100 * mae(rows, "uncalibrated"),
                "mae_calibrated_pct": 100 * mae(rows, "calibrated"),
                "worst_row": worst.row if worst else "",
                "worst_rel_pct": 100 * worst.rel("calibrated") if worst else math.nan,
            }
        )
    return lines


def table(results: list[RowResult]) -> str:
    """The per-source table as text."""
    head = f"{'source':<7} {'rows':>4} {'MAE uncal':>10} {'MAE cal':>9}  worst row (calibrated)"
    out = [head]
    for s in summarise(results):
        out.append(
            f"{s['source']:<7} {s['rows']:>4} {s['mae_uncalibrated_pct']:>9.1f}% "
            f"{s['mae_calibrated_pct']:>8.1f}%  {s['worst_row']} {s['worst_rel_pct']:+.1f}%"
        )
    return "\n".join(out)


def write_csv(results: list[RowResult], path: Path) -> None:
    """One line per compared number, with both relative errors."""
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["source", "row", "metric", "measured", "uncalibrated", "calibrated",
                    "rel_uncalibrated", "rel_calibrated"])  # fmt: skip
        for r in results:
            w.writerow([r.source, r.row, r.metric, r.measured, r.uncalibrated, r.calibrated,
                        r.rel("uncalibrated"), r.rel("calibrated")])  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sources", help="comma-separated source keys, e.g. B,C,T7 (all)")
    parser.add_argument("--quick", action="store_true", help=f"skip {', '.join(BIG_ROWS)}")
    parser.add_argument("--csv", metavar="OUT", help="write every compared row to OUT")
    parser.add_argument("--baseline", metavar="DIR", default=str(BASELINE_DIR),
                        help="directory of the uncalibrated presets")  # fmt: skip
    args = parser.parse_args(argv)
    sources = [s.strip() for s in args.sources.split(",")] if args.sources else None
    try:
        results = collect(sources, args.quick, baseline_dir=Path(args.baseline),
                          progress=lambda m: print(f"running {m}", file=sys.stderr))  # fmt: skip
    except ValueError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    if not results:
        print(f"report: no covered rows for sources {args.sources!r}", file=sys.stderr)
        return 2
    print(table(results))
    if args.csv:
        write_csv(results, Path(args.csv))
        print(f"wrote {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
