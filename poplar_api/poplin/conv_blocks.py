"""The partial-sum vertices of one convolution pass, planned with array operations.

A plan cuts the convolution ``[G, B, *O, Co, Ci]`` into blocks, one per tile; each
block with work becomes one partial-sum vertex whose ``in``, ``weights`` and ``out``
fields are lists of vectors of the operands' elements (one vector per input-channel
group, per output-channel group and per conv group of the block). Blocks of the same
*shape* (the same tile kind up to a shift of the input window and the same group,
input- and output-channel extents) have the same vectors up to an offset in each
operand, so their element positions are one index pattern plus one base per block:
this module gathers them for every block of a shape at once, and assembles the fields
of all vertices in block order (the order :func:`~poplar_api.poplin.conv._conv` adds
them, so vertex ids, constants and the graph are those of one block at a time).

Blocks without work (no output reads a real input, or an empty input-channel range)
are zeroed instead; their outputs still live on the block's tile.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from typing import Any

import numba
import numpy as np

from poplar_api.graph import Constants, Graph, Segments
from poplar_api.graph_connections import RunSegments
from poplar_api.poplin.conv_ids import SeparableIds, first_rows, piece_positions, separable_ids
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.conv_splits import kept_dim_maps
from poplar_api.poplin.conv_vertex_estimates import geometry_cache, partial_estimate, vertex_method
from poplar_api.poplin.conv_vertices import conv_vertex
from poplar_api.poplin.conv_worklists import (
    TileGeometry,
    relative_dim_key,
    relative_key,
    tile_geometry,
)
from poplar_api.run_ids import MIN_ELEMENTS_PER_RUN, RunIds
from poplar_api.tensor import Tensor, concat
from poplar_api.types import INT, UNSIGNED_INT, UNSIGNED_SHORT, Type

__all__ = ["Assembler", "Partials", "block_table", "ids_view", "pattern", "plan_partials"]

_ZERO = np.zeros(1, np.int64)
#: the source of rows whose ids are computed (:meth:`Assembler.gather_separable`)
_NO_SOURCE = np.zeros(0, np.int64)


@dataclasses.dataclass
class TileKind:
    """What the partial-sum vertices of one tile geometry share: the vertex method and
    class, the worklists' type, values and sizes, and estimates by group counts."""

    method: str
    cls: type
    wl_type: Type
    wl_values: np.ndarray
    wl_sizes: np.ndarray
    estimates: dict[tuple, int]


def _tile_kind(
    graph: Graph, plan: ConvPlan, geom: TileGeometry, kpos: int, fp: Type, acc_type: Type
) -> TileKind:
    method = vertex_method(plan, geom, kpos)
    # the worklists, one after another (kernel position, then worker), are the entries
    wl_values = geom.entries
    limited = bool(wl_values.size == 0 or wl_values.max() <= np.iinfo(np.uint16).max)
    cls = conv_vertex(method, fp, acc_type, limited, plan.num_conv_units,
                      plan.conv_input_load_elems,
                      max(plan.conv_groups_per_group, 4))  # fmt: skip
    graph.addCodelets(cls)
    sizes = 3 * np.diff(geom.entry_bounds)  # (one array: no tuple per worklist)
    return TileKind(method, cls, UNSIGNED_SHORT if limited else UNSIGNED_INT, wl_values,
                    sizes, {})  # fmt: skip


def ids_view(t: Tensor, ids: np.ndarray) -> Tensor:
    """A tensor of ``ids``, element ids of ``t`` (or of constants of its type) gathered
    for the fields of vertices: made from the ids as they are, where ``t.elements``
    would look every position up again."""
    return Tensor(t.graph, t.elementType(), ids, "convolution fields")


@dataclasses.dataclass
class _Field:
    """A VectorList field of every vertex, in vertex order: the element ids of all
    vectors (``flat``, or ``runs`` when they were found as runs), each vector's size,
    each vertex's vector count, and where each vertex's ids and vectors begin (one entry
    more than vertices)."""

    flat: np.ndarray | None
    sizes: np.ndarray
    vectors: np.ndarray
    at: np.ndarray
    piece_at: np.ndarray
    runs: RunIds | None = None

    def segments(self, t: Tensor, i0: int, i1: int) -> Segments | RunSegments:
        """The field of vertices ``i0 .. i1 - 1``: runs where a list block would keep
        its ids as runs, else a tensor of the element ids (of ``t``, and of the zero
        constants of an expanded input)."""
        a, b = int(self.at[i0]), int(self.at[i1])
        p, q = int(self.piece_at[i0]), int(self.piece_at[i1])
        sizes, vectors = self.sizes[p:q], self.vectors[i0:i1]
        if self.runs is None:
            return Segments(ids_view(t, self.flat[a:b]), sizes, vectors)
        sub = runs_between(self.runs, a, b)
        if sub is None:
            return Segments(ids_view(t, self.runs[a:b]), sizes, vectors)
        return RunSegments(t, sub, sizes, vectors)


