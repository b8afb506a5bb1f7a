"""A Poplibs-like ``popops``: elementwise operations, map expressions, fill and casts.

Functions keep Poplar's names and argument order, e.g.
``popops.add(graph, A, B, prog, debugName="")`` returns a new tensor and appends one
``Execute`` to ``prog`` (a :class:`~poplar_api.program.Sequence`); the ``...InPlace``
forms write into their first operand. Comparisons and ``isFinite``/``isInf``/
``isNaN`` return BOOL tensors. ``select``/``clamp`` are the ternary ops; ``allTrue``
and ``reduceMany`` are built on :mod:`.reduce`.
"""

# Poplar's camelCase names (logicalAnd, addInPlace, ...) are the public API here.
# ruff: noqa: N816

from __future__ import annotations

from collections.abc import Callable
from numbers import Number

from poplar_api.graph import Graph
from poplar_api.popops import expr, rearrange
from poplar_api.popops.collectives import (
    CollectiveOperator,
    replicatedAllGather,
    replicatedAllReduce,
    replicatedAllReduceInPlace,
    replicatedAllReduceWithOutput,
    replicatedReduceScatter,
)
from poplar_api.popops.elementwise import (
    addCodelets,
    binary_op,
    cast,
    fill,
    scaledAddTo,
    scaledSubtractFrom,
    ternary_op,
    unary_op,
    zero,
)
from poplar_api.popops.maps import map, mapInPlace
from poplar_api.popops.reduce import (
    Operation,
    ReduceParams,
    SingleReduceOp,
    allTrue,
    reduce,
    reduceMany,
    reduceWithOutput,
)
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
bitwiseAnd = _binary("bitwiseAnd", "BITWISE_AND")
bitwiseOr = _binary("bitwiseOr", "BITWISE_OR")
bitwiseXor = _binary("bitwiseXor", "BITWISE_XOR")
bitwiseXnor = _binary("bitwiseXnor", "BITWISE_XNOR")
shiftLeft = _binary("shiftLeft", "SHIFT_LEFT")
shiftRight = _binary("shiftRight", "SHIFT_RIGHT")
shiftRightSignExtend = _binary("shiftRightSignExtend", "SHIFT_RIGHT_SIGN_EXTEND")
rem = _binary("rem", "REMAINDER")
atan2 = _binary("atan2", "ATAN2")

