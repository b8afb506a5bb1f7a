"""docs/planner.md's table of plans: ipusim's planner picks, for every listed product
and pass, a plan with each property of the "Poplibs' plan" column (reasoned from
Poplibs' source in that document), and the ipusim column states the whole plan it picks:
partition, blocks, serial passes, tiles and temporary bytes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from poplar_api import HALF, Graph, IPUModel, poplin
from poplar_api.poplin.conv_planner import memory_limit
from poplar_api.poplin.conv_rearrange import operand_rearrangements
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


def _holds(claim: str, plan, params, rearranged: tuple[bool, bool]) -> bool:
    """One property of the Poplibs column on ipusim's ``plan`` (``rearranged``: whether
    matMul copies the activations and the weights before the exchange)."""
    claim = claim.strip()
    if " or " in claim:
        return any(_holds(c, plan, params, rearranged) for c in claim.split(" or "))
    if claim in ("acts rearranged", "weights rearranged"):
        return rearranged[0 if claim.startswith("acts") else 1]
    if claim.startswith("method "):
        return plan.method == claim.split()[1]
    if claim.startswith("vertex "):
        return vertex_name(plan, params) == f"poplin::{claim.split()[1]}"
    m = re.fullmatch(r"(serial|Ci split) (>|=)? ?(\d+)", claim)
    assert m, f"unknown claim {claim!r} in docs/planner.md"
    value = plan.serial if m.group(1) == "serial" else plan.parts[-1]
    n = int(m.group(3))
    return value > n if m.group(2) == ">" else value == n


def partition_text(plan) -> str:
    """ipusim's partition as the table writes it (``field F`` times ``Co C`` [times ``Ci
    P``], then the blocks; "S serial passes of" first when split serially), from the
    plan's ``(G, B, field, Co, Ci)`` split."""
    p, b = plan.parts, plan.blocks
    assert p[0] == 1 and p[1] == 1, "the table's products have one group and batch 1"
    x = " \N{MULTIPLICATION SIGN} "
    text = f"field {p[2]}{x}Co {p[3]}" + (f"{x}Ci {p[4]}" if p[4] > 1 else "")
    text += f" (blocks {b[2]}{x}{b[3]}{x}{b[4]})"
    return f"{plan.serial} serial passes of {text}" if plan.serial > 1 else text


@pytest.mark.parametrize("row", ROWS, ids=[r[0] for r in ROWS])
def test_ipusim_picks_a_plan_with_poplibs_properties(row) -> None:
    _, product, preset, fc_pass, poplibs, ipusim = row
    g, m, k, n = (int(x) for x in product.split("\N{MULTIPLICATION SIGN}"))
    graph = Graph(IPUModel(preset).createDevice().getTarget())
    opts = None if fc_pass == "NONE" else {"fullyConnectedPass": fc_pass}
    plan = poplin.getPlan(graph, (g, m, k, n), HALF, HALF, opts)
    params = poplin.matmul._params((g, m, k, n), HALF, HALF)
    a = poplin.createMatMulInputLHS(graph, HALF, [g, m, k], [g, k, n], "A", opts)
    b = poplin.createMatMulInputRHS(graph, HALF, [g, m, k], [g, k, n], "B", opts)
    conv_pass = None if opts is None else f"FC_{fc_pass}"
    rearranged = operand_rearrangements(graph, plan, conv_pass, a, b.dimShuffle([0, 2, 1]))
    for claim in poplibs.split(";"):
        assert _holds(claim, plan, params, rearranged), (
            f"{product} ({fc_pass}) on {preset}: {claim!r} fails for {plan}"
        )
    # the ipusim column states this plan: partition and blocks, tiles, temporary bytes
    assert f"AMP 1x1, {partition_text(plan)}, {plan.num_tiles_used} tiles, " in ipusim
    assert f"{plan.memory_bytes:,} B of {round(memory_limit(graph.getTarget(), {})):,}" in ipusim
