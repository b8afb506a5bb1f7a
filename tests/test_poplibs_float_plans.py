"""ipusim takes Poplibs' plan of a FLOAT 2-D convolution where the restated model settles
it and ipusim can run it (:mod:`poplar_api.poplin.poplibs_float_plans`): docs/planner.md's
rows 13-15, the CNN step's convolutions (rows 13 and 14 with dimension 1 expanded and the
batch flattened into it, whose values ``tests/test_conv_constrained_plan.py`` checks; row
15 plain ``ConvPartialnx1`` 8 / 8 on 8 units with its kernel rows over tiles, its values
against numpy here)."""

from __future__ import annotations

import numpy as np
import pytest
from test_poplin_conv import run_passes

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api.poplin.conv_options import parse_options
from poplar_api.poplin.poplibs_float_conv2d import FORMS, best_plan
from poplar_api.poplin.poplibs_float_plans import adopted_float_conv2d_plan

#: The CNN step's conv2 (examples/cnn/cnn_digits.py at batch 32) and its input gradient.
CONV2 = poplin.ConvParams(FLOAT, 32, [14, 14], [3, 3], 8, 16, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
GRAD = poplin.getGradientParams(CONV2)
PRESET = "mk2-ipumodel"


def _target():
    return Graph(IPUModel(PRESET).createDevice().getTarget()).getTarget()


CONV1 = poplin.ConvParams(FLOAT, 32, [28, 28], [3, 3], 1, 8, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
#: docs/planner.md's rows 13-15: (convolution, pass, expanded dimensions of its plan).
ROWS = {"13": (CONV1, "TRAINING_FWD", (1,)), "14": (CONV2, "TRAINING_FWD", (1,)),
        "15": (GRAD, "TRAINING_BWD", None)}  # fmt: skip


@pytest.mark.parametrize("row", sorted(ROWS))
def test_rows_13_to_15_take_the_models_plans(row) -> None:
    """Each plan is the model's (:func:`best_plan`: form, grouping, units, partition,
    kernel split; row 15's partition the one popsolver's search reaches first of the two
    tied)."""
    params, conv_pass, dims = ROWS[row]
    graph = Graph(IPUModel(PRESET).createDevice().getTarget())
    plan = poplin.getConvPlan(graph, params, {"pass": conv_pass})
    best = best_plan(params, conv_pass, graph.getTarget())
    s = best["splits"]
    assert FORMS[best["form"]] == (dims or ())
    assert best["ties"] == (2 if row == "15" else 1)
    assert (plan.method, plan.swapped, plan.serial) == ("AMP", False, 1)
    assert plan.expanded == bool(dims) and plan.expanded_dims == dims
    units, icg, ocg = best["vertex"]
    assert (plan.num_conv_units, plan.in_chans_per_group, plan.out_chans_per_group) == (
        units, icg, ocg)  # fmt: skip
    assert plan.parts == (1, s["batchSplit"], s["fieldSplit[0]"], s["fieldSplit[1]"],
                          s["outChanSplit.parallel"], s["inChanSplit.parallel"])  # fmt: skip
    assert plan.kernel_split == s["kernelSplit[0]"] and plan.release == "7eac0f26"


def test_what_is_not_taken() -> None:
    """A covered convolution with another option, or HALF, is left to ipusim's search."""
    target = _target()
    other = parse_options({"pass": "TRAINING_BWD", "availableMemoryProportion": "0.5"}, "t")
    assert adopted_float_conv2d_plan(GRAD, other, target) is None
    bwd = parse_options({"pass": "TRAINING_BWD"}, "t")
    assert adopted_float_conv2d_plan(GRAD, bwd, target) is not None
    half = poplin.ConvParams(HALF, 32, [14, 14], [3, 3], 16, 8, paddingLower=[1, 1],
                             paddingUpper=[1, 1])  # fmt: skip
    assert adopted_float_conv2d_plan(half, bwd, target) is None


def test_row_15_values_are_numpys() -> None:
    """The input gradient run with Poplibs' plan (3 kernel parts over tiles, 2 input-channel
    parts, the weights transposed and flipped): ``dx[b, c, y, x] = sum dy[b, o, y + 1 - i,
    x + 1 - j] w[o, c, i, j]``, written out here with numpy."""
    rng = np.random.default_rng(15)
    x = rng.standard_normal(CONV2.inputShape()).astype(np.float32)
    w = rng.standard_normal(CONV2.weightsShape()).astype(np.float32)
    dy = rng.standard_normal(CONV2.outputShape()).astype(np.float32)
    out, _, _ = run_passes(CONV2, x, w, dy, preset=PRESET, options={"pass": "TRAINING_BWD"},
                           passes=("bwd",))  # fmt: skip
    w64 = w.astype(np.float64).reshape(16, 8, 3, 3)  # [o, c, i, j]
    dyp = np.pad(dy.astype(np.float64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    dx = sum(np.einsum("oc,bohw->bchw", w64[:, :, i, j], dyp[:, :, 2 - i : 16 - i, 2 - j : 16 - j])
             for i in range(3) for j in range(3))  # fmt: skip
    np.testing.assert_allclose(out["dx"].astype(np.float64), dx, rtol=1e-5, atol=1e-4)
