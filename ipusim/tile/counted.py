"""Counted execution: the cycles of a vertex from the operations its kernel executed.

On a hardware IPU a vertex takes the cycles its compiled code takes. When ipusim runs a
vertex's kernel it can count, per basic block of the kernel, how often each block ran;
the operations of every block are known by class (loads and stores by width, integer and
float arithmetic, compares, branches, loop back-edges, math calls, ...). This module
turns those counts into cycles with the machine config's ``counted`` section:

* a block's cost is its operations priced per class, split over the worker's two
  pipelines (main: integer, memory, control; float), with a fraction ``pairing`` of the
  shorter pipeline bundled with the other:
  ``main + float - pairing * min(main, float)`` thread cycles; a block of an ``rpt``
  loop body runs as bundles, ``max(main, float)``;
* a worker vertex takes ``worker_entry_cycles + Σ_blocks runs * block cost`` thread
  cycles; a multi-vertex ``contexts * (its slowest worker) + supervisor_cycles`` tile
  cycles (the same units as estimates, so :mod:`ipusim.tile.compute` costs both alike);
  ``delay`` instructions add their operand in tile cycles.

The step :class:`CountedCompute` is a compute step whose vertex cycles are found when it
runs: its effect (the kernels) fills :attr:`CountedCompute.counted`, and the machine costs
that execution from them, so repeated executions with growing work take growing time.
Its ``vertex_cycles`` stay the static estimates (the graph profile's).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ipusim import ir
from ipusim.config_sections import CountedConfig
from ipusim.tile.banks import DataPlacement
from ipusim.tile.compute import ComputeCost

__all__ = [
    "DELAY_CLASS",
    "FLOAT_PIPE",
    "OP_CLASSES",
    "RPT_BODY_CLASS",
    "CountedCompute",
    "CountedComputeCost",
    "CountedCycles",
    "CountedExecution",
    "CountedPart",
    "block_cycles",
    "class_costs",
    "delay_cycles",
    "execution_cycles",
    "multi_vertex_cycles",
    "worker_vertex_cycles",
]

#: The operation classes, in the order of a block profile's columns. Each has the
#: config field ``counted.<class>_cycles``.
OP_CLASSES: tuple[str, ...] = (
    "load_narrow",
    "load_32",
    "load_64",
    "store_narrow",
    "store_32",
    "store_64",
    "int_alu",
    "int_mul",
    "int_div",
    "int_compare",
    "float_arith",
    "half_arith",
    "double_arith",
    "float_div",
    "float_compare",
    "convert",
    "branch",
    "loop_backedge",
    "math_call",
    "call",
    "array_op",
    "load_2x64",
    "load_2x64_store_64",
    "float2_arith",
    "half4_arith",
    "rpt",
    "rpt_body",
    "delay",
)

#: Classes issued by the floating-point pipeline; the others use the main pipeline.
FLOAT_PIPE: frozenset[str] = frozenset(
    {
        "float_arith",
        "half_arith",
        "double_arith",
        "float_div",
        "float_compare",
        "convert",
        "math_call",
        "float2_arith",
        "half4_arith",
    }
)

#: The class whose count is tile cycles, not operations: the operands of ``delay``
#: instructions (:func:`poplar_api.ipu_intrinsics.delay`), by the instruction's
#: definition one tile cycle each; it costs nothing in :func:`class_costs`.
DELAY_CLASS = "delay"
#: The class that marks a block of an ``rpt`` loop's body (1 per run of the block, no
#: cost): such blocks run as 64-bit bundles (see :func:`block_cycles`).
RPT_BODY_CLASS = "rpt_body"


def class_costs(cfg: CountedConfig) -> np.ndarray:
    """Thread cycles of one operation of each class of :data:`OP_CLASSES`."""
    values = {
        "load_narrow": cfg.load_narrow_cycles,
        "load_32": cfg.load_32_cycles,
        "load_64": cfg.load_64_cycles,
        "store_narrow": cfg.store_narrow_cycles,
        "store_32": cfg.store_32_cycles,
        "store_64": cfg.store_64_cycles,
        "int_alu": cfg.int_alu_cycles,
        "int_mul": cfg.int_mul_cycles,
        "int_div": cfg.int_div_cycles,
        "int_compare": cfg.int_compare_cycles,
        "float_arith": cfg.float_arith_cycles,
        "half_arith": cfg.half_arith_cycles,
        "double_arith": cfg.double_arith_cycles,
        "float_div": cfg.float_div_cycles,
        "float_compare": cfg.float_compare_cycles,
        "convert": cfg.convert_cycles,
        "branch": cfg.branch_cycles,
        "loop_backedge": cfg.loop_backedge_cycles,
        "math_call": cfg.math_call_cycles,
        "call": cfg.call_cycles,
        "array_op": cfg.array_op_cycles,
        "load_2x64": cfg.load_2x64_cycles,
        "load_2x64_store_64": cfg.load_2x64_store_64_cycles,
        "float2_arith": cfg.float2_arith_cycles,
        "half4_arith": cfg.half4_arith_cycles,
        "rpt": cfg.rpt_cycles,
        "rpt_body": 0.0,
        "delay": 0.0,
    }
    return np.array([values[c] for c in OP_CLASSES], np.float64)


_FLOAT_MASK = np.array([c in FLOAT_PIPE for c in OP_CLASSES], bool)
_DELAY = OP_CLASSES.index(DELAY_CLASS)
_RPT_BODY = OP_CLASSES.index(RPT_BODY_CLASS)


def block_cycles(cfg: CountedConfig, profile: np.ndarray) -> np.ndarray:
    """Thread cycles of one run of each block.

    A block is priced ``main + float - pairing * min(main, float)``; a block of an
    ``rpt`` loop's body (marked in the ``rpt_body`` column) runs as 64-bit bundles, a
    main-pipeline and a floating-point instruction each thread cycle (the ISA's rule
    for repeat bodies): ``max(main, float)``.

    Parameters
    ----------
    cfg
        The ``counted`` section of the machine config.
    profile
        ``[blocks, len(OP_CLASSES)]`` operations of each class in each block.
    """
    profile = np.asarray(profile)
    priced = profile.astype(np.float64) * class_costs(cfg)[: profile.shape[1]]
    mask = _FLOAT_MASK[: profile.shape[1]]
    main = priced[:, ~mask].sum(axis=1)
    flt = priced[:, mask].sum(axis=1)
    cycles = main + flt - cfg.pairing * np.minimum(main, flt)
    if profile.shape[1] > _RPT_BODY:
        cycles = np.where(profile[:, _RPT_BODY] > 0, np.maximum(main, flt), cycles)
    return cycles


def worker_vertex_cycles(cfg: CountedConfig, profile: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """Thread cycles of each execution of a worker kernel.

    ``runs[i, b]`` is how often execution ``i`` ran block ``b`` of ``profile``; the
    result is int64, rounded up (an execution takes whole cycles). ``delay`` operands
    are not included (they are tile cycles: :func:`delay_cycles`).
    """
    per_block = block_cycles(cfg, profile)
    total = np.asarray(runs, np.float64) @ per_block + cfg.worker_entry_cycles
    return np.ceil(np.round(total, 9)).astype(np.int64)


def delay_cycles(profile: np.ndarray, runs: np.ndarray) -> np.ndarray:
    """Tile cycles of the ``delay`` instructions each execution ran (int64)."""
    if profile.shape[1] <= _DELAY:
        return np.zeros(np.asarray(runs).shape[0], np.int64)
    return np.asarray(runs, np.int64) @ np.asarray(profile, np.int64)[:, _DELAY]


def multi_vertex_cycles(cfg: CountedConfig, worker_cycles: np.ndarray, contexts: int) -> np.ndarray:
    """Tile cycles of each multi-vertex from its workers' thread cycles
    (``[vertices, workers]``): the slowest worker on every context, plus the supervisor."""
    slowest = np.asarray(worker_cycles, np.int64).max(axis=1, initial=0)
    return slowest * contexts + int(np.ceil(cfg.supervisor_cycles))


@dataclass(frozen=True)
class CountedPart:
    """The counted vertices of one type in one execution of a compute set.

    The block runs of its kernel executions are kept as their distinct rows (most
    vertices of a type run the same blocks as often: a run that repeats a compute set
    keeps little per execution). Make one with :meth:`of`.

    Attributes
    ----------
    positions
        Positions in the compute set of the part's vertices.
    kind
        ``"worker"``, ``"multi"`` (a kernel per worker) or ``"supervisor"``.
    workers
        Worker kernels per multi-vertex (executions per vertex).
    profile
        ``int64[blocks, len(OP_CLASSES)]``: the operations of each block of the kernel.
    rows
        ``int64[distinct, blocks]``: the distinct rows of :attr:`runs`.
    which
        ``int32[executions]``: the row of each execution, or None when there is one row
        (every execution ran the same blocks as often).
    executions
        Kernel executions (vertices, or vertices times workers).
    """

    positions: np.ndarray
    kind: str
    workers: int
    profile: np.ndarray
    rows: np.ndarray
    which: np.ndarray | None
    executions: int

    @classmethod
    def of(
        cls,
        positions: np.ndarray,
        kind: str,
        workers: int,
        profile: np.ndarray,
        runs: np.ndarray,
    ) -> CountedPart:
        """The part of ``runs`` (``int64[executions, blocks]``: how often each kernel
        execution ran each block; vertex ``v``'s worker ``w`` at row ``v * workers + w``
        for multi-vertices)."""
        runs = np.asarray(runs, np.int64)
        n = runs.shape[0]
        if n == 0 or (runs == runs[0]).all():
            rows, which = runs[:1].copy(), None
        else:
            rows, inverse = np.unique(runs, axis=0, return_inverse=True)
            which = inverse.reshape(-1).astype(np.int32)
        return cls(positions, kind, workers, profile, rows, which, n)

    @property
    def runs(self) -> np.ndarray:
        """``int64[executions, blocks]``: how often each execution ran each block."""
        if self.which is None:
            return np.repeat(self.rows, self.executions, axis=0)
        return self.rows[self.which]

    def _per_execution(self, values: np.ndarray) -> np.ndarray:
        """Values of the distinct rows spread over the executions."""
        if self.which is None:
            return np.repeat(values, self.executions, axis=0)
        return values[self.which]

    def thread_cycles(self, cfg: CountedConfig) -> np.ndarray:
        """Thread cycles of each kernel execution (``delay`` operands excluded)."""
        return self._per_execution(worker_vertex_cycles(cfg, self.profile, self.rows))

    def delay_cycles(self) -> np.ndarray:
        """Tile cycles of the ``delay`` instructions of each kernel execution."""
        return self._per_execution(delay_cycles(self.profile, self.rows))

    def operations(self) -> np.ndarray:
        """``int64[vertices, len(OP_CLASSES)]``: the operations each vertex executed."""
        per_run = self._per_execution(self.rows @ self.profile)
        rows = self.workers if self.kind == "multi" else 1
        return per_run.reshape(-1, rows, len(OP_CLASSES)).sum(axis=1)


@dataclass(frozen=True)
class CountedExecution:
    """What one execution of a compute set counted: its counted parts, and the static
    cycles of every vertex (kept for the vertices not counted)."""

    static: np.ndarray
    parts: tuple[CountedPart, ...]

    def cycles(self, cfg: CountedConfig, contexts: int) -> np.ndarray:
        """``int64[vertices]``: every vertex's cycles in the units of estimates (thread
        cycles; tile cycles for multi-vertices)."""
        cycles = np.array(self.static, np.int64)
        for part in self.parts:
            thread = part.thread_cycles(cfg)
            waits = part.delay_cycles()
            if part.kind == "supervisor":  # supervisor code issues once per `contexts`
                found = multi_vertex_cycles(cfg, thread.reshape(-1, 1), contexts) + waits
            else:  # a worker's delay in its own thread cycles
                thread = thread + -(-waits // max(1, contexts))
                if part.kind == "multi":
                    found = multi_vertex_cycles(cfg, thread.reshape(-1, part.workers), contexts)
                else:
                    found = thread
            cycles[part.positions] = found
        return cycles


def execution_cycles(
    cfg: CountedConfig, contexts: int, executions: list[CountedExecution]
) -> np.ndarray:
    """Vertex cycles of one execution of a step from its counts: with several replicas
    (one :class:`CountedExecution` each), the larger of each vertex's."""
    found = [e.cycles(cfg, contexts) for e in executions]
    return found[0] if len(found) == 1 else np.maximum.reduce(found)


