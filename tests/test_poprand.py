"""poprand: determinism, distributions, mapping, dropout, estimates and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, IPUModel, poprand
from poplar_api import program as prog
from poplar_api.errors import GraphError, TypeMismatchError

SHAPE = (30, 37)


def _philox_uniform(seed, modifier, n):
    """Independent re-statement of the documented scheme: blocks of 4096 positions."""
    out = np.empty(n)
    for start in range(0, n, 4096):
        words = [seed[0], seed[1], modifier, start // 4096]
        gen = np.random.Generator(np.random.Philox(np.random.SeedSequence(words)))
        block = gen.random(4096)
        out[start : start + 4096] = block[: min(4096, n - start)]
    return out


def _build(mapping_stride=3, preset="tiny"):
    device = IPUModel(preset).createDevice()
    graph = Graph(device.getTarget())
    ref = graph.addVariable(FLOAT, list(SHAPE), "ref")
    tiles = device.getTarget().getNumTiles()
    for row in range(SHAPE[0]):
        graph.setTileMapping(ref[row], (row * mapping_stride) % tiles)
    seed = graph.addVariable(UNSIGNED_INT, [2], "seed")
    graph.setTileMapping(seed, 1)
    graph.createHostWrite("seed", seed)
    return device, graph, ref, seed


def _run(device, graph, seq, outs, seed=(5, 6), writes=None):
    engine = Engine(graph, seq)
    engine.load(device)
    engine.writeTensor("seed", np.array(seed, np.uint32))
    for k, v in (writes or {}).items():
        engine.writeTensor(k, v)
    engine.run(0)
    res = {}
    for name, (t, dtype) in outs.items():
        buf = np.zeros(t.shape(), dtype)
        engine.readTensor(name, buf)
        res[name] = buf
    return res, engine


def test_uniform_is_the_documented_philox_stream_whatever_the_mapping():
    results = []
    for stride in (3, 5):
        device, graph, ref, seed = _build(stride)
        seq = prog.Sequence()
        u = poprand.uniform(graph, seed, 9, ref, FLOAT, -2.0, 3.0, seq)
        graph.createHostRead("u", u)
        res, _ = _run(device, graph, seq, {"u": (u, np.float32)})
        results.append(res["u"])
        # generated where the reference lives: same mapping
        got = graph._state.space(FLOAT).tile[u.flat_index()]
        want = graph._state.space(FLOAT).tile[ref.flat_index()]
        np.testing.assert_array_equal(got, want)
    expected = -2.0 + 5.0 * _philox_uniform((5, 6), 9, math.prod(SHAPE))
    np.testing.assert_allclose(results[0].ravel(), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(results[0], results[1])


def test_modifier_and_seed_change_the_values():
    device, graph, ref, seed = _build()
    seq = prog.Sequence()
    a = poprand.uniform(graph, seed, 1, ref, FLOAT, 0.0, 1.0, seq)
    b = poprand.uniform(graph, seed, 1, ref, FLOAT, 0.0, 1.0, seq)
    c = poprand.uniform(graph, seed, 2, ref, FLOAT, 0.0, 1.0, seq)
    for name, t in (("a", a), ("b", b), ("c", c)):
        graph.createHostRead(name, t)
    outs = {k: (t, np.float32) for k, t in (("a", a), ("b", b), ("c", c))}
    res1, _ = _run(device, graph, seq, outs, seed=(5, 6))
    np.testing.assert_array_equal(res1["a"], res1["b"])
    assert not np.array_equal(res1["a"], res1["c"])
    res2, _ = _run(device, graph, seq, outs, seed=(7, 6))
    assert not np.array_equal(res1["a"], res2["a"])


def test_normal_bernoulli_and_int_uniform_statistics():
    device, graph, ref, seed = _build()
    seq = prog.Sequence()
    n = poprand.normal(graph, None, 3, ref, HALF, 2.0, 0.5, seq)
    b = poprand.bernoulli(graph, seed, 4, ref, INT, 0.25, seq)
    u = poprand.uniform(graph, seed, 5, ref, INT, -3, 4, seq)
    for name, t in (("n", n), ("b", b), ("u", u)):
        graph.createHostRead(name, t)
    res, _ = _run(
        device, graph, seq, {"n": (n, np.float16), "b": (b, np.int32), "u": (u, np.int32)}
    )
    count = math.prod(SHAPE)  # 1110 samples
    # mean within 5 standard errors: 0.5 / sqrt(1110) ~ 0.015
    assert abs(res["n"].astype(float).mean() - 2.0) < 5 * 0.5 / math.sqrt(count)
    assert abs(res["n"].astype(float).std() - 0.5) < 0.05
    assert set(np.unique(res["b"]).tolist()) == {0, 1}
    assert abs(res["b"].mean() - 0.25) < 5 * math.sqrt(0.25 * 0.75 / count)
    assert set(np.unique(res["u"]).tolist()) == set(range(-3, 5))
    # seed None is the documented fixed seed (0, 0)
    z = np.random.Generator(np.random.Philox(np.random.SeedSequence([0, 0, 3, 0])))
    expected = 2.0 + 0.5 * z.standard_normal(4096)[:count]
    np.testing.assert_allclose(res["n"].ravel(), expected, rtol=2e-3, atol=2e-3)


def test_dropout_keeps_scaled_values_with_the_uniform_mask():
    device, graph, ref, seed = _build()
    x = graph.addVariable(FLOAT, list(SHAPE), "x")
    graph.setTileMapping(x, 0)
    graph.createHostWrite("x", x)
    seq = prog.Sequence()
    d = poprand.dropout(graph, seed, 11, x, ref, 0.7, 1 / 0.7, seq)
    graph.createHostRead("d", d)
    xv = np.random.default_rng(0).normal(size=SHAPE).astype(np.float32)
    res, _ = _run(device, graph, seq, {"d": (d, np.float32)}, writes={"x": xv})
    keep = (_philox_uniform((5, 6), 11, math.prod(SHAPE)) < 0.7).reshape(SHAPE)
    np.testing.assert_allclose(res["d"], np.where(keep, xv / 0.7, 0), rtol=1e-6)


def test_estimate_is_the_documented_multivertex_formula():
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    ref = graph.addVariable(FLOAT, [100], "ref")
    graph.setTileMapping(ref, 4)
    seq = prog.Sequence()
    poprand.uniform(graph, None, 0, ref, FLOAT, 0.0, 1.0, seq, "rnd")
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    rec = next(r for r in engine.getTrace().records if r.name == "rnd/Random")
    # W * (16 + iceil(iceil(100, 6) = 17, VW 2) * 2 cycles per vector) + 11
    assert rec.active_cycles[4] == 6 * (16 + 9 * 2) + 11


def test_on_mk2_values_follow_the_scheme():
    device, graph, ref, seed = _build(mapping_stride=97, preset="mk2")
    seq = prog.Sequence()
    u = poprand.uniform(graph, seed, 2, ref, FLOAT, 0.0, 1.0, seq)
    graph.createHostRead("u", u)
    res, _ = _run(device, graph, seq, {"u": (u, np.float32)})
    expected = _philox_uniform((5, 6), 2, math.prod(SHAPE))
    np.testing.assert_allclose(res["u"].ravel(), expected, rtol=1e-6)


def test_errors_are_clear():
    _, graph, ref, seed = _build()
    seq = prog.Sequence()
    with pytest.raises(TypeMismatchError, match="type int is not supported"):
        poprand.normal(graph, seed, 0, ref, INT, 0.0, 1.0, seq)
    bad_seed = graph.addVariable(UNSIGNED_INT, [3], "bad")
    graph.setTileMapping(bad_seed, 0)
    with pytest.raises(TypeMismatchError, match="must hold 2 unsigned int"):
        poprand.uniform(graph, bad_seed, 0, ref, FLOAT, 0.0, 1.0, seq)
    with pytest.raises(GraphError, match=r"prob 1\.5 must be in"):
        poprand.bernoulli(graph, seed, 0, ref, FLOAT, 1.5, seq)
    other = graph.addVariable(FLOAT, [2, 2], "other")
    graph.setTileMapping(other, 0)
    with pytest.raises(GraphError, match="same shape"):
        poprand.dropout(graph, seed, 0, other, ref, 0.5, 2.0, seq)
    unmapped = graph.addVariable(FLOAT, [4], "unmapped")
    with pytest.raises(GraphError, match="not mapped"):
        poprand.uniform(graph, seed, 0, unmapped, FLOAT, 0.0, 1.0, seq)
