"""Tile memory of a compiled graph: what each tile must hold, placed with liveness.

Gathers, per tile and by Poplar's profile categories, everything a compiled graph
needs in tile memory and hands it to :func:`ipusim.tile.memory.plan`:

* ``variable`` / ``constant``: each variable's elements on each tile (data region:
  interleaved first; the interleaved region only when a vertex field declared
  ``interleaved=True`` is connected to them on that tile).
* ``vertexInstanceState``: per vertex a header word plus its field words (sizes in
  the config's ``code`` section), summed per compute set and tile; kept in the
  non-interleaved region next to the code that walks it, so the interleaved region
  holds only variables and buffers.
* ``vertexCode``: once per vertex type per tile; ``controlCode``: per tile, per
  program step run on it; ``internalExchangeCode`` / ``globalExchangeCode`` /
  ``hostExchangeCode``: per on-chip exchange, exchange between IPUs
  (``GlobalExchange``) or stream copy, per participating tile (the same sizes for
  both kinds of exchange); ``stack``: worker and supervisor stacks on every tile.
  Code and stacks are non-interleaved and always live.
* ``messageBuffer``: the elements an ``Execute`` receives from (or sends to) other
  tiles, on its IPU or another, held while that ``Execute`` runs.

Liveness: the executed IR steps of every entry program, in order (entry 0 first),
are program points; a function's steps are walked where it is called. A variable is
live from the first to the last point that touches it, widened to the whole of any
loop (``Repeat``, ``RepeatWhile``) it is touched in. It is *always live* when it is a
constant, has an initial value, has a host read/write handle, or is touched by more
than one entry program or by a function. A ``WriteUndef`` covering all of a
variable's elements (outside a function) ends its live range there: the next access
starts a new one, so the variable has one block per live range and other variables
may use its memory in between (``by_category`` still counts its bytes once). A range
in a loop is widened to the whole loop unless a ``WriteUndef`` of the variable in the
loop precedes the range (then its value does not carry over to the next iteration).

Code is stored once: a function's steps count in the control and exchange code at
its first call only, however often it is called. The sizes come from the config's
``code`` section; none is measured on hardware (the presets mark them estimates).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ipusim import ir
from ipusim.config import CodeConfig
from ipusim.tile.memory import (
    INTERLEAVED,
    NON_INTERLEAVED,
    BlockTable,
    MemoryReport,
    MemorySpec,
    plan,
)
from ipusim.timing import TimingModel
from poplar_api.lowering import runs
from poplar_api.vertices import id_array, id_count, type_groups

__all__ = ["out_of_memory_message", "plan_memory", "vertex_state_bytes"]


def vertex_state_bytes(inst: Any, code: CodeConfig) -> int:
    """Vertex state of one vertex instance: header plus its fields' words."""
    total = code.vertex_header_bytes
    for spec in inst.vtype.fields:
        total += code.field_pointer_bytes
        if spec.kind == "vector":
            total += code.vector_size_bytes
        elif spec.kind == "vectorlist":
            inner = inst.fields.get(spec.name) or []
            total += code.vector_size_bytes + code.vectorlist_descriptor_bytes * len(inner)
    return total


def copy_vertex_state_bytes(code: CodeConfig) -> int:
    """Vertex state of an on-tile copy vertex: header and two vector fields."""
    return code.vertex_header_bytes + 2 * (code.field_pointer_bytes + code.vector_size_bytes)


@dataclass
class _Walk:
    """Program points of the IR and where lowering recorded accesses."""

    steps: list[ir.Step] = field(default_factory=list)
    #: (id of the touching node, first point, last point, entry, inside a function)
    touched: list[tuple[int, int, int, int, bool]] = field(default_factory=list)
    loops: list[tuple[int, int]] = field(default_factory=list)
    #: (first point, last point) of every Execute occurrence
    executes: list[tuple[int, int]] = field(default_factory=list)
    #: (id of a WriteUndef node, position, entry, inside a function): the undef sits
    #: just before program point ``position``
    undefs: list[tuple[int, int, int, bool]] = field(default_factory=list)
    #: points of the second and later calls of a function (their code is stored once)
    repeated: set[int] = field(default_factory=set)


