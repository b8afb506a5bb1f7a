"""Cycle estimators of the popops reduction worker vertices.

Restates the Poplibs reduction estimator formulas (``poplibs_estimators.md``,
"Reductions") as functions of element counts. All results are **thread cycles** of one
worker (the ``Reduce`` vertices are plain worker vertices).

Notation: ``accVW`` is the accumulator vector width of the partials type (half 8,
float 4, other 1), ``dpw`` the elements of the partials type per 64-bit load
(``64 / (8 * size)``), ``cpo`` cycles per op (1 for every operation here).

Where the formula sheet leaves a term open, the choice is stated in the function:

* the generic formula's "remainder terms" are 0: each output region of our vertices is
  one element, counted as one whole (padded) output vector (``vOuter = 1``);
* ``loadOvh`` is 2 for accumulator operations (ADD, SQUARE_ADD on float/half partials)
  and 0 otherwise;
* ``outVW`` in ``store`` is the output type's 64-bit vector width;
* the non-vectorised formula's conversion term ``conv`` is 1 when the partials and
  output types differ, else 0;
* SCALAR_OUTPUT_SINGLE_INPUT uses one 64-bit load per loop (``loads = 1``) and no
  interleaved memory (``interleave = 1``).
"""

from __future__ import annotations

import math
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


def generic_reduce(
    partial_sizes: Sequence[int],
    *,
    op_vw: int,
    dpw: int,
    out_vw: int,
    accumulator: bool,
    update: bool,
) -> int:
    """Generic ``Reduce`` vertex, vectorised ops, one output element per region.

    ``7 + 26 + Σ_r [16 + 6 + 2·log2(opVW) + 2 + vOuter·((acc ? 3+2 : 3) + store(opVW) + 1)
    + vOuter·nPartials_r·(7+3) + vOuter·(partial_r/out_r)·(loadOvh + 2 + opVW/min(opVW, dpw)
    + 3)]`` with ``vOuter = 1``, ``nPartials_r = 1``, ``out_r = 1`` and
    ``store(w) = (2 + update)·min(w, outVW) + acc``.
    """
    acc = 1 if accumulator else 0
    load_ovh = 2 if accumulator else 0
    store = (2 + int(update)) * min(op_vw, out_vw) + acc
    per_region = 16 + 6 + 2 * int(math.log2(op_vw)) + 2 + ((3 + 2 if acc else 3) + store + 1)
    per_region += 1 * (7 + 3)
    per_elem = load_ovh + 2 + op_vw // min(op_vw, dpw) + 3
    return 7 + 26 + sum(per_region + int(n) * per_elem for n in partial_sizes)


def generic_reduce_non_vectorised(partial_sizes: Sequence[int], *, conv: int) -> int:
    """Non-vectorised ``Reduce`` (LOGICAL_AND/OR): one partial per output region.

    ``7 + 24 + Σ_r (8 + Σ_p (22 + (24 + cpo + conv)·size_p))``.
    """
    return 7 + 24 + sum(8 + 22 + (24 + CYCLES_PER_OP + conv) * int(n) for n in partial_sizes)


def scalar_output_single_input(n: int, *, op_vw: int, dpw: int, out_is_float: bool) -> int:
    """``SCALAR_OUTPUT_SINGLE_INPUT``: one output from one contiguous partial of ``n``.

    ``3 + 6 + max(loads, cpo)·(N / elemsPerLoop) + 5 + N % elemsPerLoop + 3
    (+5 if out ≠ float)`` with ``elemsPerLoop = min(opVW, dpw·interleave)``.
    """
    loads = 1
    elems = min(op_vw, dpw * 1)
    cycles = 3 + 6 + max(loads, CYCLES_PER_OP) * (int(n) // elems) + 5 + int(n) % elems + 3
    return cycles + (0 if out_is_float else 5)


def all_regions_continuous(
    num_outputs: int, num_partials: int, *, acc_vw: int, dpw: int, update: bool
) -> int:
    """``ALL_REGIONS_CONTINUOUS``: ``nOut`` outputs of ``nPartials`` partials each.

    ``cpo·nOut·(nPartials / min(accVW, dpw)) + (nPartials odd ? 2 : 0) + 12·nOut + 10
    (+1 update) + 7`` (integer division, as the unsigned arithmetic of the source).
    """
    n_out, n_p = int(num_outputs), int(num_partials)
    cycles = CYCLES_PER_OP * n_out * (n_p // min(acc_vw, dpw))
    cycles += (2 if n_p % 2 == 1 else 0) + 12 * n_out + 10 + int(update) + 7
    return cycles
