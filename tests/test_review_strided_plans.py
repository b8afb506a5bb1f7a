"""Strided reads planned as progressions (``poplar_api.lowering.strided``) against the
plan made element by element, on edge cases: every field of the exchange (distinct
senders and the bytes a bus pair both receive included), tiles whose strides are mostly
one per tile (so that many are counted as progressions), residue classes that touch
across a stride's wrap, a bus partner reading inside a span, and int32 ids."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim import ir
from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.lowering import exchange
from poplar_api.lowering import pieces as pk
from poplar_api.lowering import strided as sp
from tests.test_strided_fields import _plan_both

_FIELDS = (*ir.TOTALS, "senders_received", "bytes_shared")


def _graph(tiles: int, owner: np.ndarray) -> Graph:
    """A one-IPU graph of ``tiles`` tiles with one FLOAT variable owned as ``owner``."""
    model = IPUModel("tiny")
    model.tilesPerIPU = tiles
    graph = Graph(model.createDevice().getTarget())
    x = graph.addVariable(FLOAT, [owner.size], "x")
    graph._state.space(FLOAT).tile[x.flat_index()] = owner
    return graph


def _same(got: ir.Exchange | None, want: ir.Exchange | None) -> None:
    if want is None:
        assert got is None
        return
    for name in _FIELDS:
        a, b = getattr(got, name), getattr(want, name)
        assert (None if a is None else a.tolist()) == (None if b is None else b.tolist()), name


def _field(rng, size: int, n_tiles: int):
    """Vertices reading a few progressions each, most at their tile's own stride (2 to
    11), some at another, some with loose ids among them."""
    stride_of = rng.integers(2, 12, n_tiles)
    parts, bounds, vtiles = [], [0], []
    for _ in range(int(rng.integers(1, 14))):
        t = int(rng.integers(0, n_tiles))
        s = int(stride_of[t]) if rng.random() < 0.85 else int(rng.integers(2, 12))
        refs = []
        for _ in range(int(rng.integers(1, 4))):
            a = int(rng.integers(0, size))
            refs.append(np.arange(a, min(size, a + int(rng.integers(3, 30)) * s), s))
        if rng.random() < 0.3:
            refs.append(rng.integers(0, size, int(rng.integers(1, 4))))
        ids = np.concatenate(refs).astype(np.int64)
        parts.append(ids)
        bounds.append(bounds[-1] + ids.size)
        vtiles.append(t)
    return np.concatenate(parts), np.asarray(bounds, np.int64), np.asarray(vtiles, np.int64)


@pytest.mark.parametrize("cover", [True, False])
def test_mostly_counted_progressions_plan_as_element_by_element(monkeypatch, cover):
    monkeypatch.setattr(exchange, "COVER_SPAN_PER_INTERVAL", 1 << 40 if cover else 0)
    rng = np.random.default_rng(11)
    counted = expanded = 0
    for trial in range(30):
        size = int(rng.integers(100, 2000))
        # owners in long stretches, so that many progressions have one owner
        owner = np.repeat(rng.integers(0, 16, size), rng.integers(20, 300, size))[:size]
        graph = _graph(16, owner.astype(np.int32))
        ids, bounds, vtiles = _field(rng, size, 16)
        want, got, planned = _plan_both(graph, ids, bounds, vtiles, int(rng.integers(2, 8)))
        counted += int(planned.sum())
        expanded += int((~planned).sum())
        try:
            _same(got, want)
        except AssertionError as e:
            raise AssertionError(f"trial {trial}: {e}") from None
    assert counted > 50 and expanded > 50  # both paths taken, often


def _one_tile_reads(firsts: list[int], stride: int, n: int, partner: list[int] = ()):
    """Tile 0 reads progressions from ``firsts`` at ``stride`` (``n`` each) of elements
    tile 4 owns; tile 1, its bus partner, reads ids ``partner``."""
    owner = np.full(400, 4, np.int32)
    reads = [np.arange(f, f + n * stride, stride) for f in firsts]
    ids = np.concatenate([*reads, np.asarray(partner, np.int64)]).astype(np.int64)
    cut = sum(r.size for r in reads)
    bounds = np.array([0, cut, ids.size] if len(partner) else [0, cut], np.int64)
    vtiles = np.array([0, 1] if len(partner) else [0], np.int64)
    return _plan_both(_graph(8, owner), ids, bounds, vtiles, 4)


@pytest.mark.parametrize(
    ("firsts", "partner", "counted"),
    [
        ([0, 2], [], True),  # residues 0 and 2 of 4: no two ids consecutive
        ([0, 3], [], False),  # residues 3 and 0 touch across the wrap (3, 4)
        ([1, 2], [], False),  # neighbouring residues
        ([0, 2], [41], False),  # the bus partner receives an id inside the span
        ([0, 2], [300], True),  # ... or only ids outside it
    ],
)
def test_residue_classes_and_bus_partner(firsts, partner, counted):
    want, got, planned = _one_tile_reads(firsts, 4, 20, partner)
    _same(got, want)
    assert bool(planned.all()) is counted and bool(planned.any()) is counted
    if counted:  # each element a message of its own, from one sender
        on0 = got.tile == 0
        assert got.messages_received[on0].tolist() == [20 * len(firsts)]
        assert got.senders_received[on0].tolist() == [1]


def test_int32_ids_give_the_pieces_of_int64_ids():
    rng = np.random.default_rng(4)
    for _ in range(20):
        size = int(rng.integers(100, 2000))
        owner = np.repeat(rng.integers(0, 8, size), rng.integers(20, 300, size))[:size]
        ids, bounds, vtiles = _field(rng, size, 8)
        found = []
        for dtype in (np.int64, np.int32):
            into, steps = pk.Pieces(4), sp.StridedPieces(1)
            sp.field_pieces(
                ids.astype(dtype), bounds, vtiles, owner.astype(np.int32), into, steps, 3
            )
            found.append([a.tolist() for a in (*into.arrays(), *steps.arrays())])
        assert found[0] == found[1]
