"""Poplibs convolution partial-sum vertex estimators (poplar_api.poplin.conv_estimators).

Every expected value is worked by hand from the Poplibs source
(graphcore/poplibs@7eac0f26, lib/poplin/PerformanceEstimation.hpp and
lib/poplin/poplinCycleEstimators.cpp) and written as arithmetic with the terms named;
none is obtained by calling the module under test.
"""

from __future__ import annotations

import pytest

from poplar_api.poplin.conv_estimators import (
    POPLIBS_COMMIT,
    conv_partial_hmac_cycles,
    conv_partial_hmac_vertex_cycles,
    conv_partial_nx1_cycles,
    conv_partial_nx1_vertex_cycles,
    conv_partial_vmac_cycles,
    dense_dot_product_cycles,
    zero_supervisor_cycles,
)

W = 6  # worker contexts


def test_commit() -> None:
    assert POPLIBS_COMMIT == "7eac0f266ced5b064b3284a3cd90d491745b387c"


# ----------------------------------------------------------------------------- zeroing
# worker cost = ceil(n / vectorWidth) + (14 float | 15 half) - retention (9 | 10) = ... + 5
ZERO_CASES = [
    # float partials, vector width 64/32 = 2, balanced: ceil(10/2) = 5
    ([10] * 6, 2, True, (5 + 14 - 9) * W * 2),
    # half partials, vector width 64/16 = 4, slowest ceil(7/4) = 2
    ([7, 7, 7, 7, 7, 6], 3, False, (2 + 15 - 10) * W * 3),
    # float, unbalanced, 4 contexts given: slowest ceil(9/2) = 5
    ([1, 0, 9, 3], 1, True, (5 + 14 - 9) * W * 1),
    # nothing to zero still pays the worker overhead
    ([0] * 6, 1, False, (0 + 15 - 10) * W),
    # no worker list: max over nothing = 0
    ([], 4, True, 0),
]


@pytest.mark.parametrize(("elems", "groups", "fp", "expected"), ZERO_CASES)
def test_zero_supervisor(elems: list[int], groups: int, fp: bool, expected: int) -> None:
    assert zero_supervisor_cycles(elems, groups, 64, W, fp) == expected


# --------------------------------------------------------------------------------- nx1
# Worker (getConvPartialnx1WorkerCycles): 17 + (0 float | 1 half partials), then per
# entry 3 + t(n) - 9 (retention). t: n=0 17; n=1 33 f | 29 h; n=2 44 f | 33 (+1 for
# half->half 16 units or half->float 8 units); n>=3 45 + 8(n-3) f | 34 + 4(n-3) h.
# Kernel loop per position: passes * max(maxW, minW + 9), W-scaled, minW = 0 when
# fewer than W contexts. Inner = Kouter (14 + Kinner (12 + passes innermost)) + kernel,
# innermost = loads + {1: 15, 2: 46, 4: 60, else 20 fh} + 3.
# Outer = 109 + 9 W + W (9 f | 10 h partials) + CG (17 OG + 6 (OG-1) + 1) + 6 (CG-1) + 1
#         + CG (16 + IG (14 + OG (14 + inner))).

# N1: half->half, 16 units, kernel 2x1 (inner 2, outer 1), fh 1, 16 out chans -> 1 pass,
# loads 16*32//16 = 32, all 6 workers [10] at both positions.
_N1_WORKER = 17 + 1 + (3 + 34 + 4 * 7 - 9)  # = 74
_N1_KERNEL = 2 * 1 * max(W * _N1_WORKER, W * _N1_WORKER + 9)  # tag wins when balanced
_N1_INNER = 1 * (14 + 2 * (12 + 1 * (32 + 15 + 3))) + _N1_KERNEL
N1 = dict(
    parts=[[[10], [10]] for _ in range(W)],
    kw=dict(
        num_conv_groups=1, num_out_groups=1, num_in_groups=1, kernel_inner_elems=2,
        kernel_outer_elems=1, filter_height=1, in_chans_per_group=16,
        out_chans_per_group=16, weight_bytes_per_conv_unit=32, num_conv_units=16,
        coeff_load_bytes_per_cycle=16, num_worker_contexts=W, float_activations=False,
        float_partials=False,
    ),
    expected=109 + 9 * W + 10 * W + 1 * (17 + 0 + 1) + 0 + 1
    + 1 * (16 + 1 * (14 + 1 * (14 + _N1_INNER))),
)  # fmt: skip

