"""Poplibs' vertex candidates for a FLOAT convolution with FLOAT partials, and the
bounds that establish which method its planner picks.

Derived from graphcore/poplibs ``7eac0f26`` (not ported). ``getConvVertexTypeCandidates``
(``lib/poplin/ConvVertexType.cpp``) offers, for FLOAT inputs and FLOAT partials:

* the AMP (``getConvVertexAMPCandidates``): the target's conv units for FLOAT
  (``getNumConvUnits``; ipusim's :func:`~.conv_planner.amp_unit_options`: 16 on Mk2,
  8 on Mk1) and 8 when it has more; input groupings that divide the 8 weights of a
  conv unit's chain (4 loads of 2 FLOAT, ``getWeightsPerConvUnit``) and are multiples
  of the 2 elements loaded a cycle: 8, 4 and 2; partial groupings of the conv units,
  or 8 (the weights per conv unit) where the units are more, kept only where the units
  divide them: so 16 partials on 16 units and 8 on 8 units;
* the horizontal MAC (``getConvVertexHMACCandidates``): input groupings from 1 (the
  FLOAT grain) up to the input channels, each where it lowers the number of groups, one
  FLOAT partial channel a group;
* the outer product (``getConvVertexOuterProductCandidates``): one input channel and
  the FLOAT vector width, 2, of partial channels a group (the FLOAT input type is no
  smaller than the partials, so no restriction on the channels or kernel);
* no vertical MAC (``getConvVertexVMACCandidates`` returns for FLOAT inputs) and no SLIC
  (``getConvVertexSLICCandidates`` takes HALF and QUARTER only).

The bounds (every term of ``addEstimates``, ``lib/poplin/ConvModel.cpp``, is at least 0,
so a bound of one term bounds the candidate):

* :func:`hmac_floor`: the horizontal MAC's partial sums. For FLOAT inputs it has no 1x1
  specialisation (``horizontalMacHas1x1Specialisation`` wants HALF inputs), so
  ``getConvPartialHorizontalMacCycleEstimate`` charges every output position of a
  worker's runs, for every kernel position of the tile, ``7 +
  getDenseDotProductCycles(2, true, true, icg)``, the dot product at least ``7 + icg /
  2`` (``(1 + 2) + 3 + 1`` cycles of loop and accumulation, then one cycle per 2 FLOAT
  when ``icg`` is even, else 1 + 2 per element); the supervisor
  (``getConvPartialHorizontalMacSupervisorOuterLoopCycleEstimate``) repeats it for each
  input group and output channel, and the workers' split
  (``estimateConvPartialHorizontalMacInnerLoopCycles``) gives one worker at least
  ``1 / W`` of the tile's positions, counted ``W`` times. So a tile of ``P`` output
  positions (batch included), ``K`` kernel positions, ``Co`` output and ``Ci`` input
  channels costs at least ``P K Co (14 + Ci / 2)``, and the tiles of a plan together at
  least ``14 OUT + MACs / 2`` (``OUT`` the convolution's output elements, every one on
  some tile; ``MACs`` its multiply-accumulates, ``getNumberOfMACs``, each in some tile's
  ``P K Co Ci``), whatever the transforms (swapping operands, expanding or flattening
  dimensions and padding channels keep both or make them larger) and the serial splits
  (``S`` iterations of at most ``T`` tiles): the partial sums of the slowest tile are at
  least that over ``T``.
* :func:`outer_product_floor`: ``addOuterProductConstraints`` leaves a tile one input
  channel, one kernel position, batch 1 and one row of every field dimension but the
  innermost; ``getOuterProductCycleEstimate`` (FLOAT, 2 channels a group: its slow path,
  the fast one wants 6) charges ``10 + 2 x 2`` cycles per output position of a worker
  and group, ``W`` workers: at least 7 cycles a multiply-accumulate, ``7 MACs / T``.
* :func:`amp_expanded_bound`: an upper bound of Poplibs' cost of one AMP candidate, the
  convolution with every field dimension expanded (``getExpandDimsCandidates`` takes a
  dimension whose expansion changes the parameters and whose input is no smaller than
  the kernel) and then flattened with the batch into one field
  (``calculateFlattenedParams``), unswapped (``getSwapOperandCandidates``: tried for
  every pass but the matMul and fully-connected ones), 8 input channels a group
  (``ConvPartial1x1Out``: a conv-unit weight height of 1), no serial split, over every
  split of the field, output and input channels; its terms in
  :func:`amp_expanded_costs`.

Where that bound is below both floors, Poplibs' planner, which takes the candidate of
fewest cycles within the memory bound (``createPlan``, ``runPlanner`` in
``lib/poplin/ConvPlan.cpp``), picks an AMP plan: :func:`float_method`.
"""

