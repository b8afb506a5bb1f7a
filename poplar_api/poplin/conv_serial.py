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

A split whose count does not divide the channel grains (Poplibs' planner allows any
count up to the grains, ``constructModel``) gives every iteration the grains shared out
and rounded up (``getOutChansPerSerialSplit``, ``getInChansPerSerialSplit``) and the last
one the rest: as Poplibs' ``convolutionImpl`` does, the loop runs the full iterations and
the last runs after it on the same slices, the rest of its channels copied into their
first channels (the padding of an input-channel split zeroed), with the same convolution
program; the operands' layouts put channel ``c`` where its iteration's slice reads it
(``c mod`` the iteration's channels). ipusim's own search splits only by divisors of the
channels; a plan taken from Poplibs' (:mod:`.poplibs_plans`) may pad.

Such a plan may also broadcast the inputs before an output-channel loop (Poplibs'
``broadcastInputBeforeLoop``): :func:`broadcast_inputs` copies each tile's inputs to it
once, before the loop, and every iteration's vertices read them there.

The planner's estimates of these steps are :mod:`.serial_estimates`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from poplar_api.graph import Graph
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.poplibs_release import poplibs_release
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
    "PLAN_CACHE", "broadcast_inputs", "co_ranges", "iteration_chans", "iteration_params",
    "lower_in_serial", "lower_serial", "plan_cache_key",
]  # fmt: skip

#: Name of the graph's library cache of convolution plans.
PLAN_CACHE = "poplin.conv.plans"


def iteration_chans(plan: ConvPlan, chans: int, kind: str) -> int:
    """The channels of one iteration of ``plan``'s serial split of the ``chans`` ``kind``
    ("in" or "out") channels (all of them when those are not split):
    ``plan.serial_chans`` when the last iteration is padded, else ``chans`` divided by
    the split."""
    serial = plan.in_serial if kind == "in" else plan.serial
    if serial == 1:
        return int(chans)
    return int(plan.serial_chans) or int(chans) // serial


def iteration_params(params: ConvParams, plan: ConvPlan) -> ConvParams:
    """The convolution of one iteration of ``plan``: ``Co / serial`` output channels, or
    ``Ci / in_serial`` input channels with partials out (the partials type); a padded
    split's iterations have :func:`iteration_chans` channels."""
    if plan.in_serial > 1:
        per = iteration_chans(plan, params.inputChannelsPerConvGroup, "in")
        return split_params(params, "in", plan.in_serial, plan.partials_type, per)
    per = iteration_chans(plan, params.outputChannelsPerConvGroup, "out")
    return split_params(params, "out", plan.serial, chans=per)


def co_ranges(plan: ConvPlan, co: int) -> list[tuple[int, int, int]]:
    """``(parallel part, begin, end)`` of every output-channel block over all iterations
    (a padded split's last iteration has the blocks its channels reach)."""
    per = iteration_chans(plan, co, "out")
    out = []
    for s in range(plan.serial):
        for i, (lo, hi) in enumerate(plan.ranges(len(plan.parts) - 2, per)):
            if s * per + lo < co:
                out.append((i, s * per + lo, min(s * per + hi, co)))
    return out


def _padded(chans: int, per: int, serial: int, what: str) -> tuple[int, int]:
    """``(iterations in the loop, channels of the last iteration)`` of ``serial``
    iterations of ``per`` of ``chans`` channels: all of them, or all but the last when
    it is padded (Poplibs runs that one after the loop, ``convolutionImpl``)."""
    rest = chans - (serial - 1) * per
    if not 0 < rest <= per:
        raise ValueError(
            f"{what}: {serial} serial iterations of {per} channels do not cover {chans} "
            f"channels with a last iteration of 1 to {per}"
        )
    return (serial, rest) if rest == per else (serial - 1, rest)


