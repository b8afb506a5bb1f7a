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
    real = collective._replica_sum

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(collective, "_replica_sum", counted)
    fused = _run_in_place(values, op)
    assert len(calls) == 3  # one per tensor: the fused path ran
    monkeypatch.setattr(collective, "FUSED_SUMS", False)
    general = _run_in_place(values, op)
    assert len(calls) == 3
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
