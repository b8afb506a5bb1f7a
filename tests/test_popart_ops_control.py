"""If, Loop and Scan (popart_api/ops_control.py): values against ONNX's reference
evaluator on the same ModelProto, PopART's static trip count and shapes, and errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import popart_api as popart

F = TensorProto.FLOAT


def _vi(name: str, elem: int, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _model(nodes, inputs, outputs, opset: int = 11, inits=()) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(model: onnx.ModelProto, feeds: list[dict[str, np.ndarray]]) -> list[dict]:
    """Run ``model`` once per feed dict in one session; every output anchored."""
    outs = [o.name for o in model.graph.output]
    flow = popart.DataFlow(1, {o: popart.AnchorReturnType("ALL") for o in outs})
    device = popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4})
    s = popart.InferenceSession(model.SerializeToString(), flow, device)
    s.prepareDevice()
    s.weightsFromHost()
    results = []
    for feed in feeds:
        anchors = s.initAnchorArrays()
        s.run(popart.PyStepIO(feed, anchors))
        results.append({o: np.array(anchors[o]) for o in outs} | {"cycles": s.getCycleCount()})
    return results


def _reference(model: onnx.ModelProto, feed: dict) -> dict:
    names = [o.name for o in model.graph.output]
    return dict(zip(names, ReferenceEvaluator(model).run(None, feed), strict=True))


def _if_model() -> onnx.ModelProto:
    then_g = helper.make_graph(
        [_const("two", np.float32(2.0)), helper.make_node("Mul", ["x", "two"], ["t"])],
        "then", [], [_vi("t", F, [3])],
    )  # fmt: skip
    else_g = helper.make_graph(
        [_const("one", np.float32(1.0)), helper.make_node("Sub", ["x", "one"], ["e"])],
        "else", [], [_vi("e", F, [3])],
    )  # fmt: skip
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    return _model([node], [_vi("c", TensorProto.BOOL, []), _vi("x", F, [3])], [_vi("y", F, [3])])


def test_if_runs_the_branch_the_condition_picks_on_the_device():
    model = _if_model()
    x = np.array([1.0, -2.0, 3.5], np.float32)
    feeds = [{"c": np.array(True), "x": x}, {"c": np.array(False), "x": x}]
    got = _run(model, feeds)
    for feed, res in zip(feeds, got, strict=True):
        np.testing.assert_allclose(res["y"], _reference(model, feed)["y"], rtol=1e-6)
    np.testing.assert_allclose(got[0]["y"], x * 2)
    np.testing.assert_allclose(got[1]["y"], x - 1)


def test_if_branches_of_different_shapes_are_refused():
    then_g = helper.make_graph([_const("a", np.zeros(3, np.float32))], "t", [], [_vi("a", F, [3])])
    else_g = helper.make_graph([_const("b", np.zeros(4, np.float32))], "e", [], [_vi("b", F, [4])])
    node = helper.make_node("If", ["c"], ["y"], name="myIf", then_branch=then_g, else_branch=else_g)
    model = _model([node], [_vi("c", TensorProto.BOOL, [])], [_vi("y", F, None)])
    with pytest.raises(popart.popart_exception, match=r"If \(node 'myIf'\).*'a'.*\[4\].*'b'"):
        _run(model, [{"c": np.array(True)}])


def _loop_model(
    trips: int, limit: int, with_cond_input: bool = True, scan: bool = True
) -> onnx.ModelProto:
    """y <- 2 y + x, carried; cond_out = iteration < limit; scan output the new y."""
    body = helper.make_graph(
        [
            _const("two", np.float32(2.0)),
            helper.make_node("Mul", ["y_in", "two"], ["y2"]),
            helper.make_node("Add", ["y2", "x"], ["y_out"]),
            _const("lim", np.int64(limit)),
            helper.make_node("Less", ["i", "lim"], ["cond_out"]),
            helper.make_node("Identity", ["y_out"], ["scan"]),
        ],
        "body",
        [_vi("i", TensorProto.INT64, []), _vi("cond_in", TensorProto.BOOL, []),
         _vi("y_in", F, [2])],
        [_vi("cond_out", TensorProto.BOOL, []), _vi("y_out", F, [2]), _vi("scan", F, [2])],
    )  # fmt: skip
    if not scan:
        del body.output[2]
    cond = "c" if with_cond_input else ""
    outs = ["y", "ys"] if scan else ["y"]
    nodes = [
        _const("M", np.int64(trips)),
        helper.make_node("Loop", ["M", cond, "y0"], outs, name="myLoop", body=body),
    ]
    inputs = [_vi("y0", F, [2]), _vi("x", F, [2])]
    if with_cond_input:
        inputs.insert(0, _vi("c", TensorProto.BOOL, []))
    return _model(nodes, inputs, [_vi("y", F, [2]), _vi("ys", F, None)][: len(outs)])


def test_loop_carries_values_and_stacks_the_scan_output():
    model = _loop_model(trips=5, limit=100)
    feed = {"c": np.array(True), "y0": np.array([1.0, -1.0], np.float32),
            "x": np.array([0.5, 0.25], np.float32)}  # fmt: skip
    got = _run(model, [feed])[0]
    want = _reference(model, feed)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6)
    np.testing.assert_allclose(got["ys"], want["ys"], rtol=1e-6)
    y, rows = feed["y0"].astype(np.float64), []
    for _ in range(5):
        y = 2 * y + feed["x"]
        rows.append(y)
    np.testing.assert_allclose(got["ys"], np.array(rows), rtol=1e-6)


def test_loop_stops_when_the_body_condition_goes_false():
    """ONNX's loop ends after the iteration whose cond_out is false; PopART keeps the
    scan output's [M, ...] shape, rows not reached are zero here."""
    model = _loop_model(trips=6, limit=2)
    feed = {"c": np.array(True), "y0": np.array([1.0, 2.0], np.float32),
            "x": np.array([1.0, 0.0], np.float32)}  # fmt: skip
    got = _run(model, [feed, feed | {"c": np.array(False)}])
    want = _reference(model, feed)
    assert want["ys"].shape == (3, 2)  # iterations 0, 1 and 2 run
    np.testing.assert_allclose(got[0]["y"], want["y"], rtol=1e-6)
    np.testing.assert_allclose(got[0]["ys"][:3], want["ys"], rtol=1e-6)
    np.testing.assert_array_equal(got[0]["ys"][3:], 0)
    # a false initial condition runs no iteration
    np.testing.assert_array_equal(got[1]["y"], feed["y0"])


