"""PopART's graph-rewriting patterns (``popart_api/graph_patterns.py``): OpToIdentity,
PostNRepl, PreUniRepl, NegativeOneScale, ExpandCast and SumToAdd rewrite the model a
session lowers, each switched off by name gives the graph without it, and the values
stay those of numpy."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from popart_harness import run_session

import popart_api as popart
from popart_api.graph_patterns import apply_graph_patterns

F = TensorProto.FLOAT
B, D = 16, 32


def _model(nodes, out="y", shape=(B, D), out_type=F, inits=(), graphcore=False):
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((D, D)) * 0.2).astype(np.float32), "w")
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", F, [B, D])],
        [helper.make_tensor_value_info(out, out_type, list(shape))],
        [w, *inits],
    )
    opsets = [helper.make_opsetid("", 11)]
    if graphcore:
        opsets.append(helper.make_opsetid("ai.graphcore", 1))
    return helper.make_model(graph, opset_imports=opsets)


def _run(model, patterns=None, anchor="y"):
    x = np.random.default_rng(1).standard_normal((B, D)).astype(np.float32)
    s, out = run_session(model.SerializeToString(), {"x": x}, [anchor], patterns=patterns)
    memory = sum(t.memory.total for t in s.getReport().compilation.tiles)
    ops = [n.op_type for n in s.model.graph.node]
    return ops, out[anchor], s.getCycleCount(), memory, x


def _without(*names):
    p = popart.Patterns()
    for n in names:
        p.enablePattern(n, False)
    return p


def _w():
    return (np.random.default_rng(0).standard_normal((D, D)) * 0.2).astype(np.float32)


def _identity_chain():
    """MatMul, then five ops that return their input unchanged, then Relu."""
    return _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Scale", ["m"], ["a"], domain="ai.graphcore", scale=1.0),
            helper.make_node("Sum", ["a"], ["b"]),
            helper.make_node("Cast", ["b"], ["c"], to=F),
            helper.make_node("Transpose", ["c"], ["d"], perm=[0, 1]),
            helper.make_node("Dropout", ["d"], ["f"], ratio=0.3),
            helper.make_node("Relu", ["f"], ["y"]),
        ],
        graphcore=True,
    )


def test_op_to_identity_and_post_n_repl_remove_ops_that_change_nothing():
    on_ops, on, on_cycles, on_mem, x = _run(_identity_chain())
    assert on_ops == ["MatMul", "Relu"]
    np.testing.assert_allclose(on, np.maximum(x @ _w(), 0), rtol=1e-5, atol=1e-6)
    # OpToIdentity off: the ops run (PostNRepl still drops the one-input Sum)
    off_ops, off, _, off_mem, _ = _run(_identity_chain(), _without("OpToIdentity"))
    assert off_ops == ["MatMul", "Scale", "Cast", "Transpose", "Dropout", "Relu"]
    np.testing.assert_array_equal(off, on)
    # the removed ops' tensors are gone; cycles are not compared: the MatMul's product
    # (swapped operands) lies in its output channels' grouped order, where the in-place
    # Relu and the anchor's exchange cost more (422 and 310 cycles) than after the
    # identities' copies, which lay a new tensor out linearly (230 and 201; the whole run
    # 6,289 cycles with the patterns, 6,191 without)
    assert off_mem > on_mem
    # PostNRepl off: the identities stay (views while InPlace is on: same cycles)
    kept, same, kept_cycles, _, _ = _run(_identity_chain(), _without("PostNRepl", "PreUniRepl"))
    assert kept.count("Identity") == 5
    np.testing.assert_array_equal(same, on)
    assert kept_cycles == on_cycles
    # ... and copies with InPlace off as well (PopART's IdentityOpx copies)
    copied = _run(_identity_chain(), _without("PostNRepl", "PreUniRepl", "InPlace"))
    removed = _run(_identity_chain(), _without("InPlace"))
    assert copied[2] > removed[2] and copied[3] > removed[3]
    np.testing.assert_array_equal(copied[1], on)


def test_anchored_and_output_identities_stay():
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Identity", ["m"], ["kept"]),
            helper.make_node("Relu", ["kept"], ["y"]),
        ]
    )
    ops, *_ = _run(model, anchor="kept")
    assert ops == ["MatMul", "Identity", "Relu"]
    ops, *_ = _run(model, anchor="y")
    assert ops == ["MatMul", "Relu"]


def test_pre_uni_repl_lets_the_producer_write_the_output():
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Sum", ["m"], ["y"])]
    )
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    applied = apply_graph_patterns(copy, lambda n: n == "PreUniRepl", True, [])
    assert applied["PreUniRepl"] == 1
    assert [(n.op_type, list(n.output)) for n in copy.graph.node] == [("MatMul", ["y"])]
    # PostNRepl cannot (y is the graph output); without PreUniRepl (and OpToIdentity,
    # which would make the Sum an Identity first) the Sum runs
    ops, out, cycles, memory, x = _run(model, _without("PreUniRepl", "OpToIdentity"))
    assert ops == ["MatMul", "Sum"]
    ops2, out2, cycles2, memory2, _ = _run(model, _without("OpToIdentity"))
    assert ops2 == ["MatMul"]
    np.testing.assert_array_equal(out, out2)
    np.testing.assert_allclose(out2, x @ _w(), rtol=1e-5, atol=1e-6)
    assert cycles > cycles2 and memory > memory2


def test_negative_one_scale_becomes_neg():
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Scale", ["m"], ["y"], domain="ai.graphcore", scale=-1.0),
        ],
        graphcore=True,
    )
    ops, on, _, _, x = _run(model)
    assert ops == ["MatMul", "Neg"]
    ops_off, off, _, _, _ = _run(model, _without("NegativeOneScale"))
    assert ops_off == ["MatMul", "Scale"]
    np.testing.assert_array_equal(on, off)
    np.testing.assert_allclose(on, -(x @ _w()), rtol=1e-5, atol=1e-6)


def test_expand_cast_casts_before_expanding():
    """Expand [1, D] -> [B, D] then Cast to FLOAT16: with ExpandCast the cast runs on
    D elements, not B·D: fewer cycles and less memory, the same values."""
    row = numpy_helper.from_array(np.linspace(-2, 2, D, dtype=np.float32)[None], "row")
    shape = numpy_helper.from_array(np.array([B, D], np.int64), "shape")
    model = _model(
        [
            helper.make_node("Add", ["x", "row"], ["r"]),
            helper.make_node("ReduceMax", ["r"], ["rm"], axes=[0], keepdims=1),
            helper.make_node("Expand", ["rm", "shape"], ["ex"]),
            helper.make_node("Cast", ["ex"], ["y"], to=TensorProto.FLOAT16),
        ],
        out_type=TensorProto.FLOAT16,
        inits=[row, shape],
    )
    ops, on, cycles_on, mem_on, x = _run(model)
    assert ops == ["Add", "ReduceMax", "Cast", "Expand"]
    ops_off, off, cycles_off, mem_off, _ = _run(model, _without("ExpandCast"))
    assert ops_off == ["Add", "ReduceMax", "Expand", "Cast"]
    want = np.broadcast_to((x + np.linspace(-2, 2, D)[None]).max(0, keepdims=True), (B, D))
    np.testing.assert_array_equal(on, off)
    np.testing.assert_allclose(on, want.astype(np.float16), rtol=1e-3)
    assert cycles_off > cycles_on and mem_off > mem_on


def test_sum_of_two_becomes_add():
    model = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["m"]),
            helper.make_node("Sum", ["m", "x"], ["y"]),
        ]
    )
    ops, on, _, _, x = _run(model)
    assert ops == ["MatMul", "Add"]
    ops_off, off, _, _, _ = _run(model, _without("SumToAdd"))
    assert ops_off == ["MatMul", "Sum"]
    np.testing.assert_array_equal(on, off)
    np.testing.assert_allclose(on, x @ _w() + x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("inference", [True, False])
def test_dropout_is_an_identity_only_in_inference(inference):
    model = _model([helper.make_node("Dropout", ["x"], ["y"], ratio=0.5)], shape=(B, D))
    apply_graph_patterns(model, lambda n: n == "OpToIdentity", inference, ["y"])
    assert [n.op_type for n in model.graph.node] == ["Identity" if inference else "Dropout"]


def _pads(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def test_pad_sum_becomes_a_concat_of_the_inputs():
    """Relu(x) in columns [0, D) and -x in [D + 4, 2D + 4), each zero-padded to
    2D + 4 and summed: PadSum makes one Concat; the gap [D, D + 4) goes to the first
    input as its right padding (the last gap, PopART's createPadOps). The values stay
    numpy's; off by name, the pads and the Sum run."""
    width = 2 * D + 4
    model = _model(
        [
            helper.make_node("Relu", ["x"], ["a"]),
            helper.make_node("Neg", ["x"], ["b"]),
            helper.make_node("Pad", ["a", "pa"], ["pa_out"]),
            helper.make_node("Pad", ["b", "pb"], ["pb_out"]),
            helper.make_node("Sum", ["pb_out", "pa_out"], ["y"]),
        ],
        shape=(B, width),
        inits=[_pads("pa", [0, 0, 0, D + 4]), _pads("pb", [0, D + 4, 0, 0])],
    )
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    assert apply_graph_patterns(copy, lambda n: n == "PadSum", False, [])["PadSum"] == 1
    pads = [n for n in copy.graph.node if n.op_type == "Constant"]
    got = [numpy_helper.to_array(n.attribute[0].t).tolist() for n in pads]
    assert got == [[0, 0, 0, 4], [0, 0, 0, 0]]
    ops, on, cycles_on, _, x = _run(model)
    assert ops == ["Relu", "Neg", "Constant", "Pad", "Constant", "Pad", "Concat"]
    want = np.concatenate([np.maximum(x, 0), np.zeros((B, 4), np.float32), -x], axis=1)
    np.testing.assert_array_equal(on, want)
    ops_off, off, cycles_off, _, _ = _run(model, _without("PadSum"))
    assert ops_off == ["Relu", "Neg", "Pad", "Pad", "Add"]  # SumToAdd
    np.testing.assert_array_equal(off, want)
    assert cycles_on < cycles_off


def test_pad_sum_leaves_overlapping_or_shared_pads():
    overlap = _model(
        [
            helper.make_node("Pad", ["x", "pa"], ["pa_out"]),
            helper.make_node("Pad", ["x", "pb"], ["pb_out"]),
            helper.make_node("Add", ["pa_out", "pb_out"], ["y"]),
        ],
        shape=(B, D + 4),
        inits=[_pads("pa", [0, 0, 0, 4]), _pads("pb", [0, 4, 0, 0])],
    )
    assert apply_graph_patterns(overlap, lambda n: n == "PadSum", False, [])["PadSum"] == 0


def _transposes(reshape: bool):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Transpose", ["r"], ["t"], perm=[1, 0]),
        helper.make_node("Identity", ["t"], ["i"]),
    ]
    inits = []
    if reshape:  # [D, B] -> [D, 1, B], then back with the size-1 axis left in place
        inits = [numpy_helper.from_array(np.array([D, 1, B], np.int64), "s")]
        nodes.append(helper.make_node("Reshape", ["i", "s"], ["i3"]))
        nodes.append(helper.make_node("Transpose", ["i3"], ["u"], perm=[2, 1, 0]))
    else:
        nodes.append(helper.make_node("Transpose", ["i"], ["u"], perm=[1, 0]))
    nodes.append(helper.make_node("Neg", ["u"], ["y"]))
    shape = (B, 1, D) if reshape else (B, D)
    return _model(nodes, shape=shape, inits=inits)


