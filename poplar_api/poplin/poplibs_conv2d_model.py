"""Poplibs' cost of the plain AMP and SLIC plans of a convolution over a 2-D field.

For a HALF convolution with FLOAT partials of pass ``NONE`` whose kernel is wider than one
position (so that nothing flattens, :mod:`.poplibs_conv_model`), this module restates what
``constructModel`` and ``addEstimates`` (graphcore/poplibs ``7eac0f26``,
``lib/poplin/ConvModel.cpp``) cost for a family of ``createPlan``'s candidates: the
operands unswapped, no ``expandDims`` at either level, one pass (no serial split), and the
AMP with each input grouping ``getConvVertexAMPCandidates`` offers (16, 8 or 4 channels, a
conv-unit weight height of 1, 2 or 4, :data:`AMP_GROUPINGS`) and either of its partial
groupings (the 8 conv units, then 16), or SLIC
with 4 channels of one group (one input- and one output-channel grain a tile,
``addSLICConstraints``; its estimate :mod:`.poplibs_slic_estimates`, the kernel width
padded to its window and the input padding applied as exchanged zeros,
``addTileLevelTransformEstimates``, its extra partials buffer). :func:`slic_floors`
bounds SLIC's other forms. Over that family the partition variables are those of
``constructModel``: ``batchSplit``, a ``fieldSplit`` per dimension (each the least
divisor giving its part, ``ceildivConstrainDivisor``), ``kernelSplit`` of every kernel
dimension but the innermost (which "the implementation doesn't support splitting"),
``outChanSplit.parallel`` and ``inChanSplit.parallel`` over the channel grains, their
product at most the tiles. Each partition is costed as ``addEstimates`` sums it:

* exchange (``addExchangeCycleEstimates``): a tile's input window,
  ``getMaxInputRangeSize`` per dimension (``(out - 1) stride + 1`` plus the tile's kernel
  less one, clipped to the whole input range: the halo), times the tile's batch and input
  channels, less the ``1 / outChanSplit`` already there, at twice the rate when the
  output-channel split is a multiple of the tiles sharing an exchange bus; the tile's
  weights less the ``1 / (fieldSplit batchSplit)`` there; its partial sums in FLOAT and
  the later reduction stages' (``getMultiStageReducePlan`` over ``kernelSplit *
  inChanSplit``);
* the transforms (``addTransformCycleEstimate``): unswapped and unexpanded, only the
  output regroup when the partials are grouped by fewer than 16 (``regroupOutput``);
* the partial sums (``addPartialCalcCycleEstimate``): the ``ConvPartialnx1`` estimate of
  the tile's batch, output field and kernel
  (:func:`~.poplibs_amp_estimates.nx1_partial_cycles`), or SLIC's
  (:func:`~.poplibs_slic_estimates.slic_partial_cycles`);
* the reduction over the kernel and input-channel splits, or the cast of the FLOAT
  partials to HALF (``addReduceCycleEstimate``), as for a product;

and its temporary bytes (``addConvTempMemoryEstimate``: the tile's inputs, weights and
partials; the reduction's; twice the largest transform's) must stay within
``availableMemoryProportion`` of the tile. ``constructModel``'s inequality ``totalMacs /
maxMACsPerCyclePerTile <= usedTiles * partialCalcCycles`` (32 MACs a cycle for 8 units and
for SLIC) removes a partition whose partial-sum estimate is below it. The least ``(cycles,
bytes)`` is the family's plan. Not restated here: the other families (swapped operands,
``expandDims``, ``outChanFlattenDims``, serial splits, SLIC's other groupings and the MAC
vertices; :mod:`.poplibs_conv2d_forms` and :func:`slic_floors` bound them), which a plan
of the whole search may take instead; the family's best is an upper bound of the cost of
Poplibs' plan, not that plan. Derived from the source, not a port.
"""

from __future__ import annotations

import functools
from typing import Any

import numba
import numpy as np

