"""The joint plan of a fully-connected layer's training passes (``poplin.fc_joint``).

Poplibs (graphcore/poplibs 7eac0f26, ``lib/poplin/ConvPlan.cpp`` ``createPlan``,
``getFullyConnectedBwdPlan``, ``getFullyConnectedWUPlan``; ``ConvModel.cpp``
``constructModel``, ``addBwdEstimates``, ``addWuEstimates``) plans the forward pass of
a fully-connected layer jointly with its backward and weight-update passes: swapped
operands, the batch (the swapped convolution's output channels) on every tile, the
field in grains of the vertex's input grouping; the backward partition exchanges the
forward one's field and input-channel splits, the weight update its input- and
output-channel splits; the joint cost adds the three passes' cycles. The tests check
those rules on the plans ipusim derives, the choice between the joint and the separate
plans written out from ``createPlan``, and the three products' values against numpy.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.poplin import matmul
from poplar_api.poplin.conv_planner import amp_groups, memory_limit
from poplar_api.poplin.fc_joint import (
    FC_TRAINING,
    JointPlan,
    fwd_layer,
    pass_product,
    separate_wins,
)

RNG = np.random.default_rng(2829)
LAYER = (1, 8, 128, 96)  # G, batch, input size, output size: planned jointly on "tiny"


def _graph(preset: str = "tiny") -> Graph:
    return Graph(IPUModel(preset).createDevice().getTarget())


def test_pass_products_and_layers_round_trip() -> None:
    g, b, i, o = 2, 3, 5, 7
    assert pass_product("FC_TRAINING_FWD", (g, b, i, o)) == (g, b, i, o)  # x W
    assert pass_product("FC_TRAINING_BWD", (g, b, i, o)) == (g, b, o, i)  # dy W^T
    assert pass_product("FC_TRAINING_WU", (g, b, i, o)) == (g, i, b, o)  # x^T dy
    for p in FC_TRAINING:
        assert fwd_layer(p, pass_product(p, (g, b, i, o))) == (g, b, i, o)


@pytest.mark.parametrize("in_type", [FLOAT, HALF])
def test_derived_plans_follow_the_forward_partition(in_type) -> None:
    graph = _graph()
    joint = matmul._fc_layer(graph, LAYER, in_type, in_type, {"pass": "FC_TRAINING_FWD"}, "t")
    assert isinstance(joint, JointPlan)
    fwd, bwd, wu = (joint.plans[p] for p in FC_TRAINING)
    assert all(p.swapped and p.joint for p in (fwd, bwd, wu))
    out = io.StringIO()
    dims = pass_product("FC_TRAINING_BWD", LAYER)
    opts = {"fullyConnectedPass": "TRAINING_BWD"}
    poplin.matMulReportPlan(out, graph, in_type, in_type, dims[1:3], dims[2:], opts)
    assert "isJointPlan              true" in out.getvalue()
    # (G, B, field, Co, Ci): the batch (Co of the swapped forward pass) is not split
    assert fwd.parts[3] == 1 and fwd.blocks[3] == LAYER[1]
    icg = amp_groups(in_type, FLOAT if in_type == FLOAT else HALF, graph.getTarget())[0]
    assert fwd.blocks[2] % icg == 0 or fwd.parts[2] == 1
    swap = {1: (2, 4), 2: (3, 4)}
    for n, plan in ((1, bwd), (2, wu)):
        a, c = swap[n]
        want = list(fwd.parts)
        want[a], want[c] = want[c], want[a]
        assert list(plan.parts) == want
        want_b = list(fwd.blocks)
        want_b[a], want_b[c] = want_b[c], want_b[a]
        assert list(plan.blocks) == want_b
        # each tile keeps the same block of weights in every pass
        np.testing.assert_array_equal(plan.tiles, np.swapaxes(fwd.tiles, a, c))
    assert joint.cycles == sum(p.cost["total"] for p in (fwd, bwd, wu))
    assert joint.memory_bytes <= memory_limit(graph.getTarget(), {})
    # matMul with fullyConnectedPass runs its pass of the joint plan
    for p, fc in zip(FC_TRAINING, ("TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU"), strict=True):
        dims = pass_product(p, LAYER)
        plan = poplin.getPlan(graph, dims, in_type, in_type, {"fullyConnectedPass": fc})
        assert plan == joint.plans[p]


def test_no_joint_plan_when_the_output_type_differs() -> None:
    graph = _graph()
    opts = {"pass": "FC_TRAINING_FWD"}
    assert matmul._fc_layer(graph, LAYER, HALF, FLOAT, opts, "t") is None


@pytest.mark.parametrize(
    "joint_cycles,joint_bytes,cycles,memory,want",
    [
        (100, 10, 99, 10, True),  # separate strictly faster, both fit
        (100, 10, 100, 10, False),  # a tie keeps the joint plan
        (100, 10, 101, 10, False),
        (100, 200, 500, 10, True),  # only the separate plans fit
        (100, 10, 50, 200, False),  # only the joint plan fits
        (100, 300, 50, 200, True),  # neither fits: fewer bytes win
        (100, 200, 50, 300, False),
    ],
)
def test_separate_plans_win_as_create_plan_decides(joint_cycles, joint_bytes, cycles, memory, want):
    limit = 100.0
    joint = JointPlan({}, {}, joint_cycles, joint_bytes)
    assert separate_wins(joint, cycles, memory, limit) is want
    assert separate_wins(None, cycles, memory, limit)


@pytest.mark.parametrize("layer", [LAYER, (2, 8, 64, 48)])
@pytest.mark.parametrize("in_type", [FLOAT, HALF])
def test_the_three_passes_of_a_joint_plan_match_numpy(in_type, layer) -> None:
    graph = _graph()
    assert matmul._fc_layer(graph, layer, in_type, in_type, {"pass": "FC_TRAINING_FWD"}, "t")
    check_fc_passes(layer, in_type)


def check_fc_passes(layer: tuple[int, int, int, int], in_type) -> None:
    """The ``fullyConnectedPass`` products of ``layer`` ``(G, B, I, O)`` on ``tiny``
    (planned jointly or separately, as the planner decides) against numpy."""
    g, b, i, o = layer
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    fwd_o = {"fullyConnectedPass": "TRAINING_FWD"}
    bwd_o = {"fullyConnectedPass": "TRAINING_BWD"}
    wu_o = {"fullyConnectedPass": "TRAINING_WU"}
    a_shape, w_shape = [g, b, i], [g, i, o]
    x = poplin.createMatMulInputLHS(graph, in_type, a_shape, w_shape, "x", fwd_o)
    w = poplin.createMatMulInputRHS(graph, in_type, a_shape, w_shape, "w", fwd_o)
    dy = poplin.createMatMulInputLHS(graph, in_type, [g, b, o], [g, o, i], "dy", bwd_o)
    seq = prog.Sequence()
    y = poplin.matMulGrouped(graph, x, w, seq, "fwd", fwd_o)
    dx = poplin.matMulGrouped(graph, dy, w.dimShuffle([0, 2, 1]), seq, "bwd", bwd_o)
    dw = poplin.matMulGrouped(graph, x.dimShuffle([0, 2, 1]), dy, seq, "wu", wu_o)
    dt = np.float16 if in_type == HALF else np.float32
    xv = RNG.uniform(-1, 1, (g, b, i)).astype(dt)
    wv = RNG.uniform(-1, 1, (g, i, o)).astype(dt)
    dyv = RNG.uniform(-1, 1, (g, b, o)).astype(dt)
    for name, t in (("x", x), ("w", w), ("dy", dy)):
        graph.createHostWrite(name, t)
    for name, t in (("y", y), ("dx", dx), ("dw", dw)):
        graph.createHostRead(name, t)
    engine = Engine(graph, seq)
    engine.load(device)
    for name, v in (("x", xv), ("w", wv), ("dy", dyv)):
        engine.writeTensor(name, v)
    engine.run(0)
    x64, w64, dy64 = (v.astype(np.float64) for v in (xv, wv, dyv))
    want = {
        "y": x64 @ w64,
        "dx": dy64 @ w64.transpose(0, 2, 1),
        "dw": x64.transpose(0, 2, 1) @ dy64,
    }
    for name, ref in want.items():
        got = engine.readTensor(name).astype(np.float64)
        assert got.shape == ref.shape, name
        k = {"y": i, "dx": o, "dw": b}[name]
        if in_type == HALF:  # float partials, one rounding to half at the end
            np.testing.assert_allclose(got, ref, rtol=2**-10, atol=2**-11 * np.sqrt(k))
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.sqrt(k))