def test_loop_cycles_grow_with_the_trip_count():
    """Each iteration runs the same programs: without a scan output (whose [M, 2]
    tensor is laid out differently for each M) the step's cycles are affine in M."""
    feed = {"y0": np.ones(2, np.float32), "x": np.ones(2, np.float32)}
    cycles = [
        _run(_loop_model(m, 100, with_cond_input=False, scan=False), [feed])[0]["cycles"]
        for m in (2, 4, 6)
    ]
    per_iteration = (cycles[2] - cycles[0]) / 4
    assert per_iteration > 0
    assert cycles[1] - cycles[0] == pytest.approx(2 * per_iteration, rel=0.02)


def test_loop_trip_count_computed_on_the_device_is_refused():
    model = _loop_model(trips=3, limit=9)
    graph = model.graph
    del graph.node[0]  # M becomes a graph input
    graph.input.append(_vi("M", TensorProto.INT32, []))
    with pytest.raises(popart.popart_exception, match=r"Loop \(node 'myLoop'\).*'M'.*known"):
        _run(model, [{}])


def test_scan_axes_and_directions_match_the_reference():
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "a"], ["s_out"]),
            helper.make_node("Mul", ["s_out", "b"], ["o1"]),
            helper.make_node("Sub", ["a", "b"], ["o2"]),
        ],
        "body",
        [_vi("s_in", F, [3]), _vi("a", F, [3]), _vi("b", F, [3])],
        [_vi("s_out", F, [3]), _vi("o1", F, [3]), _vi("o2", F, [3])],
    )
    node = helper.make_node(
        "Scan", ["s0", "A", "B"], ["s", "O1", "O2"], body=body, num_scan_inputs=2,
        scan_input_axes=[0, 1], scan_input_directions=[0, 1],
        scan_output_axes=[1, 0], scan_output_directions=[1, 0],
    )  # fmt: skip
    model = _model(
        [node],
        [_vi("s0", F, [3]), _vi("A", F, [4, 3]), _vi("B", F, [3, 4])],
        [_vi("s", F, [3]), _vi("O1", F, [3, 4]), _vi("O2", F, [4, 3])],
    )
    rng = np.random.default_rng(3)
    feed = {"s0": rng.standard_normal(3).astype(np.float32),
            "A": rng.standard_normal((4, 3)).astype(np.float32),
            "B": rng.standard_normal((3, 4)).astype(np.float32)}  # fmt: skip
    got = _run(model, [feed])[0]
    # onnx.reference implements forward directions only: numpy, per ONNX's definition
    s = feed["s0"].astype(np.float64)
    o1, o2 = np.zeros((3, 4)), np.zeros((4, 3))
    for j in range(4):
        a, b = feed["A"][j], feed["B"][:, 3 - j]  # B scanned along axis 1, reversed
        s = s + a
        o1[:, 3 - j] = s * b  # O1 stacked along axis 1, reversed
        o2[j] = a - b
    for k, want in (("s", s), ("O1", o1), ("O2", o2)):
        np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-6)
    # forward directions and axis 0 against the reference evaluator
    fwd = onnx.ModelProto()
    fwd.CopyFrom(model)
    for attr in fwd.graph.node[0].attribute:
        if attr.name.endswith("directions") or attr.name.endswith("axes"):
            attr.ints[:] = [0, 0]
    del fwd.graph.input[2]
    fwd.graph.input.append(_vi("B", F, [4, 3]))
    feed = feed | {"B": np.ascontiguousarray(feed["B"].T)}
    del fwd.graph.output[:]
    fwd.graph.output.extend([_vi("s", F, [3]), _vi("O1", F, [4, 3]), _vi("O2", F, [4, 3])])
    got, want = _run(fwd, [feed])[0], _reference(fwd, feed)
    for k in ("s", "O1", "O2"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-5, atol=1e-6)


