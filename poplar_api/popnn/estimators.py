"""Cycle estimators of the popnn vertices.

From graphcore/poplibs @7eac0f266ced5b064b3284a3cd90d491745b387c unless marked derived:
``lib/popnn/popnnCycleEstimators.cpp`` (``nonLinearity1DCycleEstimator``,
``NonLinearityGrad1D``, ``nonLinearity2DCycleEstimator``, ``NonLinearityGrad2D``,
``LossSumSquaredTransform``, ``LossCrossEntropyTransform``, ``ReduceMaxClassGather``,
``ReduceMaxClassSparse``, ``ReduceMinClassGather``, ``ReduceMinClassSparse``,
``CalcAccuracy``) and
``lib/popnn/PerformanceEstimation.hpp`` (``getNonLinearityOpCycles``,
``getNonLinearityGradOpCycles``, ``getLossTransformCycles``); the one-hot encoder is
``lib/popops/popopsCycleEstimators.cpp`` ``EncodeOneHot``. Formulas are restated, the
code is ours. Unpack costs of scaled-pointer layouts are 0 (ipusim has no layouts).

Softmax and its gradient have no estimator here: Poplibs builds them from popops
reductions and elementwise ops (``NonLinearity.cpp`` ``softmaxImpl``,
``softmaxInputGradientImpl``), and so does ipusim, with the popops estimators.
"""

from __future__ import annotations

import numpy as np

from poplar_api.popops.estimators import iceil

__all__ = [
    "calc_accuracy",
    "encode_one_hot",
    "grad_op_cycles",
    "iceil",
    "loss_transform",
    "nonlinearity_1d",
    "nonlinearity_2d",
    "nonlinearity_grad_1d",
    "nonlinearity_grad_2d",
    "op_cycles",
    "pooling_cycles",
    "pooling_cycles_of_arrays",
    "reduce_class_gather",
    "reduce_class_sparse",
]

#: ``basicOpSupervisorOverhead()`` (popops, no ScaledPtr64 fields).
BASIC_OP_SUPERVISOR_OVERHEAD = 11


#: Cycles of one op of each non-linearity: (forward, gradient), from
#: ``getNonLinearityOpCycles`` and ``getNonLinearityGradOpCycles``, each as (float scalar,
#: float vector, half scalar, half vector).
_OP_CYCLES: dict[str, tuple[tuple[int, ...], tuple[int, ...]]] = {
    "RELU": ((1, 1, 1, 1), (3, 3, 3, 3)),
    "SIGMOID": ((5, 10, 2, 4), (3, 3, 3, 3)),
    "TANH": ((5, 10, 1, 2), (3, 3, 3, 3)),
    "GELU": ((10, 10, 5, 5), (10, 10, 5, 5)),
    "SWISH": ((6, 11, 3, 5), (10, 15, 7, 9)),
}


def _op_cycles(op: str, is_float: bool, is_vector: bool, grad: bool) -> int:
    if op not in _OP_CYCLES:
        caller = "grad_op_cycles" if grad else "op_cycles"
        raise ValueError(
            f"{caller}: unhandled non-linearity {op!r}; required one of {sorted(_OP_CYCLES)}"
        )
    return _OP_CYCLES[op][grad][(0 if is_float else 2) + (1 if is_vector else 0)]


def op_cycles(op: str, is_float: bool, is_vector: bool) -> int:
    """``getNonLinearityOpCycles``: cycles of one forward op (scalar or vector)."""
    return _op_cycles(op, is_float, is_vector, False)


def grad_op_cycles(op: str, is_float: bool, is_vector: bool) -> int:
    """``getNonLinearityGradOpCycles``: cycles of one gradient op."""
    return _op_cycles(op, is_float, is_vector, True)


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


# ------------------------------------------------------- arg-max / arg-min reductions


def reduce_class_gather(size: int, worker_size: int, *, integral: bool, workers: int) -> int:
    """``Reduce{Max,Min}ClassGather`` estimator (MultiVertex, tile cycles).

    Float and half run the assembly supervisor: per worker ``30 + 3 x min(workerSize
    - 1, size - 1)`` (3 + 2 + 4 + 3 + 1 + 3 + 1 set-up, 3 per element, 3 + 6 + 4 to
    finish); integer types the compiled single-worker version, ``22 + nOutputs x
    (6 x workerSize + 25)``. As the source, the per-worker figure is multiplied by the
    worker count and the supervisor's 5 + 4 added.
    """
    if integral:
        n_outputs = iceil(size, worker_size)
        cycles = 22 + n_outputs * (worker_size * 6 + 25)
    else:
        cycles = 3 + 2 + 4 + 3 + 1 + 3 + 1 + min(worker_size - 1, size - 1) * 3 + 3 + 6 + 4
    return cycles * workers + 5 + 4


def reduce_class_sparse(num_acts: int, *, integral: bool) -> int:
    """``Reduce{Max,Min}ClassSparse`` estimator (worker vertex): float assembly
    ``5 + 2 + 3 + 3 + 1 + 3 (n - 1) + 3 + 6 + 4``; integer types ``5 + 18 + 6 n``."""
    if integral:
        return 5 + 18 + num_acts * 6
    return 5 + 2 + 3 + 3 + 1 + (num_acts - 1) * 3 + 3 + 6 + 4