from __future__ import annotations

import functools
import math
from itertools import combinations
from typing import Any

import numpy as np

from poplar_api.poplin import amp
from poplar_api.poplin.conv_params import ConvParams, expand_all_dims
from poplar_api.poplin.conv_planner import amp_unit_options, memory_limit
from poplar_api.poplin.poplibs_matmul_model import (
    _per_depth,
    _reduce_cycles,
    _reduce_exchange_later_stages,
)
from poplar_api.popops.layout import first_rows
from poplar_api.types import FLOAT

__all__ = [
    "amp_candidates",
    "amp_expanded_bound",
    "amp_expanded_costs",
    "amp_float_1x1_cycles",
    "candidates",
    "describe_bounds",
    "float_method",
    "hmac_floor",
    "hmac_groupings",
    "outer_product_floor",
]

#: ``getWeightsPerConvUnit(FLOAT)``: a chain of 4 loads of 2 FLOAT elements.
FLOAT_WEIGHTS_PER_CONV_UNIT = 8
#: ``getConvUnitInputLoadElemsPerCycle(FLOAT)``.
FLOAT_LOAD_ELEMS = 2
#: ``getVectorWidth(FLOAT)``: the outer product's partial channels a group.
FLOAT_VECTOR_WIDTH = 2
#: The passes whose rearrangement rules :func:`amp_expanded_costs` restates.
PASSES = ("NONE", "INFERENCE_FWD", "TRAINING_FWD", "TRAINING_BWD")


def _check(params: ConvParams) -> None:
    if params.inputType != FLOAT or params.outputType != FLOAT:
        raise ValueError(
            f"poplibs_float_candidates: input type {params.inputType.name}, output type "
            f"{params.outputType.name}; required FLOAT inputs and output (hint: HALF "
            f"convolutions are poplibs_conv_model's)"
        )


def amp_candidates(target: Any) -> list[tuple[int, int, int]]:
    """``(convUnits, inChansPerGroup, partialChansPerGroup)`` of the FLOAT AMP candidates
    (module docstring), the target's conv units first."""
    on_ipu = max(amp_unit_options(FLOAT, FLOAT, target))
    out = []
    for units in [on_ipu] + ([8] if on_ipu > 8 else []):
        partials = [on_ipu] + ([8] if on_ipu > 8 else [])
        for icg in range(FLOAT_WEIGHTS_PER_CONV_UNIT, 0, -1):
            if FLOAT_WEIGHTS_PER_CONV_UNIT % icg or icg % FLOAT_LOAD_ELEMS:
                continue
            for ocg in partials:
                if ocg > units and units < on_ipu:
                    continue
                if ocg != units and ocg != FLOAT_WEIGHTS_PER_CONV_UNIT:
                    continue
                if ocg % units:
                    continue
                out.append((units, icg, ocg))
    return out


