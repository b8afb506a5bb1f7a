"""Lowering of ``Copy`` and ``PrintTensor`` programs.

* ``Copy`` between tensors: elements already on their destination tile are copied by
  Poplar's runtime copy vertices, one per worker context of each tile, costed by
  :mod:`ipusim.machine_copies` (regions contiguous on both sides, a gather or a scatter
  by the side with more runs; :func:`on_tile_copy_steps`), the rest by an exchange
  (:meth:`~poplar_api.lowering.emission.Emission.exchange_steps`).
  A large copy between two tensors of one leading dimension whose rows go to tiles
  no other row goes to (a copy per output-channel part of a convolution's inputs,
  broadcast before a serial loop) is planned and run a row at a time
  (:func:`_copy_rows`), with the same steps: no array of every element's id or tile
  is made of a side whose rows are at hand (a variable's, or one row repeated).
* ``Copy`` from or to a stream, and ``PrintTensor``: a host sync and a stream copy.
  With the engine option ``exchange.enablePrefetch`` (default true) a host-to-device
  copy is marked ``prefetch`` and asks the host, after its effect, whether the
  stream's next data is ready (docs/machine.md, "Prefetch").
* ``Copy`` between a tensor and a remote buffer: an internal sync, the Streaming
  Memory transfer (``RemoteBufferCopy``) and its on-chip exchange; the rows are
  chosen by the offset tensor when the copy runs.
"""

from __future__ import annotations

from collections.abc import Callable
from copy import copy as shallow_copy
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from ipusim import ir
from ipusim.machine_copies import on_tile_copy_vertices
from poplar_api import program as P  # noqa: N812 - short alias for program classes
from poplar_api.errors import EngineError
from poplar_api.graph import DataStream, replication_factor
from poplar_api.lowering import runs
from poplar_api.lowering.affine_copy import affine_copy, copy_views
from poplar_api.lowering.emission import Emission, with_effect
from poplar_api.lowering.exchange import ExchangePlanner
from poplar_api.lowering.local_copy import _id_source, _tile_regions, on_tile_copy_steps
from poplar_api.printing import format_tensor
from poplar_api.remote import RemoteBuffer, remote_buffers
from poplar_api.replica_alike import EffectWrites, copy_alike, copy_writes
from poplar_api.tensor import Tensor
from poplar_api.vertices import id_array

__all__ = ["lower_copy", "lower_print_tensor"]


def lower_copy(em: Emission, prog: P.Copy) -> ir.Node:
    """IR of a ``Copy`` between tensors, streams or remote buffers (see the module
    docstring); problems go to ``em.problems``."""
    src, dst = prog.src, prog.dst
    if isinstance(src, DataStream) and isinstance(dst, Tensor):
        return stream_copy(em, prog, src, dst, to_device=True)
    if isinstance(src, Tensor) and isinstance(dst, DataStream):
        return stream_copy(em, prog, dst, src, to_device=False)
    if isinstance(src, RemoteBuffer):
        return remote_copy(em, prog, src, dst, to_device=True)
    if isinstance(dst, RemoteBuffer):
        return remote_copy(em, prog, dst, src, to_device=False)
    planned = em.device_copies.get(id(prog))
    if planned is not None and planned[0] is prog:  # a program met again: checked, planned
        steps = [shallow_copy(step) for step in planned[1]]
        return device_copy(em, prog, src, dst, steps, planned[2])
    s = em.tensor(src, f"Copy #{em.pid(prog)} source")
    d = em.tensor(dst, f"Copy #{em.pid(prog)} destination")
    if s is None or d is None:
        return ir.Sequence()
    where = f"Copy from '{s.name}' to '{d.name}'"
    problems = []
    if s.elementType() != d.elementType():
        problems.append(
            f"{where}: element types differ (source {s.elementType()}, destination "
            f"{d.elementType()}); they must be equal; hint: cast with popops.cast"
        )
    if s.numElements() != d.numElements():
        # Poplar copies in row-major order between any shapes of equal size (its
        # first tutorial copies a [3] slice into a [1, 3] one)
        problems.append(
            f"{where}: sizes differ (source shape {s.shape()} with {s.numElements()} "
            f"elements, destination shape {d.shape()} with {d.numElements()} elements); "
            "they must have the same number of elements; hint: slice or reshape one"
        )
    rows = sides = None
    if not problems:  # (before the constant check, which then reads the spans kept)
        rows = _copy_rows(em, s, d)  # (sides found apart from their rows' spans)
        if rows is None:  # the tiles and the id spans of both sides in one pass
            sides = _copy_sides(em, s, d)
    const = em.constant_of(d)
    if const is not None:
        problems.append(
            f"{where}: the destination is (part of) constant '{const}'; constants cannot "
            "be written; hint: copy into a variable (graph.addVariable)"
        )
    if not problems:
        same, overlap = (
            (False, 0) if rows else _same_or_overlap(s._flat_ids(), d._flat_ids(), em.span)
        )
        if overlap and not same:  # copying a view onto itself is allowed
            problems.append(
                f"{where}: source and destination overlap ({overlap} of "
                f"{d.numElements()} element(s) are in both); they must be disjoint "
                "(or the same view); hint: copy through a temporary variable"
            )
    if problems:
        em.problems += problems
        return ir.Sequence()
    return device_copy(em, prog, s, d, rows=rows, sides=sides)