def runs_between(runs: RunIds, a: int, b: int) -> RunIds | None:
    """Positions ``a .. b - 1`` of ``runs`` as runs of their own, or None where
    :func:`~poplar_api.run_ids.as_runs` would keep their ids as an array (fewer than
    ``MIN_ELEMENTS_PER_RUN`` ids per run on average, or too few ids)."""
    n = b - a
    if n < 2 * MIN_ELEMENTS_PER_RUN:
        return None
    r0 = int(np.searchsorted(runs.starts, a, side="right")) - 1
    r1 = int(np.searchsorted(runs.starts, b, side="left"))
    if r1 - r0 > n // MIN_ELEMENTS_PER_RUN:
        return None
    starts = runs.starts[r0:r1] - a
    firsts = runs.firsts[r0:r1].copy()
    firsts[0] += a - int(runs.starts[r0])  # the first run may begin before a
    starts[0] = 0
    return RunIds(starts, firsts, n, np.int64)


@dataclasses.dataclass
class _Specs:
    """The constants of a pass, in the order they are made: element types, sizes,
    where each one's values begin in ``pool`` (the values of all of them), tiles and
    names."""

    types: list[Type]
    sizes: np.ndarray
    starts: np.ndarray
    pool: np.ndarray
    tiles: np.ndarray
    names: list[str]

    def make(self, graph: Graph) -> Constants | None:
        """All of them, in one ``addPackedConstants`` call (None when there are none)."""
        if not self.types:
            return None
        return graph.addPackedConstants(self.types, self.sizes, self.pool, self.names,
                                        self.tiles, self.starts)  # fmt: skip


