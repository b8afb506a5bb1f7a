"""Poplibs' cost of the unswapped AMP plans of a FLOAT convolution over a 2-D field.

For a FLOAT convolution with FLOAT partials (inputs, partials and output FLOAT, input
padding only, or an output truncation :func:`canonical` turns into less padding, one conv
group, pass ``NONE``, ``INFERENCE_FWD``, ``TRAINING_FWD`` or
``TRAINING_BWD``), this module restates what ``constructModel`` and ``addEstimates``
(graphcore/poplibs ``7eac0f26``, ``lib/poplin/ConvModel.cpp``) cost for ``createPlan``'s
unswapped one-pass AMP candidates (``lib/poplin/ConvPlan.cpp``), in each of the four
forms ``getExpandDimsCandidates`` gives at the system level (no dimension expanded,
dimension 0, dimension 1, both: each expansion changes the convolution and its input is
no smaller than its kernel; :data:`FORMS`), each then flattened by
``calculateFlattenedParams`` (the batch into an expanded dimension, whose kernel is one
wide and unpadded; with both expanded, the whole field into one row). No
``outChanFlattenDims`` applies unswapped (``getOutChanFlattenDimsCandidates`` keeps a
dimension only where its input is no larger than its kernel), and tile-level expansion is
off by default (``enableTileLevelExpandDims``).

The vertex candidates are the FLOAT AMP's (:func:`~.poplibs_float_candidates.amp_candidates`:
8, 4 or 2 input channels a group, a conv-unit weight height of ``8 / icg``; partials by
16 on 16 units or by 8 on 8 units on Mk2). A partition is ``constructModel``'s:
``batchSplit``, ``fieldSplit`` per dimension, ``kernelSplit`` of the outer kernel
dimension, ``outChanSplit.parallel`` and ``inChanSplit.parallel`` over the channel grains
(the channels padded to the groupings, ``applyTransform``), each the least split giving
its part, their product at most the tiles. Its cost is ``addEstimates``' sum:

* exchange (``addExchangeCycleEstimates``): the tile's input window
  (``getMaxInputRangeSize``, the halo clipped to the input) less ``1 / outChanSplit``, at
  twice the rate when the output-channel split is a multiple of the tiles sharing an
  exchange bus; its weights less ``1 / (fieldSplit batchSplit)``; its FLOAT partial sums
  and the later reduction stages';
* the transforms (``addTransformCycleEstimate``): the input and the weights rearranged when
  a dimension is expanded or the input channels are padded to the grouping
  (``rearrangeInput``, ``rearrangeWeights``: the whole convolution's input range, batch
  and padded channels, or its weights, FLOAT bytes over the used tiles, copied at
  ``min(memcpy, 4)`` bytes a cycle times ``4 / 5`` (``3 / 5`` when the channels' product is
  odd, ``getScaleFactorForTransform``) and exchanged), the weights also when the partial
  channels are padded; the output rearranged when the partial channels are padded
  (``rearrangeOutput``), else regrouped when the partials are not grouped by 8
  (``regroupOutput``, ``getWeightsPerConvUnit(FLOAT)``); ``regroupWeights`` (``TRAINING_FWD``
  with partials grouped by no multiple of 8) does not arise for groupings of 8 and 16;
* the kernel's outer dimension padded to the weight height
  (``addTileLevelTransformEstimates``: :func:`~.poplibs_amp_estimates.amp_padding_estimate`);
* the partial sums (``addPartialCalcCycleEstimate``): ``ConvPartial1x1Out``
  (:func:`~.poplibs_float_candidates.amp_float_1x1_cycles`) where
  ``canUseConvPartial1x1Vertex`` holds (a weight height of 1, batch 1, a 1x1 tile kernel,
  one tile row), else ``ConvPartialnx1`` (:func:`~.poplibs_amp_estimates.nx1_partial_cycles`
  with FLOAT activations and partials, 32 weight bytes a conv unit);
* the reduction over ``kernelSplit x inChanSplit`` (no cast: FLOAT partials and output);

within ``availableMemoryProportion`` of the tile (``totalTempBytes``: the tile's inputs,
weights, partials and padding; the reduction's; twice the largest transform's), and
``constructModel``'s inequality ``MACs / (convUnits x 2) <= usedTiles x partialCalcCycles``
(the MACs of the channel-padded convolution, ``transformedOnceParams``). :func:`best_plan`
is the least over the forms. :func:`form_floors` bounds the forms not costed: serial
splits of the unswapped forms, and the swapped forms (``swapOperands``, then any set of
dimensions ``getOutChanFlattenDimsCandidates`` flattens into the output channels), one
pass or serial. Not restated: the serial plans' and swapped plans' own costs (only
bounded), other releases than 7eac0f26, options other than the defaults. Derived from the
source, not a port.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.estimators import EXCHANGE_SCALE
from poplar_api.poplin.poplibs_conv2d_model import (
    SPLITS,
    _input_range,
    _partition_grid,
    uncovered,
)
from poplar_api.poplin.poplibs_conv2d_model import _partitions as _family_partitions
from poplar_api.poplin.poplibs_float_candidates import (
    FLOAT_LOAD_ELEMS,
    FLOAT_WEIGHTS_PER_CONV_UNIT,
    amp_candidates,
    amp_float_1x1_cycles,
)
from poplar_api.poplin.poplibs_float_forms import (
    FORMS,
    _expands,
    canonical,
    form_params,
    swapped_params,
)
from poplar_api.poplin.poplibs_float_partials import (
    _LEAST_VERTEX,
    _inner_kernel_floor,
    _iteration_floor,
    _nx1_floor_terms,
    _partial,
    _vertex_floor,
    _vertex_name,
)
from poplar_api.poplin.poplibs_float_terms import ROWS, partition_terms
from poplar_api.poplin.poplibs_matmul_model import (
    _exchange,
    _per_depth,
    _reduce_cycles,
    _reduce_exchange_later_stages,
)
from poplar_api.poplin.popsolver_order import search_first
from poplar_api.popops.dynamic_slice import slice_1d_estimate
from poplar_api.popops.estimators import binary_op_1d_in_place_array
from poplar_api.popops.layout import first_rows
from poplar_api.types import FLOAT

__all__ = [
    "FORMS",
    "best_plan",
    "canonical",
    "describe_form_plan",
    "describe_partition",
    "form_costs",
    "form_floors",
    "form_params",
    "form_plan",
    "forms_plans",
    "iter_form_floors",
    "swapped_params",
]

_PASSES = ("NONE", "INFERENCE_FWD", "TRAINING_FWD", "TRAINING_BWD")


def _check(params: ConvParams, target: Any, conv_pass: str) -> None:
    why = uncovered(params, target, FLOAT, True)
    if conv_pass not in _PASSES:
        why.append(f"pass {conv_pass!r} (one of {_PASSES} needed)")
    if why:
        raise ValueError(
            f"poplibs_float_conv2d: {params} is not covered: " + "; ".join(why) + " (hint: "
            "the model restates a FLOAT 2-D convolution with input padding only, one group)"
        )


def _partitions(params: ConvParams, target: Any, icg: int, ocg: int) -> dict[str, np.ndarray]:
    """``constructModel``'s partitions of an AMP plan of input and partial groupings
    ``icg`` / ``ocg``: those of the HALF model's family, which have no type of their own."""
    return _family_partitions(params, target, "AMP", (icg, ocg))


