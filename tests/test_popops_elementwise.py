"""popops elementwise operations against numpy, their vertex layout and their errors.

Expected values are numpy on the stored inputs; HALF results are the float32 result
rounded to float16 (the codelet convention), integer division truncates toward zero
as in C.
"""

from __future__ import annotations

import numpy as np
import pytest
from popops_harness import Harness

from poplar_api import (
    BOOL,
    FLOAT,
    HALF,
    INT,
    UNSIGNED_INT,
    Graph,
    IPUModel,
    popops,
)
from poplar_api import program as prog
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.popops import expr as pe
from poplar_api.tensor import concat

F32 = np.float32


def rng_values(type_, shape, positive=False, nonzero=False, seed=0):
    """Random test values representable in ``type_``."""
    rng = np.random.default_rng(seed)
    if type_ in (FLOAT, HALF):
        x = rng.uniform(0.25 if positive else -4, 4, shape)
    elif type_ is INT:
        x = rng.integers(1 if positive else -50, 50, shape)
    elif type_ is UNSIGNED_INT:
        x = rng.integers(1 if (positive or nonzero) else 0, 100, shape)
    else:
        x = rng.integers(0, 2, shape).astype(bool)
    if nonzero and type_ is INT:
        x = np.where(x == 0, 7, x)
    return np.asarray(x).astype(type_.numpy)


def ref(type_, fn, *arrays):
    """numpy reference: compute in the kernel dtype (float32 for HALF), unrounded."""
    kernel = [np.asarray(a).astype(np.float32 if type_ is HALF else a.dtype) for a in arrays]
    with np.errstate(all="ignore"):
        return np.asarray(fn(*kernel))


def stored(type_, fn, *arrays):
    """:func:`ref` stored as ``type_`` (HALF rounds to float16)."""
    return ref(type_, fn, *arrays).astype(type_.numpy)


def c_div(a, b):
    """C integer division: truncate toward zero (written independently of the library)."""
    if a.dtype.kind == "u":
        return a // b
    return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(a.dtype)


BINARY = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "div": None,  # per type below
    "max": np.maximum,
    "min": np.minimum,
    "pow": np.power,
    "eq": np.equal,
    "neq": np.not_equal,
    "gt": np.greater,
    "gteq": np.greater_equal,
    "lt": np.less,
    "lteq": np.less_equal,
}
NUMERIC = [FLOAT, HALF, INT, UNSIGNED_INT]


def _binary_cases():
    for name in BINARY:
        for t in NUMERIC:
            if name == "pow" and t not in (FLOAT, HALF):
                continue
            yield name, t


@pytest.mark.parametrize(("name", "type_"), list(_binary_cases()))
def test_binary_ops_on_views_match_numpy(name, type_):
    h = Harness()
    a_val = rng_values(type_, (3, 5), positive=name == "pow", seed=1)
    b_val = rng_values(type_, (5, 3), nonzero=True, seed=2)
    if name == "pow":
        b_val = (np.arange(15).reshape(5, 3) % 3).astype(type_.numpy)
    a = h.var(type_, a_val, "a")
    b = h.var(type_, b_val, "b")
    out = h.read(getattr(popops, name)(h.graph, a, b.transpose(), h.seq), "out")
    got = h.run()["out"]
    bt = b_val.T
    fn = BINARY[name]
    if name == "div":
        fn = c_div if type_ in (INT, UNSIGNED_INT) else np.divide
    want = ref(type_, fn, a_val, bt)
    is_cmp = name in ("eq", "neq", "gt", "gteq", "lt", "lteq")
    assert out.elementType() is (BOOL if is_cmp else type_)
    assert out.shape() == [3, 5]
    np.testing.assert_array_equal(got, want.astype(out.elementType().numpy))


