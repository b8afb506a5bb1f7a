"""docs/planner.md's table of plans: ipusim's planner picks, for every listed product,
a plan with each property of the "Poplibs' plan" column (reasoned from Poplibs' source
in that document), and the ipusim column states the plan it picks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poplar_api import HALF, Graph, IPUModel, poplin
from poplar_api.poplin.conv_planner import memory_limit
from poplar_api.poplin.plan_report import vertex_name

DOC = Path(__file__).resolve().parents[1] / "docs" / "planner.md"


def table_rows() -> list[tuple[str, ...]]:
    """The rows of the table whose header has "Poplibs' plan"."""
    rows: list[tuple[str, ...]] = []
    inside = False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| #") and "Poplibs' plan" in line:
            inside = True
            continue
        if inside:
            if not line.startswith("|"):
                break
            cells = tuple(c.strip() for c in line.strip("|").split("|"))
            if set(cells[0]) <= {"-"}:
                continue
            rows.append(cells)
    return rows


ROWS = table_rows()


def test_the_table_is_there() -> None:
    assert len(ROWS) >= 5


def _holds(claim: str, plan, params) -> bool:
    """One property of the Poplibs column on ipusim's ``plan``."""
    claim = claim.strip()
    if " or " in claim:
        return any(_holds(c, plan, params) for c in claim.split(" or "))
    if claim.startswith("method "):
        return plan.method == claim.split()[1]
    if claim.startswith("vertex "):
        return vertex_name(plan, params) == f"poplin::{claim.split()[1]}"
    m = re.fullmatch(r"(serial|Ci split) (>|=)? ?(\d+)", claim)
    assert m, f"unknown claim {claim!r} in docs/planner.md"
    value = plan.serial if m.group(1) == "serial" else plan.parts[-1]
    n = int(m.group(3))
    return value > n if m.group(2) == ">" else value == n


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_ipusim_picks_a_plan_with_poplibs_properties(row) -> None:
    _, product, preset, poplibs, ipusim = row
    g, m, k, n = (int(x) for x in product.split("\N{MULTIPLICATION SIGN}"))
    graph = Graph(IPUModel(preset).createDevice().getTarget())
    plan = poplin.getPlan(graph, (g, m, k, n), HALF)
    params = poplin.matmul._params((g, m, k, n), HALF, HALF)
    for claim in poplibs.split(";"):
        assert _holds(claim, plan, params), f"{product} on {preset}: {claim!r} fails for {plan}"
    # the ipusim column states this plan: serial passes, tiles and temporary bytes
    assert f"{plan.num_tiles_used} tiles" in ipusim
    assert f"{plan.memory_bytes:,} B of {round(memory_limit(graph.getTarget(), {})):,}" in ipusim
    assert (f"{plan.serial} serial passes" in ipusim) == (plan.serial > 1)
