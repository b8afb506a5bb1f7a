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


def strided_reduce(
    num_outputs: int,
    num_partials: int,
    *,
    partials_half: bool,
    out_half: bool,
    op_name: str,
    op_vw: int,
    dpw: int,
    update: bool,
    num_outer_strides: int = 1,
) -> int:
    """``getCyclesEstimateForStridedReduce`` (``Reduce<…STRIDED_REDUCE>``).

    ``5 + 11 + ceil(nOut / elemsPerLoop) · (3 + post + nOuterStrides·(3 + cpo·(nPartials
    - 1)))`` with ``elemsPerLoop = min(opVW, dpw)`` and ``post`` the loop completion and
    store cycles of the source's tables (HALF partials: 1 + {HALF: ADD 7/9, MAX/MIN
    7/10; FLOAT: ADD 6/11, MAX/MIN 7/10}[out][op][update]; FLOAT partials: (ADD 3, else
    2) + {HALF: 2/4, FLOAT: 2/5}[out][update]). ``nOut`` is the vertex's output count
    rounded up to the partials grain (half 4, float 2), as the estimator reads it back
    from ``numOutputsM1``. The source's ``gcd`` with the stride is left out: the stride
    is a multiple of 64 bits whenever this specialisation is chosen, so the ``gcd`` is
    ``elemsPerLoop`` (the source reads an unset optional there).
    """
    grain = 4 if partials_half else 2
    n_out = iceil(num_outputs, grain) * grain
    add = op_name in ("ADD", "SQUARE_ADD")
    if partials_half:
        table = {True: {True: 9, False: 7}, False: {True: 10, False: 7}}  # half out
        ftable = {True: {True: 11, False: 6}, False: {True: 10, False: 7}}  # float out
        post = 1 + (table if out_half else ftable)[add][bool(update)]
    else:
        post = (3 if op_name == "ADD" else 2) + (
            {True: 4, False: 2} if out_half else {True: 5, False: 2}
        )[bool(update)]
    outer = 3 + post + int(num_outer_strides) * (3 + CYCLES_PER_OP * (int(num_partials) - 1))
    return 5 + 11 + iceil(n_out, min(op_vw, dpw)) * outer


def generic_reduce_regions(
    out_sizes: Sequence[int],
    partial_sizes: Sequence[Sequence[int]],
    *,
    op_vw: int,
    dpw: int,
    out_vw: int,
    accumulator: bool,
    update: bool,
) -> int:
    """``getCyclesEstimateForReduce`` (DEFAULT / SCALAR_OUTPUT_REGIONS) with several
    partial vectors per output region: region ``r`` has output size ``out_sizes[r]``
    and partial vectors of ``partial_sizes[r]`` elements (each a multiple of the
    output size). The per-region terms are those of :func:`generic_reduce`, with the
    ``numPartials[r]·(fetchPtr 7 + 3)`` cycles per vector loop and remainder."""
    acc = 1 if accumulator else 0
    checks = _ceil_log2(op_vw)

    def store(width: int) -> int:
        return (2 + int(update)) * min(width, out_vw) + acc

    per_vector_load = (2 if acc else 0) + 2 + op_vw // min(op_vw, dpw)
    cycles = 5 + 1 + 1 + 3 + 23
    for out, parts in zip(out_sizes, partial_sizes, strict=True):
        out = int(out)
        n_parts = len(parts)
        v_outer, remaining = divmod(out, op_vw)
        cycles += 16 + 6 + 2 * checks + 2
        cycles += v_outer * ((3 + 2 if acc else 3) + store(op_vw) + 1)
        cycles += v_outer * n_parts * (7 + 3)
        for i in range(checks):
            bit = 1 << i
            if remaining & bit:
                cycles += (3 + 1 if acc else 2) + store(bit) + n_parts * (7 + 3)
        for size in parts:
            accumulations = int(size) // out
            cycles += v_outer * accumulations * (per_vector_load + 3)
            for i in range(checks):
                bit = 1 << i
                if remaining & bit:
                    cycles += accumulations * (2 + bit // min(bit, dpw) + 3)
    return cycles