@pytest.mark.parametrize("reshape", [False, True])
def test_transpose_undoing_a_transpose_becomes_identity_or_reshape(reshape):
    """Relu, Transpose, Identity[, Reshape inserting a size-1 axis], Transpose back:
    the second Transpose reads the Relu's output through an Identity (or a Reshape to
    [B, 1, D]) and the ops between, left unread, go; with InPlace off (transposes copy)
    that saves the copies. Off by name, both transposes run; the values stay numpy's."""
    copy = _transposes(reshape)
    name = "TransposeToIdentityOrReshapePattern"
    assert apply_graph_patterns(copy, lambda n: n == name, False, [])[name] == 1
    last = next(n for n in copy.graph.node if n.output[0] == "u")
    assert (last.op_type, last.input[0]) == ("Reshape" if reshape else "Identity", "r")
    on = _run(_transposes(reshape), _without("InPlace"))
    off = _run(_transposes(reshape), _without("InPlace", name))
    x = on[4]
    want = -np.maximum(x, 0).reshape((B, 1, D) if reshape else (B, D))
    np.testing.assert_array_equal(on[1], want)
    np.testing.assert_array_equal(off[1], want)
    assert on[0] == (["Relu", "Constant", "Reshape", "Neg"] if reshape else ["Relu", "Neg"])
    assert off[0].count("Transpose") == 2
    assert on[2] < off[2] and on[3] < off[3]
