"""``Tensor.containsAliases``' compiled test for repeated ids (``tensor._repeats``)
against numpy's count of distinct ids, on ids of each kind the views make: ascending,
permuted, broadcast (repeats), spans narrow (one flag per id) and wide (sorted), int32
and int64, read-only and strided."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.tensor import _FLAGS_PER_ID, Tensor, _repeats
from poplar_api.types import FLOAT


def _expected(ids: np.ndarray) -> bool:
    return bool(np.unique(ids).size != ids.size)


def _cases() -> list[np.ndarray]:
    rng = np.random.default_rng(26)
    cases = [np.zeros(0, np.int64), np.array([7]), np.array([3, 3]), np.array([3, 4]),
             np.array([4, 3]), np.arange(10), np.arange(10)[::-1], np.arange(0, 40, 4),
             np.array([0, 1, 2, 0]), np.array([5, 1, 9, 5]), np.array([0, 10**9, 0]),
             np.array([0, 10**9, 5]), np.array([2, 0, 1, 2 + 4 * 4])]  # fmt: skip
    for n in (2, 3, 17, 256, 5000):
        for span in (n, 2 * n, _FLAGS_PER_ID * n, _FLAGS_PER_ID * n + 1, 50 * n):
            ids = rng.permutation(span)[:n] + rng.integers(0, 1000)
            cases.append(ids)  # distinct
            dup = ids.copy()
            dup[rng.integers(0, n)] = dup[rng.integers(0, n)]
            cases.append(dup)  # one repeat (or none when the two positions are one)
            last = ids.copy()
            last[-1] = last[0]
            cases.append(last)  # the repeat at the ends
            cases.append(np.sort(ids))
            cases.append(np.sort(dup))
        cases.append(rng.integers(0, n, n))  # many repeats
        cases.append(np.repeat(np.arange(n), 2))  # ascending with repeats
    return cases


@pytest.mark.parametrize("dtype", [np.int64, np.int32])
def test_repeats_matches_numpy_on_varied_ids(dtype) -> None:
    flagged = sorted_ = 0
    for ids in _cases():
        arr = ids.astype(dtype)
        for view in (arr, arr[::-1], np.repeat(arr, 2)[::2]):  # contiguous and strided
            ro = view.view()
            ro.flags.writeable = False
            for a in (view, ro):
                assert bool(_repeats(a)) == _expected(a), a
        if ids.size > 1:
            span = int(ids.max()) - int(ids.min()) + 1
            flagged += span <= _FLAGS_PER_ID * ids.size
            sorted_ += span > _FLAGS_PER_ID * ids.size
    assert flagged > 20 and sorted_ > 10  # both ways of testing were taken


def test_contains_aliases_of_views_matches_numpy() -> None:
    rng = np.random.default_rng(7)
    graph = object()
    base = Tensor(graph, FLOAT, np.arange(24, dtype=np.int64).reshape(2, 3, 4), "t")
    views = [base, base.dimShuffle([2, 0, 1]), base[1], base.slice(1, 3, 2),
             base.reshape([6, 4]).broadcast(2, 1), base[0].reshape([1, 12]).broadcast(3, 0),
             Tensor(graph, FLOAT, rng.permutation(40)[:24].reshape(4, 6), "p"),
             Tensor(graph, FLOAT, rng.integers(0, 30, 24).reshape(4, 6), "r")]  # fmt: skip
    for v in views:
        flat = v.flat_index()
        assert v.containsAliases() == _expected(flat), v.name
