"""Cycle estimators of the popops elementwise vertices.

These restate the public Poplibs estimator formulas (see the project's
``poplibs_estimators.md``) as plain functions of element counts and target values:
``W`` worker contexts and ``VW`` elements per 64-bit vector. Multi-vertex (1-D)
estimates are tile cycles; worker-vertex (2-D) estimates are thread cycles, as the
IPU Model counts them.

Where the formula sheet gives no constants for an op/type pair, the table entry is
derived from the closest documented op; every such entry says so in a comment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "OpPerformanceInfo",
    "binary_info",
    "binary_inner_loop",
    "binary_op_1d",
    "binary_op_1d_in_place",
    "binary_op_2d",
    "binary_op_2d_in_place",
    "broadcast_scalar_1d",
    "broadcast_scalar_2d",
    "cast_1d",
    "cast_2d",
    "cast_worker_cycles",
    "fill",
    "fill_2d",
    "iceil",
    "map_expr_1d",
    "map_expr_2d",
    "scaled_add_2d",
    "scaled_add_supervisor",
    "unary_info",
    "unary_loop",
    "unary_op_1d",
    "unary_op_2d",
]


def iceil(a: int, b: int) -> int:
    """Ceiling division of non-negative ``a`` by positive ``b``."""
    return -(-int(a) // int(b))


@dataclass(frozen=True)
class OpPerformanceInfo:
    """Inner-loop cost of one op: ``cycles_per_loop`` per loop of elements.

    With ``natural_vector_width`` a loop handles one vector (VW elements) and an
    overhead is added; otherwise it handles ``loop_unroll_factor`` elements (0 = one
    element at a time in the unary formula).
    """

    cycles_per_loop: int
    natural_vector_width: bool
    loop_unroll_factor: int = 0


_I = OpPerformanceInfo

#: Binary ops, keyed by (op, type name). Documented entries first.
_BINARY: dict[tuple[str, str], OpPerformanceInfo] = {
    ("ADD", "float"): _I(1, True),
    ("ADD", "half"): _I(1, True),
    ("SUBTRACT", "float"): _I(1, True),
    ("SUBTRACT", "half"): _I(1, True),
    ("MULTIPLY", "float"): _I(1, True),
    ("MULTIPLY", "half"): _I(1, True),
    ("DIVIDE", "float"): _I(10, False, 2),
    ("DIVIDE", "half"): _I(21, False, 4),
    ("MAXIMUM", "float"): _I(3, False, 2),
    ("MAXIMUM", "half"): _I(4, False, 4),
    ("MINIMUM", "float"): _I(3, False, 2),
    ("MINIMUM", "half"): _I(4, False, 4),
    ("POWER", "float"): _I(312, False, 1),
    ("POWER", "half"): _I(325, False, 1),
    ("EQUAL", "float"): _I(14, False, 4),
    ("EQUAL", "half"): _I(9, False, 4),
}
# Derived: the other comparisons use EQUAL's numbers (same compare-and-pack loop).
for _op in ("NOT_EQUAL", "GREATER_THAN", "GREATER_THAN_EQUAL", "LESS_THAN", "LESS_THAN_EQUAL"):
    _BINARY[(_op, "float")] = _BINARY[("EQUAL", "float")]
    _BINARY[(_op, "half")] = _BINARY[("EQUAL", "half")]

#: Derived for 32-bit integers: no vector unit, one element per loop; ADD/SUB/MAX/MIN
#: cost like float MAXIMUM per element (3 cycles: load, op, store), MULTIPLY one more,
#: DIVIDE like float DIVIDE per element, comparisons like float EQUAL per element.
_INT_BINARY = {
    "ADD": _I(3, False, 1),
    "SUBTRACT": _I(3, False, 1),
    "MULTIPLY": _I(4, False, 1),
    "DIVIDE": _I(10, False, 1),
    "MAXIMUM": _I(3, False, 1),
    "MINIMUM": _I(3, False, 1),
    "EQUAL": _I(14, False, 4),
    "NOT_EQUAL": _I(14, False, 4),
    "GREATER_THAN": _I(14, False, 4),
    "GREATER_THAN_EQUAL": _I(14, False, 4),
    "LESS_THAN": _I(14, False, 4),
    "LESS_THAN_EQUAL": _I(14, False, 4),
}
for _op, _info in _INT_BINARY.items():
    _BINARY[(_op, "int")] = _info
    _BINARY[(_op, "unsigned int")] = _info
# Derived for bool: logical ops and (in)equality handle 4 bytes per loop like EQUAL half.
for _op in ("LOGICAL_AND", "LOGICAL_OR", "EQUAL", "NOT_EQUAL"):
    _BINARY[(_op, "bool")] = _I(9, False, 4)

#: Unary ops, keyed by (op, type name). Documented entries first.
_UNARY: dict[tuple[str, str], OpPerformanceInfo] = {
    ("ABSOLUTE", "float"): _I(1, False),
    ("ABSOLUTE", "half"): _I(1, False),
    ("EXPONENT", "float"): _I(6, False, 2),
    ("EXPONENT", "half"): _I(4, False, 4),
    ("LOGARITHM", "float"): _I(12, False, 2),
    ("LOGARITHM", "half"): _I(4, False, 4),
    ("SQRT", "float"): _I(10, False, 2),
    ("SQRT", "half"): _I(23, False, 4),
    ("TANH", "float"): _I(12, False, 2),
    ("TANH", "half"): _I(4, False, 4),
    ("SIGMOID", "float"): _I(12, False, 2),
    ("SIGMOID", "half"): _I(6, False, 4),
    ("RELU", "float"): _I(3, False, 2),
    ("RELU", "half"): _I(3, False, 4),
    ("NEGATE", "float"): _I(2, False, 2),
    # Derived: half NEGATE as float NEGATE with the half vector width (4 per loop).
    ("NEGATE", "half"): _I(2, False, 4),
    # Derived: SQUARE is one multiply per element, like NEGATE.
    ("SQUARE", "float"): _I(2, False, 2),
    ("SQUARE", "half"): _I(2, False, 4),
    # Derived: integer NEGATE/ABSOLUTE/SQUARE as the float ones, one element per loop.
    ("NEGATE", "int"): _I(2, False, 1),
    ("ABSOLUTE", "int"): _I(1, False),
    ("SQUARE", "int"): _I(2, False, 1),
    ("SQUARE", "unsigned int"): _I(2, False, 1),
    # Derived: LOGICAL_NOT on bytes like ABSOLUTE (one cheap op per element).
    ("LOGICAL_NOT", "bool"): _I(1, False),
}


def binary_info(op: str, type_name: str) -> OpPerformanceInfo:
    """Performance table entry of binary ``op`` on ``type_name``."""
    return _BINARY[(op, type_name)]


def unary_info(op: str, type_name: str) -> OpPerformanceInfo:
    """Performance table entry of unary ``op`` on ``type_name``."""
    return _UNARY[(op, type_name)]


def _is_fast_arith(op: str, type_name: str) -> bool:
    return op in ("ADD", "SUBTRACT", "MULTIPLY") and type_name in ("float", "half")


def binary_inner_loop(op: str, type_name: str, n: int, vw: int, in_place: bool = False) -> int:
    """``binaryOpInnerLoopCycles``: cycles of the inner loop over ``n`` elements."""
    info = binary_info(op, type_name)
    cycles = info.cycles_per_loop
    if info.natural_vector_width:
        # Not forced-interleaved here, so in place and out of place both add 2.
        cycles += 2 if _is_fast_arith(op, type_name) else 5
        elems = vw
    else:
        elems = max(info.loop_unroll_factor, 1)
    return iceil(n, elems) * cycles


def binary_op_1d(op: str, type_name: str, n: int, workers: int, vw: int) -> int:
    """``BinaryOp1D`` (multi-vertex): ``W * (base + inner(iceil(N, W))) + 11``."""
    base = 29 if type_name == "float" else 26
    return workers * (base + binary_inner_loop(op, type_name, iceil(n, workers), vw)) + 11


def binary_op_1d_in_place(op: str, type_name: str, n: int, workers: int, vw: int) -> int:
    """``BinaryOp1DInPlace``: ``W * (58 + inner(iceil(N, W), inPlace)) + 11``."""
    inner = binary_inner_loop(op, type_name, iceil(n, workers), vw, in_place=True)
    return workers * (58 + inner) + 11


def binary_op_2d(op: str, type_name: str, rows: Sequence[int], vw: int) -> int:
    """``BinaryOp2D`` (worker vertex): ``5 + Σ_rows inner(row)``."""
    return 5 + sum(binary_inner_loop(op, type_name, n, vw) for n in rows)


def binary_op_2d_in_place(op: str, type_name: str, rows: Sequence[int], vw: int) -> int:
    """``BinaryOp2DInPlace``: ``20 + Σ_rows inner(row, inPlace)``."""
    return 20 + sum(binary_inner_loop(op, type_name, n, vw, in_place=True) for n in rows)


def unary_loop(op: str, type_name: str, n: int, vw: int) -> int:
    """Unary inner loop over ``n`` elements."""
    info = unary_info(op, type_name)
    if info.loop_unroll_factor > 0 and not info.natural_vector_width:
        return iceil(n, info.loop_unroll_factor) * info.cycles_per_loop
    width = vw if info.natural_vector_width else 1
    return (info.cycles_per_loop + 4) * iceil(n, width)


def unary_op_1d(
    op: str, type_name: str, n: int, workers: int, vw: int, in_place: bool = False
) -> int:
    """``UnaryOp1D[InPlace]``: ``(base + loop(iceil(N, W))) * W + 9 + 11``."""
    base = 55 if in_place else (33 if op == "EXPONENT" else 17)
    return (base + unary_loop(op, type_name, iceil(n, workers), vw)) * workers + 9 + 11


def unary_op_2d(op: str, type_name: str, rows: Sequence[int], vw: int) -> int:
    """``UnaryOp2D[InPlace]``: ``20 + Σ_rows loop(row)``."""
    return 20 + sum(unary_loop(op, type_name, n, vw) for n in rows)


def _broadcast_loop(op: str, type_name: str, n: int, vw: int) -> int:
    # The broadcast tables are not restated in the formula sheet; the binary table is
    # the closest documented one and is used for cycles and elements per loop.
    info = binary_info(op, type_name)
    elems = vw if info.natural_vector_width else max(info.loop_unroll_factor, 1)
    overhead = 1 if _is_fast_arith(op, type_name) else 4
    return iceil(n, elems) * (info.cycles_per_loop + overhead)


def broadcast_scalar_1d(op: str, type_name: str, n: int, workers: int, vw: int) -> int:
    """``BroadcastScalar1D[InPlace]``: ``(20 + loop(iceil(N, W))) * W + 11``."""
    return (20 + _broadcast_loop(op, type_name, iceil(n, workers), vw)) * workers + 11


def broadcast_scalar_2d(op: str, type_name: str, rows: Sequence[int], vw: int) -> int:
    """``BroadcastScalar2DData[InPlace]`` (worker vertex).

    Not in the formula sheet; derived from the 1-D per-worker cost: the 20-cycle
    set-up once, plus per row a 5-cycle pointer unpack (as BinaryOp2D's row overhead)
    and the same loop.
    """
    return 20 + sum(5 + _broadcast_loop(op, type_name, n, vw) for n in rows)


def fill(type_size: int, n: int) -> int:
    """``Fill`` of ``n`` elements of a ``type_size``-byte type (worker vertex)."""
    if type_size == 8:
        return 5 + n
    if type_size == 1:
        return 28 + n // 4 if n < 64 else 39 + n // 8
    if type_size == 2:
        if n == 1:
            return 15
        if n == 2:
            return 21
        return 26 + n // 4
    return 16 + n // 2 + 6 + (n % 2 == 1) + 1


def fill_2d(type_size: int, is_half: bool, rows: Sequence[int]) -> int:
    """``Fill2d``: ``5 + Σ fill(n_i) + (type≠half) - (2 + (type≠half)) * rows``."""
    total = sum(fill(type_size, n) for n in rows)
    if type_size == 8:
        return 5 + total - 2 * len(rows)
    not_half = 0 if is_half else 1
    return 5 + total + not_half - (2 + not_half) * len(rows)


def cast_worker_cycles(n: int, vw: int) -> int:
    """Cycles of one cast worker over ``n`` elements.

    Not restated in the formula sheet; derived as a pipelined loop converting one
    vector of the wider type (``vw`` elements) every 2 cycles plus a 4-cycle tail.
    """
    return 4 + 2 * iceil(n, vw)


def cast_1d(n: int, workers: int, vw: int) -> int:
    """``Cast1D`` (multi-vertex): ``12 + W * (castWorkerCycles(iceil(N, W)) + 18)``."""
    return 12 + workers * (cast_worker_cycles(iceil(n, workers), vw) + 18)


def cast_2d(rows: Sequence[int], vw: int) -> int:
    """``Cast2D`` (worker vertex), derived from Cast1D: 18 set-up, per row 6 + loop."""
    return 18 + sum(6 + cast_worker_cycles(n, vw) for n in rows)


def scaled_add_supervisor(
    type_name: str,
    n: int,
    workers: int,
    vw: int,
    subtract: bool = False,
    mem_constrained: bool = False,
) -> int:
    """``ScaledAddSupervisor`` / ``ScaledSubtractSupervisor`` (multi-vertex) tile cycles."""
    if type_name in ("int", "unsigned int"):
        rem = n % 3
        cycles = 53 + 26 * (n // 3) + (6 if rem == 0 else 6 + 26 * rem) + 8 + 6
        return cycles + (1 if subtract else 0)
    vectors, rem = divmod(n, vw)
    per_worker = vectors // workers
    supervisor = 21 + 11 + (7 if rem == 0 else 13) + 12 + 6 + (7 if subtract else 0)
    inner = (1 if per_worker >= 16 else 2) if mem_constrained else 3
    # As the source does: every worker runs ``per_worker`` vectors (the remainder
    # vectors are never added); the worker numbered ``rem_vectors`` also does the tail.
    v = per_worker
    common = 15 + (6 + inner * (v - 1) if v else 0) + 2 + 1
    tail = 0
    if rem:
        half_tail = 5 + (7 if rem >= 2 else 0) + (6 if rem == 3 else 0)
        tail = 8 if type_name == "float" else half_tail
    # ``rem_vectors`` < W always names a worker, so the slowest one pays the tail.
    worst = common + 1 + tail
    return supervisor + workers * worst


def scaled_add_2d(
    type_name: str,
    rows: Sequence[int],
    vw: int,
    subtract: bool = False,
    mem_constrained: bool = False,
) -> int:
    """``ScaledAdd2D`` / ``ScaledSubtract2D`` (worker vertex) thread cycles."""
    if type_name in ("int", "unsigned int"):
        return 8 + sum(7 + 5 * n for n in rows) + 1 + (1 if subtract else 0)
    inner = 2 if mem_constrained else 3
    cycles = 9 + 1 + (2 if subtract else 0)
    for n in rows:
        vectors, rem = divmod(n, vw)
        if type_name == "float":
            tail = 7 if rem else 0
        else:
            tail = (4 if rem > 0 else 0) + (6 if rem >= 2 else 0) + (7 if rem % 2 == 1 else 0)
        cycles += 15 + (5 if vectors else 0) + vectors * inner + tail
    return cycles


def _map_ops_loop(costs: Sequence[tuple[int, int]], n: int) -> int:
    return sum(iceil(n, elems) * cpl for cpl, elems in costs)


def map_expr_1d(costs: Sequence[tuple[int, int]], n: int, workers: int) -> int:
    """A generated (fused) map multi-vertex.

    Not in the formula sheet; derived from BinaryOp1D: ``W * (29 + Σ_ops loop_op) + 11``
    where each op of the expression contributes ``iceil(n/W, elems) * cycles`` with its
    own table entry (``costs`` = (cycles per loop, elements per loop) per op).
    """
    return workers * (29 + _map_ops_loop(costs, iceil(n, workers))) + 11


def map_expr_2d(costs: Sequence[tuple[int, int]], rows: Sequence[int]) -> int:
    """A generated map worker vertex, derived from BinaryOp2D: ``5 + Σ_rows loop``."""
    return 5 + sum(_map_ops_loop(costs, n) for n in rows)
