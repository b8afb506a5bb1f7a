"""Pooling vertex estimates against ``getPoolingCycles`` (graphcore/poplibs @7eac0f26,
``lib/popnn/PerformanceEstimation.hpp``), written out here independently.

1-D pooling of ``n`` outputs over the 8 tiles of the tiny target: each tile gets a
contiguous block of outputs; the tile's output rows are split over the 6 workers by
element (``partitionPartialByContext``); each output has one worklist entry
(``numElementsM1 = 0``) per kernel position that lands on the input.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.popnn import PoolingType, PoolParams, pooling

W = 6


def src_pool_cycles(init_info, cpg_d, groups, rows_per_worker, entries, kind):
    """getPoolingCycles: rows_per_worker[w] lists the rows of worker w, each a list of
    numElementsM1 values."""
    worst = 0
    for w in range(W):
        c = 4 + 2 + 2 + 7 + 2
        share = init_info * cpg_d // W
        extra = int(w < (init_info - share * W) % 2**32)
        c += (4 + share + extra) * groups + 6
        rows = rows_per_worker[w]
        if rows:
            c += 2 + (1 if kind in ("max", "maxGrad") else 2) + (6 if kind == "maxGrad" else 0)
            c += 6
            for row in rows:
                c += 13
                for n in row:
                    rpt = {"max": 4 + 3 * n, "sum": 5 + 3 * n, "maxGrad": 7 + 5 * n}[kind]
                    c += 20 + groups * (1 + cpg_d * (2 + rpt + 1) + 1) + 3
                    c += (groups - 1) * (4 + (2 if kind == "maxGrad" else 0))
                c += 2
        worst = max(worst, c + 1)
    return 7 + worst * 6 + 6


def _expected_1d(n_in, k, pad, chans, vw, kind):
    n_out = n_in + 2 * pad - k + 1
    tiles = min(8, n_out)
    cpg = chans
    cycles = []
    for t in range(tiles):
        o0, o1 = t * n_out // tiles, (t + 1) * n_out // tiles
        rows = [[] for _ in range(W)]
        total = o1 - o0
        for w in range(W):
            e0, e1 = w * total // W, (w + 1) * total // W
            for x in range(o0 + e0, o0 + e1):  # one output per row here (batch folded)
                valid = [kk for kk in range(k) if 0 <= x + kk - pad < n_in]
                rows[w].append([0] * len(valid))
        cycles.append(src_pool_cycles(total, -(-cpg // vw), 1, rows, None, kind))
    return sorted(cycles)


@pytest.mark.parametrize(("n_in", "k", "pad"), [(24, 3, 1), (13, 2, 0)])
@pytest.mark.parametrize(("type_", "chans"), [(FLOAT, 2), (FLOAT, 4), (HALF, 4)])
@pytest.mark.parametrize("ptype", [PoolingType.MAX, PoolingType.SUM])
def test_pooling_estimate_is_get_pooling_cycles(ptype, type_, chans, n_in, k, pad):
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    x = graph.addVariable(type_, [1, chans, n_in], "x")
    graph.setTileMapping(x, 5)
    seq = prog.Sequence()
    params = PoolParams(ptype, [n_in], [k], [1], [pad], [pad], chans, 1, type_)
    pooling.pool(graph, params, x, seq, "p")
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    name = f"p/{ptype.name.lower()}Pool{k}/Fwd/Pool"
    rec = next(r for r in engine.getTrace().records if r.name == name)
    got = sorted(int(c) for c in np.asarray(rec.active_cycles) if c)
    vw = 4 if type_ == HALF else 2
    kind = "max" if ptype is PoolingType.MAX else "sum"
    assert got == _expected_1d(n_in, k, pad, chans, vw, kind)
    names = engine.getGraphProfile()["vertexTypes"]["names"]
    vertex = "MaxPooling" if ptype is PoolingType.MAX else "SumPooling"
    assert f"popnn::{vertex}<{type_.name}>" in names


def test_pooling_hand_checked_case():
    # 12 inputs, kernel 2 stride 2 -> 6 outputs on 6 tiles, one output each: worker 5
    # has one row of two entries. Workers 0..4: 17 + (4 + init) + 6 + 1 with worker 0
    # taking the one init element; worker 5: 17 + 4 + 6 + 3 + 6 + 13 + 2 x 32 + 2 + 1.
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [1, 2, 12], "x")
    graph.setTileMapping(x, 0)
    seq = prog.Sequence()
    params = PoolParams(PoolingType.MAX, [12], [2], [2], [0], [0], 2, 1, FLOAT)
    pooling.pool(graph, params, x, seq, "p")
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    rec = next(r for r in engine.getTrace().records if r.name == "p/maxPool2/Fwd/Pool")
    worker5 = 17 + 4 + 6 + 3 + 6 + 13 + 2 * 32 + 2 + 1
    assert sorted(int(c) for c in np.asarray(rec.active_cycles) if c) == [7 + worker5 * 6 + 6] * 6
