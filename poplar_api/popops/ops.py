"""The elementwise operations of popops: names, supported types and numpy kernels.

Each :class:`OpDef` names a Poplibs operation (``"ADD"``, ``"EXPONENT"``, ...), the
element types it accepts, the type of its result and a numpy function applied to
whole arrays in the kernel dtype (float32 for HALF; the result is rounded to float16
when stored, as the codelet layer does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from poplar_api.errors import TypeMismatchError
from poplar_api.types import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Type

__all__ = [
    "BINARY_OPS",
    "SCALAR_ONLY_BINARY_OPS",
    "TERNARY_TYPES",
    "UNARY_OPS",
    "OpDef",
    "result_type",
]

_FLOATS = frozenset({FLOAT, HALF})
_NUMERIC = frozenset({FLOAT, HALF, INT, UNSIGNED_INT})
_SIGNED = frozenset({FLOAT, HALF, INT})
_BOOLS = frozenset({BOOL})


@dataclass(frozen=True)
class OpDef:
    """One elementwise operation.

    Attributes
    ----------
    name
        Poplibs operation name, used in vertex type names (``BinaryOp1D<ADD,float>``).
    arity
        1 (unary) or 2 (binary).
    types
        Input element types the operation supports.
    to_bool
        Whether the result is BOOL (comparisons, IS_FINITE/IS_INF/IS_NAN); otherwise
        it has the input type (``outputType`` in ``lib/popops/ElementWise.cpp``).
    fn
        numpy implementation over kernel-dtype arrays.
    """

    name: str
    arity: int
    types: frozenset[Type]
    to_bool: bool
    fn: Callable[..., np.ndarray]

    def out_type(self, in_type: Type) -> Type:
        """Result type for inputs of ``in_type``."""
        return BOOL if self.to_bool else in_type


def result_type(op: OpDef, types: list[Type], api: str) -> Type:
    """Check the operand types of ``op`` and return the result type.

    Raises
    ------
    TypeMismatchError
        Operands differ in type, or the op does not support their type.
    """
    names = ", ".join(t.name for t in types)
    if len(set(types)) > 1:
        raise TypeMismatchError(
            f"popops.{api}: operands have different element types ({names}); {op.name} "
            f"needs operands of one type; hint: cast one with popops.cast"
        )
    if types[0] not in op.types:
        supported = ", ".join(sorted(t.name for t in op.types))
        raise TypeMismatchError(
            f"popops.{api}: {op.name} does not support element type {types[0].name}; "
            f"supported types: {supported}"
        )
    return op.out_type(types[0])


def _int_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C-style integer division (truncates toward zero); x / 0 gives 0."""
    safe = np.where(b == 0, 1, b)
    if a.dtype.kind == "u":
        q = a // safe
    else:
        q = np.abs(a) // np.abs(safe)
        q = np.where((a < 0) != (safe < 0), -q, q)
    return np.where(b == 0, 0, q).astype(a.dtype, copy=False)


