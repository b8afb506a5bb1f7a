"""What a graph and its virtual graphs share: element spaces, variables, compute sets,
streams and replication, as plain data.

:class:`_GraphState` holds everything :class:`~poplar_api.graph.Graph` objects over the
same device share (a virtual graph is a view of its parent's state over some tiles);
the lowering reads it. Element ids live in one :class:`_Space` per element size, with
the tile of every element in a per-space array. The value types handed to users
(:class:`ComputeSet`, :class:`DataStream`, :class:`Function`, :class:`Variable`,
:class:`ReplicatedStreamMode`) and the replication helpers are here too; all are
re-exported by :mod:`poplar_api.graph`.
"""

from __future__ import annotations

import array
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, overload

import numba
import numpy as np

from ipusim.config import with_overrides
from ipusim.errors import ConfigError
from poplar_api.codelet import VertexType
from poplar_api.device import Target
from poplar_api.errors import GraphError, TensorError
from poplar_api.program import Program
from poplar_api.tensor import Interval, Tensor
from poplar_api.types import Type
from poplar_api.vertices import UNMAPPED, VertexTable

__all__ = [
    "ComputeSet",
    "DataStream",
    "Function",
    "NonReplicatedView",
    "ReplicatedStreamMode",
    "Variable",
    "VariableTable",
    "is_nonreplicated",
    "replication_factor",
]

#: How many times the elements it must hold an element space's tile array is made
#: when it grows (see ``_Space._grown``).
GROWTH = 8


@dataclass(slots=True)
class Variable:
    """A variable or constant: a contiguous id range of one element type (slotted:
    libraries make tens of thousands of small constants)."""

    id: int
    type: Type
    base: int
    size: int
    shape: tuple[int, ...]
    name: str
    constant: bool = False


class VariableTable(Sequence[Variable]):
    """The variables and constants of a graph, in id order, held as columns.

    Libraries make tens of thousands of small constants (a convolution's worklists and
    parameters per vertex); one object per constant would be traversed again and again
    by Python's cyclic garbage collector while the graph is built, and the compiler
    reads whole columns (which are constants, their element sizes). Indexing gives a
    :class:`Variable` made on demand.
    """

    __slots__ = ("_bases", "_constant", "_elements", "_names", "_shapes", "_sizes", "_types")

    def __init__(self) -> None:
        self._types: list[Type] = []
        self._bases: list[int] = []
        self._sizes: list[int] = []
        self._shapes: list[tuple[int, ...]] = []
        self._names: list[str] = []
        self._constant = array.array("b")  # (as C arrays: a column is one copy)
        self._elements = array.array("q")  # bytes per element

    def __len__(self) -> int:
        return len(self._types)

    @overload
    def __getitem__(self, i: int) -> Variable: ...

    @overload
    def __getitem__(self, i: slice) -> list[Variable]: ...

    def __getitem__(self, i: int | slice) -> Variable | list[Variable]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        i = int(i)
        if i < 0:
            i += len(self._types)
        return Variable(i, self._types[i], self._bases[i], self._sizes[i], self._shapes[i],
                        self._names[i], bool(self._constant[i]))  # fmt: skip

    def __iter__(self) -> Iterator[Variable]:
        columns = (self._types, self._bases, self._sizes, self._shapes, self._names,
                   map(bool, self._constant))  # fmt: skip
        for i, row in enumerate(zip(*columns, strict=True)):
            yield Variable(i, *row)

    def append(self, var: Variable) -> None:
        """Add ``var`` (its id must be the next one)."""
        if var.id != len(self._types):
            raise ValueError(f"variable id {var.id} is not the next id {len(self._types)}")
        self.extend([var.type], [var.base], [var.size], [var.shape], [var.name], var.constant)

    def extend(
        self,
        types: list[Type],
        bases: list[int],
        sizes: list[int],
        shapes: list[tuple[int, ...]],
        names: list[str],
        constant: bool,
        elements: np.ndarray | None = None,
    ) -> None:
        """Add variables with the next ids, given column by column (``elements``: each
        type's element size in bytes, when known as an array)."""
        self._types += types
        self._bases += bases
        self._sizes += sizes
        self._shapes += shapes
        self._names += names
        # as bytes (an array's extend converts a list's items one by one, 0.1 us each)
        self._constant.frombytes(bytes([bool(constant)]) * len(types))
        if elements is None:
            elements = np.fromiter([t.size for t in types], np.int64, len(types))
        self._elements.frombytes(np.asarray(elements, np.int64).tobytes())

    def name(self, i: int) -> str:
        """Name of variable ``i`` (without making its :class:`Variable`)."""
        return self._names[i]

    def names(self, ids: np.ndarray) -> list[str]:
        """Names of variables ``ids``, in that order."""
        return list(map(self._names.__getitem__, ids.tolist()))

    def written(self, first: int, last: int) -> list[Variable]:
        """The non-constant variables with elements among ids ``[first, last)``, in id
        order: a :class:`Variable` is made for those only (most of the ids a library
        makes are its small constants, tens of thousands in a training step)."""
        first, last, _ = slice(first, last).indices(len(self))
        if last <= first:
            return []
        constant = np.frombuffer(self._constant[first:last], np.int8)  # (a copy's view)
        sizes = np.fromiter(self._sizes[first:last], np.int64, last - first)
        keep = np.flatnonzero((constant == 0) & (sizes > 0)) + first
        return [self[i] for i in keep.tolist()]

    def constant_flags(self) -> np.ndarray:
        """Whether each variable is a constant (bool, by id)."""
        return np.array(self._constant, bool)  # (a C array's bytes: no loop over objects)

    def element_sizes(self) -> np.ndarray:
        """Bytes per element of each variable (int64, by id)."""
        return np.frombuffer(self._elements, np.int64).copy()  # (the view dropped here)


