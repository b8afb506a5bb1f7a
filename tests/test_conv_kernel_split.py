"""Kernel splits over tiles (Poplibs' ``kernelSplit`` of the outer kernel dimension,
graphcore/poplibs 7eac0f26 ``lib/poplin/Convolution.cpp``): values against numpy's
convolution for several shapes, strides, paddings and dilations with 1, 2 and 3 kernel
parts, the tiles of each part in Poplibs' order, the reduction over the input-channel
times kernel parts, and bad constraints."""

from __future__ import annotations

import json

import numpy as np
import pytest
from resnet_rows_common import ROW16, preset_target
from test_poplin_conv import (
    forward_equals_numpy,
    jacobians,
    random_operands,
    ref_conv,
    run_passes,
    vertex_names,
)

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api.errors import GraphError
from poplar_api.poplin.conv_kernel_split import (
    kernel_block_tiles,
    kernel_part_params,
    kernel_ranges,
)
from poplar_api.poplin.conv_options import parse_options
from poplar_api.poplin.poplibs_conv2d_plans import adopted_conv2d_plan


def _split(n: int, **extra: object) -> dict[str, str]:
    """Options asking for the AMP, no expansion and ``n`` kernel parts."""
    constraints = {"method": "AMP", "transform": {"expandDims": []},
                   "partition": {"kernelSplit": {"0": n}}, **extra}  # fmt: skip
    return {"planConstraints": json.dumps(constraints)}


#: (type, batch, field, kernel, Ci, Co, ConvParams keywords, kernel parts, preset)
CASES = [
    (FLOAT, 2, [8, 7], [3, 3], 8, 8, {"paddingLower": [1, 1], "paddingUpper": [1, 1]}, 3, "ipu2"),
    (FLOAT, 1, [9, 6], [3, 2], 4, 8,
     {"paddingLower": [1, 0], "paddingUpper": [2, 1], "stride": [2, 1]}, 2, "ipu1"),
    (FLOAT, 1, [11, 5], [5, 3], 8, 4, {"paddingLower": [2, 1], "paddingUpper": [2, 1]}, 3, "ipu1"),
    (FLOAT, 1, [12, 6], [3, 3], 8, 8, {"dilation": [2, 1], "paddingLower": [1, 1]}, 2, "ipu2"),
    (FLOAT, 2, [7, 7], [3, 3], 8, 8, {"inputDilation": [2, 1]}, 3, "ipu1"),
    (FLOAT, 1, [6, 6], [3, 3], 8, 8, {}, 1, "ipu1"),
    # a kernel flipped in the outer dimension (an input gradient's), unequal parts of 2 and
    # 3 rows, and flipped after its truncation, dilation and padding
    (FLOAT, 2, [9, 6], [5, 3], 8, 8,
     {"paddingLower": [2, 1], "paddingUpper": [2, 1], "kernelTransform": {"flip": [True, True]}},
     2, "ipu1"),
    (FLOAT, 1, [12, 6], [4, 3], 8, 8,
     {"paddingLower": [1, 1], "kernelTransform": {"flip": [True, False], "dilation": [2, 1],
                                                  "truncationLower": [1, 0],
                                                  "paddingUpper": [1, 0]}}, 2, "ipu1"),
    (HALF, 1, [10, 10], [3, 3], 16, 16, {"paddingLower": [1, 1], "paddingUpper": [1, 1]}, 3,
     "ipu2"),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[f"case{i}" for i in range(len(CASES))])
