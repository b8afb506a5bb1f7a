"""popops cycle estimators against the Poplibs formulas, with the arithmetic written out.

W = 6 worker contexts; VW = 2 floats / 4 halves per 64-bit vector.
"""

from __future__ import annotations

import pytest

from poplar_api import FLOAT, HALF, INT, IPUModel
from poplar_api.codelet import vertex_type
from poplar_api.popops import estimators as est
from poplar_api.popops import vertices as vx

W = 6


@pytest.fixture(scope="module")
def target():
    return IPUModel("ipu2").createDevice().getTarget()


@pytest.mark.parametrize(
    ("n", "cycles"),
    [
        (1000, 1697),  # 6 * (29 + ceil(167/2) * (1+2)) + 11 = 6 * (29 + 252) + 11
        (100, 347),  # 6 * (29 + ceil(17/2) * 3) + 11 = 6 * 56 + 11
        (1, 203),  # 6 * (29 + 1 * 3) + 11
        (4096, 6341),  # 6 * (29 + ceil(683/2) * 3) + 11 = 6 * 1055 + 11
    ],
)
def test_binary_op_1d_add_float(target, n, cycles):
    vt = vertex_type(vx.binary_vertex("ADD", FLOAT, "1D"))
    assert vt.is_multi
    assert vt.estimate({"in1": n, "in2": n, "out": n}, target) == cycles
    assert est.binary_op_1d("ADD", "float", n, W, 2) == cycles


def test_binary_op_2d_add_float_rows(target):
    vt = vertex_type(vx.binary_vertex("ADD", FLOAT, "2D"))
    assert not vt.is_multi
    rows = [100, 50]
    # 5 + ceil(100/2)*3 + ceil(50/2)*3 = 5 + 150 + 75
    assert vt.estimate({"in1": rows, "in2": rows, "out": rows}, target) == 230


