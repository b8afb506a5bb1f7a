"""How popops spreads elementwise work over tiles and worker contexts, as Poplibs does.

The work follows the output (or in-place operand): on each tile, the output elements
mapped there form contiguous element-id regions, sorted by element id (Poplar's
``getSortedContiguousRegions``). Each popops function then decides, per tile, between
one multi-vertex over a single region and worker vertices made by
:func:`split_regions`, the restatement of ``poputil::splitRegionsBetweenWorkers``
(``lib/poputil/Util.cpp``, ``splitRegionsAux``): the tile's elements are cut into
grains and the grains dealt out evenly to at most ``W`` vertices, splitting regions
where needed. Every other operand is connected element for element, so remote
elements are exchanged by lowering.
"""

from __future__ import annotations

import itertools
import math
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numba
import numpy as np

from poplar_api.errors import GraphError
from poplar_api.graph import UNMAPPED, ComputeSet, Graph, Segments
from poplar_api.graph_bulk import id_order
from poplar_api.lowering.runs import read_only
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = [
    "ATOMIC_STORE_GRANULARITY",
    "RPT_COUNT_MAX",
    "UINT_MAX",
    "ElemOperand",
    "PlannedVertex",
    "PlannedVertices",
    "ScalarOperand",
    "TileRegions",
    "add_vertex",
    "add_vertices",
    "first_rows",
    "per_tile_constant",
    "plan_tiles",
    "split_pieces",
    "split_regions",
    "tile_groups",
    "tile_regions",
]

#: ``UINT_MAX`` of the source (no limit).
UINT_MAX = 2**32 - 1
#: ``Target::getRptCountMax()`` on Mk2: the repeat counter is 12 bits (0x0FFF).
RPT_COUNT_MAX = 4095
#: ``Target::getAtomicStoreGranularity()`` on Mk2 (bytes); the source uses it as a grain
#: size in elements, ``max(vectorWidth, atomicStoreGranularity)``, and so do we.
ATOMIC_STORE_GRANULARITY = 4


@dataclass(frozen=True)
class ElemOperand:
    """A field fed element for element: flat element ``p`` of ``flat`` is the element at
    output position ``p``.

    Attributes
    ----------
    type
        Element type of the field.
    flat
        The operand's view in the output's shape, flattened (a broadcast operand
        holds an element several times); another shape is flattened on creation.
    name
        Debug name.
    """

    type: Type
    flat: Tensor
    name: str

    def __post_init__(self) -> None:
        if not isinstance(self.flat, Tensor):
            raise GraphError(
                f"ElemOperand '{self.name}': expected the operand's Tensor, got "
                f"{type(self.flat).__name__}; hint: ElemOperand(t.elementType(), t, t.name)"
            )
        if self.flat.rank() != 1:
            object.__setattr__(self, "flat", self.flat.flatten())


@dataclass(frozen=True)
class ScalarOperand:
    """A one-element field: on tile ``tile`` the field gets flat element
    ``position_of(tiles)[i]`` of ``tensor`` (``position_of`` maps an array of tiles of
    the graph to positions, vectorised)."""

    type: Type
    tensor: Tensor
    position_of: Callable[[np.ndarray], np.ndarray]
    name: str

    @staticmethod
    def single(t: Tensor) -> ScalarOperand:
        """The one element of ``t`` on every tile."""
        return ScalarOperand(
            t.elementType(), t.flatten(), lambda tiles: np.zeros(len(tiles), np.int64), t.name
        )


@dataclass(frozen=True)
class TileRegions:
    """The contiguous regions of the work on one tile.

    Attributes
    ----------
    tile
        Tile, in the numbering of the graph the regions were found for.
    regions
        Output positions of each contiguous region, regions in element-id order.
    """

    tile: int
    regions: list[np.ndarray]

    @property
    def sizes(self) -> list[int]:
        """Elements of each region."""
        return [int(r.size) for r in self.regions]


