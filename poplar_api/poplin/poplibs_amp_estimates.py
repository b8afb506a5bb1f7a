"""Poplibs' planner estimates of the AMP vertices' partial sums.

The planner (graphcore/poplibs ``7eac0f26``, ``addPartialCalcCycleEstimate`` in
``lib/poplin/ConvModel.cpp``) prices a tile's AMP partial sums with the
``ConvPartial1x1Out`` estimate (:func:`amp_1x1_inner`, :func:`amp_partial_cycles`) only
when ``canUseConvPartial1x1Vertex`` holds: a conv-unit
weight height of 1 (``getConvUnitWeightHeight``: the chain's weights, 16 HALF or 8
FLOAT, over the input channels per group), batch 1, a 1x1 kernel, input dilation equal
to the output stride, every field dimension but the innermost of size 1 and no output
padding. Otherwise it prices the ``ConvPartialnx1`` vertex (:func:`nx1_partial_cycles`):

* ``estimateZeroSupervisorCycles`` of the tile's ``field x batch`` positions times the
  partials grouping, over the output and conv groups, costed as FLOAT partials
  (``getZeroSupervisorVertexCycleEstimate`` with ``isFloat`` true whatever the partials
  type);
* ``getConvPartialnx1InnerLoopCycleEstimate``: the tile's outputs split over the workers
  by ``partitionConvPartialByWorker`` (:func:`partition_by_worker`), each worker's list
  of active elements per row it touches (``numFieldPos``), the same worklist at every
  kernel position; ``ceil(kernel[0] / filterHeight)`` outer positions (the AMP takes
  ``filterHeight`` rows of the outermost kernel dimension at once) by the product of the
  other kernel dimensions, priced by ``getConvPartialnx1SupervisorInnerLoopCycleEstimate``;
* ``getConvPartialnx1SupervisorOuterLoopCycleEstimate`` of that over the tile's conv,
  input and output groups.

The supervisor and worker formulas are the vertex estimate's
(:func:`~poplar_api.poplin.conv_estimators.conv_partial_nx1_cycles`, the same functions
of ``PerformanceEstimation.hpp``); what the planner adds is the worklists it assumes and
the zeroing.

When the weight height is not 1, ``addTileLevelTransformEstimates`` (``ConvModel.cpp``)
also charges padding the outermost kernel dimension to a multiple of the height
(:func:`amp_padding_estimate`: ``padKernelSpatialDim`` then ``applyPadding``), the zeros
exchanged into the tile's weights and inputs. Derived from the source, not a port.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Sequence
from typing import Any

import numpy as np

from poplar_api.poplin import amp
from poplar_api.poplin.conv_estimator_common import (
    CountLists,
    zero_supervisor_cycles,
    zero_worklist,
)
from poplar_api.poplin.conv_estimators import conv_partial_nx1_cycles
from poplar_api.popops.layout import first_rows

__all__ = [
    "amp_1x1_inner",
    "amp_padding_estimate",
    "amp_partial_cycles",
    "nx1_partial_cycles",
    "partition_by_worker",
]

#: ``getWeightsPerConvUnit`` of HALF: the chain of 4 loads of 4 elements.
HALF_WEIGHTS_PER_CONV_UNIT = 16
#: ``getConvUnitCoeffLoadBytesPerCycle`` halved: ``use128BitConvUnitLoad`` is off by default.
COEFF_LOAD_BYTES_PER_CYCLE = amp.AMP_COEFF_LOAD_BYTES_PER_CYCLE // 2


def amp_1x1_inner(
    field: np.ndarray, workers: int, zeroing: bool, common: bool = True, half8: bool = False
) -> np.ndarray:
    """``getConvPartial1x1InnerLoopCycleEstimate`` (HALF inputs, FLOAT partials: the common
    code path, retention savings of 7, 10 at f927358) for tile fields of ``field``
    positions: the field split over the workers (``partitionConvPartialByWorker``), the
    slowest worker's ``getConvPartial1x1SupervisorInnerLoopCycleEstimateHalfFloat``
    cycles times the workers, at least the fastest's plus 14 (an idle worker counts 0). ``common``:
    7eac0f26's constants, else f927358's (:mod:`.poplibs_release`). ``half8``: HALF
    partials on 8 conv units, 7eac0f26's other code path (zeroing 2 cycles a position, no
    retention savings)."""
    tail = (1 if zeroing else 2) if common else (2 if zeroing else 4)
    fixed = np.array([20 + tail, 31 + tail, 40 + tail], np.int64)

    def worker(n: np.ndarray) -> np.ndarray:
        if half8:
            z = int(zeroing)
            low = np.where(n == 1, 39 + 4 * z, 40 + 6 * z)
            return np.where(n < 3, low, 41 + (2 + 2 * n) * z + (n - 3) * 4)
        big = ((37 if zeroing else 38) if common else (38 if zeroing else 40)) + (n - 3) * 4
        return np.where(n < 3, fixed[np.minimum(n, 2)], big) - (7 if common else 10)

    hi = workers * worker(-(-field // workers))  # the workers with one position more
    lo = field // workers
    lo = np.where(lo > 0, workers * worker(np.maximum(lo, 1)), 0)  # (an idle worker: 0)
    return np.maximum(np.maximum(hi, lo), np.minimum(hi, lo) + 14)


def amp_partial_cycles(
    ft: Any,
    cit: Any,
    cot: Any,
    gt: Any,
    icg: int,
    ocg: int,
    units: int,
    float_partials: bool,
    common: bool,
    workers: int,
) -> Any:
    """``addPartialCalcCycleEstimate``'s AMP branch for a matMul product's tiles (a 1-wide
    kernel and field row after ``calculateFlattenedParams``: ``ft`` positions, ``cit``
    input and ``cot`` output channels, ``gt`` conv groups, HALF inputs; arrays or ints).

    With the full input grouping (16, a conv-unit weight height of 1): the
    ``ConvPartial1x1Out`` estimate, ``getConvPartial1x1SupervisorOuterLoopCycleEstimate``
    of the tile's groups over :func:`amp_1x1_inner` (``common``: 7eac0f26's constants,
    else f927358's; HALF partials on 8 units take 7eac0f26's other code path). With fewer
    input channels a group: :func:`nx1_partial_cycles` of the field ``(1, ft)``, a
    ``1 x 1`` kernel and the height ``16 / icg``.
    """
    fp = bool(float_partials)
    if icg != HALF_WEIGHTS_PER_CONV_UNIT:
        shape = np.broadcast(ft, cit, cot, gt).shape
        rows = np.stack([np.broadcast_to(np.asarray(x, np.int64), shape).ravel()
                         for x in (ft, cit, cot, gt)], axis=1)  # fmt: skip
        first, inv = first_rows(rows)
        uniq = rows[first]
        per = [
            nx1_partial_cycles(
                batch=1, field_shape=(1, int(f)), kernel_shape=(1, 1),
                filter_height=HALF_WEIGHTS_PER_CONV_UNIT // icg, conv_groups=int(g),
                in_groups=-(-int(ci) // icg), out_groups=-(-int(co) // ocg),
                out_chans_per_group=ocg, num_conv_units=units,
                weight_bytes_per_conv_unit=HALF_WEIGHTS_PER_CONV_UNIT * 2,
                coeff_load_bytes_per_cycle=COEFF_LOAD_BYTES_PER_CYCLE, workers=workers,
                float_activations=False, float_partials=fp,
            )
            for f, ci, co, g in uniq.tolist()
        ]  # fmt: skip
        out = np.array(per, np.int64)[inv.ravel()].reshape(shape)
        return out if shape else int(out)
    half8 = not fp and units != 16  # (not commonHalfAndFloatPartialsCodePath)
    common = common and not half8
    inner_z, inner_nz = (amp_1x1_inner(ft, workers, z, common, half8) for z in (True, False))
    c = int(common)  # (getConvPartial1x1SupervisorOuterLoopCycleEstimate's constants)
    nig, nog, ncg = -(-cit // icg), -(-cot // ocg), gt
    loads = amp.weight_load_cycles(HALF_WEIGHTS_PER_CONV_UNIT * 2, units,
                                   COEFF_LOAD_BYTES_PER_CYCLE)  # fmt: skip
    if half8:
        save_total, save_in = amp.retention_savings(False, False, units)
    elif common:
        save_total, save_in = amp.retention_savings(False, fp, units)
    else:
        save_total, save_in = 10, 2
    passes = -(-ocg // units)
    return 50 + workers * (save_total + save_in * (nig * ncg - 1)) + ncg * (
        12 + c
        + (nig - 1) * (16 - c + nog * (19 + passes * (6 + loads + inner_nz)))
        + (11 + nog * (19 - c + passes * (7 + loads + inner_z)))
    )  # fmt: skip


def _check(name: str, values: Sequence[int], lo: int) -> tuple[int, ...]:
    out = tuple(map(int, values))  # (one pass each: a plan search checks tens of thousands)
    if not out or min(out) < lo:
        raise ValueError(
            f"{name}={list(values)!r}: required one or more integers each >= {lo}; give one "
            "value per field dimension"
        )
    return out


def partition_by_worker(
    batch: int,
    out_shape: Sequence[int],
    workers: int,
    input_dilation: Sequence[int] | None = None,
    stride: Sequence[int] | None = None,
) -> list[list[int]]:
    """``partitionConvPartialByWorker`` (``lib/poplin/ConvUtilInternal.cpp``) as the
    planner reads it: per worker context, the active output elements of each row its
    share touches.

    The tile's active outputs (per dimension every ``dilation / gcd(dilation, stride)``-th
    position) form ``batch x rows`` rows of ``E`` elements (``rows`` the product of the
    outer dimensions' active positions, ``E`` the innermost's); worker ``i`` takes
    elements ``[i N / W, (i + 1) N / W)`` of the ``N`` (floor divisions), one count per
    row the range touches, none when the range is empty.
    """
    shape = _check("out_shape", out_shape, 0)
    dims = len(shape)
    dil = _check("input_dilation", input_dilation or [1] * dims, 1)
    st = _check("stride", stride or [1] * dims, 1)
    if len(dil) != dims or len(st) != dims:
        raise ValueError(
            f"partition_by_worker: out_shape {list(shape)} has {dims} dimensions but "
            f"input_dilation {list(dil)} and stride {list(st)} give {len(dil)} and "
            f"{len(st)}; give one value per field dimension"
        )
    if workers < 1 or batch < 0:
        raise ValueError(
            f"partition_by_worker: workers={workers}, batch={batch}: required workers >= 1 "
            "and batch >= 0"
        )
    return [list(c) for c in _worker_counts(int(batch), shape, int(workers), dil, st)]


@functools.lru_cache(maxsize=1 << 12)
def _worker_counts(
    batch: int,
    shape: tuple[int, ...],
    workers: int,
    dil: tuple[int, ...],
    st: tuple[int, ...],
) -> tuple[tuple[int, ...], ...]:
    """:func:`partition_by_worker` of checked arguments, remembered: a plan search asks
    for the same tile field under every channel and kernel split it prices."""
    out_stride = [d // math.gcd(d, s) for d, s in zip(dil, st, strict=True)]
    active = [-(-n // o) for n, o in zip(shape, out_stride, strict=True)]
    per_row = active[-1]
    total = batch * math.prod(active[:-1]) * per_row
    out = []
    for i in range(workers):
        begin, end = i * total // workers, (i + 1) * total // workers
        counts = []
        if begin != end:
            for row in range(begin // per_row, (end - 1) // per_row + 1):
                counts.append(min(end, (row + 1) * per_row) - max(begin, row * per_row))
        out.append(tuple(counts))
    return tuple(out)


def nx1_partial_cycles(
    *,
    batch: int,
    field_shape: Sequence[int],
    kernel_shape: Sequence[int],
    filter_height: int,
    conv_groups: int,
    in_groups: int,
    out_groups: int,
    out_chans_per_group: int,
    num_conv_units: int,
    weight_bytes_per_conv_unit: int,
    coeff_load_bytes_per_cycle: int,
    workers: int,
    float_activations: bool,
    float_partials: bool,
    input_dilation: Sequence[int] | None = None,
    stride: Sequence[int] | None = None,
    data_path_width: int = 64,
) -> int:
    """The planner's cycles of a tile's ``ConvPartialnx1`` partial sums
    (``addPartialCalcCycleEstimate``'s AMP branch when ``ConvPartial1x1Out`` does not
    apply; module docstring).

    Parameters
    ----------
    batch, field_shape, kernel_shape
        The tile's batch, output field shape and kernel shape (``convSize``).
    filter_height
        ``getConvUnitWeightHeight``: the chain's weights over ``inChansPerGroup``.
    conv_groups, in_groups, out_groups
        The tile's ``ceil(size / grouping)`` conv, input and output groups.
    out_chans_per_group
        ``partialChansPerGroup``: ``out_chans_per_group // num_conv_units`` passes.
    num_conv_units
        ``method.convUnits``.
    weight_bytes_per_conv_unit
        ``getWeightsPerConvUnit(actsType) x`` the type's size (32 for HALF and FLOAT).
    coeff_load_bytes_per_cycle
        ``getConvUnitCoeffLoadBytesPerCycle``, halved unless ``use128BitConvUnitLoad``
        (off by default) as the planner does.
    workers
        Worker contexts.
    float_activations, float_partials
        FLOAT rather than HALF inputs / partials.
    input_dilation, stride
        Per field dimension (default 1): the transformed input dilation and output
        stride.
    data_path_width
        Bits (64): the zeroing's FLOAT partials per cycle.

    Returns
    -------
    int
        ``estimateZeroSupervisorCycles + getConvPartialnx1SupervisorOuterLoopCycleEstimate``.
    """
    return _nx1(
        int(batch), _check("field_shape", field_shape, 0), _check("kernel_shape", kernel_shape, 1),
        int(filter_height), int(conv_groups), int(in_groups), int(out_groups),
        int(out_chans_per_group), int(num_conv_units), int(weight_bytes_per_conv_unit),
        int(coeff_load_bytes_per_cycle), int(workers), bool(float_activations),
        bool(float_partials), None if input_dilation is None else tuple(input_dilation),
        None if stride is None else tuple(stride), int(data_path_width),
    )  # fmt: skip


#: Tile shapes :func:`_nx1` remembers: a FLOAT plan search of the CNN step's convolutions
#: (examples/cnn, 2026-12-01) prices 28,253 distinct ones, which thrashed a cache of 16,384
#: (36,542 estimates made instead of 28,253); an entry is a few hundred bytes.
_NX1_CACHE = 1 << 16


@functools.lru_cache(maxsize=_NX1_CACHE)
def _nx1(
    batch: int,
    field: tuple[int, ...],
    kernel: tuple[int, ...],
    filter_height: int,
    conv_groups: int,
    in_groups: int,
    out_groups: int,
    out_chans_per_group: int,
    num_conv_units: int,
    weight_bytes_per_conv_unit: int,
    coeff_load_bytes_per_cycle: int,
    workers: int,
    float_activations: bool,
    float_partials: bool,
    input_dilation: tuple[int, ...] | None,
    stride: tuple[int, ...] | None,
    data_path_width: int,
) -> int:
    """:func:`nx1_partial_cycles` of hashable arguments, remembered (a plan search prices
    the same tile shapes many times)."""
    if len(kernel) != len(field):
        raise ValueError(
            f"nx1_partial_cycles: kernel_shape {list(kernel)} and field_shape {list(field)} "
            "must have one entry per field dimension each"
        )
    if filter_height < 1:
        raise ValueError(
            f"nx1_partial_cycles: filter_height={filter_height}: required >= 1 (the chain's "
            "weights over the input channels per group)"
        )
    zero = zero_supervisor_cycles(
        zero_worklist(math.prod(field) * batch * out_chans_per_group, workers),
        out_groups * conv_groups,
        data_path_width,
        workers,
        True,
    )
    outer = -(-kernel[0] // filter_height)
    inner_elems = math.prod(kernel[1:])
    counts = partition_by_worker(batch, field, workers, input_dilation, stride)
    # valid counts by construction: the estimator checks the lists' shape, not each entry,
    # and costs a kernel position's equal lists (one object) once
    lists = CountLists([[entries] * (outer * inner_elems) for entries in counts])
    return zero + conv_partial_nx1_cycles(
        lists,
        num_conv_groups=conv_groups,
        num_out_groups=out_groups,
        num_in_groups=in_groups,
        kernel_inner_elems=inner_elems,
        kernel_outer_elems=outer,
        filter_height=filter_height,
        in_chans_per_group=1,
        out_chans_per_group=out_chans_per_group,
        weight_bytes_per_conv_unit=weight_bytes_per_conv_unit,
        num_conv_units=num_conv_units,
        coeff_load_bytes_per_cycle=coeff_load_bytes_per_cycle,
        num_worker_contexts=workers,
        float_activations=float_activations,
        float_partials=float_partials,
    )


def amp_padding_estimate(
    weight_height: int,
    kernel_dim0: int,
    kernel_split0: Any,
    kernel_dilation0: int,
    tile_kernel: Sequence[Any],
    tile_field: Sequence[Any],
    tile_batch: Any,
    tile_in_chans: Any,
    tile_out_chans: Any,
    tile_conv_groups: Any,
    elem_bytes: int,
    exchange_bytes_per_cycle: float,
    input_rate_multiplier: Any = 1,
) -> tuple[Any, Any]:
    """``addTileLevelTransformEstimates``' AMP branch: ``(cycles, temporary bytes)`` of
    padding the outermost kernel dimension to a multiple of ``weight_height``.

    ``padKernelSpatialDim``: ``P = (X - max(floor(h / s) mod X, ceil(h / s) mod X)) mod
    X`` kernel rows (``X`` the height, ``h`` the whole kernel's outermost dimension,
    ``s`` its split) and ``P x`` the kernel dilation input rows; ``applyPadding``: the
    tile's kernel zeros ``groups x (prod(padded kernel) - prod(kernel)) x in x out`` and
    input zeros ``groups x batch x (prod(padded field) - prod(field)) x in``, exchanged
    (``ExchangeEstimator``: ``ceil(16 bytes / round(16 E))``, the inputs at the rate times
    ``input_rate_multiplier``), their bytes live while the vertex runs. Arguments may be
    numpy arrays (one entry per partition); nothing is charged for a height of 1.
    """
    if weight_height == 1:
        return 0, 0
    x = weight_height
    s = np.asarray(kernel_split0, np.int64)
    pad = (x - np.maximum((kernel_dim0 // s) % x, (-(-kernel_dim0 // s)) % x)) % x
    kern = [np.asarray(k, np.int64) for k in tile_kernel]
    field = [np.asarray(f, np.int64) for f in tile_field]
    padded_kernel = functools.reduce(operator.mul, [kern[0] + pad, *kern[1:]])
    padded_field = functools.reduce(operator.mul, [field[0] + pad * kernel_dilation0, *field[1:]])
    groups, ci = np.asarray(tile_conv_groups, np.int64), np.asarray(tile_in_chans, np.int64)
    kernel_zeros = (
        groups * (padded_kernel - functools.reduce(operator.mul, kern)) * ci * tile_out_chans
    )
    input_zeros = groups * tile_batch * (padded_field - functools.reduce(operator.mul, field)) * ci
    scaled = max(1, round(float(exchange_bytes_per_cycle) * 16))
    cycles = -(-(kernel_zeros * elem_bytes * 16) // scaled) + -(
        -(input_zeros * elem_bytes * 16) // (scaled * np.asarray(input_rate_multiplier))
    )
    return cycles, (kernel_zeros + input_zeros) * elem_bytes
