"""Expression trees for ``popops.map``: placeholders, constants and operations.

Build an expression from the placeholders ``_1`` .. ``_4`` (the 1st..4th tensor
passed to ``map``), :class:`Const` and operation nodes, or with Python operators::

    from poplar_api.popops import expr as pe
    e = pe.Add(pe._1, pe.Mul(pe._2, pe.Const(3.0)))   # a + b * 3
    e = pe._1 + pe._2 * 3.0                           # the same
    e = pe.Exp(-pe._1) > 0.5                          # BOOL result

A constant without a type takes the type of the other operand of its operation.
Class names are Poplibs' (``include/popops/Expr.hpp``): every ``UnaryOpType``,
``BinaryOpType`` and ``TernaryOpType`` has one (``Select(a, b, cond)``,
``Clamp(x, lo, hi)``, ``BitwiseAnd``, ``Shl``, ``Rem``, ...). Python operators: ``+ - *
/ ** % << >> ^``, comparisons, unary ``-`` and ``abs``; ``&``, ``|`` and ``~`` build
the *logical* ops (And, Or, Not), as Python has no ``&&``/``||``/``!``: use
``BitwiseAnd``/``BitwiseOr``/``BitwiseNot`` for the bitwise ones.
Expressions are immutable; :meth:`Expr.key` is a canonical string used to name and
cache the generated vertices.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.popops.ops import BINARY_OPS, TERNARY_TYPES, UNARY_OPS, result_type
from poplar_api.types import BOOL, FLOAT, HALF, INT, Type

__all__ = [
    "Abs", "Add", "And", "Asin", "Atan2", "BinaryOp", "BitwiseAnd", "BitwiseNot",
    "BitwiseOr", "BitwiseXnor", "BitwiseXor", "Cast", "Cbrt", "Ceil", "Clamp", "Clz",
    "Const", "Cos", "Div", "Divide", "Equal", "Erf", "Exp", "Exp2", "Expm1", "Expr",
    "Floor", "GeluErf", "Gt", "Gte", "Inv", "InvStdDevToVariance", "IsFinite", "IsInf",
    "IsNaN", "Log", "Log1p", "Lt", "Lte", "Max", "Min", "Mul", "NearbyInt", "Neg", "Not",
    "NotEqual", "Or", "PlaceHolder", "Popcount", "Pow", "Relu", "Rem", "Round", "Rsqrt",
    "Select", "Shl", "Shr", "ShrSE", "Sigmoid", "Signum", "Sin", "Sqrt", "Square", "Sub",
    "Tan", "Tanh", "TernaryOp", "Trunc", "UnaryOp", "VarianceToInvStdDev", "_1", "_2",
    "_3", "_4", "as_expr",
]  # fmt: skip


def as_expr(value: Any) -> Expr:
    """``value`` as an expression: expressions unchanged, numbers as :class:`Const`."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, bool | int | float | np.number | np.bool_):
        return Const(value)
    raise GraphError(
        f"popops.expr: {value!r} ({type(value).__name__}) is not an expression; use "
        f"placeholders _1.._4, Const(value) or operation nodes such as Add(_1, _2)"
    )


class Expr:
    """Base class of expression nodes; Python operators build operation nodes."""

    def key(self) -> str:
        """Canonical text of the expression."""
        raise NotImplementedError

    def placeholders(self) -> set[int]:
        """1-based indices of the placeholders used."""
        raise NotImplementedError

    def ops(self) -> list[tuple[str, bool]]:
        """(op name, is binary) of every operation node, in evaluation order."""
        raise NotImplementedError

    def evaluate(
        self, arrays: list[np.ndarray], types: list[Type], want: Type | None = None
    ) -> tuple[np.ndarray, Type]:
        """Value (kernel dtype) and type of the expression over the operand arrays."""
        raise NotImplementedError

    def result_type(self, types: list[Type]) -> Type:
        """Type of the expression's result for operands of ``types``."""
        empty = [np.zeros(1, t.kernel_numpy) for t in types]
        return self.evaluate(empty, types)[1]

    def __repr__(self) -> str:
        return self.key()

    # Python operators -------------------------------------------------------
    def __add__(self, o: Any) -> Expr:
        return Add(self, o)

    def __radd__(self, o: Any) -> Expr:
        return Add(o, self)

    def __sub__(self, o: Any) -> Expr:
        return Sub(self, o)

    def __rsub__(self, o: Any) -> Expr:
        return Sub(o, self)

    def __mul__(self, o: Any) -> Expr:
        return Mul(self, o)

    def __rmul__(self, o: Any) -> Expr:
        return Mul(o, self)

    def __truediv__(self, o: Any) -> Expr:
        return Div(self, o)

    def __rtruediv__(self, o: Any) -> Expr:
        return Div(o, self)

    def __pow__(self, o: Any) -> Expr:
        return Pow(self, o)

    def __neg__(self) -> Expr:
        return Neg(self)

    def __abs__(self) -> Expr:
        return Abs(self)

    def __lt__(self, o: Any) -> Expr:
        return Lt(self, o)

    def __le__(self, o: Any) -> Expr:
        return Lte(self, o)

    def __gt__(self, o: Any) -> Expr:
        return Gt(self, o)

    def __ge__(self, o: Any) -> Expr:
        return Gte(self, o)

    def __and__(self, o: Any) -> Expr:
        return And(self, o)

    def __or__(self, o: Any) -> Expr:
        return Or(self, o)

    def __invert__(self) -> Expr:
        return Not(self)

    def __xor__(self, o: Any) -> Expr:
        return BitwiseXor(self, o)

    def __rxor__(self, o: Any) -> Expr:
        return BitwiseXor(o, self)

    def __mod__(self, o: Any) -> Expr:
        return Rem(self, o)

    def __rmod__(self, o: Any) -> Expr:
        return Rem(o, self)

    def __lshift__(self, o: Any) -> Expr:
        return Shl(self, o)

    def __rshift__(self, o: Any) -> Expr:
        return Shr(self, o)


