"""docs/estimators.md names every vertex family the libraries create.

A graph is built with a broad set of library calls (convolutions in every pass and
both layouts, matMul, popops elementwise / map / select / clamp / fill / cast /
reductions, popnn non-linearities, pooling, losses and one-hot, poprand); every
vertex family (the type name up to its template arguments) found in it must appear
in the estimator document, so a family cannot be added without its source row.
"""

from __future__ import annotations

import re
from pathlib import Path

from poplar_api import (
    FLOAT,
    HALF,
    INT,
    UNSIGNED_INT,
    Graph,
    IPUModel,
    poplin,
    popnn,
    popops,
    poprand,
)
from poplar_api import program as prog
from poplar_api.popops import expr
from poplar_api.poputil import mapTensorLinearly

DOC = Path(__file__).resolve().parents[1] / "docs" / "estimators.md"


def _library_graph() -> Graph:
    graph = Graph(IPUModel("ipu1").createDevice().getTarget())
    seq = prog.Sequence()

    def var(t, shape, name):
        v = graph.addVariable(t, shape, name)
        mapTensorLinearly(graph, v)
        return v

    # convolutions: forward (direct and im2col), backward, weight update, bias; matMul
    for i, constraint in enumerate(('{"transform": {"expandDims": []}}',
                                    '{"transform": {"expandDims": [0, 1]}}')):  # fmt: skip
        opts = {"planConstraints": constraint}
        p = poplin.ConvParams(FLOAT, 2, [6, 6], [3, 3], 4, 8, 1, paddingLower=[1, 1],
                              paddingUpper=[1, 1])  # fmt: skip
        x = poplin.createInput(graph, p, f"x{i}", opts)
        w = poplin.createWeights(graph, p, f"w{i}", opts)
        y = poplin.convolution(graph, x, w, p, False, seq, f"fwd{i}", opts)
        b = poplin.createBiases(graph, y)
        poplin.addBias(graph, y, b, seq)
        poplin.convolution(graph, y, w, poplin.getGradientParams(p), True, seq, f"bwd{i}")
        poplin.convolutionWeightUpdate(graph, y, w, x, p, -0.1, seq, f"wu{i}")
        poplin.convolutionBiasUpdate(graph, y, b, -0.1, seq, f"bu{i}")
    hm = poplin.ConvParams(HALF, 1, [8], [3], 1, 4, 1)
    poplin.convolution(graph, poplin.createInput(graph, hm, "hx"),
                       poplin.createWeights(graph, hm, "hw"), hm, False, seq, "hmac",
                       {"planConstraints": '{"method": "HMAC"}'})  # fmt: skip
    dw = poplin.ConvParams(HALF, 1, [6, 6], [3, 3], 1, 1, 8)
    poplin.convolution(graph, poplin.createInput(graph, dw, "dx"),
                       poplin.createWeights(graph, dw, "dw"), dw, False, seq, "vmac",
                       {"planConstraints": '{"method": "VMAC"}'})  # fmt: skip
    a, m = var(FLOAT, [16, 40], "a"), var(FLOAT, [40, 8], "m")
    poplin.matMul(graph, a, m, seq, "mm")
    # popops
    f, g = var(FLOAT, [64], "f"), var(FLOAT, [64], "g")
    i_, u = var(INT, [64], "i"), var(UNSIGNED_INT, [64], "u")
    popops.add(graph, f, g, seq)
    popops.addInPlace(graph, f, g, seq)
    popops.mul(graph, f, 2.0, seq)
    popops.exp(graph, f, seq)
    popops.sqrtInPlace(graph, g, seq)
    popops.bitwiseAnd(graph, i_, i_, seq)
    popops.shiftLeft(graph, u, u, seq)
    pred = popops.gt(graph, f, g, seq)
    popops.select(graph, f, g, pred, seq)
    popops.clamp(graph, f, g, g, seq)
    popops.clamp(graph, f, 0.0, 1.0, seq)
    popops.allTrue(graph, pred, seq)
    popops.map(graph, expr.Add(expr.Mul(expr._1, expr._2), expr.Const(1.0)), [f, g], seq)
    popops.fill(graph, f, 1.0, seq)
    popops.zero(graph, g, seq)
    popops.cast(graph, f, HALF, seq)
    popops.scaledAddTo(graph, f, g, 0.5, seq)
    r = var(FLOAT, [8, 16], "r")
    for op in (popops.Operation.ADD, popops.Operation.MAX, popops.Operation.SQUARE_ADD):
        popops.reduce(graph, r, [0], op, seq)
        popops.reduce(graph, r, [1], op, seq)
    # popnn
    acts = var(FLOAT, [4, 10], "acts")
    for nl in (popnn.NonLinearityType.RELU, popnn.NonLinearityType.SIGMOID,
               popnn.NonLinearityType.GELU, popnn.NonLinearityType.SOFTMAX):  # fmt: skip
        out = popnn.nonLinearity(graph, nl, acts, seq)
        popnn.nonLinearityInputGradient(graph, nl, out, acts, seq)
    labels = var(UNSIGNED_INT, [4], "labels")
    loss = var(FLOAT, [4], "loss")
    delta = var(FLOAT, [4, 10], "delta")
    for kind in (popnn.LossType.CROSS_ENTROPY_LOSS, popnn.LossType.SUM_SQUARED_LOSS):
        popnn.calcLoss(graph, acts, labels, loss, delta, lossType=kind, prog=seq)
    correct = var(UNSIGNED_INT, [1], "correct")
    popnn.calcAccuracy(graph, acts, labels, correct, seq)
    popnn.encodeOneHot(graph, labels, delta, seq)
    pl = popnn.pooling
    img = var(FLOAT, [2, 4, 6, 6], "img")
    for kind in (pl.PoolingType.MAX, pl.PoolingType.AVG, pl.PoolingType.SUM):
        pp = pl.PoolParams(kind, [6, 6], [2, 2], [2, 2], [0, 0], [0, 0], 4, 2, FLOAT)
        pooled = pl.pool(graph, pp, img, seq)
        if kind is pl.PoolingType.MAX:
            pl.poolInputGradient(graph, pp, img, pooled, pooled, True, seq)
        else:
            pl.poolInputGradient(graph, pp, 4, pooled, seq)
    # poprand
    poprand.uniform(graph, None, 0, f, FLOAT, 0.0, 1.0, seq)
    poprand.normal(graph, None, 0, f, FLOAT, 0.0, 1.0, seq)
    poprand.bernoulli(graph, None, 0, f, FLOAT, 0.5, seq)
    poprand.dropout(graph, None, 0, f, f, 0.5, 2.0, seq)
    return graph


