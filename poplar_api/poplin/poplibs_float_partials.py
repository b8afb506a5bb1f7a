"""A FLOAT AMP tile's partial sums as Poplibs' planner estimates them, and their floors.

``addPartialCalcCycleEstimate`` (graphcore/poplibs ``7eac0f26``, ``lib/poplin/ConvModel.cpp``)
prices a tile of an AMP plan with FLOAT inputs and partials as ``ConvPartial1x1Out``
(:func:`~.poplibs_float_candidates.amp_float_1x1_cycles`) where
``canUseConvPartial1x1Vertex`` holds, else as ``ConvPartialnx1``
(:func:`~.poplibs_amp_estimates.nx1_partial_cycles`): :func:`_partial`. The floors bound
it from below without estimating each tile: :func:`_nx1_floor` over arrays of tiles,
:func:`_inner_kernel_floor` and :func:`_iteration_floor` over every tile of a form, so that
:mod:`.poplibs_float_conv2d` estimates only the tiles that may be within a limit. Derived
from the source, not a port.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.poplin.conv_estimators import (
    _NX1_FILTER_HEIGHT_LOAD,
    _NX1_FILTER_HEIGHT_LOAD_PER_ROW,
    _NX1_OVERHEAD,
    _NX1_RETENTION_SAVINGS,
    amp_weight_load_cycles,
)
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.poplibs_amp_estimates import COEFF_LOAD_BYTES_PER_CYCLE, _nx1
from poplar_api.poplin.poplibs_float_candidates import (
    FLOAT_LOAD_ELEMS,
    FLOAT_WEIGHTS_PER_CONV_UNIT,
    amp_candidates,
    amp_float_1x1_cycles,
)
from poplar_api.types import FLOAT

__all__: list[str] = []

#: ``addPartialCalcCycleEstimate``'s least AMP cycles of one vertex: the ``ConvPartialnx1``
#: supervisor's loops over a conv, input and output group (16 + 14 + 14), below
#: ``ConvPartial1x1Out``'s non-loop overhead (50).
_LEAST_VERTEX = 44


def _partial(vertex: tuple[int, int, int], conv_batch: int, batch: int, field: tuple[int, int],
             kernel: tuple[int, int], cit: int, cot: int, workers: int) -> int:  # fmt: skip
    """``addPartialCalcCycleEstimate``'s AMP branch for one tile (FLOAT inputs and
    partials)."""
    units, icg, ocg = vertex
    height = FLOAT_WEIGHTS_PER_CONV_UNIT // icg
    if height == 1 and conv_batch == 1 and kernel == (1, 1) and field[0] == 1:
        return int(amp_float_1x1_cycles(field[1], cit, cot, icg, ocg, units, workers))
    # (nx1_partial_cycles' remembered estimate without its checks of the arguments, valid
    # by construction here: a plan search prices thousands of tiles)
    return _nx1(batch, field, kernel, height, 1, cit // icg, cot // ocg, ocg, units,
                FLOAT_WEIGHTS_PER_CONV_UNIT * FLOAT.size, COEFF_LOAD_BYTES_PER_CYCLE, workers,
                True, True, None, None, 64)  # fmt: skip


def _nx1_floor(vertex: tuple[int, int, int], positions: np.ndarray, kh: np.ndarray,
               kw: int, cit: np.ndarray, cot: np.ndarray, workers: int) -> np.ndarray:  # fmt: skip
    """A lower bound of :func:`_partial`'s ``ConvPartialnx1`` estimate of tiles of
    ``positions`` output positions (batch included), ``kh x kw`` kernels and ``cit`` /
    ``cot`` channels, over arrays: ``getConvPartialnx1SupervisorCycleEstimate``
    (:func:`~.conv_estimators.conv_partial_nx1_cycles`, one conv group) with its zeroing
    (at least 0) left out and each kernel position's slowest worker at least ``W (17 + 8
    ceil(P / W))``: ``partitionConvPartialByWorker`` gives some worker ``ceil(P / W)`` of
    the ``P`` positions, and ``getConvPartialnx1WorkerCycles`` (FLOAT) charges 17 plus,
    per worklist entry of ``n`` positions, ``3 - 9`` and 17, 33, 44 or ``45 + 8 (n - 3)``
    for ``n`` 0, 1, 2 or more, each at least ``8 n``."""
    _, icg, ocg = vertex
    height, passes, innermost, fixed = _nx1_floor_terms(vertex, workers)
    outer = -(-kh // height)
    slowest = workers * (17 + 8 * -(-positions // workers))
    inner = outer * (14 + kw * (12 + passes * innermost)) + outer * kw * passes * slowest
    ig, og = cit // icg, cot // ocg
    return fixed + og * 17 + (og - 1) * 6 + 1 + ig * (14 + og * (14 + inner))


def _nx1_floor_terms(vertex: tuple[int, int, int], workers: int) -> tuple[int, int, int, int]:
    """:func:`_nx1_floor`'s terms of the candidate ``vertex``: ``(weight height, passes
    over the partial channels, cycles of an innermost pass, the fixed overhead)``."""
    units, icg, ocg = vertex
    height = FLOAT_WEIGHTS_PER_CONV_UNIT // icg
    load = _NX1_FILTER_HEIGHT_LOAD.get(height, _NX1_FILTER_HEIGHT_LOAD_PER_ROW * height)
    innermost = amp_weight_load_cycles(FLOAT_WEIGHTS_PER_CONV_UNIT * FLOAT.size, units,
                                       COEFF_LOAD_BYTES_PER_CYCLE, height) + load + 3  # fmt: skip
    fixed = _NX1_OVERHEAD + 2 * workers * _NX1_RETENTION_SAVINGS + 1 + 16
    return height, ocg // units, int(innermost), int(fixed)


def _vertex_name(sub: ConvParams, vertex: tuple[int, int, int], splits: dict[str, int]) -> str:
    """The AMP vertex of a tile of the partition ``splits`` (``canUseConvPartial1x1Vertex``,
    as :func:`_partial` prices it)."""
    out_rows = int(sub.getOutputFieldShape()[0])
    tile_kernel = (-(-int(sub.kernelShape[0]) // splits["kernelSplit[0]"]), int(sub.kernelShape[1]))
    one = (vertex[1] == FLOAT_WEIGHTS_PER_CONV_UNIT and sub.batchSize == 1
           and tile_kernel == (1, 1) and -(-out_rows // splits["fieldSplit[0]"]) == 1)  # fmt: skip
    return "ConvPartial1x1Out" if one else "ConvPartialnx1"


def _inner_kernel_floor(kernel_inner: int, target: Any) -> int:
    """The least ``ConvPartialnx1`` estimate of a tile whose kernel has ``kernel_inner``
    positions in its inner dimension (``kernelSplit`` splits only the outer one, so every
    tile has them all): ``getConvPartialnx1SupervisorInnerLoopCycleEstimateHalfFloat``
    charges each ``12 + passes x (weight loads + 15 + 3)`` supervisor cycles at least
    (a weight height of 1; 2 and 4 add 46 and 60 instead of 15), the weight loads
    ``getConvPartialAmpSupervisorWeightLoadCycleEstimate``: ``units x 32 / 8`` bytes (the
    fewest conv units), plus the outer loops' 14 and :data:`_LEAST_VERTEX`."""
    units = min(u for u, _, _ in amp_candidates(target))
    loads = units * FLOAT_WEIGHTS_PER_CONV_UNIT * FLOAT.size // COEFF_LOAD_BYTES_PER_CYCLE
    return _LEAST_VERTEX + 14 + kernel_inner * (12 + loads + 15 + 3)


