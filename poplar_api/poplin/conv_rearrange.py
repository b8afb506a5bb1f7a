"""When Poplibs rearranges a convolution's operands before the exchange.

Before a convolution's exchange, Poplibs may copy an operand into a new tensor laid out
as the plan wants (``createInputImpl`` / ``createWeightsImpl``) and exchange from that
copy (graphcore/poplibs at ``7eac0f26``, ``lib/poplin/Convolution.cpp``, the system
level of ``createConvPartialsAndReduce``'s transform step, then
``convolutionPreprocess``). It does so for an operand when

* the pass is a weight update (``TRAINING_WU`` / ``FC_TRAINING_WU``:
  ``inputRearrangementIsExpensive`` / ``weightRearrangementIsExpensive``), since the
  update changes the operands' innermost dimension;
* the operand is broadcast to more than 7 tiles (``inViewMaxBroadcastDests`` /
  ``weightViewMaxBroadcastDests``): the activations to ``kernelSplit * outChanSplit``
  tiles, the weights to ``batchSplit * fieldSplit`` tiles. The copy trades cycles for
  less exchange code on every receiving tile;
* the plan expands dimensions or flattens output channels (``expandDims`` /
  ``outChanFlattenDims``);
* the plan's input-channel grain is above 1 and the operand's innermost dimension
  (its input channels) has no grouping (``detectInnermostGrouping`` returns 1), as the
  transposed weights of a fully-connected input-gradient pass.

The copy is a ``Copy`` program before the convolution's compute set, into a tensor
laid out as ``createInput`` / ``createWeights`` lay it out
(:mod:`.conv_layout`): where the operand already lies as the plan wants it is a copy
on each tile, otherwise an exchange too. ``matMul`` and every pass of
``poplin.convolution`` (forward, backward-data, weight update) apply these rules; an
expanded plan copies its expanded input, gathering the zeros of its padding from one
constant on tile 0.
Not modelled: ``regroupIfBeneficialForPlan``'s transpose compute set before the copy
(when both groupings are multiples of the minimum regroup grain).
"""

from __future__ import annotations

import numpy as np

from poplar_api.graph import Graph
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.popops.rearrange import detectInnermostGrouping
from poplar_api.tensor import Tensor

#: ``inViewMaxBroadcastDests`` / ``weightViewMaxBroadcastDests`` (Convolution.cpp).
MAX_BROADCAST_DESTS = 7

#: Passes whose operands are always rearranged (``inputRearrangementIsExpensive``).
_WEIGHT_UPDATE_PASSES = ("TRAINING_WU", "FC_TRAINING_WU")

#: ``poputil::detectInnermostGrouping``, kept under this module's name.
detect_innermost_grouping = detectInnermostGrouping

__all__ = ["MAX_BROADCAST_DESTS", "detect_innermost_grouping", "operand_rearrangements"]


def operand_rearrangements(
    graph: Graph, plan: ConvPlan, conv_pass: str | None, acts: Tensor, weights: Tensor
) -> tuple[bool, bool]:
    """Whether Poplibs copies the activations and the weights before the exchange.

    Parameters
    ----------
    plan
        The convolution's plan (its ``parts`` are ``(G, B, *field, Co, Ci)``).
    conv_pass
        The convolution option ``pass`` (None for a plain convolution).
    acts, weights
        The operands as views with the input channels innermost: activations
        ``[G, B, *field, Ci]``, weights ``[G, Co, *kernel, Ci]``.

    Returns
    -------
    tuple of bool
        ``(rearrange activations, rearrange weights)``.
    """
    parts = plan.parts
    wu = conv_pass in _WEIGHT_UPDATE_PASSES
    transform = bool(plan.expanded)
    # a plan's kernel is never split over tiles here: activations go to the Co split
    in_dests = int(parts[-2])
    weight_dests = int(np.prod(parts[1:-2]))
    re_acts = wu or transform or in_dests > MAX_BROADCAST_DESTS
    re_weights = wu or transform or weight_dests > MAX_BROADCAST_DESTS
    if plan.in_chans_per_group > 1:
        re_acts = re_acts or detect_innermost_grouping(graph, acts) == 1
        re_weights = re_weights or detect_innermost_grouping(graph, weights) == 1
    return re_acts, re_weights
