"""Poplibs' plan of a FLOAT 2-D convolution, as ipusim's planner takes it.

For the convolutions :mod:`.poplibs_float_conv2d` covers (FLOAT inputs, partials and
output, a 2-D field, one conv group, input padding only or an output truncation that
``canonicalize`` takes off, passes ``NONE``, ``INFERENCE_FWD``, ``TRAINING_FWD`` and
``TRAINING_BWD``), ipusim plans the convolution as graphcore/poplibs ``7eac0f26``'s
planner does where the restated model settles that plan (docs/planner.md, "Rows 13-15:
their plans"): the least of the unswapped one-pass AMP forms
(:func:`~.poplibs_float_conv2d.best_plan`, its partition the first of equal ones that
popsolver's search reaches, :mod:`.popsolver_order`) when it is the plain form (no
dimension expanded), strictly below every other form's least (each costed only up to it),
every bound of :func:`~.poplibs_float_conv2d.form_floors` (serial and swapped forms) and the
horizontal MAC's and outer product's floors (:func:`~.poplibs_float_candidates.float_method`).

ipusim runs it when it has its AMP grouping (8 input channels a group, partials by 8 on 8
conv units or by 16 on 16); a kernel split runs over tiles (:mod:`.conv_kernel_split`).
The blocks, tiles and costs are ipusim's own for the model's partition, as
:mod:`.poplibs_conv2d_plans` does for HALF.
Not taken (ipusim keeps its own plan): a form with a dimension expanded (the batch
flattened into it), another grouping, another release than ``7eac0f26``, options other
than ``availableMemoryProportion`` at its default, ``partialsType`` and ``pass``.
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
from poplar_api.poplin.poplibs_conv2d_model import uncovered
from poplar_api.poplin.poplibs_float_candidates import float_method
from poplar_api.poplin.poplibs_float_conv2d import (
    FORMS,
    _expands,
    canonical,
    form_floors,
    form_plan,
)
from poplar_api.poplin.poplibs_release import poplibs_release
from poplar_api.types import FLOAT

__all__ = ["adopted_float_conv2d_plan"]

#: Convolution options a covered convolution may have (parsed: ``method`` and ``expand``
#: are always present).
_ALLOWED = {"availableMemoryProportion", "partialsType", "pass", "method", "expand"}
#: The passes the model restates (``None``: pass ``NONE``).
_PASSES = (None, "NONE", "INFERENCE_FWD", "TRAINING_FWD", "TRAINING_BWD")
#: The release whose planner the model restates.
_RELEASE = "7eac0f26"


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _covered(params: ConvParams, opts: Mapping[str, Any], target: Any) -> bool:
    """Whether the model restates the plan of ``params`` with ``opts`` (module docstring)."""
    if not (
        params.inputType == FLOAT
        and params.outputType == FLOAT
        and opts.get("partialsType", FLOAT) == FLOAT
        and opts.get("pass") in _PASSES
        and opts.get("method") in (None, "AMP")
        and opts.get("expand") is None
        and set(opts) <= _ALLOWED
        and float(opts.get("availableMemoryProportion", 0.6)) == 0.6
        and target.getNumTiles() == target.getTilesPerIPU()
        and poplibs_release(target) == _RELEASE
        and params.getNumFieldDims() == 2
    ):
        return False
    try:
        return not uncovered(canonical(params), target, FLOAT, True)
    except ValueError:  # (canonical refuses a flipped input)
        return False


def _plain_below_the_rest(params: ConvParams, conv_pass: str, target: Any) -> dict | None:
    """The plain form's plan (:func:`form_plan`) when every other form's least passes its
    cost (each costed only up to it), else None: the plan of
    :func:`~.poplibs_float_conv2d.best_plan` when that is plain."""
    plain = form_plan(params, conv_pass, target, "plain")
    cycles = plain["cost"][0]
    for form, dims in FORMS.items():
        if dims and all(_expands(canonical(params), d) for d in dims):
            try:
                other = form_plan(params, conv_pass, target, form, limit=cycles)
            except ValueError:  # (no partition of the form fits: no plan)
                continue
            if other["cost"][0] <= cycles:
                return None
    return plain


def _established(params: ConvParams, conv_pass: str, target: Any, best: dict[str, Any]) -> bool:
    """Whether ``best`` (the plain form's plan, below the other forms') is below the serial
    and swapped forms' bounds and the other methods' floors."""
    cycles = best["cost"][0]
    method = float_method(params, conv_pass, target)
    if min(method["hmac"], method["outer product"]) <= cycles:
        return False
    floors = form_floors(params, conv_pass, target, cycles)
    return all(v > cycles for v in floors.values() if v is not None)


def _same_partition(own: ConvPlan, parts: tuple[int, ...], split: int, groups: tuple) -> bool:
    """Whether ``own`` is a one-pass, untransformed AMP plan of partition ``parts``, kernel
    split ``split`` and grouping ``groups`` ``(icg, ocg)``."""
    return (
        own.method == "AMP"
        and not (own.expanded or own.flattened or own.swapped)
        and own.serial == 1
        and own.in_serial == 1
        and own.kernel_split == split
        and tuple(own.parts) == parts
        and (own.in_chans_per_group, own.out_chans_per_group) == groups
    )


def adopted_float_conv2d_plan(
    params: ConvParams, opts: Mapping[str, Any], target: Any, own: ConvPlan | None = None
) -> ConvPlan | None:
    """The plan of the FLOAT convolution ``params`` Poplibs' planner picks, with its kernel
    split, or None when ``params`` is not covered, the pick is not established or ipusim
    cannot run it (module docstring), or when ``own`` (ipusim's own plan, if given)
    already has its partition (the bounds are then not computed)."""
    if not _covered(params, opts, target):
        return None
    conv_pass = opts.get("pass") or "NONE"
    try:
        best = _plain_below_the_rest(params, conv_pass, target)
    except ValueError:  # (nothing fits)
        return None
    if best is None:
        return None
    units, icg, ocg = best["vertex"]
    if amp_groups(FLOAT, FLOAT, target, units)[:2] != (icg, ocg):
        return None
    s = best["splits"]
    split = int(s["kernelSplit[0]"])
    out = [int(x) for x in params.getOutputFieldShape()]
    sizes = (1, params.batchSize, *out, params.outputChannelsPerConvGroup,
             params.inputChannelsPerConvGroup)  # fmt: skip
    splits = (1, s["batchSplit"], s["fieldSplit[0]"], s["fieldSplit[1]"],
              s["outChanSplit.parallel"], s["inChanSplit.parallel"])  # fmt: skip
    grains = (1, 1, 1, 1, ocg, icg)
    blocks = [
        min(_ceil(_ceil(n, g), p) * g, n) for n, p, g in zip(sizes, splits, grains, strict=True)
    ]
    parts = tuple(_ceil(n, b) for n, b in zip(sizes, blocks, strict=True))
    if parts != splits:
        return None
    if own is not None and _same_partition(own, parts, split, (icg, ocg)):
        return None
    if not _established(params, conv_pass, target, best):
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
