"""``popops::dynamicSlice`` and ``dynamicUpdate``: read or write a slice of a tensor at
an offset held in a tensor, so one program serves every offset (a counter-addressed
buffer, as PopART's pipeline stash, needs no program per slot).

Restated from graphcore/poplibs 7eac0f26, ``lib/popops/DynamicSlice.cpp``:

* ``createSliceableTensorFromSlice``: the base tensor holds ``numSlices`` copies of the
  slice, each element's copies on the slice element's tile; on a tile the copies of one
  contiguous region of the slice lie one after another
  (``cloneN(..., DUPLICATE_BY_TILE_CONTIGUOUS_REGION)``).
* ``dynamicSlice``: the output is a clone of the first slice (``slice``: ``graph.clone``)
  and one compute set copies into it; ``dynamicUpdate`` writes the slice back with one
  compute set. Both make their vertices in ``generateVertices``: the sliced dimension
  is rolled to the front (``t2d[numBaseElements][]``, ``s2d[numSubElements][]``) and the
  vertices follow the tile mapping of the base's first slice. A tile holding one
  contiguous region whose base elements are contiguous gets one ``DynamicSlice1D`` /
  ``DynamicUpdateSlice1D`` multi-vertex; any other tile gets ``...2D`` worker vertices
  over its regions split between the workers (``splitRegionsBetweenWorkers``, grain
  the vector width, at least two grains per worker).
* The vertices read the offset from a one-element tensor (exchanged to every tile);
  an offset at or beyond ``numBaseElements`` makes the vertex do nothing (the
  ``remapOutOfBoundIndices`` option is off by default); the rows past the offset wrap
  round to row 0 (``codelets/DynamicSlice1D.cpp``, ``DynamicSlice2D.cpp``).
* Cycle estimates: ``popopsCycleEstimators.cpp``, ``getDynamicSlice1DEstimate`` and
  the ``DynamicSlice2D`` / ``DynamicUpdateSlice2D`` estimators, set per vertex.

Vertex state that Poplar holds as ``const unsigned`` fields (``numBaseElements``,
``numSubElements``, ``regionSize`` / ``numRegions``) is connected here as one-element
constants on the vertex's tile, under the same names. Only one sliced dimension per call
is modelled (Poplibs slices several one after another).
"""

from __future__ import annotations

from collections.abc import Sequence as SequenceT
from typing import Any

import numba
import numpy as np

from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph import Graph, Segments
from poplar_api.graph_connections import RunSegments
from poplar_api.library_checks import check_graph
from poplar_api.popops.layout import (
    UINT_MAX,
    _checked_tiles,
    _readonly,
    _regions,
    _spans,
    split_regions,
)
from poplar_api.poputil import cloneTensor
from poplar_api.program import Execute, Sequence
from poplar_api.run_ids import MIN_ELEMENTS_PER_RUN, RunIds
from poplar_api.tensor import Tensor
from poplar_api.types import HALF, UNSIGNED_INT, Type

__all__ = [
    "createSliceableTensorFromSlice",
    "dynamicSlice",
    "dynamicUpdate",
    "slice_1d_estimate",
    "slice_2d_estimate",
]

#: An empty int64 array: the kernels' outputs when they only count.
_NONE = np.empty(0, np.int64)

#: ``basicOpSupervisorOverhead()`` (``PerformanceEstimation.cpp``, no ScaledPtr64 fields).
_SUPERVISOR_OVERHEAD = 11


def _vector_width(graph: Graph, t: Type) -> int:
    """Elements per 64-bit load in the estimators: 4 for 8-bit types, else
    ``dataPathWidth / (16 or 32)``."""
    if t.size == 1:
        return 4
    return graph.getTarget().getDataPathWidth() // (16 if t == HALF else 32)


