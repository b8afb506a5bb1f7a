"""A convolution plan given whole by ``planConstraints``: the transforms, the vertex and
the partition Poplibs' ``getPlanConstraints`` writes (graphcore/poplibs ``7eac0f26``,
``lib/poplin/ConvPlan.cpp``), run as given.

Poplibs' planner searches only the plans its constraints allow; with every split fixed
it has one plan to cost. ipusim does the same for the AMP: the convolution is the one
the transforms make (``transform.expandDims``, none when absent; a partial expansion is
then flattened as ``calculateFlattenedParams`` does, :mod:`.conv_flatten`, unless
``transform.flattenDims`` is ``[]``), the vertex is the AMP on ``method.convUnits``
units (ipusim's largest for the type when absent) with ipusim's grouping for it
(:func:`~.conv_planner.amp_groups`; ``inChansPerGroup`` and ``partialChansPerGroup``,
when given, must be that grouping, or for FLOAT an input grouping of 4 or 2, whose conv
units stack kernel rows: :func:`~.conv_vertex_estimates.weight_height`), and the
partition is ``partition.fieldSplit`` per field dimension, ``batchSplit``,
``kernelSplit`` of the outer kernel dimension (:mod:`.conv_kernel_split`),
``outChanSplit.parallel`` and ``inChanSplit.parallel`` over the channel grains,
``convGroupSplit``, each of the transformed convolution: a dimension of ``n`` positions
(or grains) split ``p`` ways has blocks of ``ceil(n / p)``, and ``p`` must be the number
of blocks that gives (as ``constructModel`` splits). No serial split
(``outChanSplit.serial`` and ``inChanSplit.serial`` 1). The plan's blocks, tiles and
costs are ipusim's own for that partition (:func:`~.conv_planner._gather`, the vertex
estimate of the largest block), as :mod:`.poplibs_conv2d_plans` does for an adopted
plan.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.poplin.conv_flatten import flatten_dims, flattened_params
from poplar_api.poplin.conv_kernel_split import (
    check_kernel_split,
    kernel_block_tiles,
    largest_kernel_part,
)
from poplar_api.poplin.conv_params import ConvParams, expand_dims
from poplar_api.poplin.conv_planner import (
    COST_KEYS,
    ConvPlan,
    _gather,
    amp_groups,
    amp_unit_options,
    plan_from,
)
from poplar_api.poplin.conv_vertex_estimates import largest_block_estimate
from poplar_api.types import FLOAT

__all__ = ["constrained_plan", "model_plan_constraints", "transformed_params"]


def _expansion(params: ConvParams, opts: Mapping[str, Any]) -> tuple[bool, tuple[int, ...] | None]:
    """``(expanded, dims)`` of the ``expandDims`` constraint: dims None for every field
    dimension (ipusim's :class:`~.conv_planner.ConvPlan` convention)."""
    nd = params.getNumFieldDims()
    if not opts.get("expand"):
        return False, None
    dims = opts.get("expand_dims", tuple(range(nd)))
    if any(d >= nd for d in dims):
        raise GraphError(
            f"convolution: planConstraints transform.expandDims={list(dims)} names a field "
            f"dimension the {nd}-D convolution does not have; required dimensions in "
            f"0..{nd - 1}"
        )
    return True, None if len(dims) == nd else tuple(dims)


def transformed_params(
    params: ConvParams, opts: Mapping[str, Any]
) -> tuple[ConvParams, bool, tuple[int, ...] | None, tuple[int, ...]]:
    """``(convolution, expanded, expanded dims, flatten dims)``: the convolution the
    constraint's transforms make of ``params``, which its partition splits (module
    docstring)."""
    expanded, dims = _expansion(params, opts)
    if not expanded:
        return params, False, None, ()
    eff = expand_dims(params, dims)
    flat = tuple(opts.get("flatten_dims", flatten_dims(eff)))
    return flattened_params(eff, flat), True, dims, flat


def _narrower_groups(params: ConvParams, icg: int) -> tuple[int, ...]:
    """The FLOAT AMP's input groupings below ``icg`` Poplibs offers
    (``getConvVertexAMPCandidates``, ``ConvVertexType.cpp`` at 7eac0f26: dividing the
    conv unit's 8 weights, a multiple of the 2 loaded a cycle; the unit then stacks
    ``8 / group`` kernel rows, ``getConvUnitWeightHeight``); none for other types."""
    if params.inputType != FLOAT:
        return ()
    return tuple(g for g in range(icg - 1, 0, -1) if 8 % g == 0 and g % 2 == 0)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _blocks(
    sizes: tuple[int, ...], splits: tuple[int, ...], grains: tuple[int, ...], names: list[str]
) -> tuple[list[int], list[int]]:
    """Blocks of ``ceil(ceil(n / grain) / p)`` grains (at most ``n``) and their count,
    which must be ``p`` for each dimension."""
    blocks = [
        min(_ceil(_ceil(n, g), p) * g, n) for n, p, g in zip(sizes, splits, grains, strict=True)
    ]
    parts = [_ceil(n, b) for n, b in zip(sizes, blocks, strict=True)]
    rows = zip(names, sizes, splits, grains, parts, strict=True)
    bad = [f"{nm} {p} of {n} (grain {g}) gives {q} blocks" for nm, n, p, g, q in rows if p != q]
    if bad:
        raise GraphError(
            f"convolution: planConstraints partition: {'; '.join(bad)}; required a split "
            f"equal to the number of blocks of its size (hint: the least split giving that "
            f"block)"
        )
    return parts, blocks


def constrained_plan(params: ConvParams, opts: Mapping[str, Any], target: Any) -> ConvPlan:
    """The plan of ``params`` its ``planConstraints`` give whole (module docstring).

    Raises
    ------
    GraphError
        A method other than the AMP, a grouping or unit count ipusim's AMP does not have
        for the type, a serial split, or a split that is not its dimension's block count;
        each message names the constraint, the value found and what is required.
    """
    part = opts["partition"]
    eff, expanded, dims, flat = transformed_params(params, opts)
    nd = eff.getNumFieldDims()
    if opts.get("method") not in (None, "AMP"):
        raise GraphError(
            f"convolution: planConstraints method {opts['method']} with a partition; ipusim "
            f"runs a whole constrained plan for the AMP only (hint: method AMP)"
        )
    if part["outChanSplit.serial"] != 1 or part["inChanSplit.serial"] != 1:
        raise GraphError(
            f"convolution: planConstraints outChanSplit.serial={part['outChanSplit.serial']}, "
            f"inChanSplit.serial={part['inChanSplit.serial']} with a partition; required 1 "
            f"(a constrained plan runs in one pass)"
        )
    if len(part["fieldSplit"]) > nd:
        raise GraphError(
            f"convolution: planConstraints partition.fieldSplit={list(part['fieldSplit'])} "
            f"names more dimensions than the {nd}-D convolution has"
        )
    partials = FLOAT if params.inputType == FLOAT else opts["partialsType"]
    allowed = amp_unit_options(params.inputType, partials, target)
    units = opts.get("conv_units", max(allowed))
    try:
        icg, ocg, units, _ = amp_groups(params.inputType, partials, target, units)
    except ValueError:
        units = None
    want = (opts.get("in_chans_per_group", icg if units else None),
            opts.get("partial_chans_per_group", ocg if units else None))  # fmt: skip
    narrower = _narrower_groups(params, icg if units else 0)
    if units is None or want[1] != ocg or (want[0] != icg and want[0] not in narrower):
        runs = ", ".join(
            f"{u} units grouping "
            + " or ".join(
                str(i)
                for i in (
                    amp_groups(params.inputType, partials, target, u)[0],
                    *_narrower_groups(params, 8),
                )
            )
            + f" / {u}"
            for u in allowed
        )
        raise GraphError(
            f"convolution: planConstraints convUnits={opts.get('conv_units')}, "
            f"inChansPerGroup={want[0]}, partialChansPerGroup={want[1]} for "
            f"{params.inputType.name} inputs with {partials.name} partials; ipusim's AMP "
            f"runs {runs} (hint: drop the grouping constraints, or pick one of these)"
        )
    field = tuple(part["fieldSplit"]) + (1,) * (nd - len(part["fieldSplit"]))
    sizes = (eff.numConvGroups, eff.batchSize, *(int(x) for x in eff.getOutputFieldShape()),
             eff.outputChannelsPerConvGroup, eff.inputChannelsPerConvGroup)  # fmt: skip
    splits = (part["convGroupSplit"], part["batchSplit"], *field,
              part["outChanSplit.parallel"], part["inChanSplit.parallel"])  # fmt: skip
    names = ["convGroupSplit", "batchSplit", *(f"fieldSplit.{d}" for d in range(nd)),
             "outChanSplit.parallel", "inChanSplit.parallel"]  # fmt: skip
    icg = want[0]
    parts, blocks = _blocks(sizes, splits, (1, 1, *[1] * nd, ocg, icg), names)
    split = int(opts.get("kernel_split", 1))
    if split > 1:
        check_kernel_split(eff, split)
    sub = largest_kernel_part(eff, split) if split > 1 else eff
    rows = ([np.array([x], np.int64) for x in parts], [np.array([x], np.int64) for x in blocks])
    methods = [("AMP", units)]
    fast = str(opts.get("enableFastReduce", "false")).lower() == "true"
    cat = _gather(sub, methods, partials, target, 1, False, fast, opts.get("pass"), False,
                  "out", rows, kernel_split=split)  # fmt: skip
    cost = {key: int(cat[key][0]) for key in COST_KEYS}
    # (a narrower input grouping: the plan's, its estimate with the weight height)
    group = {"in_chans_per_group": icg}
    plan = dataclasses.replace(
        plan_from(cat, 0, methods, sub, partials, target, cost, fast), **group
    )
    cost["compute"] = int(largest_block_estimate(sub, target)(plan))
    cost["total"] = sum(cost[key] for key in COST_KEYS[:-1])
    plan = dataclasses.replace(
        plan_from(cat, 0, methods, sub, partials, target, cost, fast), **group
    )
    if split > 1:
        tiles = kernel_block_tiles(plan.parts, split, target.getNumTiles(),
                                   target.getTilesPerIPU())  # fmt: skip
        plan = dataclasses.replace(plan, tiles=tiles, kernel_split=split)
    return dataclasses.replace(plan, expanded=expanded, expanded_dims=dims, flatten_dims=flat)


def model_plan_constraints(plan: Mapping[str, Any]) -> str:
    """The ``planConstraints`` JSON that makes ipusim run a plan of Poplibs' restated cost
    model of a 2-D convolution (:func:`~.poplibs_float_conv2d.form_plan`'s result:
    ``form``, ``vertex`` ``(units, icg, ocg)``, ``splits``), in the keys Poplibs'
    ``getPlanConstraints`` writes (level ``"0"``'s transform and partition, the method,
    the groupings; no serial split). ipusim runs it when its AMP has that grouping
    (:func:`constrained_plan`)."""
    from poplar_api.poplin.poplibs_float_conv2d import FORMS

    units, icg, ocg = (int(v) for v in plan["vertex"])
    s = {k: int(v) for k, v in plan["splits"].items()}
    tree = {
        "0": {
            "transform": {"expandDims": list(FORMS[plan["form"]])},
            "partition": {
                "fieldSplit": {"0": s["fieldSplit[0]"], "1": s["fieldSplit[1]"]},
                "batchSplit": s["batchSplit"],
                "kernelSplit": {"0": s["kernelSplit[0]"], "1": 1},
                "outChanSplit": {"parallel": s["outChanSplit.parallel"], "serial": 1},
                "inChanSplit": {"parallel": s["inChanSplit.parallel"], "serial": 1},
                "convGroupSplit": 1,
            },
        },
        "method": {"type": "AMP", "convUnits": units},
        "inChansPerGroup": icg,
        "partialChansPerGroup": ocg,
    }
    return json.dumps(tree)
