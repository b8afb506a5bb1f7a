"""Poplibs' plan of a HALF matMul product, as ipusim's planner takes it.

For the products :mod:`~poplar_api.poplin.poplibs_matmul_model` restates Poplibs' planner
for (graphcore/poplibs ``7eac0f26``: ``createPlan`` over both operand orders, the
``ConvPartial1x1Out`` AMP candidates, ``constructModel``'s partitions and
``addEstimates``' costs), ipusim plans a product as that model picks it: operand order,
partition (``fieldSplit``, ``outChanSplit``, ``inChanSplit``, ``convGroupSplit``), serial
passes and their kind, and the AMP grouping. The plan's blocks, tiles and costs are then
ipusim's own for that partition (:func:`~poplar_api.poplin.conv_planner._gather` on the
given split, the vertex estimate of its largest block), so the cost a plan reports is
ipusim's estimate of Poplibs' plan. The model plans as the graph's Poplibs release
(:mod:`.poplibs_release`): at ``f927358`` serial splits divide the channels and no inputs
are broadcast before the loop.

A product is covered (:func:`covered_options`, :func:`model_plan`) when it is what the
model restates and its plan is provably Poplibs' (``docs/planner.md``, "Poplibs' plans of
rows 1-6 and 10-12"):

* HALF operands and output, FLOAT partials, planned alone (``NONE_MATMUL`` or a
  fully-connected pass not planned jointly), on one IPU, with no option but
  ``availableMemoryProportion``, ``partialsType``, ``remapOutputTensor`` (which only
  remaps the output after the convolution) and a ``planConstraints`` naming the AMP or
  the operand order;
* more than 16 input channels ``K``: HALF partials are not a candidate
  (``getConvVertexAMPCandidates``), and an AMP with fewer input channels per group is
  not strictly cheaper than the same partition with 16 (``docs/planner.md``); or at most
  16, for a fully-connected training pass planned as ``7eac0f26``, where the model also
  searches the AMP with HALF partials (:func:`~.poplibs_matmul_model.vertex_types`:
  ``getConvVertexAMPCandidates`` at graphcore/poplibs ``7eac0f26``,
  ``lib/poplin/ConvVertexType.cpp``, offers them when the output type is smaller than
  the partials', the kernel is 1x1 and the input channels padded to the grouping make
  one group of ``getWeightsPerConvUnit``, 16 HALF) and SLIC is no candidate
  (``getConvMethodCandidates`` leaves it out of the fully-connected passes), so the bound
  below covers every other method (``getMaxMACsPerCyclePerTile``, ``ConvModel.cpp``:
  the input type's vector width for the MAC vertices and the outer product, whatever
  the partials);
* ``M K N / (4 T)`` cycles (``T`` tiles; ``getMaxMACsPerCyclePerTile`` 4 HALF for the
  MAC vertices, ``constructModel``'s lower bound of their partial sums) above the plan's
  cycles: no horizontal or vertical MAC, SLIC or outer-product plan can be cheaper; or,
  for a fully-connected pass (no SLIC candidate, ``getConvMethodCandidates``), the
  vertical MAC's floor (:func:`~.poplibs_mac_estimates.vmac_floor`) above them, the
  model having searched the horizontal MAC.

A serial split runs as Poplibs runs it: every iteration but the last has the channel
grains shared out and rounded up (``getOutChansPerSerialSplit``,
``getInChansPerSerialSplit``), the last the rest (:mod:`.conv_serial`). A covered plan that
ipusim cannot run is not taken (:func:`adopted_plan` returns None and ipusim's own search
plans the product): the model's 16 partial channels per group (ipusim's AMP for HALF
inputs with FLOAT partials has 8 conv units). A plan with HALF partials (the plan's
partial type, ``ConvVertexType::partialType``, whatever the ``partialsType`` option) runs
on ipusim's AMP for HALF inputs and partials with the plan's conv units and grouping
(``ConvPartial1x1Out<half, half>``): its one input group's single-precision sum is
rounded to HALF into the partials, which are the output when the input channels are not
split (no reduction, no cast: ``docs/planner.md``, "Row 9's half partials"). A
horizontal-MAC plan runs its input grouping. Inputs broadcast before an output-channel
loop (``broadcastInputBeforeLoop``) are exchanged once, before it
(:func:`~.conv_serial.broadcast_inputs`), and the plan's exchange estimate counts them
once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import (
    COST_KEYS,
    PHASE_OVERHEAD_CYCLES,
    ConvPlan,
    _gather,
    amp_groups,
    plan_from,
)
from poplar_api.poplin.conv_transform import MATMUL_PASSES
from poplar_api.poplin.conv_vertex_estimates import largest_block_estimate
from poplar_api.poplin.estimators import exchange_cycles
from poplar_api.poplin.poplibs_mac_estimates import vmac_floor
from poplar_api.poplin.poplibs_matmul_model import poplibs_matmul_plan
from poplar_api.poplin.poplibs_release import (
    amp_common_path_estimate,
    pads_serial_splits,
    poplibs_release,
)
from poplar_api.poplin.serial_estimates import serial_chans
from poplar_api.types import FLOAT, HALF, Type

__all__ = ["adopted_plan", "covered_options", "model_plan"]

#: Convolution options a covered product may have (parsed: ``method`` and ``expand``
#: are always present; ``swap`` is a ``planConstraints`` operand order).
_ALLOWED = {"availableMemoryProportion", "partialsType", "pass", "method", "expand", "swap",
            "planConstraints", "remapOutputTensor"}  # fmt: skip


def covered_options(
    dims: tuple[int, int, int, int],
    in_type: Type,
    out_type: Type,
    opts: Mapping[str, Any],
    target: Any,
) -> bool:
    """Whether the product ``dims`` ``(G, M, K, N)`` with the parsed convolution options
    ``opts`` is of the kind the model restates (the first two conditions of the module
    docstring; the third needs the plan, :func:`model_plan`)."""
    _, _, k, _ = dims
    return (
        in_type == HALF
        and out_type == HALF
        and opts.get("partialsType") == FLOAT
        and opts.get("pass") in MATMUL_PASSES
        and opts.get("method") in (None, "AMP")
        and opts.get("expand") is None
        and set(opts) <= _ALLOWED
        and target.getNumTiles() == target.getTilesPerIPU()
        and (k > 16 or _half_partials_searched(opts, target))
    )


def _half_partials_searched(opts: Mapping[str, Any], target: Any) -> bool:
    """Whether the model searches every candidate of a product of at most 16 input
    channels: a fully-connected training pass (no SLIC candidate) planned as the release
    whose HALF-partials estimates it restates (module docstring)."""
    return opts.get("pass") in MATMUL_PASSES[2:] and amp_common_path_estimate(
        poplibs_release(target)
    )


def model_plan(
    dims: tuple[int, int, int, int], opts: Mapping[str, Any], target: Any
) -> dict[str, Any] | None:
    """The model's plan of a product :func:`covered_options` accepts, or None when the
    MAC vertices' lower bound does not put it beyond doubt (or no plan fits)."""
    swap = opts.get("swap")
    swaps = (True, False) if swap is None else (bool(swap),)
    proportion = float(opts.get("availableMemoryProportion", 0.6))
    try:
        plan = poplibs_matmul_plan(dims, target, opts["pass"], proportion, 8, swaps,
                                   poplibs_release(target))  # fmt: skip
    except ValueError:
        return None
    g, m, k, n = dims
    cost = plan["cost"][0]
    if g * m * k * n // (4 * target.getNumTiles()) > cost:
        return plan
    # the MAC vertices' bound does not rule them out: the model searched the horizontal
    # MAC; a fully-connected pass has no SLIC candidate (getConvMethodCandidates); the
    # vertical MAC's floor must pass the plan's cost
    if opts["pass"] == "NONE_MATMUL":
        return None
    release = poplibs_release(target)
    if min(vmac_floor((g, m, k, n), target, s, release) for s in swaps) <= cost:
        return None
    return plan


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _params(dims: tuple[int, int, int, int], swapped: bool, type_: Type) -> ConvParams:
    """The convolution of the product (its swap: ``B^T A^T``), as ``matMul`` makes it."""
    g, m, k, n = dims
    if swapped:
        m, n = n, m
    return ConvParams(type_, 1, [m], [1], k, n, g, outputType=type_)


