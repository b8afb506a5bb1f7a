"""Poplibs' planner for a convolution whose field flattens into a product.

``createPlan`` (``lib/poplin/ConvPlan.cpp`` at graphcore/poplibs ``7eac0f26``) plans a
convolution of pass ``NONE`` (and ``INFERENCE_FWD``, ``TRAINING_FWD``, ``TRAINING_BWD``:
the same candidates, :data:`~.poplibs_matmul_model.CONV_PASSES`) over these transforms of
level 0, each candidate costed by
``constructModel`` / ``addEstimates`` (``ConvModel.cpp``):

* ``swapOperands`` (``getSwapOperandCandidates``): ``{false, true}``, the unswapped form
  first, for every pass that is neither a matMul nor a fully-connected pass, so a tie
  keeps the unswapped plan (``PlanningObjective::lowerCost`` replaces the best only at a
  strictly lower cost);
* ``expandDims`` (``getExpandDimsCandidates``): the field dimensions whose expansion
  changes the convolution (``expandingDimChangesParams``); a dimension with a one-wide
  kernel and no padding, truncation, dilation, flip or stride is unchanged by
  ``expandDim``, so it is no candidate; the tile-level expansion is off by default
  (``enableTileLevelExpandDims``);
* ``outChanFlattenDims`` (``getOutChanFlattenDimsCandidates``): the dimensions whose
  input is no larger than the kernel; for the unswapped form of a one-wide kernel over a
  larger field none, for the swapped form (field and kernel exchanged) every dimension,
  so its candidates are the subsets of them, flattened into the output channels;
* ``flattenDims`` (``calculateFlattenedParams``): the batch and every field dimension
  ``dimCanBeFlattened`` accepts (a one-wide transformed kernel, nothing else
  transformed) are flattened into the innermost such dimension;
* ``combineConvGroups`` (``getCombineConvGroupCandidates``): only with more than one
  conv group and one or two input channels.

So a convolution of ``G`` groups, batch ``B``, ``Ci`` input and ``Co`` output channels
whose every field dimension flattens (:func:`flattenable`) is, unswapped, the product
``(G, B * prod(F), Ci, Co)`` (:func:`flat_product`) with a flattened field, and,
swapped with every field dimension flattened into the output channels, that product's
swapped form: the convolutions :mod:`.poplibs_matmul_model` costs, here with the
rearrangements of pass ``NONE`` (``addTransformCycleEstimate``: the operands and output
rearranged when swapped, ``swapOperands != isMatmulOrFullyConnectedLayer``; the output
regrouped when its partials are not grouped by 16, and in ``TRAINING_FWD`` the weights
too, ``regroupWeights``). The swapped forms that flatten
fewer dimensions into the output channels keep a kernel as wide as the field in the
others, and :func:`swapped_partial_floor` bounds them from below: the AMP estimate
(``getConvPartialnx1InnerLoopCycleEstimate``, ``getConvPartial1x1InnerLoopCycleEstimate``)
assumes every kernel position of a tile contributes to every output position of it ("the
worklist for each kernel position is assumed to be the same") at no fewer than 4 cycles an
output position (HALF, ``getConvPartialnx1WorkerCycles``: ``34 + 4 (n - 3)`` less the
retention savings of 9, 3 more an entry; the 1x1 worker ``38 + 4 (n - 3) - 7``) for a
conv unit's 16 input channels and at most 16 output channels, whatever the split of the
kernel, field and channels over the tiles.

The MAC vertices and SLIC are bounded from below (:func:`mac_vertex_floor`,
:func:`slic_floor`), whatever the transforms, by ``constructModel``'s redundant inequality
``totalMacs / maxMACsPerCyclePerTile <= usedTiles * partialCalcCycles * serialSplits``
(``ConvModel.cpp``), with the multiply-accumulates of the convolution that read real
elements (``getNumberOfMACs``; a transform only adds products of padding) and
``getMaxMACsPerCyclePerTile``: the vector width (4 HALF) for the horizontal and vertical
MAC and the outer product, and for SLIC ``min(vector width, inChansPerGroup) *
windowWidth * 2`` = 32 for HALF inputs grouped by 4 in the 1x4 window (its other
groupings, 2 channels of 2 groups and 1 of 4, give 16 and 8). SLIC is bounded further by
its partial sums' exchange, a separate term of the same total: ``addSLICConstraints``
leaves a tile one input-channel grain (at most 4 channels), so a tile's partial sums, all
exchanged in FLOAT at the target's exchange bytes a cycle
(``addExchangeCycleEstimates``' ``reduceFirstStageExchangeCycles``,
``ExchangeEstimator::getCycles``), number at least ``G B F Co ceil(Ci / 4) / T``.
Derived from the source, not a port.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.poplibs_matmul_model import CONV_PASSES, poplibs_matmul_plan
from poplar_api.poplin.poplibs_release import DEFAULT_RELEASE
from poplar_api.types import FLOAT, HALF

__all__ = [
    "flat_params",
    "flat_product",
    "flattenable",
    "mac_vertex_floor",
    "poplibs_conv_plan",
    "slic_floor",
    "swapped_partial_floor",
]

#: Input channels an AMP conv unit takes at once for HALF inputs and the most output
#: channels it computes at once (``getWeightsPerConvUnit``; 16 conv units), the bound's
#: grains.
_AMP_IN, _AMP_OUT = 16, 16
#: The least cycles of an output position at a kernel position for those channels (HALF:
#: the AMP's core loop of 4 cycles; the MAC vertices' vector width of 4).
_CYCLES_A_POSITION = 4
#: SLIC's largest input (and partial) channel grouping for HALF inputs with FLOAT partials
#: and its window width (``getConvVertexSLICCandidates``: 4 channels of 1 group, 2 of 2,
#: 1 of 4; ``windowWidth`` 4).
_SLIC_CHANS, _SLIC_WINDOW = 4, 4
#: ``ExchangeEstimator``'s scaling of the exchange bytes per cycle.
_EXCHANGE_SCALE = 16


def flattenable(params: ConvParams) -> bool:
    """Whether every field dimension of ``params`` passes ``dimCanBeFlattened``
    (``ConvModel.cpp``): a one-wide transformed kernel, no truncation, dilation, padding
    or flip of the input, and no truncation, stride or padding of the output; here also
    a kernel of one position before its transform (Poplibs also flattens a wider kernel
    truncated to one position, which this model does not cover)."""
    it, ot = params.inputTransform, params.outputTransform
    for d in range(params.getNumFieldDims()):
        if params.getTransformedKernelSize(d) != 1 or params.kernelShape[d] != 1:
            return False
        if any(v[d] for v in (it.truncationLower, it.truncationUpper, it.paddingLower,
                              it.paddingUpper, ot.truncationLower, ot.truncationUpper,
                              ot.paddingLower, ot.paddingUpper)):  # fmt: skip
            return False
        if it.dilation[d] != 1 or it.flip[d] or ot.stride[d] != 1:
            return False
    return True


def flat_params(params: ConvParams) -> ConvParams:
    """The convolution ``calculateFlattenedParams`` makes of a :func:`flattenable`
    ``params``: batch 1, every field dimension 1 but the innermost, which holds the
    batch times the field's positions (the batch outermost), a one-wide kernel."""
    n = params.getNumFieldDims()
    positions = params.batchSize * int(np.prod(params.inputFieldShape))
    return ConvParams(
        params.inputType,
        1,
        [1] * (n - 1) + [positions],
        [1] * n,
        params.inputChannelsPerConvGroup,
        params.outputChannelsPerConvGroup,
        params.numConvGroups,
        outputType=params.outputType,
    )