# N2: float->float, 8 units, kernel 1x3 (inner 1, outer 3), fh 4 (ld64: coeff 16 -> 8,
# loads 8*32//8 = 32), 16 out chans -> 2 passes, CG 2, OG 1, IG 2; 4 contexts (< W, so
# no tag: minW = 0), unbalanced, several entries per worker.
# float entry costs 3 + t - 9: n=0 11, n=1 27, n=2 38, n=3 39, n=4 47, n=5 55, n=6 63.
_N2_K0 = max(17 + 55 + 27, 17 + 38, 17, 17 + 39)  # c0 [5, 1], c1 [2], c2 [], c3 [3]
_N2_K1 = max(17 + 55, 17 + 11, 17 + 47, 17 + 39)  # c0 [5], c1 [0], c2 [4], c3 [3]
_N2_K2 = max(17, 17 + 39, 17 + 63, 17 + 39)  # c0 [], c1 [3], c2 [6], c3 [3]
_N2_KERNEL = 2 * (W * _N2_K0 + W * _N2_K1 + W * _N2_K2)
_N2_INNER = 3 * (14 + 1 * (12 + 2 * (32 + 60 + 3))) + _N2_KERNEL
N2 = dict(
    parts=[
        [[5, 1], [5], []],
        [[2], [0], [3]],
        [[], [4], [6]],
        [[3], [3], [3]],
    ],
    kw=dict(
        num_conv_groups=2, num_out_groups=1, num_in_groups=2, kernel_inner_elems=1,
        kernel_outer_elems=3, filter_height=4, in_chans_per_group=8,
        out_chans_per_group=16, weight_bytes_per_conv_unit=32, num_conv_units=8,
        coeff_load_bytes_per_cycle=16, num_worker_contexts=W, float_activations=True,
        float_partials=True,
    ),
    expected=109 + 9 * W + 9 * W + 2 * (17 * 1 + 0 + 1) + 6 * 1 + 1
    + 2 * (16 + 2 * (14 + 1 * (14 + _N2_INNER))),
)  # fmt: skip
assert _N2_K0 == 99 and _N2_K1 == 72 and _N2_K2 == 80  # the hand sums above

# N3: half->float, 8 units (extra stride: n=2 costs 34), kernel 2x2, fh 2, no 128-bit
# loads (coeff 8: loads 8*32//8 = 32), 16 out chans / 8 units = 2 passes, CG 1, OG 2.
# half entry costs 3 + t - 9: n=0 11, n=1 23, n=2 28, n=4 32, n=8 48, n=12 64; base 17.
_N3_K = [
    max(W * (17 + 48), W * (17 + 28) + 9),  # k0: five [8], one [2]
    max(W * (17 + 32), W * (17 + 32) + 9),  # k1: all [4] -> tag wins
    max(W * (17 + 64), W * 17 + 9),  # k2: c0 [12], others []
    max(W * (17 + 23 + 11), W * (17 + 23 + 11) + 9),  # k3: all [1, 0]
]
_N3_INNER = 2 * (14 + 2 * (12 + 2 * (32 + 46 + 3))) + 2 * sum(_N3_K)
N3 = dict(
    parts=[[[8], [4], [12], [1, 0]]]  # c0
    + [[[8], [4], [], [1, 0]]] * 4  # c1..c4
    + [[[2], [4], [], [1, 0]]],  # c5
    kw=dict(
        num_conv_groups=1, num_out_groups=2, num_in_groups=1, kernel_inner_elems=2,
        kernel_outer_elems=2, filter_height=2, in_chans_per_group=16,
        out_chans_per_group=16, weight_bytes_per_conv_unit=32, num_conv_units=8,
        coeff_load_bytes_per_cycle=8, num_worker_contexts=W, float_activations=False,
        float_partials=True,
    ),
    expected=109 + 9 * W + 9 * W + 1 * (2 * 17 + 1 * 6 + 1) + 0 + 1
    + 1 * (16 + 1 * (14 + 2 * (14 + _N3_INNER))),
)  # fmt: skip

