"""Cycle estimators of the popops reduction worker vertices.

Restates the Poplibs reduction estimator formulas (``poplibs_estimators.md``,
"Reductions") as functions of element counts. All results are **thread cycles** of one
worker (the ``Reduce`` vertices are plain worker vertices).

Notation: ``accVW`` is the accumulator vector width of the partials type (half 8,
float 4, other 1), ``dpw`` the elements of the partials type per 64-bit load
(``64 / (8 * size)``), ``cpo`` cycles per op (1 for every operation here).

Source: ``lib/popops/reduction/CycleEstimationFunctions.cpp`` at poplibs commit
``7eac0f266ced5b064b3284a3cd90d491745b387c``, with ``getForceInterleavedEstimates()``
false. ``opVW`` is ``accVW`` for ADD/SQUARE_ADD and the 64-bit vector width of the
partials type for MAX/MIN/MUL; ``cyclesPerOp`` is 1 (LOG_ADD is not supported).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "acc_vector_width",
    "all_regions_continuous",
    "data_path_elems",
    "generic_reduce",
    "generic_reduce_non_vectorised",
    "iceil",
    "scalar_output_single_input",
]

#: Cycles per op of every supported operation (poplibs: 1 except LOG_ADD).
CYCLES_PER_OP = 1


def iceil(a: int, b: int) -> int:
    """Ceiling division of non-negative ``a`` by positive ``b``."""
    return -(-int(a) // int(b))


def acc_vector_width(partials_size: int, partials_floating: bool) -> int:
    """Accumulator vector width: half 8, float 4, any other type 1."""
    if not partials_floating:
        return 1
    return 8 if partials_size == 2 else 4


def data_path_elems(partials_size: int) -> int:
    """Partials elements per 64-bit load: ``64 / (8 * size)`` (float 2, half 4, bool 8)."""
    return max(1, 64 // (8 * partials_size))


def _ceil_log2(x: int) -> int:
    return max(0, (int(x) - 1).bit_length())


def generic_reduce(
    partial_sizes: Sequence[int],
    *,
    op_vw: int,
    dpw: int,
    out_vw: int,
    accumulator: bool,
    update: bool,
    out_sizes: Sequence[int] | None = None,
) -> int:
    """``getCyclesEstimateForReduce``, vectorised ops (``Reduce`` DEFAULT /
    SCALAR_OUTPUT_REGIONS), one partial region per output region.

    ``7 + 26 + Σ_r [16 + 6 + 2·ceilLog2(opVW) + 2 + vOuter·((acc ? 3+2 : 3) + store(opVW)
    + 1) + vOuter·(7+3) + Σ_{bits b of out_r % opVW} ((acc ? 3+1 : 2) + store(b) + (7+3))
    + vOuter·(n_r/out_r)·(loadOvh + 2 + opVW/min(opVW, dpw) + 3)
    + Σ_{bits b} (n_r/out_r)·(2 + b/min(b, dpw) + 3)]`` with ``vOuter = out_r / opVW``,
    ``store(w) = (2 + update)·min(w, outVW) + acc`` and ``loadOvh = acc ? 2 : 0``.
    Output regions are not padded: a 1-element output (the default ``out_sizes``) has
    no vector loop and pays the 1-element remainder path.
    """
    acc = 1 if accumulator else 0
    outs = [1] * len(partial_sizes) if out_sizes is None else list(out_sizes)
    checks = _ceil_log2(op_vw)

    def store(width: int) -> int:
        return (2 + int(update)) * min(width, out_vw) + acc

    per_vector_load = (2 if acc else 0) + 2 + op_vw // min(op_vw, dpw)
    cycles = 5 + 1 + 1 + 3 + 23
    for n, out in zip(partial_sizes, outs, strict=True):
        v_outer, remaining = divmod(int(out), op_vw)
        cycles += 16 + 6 + 2 * checks + 2
        cycles += v_outer * ((3 + 2 if acc else 3) + store(op_vw) + 1)
        cycles += v_outer * 1 * (7 + 3)
        accumulations = int(n) // int(out)
        cycles += v_outer * accumulations * (per_vector_load + 3)
        for i in range(checks):
            bit = 1 << i
            if remaining & bit:
                cycles += (3 + 1 if acc else 2) + store(bit) + 1 * (7 + 3)
                cycles += accumulations * (2 + bit // min(bit, dpw) + 3)
    return cycles


def generic_reduce_non_vectorised(partial_sizes: Sequence[int], *, conv: int) -> int:
    """Non-vectorised ``Reduce`` (LOGICAL_AND/OR): one partial per output region.

    ``7 + 24 + Σ_r (8 + Σ_p (22 + (24 + cpo + conv)·size_p))``.
    """
    return 7 + 24 + sum(8 + 22 + (24 + CYCLES_PER_OP + conv) * int(n) for n in partial_sizes)


def scalar_output_single_input(
    n: int, *, op_vw: int, dpw: int, out_is_float: bool, cycles_per_op: int = CYCLES_PER_OP
) -> int:
    """``getCyclesEstimateForSingleInput`` (SCALAR_OUTPUT_SINGLE_INPUT).

    ``elemsPerCycle = min(opVW, dpw)``, ``loads = opVW / elemsPerCycle``,
    ``cyclesPerLoop = max(loads, cpo)``, ``elemsPerLoop = elemsPerCycle · loads``:
    ``3 + 6 + (cyclesPerLoop · N) / elemsPerLoop + 5 + N % elemsPerLoop + 3
    (+5 if out ≠ float)`` (integer arithmetic as the source).
    """
    per_cycle = min(op_vw, dpw)
    loads = op_vw // per_cycle
    per_loop = max(loads, cycles_per_op)
    elems = per_cycle * loads
    n = int(n)
    cycles = 3 + 6 + (per_loop * n) // elems + 5 + n % elems + 3
    return cycles + (0 if out_is_float else 5)


def all_regions_continuous(
    num_outputs: int, num_partials: int, *, acc_vw: int, dpw: int, update: bool
) -> int:
    """``getCycleEstimateReduceAllRegionsContinuous`` (``ContinuousReduce``).

    ``cpo·nOut·(nPartials / min(accVW, dpw)) + (nPartials odd ? 2 : 0) + 12·nOut + 10
    (+1 update) + 7``. As the source's caller does, ``nOut`` is the vertex field
    ``numOutputsM1`` (outputs minus one), so a one-output vertex costs 17 or 19 cycles
    whatever its partials: a quirk of the published estimator, kept on purpose.
    """
    n_out = int(num_outputs) - 1
    n_p = int(num_partials)
    cycles = CYCLES_PER_OP * n_out * (n_p // min(acc_vw, dpw))
    cycles += (2 if n_p % 2 == 1 else 0) + 12 * n_out + 10 + int(update) + 7
    return cycles