def flat_product(params: ConvParams) -> tuple[int, int, int, int]:
    """``(G, B prod(F), Ci, Co)``: the product a :func:`flattenable` convolution is."""
    return (
        params.numConvGroups,
        params.batchSize * int(np.prod(params.inputFieldShape)),
        params.inputChannelsPerConvGroup,
        params.outputChannelsPerConvGroup,
    )


def swapped_partial_floor(params: ConvParams, target: Any) -> int:
    """The least partial-sum cycles of any swapped form of a :func:`flattenable`
    ``params`` that flattens a proper subset of its field dimensions into the output
    channels (module docstring): swapped, each field dimension ``d`` of ``n`` positions
    becomes a kernel of ``n`` positions over an output of ``n`` (a one-wide input padded
    by ``n - 1`` each side); flattened into the output channels, it multiplies them by
    ``n`` instead; the batch becomes the field. The AMP estimate then costs, over the
    tiles, at least ``4`` cycles for every output position, kernel position, 16 input
    channels and 16 output channels: their product over the ``T`` tiles, minimised over
    the subsets."""
    tiles = target.getNumTiles()
    g, b = params.numConvGroups, params.batchSize
    ci, co = params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup
    field = [int(x) for x in params.inputFieldShape]
    n = len(field)
    best: int | None = None
    for k in range(n):  # subsets of fewer than every dimension
        for flat in itertools.combinations(range(n), k):
            kept = [field[d] for d in range(n) if d not in flat]
            positions = co * int(np.prod(kept))  # output positions (the batch is co)
            kernel = int(np.prod(kept))
            outs = b * int(np.prod([field[d] for d in flat]))  # output channels
            work = g * positions * kernel * ci * outs * _CYCLES_A_POSITION
            cycles = work // (_AMP_IN * _AMP_OUT * tiles)
            best = cycles if best is None else min(best, cycles)
    assert best is not None
    return best