def hmac_groupings(in_chans: int) -> list[int]:
    """The horizontal MAC's input groupings for ``in_chans`` FLOAT input channels: 1 up
    to ``in_chans``, each where it lowers the number of groups."""
    out, previous = [], 0
    for icg in range(1, in_chans + 1):
        groups = -(-in_chans // icg)
        if groups != previous:
            out.append(icg)
            previous = groups
    return out


def candidates(params: ConvParams, target: Any) -> list[tuple[str, int, int]]:
    """``(method, inChansPerGroup, partialChansPerGroup)`` of every vertex candidate of
    the FLOAT convolution ``params`` (before ``sortConvVertexTypeCandidates``' order)."""
    _check(params)
    amps = [("AMP", icg, ocg) for _, icg, ocg in amp_candidates(target)]
    hmacs = [("HMAC", icg, 1) for icg in hmac_groupings(params.inputChannelsPerConvGroup)]
    return amps + hmacs + [("OUTER_PRODUCT", 1, FLOAT_VECTOR_WIDTH)]


def _outputs(params: ConvParams) -> int:
    return (params.batchSize * params.numConvGroups * params.outputChannelsPerConvGroup
            * int(np.prod(params.getOutputFieldShape())))  # fmt: skip


#: ``getConvPartialHorizontalMacSupervisorOuterLoopCycleEstimate`` and its inner loop's
#: least cycles a tile pays whatever its size, FLOAT inputs and partials (no 1x1 path):
#: ``convHorizontalMacOverhead`` 58, ``W zeroPartialsRetentionSavings`` 9 W, one conv
#: group's 23, input group's 15 and output channel's 10, the slowest worker's 16 + 16
#: (its non-loop overhead and one kernel position's) + 19 (one run) times ``W``, and the
#: zeroing (``estimateZeroSupervisorCycles``: at least ``14 - 9`` a worker, times ``W``).
def _hmac_tile_floor(workers: int) -> int:
    return 58 + 9 * workers + 23 + 15 + 10 + workers * (16 + 16 + 19) + 5 * workers


def hmac_floor(params: ConvParams, target: Any) -> int:
    """A lower bound of Poplibs' cost of any horizontal-MAC plan of ``params``: the
    least over the number ``e`` of field dimensions expanded (in either operand order:
    swapped, each dimension's kernel is the input's extent, no smaller than its kernel
    when the input is no smaller, as here) of the tile's fixed cycles
    (:func:`_hmac_tile_floor`) plus ``ceil((14 OUT K + MACs / 2) / T)``, ``K`` the least
    product of the kernel sizes of the ``n - e`` dimensions left (module docstring);
    with every dimension expanded, ``ceil(OUT (14 + Ci K / 2) / T)`` instead (the
    expanded channels, padding included, are the tile's input channels) plus the
    rearrangement of the expanded activations (``addTransformCycleEstimate``, as input,
    or as weights when swapped, at least ``5 b / (4 min(memcpy, 4))`` copy and ``b /
    E`` exchange cycles for ``b`` bytes a tile, ``B O Ci K`` FLOAT elements over at
    most ``T`` tiles)."""
    _check(params)
    tiles, workers = target.getNumTiles(), target.getNumWorkerContexts()
    out, macs = _outputs(params), params.getNumberOfMACs()
    kernel = [int(k) for k in params.kernelShape]
    fixed = _hmac_tile_floor(workers)
    best = None
    for e in range(len(kernel)):
        k_left = min(int(np.prod(c)) for c in combinations(sorted(kernel), len(kernel) - e))
        floor = fixed + -(-(28 * out * k_left + macs) // (2 * tiles))
        best = floor if best is None else min(best, floor)
    ck = params.inputChannelsPerConvGroup * int(np.prod(kernel))
    b = -(-(out // params.outputChannelsPerConvGroup) * ck * FLOAT.size // tiles)
    memcpy = target.getDataPathWidth() // 8
    rearrange = -(-(5 * b) // (4 * min(memcpy, FLOAT.size)))
    rearrange += math.ceil(b / float(target.getExchangeBytesPerCycle()))
    expanded = fixed + -(-out * (28 + ck) // (2 * tiles)) + rearrange
    return min(best, expanded) if best is not None else expanded


def outer_product_floor(params: ConvParams, target: Any) -> int:
    """A lower bound of Poplibs' cost of any outer-product plan of ``params``:
    ``ceil(7 MACs / T)`` (module docstring)."""
    _check(params)
    return -(-7 * params.getNumberOfMACs() // target.getNumTiles())


def amp_float_1x1_cycles(
    ft: Any, cit: Any, cot: Any, icg: int, ocg: int, units: int, workers: int
) -> np.ndarray:
    """``addPartialCalcCycleEstimate``'s ``ConvPartial1x1Out`` estimate for FLOAT inputs
    and partials, one conv group, tiles of ``ft`` positions of a 1-row field, ``cit``
    input and ``cot`` output channels: ``getConvPartial1x1SupervisorOuterLoopCycleEstimate``
    over the inner loops of ``getConvPartial1x1InnerLoopCycleEstimate`` (the row split
    over the workers, ``ceil`` or ``floor(ft / W)`` positions each, an idle worker
    counting 0), as :func:`~.amp.conv_partial_1x1_cycles` restates them; weights loaded
    at 8 bytes a cycle (``use128BitConvUnitLoad`` is off by default)."""
    ft, cit, cot = np.broadcast_arrays(*(np.asarray(x, np.int64) for x in (ft, cit, cot)))
    rows = np.stack([ft.ravel(), cit.ravel(), cot.ravel()], axis=1)
    first, inv = first_rows(rows)
    uniq = rows[first]
    per = [_float_1x1(f, ci, co, icg, ocg, units, workers) for f, ci, co in uniq.tolist()]
    return np.array(per, np.int64)[inv.ravel()].reshape(ft.shape)


@functools.lru_cache(maxsize=1 << 14)
def _float_1x1(f: int, ci: int, co: int, icg: int, ocg: int, units: int, workers: int) -> int:
    """:func:`amp_float_1x1_cycles` of one tile (remembered: its arguments are all it
    reads, and a plan search prices the same tiles for many partitions)."""
    elems = [f // workers + (w < f % workers) for w in range(workers)]
    return amp.conv_partial_1x1_cycles(
        [n for n in elems if n], num_in_groups=-(-ci // icg), num_out_groups=-(-co // ocg),
        out_chans_per_group=ocg, weight_bytes_per_conv_unit=FLOAT_WEIGHTS_PER_CONV_UNIT
        * FLOAT.size, num_conv_units=units,
        coeff_load_bytes_per_cycle=amp.AMP_COEFF_LOAD_BYTES_PER_CYCLE // 2,
        num_worker_contexts=workers, float_activations=True, float_partials=True,
    )  # fmt: skip


def _least_splits(grains: int, tiles: int) -> np.ndarray:
    s = np.arange(1, min(grains, tiles) + 1, dtype=np.int64)
    per = -(-grains // s)
    return s[np.concatenate(([True], per[1:] != per[:-1]))]


def _factor(size: int) -> int:
    """``getScaleFactorForTransform(FLOAT, size)``'s divisor: 4 when 2 divides ``size``."""
    return 4 if size % 2 == 0 else 3


def amp_expanded_costs(
    params: ConvParams, conv_pass: str, target: Any, units: int, ocg: int
) -> dict[str, np.ndarray]:
    """The terms of ``addEstimates`` (each at least Poplibs', most equal to it) of the AMP
    plans of ``params`` expanded in every field dimension and flattened (module
    docstring), 8 input channels a group, ``units`` conv units grouping the partials by
    ``ocg``, for every split ``fieldSplit`` x ``outChanSplit.parallel`` x
    ``inChanSplit.parallel`` (least divisors of the grains) within the tiles.

    Keys: the splits ``field``, ``co`` and ``ci``; ``input exchange`` (a tile's inputs
    less ``floor(inputs / co)``, at the base rate: the double rate of a supertile's pair
    can only lower it), ``weight exchange``, ``partials exchange`` (``ExchangeEstimator``,
    the later reduction stages' too); ``transform`` (``addTransformCycleEstimate``: the
    expanded input and the weights rearranged, the output when its channels are padded
    or, else, regrouped when ``ocg`` is not 8); ``compute``
    (:func:`amp_float_1x1_cycles`); ``reduce`` (``addReduceCycleEstimate`` over the
    input-channel split, the ``ReduceAdd`` stages of :mod:`.poplibs_matmul_model`);
    ``cycles`` their sum; ``temp bytes`` (``totalTempBytes``: the largest of twice the
    largest rearranged tensor per tile, the tile's inputs, weights and FLOAT partials,
    and the reduction's partials); ``ok`` (``constructModel``'s pruning constraint: the
    MACs over ``convUnits x 2`` a cycle at most the used tiles times the partial sums).
    No tile-level padding (a weight height of 1), no input cast (FLOAT inputs), no cast
    after one input-channel part (FLOAT partials and output), no serial terms."""
    _check(params)
    if conv_pass not in PASSES:
        raise ValueError(f"amp_expanded_costs: pass {conv_pass!r}; required one of {PASSES}")
    icg = FLOAT_WEIGHTS_PER_CONV_UNIT
    exp = expand_all_dims(params)
    if any(exp.outputTransform.paddingLower) or any(exp.outputTransform.paddingUpper):
        raise ValueError("amp_expanded_costs: output padding does not flatten (hint: none)")
    tiles, workers = target.getNumTiles(), target.getNumWorkerContexts()
    size, xbpc = FLOAT.size, float(target.getExchangeBytesPerCycle())
    memcpy = target.getDataPathWidth() // 8
    field = exp.batchSize * int(np.prod(exp.getOutputFieldShape()))  # (batch flattened in)
    ci, co = exp.inputChannelsPerConvGroup * exp.numConvGroups, exp.outputChannelsPerConvGroup
    if exp.numConvGroups != 1:
        raise ValueError(f"amp_expanded_costs: {exp.numConvGroups} conv groups; required 1")
    ci_g, co_g = -(-ci // icg), -(-co // ocg)
    ci_pad = ci_g * icg
    grids = np.meshgrid(_least_splits(field, tiles), _least_splits(co_g, tiles),
                        _least_splits(ci_g, tiles), indexing="ij")  # fmt: skip
    fs, po, pi = (x.ravel() for x in grids)
    keep = fs * po * pi <= tiles
    fs, po, pi = fs[keep], po[keep], pi[keep]
    used = fs * po * pi
    ft, cot, cit = -(-field // fs), -(-co_g // po) * ocg, -(-ci_g // pi) * icg

    def exch(elements: np.ndarray) -> np.ndarray:  # ExchangeEstimator.getCycles
        return -(-(elements * size * 16) // max(1, round(xbpc * 16)))

    inputs, weights, outputs = ft * cit, cit * cot, ft * cot
    x_in = exch(inputs - inputs // po)
    x_w = exch(weights - weights // fs)
    later = lambda o, d: _reduce_exchange_later_stages(o, d, size, target)  # noqa: E731
    x_p = exch(outputs) + _per_depth(outputs, pi, later)
    f_in = _factor(ci * co)
    in_b = -(-(field * ci_pad * size) // used)
    w_b = -(-(ci_pad * co_g * ocg * size) // used)
    copy = lambda b, rate, f: -(-(b * 5) // (rate * f))  # noqa: E731
    xch = lambda b: np.ceil(b / xbpc).astype(np.int64)  # noqa: E731
    tr = copy(in_b, min(memcpy, size), f_in) + xch(in_b) + copy(w_b, min(memcpy, size), f_in)
    tr = tr + xch(w_b)
    out_b = -(-(field * co_g * ocg) // used) * size
    if co % ocg:  # padded partial channels: the output rearranged
        tr = tr + copy(out_b, min(memcpy, size), _factor(co)) + xch(out_b)
    elif ocg != FLOAT_WEIGHTS_PER_CONV_UNIT:  # regroupOutput
        tr = tr + copy(out_b, min(memcpy, ocg * size), _factor(co))
    else:
        out_b = np.zeros_like(out_b)
    compute = amp_float_1x1_cycles(ft, cit, cot, icg, ocg, units, workers)
    red_out = -(-outputs // pi)
    reduce = _per_depth(red_out, pi, lambda o, d: _reduce_cycles(o, d, size, size, target))
    cycles = x_in + x_w + x_p + tr + compute + reduce
    # constructModel's pruning constraint: the MACs over the AMP's rate bound the tiles'
    # partial sums from below (a partition violating it is not a candidate)
    ok = (field * ci * co) // (units * FLOAT_LOAD_ELEMS) <= used * compute
    temp = np.maximum.reduce([2 * np.maximum.reduce([in_b, w_b, out_b]),
                              size * (inputs + weights) + FLOAT.size * outputs,
                              np.where(pi > 1, red_out * pi * FLOAT.size, 0)])  # fmt: skip
    return {"field": fs, "co": po, "ci": pi, "input exchange": x_in,
            "weight exchange": x_w, "partials exchange": x_p, "transform": tr,
            "compute": compute, "reduce": reduce, "cycles": cycles,
            "temp bytes": temp, "ok": ok}  # fmt: skip


def amp_expanded_bound(params: ConvParams, conv_pass: str, target: Any) -> dict[str, Any]:
    """The least :func:`amp_expanded_costs` plan within ``availableMemoryProportion``
    (default 0.6) of the tile over the 1x1 AMP candidates (8 input channels a group):
    an upper bound of the cost of Poplibs' best AMP plan. Returns its ``cycles``,
    ``temp bytes``, ``units``, ``groups`` ``(8, ocg)``, ``splits`` ``(field, co)`` and
    ``terms``."""
    limit = memory_limit(target, {})
    best: dict[str, Any] | None = None
    for units, icg, ocg in amp_candidates(target):
        if icg != FLOAT_WEIGHTS_PER_CONV_UNIT:
            continue
        c = amp_expanded_costs(params, conv_pass, target, units, ocg)
        ok = np.flatnonzero((c["temp bytes"] <= limit) & c["ok"])
        if not ok.size:
            continue
        i = int(ok[np.argmin(c["cycles"][ok])])
        if best is None or int(c["cycles"][i]) < best["cycles"]:
            best = {
                "cycles": int(c["cycles"][i]), "temp bytes": int(c["temp bytes"][i]),
                "units": units, "groups": (icg, ocg),
                "splits": (int(c["field"][i]), int(c["co"][i]), int(c["ci"][i])),
                "terms": {k: int(v[i]) for k, v in c.items()
                          if k not in ("field", "co", "ci", "cycles", "temp bytes", "ok")},
            }  # fmt: skip
    if best is None:
        raise ValueError("amp_expanded_bound: no expanded AMP plan fits the memory bound")
    return best


def float_method(params: ConvParams, conv_pass: str, target: Any) -> dict[str, Any]:
    """Whether the bounds establish Poplibs' method for the FLOAT convolution ``params``
    in pass ``conv_pass``: ``method`` ``"AMP"`` when :func:`amp_expanded_bound` is below
    :func:`hmac_floor` and :func:`outer_product_floor`, else None; with the three
    figures (``amp``, ``hmac``, ``outer product``)."""
    bound = amp_expanded_bound(params, conv_pass, target)
    hmac, op = hmac_floor(params, target), outer_product_floor(params, target)
    method = "AMP" if bound["cycles"] < min(hmac, op) else None
    return {"method": method, "amp": bound, "hmac": hmac, "outer product": op}


def describe_bounds(result: dict[str, Any]) -> str:
    """:func:`float_method`'s figures as docs/planner.md's table states them."""
    amp_plan = result["amp"]
    fs, co, ci = amp_plan["splits"]
    icg, ocg = amp_plan["groups"]
    return (
        f"AMP at most {amp_plan['cycles']:,} cycles (every dimension expanded, field {fs} "
        f"\N{MULTIPLICATION SIGN} Co {co} \N{MULTIPLICATION SIGN} Ci {ci}, AMP {icg} / {ocg} "
        f"on {amp_plan['units']} units), horizontal MAC at least {result['hmac']:,}, outer "
        f"product at least {result['outer product']:,}"
    )