def _walk(
    program: ir.Program,
    touches: dict[int, Any],
    executes: set[int],
    undefs: dict[int, Any] | None = None,
) -> _Walk:
    w = _Walk()
    undefs = undefs or {}
    called: set[int] = set()

    def visit(node: Any, entry: int, in_fn: bool, calls: tuple[int, ...]) -> None:
        lo = len(w.steps)
        if isinstance(node, ir.Step):
            w.steps.append(node)
        elif isinstance(node, ir.Call):
            if node.function not in calls and 0 <= node.function < len(program.functions):
                fn = program.functions[node.function]
                again = node.function in called
                called.add(node.function)
                visit(fn, entry, True, (*calls, node.function))
                if again:
                    w.repeated.update(range(lo, len(w.steps)))
        else:
            for child in ir.children(node):
                visit(child, entry, in_fn, calls)
        hi = len(w.steps) - 1
        if id(node) in undefs:
            w.undefs.append((id(node), lo, entry, in_fn))
        if hi < lo:
            return
        if isinstance(node, ir.Repeat | ir.RepeatWhile):
            w.loops.append((lo, hi))
        if id(node) in touches:
            w.touched.append((id(node), lo, hi, entry, in_fn))
        if id(node) in executes:
            w.executes.append((lo, hi))

    for entry, node in enumerate(program.entries):
        visit(node, entry, False, ())
    return w


def _present(values: np.ndarray, n: int) -> np.ndarray:
    """Sorted distinct values of ``values`` (all in ``[0, n)``), without sorting them."""
    mask = np.zeros(n, bool)
    mask[values] = True
    return np.flatnonzero(mask)


def _variables_of(state: Any, parts: list[tuple[Any, Any]]) -> np.ndarray:
    """Ids of the variables owning any of the elements in ``parts`` (each an id array
    or a pair ``(begin, end)`` of arrays of id runs)."""
    mask = np.zeros(len(state.variables), bool)
    for t, ids in parts:
        space = state.find_space(t)
        if space is None:
            continue
        if isinstance(ids, tuple):
            runs.mark_variable_runs(space, *ids, mask)
        elif ids.size:
            runs.mark_variables(space, ids, mask)
    return np.flatnonzero(mask)


def _liveness(state: Any, walk: _Walk, touches: dict[int, Any]) -> tuple[np.ndarray, ...]:
    """Per variable: first and last live point, and whether it is always live."""
    nv = len(state.variables)
    first = np.full(nv, np.iinfo(np.int64).max, np.int64)
    last = np.full(nv, -1, np.int64)
    entry_of = np.full(nv, -1, np.int64)
    always = np.zeros(nv, bool)
    cache: dict[int, np.ndarray] = {}
    for nid, lo, hi, entry, in_fn in walk.touched:
        vids = cache.get(nid)
        if vids is None:
            vids = cache[nid] = _variables_of(state, touches[nid])
        np.minimum.at(first, vids, lo)
        np.maximum.at(last, vids, hi)
        prev = entry_of[vids]
        always[vids[(prev >= 0) & (prev != entry)]] = True
        entry_of[vids] = entry
        if in_fn:
            always[vids] = True
    used = last >= 0
    for _ in range(2):  # loops nest or are disjoint: a second pass settles any order
        for lo, hi in walk.loops:
            m = used & (first <= hi) & (last >= lo)
            first[m] = np.minimum(first[m], lo)
            last[m] = np.maximum(last[m], hi)
    always |= np.fromiter((v.constant for v in state.variables), bool, nv)
    held = [(t, runs.ids_or_run(ids)) for t, ids, _ in state.initial_parts]
    for handles in (state.host_writes, state.host_reads):
        held += [(t.elementType(), runs.ids_or_run(t._flat_ids())) for t in handles.values()]
    always[_variables_of(state, held)] = True
    return first, last, always


