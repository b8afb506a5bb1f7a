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
  input grouping (``createPlan``: ``fieldGrainSize.back() = inChansPerGroup``), AMP and
  horizontal-MAC input groupings that are multiples of the conv units
  (``getConvVertexAMPCandidates``, ``getConvVertexHMACCandidates`` with ``isJointPlan``;
  :func:`fwd_vertex_types`). Each partition is costed three times by ``addEstimates``
  and the sum minimised, every pass within the memory bound:

  - the forward pass as it is (``LinearizeTileOrder::STANDARD``);
  - the backward pass (``addBwdEstimates``): the field and input-channel splits and
    sizes exchanged (``bwdP.fieldSplit.back() = p.inChanSplit.parallel`` ...), the
    input grouping and field grain both the forward input grouping, the forward vertex
    type (``getFullyConnectedBwdConvVertexType``), tile order ``FC_BWD_AS_CONV``;
  - the weight update (``addWuEstimates``): the input- and output-channel splits and
    groupings exchanged, the field in the forward field's grains, tile order ``FC_WU``;
    its vertex (:func:`wu_vertex`, ``getFullyConnectedWUMethod`` and
    ``getFullyConnectedWuConvVertexType``): after a horizontal-MAC forward pass of batch
    1 the outer product, else the AMP (the forward input grouping is not 1), the front
    of ``getConvVertexTypeCandidates`` (:func:`amp_candidates`;
    ``sortConvVertexTypeCandidates``: most MACs a cycle, then least padding, then the
    smaller partials), after an AMP forward pass with the forward groupings exchanged,
    so HALF partials when the update's input channels (``B``) fit one group of 16. With
    fewer than 16 input channels a group the AMP is the ``ConvPartialnx1`` vertex with
    its kernel padding (:mod:`.poplibs_amp_estimates`).

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
from poplar_api.poplin.poplibs_mac_estimates import vmac_floor
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
    "amp_candidates",
    "describe_joint",
    "fc_layer_plan",
    "fwd_vertex_types",
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


