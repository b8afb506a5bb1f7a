"""Tile-layout helpers shared by the popnn and poprand library functions."""

from __future__ import annotations

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.graph import Graph
from poplar_api.program import Sequence
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = ["check_sequence", "clone_like", "element_tiles", "place", "tile_groups", "view"]


def element_tiles(graph: Graph, t: Tensor, what: str) -> np.ndarray:
    """Root tile of every flat element of ``t``; unmapped elements are an error."""
    tiles = graph._state.space(t.elementType()).tile[t.flat_index()].astype(np.int64)
    if (tiles < 0).any():
        first = int(np.flatnonzero(tiles < 0)[0])
        raise GraphError(
            f"{what}: element {first} of tensor '{t.name}' is not mapped to a tile; hint: "
            f"map it with graph.setTileMapping first"
        )
    return tiles


def tile_groups(tiles: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``(tile, flat positions on it)`` for every tile used, positions in order."""
    order = np.argsort(tiles, kind="stable")
    uniq, starts = np.unique(tiles[order], return_index=True)
    parts = np.split(order, starts[1:])
    return list(zip(uniq.tolist(), parts, strict=True))


def clone_like(graph: Graph, t: Tensor, type_: Type, name: str, what: str) -> Tensor:
    """A new variable of ``t``'s shape and ``type_``, mapped element by element like ``t``."""
    tiles = element_tiles(graph, t, what)
    out = graph.addVariable(type_, t.shape(), name)
    graph._state.space(type_).tile[out.flat_index()] = tiles
    return out


def check_sequence(prog: object, what: str) -> Sequence:
    """``prog`` must be a ``program.Sequence`` the library can append to."""
    if not isinstance(prog, Sequence):
        raise GraphError(
            f"{what}: prog must be a program.Sequence to add the compute sets to, got "
            f"{type(prog).__name__}"
        )
    return prog


def view(graph: Graph, type_: Type, ids: np.ndarray, name: str) -> Tensor:
    """A tensor over element ids ``ids`` of ``type_`` (a gather view, no copy)."""
    return Tensor(graph._state, type_, np.asarray(ids, np.int64), name)


def place(graph: Graph, vertex: object, tile: int) -> None:
    """Map a vertex to root tile ``tile``."""
    graph._state.vertices[vertex.id].tile = int(tile)
