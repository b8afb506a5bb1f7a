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

    hmac worker(sizes) = 16 - R(fa) + sum_s (7 if s == 0 else (13 if 1x1 else 19)
                          + (1 + s (2 + D) if 1x1 and oc' == 1 else s (7 + oc' D)))
        R(a) = 15 if 1x1 else (0 if a else 6)        # convHzmacWorkerRetentionSavings
        oc' = ceil(outChansPerGroup / 2) if half partials else outChansPerGroup
        D   = getDenseDotProductCycles(vw, fa, fp, inChansPerGroup): the widest
              w = 2^i <= 2^ceil(log2 vw) dividing inChans, a = 2 | 4 (float | half acts),
              m = 2 if half->half else 1:
              D = 3 m + hh + 3 + 1 + (m if w < a else 0) + (inChans / w)(1 if w >= a else 2)
                  - (1 - fa)
    hmac = (58 | 65 for float | half acts) - 10 (1x1) + W (9 if fp else 10) + W R(fp)
           + CG (23 + IG (15 + OG (10 + max_c W (16 + sum_k worker_ck))))
    hmac vertex = (zero(...) if zerosInfo or 1x1 else 0) + (overhead if IG inChans == 0
                  else hmac), counts = ceil(numFieldElems / outStride) with
                  outStride = transformedOutStride // outChansPerGroup + 1

    vmac worker(sizes), c = convGroupsPerGroup, dot(s, n) = 3 + (3 (s-1) n//8 if n >= 8
                  else 2 (s-1) n//4):
        c >= 8, half partials: (13 if c == 8 else 25)
                               + (1 if c == 8 else 2) sum_s (22 + dot(s, 8))
        otherwise:             (19 if fp else 18) + sum_s (7 + (5 if fp else 3) + dot(s, c))
    vmac = 61 + 14 + 25 + fp + CG (4 + ceil(E / (2 if fp else 4))
           + 32 + IG (24 + max_c W worker_c)
           + 10 - fp + (7 + 2 fp + (2 if fp else 1)(W - 1)) ceil(E / W) // c)

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

import numbers
from collections.abc import Sequence

#: Poplibs commit the estimators are taken from.
POPLIBS_COMMIT = "7eac0f266ced5b064b3284a3cd90d491745b387c"
#: ``Target::getDataPathWidth()`` in bits (ipu2).
DATA_PATH_WIDTH_BITS = 64
#: ``Target::getVectorWidth(type)``: elements per 64-bit data path.
VECTOR_WIDTH = {"float": 2, "half": 4}
#: ``Target::getNumWorkerContexts()`` (ipu2).
NUM_WORKER_CONTEXTS = 6
#: ``getConvUnitMaxPipelineDepth`` (AMP chain length) on ipu2.
AMP_CHAIN_LENGTH = 4
#: ``getConvUnitCoeffLoadBytesPerCycle`` with 128-bit loads (halved without).
AMP_COEFF_LOAD_BYTES_PER_CYCLE = 16
#: AMP conv units a ``ConvPartialnx1`` instantiation may use.
AMP_NUM_CONV_UNITS = (8, 16)
#: VMAC ``convGroupsPerGroup`` instantiations.
VMAC_CONV_GROUPS_PER_GROUP = (4, 8, 16)

# zeroing
_ZERO_WORKER_OVERHEAD = {True: 14, False: 15}  # float, half partials
# nx1
_NX1_OVERHEAD = 109  # convNx1Overhead
_NX1_RETENTION_SAVINGS = 9  # convnx1WorkerRetentionSavings (half/float)
_NX1_WORKER_TAG = 9  # added to the least loaded worker
_NX1_FILTER_HEIGHT_LOAD = {4: 60, 2: 46, 1: 15}  # else 20 * filterHeight
_NX1_FILTER_HEIGHT_LOAD_PER_ROW = 20
# hmac
_HMAC_WORKER_NONLOOP = 16
_HMAC_OVERHEAD = {True: 58, False: 65}  # float, half activations
_HMAC_1X1_OVERHEAD_SAVING = 10
# vmac
_VMAC_SUPERVISOR_OVERHEAD = 61
_VMAC_WORKER_CORE_INIT = 14
_VMAC_WORKER_STATE_INIT = 25  # + floatPartials


# ------------------------------------------------------------------------- validation
def _at_least(name: str, value: int, lo: int) -> None:
    if int(value) != value or value < lo:
        raise ValueError(f"{name}={value}: must be an integer >= {lo}")


def _counts(name: str, counts: Sequence[int]) -> list[int]:
    out = []
    for i, n in enumerate(counts):
        if int(n) != n or n < 0:
            raise ValueError(f"{name}[{i}]={n}: counts must be integers >= 0")
        out.append(int(n))
    return out


def _partitions_3d(
    name: str,
    partitions: Sequence[Sequence[Sequence[int]]],
    kernel_size: int,
    num_worker_contexts: int,
) -> list[list[list[int]]]:
    """Check ``partitions[context][k][entry]``: at most ``W`` contexts, ``kernel_size``
    kernel positions each, counts >= 0."""
    if len(partitions) > num_worker_contexts:
        raise ValueError(
            f"{name} has {len(partitions)} worker contexts; required at most "
            f"num_worker_contexts={num_worker_contexts}"
        )
    out = []
    for c, per_k in enumerate(partitions):
        if isinstance(per_k, numbers.Number) or len(per_k) != kernel_size:
            got = "a number" if isinstance(per_k, numbers.Number) else f"{len(per_k)} lists"
            raise ValueError(
                f"{name}[{c}] has {got}; required one list of entry counts per kernel "
                f"position ({kernel_size})"
            )
        rows = []
        for k, entries in enumerate(per_k):
            if isinstance(entries, numbers.Number):
                raise ValueError(f"{name}[{c}][{k}]={entries}: required a list of entry counts")
            rows.append(_counts(f"{name}[{c}][{k}]", entries))
        out.append(rows)
    return out


def _balance(per_worker: Sequence[int], num_worker_contexts: int) -> tuple[int, int]:
    """``(max, lo)`` of ``W * worker`` cycles; ``lo`` is 0 with fewer than ``W`` contexts
    (Poplibs' ``minWorkerCycles`` starts at 0 then)."""
    scaled = [num_worker_contexts * c for c in per_worker]
    hi = max(scaled, default=0)
    lo = min(scaled) if len(scaled) >= num_worker_contexts and scaled else 0
    return hi, lo


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------- zeroing
def zero_partials_retention_savings(float_partials: bool) -> int:
    """``zeroPartialsRetentionSavings``: 9 float / 10 half partials."""
    return 9 if float_partials else 10


def zero_worklist(zeros_info: int, num_worker_contexts: int) -> list[int]:
    """The per-worker zeroing worklist the vertex estimators build: ``ceil(zerosInfo /
    W)`` elements for each of the ``W`` workers."""
    _at_least("zeros_info", zeros_info, 0)
    _at_least("num_worker_contexts", num_worker_contexts, 1)
    return [_ceil_div(zeros_info, num_worker_contexts)] * num_worker_contexts


def zero_supervisor_cycles(
    worker_elems: Sequence[int],
    num_groups: int,
    data_path_width: int,
    num_worker_contexts: int,
    float_partials: bool,
) -> int:
    """``getZeroSupervisorVertexCycleEstimate``: zero ``num_groups`` partials vectors.

    Parameters
    ----------
    worker_elems
        Partials elements each worker zeroes per group (one count per context).
    num_groups
        Output vectors zeroed (``numOutGroups * numConvGroups`` in the callers).
    data_path_width
        Bits per load/store (64): ``data_path_width / 32`` float or ``/ 16`` half
        elements per cycle.
    num_worker_contexts
        ``W``: the slowest worker's cycles are multiplied by it.
    float_partials
        Partials are FLOAT rather than HALF.

    Returns
    -------
    int
        ``num_groups * W * max_c (ceil(n_c / vectorWidth) + (14|15) - (9|10))``.
    """
    elems = _counts("worker_elems", worker_elems)
    _at_least("num_groups", num_groups, 0)
    _at_least("num_worker_contexts", num_worker_contexts, 1)
    bits = 32 if float_partials else 16
    if int(data_path_width) != data_path_width or data_path_width < bits:
        raise ValueError(
            f"data_path_width={data_path_width}: must be an integer >= {bits} bits (one "
            f"{'float' if float_partials else 'half'} partial)"
        )
    width = data_path_width // bits
    worst = max(
        (
            _ceil_div(n, width)
            + _ZERO_WORKER_OVERHEAD[bool(float_partials)]
            - zero_partials_retention_savings(float_partials)
            for n in elems
        ),
        default=0,
    )
    return worst * num_worker_contexts * num_groups


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
    parts = _partitions_3d("worker_partitions", worker_partitions, kernel_size, num_worker_contexts)
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
    for k in range(kernel_size):
        per_worker = [
            nx1_worker_cycles(p[k], float_activations, float_partials, num_conv_units)
            for p in parts
        ]
        hi, lo = _balance(per_worker, num_worker_contexts)
        inner += max(hi, lo + _NX1_WORKER_TAG) * passes
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
) -> int:
    """The ``ConvPartialnx1`` vertex estimator (``poplinCycleEstimators.cpp``).

    ``zero_supervisor_cycles([ceil(zeros_info / W)] * W, num_out_groups *
    num_conv_groups, data_path_width, W, float_partials)`` plus, when ``num_in_groups *
    in_chans_per_group == 0``, ``convNx1Overhead()`` (109), else
    :func:`conv_partial_nx1_cycles` with the same arguments. ``zeros_info`` is the
    vertex field ``zerosInfo`` (partials elements to zero per output vector); the
    other arguments are as in :func:`conv_partial_nx1_cycles` (``num_in_groups`` and
    ``in_chans_per_group`` may be 0 here). The vertex derives
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
    )


# ------------------------------------------------------------------------------- hmac
def hmac_worker_retention_savings(float_activations: bool, use_1x1: bool) -> int:
    """``convHzmacWorkerRetentionSavings``: 15 (1x1), else 0 float / 6 half."""
    if use_1x1:
        return 15
    return 0 if float_activations else 6


def hmac_overhead(float_activations: bool, use_1x1: bool) -> int:
    """``convHorizontalMacOverhead``: 58 float / 65 half activations, 10 less for 1x1."""
    return _HMAC_OVERHEAD[bool(float_activations)] - (_HMAC_1X1_OVERHEAD_SAVING if use_1x1 else 0)


def _check_hmac_types(float_activations: bool, float_partials: bool, use_1x1: bool) -> None:
    if float_activations and not float_partials:
        raise ValueError(
            "float_activations=True, float_partials=False: HMAC has no float->half "
            "vertex (Poplibs asserts !floatActivations || floatPartials)"
        )
    if use_1x1 and (float_activations or not float_partials):
        raise ValueError(
            f"use_1x1=True with float_activations={bool(float_activations)}, "
            f"float_partials={bool(float_partials)}: ConvPartialHorizontalMac1x1 exists "
            "for half activations with float partials only"
        )


def dense_dot_product_cycles(
    activations_vector_width: int, float_activations: bool, float_partials: bool, size: int
) -> int:
    """``getDenseDotProductCycles``: one output (two for half->half) over ``size`` input
    channels, with the widest power-of-two vector width dividing ``size``."""
    _at_least("activations_vector_width", activations_vector_width, 1)
    _at_least("size", size, 0)
    _check_hmac_types(float_activations, float_partials, False)
    acts_per_64 = 2 if float_activations else 4
    half_half = not float_activations and not float_partials
    out_chans = 2 if half_half else 1
    inner = 3 * out_chans + int(half_half) + 3 + 1  # rpt+wind-down, convert, acc, branch
    width = 1 << (activations_vector_width - 1).bit_length()  # 2^ceil(log2 vw)
    while size % width:
        width //= 2
    narrow = width < acts_per_64  # cannot load weights and activations together
    return (
        inner
        + (out_chans if narrow else 0)
        + (size // width) * (2 if narrow else 1)
        - (0 if float_activations else 1)
    )


def hmac_worker_cycles(
    conv_sizes: Sequence[int],
    *,
    in_chans_per_group: int,
    out_chans_per_group: int,
    activations_vector_width: int,
    float_activations: bool,
    float_partials: bool,
    use_1x1: bool,
) -> int:
    """``getConvPartialHorizontalMacCycleEstimate``: one worker, one kernel position,
    ``conv_sizes[i]`` output positions in worklist entry ``i`` (retention saved)."""
    sizes = _counts("conv_sizes", conv_sizes)
    _check_hmac_types(float_activations, float_partials, use_1x1)
    out_chans = out_chans_per_group if float_partials else _ceil_div(out_chans_per_group, 2)
    dot = dense_dot_product_cycles(
        activations_vector_width, float_activations, float_partials, in_chans_per_group
    )
    cycles = 16 - hmac_worker_retention_savings(float_activations, use_1x1)
    for s in sizes:
        if s == 0:
            cycles += 7
            continue
        cycles += 13 if use_1x1 else 19
        if use_1x1 and out_chans == 1:
            cycles += 1 + s * (2 + dot)  # + preload of the weights pointer
        else:
            cycles += s * (7 + out_chans * dot)
    return cycles


def _check_hmac_args(
    num_conv_groups: int,
    num_in_groups: int,
    num_out_groups: int,
    kernel_size: int,
    in_chans_per_group: int,
    out_chans_per_group: int,
    num_worker_contexts: int,
    activations_vector_width: int,
    min_in: int,
) -> None:
    for name, value, lo in (
        ("num_conv_groups", num_conv_groups, 1),
        ("num_in_groups", num_in_groups, min_in),
        ("num_out_groups", num_out_groups, 1),
        ("kernel_size", kernel_size, 1),
        ("in_chans_per_group", in_chans_per_group, min_in),
        ("out_chans_per_group", out_chans_per_group, 1),
        ("num_worker_contexts", num_worker_contexts, 1),
        ("activations_vector_width", activations_vector_width, 1),
    ):
        _at_least(name, value, lo)


def conv_partial_hmac_cycles(
    worker_partitions: Sequence[Sequence[Sequence[int]]],
    *,
    num_conv_groups: int,
    num_in_groups: int,
    num_out_groups: int,
    kernel_size: int,
    in_chans_per_group: int,
    out_chans_per_group: int,
    num_worker_contexts: int,
    activations_vector_width: int,
    float_activations: bool,
    float_partials: bool,
    use_1x1: bool,
) -> int:
    """``getConvPartialHorizontalMacSupervisorCycleEstimate``.

    Parameters
    ----------
    worker_partitions
        ``worker_partitions[c][k]``: for worker context ``c`` and kernel position ``k``,
        the count of each worklist entry *as the estimator uses it*: ``ceil(numFieldElems
        / outStride)`` (see :func:`hmac_worklist_conv_sizes`), nominally the output
        positions (convolutions) of that entry. At most ``W`` contexts, ``kernel_size``
        lists each.
    num_conv_groups, num_in_groups, num_out_groups
        ``numConvGroupsM1 + 1``, ``numInGroups`` (>= 1 here), ``numOutGroupsM1 + 1``.
    kernel_size
        ``kernelSizeM1 + 1`` (1 for the 1x1 vertex).
    in_chans_per_group, out_chans_per_group
        Channels per group: the dot-product length, and outputs per position (halved,
        rounded up, for half partials: two per inner loop).
    num_worker_contexts
        ``W`` (6).
    activations_vector_width
        ``getVectorWidth(fpType)``: 2 float / 4 half.
    float_activations, float_partials
        FLOAT rather than HALF; float activations need float partials.
    use_1x1
        The ``ConvPartialHorizontalMac1x1`` specialisation (half activations, float
        partials only).

    Returns
    -------
    int
        Supervisor cycles, without output zeroing.
    """
    _check_hmac_args(
        num_conv_groups,
        num_in_groups,
        num_out_groups,
        kernel_size,
        in_chans_per_group,
        out_chans_per_group,
        num_worker_contexts,
        activations_vector_width,
        1,
    )
    _check_hmac_types(float_activations, float_partials, use_1x1)
    parts = _partitions_3d("worker_partitions", worker_partitions, kernel_size, num_worker_contexts)
    per_worker = [
        _HMAC_WORKER_NONLOOP
        + sum(
            hmac_worker_cycles(
                sizes,
                in_chans_per_group=in_chans_per_group,
                out_chans_per_group=out_chans_per_group,
                activations_vector_width=activations_vector_width,
                float_activations=float_activations,
                float_partials=float_partials,
                use_1x1=use_1x1,
            )
            for sizes in p
        )
        for p in parts
    ]
    hi, lo = _balance(per_worker, num_worker_contexts)
    inner = max(hi, lo)  # no tag cost here
    w = num_worker_contexts
    return (
        hmac_overhead(float_activations, use_1x1)
        + w * zero_partials_retention_savings(float_partials)
        # Poplibs passes floatPartials as the activations flag here (kept).
        + w * hmac_worker_retention_savings(float_partials, use_1x1)
        + num_conv_groups * (23 + num_in_groups * (15 + num_out_groups * (10 + inner)))
    )


def hmac_out_stride(transformed_out_stride: int, out_chans_per_group: int) -> int:
    """``outStride = transformedOutStride / outChansPerGroup + 1`` of the HMAC vertex
    estimators (``transformedOutStride`` = ``(outStrideX - 1) * outChansPerGroup``, halved
    for half partials; negative = flipped output, not modelled)."""
    _at_least("transformed_out_stride", transformed_out_stride, 0)
    _at_least("out_chans_per_group", out_chans_per_group, 1)
    return transformed_out_stride // out_chans_per_group + 1


def hmac_worklist_conv_sizes(
    worklist_field_elems: Sequence[Sequence[Sequence[int]]],
    transformed_out_stride: int,
    out_chans_per_group: int,
) -> list[list[list[int]]]:
    """``ceil(numFieldElems / outStride)`` per entry, as the HMAC vertex estimators turn
    worklist values into the counts :func:`conv_partial_hmac_cycles` takes."""
    stride = hmac_out_stride(transformed_out_stride, out_chans_per_group)
    out = []
    for c, per_k in enumerate(worklist_field_elems):
        if isinstance(per_k, numbers.Number):
            raise ValueError(
                f"worklist_field_elems[{c}]={per_k}: required one list per kernel position"
            )
        rows = []
        for k, entries in enumerate(per_k):
            if isinstance(entries, numbers.Number):
                raise ValueError(
                    f"worklist_field_elems[{c}][{k}]={entries}: required a list of counts"
                )
            counts = _counts(f"worklist_field_elems[{c}][{k}]", entries)
            rows.append([_ceil_div(n, stride) for n in counts])
        out.append(rows)
    return out


def conv_partial_hmac_vertex_cycles(
    worklist_field_elems: Sequence[Sequence[Sequence[int]]],
    *,
    zeros_info: int,
    transformed_out_stride: int,
    num_conv_groups: int,
    num_in_groups: int,
    num_out_groups: int,
    kernel_size: int,
    in_chans_per_group: int,
    out_chans_per_group: int,
    num_worker_contexts: int,
    activations_vector_width: int,
    float_activations: bool,
    float_partials: bool,
    use_1x1: bool = False,
    data_path_width: int = DATA_PATH_WIDTH_BITS,
) -> int:
    """The ``ConvPartialHorizontalMac`` (or, ``use_1x1``, ``…Mac1x1``) vertex estimator.

    Parameters
    ----------
    worklist_field_elems
        ``worklist_field_elems[c][k]``: the raw ``numFieldElems`` value (second of the
        three per entry; ``ceil(workerOutWidth / outStrideX)`` in ``ConvVertices.cpp``)
        of each worklist entry of worker ``c`` at kernel position ``k`` (worklist ``k *
        usedContexts + c``). The estimator divides each by ``outStride`` again
        (:func:`hmac_worklist_conv_sizes`). For ``use_1x1``: exactly ``W`` contexts,
        one kernel position, one entry each (the 1x1 worklist has one entry per worker).
    zeros_info
        The ``zerosInfo`` field: output elements to zero per output vector. Zeroing
        (:func:`zero_supervisor_cycles` over ``num_out_groups * num_conv_groups``
        vectors, ``ceil(zeros_info / W)`` per worker) is charged when it is non-zero,
        and always for the 1x1 vertex.
    transformed_out_stride
        The ``transformedOutStride`` field (>= 0; see :func:`hmac_out_stride`).
    data_path_width
        Bits (64), for the zeroing.

    Other arguments as :func:`conv_partial_hmac_cycles`; when ``num_in_groups *
    in_chans_per_group == 0`` the result is zeroing + :func:`hmac_overhead`.
    """
    _check_hmac_args(
        num_conv_groups,
        num_in_groups,
        num_out_groups,
        kernel_size,
        in_chans_per_group,
        out_chans_per_group,
        num_worker_contexts,
        activations_vector_width,
        0,
    )
    _check_hmac_types(float_activations, float_partials, use_1x1)
    _at_least("zeros_info", zeros_info, 0)
    zero = 0
    if zeros_info or use_1x1:
        zero = zero_supervisor_cycles(
            zero_worklist(zeros_info, num_worker_contexts),
            num_out_groups * num_conv_groups,
            data_path_width,
            num_worker_contexts,
            float_partials,
        )
    if num_in_groups * in_chans_per_group == 0:
        return zero + hmac_overhead(float_activations, use_1x1)
    if use_1x1:
        if kernel_size != 1:
            raise ValueError(f"kernel_size={kernel_size}: the 1x1 vertex requires 1")
        if len(worklist_field_elems) != num_worker_contexts or any(
            len(p) != 1 or len(p[0]) != 1 for p in worklist_field_elems
        ):
            shape = [[len(e) for e in p] for p in worklist_field_elems]
            raise ValueError(
                f"worklist_field_elems has shape {shape} (entries per context and kernel "
                f"position); the 1x1 vertex requires {num_worker_contexts} contexts x 1 kernel "
                f"position x 1 entry"
            )
    sizes = hmac_worklist_conv_sizes(
        worklist_field_elems, transformed_out_stride, out_chans_per_group
    )
    return zero + conv_partial_hmac_cycles(
        sizes,
        num_conv_groups=num_conv_groups,
        num_in_groups=num_in_groups,
        num_out_groups=num_out_groups,
        kernel_size=kernel_size,
        in_chans_per_group=in_chans_per_group,
        out_chans_per_group=out_chans_per_group,
        num_worker_contexts=num_worker_contexts,
        activations_vector_width=activations_vector_width,
        float_activations=float_activations,
        float_partials=float_partials,
        use_1x1=use_1x1,
    )


# ------------------------------------------------------------------------------- vmac
def vmac_dot_product_cycles(size: int, num_channels: int) -> int:
    """``getVerticalMacDotProductCycles``: ``3 + 3 (size - 1) (num_channels // 8)`` for 8
    or more channels, else ``3 + 2 (size - 1) (num_channels // 4)``.

    ``size - 1`` is clamped at 0: Poplibs computes it in unsigned 32-bit arithmetic and
    wraps for ``size == 0``, which the vertex estimator passes for one-element entries.
    """
    _at_least("size", size, 0)
    _at_least("num_channels", num_channels, 1)
    steps = max(size - 1, 0)
    if num_channels >= 8:
        return 3 + 3 * steps * (num_channels // 8)
    return 3 + 2 * steps * (num_channels // 4)


def vmac_worker_cycles(
    entries: Sequence[int], float_partials: bool, conv_groups_per_group: int
) -> int:
    """``getConvPartialVerticalMacCycleEstimate`` (half activations): one worker."""
    sizes = _counts("entries", entries)
    c = conv_groups_per_group
    if c >= 8 and not float_partials:
        per_8_chans = sum(7 + 15 + vmac_dot_product_cycles(s, 8) for s in sizes)
        return (13 if c == 8 else 25) + per_8_chans * (1 if c == 8 else 2)
    cycles = 19 if float_partials else 18
    for s in sizes:
        cycles += 7 + (5 if float_partials else 3) + vmac_dot_product_cycles(s, c)
    return cycles


def vmac_zero_cycles(num_out_elems: int, float_partials: bool) -> int:
    """``…VerticalMacSupervisorZeroInnerLoopCycleEstimate``: ``4 + ceil(E / (2|4))``."""
    _at_least("num_out_elems", num_out_elems, 0)
    return 4 + _ceil_div(num_out_elems, 2 if float_partials else 4)


def vmac_reduction_cycles(
    num_out_elems: int, num_worker_contexts: int, float_partials: bool, conv_groups_per_group: int
) -> int:
    """``…VerticalMacSupervisorReductionInnerLoopCycleEstimate``: reduce the ``W``
    workers' partials, ``ceil(E / W)`` elements per worker."""
    _at_least("num_out_elems", num_out_elems, 0)
    _at_least("num_worker_contexts", num_worker_contexts, 1)
    _at_least("conv_groups_per_group", conv_groups_per_group, 1)
    fp = int(bool(float_partials))
    per_worker = _ceil_div(num_out_elems, num_worker_contexts)
    per_rpt = 2 if fp else 1
    return (
        10
        - fp
        + (7 + 2 * fp + per_rpt * (num_worker_contexts - 1)) * per_worker // conv_groups_per_group
    )


def conv_partial_vmac_cycles(
    worker_partitions: Sequence[Sequence[int]],
    *,
    num_conv_groups: int,
    num_in_groups: int,
    num_out_elems: int,
    conv_groups_per_group: int,
    num_worker_contexts: int,
    float_activations: bool,
    float_partials: bool,
) -> int:
    """``getConvPartialVerticalMacSupervisorCycleEstimate``; also the whole
    ``ConvPartialVerticalMac`` vertex estimate (it adds nothing).

    Parameters
    ----------
    worker_partitions
        ``worker_partitions[c]``: for worker context ``c`` (worklist ``c``), the fourth
        value of each 4-value worklist entry as stored, i.e. the entry's element count
        minus 1 (``ConvVertices.cpp`` stores ``numElems - 1`` for a ``brnzdec`` loop);
        the vertex estimator passes these unchanged. At most ``W`` contexts.
    num_conv_groups, num_in_groups
        ``numConvGroupsM1 + 1`` and ``numInGroups`` (output groups and channels per
        group are 1 for this vertex).
    num_out_elems
        The ``zerosInfo`` field: partials elements per worker (zeroed, then reduced
        over the workers).
    conv_groups_per_group
        Template argument: 4, 8 or 16.
    num_worker_contexts
        ``W`` (6).
    float_activations
        Must be False: VMAC has half activations only (Poplibs asserts it).
    float_partials
        Partials FLOAT rather than HALF.
    """
    if float_activations:
        raise ValueError("float_activations=True: ConvPartialVerticalMac has half activations only")
    for name, value, lo in (
        ("num_conv_groups", num_conv_groups, 1),
        ("num_in_groups", num_in_groups, 0),
        ("num_out_elems", num_out_elems, 0),
        ("num_worker_contexts", num_worker_contexts, 1),
    ):
        _at_least(name, value, lo)
    if conv_groups_per_group not in VMAC_CONV_GROUPS_PER_GROUP:
        raise ValueError(
            f"conv_groups_per_group={conv_groups_per_group}: required one of "
            f"{VMAC_CONV_GROUPS_PER_GROUP}"
        )
    if len(worker_partitions) > num_worker_contexts:
        raise ValueError(
            f"worker_partitions has {len(worker_partitions)} worker contexts; required at "
            f"most num_worker_contexts={num_worker_contexts}"
        )
    per_worker = []
    for c, entries in enumerate(worker_partitions):
        if isinstance(entries, numbers.Number):
            raise ValueError(f"worker_partitions[{c}]={entries}: required a list of entry counts")
        counts = _counts(f"worker_partitions[{c}]", entries)
        per_worker.append(vmac_worker_cycles(counts, float_partials, conv_groups_per_group))
    hi, lo = _balance(per_worker, num_worker_contexts)
    inner = max(hi, lo)
    zero = vmac_zero_cycles(num_out_elems, float_partials)
    reduction = vmac_reduction_cycles(
        num_out_elems, num_worker_contexts, float_partials, conv_groups_per_group
    )
    outer = 32 + num_in_groups * (24 + inner)
    return (
        _VMAC_SUPERVISOR_OVERHEAD
        + _VMAC_WORKER_CORE_INIT
        + _VMAC_WORKER_STATE_INIT
        + int(bool(float_partials))
        + (zero + outer + reduction) * num_conv_groups
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
    "nx1_worker_cycles",
    "vmac_dot_product_cycles",
    "vmac_reduction_cycles",
    "vmac_worker_cycles",
    "vmac_zero_cycles",
    "zero_partials_retention_savings",
    "zero_supervisor_cycles",
    "zero_worklist",
]