def _round(values: np.ndarray, t: Type) -> np.ndarray:
    """Values of type ``t`` as stored then reloaded (HALF rounds to float16)."""
    if t is HALF:
        return values.astype(np.float16).astype(np.float32)
    return values.astype(t.kernel_numpy, copy=False)


class PlaceHolder(Expr):
    """The ``index``-th (1-based) tensor passed to ``map``."""

    def __init__(self, index: int) -> None:
        if isinstance(index, bool) or not isinstance(index, int) or index < 1:
            raise GraphError(f"PlaceHolder index must be an int >= 1, got {index!r}")
        self.index = index

    def key(self) -> str:
        return f"_{self.index}"

    def placeholders(self) -> set[int]:
        return {self.index}

    def ops(self) -> list[tuple[str, bool]]:
        return []

    def evaluate(self, arrays, types, want=None):
        if self.index > len(arrays):
            raise GraphError(
                f"popops.map: expression uses placeholder _{self.index} but only "
                f"{len(arrays)} tensor(s) were given"
            )
        return arrays[self.index - 1], types[self.index - 1]


class Const(Expr):
    """A constant; without ``type`` it takes the type of the other operand."""

    def __init__(self, value: Any, type: Type | None = None) -> None:
        if type is not None and not isinstance(type, Type):
            raise TypeMismatchError(f"Const type must be a poplar_api Type, got {type!r}")
        self.value = value.item() if isinstance(value, np.generic) else value
        self.type = type

    def key(self) -> str:
        suffix = f":{self.type.name}" if self.type is not None else ""
        return f"{self.value!r}{suffix}"

    def placeholders(self) -> set[int]:
        return set()

    def ops(self) -> list[tuple[str, bool]]:
        return []

    def default_type(self) -> Type:
        if self.type is not None:
            return self.type
        if isinstance(self.value, bool):
            return BOOL
        return INT if isinstance(self.value, int) else FLOAT

    def evaluate(self, arrays, types, want=None):
        t = self.type or want or self.default_type()
        n = max((a.shape[0] for a in arrays), default=1)
        with np.errstate(all="ignore"):
            value = np.asarray(self.value).astype(t.numpy)
        return np.full(n, value, dtype=t.kernel_numpy), t


class UnaryOp(Expr):
    """An operation on one operand; subclasses set ``OP`` (a Poplibs name)."""

    OP = ""

    def __init__(self, a: Any) -> None:
        self.a = as_expr(a)

    def key(self) -> str:
        return f"{self.OP}({self.a.key()})"

    def placeholders(self) -> set[int]:
        return self.a.placeholders()

    def ops(self) -> list[tuple[str, bool]]:
        return [*self.a.ops(), (self.OP, False)]

    def evaluate(self, arrays, types, want=None):
        value, t = self.a.evaluate(arrays, types, want)
        op = UNARY_OPS[self.OP]
        out_t = result_type(op, [t], f"map ({self.key()})")
        return _round(op.fn(value), out_t), out_t


