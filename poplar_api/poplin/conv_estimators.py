"""Poplibs cycle estimators of the convolution partial-sum vertices, as pure functions.

Source
------
Formulas and constants are carried over (as facts; the code is ours) from
graphcore/poplibs at commit ``7eac0f266ced5b064b3284a3cd90d491745b387c``
(:data:`POPLIBS_COMMIT`). ``PE`` = ``lib/poplin/PerformanceEstimation.hpp``, ``CE`` =
``lib/poplin/poplinCycleEstimators.cpp``, ``CV`` = ``lib/poplin/ConvVertices.cpp`` (what
the worklist numbers mean). Every function takes and returns ints; the flops Poplibs
also returns are not computed.

* :func:`zero_supervisor_cycles`: PE ``getZeroSupervisorVertexCycleEstimate`` (with
  ``zeroPartialsRetentionSavings``).
* :func:`conv_partial_nx1_cycles`: PE ``getConvPartialnx1SupervisorCycleEstimate``, i.e.
  ``getConvPartialnx1SupervisorInnerLoopCycleEstimateHalfFloat``,
  ``getConvPartialnx1SupervisorKernelLoopCycleEstimateHalfFloat`` (the
  per-kernel-position overload), ``getConvPartialnx1WorkerCycles``,
  ``getConvPartialAmpSupervisorWeightLoadCycleEstimate``,
  ``getConvPartialnx1SupervisorOuterLoopCycleEstimateHalfFloat``,
  ``convnx1WorkerRetentionSavings``, ``zeroPartialsRetentionSavings``,
  ``convNx1Overhead``.
* :func:`conv_partial_nx1_vertex_cycles`: CE ``MAKE_PERF_ESTIMATOR_NAME(ConvPartialnx1)``.
* :func:`conv_partial_hmac_cycles`: PE
  ``getConvPartialHorizontalMacSupervisorCycleEstimate``, i.e. its ``…InnerLoop…`` and
  ``…OuterLoop…`` parts, ``getConvPartialHorizontalMacCycleEstimate``,
  ``getDenseDotProductCycles``, ``convHorizontalMacOverhead``,
  ``convHzmacWorkerRetentionSavings``, ``zeroPartialsRetentionSavings``.
* :func:`conv_partial_hmac_vertex_cycles`: CE ``…(ConvPartialHorizontalMac)`` and, with
  ``use_1x1``, ``…(ConvPartialHorizontalMac1x1)``.
* :func:`conv_partial_vmac_cycles`: PE
  ``getConvPartialVerticalMacSupervisorCycleEstimate``, i.e. its ``…InnerLoop…``,
  ``…ZeroInnerLoop…``, ``…ReductionInnerLoop…`` and ``…OuterLoop…`` parts,
  ``getConvPartialVerticalReductionCycleEstimate``,
  ``getConvPartialVerticalMacCycleEstimate``, ``getVerticalMacDotProductCycles``; it is
  also the whole CE ``…(ConvPartialVerticalMac)`` estimate (with ``num_out_elems =
  zerosInfo``).

Formulas (``W`` worker contexts; ``fa``/``fp`` = float activations/partials as 0/1;
``max_c`` over the worker contexts given; ``lo`` = 0 when fewer than ``W`` contexts are
given, else the min over them; all divisions floor, ``ceil(a/b)`` written out)::

    zero(worker_elems, G) = G W max_c (ceil(n_c / (dpw / (32 if fp else 16))) + 5)
        # + 5 = (14 if fp else 15) - zeroPartialsRetentionSavings (9 if fp else 10)

    nx1 worker(entries) = 17 + (1 - fp) + sum_e (3 + t(n_e) - 9)    # 9: retention
        t(0) = 17; t(1) = 33 | 29; t(2) = 44 | 33 + x; t(n>=3) = 45 + 8 (n-3) | 34 + 4 (n-3)
        (float | half activations); x = 1 for half->half with 16 units or half->float
        with 8 units, else 0
    passes    = outChansPerGroup // numConvUnits                     # floor, not ceil
    coeff'    = coeff // 2 if filterHeight == 4 and coeff > 8 else coeff   # ld64 only
    innermost = numConvUnits weightBytesPerConvUnit // coeff'
                + {4: 60, 2: 46, 1: 15}.get(fh, 20 fh) + 3
    kernel    = sum_k passes max(max_c W worker_ck, lo_k + 9)
    inner     = Kouter (14 + Kinner (12 + passes innermost)) + kernel
    nx1       = 109 + 9 W + W (9 if fp else 10)
                + CG (OG 17 + 6 (OG - 1) + 1) + 6 (CG - 1) + 1
                + CG (16 + IG (14 + OG (14 + inner)))
    nx1 vertex = zero([ceil(zerosInfo / W)] * W, OG CG) + (109 if IG inChans == 0 else nx1)

    (HMAC and VMAC formulas: :mod:`poplar_api.poplin.mac_estimators`)

Target constants assumed (ipu2 = Mk2 and Bow; Poplar's ``Target`` is closed, so these
are grade D): data path width 64 bits (:data:`DATA_PATH_WIDTH_BITS`), so vector widths
FLOAT 2 and HALF 4 (:data:`VECTOR_WIDTH`) and zeroing 2 float / 4 half partials per
cycle; 6 worker contexts (:data:`NUM_WORKER_CONTEXTS`); AMP conv units 8 or 16 (a
template argument; ipu2 ``ConvPartialnx1`` instantiations ``(half, half, 8|16, 4)``,
``(half, float, 8, 4)``, ``(float, float, 8|16, 2)``), AMP chain length
(``getConvUnitMaxPipelineDepth``) 4 and coefficient loads 16 bytes/cycle (8 without
128-bit loads), so ``weightBytesPerConvUnit`` = ``4 * convInputLoadElems *
sizeof(fpType)`` = 32 for half and float (:func:`amp_weight_bytes_per_conv_unit`).

Not modelled: quarter (fp8) activations (their separate Poplibs formulas), SLIC
vertices (``ConvPartial1xNSLIC``), the non-limited vertex variants' own costs (Poplibs
estimates them as the limited ones, T12902; so do we), flipped HMAC output (a negative
``transformedOutStride``, which Poplibs' estimator divides as unsigned), the planner's
estimate paths (``ConvModel.cpp``, ``estimateConvPartial*InnerLoopCycles``), flops.

Source quirks kept or resolved (see each function):

* the HMAC outer loop calls ``convHzmacWorkerRetentionSavings(floatPartials, …)`` with
  the partials flag where the worker uses the activations flag: kept (it differs only
  for half activations with float partials, non-1x1: the worker saves 6, the supervisor
  adds back 0);
* the VMAC vertex estimator passes the stored worklist count (``numElems - 1``) to
  ``getVerticalMacDotProductCycles``, which computes ``size - 1`` in unsigned 32-bit
  arithmetic, so a stored 0 (a one-element entry) wraps to about 4.3e9 cycles: here
  ``size - 1`` is clamped at 0 instead (:func:`vmac_dot_product_cycles`);
* the HMAC vertex estimator divides the worklist ``numFieldElems`` (already
  ``ceil(width / outStrideX)`` in ``CV``) by the out stride again: kept.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Sequence

import numpy as np

from poplar_api.poplin.conv_estimator_common import (
    AMP_CHAIN_LENGTH,
    AMP_COEFF_LOAD_BYTES_PER_CYCLE,
    AMP_NUM_CONV_UNITS,
    DATA_PATH_WIDTH_BITS,
    NUM_WORKER_CONTEXTS,
    POPLIBS_COMMIT,
    VECTOR_WIDTH,
    VMAC_CONV_GROUPS_PER_GROUP,
    CountLists,
    _at_least,
    _balance,
    _counts,
    _partitions_3d,
    zero_partials_retention_savings,
    zero_supervisor_cycles,
    zero_worklist,
)
from poplar_api.poplin.conv_worklists import COLUMNS
from poplar_api.poplin.mac_estimators import (
    conv_partial_hmac_cycles,
    conv_partial_hmac_vertex_cycles,
    conv_partial_vmac_cycles,
    dense_dot_product_cycles,
    hmac_out_stride,
    hmac_overhead,
    hmac_worker_cycles,
    hmac_worker_retention_savings,
    hmac_worklist_conv_sizes,
    vmac_dot_product_cycles,
    vmac_reduction_cycles,
    vmac_worker_cycles,
    vmac_zero_cycles,
)

__all__ = [
    "AMP_CHAIN_LENGTH",
    "AMP_COEFF_LOAD_BYTES_PER_CYCLE",
    "AMP_NUM_CONV_UNITS",
    "DATA_PATH_WIDTH_BITS",
    "NUM_WORKER_CONTEXTS",
    "POPLIBS_COMMIT",
    "VECTOR_WIDTH",
    "VMAC_CONV_GROUPS_PER_GROUP",
    "amp_weight_bytes_per_conv_unit",
    "amp_weight_load_cycles",
    "conv_partial_hmac_cycles",
    "conv_partial_hmac_vertex_cycles",
    "conv_partial_nx1_cycles",
    "conv_partial_nx1_vertex_cycles",
    "conv_partial_vmac_cycles",
    "dense_dot_product_cycles",
    "hmac_out_stride",
    "hmac_overhead",
    "hmac_worker_cycles",
    "hmac_worker_retention_savings",
    "hmac_worklist_conv_sizes",
    "nx1_slowest_of_ranges",
    "nx1_worker_cycles",
    "vmac_dot_product_cycles",
    "vmac_reduction_cycles",
    "vmac_worker_cycles",
    "vmac_zero_cycles",
    "zero_partials_retention_savings",
    "zero_supervisor_cycles",
    "zero_worklist",
]

_NX1_OVERHEAD = 109  # convNx1Overhead
_NX1_RETENTION_SAVINGS = 9  # convnx1WorkerRetentionSavings (half/float)
_NX1_WORKER_TAG = 9  # added to the least loaded worker
_NX1_FILTER_HEIGHT_LOAD = {4: 60, 2: 46, 1: 15}  # else 20 * filterHeight
_NX1_FILTER_HEIGHT_LOAD_PER_ROW = 20


# -------------------------------------------------------------------------------- nx1
def amp_weight_bytes_per_conv_unit(
    conv_input_load_elems: int, float_activations: bool, chain_length: int = AMP_CHAIN_LENGTH
) -> int:
    """``weightBytesPerConvUnit`` of the AMP vertex estimators: ``convChainLength *
    convInputLoadElems * sizeof(fpType)`` (32 for the ipu2 half ``4`` / float ``2``)."""
    _at_least("conv_input_load_elems", conv_input_load_elems, 1)
    _at_least("chain_length", chain_length, 1)
    return chain_length * conv_input_load_elems * (4 if float_activations else 2)


def amp_weight_load_cycles(
    weight_bytes_per_conv_unit: int,
    num_conv_units: int,
    coeff_load_bytes_per_cycle: int,
    filter_height: int,
) -> int:
    """``getConvPartialAmpSupervisorWeightLoadCycleEstimate``.

    ``num_conv_units * weight_bytes_per_conv_unit // coeff``, where ``coeff`` is halved
    for ``filter_height == 4`` when above 8 bytes/cycle (that case uses ld64 only).
    """
    _at_least("weight_bytes_per_conv_unit", weight_bytes_per_conv_unit, 0)
    _at_least("num_conv_units", num_conv_units, 1)
    _at_least("coeff_load_bytes_per_cycle", coeff_load_bytes_per_cycle, 1)
    _at_least("filter_height", filter_height, 1)
    coeff = coeff_load_bytes_per_cycle
    if filter_height == 4 and coeff > 8:
        coeff //= 2
    return (num_conv_units * weight_bytes_per_conv_unit) // coeff


def nx1_worker_cycles(
    entries: Sequence[int],
    float_activations: bool,
    float_partials: bool,
    num_conv_units: int,
) -> int:
    """``getConvPartialnx1WorkerCycles``: one worker, one kernel position, its worklist
    entries of ``entries[i]`` field elements, retention savings (9 per entry) applied."""
    counts = _counts("entries", entries)
    core = 8 if float_activations else 4
    hh16 = not float_activations and not float_partials and num_conv_units == 16
    hf8 = not float_activations and float_partials and num_conv_units == 8
    extra_stride = 1 if hh16 or hf8 else 0
    cycles = 17 + (0 if float_partials else 1)
    for n in counts:
        cycles += 3  # second tripack pointer and special stride
        if n == 0:
            cycles += 17
        elif n == 1:
            cycles += 33 if float_activations else 29
        elif n == 2:
            cycles += 44 if float_activations else 33 + extra_stride
        else:
            cycles += (45 if float_activations else 34) + (n - 3) * core
        cycles -= _NX1_RETENTION_SAVINGS
    return cycles


def nx1_slowest_of_ranges(
    classes: np.ndarray,
    contexts: int,
    float_activations: bool,
    float_partials: bool,
    num_conv_units: int,
    num_worker_contexts: int,
) -> int:
    """What :func:`_nx1_slowest_workers` gives for worklists whose entry ranges (range
    ``k contexts + c``: context ``c`` at kernel position ``k``) are given by the classes
    of their entries' counts, ``classes[r]``: how many entries of range ``r`` have 0, 1, 2
    and at least 3 field elements, and the sum of the elements past 3 of the last
    (:data:`~.conv_worklists.NUM_CLASSES`). :func:`nx1_worker_cycles` is linear in
    these, so every range's worker cycles are one product, with no list per range.

    A tile geometry counts them as it makes its entries
    (:class:`~.conv_worklists.TileGeometry`); a large kernel has thousands of ranges,
    whose lists cost more than the estimate."""
    _at_least("contexts", contexts, 1)
    hh16 = not float_activations and not float_partials and num_conv_units == 16
    hf8 = not float_activations and float_partials and num_conv_units == 8
    extra_stride = 1 if hh16 or hf8 else 0
    per = (17, 33, 44, 45) if float_activations else (17, 29, 33 + extra_stride, 34)
    weights = np.array([3 + c - _NX1_RETENTION_SAVINGS for c in per]
                       + [8 if float_activations else 4], np.int64)  # fmt: skip
    worker = (17 + (0 if float_partials else 1)) + np.asarray(classes, np.int64) @ weights
    scaled = worker.reshape(-1, contexts) * num_worker_contexts
    if not scaled.size:
        return 0
    hi = scaled.max(axis=1)
    lo = scaled.min(axis=1) if contexts >= num_worker_contexts else 0
    return int(np.maximum(hi, lo + _NX1_WORKER_TAG).sum())


@functools.lru_cache(maxsize=1 << 16)
def _nx1_worker_cycles_of(
    entries: tuple[int, ...], float_activations: bool, float_partials: bool, num_conv_units: int
) -> int:
    """:func:`nx1_worker_cycles` of one worker's entries, remembered: a plan's candidates
    and tiles repeat the same few worker partitions tens of thousands of times."""
    return nx1_worker_cycles(list(entries), float_activations, float_partials, num_conv_units)


def _check_nx1_args(
    num_conv_groups: int,
    num_out_groups: int,
    num_in_groups: int,
    kernel_inner_elems: int,
    kernel_outer_elems: int,
    filter_height: int,
    in_chans_per_group: int,
    out_chans_per_group: int,
    weight_bytes_per_conv_unit: int,
    num_conv_units: int,
    coeff_load_bytes_per_cycle: int,
    num_worker_contexts: int,
    min_in: int,
) -> None:
    for name, value, lo in (
        ("num_conv_groups", num_conv_groups, 1),
        ("num_out_groups", num_out_groups, 1),
        ("num_in_groups", num_in_groups, min_in),
        ("kernel_inner_elems", kernel_inner_elems, 1),
        ("kernel_outer_elems", kernel_outer_elems, 1),
        ("filter_height", filter_height, 1),
        ("in_chans_per_group", in_chans_per_group, min_in),
        ("out_chans_per_group", out_chans_per_group, 1),
        ("weight_bytes_per_conv_unit", weight_bytes_per_conv_unit, 0),
        ("num_conv_units", num_conv_units, 1),
        ("coeff_load_bytes_per_cycle", coeff_load_bytes_per_cycle, 1),
        ("num_worker_contexts", num_worker_contexts, 1),
    ):
        _at_least(name, value, lo)


def conv_partial_nx1_cycles(
    worker_partitions: Sequence[Sequence[Sequence[int]]],
    *,
    num_conv_groups: int,
    num_out_groups: int,
    num_in_groups: int,
    kernel_inner_elems: int,
    kernel_outer_elems: int,
    filter_height: int,
    in_chans_per_group: int,
    out_chans_per_group: int,
    weight_bytes_per_conv_unit: int,
    num_conv_units: int,
    coeff_load_bytes_per_cycle: int,
    num_worker_contexts: int,
    float_activations: bool,
    float_partials: bool,
    slowest: int | None = None,
) -> int:
    """``getConvPartialnx1SupervisorCycleEstimate`` (half/float activations).

    Parameters
    ----------
    worker_partitions
        ``worker_partitions[c][k]``: the field-element counts (``numFieldPos``, i.e.
        the worklist's stored ``numFieldElems - 3`` plus 3) of the worklist entries of
        worker context ``c`` at kernel position ``k = ky * kernel_inner_elems + kx``;
        the vertex's worklist ``k * usedContexts + c``. At most ``W`` contexts, each
        with ``kernel_inner_elems * kernel_outer_elems`` lists; fewer than ``W``
        contexts means the idle ones count 0 (no +9 tag on the least loaded).
    num_conv_groups, num_out_groups, num_in_groups
        ``numConvGroupsM1 + 1``, ``numOutGroupsM1 + 1``, ``numInGroups`` (>= 1 here).
    kernel_inner_elems, kernel_outer_elems
        ``kernelInnerElementsM1 + 1`` and ``kernelOuterSizeM1 + 1``.
    filter_height
        ``ampKernelHeightM1 + 1``: AMP kernel height (1, 2 or 4; others cost 20 per row,
        Poplibs' non-limited guess).
    in_chans_per_group
        Input channels per group; not used by the half/float formula (checked >= 1).
    out_chans_per_group
        Output channels per group: ``out_chans_per_group // num_conv_units`` passes.
    weight_bytes_per_conv_unit
        ``chain length * convInputLoadElems * sizeof(fpType)`` (32 on ipu2).
    num_conv_units
        AMP conv units (8 or 16).
    coeff_load_bytes_per_cycle
        Weight load bandwidth (16, 8 without 128-bit loads).
    num_worker_contexts
        ``W`` (6).
    float_activations, float_partials
        Activations / partials are FLOAT rather than HALF.
    slowest
        The sum over kernel positions of the slowest context's cycles of one pass
        (:func:`_nx1_slowest_workers` of ``worker_partitions``), when the caller has it
        from its entries' classes (:func:`nx1_slowest_of_ranges`); ``worker_partitions``
        is then not read.

    Returns
    -------
    int
        Supervisor (tile) cycles, without output zeroing (see
        :func:`conv_partial_nx1_vertex_cycles`).
    """
    _check_nx1_args(
        num_conv_groups,
        num_out_groups,
        num_in_groups,
        kernel_inner_elems,
        kernel_outer_elems,
        filter_height,
        in_chans_per_group,
        out_chans_per_group,
        weight_bytes_per_conv_unit,
        num_conv_units,
        coeff_load_bytes_per_cycle,
        num_worker_contexts,
        1,
    )
    kernel_size = kernel_inner_elems * kernel_outer_elems
    if slowest is None:
        parts = _partitions_3d("worker_partitions", worker_partitions, kernel_size,
                               num_worker_contexts)  # fmt: skip
    passes = out_chans_per_group // num_conv_units
    innermost = (
        amp_weight_load_cycles(
            weight_bytes_per_conv_unit, num_conv_units, coeff_load_bytes_per_cycle, filter_height
        )
        + _NX1_FILTER_HEIGHT_LOAD.get(
            filter_height, _NX1_FILTER_HEIGHT_LOAD_PER_ROW * filter_height
        )
        + 3
    )
    inner = kernel_outer_elems * (14 + kernel_inner_elems * (17 - 5 + passes * innermost))
    # each kernel position adds its slowest worker, once per pass
    key = ("nx1", kernel_size, float_activations, float_partials, num_conv_units,
           num_worker_contexts)  # fmt: skip
    derived = worker_partitions.derived if isinstance(worker_partitions, CountLists) else {}
    if slowest is None:
        slowest = derived.get(key)
    if slowest is None:
        slowest = derived[key] = _nx1_slowest_workers(
            parts, kernel_size, float_activations, float_partials, num_conv_units,
            num_worker_contexts, derived.get(COLUMNS),
        )  # fmt: skip
    inner += passes * slowest
    cg, og, ig, w = num_conv_groups, num_out_groups, num_in_groups, num_worker_contexts
    return (
        _NX1_OVERHEAD
        + w * _NX1_RETENTION_SAVINGS
        + w * zero_partials_retention_savings(float_partials)
        + cg * (og * 17 + (og - 1) * 6 + 1)  # supervisor partials-zeroing loop
        + (cg - 1) * 6
        + 1
        + cg * (16 + ig * (14 + og * (14 + inner)))
    )


def _nx1_slowest_workers(
    parts: list[list[list[int]]],
    kernel_size: int,
    float_activations: bool,
    float_partials: bool,
    num_conv_units: int,
    num_worker_contexts: int,
    columns: list[tuple[int, int]] | None = None,
) -> int:
    """The sum over kernel positions of the slowest worker's cycles (the least loaded
    context's tag counted, :func:`_balance`) of one pass of
    :func:`conv_partial_nx1_cycles`: a tile geometry's alone (the passes multiply it), so
    kept with the geometry's :class:`CountLists`. Positions whose contexts have the same
    entry counts (most of a large kernel's) are costed once: counted by list object (the
    planner's equal lists are one object), a tuple made only for each distinct one;
    ``columns``, when given, are those positions' classes, each as ``(a position, how
    many)`` (the tile geometry finds them as it shares its lists)."""
    if columns is None:
        if not parts:
            columns = [(0, kernel_size)]
        else:
            keys = list(zip(*(map(id, p) for p in parts), strict=True))
            first = dict(zip(keys, range(len(keys)), strict=True))  # (a position of each)
            columns = [(first[ids], count) for ids, count in Counter(keys).items()]
    total = 0
    for k, count in columns:
        per_worker = [
            _nx1_worker_cycles_of(tuple(p[k]), float_activations, float_partials, num_conv_units)
            for p in parts
        ]
        hi, lo = _balance(per_worker, num_worker_contexts)
        total += max(hi, lo + _NX1_WORKER_TAG) * count
    return total


def conv_partial_nx1_vertex_cycles(
    worker_partitions: Sequence[Sequence[Sequence[int]]],
    zeros_info: int,
    *,
    num_conv_groups: int,
    num_out_groups: int,
    num_in_groups: int,
    kernel_inner_elems: int,
    kernel_outer_elems: int,
    filter_height: int,
    in_chans_per_group: int,
    out_chans_per_group: int,
    weight_bytes_per_conv_unit: int,
    num_conv_units: int,
    coeff_load_bytes_per_cycle: int,
    num_worker_contexts: int,
    float_activations: bool,
    float_partials: bool,
    data_path_width: int = DATA_PATH_WIDTH_BITS,
    slowest: int | None = None,
) -> int:
    """The ``ConvPartialnx1`` vertex estimator (``poplinCycleEstimators.cpp``).

    ``zero_supervisor_cycles([ceil(zeros_info / W)] * W, num_out_groups *
    num_conv_groups, data_path_width, W, float_partials)`` plus, when ``num_in_groups *
    in_chans_per_group == 0``, ``convNx1Overhead()`` (109), else
    :func:`conv_partial_nx1_cycles` with the same arguments. ``zeros_info`` is the
    vertex field ``zerosInfo`` (partials elements to zero per output vector); the
    other arguments are as in :func:`conv_partial_nx1_cycles` (``num_in_groups`` and
    ``in_chans_per_group`` may be 0 here; ``slowest`` as there). The vertex derives
    ``weight_bytes_per_conv_unit`` with :func:`amp_weight_bytes_per_conv_unit` and
    halves ``coeff_load_bytes_per_cycle`` without 128-bit loads.
    """
    _check_nx1_args(
        num_conv_groups,
        num_out_groups,
        num_in_groups,
        kernel_inner_elems,
        kernel_outer_elems,
        filter_height,
        in_chans_per_group,
        out_chans_per_group,
        weight_bytes_per_conv_unit,
        num_conv_units,
        coeff_load_bytes_per_cycle,
        num_worker_contexts,
        0,
    )
    zero = zero_supervisor_cycles(
        zero_worklist(zeros_info, num_worker_contexts),
        num_out_groups * num_conv_groups,
        data_path_width,
        num_worker_contexts,
        float_partials,
    )
    if num_in_groups * in_chans_per_group == 0:
        return _NX1_OVERHEAD + zero
    return zero + conv_partial_nx1_cycles(
        worker_partitions,
        num_conv_groups=num_conv_groups,
        num_out_groups=num_out_groups,
        num_in_groups=num_in_groups,
        kernel_inner_elems=kernel_inner_elems,
        kernel_outer_elems=kernel_outer_elems,
        filter_height=filter_height,
        in_chans_per_group=in_chans_per_group,
        out_chans_per_group=out_chans_per_group,
        weight_bytes_per_conv_unit=weight_bytes_per_conv_unit,
        num_conv_units=num_conv_units,
        coeff_load_bytes_per_cycle=coeff_load_bytes_per_cycle,
        num_worker_contexts=num_worker_contexts,
        float_activations=float_activations,
        float_partials=float_partials,
        slowest=slowest,
    )
