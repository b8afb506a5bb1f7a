"""The connections of one :meth:`~poplar_api.graph_bulk.BulkGraphMethods.addVertices`
call: :class:`Segments` (pieces of a tensor of different lengths, as Vector fields or as
the vectors of VectorList fields) and the checked plan of every field's connections,
written once the vertices exist (runs of consecutive ids, index arrays, or one list
block of all the call's VectorLists).

Library code connects tens of millions of elements this way (a convolution's partial
vertices); a VectorList's ids that are mostly runs of consecutive elements are found
as runs straight from the connected tensor's ids, in the element type the graph keeps
(:func:`list_block_ids`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.run_ids import RunIds, as_runs
from poplar_api.tensor import Tensor
from poplar_api.tensor_views import piece_runs
from poplar_api.vertices import ListBlock

if TYPE_CHECKING:
    from poplar_api.graph import Graph

__all__ = ["RunSegments", "Segments"]


def _int_array(values: Any, what: str, wide: bool = True) -> np.ndarray:
    """``values`` as an int64 array (checked to hold integers); with ``wide`` False an
    integer array of any width as it is (no copy of a large int32 array of tiles)."""
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu" and not (arr.size == 0 and arr.dtype.kind == "f"):
        raise GraphError(
            f"{what}: expected integers, got an array of dtype {arr.dtype}; hint: pass "
            "an int array (e.g. numpy int64)"
        )
    if not wide and arr.dtype.kind in "iu":
        return arr
    return arr.astype(np.int64, copy=False)


class Segments:
    """Connections of different lengths for :meth:`BulkGraphMethods.addVertices`:
    consecutive pieces of a tensor's flattened elements, taken in order.

    Parameters
    ----------
    t
        The tensor; its flattened elements (row-major) are dealt out in order.
    sizes
        Elements of each piece; they add up to ``t.numElements()``.
    vectors
        None: vertex ``i`` gets piece ``i`` (a Vector field's vector; one element for a
        scalar field; a VectorList field's only vector). Else, for a VectorList field,
        vertex ``i`` gets the next ``vectors[i]`` pieces as its vectors
        (``sum(vectors) == len(sizes)``).
    """

    __slots__ = ("sizes", "tensor", "vectors")

    def __init__(self, t: Tensor, sizes: Any, vectors: Any = None) -> None:
        if not isinstance(t, Tensor):
            raise GraphError(f"Segments: expected a Tensor, got {type(t).__name__}")
        self.tensor = t
        self.sizes = _int_array(sizes, f"Segments of tensor '{t.name}': sizes").reshape(-1)
        self.vectors = (
            None
            if vectors is None
            else _int_array(vectors, f"Segments of tensor '{t.name}': vectors").reshape(-1)
        )
        what = f"Segments of tensor '{t.name}' ({t.numElements()} elements)"
        if self.sizes.size and int(self.sizes.min()) < 0:
            raise GraphError(f"{what}: piece sizes must be >= 0, found {int(self.sizes.min())}")
        if int(self.sizes.sum()) != t.numElements():
            raise GraphError(
                f"{what}: the pieces hold {int(self.sizes.sum())} elements; they must cover "
                f"the tensor's {t.numElements()} exactly"
            )
        if self.vectors is not None and (
            int(self.vectors.sum()) != self.sizes.size
            or (self.vectors.size and int(self.vectors.min()) < 0)
        ):
            raise GraphError(
                f"{what}: vectors {self.vectors.tolist()[:8]} must be >= 0 and add up to the "
                f"{self.sizes.size} pieces"
            )

    def count(self) -> int:
        """Vertices the segments feed."""
        return int(self.sizes.size if self.vectors is None else self.vectors.size)

    def __repr__(self) -> str:
        return f"Segments('{self.tensor.name}', {self.sizes.size} pieces)"


class RunSegments:
    """VectorList or Vector connections for
    :meth:`~poplar_api.graph_bulk.BulkGraphMethods.addVertices` whose element ids are
    given as runs of consecutive ids, not as a tensor's elements: pieces and vectors as
    :class:`Segments`, over the ids of ``runs`` in order.

    A library that gathers the fields of thousands of vertices from its operands' ids
    (a convolution's partial-sum vertices read a few long runs each) finds their runs
    as it gathers and gives them here, so no array of one id per element connected is
    made; the graph keeps a VectorList's as the runs they are
    (:class:`~poplar_api.run_ids.RunIds`). A Vector field (one piece per vertex) is
    kept as :class:`Segments` keeps it: a piece within one run as that run, any other
    piece as its ids (made from the runs, in the type the graph keeps ids in).

    Parameters
    ----------
    t
        A tensor of the graph with the connections' element type (the one the ids were
        gathered from): its graph and type are those of the connections.
    runs
        The ids of all pieces, in order.
    sizes, vectors
        As :class:`Segments`: the elements of each piece, and how many pieces each
        vertex gets as its vectors (None: one each).
    """

    __slots__ = ("runs", "sizes", "tensor", "vectors")

    def __init__(self, t: Tensor, runs: RunIds, sizes: Any, vectors: Any = None) -> None:
        if not isinstance(t, Tensor):
            raise GraphError(f"RunSegments: expected a Tensor, got {type(t).__name__}")
        if not isinstance(runs, RunIds):
            raise GraphError(f"RunSegments: runs must be a RunIds, got {type(runs).__name__}")
        self.tensor = t
        self.runs = runs
        what = f"RunSegments of type {t.elementType().name} ({runs.size} ids)"
        self.sizes = _int_array(sizes, f"{what}: sizes").reshape(-1)
        self.vectors = (
            np.ones(self.sizes.size, np.int64)
            if vectors is None
            else _int_array(vectors, f"{what}: vectors").reshape(-1)
        )
        if self.sizes.size and int(self.sizes.min()) < 0:
            raise GraphError(f"{what}: piece sizes must be >= 0, found {int(self.sizes.min())}")
        if int(self.sizes.sum()) != runs.size:
            raise GraphError(
                f"{what}: the pieces hold {int(self.sizes.sum())} elements; they must cover "
                f"the {runs.size} ids exactly"
            )
        if int(self.vectors.sum()) != self.sizes.size or (
            self.vectors.size and int(self.vectors.min()) < 0
        ):
            raise GraphError(
                f"{what}: vectors {self.vectors.tolist()[:8]} must be >= 0 and add up to the "
                f"{self.sizes.size} pieces"
            )

    def count(self) -> int:
        """Vertices the segments feed."""
        return int(self.vectors.size)

    def __repr__(self) -> str:
        return f"RunSegments({self.runs!r}, {self.sizes.size} pieces)"


def _list_ids(graph: Graph, t: Tensor, ids: np.ndarray) -> np.ndarray:
    """The ids of ``t`` kept for a list block's VectorList or for pieces that are not
    runs: int32 when every id of its element size fits (half the host memory: the
    convolutions and reductions of a model hold hundreds of millions of them), else
    as they are. They read back as int64 (:meth:`VertexTable.get_field`)."""
    space = graph._state.find_space(t._type)
    if space is not None and space.size <= np.iinfo(np.int32).max:
        ids = ids.astype(np.int32)
        ids.flags.writeable = False
    return ids


def list_block_ids(graph: Graph, t: Tensor, ids: np.ndarray) -> np.ndarray | RunIds:
    """The ids of ``t`` as a list block keeps them: as :class:`~poplar_api.run_ids.RunIds`
    when they are mostly runs of consecutive ids (found on ``ids`` as they are, in the
    type :func:`_list_ids` would give them, so no converted copy of every id is made
    first), else as :func:`_list_ids` gives them."""
    runs = as_runs(ids)
    if runs is None:
        return _list_ids(graph, t, ids)
    space = graph._state.find_space(t._type)
    narrow = space is not None and space.size <= np.iinfo(np.int32).max
    return RunIds(runs.starts, runs.firsts, runs.size, np.int32 if narrow else runs.dtype)


def _runs_of(ids: np.ndarray, begins: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Whether each piece ``ids[begins[i] : begins[i] + sizes[i]]`` is a run of
    consecutive ids (empty pieces are not); the pieces lie within ``ids``."""
    out = np.zeros(sizes.size, bool)
    if not (ids.size and sizes.size):
        return out
    begins, sizes = begins.astype(np.int64, copy=False), sizes.astype(np.int64, copy=False)
    if int(begins.min()) < 0 or int((begins + sizes).max()) > ids.size:
        raise ValueError(f"pieces outside the {ids.size} ids they are taken from")
    # contiguous and read-only, as a tensor's own index is: one compiled piece_runs
    ids = np.ascontiguousarray(ids)
    if ids.flags.writeable:
        ids = ids.view()
        ids.flags.writeable = False
    piece_runs(ids, begins, sizes, out)
    return out


def _vector_or_list(specs: list, value: Any) -> bool:
    """Whether a field is a Vector in some of a call's types and a VectorList in the
    others (one element type), given as :class:`Segments` with vectors."""
    kinds = {s.kind for s in specs}
    return (
        kinds == {"vector", "vectorlist"}
        and isinstance(value, Segments)
        and value.vectors is not None
        and len({s.element_type for s in specs}) == 1
    )


class _Connections:
    """The checked connections of one ``addVertices`` call, written once its vertices
    exist."""

    def __init__(self, n: int, which: np.ndarray | None = None) -> None:
        self.n = n
        #: the type (position in the call's types) of each vertex; None for one type
        self.which = which
        #: vertices whose types have no VectorList among the list fields (their
        #: entries in the call's list block are empty); None when there are none
        self.not_lists: np.ndarray | None = None
        #: (field, vertices (None: all), run begins, run ends)
        self.runs: list[tuple[str, np.ndarray | None, np.ndarray, np.ndarray]] = []
        #: (field, vertices, the ids each of them gets)
        self.ids: list[tuple[str, np.ndarray, list[np.ndarray]]] = []
        #: (field, per-vertex specs, sequence of n addVertex values)
        self.per_vertex: list[tuple[str, list, Any]] = []
        #: (field, piece begins, sizes, vectors per vertex, flat ids) of VectorLists
        self.lists: list[tuple[str, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []

    def add(self, graph: Graph, name: str, value: Any, spec: Any, specs: list, where: str) -> None:
        n = self.n
        if isinstance(value, Segments):
            self._segments(graph, name, value, spec, where)
            return
        if isinstance(value, RunSegments):
            self._run_segments(graph, name, value, spec, where)
            return
        if not isinstance(value, Tensor):
            if isinstance(value, str | bytes) or not isinstance(value, Sequence):
                raise GraphError(
                    f"{where}: expected a Tensor with one row per vertex or a sequence "
                    f"of {n} values, got {type(value).__name__}"
                )
            if len(value) != n:
                raise GraphError(
                    f"{where}: {len(value)} values given for {n} vertices; hint: one per vertex"
                )
            self.per_vertex.append((name, specs, value))
            return
        t = graph.checkTensor(value, where)
        if not t._shape or t._shape[0] != n:
            raise GraphError(
                f"{where}: tensor '{t.name}' has shape {t.shape()} but {n} vertices are "
                f"added; its first dimension must be {n} (row i goes to vertex i); "
                "hint: reshape to [n, elements per vertex]"
            )
        row_len = int(math.prod(t._shape[1:]))
        if spec.kind == "vectorlist":
            spec.check([row_len], t._type, where)
            self.per_vertex.append((name, specs, [t[i] for i in range(n)]))
            return
        spec.check(row_len, t._type, where)
        if t._start >= 0:
            begins = t._start + np.arange(n, dtype=np.int64) * row_len
            self.runs.append((name, None, begins, begins + row_len))
            return
        ix = t._index.reshape(n, row_len)
        is_run = (np.diff(ix, axis=1) == 1).all(axis=1) if row_len else np.zeros(n, bool)
        if is_run.all():
            self.runs.append((name, None, ix[:, 0].copy(), ix[:, 0] + row_len))
            return
        if is_run.any():
            sel = np.flatnonzero(is_run)
            self.runs.append((name, sel, ix[sel, 0], ix[sel, 0] + row_len))
        rest = np.flatnonzero(~is_run)
        self.ids.append((name, rest, [t._index[i] for i in rest.tolist()]))

    def mixed(self, graph: Graph, name: str, value: Segments, specs: list, where: str) -> None:
        """A field that is a Vector in some of the types and a VectorList in others:
        each Vector vertex's one piece is connected as :meth:`_segments` connects a
        Vector field, the VectorList vertices' pieces as one list block."""
        t = graph.checkTensor(value.tensor, where)
        vectors = value.vectors
        if vectors.size != self.n:
            raise GraphError(
                f"{where}: {value!r} feeds {vectors.size} vertices but {self.n} are added; "
                "hint: one count of vectors per vertex"
            )
        for spec in specs:
            spec.check(0 if spec.kind == "vector" else [], t._type, where)
        listed = np.array([s.kind == "vectorlist" for s in specs])[self.which]
        if self.not_lists is not None and (self.not_lists != ~listed).any():
            raise GraphError(
                f"{where}: the types disagree on which of their fields are VectorLists; "
                "hint: add them in separate calls"
            )
        self.not_lists = ~listed
        single = np.flatnonzero(~listed)
        if (vectors[single] != 1).any():
            k = int(single[vectors[single] != 1][0])
            raise GraphError(
                f"{where}: vertex {k} has a Vector field but is given {int(vectors[k])} "
                "pieces; hint: one piece for a Vector field"
            )
        sizes = value.sizes
        begins = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        piece_of = np.cumsum(vectors) - vectors  # each vertex's first piece
        ids = t.flat_index()
        one = piece_of[single]
        is_run = _runs_of(ids, begins[one], sizes[one])
        if is_run.any():
            at = one[is_run]
            self.runs.append((name, single[is_run], ids[begins[at]], ids[begins[at]] + sizes[at]))
        if not is_run.all():
            rest = single[~is_run]
            firsts = piece_of[rest]
            pieces = [
                ids[o : o + k]
                for o, k in zip(begins[firsts].tolist(), sizes[firsts].tolist(), strict=True)
            ]
            self.ids.append((name, rest, pieces))
        keep = np.ones(sizes.size, bool)
        keep[one] = False
        counts = np.where(listed, vectors, 0)
        self.lists.append((name, begins[keep], sizes[keep], counts, list_block_ids(graph, t, ids)))

    def _run_segments(
        self, graph: Graph, name: str, value: RunSegments, spec: Any, where: str
    ) -> None:
        """A VectorList field given as runs: kept as they are, in a list block (a Vector
        field: :meth:`_run_vector`)."""
        t = graph.checkTensor(value.tensor, where)
        if value.count() != self.n:
            raise GraphError(
                f"{where}: {value!r} feeds {value.count()} vertices but {self.n} are added; "
                "hint: one count of vectors per vertex"
            )
        if spec.kind not in ("vectorlist", "vector"):
            raise GraphError(
                f"{where}: RunSegments feed VectorList and Vector fields; this one is "
                f"{spec.describe()}"
            )
        sizes = value.sizes
        if spec.kind == "vector":
            if value.vectors.size and (value.vectors != 1).any():
                k = int(np.flatnonzero(value.vectors != 1)[0])
                raise GraphError(
                    f"{where}: vertex {k} has a Vector field but is given "
                    f"{int(value.vectors[k])} pieces; hint: one piece for a Vector field"
                )
            spec.check(0, t._type, where)
        else:
            spec.check(sizes[:1].tolist(), t._type, where)
        runs = value.runs
        space = graph._state.find_space(t._type)
        bound = 0 if space is None else space.size
        if runs.starts.size:
            lengths = np.diff(np.append(runs.starts, runs.size))
            low, high = int(runs.firsts.min()), int((runs.firsts + lengths).max())
            if low < 0 or high > bound:
                raise GraphError(
                    f"{where}: {value!r} has ids in [{low}, {high}), outside the {bound} "
                    f"elements of type {t._type.name} of this graph"
                )
        # the type _list_ids keeps ids in
        narrow = space is not None and space.size <= np.iinfo(np.int32).max
        ids = RunIds(runs.starts, runs.firsts, runs.size, np.int32 if narrow else np.int64)
        begins = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        if spec.kind == "vector":
            self._run_vector(name, ids, begins, sizes)
            return
        self.lists.append((name, begins, sizes, value.vectors, ids))

    def _run_vector(self, name: str, ids: RunIds, begins: np.ndarray, sizes: np.ndarray) -> None:
        """A Vector field whose vertex ``i`` gets the ids at positions ``begins[i] ..
        begins[i] + sizes[i] - 1`` of ``ids``: what :meth:`_segments` keeps of the same
        ids (a piece of consecutive ids as its run, any other as an array of the ids'
        type), found from the runs (only the ids of pieces that are not runs are made)."""
        starts, firsts = ids.starts, ids.firsts
        if starts.size > 1:  # runs that go on into the next: one run
            cont = firsts[1:] == firsts[:-1] + (starts[1:] - starts[:-1])
            if cont.any():
                keep = np.concatenate(([True], ~cont))
                starts, firsts = starts[keep], firsts[keep]
        is_run = sizes > 0
        first_run = np.zeros(sizes.size, np.int64)
        if starts.size and is_run.any():
            first_run = np.searchsorted(starts, begins, side="right") - 1
            last_run = np.searchsorted(starts, begins + sizes - 1, side="right") - 1
            is_run &= first_run == last_run
        if is_run.any():
            sel = None if is_run.all() else np.flatnonzero(is_run)
            at = first_run if sel is None else first_run[sel]
            b = firsts[at] + ((begins if sel is None else begins[sel]) - starts[at])
            self.runs.append((name, sel, b, b + (sizes if sel is None else sizes[sel])))
        if not is_run.all():
            rest = np.flatnonzero(~is_run)
            lo, hi = int(begins[rest[0]]), int(begins[rest[-1]] + sizes[rest[-1]])
            kept = ids[lo:hi]  # the ids from the first such piece to the last one's end
            kept.flags.writeable = False
            pieces = [
                kept[o : o + k]
                for o, k in zip((begins[rest] - lo).tolist(), sizes[rest].tolist(), strict=True)
            ]
            self.ids.append((name, rest, pieces))

    def _segments(self, graph: Graph, name: str, value: Segments, spec: Any, where: str) -> None:
        t = graph.checkTensor(value.tensor, where)
        if value.count() != self.n:
            raise GraphError(
                f"{where}: {value!r} feeds {value.count()} vertices but {self.n} are added; "
                "hint: one piece (or one count of vectors) per vertex"
            )
        sizes = value.sizes
        begins = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
        if spec.kind == "vectorlist" or value.vectors is not None:
            if spec.kind != "vectorlist":
                raise GraphError(
                    f"{where}: Segments with vectors feed VectorList fields; this one is "
                    f"{spec.describe()}"
                )
            spec.check(sizes[:1].tolist(), t._type, where)
            vectors = np.ones(self.n, np.int64) if value.vectors is None else value.vectors
            ids = list_block_ids(graph, t, t.flat_index())
            self.lists.append((name, begins, sizes, vectors, ids))
            return
        if spec.kind == "scalar" and sizes.size and (sizes != 1).any():
            k = int(np.flatnonzero(sizes != 1)[0])
            spec.check(int(sizes[k]), t._type, f"{where} (vertex {k})")
        spec.check(1 if spec.kind == "scalar" else 0, t._type, where)
        if t._start >= 0:
            self.runs.append((name, None, t._start + begins, t._start + begins + sizes))
            return
        ids = t.flat_index()
        is_run = _runs_of(ids, begins, sizes)
        if is_run.any():
            sel = None if is_run.all() else np.flatnonzero(is_run)
            b = begins if sel is None else begins[sel]  # pieces of >= 1 element
            k = sizes if sel is None else sizes[sel]
            self.runs.append((name, sel, ids[b], ids[b] + k))
        if not is_run.all():
            rest = np.flatnonzero(~is_run)
            # the ids from the first such piece to the last one's end (int32 where they
            # fit, as a list block's): those of the runs between are not converted
            lo, hi = int(begins[rest[0]]), int(begins[rest[-1]] + sizes[rest[-1]])
            kept = _list_ids(graph, t, ids[lo:hi])
            pieces = [
                kept[o : o + k]
                for o, k in zip((begins[rest] - lo).tolist(), sizes[rest].tolist(), strict=True)
            ]
            self.ids.append((name, rest, pieces))

    def write(
        self,
        graph: Graph,
        table: Any,
        kinds: list,
        which: np.ndarray | None,
        first: int,
        type_rows: np.ndarray,
    ) -> None:
        """Connect the new vertices ``first, first + 1, ...`` (their rows in their
        types' run columns: ``type_rows``)."""
        n = self.n
        for name, sel, begins, ends in self.runs:
            if not n:
                continue
            if which is None:
                rows = type_rows if sel is None else type_rows[sel]
                table.set_runs(kinds[0], rows, name, begins, ends)
                continue
            at = np.arange(n, dtype=np.int64) if sel is None else sel
            for k, vt in enumerate(kinds):
                mine = which[at] == k
                if mine.any():
                    table.set_runs(vt, type_rows[at[mine]], name, begins[mine], ends[mine])
        extra = table.extra
        if self.lists and n:  # kept as one block: no Python object per vertex
            fields = {}
            for name, begins, sizes, vectors, ids in self.lists:
                offsets = np.concatenate(([0], np.cumsum(vectors))).astype(np.int64)
                ends = begins + sizes
                if ids.size <= np.iinfo(np.int32).max:  # positions in ids: int32 (half)
                    begins, ends = begins.astype(np.int32), ends.astype(np.int32)
                fields[name] = (offsets, begins, ends, ids)
            block = ListBlock(first, n, fields)
            if self.not_lists is not None:  # their fields are runs or ids, not in the block
                block.moved[:] = self.not_lists
            table.add_list_block(block)
        for name, sel, rows in self.ids:
            # what addVertex keeps of a connection that is not a run: its index array
            for i, row in zip(sel.tolist(), rows, strict=True):
                extra.setdefault(first + i, {})[name] = row
        for _name, specs, values in self.per_vertex:
            for i, value in enumerate(values):
                spec = specs[0] if which is None else specs[int(which[i])]
                graph._connect_field(table[first + i], spec, value)