def _scale(chans: Any) -> Any:
    """``getScaleFactorForTransform(FLOAT, chans)``'s divisor: 4 when 2 divides it, else 3
    (of each, given an array)."""
    if isinstance(chans, np.ndarray):
        return np.where(chans % 2 == 0, 4, 3)
    return 4 if chans % 2 == 0 else 3


def _padded(chans: Any, group: int) -> bool:
    """Whether ``chans`` (an int, or an array of channel counts padded alike) are padded
    to ``group``."""
    if not isinstance(chans, np.ndarray):
        return chans % group != 0
    pad = chans % group != 0
    if pad.any() != pad.all():
        raise ValueError(f"form_costs: channels {np.unique(chans).tolist()} are not all "
                         f"padded alike to groups of {group} (hint: cost them apart)")  # fmt: skip
    return bool(pad.any())


def form_costs(
    params: ConvParams,
    target: Any,
    vertex: tuple[int, int, int],
    splits: dict[str, np.ndarray],
    rearrange: tuple[bool, bool, bool] = (False, False, False),
    floor: bool = False,
    limit: float | np.ndarray | None = None,
    skip: tuple[str, ...] = (),
    bound: int | None = None,
    chans: tuple[np.ndarray, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Poplibs' itemised cycles, temporary bytes and ``ok`` (``constructModel``'s MAC
    inequality) of the partitions ``splits`` (arrays by
    :data:`~.poplibs_conv2d_model.SPLITS`) of the flattened convolution ``params``
    (:func:`form_params`; ``expanded``: some dimension was expanded, so its input and
    weights are rearranged) with the AMP ``vertex`` ``(convUnits, inChansPerGroup,
    partialChansPerGroup)`` (module docstring).

    With ``limit`` (cycles, or one a partition), a partition is costed in full only where
    its other terms plus its least partial sums (those the MAC inequality allows, and for
    a ``ConvPartialnx1`` tile at least :func:`_nx1_floor`) are within it:
    the reduction and its later stages' exchange only where the other terms and those
    least partial sums are, the partial sums only where the rest is; elsewhere the terms
    not computed count 0 and the partial sums their least, so the cycles are a lower bound
    above ``limit`` (each term is at least 0; an ok partition's partial sums at least
    their least). With ``bound`` (bytes) as well, the :data:`_FIRST` partitions of least
    such bounds within ``bound`` bytes are costed first, and the least cost of the ok ones
    becomes the limit when lower: the least ok partition within the bytes and its ties
    still have their full cost (host time only).

    ``chans`` (input and output channels, one each a partition) costs each partition
    for ``params`` with those channels instead of its own: the iterations of a serial
    split, which differ only in channels, costed in one call (every term is computed
    element by element, so a partition's cost is the one ``params`` with its channels
    gives). Whether the channels are padded to the groupings must be the same for all
    (a ``ValueError`` otherwise)."""
    units, icg, ocg = vertex
    height = FLOAT_WEIGHTS_PER_CONV_UNIT // icg
    size, workers = FLOAT.size, target.getNumWorkerContexts()
    kernel = [int(x) for x in params.kernelShape]
    ci, co = params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup
    if chans is not None:
        ci, co = chans
    rows = _partition_rows(params, target, vertex, splits, rearrange, floor, skip, ci, co)
    n = len(rows["used"])
    used, depth, outputs, red_out = rows["used"], rows["depth"], rows["outputs"], rows["red_out"]
    bt, ht, wt, kh, cit, cot = (rows[k] for k in ("bt", "ht", "wt", "kh", "cit", "cot"))
    least, temp, rate_macs = rows["least"], rows["bytes"], rows["rate_macs"]
    zero = np.zeros(n, np.int64)
    terms = {k: rows[k] for k in _TERMS}
    terms.update({"later stages exchange": zero, "reduce": zero})
    rest0 = sum(terms.values())
    # the reduction (no cast) and its later stages' exchange, and the partial sums, are
    # computed only where needed (a skipped term is not computed)
    later_t, reduce_t, compute = zero.copy(), zero.copy(), least.copy()
    reduced, estimated = np.zeros(used.shape, bool), np.zeros(used.shape, bool)

    def reduce_at(idx: np.ndarray) -> None:
        idx = idx[~reduced[idx]]
        if not idx.size:
            return
        cols = [np.broadcast_to(x, used.shape) for x in (depth, outputs, red_out)]
        d = cols[0][idx]
        if "later stages exchange" not in skip:
            fn = lambda o, d: _reduce_exchange_later_stages(o, d, size, target)  # noqa: E731
            later_t[idx] = _per_depth(cols[1][idx], d, fn)
        if "reduce" not in skip:
            fn = lambda o, d: _reduce_cycles(o, d, size, size, target)  # noqa: E731
            reduce_t[idx] = _per_depth(cols[2][idx], d, fn)
        reduced[idx] = True

    def estimate_at(idx: np.ndarray) -> None:
        idx = idx[~estimated[idx]]
        if idx.size:
            rows = np.stack([np.broadcast_to(x, used.shape)[idx]
                             for x in (bt, ht, wt, kh, cit, cot)], axis=1)  # fmt: skip
            first, inv = first_rows(rows)
            uniq = rows[first]
            per = np.zeros(len(uniq), np.int64)
            # (ConvPartial1x1Out's tiles in one call, as _partial prices each)
            one = (height == 1) & (params.batchSize == 1) & (kernel[1] == 1)
            one = one & (uniq[:, 3] == 1) & (uniq[:, 1] == 1)
            if one.any():
                per[one] = amp_float_1x1_cycles(uniq[one, 2], uniq[one, 4], uniq[one, 5], icg,
                                                ocg, units, workers)  # fmt: skip
            per[~one] = [_partial(vertex, params.batchSize, b, (h, w), (k, kernel[1]), c_in,
                                  c_out, workers)
                         for b, h, w, k, c_in, c_out in uniq[~one].tolist()]  # fmt: skip
            compute[idx] = per[inv.ravel()]
        estimated[idx] = True

    if bound is not None:
        # the partitions of least lower bounds within the bytes first: the least ok one
        # costed in full bounds the best, so the limit tightens to it
        low = rest0 + least
        within = np.flatnonzero((temp <= bound) & (True if limit is None else low <= limit))
        first = within[np.argsort(low[within], kind="stable")[:_FIRST]]
        reduce_at(first)
        cycles = (rest0 + later_t + reduce_t)[first] + least[first]
        first = first if limit is None else first[cycles <= limit]
        estimate_at(first)
        exact = (rest0 + later_t + reduce_t + compute)[first]
        good = rate_macs[first] <= used[first] * compute[first]
        if limit is not None:
            good &= exact <= limit
        if good.any():
            limit = int(exact[good].min())
    # the terms left, where the others leave a partition within the limit (elsewhere they
    # count 0 and the least partial sums: the cycles then a lower bound above the limit)
    need = np.ones(used.shape, bool) if limit is None else rest0 + least <= limit
    reduce_at(np.flatnonzero(need))
    rest = rest0 + later_t + reduce_t
    costed = need if limit is None else need & (rest + least <= limit)
    estimate_at(np.flatnonzero(costed))
    terms["later stages exchange"], terms["reduce"], terms["compute"] = later_t, reduce_t, compute
    ok = rate_macs <= used * compute
    return {"cycles": rest + compute, "bytes": temp, "ok": ok, **terms}


def _partition_rows(
    params: ConvParams, target: Any, vertex: tuple[int, int, int], splits: dict[str, np.ndarray],
    rearrange: tuple[bool, bool, bool], floor: bool, skip: tuple[str, ...], ci: Any, co: Any,
) -> dict[str, np.ndarray]:  # fmt: skip
    """The terms every partition of :func:`form_costs` has, by the names of
    :data:`~.poplibs_float_terms.ROWS`, in one compiled pass
    (:func:`~.poplibs_float_terms.partition_terms`): the exchanges, the transforms of the
    whole convolution (``addTransformCycleEstimate``), the kernel's outer dimension padded
    to the weight height (a floor leaves it and the input's exchange out), the least
    partial sums (the padded MACs over the AMP's rate and the used tiles, and a
    ``ConvPartialnx1`` tile's at least :func:`_nx1_floor`) and the temporary bytes;
    ``ci``, ``co`` the channels (ints, or arrays of one a partition)."""
    units, icg, ocg = vertex
    height = FLOAT_WEIGHTS_PER_CONV_UNIT // icg
    size, workers = FLOAT.size, target.getNumWorkerContexts()
    out_shape = [int(x) for x in params.getOutputFieldShape()]
    kernel = [int(x) for x in params.kernelShape]
    n = len(splits["batchSplit"])
    pad_in, pad_out = _padded(ci, icg), _padded(co, ocg)
    whole_in = (int(_input_range(out_shape[0], kernel[0], 0, params))
                * int(_input_range(out_shape[1], kernel[1], 1, params)))  # fmt: skip
    _, passes, innermost, fixed = _nx1_floor_terms(vertex, workers)
    scaled = max(1, round(float(target.getExchangeBytesPerCycle()) * EXCHANGE_SCALE))
    consts = np.array([
        units, icg, ocg, height, size, workers, params.batchSize, *out_shape, *kernel,
        *[int(x) for x in params.inputFieldShape], target.getTilesPerSharedExchangeBus(),
        scaled, floor, target.getDataPathWidth() // 8, rearrange[0] or (pad_in and not floor),
        rearrange[1] or pad_in or pad_out,
        rearrange[2] or pad_out or ocg != FLOAT_WEIGHTS_PER_CONV_UNIT, rearrange[2] or pad_out,
        whole_in, *[k in skip for k in _TERMS], passes, innermost, fixed, FLOAT_LOAD_ELEMS,
    ], np.int64)  # fmt: skip
    chan_rows = np.empty((2, n), np.int64)
    chan_rows[0], chan_rows[1] = ci, co
    split_rows = np.array([splits[k] for k in _TERM_SPLITS], np.int64).reshape(6, n)
    computed = partition_terms(split_rows, chan_rows, consts, target.getExchangeBytesPerCycle())
    return dict(zip(ROWS, computed, strict=True))


#: The terms :func:`~.poplibs_float_terms.partition_terms` computes that a
#: :func:`form_costs` caller may skip, in the order it takes them.
_TERMS = ("input exchange", "weight exchange", "partials exchange", "input transform",
          "weight transform", "output transform", "padding")  # fmt: skip
#: The splits of a partition, in the order :func:`~.poplibs_float_terms.partition_terms`
#: takes them.
_TERM_SPLITS = ("batchSplit", "fieldSplit[0]", "fieldSplit[1]", "kernelSplit[0]",
                "outChanSplit.parallel", "inChanSplit.parallel")  # fmt: skip
#: The partitions :func:`form_costs` with ``bound`` costs first (of the least lower bounds).
_FIRST = 64


def best_plan(params: ConvParams, conv_pass: str, target: Any) -> dict[str, Any]:
    """The least of :func:`forms_plans` (the first form in :data:`FORMS` order on a tie,
    as ``createPlan`` keeps the first of equal costs), with ``forms``: each form's
    ``(cycles, bytes)``."""
    plans = forms_plans(params, conv_pass, target)
    best = min(plans.values(), key=lambda p: p["cost"])
    return {**best, "forms": {k: v["cost"] for k, v in plans.items()}}


def form_plan(
    params: ConvParams,
    conv_pass: str,
    target: Any,
    form: str,
    proportion: float = 0.6,
    limit: int | None = None,
) -> dict[str, Any] | None:
    """The least ``(cycles, temporary bytes)`` of the unswapped one-pass AMP plans of the
    FLOAT convolution ``params`` in ``form`` (a key of :data:`FORMS`) within ``proportion``
    of the tile, over the AMP candidates in ``getConvVertexAMPCandidates``' order (a later
    one kept only when strictly lower) and every partition: ``form``, ``vertex`` ``(units,
    icg, ocg)``, ``vertex name`` (``ConvPartial1x1Out`` or ``ConvPartialnx1``), ``splits``,
    ``cost``, ``terms``, ``ties`` (partitions of that cost) and ``tied splits`` (each of
    them; ``splits`` and ``terms`` are those of the one popsolver's search reaches first,
    :func:`_search_first`, which ``choosePlan`` returns). With ``limit``, only a plan of
    at most ``limit`` cycles is exact: a form with none returns one above ``limit``, not
    its least (the partitions above it are not costed), or None when no candidate was
    costed (a candidate whose bound passes ``limit`` is not: none of its partitions is
    within it).

    The candidates are costed in the order of their bounds before any partition is made
    (:func:`_vertex_floor`), the least first, each up to the least so far; a candidate
    whose bound passes it has no partition at or below it (every partition the MAC
    inequality allows costs at least the bound), so neither has any later one: they
    are not costed. The least ``(cycles, bytes)`` over the candidates costed, the first
    in ``getConvVertexAMPCandidates``' order on a tie, is that of costing all in order.

    Raises
    ------
    ValueError
        When ``params`` is not covered, ``form`` is unknown, or nothing fits.
    """
    params = canonical(params)
    _check(params, target, conv_pass)
    if form not in FORMS:
        raise ValueError(f"form_plan: form {form!r}; required one of {list(FORMS)}")
    sub = form_params(params, FORMS[form])
    bound = int(target.getBytesPerTile() * proportion)
    best: dict[str, Any] | None = None
    vertices = amp_candidates(target)
    floors = [_vertex_floor(sub, vertex, target) for vertex in vertices]
    rank = {}  # (the candidate's place in Poplibs' order: the first of equal costs kept)
    for n in sorted(range(len(vertices)), key=floors.__getitem__):
        vertex = vertices[n]
        if best is not None and floors[n] > best["cost"][0]:
            break  # (this and every later candidate's partitions cost more)
        if limit is not None and floors[n] > limit:
            break  # (nor is any within the limit)
        rank[vertex] = n
        splits = _partitions(sub, target, vertex[1], vertex[2])
        expanded = bool(FORMS[form])
        cap = limit if best is None else best["cost"][0]
        c = form_costs(sub, target, vertex, splits, (expanded, expanded, False), limit=cap,
                       bound=bound)  # fmt: skip
        fit = np.flatnonzero(c["ok"] & (c["bytes"] <= bound))
        if not fit.size:
            continue
        # (the first of the least cycles' least bytes: np.lexsort's first, unsorted)
        least = fit[c["cycles"][fit] == c["cycles"][fit].min()]
        i = int(least[np.argmin(c["bytes"][least])])
        cost = (int(c["cycles"][i]), int(c["bytes"][i]))
        if best is None or (cost, n) < (best["cost"], rank[best["vertex"]]):
            same = (c["cycles"][fit] == cost[0]) & (c["bytes"][fit] == cost[1])
            tied = [{k: int(v[j]) for k, v in splits.items()} for j in fit[same].tolist()]
            i = int(fit[same][tied.index(_search_first(sub, vertex, tied, target))])
            best = {
                "form": form, "vertex": vertex, "cost": cost, "ties": int(same.sum()),
                "tied splits": tied,
                "vertex name": _vertex_name(sub, vertex, {k: int(v[i]) for k, v in splits.items()}),
                "splits": {k: int(v[i]) for k, v in splits.items()},
                "terms": {k: int(c[k][i]) for k in c if k not in ("cycles", "bytes", "ok")},
            }  # fmt: skip
    if best is None and len(rank) < len(vertices):
        return None  # (the candidates not costed are above the limit)
    if best is None:
        raise ValueError(f"form_plan: no {form} partition of {params} fits {bound} B "
                         "(hint: a larger availableMemoryProportion)")  # fmt: skip
    return best


def _search_first(
    sub: ConvParams, vertex: tuple[int, int, int], tied: list[dict[str, int]], target: Any
) -> dict[str, int]:
    """Of the equally costed partitions ``tied`` of the form ``sub`` with the AMP ``vertex``,
    the one popsolver's search reaches first (:func:`~.popsolver_order.search_first`: one
    pass, one conv group; the field's grain 1, the output being FLOAT)."""
    out = [int(x) for x in sub.getOutputFieldShape()]
    ci_g = -(-sub.inputChannelsPerConvGroup // vertex[1])
    co_g = -(-sub.outputChannelsPerConvGroup // vertex[2])
    bounds = {"fieldSplit[0]": out[0], "fieldSplit[1]": out[1],
              "kernelSplit[0]": int(sub.kernelShape[0]), "batchSplit": sub.batchSize,
              "convGroupSplit": 1, "outChanSplit.parallel": co_g, "outChanSplit.serial": co_g,
              "inChanSplit.parallel": ci_g, "inChanSplit.serial": ci_g}  # fmt: skip
    one_pass = {"convGroupSplit": 1, "outChanSplit.serial": 1, "inChanSplit.serial": 1}
    first = search_first([{**t, **one_pass} for t in tied], bounds, target.getNumTiles())
    return {k: first[k] for k in tied[0]}


def forms_plans(params: ConvParams, conv_pass: str, target: Any) -> dict[str, dict[str, Any]]:
    """:func:`form_plan` of every form ``getExpandDimsCandidates`` offers for ``params``
    (a dimension whose expansion changes nothing, or whose input is smaller than its
    kernel, is no candidate)."""
    params = canonical(params)
    out = {}
    for form, dims in FORMS.items():
        if any(not _expands(params, d) for d in dims):
            continue
        out[form] = form_plan(params, conv_pass, target, form)
    return out


def describe_partition(splits: dict[str, int]) -> str:
    """A partition as docs/planner.md states it: batch, field per dimension joined by a
    dot, outer kernel dimension, output and input channels."""
    x = " \N{MULTIPLICATION SIGN} "
    return x.join([f"B {splits['batchSplit']}",
                   f"field {splits['fieldSplit[0]']}\N{MIDDLE DOT}{splits['fieldSplit[1]']}",
                   f"kernel {splits['kernelSplit[0]']}", f"Co {splits['outChanSplit.parallel']}",
                   f"Ci {splits['inChanSplit.parallel']}"])  # fmt: skip


def describe_form_plan(plan: dict[str, Any]) -> str:
    """A form's plan as docs/planner.md states it."""
    units, icg, ocg = plan["vertex"]
    cycles, nbytes = plan["cost"]
    return (f"{plan['form']}, {describe_partition(plan['splits'])}, AMP {icg} / {ocg} on "
            f"{units} units, {cycles:,} cycles / {nbytes:,} B")  # fmt: skip


#: The terms a serial iteration's bound leaves out (the reduction and its later stages,
#: made once over input channels; the input's exchange, counted 0 by ``floor``).
_SERIAL_SKIP = ("reduce", "later stages exchange")


def _one_pass_floor(
    sub: ConvParams, target: Any, rearrange: tuple[bool, bool, bool], limit: int
) -> int:
    """The least :func:`form_costs` floor of ``sub`` over the AMP candidates and
    partitions (no memory bound: it only removes candidates), exact up to ``limit``. A
    candidate whose bound before any partition is made (:func:`_vertex_floor`) passes
    ``limit`` is not costed: that bound stands for it (every partition costs more)."""
    best = None
    for vertex in amp_candidates(target):
        low = _vertex_floor(sub, vertex, target)
        if low <= limit:
            c = form_costs(sub, target, vertex, _partitions(sub, target, vertex[1], vertex[2]),
                           rearrange, floor=True, limit=limit)  # fmt: skip
            low = int(c["cycles"].min())
        best = low if best is None else min(best, low)
    assert best is not None
    return best


def _serial_terms(
    whole: ConvParams,
    it: ConvParams,
    vertex: tuple[int, int, int],
    splits: dict[str, np.ndarray],
    count: Any,
    kind: str,
    target: Any,
    out_chans: np.ndarray | None = None,
) -> np.ndarray:
    """What a serial iteration adds (``addDynamicSliceEstimate``: the tile's share of the
    whole convolution's weights, and over input channels of its inputs, over ``count``;
    over output channels ``addDynamicUpdateEstimate`` of the tile's outputs; over input
    channels ``addInPlaceEstimate``'s addition of them, FLOAT), for the partitions
    ``splits`` of the iteration ``it`` (as :mod:`.serial_estimates` restates them). With
    ``count`` and ``out_chans`` arrays (one each a partition), each partition's of the
    iteration with those output channels in a split of that count."""
    ocg = vertex[2]
    used = np.prod([splits[k] for k in SPLITS], axis=0)
    out_shape = [int(x) for x in it.getOutputFieldShape()]
    co = it.outputChannelsPerConvGroup if out_chans is None else out_chans
    co_g = -(-co // ocg)
    outputs = (-(-it.batchSize // splits["batchSplit"])
               * -(-out_shape[0] // splits["fieldSplit[0]"])
               * -(-out_shape[1] // splits["fieldSplit[1]"])
               * -(-co_g // splits["outChanSplit.parallel"]) * ocg)  # fmt: skip
    outputs = -(-outputs // splits["inChanSplit.parallel"])
    return _serial_cycles(whole, used, outputs, count, kind, target)


def _slices(elements: np.ndarray, count: Any, target: Any) -> np.ndarray:
    """``addDynamicSliceEstimate`` of ``elements`` FLOAT split ``count`` ways (an int or an
    array of counts, each at least 2): :func:`~.serial_estimates._slice_cycles` over arrays
    of counts."""
    region = -(-np.asarray(elements, np.int64) // np.asarray(count, np.int64))
    vw = target.getDataPathWidth() // 32  # (FLOAT)
    return slice_1d_estimate(region, 1, target.getNumWorkerContexts(), vw, False)


def _serial_cycles(
    whole: ConvParams, used: np.ndarray, outputs: np.ndarray, count: Any, kind: Any, target: Any
) -> np.ndarray:
    """:func:`_serial_terms` of tiles of ``used`` tiles a partition, ``outputs`` partial
    sums a tile (``count`` an int, or an array of counts as long as ``outputs``;
    ``kind`` ``"in"`` or ``"out"``, or a bool array, True where over output channels)."""
    kpos = int(math.prod(whole.kernelShape))
    ci, co = whole.inputChannelsPerConvGroup, whole.outputChannelsPerConvGroup
    cycles = _slices(-(-(kpos * ci * co) // used), count, target)
    if isinstance(kind, str) and kind == "out":
        return cycles + _slices(outputs, count, target)
    inputs = -(-(whole.batchSize * int(math.prod(whole.inputFieldShape)) * ci) // used)
    add = binary_op_1d_in_place_array("ADD", "float", outputs, target.getNumWorkerContexts(),
                                      target.getVectorWidth(FLOAT))  # fmt: skip
    over_in = cycles + _slices(inputs, count, target) + add
    if isinstance(kind, str):
        return over_in
    return np.where(kind, cycles + _slices(outputs, count, target), over_in)


def _count_floors(
    whole: ConvParams, vertex: Any, counts: np.ndarray, chans: np.ndarray, kind: Any,
    per_it: Any, target: Any,
) -> np.ndarray:  # fmt: skip
    """A lower bound of each serial split of ``whole`` ``counts`` ways over ``kind``
    channels (its iterations of ``chans`` input or output channels), over every partition,
    computed before any partition is costed: ``count`` times the least partial sums of an
    iteration (``per_it``, :func:`_iteration_floor`; where no tile can run
    ``ConvPartial1x1Out``, at least :func:`_nx1_floor`'s ``8 passes`` cycles for each of a
    tile's ``ceil(w / T)`` positions times kernel positions over the weight height times
    input and output groups, ``w`` the iteration's), its partial sums' exchange and its
    serial terms (:func:`_serial_cycles`), each of a tile holding ``ceil(n / T)`` of the
    ``n`` outputs, weights or inputs it shares out (``T`` the tiles; every other term of
    :func:`form_costs` is at least 0).

    Exact as a bound: a partition uses ``used = B F0 F1 K Co Ci <= T`` tiles and a tile
    holds ``ceil(n / used) >= ceil(n / T)`` weights or inputs; its partial sums
    ``ceil(b / B) ceil(h / F0) ceil(w / F1) ceil(g / Co) ocg`` are at least
    ``b h w g ocg / (B F0 F1 Co)``, so at least ``ceil(b h w g ocg / T)`` (and that over
    ``Ci`` still at least it, ``B F0 F1 Co Ci <= T``); the slice, update and in-place
    addition estimates and ``ExchangeEstimator`` only grow with the elements they move.

    ``vertex``, ``kind`` and ``per_it`` may also be given per count (an int64 ``[n, 3]``
    array of vertices, a bool array, True over output channels, and an int64 array):
    :func:`_serial_floor` bounds the counts of every candidate and kind in one call
    (every term is computed count by count)."""
    out_shape = [int(x) for x in whole.getOutputFieldShape()]  # (an iteration's too)
    tiles = target.getNumTiles()
    units, icg, ocg = (np.asarray(vertex, np.int64).T if isinstance(kind, np.ndarray)
                       else vertex)  # fmt: skip
    out = kind == "out" if isinstance(kind, str) else kind
    co = np.where(out, chans, whole.outputChannelsPerConvGroup)
    n_out = whole.batchSize * out_shape[0] * out_shape[1] * -(-co // ocg) * ocg
    outputs = -(-n_out // tiles)
    used = np.full(counts.shape, tiles, np.int64)
    serial = _serial_cycles(whole, used, outputs, counts, kind, target)
    compute = np.broadcast_to(np.asarray(per_it, np.int64), counts.shape)
    height = FLOAT_WEIGHTS_PER_CONV_UNIT // icg
    # (where every tile runs ConvPartialnx1: _nx1_floor's workers charge at least 8 cycles
    # a position, kernel position, input and output group and pass, and a tile has at
    # least 1 / T of the product of those of the iteration)
    nx1 = (height != 1) | (whole.batchSize != 1) | (int(whole.kernelShape[1]) != 1)
    if np.any(nx1):
        ci = np.where(out, whole.inputChannelsPerConvGroup, chans)
        groups = -(-ci // icg) * -(-co // ocg) * -(-int(whole.kernelShape[0]) // height)
        work = groups * int(whole.kernelShape[1]) * whole.batchSize * out_shape[0] * out_shape[1]
        least = np.maximum(compute, 8 * (ocg // units) * -(-work // tiles))
        compute = np.where(nx1, least, compute)
    return counts * (compute + _exchange(outputs, FLOAT.size, target) + serial)


def _serial_floor(
    sub: ConvParams, target: Any, limit: int, rearrange: tuple[bool, bool, bool]
) -> int | None:
    """The least cost of a serial plan of ``sub``'s form below ``limit`` (None if none):
    a serial split ``S`` of the input or output channels (any count up to their grains)
    runs ``S`` iterations, each on the tiles of the convolution of ``ceil(g / S)`` grains,
    so each costs at least that convolution's weights' and partial sums' exchange, its
    partial sums and the rearrangements of its weights and output and, over input
    channels, of its input (``addEstimates`` multiplies the transforms by the serial
    splits; over output channels the inputs' may be broadcast before the loop, so they
    and the inputs' exchange are left out, as is the reduction), plus its slices, update or
    in-place addition (:func:`_serial_terms`), and at least :data:`_LEAST_VERTEX` cycles,
    which bounds the counts worth trying.

    Of a candidate's counts over input or output channels, with ``m`` the least of
    ``limit`` and the least so far (of the candidates and kinds before), a count is
    costed only while ``count`` times the least partial sums of an iteration
    (:func:`_iteration_floor`) is at most ``m``: each term of an iteration is
    non-negative, so a count above that costs more than the least so far (the result is
    unchanged) or more than ``limit`` (the result is then at least ``limit``: the first
    such count's bound is taken, below every larger count's). A count whose bound before
    any partition is costed (:func:`_count_floors`) passes ``m`` is not costed either:
    its cost is at least that bound. The counts left are costed together, their
    iterations' partitions in one :func:`form_costs` call (``chans``), each partition's
    other terms and serial terms capped at ``m // count``."""
    best: int | None = None
    ci, co = sub.inputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
    # each candidate's and kind's counts worth trying, and their bounds before any
    # partition is costed, in one call (:func:`_count_floors` of every row)
    tries = []
    for vertex in amp_candidates(target):
        per_it = _iteration_floor(sub, vertex, target)
        for kind, chans, grain in (("in", ci, vertex[1]), ("out", co, vertex[2])):
            grains = -(-chans // grain)
            counts = np.arange(2, min(grains, limit // _LEAST_VERTEX) + 1, dtype=np.int64)
            # (a count of the same iteration as a smaller count costs more: not tried)
            counts = counts[-(-grains // counts) != -(-grains // (counts - 1))]
            if counts.size:  # (else fewer than two grains: no serial split of this kind)
                tries.append((vertex, per_it, kind, counts, -(-grains // counts) * grain))
    if not tries:
        return None
    rows = np.array([t[3].size for t in tries], np.int64)
    each = [np.repeat(np.array(v, np.int64), rows, axis=0)
            for v in ([t[0] for t in tries], [t[1] for t in tries],
                      [t[2] == "out" for t in tries])]  # fmt: skip
    cat = [np.concatenate([t[k] for t in tries]) for k in (3, 4)]
    lows_of = np.split(_count_floors(sub, each[0], cat[0], cat[1], each[2].astype(bool),
                                     each[1], target), np.cumsum(rows)[:-1])  # fmt: skip
    base = None  # (an iteration is this convolution with fewer channels: made once)
    for (vertex, per_it, kind, counts, sizes), lows in zip(tries, lows_of, strict=True):
        m = limit if best is None else min(limit, best)
        over = np.flatnonzero(counts * per_it > m)
        if over.size:  # (a larger count's bound is larger still)
            low = int(counts[over[0]]) * per_it
            best = low if best is None else min(best, low)
            counts, sizes, lows = counts[: over[0]], sizes[: over[0]], lows[: over[0]]
        passed = lows > m  # (no partition of such a count is costed: each costs more)
        if passed.any():
            low = int(lows[passed].min())
            best = low if best is None else min(best, low)
        counts, sizes = counts[~passed], sizes[~passed]
        if not counts.size:
            continue
        if base is None:
            base = ConvParams(FLOAT, sub.batchSize, list(sub.inputFieldShape),
                              list(sub.kernelShape), ci, co,
                              paddingLower=list(sub.inputTransform.paddingLower),
                              paddingUpper=list(sub.inputTransform.paddingUpper),
                              outputType=FLOAT)  # fmt: skip
        low = _counts_floor(sub, base, vertex, counts, sizes, kind, m, rearrange, target)
        best = low if best is None else min(best, low)
    return best


def _counts_floor(
    sub: ConvParams, base: ConvParams, vertex: tuple[int, int, int], counts: np.ndarray,
    sizes: np.ndarray, kind: str, m: int, rearrange: tuple[bool, bool, bool], target: Any,
) -> int:  # fmt: skip
    """The least over the serial ``counts`` of ``sub`` over ``kind`` channels (iterations of
    ``sizes`` channels) of ``count`` times an iteration's least cost (:func:`form_costs`
    with ``floor`` plus :func:`_serial_terms`), exact where at most ``m``, else a lower
    bound above it: the iterations' partitions costed in one call, each capped at ``m //
    count`` (a partition whose other terms and serial terms pass the cap counts its least
    partial sums: still a lower bound, above the cap)."""
    ci, co = sub.inputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
    # (an iteration's grid, :func:`_partitions` of ``base`` with its channels, read from
    # the grids kept by what it depends on: the channels change only the grains)
    out_rows, out_cols = (int(x) for x in base.getOutputFieldShape())
    fixed = (base.batchSize, out_rows, out_cols, int(base.kernelShape[0]))
    tiles, (_, icg, ocg) = target.getNumTiles(), vertex
    grids = [
        _partition_grid(*fixed, -(-(n if kind == "out" else co) // ocg),
                        -(-(n if kind == "in" else ci) // icg), tiles, False)
        for n in sizes.tolist()
    ]  # fmt: skip
    rows = np.array([len(g["batchSplit"]) for g in grids], np.int64)
    parts = {k: np.concatenate([g[k] for g in grids]) for k in SPLITS}
    count = np.repeat(counts, rows)
    n = np.repeat(sizes, rows)
    chans = (
        (n, np.full(n.shape, co, np.int64)) if kind == "in" else (np.full(n.shape, ci, np.int64), n)
    )
    extra = _serial_terms(sub, base, vertex, parts, count, kind, target, out_chans=chans[1])
    skip = _SERIAL_SKIP + (("input transform",) if kind == "out" else ())
    c = form_costs(base, target, vertex, parts, rearrange, floor=True,
                   limit=m // count - extra, skip=skip, chans=chans)  # fmt: skip
    starts = np.concatenate(([0], np.cumsum(rows)[:-1]))
    return int((counts * np.minimum.reduceat(c["cycles"] + extra, starts)).min())


def form_floors(
    params: ConvParams, conv_pass: str, target: Any, limit: int
) -> dict[str, int | None]:
    """Lower bounds of Poplibs' cost of the FLOAT convolution's AMP plans that
    :func:`forms_plans` does not cost, each exact or at least ``limit`` where a
    bound passes it: ``"<form> serial"`` (a serial split of an unswapped form) and, for
    each set of dimensions ``getOutChanFlattenDimsCandidates`` may flatten into the
    output channels of the swapped form (a dimension whose input is no larger than its
    kernel once swapped; no dimension of the swapped form expands, its input being
    smaller than its kernel), ``"swapped, flattened <dims>"`` (one pass: its input, the
    original weights, neither exchanged nor rearranged; the weights and output
    rearranged, ``swapOperands != isMatmulOrFullyConnectedLayer``) and ``"swapped,
    flattened <dims> serial"``. ``<dims>`` is ``none``, ``0``, ``1`` or ``both``. A
    serial form whose channels have fewer than two grains has no plan (None); of a serial
    form, the counts whose :data:`_LEAST_VERTEX` cycles a pass already reach ``limit``
    are not bounded further (each costs more than ``limit``)."""
    return dict(iter_form_floors(params, conv_pass, target, limit))


def iter_form_floors(
    params: ConvParams, conv_pass: str, target: Any, limit: int
) -> Iterator[tuple[str, int | None]]:
    """:func:`form_floors`' ``(name, bound)`` pairs in its order, each computed only when
    asked for: a caller that stops at the first bound within ``limit`` computes no more."""
    params = canonical(params)
    _check(params, target, conv_pass)
    for form, dims in FORMS.items():
        sub = form_params(params, dims)
        yield f"{form} serial", _serial_floor(sub, target, limit, (bool(dims), bool(dims), False))
    names = {(): "none", (0,): "0", (1,): "1", (0, 1): "both"}
    for flat, name in names.items():
        sub = swapped_params(params, flat)
        # (every tile has the whole inner kernel dimension: a floor of any of its plans)
        least = _inner_kernel_floor(int(sub.kernelShape[1]), target)
        if least > limit:  # (every plan of the form, one pass or serial, costs more)
            yield f"swapped, flattened {name}", least
            yield f"swapped, flattened {name} serial", least
            continue
        one = _one_pass_floor(sub, target, (False, True, True), limit)
        yield f"swapped, flattened {name}", max(one, least)
        serial = _serial_floor(sub, target, limit, (False, True, True))
        yield f"swapped, flattened {name} serial", None if serial is None else max(serial, least)
