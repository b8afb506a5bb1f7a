"""Field tables of a compute set: the element ids of each field over its vertices.

A compute set's vertices are grouped by vertex type; for each field the element ids of
every vertex are concatenated once (or kept as one run per vertex when every vertex
holds the field as a run), read from the graph's vertex table: its run columns, its
list blocks (bulk-connected VectorLists) or, for the rest, one vertex at a time.
Everything after (exchange planning, the kernel runner, vertex state, liveness) reads
these tables.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import operator
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from poplar_api.codelet import VertexType
from poplar_api.fields import FieldSpec
from poplar_api.lowering import runs
from poplar_api.run_ids import RunIds
from poplar_api.types import Type
from poplar_api.vertices import NO_RUN, type_groups

__all__ = [
    "ComputeSetTable", "FieldTable", "TypeGroup", "build_table", "read_runs", "vertex_id_runs",
]  # fmt: skip


class FieldTable:
    """Elements of one field over the vertices of one type group.

    The ids of vertex ``i`` are ``ids[bounds[i]:bounds[i + 1]]``. When every vertex's
    ids form one ascending run, ``runs`` holds each run's ``(begin, end)`` and the ids
    array is made only if something asks for it (most of lowering works on the runs).
    A field read as longer runs of consecutive ids, several per vertex (the vector
    lists of a convolution whose operands are laid out as its plan wants), keeps them
    as ``ref_runs``: ``(begin, end)`` of each, in reference order, none crossing from
    one vertex to the next; its ids are likewise made only when asked for (exchange
    planning, liveness and the runner's gather read the runs).
    """

    __slots__ = (
        "_bounds", "_ids", "inner_offsets", "offsets", "positions", "ref_runs", "runs",
        "runs_sought", "spec",
    )  # fmt: skip

    def __init__(
        self,
        spec: FieldSpec,
        ids: np.ndarray | None,
        offsets: np.ndarray,
        inner_offsets: np.ndarray | None,
        positions: np.ndarray,
        runs: tuple[np.ndarray, np.ndarray] | None = None,
        ref_runs: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        if ids is None and runs is None and ref_runs is None:
            raise ValueError("a field table needs its ids or its runs")
        self.spec = spec
        self._ids = ids
        self.offsets = offsets
        self.inner_offsets = inner_offsets
        self.positions = positions  # position in the compute set of each vertex of the group
        self.runs = runs
        self.ref_runs = ref_runs
        self._bounds: np.ndarray | None = None
        #: whether :func:`read_runs` looked for runs in the ids and found too few
        self.runs_sought = False

    @property
    def ids(self) -> np.ndarray:
        """Element ids of every vertex, vertex after vertex (int32 or int64)."""
        if self._ids is None:
            self._ids = self.passing_ids()
        return self._ids

    def passing_ids(self) -> np.ndarray:
        """:attr:`ids`, made from the runs without being kept when the table holds runs
        only (for a check that looks at them once: the runner stores a written field
        through its runs, so a ResNet-50 training step's written fields no longer keep
        1 GB of ids)."""
        if self._ids is not None:
            return self._ids
        begin, end = self.runs if self.runs is not None else self.ref_runs
        # int32 where every id fits (kept by the runner: half the host memory)
        narrow = end.size and int(end.max()) <= runs.INT32_MAX
        return runs.expand_as(begin, end - begin, np.int32 if narrow else np.int64)

    @property
    def size(self) -> int:
        """Number of element references."""
        return int(self.bounds[-1])

    def without_ids(self, vertex_runs: tuple[np.ndarray, np.ndarray]) -> FieldTable:
        """The same table keeping only its runs (which must describe its ids)."""
        return FieldTable(
            self.spec, None, self.offsets, self.inner_offsets, self.positions, vertex_runs
        )

    def touched(self) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """The ids, or the runs when the ids were never made (for memory liveness)."""
        if self._ids is not None:
            return self._ids
        return self.runs if self.runs is not None else self.ref_runs

    def vertex_runs(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(begin, end)`` (int64) of each vertex's ids when every vertex of a field held
        as :attr:`ref_runs` reads one run or none (``0, 0`` for none), else None: as
        :func:`~poplar_api.lowering.runs.vertex_runs` finds them in the ids."""
        begin, end = self.ref_runs
        length = end - begin
        at = np.cumsum(length)
        at -= length  # the reference each run starts at (ascending; no run is empty)
        per_vertex = np.diff(np.searchsorted(at, self.bounds, side="left"))
        if per_vertex.size and int(per_vertex.max()) > 1:
            return None
        one = per_vertex == 1
        out_begin = np.zeros(per_vertex.size, np.int64)
        out_end = np.zeros(per_vertex.size, np.int64)
        out_begin[one] = begin
        out_end[one] = end
        return out_begin, out_end

    def run_tiles(self, vtiles: np.ndarray) -> np.ndarray:
        """The tile of each of :attr:`ref_runs` (its vertex's, from ``vtiles``: the tile
        of each vertex of the group)."""
        begin, end = self.ref_runs
        length = end - begin
        at = np.cumsum(length)
        at -= length  # the reference each run starts at (ascending)
        # runs per vertex, found by the vertices' bounds among the runs' starts (a
        # search per vertex, not one per run: runs outnumber vertices some 30 times)
        per_vertex = np.diff(np.searchsorted(at, self.bounds, side="left"))
        if int(per_vertex.sum()) != at.size:  # a run starting at the end: as numpy does
            return vtiles[np.searchsorted(self.bounds, at, side="right") - 1]
        return np.repeat(vtiles, per_vertex)

    @property
    def type(self) -> Type:
        return self.spec.element_type

    @property
    def bounds(self) -> np.ndarray:
        """``int64[vertices + 1]``: vertex ``i`` owns ``ids[bounds[i]:bounds[i + 1]]``
        (a vector list's: made once, on first use; :attr:`size` and the passes over the
        field ask for it several times per compute set)."""
        if self.inner_offsets is None:
            return self.offsets
        if self._bounds is None:
            self._bounds = self.inner_offsets[self.offsets]
            self._bounds.flags.writeable = False  # (shared by every caller)
        return self._bounds

    def vertex_of(self, refs: np.ndarray) -> np.ndarray:
        """Compute-set position of the vertex owning each reference index in ``refs``."""
        return self.positions[np.searchsorted(self.bounds, refs, side="right") - 1]


@dataclass
class TypeGroup:
    """The vertices of one type in a compute set."""

    vtype: VertexType
    positions: np.ndarray
    fields: list[FieldTable]


@dataclass
class ComputeSetTable:
    """Everything lowering and validation need to know about a compute set."""

    name: str
    vertex_ids: np.ndarray
    tiles: np.ndarray
    groups: list[TypeGroup]
    #: per vertex: whether a field (or a vector of a vector list) is unconnected
    unconnected: np.ndarray | None = None


#: The ids of an unconnected field.
_NO_IDS = np.zeros(0, np.int64)
#: Ids per array, on average, from which :func:`_join` looks for arrays that are one
#: array's consecutive slices before it copies them: finding an array's address costs
#: some microseconds, about as much as copying a few thousand ids, so many short slices
#: (a compute set's 1,344 vertices of 40 to 150 ids each) are cheaper concatenated.
_MIN_SHARED_MEAN = 1024
#: The connections kept as ids of a vertex that has none.
_NO_FIELDS: dict = {}
_size = operator.attrgetter("size")
#: Whether a connection is missing (``None``), as a C-level callable for ``map``.
_is_none = functools.partial(operator.is_, None)


def _id_dtype(state, spec: FieldSpec) -> type:
    """Type of a field table's ids: int32 when every id of the field's element size fits
    (half the memory of int64; a table may hold tens of millions of ids)."""
    space = state.find_space(spec.element_type)
    return np.int32 if space is None or space.size <= runs.INT32_MAX else np.int64


def _join(arrays: list[np.ndarray], dtype: type) -> np.ndarray:
    """The ids of ``arrays``, each flattened in row-major order, one after another
    (read-only: a single flat array of ``dtype``, such as a graph's list block of one
    compute set, is shared, not copied)."""
    if not arrays:
        return _NO_IDS.astype(dtype)
    if len(arrays) == 1 and arrays[0].ndim == 1 and arrays[0].dtype == dtype:
        shared = arrays[0].view()
        shared.flags.writeable = False
        return shared
    if sum(map(_size, arrays)) >= _MIN_SHARED_MEAN * len(arrays):
        adjacent = _adjacent(arrays, dtype)
        if adjacent is not None:
            return adjacent
    return np.concatenate(arrays, axis=None, dtype=dtype, casting="same_kind")


def _adjacent(arrays: list[np.ndarray], dtype: type) -> np.ndarray | None:
    """The ids of ``arrays`` as one read-only view of the array they are slices of, when
    they are its consecutive pieces in order (a library's vertices each given the next
    slice of one array of ids: a reduction's partials), else None."""
    first = arrays[0]
    base = first.base
    if (
        not isinstance(base, np.ndarray)
        or base.ndim != 1
        or base.dtype != dtype
        or not base.flags.c_contiguous
        or any(a.base is not base or a.ndim != 1 or a.strides != base.strides for a in arrays)
    ):
        return None
    item = base.itemsize
    filled = [a for a in arrays if a.size]  # (an empty slice's address may be any)
    at = [a.ctypes.data for a in filled]
    ends = [p + a.size * item for p, a in zip(at, filled, strict=True)]
    if not filled or at[1:] != ends[:-1]:
        return None
    start = (at[0] - base.ctypes.data) // item
    shared = base[start : start + (ends[-1] - at[0]) // item]
    shared.flags.writeable = False
    return shared


def build_table(state, cs) -> ComputeSetTable:
    """Tables of a compute set; unconnected fields count as empty (validation reports
    them: :attr:`ComputeSetTable.unconnected`).

    Fields held as runs are read from the type's run columns; the rest (vector lists,
    connections kept as ids) in one look at each such vertex's connections.
    """
    table = state.vertices
    vids = np.asarray(cs.vertices, np.int64)
    tiles = table.column("tile", vids)
    codes = table.column("type_code", vids)
    rows = table.column("row", vids)
    unconnected = np.zeros(vids.size, bool)
    extra_of = table.extra.get
    groups = []
    for code, positions in type_groups(codes):
        vtype = table.types[code]
        type_runs = table.type_runs[code]
        member_runs = type_runs.rows(rows[positions])
        n = positions.size
        has_lists = any(spec.kind == "vectorlist" for spec in vtype.fields)
        extras: list[dict] = []
        if (has_lists and not table.list_blocks) or np.count_nonzero(member_runs[:, ::2] == NO_RUN):
            # (C-level passes: an empty dict reads as _NO_FIELDS does)
            extras = list(map(extra_of, vids[positions].tolist(), itertools.repeat(_NO_FIELDS)))
        bad = np.zeros(n, bool)
        tables = []
        for spec in vtype.fields:
            name = spec.name
            if spec.kind == "vectorlist" and table.list_blocks:
                found = _block_lists(table, vids[positions], name, _id_dtype(state, spec))
            else:
                found = None
            if found is not None:
                offsets, inner_offsets, ids, ref_runs = found
                if ref_runs is not None:
                    tables.append(
                        FieldTable(spec, None, offsets, inner_offsets, positions, None, ref_runs)
                    )
                    continue
            elif spec.kind == "vectorlist":
                if table.list_blocks:
                    values = [table.get_field(v, name) for v in vids[positions].tolist()]
                else:
                    values = [e.get(name) for e in extras]
                bad |= np.fromiter(map(_is_none, values), bool, n)
                lists = [x or () for x in values]
                counts = np.fromiter(map(len, lists), np.int64, n)
                inner = [ids for x in lists for ids in x]
                missing = np.fromiter(map(_is_none, inner), bool, len(inner))
                if missing.any():
                    bad[np.repeat(np.arange(n), counts)[missing]] = True
                    inner = [_NO_IDS if ids is None else ids for ids in inner]
                inner_len = np.fromiter(map(_size, inner), np.int64, len(inner))
                offsets = np.concatenate(([0], np.cumsum(counts)))
                inner_offsets = np.concatenate(([0], np.cumsum(inner_len)))
                ids = _join(inner, _id_dtype(state, spec))
            else:
                slot = type_runs.slot[name]
                begin = np.ascontiguousarray(member_runs[:, slot])
                end = np.ascontiguousarray(member_runs[:, slot + 1])
                inner_offsets = None
                if not np.count_nonzero(begin == NO_RUN):  # every vertex one run
                    offsets = _run_offsets(begin, end)
                    tables.append(FieldTable(spec, None, offsets, None, positions, (begin, end)))
                    continue
                offsets, ids = _mixed_field(begin, end, extras, name, bad, _id_dtype(state, spec))
            found_table = FieldTable(spec, ids, offsets.astype(np.int64), inner_offsets, positions)
            tables.append(read_runs(found_table))
        unconnected[positions] = bad
        groups.append(TypeGroup(vtype, positions, tables))
    return ComputeSetTable(cs.name, vids, tiles, groups, unconnected)


def _run_offsets(begin: np.ndarray, end: np.ndarray) -> np.ndarray:
    """int64 offsets of runs ``[begin, end)`` laid one after another: ``0`` then the
    running total of their lengths (into one array: a compute set's few vertices cost
    more in temporaries than in the sum)."""
    offsets = np.empty(begin.size + 1, np.int64)
    offsets[0] = 0
    np.cumsum(end - begin, out=offsets[1:])
    return offsets


def _mixed_field(
    begin: np.ndarray, end: np.ndarray, extras: list[dict], name: str, bad: np.ndarray, dtype: type
) -> tuple[np.ndarray, np.ndarray]:
    """Field ``name`` of vertices some of which hold it as a run ``[begin, end)`` and
    the rest (``begin == NO_RUN``) as ids in their ``extras``: ``(offsets, ids)`` in
    vertex order. The runs are laid out with numpy, only the others one by one;
    vertices with the field unconnected are flagged in ``bad``."""
    listed = np.flatnonzero(begin == NO_RUN)
    arrays = list(map(dict.get, map(extras.__getitem__, listed.tolist()), itertools.repeat(name)))
    none = np.fromiter(map(_is_none, arrays), bool, listed.size)
    if np.count_nonzero(none):
        bad[listed[none]] = True
        arrays = [_NO_IDS if x is None else x for x in arrays]
    lengths = end - begin
    lengths[listed] = np.fromiter(map(_size, arrays), np.int64, listed.size)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    joined = _join(arrays, dtype)
    if listed.size == begin.size and joined.dtype == dtype:  # (no runs: the ids as joined)
        return offsets, joined
    ids = np.empty(int(offsets[-1]), dtype)
    runs.fill_field(ids, offsets, begin, NO_RUN, listed, joined)
    return offsets, ids


def _ranges(begins: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """The integers of the ranges ``[begins[k], ends[k])``, one range after another."""
    lengths = ends - begins
    total = int(lengths.sum())
    if not total:
        return _NO_IDS
    starts = np.cumsum(lengths) - lengths
    return np.repeat(begins - starts, lengths) + np.arange(total, dtype=np.int64)


def _block_lists(table, members: np.ndarray, name: str, dtype: type) -> tuple | None:
    """VectorList ``name`` of the vertices ``members`` as ``(offsets, inner offsets,
    ids, ref runs)`` read from the table's list blocks with numpy, or ``None`` when one
    of them is not held in a block (then they are read one vertex at a time).

    Where every block holds its ids as runs (:class:`~poplar_api.run_ids.RunIds`) and
    the vectors read them as runs of :data:`MIN_REFS_PER_RUN` ids or more on average,
    the field is the id runs ``(begin, end)`` of its vectors and ``ids`` is None;
    else ``ref runs`` is None."""
    found = _one_block_parts(table, members, name)
    if found is None:
        found = _block_parts(table, members, name)
        if found is None:
            return None
    offsets, parts = found
    lengths = np.concatenate([e - b for b, e, _ in parts]) if parts else _NO_IDS
    inner_offsets = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    total = int(inner_offsets[-1])
    if parts and all(isinstance(ids, RunIds) for _, _, ids in parts):
        found = _ref_runs(parts, total)
        if found is not None:
            return offsets, inner_offsets, None, found
    return offsets, inner_offsets, _take_pieces(parts, total, dtype), None


def _one_block_parts(table, members: np.ndarray, name: str) -> tuple | None:
    """:func:`_block_parts` of ``members`` that are consecutive vertex ids of one
    block none of which moved (a library's vertices of one type, added together):
    their vectors are one slice of the block's, found from the first and last vertex
    alone (no search per member, no per-member masks). None when they are not."""
    if not table.block_first:
        return None
    where = runs.as_index(members)
    if not isinstance(where, slice):
        return None
    b = bisect.bisect_right(table.block_first, where.start) - 1
    if b < 0:
        return None
    block = table.list_blocks[b]
    lo, hi = where.start - block.first, where.stop - block.first
    if hi > block.n or np.count_nonzero(block.moved[lo:hi]) or name not in block.fields:
        return None
    vec_offsets, begins, ends, ids = block.fields[name]
    offsets = (vec_offsets[lo : hi + 1] - vec_offsets[lo]).astype(np.int64)
    a, z = int(vec_offsets[lo]), int(vec_offsets[hi])
    return offsets, [(begins[a:z], ends[a:z], ids)]


def _block_parts(table, members: np.ndarray, name: str) -> tuple | None:
    """``(offsets, parts)`` of VectorList ``name`` of the vertices ``members``:
    vertex ``i`` has vectors ``offsets[i]`` to ``offsets[i + 1]``, each a piece
    ``[begin, end)`` of a part's block ids (``parts``: ``(begins, ends, block ids)``
    per block, in member order); None when one of them is not held in a block or the
    members of several blocks interleave."""
    firsts = np.asarray(table.block_first, np.int64)
    k = np.searchsorted(firsts, members, side="right") - 1
    if (k < 0).any():
        return None
    counts = np.zeros(members.size, np.int64)
    parts: list[tuple[np.ndarray, np.ndarray, Any]] = []  # begins, ends, block ids
    order: list[np.ndarray] = []
    if k.size and (k[1:] >= k[:-1]).all():  # members in id order: each block's together
        cuts = np.flatnonzero(np.concatenate(([True], k[1:] != k[:-1], [True])))
        spans = [(int(k[a]), np.arange(a, z)) for a, z in itertools.pairwise(cuts.tolist())]
    else:
        spans = [(b, np.flatnonzero(k == b)) for b in np.unique(k).tolist()]
    for b, at in spans:
        block = table.list_blocks[b]
        local = members[at] - block.first
        if (local >= block.n).any() or block.moved[local].any() or name not in block.fields:
            return None
        vec_offsets, begins, ends, ids = block.fields[name]
        counts[at] = vec_offsets[local + 1] - vec_offsets[local]
        order.append(at)
        if local.size and int(local[-1] - local[0]) == local.size - 1:
            # consecutive vertices: their vectors are consecutive too
            a, z = int(vec_offsets[local[0]]), int(vec_offsets[local[-1] + 1])
            b, e = begins[a:z], ends[a:z]
        else:
            vectors = _ranges(vec_offsets[local], vec_offsets[local + 1])
            b, e = begins[vectors], ends[vectors]
        parts.append((b, e, ids))
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    if len(order) > 1 and (np.diff(np.concatenate(order)) < 0).any():
        return None  # members of several blocks interleaved: rare, read one at a time
    return offsets, parts


#: References per run, on average, from which a vector list held as runs is tabled as
#: its runs rather than one id per reference.
MIN_REFS_PER_RUN = 4


def read_runs(ft: FieldTable) -> FieldTable:
    """Field ``ft`` held as :attr:`~FieldTable.ref_runs` when it is read (not written),
    not BOOL, held as ids and those lie in runs of :data:`MIN_REFS_PER_RUN` or more on
    average, cut at each vertex (a reduction's partials, a 1-D operand's slices); else
    ``ft`` itself, marked :attr:`~FieldTable.runs_sought` when its ids were looked at.

    Found when the compute set's table is built, so that every pass after it (the
    conflict check, read planning, liveness, the runner) reads the runs, not the ids:
    a reduction's 3.7 million partials of ``bench_conv``'s forward pass lie in 9,856
    runs. The runs are those :func:`vertex_id_runs` finds; a field with more runs
    keeps its ids (its runs are not looked for again)."""
    plain = ft.runs is None and ft.ref_runs is None and ft.type.numpy.kind != "b"
    if not plain or ft.runs_sought or ft.spec.writes or ft.size < 2 * MIN_REFS_PER_RUN:
        return ft
    # more runs than a quarter of the ids: the ids are kept (the search stops there, so
    # a strided read is given up after a few of its ids)
    held = vertex_id_runs(ft.ids, ft.bounds, ft.size // MIN_REFS_PER_RUN)
    if held is None:
        ft.runs_sought = True
        return ft
    return FieldTable(ft.spec, None, ft.offsets, ft.inner_offsets, ft.positions, None, held)


def _ref_runs(parts: list[tuple[np.ndarray, np.ndarray, Any]], total: int) -> tuple | None:
    """The id runs ``(begin, end)`` of the pieces ``[b, e)`` of each part's
    :class:`~poplar_api.run_ids.RunIds`, piece after piece, or None when they would
    average fewer than :data:`MIN_REFS_PER_RUN` references each."""
    found = [runs.run_ranges(ids.starts, ids.firsts, ids.size, b, e) for b, e, ids in parts]
    count = sum(b.size for b, _ in found)
    if count * MIN_REFS_PER_RUN > total:
        return None
    if len(found) == 1:
        return found[0]
    return np.concatenate([b for b, _ in found]), np.concatenate([e for _, e in found])


@numba.njit(cache=True, nogil=True)
def _vertex_id_runs(ids, bounds, most, begin, end):  # pragma: no cover - compiled
    # the runs of consecutive ids, each also cut where a vertex's references start
    # (vertex v holds ids[bounds[v]:bounds[v + 1]]), walked vertex by vertex; their
    # first ids and ends go to begin and end when these have room; returns how many
    # runs, or -1 as soon as there are more than ``most``
    fill = begin.size > 0
    count = 0
    for v in range(bounds.size - 1):
        lo = bounds[v]
        hi = bounds[v + 1]
        if lo >= hi:
            continue
        if count == most:
            return -1
        prev = np.int64(ids[lo])
        if fill:
            begin[count] = ids[lo]
        count += 1
        for i in range(lo + 1, hi):
            x = np.int64(ids[i])
            if x != prev + 1:  # a run ends at i - 1
                if count == most:
                    return -1
                if fill:
                    end[count - 1] = prev + 1
                    begin[count] = ids[i]
                count += 1
            prev = x
        if fill:
            end[count - 1] = prev + 1
    return count


def vertex_id_runs(
    ids: np.ndarray, bounds: np.ndarray, most: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """``(begin, end)`` of the runs of consecutive ids in ``ids``, none crossing from one
    vertex's references to the next (vertex ``i`` holds ``ids[bounds[i]:bounds[i + 1]]``),
    in the ids' type; None when there are more than ``most`` runs.

    One compiled pass into room for ``most`` runs (pages it does not write to are never
    touched) that stops once it passes ``most``: no mask, difference or index array per
    id, and no second pass over the ids."""
    ids = runs.read_only(ids)
    bounds = runs.read_only(np.asarray(bounds, np.int64))
    room = max(min(int(most), ids.size), 0)
    begin, end = np.empty(room, ids.dtype), np.empty(room, ids.dtype)
    count = int(_vertex_id_runs(ids, bounds, np.int64(most), begin, end))
    if count < 0:
        return None
    return begin[:count].copy(), end[:count].copy()


def _take_pieces(parts: list[tuple[np.ndarray, np.ndarray, Any]], total: int, dtype: type):
    """The ids of the pieces ``[b, e)`` of each part's block ids (an array or
    :class:`~poplar_api.run_ids.RunIds`), piece after piece, as one array of ``dtype``.

    Written straight into the result, from the runs where the block holds runs, so
    neither an array of positions nor an array per block is made on the way. Pieces of
    one block array that follow one another are that array's slice, shared as it is
    when its type is ``dtype``."""
    if len(parts) == 1 and isinstance(parts[0][2], np.ndarray):
        b, e, ids = parts[0]
        if b.size and (b[1:] == e[:-1]).all():
            return _join([ids[int(b[0]) : int(e[-1])]], dtype)
    out = np.empty(total, dtype)
    at = 0
    for b, e, ids in parts:
        b = np.ascontiguousarray(b, np.int64)
        e = np.ascontiguousarray(e, np.int64)
        if isinstance(ids, RunIds):
            at = runs.take_run_ranges(ids.starts, ids.firsts, ids.size, b, e, out, at)
        else:
            at = runs.take_ranges(runs.read_only(np.asarray(ids)), b, e, out, at)
    return out