def adopted_plan(
    dims: tuple[int, int, int, int],
    in_type: Type,
    out_type: Type,
    opts: Mapping[str, Any],
    target: Any,
) -> tuple[ConvParams, ConvPlan] | None:
    """The convolution ``matMul`` runs for the product ``dims`` and the plan of it
    Poplibs' planner picks, or None when the product is not covered or ipusim cannot run
    that plan (module docstring)."""
    if not covered_options(dims, in_type, out_type, opts, target):
        return None
    plan = model_plan(dims, opts, target)
    if plan is None:
        return None
    partials = HALF if plan["partials"] == "half" else FLOAT
    units = int(plan["units"]) if partials == HALF else 8
    icg, ocg, units, _ = amp_groups(HALF, partials, target, units)
    method: tuple[str, int] = ("AMP", units)
    if plan["method"] == "HMAC" and partials == FLOAT:
        icg, ocg = plan["groups"]
        method = ("HMAC", icg)
    elif (plan["method"], tuple(plan["groups"])) != ("AMP", (icg, ocg)):
        return None
    s = plan["splits"]
    params = _params(dims, plan["swapped"], in_type)
    so, si = s["outChanSplit.serial"], s["inChanSplit.serial"]
    co, ci = params.outputChannelsPerConvGroup, params.inputChannelsPerConvGroup
    kind, serial = ("in", si) if si > 1 else ("out", so)
    # one iteration's channels as Poplibs runs the split (the last iteration padded in a
    # release that pads, else the channels divided by the split: a factor of them)
    whole = ci if kind == "in" else co
    per = serial_chans(whole, serial, icg if kind == "in" else ocg)
    if not pads_serial_splits(poplibs_release(target)):
        per = whole // serial
    if not 0 < whole - (serial - 1) * per <= per:  # (no iteration left empty)
        return None
    chans = per if per * serial != whole else None
    if kind == "in":
        ci = per
    else:
        co = per
    sizes = (params.numConvGroups, 1, params.getOutputFieldShape()[0], co, ci)
    splits = (s["convGroupSplit"], 1, s["fieldSplit"], s["outChanSplit.parallel"],
              s["inChanSplit.parallel"])  # fmt: skip
    # createPlan's fieldGrainSize: 2 where the partials are grouped by an odd number of
    # channels (the horizontal MAC's 1) and the field is even
    field = sizes[2]
    grains = (1, 1, 2 if ocg % 2 and field % 2 == 0 else 1, ocg, icg)
    # a block of ceil(ceil(n / grain) / split) grains (ceildivConstrainDivisor), at most n
    blocks = [
        min(-(-_ceil(n, g) // p) * g, n) for n, p, g in zip(sizes, splits, grains, strict=True)
    ]
    parts = [_ceil(n, b) for n, b in zip(sizes, blocks, strict=True)]
    if tuple(parts) != splits:  # (each split is the least giving its block: never here)
        return None
    rows = ([np.array([x], np.int64) for x in parts], [np.array([x], np.int64) for x in blocks])
    methods = [method]
    rearrange = opts["pass"] in MATMUL_PASSES[1:]
    cat = _gather(params, methods, partials, target, serial, rearrange, False, opts["pass"],
                  plan["swapped"], kind, rows, chans)  # fmt: skip
    cost = {key: int(cat[key][0]) for key in COST_KEYS}
    release = poplibs_release(target)
    conv = plan_from(cat, 0, methods, params, partials, target, cost, False, plan["swapped"])
    conv = dataclasses.replace(conv, release=release)  # (a horizontal MAC runs its grouping)
    cost["compute"] = int(largest_block_estimate(params, target)(conv)) * serial
    if plan["broadcast"]:
        cost["exchange"] = _broadcast_exchange(params, conv, serial, target)
    cost["total"] = sum(cost[key] for key in COST_KEYS[:-1])
    conv = plan_from(cat, 0, methods, params, partials, target, cost, False, plan["swapped"])
    conv = dataclasses.replace(conv, broadcast=plan["broadcast"], release=release)
    return params, conv


def _broadcast_exchange(params: ConvParams, conv: ConvPlan, serial: int, target: Any) -> int:
    """The exchange cycles of ``conv``'s ``serial`` passes with the inputs broadcast before
    the loop: each pass exchanges its weights, the inputs are exchanged once (the terms
    of :func:`~.conv_planner._candidates`' exchange, inputs and weights apart, for a
    matMul's 1x1 convolution; Poplibs' ``broadcastInputBeforeLoopExchangeCycles``)."""
    size, rate = params.inputType.size, target.getExchangeBytesPerCycle()
    bg, bb, bf, bco, bci = conv.blocks
    _, pb, pf, pco, _ = conv.parts
    field = int(np.prod(params.inputFieldShape))
    owned = bg * bci * params.batchSize * field // (pb * pf) // pco
    inputs = size * max(bg * bb * bf * bci - owned, 0)
    w_elems = bg * bco * bci
    weights = size * (w_elems - w_elems // (pb * pf))
    once = int(exchange_cycles(inputs, rate)) + PHASE_OVERHEAD_CYCLES
    return serial * (int(exchange_cycles(weights, rate)) + PHASE_OVERHEAD_CYCLES) + once
