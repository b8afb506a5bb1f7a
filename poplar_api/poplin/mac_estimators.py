"""Poplibs cycle estimators of the MAC convolution partial-sum vertices (HMAC and VMAC),
as pure functions; imported and re-exported by :mod:`poplar_api.poplin.conv_estimators`,
whose docstring gives the sources, the target constants and the source quirks kept.

Formulas (``W`` worker contexts; ``fa``/``fp`` = float activations/partials as 0/1;
``max_c`` over the worker contexts given; all divisions floor)::

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
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Sequence

from poplar_api.poplin.conv_estimator_common import (
    DATA_PATH_WIDTH_BITS,
    VMAC_CONV_GROUPS_PER_GROUP,
    _at_least,
    _balance,
    _ceil_div,
    _counts,
    _partitions_3d,
    zero_partials_retention_savings,
    zero_supervisor_cycles,
    zero_worklist,
)

__all__ = [
    "conv_partial_hmac_cycles",
    "conv_partial_hmac_vertex_cycles",
    "conv_partial_vmac_cycles",
    "dense_dot_product_cycles",
    "hmac_out_stride",
    "hmac_overhead",
    "hmac_worker_cycles",
    "hmac_worker_retention_savings",
    "hmac_worklist_conv_sizes",
    "vmac_dot_product_cycles",
    "vmac_reduction_cycles",
    "vmac_worker_cycles",
    "vmac_zero_cycles",
]

_HMAC_WORKER_NONLOOP = 16
_HMAC_OVERHEAD = {True: 58, False: 65}  # float, half activations
_HMAC_1X1_OVERHEAD_SAVING = 10
# vmac
_VMAC_SUPERVISOR_OVERHEAD = 61
_VMAC_WORKER_CORE_INIT = 14
_VMAC_WORKER_STATE_INIT = 25  # + floatPartials


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
    # kernel positions often share their entry counts: cost each distinct list once
    cycles_of: dict[tuple[int, ...], int] = {}

    def worker_cycles(sizes: list[int]) -> int:
        key = tuple(sizes)
        cycles = cycles_of.get(key)
        if cycles is None:
            cycles = cycles_of[key] = hmac_worker_cycles(
                sizes,
                in_chans_per_group=in_chans_per_group,
                out_chans_per_group=out_chans_per_group,
                activations_vector_width=activations_vector_width,
                float_activations=float_activations,
                float_partials=float_partials,
                use_1x1=use_1x1,
            )
        return cycles

    # a worker's kernel positions counted by list object (the planner's equal lists are
    # one object): each distinct object looked up once, not a tuple made per position
    per_worker = []
    for p in parts:
        lists = {id(sizes): sizes for sizes in p}
        per_worker.append(
            _HMAC_WORKER_NONLOOP
            + sum(worker_cycles(lists[i]) * n for i, n in Counter(map(id, p)).items())
        )
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