def _same_or_overlap(
    s_ids: np.ndarray | range,
    d_ids: np.ndarray | range,
    span: Callable[[np.ndarray | range], tuple[int, int]] | None = None,
) -> tuple[bool, int]:
    """Whether a copy's two sides are the same view, and how many distinct element ids
    they share. Sides whose id spans are disjoint (a copy into a new tensor, mostly)
    are neither, found from the spans alone (no id array made of a block, no bitmap);
    ``span`` gives a side's span (:meth:`Emission.span`, which keeps it), else
    :func:`_span`."""
    if isinstance(s_ids, range) and isinstance(d_ids, range) and s_ids.step == d_ids.step == 1:
        overlap = max(0, min(s_ids.stop, d_ids.stop) - max(s_ids.start, d_ids.start))
        return s_ids == d_ids, overlap
    if len(s_ids) and len(d_ids):
        span = span or _span
        (s_lo, s_hi), (d_lo, d_hi) = span(s_ids), span(d_ids)
        if s_hi <= d_lo or d_hi <= s_lo:
            return False, 0
    s_ids, d_ids = id_array(s_ids), id_array(d_ids)
    same = np.array_equal(s_ids, d_ids)
    return same, 0 if same or not s_ids.size else _overlap(s_ids, d_ids)


def _span(ids: np.ndarray | range) -> tuple[int, int]:
    """``(min, max + 1)`` of non-empty ids."""
    if isinstance(ids, range) and ids.step == 1:
        return ids.start, ids.stop
    return runs.span(id_array(ids))


def _overlap(s_ids: np.ndarray, d_ids: np.ndarray) -> int:
    """Distinct element ids in both ``s_ids`` (non-empty) and ``d_ids``: found on a
    bitmap of the source's span in one pass, counted exactly only when there are any
    (sorting both, as ``np.intersect1d`` does, costs more than the copy's planning)."""
    lo, hi = runs.span(s_ids)
    marked = np.zeros(hi - lo, bool)
    runs.mark_new(s_ids, lo, marked)
    if not runs.marked_refs(d_ids, lo, marked).size:
        return 0
    return int(np.intersect1d(s_ids, d_ids).size)


