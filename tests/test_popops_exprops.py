"""Every popops expression op against numpy, their vertices and errors.

Expected values are written here independently of the library: numpy on the stored
inputs in the kernel dtype (float32 for HALF, the result rounded to float16), C
semantics where Poplibs' codelets use them (``round`` away from zero, integer
remainder truncating, ``(unsigned)x >> y`` for SHIFT_RIGHT, ``clz(0) = 32``).
The ops' cycle estimates are checked against the Poplibs tables and formulas in
``test_popops_estimators_source.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from popops_harness import Harness, random_shape, random_values

from poplar_api import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, popops
from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.popops import expr as pe

U = "popops::expr::UnaryOpType::"
B = "popops::expr::BinaryOpType::"
FLOATS = (FLOAT, HALF)
INTS = (INT, UNSIGNED_INT)


def kernel(t, x):
    return np.asarray(x).astype(np.float32 if t is HALF else t.numpy)


def store(t, x):
    return np.asarray(x).astype(t.numpy)


def c_round(x):
    return np.array([math.copysign(math.floor(abs(v) + 0.5), v) if np.isfinite(v) else v
                     for v in np.ravel(x).astype(np.float64)]).reshape(np.shape(x))  # fmt: skip


def bits32(x):
    return [int(v) & 0xFFFFFFFF for v in np.ravel(x)]


def c_clz(x):
    return np.array([32 - v.bit_length() for v in bits32(x)]).reshape(np.shape(x))


def c_popcount(x):
    return np.array([bin(v).count("1") for v in bits32(x)]).reshape(np.shape(x))


def erf_ref(x):
    return np.vectorize(math.erf)(np.asarray(x, np.float64))


# name -> (types, reference over kernel values, input domain (low, high) for floats)
UNARY = {
    "asin": (FLOATS, np.arcsin, (-1, 1)),
    "cbrt": (FLOATS, np.cbrt, None),
    "ceil": (FLOATS, np.ceil, None),
    "cos": (FLOATS, np.cos, None),
    "erf": (FLOATS, erf_ref, None),
    "exp2": (FLOATS, np.exp2, None),
    "expm1": (FLOATS, np.expm1, None),
    "floor": (FLOATS, np.floor, None),
    "geluErf": (FLOATS, lambda x: 0.5 * x * (1 + erf_ref(x / math.sqrt(2))), None),
    "inv": (FLOATS, lambda x: 1 / x, (0.25, 4)),
    "log1p": (FLOATS, np.log1p, (-0.9, 4)),
    "nearbyint": (FLOATS, np.rint, None),
    "round": (FLOATS, c_round, None),
    "rsqrt": (FLOATS, lambda x: 1 / np.sqrt(x), (0.25, 4)),
    "sin": (FLOATS, np.sin, None),
    "tan": (FLOATS, np.tan, (-1.4, 1.4)),
    "trunc": (FLOATS, np.trunc, None),
    "signum": ((FLOAT, HALF, INT), np.sign, None),
    "bitwiseNot": (INTS, np.invert, None),
    "countLeadingZeros": (INTS, c_clz, None),
    "popcount": (INTS, c_popcount, None),
}
#: Poplibs op of each named function (for the vertex names).
UNARY_OP = {
    "asin": "ASIN", "cbrt": "CBRT", "ceil": "CEIL", "cos": "COS", "erf": "ERF",
    "exp2": "EXPONENT2", "expm1": "EXPONENT_MINUS_ONE", "floor": "FLOOR",
    "geluErf": "GELU_ERF", "inv": "INVERSE", "log1p": "LOGARITHM_ONE_PLUS",
    "nearbyint": "NEARBY_INT", "round": "ROUND", "rsqrt": "RSQRT", "sin": "SIN",
    "tan": "TAN", "trunc": "TRUNC", "signum": "SIGNUM", "bitwiseNot": "BITWISE_NOT",
    "countLeadingZeros": "COUNT_LEADING_ZEROS", "popcount": "POPCOUNT",
}  # fmt: skip


def check(t, got, want, name):
    if t in FLOATS:
        want = store(t, want).astype(np.float64)
        tol = 2e-3 if t is HALF else 2e-6
        np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol, err_msg=name)
    else:
        np.testing.assert_array_equal(got, store(t, want), err_msg=name)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("t", [FLOAT, HALF, INT, UNSIGNED_INT])
def test_unary_ops_equal_numpy(t, seed):
    h = Harness()
    expect = {}
    shape = random_shape(seed)
    for name, (types, fn, dom) in UNARY.items():
        if t not in types:
            continue
        low, high = dom if dom and t in FLOATS else (None, None)
        if t is INT and name in ("bitwiseNot", "countLeadingZeros", "popcount"):
            low, high = -(2**31), 2**31 - 1
        x = random_values(t, shape, seed + hash(name) % 97, low, high)
        a = h.var(t, x, f"{name}-in")
        h.read(getattr(popops, name)(h.graph, a, h.seq), name)
        with np.errstate(all="ignore"):
            expect[name] = fn(kernel(t, x))
        # in-place form too
        b = h.var(t, x, f"{name}-ip")
        getattr(popops, name + "InPlace")(h.graph, b, h.seq)
        h.read(b, f"{name}-ip")
        expect[f"{name}-ip"] = expect[name]
    got = h.run()
    for name, want in expect.items():
        check(t, got[name], want, name)


@pytest.mark.parametrize("t", FLOATS)
def test_is_finite_inf_nan_give_bool(t):
    h = Harness()
    x = np.array([1.0, -np.inf, np.inf, np.nan, 0.0, -3.5, 65504.0, 1e-3], np.float32)
    a = h.var(t, x, "x")
    for name in ("isFinite", "isInf", "isNaN"):
        out = getattr(popops, name)(h.graph, a, h.seq)
        assert out.elementType() is BOOL
        h.read(out, name)
    got = h.run()
    np.testing.assert_array_equal(got["isFinite"], np.isfinite(x))
    np.testing.assert_array_equal(got["isInf"], np.isinf(x))
    np.testing.assert_array_equal(got["isNaN"], np.isnan(x))
    assert f"popops::UnaryOp1D<{U}IS_FINITE,{t.name}>" in h.vertex_names()


def c_rem(a, b):
    return np.array([int(math.fmod(int(x), int(y))) for x, y in zip(a.ravel(), b.ravel(),
                     strict=True)]).reshape(a.shape)  # fmt: skip


def shr_logical(a, b):
    return np.array([(int(x) & 0xFFFFFFFF) >> int(y) for x, y in zip(a.ravel(), b.ravel(),
                     strict=True)]).reshape(a.shape)  # fmt: skip


def shl(a, b):
    return np.array([(int(x) << int(y)) & 0xFFFFFFFF for x, y in zip(a.ravel(), b.ravel(),
                     strict=True)]).reshape(a.shape)  # fmt: skip


def wrap(t, values):
    """Python ints as the 32-bit type (two's complement for INT)."""
    return np.asarray(values, np.int64).astype(np.uint32).astype(t.numpy)


BINARY = {
    "bitwiseAnd": (INTS, np.bitwise_and),
    "bitwiseOr": (INTS, np.bitwise_or),
    "bitwiseXor": (INTS, np.bitwise_xor),
    "bitwiseXnor": (INTS, lambda a, b: np.invert(np.bitwise_xor(a, b))),
    "shiftLeft": (INTS, shl),
    "shiftRight": (INTS, shr_logical),
    "shiftRightSignExtend": ((INT,), np.right_shift),
    "rem": ((FLOAT, HALF, INT, UNSIGNED_INT), None),
    "atan2": (FLOATS, np.arctan2),
}


def binary_inputs(name, t, shape, seed):
    a = random_values(t, shape, seed)
    if name.startswith("shift"):
        b = random_values(t, shape, seed + 1, 0, 32)
    elif name == "rem" and t in FLOATS:
        b = random_values(t, shape, seed + 1, 0.5, 3)
    elif name == "rem":
        b = random_values(t, shape, seed + 1, 1, 9)
        if t is INT:  # negative divisors too
            b = b * np.where(random_values(BOOL, shape, seed), 1, -1).astype(np.int32)
    else:
        b = random_values(t, shape, seed + 1)
    if t is INT and name.startswith("bitwise"):
        a = random_values(t, shape, seed, -(2**31), 2**31 - 1)
    return a, b


def binary_ref(name, t, a, b):
    fn = BINARY[name][1]
    if name == "rem":
        return np.fmod(kernel(t, a), kernel(t, b)) if t in FLOATS else c_rem(a, b)
    if name in ("shiftLeft", "shiftRight"):
        return wrap(t, fn(a, b))
    return fn(kernel(t, a), kernel(t, b))


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("t", [FLOAT, HALF, INT, UNSIGNED_INT])
def test_binary_ops_equal_numpy(t, seed):
    h = Harness()
    shape = random_shape(seed)
    expect = {}
    for name, (types, _) in BINARY.items():
        if t not in types:
            continue
        a, b = binary_inputs(name, t, shape, seed)
        ta, tb = h.var(t, a, f"{name}-a"), h.var(t, b, f"{name}-b")
        h.read(getattr(popops, name)(h.graph, ta, tb, h.seq), name)
        expect[name] = binary_ref(name, t, a, b)
        ti = h.var(t, a, f"{name}-ip")
        getattr(popops, name + "InPlace")(h.graph, ti, tb, h.seq)
        h.read(ti, f"{name}-ip")
        expect[f"{name}-ip"] = expect[name]
        # a one-element second operand: the BroadcastScalar vertices
        b0 = b.reshape(-1)[:1]
        ts = h.var(t, b0, f"{name}-s")
        h.read(getattr(popops, name)(h.graph, ta, ts, h.seq), f"{name}-s")
        expect[f"{name}-s"] = binary_ref(name, t, a, np.broadcast_to(b0.reshape(()), a.shape))
    got = h.run()
    for name, want in expect.items():
        check(t, got[name], want, name)
    names = h.vertex_names()
    for name, (types, _) in BINARY.items():
        if t in types:
            op = popops.__dict__[name].__doc__.split("``")[1]
            assert any(n.startswith("popops::BroadcastScalar") and f"{B}{op}," in n for n in names)


CMP = {"eq": np.equal, "neq": np.not_equal, "gt": np.greater, "gteq": np.greater_equal,
       "lt": np.less, "lteq": np.less_equal}  # fmt: skip


@pytest.mark.parametrize("t", [FLOAT, HALF, INT, UNSIGNED_INT, BOOL])
def test_comparisons_on_every_type(t):
    h = Harness()
    shape = random_shape(3 + len(t.name))
    a = random_values(t, shape, 5, 0, 4)  # small ranges: many ties
    b = random_values(t, shape, 6, 0, 4)
    ta, tb = h.var(t, a, "a"), h.var(t, b, "b")
    for name in CMP:
        out = getattr(popops, name)(h.graph, ta, tb, h.seq)
        assert out.elementType() is BOOL
        h.read(out, name)
    if t is BOOL:  # in-place comparisons exist for BOOL only (the result type)
        ti = h.var(t, a, "ip")
        popops.gtInPlace(h.graph, ti, tb, h.seq)
        h.read(ti, "ip")
    got = h.run()
    for name, fn in CMP.items():
        np.testing.assert_array_equal(got[name], fn(kernel(t, a), kernel(t, b)), err_msg=name)
    if t is BOOL:
        np.testing.assert_array_equal(got["ip"], a > b)


def test_variance_ops_need_a_scalar_and_match_numpy():
    h = Harness()
    x = random_values(FLOAT, [10], 2, 0.5, 3)
    a = h.var(FLOAT, x, "a")
    popops.varianceToInvStdDevInPlace(h.graph, a, 0.25, h.seq)
    h.read(a, "a")
    got = h.run()
    np.testing.assert_allclose(got["a"], 1 / np.sqrt(x + np.float32(0.25)), rtol=1e-6)
    eps = h.var(FLOAT, np.zeros([10]), "eps")
    with pytest.raises(TensorError, match=r"VARIANCE_TO_INV_STD_DEV.*one-element"):
        popops.varianceToInvStdDevInPlace(h.graph, a, eps, h.seq)


# ------------------------------------------------------------------ expressions
def test_expression_nodes_in_a_fused_map_equal_numpy():
    h = Harness()
    x = random_values(INT, [5, 7], 11, -(2**31), 2**31 - 1)
    y = random_values(INT, [5, 7], 12, 0, 31)
    tx, ty = h.var(INT, x, "x"), h.var(INT, y, "y")
    e = pe.BitwiseXor(pe.Shl(pe._1, pe._2), pe.BitwiseNot(pe._1)) % 7
    h.read(popops.map(h.graph, e, [tx, ty], h.seq), "int")
    f = random_values(FLOAT, [5, 7], 13)
    tf = h.var(FLOAT, f, "f")
    ef = pe.Select(pe.Round(pe._1), pe.Atan2(pe._1, 2.0), pe.IsFinite(pe.Inv(pe._1)) & (pe._1 > 0))
    h.read(popops.map(h.graph, ef, [tf], h.seq), "float")
    got = h.run()
    want = np.bitwise_xor(wrap(INT, shl(x, y)), np.invert(x))
    np.testing.assert_array_equal(got["int"], c_rem(want, np.full_like(want, 7)))
    cond = np.isfinite(1 / f) & (f > 0)
    np.testing.assert_allclose(
        got["float"], np.where(cond, c_round(f), np.arctan2(f, 2)), rtol=1e-6
    )
    assert any(n.startswith("popops::map::") for n in h.vertex_names())


# ------------------------------------------------------------------ map broadcasting
def test_single_op_map_broadcasts_both_operands():
    h = Harness()
    a, b = np.arange(3.0).reshape(3, 1), np.arange(4.0).reshape(1, 4)
    ta, tb = h.var(FLOAT, a, "a"), h.var(FLOAT, b, "b")
    out = popops.map(h.graph, pe._1 + pe._2, [ta, tb], h.seq)
    assert out.shape() == [3, 4]
    h.read(out, "sum")
    out2 = popops.map(h.graph, pe.Exp(pe._1) * pe._2, [ta, tb], h.seq)
    h.read(out2, "fused")
    got = h.run()
    np.testing.assert_array_equal(got["sum"], a + b)
    np.testing.assert_allclose(got["fused"], np.exp(a.astype(np.float32)) * b, rtol=1e-6)


def test_map_uses_only_the_operands_it_names():
    h = Harness()
    a = random_values(FLOAT, [4, 3], 1)
    ta, tb = h.var(FLOAT, a, "a"), h.var(FLOAT, np.zeros([7]), "b")  # b: unused, other shape
    out = popops.map(h.graph, pe.Neg(pe._1), [ta, tb], h.seq)
    assert out.shape() == [4, 3]
    copy = popops.map(h.graph, pe._1, [ta, tb], h.seq)
    assert copy.shape() == [4, 3]
    h.read(out, "neg")
    h.read(copy, "copy")
    got = h.run()
    np.testing.assert_array_equal(got["neg"], -a)
    np.testing.assert_array_equal(got["copy"], a)


def test_map_in_place_runs_the_leftmost_path_in_place():
    h = Harness()
    a, b = random_values(FLOAT, [6], 1), random_values(FLOAT, [6], 2)
    ta, tb = h.var(FLOAT, a, "a"), h.var(FLOAT, b, "b")
    c = h.var(FLOAT, np.zeros([1, 6]), "c")
    popops.mapInPlace(h.graph, pe.Sub(pe._1, pe._2), [ta, tb], h.seq)
    popops.mapInPlace(h.graph, pe._2 * 3.0, [tb, ta], h.seq)  # _1 unused: computed, copied
    popops.mapInPlace(h.graph, pe.Add(pe._1, pe._2), [c, tb], h.seq)
    for t, n in ((ta, "a"), (tb, "b"), (c, "c")):
        h.read(t, n)
    names = h.vertex_names()
    got = h.run()
    np.testing.assert_array_equal(got["a"], a - b)
    np.testing.assert_allclose(got["b"], (a - b) * np.float32(3), rtol=1e-6)
    np.testing.assert_allclose(got["c"], ((a - b) * np.float32(3)).reshape(1, 6), rtol=1e-6)
    assert f"popops::BinaryOp1DInPlace<{B}SUBTRACT,float>" in names


def test_map_shape_errors_name_both_shapes():
    h = Harness()
    ta, tb = h.var(FLOAT, np.zeros([3, 2]), "a"), h.var(FLOAT, np.zeros([4]), "b")
    with pytest.raises(TensorError, match=r"\[3, 2\].*\[4\]"):
        popops.map(h.graph, pe._1 + pe._2, [ta, tb], h.seq)
    with pytest.raises(TensorError, match=r"\[3, 2\].*\[4\]"):
        popops.map(h.graph, pe.Exp(pe._1) + pe._2, [ta, tb], h.seq)


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize(
    ("fn", "t", "pattern"),
    [
        ("bitwiseAnd", FLOAT, r"BITWISE_AND does not support element type float.*int"),
        ("shiftLeft", HALF, r"SHIFT_LEFT does not support element type half"),
        ("shiftRightSignExtend", UNSIGNED_INT, r"SHIFT_RIGHT_SIGN_EXTEND.*unsigned int"),
        ("atan2", INT, r"ATAN2 does not support element type int.*float, half"),
        ("rem", BOOL, r"REMAINDER does not support element type bool"),
    ],
)
def test_bad_types_are_named(fn, t, pattern):
    h = Harness()
    a = h.var(t, np.zeros([4]), "a")
    with pytest.raises(TypeMismatchError, match=pattern):
        getattr(popops, fn)(h.graph, a, a, h.seq)


def test_bad_unary_input_is_named():
    h = Harness()
    f = h.var(FLOAT, np.zeros([4]), "f")
    i = h.var(INT, np.zeros([4]), "i")
    with pytest.raises(TypeMismatchError, match=r"POPCOUNT does not support element type float"):
        popops.popcount(h.graph, f, h.seq)
    with pytest.raises(TypeMismatchError, match=r"IS_FINITE does not support element type int"):
        popops.isFinite(h.graph, i, h.seq)
    with pytest.raises(TypeMismatchError, match=r"operands have different element types"):
        popops.bitwiseOr(h.graph, i, h.var(UNSIGNED_INT, np.zeros([4]), "u"), h.seq)
    with pytest.raises(GraphError, match=r"A must be a Tensor"):
        popops.ceil(h.graph, [1.0], h.seq)
