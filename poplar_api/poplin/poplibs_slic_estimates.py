"""Poplibs' planner estimate of the SLIC vertices' partial sums.

``addPartialCalcCycleEstimate``'s SLIC branch (graphcore/poplibs ``7eac0f26``,
``lib/poplin/ConvModel.cpp``) prices a tile's partial sums for HALF inputs
(``PerformanceEstimation.hpp``):

* the tile has one input-channel and one output-channel group (else no plan);
* the kernel's inner (width) dimension is taken in 1 x 4 blocks: ``numWeightBlocks =
  ceil(kernel width / 4)`` times the other kernel dimensions' positions (the sub-kernels);
* the tile's outputs are split over the workers by ``partitionConvPartialByWorker``
  (:func:`~.poplibs_amp_estimates.partition_by_worker`), each worker's list of the
  output elements of each row it touches;
* ``getConvPartialSlicSupervisorInnerLoopCycleEstimateHalfFloat`` of that worklist, once
  zeroing the partials implicitly (the first sub-kernel) and once not
  (:func:`slic_inner_cycles`);
* ``getConvPartialSlicSupervisorWeightLoadCycleEstimate`` (:func:`slic_weight_load_cycles`)
  and ``getConvPartialSlicSupervisorOuterLoopCycleEstimateHalfFloat`` over the tile's conv
  group groups and sub-kernels (:func:`slic_partial_cycles`).

Restated for an output stride of 1 and at most 4 conv groups a group (the HALF candidates
of ``getConvVertexSLICCandidates``). Derived from the source, not a port.
"""

from __future__ import annotations

from collections.abc import Sequence

from poplar_api.poplin.poplibs_amp_estimates import partition_by_worker

__all__ = ["slic_inner_cycles", "slic_partial_cycles", "slic_weight_load_cycles"]

#: The SLIC window width of the 1 x 4 vertices (``method.windowWidth``).
WINDOW = 4


def slic_inner_cycles(
    worklists: Sequence[Sequence[int]],
    workers: int,
    chains: int,
    groups_per_group: int,
    float_partials: bool,
    implicit_zeroing: bool,
) -> int:
    """``getConvPartialSlicSupervisorInnerLoopCycleEstimateHalfFloat`` with an output
    stride of 1: per worker a preamble of 17 cycles, and per row of ``n`` elements 10 (9) cycles
    and one more when zeroing, plus the row's cycles (``15 + n - 5`` from 5 elements, 6
    for the 2-chain HALF-partials vertex, which adds 3 when not zeroing; shorter rows by
    the function's cases; one less with FLOAT partials), 3 more with FLOAT partials, the
    row's cycles twice with 2 chains (two passes over the inputs); the slowest worker
    times the workers, plus the 2-chain HALF-partials vertex's merge copy when zeroing."""
    if groups_per_group > 4:
        raise ValueError(
            f"slic_inner_cycles: {groups_per_group} conv groups a group: only up to 4 are "
            "restated (the HALF candidates with FLOAT partials)"
        )
    passes = 1 if chains == 4 else 2
    half8 = chains == 2 and not float_partials
    threshold = 6 if half8 else 5
    preamble = 2 + (2 if half8 else 3) + 1 + 2 + 4 + 2 + 2 + 1 + (1 if half8 else 0)
    slowest, elements = 0, 0
    for worker in worklists:
        cycles = preamble
        for n in worker:
            cycles += (9 if half8 else 10) + (1 if implicit_zeroing else 0)
            if n < threshold:
                if implicit_zeroing:
                    row = 10 + (n if n > 1 else 0) + 3
                elif n == 1:
                    row = 7 + 6
                else:
                    row = 7 + 1 + (n - 1) + 2 + (4 - n) + 2 + (3 - (4 - n)) + 3
            else:
                row = 15 + (n - 5) + (3 if half8 and not implicit_zeroing else 0)
            if float_partials:
                row -= 1
            cycles += (3 if float_partials else 0) + row * passes
            elements += n
        cycles += 2 if half8 else 0
        slowest = max(slowest, cycles)
    copy = 2 + 2 * elements if half8 and implicit_zeroing else 0
    return slowest * workers + copy


def slic_weight_load_cycles(groups_per_group: int, chans_per_group: int, workers: int) -> int:
    """``getConvPartialSlicSupervisorWeightLoadCycleEstimate`` for HALF inputs: 18 cycles
    with 4 channels a group, else the workers' rearrangement (12 cycles each for 2 groups,
    10 for 4, one more above 4) between 21 cycles of supervisor code; plus 16 loads."""
    if chans_per_group == 4:
        cycles = 6 + 6 + 6
    else:
        per_worker = (12 if groups_per_group == 2 else 10) + (1 if groups_per_group > 4 else 0)
        cycles = 9 + 6 + per_worker * workers + 6
    return cycles + 16


def slic_partial_cycles(
    batch: int,
    field_shape: Sequence[int],
    kernel_shape: Sequence[int],
    conv_group_groups: int,
    groups_per_group: int,
    chans_per_group: int,
    workers: int,
    chains: int = 2,
    float_partials: bool = True,
) -> int:
    """The planner's cycles of a tile's SLIC partial sums (module docstring): the tile's
    ``batch`` and output ``field_shape``, its ``kernel_shape`` (the width innermost),
    ``conv_group_groups`` groups of ``groups_per_group`` conv groups of
    ``chans_per_group`` input and output channels, on ``chains`` conv-unit chains (2 with
    FLOAT partials)."""
    if len(kernel_shape) < 2:
        raise ValueError(f"slic_partial_cycles: kernel_shape {list(kernel_shape)}: at least "
                         "2 dimensions needed (the width innermost)")  # fmt: skip
    sub_kernels = -(-int(kernel_shape[-1]) // WINDOW)
    for k in kernel_shape[:-1]:
        sub_kernels *= int(k)
    lists = partition_by_worker(batch, field_shape, workers)
    inner = slic_inner_cycles(lists, workers, chains, groups_per_group, float_partials, False)
    zeroing = slic_inner_cycles(lists, workers, chains, groups_per_group, float_partials, True)
    loads = slic_weight_load_cycles(groups_per_group, chans_per_group, workers)
    half8 = chains == 2 and not float_partials

    def brnzdec(n: int) -> int:
        return 6 * (n - 1) + 1

    sub_body = loads + (0 if half8 else 3) + 2 + (0 if half8 else 1) + 6 + 1 + 6 + 1
    return (
        (25 if half8 else 28)
        + (12 if half8 else 15) * conv_group_groups + brnzdec(conv_group_groups)
        + sub_body * sub_kernels + brnzdec(sub_kernels)
        + conv_group_groups * zeroing + conv_group_groups * (sub_kernels - 1) * inner
    )  # fmt: skip
