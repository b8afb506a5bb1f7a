"""A Poplibs-like ``popops``: elementwise operations, map expressions, fill and casts.

Functions keep Poplar's names and argument order, e.g.
``popops.add(graph, A, B, prog, debugName="")`` returns a new tensor and appends one
``Execute`` to ``prog`` (a :class:`~poplar_api.program.Sequence`); the ``...InPlace``
forms write into their first operand. Comparisons return BOOL tensors.
"""

# Poplar's camelCase names (logicalAnd, addInPlace, ...) are the public API here.
# ruff: noqa: N816

from __future__ import annotations

from collections.abc import Callable
from numbers import Number

from poplar_api.graph import Graph
from poplar_api.popops import expr
from poplar_api.popops.elementwise import (
    addCodelets,
    binary_op,
    cast,
    fill,
    scaledAddTo,
    scaledSubtractFrom,
    unary_op,
    zero,
)
from poplar_api.popops.maps import map, mapInPlace
from poplar_api.popops.reduce import Operation, ReduceParams, reduce, reduceWithOutput  # noqa: F401
from poplar_api.program import Sequence
from poplar_api.tensor import Tensor

BinaryFn = Callable[..., Tensor]
UnaryFn = Callable[..., Tensor]


def _binary(api: str, op: str) -> BinaryFn:
    def fn(
        graph: Graph, A: Tensor, B: Tensor | Number, prog: Sequence, debugName: str = ""
    ) -> Tensor:
        return binary_op(graph, op, A, B, prog, debugName, api)

    fn.__name__ = fn.__qualname__ = api
    fn.__doc__ = (
        f"A new tensor holding ``{op}`` of ``A`` and ``B`` elementwise (``B`` may be a "
        f"number, a one-element tensor or broadcast to ``A``)."
    )
    return fn


def _binary_in_place(api: str, op: str) -> Callable[..., None]:
    def fn(
        graph: Graph, A: Tensor, B: Tensor | Number, prog: Sequence, debugName: str = ""
    ) -> None:
        binary_op(graph, op, A, B, prog, debugName, api, in_place=True)

    fn.__name__ = fn.__qualname__ = api
    fn.__doc__ = f"``A = {op}(A, B)`` elementwise, written into ``A``."
    return fn


def _unary(api: str, op: str) -> UnaryFn:
    def fn(graph: Graph, A: Tensor, prog: Sequence, debugName: str = "") -> Tensor:
        return unary_op(graph, op, A, prog, debugName, api)

    fn.__name__ = fn.__qualname__ = api
    fn.__doc__ = f"A new tensor holding ``{op}`` of ``A`` elementwise."
    return fn


def _unary_in_place(api: str, op: str) -> Callable[..., None]:
    def fn(graph: Graph, A: Tensor, prog: Sequence, debugName: str = "") -> None:
        unary_op(graph, op, A, prog, debugName, api, in_place=True)

    fn.__name__ = fn.__qualname__ = api
    fn.__doc__ = f"``A = {op}(A)`` elementwise, written into ``A``."
    return fn


add = _binary("add", "ADD")
sub = _binary("sub", "SUBTRACT")
mul = _binary("mul", "MULTIPLY")
div = _binary("div", "DIVIDE")
max = _binary("max", "MAXIMUM")
min = _binary("min", "MINIMUM")
pow = _binary("pow", "POWER")
eq = _binary("eq", "EQUAL")
neq = _binary("neq", "NOT_EQUAL")
gt = _binary("gt", "GREATER_THAN")
gteq = _binary("gteq", "GREATER_THAN_EQUAL")
lt = _binary("lt", "LESS_THAN")
lteq = _binary("lteq", "LESS_THAN_EQUAL")
logicalAnd = _binary("logicalAnd", "LOGICAL_AND")
logicalOr = _binary("logicalOr", "LOGICAL_OR")

addInPlace = _binary_in_place("addInPlace", "ADD")
subInPlace = _binary_in_place("subInPlace", "SUBTRACT")
mulInPlace = _binary_in_place("mulInPlace", "MULTIPLY")
divInPlace = _binary_in_place("divInPlace", "DIVIDE")
maxInPlace = _binary_in_place("maxInPlace", "MAXIMUM")
minInPlace = _binary_in_place("minInPlace", "MINIMUM")
powInPlace = _binary_in_place("powInPlace", "POWER")
logicalAndInPlace = _binary_in_place("logicalAndInPlace", "LOGICAL_AND")
logicalOrInPlace = _binary_in_place("logicalOrInPlace", "LOGICAL_OR")

neg = _unary("neg", "NEGATE")
abs = _unary("abs", "ABSOLUTE")
square = _unary("square", "SQUARE")
exp = _unary("exp", "EXPONENT")
log = _unary("log", "LOGARITHM")
sqrt = _unary("sqrt", "SQRT")
tanh = _unary("tanh", "TANH")
sigmoid = _unary("sigmoid", "SIGMOID")
relu = _unary("relu", "RELU")
logicalNot = _unary("logicalNot", "LOGICAL_NOT")

negInPlace = _unary_in_place("negInPlace", "NEGATE")
absInPlace = _unary_in_place("absInPlace", "ABSOLUTE")
squareInPlace = _unary_in_place("squareInPlace", "SQUARE")
expInPlace = _unary_in_place("expInPlace", "EXPONENT")
logInPlace = _unary_in_place("logInPlace", "LOGARITHM")
sqrtInPlace = _unary_in_place("sqrtInPlace", "SQRT")
tanhInPlace = _unary_in_place("tanhInPlace", "TANH")
sigmoidInPlace = _unary_in_place("sigmoidInPlace", "SIGMOID")
reluInPlace = _unary_in_place("reluInPlace", "RELU")
logicalNotInPlace = _unary_in_place("logicalNotInPlace", "LOGICAL_NOT")

__all__ = [
    "abs", "absInPlace", "add", "addCodelets", "addInPlace", "cast", "div", "divInPlace",
    "eq", "exp", "expInPlace", "expr", "fill", "gt", "gteq", "log", "logInPlace",
    "logicalAnd", "logicalAndInPlace", "logicalNot", "logicalNotInPlace", "logicalOr",
    "logicalOrInPlace", "lt", "lteq", "map", "mapInPlace", "max", "maxInPlace", "min",
    "minInPlace", "mul", "mulInPlace", "neg", "negInPlace", "neq", "pow", "powInPlace",
    "relu", "reluInPlace", "scaledAddTo", "scaledSubtractFrom", "sigmoid", "sigmoidInPlace",
    "sqrt", "sqrtInPlace", "square", "squareInPlace", "sub", "subInPlace", "tanh",
    "tanhInPlace", "zero",
]  # fmt: skip
