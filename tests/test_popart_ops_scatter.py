"""popart_api's ScatterElements and Scatter (popart_api/ops_scatter.py): values
against ONNX's reference evaluator, indices fed at run time."""

from __future__ import annotations

import numpy as np
import pytest
from popart_harness import check_forward

RNG = np.random.default_rng(29)
OPSET18 = {"ai.onnx": 18, "ai.graphcore": 1}


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatter_elements_reductions(reduction: str) -> None:
    data = RNG.standard_normal([3, 5]).astype(np.float32)
    if reduction == "none":  # distinct targets per row
        idx = np.array([[4, 0, -2], [1, 3, 2]], np.int32)
    else:  # repeated and negative targets
        idx = np.array([[1, 1, -1], [0, 4, 0]], np.int32)
    upd = RNG.standard_normal([2, 3]).astype(np.float32)
    check_forward(
        lambda b, ids: b.aiOnnx.scatterelements(ids, axis=1, reduction=reduction),
        [data, idx, upd],
        opsets=OPSET18,
    )


def test_scatter_elements_axis_0_partial_extent_integers() -> None:
    data = np.arange(20, dtype=np.int32).reshape(4, 5)
    idx = np.array([[3, 0], [1, 2]], np.int32)  # covers columns 0-1 only
    upd = np.array([[100, 101], [102, 103]], np.int32)
    got = check_forward(lambda b, ids: b.aiOnnx.scatterelements(ids, axis=0), [data, idx, upd],
                        opsets=OPSET18)  # fmt: skip
    want = data.copy()
    for i in range(2):
        for j in range(2):
            want[idx[i, j], j] = upd[i, j]
    np.testing.assert_array_equal(got, want)


def test_scatter_opset_9() -> None:
    """Scatter (opset 9) is ScatterElements without a reduction; onnx.reference has no
    Scatter, so the expected values are written here."""
    from onnx import TensorProto, helper

    import popart_api as popart

    data = np.zeros([3, 3], np.float32)
    idx = np.array([[1, 0, 2], [0, 2, 1]], np.int32)
    upd = np.arange(6, dtype=np.float32).reshape(2, 3)
    graph = helper.make_graph(
        [helper.make_node("Scatter", ["d", "i", "u"], ["y"], axis=0)],
        "g",
        [
            helper.make_tensor_value_info("d", TensorProto.FLOAT, [3, 3]),
            helper.make_tensor_value_info("i", TensorProto.INT32, [2, 3]),
            helper.make_tensor_value_info("u", TensorProto.FLOAT, [2, 3]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 3])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)])
    s = popart.InferenceSession(
        fnModel=model.SerializeToString(),
        dataFlow=popart.DataFlow(1, {"y": popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
    )
    s.prepareDevice()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO({"d": data, "i": idx, "u": upd}, anchors))
    want = data.copy()
    for i in range(2):
        for j in range(3):
            want[idx[i, j], j] = upd[i, j]
    np.testing.assert_array_equal(anchors["y"], want)
