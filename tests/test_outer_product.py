"""The ``poplin::OuterProduct`` vertex and the convolution pass that runs on it.

Poplibs (graphcore/poplibs 7eac0f26): ``lib/poplin/codelets/OuterProduct.cpp`` (the
vertex), ``getOuterProductCycleEstimate`` in ``lib/poplin/PerformanceEstimation.hpp``
(its cycles) and ``createOuterProductVertex`` in ``lib/poplin/ConvVertices.cpp`` (one
vertex per worker piece of the field and conv group). Values are checked against numpy
products rounded once to the element type; cycle counts against the estimator's
formulas written out here.
"""

from __future__ import annotations

import io

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.estimators import outer_product_cycles
from poplar_api.poplin.outer_product import (
    OUTER_PRODUCT,
    outer_product_conv,
)

RNG = np.random.default_rng(28)


def _formula(is_float: bool, width: int, chans: int, cpg: int) -> int:
    groups = chans // cpg
    if is_float:
        if cpg >= 6 and cpg % 2 == 0:
            return 25 + groups * (11 + width * (6 + (cpg - 6) // 2))
        return 25 + groups * (11 + width * (10 + cpg * 2))
    if cpg >= 12 and cpg % 4 == 0:
        return 25 + groups * (10 + width * (6 + (cpg - 12) // 4))
    return 25 + groups * (10 + width * (10 + (cpg * 5) // 2))


@pytest.mark.parametrize("is_float", [True, False])
@pytest.mark.parametrize(("width", "chans", "cpg"),
                         [(1, 1, 1), (7, 8, 8), (40, 24, 8), (3, 32, 16), (5, 12, 12), (9, 6, 6),
                          (4, 12, 4), (2, 10, 2)])  # fmt: skip
def test_cycle_estimate_is_poplibs_formula(is_float, width, chans, cpg) -> None:
    assert outer_product_cycles(is_float, width, chans, cpg) == _formula(
        is_float, width, chans, cpg
    )


def test_cycle_estimate_refuses_channels_off_the_grouping() -> None:
    with pytest.raises(ValueError, match="multiple of chans_per_group"):
        outer_product_cycles(True, 4, 10, 4)


def _plan(parts, blocks, cpg, tiles) -> ConvPlan:
    used = int(np.prod(parts))
    return ConvPlan(
        method=OUTER_PRODUCT, parts=tuple(parts), blocks=tuple(blocks), in_chans_per_group=1,
        out_chans_per_group=cpg, num_conv_units=1, conv_input_load_elems=1,
        partials_type=FLOAT, tiles=(np.arange(used) * tiles // used).reshape(parts),
    )  # fmt: skip


@pytest.mark.parametrize("t", [FLOAT, HALF])
@pytest.mark.parametrize(("groups", "field", "co", "cpg", "parts"),
                         [(1, 50, 24, 8, (1, 1, 3, 3, 1)), (2, 13, 10, 4, (2, 1, 2, 2, 1)),
                          (1, 5, 7, 1, (1, 1, 1, 1, 1))])  # fmt: skip
def test_outer_product_values_and_cycles(t, groups, field, co, cpg, parts) -> None:
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    tiles = graph.getTarget().getNumTiles()
    cog = -(-co // cpg)
    bco = -(-cog // parts[3]) * cpg
    blocks = (-(-groups // parts[0]), 1, -(-field // parts[2]), bco, 1)
    plan = _plan(parts, blocks, cpg, tiles)
    params = ConvParams(t, 1, [field], [1], 1, co, groups, outputType=t)
    acts = graph.addVariable(t, [groups, field, 1], "acts")
    weights = graph.addVariable(t, [groups, co, 1], "weights")
    graph.setTileMapping(acts, 0)
    graph.setTileMapping(weights, 1)
    seq = prog.Sequence()
    out = outer_product_conv(graph, acts, weights, params, plan, seq, "op")
    assert out.shape() == [groups, co, field]
    graph.createHostRead("out", out)
    graph.createHostWrite("acts", acts)
    graph.createHostWrite("weights", weights)
    np_t = np.float32 if t == FLOAT else np.float16
    a = RNG.standard_normal((groups, field, 1)).astype(np_t)
    w = RNG.standard_normal((groups, co, 1)).astype(np_t)
    eng = Engine(graph, seq)
    eng.load(IPUModel("tiny").createDevice())
    eng.writeTensor("acts", a)
    eng.writeTensor("weights", w)
    eng.run()
    got = np.zeros((groups, co, field), np_t)
    eng.readTensor("out", got)
    want = (w.astype(np.float32) * a[:, :, 0].astype(np.float32)[:, None, :]).astype(np_t)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("t", [FLOAT, HALF])
def test_vertex_estimate_reads_the_grouping_from_its_fields(t) -> None:
    from poplar_api.poplin.outer_product import outer_product_vertex

    cls = outer_product_vertex(t)
    assert cls.typeName == f"poplin::OuterProduct<{t.name}>"
    sizes = {"in": 7, "weights": 24, "out": [56, 56, 56], "chansPerGroup": 1}
    assert cls.getCycleEstimate(sizes, None) == _formula(t == FLOAT, 7, 24, 8)


@pytest.mark.parametrize("t", [FLOAT, HALF])
@pytest.mark.parametrize("layer", [(1, 1, 128, 96), (2, 1, 128, 96)])
def test_batch_one_layer_updates_weights_on_the_outer_product(t, layer) -> None:
    """A batch-1 layer planned jointly with the horizontal MAC on ``tiny``: its weight
    update runs on OuterProduct vertices (``getFullyConnectedWUMethod``), and the three
    products agree with numpy (the update's exactly: one rounded product per element)."""
    from poplar_api import poplin
    from poplar_api.poplin.fc_joint import pass_product
    from tests.test_fc_joint import check_fc_passes

    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    opts = {"fullyConnectedPass": "TRAINING_WU"}
    plan = poplin.getPlan(graph, pass_product("FC_TRAINING_WU", layer), t, t, opts)
    assert plan.method == OUTER_PRODUCT and plan.joint
    assert plan.in_chans_per_group == 1 and plan.partials_type == t
    text = io.StringIO()
    dims = pass_product("FC_TRAINING_WU", layer)
    poplin.matMulReportPlan(text, graph, t, t, dims[1:3], dims[2:], opts)
    assert "method                   OUTER_PRODUCT" in text.getvalue()
    assert "vertex                   poplin::OuterProduct" in text.getvalue()
    check_fc_passes(layer, t)


@pytest.mark.parametrize(("preset", "m", "n"), [("tiny", 1000, 5), ("mk2-ipumodel", 7, 1000)])
def test_product_of_one_input_channel_planned_alone(preset, m, n) -> None:
    """A HALF matMul ``[m, 1] x [1, n]`` planned alone takes the outer product where it
    is the cheapest candidate (Poplibs offers it: ``addOuterProductConstraints``), in
    either operand order, and its values are numpy's products rounded to half."""
    from poplar_api import poplin

    device = IPUModel(preset).createDevice()
    graph = Graph(device.getTarget())
    plan = poplin.getPlan(graph, (1, m, 1, n), HALF, HALF, {})
    assert plan.method == OUTER_PRODUCT and not plan.joint
    a = graph.addVariable(HALF, [m, 1], "a")
    b = graph.addVariable(HALF, [1, n], "b")
    graph.setTileMapping(a, 0)
    graph.setTileMapping(b, 1)
    seq = prog.Sequence()
    c = poplin.matMul(graph, a, b, seq, "op")
    for name, t in (("a", a), ("b", b)):
        graph.createHostWrite(name, t)
    graph.createHostRead("c", c)
    av = RNG.standard_normal((m, 1)).astype(np.float16)
    bv = RNG.standard_normal((1, n)).astype(np.float16)
    eng = Engine(graph, seq)
    eng.load(device)
    eng.writeTensor("a", av)
    eng.writeTensor("b", bv)
    eng.run()
    want = (av.astype(np.float32) * bv.astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(eng.readTensor("c"), want)


def test_half_partials_group_the_horizontal_mac_outputs_in_twos() -> None:
    """With HALF partials the horizontal MAC writes two partial channels per group
    (Poplibs' ``getConvVertexHMACCandidates``: its half-partials loop handles two), so
    a batch-1 layer's joint plan never gives the weight update to the outer product
    (``getFullyConnectedWUMethod`` asks for one output channel per group); with FLOAT
    partials it does (the test above)."""
    from poplar_api import poplin
    from poplar_api.poplin.conv_planner import hmac_partial_chans
    from poplar_api.poplin.fc_joint import _fwd_vertex_types, pass_product

    assert (hmac_partial_chans("HMAC", HALF), hmac_partial_chans("HMAC", FLOAT)) == (2, 1)
    assert hmac_partial_chans("VMAC", HALF) == 1
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    layer = (1, 1, 128, 96)
    for t, partials in ((HALF, HALF), (HALF, FLOAT)):
        cands = _fwd_vertex_types(layer, t, partials, graph.getTarget())
        hmac = [ocg for method, _, ocg in cands if method[0] == "HMAC"]
        assert hmac and set(hmac) == {2 if partials == HALF else 1}
    opts = {"fullyConnectedPass": "TRAINING_WU", "partialsType": "half"}
    plan = poplin.getPlan(graph, pass_product("FC_TRAINING_WU", layer), HALF, HALF, opts)
    assert plan.method != OUTER_PRODUCT
    fwd = {"fullyConnectedPass": "TRAINING_FWD", "partialsType": "half",
           "planConstraints": '{"method": "HMAC"}'}  # fmt: skip
    plan = poplin.getPlan(graph, pass_product("FC_TRAINING_FWD", layer), HALF, HALF, fwd)
    assert plan.method == "HMAC" and plan.out_chans_per_group == 2


@pytest.mark.parametrize("n", [7, 8])
def test_half_partials_horizontal_mac_values(n) -> None:
    """A HALF product with HALF partials planned on the horizontal MAC runs the
    ``<half,half>`` vertex (two partial channels per group, as Poplibs pairs them;
    ``n`` output channels odd or even) and gives numpy's product to half precision."""
    from poplar_api import poplin

    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    opts = {"partialsType": "half"}
    plan = poplin.getPlan(graph, (1, 2, 64, n), HALF, HALF, opts)
    assert (plan.method, plan.out_chans_per_group, plan.partials_type) == ("HMAC", 2, HALF)
    a = poplin.createMatMulInputLHS(graph, HALF, [2, 64], [64, n], "a", opts)
    b = poplin.createMatMulInputRHS(graph, HALF, [2, 64], [64, n], "b", opts)
    seq = prog.Sequence()
    c = poplin.matMul(graph, a, b, seq, "c", opts)
    graph.createHostWrite("a", a)
    graph.createHostWrite("b", b)
    graph.createHostRead("c", c)
    rng = np.random.default_rng(7)
    av = rng.uniform(-1, 1, (2, 64)).astype(np.float16)
    bv = rng.uniform(-1, 1, (64, n)).astype(np.float16)
    engine = Engine(graph, seq)
    engine.load(device)
    engine.writeTensor("a", av)
    engine.writeTensor("b", bv)
    engine.run(0)
    got = np.empty((2, n), np.float16)
    engine.readTensor("c", got)
    want = av.astype(np.float64) @ bv.astype(np.float64)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=0.06)
