"""popart_api's random generators (popart_api/ops_random.py): shapes, types, ranges and
moments of the values, seeds (random values: statistical checks with wide margins)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import popart_api as popart


def _run(nodes, outputs, seed=0, inputs=(), feeds=None):
    graph = helper.make_graph(nodes, "g", list(inputs), outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    opts = popart.SessionOptions()
    opts.randomSeed = seed
    names = [o.name for o in outputs]
    s = popart.InferenceSession(
        fnModel=model.SerializeToString(),
        dataFlow=popart.DataFlow(1, {n: popart.AnchorReturnType("ALL") for n in names}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
        userOptions=opts,
    )
    s.prepareDevice()
    s.weightsFromHost()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO(feeds or {}, anchors))
    return anchors


def test_uniform_and_normal_ranges_and_moments() -> None:
    anchors = _run(
        [
            helper.make_node("RandomUniform", [], ["u"], shape=[64, 64], low=-2.0, high=3.0),
            helper.make_node("RandomNormal", [], ["n"], shape=[64, 64], mean=1.5, scale=0.5),
        ],
        [
            helper.make_tensor_value_info("u", TensorProto.FLOAT, [64, 64]),
            helper.make_tensor_value_info("n", TensorProto.FLOAT, [64, 64]),
        ],
        seed=7,
    )
    u, n = anchors["u"], anchors["n"]
    assert u.min() >= -2.0 and u.max() <= 3.0
    assert abs(u.mean() - 0.5) < 0.15  # mean of U(-2, 3); sd of the mean ~0.02
    assert abs(n.mean() - 1.5) < 0.05 and abs(n.std() - 0.5) < 0.05
    assert len(np.unique(u)) > 4000


def test_like_forms_take_the_reference_shape_and_the_seed_matters() -> None:
    x = np.zeros([3, 5], np.float16)
    node = helper.make_node("RandomUniformLike", ["x"], ["y"])
    io = dict(
        inputs=[helper.make_tensor_value_info("x", TensorProto.FLOAT16, [3, 5])],
        feeds={"x": x},
    )
    out = [helper.make_tensor_value_info("y", TensorProto.FLOAT16, [3, 5])]
    a = _run([node], out, seed=1, **io)["y"]
    b = _run([node], out, seed=1, **io)["y"]
    c = _run([node], out, seed=2, **io)["y"]
    assert a.shape == (3, 5) and a.dtype == np.float16
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)


def _normal(seed):
    node = helper.make_node("RandomNormal", [], ["n"], shape=[8])
    return _run([node], [helper.make_tensor_value_info("n", TensorProto.FLOAT, [8])], seed)["n"]


def test_seeds_that_differ_above_bit_31_give_other_values() -> None:
    # Only the low 32 bits were used: 5 and 5 + 2**32 gave the same values.
    assert not np.array_equal(_normal(5), _normal(5 + 2**32))
    np.testing.assert_array_equal(_normal(2**32 - 1), _normal(2**32 - 1))


def test_a_seed_outside_uint64_is_refused() -> None:
    # -1 was taken (as the seed's low 32 bits), and so was 2**64 (as 0).
    opts = popart.SessionOptions()
    for seed in (-1, 2**64):
        with pytest.raises(popart.popart_exception, match=r"outside 0\.\.2\*\*64-1"):
            opts.randomSeed = seed


def test_an_op_without_inputs_is_built_without_an_input_list() -> None:
    # PopART's randomnormal(shape=...) takes no input list; it failed with "missing 1
    # required positional argument: 'args'".
    b = popart.Builder()
    r = b.aiOnnx.randomnormal(shape=[2, 3], mean=4.0, scale=0.0)
    u = b.aiOnnx.randomuniform([2, 3], low=1.0, high=1.0)  # shape by position
    b.addOutputTensor(r)
    b.addOutputTensor(u)
    flow = popart.DataFlow(
        1, {r: popart.AnchorReturnType("ALL"), u: popart.AnchorReturnType("ALL")}
    )
    s = popart.InferenceSession(
        b.getModelProto(), flow, popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4})
    )
    s.prepareDevice()
    anchors = s.initAnchorArrays()
    s.run(popart.PyStepIO({}, anchors))
    np.testing.assert_array_equal(anchors[r], np.full([2, 3], 4.0, np.float32))
    np.testing.assert_array_equal(anchors[u], np.ones([2, 3], np.float32))
