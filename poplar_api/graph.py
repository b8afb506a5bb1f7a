"""The Graph: variables, constants, tile mappings, compute sets, vertices, streams.

Elements live in one id space per element size (4-byte FLOAT, INT, UNSIGNED_INT;
2-byte HALF, SHORT, UNSIGNED_SHORT; 1-byte CHAR, UNSIGNED_CHAR, BOOL): each variable
gets a contiguous id range in the space of its type's size, and a
:class:`~poplar_api.tensor.Tensor` is an element type and an array of those ids. Types
of one size share ids, so ``Tensor.reinterpret`` is the same ids with another type:
the device memory image (:class:`~poplar_api.lowering.context.Storage`) keeps the raw
bits of each space and every read and write goes through a numpy ``view`` of the
accessing type. The tile of every element is held in a per-space array, so mapping and
lowering are numpy operations over whole tensors. A virtual graph is a view over a tile range of its
parent: what it adds appears in the parent, with its tiles shifted. A virtual graph
over a tile list (``createVirtualGraph([3, 7, 1])``) maps its tile ``i`` to the
parent's tile ``tiles[i]``.

Replicated graphs
-----------------
``Graph(target, replication_factor=r)`` (or ``Graph(target).createReplicatedGraph(r)``)
is a graph of ``r`` identical replicas, each on ``target.getNumIPUs() / r`` IPUs. It is
built and lowered once, for one replica: its ``getTarget()`` is the target of one
replica (``getNumIPUs()``, ``getNumTiles()`` per replica, as in Poplar) and its tile
ids are that replica's; every replica runs the same program on its own IPUs with its
own values (:class:`~poplar_api.lowering.context.Storage` keeps one memory image per
replica). Streams of a replicated graph serve each replica separately
(:class:`ReplicatedStreamMode` ``REPLICATE``, the default) or send the same data to
every replica (``BROADCAST``). The parent of ``createReplicatedGraph`` is the
non-replicated top-level graph: it makes no variables, vertices or mappings of its
own here, but ``getNonReplicatedTensor(t)`` gives it a ``[r, *t.shape]`` view of a
replicated tensor (row ``k`` is replica ``k``'s copy) for host reads and writes,
copies to and from its own (non-replicated) streams and copies between such views.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ipusim import progress
from poplar_api.device import Device, Target
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph_bulk import (
    MAX_ESTIMATE,
    OUTSIDE,
    BulkGraphMethods,
    Segments,
    VertexRange,
)
from poplar_api.graph_constants import Constants, add_constants
from poplar_api.graph_state import (
    ComputeSet,
    DataStream,
    Function,
    NonReplicatedView,
    ReplicatedStreamMode,
    Variable,
    _any_mapped,
    _check_replication,
    _fill_block,
    _GraphState,
    _interval_bounds,
    _replica_target,
    _shape_of,
    _Space,
    _VirtualTarget,
    initial_values,
    is_nonreplicated,
    replication_factor,
)
from poplar_api.graph_vertices import FieldRef, VertexMethods, VertexRef
from poplar_api.lowering.context import wide_ids
from poplar_api.program import Program
from poplar_api.tensor import Interval, Tensor
from poplar_api.types import Type, type_from_name
from poplar_api.vertices import UNMAPPED


class Graph(VertexMethods, BulkGraphMethods):
    """A Poplar-like graph for a target.

    Parameters
    ----------
    target
        A :class:`~poplar_api.device.Target` or a :class:`~poplar_api.device.Device`
        (of every replica when the graph is replicated).
    replication_factor
        Replicas of the graph (Poplar's ``replication_factor``): an int that divides
        the target's IPUs; each replica runs on ``getNumIPUs() / replication_factor``
        IPUs. None or 1: not replicated.

    Raises
    ------
    GraphError
        ``target`` is not a target or device, or the replication factor is not an int
        >= 1 dividing the target's IPUs.
    """

    def __init__(self, target: Target | Device, replication_factor: int | None = None) -> None:
        if isinstance(target, Device):
            target = target.getTarget()
        if not isinstance(target, Target):
            raise GraphError(
                f"Graph: expected a Target or Device, got {type(target).__name__}; hint: "
                "Graph(IPUModel('ipu2').createDevice().getTarget())"
            )
        replicas = 1
        if replication_factor is not None:
            replicas = _check_replication(replication_factor, target, "Graph")
        self._state = _GraphState(_replica_target(target, replicas))
        self._state.replication_factor = replicas
        self._state.device_target = target
        if replicas > 1:
            self._state.nonreplicated = NonReplicatedView(self._state)
        self._num_tiles = self._state.target.getNumTiles()
        self._tiles = np.arange(self._num_tiles, dtype=np.int64)  # root tile of each tile
        self._root_tiles: list[int] = self._tiles.tolist()  # the same, as Python ints
        self._parent: Graph | None = None
        #: the non-replicated graph this one was made from (createReplicatedGraph)
        self._top: Graph | None = None
        #: this graph is the non-replicated parent of a replicated graph
        self._wide = False
        progress.watch_graph(self._state, _num_vertices)

    @classmethod
    def _from_state(cls, state: _GraphState) -> Graph:
        """The top-level graph of ``state`` (a graph rebuilt from an executable file)."""
        g = object.__new__(cls)
        g._state = state
        g._num_tiles = state.target.getNumTiles()
        g._tiles = np.arange(g._num_tiles, dtype=np.int64)
        g._root_tiles = g._tiles.tolist()
        g._parent = None
        g._top = None
        g._wide = False
        return g

    # ------------------------------------------------------------- replication
    def getReplicationFactor(self) -> int:
        """Replicas this graph stands for: the replication factor of a replicated
        graph (and of its virtual graphs), 1 for a graph that is not replicated
        (including the parent of ``createReplicatedGraph``)."""
        return 1 if self._wide else replication_factor(self._state)

    def getTopLevelGraph(self) -> Graph:
        """The top-level graph: the parent of ``createReplicatedGraph`` for a graph it
        made, the root of a virtual graph, else this graph."""
        g = self
        while g._parent is not None:
            g = g._parent
        return g._top if getattr(g, "_top", None) is not None else g

    def createReplicatedGraph(self, replicationFactor: int) -> Graph:
        """A graph of ``replicationFactor`` replicas over this graph's IPUs.

        This graph becomes the non-replicated top level: build the model in the graph
        returned (its target is one replica's), and use this one for
        ``getNonReplicatedTensor`` views and non-replicated streams.

        Raises
        ------
        GraphError
            This graph is a virtual or replicated graph, already has variables,
            vertices or a replicated graph, or the factor does not divide its IPUs.
        """
        what = f"createReplicatedGraph({replicationFactor!r})"
        st = self._state
        if self._parent is not None or self._top is not None:
            raise GraphError(
                f"{what}: only a top-level graph can be replicated; this one is a virtual or "
                "replicated graph; hint: call it on Graph(target)"
            )
        if self._wide or replication_factor(st) > 1:
            raise GraphError(
                f"{what}: this graph is already replicated ({replication_factor(st)} "
                "replicas); a graph is replicated once"
            )
        if st.variables or st.vertices:
            raise GraphError(
                f"{what}: this graph already has {len(st.variables)} variable(s) and "
                f"{len(st.vertices)} vertex(es); replicate it before adding any, and add "
                "them to the replicated graph"
            )
        replicas = _check_replication(replicationFactor, st.target, what)
        st.device_target = st.target
        st.target = _replica_target(st.target, replicas)
        st.replication_factor = replicas
        st.nonreplicated = NonReplicatedView(st)
        self._wide = replicas > 1
        child = Graph._from_state(st)
        child._top = self
        self.__dict__["_replicated"] = child
        return child

    def getNonReplicatedTensor(self, t: Tensor) -> Tensor:
        """The ``[replicationFactor, *t.shape]`` view of replicated tensor ``t`` from the
        non-replicated top level: row ``k`` is replica ``k``'s copy of ``t``.

        It can be read and written by the host (``createHostRead``/``createHostWrite``
        on this graph), copied to and from this graph's streams and to other such
        views; it cannot be connected to vertices.

        Raises
        ------
        GraphError
            ``t`` is not a tensor of this graph's replicated graph, the graph is not replicated,
            or this is the replicated graph itself (call it on the top-level graph).
        """
        what = "getNonReplicatedTensor"
        st = self._state
        r = replication_factor(st)
        if r == 1 or st.nonreplicated is None:
            raise GraphError(
                f"{what}: the graph is not replicated (replication factor 1), so there is no "
                "non-replicated view; hint: Graph(target).createReplicatedGraph(r) or "
                "Graph(target, replication_factor=r)"
            )
        if not (self._wide or (self._parent is None and self._top is None)):
            raise GraphError(
                f"{what}: call it on the non-replicated top-level graph, not on the "
                "replicated graph; hint: graph.getTopLevelGraph().getNonReplicatedTensor(t)"
            )
        if is_nonreplicated(t, st):
            raise GraphError(f"{what}: tensor '{t.name}' is already a non-replicated view")
        t = self.checkTensor(t, what)
        index = wide_ids(t.index[None, ...], np.arange(r).reshape((r,) + (1,) * t.rank()))
        name = f"{t.name}.nonReplicated"
        return Tensor._new(st.nonreplicated, t.elementType(), index, name, t.name)

    def _refuse_on_parent(self, what: str) -> None:
        """Graph elements are placed in the replicated graph, not its parent."""
        if self._wide:
            r = replication_factor(self._state)
            raise GraphError(
                f"{what}: this graph is the non-replicated parent of a graph of {r} replicas "
                "(createReplicatedGraph); ipusim places variables, constants, vertices, "
                "tile mappings and remote buffers in the replicated graph only; hint: call "
                f"{what.split('(')[0]} on the graph createReplicatedGraph returned, and use "
                "getNonReplicatedTensor(t) here for host access"
            )

    @property
    def _tile_lo(self) -> int:
        """First root tile of a graph over a contiguous tile range (used by libraries).

        Raises
        ------
        GraphError
            The graph is a virtual graph over a tile list that is not an ascending
            contiguous range; library functions that need the range cannot use it.
        """
        cached = self.__dict__.get("_tile_lo_value")
        if cached is not None:
            return cached
        tiles = self._tiles
        if tiles.size and not np.array_equal(tiles, np.arange(tiles[0], tiles[0] + tiles.size)):
            shown = tiles[:8].tolist()
            raise GraphError(
                f"virtual graph over tiles {shown}{'...' if tiles.size > 8 else ''} is not a "
                "contiguous tile range; this library function needs one; hint: make the "
                "virtual graph with createVirtualGraph(lowerTile, upperTile)"
            )
        self.__dict__["_tile_lo_value"] = lo = int(tiles[0]) if tiles.size else 0
        return lo

    # ------------------------------------------------------------------ target
    def getTarget(self) -> Target:
        """The target; a virtual graph reports its own tile count, a replicated graph
        the target of one replica (its IPUs and tiles), as in Poplar."""
        if self._wide:
            return self._state.device_target
        if self._parent is None:
            return self._state.target
        return _VirtualTarget(self._state.target, self._num_tiles)

    def createVirtualGraph(self, lowerTile: int | Any, upperTile: int | None = None) -> Graph:
        """A graph over some tiles of this one, sharing its state.

        ``createVirtualGraph(lowerTile, upperTile)`` takes the tiles
        ``[lowerTile, upperTile)``; ``createVirtualGraph(tiles)`` takes a list of
        distinct tiles of this graph, its tile ``i`` being ``tiles[i]`` here.

        Raises
        ------
        GraphError
            A range outside this graph, or a list that is empty, repeats a tile, has a
            tile outside this graph or a non-int.
        """
        self._refuse_on_parent("createVirtualGraph")
        if upperTile is None and not isinstance(lowerTile, int | np.integer):
            tiles = self._tile_list(lowerTile)
        else:
            lo, hi = lowerTile, upperTile
            for name, v in (("lowerTile", lo), ("upperTile", hi)):
                if isinstance(v, bool) or not isinstance(v, int | np.integer):
                    raise GraphError(f"createVirtualGraph: {name} {v!r} must be an int")
            if not 0 <= lo < hi <= self._num_tiles:
                raise GraphError(
                    f"createVirtualGraph: tile range [{lo}, {hi}) is not inside "
                    f"[0, {self._num_tiles}) of this graph"
                )
            tiles = np.arange(int(lo), int(hi), dtype=np.int64)
        sub = object.__new__(Graph)
        sub._state = self._state
        sub._tiles = self._tiles[tiles]
        sub._root_tiles = sub._tiles.tolist()
        sub._num_tiles = int(tiles.size)
        sub._parent = self
        sub._top = None
        sub._wide = False
        return sub

    def _tile_list(self, tiles: Any) -> np.ndarray:
        """A checked list of distinct tiles of this graph, as an int64 array."""
        if isinstance(tiles, str | bytes) or not hasattr(tiles, "__len__"):
            raise GraphError(
                f"createVirtualGraph: expected (lowerTile, upperTile) or a list of tiles, got "
                f"{type(tiles).__name__} {tiles!r}"
            )
        items = list(tiles)
        if not items:
            raise GraphError("createVirtualGraph: the tile list is empty; give at least one tile")
        for i, v in enumerate(items):
            if isinstance(v, bool) or not isinstance(v, int | np.integer):
                raise GraphError(f"createVirtualGraph: tiles[{i}] = {v!r} must be an int")
            if not 0 <= int(v) < self._num_tiles:
                raise GraphError(
                    f"createVirtualGraph: tiles[{i}] = {int(v)} is out of range "
                    f"[0, {self._num_tiles}) of this graph"
                )
        arr = np.asarray(items, dtype=np.int64)
        uniq, counts = np.unique(arr, return_counts=True)
        if (counts > 1).any():
            dup = int(uniq[counts > 1][0])
            where = np.flatnonzero(arr == dup)[:2].tolist()
            raise GraphError(
                f"createVirtualGraph: tile {dup} is listed twice (tiles[{where[0]}] and "
                f"tiles[{where[1]}]); each tile may appear once"
            )
        return arr

    def _root_tile(self, tile: Any, what: str) -> int:
        if isinstance(tile, bool) or not isinstance(tile, int | np.integer):
            raise GraphError(f"{what}: tile {tile!r} must be an int")
        if not 0 <= int(tile) < self._num_tiles:
            raise GraphError(
                f"{what}: tile {int(tile)} is out of range [0, {self._num_tiles}) of this "
                "graph; hint: the target has getNumTiles() tiles"
            )
        return int(self._tiles[int(tile)])

    def checkTensor(self, t: Any, what: str) -> Tensor:
        """``t``, checked to be a tensor of this graph (or of a virtual graph of the same
        top-level graph).

        Parameters
        ----------
        t
            The object to check.
        what
            Names the caller and argument in the message, e.g. ``"popops.add: A"``.

        Raises
        ------
        GraphError
            ``t`` is not a Tensor, belongs to another graph, or is a non-replicated view.
        """
        if type(t) is Tensor and t._graph is self._state:
            return t
        if not isinstance(t, Tensor):
            raise GraphError(f"{what}: expected a Tensor, got {type(t).__name__}")
        if t.graph is not self._state:
            if is_nonreplicated(t, self._state):
                raise GraphError(
                    f"{what}: tensor '{t.name}' is a non-replicated view "
                    "(getNonReplicatedTensor); it serves host reads and writes, stream "
                    "copies and copies between such views only; hint: use the replicated "
                    "tensor it was made from"
                )
            raise GraphError(f"{what}: tensor '{t.name}' belongs to another graph")
        return t

    def _check_host_tensor(self, t: Any, what: str) -> Tensor:
        """A tensor the host may read or write: one of this graph, or on the
        non-replicated top level a ``getNonReplicatedTensor`` view."""
        if is_nonreplicated(t, self._state) and (self._wide or self._top is None):
            return t
        return self.checkTensor(t, what)

    # --------------------------------------------------------------- variables
    def _add(self, type_: Type, shape: Any, name: str, constant: bool) -> Tensor:
        if self._wide:
            self._refuse_on_parent(f"{'addConstant' if constant else 'addVariable'}('{name}')")
        if isinstance(type_, str):  # Poplar's spelling ("float", "unsigned int")
            type_ = type_from_name(type_)
        if not isinstance(type_, Type):
            raise TypeMismatchError(
                f"tensor '{name}': element type {type_!r} is not a poplar_api Type (FLOAT, ...) "
                "or a Poplar type name ('float', 'unsigned int', ...)"
            )
        if type(shape) is list and all(type(d) is int and d >= 0 for d in shape):
            dims = tuple(shape)  # a list of ints: the common case, checked inline
        else:
            dims = _shape_of(shape, f"tensor '{name}'")
        n, vid = math.prod(dims), len(self._state.variables)
        base = self._state.space(type_).allocate(n, vid, name)
        var = Variable(vid, type_, base, n, dims, name or f"var{vid}", constant)
        self._state.variables.append(var)
        return Tensor._consecutive(self._state, type_, base, tuple(dims), var.name)

    def addVariable(self, type_: Type | str, shape: Any, debugName: str = "") -> Tensor:
        """A new variable of ``shape``; it must be mapped to tiles before compiling.
        ``type_`` is a Type or Poplar's name of one (``"float"``, ``"unsigned int"``)."""
        return self._add(type_, shape, debugName, False)

    def addTensor(self, type_: Type | str, shape: Any, debugName: str = "") -> Tensor:
        """Poplar's earlier name of :meth:`addVariable` (older SDKs' tutorials use it)."""
        return self._add(type_, shape, debugName, False)

    def addConstant(
        self, type_: Type | str, shape: Any, values: Any, debugName: str = ""
    ) -> Tensor:
        """A constant with ``values`` (one value is repeated over the whole shape)."""
        t = self._add(type_, shape, debugName, True)
        self.setInitialValue(t, values)
        return t

    def addConstants(
        self,
        type_: Type | Sequence[Type],
        shapes: Sequence[Any],
        values: Sequence[Any],
        debugNames: str | Sequence[str] = "",
        tiles: Sequence[int] | None = None,
    ) -> Constants:
        """Many constants in one call: the same variables, element ids, names, initial
        values and tiles as ``addConstant`` (then ``setTileMapping(t, tile)``) once per
        constant, in order, without the per-call cost (libraries make one small
        constant per vertex: worklists, parameters). The result is a sequence of the
        tensors; its ``concat(indices)`` joins many of them into one view.

        Parameters
        ----------
        type_
            The element type of every constant, or one per constant.
        shapes
            One shape (or element count) per constant.
        values
            One value list per constant (one value is repeated over its shape).
        debugNames
            One name for all, or one per constant.
        tiles
            The tile of each constant (None: left unmapped).

        Raises
        ------
        GraphError, TensorError, TypeMismatchError
            Lists of different lengths, a tile outside this graph, a value count that does not
            match the shape, or an element type that is not a Type (each names the constant).
        """
        if self._wide:
            self._refuse_on_parent("addConstants")
        return add_constants(self, type_, shapes, values, debugNames, tiles)

    def setInitialValue(self, t: Tensor, values: Any) -> None:
        """Value of ``t``'s elements when the engine is loaded."""
        if type(values) in (int, float) and type(t) is Tensor and t._graph is self._state:
            start = t._start
            if start >= 0:  # one number for consecutive ids: the common case, inline
                n = math.prod(t._shape)
                value = initial_values(t._type, np.asarray(values), f"tensor '{t.name}'")
                vals = np.full(n, value, t._type.numpy)
                self._state.initial_parts.append((t._type, range(start, start + n), vals))
                return
        t = self.checkTensor(t, "setInitialValue")
        arr = np.asarray(values)
        if arr.size == 1:
            arr = np.broadcast_to(arr.reshape(()), t.shape())
        if arr.size != t.numElements():
            raise TensorError(
                f"setInitialValue: tensor '{t.name}' has {t.numElements()} elements "
                f"(shape {t.shape()}) but {arr.size} values were given"
            )
        vals = initial_values(t.elementType(), arr, f"tensor '{t.name}'").reshape(-1).copy()
        ids = t._flat_ids()  # a range for consecutive ids: no index array is made
        ids = ids if type(ids) is range else ids.copy()
        self._state.initial_parts.append((t.elementType(), ids, vals))

    def setTileMapping(self, target: Tensor | VertexRef, mapping: Any) -> None:
        """Map a vertex or every element of a tensor to one tile, or a tensor by a mapping.

        Parameters
        ----------
        target
            A tensor or a vertex.
        mapping
            A tile, or for a tensor a whole mapping as :meth:`getTileMapping` returns
            it (Poplar's ``TileToTensorMapping``): entry ``i`` lists the intervals
            (``Interval`` or ``(begin, end)``) of the tensor's flattened elements on
            tile ``i``. Together the intervals must cover every element exactly once.

        Raises
        ------
        GraphError
            A tile outside this graph, more mapping entries than tiles, an interval outside
            the tensor, overlapping intervals or elements left out (the tensor, tile named).
        """
        if type(mapping) is int and 0 <= mapping < self._num_tiles and not self._wide:
            # (one tile for a tensor or vertex of this graph: the common case, inline)
            if type(target) is Tensor and target._graph is self._state:
                owner = self._state.spaces[target._type.size].tile  # made with the tensor
                start, tile = target._start, self._root_tiles[mapping]
                if start >= 0:  # consecutive ids: a block of the tile array (checked for
                    n = math.prod(target._shape)  # a remap and written in one compiled pass)
                    if self._state.watching:  # (findings kept: a remap is noted)
                        if _fill_block(owner, start, start + n, tile):
                            self._state.note_remap(target._type.size, start, start + n - 1)
                    elif n == 1:  # (index and slice syntax: no call of slice())
                        owner[start] = tile
                    else:
                        owner[start : start + n] = tile
                    return
                at = target.flat_index()
                if self._state.watching and _any_mapped(old := owner[at]):  # a remap
                    self._state.note_write(target._type.size, at, old)
                owner[at] = tile
                return
            if type(target) is VertexRef and target.graph._state is self._state:
                self._state.vertices.tile[target.id] = self._root_tiles[mapping]
                return
        self._refuse_on_parent("setTileMapping")
        if isinstance(target, VertexRef):
            inst = self._check_vertex(target, "setTileMapping")
            inst.tile = self._root_tile(mapping, f"setTileMapping of {inst.describe()}")
            return
        t = self.checkTensor(target, "setTileMapping")
        if isinstance(mapping, int | np.integer) and not isinstance(mapping, bool):
            tiles: Any = self._root_tile(mapping, f"setTileMapping of tensor '{t.name}'")
        else:
            tiles = self._mapping_tiles(t, mapping)
        column, at = self._state.space(t.elementType()).tile, t._id_index()
        self._state.note_write(t._type.size, at, column[at])
        column[at] = tiles

    def _mapping_tiles(self, t: Tensor, mapping: Any) -> np.ndarray:
        """Root tile of each flat element of ``t`` under a whole tile mapping (checked)."""
        what = f"setTileMapping of tensor '{t.name}' ({t.numElements()} elements)"
        if isinstance(mapping, str | bytes) or not hasattr(mapping, "__len__"):
            raise GraphError(
                f"{what}: mapping {mapping!r} must be a tile or a list of per-tile lists of "
                "intervals (as getTileMapping returns)"
            )
        if len(mapping) > self._num_tiles:
            raise GraphError(
                f"{what}: the mapping has {len(mapping)} entries but this graph has "
                f"{self._num_tiles} tiles; hint: one list of intervals per tile"
            )
        begins: list[int] = []
        ends: list[int] = []
        owners: list[int] = []
        n = t.numElements()
        for tile, intervals in enumerate(mapping):
            if isinstance(intervals, Interval) or not hasattr(intervals, "__iter__"):
                raise GraphError(
                    f"{what}: entry {tile} must be a list of intervals, got {intervals!r}"
                )
            for iv in intervals:
                b, e = _interval_bounds(iv, f"{what}: tile {tile}")
                if not 0 <= b <= e <= n:
                    raise GraphError(
                        f"{what}: tile {tile} interval [{b}, {e}) is outside the tensor's "
                        f"elements [0, {n})"
                    )
                if e > b:
                    begins.append(b)
                    ends.append(e)
                    owners.append(tile)
        b_arr = np.asarray(begins, np.int64)
        e_arr = np.asarray(ends, np.int64)
        o_arr = np.asarray(owners, np.int64)
        order = np.argsort(b_arr, kind="stable")
        b_arr, e_arr, o_arr = b_arr[order], e_arr[order], o_arr[order]
        clash = np.flatnonzero(b_arr[1:] < e_arr[:-1])
        if clash.size:
            k = int(clash[0])
            raise GraphError(
                f"{what}: interval [{b_arr[k + 1]}, {e_arr[k + 1]}) on tile {o_arr[k + 1]} "
                f"overlaps [{b_arr[k]}, {e_arr[k]}) on tile {o_arr[k]}; each element must be "
                "mapped exactly once"
            )
        covered = int((e_arr - b_arr).sum())
        if covered != n:
            # intervals are disjoint and sorted: the first gap is where coverage breaks
            starts = np.concatenate(([0], e_arr))
            stops = np.concatenate((b_arr, [n]))
            gap = int(np.flatnonzero(stops > starts)[0])
            raise GraphError(
                f"{what}: the mapping covers {covered} of {n} elements; elements "
                f"[{starts[gap]}, {stops[gap]}) are on no tile; hint: every element must be "
                "in exactly one interval"
            )
        tiles = np.repeat(self._tiles[o_arr], e_arr - b_arr).astype(np.int32)
        return tiles

    def getTileMapping(self, t: Tensor, throwOnUnmapped: bool = True) -> list[list[Interval]]:
        """For each tile of this graph, the intervals of ``t``'s flat elements on it."""
        t = self.checkTensor(t, "getTileMapping")
        tiles = self._state.space(t.elementType()).tiles_of(t._id_index()).astype(np.int64)
        if throwOnUnmapped and (tiles == UNMAPPED).any():
            first = int(np.flatnonzero(tiles == UNMAPPED)[0])
            raise GraphError(
                f"getTileMapping: element {first} of tensor '{t.name}' is not mapped to a tile"
            )
        out: list[list[Interval]] = [[] for _ in range(self._num_tiles)]
        if tiles.size == 0:
            return out
        local_of = np.full(max(int(self._tiles.max()), int(tiles.max()), 0) + 1, -1, np.int64)
        local_of[self._tiles] = np.arange(self._num_tiles)
        cuts = np.flatnonzero(np.diff(tiles)) + 1
        starts = np.concatenate(([0], cuts))
        ends = np.concatenate((cuts, [tiles.size]))
        for s, e in zip(starts.tolist(), ends.tolist(), strict=True):
            root = int(tiles[s])
            local = int(local_of[root]) if root >= 0 else -1
            if local >= 0:
                out[local].append(Interval(s, e))
        return out

    # ------------------------------------------------------------ host access
    def _new_handle(self, handle: str, what: str) -> None:
        st = self._state
        if handle in st.host_writes or handle in st.host_reads or handle in st.streams:
            raise GraphError(f"{what}: handle '{handle}' is already used")

    def createHostWrite(self, handle: str, t: Tensor) -> None:
        """Let the host write ``t`` with ``engine.writeTensor(handle, ...)``."""
        self._check_host_tensor(t, f"createHostWrite('{handle}')")
        if handle in self._state.host_writes:
            raise GraphError(f"createHostWrite: handle '{handle}' is already used")
        self._state.host_writes[handle] = t

    def createHostRead(self, handle: str, t: Tensor) -> None:
        """Let the host read ``t`` with ``engine.readTensor(handle, ...)``."""
        self._check_host_tensor(t, f"createHostRead('{handle}')")
        if handle in self._state.host_reads:
            raise GraphError(f"createHostRead: handle '{handle}' is already used")
        self._state.host_reads[handle] = t

    def _fifo(
        self,
        handle: str,
        type_: Type,
        n: int,
        to_device: bool,
        mode: Any = ReplicatedStreamMode.REPLICATE,
    ) -> DataStream:
        self._new_handle(handle, "addHostToDeviceFIFO" if to_device else "addDeviceToHostFIFO")
        if not isinstance(type_, Type):
            raise TypeMismatchError(f"stream '{handle}': {type_!r} is not a poplar_api Type")
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 0:
            raise GraphError(f"stream '{handle}': numElements {n!r} must be an int >= 0")
        try:
            mode = ReplicatedStreamMode(mode)
        except ValueError:
            raise GraphError(
                f"stream '{handle}': replicatedMode {mode!r} is not a ReplicatedStreamMode; "
                "hint: ReplicatedStreamMode.REPLICATE (each replica its own data) or "
                "ReplicatedStreamMode.BROADCAST (the same data to every replica)"
            ) from None
        tiles = None if self._parent is None else tuple(self._root_tiles)
        s = DataStream(handle, type_, int(n), to_device, mode, self.getReplicationFactor(), tiles)
        return self._state.streams.setdefault(handle, s)  # a new handle: stored and returned

    def addHostToDeviceFIFO(
        self,
        handle: str,
        elementType: Type,
        numElements: int,
        replicatedMode: ReplicatedStreamMode = ReplicatedStreamMode.REPLICATE,
        options: Mapping[str, Any] | None = None,
    ) -> DataStream:
        """A stream the host fills; ``Copy(stream, tensor)`` reads from it.

        In a replicated graph ``replicatedMode`` says whether each replica gets its
        own data (``REPLICATE``) or all get the same (``BROADCAST``); ``options`` are
        accepted for Poplar compatibility and ignored.
        """
        return self._fifo(handle, elementType, numElements, True, replicatedMode)

    def addDeviceToHostFIFO(
        self,
        handle: str,
        elementType: Type,
        numElements: int,
        options: Mapping[str, Any] | None = None,
    ) -> DataStream:
        """A stream the device fills; ``Copy(tensor, stream)`` writes to it (in a
        replicated graph, each replica its own data)."""
        return self._fifo(handle, elementType, numElements, False)

    def addRemoteBuffer(
        self,
        handle: str,
        elementType: Type,
        numElements: int,
        repeats: int = 1,
        rearrangeOnHost: bool = False,
        optimiseMemory: bool = False,
    ) -> Any:
        """A remote buffer of ``repeats`` rows of ``numElements`` elements in Streaming
        Memory (see :mod:`poplar_api.remote`); one per replica in a replicated graph."""
        from poplar_api.remote import add_remote_buffer

        self._refuse_on_parent(f"addRemoteBuffer('{handle}')")
        return add_remote_buffer(
            self._state, handle, elementType, numElements, repeats, rearrangeOnHost,
            optimiseMemory,
        )  # fmt: skip

    def addFunction(self, program: Program) -> Function:
        """Make ``program`` callable with ``program.Call``; it is compiled once."""
        if not isinstance(program, Program):
            raise GraphError(f"addFunction: expected a program, got {type(program).__name__}")
        fn = Function(len(self._state.functions), program)
        self._state.functions.append(fn)
        return fn

    # ------------------------------------------------------------------ queries
    def getNumVertices(self) -> int:
        return len(self._state.vertices)

    def getNumComputeSets(self) -> int:
        return len(self._state.compute_sets)

    def getVariables(self) -> list[Variable]:
        return list(self._state.variables)

    def __repr__(self) -> str:
        st = self._state
        first = int(self._tiles[0]) if self._tiles.size else 0
        return (
            f"Graph({self._num_tiles} tiles from {first}, {len(st.variables)} variables, "
            f"{len(st.compute_sets)} compute sets, {len(st.vertices)} vertices)"
        )


def _num_vertices(state: _GraphState) -> tuple[int, int]:
    """Vertices of a graph state (what its construction line shows) and its size in
    vertices, variables and compute sets (any growth shows construction going on)."""
    vertices = len(state.vertices)
    return vertices, vertices + len(state.variables) + len(state.compute_sets)


def variable_count(graph: Graph) -> int:
    """How many variables and constants ``graph``'s state holds: ids made after this
    call are ``>=`` it (layers above use it to find the tensors an op created)."""
    return len(graph._state.variables)


def variable_tensors(graph: Graph, first: int, last: int) -> list[Tensor]:
    """Whole-variable tensors of the non-constant variables with ids in ``[first, last)``."""
    state = graph._state
    # consecutive ids: the index array is made only if a caller asks for it
    return [Tensor._consecutive(state, var.type, var.base, tuple(var.shape), var.name)
            for var in state.variables.written(first, last)]  # fmt: skip


def touches_constant(graph: Graph, t: Tensor) -> bool:
    """Whether ``t`` covers elements of a constant (which programs cannot write)."""
    state = graph._state
    space = state.find_space(t.elementType())
    ids = t.flat_index()
    if space is None or ids.size == 0:
        return False
    vids = np.unique(space.variables_of(np.asarray(ids)))
    return any(state.variables[v].constant for v in vids.tolist())


__all__ = [
    "MAX_ESTIMATE",
    "OUTSIDE",
    "UNMAPPED",
    "ComputeSet",
    "DataStream",
    "FieldRef",
    "Function",
    "Graph",
    "NonReplicatedView",
    "ReplicatedStreamMode",
    "Segments",
    "Variable",
    "VertexRange",
    "VertexRef",
    "is_nonreplicated",
    "replication_factor",
]

# state classes pickled (executable files) under this module's name load from here too
_PICKLED = (_GraphState, _Space)