def test_kernel_split_equals_numpy(case) -> None:
    """The forward values of a plan with the asked kernel split equal numpy's convolution
    (``ref_conv``: Poplar's ConvParams applied literally), and every part of every block
    has its vertex in the convolution's compute set."""
    dt, b, f, k, ci, co, kw, n, preset = case
    p = poplin.ConvParams(dt, b, f, k, ci, co, 1, **kw)
    graph = Graph(IPUModel(preset).createDevice().getTarget())
    plan = poplin.getConvPlan(graph, p, _split(n))
    assert plan.kernel_split == n
    npdt = np.float32 if dt == FLOAT else np.float16
    rtol, atol = (1e-5, 1e-4) if dt == FLOAT else (2e-2, 5e-2)
    g = forward_equals_numpy(p, np.random.default_rng(sum(f) + n), preset, _split(n), npdt,
                             rtol, atol)  # fmt: skip
    # at most one partial-sum vertex a block and kernel part, on the part's tile (a
    # part whose rows meet only padding in a block is zeroed instead)
    tiles = _partial_vertex_tiles(g, "fwd/Convolve")
    assert len(set(tiles)) == len(tiles) and set(tiles) <= set(plan.tiles.reshape(-1).tolist())
    assert len(tiles) >= plan.num_tiles_used // n
    if plan.parts[-1] * n > 1:  # (the partials of the Ci x kernel parts are reduced)
        assert any(v.startswith("poplin::ReduceAdd") for v in vertex_names(g, "fwd/Reduce"))


def _partial_vertex_tiles(graph: Graph, cs_suffix: str) -> list[int]:
    """The tiles of the partial-sum vertices of the compute set named ``*cs_suffix``."""
    st = graph._state
    return [
        int(st.vertices.tile[v])
        for cs in st.compute_sets
        if cs.name.endswith(cs_suffix)
        for v in cs.vertices
        if "ConvPartial" in st.vertices[v].vtype.name
    ]