def slice_1d_estimate(
    region_size: np.ndarray, num_sub: int, workers: int, vector_width: int, eight_bit: bool
) -> np.ndarray:
    """``getDynamicSlice1DEstimate`` (tile cycles of one ``DynamicSlice1D`` or
    ``DynamicUpdateSlice1D``): the supervisor's 11 + 14 cycles, then per worker
    ``39 + (24 + 2 * copies) * numSubElements`` (8-bit: ``76 + (72 + ...)``), where a
    worker copies ``ceil(regionSize / workers)`` elements ``vector_width`` at a time."""
    per_worker = -(-np.asarray(region_size, np.int64) // workers)
    copies = per_worker // vector_width
    fixed, per_row = (76, 72) if eight_bit else (39, 24)
    worker = fixed + (per_row + 2 * copies) * num_sub
    return _SUPERVISOR_OVERHEAD + 1 + 6 + 1 + 6 + worker * workers


def slice_2d_estimate(
    piece_sizes: np.ndarray,
    piece_vertex: np.ndarray,
    num_vertices: int,
    num_sub: int,
    vector_width: int,
    t: Type,
    update: bool,
) -> np.ndarray:
    """The ``DynamicSlice2D`` / ``DynamicUpdateSlice2D`` estimators (thread cycles per
    vertex): 27, plus per region ``(29 + vectors) * numSubElements + 13`` (half:
    ``31 + 2 * vectors``; 8-bit: ``50 + 2 * vectors``, or ``50 + 23 * vectors`` when
    updating), ``vectors = ceil(regionSize / vector_width)``."""
    vectors = -(-np.asarray(piece_sizes, np.int64) // vector_width)
    if t.size == 1:
        per = (50 + (23 if update else 2) * vectors) * num_sub + 13
    elif t == HALF:
        per = (31 + 2 * vectors) * num_sub + 13
    else:
        per = (29 + vectors) * num_sub + 13
    sums = np.bincount(piece_vertex, weights=per, minlength=num_vertices)
    return 27 + sums.astype(np.int64)


# --------------------------------------------------------------------- vertices
def _scalars(batch: Any) -> np.ndarray:
    """Each vertex's value of a one-element field."""
    return batch.data[batch.offsets[:-1]].astype(np.int64)


def _fields(batches: dict, last: str) -> tuple:
    """``baseT``, ``subT``, each vertex's offset, ``numBaseElements``,
    ``numSubElements`` and ``last``, and which vertices copy (offset in range)."""
    off, nb = _scalars(batches["offset"]), _scalars(batches["numBaseElements"])
    ns, extra = _scalars(batches["numSubElements"]), _scalars(batches[last])
    return batches["baseT"], batches["subT"], off, nb, ns, extra, off < nb


def _copy(src: np.ndarray, src_at: np.ndarray, dst: np.ndarray, dst_at: np.ndarray) -> None:
    dst[dst_at] = src[src_at]


class _Slice1D(MultiVertex):
    """Copy rows ``offset, offset + 1, ...`` (wrapping) of ``baseT`` to ``subT`` (or
    ``subT`` into those rows when ``update``); rows are ``regionSize`` long."""

    update = False

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        base, sub, off, nb, ns, rs, go = _fields(batches, "regionSize")
        if not go.any():
            return
        n = (ns * rs)[go]
        v = np.repeat(np.flatnonzero(go), n)
        e = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
        row, col = e // rs[v], e % rs[v]
        base_at = base.offsets[v] + ((off[v] + row) % nb[v]) * rs[v] + col
        sub_at = sub.offsets[v] + e
        if cls.update:
            _copy(sub.data, sub_at, base.data, base_at)
        else:
            _copy(base.data, base_at, sub.data, sub_at)


class _Slice2D(Vertex):
    """Per region, the rows of :class:`_Slice1D`; ``baseT`` holds ``numBaseElements``
    vectors per region, ``subT`` ``numSubElements``."""

    update = False

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        base, sub, off, nb, ns, nr, go = _fields(batches, "numRegions")
        if not go.any():
            return
        pairs = (nr * ns)[go]  # (region, sub row) pairs of each vertex
        v = np.repeat(np.flatnonzero(go), pairs)
        k = np.arange(int(pairs.sum()), dtype=np.int64) - np.repeat(np.cumsum(pairs) - pairs, pairs)
        region, j = k // ns[v], k % ns[v]
        src_vec = base.offsets[v] + region * nb[v] + (off[v] + j) % nb[v]
        dst_vec = sub.offsets[v] + region * ns[v] + j
        lengths = sub.inner_offsets[dst_vec + 1] - sub.inner_offsets[dst_vec]
        base_at = _spans(base.inner_offsets[src_vec], lengths)
        sub_at = _spans(sub.inner_offsets[dst_vec], lengths)
        if cls.update:
            _copy(sub.data, sub_at, base.data, base_at)
        else:
            _copy(base.data, base_at, sub.data, sub_at)


_CLASSES: dict[tuple[Type, str, bool], type] = {}


def _vertex_class(t: Type, layout: str, update: bool) -> type:
    """``popops::Dynamic[Update]Slice{1D,2D}<t>``."""
    key = (t, layout, update)
    cls = _CLASSES.get(key)
    if cls is None:
        kind = "DynamicUpdateSlice" if update else "DynamicSlice"
        shape = Vector(t) if layout == "1D" else VectorList(t)
        attrs: dict[str, Any] = {
            "typeName": f"popops::{kind}{layout}<{t.name}>",
            "__doc__": f"{kind}{layout}: copy a slice at a runtime offset.",
            "__module__": __name__,
            "update": update,
            "offset": Input(UNSIGNED_INT),
            "baseT": (InOut if update else Input)(shape),
            "subT": (Input if update else Output)(shape),
            "numBaseElements": Input(UNSIGNED_INT),
            "numSubElements": Input(UNSIGNED_INT),
            ("regionSize" if layout == "1D" else "numRegions"): Input(UNSIGNED_INT),
        }
        base = _Slice1D if layout == "1D" else _Slice2D
        cls = type(f"{kind}{layout}_{t.constant}", (base,), attrs)
        _CLASSES[key] = cls
    return cls


# ------------------------------------------------------------------ arguments
def _tensor(graph: Graph, t: Any, api: str, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise GraphError(f"popops.{api}: {what} must be a Tensor, got {type(t).__name__}")
    return graph.checkTensor(t, f"popops.{api} {what}")


def _one_dim(
    t: Tensor, dims: SequenceT[int], sizes: SequenceT[int], api: str, what: str
) -> tuple[int, int]:
    """The one sliced dimension and its slice size, checked against ``t``."""
    dims, sizes = [int(d) for d in dims], [int(s) for s in sizes]
    if len(dims) != 1 or len(sizes) != 1:
        raise GraphError(
            f"popops.{api}: dims {dims} and sizes {sizes} must name exactly one dimension "
            "each (slicing several dimensions at once is not modelled); hint: slice one "
            "dimension per call"
        )
    d, n = dims[0], sizes[0]
    if not 0 <= d < t.rank():
        raise TensorError(
            f"popops.{api}: dimension {d} is out of range for {what} '{t.name}' of shape "
            f"{t.shape()}"
        )
    if not 1 <= n <= t.dim(d):
        raise TensorError(
            f"popops.{api}: slice size {n} must be between 1 and {what} '{t.name}''s "
            f"dimension {d} ({t.dim(d)})"
        )
    return d, n


def _offset(graph: Graph, offset: Any, api: str) -> Tensor:
    offset = _tensor(graph, offset, api, "offset")
    if offset.numElements() != 1 or offset.elementType() != UNSIGNED_INT:
        raise TypeMismatchError(
            f"popops.{api}: offset '{offset.name}' must be one UNSIGNED_INT element, got "
            f"{offset.numElements()} {offset.elementType().name} element(s) (shape "
            f"{offset.shape()}); hint: graph.addVariable(UNSIGNED_INT, [1])"
        )
    return offset.flatten()


def _prog(prog: Any, api: str) -> Sequence:
    if not isinstance(prog, Sequence):
        raise GraphError(f"popops.{api}: prog must be a Sequence, got {type(prog).__name__}")
    return prog


def _two_d(t: Tensor, dim: int) -> Tensor:
    """``t`` with ``dim`` first and the others collapsed: ``[t.dim(dim), rest]``."""
    rolled = t.dimRoll(dim, 0)
    return rolled.reshape([t.dim(dim), t.numElements() // t.dim(dim)])


# ------------------------------------------------------------------ functions
def createSliceableTensorFromSlice(
    graph: Graph,
    s: Tensor,
    dims: SequenceT[int],
    numSlices: SequenceT[int],
    debugContext: str = "",
) -> Tensor:
    """A tensor of ``numSlices`` copies of ``s`` along ``dims`` (its shape is ``s``'s
    with that dimension multiplied), each copy of an element on the element's tile, the
    copies of one contiguous region of ``s`` one after another on its tile."""
    api = "createSliceableTensorFromSlice"
    graph = check_graph(graph, f"popops.{api}")
    s = _tensor(graph, s, api, "s")
    dims, numSlices = [int(d) for d in dims], [int(n) for n in numSlices]
    if len(dims) != 1 or len(numSlices) != 1 or numSlices[0] < 1:
        raise GraphError(
            f"popops.{api}: dims {dims} and numSlices {numSlices} must name one dimension "
            "and a count >= 1 (several dimensions are not modelled)"
        )
    d, copies = dims[0], numSlices[0]
    if not 0 <= d < s.rank():
        raise TensorError(f"popops.{api}: dimension {d} is out of range for shape {s.shape()}")
    flat = s.flatten()
    m = flat.numElements()
    var = graph.addVariable(s.elementType(), [copies * m], debugContext or api)
    if m == 0:
        return var.reshape([copies * x if i == d else x for i, x in enumerate(s.shape())])
    tiles = _checked_tiles(graph, flat, api)
    order, start, end, rtile, by_tile = _regions(flat.flat_index(), tiles)
    lengths = (end - start)[by_tile]  # regions tile after tile
    tile32 = rtile[by_tile].astype(np.int32)  # (a tile per element of var: 4 bytes each)
    graph.mapElements(var, np.repeat(tile32, copies * lengths))
    shape = s.shape()
    outer = int(np.prod(shape[:d], dtype=np.int64))
    wide = copies * m > np.iinfo(np.int32).max
    positions = np.empty(copies * m, np.int64 if wide else np.int32)
    _sliceable_positions(
        _readonly(order), _readonly(start[by_tile]), _readonly(lengths), np.int64(copies),
        np.int64(outer), positions,
    )  # fmt: skip
    return var.elements(positions).reshape(
        [copies * x if i == d else x for i, x in enumerate(shape)]
    )


@numba.njit(cache=True, nogil=True)
def _sliceable_positions(order, starts, lengths, copies, outer, out):  # pragma: no cover
    # The positions in the sliceable variable of createSliceableTensorFromSlice's
    # result, row-major: s flattened as [outer, inner], copy c of s's element
    # (a, i) at out[(a * copies + c) * inner + i]. Region g (s's positions
    # order[starts[g] : starts[g] + lengths[g]], tile after tile) holds its copies one
    # after another from copies * (the elements of the regions before it).
    m = order.size
    inner = m // outer
    first = np.empty(m, np.int64)
    step = np.empty(m, np.int64)
    block = 0
    for g in range(lengths.size):
        n = lengths[g]
        for j in range(n):
            p = order[starts[g] + j]
            first[p] = block + j
            step[p] = n
        block += copies * n
    for a in range(outer):
        for c in range(copies):
            row = (a * copies + c) * inner
            for i in range(inner):
                p = a * inner + i
                out[row + i] = first[p] + c * step[p]


# ------------------------------------------------------------------ id runs
@numba.njit(cache=True, nogil=True)
def _piece_runs(ids, m, cols, begins, lengths, rows, starts, firsts):  # pragma: no cover
    # The sequence of ids, piece after piece, row after row within a piece, column after
    # column within a row: ids[r * m + cols[begins[p] + k]]. Returns the number of runs
    # of consecutive ids in it and, per piece, the run breaks inside it (its first id
    # excluded); with room in starts / firsts, also each run's position and first id.
    fill = starts.size > 0
    inner = np.zeros(lengths.size, np.int64)
    count = 0
    at = 0
    prev = np.int64(-2)
    for p in range(lengths.size):
        b, n = begins[p], lengths[p]
        for r in range(rows):
            row = r * m
            for k in range(n):
                v = ids[row + cols[b + k]]
                if v != prev + 1:
                    if fill:
                        starts[count] = at
                        firsts[count] = v
                    count += 1
                    if r or k:
                        inner[p] += 1
                prev = v
                at += 1
    return count, inner


@numba.njit(cache=True, nogil=True)
def _piece_positions(m, cols, begins, lengths, rows, out):  # pragma: no cover - compiled
    # The flat positions of the sequence _piece_runs walks, into out.
    at = 0
    for p in range(lengths.size):
        b, n = begins[p], lengths[p]
        for r in range(rows):
            for k in range(n):
                out[at] = r * m + cols[b + k]
                at += 1


def _pieces(
    t2d: Tensor,
    ids: np.ndarray,
    cols: np.ndarray,
    begins: np.ndarray,
    lengths: np.ndarray,
    vectors: np.ndarray | None,
) -> RunSegments | Segments:
    """A field of the rows of ``t2d`` at the columns of each piece (``cols[begins[p] :
    begins[p] + lengths[p]]``), piece after piece: for a Vector field (``vectors``
    None) the piece's rows one after another, else each row of a piece a vector and
    ``vectors[v]`` pieces to vertex ``v``. Connected as the runs of consecutive ids they
    are (found in one compiled pass, no array of the ids); pieces whose ids are mostly
    not runs are connected as a view of the elements, as they are."""
    rows, m = t2d.dim(0), t2d.dim(1)
    args = (ids, np.int64(m), cols, _readonly(begins), _readonly(lengths), np.int64(rows))
    count, _ = _piece_runs(*args, _NONE, _NONE)
    total = int(lengths.sum()) * rows
    sizes = lengths * rows if vectors is None else np.repeat(lengths, rows)
    per = None if vectors is None else vectors * rows
    if count * MIN_ELEMENTS_PER_RUN <= total:
        starts, firsts = np.empty(count, np.int64), np.empty(count, np.int64)
        _piece_runs(*args, starts, firsts)
        return RunSegments(t2d, RunIds(starts, firsts, total), sizes, per)
    positions = np.empty(total, np.int64)
    _piece_positions(*args[1:], positions)
    return Segments(t2d.flatten().elements(positions), sizes, per)


def _generate(
    graph: Graph,
    prog: Sequence,
    offset: Tensor,
    t2d: Tensor,
    s2d: Tensor,
    update: bool,
    name: str,
    api: str,
) -> None:
    """``generateVertices``: one compute set over the tiles of ``t2d[0]``. The fields
    are the rows of ``t2d`` and ``s2d`` at each region's (or piece of a region's)
    columns, connected as the runs of consecutive ids they are (:func:`_pieces`)."""
    nb, m = t2d.dim(0), t2d.dim(1)
    ns = s2d.dim(0)
    t = t2d.elementType()
    target = graph.getTarget()
    workers, vw = target.getNumWorkerContexts(), _vector_width(graph, t)
    row0 = t2d.slice(0, 1, 0).flatten()
    cs = graph.addComputeSet(name)
    order, start, end, rtile, by_tile = _regions(
        row0.flat_index(), _checked_tiles(graph, row0, api)
    )
    r_tile = rtile[by_tile]
    per_tile = np.bincount(r_tile, minlength=int(r_tile.max()) + 1 if r_tile.size else 0)
    single = per_tile[r_tile] == 1  # regions alone on their tile
    lengths = (end - start)[by_tile]
    region_start = np.cumsum(lengths) - lengths  # each region's columns in cols
    cols = _readonly(order[_spans(start[by_tile], lengths)])  # t2d's columns, region by region
    base_ids, sub_ids = _readonly(t2d.flat_index()), _readonly(s2d.flat_index())
    # 1D where the tile's base block (every row's columns of the region) is one run
    _, inner = _piece_runs(
        base_ids, np.int64(m), cols, _readonly(region_start), _readonly(lengths), np.int64(nb),
        _NONE, _NONE,
    )  # fmt: skip
    one_d = single & (inner == 0)

    def add(cls: type, tiles: np.ndarray, base: Any, sub: Any, state: dict, est) -> None:
        n = tiles.size
        conn: dict[str, Any] = {"offset": offset.elements(np.zeros(n, np.int64)), "baseT": base}
        conn["subT"] = sub
        for field, values in state.items():
            c = graph.addConstant(UNSIGNED_INT, [n], np.asarray(values), f"{name}/{field}")
            graph.mapElements(c, tiles)
            conn[field] = c
        graph.addVertices(cs, cls, tiles, conn, perfEstimates=est)

    if one_d.any():
        k = np.flatnonzero(one_d)
        lens, begins = lengths[k], region_start[k]
        sizes = lens * nb  # each one run, from the region's first id in row 0
        runs = RunIds(np.cumsum(sizes) - sizes, base_ids[cols[begins]], int(sizes.sum()))
        base = RunSegments(t2d, runs, sizes)
        sub = _pieces(s2d, sub_ids, cols, begins, lens, None)
        est = slice_1d_estimate(lens, ns, workers, vw, t.size == 1)
        state = {"numBaseElements": np.full(k.size, nb), "numSubElements": np.full(k.size, ns),
                 "regionSize": lens}  # fmt: skip
        add(_vertex_class(t, "1D", update), r_tile[k], base, sub, state, est)
    rest = np.flatnonzero(~one_d)
    if rest.size:
        v_tiles, piece_begin, piece_len, piece_vertex = [], [], [], []
        tile_first = np.flatnonzero(np.r_[True, r_tile[rest][1:] != r_tile[rest][:-1]])
        bounds = np.append(tile_first, rest.size)
        nv = 0
        splits: dict[tuple[int, ...], Any] = {}
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            regs = rest[a:b]
            sizes = tuple(lengths[regs].tolist())
            split = splits.get(sizes)
            if split is None:
                split = splits[sizes] = split_regions(sizes, vw, workers, 2 * vw, UINT_MAX)
            for pieces in split:
                for r, o, n in pieces:
                    piece_begin.append(int(region_start[regs[r]]) + o)
                    piece_len.append(n)
                    piece_vertex.append(nv)
                v_tiles.append(int(r_tile[regs[0]]))
                nv += 1
        plen = np.asarray(piece_len, np.int64)
        pbegin = np.asarray(piece_begin, np.int64)
        pvert = np.asarray(piece_vertex, np.int64)
        per_vertex = np.bincount(pvert, minlength=nv)
        base = _pieces(t2d, base_ids, cols, pbegin, plen, per_vertex)
        sub = _pieces(s2d, sub_ids, cols, pbegin, plen, per_vertex)
        est = slice_2d_estimate(plen, pvert, nv, ns, vw, t, update)
        state = {"numBaseElements": np.full(nv, nb), "numSubElements": np.full(nv, ns),
                 "numRegions": per_vertex}  # fmt: skip
        add(_vertex_class(t, "2D", update), np.asarray(v_tiles, np.int64), base, sub, state, est)
    prog.add(Execute(cs))


def dynamicSlice(
    graph: Graph,
    t: Tensor,
    offset: Tensor,
    dims: SequenceT[int],
    sizes: SequenceT[int],
    prog: Sequence,
    debugContext: str = "",
) -> Tensor:
    """The ``sizes[0]`` slices of ``t`` along ``dims[0]`` starting at the runtime
    ``offset`` (wrapping round to 0), as a new tensor mapped like ``t``'s first slices.

    Raises
    ------
    GraphError, TensorError, TypeMismatchError
        Not one dimension, a slice size out of range, an offset that is not one
        UNSIGNED_INT element, a tensor of another graph.
    """
    api = "dynamicSlice"
    graph = check_graph(graph, f"popops.{api}")
    t = _tensor(graph, t, api, "t")
    offset, prog = _offset(graph, offset, api), _prog(prog, api)
    d, n = _one_dim(t, dims, sizes, api, "t")
    out = cloneTensor(graph, t.slice(0, n, d), f"{debugContext or api}/sliced_{d}")
    if out.numElements():
        _generate(graph, prog, offset, _two_d(t, d), _two_d(out, d), False,
                  f"{debugContext or api}/slice", api)  # fmt: skip
    return out


def dynamicUpdate(
    graph: Graph,
    t: Tensor,
    s: Tensor,
    offset: Tensor,
    dims: SequenceT[int],
    sizes: SequenceT[int],
    prog: Sequence,
    debugContext: str = "",
) -> None:
    """Write ``s`` into ``t`` along ``dims[0]`` at the runtime ``offset`` (rows past the
    end wrap round to 0); ``s`` has ``t``'s shape except ``sizes[0]`` in that dimension.

    Raises
    ------
    GraphError, TensorError, TypeMismatchError
        As :func:`dynamicSlice`; also ``s`` of another shape or element type.
    """
    api = "dynamicUpdate"
    graph = check_graph(graph, f"popops.{api}")
    t, s = _tensor(graph, t, api, "t"), _tensor(graph, s, api, "s")
    offset, prog = _offset(graph, offset, api), _prog(prog, api)
    d, n = _one_dim(t, dims, sizes, api, "t")
    want = [n if i == d else x for i, x in enumerate(t.shape())]
    if s.shape() != want or s.elementType() != t.elementType():
        raise TensorError(
            f"popops.{api}: s '{s.name}' is {s.elementType().name} {s.shape()}; required "
            f"{t.elementType().name} {want} (t '{t.name}' {t.shape()} with size {n} in "
            f"dimension {d})"
        )
    if s.numElements():
        _generate(graph, prog, offset, _two_d(t, d), _two_d(s, d), True,
                  f"{debugContext or api}/update", api)  # fmt: skip
