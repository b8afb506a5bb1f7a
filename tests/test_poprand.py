"""poprand: determinism, distributions, mapping, dropout, estimates and errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from poprand_reference import tile_draws

from poplar_api import FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, IPUModel, poprand
from poplar_api import program as prog
from poplar_api.errors import GraphError, TypeMismatchError

SHAPE = (30, 37)


def _ref_tiles(graph, ref):
    return graph._state.space(FLOAT).tile[ref.flat_index()].astype(np.int64)


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


def test_uniform_is_the_documented_stream_and_follows_the_mapping():
    results = []
    for stride in (3, 5):
        device, graph, ref, seed = _build(stride)
        seq = prog.Sequence()
        u = poprand.uniform(graph, seed, 9, ref, FLOAT, -2.0, 3.0, seq)
        graph.createHostRead("u", u)
        res, _ = _run(device, graph, seq, {"u": (u, np.float32)})
        # generated where the reference lives: same mapping
        got = graph._state.space(FLOAT).tile[u.flat_index()]
        np.testing.assert_array_equal(got, _ref_tiles(graph, ref))
        expected = -2.0 + 5.0 * tile_draws((5, 6), 9, _ref_tiles(graph, ref))
        np.testing.assert_allclose(res["u"].ravel(), expected, rtol=1e-6, atol=1e-6)
        results.append(res["u"])
    # as on the IPU, the tile takes part in the seed: another mapping, other values
    assert not np.array_equal(results[0], results[1])


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
    u = tile_draws((5, 6), 11, _ref_tiles(graph, ref))
    keep = (u < int(0.7 * 65536) / 65536).reshape(SHAPE)
    np.testing.assert_allclose(res["d"], np.where(keep, xv / 0.7, 0), rtol=1e-6)


# Estimators typed from graphcore/poplibs @7eac0f26 lib/poprand/poprandCycleEstimators.cpp
# (W = 6 workers, dataPathWidth = 64; C++ integer division in the source's order).
W = 6


def _src_uniform(t, n):
    if t == INT:
        return 4 + 22 * W + 6 * (n // 2) + (n % 2) * 2
    vw = 64 // (2 if t == FLOAT else 4)  # 32 / 16, as the source writes it
    c = 4 + 4 * (n + vw - 1) // vw
    return c + (22 * W + (n % vw != 0) * 4 if t == FLOAT else 24 * W + (n % vw != 0) * 12)


def _src_normal(t, n):
    vw = 64 // (32 if t == FLOAT else 16)
    c = 4 + 4 * (n + vw - 1) // vw
    return c + (22 * W + (n % vw != 0) * 3 if t == FLOAT else 24 * W + (n % vw != 0) * 12)


def _src_bernoulli(t, n):
    vw = 64 // (4 if t == HALF else 2)
    c = 4 + (n + vw - 1) // vw
    return c + (21 * W + (n % vw != 0) * 9 if t == HALF else 23 * W + (n % vw != 0))


def _src_dropout(t, n):
    vw = 64 // (32 if t == FLOAT else 16)
    return 6 + 24 * W + 2 * (n + vw - 1) // vw + (n % vw != 0) * (1 if t == FLOAT else 9)


def _src_truncated(t, n, alpha):
    it = math.ceil(-4 / math.log10(math.erfc(alpha / math.sqrt(2))))
    vw = 64 // (32 if t == FLOAT else 16)
    if t == FLOAT:
        return 4 + 26 * W + (11 * it + 5) * (n + vw - 1) // vw + (n % vw != 0) * (13 * it + 2)
    return 4 + 28 * W + (12 * it + 5) * (n + vw - 1) // vw + (n % vw != 0) * (12 * it + 10)


CASES = (
    [("uniform", t, n) for t in (FLOAT, HALF, INT) for n in (100, 1001)]
    + [
        (k, t, n)
        for k in ("normal", "dropout", "truncated")
        for t in (FLOAT, HALF)
        for n in (100, 1001)
    ]
    + [("bernoulli", t, n) for t in (FLOAT, HALF, INT) for n in (64, 1001)]
)


@pytest.mark.parametrize(("kind", "type_", "n"), CASES)
def test_estimates_are_the_poplibs_formulas(kind, type_, n):
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    ref = graph.addVariable(type_, [n], "ref")
    graph.setTileMapping(ref, 4)
    seq = prog.Sequence()
    if kind == "uniform":
        poprand.uniform(graph, None, 0, ref, type_, 0.0, 10.0, seq, "rnd")
        want = _src_uniform(type_, n)
    elif kind == "normal":
        poprand.normal(graph, None, 0, ref, type_, 0.0, 1.0, seq, "rnd")
        want = _src_normal(type_, n)
    elif kind == "bernoulli":
        poprand.bernoulli(graph, None, 0, ref, type_, 0.5, seq, "rnd")
        want = _src_bernoulli(type_, n)
    elif kind == "dropout":
        poprand.dropout(graph, None, 0, ref, ref, 0.5, 2.0, seq, "rnd")
        want = _src_dropout(type_, n)
    else:
        poprand.truncatedNormal(graph, None, 0, ref, type_, 0.0, 1.0, 1.5, seq, "rnd")
        want = _src_truncated(type_, n, 1.5)
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    rec = next(r for r in engine.getTrace().records if r.name == "rnd")
    assert rec.active_cycles[4] == want


def test_on_mk2_values_follow_the_scheme():
    device, graph, ref, seed = _build(mapping_stride=97, preset="mk2")
    seq = prog.Sequence()
    u = poprand.uniform(graph, seed, 2, ref, FLOAT, 0.0, 1.0, seq)
    graph.createHostRead("u", u)
    res, _ = _run(device, graph, seq, {"u": (u, np.float32)})
    expected = tile_draws((5, 6), 2, _ref_tiles(graph, ref))
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