addInPlace = _binary_in_place("addInPlace", "ADD")
subInPlace = _binary_in_place("subInPlace", "SUBTRACT")
mulInPlace = _binary_in_place("mulInPlace", "MULTIPLY")
divInPlace = _binary_in_place("divInPlace", "DIVIDE")
maxInPlace = _binary_in_place("maxInPlace", "MAXIMUM")
minInPlace = _binary_in_place("minInPlace", "MINIMUM")
powInPlace = _binary_in_place("powInPlace", "POWER")
logicalAndInPlace = _binary_in_place("logicalAndInPlace", "LOGICAL_AND")
logicalOrInPlace = _binary_in_place("logicalOrInPlace", "LOGICAL_OR")
eqInPlace = _binary_in_place("eqInPlace", "EQUAL")
neqInPlace = _binary_in_place("neqInPlace", "NOT_EQUAL")
gtInPlace = _binary_in_place("gtInPlace", "GREATER_THAN")
gteqInPlace = _binary_in_place("gteqInPlace", "GREATER_THAN_EQUAL")
ltInPlace = _binary_in_place("ltInPlace", "LESS_THAN")
lteqInPlace = _binary_in_place("lteqInPlace", "LESS_THAN_EQUAL")
bitwiseAndInPlace = _binary_in_place("bitwiseAndInPlace", "BITWISE_AND")
bitwiseOrInPlace = _binary_in_place("bitwiseOrInPlace", "BITWISE_OR")
bitwiseXorInPlace = _binary_in_place("bitwiseXorInPlace", "BITWISE_XOR")
bitwiseXnorInPlace = _binary_in_place("bitwiseXnorInPlace", "BITWISE_XNOR")
shiftLeftInPlace = _binary_in_place("shiftLeftInPlace", "SHIFT_LEFT")
shiftRightInPlace = _binary_in_place("shiftRightInPlace", "SHIFT_RIGHT")
shiftRightSignExtendInPlace = _binary_in_place(
    "shiftRightSignExtendInPlace", "SHIFT_RIGHT_SIGN_EXTEND"
)
remInPlace = _binary_in_place("remInPlace", "REMAINDER")
atan2InPlace = _binary_in_place("atan2InPlace", "ATAN2")
invStdDevToVarianceInPlace = _binary_in_place(
    "invStdDevToVarianceInPlace", "INV_STD_DEV_TO_VARIANCE"
)
varianceToInvStdDevInPlace = _binary_in_place(
    "varianceToInvStdDevInPlace", "VARIANCE_TO_INV_STD_DEV"
)

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
asin = _unary("asin", "ASIN")
bitwiseNot = _unary("bitwiseNot", "BITWISE_NOT")
cbrt = _unary("cbrt", "CBRT")
ceil = _unary("ceil", "CEIL")
cos = _unary("cos", "COS")
countLeadingZeros = _unary("countLeadingZeros", "COUNT_LEADING_ZEROS")
erf = _unary("erf", "ERF")
exp2 = _unary("exp2", "EXPONENT2")
expm1 = _unary("expm1", "EXPONENT_MINUS_ONE")
floor = _unary("floor", "FLOOR")
geluErf = _unary("geluErf", "GELU_ERF")
inv = _unary("inv", "INVERSE")
isFinite = _unary("isFinite", "IS_FINITE")
isInf = _unary("isInf", "IS_INF")
isNaN = _unary("isNaN", "IS_NAN")
log1p = _unary("log1p", "LOGARITHM_ONE_PLUS")
nearbyint = _unary("nearbyint", "NEARBY_INT")
popcount = _unary("popcount", "POPCOUNT")
round = _unary("round", "ROUND")
rsqrt = _unary("rsqrt", "RSQRT")
signum = _unary("signum", "SIGNUM")
sin = _unary("sin", "SIN")
tan = _unary("tan", "TAN")
trunc = _unary("trunc", "TRUNC")

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
asinInPlace = _unary_in_place("asinInPlace", "ASIN")
bitwiseNotInPlace = _unary_in_place("bitwiseNotInPlace", "BITWISE_NOT")
cbrtInPlace = _unary_in_place("cbrtInPlace", "CBRT")
ceilInPlace = _unary_in_place("ceilInPlace", "CEIL")
cosInPlace = _unary_in_place("cosInPlace", "COS")
countLeadingZerosInPlace = _unary_in_place("countLeadingZerosInPlace", "COUNT_LEADING_ZEROS")
erfInPlace = _unary_in_place("erfInPlace", "ERF")
exp2InPlace = _unary_in_place("exp2InPlace", "EXPONENT2")
expm1InPlace = _unary_in_place("expm1InPlace", "EXPONENT_MINUS_ONE")
floorInPlace = _unary_in_place("floorInPlace", "FLOOR")
geluErfInPlace = _unary_in_place("geluErfInPlace", "GELU_ERF")
invInPlace = _unary_in_place("invInPlace", "INVERSE")
log1pInPlace = _unary_in_place("log1pInPlace", "LOGARITHM_ONE_PLUS")
nearbyintInPlace = _unary_in_place("nearbyintInPlace", "NEARBY_INT")
popcountInPlace = _unary_in_place("popcountInPlace", "POPCOUNT")
roundInPlace = _unary_in_place("roundInPlace", "ROUND")
rsqrtInPlace = _unary_in_place("rsqrtInPlace", "RSQRT")
signumInPlace = _unary_in_place("signumInPlace", "SIGNUM")
sinInPlace = _unary_in_place("sinInPlace", "SIN")
tanInPlace = _unary_in_place("tanInPlace", "TAN")
truncInPlace = _unary_in_place("truncInPlace", "TRUNC")


def select(
    graph: Graph,
    a: Tensor | Number,
    b: Tensor | Number,
    pred: Tensor,
    prog: Sequence,
    debugName: str = "",
) -> Tensor:
    """A new tensor holding ``pred ? a : b`` elementwise (``popops::select``).

    ``a`` and ``b`` share one element type (FLOAT, HALF, INT, UNSIGNED_INT or BOOL);
    ``pred`` is BOOL; all three broadcast numpy-style. Vertices as Poplibs'
    ``ternaryOp``: ``BroadcastSelect`` when ``a`` and ``b`` have one element,
    ``BroadcastSelectorSelect`` when ``pred`` has one, else ``Select``.
    """
    return ternary_op(graph, "SELECT", a, b, pred, prog, debugName, "select")


def selectInPlace(
    graph: Graph,
    a: Tensor,
    b: Tensor | Number,
    pred: Tensor,
    prog: Sequence,
    debugName: str = "",
) -> None:
    """``a = pred ? a : b`` elementwise, written into ``a`` (which has the result shape)."""
    ternary_op(graph, "SELECT", a, b, pred, prog, debugName, "selectInPlace", in_place=True)


