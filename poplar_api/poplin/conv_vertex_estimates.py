"""Cycle estimates of a convolution plan's partial-sum vertices: which vertex a tile
runs (``AMP_1x1`` where Poplibs would use ``ConvPartial1x1Out``, else the plan's
method) and its Poplibs estimate (:mod:`poplar_api.poplin.conv_estimators`,
:mod:`poplar_api.poplin.amp`), and the planner's cost of a plan's largest block.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from poplar_api.poplin import amp, conv_estimators
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import AMP_CHAIN, ConvPlan
from poplar_api.poplin.conv_splits import kept_dim_maps
from poplar_api.poplin.conv_worklists import TileGeometry, tile_geometry
from poplar_api.types import FLOAT

__all__ = [
    "group_counts",
    "largest_block_estimate",
    "nx1_slowest",
    "partial_estimate",
    "vertex_method",
]

#: ``Target::getDataPathWidth()`` in bits (ipu2), for the HMAC output zeroing.
DATA_PATH_WIDTH_BITS = 64


def vertex_method(plan: ConvPlan, geom: TileGeometry, kpos: int) -> str:
    """``AMP_1x1`` where Poplibs would use ``ConvPartial1x1Out``, else the plan's method."""
    if plan.method != "AMP" or kpos != 1 or weight_height(plan) > 1:
        return plan.method
    if geom.in_shape != geom.out_shape or (geom.in_stride, geom.out_stride) != (1, 1):
        return plan.method
    entries = np.concatenate([w for w in geom.worklists[0]]).reshape(-1, 3)
    rows = int(math.prod(geom.out_shape))
    if entries[:, 1].sum() != rows * 1 or np.any(entries[:, 0] != entries[:, 2]):
        return plan.method
    return "AMP_1x1"