UNARY = {
    "neg": (np.negative, [FLOAT, HALF, INT], False),
    "abs": (np.abs, [FLOAT, HALF, INT], False),
    "square": (np.square, NUMERIC, False),
    "exp": (np.exp, [FLOAT, HALF], False),
    "log": (np.log, [FLOAT, HALF], True),
    "sqrt": (np.sqrt, [FLOAT, HALF], True),
    "tanh": (np.tanh, [FLOAT, HALF], False),
    "sigmoid": (lambda x: np.float32(1) / (np.float32(1) + np.exp(-x)), [FLOAT, HALF], False),
    "relu": (lambda x: np.maximum(x, np.float32(0)), [FLOAT, HALF], False),
}


@pytest.mark.parametrize(("name", "type_"), [(n, t) for n, (_, ts, _) in UNARY.items() for t in ts])
def test_unary_ops_on_a_sliced_3d_view_match_numpy(name, type_):
    fn, _, positive = UNARY[name]
    h = Harness()
    x_val = rng_values(type_, (2, 3, 6), positive=positive, seed=3)
    x = h.var(type_, x_val, "x")
    view = x.slice(1, 5, 2)  # [2, 3, 4]
    out = h.read(getattr(popops, name)(h.graph, view, h.seq), "out")
    want = ref(type_, fn, x_val[:, :, 1:5]).astype(type_.numpy)
    assert out.shape() == [2, 3, 4]
    np.testing.assert_allclose(h.run()["out"], want, rtol=2e-7 if type_ is FLOAT else 0)


def test_logical_ops_on_bool():
    h = Harness()
    p_val = np.array([True, True, False, False, True, False, True])
    q_val = np.array([True, False, True, False, False, False, True])
    p, q = h.var(BOOL, p_val, "p"), h.var(BOOL, q_val, "q")
    h.read(popops.logicalAnd(h.graph, p, q, h.seq), "and")
    h.read(popops.logicalOr(h.graph, p, q, h.seq), "or")
    h.read(popops.logicalNot(h.graph, p, h.seq), "not")
    h.read(popops.eq(h.graph, p, q, h.seq), "eq")
    got = h.run()
    np.testing.assert_array_equal(got["and"], p_val & q_val)
    np.testing.assert_array_equal(got["or"], p_val | q_val)
    np.testing.assert_array_equal(got["not"], ~p_val)
    np.testing.assert_array_equal(got["eq"], p_val == q_val)


@pytest.mark.parametrize("type_", [FLOAT, HALF, INT])
def test_broadcast_row_scalar_tensor_and_number(type_):
    h = Harness()
    a_val = rng_values(type_, (3, 5), seed=4)
    row_val = rng_values(type_, (5,), seed=5)
    s_val = rng_values(type_, (1,), seed=6)
    a, row, s = h.var(type_, a_val, "a"), h.var(type_, row_val, "row"), h.var(type_, s_val, "s")
    h.read(popops.add(h.graph, a, row, h.seq), "row")
    h.read(popops.sub(h.graph, a, s, h.seq), "scalar")
    h.read(popops.mul(h.graph, a, 3, h.seq), "number")
    h.read(popops.sub(h.graph, s, a, h.seq), "scalar_first")
    got = h.run()
    three = np.asarray(3, type_.numpy)
    np.testing.assert_array_equal(got["row"], stored(type_, np.add, a_val, row_val))
    np.testing.assert_array_equal(got["scalar"], stored(type_, np.subtract, a_val, s_val))
    np.testing.assert_array_equal(got["number"], stored(type_, np.multiply, a_val, three))
    np.testing.assert_array_equal(got["scalar_first"], stored(type_, np.subtract, s_val, a_val))
    names = {h.graph._state.vertices[v].vtype.name for v in range(h.graph.getNumVertices())}
    assert f"popops::BroadcastScalar1D<popops::expr::BinaryOpType::SUBTRACT,{type_.name}>" in names
    assert f"popops::BroadcastScalar1D<popops::expr::BinaryOpType::MULTIPLY,{type_.name}>" in names