def plan_cache_key(target: Any, params: ConvParams, opts: Mapping[str, Any]) -> tuple:
    """The key of ``params``' plan in the graph's plan cache (:data:`PLAN_CACHE`): the
    tiles, the Poplibs release planned as, the convolution and its options."""
    options = tuple(sorted((k, str(v)) for k, v in opts.items()))
    return (target.getNumTiles(), poplibs_release(target), params.key(), options)


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

    When the last iteration is padded (``plan.serial_chans``), the loop runs the others
    and the last runs after it, as ``convolutionImpl`` does: its weights are copied into
    the first channels of the slice (``weightsSerialLastSlice``; the rest keep the
    previous iteration's, whose outputs are dropped), the same convolution program runs
    again, and its first channels are copied into the output (``serialUpdateLastSlice``),
    a clone of the padded ``serialOut`` trimmed to the channels.
    """
    from poplar_api import popops

    sub = iteration_params(params, plan)
    n = plan.serial
    co, per = params.outputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
    looped, rest = _padded(co, per, n, name)
    counter = _loop_counter(graph, prog, name)
    body = ProgramSequence()
    head = ker if looped == n else ker.slice(0, looped * per, 1)
    w = _sliced(graph, head, 1, looped, counter, body, f"{name}/weightsSerialSlice")
    conv = body if looped == n else ProgramSequence()
    one = dataclasses.replace(plan, serial=1, serial_chans=0, broadcast=False)
    with _iteration_plan(graph, sub, opts, one):
        out = lower(w, sub, conv, f"{name}/serial").expand([0])
    if conv is not body:
        body.add(conv)
    serial_out = createSliceableTensorFromSlice(graph, out, [0], [n], f"{name}/serialOut")
    shape = serial_out.shape()  # [S, G, B, Co / S, *O] -> [G, B, Co, *O]
    whole = serial_out.dimRoll(0, 2).reshape([shape[1], shape[2], n * per, *shape[4:]])
    if looped < n:  # trimmed to the channels, one contiguous tensor per tile
        whole = cloneTensor(graph, whole.slice(0, co, 2), f"{name}/serialOut")
    looped_out = serial_out
    if looped < n:  # [S - 1, G, B, Co / S, *O] of the trimmed clone
        looped_out = whole.slice(0, looped * per, 2)
        looped_out = looped_out.reshape([shape[1], shape[2], looped, per, *shape[4:]])
        looped_out = looped_out.dimRoll(2, 0)
    dynamicUpdate(graph, looped_out, out, counter, [0], [1], body, f"{name}/serialUpdate")
    popops.addInPlace(graph, counter, 1, body, f"{name}/loopIncrement")
    prog.add(Repeat(looped, body, f"{name}/serialLoop"))
    if looped < n:
        rest_w = ker.slice(looped * per, co, 1)
        last_w = Copy(rest_w, w.slice(0, rest, 1), debugContext=f"{name}/weightsSerialLastSlice")
        last_out = Copy(out[0].slice(0, rest, 2), whole.slice(looped * per, co, 2),
                        debugContext=f"{name}/serialUpdateLastSlice")  # fmt: skip
        prog.add(ProgramSequence([last_w, conv, last_out]))
    return whole


def broadcast_inputs(
    graph: Graph, act: Tensor, params: ConvParams, plan: ConvPlan, prog: ProgramSequence, name: str
) -> Tensor:
    """The inputs of a serial loop broadcast before it (Poplibs' ``broadcastInputBeforeLoop``):
    ``[Pco, G, B, Ci, *F]``, copy ``p`` the inputs ``act`` ``[G, B, Ci, *F]`` with each
    block's elements on the tile of that block's output-channel part ``p``.

    As ``convolutionImpl`` (graphcore/poplibs 7eac0f26, ``lib/poplin/Convolution.cpp``)
    makes it at the tile level (``tileLevelActsRearranged``, a tensor of the tile's input
    slice per tile, filled by ``tileLevelActsCopy``, which ``ConvProgramTree::lower`` moves
    before the loop when the plan broadcasts): one copy, added to ``prog`` before the loop,
    exchanges each tile's inputs once, and every iteration's vertices read them where
    they lie. ``params`` is one iteration's convolution, ``plan`` one pass's split; the
    blocks of a 1x1 kernel without padding, stride or dilation (a matMul's) read disjoint
    inputs, so a copy per output-channel part holds every tile's."""
    nd = params.getNumFieldDims()
    if (
        any(int(k) != 1 for k in params.kernelShape)
        or params.getOutputFieldShape() != [int(f) for f in params.inputFieldShape]
        or plan.expanded
    ):
        raise ValueError(
            f"{name}: inputs broadcast before a serial loop need a 1x1 convolution whose "
            f"output field is its input field (a matMul's); got kernel "
            f"{list(params.kernelShape)}, field {list(params.inputFieldShape)} -> "
            f"{params.getOutputFieldShape()}"
        )
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    field = [int(x) for x in params.inputFieldShape]
    icg = math.gcd(ci, max(plan.in_chans_per_group, 1)) or 1
    pco = plan.parts[-2]
    # memory order [Pco][G][Ci / icg][B][*F][icg] (createInputImpl's per tile), each
    # element on the tile of its block in copy p's output-channel part
    parts = [np.minimum(np.arange(n) // blk, p - 1) for n, blk, p in
             zip([g, b, *field], plan.blocks, plan.parts, strict=False)]  # fmt: skip
    ci_part = np.minimum(np.arange(ci) // plan.blocks[-1], plan.parts[-1] - 1)
    tiles = np.moveaxis(plan.tiles.astype(np.int32), -2, 0)  # [Pco, G, B, *F, Ci] parts
    grid = np.ix_(np.arange(pco), parts[0], parts[1], *parts[2:], ci_part)
    at = tiles[grid]  # [Pco, G, B, *F, Ci]
    at = at.reshape(pco, g, b, *field, ci // icg, icg)
    mem = np.moveaxis(at, 3 + nd, 2)  # [Pco, G, Ci / icg, B, *F, icg] (a strided view)
    var = graph.addVariable(params.inputType, list(mem.shape), f"{name}/tileLevelActsRearranged")
    graph.mapElements(var, mem)
    # -> [Pco, G, B, Ci / icg, icg, *F] -> [Pco, G, B, Ci, *F]
    view = var.dimShuffle([0, 1, 3, 2, 4 + nd, *range(4, 4 + nd)])
    view = view.reshape([pco, g, b, ci, *field])
    src = act.expand([0]).broadcast(pco, 0)
    prog.add(Copy(src, view, debugContext=f"{name}/tileLevelActsCopy"))
    return view


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

    When the last iteration is padded (``plan.serial_chans``), the loop runs the others
    and the last runs after it, as ``convolutionImpl`` does: its inputs and weights are
    copied into the first channels of the slices (``inputSerialLastSlice``,
    ``weightsSerialLastSlice``), the rest of the smaller of the two slices is zeroed so
    that the padding adds nothing, the same convolution program runs again, and its
    partials are added to the accumulator.
    """
    from poplar_api import popops

    sub = iteration_params(params, plan)
    n = plan.in_serial
    ci, per = params.inputChannelsPerConvGroup, sub.inputChannelsPerConvGroup
    looped, rest = _padded(ci, per, n, name)
    counter = _loop_counter(graph, prog, name)
    body = ProgramSequence()
    a_head = act if looped == n else act.slice(0, looped * per, 2)
    w_head = ker if looped == n else ker.slice(0, looped * per, 2)
    a = _sliced(graph, a_head, 2, looped, counter, body, f"{name}/inputSerialSlice")
    w = _sliced(graph, w_head, 2, looped, counter, body, f"{name}/weightsSerialSlice")
    conv = body if looped == n else ProgramSequence()
    plan1 = dataclasses.replace(plan, in_serial=1, serial_chans=0)
    with _iteration_plan(graph, sub, opts, plan1):
        out = lower(a, w, sub, conv, f"{name}/serial")
    if conv is not body:
        body.add(conv)
    acc = cloneTensor(graph, out, f"{name}/serialOut")
    first = ProgramSequence([Copy(out, acc, debugContext=f"{name}/serialInChanAccum")])
    later = ProgramSequence()
    popops.addInPlace(graph, acc, out, later, f"{name}/serialInChanAccum")
    body.add(If(counter.reshape([]), later, first))
    popops.addInPlace(graph, counter, 1, body, f"{name}/loopIncrement")
    prog.add(Repeat(looped, body, f"{name}/serialLoop"))
    if looped < n:
        last = ProgramSequence([
            Copy(act.slice(looped * per, ci, 2), a.slice(0, rest, 2),
                 debugContext=f"{name}/inputSerialLastSlice"),
            Copy(ker.slice(looped * per, ci, 2), w.slice(0, rest, 2),
                 debugContext=f"{name}/weightsSerialLastSlice"),
        ])  # fmt: skip
        a_pad, w_pad = a.slice(rest, per, 2), w.slice(rest, per, 2)
        if a_pad.numElements() < w_pad.numElements():
            popops.zero(graph, a_pad, last, f"{name}/inputSerialLastSlice")
        else:
            popops.zero(graph, w_pad, last, f"{name}/weightsSerialLastSlice")
        prog.add(ProgramSequence([last, conv, later]))
    if params.outputType != sub.outputType:
        acc = popops.cast(graph, acc, params.outputType, prog, f"{name}/cast")
    return acc
