"""RoiAlign (popart_api/ops_window.py, poplar_api/popnn/roialign.py): values against
ONNX's reference evaluator, Poplibs' one-vertex-per-sample layout, and errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import popart_api as popart
from poplar_api import FLOAT, INT, Graph, IPUModel
from poplar_api import program as pprog
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.popnn import roialign
from poplar_api.popnn.roialign import POINT_CYCLES, SETUP_CYCLES

F = TensorProto.FLOAT


def _model(x_shape, n_rois, opset=16, **attrs) -> onnx.ModelProto:
    node = helper.make_node("RoiAlign", ["X", "rois", "idx"], ["Y"], name="myRoi", **attrs)
    graph = helper.make_graph(
        [node],
        "g",
        [
            helper.make_tensor_value_info("X", F, x_shape),
            helper.make_tensor_value_info("rois", F, [n_rois, 4]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, [n_rois]),
        ],
        [helper.make_tensor_value_info("Y", F, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _session(model: onnx.ModelProto, tiles: int = 4) -> popart.InferenceSession:
    flow = popart.DataFlow(1, {"Y": popart.AnchorReturnType("ALL")})
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": tiles})
    s = popart.InferenceSession(model.SerializeToString(), flow, device)
    s.prepareDevice()
    s.weightsFromHost()
    return s


def _feeds(rng, x_shape, n_rois):
    h, w = x_shape[2:]
    corners = rng.uniform(-3.0, max(h, w) + 2.0, size=(n_rois, 2, 2)).astype(np.float32)
    lo, hi = corners.min(axis=1), corners.max(axis=1)
    rois = np.concatenate([lo, hi], axis=1)  # x1, y1, x2, y2 (some partly outside)
    return {
        "X": rng.standard_normal(x_shape).astype(np.float32),
        "rois": rois,
        "idx": rng.integers(0, x_shape[0], n_rois).astype(np.int64),
    }


@pytest.mark.parametrize(
    "attrs",
    [
        {"coordinate_transformation_mode": "output_half_pixel", "sampling_ratio": 2,
         "output_height": 5, "output_width": 5},
        {"coordinate_transformation_mode": "half_pixel", "sampling_ratio": 3,
         "spatial_scale": 0.5, "output_height": 3, "output_width": 4},
        {"coordinate_transformation_mode": "output_half_pixel", "mode": "max",
         "sampling_ratio": 2, "output_height": 4, "output_width": 2},
    ],
)  # fmt: skip
def test_roialign_matches_the_reference(attrs):
    x_shape, n_rois = [2, 3, 9, 7], 5
    model = _model(x_shape, n_rois, **attrs)
    feeds = _feeds(np.random.default_rng(7), x_shape, n_rois)
    s = _session(model)
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(feeds, anchors))
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    assert anchors["Y"].shape == want.shape
    np.testing.assert_allclose(anchors["Y"], want, rtol=1e-4, atol=1e-5)


def test_roialign_has_one_vertex_per_region_channel_and_sample():
    """Poplibs' roiAlignFwd: R x C x ratio^2 vertices, each estimated as the set-up
    plus a fixed cost per output point of its sample."""
    model = _model([1, 2, 6, 6], 3, sampling_ratio=2, output_height=3, output_width=5)
    s = _session(model)
    sets = {cs.name: cs for cs in s.getReport().compilation.computeSets}
    cs = [c for n, c in sets.items() if n.endswith("roiAlignCS")]
    assert len(cs) == 1 and cs[0].vertexCount == 3 * 2 * 2 * 2
    cls = roialign.roi_align_vertex(FLOAT)
    target = IPUModel("tiny").createDevice().getTarget()
    assert cls.getCycleEstimate({"top_data_grid": 15}, target) == SETUP_CYCLES + 15 * POINT_CYCLES


def test_roialign_defaults_are_popart_s():
    """PopART's RoiAlign defaults to a 7x7 output (ONNX: 1x1)."""
    s = _session(_model([1, 1, 4, 4], 2, sampling_ratio=1))
    assert s.initAnchorArrays()["Y"].shape == (2, 1, 7, 7)