def _iteration_floor(sub: ConvParams, vertex: tuple[int, int, int], target: Any) -> int:
    """The least partial-sum cycles of a tile of ``sub`` (or of a serial iteration of it,
    which has its kernel and batch) with the AMP ``vertex``: :data:`_LEAST_VERTEX` where
    ``canUseConvPartial1x1Vertex`` may hold (a weight height of 1, batch 1, a kernel one
    wide in its inner dimension: ``kernelSplit`` and ``fieldSplit`` can make the tile's
    kernel and rows 1), else every tile runs ``ConvPartialnx1`` over the whole inner
    kernel dimension (:func:`_inner_kernel_floor`, which is at least
    :data:`_LEAST_VERTEX`)."""
    inner = int(sub.kernelShape[1])
    one = vertex[1] == FLOAT_WEIGHTS_PER_CONV_UNIT and sub.batchSize == 1 and inner == 1
    return _LEAST_VERTEX if one else _inner_kernel_floor(inner, target)


def _vertex_floor(sub: ConvParams, vertex: tuple[int, int, int], target: Any) -> int:
    """A lower bound, over every partition of the form ``sub`` with the AMP ``vertex``, of
    the least partial sums :func:`~.poplibs_float_conv2d.form_costs` gives a partition it
    does not estimate (computed before any partition is made): the MAC inequality's
    ``ceil(MACs / (units x 2) / used)`` with ``used <= T`` tiles, and where no tile can run
    ``ConvPartial1x1Out`` (a weight height above 1, a batch or a kernel wider than 1),
    :func:`_nx1_floor`'s ``8 x passes`` cycles for each of a tile's positions, kernel
    positions over the weight height and input and output groups, a tile having at least
    ``1 / T`` of their product over the whole form (``ceil(g / s) s >= g`` for each
    split). Every other term of a partition's cycles is at least 0, so a form whose bound
    passes a limit has every partition above it."""
    units, icg, ocg = vertex
    height = FLOAT_WEIGHTS_PER_CONV_UNIT // icg
    tiles = target.getNumTiles()
    rows, cols = (int(x) for x in sub.getOutputFieldShape())
    kh, kw = (int(x) for x in sub.kernelShape)
    ci_g = -(-sub.inputChannelsPerConvGroup // icg)
    co_g = -(-sub.outputChannelsPerConvGroup // ocg)
    positions = sub.batchSize * rows * cols
    rate_macs = positions * kh * kw * ci_g * icg * co_g * ocg // (units * FLOAT_LOAD_ELEMS)
    least = -(-rate_macs // tiles)
    if height != 1 or sub.batchSize != 1 or kw != 1:
        work = ci_g * co_g * -(-kh // height) * kw * positions
        least = max(least, 8 * (ocg // units) * -(-work // tiles))
    return int(least)
