"""The vertices of a graph, stored as columns.

A graph keeps one row per vertex: its type, compute set, tile and cycle estimate in
typed arrays. Graphs of a million vertices are common, so a vertex costs a few dozen
bytes and no Python object of its own.

A scalar or vector field's connection holds the connected tensor's element ids. When
they are known to be consecutive (a variable, its rows and slices of rows: the common
case, which lowering handles as runs) they are a run ``[begin, end)`` in the columns of
the vertex's type, one pair per scalar and vector field. Other connections (the
tensor's read-only int64 index array in its shape, read in row-major order) and
VectorList fields (a list with one id array, or ``None`` while unconnected, per
vector) are kept in a per-vertex dict beside the columns. VectorLists connected in
bulk (``addVertices``) are kept as a :class:`ListBlock` per call instead: per vertex
its number of vectors, per vector a ``[begin, end)`` piece of one id array, so that
adding and lowering them makes no Python object per vertex; a vertex of a block
moves to the dicts when it is changed one field at a time. ``vertex.fields`` reads and
changes both as one mapping: a run reads as a ``range``; ``numpy.asarray`` gives the
ids of either. The field declares the element type, and connecting checks that the
tensor has it.
"""

from __future__ import annotations

import math
from array import array
from bisect import bisect_right
from collections.abc import Iterator, MutableMapping
from typing import Any

import numpy as np

from poplar_api.codelet import VertexType
from poplar_api.run_ids import RunIds, as_runs
from poplar_api.tensor import Tensor

