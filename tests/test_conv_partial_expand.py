"""Expanding a subset of a convolution's field dimensions (Poplibs' ``expandDims`` of
some dimensions, ``expandSpatialDim`` of each): the lowering's values against a numpy
convolution, the expanded convolution's parameters and input gather against a direct
numpy im2col of one dimension, the plan's record of the dimensions and bad input.

The expected values are computed by numpy from the definition of a convolution
(:func:`tests.test_poplin_conv.ref_conv` applies Poplar's ConvParams semantics), never
by the library's expansion.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel, poplin
from poplar_api.errors import GraphError
from poplar_api.poplin.conv_params import expand_dims, expanded_input_index
from tests.test_poplin_conv import (
    assert_passes_equal_numpy,
    forward_equals_numpy,
    random_operands,
    run_passes,
)


def _constraint(dims: list[int]) -> dict[str, str]:
    return {"planConstraints": json.dumps({"method": "AMP", "transform": {"expandDims": dims}})}


#: (ConvParams args and keywords, expandDims): 2-D shapes with stride, padding, dilation,
#: truncation and flips (input, kernel and output transforms), expanding dimension 0 only,
#: 1 only, both, none.
CASES = [
    ((2, [5, 7], [2, 3], 2, 2), {
        "inputTransform": {"truncationLower": [0, 1], "dilation": [1, 2]},
        "kernelTransform": {"flip": [True, True], "paddingLower": [0, 1]},
        "outputTransform": {"paddingUpper": [1, 1], "truncationLower": [0, 1]},
    }, [1]),
    ((2, [6, 7], [3, 2], 3, 4), {}, [1]),
    ((2, [6, 7], [3, 2], 3, 4), {}, [0]),
    ((1, [5, 8], [2, 3], 2, 3), {"stride": [1, 2], "paddingLower": [1, 0],
                                 "paddingUpper": [0, 2]}, [1]),
    ((1, [5, 8], [2, 3], 2, 3), {"stride": [2, 1], "paddingLower": [1, 1],
                                 "paddingUpper": [1, 0], "dilation": [2, 1]}, [0]),
    ((3, [4, 9], [3, 3], 1, 2), {"paddingLower": [1, 1], "paddingUpper": [1, 1]}, [0, 1]),
    ((3, [4, 9], [3, 3], 1, 2), {"paddingLower": [1, 1], "paddingUpper": [1, 1]}, []),
]  # fmt: skip


def _params(batch, field, kernel, ci, co, groups=1, **kwargs) -> poplin.ConvParams:
    return poplin.ConvParams(FLOAT, batch, field, kernel, ci, co, groups, **kwargs)


def _plan(p: poplin.ConvParams, options) -> poplin.ConvPlan:
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    return poplin.getConvPlan(graph, p, options)


@pytest.mark.parametrize("case", range(len(CASES)))
def test_forward_equals_numpy_with_dimensions_expanded(case):
    args, kwargs, dims = CASES[case]
    p = _params(*args, **kwargs)
    options = _constraint(dims)
    plan = _plan(p, options)
    assert plan.expanded == bool(dims)
    assert plan.expanded_dims == (tuple(dims) if 0 < len(dims) < 2 else None)
    forward_equals_numpy(p, np.random.default_rng(case), preset="ipu1", options=options)


def test_every_pass_equals_numpy_with_the_width_expanded():
    """Forward, backward-data and weight-update passes, each planned with dimension 1
    expanded, against the reference and its transposed Jacobians."""
    p = _params(2, [5, 6], [2, 3], 2, 3, stride=[1, 2], paddingLower=[1, 1])
    x, w, dy = random_operands(p, np.random.default_rng(7))
    out, _, _ = run_passes(p, x, w, dy, preset="ipu1", options=_constraint([1]))
    assert_passes_equal_numpy(out, x, w, dy, p)


def test_grouped_convolution_with_the_height_expanded():
    p = _params(2, [6, 5], [3, 2], 2, 2, groups=3, paddingUpper=[2, 0])
    forward_equals_numpy(p, np.random.default_rng(3), preset="ipu1", options=_constraint([0]))


def test_one_dimension_expanded_is_an_im2col_of_that_dimension():
    """The expanded convolution of dimension 1 (stride 2, padding 1 each side, kernel 3)
    and its input's ids against an im2col of the width written out with numpy: input
    channel ``c * 3 + k`` at output column ``o`` reads column ``2 o + k - 1``."""
    p = _params(1, [2, 5], [2, 3], 2, 1, stride=[1, 2], paddingLower=[0, 1],
                paddingUpper=[0, 1])  # fmt: skip
    e = expand_dims(p, [1])
    assert list(e.inputFieldShape) == [2, 3]  # the height kept, the width its 3 outputs
    assert list(e.kernelShape) == [2, 1]
    assert e.inputChannelsPerConvGroup == 6
    assert list(e.outputTransform.stride) == [1, 1]
    assert list(e.inputTransform.paddingLower) == [0, 0]
    ids = np.arange(2 * 2 * 5).reshape(1, 1, 2, 2, 5)  # [G, B, Ci, H, W]
    want = np.full((1, 1, 6, 2, 3), -1)
    for c in range(2):
        for k in range(3):
            for o in range(3):
                col = 2 * o + k - 1
                if 0 <= col < 5:
                    want[0, 0, c * 3 + k, :, o] = ids[0, 0, c, :, col]
    np.testing.assert_array_equal(expanded_input_index(p, ids, [1]), want)


def test_plan_report_names_the_expanded_dimension():
    p = _params(2, [6, 7], [3, 2], 3, 4)
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    out = io.StringIO()
    poplin.reportPlanInfo(out, graph, p, _constraint([1]))
    text = out.getvalue()
    assert "expandDims               {1}" in text


@pytest.mark.parametrize("dims", [[2], [0, 5]])
def test_a_dimension_the_convolution_lacks_is_refused(dims):
    p = _params(1, [4, 4], [2, 2], 1, 1)
    with pytest.raises(GraphError, match=r"expandDims=.*0\.\.1"):
        _plan(p, _constraint(dims))


def test_expand_dims_must_be_dimension_numbers():
    p = _params(1, [4, 4], [2, 2], 1, 1)
    with pytest.raises(GraphError, match="expandDims"):
        _plan(p, _constraint(["w"]))
