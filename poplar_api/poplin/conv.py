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
import itertools
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.errors import GraphError, TensorError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.poplin import amp, conv_estimators
from poplar_api.poplin.conv_params import (
    ConvParams,
    dim_maps,
    expand_all_dims,
    expanded_input_index,
    getGradientParams,
    getWeightUpdateParams,
)
from poplar_api.poplin.conv_planner import ConvPlan, parse_options, plan_convolution
from poplar_api.poplin.conv_vertices import conv_vertex
from poplar_api.poplin.conv_worklists import TileGeometry, tile_geometry
from poplar_api.poplin.vertices import reduce_add_vertex
from poplar_api.program import Execute
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, INT, UNSIGNED_INT, UNSIGNED_SHORT, Type

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

_PLANS: weakref.WeakKeyDictionary[Any, dict[tuple, ConvPlan]] = weakref.WeakKeyDictionary()
_DATA_PATH_WIDTH_BITS = 64


# ------------------------------------------------------------------ plans & estimates
def _vertex_method(plan: ConvPlan, geom: TileGeometry, kpos: int) -> str:
    """``AMP_1x1`` where Poplibs would use ``ConvPartial1x1Out``, else the plan's method."""
    if plan.method != "AMP" or kpos != 1:
        return plan.method
    if geom.in_shape != geom.out_shape or (geom.in_stride, geom.out_stride) != (1, 1):
        return plan.method
    entries = np.concatenate([w for w in geom.worklists[0]]).reshape(-1, 3)
    rows = int(np.prod(geom.out_shape))
    if entries[:, 1].sum() != rows * 1 or np.any(entries[:, 0] != entries[:, 2]):
        return plan.method
    return "AMP_1x1"


