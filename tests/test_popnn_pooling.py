"""popnn pooling values against a numpy reference (random shapes), vertex names, errors.

The reference is written here from the semantics Poplibs implements
(``lib/popnn/Pooling.cpp``, graphcore/poplibs @7eac0f26): MAX skips padding and gives
0 for a window wholly in the padding, AVG divides by the non-padding inputs of the
window, the MAX gradient goes to every input equal to the maximum (divided by their
number with ``useScaledVariant``).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from popops_harness import run_graph

from poplar_api import FLOAT, HALF, INT, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.popnn import PoolingType, PoolParams, pooling


def _windows(field, kernel, stride, lower, upper):
    """Per dim: (out size, [out, k] input index, [out, k] valid)."""
    out = []
    for n, k, s, lo, hi in zip(field, kernel, stride, lower, upper, strict=True):
        o = (n + lo + hi - k) // s + 1
        idx = np.arange(o)[:, None] * s + np.arange(k)[None, :] - lo
        valid = (idx >= max(0, -lo)) & (idx < n - max(0, -hi))
        out.append((o, idx, valid))
    return out


def _gather(field, win):
    """Flat field index [*out, *kernel] and validity of every window element."""
    nd = len(field)
    flat = np.zeros([w[0] for w in win] + [w[1].shape[1] for w in win], np.int64)
    ok = np.ones(flat.shape, bool)
    for d, (_, idx, valid) in enumerate(win):
        shape = [1] * (2 * nd)
        shape[d], shape[nd + d] = idx.shape
        flat = flat * field[d] + np.clip(idx, 0, field[d] - 1).reshape(shape)
        ok &= valid.reshape(shape)
    return flat, ok


def ref_pool(x, ptype, kernel, stride, lower, upper):
    field = list(x.shape[2:])
    win = _windows(field, kernel, stride, lower, upper)
    flat, ok = _gather(field, win)
    nd = len(field)
    xs = x.reshape(*x.shape[:2], -1).astype(np.float64)[..., flat]  # [B, C, *out, *k]
    axes = tuple(range(2 + nd, 2 + 2 * nd))
    count = ok.sum(axis=tuple(range(nd, 2 * nd)))
    if ptype == "MAX":
        m = np.where(ok, xs, -np.inf).max(axis=axes)
        return np.where(count > 0, m, 0)
    s = np.where(ok, xs, 0).sum(axis=axes)
    return s / np.maximum(count, 1) if ptype == "AVG" else s


def ref_grad(x, y, g, ptype, kernel, stride, lower, upper, scaled=False):
    field = list(x.shape[2:])
    nd = len(field)
    win = _windows(field, kernel, stride, lower, upper)
    flat, ok = _gather(field, win)
    b, c = x.shape[:2]
    kshape = ok.shape[nd:]
    xs = x.reshape(b, c, -1).astype(np.float64)[..., flat]
    gw = np.broadcast_to(g.astype(np.float64).reshape(b, c, *ok.shape[:nd], *([1] * nd)), xs.shape)
    count = ok.sum(axis=tuple(range(nd, 2 * nd)))
    if ptype == "MAX":
        hit = ok & (xs == y.astype(np.float64).reshape(b, c, *ok.shape[:nd], *([1] * nd)))
        contrib = np.where(hit, gw, 0)
        if scaled:
            n = hit.sum(axis=tuple(range(2 + nd, 2 + 2 * nd)), keepdims=True)
            contrib = contrib / np.maximum(n, 1)
    elif ptype == "AVG":
        contrib = np.where(ok, gw / np.maximum(count, 1).reshape(*ok.shape[:nd], *([1] * nd)), 0)
    else:
        contrib = np.where(ok, gw, 0)
    out = np.zeros((b, c, int(np.prod(field))))
    idx = np.broadcast_to(flat, xs.shape[2:]).ravel()
    for i, j in itertools.product(range(b), range(c)):
        np.add.at(out[i, j], idx[ok.ravel()], contrib[i, j].ravel()[ok.ravel()])
    del kshape
    return out.reshape(x.shape)


def _random_case(rng):
    nd = int(rng.integers(1, 3))
    field, kernel, stride, lower, upper = [], [], [], [], []
    for _ in range(nd):
        n = int(rng.integers(1, 9))
        lo, hi = (int(v) for v in rng.integers(-1, 3, size=2))
        while max(0, -lo) + max(0, -hi) >= n:
            lo, hi = lo + 1, hi + 1
        k = int(rng.integers(1, min(4, n + lo + hi) + 1))
        field.append(n)
        kernel.append(k)
        stride.append(int(rng.integers(1, 4)))
        lower.append(lo)
        upper.append(hi)
    return nd, field, kernel, stride, lower, upper


def _run(build, inputs, preset="tiny"):
    device = IPUModel(preset).createDevice()
    graph = Graph(device.getTarget())
    seq = prog.Sequence()
    outs = build(graph, seq)
    for name, t in outs.items():
        graph.createHostRead(name, t)
    for name in inputs:
        graph.createHostWrite(name, graph.__dict__["_inputs"][name])
    reads = {name: (t.shape(), t.elementType().numpy) for name, t in outs.items()}
    return run_graph(graph, seq, device, inputs, reads)


def _var(graph, type_, value_shape, name, tiles=3):
    t = graph.addVariable(type_, list(value_shape), name)
    n = t.numElements()
    flat = t.flatten()
    for i in range(tiles):  # spread over a few tiles, not on tile 0 only
        graph.setTileMapping(flat.slice(i * n // tiles, (i + 1) * n // tiles), i * 2 + 1)
    graph.__dict__.setdefault("_inputs", {})[name] = t
    return t


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("ptype", ["MAX", "AVG", "SUM"])
def test_pool_forward_and_gradient_match_numpy(ptype, seed):
    rng = np.random.default_rng(1000 * seed + len(ptype))
    _, field, kernel, stride, lower, upper = _random_case(rng)
    b, c = int(rng.integers(1, 4)), int(rng.integers(1, 7))
    params = PoolParams(PoolingType[ptype], field, kernel, stride, lower, upper, c, b, FLOAT)
    out_field = params.getOutputFieldShape()
    x = rng.standard_normal([b, c, *field]).astype(np.float32)
    if seed % 3 == 0:  # ties: the MAX gradient goes to every maximum
        x = rng.integers(0, 3, size=x.shape).astype(np.float32)
    g = rng.standard_normal([b, c, *out_field]).astype(np.float32)
    scaled = seed % 2 == 1

    def build(graph, seq):
        xin = _var(graph, FLOAT, x.shape, "x")
        gin = _var(graph, FLOAT, g.shape, "g")
        y = pooling.pool(graph, params, xin, seq, "p")
        if ptype == "MAX":
            dx = pooling.poolInputGradient(graph, params, xin, y, gin, scaled, seq, "p")
        else:
            dx = pooling.poolInputGradient(graph, params, 2 if c % 2 == 0 else 1, gin, seq, "p")
        return {"y": y, "dx": dx}

    got, _ = _run(build, {"x": x, "g": g})
    want_y = ref_pool(x, ptype, kernel, stride, lower, upper)
    np.testing.assert_allclose(got["y"], want_y, rtol=1e-5, atol=1e-5, err_msg=str(params))
    want_dx = ref_grad(x, want_y.astype(np.float32), g, ptype, kernel, stride, lower, upper, scaled)
    np.testing.assert_allclose(got["dx"], want_dx, rtol=1e-5, atol=1e-5, err_msg=str(params))


def test_vertex_names_are_the_poplibs_names():
    params = PoolParams(PoolingType.MAX, [6, 6], [3, 3], [2, 2], [1, 1], [1, 1], 4, 2, FLOAT)
    x = np.arange(2 * 4 * 36, dtype=np.float32).reshape(2, 4, 6, 6) % 7
    g = np.ones([2, 4, 3, 3], np.float32)

    def build(graph, seq):
        xin = _var(graph, FLOAT, x.shape, "x")
        gin = _var(graph, FLOAT, g.shape, "g")
        y = pooling.pool(graph, params, xin, seq, "p")
        dx = pooling.poolInputGradient(graph, params, xin, y, gin, True, seq, "p")
        avg = PoolParams(PoolingType.AVG, [6, 6], [3, 3], [1, 1], [1, 1], [1, 1], 4, 2, FLOAT)
        z = pooling.pool(graph, avg, xin, seq, "a")
        return {"y": y, "dx": dx, "z": z}

    _, engine = _run(build, {"x": x, "g": g})
    names = engine.getGraphProfile()["vertexTypes"]["names"]
    for name in ("MaxPooling", "MaxPoolingGrad", "MaxPoolingGradientScale", "SumPooling",
                 "SelectiveScaling"):  # fmt: skip
        assert f"popnn::{name}<float>" in names


def test_kernel_equal_to_field_is_a_reduction():
    params = PoolParams(PoolingType.AVG, [3, 4], [3, 4], [1, 1], [0, 0], [0, 0], 2, 2, FLOAT)
    x = np.random.default_rng(5).standard_normal([2, 2, 3, 4]).astype(np.float32)

    def build(graph, seq):
        return {"y": pooling.pool(graph, params, _var(graph, FLOAT, x.shape, "x"), seq, "r")}

    got, _ = _run(build, {"x": x})
    np.testing.assert_allclose(got["y"][..., 0, 0], x.mean(axis=(2, 3)), rtol=1e-5)


def _params(**kw):
    args = {"poolingType": PoolingType.MAX, "inputFieldShape": [5, 5], "kernelShape": [2, 2],
            "stride": [1, 1], "inputTruncationOrPaddingLower": [0, 0],
            "inputTruncationOrPaddingUpper": [0, 0], "numChannels": 3, "batchSize": 2,
            "dType": FLOAT}  # fmt: skip
    args.update(kw)
    return PoolParams(**args)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"kernelShape": [6, 2]}, r"kernelShape\[0\] = 6 is larger than the padded input"),
        ({"stride": [1, 0]}, r"stride\[1\] = 0; it must be >= 1"),
        ({"stride": [-1, 1]}, r"stride\[0\] = -1; it must be >= 1"),
        (
            {"inputTruncationOrPaddingLower": [-3, 0], "inputTruncationOrPaddingUpper": [-2, 0]},
            r"truncate all 5 inputs of field dim 0",
        ),
        (
            {"stride": [1]},
            r"mismatched window dimensions: inputFieldShape has 2 dims but stride has 1",
        ),
    ],
)
def test_bad_parameters_name_the_argument(kw, match):
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    x = graph.addVariable(FLOAT, [2, 3, 5, 5], "x")
    graph.setTileMapping(x, 0)
    with pytest.raises(GraphError, match=match):
        pooling.pool(graph, _params(**kw), x, prog.Sequence())


def test_bad_tensors_and_types():
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    seq = prog.Sequence()
    x = graph.addVariable(FLOAT, [2, 3, 5, 5], "x")
    graph.setTileMapping(x, 0)
    with pytest.raises(GraphError, match=r"in 'y' has shape \[2, 4, 5, 5\]; the pooling"):
        y = graph.addVariable(FLOAT, [2, 4, 5, 5], "y")
        graph.setTileMapping(y, 0)
        pooling.pool(graph, _params(), y, seq)
    with pytest.raises(GraphError, match=r"in 'r' has rank 3"):
        r = graph.addVariable(FLOAT, [2, 3, 25], "r")
        graph.setTileMapping(r, 0)
        pooling.pool(graph, _params(), r, seq)
    with pytest.raises(TypeMismatchError, match=r"in 'x' is float; params.dType is half"):
        pooling.pool(graph, _params(dType=HALF), x, seq)
    with pytest.raises(TypeMismatchError, match=r"dType 'int' is not supported"):
        _params(dType=INT)
    with pytest.raises(GraphError, match=r"poolingType 'MAX' is not a PoolingType"):
        _params(poolingType="MAX")
    p = _params()
    with pytest.raises(
        GraphError,
        match=r"pooledGradient '.*' has shape \[2, 3, 5, 5\]; the pooling parameters "
        r"need \[2, 3, 4, 4\]",
    ):
        pooling.poolInputGradient(graph, p, x, x, x.reshape([2, 3, 5, 5]), False, seq)
    with pytest.raises(GraphError, match=r"fwdChansPerGroup form is for AVG and SUM"):
        g = graph.addVariable(FLOAT, [2, 3, 4, 4], "g")
        graph.setTileMapping(g, 0)
        pooling.poolInputGradient(graph, p, 1, g, seq)
    with pytest.raises(
        GraphError, match=r"fwdChansPerGroup = 2 must be >= 1 and divide numChannels = 3"
    ):
        pooling.poolInputGradient(graph, _params(poolingType=PoolingType.SUM), 2, g, seq)
    assert p.getOutputFieldShape() == [4, 4]
    assert "kernelShape=[2, 2]" in str(p) and repr(p).startswith("PoolParams(PoolingType.MAX")