from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.poplibs_amp_estimates import (
    COEFF_LOAD_BYTES_PER_CYCLE,
    HALF_WEIGHTS_PER_CONV_UNIT,
    amp_padding_estimate,
    amp_partial_cycles,
    nx1_partial_cycles,
)
from poplar_api.poplin.poplibs_matmul_model import (
    Product,
    _exchange,
    _per_depth,
    _reduce_cycles,
    _reduce_exchange_later_stages,
    _splits,
    _transforms,
    amp_vertex_types,
)
from poplar_api.poplin.poplibs_slic_estimates import WINDOW, slic_partial_cycles
from poplar_api.popops.layout import first_rows
from poplar_api.types import FLOAT, HALF

__all__ = [
    "SPLITS",
    "describe_family",
    "family_costs",
    "family_plan",
    "partial_sums",
    "slic_floors",
    "uncovered",
]

#: The partition variables of a 2-D convolution's one-pass plans, by ``constructModel``'s
#: names (``kernelSplit[0]``: the outer kernel dimension; the inner one is not split).
SPLITS = ("batchSplit", "fieldSplit[0]", "fieldSplit[1]", "kernelSplit[0]",
          "outChanSplit.parallel", "inChanSplit.parallel")  # fmt: skip
#: The AMP's conv units for HALF inputs with FLOAT partials on ipusim's targets.
_UNITS = 8
#: The AMP's ``(inChansPerGroup, partialChansPerGroup)`` for HALF inputs with FLOAT partials
#: in ``getConvVertexAMPCandidates``' order: input groupings from the 16 weights of a conv
#: unit down that divide them and are multiples of its 4 input loads
#: (``canUseConvolutionInstruction``), partials by the 8 units, then by 16.
AMP_GROUPINGS = [(icg, ocg) for icg in (16, 8, 4) for _, ocg in amp_vertex_types(_UNITS)]
#: SLIC's channels a group (input and output) of its one-group HALF candidate.
SLIC_CHANS = 4
#: ``getMaxMACsPerCyclePerTile``: the AMP's units times 4 HALF loads; SLIC's ``min(4, 4)
#: x 4 x 2``.
_MAX_MACS = {"AMP": _UNITS * 4, "SLIC": min(4, SLIC_CHANS) * WINDOW * 2}


def uncovered(params: ConvParams, target: Any, dtype: Any, kernel_flip: bool) -> list[str]:
    """Why ``params`` is not a convolution the restated 2-D models cover: ``dtype`` inputs
    and output, a 2-D field, one conv group, input padding only (a flipped kernel too where
    ``kernel_flip``), on one IPU. Empty when it is; each entry names the value found and
    what is needed, for the models' errors."""
    why = []
    if params.inputType != dtype or params.outputType != dtype:
        want = f"{dtype.name.upper()}/{dtype.name.upper()}"
        why.append(f"types {params.inputType.name}/{params.outputType.name} ({want} needed)")
    if params.getNumFieldDims() != 2:
        why.append(f"{params.getNumFieldDims()} field dimensions (2 needed)")
    if params.numConvGroups != 1:
        why.append(f"{params.numConvGroups} conv groups (1 needed)")
    it, kt, ot = params.inputTransform, params.kernelTransform, params.outputTransform
    if any(it.dilation[d] != 1 or kt.dilation[d] != 1 or ot.stride[d] != 1 or it.flip[d]
           or (kt.flip[d] and not kernel_flip) or it.truncationLower[d]
           or it.truncationUpper[d] or kt.paddingLower[d] or kt.paddingUpper[d]
           or kt.truncationLower[d] or kt.truncationUpper[d] or ot.paddingLower[d]
           or ot.paddingUpper[d] or ot.truncationLower[d] or ot.truncationUpper[d]
           for d in range(params.getNumFieldDims())):  # fmt: skip
        flip = "input flip" if kernel_flip else "flip"
        why.append(f"a dilation, stride, {flip}, truncation or kernel/output padding")
    if target.getNumTiles() != target.getTilesPerIPU():
        why.append(f"{target.getNumTiles() // target.getTilesPerIPU()} IPUs (1 needed)")
    return why


def _check(params: ConvParams, target: Any) -> None:
    why = uncovered(params, target, HALF, False)
    if why:
        raise ValueError(
            f"poplibs_conv2d_model: {params} is not covered: " + "; ".join(why) + " (hint: "
            "the model restates a HALF 2-D convolution with input padding only, one group)"
        )


