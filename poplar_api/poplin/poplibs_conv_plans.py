"""Poplibs' plan of a convolution whose field flattens, as ipusim's planner takes it.

For the convolutions :mod:`.poplibs_conv_model` restates Poplibs' planner for
(graphcore/poplibs ``7eac0f26``: ``createPlan`` over the operand orders and the
``flattenDims`` / ``outChanFlattenDims`` transforms, ``constructModel``'s partitions
and ``addEstimates``' costs), ipusim plans the convolution as that model picks it when
the pick is established (every candidate left out bounded above it) and ipusim can run
it: unswapped (ipusim swaps the operands of matMul products only), the AMP with FLOAT
partials in ipusim's grouping (16 input, 8 output channels), one pass. The plan is of
the flattened convolution (:func:`~.poplibs_conv_model.flat_params`: batch and field
as the innermost field dimension), marked ``flattened``; :mod:`.conv` runs it on views
of the operands and output in that form. Its blocks, tiles and costs are ipusim's own
for the model's partition (:func:`~poplar_api.poplin.conv_planner._gather` on the given
split, the vertex estimate of its largest block), as for the products of
:mod:`.poplibs_plans`.

Covered: HALF inputs and output, FLOAT partials, pass ``NONE``, ``INFERENCE_FWD``,
``TRAINING_FWD`` or ``TRAINING_BWD``, on one IPU, no option
but ``availableMemoryProportion``, ``partialsType`` and a ``planConstraints`` naming
the AMP, more than 16 input channels (:func:`~.poplibs_conv_model.poplibs_conv_plan`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import COST_KEYS, ConvPlan, _gather, amp_groups, plan_from
from poplar_api.poplin.conv_vertex_estimates import largest_block_estimate
from poplar_api.poplin.poplibs_conv_model import flat_params, flattenable, poplibs_conv_plan
from poplar_api.poplin.poplibs_matmul_model import CONV_PASSES
from poplar_api.poplin.poplibs_release import poplibs_release
from poplar_api.types import FLOAT, HALF

__all__ = ["adopted_conv_plan", "is_flat"]

#: Convolution options a covered convolution may have (parsed: ``method`` and ``expand``
#: are always present).
_ALLOWED = {"availableMemoryProportion", "partialsType", "pass", "method", "expand",
            "planConstraints"}  # fmt: skip


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def is_flat(params: ConvParams) -> bool:
    """Whether ``params`` is already in the flattened form (batch 1, every field
    dimension but the innermost of one position)."""
    return params.batchSize == 1 and all(int(x) == 1 for x in params.inputFieldShape[:-1])


def adopted_conv_plan(params: ConvParams, opts: Mapping[str, Any], target: Any) -> ConvPlan | None:
    """The plan of ``params`` Poplibs' planner picks, marked ``flattened`` unless
    ``params`` is already flat (:func:`is_flat`), or None when ``params`` is not covered,
    the pick is not established or ipusim cannot run it (module docstring)."""
    covered = (
        params.inputType == HALF
        and params.outputType == HALF
        and opts.get("partialsType") == FLOAT
        and (opts.get("pass") or "NONE") in CONV_PASSES
        and opts.get("method") in (None, "AMP")
        and opts.get("expand") is None
        and not opts.get("swap")
        and set(opts) <= _ALLOWED
        and target.getNumTiles() == target.getTilesPerIPU()
        and params.inputChannelsPerConvGroup > 16
        and flattenable(params)
    )
    if not covered:
        return None
    proportion = float(opts.get("availableMemoryProportion", 0.6))
    release = poplibs_release(target)
    try:
        plan = poplibs_conv_plan(params, target, proportion, release, (opts.get("pass") or "NONE"))
    except ValueError:
        return None
    icg, ocg, units, _ = amp_groups(HALF, FLOAT, target, 8)
    s = plan["splits"]
    runnable = (
        plan["established"]
        and not plan["swapped"]
        and (plan["method"], plan["partials"]) == ("AMP", "float")
        and tuple(plan["groups"]) == (icg, ocg)
        and s["outChanSplit.serial"] == 1
        and s["inChanSplit.serial"] == 1
    )
    if not runnable:
        return None
    flat = flat_params(params)
    nd = flat.getNumFieldDims()
    field = flat.inputFieldShape[-1]
    sizes = (flat.numConvGroups, 1, *([1] * (nd - 1)), field,
             flat.outputChannelsPerConvGroup, flat.inputChannelsPerConvGroup)  # fmt: skip
    splits = (s["convGroupSplit"], 1, *([1] * (nd - 1)), s["fieldSplit"],
              s["outChanSplit.parallel"], s["inChanSplit.parallel"])  # fmt: skip
    grains = (1, 1, *([1] * nd), ocg, icg)
    # a block of ceil(ceil(n / grain) / split) grains (ceildivConstrainDivisor), at most n
    blocks = [
        min(_ceil(_ceil(n, g), p) * g, n) for n, p, g in zip(sizes, splits, grains, strict=True)
    ]
    parts = [-(-n // b) for n, b in zip(sizes, blocks, strict=True)]
    if tuple(parts) != splits:  # (each split is the least giving its block)
        return None
    rows = ([np.array([x], np.int64) for x in parts], [np.array([x], np.int64) for x in blocks])
    methods = [("AMP", units)]
    cat = _gather(flat, methods, FLOAT, target, 1, False, False, None, False, "out", rows)
    cost = {key: int(cat[key][0]) for key in COST_KEYS}
    conv = plan_from(cat, 0, methods, flat, FLOAT, target, cost)
    cost["compute"] = int(largest_block_estimate(flat, target)(conv))
    cost["total"] = sum(cost[key] for key in COST_KEYS[:-1])
    conv = plan_from(cat, 0, methods, flat, FLOAT, target, cost)
    return dataclasses.replace(conv, release=release, flattened=not is_flat(params))