class BinaryOp(Expr):
    """An operation on two operands; subclasses set ``OP`` (a Poplibs name)."""

    OP = ""

    def __init__(self, a: Any, b: Any) -> None:
        self.a = as_expr(a)
        self.b = as_expr(b)

    def key(self) -> str:
        return f"{self.OP}({self.a.key()},{self.b.key()})"

    def placeholders(self) -> set[int]:
        return self.a.placeholders() | self.b.placeholders()

    def ops(self) -> list[tuple[str, bool]]:
        return [*self.a.ops(), *self.b.ops(), (self.OP, True)]

    def evaluate(self, arrays, types, want=None):
        op = BINARY_OPS[self.OP]
        hint = None if op.to_bool or op.name.startswith("LOGICAL") else want
        if isinstance(self.a, Const) and self.a.type is None:
            vb, tb = self.b.evaluate(arrays, types, hint)
            va, ta = self.a.evaluate(arrays, types, tb)
        else:
            va, ta = self.a.evaluate(arrays, types, hint)
            vb, tb = self.b.evaluate(arrays, types, ta)
        out_t = result_type(op, [ta, tb], f"map ({self.key()})")
        return _round(op.fn(va, vb), out_t), out_t


class TernaryOp(Expr):
    """An operation on three operands (``popops::expr::TernaryOp``): SELECT or CLAMP.

    ``Select(a, b, cond)`` is ``cond ? a : b`` (``cond`` BOOL); ``Clamp(x, lo, hi)`` is
    ``min(max(x, lo), hi)``. The first two operands share one type (Clamp's third
    too); an untyped constant takes the type of the other value operand.
    """

    OP = ""

    def __init__(self, a: Any, b: Any, c: Any) -> None:
        self.a = as_expr(a)
        self.b = as_expr(b)
        self.c = as_expr(c)

    def key(self) -> str:
        return f"{self.OP}({self.a.key()},{self.b.key()},{self.c.key()})"

    def placeholders(self) -> set[int]:
        return self.a.placeholders() | self.b.placeholders() | self.c.placeholders()

    def ops(self) -> list[tuple[str, bool]]:
        return [*self.a.ops(), *self.b.ops(), *self.c.ops(), (self.OP, True)]

    def evaluate(self, arrays, types, want=None):
        untyped_a = isinstance(self.a, Const) and self.a.type is None
        if untyped_a:
            vb, tb = self.b.evaluate(arrays, types, want)
            va, ta = self.a.evaluate(arrays, types, tb)
        else:
            va, ta = self.a.evaluate(arrays, types, want)
            vb, tb = self.b.evaluate(arrays, types, ta)
        select = self.OP == "SELECT"
        vc, tc = self.c.evaluate(arrays, types, BOOL if select else ta)
        where = f"map ({self.key()})"
        if ta != tb:
            raise TypeMismatchError(
                f"popops.{where}: the first two operands of {self.OP} differ in type "
                f"({ta.name}, {tb.name}); hint: cast one with Cast(x, type)"
            )
        want3 = BOOL if select else ta
        if tc != want3:
            raise TypeMismatchError(
                f"popops.{where}: the third operand of {self.OP} is {tc.name}; it must be "
                f"{want3.name}"
            )
        if ta not in TERNARY_TYPES[self.OP]:
            supported = ", ".join(sorted(t.name for t in TERNARY_TYPES[self.OP]))
            raise TypeMismatchError(
                f"popops.{where}: {self.OP} does not support element type {ta.name}; "
                f"supported types: {supported}"
            )
        if select:
            return np.where(vc.astype(bool), va, vb), ta
        return np.minimum(np.maximum(va, vb), vc), ta


class Cast(Expr):
    """Convert the operand to ``type``."""

    def __init__(self, a: Any, type: Type) -> None:
        if not isinstance(type, Type):
            raise TypeMismatchError(f"Cast type must be a poplar_api Type, got {type!r}")
        self.a = as_expr(a)
        self.type = type

    def key(self) -> str:
        return f"CAST({self.a.key()},{self.type.name})"

    def placeholders(self) -> set[int]:
        return self.a.placeholders()

    def ops(self) -> list[tuple[str, bool]]:
        return [*self.a.ops(), ("CAST", False)]

    def evaluate(self, arrays, types, want=None):
        value, _ = self.a.evaluate(arrays, types)
        with np.errstate(all="ignore"):
            return _round(value.astype(self.type.numpy), self.type), self.type


def _unary_class(name: str, op: str) -> type[UnaryOp]:
    cls = type(name, (UnaryOp,), {"OP": op, "__doc__": f"``{op}`` of the operand."})
    cls.__module__ = __name__
    return cls


def _binary_class(name: str, op: str) -> type[BinaryOp]:
    cls = type(name, (BinaryOp,), {"OP": op, "__doc__": f"``{op}`` of the two operands."})
    cls.__module__ = __name__
    return cls