__all__ = [
    "NO_ESTIMATE",
    "UNMAPPED",
    "ListBlock",
    "TypeRuns",
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
#: Begin of a run column whose field holds no run (unconnected, or kept as ids).
NO_RUN = -1
_MISSING = object()


class TypeRuns:
    """The runs of one vertex type's scalar and vector fields: per vertex of the type
    (in the order they were added), ``begin, end`` of each such field in declaration
    order, ``begin`` :data:`NO_RUN` where the field holds no run.

    Attributes
    ----------
    slot
        Field name -> position of its ``begin`` in a row.
    check
        Field name -> ``(slot, element type, takes a vector)``: what connecting a
        tensor to the field checks, in one look-up.
    width
        Numbers per row (two per scalar and vector field).
    runs
        The rows, one after another.
    """

    __slots__ = ("check", "runs", "slot", "template", "width")

    def __init__(self, vtype: VertexType) -> None:
        specs = [f for f in vtype.fields if f.kind != "vectorlist"]
        self.slot = {f.name: 2 * i for i, f in enumerate(specs)}
        self.check = {
            f.name: (2 * i, f.element_type, f.kind == "vector") for i, f in enumerate(specs)
        }
        self.width = 2 * len(specs)
        self.template = array("q", [NO_RUN, 0] * len(specs))
        self.runs = array("q")

    def rows(self, rows: np.ndarray) -> np.ndarray:
        """The rows ``rows`` as a new ``(len(rows), width)`` int64 array."""
        if not self.width:
            return np.zeros((len(rows), 0), np.int64)
        view = np.frombuffer(self.runs, np.int64)
        try:
            return view.reshape(-1, self.width)[rows]
        finally:
            del view  # the array may grow again only once no view of it is left


class ListBlock:
    """VectorList connections of the vertices ``first, first + 1, ...`` added together.

    Attributes
    ----------
    first, n
        The first vertex and the number of vertices.
    fields
        Field name -> ``(vector offsets, piece begins, piece ends, ids)``: vertex ``i``
        has the vectors ``vector offsets[i]`` to ``vector offsets[i + 1]``; vector ``k``
        is ``ids[piece begins[k]:piece ends[k]]``. Ids that are mostly runs of
        consecutive elements are kept as :class:`~poplar_api.run_ids.RunIds` (what a
        convolution reading operands laid out as its plan wants connects).
    moved
        Per vertex, whether its VectorLists moved to the table's per-vertex dicts (then
        this block no longer holds them).
    """

    __slots__ = ("fields", "first", "moved", "n")

    def __init__(self, first: int, n: int, fields: dict[str, tuple[Any, ...]]) -> None:
        self.first = first
        self.n = n
        self.fields = {name: _compact(value) for name, value in fields.items()}
        self.moved = np.zeros(n, bool)

    def vectors(self, i: int, name: str) -> list[np.ndarray]:
        """The id arrays of field ``name`` of the block's vertex ``i``."""
        offsets, begins, ends, ids = self.fields[name]
        a, b = int(offsets[i]), int(offsets[i + 1])
        # int64 as every connection's ids (a block may hold them as int32), read-only
        out = [
            ids[o:e].astype(np.int64, copy=False)
            for o, e in zip(begins[a:b].tolist(), ends[a:b].tolist(), strict=True)
        ]
        for vector in out:
            vector.flags.writeable = False
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for k, v in state.items():
            setattr(self, k, v)


def _compact(field: tuple[Any, ...]) -> tuple[Any, ...]:
    """A list block's field with its ids as runs where they are mostly runs."""
    ids = field[3]
    runs = None if isinstance(ids, RunIds) else as_runs(ids)
    return field if runs is None else (*field[:3], runs)


class VertexTable:
    """Every vertex of a graph: one row each, in the order they were added."""

    def __init__(self) -> None:
        #: the distinct vertex types; a row holds the position of its type here
        self.types: list[VertexType] = []
        #: the field runs of each type, by type code
        self.type_runs: list[TypeRuns] = []
        self._codes: dict[int, int] = {}
        self.type_code = array("i")
        self.cs = array("i")
        self.tile = array("i")
        self.estimate = array("q")
        #: row of each vertex in its type's runs
        self.row = array("q")
        #: vertex -> field name -> element ids (or a list of them for a VectorList), for
        #: the connections that are not runs
        self.extra: dict[int, dict[str, Any]] = {}
        #: vertex -> VectorList field -> number of vectors (only vertices that have one)
        self.list_sizes: dict[int, dict[str, int]] = {}
        #: VectorLists connected in bulk, by first vertex
        self.list_blocks: list[ListBlock] = []
        self.block_first: list[int] = []

    def __len__(self) -> int:
        return len(self.type_code)

    def __getitem__(self, vid: int) -> VertexInstance:
        if not -len(self) <= vid < len(self):
            raise IndexError(f"vertex {vid} does not exist ({len(self)} vertices)")
        return VertexInstance(self, vid % len(self) if vid < 0 else vid)

    def __iter__(self) -> Iterator[VertexInstance]:
        return (VertexInstance(self, v) for v in range(len(self)))

    def code_of(self, vtype: VertexType) -> int:
        """The type code of ``vtype`` (registered on first use)."""
        code = self._codes.get(id(vtype))
        if code is None:
            code = self._codes[id(vtype)] = len(self.types)
            self.types.append(vtype)
            self.type_runs.append(TypeRuns(vtype))
        return code

    def append(self, vtype: VertexType, cs: int) -> int:
        """Add an unmapped, unconnected vertex of ``vtype`` to compute set ``cs``; its id."""
        code = self._codes.get(id(vtype))
        if code is None:
            code = self.code_of(vtype)
        runs = self.type_runs[code]
        vid = len(self.type_code)
        self.type_code.append(code)
        self.cs.append(cs)
        self.tile.append(UNMAPPED)
        self.estimate.append(NO_ESTIMATE)
        self.row.append(len(runs.runs) // runs.width if runs.width else 0)
        runs.runs.extend(runs.template)
        return vid

    def extend(self, vtype: VertexType, cs: int, tiles: np.ndarray, estimates: np.ndarray) -> int:
        """Add ``len(tiles)`` unconnected vertices of ``vtype`` to compute set ``cs`` at
        once, on root ``tiles`` (int32) with ``estimates`` (int64, :data:`NO_ESTIMATE`
        for the type's estimator); the id of the first. The same rows as as many
        :meth:`append` calls followed by setting tile and estimate."""
        code = self._codes.get(id(vtype))
        if code is None:
            code = self.code_of(vtype)
        runs = self.type_runs[code]
        n = int(tiles.size)
        first = len(self.type_code)
        first_row = len(runs.runs) // runs.width if runs.width else 0
        self.type_code.extend(array("i", (code,)) * n)
        self.cs.extend(array("i", (cs,)) * n)
        self.tile.frombytes(np.ascontiguousarray(tiles, np.int32).tobytes())
        self.estimate.frombytes(np.ascontiguousarray(estimates, np.int64).tobytes())
        if runs.width:
            self.row.extend(array("q", range(first_row, first_row + n)))
            runs.runs.extend(runs.template * n)
        else:
            self.row.extend(array("q", (0,)) * n)
        return first

    def extend_types(
        self,
        vtypes: list[VertexType],
        which: np.ndarray | None,
        cs: int,
        tiles: np.ndarray,
        estimates: np.ndarray,
    ) -> tuple[int, np.ndarray]:
        """:meth:`extend` for vertices of several types: vertex ``i`` is of type
        ``vtypes[which[i]]`` (``which`` None: all of ``vtypes[0]``). Returns the first id
        and each vertex's row in its type's runs."""
        n = int(tiles.size)
        if which is None:
            first = self.extend(vtypes[0], cs, tiles, estimates)
            row0 = self.row[first] if n else 0
            return first, np.arange(row0, row0 + n, dtype=np.int64)
        codes = [self.code_of(vt) for vt in vtypes]
        first = len(self.type_code)
        self.type_code.frombytes(np.asarray(codes, np.int32)[which].tobytes())
        self.cs.extend(array("i", (cs,)) * n)
        self.tile.frombytes(np.ascontiguousarray(tiles, np.int32).tobytes())
        self.estimate.frombytes(np.ascontiguousarray(estimates, np.int64).tobytes())
        rows = np.zeros(n, np.int64)
        for k, code in enumerate(codes):
            runs = self.type_runs[code]
            mine = which == k
            count = int(np.count_nonzero(mine))
            if runs.width and count:
                base = len(runs.runs) // runs.width
                rows[mine] = np.arange(base, base + count, dtype=np.int64)
                runs.runs.extend(runs.template * count)
        self.row.frombytes(rows.tobytes())
        return first, rows

    def set_runs(
        self, vtype: VertexType, rows: np.ndarray, name: str, begins: np.ndarray, ends: np.ndarray
    ) -> None:
        """Set field ``name`` of the ``vtype`` vertices at type rows ``rows`` to the runs
        ``[begins[i], ends[i])`` (``begins`` >= 0)."""
        runs = self.type_runs[self.code_of(vtype)]
        slot = runs.slot[name]
        view = np.frombuffer(runs.runs, np.int64).reshape(-1, runs.width)
        try:
            view[rows, slot] = begins
            view[rows, slot + 1] = ends
        finally:
            del view  # the array may grow again only once no view of it is left

    def add_list_block(self, block: ListBlock) -> None:
        """Keep the bulk-connected VectorLists ``block`` (of vertices added last)."""
        self.list_blocks.append(block)
        self.block_first.append(block.first)

    def block_of(self, vid: int) -> tuple[ListBlock | None, int]:
        """The block holding the VectorLists of vertex ``vid`` and its position there
        (``None, 0`` when its VectorLists are in the per-vertex dicts)."""
        k = bisect_right(self.block_first, vid) - 1
        if k >= 0:
            block = self.list_blocks[k]
            i = vid - block.first
            if i < block.n and not block.moved[i]:
                return block, i
        return None, 0

    def move_lists(self, vid: int) -> None:
        """Move the VectorLists of vertex ``vid`` from its block (if any) to the
        per-vertex dicts, before they are changed there."""
        if not self.list_blocks:
            return
        block, i = self.block_of(vid)
        if block is None:
            return
        extra = self.extra.setdefault(vid, {})
        sizes = self.list_sizes.setdefault(vid, {})
        for name, (offsets, *_rest) in block.fields.items():
            extra[name] = block.vectors(i, name)
            sizes[name] = int(offsets[i + 1] - offsets[i])
        block.moved[i] = True

    def truncate(self, n: int) -> None:
        """Remove every vertex from id ``n`` on (a failed bulk add)."""
        while self.list_blocks and self.list_blocks[-1].first >= n:
            self.list_blocks.pop()
            self.block_first.pop()
        while len(self) > n:
            self.pop()

    def pop(self) -> None:
        """Remove the last vertex (a failed ``addVertex``)."""
        vid = len(self) - 1
        runs = self.type_runs[self.type_code[vid]]
        if runs.width:
            del runs.runs[-runs.width :]
        for column in (self.type_code, self.cs, self.tile, self.estimate, self.row):
            column.pop()
        self.extra.pop(vid, None)
        self.list_sizes.pop(vid, None)

    def vtype(self, vid: int) -> VertexType:
        return self.types[self.type_code[vid]]

    def column(self, name: str, vids: Any) -> np.ndarray:
        """Values of column ``name`` (``type_code``, ``cs``, ``tile``, ``estimate``,
        ``row``) of the vertices ``vids``, as a new int64 array."""
        col = getattr(self, name)
        view = np.frombuffer(col, np.int32 if col.typecode == "i" else np.int64)
        try:
            return view[np.asarray(vids, np.int64)].astype(np.int64)
        finally:
            del view  # the array may grow again only once no view of it is left

    # ----------------------------------------------------------- connections
    def get_field(self, vid: int, name: str, default: Any = None) -> Any:
        """What field ``name`` of vertex ``vid`` holds (a ``range`` for a run), else
        ``default``."""
        runs = self.type_runs[self.type_code[vid]]
        slot = runs.slot.get(name)
        if slot is not None:
            at = self.row[vid] * runs.width + slot
            begin = runs.runs[at]
            if begin != NO_RUN:
                return range(begin, runs.runs[at + 1])
        extra = self.extra.get(vid)
        if extra is not None and name in extra:
            value = extra[name]
            if type(value) is np.ndarray and value.dtype != np.int64:
                value = value.astype(np.int64)  # kept as int32: read back as int64
                value.flags.writeable = False
            return value
        if self.list_blocks:
            block, i = self.block_of(vid)
            if block is not None and name in block.fields:
                return block.vectors(i, name)
        return default

    def set_field(self, vid: int, name: str, value: Any) -> None:
        """Connect field ``name`` of vertex ``vid`` to ``value`` (a ``range`` of ids, an
        id array, or a VectorList's list); ``None`` disconnects it."""
        if self.list_blocks:
            self.move_lists(vid)
        runs = self.type_runs[self.type_code[vid]]
        slot = runs.slot.get(name)
        if slot is not None:
            at = self.row[vid] * runs.width + slot
            if type(value) is range and value.step == 1 and value.start >= 0:
                runs.runs[at] = value.start
                runs.runs[at + 1] = max(value.stop, value.start)
                self._drop_extra(vid, name)
                return
            runs.runs[at] = NO_RUN
        if value is None:
            self._drop_extra(vid, name)
        else:
            self.extra.setdefault(vid, {})[name] = value

    def _drop_extra(self, vid: int, name: str) -> None:
        extra = self.extra.get(vid)
        if extra is not None and extra.pop(name, None) is not None and not extra:
            del self.extra[vid]

    def unconnected(self, vid: int, names: list[str]) -> bool:
        """Whether one of the fields ``names`` of vertex ``vid``, none of them held as a
        run, is unconnected or is a VectorList with an unconnected vector."""
        extra = self.extra.get(vid) or {}
        block = self.block_of(vid)[0] if self.list_blocks else None
        for name in names:
            if block is not None and name in block.fields:
                continue  # a bulk-connected VectorList: every vector connected
            value = extra.get(name)
            if value is None or (type(value) is list and any(ids is None for ids in value)):
                return True
        return False

    def field_names(self, vid: int) -> list[str]:
        """The connected fields of vertex ``vid``, in declaration order."""
        vtype = self.types[self.type_code[vid]]
        return [
            f.name for f in vtype.fields if self.get_field(vid, f.name, _MISSING) is not _MISSING
        ]

    @property
    def fields(self) -> _FieldsColumn:
        """Per vertex, its connections as a mutable mapping (``fields[vid]["in"]``)."""
        return _FieldsColumn(self)

    def edge_count(self) -> int:
        """Connections of every vertex (a VectorList counts one per vector)."""
        edges = 0
        for runs in self.type_runs:
            if runs.width:
                edges += int(np.count_nonzero(np.frombuffer(runs.runs, np.int64)[::2] != NO_RUN))
        for extra in self.extra.values():
            edges += sum(len(v) if isinstance(v, list) else 1 for v in extra.values())
        for block in self.list_blocks:
            for offsets, *_rest in block.fields.values():
                edges += int(np.diff(offsets)[~block.moved].sum())
        return edges

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_codes"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("list_blocks", [])
        self.__dict__.setdefault("block_first", [])
        self._codes = {id(t): i for i, t in enumerate(self.types)}


class _FieldsColumn:
    """``table.fields``: the connections of each vertex, ``fields[vid]`` a mapping."""

    __slots__ = ("table",)

    def __init__(self, table: VertexTable) -> None:
        self.table = table

    def __len__(self) -> int:
        return len(self.table)

    def __getitem__(self, vid: int) -> VertexFields:
        n = len(self.table)
        if not -n <= vid < n:
            raise IndexError(f"vertex {vid} does not exist ({n} vertices)")
        return VertexFields(self.table, vid % n)

    def __iter__(self) -> Iterator[VertexFields]:
        return (VertexFields(self.table, v) for v in range(len(self.table)))


class VertexFields(MutableMapping):
    """Field name -> connected element ids of one vertex (a ``range`` for a run, a
    list of id arrays for a VectorList), read from and written to its table."""

    __slots__ = ("id", "table")

    def __init__(self, table: VertexTable, vid: int) -> None:
        self.table = table
        self.id = vid

    def __getitem__(self, name: str) -> Any:
        value = self.table.get_field(self.id, name, _MISSING)
        if value is _MISSING:
            raise KeyError(name)
        return value

    def get(self, name: str, default: Any = None) -> Any:
        return self.table.get_field(self.id, name, default)

    def __setitem__(self, name: str, value: Any) -> None:
        self.table.set_field(self.id, name, value)

    def __delitem__(self, name: str) -> None:
        if self.table.get_field(self.id, name, _MISSING) is _MISSING:
            raise KeyError(name)
        self.table.set_field(self.id, name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(self.table.field_names(self.id))

    def __len__(self) -> int:
        return len(self.table.field_names(self.id))

    def __repr__(self) -> str:
        return repr(dict(self.items()))


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
        return np.arange(value.start, value.stop, value.step, dtype=np.int64)
    return np.asarray(value, np.int64).reshape(-1)


def type_groups(codes: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """``(type code, positions in codes)`` of each type in ``codes``, in order of first
    appearance (the order vertex types are listed in profiles)."""
    if codes.size and not np.count_nonzero(codes != codes[0]):  # one type (no sort)
        return [(int(codes[0]), np.arange(codes.size, dtype=np.int64))]
    kinds, first = np.unique(codes, return_index=True)
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
    def fields(self) -> VertexFields:
        """Field name -> connected element ids in the connected tensor's shape (a list
        of them for a VectorList; a ``range`` for consecutive ids)."""
        return VertexFields(self.table, self.id)

    @property
    def list_sizes(self) -> dict[str, int]:
        """VectorList field name -> number of vectors (set by connecting or
        ``setFieldSize``)."""
        self.table.move_lists(self.id)
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
