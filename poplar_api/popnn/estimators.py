"""Cycle estimators of the popnn vertices.

From graphcore/poplibs @7eac0f266ced5b064b3284a3cd90d491745b387c unless marked derived:
``lib/popnn/popnnCycleEstimators.cpp`` (``nonLinearity1DCycleEstimator``,
``NonLinearityGrad1D``, ``nonLinearity2DCycleEstimator``, ``NonLinearityGrad2D``,
``LossSumSquaredTransform``, ``LossCrossEntropyTransform``, ``CalcAccuracy``) and
``lib/popnn/PerformanceEstimation.hpp`` (``getNonLinearityOpCycles``,
``getNonLinearityGradOpCycles``, ``getLossTransformCycles``); the one-hot encoder is
``lib/popops/popopsCycleEstimators.cpp`` ``EncodeOneHot``. Formulas are restated, the
code is ours. Unpack costs of scaled-pointer layouts are 0 (ipusim has no layouts).

Derived (no Poplibs estimator at this commit): softmax and its gradient, which Poplibs
builds from popops reductions and elementwise ops rather than a vertex; ipusim keeps
one worker vertex per row (:func:`softmax_row`, :func:`softmax_grad_row`).
"""

from __future__ import annotations

__all__ = [
    "argmax_row",
    "calc_accuracy",
    "encode_one_hot",
    "grad_op_cycles",
    "iceil",
    "loss_row",
    "loss_transform",
    "nonlinearity_1d",
    "nonlinearity_2d",
    "nonlinearity_grad_1d",
    "nonlinearity_grad_2d",
    "op_cycles",
    "softmax_grad_row",
    "softmax_row",
]

#: ``basicOpSupervisorOverhead()`` (popops, no ScaledPtr64 fields).
BASIC_OP_SUPERVISOR_OVERHEAD = 11