def test_output_is_mapped_like_the_full_shape_input():
    h = Harness()
    s = h.var(FLOAT, [2.0], "s", tile=5)
    b = h.var(FLOAT, np.arange(16), "b")
    out = popops.sub(h.graph, s, b, h.seq)
    assert h.graph.getTileMapping(out) == h.graph.getTileMapping(b)


@pytest.mark.parametrize("type_", [FLOAT, HALF, INT, UNSIGNED_INT])
def test_in_place_ops_into_a_transposed_view(type_):
    h = Harness()
    a_val = rng_values(type_, (4, 3), positive=True, seed=7)
    b_val = rng_values(type_, (3, 4), positive=True, seed=8)
    row_val = rng_values(type_, (4,), positive=True, seed=9)
    a, b, row = h.var(type_, a_val, "a"), h.var(type_, b_val, "b"), h.var(type_, row_val, "row")
    popops.addInPlace(h.graph, a.transpose(), b, h.seq)
    popops.mulInPlace(h.graph, a.transpose(), row, h.seq)
    popops.maxInPlace(h.graph, a, 5, h.seq)
    h.read(a, "a")
    want = stored(type_, np.add, a_val.T, b_val)
    want = stored(type_, np.multiply, want, row_val)
    want = stored(type_, np.maximum, want.T, np.asarray(5, type_.numpy))
    np.testing.assert_array_equal(h.run()["a"], want)
    names = {v.vtype.name for v in h.graph._state.vertices}
    assert any(
        n.startswith("popops::BinaryOp1DInPlace<popops::expr::BinaryOpType::ADD,") for n in names
    )


def test_unary_in_place():
    h = Harness()
    x_val = rng_values(FLOAT, (3, 5), seed=10)
    x = h.var(FLOAT, x_val, "x")
    popops.negInPlace(h.graph, x, h.seq)
    popops.expInPlace(h.graph, x[1], h.seq)
    h.read(x, "x")
    want = -x_val
    want[1] = np.exp(want[1])
    np.testing.assert_array_equal(h.run()["x"], want)


def test_map_expression_with_constants_and_operators():
    h = Harness()
    a_val, b_val = rng_values(FLOAT, (3, 5), seed=11), rng_values(FLOAT, (3, 5), seed=12)
    c_val = rng_values(FLOAT, (5,), positive=True, seed=13)
    a, b, c = h.var(FLOAT, a_val, "a"), h.var(FLOAT, b_val, "b"), h.var(FLOAT, c_val, "c")
    e1 = pe.Add(pe._1, pe.Mul(pe._2, pe.Sqrt(pe._3)))
    e2 = (pe._1 * 2.0 - pe._2) / pe._3
    e3 = pe.Max(pe._1, pe._2) > 0.5
    h.read(popops.map(h.graph, e1, [a, b, c], h.seq), "e1")
    h.read(popops.map(h.graph, e2, [a, b, c], h.seq), "e2")
    m3 = h.read(popops.map(h.graph, e3, [a, b], h.seq), "e3")
    popops.mapInPlace(h.graph, pe.Sub(pe._2, pe.Abs(pe._1)), [a, b], h.seq)
    h.read(a, "a")
    got = h.run()
    np.testing.assert_array_equal(got["e1"], a_val + b_val * np.sqrt(c_val))
    np.testing.assert_array_equal(got["e2"], (a_val * F32(2) - b_val) / c_val)
    assert m3.elementType() is BOOL
    np.testing.assert_array_equal(got["e3"], np.maximum(a_val, b_val) > F32(0.5))
    np.testing.assert_array_equal(got["a"], b_val - np.abs(a_val))