# N4: half->half, 8 units (no extra stride: n=2 costs 33), kernel 1x1, fh 3 (default
# 20 * 3), IG 3; five workers [2], one [3]: 18 + 3 + 33 - 9 = 45, 18 + 3 + 34 - 9 = 46.
_N4_INNER = 1 * (14 + 1 * (12 + 1 * (8 * 32 // 16 + 20 * 3 + 3))) + max(W * 46, W * 45 + 9)
N4 = dict(
    parts=[[[2]]] * 5 + [[[3]]],
    kw=dict(
        num_conv_groups=1, num_out_groups=1, num_in_groups=3, kernel_inner_elems=1,
        kernel_outer_elems=1, filter_height=3, in_chans_per_group=16,
        out_chans_per_group=8, weight_bytes_per_conv_unit=32, num_conv_units=8,
        coeff_load_bytes_per_cycle=16, num_worker_contexts=W, float_activations=False,
        float_partials=False,
    ),
    expected=109 + 9 * W + 10 * W + 1 * (17 + 0 + 1) + 0 + 1
    + 1 * (16 + 3 * (14 + 1 * (14 + _N4_INNER))),
)  # fmt: skip

NX1_CASES = {"N1": N1, "N2": N2, "N3": N3, "N4": N4}


def test_nx1_hand_totals() -> None:
    # The closed forms above, summed by hand once, as a check on the expressions.
    assert N1["expected"] == 1330
    assert N2["expected"] == 15044
    assert N3["expected"] == 7741
    assert N4["expected"] == 1494
    assert N3["parts"][0] == [[8], [4], [12], [1, 0]]
    assert N3["parts"][1] == [[8], [4], [], [1, 0]]


@pytest.mark.parametrize("name", sorted(NX1_CASES))
def test_nx1_supervisor(name: str) -> None:
    case = NX1_CASES[name]
    assert conv_partial_nx1_cycles(case["parts"], **case["kw"]) == case["expected"]


# Vertex: zeroing of OG*CG vectors, ceil(zerosInfo / W) elements per worker, always.
NX1_VERTEX_CASES = [
    # N1 + zerosInfo 100: ceil(100/6) = 17 half -> ceil(17/4) = 5, + 5; 1 group
    ("N1", 100, (5 + 5) * W * 1 + 1330),
    # N2 + zerosInfo 37: ceil(37/6) = 7 float -> ceil(7/2) = 4, + 5; OG*CG = 2 groups
    ("N2", 37, (4 + 5) * W * 2 + 15044),
    # N4 + zerosInfo 0: the nx1 vertex zeroes even then: (0 + 5) per worker
    ("N4", 0, (0 + 5) * W * 1 + 1494),
]


@pytest.mark.parametrize(("name", "zeros", "expected"), NX1_VERTEX_CASES)
def test_nx1_vertex(name: str, zeros: int, expected: int) -> None:
    case = NX1_CASES[name]
    assert conv_partial_nx1_vertex_cycles(case["parts"], zeros, **case["kw"]) == expected


@pytest.mark.parametrize("field", ["num_in_groups", "in_chans_per_group"])
def test_nx1_vertex_no_input_channels(field: str) -> None:
    kw = dict(N3["kw"], **{field: 0})  # half->float, OG 2, CG 1
    # zerosInfo 48: ceil(48/6) = 8 float partials -> ceil(8/2) = 4, + 5; 2 groups;
    # then convNx1Overhead() = 109 and nothing else
    assert conv_partial_nx1_vertex_cycles([], 48, **kw) == (4 + 5) * W * 2 + 109


# -------------------------------------------------------------------------------- hmac
# getDenseDotProductCycles: widest w = 2^i <= vectorWidth dividing size; acts per 64
# bits a = 2 f | 4 h; m = 2 outputs for half->half else 1;
# D = 3m + hh + 3 + 1 + (m if w < a) + (size/w) (2 if w < a else 1) - (1 if half acts)
DOT_CASES = [
    (4, False, True, 16, 3 + 0 + 3 + 1 + 0 + 4 * 1 - 1),  # w 4
    (4, False, True, 6, 3 + 0 + 3 + 1 + 1 + 3 * 2 - 1),  # w 2 < 4
    (4, False, False, 8, 6 + 1 + 3 + 1 + 0 + 2 * 1 - 1),  # half->half, w 4
    (4, False, False, 3, 6 + 1 + 3 + 1 + 2 + 3 * 2 - 1),  # half->half, w 1
    (2, True, True, 8, 3 + 0 + 3 + 1 + 0 + 4 * 1 - 0),  # float, w 2
    (2, True, True, 5, 3 + 0 + 3 + 1 + 1 + 5 * 2 - 0),  # float, w 1 < 2
]


@pytest.mark.parametrize(("vw", "fa", "fp", "size", "expected"), DOT_CASES)
def test_dense_dot_product(vw: int, fa: bool, fp: bool, size: int, expected: int) -> None:
    assert dense_dot_product_cycles(vw, fa, fp, size) == expected


# Worker per kernel position: 16 - R + per entry (7 if s == 0 else (13 1x1 | 19)
#   + (1 + s (2 + D) if 1x1 and oc' == 1 else s (7 + oc' D))),
#   R = 15 (1x1) | 0 float acts | 6 half acts; oc' = ceil(oc / 2) for half partials.
# Worker total = 16 + sum_k; inner = max W * total (no tag).
# Outer = (58 f | 65 h) - 10 (1x1) + W (9 f | 10 h partials) + W R(partials flag!)
#         + CG (23 + IG (15 + OG (10 + inner))).

# H1: float->float, vw 2, ic 8 (D 11), oc 4, kernel 2, all 6 workers [5, 3] at both k.
_H1_K = 16 - 0 + (19 + 5 * (7 + 4 * 11)) + (19 + 3 * (7 + 4 * 11))
H1 = dict(
    parts=[[[5, 3], [5, 3]] for _ in range(W)],
    kw=dict(
        num_conv_groups=1, num_in_groups=2, num_out_groups=1, kernel_size=2,
        in_chans_per_group=8, out_chans_per_group=4, num_worker_contexts=W,
        activations_vector_width=2, float_activations=True, float_partials=True,
        use_1x1=False,
    ),
    expected=58 + W * 9 + W * 0 + 1 * (23 + 2 * (15 + 1 * (10 + W * (16 + 2 * _H1_K)))),
)  # fmt: skip

# H2: half->half, vw 4, ic 3 (D 18), oc 5 -> oc' 3, kernel 3, 3 contexts, unbalanced,
# CG 2, OG 2. Per k: 10 (16 - 6) + entries, s > 0: 19 + 61 s, s == 0: 7.
_H2_C0 = 16 + (10 + 19 + 2 * 61) + (10 + 7) + 10  # [2], [0], []
_H2_C1 = 16 + (10 + 2 * (19 + 61)) + (10 + 19 + 61) + (10 + 19 + 4 * 61)  # [1,1], [1], [4]
_H2_C2 = 16 + 10 + 10 + 10  # [], [], []
H2 = dict(
    parts=[[[2], [0], []], [[1, 1], [1], [4]], [[], [], []]],
    kw=dict(
        num_conv_groups=2, num_in_groups=1, num_out_groups=2, kernel_size=3,
        in_chans_per_group=3, out_chans_per_group=5, num_worker_contexts=W,
        activations_vector_width=4, float_activations=False, float_partials=False,
        use_1x1=False,
    ),
    expected=65 + W * 10 + W * 6
    + 2 * (23 + 1 * (15 + 2 * (10 + W * max(_H2_C0, _H2_C1, _H2_C2)))),
)  # fmt: skip

# H3: half->float, not 1x1: the worker saves R(half acts) = 6 but the outer loop adds
# W R(float partials) = 0 (Poplibs passes floatPartials there). vw 4, ic 16 (D 10),
# oc 2, kernel 1; per entry 19 + s (7 + 2 * 10) = 19 + 27 s.
_H3_PER = [10 + 19 + 27 * 3] * 3 + [10 + 19 + 27 * 2] * 2 + [10 + 7]  # [3]x3, [2]x2, [0]
H3 = dict(
    parts=[[[3]]] * 3 + [[[2]]] * 2 + [[[0]]],
    kw=dict(
        num_conv_groups=1, num_in_groups=1, num_out_groups=1, kernel_size=1,
        in_chans_per_group=16, out_chans_per_group=2, num_worker_contexts=W,
        activations_vector_width=4, float_activations=False, float_partials=True,
        use_1x1=False,
    ),
    expected=65 + W * 9 + W * 0 + 1 * (23 + 1 * (15 + 1 * (10 + W * (16 + max(_H3_PER))))),
)  # fmt: skip

# H4: 1x1 (half->float), oc 1 -> preload path: 13 + 1 + s (2 + D), ic 6 (D 13),
# per k 16 - 15 = 1; IG 2, OG 3; workers [4]x4, [3], [0].
_H4_PER = [1 + 14 + 15 * 4] * 4 + [1 + 14 + 15 * 3] + [1 + 7]
H4 = dict(
    parts=[[[4]]] * 4 + [[[3]], [[0]]],
    kw=dict(
        num_conv_groups=1, num_in_groups=2, num_out_groups=3, kernel_size=1,
        in_chans_per_group=6, out_chans_per_group=1, num_worker_contexts=W,
        activations_vector_width=4, float_activations=False, float_partials=True,
        use_1x1=True,
    ),
    expected=(65 - 10) + W * 9 + W * 15
    + 1 * (23 + 2 * (15 + 3 * (10 + W * (16 + max(_H4_PER))))),
)  # fmt: skip

# H5: 1x1, oc 4 (not the preload path): 13 + s (7 + 4 D), ic 16 (D 10), all [2].
H5 = dict(
    parts=[[[2]]] * W,
    kw=dict(H4["kw"], in_chans_per_group=16, out_chans_per_group=4, num_in_groups=1,
            num_out_groups=1),
    expected=(65 - 10) + W * 9 + W * 15
    + 1 * (23 + 1 * (15 + 1 * (10 + W * (16 + 1 + 13 + 2 * (7 + 4 * 10))))),
)  # fmt: skip

HMAC_CASES = {"H1": H1, "H2": H2, "H3": H3, "H4": H4, "H5": H5}


def test_hmac_hand_totals() -> None:
    assert (H1["expected"], H2["expected"], H3["expected"]) == (11465, 13453, 923)
    assert (H4["expected"], H5["expected"]) == (3588, 991)


@pytest.mark.parametrize("name", sorted(HMAC_CASES))
def test_hmac_supervisor(name: str) -> None:
    case = HMAC_CASES[name]
    assert conv_partial_hmac_cycles(case["parts"], **case["kw"]) == case["expected"]


def _vertex_kw(name: str, **extra) -> dict:
    kw = dict(HMAC_CASES[name]["kw"])
    kw.update(extra)
    return kw


# Vertex: counts = ceil(numFieldElems / outStride), outStride = tos // oc + 1; zeroing
# when zerosInfo != 0 (always for 1x1), ceil(zerosInfo / W) per worker, OG*CG vectors.
HMAC_VERTEX_CASES = [
    # H1 with output stride 2: tos = (2 - 1) * 4 = 4 -> outStride 4 // 4 + 1 = 2; raw
    # [10, 5] and [9, 6] -> [5, 3] at both positions; zerosInfo 0 -> no zeroing
    ("H1", [[[10, 5], [9, 6]]] * W, dict(zeros_info=0, transformed_out_stride=4), 11465),
    # same, zerosInfo 25: ceil(25/6) = 5 float -> ceil(5/2) = 3, + 5; 1 vector
    ("H1", [[[10, 5], [9, 6]]] * W, dict(zeros_info=25, transformed_out_stride=4),
     (3 + 5) * W * 1 + 11465),
    # H2 (half partials: tos = (2 - 1) * 5 / 2 = 2 -> outStride 2 // 5 + 1 = 1, counts
    # unchanged); zerosInfo 60: ceil(60/6) = 10 half -> ceil(10/4) = 3, + 5; 4 vectors
    ("H2", [[[2], [0], []], [[1, 1], [1], [4]], [[], [], []]],
     dict(zeros_info=60, transformed_out_stride=2), (3 + 5) * W * 4 + 13453),
    # H4 1x1: zeroing even with zerosInfo 0: (0 + 5) per worker, OG*CG = 3 vectors
    ("H4", [[[4]]] * 4 + [[[3]], [[0]]], dict(zeros_info=0, transformed_out_stride=0),
     (0 + 5) * W * 3 + 3588),
]  # fmt: skip


@pytest.mark.parametrize(("name", "raw", "extra", "expected"), HMAC_VERTEX_CASES)
def test_hmac_vertex(name: str, raw: list, extra: dict, expected: int) -> None:
    assert conv_partial_hmac_vertex_cycles(raw, **_vertex_kw(name, **extra)) == expected


def test_hmac_vertex_no_input_channels() -> None:
    # float acts: zerosInfo 12 -> ceil(12/6) = 2 float -> 1, + 5; 1 vector; + 58
    kw = _vertex_kw("H1", zeros_info=12, transformed_out_stride=0, num_in_groups=0)
    assert conv_partial_hmac_vertex_cycles([], **kw) == (1 + 5) * W * 1 + 58
    # no zeroing when zerosInfo == 0: the overhead only
    kw = _vertex_kw("H2", zeros_info=0, transformed_out_stride=0, in_chans_per_group=0)
    assert conv_partial_hmac_vertex_cycles([], **kw) == 65
    # 1x1: zeroing (0 + 5) W over 3 vectors, overhead 65 - 10
    kw = _vertex_kw("H4", zeros_info=0, transformed_out_stride=0, in_chans_per_group=0)
    assert conv_partial_hmac_vertex_cycles([], **kw) == 5 * W * 3 + 55


# -------------------------------------------------------------------------------- vmac
# dot(s, n) = 3 + (3 (s-1) (n // 8) if n >= 8 else 2 (s-1) (n // 4)), s - 1 >= 0.
# Worker: c >= 8 and half partials: (13 | 25) + (1 | 2) sum (7 + 15 + dot(s, 8));
#         else (19 f | 18 h) + sum (7 + (5 f | 3 h) + dot(s, c)).
# zero = 4 + ceil(E / (2 f | 4 h)); reduction = 10 - fp + (7 + 2 fp + (2 f | 1 h)(W-1))
#   * ceil(E / W) // c; total = 61 + 14 + 25 + fp + CG (zero + 32 + IG (24 + inner) + red)
VMAC_CASES = [
    # V1: half partials, c 4, 4 contexts; entries cost 13 + 2 (s-1)
    (
        [[2, 4], [1], [], [3, 3, 3]],
        dict(num_conv_groups=2, num_in_groups=3, num_out_elems=48, conv_groups_per_group=4,
             float_partials=False),
        61 + 14 + 25 + 0 + 2 * (
            (4 + 48 // 4)
            + 32 + 3 * (24 + W * max(18 + 15 + 19, 18 + 13, 18, 18 + 3 * 17))
            + (10 + (7 + 0 + 1 * 5) * 8 // 4)
        ),
    ),
    # V2: float partials, c 4, balanced [5, 5]: entry 7 + 5 + 3 + 2 * 4 = 23
    (
        [[5, 5]] * W,
        dict(num_conv_groups=1, num_in_groups=1, num_out_elems=40, conv_groups_per_group=4,
             float_partials=True),
        61 + 14 + 25 + 1 + 1 * (
            (4 + 40 // 2)
            + 32 + 1 * (24 + W * (19 + 2 * 23))
            + (10 - 1 + (7 + 2 + 2 * 5) * 7 // 4)  # ceil(40/6) = 7
        ),
    ),
    # V3: half partials, c 16: 25 + 2 * sum (22 + 3 + 3 (s-1)); [4]x5, [6]
    (
        [[4]] * 5 + [[6]],
        dict(num_conv_groups=1, num_in_groups=2, num_out_elems=96, conv_groups_per_group=16,
             float_partials=False),
        61 + 14 + 25 + 0 + 1 * (
            (4 + 96 // 4)
            + 32 + 2 * (24 + W * (25 + 2 * (22 + 3 + 3 * 5)))
            + (10 + (7 + 5) * 16 // 16)
        ),
    ),
    # V4: half partials, c 8: 13 + sum (22 + 3 + 3 (s-1)); stored 0 (one element) has
    # s - 1 clamped to 0 (Poplibs wraps); 2 contexts [2, 1], [0]
    (
        [[2, 1], [0]],
        dict(num_conv_groups=3, num_in_groups=1, num_out_elems=16, conv_groups_per_group=8,
             float_partials=False),
        61 + 14 + 25 + 0 + 3 * (
            (4 + 16 // 4)
            + 32 + 1 * (24 + W * (13 + (22 + 3 + 3) + (22 + 3 + 0)))
            + (10 + (7 + 5) * 3 // 8)  # ceil(16/6) = 3
        ),
    ),
    # V5: float partials, c 8 takes the generic path with dot(s, 8); 1 context [3]
    (
        [[3]],
        dict(num_conv_groups=1, num_in_groups=1, num_out_elems=8, conv_groups_per_group=8,
             float_partials=True),
        61 + 14 + 25 + 1 + 1 * (
            (4 + 8 // 2) + 32 + 1 * (24 + W * (19 + 7 + 5 + 3 + 3 * 2))
            + (10 - 1 + (7 + 2 + 2 * 5) * 2 // 8)  # ceil(8/6) = 2
        ),
    ),
]  # fmt: skip


def test_vmac_hand_totals() -> None:
    assert [c[2] for c in VMAC_CASES] == [2892, 613, 1490, 1522, 418]


@pytest.mark.parametrize(("parts", "kw", "expected"), VMAC_CASES)
def test_vmac(parts: list, kw: dict, expected: int) -> None:
    assert (
        conv_partial_vmac_cycles(parts, num_worker_contexts=W, float_activations=False, **kw)
        == expected
    )


# -------------------------------------------------------------------------- bad input
def _bad(fn, match: str, *args, **kw) -> None:
    with pytest.raises(ValueError, match=match):
        fn(*args, **kw)


def test_bad_zero_args() -> None:
    _bad(zero_supervisor_cycles, r"worker_elems\[1\]=-3", [1, -3], 1, 64, W, True)
    _bad(zero_supervisor_cycles, r"num_groups=-1", [1], -1, 64, W, True)
    _bad(zero_supervisor_cycles, r"data_path_width=16", [1], 1, 16, W, True)
    _bad(zero_supervisor_cycles, r"num_worker_contexts=0", [1], 1, 64, 0, False)


def test_bad_nx1_args() -> None:
    parts, kw = N1["parts"], N1["kw"]
    _bad(conv_partial_nx1_cycles, r"num_conv_units=0", parts, **dict(kw, num_conv_units=0))
    _bad(
        conv_partial_nx1_cycles,
        r"coeff_load_bytes_per_cycle=0",
        parts,
        **dict(kw, coeff_load_bytes_per_cycle=0),
    )
    _bad(conv_partial_nx1_cycles, r"num_in_groups=-2", parts, **dict(kw, num_in_groups=-2))
    # wrong shape: one kernel position given where the kernel has 2
    bad = [[[10]], *parts[1:]]
    _bad(conv_partial_nx1_cycles, r"worker_partitions\[0\] has 1 lists.*\(2\)", bad, **kw)
    # a bare count where a per-kernel-position list is expected
    _bad(conv_partial_nx1_cycles, r"worker_partitions\[2\]", [*parts[:2], 5], **kw)
    # negative field-element count
    bad = [p if c != 1 else [[10], [-2]] for c, p in enumerate(parts)]
    _bad(conv_partial_nx1_cycles, r"worker_partitions\[1\]\[1\]\[0\]=-2", bad, **kw)
    # more contexts than the tile has
    _bad(conv_partial_nx1_cycles, r"has 7 worker contexts", [*parts, parts[0]], **kw)
    _bad(conv_partial_nx1_vertex_cycles, r"zeros_info=-1", parts, -1, **kw)


def test_bad_hmac_args() -> None:
    parts, kw = H1["parts"], H1["kw"]
    _bad(conv_partial_hmac_cycles, r"float_activations=True, float_partials=False", parts,
         **dict(kw, float_partials=False))  # fmt: skip
    _bad(conv_partial_hmac_cycles, r"use_1x1=True", H2["parts"], **dict(H2["kw"], use_1x1=True))
    _bad(conv_partial_hmac_cycles, r"kernel_size=0", parts, **dict(kw, kernel_size=0))
    _bad(conv_partial_hmac_cycles, r"worker_partitions\[0\] has 1 lists", [[[1]]], **kw)
    _bad(conv_partial_hmac_cycles, r"worker_partitions\[0\]\[0\]\[1\]=-5", [[[1, -5], []]], **kw)
    _bad(dense_dot_product_cycles, r"activations_vector_width=0", 0, True, True, 8)
    vkw = _vertex_kw("H1", zeros_info=0, transformed_out_stride=-8)
    _bad(conv_partial_hmac_vertex_cycles, r"transformed_out_stride=-8", parts, **vkw)
    vkw = _vertex_kw("H4", zeros_info=0, transformed_out_stride=0)
    _bad(conv_partial_hmac_vertex_cycles, r"1x1 vertex requires 6 contexts", [[[1]]], **vkw)


def test_bad_vmac_args() -> None:
    kw = dict(num_conv_groups=1, num_in_groups=1, num_out_elems=8, conv_groups_per_group=4,
              num_worker_contexts=W, float_activations=False, float_partials=False)  # fmt: skip
    _bad(conv_partial_vmac_cycles, r"float_activations=True", [[1]],
         **dict(kw, float_activations=True))  # fmt: skip
    _bad(conv_partial_vmac_cycles, r"conv_groups_per_group=2", [[1]],
         **dict(kw, conv_groups_per_group=2))  # fmt: skip
    _bad(conv_partial_vmac_cycles, r"num_out_elems=-4", [[1]], **dict(kw, num_out_elems=-4))
    _bad(conv_partial_vmac_cycles, r"worker_partitions\[0\]\[2\]=-1", [[1, 2, -1]], **kw)
    _bad(conv_partial_vmac_cycles, r"worker_partitions\[1\]=3", [[1], 3], **kw)
    _bad(conv_partial_vmac_cycles, r"has 7 worker contexts", [[1]] * 7, **kw)