def tile_dtype(num_tiles: int) -> np.dtype:
    """The integer type of an element space's tile array for a device of ``num_tiles``
    tiles: the narrowest of ``int16`` and ``int32`` holding every tile number and
    ``UNMAPPED`` (-1).

    The tile array holds one entry per element, the largest array a model's graph
    keeps (hundreds of millions of entries for a training step): ``int16`` halves it
    for every device up to 32,767 tiles (22 Mk2 IPUs of 1,472 tiles). ``int8`` would
    fit only toy devices of under 128 tiles, whose arrays are small, and would give
    every compiled kernel reading the array one more specialisation.

    Parameters
    ----------
    num_tiles
        Tiles of the whole device (every replica's), >= 1.

    Returns
    -------
    numpy.dtype
        ``int16`` when ``num_tiles - 1 <= 32767``, else ``int32``.
    """
    if num_tiles < 1 or num_tiles - 1 > np.iinfo(np.int32).max:
        raise GraphError(
            f"element space: a device of {num_tiles:,} tiles cannot be mapped; tile "
            f"numbers must fit an int32 (1 to {np.iinfo(np.int32).max + 1:,} tiles)"
        )
    if num_tiles - 1 <= np.iinfo(np.int16).max:
        return np.dtype(np.int16)
    return np.dtype(np.int32)


@numba.njit(cache=True, nogil=True)
def _gather(tile, ids, out):  # pragma: no cover - compiled
    # out[k] = tile[ids[k]], widened to int64 as it is written (ids, all >= 0, index
    # as unsigned: Numba tests a signed index for a negative one)
    for k in range(ids.size):
        out[k] = tile[np.uint64(ids[k])]


def _compiled_gather() -> Any:
    """:func:`_gather` compiled (or loaded from the disk cache) for the tile arrays of
    :func:`tile_dtype` (int16 and int32, C-contiguous) and read-only int64 ids of any
    strides alone: other types are converted to these, not compiled."""
    if not _gather.overloads:
        ids = numba.types.Array(numba.types.int64, 1, "A", readonly=True)
        for tile in (numba.types.int16[::1], numba.types.int32[::1]):
            _gather.compile((tile, ids, numba.types.int64[::1]))
        _gather.disable_compile()
    return _gather