def test_scan_opset_8_is_refused_with_the_opsets_popart_supports():
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["t"])], "b", [_vi("s", F, [1]), _vi("a", F, [1])],
        [_vi("t", F, [1])],
    )  # fmt: skip
    node = helper.make_node("Scan", ["", "s0", "A"], ["s"], name="oldScan", body=body,
                            num_scan_inputs=1)  # fmt: skip
    model = _model([node], [_vi("s0", F, [1, 1]), _vi("A", F, [1, 2, 1])], [_vi("s", F, [1, 1])],
                   opset=8)  # fmt: skip
    with pytest.raises(popart.popart_exception, match=r"'Scan'.*'oldScan'.*opset 8.*from opset 9"):
        _run(model, [{}])


def _training(nodes, inputs, inits, opset=11) -> popart.TrainingSession:
    graph = helper.make_graph(
        [*nodes, helper.make_node("L1", ["y"], ["loss"], domain="ai.graphcore", reduction="Sum",
                                  **{"lambda": 1.0})],
        "g", inputs, [_vi("loss", F, [])], initializer=inits,
    )  # fmt: skip
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("ai.graphcore", 1)],
    )
    return popart.TrainingSession(
        fnModel=model.SerializeToString(),
        dataFlow=popart.DataFlow(1, {"loss": popart.AnchorReturnType("ALL")}),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"tilesPerIPU": 4}),
        loss="loss",
        optimizer=popart.ConstSGD(0.1),
    )


