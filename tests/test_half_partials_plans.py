"""A fully-connected pass that Poplibs plans with HALF partials though its
``partialsType`` option is FLOAT runs that plan (``docs/planner.md``, "Row 9's half
partials"): ``getConvVertexAMPCandidates`` (graphcore/poplibs 7eac0f26) offers the AMP
with the output type as the partial type for at most 16 input channels and a 1x1
kernel, and the plan's partial type is its vertex type's. Checked here: the plan taken
(partials, conv units, grouping, partition) against Poplibs' model; the vertex's cycles
against Poplibs' estimator formula written out in the test; values against numpy with
one rounding to HALF of each output's single-precision sum; and the products this does
not reach (planned as f927358, more than 16 input channels, a plain product, FLOAT data).
"""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.config import load_config
from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.poplin.conv_options import parse_options
from poplar_api.poplin.poplibs_matmul_model import poplibs_matmul_plan
from poplar_api.poplin.poplibs_plans import adopted_plan

RNG = np.random.default_rng(1609)
WU = {"fullyConnectedPass": "TRAINING_WU"}
W = 6  # worker contexts


def _target(preset: str = "tiny", release: str | None = None):
    cfg = (
        preset
        if release is None
        else load_config(preset, overrides={"software.poplibs_release": release})
    )
    return Graph(IPUModel(cfg).createDevice().getTarget()).getTarget()


def _wu():
    return parse_options({"pass": "FC_TRAINING_WU"}, "t")


