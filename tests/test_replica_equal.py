"""A weight update reads once what the all-reduce just stored alike in every replica.

The FLOAT all-reduce in place stores one float32 sum in every replica's copy of each
element and declares those elements (:mod:`poplar_api.replica_equal`, a record of the
executable's images); the effect applied right after it, and no later one, may rely on
that. A ``ScaledAdd`` whose ``A`` is one block and whose ``B`` is such elements, with
every replica's scales equal bit for bit, reads ``B`` in replica 0's row for every replica
(``vertices._scaled_add_block_shared_b``). Checked: the declaration's lifetime; the
pass against the per-replica pass; and through an engine, that the shortcut is taken
where it may be (also with an effect in between that does not write ``B``: the images'
record of blocks alike, :mod:`poplar_api.replica_alike`, still knows it) and not where
``B`` was not all-reduced or where the scales differ between replicas, with every
replica's result bit for bit that of the path without the shortcut each time.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Engine, Graph, IPUModel, gcl, popops
from poplar_api import program as prog
from poplar_api.field_images import read_only
from poplar_api.gcl import CollectiveOperator as Op
from poplar_api.popops import vertices
from poplar_api.replica_equal import DeclaredAlike

R = 4


def test_a_declaration_holds_for_the_next_effect_only():
    image, other = np.zeros((R, 64), np.uint32), np.zeros((R, 64), np.uint32)
    starts, ends = np.array([4, 20]), np.array([10, 30])
    inside, outside = np.array([9, 4, 25, 20]), np.array([4, 10])
    record = DeclaredAlike()
    record.declare(image, starts, ends)
    assert not record.holds_alike(image, inside)  # the declaring effect: not yet
    record.next_effect()
    assert record.holds_alike(image, inside)
    assert not DeclaredAlike().holds_alike(image, inside)  # another executable's record
    assert not record.holds_alike(image, outside)  # 10 is past the first run
    assert not record.holds_alike(other, inside)  # another image
    assert not record.holds_alike(image, inside[:0])
    record.next_effect()  # an effect in between
    assert not record.holds_alike(image, inside)
    record.declare(image, starts, ends)
    record.forget()  # a run starts
    record.next_effect()
    assert not record.holds_alike(image, inside)


@pytest.mark.parametrize("subtract", [False, True])
def test_shared_b_pass_is_the_per_replica_pass(subtract):
    """With every replica's B and scales replica 0's, the pass reading B once gives the
    per-replica pass's bits in every replica (A differs per replica; vertices of 0
    elements; more elements than a chunk)."""
    rng = np.random.default_rng(8)
    n = 2 * vertices.SHARED_CHUNK + 37
    counts = np.array([0, 700, 1, 0, n - 701 - 300, 300], np.int64)
    spread = np.exp2(rng.integers(-20, 21, (R, 6000)))
    image = (rng.standard_normal((R, 6000)) * spread).astype(np.float32)
    # read-only ids, as the lowering hands them (one compiled signature of each pass)
    b_ids = read_only(rng.permutation(np.arange(3000, 6000))[:n].astype(np.int32))
    assert int(counts.sum()) == b_ids.size == n
    image[1:, 3000:] = image[0, 3000:]  # B alike in every replica
    scales = np.tile(rng.standard_normal(counts.size).astype(np.float32), (R, 1))
    each, once = image.copy(), image.copy()
    vertices._scaled_add_block(each, 100, image, b_ids, scales, counts, subtract)
    vertices._scaled_add_block_shared_b(once, 100, image[0], b_ids, scales[0], counts, subtract)
    assert once.tobytes() == each.tobytes()
    assert not np.array_equal(each[0, 100 : 100 + n], each[1, 100 : 100 + n])  # A differs


def _update_after_all_reduce(between: bool, scales_differ: bool, reduce_b: bool):
    """``b`` all-reduced in place (or ``c``), then ``a -= s * b``; with ``between``, an
    update of another tensor between the two."""

    def build(g: Graph) -> prog.Sequence:
        a, b, c, d = (g.addVariable(FLOAT, [40, 7], name) for name in "abcd")
        s = g.addVariable(FLOAT, [1], "s")
        for tile, x in enumerate((a, b, c, d, s)):
            g.setTileMapping(x, tile)
            g.createHostWrite("abcds"[tile], x)
        g.createHostRead("a", a)
        seq = prog.Sequence()
        gcl.allReduceInPlaceCrossReplica(g, [b if reduce_b else c], Op.ADD, seq, "sum")
        if between:
            popops.scaledAddTo(g, d, c, 0.5, seq, "other")
        popops.scaledSubtractFrom(g, a, b, s, seq, "update")
        return seq

    rng = np.random.default_rng(13)
    values = {name: rng.standard_normal((R, 40, 7)).astype(np.float32) for name in "abcd"}
    values["s"] = np.full((R, 1), 0.375, np.float32)
    if scales_differ:
        values["s"][2] = np.float32(0.25)
    m = IPUModel("tiny")
    m.numIPUs = R
    device = m.createDevice()
    g = Graph(device.getTarget(), replication_factor=R)
    popops.addCodelets(g)
    e = Engine(g, build(g))
    e.load(device)
    for name, v in values.items():
        e.writeTensor(name, v)
    e.run(0)
    return np.asarray(e.readTensor("a")).reshape(R, 40, 7)


@pytest.mark.parametrize(
    ("between", "scales_differ", "reduce_b", "taken"),
    [
        (False, False, True, True),
        (True, False, True, True),  # b still alike: the images' record knows it
        (False, True, True, False),
        (False, False, False, False),
    ],
)
def test_the_update_reads_b_once_only_where_it_may(
    monkeypatch, between, scales_differ, reduce_b, taken
):
    calls = []
    real = vertices._scaled_add_block_shared_b
    monkeypatch.setattr(
        vertices, "_scaled_add_block_shared_b", lambda *a: calls.append(1) or real(*a)
    )
    got = _update_after_all_reduce(between, scales_differ, reduce_b)
    assert bool(calls) is taken
    monkeypatch.setattr(vertices, "SHARED_B", False)
    calls.clear()
    want = _update_after_all_reduce(between, scales_differ, reduce_b)
    assert not calls
    assert got.tobytes() == want.tobytes()
    assert not np.array_equal(got[0], got[1])  # every replica its own A
