"""Physical layout of the tiles of one IPU.

Tiles are numbered column by column: local tile ``i`` sits in column ``i // rows`` and
row ``i % rows``, where ``rows = ceil(tiles_per_ipu / columns)``. The layout only
feeds distance-dependent latencies (exchange hops, sync delays), so a Manhattan
distance on this grid is all the machine needs.
"""

from __future__ import annotations

import math

import numpy as np

from ipusim.config import TileConfig
from ipusim.errors import IRValidationError

__all__ = ["tile_coordinates", "tile_distance", "tile_rows"]


def tile_rows(tile_cfg: TileConfig) -> int:
    """Number of rows of the tile grid: ``ceil(tiles_per_ipu / columns)``."""
    return math.ceil(tile_cfg.tiles_per_ipu / tile_cfg.columns)


def tile_coordinates(tile_cfg: TileConfig) -> tuple[np.ndarray, np.ndarray]:
    """Column and row of every local tile of one IPU.

    Parameters
    ----------
    tile_cfg
        The tile section of the machine config (``tiles_per_ipu``, ``columns``).

    Returns
    -------
    tuple of numpy.ndarray
        ``(column, row)``, each int64 of length ``tiles_per_ipu``.
    """
    rows = tile_rows(tile_cfg)
    ids = np.arange(tile_cfg.tiles_per_ipu, dtype=np.int64)
    return ids // rows, ids % rows


def _check_local_ids(tile_cfg: TileConfig, ids: np.ndarray, name: str) -> None:
    if ids.size == 0:
        return
    if not np.issubdtype(ids.dtype, np.integer):
        raise IRValidationError(
            [f"tile_distance: '{name}' must hold integer tile ids, got dtype {ids.dtype}"]
        )
    bad = (ids < 0) | (ids >= tile_cfg.tiles_per_ipu)
    if np.any(bad):
        first = int(ids[bad].flat[0])
        raise IRValidationError(
            [
                f"tile_distance: local tile id {first} in '{name}' is out of range "
                f"[0, {tile_cfg.tiles_per_ipu}) ({int(np.count_nonzero(bad))} bad id(s)); "
                "hint: convert global tile ids with `tile % tile.tiles_per_ipu`"
            ]
        )


def tile_distance(tile_cfg: TileConfig, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Manhattan distance between local tiles ``a`` and ``b`` on the layout grid.

    Parameters
    ----------
    tile_cfg
        The tile section of the machine config.
    a, b
        Local tile ids (``0 <= id < tiles_per_ipu``); any shapes that broadcast.

    Returns
    -------
    numpy.ndarray
        int64 distances with the broadcast shape of ``a`` and ``b``.

    Raises
    ------
    IRValidationError
        If an id is not an integer or lies outside the IPU.
    """
    a = np.asarray(a)
    b = np.asarray(b)
    _check_local_ids(tile_cfg, a, "a")
    _check_local_ids(tile_cfg, b, "b")
    rows = tile_rows(tile_cfg)
    a64 = a.astype(np.int64, copy=False)
    b64 = b.astype(np.int64, copy=False)
    return np.abs(a64 // rows - b64 // rows) + np.abs(a64 % rows - b64 % rows)
