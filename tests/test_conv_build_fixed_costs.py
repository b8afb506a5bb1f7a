"""Fast paths of building convolutions and PopART graphs, each checked against the plain
computation it replaces (numpy written out in the test, or the slower library path)."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api.poplin.conv import getConvPlan
from poplar_api.poplin.conv_layout import grouped_ids, grouped_input, grouped_output
from tests.test_poplin_conv import jacobians, ref_conv, run_passes


def _graph(preset: str = "ipu1") -> Graph:
    return Graph(IPUModel(preset).createDevice().getTarget())


# ------------------------------------------------------------------ partials' view ids
@pytest.mark.parametrize(
    "shape,perm",
    [
        ((8, 1, 4, 8, 32, 32, 16), [0, 1, 3, 4, 5, 2, 6]),  # [pci, G, Co/cpg, B, H, W, cpg]
        ((3, 2, 3, 2, 5, 4, 2), [0, 1, 3, 4, 5, 2, 6]),
        ((2, 1, 1, 3, 7, 1), [0, 1, 3, 4, 2, 5]),  # one field dimension, cpg 1
        ((4, 2, 5, 3, 6), [1, 0, 3, 2, 4]),  # any order of the leading dimensions
    ],
)
def test_grouped_ids_equal_a_transposed_arange_with_its_last_two_dimensions_merged(shape, perm):
    start = 1234
    plain = (np.arange(np.prod(shape)) + start).reshape(shape).transpose(perm)
    plain = plain.reshape(*plain.shape[:-2], -1)
    got = grouped_ids(start, shape, perm)
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, plain)


@pytest.mark.parametrize("lead,field,cpg", [([4], [5, 3], 8), ([2], [7], 1), ([3], [], 2)])
@pytest.mark.parametrize("dtype", [FLOAT, HALF])
def test_partials_view_has_the_ids_of_the_shuffled_variable(lead, field, cpg, dtype):
    graph = _graph()
    graph.addVariable(dtype, [17], "before")  # the partials' ids do not start at 0
    groups, batch, chans = 2, 3, 16
    var, view = grouped_output(graph, dtype, lead, groups, batch, field, chans, cpg, "p")
    nl, nd = len(lead), len(field)
    perm = [*range(nl), nl, nl + 2, *range(nl + 3, nl + 3 + nd), nl + 1, nl + 3 + nd]
    plain = var.dimShuffle(perm).reshape([*lead, groups, batch, *field, chans])
    assert view.shape() == plain.shape()
    assert view.elementType() == dtype and graph.owns(view)
    np.testing.assert_array_equal(view.index, plain.index)


@pytest.mark.parametrize(
    "field,kernel,chans,batch",
    [([9, 7], [3, 3], (16, 8), 2), ([12], [3], (6, 4), 3), ([5, 5], [1, 1], (32, 16), 1)],
)
def test_internal_input_view_has_the_ids_of_the_named_one(field, kernel, chans, batch):
    graph = _graph()
    params = poplin.ConvParams(FLOAT, batch, field, kernel, chans[0], chans[1], 1)
    plan = getConvPlan(graph, params)
    named = grouped_input(graph, params, plan, "x")
    internal = grouped_input(graph, params, plan, "y", internal=True)
    assert internal.shape() == named.shape() == [1, batch, chans[0], *field]
    # the second variable's ids follow the first's: the same layout, shifted
    offset = named.numElements()
    np.testing.assert_array_equal(internal.index, named.index + offset)
    np.testing.assert_array_equal(graph.elementTiles(internal), graph.elementTiles(named))


# ------------------------------------------------------------------ expanded inputs
EXPAND = {"planConstraints": '{"transform": {"expandDims": [0, 1]}}'}


@pytest.mark.parametrize(
    "params",
    [
        dict(field=[7, 6], kernel=[3, 2], chans=(3, 4), paddingLower=[1, 0], paddingUpper=[1, 1]),
        dict(field=[6, 5], kernel=[2, 3], chans=(2, 3), stride=[2, 1], dilation=[1, 2]),
    ],
)
def test_expanded_convolution_reads_its_input_ids_and_the_zero_constant(params):
    """An expanded (im2col) plan copies the input's ids and, for padding, a zero
    constant's: the passes still equal numpy's convolution and its gradient."""
    cin, cout = params.pop("chans")
    p = poplin.ConvParams(
        FLOAT, 2, params.pop("field"), params.pop("kernel"), cin, cout, 1, **params
    )
    graph = _graph()
    assert getConvPlan(graph, p, EXPAND).expanded
    rng = np.random.default_rng(7)
    x = rng.standard_normal(p.inputShape()).astype(np.float32)
    w = rng.standard_normal(p.weightsShape()).astype(np.float32)
    dy = rng.standard_normal(p.outputShape()).astype(np.float32)
    out, _, _ = run_passes(p, x, w, dy, preset="ipu1", options=EXPAND, passes=("fwd", "wu"))
    np.testing.assert_allclose(out["y"], ref_conv(x, w, p), rtol=1e-5, atol=1e-4)
    _, jw = jacobians(x, w, p)
    dw = (jw.T @ dy.reshape(-1)).reshape(w.shape)
    np.testing.assert_allclose(out["dw"], dw, rtol=1e-5, atol=1e-4)
