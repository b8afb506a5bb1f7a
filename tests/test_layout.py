"""Tile layout: column-by-column numbering and Manhattan distances."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.errors import IpusimError, IRValidationError
from ipusim.tile.layout import tile_coordinates, tile_distance, tile_rows


def test_coordinates_column_by_column(make_config):
    # 8 tiles, 2 columns -> rows = ceil(8/2) = 4: tiles 0-3 in column 0, 4-7 in column 1.
    cfg = make_config()
    column, row = tile_coordinates(cfg.tile)
    np.testing.assert_array_equal(column, [0, 0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(row, [0, 1, 2, 3, 0, 1, 2, 3])
    assert column.dtype == np.int64 and row.dtype == np.int64


def test_coordinates_uneven_last_column(make_config):
    # 10 tiles, 3 columns -> rows = ceil(10/3) = 4; last column holds tiles 8 and 9 only.
    cfg = make_config(tile={"tiles_per_ipu": 10, "columns": 3})
    assert tile_rows(cfg.tile) == 4
    column, row = tile_coordinates(cfg.tile)
    np.testing.assert_array_equal(column, [0, 0, 0, 0, 1, 1, 1, 1, 2, 2])
    np.testing.assert_array_equal(row, [0, 1, 2, 3, 0, 1, 2, 3, 0, 1])


def test_distance_hand_computed(make_config):
    cfg = make_config()
    # tile 0 = (col 0, row 0); tile 7 = (1, 3): 1 + 3 = 4
    # tile 3 = (0, 3); tile 4 = (1, 0): 1 + 3 = 4
    # tile 5 = (1, 1); tile 2 = (0, 2): 1 + 1 = 2
    # tile 6 = (1, 2); tile 6: 0
    d = tile_distance(cfg.tile, np.array([0, 3, 5, 6]), np.array([7, 4, 2, 6]))
    np.testing.assert_array_equal(d, [4, 4, 2, 0])
    assert d.dtype == np.int64


def test_distance_broadcasts_and_is_symmetric(make_config):
    cfg = make_config()
    ids = np.arange(8)
    d = tile_distance(cfg.tile, ids[:, None], ids[None, :])
    assert d.shape == (8, 8)
    np.testing.assert_array_equal(d, d.T)
    # Independent reference from the coordinates written out by hand above.
    col = np.array([0, 0, 0, 0, 1, 1, 1, 1])
    row = np.array([0, 1, 2, 3, 0, 1, 2, 3])
    expected = np.abs(col[:, None] - col[None, :]) + np.abs(row[:, None] - row[None, :])
    np.testing.assert_array_equal(d, expected)
    # Scalar against array.
    np.testing.assert_array_equal(tile_distance(cfg.tile, 0, ids), expected[0])


def test_distance_rejects_out_of_range(make_config):
    cfg = make_config()
    with pytest.raises(IRValidationError, match=r"local tile id 8 .*\[0, 8\)"):
        tile_distance(cfg.tile, np.array([0, 8]), np.array([1, 1]))
    with pytest.raises(IpusimError, match="must hold integer"):
        tile_distance(cfg.tile, np.array([0.5]), np.array([1]))