def clamp(
    graph: Graph,
    A: Tensor,
    lower: Tensor | Number,
    upper: Tensor | Number,
    prog: Sequence,
    debugName: str = "",
) -> Tensor:
    """A new tensor holding ``min(max(A, lower), upper)`` elementwise (``popops::clamp``).

    FLOAT, HALF or INT; the bounds have ``A``'s type and broadcast numpy-style.
    ``BroadcastClamp`` when both bounds have one element (or are numbers), else
    ``Clamp``.
    """
    return ternary_op(graph, "CLAMP", A, lower, upper, prog, debugName, "clamp")


def clampInPlace(
    graph: Graph,
    A: Tensor,
    lower: Tensor | Number,
    upper: Tensor | Number,
    prog: Sequence,
    debugName: str = "",
) -> None:
    """``A = min(max(A, lower), upper)`` elementwise, written into ``A``."""
    ternary_op(graph, "CLAMP", A, lower, upper, prog, debugName, "clampInPlace", in_place=True)


def encodeOneHot(
    graph: Graph, indices: Tensor, encoded: Tensor, prog: Sequence, debugName: str = ""
) -> None:
    """Poplibs' ``popops::encodeOneHot`` (``lib/popops/Encoding.cpp``): one-hot rows of
    ``indices`` into ``encoded``; see :func:`poplar_api.popnn.encodeOneHot`, which
    implements it beside the losses that use it."""
    from poplar_api.popnn import onehot

    onehot.encodeOneHot(graph, indices, encoded, prog, debugName)


__all__ = [
    "CollectiveOperator", "Operation", "ReduceParams", "SingleReduceOp", "abs", "absInPlace", "add",
    "addCodelets", "addInPlace", "allTrue", "asin", "asinInPlace", "atan2", "atan2InPlace",
    "bitwiseAnd", "bitwiseAndInPlace", "bitwiseNot", "bitwiseNotInPlace", "bitwiseOr",
    "bitwiseOrInPlace", "bitwiseXnor", "bitwiseXnorInPlace", "bitwiseXor",
    "bitwiseXorInPlace", "cast", "cbrt", "cbrtInPlace", "ceil", "ceilInPlace", "clamp",
    "clampInPlace", "cos", "cosInPlace", "countLeadingZeros", "countLeadingZerosInPlace",
    "div", "divInPlace", "encodeOneHot", "eq", "eqInPlace", "erf", "erfInPlace", "exp", "exp2",
    "exp2InPlace", "expInPlace", "expm1", "expm1InPlace", "expr", "fill", "floor",
    "floorInPlace", "geluErf", "geluErfInPlace", "gt", "gtInPlace", "gteq", "gteqInPlace",
    "inv", "invInPlace", "invStdDevToVarianceInPlace", "isFinite", "isInf", "isNaN", "log",
    "log1p", "log1pInPlace", "logInPlace", "logicalAnd", "logicalAndInPlace", "logicalNot",
    "logicalNotInPlace", "logicalOr", "logicalOrInPlace", "lt", "ltInPlace", "lteq",
    "lteqInPlace", "map", "mapInPlace", "max", "maxInPlace", "min", "minInPlace", "mul",
    "mulInPlace", "nearbyint", "nearbyintInPlace", "neg", "negInPlace", "neq",
    "neqInPlace", "popcount", "popcountInPlace", "pow", "powInPlace", "rearrange", "reduce",
    "reduceMany", "reduceWithOutput", "relu", "reluInPlace", "rem", "remInPlace",
    "replicatedAllGather", "replicatedAllReduce", "replicatedAllReduceInPlace",
    "replicatedAllReduceWithOutput", "replicatedReduceScatter", "round", "roundInPlace",
    "rsqrt", "rsqrtInPlace", "scaledAddTo", "scaledSubtractFrom", "select",
    "selectInPlace", "shiftLeft", "shiftLeftInPlace", "shiftRight", "shiftRightInPlace",
    "shiftRightSignExtend", "shiftRightSignExtendInPlace", "sigmoid", "sigmoidInPlace",
    "signum", "signumInPlace", "sin", "sinInPlace", "sqrt", "sqrtInPlace", "square",
    "squareInPlace", "sub", "subInPlace", "tan", "tanInPlace", "tanh", "tanhInPlace",
    "trunc", "truncInPlace", "varianceToInvStdDevInPlace", "zero",
]  # fmt: skip