def _undef_ranges(
    state: Any, walk: _Walk, touches: dict[int, Any], undefs: dict[int, Any], always: np.ndarray
) -> dict[int, list[tuple[int, int]]]:
    """Live ranges of the variables a ``WriteUndef`` covers in full (and that are not
    always live): variable id -> inclusive ``(first, last)`` ranges, in order."""
    cut: dict[int, list[int]] = {}  # variable -> positions of its undefs
    for nid, pos, _entry, in_fn in walk.undefs:
        if in_fn:
            continue  # a function's undef: the variable is always live anyway
        for t, ids in undefs[nid]:
            space = state.find_space(t)
            if space is None or ids.size == 0:
                continue
            uniq = np.unique(ids)
            vids, counts = np.unique(space.variables_of(uniq), return_counts=True)
            for vid, n in zip(vids.tolist(), counts.tolist(), strict=True):
                if n == state.variables[vid].size and not always[vid]:
                    cut.setdefault(vid, []).append(pos)
    if not cut:
        return {}
    spans: dict[int, list[tuple[int, int]]] = {vid: [] for vid in cut}
    wanted = np.fromiter(cut, np.int64, len(cut))
    cache: dict[int, np.ndarray] = {}
    for nid, lo, hi, _entry, _in_fn in walk.touched:
        vids = cache.get(nid)
        if vids is None:
            vids = cache[nid] = _variables_of(state, touches[nid])
        for vid in np.intersect1d(vids, wanted).tolist():
            spans[vid].append((lo, hi))
    out: dict[int, list[tuple[int, int]]] = {}
    for vid, touched in spans.items():
        marks = sorted(cut[vid])
        ranges: list[list[int]] = []
        for lo, hi in sorted(touched):
            if ranges and not any(ranges[-1][1] < u <= lo for u in marks):
                ranges[-1][1] = max(ranges[-1][1], hi)
            else:
                ranges.append([lo, hi])
        for _ in range(2):  # loops nest or are disjoint, as in _liveness
            for loop_lo, loop_hi in walk.loops:
                for r in ranges:
                    inside = r[0] <= loop_hi and r[1] >= loop_lo
                    fresh = any(loop_lo <= u <= max(r[0], loop_lo) for u in marks)
                    if inside and not fresh:
                        r[0], r[1] = min(r[0], loop_lo), max(r[1], loop_hi)
            ranges.sort()
            merged: list[list[int]] = []
            for r in ranges:
                if merged and r[0] <= merged[-1][1]:
                    merged[-1][1] = max(merged[-1][1], r[1])
                else:
                    merged.append(list(r))
            ranges = merged
        out[vid] = [(a, b) for a, b in ranges]
    return out


def _interleaved_keys(state: Any, cs_ids: list[int], num_tiles: int) -> np.ndarray:
    """``variable * num_tiles + tile`` of the (variable, tile) pairs connected to a
    field declared interleaved, sorted."""
    keys = []
    table = state.vertices
    interleaved = [[f for f in t.fields if f.interleaved] for t in table.types]
    for cs_id in cs_ids:
        vids = np.asarray(state.compute_sets[cs_id].vertices, np.int64)
        codes = table.column("type_code", vids)
        for kind, at in type_groups(codes):
            specs = interleaved[kind]
            if not specs:
                continue
            for vid in vids[at].tolist():
                fields = table.fields[vid]
                for spec in specs:
                    value = fields.get(spec.name)
                    for ids in value if isinstance(value, list) else [value]:
                        if ids is None or id_count(ids) == 0:
                            continue
                        ids = id_array(ids)
                        space = state.space(spec.element_type)
                        tiles = space.tile[ids].astype(np.int64)
                        keys.append(space.variables_of(ids) * num_tiles + tiles)
    if not keys:
        return np.zeros(0, np.int64)
    return np.unique(np.concatenate(keys))


def _exchange_totals(timing: TimingModel, step: ir.Step) -> tuple[np.ndarray, ...]:
    """(bytes sent once per message, bytes received, messages sent + received) per tile."""
    if isinstance(step, ir.Exchange):
        cost = timing.cost(step)
        return cost.bytes_sent, cost.bytes_received, cost.messages_sent + cost.messages_received
    n = timing.config.num_tiles
    # a global exchange between replicas (``replicated`` False) names machine-wide
    # tiles: every replica holds its share of the code on its own tile ``t % n``
    src = np.asarray(step.src_tile, np.int64) % n
    dst = np.asarray(step.dst_tile, np.int64) % n
    nbytes = np.asarray(step.num_bytes, np.int64)
    sent = np.bincount(src, weights=nbytes, minlength=n).astype(np.int64)
    received = np.bincount(dst, weights=nbytes, minlength=n).astype(np.int64)
    messages = np.bincount(src, minlength=n) + np.bincount(dst, minlength=n)
    return sent, received, messages.astype(np.int64)


