"""``ipusim sweep report DIR``: summarise a sweep directory and plot it.

The report prints how many points ran and failed, the axes and their values, the
fastest and slowest points, the effect of each axis on the total cycles
(:func:`ipusim.sweep.analysis.axis_effects`) and the failed points with their errors,
then writes PNG plots (:mod:`ipusim.sweep.analysis`):

``cycles.png``
    Total cycles against ``--x``, one line per value of ``--hue``.
``phases.png``
    Cycles by phase, one stacked bar per value of ``--x``.
``speedup.png``
    Speed-up of the total cycles against the first value of ``--x``.
``flops.png``
    Flops achieved (percent of peak where known), when the workload reports a
    ``flops`` metric.

By default ``--x`` is the first axis with two or more values and ``--hue`` the next
one. :func:`register_report` adds the command to the ``ipusim sweep`` parser.
"""

from __future__ import annotations

import argparse
import math
import sys
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from ipusim import progress
from ipusim.files import check_writable, make_directory
from ipusim.sweep.cli import positive_int

if TYPE_CHECKING:  # pragma: no cover - typing only
    import pandas as pd

# pandas, numpy and matplotlib load when a report runs, not when ``ipusim --help``
# registers the command.

__all__ = ["default_axes", "format_report", "register_report", "run_sweep_report"]

#: Sub-directory of the sweep directory that receives the plots by default.
DEFAULT_PLOT_DIR = "report"


def _fmt(value: Any) -> str:
    """Cycles with thousands separators; ratios with three significant digits."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return f"{int(value):,}"
    if isinstance(value, float):
        return f"{value:,.1f}" if abs(value) >= 100 else f"{value:.3g}"
    return str(value)


def _ratio(value: Any) -> str:
    """A ratio with three decimals ("-" when missing)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.3f}"


def _table(
    frame: pd.DataFrame, indent: str = "  ", formatters: dict[str, Any] | None = None
) -> str:
    """``frame`` as indented text, numbers formatted by :func:`_fmt` unless
    ``formatters`` names another function for the column."""
    use = {**dict.fromkeys(frame.columns, _fmt), **(formatters or {})}
    text = frame.to_string(index=False, formatters=use)
    return "\n".join(indent + line.rstrip() for line in text.splitlines())


def default_axes(df: pd.DataFrame, x: str | None = None) -> tuple[str | None, str | None]:
    """The x and hue of the plots when not given.

    Candidates are the axes with two or more values among the points that ran
    (``workload`` counts when several were run), in column order. x is the first
    numeric one (else the first one; or ``x`` when given), hue the first other one;
    None where there is no candidate.
    """
    from ipusim.sweep.analysis import axis_columns, axis_values, is_numeric_axis, ok_rows

    candidates = [*axis_columns(df)] + (["workload"] if "workload" in df.columns else [])
    rows = ok_rows(df)
    values = {a: axis_values(rows, a) for a in candidates}
    varying = [a for a in candidates if len(values[a]) >= 2]
    numeric = [a for a in varying if is_numeric_axis(rows, a)]
    if x is None:
        x = (numeric or varying or [None])[0]
    hue = next((a for a in varying if a != x), None)
    return x, hue


