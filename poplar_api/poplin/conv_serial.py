"""Serial splits of a convolution: ``S`` passes over ``Co / S`` output channels, or over
``Ci / S`` input channels, each.

When no plan of a convolution fits ``availableMemoryProportion`` of a tile, Poplibs'
planner may split the convolution serially (``outChanSplit.serial`` or
``inChanSplit.serial`` in ``lib/poplin/ConvModel.cpp`` at graphcore/poplibs
``7eac0f26``): the convolution runs in a loop of ``S`` iterations, each the same
parallel plan over ``1 / S`` of the channels, so a tile holds one iteration's operands
and partials at a time. ipusim builds the loop as Poplibs' ``Convolution.cpp`` does:
a ``Repeat`` of one body, lowered once, whose iteration is picked by a loop counter (an
``UNSIGNED_INT`` on tile 0, zeroed before the loop and incremented at the end of the
body). The body slices the iteration's weights (and, over input channels, its inputs)
at the counter with ``popops.dynamicSlice`` (``weightsSerialSlice``,
``inputSerialSlice``: each iteration's slice lies on the tiles of the first, so the
copies stay on their tiles), convolves them (exchange, partial sums, reduction), and

* over output channels, writes the outputs into the whole output at the counter
  (``popops.dynamicUpdate`` of a tensor made by ``createSliceableTensorFromSlice``,
  ``serialOut``: each element's iterations on its tile);
* over input channels, copies the partials (in the partials type: an iteration casts
  nothing) into an accumulator when the counter is 0 and adds them to it in place
  otherwise (``serialInChanAccum``, an ``If`` on the counter); the sum is cast to the
  output type once, after the loop.

The planner's estimates of these steps are :mod:`.serial_estimates`.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from poplar_api.graph import Graph
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.serial_estimates import split_params
from poplar_api.popops.dynamic_slice import (
    createSliceableTensorFromSlice,
    dynamicSlice,
    dynamicUpdate,
)
from poplar_api.poputil import cloneTensor
from poplar_api.program import Copy, If, Repeat
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor
from poplar_api.types import UNSIGNED_INT

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


@contextlib.contextmanager
def _iteration_plan(
    graph: Graph, params: ConvParams, opts: Mapping[str, Any], plan: ConvPlan
) -> Iterator[None]:
    """``plan`` (one iteration's) as the plan of ``params`` in the graph's plan cache while
    the loop's body is lowered, and the cache as it was afterwards: a convolution of the
    iteration's parameters built elsewhere in the graph is planned on its own (the
    iteration's plan is not its cheapest, and carries the whole loop's cost)."""
    cache = graph.libraryCache(PLAN_CACHE)
    key = plan_cache_key(graph.getTarget(), params, opts)
    missing = object()
    before = cache.get(key, missing)
    cache[key] = plan
    try:
        yield
    finally:
        if before is missing:
            cache.pop(key, None)
        else:
            cache[key] = before


def _loop_counter(graph: Graph, prog: ProgramSequence, name: str) -> Tensor:
    """Poplibs' ``loopCounter``: an ``UNSIGNED_INT`` on tile 0, zeroed before the loop."""
    counter = graph.addVariable(UNSIGNED_INT, [1], f"{name}/loopCounter")
    graph.setTileMapping(counter, 0)
    zero = graph.addConstant(UNSIGNED_INT, [1], 0, f"{name}/zero")
    graph.setTileMapping(zero, 0)
    prog.add(Copy(zero, counter, debugContext=f"{name}/loopCounter"))
    return counter


def _by_iteration(t: Tensor, dim: int, serial: int) -> Tensor:
    """``t`` with dimension ``dim`` cut into ``serial`` equal slices, the slice index first."""
    shape = t.shape()
    per = shape[dim] // serial
    return t.reshape([*shape[:dim], serial, per, *shape[dim + 1 :]]).dimRoll(dim, 0)