def iceil(a: int, b: int) -> int:
    """Ceiling division of non-negative ``a`` by positive ``b``."""
    return -(-int(a) // int(b))


def op_cycles(op: str, is_float: bool, is_vector: bool) -> int:
    """``getNonLinearityOpCycles``: cycles of one forward op (scalar or vector)."""
    if op == "RELU":
        return 1
    if op == "SIGMOID":
        return (5 if is_float else 2) * (2 if is_vector else 1)
    if op == "TANH":
        return (5 if is_float else 1) * (2 if is_vector else 1)
    if op == "GELU":
        return 10 if is_float else 5
    if op == "SWISH":
        if is_float:
            return 11 if is_vector else 6
        return 5 if is_vector else 3
    raise ValueError(f"op_cycles: unhandled non-linearity {op!r}")


def grad_op_cycles(op: str, is_float: bool, is_vector: bool) -> int:
    """``getNonLinearityGradOpCycles``: cycles of one gradient op."""
    if op in ("RELU", "SIGMOID", "TANH"):
        return 3
    if op == "GELU":
        return 10 if is_float else 5
    if op == "SWISH":
        if is_float:
            return 15 if is_vector else 10
        return 9 if is_vector else 7
    raise ValueError(f"grad_op_cycles: unhandled non-linearity {op!r}")


def nonlinearity_1d(op: str, n: int, *, half: bool, workers: int, vw: int, in_place: bool) -> int:
    """``nonLinearity1DCycleEstimator`` (MultiVertex, tile cycles) over ``n`` elements."""
    is_float = not half
    non_in_place_swish = op == "SWISH" and in_place  # the source's flag, as written
    vectors, rem = n // vw, n % vw
    per_worker = (vectors + workers - 1) // workers
    opc, vec = op_cycles(op, is_float, False), op_cycles(op, is_float, True)
    worker = 3 + int(non_in_place_swish) + 5 + 2 + 2 + 5 + 3
    if per_worker:
        worker += 2 + opc + (per_worker - 1) * vec + 1 + opc
    if is_float:
        worker += 3 + (2 + opc if rem & 1 else 0)
    else:
        worker += 2 + 1 + (2 + opc if rem & 2 else 0) + 1 + (3 + opc if rem & 1 else 0)
    return 9 + worker * workers


def nonlinearity_grad_1d(op: str, n: int, *, half: bool, workers: int, vw: int) -> int:
    """``NonLinearityGrad1D`` estimator (MultiVertex, tile cycles)."""
    is_float = not half
    vectors, rem = n // vw, n % vw
    per_worker = (vectors + workers - 1) // workers
    opc, vec = grad_op_cycles(op, is_float, False), grad_op_cycles(op, is_float, True)
    worker = 3 + 5 + 2 + 3 + 3 + 3 + 1
    if per_worker:
        worker += 4 + (per_worker - 1) * vec + 1
    if is_float:
        worker += 2 + 2 + (opc + 1 if rem else 0)
    else:
        worker += 2 + 2 + (opc + 2 if rem & 2 else 0) + 2 + (opc + 4 if rem & 1 else 0)
    return 9 + worker * workers


def nonlinearity_2d(op: str, rows: list[int], *, half: bool, vw: int, in_place: bool) -> int:
    """``nonLinearity2DCycleEstimator`` (worker vertex, thread cycles).

    The source's ``isNonInPlaceSwish ? 1 : 0 + 2 + 5 + 2`` parses as
    ``isNonInPlaceSwish ? 1 : (0 + 2 + 5 + 2)``; carried over as written.
    """
    is_float = not half
    non_in_place_swish = op == "SWISH" and in_place
    opc, vec = op_cycles(op, is_float, False), op_cycles(op, is_float, True)
    cycles = 5 + (1 if non_in_place_swish else 0 + 2 + 5 + 2)
    for n1 in rows:
        vectors, rem = n1 // vw, n1 % vw
        cycles += 4 + 1 + (0 if is_float else 2) + (2 if is_float else 3) + 2
        if vectors:
            cycles += 2 + opc + (vectors - 1) * vec + 1 + opc
        if is_float:
            cycles += 2 + (2 + opc if rem else 0)
        else:
            cycles += 2 + (2 + opc if rem & 2 else 0) + 2 + (3 + opc if rem & 1 else 0)
        cycles += 1
    return cycles


def nonlinearity_grad_2d(op: str, rows: list[int], *, half: bool, vw: int) -> int:
    """``NonLinearityGrad2D`` estimator (worker vertex, thread cycles)."""
    is_float = not half
    opc, vec = grad_op_cycles(op, is_float, False), grad_op_cycles(op, is_float, True)
    cycles = 5 + 4 + 3 + 3 + 2
    for n1 in rows:
        vectors, rem = n1 // vw, n1 % vw
        cycles += 6 + 3
        if vectors:
            cycles += 4 + (vectors - 1) * vec + 1
        if is_float:
            cycles += 2 + (1 + opc if rem else 0)
        else:
            cycles += 2 + (2 + opc if rem & 2 else 0) + 2 + (4 + opc if rem & 1 else 0)
        cycles += 1
    return cycles


def loss_transform(size: int, *, half: bool, cross_entropy: bool) -> int:
    """``getLossTransformCycles`` (worker vertex): ``Loss{SumSquared,CrossEntropy}Transform``."""
    is_float = not half
    soft = cross_entropy
    cycles = 5 + (6 if soft else 5) + 5 + (0 if is_float else 1) + 2 + 1
    cycles += (9 if soft else 4) * (size if is_float else size // 2)
    if not is_float:
        cycles += 2 + ((11 if soft else 6) if size & 1 else 0)
    return cycles + 1


def calc_accuracy(batch: int) -> int:
    """``CalcAccuracy`` estimator (worker vertex) over ``batch`` labels."""
    return 5 + 4 + 2 + 1 + 1 + batch * (2 + 1 + 1) + 1


def encode_one_hot(num_indices: int, *, index_unsigned: bool, out_half: bool) -> int:
    """``EncodeOneHot`` (popops): the assembly supervisor for unsigned -> half,
    ``basicOpSupervisorOverhead() + (62 + 12) x indices``; else the C++ worker,
    ``100 x indices``."""
    if index_unsigned and out_half:
        return BASIC_OP_SUPERVISOR_OVERHEAD + (62 + 12) * num_indices
    return 100 * num_indices


# ----------------------------------------------------------------- derived (softmax)


def softmax_row(n: int, *, half: bool, stable: bool) -> int:
    """Derived: thread cycles of the softmax of one row of ``n`` elements.

    Prologue 20 (as popops ``UnaryOp2D``) + one reciprocal (float DIVIDE, 10) + per
    64-bit vector: max 3 (stable only, MAXIMUM), subtract 1 (stable only), EXPONENT
    (float 6, half 4), accumulate 1, scale 1.
    """
    vw = 4 if half else 2
    per_vector = (3 + 1 if stable else 0) + (4 if half else 6) + 1 + 1
    return 20 + 10 + iceil(n, vw) * per_vector


def softmax_grad_row(n: int, *, half: bool) -> int:
    """Derived: 20 + per vector a multiply-accumulate (2) then ``y·(g - dot)`` (2)."""
    vw = 4 if half else 2
    return 20 + iceil(n, vw) * (2 + 2)


# ------------------------------------------- derived (ipusim's loss and arg-max rows)


def loss_row(n: int, *, half: bool, cross_entropy: bool) -> int:
    """Derived: thread cycles of ipusim's one-row loss vertex (not Poplibs' structure).

    20 + per vector: subtract the one-hot 1, scale 1 (cross entropy) or
    square-accumulate 2 (sum squared) + LOGARITHM (float 12, half 4; cross entropy)
    + 5 to store. Poplibs' ``LossXTransform`` estimate is :func:`loss_transform`.
    """
    vw = 4 if half else 2
    if cross_entropy:
        return 20 + iceil(n, vw) * (1 + 1) + (4 if half else 12) + 5
    return 20 + iceil(n, vw) * (1 + 2) + 5


def argmax_row(n: int, *, half: bool) -> int:
    """Derived: thread cycles of ipusim's one-row arg-max flag: 20 + 3 per vector + 5."""
    vw = 4 if half else 2
    return 20 + iceil(n, vw) * 3 + 5