def mac_vertex_floor(params: ConvParams, target: Any) -> int:
    """The least cycles of any horizontal-MAC, vertical-MAC or outer-product plan of a
    HALF ``params`` (module docstring): its real multiply-accumulates
    (``getNumberOfMACs``) over the target's HALF vector width a cycle
    (``getMaxMACsPerCyclePerTile``) and its ``T`` tiles, rounded down."""
    width = target.getVectorWidth(HALF)
    return params.getNumberOfMACs() // (width * target.getNumTiles())


def slic_floor(params: ConvParams, target: Any) -> int:
    """The least cycles of any SLIC plan of a HALF ``params`` with FLOAT partials
    (module docstring): the multiply-accumulates at SLIC's ``getMaxMACsPerCyclePerTile``
    (``min(vector width, 4) * 4 * 2`` = 32 a cycle for HALF) over the ``T`` tiles, rounded
    down, plus the exchange of a tile's partial sums, at least ``ceil(G B F Co ceil(Ci /
    4) / T)`` FLOAT elements (one input-channel grain of at most 4 a tile,
    ``addSLICConstraints``) at ``ExchangeEstimator::getCycles``' rate."""
    tiles = target.getNumTiles()
    width = target.getVectorWidth(HALF)
    macs_a_cycle = min(width, _SLIC_CHANS) * _SLIC_WINDOW * 2
    partial_calc = params.getNumberOfMACs() // macs_a_cycle // tiles
    outputs = params.numConvGroups * params.batchSize * int(np.prod(params.getOutputFieldShape()))
    grains = -(-params.inputChannelsPerConvGroup // _SLIC_CHANS)
    partials = -(-outputs * params.outputChannelsPerConvGroup * grains // tiles)
    rate = max(1, round(target.getExchangeBytesPerCycle() * _EXCHANGE_SCALE))
    exchange = -(-partials * FLOAT.size * _EXCHANGE_SCALE // rate)
    return partial_calc + exchange


def poplibs_conv_plan(
    params: ConvParams,
    target: Any,
    proportion: float = 0.6,
    release: str = DEFAULT_RELEASE,
    conv_pass: str = "NONE",
) -> dict[str, Any]:
    """Poplibs' plan of a HALF convolution of pass ``conv_pass`` (``NONE``,
    ``INFERENCE_FWD``, ``TRAINING_BWD``: the same rearrangements; ``TRAINING_FWD``: the
    weights also regrouped when the partials are not grouped by 16, ``regroupWeights``)
    with FLOAT partials whose field flattens (:func:`flattenable`), with more than 16
    input channels and default options, on one IPU:
    :func:`~.poplibs_matmul_model.poplibs_matmul_plan` of its :func:`flat_product` with
    that pass's rearrangements, the unswapped form first.

    Returns that plan (``swapped``: the form with every field dimension flattened into
    the output channels) with ``mac_floor`` (the MAC vertices' bound,
    :func:`mac_vertex_floor`), ``slic_floor`` (:func:`slic_floor`), ``swapped_floor``
    (:func:`swapped_partial_floor`) and ``established``: whether the three bounds pass
    the plan's cycles, so that no candidate left out can be cheaper (planning
    as ``7eac0f26`` only: the bounds are of that release's estimates; ``f927358``'s AMP
    worker estimates were not compared).

    Raises
    ------
    ValueError
        When ``params`` is not of that kind, naming what differs.
    """
    why = []
    if conv_pass not in CONV_PASSES:
        why.append(f"pass {conv_pass} (one of {CONV_PASSES} needed)")
    if params.inputType != HALF or params.outputType != HALF:
        why.append(f"types {params.inputType.name}/{params.outputType.name} (HALF/HALF needed)")
    if not flattenable(params):
        why.append("a field dimension that does not flatten (a kernel or transform)")
    if params.inputChannelsPerConvGroup <= 16:
        why.append(f"{params.inputChannelsPerConvGroup} input channels (more than 16 needed)")
    if target.getNumTiles() != target.getTilesPerIPU():
        why.append(f"{target.getNumTiles() // target.getTilesPerIPU()} IPUs (1 needed)")
    if why:
        raise ValueError(
            f"poplibs_conv_plan: {params} is not covered: " + "; ".join(why) + " (hint: the "
            "model restates a HALF convolution whose field flattens into a product)"
        )
    dims = flat_product(params)
    plan = poplibs_matmul_plan(dims, target, conv_pass, proportion, swaps=(False, True),
                               release=release)  # fmt: skip
    plan["mac_floor"] = mac_vertex_floor(params, target)
    plan["slic_floor"] = slic_floor(params, target)
    plan["swapped_floor"] = swapped_partial_floor(params, target)
    cycles = plan["cost"][0]
    # (the bounds restate 7eac0f26's estimates; f927358's were not compared)
    plan["established"] = release == "7eac0f26" and all(
        plan[key] > cycles for key in ("mac_floor", "slic_floor", "swapped_floor")
    )
    return plan
