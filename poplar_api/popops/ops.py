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

__all__ = ["BINARY_OPS", "UNARY_OPS", "OpDef", "result_type"]

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
        Whether the result is BOOL (comparisons); otherwise it has the input type.
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


_CMP_TYPES = _NUMERIC | _BOOLS

#: Binary operations by Poplibs name.
BINARY_OPS: dict[str, OpDef] = {
    op.name: op
    for op in (
        _binary("ADD", _NUMERIC, np.add),
        _binary("SUBTRACT", _NUMERIC, np.subtract),
        _binary("MULTIPLY", _NUMERIC, np.multiply),
        _binary("DIVIDE", _NUMERIC, _div),
        _binary("MAXIMUM", _NUMERIC, np.maximum),
        _binary("MINIMUM", _NUMERIC, np.minimum),
        _binary("POWER", _FLOATS, _float_fn(np.power)),
        _binary("EQUAL", _CMP_TYPES, np.equal, True),
        _binary("NOT_EQUAL", _CMP_TYPES, np.not_equal, True),
        _binary("GREATER_THAN", _NUMERIC, np.greater, True),
        _binary("GREATER_THAN_EQUAL", _NUMERIC, np.greater_equal, True),
        _binary("LESS_THAN", _NUMERIC, np.less, True),
        _binary("LESS_THAN_EQUAL", _NUMERIC, np.less_equal, True),
        _binary("LOGICAL_AND", _BOOLS, np.logical_and),
        _binary("LOGICAL_OR", _BOOLS, np.logical_or),
    )
}

#: Unary operations by Poplibs name.
UNARY_OPS: dict[str, OpDef] = {
    op.name: op
    for op in (
        _unary("NEGATE", _SIGNED, np.negative),
        _unary("ABSOLUTE", _SIGNED, np.abs),
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