def _step_tiles(timing: TimingModel, step: ir.Step, num_tiles: int) -> np.ndarray:
    """Tiles a step runs on (a sync involves every tile, or those of the IPUs it
    lists)."""
    if isinstance(step, ir.Compute):
        return _present(np.asarray(step.vertex_tile, np.int64), num_tiles)
    if isinstance(step, ir.Exchange | ir.GlobalExchange):
        sent, received, messages = _exchange_totals(timing, step)
        return np.flatnonzero((sent > 0) | (received > 0) | (messages > 0))
    if isinstance(step, ir.StreamCopy):
        return _present(np.asarray(step.tile, np.int64), num_tiles)
    if isinstance(step, ir.Sync) and step.ipus is not None:  # the listed IPUs' tiles
        tpi = timing.config.tile.tiles_per_ipu
        tiles = [np.arange(i * tpi, min((i + 1) * tpi, num_tiles)) for i in step.ipus]
        return np.concatenate(tiles) if tiles else np.zeros(0, np.int64)
    return np.arange(num_tiles)


def _per_tile_blocks(name: str, category: str, nbytes: np.ndarray, **kw: Any) -> BlockTable:
    return BlockTable.per_tile(name, category, nbytes, **kw)


def _code_blocks(walk: _Walk, timing: TimingModel, nt: int) -> list[BlockTable]:
    """Stacks, control code and exchange code of every tile (non-interleaved, always live)."""
    nonint = {"region": NON_INTERLEAVED}
    cfg = timing.config
    code = cfg.code
    stack = cfg.tile.worker_contexts * code.worker_stack_bytes + code.supervisor_stack_bytes
    steps_on = np.zeros(nt, np.int64)
    ex_code = np.zeros(nt, np.int64)
    global_code = np.zeros(nt, np.int64)
    host_code = np.zeros(nt, np.int64)
    for point, step in enumerate(walk.steps):
        if point in walk.repeated:
            continue  # a function called again: its code is already stored
        if isinstance(step, ir.Exchange) and step.host:
            continue  # the on-chip side of a stream copy: its code is the copy's
        tiles = _step_tiles(timing, step, nt)
        steps_on[tiles] += 1
        if isinstance(step, ir.Exchange | ir.GlobalExchange):
            into = global_code if isinstance(step, ir.GlobalExchange) else ex_code
            into[tiles] += code.exchange_code_base_bytes
            into += code.exchange_code_bytes_per_message * _exchange_totals(timing, step)[2]
        elif isinstance(step, ir.StreamCopy):
            host_code[tiles] += code.host_exchange_code_bytes
    control = code.control_code_base_bytes + code.control_code_bytes_per_step * steps_on
    return [
        _per_tile_blocks("stack", "stack", np.full(nt, stack, np.int64), **nonint),
        _per_tile_blocks("control", "controlCode", control, **nonint),
        _per_tile_blocks("exchange", "internalExchangeCode", ex_code, **nonint),
        _per_tile_blocks("host exchange", "hostExchangeCode", host_code, **nonint),
        _per_tile_blocks("global exchange", "globalExchangeCode", global_code, **nonint),
    ]


def _vertex_code_blocks(
    computes: list[ir.Compute], nt: int, by_vertex_type: dict[str, int], code: CodeConfig
) -> list[BlockTable]:
    """Code of each vertex type on each tile that runs one (counted in ``by_vertex_type``)."""
    code_tiles: dict[str, np.ndarray] = {}
    for step in computes:
        vtile = np.asarray(step.vertex_tile, np.int64)
        vt = np.asarray(step.vertex_type if step.vertex_type is not None else [], np.int64)
        if vt.size != vtile.size:
            vt = np.zeros(vtile.size, np.int64)
        for k, tname in enumerate(step.vertex_type_names):
            on = code_tiles.setdefault(tname, np.zeros(nt, bool))
            on[vtile[vt == k]] = True
    blocks = []
    for tname, on in code_tiles.items():
        nbytes = np.where(on, code.vertex_code_bytes, 0)
        blocks.append(BlockTable.per_tile(tname, "vertexCode", nbytes, region=NON_INTERLEAVED))
        count = int(np.count_nonzero(on))
        by_vertex_type[tname] = by_vertex_type.get(tname, 0) + code.vertex_code_bytes * count
    return blocks


