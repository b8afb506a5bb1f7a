"""The record of blocks every replica holds alike never calls differing elements alike.

A replicated executable's images start alike, and :mod:`poplar_api.replica_alike`
keeps, from effect to effect and run to run, which blocks (a variable's or constant's
elements) every replica still holds alike. Checked here:

* after **every effect** of programs whose replicas differ (per-replica streams, a host
  write of one replica's values, a tensor alike in part, a non-replicated view written
  in one replica, the data-parallel MLP step), every block the record calls alike is
  equal bit for bit in every replica's image (the images themselves are compared);
* the record does call alike what is (a broadcast host write, an all-reduce's result,
  an update of alike operands, a copy of an alike source), so the shortcuts it allows
  are taken, and they give the bits of the paths without them;
* the checks have teeth: with an invalidation removed (a host write not clearing, an
  effect's writes not cleared, an undescribed effect not clearing everything) the same
  programs make the record call differing blocks alike.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from poplar_api import FLOAT, Engine, Graph, IPUModel, gcl, popops
from poplar_api import program as prog
from poplar_api.gcl import CollectiveOperator as Op
from poplar_api.lowering import copies
from poplar_api.popops import vertices
from poplar_api.replica_alike import AlikeRecord, EffectWrites

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "multi_ipu"))

import data_parallel_mlp as dp  # noqa: E402
import mnist  # noqa: E402

R, N = 4, 48


def differing_alike(storage) -> list[tuple[int, int]]:
    """``(element size, block)`` of every block the record calls alike whose elements
    differ between two replicas' images (found by comparing the images)."""
    bad = []
    record = storage.alike
    for size, flags in record.flags.items():
        full = storage.full[size]
        edges = record._edges[size]
        differs = (full != full[0]).any(axis=0)
        per_block = np.add.reduceat(differs, edges[:-1]) if edges.size > 1 else differs[:0]
        bad += [(size, int(k)) for k in np.flatnonzero(flags & (per_block > 0))]
    return bad