def _ternary_class(name: str, op: str, doc: str) -> type[TernaryOp]:
    cls = type(name, (TernaryOp,), {"OP": op, "__doc__": doc})
    cls.__module__ = __name__
    return cls


Neg = _unary_class("Neg", "NEGATE")
Abs = _unary_class("Abs", "ABSOLUTE")
Square = _unary_class("Square", "SQUARE")
Exp = _unary_class("Exp", "EXPONENT")
Log = _unary_class("Log", "LOGARITHM")
Sqrt = _unary_class("Sqrt", "SQRT")
Tanh = _unary_class("Tanh", "TANH")
Sigmoid = _unary_class("Sigmoid", "SIGMOID")
Relu = _unary_class("Relu", "RELU")
Not = _unary_class("Not", "LOGICAL_NOT")
Asin = _unary_class("Asin", "ASIN")
BitwiseNot = _unary_class("BitwiseNot", "BITWISE_NOT")
Cbrt = _unary_class("Cbrt", "CBRT")
Ceil = _unary_class("Ceil", "CEIL")
Clz = _unary_class("Clz", "COUNT_LEADING_ZEROS")
Cos = _unary_class("Cos", "COS")
Erf = _unary_class("Erf", "ERF")
Exp2 = _unary_class("Exp2", "EXPONENT2")
Expm1 = _unary_class("Expm1", "EXPONENT_MINUS_ONE")
Floor = _unary_class("Floor", "FLOOR")
GeluErf = _unary_class("GeluErf", "GELU_ERF")
Inv = _unary_class("Inv", "INVERSE")
IsFinite = _unary_class("IsFinite", "IS_FINITE")
IsInf = _unary_class("IsInf", "IS_INF")
IsNaN = _unary_class("IsNaN", "IS_NAN")
Log1p = _unary_class("Log1p", "LOGARITHM_ONE_PLUS")
NearbyInt = _unary_class("NearbyInt", "NEARBY_INT")
Popcount = _unary_class("Popcount", "POPCOUNT")
Round = _unary_class("Round", "ROUND")
Rsqrt = _unary_class("Rsqrt", "RSQRT")
Signum = _unary_class("Signum", "SIGNUM")
Sin = _unary_class("Sin", "SIN")
Tan = _unary_class("Tan", "TAN")
Trunc = _unary_class("Trunc", "TRUNC")

Add = _binary_class("Add", "ADD")
Sub = _binary_class("Sub", "SUBTRACT")
Mul = _binary_class("Mul", "MULTIPLY")
Div = _binary_class("Div", "DIVIDE")
Max = _binary_class("Max", "MAXIMUM")
Min = _binary_class("Min", "MINIMUM")
Pow = _binary_class("Pow", "POWER")
Equal = _binary_class("Equal", "EQUAL")
NotEqual = _binary_class("NotEqual", "NOT_EQUAL")
Gt = _binary_class("Gt", "GREATER_THAN")
Gte = _binary_class("Gte", "GREATER_THAN_EQUAL")
Lt = _binary_class("Lt", "LESS_THAN")
Lte = _binary_class("Lte", "LESS_THAN_EQUAL")
And = _binary_class("And", "LOGICAL_AND")
Or = _binary_class("Or", "LOGICAL_OR")
Divide = Div
Atan2 = _binary_class("Atan2", "ATAN2")
BitwiseAnd = _binary_class("BitwiseAnd", "BITWISE_AND")
BitwiseOr = _binary_class("BitwiseOr", "BITWISE_OR")
BitwiseXor = _binary_class("BitwiseXor", "BITWISE_XOR")
BitwiseXnor = _binary_class("BitwiseXnor", "BITWISE_XNOR")
Rem = _binary_class("Rem", "REMAINDER")
Shl = _binary_class("Shl", "SHIFT_LEFT")
Shr = _binary_class("Shr", "SHIFT_RIGHT")
ShrSE = _binary_class("ShrSE", "SHIFT_RIGHT_SIGN_EXTEND")
InvStdDevToVariance = _binary_class("InvStdDevToVariance", "INV_STD_DEV_TO_VARIANCE")
VarianceToInvStdDev = _binary_class("VarianceToInvStdDev", "VARIANCE_TO_INV_STD_DEV")

Select = _ternary_class("Select", "SELECT", "``cond ? a : b`` elementwise: Select(a, b, cond).")
Clamp = _ternary_class("Clamp", "CLAMP", "``min(max(x, lo), hi)`` elementwise: Clamp(x, lo, hi).")

_1 = PlaceHolder(1)
_2 = PlaceHolder(2)
_3 = PlaceHolder(3)
_4 = PlaceHolder(4)
