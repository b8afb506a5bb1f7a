"""Regrouping a tensor to another tensor's grouping with transpose vertices.

Restates ``popops::rearrange`` of graphcore/poplibs at ``7eac0f26``
(``lib/popops/Rearrange.cpp``, ``include/popops/Rearrange.hpp``):

* :func:`detectDimGroupings` (``poputil::detectDimGroupings``,
  ``lib/poputil/VarStructure.cpp``): the groupings of a tensor's dimensions, innermost
  first, each found by ``detectInnermostGrouping`` of the dimension rolled innermost;
* :func:`regroupIfBeneficial`: when both tensors have a grouping, their innermost
  groupings are of different dimensions and both are multiples of the minimum regroup
  grain (``getMinimumRegroupGrainSize``: 4 for 2-byte, 2 for 4-byte types), ``in_`` is
  copied into a new tensor whose every ``to x from`` block is one transposition
  (``regroupTensorInternal``) and a compute set of transpose vertices makes the copy
  grouped as ``ref`` (``partialTranspose`` / ``addTransposeVertices``).

The transpositions are first split into smaller ones when that lets faster vertices run
(``updateGroupingInternal``), then dealt evenly over all tiles of the IPU holding each
one's first element, from a start tile hashed from the shape and groupings; on each
tile the vertex is chosen as ``addTransposeVertices`` chooses it: ``Transpose1D``
(a multi-vertex), ``Transpose1DSingleWorker`` (up to four 4x4 blocks) or
``SplitTranspose1D`` (fewer transpositions than workers, dividing them) for 2-byte types
whose blocks are multiples of 4 (``canUseFastTranspose``), else the tile's
transpositions split over the workers, each a ``Transpose1DSingleWorker`` or a
``Transpose2D``. The cycle estimates are Poplibs' (``popopsCycleEstimators.cpp`` at
``18ee6463^``, the last commit holding them before they moved into Poplar:
``Transpose2D``, ``TransposeWorkerCycles``, ``Transpose1D``, ``SplitTranspose1D``).

Differences kept: every vertex holds its matrices as one vector and its sizes as
``numSrcRows`` / ``numSrcColumns`` (Poplar's runtime vertices take sizes over 4 and a
work list); pointer unpacking is costed as none (the vectors' layouts are Poplar's);
the start tile uses Boost's 64-bit ``hash_combine`` of the 1.7x releases; when nothing
is regrouped no empty compute set is added.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np

from poplar_api.codelet import Input, MultiVertex, Output, Vector, Vertex
from poplar_api.errors import GraphError, TensorError
from poplar_api.graph import Graph, Segments
from poplar_api.popops.layout import _spans
from poplar_api.program import Copy, Execute, Sequence
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT, Type
from poplar_api.vertices import UNMAPPED

__all__ = [
    "addTransposeVertices",
    "canUseFastTranspose",
    "detectDimGroupings",
    "detectInnermostGrouping",
    "getMinimumRegroupGrainSize",
    "regroupIfBeneficial",
    "regroupTensor",
    "transpose_cycles",
]

#: Types the transpose vertices take (``getValidTransposeDataTypes``; ipusim has no
#: QUARTER, SHORT nor UNSIGNED_SHORT).
TRANSPOSE_TYPES = (HALF, FLOAT, UNSIGNED_INT, INT)
#: Mk1/Mk2 stride fields are 10 bits (``target.getNumStrideBits()``).
NUM_STRIDE_BITS = 10
#: ``target.getRptCountMax()`` (``CSR_W_REPEAT_COUNT`` holds 12 bits).
RPT_COUNT_MAX = 4095

GroupingInfo = tuple[int, int]


def getMinimumRegroupGrainSize(t: Type) -> int:
    """The smallest grouping worth regrouping: 4 for 2-byte, 2 for 4-byte types, else 1."""
    return {2: 4, 4: 2}.get(t.size, 1)


def detectInnermostGrouping(graph: Graph, t: Tensor) -> int:
    """``poputil::detectInnermostGrouping`` (``lib/poputil/VarStructure.cpp``).

    Along the innermost dimension of ``t``'s first row: the longest prefix whose
    elements are consecutive in memory, and the longest run of the row on one tile;
    their greatest common divisor, or 1 when it does not divide the row's length.
    """
    if t.rank() == 0:
        raise ValueError("detectInnermostGrouping: a 0-rank tensor has no grouping")
    if t.numElements() == 0:
        return 1
    row = t
    while row.rank() != 1:
        row = row[0]
    n = row.numElements()
    breaks = np.flatnonzero(np.diff(row.flat_index()) != 1)
    contiguous = int(breaks[0]) + 1 if breaks.size else n
    tiles = graph.elementTiles(row)
    if (tiles == UNMAPPED).any():
        graph.getTileMapping(row)  # raises, naming the first element not mapped
    # the longest stretch of the row on one of this graph's tiles (getTileMapping's
    # longest interval, without making the intervals)
    cuts = np.flatnonzero(tiles[1:] != tiles[:-1]) + 1
    starts = np.concatenate(([0], cuts))
    lengths = np.diff(np.append(starts, n))
    inside = tiles[starts] >= 0
    longest = int(lengths[inside].max()) if inside.any() else 0
    grouping = math.gcd(int(longest), contiguous)
    return grouping if grouping and n % grouping == 0 else 1


def detectDimGroupings(graph: Graph, t: Tensor) -> list[GroupingInfo]:
    """``poputil::detectDimGroupings``: ``(dimension, grouping)`` pairs, innermost first.

    Each round tries every non-singular dimension rolled innermost (with the groupings
    found so far behind it), keeps the largest grouping over those already found, and
    rolls it to the back for the next round; it stops when none is above 1.
    """
    info: list[GroupingInfo] = []
    dims = t.rank()
    grouped = t
    total = 1
    while True:
        grouping, grouped_dim = 1, 0
        for d in range(dims):
            if grouped.dim(d) == 1:
                continue
            perm = grouped.dimRoll(d, dims - 1).flatten(dims - 1, grouped.rank())
            g = detectInnermostGrouping(graph, perm)
            this = 1 if g % total else g // total
            this = math.gcd(this, grouped.dim(d))
            if this > grouping:
                grouped_dim, grouping = d, this
        if grouping == 1:
            return info
        info.append((grouped_dim, grouping))
        total *= grouping
        n = grouped.dim(grouped_dim)
        grouped = grouped.reshapePartial(
            grouped_dim, grouped_dim + 1, [n // grouping, grouping]
        ).dimRoll(grouped_dim + 1, dims)


def _group(t: Tensor, *groupings: GroupingInfo) -> Tensor:
    """``groupTensor``: each grouping split off its dimension and rolled to the back."""
    rank = t.rank()
    for d, g in groupings:
        t = t.reshapePartial(d, d + 1, [t.dim(d) // g, g]).dimRoll(d + 1, rank)
        rank += 1
    return t


def _ungroup(t: Tensor, *groupings: GroupingInfo) -> Tensor:
    """``ungroupTensor``: the inverse of :func:`_group` for the same groupings."""
    rank = t.rank() - len(groupings)
    for d, _ in groupings:
        t = t.dimRoll(rank, d + 1).flatten(d, d + 2)
    return t


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _negative_stride(n: int) -> int:
    return n // 4 * 3 - 1


def _max_stride() -> int:
    return 1 << (NUM_STRIDE_BITS - 1)


def canUseFastTranspose(t: Type, rows: int, cols: int, count: int) -> bool:
    """``canUseFastTranspose``: whether the 2-byte 4x4-block vertices can do ``count``
    transpositions of ``rows x cols``."""
    if t.size != 2 or count > 0xFFFF or rows % 4 or cols % 4:
        return False
    upper = _max_stride()
    if rows == 4 and cols == 4:
        return not (count >= 2 and count - 2 > RPT_COUNT_MAX)
    if cols == 4:
        return not ((rows >= 8 and rows // 4 - 2 > RPT_COUNT_MAX) or _negative_stride(rows) > upper)
    return not (
        (cols >= 8 and cols // 4 - 2 > RPT_COUNT_MAX)
        or _negative_stride(cols) > upper
        or rows // 4 >= upper
    )


def _updated_groupings(
    graph: Graph, t: Tensor, frm: GroupingInfo, to: GroupingInfo
) -> tuple[GroupingInfo, GroupingInfo]:
    """``updateGroupingInternal``: split the groupings when more, smaller transpositions
    let faster vertices run, up to the workers' count per tile."""
    target = graph.getTarget()
    tiles_per_ipu, workers = target.getTilesPerIPU(), target.getNumWorkerContexts()
    g = getMinimumRegroupGrainSize(t.elementType())
    block = to[1] * frm[1]
    ipu = graph.elementTiles(t) // tiles_per_ipu
    most = int(np.bincount(ipu).max()) if ipu.size else 0
    additional = block // (g * g)
    allowed = tiles_per_ipu * min(
        -(-_negative_stride(max(to[1], frm[1])) // _max_stride()), workers
    )
    estimate = -(-most // block)
    factor = 1
    if to[1] % g == 0 and frm[1] % g == 0:
        best = None
        for x in (x for x in range(1, additional + 1) if additional % x == 0):
            if estimate * x > allowed:
                break
            cost = (additional // x) * _ceil(_ceil(estimate * x, tiles_per_ipu), workers)
            if best is None or cost < best:
                best, factor = cost, x
    if factor == 1:
        return frm, to
    f_from = math.gcd(factor, frm[1] // g)
    factor //= f_from
    f_to = math.gcd(factor, to[1] // g)
    return (frm[0], frm[1] // f_from), (to[0], to[1] // f_to)


_MASK = (1 << 64) - 1


def _hash_combine(seed: int, value: int) -> int:
    """Boost 1.7x ``hash_combine`` for a 64-bit ``size_t`` (MurmurHash2's mix)."""
    m = 0xC6A4A7935BD1E995
    k = (value * m) & _MASK
    k ^= k >> 47
    k = (k * m) & _MASK
    seed ^= k
    seed = (seed * m) & _MASK
    return (seed + 0xE6546B64) & _MASK


def _hash_of(values: list[int]) -> int:
    seed = 0
    for v in values:
        seed = _hash_combine(seed, v)
    return seed


def _start_tile(shape: list[int], frm: GroupingInfo, to: GroupingInfo, tiles: int) -> int:
    seed = 0x9E3779B9
    for part in (list(shape), list(frm), list(to)):
        seed = _hash_combine(seed, _hash_of(part))
    return seed % tiles


def regroupTensor(
    graph: Graph, t: Tensor, prog: Sequence, frm: GroupingInfo, to: GroupingInfo, name: str
) -> Tensor:
    """``regroupTensor``: a copy of ``t`` grouped by ``to`` where ``t`` is by ``frm``.

    Appends the ``Copy`` into the transposition blocks and the ``Execute`` of the
    transpose compute set to ``prog``; returns the regrouped copy (shape of ``t``).
    """
    if t.elementType() not in TRANSPOSE_TYPES:
        raise TensorError(
            f"popops.rearrange.regroupTensor: tensor '{t.name}' is {t.elementType().name}; "
            f"transposes take {', '.join(x.name for x in TRANSPOSE_TYPES)}"
        )
    for what, (d, g) in (("from", frm), ("to", to)):
        if not 0 <= d < t.rank() or t.dim(d) % g:
            raise TensorError(
                f"popops.rearrange.regroupTensor: grouping '{what}' ({d}, {g}) does not "
                f"divide a dimension of '{t.name}' {t.shape()}; it must name a dimension "
                "whose size it divides"
            )
    frm_u, to_u = _updated_groupings(graph, t, frm, to)
    grouped = _group(t, to_u, frm_u)
    rows, cols = to_u[1], frm_u[1]
    block = rows * cols
    n = t.numElements() // block
    target = graph.getTarget()
    tiles_per_ipu = target.getTilesPerIPU()
    # each transposition on the IPU of its first element, dealt evenly over its tiles
    first_tiles = graph.elementTiles(grouped.flatten())[::block] if n else np.zeros(0, np.int64)
    ipu = first_tiles // tiles_per_ipu
    start = _start_tile(t.shape(), frm, to, tiles_per_ipu)
    tile_of = np.empty(n, np.int64)
    for i in np.unique(ipu).tolist():
        rows_i = np.flatnonzero(ipu == i)
        per = -(-rows_i.size // tiles_per_ipu)
        tile_of[rows_i] = (
            i * tiles_per_ipu + (np.arange(rows_i.size) // per + start) % tiles_per_ipu
        )
    pre = graph.addVariable(t.elementType(), grouped.shape(), f"{name}/preRegroup")
    graph.mapElements(pre, np.repeat(tile_of, block).reshape(pre.shape()))
    out_shape = [*grouped.shape()[:-2], cols, rows]
    out = graph.addVariable(t.elementType(), out_shape, f"{name}/partialTranspose")
    graph.mapElements(out, np.repeat(tile_of, block).reshape(out_shape))
    prog.add(Copy(grouped, pre))
    cs = graph.addComputeSet(f"{name}/Transpose")
    addTransposeVertices(graph, cs, t.elementType(), rows, cols, tile_of, pre, out, name)
    prog.add(Execute(cs))
    return _ungroup(out, frm_u, to_u)


def regroupIfBeneficial(
    graph: Graph, in_: Tensor, ref: Tensor, prog: Sequence, debugName: str = ""
) -> Tensor:
    """``in_`` regrouped as ``ref`` when Poplibs finds it beneficial, else ``in_``.

    Regroups when both tensors have rank above 1, ``in_``'s type has transpose vertices,
    both have a detected grouping, their innermost groupings are of different
    dimensions and both are multiples of :func:`getMinimumRegroupGrainSize`.
    """
    if not isinstance(graph, Graph) or not isinstance(in_, Tensor) or not isinstance(ref, Tensor):
        raise GraphError(
            "popops.rearrange.regroupIfBeneficial: expected (Graph, Tensor, Tensor, Sequence)"
        )
    if in_.rank() <= 1 or ref.rank() <= 1 or in_.elementType() not in TRANSPOSE_TYPES:
        return in_
    if in_.shape() != ref.shape():
        raise TensorError(
            f"popops.rearrange.regroupIfBeneficial: input '{in_.name}' {in_.shape()} and "
            f"reference '{ref.name}' {ref.shape()} must have the same shape"
        )
    frm = detectDimGroupings(graph, in_)
    to = detectDimGroupings(graph, ref)
    g = getMinimumRegroupGrainSize(in_.elementType())
    if frm and to and frm[0][0] != to[0][0] and frm[0][1] % g == 0 and to[0][1] % g == 0:
        return regroupTensor(graph, in_, prog, frm[0], to[0], debugName or "regroup")
    return in_


# ------------------------------------------------------------------- vertices
def _worker_cycles(rows4: int, cols4: int, matrices: int, split: bool) -> int:
    """``TransposeWorkerCycles`` (2-byte 4x4-block worker; no pointer unpacking)."""
    if rows4 == 1 and cols4 == 1:
        return 17 + 12 if matrices == 1 else 17 + 20 + (matrices - 2) * 4
    if cols4 == 1:
        if split:
            return 25 + 20 + 4 * (rows4 - 2)
        return 27 + matrices * (15 + 20 + 4 * (rows4 - 2))
    if split:
        return 27 + rows4 * (12 + 4 * (cols4 - 2))
    return 29 + matrices * (18 + rows4 * (12 + 4 * (cols4 - 2)))


def _transpose_2d_cycles(t: Type, rows: int, cols: int, matrices: int) -> int:
    """``Transpose2D``'s estimate (thread cycles)."""
    rpt = 0x0FFF + 1
    if t.size == 4:
        if (
            rows % 2 == 0
            and cols % 2 == 0
            and cols // 2 < rpt
            and rows * (cols - 2) // 2 < 512
            and rows < 512
        ):
            return 27 + matrices * (11 + (rows // 2) * (6 + 3 * (cols // 2 - 1)))
        return 13 + matrices * (8 + cols * (5 + (rows * 4) // 2))
    if (
        rows % 4 == 0
        and cols % 4 == 0
        and cols >= 8
        and cols // 4 < rpt
        and 1 + 3 * (cols // 4) < 512
    ):
        return 39 + matrices * (12 + (rows // 4) * (15 + 4 * (cols // 4 - 2)))
    if rows % 4 == 0 and cols == 4 and rows // 4 < rpt and 1 + 3 * (rows // 4) < 512:
        return 34 + 15 * matrices if rows == 4 else 30 + matrices * (17 + 20 + 4 * (rows // 4 - 2))
    return 15 + matrices * (8 + cols * (5 + (rows * 5) // 2))


def transpose_cycles(kind: str, t: Type, rows: int, cols: int, matrices: int, workers: int) -> int:
    """Poplibs' estimate of one transpose vertex of ``kind`` over ``matrices``
    transpositions of ``rows x cols`` (the tile's count for the multi-vertices)."""
    if kind == "Transpose2D":
        return _transpose_2d_cycles(t, rows, cols, matrices)
    if kind == "Transpose1DSingleWorker":
        return _worker_cycles(rows // 4, cols // 4, matrices, False)
    if kind == "Transpose1D":
        per = 1 if matrices <= workers else -(-matrices // workers)
        return 7 + workers * (_worker_cycles(rows // 4, cols // 4, per, False) - 7)
    if kind == "SplitTranspose1D":
        rows_b, cols_b = rows // 4, cols // 4
        per_matrix = workers // matrices
        rows_w = -(-rows_b // per_matrix)
        cols_w = -(-cols_b // (per_matrix // -(-rows_b // rows_w)))
        return 7 + workers * (_worker_cycles(min(rows_b, rows_w), min(cols_b, cols_w), 1, True) - 7)
    raise ValueError(f"transpose_cycles: unknown vertex kind {kind!r}")


class _Transpose:
    """Transpose each ``numSrcRows x numSrcColumns`` matrix of ``src`` into ``dst``."""

    @classmethod
    def computeBatch(cls, batches: dict[str, Any], num_vertices: int, num_workers: int) -> None:
        src, dst = batches["src"], batches["dst"]
        rows = batches["numSrcRows"].data[batches["numSrcRows"].offsets[:-1]].astype(np.int64)
        cols = batches["numSrcColumns"].data[batches["numSrcColumns"].offsets[:-1]].astype(np.int64)
        lengths = np.diff(src.offsets)
        v = np.repeat(np.arange(lengths.size), lengths)
        e = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(src.offsets[:-1], lengths)
        r, c, block = rows[v], cols[v], (rows * cols)[v]
        m, within = e // block, e % block
        i, j = within // c, within % c
        dst.data[dst.offsets[v] + m * block + j * r + i] = src.data[src.offsets[v] + e]


@cache
def _vertex_class(kind: str, t: Type) -> type:
    base = MultiVertex if kind in ("Transpose1D", "SplitTranspose1D") else Vertex
    attrs: dict[str, Any] = {
        "typeName": f"poplar_rt::{kind}<{t.name.lower()}>",
        "__doc__": f"{kind}: " + (_Transpose.__doc__ or ""),
        "__module__": __name__,
        "src": Input(Vector(t)),
        "dst": Output(Vector(t)),
        "numSrcRows": Input(UNSIGNED_INT),
        "numSrcColumns": Input(UNSIGNED_INT),
    }
    return type(f"{kind}_{t.name}", (_Transpose, base), attrs)


def _per_count(counts: np.ndarray, f: Any) -> np.ndarray:
    """``f(count)`` for each of ``counts``, called once per distinct count."""
    distinct, at = np.unique(counts, return_inverse=True)
    return np.array([f(int(c)) for c in distinct], np.int64)[at.reshape(-1)]


def addTransposeVertices(
    graph: Graph,
    cs: Any,
    t: Type,
    rows: int,
    cols: int,
    tile_of: np.ndarray,
    pre: Tensor,
    out: Tensor,
    name: str,
) -> None:
    """``addTransposeVertices``: the vertices of every tile's run of transpositions."""
    workers = graph.getTarget().getNumWorkerContexts()
    change = np.flatnonzero(np.r_[True, tile_of[1:] != tile_of[:-1]])
    counts = np.diff(np.r_[change, tile_of.size])
    tiles = tile_of[change]
    fast = _per_count(counts, lambda c: canUseFastTranspose(t, rows, cols, c)).astype(bool)
    # fast tiles: one vertex of all the tile's transpositions
    kinds = np.full(counts.size, "Transpose1D", object)
    if rows == 4 and cols == 4:
        kinds[fast & (counts <= 4)] = "Transpose1DSingleWorker"
    split = (
        fast
        & (kinds == "Transpose1D")
        & (counts < workers)
        & (workers % np.maximum(counts, 1) == 0)
    )
    kinds[split] = "SplitTranspose1D"
    v_first, v_count, v_tile, v_kind = [change[fast]], [counts[fast]], [tiles[fast]], [kinds[fast]]
    # the other tiles: their transpositions split over the workers
    slow = np.flatnonzero(~fast)
    if slow.size:
        per = -(-counts[slow] // workers)
        pieces = -(-counts[slow] // per)
        owner = np.repeat(slow, pieces)
        k = np.arange(int(pieces.sum())) - np.repeat(np.cumsum(pieces) - pieces, pieces)
        size = np.minimum(np.repeat(per, pieces), counts[owner] - k * np.repeat(per, pieces))
        v_first.append(change[owner] + k * np.repeat(per, pieces))
        v_count.append(size)
        v_tile.append(tiles[owner])
        worker_fast = _per_count(size, lambda c: canUseFastTranspose(t, rows, cols, c)).astype(bool)
        v_kind.append(np.where(worker_fast, "Transpose1DSingleWorker", "Transpose2D"))
    first = np.concatenate(v_first)
    count = np.concatenate(v_count)
    vtile = np.concatenate(v_tile)
    vkind = np.concatenate(v_kind)
    block = rows * cols
    pre_flat, out_flat = pre.flatten(), out.flatten()
    for kind in dict.fromkeys(vkind.tolist()):
        sel = np.flatnonzero(vkind == kind)
        f, c, tl = first[sel], count[sel], vtile[sel]
        positions = _spans(f * block, c * block)
        est = _per_count(c, lambda x, k=kind: transpose_cycles(k, t, rows, cols, x, workers))
        conn: dict[str, Any] = {
            "src": Segments(pre_flat.elements(positions), c * block),
            "dst": Segments(out_flat.elements(positions), c * block),
        }
        for field, value in (("numSrcRows", rows), ("numSrcColumns", cols)):
            const = graph.addConstant(
                UNSIGNED_INT, [sel.size], np.full(sel.size, value), f"{name}/{field}"
            )
            graph.mapElements(const, tl)
            conn[field] = const
        graph.addVertices(cs, _vertex_class(kind, t), tl, conn, perfEstimates=est)