def format_report(df: pd.DataFrame, top: int = 3) -> str:
    """The text of the report for the results ``df`` (see the module docstring)."""
    import pandas as pd

    from ipusim.sweep.analysis import axis_columns, axis_effects, axis_values, ok_rows

    lines = []
    rows = ok_rows(df)
    failed = df[~df.index.isin(rows.index)]
    where = df.attrs.get("out_dir", "<results>")
    workloads = sorted(map(str, pd.unique(df["workload"]))) if "workload" in df.columns else []
    repeats = int(df["repeat"].nunique()) if "repeat" in df.columns else 1
    lines.append(
        f"sweep {where}: {len(df)} points, {len(rows)} ok, {len(failed)} failed; "
        f"workloads: {', '.join(workloads) or '-'}; repeats: {repeats}"
    )
    axes = axis_columns(df)
    if axes:
        lines.append("axes:")
        for axis in axes:
            values = axis_values(df, axis)
            lines.append(f"  {axis}: {len(values)} value(s): {', '.join(map(str, values))}")
    else:
        lines.append("axes: none")
    if not rows.empty:
        shown = [*axes, "workload"] if len(workloads) > 1 else list(axes)
        ordered = rows.sort_values("total_cycles", kind="stable")
        cols = ["total_cycles", *shown]
        n = min(top, len(ordered))
        lines.append(f"\nfastest {n} point(s):")
        lines.append(_table(ordered[cols].head(n)))
        lines.append(f"slowest {n} point(s):")
        lines.append(_table(ordered[cols].tail(n).iloc[::-1]))
        effects = axis_effects(df)
        if not effects.empty:
            lines.append(
                "\neffect of each axis on total cycles (mean: over the points with the value;"
                "\nvs first: geometric mean of cycles / cycles at the axis's first value, over"
                "\nthe points that differ from one with the first value in that axis only):"
            )
            effects = effects.rename(columns={"mean": "mean total cycles", "vs_first": "vs first"})
            lines.append(_table(effects, formatters={"vs first": _ratio}))
    else:
        lines.append("\nno point ran (status ok)")
    if not failed.empty:
        lines.append(f"\nfailed points ({len(failed)}):")
        for _, row in failed.iterrows():
            coords = ", ".join(f"{a}={row[a]}" for a in axes)
            error = str(row.get("error") or "").strip().splitlines()
            lines.append(
                f"  {row.get('key', '?')} ({coords}): {error[0] if error else 'no message'}"
            )
    return "\n".join(lines) + "\n"


def _require_matplotlib() -> None:
    from ipusim.sweep.analysis import AnalysisError

    try:
        import matplotlib.figure  # noqa: F401
    except ImportError as exc:
        raise AnalysisError(
            f"plots need matplotlib, which cannot be imported ({exc}); hint: install it "
            "with `pip install 'ipusim[plot]'`, or pass --no-plots to print only"
        ) from None


def _has_flops(df: pd.DataFrame) -> bool:
    from ipusim.sweep.analysis import metrics_frame, ok_rows

    frame = metrics_frame(ok_rows(df))
    return "flops" in frame.columns and bool(frame["flops"].notna().any())


