"""Graph validation: every problem that stops a graph compiling, reported together."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from poplar_api.lowering import runs
from poplar_api.lowering.computeset import ComputeSetTable
from poplar_api.vertices import NO_ESTIMATE, NO_RUN, UNMAPPED, type_groups


def element_name(state, t, element_id: int) -> str:
    """``tensor 'name' element k`` for an element id of type ``t``."""
    sp = state.space(t)
    var = state.variables[int(sp.variables_of(np.array([element_id]))[0])]
    return f"tensor '{var.name}' element {element_id - var.base}"


def check_variables(state, num_tiles: int, owners=None) -> list[str]:
    """Every element of every variable and constant is mapped to a tile of the target.

    With ``owners`` (an :class:`~poplar_api.lowering.exchange.OwnerCache`), a space
    whose stretches of one owner are all on tiles of the target is passed at once.
    """
    problems = []
    passed = set()
    if owners is not None:
        for size, space in state.spaces.items():
            if space.size >= runs.STRETCHES_FROM:
                changes = owners.changes_of(size, space.tile, space.size)
                # the owner of each stretch of one owner: at id 0 and at each change
                lo, hi = runs.span(space.tile[changes]) if changes.size else (0, 0)
                first = int(space.tile[0])
                if min(lo, first) >= 0 and max(hi - 1, first) < num_tiles:
                    passed.add(size)
    variables = state.variables
    todo = np.flatnonzero(~np.isin(variables.element_sizes(), list(passed)))
    for vid in todo.tolist():  # the variables of spaces not passed at once
        var = variables[vid]
        tiles = state.space(var.type).tile[var.base : var.base + var.size]
        unmapped = np.flatnonzero(tiles == UNMAPPED)
        kind = "constant" if var.constant else "variable"
        if unmapped.size:
            problems.append(
                f"{kind} '{var.name}' (shape {list(var.shape)}): {unmapped.size} of {var.size} "
                f"element(s) are not mapped to a tile (first: element {int(unmapped[0])}); "
                "hint: call graph.setTileMapping on it"
            )
        beyond = np.flatnonzero(tiles >= num_tiles)
        if beyond.size:
            problems.append(
                f"{kind} '{var.name}': element {int(beyond[0])} is mapped to tile "
                f"{int(tiles[beyond[0]])}, out of range [0, {num_tiles}) of the device"
            )
    return problems


def check_vertices(
    state,
    cs,
    num_tiles: int,
    unconnected: np.ndarray | None = None,
    counted: Callable[[Any], bool] | None = None,
    cs_table: ComputeSetTable | None = None,
) -> list[str]:
    """Vertices of a compute set: mapped, fully connected, with an estimate.

    ``unconnected`` (per vertex of the compute set, as
    :attr:`~poplar_api.lowering.computeset.ComputeSetTable.unconnected` finds it)
    saves looking at the connections again. ``counted(vertex type)`` says whether the
    type's cycles are counted (then it needs no estimate). ``cs_table`` (the compute
    set's table) gives its vertex ids and tiles as read already.
    """
    table = state.vertices
    if cs_table is not None:
        vids, tiles = cs_table.vertex_ids, cs_table.tiles
    else:
        vids = np.asarray(cs.vertices, np.int64)
        tiles = table.column("tile", vids)
    codes = table.column("type_code", vids)
    estimated = table.column("estimate", vids) != NO_ESTIMATE
    has_estimator = np.array(
        [t.has_estimator or (counted is not None and counted(t)) for t in table.types], bool
    )
    # the common case is checked in bulk, without making any message
    suspect = (tiles < 0) | (tiles >= num_tiles) | ~(estimated | has_estimator[codes])
    if unconnected is not None:
        suspect |= unconnected
    else:
        _mark_unconnected(table, vids, codes, suspect)
    problems = []
    for vid in vids[suspect].tolist():
        problems += _vertex_problems(table[vid], cs, num_tiles, counted)
    return problems


def _mark_unconnected(table, vids: np.ndarray, codes: np.ndarray, suspect: np.ndarray) -> None:
    """Mark in ``suspect`` the vertices with a field not held as a run that is
    unconnected (looked at one vertex at a time)."""
    rows = table.column("row", vids)
    for code, positions in type_groups(codes):
        vtype, type_runs = table.types[code], table.type_runs[code]
        lists = [f.name for f in vtype.fields if f.kind == "vectorlist"]
        run_names = list(type_runs.slot)  # in slot order
        no_run = type_runs.rows(rows[positions])[:, ::2] == NO_RUN
        some = no_run.any(axis=1)
        look = range(positions.size) if lists else np.flatnonzero(some).tolist()
        at, members = positions.tolist(), vids[positions].tolist()
        for j in look:
            names = lists
            if some[j]:
                names = lists + [run_names[c] for c in np.flatnonzero(no_run[j]).tolist()]
            if not suspect[at[j]] and table.unconnected(members[j], names):
                suspect[at[j]] = True


def _vertex_problems(
    inst, cs, num_tiles: int, counted: Callable[[Any], bool] | None = None
) -> list[str]:
    """What is wrong with one vertex: its mapping, connections and estimate."""
    problems = []
    where = f"{inst.describe()} in compute set '{cs.name}'"
    if inst.tile == UNMAPPED:
        problems.append(f"{where} is not mapped to a tile; hint: graph.setTileMapping(v, tile)")
    elif inst.tile >= num_tiles:
        problems.append(f"{where} is mapped to tile {inst.tile}, out of range [0, {num_tiles})")
    for spec in inst.vtype.fields:
        value = inst.fields.get(spec.name)
        if value is None:
            problems.append(
                f"{where}: field '{spec.name}' ({spec.describe()}) is not connected; "
                f"hint: graph.connect(v['{spec.name}'], tensor)"
            )
        elif spec.kind == "vectorlist" and any(t is None for t in value):
            missing = [i for i, t in enumerate(value) if t is None]
            problems.append(
                f"{where}: field '{spec.name}' vectors {missing} are not connected "
                f"(field size {len(value)})"
            )
    needs_estimate = counted is None or not counted(inst.vtype)
    if needs_estimate and inst.perf_estimate is None and not inst.vtype.has_estimator:
        problems.append(
            f"{where} has no cycle estimate: vertex type '{inst.vtype.name}' declares no "
            "getCycleEstimate and none was set; hint: graph.setPerfEstimate(v, cycles)"
        )
    return problems


def check_conflicts(state, table: ComputeSetTable) -> list[str]:
    """No element written by two vertices, none read by one vertex and written by another."""
    problems = []
    vids = table.vertex_ids
    by_size: dict = {}  # types of one size share element ids (reinterpreted views)
    for group in table.groups:
        for ft in group.fields:
            entry = by_size.setdefault(ft.type.size, (ft.type, [], []))
            entry[2 if ft.spec.writes else 1].append(ft)
    for t, reads, writes in by_size.values():
        if not writes:
            continue
        # the written fields held as runs are marked from their runs (most written
        # fields are one run per vertex); the ids of every written field are made only
        # where an element is written twice or read by another vertex
        held = [w.runs if w.runs is not None else w.ref_runs for w in writes]
        spans = [
            runs.runs_span(*h) if h is not None else runs.span(w.ids) if w.size else None
            for w, h in zip(writes, held, strict=True)
        ]
        if all(x is None for x in spans):
            continue
        # a bitmap of the span of written ids only (a compute set writes a small part
        # of an element space, mostly in one place)
        lo = min(x[0] for x in spans if x is not None)
        hi = max(x[1] for x in spans if x is not None)
        written = np.zeros(hi - lo, bool)
        again = 0
        for w, h, x in zip(writes, held, spans, strict=True):
            if x is not None:
                again += (
                    runs.mark_new_runs(*h, lo, written)
                    if h is not None
                    else runs.mark_new(w.ids, lo, written)
                )
        w_ids: list[np.ndarray] = []  # (made when needed; not kept: FieldTable.passing_ids)
        if again:  # an element written twice
            w_ids = [w.passing_ids() for w in writes]
            problems += _double_writes(state, table, t, writes, w_ids)
        writer: np.ndarray | None = None  # first writer (position) of each written element
        for ft in reads:
            # most reads are of other tensors than the writes: a read whose span misses
            # the written span, or whose runs hit no written id, needs no look at its ids
            if ft.size == 0:
                continue
            held = ft.runs if ft.runs is not None else ft.ref_runs
            if held is not None:
                if not runs.runs_hit_bitmap(written, lo, *held):
                    continue
            else:
                r_lo, r_hi = runs.span(ft.ids)
                if r_hi <= lo or r_lo >= hi:
                    continue
            refs = runs.marked_refs(ft.ids, lo, written)
            if refs.size == 0:
                continue
            if writer is None:
                w_ids = w_ids or [w.passing_ids() for w in writes]
                writer = np.full(written.size, -1, np.int32)
                for w, w_at in zip(reversed(writes), reversed(w_ids), strict=True):
                    lengths = np.diff(w.bounds)  # (reversed assignment: the first writer wins)
                    pos = np.repeat(w.positions.astype(np.int32), lengths)
                    writer[w_at[::-1] - lo] = pos[::-1]
            ids = ft.ids[refs]
            reader_pos = ft.vertex_of(refs)
            writer_pos = writer[ids - lo]
            bad = np.flatnonzero(writer_pos != reader_pos)
            if bad.size:
                k = int(bad[0])
                reader = state.vertices[int(vids[reader_pos[k]])]
                other = state.vertices[int(vids[writer_pos[k]])]
                wfield = next(
                    w.spec.name
                    for w, w_at in zip(writes, w_ids, strict=True)
                    if np.any(w_at[w.vertex_of(np.arange(w_at.size)) == writer_pos[k]] == ids[k])
                )
                problems.append(
                    f"compute set '{table.name}': {reader.describe()} field '{ft.spec.name}' "
                    f"reads {element_name(state, t, int(ids[k]))}, which {other.describe()} "
                    f"writes through field '{wfield}' in the same compute set ({bad.size} such "
                    "read(s)); hint: split them into two compute sets"
                )
    return problems


def _double_writes(state, table: ComputeSetTable, t, writes: list, ids: list) -> list[str]:
    """The problem of elements written by two vertices of one compute set, if any (an
    element written twice by one vertex is allowed); ``ids``: each write's ids."""
    vids = table.vertex_ids
    w_ids = np.concatenate(ids)
    w_vtx = np.concatenate([w.vertex_of(np.arange(w.size)) for w in writes])
    order = np.argsort(w_ids, kind="stable")
    s_ids, s_vtx = w_ids[order], w_vtx[order]
    clash = np.flatnonzero((s_ids[1:] == s_ids[:-1]) & (s_vtx[1:] != s_vtx[:-1]))
    if not clash.size:
        return []
    k = int(clash[0])
    a, b = state.vertices[int(vids[s_vtx[k]])], state.vertices[int(vids[s_vtx[k + 1]])]
    return [
        f"compute set '{table.name}': {a.describe()} and {b.describe()} both write "
        f"{element_name(state, t, int(s_ids[k]))} ({clash.size} such element(s)); "
        "hint: each element may have one writer per compute set"
    ]