def test_map_half_rounds_every_operation():
    h = Harness()
    a_val = rng_values(HALF, (7,), seed=14)
    b_val = rng_values(HALF, (7,), seed=15)
    a, b = h.var(HALF, a_val, "a"), h.var(HALF, b_val, "b")
    h.read(popops.map(h.graph, pe._1 * pe._2 + pe._1, [a, b], h.seq), "m")
    # numpy's float16 arithmetic rounds each operation's result to float16
    np.testing.assert_array_equal(h.run()["m"], a_val * b_val + a_val)


def test_map_of_one_operation_uses_the_binary_op_vertices():
    h = Harness()
    a = h.var(FLOAT, np.arange(8), "a")
    b = h.var(FLOAT, np.arange(8), "b")
    popops.map(h.graph, pe._1 + pe._2, [a, b], h.seq)
    names = {v.vtype.name for v in h.graph._state.vertices}
    assert names == {"popops::BinaryOp1D<popops::expr::BinaryOpType::ADD,float>"}


@pytest.mark.parametrize(
    ("src", "dst", "values", "want"),
    [
        # 70000 is beyond float16's range (max 65504) and becomes inf
        (FLOAT, HALF, [1 / 3, 70000.0, -2.5], np.array([1 / 3, np.inf, -2.5], np.float16)),
        (FLOAT, INT, [2.9, -2.9, 7.0], np.int32([2, -2, 7])),  # C truncation
        (INT, FLOAT, [3, -4, 16777217], np.float32([3, -4, 16777216])),
        (HALF, FLOAT, [0.1, 2.0, -3.0], np.float32(np.float16([0.1, 2.0, -3.0]))),
        (BOOL, FLOAT, [True, False, True], np.float32([1, 0, 1])),
    ],
)
def test_cast(src, dst, values, want):
    h = Harness()
    x = h.var(src, values, "x")
    out = h.read(popops.cast(h.graph, x, dst, h.seq), "out")
    assert out.elementType() is dst
    np.testing.assert_array_equal(h.run()["out"], want)


@pytest.mark.parametrize("type_", [FLOAT, HALF, INT, UNSIGNED_INT])
def test_scaled_add_and_subtract(type_):
    h = Harness()
    a_val = rng_values(type_, (3, 5), positive=True, seed=16) * 10
    b_val = rng_values(type_, (3, 5), positive=True, seed=17)
    s_val = np.asarray([2], type_.numpy)
    a, b, s = h.var(type_, a_val, "a"), h.var(type_, b_val, "b"), h.var(type_, s_val, "s")
    popops.scaledAddTo(h.graph, a, b, 3, h.seq)
    popops.scaledSubtractFrom(h.graph, a, b, s, h.seq)
    h.read(a, "a")
    k = np.float32 if type_ is HALF else type_.numpy.type
    step1 = (a_val.astype(k) + k(3) * b_val.astype(k)).astype(type_.numpy)
    want = (step1.astype(k) - k(2) * b_val.astype(k)).astype(type_.numpy)
    np.testing.assert_array_equal(h.run()["a"], want)
    names = {v.vtype.name for v in h.graph._state.vertices}
    assert f"popops::ScaledAddSupervisor<{type_.name},{type_.name},{type_.name},false>" in names
    assert (
        f"popops::ScaledSubtractSupervisor<{type_.name},{type_.name},{type_.name},false>" in names
    )


def test_fill_and_zero_on_views():
    h = Harness()
    x = h.var(FLOAT, np.arange(12).reshape(3, 4), "x")
    y = h.var(INT, np.arange(7), "y")
    popops.fill(h.graph, x.slice([0, 1], [3, 3]), 2.5, h.seq)
    popops.zero(h.graph, y[2].expand([0]).broadcast(3, 0), h.seq)  # aliased view
    h.read(x, "x")
    h.read(y, "y")
    got = h.run()
    want = np.arange(12, dtype=F32).reshape(3, 4)
    want[:, 1:3] = 2.5
    np.testing.assert_array_equal(got["x"], want)
    np.testing.assert_array_equal(got["y"], [0, 1, 0, 3, 4, 5, 6])


