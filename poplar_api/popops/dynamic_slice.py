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

import numpy as np

from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph import Graph, Segments
from poplar_api.library_checks import check_graph
from poplar_api.popops.layout import UINT_MAX, _checked_tiles, _regions, _spans, split_regions
from poplar_api.poputil import cloneTensor
from poplar_api.program import Execute, Sequence
from poplar_api.tensor import Tensor
from poplar_api.types import HALF, UNSIGNED_INT, Type

__all__ = [
    "createSliceableTensorFromSlice",
    "dynamicSlice",
    "dynamicUpdate",
    "slice_1d_estimate",
    "slice_2d_estimate",
]

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
    begins = copies * (np.cumsum(lengths) - lengths)  # each region's block in var
    positions = order[_spans(start[by_tile], lengths)]  # s's positions, region by region
    within = np.arange(m, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    first = np.repeat(begins, lengths) + within  # var element of copy 0, per position
    ids = np.empty(m, np.int64)
    ids[positions] = first
    step = np.zeros(m, np.int64)
    step[positions] = np.repeat(lengths, lengths)
    graph.mapElements(var, np.repeat(rtile[by_tile], copies * lengths))
    at = ids[None, :] + np.arange(copies, dtype=np.int64)[:, None] * step[None, :]
    stacked = var.elements(at.reshape(-1)).reshape([copies, *s.shape()])
    return stacked.dimRoll(0, d).flatten(d, d + 2)


def _rows_positions(
    positions: np.ndarray, lengths: np.ndarray, rows: int, row_length: int
) -> np.ndarray:
    """For each group of ``positions`` (``lengths`` long, in turn): the flat positions
    of those columns in every one of ``rows`` rows of ``row_length``, row after row."""
    lengths = np.asarray(lengths, np.int64)
    group_start = np.cumsum(lengths) - lengths
    n = lengths * rows
    g = np.repeat(np.arange(lengths.size, dtype=np.int64), n)
    e = np.arange(int(n.sum()), dtype=np.int64) - np.repeat(np.cumsum(n) - n, n)
    row, col = e // lengths[g], e % lengths[g]
    return row * row_length + positions[group_start[g] + col]


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
    """``generateVertices``: one compute set over the tiles of ``t2d[0]``."""
    nb, m = t2d.dim(0), t2d.dim(1)
    ns = s2d.dim(0)
    t = t2d.elementType()
    target = graph.getTarget()
    workers, vw = target.getNumWorkerContexts(), _vector_width(graph, t)
    row0 = t2d.slice(0, 1, 0).flatten()
    cs = graph.addComputeSet(name)
    base_flat, sub_flat = t2d.flatten(), s2d.flatten()
    base_ids = t2d.flat_index().reshape(nb, m) if m else np.zeros((nb, 0), np.int64)
    order, start, end, rtile, by_tile = _regions(
        row0.flat_index(), _checked_tiles(graph, row0, api)
    )
    r_tile = rtile[by_tile]
    per_tile = np.bincount(r_tile, minlength=int(r_tile.max()) + 1 if r_tile.size else 0)
    single = per_tile[r_tile] == 1  # regions alone on their tile
    lengths = (end - start)[by_tile]
    # 1D where the tile's base block (every row's columns of the region) is contiguous
    cols = order[_spans(start[by_tile], lengths)]
    region_of = np.repeat(np.arange(lengths.size), lengths)
    first_col = np.repeat(cols[np.cumsum(lengths) - lengths], lengths)
    expect = (
        base_ids[0, first_col][None, :]
        + np.arange(nb)[:, None] * np.repeat(lengths, lengths)[None, :]
        + (np.arange(cols.size) - np.repeat(np.cumsum(lengths) - lengths, lengths))[None, :]
    )
    bad = np.bincount(
        region_of, weights=(base_ids[:, cols] != expect).sum(0), minlength=lengths.size
    )
    one_d = single & (bad == 0)

    def add(cls: type, tiles: np.ndarray, base: Segments, sub: Segments, state: dict, est) -> None:
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
        lens = lengths[k]
        pos = cols[_spans((np.cumsum(lengths) - lengths)[k], lens)]
        base = Segments(base_flat.elements(_rows_positions(pos, lens, nb, m)), lens * nb)
        sub = Segments(sub_flat.elements(_rows_positions(pos, lens, ns, m)), lens * ns)
        est = slice_1d_estimate(lens, ns, workers, vw, t.size == 1)
        state = {"numBaseElements": np.full(k.size, nb), "numSubElements": np.full(k.size, ns),
                 "regionSize": lens}  # fmt: skip
        add(_vertex_class(t, "1D", update), r_tile[k], base, sub, state, est)
    rest = np.flatnonzero(~one_d)
    if rest.size:
        v_tiles, piece_pos, piece_len, piece_vertex = [], [], [], []
        tile_first = np.flatnonzero(np.r_[True, r_tile[rest][1:] != r_tile[rest][:-1]])
        bounds = np.append(tile_first, rest.size)
        region_start = np.cumsum(lengths) - lengths
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
                    s0 = region_start[regs[r]] + o
                    piece_pos.append(cols[s0 : s0 + n])
                    piece_len.append(n)
                    piece_vertex.append(nv)
                v_tiles.append(int(r_tile[regs[0]]))
                nv += 1
        plen = np.asarray(piece_len, np.int64)
        pvert = np.asarray(piece_vertex, np.int64)
        pos = np.concatenate(piece_pos)
        per_vertex = np.bincount(pvert, minlength=nv)
        base = Segments(
            base_flat.elements(_rows_positions(pos, plen, nb, m)), np.repeat(plen, nb),
            per_vertex * nb,
        )  # fmt: skip
        sub = Segments(
            sub_flat.elements(_rows_positions(pos, plen, ns, m)), np.repeat(plen, ns),
            per_vertex * ns,
        )  # fmt: skip
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
