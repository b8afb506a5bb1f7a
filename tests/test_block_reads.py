"""Transposed blocks read by a vertex (``poplar_api.lowering.strided``), as pieces row by row.

A vertex that reads a block of ids column by column (rows of consecutive ids, a
fixed stride apart; the dense layers' and pooling gradients' operands in the CNN step)
names each row's ids once per column. Its remote references are found as pieces row by
row (a row's remote ids are runs), not one piece per reference, unless a column holds a
strided piece (``MIN_STRIDED`` references of one remote owner). Every result is compared
with the reference-by-reference computation.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ipusim import ir
from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.lowering import pieces as pk
from poplar_api.lowering import strided as sp
from poplar_api.lowering.exchange import ExchangePlanner


def _block(base, rows, stride, start, n):
    """``n`` ids of the block ``base + r * stride + c`` read column by column, from
    the ``start``-th reference of its first column on."""
    q = np.arange(start, start + n)
    return (base + (q % rows) * stride + q // rows).astype(np.int64)


def _remote_refs(ids, bounds, vtiles, owner):
    """Counter of (dst, id) of every reference whose element another tile owns."""
    dst = np.repeat(vtiles, np.diff(bounds))
    remote = owner[ids] != dst
    return Counter(zip(dst[remote].tolist(), ids[remote].tolist(), strict=True))


def _found_refs(into, steps):
    """Counter of (dst, id) named by ordinary and strided pieces."""
    got = Counter()
    for b, n, d in zip(*(a.tolist() for a in into.arrays()), strict=True):
        got.update((d, i) for i in range(b, b + n))
    first, count, stride, sdst, _ = steps.arrays()
    for f, n, s, d in zip(*(a.tolist() for a in (first, count, stride, sdst)), strict=True):
        got.update((d, f + k * s) for k in range(n))
    return got


def _row_runs(ids, rows, start, tile, owner):
    """(begin, length) of the runs of remote ids of a block, row after row (a run
    goes on into the next row when its first id follows), computed with numpy."""
    q = np.arange(start, start + ids.size)
    by_row = ids[np.lexsort((q // rows, q % rows))]
    by_row = by_row[owner[by_row] != tile]
    new = np.ones(by_row.size, bool)
    new[1:] = by_row[1:] != by_row[:-1] + 1
    starts = np.flatnonzero(new)
    return by_row[starts].tolist(), np.diff(np.append(starts, by_row.size)).tolist()


def test_a_transposed_block_is_read_as_runs_row_by_row():
    owner = np.ones(200, np.int32)  # tile 1 owns all but a few; the vertex is on tile 0
    owner[[33, 52, 53]] = 0
    ids = _block(30, 6, 10, 2, 21)  # 6 rows 10 apart, from row 2 of the first column on
    into, steps = pk.Pieces(4), sp.StridedPieces()
    sp.field_pieces(ids, np.array([0, ids.size]), np.array([0]), owner, into, steps)
    begin, length, dst = (a.tolist() for a in into.arrays())
    assert (begin, length) == _row_runs(ids, 6, 2, 0, owner)
    assert len(begin) == 6 and sum(length) == 18  # 21 refs, three on tile 0
    assert set(dst) == {0} and steps.rows == 0


def test_block_pieces_name_every_remote_reference_once():
    """Random blocks (rows overlapping when columns outnumber the stride, the last
    column partial, owners changing along rows and columns) beside other reads."""
    rng = np.random.default_rng(11)
    blocks = 0
    for trial in range(80):
        size, n_tiles = 3000, 6
        owner = np.repeat(rng.integers(0, n_tiles, size), rng.integers(1, 12, size))[:size]
        owner = owner.astype(np.int32)
        parts, bounds, vtiles = [], [0], []
        for _ in range(int(rng.integers(1, 8))):
            rows, stride = int(rng.integers(2, 40)), int(rng.integers(2, 30))
            start = int(rng.integers(0, rows))
            n = int(rng.integers(rows - start + 1, rows * 7))
            ids = _block(int(rng.integers(0, 500)), rows, stride, start, n)
            if rng.random() < 0.2:  # not a block: one reference out of place
                ids[int(rng.integers(0, ids.size))] += 1
            parts.append(ids)
            bounds.append(bounds[-1] + ids.size)
            vtiles.append(int(rng.integers(0, n_tiles)))
        ids, bounds, vtiles = np.concatenate(parts), np.array(bounds), np.array(vtiles)
        min_run = int(rng.integers(2, 20))
        into, steps = pk.Pieces(4), sp.StridedPieces(1)
        sp.field_pieces(ids, bounds, vtiles, owner, into, steps, min_run)
        assert _found_refs(into, steps) == _remote_refs(ids, bounds, vtiles, owner), trial
        blocks += int((into.arrays()[1] > 1).any())
    assert blocks > 40  # most trials have rows read as runs


def test_a_column_of_one_remote_owner_stays_a_strided_piece():
    """A block whose columns are progressions of one remote owner, long enough to be
    strided pieces: found as such (a tile's progressions may be counted without
    expanding them), one per column, as without the block form."""
    owner = np.ones(400, np.int32)
    ids = _block(0, 20, 3, 0, 60)  # 3 columns of 20 refs at stride 3
    into, steps = pk.Pieces(4), sp.StridedPieces()
    sp.field_pieces(ids, np.array([0, ids.size]), np.array([0]), owner, into, steps, 16)
    first, count, stride, dst, sender = (a.tolist() for a in steps.arrays())
    assert (first, count, stride) == ([0, 1, 2], [20] * 3, [3] * 3)
    assert dst == [0] * 3 and sender == [1] * 3 and into.count == 0


def test_block_plan_equals_element_by_element_plan():
    """The exchange planned from blocks' pieces (as ``plan_reads`` plans a compute
    set's reads) equals the one planned reference by reference."""
    rng = np.random.default_rng(23)
    for trial in range(40):
        graph = Graph(IPUModel("tiny").createDevice().getTarget())
        n_tiles = graph.getTarget().getNumTiles()
        size = 2000
        x = graph.addVariable(FLOAT, [size], "x")
        owner = np.repeat(rng.integers(0, n_tiles, size), rng.integers(1, 30, size))[:size]
        owner = owner.astype(np.int32)
        graph._state.space(FLOAT).tile[x.flat_index()] = owner
        parts, bounds, vtiles = [], [0], []
        for _ in range(int(rng.integers(1, 10))):
            rows, stride = int(rng.integers(2, 30)), int(rng.integers(2, 40))
            start = int(rng.integers(0, rows))
            ids = _block(int(rng.integers(0, 400)), rows, stride, start, rows * 4 - start)
            parts.append(ids)
            bounds.append(bounds[-1] + ids.size)
            vtiles.append(int(rng.integers(0, n_tiles)))
        # int32 ids, as plan_reads passes them for a graph of fewer than 2**31 elements
        ids = np.concatenate(parts).astype(np.int32)
        bounds, vtiles = np.array(bounds), np.array(vtiles)
        space = graph._state.space(FLOAT).tile
        by_element = ExchangePlanner(graph.getTarget(), graph._state)
        by_element.add_grouped(
            FLOAT, ids, space[ids].astype(np.int64), np.repeat(vtiles, np.diff(bounds))
        )
        planner = ExchangePlanner(graph.getTarget(), graph._state)
        into, steps = pk.Pieces(ids.size), sp.StridedPieces()
        sp.field_pieces(ids, bounds, vtiles, space, into, steps)
        if steps.rows:
            planned = planner.add_strided(FLOAT, into.arrays(), steps.arrays(), space)
            sp.expand_into(into, steps.arrays(), planned)
        planner.add_pieces(FLOAT, *into.arrays(), space, scratch=True)
        want, got = by_element.build("ex", 0), planner.build("ex", 0)
        if want is None:
            assert got is None, trial
            continue
        assert {k: getattr(got, k).tolist() for k in ir.TOTALS} == {
            k: getattr(want, k).tolist() for k in ir.TOTALS
        }, trial
        shared = [(e.bytes_shared if e.bytes_shared is not None else 0) for e in (got, want)]
        assert np.array_equal(shared[0], shared[1]), trial