def _sliced(
    graph: Graph,
    t: Tensor,
    dim: int,
    serial: int,
    counter: Tensor,
    prog: ProgramSequence,
    name: str,
) -> Tensor:
    """The iteration ``counter`` of ``t`` cut ``serial`` ways along ``dim``: a
    ``popops.dynamicSlice`` into a tensor laid out as the first slice (Poplibs'
    ``dynamicSliceWithOutput`` of ``weightsSerialSlice`` / ``inputSerialSlice``)."""
    out = dynamicSlice(graph, _by_iteration(t, dim, serial), counter, [0], [1], prog, name)
    return out.squeeze([0])


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
    """Lower ``plan`` (``serial > 1``) as Poplibs' loop; return ``[G, B, Co, *O]``.

    ``ker`` is the canonical ``[G, Co, Ci, *K]`` view; ``lower(ker_slice, params, prog,
    name)`` lowers one iteration, whose plan (the one-pass plan the serial plan was made
    of) is in the graph's plan cache while it does. As ``Convolution.cpp`` at 7eac0f26: a
    ``Repeat`` of ``serial`` iterations of one body, which slices the iteration's weights
    at the loop counter (``popops.dynamicSlice``), convolves them, writes the outputs
    into the output at the counter (``popops.dynamicUpdate`` of a tensor made by
    ``createSliceableTensorFromSlice``, ``serialOut``) and increments the counter.
    """
    from poplar_api import popops

    sub = iteration_params(params, plan)
    n = plan.serial
    counter = _loop_counter(graph, prog, name)
    body = ProgramSequence()
    w = _sliced(graph, ker, 1, n, counter, body, f"{name}/weightsSerialSlice")
    with _iteration_plan(graph, sub, opts, dataclasses.replace(plan, serial=1)):
        out = lower(w, sub, body, f"{name}/serial").expand([0])
    serial_out = createSliceableTensorFromSlice(graph, out, [0], [n], f"{name}/serialOut")
    dynamicUpdate(graph, serial_out, out, counter, [0], [1], body, f"{name}/serialUpdate")
    popops.addInPlace(graph, counter, 1, body, f"{name}/loopIncrement")
    prog.add(Repeat(n, body, f"{name}/serialLoop"))
    shape = serial_out.shape()  # [S, G, B, Co / S, *O] -> [G, B, Co, *O]
    rolled = serial_out.dimRoll(0, 2)
    return rolled.reshape([shape[1], shape[2], shape[0] * shape[3], *shape[4:]])


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
    """Lower ``plan`` (``in_serial > 1``) as Poplibs' loop; return ``[G, B, Co, *O]``.

    ``act`` ``[G, B, Ci, *F]`` and ``ker`` ``[G, Co, Ci, *K]`` are the canonical views;
    ``lower(act_slice, ker_slice, params, prog, name)`` lowers one iteration (its plan,
    the one-pass plan the serial plan was made of, in the graph's plan cache while it
    does) into partials. The loop's body slices the iteration's inputs and weights at the
    loop counter, convolves them, copies the partials into the accumulator when the
    counter is 0 and adds them to it otherwise (``If``), and increments the counter;
    after the loop the sum is cast to the output type.
    """
    from poplar_api import popops

    sub = iteration_params(params, plan)
    n = plan.in_serial
    counter = _loop_counter(graph, prog, name)
    body = ProgramSequence()
    a = _sliced(graph, act, 2, n, counter, body, f"{name}/inputSerialSlice")
    w = _sliced(graph, ker, 2, n, counter, body, f"{name}/weightsSerialSlice")
    with _iteration_plan(graph, sub, opts, dataclasses.replace(plan, in_serial=1)):
        out = lower(a, w, sub, body, f"{name}/serial")
    acc = cloneTensor(graph, out, f"{name}/serialOut")
    first = ProgramSequence([Copy(out, acc, debugContext=f"{name}/serialInChanAccum")])
    later = ProgramSequence()
    popops.addInPlace(graph, acc, out, later, f"{name}/serialInChanAccum")
    body.add(If(counter.reshape([]), later, first))
    popops.addInPlace(graph, counter, 1, body, f"{name}/loopIncrement")
    prog.add(Repeat(n, body, f"{name}/serialLoop"))
    if params.outputType != sub.outputType:
        acc = popops.cast(graph, acc, params.outputType, prog, f"{name}/cast")
    return acc