def _variable_blocks(
    state: Any,
    walk: _Walk,
    touches: dict[int, Any],
    cs_ids: list[int],
    nt: int,
    undefs: dict[int, Any] | None = None,
    owners: Any = None,
) -> tuple[list[BlockTable], list[BlockTable]]:
    """Each variable's (or constant's) elements on each tile, with its live range: one
    block per live range when ``WriteUndef`` splits it. Returns the blocks and, apart,
    the second and later ranges' blocks (so that the report counts a variable once)."""
    first, last, always = _liveness(state, walk, touches)
    split = _undef_ranges(state, walk, touches, undefs or {}, always)
    inter = _interleaved_keys(state, cs_ids, nt)
    blocks: list[BlockTable] = []
    extra: list[BlockTable] = []
    for v in state.variables:
        space = state.space(v.type)
        changes = None
        if owners is not None and v.size >= runs.STRETCHES_FROM:
            changes = owners.changes_of(v.type.size, space.tile, space.size)
        counts = runs.tile_counts(space.tile, v.base, v.base + v.size, nt, changes)
        tiles = np.flatnonzero(counts)
        if not tiles.size:
            continue
        live = None if always[v.id] else (int(first[v.id]), int(last[v.id]))
        if live is not None and live[1] < 0:
            live = (0, -1)  # touched by no program: live at no point
        ranges: list[tuple[int, int] | None] = list(split.get(v.id) or [live])
        category = "constant" if v.constant else "variable"
        region = np.full(tiles.size, 2, np.int64)  # any region
        if inter.size:
            region[np.isin(v.id * nt + tiles, inter)] = 1  # interleaved
        nbytes = counts[tiles] * v.type.size
        parts = [
            BlockTable.rows(v.name, category, tiles, nbytes, v.type.size, region, rng)
            for rng in ranges
        ]
        if len(parts) == 1:
            blocks.append(parts[0])
            continue
        both = BlockTable.concat(parts)  # range by range; blocks go tile by tile
        blocks.append(both.take(np.arange(len(both)).reshape(len(parts), -1).T.reshape(-1)))
        extra.extend(parts[1:])
    return blocks, extra


def _vertex_state_blocks(
    state: Any,
    emitter: Any,
    computes: list[ir.Compute],
    nt: int,
    by_compute_set: dict[str, np.ndarray],
    by_vertex_type: dict[str, int],
    code: CodeConfig,
) -> list[BlockTable]:
    """Vertex state per compute set and tile: the graph's compute sets, then the
    on-tile copies lowering made (one copy vertex per tile)."""
    kw = {"element_bytes": 4, "region": NON_INTERLEAVED}
    blocks: list[BlockTable] = []
    in_cs: set[int] = set()
    for cs_id, node in emitter.cs_nodes.items():
        cs = state.compute_sets[cs_id]
        in_cs.update(id(s) for s in node.body)
        table = state.vertices
        vids = np.asarray(cs.vertices, np.int64)
        codes = table.column("type_code", vids)
        sizes = np.zeros(vids.size, np.int64)
        for kind, at in type_groups(codes):
            vtype = table.types[kind]
            if any(f.kind == "vectorlist" for f in vtype.fields):
                sizes[at] = [vertex_state_bytes(table[v], code) for v in vids[at].tolist()]
            else:  # the same state bytes for every vertex of the type
                sizes[at] = vertex_state_bytes(table[int(vids[at[0]])], code)
            by_vertex_type[vtype.name] = by_vertex_type.get(vtype.name, 0) + int(sizes[at].sum())
        vtile = table.column("tile", vids)
        per_tile = np.bincount(vtile, weights=sizes, minlength=nt).astype(np.int64)
        by_compute_set[cs.name] = by_compute_set.get(cs.name, 0) + per_tile
        blocks.append(_per_tile_blocks(cs.name, "vertexInstanceState", per_tile, **kw))
    for step in computes:
        if id(step) in in_cs:
            continue
        per_tile = np.bincount(step.vertex_tile, minlength=nt).astype(np.int64)
        per_tile *= copy_vertex_state_bytes(code)
        by_compute_set[step.name] = by_compute_set.get(step.name, 0) + per_tile
        tname = step.vertex_type_names[0]
        by_vertex_type[tname] = by_vertex_type.get(tname, 0) + int(per_tile.sum())
        blocks.append(_per_tile_blocks(step.name, "vertexInstanceState", per_tile, **kw))
    return blocks


