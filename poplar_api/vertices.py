"""The vertices of a graph, stored as columns.

A graph keeps one row per vertex: its type, compute set, tile and cycle estimate in
typed arrays, and its connections as the element ids of the connected tensors. Graphs
of a million vertices are common, so a vertex costs a few dozen bytes and, unless it
has a VectorList field (whose list the collector tracks), no object that Python's
cycle collector has to visit (its connections dict holds only ranges and numpy
arrays, which the collector ignores). :class:`VertexInstance` is a handle made on
demand to read or change one row.

A scalar or vector field's connection holds the connected tensor's element ids: a
``range`` when they are known to be consecutive (a variable, its rows and slices of
rows: the common case, which lowering handles as runs), else the tensor's read-only
int64 index array in its shape (a numpy view where the tensor is one; fields read it
in row-major order). ``numpy.asarray`` gives the ids of either. The field declares the
element type, and connecting checks that the tensor has it. A VectorList field holds a
list with one id array (or ``None`` while unconnected) per vector.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator
from typing import Any

import numpy as np

from poplar_api.codelet import VertexType
from poplar_api.tensor import Tensor

__all__ = [
    "NO_ESTIMATE",
    "UNMAPPED",
    "VertexInstance",
    "VertexTable",
    "connection_ids",
    "id_array",
    "id_count",
    "type_groups",
]

#: Tile of a vertex (or tensor element) that is not mapped yet.
UNMAPPED = -1
#: Estimate column value of a vertex whose cycles come from its type's estimator.
NO_ESTIMATE = -1


class VertexTable:
    """Every vertex of a graph: one row each, in the order they were added."""

    def __init__(self) -> None:
        #: the distinct vertex types; a row holds the position of its type here
        self.types: list[VertexType] = []
        self._codes: dict[int, int] = {}
        self.type_code = array("i")
        self.cs = array("i")
        self.tile = array("i")
        self.estimate = array("q")
        #: field name -> element ids (or a list of them for a VectorList), per vertex
        self.fields: list[dict[str, Any]] = []
        #: vertex -> VectorList field -> number of vectors (only vertices that have one)
        self.list_sizes: dict[int, dict[str, int]] = {}

    def __len__(self) -> int:
        return len(self.type_code)

    def __getitem__(self, vid: int) -> VertexInstance:
        if not -len(self) <= vid < len(self):
            raise IndexError(f"vertex {vid} does not exist ({len(self)} vertices)")
        return VertexInstance(self, vid % len(self) if vid < 0 else vid)

    def __iter__(self) -> Iterator[VertexInstance]:
        return (VertexInstance(self, v) for v in range(len(self)))

    def append(self, vtype: VertexType, cs: int) -> int:
        """Add an unmapped, unconnected vertex of ``vtype`` to compute set ``cs``; its id."""
        code = self._codes.get(id(vtype))
        if code is None:
            code = self._codes[id(vtype)] = len(self.types)
            self.types.append(vtype)
        vid = len(self.type_code)
        self.type_code.append(code)
        self.cs.append(cs)
        self.tile.append(UNMAPPED)
        self.estimate.append(NO_ESTIMATE)
        self.fields.append({})
        return vid

    def pop(self) -> None:
        """Remove the last vertex (a failed ``addVertex``)."""
        vid = len(self) - 1
        for column in (self.type_code, self.cs, self.tile, self.estimate, self.fields):
            column.pop()
        self.list_sizes.pop(vid, None)

    def vtype(self, vid: int) -> VertexType:
        return self.types[self.type_code[vid]]

    def column(self, name: str, vids: Any) -> np.ndarray:
        """Values of column ``name`` (``type_code``, ``cs``, ``tile``, ``estimate``) of the
        vertices ``vids``, as a new int64 array."""
        col = getattr(self, name)
        view = np.frombuffer(col, np.int32 if col.typecode == "i" else np.int64)
        try:
            return view[np.asarray(vids, np.int64)].astype(np.int64)
        finally:
            del view  # the array may grow again only once no view of it is left

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_codes"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._codes = {id(t): i for i, t in enumerate(self.types)}


def connection_ids(t: Tensor) -> range | np.ndarray:
    """What a scalar or vector field keeps of a connected tensor: its ids as a range
    when they are known to be consecutive, else its index array."""
    start = t._start
    return t._index if start < 0 else range(start, start + math.prod(t._shape))


def id_count(value: range | np.ndarray) -> int:
    """Number of element ids a connection holds (without making an array of a range)."""
    return len(value) if type(value) is range else int(value.size)


def id_array(value: range | np.ndarray) -> np.ndarray:
    """A connection's ids as a 1-D int64 array in row-major order."""
    if type(value) is range:
        return np.arange(value.start, value.stop, dtype=np.int64)
    return np.asarray(value, np.int64).reshape(-1)


def type_groups(codes: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``(type code, positions in codes)`` of each type in ``codes``, in order of first
    appearance (the order vertex types are listed in profiles)."""
    kinds, first = np.unique(codes, return_index=True)
    if kinds.size == 1:
        return [(int(kinds[0]), np.arange(codes.size, dtype=np.int64))]
    return [(k, np.flatnonzero(codes == k)) for k in kinds[np.argsort(first)].tolist()]


class VertexInstance:
    """One vertex of a :class:`VertexTable`: its type, compute set, tile, connections and
    cycle estimate (``None`` when its type's estimator gives them)."""

    __slots__ = ("id", "table")

    def __init__(self, table: VertexTable, vid: int) -> None:
        self.table = table
        self.id = vid

    @property
    def vtype(self) -> VertexType:
        return self.table.types[self.table.type_code[self.id]]

    @property
    def cs(self) -> int:
        return self.table.cs[self.id]

    @property
    def tile(self) -> int:
        return self.table.tile[self.id]

    @tile.setter
    def tile(self, tile: int) -> None:
        self.table.tile[self.id] = tile

    @property
    def perf_estimate(self) -> int | None:
        cycles = self.table.estimate[self.id]
        return None if cycles == NO_ESTIMATE else cycles

    @perf_estimate.setter
    def perf_estimate(self, cycles: int | None) -> None:
        self.table.estimate[self.id] = NO_ESTIMATE if cycles is None else cycles

    @property
    def fields(self) -> dict[str, Any]:
        """Field name -> connected element ids in the connected tensor's shape (a list
        of them for a VectorList)."""
        return self.table.fields[self.id]

    @property
    def list_sizes(self) -> dict[str, int]:
        """VectorList field name -> number of vectors (set by connecting or
        ``setFieldSize``)."""
        return self.table.list_sizes.setdefault(self.id, {})

    def tensor(self, name: str, state: Any) -> Tensor | list[Tensor | None] | None:
        """The tensor connected to field ``name`` as a view of the graph state ``state``
        (``graph._state``; a list for a VectorList field, ``None`` where nothing is
        connected)."""
        value = self.fields.get(name)
        ftype = self.vtype.field(name).element_type
        what = f"v{self.id}.{name}"
        if isinstance(value, list):
            return [
                None if ids is None else Tensor._new(state, ftype, ids, what, what) for ids in value
            ]
        if isinstance(value, range):
            value = id_array(value)
        return None if value is None else Tensor._new(state, ftype, value, what, what)

    def describe(self) -> str:
        return f"vertex {self.id} ({self.vtype.name})"

    def __repr__(self) -> str:
        return f"VertexInstance({self.describe()})"