def _estimate(
    plan: ConvPlan,
    method: str,
    geom: TileGeometry,
    batch: int,
    counts: tuple[int, int, int],
    chans: tuple[int, int],
    params: ConvParams,
    target: Any,
) -> int:
    """Poplibs cycle estimate of one partial vertex (``counts`` = conv, in, out groups)."""
    ncg, nig, nog = counts
    workers = target.getNumWorkerContexts()
    fp = params.inputType
    acc = plan.partials_type
    out_rows = batch * int(np.prod(geom.out_shape))
    if method == "VMAC":
        cgpg = plan.conv_groups_per_group
        # VMAC worklist entries store numElems - 1 (ConvVertices.cpp); one list per worker
        parts = [[n - 1 for per_k in worker for n in per_k if n > 0] for worker in geom.partitions]
        return conv_estimators.conv_partial_vmac_cycles(
            parts,
            num_conv_groups=-(-ncg // cgpg),
            num_in_groups=nig,
            num_out_elems=out_rows * cgpg,
            conv_groups_per_group=cgpg,
            num_worker_contexts=workers,
            float_activations=False,
            float_partials=acc == FLOAT,
        )
    if method == "HMAC":
        ic, oc = chans
        zero = conv_estimators.zero_supervisor_cycles(
            conv_estimators.zero_worklist(out_rows * oc, workers),
            ncg * nog,
            _DATA_PATH_WIDTH_BITS,
            workers,
            acc == FLOAT,
        )
        return zero + conv_estimators.conv_partial_hmac_cycles(
            geom.partitions,
            num_conv_groups=ncg,
            num_in_groups=nig,
            num_out_groups=nog,
            kernel_size=len(geom.worklists),
            in_chans_per_group=ic,
            out_chans_per_group=oc,
            num_worker_contexts=workers,
            activations_vector_width=target.getVectorWidth(fp),
            float_activations=fp == FLOAT,
            float_partials=acc == FLOAT,
            use_1x1=False,
        )
    icg, ocg = plan.in_chans_per_group, plan.out_chans_per_group
    weight_bytes = icg * fp.size
    if method == "AMP_1x1":
        return amp.conv_partial_1x1_cycles(
            amp.split_field_elems(out_rows, workers),
            num_conv_groups=ncg,
            num_in_groups=nig,
            num_out_groups=nog,
            out_chans_per_group=ocg,
            weight_bytes_per_conv_unit=weight_bytes,
            num_conv_units=plan.num_conv_units,
            coeff_load_bytes_per_cycle=amp.AMP_COEFF_LOAD_BYTES_PER_CYCLE,
            num_worker_contexts=workers,
            float_activations=fp == FLOAT,
            float_partials=acc == FLOAT,
        )
    kshape = params.kernelShape
    return conv_estimators.conv_partial_nx1_vertex_cycles(
        geom.partitions,
        zeros_info=out_rows * ocg,
        num_conv_groups=ncg,
        num_out_groups=nog,
        num_in_groups=nig,
        kernel_inner_elems=int(kshape[-1]),
        kernel_outer_elems=int(np.prod(kshape[:-1])),
        filter_height=1,
        in_chans_per_group=icg,
        out_chans_per_group=ocg,
        weight_bytes_per_conv_unit=weight_bytes,
        num_conv_units=plan.num_conv_units,
        coeff_load_bytes_per_cycle=amp.AMP_COEFF_LOAD_BYTES_PER_CYCLE,
        num_worker_contexts=workers,
        float_activations=fp == FLOAT,
        float_partials=acc == FLOAT,
        data_path_width=_DATA_PATH_WIDTH_BITS,
    )


def _group_counts(plan: ConvPlan, bg: int, bci: int, bco: int) -> tuple[int, int, int]:
    if plan.method in ("HMAC", "VMAC"):
        return bg, 1, 1
    return bg, -(-bci // plan.in_chans_per_group), -(-bco // plan.out_chans_per_group)


def _largest_block_estimate(params: ConvParams, target: Any) -> Any:
    maps = dim_maps(params)
    nd = params.getNumFieldDims()
    workers = target.getNumWorkerContexts()

    def exact(plan: ConvPlan) -> int:
        blocks = plan.blocks
        bb = min(blocks[1], params.batchSize)
        ranges = [(0, min(blocks[2 + d], maps[d].shape[1])) for d in range(nd)]
        geom = tile_geometry(maps, bb, ranges, workers)
        bci, bco = blocks[-1], blocks[-2]
        counts = _group_counts(plan, blocks[0], bci, bco)
        method = _vertex_method(plan, geom, int(np.prod(params.kernelShape)))
        chans = (bci, bco)
        return _estimate(plan, method, geom, bb, counts, chans, params, target)

    return exact


def getConvPlan(
    graph: Graph, params: ConvParams, options: Mapping[str, Any] | None = None
) -> ConvPlan:
    """The plan :func:`convolution` uses for ``params`` on ``graph`` (cached per graph)."""
    opts = parse_options(options, "getConvPlan")
    return _plan(graph, params, opts)


def _plan(graph: Graph, params: ConvParams, opts: dict[str, Any]) -> ConvPlan:
    """The cheaper of the plans of ``params`` and of its expanded (im2col) form."""
    target = graph.getTarget()
    key = (target.getNumTiles(), params.key(), tuple(sorted((k, str(v)) for k, v in opts.items())))
    cache = _PLANS.setdefault(graph._state, {})
    plan = cache.get(key)
    if plan is None:
        expand = opts.get("expand")
        if opts.get("method") == "VMAC":
            expand = False  # the expanded form has many input channels: no VMAC
        plan = None
        if expand is not True or int(np.prod(params.kernelShape)) == 1:
            plan = plan_convolution(params, target, opts, _largest_block_estimate(params, target))
        if expand is not False and int(np.prod(params.kernelShape)) > 1:
            eff = expand_all_dims(params)
            alt = plan_convolution(eff, target, opts, _largest_block_estimate(eff, target))
            if plan is None or alt.cost["total"] < plan.cost["total"]:
                plan = dataclasses.replace(alt, expanded=True)
        cache[key] = plan
    return plan


def _effective(plan: ConvPlan, params: ConvParams) -> ConvParams:
    """The convolution the plan splits: ``params`` or its expanded form."""
    return expand_all_dims(params) if plan.expanded else params


def reportPlanInfo(
    out: Any, graph: Graph, params: ConvParams, options: Mapping[str, Any] | None = None
) -> None:
    """Write the plan of ``params`` to the text stream ``out`` (Poplibs' ``reportPlanInfo``)."""
    out.write(f"{params}\n{getConvPlan(graph, params, options)}\n")


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
    if t.graph is not graph._state:
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
    root = graph._tiles[np.asarray(tiles, np.int64).reshape(-1)]
    graph._state.space(t.elementType()).tile[t.flat_index()] = root.astype(np.int32)


def createInput(
    graph: Graph, params: ConvParams, name: str = "", options: Mapping[str, Any] | None = None
) -> Tensor:
    """Activations ``[B, G*Ci, *field]`` laid out for ``params``' plan.

    Each input element goes to a tile whose block reads it: along every field dimension
    the input is cut in proportion to the output blocks, and the result is spread over
    the output-channel blocks, so the tiles only receive halos and the other channel
    blocks' share.
    """
    params = _check_params(params, "createInput")
    opts = parse_options(options, "createInput")
    plan = _plan(graph, params, opts)
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    fshape = list(params.inputFieldShape)
    nd = len(fshape)
    var = graph.addVariable(params.inputType, [g, b, *fshape, ci], name or "input")
    grid = plan.tiles  # [G, B, *O, Co, Ci]
    gi = np.minimum(np.arange(g) // plan.blocks[0], plan.parts[0] - 1)
    bi = np.minimum(np.arange(b) // plan.blocks[1], plan.parts[1] - 1)
    ktot = int(np.prod(params.kernelShape)) if plan.expanded else 1
    ci_i = np.minimum(np.arange(ci) * ktot // plan.blocks[-1], plan.parts[-1] - 1)
    field_idx = [
        np.minimum(np.arange(fshape[d]) * plan.parts[2 + d] // fshape[d], plan.parts[2 + d] - 1)
        for d in range(nd)
    ]
    pco = plan.parts[-2]
    last = np.arange(fshape[-1])
    co_i = (last * pco * plan.parts[1 + nd] // fshape[-1]) % pco
    idx = np.ix_(gi, bi, *field_idx, ci_i)
    tiles = np.empty([g, b, *fshape, ci], np.int64)
    # index grid with co chosen by the innermost field position
    full = [np.broadcast_to(x, tiles.shape) for x in idx]
    co_full = np.broadcast_to(co_i.reshape([1, 1, *([1] * (nd - 1)), fshape[-1], 1]), tiles.shape)
    tiles[...] = grid[(*full[: 2 + nd], co_full, full[-1])]
    _map_by_array(graph, var, tiles)
    perm = [1, 0, nd + 2, *range(2, nd + 2)]  # [G,B,*F,C] -> [B,G,C,*F]
    return var.dimShuffle(perm).reshape([b, g * ci, *fshape])


def createWeights(
    graph: Graph, params: ConvParams, name: str = "", options: Mapping[str, Any] | None = None
) -> Tensor:
    """Weights ``[G, Co, Ci, *kernel]``, each plan block spread over the tiles that use it."""
    params = _check_params(params, "createWeights")
    opts = parse_options(options, "createWeights")
    plan = _plan(graph, params, opts)
    var = graph.addVariable(params.inputType, params.weightsShape(), name or "weights")
    eff = _effective(plan, params)
    rng = _ranges(plan, eff)
    # weights as the effective convolution sees them: [G, Co, Ci * (kernel if expanded)]
    g, co = params.numConvGroups, params.outputChannelsPerConvGroup
    tiles = np.empty(params.weightsShape(), np.int64).reshape(
        g, co, eff.inputChannelsPerConvGroup, -1
    )
    for gi, (g0, g1) in enumerate(rng[0]):
        for oi, (o0, o1) in enumerate(rng[-2]):
            for ii, (i0, i1) in enumerate(rng[-1]):
                users = plan.tiles[gi, ..., oi, ii].reshape(-1)
                blk = tiles[g0:g1, o0:o1, i0:i1]
                n = blk.size
                owner = users[np.arange(n) * users.size // max(n, 1)]
                blk[...] = owner.reshape(blk.shape)
    _map_by_array(graph, var, tiles.reshape(params.weightsShape()))
    return var


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
) -> Tensor:
    """Lower ``params`` on canonical views; return the canonical output ``[G, B, Co, *O]``."""
    plan = _plan(graph, params, opts)
    target = graph.getTarget()
    workers = target.getNumWorkerContexts()
    act_index, ker_index = act.index, ker.index
    if plan.expanded:  # im2col: -1 marks a zero the tile reads from its own constant
        act_index = expanded_input_index(params, act_index)
        g_, co_ = ker_index.shape[:2]
        ker_index = ker_index.reshape(g_, co_, -1, *([1] * params.getNumFieldDims()))
        params = expand_all_dims(params)
    maps = dim_maps(params)
    nd = params.getNumFieldDims()
    g_n, b_n = params.numConvGroups, params.batchSize
    co_n = params.outputChannelsPerConvGroup
    out_field = params.getOutputFieldShape()
    out_type = params.outputType
    partials_type = plan.partials_type
    rng = _ranges(plan, params)
    pci = plan.parts[-1]
    need_reduce = pci > 1 or partials_type != out_type
    cast_only = need_reduce and pci == 1
    out_var = None if cast_only else graph.addVariable(out_type, [g_n, b_n, *out_field, co_n], name)
    partials = (
        graph.addVariable(partials_type, [pci, g_n, b_n, *out_field, co_n], f"{name}/partials")
        if need_reduce
        else None
    )
    kpos = int(np.prod(params.kernelShape))
    cs = graph.addComputeSet(f"{name}/Convolve")
    st = graph._state
    fp = params.inputType
    acc_type = partials_type if need_reduce else out_type
    # element ids of the operands, in the vertex layouts: [G,B,*F,Ci], [G,*K,Co,Ci]
    act_ids = act_index.transpose([0, 1, *range(3, 3 + nd), 2])
    ker_ids = ker_index.transpose([0, *range(3, 3 + nd), 1, 2])
    zero_ids: dict[int, int] = {}  # tile -> id of its zero constant (expanded inputs)
    dst_ids = (partials if need_reduce else out_var).index
    geoms: dict[tuple, TileGeometry] = {}
    zeros: list[Tensor] = []
    dst_tiles = np.full(dst_ids.shape, -1, np.int64)
    wl_parts: dict[Type, list[tuple[int, np.ndarray]]] = {}
    for block in itertools.product(*[list(enumerate(r)) for r in rng]):
        ix = tuple(i for i, _ in block)
        (g0, g1), (b0, b1) = block[0][1], block[1][1]
        oranges = [r for _, r in block[2 : 2 + nd]]
        (co0, co1), (ci0, ci1) = block[-2][1], block[-1][1]
        tile = int(plan.tiles[ix])
        key = (b1 - b0, tuple(oranges))
        geom = geoms.get(key)
        if geom is None:
            geom = tile_geometry(maps, b1 - b0, oranges, workers)
            geoms[key] = geom
        osl = tuple(slice(lo, hi) for lo, hi in oranges)
        dst = dst_ids[ix[-1]] if need_reduce else dst_ids
        tiles_view = dst_tiles[ix[-1]] if need_reduce else dst_tiles
        tiles_view[g0:g1, b0:b1, *osl, co0:co1] = tile
        if geom.positions == 0 or ci1 <= ci0:
            ids = dst[g0:g1, b0:b1, *osl, co0:co1].reshape(-1)
            zeros.append(Tensor(st, acc_type, ids, f"{name}/zero"))
            continue
        method = _vertex_method(plan, geom, kpos)
        if plan.method in ("HMAC", "VMAC"):
            ig_r, og_r = [(ci0, ci1)], [(co0, co1)]
        else:
            icg, ocg = plan.in_chans_per_group, plan.out_chans_per_group
            ig_r = [(c, min(c + icg, ci1)) for c in range(ci0, ci1, icg)]
            og_r = [(c, min(c + ocg, co1)) for c in range(co0, co1, ocg)]
        wsl = tuple(slice(lo, hi) for lo, hi in geom.window)
        ins, ws, outs = [], [], []
        for g in range(g0, g1):
            win = act_ids[g, b0:b1, *wsl]
            for a, b in ig_r:
                ids = win[..., a:b].reshape(-1)
                if plan.expanded and (ids < 0).any():
                    ids = np.where(ids < 0, _zero_id(graph, zero_ids, tile, fp, name), ids)
                ins.append(Tensor(st, fp, ids, f"{name}/in"))
            for oa, ob in og_r:
                out_ids = dst[g, b0:b1, *osl, oa:ob].reshape(-1)
                outs.append(Tensor(st, acc_type, out_ids, f"{name}/out"))
                for a, b in ig_r:
                    w_ids = ker_ids[g, ..., oa:ob, a:b].reshape(-1)
                    ws.append(Tensor(st, fp, w_ids, f"{name}/weights"))
        wl_values = np.concatenate([w for per_k in geom.worklists for w in per_k]).astype(np.int64)
        limited = bool(wl_values.size == 0 or wl_values.max() <= np.iinfo(np.uint16).max)
        cls = conv_vertex(method, fp, acc_type, limited, plan.num_conv_units,
                          plan.conv_input_load_elems,
                          max(plan.conv_groups_per_group, 4))  # fmt: skip
        graph.addCodelets(cls)
        wl_t = UNSIGNED_SHORT if limited else UNSIGNED_INT
        wl_const = graph._add(wl_t, [max(wl_values.size, 1)], f"{name}/worklists", True)
        wl_parts.setdefault(wl_t, []).append((tile, wl_const, wl_values))
        wl_flat = wl_const.index.reshape(-1)
        wl_views, pos = [], 0
        for per_k in geom.worklists:
            for w in per_k:
                wl_views.append(Tensor(st, wl_t, wl_flat[pos : pos + w.size], f"{name}/worklist"))
                pos += w.size
        in_rows = (b1 - b0) * int(np.prod(geom.in_shape))
        out_rows = (b1 - b0) * int(np.prod(geom.out_shape))
        counts = (g1 - g0, len(ig_r), len(og_r))
        pvals = [counts[0], counts[2], counts[1], kpos, in_rows, out_rows,
                 geom.in_stride, geom.out_stride]  # fmt: skip
        p_const = graph._add(INT, [len(pvals)], f"{name}/params", True)
        wl_parts.setdefault(INT, []).append((tile, p_const, np.asarray(pvals, np.int64)))
        v = graph.addVertex(
            cs,
            cls,
            {"in": ins, "weights": ws, "out": outs, "worklists": wl_views, "params": p_const},
        )
        graph.setTileMapping(v, tile)
        chans = (ci1 - ci0, co1 - co0)
        est = _estimate(plan, method, geom, b1 - b0, counts, chans, params, target)
        graph.setPerfEstimate(v, int(est))
    _constants(graph, wl_parts)
    if zero_ids:
        tiles_z = np.fromiter(zero_ids, np.int64)
        ids_z = np.fromiter(zero_ids.values(), np.int64)
        graph._state.space(fp).tile[ids_z] = graph._tiles[tiles_z].astype(np.int32)
        graph._state.initial_parts.append((fp, ids_z, np.zeros(ids_z.size, fp.numpy)))
    prog.add(Execute(cs))
    _map_by_array(graph, partials if need_reduce else out_var, dst_tiles)
    if zeros:
        from poplar_api import popops
        from poplar_api.tensor import concat

        popops.zero(graph, concat(zeros) if len(zeros) > 1 else zeros[0], prog, f"{name}/zero")
    if cast_only:  # Poplibs casts the partials with popops, where they are
        from poplar_api import popops

        out_var = popops.cast(graph, partials[0], out_type, prog, f"{name}/cast")
    elif need_reduce:
        _reduce(graph, partials, out_var, plan, rng, prog, name)
    perm_out = [0, 1, nd + 2, *range(2, nd + 2)]  # [G,B,*O,Co] -> [G,B,Co,*O]
    return out_var.dimShuffle(perm_out)


def _zero_id(graph: Graph, cache: dict[int, int], tile: int, type_: Type, name: str) -> int:
    """Id of a one-element zero constant on ``tile`` (created on first use)."""
    if tile not in cache:
        t = graph._add(type_, [1], f"{name}/zero", True)
        cache[tile] = int(t.index.reshape(-1)[0])
    return cache[tile]


def _constants(graph: Graph, parts: dict[Type, list[tuple[int, Tensor, np.ndarray]]]) -> None:
    """Values and tiles of the vertices' worklist and parameter constants, set in bulk
    (one mapping and one initial-value record per element type)."""
    for type_, items in parts.items():
        ids = np.concatenate([t.index.reshape(-1) for _, t, _ in items])
        vals = np.concatenate(
            [v if v.size else np.zeros(t.numElements(), np.int64) for _, t, v in items]
        )
        tiles = np.concatenate([np.full(t.numElements(), tile, np.int64) for tile, t, _ in items])
        graph._state.space(type_).tile[ids] = graph._tiles[tiles].astype(np.int32)
        graph._state.initial_parts.append((type_, ids.copy(), vals.astype(type_.numpy).reshape(-1)))


def _reduce(
    graph: Graph,
    partials: Tensor,
    out_var: Tensor,
    plan: ConvPlan,
    rng: list,
    prog: ProgramSequence,
    name: str,
) -> None:
    """Sum the input-channel parts into ``out_var``: chunk ``p`` of each output block on
    the tile of ci-part ``p`` (which already holds that part's partials)."""
    cs = graph.addComputeSet(f"{name}/Reduce")
    cls = reduce_add_vertex(partials.elementType(), out_var.elementType())
    graph.addCodelets(cls)
    st = graph._state
    nd = len(rng) - 4
    pci = plan.parts[-1]
    out_ids, part_ids = out_var.index, partials.index
    tiles_all = np.empty(out_ids.shape, np.int64)
    ptype, otype = partials.elementType(), out_var.elementType()
    for block in itertools.product(*[list(enumerate(r)) for r in rng[:-1]]):
        ix = tuple(i for i, _ in block)
        (g0, g1), (b0, b1) = block[0][1], block[1][1]
        osl = tuple(slice(lo, hi) for _, (lo, hi) in block[2 : 2 + nd])
        co0, co1 = block[-1][1]
        box = (slice(g0, g1), slice(b0, b1), *osl, slice(co0, co1))
        flat_out = out_ids[box].reshape(-1)
        flat_parts = part_ids[(slice(None), *box)].reshape(pci, -1)
        tiles = plan.tiles[ix].reshape(-1)
        n = flat_out.size
        c = -(-n // pci)
        flat_tiles = np.empty(n, np.int64)
        for p in range(pci):
            lo, hi = min(p * c, n), min((p + 1) * c, n)
            flat_tiles[lo:hi] = tiles[p]
            if hi <= lo:
                continue
            fields = {
                "partials": [Tensor(st, ptype, flat_parts[q, lo:hi], f"{name}/partials")
                             for q in range(pci)],
                "out": Tensor(st, otype, flat_out[lo:hi], f"{name}/out"),
            }  # fmt: skip
            v = graph.addVertex(cs, cls, fields)
            graph.setTileMapping(v, int(tiles[p]))
        tiles_all[box] = flat_tiles.reshape(tiles_all[box].shape)
    _map_by_array(graph, out_var, tiles_all)
    prog.add(Execute(cs))


# ------------------------------------------------------------------ public passes
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
    out_c = _conv(graph, act, ker, params, opts, prog, debugPrefix or "conv")
    return _public_act(out_c)


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
    out = _conv(graph, act, ker, wu, opts, prog, debugPrefix or "wu")  # [G, Ci, Co, *K]
    return out.dimShuffle([0, 2, 1, *range(3, 3 + nd)])


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