def device_copy(
    em: Emission,
    prog: P.Copy,
    s: Tensor,
    d: Tensor,
    steps: list[ir.Node] | None = None,
    rows: Rows | None = None,
    sides: CopyTiles | None = None,
) -> ir.Node:
    """IR of a checked ``Copy`` between tensors of the graph: its on-tile copy vertices
    and exchange (``steps``, when this program was planned before: copies of the steps
    planned then, so that each occurrence has steps of its own), the last step carrying
    the copy's effect. With ``rows`` (:func:`_copy_rows`) the copy is planned, and its
    effect run, a row at a time when its rows' tiles allow it."""
    if steps is None and rows is not None:
        steps = _planned_row_steps(em, prog, s, d, rows)
        if steps is None:  # rows sharing tiles: planned whole
            rows = None
        else:
            em.device_copies[id(prog)] = (prog, tuple(steps), rows)
    if rows is not None:
        return _row_copy(em, prog, s, d, list(steps or ()), rows)
    typ = s.elementType()
    s_ids, d_ids = s._flat_ids(), d._flat_ids()
    storage = em.lowered.storage
    s_where, d_where = em.where(s_ids), em.where(d_ids)

    views = affine_copy(s_where, d_where) if typ.numpy.kind != "b" else None

    def copy() -> None:
        if views is not None:
            views.copy(storage.arrays[typ.size])
            return
        storage.copy(typ, d_where, s_where)

    rows_apart = runs.rows_apart(s_where, d_where)
    kept: list[tuple[np.ndarray, np.ndarray, bool]] = []  # each replica's views
    by_ids = []  # a replicated copy of fewer elements by index: their ids, made once
    if storage.replicas > 1 and views is None and not rows_apart and typ.numpy.kind != "b":
        by_ids = [runs.row_ids(w, storage.full[typ.size].shape[1]) for w in (s_where, d_where)]

    def copy_every_replica() -> None:  # one copy of every replica's rows at once
        full = storage.full[typ.size]
        if copy_alike(storage.alike, views, full, typ.size, s_where, d_where):
            return  # (replica 0's copy, in every replica: its source is alike)
        if views is not None and views.compiled:  # every row in one compiled pass
            views.copy_rows(full)
        elif views is not None:  # each replica's row through two strided views, made once
            if not kept:  # (the images are never reallocated)
                kept.extend(views.views(row) for row in full)
            for pair in kept:
                copy_views(*pair)
        elif rows_apart:  # each replica's row as one replica's copy
            for row in full:
                row[d_where] = row[s_where]
        else:  # full[:, d_where] = full[:, s_where], compiled
            runs.move_rows(full, *by_ids)

    if steps is None:
        steps = _planned_copy_steps(em, prog, s, d, sides)
        em.device_copies[id(prog)] = (prog, tuple(steps), None)
    nodes = list(steps)
    if not nodes:  # nothing to copy
        return ir.Sequence()
    last = nodes[-1]
    if storage.replicas > 1 and typ.numpy.kind != "b":  # (BOOL: any non-zero is True)
        effect = em.lowered.global_effect(copy_every_replica)
    else:
        effect = em.lowered.effect(copy)
    em.lowered.describe(effect, copy_writes(typ.size, [(d_where, s_where)]))
    nodes[-1] = with_effect(last, effect)
    name = prog.debugName or f"Copy {s.name} -> {d.name}"
    return em.touch(ir.Sequence(nodes, name=name), s, d)


def _planned_copy_steps(
    em: Emission, prog: P.Copy, s: Tensor, d: Tensor, sides: CopyTiles | None = None
) -> list[ir.Node]:
    """The on-tile copy vertices and the exchange of a ``Copy`` between tensors
    (``sides``: :func:`copy_tiles` of it, when found already)."""
    typ = s.elementType()
    s_ids, d_ids = s._flat_ids(), d._flat_ids()
    found = sides if sides is not None else _copy_sides(em, s, d)
    d_tile, local = found.d_tile, found.local
    name = prog.debugName or f"Copy {s.name} -> {d.name}"
    nodes: list[ir.Node] = []
    if found.count:
        tiles, cycles = on_tile_copy_steps(em.cfg, s_ids, d_ids, d_tile, local, typ.size, typ.name)
        nodes.append(_on_tile_node(em, prog, name, tiles, cycles))
    planner = ExchangePlanner(em.state.target, em.state, em.owners)
    planner.add_owned(typ, id_array(s_ids), d_tile, em.state.space(typ).tile, local=local)
    nodes += em.exchange_steps(planner, f"{name}/Exchange", f"{name}/Sync", em.pid(prog))
    return nodes


@numba.njit(cache=True, nogil=True)
def _side_tile(tile, ids, is_range, start, step, k, lo, hi):  # pragma: no cover - compiled
    # the tile of element k of one side of a copy (its id ids[k], or start + step * k
    # for a range) and the side's least and greatest id so far, (lo, hi), widened to
    # hold it when the side is given as ids
    if is_range:
        return tile[start + step * k], lo, hi
    i = np.int64(ids[k])
    return tile[i], min(lo, i), max(hi, i)


@numba.njit(cache=True, nogil=True)
def _copy_tiles(
    tile, s_ids, s_range, s_start, s_step, d_ids, d_range, d_start, d_step, d_tile, local
):  # pragma: no cover - compiled
    # the tile of each copied element's destination (a side's ids are ``ids[k]``, or
    # ``start + step * k`` for a range) and whether its source is on that tile; returns
    # how many are and the least and greatest id of each side given as ids
    count = 0
    s_lo = d_lo = np.iinfo(np.int64).max
    s_hi = d_hi = np.iinfo(np.int64).min
    for k in range(local.size):
        a, s_lo, s_hi = _side_tile(tile, s_ids, s_range, s_start, s_step, k, s_lo, s_hi)
        b, d_lo, d_hi = _side_tile(tile, d_ids, d_range, d_start, d_step, k, d_lo, d_hi)
        d_tile[k] = b
        local[k] = a == b
        count += a == b
    return count, s_lo, s_hi, d_lo, d_hi


