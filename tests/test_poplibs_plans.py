"""ipusim's planner takes Poplibs' plan of a HALF matMul product where the restatement of
Poplibs' planner covers it (:mod:`poplar_api.poplin.poplibs_plans`): the plan ``matMul``
runs has the operand order, partition, serial passes and AMP grouping that
:func:`~poplar_api.poplin.poplibs_matmul_model.poplibs_matmul_plan` picks (computed here
by the model, independently of ``docs/planner.md``'s table); where the model's plan is
one ipusim cannot run, or the product is not covered, ipusim's own search plans it; and
an adopted plan's values match numpy."""

from __future__ import annotations

import json

import numpy as np
import pytest

from poplar_api import HALF, Graph, IPUModel, poplin
from poplar_api.poplin import matmul as mm
from poplar_api.poplin.conv_options import parse_options
from poplar_api.poplin.poplibs_matmul_model import poplibs_matmul_plan
from poplar_api.poplin.poplibs_plans import adopted_plan, model_plan
from tests.test_poplin import run_product

RNG = np.random.default_rng(5151)


def _graph(preset: str) -> Graph:
    return Graph(IPUModel(preset).createDevice().getTarget())


def _own_plan(graph: Graph, dims, opts=None, monkeypatch=None):
    """The plan of ipusim's own search (the adoption switched off)."""
    monkeypatch.setattr(mm, "adopted_plan", lambda *a, **k: None)
    try:
        return poplin.getPlan(graph, dims, HALF, HALF, opts)
    finally:
        monkeypatch.undo()


# (preset, (G, M, K, N), fullyConnectedPass): plain products of several sizes and
# fully-connected passes planned alone, on both generations and the 8-tile target
AGREE = [
    ("mk2-ipumodel", (1, 1000, 256, 10000), "NONE"),
    ("mk2-ipumodel", (1, 600, 512, 20000), "NONE"),
    ("mk2-ipumodel", (1, 600, 64, 10000), "NONE"),
    ("mk1-ipumodel", (1, 600, 64, 30000), "NONE"),
    ("mk1-ipumodel", (1, 200, 512, 30000), "NONE"),
    # 3 output-channel passes of 336, 336 and 328 of the 1000 channels: the last padded
    ("mk1-ipumodel", (1, 1000, 256, 30000), "NONE"),
    # the same passes of 1000 x 512 x 30000 on Mk2, the inputs broadcast before the loop
    ("mk2-ipumodel", (1, 1000, 512, 30000), "NONE"),
    ("mk1-ipumodel", (2, 300, 128, 6000), "NONE"),
    ("mk1-ipumodel", (1, 1440, 200, 400), "TRAINING_FWD"),
    ("mk1-ipumodel", (1, 200, 1440, 400), "TRAINING_WU"),
    ("tiny", (1, 64, 128, 1024), "NONE"),
    ("tiny", (1, 40, 48, 72), "NONE"),
    ("tiny", (1, 100, 200, 30), "NONE"),
]


@pytest.mark.parametrize(("preset", "dims", "fc_pass"), AGREE)
def test_the_planner_takes_the_models_plan(preset, dims, fc_pass) -> None:
    graph = _graph(preset)
    conv_pass = "NONE_MATMUL" if fc_pass == "NONE" else f"FC_{fc_pass}"
    model = poplibs_matmul_plan(dims, graph.getTarget(), conv_pass)
    opts = None if fc_pass == "NONE" else {"fullyConnectedPass": fc_pass}
    plan = poplin.getPlan(graph, dims, HALF, HALF, opts)
    s = model["splits"]
    assert plan.method == "AMP" and not plan.joint
    assert plan.swapped == model["swapped"]
    assert (plan.in_chans_per_group, plan.out_chans_per_group) == model["groups"]
    assert plan.parts[0] == s["convGroupSplit"]
    assert plan.parts[2:] == (s["fieldSplit"], s["outChanSplit.parallel"],
                              s["inChanSplit.parallel"])  # fmt: skip
    assert (plan.serial, plan.in_serial) == (s["outChanSplit.serial"], s["inChanSplit.serial"])
    assert plan.broadcast == model["broadcast"]


def test_one_of_them_is_a_serial_plan() -> None:
    """(1, 64, 128, 1024) on the 8-tile target: the model's plan runs in 8 output-channel
    passes, and ipusim runs them."""
    plan = poplin.getPlan(_graph("tiny"), (1, 64, 128, 1024), HALF, HALF)
    assert plan.serial == 8


def test_a_padded_serial_plan_is_taken() -> None:
    """1000 x 256 x 30000 on Mk1 (docs/planner.md, row 2): the model's 3 output-channel
    passes share the 1000 channels' 125 grains of 8 as 42, 42 and 41 (Poplibs'
    ``getOutChansPerSerialSplit``), and ipusim runs them so (the last padded)."""
    plan = poplin.getPlan(_graph("mk1-ipumodel"), (1, 1000, 256, 30000), HALF, HALF)
    assert plan.swapped and plan.serial == 3 and plan.serial_chans == 42 * 8
    assert plan.parts[2:] == (202, 6, 1)