def _buffer_blocks(walk: _Walk, timing: TimingModel, nt: int) -> list[BlockTable]:
    """Exchange buffers of each Execute, live while it runs: elements received before
    its compute step (on the receivers), elements sent after it (on the senders), by
    on-chip and global exchanges alike."""
    blocks: list[BlockTable] = []
    for lo, hi in walk.executes:
        seen_compute = False
        for p in range(lo, hi + 1):
            step = walk.steps[p]
            if isinstance(step, ir.Compute):
                seen_compute = True
            elif isinstance(step, ir.Exchange | ir.GlobalExchange):
                sent, received, _ = _exchange_totals(timing, step)
                nbytes = sent if seen_compute else received
                blocks.append(_per_tile_blocks(step.name, "messageBuffer", nbytes, live=(lo, hi)))
    return blocks


def plan_memory(state: Any, program: ir.Program, emitter: Any) -> MemoryReport:
    """Place what the compiled ``program`` of graph ``state`` needs in tile memory.

    Blocks are handed to the allocator in this order (it keeps the order among
    blocks of equal rank): stacks, control code, exchange code, host exchange code,
    global exchange code, vertex code, variables (by id), vertex state, exchange
    buffers.

    Parameters
    ----------
    state
        The graph state (variables, vertices, tile mappings, host handles).
    program
        The lowered IR program (entries and functions).
    emitter
        The :class:`~poplar_api.lowering.emit.Emitter` that lowered it (its
        ``touches`` and ``cs_nodes``).
    """
    cfg = state.target.config
    nt = state.target.getNumTiles()
    undefs = getattr(emitter, "undefs", {})
    walk = _walk(program, emitter.touches, {id(n) for n in emitter.cs_nodes.values()}, undefs)
    computes = list({id(s): s for s in walk.steps if isinstance(s, ir.Compute)}.values())
    by_compute_set: dict[str, np.ndarray] = {}
    by_vertex_type: dict[str, int] = {}
    timing = TimingModel(cfg)
    variables, extra = _variable_blocks(
        state, walk, emitter.touches, list(emitter.cs_nodes), nt, undefs, emitter.owners
    )
    blocks = BlockTable.concat(
        [
            *_code_blocks(walk, timing, nt),
            *_vertex_code_blocks(computes, nt, by_vertex_type, cfg.code),
            *variables,
            *_vertex_state_blocks(
                state, emitter, computes, nt, by_compute_set, by_vertex_type, cfg.code
            ),
            *_buffer_blocks(walk, timing, nt),
        ]
    )
    names = [s.name for s in walk.steps]
    spec = MemorySpec.from_config(cfg.memory)
    report = plan(spec, nt, blocks, names, by_compute_set, by_vertex_type)
    for part in extra:  # a variable's later live ranges: its bytes count once
        np.subtract.at(report.by_category[part.categories[0]], part.tile, part.size)
    return report


def _kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB"


def out_of_memory_message(report: MemoryReport, max_tiles: int = 5) -> str:
    """Message of the out-of-memory error: worst tiles, their sizes and largest variables."""
    bad = report.tiles_out_of_memory
    cap = report.capacity
    lines = [
        f"graph does not fit in tile memory: {bad.size} of {report.num_tiles} tile(s) out of "
        f"memory (capacity per tile {cap['total']} B = {_kib(cap['total'])}: "
        f"{cap[NON_INTERLEAVED]} B non-interleaved + {cap[INTERLEAVED]} B interleaved)"
    ]
    for tile, need, capacity in report.worst_tiles(min(max_tiles, max(int(bad.size), 1))):
        over = int(report.by_tile["overflowedIncludingGaps"][tile])
        top = report.variables_on_tile(tile)[:3]
        listed = ", ".join(f"'{n}' {b} B" for n, b in top) or "none"
        lines.append(
            f"  tile {tile}: needs {need} B ({_kib(need)}) including gaps, capacity "
            f"{capacity} B ({_kib(capacity)}), {over} B did not fit; largest variables: {listed}"
        )
    lines.append(
        "hint: spread large tensors over more tiles (setTileMapping, "
        "poputil.mapTensorLinearly), or compile with the engine option "
        "debug.allowOutOfMemory='true' to get the engine and its memory report "
        "(engine.memory, getGraphProfile)"
    )
    return "\n".join(lines)