def _family(name: str) -> str:
    """``ns::Name`` of ``ns::Name<args>``; generated map vertices are ``popops::map``."""
    base = name.split("<", 1)[0]
    return "popops::map" if base.startswith("popops::map::") else base


def _expand(token: str) -> set[str]:
    """All names a documented token stands for: ``{a,b}`` alternatives, ``[X]`` optional."""
    token = re.sub(r"\[([A-Za-z0-9_]+)\]", r"{,\1}", token)
    m = re.search(r"\{([^{}]*)\}", token)
    if m is None:
        return {token}
    out: set[str] = set()
    for alt in m.group(1).split(","):
        out |= _expand(token[: m.start()] + alt + token[m.end() :])
    return out


def documented_families(text: str) -> set[str]:
    """Vertex families named in backticks in ``text``; a name without a namespace takes
    that of the last namespaced name before it on its line."""
    names: set[str] = set()
    for line in text.splitlines():
        ns = None
        for token in re.findall(r"`([A-Za-z][A-Za-z0-9_{},\[\]:]*)", line):
            head, sep, rest = token.rstrip(":").rpartition("::")
            if sep and head in ("poplin", "popops", "popnn", "poprand"):
                ns, token = head, rest
            elif sep or ns is None:
                continue
            names |= {f"{ns}::{n}" for n in _expand(token)}
    return names


def test_brace_expansion_of_documented_names():
    assert documented_families("`popops::UnaryOp{1D,2D}[InPlace]<T>`, `Cast2D<S,D>`") == {
        "popops::UnaryOp1D", "popops::UnaryOp2D", "popops::UnaryOp1DInPlace",
        "popops::UnaryOp2DInPlace", "popops::Cast2D",
    }  # fmt: skip


def test_every_library_vertex_family_has_a_row():
    graph = _library_graph()
    families = {_family(v.vtype.name) for v in graph._state.vertices}
    assert len(families) > 30, sorted(families)
    doc = DOC.read_text()
    documented = documented_families(doc)
    missing = sorted(f for f in families if f.split("::")[0] in
                     ("poplin", "popops", "popnn", "poprand") and f not in documented)  # fmt: skip
    assert not missing, f"vertex families without a row in docs/estimators.md: {missing}"
    foreign = sorted(f for f in families if "::" not in f)
    assert not foreign, f"library vertices without a Poplibs namespace: {foreign}"
