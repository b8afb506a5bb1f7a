"""``printProfileSummary``: the text summary of a graph profile and an execution profile.

Sections, in the layout of the Poplar guide: Target, Graph, Memory Usage (from the
graph profile's ``memory``; a one-line note when the engine has no memory report)
and Execution (from the execution profile: every run since the engine was made or
``resetExecutionProfile``).

The Execution section comes in the two layouts Poplar has printed (both read back by
``ipusim.measured.read_summary``):

* ``sdk2`` (Poplar SDK 2.x/3.x and PopVision; the default for ``ipu2`` and ``ipu21``
  targets): each phase as a **tile average**, Σ over tiles / number of tiles, with its
  share of the total cycles, so phases compare with the total. Tile balance is taken
  over the tiles that compute: Σ compute cycles / Σ over compute steps of (tiles that
  computed in the step * the step's busiest tile), 100 % when those tiles are equally
  busy, however few they are.
* ``sdk1`` (Poplar SDK 1.x; the default for ``ipu1`` targets): each phase **summed over
  tiles**; tile balance over every tile of the target, Σ compute cycles / (tiles * Σ
  busiest tile of each compute step).

In both, thread balance = compute cycles excluding idle threads / including them;
"Cycles by vertex type" sums the vertex estimates of every executed compute set. On a
target of several IPUs the phases are also split per IPU (from
``simulation.tileCyclesByIPU``; averages over each IPU's tiles, or sums), so the time
each IPU spends in global exchanges and waiting at syncs shows apart.

A replicated graph's Target section adds the number of replicas and each replica's
IPUs, tiles and memory (``target.numReplicas`` and its kin in the graph profile).

Options (strings): ``showExecutionSteps`` ("true") lists every step;
``showVarStorage`` ("true") lists the bytes live at each program point;
``showPerIpuMemoryUsage`` ("true") adds each IPU's memory use; ``colours`` ("true")
prints the section headings in bold when the stream is a terminal;
``showOptimizations`` ("true") prints the graph profile's ``optimizationInfo`` after
the Graph section (one line per entry; ipusim's compiler runs no optimisation passes,
so for its own profiles the section says so); ``summaryLayout`` (``sdk1`` or
``sdk2``) chooses the layout of the Execution section instead of the target's default.

:func:`printGraphSummary` prints the Target, Graph and Memory Usage sections alone,
:func:`printExecutionSummary` the Execution section alone (Poplar's functions of those
names); ``printProfileSummary`` prints both.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from ipusim.profile.memory_categories import category_totals

#: Buckets of the per-tile memory histogram (between 0 and the tile's capacity).
HISTOGRAM_BUCKETS = 8
#: Width in characters of the longest histogram bar.
HISTOGRAM_WIDTH = 40
#: Layouts of the Execution section (option ``summaryLayout``).
LAYOUTS = ("sdk1", "sdk2")
#: Targets whose summary is in the SDK 1.x layout by default; the others get ``sdk2``.
SDK1_ARCHS = frozenset({"ipu1"})


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("true", "1", "yes", "on")


def _bytes(n: float) -> str:
    """Bytes with a binary unit: ``1,234 B``, ``12.3 KiB``, ``4.5 MiB``."""
    if abs(n) < 1024:
        return f"{int(n):,} B"
    if abs(n) < 1024**2:
        return f"{n / 1024:,.1f} KiB"
    return f"{n / 1024**2:,.2f} MiB"


def _fields(w: Any, title: str, rows: list[tuple[str, str]]) -> None:
    """A titled block of ``label: value`` lines, the values aligned in one column."""
    w(f"{title}:\n")
    for label, value in rows:
        w(f"  {label + ':':<24}{value}\n")


def _target(w: Any, gp: Mapping[str, Any]) -> None:
    t = gp["target"]
    rows = [
        ("Type", f"{t['type']} ({t['configName']})"),
        ("Number of IPUs", f"{t['numIPUs']:,}"),
        ("Tiles per IPU", f"{t['tilesPerIPU']:,}"),
        ("Total Tiles", f"{t['numTiles']:,}"),
        ("Memory Per-Tile", _bytes(t["bytesPerTile"])),
        ("Total Memory", _bytes(t["totalMemory"])),
        ("Clock Speed (approx)", f"{t['clockFrequency'] / 1e6:,.1f} MHz"),
    ]
    if "numReplicas" in t:  # a replicated graph
        rows += [
            ("Number of Replicas", f"{t['numReplicas']:,}"),
            ("IPUs per Replica", f"{t['ipusPerReplica']:,}"),
            ("Tiles per Replica", f"{t['tilesPerReplica']:,}"),
            ("Memory per Replica", _bytes(t["memoryPerReplica"])),
        ]
    _fields(w, "Target", rows)


def _graph(w: Any, gp: Mapping[str, Any]) -> None:
    g = gp["graph"]
    rows = [
        ("Number of vertices", f"{g['numVertices']:,}"),
        ("Number of edges", f"{g['numEdges']:,}"),
        ("Number of variables", f"{g['numVars']:,}"),
        ("Number of compute sets", f"{g['numComputeSets']:,}"),
    ]
    _fields(w, "Graph", rows)


def _histogram(w: Any, need: np.ndarray, capacity: int) -> None:
    """Tiles per bucket of memory use (including gaps), as text bars."""
    edges = np.linspace(0, capacity, HISTOGRAM_BUCKETS + 1)
    inside = need[need <= capacity]
    counts = np.histogram(inside, bins=edges)[0] if capacity else np.zeros(HISTOGRAM_BUCKETS)
    over = int((need > capacity).sum())
    rows = [
        (f"{_bytes(lo)} - {_bytes(hi)}", int(c))
        for lo, hi, c in zip(edges[:-1], edges[1:], counts, strict=True)
    ]
    rows.append((f"> {_bytes(capacity)} (out of memory)", over))
    peak = max(c for _, c in rows) or 1
    width = max(len(label) for label, _ in rows)
    w("  Tiles by memory use (including gaps):\n")
    for label, c in rows:
        bar = "#" * (max(1, round(HISTOGRAM_WIDTH * c / peak)) if c else 0)
        w(f"    {label:<{width}} {c:>6,} {bar}\n")


def _memory(w: Any, gp: Mapping[str, Any], show_liveness: bool) -> None:
    mem = gp.get("memory")
    w("Memory Usage:\n")
    if mem is None:
        w("  (no memory report: this engine was compiled without the memory model)\n")
        return
    by_tile = {k: np.asarray(v, np.int64) for k, v in mem["byTile"].items()}
    w("  Total for all IPUs:\n")
    w(f"    Including gaps:       {int(by_tile['totalIncludingGaps'].sum()):,} B\n")
    w(f"    Excluding gaps:       {int(by_tile['total'].sum()):,} B\n")
    w("  By memory region (excluding gaps / including gaps):\n")
    for label, key in (
        ("Interleaved", "interleaved"),
        ("Non-interleaved", "nonInterleaved"),
        ("Overflowed", "overflowed"),
    ):
        excl = int(by_tile[key].sum())
        incl = int(by_tile[f"{key}IncludingGaps"].sum())
        w(f"    {label + ':':<22}{excl:,} B / {incl:,} B\n")
    w("  Vertex and graph data by category:\n")
    # Poplar's categories by region and overlap, added up; those with no bytes left out
    totals = category_totals(mem["byCategory"])
    cats = sorted(
        ((k, int(v.sum())) for k, v in totals.items() if v.any()),
        key=lambda kv: -kv[1],
    )
    width = max((len(k) for k, _ in cats), default=0)
    for name, total in cats:
        w(f"    {name + ':':<{width + 1}} {total:>14,} B\n")
    names = gp["vertexTypes"]["names"]
    sizes = [int(sum(row)) for row in mem["byVertexType"]["totalBytes"]]
    if names:
        w("  Vertex data by type:\n")
        types = sorted(zip(names, sizes, strict=True), key=lambda kv: -kv[1])
        width = max(len(k) for k, _ in types)
        for name, total in types:
            w(f"    {name + ':':<{width + 1}} {int(total):>14,} B\n")
    need = by_tile["totalIncludingGaps"]
    capacity = int(mem["capacity"]["total"])
    _histogram(w, need, capacity)
    if need.size:
        worst = int(np.argmax(need))
        w(
            f"  Maximum tile: tile {worst} uses {int(need[worst]):,} of {capacity:,} B "
            f"({need[worst] / capacity:.1%})\n"
        )
    oom = mem["tilesOutOfMemory"]
    shown = ", ".join(str(t) for t in oom[:10]) + (", ..." if len(oom) > 10 else "")
    w(f"  Tiles out of memory: {len(oom):,}{' (' + shown + ')' if oom else ''}\n")
    if show_liveness:
        w("  Variable storage by program point (bytes, all tiles):\n")
        w(f"    {'#':>5}  {'not always live':>16}  {'always live':>14}  program point\n")
        points = mem["liveness"]
        points = points["programPoints"] if isinstance(points, Mapping) else points
        for i, p in enumerate(points):
            w(f"    {i:>5}  {p['notAlwaysLive']:>16,}  {p['alwaysLive']:>14,}  {p['name']}\n")


def cycles_by_vertex_type(
    gp: Mapping[str, Any], ep: Mapping[str, Any]
) -> dict[str, tuple[int, int]]:
    """``name -> (cycles, instances)``: Σ of the vertex estimates of every executed
    compute set (for a type whose cycles were counted, Σ of its executions' counted
    cycles, ``simulation.cyclesByVertexType``), and the vertices of that type in the
    graph's compute sets."""
    names = gp["vertexTypes"]["names"]
    cs = gp["computeSets"]
    per_cs = np.asarray(cs["cycleEstimates"]["activeCyclesByVertexType"], np.int64)
    per_cs = per_cs.reshape(len(cs["names"]), len(names))
    progs = gp["programs"]
    runs = [
        progs[s["program"]]["computeSet"]
        for s in ep["simulation"]["steps"]
        if s["type"] == "OnTileExecute" and 0 <= s["program"] < len(progs)
    ]
    cycles = per_cs[runs].sum(axis=0) if runs else np.zeros(len(names), np.int64)
    counts = np.asarray(cs["vertexCountsByType"], np.int64).reshape(len(cs["names"]), len(names))
    instances = counts.sum(axis=0)
    out = {n: (int(c), int(i)) for n, c, i in zip(names, cycles, instances, strict=True)}
    sources = ep["simulation"].get("vertexCycleSources", {})
    counted = ep["simulation"].get("cyclesByVertexType", {})
    for name, source in sources.items():
        if source == "counted" and name in out and name in counted:
            out[name] = (int(counted[name]), out[name][1])
    return out


