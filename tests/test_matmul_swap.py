"""matMul's swapped operands, as Poplibs' planner considers them.

Poplibs (graphcore/poplibs 7eac0f26, ``lib/poplin/ConvPlan.cpp``) plans a matmul
``A B`` both as the convolution of ``A`` with ``B`` and, with the ``swapOperands``
transform, as that of ``B^T`` with ``A^T`` (batch and output channels exchanged);
``getSwapOperandCandidates`` tries the swapped form first for matmuls and the
fully-connected passes, and ``createPlan`` replaces its best plan only at a strictly
lower ``(cycles, temporary bytes)``, so a tie keeps the swapped plan. The tests check
the rule (for a fully-connected training pass when its layer is not planned jointly,
:mod:`poplar_api.poplin.fc_joint`) against the two forms' plans (each forced through
``planConstraints`` ``0.transform.swapOperands``), the values against numpy, and the
memory-bound steps of ``runPlanner`` written out again.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.errors import GraphError
from poplar_api.poplin.conv_planner import bound_step, memory_limit
from poplar_api.poplin.fc_joint import fwd_layer
from tests.test_poplin import run_product

RNG = np.random.default_rng(2828)


def _forced(swap: bool, method: str | None = None, **more: str) -> dict[str, str]:
    constraints: dict = {"0": {"transform": {"swapOperands": swap}}}
    if method:
        constraints["method"] = method
    return {"planConstraints": json.dumps(constraints), **more}


def _graph(preset: str) -> Graph:
    return Graph(IPUModel(preset).createDevice().getTarget())


def test_a_square_product_ties_and_keeps_the_swapped_plan() -> None:
    # M == N: the swapped convolution is the same convolution; with K = 20 not a multiple
    # of the AMP's 16 input channels and 90 not of its 8 partial channels, both forms
    # rearrange inputs, weights and output (padInChannels, padPartialChannels), so both
    # cost the same
    graph = _graph("mk2-ipumodel")
    shape = (1, 90, 20, 90)
    amp = {"planConstraints": '{"method": "AMP"}'}
    plan = poplin.getPlan(graph, shape, HALF, options=amp)
    unswapped = poplin.getPlan(graph, shape, HALF, options=_forced(False, "AMP"))
    swapped = poplin.getPlan(graph, shape, HALF, options=_forced(True, "AMP"))
    assert swapped.cost["transform"] > 0
    assert unswapped.cost["total"] == swapped.cost["total"]
    assert unswapped.memory_bytes == swapped.memory_bytes
    assert plan.swapped and swapped.swapped and not unswapped.swapped


@pytest.mark.parametrize(
    "preset,shape,fc_pass",
    [
        ("mk2-ipumodel", (1, 1000, 256, 10000), "NONE"),
        ("mk1-ipumodel", (1, 1000, 512, 30000), "NONE"),
        ("mk2-ipumodel", (1, 200, 64, 10000), "NONE"),
        ("mk2-ipumodel", (1, 16, 1000, 1000), "TRAINING_FWD"),
        ("mk1-ipumodel", (1, 1440, 400, 200), "TRAINING_BWD"),
        ("mk1-ipumodel", (1, 200, 1440, 400), "TRAINING_WU"),
    ],
)
def test_the_form_with_the_lower_cost_is_kept(preset, shape, fc_pass) -> None:
    graph = _graph(preset)
    opts = {"fullyConnectedPass": fc_pass}
    plan = poplin.getPlan(graph, shape, HALF, HALF, opts)
    forms = {s: poplin.getPlan(graph, shape, HALF, HALF, _forced(s, **opts)) for s in (True, False)}
    limit = memory_limit(graph.getTarget(), {})
    tile = graph.getTarget().getBytesPerTile()

    def key(p):
        return (bound_step(p.memory_bytes, limit, tile), p.cost["total"], p.memory_bytes)

    # a fully-connected training pass planned jointly is its pass of the joint plan
    # (always swapped); otherwise swapped first, the unswapped form only when strictly
    # cheaper
    joint = None
    if fc_pass != "NONE":
        conv_pass = f"FC_{fc_pass}"
        layer = fwd_layer(conv_pass, shape)
        joint = poplin.matmul._fc_layer(graph, layer, HALF, HALF, {"pass": conv_pass}, "t")
    if joint is not None:
        assert plan.swapped and plan == joint.plans[f"FC_{fc_pass}"]
        return
    want = not key(forms[False]) < key(forms[True])
    assert plan.swapped == want
    assert plan == forms[want]


def test_bound_steps_follow_run_planners_doubling() -> None:
    limit, tile = 100.0, 1000
    # bounds tried: 100, then 200, 400, 800, 1600, 3200 (the loop stops once a bound
    # reaches twice the tile), then none
    cases = {0: 0, 100: 0, 101: 1, 200: 1, 201: 2, 1600: 4, 1601: 5, 3200: 5, 3201: 6}
    for memory, step in cases.items():
        assert bound_step(memory, limit, tile) == step, memory


@pytest.mark.parametrize("swap", [True, False])
@pytest.mark.parametrize("shape", [(24, 20, 12), (5, 33, 70), (64, 16, 8)])
def test_both_forms_match_numpy(shape, swap) -> None:
    m, k, n = shape
    a = RNG.uniform(-1, 1, (m, k)).astype(np.float32)
    b = RNG.uniform(-1, 1, (k, n)).astype(np.float32)
    c, _, _ = run_product("tiny", a, b, opts=_forced(swap))
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-6 * np.sqrt(k))


@pytest.mark.parametrize("fc_pass", ["TRAINING_FWD", "TRAINING_BWD", "TRAINING_WU"])
def test_swapped_grouped_products_of_created_operands_match_numpy(fc_pass) -> None:
    g, m, k, n = 2, 12, 40, 36
    a = RNG.uniform(-1, 1, (g, m, k)).astype(np.float32)
    b = RNG.uniform(-1, 1, (g, k, n)).astype(np.float32)
    opts = _forced(True, fullyConnectedPass=fc_pass)
    c, _, graph = run_product("tiny", a, b, grouped=True, opts=opts, layout="created")
    assert poplin.getPlan(graph, (g, m, k, n), FLOAT, options=opts).swapped
    np.testing.assert_allclose(c, np.einsum("gmk,gkn->gmn", a, b), rtol=1e-5, atol=1e-6)


def test_created_operands_of_a_swapped_plan_are_laid_out_as_its_convolution_wants() -> None:
    # swapped, A is the convolution's weights and B^T its activations: each tile holds
    # whole runs of A's rows (output channels) and of B's columns (field positions)
    graph = _graph("tiny")
    m, k, n = 64, 32, 48
    opts = _forced(True)
    A = poplin.createMatMulInputLHS(graph, HALF, [m, k], [k, n], "A", opts)
    B = poplin.createMatMulInputRHS(graph, HALF, [m, k], [k, n], "B", opts)
    w = poplin.createWeights(
        graph, poplin.ConvParams(HALF, 1, [n], [1], k, m), "W", {"planConstraints": "{}"}
    )
    x = poplin.createInput(graph, poplin.ConvParams(HALF, 1, [n], [1], k, m), "X", {})
    want_a = graph.getTileMapping(w.reshape([m, k]))
    want_b = graph.getTileMapping(x.reshape([k, n]))
    assert graph.getTileMapping(A) == want_a
    assert graph.getTileMapping(B) == want_b


def test_the_report_says_when_operands_are_swapped() -> None:
    graph = _graph("tiny")
    out = io.StringIO()
    poplin.matMulReportPlan(out, graph, HALF, HALF, [32, 16], [16, 32], _forced(True))
    assert "swapOperands             true" in out.getvalue()
    out = io.StringIO()
    poplin.matMulReportPlan(out, graph, HALF, HALF, [32, 16], [16, 32], _forced(False))
    assert "swapOperands             false" in out.getvalue()


def test_bad_swap_constraints_are_named() -> None:
    graph = _graph("tiny")
    bad = {"planConstraints": '{"0": {"transform": {"swapOperands": "yes"}}}'}
    with pytest.raises(GraphError, match=r"swapOperands='yes'.*true or false"):
        poplin.getPlan(graph, (1, 8, 8, 8), FLOAT, options=bad)
    A = graph.addVariable(FLOAT, [1, 8, 4], "in")
    graph.setTileMapping(A, 0)
    params = poplin.ConvParams(FLOAT, 1, [4], [1], 8, 8)
    W = poplin.createWeights(graph, params, "w", {})
    with pytest.raises(GraphError, match="swapOperands=true is not modelled"):
        poplin.convolution(graph, A, W, params, False, prog.Sequence(), "conv", _forced(True))
