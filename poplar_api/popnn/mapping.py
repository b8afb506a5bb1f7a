"""Tile-layout helpers shared by the popnn (and poprand) library functions, on the
Graph's public bulk API (``elementTiles``, ``mapElements``)."""

from __future__ import annotations

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.graph import Graph
from poplar_api.program import Sequence
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = [
    "check_sequence",
    "clone_like",
    "element_tiles",
    "local_tiles",
]


def _unmapped_error(t: Tensor, tiles: np.ndarray, what: str) -> None:
    bad = tiles == -1
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise GraphError(
            f"{what}: element {first} of tensor '{t.name}' is not mapped to a tile; hint: "
            f"map it with graph.setTileMapping first"
        )


def element_tiles(graph: Graph, t: Tensor, what: str) -> np.ndarray:
    """Top-level tile of every flat element of ``t``; unmapped elements are an error."""
    tiles = graph.getTopLevelGraph().elementTiles(t)
    if tiles.size and int(tiles.min()) < 0:  # (one reduction when all are mapped)
        _unmapped_error(t, tiles, what)
    return tiles


def local_tiles(graph: Graph, t: Tensor, what: str) -> np.ndarray:
    """Tile of every flat element of ``t`` in ``graph``'s numbering (a new int64 array
    the caller may change, as ``elementTiles`` gives it); an element unmapped or on a
    tile outside a virtual ``graph`` is an error (unmapped ones named first)."""
    tiles = graph.elementTiles(t)
    if tiles.size and int(tiles.min()) < 0:  # (one reduction when all are on its tiles)
        _unmapped_error(t, tiles, what)
        first = int(np.flatnonzero(tiles < 0)[0])
        raise GraphError(
            f"{what}: element {first} of tensor '{t.name}' is mapped to a tile outside "
            f"this virtual graph's tiles; hint: map it to one of the graph's "
            f"{graph.getTarget().getNumTiles()} tiles"
        )
    return tiles


def clone_like(
    graph: Graph, t: Tensor, type_: Type, name: str, what: str, tiles: np.ndarray | None = None
) -> Tensor:
    """A new variable of ``t``'s shape and ``type_``, mapped element by element like
    ``t``; ``tiles``, when given, are :func:`local_tiles` of ``t`` the caller has
    already (every element mapped to one of ``graph``'s tiles)."""
    if tiles is None:
        tiles = local_tiles(graph, t, what)
    out = graph.addVariable(type_, t.shape(), name)
    graph.mapElements(out, tiles)
    return out


def check_sequence(prog: object, what: str) -> Sequence:
    """``prog`` must be a ``program.Sequence`` the library can append to."""
    if not isinstance(prog, Sequence):
        raise GraphError(
            f"{what}: prog must be a program.Sequence to add the compute sets to, got "
            f"{type(prog).__name__}"
        )
    return prog