def test_roialign_bad_input_is_named():
    model = _model([1, 1, 4, 4], 2, sampling_ratio=0)
    with pytest.raises(
        popart.popart_exception, match=r"RoiAlign \(node 'myRoi'\).*sampling_ratio 0"
    ):
        _session(model)
    bad = _model([1, 1, 4, 4], 2, sampling_ratio=1)
    bad.graph.input[1].type.tensor_type.shape.dim[1].dim_value = 3
    with pytest.raises(popart.popart_exception, match=r"'myRoi'.*rois 'rois' \[2, 3\].*\[R, 4\]"):
        _session(bad)
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    x = graph.addVariable(FLOAT, [1, 1, 4, 4], "x")
    rois = graph.addVariable(FLOAT, [2, 4], "r")
    params = roialign.RoiAlignParams(1, 2, 2, False, 1.0)
    with pytest.raises(GraphError, match="bottomBatchIndex 'i' has 3 entries for 2 regions"):
        roialign.roiAlignFwd(graph, pprog.Sequence(), x, rois,
                             graph.addVariable(INT, [3], "i"), params)  # fmt: skip
    with pytest.raises(TypeMismatchError, match=r"bottomRois 'ri'.*int"):
        roialign.roiAlignFwd(graph, pprog.Sequence(), x, graph.addVariable(INT, [2, 4], "ri"),
                             graph.addVariable(INT, [2], "j"), params)  # fmt: skip


def test_roialign_gradient_matches_finite_differences():
    """PopART's RoiAlignGradOp: X's gradient (Poplibs' roiAlignInputGradient, the
    regions spread over compute sets in groups) against the reference evaluator."""
    from popart_harness import check_gradients

    rois = np.array([[0.5, 1.0, 5.0, 4.5], [-2.0, 0.0, 3.0, 7.5], [2.0, 2.0, 2.5, 2.2]], np.float32)

    def build(b, ids):
        r = b.aiOnnx.constant(rois)
        return b.aiOnnx.roialign([ids[0], r, ids[1]], output_height=3, output_width=2,
                                 sampling_ratio=2, spatial_scale=1.0,
                                 coordinate_transformation_mode="output_half_pixel")  # fmt: skip

    x = np.random.default_rng(11).standard_normal((2, 2, 6, 5)).astype(np.float32)
    check_gradients(build, [x, np.array([1, 0, 1], np.int64)], tiles=4, rtol=1e-3, atol=1e-4,
                    opsets={"ai.onnx": 16, "ai.graphcore": 1})  # fmt: skip


def test_roialign_10_samples_as_output_half_pixel():
    """RoiAlign-10 (PopART's) has no coordinate mode: it samples as opset 16's
    ``output_half_pixel`` (onnx.reference 1.23 applies ``half_pixel`` to every opset,
    so the opset-16 model with the mode spelled out is the reference)."""
    x_shape, n_rois = [2, 2, 6, 5], 4
    feeds = _feeds(np.random.default_rng(5), x_shape, n_rois)
    s = _session(_model(x_shape, n_rois, opset=11, sampling_ratio=2, output_height=3,
                        output_width=2))  # fmt: skip
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(feeds, anchors))
    ref = _model(x_shape, n_rois, opset=16, sampling_ratio=2, output_height=3, output_width=2,
                 coordinate_transformation_mode="output_half_pixel")  # fmt: skip
    want = ReferenceEvaluator(ref).run(None, feeds)[0]
    np.testing.assert_allclose(anchors["Y"], want, rtol=1e-4, atol=1e-5)


def test_roialign_gradient_groups_regions_as_poplibs():
    """group = min(R, ceil(workers x tiles / (C x ratio^2))) regions per compute set,
    one compute set per group of regions."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    target = graph.getTarget()
    channels, ratio, rois = 3, 2, 40
    x = graph.addVariable(FLOAT, [1, channels, 4, 4], "x")
    r = graph.addVariable(FLOAT, [rois, 4], "r")
    i = graph.addVariable(INT, [rois], "i")
    top = graph.addVariable(FLOAT, [rois, channels, 2, 2], "top")
    params = roialign.RoiAlignParams(ratio, 2, 2, False, 1.0)
    group = min(rois, -(-target.getNumWorkerContexts() * target.getNumTiles()
                        // (channels * ratio * ratio)))  # fmt: skip
    assert group < rois  # the regions need several compute sets on this target
    before = graph.getNumComputeSets()
    out = roialign.roiAlignInputGradient(graph, pprog.Sequence(), x, r, i, top, params, "g")
    assert out.shape() == [1, channels, 4, 4]
    fills_and_reduce = graph.getNumComputeSets() - before - -(-rois // group)
    assert 1 <= fills_and_reduce <= 4  # the zero fill and the reduction's stages
    bad = roialign.RoiAlignParams(ratio, 3, 3, False, 1.0)
    with pytest.raises(GraphError, match=r"topDataGrad 'top' is float \[40, 3, 2, 2\]; "
                       r"required float \[40, 3, 3, 3\]"):  # fmt: skip
        roialign.roiAlignInputGradient(graph, pprog.Sequence(), x, r, i, top, bad)
