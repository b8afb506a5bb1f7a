"""``printProfileSummary``: the Target, Graph and Execution sections of a run.

Totals are summed over every run since the engine was made (or
``resetExecutionProfile``), as Poplar does. Balances: tile balance is the compute
cycles of all tiles over (tiles × compute-step durations); thread balance is compute
excluding idle threads over compute including them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

import numpy as np

from ipusim import ir


def _truthy(value: Any) -> bool:
    return str(value).lower() in ("true", "1", "yes", "on")


def print_summary(engine: Any, out: IO[str], options: Mapping[str, Any]) -> None:
    """Write the summary of ``engine``'s runs to ``out``."""
    state = engine._state
    target = state.target
    cfg = target.config
    w = out.write
    w("Target:\n")
    w(f"  Number of IPUs:         {cfg.num_ipus:,}\n")
    w(f"  Tiles per IPU:          {cfg.tile.tiles_per_ipu:,}\n")
    w(f"  Total Tiles:            {cfg.num_tiles:,}\n")
    w(f"  Memory Per-Tile:        {cfg.memory.tile_memory_bytes / 1024:,.1f} KB\n")
    w(f"  Total Memory:           {cfg.memory.tile_memory_bytes * cfg.num_tiles / 2**20:,.1f} MB\n")
    w(f"  Clock Speed (approx):   {cfg.tile.clock_hz / 1e6:,.1f} MHz\n")
    w(f"  Machine config:         {cfg.name} (hash {engine._machine.config_hash if engine._machine else '-'})\n")
    n_edges = sum(
        (len(v) if isinstance(v, list) else 1) for inst in state.vertices for v in inst.fields.values()
    )
    w("Graph:\n")
    w(f"  Number of vertices:     {len(state.vertices):,}\n")
    w(f"  Number of edges:        {n_edges:,}\n")
    w(f"  Number of variables:    {len(state.variables):,}\n")
    w(f"  Number of compute sets: {len(state.compute_sets):,}\n")
    traces = engine.getTraces()
    w("Execution:\n")
    if not traces:
        w("  (no run on an IPU Model device yet)\n")
        return
    total = sum(t.total_cycles for t in traces)
    clock = cfg.tile.clock_hz
    keys = ("compute", "compute_active", "internal_exchange", "global_exchange", "host_exchange", "sync")
    sums = {k: sum(t.totals[k] for t in traces) for k in keys}
    compute_span = sum(r.cycles for t in traces for r in t.records if r.kind == "compute")
    tile_bal = sums["compute"] / (cfg.num_tiles * compute_span) if compute_span else 0.0
    thread_bal = sums["compute_active"] / sums["compute"] if sums["compute"] else 0.0
    w(f"  Total cycles:                                  {total:,} (approx {total / clock * 1e6:,.1f} microseconds)\n")
    w(f"  Total compute cycles (including idle threads): {sums['compute']:,}\n")
    w(f"  Total compute cycles (excluding idle threads): {sums['compute_active']:,}\n")
    w(f"  Total IPU exchange cycles:                     {sums['internal_exchange']:,}\n")
    w(f"  Total global exchange cycles:                  {sums['global_exchange']:,}\n")
    w(f"  Total host exchange cycles:                    {sums['host_exchange']:,}\n")
    w(f"  Total sync cycles:                             {sums['sync']:,}\n")
    w(f"  Total tile balance:                            {tile_bal:.1%}\n")
    w(f"  Total thread balance:                          {thread_bal:.1%}\n")
    by_type: dict[str, int] = {}
    for t in traces:
        for r in t.records:
            step = r.step
            if isinstance(step, ir.Compute) and step.num_vertices:
                sums_t = np.bincount(step.vertex_type, weights=step.vertex_cycles, minlength=len(step.vertex_type_names))
                for name, c in zip(step.vertex_type_names, sums_t, strict=True):
                    by_type[name] = by_type.get(name, 0) + int(c)
    instances: dict[str, int] = {}
    for inst in state.vertices:
        instances[inst.vtype.name] = instances.get(inst.vtype.name, 0) + 1
    w("  Cycles by vertex type:\n")
    width = max((len(n) for n in by_type), default=0)
    for name, c in sorted(by_type.items(), key=lambda kv: -kv[1]):
        count = instances.get(name)
        inst_text = f"({count:,} instances)" if count is not None else "(internal)"
        w(f"    {name:<{width}} {inst_text:>20}: {c:,}\n")
    w(f"  Host time: {sum(t.host_seconds for t in traces):.3f} s; "
      f"{total / max(sum(t.host_seconds for t in traces), 1e-12):,.0f} simulated cycles per host second\n")
    if _truthy(options.get("showExecutionSteps", "false")):
        w("  Steps:\n")
        for t in traces:
            for r in t.records:
                w(f"    {r.index:>5}  {r.kind:<16} {r.name:<40} cycles {r.first_cycle:,}-{r.last_cycle:,} ({r.cycles:,})\n")