def totals(ep: Mapping[str, Any], num_tiles: int) -> dict[str, float]:
    """Execution totals: cycles per phase summed over tiles, and the balances.

    ``tileBalance`` is over every tile of the target (SDK 1.x), ``activeTileBalance``
    over the tiles that computed in each compute step (SDK 2.x/3.x layout).
    """
    sim = ep["simulation"]
    tc = sim["tileCycles"]
    compute_steps = [s for s in sim["steps"] if s["type"] == "OnTileExecute"]
    span = sum(s["maxTileCycles"] for s in compute_steps)
    active_span = sum(s["maxTileCycles"] * s["activeTiles"] for s in compute_steps)
    busy = sum(s["cyclesAllTiles"] for s in compute_steps)
    return {
        "cycles": sim["cycles"],
        "compute": tc["compute"],
        "activeCompute": tc["activeCompute"],
        "doExchange": tc["doExchange"],
        "globalExchange": tc["globalExchange"],
        "streamCopy": tc["streamCopy"],
        "sync": tc["sync"],
        "tileBalance": busy / (num_tiles * span) if span else 0.0,
        "activeTileBalance": busy / active_span if active_span else 0.0,
        "threadBalance": tc["activeCompute"] / tc["compute"] if tc["compute"] else 0.0,
    }


