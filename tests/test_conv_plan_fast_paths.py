"""Fast paths of convolution planning, each against the computation it replaces.

* The best candidates are the first of ``numpy.lexsort`` of all of them, found by
  sorting only those whose primary key is among the smallest.
* Split rows laid out column after column hold the values of ``numpy.stack`` of the
  columns, and candidates joined in that layout those of ``numpy.concatenate``.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.poplin.conv_planner import _first_in_order, _join, _rows


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("k", [1, 6])
def test_first_in_order_equals_the_full_lexsort(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    spread = int(rng.integers(1, 20))  # few distinct values: many ties at every key
    keys = tuple(rng.integers(0, spread, n) for _ in range(4))
    np.testing.assert_array_equal(_first_in_order(keys, k), np.lexsort(keys)[:k])


def test_rows_and_joined_rows_hold_the_stacked_values() -> None:
    rng = np.random.default_rng(1)
    a = [rng.integers(0, 50, 40) for _ in range(6)]
    b = [rng.integers(0, 50, 7) for _ in range(6)]
    np.testing.assert_array_equal(_rows(a), np.stack(a, axis=1))
    want = np.concatenate([np.stack(a, axis=1), np.stack(b, axis=1)])
    np.testing.assert_array_equal(_join([_rows(a), _rows(b)]), want)
    np.testing.assert_array_equal(_join([a[0], b[0]]), np.concatenate([a[0], b[0]]))
