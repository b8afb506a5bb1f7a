"""matMul's rearrangement of its operands before the exchange, as Poplibs' does it.

The rules (graphcore/poplibs 7eac0f26, ``lib/poplin/Convolution.cpp``): an operand is
copied into the plan's layout in the weight-update passes, when it is broadcast to more
than 7 tiles (activations: the output-channel split; weights: batch times field split),
and when the plan groups input channels and the operand's innermost dimension has no
grouping (``detectInnermostGrouping``, ``lib/poputil/VarStructure.cpp``). The tests
write the rules out again from the plan's partition and check which copies the product
makes, the values against numpy, and the fully-connected workload's two runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from ipusim.runner import run_workload
from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.errors import GraphError
from poplar_api.poplin.conv_rearrange import detect_innermost_grouping
from tests.test_poplin import run_product

RNG = np.random.default_rng(28)
FC = str(Path(__file__).resolve().parents[1] / "examples/calibration/fc_fully_connected.py")


def _graph(preset: str = "tiny") -> tuple[object, Graph]:
    device = IPUModel(preset).createDevice()
    return device, Graph(device.getTarget())


# ------------------------------------------------------------ detectInnermostGrouping
def test_grouping_of_a_row_in_runs_of_eight():
    _, graph = _graph()
    t = graph.addVariable(FLOAT, [3, 32], "t")
    # each row: 4 runs of 8 on tiles 0..3
    graph.mapElements(t, np.tile(np.repeat(np.arange(4), 8), 3))
    assert detect_innermost_grouping(graph, t) == math.gcd(8, 32)


def test_grouping_of_a_transposed_view_is_one():
    _, graph = _graph()
    t = graph.addVariable(FLOAT, [16, 32], "t")
    graph.setTileMapping(t, 0)
    assert detect_innermost_grouping(graph, t) == 32  # whole rows on one tile
    assert detect_innermost_grouping(graph, t.transpose()) == 1  # a column: stride 32


def test_grouping_that_does_not_divide_the_row_is_one():
    _, graph = _graph()
    t = graph.addVariable(FLOAT, [2, 12], "t")
    # row 0: runs of 5, 5, 2 -> gcd(5, 12) = 1
    graph.mapElements(t, np.concatenate([[0] * 5, [1] * 5, [2] * 2, [3] * 12]))
    assert detect_innermost_grouping(graph, t) == 1


# ------------------------------------------------------------ which operands are copied
def _copies(preset, a_shape, b_shape, opts, lhs_view=None, in_type=FLOAT):
    """Build ``A x B`` and return (plan, names of the rearranging copies)."""
    _, graph = _graph(preset)
    m, k = a_shape
    n = b_shape[1]
    if lhs_view == "created":
        A = poplin.createMatMulInputLHS(graph, in_type, [m, k], [k, n], "A", opts)
        B = poplin.createMatMulInputRHS(graph, in_type, [m, k], [k, n], "B", opts)
    else:
        A = graph.addVariable(in_type, [m, k], "A")
        Bt = graph.addVariable(in_type, [n, k], "Bt")  # B as a transposed view
        poputil_map(graph, A)
        poputil_map(graph, Bt)
        B = Bt.transpose()
    seq = prog.Sequence()
    poplin.matMul(graph, A, B, seq, "mm", opts)
    plan = poplin.getPlan(graph, (1, m, k, n), in_type, in_type, opts)
    names = {c.debugName for c in seq.programs if isinstance(c, prog.Copy)}
    return plan, names


def poputil_map(graph: Graph, t) -> None:
    from poplar_api import poputil

    poputil.mapTensorLinearly(graph, t)


def _expected(plan, wu: bool, a_grouped: bool, b_grouped: bool) -> set[str]:
    """The rule, from the plan's partition ``(G, B, field, Co, Ci)``; with swapped
    operands the convolution's activations are ``B^T`` and its weights ``A``."""
    if plan.swapped:
        a_grouped, b_grouped = b_grouped, a_grouped
    acts = wu or plan.parts[-2] > 7 or (plan.in_chans_per_group > 1 and not a_grouped)
    weights = (
        wu or plan.parts[1] * plan.parts[2] > 7 or (plan.in_chans_per_group > 1 and not b_grouped)
    )
    return {n for n, on in (("mm/actsRearranged", acts), ("mm/weightsRearranged", weights)) if on}


def test_created_operands_of_a_wide_product_copy_the_broadcast_one():
    plan, names = _copies("mk2", (64, 32), (32, 4000), None, "created", HALF)
    assert plan.parts[-2] > 7  # the output channels are split over more than 7 tiles
    assert names == _expected(plan, False, True, True)
    assert "mm/actsRearranged" in names


def test_weight_update_pass_copies_both_operands():
    opts = {"fullyConnectedPass": "TRAINING_WU"}
    plan, names = _copies("tiny", (16, 8), (8, 16), opts, "created")
    assert names == {"mm/actsRearranged", "mm/weightsRearranged"}
    assert names == _expected(plan, True, True, True)


#: Plan constraints that keep a product unswapped (Poplibs' ``0.transform.swapOperands``).
UNSWAPPED = {"planConstraints": '{"0": {"transform": {"swapOperands": false}}}'}


def test_transposed_weights_are_copied_when_the_plan_groups_channels():
    plan, names = _copies("mk2", (32, 64), (64, 48), UNSWAPPED, None, HALF)
    assert plan.in_chans_per_group > 1 and not plan.swapped
    assert "mm/weightsRearranged" in names  # B's innermost (K) has stride N in memory
    assert names == _expected(plan, False, True, False)


def test_bad_fully_connected_pass_is_named():
    _, graph = _graph()
    A = graph.addVariable(FLOAT, [4, 4], "A")
    graph.setTileMapping(A, 0)
    with pytest.raises(GraphError, match="fullyConnectedPass='TRAINING'"):
        poplin.matMul(graph, A, A, prog.Sequence(), "mm", {"fullyConnectedPass": "TRAINING"})


# ------------------------------------------------------------ values
@pytest.mark.parametrize("fc_pass", ["TRAINING_WU", "TRAINING_BWD", "NONE"])
def test_rearranged_products_match_numpy(fc_pass):
    a = RNG.uniform(-1, 1, (24, 20)).astype(np.float32)
    bt = RNG.uniform(-1, 1, (12, 20)).astype(np.float32)

    def linear_with_transposed_b(graph):
        A = graph.addVariable(FLOAT, [24, 20], "A")
        Bt = graph.addVariable(FLOAT, [12, 20], "Bt")
        poputil_map(graph, A)
        poputil_map(graph, Bt)
        return A, Bt.transpose(), [(A, a), (Bt, bt)]

    opts = {"fullyConnectedPass": fc_pass}
    c, _, _ = run_product("tiny", None, None, make=linear_with_transposed_b, opts=opts)
    ref = a.astype(np.float64) @ bt.astype(np.float64).T
    np.testing.assert_allclose(c, ref, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------ the fully-connected tool
def test_fully_connected_workload_runs_forward_then_backward():
    res = run_workload(FC, "tiny", {"batch": 4, "input_size": 32, "output_size": 16})
    assert len(res.traces) == 2  # the tool's engine.run(fwd), engine.run(bwd)
    total = sum(t.total_cycles for t in res.traces)
    assert res.metrics["total_cycles"] == total
    names = [r.name for r in res.traces[1].records]
    # the weight update copies both operands into its plan's layout first
    assert any(n.startswith("fc/wu/actsRearranged") for n in names)
    assert any(n.startswith("fc/wu/weightsRearranged") for n in names)
    assert not any(n.startswith("fc/fwd") for n in names)
