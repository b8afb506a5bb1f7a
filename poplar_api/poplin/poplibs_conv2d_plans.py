"""Poplibs' plan of a HALF 2-D convolution with a wider kernel, as ipusim's planner takes it.

For the convolutions :mod:`.poplibs_conv2d_model` covers (HALF inputs and output, FLOAT
partials, pass ``NONE``, a 2-D field with input padding only, one conv group), ipusim
plans the convolution as graphcore/poplibs ``7eac0f26``'s planner does where the restated
model settles that plan: the best of the plain AMP family (unswapped, unexpanded, one
pass: :func:`~.poplibs_conv2d_model.family_plan`), unique, below every other form's and
method's lower bound (:func:`~.poplibs_conv2d_forms.amp_floors`,
:func:`~.poplibs_conv2d_model.slic_floors`, :func:`~.poplibs_conv_model.mac_vertex_floor`),
as docs/planner.md establishes rows 16 and 18. ipusim runs it when its grouping is
ipusim's (16 input, 8 partial channels); its kernel split, if any, runs over tiles
(:mod:`.conv_kernel_split`). The blocks, tiles and costs are ipusim's own for the model's
partition (:func:`~poplar_api.poplin.conv_planner._gather` on the given split, the vertex
estimate of the largest block), as :mod:`.poplibs_conv_plans` does for the convolutions
that flatten.

Covered: the above, on one IPU, planning as ``7eac0f26`` (the model restates that
release), no option but ``availableMemoryProportion``, ``partialsType`` and a
``planConstraints`` naming the AMP, more than 16 input channels (with at most 16 the AMP
with half partials is a candidate, which the model does not restate), a kernel wider
than one position in some dimension (a 1x1 kernel flattens: :mod:`.poplibs_conv_plans`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.poplin.conv_kernel_split import kernel_block_tiles, largest_kernel_part
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import COST_KEYS, ConvPlan, _gather, amp_groups, plan_from
from poplar_api.poplin.conv_vertex_estimates import largest_block_estimate
from poplar_api.poplin.poplibs_conv2d_forms import amp_floors
from poplar_api.poplin.poplibs_conv2d_model import family_plan, slic_floors
from poplar_api.poplin.poplibs_conv_model import flattenable, mac_vertex_floor
from poplar_api.poplin.poplibs_release import poplibs_release
from poplar_api.types import FLOAT, HALF

__all__ = ["adopted_conv2d_plan"]

#: Convolution options a covered convolution may have (parsed: ``method`` and ``expand``
#: are always present).
_ALLOWED = {"availableMemoryProportion", "partialsType", "pass", "method", "expand",
            "planConstraints"}  # fmt: skip
#: The release whose planner the model restates.
_RELEASE = "7eac0f26"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _established(params: ConvParams, target: Any, family: dict[str, Any]) -> bool:
    """Whether the plain AMP family's plan of ``params`` (``family``,
    :func:`~.poplibs_conv2d_model.family_plan`) is Poplibs' plan: unique, and cheaper
    than every other AMP form's floor, the SLIC floors and the MAC vertices' floor
    (module docstring)."""
    cycles = family["cost"][0]
    if family["ties"] != 1 or cycles >= mac_vertex_floor(params, target):
        return False
    if cycles >= min(v for v in slic_floors(params, target).values() if v is not None):
        return False
    return cycles < min(amp_floors(params, target, cycles).values())


def _same_partition(
    own: ConvPlan, parts: tuple[int, ...], split: int, groups: tuple[int, int]
) -> bool:
    """Whether ``own`` is a one-pass, untransformed AMP plan of partition ``parts``, kernel
    split ``split`` and grouping ``groups``."""
    return (
        own.method == "AMP"
        and not (own.expanded or own.flattened or own.swapped)
        and own.serial == 1
        and own.in_serial == 1
        and own.kernel_split == split
        and tuple(own.parts) == parts
        and (own.in_chans_per_group, own.out_chans_per_group) == groups
    )


def adopted_conv2d_plan(
    params: ConvParams, opts: Mapping[str, Any], target: Any, own: ConvPlan | None = None
) -> ConvPlan | None:
    """The plan of ``params`` Poplibs' planner picks, with its kernel split, or None when
    ``params`` is not covered, the pick is not established or ipusim cannot run it
    (module docstring), or when ``own`` (ipusim's own plan, if given) already has the
    family's partition: the plan is then the same whether or not the pick is established,
    and the bounds of the other forms (seconds of host time) are not computed."""
    covered = (
        params.inputType == HALF
        and params.outputType == HALF
        and opts.get("partialsType") == FLOAT
        and (opts.get("pass") or "NONE") == "NONE"
        and opts.get("method") in (None, "AMP")
        and opts.get("expand") is None
        and not opts.get("swap")
        and set(opts) <= _ALLOWED
        and target.getNumTiles() == target.getTilesPerIPU()
        and poplibs_release(target) == _RELEASE
        and params.getNumFieldDims() == 2
        and params.numConvGroups == 1
        and params.inputChannelsPerConvGroup > 16
        and int(np.prod(params.kernelShape)) > 1
        and not flattenable(params)
    )
    if not covered:
        return None
    proportion = float(opts.get("availableMemoryProportion", 0.6))
    try:
        family = family_plan(params, target, "AMP", proportion)
    except ValueError:
        return None
    icg, ocg, units, _ = amp_groups(HALF, FLOAT, target, 8)
    if tuple(family["groups"]) != (icg, ocg):
        return None
    s = family["splits"]
    split = int(s["kernelSplit[0]"])
    out = [int(x) for x in params.getOutputFieldShape()]
    sizes = (1, params.batchSize, *out, params.outputChannelsPerConvGroup,
             params.inputChannelsPerConvGroup)  # fmt: skip
    splits = (1, s["batchSplit"], s["fieldSplit[0]"], s["fieldSplit[1]"],
              s["outChanSplit.parallel"], s["inChanSplit.parallel"])  # fmt: skip
    grains = (1, 1, 1, 1, ocg, icg)
    # a block of ceil(ceil(n / grain) / split) grains (ceildivConstrainDivisor), at most n
    blocks = [
        min(_ceil(_ceil(n, g), p) * g, n) for n, p, g in zip(sizes, splits, grains, strict=True)
    ]
    parts = [_ceil(n, b) for n, b in zip(sizes, blocks, strict=True)]
    if tuple(parts) != splits:  # (each split is the least giving its block)
        return None
    if own is not None and _same_partition(own, tuple(parts), split, (icg, ocg)):
        return None
    if not _established(params, target, family):
        return None
    sub = largest_kernel_part(params, split) if split > 1 else params
    rows = ([np.array([x], np.int64) for x in parts], [np.array([x], np.int64) for x in blocks])
    methods = [("AMP", units)]
    cat = _gather(sub, methods, FLOAT, target, 1, False, False, None, False, "out", rows,
                  kernel_split=split)  # fmt: skip
    cost = {key: int(cat[key][0]) for key in COST_KEYS}
    conv = plan_from(cat, 0, methods, sub, FLOAT, target, cost)
    cost["compute"] = int(largest_block_estimate(sub, target)(conv))
    cost["total"] = sum(cost[key] for key in COST_KEYS[:-1])
    conv = plan_from(cat, 0, methods, sub, FLOAT, target, cost)
    if split > 1:
        tiles = kernel_block_tiles(conv.parts, split, target.getNumTiles(),
                                   target.getTilesPerIPU())  # fmt: skip
        conv = dataclasses.replace(conv, tiles=tiles, kernel_split=split)
    return dataclasses.replace(conv, release=_RELEASE)
