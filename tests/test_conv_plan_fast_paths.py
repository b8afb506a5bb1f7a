"""Fast paths of convolution planning, each against the computation it replaces.

* The best candidates are the first of ``numpy.lexsort`` of all of them, found by
  sorting only those whose primary key is among the smallest.
* Split rows laid out column after column hold the values of ``numpy.stack`` of the
  columns, and candidates joined in that layout those of ``numpy.concatenate``; the
  product of columns is that of the stacked columns.
* A dimension's options are its distinct block sizes, largest first, found where the
  block size steps down: compared with ``numpy.unique`` of every block size.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.poplin.conv_planner import _first_in_order, _join, _product, _rows
from poplar_api.poplin.conv_splits import options as _options


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


def test_product_of_columns_equals_the_product_of_the_stack() -> None:
    rng = np.random.default_rng(2)
    for k in range(1, 6):
        cols = [rng.integers(1, 1000, 64) for _ in range(k)]
        np.testing.assert_array_equal(_product(cols), np.prod(np.stack(cols), axis=0))


@pytest.mark.parametrize("size", [1, 7, 64, 784, 5000])
@pytest.mark.parametrize("grain", [1, 8, 16])
def test_options_are_the_distinct_block_sizes(size: int, grain: int) -> None:
    tiles = 1472
    units = -(-size // grain)
    blocks = np.unique(-(-units // np.arange(1, min(units, tiles) + 1)))[::-1] * grain
    blocks = np.minimum(blocks, size)
    parts = -(-size // blocks)
    keep = parts <= tiles
    parts, blocks = parts[keep], blocks[keep]
    if parts.size > 400:  # MAX_OPTIONS: a geometric subset
        pick = np.unique(np.round(np.geomspace(1, parts.size, 400)).astype(int) - 1)
        parts, blocks = parts[pick], blocks[pick]
    got = _options(size, tiles, grain)
    np.testing.assert_array_equal(got[0], parts)
    np.testing.assert_array_equal(got[1], blocks)
