"""Lowering of ``Execute``: a compute set and the exchanges around it.

Remote vertex inputs become a sync and an exchange before the compute set, remote
outputs a sync and an exchange after it (:meth:`Emission.exchange_steps
<poplar_api.lowering.emission.Emission.exchange_steps>`, which on several IPUs puts
the elements that cross IPUs first). A compute set is validated and lowered once,
however often it is executed: every ``Execute`` of it shares the IR node. Its vertex
state is recorded for memory placement (:class:`ComputeSetRecord`). With several
replicas (and no counted vertices) its effect runs every replica's vertices in one
kernel call per vertex type.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ipusim import ir
from ipusim.tile.counted import CountedCompute, CountedCycles
from poplar_api import program as P  # noqa: N812 - short alias for program classes
from poplar_api.codelet import VertexType
from poplar_api.counted import vertex_cycles_mode
from poplar_api.device import TargetType
from poplar_api.lowering import validate
from poplar_api.lowering.computeset import (
    ComputeSetRecord,
    CountedRun,
    build_table,
    interleaved_keys,
    make_runner,
    plan_reads,
    plan_writes,
    touched_keys,
    vertex_cycles,
    vertex_state,
)
from poplar_api.lowering.emission import Emission
from poplar_api.lowering.exchange import ExchangePlanner
from poplar_api.replica_alike import compute_set_writes

__all__ = ["counts_vertex_type", "lower_execute"]


def counts_vertex_type(vtype: VertexType, mode: str, hardware: bool) -> bool:
    """Whether the cycles of ``vtype``'s vertices are counted when they run.

    ``estimate``: never. ``counted``: whenever ipusim runs a compiled kernel of the
    type. ``auto`` (as Poplar): on a hardware device, for codelets whose kernel is the
    vertex's real code, not Poplibs' library vertices (whose real code is hand-written
    assembly that their estimators describe).
    """
    if mode == "estimate" or vtype.kernel is None:
        return False
    if mode == "counted":
        return True
    library = vtype.cls.__module__.startswith("poplar_api.")
    return hardware and not library


def _counted_types(em: Emission) -> Callable[[VertexType], bool]:
    """Whether each vertex type is counted in this lowering (engine option
    ``debug.vertexCycles`` and the target's type)."""
    mode = vertex_cycles_mode(getattr(em, "options", None))
    hardware = em.target.getTargetType() is TargetType.IPU
    known: dict[int, bool] = {}

    def counts(vtype: VertexType) -> bool:
        found = known.get(id(vtype))
        if found is None:
            found = known[id(vtype)] = counts_vertex_type(vtype, mode, hardware)
        return found

    return counts


def lower_execute(em: Emission, prog: P.Execute) -> ir.Node:
    """IR of ``Execute(cs)``: exchange in, compute, exchange out (problems go to
    ``em.problems`` and give an empty sequence)."""
    cs = prog.computeSet
    sets = em.state.compute_sets
    if not (0 <= cs.id < len(sets) and sets[cs.id] is cs):
        em.problems.append(
            f"Execute #{em.pid(prog)}: compute set '{cs.name}' belongs to another "
            "graph; hint: make it with the engine's graph.addComputeSet"
        )
        return ir.Sequence()
    known = em.compute_sets.get(cs.id)
    if known is not None:
        return known.node
    table = build_table(em.state, cs)
    counts = _counted_types(em)
    problems = validate.check_vertices(
        em.state, cs, em.num_tiles, table.unconnected, counts, cs_table=table
    )
    problems += validate.check_conflicts(em.state, table)
    em.problems += problems
    if problems:
        return ir.Sequence()
    counted = [counts(g.vtype) for g in table.groups]
    estimates = em.state.vertices.column("estimate", table.vertex_ids)
    cycles = vertex_cycles(table, estimates, em.target, counted)
    multi = np.zeros(cycles.size, bool)
    type_of = np.zeros(cycles.size, np.int64)
    for k, group in enumerate(table.groups):  # types in order of first appearance
        type_of[group.positions] = k
        multi[group.positions] = group.vtype.is_multi
    names = [g.vtype.name for g in table.groups]
    contexts = em.cfg.tile.worker_contexts
    holder = CountedCycles(em.lowered.storage.replicas)
    run = CountedRun(counted, cycles, holder) if any(counted) else None
    replicas = em.lowered.storage.replicas
    if replicas > 1:  # what it writes is not a constant every replica holds alike
        em.lowered.storage.constants.note_writes(table)
    if run is None and replicas > 1:  # every replica in one batch per vertex type
        runner = make_runner(table, em.lowered.storage, contexts, None, replicas)
        effect = em.lowered.global_effect(runner)
    else:
        effect = em.lowered.effect(make_runner(table, em.lowered.storage, contexts, run))
    em.lowered.describe(effect, compute_set_writes(table))  # what it writes, every replica
    pid = em.pid(prog)
    planner = ExchangePlanner(em.target, em.state, em.owners)
    plan_reads(planner, table, em.state)
    nodes = em.exchange_steps(planner, f"{cs.name}/ExchangeIn", f"{cs.name}/Sync", pid, "In")
    step = {
        "name": cs.name,
        "effect": effect,
        "program_id": pid,
        "vertex_tile": table.tiles,
        "vertex_cycles": cycles,
        "vertex_multi": multi,
        "vertex_type": type_of,
        "vertex_type_names": tuple(names),
    }
    if run is None:
        nodes.append(ir.Compute(**step))
    else:
        sources = tuple("counted" if c else "estimate" for c in counted)
        counted_step = CountedCompute(**step, counted=holder, cycle_sources=sources)
        # where its data lies is known once memory is placed (place_memory fills it in)
        counted_step.placement.touched = touched_keys(table, em.state, em.variables, em.num_tiles)
        nodes.append(counted_step)
    planner = ExchangePlanner(em.target, em.state, em.owners)
    plan_writes(planner, table, em.state)
    nodes += em.exchange_steps(planner, f"{cs.name}/ExchangeOut", f"{cs.name}/SyncOut", pid, "Out")
    node = ir.Sequence(nodes, name=cs.name)
    em.touches[id(node)] = [
        (ft.type, em.field_touched(ft.type, ft.touched())) for g in table.groups for ft in g.fields
    ]
    st = vertex_state(table, em.cfg.code, em.num_tiles)
    inter = interleaved_keys(table, em.state, em.variables, em.num_tiles)
    em.compute_sets[cs.id] = ComputeSetRecord(
        cs.id, cs.name, node, st.per_tile, st.by_type, inter, st.descriptors_per_tile,
        st.by_type_tile, st.parts_by_type_tile,
    )  # fmt: skip
    return node
