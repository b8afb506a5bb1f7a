"""Replicated graphs: per-replica values, replicated streams and host buffers,
non-replicated views, CrossReplicaCopy, divergent control flow, bad input, and the
data-parallel MLP example (4 replicas = 1 replica on 4x the batch).

Devices are the ``tiny`` IPU Model (8 tiles per IPU) with several IPUs, or a CPU
device of the same shape; expected values are computed with numpy.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ipusim import ir
from poplar_api import (
    FLOAT,
    INT,
    Device,
    Engine,
    Graph,
    IPUModel,
    ReplicatedStreamMode,
    popops,
    poputil,
)
from poplar_api import program as prog
from poplar_api.errors import EngineError, GraphError, GraphValidationError

ROOT = Path(__file__).resolve().parents[1]


def model(num_ipus: int = 4) -> Device:
    m = IPUModel("tiny")
    m.numIPUs = num_ipus
    return m.createDevice()


def cpu(num_ipus: int = 4) -> Device:
    return Device.createCPUDevice(model(num_ipus).getTarget().config)


DEVICES = {"model": model, "cpu": cpu}


def affine_graph(device: Device, replicas: int = 4, n: int = 6):
    """x (streamed per replica) -> y = 3x + 1 (popops), streamed back and host-readable."""
    g = Graph(device.getTarget(), replication_factor=replicas)
    popops.addCodelets(g)
    x = g.addVariable(FLOAT, [n], "x")
    poputil.mapTensorLinearly(g, x)
    seq = prog.Sequence(prog.Copy(g.addHostToDeviceFIFO("in", FLOAT, n), x))
    y = popops.map(g, popops.expr.Add(popops.expr.Mul(popops.expr._1, 3.0), 1.0), [x], seq)
    seq.add(prog.Copy(y, g.addDeviceToHostFIFO("out", FLOAT, n)))
    g.createHostRead("y", y)
    g.createHostWrite("x", x)
    g.createHostRead("x", x)
    return g, seq


# ------------------------------------------------------------------ the target
def test_replicated_graph_target_is_one_replica():
    full = model(4).getTarget()
    g = Graph(full, replication_factor=4)
    assert g.getReplicationFactor() == 4
    assert g.getTarget().getNumIPUs() == 1
    assert g.getTarget().getNumTiles() == full.getTilesPerIPU()
    two = Graph(full, replication_factor=2)
    assert two.getTarget().getNumIPUs() == 2
    assert two.getTarget().getNumTiles() == 2 * full.getTilesPerIPU()
    top = Graph(full)
    rg = top.createReplicatedGraph(4)
    assert top.getReplicationFactor() == 1 and rg.getReplicationFactor() == 4
    assert top.getTarget().getNumIPUs() == 4 and rg.getTarget().getNumIPUs() == 1
    assert rg.getTopLevelGraph() is top
    assert rg.createVirtualGraph(0, 4).getTopLevelGraph() is top
    v = g.addVariable(INT, [2, 3], "v")
    g.setTileMapping(v, 0)
    wide = g.getNonReplicatedTensor(v)  # a replicated top-level graph has views too
    assert wide.shape() == [4, 2, 3] and wide.elementType() == INT


@pytest.mark.parametrize("kind", sorted(DEVICES))
def test_each_replica_computes_on_its_own_stream_data(kind):
    device = DEVICES[kind]()
    g, seq = affine_graph(device)
    e = Engine(g, seq)
    assert e.ir_program.replicas == 4
    e.load(device)
    data = np.random.default_rng(1).normal(size=(4, 6)).astype(np.float32)
    out = np.zeros((4, 6), np.float32)
    e.connectStream("in", data)
    e.connectStream("out", out)
    e.run(0)
    want = data * np.float32(3) + np.float32(1)
    np.testing.assert_allclose(out, want, rtol=1e-6)
    np.testing.assert_allclose(e.readTensor("y"), want, rtol=1e-6)
    if kind == "model":
        assert e.getTrace().total_cycles > 0


def test_circular_replica_parts_and_replica_index_connections():
    device = cpu()
    g, seq = affine_graph(device)
    e = Engine(g, seq)
    e.load(device)
    data = np.arange(4 * 12, dtype=np.float32).reshape(4, 12)  # two copies' data per replica
    e.connectStream("in", data)
    outs = [np.zeros(6, np.float32) for _ in range(4)]
    for k in range(4):
        e.connectStream("out", k, outs[k])
    for run in range(3):  # the third run wraps around each replica's part
        e.run(0)
        part = data[:, (run % 2) * 6 : (run % 2) * 6 + 6]
        np.testing.assert_allclose(np.stack(outs), part * 3 + 1)


def test_broadcast_stream_sends_one_copy_to_every_replica():
    device = cpu()
    g = Graph(device.getTarget(), replication_factor=4)
    x = g.addVariable(INT, [3], "x")
    g.setTileMapping(x, 0)
    s = g.addHostToDeviceFIFO("in", INT, 3, ReplicatedStreamMode.BROADCAST)
    assert s.broadcast and not s.perReplica
    g.createHostRead("x", x)
    e = Engine(g, prog.Copy(s, x))
    e.load(device)
    calls = []

    def fill(buf):
        calls.append(len(calls))
        buf[:] = np.arange(3) + 10 * len(calls)

    e.connectStreamToCallback("in", fill)
    e.run(0)
    e.run(0)
    assert calls == [0, 1]  # one fetch per copy, not one per replica
    np.testing.assert_array_equal(e.readTensor("x"), np.tile(np.arange(3) + 20, (4, 1)))
    with pytest.raises(EngineError, match=r"BROADCAST stream.*without an index"):
        e.connectStreamToCallback("in", 2, fill)


def test_callbacks_per_replica_and_for_all():
    device = cpu()
    g, seq = affine_graph(device, n=2)
    e = Engine(g, seq)
    e.load(device)
    for k in range(4):  # replica k's input is all k
        e.connectStreamToCallback("in", k, lambda buf, k=k: buf.__setitem__(slice(None), k))
    got = []
    e.connectStreamToCallback("out", lambda buf: got.append(buf.copy()))  # every replica
    e.run(0)
    np.testing.assert_allclose(np.stack(got), 3 * np.arange(4)[:, None].repeat(2, 1) + 1)


def test_host_tensor_buffers_are_replica_major():
    device = cpu()
    g, seq = affine_graph(device, n=4)
    e = Engine(g, seq)
    e.load(device)
    values = np.arange(16, dtype=np.float32).reshape(4, 4)
    e.writeTensor("x", values)
    np.testing.assert_array_equal(e.readTensor("x"), values)
    e.writeTensor("x", np.array([1, 2, 3, 4], np.float32))  # one copy for every replica
    np.testing.assert_array_equal(e.readTensor("x"), np.tile([1, 2, 3, 4], (4, 1)))
    buf = np.zeros(16, np.float64)
    e.readTensor("x", buf)
    np.testing.assert_array_equal(buf, np.tile([1, 2, 3, 4], 4))
    with pytest.raises(EngineError, match=r"4 replicas takes 4 x 4 = 16 values"):
        e.writeTensor("x", np.zeros(8, np.float32))
    with pytest.raises(EngineError, match=r"buffer has 4 elements.*4 replicas reads 16 values"):
        e.readTensor("x", np.zeros(4, np.float32))


def test_remote_buffers_are_per_replica():
    device = cpu()
    g = Graph(device.getTarget(), replication_factor=4)
    x = g.addVariable(FLOAT, [3], "x")
    g.setTileMapping(x, 1)
    g.createHostRead("x", x)
    rb = g.addRemoteBuffer("rb", FLOAT, 3, repeats=2)
    e = Engine(g, prog.Copy(rb, x))
    e.load(device)
    rows = np.random.default_rng(2).normal(size=(4, 3)).astype(np.float32)
    for k in range(4):
        e.copyToRemoteBuffer(rows[k], "rb", 0, k)
    e.run(0)
    np.testing.assert_array_equal(e.readTensor("x"), rows)
    back = np.zeros(3, np.float32)
    e.copyFromRemoteBuffer("rb", back, 0, 2)
    np.testing.assert_array_equal(back, rows[2])
    with pytest.raises(EngineError, match=r"replicationIndex 4 is out of range.*4 replica"):
        e.copyToRemoteBuffer(rows[0], "rb", 0, 4)


# ------------------------------------------------------------ non-replicated views
def test_non_replicated_views_for_host_and_streams():
    device = model(4)
    top = Graph(device.getTarget())
    rg = top.createReplicatedGraph(4)
    popops.addCodelets(rg)
    x = rg.addVariable(FLOAT, [2, 3], "x")
    poputil.mapTensorLinearly(rg, x)
    seq = prog.Sequence()
    y = popops.mul(rg, x, x, seq, "square")
    wide_x = top.getNonReplicatedTensor(x)
    wide_y = top.getNonReplicatedTensor(y)
    assert wide_x.shape() == [4, 2, 3]
    everything = top.addHostToDeviceFIFO("all-x", FLOAT, 24)
    assert everything.replicationFactor == 1
    program = prog.Sequence(prog.Copy(everything, wide_x), seq)
    back = top.addDeviceToHostFIFO("all-y", FLOAT, 24)
    program.add(prog.Copy(wide_y, back))
    swapped = rg.addVariable(FLOAT, [2, 3], "swapped")
    poputil.mapTensorLinearly(rg, swapped)
    wide_s = top.getNonReplicatedTensor(swapped)
    program.add(prog.Copy(wide_y[::-1], wide_s))  # replica k gets replica 3-k's y
    assert type(program.programs[-1]) is prog.NonReplicatedCopy
    top.createHostRead("swapped", wide_s)
    top.createHostWrite("x-all", wide_x)
    e = Engine(top, program)
    e.load(device)
    data = np.random.default_rng(3).normal(size=(4, 2, 3)).astype(np.float32)
    out = np.zeros(24, np.float32)
    e.connectStream("all-x", data)
    e.connectStream("all-y", out)
    e.run(0)
    np.testing.assert_allclose(out.reshape(4, 2, 3), data * data, rtol=1e-6)
    np.testing.assert_allclose(e.readTensor("swapped"), (data * data)[::-1], rtol=1e-6)
    e.writeTensor("x-all", np.zeros((4, 2, 3), np.float32))
    e.run(0)  # the stream is circular: same data again
    np.testing.assert_allclose(e.readTensor("swapped"), (data * data)[::-1], rtol=1e-6)


def test_non_replicated_view_misuse():
    top = Graph(model(4).getTarget())
    rg = top.createReplicatedGraph(4)
    x = rg.addVariable(FLOAT, [3], "x")
    rg.setTileMapping(x, 0)
    wide = top.getNonReplicatedTensor(x)
    with pytest.raises(GraphError, match=r"non-replicated parent of a graph of 4 replicas"):
        top.addVariable(FLOAT, [2], "v")
    with pytest.raises(GraphError, match=r"call it on the non-replicated top-level graph"):
        rg.getNonReplicatedTensor(x)
    with pytest.raises(GraphError, match=r"'x.nonReplicated' is a non-replicated view"):
        rg.setTileMapping(wide, 0)
    with pytest.raises(GraphError, match=r"not replicated"):
        Graph(model(1).getTarget()).getNonReplicatedTensor(x)
    mixed = prog.Copy(wide[0], x)
    with pytest.raises(GraphValidationError, match=r"one side is a non-replicated view"):
        Engine(top, mixed)
    same = r"must have the same element type and number of elements"
    for name, typ, n, shown in (("n", INT, 3, r"int, shape \[4, 3\]"),
                                ("m", FLOAT, 2, r"float, shape \[4, 2\]")):  # fmt: skip
        t = rg.addVariable(typ, [n], name)
        rg.setTileMapping(t, 0)
        want = rf"source \(float, shape \[4, 3\]\) and destination \({shown}\) {same}"
        with pytest.raises(GraphValidationError, match=want):
            Engine(top, prog.Copy(wide, top.getNonReplicatedTensor(t)))


# ------------------------------------------------------------ CrossReplicaCopy
def test_cross_replica_copy_values_and_ir():
    device = model(4)
    g = Graph(device.getTarget(), replication_factor=4)
    src = g.addVariable(INT, [5], "src")
    dst = g.addVariable(INT, [5], "dst")
    g.setTileMapping(src, 1)
    g.setTileMapping(dst, [[], [], [(0, 2)], [], [], [], [(2, 5)]])
    g.createHostWrite("src", src)
    g.createHostWrite("dst", dst)
    g.createHostRead("dst", dst)
    mapping = {0: 1, 1: 0, 2: 3}
    e = Engine(g, prog.CrossReplicaCopy(src, dst, mapping))
    e.load(device)
    values = np.arange(20, dtype=np.int32).reshape(4, 5)
    e.writeTensor("src", values)
    e.writeTensor("dst", -np.ones((4, 5), np.int32))
    e.run(0)
    want = -np.ones((4, 5), np.int32)
    for a, b in mapping.items():
        want[b] = values[a]
    np.testing.assert_array_equal(e.readTensor("dst"), want)
    steps = [s for s in ir.iter_steps(e.ir_program) if isinstance(s, ir.GlobalExchange)]
    assert len(steps) == 1 and steps[0].replicated is False
    tiles = 8  # per replica (tiny: one IPU of 8 tiles)
    got = sorted(zip(steps[0].src_tile.tolist(), steps[0].dst_tile.tolist(),
                     steps[0].num_bytes.tolist(), strict=True))  # fmt: skip
    want_pairs = sorted(
        (a * tiles + 1, b * tiles + t, 4 * n)
        for a, b in mapping.items()
        for t, n in ((2, 2), (6, 3))
    )
    assert got == want_pairs


def test_cross_replica_copy_bad_input():
    g = Graph(model(4).getTarget(), replication_factor=4)
    a = g.addVariable(FLOAT, [4], "a")
    b = g.addVariable(FLOAT, [4], "b")
    c = g.addVariable(FLOAT, [3], "c")
    for t in (a, b, c):
        g.setTileMapping(t, 0)
    with pytest.raises(GraphValidationError, match=r"replica 4 is out of range; the graph has 4"):
        Engine(g, prog.CrossReplicaCopy(a, b, {0: 4}))
    with pytest.raises(GraphValidationError, match=r"replica 1 is the destination of replicas"):
        Engine(g, prog.CrossReplicaCopy(a, b, {0: 1, 2: 1}))
    with pytest.raises(GraphValidationError, match=r"same element type and number of elements"):
        Engine(g, prog.CrossReplicaCopy(a, c, {0: 1}))
    single = Graph(model(1).getTarget())
    d = single.addVariable(FLOAT, [1], "d")
    single.setTileMapping(d, 0)
    with pytest.raises(GraphValidationError, match=r"not replicated"):
        Engine(single, prog.CrossReplicaCopy(d, d, {0: 0}))


# -------------------------------------------------------------- control flow
def test_control_flow_must_agree_across_replicas():
    device = cpu()
    g = Graph(device.getTarget(), replication_factor=4)
    flag = g.addVariable(INT, [], "flag")
    count = g.addVariable(INT, [1], "count")
    one = g.addConstant(INT, [1], 7, "seven")
    for t in (flag, count, one):
        g.setTileMapping(t, 0)
    g.createHostWrite("flag", flag)
    g.createHostRead("count", count)
    e = Engine(g, prog.If(flag, prog.Copy(one, count)))
    e.load(device)
    e.writeTensor("flag", np.ones(4, np.int32))
    e.run(0)
    np.testing.assert_array_equal(e.readTensor("count"), np.full((4, 1), 7))
    e.writeTensor("flag", np.array([1, 1, 0, 1], np.int32))
    with pytest.raises(EngineError, match=r"replicas disagree.*\['flag'\].*replica 2 has 0"):
        e.run(0)


# ----------------------------------------------------------------- bad input
def test_replication_factor_must_divide_the_ipus():
    target = model(4).getTarget()
    with pytest.raises(GraphError, match=r"replication factor 3 does not divide the target's 4"):
        Graph(target, replication_factor=3)
    with pytest.raises(GraphError, match=r"replication factor 0 must be an int >= 1"):
        Graph(target, replication_factor=0)
    with pytest.raises(GraphError, match=r"replication factor 8 does not divide"):
        Graph(target).createReplicatedGraph(8)
    top = Graph(target)
    top.addVariable(FLOAT, [1], "early")
    with pytest.raises(GraphError, match=r"already has 1 variable"):
        top.createReplicatedGraph(2)


def test_replica_index_out_of_range_and_bad_buffers():
    device = cpu()
    g, seq = affine_graph(device)
    e = Engine(g, seq)
    e.load(device)
    with pytest.raises(EngineError, match=r"replica index 4 is out of range; the graph has 4"):
        e.connectStreamToCallback("in", 4, lambda buf: None)
    with pytest.raises(EngineError, match=r"replica index -1 is out of range"):
        e.connectStream("in", -1, np.zeros(6, np.float32))
    with pytest.raises(EngineError, match=r"serves each of the graph's 4 replicas.*got 6"):
        e.connectStream("in", np.zeros(6, np.float32))
    with pytest.raises(EngineError, match=r"not connected for replica 0"):
        e.run(0)


def test_load_needs_every_replica_ipu():
    g, seq = affine_graph(model(4))
    e = Engine(g, seq)
    with pytest.raises(EngineError, match=r"4 replicas of 1 IPU.*exactly 4 IPU.*has 2"):
        e.load(model(2))


# ------------------------------------------------------------------ the example
def _numpy_step(params, x, y, eta):
    """One SGD step of the example's MLP in float64 (the reference)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    h = np.maximum(x @ p["w1"] + p["b1"], 0.0)
    logits = h @ p["w2"] + p["b2"]
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = e / e.sum(axis=1, keepdims=True)
    delta = probs.copy()
    delta[np.arange(len(y)), y] -= 1.0
    grad_h = (delta @ p["w2"].T) * (h > 0)
    grads = {"w2": h.T @ delta, "b2": delta.sum(0), "w1": x.T @ grad_h, "b1": grad_h.sum(0)}
    return {k: p[k] - eta / len(y) * grads[k] for k in p}