@dataclass(frozen=True)
class CopyTiles:
    """Where a copy's elements are (:func:`copy_tiles`).

    Attributes
    ----------
    d_tile
        The tile of each element on the destination side (int32).
    local
        Whether its source element is on that tile, per element (the source side's
        tiles are not kept: the exchange's planning asks only this of them).
    count
        How many are.
    s_span, d_span
        ``(least id, greatest id + 1)`` of a side given as an id array (None for a
        range, or no elements).
    """

    d_tile: np.ndarray
    local: np.ndarray
    count: int
    s_span: tuple[int, int] | None
    d_span: tuple[int, int] | None


def copy_tiles(tile: np.ndarray, s_ids: np.ndarray | range, d_ids: np.ndarray | range) -> CopyTiles:
    """The tile of each element of a copy of the elements ``s_ids`` to ``d_ids`` (of
    one element space, whose tile array is ``tile``) on the destination side as int32
    (as the compiled passes of its planning take them), whether the source element is
    on that tile and how many are, and each side's id span.

    One compiled pass over both sides: as numpy, a gather of each side's tiles, their
    widening from the space's int16 and a comparison, four passes over the copy's
    elements (2.65 million in a small CNN's training step), and a fifth and sixth for
    the spans its overlap check asks for."""
    n = len(s_ids)
    if len(d_ids) != n:
        raise ValueError(f"copy_tiles: {n} source ids against {len(d_ids)} destination ids")
    d_tile, local = np.empty(n, np.int32), np.empty(n, bool)
    s_side, d_side = _id_source(s_ids), _id_source(d_ids)
    count, s_lo, s_hi, d_lo, d_hi = _copy_tiles(
        runs.read_only(tile), *s_side, *d_side, d_tile, local
    )
    s_span = None if s_side[1] or not n else (int(s_lo), int(s_hi) + 1)
    d_span = None if d_side[1] or not n else (int(d_lo), int(d_hi) + 1)
    return CopyTiles(d_tile, local, int(count), s_span, d_span)


def _copy_sides(em: Emission, s: Tensor, d: Tensor) -> CopyTiles:
    """:func:`copy_tiles` of a copy from ``s`` to ``d`` (equal sizes), the spans of its
    id arrays kept by ``em`` (its overlap check and liveness record ask for them)."""
    s_ids, d_ids = s._flat_ids(), d._flat_ids()
    found = copy_tiles(em.state.space(s.elementType()).tile, s_ids, d_ids)
    for ids, span in ((s_ids, found.s_span), (d_ids, found.d_span)):
        if span is not None:
            em.keep_span(ids, span)
    return found


def _on_tile_node(
    em: Emission, prog: P.Copy, name: str, tiles: np.ndarray, cycles: np.ndarray
) -> ir.Compute:
    """The step of a copy's on-tile copy vertices ``(tiles, cycles)``."""
    return ir.Compute(
        name=f"{name}/OnTileCopy",
        program_id=em.pid(prog),
        vertex_tile=tiles,
        vertex_cycles=cycles,
        vertex_type_names=em.copy_vertex_type,
    )


#: A copy's rows: each side's element ids per position of its dimension 0 (rows of one
#: side that repeat one row share its array).
Rows = tuple[list[np.ndarray | range], list[np.ndarray | range]]

#: Elements from which a copy whose rows are at hand is planned a row at a time
#: (:func:`_copy_rows`): below it, the arrays of the whole copy cost little.
ROW_COPY_ELEMENTS = 1 << 24


