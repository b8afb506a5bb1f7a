"""Tile-mapping utilities, as Poplibs' ``poputil``.

``mapTensorLinearly`` spreads a tensor's elements over the graph's tiles in contiguous
chunks of whole grains; ``cloneTensor`` / ``cloneN`` / ``duplicate`` make new variables
laid out like an existing tensor (view), so elementwise work on them needs no exchange.
All mapping work is numpy over the element ids.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.graph import UNMAPPED, Graph
from poplar_api.graph_bulk import id_order
from poplar_api.program import Copy, Sequence
from poplar_api.tensor import Interval, Tensor
from poplar_api.types import Type

__all__ = [
    "calcLinearTileMapping",
    "cloneN",
    "cloneTensor",
    "duplicate",
    "linear_tiles",
    "mapTensorLinearly",
]


def _check_graph(graph: Any, api: str) -> Graph:
    if not isinstance(graph, Graph):
        raise GraphError(f"poputil.{api}: expected a Graph, got {type(graph).__name__}")
    return graph


def _check_tensor(graph: Graph, t: Any, api: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise GraphError(f"poputil.{api}: expected a Tensor, got {type(t).__name__}")
    if not graph.owns(t):
        raise GraphError(f"poputil.{api}: tensor '{t.name}' belongs to another graph")
    return t


def _positive_int(value: Any, what: str, api: str, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < minimum:
        raise GraphError(f"poputil.{api}: {what} must be an int >= {minimum}, got {value!r}")
    return int(value)


def linear_tiles(
    num_elements: int, num_tiles: int, minElementsPerTile: int = 0, grainSize: int = 1
) -> np.ndarray:
    """Tile (0-based, of ``num_tiles``; int32) of each of ``num_elements`` flat elements.

    Elements are cut into grains of ``grainSize`` (the last may be short); each used
    tile gets ``max(ceil(grains / num_tiles), ceil(minElementsPerTile / grainSize))``
    consecutive grains, from tile 0 upwards, so fewer tiles are used when the minimum
    per tile asks for it.
    """
    if num_elements == 0:
        return np.zeros(0, np.int64)
    grains = -(-num_elements // grainSize)
    grains_per_tile = max(-(-grains // num_tiles), -(-minElementsPerTile // grainSize), 1)
    per_tile = grains_per_tile * grainSize
    used = -(-num_elements // per_tile)
    counts = np.full(used, per_tile, np.int64)
    counts[-1] = num_elements - (used - 1) * per_tile
    # int32 tiles built by repeat: no element-sized int64 temporaries for big tensors
    return np.repeat(np.arange(used, dtype=np.int32), counts)


def calcLinearTileMapping(
    graph: Graph,
    t: Tensor | list[int] | tuple[int, ...],
    minElementsPerTile: int = 0,
    grainSize: int = 1,
) -> list[list[Interval]]:
    """The mapping :func:`mapTensorLinearly` would give: one interval list per tile.

    Parameters
    ----------
    graph
        The graph (its target's tile count is used).
    t
        A tensor, or a shape.
    minElementsPerTile, grainSize
        As :func:`mapTensorLinearly`.
    """
    graph = _check_graph(graph, "calcLinearTileMapping")
    if isinstance(t, Tensor):
        n = t.numElements()
    else:
        try:
            n = int(np.prod([int(d) for d in t], dtype=np.int64))
        except TypeError:
            raise GraphError(
                f"poputil.calcLinearTileMapping: expected a Tensor or a shape, got {t!r}"
            ) from None
    min_el = _positive_int(minElementsPerTile, "minElementsPerTile", "calcLinearTileMapping", 0)
    grain = _positive_int(grainSize, "grainSize", "calcLinearTileMapping", 1)
    num_tiles = graph.getTarget().getNumTiles()
    tiles = linear_tiles(n, num_tiles, min_el, grain)
    out: list[list[Interval]] = [[] for _ in range(num_tiles)]
    if n:
        used = int(tiles[-1]) + 1
        per_tile = int(np.count_nonzero(tiles == 0))
        for tile in range(used):
            out[tile].append(Interval(tile * per_tile, min((tile + 1) * per_tile, n)))
    return out


def mapTensorLinearly(
    graph: Graph, t: Tensor, minElementsPerTile: int = 0, grainSize: int = 1
) -> None:
    """Map ``t``'s flat elements over the graph's tiles in contiguous chunks.

    Each used tile (from tile 0 upwards) gets the same number of whole grains of
    ``grainSize`` elements, at least ``minElementsPerTile`` elements, and as few
    grains as spread the tensor over all tiles allow; the last used tile may get
    fewer. A virtual graph maps onto its own tiles.
    """
    graph = _check_graph(graph, "mapTensorLinearly")
    t = _check_tensor(graph, t, "mapTensorLinearly")
    min_el = _positive_int(minElementsPerTile, "minElementsPerTile", "mapTensorLinearly", 0)
    grain = _positive_int(grainSize, "grainSize", "mapTensorLinearly", 1)
    num_tiles = graph.getTarget().getNumTiles()
    graph.mapElements(t, linear_tiles(t.numElements(), num_tiles, min_el, grain))


def cloneTensor(graph: Graph, t: Tensor, name: str = "", type: Type | None = None) -> Tensor:
    """A new variable with ``t``'s shape and, element by element, ``t``'s tile mapping.

    ``t`` may be any view (transposed, sliced, broadcast): element ``i`` of the clone
    (row-major) lives on the tile of element ``i`` of ``t``. Unmapped elements of ``t``
    stay unmapped in the clone. ``type`` gives the clone another element type.

    As Poplar's ``Graph::clone`` (``TensorCloneMethod::PRESERVE_ORDER_UNLESS_ALIASES``),
    the clone keeps the memory order of ``t``'s elements: when ``t`` is a reordering of
    distinct elements (a transposed or regrouped view), the clone is the same view of a
    new variable, so its elements on a tile form the same contiguous runs as ``t``'s.
    A view with aliases (a broadcast) gets a row-major variable.
    """
    graph = _check_graph(graph, "cloneTensor")
    t = _check_tensor(graph, t, "cloneTensor")
    new_type = t.elementType() if type is None else type
    label = name or f"{t.name}.clone"
    order = None if t.isContiguous() else id_order(t.flat_index())
    if order is None or bool((np.diff(order) == 1).all()):
        clone = graph.addVariable(new_type, t.shape(), label)
    else:
        ids = t.flat_index()
        sorted_ids = ids[order]
        if bool((sorted_ids[1:] == sorted_ids[:-1]).any()):  # aliases: row-major
            clone = graph.addVariable(new_type, t.shape(), label)
        else:
            rank = np.empty(ids.size, np.int64)
            rank[order] = np.arange(ids.size, dtype=np.int64)
            var = graph.addVariable(new_type, [ids.size], label)
            clone = var.elements(rank).reshape(t.shape())
    _map_like(graph, clone, t)
    return clone


def _map_like(graph: Graph, t: Tensor, like: Tensor) -> None:
    """Map each flat element of ``t`` to the tile of the same flat element of ``like``
    (the same number of elements); unmapped elements stay unmapped, and elements on
    tiles outside a virtual ``graph`` keep their tiles."""
    top = graph.getTopLevelGraph().getReplicatedGraph()
    tiles = top.elementTiles(like)
    if tiles.size and int(tiles.min()) < 0:
        mapped = np.flatnonzero(tiles >= 0)
        top.mapElements(t.flatten().elements(mapped), tiles[mapped])
    else:
        top.mapElements(t, tiles)


def cloneN(graph: Graph, t: Tensor, N: int, name: str = "") -> Tensor:
    """A new variable of shape ``[N, *t.shape()]``, each slice mapped like ``t``."""
    graph = _check_graph(graph, "cloneN")
    t = _check_tensor(graph, t, "cloneN")
    n = _positive_int(N, "N", "cloneN", 0)
    clone = graph.addVariable(t.elementType(), [n, *t.shape()], name or f"{t.name}.cloneN")
    _map_like(graph, clone, t.expand([0]).broadcast(n, 0))
    return clone


def duplicate(graph: Graph, src: Tensor, prog: Sequence, name: str = "") -> Tensor:
    """Clone ``src`` (:func:`cloneTensor`) and append a Copy of ``src`` into it to ``prog``."""
    graph = _check_graph(graph, "duplicate")
    src = _check_tensor(graph, src, "duplicate")
    if not isinstance(prog, Sequence):
        raise GraphError(f"poputil.duplicate: prog must be a program.Sequence, got {prog!r}")
    if (graph.elementTiles(src) == UNMAPPED).any():
        raise GraphError(
            f"poputil.duplicate: tensor '{src.name}' has unmapped elements; map it first "
            "(e.g. poputil.mapTensorLinearly)"
        )
    copy = cloneTensor(graph, src, name or f"{src.name}.duplicate")
    prog.add(Copy(src, copy))
    return copy