#: Phases of the Execution section: label (after "Total " or "Tile average ") and
#: ``tileCycles`` key.
PHASE_ROWS = (
    ("compute cycles (including idle threads)", "compute"),
    ("compute cycles (excluding idle threads)", "activeCompute"),
    ("IPU exchange cycles", "doExchange"),
    ("global exchange cycles", "globalExchange"),
    ("host exchange cycles", "streamCopy"),
    ("sync cycles", "sync"),
)

#: Columns of the per-IPU table: heading and ``tileCycles`` key.
IPU_COLUMNS = (
    ("compute", "compute"),
    ("IPU exchange", "doExchange"),
    ("global exchange", "globalExchange"),
    ("host exchange", "streamCopy"),
    ("sync", "sync"),
)


#: printProfileSummary's yes/no options (all but summaryLayout).
SWITCHES = (
    "showExecutionSteps",
    "showVarStorage",
    "showOptimizations",
    "showPerIpuMemoryUsage",
    "colours",
)
_SWITCH_VALUES = ("true", "false", "1", "0", "yes", "no", "on", "off")


def check_options(options: Mapping[str, Any]) -> None:
    """Refuse an option the summary does not know, or a switch that is neither true nor
    false: either was ignored, so a misspelt showExecutionSteps printed no steps."""
    if not isinstance(options, Mapping):
        raise ValueError(
            f"printProfileSummary options {options!r:.60}: expected a dict such as "
            "{'showExecutionSteps': 'true'}"
        )
    for key, value in options.items():
        if key == "summaryLayout":
            continue
        if key not in SWITCHES:
            near = difflib.get_close_matches(str(key), SWITCHES, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise ValueError(
                f"printProfileSummary option {key!r} is not known; expected one of "
                f"{', '.join((*SWITCHES, 'summaryLayout'))}; hint: {hint}options are "
                "{'showExecutionSteps': 'true'}"
            )
        if str(value).lower() not in _SWITCH_VALUES:
            raise ValueError(
                f"printProfileSummary option {key}={value!r} is neither true nor false; "
                "expected 'true' or 'false'"
            )


def summary_layout(gp: Mapping[str, Any], options: Mapping[str, Any]) -> str:
    """The layout of the Execution section: option ``summaryLayout``, else by target.

    Raises
    ------
    ValueError
        ``summaryLayout`` is not one of :data:`LAYOUTS`.
    """
    check_options(options)
    asked = options.get("summaryLayout")
    if asked is not None:
        layout = str(asked).lower()
        if layout not in LAYOUTS:
            raise ValueError(
                f"printProfileSummary option summaryLayout={asked!r} is not a layout; "
                f"expected one of {', '.join(LAYOUTS)} (hint: sdk2 prints tile averages as "
                "Poplar SDK 2.x/3.x does, sdk1 sums over tiles as SDK 1.x did)"
            )
        return layout
    return "sdk1" if gp["target"].get("arch") in SDK1_ARCHS else "sdk2"


def _by_ipu(
    w: Any, by_ipu: list[Mapping[str, int]] | None, tiles_per_ipu: int, average: bool
) -> None:
    """The per-IPU split of the phases (several IPUs only): averages or sums."""
    if not by_ipu or len(by_ipu) < 2:
        return
    if average:
        w("  Tile average cycles by IPU (over the IPU's tiles):\n")
    else:
        w("  Cycles by IPU (sum over the IPU's tiles):\n")
    head = "".join(f"{name:>17}" for name, _ in IPU_COLUMNS)
    w(f"    {'IPU':>4}{head}\n")
    for i, u in enumerate(by_ipu):
        if average:
            cells = "".join(f"{u[key] / tiles_per_ipu:>17,.1f}" for _, key in IPU_COLUMNS)
        else:
            cells = "".join(f"{int(u[key]):>17,}" for _, key in IPU_COLUMNS)
        w(f"    {i:>4}{cells}\n")


def _phases_sdk1(w: Any, t: Mapping[str, float], us: float) -> None:
    rows = [("Total cycles", f"{t['cycles']:,} (approx. {us:,.1f} microseconds)")]
    rows += [(f"Total {label}", f"{t[key]:,}") for label, key in PHASE_ROWS]
    rows += [
        ("Total tile balance", f"{t['tileBalance']:.1%}"),
        ("Total thread balance", f"{t['threadBalance']:.1%}"),
    ]
    for label, value in rows:
        w(f"  {label + ':':<48}{value}\n")


def _phases_sdk2(w: Any, t: Mapping[str, float], us: float, num_tiles: int) -> None:
    total = t["cycles"]
    rows = [("Total cycles", f"{total:,} (approx {us:,.1f} microseconds)")]
    for label, key in PHASE_ROWS:
        average = t[key] / num_tiles if num_tiles else 0.0
        share = average / total if total else 0.0
        rows.append((f"Tile average {label}", f"{average:,.1f} ({share:.1%} of total)"))
    rows += [
        ("Tile balance (tiles that compute)", f"{t['activeTileBalance']:.1%}"),
        ("Thread balance", f"{t['threadBalance']:.1%}"),
    ]
    for label, value in rows:
        w(f"  {label + ':':<54}{value}\n")


def _execution(
    w: Any, gp: Mapping[str, Any], ep: Mapping[str, Any] | None, steps: bool, layout: str
) -> None:
    w("Execution:\n")
    if ep is None or not ep["runs"]:
        w("  (no run on an IPU Model device yet)\n")
        return
    target = gp["target"]
    t = totals(ep, target["numTiles"])
    us = t["cycles"] / target["clockFrequency"] * 1e6
    if layout == "sdk2":
        _phases_sdk2(w, t, us, target["numTiles"])
    else:
        _phases_sdk1(w, t, us)
    _by_ipu(w, ep["simulation"].get("tileCyclesByIPU"), target["tilesPerIPU"], layout == "sdk2")
    w("  Cycles by vertex type:\n")
    by_type = sorted(cycles_by_vertex_type(gp, ep).items(), key=lambda kv: (-kv[1][0], kv[0]))
    width = max((len(n) for n, _ in by_type), default=0)
    for name, (cycles, count) in by_type:
        w(f"    {name:<{width}} {f'({count:,} instances)':>22}: {cycles:,}\n")
    sim = ep["simulation"]
    host = sim.get("hostSeconds", 0.0)
    rate = f"{t['cycles'] / host:,.0f}" if host > 0 else "-"
    w(
        f"  Runs: {len(ep['runs'])}; host time {host:.3f} s; "
        f"{rate} simulated cycles per host second\n"
    )
    if steps:
        w("  Steps:\n")
        w(
            f"    {'#':>5}  {'type':<14} {'from':>12} {'to':>12} {'cycles':>10} "
            f"{'tiles':>6} {'tile bal':>8} {'thread/data bal':>15}  name\n"
        )
        for i, s in enumerate(sim["steps"]):
            other = s.get("threadBalance", s.get("dataBalance"))
            other_text = f"{other:.1%}" if other is not None else "-"
            w(
                f"    {i:>5}  {s['type']:<14} {s['cyclesFrom']:>12,} {s['cyclesTo']:>12,} "
                f"{s['cycles']:>10,} {s['activeTiles']:>6,} {s['tileBalance']:>8.1%} "
                f"{other_text:>15}  {s['name']}\n"
            )


def render_summary(
    out: IO[str],
    graph_profile: Mapping[str, Any],
    execution_profile: Mapping[str, Any] | None,
    options: Mapping[str, Any],
) -> None:
    """Write the summary of the two profiles to ``out``.

    Raises
    ------
    ValueError
        An unknown ``summaryLayout`` option (before anything is written).
    """
    layout = summary_layout(graph_profile, options)
    w = _writer(out, options)
    _graph_part(w, graph_profile, options)
    _execution(
        w,
        graph_profile,
        execution_profile,
        _truthy(options.get("showExecutionSteps", "false")),
        layout,
    )


def _per_ipu_memory(w: Any, gp: Mapping[str, Any]) -> None:
    """Each IPU's memory use (option ``showPerIpuMemoryUsage``)."""
    mem = gp.get("memory")
    if mem is None:
        return
    per_ipu = int(gp["target"]["tilesPerIPU"])
    need = np.asarray(mem["byTile"]["totalIncludingGaps"], np.int64)
    used = np.asarray(mem["byTile"]["total"], np.int64)
    w("  Per IPU (excluding gaps / including gaps, busiest tile):\n")
    for ipu in range(max(1, -(-need.size // per_ipu))):
        part = slice(ipu * per_ipu, (ipu + 1) * per_ipu)
        worst = int(np.argmax(need[part])) + ipu * per_ipu if need[part].size else 0
        w(
            f"    IPU {ipu}: {int(used[part].sum()):,} B / {int(need[part].sum()):,} B, "
            f"tile {worst} {int(need[worst]) if need.size else 0:,} B\n"
        )


def _writer(out: IO[str], options: Mapping[str, Any]) -> Any:
    """``out.write``, with the section headings in bold when option ``colours`` is
    true and ``out`` is a terminal."""
    try:
        terminal = bool(out.isatty())
    except (AttributeError, ValueError):
        terminal = False
    if not (_truthy(options.get("colours", "false")) and terminal):
        return out.write

    def write(text: str) -> int:
        if text.endswith(":\n") and not text.startswith(" "):
            text = f"\x1b[1m{text[:-1]}\x1b[0m\n"
        return out.write(text)

    return write


def _optimizations(w: Any, gp: Mapping[str, Any]) -> None:
    """The graph profile's ``optimizationInfo`` (option ``showOptimizations``): each
    entry on a line, numbers with thousands separators."""
    info = gp.get("optimizationInfo") or {}
    w("Optimizations:\n")
    if not info:
        w("  (none: no optimisation pass reported anything)\n")
        return
    width = max(len(str(k)) for k in info) + 1
    for key, value in sorted(info.items(), key=lambda kv: str(kv[0])):
        shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
        w(f"  {str(key) + ':':<{width}} {shown}\n")


def _graph_part(w: Any, gp: Mapping[str, Any], options: Mapping[str, Any]) -> None:
    _target(w, gp)
    _graph(w, gp)
    if _truthy(options.get("showOptimizations", "false")):
        _optimizations(w, gp)
    _memory(w, gp, _truthy(options.get("showVarStorage", "false")))
    if _truthy(options.get("showPerIpuMemoryUsage", "false")):
        _per_ipu_memory(w, gp)


def printGraphSummary(
    out: IO[str], graphProfile: Mapping[str, Any], options: Mapping[str, Any] | None = None
) -> None:
    """Write the Target, Graph and Memory Usage sections of ``graphProfile`` to
    ``out`` (Poplar's ``printGraphSummary``; options as ``printProfileSummary``)."""
    options = options or {}
    _graph_part(_writer(out, options), graphProfile, options)


def printExecutionSummary(
    out: IO[str],
    graphProfile: Mapping[str, Any],
    executionProfile: Mapping[str, Any] | None,
    options: Mapping[str, Any] | None = None,
) -> None:
    """Write the Execution section of ``executionProfile`` to ``out`` (Poplar's
    ``printExecutionSummary``; options as ``printProfileSummary``).

    Raises
    ------
    ValueError
        An unknown ``summaryLayout`` option (before anything is written).
    """
    options = options or {}
    layout = summary_layout(graphProfile, options)
    steps = _truthy(options.get("showExecutionSteps", "false"))
    _execution(_writer(out, options), graphProfile, executionProfile, steps, layout)


def print_summary(engine: Any, out: IO[str], options: Mapping[str, Any]) -> None:
    """Write the summary of ``engine``'s graph and runs to ``out``."""
    if not callable(getattr(out, "write", None)):
        from poplar_api.errors import EngineError

        raise EngineError(
            f"printProfileSummary: stream {out!r:.60} has no write(); expected a text "
            "stream such as sys.stdout or open(path, 'w') (Poplar's std::ostream)"
        )
    ep = engine.getExecutionProfile() if engine.getTraces() else None
    render_summary(out, engine.getGraphProfile(), ep, options)
