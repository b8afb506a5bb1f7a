"""The training check of ``examples/models/run_model.py`` at the branches the session's
float32 step took: a ReLU input that float32 rounds to zero and float64 does not puts
the step on the other branch than the float64 reference, whose frozen difference then
disagrees with a right gradient; the check taken again at the step's own branches
agrees, and still refuses a wrong gradient or a step whose values do not repeat."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnx.reference
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))

import run_model as rm

#: 2**-30: lost when added to 1.0 in float32 (half an ulp of 1.0 is 2**-24), kept in float64
TINY = 2.0**-30


def _model() -> onnx.ModelProto:
    """``loss = sum(relu((x * w + b) + c) * k)`` for a weight ``w`` of one element:
    with ``x = 1``, ``b = [2**-30, 0.5, 0.25]``, ``c = [-1, -1, -1.5]`` the first ReLU
    input is 0 in float32 and 2**-30 in float64, the second 0.5, the third -0.25."""
    nodes = [
        helper.make_node("Mul", ["x", "w"], ["xw"]),
        helper.make_node("Add", ["xw", "b"], ["xwb"]),
        helper.make_node("Add", ["xwb", "c"], ["z"]),
        helper.make_node("Relu", ["z"], ["r"]),
        helper.make_node("Mul", ["r", "k"], ["rk"]),
        helper.make_node("ReduceSum", ["rk"], ["loss"], keepdims=0),
    ]
    inits = [
        numpy_helper.from_array(np.array([1.0], np.float32), "w"),
        numpy_helper.from_array(np.array([TINY, 0.5, 0.25], np.float32), "b"),
        numpy_helper.from_array(np.array([-1.0, -1.0, -1.5], np.float32), "c"),
        numpy_helper.from_array(np.array([3.0, 1.0, 2.0], np.float32), "k"),
    ]
    graph = helper.make_graph(
        nodes,
        "rounded_kink",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        initializer=inits,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])


INPUTS = {"x": np.ones(3, np.float32)}
GRAD = rm.popart.reservedGradientPrefix() + "w"


def _step() -> rm._Step:
    return rm._Step(_model(), INPUTS, "loss", tiles=4, ipus=1, allow_oom=False)


def test_the_step_takes_the_float32_branch_and_the_reference_check_refuses_it():
    anchors = _step().run(["loss", GRAD])
    # d loss / d w = sum of k x over the ReLU inputs > 0: float32 sees the second
    # alone (1), float64 the first and second (3 + 1)
    assert float(np.asarray(anchors[GRAD]).reshape(-1)[0]) == 1.0
    assert float(np.asarray(anchors["loss"]).reshape(-1)[0]) == 0.5
    g = {"w": np.asarray(anchors[GRAD], np.float64)}
    analytic, numeric = rm.directional_check(_model(), INPUTS, "loss", g)
    assert analytic == pytest.approx(1.0, rel=1e-12)
    assert numeric == pytest.approx(4.0, rel=1e-6)  # the float64 branch's derivative


def test_the_check_at_the_steps_branches_holds_a_right_gradient_and_refuses_a_wrong_one():
    step = _step()
    anchors = step.run(["loss", GRAD])
    g = {"w": np.asarray(anchors[GRAD], np.float64)}
    result = rm.ModelRun("rounded_kink", "training")
    error = rm._check_at_session_branches(step, anchors, g, result)
    assert error < 1e-9
    seen = result.session_branches
    assert seen["units"] == 1  # the first ReLU input alone
    assert seen["nearest"] == pytest.approx(TINY / 0.5, rel=1e-12)  # 2**-30 of 0.5
    assert seen["forward"] == pytest.approx(TINY / 0.5, rel=1e-12)
    assert seen["repeated"] is True
    assert seen["gradient_check"] == pytest.approx([1.0, 1.0], rel=1e-9)
    wrong = rm._check_at_session_branches(step, anchors, {"w": 1.1 * g["w"]}, result)
    assert wrong == pytest.approx(0.1, rel=1e-6)
    # values the repeated step does not reproduce are not the step's branches
    other = dict(anchors, loss=np.asarray(anchors["loss"]) + 1)
    assert rm._check_at_session_branches(step, other, g, result) == float("inf")
    assert result.session_branches["repeated"] is False


def test_run_model_matches_at_the_steps_branches(monkeypatch):
    monkeypatch.setitem(rm.MODELS, "rounded_kink", ("custom", None))
    monkeypatch.setattr(rm, "build", lambda name, train, seed=0: (_model(), INPUTS, [], "loss"))
    monkeypatch.setattr(rm, "_initializers", lambda proto: {"w": np.ones(1, np.float32)})
    result = rm.run_model("rounded_kink", train=True, tiles=4)
    assert result.gradient_check == pytest.approx((1.0, 4.0), rel=1e-6)
    assert result.session_branches["units"] == 1
    assert result.max_error < 1e-9
    assert result.matched


def test_branch_differences_measure_a_unit_far_from_its_kink():
    """A step value of the other sign far from zero (a forward error, not rounding) is
    reported as far from its kink, and the max pool's picks are compared too."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2], strides=[2]),
        helper.make_node("ReduceSum", ["p"], ["loss"], keepdims=0),
    ]
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
    )
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)])
    x = np.array([[[1.0, 2.0, -0.5, 4.0]]], np.float32)
    relu = np.maximum(x, 0)
    same = rm.branch_differences(proto, {"x": x}, {"x": x, "r": relu})
    assert same == (0, 0.0, 0.0)
    flipped = x.copy()
    flipped[0, 0, 2] = 0.5  # the other sign, 0.5 from zero where the largest is 4
    swapped = relu.copy()
    swapped[0, 0, 0] = 3.0  # the first window picks its first element
    units, nearest, forward = rm.branch_differences(proto, {"x": x}, {"x": flipped, "r": swapped})
    assert units == 2
    assert nearest == pytest.approx(max(0.5, 2.0 - 1.0) / 4.0)  # the pool's gap of 1 of 4
    assert forward == pytest.approx(2.0 / 4.0)  # 3 against 1 in the pool input


