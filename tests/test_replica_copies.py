"""``Copy`` programs of a replicated graph move every replica's elements in one pass.

Each replica holds its own values (written per replica); copies between tensors, within
one tensor, through permuted views, of INT and BOOL elements, must give each replica
what numpy's copy of its own values gives (the same as a one-replica run of that
replica's values), whether every replica's elements move as one index of all replicas
or replica by replica (the way copies and writes by a long index go).
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import BOOL, FLOAT, INT, Device, Engine, Graph, IPUModel, poputil
from poplar_api import program as prog
from poplar_api.lowering import runs

N = 12


def _device(replicas: int, kind: str) -> Device:
    m = IPUModel("tiny")
    m.numIPUs = replicas
    device = m.createDevice()
    return device if kind == "model" else Device.createCPUDevice(device.getTarget().config)


def _run(replicas: int, values: dict[str, np.ndarray], kind: str) -> dict[str, np.ndarray]:
    """The graph's tensors after its copies, per replica (``values``: per replica)."""
    device = _device(replicas, kind)
    g = Graph(device.getTarget(), replication_factor=replicas)
    t = {}
    for name, typ in (("a", FLOAT), ("b", FLOAT), ("i", INT), ("j", INT), ("p", BOOL), ("q", BOOL)):
        t[name] = g.addVariable(typ, [N], name)
        poputil.mapTensorLinearly(g, t[name])
    a, b = t["a"], t["b"]
    seq = prog.Sequence(
        prog.Copy(a, b),  # between tensors
        prog.Copy(a[0:6], a[6:12]),  # within one tensor
        prog.Copy(b[::-1], a),  # a permuted view
        prog.Copy(t["i"][::2], t["j"][1::2]),  # INT, strided
        prog.Copy(t["p"], t["q"]),  # BOOL
    )
    for name in t:
        g.createHostWrite(name, t[name])
        g.createHostRead(name, t[name])
    e = Engine(g, seq)
    e.load(device)
    for name, v in values.items():
        e.writeTensor(name, v if replicas > 1 else v[0])
    e.run(0)
    return {name: e.readTensor(name).reshape(replicas, N) for name in t}


def _want(values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    v = {k: x.copy() for k, x in values.items()}
    v["b"][:] = v["a"]
    v["a"][:, 6:12] = v["a"][:, 0:6]
    v["a"][:] = v["b"][:, ::-1]
    v["j"][:, 1::2] = v["i"][:, ::2]
    v["q"][:] = v["p"]
    return v


@pytest.mark.parametrize("kind", ["model", "cpu"])
@pytest.mark.parametrize("rows_apart", [False, True])
def test_every_replica_copies_its_own_values(kind, rows_apart, monkeypatch):
    if rows_apart:  # every indexed copy replica by replica
        monkeypatch.setattr(runs, "ROWS_APART", 1)
    rng = np.random.default_rng(3)
    r = 4
    values = {
        "a": rng.standard_normal((r, N)).astype(np.float32),
        "b": rng.standard_normal((r, N)).astype(np.float32),
        "i": rng.integers(-50, 50, (r, N)).astype(np.int32),
        "j": rng.integers(-50, 50, (r, N)).astype(np.int32),
        "p": rng.integers(0, 2, (r, N)).astype(bool),
        "q": rng.integers(0, 2, (r, N)).astype(bool),
    }
    got = _run(r, values, kind)
    want = _want(values)
    for name in values:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert not np.array_equal(got["a"][0], got["a"][1])  # the replicas differ
    one = _run(1, {k: v[2:3] for k, v in values.items()}, kind)  # replica 2 alone
    for name in values:
        np.testing.assert_array_equal(one[name][0], got[name][2], err_msg=name)


def test_which_copies_go_replica_by_replica():
    index = np.arange(runs.ROWS_APART)
    whole = slice(0, index.size)
    assert runs.rows_apart(index, whole) and runs.rows_apart(whole, index)
    assert runs.rows_apart(index)
    assert not runs.rows_apart(whole, whole)  # blocks: one copy of every replica
    assert not runs.rows_apart(index[1:], index[1:])  # short: one index for all


@pytest.mark.parametrize("dtype", [np.uint32, np.uint16, np.uint8])
def test_indexed_copies_of_every_replica_move_as_numpy_moves_them(dtype):
    """``runs.move_rows`` (a replicated copy of fewer than ``ROWS_APART`` elements by
    index) against numpy's ``full[:, d] = full[:, s]``: sources and destinations that
    overlap (every source read before any is written) and repeat (the last kept)."""
    rng = np.random.default_rng(7)
    for _ in range(300):
        size, rows = int(rng.integers(1, 40)), int(rng.integers(1, 5))
        n = int(rng.integers(0, 2 * size))
        s, d = rng.integers(0, size, n), rng.integers(0, size, n)
        full = rng.integers(0, np.iinfo(dtype).max, (rows, size), dtype=dtype, endpoint=True)
        want = full.copy()
        want[:, d] = want[:, s]
        runs.move_rows(full, runs.row_ids(s, size), runs.row_ids(d, size))
        np.testing.assert_array_equal(full, want)
    full = np.arange(24, dtype=dtype).reshape(2, 12)
    want = full.copy()
    want[:, 2:8] = want[:, 0:6]  # slices that overlap
    runs.move_rows(full, runs.row_ids(slice(0, 6), 12), runs.row_ids(slice(2, 8), 12))
    np.testing.assert_array_equal(full, want)
