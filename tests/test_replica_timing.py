"""Replicated runs: each replica's cycles are those of the same program on one replica.

The graph of ``test_replica_batch`` (a ``poplin.matMul`` and a ``popops.map`` between a
host stream in and one out) on 4 replicas and on 1: every compute set, on-chip exchange
and sync step costs each replica's tiles what it costs the single replica's (a replica
runs the same vertices on the same tiles, and the machine costs such a step once for
all replicas). Stream copies may differ (the replicas share the host link); the values
are numpy's, per replica.
"""

from __future__ import annotations

import numpy as np
from test_replica_batch import _run

#: Steps whose cycles cannot depend on the other replicas.
LOCAL = {"compute", "exchange", "sync"}


def test_each_replica_costs_what_one_replica_costs(monkeypatch):
    got, want, _, many = _run(4, monkeypatch)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    _, _, _, one = _run(1, monkeypatch)
    steps, single = many.getTrace().records, one.getTrace().records
    assert [r.name for r in steps] == [r.name for r in single]
    compared = 0
    for rec, ref in zip(steps, single, strict=True):
        assert rec.kind == ref.kind
        if rec.kind not in LOCAL:
            continue
        per_replica = rec.tile_cycles.reshape(4, -1)
        for r in range(4):
            np.testing.assert_array_equal(per_replica[r], ref.tile_cycles, err_msg=rec.name)
        compared += int(ref.tile_cycles.any())
    assert compared >= 3  # the matMul's and the map's compute sets, and a sync at least
