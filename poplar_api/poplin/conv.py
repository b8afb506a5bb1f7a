"""Convolutions on the tiles: ``convolution``, ``calculateWeightDeltas``,
``convolutionWeightUpdate``, biases and the ``create*`` layout helpers (Poplibs'
``poplin/Convolution.hpp`` names and argument order).

A convolution is planned (:mod:`poplar_api.poplin.conv_planner`) and lowered to one
compute set of partial-sum vertices (:mod:`poplar_api.poplin.conv_vertices`), one per
tile of the plan, each with the worklists of :mod:`poplar_api.poplin.conv_worklists`
and its Poplibs cycle estimate; when the input channels are split over tiles (or the
partials type differs from the output type) a second compute set of ``ReduceAdd``
vertices sums the partials into the output. The backward-data and weight-update
passes are convolutions of their own (:func:`~poplar_api.poplin.conv_params.getGradientParams`,
:func:`~poplar_api.poplin.conv_params.getWeightUpdateParams`), planned and lowered
the same way.

Internally activations are viewed as ``[G, B, C, *field]`` and the output is a
variable laid out ``[G, B, *outField, Co]`` (channels innermost, as Poplibs lays
convolution outputs out) returned as the ``[B, G * Co, *outField]`` view Poplar
returns.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.graph_bulk import bulk_construction
from poplar_api.poplin.conv_blocks import plan_partials
from poplar_api.poplin.conv_constrained_plan import constrained_plan
from poplar_api.poplin.conv_flatten import (
    flatten_dims,
    flatten_ids,
    flatten_tensor,
    flattened_params,
    layout_plan,
    unflatten_tensor,
)
from poplar_api.poplin.conv_ids import SeparableIds
from poplar_api.poplin.conv_kernel_split import (
    check_kernel_split,
    kernel_part_params,
    kernel_ranges,
    largest_kernel_part,
    part_plan,
)
from poplar_api.poplin.conv_layout import (
    GroupedView,
    grouped_input,
    grouped_output,
    grouped_partials,
    grouped_tiles,
    grouped_weights,
    partial_chans_per_group,
)
from poplar_api.poplin.conv_params import (
    ConvParams,
    expand_all_dims,
    expand_dims,
    expanded_input_index,
    expanded_input_repeats,
    expanded_weights_order,
    getGradientParams,
    getWeightUpdateParams,
)
from poplar_api.poplin.conv_planner import ConvPlan, parse_options, plan_convolution
from poplar_api.poplin.conv_rearrange import (
    input_layout,
    operand_rearrangements,
    pads_operand,
    rearranged,
    weights_layout,
)
from poplar_api.poplin.conv_reduce import reduce_partials
from poplar_api.poplin.conv_serial import (
    PLAN_CACHE,
    broadcast_inputs,
    iteration_params,
    lower_in_serial,
    lower_serial,
    plan_cache_key,
)
from poplar_api.poplin.conv_vertex_estimates import geometry_cache, largest_block_estimate
from poplar_api.poplin.plan_report import format_plan
from poplar_api.poplin.poplibs_conv2d_plans import adopted_conv2d_plan
from poplar_api.poplin.poplibs_conv_model import flat_params
from poplar_api.poplin.poplibs_conv_plans import adopted_conv_plan
from poplar_api.poplin.poplibs_float_plans import adopted_float_conv2d_plan
from poplar_api.poplin.poplibs_release import poplibs_release
from poplar_api.poplin.shared_plans import shared_plan
from poplar_api.program import Execute
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor
from poplar_api.types import Type

__all__ = [
    "addBias",
    "calculateWeightDeltas",
    "convolution",
    "convolutionBiasUpdate",
    "convolutionWeightUpdate",
    "createBiases",
    "createInput",
    "createWeights",
    "getBwdFlops",
    "getConvPlan",
    "getFwdFlops",
    "getWuFlops",
    "reportPlanInfo",
]


def getConvPlan(
    graph: Graph, params: ConvParams, options: Mapping[str, Any] | None = None
) -> ConvPlan:
    """The plan :func:`convolution` uses for ``params`` on ``graph`` (cached per graph,
    and for the process by :mod:`~poplar_api.poplin.shared_plans`)."""
    opts = parse_options(options, "getConvPlan")
    return _plan(graph, params, opts)


def _plan(graph: Graph, params: ConvParams, opts: dict[str, Any]) -> ConvPlan:
    """Poplibs' plan where :mod:`.poplibs_conv_plans` (of the flattened convolution),
    :mod:`.poplibs_conv2d_plans` (HALF) or :mod:`.poplibs_float_plans` (FLOAT)
    establishes and ipusim can run it, a kernel split when
    ``planConstraints`` asks for one, else the cheaper of ipusim's plans of ``params`` and
    of its expanded (im2col) form: the graph's, else the process's
    (:mod:`.shared_plans`), else searched for."""
    key = plan_cache_key(graph.getTarget(), params, opts)
    cache = graph.libraryCache(PLAN_CACHE)
    plan = cache.get(key)
    if plan is None:
        plan = cache[key] = shared_plan(graph, params, opts, lambda: _search(graph, params, opts))
    return plan


def _search(graph: Graph, params: ConvParams, opts: dict[str, Any]) -> ConvPlan:
    """The plan search of :func:`_plan`."""
    target = graph.getTarget()
    if "partition" in opts:  # (a whole plan given by planConstraints)
        return constrained_plan(params, opts, target)
    adopted = adopted_conv_plan(params, opts, target)
    if adopted is not None:
        return adopted
    split = int(opts.get("kernel_split", 1))
    if split > 1:  # (asked for: the kernel rows over tiles; no expanded form)
        check_kernel_split(params, split)
        sub = largest_kernel_part(params, split)
        estimate = largest_block_estimate(sub, target, geometry_cache(graph, sub))
        return plan_convolution(sub, target, opts, estimate, kernel_split=split)
    own = _own_search(graph, params, opts)
    adopted = adopted_conv2d_plan(params, opts, target, own)
    if adopted is None:
        adopted = adopted_float_conv2d_plan(params, opts, target, own)
    return own if adopted is None else adopted


def _own_search(graph: Graph, params: ConvParams, opts: dict[str, Any]) -> ConvPlan:
    """ipusim's own plan of ``params``: the cheaper of its plans of the convolution as
    given and of its expanded (im2col) form (of the field dimensions a plan constraint's
    ``expandDims`` names, else of all of them)."""
    target = graph.getTarget()
    expand = opts.get("expand")
    if opts.get("method") == "VMAC":
        expand = False  # the expanded form has many input channels: no VMAC
    plan = None
    if expand is not True or int(math.prod(params.kernelShape)) == 1:
        estimate = largest_block_estimate(params, target, geometry_cache(graph, params))
        plan = plan_convolution(params, target, opts, estimate)
    dims = _constrained_expansion(params, opts)
    if expand is not False and int(math.prod(params.kernelShape)) > 1:
        eff = expand_all_dims(params) if dims is None else expand_dims(params, dims)
        # a partial expansion is flattened as Poplibs' calculateFlattenedParams does
        flat = () if dims is None else opts.get("flatten_dims", flatten_dims(eff))
        eff = flattened_params(eff, flat)
        estimate = largest_block_estimate(eff, target, geometry_cache(graph, eff))
        alt = plan_convolution(eff, target, opts, estimate, in_serial=False)
        if plan is None or alt.cost["total"] < plan.cost["total"]:
            plan = dataclasses.replace(alt, expanded=True, expanded_dims=dims,
                                       flatten_dims=tuple(flat))  # fmt: skip
    assert plan is not None
    return plan


def _constrained_expansion(params: ConvParams, opts: dict[str, Any]) -> tuple[int, ...] | None:
    """The field dimensions a ``planConstraints`` ``expandDims`` names when they are
    some but not all of ``params``' (Poplibs' ``expandSpatialDim`` of each), else None
    (every dimension, or no constraint)."""
    dims = opts.get("expand_dims")
    if dims is None:
        return None
    nd = params.getNumFieldDims()
    if any(d >= nd for d in dims):
        raise GraphError(
            f"convolution: planConstraints transform.expandDims={list(dims)} names a field "
            f"dimension the {nd}-D convolution does not have; required dimensions in "
            f"0..{nd - 1}"
        )
    return None if len(dims) == nd else tuple(dims)


def _flat_act(act: Tensor, params: ConvParams) -> Tensor:
    """Canonical activations ``[G, B, C, *F]`` as the flattened convolution's ``[G, 1, C,
    1, ..., B prod(F)]`` (:func:`~.poplibs_conv_model.flat_params`; views, no copy)."""
    g, b, c = act.dim(0), act.dim(1), act.dim(2)
    nd = params.getNumFieldDims()
    positions = b * int(math.prod(act.shape()[3:]))
    by_chan = act.dimShuffle([0, 2, 1, *range(3, 3 + nd)])
    return by_chan.reshape([g, 1, c, *([1] * (nd - 1)), positions])


def _unflat_act(flat: Tensor, params: ConvParams, chans: int, field: list[int]) -> Tensor:
    """The inverse of :func:`_flat_act`: ``[G, 1, C, 1, ..., B prod(F)]`` as ``[G, B, C,
    *F]`` with ``chans`` channels and ``field`` positions."""
    nd = params.getNumFieldDims()
    by_chan = flat.reshape([flat.dim(0), chans, params.batchSize, *field])
    return by_chan.dimShuffle([0, 2, 1, *range(3, 3 + nd)])


def reportPlanInfo(
    out: Any, graph: Graph, params: ConvParams, options: Mapping[str, Any] | None = None
) -> None:
    """Write the plan of ``params`` to the text stream ``out`` (Poplibs' ``reportPlanInfo``:
    the estimated cost, then per level the partition and types; see :mod:`.plan_report`)."""
    plan = getConvPlan(graph, params, options)
    out.write(format_plan(params, plan, poplibs_release(graph.getTarget())))


# ------------------------------------------------------------------ checks
def _check_params(params: Any, what: str) -> ConvParams:
    if not isinstance(params, ConvParams):
        raise GraphError(
            f"{what}: params must be a poplin.ConvParams, got {type(params).__name__}; hint: "
            f"poplin.ConvParams(FLOAT, batch, [h, w], [kh, kw], inChans, outChans)"
        )
    return params


def _check_tensor(
    graph: Graph, t: Any, what: str, arg: str, shape: list[int], type_: Type
) -> Tensor:
    if not isinstance(t, Tensor):
        raise TensorError(f"{what}: {arg} must be a Tensor, got {type(t).__name__}")
    if not graph.owns(t):
        raise GraphError(f"{what}: {arg} '{t.name}' belongs to another graph")
    if t.shape() != list(shape):
        raise TensorError(
            f"{what}: {arg} '{t.name}' has shape {t.shape()}; the ConvParams require "
            f"{list(shape)}; hint: check batch size, channels (groups x channels per group) "
            f"and field shape"
        )
    if t.elementType() != type_:
        raise TypeMismatchError(
            f"{what}: {arg} '{t.name}' is {t.elementType().name}; the ConvParams say "
            f"{type_.name} (hint: cast it, or set the ConvParams type)"
        )
    return t


def _canonical_act(t: Tensor, groups: int, chans: int) -> Tensor:
    """``[B, G*C, *F]`` -> ``[G, B, C, *F]``."""
    shape = t.shape()
    r = t.reshape([shape[0], groups, chans, *shape[2:]])
    perm = [1, 0, 2, *range(3, len(shape) + 1)]
    return r.dimShuffle(perm)


def _public_act(t: Tensor) -> Tensor:
    """``[G, B, C, *F]`` -> ``[B, G*C, *F]``."""
    shape = t.shape()
    perm = [1, 0, 2, *range(3, len(shape))]
    s = t.dimShuffle(perm)
    return s.reshape([shape[1], shape[0] * shape[2], *shape[3:]])


def _seq(prog: Any, what: str) -> ProgramSequence:
    if not isinstance(prog, ProgramSequence):
        raise GraphError(f"{what}: prog must be a program.Sequence, got {type(prog).__name__}")
    return prog


# ------------------------------------------------------------------ layouts
def _ranges(plan: ConvPlan, params: ConvParams) -> list[list[tuple[int, int]]]:
    out_field = params.getOutputFieldShape()
    sizes = [params.numConvGroups, params.batchSize, *out_field,
             params.outputChannelsPerConvGroup, params.inputChannelsPerConvGroup]  # fmt: skip
    return [plan.ranges(d, s) for d, s in enumerate(sizes)]


def _map_by_array(graph: Graph, t: Tensor, tiles: np.ndarray) -> None:
    """Map each element of ``t`` (row-major) to ``tiles`` (local tile ids, same shape)."""
    graph.mapElements(t, np.asarray(tiles, np.int64).reshape(-1))


@bulk_construction
def createInput(
    graph: Graph, params: ConvParams, name: str = "", options: Mapping[str, Any] | None = None
) -> Tensor:
    """Activations ``[B, G*Ci, *field]`` laid out for ``params``' plan.

    Each input element goes to a tile whose block reads it, in the memory order of
    Poplibs' ``createInputImpl`` (see :func:`~poplar_api.poplin.conv_layout.grouped_input`).
    """
    params = _check_params(params, "createInput")
    opts = parse_options(options, "createInput")
    plan = _plan(graph, params, opts)
    if plan.flattened:  # laid out as the flattened convolution's input
        flat = flat_params(params)
        canonical = grouped_input(graph, flat, _plan(graph, flat, opts), name or "input")
        canonical = _unflat_act(canonical, params, params.inputChannelsPerConvGroup,
                                params.inputFieldShape)  # fmt: skip
        return _public_act(canonical)
    if plan.flatten_dims:  # (laid out as the unflattened form's blocks: it is copied)
        plan = layout_plan(plan, expand_dims(params, plan.expanded_dims), graph.getTarget())
    canonical = grouped_input(graph, params, plan, name or "input")  # [G, B, Ci, *F]
    return _public_act(canonical)


@bulk_construction
def createWeights(
    graph: Graph, params: ConvParams, name: str = "", options: Mapping[str, Any] | None = None
) -> Tensor:
    """Weights ``[G, Co, Ci, *kernel]``, each plan block spread over the tiles that use it,
    in the memory order of Poplibs' ``createWeightsImpl`` (see
    :func:`~poplar_api.poplin.conv_layout.grouped_weights`)."""
    params = _check_params(params, "createWeights")
    opts = parse_options(options, "createWeights")
    plan = _plan(graph, params, opts)
    if plan.flattened:  # (a one-position kernel: the same shape)
        flat = flat_params(params)
        weights = grouped_weights(graph, flat, _plan(graph, flat, opts), name or "weights")
        return weights.reshape(params.weightsShape())
    if plan.flatten_dims:  # (laid out as the unflattened form's blocks: it is copied)
        plan = layout_plan(plan, expand_dims(params, plan.expanded_dims), graph.getTarget())
    return grouped_weights(graph, params, plan, name or "weights")


def createBiases(graph: Graph, activations: Tensor, name: str = "") -> Tensor:
    """A bias vector ``[C]`` for activations ``[B, C, *field]``, spread over the tiles."""
    if not isinstance(activations, Tensor) or activations.rank() < 2:
        raise TensorError(
            f"createBiases: activations must be a Tensor [batch, channels, ...], got "
            f"{getattr(activations, 'shape', lambda: activations)()}"
        )
    c = activations.dim(1)
    t = graph.addVariable(activations.elementType(), [c], name or "biases")
    n = graph.getTarget().getNumTiles()
    _map_by_array(graph, t, np.arange(c, dtype=np.int64) * n // max(c, 1))
    return t


# ------------------------------------------------------------------ the lowering
def _conv(
    graph: Graph,
    act: Tensor,
    ker: Tensor,
    params: ConvParams,
    opts: dict[str, Any],
    prog: ProgramSequence,
    name: str,
    rearrange: bool = False,
    copies: bool = False,
) -> Tensor:
    """Lower ``params`` on canonical views; return the canonical output ``[G, B, Co, *O]``.

    With ``rearrange``, an operand is first copied into a tensor laid out as the plan
    wants where Poplibs' ``convolutionPreprocess`` does (:func:`_rearrange`). With
    ``copies``, ``act`` is ``[Pco, G, B, Ci, *F]``, one copy of the inputs per
    output-channel part (:func:`~.conv_serial.broadcast_inputs`), and a block reads its
    part's copy.
    Vertices of one tile geometry (batch and output field range) share their method,
    class, worklist values and, per group counts, their estimate; the views of every
    vertex are made from element positions in the operands."""
    plan = _plan(graph, params, opts)
    if plan.flattened:  # Poplibs' flattenDims: the batch and field as one dimension
        flat = flat_params(params)
        ker_f = ker.reshape([ker.dim(0), ker.dim(1), ker.dim(2), *([1] * flat.getNumFieldDims())])
        out = _conv(graph, _flat_act(act, params), ker_f, flat, opts, prog, name, rearrange,
                    copies)  # fmt: skip
        return _unflat_act(out, params, params.outputChannelsPerConvGroup,
                           params.getOutputFieldShape())  # fmt: skip
    out = _lower(graph, act, ker, params, plan, opts, prog, name, rearrange, copies)
    if plan.flatten_dims:  # the flattened output [G, 1, Co, ...] as [G, B, Co, *O]
        shape = [params.numConvGroups, params.batchSize, params.outputChannelsPerConvGroup,
                 *params.getOutputFieldShape()]  # fmt: skip
        out = unflatten_tensor(out, plan.flatten_dims, shape)
    return out


def _lower(
    graph: Graph, act: Tensor, ker: Tensor, params: ConvParams, plan: ConvPlan,
    opts: dict[str, Any], prog: ProgramSequence, name: str, rearrange: bool, copies: bool,
) -> Tensor:  # fmt: skip
    """:func:`_conv` of ``plan`` (not :attr:`~.ConvPlan.flattened`); the output is the
    flattened convolution's where ``plan`` has :attr:`~.ConvPlan.flatten_dims`."""
    if rearrange:
        act, ker, params, plan = _rearrange(graph, act, ker, params, plan, opts, prog, name)
    if plan.serial > 1:
        acts, copied = act, False
        if plan.broadcast:  # the inputs exchanged to their tiles once, before the loop
            acts, copied = broadcast_inputs(graph, act, iteration_params(params, plan),
                                            plan, prog, name), True  # fmt: skip
        lower = lambda k, p, pr, n: _conv(graph, acts, k, p, opts, pr, n, copies=copied)  # noqa: E731
        return lower_serial(graph, ker, params, plan, opts, prog, name, lower)
    if plan.in_serial > 1:
        lower_in = lambda a, k, p, pr, n: _conv(graph, a, k, p, opts, pr, n)  # noqa: E731
        return lower_in_serial(graph, act, ker, params, plan, opts, prog, name, lower_in)
    # the operands' element ids, in their shapes: the vertices' fields are gathered from
    # them straight (no positions made first and looked up again)
    act_pos, ker_pos = act.index, ker.index
    if plan.expanded:  # im2col: -1 marks a zero the tile reads from its own constant
        dims = plan.expanded_dims
        act_pos = expanded_input_index(params, act_pos, dims)
        eff = expand_dims(params, dims)
        ker_pos = ker_pos.transpose(expanded_weights_order(params, dims))
        ker_pos = ker_pos.reshape(*ker_pos.shape[:2], eff.inputChannelsPerConvGroup,
                                  *eff.kernelShape)  # fmt: skip
        act_pos = flatten_ids(act_pos, plan.flatten_dims)
        params = flattened_params(eff, plan.flatten_dims)
    nd = params.getNumFieldDims()
    g_n, b_n = params.numConvGroups, params.batchSize
    co_n = params.outputChannelsPerConvGroup
    out_field = params.getOutputFieldShape()
    out_type = params.outputType
    partials_type = plan.partials_type
    rng = _ranges(plan, params)
    pci = plan.parts[-1] * plan.kernel_split  # (the partials' parts: Ci x kernel)
    need_reduce = pci > 1 or partials_type != out_type
    cast_only = need_reduce and pci == 1
    cpg = partial_chans_per_group(plan.method, co_n, plan.out_chans_per_group)
    shape = (g_n, b_n, out_field, co_n, cpg)
    out_mem, out_var = (
        (None, None) if cast_only else grouped_output(graph, out_type, [], *shape, name)
    )
    # the partials' view as its ids' tables (no array of every id: eight or more times
    # the output's elements), made a tensor only where one is needed
    part_mem, partials = (
        grouped_partials(graph, partials_type, [pci], *shape, f"{name}/partials")
        if need_reduce
        else (None, None)
    )
    cs = graph.addComputeSet(f"{name}/Convolve")
    acc_type = partials_type if need_reduce else out_type
    # positions in the operands, in the vertex layouts: [G,B,*F,Ci], [G,*K,Co,Ci]
    if copies:  # [Pco, G, B, Ci, *F] -> [Pco, G, B, *F, Ci]
        act_pos = act_pos.transpose([0, 1, 2, *range(4, 4 + nd), 3])
    else:
        act_pos = act_pos.transpose([0, 1, *range(3, 3 + nd), 2])
    ker_pos = ker_pos.transpose([0, *range(3, 3 + nd), 1, 2])
    # (the partials' variable carries their graph and type for the fields)
    dst_t, dst_ids = (partials.var, partials.ids) if need_reduce else (out_var, out_var.index)
    if plan.kernel_split > 1:  # each kernel part's vertices, on its tiles
        zeros = _convolve_kernel_parts(graph, cs, plan, params, rng, act, ker, act_pos, ker_pos,
                               partials, name, acc_type)  # fmt: skip
        prog.add(Execute(cs))
        graph.mapElements(part_mem, _kernel_partials_tiles(plan, rng, partials.shape(), cpg))
    else:
        parts = plan_partials(graph, plan, params, rng, act_pos, ker_pos, dst_ids,
                              need_reduce, name, acc_type, act.elementType())  # fmt: skip
        made = parts.specs.make(graph)
        parts.add_vertices(graph, cs, act, ker, dst_t, made)
        prog.add(Execute(cs))
        dst_shape = partials.shape() if need_reduce else out_var.shape()
        graph.mapElements(part_mem if need_reduce else out_mem,
                          grouped_tiles(plan, rng, dst_shape, need_reduce, cpg))  # fmt: skip
        zeros = parts.zeros
        # the plan's fields, worklists and tiles are in the graph now: freed before the
        # zeroing and the reduction build theirs
        del parts, made
    del act_pos, ker_pos
    if zeros:
        from poplar_api import popops

        dst_view = partials.tensor() if need_reduce else out_var
        popops.zero(graph, dst_view.elements(np.concatenate(zeros)), prog, f"{name}/zero")
    if cast_only:  # Poplibs casts the partials with popops, where they are
        from poplar_api import popops

        out_var = popops.cast(graph, partials.tensor()[0], out_type, prog, f"{name}/cast")
    elif need_reduce:
        reduce_partials(graph, partials, out_var, plan, rng, prog, name)
    perm_out = [0, 1, nd + 2, *range(2, nd + 2)]  # [G,B,*O,Co] -> [G,B,Co,*O]
    return out_var.dimShuffle(perm_out)


