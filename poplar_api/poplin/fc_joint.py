"""The joint plan of a fully-connected layer's three training passes, as Poplibs makes it.

A fully-connected layer ``y = x W`` (``x`` of ``B x I``, ``W`` of ``I x O``) trains with
three products, each a ``matMul`` whose ``fullyConnectedPass`` names it:

* ``TRAINING_FWD``: ``x W`` (batch ``B``, ``I`` input and ``O`` output channels);
* ``TRAINING_BWD``: ``dy W^T`` (batch ``B``, ``O`` in, ``I`` out);
* ``TRAINING_WU``: ``x^T dy`` (batch ``I``, ``B`` in, ``O`` out).

Poplibs (graphcore/poplibs at ``7eac0f26``) plans them together. ``getPlan``
(``lib/poplin/ConvPlan.cpp``) plans the backward and weight-update passes by first
planning the forward pass of the same layer (``getFullyConnectedPassParams``), and
``createPlan`` plans that forward pass twice when ``pass`` is ``FC_TRAINING_FWD``:

* **jointly** (``isJointPlan``): operands swapped (``getSwapOperandCandidates`` allows
  only ``true``), so the convolution's field is ``O``, its input channels ``I`` and its
  output channels ``B``; the output channels are not split over tiles (``constructModel``
  in ``ConvModel.cpp``: ``outChanSplit.parallel`` is 1, so every weight lies on one tile
  and no exchange moves the weights between the passes) nor the input channels
  serially; the innermost field grain is the vertex's input grouping
  (``fieldGrainSize.back() = inChansPerGroup``: the field of the forward pass is the
  input channels of the backward pass); AMP groupings need the input grouping to be a
  multiple of the conv units (``getConvVertexAMPCandidates``). The cost is the sum of
  the three passes' cycles (``addBwdEstimates`` and ``addWuEstimates`` cost the
  backward and weight-update passes on partitions derived from the forward one) and
  the largest of their temporary bytes, each pass within the memory bound;
* **separately**: each pass planned on its own (both operand orders, swapped first).

``separatePlanHasLowerCost`` keeps the separate plans only when their summed cycles are
strictly lower (both within the bound), when the joint plan does not fit and they do,
or, neither fitting, when their largest temporary bytes are lower. With a joint plan,
``getFullyConnectedBwdPlan`` makes the backward plan from the forward one by exchanging
the field split with the input-channel split, and ``getFullyConnectedWUPlan`` the
weight-update plan by exchanging the input- and output-channel splits; each tile keeps
the same weights in all three passes (``LinearizeTileOrder::FC_BWD_AS_CONV`` /
``FC_WU``), so here the derived plans' tile grids are the forward grid with the same
axes exchanged. Poplibs also skips a joint plan when the input and output types
differ (``createPlan``).

Vertex candidates of the forward pass (:func:`_fwd_vertex_types`): the AMP per unit
count, and the horizontal MAC with Poplibs' input groupings (``getConvVertexHMACCandidates``:
1 or multiples of the conv units in a joint plan, every one of them). The backward
pass runs the forward method; the weight update the method :func:`wu_method` gives
(``getFullyConnectedWUMethod``): the outer product (:mod:`.outer_product`) for a batch-1
layer whose forward pass writes one channel per group (the horizontal MAC), grouping
its output channels by the forward input grouping; else the AMP when that grouping is
not 1; else the forward method.

A horizontal MAC of a joint plan runs its grouping: Poplibs' vertex loops over a tile's
``ceil(channels / inChansPerGroup)`` input groups and ``ceil(channels /
outChansPerGroup)`` output groups, each pass of a group paying the supervisor's and the
workers' loop overheads and a dot product of ``inChansPerGroup`` elements per output
position (``addPartialCalcCycleEstimate``, ``ConvModel.cpp``;
``getConvPartialHorizontalMacSupervisorOuterLoopCycleEstimate`` and
``getConvPartialHorizontalMacCycleEstimate``, ``PerformanceEstimation.hpp``), so the
joint candidates are costed with :func:`grouped_hmac_compute` and the vertices with the
grouping (:func:`~poplar_api.poplin.conv_vertex_estimates.partial_estimate`). A plan made
alone keeps one group of a tile's channels: its candidates range over every grouping up
to all the channels, and the one that makes a tile's block one group is the cheapest.

Differences kept: no serial split of the batch (it becomes an input-channel serial
split of the weight update, which ipusim does not model); an AMP weight update runs
ipusim's AMP grouping of its type (Poplibs uses the forward pass's groupings
exchanged, ``getFullyConnectedWuConvVertexType``: 8 input and 16 output channels per
group for HALF with float partials where the forward pass has 16 and 8), while its
rearrangement estimate uses Poplibs' groupings; the planner has no term for the
``fullyConnectedWeightTranspose`` compute set that transposes the weights before the
backward pass (:mod:`.fc_transpose`), as Poplibs' has none for a joint plan.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from poplar_api.poplin.conv_params import ConvParams, dim_maps
from poplar_api.poplin.conv_planner import (
    OUTER_PRODUCT,
    REFINE,
    ConvPlan,
    _candidates,
    _fitting,
    amp_groups,
    amp_unit_options,
    hmac_partial_chans,
    memory_limit,
    plan_from,
    weights_per_conv_unit,
)
from poplar_api.poplin.conv_transform import transform_estimates
from poplar_api.poplin.conv_vertex_estimates import largest_block_estimate
from poplar_api.types import FLOAT, Type

__all__ = ["FC_TRAINING", "JointPlan", "fwd_layer", "pass_product", "plan_joint", "separate_wins"]

#: The fully-connected training passes, in the order the joint cost adds them.
FC_TRAINING = ("FC_TRAINING_FWD", "FC_TRAINING_BWD", "FC_TRAINING_WU")
#: Split-dimension axes exchanged to derive each pass's partition from the forward
#: one (``(G, B, field, Co, Ci)``: field with Ci for the backward pass, Co with Ci for
#: the weight update).
_AXES = {"FC_TRAINING_FWD": None, "FC_TRAINING_BWD": (2, 4), "FC_TRAINING_WU": (3, 4)}
_COST_KEYS = ("compute", "exchange", "reduce", "transform", "total")


#: Per pass, the positions in the layer ``(G, B, I, O)`` of its product's ``(G, M, K,
#: N)``: ``x W`` is ``[B, I] x [I, O]``, ``dy W^T`` ``[B, O] x [O, I]``, ``x^T dy``
#: ``[I, B] x [B, O]`` (Poplibs' ``getFullyConnectedPassParams``).
_PRODUCT = {
    "FC_TRAINING_FWD": (0, 1, 2, 3), "FC_TRAINING_BWD": (0, 1, 3, 2),
    "FC_TRAINING_WU": (0, 2, 1, 3),
}  # fmt: skip


def fwd_layer(conv_pass: str, dims: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """``(G, B, I, O)`` of the layer whose ``conv_pass`` product is ``dims`` ``(G, M, K, N)``."""
    layer = [0] * 4
    for d, j in zip(dims, _PRODUCT[conv_pass], strict=True):
        layer[j] = int(d)
    return layer[0], layer[1], layer[2], layer[3]


def pass_product(conv_pass: str, layer: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """``(G, M, K, N)`` of the ``conv_pass`` product of the layer ``(G, B, I, O)``."""
    g, m, k, n = (int(layer[j]) for j in _PRODUCT[conv_pass])
    return g, m, k, n


def swapped_params(dims: tuple[int, int, int, int], in_type: Type, out_type: Type) -> ConvParams:
    """The convolution of the product ``dims`` ``(G, M, K, N)`` with swapped operands:
    ``B^T A^T``, a field of ``N`` positions, ``K`` input and ``M`` output channels."""
    g, m, k, n = dims
    return ConvParams(in_type, 1, [n], [1], k, m, g, outputType=out_type)


@dataclass(frozen=True)
class JointPlan:
    """The joint plan of a layer: per pass its (swapped) convolution and plan, the
    summed estimated cycles and the largest temporary bytes of the three passes."""

    params: dict[str, ConvParams]
    plans: dict[str, ConvPlan]
    cycles: int
    memory_bytes: int


def _derive(fwd: np.ndarray, axes: tuple[int, int] | None) -> np.ndarray:
    """Per-candidate split rows ``[n, (G, B, field, Co, Ci)]`` of a derived pass."""
    if axes is None:
        return fwd
    out = fwd.copy()
    out[:, list(axes)] = fwd[:, list(axes[::-1])]
    return out


def _fwd_vertex_types(
    layer: tuple[int, int, int, int], in_type: Type, partials: Type, target: Any
) -> list[tuple[Any, int, int]]:
    """``(method, inChansPerGroup, outChansPerGroup)`` of the forward pass's vertex
    candidates in a joint plan (``getConvVertexTypeCandidates`` with ``isJointPlan``,
    ``ConvVertexType.cpp``; SLIC is off for the fully-connected passes).

    * AMP, per unit count: the input grouping must be a multiple of the units (the
      forward input channels become the weight update's output channels);
    * the horizontal MAC (``getConvVertexHMACCandidates``): input groupings from the
      type's grain (1 FLOAT, 2 HALF) up to the input channels rounded to it, skipping a
      grouping that does not lower the number of groups and, in a joint plan, any
      that is not 1 or a multiple of the conv units; one output channel per group
      with FLOAT partials, two otherwise (:func:`.conv_planner.hmac_partial_chans`),
      so a layer of HALF partials never takes the outer-product weight update.
    """
    out: list[tuple[Any, int, int]] = []
    units_all = sorted(amp_unit_options(in_type, partials, target), reverse=True)
    for units in units_all:
        icg, ocg, _, _ = amp_groups(in_type, partials, target, units)
        if icg % units == 0:
            out.append((("AMP", units), icg, ocg))
    units = units_all[0]
    grain = 1 if in_type == FLOAT else 2
    rounded = -(-layer[2] // grain) * grain
    previous, hmac = 0, []
    for icg in range(grain, rounded + 1, grain):
        groups = -(-rounded // icg)
        if groups == previous or (icg != 1 and icg % units):
            continue
        previous = groups
        hmac.append((("HMAC", icg), icg, hmac_partial_chans("HMAC", partials)))
    return out + hmac


def grouped_hmac_compute(
    blocks: np.ndarray, icg: int, ocg: int, in_type: Type, target: Any
) -> np.ndarray:
    """Closed-form cycles of the horizontal MAC of a joint plan over the split blocks
    ``blocks`` (rows of ``(G, B, field, Co, Ci)``) grouped ``icg`` / ``ocg``: the leading
    terms of Poplibs' estimate (``PerformanceEstimation.hpp`` at 7eac0f26), per conv group
    ``23 + IG (15 + OG (10 + W (51 + P (7 + ocg D))))`` plus 50, with ``IG`` / ``OG`` the
    block's input / output groups, ``P`` a worker's output positions (the block's batch
    times field, over the ``W`` workers) and ``D = 7 + ceil(icg / vectorWidth)`` the dot
    product over one group (the final plan is costed with the estimator itself)."""
    w = target.getNumWorkerContexts()
    rows = -(-(blocks[:, 1] * np.prod(blocks[:, 2:-2], axis=1)) // w)
    nig, nog = -(-blocks[:, -1] // icg), -(-blocks[:, -2] // ocg)
    dot = 7 + -(-icg // target.getVectorWidth(in_type))
    per_group = 23 + nig * (15 + nog * (10 + w * (51 + rows * (7 + ocg * dot))))
    return 50 + blocks[:, 0] * per_group


def wu_method(
    batch: int, fwd_method: Any, icg: int, ocg: int, in_type: Type, partials: Type, target: Any
) -> Any:
    """The weight update's method in a joint plan whose forward pass runs ``fwd_method``
    with groupings ``icg`` / ``ocg`` (``getFullyConnectedWUMethod``, ``ConvModel.cpp``):
    the outer product when the update has one input channel (``batch`` 1) and the
    forward pass one output channel per group, its channels grouped by the forward
    input grouping; else the AMP when the forward input grouping is not 1 (the
    horizontal MAC writes one output channel per group); else the forward method."""
    if batch == 1 and ocg == 1:
        return (OUTER_PRODUCT, icg)
    if icg != 1:
        if fwd_method[0] == "AMP":
            return fwd_method
        return ("AMP", max(amp_unit_options(in_type, partials, target)))
    return fwd_method


def plan_joint(
    layer: tuple[int, int, int, int],
    in_type: Type,
    out_type: Type,
    options: Mapping[str, Any],
    target: Any,
) -> JointPlan | None:
    """The joint plan of the layer ``(G, B, I, O)`` under the parsed convolution
    ``options`` (see the module docstring), or None where Poplibs makes none (input and
    output types differ) or ipusim models none (a method other than AMP constrained)."""
    if in_type != out_type or options.get("method") not in (None, "AMP", "HMAC"):
        return None
    partials = FLOAT if in_type == FLOAT else options["partialsType"]
    fast = str(options.get("enableFastReduce", "false")).lower() == "true"
    params = {p: swapped_params(pass_product(p, layer), in_type, out_type) for p in FC_TRAINING}
    maps = {p: dim_maps(q) for p, q in params.items()}
    wpcu = weights_per_conv_unit(params["FC_TRAINING_FWD"])
    methods: list[dict[str, Any]] = []
    cats = []
    forced = options.get("method")
    for fwd_method, icg, ocg in _fwd_vertex_types(layer, in_type, partials, target):
        if forced is not None and fwd_method[0] != forced:
            continue
        # the weight update's method and groupings (getFullyConnectedWuConvVertexType):
        # the forward pass's groupings exchanged
        pass_method = {"FC_TRAINING_FWD": fwd_method, "FC_TRAINING_BWD": fwd_method,
                       "FC_TRAINING_WU": wu_method(layer[1], fwd_method, icg, ocg, in_type,
                                                   partials, target)}  # fmt: skip
        f = "FC_TRAINING_FWD"
        fwd = _candidates(params[f], fwd_method, partials, target, maps[f], fast,
                          field_grain=icg, co_unsplit=True)  # fmt: skip
        per: dict[str, dict[str, np.ndarray]] = {}
        for p in FC_TRAINING:
            axes = _AXES[p]
            if axes is None:
                cat = fwd
            else:
                rows = (_derive(fwd["parts"], axes), _derive(fwd["blocks"], axes))
                splits = ([rows[0][:, d] for d in range(5)], [rows[1][:, d] for d in range(5)])
                cat = _candidates(params[p], pass_method[p], partials, target, maps[p], fast,
                                  splits)  # fmt: skip
            ig, og = (ocg, icg) if p == "FC_TRAINING_WU" else (icg, ocg)
            if pass_method[p][0] == "HMAC":
                hmac = grouped_hmac_compute(cat["blocks"], ig, og, in_type, target)
                cat = dict(cat, compute=hmac, total=cat["total"] - cat["compute"] + hmac)
            n = cat["used"].size
            cyc, temp = transform_estimates(params[p], p, True, np.full(n, ig), np.full(n, og),
                                            cat["used"], target, wpcu, joint=True)  # fmt: skip
            cat = dict(cat, transform=cyc, total=cat["total"] + cyc,
                       memory=np.maximum(cat["memory"], temp))  # fmt: skip
            per[p] = cat
        methods.append(pass_method)
        cats.append(per)
    if not cats:
        return None
    per = {p: {k: np.concatenate([c[p][k] for c in cats]) for k in cats[0][p]} for p in FC_TRAINING}
    ix = np.concatenate([np.full(c[FC_TRAINING[0]]["used"].size, i) for i, c in enumerate(cats)])
    for p in FC_TRAINING:
        per[p]["method"] = ix
        per[p]["serial"] = np.ones(ix.size, np.int64)
    total = sum(per[p]["total"] for p in FC_TRAINING)
    memory = np.maximum.reduce([per[p]["memory"] for p in FC_TRAINING])
    fits = _fitting(memory, memory_limit(target, options), target.getBytesPerTile())
    primary = np.where(fits, total, np.iinfo(np.int64).max // 4)
    order = np.lexsort((ix, per["FC_TRAINING_FWD"]["used"], primary))
    exact = {p: largest_block_estimate(params[p], target) for p in FC_TRAINING}
    best: tuple[tuple[int, int], JointPlan] | None = None
    for j in order[:REFINE].tolist():
        plans: dict[str, ConvPlan] = {}
        grid = None
        for p in FC_TRAINING:
            cat = per[p]
            cost = {k: int(cat[k][j]) for k in _COST_KEYS}
            tiles = None if grid is None else np.swapaxes(grid, *_AXES[p])
            ms = [m[p] for m in methods]
            plan = plan_from(cat, j, ms, params[p], partials, target, cost, fast, True, tiles)
            plan = dataclasses.replace(plan, joint=True)  # its vertices run its grouping
            if plan.method != OUTER_PRODUCT:  # its closed form is Poplibs' estimate
                cost["compute"] = int(exact[p](plan))
                cost["total"] = sum(cost[k] for k in _COST_KEYS[:4])
                plan = plan_from(cat, j, ms, params[p], partials, target, cost, fast, True,
                                 plan.tiles)  # fmt: skip
            plans[p] = dataclasses.replace(plan, joint=True)
            grid = plan.tiles if grid is None else grid
        cycles = sum(plans[p].cost["total"] for p in FC_TRAINING)
        key = (0 if fits[j] else 1, cycles)
        if best is None or key < best[0]:
            best = (key, JointPlan(params, plans, cycles, int(memory[j])))
    assert best is not None
    return best[1]


def separate_wins(joint: JointPlan | None, cycles: int, memory_bytes: int, limit: float) -> bool:
    """Whether Poplibs keeps the separately planned passes (summed ``cycles``, largest
    ``memory_bytes``) over ``joint`` (``createPlan``'s ``separatePlanHasLowerCost`` at
    bound ``limit``): within the bound, when they are strictly faster or the joint
    plan does not fit; beyond it, when the joint plan does not fit either and they
    need fewer bytes."""
    if joint is None:
        return True
    if memory_bytes <= limit:
        return joint.memory_bytes > limit or cycles < joint.cycles
    return joint.memory_bytes > limit and memory_bytes < joint.memory_bytes