def _amp_half_16_units(field: int, out_groups: int = 1) -> int:
    """Poplibs' ``getConvPartial1x1SupervisorCycleEstimate`` (PerformanceEstimation.hpp
    at 7eac0f26) for HALF inputs and partials on 16 units, one conv group, one input
    group, ``out_groups`` groups of 16 output channels (one AMP pass each), ``field``
    positions shared over the 6 workers, 128-bit weight loads (16 units x 32 bytes / 16
    bytes a cycle = 32 cycles): ``50 + 6 x 7 + (12 + 1) + (10 + 1)`` = 116, plus per
    output group ``(19 - 1) + (7 + 32)`` = 57 and the zeroing pass
    ``max(max W w(n), min W w(n) + 14)``, a worker ``37 + 4 (n - 3) - 7`` (n >= 3) or
    ``(20, 31, 40)[n] + 1 - 7``."""
    elems = [field // W + (1 if w < field % W else 0) for w in range(W)]
    per = [W * ((37 + 4 * (n - 3) if n >= 3 else (20, 31, 40)[n] + 1) - 7) for n in elems]
    return 116 + out_groups * (57 + max(max(per), min(per) + 14))


def test_row_9_takes_poplibs_half_partials_plan() -> None:
    """docs/planner.md row 9 (mk2-ipumodel): the weight update of the 16 x 1000 x 1000
    layer runs Poplibs' plan, half partials on 16 units grouped 16 / 16, no cast."""
    graph = Graph(IPUModel("mk2-ipumodel").createDevice().getTarget())
    dims = (1, 1000, 16, 1000)
    model = poplibs_matmul_plan(dims, graph.getTarget(), "FC_TRAINING_WU")
    assert (model["partials"], model["units"], model["groups"]) == ("half", 16, (16, 16))
    plan = poplin.getPlan(graph, dims, HALF, HALF, WU)
    assert plan.partials_type == HALF and plan.num_conv_units == 16
    assert (plan.in_chans_per_group, plan.out_chans_per_group) == (16, 16)
    s = model["splits"]
    assert plan.parts[2:] == (s["fieldSplit"], s["outChanSplit.parallel"], 1)
    assert plan.swapped == model["swapped"]
    # one tile's block: 44 positions, 16 output channels; no reduction, no cast
    assert plan.blocks[2:] == (44, 16, 16)
    assert plan.cost["compute"] == _amp_half_16_units(44) == 473
    assert plan.cost["reduce"] == 0
    assert plan.memory_bytes == model["cost"][1]  # (Poplibs' temporary bytes, 3,328)


@pytest.mark.parametrize(
    ("m", "k", "n"),
    [(100, 16, 400), (200, 8, 300)],  # (8 input channels: padded to one group of 16)
)
def test_values_round_each_sum_once_to_half(m, k, n) -> None:
    """A weight update planned with half partials (the tiny target, its layer planned
    separately, Poplibs' plan taken) against numpy. Each HALF product is exact in single
    precision, ``ConvPartial1x1Out`` adds a group's 16 in single precision and stores
    the partial (here the output) in HALF: every output is the exact sum rounded once to
    HALF, but where the single-precision sum falls on the other side of a rounding
    boundary (the tolerance below). A vertex adding each product into HALF partials
    misses it and matches in far fewer places."""
    target = _target()
    adopted = adopted_plan((1, m, k, n), HALF, HALF, _wu(), target)
    assert adopted is not None and adopted[1].partials_type == HALF
    a = RNG.uniform(-1, 1, (m, k)).astype(np.float16)
    b = RNG.uniform(-1, 1, (k, n)).astype(np.float16)
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    assert poplin.getPlan(graph, (1, m, k, n), HALF, HALF, WU).partials_type == HALF
    A = poplin.createMatMulInputLHS(graph, HALF, [m, k], [k, n], "A", WU)
    B = poplin.createMatMulInputRHS(graph, HALF, [m, k], [k, n], "B", WU)
    seq = prog.Sequence()
    C = poplin.matMul(graph, A, B, seq, "wu", WU, HALF)
    graph.createHostWrite("a", A)
    graph.createHostWrite("b", B)
    graph.createHostRead("c", C)
    engine = Engine(graph, seq)
    engine.load(device)
    engine.writeTensor("a", a)
    engine.writeTensor("b", b)
    engine.run(0)
    c = engine.readTensor("c")
    exact = a.astype(np.float64) @ b.astype(np.float64)
    ref = exact.astype(np.float16)
    # the single-precision sum of k terms is within (k - 1) 2^-24 of the sum of their
    # magnitudes of the exact one, and its rounding to HALF within an ulp of the result
    tol = np.spacing(np.abs(ref)) + k * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b))
    assert c.dtype == np.float16
    assert np.all(np.abs(c.astype(np.float64) - exact) <= tol)
    assert np.mean(c == ref) >= 0.99
    # (the test tells half accumulation apart: each addition rounded to HALF)
    acc = np.zeros((m, n), np.float16)
    for j in range(k):
        acc = (acc.astype(np.float32) + np.outer(a[:, j], b[j]).astype(np.float32)).astype(
            np.float16
        )
    assert not np.all(np.abs(acc.astype(np.float64) - exact) <= tol)
    assert np.mean(acc == ref) < 0.95
    # the AMP compute set: the largest tile's vertex at Poplibs' estimate of its block
    plan = poplin.getPlan(graph, (1, m, k, n), HALF, HALF, WU)
    field, out_groups = plan.blocks[2], -(-plan.blocks[3] // 16)
    amp = [r for r in engine.getTrace().records if r.kind == "compute" and "Convolve" in r.name]
    assert len(amp) == 1  # (no reduction, no cast: the partials are the output)
    assert int(amp[0].tile_cycles.max()) == _amp_half_16_units(field, out_groups)


def test_not_taken_where_the_model_does_not_search_half_partials() -> None:
    """Planned as f927358 (source J's release), whose half partials' estimates the model
    does not restate; more than 16 input channels (FLOAT partials); a plain product (SLIC
    not ruled out); FLOAT data: no plan with HALF partials."""
    dims = (1, 64, 16, 64)
    old = _target("tiny", "f927358")
    assert adopted_plan(dims, HALF, HALF, _wu(), old) is None
    tiny = _target()
    wide = adopted_plan((1, 64, 32, 64), HALF, HALF, _wu(), tiny)
    assert wide is None or wide[1].partials_type == FLOAT
    plain = parse_options({"pass": "NONE_MATMUL"}, "t")
    assert adopted_plan(dims, HALF, HALF, plain, tiny) is None
    assert adopted_plan(dims, FLOAT, FLOAT, _wu(), tiny) is None
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    assert poplin.getPlan(graph, dims, FLOAT, FLOAT, WU).partials_type == FLOAT