def _input_range(out: np.ndarray, kernel: np.ndarray, d: int, params: ConvParams) -> np.ndarray:
    """``getMaxInputRangeSize`` of stride 1 without dilation: ``out + kernel - 1`` input
    positions, clipped to the input the whole output reads (the unpadded input)."""
    whole = int(params.inputFieldShape[d])
    return np.minimum(out + kernel - 1, whole)


def family_costs(
    params: ConvParams,
    target: Any,
    method: str,
    groups: tuple[int, int],
    splits: dict[str, np.ndarray],
    limit: float | None = None,
    skip: tuple[str, ...] = (),
) -> dict[str, np.ndarray]:
    """Poplibs' ``(cycles, temporary bytes)`` and itemised cycles of the family's
    partitions ``splits`` (arrays by :data:`SPLITS`) with the vertex ``method`` (``"AMP"``
    or ``"SLIC"``) and grouping ``groups`` (``(inChansPerGroup, partialChansPerGroup)``;
    module docstring): keys ``cycles``, ``bytes``, ``ok`` (the MAC inequality holds) and
    the terms ``input exchange``, ``weight exchange``, ``partials exchange``,
    ``later stages exchange`` (the reduction's after the first), ``transform``,
    ``padding`` (SLIC's or the AMP's tile-level transform), ``compute``, ``reduce``.
    With ``limit``, the partial sums are estimated only for partitions whose other terms
    plus the least partial sums the MAC inequality allows reach at most ``limit``; the
    others (``costed`` false) cost more than ``limit`` (their ``cycles`` that lower bound).
    The terms named in ``skip`` count 0 (a lower bound of the cost)."""
    _check_family(params, target, method, groups, "family_costs")
    icg = groups[0]
    out_shape = [int(x) for x in params.getOutputFieldShape()]
    kernel = [int(x) for x in params.kernelShape]
    bs, fh, fw = splits["batchSplit"], splits["fieldSplit[0]"], splits["fieldSplit[1]"]
    ks = splits["kernelSplit[0]"]
    po, pi = splits["outChanSplit.parallel"], splits["inChanSplit.parallel"]
    bt, ht, wt, kh, cit, cot = _tile_sizes(params, groups, splits)
    used = bs * fh * fw * ks * po * pi
    isz, psz = HALF.size, FLOAT.size
    # exchange
    inputs = _input_range(ht, kh, 0, params) * _input_range(wt, kernel[1], 1, params) * bt * cit
    weights = kh * kernel[1] * cit * cot
    outputs = ht * wt * bt * cot
    share = target.getTilesPerSharedExchangeBus()
    mult = np.where((share > 1) & (po % share == 0), 2, 1)
    x_in = _exchange(inputs - inputs // po, isz, target, mult)
    x_w = _exchange(weights - weights // (fh * fw * bs), isz, target)
    depth = ks * pi
    later = lambda o, d: _reduce_exchange_later_stages(o, d, psz, target)  # noqa: E731
    x_p = _exchange(outputs, psz, target)
    x_later = _per_depth(outputs, depth, later)
    # the output regroup (addTransformCycleEstimate), as for the product of the same sizes
    field = params.batchSize * out_shape[0] * out_shape[1]
    dims = (1, field, params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup)
    product = Product(dims, target, False, groups, "NONE")
    tr = _transforms(product, used)
    pad = pad_bytes = np.zeros(used.shape, np.int64)
    if method == "SLIC":
        pad, pad_bytes = _slic_padding(params, target, bt, ht, wt, kh, cit, cot, mult)
    elif icg != HALF_WEIGHTS_PER_CONV_UNIT:  # (the AMP's kernel rows padded to its height)
        pad, pad_bytes = amp_padding_estimate(
            HALF_WEIGHTS_PER_CONV_UNIT // icg, kernel[0], ks, 1, [kh, kernel[1]], [ht, wt], bt,
            cit, cot, 1, isz, target.getExchangeBytesPerCycle(), mult,
        )  # fmt: skip
        pad, pad_bytes = np.broadcast_to(pad, used.shape), np.broadcast_to(pad_bytes, used.shape)
    # the reduction or cast
    red_out = -(-outputs // depth)
    reduce = _per_depth(red_out, depth, lambda o, d: _reduce_cycles(o, d, psz, isz, target))
    # temporary bytes
    partial_bytes = psz * outputs
    if method == "SLIC":  # (the vertex's extra buffer: a group's partials and 200 bytes)
        partial_bytes = 2 * partial_bytes + 200
    conv = isz * inputs + isz * weights + partial_bytes + pad_bytes
    red_bytes = np.where(depth > 1, red_out * depth * psz, 0)
    t_max = np.maximum.reduce([tr["in_bytes"], tr["w_bytes"], tr["out_bytes"]])
    temp = np.maximum.reduce([2 * t_max, conv, red_bytes])
    terms = {"input exchange": x_in, "weight exchange": x_w, "partials exchange": x_p,
             "later stages exchange": x_later,
             "transform": tr["in"] + tr["w"] + tr["out"], "padding": pad,
             "reduce": reduce}  # fmt: skip
    for key in skip:
        terms[key] = np.zeros(used.shape, np.int64)
    rest = sum(terms.values())
    # the partial sums (the MAC inequality: used * compute >= MACs // maxMACs)
    macs = params.getNumberOfMACs() // _MAX_MACS[method]
    least = -(-macs // used)
    costed = np.ones(used.shape, bool) if limit is None else rest + least <= limit
    compute = np.broadcast_to(least, used.shape).copy()
    if costed.any():
        sizes = [np.broadcast_to(x, used.shape)[costed] for x in (bt, ht, wt, kh, cit, cot)]
        compute[costed] = _tile_partial_sums(params, target, method, groups, sizes)
    terms["compute"] = compute
    ok = costed & (macs <= used * compute)
    return {"cycles": rest + compute, "bytes": temp, "ok": ok, "costed": costed, **terms}


def _check_family(
    params: ConvParams, target: Any, method: str, groups: tuple[int, int], caller: str
) -> None:
    """:func:`_check`, and that ``method`` grouped ``groups`` is one the model restates."""
    _check(params, target)
    if (method, groups) not in [*(("AMP", g) for g in AMP_GROUPINGS), ("SLIC", (4, 4))]:
        raise ValueError(
            f"{caller}: {method} grouped {groups}: the AMP's {AMP_GROUPINGS} and SLIC's "
            f"{(SLIC_CHANS, SLIC_CHANS)} are restated (getConvVertexAMPCandidates, "
            "getConvVertexSLICCandidates)"
        )


def _tile_sizes(
    params: ConvParams, groups: tuple[int, int], splits: dict[str, np.ndarray]
) -> tuple[np.ndarray, ...]:
    """A tile's batch, output rows and columns, outer kernel rows, input and output
    channels (whole groupings) in each partition of ``splits``."""
    icg, ocg = groups
    out_shape = [int(x) for x in params.getOutputFieldShape()]
    ci_g = -(-params.inputChannelsPerConvGroup // icg)
    co_g = -(-params.outputChannelsPerConvGroup // ocg)
    return (
        -(-params.batchSize // splits["batchSplit"]),
        -(-out_shape[0] // splits["fieldSplit[0]"]),
        -(-out_shape[1] // splits["fieldSplit[1]"]),
        -(-int(params.kernelShape[0]) // splits["kernelSplit[0]"]),
        -(-ci_g // splits["inChanSplit.parallel"]) * icg,
        -(-co_g // splits["outChanSplit.parallel"]) * ocg,
    )


def _tile_partial_sums(
    params: ConvParams, target: Any, method: str, groups: tuple[int, int], sizes: list[Any]
) -> np.ndarray:
    """``addPartialCalcCycleEstimate`` (:func:`_partial`) of the tiles of sizes ``sizes``
    (:func:`_tile_sizes`' six arrays, one entry a tile), each distinct tile once."""
    rows = np.stack(sizes, axis=1)
    first, inv = first_rows(rows)
    uniq = rows[first]
    workers = target.getNumWorkerContexts()
    kw = int(params.kernelShape[1])
    one = params.batchSize == 1  # (canUseConvPartial1x1Vertex reads the whole batch)
    per = [_partial(method, groups, b, (h, w), (k, kw), ci, co, workers, one)
           for b, h, w, k, ci, co in uniq.tolist()]  # fmt: skip
    return np.array(per, np.int64)[inv.ravel()]


def partial_sums(
    params: ConvParams,
    target: Any,
    method: str,
    groups: tuple[int, int],
    splits: dict[str, np.ndarray],
) -> np.ndarray:
    """The ``compute`` term of :func:`family_costs` of every partition of ``splits``
    (costed: the partial-sum estimate of the partition's tile), without its other terms:
    for a caller that has those already (a partition's cost is its other terms plus
    this)."""
    _check_family(params, target, method, groups, "partial_sums")
    sizes = list(_tile_sizes(params, groups, splits))
    return _tile_partial_sums(params, target, method, groups, sizes)


def _partial(method: str, groups: tuple[int, int], batch: int, field: tuple[int, int],
             kernel: tuple[int, int], cit: int, cot: int, workers: int,
             batch_one: bool = False) -> int:  # fmt: skip
    """``addPartialCalcCycleEstimate`` of one tile (the AMP's conv-unit weight height:
    the 16 weights of a conv unit over the input channels a group; ``ConvPartial1x1Out``
    where ``canUseConvPartial1x1Vertex`` holds: a height of 1, the convolution's batch of
    one (``batch_one``), a 1 x 1 tile kernel and one tile row)."""
    icg, ocg = groups
    if method == "SLIC":
        return slic_partial_cycles(batch, field, kernel, 1, 1, SLIC_CHANS, workers)
    if icg == HALF_WEIGHTS_PER_CONV_UNIT and batch_one and kernel == (1, 1) and field[0] == 1:
        return int(amp_partial_cycles(field[1], cit, cot, 1, icg, ocg, _UNITS, True, True,
                                      workers))  # fmt: skip
    return nx1_partial_cycles(
        batch=batch, field_shape=field, kernel_shape=kernel,
        filter_height=HALF_WEIGHTS_PER_CONV_UNIT // icg, conv_groups=1,
        in_groups=cit // icg, out_groups=cot // ocg,
        out_chans_per_group=ocg, num_conv_units=_UNITS,
        weight_bytes_per_conv_unit=HALF_WEIGHTS_PER_CONV_UNIT * HALF.size,
        coeff_load_bytes_per_cycle=COEFF_LOAD_BYTES_PER_CYCLE, workers=workers,
        float_activations=False, float_partials=True,
    )  # fmt: skip


def _slic_padding(
    params: ConvParams,
    target: Any,
    bt: Any,
    ht: Any,
    wt: Any,
    kh: Any,
    cit: Any,
    cot: Any,
    mult: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """SLIC's ``addTileLevelTransformEstimates``: the kernel width padded to a multiple of
    the window (``padKernelSpatialDim``, the inner dimension unsplit: ``(4 - w mod 4) mod
    4`` columns, as many input columns) and the input padding applied
    (``truncateDilateAndPadInput``: ``paddingLower + paddingUpper`` per dimension); the
    zeros of the tile's kernel and output field so padded (``applyPadding``) exchanged,
    the inputs at the input rate, their bytes live with the vertex."""
    it = params.inputTransform
    kw = int(params.kernelShape[1])
    extra = (WINDOW - kw % WINDOW) % WINDOW
    pad_h = int(it.paddingLower[0]) + int(it.paddingUpper[0])
    pad_w = extra + int(it.paddingLower[1]) + int(it.paddingUpper[1])
    kernel_zeros = kh * extra * cit * cot
    input_zeros = bt * ((ht + pad_h) * (wt + pad_w) - ht * wt) * cit
    cycles = _exchange(kernel_zeros, HALF.size, target) + _exchange(
        input_zeros, HALF.size, target, mult
    )
    return cycles, (kernel_zeros + input_zeros) * HALF.size


def _partitions(
    params: ConvParams, target: Any, method: str, groups: tuple[int, int]
) -> dict[str, np.ndarray]:
    """``constructModel``'s partitions of the family (SLIC: one input- and output-channel
    grain a tile, ``addSLICConstraints``): :func:`_partition_grid` of what they depend on
    (a new dict of its read-only arrays)."""
    icg, ocg = groups
    rows, cols = (int(x) for x in params.getOutputFieldShape())
    grid = _partition_grid(params.batchSize, rows, cols, int(params.kernelShape[0]),
                           -(-params.outputChannelsPerConvGroup // ocg),
                           -(-params.inputChannelsPerConvGroup // icg), target.getNumTiles(),
                           method == "SLIC")  # fmt: skip
    return dict(grid)


#: Partition grids :func:`_partition_grid` keeps (least recently used dropped first).
GRIDS = 128


@functools.lru_cache(maxsize=GRIDS)
def _partition_grid(
    batch: int, rows: int, cols: int, kernel: int, out_grains: int, in_grains: int,
    tiles: int, slic: bool,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The partitions by :data:`SPLITS` of a batch, output rows and columns, outer kernel
    dimension and output and input channel grains over at most ``tiles`` tiles: every
    product of each one's least splits (``_splits``) within ``tiles`` (SLIC's channels
    whole). Its arguments are all it reads, so a plan search asks for the same grid for
    the candidates and forms of the same grains: it is enumerated once (the arrays are
    read-only; ``shared_plans.clear`` forgets them)."""
    axes = [_splits(n, tiles)[0] for n in (batch, rows, cols, kernel, out_grains, in_grains)]
    if slic:
        axes[4], axes[5] = axes[4][-1:], axes[5][-1:]  # (one grain a tile)
    # the rows of np.meshgrid(*axes, indexing="ij") in its order whose product is within
    # the tiles (every split is at least 1, so a prefix's product is at most its rows')
    values = np.concatenate(axes)
    ends = np.cumsum([a.size for a in axes]).astype(np.int64)
    count = _grid_rows(values, ends, tiles, np.empty((6, 0), np.int64))
    grid = np.empty((6, count), np.int64)
    _grid_rows(values, ends, tiles, grid)
    out = dict(zip(SPLITS, grid, strict=True))
    for v in out.values():
        v.setflags(write=False)
    return out


@numba.njit(cache=True, nogil=True)
def _grid_rows(values, ends, tiles, out):  # pragma: no cover - compiled
    # The six axes are values[ends[k - 1]:ends[k]], each ascending: every combination in
    # row-major order whose product is at most tiles (an axis's loop stops at the first
    # value that passes them: the later ones are larger). Returns how many; writes them
    # as the columns of out when it has room.
    fill = out.shape[1] > 0
    n = 0
    for i0 in range(0, ends[0]):
        p0 = values[i0]
        if p0 > tiles:
            break
        for i1 in range(ends[0], ends[1]):
            p1 = p0 * values[i1]
            if p1 > tiles:
                break
            for i2 in range(ends[1], ends[2]):
                p2 = p1 * values[i2]
                if p2 > tiles:
                    break
                for i3 in range(ends[2], ends[3]):
                    p3 = p2 * values[i3]
                    if p3 > tiles:
                        break
                    for i4 in range(ends[3], ends[4]):
                        p4 = p3 * values[i4]
                        if p4 > tiles:
                            break
                        for i5 in range(ends[4], ends[5]):
                            if p4 * values[i5] > tiles:
                                break
                            if fill:
                                out[0, n], out[1, n], out[2, n] = values[i0], values[i1], values[i2]
                                out[3, n], out[4, n], out[5, n] = values[i3], values[i4], values[i5]
                            n += 1
    return n


#: The partitions :func:`_least_partitions` costs first (those of the least lower bounds).
_FIRST = 64


def _least_partitions(
    params: ConvParams,
    target: Any,
    method: str,
    groups: tuple[int, int],
    bound: int,
    limit: float | None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The partitions of the grouping (in :func:`_partitions`' order) that may hold the
    family's least cost within ``bound`` bytes and at most ``limit`` cycles, with
    :func:`family_costs` of them: every partition within ``bound`` whose lower bound (its
    cycles but the partial sums, plus the MAC inequality's least partial sums) is at most
    the least cost found. The partitions of the least lower bounds are costed first, which
    gives that cost; the rest are costed only where their bound does not pass it (a
    partition above it cannot be the best nor tie with it), so the best, its ties and its
    terms are those of costing every partition, in a fraction of the partial-sum estimates
    (host time only)."""
    splits = _partitions(params, target, method, groups)
    low = family_costs(params, target, method, groups, splits, -1)  # (nothing costed)
    within = np.flatnonzero(low["bytes"] <= bound)
    if limit is not None:
        within = within[low["cycles"][within] <= limit]
    first = within[np.argsort(low["cycles"][within], kind="stable")[:_FIRST]]
    sub = {k: v[np.sort(first)] for k, v in splits.items()}
    c = family_costs(params, target, method, groups, sub, limit)
    fit = c["ok"] & (c["bytes"] <= bound)
    if fit.any():
        least = int(c["cycles"][fit].min())
        limit = least if limit is None else min(limit, least)
        within = within[low["cycles"][within] <= limit]
    sub = {k: v[within] for k, v in splits.items()}
    return sub, family_costs(params, target, method, groups, sub, limit)


def family_plan(
    params: ConvParams, target: Any, method: str = "AMP", proportion: float = 0.6
) -> dict[str, Any]:
    """The least ``(cycles, temporary bytes)`` of the family (module docstring) of the
    vertex ``method`` within ``proportion`` of the tile's bytes, over its groupings (the
    AMP's partials by 8, then 16; SLIC's 4 channels of one group) and every partition:
    ``method``, ``groups``, ``splits`` (by :data:`SPLITS`), ``cost``, ``terms`` and
    ``ties`` (the partitions of that least cost).

    Raises
    ------
    ValueError
        When ``params`` is not covered (naming what differs) or no partition fits.
    """
    bound = int(target.getBytesPerTile() * proportion)
    best: dict[str, Any] | None = None
    groupings = AMP_GROUPINGS if method == "AMP" else [(SLIC_CHANS, SLIC_CHANS)]
    for groups in groupings:
        limit = None if best is None else best["cost"][0]
        splits, c = _least_partitions(params, target, method, groups, bound, limit)
        fit = np.flatnonzero(c["ok"] & (c["bytes"] <= bound))
        if not fit.size:
            continue
        order = np.lexsort((c["bytes"][fit], c["cycles"][fit]))
        i = int(fit[order[0]])
        cost = (int(c["cycles"][i]), int(c["bytes"][i]))
        if best is None or cost < best["cost"]:
            same = (c["cycles"][fit] == cost[0]) & (c["bytes"][fit] == cost[1])
            best = {
                "method": method, "groups": groups, "cost": cost, "ties": int(same.sum()),
                "splits": {k: int(v[i]) for k, v in splits.items()},
                "terms": {k: int(c[k][i]) for k in c
                          if k not in ("cycles", "bytes", "ok", "costed")},
            }  # fmt: skip
    if best is None:
        raise ValueError(f"family_plan: no {method} partition of {params} fits {bound} B "
                         "(hint: a larger availableMemoryProportion)")  # fmt: skip
    return best


def slic_floors(params: ConvParams, target: Any) -> dict[str, int | None]:
    """Lower bounds of Poplibs' cost of every SLIC plan of ``params`` by the form of the
    plan (graphcore/poplibs 7eac0f26; docs/planner.md "SLIC's plans of rows 16 and 18"):

    * ``"one pass"``: the SLIC family's best (:func:`family_plan`, exact);
    * ``"2 or 4 groups"``: the candidates of 2 channels in 2 groups and 1 in 4 with one
      conv group: a tile does at most ``4 x 2 x 2`` real multiply-accumulates an output
      position and sub-kernel, which its workers take at least 2 cycles for (every row of
      ``getConvPartialSlicSupervisorInnerLoopCycleEstimateHalfFloat`` costs at least twice
      its elements), so the real MACs over 8 a cycle and the tiles, whatever the form;
    * ``"expanded"``: ``expandDims`` of some dimensions multiplies the input channels by
      their kernel sizes; SLIC keeps 4 a tile, so the FLOAT partial sums exchanged are at
      least ``B F Co ceil(Ci' / 4) / T`` (``Ci'`` at least ``Ci`` times the least kernel
      size), plus the MACs over 32 a cycle (:func:`~.poplibs_conv_model.slic_floor`'s
      terms);
    * ``"serial"``: a serial split ``S`` of the input (or output) channels (any count up
      to their ``g`` grains of 4, ``ceildivConstrainDivisor``) runs ``S`` iterations of
      the convolution with ``ceil(g / S)`` grains, each costing at least its one-pass
      terms but the reduction (and, over output channels, the inputs' exchange, which may
      be broadcast before the loop): ``S`` times their least over the partitions, the
      least over ``S``;
    * ``"swapped"``: None, no plan: every swapped form (with ``outChanFlattenDims`` or
      ``expandDims`` too) flips the kernel and the input (``swapOperands`` toggles both
      flips; ``calculateFlattenedParams`` swaps back and again), which
      ``addSLICConstraints`` forbids.
    """
    _check(params, target)
    tiles = target.getNumTiles()
    macs = params.getNumberOfMACs()
    out = {"one pass": family_plan(params, target, "SLIC")["cost"][0]}
    out["2 or 4 groups"] = macs // (8 * tiles)
    outputs = params.batchSize * int(np.prod(params.getOutputFieldShape()))
    ci, co = params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup
    # (the least factor an expansion multiplies the input channels by: a dimension
    # expandingDimChangesParams leaves alone is no candidate, so counting it is safe)
    factor = min(int(k) for k in params.kernelShape)
    parts = -(-outputs * co * -(-ci * factor // SLIC_CHANS) // tiles)
    out["expanded"] = macs // _MAX_MACS["SLIC"] // tiles + int(_exchange(parts, 4, target))
    keys = ("weight exchange", "partials exchange", "transform", "padding", "compute")
    serial = []
    for kind, chans in (("in", ci), ("out", co)):
        grains = -(-chans // SLIC_CHANS)
        # (a count giving the same grains an iteration as a smaller one costs more)
        counts = [s for s in range(2, grains + 1) if -(-grains // s) < -(-grains // (s - 1))]
        for s in counts:
            sub_chans = -(-grains // s) * SLIC_CHANS
            sub = ConvParams(HALF, params.batchSize, list(params.inputFieldShape),
                             list(params.kernelShape), sub_chans if kind == "in" else ci,
                             sub_chans if kind == "out" else co,
                             paddingLower=list(params.inputTransform.paddingLower),
                             paddingUpper=list(params.inputTransform.paddingUpper))  # fmt: skip
            groups = (SLIC_CHANS, SLIC_CHANS)
            c = family_costs(sub, target, "SLIC", groups, _partitions(sub, target, "SLIC", groups))
            terms = sum(c[k] for k in keys) + (c["input exchange"] if kind == "in" else 0)
            serial.append(s * int(terms.min()))
    out["serial"] = min(serial) if serial else None
    out["swapped"] = None
    return out


def describe_family(plan: dict[str, Any]) -> str:
    """The family's plan as docs/planner.md states it: partition (batch, field per
    dimension joined by a dot, kernel, output and input channels), AMP grouping, cycles
    and temporary bytes."""
    s = plan["splits"]
    x = " \N{MULTIPLICATION SIGN} "
    part = x.join([f"B {s['batchSplit']}",
                   f"field {s['fieldSplit[0]']}\N{MIDDLE DOT}{s['fieldSplit[1]']}",
                   f"kernel {s['kernelSplit[0]']}", f"Co {s['outChanSplit.parallel']}",
                   f"Ci {s['inChanSplit.parallel']}"])  # fmt: skip
    icg, ocg = plan["groups"]
    cycles, nbytes = plan["cost"]
    return f"{part}, {plan['method']} {icg} / {ocg}, {cycles:,} cycles / {nbytes:,} B"
