"""Serial splits of a convolution's output channels: ``S`` passes over ``Co / S``
channels each.

When no plan of a convolution fits ``availableMemoryProportion`` of a tile, Poplibs'
planner may split the output channels serially (``outChanSplit.serial`` in
``lib/poplin/ConvModel.cpp`` at graphcore/poplibs ``7eac0f26``): the convolution runs
in a loop of ``S`` iterations, each the same parallel plan over ``Co / S`` channels,
so a tile holds one iteration's weights and partials at a time. ipusim lowers the
iterations one after the other, each a convolution of its slice of the weights with
the whole input (its exchange, partial sums and reduction or cast); the outputs are
the slices of one tensor. Poplibs' per-iteration dynamic slice of the weights and
update of the output (copies on the tile) are not made: each iteration reads its
weights and writes its outputs where they lie.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from poplar_api.graph import Graph
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor, concat

__all__ = ["PLAN_CACHE", "co_ranges", "iteration_params", "lower_serial", "plan_cache_key"]

#: Name of the graph's library cache of convolution plans.
PLAN_CACHE = "poplin.conv.plans"


def iteration_params(params: ConvParams, plan: ConvPlan) -> ConvParams:
    """The convolution of one iteration of ``plan``: ``Co / serial`` output channels."""
    sub = copy.copy(params)
    co = params.outputChannelsPerConvGroup // plan.serial
    object.__setattr__(sub, "outputChannelsPerConvGroup", co)
    return sub


def co_ranges(plan: ConvPlan, co: int) -> list[tuple[int, int, int]]:
    """``(parallel part, begin, end)`` of every output-channel block over all iterations."""
    per = co // plan.serial
    out = []
    for s in range(plan.serial):
        for i, (lo, hi) in enumerate(plan.ranges(len(plan.parts) - 2, per)):
            out.append((i, s * per + lo, s * per + hi))
    return out


def plan_cache_key(target: Any, params: ConvParams, opts: Mapping[str, Any]) -> tuple:
    """The key of ``params``' plan in the graph's plan cache (:data:`PLAN_CACHE`)."""
    return (target.getNumTiles(), params.key(), tuple(sorted((k, str(v)) for k, v in opts.items())))


def lower_serial(
    graph: Graph,
    ker: Tensor,
    params: ConvParams,
    plan: ConvPlan,
    opts: Mapping[str, Any],
    prog: ProgramSequence,
    name: str,
    lower: Callable[[Tensor, ConvParams, ProgramSequence, str], Tensor],
) -> Tensor:
    """Lower ``plan`` (``serial > 1``) as its iterations; return ``[G, B, Co, *O]``.

    ``ker`` is the canonical ``[G, Co, Ci, *K]`` view; ``lower(ker_slice, params, prog,
    name)`` lowers one iteration, whose plan (the one-pass plan the serial plan was made
    of) is put in the graph's plan cache first.
    """
    sub = iteration_params(params, plan)
    key = plan_cache_key(graph.getTarget(), sub, opts)
    graph.libraryCache(PLAN_CACHE)[key] = dataclasses.replace(plan, serial=1)
    per = sub.outputChannelsPerConvGroup
    outs = [
        lower(ker[:, s * per : (s + 1) * per], sub, prog, f"{name}/serial{s}")
        for s in range(plan.serial)
    ]
    return concat(outs, 2)
