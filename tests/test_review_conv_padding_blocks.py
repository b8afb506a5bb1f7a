"""A convolution whose tile blocks read only padding: the planner's tile geometry of
such a block has no entries at any kernel position, and its count lists are empty.

A 5x5 kernel over a 1x1 field padded by 8 gives a 13x13 output whose border blocks
read zeros only; 25 kernel positions x 6 workers is more than the ranges from which
equal count lists are shared. Values are checked against the numpy reference of
``tests/test_poplin_conv.py``.
"""

from __future__ import annotations

import itertools

import numpy as np

from poplar_api import FLOAT, poplin
from poplar_api.poplin.conv_params import dim_maps
from poplar_api.poplin.conv_worklists import SHARE_MIN_RANGES, _shared_count_lists, tile_geometry
from tests.test_poplin_conv import forward_equals_numpy

PARAMS = dict(paddingLower=[8, 8], paddingUpper=[8, 8])


def test_count_lists_of_ranges_without_entries_are_empty() -> None:
    for n in (SHARE_MIN_RANGES - 1, SHARE_MIN_RANGES + 1, 600):
        cnt = np.zeros(n, np.int64)
        num = np.zeros(0, np.int64)
        bounds = np.concatenate(([0], np.cumsum(cnt)))
        want = [num[a:b].tolist() for a, b in itertools.pairwise(bounds)]
        assert _shared_count_lists(cnt, num, 1) == (want, None)


def test_geometry_of_a_block_reading_only_padding() -> None:
    p = poplin.ConvParams(FLOAT, 1, [1, 1], [5, 5], 4, 4, 1, **PARAMS)
    geom = tile_geometry(dim_maps(p), 1, [(0, 3), (0, 3)], 6)
    assert geom.positions == 0
    assert all(geom.partitions[w][k] == [] for w in range(6) for k in range(25))


def test_convolution_with_blocks_reading_only_padding_equals_numpy() -> None:
    p = poplin.ConvParams(FLOAT, 1, [1, 1], [5, 5], 4, 4, 1, **PARAMS)
    forward_equals_numpy(p, np.random.default_rng(0), preset="ipu1", atol=1e-5)
