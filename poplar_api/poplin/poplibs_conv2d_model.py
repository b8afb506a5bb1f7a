"""Poplibs' cost of the plain AMP plans of a convolution over a 2-D field.

For a HALF convolution with FLOAT partials of pass ``NONE`` whose kernel is wider than one
position (so that nothing flattens, :mod:`.poplibs_conv_model`), this module restates what
``constructModel`` and ``addEstimates`` (graphcore/poplibs ``7eac0f26``,
``lib/poplin/ConvModel.cpp``) cost for one family of ``createPlan``'s candidates: the
operands unswapped, no ``expandDims`` at either level, one pass (no serial split), the
AMP with its full input grouping (16 channels, a conv-unit weight height of 1) and either
partial grouping of ``getConvVertexAMPCandidates`` (the 8 conv units, then 16). Over that
family the partition variables are those of ``constructModel``: ``batchSplit``, a
``fieldSplit`` per dimension (each the least divisor giving its part,
``ceildivConstrainDivisor``), ``kernelSplit`` of every kernel dimension but the innermost
(which "the implementation doesn't support splitting"), ``outChanSplit.parallel`` and
``inChanSplit.parallel`` over the channel grains, their product at most the tiles. Each
partition is costed as ``addEstimates`` sums it:

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
  (:func:`~.poplibs_amp_estimates.nx1_partial_cycles`);
* the reduction over the kernel and input-channel splits, or the cast of the FLOAT
  partials to HALF (``addReduceCycleEstimate``), as for a product;

and its temporary bytes (``addConvTempMemoryEstimate``: the tile's inputs, weights and
partials; the reduction's; twice the largest transform's) must stay within
``availableMemoryProportion`` of the tile. ``constructModel``'s inequality ``totalMacs /
maxMACsPerCyclePerTile <= usedTiles * partialCalcCycles`` (32 MACs a cycle for 8 units)
removes a partition whose partial-sum estimate is below it. The least ``(cycles, bytes)``
is the family's plan. Not restated: the other families (swapped operands, ``expandDims``,
``outChanFlattenDims``, the AMP with 8, 4, 2 or 1 input channels a group, serial splits,
SLIC and the MAC vertices), which a plan of the whole search may take instead; this
family's best is an upper bound of the cost of Poplibs' plan, not that plan. Derived from
the source, not a port.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.poplibs_amp_estimates import (
    COEFF_LOAD_BYTES_PER_CYCLE,
    HALF_WEIGHTS_PER_CONV_UNIT,
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
from poplar_api.types import FLOAT, HALF

__all__ = ["SPLITS", "amp_family_costs", "amp_family_plan", "describe_family"]

#: The partition variables of a 2-D convolution's one-pass plans, by ``constructModel``'s
#: names (``kernelSplit[0]``: the outer kernel dimension; the inner one is not split).
SPLITS = ("batchSplit", "fieldSplit[0]", "fieldSplit[1]", "kernelSplit[0]",
          "outChanSplit.parallel", "inChanSplit.parallel")  # fmt: skip
#: The AMP's conv units for HALF inputs with FLOAT partials on ipusim's targets.
_UNITS = 8


def _check(params: ConvParams, target: Any) -> None:
    why = []
    if params.inputType != HALF or params.outputType != HALF:
        why.append(f"types {params.inputType.name}/{params.outputType.name} (HALF/HALF needed)")
    if params.getNumFieldDims() != 2:
        why.append(f"{params.getNumFieldDims()} field dimensions (2 needed)")
    if params.numConvGroups != 1:
        why.append(f"{params.numConvGroups} conv groups (1 needed)")
    it, kt, ot = params.inputTransform, params.kernelTransform, params.outputTransform
    if any(it.dilation[d] != 1 or kt.dilation[d] != 1 or ot.stride[d] != 1 or it.flip[d]
           or kt.flip[d] or it.truncationLower[d] or it.truncationUpper[d]
           or kt.paddingLower[d] or kt.paddingUpper[d] or kt.truncationLower[d]
           or kt.truncationUpper[d] or ot.paddingLower[d] or ot.paddingUpper[d]
           or ot.truncationLower[d] or ot.truncationUpper[d]
           for d in range(params.getNumFieldDims())):  # fmt: skip
        why.append("a dilation, stride, flip, truncation or kernel/output padding")
    if target.getNumTiles() != target.getTilesPerIPU():
        why.append(f"{target.getNumTiles() // target.getTilesPerIPU()} IPUs (1 needed)")
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


def amp_family_costs(
    params: ConvParams, target: Any, groups: tuple[int, int], splits: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Poplibs' ``(cycles, temporary bytes)`` and itemised cycles of the family's
    partitions ``splits`` (arrays by :data:`SPLITS`) with the AMP grouping ``groups``
    (``(inChansPerGroup, partialChansPerGroup)``; module docstring): keys ``cycles``,
    ``bytes``, ``ok`` (the MAC inequality holds) and the terms ``input exchange``,
    ``weight exchange``, ``partials exchange``, ``transform``, ``compute``, ``reduce``."""
    _check(params, target)
    icg, ocg = groups
    if icg != HALF_WEIGHTS_PER_CONV_UNIT:
        raise ValueError(f"amp_family_costs: inChansPerGroup {icg}: only the full grouping "
                         f"({HALF_WEIGHTS_PER_CONV_UNIT}) is restated")  # fmt: skip
    workers = target.getNumWorkerContexts()
    out_shape = [int(x) for x in params.getOutputFieldShape()]
    kernel = [int(x) for x in params.kernelShape]
    ci_g = -(-params.inputChannelsPerConvGroup // icg)
    co_g = -(-params.outputChannelsPerConvGroup // ocg)
    bs, fh, fw = splits["batchSplit"], splits["fieldSplit[0]"], splits["fieldSplit[1]"]
    ks = splits["kernelSplit[0]"]
    po, pi = splits["outChanSplit.parallel"], splits["inChanSplit.parallel"]
    bt = -(-params.batchSize // bs)
    ht, wt = -(-out_shape[0] // fh), -(-out_shape[1] // fw)
    kh = -(-kernel[0] // ks)
    cit, cot = -(-ci_g // pi) * icg, -(-co_g // po) * ocg
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
    x_p = _exchange(outputs, psz, target) + _per_depth(outputs, depth, later)
    # the output regroup (addTransformCycleEstimate), as for the product of the same sizes
    field = params.batchSize * out_shape[0] * out_shape[1]
    dims = (1, field, params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup)
    product = Product(dims, target, False, groups, "NONE")
    tr = _transforms(product, used)
    # the partial sums
    rows = np.stack([np.broadcast_to(x, used.shape) for x in (bt, ht, wt, kh, cit, cot)], axis=1)
    uniq, inv = np.unique(rows, axis=0, return_inverse=True)
    per = [
        nx1_partial_cycles(
            batch=b, field_shape=(h, w), kernel_shape=(k, kernel[1]), filter_height=1,
            conv_groups=1, in_groups=ci // icg, out_groups=co // ocg, out_chans_per_group=ocg,
            num_conv_units=_UNITS, weight_bytes_per_conv_unit=HALF_WEIGHTS_PER_CONV_UNIT * isz,
            coeff_load_bytes_per_cycle=COEFF_LOAD_BYTES_PER_CYCLE, workers=workers,
            float_activations=False, float_partials=True,
        )
        for b, h, w, k, ci, co in uniq.tolist()
    ]  # fmt: skip
    compute = np.array(per, np.int64)[inv.ravel()]
    # the reduction or cast
    red_out = -(-outputs // depth)
    reduce = _per_depth(red_out, depth, lambda o, d: _reduce_cycles(o, d, psz, isz, target))
    # temporary bytes
    conv = isz * inputs + isz * weights + psz * outputs
    red_bytes = np.where(depth > 1, red_out * depth * psz, 0)
    t_max = np.maximum.reduce([tr["in_bytes"], tr["w_bytes"], tr["out_bytes"]])
    temp = np.maximum.reduce([2 * t_max, conv, red_bytes])
    terms = {"input exchange": x_in, "weight exchange": x_w, "partials exchange": x_p,
             "transform": tr["in"] + tr["w"] + tr["out"], "compute": compute,
             "reduce": reduce}  # fmt: skip
    cycles = sum(terms.values())
    ok = params.getNumberOfMACs() // (_UNITS * 4) <= used * compute
    return {"cycles": cycles, "bytes": temp, "ok": ok, **terms}


def _partitions(params: ConvParams, target: Any, groups: tuple[int, int]) -> dict[str, np.ndarray]:
    tiles = target.getNumTiles()
    icg, ocg = groups
    out_shape = [int(x) for x in params.getOutputFieldShape()]
    axes = [
        _splits(params.batchSize, tiles)[0],
        _splits(out_shape[0], tiles)[0],
        _splits(out_shape[1], tiles)[0],
        _splits(int(params.kernelShape[0]), tiles)[0],
        _splits(-(-params.outputChannelsPerConvGroup // ocg), tiles)[0],
        _splits(-(-params.inputChannelsPerConvGroup // icg), tiles)[0],
    ]
    grids = [g.ravel() for g in np.meshgrid(*axes, indexing="ij")]
    keep = np.prod(grids, axis=0) <= tiles
    return {name: g[keep] for name, g in zip(SPLITS, grids, strict=True)}


def amp_family_plan(params: ConvParams, target: Any, proportion: float = 0.6) -> dict[str, Any]:
    """The least ``(cycles, temporary bytes)`` of the family (module docstring) within
    ``proportion`` of the tile's bytes, over both partial groupings (8 first) and every
    partition: ``groups``, ``splits`` (by :data:`SPLITS`), ``cost``, ``terms`` and
    ``ties`` (the partitions of that least cost).

    Raises
    ------
    ValueError
        When ``params`` is not covered (naming what differs) or no partition fits.
    """
    bound = int(target.getBytesPerTile() * proportion)
    best: dict[str, Any] | None = None
    for groups in amp_vertex_types(_UNITS):
        splits = _partitions(params, target, groups)
        c = amp_family_costs(params, target, groups, splits)
        fit = np.flatnonzero(c["ok"] & (c["bytes"] <= bound))
        if not fit.size:
            continue
        order = np.lexsort((c["bytes"][fit], c["cycles"][fit]))
        i = int(fit[order[0]])
        cost = (int(c["cycles"][i]), int(c["bytes"][i]))
        if best is None or cost < best["cost"]:
            same = (c["cycles"][fit] == cost[0]) & (c["bytes"][fit] == cost[1])
            best = {
                "groups": groups, "cost": cost, "ties": int(same.sum()),
                "splits": {k: int(v[i]) for k, v in splits.items()},
                "terms": {k: int(c[k][i]) for k in c if k not in ("cycles", "bytes", "ok")},
            }  # fmt: skip
    if best is None:
        raise ValueError(f"amp_family_plan: no partition of {params} fits {bound} B "
                         "(hint: a larger availableMemoryProportion)")  # fmt: skip
    return best


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
    return f"{part}, AMP {icg} / {ocg}, {cycles:,} cycles / {nbytes:,} B"
