"""Poplibs' plans of convolutions whose field flattens into a product
(:mod:`poplar_api.poplin.poplibs_conv_model`, :mod:`poplar_api.poplin.poplibs_conv_plans`):
the transforms' coverage, the bounds of the candidates left out (written out here from
the formulas of docs/planner.md, not from the module), the model's plan of the
ResNet-like 1x1 layer, and ipusim running an adopted, flattened plan against numpy."""

from __future__ import annotations

import numpy as np
import pytest
from test_poplin_conv import ref_conv, run_passes

from ipusim.config import load_config
from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api.poplin.conv_planner import parse_options
from poplar_api.poplin.poplibs_conv_model import (
    flat_params,
    flat_product,
    flattenable,
    mac_vertex_floor,
    poplibs_conv_plan,
    slic_floor,
    swapped_partial_floor,
)
from poplar_api.poplin.poplibs_conv_plans import adopted_conv_plan
from poplar_api.poplin.poplibs_matmul_model import describe, poplibs_matmul_plan

RESNET_1X1 = poplin.ConvParams(HALF, 1, [56, 56], [1, 1], 64, 256)
#: A flattenable convolution whose Poplibs plan is established and runnable on the
#: 8-tile target (batch 2 over an 8 x 12 field, 64 -> 48 channels).
TINY = poplin.ConvParams(HALF, 2, [8, 12], [1, 1], 64, 48)


def _target(preset: str):
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()


def test_flattenable_and_its_product() -> None:
    assert flattenable(RESNET_1X1)
    assert flat_product(RESNET_1X1) == (1, 3136, 64, 256)
    assert flat_product(TINY) == (1, 2 * 8 * 12, 64, 48)
    flat = flat_params(TINY)
    assert (flat.batchSize, list(flat.inputFieldShape), list(flat.kernelShape)) == (
        1, [1, 192], [1, 1],
    )  # fmt: skip
    for p in (
        poplin.ConvParams(HALF, 1, [8, 8], [3, 3], 64, 64),  # a wider kernel
        poplin.ConvParams(HALF, 1, [8, 8], [1, 1], 64, 64, paddingLower=[1, 0]),
        poplin.ConvParams(HALF, 1, [8, 8], [1, 1], 64, 64, stride=[1, 2]),
        poplin.ConvParams(HALF, 1, [8, 8], [1, 1], 64, 64, inputDilation=[2, 1]),
    ):
        assert not flattenable(p), p


def test_swapped_partial_floor_is_the_amp_bound_written_out() -> None:
    """Swapped, 56 x 56 with 64 -> 256 channels: flattening neither dimension into the
    output channels leaves a 56 x 56 kernel over 256 x 3136 outputs and 1 output channel;
    flattening one leaves a 56-wide kernel over 256 x 56 outputs and 56 output channels.
    4 cycles an output position and kernel position for 16 input and 16 output channels
    over 1472 tiles."""
    t = _target("mk2-ipumodel")
    none = 4 * (256 * 3136) * 3136 * 64 * 1 // (16 * 16 * 1472)
    one = 4 * (256 * 56) * 56 * 64 * 56 // (16 * 16 * 1472)
    assert swapped_partial_floor(RESNET_1X1, t) == min(none, one) == one == 30_541


#: The 3 x 3 ResNet-like layer of docs/planner.md row 16.
RESNET_3X3 = poplin.ConvParams(HALF, 1, [56, 56], [3, 3], 64, 64, paddingLower=[1, 1],
                               paddingUpper=[1, 1])  # fmt: skip


