"""Poplibs' joint fully-connected plan as :mod:`poplar_api.poplin.poplibs_fc_joint_model`
restates it (graphcore/poplibs 7eac0f26): the candidates, how the backward and weight-update
passes derive from the forward partition, ``separatePlanHasLowerCost``, and the pick for the
layers of docs/planner.md's rows 7-12. Expected values are worked out here from the source
(``ConvPlan.cpp`` ``createPlan``, ``ConvModel.cpp`` ``addBwdEstimates`` / ``addWuEstimates``
/ ``addExchangeCycleEstimates``, ``ConvVertexType.cpp``, ``ExchangeEstimator.hpp``)."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import Graph, IPUModel
from poplar_api.poplin import poplibs_fc_joint_model as joint_model
from poplar_api.poplin.poplibs_fc_joint_model import (
    fc_layer_plan,
    fwd_vertex_types,
    separate_has_lower_cost,
    wu_vertex,
)


def _target(preset: str):
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()


@pytest.mark.parametrize(
    ("separate", "joint", "wins"),
    [
        ((9, 10), (10, 10), True),  # both fit: strictly fewer cycles
        ((10, 10), (10, 5), False),  # a tie keeps the joint plan
        ((11, 10), (10, 50), False),
        ((11, 10), (10, 101), True),  # only the separate plans fit
        ((5, 200), (1, 300), True),  # neither fits: fewer bytes
        ((5, 300), (9, 300), False),
        ((5, 200), (9, 100), False),  # only the joint plan fits
        ((5, 200), None, True),  # no joint plan (input and output types differ)
    ],
)
def test_separate_plan_has_lower_cost_as_create_plan(separate, joint, wins) -> None:
    assert separate_has_lower_cost(separate, joint, 100) is wins


def test_joint_forward_candidates_on_mk2() -> None:
    # HALF inputs, FLOAT partials: 8 conv units; AMP input groupings dividing the
    # chain's 16 weights, multiples of the 4 loaded a cycle and (joint) of the 8 units:
    # 16, 8; partial groupings 8 (the units) and 16; 32 MACs a cycle, so 8 input
    # channels (1000 needs no padding) before 16 (1008), then by grouping. Then the
    # horizontal MAC (4 MACs a cycle), multiples of 8 where the number of groups of the
    # 1000 channels drops, one partial channel: the unpadded 8, 40, 200, 1000 first
    types = fwd_vertex_types((1, 16, 1000, 1000), _target("mk2-ipumodel"))
    assert types[:8] == [
        ("AMP", (8, 8)), ("AMP", (8, 16)), ("AMP", (16, 8)), ("AMP", (16, 16)),
        ("HMAC", (8, 1)), ("HMAC", (40, 1)), ("HMAC", (200, 1)), ("HMAC", (1000, 1)),
    ]  # fmt: skip
    hmac = [g[0] for m, g in types if m == "HMAC"]
    assert all(icg % 8 == 0 for icg in hmac) and len(set(-(-1000 // i) for i in hmac)) == len(hmac)


@pytest.mark.parametrize(
    ("preset", "batch", "fwd", "expected"),
    [
        # B = 16 rounds to one group of 16: HALF partials; Mk2 has 16 units for them,
        # and 8; a partial grouping of 16 takes the 16 units (more MACs a cycle)
        ("mk2-ipumodel", 16, ("AMP", (16, 8)), ("AMP", (8, 16), 16, "half")),
        ("mk2-ipumodel", 16, ("AMP", (16, 16)), ("AMP", (16, 16), 16, "half")),
        # a partial grouping of 8 is no multiple of 16 units: 8 units, HALF before FLOAT
        ("mk2-ipumodel", 16, ("AMP", (8, 8)), ("AMP", (8, 8), 8, "half")),
        ("mk2-ipumodel", 16, ("AMP", (8, 16)), ("AMP", (16, 8), 8, "half")),
        # 1440 input channels: no HALF-partials candidate, the FLOAT units
        ("mk2-ipumodel", 1440, ("AMP", (16, 8)), ("AMP", (8, 16), 8, "float")),
        # Mk1 has 8 units for HALF partials
        ("mk1-ipumodel", 16, ("AMP", (16, 8)), ("AMP", (8, 16), 8, "half")),
        # a horizontal-MAC forward pass writes one partial channel a group: with B = 1
        # the outer product, its partials grouped by the forward input grouping
        ("mk2-ipumodel", 1, ("HMAC", (40, 1)), ("OUTER_PRODUCT", (1, 40), 0, "half")),
        # with B = 4 the AMP, unconstrained: 4 x 1000 channels with 4 / 8 FLOAT on 8
        # units need no padding, 32 MACs a cycle; HALF partials need 16 input channels
        # (4 of 16 used: 64 x 4,000 / 16,128 or 32 x 4,000 / 16,000 useful MACs)
        ("mk2-ipumodel", 4, ("HMAC", (8, 1)), ("AMP", (4, 8), 8, "float")),
    ],
)
def test_weight_update_vertex_is_the_front_candidate(preset, batch, fwd, expected) -> None:
    assert wu_vertex((1, batch, 1000, 1000), fwd[0], fwd[1], _target(preset)) == expected


def _row(splits, **want) -> int:
    at = np.ones(splits["fieldSplit"].size, bool)
    for k, v in want.items():
        at &= splits[k] == v
    return int(np.flatnonzero(at)[0])  # (the first: broadcastInputBeforeLoop 0)


def test_backward_and_weight_update_passes_derive_from_the_forward_partition() -> None:
    """16 x 1000 x 1000 on Mk2, forward AMP 16 / 16, fieldSplit 21, inChanSplit 32: a
    forward tile holds ceil(63 / 21) 16 = 48 field positions (O), ceil(63 / 32) 16 = 32
    input channels (I) and all 16 output channels (B). The backward pass exchanges the
    field and input-channel splits (field 32, input channels 48, split 21 ways), the
    weight update the channel splits (input channels B = 16 unsplit, output channels 32
    split 32 ways, field 48). Exchange (ExchangeEstimator, 4 bytes a cycle, HALF):
    ``ceil(2 (n - floor(n / split)) / 4)``, inputs at twice the rate only in the forward
    pass's tile order with an output-channel split a multiple of 2 (never here: it is 1)."""
    target = _target("mk2-ipumodel")
    splits, per, _ = joint_model._pass_costs(
        (1, 16, 1000, 1000), "AMP", (16, 16), target, "7eac0f26"
    )
    j = _row(splits, fieldSplit=21, **{"inChanSplit.parallel": 32, "outChanSplit.serial": 1})

    def xch(n: int, split: int) -> int:
        return -(-2 * (n - n // split) // 4)

    terms = {p: {k: int(v[j]) for k, v in c.terms.items()} for p, c in per.items()}
    fwd, bwd, wu = (terms[p] for p in ("FC_TRAINING_FWD", "FC_TRAINING_BWD", "FC_TRAINING_WU"))
    assert fwd["input exchange"] == 0  # (the output channels are not split)
    assert fwd["weight exchange"] == xch(32 * 16, 21)  # weights 32 x 16, field split 21
    assert bwd["input exchange"] == 0
    assert bwd["weight exchange"] == xch(48 * 16, 32)  # weights 48 x 16, field split 32
    assert wu["input exchange"] == xch(48 * 16, 32)  # inputs 48 x 16, out split 32
    assert wu["weight exchange"] == xch(16 * 32, 21)  # weights 16 x 32, field split 21
    assert all(t["padding"] == 0 for t in terms.values())  # (a full input grouping)


def test_an_input_grouping_of_eight_pads_the_kernel() -> None:
    """Forward AMP 16 / 8: the weight update groups 8 input channels (the forward
    partials) on 16 units, a conv-unit weight height of 16 / 8 = 2, so the 1-wide kernel
    is padded by a row: per tile 16 x 16 kernel zeros and field x 16 input zeros
    (addTileLevelTransformEstimates), exchanged at 4 bytes a cycle."""
    target = _target("mk2-ipumodel")
    splits, per, wu = joint_model._pass_costs(
        (1, 16, 1000, 1000), "AMP", (16, 8), target, "7eac0f26"
    )
    assert wu == ("AMP", (8, 16), 16, "half")
    j = _row(splits, fieldSplit=21, **{"inChanSplit.parallel": 63, "outChanSplit.serial": 1})
    field = 3 * 16  # ceil(63 / 21) field grains of 16
    kernel_zeros, input_zeros = 16 * 16, field * 16
    expected = -(-2 * kernel_zeros // 4) + -(-2 * input_zeros // 4)
    assert int(per["FC_TRAINING_WU"].terms["padding"][j]) == expected
    assert int(per["FC_TRAINING_FWD"].terms["padding"][j]) == 0  # (16 input channels)


@pytest.mark.parametrize(
    ("preset", "layer"),
    [("mk2-ipumodel", (1, 16, 1000, 1000)), ("mk1-ipumodel", (1, 1440, 200, 400))],
)
def test_the_table_layers_are_planned_separately(preset, layer) -> None:
    """docs/planner.md rows 7-9 and 10-12: the separate plans' summed cycles are below
    the best AMP joint plan's and below the least a MAC joint plan can cost."""
    plan = fc_layer_plan(layer, _target(preset))
    cycles = plan["separate_cost"][0]
    assert plan["pick"] == "separate" and plan["established"]
    assert cycles < plan["joint"]["cost"][0] and cycles < plan["mac_floor"]
    assert cycles == sum(s["cost"][0] for s in plan["separate"].values())


def test_a_pick_below_the_mac_floor_is_not_established() -> None:
    """1 x 1000 x 5 on Mk2: the separate plans beat the joint candidates costed, but a
    vertical-MAC joint plan's floor (its forward pass alone) is below them, so the model
    does not establish the pick."""
    plan = fc_layer_plan((1, 1, 1000, 5), _target("mk2-ipumodel"))
    assert plan["pick"] == "separate"
    assert plan["mac_floor"] < plan["separate_cost"][0]
    assert not plan["established"]


@pytest.mark.parametrize("preset", ["mk1-ipumodel", "mk2-ipumodel"])
def test_a_batch_one_layer_is_planned_jointly_on_the_horizontal_mac(preset) -> None:
    """1 x 1000 x 1000: the joint plan with a horizontal-MAC forward pass grouped by 40
    and the outer-product weight update beats the separate plans, on both generations
    (with no AMP in any pass, as the tile memory of Poplibs' own runs of the HALF layer
    says, docs/planner.md); the weight update's outer product of a tile's 40 positions
    and 40 output channels: a worker's 7 positions, one group of 40 channels,
    ``getOuterProductCycleEstimate`` HALF fast path ``25 + (10 + 7 (6 + (40 - 12) / 4))``
    = 126, times 6 workers."""
    plan = fc_layer_plan((1, 1, 1000, 1000), _target(preset))
    assert plan["pick"] == "joint" and plan["established"]
    joint = plan["joint"]
    assert (joint["method"], joint["groups"]) == ("HMAC", (40, 1))
    assert joint["wu_vertex"] == ("OUTER_PRODUCT", (1, 40), 0, "half")
    assert joint["passes"]["FC_TRAINING_WU"][1]["compute"] == (25 + 10 + 7 * (6 + 28 // 4)) * 6


#: The HALF layers of source J's fully-connected rows
#: (``examples/calibration/fc_fully_connected.py``).
J_HALF_LAYERS = [(1440, 100, 200), (1440, 200, 400), (16, 1324, 100), (80, 1324, 100)] + [
    (b, 1000, o) for b in (1, 4, 8, 16) for o in (1000, 5)
]


@pytest.mark.slow
@pytest.mark.parametrize("preset", ["mk1-ipumodel", "mk2-ipumodel"])
@pytest.mark.parametrize("layer", J_HALF_LAYERS, ids=["x".join(map(str, x)) for x in J_HALF_LAYERS])
def test_ipusim_plans_the_j_layers_as_poplibs_where_established(preset, layer) -> None:
    """ipusim's choice between the joint and the separate plans (its own estimates,
    ``poplin.matmul._fc_layer``) is Poplibs' where the model establishes it, and a joint
    plan has Poplibs' forward method, grouping and partition (``fieldSplit`` x
    ``inChanSplit``)."""
    from poplar_api import HALF, poplin

    graph = Graph(IPUModel(preset).createDevice().getTarget())
    dims = (1, *layer)
    model = fc_layer_plan(dims, graph.getTarget())
    if not model["established"]:
        pytest.skip(f"{dims} on {preset}: the model does not establish Poplibs' pick")
    ipusim = poplin.matmul._fc_layer(graph, dims, HALF, HALF, {"pass": "TRAINING_FWD"}, "t")
    assert (ipusim is not None) == (model["pick"] == "joint")
    if ipusim is not None:
        fwd, joint = ipusim.plans["FC_TRAINING_FWD"], model["joint"]
        assert (fwd.method, fwd.in_chans_per_group) == (joint["method"], joint["groups"][0])
        splits = joint["splits"]
        assert (fwd.parts[2], fwd.parts[4]) == (
            splits["fieldSplit"],
            splits["inChanSplit.parallel"],
        )