def weight_height(plan: ConvPlan) -> int:
    """Poplibs' ``getConvUnitWeightHeight`` of an AMP plan: the conv unit's chain of
    weights (4 loads of ``convInputLoadElems``) over the input channels of a group, 1
    for ipusim's own groupings (a narrower group, e.g. FLOAT's 4 of 8, stacks that
    many kernel rows on a unit; ``ConvPartial1x1Out`` then does not apply)."""
    if plan.method != "AMP" or not plan.in_chans_per_group:
        return 1
    return max(1, AMP_CHAIN * plan.conv_input_load_elems // plan.in_chans_per_group)


def _height_partitions(partitions: Any, inner: int, outer: int, height: int) -> list:
    """Per worker, the partitions of each group of ``height`` kernel rows (``outer`` rows
    of ``inner`` positions, row-major) at each inner position: those of the group's row
    with the most field positions (the rows of a group run over one output range)."""
    out = []
    for per_k in partitions:
        lists = []
        for g in range(-(-outer // height)):
            for kx in range(inner):
                rows = [
                    per_k[ky * inner + kx] for ky in range(g * height, min(outer, (g + 1) * height))
                ]
                lists.append(list(max(rows, key=lambda r: sum(r))))
        out.append(lists)
    return out


def partial_estimate(
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
    out_rows = batch * int(math.prod(geom.out_shape))
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
        if plan.joint or plan.release:
            # a joint plan's grouping is fixed (the forward input grouping, a multiple
            # of the conv units), as is that of a plan Poplibs' planner picked
            # (:mod:`.poplibs_plans`): Poplibs' vertex loops over the tile's channels in
            # groups of it (``tileNumInGroups = ceildiv(inChanSize, inChansPerGroup)``,
            # ``addPartialCalcCycleEstimate``, ConvModel.cpp at 7eac0f26)
            ic, oc = plan.in_chans_per_group, plan.out_chans_per_group
            nig, nog = -(-chans[0] // ic), -(-chans[1] // oc)
        zero = conv_estimators.zero_supervisor_cycles(
            conv_estimators.zero_worklist(out_rows * oc, workers),
            ncg * nog,
            DATA_PATH_WIDTH_BITS,
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
    # the fields both AMP vertices (1x1 and nx1) have
    amp_fields: dict[str, Any] = dict(
        num_conv_groups=ncg,
        num_in_groups=nig,
        num_out_groups=nog,
        out_chans_per_group=ocg,
        weight_bytes_per_conv_unit=icg * weight_height(plan) * fp.size,
        num_conv_units=plan.num_conv_units,
        coeff_load_bytes_per_cycle=amp.AMP_COEFF_LOAD_BYTES_PER_CYCLE,
        num_worker_contexts=workers,
        float_activations=fp == FLOAT,
        float_partials=acc == FLOAT,
    )
    if method == "AMP_1x1":
        return amp.conv_partial_1x1_cycles(amp.split_field_elems(out_rows, workers), **amp_fields)
    kshape = params.kernelShape
    inner, outer = int(kshape[-1]), int(math.prod(kshape[:-1]))
    height, partitions, slowest = weight_height(plan), None, None
    if height > 1:  # (Poplibs' kernelOuterSizeM1 + 1: the groups of ``height`` rows)
        partitions = _height_partitions(geom.partitions, inner, outer, height)
        outer = -(-outer // height)
    elif geom.workers <= workers and len(geom.entry_bounds) - 1 == inner * outer * geom.workers:
        # (one list per context and kernel position, at most the contexts: the slowest
        # contexts' sum from the classes of the entries' counts, kept with the geometry)
        slowest = nx1_slowest(geom, fp == FLOAT, acc == FLOAT, plan.num_conv_units, workers)
    else:
        partitions = geom.partitions  # (the estimator says what is wrong with them)
    return conv_estimators.conv_partial_nx1_vertex_cycles(
        partitions,
        zeros_info=out_rows * ocg,
        kernel_inner_elems=inner,
        kernel_outer_elems=outer,
        filter_height=height,
        in_chans_per_group=icg,
        data_path_width=DATA_PATH_WIDTH_BITS,
        slowest=slowest,
        **amp_fields,
    )


def nx1_slowest(
    geom: TileGeometry, float_activations: bool, float_partials: bool, units: int, workers: int
) -> int:
    """The ``ConvPartialnx1`` estimate's sum over kernel positions of the slowest worker's
    cycles of one pass for ``geom``'s worklists
    (:func:`~.conv_estimators.nx1_slowest_of_ranges` of its entry counts' classes), kept
    with the geometry: a plan's candidates estimate the same geometry with the same
    vertex many times."""
    key = ("nx1", float_activations, float_partials, units, workers)
    slowest = geom.derived.get(key)
    if slowest is None:
        slowest = geom.derived[key] = conv_estimators.nx1_slowest_of_ranges(
            geom.num_classes, geom.workers, float_activations, float_partials, units, workers
        )
    return slowest


def group_counts(plan: ConvPlan, bg: int, bci: int, bco: int) -> tuple[int, int, int]:
    """``(conv, input, output)`` groups of a block's partial vertex. A MAC vertex counts
    one group of the block's channels here (``chans`` carries them); a horizontal MAC of
    a joint plan is split into its grouping's groups by :func:`partial_estimate`."""
    if plan.method in ("HMAC", "VMAC"):
        return bg, 1, 1
    return bg, -(-bci // plan.in_chans_per_group), -(-bco // plan.out_chans_per_group)


def largest_block_estimate(
    params: ConvParams, target: Any, geoms: dict[tuple, TileGeometry] | None = None
) -> Any:
    """The planner's cost of a plan: the estimate of its largest block's vertex. Plans
    with the same batch and field block share that block's geometry (made once, and
    kept in ``geoms`` when given: :func:`geometry_cache`, which the lowering reads)."""
    maps = kept_dim_maps(params)
    nd = params.getNumFieldDims()
    workers = target.getNumWorkerContexts()
    kpos = int(math.prod(params.kernelShape))
    if geoms is None:
        geoms = {}
    methods: dict[tuple, str] = {}  # (vertex_method's of a geometry, method and height)

    def exact(plan: ConvPlan) -> int:
        blocks = plan.blocks
        bb = min(blocks[1], params.batchSize)
        ranges = [(0, min(blocks[2 + d], maps[d].shape[1])) for d in range(nd)]
        key = (bb, tuple(ranges))
        geom = geoms.get(key)
        if geom is None:
            geom = geoms[key] = tile_geometry(maps, bb, ranges, workers)
        bci, bco = blocks[-1], blocks[-2]
        counts = group_counts(plan, blocks[0], bci, bco)
        vkey = (key, plan.method, weight_height(plan))
        method = methods.get(vkey)
        if method is None:
            method = methods[vkey] = vertex_method(plan, geom, kpos)
        chans = (bci, bco)
        return partial_estimate(plan, method, geom, bb, counts, chans, params, target)

    return exact


#: The graph's :meth:`~poplar_api.Graph.libraryCache` of tile geometries.
GEOMETRY_CACHE = "poplin.tile_geometry"


def geometry_cache(graph: Any, params: ConvParams) -> dict[tuple, TileGeometry]:
    """The tile geometries of ``params`` on ``graph``'s target made so far, by ``(batch,
    ((begin, end) per field dimension))`` of the block: the planner's estimates and the
    lowering of the plan share the blocks they both look at (a geometry is read only).

    A geometry is :func:`~.conv_worklists.tile_geometry` of the convolution's dimension
    maps, the block and the worker contexts alone, so convolutions with the same maps
    (a matMul's products of one field size, the passes of one layer) share one dict: it
    is found by the maps' contents (some 100 us a geometry saved, a fifth of a PopART
    CNN's refined estimates)."""
    workers = graph.getTarget().getNumWorkerContexts()
    maps = tuple((m.shape, m.tobytes()) for m in kept_dim_maps(params))
    return graph.libraryCache(GEOMETRY_CACHE).setdefault((maps, workers), {})
