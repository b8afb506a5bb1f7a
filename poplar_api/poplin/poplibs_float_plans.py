"""Poplibs' plan of a FLOAT 2-D convolution, as ipusim's planner takes it.

For the convolutions :mod:`.poplibs_float_conv2d` covers (FLOAT inputs, partials and
output, a 2-D field, one conv group, input padding only or an output truncation that
``canonicalize`` takes off, passes ``NONE``, ``INFERENCE_FWD``, ``TRAINING_FWD`` and
``TRAINING_BWD``), ipusim plans the convolution as graphcore/poplibs ``7eac0f26``'s
planner does where the restated model settles that plan (docs/planner.md, "Rows 13-15:
their plans"): the least of the unswapped one-pass AMP forms
(:func:`~.poplibs_float_conv2d.best_plan`: no dimension expanded, dimension 0, dimension 1
or both, the batch flattened into an expanded dimension; its partition the first of equal
ones that popsolver's search reaches, :mod:`.popsolver_order`), strictly below every other
form's least (each costed only up to the least so far), every bound of
:func:`~.poplibs_float_conv2d.form_floors` (serial and swapped forms) and the horizontal
MAC's and outer product's floors (:func:`~.poplibs_float_candidates.hmac_floor`,
:func:`~.poplibs_float_candidates.outer_product_floor`, as
:func:`~.poplibs_float_candidates.float_method` compares them).

ipusim runs it as the whole plan its ``planConstraints`` would give
(:func:`~.conv_constrained_plan.model_plan_constraints`,
:func:`~.conv_constrained_plan.constrained_plan`: the expansion and flattening, the AMP's
units and grouping, the partition with its kernel rows over tiles), when its AMP has that
grouping; the blocks, tiles and costs are ipusim's own for that plan. Not taken (ipusim
keeps its own plan): another release than ``7eac0f26``, options other than
``availableMemoryProportion`` at its default, ``partialsType`` and ``pass``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from poplar_api.errors import GraphError
from poplar_api.poplin.conv_constrained_plan import constrained_plan, model_plan_constraints
from poplar_api.poplin.conv_options import parse_options
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.poplibs_conv2d_model import uncovered
from poplar_api.poplin.poplibs_float_candidates import hmac_floor, outer_product_floor
from poplar_api.poplin.poplibs_float_conv2d import (
    FORMS,
    _expands,
    canonical,
    form_plan,
    iter_form_floors,
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


def _least_form(params: ConvParams, conv_pass: str, target: Any) -> dict[str, Any] | None:
    """The least form's plan (:func:`~.poplibs_float_conv2d.form_plan`) when every other
    form's least passes its cost, else None: the plan of
    :func:`~.poplibs_float_conv2d.best_plan`, each form costed only up to the least so
    far (a form with no plan within the memory bound is left out)."""
    best: dict[str, Any] | None = None
    tied = False
    for form, dims in FORMS.items():
        if not all(_expands(canonical(params), d) for d in dims):
            continue
        limit = None if best is None else best["cost"][0]
        try:
            plan = form_plan(params, conv_pass, target, form, limit=limit)
        except ValueError:
            continue
        if plan is None:  # (no candidate of the form within the least so far)
            continue
        if best is None or plan["cost"][0] < best["cost"][0]:
            best, tied = plan, False
        elif plan["cost"][0] == best["cost"][0]:
            tied = True
    return None if tied else best


def _established(params: ConvParams, conv_pass: str, target: Any, best: dict[str, Any]) -> bool:
    """Whether ``best`` (the least form's plan, below the other forms') is below the serial
    and swapped forms' bounds and the other methods' floors."""
    cycles = best["cost"][0]
    # (float_method's floors of the other methods: its AMP bound is not needed here)
    if min(hmac_floor(params, target), outer_product_floor(params, target)) <= cycles:
        return False
    # (the first bound within the cost settles it: the others are not computed)
    floors = iter_form_floors(params, conv_pass, target, cycles)
    return all(v is None or v > cycles for _, v in floors)


def _same_plan(own: ConvPlan, plan: ConvPlan) -> bool:
    """Whether ``own`` runs ``plan``: the same method, transforms, passes, partition,
    kernel split and grouping."""
    keys = ("method", "expanded", "expanded_dims", "flattened", "swapped", "serial",
            "in_serial", "kernel_split", "parts", "in_chans_per_group",
            "out_chans_per_group", "num_conv_units")  # fmt: skip
    return all(getattr(own, k) == getattr(plan, k) for k in keys)


def adopted_float_conv2d_plan(
    params: ConvParams, opts: Mapping[str, Any], target: Any, own: ConvPlan | None = None
) -> ConvPlan | None:
    """The plan of the FLOAT convolution ``params`` Poplibs' planner picks, with its kernel
    split, or None when ``params`` is not covered, the pick is not established or ipusim
    cannot run it (module docstring), or when ``own`` (ipusim's own plan, if given)
    already runs it (the bounds are then not computed)."""
    if not _covered(params, opts, target):
        return None
    conv_pass = opts.get("pass") or "NONE"
    try:
        best = _least_form(params, conv_pass, target)
    except ValueError:  # (nothing fits)
        return None
    if best is None:
        return None
    raw = {"planConstraints": model_plan_constraints(best)}
    if opts.get("pass") is not None:
        raw["pass"] = opts["pass"]
    try:
        plan = constrained_plan(params, parse_options(raw, "convolution"), target)
    except GraphError:  # (a grouping ipusim's AMP does not run)
        return None
    if own is not None and _same_plan(own, plan):
        return None
    if not _established(params, conv_pass, target, best):
        return None
    return dataclasses.replace(plan, release=_RELEASE)
