"""poprand seeds as Poplar has them: setSeed, seeded calls, hardware seed state, names."""

from __future__ import annotations

import math

import numpy as np
import pytest
from codelets_common import read_floats
from poprand_reference import tile_draws

from poplar_api import FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, IPUModel, poprand
from poplar_api import program as prog
from poplar_api.errors import GraphError, TypeMismatchError

N = 300


def _graph():
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    ref = graph.addVariable(FLOAT, [N], "ref")
    for i in range(3):
        graph.setTileMapping(ref.slice(i * 100, (i + 1) * 100), 2 * i + 1)
    seed = graph.addVariable(UNSIGNED_INT, [2], "seed")
    graph.setTileMapping(seed, 0)
    graph.createHostWrite("seed", seed)
    return device, graph, ref, seed


def _engine(device, graph, seq, reads):
    for name, t in reads.items():
        graph.createHostRead(name, t)
    engine = Engine(graph, seq)
    engine.load(device)
    return engine


def _read(engine, reads, seed=(11, 22), run=True):
    engine.writeTensor("seed", np.array(seed, np.uint32))
    if run:
        engine.run(0)
    return read_floats(engine, reads)


def _seeded(modifier, seed=(11, 22)):
    device, graph, ref, seed_t = _graph()
    seq = prog.Sequence()
    u = poprand.uniform(graph, seed_t, modifier, ref, FLOAT, 0.0, 1.0, seq, "u")
    reads = {"u": u}
    return _read(_engine(device, graph, seq, reads), reads, seed)["u"]


def test_same_seed_and_modifier_give_identical_values_on_two_engines():
    a, b = _seeded(7), _seeded(7)
    np.testing.assert_array_equal(a, b)
    tiles = np.repeat([1, 3, 5], 100)
    np.testing.assert_allclose(a, tile_draws((11, 22), 7, tiles), rtol=1e-6)


def test_another_modifier_or_seed_gives_other_values():
    a = _seeded(7)
    assert not np.array_equal(a, _seeded(8))
    assert not np.array_equal(a, _seeded(7, seed=(12, 22)))


def test_seeded_calls_repeat_on_every_run_and_unseeded_ones_advance():
    device, graph, ref, seed = _graph()
    seq = prog.Sequence()
    s = poprand.uniform(graph, seed, 3, ref, FLOAT, 0.0, 1.0, seq, "s")
    u = poprand.uniform(graph, None, 0, ref, FLOAT, 0.0, 1.0, seq, "u")
    reads = {"s": s, "u": u}
    engine = _engine(device, graph, seq, reads)
    first, second = _read(engine, reads), _read(engine, reads)
    np.testing.assert_array_equal(first["s"], second["s"])
    assert not np.array_equal(first["u"], second["u"])
    # a second engine starts from the same load-time state: the same unseeded values
    device2, graph2, ref2, seed2 = _graph()
    seq2 = prog.Sequence()
    poprand.uniform(graph2, seed2, 3, ref2, FLOAT, 0.0, 1.0, seq2, "s")
    u2 = poprand.uniform(graph2, None, 0, ref2, FLOAT, 0.0, 1.0, seq2, "u")
    again = _read(_engine(device2, graph2, seq2, {"u": u2}), {"u": u2})
    np.testing.assert_array_equal(first["u"], again["u"])


def test_a_seeded_call_leaves_the_hardware_stream_untouched():
    device, graph, ref, seed = _graph()
    seq = prog.Sequence()
    plain = poprand.uniform(graph, None, 0, ref, FLOAT, 0.0, 1.0, seq, "p")
    reads = {"p": plain}
    alone = _read(_engine(device, graph, seq, reads), reads)["p"]
    device, graph, ref, seed = _graph()
    seq = prog.Sequence()
    poprand.normal(graph, seed, 5, ref, FLOAT, 0.0, 1.0, seq, "n")
    plain = poprand.uniform(graph, None, 0, ref, FLOAT, 0.0, 1.0, seq, "p")
    reads = {"p": plain}
    after = _read(_engine(device, graph, seq, reads), reads)["p"]
    np.testing.assert_array_equal(alone, after)