def test_the_slic_and_mac_floors_written_out() -> None:
    """SLIC's floor from Poplibs' numbers (graphcore/poplibs 7eac0f26): constructModel's
    MAC bound at getMaxMACsPerCyclePerTile's ``min(4, 4) * 4 * 2 = 32`` HALF MACs a cycle
    (4 channels a group, the 1x4 window), plus the exchange of a tile's FLOAT partial sums
    (one grain of 4 input channels a tile: Ci / 4 partial sums of every output, 4 bytes
    each at 4 bytes a cycle). The MAC vertices' floor at the vector width, 4 HALF a cycle.
    Real MACs of the padded 3 x 3 layer: 55 + 56 + 55 = 166 outputs per dimension read a
    real input over the 3 kernel positions. The floor of the MAC vertices (``F Ci Co / (4
    T)`` for the 1x1 layer, 8,726), which the model used for SLIC before, is not SLIC's."""
    t = _target("mk2-ipumodel")
    macs = 166 * 166 * 64 * 64
    assert RESNET_3X3.getNumberOfMACs() == macs
    partials = -(-56 * 56 * 64 * (64 // 4) // 1472)
    assert slic_floor(RESNET_3X3, t) == macs // 32 // 1472 + partials == 2_396 + 2_182
    assert mac_vertex_floor(RESNET_3X3, t) == macs // (4 * 1472) == 19_169
    flat = 3136 * 64 * 256
    assert slic_floor(RESNET_1X1, t) == flat // 32 // 1472 + -(-3136 * 256 * 16 // 1472)
    assert slic_floor(RESNET_1X1, t) == 9_817 != flat // (4 * 1472)
    assert mac_vertex_floor(RESNET_1X1, t) == flat // (4 * 1472) == 8_726


def test_resnet_1x1_plan() -> None:
    """docs/planner.md row 17: unswapped (tried first, so it would win a tie), the field
    flattened and split 46 ways, 32 output-channel parts, AMP 16 / 8; the swapped form
    with both dimensions flattened into the output channels pays the three
    rearrangements (``swapOperands != isMatmulOrFullyConnectedLayer``)."""
    t = _target("mk2-ipumodel")
    plan = poplibs_conv_plan(RESNET_1X1, t)
    assert describe(plan) == (
        "unswapped, field 46 \N{MULTIPLICATION SIGN} Co 32 \N{MULTIPLICATION SIGN} Ci 1, "
        "AMP 16 / 8, 4,521 cycles / 12,064 B"
    )
    assert plan["ties"] == 1 and plan["established"]
    assert plan["mac_floor"] == 3136 * 64 * 256 // (4 * 1472) == 8_726
    assert plan["slic_floor"] == 9_817
    assert plan["forms"] == {False: (4521, 12064), True: (6221, 9152)}
    # the unswapped form rearranges nothing (only the output regroup of 8 partial
    # channels to the next layer's 16, addTransformCycleEstimate's regroupOutput)
    assert plan["terms"]["transform"] == 171
    # as a matMul the same product is planned the other way round: the rearrangements
    # fall on the unswapped order there
    mm = poplibs_matmul_plan((1, 3136, 64, 256), t, "NONE_MATMUL")
    assert mm["swapped"]


def test_not_covered_is_named() -> None:
    t = _target("mk2-ipumodel")
    with pytest.raises(ValueError, match="float/float \\(HALF/HALF needed"):
        poplibs_conv_plan(poplin.ConvParams(FLOAT, 1, [8, 8], [1, 1], 64, 64), t)
    with pytest.raises(ValueError, match="does not flatten"):
        poplibs_conv_plan(poplin.ConvParams(HALF, 1, [8, 8], [3, 3], 64, 64), t)
    with pytest.raises(ValueError, match="8 input channels"):
        poplibs_conv_plan(poplin.ConvParams(HALF, 1, [8, 8], [1, 1], 8, 64), t)


def test_adoption() -> None:
    """ipusim takes the model's plan of the 1x1 layer, flattened, and not that of a
    convolution the model does not cover, nor one with options it does not restate."""
    graph = Graph(IPUModel("mk2-ipumodel").createDevice().getTarget())
    plan = poplin.getConvPlan(graph, RESNET_1X1)
    assert plan.flattened and plan.release == "7eac0f26"
    assert (plan.parts, plan.blocks) == ((1, 1, 1, 46, 32, 1), (1, 1, 1, 69, 8, 64))
    assert (plan.in_chans_per_group, plan.out_chans_per_group) == (16, 8)
    t = graph.getTarget()
    opts = parse_options({"pass": "TRAINING_WU"}, "t")
    assert adopted_conv_plan(RESNET_1X1, opts, t) is None
    opts = parse_options({"enableFastReduce": "true"}, "t")
    assert adopted_conv_plan(RESNET_1X1, opts, t) is None
    wide = poplin.ConvParams(HALF, 1, [56, 56], [3, 3], 64, 64)
    assert adopted_conv_plan(wide, parse_options(None, "t"), t) is None


def test_flattened_plan_runs_against_numpy() -> None:
    """A flattened Poplibs plan on the 8-tile target (the batch and field as 192 positions
    split 4 ways, 2 output-channel parts): forward values against the numpy reference,
    with operands made by createInput / createWeights and the output in the public
    ``[B, C, H, W]`` order."""
    t = _target("tiny")
    model = poplibs_conv_plan(TINY, t)
    assert model["established"] and not model["swapped"]
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    plan = poplin.getConvPlan(graph, TINY)
    assert plan.flattened and plan.parts == (1, 1, 1, 4, 2, 1)
    rng = np.random.default_rng(28)
    x = rng.uniform(-1, 1, TINY.inputShape()).astype(np.float16)
    w = rng.uniform(-1, 1, TINY.weightsShape()).astype(np.float16)
    dy = np.zeros(TINY.outputShape(), np.float16)
    out, engine, _ = run_passes(TINY, x, w, dy, preset="tiny", passes=("fwd",))
    np.testing.assert_allclose(out["y"].astype(np.float64), ref_conv(x, w, TINY),
                               rtol=2e-3, atol=2e-2)  # fmt: skip
    names = {r.name for r in engine.getTrace().records}
    assert any("fwd/Convolve" in n for n in names), sorted(names)[:20]


def test_not_established_when_planning_as_f927358() -> None:
    """The bounds are of 7eac0f26's estimates: planning as f927358 the model still picks
    a plan but does not call it established, and ipusim plans the layer itself."""
    cfg = load_config("mk2-ipumodel", overrides={"software.poplibs_release": "f927358"})
    graph = Graph(IPUModel(cfg).createDevice().getTarget())
    plan = poplibs_conv_plan(RESNET_1X1, graph.getTarget(), release="f927358")
    assert not plan["established"] and not plan["swapped"]
    assert not poplin.getConvPlan(graph, RESNET_1X1).flattened


@pytest.mark.parametrize(
    ("params", "bwd_flattened"),
    [
        (poplin.ConvParams(HALF, 2, [8, 12], [1, 1], 48, 48, 2), True),  # two conv groups
        # a 1-D field, batch 4 (its gradient, 40 -> 32 channels, is ipusim's own plan: the
        # model's pick is not one ipusim takes)
        (poplin.ConvParams(HALF, 4, [48], [1], 32, 40, 2), False),
    ],
    ids=["grouped-2d", "batch4-1d"],
)
def test_flattened_passes_against_numpy(params, bwd_flattened) -> None:
    """Flattened plans of grouped convolutions on the 8-tile target, forward and
    backward-data (the gradient of a 1x1 convolution flattens too): values against
    einsum over the groups and channels, written out here."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    assert poplin.getConvPlan(graph, params).flattened
    bwd = poplin.getConvPlan(graph, poplin.getGradientParams(params))
    assert bwd.flattened == bwd_flattened
    g, ci, co = (params.numConvGroups, params.inputChannelsPerConvGroup,
                 params.outputChannelsPerConvGroup)  # fmt: skip
    b, field = params.batchSize, list(params.inputFieldShape)
    rng = np.random.default_rng(17)
    x = rng.uniform(-1, 1, params.inputShape()).astype(np.float16)
    w = rng.uniform(-1, 1, params.weightsShape()).astype(np.float16)
    dy = rng.uniform(-1, 1, params.outputShape()).astype(np.float16)
    out, _, _ = run_passes(params, x, w, dy, preset="tiny", passes=("fwd", "bwd"))
    w64 = w.astype(np.float64).reshape(g, co, ci)
    xg = x.astype(np.float64).reshape(b, g, ci, -1)
    dyg = dy.astype(np.float64).reshape(b, g, co, -1)
    y = np.einsum("goc,bgcp->bgop", w64, xg).reshape(b, g * co, *field)
    dx = np.einsum("goc,bgop->bgcp", w64, dyg).reshape(b, g * ci, *field)
    np.testing.assert_allclose(out["y"].astype(np.float64), y, rtol=2e-3, atol=2e-2)
    np.testing.assert_allclose(out["dx"].astype(np.float64), dx, rtol=2e-3, atol=2e-2)


def test_the_passes_that_rearrange_as_none() -> None:
    """``INFERENCE_FWD`` and ``TRAINING_BWD`` rearrange as ``NONE`` does
    (``addTransformCycleEstimate``: neither a weight update, a matMul nor a
    fully-connected pass), so they plan the same; ``TRAINING_FWD`` also regroups the
    weights of 8 partial channels for the backward pass: ``ceil(64 x 256 / tiles)``
    elements of 2 bytes copied at ``min(8, 8 x 2)`` bytes a cycle times 4 / 5 (256
    output channels, a multiple of the HALF grain of 4), not exchanged."""
    t = _target("mk2-ipumodel")
    none = poplibs_conv_plan(RESNET_1X1, t)
    for conv_pass in ("INFERENCE_FWD", "TRAINING_BWD"):
        assert poplibs_conv_plan(RESNET_1X1, t, conv_pass=conv_pass) == none
    fwd = poplibs_conv_plan(RESNET_1X1, t, conv_pass="TRAINING_FWD")
    s = fwd["splits"]
    tiles = s["fieldSplit"] * s["outChanSplit.parallel"] * s["inChanSplit.parallel"]
    regroup_bytes = -(-64 * 256 // tiles) * 2
    weights = -(-regroup_bytes * 5 // (8 * 4))
    # the output regroup as for NONE (the same tiles: the partition does not move)
    assert s == none["splits"] and fwd["terms"]["transform"] == 171 + weights == 175
    assert fwd["established"]
    graph = Graph(IPUModel("mk2-ipumodel").createDevice().getTarget())
    plan = poplin.getConvPlan(graph, RESNET_1X1, {"pass": "TRAINING_FWD"})
    assert plan.flattened and plan.parts == (1, 1, 1, 46, 32, 1)
    with pytest.raises(ValueError, match="pass TRAINING_WU"):
        poplibs_conv_plan(RESNET_1X1, t, conv_pass="TRAINING_WU")