def _regions(
    ids: np.ndarray, tiles: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The contiguous regions of elements ``ids`` on ``tiles``: ``(order, start, end,
    tile, by_tile)``; region ``r`` holds the positions ``order[start[r]:end[r]]``
    (ascending element ids, one tile), ``by_tile`` lists the regions tile by tile,
    each tile's in element-id order; the region tiles keep the dtype of ``tiles``."""
    given = np.asarray(tiles).reshape(-1)  # the region tiles are read from these, in
    flat = np.asarray(ids).reshape(-1)  # their own dtype
    # room for a region per element: the pages past the regions found are never
    # written, so cost no host memory
    room = np.empty(flat.size, np.int64)
    found = _scattered_regions(flat, given, room)
    if found is not None:
        order, count = found
    else:  # (few or repeated ids, or spread far apart: id_order sorts them)
        order = id_order(flat)
        count = _region_starts(_readonly(flat), _readonly(given), order, room)
    start = room[:count].copy()
    end = np.append(start[1:], ids.size) if start.size else start.copy()
    rtile = given[order[start]]
    return order, start, end, rtile, np.argsort(rtile, kind="stable")


def _readonly(a: np.ndarray) -> np.ndarray:
    """``a`` as a C-contiguous read-only int64 array (one compiled form of the kernels)."""
    return read_only(a, np.int64)


def _scattered_regions(
    ids: np.ndarray, tiles: np.ndarray, starts: np.ndarray
) -> tuple[np.ndarray, int] | None:
    """``(id_order(ids), regions)`` with the regions' starts written into ``starts``, as
    :func:`id_order` and :func:`_region_starts` give them, in one scatter and one walk
    where ``id_order`` would scatter (at least two distinct ids spanning at most four
    times their count); None where it would sort."""
    if ids.size < 2:
        return None
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo + 1 > 4 * ids.size or ids.size > np.iinfo(np.int32).max:
        return None
    slot = np.full(hi - lo + 1, -1, np.int32)
    order = np.empty(ids.size, np.int64)
    count = _scatter_regions(_readonly(ids), _readonly(tiles), np.int64(lo), slot, order, starts)
    return None if count < 0 else (order, count)


@numba.njit(cache=True, nogil=True)
def _scatter_regions(ids, tiles, lo, slot, order, starts):  # pragma: no cover - compiled
    # slot[id - lo] = its position (-1: an id repeats), then the positions in id order
    # into order, a region starting where the id is not the one before plus 1 or the
    # tile changes (as _region_starts finds them along order); returns the regions.
    # Indices >= 0 index as unsigned: Numba tests a signed index for a negative one.
    for k in range(ids.size):
        at = np.uint64(ids[k] - lo)
        if slot[at] >= 0:
            return -1
        slot[at] = k
    j = 0
    count = 0
    prev_s = 0
    prev_t = 0
    for s in range(slot.size):
        p = slot[s]
        if p >= 0:
            order[j] = p
            t = tiles[np.uint64(p)]
            if j == 0 or s != prev_s + 1 or t != prev_t:
                starts[count] = j
                count += 1
            prev_s = s
            prev_t = t
            j += 1
    return count


@numba.njit(cache=True, nogil=True)
def _region_starts(ids, tiles, order, starts):  # pragma: no cover - compiled
    # Walk the ids in order: a region starts where the id is not the one before plus 1
    # or the tile changes. Returns the number of regions; writes where each starts (a
    # position in order) when starts has room.
    count = 0
    fill = starts.size > 0
    for k in range(order.size):
        p = order[k]
        if k == 0 or ids[p] != ids[order[k - 1]] + 1 or tiles[p] != tiles[order[k - 1]]:
            if fill:
                starts[count] = k
            count += 1
    return count


def _checked_tiles(
    graph: Graph, ref: Tensor, api: str, tiles: np.ndarray | None = None
) -> np.ndarray:
    """The tile of every element of ``ref`` (``tiles`` when given), all mapped and in
    the graph."""
    if tiles is None:
        tiles = graph.elementTiles(ref, readonly=True)
    if not tiles.size or int(tiles.min()) >= 0:  # (one pass where all is well)
        return tiles
    if (tiles == UNMAPPED).any():
        first = int(np.flatnonzero(tiles == UNMAPPED)[0])
        raise GraphError(
            f"popops.{api}: element {first} of tensor '{ref.name}' is not mapped to a tile; "
            "hint: map it first, e.g. poputil.mapTensorLinearly(graph, t)"
        )
    first = int(np.flatnonzero(tiles < 0)[0])  # OUTSIDE: not one of a virtual graph's
    raise GraphError(
        f"popops.{api}: element {first} of tensor '{ref.name}' is mapped to a tile "
        "outside this virtual graph's tiles; hint: call it on a graph that holds the "
        f"tensor, or copy it to one of this graph's {graph.getTarget().getNumTiles()} tiles"
    )


def tile_regions(graph: Graph, ref: Tensor, api: str) -> list[TileRegions]:
    """Contiguous regions of ``ref``'s elements on every tile that holds some.

    Raises
    ------
    GraphError
        Some element of ``ref`` is not mapped to a tile, or (in a virtual graph) is on a
        tile outside the graph.
    """
    ids = ref.flat_index()
    if ids.size == 0:
        return []
    tiles = _checked_tiles(graph, ref, api)
    order, start, end, rtile, by_tile = _regions(ids, tiles)
    out: list[TileRegions] = []
    current: list[np.ndarray] = []
    current_tile = None
    for r in by_tile.tolist():
        t = int(rtile[r])
        if t != current_tile and current:
            out.append(TileRegions(current_tile, current))
            current = []
        current_tile = t
        current.append(order[start[r] : end[r]])
    if current:
        out.append(TileRegions(current_tile, current))
    return out


def split_regions(
    sizes: Sequence[int],
    grain: int,
    max_partitions: int,
    min_per_partition: int,
    max_per_partition: int = UINT_MAX,
    max_per_region: int = UINT_MAX,
) -> tuple[tuple[tuple[int, int, int], ...], ...]:
    """``splitRegionsAux``: deal the grains of the regions out to vertices.

    Parameters
    ----------
    sizes
        Elements of each region, in order.
    grain
        Grain size in elements; vertices get whole grains (the last may be short).
    max_partitions
        At most this many vertices (the worker contexts, for ``...BetweenWorkers``).
    min_per_partition
        Fewer vertices when they would get fewer elements than this.
    max_per_partition
        At most this many elements per vertex (more vertices if needed).
    max_per_region
        Longest piece of a region in one vertex (rounded down to whole grains).

    Returns
    -------
    tuple of tuple of (region index, offset, size)
        Per vertex, the pieces of regions it handles, in order (immutable: one result
        serves every call with the same arguments).
    """
    key = (tuple(sizes), grain, max_partitions, min_per_partition, max_per_partition,
           max_per_region)  # fmt: skip
    found = _SPLITS.get(key)
    if found is None:
        found = tuple(
            tuple(pieces)
            for pieces in _split_regions(
                sizes, grain, max_partitions, min_per_partition, max_per_partition, max_per_region
            )
        )
        if len(_SPLITS) >= _SPLITS_KEPT:
            _SPLITS.clear()
        _SPLITS[key] = found
    return found


#: ``split_regions`` results by their arguments: the tiles of one tensor often hold
#: regions of the same sizes, and planning asks for each tile's split.
_SPLITS: dict[tuple, tuple[tuple[tuple[int, int, int], ...], ...]] = {}
_SPLITS_KEPT = 4096


def _split_regions(
    sizes: Sequence[int],
    grain: int,
    max_partitions: int,
    min_per_partition: int,
    max_per_partition: int,
    max_per_region: int,
) -> list[list[tuple[int, int, int]]]:
    """The split of :func:`split_regions`, computed."""
    if grain < 1:
        raise GraphError(f"split_regions: grain must be >= 1, got {grain}")
    max_region = grain * (int(max_per_region) // grain)
    if max_region == 0:
        raise GraphError(
            f"split_regions: max elements per region {max_per_region} is below one grain "
            f"({grain}); it must be at least the grain size"
        )
    total = int(sum(sizes))
    if total == 0:
        return []
    num_grains = -(-total // grain)
    max_gpp = -(-num_grains // max_partitions)
    max_gpp = min(max_gpp, int(max_per_partition) // grain)
    if min_per_partition:
        min_gpp = -(-int(min_per_partition) // grain)
        max_vertices = max(1, num_grains // min_gpp)
        max_gpp = max(max_gpp, -(-num_grains // max_vertices))
    if max_gpp < 1:
        raise GraphError(
            f"split_regions: max elements per vertex {max_per_partition} is below one grain "
            f"({grain}); it must be at least the grain size"
        )
    vertices = -(-num_grains // max_gpp)
    out: list[list[tuple[int, int, int]]] = []
    item, offset = 0, 0
    for v in range(vertices):
        g0 = (v * num_grains) // vertices
        g1 = ((v + 1) * num_grains) // vertices
        remaining = min(total, g1 * grain) - g0 * grain
        pieces: list[tuple[int, int, int]] = []
        while remaining > 0:
            if offset == sizes[item]:
                item, offset = item + 1, 0
            take = min(remaining, max_region, int(sizes[item]) - offset)
            pieces.append((item, offset, take))
            offset += take
            remaining -= take
        out.append(pieces)
    return out


def split_pieces(
    regions: list[np.ndarray], split: list[list[tuple[int, int, int]]]
) -> list[list[np.ndarray]]:
    """Output positions of every piece of :func:`split_regions`' result."""
    return [[regions[r][o : o + n] for r, o, n in vertex] for vertex in split]


#: A vertex to add: (tile, class, pieces of output positions, one row per piece?).
PlannedVertex = tuple[int, type, list[np.ndarray], bool]


@dataclass(frozen=True)
class PlannedVertices:
    """Vertices planned over output positions, as columns (see :class:`PlannedVertex`).

    Vertex ``v`` of class ``classes[v]`` sits on ``tiles[v]`` and has ``counts[v]``
    pieces; piece ``k`` (all vertices' pieces in order) covers ``sizes[k]`` of the
    ``positions``, one piece after another.
    """

    classes: list[type]
    tiles: np.ndarray
    rows: np.ndarray
    counts: np.ndarray
    sizes: np.ndarray
    positions: np.ndarray

    @staticmethod
    def of(vertices: Sequence[PlannedVertex]) -> PlannedVertices:
        """The columns of a list of planned vertices."""
        n = len(vertices)
        pieces = [p for v in vertices for p in v[2]]
        return PlannedVertices(
            [v[1] for v in vertices],
            np.fromiter((v[0] for v in vertices), np.int64, n),
            np.fromiter((v[3] for v in vertices), bool, n),
            np.fromiter((len(v[2]) for v in vertices), np.int64, n),
            np.fromiter((p.size for p in pieces), np.int64, len(pieces)),
            np.concatenate(pieces) if pieces else np.zeros(0, np.int64),
        )


def _spans(begins: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The integers ``begins[k] .. begins[k] + lengths[k] - 1`` of each span in turn."""
    total = int(lengths.sum())
    firsts = np.cumsum(lengths) - lengths
    return np.arange(total, dtype=np.int64) + np.repeat(begins - firsts, lengths)


def plan_tiles(
    graph: Graph, ref: Tensor, api: str, plan_tile: Callable, tiles: np.ndarray | None = None
) -> PlannedVertices:
    """The vertices ``plan_tile(regions)`` chooses on every tile holding elements of
    ``ref``, tile after tile (as :func:`tile_regions` lists them); ``tiles``, when
    given, are ``graph.elementTiles(ref)`` as the caller asked them already (checked
    here as those asked here are).

    A per-tile plan depends only on the sizes of the tile's regions and takes its
    pieces from them, so it is asked once per distinct list of sizes (a linearly
    mapped tensor has one or two), with stand-in regions of local positions; every
    tile with those sizes gets the same vertices over its own positions, laid out
    for all those tiles at once.
    """
    ids = ref.flat_index()
    if ids.size == 0:
        return PlannedVertices.of([])
    order, r_start, first, tile_of, groups = _tile_layout(
        ids, _checked_tiles(graph, ref, api, tiles)
    )
    t = tile_of.size
    lens = np.zeros((3, t), np.int64)  # per tile: vertices, pieces, positions
    parts: list[tuple] = []  # per group: its columns, tile after tile
    for signature, members in groups.items():
        ks = np.asarray(members, np.int64)
        offsets = np.cumsum((0, *signature))
        template = plan_tile([np.arange(a, b) for a, b in itertools.pairwise(offsets.tolist())])
        local = [p for _, pieces, _ in template for p in pieces]
        at = np.concatenate(local) if local else np.zeros(0, np.int64)
        # each tile's positions the template takes: region j(i) at offset o(i) of it
        j_of = np.searchsorted(offsets, at, side="right") - 1
        m = ks.size
        parts.append((
            ks,
            [c for c, _, _ in template],
            np.tile(np.fromiter((r for *_, r in template), bool, len(template)), m),
            np.tile(np.fromiter((len(p) for _, p, _ in template), np.int64, len(template)), m),
            np.tile(np.fromiter((p.size for p in local), np.int64, len(local)), m),
            (first[ks], j_of, at - offsets[j_of]),  # (see _tile_order)
        ))  # fmt: skip
        lens[:, ks] = np.array([[len(template)], [len(local)], [at.size]])
    # the groups' columns, put back in tile order
    in_groups = np.concatenate([p[0] for p in parts])
    starts = np.zeros((3, t), np.int64)
    starts[:, in_groups] = np.cumsum(lens[:, in_groups], axis=1) - lens[:, in_groups]
    vertex, piece = (_spans(starts[i], lens[i]) for i in range(2))
    # each vertex's class as a position in the groups' templates (no list per vertex)
    templates = np.empty(sum(len(p[1]) for p in parts), object)
    templates[:] = [c for p in parts for c in p[1]]
    firsts = np.cumsum([0] + [len(p[1]) for p in parts[:-1]])
    code = np.concatenate([
        np.tile(np.arange(len(p[1]), dtype=np.int64) + f, p[0].size)
        for p, f in zip(parts, firsts.tolist(), strict=True)
    ])  # fmt: skip
    return PlannedVertices(
        templates[code[vertex]].tolist(),
        np.repeat(tile_of, lens[0]),
        np.concatenate([p[2] for p in parts])[vertex],
        np.concatenate([p[3] for p in parts])[vertex],
        np.concatenate([p[4] for p in parts])[piece],
        _tile_order(parts, lens[2], r_start, order),
    )


def _tile_layout(ids: np.ndarray, tiles: np.ndarray) -> tuple:
    """What :func:`plan_tiles` finds from the elements ``ids`` on ``tiles`` before it
    plans: ``(order, r_start, first, tile_of, groups)``, the positions in id order,
    each region's start in them (regions tile by tile), each tile's first region,
    the tiles and their groups by region sizes (:func:`tile_groups`). Kept a while
    for the same ids array and the same tiles (:class:`_LayoutMemo`): one tensor's
    operations ask again, e.g. a convolution's output for its bias, its ReLU in place
    and the ReLU's gradient."""
    found = _LAYOUTS.get(ids, tiles)
    if found is not None:
        return found
    order, start, end, rtile, by_tile = _regions(ids, tiles)
    r_start, r_size, r_tile = start[by_tile], (end - start)[by_tile], rtile[by_tile]
    first = np.flatnonzero(np.concatenate(([True], r_tile[1:] != r_tile[:-1])))
    count = np.diff(np.append(first, r_tile.size))
    tile_of = r_tile[first].astype(np.int64)
    layout = (order, r_start, first, tile_of, tile_groups(r_size, first, count))
    _LAYOUTS.put(ids, tiles, layout)
    return layout


class _LayoutMemo:
    """:func:`_tile_layout`'s findings for recently planned ids arrays, each dropped
    when its ids array is (a weak reference), at most :attr:`BUDGET` elements in all
    (least recently used dropped first). An entry holds the tiles it was found for,
    read-only (the caller's when read-only, as ``elementTiles(..., readonly=True)``
    gives them, else a copy), and serves only the same tiles (the same array, or
    equal ones): a remap gives other tiles, so other findings."""

    BUDGET = 1 << 22

    def __init__(self) -> None:
        self.entries: dict[int, tuple[weakref.ref, np.ndarray, tuple]] = {}
        self.held = 0

    def get(self, ids: np.ndarray, tiles: np.ndarray) -> tuple | None:
        found = self.entries.get(id(ids))
        if found is None or found[0]() is not ids:
            return None
        held = found[1]
        if held is not tiles and not np.array_equal(held, tiles):
            return None
        del self.entries[id(ids)]
        self.entries[id(ids)] = found  # (the most recently used)
        return found[2]

    def put(self, ids: np.ndarray, tiles: np.ndarray, layout: tuple) -> None:
        if ids.size > self.BUDGET:
            return
        self._drop(id(ids))
        while self.entries and self.held + ids.size > self.BUDGET:
            self._drop(next(iter(self.entries)))
        if tiles.flags.writeable:
            tiles = tiles.copy()
            tiles.flags.writeable = False
        key = id(ids)
        ref = weakref.ref(ids, lambda r, key=key: self._drop(key, r))
        self.entries[key] = (ref, tiles, layout)
        self.held += ids.size

    def _drop(self, key: int, ref: weakref.ref | None = None) -> None:
        found = self.entries.get(key)
        if found is not None and (ref is None or found[0] is ref):
            del self.entries[key]
            self.held -= found[1].size


_LAYOUTS = _LayoutMemo()


def first_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each distinct row of the int matrix ``rows`` first occurs and each row's
    distinct row, as ``np.unique(rows, axis=0, return_index=True,
    return_inverse=True)`` gives them (rows in lexicographic order): rows of
    non-negative ints numbered in that order (``ravel_multi_index``, row-major) and
    the numbers made unique, where numpy compares the rows as records."""
    rows = np.asarray(rows)
    if rows.ndim == 2 and rows.shape[0] and rows.shape[1] and int(rows.min()) >= 0:
        dims = (rows.max(0) + 1).tolist()
        if math.prod(dims) < 1 << 62:
            codes = np.ravel_multi_index(tuple(rows.T), dims)
            _, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
            return first, inverse.reshape(-1)
    _, first, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    return first, inverse.reshape(-1)


def tile_groups(values: np.ndarray, first: np.ndarray, count: np.ndarray) -> dict[tuple, list[int]]:
    """The tiles of each distinct list of regions (tile ``k``'s regions are
    ``values[first[k] : first[k] + count[k]]``; ``values`` holds ints >= 0, one per
    region, or a row of them), lists in order of first use, each tile's in order, keyed
    by the tuple of its regions' values (of their rows' tuples). The tiles' regions as
    rows, padded with -1 to the most regions any tile has and numbered, are grouped by
    one ``unique`` (no tuple made per tile); a few tiles of many regions among many of
    few, whose rows would be far more than the regions, are taken one at a time."""
    t = first.size
    if t == 0:
        return {}
    flat = values.reshape(values.shape[0], -1)
    width = flat.shape[1]
    widest = int(count.max()) if t else 0

    def key_of(f: int, n: int) -> tuple:
        part = values[f : f + n].tolist()
        return tuple(map(tuple, part)) if values.ndim > 1 else tuple(part)

    if widest == 1:  # (one region a tile: the common case)
        rows = flat[first] + 1
    elif t * widest <= 4 * values.shape[0] + 1024:
        rows = np.zeros((t, widest * width), np.int64)  # (0: no region there)
        k = np.repeat(np.arange(t, dtype=np.int64), count)
        at = np.arange(values.shape[0]) - np.repeat(first, count)
        rows.reshape(t, widest, width)[k, at] = flat + 1
    else:
        groups: dict[tuple, list[int]] = {}
        for k, (f, n) in enumerate(zip(first.tolist(), count.tolist(), strict=True)):
            groups.setdefault(key_of(f, n), []).append(k)
        return groups
    firsts, which = first_rows(rows)
    by_group = np.argsort(which.reshape(-1), kind="stable")  # (each group's tiles in order)
    ends = np.cumsum(np.bincount(which.reshape(-1), minlength=firsts.size)).tolist()
    out: dict[tuple, list[int]] = {}
    for g in np.argsort(firsts, kind="stable").tolist():  # in order of first use
        f = int(firsts[g])
        out[key_of(int(first[f]), int(count[f]))] = by_group[
            ends[g - 1] if g else 0 : ends[g]
        ].tolist()
    return out


def _tile_order(
    parts: list[tuple], lens: np.ndarray, r_start: np.ndarray, order: np.ndarray
) -> np.ndarray:
    """The groups' positions tile after tile, written by one compiled pass per group:
    a member tile ``k`` of ``part[0]`` takes ``lens[k]`` positions, position ``i`` of
    its row ``order[r_start[f + j[i]] + o[i]]`` (``part[5]`` is ``(f per member, j,
    o)``: the tile's first region, and the region and offset in it of each position
    the template takes). The template's positions come in runs (consecutive offsets
    in one region), so each member's row is copied run by run from ``order``. No
    array of the positions per group, nor of where each one goes, is made (the
    elements of a large operand, several times over)."""
    out = np.empty(int(lens.sum()), np.int64)
    at = np.cumsum(lens) - lens
    r_start, order = _readonly(r_start), _readonly(order)
    for part in parts:
        firsts, j_of, offsets = part[5]
        if not j_of.size:
            continue
        # the template's runs: where the region changes or the offset does not step by 1
        cut = np.flatnonzero((j_of[1:] != j_of[:-1]) | (offsets[1:] != offsets[:-1] + 1)) + 1
        begin = np.concatenate(([0], cut))
        run = (begin, np.diff(np.append(begin, j_of.size)), j_of[begin], offsets[begin])
        _place_runs(out, _readonly(at[part[0]]), _readonly(firsts), *map(_readonly, run),
                    r_start, order)  # fmt: skip
    return out


@numba.njit(cache=True, nogil=True)
def _place_runs(out, at, firsts, begin, size, j, o, r_start, order):  # pragma: no cover
    """``out[at[m] + begin[q] + i] = order[r_start[firsts[m] + j[q]] + o[q] + i]`` for
    every member ``m``, run ``q`` of the template and ``i < size[q]`` (compiled; the
    indices, all >= 0, as unsigned: Numba tests a signed index for a negative one)."""
    for m in range(at.size):
        s = at[m]
        f = firsts[m]
        for q in range(begin.size):
            dst = np.uint64(s + begin[q])
            src = np.uint64(r_start[np.uint64(f + j[q])] + o[q])
            for i in range(np.uint64(size[q])):
                out[dst + i] = order[src + i]


def add_vertices(
    graph: Graph,
    cs: ComputeSet,
    vertices: Sequence[PlannedVertex] | PlannedVertices,
    operands: dict[str, ElemOperand | ScalarOperand],
) -> None:
    """Add ``vertices`` to ``cs`` in order, each of its class on its tile over its
    pieces of output positions, in one ``addVertices`` call.

    With ``rows`` a vertex's element fields get one vector per piece (a 2-D
    ``VectorList`` field); otherwise its pieces are concatenated into one vector. A
    scalar operand gives each vertex the element ``position_of`` picks for its tile.
    The connections are :class:`~poplar_api.graph.Segments` of one view per operand;
    1-D and 2-D vertices of one op (tiles of one region and of several) go in the same
    call, each 1-D vertex taking one piece.
    """
    if not isinstance(vertices, PlannedVertices):
        vertices = PlannedVertices.of(vertices)
    n = len(vertices.classes)
    if not n:
        return
    tiles, rows, counts = vertices.tiles, vertices.rows, vertices.counts
    sizes, positions = vertices.sizes, vertices.positions
    vectors = counts if rows.any() else None
    if not rows.all():  # a 1-D vertex's pieces make one vector: its one piece
        vertex_of = np.repeat(np.arange(n, dtype=np.int64), counts)
        out_counts = np.where(rows, counts, 1)
        out_first = np.cumsum(out_counts) - out_counts
        joined = np.zeros(int(out_counts.sum()), np.int64)
        joined[out_first[~rows]] = np.bincount(vertex_of, weights=sizes, minlength=n)[~rows]
        listed = rows[vertex_of]  # the pieces of 2-D vertices, each a vector
        first = np.cumsum(counts) - counts
        at = out_first[vertex_of] + np.arange(sizes.size) - first[vertex_of]
        joined[at[listed]] = sizes[listed]
        sizes = joined
        vectors = out_counts if rows.any() else None
    connections: dict[str, object] = {}
    for field, op in operands.items():
        if isinstance(op, ScalarOperand):
            connections[field] = op.tensor.elements(op.position_of(tiles))
        else:
            connections[field] = Segments(op.flat.elements(positions), sizes, vectors)
    graph.addVertices(cs, vertices.classes, tiles, connections)


def add_vertex(
    graph: Graph,
    cs: ComputeSet,
    tile: int,
    vertex_class: type,
    pieces: list[np.ndarray],
    operands: dict[str, ElemOperand | ScalarOperand],
    rows: bool,
) -> None:
    """Add one vertex of ``vertex_class`` on ``tile`` (this graph's numbering) over
    ``pieces``, as :func:`add_vertices` does; use that for many vertices."""
    connections: dict[str, object] = {}
    flat = np.concatenate(pieces) if len(pieces) > 1 else pieces[0]
    for field, op in operands.items():
        if isinstance(op, ScalarOperand):
            connections[field] = op.tensor.elements(op.position_of(np.array([tile])))
        elif rows:
            connections[field] = [op.flat.elements(p) for p in pieces]
        else:
            connections[field] = op.flat.elements(flat)
    graph.setTileMapping(graph.addVertex(cs, vertex_class, connections), int(tile))


def per_tile_constant(
    graph: Graph, t: Type, value: object, tiles: np.ndarray, name: str
) -> ScalarOperand:
    """A constant holding ``value`` once on each of ``tiles`` (the graph's numbering),
    as a :class:`ScalarOperand` that gives each tile its own copy."""
    unique = np.unique(tiles)
    const = graph.addConstant(t, [unique.size], value, name)
    graph.mapElements(const, unique)
    return ScalarOperand(t, const, lambda at: np.searchsorted(unique, at), name)