def run_sweep_report(
    directory: str | PathLike[str],
    out: str | PathLike[str] | None = None,
    x: str | None = None,
    hue: str | None = None,
    stream: TextIO | None = None,
    plots: bool = True,
    top: int = 3,
    all_versions: bool = False,
) -> list[Path]:
    """Print the report of a sweep directory and write its plots.

    Parameters
    ----------
    directory
        The sweep output directory.
    out
        Where the PNG files go (created if missing); default ``directory/report``.
    x, hue
        Axes of the plots; default :func:`default_axes`.
    stream
        Where the text goes; default standard output.
    plots
        False to print only.
    top
        How many fastest and slowest points to list.
    all_versions
        Also report the rows of earlier versions of the experiment stored in the
        directory (see :func:`~ipusim.sweep.analysis.load_results`); by default only
        the points of the experiment as last run.

    Returns
    -------
    list of pathlib.Path
        The plot files written.

    Raises
    ------
    AnalysisError
        The directory is missing or holds no results; ``x`` or ``hue`` is not an axis
        (the message lists the axes); ``out`` is a file; matplotlib is missing.
    """
    from ipusim.sweep.analysis import (
        AnalysisError,
        check_axis,
        load_results,
        ok_rows,
        plot_cycles,
        plot_flops,
        plot_phases,
        plot_speedup,
    )

    stream = sys.stdout if stream is None else stream
    progress.phase("read results")
    df = load_results(directory, all_versions=all_versions)
    progress.end()
    for name, role in ((x, "--x"), (hue, "--hue")):
        if name is not None:
            check_axis(df, name, role)
    x, default_hue = default_axes(df, x)
    hue = default_hue if hue is None else hue
    if hue is not None and hue == x:
        raise AnalysisError(f"--hue {hue!r} is the same axis as --x; choose another one")
    plot_dir = Path(directory) / DEFAULT_PLOT_DIR if out is None else Path(out)
    if plot_dir.exists() and not plot_dir.is_dir():
        raise AnalysisError(f"--out '{plot_dir}' is a file; required a directory for the plots")
    if plots:
        check_writable(plot_dir, "--out", directory=True)  # before printing anything
        _require_matplotlib()
    stream.write(format_report(df, top=top))
    other = int(df.attrs.get("other_versions", 0))
    if other:
        stream.write(
            f"\n{other} stored row(s) of earlier versions of the experiment (another "
            "workload file, config or grid) left out; --all-versions reports them too\n"
        )
    written: list[Path] = []
    if not plots:
        return written
    if ok_rows(df).empty or x is None:
        reason = "no point ran" if ok_rows(df).empty else "no axis has two or more values"
        stream.write(f"no plots: {reason}\n")
        return written
    make_directory(plot_dir, "--out")
    jobs = [
        ("cycles.png", lambda p: plot_cycles(df, x=x, hue=hue, path=p)),
        ("phases.png", lambda p: plot_phases(df, by=x, path=p)),
        ("speedup.png", lambda p: plot_speedup(df, x=x, hue=hue, path=p)),
    ]
    if _has_flops(df):
        jobs.append(("flops.png", lambda p: plot_flops(df, x=x, hue=hue, path=p)))
    for name, draw in jobs:
        path = plot_dir / name
        progress.phase(f"draw {name}")
        draw(path)
        written.append(path)
    progress.end()
    stream.write(f"\nplots (x={x}{f', hue={hue}' if hue else ''}):\n")
    for path in written:
        stream.write(f"  {path}\n")
    return written


def _report_command(args: argparse.Namespace) -> int:
    with progress.Progress("ipusim sweep report", progress.progress_of(args)):
        run_sweep_report(
            args.directory,
            out=args.out,
            x=args.x,
            hue=args.hue,
            plots=not args.no_plots,
            top=args.top,
            all_versions=args.all_versions,
        )
    return 0


def register_report(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``report`` command to ``subparsers`` (those of ``ipusim sweep``).

    The parser's ``handler`` default runs the report and returns the exit status 0;
    errors are :class:`~ipusim.sweep.analysis.AnalysisError` (an ``IpusimError``).
    """
    parser = subparsers.add_parser(
        "report",
        help="summarise a sweep directory and plot it",
        description="Print the points of a sweep directory (ok and failed, fastest and "
        "slowest, the effect of each axis on total cycles) and write cycles.png, "
        "phases.png, speedup.png and, when the workload reports flops, flops.png.",
    )
    parser.add_argument("directory", metavar="DIR", help="the sweep output directory")
    parser.add_argument(
        "--out", metavar="DIR", help=f"write the plots here (default DIR/{DEFAULT_PLOT_DIR})"
    )
    parser.add_argument("--x", metavar="AXIS", help="axis on the x axis of the plots")
    parser.add_argument("--hue", metavar="AXIS", help="axis drawn as one line per value")
    parser.add_argument(
        "--top", type=positive_int, default=3, metavar="N", help="fastest/slowest points listed"
    )
    parser.add_argument("--no-plots", action="store_true", help="print only, write no plots")
    parser.add_argument(
        "--all-versions",
        action="store_true",
        help="also report rows of earlier versions of the experiment run into DIR "
        "(default: only the points of the experiment as last run)",
    )
    progress.add_progress_arguments(parser)
    parser.set_defaults(handler=_report_command)
    return parser
