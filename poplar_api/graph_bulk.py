"""The Graph's bulk API: many elements, vertices and values per call.

Library functions (popops, poplin, popnn, poprand, poputil, gcl) build graphs of
hundreds of thousands of vertices; one Python call per element or vertex is what makes
that slow. The methods here take numpy arrays instead: the tile of every element of a
tensor (:meth:`BulkGraphMethods.elementTiles`), a whole per-element mapping
(:meth:`~BulkGraphMethods.mapElements`), ``n`` vertices of one type with row ``i`` of
each connected tensor on vertex ``i`` (:meth:`~BulkGraphMethods.addVertices`), the tiles
of many vertices (:meth:`~BulkGraphMethods.setVertexTiles`) and initial values
(:meth:`~BulkGraphMethods.setInitialValues`). Each checks its whole input with numpy
and raises naming the tensor, vertex, element and tile at fault, so the result is the
graph the one-at-a-time calls would make.

Tiles are numbered as the graph that is called sees them: a virtual graph's tile ``i``
is its ``i``-th tile, and the offset to the top-level graph's tiles is applied here, in
one place (:meth:`~BulkGraphMethods.rootTiles` gives the top-level tile of each).
:class:`~poplar_api.graph.Graph` inherits these methods.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar, overload

import numba
import numpy as np
from numba.core import event as numba_event

from poplar_api.errors import GraphError, TensorError
from poplar_api.graph_connections import Segments, _Connections, _int_array, _vector_or_list
from poplar_api.graph_constants import Constants, add_packed_constants
from poplar_api.graph_state import TilesMemo
from poplar_api.tensor import Tensor
from poplar_api.vertices import NO_ESTIMATE, UNMAPPED

if TYPE_CHECKING:
    from poplar_api.device import Target
    from poplar_api.graph import ComputeSet, Graph, VertexRef

__all__ = [
    "OUTSIDE",
    "UNMAPPED",
    "BulkGraphMethods",
    "Segments",
    "VertexRange",
    "bulk_construction",
    "collect_new_objects_only",
]

_P = ParamSpec("_P")
_R = TypeVar("_R")


def bulk_construction(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """Run ``fn`` (a library call that adds thousands of vertices, constants and views,
    or compiles them) with Python's cyclic garbage collector paused, then resumed as it
    was.

    Such a call allocates many small objects that live as long as the graph: a
    collection during it frees nothing, yet a full one walks every object of the
    process (the modules' and the graph's), and the allocation counts trigger several.
    On the CNN step of ``examples/cnn`` (100,000 vertices) they took about a third of
    the build. Reference counting still frees everything else at once; the collector
    runs as usual after the call. Only a Numba compile inside the call has the young
    generation collected when it ends (:class:`_CompileGarbage`).
    """

    @functools.wraps(fn)
    def paused(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        if not gc.isenabled():  # paused already (a nested call, or by the user)
            return fn(*args, **kwargs)
        gc.disable()
        _COMPILE_GARBAGE.paused = True
        try:
            return fn(*args, **kwargs)
        finally:
            _COMPILE_GARBAGE.paused = False
            gc.enable()

    return paused


class _CompileGarbage(numba_event.Listener):
    """Collects the young generation when Numba finishes compiling a function while
    :func:`bulk_construction` has the collector paused.

    Numba's compiler leaves much cyclic garbage (its IR, type inference and lowering
    objects) that only the cyclic collector frees. Kernels first compiled in a build
    or compile (a new checkout, an emptied cache) would otherwise keep that garbage
    until the paused call ends, interleaved in the allocator's arenas with the graph's
    own objects: freed then, it leaves those arenas resident but mostly empty. A
    collection of generation 0 after each outermost compile walks only the objects
    made since the previous one, so the graph's objects are walked about once in all,
    and frees the compiler's garbage while its arenas can still be reused. Numba
    triggers no compile event for a function it loads from its disk cache, so a
    process with its kernels cached does not collect at all.
    """

    def __init__(self) -> None:
        self.paused = False  # the collector is paused by bulk_construction
        self.depth = 0  # nested compiles (a kernel's callees compile inside it)

    def on_start(self, event: numba_event.Event) -> None:
        self.depth += 1

    def on_end(self, event: numba_event.Event) -> None:
        self.depth -= 1
        if self.depth == 0 and self.paused:
            gc.collect(0)


#: The listener of Numba's compile events (Numba compiles under one global lock, so
#: its nesting depth is that of one compile at a time).
_COMPILE_GARBAGE = _CompileGarbage()
numba_event.register("numba:compile", _COMPILE_GARBAGE)


#: Owners (engines) whose first block has run: later blocks of theirs freeze nothing.
_FROZEN_ONCE: weakref.WeakSet[Any] = weakref.WeakSet()


@contextlib.contextmanager
def collect_new_objects_only(owner: Any = None) -> Iterator[None]:
    """Within the block, Python's cyclic garbage collector walks only the objects made
    in it: those alive when it starts are frozen (``gc.freeze``) and handed back to the
    collector's oldest generation when it ends (``gc.unfreeze``), collectable as before.
    With ``owner`` (an engine) only its first block does so: a freeze at every run
    would take the cycles made between runs out of the young generations each time and
    hand them to the oldest, where a loop of short runs never collects them.

    A compiled graph is hundreds of thousands of objects that :func:`bulk_construction`
    kept from the collector while they were made, so a full collection is due when an
    engine first runs; walking them all (0.2 to 0.33 s of CPU for the replicated MLP
    step of ``benchmarks/bench_models.py --replicas``) frees nothing the run made. Runs
    as it is when the collector is paused, or when objects are frozen already (by the
    caller, or by an enclosing block: a run from a stream callback).
    """
    if owner is not None and owner in _FROZEN_ONCE:
        yield
        return
    if owner is not None:
        _FROZEN_ONCE.add(owner)
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


#: :meth:`BulkGraphMethods.elementTiles` of an element mapped to a tile that is not one
#: of the graph's own (a virtual graph's tensor element on another part of the device).
OUTSIDE = -2

#: Bound (exclusive) of a vertex cycle estimate.
MAX_ESTIMATE = 1 << 62

#: graph state -> library name -> that library's cache (plans and such)
_CACHES: weakref.WeakKeyDictionary[Any, dict[str, dict]] = weakref.WeakKeyDictionary()


def id_order(ids: np.ndarray) -> np.ndarray:
    """``np.argsort(ids, kind="stable")`` of element ids.

    The ids of a tensor view are mostly distinct and span a range not much wider than
    their count: then the order comes from one compiled scatter into that range and one
    walk over it (linear time, where a sort of tens of millions of ids takes seconds;
    no array per id beyond the order itself, the range's slots int32 where positions
    fit); otherwise from the sort.
    """
    ids = np.asarray(ids).reshape(-1)
    if ids.size < 2:
        return np.zeros(ids.size, np.int64)
    lo, hi = int(ids.min()), int(ids.max())
    if hi - lo + 1 > 4 * ids.size:
        return np.argsort(ids, kind="stable")
    if ids.dtype != np.int64 or not ids.flags.c_contiguous:
        ids = np.ascontiguousarray(ids, np.int64)
    if ids.flags.writeable:  # read-only, as a tensor's index is: one compiled form
        ids = ids.view()
        ids.flags.writeable = False
    narrow = ids.size <= np.iinfo(np.int32).max
    slot = np.full(hi - lo + 1, -1, np.int32 if narrow else np.int64)
    order = np.empty(ids.size, np.int64)
    if not _scatter_order(ids, np.int64(lo), slot, order):  # repeated ids: the sort
        return np.argsort(ids, kind="stable")
    return order


@numba.njit(cache=True, nogil=True)
def _scatter_order(ids, lo, slot, order):  # pragma: no cover - compiled
    # slot[id - lo] = its position, then the positions in id order into order; False
    # as soon as an id repeats.
    for k in range(ids.size):
        s = ids[k] - lo
        if slot[s] >= 0:
            return False
        slot[s] = k
    j = 0
    for s in range(slot.size):
        if slot[s] >= 0:
            order[j] = slot[s]
            j += 1
    return True


class VertexRange(Sequence):
    """The vertices one :meth:`BulkGraphMethods.addVertices` call added: ids
    ``start, start + 1, ..., stop - 1``, used as a sequence of
    :class:`~poplar_api.graph.VertexRef` (made on access, not stored).

    Attributes
    ----------
    graph
        The graph that added them.
    start, stop
        First vertex id and one past the last.
    """

    __slots__ = ("graph", "start", "stop")

    def __init__(self, graph: Graph, start: int, stop: int) -> None:
        self.graph = graph
        self.start = start
        self.stop = stop

    @property
    def ids(self) -> range:
        """The vertex ids."""
        return range(self.start, self.stop)

    def __len__(self) -> int:
        return self.stop - self.start

    @overload
    def __getitem__(self, i: int) -> VertexRef: ...
    @overload
    def __getitem__(self, i: slice) -> VertexRange: ...
    def __getitem__(self, i: int | slice) -> VertexRef | VertexRange:
        from poplar_api.graph import VertexRef

        if isinstance(i, slice):
            sub = self.ids[i]
            if sub.step != 1:
                raise GraphError(f"{self!r}[{i}]: only slices of step 1 give a VertexRange")
            return VertexRange(self.graph, sub.start, max(sub.start, sub.stop))
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"{self!r}: index {i} is out of range for {n} vertices")
        return VertexRef(self.graph, self.start + (i % n))

    def __repr__(self) -> str:
        return f"VertexRange(vertices {self.start}..{self.stop - 1})"


class BulkGraphMethods:
    """Bulk methods of :class:`~poplar_api.graph.Graph` (see the module docstring)."""

    # ----------------------------------------------------------- ownership, tiles
    def owns(self: Graph, t: Any) -> bool:
        """Whether ``t`` is a tensor of this graph (of any virtual graph of the same
        top-level graph, which share elements); a non-replicated view is not."""
        return isinstance(t, Tensor) and t._graph is self._state

    def isNonReplicated(self: Graph, t: Any) -> bool:
        """Whether ``t`` is a non-replicated view of this graph's replicated tensors
        (made by ``getNonReplicatedTensor``)."""
        from poplar_api.graph import is_nonreplicated

        return is_nonreplicated(t, self._state)

    def getReplicatedGraph(self: Graph) -> Graph:
        """The graph that holds the variables and vertices: for the non-replicated
        parent of ``createReplicatedGraph``, the replicated graph over one replica's
        tiles; for every other graph, itself."""
        if not self._wide:
            return self
        child = self.__dict__.get("_replicated")
        if child is None:
            child = type(self)._from_state(self._state)
            child._top = self
            self.__dict__["_replicated"] = child
        return child

    def rootTiles(self: Graph) -> np.ndarray:
        """The top-level graph's tile of each tile of this graph (a read-only int64
        array; ``arange(numTiles)`` for a top-level graph)."""
        tiles = self._tiles.view()
        tiles.flags.writeable = False
        return tiles

    def getTileRange(self: Graph) -> tuple[int, int]:
        """``(first, end)``: this graph's tiles as a range of top-level tiles.

        Raises
        ------
        GraphError
            This is a virtual graph over a tile list that is not one ascending range.
        """
        lo = self._tile_lo
        return lo, lo + self._num_tiles

    def getRootTarget(self: Graph) -> Target:
        """The target whose tiles :meth:`rootTiles` numbers: one replica's whole
        device, whatever part of it this (virtual) graph covers."""
        return self._state.target

    def elementTiles(self: Graph, t: Tensor, readonly: bool = False) -> np.ndarray:
        """The tile of each flat element of ``t``, in this graph's tile numbering.

        Parameters
        ----------
        t
            A tensor of this graph.
        readonly
            False: a new array each call, which the caller may change. True: a
            read-only array, which may be the one an earlier call gave for the same
            tensor (a top-level graph keeps the tiles of recently asked, fully mapped
            tensors while :meth:`getMappingVersion` holds, some millions of elements
            in all): for callers that only read it, as libraries asking again for the
            tiles of an operand do.

        Returns
        -------
        numpy.ndarray
            int64, one entry per element of ``t`` in row-major order: the element's
            tile (``0 <= tile < getTarget().getNumTiles()``), :data:`UNMAPPED` (-1) for
            an element not mapped yet, and :data:`OUTSIDE` (-2) for an element mapped
            to a tile that is not one of this virtual graph's (it is on the device,
            elsewhere: vertices can read it, but not be placed by it).

        Raises
        ------
        GraphError
            ``t`` is not a tensor of this graph.
        """
        t = self.checkTensor(t, "elementTiles")
        memo = None
        if readonly and self._parent is None:
            memo = self.__dict__.get("_tiles_memo")
            if memo is None:
                memo = self.__dict__["_tiles_memo"] = TilesMemo()
            found = memo.get(t, self._state)
            if found is not None:
                return found
        tiles = self._element_tiles(t)
        if readonly:
            tiles.flags.writeable = False
            if memo is not None and (not tiles.size or int(tiles.min()) >= 0):
                memo.put(t, tiles, self._state)
        return tiles

    def getMappingVersion(self: Graph) -> int:
        """A count that changes whenever a tile is written over an element already
        mapped (``setTileMapping``, ``mapElements`` of any tensor of the graph).
        Mapping elements for the first time (a new variable's) leaves it: what was
        found from the tiles of mapped elements stays true while it holds, so a
        library may keep such findings keyed by it (``elementTiles(t, readonly=True)``
        keeps a tensor's tiles while no remap writes over its elements' ids).

        Remaps are counted from the first time the version is asked for (here or by
        such a kept-tiles request): before that nobody holds findings to invalidate,
        and a hand-built graph's many ``setTileMapping`` calls then only write (the
        check of the old tiles cost tutorial 7's build some 10 % of its instructions).
        Only its changes mean anything, not its value."""
        self._state.watching = True
        return self._state.mapping_version

    def _element_tiles(self: Graph, t: Tensor) -> np.ndarray:
        """:meth:`elementTiles` of a checked tensor, as a new array."""
        space = self._state.spaces.get(t._type.size)
        if space is None:
            return np.full(t.numElements(), UNMAPPED, np.int64)
        roots = space.wide_tiles_of(t._id_index())
        if self._parent is None:
            return roots
        lookup = self.__dict__.get("_local_of")
        if lookup is None:
            # root tile -> local tile, OUTSIDE for other tiles; the last entry serves
            # index -1 (UNMAPPED) and keeps it
            lookup = np.full(self._state.target.getNumTiles() + 1, OUTSIDE, np.int64)
            lookup[self._tiles] = np.arange(self._num_tiles)
            lookup[-1] = UNMAPPED
            self.__dict__["_local_of"] = lookup
        return lookup[roots]

    def _check_tiles(self: Graph, tiles: Any, count: int, what: str, item: str) -> np.ndarray:
        """Root tile of each of ``count`` items from ``tiles`` (one tile, or one per item
        in this graph's numbering), range-checked."""
        arr = _int_array(tiles, what)
        arr = np.full(count, int(arr), np.int64) if arr.ndim == 0 else arr.reshape(-1)
        if arr.size != count:
            raise GraphError(
                f"{what}: {arr.size} tiles given for {count} {item}s; hint: one tile per "
                f"{item} (or a single tile for all)"
            )
        self._check_tile_range(arr, what, item)
        return arr if self._parent is None else self._tiles[arr]

    def _check_tile_range(self: Graph, arr: np.ndarray, what: str, item: str) -> None:
        """Raise naming the first of ``arr`` (row-major) outside this graph's tiles."""
        if not arr.size or (int(arr.min()) >= 0 and int(arr.max()) < self._num_tiles):
            return  # two reductions, no array of flags, when all are in range
        arr = arr.reshape(-1)
        bad = (arr < 0) | (arr >= self._num_tiles)
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            raise GraphError(
                f"{what}: {item} {k} has tile {int(arr[k])}, out of range [0, "
                f"{self._num_tiles}) of this graph ({int(bad.sum())} {item}(s) out of range); "
                "hint: tiles are numbered in the graph called, 0..getTarget().getNumTiles()-1"
            )

    def mapElements(self: Graph, t: Tensor, tiles: Any) -> None:
        """Map each element of ``t`` to a tile: the bulk form of ``setTileMapping``.

        Parameters
        ----------
        t
            A tensor of this graph.
        tiles
            One tile for every element, or an int array of ``t.numElements()`` tiles
            (any shape; element ``e`` of ``t`` in row-major order goes to the ``e``-th),
            in this graph's tile numbering. An element ``t`` holds twice (a broadcast)
            gets the last of its tiles.

        Raises
        ------
        GraphError
            ``t`` is not a tensor of this graph, the count differs, or a tile is out of
            range (the message names the element and the tile).
        """
        self._refuse_on_parent("mapElements")
        t = self.checkTensor(t, "mapElements")
        what = f"mapElements of tensor '{t.name}' ({t.numElements()} elements)"
        arr = _int_array(tiles, what, wide=False)  # (written into the space's tile column)
        n = t.numElements()
        if t._start >= 0 and self._parent is None and arr.ndim and arr.size == n:
            # consecutive ids of a top-level graph: the tiles (of any shape and strides,
            # e.g. a transposed array in a variable's memory order) written as one run
            self._check_tile_range(arr, what, "element")
            column = self._state.space(t._type).tile[t._start : t._start + n]
            self._state.note_write(t._type.size, slice(t._start, t._start + n), column)
            column.reshape(arr.shape)[...] = arr
            return
        roots = self._check_tiles(arr, n, what, "element")
        column, at = self._state.space(t._type).tile, t._id_index()
        self._state.note_write(t._type.size, at, column[at])  # (a remap: a new version)
        column[at] = roots

    def setVertexTiles(self: Graph, vertices: Any, tiles: Any) -> None:
        """Place vertices on tiles: the bulk form of ``setTileMapping(v, tile)``.

        Parameters
        ----------
        vertices
            A :class:`VertexRange`, a vertex, or a sequence of vertices of this graph.
        tiles
            One tile for all, or one per vertex (this graph's numbering).

        Raises
        ------
        GraphError
            A vertex of another graph, a count that differs, or a tile out of range.
        """
        from poplar_api.graph import VertexRef

        self._refuse_on_parent("setVertexTiles")
        what = "setVertexTiles"
        if isinstance(vertices, VertexRange):
            if vertices.graph._state is not self._state:
                raise GraphError(f"{what}: {vertices!r} belongs to another graph")
            ids = np.arange(vertices.start, vertices.stop, dtype=np.int64)
        else:
            if isinstance(vertices, VertexRef):
                vertices = [vertices]
            ids = np.empty(len(vertices), np.int64)
            for i, v in enumerate(vertices):
                self._check_vertex(v, f"{what}: vertices[{i}]")
                ids[i] = v.id
        roots = self._check_tiles(tiles, ids.size, what, "vertex")
        column = np.frombuffer(self._state.vertices.tile, np.int32)
        try:
            column[ids] = roots
        finally:
            del column  # the column may grow again only once no view of it is left

    def setInitialValues(self: Graph, t: Tensor, values: Any) -> None:
        """Initial values of ``t``'s elements, in bulk: ``values`` broadcasts to
        ``t``'s shape (numpy rules). With ``t`` a view of many scattered elements
        (:meth:`Tensor.elements`) this sets them all in one part.

        Raises
        ------
        GraphError
            ``t`` is not a tensor of this graph.
        TensorError
            ``values`` does not broadcast to ``t``'s shape.
        """
        t = self.checkTensor(t, "setInitialValues")
        arr = np.asarray(values)
        try:
            arr = np.broadcast_to(arr, tuple(t._shape))
        except ValueError:
            raise TensorError(
                f"setInitialValues: values of shape {list(arr.shape)} do not broadcast to "
                f"tensor '{t.name}' of shape {t.shape()}; hint: one value, or one per element"
            ) from None
        vals = np.array(arr, dtype=t._type.numpy, copy=True).reshape(-1)
        self._state.initial_parts.append((t._type, t._flat_ids(), vals))

    def addPackedConstants(
        self: Graph,
        type_: Any,
        sizes: Any,
        values: Any,
        debugNames: str | Sequence[str] = "",
        tiles: Any = None,
        starts: Any = None,
    ) -> Constants:
        """Many 1-D constants whose values are segments of one array: the same
        variables, element ids, names, initial values and tiles as
        :meth:`~poplar_api.graph.Graph.addConstants` of ``[values[starts[i]:starts[i] +
        sizes[i]] for i ...]``, without an array per constant (libraries make one
        worklist and one parameters constant per vertex, tens of thousands a graph).

        Parameters
        ----------
        type_
            The element type of every constant, or one per constant.
        sizes
            Elements of each constant (int array).
        values
            1-D array of the values; each constant's are cast to its type, as
            ``setInitialValue`` casts.
        debugNames
            One name for all, or one per constant.
        tiles
            The tile of each constant (an int array; None: left unmapped).
        starts
            Where each constant's values begin in ``values`` (None: one after another,
            ``values`` holding exactly ``sum(sizes)``); constants may share values.

        Raises
        ------
        GraphError, TensorError, TypeMismatchError
            Sizes, starts, names, types or tiles of the wrong count or value, values
            that do not hold a constant's segment, or a tile outside this graph (each
            names the constant or the argument).
        """
        if self._wide:
            self._refuse_on_parent("addPackedConstants")
        return add_packed_constants(self, type_, sizes, values, debugNames, tiles, starts)

    def libraryCache(self: Graph, name: str) -> dict:
        """A dict a library keeps per top-level graph (plans, shared constants), shared
        by its virtual graphs, dropped with the graph and never saved with it."""
        caches = _CACHES.get(self._state)
        if caches is None:
            caches = _CACHES[self._state] = {}
        cache = caches.get(name)
        if cache is None:
            cache = caches[name] = {}
        return cache

    # ------------------------------------------------------------------ vertices
    def addVertices(
        self: Graph,
        cs: ComputeSet,
        vertexType: Any,
        tiles: Any,
        connections: Mapping[str, Any] | None = None,
        perfEstimates: Any = None,
    ) -> VertexRange:
        """Add ``n = len(tiles)`` vertices to ``cs`` in one call.

        The result is the graph ``n`` calls of ``addVertex(cs, type, {f: c[i]})``,
        ``setTileMapping(v, tiles[i])`` (and ``setPerfEstimate``) make, with the same
        vertex ids in the same order; rows of consecutive elements are kept as runs
        without a Python object per vertex.

        Parameters
        ----------
        cs
            A compute set of this graph.
        vertexType
            A registered vertex type name or a vertex class; or a sequence of ``n`` of
            them (vertex ``i`` of type ``vertexType[i]``: specialisations of one
            vertex, whose connected fields agree in element type and in kind, except
            that a field may be a Vector in some and a VectorList in others when it is
            given as :class:`Segments` with ``vectors``: a Vector vertex takes exactly
            one piece, as a 1-D and a 2-D form of one operation on a tile's regions).
        tiles
            int array of ``n`` tiles (this graph's numbering), vertex ``i`` on ``tiles[i]``.
        connections
            Field name -> a Tensor whose first dimension is ``n`` (row ``i`` goes to
            vertex ``i``: the vector of a Vector field, shape ``[n]`` for a scalar field,
            one vector of a VectorList field), :class:`Segments` (pieces of different
            lengths, in order), or a sequence of ``n`` values (what ``addVertex`` takes
            for the field, per vertex).
        perfEstimates
            None (the type's estimator), one cycle count for all, or ``n`` of them.

        Returns
        -------
        VertexRange
            The new vertices.

        Raises
        ------
        GraphError
            A compute set of another graph, an unknown field, a tensor of another graph
            or with another row count than ``n``, a tile or estimate out of range, types
            whose fields disagree.
        TypeMismatchError
            A connection of another element type than its field's.
        """
        self._refuse_on_parent("addVertices")
        state = self._state
        sets = state.compute_sets
        if type(cs).__name__ != "ComputeSet" or not (0 <= cs.id < len(sets) and sets[cs.id] is cs):
            raise GraphError(
                f"addVertices: {cs!r} is not a compute set of this graph; hint: use the "
                "compute sets this graph's addComputeSet returned"
            )
        tile_arr = _int_array(tiles, "addVertices: tiles")
        if tile_arr.ndim != 1:
            raise GraphError(
                f"addVertices: tiles must be a 1-D array of one tile per vertex, got shape "
                f"{list(tile_arr.shape)}"
            )
        n = int(tile_arr.size)
        kinds, which = self._vertex_kinds(vertexType, n)
        what = f"addVertices of {'/'.join(k.name for k in kinds[:3])}"
        roots = self._check_tiles(tile_arr, n, what, "vertex")
        estimates = np.full(n, NO_ESTIMATE, np.int64)
        if perfEstimates is not None:
            est = _int_array(perfEstimates, f"{what}: perfEstimates")
            est = np.broadcast_to(est, (n,)) if est.ndim == 0 else est.reshape(-1)
            if est.size != n:
                raise GraphError(f"{what}: {est.size} perfEstimates given for {n} vertices")
            bad = (est < 0) | (est >= MAX_ESTIMATE)
            if bad.any():
                k = int(np.flatnonzero(bad)[0])
                raise GraphError(
                    f"{what}: perfEstimates[{k}] = {int(est[k])} must be >= 0 and < 2**62 "
                    "(the thread cycles of one run of the vertex)"
                )
            estimates[:] = est
        plan = _Connections(n, which)
        for name, value in (connections or {}).items():
            specs = [k.field(name) for k in kinds]  # raises, listing the fields, if unknown
            spec = specs[0]
            if _vector_or_list(specs, value):
                plan.mixed(self, name, value, specs, f"{what} field '{name}'")
                continue
            for other, k in zip(specs[1:], kinds[1:], strict=True):
                if other.kind != spec.kind or other.element_type != spec.element_type:
                    raise GraphError(
                        f"{what}: field '{name}' is {spec.describe()} in {kinds[0].name} but "
                        f"{other.describe()} in {k.name}; hint: add them in separate calls"
                    )
            plan.add(self, name, value, spec, specs, f"{what} field '{name}'")
        table = state.vertices
        first, type_rows = table.extend_types(kinds, which, cs.id, roots, estimates)
        try:
            plan.write(self, table, kinds, which, first, type_rows)
        except Exception:
            table.truncate(first)  # a failed call leaves no half-built vertices
            raise
        cs.vertices.extend(range(first, first + n))
        return VertexRange(self, first, first + n)

    def _vertex_kinds(self: Graph, vertexType: Any, n: int) -> tuple[list, np.ndarray | None]:
        """The distinct vertex types of an ``addVertices`` call and, for a sequence of
        types, the position in them of each vertex's type (None for one type)."""
        codelets = self._state.codelets
        if isinstance(vertexType, str) or not isinstance(vertexType, Sequence):
            vt = codelets.get(vertexType) if type(vertexType) is str else None
            return [vt if vt is not None else self._vertex_type(vertexType)], None
        if len(vertexType) != n:
            raise GraphError(
                f"addVertices: {len(vertexType)} vertex types given for {n} tiles; hint: one "
                "type per vertex, or a single type for all"
            )
        # the distinct types in order of first appearance, then each vertex's position
        # in them (two passes in C over the sequence, no Python statement per vertex)
        seen = dict.fromkeys(vertexType)
        kinds: list = []
        for k, v in enumerate(seen):
            vt = codelets.get(v) if type(v) is str else None
            kinds.append(vt if vt is not None else self._vertex_type(v))
            seen[v] = k
        if not kinds:
            raise GraphError("addVertices: an empty sequence of vertex types; give a type")
        if len(kinds) == 1:
            return kinds, None
        return kinds, np.fromiter(map(seen.__getitem__, vertexType), np.int64, n)
