"""Cycle estimators of the poplin ``ReduceAdd`` and ``OuterProduct`` vertices and of the
exchanges a plan needs.

Every function works on Python ints and, element-wise, on numpy integer arrays, so the
planners can cost thousands of candidate splits in one call and the vertex estimators
(``getCycleEstimate``) use exactly the same arithmetic. The partial-sum vertices'
estimators are in :mod:`poplar_api.poplin.amp` and :mod:`poplar_api.poplin.conv_estimators`.

ReduceAdd estimate
------------------
The poplin ``ReduceAdd<out, partials, singleInput, constrainPartials>`` formulas,
graphcore/poplibs ``7eac0f26`` ``lib/poplin/PerformanceEstimation.hpp``
``getReduceCycleEstimate`` (the estimator of ``lib/poplin/poplinCycleEstimators.cpp``
passes the vertex's ``numPartials`` field), with accumulator vector width ``accVW`` 4
(FLOAT partials) / 8 (HALF partials) and ``P`` partials per 64-bit load (2 / 4):

* single input (one partial is the tile's own, ``initialPartial``; ``numPartials`` counts
  the others): ``(20 + (cpl * numPartials + outer) * ceil(ceil(numElems / accVW) / W))
  * W + 33`` with ``cpl = accVW / min(accVW, P * (1 + constrainPartials))`` and
  ``outer`` 8 / 7 for FLOAT partials and 10 / 9 for HALF partials (FLOAT / HALF
  output: ``outerLoopOverHead``); ipusim rounds the loop count up where Poplibs truncates it
  (the same whenever the vertex applies: ``numElems`` is a multiple of ``accVW``);
* several inputs (every partial exchanged, ``numPartials`` counts them all): ``W * (32
  + (cpl * numPartials + outer) * perWorker [+ 2 * numPartials + 13 / 11])`` with
  ``cpl = accVW / min(accVW, P) + 1``, ``outer`` 7 / 9 (FLOAT output, FLOAT / HALF
  partials) or 6 / 8 (HALF output), ``loops = numElems / accVW`` plus one per set bit
  of ``numElems`` below ``accVW``, ``perWorker = loops / W`` and the bracketed term
  instead of one more loop when the loops do not divide over the workers and
  ``numElems`` is not a multiple of ``accVW``.

:func:`single_input_reduce` is Poplibs' choice between the two (``reduce`` in
``lib/poplin/ConvReduce.cpp`` and ``estimateReduceCycles`` in
``PerformanceEstimation.hpp``, both 7eac0f26). The scaled-update variant (``out +=
scale * sum``, ipusim's own) adds :data:`UPDATE_CYCLES_PER_VECTOR` per accumulator
vector (load the old output, multiply-add).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.popops.layout import RPT_COUNT_MAX

#: ReduceAdd accumulator vector width by partials element size.
REDUCE_ACC_VECTOR_WIDTH = {4: 4, 2: 8}
#: Extra cycles per accumulator vector of the scaled-update reduce.
UPDATE_CYCLES_PER_VECTOR = 2
#: Exchange estimator fixed-point scaling (poplibs ExchangeEstimator).
EXCHANGE_SCALE = 16

IntLike = Any  # int or numpy integer array


def _iceil(a: IntLike, b: IntLike) -> IntLike:
    return -(-a // b)


#: Elements of the reduced output a single-input ReduceAdd needs a multiple of, by
#: partials element size (``partialsGrain`` in ``reduce``, ``ConvReduce.cpp``).
SINGLE_INPUT_GRAIN = {4: 4, 2: 8}


def single_input_reduce(
    num_elems: IntLike,
    depth: IntLike,
    partials_size: int,
    bank_bytes: int,
    tile_bytes: int,
    fast: bool = False,
) -> Any:
    """Whether Poplibs reduces ``depth`` partials of ``num_elems`` with the single-input
    ``ReduceAdd`` (True) or the several-input one (False), per element of the inputs.

    Poplibs' rule (``reduce`` in ``lib/poplin/ConvReduce.cpp`` and
    ``estimateReduceCycles`` in ``lib/poplin/PerformanceEstimation.hpp`` at 7eac0f26):
    the output must be a multiple of :data:`SINGLE_INPUT_GRAIN`, and either the
    ``enableFastReduce`` option is set (``fast``) or the exchanged partials,
    ``num_elems * (depth - 1)`` elements rounded up to whole memory elements
    (``bank_bytes``), take less than a sixteenth of the tile's memory
    (``checkPartialsSizeForSingleInputReduce``, ``ConvReducePlan.hpp``: the span of
    the memory element offsets, ``tile_bytes - bank_bytes``). On a 256 KiB Mk1 tile the
    size test never passes (one 16 KiB element is not below 15 KiB).
    """
    n = np.asarray(num_elems, np.int64)
    possible = n % SINGLE_INPUT_GRAIN[partials_size] == 0
    exchanged = n * (np.asarray(depth, np.int64) - 1) * partials_size
    occupied = _iceil(exchanged, bank_bytes) * bank_bytes
    small = occupied < (tile_bytes - bank_bytes) // 16
    out = possible & (bool(fast) | small)
    return bool(out) if out.ndim == 0 else out


def reduce_add_cycles(
    num_partials: IntLike,
    num_elems: IntLike,
    partials_size: int,
    out_size: int,
    num_workers: int,
    update: bool = False,
    single_input: Any = True,
    constrain_partials: bool = False,
) -> IntLike:
    """Tile cycles of poplin ReduceAdd: ``num_partials`` is the vertex's ``numPartials``
    (single input: the partials besides the tile's own; otherwise all of them), of
    ``num_elems`` each (see the module docstring). ``single_input`` may be an array."""
    acc_vw = REDUCE_ACC_VECTOR_WIDTH[partials_size]
    load_elems = 8 // partials_size
    pf, of = partials_size == 4, out_size == 4
    n = np.asarray(num_elems, np.int64)
    p = np.asarray(num_partials, np.int64)
    upd = UPDATE_CYCLES_PER_VECTOR if update else 0
    # single input
    cpl = acc_vw // min(acc_vw, load_elems * (1 + bool(constrain_partials)))
    outer = (8 if of else 7) if pf else (10 if of else 9)
    per_worker = _iceil(_iceil(n, acc_vw), num_workers)
    single = (20 + (cpl * p + outer + upd) * per_worker) * num_workers + 33
    # several inputs
    cpl_m = acc_vw // min(acc_vw, load_elems) + 1
    loops = n // acc_vw
    bit = 1
    while bit < acc_vw:
        loops = loops + ((n & bit) != 0)
        bit <<= 1
    base, rem = loops // num_workers, loops % num_workers
    ragged = (rem != 0) & ((n & (acc_vw - 1)) != 0)
    base = base + ((rem != 0) & ~ragged)
    extra = np.where(ragged, 2 * p + (13 if pf else 11), 0)
    outer_m = (7 if pf else 9) if of else (6 if pf else 8)
    multi = (32 + extra + (cpl_m * p + outer_m + upd) * base) * num_workers
    out = np.asarray(np.where(single_input, single, multi), np.int64)
    return int(out) if out.ndim == 0 else out


def exchange_cycles(num_bytes: IntLike, bytes_per_cycle: float) -> IntLike:
    """Cycles to receive ``num_bytes`` at ``bytes_per_cycle``: ``ceil(16 b / round(16 E))``."""
    scaled = max(1, round(float(bytes_per_cycle) * EXCHANGE_SCALE))
    out = _iceil(np.asarray(num_bytes, np.int64) * EXCHANGE_SCALE, scaled)
    out = np.asarray(out, np.int64)
    return int(out) if out.ndim == 0 else out


def outer_product_cycles(
    is_float: bool, width: Any, num_channels: Any, chans_per_group: Any,
    rpt_count_max: int = RPT_COUNT_MAX,
) -> Any:  # fmt: skip
    """``getOuterProductCycleEstimate``: cycles of one ``OuterProduct`` vertex over
    ``width`` field positions and ``num_channels`` channels in groups of
    ``chans_per_group`` (scalars or equal-shape integer arrays).

    FLOAT: the fast path (``chans_per_group`` at least 6, even, within the repeat count
    and a stride below 512) costs ``25 + groups (11 + width (6 + (cpg - 6) / 2))``, the
    slow one ``25 + groups (11 + width (10 + 2 cpg))``; HALF: at least 12 channels, a
    multiple of 4, ``25 + groups (10 + width (6 + (cpg - 12) / 4))``, else ``25 + groups
    (10 + width (10 + 5 cpg / 2))`` (integer division throughout, as the C++ does).
    """
    w = np.asarray(width, np.int64)
    c = np.asarray(num_channels, np.int64)
    cpg = np.asarray(chans_per_group, np.int64)
    if np.any(cpg < 1) or np.any(c % cpg):
        raise ValueError(
            f"outer_product_cycles: num_channels={num_channels} must be a multiple of "
            f"chans_per_group={chans_per_group} >= 1 (Poplibs asserts it)"
        )
    groups = c // cpg
    if is_float:
        fast = (cpg >= 6) & (cpg % 2 == 0) & (cpg // 2 - 3 <= rpt_count_max) & (cpg // 2 + 1 < 512)
        per = np.where(fast, 6 + (cpg - 6) // 2, 10 + cpg * 2)
        out = 25 + groups * (11 + w * per)
    else:
        fast = (cpg >= 12) & (cpg % 4 == 0) & (cpg // 4 - 3 <= rpt_count_max) & (cpg // 4 + 1 < 512)
        per = np.where(fast, 6 + (cpg - 12) // 4, 10 + (cpg * 5) // 2)
        out = 25 + groups * (10 + w * per)
    return int(out) if out.ndim == 0 else out


__all__ = [
    "SINGLE_INPUT_GRAIN",
    "exchange_cycles",
    "outer_product_cycles",
    "reduce_add_cycles",
    "single_input_reduce",
]