def _copy_rows(em: Emission, s: Tensor, d: Tensor) -> Rows | None:
    """The rows of a copy to plan and run a row at a time, or None to do it whole.

    Rows are taken when the copy has :data:`ROW_COPY_ELEMENTS` or more, both sides
    have one leading dimension of two or more (so the rows pair up: the copy pairs the
    sides' elements in row-major order), each side's rows are at hand without an array
    of all its ids (:meth:`~poplar_api.tensor.Tensor._row_ids`), the sides' id spans
    are apart (no overlap to check element by element) and the program runs one
    replica on one IPU."""
    if s.numElements() < ROW_COPY_ELEMENTS or em.num_ipus > 1:
        return None
    if em.lowered.storage.replicas > 1 or not s.rank() or not d.rank():
        return None
    if s.dim(0) != d.dim(0) or s.dim(0) < 2:
        return None
    s_rows, d_rows = s._row_ids(), d._row_ids()
    if s_rows is None or d_rows is None:
        return None
    (s_lo, s_hi), (d_lo, d_hi) = _rows_span(em, s_rows), _rows_span(em, d_rows)
    if not (s_hi <= d_lo or d_hi <= s_lo):
        return None
    return s_rows, d_rows


def _rows_span(em: Emission, rows: list[np.ndarray | range]) -> tuple[int, int]:
    """``(min, max + 1)`` of the ids of non-empty ``rows`` (a shared row's once)."""
    spans = [em.span(r) for r in {id(r): r for r in rows}.values()]
    return min(a for a, _ in spans), max(b for _, b in spans)


def _planned_row_steps(
    em: Emission, prog: P.Copy, s: Tensor, d: Tensor, rows: Rows
) -> list[ir.Node] | None:
    """:func:`_planned_copy_steps` a row at a time: the same steps when no two rows
    have a destination tile in common (a tile's on-tile pieces and the runs it receives
    then come from one row, in the order the whole copy meets them), None otherwise."""
    typ = s.elementType()
    space = em.state.space(typ)
    n_tiles = em.state.target.getNumTiles()
    seen = np.zeros(n_tiles + 1, bool)
    planner = ExchangePlanner(em.state.target, em.state, em.owners)
    regions: list[tuple[np.ndarray, ...]] = []
    tile_of: dict[int, np.ndarray] = {}  # (a shared row's tiles looked up once)
    for s_ids, d_ids in zip(*rows, strict=True):
        d_tile = space.tile[runs.as_index(d_ids)].astype(np.int32, copy=False)
        at = np.zeros(n_tiles + 1, bool)
        at[d_tile] = True  # (an unmapped element's -1 marks the last entry)
        if (at & seen).any():
            return None
        seen |= at
        s_tile = tile_of.get(id(s_ids))
        if s_tile is None:
            s_tile = tile_of[id(s_ids)] = space.tile[runs.as_index(s_ids)].astype(np.int32)
        local = s_tile == d_tile
        if local.any():
            regions.append(_tile_regions(s_ids, d_ids, d_tile, local))
        planner.add_owned(typ, id_array(s_ids), d_tile, space.tile, s_tile)
        del d_tile, local
    del tile_of
    name = prog.debugName or f"Copy {s.name} -> {d.name}"
    nodes: list[ir.Node] = []
    if regions:  # each tile's pieces in order, the tiles ascending (as the whole copy's)
        tiles, length, gather, new_region = (np.concatenate(c) for c in zip(*regions, strict=True))
        order = np.argsort(tiles, kind="stable")
        pieces = length[order] * typ.size
        tiles, cycles = on_tile_copy_vertices(
            em.cfg, tiles[order], pieces, gather[order], new_region[order], typ.name
        )
        nodes.append(_on_tile_node(em, prog, name, tiles, cycles))
    nodes += em.exchange_steps(planner, f"{name}/Exchange", f"{name}/Sync", em.pid(prog))
    return nodes


def _row_copy(
    em: Emission, prog: P.Copy, s: Tensor, d: Tensor, nodes: list[ir.Node], rows: Rows
) -> ir.Node:
    """:func:`device_copy` of planned steps ``nodes`` whose effect copies a row at a
    time (one replica: :func:`_copy_rows`)."""
    if not nodes:
        return ir.Sequence()
    typ, storage = s.elementType(), em.lowered.storage
    where = [(em.where(d_ids), em.where(s_ids)) for s_ids, d_ids in zip(*rows, strict=True)]

    def copy() -> None:
        for d_where, s_where in where:
            storage.copy(typ, d_where, s_where)

    effect = em.lowered.describe(em.lowered.effect(copy), copy_writes(typ.size, where))
    nodes[-1] = with_effect(nodes[-1], effect)
    name = prog.debugName or f"Copy {s.name} -> {d.name}"
    return em.touch(ir.Sequence(nodes, name=name), s, d)


