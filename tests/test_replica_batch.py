"""Replicas at the cost of one: a replicated compute set runs every replica's vertices
in one kernel call per vertex type, each replica with its own values.

The graph (``tiny`` IPU Model, 8 tiles per IPU) streams a different ``x`` and writes a
different ``w`` into each replica, then computes ``relu(x @ w) * 2`` with
``poplin.matMul`` (the convolution partial vertices) and ``popops`` (a compiled
kernel); expected values are numpy's, per replica.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_replica_vertex_kernels import _engine as replicated_engine

from poplar_api import FLOAT, Engine, Graph, poplin, popops
from poplar_api import program as prog
from poplar_api.errors import EngineError
from poplar_api.poplin import conv_vertices

M, K, N = 12, 16, 10
#: The conv partial vertices' compute, as the module defines it.
REAL = conv_vertices._ConvPartialBase.__dict__["computeBatch"].__func__


def _engine(replicas: int, monkeypatch, calls: list[int]) -> Engine:
    def counting(cls, batches, num_vertices, num_workers):
        calls.append(num_vertices)
        return REAL(cls, batches, num_vertices, num_workers)

    monkeypatch.setattr(conv_vertices._ConvPartialBase, "computeBatch", classmethod(counting))

    def build(g: Graph) -> prog.Sequence:
        x = poplin.createMatMulInputLHS(g, FLOAT, [M, K], [K, N], "x")
        w = poplin.createMatMulInputRHS(g, FLOAT, [M, K], [K, N], "w")
        seq = prog.Sequence(prog.Copy(g.addHostToDeviceFIFO("in", FLOAT, M * K), x))
        y = poplin.matMul(g, x, w, seq, "mm")
        expr = popops.expr
        z = popops.map(g, expr.Mul(expr.Max(expr._1, 0.0), 2.0), [y], seq)
        seq.add(prog.Copy(z, g.addDeviceToHostFIFO("out", FLOAT, M * N)))
        g.createHostWrite("w", w)
        return seq

    return replicated_engine(replicas, build)


def _run(replicas: int, monkeypatch) -> tuple[np.ndarray, np.ndarray, list[int], Engine]:
    calls: list[int] = []
    e = _engine(replicas, monkeypatch, calls)
    rng = np.random.default_rng(replicas)
    x = rng.standard_normal((replicas, M, K)).astype(np.float32)
    w = rng.standard_normal((replicas, K, N)).astype(np.float32)
    e.writeTensor("w", w if replicas > 1 else w[0])
    out = np.zeros((replicas, M * N), np.float32)
    e.connectStream("in", x.reshape(replicas, -1))
    e.connectStream("out", out)
    e.run(0)
    want = np.maximum(np.einsum("rmk,rkn->rmn", x.astype(np.float64), w), 0) * 2
    return out.reshape(replicas, M, N), want, calls, e


def test_replicas_run_as_one_batch_with_their_own_values(monkeypatch):
    got, want, calls, e = _run(4, monkeypatch)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert not np.allclose(got[0], got[1])  # the replicas' values differ
    _, _, one, single = _run(1, monkeypatch)
    # one kernel call per execution of a conv compute set, four times the vertices
    assert len(calls) == len(one) > 0
    assert calls == [4 * n for n in one]
    assert e.getTrace().total_cycles > 0 and single.getTrace().total_cycles > 0


def test_a_failing_vertex_names_its_replica(monkeypatch):
    calls: list[int] = []
    e = _engine(2, monkeypatch, calls)

    def refuse_second_replica(cls, batches, num_vertices, num_workers):
        ok = np.ones(num_vertices, bool)
        ok[num_vertices // 2] = False  # the first vertex of replica 1
        return ok

    monkeypatch.setattr(
        conv_vertices._ConvPartialBase, "computeBatch", classmethod(refuse_second_replica)
    )
    e.connectStream("in", np.zeros((2, M * K), np.float32))
    e.connectStream("out", np.zeros((2, M * N), np.float32))
    with pytest.raises(EngineError, match=r"returned False \(first: vertex \d+ in replica 1\)"):
        e.run(0)
