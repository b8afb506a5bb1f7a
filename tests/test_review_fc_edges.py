"""The three fully-connected training passes (``fullyConnectedPass`` matMuls, planned
jointly or separately as ``poplin.fc_joint`` decides) at edge sizes: a batch of one,
one input or output, sizes that are no multiple of any grouping, several groups;
values against numpy in float64."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog


@pytest.mark.parametrize(
    "layer", [(1, 1, 3, 5), (1, 3, 17, 1), (1, 5, 1, 9), (3, 2, 7, 6), (1, 9, 33, 18)]
)
@pytest.mark.parametrize("in_type", [FLOAT, HALF])
def test_fc_passes_at_edge_sizes_match_numpy(in_type, layer) -> None:
    g, b, i, o = layer
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    opts = {p: {"fullyConnectedPass": f"TRAINING_{p.upper()}"} for p in ("fwd", "bwd", "wu")}
    x = poplin.createMatMulInputLHS(graph, in_type, [g, b, i], [g, i, o], "x", opts["fwd"])
    w = poplin.createMatMulInputRHS(graph, in_type, [g, b, i], [g, i, o], "w", opts["fwd"])
    dy = poplin.createMatMulInputLHS(graph, in_type, [g, b, o], [g, o, i], "dy", opts["bwd"])
    seq = prog.Sequence()
    out = {
        "y": poplin.matMulGrouped(graph, x, w, seq, "fwd", opts["fwd"]),
        "dx": poplin.matMulGrouped(graph, dy, w.dimShuffle([0, 2, 1]), seq, "bwd", opts["bwd"]),
        "dw": poplin.matMulGrouped(graph, x.dimShuffle([0, 2, 1]), dy, seq, "wu", opts["wu"]),
    }
    rng = np.random.default_rng(sum(layer))
    dt = np.float16 if in_type == HALF else np.float32
    vals = {
        "x": rng.uniform(-1, 1, (g, b, i)).astype(dt),
        "w": rng.uniform(-1, 1, (g, i, o)).astype(dt),
        "dy": rng.uniform(-1, 1, (g, b, o)).astype(dt),
    }
    for name, t in (("x", x), ("w", w), ("dy", dy)):
        graph.createHostWrite(name, t)
    for name, t in out.items():
        graph.createHostRead(name, t)
    engine = Engine(graph, seq)
    engine.load(device)
    for name, v in vals.items():
        engine.writeTensor(name, v)
    engine.run(0)
    x64, w64, dy64 = (vals[k].astype(np.float64) for k in ("x", "w", "dy"))
    want = {
        "y": x64 @ w64,
        "dx": dy64 @ w64.transpose(0, 2, 1),
        "dw": x64.transpose(0, 2, 1) @ dy64,
    }
    for name, ref in want.items():
        got = engine.readTensor(name).astype(np.float64)
        assert got.shape == ref.shape
        k = {"y": i, "dx": o, "dw": b}[name]
        if in_type == HALF:  # float partials, one rounding to half at the end
            np.testing.assert_allclose(got, ref, rtol=2**-10, atol=2**-11 * np.sqrt(k))
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6 * np.sqrt(k))
