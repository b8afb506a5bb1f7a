"""Serial splits of a convolution: ``S`` passes over ``Co / S`` output channels, or over
``Ci / S`` input channels, each.

When no plan of a convolution fits ``availableMemoryProportion`` of a tile, Poplibs'
planner may split the output channels serially (``outChanSplit.serial`` in
``lib/poplin/ConvModel.cpp`` at graphcore/poplibs ``7eac0f26``): the convolution runs
in a loop of ``S`` iterations, each the same parallel plan over ``Co / S`` channels,
so a tile holds one iteration's weights and partials at a time. ipusim lowers the
iterations one after the other, each a convolution of its slice of the weights with
the whole input (its exchange, partial sums and reduction or cast); the outputs are
the slices of one tensor.

Split over the input channels (``inChanSplit.serial``), each iteration convolves its
slice of the input channels of the inputs and weights into partials of the partials type
(its reduction over a parallel input-channel split, if any, outputs that type), which
are added to the first iteration's partials in place (``popops.addInPlace``, on the
tiles where both lie: every iteration has the same plan) as Poplibs' loop does
(``Convolution.cpp``: the first iteration's partials are copied into a clone,
``serialInChanAccum``, later ones added to it with ``popops::addInPlace``); the sum is
cast to the output type once, after the loop (Poplibs' ``addInPlaceEstimate`` and
``addOutputCastEstimate`` in ``ConvModel.cpp``).

Poplibs' per-iteration dynamic slice of the weights (and inputs) and update of the
output (copies on the tile) are costed by the planner (:mod:`.serial_estimates`) but
not made: each iteration reads its operands and writes its outputs where they lie.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from poplar_api.graph import Graph
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.serial_estimates import split_params
from poplar_api.poputil import cloneTensor
from poplar_api.program import Copy
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor, concat

__all__ = [
    "PLAN_CACHE", "co_ranges", "iteration_params", "lower_in_serial", "lower_serial",
    "plan_cache_key",
]  # fmt: skip

#: Name of the graph's library cache of convolution plans.
PLAN_CACHE = "poplin.conv.plans"


def iteration_params(params: ConvParams, plan: ConvPlan) -> ConvParams:
    """The convolution of one iteration of ``plan``: ``Co / serial`` output channels, or
    ``Ci / in_serial`` input channels with partials out (the partials type)."""
    if plan.in_serial > 1:
        return split_params(params, "in", plan.in_serial, plan.partials_type)
    return split_params(params, "out", plan.serial)


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


def lower_in_serial(
    graph: Graph,
    act: Tensor,
    ker: Tensor,
    params: ConvParams,
    plan: ConvPlan,
    opts: Mapping[str, Any],
    prog: ProgramSequence,
    name: str,
    lower: Callable[[Tensor, Tensor, ConvParams, ProgramSequence, str], Tensor],
) -> Tensor:
    """Lower ``plan`` (``in_serial > 1``) as its iterations; return ``[G, B, Co, *O]``.

    ``act`` ``[G, B, Ci, *F]`` and ``ker`` ``[G, Co, Ci, *K]`` are the canonical views;
    ``lower(act_slice, ker_slice, params, prog, name)`` lowers one iteration (its plan,
    the one-pass plan the serial plan was made of, put in the graph's plan cache first)
    into partials, which are summed in place and cast to the output type at the end.
    """
    from poplar_api import popops

    sub = iteration_params(params, plan)
    key = plan_cache_key(graph.getTarget(), sub, opts)
    graph.libraryCache(PLAN_CACHE)[key] = dataclasses.replace(plan, in_serial=1)
    per = sub.inputChannelsPerConvGroup
    acc = None
    for s in range(plan.in_serial):
        lo, hi = s * per, (s + 1) * per
        out = lower(act[:, :, lo:hi], ker[:, :, lo:hi], sub, prog, f"{name}/serial{s}")
        if acc is None:
            acc = cloneTensor(graph, out, f"{name}/serialOut")
            prog.add(Copy(out, acc, debugContext=f"{name}/serial{s}/accumulate"))
        else:
            popops.addInPlace(graph, acc, out, prog, f"{name}/serial{s}/accumulate")
    assert acc is not None
    if params.outputType != sub.outputType:
        acc = popops.cast(graph, acc, params.outputType, prog, f"{name}/cast")
    return acc
