"""Graph validation: every problem that stops a graph compiling, reported together."""

from __future__ import annotations

import numpy as np

from poplar_api.graph import UNMAPPED
from poplar_api.lowering.computeset import ComputeSetTable


def element_name(state, t, element_id: int) -> str:
    """``tensor 'name' element k`` for an element id of type ``t``."""
    sp = state.space(t)
    var = state.variables[int(sp.variables_of(np.array([element_id]))[0])]
    return f"tensor '{var.name}' element {element_id - var.base}"


def check_variables(state, num_tiles: int) -> list[str]:
    """Every element of every variable and constant is mapped to a tile of the target."""
    problems = []
    for var in state.variables:
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


def check_vertices(state, cs, num_tiles: int) -> list[str]:
    """Vertices of a compute set: mapped, fully connected, with an estimate."""
    problems = []
    for vid in cs.vertices:
        inst = state.vertices[vid]
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
        if inst.perf_estimate is None and not inst.vtype.has_estimator:
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
        w_ids = np.concatenate([w.ids for w in writes])
        w_vtx = np.concatenate([w.vertex_of(np.arange(w.ids.size)) for w in writes])
        w_field = np.concatenate([np.full(w.ids.size, i) for i, w in enumerate(writes)])
        order = np.argsort(w_ids, kind="stable")
        s_ids, s_vtx, s_field = w_ids[order], w_vtx[order], w_field[order]
        clash = np.flatnonzero((s_ids[1:] == s_ids[:-1]) & (s_vtx[1:] != s_vtx[:-1]))
        if clash.size:
            k = int(clash[0])
            a, b = state.vertices[int(vids[s_vtx[k]])], state.vertices[int(vids[s_vtx[k + 1]])]
            problems.append(
                f"compute set '{table.name}': {a.describe()} and {b.describe()} both write "
                f"{element_name(state, t, int(s_ids[k]))} ({clash.size} such element(s)); "
                "hint: each element may have one writer per compute set"
            )
        written = np.zeros(state.space(t).size, bool)
        written[w_ids] = True
        # the first writer of each element (stable sort: first in vertex order)
        first = np.ones(s_ids.size, bool)
        first[1:] = s_ids[1:] != s_ids[:-1]
        u_ids, u_vtx, u_field = s_ids[first], s_vtx[first], s_field[first]
        for ft in reads:
            refs = np.flatnonzero(written[ft.ids])
            if refs.size == 0:
                continue
            ids = ft.ids[refs]
            reader_pos = ft.vertex_of(refs)
            at = np.searchsorted(u_ids, ids)
            writer_pos = u_vtx[at]
            bad = np.flatnonzero(writer_pos != reader_pos)
            if bad.size:
                k = int(bad[0])
                reader = state.vertices[int(vids[reader_pos[k]])]
                other = state.vertices[int(vids[writer_pos[k]])]
                wfield = writes[int(u_field[at[k]])].spec.name
                problems.append(
                    f"compute set '{table.name}': {reader.describe()} field '{ft.spec.name}' "
                    f"reads {element_name(state, t, int(ids[k]))}, which {other.describe()} "
                    f"writes through field '{wfield}' in the same compute set ({bad.size} such "
                    "read(s)); hint: split them into two compute sets"
                )
    return problems
