"""Cycle estimators of the poplin vertices and of the exchanges a matmul plan needs.

Every function works on Python ints and, element-wise, on numpy integer arrays, so the
planner can cost thousands of candidate splits in one call and the vertex estimators
(``getCycleEstimate``) use exactly the same arithmetic.

Partial matmul (AMP) estimate
-----------------------------
A per-tile partial ``[m, k] x [k, n]`` is modelled on the poplibs ``ConvPartial1x1Out``
estimator, with the ``m`` rows of the left operand as the conv "field elements", ``k``
as input channels and ``n`` as output channels:

* The accumulating matrix product (AMP) unit holds a ``k_chunk x n_chunk`` block of the
  right operand (the weights); one pass streams every row of the left operand through
  it. A row costs ``core`` thread cycles (4 for HALF inputs, 8 for FLOAT: the conv
  partial worker loop). Since a worker issues once every ``W`` tile cycles and the
  ``W`` workers work on different rows, the tile finishes ``W`` rows every
  ``W * core`` tile cycles, i.e. ``k_chunk * n_chunk / core`` MACs per tile cycle. The
  block is sized so that this equals the target's peak: ``k_chunk * n_chunk = core *
  peak_flops_per_cycle / 2`` (HALF on mk2: 4 * 128 / 2 = 256 = 16 x 16; FLOAT: 8 * 32 / 2
  = 128 = 16 x 8), with ``n_chunk`` = the conv units (16 HALF, 8 FLOAT).
* A pass over ``r = ceil(m / W)`` rows per worker costs the worker
  ``fixed(r) + max(r - 3, 0) * core`` thread cycles with the conv-partial fixed costs
  (HALF: r=0 24, r=1 47, r=2 46, r>=3 46; FLOAT: 21, 39, 40, 41).
* The supervisor costs 50 cycles plus, per pass, 19 cycles of outer loop and the
  weight load ``ceil(k_chunk * n_chunk * bytes / 16)`` (128-bit coefficient loads).
* Total tile cycles ``= 50 + passes * (19 + load + W * worker)`` with ``passes =
  ceil(k / k_chunk) * ceil(n / n_chunk)``.

Because each pass takes at least ``W * ceil(m / W) * core >= m * core`` tile cycles
and does at most ``m * k_chunk * n_chunk = m * core * peak / 2`` MACs, the estimate is
never faster than peak: ``2 * m * n * k / cycles <= peak`` always.

This is an approximation used by ``matMul``'s planner and ``MatMulPartial`` vertex; the
supervisor constants (``AMP_SUPERVISOR_CYCLES``, ``AMP_PASS_CYCLES``) are not Poplibs'.
The Poplibs ``ConvPartial1x1Out`` vertex with its own estimator (from source, cited
there) is in :mod:`poplar_api.poplin.amp`.

Calibration check (ipu_facts.md, Bow fp16 ``[N,16] x [16,16]`` on every tile, about
``333 + 4 N`` tile cycles per call): the formula gives ``101 + 6 * (34 + 4 ceil(N/6))``
= ``305 + 4 N`` for N a multiple of 6 (N = 2048: 8513 modelled vs 8525 measured; N = 16:
377 vs 397).

ReduceAdd estimate
------------------
The poplin ``ReduceAdd`` supervisor formula (poplibs_estimators.md):
``(20 + (cpl * numPartials + outer) * ceil(ceil(numElems / accVW) / W)) * W + 33`` with
accumulator vector width ``accVW`` 4 (FLOAT partials) / 8 (HALF partials), ``cpl =
accVW / min(accVW, elements per 64-bit load)`` and ``outer`` 8 / 7 for FLOAT partials
(FLOAT / HALF output) and 10 / 9 for HALF partials (HALF / FLOAT output). The scaled
update variant (``out += scale * sum``) adds :data:`UPDATE_CYCLES_PER_VECTOR` per
accumulator vector (load the old output, multiply-add).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Thread cycles per row (field element) of one AMP pass, by input element size in bytes.
AMP_CORE_CYCLES = {2: 4, 4: 8}
#: AMP conv units (output columns per pass), by input element size in bytes.
AMP_CONV_UNITS = {2: 16, 4: 8}
#: Worker fixed cost of a pass for 0, 1, 2 and >= 3 rows, by input element size.
AMP_WORKER_FIXED = {2: (24, 47, 46, 46), 4: (21, 39, 40, 41)}
#: Supervisor cycles once per vertex (conv partial outer loop entry).
AMP_SUPERVISOR_CYCLES = 50
#: Supervisor cycles per (input chunk, output chunk) pass.
AMP_PASS_CYCLES = 19
#: Bytes of weights loaded into the AMP units per cycle (128-bit loads).
AMP_COEFF_LOAD_BYTES_PER_CYCLE = 16

#: ReduceAdd accumulator vector width by partials element size.
REDUCE_ACC_VECTOR_WIDTH = {4: 4, 2: 8}
#: Extra cycles per accumulator vector of the scaled-update reduce.
UPDATE_CYCLES_PER_VECTOR = 2
#: Exchange estimator fixed-point scaling (poplibs ExchangeEstimator).
EXCHANGE_SCALE = 16

IntLike = Any  # int or numpy integer array


def _iceil(a: IntLike, b: IntLike) -> IntLike:
    return -(-a // b)


def amp_block(in_size: int, peak_flops_per_cycle: int) -> tuple[int, int, int]:
    """The AMP block ``(k_chunk, n_chunk, core)`` for an input element size.

    Parameters
    ----------
    in_size
        Bytes per input element (2 for HALF, 4 for FLOAT).
    peak_flops_per_cycle
        The target's peak flops per tile cycle for that type.

    Returns
    -------
    tuple
        ``k_chunk * n_chunk <= core * peak / 2`` (equal whenever the peak allows a
        whole block), so a full pass runs at, never above, peak.
    """
    core = AMP_CORE_CYCLES[in_size]
    macs_per_row = max(1, core * int(peak_flops_per_cycle) // 2)
    n_chunk = min(AMP_CONV_UNITS[in_size], macs_per_row)
    k_chunk = max(1, macs_per_row // n_chunk)
    return k_chunk, n_chunk, core


def amp_worker_cycles(rows: IntLike, in_size: int) -> IntLike:
    """Thread cycles of one AMP pass over ``rows`` rows on one worker."""
    f0, f1, f2, f3 = AMP_WORKER_FIXED[in_size]
    core = AMP_CORE_CYCLES[in_size]
    rows = np.asarray(rows, dtype=np.int64)
    fixed = np.select([rows == 0, rows == 1, rows == 2], [f0, f1, f2], default=f3)
    out = fixed + np.maximum(rows - 3, 0) * core
    return int(out) if out.ndim == 0 else out


def matmul_partial_cycles(
    m: IntLike,
    k: IntLike,
    n: IntLike,
    in_size: int,
    peak_flops_per_cycle: int,
    num_workers: int,
) -> IntLike:
    """Tile cycles of a partial matmul vertex ``[m, k] x [k, n]`` (see module docstring)."""
    k_chunk, n_chunk, _ = amp_block(in_size, peak_flops_per_cycle)
    passes = _iceil(np.asarray(k, np.int64), k_chunk) * _iceil(np.asarray(n, np.int64), n_chunk)
    rows = _iceil(np.asarray(m, np.int64), num_workers)
    load = _iceil(k_chunk * n_chunk * in_size, AMP_COEFF_LOAD_BYTES_PER_CYCLE)
    worker = amp_worker_cycles(rows, in_size)
    out = AMP_SUPERVISOR_CYCLES + passes * (AMP_PASS_CYCLES + load + num_workers * worker)
    out = np.asarray(out, np.int64)
    return int(out) if out.ndim == 0 else out


def reduce_add_cycles(
    num_partials: IntLike,
    num_elems: IntLike,
    partials_size: int,
    out_size: int,
    num_workers: int,
    update: bool = False,
) -> IntLike:
    """Tile cycles of poplin ReduceAdd over ``num_partials`` partials of ``num_elems``."""
    acc_vw = REDUCE_ACC_VECTOR_WIDTH[partials_size]
    load_elems = 8 // partials_size
    cpl = acc_vw // min(acc_vw, load_elems)
    same = partials_size == out_size
    outer = (8 if same else 7) if partials_size == 4 else (10 if same else 9)
    if update:
        outer += UPDATE_CYCLES_PER_VECTOR
    vectors = _iceil(np.asarray(num_elems, np.int64), acc_vw)
    per_worker = _iceil(vectors, num_workers)
    out = (20 + (cpl * np.asarray(num_partials, np.int64) + outer) * per_worker) * num_workers + 33
    out = np.asarray(out, np.int64)
    return int(out) if out.ndim == 0 else out


def exchange_cycles(num_bytes: IntLike, bytes_per_cycle: float) -> IntLike:
    """Cycles to receive ``num_bytes`` at ``bytes_per_cycle``: ``ceil(16 b / round(16 E))``."""
    scaled = max(1, round(float(bytes_per_cycle) * EXCHANGE_SCALE))
    out = _iceil(np.asarray(num_bytes, np.int64) * EXCHANGE_SCALE, scaled)
    out = np.asarray(out, np.int64)
    return int(out) if out.ndim == 0 else out


__all__ = [
    "amp_block",
    "amp_worker_cycles",
    "exchange_cycles",
    "matmul_partial_cycles",
    "reduce_add_cycles",
]
