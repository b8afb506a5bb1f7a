"""The reduction planner's stable group order: 16-bit keys sorted by radix give the
order of numpy's stable sort of the 64-bit keys (ties in position order)."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.popops.reduce_plan import stable_order


@pytest.mark.parametrize("high", [2, 128, 1 << 16, (1 << 16) + 1, 1 << 40])
def test_stable_order_is_numpys_stable_argsort(high: int) -> None:
    rng = np.random.default_rng(high % 997)
    keys = rng.integers(0, high, size=5000).astype(np.int64)
    got = stable_order(keys)
    assert got.dtype.kind == "i"
    np.testing.assert_array_equal(got, np.argsort(keys, kind="stable"))
    # ties stay in position order
    s = keys[got]
    tie = s[1:] == s[:-1]
    assert np.all(got[1:][tie] > got[:-1][tie])


def test_stable_order_negative_and_empty() -> None:
    keys = np.array([3, -1, 3, 0, -1], np.int64)
    np.testing.assert_array_equal(stable_order(keys), [1, 4, 3, 0, 2])
    assert stable_order(np.zeros(0, np.int64)).size == 0
