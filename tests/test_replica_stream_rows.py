"""Replicated stream copies served for every replica in one effect.

Where every replica's host end of a stream is a connected array (no callback), one
effect serves the replicas in turn (``HostStreams.plain_replicas``); where the
replicas' arrays are the rows of the one array ``connectStream(handle, buffer)``
split, at one position, a copy is one block of that array for every replica
(``pull_rows``, ``push_rows``). Each test runs the same program with that path on and
off (``copies.STREAMS_TOGETHER``) and expects the same bits, and the values numpy
gives for each replica's part of the host buffer read and written circularly.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, UNSIGNED_INT, Device, Engine, Graph, IPUModel, popops, poputil
from poplar_api import program as prog
from poplar_api.lowering import copies
from poplar_api.streams import HostStreams

REPLICAS = 4
N = 6


def device(kind: str) -> Device:
    m = IPUModel("tiny")
    m.numIPUs = REPLICAS
    made = m.createDevice()
    return made if kind == "model" else Device.createCPUDevice(made.getTarget().config)


def engine(kind: str) -> tuple[Engine, Device]:
    """x (FLOAT, streamed in) -> y = 3x + 1 streamed out; k (UNSIGNED_INT) streamed in
    and straight back out."""
    dev = device(kind)
    g = Graph(dev.getTarget(), replication_factor=REPLICAS)
    popops.addCodelets(g)
    x = g.addVariable(FLOAT, [N], "x")
    k = g.addVariable(UNSIGNED_INT, [2], "k")
    poputil.mapTensorLinearly(g, x)
    poputil.mapTensorLinearly(g, k)
    seq = prog.Sequence(prog.Copy(g.addHostToDeviceFIFO("in", FLOAT, N), x))
    seq.add(prog.Copy(g.addHostToDeviceFIFO("k-in", UNSIGNED_INT, 2), k))
    y = popops.map(g, popops.expr.Add(popops.expr.Mul(popops.expr._1, 3.0), 1.0), [x], seq)
    seq.add(prog.Copy(y, g.addDeviceToHostFIFO("out", FLOAT, N)))
    seq.add(prog.Copy(k, g.addDeviceToHostFIFO("k-out", UNSIGNED_INT, 2)))
    g.createHostRead("y", y)
    e = Engine(g, seq)
    e.load(dev)
    return e, dev


def circular(part: np.ndarray, run: int, n: int) -> np.ndarray:
    """The ``n`` elements of copy ``run`` of a circular buffer ``part``."""
    return part[(run * n + np.arange(n)) % part.size]


def connected(e: Engine, how: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Connect the four streams as ``how`` says; the host arrays, replica-major."""
    part = {"joined": 2 * N, "wrapping": N + N // 2}.get(how, 2 * N)
    data = rng.normal(size=(REPLICAS, part)).astype(np.float32)
    ks = rng.integers(0, 1 << 32, size=(REPLICAS, 3), dtype=np.uint32)  # wraps every copy
    out = np.zeros((REPLICAS, 3 * N), np.float32)  # three copies per replica's part
    k_out = np.zeros((REPLICAS, 2), np.uint32)
    if how == "each":  # every replica's own array
        for r in range(REPLICAS):
            e.connectStream("in", r, data[r])
            e.connectStream("out", r, out[r])
    else:
        e.connectStream("in", data)
        e.connectStream("out", out)
    e.connectStream("k-in", ks)
    e.connectStream("k-out", k_out)
    if how == "one-again":  # replica 2 connected again, to an array of its own
        again = data[2].copy()
        e.connectStream("in", 2, again)
        data = data.copy()
        data[2] = again
    if how == "one-callback":  # replica 1 fed by a callback: replica by replica
        e.connectStreamToCallback("in", 1, lambda buf: buf.__setitem__(slice(None), 7.0))
        data = data.copy()
        data[1] = 7.0
    return {"in": data, "out": out, "k-in": ks, "k-out": k_out}


HOWS = ["joined", "wrapping", "each", "one-again", "one-callback"]


def run_all(kind: str, how: str, together: bool, monkeypatch, runs: int = 4):
    monkeypatch.setattr(copies, "STREAMS_TOGETHER", together)
    e, dev = engine(kind)
    arrays = connected(e, how, np.random.default_rng(5))
    seen = []
    for _ in range(runs):
        e.run(0)
        seen.append((arrays["out"].copy(), arrays["k-out"].copy(), e.readTensor("y")))
    trace = e.getTrace() if kind == "model" else None
    dev.detach()
    return arrays, seen, trace


@pytest.mark.parametrize("how", HOWS)
def test_every_replica_gets_its_own_part_as_numpy_says(how, monkeypatch):
    arrays, seen, _ = run_all("cpu", how, True, monkeypatch)
    for run, (out, k_out, y) in enumerate(seen):
        for r in range(REPLICAS):
            x = circular(arrays["in"][r], run, N)
            want = x * np.float32(3) + np.float32(1)
            np.testing.assert_array_equal(y[r], want)
            np.testing.assert_array_equal(circular(out[r], run, N), want)
            np.testing.assert_array_equal(k_out[r], circular(arrays["k-in"][r], run, 2))


@pytest.mark.parametrize("how", HOWS)
def test_the_same_bits_as_one_replica_after_another(how, monkeypatch):
    _, together, _ = run_all("cpu", how, True, monkeypatch)
    _, apart, _ = run_all("cpu", how, False, monkeypatch)
    for a, b in zip(together, apart, strict=True):
        for x, y in zip(a, b, strict=True):
            np.testing.assert_array_equal(x, y)


def test_the_same_trace_on_the_ipu_model(monkeypatch):
    _, together, t1 = run_all("model", "joined", True, monkeypatch, runs=2)
    _, apart, t2 = run_all("model", "joined", False, monkeypatch, runs=2)
    assert t1.fingerprint() == t2.fingerprint()
    assert t1.total_cycles == t2.total_cycles
    for a, b in zip(together, apart, strict=True):
        np.testing.assert_array_equal(a[0], b[0])


def test_joined_rows_are_one_block_while_they_stay_joined(monkeypatch):
    """The block path is taken for a split array at one position (also after a copy
    that wraps), and not once a replica's buffer is another array."""
    taken = []
    pull_rows = HostStreams.pull_rows

    def spy(self, stream):
        rows = pull_rows(self, stream)
        taken.append((stream.handle, rows is not None))
        return rows

    monkeypatch.setattr(HostStreams, "pull_rows", spy)
    e, dev = engine("cpu")
    arrays = connected(e, "wrapping", np.random.default_rng(2))
    e.run(0)  # a block for "in" (position 0 of 9) and "k-in" (0 of 3)
    e.run(0)  # both wrap (6 of 9, 2 of 3): replica by replica
    e.run(0)  # 3 of 9 and 1 of 3: a block again
    by_run = [taken[i : i + 2] for i in range(0, len(taken), 2)]
    assert by_run == [
        [("in", True), ("k-in", True)],
        [("in", False), ("k-in", False)],
        [("in", True), ("k-in", True)],
    ]
    taken.clear()
    assert "in" in e._host.joined
    e.connectStream("in", 3, np.ones(N, np.float32))
    assert "in" not in e._host.joined  # the split array is let go
    e.run(0)
    assert taken[0] == ("in", False)
    np.testing.assert_array_equal(e.readTensor("y")[3], np.full(N, 4, np.float32))
    np.testing.assert_array_equal(
        e.readTensor("y")[0], circular(arrays["in"][0], 3, N) * np.float32(3) + np.float32(1)
    )
    dev.detach()