def test_on_a_full_mk2_chip():
    h = Harness("ipu2")
    assert h.graph.getTarget().getNumTiles() == 1472
    a_val = rng_values(FLOAT, (5000,), seed=18)
    b_val = rng_values(FLOAT, (5000,), seed=19)
    a, b = h.var(FLOAT, a_val, "a"), h.var(FLOAT, b_val, "b")
    h.read(popops.add(h.graph, a, b, h.seq), "sum")
    h.read(popops.map(h.graph, pe.Tanh(pe._1) * pe._2, [a, b], h.seq), "map")
    got = h.run()
    np.testing.assert_array_equal(got["sum"], a_val + b_val)
    np.testing.assert_array_equal(got["map"], np.tanh(a_val) * b_val)


# ------------------------------------------------------------------- layout


def vertices_on(graph, tile):
    return [v.vtype.name for v in graph._state.vertices if v.tile == tile]


def test_single_region_tile_gets_one_1d_multivertex():
    h = Harness()
    a = h.var(FLOAT, np.arange(10), "a", tile=3)
    b = h.var(FLOAT, np.arange(10), "b", tile=3)
    popops.add(h.graph, a, b, h.seq)
    assert vertices_on(h.graph, 3) == ["popops::BinaryOp1D<popops::expr::BinaryOpType::ADD,float>"]
    assert h.graph.getNumVertices() == 1


def test_multi_region_tile_gets_balanced_2d_worker_vertices():
    h = Harness()
    g = h.graph
    # 16 chunks of 3 elements alternate between tile 0 and tile 1: 8 regions per tile.
    a = g.addVariable(FLOAT, [48], "a")
    b = g.addVariable(FLOAT, [48], "b")
    for k in range(16):
        g.setTileMapping(a.slice(3 * k, 3 * k + 3), k % 2)
        g.setTileMapping(b.slice(3 * k, 3 * k + 3), k % 2)
    popops.add(g, a, b, h.seq)
    on0 = [v for v in g._state.vertices if v.tile == 0]
    # poputil splitRegionsBetweenWorkers as binaryOpGeneral calls it: grain
    # max(VW=2, atomic store 4) = 4, at least 2 grains per vertex. 24 elements = 6 grains;
    # ceil(6/6) = 1 grain per vertex is raised to ceil(6 / (6 // 2)) = 2, so 3 vertices
    # of 8 elements, regions cut where the grains fall: [3,3,2], [1,3,3,1], [2,3,3].
    assert [v.vtype.name for v in on0] == [
        "popops::BinaryOp2D<popops::expr::BinaryOpType::ADD,float>"
    ] * 3
    assert [[ids.size for ids in v.fields["out"]] for v in on0] == [
        [3, 3, 2],
        [1, 3, 3, 1],
        [2, 3, 3],
    ]


def test_one_tile_add_of_1000_floats_takes_1697_cycles():
    h = Harness()
    a = h.var(FLOAT, np.ones(1000), "a", tile=2)
    b = h.var(FLOAT, np.ones(1000), "b", tile=2)
    h.read(popops.add(h.graph, a, b, h.seq, "AddOneTile"), "sum")
    got = h.run()
    np.testing.assert_array_equal(got["sum"], np.full(1000, 2, F32))
    records = [r for r in h.engine.getTrace().records if r.kind == "compute"]
    assert [r.name for r in records] == ["AddOneTile"]
    # W=6: 6 * (29 + ceil(ceil(1000/6)/2) * (1 + 2)) + 11 = 6 * (29 + 84*3) + 11
    assert int(records[0].tile_cycles[2]) == 6 * (29 + 84 * 3) + 11 == 1697


