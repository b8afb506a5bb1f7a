"""Poplibs' planner cost model of a fully-connected layer's joint plan, restated.

A fully-connected layer ``B x I -> O`` trains with three products (``fc_joint``): the
forward ``[B, I] x [I, O]``, the backward ``[B, O] x [O, I]`` and the weight update
``[I, B] x [B, O]``. For a ``FC_TRAINING_FWD`` product ``createPlan`` (graphcore/poplibs
``7eac0f26``, ``lib/poplin/ConvPlan.cpp``) plans the layer twice and keeps the cheaper
(:func:`fc_layer_plan`):

* **jointly** (``isJointPlan``; :func:`joint_plan`): the forward convolution swapped
  (``getSwapOperandCandidates``), so its field is ``O``, its input channels ``I`` and
  its output channels ``B``, with ``constructModel``'s (``ConvModel.cpp``) joint rules:
  ``outChanSplit.parallel`` 1, ``inChanSplit.serial`` 1, the field grain the vertex's
  input grouping (``createPlan``: ``fieldGrainSize.back() = inChansPerGroup``), AMP
  groupings whose input grouping is a multiple of the conv units
  (``getConvVertexAMPCandidates`` with ``isJointPlan``). Each partition is costed three
  times by ``addEstimates`` and the sum minimised, every pass within the memory bound:

  - the forward pass as it is (``LinearizeTileOrder::STANDARD``);
  - the backward pass (``addBwdEstimates``): the field and input-channel splits and
    sizes exchanged (``bwdP.fieldSplit.back() = p.inChanSplit.parallel`` ...), the
    input grouping and field grain both the forward input grouping, the forward vertex
    type (``getFullyConnectedBwdConvVertexType``), tile order ``FC_BWD_AS_CONV``;
  - the weight update (``addWuEstimates``): the input- and output-channel splits and
    groupings exchanged, the field in the forward field's grains, tile order ``FC_WU``;
    its vertex ``getFullyConnectedWuConvVertexType``: the AMP (the forward input
    grouping is not 1) with the forward groupings exchanged, the front of
    ``getConvVertexTypeCandidates`` under those constraints
    (``sortConvVertexTypeCandidates``: most MACs a cycle, then least padding, then the
    smaller partials), so HALF partials when the update's input channels (``B``) fit one
    group of 16 (:func:`wu_vertex`). With 8 input channels a group the AMP is the
    ``ConvPartialnx1`` vertex with its kernel padding
    (:mod:`.poplibs_amp_estimates`).

  ``addTransformCycleEstimate``'s joint rules: the backward pass does not rearrange its
  input, the weight update not its output (:class:`~.poplibs_matmul_model.Product`'s
  ``joint``); ``addRearrangeBeforeSliceEstimate`` is 0. Only the forward pass's tile
  order exchanges inputs at the supertile's double rate (``ExchangeEstimator``).
* **separately**: each pass alone, as :func:`~.poplibs_matmul_model.poplibs_matmul_plan`
  restates it.

``separatePlanHasLowerCost``: the separate plans when, both within the bound, their
summed cycles are strictly lower, or only they fit, or, neither fitting, they need fewer
bytes. What is not restated is listed in :func:`joint_plan`'s docstring and in
``docs/planner.md``; derived from the source, not a port.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.poplin.conv_planner import amp_unit_options
from poplar_api.poplin.poplibs_mac_estimates import hmac_partial_cycles, vmac_floor
from poplar_api.poplin.poplibs_matmul_model import (
    SPLIT_NAMES,
    WEIGHTS_PER_CONV_UNIT,
    Product,
    _splits,
    costs,
    poplibs_matmul_plan,
)
from poplar_api.poplin.poplibs_release import DEFAULT_RELEASE, pads_serial_splits
from poplar_api.types import FLOAT, HALF

__all__ = [
    "describe_joint",
    "fc_layer_plan",
    "fwd_vertex_types",
    "hmac_joint_floor",
    "joint_plan",
    "separate_has_lower_cost",
    "wu_vertex",
]

#: ``getFullyConnectedPassParams``: per pass, the positions in the layer ``(G, B, I, O)``
#: of its product's ``(G, M, K, N)``.
PASS_PRODUCT = {
    "FC_TRAINING_FWD": (0, 1, 2, 3), "FC_TRAINING_BWD": (0, 1, 3, 2),
    "FC_TRAINING_WU": (0, 2, 1, 3),
}  # fmt: skip


def fwd_vertex_types(layer: tuple[int, int, int, int], target: Any) -> list[tuple[int, int]]:
    """``(inChansPerGroup, partialChansPerGroup)`` of the joint forward pass's AMP
    candidates with FLOAT partials, in ``sortConvVertexTypeCandidates``' order: input
    groupings of 16 down to 1 that divide the chain's 16 weights, are a multiple of the
    4 elements loaded a cycle (``canUseConvolutionInstruction``) and, jointly, of the
    conv units; partial groupings of the units and 16 (``getConvVertexAMPCandidates``);
    sorted by padding of the ``I x B`` channels (every candidate has the same MACs a
    cycle), then by grouping (the candidates' ``operator<``)."""
    units = max(amp_unit_options(HALF, FLOAT, target))
    w = WEIGHTS_PER_CONV_UNIT["half"]
    _, b, i, _ = layer
    out = []
    for icg in range(w, 0, -1):
        if w % icg or icg % 4 or icg % units:
            continue
        for ocg in sorted({units, w}):
            if ocg % units == 0:
                size = i * b
                padded = -(-i // icg) * icg * -(-b // ocg) * ocg
                out.append(((padded - size) / padded, (icg, ocg)))
    return [groups for _, groups in sorted(out)]


def wu_vertex(
    layer: tuple[int, int, int, int], groups: tuple[int, int], target: Any
) -> tuple[tuple[int, int], int, str]:
    """``((inChansPerGroup, partialChansPerGroup), convUnits, partials)`` of the joint
    weight update of a forward pass grouped ``groups`` (``getFullyConnectedWuConvVertexType``):
    the groupings exchanged, the first of ``getConvVertexAMPCandidates``' candidates in
    ``sortConvVertexTypeCandidates``' order. HALF partials are candidates when the
    update's ``B`` input channels round to one group of 16 (a HALF output is smaller than
    the partials and the kernel is 1 x 1), with the target's HALF-partials units or 8
    (``partials`` a multiple of the units and either the units or 16, not more than
    fewer units than the target has); most MACs a cycle first (units x 4), then HALF
    before FLOAT. Else FLOAT partials on the FLOAT units."""
    wicg, wocg = groups[1], groups[0]
    w = WEIGHTS_PER_CONV_UNIT["half"]
    b = layer[1]
    if -(-b // wicg) * wicg == w:
        on_ipu = max(amp_unit_options(HALF, HALF, target))
        for units in sorted({on_ipu, 8}, reverse=True):
            if wocg % units or wocg not in (units, w) or (wocg > units and units < on_ipu):
                continue
            return (wicg, wocg), units, "half"
    return (wicg, wocg), max(amp_unit_options(HALF, FLOAT, target)), "float"


def _joint_splits(fwd: Product, tiles: int) -> dict[str, np.ndarray]:
    """Every forward partition of a joint plan: ``outChanSplit.parallel`` 1, the serial
    output-channel split up to the grains (at f927358 a factor of the channels), input
    channels never serial, the parallel splits' product at most the tiles."""
    g, b, i, o = fwd.dims
    icg, ocg = fwd.groups
    gs, _ = _splits(g, tiles)
    fs, _ = _splits(-(-o // icg), tiles)
    pi, _ = _splits(-(-i // icg), tiles)
    so, _ = _splits(-(-b // ocg), -(-b // ocg))
    so = so[[pads_serial_splits(fwd.release) or b % int(s) == 0 for s in so]]
    g_, f_, i_, s_ = (x.ravel() for x in np.meshgrid(gs, fs, pi, so, indexing="ij"))
    keep = g_ * f_ * i_ <= tiles
    n = int(keep.sum())
    one = np.ones(n, np.int64)
    return {"convGroupSplit": g_[keep], "fieldSplit": f_[keep], "outChanSplit.parallel": one,
            "outChanSplit.serial": s_[keep], "inChanSplit.parallel": i_[keep],
            "inChanSplit.serial": one}  # fmt: skip


def _pass_costs(
    layer: tuple[int, int, int, int], groups: tuple[int, int], target: Any, release: str
) -> tuple[dict[str, np.ndarray], dict[str, Any], tuple[tuple[int, int], int, str]]:
    """The three passes' candidates of one forward vertex type, row for row."""
    icg, ocg = groups
    units = max(amp_unit_options(HALF, FLOAT, target))
    prods = {p: tuple(int(layer[j]) for j in PASS_PRODUCT[p]) for p in PASS_PRODUCT}
    fwd = Product(prods["FC_TRAINING_FWD"], target, True, groups, "FC_TRAINING_FWD", units,
                  release, grain=icg, joint=True)  # fmt: skip
    splits = _joint_splits(fwd, target.getNumTiles())
    fs, pi, so = splits["fieldSplit"], splits["inChanSplit.parallel"], splits["outChanSplit.serial"]
    bwd = Product(prods["FC_TRAINING_BWD"], target, True, groups, "FC_TRAINING_BWD", units,
                  release, grain=icg, joint=True, standard_order=False)  # fmt: skip
    bwd_splits = dict(splits, fieldSplit=pi, **{"inChanSplit.parallel": fs})
    wu_groups, wu_units, wu_partials = wu_vertex(layer, groups, target)
    wu = Product(prods["FC_TRAINING_WU"], target, True, wu_groups, "FC_TRAINING_WU", wu_units,
                 release, partials=wu_partials, grain=icg, joint=True,
                 standard_order=False)  # fmt: skip
    one = np.ones(fs.size, np.int64)
    wu_splits = dict(splits, **{"outChanSplit.parallel": pi, "inChanSplit.parallel": one})
    # the weight update's sizes are the forward pass's, exchanged (addWuEstimates)
    g, b, i, o = layer
    fg, bg, ig = -(-o // icg), -(-b // ocg), -(-i // icg)
    tile = {"gt": -(-g // splits["convGroupSplit"]), "ft": -(-fg // fs) * icg,
            "cit": -(-bg // so) * ocg, "cot": -(-ig // pi) * icg}  # fmt: skip
    out = {
        "FC_TRAINING_FWD": costs(fwd, splits, keep_all=True),
        "FC_TRAINING_BWD": costs(bwd, bwd_splits, keep_all=True),
        "FC_TRAINING_WU": costs(wu, wu_splits, tile, keep_all=True),
    }
    return out["FC_TRAINING_FWD"].splits, out, (wu_groups, wu_units, wu_partials)


def joint_plan(
    layer: tuple[int, int, int, int],
    target: Any,
    proportion: float = 0.6,
    release: str = DEFAULT_RELEASE,
) -> dict[str, Any] | None:
    """The joint plan Poplibs' ``createPlan`` picks for the HALF layer ``(G, B, I, O)``
    (FLOAT partials, default options) among the AMP candidates of
    :func:`fwd_vertex_types`, or None when no candidate keeps every pass within
    ``proportion`` of the tile (``minimizeMemory``'s retries are not restated).

    Returns the forward ``groups``, the ``splits`` of the forward partition (by
    :data:`~.poplibs_matmul_model.SPLIT_NAMES`), ``broadcast``, ``cost`` ``(summed
    cycles, largest temporary bytes)``, ``passes``: per pass its ``(cycles, bytes)``
    and ``terms``, ``wu_vertex`` (:func:`wu_vertex`) and ``ties``. A later vertex type
    replaces an earlier only at a strictly lower cost (``PlanningObjective::lowerCost``).

    Not restated: the horizontal-MAC joint candidates (bounded instead:
    :func:`fc_layer_plan`'s ``hmac_floor``), the vertical MAC (its vertex takes one output
    channel a tile, and the joint forward pass keeps all ``B`` on each) and the outer
    product (one input channel); the pruning constraint on the backward and weight-update
    passes' MACs uses each product's own padded sizes where Poplibs' uses the forward
    pass's parameters with the field and channels exchanged (the same product here).
    """
    bound = int(target.getBytesPerTile() * proportion)
    best: dict[str, Any] | None = None
    for groups in fwd_vertex_types(layer, target):
        splits, per, wu = _pass_costs(layer, groups, target, release)
        cycles = sum(c.cycles for c in per.values())
        temp = np.maximum.reduce([c.temp_bytes for c in per.values()])
        ok = np.logical_and.reduce([c.ok for c in per.values()]) & (temp <= bound)
        if not ok.any():
            continue
        key = np.where(ok, cycles, np.iinfo(np.int64).max)
        at = np.flatnonzero(key == key.min())
        j = int(at[np.argmin(temp[at])])
        cost = (int(cycles[j]), int(temp[j]))
        if best is None or cost < best["cost"]:
            ties = int((ok & (cycles == cost[0]) & (temp == cost[1])).sum())
            best = {
                "groups": groups, "cost": cost, "ties": ties, "wu_vertex": wu,
                "broadcast": bool(per["FC_TRAINING_FWD"].broadcast[j]),
                "splits": {k: int(splits[k][j]) for k in SPLIT_NAMES},
                "passes": {p: ((int(c.cycles[j]), int(c.temp_bytes[j])),
                               {k: int(v[j]) for k, v in c.terms.items()})
                           for p, c in per.items()},
            }  # fmt: skip
    return best


def separate_has_lower_cost(
    separate: tuple[int, int], joint: tuple[int, int] | None, bound: int
) -> bool:
    """``createPlan``'s ``separatePlanHasLowerCost`` for ``(cycles, temporary bytes)``
    costs (``joint`` None: no joint plan): when the separate plans fit the bound, if
    the joint plan does not or they take strictly fewer cycles; when they do not fit,
    if the joint plan does not either and they take fewer bytes."""
    if joint is None:
        return True
    if separate[1] <= bound:
        return joint[1] > bound or separate[0] < joint[0]
    return joint[1] > bound and separate[1] < joint[1]


def hmac_joint_floor(layer: tuple[int, int, int, int], target: Any) -> int:
    """A lower bound of every joint plan whose forward pass is the horizontal MAC: the
    least, over the joint HMAC groupings (``getConvVertexHMACCandidates`` with
    ``isJointPlan``: HALF input groupings from 2 in steps of 2 where the number of groups
    drops, each 1 or a multiple of the conv units; one FLOAT partial channel a group)
    and every joint partition with its serial split of ``B``, of the forward and
    backward passes' partial sums (:func:`~.poplibs_mac_estimates.hmac_partial_cycles`;
    the backward pass runs the forward method with the field and input channels
    exchanged, ``getFullyConnectedBwdMethod``); every other term is at least 0."""
    g, b, i, o = (int(x) for x in layer)
    tiles, workers = target.getNumTiles(), target.getNumWorkerContexts()
    units = max(amp_unit_options(HALF, FLOAT, target))
    best = np.iinfo(np.int64).max
    previous = 0
    rounded = -(-i // 2) * 2
    so, _ = _splits(b, b)
    for icg in range(2, rounded + 1, 2):
        groups = -(-rounded // icg)
        if groups == previous or icg % units:
            continue
        previous = groups
        fs, _ = _splits(-(-o // icg), tiles)
        pi, _ = _splits(-(-i // icg), tiles)
        gs, _ = _splits(g, tiles)
        g_, f_, i_, s_ = (x.ravel() for x in np.meshgrid(gs, fs, pi, so, indexing="ij"))
        keep = g_ * f_ * i_ <= tiles
        g_, f_, i_, s_ = g_[keep], f_[keep], i_[keep], s_[keep]
        fg, ig = -(-o // icg), -(-i // icg)
        ft, cit = -(-fg // f_) * icg, -(-ig // i_) * icg
        gt, cot = -(-g // g_), -(-b // s_)
        both = hmac_partial_cycles(ft, cit, cot, gt, icg, workers) + hmac_partial_cycles(
            cit, ft, cot, gt, icg, workers
        )
        best = min(best, int((both * s_).min()))
    return int(best)


def describe_joint(plan: dict[str, Any]) -> str:
    """A :func:`joint_plan` result as ``docs/planner.md`` states it: the forward AMP
    groupings, the forward partition (``fieldSplit``, ``inChanSplit.parallel``; the output
    channels are never split over tiles), serial passes, the weight update's vertex, and
    the summed cycles and largest temporary bytes."""
    s = plan["splits"]
    icg, ocg = plan["groups"]
    text = (f"AMP {icg} / {ocg}, field {s['fieldSplit']} \N{MULTIPLICATION SIGN} Ci "
            f"{s['inChanSplit.parallel']}")  # fmt: skip
    if s["outChanSplit.serial"] > 1:
        text += f" in {s['outChanSplit.serial']} batch passes"
    (wicg, wocg), units, partials = plan["wu_vertex"]
    text += f", weight update AMP {wicg} / {wocg} ({units} units, {partials} partials)"
    cycles, temp = plan["cost"]
    return f"{text}, {cycles:,} cycles / {temp:,} B"


def fc_layer_plan(
    layer: tuple[int, int, int, int],
    target: Any,
    proportion: float = 0.6,
    release: str = DEFAULT_RELEASE,
) -> dict[str, Any]:
    """Whether Poplibs plans the HALF layer ``(G, B, I, O)`` jointly or separately
    (``createPlan``'s ``separatePlanHasLowerCost``), with both plans.

    Returns ``joint`` (:func:`joint_plan`), ``separate``: per pass the
    :func:`~.poplibs_matmul_model.poplibs_matmul_plan` of its product with its pass,
    ``separate_cost`` (summed cycles, largest bytes), ``mac_floor``: a lower bound of
    any joint plan with a MAC forward pass (:func:`hmac_joint_floor`; the vertical MAC's
    forward pass alone, :func:`~.poplibs_mac_estimates.vmac_floor`: the joint partitions
    are some of the swapped product's), ``pick``: ``"joint"`` or ``"separate"`` of the
    AMP joint plan and the separate plans (:func:`separate_has_lower_cost`), and
    ``established``: whether the pick is Poplibs' whatever the MAC joint plans cost
    (``mac_floor`` above the picked plan's cycles, both plans within the bound).
    """
    bound = int(target.getBytesPerTile() * proportion)
    joint = joint_plan(layer, target, proportion, release)
    separate = {
        p: poplibs_matmul_plan(
            tuple(int(layer[j]) for j in PASS_PRODUCT[p]), target, p, proportion, release=release
        )
        for p in PASS_PRODUCT
    }
    sep = (sum(s["cost"][0] for s in separate.values()),
           max(s["cost"][1] for s in separate.values()))  # fmt: skip
    fwd = tuple(int(layer[j]) for j in PASS_PRODUCT["FC_TRAINING_FWD"])
    floor = min(hmac_joint_floor(layer, target), vmac_floor(fwd, target, True))
    wins = separate_has_lower_cost(sep, joint["cost"] if joint else None, bound)
    picked = sep if wins or joint is None else joint["cost"]
    return {"joint": joint, "separate": separate, "separate_cost": sep, "mac_floor": floor,
            "pick": "separate" if wins else "joint",
            "established": floor > picked[0] and picked[1] <= bound}  # fmt: skip