def test_the_models_plan_differs_from_ipusims_own_on_a_listed_product(monkeypatch) -> None:
    """So that the agreement above is the adoption's doing: ipusim's own search gives
    1000 x 256 x 10000 on Mk2 field 70 x Co 21, the model field 35 x Co 42."""
    graph = _graph("mk2-ipumodel")
    own = _own_plan(graph, (1, 1000, 256, 10000), None, monkeypatch)
    assert own.parts[2:] == (70, 21, 1)
    assert poplin.getPlan(_graph("mk2-ipumodel"), (1, 1000, 256, 10000), HALF).parts[2:] == (
        35, 42, 1,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("preset", "dims", "why"),
    [
        # 16 partial channels per group: ipusim's AMP has 8 conv units
        ("mk1-ipumodel", (1, 512, 256, 512), "groups"),
        # M K N / (4 T) = 2,717 cycles, below the model's 3,703: a SLIC plan may be cheaper
        ("mk2-ipumodel", (1, 16, 1000, 1000), "bound"),
    ],
)
def test_plans_ipusim_cannot_run_or_not_beyond_doubt_fall_back(preset, dims, why, monkeypatch):
    graph = _graph(preset)
    target = graph.getTarget()
    opts = parse_options({"pass": "NONE_MATMUL"}, "t")
    model = model_plan(dims, opts, target)
    if why == "bound":
        assert model is None
        full = poplibs_matmul_plan(dims, target)
        assert dims[1] * dims[2] * dims[3] // (4 * target.getNumTiles()) <= full["cost"][0]
    else:
        assert model is not None
        assert model["groups"] == (16, 16)
    assert adopted_plan(dims, HALF, HALF, opts, target) is None
    own = _own_plan(_graph(preset), dims, None, monkeypatch)
    plan = poplin.getPlan(graph, dims, HALF, HALF)
    assert (plan.parts, plan.serial, plan.in_serial, plan.swapped) == (
        own.parts, own.serial, own.in_serial, own.swapped,
    )  # fmt: skip


def test_remap_output_tensor_is_covered() -> None:
    """``remapOutputTensor`` (which the fully-connected J workload passes) only remaps the
    output after the convolution in Poplibs (``Convolution.cpp``); its planner does not read
    it, so a product with it is planned as without it."""
    graph = _graph("mk1-ipumodel")
    target = graph.getTarget()
    plain = mm._options({"fullyConnectedPass": "TRAINING_FWD"})
    remap = mm._options({"fullyConnectedPass": "TRAINING_FWD", "remapOutputTensor": "false"})
    dims = (1, 1440, 200, 400)
    with_remap = adopted_plan(dims, HALF, HALF, remap, target)
    assert with_remap is not None
    assert with_remap[1].parts == adopted_plan(dims, HALF, HALF, plain, target)[1].parts


@pytest.mark.parametrize(
    "options",
    [
        {"enableFastReduce": "true"},
        {"partialsType": "half"},
        {"planConstraints": json.dumps({"method": "HMAC"})},
    ],
)
def test_other_options_are_not_covered(options) -> None:
    graph = _graph("mk2-ipumodel")
    opts = mm._options(options)
    assert adopted_plan((1, 1000, 256, 10000), HALF, HALF, opts, graph.getTarget()) is None


def test_float_and_few_input_channels_are_not_covered() -> None:
    target = _graph("mk2-ipumodel").getTarget()
    opts = parse_options({"pass": "NONE_MATMUL"}, "t")
    assert adopted_plan((1, 1000, 16, 10000), HALF, HALF, opts, target) is None
    from poplar_api import FLOAT

    assert adopted_plan((1, 1000, 256, 10000), FLOAT, FLOAT, opts, target) is None


@pytest.mark.parametrize(("shape", "serial"), [((40, 48, 72), 1), ((100, 200, 30), 1),
                                               ((24, 80, 1320), 3)])  # fmt: skip
def test_adopted_plans_match_numpy(shape, serial) -> None:
    """Adopted plans of one pass and (24 x 80 x 1320: 3 output-channel passes of 8 of the
    swapped product's 24 channels) a serial loop, run against numpy (padded loops:
    ``tests/test_conv_serial_padded.py``)."""
    m, k, n = shape
    target = _graph("tiny").getTarget()
    adopted = adopted_plan((1, m, k, n), HALF, HALF, parse_options({"pass": "NONE_MATMUL"}, "t"),
                           target)  # fmt: skip
    assert adopted is not None and adopted[1].serial * adopted[1].in_serial == serial
    a = RNG.uniform(-1, 1, (m, k)).astype(np.float16)
    b = RNG.uniform(-1, 1, (k, n)).astype(np.float16)

    def make(graph):  # operands laid out as the plan wants (one tile cannot hold B)
        A = poplin.createMatMulInputLHS(graph, HALF, [m, k], [k, n], "A")
        B = poplin.createMatMulInputRHS(graph, HALF, [m, k], [k, n], "B")
        return A, B, [(A, a), (B, b)]

    c, _, _ = run_product("tiny", a, b, HALF, make=make)
    ref = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(c.astype(np.float64), ref, rtol=2e-3, atol=2e-2)
