"""``poplin.conv_ids.column_terms`` (each column's least and greatest entry and each
row's terms in one compiled pass) against numpy's reductions along the rows and
``@``, on tall, wide, one-row and one-column arrays, negative entries, narrow and
unsigned types, and strided views; and ``SeparableIds.blocks``, which uses it,
against the ids it names."""

from __future__ import annotations

import numpy as np

from poplar_api.poplin.conv_ids import column_terms, separable_ids


def _arrays() -> list[np.ndarray]:
    rng = np.random.default_rng(63)
    out = [np.array([[5]]), np.array([[3, -2, 7]]), np.array([[1], [-4], [9]])]
    for rows, cols in ((2, 1), (7, 3), (1000, 5), (20_000, 4), (3, 40)):
        for lo, hi in ((0, 30), (-50, 50), (-(2**40), 2**40)):
            out.append(rng.integers(lo, hi, (rows, cols)))
    a = rng.integers(-100, 100, (500, 6))
    out += [a[::3], a[:, ::2], a.T.copy()[:4].T, a.astype(np.int16), a.astype(np.int32),
            np.abs(a).astype(np.uint8), np.full((9, 3), -7)]  # fmt: skip
    return out


def test_column_terms_match_numpy() -> None:
    rng = np.random.default_rng(2)
    for a in _arrays():
        steps = rng.integers(-1000, 1000, a.shape[1])
        lo, hi, dot = column_terms(a, steps)
        assert lo.dtype == np.int64 and hi.dtype == np.int64 and dot.dtype == np.int64
        np.testing.assert_array_equal(lo, a.min(0))
        np.testing.assert_array_equal(hi, a.max(0))
        np.testing.assert_array_equal(dot, a.astype(np.int64) @ steps)


def test_separable_blocks_read_the_ids_they_name() -> None:
    rng = np.random.default_rng(11)
    ids = (np.arange(4)[:, None, None] * 1000 + (np.arange(6) // 2 * 40 + np.arange(6) % 2)
           [None, :, None] + np.arange(5)[None, None, :] * 3)  # fmt: skip
    sep = separable_ids(np.ascontiguousarray(ids))
    assert sep is not None
    rel = np.array([[0, 0, 0], [0, 1, 2], [1, 0, 1], [0, 2, 0]], np.int64)
    for _ in range(20):
        index = rng.integers(0, [3, 4, 3], (30, 3)).astype(np.int64)
        got = np.zeros((30, rel.shape[0]), np.int64)
        for which, base, pattern in sep.blocks(index, rel):
            got[which] = base[:, None] + pattern[None, :]
        pos = index[:, None, :] + rel[None, :, :]
        np.testing.assert_array_equal(got, ids[pos[..., 0], pos[..., 1], pos[..., 2]])
    assert sep.blocks(np.array([[3, 0, 0]], np.int64), rel) is None  # reads past the end
    assert sep.blocks(np.array([[0, 0, 3]], np.int64), rel) is None
    assert sep.blocks(np.array([[-1, 0, 0]], np.int64), rel) is None
    assert sep.blocks(np.array([[2, 3, 2]], np.int64), rel) is not None  # the last fit