def test_kernel_split_with_an_input_channel_split_equals_numpy() -> None:
    """64 input channels on a 4 KiB bound: the plan splits the input channels too, and
    the partials of the ``Ci x 3`` parts are summed into numpy's values."""
    p = poplin.ConvParams(FLOAT, 1, [6, 6], [3, 3], 64, 8, 1, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    opts = {**_split(3), "availableMemoryProportion": "0.005"}
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    plan = poplin.getConvPlan(graph, p, opts)
    assert plan.kernel_split == 3 and plan.parts[-1] > 1, plan
    forward_equals_numpy(p, np.random.default_rng(3), "ipu1", opts)


def test_kernel_rows_are_poplibs_split_begins() -> None:
    """``getParallelSplitBegin``: ``rows // K`` a part, the last ``rows % K`` one more."""
    assert kernel_ranges(3, 3) == [(0, 1), (1, 2), (2, 3)]
    assert kernel_ranges(5, 3) == [(0, 1), (1, 3), (3, 5)]
    assert kernel_ranges(7, 2) == [(0, 3), (3, 7)]
    assert kernel_ranges(4, 1) == [(0, 4)]


@pytest.mark.parametrize(
    "kw, split",
    [
        ({"paddingLower": [1, 0], "paddingUpper": [2, 1], "stride": [2, 1], "dilation": [2, 1]},
         3),
        ({"paddingLower": [1, 0],
          "kernelTransform": {"truncationLower": [1, 0], "truncationUpper": [0, 0],
                              "paddingLower": [2, 0], "paddingUpper": [1, 0],
                              "dilation": [2, 1]}}, 2),
    ],
)  # fmt: skip
def test_a_kernel_part_reads_what_its_rows_read(kw, split) -> None:
    """Summing the kernel parts' convolutions (each on its rows of the weights) gives the
    whole convolution: the parts' parameters shift the transformed input by where their
    rows lie in the transformed kernel, with stride, dilation, the kernel's truncation
    and padding."""
    p = poplin.ConvParams(FLOAT, 1, [10, 4], [4, 2], 2, 3, 1, **kw)
    rng = np.random.default_rng(4)
    x = rng.standard_normal(p.inputShape())
    w = rng.standard_normal(p.weightsShape())
    total = np.zeros(ref_conv(x, w, p).shape)
    for k0, k1 in kernel_ranges(4, split):
        sub = kernel_part_params(p, k0, k1)
        assert sub.getOutputFieldShape() == p.getOutputFieldShape()
        total += ref_conv(x, w[:, :, :, k0:k1], _unsigned(sub))
    np.testing.assert_allclose(total, ref_conv(x, w, p), atol=1e-12)


def test_training_passes_with_a_kernel_split_equal_numpy() -> None:
    """Forward, input-gradient and weight-update passes each planned with 2 kernel parts
    (the weight update's kernel, the output gradient, is dilated by the stride): the
    values, and the gradients as the transposed Jacobians of numpy's convolution."""
    p = poplin.ConvParams(FLOAT, 2, [6, 5], [3, 2], 4, 4, 1, paddingLower=[1, 0],
                          paddingUpper=[1, 1], stride=[2, 1])  # fmt: skip
    x, w, dy = random_operands(p, np.random.default_rng(2))
    out, _, graph = run_passes(p, x, w, dy, preset="ipu1", options=_split(2))
    jx, jw = jacobians(x, w, p)
    np.testing.assert_allclose(out["y"], ref_conv(x, w, p), rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(out["dx"].reshape(-1), jx.T @ dy.reshape(-1), atol=1e-4)
    np.testing.assert_allclose(out["dw"].reshape(-1), jw.T @ dy.reshape(-1), atol=1e-4)
    wu = poplin.getWeightUpdateParams(p)
    assert poplin.getConvPlan(graph, wu, _split(2)).kernel_split == 2


def _unsigned(p: poplin.ConvParams) -> poplin.ConvParams:
    """``p`` with a negative input padding turned into a truncation (what numpy's
    reference takes; without input dilation the two are the same)."""
    it = p.inputTransform
    tl = [max(-x, 0) for x in it.paddingLower]
    tu = [max(-x, 0) for x in it.paddingUpper]
    return poplin.ConvParams(
        p.inputType, p.batchSize, list(p.inputFieldShape), list(p.kernelShape),
        p.inputChannelsPerConvGroup, p.outputChannelsPerConvGroup, p.numConvGroups,
        inputTransform={"truncationLower": tl, "truncationUpper": tu,
                        "paddingLower": [max(x, 0) for x in it.paddingLower],
                        "paddingUpper": [max(x, 0) for x in it.paddingUpper]},
        kernelTransform=p.kernelTransform, outputTransform=p.outputTransform,
    )  # fmt: skip


def test_tiles_are_in_poplibs_order() -> None:
    """``linearizeConvIndices``: conv group, input-channel part, kernel part, batch,
    field, output-channel part (innermost), written out for a small split."""
    parts = (1, 2, 3, 1, 2, 2)  # G, B, F0, F1, Co, Ci
    tiles = kernel_block_tiles(parts, 3, 1472, 1472)
    assert tiles.shape == (3, *parts)
    for k in range(3):
        for b in range(2):
            for f in range(3):
                for co in range(2):
                    for ci in range(2):
                        want = (((ci * 3 + k) * 2 + b) * 3 + f) * 2 + co
                        assert tiles[k, 0, b, f, 0, co, ci] == want


def _element_tiles(graph: Graph, t) -> np.ndarray:
    """The tile of every element of ``t``, in its shape."""
    out = np.full(t.numElements(), -1)
    for tile, regions in enumerate(graph.getTileMapping(t)):
        for region in regions:
            out[region.begin() : region.end()] = tile
    return out.reshape(t.shape())


def test_operands_lie_on_the_tiles_of_their_kernel_part() -> None:
    """createWeights puts each weight on a tile of its kernel row's part, and
    createInput spreads an input block over its kernel parts' tiles (in chunks of at
    least 128 bytes: blocks of some KiB on the 8-tile target)."""
    p = poplin.ConvParams(FLOAT, 1, [16, 16], [3, 3], 16, 8, 1, paddingLower=[1, 1],
                          paddingUpper=[1, 1])  # fmt: skip
    graph = Graph(IPUModel("tiny").createDevice().getTarget())  # (8 tiles: large blocks)
    plan = poplin.getConvPlan(graph, p, _split(3))
    w = poplin.createWeights(graph, p, "w", _split(3))
    x = poplin.createInput(graph, p, "x", _split(3))
    tile_of = _element_tiles(graph, w)
    tile_of = tile_of.reshape(p.weightsShape())
    for k in range(3):
        assert set(np.unique(tile_of[..., k, :])) <= set(plan.tiles[k].reshape(-1).tolist())
    x_tiles = {t for t, regions in enumerate(graph.getTileMapping(x)) if regions}
    assert x_tiles - set(plan.tiles[0].reshape(-1).tolist()), "inputs only on part 0's tiles"


@pytest.mark.parametrize(
    "split, why",
    [({"0": 2, "1": 2}, "every other dimension 1"), ({"0": 0}, "an int >= 1"),
     ([True], "an int >= 1")],
)  # fmt: skip
def test_bad_kernel_split_constraints_are_errors(split, why) -> None:
    p = poplin.ConvParams(FLOAT, 1, [8, 8], [3, 3], 8, 8, 1)
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    opts = {"planConstraints": json.dumps({"partition": {"kernelSplit": split}})}
    with pytest.raises(GraphError, match=why):
        poplin.getConvPlan(graph, p, opts)


def test_a_kernel_split_larger_than_the_rows_is_an_error() -> None:
    p = poplin.ConvParams(FLOAT, 1, [8, 8], [3, 3], 8, 8, 1)
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    with pytest.raises(GraphError, match=r"a kernel split of 4 \(1 to the 3 kernel rows"):
        poplin.getConvPlan(graph, p, _split(4))
    flipped = poplin.ConvParams(FLOAT, 1, [8, 8], [3, 3], 8, 8, 1,
                                inputTransform={"flip": [True, False]})  # fmt: skip
    with pytest.raises(GraphError, match="an input flip in dimension 0"):
        poplin.getConvPlan(graph, flipped, _split(3))
    cut = poplin.ConvParams(FLOAT, 1, [8, 8], [3, 3], 8, 8, 1,
                            kernelTransform={"truncationLower": [1, 0]})  # fmt: skip
    with pytest.raises(GraphError, match="a part of the 3 has only truncated kernel rows"):
        poplin.getConvPlan(graph, cut, _split(3))


@pytest.mark.parametrize(
    "params, options",
    [
        (ROW16, {"pass": "TRAINING_FWD"}),  # (the model restates pass NONE)
        (ROW16, {"enableFastReduce": "true"}),
        (ROW16, {"partialsType": "half"}),
        (poplin.ConvParams(HALF, 1, [56, 56], [3, 3], 16, 64, paddingLower=[1, 1],
                           paddingUpper=[1, 1]), None),  # (16 input channels: half partials)
        (poplin.ConvParams(FLOAT, 1, [56, 56], [3, 3], 64, 64), None),
    ],
)  # fmt: skip
def test_poplibs_plan_is_taken_only_where_the_model_covers_it(params, options) -> None:
    t = preset_target("mk2-ipumodel")
    assert adopted_conv2d_plan(params, parse_options(options, "t"), t) is None


@pytest.mark.slow
def test_row16_runs_poplibs_plan_against_numpy() -> None:
    """docs/planner.md row 16 on mk2-ipumodel: Poplibs' plan (field 10 x 3, kernel split
    3, Co 8, Ci 2 on 1440 tiles) gives numpy's values, its partials of the 6 parts of
    each output reduced."""
    graph = Graph(IPUModel("mk2-ipumodel").createDevice().getTarget())
    plan = poplin.getConvPlan(graph, ROW16)
    assert (plan.kernel_split, plan.parts, plan.release) == (3, (1, 1, 10, 3, 8, 2), "7eac0f26")
    rng = np.random.default_rng(16)
    x = rng.uniform(-1, 1, ROW16.inputShape()).astype(np.float16)
    w = rng.uniform(-1, 1, ROW16.weightsShape()).astype(np.float16)
    dy = np.zeros(ROW16.outputShape(), np.float16)
    out, _, _ = run_passes(ROW16, x, w, dy, preset="mk2-ipumodel", passes=("fwd",))
    np.testing.assert_allclose(out["y"].astype(np.float64), ref_conv(x, w, ROW16), atol=0.05)
