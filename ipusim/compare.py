"""Compare a measured profile with a simulated one: per phase, per step and per metric.

Both sides are :class:`~ipusim.measured.MeasuredProfile` objects (see
:mod:`ipusim.measured` for the formats read and how phases are normalised to tile
averages), so any pair can be compared: IPU Model vs hardware, hardware vs an ipusim run,
two ipusim configs.

Rows and errors
---------------
One row per compared quantity, with ``level`` ``phase``, ``step`` or ``metric``:

* phases: the phases of :data:`~ipusim.measured.PHASES` that *both* sides have;
* steps (only when both sides list steps): steps are aligned by (name, type); a name run
  several times (a compute set in a loop) is summed per side first, so a row holds the
  total cycles of that step over the run. Steps found on one side only are listed as not
  compared;
* metrics: by name. A measured metric ``m[id]`` (several calibration rows with the same
  metric, see :func:`~ipusim.measured.profile_from_points`) is compared with the simulated
  metric ``m``; a simulated run's ``total`` phase also answers the metric ``total_cycles``.

``abs_error = simulated - measured`` (signed, in the row's unit) and ``rel_error =
(simulated - measured) / measured`` (signed; NaN when measured is 0). MAPE is the mean of
``|rel_error|`` over the rows whose measured value is not 0.

The ``ipusim compare`` command is registered here (:func:`register`).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ipusim.errors import IpusimError
from ipusim.measured import PHASES, MeasuredProfile
from ipusim.sweep.cli import positive_int, whole_number

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "LEVELS",
    "CompareError",
    "Comparison",
    "compare",
    "compare_many",
    "register",
]

#: Levels of comparison rows, in table order.
LEVELS = ("phase", "step", "metric")
#: Columns of :attr:`Comparison.rows`.
COLUMNS = ("level", "name", "measured", "simulated", "abs_error", "rel_error")
#: Suffixes of profile files (a RUN with one of them is never taken for a workload).
_PROFILE_SUFFIXES = (".txt", ".json", ".cbor", ".csv", ".log")


class CompareError(IpusimError, ValueError):
    """Two profiles cannot be compared (different targets, unknown phase, nothing in
    common) or a side of ``ipusim compare`` cannot be loaded."""


def _frame(level: str, name: Any, measured: Any, simulated: Any) -> pd.DataFrame:
    import numpy as np
    import pandas as pd

    meas = np.asarray(measured, dtype=float)
    sim = np.asarray(simulated, dtype=float)
    diff = sim - meas
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(meas != 0, diff / np.where(meas != 0, meas, 1.0), np.nan)
    return pd.DataFrame(
        {
            "level": pd.Series([level] * len(meas), dtype=object),
            "name": pd.Series(list(name), dtype=object),
            "measured": meas,
            "simulated": sim,
            "abs_error": diff,
            "rel_error": rel,
        }
    )


def _steps_frame(profile: MeasuredProfile) -> pd.DataFrame:
    """Steps summed per ``"name [type]"`` key, in order of first appearance."""
    import pandas as pd

    steps = profile.steps
    frame = pd.DataFrame(
        {
            "type": [s.type for s in steps],
            "name": [s.name for s in steps],
            "cycles": [s.cycles for s in steps],
        }
    )
    frame["key"] = frame["name"] + " [" + frame["type"] + "]"
    return frame.groupby("key", sort=False, as_index=False)["cycles"].sum()


@dataclass
class Comparison:
    """The result of :func:`compare`.

    Attributes
    ----------
    measured, simulated
        The two profiles.
    rows
        One row per compared quantity: columns ``level``, ``name``, ``measured``,
        ``simulated``, ``abs_error`` (simulated - measured) and ``rel_error``
        ((simulated - measured) / measured, NaN when measured is 0).
    unmatched
        Level -> (names on the measured side only, names on the simulated side only).
    """

    measured: MeasuredProfile
    simulated: MeasuredProfile
    rows: pd.DataFrame
    unmatched: dict[str, tuple[list[str], list[str]]] = field(default_factory=dict)

    @property
    def mape(self) -> dict[str, float]:
        """Mean |rel_error| (a fraction) per level and over ``"all"`` rows, counting only
        rows whose measured value is not 0; levels without such rows are left out."""
        rows = self.rows[self.rows["measured"] != 0]
        out = {
            str(level): float(err.abs().mean())
            for level, err in rows.groupby("level", sort=False)["rel_error"]
        }
        out = {lv: out[lv] for lv in LEVELS if lv in out}
        if len(rows):
            out["all"] = float(rows["rel_error"].abs().mean())
        return out

    @property
    def worst_rel_error(self) -> float:
        """The signed rel_error of largest magnitude (NaN when no row has one)."""
        rel = self.rows["rel_error"].dropna()
        if rel.empty:
            return math.nan
        return float(rel.loc[rel.abs().idxmax()])

    def failures(self, percent: float) -> pd.DataFrame:
        """The rows whose |rel_error| exceeds ``percent`` per cent."""
        return self.rows[self.rows["rel_error"].abs() * 100.0 > percent]

    def table(self, max_steps: int | None = 20) -> str:
        """The comparison as an aligned text table (thousands separators, errors in %).

        Parameters
        ----------
        max_steps
            Show at most this many step rows, those of largest |abs_error| (in run
            order); None shows every step.
        """
        rows = self.rows
        hidden = 0
        if max_steps is not None:
            steps = rows[rows["level"] == "step"]
            if len(steps) > max_steps:
                keep = steps["abs_error"].abs().nlargest(max_steps).index
                hidden = len(steps) - max_steps
                rows = rows[(rows["level"] != "step") | rows.index.isin(keep)]
        head = ("level", "name", "measured", "simulated", "abs error", "rel error")
        body = [
            (
                lv,
                name,
                _fmt(m),
                _fmt(s),
                _fmt(d, sign=True),
                "-" if math.isnan(r) else f"{r:+,.1%}",
            )
            for lv, name, m, s, d, r in rows[list(COLUMNS)].itertuples(index=False)
        ]
        widths = [max(len(r[i]) for r in [head, *body]) for i in range(len(head))]
        widths[1] = min(widths[1], 60)

        def line(cells: Sequence[str]) -> str:
            name = cells[1] if len(cells[1]) <= widths[1] else cells[1][: widths[1] - 1] + "~"
            return (
                f"{cells[0]:<{widths[0]}}  {name:<{widths[1]}}  "
                + "  ".join(f"{c:>{w}}" for c, w in zip(cells[2:], widths[2:], strict=True))
            ).rstrip()

        out = [
            f"measured:  {self.measured.describe()}",
            f"simulated: {self.simulated.describe()}",
            line(head),
            *(line(r) for r in body),
        ]
        if hidden:
            out.append(f"... {hidden:,} more step rows (smaller |abs error|; write all with --csv)")
        mape = self.mape
        if mape:
            counts = self.rows[self.rows["measured"] != 0].groupby("level")["name"].count()
            parts = [
                f"{lv} {v:,.1%} ({int(counts.get(lv, 0)) if lv != 'all' else sum(counts)} rows)"
                for lv, v in mape.items()
            ]
            if len(parts) == 2:  # one level: "all" says the same
                parts = parts[:1]
            out.append("MAPE: " + "; ".join(parts))
            worst = self.rows.loc[self.rows["rel_error"].abs().idxmax()]
            out.append(f"worst: {worst['level']} {worst['name']} {worst['rel_error']:+,.1%}")
        for level, (meas_only, sim_only) in self.unmatched.items():
            if meas_only or sim_only:  # only levels both sides have (see compare)
                out.append(
                    f"not compared ({level}s on one side only): measured {_names(meas_only)}; "
                    f"simulated {_names(sim_only)}"
                )
        if (
            self.measured.clock_hz
            and self.simulated.clock_hz
            and abs(self.measured.clock_hz / self.simulated.clock_hz - 1) > 0.01
        ):
            out.append(
                f"note: the clocks differ ({self.measured.clock_hz / 1e9:.3g} vs "
                f"{self.simulated.clock_hz / 1e9:.3g} GHz); cycles are compared as they are"
            )
        return "\n".join(out)

    def plot(
        self,
        ax: Axes | None = None,
        path: str | PathLike[str] | None = None,
        max_rows: int = 40,
    ) -> Figure:
        """Measured and simulated values side by side, one pair of bars per row.

        A log scale is used, since phases differ by orders of magnitude. matplotlib is
        imported only here.

        Parameters
        ----------
        ax
            Draw into this Axes; default a new Figure (made without pyplot).
        path
            Save the figure there (format by suffix: .png, .svg, .pdf).
        max_rows
            Plot at most this many rows (phases and metrics first, then steps).
        """
        import numpy as np

        if ax is None:
            from matplotlib.figure import Figure

            fig = Figure(
                figsize=(9.0, max(3.0, 0.3 * min(len(self.rows), max_rows) + 1.5)),
                layout="constrained",
            )
            ax = fig.add_subplot()
        else:
            fig = ax.figure
        rows = self.rows.sort_values(
            "level", key=lambda s: s.map({"phase": 0, "metric": 1, "step": 2}), kind="stable"
        ).head(max_rows)
        y = np.arange(len(rows))
        labels = [f"{lv}: {n}" for lv, n in zip(rows["level"], rows["name"], strict=True)]
        ax.barh(y - 0.2, rows["measured"].clip(lower=0), 0.4, label="measured")
        ax.barh(y + 0.2, rows["simulated"].clip(lower=0), 0.4, label="simulated")
        ax.set_yticks(y, labels, fontsize=8)
        ax.invert_yaxis()
        if (rows[["measured", "simulated"]] > 0).any().any():
            ax.set_xscale("log")
        ax.set_xlabel("cycles (phases: total, or tile average)")
        from ipusim.plot import outside_legend

        outside_legend(ax)  # beside the axes: a long bar may reach any corner
        ax.set_title(f"MAPE {self.mape.get('all', math.nan):.1%}")
        if fig.get_layout_engine() is None:
            fig.tight_layout()
        if path is not None:
            suffix = Path(path).suffix.lower()
            if suffix not in (".png", ".svg", ".pdf"):
                raise CompareError(
                    f"--plot {str(path)!r}: suffix {suffix!r} is not supported; required "
                    ".png, .svg or .pdf"
                )
            from ipusim.files import save_figure

            save_figure(fig, path, what="--plot")
        return fig


def _fmt(value: float, sign: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    plus = "+" if sign else ""
    if value == int(value) and abs(value) < 1e15:
        return f"{value:{plus},.0f}"
    if abs(value) >= 100:
        return f"{value:{plus},.1f}"
    return f"{value:{plus}.4g}"


def _names(names: list[str], limit: int = 6) -> str:
    if not names:
        return "-"
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def _subset(given: Iterable[str] | None, allowed: Sequence[str], what: str) -> list[str]:
    """The names of ``given`` (stripped, blanks dropped), or every one of ``allowed``
    when None; a name not in ``allowed`` is a CompareError naming it."""
    names = list(allowed) if given is None else [n.strip() for n in given if n.strip()]
    bad = [n for n in names if n not in allowed]
    if bad:
        raise CompareError(
            f"unknown {what}(s) {', '.join(map(repr, bad))}; required a subset of "
            f"{', '.join(allowed)}"
        )
    return names


def compare(
    measured: MeasuredProfile,
    simulated: MeasuredProfile,
    *,
    phases: Iterable[str] | None = None,
    levels: Iterable[str] | None = None,
) -> Comparison:
    """Compare ``simulated`` against ``measured``, phase by phase, step by step, metric by
    metric.

    Steps are aligned by (name, type) after summing repeated names per side (a compute
    set executed in a loop gives one row with the total of its executions); steps on one
    side only are listed in :attr:`Comparison.unmatched`. Metrics are matched by name
    (``m[id]`` measured rows against the simulated ``m``; ``total_cycles`` against the
    simulated ``total`` phase when the simulated side has no such metric).

    Parameters
    ----------
    measured, simulated
        The two profiles (phases as tile averages, see :mod:`ipusim.measured`).
    phases
        Compare only these phases (default every phase of :data:`PHASES` both sides have).
    levels
        Compare only these levels of ``phase``, ``step``, ``metric`` (default all).

    Returns
    -------
    Comparison

    Raises
    ------
    CompareError
        The two targets have different tile counts, an unknown phase or level is asked
        for, or the profiles have nothing in common.
    """
    import pandas as pd

    if measured.num_tiles and simulated.num_tiles and measured.num_tiles != simulated.num_tiles:
        raise CompareError(
            f"different targets: the measured profile {measured.source} says "
            f"{measured.num_tiles:,} tiles and the simulated side {simulated.source} "
            f"{simulated.num_tiles:,}; tile averages of different machines do not compare "
            "(hint: simulate with a config of the same tile count, e.g. --config mk1 for "
            "1,216 tiles)"
        )
    wanted = _subset(phases, PHASES, "phase")
    use = _subset(levels, LEVELS, "level")
    frames = []
    unmatched: dict[str, tuple[list[str], list[str]]] = {}

    if "phase" in use:
        both = [p for p in PHASES if p in wanted and p in measured.phases and p in simulated.phases]
        frames.append(
            _frame(
                "phase",
                both,
                [measured.phases[p] for p in both],
                [simulated.phases[p] for p in both],
            )
        )
        if measured.phases and simulated.phases:
            unmatched["phase"] = (
                [p for p in PHASES if p in wanted and p in measured.phases and p not in both],
                [p for p in PHASES if p in wanted and p in simulated.phases and p not in both],
            )

    if "step" in use and measured.steps and simulated.steps:
        meas = _steps_frame(measured)
        sim = _steps_frame(simulated)
        in_sim = meas["key"].isin(sim["key"])
        in_meas = sim["key"].isin(meas["key"])
        matched = meas[in_sim].merge(sim[in_meas], on="key", suffixes=("_m", "_s"), sort=False)
        frames.append(_frame("step", matched["key"], matched["cycles_m"], matched["cycles_s"]))
        unmatched["step"] = (list(meas.loc[~in_sim, "key"]), list(sim.loc[~in_meas, "key"]))

    if "metric" in use and measured.metrics:
        sim_metrics = dict(simulated.metrics)
        if "total" in simulated.phases:
            sim_metrics.setdefault("total_cycles", simulated.phases["total"])
        names = list(measured.metrics)
        keys = [n.split("[", 1)[0] if n.endswith("]") else n for n in names]
        hit = [k in sim_metrics for k in keys]
        frames.append(
            _frame(
                "metric",
                [n for n, h in zip(names, hit, strict=True) if h],
                [measured.metrics[n] for n, h in zip(names, hit, strict=True) if h],
                [sim_metrics[k] for k, h in zip(keys, hit, strict=True) if h],
            )
        )
        used = {k for k, h in zip(keys, hit, strict=True) if h}
        if simulated.metrics:
            unmatched["metric"] = (
                [n for n, h in zip(names, hit, strict=True) if not h],
                [k for k in simulated.metrics if k not in used],
            )

    rows = pd.concat(frames, ignore_index=True) if frames else _frame("phase", [], [], [])
    if rows.empty:
        raise CompareError(
            f"nothing to compare: {measured.source} has phases "
            f"{_names(list(measured.phases))}, metrics {_names(list(measured.metrics))} and "
            f"{len(measured.steps):,} steps; {simulated.source} has phases "
            f"{_names(list(simulated.phases))}, metrics {_names(list(simulated.metrics))} and "
            f"{len(simulated.steps):,} steps (asked for phases {', '.join(wanted)}; levels "
            f"{', '.join(use)}); hint: compare profiles that share a phase, step or metric"
        )
    return Comparison(measured, simulated, rows, unmatched)


def compare_many(
    pairs: Iterable[tuple[MeasuredProfile, MeasuredProfile] | tuple[str, Any, Any]],
    *,
    phases: Iterable[str] | None = None,
    levels: Iterable[str] | None = None,
) -> tuple[pd.DataFrame, float]:
    """Compare several (measured, simulated) pairs and pool their rows.

    Parameters
    ----------
    pairs
        ``(measured, simulated)`` or ``(label, measured, simulated)``; the label defaults
        to the measured source.
    phases, levels
        As for :func:`compare`.

    Returns
    -------
    (pandas.DataFrame, float)
        The rows of every comparison with a first column ``pair`` (the label), and the
        overall MAPE (fraction) over all rows whose measured value is not 0 (NaN if none).
    """
    import pandas as pd

    phases = None if phases is None else list(phases)
    levels = None if levels is None else list(levels)
    frames = []
    for pair in pairs:
        if len(pair) == 3:
            label, meas, sim = pair  # type: ignore[misc]
        else:
            meas, sim = pair  # type: ignore[misc]
            label = meas.source
        rows = compare(meas, sim, phases=phases, levels=levels).rows
        frames.append(rows.assign(pair=str(label))[["pair", *COLUMNS]])
    if not frames:
        return pd.DataFrame(columns=["pair", *COLUMNS]), math.nan
    pooled = pd.concat(frames, ignore_index=True)
    rel = pooled.loc[pooled["measured"] != 0, "rel_error"]
    return pooled, float(rel.abs().mean()) if len(rel) else math.nan


# ------------------------------------------------------------------------------------ CLI
def _split(items: list[str] | None) -> list[str]:
    return [p.strip() for item in items or [] for p in item.split(",") if p.strip()]


def _looks_like_workload(spec: str) -> bool:
    """True when RUN names a workload (``file.py[:func]`` or ``module[:func]``)."""
    path = Path(spec)
    if path.is_file():
        return path.suffix == ".py"
    if path.exists():
        return False  # a directory: a profile directory
    target = spec.rsplit(":", 1)[0] if ":" in spec else spec
    if target.endswith(".py"):
        return True
    return Path(target).suffix.lower() not in _PROFILE_SUFFIXES and "/" not in target


def _load_profile(text: str, args: argparse.Namespace, role: str) -> MeasuredProfile:
    from ipusim.measured import profile_from_points, read_measurements_csv, read_profile

    if text.lower().endswith(".csv") and Path(text).is_file():
        ids = _split(args.ids) if role == "MEASURED" else []
        return profile_from_points(read_measurements_csv(text), ids or None, source=text)
    return read_profile(text, num_tiles=args.tiles)


def _run_workload(spec: str, args: argparse.Namespace) -> MeasuredProfile:
    try:
        from ipusim import runner
    except ImportError as exc:
        raise CompareError(
            f"RUN {spec!r} is not a readable profile, and running it as a workload needs "
            f"ipusim.runner, which cannot be imported ({exc}); hint: give a profile file or "
            "directory written by a run"
        ) from None
    from ipusim.progress import Progress, progress_of

    with Progress("ipusim compare", progress_of(args)) as progress:
        progress.phase("check workload")
        runner.check_workload_source(spec)
        progress.phase("load, build, compile and run")
        config = args.config or "mk2"
        result = runner.run_from_arguments(
            spec, argparse.Namespace(**{**vars(args), "config": config})
        )
    profile = result.measured()
    metrics = {**profile.metrics, **{k: float(v) for k, v in (result.metrics or {}).items()}}
    return replace(profile, source=f"{spec} on {result.config.name}", metrics=metrics)


def write_rows_csv(rows: pd.DataFrame, path: str | PathLike[str]) -> Path:
    """Write comparison rows to a CSV file that appears only once complete.

    Raises
    ------
    CompareError
        The file cannot be written (naming it, the reason and a hint).
    """
    from ipusim.files import FileWriteError, atomic_open

    try:
        with atomic_open(path, "w", newline="", what="--csv") as f:
            rows.to_csv(f, index=False)
    except FileWriteError as exc:
        raise CompareError(str(exc)) from None
    return Path(path)


def _compare_command(args: argparse.Namespace) -> int:
    from ipusim.files import check_writable

    for option, path in (("--csv", args.csv), ("--plot", args.plot)):
        if path:  # refused before a workload runs, not after
            check_writable(path, option)
    if args.plot and Path(args.plot).suffix.lower() not in (".png", ".svg", ".pdf"):
        raise CompareError(
            f"--plot {args.plot!r}: suffix {Path(args.plot).suffix.lower()!r} is not "
            "supported; required .png, .svg or .pdf"
        )
    _check_options_apply(args)
    measured = _load_profile(args.measured, args, "MEASURED")
    if _looks_like_workload(args.run):
        simulated = _run_workload(args.run, args)
    else:
        simulated = _load_profile(args.run, args, "RUN")
    phases = _split(args.phases) or None
    levels = _split(args.levels) or None
    result = compare(measured, simulated, phases=phases, levels=levels)
    print(result.table(max_steps=None if args.steps < 0 else args.steps))
    if args.csv:
        write_rows_csv(result.rows, args.csv)
    if args.plot:
        result.plot(path=args.plot)
    if args.fail_above is not None:
        bad = result.failures(args.fail_above)
        if len(bad):
            names = ", ".join(
                f"{lv} {n} {r:+,.1%}"
                for lv, n, r in bad[["level", "name", "rel_error"]].head(10).itertuples(index=False)
            )
            more = f" and {len(bad) - 10} more" if len(bad) > 10 else ""
            print(
                f"ipusim compare: {len(bad)} row(s) above {args.fail_above:g}%: {names}{more}",
                file=sys.stderr,
            )
            return 1
    return 0


def _check_options_apply(args: argparse.Namespace) -> None:
    """Refuse options that would be ignored: the workload options when RUN is a profile
    (the numbers compared would not be those of the machine asked for), ``--ids`` when
    MEASURED is not a measurements .csv."""
    if args.measured.endswith(".py") or args.measured.rsplit(":", 1)[0].endswith(".py"):
        raise CompareError(
            f"MEASURED {args.measured!r} is a workload; MEASURED must be a measured profile "
            "(summary text, execution profile, profile directory or measurements .csv), "
            "and only RUN may be a workload; hint: ipusim compare PROFILE "
            f"{args.measured} (the arguments swapped?)"
        )
    if not _looks_like_workload(args.run):
        given = [
            f"{option} {value}"
            for option, values in (
                ("--config", [args.config] if args.config else []),
                ("--set", args.set or []),
                ("-p", args.param or []),
                ("--engine-option", args.engine_option or []),
            )
            for value in values
        ]
        if given:
            raise CompareError(
                f"{', '.join(given)} given, but RUN {args.run!r} is a profile, not a "
                "workload: these options choose the machine, parameters and engine options "
                "of a workload run, and a profile is read as it is; hint: drop them, or give "
                "a workload (file.py[:func] or module[:func]) as RUN"
            )
    if args.ids and not args.measured.lower().endswith(".csv"):
        raise CompareError(
            f"--ids {','.join(args.ids)!r} given, but MEASURED {args.measured!r} is not a "
            "measurements .csv: --ids chooses rows of one; hint: drop --ids, or give the "
            ".csv file as MEASURED"
        )


def _percent(text: str) -> float:
    """An argparse ``type``: a finite percentage >= 0 (``--fail-above``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"found {text!r}; required a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"found {text}; required a finite percentage >= 0")
    return value


def _step_count(text: str) -> int:
    """An argparse ``type``: a whole number >= 0, or -1 for all (``--steps``)."""
    return whole_number(text, -1, "N >= 0, or -1 for all")


def register(subparsers: Any) -> None:
    """Add the ``compare`` command to the ``ipusim`` sub-parsers."""
    parser = subparsers.add_parser(
        "compare",
        help="compare a measured profile with a simulated run, phase by phase",
        description="Compare MEASURED with RUN: per phase (total; tile averages of compute, "
        "exchange, sync), per step (by name and type) and per metric, and print a table "
        "with absolute and relative errors. MEASURED and RUN are each a profile summary "
        "(Poplar SDK 1.x or 2.x/3.x layout), an execution profile (.json/.cbor), a profile "
        "directory (autoReport) or a measurements .csv (MEASURED only, rows chosen with "
        "--ids). RUN may also be a workload (file.py[:func] or module[:func]) run on "
        "--config.",
    )
    parser.add_argument("measured", metavar="MEASURED", help="measured profile (file or dir)")
    parser.add_argument(
        "run", metavar="RUN", help="simulated profile (file or dir) or workload to run"
    )
    parser.add_argument(
        "--tiles",
        type=positive_int,
        metavar="N",
        help="tile count of a profile that does not say (to turn totals into tile averages)",
    )
    parser.add_argument(
        "--phases",
        action="append",
        metavar="A,B",
        help=f"compare only these phases ({', '.join(PHASES)})",
    )
    parser.add_argument(
        "--levels",
        action="append",
        metavar="A,B",
        help="compare only these levels (phase, step, metric; default all)",
    )
    parser.add_argument(
        "--fail-above",
        type=_percent,
        metavar="PCT",
        help="exit 1 when any |relative error| exceeds PCT per cent",
    )
    parser.add_argument("--csv", metavar="OUT", help="write every compared row to this CSV")
    parser.add_argument("--plot", metavar="OUT.png", help="plot the rows side by side")
    parser.add_argument(
        "--steps",
        type=_step_count,
        default=20,
        metavar="N",
        help="print at most N step rows, the largest errors (default 20; -1 for all)",
    )
    parser.add_argument(
        "--ids",
        action="append",
        metavar="GLOB",
        help="rows of a measurements .csv to compare, e.g. --ids 'B1.*' (comma-separated)",
    )
    group = parser.add_argument_group("workload (when RUN is file.py[:func] or module[:func])")
    from ipusim.progress import add_progress_arguments
    from ipusim.runner import add_workload_arguments

    add_workload_arguments(group)
    add_progress_arguments(group)
    # No --config unless given (a workload runs on mk2 then): given with a profile as
    # RUN it is refused rather than ignored.
    parser.set_defaults(handler=_compare_command, config=None)
