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