def test_freeze_kinks_at_the_reference_values_is_the_plain_freeze():
    proto = _model()
    wide = rm.float64_model(proto)
    feeds = {"x": np.ones(3)}
    at = {"z": np.array([TINY, 0.5, -0.25])}
    a = rm.freeze_kinks(wide, feeds, at)
    b = rm.freeze_kinks(wide, feeds)
    assert [numpy_helper.to_array(t).tolist() for t in a.graph.initializer] == [
        numpy_helper.to_array(t).tolist() for t in b.graph.initializer
    ]
    with pytest.raises(ValueError, match=r"no values given for the kink inputs \['z'\]"):
        rm.freeze_kinks(wide, feeds, {})


@pytest.mark.parametrize(
    ("units", "nearest", "forward", "stands"),
    [
        (1, 1e-4, 1e-4, True),  # both at the bound: within it
        (1, 2e-4, 0.0, False),  # a unit on another branch farther than that from its kink
        (1, 0.0, 2e-4, False),  # the step's kink inputs farther than that from float64
    ],
)
def test_the_steps_branches_stand_in_only_near_the_reference(
    monkeypatch, units, nearest, forward, stands
):
    """The check at the step's branches is taken only where those branches may differ
    from the reference's by rounding: every unit on another branch within 1e-4 of its
    kink and the step's kink inputs within 1e-4 of float64 (relative to each tensor's
    largest magnitude); beyond either, the error is infinite however well the gradient
    agrees at the step's branches."""
    step = _step()
    anchors = step.run(["loss", GRAD])
    g = {"w": np.asarray(anchors[GRAD], np.float64)}
    monkeypatch.setattr(rm, "branch_differences", lambda *a: (units, nearest, forward))
    result = rm.ModelRun("rounded_kink", "training")
    error = rm._check_at_session_branches(step, anchors, g, result)
    assert result.session_branches["repeated"] is True
    assert result.session_branches["nearest"] == nearest
    assert result.session_branches["forward"] == forward
    if stands:
        assert error < 1e-9
    else:
        assert error == float("inf")
