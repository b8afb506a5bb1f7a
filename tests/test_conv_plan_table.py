"""docs/planner.md's tables of plans: for every listed product, pass and convolution
ipusim's planner picks a plan with each property of the "Poplibs' plan" column (reasoned
from Poplibs' source in that document; a property the document says is not
established is not checked), the ipusim column states the whole plan it picks
(:func:`~poplar_api.poplin.plan_report.plan_summary`: vertex, transforms, serial passes,
partition and blocks, tiles, temporary bytes), and for the products the last column
gives the estimates of both operand orders that the swap rule compares, or, for the
fully-connected passes, those of the layer's joint and separate plans. A product row's
"Poplibs' estimate" is the plan of Poplibs' cost model and search as
:mod:`~poplar_api.poplin.poplibs_matmul_model` restates them, and the row's operand
order, serial passes and partition claims are that plan's; a fully-connected row's
"joint" or "separate" and "Poplibs' joint estimate" are the layer's plans as
:mod:`~poplar_api.poplin.poplibs_fc_joint_model` restates them."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api.poplin.conv_flatten import flattened_params
from poplar_api.poplin.conv_params import expand_all_dims, expand_dims
from poplar_api.poplin.conv_planner import memory_limit, parse_options
from poplar_api.poplin.conv_rearrange import operand_rearrangements
from poplar_api.poplin.fc_joint import fwd_layer, plan_joint
from poplar_api.poplin.plan_report import plan_summary, vertex_name
from poplar_api.poplin.poplibs_conv2d_forms import amp_floors
from poplar_api.poplin.poplibs_conv2d_model import describe_family, family_plan, slic_floors
from poplar_api.poplin.poplibs_conv_model import (
    flat_params,
    mac_vertex_floor,
    poplibs_conv_plan,
    slic_floor,
)
from poplar_api.poplin.poplibs_fc_joint_model import describe_joint, fc_layer_plan
from poplar_api.poplin.poplibs_float_candidates import describe_bounds, float_method
from poplar_api.poplin.poplibs_float_conv2d import (
    FORMS,
    best_plan,
    describe_form_plan,
    describe_partition,
    form_floors,
)
from poplar_api.poplin.poplibs_matmul_model import describe, poplibs_matmul_plan

DOC = Path(__file__).resolve().parents[1] / "docs" / "planner.md"

#: The convolutions of the second table, by the name its rows give: the CNN step's
#: (``examples/cnn/cnn_digits.py``, batch 32) and ResNet-like layers.
_CNN2 = poplin.ConvParams(FLOAT, 32, [14, 14], [3, 3], 8, 16, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
CONVS = {
    "cnn conv1": poplin.ConvParams(FLOAT, 32, [28, 28], [3, 3], 1, 8, paddingLower=[1, 1],
                                   paddingUpper=[1, 1]),
    "cnn conv2": _CNN2,
    "cnn conv2 input gradient": poplin.getGradientParams(_CNN2),
    "resnet 3x3 64": poplin.ConvParams(HALF, 1, [56, 56], [3, 3], 64, 64, paddingLower=[1, 1],
                                       paddingUpper=[1, 1]),
    "resnet 1x1 64-256": poplin.ConvParams(HALF, 1, [56, 56], [1, 1], 64, 256),
    "resnet 3x3 128": poplin.ConvParams(HALF, 4, [28, 28], [3, 3], 128, 128, paddingLower=[1, 1],
                                        paddingUpper=[1, 1]),
}  # fmt: skip


def table_rows(first_header_cell: str) -> list[tuple[str, ...]]:
    """The rows of the table whose header has "Poplibs' plan" and whose second column is
    ``first_header_cell``."""
    rows: list[tuple[str, ...]] = []
    inside = False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        cells = tuple(c.strip() for c in line.strip().strip("|").split("|"))
        if line.startswith("| #") and "Poplibs' plan" in line:
            inside = cells[1] == first_header_cell
            continue
        if inside:
            if not line.startswith("|"):
                inside = False
                continue
            if set(cells[0]) <= {"-"}:
                continue
            rows.append(cells)
    return rows


PRODUCTS = table_rows("product")
CONV_ROWS = table_rows("convolution")


def test_the_tables_are_there() -> None:
    assert len(PRODUCTS) >= 12 and len(CONV_ROWS) == len(CONVS)


def _holds(claim: str, plan, params, rearranged: tuple[bool, bool] | None, joint=None) -> bool:
    """One property of the Poplibs column on ipusim's ``plan`` (``rearranged``: whether
    matMul copies the activations and the weights before the exchange; ``joint``:
    whether a fully-connected layer is planned jointly, and its costs)."""
    claim = claim.strip()
    if claim.startswith(SEPARATE):  # (a property of the separately planned pass)
        assert joint is not None and not joint[0], f"{claim!r}: ipusim plans the layer jointly"
        claim = claim.removeprefix(SEPARATE)
    if " or " in claim:
        return any(_holds(c, plan, params, rearranged, joint) for c in claim.split(" or "))
    if claim in ("acts rearranged", "weights rearranged"):
        assert rearranged is not None, claim
        return rearranged[0 if claim.startswith("acts") else 1]
    if claim in ("swapped", "unswapped"):
        return plan.swapped == (claim == "swapped")
    if claim == "flattened":
        return plan.flattened
    if claim == "inputs broadcast before the loop":
        return plan.broadcast
    if claim in ("joint", "separate"):
        assert joint is not None, claim
        return joint[0] == (claim == "joint")
    if claim.startswith("method "):
        return plan.method == claim.split()[1]
    if claim.startswith("vertex "):
        return vertex_name(plan, params) == f"poplin::{claim.split()[1]}"
    if claim.startswith("batch split "):
        return plan.parts[1] == int(claim.split()[-1])
    if m := re.fullmatch(r"grouping (\d+) / (\d+)", claim):
        return (plan.in_chans_per_group, plan.out_chans_per_group) == tuple(map(int, m.groups()))
    if m := re.fullmatch(r"grouping (\d+) / (\d+) on (\d+) units", claim):
        got = (plan.in_chans_per_group, plan.out_chans_per_group, plan.num_conv_units)
        return got == tuple(map(int, m.groups()))
    if claim in ("half partials", "float partials"):  # (the plan's, ConvVertexType::partialType)
        return plan.partials_type == (HALF if claim.startswith("half") else FLOAT)
    if claim == "no expansion":
        return not plan.expanded
    if claim.startswith("expanded dimension "):  # (the dimensions a partial expansion names)
        return plan.expanded and plan.expanded_dims == tuple(int(d) for d in claim.split()[2:])
    if claim.startswith("partition B "):  # (a 2-D convolution's, with its kernel split)
        return claim == "partition " + describe_partition(
            {"batchSplit": plan.parts[1], "fieldSplit[0]": plan.parts[2],
             "fieldSplit[1]": plan.parts[3], "kernelSplit[0]": plan.kernel_split,
             "outChanSplit.parallel": plan.parts[4], "inChanSplit.parallel": plan.parts[5]}
        )  # fmt: skip
    if claim.startswith("partition "):
        nd = len(plan.parts) - 4  # (the field dimensions of the convolution the plan runs)
        field = "\N{MIDDLE DOT}".join(str(p) for p in plan.parts[2 : 2 + nd])
        return claim == "partition " + _partition(field, plan.parts[-2], plan.parts[-1])
    m = re.fullmatch(r"(serial|input-channel serial|Ci split|kernel split) (>|=)? ?(\d+)", claim)
    assert m, f"unknown claim {claim!r} in docs/planner.md"
    value = {
        "serial": plan.serial, "input-channel serial": plan.in_serial,
        "kernel split": plan.kernel_split,
    }.get(m.group(1), plan.parts[-1])  # fmt: skip
    n = int(m.group(3))
    return value > n if m.group(2) == ">" else value == n


#: The prefix of a Poplibs claim that holds if the pass is planned separately (its layer's
#: joint plan not costed by the model): checked against the model's plan of the pass and
#: against ipusim's, which must then plan the layer separately.
SEPARATE = "if separate, "


def _partition(field: int | str, co: int, ci: int) -> str:
    """A partition as the tables state it (field, its dimensions' parts joined by a dot
    for a convolution, output and input channels)."""
    return " \N{MULTIPLICATION SIGN} ".join([f"field {field}", f"Co {co}", f"Ci {ci}"])


def _claims(cell: str) -> list[str]:
    """The checked properties of a Poplibs cell (those not marked "not established", not
    stated as what "ipusim does not" pick and not Poplibs' estimate)."""
    return [
        c for c in cell.split(";")
        if c.strip() and "not established" not in c and "ipusim does not" not in c
        and not c.strip().startswith(TIED)
        and not c.strip().startswith(("Poplibs' estimate", "Poplibs' joint estimate",
                                      "Poplibs' bounds", "Poplibs' FLOAT"))
    ]  # fmt: skip


def _forced(swap: bool, opts: dict[str, str] | None) -> dict[str, str]:
    return {**(opts or {}), "planConstraints": json.dumps({"transform": {"swapOperands": swap}})}


def _layer_costs(graph, dims, conv_pass: str) -> tuple[bool, str]:
    """Whether the fully-connected layer of the ``conv_pass`` product ``dims`` is planned
    jointly, and the joint and separate plans' estimated cycles and bytes (summed cycles
    and largest bytes of the three passes) as the table gives them."""
    layer = fwd_layer(conv_pass, dims)
    opts = parse_options({"pass": "FC_TRAINING_FWD"}, "t")
    joint = plan_joint(layer, HALF, HALF, opts, graph.getTarget())
    cycles, memory = poplin.matmul._separate_cost(graph, layer, HALF, HALF, {}, "t")
    text = f"joint {joint.cycles:,} / {joint.memory_bytes:,} B; separate {cycles:,} / {memory:,} B"
    chosen = poplin.matmul._fc_layer(graph, layer, HALF, HALF, {"pass": conv_pass}, "t")
    return chosen is not None, text


@pytest.mark.parametrize("row", PRODUCTS, ids=[r[0] for r in PRODUCTS])
def test_products(row) -> None:
    _, product, preset, fc_pass, poplibs, ipusim, forms = row
    g, m, k, n = (int(x) for x in product.split("\N{MULTIPLICATION SIGN}"))
    graph = Graph(IPUModel(preset).createDevice().getTarget())
    opts = None if fc_pass == "NONE" else {"fullyConnectedPass": fc_pass}
    plan = poplin.getPlan(graph, (g, m, k, n), HALF, HALF, opts)
    # the convolution the plan runs: A B, or B^T A^T when swapped
    run = (g, n, k, m) if plan.swapped else (g, m, k, n)
    params = poplin.matmul._params(run, HALF, HALF)
    a = poplin.createMatMulInputLHS(graph, HALF, [g, m, k], [g, k, n], "A", opts)
    b = poplin.createMatMulInputRHS(graph, HALF, [g, m, k], [g, k, n], "B", opts)
    acts, weights = (b.dimShuffle([0, 2, 1]), a) if plan.swapped else (a, b.dimShuffle([0, 2, 1]))
    conv_pass = None if opts is None else f"FC_{fc_pass}"
    rearranged = operand_rearrangements(graph, plan, conv_pass, acts, weights)
    joint = _layer_costs(graph, (g, m, k, n), conv_pass) if opts else None
    for claim in _claims(poplibs):
        assert _holds(claim, plan, params, rearranged, joint), (
            f"{product} ({fc_pass}) on {preset}: {claim!r} fails for {plan}"
        )
    limit = memory_limit(graph.getTarget(), {})
    assert ipusim == plan_summary(plan, params, limit)
    if joint is not None:  # the joint and separate plans of the layer that the rule compares
        assert forms == joint[1]
        return
    # the two operand orders the rule compares, each forced
    costs = []
    for swap in (True, False):
        p = poplin.getPlan(graph, (g, m, k, n), HALF, HALF, _forced(swap, opts))
        costs.append(f"{p.cost['total']:,} / {p.memory_bytes:,} B")
    assert forms == f"swapped {costs[0]}; unswapped {costs[1]}"


#: The prefix of a convolution row's claim of Poplibs' cost of its plain AMP plans
#: (:func:`~poplar_api.poplin.poplibs_conv2d_model.family_plan`).
FAMILY = "Poplibs' AMP-family estimate: "
#: The prefix of a convolution row's claim of SLIC's floors by form
#: (:func:`~poplar_api.poplin.poplibs_conv2d_model.slic_floors`).
SLIC_FLOORS = "SLIC floors: "
#: A convolution row's claim that every AMP form but the plain family's costs more than
#: its best (:func:`~poplar_api.poplin.poplibs_conv2d_forms.amp_floors`).
FORMS_ABOVE = "AMP forms' floors above it"


#: Row 18 (ResNet's 3x3 128 on mk1, about 7 s of CPU) states the same kinds of claims as
#: row 16 (method AMP over the MAC floor and the SLIC floors of each form, the plain AMP
#: family's estimate, the other forms' floors above it, the partition), which the default
#: suite checks in about 3 s.
_SLOW_CONVS = {"18": pytest.mark.slow(reason="row 16 checks the same kinds of claims")}


@pytest.mark.parametrize(
    "row",
    [pytest.param(r, marks=_SLOW_CONVS.get(r[0], ())) for r in CONV_ROWS],
    ids=[r[0] for r in CONV_ROWS],
)
def test_convolutions(row) -> None:
    _, name, preset, conv_pass, poplibs, ipusim = row
    params = CONVS[name]
    graph = Graph(IPUModel(preset).createDevice().getTarget())
    opts = None if conv_pass == "NONE" else {"pass": conv_pass}
    plan = poplin.getConvPlan(graph, params, opts)
    eff = expand_all_dims(params) if plan.expanded else params
    if plan.expanded and plan.expanded_dims is not None:  # (then flattened as Poplibs does)
        eff = flattened_params(expand_dims(params, plan.expanded_dims), plan.flatten_dims)
    eff = flat_params(params) if plan.flattened else eff
    floors = {"SLIC floor": slic_floor, "MAC floor": mac_vertex_floor}
    bounds: dict[str, int] = {}  # (Poplibs' cost bounds the row states)
    for claim in (c.strip() for c in _claims(poplibs)):
        if m := re.fullmatch(r"(SLIC floor|MAC floor) ([\d,]+)", claim):
            # (a lower bound of Poplibs' cost of every such plan: docs/planner.md)
            floor = floors[m.group(1)](params, graph.getTarget())
            assert f"{floor:,}" == m.group(2), f"{name} on {preset}: {claim!r}"
            bounds[m.group(1)] = floor
            continue
        if claim.startswith(SLIC_FLOORS):
            # (lower bounds of every SLIC plan by its form, "swapped none": no plan)
            got = slic_floors(params, graph.getTarget())
            text = ", ".join(f"{k} {'none' if v is None else f'{v:,}'}" for k, v in got.items())
            assert claim.removeprefix(SLIC_FLOORS) == text, f"{name} on {preset}"
            bounds["SLIC floors"] = min(v for v in got.values() if v is not None)
            continue
        if claim.startswith(FAMILY):
            # (the best plain AMP plan, an upper bound of Poplibs' plan's cost)
            family = family_plan(params, graph.getTarget())
            assert claim.removeprefix(FAMILY) == describe_family(family)
            bounds["AMP"] = family["cost"][0]
            continue
        if claim == FORMS_ABOVE:
            # (every other AMP form's floor passes the plain family's best: its plan)
            floors = amp_floors(params, graph.getTarget(), bounds["AMP"])
            assert min(floors.values()) > bounds["AMP"], floors
            continue
        assert _holds(claim, plan, eff, None), f"{name} on {preset}: {claim!r} fails: {plan}"
    if "AMP" in bounds and "method AMP" in (c.strip() for c in poplibs.split(";")):
        # the AMP is Poplibs' pick where every other method's floor passes the cost of an
        # AMP plan within the bound (docs/planner.md, "SLIC's plans of rows 16 and 18")
        assert bounds["MAC floor"] > bounds["AMP"] and bounds["SLIC floors"] > bounds["AMP"]
    assert ipusim == plan_summary(plan, eff, memory_limit(graph.getTarget(), {}))


@functools.cache
def _layer_plan(preset: str, layer: tuple[int, int, int, int]) -> dict:
    """:func:`fc_layer_plan` of a layer, once for the three rows of its passes."""
    return fc_layer_plan(layer, Graph(IPUModel(preset).createDevice().getTarget()).getTarget())


#: Product rows whose Poplibs plan is established by Poplibs' cost model, and whether its
#: search takes long enough (a serial plan of a large product) to run with the slow tests.
ESTIMATED = [r for r in PRODUCTS if "Poplibs' estimate: " in r[4]]
_SLOW = {"2", "3"}


@pytest.mark.parametrize(
    "row",
    [pytest.param(r, marks=pytest.mark.slow) if r[0] in _SLOW else r for r in ESTIMATED],
    ids=[r[0] for r in ESTIMATED],
)
def test_poplibs_plans_are_its_cost_models(row) -> None:
    """The Poplibs column of an established product row is the plan of Poplibs' cost
    model and search (:func:`poplibs_matmul_plan`): its estimate as stated, and its
    operand order, serial passes, broadcast and partition claims, whether or not
    ipusim picks them."""
    _, product, preset, fc_pass, poplibs, _, _ = row
    dims = tuple(int(x) for x in product.split("\N{MULTIPLICATION SIGN}"))
    target = Graph(IPUModel(preset).createDevice().getTarget()).getTarget()
    conv_pass = "NONE_MATMUL" if fc_pass == "NONE" else f"FC_{fc_pass}"
    plan = poplibs_matmul_plan(dims, target, conv_pass)
    assert plan["ties"] == 1
    splits = plan["splits"]
    layer = None  # (the fully-connected layer's joint and separate plans, when claimed)
    for claim in (c.strip() for c in poplibs.split(";")):
        claim = claim.replace(" (ipusim does not pick)", "").removeprefix(SEPARATE)
        if claim.startswith("Poplibs' joint estimate: ") or claim in ("joint", "separate"):
            layer = layer or _layer_plan(preset, fwd_layer(conv_pass, dims))
            assert layer["joint"]["ties"] == 1
            # the pick holds over every joint candidate: the MAC ones cost more
            assert layer["established"]
        if claim.startswith("Poplibs' joint estimate: "):
            assert claim.removeprefix("Poplibs' joint estimate: ") == describe_joint(layer["joint"])
        elif claim in ("joint", "separate"):
            assert layer["pick"] == claim
            assert layer["separate"][conv_pass]["cost"] == plan["cost"]
        elif claim.startswith("Poplibs' estimate: "):
            assert claim.removeprefix("Poplibs' estimate: ") == describe(plan)
        elif claim.startswith("partition "):
            assert claim == "partition " + _partition(
                splits["fieldSplit"], splits["outChanSplit.parallel"],
                splits["inChanSplit.parallel"],
            )  # fmt: skip
        elif claim == "swapped":
            assert plan["swapped"]
        elif claim.startswith("method "):
            assert plan["method"] == claim.split()[1]
        elif claim in ("half partials", "float partials"):
            assert plan["partials"] == claim.split()[0]
        elif m := re.fullmatch(r"grouping (\d+) / (\d+) on (\d+) units", claim):
            assert (*plan["groups"], plan["units"]) == tuple(map(int, m.groups()))
        elif claim == "inputs broadcast before the loop":
            assert plan["broadcast"]
        elif m := re.fullmatch(r"(serial|input-channel serial) (>)? ?(\d+)", claim):
            key = "outChanSplit.serial" if m.group(1) == "serial" else "inChanSplit.serial"
            n = int(m.group(3))
            assert splits[key] > n if m.group(2) else splits[key] == n, claim


CONV_ESTIMATED = [r for r in CONV_ROWS if "Poplibs' estimate: " in r[4]]


@pytest.mark.parametrize("row", CONV_ESTIMATED, ids=[r[0] for r in CONV_ESTIMATED])
def test_poplibs_conv_plans_are_its_cost_models(row) -> None:
    """The Poplibs column of an established convolution row is the plan of Poplibs'
    cost model and search (:func:`poplibs_conv_plan`, every candidate it leaves out
    bounded above it): its estimate as stated, its operand order, and its partition of
    the flattened field (one part in every field dimension but the innermost)."""
    _, name, preset, _, poplibs, _ = row
    params = CONVS[name]
    target = Graph(IPUModel(preset).createDevice().getTarget()).getTarget()
    plan = poplibs_conv_plan(params, target)
    assert plan["ties"] == 1 and plan["established"]
    s = plan["splits"]
    nd = params.getNumFieldDims()
    for claim in (c.strip() for c in poplibs.split(";")):
        if claim.startswith("Poplibs' estimate: "):
            assert claim.removeprefix("Poplibs' estimate: ") == describe(plan)
        elif claim.startswith("partition "):
            field = "\N{MIDDLE DOT}".join(["1"] * (nd - 1) + [str(s["fieldSplit"])])
            assert claim == "partition " + _partition(
                field, s["outChanSplit.parallel"], s["inChanSplit.parallel"]
            )
        elif claim in ("swapped", "unswapped"):
            assert plan["swapped"] == (claim == "swapped")
        elif claim.startswith("method "):
            assert plan["method"] == claim.split()[1]
        elif claim.startswith("serial "):
            assert s["outChanSplit.serial"] * s["inChanSplit.serial"] == int(claim.split()[1])


CONV_BOUNDED = [r for r in CONV_ROWS if "Poplibs' bounds: " in r[4]]


@pytest.mark.parametrize("row", CONV_BOUNDED, ids=[r[0] for r in CONV_BOUNDED])
def test_poplibs_float_methods_are_its_bounds(row) -> None:
    """A FLOAT convolution row whose method is established by bounds
    (:func:`float_method`: an AMP plan's cost of Poplibs' model below every horizontal-MAC
    and outer-product plan's least) states those bounds, and its "method" claim is the
    one they establish."""
    _, name, preset, conv_pass, poplibs, _ = row
    target = Graph(IPUModel(preset).createDevice().getTarget()).getTarget()
    result = float_method(CONVS[name], conv_pass, target)
    claims = [c.strip() for c in poplibs.split(";")]
    stated = [c.removeprefix("Poplibs' bounds: ") for c in claims if c.startswith("Poplibs' b")]
    assert stated == [describe_bounds(result)]
    assert result["method"] is not None and f"method {result['method']}" in claims


#: A FLOAT convolution row's claims of Poplibs' cost model
#: (:mod:`~poplar_api.poplin.poplibs_float_conv2d`): the least unswapped AMP plan, each
#: unswapped form's least cost, and that every other form's bound passes the least.
FLOAT_ESTIMATE = "Poplibs' FLOAT estimate: "
FLOAT_FORMS = "Poplibs' FLOAT forms: "
FLOAT_FLOORS = "Poplibs' FLOAT floors above it"
#: A FLOAT convolution row's claim of the partitions of its plan's cost that popsolver's
#: search reaches after the stated one (:mod:`~poplar_api.poplin.popsolver_order`).
TIED = "tied with "
TIED_END = ", which popsolver's search reaches later"
CONV_FLOAT = [r for r in CONV_ROWS if FLOAT_ESTIMATE in r[4]]


@pytest.mark.parametrize("row", CONV_FLOAT, ids=[r[0] for r in CONV_FLOAT])
def test_poplibs_float_plans_are_its_cost_models(row) -> None:
    """The Poplibs column of an established FLOAT convolution row is the plan of Poplibs'
    cost model (:func:`best_plan`, unique; every other form and method bounded above it:
    :func:`form_floors`, :func:`float_method`): its estimate and forms as stated, and its
    transform, vertex, grouping and partition claims, whether or not ipusim picks them."""
    _, name, preset, conv_pass, poplibs, _ = row
    params = CONVS[name]
    target = Graph(IPUModel(preset).createDevice().getTarget()).getTarget()
    best = best_plan(params, conv_pass, target)
    cost = best["cost"][0]
    stated_ties = 1  # (a partition claim names every tied partition, joined by "or")
    assert sorted(c for c, _ in best["forms"].values())[1] > cost
    method = float_method(params, conv_pass, target)
    assert min(method["hmac"], method["outer product"]) > cost
    for claim in (c.strip() for c in poplibs.split(";")):
        claim = re.sub(r" \(ipusim does not pick[^)]*\)$", "", claim)
        if claim.startswith(FLOAT_ESTIMATE):
            assert claim.removeprefix(FLOAT_ESTIMATE) == describe_form_plan(best)
        elif claim.startswith(FLOAT_FORMS):
            stated = ", ".join(f"{k} {c:,}" for k, (c, _) in best["forms"].items())
            assert claim.removeprefix(FLOAT_FORMS) == stated
        elif claim == FLOAT_FLOORS:
            floors = form_floors(params, conv_pass, target, cost)
            assert all(v > cost for v in floors.values() if v is not None), floors
        elif claim.startswith("expanded dimension "):
            assert FORMS[best["form"]] == tuple(int(d) for d in claim.split()[2:])
        elif claim == "no expansion":
            assert FORMS[best["form"]] == ()
        elif claim.startswith("vertex "):
            assert best["vertex name"] == claim.split()[1]
        elif m := re.fullmatch(r"grouping (\d+) / (\d+) on (\d+) units", claim):
            units, icg, ocg = best["vertex"]
            assert (icg, ocg, units) == tuple(map(int, m.groups()))
        elif claim.startswith("partition B "):
            # (of tied partitions, the one popsolver's search reaches first: popsolver_order)
            assert claim.removeprefix("partition ") == describe_partition(best["splits"])
        elif claim.startswith(TIED):
            others = claim.removeprefix(TIED).removesuffix(TIED_END).split(" or ")
            tied = [describe_partition(t) for t in best["tied splits"] if t != best["splits"]]
            assert sorted(others) == sorted(tied)
            stated_ties = 1 + len(others)
        else:  # (the model's forms are unswapped one-pass AMP plans: the floors above)
            assert claim in ("unswapped", "serial 1", "method AMP") or claim.startswith(
                "Poplibs' bounds: "
            ), f"unknown claim {claim!r} in docs/planner.md"
    assert best["ties"] == stated_ties