# ------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("a_shape", "b_name", "b_shape", "call", "pattern"),
    [
        # shapes that do not broadcast: both tensors named with their shapes
        ((3, 5), "beta", (4,), popops.add, r"'alpha' \[3, 5\].*'beta' \[4\]"),
        # a scale tensor of two elements
        (
            (3,),
            "scale2",
            (2,),
            lambda g, a, b, seq: popops.scaledAddTo(g, a, a, b, seq),
            r"'scale2' has shape \[2\].*exactly one element",
        ),
    ],
    ids=["shape-mismatch", "non-scalar-scale"],
)
def test_operand_shape_errors_name_the_tensors(a_shape, b_name, b_shape, call, pattern):
    h = Harness()
    a = h.var(FLOAT, np.zeros(a_shape), "alpha")
    b = h.var(FLOAT, np.zeros(b_shape), b_name)
    with pytest.raises(TensorError, match=pattern):
        call(h.graph, a, b, h.seq)


def test_type_mismatch_names_op_and_types():
    h = Harness()
    a = h.var(FLOAT, np.zeros(3), "a")
    i = h.var(INT, np.zeros(3), "i")
    with pytest.raises(TypeMismatchError, match=r"float, int"):
        popops.add(h.graph, a, i, h.seq)
    with pytest.raises(TypeMismatchError, match=r"SQRT does not support element type int"):
        popops.sqrt(h.graph, i, h.seq)
    with pytest.raises(TypeMismatchError, match=r"LOGICAL_AND.*float"):
        popops.logicalAnd(h.graph, a, a, h.seq)


def test_in_place_into_aliased_view_and_unmapped_input_are_rejected():
    h = Harness()
    a = h.var(FLOAT, np.zeros(3), "a")
    with pytest.raises(TensorError, match=r"more than once"):
        popops.addInPlace(h.graph, a[0].expand([0]).broadcast(3, 0), a, h.seq)
    u = h.graph.addVariable(FLOAT, [3], "unmapped")
    with pytest.raises(GraphError, match=r"A tensor 'unmapped' is not mapped"):
        popops.add(h.graph, u, a, h.seq)


def test_in_place_alias_check_on_unordered_views():
    """A reversed view (descending ids, none repeated) is a valid in-place operand; a
    view that names one element twice out of order is not."""
    h = Harness()
    a = h.var(FLOAT, np.zeros(3), "a")
    b = h.var(FLOAT, np.ones(3), "b")
    popops.addInPlace(h.graph, a.reverse(0), b, h.seq)
    twice = concat([a[2:3], a[0:1], a[2:3]])
    with pytest.raises(TensorError, match=r"more than once"):
        popops.addInPlace(h.graph, twice, b, h.seq)