def _loop_body(step: onnx.NodeProto) -> onnx.GraphProto:
    """A Loop body carrying one FLOAT [2] value ``v`` to ``v2`` through ``step``, its
    condition passed on."""
    return helper.make_graph(
        [step, helper.make_node("Identity", ["c"], ["co"])],
        "body", [_vi("i", TensorProto.INT64, []), _vi("c", TensorProto.BOOL, []), _vi("v", F, [2])],
        [_vi("co", TensorProto.BOOL, []), _vi("v2", F, [2])],
    )  # fmt: skip


def test_training_refuses_a_loop_body_reading_a_weight():
    """A Loop body's read of an enclosing float tensor would get no gradient (PopART
    differentiates If, not Loop): the TrainingSession refuses it with the tensor named.
    (If branches train: tests/test_popart_if_training.py.)"""
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    body = _loop_body(helper.make_node("Mul", ["v", "w"], ["v2"]))
    nodes = [
        _const("M", np.int64(2)),
        helper.make_node("Loop", ["M", "", "x"], ["y"], name="twice", body=body),
    ]
    session = _training(nodes, [_vi("x", F, [2])], [w])
    with pytest.raises(
        popart.popart_exception, match=r"node 'twice/body/Mul_0'.*reads 'w'.*body of a Loop"
    ):
        session.prepareDevice()


def test_training_through_a_loop_on_the_weights_path_is_a_named_error():
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    body = _loop_body(helper.make_node("Add", ["v", "v"], ["v2"]))
    nodes = [
        _const("M", np.int64(2)),
        helper.make_node("Mul", ["x", "w"], ["xw"]),
        helper.make_node("Loop", ["M", "", "xw"], ["y"], name="twice", body=body),
    ]
    session = _training(nodes, [_vi("x", F, [2])], [w])
    with pytest.raises(popart.popart_exception, match=r"Loop \(node 'twice'.*has no gradient"):
        session.prepareDevice()


def test_an_unbounded_while_loop_is_refused():
    model = _loop_model(trips=3, limit=9)
    model.graph.node[0].attribute[0].t.CopyFrom(numpy_helper.from_array(np.int64(2**63 - 1), "M"))
    with pytest.raises(popart.popart_exception, match=r"'myLoop'.*9223372036854775807.*int32"):
        _run(model, [{}])


def test_nested_subgraphs_read_every_enclosing_scope():
    """A Scan inside an If branch reads the model's input and the branch's value."""
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["s2"]), helper.make_node("Mul", ["s2", "k"], ["o"])],
        "sb", [_vi("s", F, [2]), _vi("a", F, [2])], [_vi("s2", F, [2]), _vi("o", F, [2])],
    )  # fmt: skip
    then_g = helper.make_graph(
        [
            _const("half", np.float32(0.5)),
            helper.make_node("Mul", ["x", "half"], ["k"]),
            helper.make_node("Scan", ["s0", "seq"], ["t_s", "t_o"], body=scan_body,
                             num_scan_inputs=1),
        ],
        "then", [], [_vi("t_o", F, [3, 2])],
    )  # fmt: skip
    else_g = helper.make_graph([helper.make_node("Identity", ["seq"], ["e"])], "else", [],
                               [_vi("e", F, [3, 2])])  # fmt: skip
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)
    model = _model([node], [_vi("c", TensorProto.BOOL, []), _vi("x", F, [2]), _vi("s0", F, [2]),
                            _vi("seq", F, [3, 2])], [_vi("y", F, [3, 2])])  # fmt: skip
    rng = np.random.default_rng(4)
    feed = {"c": np.array(True), "x": rng.standard_normal(2).astype(np.float32),
            "s0": rng.standard_normal(2).astype(np.float32),
            "seq": rng.standard_normal((3, 2)).astype(np.float32)}  # fmt: skip
    got = _run(model, [feed, feed | {"c": np.array(False)}])
    np.testing.assert_allclose(got[0]["y"], _reference(model, feed)["y"], rtol=1e-5)
    np.testing.assert_allclose(got[1]["y"], feed["seq"])