# ------------------------------------------------------------------------ pooling


def pooling_cycles(
    init_info: int,
    chans_per_group_d: int,
    num_chan_groups_m1: int,
    start_pos: list[int],
    work_list: list[list[int]],
    *,
    is_max: bool,
    is_bwd: bool,
    workers: int,
) -> int:
    """``getPoolingCycles`` (``PerformanceEstimation.hpp``): tile cycles of one
    ``popnn::MaxPooling``, ``MaxPoolingGrad``, ``MaxPoolingGradientScale`` or
    ``SumPooling`` supervisor vertex.

    ``start_pos`` is the vertex's ``startPos`` (cumulative rows per worker) and
    ``work_list`` its rows of ``(outOffset, inOffset, numElementsM1)`` triples. Unpack
    costs are 0 (ipusim has no pointer layouts). As the source, the per-worker share of
    the output initialisation is ``initInfo x chansPerGroupD // workers`` plus one when
    ``wId < initInfo - share x workers`` in unsigned arithmetic (a negative difference
    wraps round, so every worker then takes the extra one).
    """
    groups = num_chan_groups_m1 + 1
    longest = 0
    for wid in range(workers):
        cycles = 4 + 2 + 2 + 7 + 2
        share = init_info * chans_per_group_d // workers
        diff = (init_info - share * workers) & 0xFFFFFFFF
        init_elems = share + (1 if wid < diff else 0)
        cycles += (4 + init_elems) * groups
        cycles += 5 + 1
        num_rows = start_pos[0] if wid == 0 else start_pos[wid] - start_pos[wid - 1]
        if num_rows == 0:
            longest = max(longest, cycles + 1)
            continue
        cycles += 2 + (1 if is_max else 2)
        if is_bwd:
            cycles += 6
        cycles += 3 + 2 + 1
        first = 0 if wid == 0 else start_pos[wid - 1]
        for row in work_list[first : first + num_rows]:
            cycles += 13
            for w in range(0, len(row), 3):
                n = row[w + 2]
                if is_bwd:
                    rpt = 7 + 5 * n
                elif is_max:
                    rpt = 4 + 3 * n
                else:
                    rpt = 5 + 3 * n
                per_group = 1 + chans_per_group_d * (2 + rpt + 1) + 1
                cycles += 20 + groups * per_group + (groups - 1) * (4 + (2 if is_bwd else 0))
                cycles += 3
            cycles += 2
        longest = max(longest, cycles + 1)
    return 7 + longest * 6 + 6


def pooling_cycles_of_arrays(
    init_info: int,
    chans_per_group_d: int,
    num_chan_groups_m1: int,
    start_pos: np.ndarray,
    row_entries: np.ndarray,
    entry_n: np.ndarray,
    *,
    is_max: bool,
    is_bwd: bool,
    workers: int,
) -> int:
    """:func:`pooling_cycles` with the worklist as arrays, every entry at once.

    ``row_entries[r]`` is the number of ``(outOffset, inOffset, numElementsM1)`` entries
    of worklist row ``r`` (rows in order), ``entry_n`` the ``numElementsM1`` of every
    entry, rows after one another; ``start_pos`` as for :func:`pooling_cycles`. Each
    worker's cycles are its set-up and initialisation plus the sum of its rows' costs,
    found by a cumulative sum over the rows, so the cost is numpy work over the
    entries, not a Python loop.
    """
    groups = num_chan_groups_m1 + 1
    share = init_info * chans_per_group_d // workers
    diff = (init_info - share * workers) & 0xFFFFFFFF
    wid = np.arange(workers, dtype=np.int64)
    cycles = 4 + 2 + 2 + 7 + 2 + (4 + share + (wid < diff)) * groups + 5 + 1
    sp = np.asarray(start_pos, np.int64)[:workers]
    first = np.concatenate(([0], sp[:-1]))
    num_rows = sp - first
    n = np.asarray(entry_n, np.int64)
    rpt = 7 + 5 * n if is_bwd else (4 + 3 * n if is_max else 5 + 3 * n)
    per_group = 1 + chans_per_group_d * (2 + rpt + 1) + 1
    entry = 20 + groups * per_group + (groups - 1) * (4 + (2 if is_bwd else 0)) + 3
    entries = np.asarray(row_entries, np.int64)
    ends = np.cumsum(entries)
    by_entry = np.concatenate(([0], np.cumsum(entry)))
    row_cost = 13 + 2 + by_entry[ends] - by_entry[ends - entries]
    by_row = np.concatenate(([0], np.cumsum(row_cost)))
    busy = 2 + (1 if is_max else 2) + (6 if is_bwd else 0) + 3 + 2 + 1
    work = by_row[first + num_rows] - by_row[first]
    cycles = cycles + np.where(num_rows > 0, busy + work, 0)
    return int(7 + (int(cycles.max()) + 1) * 6 + 6)


#: ``SelectiveScaling`` estimator: a constant in the source (``TODO: T5436``).
SELECTIVE_SCALING_CYCLES = 10