class CountedCycles:
    """The counts of a compute step's latest execution, put there by its effect (one
    :class:`CountedExecution` per replica that ran it), until the machine takes them.

    At most ``replicas`` are kept: a run that never takes them (values only, on a CPU
    device) holds one execution's, not every execution's.
    """

    __slots__ = ("_latest", "replicas")

    def __init__(self, replicas: int = 1) -> None:
        self.replicas = max(1, int(replicas))
        self._latest: list[CountedExecution] = []

    def put(self, execution: CountedExecution) -> None:
        """Record what one replica's execution counted."""
        self._latest.append(execution)
        if len(self._latest) > self.replicas:
            del self._latest[0]

    def take(self) -> list[CountedExecution]:
        """The recorded executions (empty if the effect counted nothing), cleared."""
        latest, self._latest = self._latest, []
        return latest

    def __reduce__(self) -> tuple[type, tuple[int]]:  # pickled with an executable: empty
        return (CountedCycles, (self.replicas,))


@dataclass(frozen=True, eq=False, kw_only=True)
class CountedCompute(ir.Compute):
    """A compute step whose vertex cycles come from counted execution.

    ``vertex_cycles`` are the static estimates (0 for a vertex without one); when the
    step's effect runs it puts the counts of that execution into ``counted``, and the
    machine costs the execution from them with its config's ``counted`` section.
    ``placement`` says where the data its vertices read and write lies, once memory is
    placed (for the bank conflicts of ``memory.bank_conflicts``).
    """

    counted: CountedCycles = field(default_factory=CountedCycles)
    placement: DataPlacement = field(default_factory=DataPlacement)
    #: per vertex type (``vertex_type_names``): "counted" or "estimate"
    cycle_sources: tuple[str, ...] = ()

    def with_cycles(self, cycles: np.ndarray) -> ir.Compute:
        """A plain compute step with these vertex cycles (one execution's)."""
        return ir.Compute(
            name=self.name,
            program_id=self.program_id,
            vertex_tile=self.vertex_tile,
            vertex_cycles=cycles,
            vertex_multi=self.vertex_multi,
            vertex_type=self.vertex_type,
            vertex_type_names=self.vertex_type_names,
        )


@dataclass(frozen=True)
class CountedComputeCost(ComputeCost):
    """The cost of one execution of a :class:`CountedCompute` step, with the counts it
    was costed from (so that the run can be re-timed on another cost table)."""

    executions: tuple[CountedExecution, ...] = field(default=(), repr=False)
