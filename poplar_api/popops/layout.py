"""How popops spreads elementwise work over tiles and worker contexts.

The work follows the output (or in-place operand): on each tile, the output elements
mapped there form contiguous element-id regions. A tile with one region gets one 1-D
vertex (a multi-vertex for most ops); a tile with several regions gets up to ``W``
2-D worker vertices, each a run of consecutive regions chosen so the element counts
balance. Every other operand is connected element for element, so remote elements
are exchanged by lowering.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.graph import UNMAPPED, ComputeSet, Graph
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = ["ElemOperand", "Regions", "ScalarOperand", "add_vertices", "plan_regions"]


@dataclass(frozen=True)
class ElemOperand:
    """A field fed element for element: ``ids[p]`` is the element at output position p."""

    type: Type
    ids: np.ndarray
    name: str


@dataclass(frozen=True)
class ScalarOperand:
    """A one-element field: ``id_of_tile(tile)`` is the element id used on ``tile``."""

    type: Type
    id_of_tile: Callable[[int], int]
    name: str


@dataclass(frozen=True)
class Regions:
    """Contiguous regions of the work, grouped into vertices.

    Attributes
    ----------
    order
        Output positions sorted by element id; region ``r`` is
        ``order[start[r]:end[r]]``.
    start, end, tile
        Per region (sorted by tile): bounds into ``order`` and root tile.
    group
        Per region: vertex group it belongs to (consecutive regions share one).
    single
        Per group: True when the group is the only region of its tile (1-D vertex).
    """

    order: np.ndarray
    start: np.ndarray
    end: np.ndarray
    tile: np.ndarray
    group: np.ndarray
    single: np.ndarray


def plan_regions(graph: Graph, ref: Tensor, api: str, workers: int) -> Regions:
    """Regions of ``ref``'s elements per tile and their split into vertices.

    Raises
    ------
    GraphError
        Some element of ``ref`` is not mapped to a tile.
    """
    ids = ref.flat_index()
    tiles = graph._state.space(ref.elementType()).tile[ids].astype(np.int64)
    if (tiles == UNMAPPED).any():
        first = int(np.flatnonzero(tiles == UNMAPPED)[0])
        raise GraphError(
            f"popops.{api}: element {first} of tensor '{ref.name}' is not mapped to a tile; "
            "hint: map it first, e.g. poputil.mapTensorLinearly(graph, t)"
        )
    order = np.argsort(ids, kind="stable")
    sid, stile = ids[order], tiles[order]
    breaks = np.flatnonzero((np.diff(sid) != 1) | (np.diff(stile) != 0)) + 1
    start = np.concatenate(([0], breaks)).astype(np.int64)
    end = np.concatenate((breaks, [ids.size])).astype(np.int64)
    rtile = stile[start]
    by_tile = np.argsort(rtile, kind="stable")
    start, end, rtile = start[by_tile], end[by_tile], rtile[by_tile]
    size = end - start
    # Regions per tile and each region's rank within its tile.
    first_of_tile = np.concatenate(([True], rtile[1:] != rtile[:-1]))
    tile_idx = np.cumsum(first_of_tile) - 1
    tile_first = np.flatnonzero(first_of_tile)
    regions_on_tile = np.diff(np.concatenate((tile_first, [rtile.size])))[tile_idx]
    cum = np.cumsum(size) - size  # elements before each region (all tiles)
    before = cum - cum[tile_first][tile_idx]  # elements before it on its tile
    total = np.add.reduceat(size, tile_first)[tile_idx]
    nw = np.minimum(regions_on_tile, workers)
    worker = (before * nw) // np.maximum(total, 1)
    worker = np.minimum(worker, nw - 1)
    new_group = first_of_tile | np.concatenate(([True], worker[1:] != worker[:-1]))
    group = np.cumsum(new_group) - 1
    single = (regions_on_tile == 1)[np.flatnonzero(new_group)]
    return Regions(order, start, end, rtile, group, single)


def _view(graph: Graph, operand: ElemOperand, positions: np.ndarray) -> Tensor:
    return Tensor(graph._state, operand.type, operand.ids[positions], operand.name)


def add_vertices(
    graph: Graph,
    cs: ComputeSet,
    regions: Regions,
    operands: dict[str, ElemOperand | ScalarOperand],
    vertex_class: Callable[[str], type],
) -> int:
    """Add one vertex per group of ``regions`` to ``cs``; return the number added.

    ``operands`` maps field names to operands; ``vertex_class("1D" | "2D")`` gives the
    class for a single-region tile and for a group of several regions.
    """
    bounds = np.flatnonzero(np.concatenate(([True], regions.group[1:] != regions.group[:-1])))
    bounds = np.concatenate((bounds, [regions.group.size])).tolist()
    starts, ends, tiles = regions.start.tolist(), regions.end.tolist(), regions.tile.tolist()
    lo = graph._tile_lo
    for g, (a, b) in enumerate(itertools.pairwise(bounds)):
        tile = tiles[a]
        layout = "1D" if regions.single[g] else "2D"
        pieces = [regions.order[starts[r] : ends[r]] for r in range(a, b)]
        connections: dict[str, object] = {}
        for field, op in operands.items():
            if isinstance(op, ScalarOperand):
                connections[field] = Tensor(
                    graph._state, op.type, np.asarray([op.id_of_tile(tile)]), op.name
                )
            elif layout == "1D":
                connections[field] = _view(graph, op, pieces[0])
            else:
                connections[field] = [_view(graph, op, p) for p in pieces]
        vertex = graph.addVertex(cs, vertex_class(layout), connections)
        graph.setTileMapping(vertex, tile - lo)
    return len(bounds) - 1


def per_tile_constant(graph: Graph, t: Type, value: object, tiles: np.ndarray, name: str):
    """A constant holding ``value`` once on each of ``tiles`` (root tile ids).

    Returns a function mapping a root tile to the element id of its copy, for a
    :class:`ScalarOperand`.
    """
    unique = np.unique(tiles)
    const = graph.addConstant(t, [unique.size], value, name)
    ids = const.flat_index()
    graph._state.space(t).tile[ids] = unique.astype(np.int32)
    lookup = dict(zip(unique.tolist(), ids.tolist(), strict=True))
    return lookup.__getitem__
