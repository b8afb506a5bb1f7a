"""Bad ONNX input gets an error naming the node, the tensor and what was required:
an unknown op, an opset too old or too new, a type the IPU or the op does not take,
a wrong input shape."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import popart_api as popart

F = TensorProto.FLOAT


def _vi(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def _prepare(nodes, inputs, outputs, opset=13, domain_opsets=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    opsets = [helper.make_opsetid("", opset), *domain_opsets]
    model = helper.make_model(graph, opset_imports=opsets)
    flow = popart.DataFlow(1, {o.name: popart.AnchorReturnType("ALL") for o in outputs})
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4})
    session = popart.InferenceSession(model.SerializeToString(), flow, device)
    session.prepareDevice()
    return session


def test_an_op_popart_lacks_names_node_type_and_opset():
    node = helper.make_node("Det", ["x"], ["y"], name="myDet")
    with pytest.raises(
        popart.popart_exception,
        match=r"'Det' \(domain 'ai.onnx', opset 13, node 'myDet'\).*PopART's op registry has "
        r"no such op.*supported: .*ai.onnx::RoiAlign",
    ):
        _prepare([node], [_vi("x", [2, 2])], [_vi("y", [])])


def test_an_unknown_domain_is_named():
    node = helper.make_node("Frob", ["x"], ["y"], name="f", domain="com.example")
    with pytest.raises(popart.popart_exception, match=r"'Frob' \(domain 'com.example'.*'f'"):
        _prepare([node], [_vi("x", [2])], [_vi("y", [2])],
                 domain_opsets=[helper.make_opsetid("com.example", 1)])  # fmt: skip


def test_opsets_outside_the_supported_range_are_named():
    # PopART's opset tables start at ai.onnx 6 (graphcore/popart opsets.gen.hpp): any
    # older model is refused, whatever its ops
    for opset, op in ((5, "Add"), (1, "Relu")):
        old = helper.make_node(op, ["x", "x"][: 2 if op == "Add" else 1], ["y"], name="old")
        with pytest.raises(popart.popart_exception, match=rf"opset {opset} of 'ai.onnx'; PopART "
                           r"supports ai.onnx opsets from 6.*convert_version"):  # fmt: skip
            _prepare([old], [_vi("x", [2])], [_vi("y", [2])], opset=opset)
    # an op newer than the model's opset: named with the first opset that has it
    late = helper.make_node("Mod", ["x", "x"], ["y"], name="lateMod")
    with pytest.raises(popart.popart_exception, match=r"'Mod' \(node 'lateMod'\): opset 9.*from "
                       r"opset 10"):  # fmt: skip
        _prepare([late], [_vi("x", [2])], [_vi("y", [2])], opset=9)
    new = helper.make_node("Relu", ["x"], ["y"])
    top = onnx.defs.onnx_opset_version()
    with pytest.raises(popart.popart_exception, match=rf"opset {top + 1} of 'ai.onnx'.*{top}"):
        _prepare([new], [_vi("x", [2])], [_vi("y", [2])], opset=top + 1)


def test_types_the_ipu_or_the_op_does_not_take_are_named():
    relu = helper.make_node("Relu", ["x"], ["y"], name="r")
    with pytest.raises(popart.popart_exception, match=r"input 'x' has type DOUBLE.*FLOAT"):
        _prepare([relu], [_vi("x", [2], TensorProto.DOUBLE)], [_vi("y", [2])])
    with pytest.raises(popart.popart_exception, match=r"Relu \(node 'r'\): input 'x' is int.*"
                       r"FLOAT or FLOAT16"):  # fmt: skip
        _prepare([relu], [_vi("x", [2], TensorProto.INT32)], [_vi("y", [2])])
    roi = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], name="roi")
    with pytest.raises(popart.popart_exception, match=r"RoiAlign \(node 'roi'\): batch_indices "
                       r"'idx' is float.*INT64 or INT32"):  # fmt: skip
        _prepare([roi], [_vi("x", [1, 1, 4, 4]), _vi("rois", [2, 4]), _vi("idx", [2])],
                 [_vi("y", [])])  # fmt: skip


def test_wrong_input_shapes_are_named():
    mm = helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")
    with pytest.raises(popart.popart_exception, match=r"MatMul \(node 'mm'\).*'a' \[2, 3\] x "
                       r"'b' \[4, 5\]"):  # fmt: skip
        _prepare([mm], [_vi("a", [2, 3]), _vi("b", [4, 5])], [_vi("y", [])])
    cond = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "t", [],
                             [_vi("t", [3])])  # fmt: skip
    if_node = helper.make_node("If", ["c"], ["y"], name="branchy", then_branch=cond,
                               else_branch=cond)  # fmt: skip
    with pytest.raises(popart.popart_exception, match=r"If \(node 'branchy'\): condition 'c' "
                       r"has shape \[2\].*one element"):  # fmt: skip
        _prepare([if_node], [_vi("c", [2], TensorProto.BOOL), _vi("x", [3])], [_vi("y", [3])])
    session = _prepare([helper.make_node("Relu", ["x"], ["y"])], [_vi("x", [2, 3])],
                       [_vi("y", [2, 3])])  # fmt: skip
    anchors = session.initAnchorArrays()
    with pytest.raises(popart.popart_exception, match=r"'x'.*\[2, 3\]"):
        session.run(popart.PyStepIO({"x": np.ones((3, 2, 2), np.float32)}, anchors))


def test_a_tensor_made_twice_names_both_nodes():
    # The second node's value silently replaced the first one's for every reader.
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="first"),
        helper.make_node("Neg", ["x"], ["y"], name="second"),
    ]
    with pytest.raises(
        popart.popart_exception,
        match=r"Neg \(node 'second'\) makes 'y', which is already made by Relu \(node 'first'\)",
    ):
        _prepare(nodes, [_vi("x", [2])], [_vi("y", [2])])


def test_a_graph_output_no_node_makes_is_named():
    # It read "anchor 'z' is not a tensor of the model; model outputs: ['z']".
    node = helper.make_node("Relu", ["x"], ["y"])
    with pytest.raises(popart.popart_exception, match="graph output 'z' is made by no node"):
        _prepare([node], [_vi("x", [2])], [_vi("z", [2])])
