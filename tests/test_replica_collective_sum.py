"""A cross-replica sum adds the replicas' values member after member in float64,
whatever the layout of the tensor's elements.

``Storage.read_replicas`` gathers every replica's elements with each replica's row
contiguous, and :func:`poplar_api.gcl.reduce_values` adds the rows one after another
without a float64 copy of the whole block. Before, a tensor whose elements were not
consecutive came back from numpy's ``full[:, ids]`` element after element, and its sum
over the replicas was numpy's pairwise sum of each element's values: another order
than the one a tensor of consecutive elements got. The expected values here are
written in the test, member after member in float64, rounded once to the type.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, gcl
from poplar_api import program as prog
from poplar_api.gcl import CollectiveOperator as Op
from poplar_api.gcl import reduce_values
from poplar_api.types import Type

R = 16


def member_after_member(block: np.ndarray) -> np.ndarray:
    """The float64 sum of the rows of ``block``, row after row (the reference)."""
    total = block[0].astype(np.float64)
    for k in range(1, block.shape[0]):
        total = total + block[k].astype(np.float64)
    return total


def order_sensitive(n: int, dtype: type, rng: np.random.Generator) -> np.ndarray:
    """``[R, n]`` values whose float32 sum depends on the order of the additions: in
    every element, member 0 holds a large value, member 2 its negation and member 3 a
    small one (added in order, the small value survives; numpy's pairwise reduction of
    each element's values loses it), the others noise. (A float64 sum of 16 HALF values
    is exact in any order: for HALF these are just different data per replica.)"""
    big = 2.0**60 if dtype == np.float32 else 2.0**10
    block = rng.standard_normal((R, n)) * (1e-9 if dtype == np.float32 else 1.0)
    block[0], block[2], block[3] = big, -big, rng.integers(1, 8, n)
    block[1] = 0.0
    return block.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("members", [1, 2, 3, 8, 16, 17, 64])
def test_reduce_values_adds_member_after_member(dtype, members):
    rng = np.random.default_rng(members)
    spread = 30 if dtype == np.float32 else 6
    scale = 2.0 ** rng.integers(-spread, spread, (members, 257))
    block = (rng.standard_normal((members, 257)) * scale).astype(dtype)
    expect = member_after_member(block)
    assert reduce_values(Op.ADD, block).tobytes() == expect.tobytes()
    assert reduce_values(Op.MEAN, block).tobytes() == (expect / members).tobytes()
    # rows laid out element after element (as numpy's index on axis 1 gives) add the same
    columns = np.asfortranarray(block)
    assert reduce_values(Op.ADD, columns).tobytes() == expect.tobytes()


def test_reduce_values_order_is_seen():
    """The data of the engine test tells the orders apart (so the test can fail)."""
    block = order_sensitive(64, np.float32, np.random.default_rng(1))
    ours = member_after_member(block).astype(np.float32)
    pairwise = np.asfortranarray(block).astype(np.float64).sum(axis=0).astype(np.float32)
    assert not np.array_equal(ours, pairwise)
    assert reduce_values(Op.ADD, block).astype(np.float32).tobytes() == ours.tobytes()


def _run(typ: Type, values: np.ndarray, transposed: bool) -> np.ndarray:
    """allReduceCrossReplica ADD over ``R`` replicas of a ``[8, 8]`` tensor (read
    through its transpose when ``transposed``: ids not consecutive)."""
    m = IPUModel("tiny")
    m.numIPUs = R
    device = m.createDevice()
    g = Graph(device.getTarget(), replication_factor=R)
    x = g.addVariable(typ, [8, 8], "x")
    g.setTileMapping(x, 1)
    g.createHostWrite("x", x)
    seq = prog.Sequence()
    data = x.transpose() if transposed else x
    total = gcl.allReduceCrossReplica(g, data, Op.ADD, seq, "total")
    g.createHostRead("total", total)
    e = Engine(g, seq)
    e.load(device)
    e.writeTensor("x", values)
    e.run(0)
    return e.readTensor("total")


@pytest.mark.parametrize("typ", [FLOAT, HALF])
@pytest.mark.parametrize("transposed", [False, True])
def test_all_reduce_member_after_member(typ, transposed):
    dtype = typ.numpy
    values = order_sensitive(64, dtype, np.random.default_rng(5)).reshape(R, 8, 8)
    # different data in every replica, and the order-sensitive elements among them
    values = values.astype(dtype)
    got = _run(typ, values, transposed)
    operand = values.transpose(0, 2, 1) if transposed else values
    expect = member_after_member(operand.reshape(R, -1)).astype(dtype).reshape(8, 8)
    assert got.shape == (R, 8, 8)
    for k in range(R):
        assert got[k].tobytes() == expect.tobytes(), f"replica {k}"


def _run_in_place(values: dict[str, np.ndarray], op: Op) -> dict[str, np.ndarray]:
    """allReduceInPlaceCrossReplica ``op`` over ``R`` replicas of three FLOAT tensors in
    one collective: ``a`` (read through its transpose), ``b`` and ``c`` (one block)."""
    m = IPUModel("tiny")
    m.numIPUs = R
    device = m.createDevice()
    g = Graph(device.getTarget(), replication_factor=R)
    t = {}
    for name, v in values.items():
        t[name] = g.addVariable(FLOAT, list(v.shape[1:]), name)
        g.setTileMapping(t[name], 1 if name != "b" else 2)
        g.createHostWrite(name, t[name])
        g.createHostRead(name, t[name])
    seq = prog.Sequence()
    gcl.allReduceInPlaceCrossReplica(g, [t["a"].transpose(), t["b"], t["c"]], op, seq, "sum")
    e = Engine(g, seq)
    e.load(device)
    for name, v in values.items():
        e.writeTensor(name, v)
    e.run(0)
    return {name: e.readTensor(name).reshape(values[name].shape) for name in values}


@pytest.mark.parametrize("op", [Op.ADD, Op.MEAN])
def test_fused_float_sums_are_the_general_paths(monkeypatch, op):
    """A FLOAT sum or mean of every replica runs as two compiled passes
    (``collective._fused_sum``): each replica's result equals the general path's (the
    replicas' rows read, ``reduce_values``, stored), bit for bit, and the expected
    values written here: order-sensitive data, a sum that overflows float32 to inf (a
    mean of the same values does not) and a NaN in one replica."""
    from poplar_api.lowering import collective

    rng = np.random.default_rng(7)
    values = {
        "a": order_sensitive(48, np.float32, rng).reshape(R, 6, 8),
        "b": rng.standard_normal((R, 40)).astype(np.float32),
        "c": order_sensitive(16, np.float32, rng),
    }
    values["b"][:, 0] = np.float32(3e38)  # the float64 sum is past float32: inf
    values["b"][5, 1] = np.nan
    calls = []
    real = collective._sum_runs_in_place

    def counted(*args):
        calls.append(args[1].size)
        return real(*args)

    monkeypatch.setattr(collective, "_sum_runs_in_place", counted)
    fused = _run_in_place(values, op)
    assert len(calls) == 1  # one pass for the three tensors: the in-place path ran
    monkeypatch.setattr(collective, "FUSED_SUMS", False)
    general = _run_in_place(values, op)
    assert len(calls) == 1
    for name, v in values.items():
        block = (v.transpose(0, 2, 1) if name == "a" else v).reshape(R, -1)
        total = member_after_member(block)
        with np.errstate(over="ignore"):
            expect = (total / R if op is Op.MEAN else total).astype(np.float32)
        if name == "a":
            expect = expect.reshape(8, 6).T
        for k in range(R):
            assert fused[name][k].tobytes() == general[name][k].tobytes(), (name, k)
            assert fused[name][k].tobytes() == expect.reshape(v.shape[1:]).tobytes(), (name, k)
    assert np.isinf(fused["b"][:, 0]).all() == (op is Op.ADD)  # a mean of 3e38 is 3e38
    assert np.isnan(fused["b"][:, 1]).all()


def _full_and_runs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``[R, 3000]`` float32 rows (order-sensitive in their first 64 elements) and ids
    of several runs, some longer than a chunk, given out of order and transposed."""
    full = rng.standard_normal((R, 3000)).astype(np.float32)
    full[:, :64] = order_sensitive(64, np.float32, rng)
    ids = np.concatenate([np.arange(1700, 2900), np.arange(0, 1200).reshape(40, 30).T.ravel()])
    ids = np.concatenate([ids, [5, 2999]])
    ids.flags.writeable = False  # as the lowering hands ids to the passes (_id_array)
    return full, ids


@pytest.mark.parametrize("mean", [False, True])
def test_in_place_runs_sum_as_the_two_passes(mean):
    """``_sum_runs_in_place`` over the sorted runs of an in-place all-reduce's ids
    stores, in every row, the bits that ``_replica_sum`` and ``_store_every_replica``
    store through the ids, and leaves the other elements alone."""
    from poplar_api.lowering import collective

    full, ids = _full_and_runs(np.random.default_rng(11))
    full[3, 7] = np.nan
    full[:, 2000] = np.float32(3e38)
    expect = full.copy()
    total = collective._replica_sum(expect, ids, mean)
    collective._store_every_replica(expect, ids, total)
    runs = collective._in_place_runs([(ids[:1000], ids[:1000]), (ids[1000:], ids[1000:])])
    assert runs is not None
    starts, ends = runs
    assert starts.tolist() == [0, 1700, 2999] and ends.tolist() == [1200, 2900, 3000]
    got = full.copy()
    collective._sum_runs_in_place(got, starts, ends, mean)
    assert got.tobytes() == expect.tobytes()
    # the reference itself: the rows summed in order in float64, then rounded
    with np.errstate(over="ignore", invalid="ignore"):
        want = member_after_member(full[:, ids])
        want = (want / R if mean else want).astype(np.float32)
    assert got[:, ids].tobytes() == np.tile(want, (R, 1)).tobytes()


def test_in_place_runs_only_where_every_pair_is_in_place():
    """The runs are taken only when each destination is its source element for
    element; an element named twice is summed once (as the general pass, which sums
    every pair before storing, gives it)."""
    from poplar_api.lowering import collective

    a, b = np.arange(10, 20), np.arange(30, 34)
    assert collective._in_place_runs([(a, a[::-1])]) is None
    assert collective._in_place_runs([(a, a), (b, b + 1)]) is None
    starts, ends = collective._in_place_runs([(a, a), (b, b), (a[:3], a[:3])])
    assert starts.tolist() == [10, 30] and ends.tolist() == [20, 34]
    full = np.random.default_rng(2).standard_normal((R, 40)).astype(np.float32)
    twice = np.concatenate([a, a[:3]])
    twice.flags.writeable = False  # as the lowering hands ids to the passes (_id_array)
    expect = full.copy()
    collective._store_every_replica(expect, twice, collective._replica_sum(expect, twice, False))
    collective._sum_runs_in_place(full, starts[:1], ends[:1], False)
    assert full.tobytes() == expect.tobytes()


def test_all_reduce_to_another_tensor_takes_the_two_passes(monkeypatch):
    """An all-reduce whose result is another tensor (source and destination apart)
    does not take the in-place runs: its sums go through ``_replica_sum``."""
    from poplar_api.lowering import collective

    calls = []
    real = collective._replica_sum
    monkeypatch.setattr(collective, "_replica_sum", lambda *a: calls.append(1) or real(*a))
    in_place = []
    monkeypatch.setattr(collective, "_sum_runs_in_place", lambda *a: in_place.append(1))
    values = order_sensitive(64, np.float32, np.random.default_rng(5)).reshape(R, 8, 8)
    got = _run(FLOAT, values, True)
    assert calls == [1] and in_place == []
    expect = member_after_member(values.transpose(0, 2, 1).reshape(R, -1))
    assert got[3].tobytes() == expect.astype(np.float32).reshape(8, 8).tobytes()