@dataclasses.dataclass
class Partials:
    """The partial-sum vertices of one pass, in block order, before their constants
    exist: per vertex its tile, kind, estimate and the indices of its worklists and
    parameters constants in ``specs``; the ``in``, ``weights`` and ``out`` fields; the
    output positions of blocks without work (the outputs' tiles:
    :func:`~poplar_api.poplin.conv_layout.grouped_tiles`)."""

    tiles: np.ndarray
    #: the tile kinds of the pass (None: a geometry without work), and each vertex's
    #: (an index into them)
    kinds: list[TileKind | None]
    kind_of: np.ndarray
    estimates: np.ndarray
    wl_spec: np.ndarray
    params_spec: np.ndarray
    ins: _Field
    ws: _Field
    outs: _Field
    zeros: list[np.ndarray]
    specs: _Specs
    #: tile -> index in ``specs`` of the tile's zero constant (expanded inputs)
    zero_specs: dict[int, int]

    def add_vertices(
        self, graph: Graph, cs: Any, act: Tensor, ker: Tensor, dst: Tensor, made: Constants
    ) -> None:
        """Add the vertices, consecutive ones of a class in one ``addVertices`` call
        (``made``: the constants of ``specs``; each -1 of the ``in`` field, a zero of an
        expanded input, becomes the id of its tile's zero constant)."""
        if self.zero_specs:
            ins = self.ins
            zero_id = np.full(int(self.tiles.max()) + 1, -1, np.int64)
            for tile, i in self.zero_specs.items():
                zero_id[tile] = int(made[i].flat_index()[0])
            per_elem = np.repeat(self.tiles, ins.at[1:] - ins.at[:-1])
            miss = ins.flat < 0
            ins.flat[miss] = zero_id[per_elem[miss]]
        cls_id: dict[type, int] = {}
        kind_cls = np.array(
            [-1 if k is None else cls_id.setdefault(k.cls, len(cls_id)) for k in self.kinds],
            np.int64,
        )
        per_vertex = kind_cls[self.kind_of]
        cuts = [0, *(np.flatnonzero(np.diff(per_vertex)) + 1).tolist(), per_vertex.size]
        for i0, i1 in itertools.pairwise(cuts):
            if i1 > i0:
                self._add(graph, cs, i0, i1, act, ker, dst, made)

    def _add(
        self, graph: Graph, cs: Any, i0: int, i1: int, act: Tensor, ker: Tensor, dst: Tensor,
        made: Constants,
    ) -> None:  # fmt: skip
        ks = self.kind_of[i0:i1]
        # each kind's worklist sizes, looked up for the vertices of the run
        sizes = [k.wl_sizes if k else _NO_SOURCE for k in self.kinds]
        count = np.array([x.size for x in sizes], np.int64)
        start = np.cumsum(count) - count
        table = np.concatenate(sizes) if sizes else np.zeros(0, np.int64)
        wl_vectors = count[ks]
        firsts = start[ks]
        wl_sizes = table[
            np.repeat(firsts - np.cumsum(wl_vectors) + wl_vectors, wl_vectors)
            + np.arange(int(wl_vectors.sum()))
        ]
        wl_idx = self.wl_spec[i0:i1]
        empty = np.array([k is None or k.wl_values.size == 0 for k in self.kinds], bool)[ks]
        if not empty.any():
            worklists = made.concat(wl_idx)
        else:  # a vertex without entries has a placeholder element, not connected (rare)
            parts = [
                made[int(i)].slice(0, 0) if e else made[int(i)]
                for i, e in zip(wl_idx.tolist(), empty.tolist(), strict=True)
            ]
            worklists = concat(parts) if len(parts) > 1 else parts[0]
        params = made.concat(self.params_spec[i0:i1])
        n = i1 - i0
        connections = {
            "in": self.ins.segments(act, i0, i1),
            "weights": self.ws.segments(ker, i0, i1),
            "out": self.outs.segments(dst, i0, i1),
            "worklists": Segments(worklists, wl_sizes, wl_vectors),
            "params": params.reshape([n, params.numElements() // n]),
        }
        graph.addVertices(cs, self.kinds[int(ks[0])].cls, self.tiles[i0:i1], connections,
                          self.estimates[i0:i1])  # fmt: skip


def block_table(rng: list[list[tuple[int, int]]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every block in row-major order of its indices: ``(ix, lo, hi)``, each
    ``int64[blocks, dims]``."""
    counts = [len(r) for r in rng]
    ix = np.indices(counts).reshape(len(counts), -1).T
    lo = np.stack([np.array([a for a, _ in r], np.int64)[ix[:, d]] for d, r in enumerate(rng)], 1)
    hi = np.stack([np.array([b for _, b in r], np.int64)[ix[:, d]] for d, r in enumerate(rng)], 1)
    return ix, lo, hi


def pattern(
    strides: np.ndarray, pieces: list[tuple[list[int], list[int]]]
) -> tuple[np.ndarray, np.ndarray]:
    """Positions, relative to a base, of ``pieces`` (each ``(offsets, shape)`` per
    dimension of an array of ``strides``) one after the other, and each piece's size."""
    shapes = [tuple(int(n) for n in shape) for _, shape in pieces]
    if len(shapes) > 1 and shapes.count(shapes[0]) == len(shapes):  # (one shape: common)
        grid = _grid(shapes[0], strides)
        bases = np.array([o for o, _ in pieces], np.int64).reshape(len(shapes), -1) @ strides
        return (bases[:, None] + grid).reshape(-1), np.full(len(shapes), grid.size, np.int64)
    rel, sizes = [], []
    grids: dict[tuple[int, ...], np.ndarray] = {}  # each shape's positions from its origin
    for (offsets, _), key in zip(pieces, shapes, strict=True):
        grid = grids.get(key)
        if grid is None:
            grid = grids[key] = _grid(key, strides)
        rel.append(grid + int(np.dot(offsets, strides)))
        sizes.append(grid.size)
    flat = np.concatenate(rel) if rel else np.zeros(0, np.int64)
    return flat, np.asarray(sizes, np.int64)


def _grid(shape: tuple[int, ...], strides: np.ndarray) -> np.ndarray:
    """Positions (int64, row-major) of a ``shape`` box from its origin, at ``strides``."""
    grid = np.zeros(shape, np.int64)
    for d, n in enumerate(shape):
        ax = [1] * len(shape)
        ax[d] = n
        grid = grid + (np.arange(n, dtype=np.int64) * strides[d]).reshape(ax)
    return grid.reshape(-1)


class Assembler:
    """Per-shape gathered rows put into one field in vertex order.

    A shape's rows are either given (:meth:`add`) or gathered from a source array by
    one index pattern plus a base per member (:meth:`gather`); :meth:`field` writes
    them straight into the field's array in one compiled pass per shape (no
    members-by-pattern array made first). When the source's ids are a sum of one term
    per dimension (:mod:`~poplar_api.poplin.conv_ids`, :meth:`gather_separable`), a
    row's ids are also given as one id pattern plus an id base per member: they are
    then computed, not read from the source at positions far apart, and its runs are
    the pattern's."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.lengths = np.zeros(n, np.int64)
        self.npieces = np.zeros(n, np.int64)
        #: (members, source, base per member, pattern, piece sizes, the ids as
        #: (id base per member, id pattern) or None)
        self.rows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, Any]] = []

    def add(self, members: np.ndarray, values: np.ndarray, sizes: np.ndarray) -> None:
        """Row ``k`` of ``values`` is vertex ``members[k]``'s, in pieces of ``sizes``."""
        width = values.shape[1]
        base = np.arange(members.size, dtype=np.int64) * width
        self.gather(members, values.reshape(-1), base, np.arange(width, dtype=np.int64), sizes)

    def gather(
        self, members: np.ndarray, source: np.ndarray, base: np.ndarray, rel: np.ndarray,
        sizes: np.ndarray, ids: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:  # fmt: skip
        """Vertex ``members[k]`` gets ``source[base[k] + rel]``, in pieces of ``sizes``;
        ``ids``, when given, is ``(id_base, id_rel)`` with ``source[base[k] + rel] ==
        id_base[k] + id_rel`` for every ``k``."""
        self.lengths[members] = rel.size
        self.npieces[members] = sizes.size
        base = base.astype(np.int64, copy=False)
        self.rows.append((members, source, base, rel, sizes, ids))

    def gather_separable(
        self, members: np.ndarray, source: np.ndarray | Callable[[], np.ndarray],
        base: np.ndarray, rel: np.ndarray, sizes: np.ndarray, sep: SeparableIds,
        index: np.ndarray, positions: np.ndarray,
    ) -> None:  # fmt: skip
        """:meth:`gather` from a source whose ids are ``sep``: member ``k``'s block
        begins at position ``index[k]`` of it and reads ``positions`` from there (the
        multi-dimensional forms of ``base`` and ``rel``), so its ids are computed
        (:meth:`SeparableIds.blocks`; gathered when they cannot be, from ``source``,
        the ids as a flat array or a function making it: only then is it made)."""
        found = sep.blocks(index, positions)
        if found is None:
            self.gather(members, source() if callable(source) else source, base, rel, sizes)
            return
        for which, bases, ids in found:  # (the source is not read: inside it by blocks)
            self.gather(members[which], _NO_SOURCE, base[which], rel, sizes, (bases, ids))

    def gather_rows(
        self, members: np.ndarray, source: np.ndarray | Callable[[], np.ndarray],
        base: np.ndarray, rel: np.ndarray, sizes: np.ndarray, sep: SeparableIds,
        index: np.ndarray, positions: np.ndarray, rows: np.ndarray, row_step: int,
    ) -> None:  # fmt: skip
        """:meth:`gather_separable` of ``rows`` of the first dimension one after another:
        member ``k`` reads ``positions`` (first column 0; flat ``rel``) from ``index[k]``
        moved ``r`` along the first dimension (``r * row_step`` in the flat source), for
        each ``r`` of ``rows``. Where the first table keeps one step, the blocks are
        found for the first row and the other rows' ids are that step apart (a
        reduction's rows of partials: one pattern, not one per row, is found)."""
        stacked = (rows[:, None] * row_step + rel[None, :]).reshape(-1)
        inside = rows.size == 0 or (
            int(rows.min()) + int(index[:, 0].min()) >= 0
            and int(rows.max()) + int(index[:, 0].max()) < int(sep.size[0])
        )
        found = sep.blocks(index, positions) if sep.linear[0] and inside else None
        if found is None:
            every = np.concatenate([positions + np.eye(1, positions.shape[1], dtype=np.int64) * r
                                    for r in rows.tolist()])  # fmt: skip
            self.gather_separable(members, source, base, stacked, sizes, sep, index, every)
            return
        steps = rows * int(sep.steps[0])
        for which, bases, ids in found:  # (the source is not read: inside it by blocks)
            pattern = (steps[:, None] + ids[None, :]).reshape(-1)
            self.gather(members[which], _NO_SOURCE, base[which], stacked, sizes, (bases, pattern))

    def _bounds(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Where each vertex's elements and pieces begin, and every piece's size."""
        at = np.zeros(self.n + 1, np.int64)
        np.cumsum(self.lengths, out=at[1:])
        piece_at = np.zeros(self.n + 1, np.int64)
        np.cumsum(self.npieces, out=piece_at[1:])
        sizes = np.empty(int(piece_at[-1]), np.int64)
        for members, _, _, _, psizes, _ in self.rows:
            if members.size:  # (pieces of no elements have only their sizes, 0, to write)
                every = np.arange(psizes.size, dtype=np.int64)  # each member all sizes
                zero = np.zeros(members.size, np.int64)
                _gather_rows(_read_only(psizes), zero, every, members, piece_at, sizes)
        return at, piece_at, sizes

    def field(self) -> _Field:
        at, piece_at, sizes = self._bounds()
        flat = np.empty(int(at[-1]), np.int64)
        for members, source, base, rel, _, ids in self.rows:
            if not members.size:
                continue
            if ids is not None:
                _pattern_rows(ids[0], ids[1], members, at, flat)
            elif _plain(source, base, rel):
                _gather_rows(_read_only(source), base, rel, members, at, flat)
            else:  # numpy's negative positions count from the end
                dst = (at[members][:, None] + np.arange(rel.size)).reshape(-1)
                flat[dst] = source[(base[:, None] + rel).reshape(-1)]
        return _Field(flat, sizes, self.npieces, at, piece_at)

    def run_field(self, ids_of: tuple[np.ndarray, ...] = ()) -> _Field | None:
        """The field with its ids found as runs, without an array of every id: one
        compiled pass per shape finds each row's runs, which are then put in vertex
        order and joined where a run goes on into the next row. None when a source
        holds negative values (zeros of an expanded input) or positions outside it,
        or the rows hold too many runs (:meth:`field` then). Sources in ``ids_of``
        are a tensor's element ids (none negative: not looked at for them)."""
        at, piece_at, sizes = self._bounds()
        total = int(at[-1])
        limit = total // MIN_ELEMENTS_PER_RUN + self.n
        vert = np.empty(limit, np.int64)
        off = np.empty(limit, np.int64)
        first = np.empty(limit, np.int64)
        count = 0
        clean: dict[int, bool] = {id(s): True for s in ids_of}
        for members, source, base, rel, _, ids in self.rows:
            if not members.size or not rel.size:
                continue
            if ids is not None:  # the pattern's runs, at each member's id base
                if int(ids[0].min()) + int(ids[1].min()) < 0:
                    return None
                starts = np.flatnonzero(np.diff(ids[1], prepend=ids[1][0] - 2) != 1)
                count = _pattern_runs(ids[0], ids[1], starts, members, vert, off, first, count)
                if count < 0:
                    return None
                continue
            ok = clean.get(id(source))
            if ok is None:
                ok = clean[id(source)] = bool(source.size == 0 or int(source.min()) >= 0)
            if not ok or not _plain(source, base, rel):
                return None
            count = _row_runs(_read_only(source), base, rel, members, vert, off, first, count)
            if count < 0:
                return None
        pos = at[vert[:count]] + off[:count]
        order = np.argsort(pos, kind="stable")
        pos, first = pos[order], first[:count][order]
        # a run that goes on from the one before it (across rows) is part of it
        keep = np.ones(count, bool)
        keep[1:] = first[1:] != first[:-1] + (pos[1:] - pos[:-1])
        runs = RunIds(pos[keep], first[keep], total, np.int64)
        return _Field(None, sizes, self.npieces, at, piece_at, runs)


def _plain(source: np.ndarray, base: np.ndarray, rel: np.ndarray) -> bool:
    """Whether every position ``base[k] + rel[j]`` lies in ``source``."""
    return not rel.size or (
        int(base.min()) + int(rel.min()) >= 0 and int(base.max()) + int(rel.max()) < source.size
    )


@numba.njit(cache=True, nogil=True)
def _row_runs(source, base, rel, members, vert, off, first, count):  # pragma: no cover
    """Append the runs of consecutive ids of each row ``source[base[k] + rel]``: member
    ``members[k]``, the position in the row and the id where each begins; the new count,
    or -1 when the buffers are full (positions checked by the caller)."""
    limit = vert.shape[0]
    for k in range(members.shape[0]):
        b = base[k]
        prev = source[b + rel[0]] - 1
        for j in range(rel.shape[0]):
            v = source[b + rel[j]]
            if j == 0 or v != prev + 1:
                if count == limit:
                    return -1
                vert[count] = members[k]
                off[count] = j
                first[count] = v
                count += 1
            prev = v
    return count


@numba.njit(cache=True, nogil=True)
def _pattern_runs(id_base, id_rel, starts, members, vert, off, first, count):  # pragma: no cover
    """:func:`_row_runs` of rows ``id_base[k] + id_rel``: the runs of ``id_rel``
    (beginning at ``starts``) at each member's base."""
    limit = vert.shape[0]
    for k in range(members.shape[0]):
        for s in range(starts.shape[0]):
            if count == limit:
                return -1
            j = starts[s]
            vert[count] = members[k]
            off[count] = j
            first[count] = id_base[k] + id_rel[j]
            count += 1
    return count


@numba.njit(cache=True, nogil=True)
def _pattern_rows(id_base, id_rel, members, at, out):  # pragma: no cover - compiled
    """``out[at[members[k]] + j] = id_base[k] + id_rel[j]`` for every member ``k`` and
    pattern position ``j``."""
    width = id_rel.shape[0]
    for k in range(members.shape[0]):
        s, b = at[members[k]], id_base[k]
        for j in range(width):
            out[s + j] = b + id_rel[j]


def _read_only(source: np.ndarray) -> np.ndarray:
    """``source`` viewed read-only (the caller's array as it was): what
    :func:`_gather_rows` and :func:`_row_runs` read, one compiled version each however
    the rows were given."""
    view = source.view()
    view.flags.writeable = False
    return view


@numba.njit(cache=True, nogil=True)
def _gather_rows(source, base, rel, members, at, out):  # pragma: no cover - compiled
    """``out[at[members[k]] + j] = source[base[k] + rel[j]]`` for every member ``k``
    and pattern position ``j`` (positions checked by the caller)."""
    width = rel.shape[0]
    for k in range(members.shape[0]):
        s, b = at[members[k]], base[k]
        for j in range(width):
            out[s + j] = source[b + rel[j]]


def plan_partials(
    graph: Graph,
    plan: ConvPlan,
    params: ConvParams,
    rng: list[list[tuple[int, int]]],
    act_pos: np.ndarray,
    ker_pos: np.ndarray,
    dst_pos: np.ndarray | SeparableIds,
    need_reduce: bool,
    name: str,
    acc_type: Type,
    act_type: Type,
) -> Partials:
    """The partial-sum vertices of the pass ``params`` under ``plan``, planned for all
    blocks of one shape at once, in the order one block at a time would add them.

    Parameters
    ----------
    graph, plan
        The graph and the plan of the pass.
    params
        The convolution the plan splits (the expanded form for an im2col plan).
    rng
        Per dimension ``[G, B, *O, Co, Ci]`` the plan's block ranges.
    act_pos, ker_pos
        The operands' element ids in the vertex layouts: ``[G, B, *F, Ci]`` (``-1``
        marks a zero of an expanded input, read from a one-element constant on the
        vertex's tile, whose id :meth:`Partials.add_vertices` puts in), or ``[Pco, G,
        B, *F, Ci]``, a copy per output-channel part (inputs broadcast before a serial
        loop: a block reads its part's), and ``[G, *K, Co, Ci]``.
    dst_pos
        The destination's element ids: ``[Ci parts, G, B, *O, Co]`` with
        ``need_reduce``, else ``[G, B, *O, Co]``; or their tables (the array is then
        made only if a field cannot be computed from them).
    need_reduce
        Whether the vertices write partials of the input-channel parts.
    name, acc_type, act_type
        Name prefix of the constants; the vertices' accumulator type; the input's
        element type (that of the zero constants).

    Returns
    -------
    Partials
        Vertices, fields (element ids), constants to make, output tiles and the
        positions in the destination of blocks to zero.
    """
    target = graph.getTarget()
    workers = target.getNumWorkerContexts()
    maps = kept_dim_maps(params)  # (the planner's, read only)
    nd = params.getNumFieldDims()
    kpos = int(math.prod(params.kernelShape))
    fp = params.inputType
    ix, lo, hi = block_table(rng)
    block_tiles = plan.tiles.reshape(-1).astype(np.int64)
    # the tile kind of every (batch range, field ranges) combination, in the order
    # blocks first meet them
    combo_dims = list(range(1, 2 + nd))
    combo_counts = [len(rng[d]) for d in combo_dims]
    combo_of = np.ravel_multi_index(ix[:, combo_dims].T, combo_counts)
    shift_id = np.empty(math.prod(combo_counts), np.int64)
    windows = np.empty((shift_id.size, nd), np.int64)
    shifted: dict[tuple, tuple[TileGeometry, TileKind | None, list[int], int]] = {}
    combo_geom: list[TileGeometry] = []
    kinds_by_shift: list[TileKind | None] = []
    # each field range's part of the blocks' keys, made once per range
    dim_keys = [[relative_dim_key(maps[d], a, b) for a, b in rng[2 + d]] for d in range(nd)]
    geoms = geometry_cache(graph, params)  # (the planner's, of the blocks it costed)
    for c, cix in enumerate(itertools.product(*[range(n) for n in combo_counts])):
        b0, b1 = rng[1][cix[0]]
        oranges = [rng[2 + d][cix[1 + d]] for d in range(nd)]
        rkey, lows = relative_key(b1 - b0, [dim_keys[d][cix[1 + d]] for d in range(nd)])
        same = shifted.get(rkey)
        if same is None:
            gkey = (b1 - b0, tuple(oranges))
            geom = geoms.get(gkey)
            if geom is None:
                geom = geoms[gkey] = tile_geometry(maps, b1 - b0, oranges, workers)
            kind = _tile_kind(graph, plan, geom, kpos, fp, acc_type) if geom.positions else None
            shifted[rkey] = same = (geom, kind, lows, len(kinds_by_shift))
            kinds_by_shift.append(kind)
            starts = [a for a, _ in geom.window]
        else:  # the same block up to a shift of its input window: its class's geometry
            # (whose window has the same sizes), the window's begin shifted
            geom, _, lows0, _ = same
            starts = [
                a - l0 + low for (a, _), l0, low in zip(geom.window, lows0, lows, strict=True)
            ]
        shift_id[c] = same[3]
        windows[c] = starts if nd else []
        combo_geom.append(geom)  # (only the sizes of its window are read: ``windows``)
    if isinstance(dst_pos, SeparableIds):
        dst_shape, dst_sep = dst_pos.shape, dst_pos
        dst_flat: np.ndarray | Callable[[], np.ndarray] = dst_pos.flat  # (made if read)
        dst_st = np.array(np.empty(dst_shape, np.int8).strides, np.int64)  # (row-major)
    else:
        dst_c = np.ascontiguousarray(dst_pos)
        dst_shape, dst_sep, dst_flat = dst_c.shape, separable_ids(dst_c), dst_c.reshape(-1)
        dst_st = np.array(dst_c.strides, np.int64) // dst_c.itemsize
    # blocks with work become vertices; the others are zeroed
    sid = shift_id[combo_of]
    has_kind = np.array([k is not None for k in kinds_by_shift], bool)[sid]
    work = has_kind & (hi[:, -1] > lo[:, -1])
    idle = np.flatnonzero(~work).tolist()
    positions = np.arange(math.prod(dst_shape), dtype=np.int64).reshape(dst_shape) if idle else None
    zeros = [_block_positions(positions, lo[i], hi[i], need_reduce, ix[i]) for i in idle]
    vb = np.flatnonzero(work)
    n = vb.size
    ext = hi[vb] - lo[vb]
    # vertices of one shape: the same kind (shift class) and extents of every dimension
    key = np.concatenate([sid[vb, None], ext], 1)
    first, cls_of = first_rows(key)
    act_c = np.ascontiguousarray(act_pos)
    ker_c = np.ascontiguousarray(ker_pos)
    act_st = np.array(act_c.strides, np.int64) // act_c.itemsize
    copies = act_c.ndim == nd + 4  # a copy of the inputs per output-channel part
    in_st, lead = (act_st[1:], [0]) if copies else (act_st, [])
    ker_st = np.array(ker_c.strides, np.int64) // ker_c.itemsize
    act_flat, ker_flat = act_c.reshape(-1), ker_c.reshape(-1)
    # the operands whose ids are a sum of one term per dimension: fields computed
    act_sep, ker_sep = separable_ids(act_c), separable_ids(ker_c)
    ins, ws, outs = Assembler(n), Assembler(n), Assembler(n)
    estimates = np.empty(n, np.int64)
    pvals = np.empty((n, 8), np.int64)
    kind_of = np.empty(n, np.int64)
    pad = np.zeros(n, bool)
    for c, f in enumerate(first.tolist()):
        members = np.flatnonzero(cls_of == c)
        b = vb[members]
        combo = combo_of[vb[f]]
        geom, kind = combo_geom[combo], kinds_by_shift[sid[vb[f]]]
        assert kind is not None
        g_n, b_n = ext[f, 0], ext[f, 1]
        osz = ext[f, 2 : 2 + nd].tolist()
        co_n, ci_n = int(ext[f, -2]), int(ext[f, -1])
        if plan.method in ("HMAC", "VMAC"):
            ig_r, og_r = [(0, ci_n)], [(0, co_n)]
        else:
            icg, ocg = plan.in_chans_per_group, plan.out_chans_per_group
            ig_r = [(a, min(a + icg, ci_n)) for a in range(0, ci_n, icg)]
            og_r = [(a, min(a + ocg, co_n)) for a in range(0, co_n, ocg)]
        wsz = [hi_ - lo_ for lo_, hi_ in geom.window]
        zf = [0] * nd
        kz = [0] * nd
        in_pieces = [([*lead, g, 0, *zf, a], [*[1] * len(lead), 1, int(b_n), *wsz, bb - a])
                     for g in range(g_n) for a, bb in ig_r]  # fmt: skip
        out_pieces, w_pieces = [], []
        for g in range(g_n):
            for oa, ob in og_r:
                out_pieces.append(([g, 0, *zf, oa], [1, int(b_n), *osz, ob - oa]))
                w_pieces += [([g, *kz, oa, a], [1, *params.kernelShape, ob - oa, bb - a])
                             for a, bb in ig_r]  # fmt: skip
        # bases of each member block in each operand
        wlo = windows[combo_of[b]]
        in_base = (lo[b, 0] * in_st[0] + lo[b, 1] * in_st[1] + wlo @ in_st[2 : 2 + nd]
                   + lo[b, -1] * in_st[-1])  # fmt: skip
        in_at = [lo[b, :2], wlo, lo[b, -1:]]
        if copies:  # the block's output-channel part picks its copy
            in_base = in_base + ix[b, -2] * act_st[0]
            in_at = [ix[b, -2:-1], *in_at]
        w_base = lo[b, 0] * ker_st[0] + lo[b, -2] * ker_st[-2] + lo[b, -1] * ker_st[-1]
        o_st = dst_st[1:] if need_reduce else dst_st
        o_base = lo[b, 0] * o_st[0] + lo[b, 1] * o_st[1] + lo[b, 2 : 2 + nd] @ o_st[2 : 2 + nd]
        o_base = o_base + lo[b, -2] * o_st[-1]
        if need_reduce:
            o_base = o_base + ix[b, -1] * dst_st[0]
        zb = np.zeros((b.size, nd), np.int64)
        _gather(ins, members, act_flat, in_base, in_pieces, act_st, act_sep, in_at)
        _gather(ws, members, ker_flat, w_base, w_pieces, ker_st, ker_sep,
                [lo[b, :1], zb, lo[b, -2:]])  # fmt: skip
        if need_reduce:  # (the pieces within one input-channel part's partials)
            _gather(outs, members, dst_flat, o_base, out_pieces, o_st, dst_sep,
                    [ix[b, -1:], lo[b, : 2 + nd], lo[b, -2:-1]], part=True)  # fmt: skip
        else:
            _gather(outs, members, dst_flat, o_base, out_pieces, o_st, dst_sep,
                    [lo[b, : 2 + nd], lo[b, -2:-1]])  # fmt: skip
        counts = (int(g_n), len(ig_r), len(og_r))
        chans = (ci_n, co_n)
        est = kind.estimates.get((counts, chans))
        if est is None:
            est = partial_estimate(plan, kind.method, geom, int(b_n), counts, chans, params,
                                   target)  # fmt: skip
            kind.estimates[(counts, chans)] = est = int(est)
        estimates[members] = est
        in_rows = int(b_n) * int(math.prod(geom.in_shape))
        out_rows = int(b_n) * int(math.prod(geom.out_shape))
        pvals[members] = [counts[0], counts[2], counts[1], kpos, in_rows, out_rows,
                          geom.in_stride, geom.out_stride]  # fmt: skip
        kind_of[members] = sid[vb[f]]
    tiles = block_tiles[vb]
    ins_field = ins.field() if plan.expanded else _fields(ins)
    if plan.expanded:  # vertices reading a zero of the expanded input (position -1)
        pad = np.zeros(n, bool)
        zeros_at = np.flatnonzero(ins_field.flat < 0)
        pad[np.searchsorted(ins_field.at, zeros_at, side="right") - 1] = True
    # the constants, in block order: a tile's zero on its first padded vertex, then
    # each vertex's worklists and parameters
    padded = np.flatnonzero(pad)
    _, firsts = np.unique(tiles[padded], return_index=True)
    zero_v = padded[np.sort(firsts)]
    has_zero = np.zeros(n, np.int64)
    has_zero[zero_v] = 1
    start = np.cumsum(2 + has_zero) - (2 + has_zero)
    wl_spec, params_spec = start + has_zero, start + has_zero + 1
    zero_spec = start[zero_v]
    total = 2 * n + zero_v.size
    types = np.empty(total, object)
    # the values: each kind's worklists (a placeholder element for a kind without
    # entries), then every vertex's parameters and a zero, as segments of one pool
    kind_types = np.empty(len(kinds_by_shift), object)
    kind_values = [
        (kind.wl_values if kind.wl_values.size else _ZERO) if kind is not None else _NO_SOURCE
        for kind in kinds_by_shift
    ]
    for k, kind in enumerate(kinds_by_shift):
        if kind is not None:
            kind_types[k] = kind.wl_type
    kind_sizes = np.array([v.size for v in kind_values], np.int64)
    kind_starts = np.cumsum(kind_sizes) - kind_sizes
    at_params = int(kind_sizes.sum())
    pool = np.concatenate([*kind_values, pvals.reshape(-1), _ZERO])
    types[wl_spec] = kind_types[kind_of]
    types[params_spec] = INT
    types[zero_spec] = act_type
    sizes = np.empty(total, np.int64)
    starts = np.empty(total, np.int64)
    sizes[wl_spec], starts[wl_spec] = kind_sizes[kind_of], kind_starts[kind_of]
    sizes[params_spec] = pvals.shape[1]
    starts[params_spec] = at_params + np.arange(n, dtype=np.int64) * pvals.shape[1]
    sizes[zero_spec], starts[zero_spec] = 1, pool.size - 1
    names = np.empty(total, object)
    names[wl_spec], names[params_spec], names[zero_spec] = (
        f"{name}/worklists",
        f"{name}/params",
        f"{name}/zero",
    )
    spec_tiles = np.empty(total, np.int64)
    spec_tiles[wl_spec] = spec_tiles[params_spec] = tiles
    spec_tiles[zero_spec] = tiles[zero_v]
    specs = _Specs(types.tolist(), sizes, starts, pool, spec_tiles, names.tolist())
    zero_specs = dict(zip(tiles[zero_v].tolist(), zero_spec.tolist(), strict=True))
    return Partials(tiles, kinds_by_shift, kind_of, estimates, wl_spec, params_spec,
                    ins_field, _fields(ws), _fields(outs), zeros, specs,
                    zero_specs)  # fmt: skip


def _gather(
    asm: Assembler, members: np.ndarray, source: np.ndarray | Callable[[], np.ndarray],
    base: np.ndarray,
    pieces: list[tuple[list[int], list[int]]], strides: np.ndarray,
    sep: SeparableIds | None, at: list[np.ndarray], part: bool = False,
) -> None:  # fmt: skip
    """``asm.gather`` of ``pieces`` of ``source`` (element ``strides``) for the blocks
    of ``members`` (positions ``base``), with the ids computed where ``sep`` gives
    them (the blocks beginning at the positions whose columns ``at`` gives; with
    ``part`` the first is the input-channel part of the partials, which the pieces
    leave out)."""
    rel, sizes = pattern(strides, pieces)
    if sep is None:
        asm.gather(members, source() if callable(source) else source, base, rel, sizes)
        return
    index = np.concatenate(at, 1).astype(np.int64, copy=False)
    positions = piece_positions([([0, *o], [1, *s]) for o, s in pieces] if part else pieces)
    asm.gather_separable(members, source, base, rel, sizes, sep, index, positions)


def _fields(asm: Assembler) -> _Field:
    """The field of ``asm`` as runs where it can be, else as ids."""
    field = asm.run_field()
    return asm.field() if field is None else field


def _block_positions(
    dst_pos: np.ndarray, lo: np.ndarray, hi: np.ndarray, need_reduce: bool, ix: np.ndarray
) -> np.ndarray:
    """The destination positions of one block ``[G, B, *O, Co]`` (of its input-channel
    part when the partials are reduced)."""
    dst = dst_pos[int(ix[-1])] if need_reduce else dst_pos
    box = tuple(slice(int(a), int(b)) for a, b in zip(lo[:-1], hi[:-1], strict=True))
    return dst[box].reshape(-1)