@pytest.mark.parametrize(
    "op,type_name,vw", [("ADD", "float", 2), ("ADD", "half", 4), ("DIVIDE", "half", 4)]
)
def test_in_place_1d_estimate_of_many_counts_is_the_formula(op, type_name, vw):
    """binary_op_1d_in_place_array: W * (58 + ceil(ceil(N / W) / e) * c) + 11 for every
    count, e and c the loop's elements and cycles (ADD float: 2 and 1 + 2; ADD half: 4
    and 1 + 2; DIVIDE half, no natural width: unroll 4, 21 cycles), as the scalar
    estimator gives each."""
    import numpy as np

    n = np.array([0, 1, 5, 6, 7, 11, 12, 13, 100, 1000, 4097, 123457])
    e, c = {"float": (2, 3), "half": (4, 3)}[type_name] if op == "ADD" else (4, 21)
    loops = ((n + W - 1) // W + e - 1) // e
    want = W * (58 + loops * c) + 11
    got = est.binary_op_1d_in_place_array(op, type_name, n, W, vw)
    assert got.dtype == np.int64
    assert got.tolist() == want.tolist()
    assert got.tolist() == [est.binary_op_1d_in_place(op, type_name, int(k), W, vw) for k in n]


def test_binary_in_place_and_non_natural_ops(target):
    # BinaryOp1DInPlace ADD float N=1000: 6 * (58 + 84*3) + 11
    assert est.binary_op_1d_in_place("ADD", "float", 1000, W, 2) == 6 * (58 + 252) + 11
    # BinaryOp2DInPlace rows [100, 50]: 20 + 150 + 75
    assert est.binary_op_2d_in_place("ADD", "float", [100, 50], 2) == 245
    # DIVIDE half {21, no natural width, unroll 4}, N=600: per worker 100 -> 25 loops * 21
    # BinaryOp1D base for non-float is 26: 6 * (26 + 525) + 11
    vt = vertex_type(vx.binary_vertex("DIVIDE", HALF, "1D"))
    assert vt.estimate({"in1": 600, "in2": 600, "out": 600}, target) == 6 * 551 + 11
    # MAXIMUM float {3, unroll 2}, rows [7]: 5 + ceil(7/2)*3
    assert est.binary_op_2d("MAXIMUM", "float", [7], 2) == 17


def test_unary_ops():
    # EXPONENT float {6, unroll 2}, N=600: worker 100 -> 50*6=300; (33+300)*6 + 9 + 11
    assert est.unary_op_1d("EXPONENT", "float", 600, W, 2) == 333 * 6 + 20
    # ABSOLUTE float {1, no unroll}: (1+4) per element; N=60 -> 10 per worker: (17+50)*6+20
    assert est.unary_op_1d("ABSOLUTE", "float", 60, W, 2) == 67 * 6 + 20
    # in place base 55, in-place table ABSOLUTE float {1, natural width}:
    # basicOpLoopCycles(10, 2, 1 + 4) = 5 * (10 + 1) // 2 = 27; (55 + 27) * 6 + 20
    assert est.unary_op_1d("ABSOLUTE", "float", 60, W, 2, in_place=True) == 82 * 6 + 20
    # UnaryOp2D SQRT float {10, unroll 2}, rows [10, 3]: 20 + 5*10 + 2*10
    assert est.unary_op_2d("SQRT", "float", [10, 3], 2) == 90


def test_broadcast_scalar(target):
    # ADD float N=1200: per worker 200 -> ceil(200/2)=100 loops * (1 + 1): (20+200)*6 + 11
    vt = vertex_type(vx.broadcast_scalar_vertex("ADD", FLOAT, "1D"))
    assert vt.estimate({"data": 1200, "B": 1, "out": 1200}, target) == 220 * 6 + 11
    # broadcast table DIVIDE float {6, unroll 2} (no per-loop overhead when unrolled),
    # N=12: per worker 2 -> 1 loop * 6
    assert est.broadcast_scalar_1d("DIVIDE", "float", 12, W, 2) == (20 + 6) * 6 + 11


def test_fill(target):
    # 32-bit: 16 + n/2 + 6 + (n odd) + 1
    assert est.fill(4, 100) == 16 + 50 + 6 + 0 + 1
    assert est.fill(4, 101) == 16 + 50 + 6 + 1 + 1
    # half: n=1 -> 15, n=2 -> 21, else 26 + n/4
    assert [est.fill(2, 1), est.fill(2, 2), est.fill(2, 100)] == [15, 21, 51]
    # 8-bit: 28 + n/4 below 64, else 39 + n/8
    assert [est.fill(1, 40), est.fill(1, 80)] == [38, 49]
    # Fill2d float rows [10, 20]: fill 28 + 33; 5 + 61 + 1 - 3*2
    vt = vertex_type(vx.fill_vertex(FLOAT, "2D"))
    assert vt.estimate({"in": 1, "out": [10, 20]}, target) == 61
    # Fill2d half rows [8]: fill 26 + 2 = 28; 5 + 28 + 0 - 2*1
    assert est.fill_2d(2, True, [8]) == 31


def test_scaled_add_supervisor(target):
    # float N=1000: vectors 500, rem 0, 83 per worker
    # supervisor 21 + 11 + 7 + 12 + 6 = 57; worker 15 + (6 + 3*82) + 2 + 1 + 1 = 271
    vt = vertex_type(vx.scaled_add_vertex(FLOAT, "1D"))
    assert vt.estimate({"A": 1000, "B": 1000, "scaleB": 1}, target) == 57 + 6 * 271
    # N=1001: rem 1 -> supervisor 63, worker 271 + 8 (float tail) = 279
    assert est.scaled_add_supervisor("float", 1001, W, 2) == 63 + 6 * 279
    # subtract adds 7 to the supervisor part
    assert est.scaled_add_supervisor("float", 1000, W, 2, subtract=True) == 64 + 6 * 271
    # half N=10: vectors 2, rem 2, 0 per worker; supervisor 63; worker 15+2+1+(1+5+7) = 31
    assert est.scaled_add_supervisor("half", 10, W, 4) == 63 + 6 * 31
    # int N=10: 53 + 26*3 + (6 + 26*1) + 8 + 6
    vt_int = vertex_type(vx.scaled_add_vertex(INT, "1D"))
    assert vt_int.estimate({"A": 10, "B": 10, "scaleB": 1}, target) == 177


def test_scaled_add_2d():
    # float rows [10, 5]: 9 + 1 + [15 + 5 + 5*3] + [15 + 5 + 2*3 + 7]
    assert est.scaled_add_2d("float", [10, 5], 2) == 10 + 35 + 33
    # half rows [7]: 1 vector, rem 3: 15 + 5 + 3 + (4 + 6 + 7)
    assert est.scaled_add_2d("half", [7], 4) == 10 + 40
    # int rows [4]: 8 + (7 + 5*4) + 1 ; subtract +1
    assert est.scaled_add_2d("int", [4], 2, subtract=True) == 8 + 27 + 1 + 1


def test_cast_1d(target):
    # castWorkerCycles float->half: 4 floats per vector (min(2*2, 4)), 2 load cycles per
    # vector; N=600 -> 100 per worker: 19 + 2*25 + 2 remainder checks = 71
    vt = vertex_type(vx.cast_vertex(FLOAT, HALF, "1D"))
    assert vt.estimate({"src": 600, "dst": 600}, target) == 12 + 6 * (71 + 18)


def test_vertex_kinds_match_poplibs():
    assert vertex_type(vx.unary_vertex("EXPONENT", FLOAT, "1D")).is_multi
    assert not vertex_type(vx.unary_vertex("EXPONENT", FLOAT, "2D")).is_multi
    assert not vertex_type(vx.fill_vertex(FLOAT, "1D")).is_multi
    assert not vertex_type(vx.scaled_add_vertex(FLOAT, "2D")).is_multi
    assert vertex_type(vx.cast_vertex(FLOAT, HALF, "1D")).name == "popops::Cast1D<float,half>"
