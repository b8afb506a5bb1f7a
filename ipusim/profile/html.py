"""Profiles that render as HTML tables in notebooks.

A profile stays a plain ``dict`` (JSON types only, so serialisation and schema
validation are unchanged); these subclasses only add ``_repr_html_``.
"""

from __future__ import annotations

import html
from typing import Any


def _table(rows: list[tuple[str, Any]]) -> str:
    cells = "".join(
        f"<tr><th style='text-align:left'>{html.escape(str(k))}</th>"
        f"<td>{html.escape(f'{v:,}' if isinstance(v, int) else str(v))}</td></tr>"
        for k, v in rows
    )
    return f"<table>{cells}</table>"


class GraphProfile(dict):
    """A graph profile; in a notebook: target, graph counts and compute sets."""

    def _repr_html_(self) -> str:
        target, graph = self.get("target", {}), self.get("graph", {})
        head = _table(
            [
                (
                    "target",
                    f"{target.get('type', '')}: {target.get('numIPUs', '?')} IPU x "
                    f"{target.get('tilesPerIPU', '?')} tiles",
                ),
                ("vertices", graph.get("numVertices", 0)),
                ("edges", graph.get("numEdges", 0)),
                ("variables", graph.get("numVars", 0)),
                ("compute sets", graph.get("numComputeSets", 0)),
            ]
        )
        import pandas as pd  # only to render in a notebook

        cs = self.get("computeSets", {})
        cycles = cs.get("cycleEstimates", {}).get("cyclesByTile", [])
        frame = pd.DataFrame(
            {
                "compute set": cs.get("names", []),
                "vertices": cs.get("vertexCounts", []),
                "slowest tile cycles": [max(c, default=0) for c in cycles],
            }
        )
        return f"<div>{head}{frame.to_html(index=False)}</div>"


class ExecutionProfile(dict):
    """An execution profile; in a notebook: cycles per phase and the first steps."""

    def _repr_html_(self, head: int = 20) -> str:
        import pandas as pd  # only to render in a notebook

        sim = self.get("simulation", {})
        rows = [("profiler mode", self.get("profilerMode", "")), ("cycles", sim.get("cycles", 0))]
        rows += [(f"tile cycles: {k}", v) for k, v in sim.get("tileCycles", {}).items()]
        steps = pd.DataFrame(sim.get("steps", []))
        if not steps.empty:
            cols = [c for c in ("type", "name", "cyclesFrom", "cyclesTo", "cycles") if c in steps]
            steps = steps[cols]
        more = len(sim.get("steps", [])) - head
        note = f"<p>... {more:,} more steps</p>" if more > 0 else ""
        return f"<div>{_table(rows)}{steps.head(head).to_html(index=False)}{note}</div>"
