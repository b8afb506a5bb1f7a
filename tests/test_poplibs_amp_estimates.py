"""The planner's ``ConvPartialnx1`` estimate and AMP kernel padding against Poplibs' source.

Each expected value is worked out here from graphcore/poplibs 7eac0f26 as written there
(``lib/poplin/PerformanceEstimation.hpp``: ``estimateZeroSupervisorCycles``,
``getZeroSupervisorVertexCycleEstimate``, ``getConvPartialnx1InnerLoopCycleEstimate``,
``getConvPartialnx1SupervisorInnerLoopCycleEstimateHalfFloat``,
``getConvPartialnx1SupervisorKernelLoopCycleEstimateHalfFloat``,
``getConvPartialnx1WorkerCycles``, ``getConvPartialnx1SupervisorOuterLoopCycleEstimateHalfFloat``;
``lib/poplin/ConvUtilInternal.cpp``: ``partitionConvPartialByWorker``;
``lib/poplin/ConvModel.cpp``: ``padKernelSpatialDim``, ``applyPadding``), not with the
module's code.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from poplar_api.poplin.poplibs_amp_estimates import (
    amp_padding_estimate,
    nx1_partial_cycles,
    partition_by_worker,
)


def brute_partition(batch, shape, workers, dilation, stride):
    """Every active output element as its row, in order, cut into ``W`` ranges."""
    ostride = [d // math.gcd(d, s) for d, s in zip(dilation, stride, strict=True)]
    rows = []
    outer = [range(0, n, o) for n, o in zip(shape[:-1], ostride[:-1], strict=True)]
    for b in range(batch):
        for r, idx in enumerate(np.ndindex(*[len(x) for x in outer]) if outer else [()]):
            for _x in range(0, shape[-1], ostride[-1]):
                rows.append((b, r, idx))
    n = len(rows)
    out = []
    for i in range(workers):
        part = rows[i * n // workers : (i + 1) * n // workers]
        counts: dict = {}
        for row in part:
            counts[row] = counts.get(row, 0) + 1
        out.append(list(counts.values()))
    return out


def poplibs_nx1(batch, field, kernel, fh, cg, ig, og, ocpg, units, wbytes, coeff, w, fa, fp,
                dilation=None, stride=None):  # fmt: skip
    """Poplibs' planner estimate, function by function."""
    dilation = dilation or [1] * len(field)
    stride = stride or [1] * len(field)
    # estimateZeroSupervisorCycles: isFloat = true, vector width 64 / 32 = 2
    per = -(-(math.prod(field) * batch * ocpg) // w)
    zero = (-(-per // 2) + 14 - 9) * w * og * cg
    # getConvPartialnx1WorkerCycles
    core = 8 if fa else 4
    extra = 1 if ((not fa and not fp and units == 16) or (not fa and fp and units == 8)) else 0

    def worker(entries):
        c = 17 + (0 if fp else 1)
        for n in entries:
            c += 3
            if n == 1:
                c += 33 if fa else 29
            elif n == 2:
                c += 44 if fa else 33 + extra
            else:
                c += (45 if fa else 34) + (n - 3) * core
            c -= 9
        return c

    parts = brute_partition(batch, field, w, dilation, stride)
    cyc = [w * worker(p) for p in parts]
    passes = ocpg // units
    kernel_loop = max(max(cyc), min(cyc) + 9) * passes
    outer = -(-kernel[0] // fh)
    inner_elems = math.prod(kernel[1:])
    kernel_loop *= outer * inner_elems
    loads = (units * wbytes) // (coeff // 2 if fh == 4 and coeff > 8 else coeff)
    innermost = loads + {4: 60, 2: 46, 1: 15}.get(fh, 20 * fh) + 3
    inner = outer * (14 + inner_elems * (17 - 5 + passes * innermost)) + kernel_loop
    sup = (109 + w * 9 + w * (9 if fp else 10) + cg * (og * 17 + (og - 1) * 6 + 1)
           + (cg - 1) * 6 + 1 + cg * (16 + ig * (14 + og * (14 + inner))))  # fmt: skip
    return sup + zero


@pytest.mark.parametrize(
    ("batch", "shape", "dilation", "stride"),
    [
        (1, [1, 44], [1, 1], [1, 1]),
        (2, [3, 5], [1, 1], [1, 1]),
        (1, [7, 9], [1, 2], [1, 1]),
        (3, [2, 3], [2, 1], [1, 1]),
        (1, [1, 4], [1, 1], [1, 1]),
    ],
)
def test_partition_by_worker_cuts_the_active_outputs_as_poplibs(batch, shape, dilation, stride):
    assert partition_by_worker(batch, shape, 6, dilation, stride) == brute_partition(
        batch, shape, 6, dilation, stride
    )


CASES = [
    # the joint weight update of a 16 x 1000 x 1000 layer on Mk2: 8 input and 16 HALF
    # partial channels per group on 16 units, a 1-wide kernel of height 2 padding
    dict(batch=1, field=[1, 44], kernel=[1, 1], fh=2, cg=1, ig=1, og=1, ocpg=16, units=16,
         fa=False, fp=False),
    # a 3x3 convolution with 16 HALF input channels a group (height 1), FLOAT partials
    dict(batch=2, field=[3, 5], kernel=[3, 3], fh=1, cg=1, ig=4, og=2, ocpg=8, units=8,
         fa=False, fp=True),
    # 4 input channels a group: height 4, ld64 only
    dict(batch=1, field=[14, 14], kernel=[3, 3], fh=4, cg=2, ig=1, og=3, ocpg=16, units=16,
         fa=False, fp=False),
    # FLOAT activations
    dict(batch=1, field=[5, 7], kernel=[5, 1], fh=2, cg=1, ig=2, og=1, ocpg=8, units=8,
         fa=True, fp=True),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_nx1_estimate_is_poplibs_planner_formula(case):
    expected = poplibs_nx1(case["batch"], case["field"], case["kernel"], case["fh"], case["cg"],
                           case["ig"], case["og"], case["ocpg"], case["units"], 32, 8, 6,
                           case["fa"], case["fp"])  # fmt: skip
    got = nx1_partial_cycles(
        batch=case["batch"], field_shape=case["field"], kernel_shape=case["kernel"],
        filter_height=case["fh"], conv_groups=case["cg"], in_groups=case["ig"],
        out_groups=case["og"], out_chans_per_group=case["ocpg"], num_conv_units=case["units"],
        weight_bytes_per_conv_unit=32, coeff_load_bytes_per_cycle=8, workers=6,
        float_activations=case["fa"], float_partials=case["fp"],
    )  # fmt: skip
    assert got == expected


def test_nx1_estimate_of_the_joint_weight_update_tile_by_hand():
    # the first case written out: zero (ceil(ceil(44 * 16 / 6) / 2) + 5) 6 = 384;
    # workers 7, 7, 8, 7, 7, 8 positions: 18 + 3 + 34 + 4 (n - 3) - 9 = 62 / 66 cycles,
    # max(6 x 66, 6 x 62 + 9) = 396; inner 14 + 12 + (16 x 32 / 8 + 46 + 3) + 396 = 535;
    # outer 109 + 54 + 60 + 18 + 1 + 16 + 14 + 14 + 535 = 821
    got = nx1_partial_cycles(
        batch=1, field_shape=[1, 44], kernel_shape=[1, 1], filter_height=2, conv_groups=1,
        in_groups=1, out_groups=1, out_chans_per_group=16, num_conv_units=16,
        weight_bytes_per_conv_unit=32, coeff_load_bytes_per_cycle=8, workers=6,
        float_activations=False, float_partials=False,
    )  # fmt: skip
    assert got == 384 + 821


def test_amp_padding_of_a_one_wide_kernel_of_height_two():
    # kernel rows (2 - max(1 mod 2, 1 mod 2)) mod 2 = 1: kernel zeros 1 x 16 x 16 = 256,
    # input zeros ((1 + 1) x 44 - 44) x 16 = 704, HALF, 4 bytes a cycle: 128 + 352
    cycles, temp = amp_padding_estimate(2, 1, 1, 1, [1, 1], [1, 44], 1, 16, 16, 1, 2, 4.0)
    assert (int(cycles), int(temp)) == (480, (256 + 704) * 2)


def test_amp_padding_of_a_split_three_row_kernel():
    # h = 3 split 2 ways: floor 1, ceil 2, max(1 mod 2, 0) = 1 row; tile kernel 2 x 3
    # becomes 3 x 3 (3 more positions), the field 5 x 6 gets 2 x 1 rows (dilation 2)
    cycles, temp = amp_padding_estimate(
        2, 3, np.array([2]), 2, [np.array([2]), 3], [5, 6], 1, 8, 4, 1, 2, 4.0, 2
    )
    kernel_zeros, input_zeros = 3 * 8 * 4, (7 * 6 - 5 * 6) * 8
    assert int(cycles[0]) == -(-kernel_zeros * 2 // 4) + -(-input_zeros * 2 // 8)
    assert int(temp[0]) == (kernel_zeros + input_zeros) * 2
    assert amp_padding_estimate(1, 3, 1, 1, [3, 3], [5, 6], 1, 8, 4, 1, 2, 4.0) == (0, 0)


def test_bad_shapes_are_refused_with_what_was_found():
    with pytest.raises(ValueError, match=r"kernel_shape \[3\] and field_shape \[3, 5\]"):
        nx1_partial_cycles(
            batch=1, field_shape=[3, 5], kernel_shape=[3], filter_height=1, conv_groups=1,
            in_groups=1, out_groups=1, out_chans_per_group=8, num_conv_units=8,
            weight_bytes_per_conv_unit=32, coeff_load_bytes_per_cycle=8, workers=6,
            float_activations=False, float_partials=True,
        )  # fmt: skip
    with pytest.raises(ValueError, match="stride"):
        partition_by_worker(1, [3, 5], 6, [1, 1], [1])


def test_count_lists_skip_the_entry_checks_not_the_shape() -> None:
    """Worklists handed over as ``CountLists`` (the planner's, valid by construction) cost
    what the same plain lists cost, and one with a kernel position missing is refused as
    a plain one is."""
    from poplar_api.poplin.conv_estimator_common import CountLists
    from poplar_api.poplin.conv_estimators import conv_partial_nx1_cycles

    kw = dict(num_conv_groups=1, num_out_groups=2, num_in_groups=3, kernel_inner_elems=3,
              kernel_outer_elems=1, filter_height=1, in_chans_per_group=16,
              out_chans_per_group=8, weight_bytes_per_conv_unit=32, num_conv_units=8,
              coeff_load_bytes_per_cycle=8, num_worker_contexts=6, float_activations=False,
              float_partials=True)  # fmt: skip
    plain = [[[5, 7], [5, 7], [4]] for _ in range(6)]
    assert conv_partial_nx1_cycles(CountLists(plain), **kw) == conv_partial_nx1_cycles(plain, **kw)
    short = [row[:2] for row in plain]
    for lists in (short, CountLists(short)):
        with pytest.raises(ValueError, match=r"\[0\] has 2 lists; required one list"):
            conv_partial_nx1_cycles(lists, **kw)