#: Whether a replicated stream copy serves every replica in one effect where its host
#: ends allow (``HostIO.plain_replicas``; a switch for tests comparing it with the
#: data plane serving one replica after another).
STREAMS_TOGETHER = True


def stream_copy(
    em: Emission, prog: P.Program, stream: DataStream, t: Tensor, to_device: bool
) -> ir.Node:
    if t.graph is not em.state or em.state.streams.get(stream.handle) is not stream:
        em.problems.append(f"Copy with stream '{stream.handle}': not a stream of this graph")
        return ir.Sequence()
    replicas = replication_factor(em.state)
    if replicas > 1 and stream.replicationFactor == 1 and not stream.broadcast:
        em.problems.append(
            f"Copy between stream '{stream.handle}' and tensor '{t.name}': the stream was "
            f"made by the non-replicated graph, the tensor is replicated ({replicas} "
            "replicas), so it is not defined which host data each replica would get; "
            "hint: make the stream with the replicated graph (per-replica data) or with "
            "ReplicatedStreamMode.BROADCAST (the same data for every replica)"
        )
        return ir.Sequence()
    if stream.toDevice != to_device:
        way = "host-to-device" if stream.toDevice else "device-to-host"
        em.problems.append(
            f"Copy with stream '{stream.handle}': it is a {way} FIFO and cannot be used "
            f"{'as a source' if to_device else 'as a destination'} here"
        )
        return ir.Sequence()
    if stream.elementType != t.elementType() or stream.numElements != t.numElements():
        em.problems.append(
            f"Copy between stream '{stream.handle}' ({stream.elementType}, "
            f"{stream.numElements} elements) and tensor '{t.name}' ({t.elementType()}, "
            f"{t.numElements()} elements): type and size must match"
        )
        return ir.Sequence()
    const = em.constant_of(t) if to_device else None
    if const is not None:
        em.problems.append(
            f"Copy from stream '{stream.handle}' into tensor '{t.name}': the destination "
            f"is (part of) constant '{const}'; constants cannot be written; hint: copy "
            "into a variable"
        )
        return ir.Sequence()
    storage, host, typ, ids = em.lowered.storage, em.host, t.elementType(), t._flat_ids()
    size = getattr(prog, "expectedSize", None)
    if to_device and size is not None:
        what = f"Copy from stream '{stream.handle}' into '{t.name}': expectedSize"
        n_of = em.predicate(size, what, integral=True)
        if n_of is None:
            return ir.Sequence()
        predicates, limit = em.lowered.predicates, t.numElements()
        size_name = size.name

        def effect() -> None:
            n = predicates[n_of]()
            if not 0 <= n <= limit:
                raise EngineError(
                    f"{what}: tensor '{size_name}' holds {n}; it must be in [0, {limit}] "
                    f"(the size of '{t.name}')"
                )
            storage.write(typ, runs.as_index(ids[:n]), host.pull(stream)[:n])
            host.pulled(stream)

        every_replica = None  # (each replica's size is read from its own image)
    elif to_device:
        where = em.where(ids)

        def effect() -> None:
            storage.write(typ, where, host.pull(stream))
            host.pulled(stream)

        def every_replica() -> bool:
            if not STREAMS_TOGETHER or not host.plain_replicas(stream):
                return False
            rows = host.pull_rows(stream)
            if rows is not None:  # one block of the host's array for every replica
                storage.write_rows(typ, where, rows)
                return True
            for k in range(storage.replicas):  # each replica's data stored as it is pulled
                storage.write_replica(k, typ, where, host.pull_replica(stream, k))
            return True
    else:
        where = em.where(ids)

        def effect() -> None:
            host.push(stream, storage.read(typ, where))

        def every_replica() -> bool:
            if not STREAMS_TOGETHER or not host.plain_replicas(stream):
                return False
            values = storage.read_replicas(typ, where)  # (one gather for every replica)
            if not host.push_rows(stream, values):
                for k in range(storage.replicas):
                    host.push_replica(stream, k, values[k])
            return True

    ready = None
    if to_device and em.prefetch:
        ready = em.lowered.predicate(lambda: int(host.prefetched(stream)))
    effect_id = em.lowered.effect(effect, every_replica)
    em.lowered.describe(effect_id, EffectWrites(lambda: [(typ.size, ids)] if to_device else []))
    return em.host_transfer(
        prog, t, stream.handle, to_device, effect_id, prefetch=ready, scope=stream.tiles
    )