def test_set_seed_then_unseeded_values_follow_thetile_draws():
    device, graph, ref, seed = _graph()
    seq = prog.Sequence()
    poprand.setSeed(graph, seed, 42, seq, "setSeed")
    u = poprand.uniform(graph, None, 0, ref, FLOAT, 0.0, 1.0, seq, "u")
    engine = _engine(device, graph, seq, {"u": u})
    got = _read(engine, {"u": u}, seed=(1, 2))["u"]
    np.testing.assert_allclose(got, tile_draws((1, 2), 42, np.repeat([1, 3, 5], 100)), rtol=1e-6)
    names = engine.getGraphProfile()["vertexTypes"]["names"]
    assert "poprand::SetSeed" in names
    assert "poprand::Uniform<float>" in names
    assert not any("Supervisor" in n for n in names)
    # one SetSeed vertex per tile of the graph, estimate 14 + 27 W
    rec = next(r for r in engine.getTrace().records if r.name == "setSeed")
    assert rec.active_cycles[0] == 14 + 27 * 6
    assert len(rec.active_cycles) == device.getTarget().getNumTiles()


def test_get_and_set_hw_seeds_replay_the_unseeded_stream():
    device, graph, ref, _ = _graph()
    seq = prog.Sequence()
    saved = poprand.getHwSeeds(graph, seq, "save")
    assert saved.shape() == [device.getTarget().getNumTiles(), 6, 4]
    a = poprand.uniform(graph, None, 0, ref, FLOAT, 0.0, 1.0, seq, "a")
    poprand.setHwSeeds(graph, saved, seq, "restore")
    b = poprand.uniform(graph, None, 0, ref, FLOAT, 0.0, 1.0, seq, "b")
    reads = {"a": a, "b": b}
    res = _read(_engine(device, graph, seq, reads), reads)
    np.testing.assert_array_equal(res["a"], res["b"])


def test_truncated_normal_stays_in_range_with_the_right_spread():
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    ref = graph.addVariable(HALF, [4000], "ref")
    for i in range(4):
        graph.setTileMapping(ref.slice(i * 1000, (i + 1) * 1000), i)
    seq = prog.Sequence()
    t = poprand.truncatedNormal(graph, None, 0, ref, FLOAT, 1.0, 2.0, 1.0, seq, "t")
    graph.createHostRead("t", t)
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    buf = np.zeros(4000, np.float32)
    engine.readTensor("t", buf)
    assert buf.min() >= 1.0 - 2.0 - 1e-6 and buf.max() <= 1.0 + 2.0 + 1e-6
    # standard normal truncated to [-1, 1]: variance 1 - 2 phi(1) / (2 Phi(1) - 1)
    phi = math.exp(-0.5) / math.sqrt(2 * math.pi)
    var = 1 - 2 * phi / math.erf(1 / math.sqrt(2))
    assert abs(buf.std() - 2.0 * math.sqrt(var)) < 0.05
    assert abs(buf.mean() - 1.0) < 5 * 2.0 * math.sqrt(var / 4000)


def test_seed_errors_name_the_tensor_the_value_and_the_rule():
    _, graph, ref, _ = _graph()
    seq = prog.Sequence()
    bad = graph.addVariable(UNSIGNED_INT, [1, 2], "bad2d")
    graph.setTileMapping(bad, 0)
    with pytest.raises(TypeMismatchError, match=r"seed 'bad2d' is unsigned int \[1, 2\]"):
        poprand.setSeed(graph, bad, 0, seq)
    with pytest.raises(GraphError, match="seedModifier -1 is outside the uint32 range"):
        poprand.uniform(graph, None, -1, ref, FLOAT, 0.0, 1.0, seq)
    wrong = graph.addVariable(UNSIGNED_INT, [3], "wrong")
    graph.setTileMapping(wrong, 0)
    with pytest.raises(TypeMismatchError, match="hwSeeds 'wrong' is unsigned int"):
        poprand.setHwSeeds(graph, wrong, seq)
    with pytest.raises(GraphError, match="outside int32"):
        poprand.uniform(graph, None, 0, ref, INT, -(2.0**32), 0.0, seq)
