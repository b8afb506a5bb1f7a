"""Cycle estimators of the popops elementwise vertices, as Poplibs publishes them.

Source: graphcore/poplibs at commit ``7eac0f266ced5b064b3284a3cd90d491745b387c``
(``SOURCE_COMMIT``). The per-op tables restate ``lib/popops/popopsCycleEstimators.hpp``
(``unaryOpPerfInfo``, ``unaryOpInPlacePerfInfo``, ``binaryOpPerfInfo``,
``binaryOpInPlacePerfInfo``, ``broadcastOpPerfInfo``, ``broadcastOpInPlacePerfInfo``)
for the element types ipusim supports (float, half, int, unsigned int, bool); the
formulas restate ``lib/popops/popopsCycleEstimators.cpp`` and
``lib/popops/PerformanceEstimation.cpp``. Each function names its source function.

Multi-vertex (``1D``) estimates are tile cycles; worker-vertex (``2D``, ``Fill``,
``Cast1DSingleWorker``) estimates are thread cycles, as the IPU Model counts them.
The source's ``getForceInterleavedEstimates()`` is taken as false (its default).

The ternary vertices (``Select``, ``SelectInPlace``, ``BroadcastSelect``,
``BroadcastSelectorSelect[InPlace]``, ``Clamp[InPlace]``, ``BroadcastClamp[InPlace]``)
restate their estimators in ``popopsCycleEstimators.cpp`` (``selectCycles``,
``BroadcastSelectorSelectCycles``, ``clampCycles``); all are worker vertices.

The one estimator that is not a Poplibs vertex estimator is :func:`map_expr`: Poplibs
sets the generated map vertices' estimates with ``Graph::setPerfEstimate`` in
``lib/popops/ExpressionGenerator.cpp`` (``executeCodelet``); that formula is restated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = [
    "SOURCE_COMMIT",
    "OpPerformanceInfo",
    "basic_op_loop_cycles",
    "binary_info",
    "binary_inner_loop",
    "binary_op_1d",
    "binary_op_1d_in_place",
    "binary_op_1d_in_place_array",
    "binary_op_2d",
    "binary_op_2d_in_place",
    "broadcast_info",
    "broadcast_scalar_1d",
    "broadcast_scalar_2d_data",
    "broadcast_select",
    "broadcast_selector_select",
    "cast_1d",
    "cast_1d_single_worker",
    "cast_2d",
    "cast_worker_cycles",
    "clamp",
    "fill",
    "fill_2d",
    "iceil",
    "map_expr",
    "scaled_add_2d",
    "scaled_add_supervisor",
    "select",
    "select_in_place",
    "unary_info",
    "unary_loop",
    "unary_op_1d",
    "unary_op_2d",
]

#: The poplibs commit the tables and formulas were read from.
SOURCE_COMMIT = "7eac0f266ced5b064b3284a3cd90d491745b387c"

#: ``basicOpSupervisorOverhead()`` (PerformanceEstimation.cpp), no ScaledPtr64 fields.
SUPERVISOR_OVERHEAD = 11


def iceil(a: int, b: int) -> int:
    """Ceiling division of non-negative ``a`` by positive ``b``."""
    return -(-int(a) // int(b))


@dataclass(frozen=True)
class OpPerformanceInfo:
    """Inner-loop cost of one op (``OpPerformanceInfo`` in popopsCycleEstimators.hpp).

    With ``natural_vector_width`` a loop handles one 64-bit vector and a per-loop
    overhead is added by the caller; otherwise a loop handles ``loop_unroll_factor``
    elements (0: one element, unary formula only) in ``cycles_per_loop``.
    """

    cycles_per_loop: int
    natural_vector_width: bool
    loop_unroll_factor: int = 0


_I = OpPerformanceInfo
_F, _H, _S, _U, _B = "float", "half", "int", "unsigned int", "bool"


def _table(rows: dict[str, dict[str, tuple]]) -> dict[tuple[str, str], OpPerformanceInfo]:
    return {(op, t): _I(*v) for op, per_type in rows.items() for t, v in per_type.items()}


#: Ops whose result is a bool whatever the operands' type (``IS_FINITE`` ... ``NOT_EQUAL``).
_BOOL_RESULT = frozenset({
    "IS_FINITE", "IS_INF", "IS_NAN", "EQUAL", "GREATER_THAN", "GREATER_THAN_EQUAL",
    "LESS_THAN", "LESS_THAN_EQUAL", "NOT_EQUAL",
})  # fmt: skip


def _in_place(
    out_of_place: dict[tuple[str, str], OpPerformanceInfo], changes: dict[str, dict[str, tuple]]
) -> dict[tuple[str, str], OpPerformanceInfo]:
    """An in-place table of popopsCycleEstimators.hpp from its out-of-place table.

    Poplibs' in-place table has the rows of the out-of-place one where the result has
    the operand's type (an in-place vertex writes its result over its input: a bool
    result only over a bool input), with the costs of ``changes`` (the rows whose
    entries differ in the source) replacing those entries.
    """
    table = {
        (op, t): info for (op, t), info in out_of_place.items() if op not in _BOOL_RESULT or t == _B
    }
    table.update(_table(changes))
    return table


# Tables restated from popopsCycleEstimators.hpp (every op; the types ipusim supports);
# each in-place table is written as its differences from the out-of-place one.
_UNARY = _table({  # unaryOpPerfInfo
    "ABSOLUTE": {_F: (1, False), _H: (1, False), _S: (2, False)},
    "ASIN": {_H: (102, False), _F: (102, False)},
    "BITWISE_NOT": {_S: (1, True), _U: (1, True)},
    "CBRT": {_F: (27, True), _H: (17, True)},
    "CEIL": {_F: (2, True), _H: (2, True)},
    "COS": {_F: (2300, False), _H: (25, False, 1)},
    "COUNT_LEADING_ZEROS": {_S: (1, False), _U: (1, False)},
    "ERF": {_F: (41, False, 1), _H: (13, False, 1)},
    "EXPONENT": {_F: (6, False, 2), _H: (4, False, 4)},
    "EXPONENT2": {_F: (6, False, 2), _H: (4, False, 4)},
    "EXPONENT_MINUS_ONE": {_F: (4, False), _H: (5, True)},
    "FLOOR": {_F: (2, True), _H: (2, True)},
    "GELU_ERF": {_F: (22, False, 1), _H: (16, False, 1)},
    "INVERSE": {_H: (15, False, 4), _F: (6, False, 2)},
    "IS_FINITE": {_F: (5, True), _H: (5, True)},
    "IS_INF": {_F: (3, True), _H: (5, True)},
    "IS_NAN": {_F: (3, True), _H: (3, True)},
    "LOGARITHM": {_F: (12, False, 2), _H: (4, False, 4)},
    "LOGARITHM_ONE_PLUS": {_F: (18, True), _H: (18, True)},
    "LOGICAL_NOT": {_B: (17, False)},
    "NEARBY_INT": {_F: (2, True), _H: (2, True)},
    "NEGATE": {_F: (2, False, 2), _H: (2, False, 4), _S: (2, False)},
    "POPCOUNT": {_S: (1, False), _U: (1, False)},
    "RELU": {_F: (3, False, 2), _H: (3, False, 4)},
    "ROUND": {_F: (2, True), _H: (2, True)},
    "RSQRT": {_F: (8, False, 2), _H: (19, False, 4)},
    "SIGMOID": {_F: (12, False, 2), _H: (6, False, 4)},
    "SIGNUM": {_F: (5, True), _H: (5, True), _S: (5, False)},
    "SIN": {_F: (2300, False), _H: (25, False, 1)},
    "SQRT": {_F: (10, False, 2), _H: (23, False, 4), _S: (110, False)},
    "SQUARE": {_F: (2, False, 2), _H: (2, False, 4), _S: (1, True), _U: (1, True)},
    "TAN": {_F: (5100, False, 1), _H: (5700, False, 1)},
    "TANH": {_F: (12, False, 2), _H: (4, False, 4)},
    "TRUNC": {_F: (3, False, 2), _H: (11, False, 4)},
})  # fmt: skip
_UNARY_IN_PLACE = _in_place(_UNARY, {  # unaryOpInPlacePerfInfo
    "ABSOLUTE": {_F: (1, True), _H: (1, True)},
    "LOGARITHM": {_F: (14, False, 2), _H: (6, False, 4)},
    "LOGARITHM_ONE_PLUS": {_H: (17, True)},
    "LOGICAL_NOT": {_B: (17, True)},
    "NEGATE": {_F: (3, False, 2), _H: (3, False, 4)},
    "RELU": {_F: (2, False, 2), _H: (2, False, 4)},
    "SIGMOID": {_F: (10, False, 2), _H: (4, False, 4)},
    "TANH": {_F: (10, False, 2), _H: (2, False, 4)},
    "TRUNC": {_F: (4, False, 2)},
})  # fmt: skip
_BINARY = _table({  # binaryOpPerfInfo
    "ADD": {_F: (1, True), _H: (1, True), _S: (7, False, 1), _U: (7, False, 1)},
    "ATAN2": {_F: (272, False, 2), _H: (578, False, 4)},
    "BITWISE_AND": {_S: (7, False, 1), _U: (7, False, 1)},
    "BITWISE_OR": {_S: (7, False, 1), _U: (7, False, 1)},
    "BITWISE_XNOR": {_S: (7, False, 1), _U: (7, False, 1)},
    "BITWISE_XOR": {_S: (7, False, 1), _U: (7, False, 1)},
    "DIVIDE": {_F: (10, False, 2), _H: (21, False, 4), _S: (277, False, 1), _U: (265, False, 1)},
    "EQUAL": {_F: (14, False, 4), _H: (9, False, 4), _S: (22, False, 4), _U: (22, False, 4),
        _B: (6, False, 4)},
    "GREATER_THAN": {_F: (14, False, 4), _H: (9, False, 4), _S: (22, False, 4),
        _U: (22, False, 4), _B: (31, False, 4)},
    "GREATER_THAN_EQUAL": {_F: (14, False, 4), _H: (9, False, 4), _S: (26, False, 4),
        _U: (26, False, 4), _B: (28, False, 4)},
    "LESS_THAN": {_F: (14, False, 4), _H: (9, False, 4), _S: (22, False, 4), _U: (22, False, 4),
        _B: (28, False, 4)},
    "LESS_THAN_EQUAL": {_F: (14, False, 4), _H: (9, False, 4), _S: (26, False, 4),
        _U: (26, False, 4), _B: (28, False, 4)},
    "LOGICAL_AND": {_B: (5, False, 4)},
    "LOGICAL_OR": {_B: (5, False, 4)},
    "MAXIMUM": {_F: (3, False, 2), _H: (4, False, 4), _S: (7, False, 1), _U: (8, False, 1)},
    "MINIMUM": {_F: (3, False, 2), _H: (4, False, 4), _S: (7, False, 1), _U: (8, False, 1)},
    "MULTIPLY": {_F: (1, True), _H: (1, True), _S: (7, False, 1), _U: (7, False, 1)},
    "NOT_EQUAL": {_F: (20, False, 4), _H: (11, False, 4), _S: (22, False, 4), _U: (22, False, 4),
        _B: (5, False, 4)},
    "POWER": {_F: (312, False, 1), _H: (325, False, 1), _S: (32, False, 1)},
    "REMAINDER": {_F: (133, False, 2), _H: (300, False, 4), _S: (292, False, 1),
        _U: (282, False, 1)},
    "SHIFT_LEFT": {_S: (7, False, 1), _U: (7, False, 1)},
    "SHIFT_RIGHT": {_S: (7, False, 1), _U: (7, False, 1)},
    "SHIFT_RIGHT_SIGN_EXTEND": {_S: (7, False, 1)},
    "SUBTRACT": {_F: (1, True), _H: (1, True), _S: (7, False, 1), _U: (7, False, 1)},
})  # fmt: skip
_BINARY_IN_PLACE = _in_place(_BINARY, {  # binaryOpInPlacePerfInfo
    "DIVIDE": {_U: (264, False, 1)},
    "MAXIMUM": {_F: (4, False, 2)},
    "MINIMUM": {_F: (4, False, 2)},
    "POWER": {_S: (34, False, 1)},
})  # fmt: skip
_BROADCAST = _table({  # broadcastOpPerfInfo
    "ADD": {_F: (1, True), _H: (1, True), _S: (6, False, 1), _U: (6, False, 1)},
    "ATAN2": {_F: (272, False, 2), _H: (578, False, 4)},
    "BITWISE_AND": {_S: (6, False, 1), _U: (6, False, 1)},
    "BITWISE_OR": {_S: (6, False, 1), _U: (6, False, 1)},
    "BITWISE_XNOR": {_S: (6, False, 1), _U: (6, False, 1)},
    "BITWISE_XOR": {_S: (6, False, 1), _U: (6, False, 1)},
    "DIVIDE": {_F: (6, False, 2), _H: (8, False, 2), _S: (277, False, 1), _U: (260, False, 1)},
    "EQUAL": {_F: (12, False, 4), _H: (8, False, 4), _S: (16, False, 4), _U: (16, False, 4),
        _B: (14, False, 4)},
    "GREATER_THAN": {_F: (12, False, 4), _H: (8, False, 4), _S: (16, False, 4),
        _U: (16, False, 4), _B: (12, False, 4)},
    "GREATER_THAN_EQUAL": {_F: (12, False, 4), _H: (8, False, 4), _S: (20, False, 4),
        _U: (20, False, 4), _B: (12, False, 4)},
    "INV_STD_DEV_TO_VARIANCE": {_F: (11, False, 2), _H: (10, False, 2)},
    "LESS_THAN": {_F: (12, False, 4), _H: (8, False, 4), _S: (16, False, 4), _U: (16, False, 4),
        _B: (16, False, 4)},
    "LESS_THAN_EQUAL": {_F: (12, False, 4), _H: (8, False, 4), _S: (20, False, 4),
        _U: (20, False, 4), _B: (16, False, 4)},
    "LOGICAL_AND": {_B: (4, False, 4)},
    "LOGICAL_OR": {_B: (4, False, 4)},
    "MAXIMUM": {_F: (3, False, 2), _H: (3, False, 4), _S: (6, False, 1), _U: (7, False, 1)},
    "MINIMUM": {_F: (3, False, 2), _H: (3, False, 4), _S: (6, False, 1), _U: (8, False, 1)},
    "MULTIPLY": {_F: (1, True), _H: (1, True), _S: (6, False, 1), _U: (6, False, 1)},
    "NOT_EQUAL": {_F: (18, False, 4), _H: (10, False, 4), _S: (16, False, 4), _U: (16, False, 4),
        _B: (4, False, 4)},
    "POWER": {_F: (312, False, 1), _H: (325, False, 1), _S: (23, False, 1)},
    "REMAINDER": {_F: (93, False, 2), _H: (225, False, 4), _S: (280, False, 1),
        _U: (267, False, 1)},
    "SHIFT_LEFT": {_S: (6, False, 1), _U: (6, False, 1)},
    "SHIFT_RIGHT": {_S: (6, False, 1), _U: (6, False, 1)},
    "SHIFT_RIGHT_SIGN_EXTEND": {_S: (6, False, 1)},
    "SUBTRACT": {_F: (1, True), _H: (1, True), _S: (6, False, 1), _U: (6, False, 1)},
    "VARIANCE_TO_INV_STD_DEV": {_F: (12, False, 2), _H: (24, False, 4)},
})  # fmt: skip
_BROADCAST_IN_PLACE = _in_place(_BROADCAST, {  # broadcastOpInPlacePerfInfo
    "EQUAL": {_B: (5, False, 4)},
    "INV_STD_DEV_TO_VARIANCE": {_F: (7, True)},
    "POWER": {_S: (25, False, 1)},
})  # fmt: skip

_TABLES = {
    "unaryOpPerfInfo": _UNARY,
    "unaryOpInPlacePerfInfo": _UNARY_IN_PLACE,
    "binaryOpPerfInfo": _BINARY,
    "binaryOpInPlacePerfInfo": _BINARY_IN_PLACE,
    "broadcastOpPerfInfo": _BROADCAST,
    "broadcastOpInPlacePerfInfo": _BROADCAST_IN_PLACE,
}


def _lookup(table: str, op: str, type_name: str) -> OpPerformanceInfo:
    try:
        return _TABLES[table][(op, type_name)]
    except KeyError:
        have = sorted(t for (o, t) in _TABLES[table] if o == op)
        raise KeyError(
            f"popops estimator: Poplibs table {table} has no entry for ({op}, {type_name}); "
            f"entries for {op}: {', '.join(have) or 'none'}; hint: the op is not supported "
            f"on {type_name} by this vertex"
        ) from None


def unary_info(op: str, type_name: str, in_place: bool = False) -> OpPerformanceInfo:
    """``unaryOpPerfInfo`` / ``unaryOpInPlacePerfInfo`` entry of ``op`` on ``type_name``."""
    return _lookup("unaryOpInPlacePerfInfo" if in_place else "unaryOpPerfInfo", op, type_name)


def binary_info(op: str, type_name: str, in_place: bool = False) -> OpPerformanceInfo:
    """``binaryOpPerfInfo`` / ``binaryOpInPlacePerfInfo`` entry of ``op`` on ``type_name``."""
    return _lookup("binaryOpInPlacePerfInfo" if in_place else "binaryOpPerfInfo", op, type_name)


def broadcast_info(op: str, type_name: str, in_place: bool = False) -> OpPerformanceInfo:
    """``broadcastOpPerfInfo`` / ``broadcastOpInPlacePerfInfo`` entry."""
    table = "broadcastOpInPlacePerfInfo" if in_place else "broadcastOpPerfInfo"
    return _lookup(table, op, type_name)


def _has_external_codelet(op: str, type_name: str) -> bool:
    """``hasExternalCodelet``: ADD/SUBTRACT/MULTIPLY on float or half."""
    return op in ("ADD", "SUBTRACT", "MULTIPLY") and type_name in (_F, _H)


def basic_op_loop_cycles(n: int, vector_size: int, cycles_per_vector: int) -> int:
    """``basicOpLoopCycles``: ``cyclesPerVector * (n + size - 1) / size`` (C++ integers).

    The product is taken before the division, as the source's operator order does.
    """
    return cycles_per_vector * (int(n) + vector_size - 1) // vector_size


def binary_inner_loop(op: str, type_name: str, n: int, vw: int, in_place: bool = False) -> int:
    """``internal::binaryOpInnerLoopCycles`` over ``n`` elements.

    Natural-width entries add a per-loop overhead of 2 (ADD/SUBTRACT/MULTIPLY on
    float/half) or 5 and handle ``vw`` elements per loop; the others handle
    ``loopUnrollFactor`` elements in ``cyclesPerLoop``. ``in_place`` picks the in-place
    table (the forced-interleaved 1-cycle overhead is not used).
    """
    elems, cycles = _inner_loop_step(op, type_name, vw, in_place)
    return iceil(n, elems) * cycles


def _inner_loop_step(op: str, type_name: str, vw: int, in_place: bool) -> tuple[int, int]:
    """``(elements, cycles)`` of one loop of :func:`binary_inner_loop`."""
    info = binary_info(op, type_name, in_place)
    if info.natural_vector_width:
        return vw, info.cycles_per_loop + (2 if _has_external_codelet(op, type_name) else 5)
    return info.loop_unroll_factor, info.cycles_per_loop


def binary_op_1d(
    op: str, type_name: str, n: int, workers: int, vw: int, in_place: bool = False
) -> int:
    """``BinaryOp1D``: ``W * ((float ? 29 : 26) + inner(iceil(N, W))) + 11``
    (:func:`binary_op_1d_in_place` when ``in_place``)."""
    if in_place:
        return binary_op_1d_in_place(op, type_name, n, workers, vw)
    base = 29 if type_name == _F else 26
    return workers * (base + binary_inner_loop(op, type_name, iceil(n, workers), vw)) + 11


def binary_op_1d_in_place(op: str, type_name: str, n: int, workers: int, vw: int) -> int:
    """``getBinaryOp1DInPlaceEstimate``: ``W * (58 + inner(iceil(N, W), inPlace)) + 11``."""
    inner = binary_inner_loop(op, type_name, iceil(n, workers), vw, in_place=True)
    return workers * (58 + inner) + SUPERVISOR_OVERHEAD


def binary_op_1d_in_place_array(
    op: str, type_name: str, n: np.ndarray, workers: int, vw: int
) -> np.ndarray:
    """:func:`binary_op_1d_in_place` of every element count in ``n`` (int64 array of
    its shape): a planner prices the in-place additions of thousands of candidates."""
    elems, cycles = _inner_loop_step(op, type_name, vw, True)
    per_worker = -(-np.asarray(n, np.int64) // workers)
    return workers * (58 + -(-per_worker // elems) * cycles) + SUPERVISOR_OVERHEAD


def binary_op_2d(
    op: str, type_name: str, rows: Sequence[int], vw: int, in_place: bool = False
) -> int:
    """``BinaryOp2D`` (worker vertex): ``5 + Σ_rows inner(row)``
    (:func:`binary_op_2d_in_place` when ``in_place``)."""
    if in_place:
        return binary_op_2d_in_place(op, type_name, rows, vw)
    return 5 + sum(binary_inner_loop(op, type_name, n, vw) for n in rows)


def binary_op_2d_in_place(op: str, type_name: str, rows: Sequence[int], vw: int) -> int:
    """``BinaryOp2DInPlace`` (worker vertex): ``20 + Σ_rows inner(row, inPlace)``."""
    return 20 + sum(binary_inner_loop(op, type_name, n, vw, in_place=True) for n in rows)


def unary_loop(op: str, type_name: str, n: int, vw: int, in_place: bool = False) -> int:
    """``unaryOpInnerLoopCycles`` over ``n`` elements (in-place table when ``in_place``).

    Unrolled entries cost ``iceil(n, unroll) * cyclesPerLoop``; the others
    ``basicOpLoopCycles(n, natural ? vw : 1, cyclesPerLoop + 4)``.
    """
    info = unary_info(op, type_name, in_place)
    if not info.natural_vector_width and info.loop_unroll_factor > 0:
        return iceil(n, info.loop_unroll_factor) * info.cycles_per_loop
    width = vw if info.natural_vector_width else 1
    return basic_op_loop_cycles(n, width, info.cycles_per_loop + 4)


def unary_op_1d(
    op: str, type_name: str, n: int, workers: int, vw: int, in_place: bool = False
) -> int:
    """``UnaryOp1D`` / ``UnaryOp1DInPlace``: ``(base + loop(iceil(N, W))) * W + 9 + 11``.

    ``base`` is 55 in place, else 33 for EXPONENT and 17 for the other ops.
    """
    base = 55 if in_place else (33 if op == "EXPONENT" else 17)
    loop = unary_loop(op, type_name, iceil(n, workers), vw, in_place)
    return (base + loop) * workers + 9 + SUPERVISOR_OVERHEAD


def unary_op_2d(
    op: str, type_name: str, rows: Sequence[int], vw: int, in_place: bool = False
) -> int:
    """``UnaryOp2D`` / ``UnaryOp2DInPlace`` (worker vertices): ``20 + Σ_rows loop(row)``."""
    return 20 + sum(unary_loop(op, type_name, n, vw, in_place) for n in rows)


def _broadcast_loop(op: str, type_name: str, n: int, vw: int, in_place: bool) -> int:
    """Loop cycles of the scalar-broadcast vertices over ``n`` elements.

    ``overheadPerLoop`` is 1 for ADD/SUBTRACT/MULTIPLY on float/half, else 4 (in place
    and out of place alike when the scalar is uniform); it is added to natural-width
    entries only.
    """
    info = broadcast_info(op, type_name, in_place)
    cycles = info.cycles_per_loop
    if info.natural_vector_width:
        cycles += 1 if _has_external_codelet(op, type_name) else 4
        elems = vw
    else:
        elems = info.loop_unroll_factor
    return iceil(n, elems) * cycles


def broadcast_scalar_1d(
    op: str, type_name: str, n: int, workers: int, vw: int, in_place: bool = False
) -> int:
    """``broadcastArithmetic1DCycleEstimate``: ``(20 + loop(iceil(N, W))) * W + 11``.

    Used by ``BroadcastScalar1D`` and ``BroadcastScalar1DInPlace``.
    """
    loop = _broadcast_loop(op, type_name, iceil(n, workers), vw, in_place)
    return (20 + loop) * workers + SUPERVISOR_OVERHEAD


def broadcast_scalar_2d_data(
    op: str, type_name: str, rows: Sequence[int], vw: int, in_place: bool = False
) -> int:
    """``broadcastArithmeticCycleEstimate`` (uniform scalar): ``20 + Σ_rows (loop + 28)``.

    Used by ``BroadcastScalar2DData`` and ``BroadcastScalar2DDataInPlace``.
    """
    return 20 + sum(_broadcast_loop(op, type_name, n, vw, in_place) + 28 for n in rows)


def fill(type_size: int, n: int, is_half: bool | None = None) -> int:
    """``_fillCycleEstimate`` (PerformanceEstimation.cpp): one ``Fill`` worker, ``n`` elements.

    64-bit ``5 + n``; 8-bit ``28 + n/4`` below 64 elements, else ``39 + n/8``; half 15
    (n = 1), 21 (n = 2), else ``26 + n/4``; other 32-bit-or-smaller types
    ``16 + n/2 + 6 + (n % 2 == 1) + 1`` (``width`` = 64/16 for half, 64/32 otherwise).
    """
    half = type_size == 2 if is_half is None else is_half
    n = int(n)
    if type_size == 8:
        return 5 + n
    if type_size == 1:
        return 28 + n // 4 if n < 64 else 39 + n // 8
    if half:
        return {1: 15, 2: 21}.get(n, 26 + n // 4)
    return 16 + n // 2 + 6 + (n % 2 == 1) + 1


def fill_2d(type_size: int, is_half: bool, rows: Sequence[int]) -> int:
    """``getFill2DCycleEstimate``: ``5 + Σ fill + (≠half) - (2 + (≠half)) · rows``."""
    total = sum(fill(type_size, n, is_half) for n in rows)
    if type_size == 8:
        return 5 + total - 2 * len(rows)
    not_half = 0 if is_half else 1
    return 5 + total + not_half - (2 + not_half) * len(rows)


def _ceil_log2(x: int) -> int:
    return max(0, (int(x) - 1).bit_length())


def cast_worker_cycles(n: int, from_name: str, to_name: str, from_size: int, to_size: int) -> int:
    """``castWorkerCycles`` (PerformanceEstimation.cpp) for ``n`` elements.

    ``unsigned char -> half`` and ``half -> char/unsigned char`` use the pipelined
    assembly model; every other pair the load/store-bandwidth model: a float/half
    ("aux pipeline") conversion handles ``min(2 * 8/fromSize, 8/toSize)`` elements per
    vector, anything else one element with one extra cycle.
    """
    n = int(n)
    char_to_half = from_name == "unsigned char" and to_name == _H
    half_to_char = from_name == _H and to_name in ("unsigned char", "char")
    if char_to_half or half_to_char:

        def work(atom: int, fill_drain: int, per_loop: int, r1: int, r2: int, r3: int) -> int:
            n_atom, rem = divmod(n, atom)
            c = fill_drain + (n_atom - 1) * per_loop if n_atom > 0 else 0
            return c + {0: 2, 1: r1, 2: r2, 3: r3}.get(rem, r1 * rem)

        if char_to_half:
            return 4 + work(4, 14, 9, 12, 14, 22)
        clamp_setup = 3 if from_name == "unsigned char" else 4
        return 4 + clamp_setup + work(4, 19, 16, 14, 21, 29)
    from_load = 8 // from_size
    to_store = 8 // to_size
    aux = from_name in (_F, _H) and to_name in (_F, _H)
    op_vw = min(from_load * 2, to_store * 1) if aux else 1
    load = op_vw // min(op_vw, from_load)
    store = op_vw // min(op_vw, to_store)
    per_vector = max(load, store) + (0 if aux else 1)
    cycles = 19 + per_vector * (n // op_vw)
    rem = n % op_vw
    for i in range(_ceil_log2(op_vw)):
        cycles += 1 + (2 if rem & (1 << i) else 0)
    return cycles


def cast_1d(n: int, workers: int, worker: callable) -> int:
    """``getCast1DCycleEstimate``: ``12 + W * (castWorkerCycles(iceil(N, W)) + 18)``.

    ``worker(n)`` is :func:`cast_worker_cycles` bound to the two types.
    """
    return 12 + workers * (worker(iceil(n, workers)) + 18)


def cast_1d_single_worker(n: int, worker: callable) -> int:
    """``getCast1DSingleWorkerCycleEstimate``: ``3 + 2 + castWorkerCycles(N)``."""
    return 3 + 2 + worker(n)


def cast_2d(rows: Sequence[int], worker: callable) -> int:
    """``getCast2DCycleEstimate``: ``5 + Σ_rows (11 + castWorkerCycles(row))``."""
    return 5 + sum(11 + worker(n) for n in rows)


def scaled_add_supervisor(
    type_name: str,
    n: int,
    workers: int,
    vw: int,
    subtract: bool = False,
    mem_constrained: bool = False,
) -> int:
    """``getScaledArithmeticSupervisorCycleEstimate`` (same data/B types), tile cycles.

    Used by ``ScaledAddSupervisor`` / ``ScaledSubtractSupervisor``. As the source does,
    every worker runs ``vectorsPerWorker`` vectors (the ``remainingVectors < 0`` term on
    an unsigned is never true) and the worker numbered ``remainingVectors`` does the tail.
    """
    if type_name in (_S, _U):
        rem = n % 3
        cycles = 53 + 26 * (n // 3) + (6 if rem == 0 else 6 + 26 * rem) + 8 + 6
        return cycles + (1 if subtract else 0)
    vectors, rem = divmod(n, vw)
    per_worker = vectors // workers
    supervisor = 21 + SUPERVISOR_OVERHEAD + (7 if rem == 0 else 13) + 12 + 6
    supervisor += 7 if subtract else 0
    inner = (1 if per_worker >= 16 else 2) if mem_constrained else 3
    v = per_worker
    common = 15 + (6 + inner * (v - 1) if v else 0) + 2 + 1
    tail = 0
    if rem:
        half_tail = 5 + ((7 + (6 if rem == 3 else 0)) if rem >= 2 else 0)
        tail = 8 if type_name == _F else half_tail
    # ``remainingVectors`` < W always names a worker, so the slowest one pays the tail.
    return supervisor + workers * (common + 1 + tail)


def scaled_add_2d(
    type_name: str,
    rows: Sequence[int],
    vw: int,
    subtract: bool = False,
    mem_constrained: bool = False,
) -> int:
    """``ScaledArithmetic2DCycleEstimate`` (ScaledAdd2D / ScaledSubtract2D), thread cycles."""
    if type_name in (_S, _U):
        return 8 + sum(7 + 5 * n for n in rows) + 1 + (1 if subtract else 0)
    inner = 2 if mem_constrained else 3
    cycles = 9 + 1 + (2 if subtract else 0)
    for n in rows:
        vectors, rem = divmod(n, vw)
        if type_name == _F:
            tail = 7 if rem else 0
        else:
            tail = (4 if rem > 0 else 0) + (6 if rem >= 2 else 0) + (7 if rem % 2 == 1 else 0)
        cycles += 15 + (5 if vectors else 0) + vectors * inner + tail
    return cycles


def map_expr(sizes: Sequence[int], num_fused_ops: int, vw: int, workers: int, multi: bool) -> int:
    """Perf estimate Poplibs sets on a generated map vertex (``executeCodelet``).

    ``(multi ? 20 : 13) + Σ_inputs (n / vw + n % vw) · numFusedOps`` over the elements
    ``n`` each input has in the vertex, rounded up to a multiple of ``W`` for the
    multi-vertex. ``vw`` is the vector width of the first input's type.
    """
    est = 20 if multi else 13
    for n in sizes:
        est += (int(n) // vw) * num_fused_ops + (int(n) % vw) * num_fused_ops
    return iceil(est, workers) * workers if multi else est


# ------------------------------------------------------------------ ternary ops
def _select_cycles(n: int) -> int:
    """``selectCycles``: ``6 + basicOpLoopCycles(n, 1, 5)`` (ld, ld, ld, movnz, st)."""
    return 6 + basic_op_loop_cycles(n, 1, 5)


def select(rows: Sequence[int]) -> int:
    """``Select`` (worker vertex): ``5 + Σ_rows selectCycles(row)``; every type alike."""
    return 5 + sum(_select_cycles(n) for n in rows)


def select_in_place(rows: Sequence[int]) -> int:
    """``SelectInPlace``: ``5 + rows · selectCycles(rows)``.

    As the source does, each row is costed with the *number of rows*
    (``in1.size()``) rather than its own length: a quirk of the published
    estimator, kept on purpose.
    """
    return 5 + len(rows) * _select_cycles(len(rows))


def broadcast_select(type_size: int, rows: Sequence[int]) -> int:
    """``BroadcastSelect`` (scalar ``in1``/``in2``, per-row bool ``in3``).

    ``10 + Σ_rows`` per row: 4-byte types ``5 + 4n + 3``; half ``23 + 4n`` for odd
    ``n``, else ``30 + 4n`` (misaligned worst case); bool ``40 + (n/4)·17 + 26``.
    """
    cycles = 9 + 1
    for n in rows:
        n = int(n)
        if type_size == 4:
            cycles += 5 + 4 * n + 3
        elif type_size == 2:
            cycles += (23 if n & 1 else 30) + 4 * n
        elif type_size == 1:
            cycles += 40 + (n // 4) * 17 + 26
        else:
            raise ValueError(f"BroadcastSelect estimator: no formula for {type_size}-byte types")
    return cycles


def broadcast_selector_select(type_size: int, rows: Sequence[int]) -> int:
    """``BroadcastSelectorSelectCycles`` (also the in-place vertex): a row copy.

    ``12 + Σ_rows (12 + 23 + bytes/4 + (bytes % 4)·5)`` with ``bytes = n · size``.
    """
    cycles = 11 + 1
    for n in rows:
        nbytes = int(n) * type_size
        cycles += 12 + 23 + nbytes // 4 + (nbytes % 4) * 5
    return cycles


def _clamp_cycles(type_name: str, n: int, data_path_width: int = 64) -> int:
    """``clampCycles``: ``6 + basicOpLoopCycles(n, vw, cpv)``.

    float: ``vw = dataPathWidth/32``, 2 cycles per vector; half: ``vw =
    dataPathWidth/16``, 2 cycles; int: 1 element, 7 cycles; otherwise 1 and 1.
    """
    vw, cpv = 1, 1
    if type_name == _F:
        vw, cpv = data_path_width // 32, 2
    elif type_name == _H:
        vw, cpv = data_path_width // 16, 2
    elif type_name == _S:
        cpv = 7
    return 6 + basic_op_loop_cycles(n, vw, cpv)


def clamp(type_name: str, rows: Sequence[int], data_path_width: int = 64) -> int:
    """``Clamp``, ``ClampInPlace``, ``BroadcastClamp`` and ``BroadcastClampInPlace``:
    ``5 + Σ_rows clampCycles(row)`` (one formula for all four in the source)."""
    return 5 + sum(_clamp_cycles(type_name, n, data_path_width) for n in rows)