def _convolve_kernel_parts(
    graph: Graph, cs: Any, plan: ConvPlan, params: ConvParams, rng: list[list[tuple[int, int]]],
    act: Tensor, ker: Tensor, act_pos: np.ndarray, ker_pos: np.ndarray, partials: GroupedView,
    name: str, acc_type: Type,
) -> list[np.ndarray]:  # fmt: skip
    """Add the partial-sum vertices of every kernel part of ``plan`` to ``cs``: part
    ``k``'s blocks on its tiles, as the plan of :func:`kernel_part_params`' convolution,
    reading its rows of the weights (``ker_pos`` ``[G, *K, Co, Ci]``; ``act_pos``
    ``[G, B, *F, Ci]``, the operands' ids) and writing the partials' parts ``ic K + k``
    (``partials`` ``[Pci K, G, B, *O, Co]``). Returns the positions in the partials of
    the blocks without work (to be zeroed)."""
    split = plan.kernel_split
    check_kernel_split(params, split)
    tables = partials.ids.tables
    per = int(math.prod(partials.shape()[1:]))
    zeros = []
    for k, (k0, k1) in enumerate(kernel_ranges(params.kernelShape[0], split)):
        sub = kernel_part_params(params, k0, k1)
        dst = SeparableIds([tables[0][k::split], *tables[1:]])  # (parts ic K + k)
        parts = plan_partials(graph, part_plan(plan, k), sub, rng, act_pos, ker_pos[:, k0:k1],
                              dst, True, name, acc_type, act.elementType())  # fmt: skip
        made = parts.specs.make(graph)
        parts.add_vertices(graph, cs, act, ker, partials.var, made)
        for z in parts.zeros:  # (positions in the part's rows: ic, then the rest)
            zeros.append((z // per * split + k) * per + z % per)
    return zeros


def _kernel_partials_tiles(
    plan: ConvPlan, rng: list[list[tuple[int, int]]], shape: Any, cpg: int
) -> np.ndarray:
    """The tile of every partial of a kernel-split ``plan`` (``shape``: the partials'
    view ``[Pci K, G, B, *O, Co]``), in the variable's memory order, part ``ic K + k`` on
    the tile of its block's part (:func:`~.conv_layout.grouped_tiles` of each part)."""
    split = plan.kernel_split
    lead = [plan.parts[-1], *shape[1:]]
    each = [grouped_tiles(part_plan(plan, k), rng, lead, True, cpg) for k in range(split)]
    stacked = np.stack(each, axis=1)  # [Pci, K, ...memory order]
    return stacked.reshape(-1, *stacked.shape[2:])


def _rearrange(
    graph: Graph,
    act: Tensor,
    ker: Tensor,
    params: ConvParams,
    plan: ConvPlan,
    opts: dict[str, Any],
    prog: ProgramSequence,
    name: str,
) -> tuple[Tensor, Tensor, ConvParams, ConvPlan]:
    """The operands the partial vertices read, the convolution and the plan they lower.

    ``act`` ``[G, B, Ci, *F]`` and ``ker`` ``[G, Co, Ci, *K]`` are each copied first into
    a new tensor laid out as the plan wants
    (:func:`~poplar_api.poplin.conv_layout.grouped_input`, ``grouped_weights``) where
    Poplibs' ``convolutionPreprocess`` rearranges it (graphcore/poplibs ``7eac0f26``,
    ``lib/poplin/Convolution.cpp``; the conditions in :mod:`.conv_rearrange`), else read
    where they lie. An expanded (im2col) plan rearranges both, after the expansion as
    Poplibs does: the copy gathers the expanded input (its zeros from one constant on
    tile 0, as ``popops::pad`` maps padding by default), and the convolution lowered is
    then the expanded 1x1 one on tensors that need no expanding. An expanded input that
    holds an element twice (:func:`~.conv_params.expanded_input_repeats`: overlapping
    windows, or more than one zero) is copied without its layout being tested, as a
    padded operand is: Poplar elides no copy from such a source
    (:func:`~.conv_rearrange.same_layout`).
    """
    nd = params.getNumFieldDims()
    inner = [0, 1, *range(3, 3 + nd), 2]  # channels innermost
    re_act, re_ker = operand_rearrangements(
        graph, plan, opts.get("pass"), act.dimShuffle(inner), ker.dimShuffle(inner)
    )
    repeats = False  # (whether the input certainly holds an element twice)
    if plan.expanded:
        dims = plan.expanded_dims
        eff = expand_dims(params, dims)
        repeats = expanded_input_repeats(params, dims)
        zero = graph.addConstant(act.elementType(), [1], 0, f"{name}/actsRearranged/padding")
        graph.setTileMapping(zero, 0)
        # the expanded input's element ids straight from the input's (-1: the zero's),
        # not positions made first and looked up again
        ids = expanded_input_index(params, act.index, dims)
        np.copyto(ids, zero.index[0], where=ids < 0)
        act = Tensor(act.graph, act.elementType(), ids, f"{name}/actsExpanded")
        g, co = ker.dim(0), ker.dim(1)
        ker = ker.dimShuffle(expanded_weights_order(params, dims))
        ker = ker.reshape([g, co, eff.inputChannelsPerConvGroup, *eff.kernelShape])
        act = flatten_tensor(act, plan.flatten_dims)  # (Poplibs' doFlatten: a view)
        params = flattened_params(eff, plan.flatten_dims)
        plan = dataclasses.replace(plan, expanded=False, expanded_dims=None, flatten_dims=())
    # (a copy Poplar elides, the destination laid out as the operand already is, is left
    # out, and its destination is not made; a copy that stays maps its destination by the
    # tiles its layout test made)
    if re_act:
        where = f"{name}/actsRearranged"
        # (a source holding an element twice is never elided: its layout is not tested)
        pad = pads_operand(params, plan, True) or repeats
        layout = None if pad else input_layout(params, plan)
        tiles = None if layout is None else layout[1]
        make = functools.partial(grouped_input, graph, params, plan, where, True, tiles)
        act = rearranged(graph, act, make, prog, where, pad, layout)
    if re_ker:
        where = f"{name}/weightsRearranged"
        pad = pads_operand(params, plan, False)
        layout = None if pad else weights_layout(params, plan)
        tiles = None if layout is None else layout[1]
        ids = None if layout is None else layout[0]  # (the view made from its positions)
        make = functools.partial(grouped_weights, graph, params, plan, where, tiles, ids)
        ker = rearranged(graph, ker, make, prog, where, pad, layout)
    return act, ker, params, plan


# ------------------------------------------------------------------ public passes
@bulk_construction
def convolution(
    graph: Graph,
    in_: Tensor,
    weights: Tensor,
    params: ConvParams,
    transposeAndFlipWeights: bool,
    prog: ProgramSequence,
    debugPrefix: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor:
    """Convolve ``in_`` ``[B, G*Ci, *field]`` with ``weights`` and return ``[B, G*Co, *outField]``.

    Parameters
    ----------
    graph, prog
        The graph, and the Sequence the compute sets are appended to.
    in_
        Activations of ``params.inputShape()``.
    weights
        ``[G, Co, Ci, *kernel]``; with ``transposeAndFlipWeights`` the weights of the
        forward pass ``[G, Ci, Co, *kernel]``, whose channels are swapped and kernel
        flipped in every field dimension (the backward-data pass with
        ``params = getGradientParams(fwdParams)``).
    params
        The :class:`ConvParams`.
    debugPrefix
        Prefix of the compute sets (``<prefix>/Convolve``, ``<prefix>/Reduce``).
    options
        Poplibs convolution options (``partialsType``, ``availableMemoryProportion``,
        ``pass``, ``planConstraints`` with a ``method``, ...).

    Raises
    ------
    GraphError, TensorError, TypeMismatchError
        Bad params, shapes that do not match them (naming the argument, the shape found
        and the shape required) or wrong types.
    """
    what = debugPrefix or "convolution"
    params = _check_params(params, what)
    opts = parse_options(options, what)
    _seq(prog, what)
    g, ci, co = (params.numConvGroups, params.inputChannelsPerConvGroup,
                 params.outputChannelsPerConvGroup)  # fmt: skip
    _check_tensor(graph, in_, what, "in", params.inputShape(), params.inputType)
    nd = params.getNumFieldDims()
    if transposeAndFlipWeights:
        want = [g, ci, co, *params.kernelShape]
        _check_tensor(graph, weights, what, "weights", want, params.inputType)
        ker = weights.dimShuffle([0, 2, 1, *range(3, 3 + nd)])
        for d in range(nd):
            ker = ker.reverse(3 + d)
    else:
        _check_tensor(graph, weights, what, "weights", params.weightsShape(), params.inputType)
        ker = weights
    act = _canonical_act(in_, g, ci)
    out_c = _conv(graph, act, ker, params, opts, prog, debugPrefix or "conv", rearrange=True)
    return _public_act(out_c)


@bulk_construction
def calculateWeightDeltas(
    graph: Graph,
    zDeltas: Tensor,
    activations: Tensor,
    params: ConvParams,
    prog: ProgramSequence,
    debugPrefix: str = "",
    options: Mapping[str, Any] | None = None,
) -> Tensor:
    """The weight gradient ``[G, Co, Ci, *kernel]`` of the forward ``params``, from the
    output gradient ``zDeltas`` ``[B, G*Co, *outField]`` and the forward input."""
    what = debugPrefix or "calculateWeightDeltas"
    params = _check_params(params, what)
    opts = parse_options(options, what)
    _seq(prog, what)
    _check_tensor(graph, zDeltas, what, "zDeltas", params.outputShape(), params.outputType)
    _check_tensor(graph, activations, what, "activations", params.inputShape(), params.inputType)
    wu = getWeightUpdateParams(params)
    if params.outputType != params.inputType:
        raise TypeMismatchError(
            f"{what}: forward input type {params.inputType.name} and output type "
            f"{params.outputType.name} differ; the weight update needs both the same"
        )
    g, ci, co = (params.numConvGroups, params.inputChannelsPerConvGroup,
                 params.outputChannelsPerConvGroup)  # fmt: skip
    b = params.batchSize
    nd = params.getNumFieldDims()
    # activations [B, G*Ci, *F] -> act' [G, Ci(batch), B(chans), *F]
    a = activations.reshape([b, g, ci, *params.inputFieldShape])
    act = a.dimShuffle([1, 2, 0, *range(3, 3 + nd)])
    # zDeltas [B, G*Co, *O] -> ker' [G, Co, B, *O]
    z = zDeltas.reshape([b, g, co, *params.getOutputFieldShape()])
    ker = z.dimShuffle([1, 2, 0, *range(3, 3 + nd)])
    # [G, Ci, Co, *K]
    out = _conv(graph, act, ker, wu, opts, prog, debugPrefix or "wu", rearrange=True)
    return out.dimShuffle([0, 2, 1, *range(3, 3 + nd)])


@bulk_construction
def convolutionWeightUpdate(
    graph: Graph,
    zDeltas: Tensor,
    weights: Tensor,
    activations: Tensor,
    params: ConvParams,
    scale: float | Tensor,
    prog: ProgramSequence,
    debugPrefix: str = "",
    options: Mapping[str, Any] | None = None,
) -> None:
    """``weights += scale * calculateWeightDeltas(...)`` (``scale`` is ``-learningRate``
    for plain SGD), in place."""
    from poplar_api import popops

    what = debugPrefix or "convolutionWeightUpdate"
    params = _check_params(params, what)
    _check_tensor(graph, weights, what, "weights", params.weightsShape(), params.inputType)
    deltas = calculateWeightDeltas(graph, zDeltas, activations, params, prog, what, options)
    popops.scaledAddTo(graph, weights, deltas, scale, prog, f"{what}/update")


def _check_bias(acts: Any, biases: Any, what: str, arg: str) -> int:
    """The channel count of ``acts`` ``[B, C, ...]``; ``biases`` must be ``[C]``."""
    if not isinstance(acts, Tensor) or acts.rank() < 2:
        raise TensorError(f"{what}: {arg} must be a Tensor [batch, channels, ...], got {acts!r}")
    c = acts.dim(1)
    if not isinstance(biases, Tensor) or biases.shape() != [c]:
        found = biases.shape() if isinstance(biases, Tensor) else type(biases).__name__
        raise TensorError(
            f"{what}: biases has shape {found}; required [{c}] (one per channel of {arg} "
            f"{acts.shape()})"
        )
    return c


@bulk_construction
def addBias(
    graph: Graph, in_: Tensor, biases: Tensor, prog: ProgramSequence, debugPrefix: str = ""
) -> None:
    """``in_[:, c, ...] += biases[c]`` in place (activations ``[B, C, *field]``)."""
    from poplar_api import popops

    what = debugPrefix or "addBias"
    c = _check_bias(in_, biases, what, "in")
    view = biases.reshape([1, c, *([1] * (in_.rank() - 2))])
    for d, n in enumerate(in_.shape()):
        if d != 1 and n != 1:
            view = view.broadcast(n, d)
    popops.addInPlace(graph, in_, view, prog, f"{what}/addToChannel")


@bulk_construction
def convolutionBiasUpdate(
    graph: Graph,
    zDeltas: Tensor,
    biases: Tensor,
    scale: float | Tensor,
    prog: ProgramSequence,
    debugPrefix: str = "",
) -> None:
    """``biases += scale * sum(zDeltas over batch and field)`` in place."""
    from poplar_api import popops

    what = debugPrefix or "convolutionBiasUpdate"
    _check_bias(zDeltas, biases, what, "zDeltas")
    dims = [0, *range(2, zDeltas.rank())]
    deltas = popops.reduce(graph, zDeltas, dims, popops.Operation.ADD, prog, f"{what}/reduce")
    if deltas.elementType() != biases.elementType():
        deltas = popops.cast(graph, deltas, biases.elementType(), prog, f"{what}/cast")
    popops.scaledAddTo(graph, biases, deltas, scale, prog, f"{what}/update")


# ------------------------------------------------------------------ flops
def getFwdFlops(params: ConvParams) -> int:
    """Flops of the forward pass (2 per multiply-accumulate on real data)."""
    return 2 * _check_params(params, "getFwdFlops").getNumberOfMACs()


def getBwdFlops(params: ConvParams) -> int:
    """Flops of the backward-data pass of forward ``params``."""
    return 2 * getGradientParams(_check_params(params, "getBwdFlops")).getNumberOfMACs()


def getWuFlops(params: ConvParams) -> int:
    """Flops of the weight-update pass of forward ``params``."""
    return 2 * getWeightUpdateParams(_check_params(params, "getWuFlops")).getNumberOfMACs()
