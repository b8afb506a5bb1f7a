"""The compile pipeline: a graph and its programs to a machine program and its memory.

:func:`compile` runs named steps, each a function taking and returning small typed
values:

1. :func:`validate_graph`: every variable mapped to a tile of the target
   (:class:`Validation`).
2. :func:`emit`: the programs lowered to IR (:class:`Emitted`). Each compute set is
   validated when it is first lowered (vertices mapped, connected and estimated; no
   element written twice or read and written by two vertices), and the exchanges
   around it are planned (:mod:`~poplar_api.lowering.exchange`) as its IR is made,
   since they are IR steps. Problems of both steps are reported together
   (:class:`~poplar_api.errors.GraphValidationError`).
3. :func:`~poplar_api.lowering.liveness.liveness`: program points and each
   variable's live range (:class:`~poplar_api.lowering.liveness.Liveness`).
4. :func:`~poplar_api.lowering.memory.place_memory`: tile memory placed by the
   timing model's view of the program (:class:`~ipusim.tile.memory.MemoryReport`).

``Engine(graph, programs)`` and ``compileGraph`` both call :func:`compile`; an
engine then loads the :class:`Compiled` result onto a device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ipusim import ir, progress
from ipusim.host_heap import release_free_heap
from ipusim.tile.memory import MemoryReport
from ipusim.timing import TimingModel
from poplar_api.errors import GraphValidationError, OutOfMemoryError
from poplar_api.lowering import validate
from poplar_api.lowering.computeset import ComputeSetRecord
from poplar_api.lowering.context import Lowered, Storage
from poplar_api.lowering.emission import Emission, HostIO
from poplar_api.lowering.emit import Emitter, count_programs
from poplar_api.lowering.exchange import OwnerCache
from poplar_api.lowering.liveness import Accesses, Liveness, VariableIndex, liveness
from poplar_api.lowering.memory import out_of_memory_message, place_memory

__all__ = ["Compiled", "Emitted", "Validation", "compile", "emit", "validate_graph"]


@dataclass(frozen=True)
class Validation:
    """Problems found in the graph itself (before its programs are lowered)."""

    problems: tuple[str, ...]


@dataclass(frozen=True)
class Emitted:
    """The programs lowered to the machine IR.

    Attributes
    ----------
    program
        The IR program (entries in the order given, functions by index).
    lowered
        The effects and predicates its steps name, over the device memory image.
    accesses
        What its nodes access, for liveness.
    compute_sets
        The lowered compute sets, in lowering order.
    problems
        Problems found while lowering (the program is incomplete when there are any).
    """

    program: ir.Program
    lowered: Lowered
    accesses: Accesses
    compute_sets: tuple[ComputeSetRecord, ...]
    problems: tuple[str, ...]


@dataclass(frozen=True)
class Compiled:
    """A compiled graph: what an engine loads and runs.

    Attributes
    ----------
    program
        The machine program.
    lowered
        Its effects and predicates (closures over ``storage`` and ``host``).
    storage
        The device memory image, initial values written.
    host
        The host side of its stream and remote-buffer effects.
    liveness
        Program points and live ranges.
    memory
        The tile memory placement.
    """

    program: ir.Program
    lowered: Lowered
    storage: Storage
    host: HostIO
    liveness: Liveness
    memory: MemoryReport


def validate_graph(state: Any, owners: OwnerCache | None = None) -> Validation:
    """Every element of every variable and constant mapped to a tile of the target."""
    num_tiles = state.target.getNumTiles()
    return Validation(tuple(validate.check_variables(state, num_tiles, owners)))


def emit(
    state: Any,
    programs: Sequence[Any],
    lowered: Lowered,
    host: HostIO,
    options: Mapping[str, str] | None = None,
    owners: OwnerCache | None = None,
    index: VariableIndex | None = None,
    step: Callable[[int], None] | None = None,
) -> Emitted:
    """Lower ``programs`` (entry programs, in ``run`` order) to one IR program.

    Effects and predicates are registered in ``lowered``; ``owners`` and ``index``
    are the lowering's shared look-ups (made here if not given); ``step(1)`` is
    called as each program is lowered (a progress meter's count, see
    :func:`~poplar_api.lowering.emit.count_programs`).
    """
    em = Emission(state, lowered, host, options)
    if owners is not None:
        em.owners = owners
    if index is not None:
        em.variables = index
    emitter = Emitter(em, step)
    entries = tuple(emitter.entry(p) for p in programs)  # each ends with a sync
    replicas = lowered.storage.replicas
    program = ir.Program(entries=entries, functions=emitter.function_nodes(), replicas=replicas)
    for step in ir.iter_steps(program):  # the host is ready when every replica's is
        ready = getattr(step, "prefetch_predicate", None)
        if ready is not None:
            lowered.combine[ready] = "all"
    return Emitted(
        program, lowered, em.accesses(), tuple(em.compute_sets.values()), tuple(em.problems)
    )


def compile(
    state: Any,
    programs: Sequence[Any],
    host: HostIO,
    options: Mapping[str, str] | None = None,
    timing: TimingModel | None = None,
    replicas: int = 1,
) -> Compiled:
    """Compile ``programs`` of graph ``state``: validate, emit IR, liveness, memory.

    Parameters
    ----------
    state
        The graph state.
    programs
        The entry programs (``run(i)`` runs the i-th).
    host
        The host side of stream effects (the engine's host streams).
    options
        Engine options (the profiler filters, ``exchange.enablePrefetch``,
        ``debug.allowOutOfMemory``).
    timing
        The timing model memory placement asks (a default one of the target's config
        when None).
    replicas
        Replicas of the graph (each gets a device memory image).

    Raises
    ------
    GraphValidationError
        Listing every problem of the graph and its programs.
    OutOfMemoryError
        The placement does not fit and ``debug.allowOutOfMemory`` is not ``true``.
    """
    options = options or {}
    # each step frees large temporaries; their heap pages go back to the system after
    # emission and at the end (``ipusim.host_heap``), so the peak resident set (in
    # memory placement for large graphs) is what is live. Not before emission: its
    # temporaries reuse the free pages the graph's build left (trimmed then, they were
    # faulted in again: half a small CNN step's page faults), and what it does not
    # reuse is trimmed after it, before placement
    owners = OwnerCache()
    index = VariableIndex(state)
    with progress.activity("validate"):  # each step named on a long compile's line
        checked = validate_graph(state, owners)
    lowered = Lowered(Storage(state, replicas))
    steps = count_programs(programs, state.functions)
    try:
        with progress.activity("emit", total=steps, unit="programs") as step:
            emitted = emit(state, programs, lowered, host, options, owners, index, step)
    except (ValueError, IndexError) as exc:
        if not checked.problems:
            raise
        # lowering a copy or exchange of elements on no tile: the graph's own problems
        # (unmapped variables) are the cause; report them, not numpy's complaint
        raise GraphValidationError(list(checked.problems)) from exc
    problems = [*checked.problems, *emitted.problems]
    if problems:
        raise GraphValidationError(problems)
    # every exchange is planned: the maps kept for the next one's planning (an element
    # space's id marks, a large target's tile-pair maps: tens to hundreds of MB) are
    # not held through liveness and memory placement, where the host memory peaks
    owners.marks.clear()
    owners.free_pairs.clear()
    release_free_heap()
    with progress.activity("liveness"):
        live = liveness(state, emitted.program, emitted.accesses, index)
    timing = timing if timing is not None else TimingModel(state.target.config)
    with progress.activity("memory placement"):
        memory = place_memory(state, live, emitted.compute_sets, timing, owners, index)
    allow_oom = str(options.get("debug.allowOutOfMemory", "false")).lower() == "true"
    if memory.out_of_memory and not allow_oom:
        raise OutOfMemoryError(out_of_memory_message(memory), memory)
    compiled = Compiled(emitted.program, lowered, lowered.storage, host, live, memory)
    changes = owners.changes  # where each space's tile changes (the lowering's mappings)
    del emitted, owners, index  # the accesses and look-ups: freed before the heap is trimmed
    for size, space in state.spaces.items():  # the lowering's last read of the tile arrays
        space.compact(changes.get(size))  # (its runs from those changes: no pass over it)
    del changes
    release_free_heap()
    return compiled
