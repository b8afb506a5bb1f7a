"""Cycle estimators of the poplin ``ReduceAdd`` vertex and of the exchanges a plan needs.

Every function works on Python ints and, element-wise, on numpy integer arrays, so the
planners can cost thousands of candidate splits in one call and the vertex estimators
(``getCycleEstimate``) use exactly the same arithmetic. The partial-sum vertices'
estimators are in :mod:`poplar_api.poplin.amp` and :mod:`poplar_api.poplin.conv_estimators`.

ReduceAdd estimate
------------------
The poplin ``ReduceAdd`` formula, graphcore/poplibs ``7eac0f26``
``lib/poplin/PerformanceEstimation.hpp`` ``getReduceCycleEstimate`` (single-input path,
64-bit loads; ipusim rounds the loop count up where Poplibs truncates it):
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

#: ReduceAdd accumulator vector width by partials element size.
REDUCE_ACC_VECTOR_WIDTH = {4: 4, 2: 8}
#: Extra cycles per accumulator vector of the scaled-update reduce.
UPDATE_CYCLES_PER_VECTOR = 2
#: Exchange estimator fixed-point scaling (poplibs ExchangeEstimator).
EXCHANGE_SCALE = 16

IntLike = Any  # int or numpy integer array


def _iceil(a: IntLike, b: IntLike) -> IntLike:
    return -(-a // b)


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
    "exchange_cycles",
    "reduce_add_cycles",
]