def fwd_vertex_types(
    layer: tuple[int, int, int, int], target: Any
) -> list[tuple[str, tuple[int, int]]]:
    """``(method, (inChansPerGroup, partialChansPerGroup))`` of the joint forward pass's
    candidates with FLOAT partials (``getConvVertexTypeCandidates`` with ``isJointPlan``),
    in ``sortConvVertexTypeCandidates``' order: most MACs a cycle on the channels that
    are not padding first (``getMaxMACsPerCyclePerTile``: the AMP's units times 4, the
    horizontal MAC's vector width 4), then least padding of the ``I x B`` channels, then
    the grouping (the candidates' ``operator<``; the AMP before the horizontal MAC where
    all else ties).

    * the AMP (``getConvVertexAMPCandidates``): input groupings of 16 down to 1 that
      divide the chain's 16 weights, are a multiple of the 4 elements loaded a cycle
      (``canUseConvolutionInstruction``) and, jointly, of the conv units; partial
      groupings of the units and 16;
    * the horizontal MAC (``getConvVertexHMACCandidates``): HALF input groupings from 2 in
      steps of 2 where the number of groups drops, jointly only multiples of the conv
      units; one FLOAT partial channel a group.
    """
    units = max(amp_unit_options(HALF, FLOAT, target))
    w = WEIGHTS_PER_CONV_UNIT["half"]
    _, b, i, _ = layer
    out = []

    def add(method: str, macs: int, icg: int, ocg: int) -> None:
        padded = -(-i // icg) * icg * -(-b // ocg) * ocg
        pad = (padded - i * b) / padded
        out.append((-macs * (1 - pad), pad, method != "AMP", icg, ocg, method))

    for icg in range(w, 0, -1):
        if w % icg == 0 and icg % 4 == 0 and icg % units == 0:
            for ocg in sorted({units, w}):
                add("AMP", units * 4, icg, ocg)
    rounded, previous = -(-i // 2) * 2, 0
    for icg in range(2, rounded + 1, 2):
        groups = -(-rounded // icg)
        if groups != previous and icg % units == 0:
            add("HMAC", 4, icg, 1)
            previous = groups
    return [(c[5], (c[3], c[4])) for c in sorted(out)]


def amp_candidates(
    ci: int, co: int, target: Any, want: tuple[int, int] | None = None
) -> list[tuple[tuple[int, int], int, str]]:
    """``((inChansPerGroup, partialChansPerGroup), convUnits, partials)`` of the AMP
    candidates of a HALF pass (not a joint forward pass) of ``ci`` input and ``co``
    output channels and a 1 x 1 kernel, ``want`` the groupings a plan constraint names,
    in ``sortConvVertexTypeCandidates``' order (``getConvVertexAMPCandidates``,
    ``ConvVertexType.cpp``).

    Per partials type (HALF first, when ``ci`` rounds to one group of 16: a HALF output is
    smaller than the FLOAT partials): unit counts the target's for it and 8 if more;
    partial groupings those units, 16 and 8 if the target has more; input groupings 16
    down to 1; kept when the partial grouping is the units' or 16, a multiple of the
    units, not above fewer units than the target has, and the input grouping divides 16
    and is a multiple of 4. Sorted by most MACs a cycle on the channels that are not
    padding (units x 4), then least padding, then smaller partials, then grouping."""
    w = WEIGHTS_PER_CONV_UNIT["half"]
    out: dict[tuple[tuple[int, int], int, str], tuple] = {}
    for ptype, name in ((HALF, "half"), (FLOAT, "float")):
        if name == "half" and -(-ci // 16) * 16 != w:
            continue
        on_ipu = max(amp_unit_options(HALF, ptype, target))
        unit_options = [on_ipu] + ([8] if on_ipu > 8 else [])
        partial_options = [on_ipu] + ([w] if w > on_ipu else []) + ([8] if on_ipu > 8 else [])
        for units in unit_options:
            for icg in range(w, 0, -1):
                for ocg in partial_options:
                    if (want and (icg, ocg) != want) or (ocg > units and units < on_ipu):
                        continue
                    if ocg not in (units, w) or w % icg or ocg % units or icg % 4:
                        continue
                    if name == "half" and -(-ci // icg) * icg != w:
                        continue
                    padded = -(-ci // icg) * icg * -(-co // ocg) * ocg
                    pad = (padded - ci * co) / padded
                    key = ((icg, ocg), units, name)
                    out.setdefault(key, (-units * 4 * (1 - pad), pad, ptype.size, icg, ocg))
    return sorted(out, key=lambda k: out[k])


def wu_vertex(
    layer: tuple[int, int, int, int], method: str, groups: tuple[int, int], target: Any
) -> tuple[str, tuple[int, int], int, str]:
    """``(method, (inChansPerGroup, partialChansPerGroup), convUnits, partials)`` of the
    joint weight update of a forward pass of ``method`` grouped ``groups``
    (``getFullyConnectedWUMethod`` and ``getFullyConnectedWuConvVertexType``,
    ``ConvModel.cpp``): the outer product when the update has one input channel (``B``
    1) and the forward pass one partial channel a group, its partials grouped by the
    forward input grouping, in HALF; else the AMP, the first of :func:`amp_candidates`
    for the update's ``B`` input and ``I`` output channels, constrained to the forward
    groupings exchanged when the forward pass is the AMP."""
    icg, ocg = groups
    b, i = layer[1], layer[2]
    if b == 1 and ocg == 1:
        return "OUTER_PRODUCT", (1, icg), 0, "half"
    want = (ocg, icg) if method == "AMP" else None
    wu_groups, units, partials = amp_candidates(b, i, target, want)[0]
    return "AMP", wu_groups, units, partials


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
    layer: tuple[int, int, int, int],
    method: str,
    groups: tuple[int, int],
    target: Any,
    release: str,
) -> tuple[dict[str, np.ndarray], dict[str, Any], tuple[str, tuple[int, int], int, str]]:
    """The three passes' candidates of one forward vertex type, row for row."""
    icg, ocg = groups
    units = max(amp_unit_options(HALF, FLOAT, target))
    prods = {p: tuple(int(layer[j]) for j in PASS_PRODUCT[p]) for p in PASS_PRODUCT}
    fwd = Product(prods["FC_TRAINING_FWD"], target, True, groups, "FC_TRAINING_FWD", units,
                  release, method, grain=icg, joint=True)  # fmt: skip
    splits = _joint_splits(fwd, target.getNumTiles())
    fs, pi, so = splits["fieldSplit"], splits["inChanSplit.parallel"], splits["outChanSplit.serial"]
    bwd = Product(prods["FC_TRAINING_BWD"], target, True, groups, "FC_TRAINING_BWD", units,
                  release, method, grain=icg, joint=True, standard_order=False)  # fmt: skip
    bwd_splits = dict(splits, fieldSplit=pi, **{"inChanSplit.parallel": fs})
    wu = wu_vertex(layer, method, groups, target)
    wu_p = Product(prods["FC_TRAINING_WU"], target, True, wu[1], "FC_TRAINING_WU", wu[2] or units,
                   release, wu[0], partials=wu[3], grain=icg, joint=True,
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
        "FC_TRAINING_WU": costs(wu_p, wu_splits, tile, keep_all=True),
    }
    return out["FC_TRAINING_FWD"].splits, out, wu


def joint_plan(
    layer: tuple[int, int, int, int],
    target: Any,
    proportion: float = 0.6,
    release: str = DEFAULT_RELEASE,
) -> dict[str, Any] | None:
    """The joint plan Poplibs' ``createPlan`` picks for the HALF layer ``(G, B, I, O)``
    (FLOAT partials, default options) among the AMP and horizontal-MAC candidates of
    :func:`fwd_vertex_types`, or None when no candidate keeps every pass within
    ``proportion`` of the tile (``minimizeMemory``'s retries are not restated).

    Returns the forward ``method`` and ``groups``, the ``splits`` of the forward partition (by
    :data:`~.poplibs_matmul_model.SPLIT_NAMES`), ``broadcast``, ``cost`` ``(summed
    cycles, largest temporary bytes)``, ``passes``: per pass its ``(cycles, bytes)``
    and ``terms``, ``wu_vertex`` (:func:`wu_vertex`) and ``ties``. A later vertex type
    replaces an earlier only at a strictly lower cost (``PlanningObjective::lowerCost``).

    Not restated: the vertical MAC (bounded instead: :func:`fc_layer_plan`'s
    ``mac_floor``) and the outer product as the forward vertex (it needs one input
    channel); the pruning constraint on the backward and weight-update
    passes' MACs uses each product's own padded sizes where Poplibs' uses the forward
    pass's parameters with the field and channels exchanged (the same product here).
    """
    bound = int(target.getBytesPerTile() * proportion)
    best: dict[str, Any] | None = None
    for method, groups in fwd_vertex_types(layer, target):
        splits, per, wu = _pass_costs(layer, method, groups, target, release)
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
                "method": method, "groups": groups, "cost": cost, "ties": ties, "wu_vertex": wu,
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


def describe_joint(plan: dict[str, Any]) -> str:
    """A :func:`joint_plan` result as ``docs/planner.md`` states it: the forward method
    and groupings, the forward partition (``fieldSplit``, ``inChanSplit.parallel``; the
    output channels are never split over tiles), serial passes, the weight update's
    vertex, and the summed cycles and largest temporary bytes."""
    s = plan["splits"]
    icg, ocg = plan["groups"]
    text = (f"{plan['method']} {icg} / {ocg}, field {s['fieldSplit']} \N{MULTIPLICATION SIGN} Ci "
            f"{s['inChanSplit.parallel']}")  # fmt: skip
    if s["outChanSplit.serial"] > 1:
        text += f" in {s['outChanSplit.serial']} batch passes"
    method, (wicg, wocg), units, partials = plan["wu_vertex"]
    if method == "AMP":
        text += f", weight update AMP {wicg} / {wocg} ({units} units, {partials} partials)"
    else:
        text += f", weight update {method.replace('_', ' ').lower()} grouped by {wocg}"
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
    any joint plan whose forward pass is the vertical MAC (its forward pass alone,
    :func:`~.poplibs_mac_estimates.vmac_floor`: the joint partitions are some of the
    swapped product's), ``pick``: ``"joint"`` or ``"separate"`` of the joint plan and the
    separate plans (:func:`separate_has_lower_cost`), and ``established``: whether the
    pick is Poplibs' whatever a vertical-MAC joint plan costs (``mac_floor`` above the
    picked plan's cycles, the plan within the bound).
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
    floor = vmac_floor(fwd, target, True)
    wins = separate_has_lower_cost(sep, joint["cost"] if joint else None, bound)
    picked = sep if wins or joint is None else joint["cost"]
    return {"joint": joint, "separate": separate, "separate_cost": sep, "mac_floor": floor,
            "pick": "separate" if wins else "joint",
            "established": floor > picked[0] and picked[1] <= bound}  # fmt: skip