def test_data_parallel_mlp_equals_one_replica_on_four_times_the_batch():
    sys.path.insert(0, str(ROOT / "examples" / "multi_ipu"))
    import data_parallel_mlp as dp
    import mnist

    images, labels = mnist.load_digits_as_mnist()
    quiet = {"out": lambda line: None, "hidden": 16}
    four = dp.run(dp.create_device(4, 16), images, labels, replicas=4, batch=8, steps=1, **quiet)
    one = dp.run(dp.create_device(1, 16), images, labels, replicas=1, batch=32, steps=1, **quiet)
    x = dp.tut5.prepare_inputs(images[:32]).astype(np.float64)
    ref = _numpy_step(dp.initial_parameters(dp.DEFAULT_SEED, 16), x, labels[:32], dp.ETA)
    for name in dp.PARAMETER_NAMES:
        replicas = four.parameters[name]
        assert replicas.shape[0] == 4
        np.testing.assert_array_equal(replicas, np.broadcast_to(replicas[0], replicas.shape))
        np.testing.assert_allclose(replicas[0], one.parameters[name][0], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(replicas[0], ref[name], rtol=1e-4, atol=1e-5)
    steps = [s for s in ir.iter_steps(four.engine.ir_program) if isinstance(s, ir.Collective)]
    assert [s.op for s in steps] == ["all_reduce"] and steps[0].groups == ((0, 1, 2, 3),)
    sizes = 4 * (784 * 16 + 16 + 16 * 10 + 10)  # bytes of the four gradients
    assert sum(steps[0].num_bytes) == sizes


def test_a_non_replicated_stream_into_a_replicated_tensor_is_refused():
    device = model(4)
    top = Graph(device.getTarget())
    g = top.createReplicatedGraph(4)
    x = g.addVariable(FLOAT, [3], "x")
    poputil.mapTensorLinearly(g, x)
    g.createHostRead("x", x)
    plain = top.addHostToDeviceFIFO("in", FLOAT, 3)
    shared = top.addHostToDeviceFIFO("all", FLOAT, 3, ReplicatedStreamMode.BROADCAST)
    with pytest.raises(GraphValidationError, match=r"stream 'in' and tensor 'x'.*BROADCAST"):
        Engine(g, prog.Copy(plain, x))
    engine = Engine(g, prog.Copy(shared, x))  # the same data for every replica is defined
    engine.load(device)
    engine.connectStream("all", np.array([1, 2, 3], np.float32))
    engine.run(0)
    np.testing.assert_array_equal(engine.readTensor("x"), np.tile([1, 2, 3], (4, 1)))


def test_the_graph_profile_of_a_replicated_graph_is_costed_on_the_whole_device():
    from poplar_api import gcl

    device = model(4)
    g = Graph(device.getTarget(), replication_factor=4)
    x = g.addVariable(FLOAT, [8], "x")
    poputil.mapTensorLinearly(g, x)
    seq = prog.Sequence()
    gcl.allReduceInPlaceCrossReplica(g, x, gcl.CollectiveOperator.ADD, seq, "ar")
    engine = Engine(g, seq)
    before = engine.getGraphProfile()  # not loaded: costed on the device it was made for
    assert before["target"]["numIPUs"] == 4
    assert before["externalExchanges"]["names"] == ["ar"]
    engine.load(device)
    engine.run(0)
    (rec,) = [r for r in engine.getTrace().records if r.kind == "collective"]
    # alone on the links, the run takes the profile's uncontended estimate
    assert before["externalExchanges"]["cycles"] == [rec.cycles]
    cpu_engine = Engine(g, seq)
    cpu_engine.load(Device.createCPUDevice(g.getTarget().config))  # one replica's tiles
    assert cpu_engine.getGraphProfile()["externalExchanges"]["cycles"] == [rec.cycles]


def test_a_device_whose_wiring_does_not_split_into_replicas_can_still_be_replicated():
    from ipusim.config import load_config

    cfg = load_config("tiny", overrides={"num_ipus": 6, "links.topology": "ladder"})
    g = Graph(IPUModel(cfg).createDevice().getTarget(), replication_factor=2)
    assert g.getTarget().getNumIPUs() == 3  # a ladder of 3 IPUs does not exist
