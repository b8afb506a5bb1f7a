"""The batch flattened into an expanded field dimension (Poplibs' ``flattenDims`` after a
partial ``expandDims``, :mod:`poplar_api.poplin.conv_flatten`): the flattened convolution
and tensor order against Poplibs' rules written out here, and the lowering's values
against a numpy convolution for several shapes, with and without the flattening.

Expected values come from :func:`tests.test_poplin_conv.ref_conv` (numpy, Poplar's
ConvParams semantics) and its transposed Jacobians, never from the library's transforms.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel, poplin
from poplar_api.errors import GraphError
from poplar_api.poplin.conv_flatten import flatten_dims, flatten_ids, flattened_params
from poplar_api.poplin.conv_params import expand_dims
from tests.test_poplin_conv import (
    assert_passes_equal_numpy,
    forward_equals_numpy,
    random_operands,
    run_passes,
)


def _options(expand: list[int], flatten: list[int] | None = None) -> dict[str, str]:
    transform: dict = {"expandDims": expand}
    if flatten is not None:
        transform["flattenDims"] = flatten
    return {"planConstraints": json.dumps({"method": "AMP", "transform": transform})}


def _plan(p: poplin.ConvParams, options: dict[str, str]) -> poplin.ConvPlan:
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    return poplin.getConvPlan(graph, p, options)


def test_the_cnn_first_convolution_flattens_its_batch_into_the_width():
    """calculateFlattenedParams of conv1 with the width expanded: the batch (0) and the
    width (2: one wide, untransformed after expandSpatialDim) are flattened, the height
    (padded, 3 high) is not; the width becomes 32 x 28 positions, the batch 1."""
    p = poplin.ConvParams(FLOAT, 32, [28, 28], [3, 3], 1, 8, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    e = expand_dims(p, [1])
    assert flatten_dims(e) == (0, 2)
    f = flattened_params(e, (0, 2))
    assert (f.batchSize, list(f.inputFieldShape), list(f.kernelShape)) == (1, [28, 896], [3, 1])
    assert f.inputChannelsPerConvGroup == 3
    assert list(f.inputTransform.paddingLower) == [1, 0]
    assert list(f.getOutputFieldShape()) == [28, 896]
    # the height expanded instead: the batch folds into the height
    assert flatten_dims(expand_dims(p, [0])) == (0, 1)
    # nothing flattenable but the batch: no flattening
    assert flatten_dims(p) == ()


def test_an_output_padding_keeps_the_dimension_unflattened():
    p = poplin.ConvParams(FLOAT, 2, [5, 7], [2, 3], 2, 2, 1, None, None, {"paddingUpper": [0, 1]})
    assert flatten_dims(expand_dims(p, [1])) == ()


def test_flattened_ids_put_the_batch_outside_the_width():
    """doFlatten's order written out: position ``b W + w`` of the flattened width holds
    input ``[b, ..., w]``."""
    g, b, c, h, w = 2, 3, 2, 4, 5
    ids = np.arange(g * b * c * h * w).reshape(g, b, c, h, w)
    want = np.empty((g, 1, c, h, b * w), ids.dtype)
    for gi in range(g):
        for bi in range(b):
            for ci in range(c):
                for hi in range(h):
                    for wi in range(w):
                        want[gi, 0, ci, hi, bi * w + wi] = ids[gi, bi, ci, hi, wi]
    np.testing.assert_array_equal(flatten_ids(ids, (0, 2)), want)
    want0 = np.empty((g, 1, c, b * h, w), ids.dtype)
    for bi in range(b):
        want0[:, 0, :, bi * h : (bi + 1) * h, :] = ids[:, bi]
    np.testing.assert_array_equal(flatten_ids(ids, (0, 1)), want0)


#: (ConvParams args and keywords, expandDims): batch > 1, the width or the height expanded,
#: stride, padding, dilation, grouped.
CASES = [
    ((2, [6, 7], [3, 2], 3, 4), {}, [1]),
    ((3, [6, 7], [3, 2], 2, 3), {"paddingLower": [1, 1], "paddingUpper": [1, 0]}, [0]),
    ((2, [5, 8], [2, 3], 2, 3), {"stride": [1, 2], "paddingLower": [1, 1]}, [1]),
    ((2, [7, 6], [3, 2], 1, 2), {"stride": [2, 1], "dilation": [2, 1]}, [0]),
    ((4, [6, 6], [3, 3], 1, 8), {"paddingLower": [1, 1], "paddingUpper": [1, 1]}, [1]),
    ((2, [6, 5], [3, 2], 2, 2, 3), {"paddingUpper": [2, 0]}, [1]),
]


@pytest.mark.parametrize("flatten", [True, False])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_forward_equals_numpy_flattened_or_not(case, flatten):
    args, kwargs, dims = CASES[case]
    p = poplin.ConvParams(FLOAT, *args, **kwargs)
    options = _options(dims, None if flatten else [])
    plan = _plan(p, options)
    assert plan.expanded and plan.expanded_dims == tuple(dims)
    want = (0, dims[0] + 1) if flatten else ()
    assert plan.flatten_dims == want
    if flatten:  # the plan splits the flattened convolution: batch 1, one wide kernel
        assert plan.parts[1] == 1 and plan.blocks[1] == 1
    forward_equals_numpy(p, np.random.default_rng(case), preset="ipu1", options=options)


@pytest.mark.parametrize("dims", [[1], [0]])
def test_every_pass_equals_numpy_with_the_batch_flattened(dims):
    """Forward, backward-data and weight-update passes, each planned with ``dims``
    expanded and then flattened as Poplibs does, against the reference's transposed
    Jacobians (the gradient and weight update flatten where their own expansion allows)."""
    p = poplin.ConvParams(FLOAT, 3, [5, 6], [2, 3], 2, 3, stride=[1, 2], paddingLower=[1, 1])
    x, w, dy = random_operands(p, np.random.default_rng(11))
    options = _options(dims)
    assert _plan(p, options).flatten_dims == (0, dims[0] + 1)
    out, _, _ = run_passes(p, x, w, dy, preset="ipu1", options=options)
    assert_passes_equal_numpy(out, x, w, dy, p)


def test_a_flattening_poplibs_would_not_make_is_refused():
    p = poplin.ConvParams(FLOAT, 2, [6, 7], [3, 2], 3, 4)
    with pytest.raises(GraphError, match=r"flattenDims=\[0, 1\].*Poplibs flattens \[0, 2\]"):
        _plan(p, _options([1], [0, 1]))
    with pytest.raises(GraphError, match="flattenDims"):
        _plan(p, _options([1], ["b"]))


def test_plan_report_names_the_flattened_dimensions():
    import io

    p = poplin.ConvParams(FLOAT, 2, [6, 7], [3, 2], 3, 4)
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    out = io.StringIO()
    poplin.reportPlanInfo(out, graph, p, _options([1]))
    assert "flattenDims              {0, 2}" in out.getvalue()
    out = io.StringIO()
    poplin.reportPlanInfo(out, graph, p, _options([1], []))
    assert "flattenDims" not in out.getvalue()