def test_every_2d_vertex_kind_on_multi_region_tiles():
    h = Harness()
    g = h.graph
    a_val = rng_values(FLOAT, (40,), positive=True, seed=20)
    b_val = rng_values(FLOAT, (40,), positive=True, seed=21)
    a, b = h.var(FLOAT, a_val, "a"), h.var(FLOAT, b_val, "b")
    for t in (a, b):  # chunks of 5 alternate between tiles 0 and 1: 4 regions per tile
        for k in range(8):
            g.setTileMapping(t.slice(5 * k, 5 * k + 5), k % 2)
    h.read(popops.add(g, a, b, h.seq), "add")
    h.read(popops.mul(g, a, 2.0, h.seq), "scalar")
    h.read(popops.sqrt(g, a, h.seq), "sqrt")
    h.read(popops.map(g, pe._1 * pe._2 - pe._2, [a, b], h.seq), "map")
    h.read(popops.cast(g, a, HALF, h.seq), "cast")
    c = h.read(popops.add(g, a, b, h.seq), "scaled")
    popops.scaledAddTo(g, c, b, 0.5, h.seq)
    d = h.read(popops.mul(g, a, b, h.seq), "filled")
    popops.fill(g, d, 7.0, h.seq)
    got = h.run()
    np.testing.assert_array_equal(got["add"], a_val + b_val)
    np.testing.assert_array_equal(got["scalar"], a_val * F32(2))
    np.testing.assert_array_equal(got["sqrt"], np.sqrt(a_val))
    np.testing.assert_array_equal(got["map"], a_val * b_val - b_val)
    np.testing.assert_array_equal(got["cast"], a_val.astype(np.float16))
    np.testing.assert_array_equal(got["scaled"], (a_val + b_val) + F32(0.5) * b_val)
    np.testing.assert_array_equal(got["filled"], np.full(40, 7, F32))
    names = {v.vtype.name for v in g._state.vertices}
    assert {
        "popops::BinaryOp2D<popops::expr::BinaryOpType::ADD,float>",
        # 4 regions of 5: four BroadcastScalar1D cost 4 * ((20 + 1 * (1 + 1)) * 6 + 11)
        # = 572 < 6 * (20 + (2+28) + (6+28) + (6+28)) = 708 for the busiest 2-D worker
        # ([2, 5, 5]), so createVertexBinaryOpBroadcastScalar picks the multi-vertices.
        "popops::BroadcastScalar1D<popops::expr::BinaryOpType::MULTIPLY,float>",
        "popops::UnaryOp2D<popops::expr::UnaryOpType::SQRT,float>",
        "popops::Cast2D<float,half>",
        "popops::ScaledAdd2D<float,float,float,false>",
        "popops::Fill2d<float>",
    } <= names
    assert any(n.startswith("popops::map::") and "_MultiVertex" not in n for n in names)


def test_multi_region_compute_time_is_w_times_the_busiest_worker():
    h = Harness()
    g = h.graph
    a = h.var(FLOAT, np.ones(40), "a")
    b = h.var(FLOAT, np.ones(40), "b")
    for t in (a, b):  # 4 regions of 5 on tile 0 (and on tile 1): one worker vertex each
        for k in range(8):
            g.setTileMapping(t.slice(5 * k, 5 * k + 5), k % 2)
    popops.add(g, a, b, h.seq, "Add2D")
    h.run()
    record = next(r for r in h.engine.getTrace().records if r.kind == "compute")
    # 20 elements = 5 grains of 4, at least 2 grains per vertex: 2 vertices, grains
    # [0, 2) and [2, 5): rows [5, 3] and [2, 5, 5]. BinaryOp2D = 5 + Σ ceil(n/2) * (1+2):
    # 5 + 9 + 6 = 20 and 5 + 3 + 9 + 9 = 26 thread cycles; tile = W * busiest context.
    assert int(record.tile_cycles[0]) == 6 * (5 + 3 * 1 + 3 * 3 + 3 * 3)


def test_an_operand_outside_a_virtual_graph_is_named():
    g = Graph(IPUModel("tiny").createDevice().getTarget())
    vg = g.createVirtualGraph(0, 4)
    x = g.addVariable(FLOAT, [8], "x")
    g.setTileMapping(x, 6)  # a tile of the device, not of vg
    with pytest.raises(GraphError, match=r"popops\.add: element 0 of .* outside this virtual"):
        popops.add(vg, x, x, prog.Sequence())


def test_an_unmapped_element_is_named_before_elements_outside_a_virtual_graph():
    g = Graph(IPUModel("tiny").createDevice().getTarget())
    vg = g.createVirtualGraph(0, 4)
    x = g.addVariable(FLOAT, [8], "x")
    g.setTileMapping(x.slice(0, 7), 6)  # outside vg; element 7 not mapped at all
    with pytest.raises(GraphError, match=r"popops\.add: A tensor 'x' .*flat element 7 has no"):
        popops.add(vg, x, x, prog.Sequence())
    g.setTileMapping(x.slice(7, 8), 1)  # mapped: now only the tiles outside are refused
    with pytest.raises(GraphError, match=r"popops\.add: element 0 of .* outside this virtual"):
        popops.add(vg, x, x, prog.Sequence())