class Checked:
    """An engine whose record is checked against its images after every effect."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.storage = engine._storage
        self.record = self.storage.alike
        self.effects = 0
        self.bad: list[tuple[int, int]] = []
        end = self.record.end

        def checked_end(done: bool) -> None:
            end(done)
            self.effects += 1
            self.bad += differing_alike(self.storage)

        self.record.end = checked_end

    def alike(self, name: str) -> bool:
        """Whether the record calls every element of the tensor read by handle
        ``name-read`` alike."""
        t = self.engine._state.host_reads[name + "-read"]
        return self.record.holds(t.elementType().size, np.asarray(t.flat_index()))


def _device(replicas: int = R):
    m = IPUModel("tiny")
    m.numIPUs = replicas
    return m.createDevice()


def _program(g: Graph):
    """x streamed in per replica; g = x all-reduced; w -= 0.5 g (alike); w2 = w;
    p -= 0.5 g (p alike in part); p2 = p; q = p[:8]; z = x * 2 (never alike)."""
    names = ("w", "p", "x", "g", "w2", "p2", "q", "s")
    shapes = {"q": [8], "s": [1]}
    t = {n: g.addVariable(FLOAT, shapes.get(n, [N]), n) for n in names}
    for tile, x in enumerate(t.values()):
        g.setTileMapping(x, tile % 4)
    for n in ("w", "p", "s"):
        g.createHostWrite(n, t[n])
    for n in names:
        g.createHostRead(n + "-read", t[n])
    seq = prog.Sequence(prog.Copy(g.addHostToDeviceFIFO("in", FLOAT, N), t["x"]))
    seq.add(prog.Copy(t["x"], t["g"]))
    gcl.allReduceInPlaceCrossReplica(g, [t["g"]], Op.ADD, seq, "sum")
    popops.scaledSubtractFrom(g, t["w"], t["g"], t["s"], seq, "update-w")
    seq.add(prog.Copy(t["w"], t["w2"]))
    popops.scaledSubtractFrom(g, t["p"], t["g"], t["s"], seq, "update-p")
    seq.add(prog.Copy(t["p"], t["p2"]))
    seq.add(prog.Copy(t["p"][:8], t["q"]))
    z = popops.map(g, popops.expr.Mul(popops.expr._1, 2.0), [t["x"]], seq)
    seq.add(prog.Copy(z, g.addDeviceToHostFIFO("out", FLOAT, N)))
    return seq


def _engine(rng: np.random.Generator, p_differs: bool = True) -> tuple[Checked, dict]:
    device = _device()
    g = Graph(device.getTarget(), replication_factor=R)
    popops.addCodelets(g)
    e = Engine(g, _program(g))
    e.load(device)
    host = {
        "in": rng.standard_normal((R, 3 * N)).astype(np.float32),
        "out": np.zeros((R, N), np.float32),
    }
    e.connectStream("in", host["in"])
    e.connectStream("out", host["out"])
    checked = Checked(e)
    e.writeTensor("w", rng.standard_normal(N).astype(np.float32))  # one value set: alike
    p = np.tile(rng.standard_normal(N).astype(np.float32), (R, 1))
    if p_differs:
        p[2, 40] += 1.0  # replica 2 differs in one element: p alike in part
    e.writeTensor("p", p)
    e.writeTensor("s", np.full(R, 0.25, np.float32))  # every replica's row alike
    return checked, host


def _read(e: Engine, names: tuple[str, ...]) -> bytes:
    return b"".join(np.asarray(e.readTensor(n + "-read")).tobytes() for n in names)


NAMES = ("w", "p", "x", "g", "w2", "p2", "q")


def test_every_alike_block_is_alike_after_every_effect():
    checked, _ = _engine(np.random.default_rng(3))
    e = checked.engine
    for _ in range(3):
        e.run(0)
    assert checked.effects > 20 and not checked.bad
    # what is alike is known: the host's one value set, the all-reduce's result, the
    # update of alike operands and its copy
    assert checked.alike("w") and checked.alike("g") and checked.alike("w2")
    assert checked.alike("s")
    # what differs is not: streamed per replica, written per replica, and what is
    # made of it (q is alike in fact, a copy of p's alike part: the record keeps whole
    # variables, so it does not say so)
    for name in ("x", "p", "p2", "q"):
        assert not checked.alike(name), name
    x = np.asarray(e.readTensor("x-read")).reshape(R, N)
    assert not np.array_equal(x[0], x[1])
    q = np.asarray(e.readTensor("q-read")).reshape(R, 8)
    assert (q == q[0]).all()
    # a host write of one replica's values, then a run: w and what is made of it differ
    w = np.tile(np.asarray(e.readTensor("w-read")).reshape(R, N)[0], (R, 1))
    w[3, 7] = -1.5
    e.writeTensor("w", w)
    assert not checked.alike("w")
    e.run(0)
    assert not checked.alike("w") and not checked.alike("w2")
    assert checked.alike("g")
    assert not checked.bad


def test_a_non_replicated_view_written_in_one_replica_is_not_alike():
    device = _device()
    g = Graph(device.getTarget(), replication_factor=R)
    popops.addCodelets(g)
    a = g.addVariable(FLOAT, [N], "a")
    b = g.addVariable(FLOAT, [N], "b")
    g.setTileMapping(a, 0)
    g.setTileMapping(b, 1)
    wide = g.getNonReplicatedTensor(a)
    g.createHostWrite("wide", wide)
    g.createHostRead("a-read", a)
    g.createHostRead("b-read", b)
    e = Engine(g, prog.Sequence(prog.Copy(a, b)))
    e.load(device)
    checked = Checked(e)
    values = np.zeros((R, N), np.float32)
    values[1, 5] = 2.0
    e.writeTensor("wide", values)
    assert not checked.alike("a")
    e.run(0)
    assert not checked.alike("b") and not checked.bad
    assert np.asarray(e.readTensor("b-read")).reshape(R, N)[1, 5] == 2.0


def _shortcuts_off(monkeypatch) -> None:
    monkeypatch.setattr(vertices, "SHARED_A", False)
    monkeypatch.setattr(copies, "copy_alike", lambda *args: False)


def test_the_shortcuts_give_the_bits_of_the_paths_without_them(monkeypatch):
    taken = []
    real = copies.copy_alike
    monkeypatch.setattr(copies, "copy_alike", lambda *a: taken.append(real(*a)) or taken[-1])
    runs = []
    for off in (False, True):
        if off:
            _shortcuts_off(monkeypatch)
        checked, host = _engine(np.random.default_rng(5))
        for _ in range(3):
            checked.engine.run(0)
        runs.append(_read(checked.engine, NAMES) + host["out"].tobytes())
        assert not checked.bad
    assert any(taken)  # the copy of w into w2 read one replica
    assert runs[0] == runs[1]


def test_the_mlp_step_keeps_its_weights_alike_and_its_bits(monkeypatch):
    """Four replicas of the data-parallel MLP step (each its own batch): the record is
    right after every effect, the first layer's weights stay known alike from run to
    run, the update and the weights' copy take their shortcuts, and the losses and
    parameters are those of the paths without them."""
    images, labels = mnist.load_digits_as_mnist()
    batch, hidden = 4, 16
    x = np.asarray(images[: 3 * R * batch], np.float32).reshape(R, -1) / 16.0
    y = np.asarray(labels[: 3 * R * batch], np.uint32).reshape(R, -1)
    calls = {"A": 0, "copy": 0}
    real_a, real_copy = vertices._a_alike, copies.copy_alike

    def counted(key, fn):
        def run(*args):
            got = fn(*args)
            calls[key] += bool(got)
            return got

        return run

    monkeypatch.setattr(vertices, "_a_alike", counted("A", real_a))
    monkeypatch.setattr(copies, "copy_alike", counted("copy", real_copy))
    results = []
    for off in (False, True):
        if off:
            _shortcuts_off(monkeypatch)
        device = dp.create_device(R, 16)
        graph = Graph(device.getTarget(), replication_factor=R)
        e = Engine(graph, dp.build(graph, batch, dp.ETA, hidden))
        e.load(device)
        for name, value in dp.initial_parameters(dp.DEFAULT_SEED, hidden).items():
            e.writeTensor(name, value)
        e.connectStream("images", x)
        e.connectStream("labels", y)
        loss = np.zeros((R, batch), np.float32)
        e.connectStream("loss", loss)
        checked = Checked(e)
        out = b""
        for _ in range(3):
            e.run(0)
            out += loss.tobytes()
        assert not checked.bad
        assert checked.alike("w1") and checked.alike("w2")
        assert not np.array_equal(loss[0], loss[1])  # every replica its own batch
        results.append(out + _read_params(e))
        if not off:
            assert calls["A"] >= 3 and calls["copy"] >= 3
    assert results[0] == results[1]


def _read_params(e: Engine) -> bytes:
    names = ("w1", "b1", "w2", "b2")
    return b"".join(np.asarray(e.readTensor(n + "-read")).tobytes() for n in names)


@pytest.mark.parametrize("broken", ["host write", "effect's writes", "undescribed effect"])
def test_removing_an_invalidation_is_found(monkeypatch, broken):
    """The checks above fail when the record misses a way elements come to differ."""
    if broken == "host write":
        monkeypatch.setattr(AlikeRecord, "host_wrote", lambda self, size, ids: None)
    elif broken == "effect's writes":
        real_end = AlikeRecord.end

        def end(self, done):
            if self._effect is not None:
                self._keep = True  # every described effect taken to write alike
            real_end(self, done)

        monkeypatch.setattr(AlikeRecord, "end", end)
    else:
        from poplar_api.lowering.context import Lowered

        real_describe = Lowered.describe

        def describe(self, effect, writes):  # stream copies and copies left undescribed
            if writes.reads is None and not writes.alike:
                return effect
            return real_describe(self, effect, writes)

        real_end = AlikeRecord.end

        def end(self, done):  # and an undescribed effect clearing nothing
            if self._effect is None:
                self.applying = False
                return
            real_end(self, done)

        monkeypatch.setattr(Lowered, "describe", describe)
        monkeypatch.setattr(AlikeRecord, "end", end)
    checked, _ = _engine(np.random.default_rng(3))
    for _ in range(2):
        checked.engine.run(0)
    assert checked.bad


def test_blocks_and_rules_of_the_record():
    record = AlikeRecord({4: (100, [0, 10, 10, 30, 60]), 2: (8, [])})
    flags = record.flags[4]
    assert flags.size == 4 and flags.all() and record.flags[2].size == 1
    touched, full = record._blocks(4, np.array([12, 11, 10, 35, 59, 30, 29]), covered=True)
    assert touched.tolist() == [1, 2] and full.tolist() == []
    touched, full = record._blocks(4, (np.array([10, 0]), np.array([30, 5])), covered=True)
    assert touched.tolist() == [0, 1] and full.tolist() == [1]
    assert record._blocks(4, slice(55, 65))[0].tolist() == [2, 3]
    assert record._blocks(4, range(60, 100), covered=True)[1].tolist() == [3]
    record.host_wrote(4, np.array([15]))
    assert flags.tolist() == [True, False, True, True]
    ids = np.array([1, 2, 3])
    assert record.holds(4, ids) and not record.holds(4, np.array([3, 12]))
    record.wrote_alike(4, range(5, 30))  # covers block 1 whole
    assert flags.all()
    record.host_wrote(4, np.array([1 << 41]))  # outside the space: everything cleared
    assert not flags.any()
    record.wrote_alike(4, range(0, 100))
    # an effect writing block 1 from block 0: kept while block 0 is alike, and during
    # it, block 1 is alike only to a reader that reads before it writes
    copy = EffectWrites(lambda: [(4, range(10, 30))], lambda: [(4, range(0, 10))], whole=True)
    record.begin(7, copy)
    assert record.holds(4, np.arange(10, 12), in_place=True)
    assert not record.holds(4, np.arange(10, 12))
    assert record.holds(4, np.arange(0, 3))
    record.end(True)
    assert flags.all()
    record.host_wrote(4, np.array([0]))
    record.begin(7, copy)
    record.end(True)
    assert flags.tolist() == [False, False, True, True]
    record.wrote_alike(4, range(0, 100))
    record.begin(8, copy)
    record.end(False)  # it raised: what it writes is not known alike
    assert flags.tolist() == [True, False, True, True]
    record.begin(9, None)  # not described: nothing is known
    assert not record.holds(4, np.arange(60, 62))
    record.end(True)
    assert not flags.any() and not record.flags[2].any()
    reduce = EffectWrites(lambda: [(4, (np.array([10, 30]), np.array([30, 50])))], alike=True)
    record.begin(10, reduce)
    record.end(True)
    assert flags.tolist() == [False, True, False, False]  # block 2 written in part


def test_blocks_of_id_arrays_in_any_order_match_a_sorted_reference():
    """Id arrays in any order, with repeats, empty or reaching outside the space: the
    blocks touched and covered are those found from the sorted distinct ids, and an id
    outside the space is refused, as :func:`np.unique` over every id would find them."""
    from poplar_api.replica_alike import _Unknown

    rng = np.random.default_rng(11)
    for _ in range(400):
        n = int(rng.integers(1, 120))
        bases = np.sort(rng.choice(n, size=min(n, int(rng.integers(1, 6))), replace=False))
        record = AlikeRecord({4: (n, bases)})
        edges = np.unique(np.concatenate([[0, n], bases]))
        pieces = [
            np.arange(a, min(n, a + int(rng.integers(1, 9))))
            for a in rng.integers(0, n, int(rng.integers(0, 6)))
        ]
        ids = np.concatenate([*pieces, rng.integers(0, n, int(rng.integers(0, 4)))])
        ids = rng.permutation(ids).astype(rng.choice([np.int32, np.int64]))
        distinct = np.unique(ids)
        block_of = np.searchsorted(edges, distinct, side="right") - 1
        want_touched = np.unique(block_of)
        want_full = [b for b in want_touched if (block_of == b).sum() == edges[b + 1] - edges[b]]
        touched, full = record._blocks(4, ids, covered=True)
        assert touched.tolist() == want_touched.tolist()
        assert full.tolist() == want_full
        if ids.size:
            with pytest.raises(_Unknown):
                record._blocks(4, np.append(ids, n))
            with pytest.raises(_Unknown):
                record._blocks(4, np.append(ids, -1))


def test_blocks_of_runs_in_any_order_match_a_reference_of_their_ids():
    """``(begin, end)`` runs in any order, overlapping, meeting or empty, and ranges and
    slices: the blocks touched and covered are those of the distinct ids the runs hold,
    and a run reaching outside the space is refused."""
    from poplar_api.replica_alike import _Unknown

    rng = np.random.default_rng(12)
    for trial in range(600):
        # small spaces, and large ones whose runs lie far apart (sorted, not marked)
        n = int(rng.integers(1, 120)) if trial % 3 else int(rng.integers(10_000, 60_000))
        bases = np.sort(rng.choice(n, size=min(n, int(rng.integers(1, 8))), replace=False))
        record = AlikeRecord({4: (n, bases)})
        edges = np.unique(np.concatenate([[0, n], bases]))
        begin = rng.integers(0, n, int(rng.integers(0, 7)))
        end = np.minimum(begin + rng.integers(-2, 40, begin.size), n)
        held = [np.arange(b, e) for b, e in zip(begin, end, strict=True)]
        distinct = np.unique(np.concatenate([np.zeros(0, np.int64), *held]))
        block_of = np.searchsorted(edges, distinct, side="right") - 1
        want_touched = np.unique(block_of)
        want_full = [b for b in want_touched if (block_of == b).sum() == edges[b + 1] - edges[b]]
        runs = (begin.astype(rng.choice([np.int32, np.int64])), end)
        touched, full = record._blocks(4, runs, covered=True)
        assert touched.tolist() == want_touched.tolist()
        assert full.tolist() == want_full
        if begin.size:
            a, b = int(begin[0]), max(int(end[0]), int(begin[0]))
            want = np.unique(np.searchsorted(edges, np.arange(a, b), side="right") - 1)
            assert record._blocks(4, range(a, b))[0].tolist() == want.tolist()
            assert record._blocks(4, slice(a, b))[0].tolist() == want.tolist()
            with pytest.raises(_Unknown):
                record._blocks(4, (np.append(begin, n - 1), np.append(end, n + 1)))
            with pytest.raises(_Unknown):
                record._blocks(4, (np.append(begin, -1), np.append(end, 1)))


def test_a_host_write_from_a_stream_callback_inside_a_run_clears_the_record():
    """A stream callback that writes a tensor with ``writeTensor`` while the stream's
    copy is applied: nothing is known alike after that effect."""
    checked, _ = _engine(np.random.default_rng(4))
    e = checked.engine
    e.run(0)
    assert checked.alike("w")
    rng = np.random.default_rng(6)

    def fill(buf: np.ndarray) -> None:
        e.writeTensor("w", rng.standard_normal((R, N)).astype(np.float32))
        buf[:] = 1.0

    for k in range(R):
        e.connectStreamToCallback("in", k, fill)
    e.run(0)
    assert not checked.bad
    assert not checked.alike("w") and not checked.alike("w2")


def test_an_effect_whose_writes_cannot_be_placed_clears_everything():
    record = AlikeRecord({4: (100, [0, 50])})
    for writes in ([(4, np.array([150]))], [(4, None)]):  # outside the space; no ids
        record.wrote_alike(4, range(0, 100))
        record.begin(0 if writes[0][1] is None else 1, EffectWrites(lambda w=writes: w))
        record.end(True)
        assert not record.flags[4].any()


def test_what_an_effect_writes_is_compared_once_per_ids(monkeypatch):
    """Whether the effect being applied writes the blocks asked about is found once per
    effect and ids array (kernels ask about the same ids on every run), and is that
    effect's answer, not another's."""
    record = AlikeRecord({4: (100, [0, 10, 30, 60])})
    ids = np.arange(10, 12)  # in block 1
    writes_1 = EffectWrites(lambda: [(4, range(10, 30))], alike=True)  # block 1 whole
    writes_2 = EffectWrites(lambda: [(4, range(30, 60))], alike=True)  # block 2 whole
    compared = []
    real = np.isin
    monkeypatch.setattr(np, "isin", lambda *a, **k: compared.append(1) or real(*a, **k))
    for _ in range(3):
        record.begin(1, writes_1)
        assert not record.holds(4, ids) and record.holds(4, ids, in_place=True)
        record.end(True)
        record.begin(2, writes_2)
        assert record.holds(4, ids)
        record.end(True)
    assert len(compared) == 2
