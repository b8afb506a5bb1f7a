"""8- and 16-bit integer operands of the arithmetic and comparison ops.

Poplibs' elementwise vertices have no 8- or 16-bit integer forms (``popops::add`` takes
float, half, int and unsigned int), so an op on CHAR, UNSIGNED_CHAR, SHORT or
UNSIGNED_SHORT tensors casts them to INT (``popops::cast``), computes there and casts an
integer result back to the operands' type; comparisons return BOOL as they are.
``Pow`` and ``MaxPool`` of integers, which Poplibs computes only in floating point,
run in FLOAT and are cast back (exact while the values fit in 24 bits). The wrapping is
applied to the registered lowerings of :data:`WIDENED_OPS` when this module is
imported. A maximum or minimum of BOOL values (:data:`BOOL_OPS`) is computed in INT the
same way.
"""

from __future__ import annotations

from typing import Any

# the op modules register the lowerings wrapped below before this module runs
from popart_api import (  # noqa: F401
    ops_activation,
    ops_math,
    ops_nn,
    ops_scatter,
    ops_shape,
    ops_tensor,
    ops_window,
)
from popart_api.ops import REGISTRY, Lowering
from poplar_api import (
    BOOL,
    CHAR,
    FLOAT,
    INT,
    SHORT,
    UNSIGNED_CHAR,
    UNSIGNED_INT,
    UNSIGNED_SHORT,
    Graph,
    Tensor,
    popops,
)

#: Element types computed in INT.
SMALL_INTS = frozenset({CHAR, UNSIGNED_CHAR, SHORT, UNSIGNED_SHORT})
#: Ops whose small-integer operands are widened to INT.
WIDENED_OPS = (
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Max",
    "Min",
    "Sum",
    "Mean",
    "Mod",
    "Clip",
    "Neg",
    "Abs",
    "Sign",
    "Equal",
    "Less",
    "Greater",
    "LessOrEqual",
    "GreaterOrEqual",
    "Where",
    "ReduceMax",
    "ReduceMin",
    "ReduceSum",
    "ReduceProd",
    "CumSum",
    "ArgMax",
    "ArgMin",
    "TopK",
)
#: Ops whose BOOL operands are computed in INT (max/min of bools are any/all).
BOOL_OPS = ("ReduceMax", "ReduceMin")
#: Ops whose integer operands (INT32 too) are computed in FLOAT.
FLOAT_OPS = ("Pow", "MaxPool")


def _wrap(fn: Lowering, op: str, wide: Any, integers: frozenset) -> Lowering:
    def lower(graph: Graph, inputs: list, attrs: dict, prog: Any, name: str) -> list:
        if wide == FLOAT and not (
            isinstance(inputs[0], Tensor) and inputs[0].elementType() in integers
        ):  # Pow of a float base, MaxPool of floats: as registered
            return fn(graph, inputs, attrs, prog, name)
        narrow = None
        cast_inputs = []
        for i, v in enumerate(inputs):
            # an empty operand computes nothing: its type picks the identity value
            if isinstance(v, Tensor) and v.elementType() in integers and v.numElements():
                narrow = narrow or v.elementType()
                v = popops.cast(graph, v, wide, prog, f"{name}/widen{i}")
            cast_inputs.append(v)
        outs = fn(graph, cast_inputs, attrs, prog, name)
        if narrow is None:
            return outs
        return [
            popops.cast(graph, o, narrow, prog, f"{name}/narrow{k}")
            if isinstance(o, Tensor) and o.elementType() == wide and not (k and op == "TopK")
            else o
            for k, o in enumerate(outs)
        ]

    lower.__name__ = getattr(fn, "__name__", op)
    lower.__doc__ = fn.__doc__
    return lower


def _install() -> None:
    for op in WIDENED_OPS:
        entries = REGISTRY.get(("ai.onnx", op), [])
        REGISTRY[("ai.onnx", op)] = [(s, _wrap(f, op, INT, SMALL_INTS)) for s, f in entries]
    for op in FLOAT_OPS:
        entries = REGISTRY.get(("ai.onnx", op), [])
        ints = SMALL_INTS | {INT, UNSIGNED_INT}
        REGISTRY[("ai.onnx", op)] = [(s, _wrap(f, op, FLOAT, ints)) for s, f in entries]
    for op in BOOL_OPS:
        entries = REGISTRY.get(("ai.onnx", op), [])
        REGISTRY[("ai.onnx", op)] = [(s, _wrap(f, op, INT, frozenset({BOOL}))) for s, f in entries]


_install()

__all__ = ["BOOL_OPS", "FLOAT_OPS", "SMALL_INTS", "WIDENED_OPS"]
