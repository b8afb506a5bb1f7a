"""popops vertex estimators and vertex choice against the Poplibs sources.

Source: graphcore/poplibs @ 7eac0f266ced5b064b3284a3cd90d491745b387c,
``lib/popops/popopsCycleEstimators.{hpp,cpp}``, ``lib/popops/PerformanceEstimation.cpp``,
``lib/popops/{ElementWise,Fill,Cast}.cpp``, ``lib/poputil/Util.cpp`` (splitRegions).
The table entries below are typed in from the source; every expectation is computed
here from the formula written out again, never from the project's estimator.
W = 6 worker contexts; VW (64-bit vector) float 2, half 4, int/unsigned 2, bool 8.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from poplar_api import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, IPUModel, popops
from poplar_api import program as prog
from poplar_api.codelet import vertex_type
from poplar_api.popops import vertices as vx

W = 6
VW = {FLOAT: 2, HALF: 4, INT: 2, UNSIGNED_INT: 2, BOOL: 8}
B = "popops::expr::BinaryOpType::"
U = "popops::expr::UnaryOpType::"


def ceil(a: int, b: int) -> int:
    return -(-a // b)


@pytest.fixture(scope="module")
def target():
    return IPUModel("ipu2").createDevice().getTarget()


# (cyclesPerLoop, naturalVectorWidth, loopUnrollFactor) typed from popopsCycleEstimators.hpp
BINARY = {  # binaryOpPerfInfo
    ("ADD", FLOAT): (1, True, 0), ("ADD", HALF): (1, True, 0), ("ADD", INT): (7, False, 1),
    ("ADD", UNSIGNED_INT): (7, False, 1), ("DIVIDE", HALF): (21, False, 4),
    ("DIVIDE", INT): (277, False, 1), ("DIVIDE", UNSIGNED_INT): (265, False, 1),
    ("MAXIMUM", UNSIGNED_INT): (8, False, 1), ("EQUAL", FLOAT): (14, False, 4),
    ("NOT_EQUAL", FLOAT): (20, False, 4), ("LESS_THAN", INT): (22, False, 4),
    ("GREATER_THAN_EQUAL", UNSIGNED_INT): (26, False, 4), ("EQUAL", BOOL): (6, False, 4),
    ("LOGICAL_AND", BOOL): (5, False, 4), ("POWER", FLOAT): (312, False, 1),
    ("ATAN2", FLOAT): (272, False, 2), ("ATAN2", HALF): (578, False, 4),
    ("BITWISE_AND", INT): (7, False, 1), ("BITWISE_XNOR", UNSIGNED_INT): (7, False, 1),
    ("REMAINDER", FLOAT): (133, False, 2), ("REMAINDER", HALF): (300, False, 4),
    ("REMAINDER", INT): (292, False, 1), ("REMAINDER", UNSIGNED_INT): (282, False, 1),
    ("SHIFT_RIGHT_SIGN_EXTEND", INT): (7, False, 1), ("GREATER_THAN", BOOL): (31, False, 4),
    ("LESS_THAN_EQUAL", BOOL): (28, False, 4),
}  # fmt: skip
BINARY_IN_PLACE = {  # binaryOpInPlacePerfInfo
    ("ADD", FLOAT): (1, True, 0), ("MAXIMUM", FLOAT): (4, False, 2),
    ("DIVIDE", UNSIGNED_INT): (264, False, 1), ("LOGICAL_OR", BOOL): (5, False, 4),
}  # fmt: skip
BROADCAST = {  # broadcastOpPerfInfo
    ("ADD", FLOAT): (1, True, 0), ("MULTIPLY", HALF): (1, True, 0),
    ("ADD", INT): (6, False, 1), ("DIVIDE", FLOAT): (6, False, 2),
    ("GREATER_THAN", HALF): (8, False, 4), ("EQUAL", BOOL): (14, False, 4),
    ("REMAINDER", FLOAT): (93, False, 2), ("REMAINDER", HALF): (225, False, 4),
    ("REMAINDER", INT): (280, False, 1), ("SHIFT_LEFT", UNSIGNED_INT): (6, False, 1),
    ("BITWISE_OR", INT): (6, False, 1), ("GREATER_THAN", BOOL): (12, False, 4),
    ("VARIANCE_TO_INV_STD_DEV", HALF): (24, False, 4),
}  # fmt: skip
BROADCAST_IN_PLACE = {  # broadcastOpInPlacePerfInfo
    ("SUBTRACT", FLOAT): (1, True, 0), ("MINIMUM", UNSIGNED_INT): (8, False, 1),
    ("LOGICAL_AND", BOOL): (4, False, 4),
}  # fmt: skip
UNARY = {  # unaryOpPerfInfo
    ("EXPONENT", FLOAT): (6, False, 2), ("RELU", HALF): (3, False, 4),
    ("ABSOLUTE", INT): (2, False, 0), ("SQUARE", UNSIGNED_INT): (1, True, 0),
    ("LOGICAL_NOT", BOOL): (17, False, 0), ("SQRT", HALF): (23, False, 4),
    ("CBRT", FLOAT): (27, True, 0), ("CBRT", HALF): (17, True, 0),
    ("COS", FLOAT): (2300, False, 0), ("COS", HALF): (25, False, 1),
    ("INVERSE", FLOAT): (6, False, 2), ("INVERSE", HALF): (15, False, 4),
    ("IS_FINITE", FLOAT): (5, True, 0), ("IS_INF", HALF): (5, True, 0),
    ("EXPONENT_MINUS_ONE", FLOAT): (4, False, 0), ("EXPONENT_MINUS_ONE", HALF): (5, True, 0),
    ("SIGNUM", INT): (5, False, 0), ("POPCOUNT", UNSIGNED_INT): (1, False, 0),
    ("BITWISE_NOT", INT): (1, True, 0), ("COUNT_LEADING_ZEROS", INT): (1, False, 0),
    ("TRUNC", HALF): (11, False, 4), ("RSQRT", FLOAT): (8, False, 2),
}  # fmt: skip
UNARY_IN_PLACE = {  # unaryOpInPlacePerfInfo
    ("ABSOLUTE", FLOAT): (1, True, 0), ("TANH", FLOAT): (10, False, 2),
    ("NEGATE", HALF): (3, False, 4), ("LOGICAL_NOT", BOOL): (17, True, 0),
    ("LOGARITHM_ONE_PLUS", HALF): (17, True, 0), ("TRUNC", FLOAT): (4, False, 2),
    ("BITWISE_NOT", UNSIGNED_INT): (1, True, 0), ("SIGNUM", FLOAT): (5, True, 0),
}  # fmt: skip
FAST = {"ADD", "SUBTRACT", "MULTIPLY"}


def binary_loop(op, t, n, entry):
    cpl, natural, unroll = entry
    if natural:  # binaryOpInnerLoopCycles: +2 for ADD/SUB/MUL float|half, else +5
        return ceil(n, VW[t]) * (cpl + (2 if op in FAST and t in (FLOAT, HALF) else 5))
    return ceil(n, unroll) * cpl


def broadcast_loop(op, t, n, entry):
    cpl, natural, unroll = entry
    if natural:  # overheadPerLoop 1 for ADD/SUB/MUL float|half, else 4 (natural only)
        return ceil(n, VW[t]) * (cpl + (1 if op in FAST and t in (FLOAT, HALF) else 4))
    return ceil(n, unroll) * cpl


def unary_loop(t, n, entry):
    cpl, natural, unroll = entry
    if not natural and unroll > 0:
        return ceil(n, unroll) * cpl
    width = VW[t] if natural else 1  # basicOpLoopCycles: (cpl+4) * (n + w - 1) / w
    return (cpl + 4) * (n + width - 1) // width


@pytest.mark.parametrize("n", [1, 100, 1000])
@pytest.mark.parametrize(("op", "t"), list(BINARY))
def test_binary_op_1d_and_2d(target, op, t, n):
    entry = BINARY[(op, t)]
    one = vertex_type(vx.binary_vertex(op, t, "1D"))
    assert one.name == f"popops::BinaryOp1D<{B}{op},{t.name}>" and one.is_multi
    base = 29 if t == FLOAT else 26
    expect_1d = W * (base + binary_loop(op, t, ceil(n, W), entry)) + 11
    assert one.estimate({"in1": n, "in2": n, "out": n}, target) == expect_1d
    rows = [n, 7]
    two = vertex_type(vx.binary_vertex(op, t, "2D"))
    expect_2d = 5 + sum(binary_loop(op, t, r, entry) for r in rows)
    assert two.estimate({"in1": rows, "in2": rows, "out": rows}, target) == expect_2d


@pytest.mark.parametrize("n", [5, 600])
@pytest.mark.parametrize(("op", "t"), list(BINARY_IN_PLACE))
def test_binary_op_in_place_uses_the_in_place_table(target, op, t, n):
    entry = BINARY_IN_PLACE[(op, t)]
    one = vertex_type(vx.binary_vertex(op, t, "1D", in_place=True))
    assert one.name == f"popops::BinaryOp1DInPlace<{B}{op},{t.name}>"
    expect = W * (58 + binary_loop(op, t, ceil(n, W), entry)) + 11
    assert one.estimate({"in1Out": n, "in2": n}, target) == expect
    two = vertex_type(vx.binary_vertex(op, t, "2D", in_place=True))
    assert two.estimate({"in1Out": [n, 3], "in2": [n, 3]}, target) == 20 + sum(
        binary_loop(op, t, r, entry) for r in (n, 3)
    )


@pytest.mark.parametrize("n", [12, 1200])
@pytest.mark.parametrize("in_place", [False, True])
def test_broadcast_scalar_uses_the_broadcast_tables(target, n, in_place):
    table = BROADCAST_IN_PLACE if in_place else BROADCAST
    suffix = "InPlace" if in_place else ""
    for (op, t), entry in table.items():
        one = vertex_type(vx.broadcast_scalar_vertex(op, t, "1D", in_place))
        assert one.name == f"popops::BroadcastScalar1D{suffix}<{B}{op},{t.name}>"
        sizes = {"data": n, "B": 1} | ({} if in_place else {"out": n})
        expect = (20 + broadcast_loop(op, t, ceil(n, W), entry)) * W + 11
        assert one.estimate(sizes, target) == expect
        two = vertex_type(vx.broadcast_scalar_vertex(op, t, "2D", in_place))
        assert two.name == f"popops::BroadcastScalar2DData{suffix}<{B}{op},{t.name}>"
        rows = [n, 9]
        sizes2 = {"data": rows, "B": 1} | ({} if in_place else {"out": rows})
        expect2 = 20 + sum(broadcast_loop(op, t, r, entry) + 28 for r in rows)
        assert two.estimate(sizes2, target) == expect2


@pytest.mark.parametrize("n", [6, 61, 1000])
@pytest.mark.parametrize("in_place", [False, True])
def test_unary_ops(target, n, in_place):
    table = UNARY_IN_PLACE if in_place else UNARY
    field = "inOut" if in_place else "in"
    for (op, t), entry in table.items():
        one = vertex_type(vx.unary_vertex(op, t, "1D", in_place))
        suffix = "InPlace" if in_place else ""
        assert one.name == f"popops::UnaryOp1D{suffix}<{U}{op},{t.name}>"
        base = 55 if in_place else (33 if op == "EXPONENT" else 17)
        expect = (base + unary_loop(t, ceil(n, W), entry)) * W + 9 + 11
        assert one.estimate({field: n, "out": n}, target) == expect
        two = vertex_type(vx.unary_vertex(op, t, "2D", in_place))
        expect2 = 20 + unary_loop(t, n, entry) + unary_loop(t, 3, entry)
        assert two.estimate({field: [n, 3], "out": [n, 3]}, target) == expect2


def fill_worker(t, n):
    """_fillCycleEstimate, typed from PerformanceEstimation.cpp."""
    if t == BOOL:
        return 28 + n // 4 if n < 64 else 39 + n // 8
    if t == HALF:
        return {1: 15, 2: 21}.get(n, 26 + n // 4)
    return 16 + n // 2 + 6 + (n % 2 == 1) + 1


@pytest.mark.parametrize("t", [FLOAT, HALF, INT, UNSIGNED_INT, BOOL])
@pytest.mark.parametrize("n", [3, 40, 100])
def test_fill_and_fill2d(target, t, n):
    assert vertex_type(vx.fill_vertex(t, "1D")).estimate({"in": 1, "out": n}, target) == (
        fill_worker(t, n)
    )
    rows = [n, 10]
    not_half = 0 if t == HALF else 1
    expect = 5 + sum(fill_worker(t, r) for r in rows) + not_half - (2 + not_half) * 2
    assert vertex_type(vx.fill_vertex(t, "2D")).estimate({"in": 1, "out": rows}, target) == expect


def cast_worker(src, dst, n):
    """castWorkerCycles (bandwidth model) for the types here."""
    from_load, to_store = 8 // src.size, 8 // dst.size
    aux = src in (FLOAT, HALF) and dst in (FLOAT, HALF)
    vw = min(2 * from_load, to_store) if aux else 1
    per_vector = max(vw // min(vw, from_load), vw // min(vw, to_store)) + (0 if aux else 1)
    cycles = 19 + per_vector * (n // vw)
    for i in range(max(0, (vw - 1).bit_length())):
        cycles += 1 + (2 if (n % vw) & (1 << i) else 0)
    return cycles


@pytest.mark.parametrize(
    ("src", "dst"), [(FLOAT, HALF), (HALF, FLOAT), (INT, FLOAT), (BOOL, FLOAT), (FLOAT, INT)]
)
@pytest.mark.parametrize("n", [7, 600])
def test_cast_vertices(target, src, dst, n):
    one = vertex_type(vx.cast_vertex(src, dst, "1D"))
    assert one.is_multi and one.name == f"popops::Cast1D<{src.name},{dst.name}>"
    assert one.estimate({"src": n, "dst": n}, target) == 12 + W * (
        cast_worker(src, dst, ceil(n, W)) + 18
    )
    single = vertex_type(vx.cast_vertex(src, dst, "1DSingleWorker"))
    assert not single.is_multi
    assert single.estimate({"src": n, "dst": n}, target) == 3 + 2 + cast_worker(src, dst, n)
    two = vertex_type(vx.cast_vertex(src, dst, "2D"))
    assert two.estimate({"src": [n, 5], "dst": [n, 5]}, target) == 5 + sum(
        11 + cast_worker(src, dst, r) for r in (n, 5)
    )


# ------------------------------------------------------------- whole programs


def _one_tile(t, n, tile=0):
    device = IPUModel("ipu2").createDevice()
    graph = Graph(device.getTarget())
    x = graph.addVariable(t, [n], "x")
    graph.setTileMapping(x, tile)
    return device, graph, x


def _tile_cycles(device, graph, seq, name, tile=0):
    engine = Engine(graph, seq)
    engine.load(device)
    engine.run(0)
    rec = next(r for r in engine.getTrace().records if r.kind == "compute" and r.name == name)
    return int(rec.tile_cycles[tile])


def test_fill_of_1001_floats_is_split_over_six_workers():
    device, graph, x = _one_tile(FLOAT, 1001)
    seq = prog.Sequence()
    popops.fill(graph, x, 1.5, seq, "fill")
    verts = graph._state.vertices
    # splitRegionsBetweenWorkers(grain VW=2, min 4): 501 grains, 84 per vertex at most,
    # 6 vertices, vertex v gets grains [v*501//6, (v+1)*501//6): 83,84,83,84,83,84 grains;
    # the last stops at element 1001.
    bounds = [v * 501 // 6 * 2 for v in range(7)]
    sizes = [min(1001, b) - a for a, b in itertools.pairwise(bounds)]
    assert sizes == [166, 168, 166, 168, 166, 167]
    assert [v.vtype.name for v in verts] == ["popops::Fill<float>"] * 6
    assert [np.size(v.fields["out"]) for v in verts] == sizes
    # one worker vertex per context: tile = W * the slowest Fill
    assert _tile_cycles(device, graph, seq, "fill") == W * max(fill_worker(FLOAT, s) for s in sizes)
    assert W * max(fill_worker(FLOAT, s) for s in sizes) == 642


def test_shared_examples_still_hold(target):
    # poplibs_estimators.md: BinaryOp1D ADD float N=1000 = 1697; BinaryOp2D rows [100, 50] = 230
    one = vertex_type(vx.binary_vertex("ADD", FLOAT, "1D"))
    assert one.estimate({"in1": 1000, "in2": 1000, "out": 1000}, target) == 1697
    assert 6 * (29 + ceil(ceil(1000, 6), 2) * 3) + 11 == 1697
    two = vertex_type(vx.binary_vertex("ADD", FLOAT, "2D"))
    rows = [100, 50]
    assert two.estimate({"in1": rows, "in2": rows, "out": rows}, target) == 230
    assert 5 + 50 * 3 + 25 * 3 == 230


def test_in_place_add_uses_the_in_place_vertex_and_table():
    device, graph, x = _one_tile(FLOAT, 1000)
    y = graph.addVariable(FLOAT, [1000], "y")
    graph.setTileMapping(y, 0)
    seq = prog.Sequence()
    popops.maxInPlace(graph, x, y, seq, "max")
    (v,) = graph._state.vertices
    assert v.vtype.name == f"popops::BinaryOp1DInPlace<{B}MAXIMUM,float>"
    # in-place MAXIMUM float {4, unroll 2}: 6 * (58 + ceil(167/2) * 4) + 11
    assert _tile_cycles(device, graph, seq, "max") == 6 * (58 + 84 * 4) + 11


def test_cast_vertex_choice():
    _device, graph, x = _one_tile(FLOAT, 10)
    seq = prog.Sequence()
    popops.cast(graph, x, HALF, seq, "small")
    # 10 <= min(VW float 2, VW half 4) * 6 = 12: a single worker
    assert graph._state.vertices[-1].vtype.name == "popops::Cast1DSingleWorker<float,half>"
    y = graph.addVariable(FLOAT, [100], "y")
    graph.setTileMapping(y, 0)
    popops.cast(graph, y, HALF, seq, "big")
    assert graph._state.vertices[-1].vtype.name == "popops::Cast1D<float,half>"


def test_relu_is_a_popops_unary_op():
    device, graph, x = _one_tile(FLOAT, 60)
    seq = prog.Sequence()
    popops.relu(graph, x, seq, "relu")
    (v,) = graph._state.vertices
    assert v.vtype.name == f"popops::UnaryOp1D<{U}RELU,float>"
    # RELU float {3, unroll 2}: (17 + ceil(10/2) * 3) * 6 + 9 + 11
    assert _tile_cycles(device, graph, seq, "relu") == (17 + 5 * 3) * 6 + 20


def test_broadcast_scalar_multi_vertex_vs_workers():
    # Eight regions of 4 floats on tile 0: 1-D cost 8 * ((20 + 1 * 2) * 6 + 11) = 1144;
    # the 2-D split (grain 4, min 8: 8 grains -> 4 vertices of 2 regions) costs
    # 6 * (20 + 2 * (2 * 2 + 28)) = 504, so BroadcastScalar2DData workers are used.
    device = IPUModel("ipu2").createDevice()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [64], "x")
    for k in range(16):
        graph.setTileMapping(x.slice(4 * k, 4 * k + 4), k % 2)
    seq = prog.Sequence()
    popops.mul(graph, x, 2.0, seq, "scale")
    on0 = [v for v in graph._state.vertices if v.tile == 0 and "Broadcast" in v.vtype.name]
    assert {v.vtype.name for v in on0} == {f"popops::BroadcastScalar2DData<{B}MULTIPLY,float>"}
    assert [[ids.size for ids in v.fields["out"]] for v in on0] == [[4, 4]] * 4
    assert _tile_cycles(device, graph, seq, "scale") == 6 * (20 + 2 * (2 * 2 + 28))
    np.testing.assert_equal(len(on0), 4)
