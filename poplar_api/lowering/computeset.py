"""Compute sets: exchanges, estimates and the kernel runner over their field tables.

The element ids of each field are tabled once per vertex type
(:mod:`poplar_api.lowering.field_tables`), so running the compute set is a gather, one
Numba-compiled loop per vertex type and a scatter. Outputs are written back only after
every vertex ran, so results never depend on vertex order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from ipusim.tile.counted import CountedCycles, CountedExecution, CountedPart
from poplar_api.codelet import InPlaceField, VertexType, checking_bounds, execute_lowered
from poplar_api.codelet_base import RUN_FP_EXCEPTIONS, RUN_REPLICAS
from poplar_api.counted import execute_counted
from poplar_api.errors import EngineError, FloatingPointException
from poplar_api.field_images import ImageField, tiled_offsets
from poplar_api.fields import FieldBatch, FieldSpec
from poplar_api.lowering import pieces, runs, strided
from poplar_api.lowering.context import Storage
from poplar_api.lowering.exchange import ExchangePlanner
from poplar_api.lowering.field_tables import (
    ComputeSetTable,
    FieldTable,
    TypeGroup,
    build_table,
    read_runs,
)
from poplar_api.lowering.variable_marks import key_totals, variable_tile_counts
from poplar_api.types import Type
from poplar_api.vertices import NO_ESTIMATE, id_count

__all__ = [
    "ComputeSetRecord",
    "ComputeSetTable",
    "CountedRun",
    "FieldTable",
    "TypeGroup",
    "build_table",
    "connection_sizes",
    "interleaved_keys",
    "make_runner",
    "plan_reads",
    "plan_writes",
    "touched_keys",
    "vertex_cycles",
    "vertex_state",
]


def connection_sizes(vtype: VertexType, fields: dict) -> dict[str, int | list[int]]:
    """Sizes passed to the estimator of a vertex of ``vtype`` with connections ``fields``:
    elements per field, a list for VectorLists."""
    sizes: dict[str, int | list[int]] = {}
    for spec in vtype.fields:
        value = fields.get(spec.name)
        if spec.kind == "vectorlist":
            sizes[spec.name] = [0 if ids is None else ids.size for ids in value or []]
        else:
            sizes[spec.name] = 0 if value is None else id_count(value)
    return sizes


def plan_reads(planner: ExchangePlanner, table: ComputeSetTable, state) -> None:
    """Elements the vertices read from other tiles, added one receiving tile at a time."""
    # types of one size share element ids: an element read through reinterpreted views
    # of several types is received once
    by_size: dict[int, tuple[Type, list[tuple[FieldTable, np.ndarray]]]] = {}
    for group in table.groups:
        for ft in group.fields:
            if ft.spec.direction != "out" and ft.size:
                entry = by_size.setdefault(ft.type.size, (ft.type, []))
                entry[1].append((ft, table.tiles[ft.positions]))
    for typ, fields in by_size.values():
        space = state.space(typ)
        owner = space.tile
        # runs are cut by the stretches of one owner when they read many more
        # elements than there are stretches (finding them costs a pass over the space)
        read = sum(ft.size for ft, _ in fields if ft.runs is not None or ft.ref_runs is not None)
        stretches = None
        if read * 8 >= space.size or typ.size in planner.owners.changes:
            stretches = planner.stretches_of(typ.size, owner, space.size, read)
        # every field's pieces into one set of arrays, with room for one piece per id
        # read (the most there can be; pages no piece is written to are never touched)
        found = pieces.Pieces(sum(ft.size for ft, _ in fields))
        steps = strided.StridedPieces()  # reads stepping through ids at a stride
        for ft, vtiles in fields:
            if ft.runs is not None:
                pieces.run_pieces(*ft.runs, vtiles, owner, stretches, found)
            elif ft.ref_runs is not None:  # the runs, each on its vertex's tile
                pieces.run_pieces(*ft.ref_runs, ft.run_tiles(vtiles), owner, stretches, found)
            else:
                strided.field_pieces(ft.ids, ft.bounds, vtiles, owner, found, steps)
        if steps.rows:  # planned as progressions where exact, else as one-element pieces
            planned = planner.add_strided(typ, found.arrays(), steps.arrays(), owner)
            strided.expand_into(found, steps.arrays(), planned)
        planner.add_pieces(typ, *found.arrays(), owner, scratch=True)


#: Written elements per run from which :func:`plan_writes` cuts runs by stretches.
LONG_WRITTEN_RUNS = 64


def plan_writes(planner: ExchangePlanner, table: ComputeSetTable, state) -> None:
    """Elements the vertices write that live on other tiles."""
    for group in table.groups:
        for ft in group.fields:
            if not ft.spec.writes or ft.size == 0:
                continue
            # the written elements another tile owns, found as runs in compiled passes
            # (no tile array per written element), in reference order, each from the
            # vertex's tile to its owner; long runs cut by the stretches of one owner
            # as the reads' are (the same pieces, found per stretch, not per element)
            space, vtiles = state.space(ft.type), table.tiles[ft.positions]
            owner = space.tile
            held = ft.runs if ft.runs is not None else ft.ref_runs
            if held is not None:  # (the reads' rule, for runs long beside a search)
                size, stretches = ft.type.size, None
                known = ft.size * 8 >= space.size or size in planner.owners.changes
                if known and ft.size >= LONG_WRITTEN_RUNS * held[0].size:
                    stretches = planner.stretches_of(size, owner, space.size, ft.size)
                tiles = vtiles if ft.runs is not None else ft.run_tiles(vtiles)
                begin, length, src = pieces.run_pieces(*held, tiles, owner, stretches)
            else:
                begin, length, src = pieces.field_pieces(ft.ids, ft.bounds, vtiles, owner)
            if begin.size == 0:
                continue
            ids = runs.expand(begin, length)
            planner.add_grouped(ft.type, ids, np.repeat(src, length), owner[ids])


def _in_place_bounds(ft: FieldTable, vtype: VertexType) -> tuple[np.ndarray, np.ndarray] | None:
    """``(begin, end)`` ids of each vertex's elements when the field can be read where it
    lies: an input of a compiled kernel whose elements are stored in its kernel dtype
    and, per vertex, one ascending run of ids."""
    spec = ft.spec
    if vtype.kernel is None or spec.writes or spec.kind == "vectorlist":
        return None
    if ft.type.numpy.kind == "b" or np.dtype(ft.type.numpy) != np.dtype(spec.kernel_dtype):
        return None
    if ft.runs is not None:
        return ft.runs
    if ft.ref_runs is not None:  # (read_runs: a vector's ids held as their runs)
        return ft.vertex_runs()
    return runs.vertex_runs(ft.ids, ft.offsets)


@dataclass
class CountedRun:
    """What a compute set's runner needs to count its vertices' cycles.

    ``groups[k]``: whether the vertices of type group ``k`` are counted; ``static``:
    every vertex's static cycles (kept for the groups not counted); what each execution
    counted goes to ``holder`` (the IR step's :class:`~ipusim.tile.counted.CountedCycles`),
    which the machine prices with its config's cost table.
    """

    groups: list[bool]
    static: np.ndarray
    holder: CountedCycles


def _kind(vtype: VertexType) -> str:
    """How a counted part's executions make a vertex's cycles (see CountedPart)."""
    if vtype.kind == "multi":
        return "multi"
    return "supervisor" if vtype.is_multi else "worker"


def make_runner(
    table: ComputeSetTable,
    storage: Storage,
    num_workers: int,
    counted: CountedRun | None = None,
    replicas: int = 1,
):
    """The functional effect of executing the compute set.

    With bounds checks on, an input field whose elements are one ascending run of ids
    per vertex is read where it lies (a read-only view of device memory: the compute
    set's results are stored only after every vertex has run, so it cannot change
    under a vertex); other fields are gathered into packed batches (a block copy when
    the whole field is one run).

    With ``replicas`` > 1 the effect runs every replica at once (register it as a
    global effect): each type's kernel is called once on a batch of ``replicas`` times
    its vertices, replica ``k``'s copies after replica ``k - 1``'s, gathered from and
    stored to every replica's image (:class:`_Replicated`). A vertex computes from its
    own fields only, so each replica's values are those of running it alone.
    """
    # vertex ids and tiles of each type's batch (they name a vertex in errors)
    named = [(table.vertex_ids[g.positions], table.tiles[g.positions]) for g in table.groups]
    wide = _Replicated(storage, replicas) if replicas > 1 else None
    if wide is not None:
        named = [(np.tile(ids, replicas), np.tile(tiles, replicas)) for ids, tiles in named]
    in_place = [[_in_place_bounds(ft, g.vtype) for ft in g.fields] for g in table.groups]
    # a field read in place keeps its runs only: its ids are made again if a run
    # without bounds checks gathers it
    where: list[list[np.ndarray | slice | None]] = []
    groups = []
    for g, bounds in zip(table.groups, in_place, strict=True):
        kept = [_kept_table(ft, b) for ft, b in zip(g.fields, bounds, strict=True)]
        pairs = list(zip(kept, bounds, strict=True))
        held = [b is not None or _by_ranges(ft) or _stored_by_runs(ft) for ft, b in pairs]
        where.append(
            [None if h else runs.as_index(ft.ids) for (ft, _), h in zip(pairs, held, strict=True)]
        )
        groups.append(TypeGroup(g.vtype, g.positions, kept))
    name = table.name
    # every replica's images for kernels that read them (one replica's packed fields are
    # gathered in one pass and viewed, which costs a kernel less than finding its views)
    images = [_image_fields(g, storage) if wide and _reads_images(g) else None for g in groups]
    blocks: dict[int, tuple[int, int] | None] = {}  # (the groups keep each table alive)
    if wide is None:  # found here, while lowering, for the fields every run copies by
        # runs (stored, or read and not in place): a compute set run once, as each of a
        # program of distinct steps is, then finds none as it runs
        for group, bounds in zip(groups, in_place, strict=True):
            for ft, lies in zip(group.fields, bounds, strict=True):
                if _stored_by_runs(ft) or (lies is None and _by_ranges(ft)):
                    blocks[id(ft)] = runs.one_block(*_held_runs(ft))

    def block(ft: FieldTable) -> tuple[int, int] | None:
        if id(ft) not in blocks:  # the runs of ft as one slice, when they make one
            blocks[id(ft)] = runs.one_block(*_held_runs(ft))
        return blocks[id(ft)]

    def run() -> None:
        # unchecked kernels read past a field into the packed batch, as documented
        checked = checking_bounds()
        writes = []
        parts: list[CountedPart] = []
        for g, (group, (vertex_ids, tiles), index, bounds) in enumerate(
            zip(groups, named, where, in_place, strict=True)
        ):
            fields: dict[str, FieldBatch | InPlaceField | ImageField] = {}
            if images[g] is not None:  # the kernel reads every replica's image itself
                fields.update(images[g](index))
            for k, (ft, lies) in enumerate(zip(group.fields, bounds, strict=True)):
                if ft.spec.name in fields:
                    continue
                if lies is not None and checked:
                    if wide is None:
                        fields[ft.spec.name] = InPlaceField(storage.readonly(ft.type), *lies)
                    else:
                        fields[ft.spec.name] = wide.in_place(ft.type, lies)
                    continue
                if wide is None and index[k] is None and (_by_ranges(ft) or _stored_by_runs(ft)):
                    data = _gather_runs(storage, ft, block(ft))
                    data = data.astype(ft.spec.kernel_dtype, copy=False)
                    fields[ft.spec.name] = FieldBatch(data, ft.offsets, ft.inner_offsets)
                    continue
                if index[k] is None:  # kept for later unchecked runs
                    index[k] = runs.as_index(ft.ids)
                ix = index[k]
                if wide is not None:
                    fields[ft.spec.name] = wide.gather(ft, ix)
                    continue
                # read gives a new array: converting in place of copying is safe
                data = storage.read(ft.type, ix).astype(ft.spec.kernel_dtype, copy=False)
                fields[ft.spec.name] = FieldBatch(data, ft.offsets, ft.inner_offsets)
            n = int(group.positions.size) * replicas
            if counted is not None and counted.groups[g]:
                ok, block_runs, profile = execute_counted(
                    group.vtype, fields, n, num_workers, vertex_ids=vertex_ids, tiles=tiles
                )
                kind = _kind(group.vtype)
                workers = num_workers if kind == "multi" else 1
                parts.append(CountedPart.of(group.positions, kind, workers, profile, block_runs))
            else:
                token = RUN_REPLICAS.set(replicas)  # the batch is replica after replica
                try:
                    ok = execute_lowered(
                        group.vtype, fields, n, num_workers, vertex_ids=vertex_ids, tiles=tiles
                    )
                finally:
                    RUN_REPLICAS.reset(token)
            if np.count_nonzero(ok) < ok.size:
                bad = vertex_ids[~ok]
                first = int(np.flatnonzero(~ok)[0]) // max(int(group.positions.size), 1)
                where_bad = f" in replica {first}" if wide is not None else ""
                raise EngineError(
                    f"compute set '{name}': {bad.size} vertex(es) of type "
                    f"'{group.vtype.name}' returned False (first: vertex {int(bad[0])}"
                    f"{where_bad})"
                )
            for ft, ix in zip(group.fields, index, strict=True):
                if ft.spec.writes:
                    batch = fields[ft.spec.name]
                    if isinstance(batch, ImageField):  # stored where it lies already
                        batch = batch.packed() if RUN_FP_EXCEPTIONS.get() else None
                    else:
                        writes.append((ft, ix, batch.data))
                    if batch is not None and ft.type.is_floating and RUN_FP_EXCEPTIONS.get():
                        _check_finite(name, ft, batch, vertex_ids, tiles)
        for ft, ix, data in writes:
            if wide is not None:
                wide.scatter(ft.type, ix, data)
            elif ix is None:  # (_stored_by_runs) one slice, or by its runs
                one = block(ft)
                if one is not None:
                    storage.write(ft.type, slice(*one), data)
                else:
                    storage.write_runs(ft.type, *_held_runs(ft), data)
            else:
                storage.write(ft.type, ix, data)
        if counted is not None:
            counted.holder.put(CountedExecution(counted.static, tuple(parts)))

    return run


def _by_ranges(ft: FieldTable) -> bool:
    """Whether the runner reads field ``ft`` by its runs of ids (:attr:`FieldTable.ref_runs`,
    never made into ids for a read) rather than by a gather index; BOOL fields, whose
    values are not their bits, are gathered."""
    return ft.ref_runs is not None and ft.type.numpy.kind != "b"


def _kept_table(ft: FieldTable, bounds: tuple[np.ndarray, np.ndarray] | None) -> FieldTable:
    """The table of field ``ft`` the runner keeps: its runs only when it is read in place
    (``bounds``, each vertex's run), or when it is read by ids that lie in runs of
    :data:`~poplar_api.lowering.field_tables.MIN_REFS_PER_RUN` or more on average (a
    reduction's partials, a 1-D operand's slices): then those runs, cut at each vertex,
    as a vector list's :attr:`~FieldTable.ref_runs`, gathered by them
    (:func:`_by_ranges`); else ``ft`` itself."""
    if bounds is not None:
        return ft.without_ids(bounds)
    return read_runs(ft)  # (build_table looked for them already: found, or not again)


def _stored_by_runs(ft: FieldTable) -> bool:
    """Whether the runner reads and stores written field ``ft`` through its runs (one per
    vertex or several, :func:`_held_runs`) rather than an index of its ids, which are
    then never made (they were 1 GB of a ResNet-50 training step's host memory); not
    BOOL, whose values are not their bits."""
    held = ft.runs is not None or ft.ref_runs is not None
    return ft.spec.writes and held and ft.type.numpy.kind != "b"


def _held_runs(ft: FieldTable) -> tuple[np.ndarray, np.ndarray]:
    """``(begin, end)`` of the runs a field's table holds, in reference order."""
    return ft.ref_runs if ft.ref_runs is not None else ft.runs


def _gather_runs(storage: Storage, ft: FieldTable, block: tuple[int, int] | None) -> np.ndarray:
    """The values of a field read by its runs (:func:`_by_ranges`, :func:`_stored_by_runs`):
    each run's block of the image copied in turn, as :meth:`Storage.read` of its ids
    gives them; a slice copied when the runs make one ``block``
    (:func:`~poplar_api.lowering.runs.one_block`)."""
    raw = storage.arrays[ft.type.size]
    if block is not None:
        return raw[block[0] : block[1]].copy().view(ft.type.numpy)
    out = np.empty(ft.size, raw.dtype)
    runs.take_ranges(raw, *_held_runs(ft), out, 0)
    return out.view(ft.type.numpy)


def _reads_images(group: TypeGroup) -> bool:
    """Whether the group's kernel reads its fields in every replica's image (its vertex
    class sets ``readsImages``; BOOL fields, whose values are not their bits, have no
    typed image)."""
    return bool(getattr(group.vtype.cls, "readsImages", False)) and all(
        ft.type.numpy.kind != "b" for ft in group.fields
    )


def _image_fields(group: TypeGroup, storage: Storage):
    """A function of the group's gather indices giving its fields as
    :class:`~poplar_api.field_images.ImageField` over every replica's image (made
    once: the images are never reallocated)."""
    made: dict[str, ImageField] = {}

    def fields(index: list) -> dict[str, ImageField]:
        if made:
            return made
        for ft, ix in zip(group.fields, index, strict=True):
            if ix is None:
                ix = runs.as_index(ft.ids)
            if isinstance(ix, slice):
                ix = np.arange(ix.start, ix.stop, dtype=_ids_dtype(ix.stop))
            made[ft.spec.name] = ImageField(
                storage.full[ft.type.size], np.dtype(ft.type.numpy), ix, ft.offsets,
                ft.inner_offsets, ft.spec.kernel_dtype, storage.constants, storage.declared,
                storage.alike,
            )  # fmt: skip
        return made

    return fields


def _ids_dtype(end: int) -> type:
    return np.int32 if end <= runs.INT32_MAX else np.int64


class _Replicated:
    """Fields of every replica gathered as one batch, and its results stored back.

    The batch holds replica 0's vertices, then replica 1's, and so on: a field's
    offsets repeat shifted by the field's size (made once per field and kept).
    """

    def __init__(self, storage: Storage, replicas: int) -> None:
        self.storage = storage
        self.replicas = replicas
        self._offsets: dict[int, tuple[np.ndarray, np.ndarray | None]] = {}
        self._runs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        self._images: dict[Type, np.ndarray] = {}

    def gather(self, ft: FieldTable, ix: np.ndarray | slice) -> FieldBatch:
        """Field ``ft`` (elements ``ix``) of every replica, packed replica after replica."""
        full = self.storage.full[ft.type.size]
        # (a gather gives C order; full[:, ix] may not be, and would be copied again)
        if isinstance(ix, slice):
            raw = full[:, ix].copy()
        else:
            raw = np.empty((full.shape[0], ix.size), full.dtype)
            if ix.flags.writeable:  # one compiled signature: read-only ids, as most are
                ix = ix.view()  # (a tenth of as_strided's Python, paid per field and run)
                ix.flags.writeable = False
            runs.take_rows(full, ix, raw)
        typed = raw != 0 if ft.type.numpy.kind == "b" else raw.view(ft.type.numpy)
        data = typed.reshape(-1).astype(ft.spec.kernel_dtype, copy=False)
        found = self._offsets.get(id(ft))
        if found is None:
            inner = ft.inner_offsets
            found = (
                tiled_offsets(ft.offsets, self.replicas),
                None if inner is None else tiled_offsets(inner, self.replicas),
            )
            self._offsets[id(ft)] = found
        return FieldBatch(data, *found)

    def in_place(self, t: Type, lies: tuple[np.ndarray, np.ndarray]) -> InPlaceField:
        """A field read where it lies, in every replica's image (read-only)."""
        image = self._images.get(t)
        if image is None:
            image = self.storage.full[t.size].reshape(-1).view(t.numpy)
            image.flags.writeable = False
            self._images[t] = image
        key = id(lies)
        found = self._runs.get(key)
        if found is None:
            size = self.storage.full[t.size].shape[1]
            shifts = np.arange(self.replicas, dtype=np.int64)[:, None] * size
            found = tuple((np.asarray(b, np.int64)[None, :] + shifts).reshape(-1) for b in lies)
            self._runs[key] = found
        return InPlaceField(image, *found)

    def scatter(self, t: Type, ix: np.ndarray | slice, data: np.ndarray) -> None:
        """Store a written field's batch into every replica's elements ``ix``."""
        ids = range(ix.start, ix.stop) if isinstance(ix, slice) else ix
        self.storage.write_replicas(t, ids, data.reshape(self.replicas, -1))


def _check_finite(
    cs_name: str, ft: Any, batch: Any, vertex_ids: np.ndarray, tiles: np.ndarray
) -> None:
    """Raise :class:`~poplar_api.errors.FloatingPointException` for the first NaN or
    infinity a vertex wrote into ``ft`` (as stored: a HALF field overflows at 65504)."""
    with np.errstate(over="ignore", invalid="ignore"):
        stored = batch.data.astype(ft.type.numpy, copy=False)
    bad = np.flatnonzero(~np.isfinite(stored))
    if not bad.size:
        return
    at = int(bad[0])
    if batch.inner_offsets is not None:  # a vector list: inner vector, then its vertex
        at = int(np.searchsorted(batch.inner_offsets, at, side="right")) - 1
    v = int(np.searchsorted(batch.offsets, at, side="right")) - 1
    value = float(stored[bad[0]])
    kind = "an invalid operation (NaN)" if np.isnan(value) else "an overflow or division by zero"
    raise FloatingPointException(
        f"compute set '{cs_name}': vertex {int(vertex_ids[v])} on tile {int(tiles[v])} wrote "
        f"{value} into its {ft.type.name} field '{ft.spec.name}' ({kind}; {bad.size} "
        "element(s) of the field are not finite); hint: the run stopped because the engine "
        "option debug.floatPointOpException (or debug.floatingPointExceptions) is true",
        cs_name, int(vertex_ids[v]), int(tiles[v]), ft.spec.name, value,
    )  # fmt: skip


@dataclass(frozen=True)
class ComputeSetRecord:
    """A lowered compute set, as memory placement needs it.

    Attributes
    ----------
    compute_set
        The compute set's id in the graph.
    name
        Its name.
    node
        The IR node its ``Execute`` lowers to (exchanges, compute step).
    state_per_tile
        Bytes of vertex state on each tile.
    state_by_type
        ``(vertex type name, bytes of vertex state)`` per type, in order of first
        appearance in the compute set.
    interleaved
        ``variable * num_tiles + tile`` of the (variable, tile) pairs connected to a
        field declared ``interleaved`` (sorted, distinct).
    descriptors_per_tile
        The part of ``state_per_tile`` that is vector-list descriptors (Poplar's
        ``vectorListDescriptor`` storage); None means none.
    state_by_type_tile
        ``(vertex type name, bytes of vertex state on each tile)`` per type.
    parts_by_type_tile
        ``(vertex type name, edge pointer bytes, descriptor bytes)`` per type, each on
        every tile: the parts of its state that are field pointers and size words, and
        vector-list descriptors (the rest is the vertex header).
    """

    compute_set: int
    name: str
    node: Any
    state_per_tile: np.ndarray
    state_by_type: tuple[tuple[str, int], ...]
    interleaved: np.ndarray
    descriptors_per_tile: np.ndarray | None = None
    state_by_type_tile: tuple[tuple[str, np.ndarray], ...] = ()
    parts_by_type_tile: tuple[tuple[str, np.ndarray, np.ndarray], ...] = ()


def interleaved_keys(
    table: ComputeSetTable, state: Any, variables: Any, num_tiles: int
) -> np.ndarray:
    """``variable * num_tiles + tile`` of the elements connected to fields declared
    ``interleaved`` (each element's own tile), sorted and distinct; ``variables`` is
    the lowering's :class:`~poplar_api.lowering.liveness.VariableIndex`."""
    keys = []
    for group in table.groups:
        for ft in group.fields:
            if not ft.spec.interleaved or ft.size == 0:
                continue
            held = ft.touched()  # the ids, or runs expanded here without keeping them
            ids = runs.expand(held[0], held[1] - held[0]) if isinstance(held, tuple) else held
            tiles = state.space(ft.type).tiles_of(ids).astype(np.int64)  # (runs kept)
            keys.append(variables.variables_of(ft.type, ids) * num_tiles + tiles)
    if not keys:
        return np.zeros(0, np.int64)
    return np.unique(np.concatenate(keys))


def touched_keys(
    table: ComputeSetTable, state: Any, variables: Any, num_tiles: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(read, read elements, written, written elements)``: the distinct ``variable *
    num_tiles + tile`` keys of the elements the compute set's fields read (``in``,
    ``inout``) and write (``out``, ``inout``), each with how many references to them
    the fields hold (for the bank conflicts of counted execution, :mod:`ipusim.tile.banks`)."""
    found: dict[bool, list[tuple[np.ndarray, np.ndarray]]] = {False: [], True: []}
    for group in table.groups:
        for ft in group.fields:
            arrays = variables.arrays(ft.type) if ft.size else None
            if arrays is None:
                continue
            space = state.space(ft.type)  # a compacted space's tiles read as its runs
            tile = space.held_runs() or space.tile
            keyed = variable_tile_counts(ft.touched(), tile, arrays[0], arrays[1], num_tiles)
            if ft.spec.direction in ("in", "inout"):
                found[False].append(keyed)
            if ft.spec.direction in ("out", "inout"):
                found[True].append(keyed)
    out: list[np.ndarray] = []
    for written in (False, True):
        keys = np.concatenate([k for k, _ in found[written]] or [np.zeros(0, np.int64)])
        counts = np.concatenate([c for _, c in found[written]] or [np.zeros(0, np.int64)])
        out += key_totals(keys, counts)
    return out[0], out[1], out[2], out[3]


@dataclass(frozen=True)
class VertexState:
    """Vertex state of a compute set (:func:`vertex_state`): bytes on each tile, per
    vertex type (in all and on each tile), and the vector-list descriptors' part of
    the bytes on each tile; per type, the edge pointer and descriptor parts on each
    tile."""

    per_tile: np.ndarray
    by_type: tuple[tuple[str, int], ...]
    by_type_tile: tuple[tuple[str, np.ndarray], ...]
    descriptors_per_tile: np.ndarray
    parts_by_type_tile: tuple[tuple[str, np.ndarray, np.ndarray], ...] = ()


def vertex_state(table: ComputeSetTable, code: Any, num_tiles: int) -> VertexState:
    """Vertex state of a compute set: bytes per tile and per vertex type.

    A vertex holds a header, a pointer per field, a size word per vector and per
    vector list, and a descriptor per vector of a vector list (sizes from the
    config's ``code`` section).
    """
    # integer bytes counted per tile: a type group's vertices each hold the same fixed
    # bytes, so only the descriptors of vector lists need a weighted count (the fixed
    # cost of a compute set is a few passes over the tiles, not several per group)
    per_tile = np.zeros(num_tiles, np.int64)
    lists = np.zeros(num_tiles, np.int64)
    by_type, by_type_tile, parts = [], [], []
    for group in table.groups:
        fixed = code.vertex_header_bytes
        per_vertex = None
        for spec, ft in zip(group.vtype.fields, group.fields, strict=True):
            fixed += code.field_pointer_bytes
            if spec.kind == "vector":
                fixed += code.vector_size_bytes
            elif spec.kind == "vectorlist":
                fixed += code.vector_size_bytes
                add = code.vectorlist_descriptor_bytes * np.diff(ft.offsets)
                per_vertex = add if per_vertex is None else per_vertex + add
        tiles = table.tiles[group.positions]
        count = np.bincount(tiles, minlength=num_tiles).astype(np.int64, copy=False)
        if per_vertex is None:
            listed = 0
            of_lists = np.zeros(num_tiles, np.int64)
        else:
            listed = int(per_vertex.sum())
            of_lists = np.bincount(tiles, weights=per_vertex, minlength=num_tiles)
            of_lists = of_lists.astype(np.int64)
        name = group.vtype.name
        by_type.append((name, int(fixed * group.positions.size + listed)))
        on_tiles = fixed * count + of_lists
        by_type_tile.append((name, on_tiles))
        per_tile += on_tiles
        lists += of_lists
        edges = (fixed - code.vertex_header_bytes) * count
        parts.append((name, edges, of_lists))
    return VertexState(per_tile, tuple(by_type), tuple(by_type_tile), lists, tuple(parts))


def vertex_cycles(
    table: ComputeSetTable,
    estimates: np.ndarray,
    target: Any,
    counted: list[bool] | None = None,
) -> np.ndarray:
    """Cycles of each vertex: its perf estimate, else its type's estimator asked once
    per distinct set of connection sizes (vertices of a type mostly share them). A
    vertex of a counted group (``counted[k]``) without either has static cycles 0.

    The sizes are the estimator's: elements per field, and for a vector list the
    elements of each of its vectors. Vertices are grouped by how many vectors each
    of their lists has, so that every vertex's sizes are one row of a matrix and the
    distinct rows are found at once.
    """
    cycles = estimates.copy()
    for k, group in enumerate(table.groups):
        at = np.flatnonzero(cycles[group.positions] == NO_ESTIMATE)
        if not at.size:
            continue
        if counted is not None and counted[k] and not group.vtype.has_estimator:
            cycles[group.positions[at]] = 0  # its cycles are counted when it runs
            continue
        fields = list(zip(group.vtype.fields, group.fields, strict=True))
        lists = [ft for spec, ft in fields if spec.kind == "vectorlist"]
        vectors = np.stack([np.diff(ft.offsets)[at] for ft in lists], axis=1) if lists else None
        shapes, which = (
            _unique_rows(vectors)[::2]
            if vectors is not None
            else (np.zeros((1, 0), np.int64), np.zeros(at.size, np.int64))
        )
        for k in range(shapes.shape[0]):
            members = at[which.reshape(-1) == k]
            per_list = iter(shapes[k].tolist())
            columns, widths = [], []
            for spec, ft in fields:
                if spec.kind == "vectorlist":
                    count = next(per_list)
                    lengths = np.diff(ft.inner_offsets)
                    first = ft.offsets[members]
                    columns.append(lengths[first[:, None] + np.arange(count)])
                    widths.append(count)
                else:
                    columns.append(np.diff(ft.bounds)[members][:, None])
                    widths.append(-1)  # one number, not a list
            cycles[group.positions[members]] = _estimate_rows(
                group.vtype, fields, columns, widths, target
            )
    return cycles


#: Distinct keys per row up to which :func:`_unique_rows` finds the distinct rows by
#: marking their keys in an array over the keys' span (one pass, no sort).
DENSE_KEYS_PER_ROW = 4


@numba.njit(cache=True, nogil=True)
def _row_keys(rows, out):  # pragma: no cover - compiled
    # out[i]: row i packed into one int64 (each column's offset from its least value,
    # in the mixed radix of the columns' spans: lexicographic order kept); returns how
    # many keys the spans allow, or -1 when that reaches 2**62 (keys are not made then).
    # The bound is taken in floats (a column's span can pass int64), the weights in
    # int64: a float product is inexact past 2**53 and would let two rows share a key
    n, w = rows.shape
    low = np.empty(w, np.int64)
    high = np.empty(w, np.int64)
    for j in range(w):
        low[j] = high[j] = rows[0, j]
    for i in range(1, n):
        for j in range(w):
            x = np.int64(rows[i, j])
            if x < low[j]:
                low[j] = x
            elif x > high[j]:
                high[j] = x
    bound = 1.0
    for j in range(w):
        bound *= float(high[j]) - float(low[j]) + 1.0
    if bound >= 2.0**62:
        return -1
    weight = np.empty(w, np.int64)
    total = np.int64(1)
    for j in range(w - 1, -1, -1):
        weight[j] = total
        total *= high[j] - low[j] + 1  # exact: the whole product is below 2**63
    for i in range(n):
        k = np.int64(0)
        for j in range(w):
            k += (np.int64(rows[i, j]) - low[j]) * weight[j]
        out[i] = k
    return total


@numba.njit(cache=True, nogil=True)
def _dense_unique(keys, span, first, inverse):  # pragma: no cover - compiled
    # np.unique(keys, return_index=True, return_inverse=True) of keys in [0, span):
    # the first position of each distinct key, keys ascending, into first; the rank of
    # each key among them into inverse; returns how many are distinct
    at = np.full(span, -1, np.int64)
    for i in range(keys.size):
        if at[keys[i]] < 0:
            at[keys[i]] = i
    m = 0
    for k in range(span):
        if at[k] >= 0:
            first[m] = at[k]
            at[k] = m
            m += 1
    for i in range(keys.size):
        inverse[i] = at[keys[i]]
    return m


def _unique_rows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(rows, axis=0, return_index=True, return_inverse=True)`` of an int
    matrix: rows packed into one int64 key each (lexicographic order kept) when their
    ranges fit, which sorts numbers instead of byte strings; keys within a span of at
    most :data:`DENSE_KEYS_PER_ROW` per row are not sorted at all but marked in an
    array over their span (a compute set's rows of sizes take a few distinct values:
    numpy's sort and matrix product cost 0.1 ms per thousand rows, these passes a
    tenth of that)."""
    if rows.shape[0] == 0 or rows.shape[1] == 0:
        return np.unique(rows, axis=0, return_index=True, return_inverse=True)
    if (rows == rows[0]).all():  # one row repeated (a library's vertices of one shape)
        n = rows.shape[0]
        return rows[:1], np.zeros(1, np.intp), np.zeros(n, np.intp)
    n = rows.shape[0]
    keys = np.empty(n, np.int64)
    span = int(_row_keys(np.ascontiguousarray(rows), keys))
    if span < 0:
        return np.unique(rows, axis=0, return_index=True, return_inverse=True)
    if span > DENSE_KEYS_PER_ROW * n:
        _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
        return rows[first], first, inverse.reshape(-1)
    first = np.empty(n, np.intp)
    inverse = np.empty(n, np.intp)
    first = first[: int(_dense_unique(keys, np.int64(span), first, inverse))]
    return rows[first], first, inverse


def _estimate_rows(
    vtype: VertexType,
    fields: list[tuple[FieldSpec, FieldTable]],
    columns: list[np.ndarray],
    widths: list[int],
    target: Any,
) -> np.ndarray:
    """The estimator's cycles for each row of sizes (``columns`` side by side; a field
    of width -1 is one number, else a list of that many)."""
    n = columns[0].shape[0] if columns else 0
    rows = np.concatenate(columns, axis=1) if columns else np.zeros((n, 1), np.int64)
    if rows.shape[1] == 0:
        rows = np.zeros((n, 1), np.int64)
    uniq, first, inverse = _unique_rows(rows)
    found = np.zeros(uniq.shape[0], np.int64)
    for k in np.argsort(first).tolist():  # in order of first appearance
        row = uniq[k].tolist()
        sizes: dict[str, int | list[int]] = {}
        pos = 0
        for (spec, _), width in zip(fields, widths, strict=True):
            if width < 0:
                sizes[spec.name] = int(row[pos])
                pos += 1
            else:
                sizes[spec.name] = [int(x) for x in row[pos : pos + width]]
                pos += width
        found[k] = vtype.estimate(sizes, target)
    return found[inverse.reshape(-1)]
