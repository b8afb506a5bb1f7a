"""Operand ids as a sum of one term per dimension (``poplar_api/poplin/conv_ids.py``)
and the convolution fields computed from them (``Assembler.gather_separable``): the
ids and runs are those gathered from the array of every id, position by position."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.poplin.conv_blocks import Assembler, pattern
from poplar_api.poplin.conv_ids import piece_positions, separable_ids


def grouped_view(groups: int, batch: int, rows: int, cols: int, chans: int, g: int) -> np.ndarray:
    """The ids of a ``[G, B, H, W, C]`` view of a variable laid out ``[G, C / g, B, H,
    W, g]`` (Poplibs' grouped memory order), from id 7 on."""
    mem = np.arange(7, 7 + groups * chans * batch * rows * cols)
    mem = mem.reshape(groups, chans // g, batch, rows, cols, g)
    return np.ascontiguousarray(
        mem.transpose(0, 2, 3, 4, 1, 5).reshape(groups, batch, rows, cols, chans)
    )


@pytest.mark.parametrize("g", [1, 4, 8, 16])
def test_blocks_give_the_ids_gathered_position_by_position(g: int) -> None:
    view = grouped_view(2, 3, 5, 4, 16, g)
    sep = separable_ids(view)
    assert sep is not None
    rng = np.random.default_rng(g)
    strides = np.array(view.strides, np.int64) // view.itemsize
    flat = view.reshape(-1)
    for _ in range(40):
        pieces = [([0, 0, 0, 0, 0], [1, 2, 2, 2, int(rng.integers(1, 5))]),
                  ([0, 1, 1, 0, int(rng.integers(0, 4))], [1, 1, 1, 2, 3])]  # fmt: skip
        index = np.stack([rng.integers(0, 2, 6), rng.integers(0, 2, 6), rng.integers(0, 4, 6),
                          rng.integers(0, 3, 6), rng.integers(0, 10, 6)], 1)  # fmt: skip
        found = sep.blocks(index, piece_positions(pieces))
        assert found is not None
        rel, _ = pattern(strides, pieces)
        covered = np.zeros(6, bool)
        for which, bases, ids in found:
            covered[which] = True
            for k, b in zip(which.tolist(), bases.tolist(), strict=True):
                want = flat[int(index[k] @ strides) + rel]  # gathered from every id
                assert (b + ids).tolist() == want.tolist()
        assert covered.all()


def test_ids_not_a_sum_of_terms_are_refused() -> None:
    view = grouped_view(1, 2, 3, 3, 8, 4)
    view[0, 1, 2, 0, 5] += 1
    assert separable_ids(view) is None


def test_blocks_reading_past_the_array_are_refused() -> None:
    sep = separable_ids(grouped_view(1, 1, 2, 2, 8, 4))
    assert sep is not None
    positions = piece_positions([([0, 0, 0, 0, 0], [1, 1, 2, 2, 4])])
    assert sep.blocks(np.array([[0, 0, 0, 0, 4]]), positions) is not None
    assert sep.blocks(np.array([[0, 0, 1, 0, 4]]), positions) is None


def test_fields_computed_equal_fields_gathered() -> None:
    """The same rows given with their ids computed give the same field and runs."""
    view = grouped_view(1, 2, 6, 6, 16, 8)
    sep = separable_ids(view)
    strides = np.array(view.strides, np.int64) // view.itemsize
    pieces = [([0, 0, 0, 0, 0], [1, 2, 3, 3, 8])]
    rel, sizes = pattern(strides, pieces)
    index = np.array([[0, 0, r, c, ch] for r in (0, 3) for c in (0, 3) for ch in (0, 8)])
    members = np.arange(index.shape[0])[::-1].copy()
    base = index @ strides
    plain, computed = Assembler(members.size), Assembler(members.size)
    plain.gather(members, view.reshape(-1), base, rel, sizes)
    computed.gather_separable(members, view.reshape(-1), base, rel, sizes, sep, index,
                              piece_positions(pieces))  # fmt: skip
    assert all(row[5] is not None for row in computed.rows)
    a, b = plain.field(), computed.field()
    assert a.flat.tolist() == b.flat.tolist()
    ra, rb = plain.run_field(), computed.run_field()
    assert ra is not None and rb is not None
    assert ra.runs.starts.tolist() == rb.runs.starts.tolist()
    assert ra.runs.firsts.tolist() == rb.runs.firsts.tolist()


@pytest.mark.parametrize("g", [2, 4])
def test_blocks_of_a_grouped_first_dimension_give_the_ids_gathered(g: int) -> None:
    """The first dimension's table holds the id at position 0: where that dimension is
    grouped in memory (conv groups grouped, a view ``[G, H, W]`` of ``[G / g, H, W,
    g]`` from id 11 on), a block's ids still count it once."""
    groups, rows, cols = 8, 3, 5
    mem = np.arange(11, 11 + groups * rows * cols).reshape(groups // g, rows, cols, g)
    view = np.ascontiguousarray(mem.transpose(0, 3, 1, 2).reshape(groups, rows, cols))
    sep = separable_ids(view)
    assert sep is not None
    pieces = [([0, 0, 0], [3, 2, 2]), ([1, 1, 0], [1, 1, 4])]
    positions = piece_positions(pieces)
    index = np.array([[0, 0, 0], [1, 1, 1], [3, 0, 1], [4, 1, 0], [5, 1, 1]])
    found = sep.blocks(index, positions)
    assert found is not None
    covered = np.zeros(index.shape[0], bool)
    for which, bases, ids in found:
        covered[which] = True
        for k, b in zip(which.tolist(), bases.tolist(), strict=True):
            want = [int(view[tuple(index[k] + p)]) for p in positions]  # one by one
            assert (b + ids).tolist() == want
    assert covered.all()


@pytest.mark.parametrize("kinds", [1, 3])
def test_pattern_and_positions_of_pieces_of_repeated_shapes(kinds: int):
    """Pieces of a few shapes (or of one: the common case, taken in one step) at many
    offsets (a small convolution's blocks): each piece's positions in row-major order,
    one piece after another, against numpy."""
    shape = (3, 5, 4, 6)
    strides = np.array(np.empty(shape, np.int8).strides, np.int64)
    rng = np.random.default_rng(5)
    pieces = []
    for _ in range(12):
        size = [[1, 2, 1, 3], [2, 1, 4, 2], [1, 1, 1, 6]][int(rng.integers(kinds))]
        offsets = [int(rng.integers(0, n - s + 1)) for n, s in zip(shape, size, strict=True)]
        pieces.append((offsets, size))
    rel, sizes = pattern(strides, pieces)
    positions = piece_positions(pieces)
    want = [
        np.stack(
            np.meshgrid(
                *[np.arange(o, o + s) for o, s in zip(off, size, strict=True)], indexing="ij"
            ),
            -1,
        ).reshape(-1, len(shape))
        for off, size in pieces
    ]
    want_pos = np.concatenate(want)
    np.testing.assert_array_equal(positions, want_pos)
    np.testing.assert_array_equal(rel, np.ravel_multi_index(want_pos.T, shape))
    np.testing.assert_array_equal(sizes, [int(np.prod(s)) for _, s in pieces])
    assert rel.dtype == positions.dtype == sizes.dtype == np.int64


@pytest.mark.parametrize("first", [[100, 130, 160, 190], [100, 137, 150, 400]])
def test_rows_of_a_separable_source_equal_the_gathered_ones(first):
    """:meth:`Assembler.gather_rows` (each member reads a block in several rows of the
    first dimension) gives the ids and runs gathered from the array, whether the
    first table keeps one step (one pattern found) or not (every row's positions)."""
    from poplar_api.poplin.conv_ids import SeparableIds

    tables = [np.array(first, np.int64), np.arange(3) * 400, np.arange(6) * 50, np.arange(12)]
    sep = SeparableIds([t.astype(np.int64) for t in tables])
    ids = sep.array()
    shape = ids.shape
    flat = ids.reshape(-1)
    strides = np.array(np.empty(shape, np.int8).strides, np.int64)
    members = np.array([0, 2, 1])
    index = np.array([[0, 0, 1, 0], [0, 1, 3, 2], [0, 2, 0, 1]], np.int64)  # (+10 < 12)
    piece = [([0, 0, 0, 0], [1, 1, 2, 10])]
    rel, _ = pattern(strides, piece)
    positions = piece_positions(piece)
    rows = np.array([0, 2, 3])
    sizes = np.full(rows.size, rel.size, np.int64)
    base = index @ strides
    by_rows, by_ids = Assembler(3), Assembler(3)
    by_rows.gather_rows(members, flat, base, rel, sizes, sep, index, positions, rows,
                        int(strides[0]))  # fmt: skip
    stacked = (rows[:, None] * strides[0] + rel[None, :]).reshape(-1)
    by_ids.gather(members, flat, base, stacked, sizes)
    got, want = by_rows.field(), by_ids.field()
    np.testing.assert_array_equal(got.flat, want.flat)
    np.testing.assert_array_equal(got.sizes, want.sizes)
    runs, want_runs = by_rows.run_field(), by_ids.run_field((flat,))
    assert runs is not None and want_runs is not None
    np.testing.assert_array_equal(runs.runs.starts, want_runs.runs.starts)
    np.testing.assert_array_equal(runs.runs.firsts, want_runs.runs.firsts)


@pytest.mark.parametrize(
    "rows",
    [
        np.random.default_rng(0).integers(0, 4, (200, 3)),  # many repeats, numbered
        np.random.default_rng(1).integers(0, 50, (60, 5)),
        np.array([[3, -1], [0, 2], [3, -1], [-5, 7]]),  # negative: numpy's own unique
        np.array([[2**40, 1], [2**40, 0], [5, 2**30]]),  # codes past 2**62: numpy's
        np.zeros((4, 0), np.int64),
        np.array([[7, 1, 2]]),
    ],
)
def test_first_rows_are_numpys_unique_rows(rows: np.ndarray) -> None:
    """``first_rows`` gives the first occurrences and inverse of ``np.unique(axis=0)``
    (the same distinct rows in the same order), however it finds them."""
    from poplar_api.poplin.conv_ids import first_rows

    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    got_first, got_inverse = first_rows(rows)
    assert got_first.tolist() == first.tolist()
    assert got_inverse.tolist() == inverse.reshape(-1).tolist()