class _Space:
    """The element ids of one element size: tile of each element and the owning variable.

    The tile of each element is an array (:attr:`tile`) while the graph is built and
    compiled. Once compiled the lowering no longer reads it, and a model's array is
    hundreds of megabytes held through the run: :meth:`compact` keeps it as runs of
    one tile instead (a mapping comes in long runs), :meth:`tiles_of` reads tiles from
    either form, and :attr:`tile` makes the array again when next asked for.

    Parameters
    ----------
    num_tiles
        Tiles of the whole device; the tile array's type is :func:`tile_dtype` of it.
    """

    def __init__(self, num_tiles: int = 2**15) -> None:
        self._tile = np.zeros(0, tile_dtype(num_tiles))
        #: the tiles as runs (first id of each run, its tile) while compacted, else None
        self._runs: tuple[np.ndarray, np.ndarray] | None = None
        self.size = 0
        self.var_bases: list[int] = []
        self.var_ids: list[int] = []

    @property
    def tile(self) -> np.ndarray:
        """Tile of each element (``UNMAPPED`` if none), by id; its first :attr:`size`
        entries are the elements'. Made again from the runs when compacted."""
        if self._runs is not None:
            starts, values = self._runs
            lengths = np.diff(np.append(starts, self.size))
            self._tile = np.repeat(values, lengths)
            self._runs = None
        return self._tile

    @tile.setter
    def tile(self, value: np.ndarray) -> None:
        self._tile, self._runs = value, None

    def runs(self, changes: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(starts, tiles)``: the first id (int64) and the tile of each run of elements
        of one tile, in id order (``changes``: the ids where the tile changes, if known)."""
        if self._runs is not None:
            return self._runs
        tiles = self._tile[: self.size]
        starts = np.flatnonzero(tiles[1:] != tiles[:-1]) + 1 if changes is None else changes
        starts = np.concatenate(([0], starts)) if tiles.size else starts
        return starts.astype(np.int64, copy=False), tiles[starts]

    def held_runs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(starts, tiles)`` of :meth:`runs` while the tiles are held as runs
        (:meth:`compact`), else ``None``: a reader that can use runs reads them without
        making the array again."""
        return self._runs

    def compact(self, changes: np.ndarray | None = None) -> None:
        """Keep the tiles as runs (:meth:`runs` of ``changes``) and free the array."""
        if self._runs is None:
            self._runs = self.runs(changes)
            self._tile = self._tile[:0].copy()

    def tiles_of(self, ids: np.ndarray | slice) -> np.ndarray:
        """Tile of elements ``ids`` (ids or a slice of them), the array not made again
        when compacted."""
        if self._runs is None:
            return self._tile[ids]
        starts, values = self._runs
        if isinstance(ids, slice):  # the ids of the slice alone
            ids = np.arange(*ids.indices(self.size), dtype=np.int64)
        return values[np.searchsorted(starts, ids, side="right") - 1]

    def wide_tiles_of(self, ids: np.ndarray | slice) -> np.ndarray:
        """:meth:`tiles_of` as a new int64 array: an array of ids is gathered and
        widened in one compiled pass (numpy's gather and ``astype`` walk the elements
        and allocate twice)."""
        if self._runs is not None or isinstance(ids, slice) or ids.dtype != np.int64:
            return self.tiles_of(ids).astype(np.int64)
        flat = ids.reshape(-1).view()  # read-only however the caller holds it
        flat.flags.writeable = False
        out = np.empty(flat.size, np.int64)
        _compiled_gather()(self._tile, flat, out)
        return out.reshape(ids.shape)

    def allocate(self, n: int, var_id: int, name: str = "") -> int:
        base = self.size
        tile = self.tile
        if base + n > tile.size:
            self.tile = tile = self._grown(base + n, var_id, name)
        self.size += n
        tile[base : self.size] = UNMAPPED
        self.var_bases.append(base)
        self.var_ids.append(var_id)
        return base

    def _grown(self, needed: int, var_id: int, name: str) -> np.ndarray:
        """The tile array moved to a new one of room for at least ``needed`` elements.

        Its capacity is :data:`GROWTH` times ``needed`` (twice, then exactly, if the
        host refuses that much address space): the spare capacity stays untouched,
        so costs no host memory until allocated, and the fewer times the array moves,
        the fewer pages its copies fault in (ResNet-50 inference's 201 M elements
        were copied 312 M times over, growing twice over from 1,024).
        """
        tile = self._tile
        for room in (max(needed * GROWTH, 1024), needed * 2, needed):
            try:
                grown = np.empty(room, tile.dtype)
                break
            except (MemoryError, ValueError):  # ValueError: beyond numpy's index range
                continue
        else:
            gib = tile.itemsize * (needed - self.size) / 2**30
            raise GraphError(
                f"tensor '{name or f'var{var_id}'}': {needed - self.size:,} elements are more "
                f"than this host can keep the tile of (about {gib:,.1f} GiB of host "
                "memory for the mapping alone); hint: a smaller tensor, or split it"
            )
        grown[: self.size] = tile[: self.size]
        return grown

    def allocate_many(self, sizes: np.ndarray, var_ids: list[int]) -> np.ndarray:
        """Consecutive blocks of ``sizes`` elements for variables ``var_ids``, in order:
        the bases ``allocate`` would give one call at a time, as an int64 array."""
        bases = self.size + np.concatenate(([0], np.cumsum(sizes[:-1], dtype=np.int64)))
        total = int(sizes.sum())
        if len(var_ids):
            self.allocate(total, var_ids[0])  # the whole range: grown, unmapped
            self.var_bases[-1:] = bases.tolist()
            self.var_ids[-1:] = var_ids
        return bases

    def __getstate__(self) -> dict[str, Any]:
        """Pickled state (executable files): the tiles as runs (:meth:`runs`), without
        the spare capacity of the array."""
        state = dict(self.__dict__)
        state["_tile"] = self._tile[:0].copy()  # the type, no elements
        state["_runs"] = self.runs()
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "tile" in state:  # saved as (tile of each run, its length)
            values, lengths = state.pop("tile")
            starts = np.concatenate(([0], np.cumsum(lengths[:-1], dtype=np.int64)))
            state["_tile"], state["_runs"] = values[:0].copy(), (starts[: values.size], values)
        self.__dict__.update(state)

    def variables_of(self, ids: np.ndarray) -> np.ndarray:
        """Variable id owning each element id."""
        pos = np.searchsorted(np.asarray(self.var_bases), ids, side="right") - 1
        return np.asarray(self.var_ids, np.int64)[pos]


@dataclass
class ComputeSet:
    """A set of vertices that run in parallel (one BSP compute phase)."""

    id: int
    name: str
    vertices: list[int] = field(default_factory=list)

    def getId(self) -> int:
        return self.id


class ReplicatedStreamMode(str, Enum):
    """How a host-to-device stream of a replicated graph feeds the replicas (Poplar's
    ``poplar::ReplicatedStreamMode``).

    ``REPLICATE`` (the default): every replica has its own data (the host buffer holds
    one part per replica, replica-major); ``BROADCAST``: one copy of the data goes to
    every replica.
    """

    REPLICATE = "REPLICATE"
    BROADCAST = "BROADCAST"


@dataclass(frozen=True)
class DataStream:
    """A host↔device FIFO made by ``addHostToDeviceFIFO`` / ``addDeviceToHostFIFO``.

    ``replicationFactor`` is that of the graph that made it: a stream of a replicated
    graph serves each of its replicas (``replicatedMode`` ``REPLICATE``), or sends
    every replica the same data (``BROADCAST``); 1 for a stream of a graph that is
    not replicated (including the non-replicated parent of a replicated graph).

    ``tiles``: the top-level tiles of the virtual graph that made the stream (its
    I/O tiles), or None for a stream of a top-level graph. Copies of such a stream
    involve only those tiles, so the other tiles compute meanwhile (overlapped I/O).
    """

    handle: str
    elementType: Type
    numElements: int
    toDevice: bool
    replicatedMode: ReplicatedStreamMode = ReplicatedStreamMode.REPLICATE
    replicationFactor: int = 1
    tiles: tuple[int, ...] | None = None

    def numElementsTotal(self) -> int:
        return self.numElements

    @property
    def broadcast(self) -> bool:
        """Whether one copy of the data feeds every replica (``BROADCAST``)."""
        return self.replicatedMode is ReplicatedStreamMode.BROADCAST

    @property
    def perReplica(self) -> bool:
        """Whether each replica has its own data (a ``REPLICATE`` stream of a graph of
        several replicas)."""
        return self.replicationFactor > 1 and not self.broadcast


@dataclass(frozen=True)
class Function:
    """A program made callable by ``graph.addFunction``."""

    index: int
    program: Program


@numba.njit(cache=True, nogil=True)
def _any_mapped(tiles):  # pragma: no cover - compiled
    """Whether one of ``tiles`` is a tile (mapped elements), not ``UNMAPPED`` (< 0):
    asked at each of the many setTileMapping calls of a hand-built graph, where
    ``tiles.max()`` took some 0.8 us and this takes 0.2."""
    for k in range(tiles.size):  # noqa: SIM110 - compiled: no generators in any()
        if tiles[k] >= 0:
            return True
    return False


@numba.njit(cache=True, nogil=True)
def _fill_block(tiles, start, stop, tile):  # pragma: no cover - compiled
    """``tiles[start:stop] = tile``, and whether one of them was mapped before (a
    remap): one call for what a slice's view, its check and its write cost three."""
    mapped = False
    for k in range(start, stop):
        mapped |= tiles[k] >= 0
        tiles[k] = tile
    return mapped


class _GraphState:
    """Everything a graph and its virtual graphs share."""

    #: counts the writes of tiles that overwrote a mapped element's (see
    #: ``Graph.getMappingVersion``); a class default for states saved without it
    mapping_version = 0
    #: whether remaps are counted: from the first ask for the version (or kept tiles)
    watching = False

    def __init__(self, target: Target) -> None:
        self.target = target
        self.mapping_version = 0
        self.watching = False  # (an instance attribute: read at every setTileMapping)
        #: element size in bytes -> the id space shared by the types of that size
        self.spaces: dict[int, _Space] = {}
        self.variables = VariableTable()
        self.initial: dict[int, tuple[np.ndarray, np.ndarray]] = {}  # var id -> (ids, values)
        #: initial values: (element type, element ids (a range when consecutive), values)
        self.initial_parts: list[tuple[Type, np.ndarray | range, np.ndarray]] = []
        self.codelets: dict[str, VertexType] = {}
        self.compute_sets: list[ComputeSet] = []
        self.vertices = VertexTable()
        self.host_writes: dict[str, Tensor] = {}
        self.host_reads: dict[str, Tensor] = {}
        self.streams: dict[str, DataStream] = {}
        self.functions: list[Function] = []
        #: replicas of the graph; ``target`` is then one replica's target
        self.replication_factor = 1
        #: the target of the whole device (every replica)
        self.device_target = target
        #: the graph object of non-replicated views (``getNonReplicatedTensor``)
        self.nonreplicated: NonReplicatedView | None = None

    def space(self, t: Type) -> _Space:
        """The id space of element type ``t`` (shared by every type of its size)."""
        sp = self.spaces.get(t.size)
        if sp is None:
            sp = self.spaces[t.size] = _Space(self.device_target.getNumTiles())
        return sp

    def find_space(self, t: Type) -> _Space | None:
        """The id space of ``t``, or None when no element of its size exists yet."""
        return self.spaces.get(t.size)

    def note_write(self, size: int, at: Any, old: np.ndarray | np.integer) -> None:
        """Before tiles are written over ``old``, the tiles of elements ``at`` (an id, a
        slice of ids or an id array) of the space of element size ``size``: a new
        mapping version when one of them is mapped already, its id span noted (a
        remap). Mapping an element for the first time changes no tile anyone found,
        so leaves the version."""
        if not self.watching:
            return
        if isinstance(old, np.ndarray):
            if not _any_mapped(old):  # (old.max() costs a ufunc reduction a call)
                return
        elif old < 0:  # one element's tile
            return
        if isinstance(at, slice):
            lo, hi = at.start, at.stop - 1
        elif isinstance(at, int | np.integer):
            lo = hi = int(at)
        else:
            lo, hi = int(at.min()), int(at.max())
        self.note_remap(size, lo, hi)

    def note_remap(self, size: int, lo: int, hi: int) -> None:
        """A remap of elements of size ``size`` with ids in ``[lo, hi]``: a new mapping
        version, the span noted."""
        self.__dict__.setdefault("remaps", []).append((size, lo, hi))
        self.mapping_version += 1

    def remapped_since(self, version: int, size: int, lo: int, hi: int) -> bool:
        """Whether a remap after mapping version ``version`` wrote over an element of
        size ``size`` with an id in ``[lo, hi]``."""
        for s, a, b in self.__dict__.get("remaps", [])[version:]:
            if s == size and a <= hi and b >= lo:
                return True
        return False


class TilesMemo:
    """The tiles of recently asked tensors (``Graph.elementTiles(t, readonly=True)``),
    read-only, each kept while no remap writes over one of its elements' ids (a remap
    of other tensors' elements, e.g. a new output mapped again as its vertices are
    placed, leaves it) and at most :attr:`BUDGET` elements in all, the least recently
    asked dropped first.

    A tensor is known by its consecutive ids (element size, first id, count) or by its
    index array, held by a weak reference (an entry whose array is gone is dropped:
    another array may get its ``id``). Only tiles of mapped elements are kept, as a
    first mapping of an element leaves the version.
    """

    BUDGET = 1 << 22

    def __init__(self) -> None:
        #: key -> (weak reference to the index or None, tiles, version checked at)
        self.entries: dict[tuple, tuple[Any, np.ndarray, int]] = {}  # (in order of use)
        self.held = 0

    @staticmethod
    def _key(t: Tensor) -> tuple:
        if t._start >= 0:
            return (t._type.size, t._start, t.numElements())
        return (t._type.size, id(t._ix))

    def get(self, t: Tensor, state: _GraphState) -> np.ndarray | None:
        """The tiles kept for ``t`` if still its tiles, or None."""
        key = self._key(t)
        found = self.entries.pop(key, None)
        if found is None:
            return None
        ref, tiles, version = found
        if version != state.mapping_version:
            if (ref is not None and ref() is not t._ix) or _remapped(t, state, version):
                self.held -= tiles.size
                return None
            found = (ref, tiles, state.mapping_version)
        elif ref is not None and ref() is not t._ix:  # (another array's id)
            self.held -= tiles.size
            return None
        self.entries[key] = found  # (the most recently used)
        return tiles

    def put(self, t: Tensor, tiles: np.ndarray, state: _GraphState) -> None:
        """Keep ``tiles`` (read-only, every element mapped) for ``t``."""
        if tiles.size > self.BUDGET:
            return
        key = self._key(t)
        old = self.entries.pop(key, None)
        if old is not None:
            self.held -= old[1].size
        while self.entries and self.held + tiles.size > self.BUDGET:
            self.held -= self.entries.pop(next(iter(self.entries)))[1].size
        ref = None if t._start >= 0 else weakref.ref(t._ix)
        state.watching = True  # (remaps counted from now on)
        self.entries[key] = (ref, tiles, state.mapping_version)
        self.held += tiles.size


def _remapped(t: Tensor, state: _GraphState, version: int) -> bool:
    """Whether a remap after ``version`` wrote over the ids of ``t``'s elements (their
    span: a remap near them drops them too)."""
    if t._start >= 0:
        lo, hi = t._start, t._start + t.numElements() - 1
    else:
        lo, hi = int(t._ix.min()), int(t._ix.max())
    return state.remapped_since(version, t._type.size, lo, hi)


class NonReplicatedView:
    """The graph of the tensors ``getNonReplicatedTensor`` returns: the elements of
    every replica of a replicated graph, seen from its non-replicated top level.

    A tensor of this view has element ids ``replica * WIDE_STRIDE + id`` (see
    :func:`~poplar_api.lowering.context.wide_ids`); its graph identity keeps it from
    mixing with replicated tensors.
    """

    def __init__(self, state: _GraphState) -> None:
        self.state = state

    def __repr__(self) -> str:
        return f"NonReplicatedView({self.state.replication_factor} replicas)"


def replication_factor(state: Any) -> int:
    """Replicas of a graph state (1 for states saved before replication existed)."""
    return int(vars(state).get("replication_factor", 1))


def is_nonreplicated(t: Any, state: Any) -> bool:
    """Whether ``t`` is a non-replicated view (``getNonReplicatedTensor``) of ``state``."""
    view = vars(state).get("nonreplicated")
    return view is not None and isinstance(t, Tensor) and t.graph is view


def _check_replication(value: Any, target: Target, what: str) -> int:
    """A replication factor: an int >= 1 that divides the target's IPUs."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise GraphError(
            f"{what}: replication factor {value!r} must be an int >= 1; hint: the number "
            "of replicas, e.g. 4"
        )
    n = target.getNumIPUs()
    if n % int(value):
        divisors = [d for d in range(1, n + 1) if n % d == 0]
        raise GraphError(
            f"{what}: replication factor {int(value)} does not divide the target's {n} "
            f"IPU(s); every replica needs the same whole number of IPUs; hint: use one of "
            f"{divisors}, or a device of {int(value)} x (IPUs per replica) IPUs"
        )
    return int(value)


def _replica_target(target: Target, replicas: int) -> Target:
    """The target of one replica: the device's IPUs divided among ``replicas``.

    Runs are timed on the whole device's machine (its links carry every replica), so
    the replica's own link wiring only has to be valid: where the device's wiring does
    not fit a replica's IPU count (a ladder of 3 IPUs, custom edges beyond it), the
    replica's IPUs are taken as fully connected.
    """
    if replicas == 1:
        return target
    per_replica = {"num_ipus": target.getNumIPUs() // replicas}
    try:
        cfg = with_overrides(target.config, per_replica)
    except ConfigError:
        neutral = {
            "links.topology": "full",
            "links.edges": [],
            "links.torus": False,
            "links.gw_links.ipus_per_rack": None,
        }
        cfg = with_overrides(target.config, {**per_replica, **neutral})
    return Target(cfg, target.targetType)


def _shape_of(shape: Any, what: str) -> tuple[int, ...]:
    if isinstance(shape, int | np.integer):
        shape = [shape]
    try:
        items = list(shape)
    except TypeError:
        raise GraphError(f"{what}: shape {shape!r} must be a list of ints") from None
    if any(isinstance(d, bool) or not isinstance(d, int | np.integer) for d in items):
        raise GraphError(f"{what}: shape {items!r} must be a list of ints")
    dims = tuple(int(d) for d in items)
    if any(d < 0 for d in dims):
        raise GraphError(f"{what}: shape {list(dims)} has a negative dimension")
    return dims


def _interval_bounds(iv: Any, what: str) -> tuple[int, int]:
    """``(begin, end)`` of an Interval or a pair of ints."""
    if isinstance(iv, Interval):
        return iv.begin(), iv.end()
    try:
        b, e = iv
    except (TypeError, ValueError):
        raise GraphError(
            f"{what}: {iv!r} is not an interval; hint: Interval(begin, end) or (begin, end)"
        ) from None
    for v in (b, e):
        if isinstance(v, bool) or not isinstance(v, int | np.integer):
            raise GraphError(f"{what}: interval {iv!r} must hold two ints (begin, end)")
    if e < b:
        raise GraphError(f"{what}: interval [{b}, {e}) ends before it begins")
    return int(b), int(e)


class _VirtualTarget(Target):
    """The target seen by a virtual graph: the parent's with fewer tiles."""

    def __init__(self, parent: Target, numTiles: int) -> None:
        super().__init__(parent.config, parent.targetType)
        self._num = numTiles

    def getNumTiles(self) -> int:
        return self._num

    def getTilesPerIPU(self) -> int:
        return min(self._num, super().getTilesPerIPU())


def initial_values(type_: Type, values: Any, what: str) -> np.ndarray:
    """``values`` as ``type_``'s storage dtype, refused when they are not numbers or, for
    an integer type, lie outside its range (numpy would wrap them silently).

    Raises
    ------
    TensorError
        Naming ``what`` (the tensor), the value found and the range of the type.
    """
    arr = values if type(values) is np.ndarray else np.asarray(values)
    if arr.dtype.kind not in "biuf":
        raise TensorError(
            f"{what}: initial values must be numbers for a {type_.name} tensor, got "
            f"{arr.dtype.name} values (e.g. {arr.reshape(-1)[:1].tolist()}); hint: "
            "pass numbers or a numeric numpy array"
        )
    if type_.is_integral and arr.size and arr.dtype.kind in "iuf":
        info = np.iinfo(type_.numpy)
        low, high = arr.min(), arr.max()
        if low < info.min or high > info.max:
            bad = low if low < info.min else high
            raise TensorError(
                f"{what}: initial value {bad.item()} is outside the range of "
                f"{type_.name} [{info.min}, {info.max}]; hint: use a wider type or "
                "values in range"
            )
    if type_.is_floating and arr.size and arr.dtype.kind in "iuf":
        big = np.abs(arr[np.isfinite(arr)]) if arr.dtype.kind == "f" else np.abs(arr)
        limit = float(np.finfo(type_.numpy).max)
        if big.size and float(big.max()) > limit:
            raise TensorError(
                f"{what}: initial value of magnitude {float(big.max()):g} is beyond the "
                f"largest {type_.name} ({limit:g}) and would be stored as infinity; hint: "
                "scale the values or use a wider type"
            )
    return arr.astype(type_.numpy, copy=False)