def _div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return _int_div(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b


def _float_fn(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    def wrapped(*arrays: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return fn(*arrays)

    return wrapped


def _sigmoid(x: np.ndarray) -> np.ndarray:
    one = x.dtype.type(1)
    return one / (one + np.exp(-x))


def _relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


def _binary(name: str, types: frozenset[Type], fn: Callable, to_bool: bool = False) -> OpDef:
    return OpDef(name, 2, types, to_bool, fn)


def _unary(name: str, types: frozenset[Type], fn: Callable) -> OpDef:
    return OpDef(name, 1, types, False, fn)


_INTS = frozenset({INT, UNSIGNED_INT})


def _int_rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """C ``x - (x / y) * y`` with the truncating division of :func:`_int_div`."""
    with np.errstate(over="ignore"):
        return (a - _int_div(a, b) * b).astype(a.dtype, copy=False)


def _rem(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu":
        return _int_rem(a, b)
    with np.errstate(all="ignore"):
        return np.fmod(a, b)


def _shift_count(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return b.astype(a.dtype, copy=False)


def _shift_left(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.left_shift(a, _shift_count(a, b))


def _shift_right(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(unsigned)x >> y``: a logical shift, also for INT (result cast back)."""
    u = a.astype(np.uint32)
    return np.right_shift(u, b.astype(np.uint32)).astype(a.dtype)


def _shift_right_sign_extend(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.right_shift(a, _shift_count(a, b))


def _bitwise_xnor(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.invert(np.bitwise_xor(a, b))


def _variance_to_inv_std_dev(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    one = a.dtype.type(1)
    return one / np.sqrt(a + b)


def _inv_std_dev_to_variance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    one = a.dtype.type(1)
    return one / (a * a) - b


def _round_half_away(x: np.ndarray) -> np.ndarray:
    """C ``round``: halves round away from zero (numpy's ``round`` rounds to even)."""
    with np.errstate(invalid="ignore"):
        mag = np.abs(x).astype(np.float64)
        whole = np.floor(mag)
        rounded = whole + (mag - whole >= 0.5)
    return np.copysign(rounded, x).astype(x.dtype)


def _inverse(x: np.ndarray) -> np.ndarray:
    return x.dtype.type(1) / x


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return x.dtype.type(1) / np.sqrt(x)


def _erf(x: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x).astype(x.dtype, copy=False)


def _gelu_erf(x: np.ndarray) -> np.ndarray:
    """``(1 + erf(x / sqrt 2)) * 0.5 * x`` (the codelet's host formula, in float)."""
    k = x.dtype.type(7.071067811865475e-01)
    return (x.dtype.type(1) + _erf(k * x)) * x.dtype.type(0.5) * x


def _as_uint32(x: np.ndarray) -> np.ndarray:
    return x.astype(np.uint32)


def _count_leading_zeros(x: np.ndarray) -> np.ndarray:
    """``x ? __builtin_clz(x) : 32`` on the 32-bit pattern."""
    exponent = np.frexp(_as_uint32(x).astype(np.float64))[1]
    return (32 - exponent).astype(x.dtype)


def _popcount(x: np.ndarray) -> np.ndarray:
    """``__builtin_popcount`` of the 32-bit pattern."""
    u = _as_uint32(x)
    count = getattr(np, "bitwise_count", None)
    if count is not None:
        return count(u).astype(x.dtype)
    bits = (u[..., None] >> np.arange(32, dtype=np.uint32)) & np.uint32(1)
    return bits.sum(axis=-1).astype(x.dtype)


def _unary_bool(name: str, types: frozenset[Type], fn: Callable) -> OpDef:
    return OpDef(name, 1, types, True, fn)


_CMP_TYPES = _NUMERIC | _BOOLS

#: Binary operations by Poplibs name (``include/popops/ExprOp.hpp`` ``BinaryOpType``),
#: with the element types ``lib/popops/codelets/elemwiseBinaryCodelets.cpp``
#: instantiates, restricted to those ipusim has.
BINARY_OPS: dict[str, OpDef] = {
    op.name: op
    for op in (
        _binary("ADD", _NUMERIC, np.add),
        _binary("ATAN2", _FLOATS, _float_fn(np.arctan2)),
        _binary("BITWISE_AND", _INTS, np.bitwise_and),
        _binary("BITWISE_OR", _INTS, np.bitwise_or),
        _binary("BITWISE_XOR", _INTS, np.bitwise_xor),
        _binary("BITWISE_XNOR", _INTS, _bitwise_xnor),
        _binary("SUBTRACT", _NUMERIC, np.subtract),
        _binary("MULTIPLY", _NUMERIC, np.multiply),
        _binary("DIVIDE", _NUMERIC, _div),
        _binary("MAXIMUM", _NUMERIC, np.maximum),
        _binary("MINIMUM", _NUMERIC, np.minimum),
        _binary("POWER", _FLOATS, _float_fn(np.power)),
        _binary("REMAINDER", _NUMERIC, _rem),
        _binary("SHIFT_LEFT", _INTS, _shift_left),
        _binary("SHIFT_RIGHT", _INTS, _shift_right),
        _binary("SHIFT_RIGHT_SIGN_EXTEND", frozenset({INT}), _shift_right_sign_extend),
        _binary("VARIANCE_TO_INV_STD_DEV", _FLOATS, _float_fn(_variance_to_inv_std_dev)),
        _binary("INV_STD_DEV_TO_VARIANCE", _FLOATS, _float_fn(_inv_std_dev_to_variance)),
        _binary("EQUAL", _CMP_TYPES, np.equal, True),
        _binary("NOT_EQUAL", _CMP_TYPES, np.not_equal, True),
        _binary("GREATER_THAN", _CMP_TYPES, np.greater, True),
        _binary("GREATER_THAN_EQUAL", _CMP_TYPES, np.greater_equal, True),
        _binary("LESS_THAN", _CMP_TYPES, np.less, True),
        _binary("LESS_THAN_EQUAL", _CMP_TYPES, np.less_equal, True),
        _binary("LOGICAL_AND", _BOOLS, np.logical_and),
        _binary("LOGICAL_OR", _BOOLS, np.logical_or),
    )
}

#: Binary ops that Poplibs only runs on the BroadcastScalar vertices (a one-element
#: second operand): ``binaryOpPerfInfo`` has no entry and no BinaryOp codelet exists.
SCALAR_ONLY_BINARY_OPS = frozenset({"VARIANCE_TO_INV_STD_DEV", "INV_STD_DEV_TO_VARIANCE"})

#: Unary operations by Poplibs name (``UnaryOpType``), with the element types
#: ``lib/popops/codelets/elemwiseUnaryCodelets.cpp`` instantiates (ipusim's types).
UNARY_OPS: dict[str, OpDef] = {
    op.name: op
    for op in (
        _unary("NEGATE", _SIGNED, np.negative),
        _unary("ABSOLUTE", _SIGNED, np.abs),
        _unary("ASIN", _FLOATS, _float_fn(np.arcsin)),
        _unary("BITWISE_NOT", _INTS, np.invert),
        _unary("CBRT", _FLOATS, _float_fn(np.cbrt)),
        _unary("CEIL", _FLOATS, np.ceil),
        _unary("COS", _FLOATS, _float_fn(np.cos)),
        _unary("COUNT_LEADING_ZEROS", _INTS, _count_leading_zeros),
        _unary("ERF", _FLOATS, _float_fn(_erf)),
        _unary("EXPONENT_MINUS_ONE", _FLOATS, _float_fn(np.expm1)),
        _unary("EXPONENT2", _FLOATS, _float_fn(np.exp2)),
        _unary("FLOOR", _FLOATS, np.floor),
        _unary("GELU_ERF", _FLOATS, _float_fn(_gelu_erf)),
        _unary("INVERSE", _FLOATS, _float_fn(_inverse)),
        _unary_bool("IS_FINITE", _FLOATS, np.isfinite),
        _unary_bool("IS_INF", _FLOATS, np.isinf),
        _unary_bool("IS_NAN", _FLOATS, np.isnan),
        _unary("LOGARITHM_ONE_PLUS", _FLOATS, _float_fn(np.log1p)),
        _unary("NEARBY_INT", _FLOATS, np.rint),
        _unary("POPCOUNT", _INTS, _popcount),
        _unary("ROUND", _FLOATS, _round_half_away),
        _unary("RSQRT", _FLOATS, _float_fn(_rsqrt)),
        _unary("SIGNUM", _SIGNED, np.sign),
        _unary("SIN", _FLOATS, _float_fn(np.sin)),
        _unary("TAN", _FLOATS, _float_fn(np.tan)),
        _unary("TRUNC", _FLOATS, np.trunc),
        _unary("SQUARE", _NUMERIC, np.square),
        _unary("EXPONENT", _FLOATS, _float_fn(np.exp)),
        _unary("LOGARITHM", _FLOATS, _float_fn(np.log)),
        _unary("SQRT", _FLOATS, _float_fn(np.sqrt)),
        _unary("TANH", _FLOATS, _float_fn(np.tanh)),
        _unary("SIGMOID", _FLOATS, _float_fn(_sigmoid)),
        _unary("RELU", _FLOATS, _relu),
        _unary("LOGICAL_NOT", _BOOLS, np.logical_not),
    )
}

#: Ternary operations (``TernaryOpType``): Poplibs name -> supported element types of
#: the first two operands (``popops::Select``/``popops::Clamp`` codelet instantiations).
TERNARY_TYPES: dict[str, frozenset[Type]] = {
    "SELECT": _NUMERIC | _BOOLS,
    "CLAMP": frozenset({FLOAT, HALF, INT}),
}