def remote_copy(
    em: Emission, prog: P.Copy, buffer: RemoteBuffer, t: Any, to_device: bool
) -> ir.Node:
    """A copy between tensor ``t`` and rows of a remote buffer (see
    :mod:`poplar_api.remote`): an internal sync, the Streaming Memory transfer and
    the on-chip exchange delivering (or gathering) the data."""
    handle = buffer.handle()
    way = "from remote buffer '%s' into" if to_device else "into remote buffer '%s' from"
    way = way % handle
    what = f"Copy {way} tensor '{getattr(t, 'name', t)}'"
    if remote_buffers(em.state).get(handle) is not buffer:
        em.problems.append(
            f"{what}: remote buffer '{handle}' is not a buffer of this graph; hint: make "
            "it with the engine's graph.addRemoteBuffer"
        )
        return ir.Sequence()
    t = em.tensor(t, what)
    if t is None:
        return ir.Sequence()
    offset = prog.offset
    if offset is not None and em.tensor(offset, f"{what}: offset") is None:
        return ir.Sequence()
    rows = 1 if offset is None else offset.numElements()
    n, repeats, typ = buffer.numElements(), buffer.getRepeats(), buffer.elementType()
    problems = []
    if t.elementType() != typ:
        problems.append(
            f"{what}: element types differ (remote buffer {typ}, tensor "
            f"{t.elementType()}); they must be equal; hint: cast with popops.cast"
        )
    if t.numElements() != rows * n:
        of = "no offset: one row"
        if offset is not None:
            of = f"offset '{offset.name}': {rows} row(s)"
        problems.append(
            f"{what}: the tensor has {t.numElements()} elements (shape {t.shape()}); "
            f"the copy moves {rows} x {n} = {rows * n} ({of} of numElements {n}); "
            "hint: give the tensor numElements elements per offset"
        )
    if offset is not None and (offset.elementType().is_floating or rows == 0):
        problems.append(
            f"{what}: offset '{offset.name}' has element type {offset.elementType()} and "
            f"{rows} element(s); it must hold at least one integral row index "
            "(UNSIGNED_INT or INT); hint: cast it with popops"
        )
    const = em.constant_of(t) if to_device else None
    if const is not None:
        problems.append(
            f"{what}: the destination is (part of) constant '{const}'; constants cannot "
            "be written; hint: copy into a variable"
        )
    if problems:
        em.problems += problems
        return ir.Sequence()
    storage, host, ids = em.lowered.storage, em.host, t.flat_index()
    off_type = None if offset is None else offset.elementType()
    off_ids = None if offset is None else offset.flat_index()

    def effect() -> None:
        if off_ids is None:
            index = np.zeros(1, np.int64)
        else:
            index = storage.read(off_type, off_ids).astype(np.int64)
        bad = np.flatnonzero((index < 0) | (index >= repeats))
        if bad.size:
            raise EngineError(
                f"{what}: offset {int(index[bad[0]])} (element {int(bad[0])} of "
                f"'{offset.name}') is out of range; remote buffer '{handle}' has "
                f"{repeats} repeat(s), so offsets must be in [0, {repeats}); hint: keep "
                f"the offsets below {repeats} or make the buffer with more repeats"
            )
        data = host.remote_data(buffer)
        if to_device:
            storage.write(typ, ids, data[index].reshape(-1))
        else:
            data[index] = storage.read(typ, ids).reshape(rows, n)

    node = em.host_transfer(
        prog, t, prog.debugName or handle, to_device, em.lowered.effect(effect),
        remote=handle,
    )  # fmt: skip
    return em.touch(node, offset) if offset is not None else node


def lower_print_tensor(em: Emission, prog: P.PrintTensor) -> ir.Node:
    """IR of a ``PrintTensor``: a device-to-host transfer whose effect prints."""
    t = em.tensor(prog.tensor, "PrintTensor")
    if t is None:
        return ir.Sequence()
    title = prog.title if prog.title is not None else t.name
    storage, host, typ, ids, shape = (
        em.lowered.storage,
        em.host,
        t.elementType(),
        t.flat_index(),
        t.shape(),
    )

    def effect() -> None:
        host.print(format_tensor(title, storage.read(typ, ids).reshape(shape), typ))

    return em.host_transfer(prog, t, f"PrintTensor {title}", False, em.lowered.effect(effect))
