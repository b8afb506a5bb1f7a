"""Constants that nothing writes are alike in every replica for good.

Loading a replicated executable writes every constant's value into every replica's
image, and a copy, collective or stream copy into a constant is refused, so a constant
that no vertex writes and no host-write handle reaches holds the same bits in every
replica on every run (:mod:`poplar_api.replica_constants`). The convolution partials
ask on every run whether their worklists and parameters (such constants) are alike in
every replica (``ImageField.first_replica``); with the record that is found once.
Checked: which elements the record says are alike (a constant written by a vertex or by
the host is not, nor a variable); and through an engine, that the replicated matmul's
fields are read once over several runs with replicas given different data, each run's
results bit for bit those found reading every replica on every run.
"""

from __future__ import annotations

import numpy as np
import pytest
from replica_harness import matmul_engine

from poplar_api import FLOAT, Engine, Graph, IPUModel, popops
from poplar_api import program as prog
from poplar_api.field_images import ImageField
from poplar_api.replica_constants import ConstantsAlike

R = 4


def _device(replicas: int):
    model = IPUModel("tiny")
    model.numIPUs = replicas
    return model.createDevice()


def test_only_constants_that_nothing_writes_are_alike_for_good():
    device = _device(2)
    g = Graph(device.getTarget(), replication_factor=2)
    popops.addCodelets(g)
    values = np.arange(6, dtype=np.float32)
    kept, zeroed, hosted = (g.addConstant(FLOAT, [6], values, n) for n in ("k", "z", "h"))
    v = g.addVariable(FLOAT, [6], "v")
    for tile, t in enumerate((kept, zeroed, hosted, v)):
        g.setTileMapping(t, tile)
    seq = prog.Sequence()
    popops.zero(g, zeroed, seq, "zero")  # a vertex writes this constant
    popops.addInPlace(g, v, kept, seq, "add")  # reads this one
    g.createHostWrite("h", hosted)  # the host may write this one
    e = Engine(g, seq)
    e.load(device)
    e.run(0)
    record = e._lowered.storage.constants  # (the engine's lowering: no public hook)
    assert isinstance(record, ConstantsAlike)

    def alike(*ts) -> bool:
        return record.never_written(4, np.concatenate([np.asarray(t.flat_index()) for t in ts]))

    assert alike(kept)
    assert alike(kept[2:4])
    assert not alike(zeroed) and not alike(zeroed[5:])
    assert not alike(hosted)
    assert not alike(v)
    assert not alike(kept, v)  # partly a variable
    assert not record.never_written(4, np.zeros(0, np.int64))


def test_never_written_against_the_ids_of_what_is_written():
    """Fuzzed: ids drawn from constants (some written whole or in part by a vertex,
    one by the host) and variables, in any order, with repeats, int32 or int64, and
    the record's answer compared with the sets of ids themselves."""
    rng = np.random.default_rng(7)
    device = _device(2)
    g = Graph(device.getTarget(), replication_factor=2)
    popops.addCodelets(g)
    sizes = rng.integers(1, 40, 8)
    consts = [g.addConstant(FLOAT, [int(n)], np.ones(int(n), np.float32), f"c{k}")
              for k, n in enumerate(sizes)]  # fmt: skip
    variables = [g.addVariable(FLOAT, [int(n)], f"v{k}") for k, n in enumerate(sizes[:3])]
    for k, t in enumerate(consts + variables):
        g.setTileMapping(t, k % 4)
    seq = prog.Sequence()
    popops.zero(g, consts[1], seq, "zero1")  # written whole
    part = consts[4][int(sizes[4]) // 2 :]
    popops.zero(g, part, seq, "zero4")  # written in part
    g.createHostWrite("h", consts[6])
    e = Engine(g, seq)
    e.load(device)
    e.run(0)
    record = e._lowered.storage.constants  # (the engine's lowering: no public hook)
    ids_of = [np.asarray(t.flat_index(), np.int64).reshape(-1) for t in consts + variables]
    written = set(ids_of[1]) | set(np.asarray(part.flat_index()).tolist()) | set(ids_of[6])
    sure = set(np.concatenate(ids_of[: len(consts)]).tolist()) - written
    pool = np.concatenate(ids_of)
    for trial in range(300):
        # from one tensor (often all alike), or from all of them
        pick = ids_of[rng.integers(len(ids_of))] if trial % 3 == 0 else pool
        n = int(rng.integers(1, 2 * pick.size + 1))
        ids = rng.choice(pick, n).astype(rng.choice([np.int32, np.int64]))
        want = set(ids.tolist()) <= sure
        assert record.never_written(4, ids) == want, (trial, ids)
    assert not record.never_written(4, np.zeros(0, np.int32))
    assert record.never_written(4, ids_of[0][::-1].copy())


def _matmuls(x: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, int]:
    """``x[k] @ w`` of every replica for each run ``k`` (``poplin.matMul`` on the
    ``tiny`` IPU Model, one IPU per replica: the convolution partials read every
    replica's image), how often a field's replicas were compared and how often replica
    0's field was taken without comparing."""
    runs_, replicas, m, k = x.shape
    n = w.shape[2]
    e, device = matmul_engine(replicas, FLOAT, m, k, n)
    e.load(device)
    e.writeTensor("w", w)
    outs = np.zeros((runs_, replicas, m * n), np.float32)
    calls = {"_first_replica": 0, "_replica_zero": 0}

    def counted(name):
        real = getattr(ImageField, name)

        def call(self):
            calls[name] += 1
            return real(self)

        return call

    with pytest.MonkeyPatch.context() as mp:
        for name in calls:
            mp.setattr(ImageField, name, counted(name))
        for run in range(runs_):
            e.connectStream("in", np.ascontiguousarray(x[run].reshape(replicas, -1)))
            e.connectStream("out", outs[run])
            e.run(0)
    return outs.reshape(runs_, replicas, m, n), calls["_first_replica"], calls["_replica_zero"]


def test_the_partials_fields_are_compared_once_with_every_run_s_bits(monkeypatch):
    rng = np.random.default_rng(31)
    runs_ = 3
    x = rng.standard_normal((runs_, R, 8, 40)).astype(np.float32)  # every replica its own
    w = rng.standard_normal((R, 40, 16)).astype(np.float32)
    got, compared, once = _matmuls(x, w)
    monkeypatch.setattr(ConstantsAlike, "never_written", lambda self, size, ids: False)
    want, every, taken = _matmuls(x, w)
    assert got.tobytes() == want.tobytes()
    # with the record: replica 0's fields taken in the first run only, never compared
    assert once and compared == 0 and taken == 0 and every == runs_ * once
    assert not np.array_equal(got[0, 0], got[0, 1])  # the replicas' values differ
    np.testing.assert_allclose(
        got, np.einsum("prmk,rkn->prmn", x.astype(np.float64), w), rtol=1e-5, atol=1e-4
    )
