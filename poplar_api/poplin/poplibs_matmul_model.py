"""Poplibs' planner cost model of a matMul product planned alone, restated exactly.

Poplibs plans ``[G, M, K] x [G, K, N]`` as the convolution of ``getConvParams``
(``lib/poplin/MatMul.cpp`` at graphcore/poplibs ``7eac0f26``): batch ``M``, a 1-wide
field and kernel, ``K`` input and ``N`` output channels, ``G`` groups; ``swapOperands``
exchanges the batch and the output channels (``swapOperands``, ``ConvPlan.cpp``), and
``calculateFlattenedParams`` (``ConvModel.cpp``) flattens the batch into the field, so
the convolution the partition splits has a field of ``F`` positions (``M``, or ``N``
swapped), ``Ci = K`` and ``Co`` (``N``, or ``M``) channels, padded to the vertex's input
and partials groupings (``calculatePaddedParams``).

For one vertex type, ``constructModel`` makes one level of partition variables
(``fieldSplit``, ``batchSplit``, ``outChanSplit.parallel``, ``inChanSplit.parallel``,
``convGroupSplit``; the kernel split of a 1-wide kernel is 1), each the smallest divisor
giving its block (``ceildivConstrainDivisor``), their product at most the tiles, and
``addEstimates`` prices a candidate as the sum of

* exchange (``addExchangeCycleEstimates`` and ``ExchangeEstimator.hpp``): a tile's
  inputs less the share already on it (``floor(inputs / outChanSplit)``) at twice the
  rate when the output-channel split is a multiple of the tiles sharing an exchange
  bus; its weights less ``floor(weights / (fieldSplit batchSplit))``; its partial sums
  (the tile's outputs in the tile-level result type, FLOAT by default), charged
  whether or not the input channels are split; and, for a reduction of more stages,
  each later stage's partials (``getMultiStageReducePlan``); bytes times 16 divided by
  ``round(16 E)`` (``E`` the exchange bytes per cycle), rounded up;
* the rearrangements of ``addTransformCycleEstimate``
  (:func:`~poplar_api.poplin.conv_transform.transform_estimates`);
* the partial sums (``addPartialCalcCycleEstimate``): for the AMP with a full input
  grouping, ``getConvPartial1x1SupervisorOuterLoopCycleEstimate`` of the tile's groups
  over the inner loops of the field split over the workers
  (``partitionConvPartialByWorker``), weights loaded at half the target's coefficient
  load rate (``use128BitConvUnitLoad`` is off by default);
* the reduction (``addReduceCycleEstimate``, ``estimateConvReduceCycles``): the cast of
  the partials when the input channels are not split, else the ``ReduceAdd`` stages.

and the temporary bytes ``max(2 x the largest rearranged tensor per tile, inputs +
weights + partials of a tile, the reduction's partials)``. ``minimize({totalCycles,
totalTempBytes})`` within ``availableMemoryProportion`` of the tile
(``choosePlan``, ``runPlanner``).

A serial split over the output or the input channels (``outChanSplit.serial``,
``inChanSplit.serial``, never both) is a variable of the same search, from 1 to the
channel grains, whatever the memory: ``S`` iterations of the partition's tiles (the
last padded), each with its dynamic slices of the weights (and inputs), update of the
outputs or in-place addition of the partials, the cast once after an input-channel
loop, and, before an output-channel loop, the inputs' exchange and rearrangement once
when ``broadcastInputBeforeLoop`` is chosen (their bytes then live through the loop).
A fully-connected pass planned alone also rearranges its weights before a serial loop
(``addRearrangeBeforeSliceEstimate``). Planned as Poplibs ``f927358`` (``release``,
:mod:`.poplibs_release`), a serial split is a factor of the channels and no inputs are
broadcast before the loop; every other term is 7eac0f26's (docs/planner.md, "Poplibs
releases", lists what else differs and is not modelled).

This module restates those terms for HALF operands and default options (FLOAT partials),
for the AMP candidates with the full input grouping (``ConvPartial1x1Out``), with HALF
partials too where ``getConvVertexAMPCandidates`` offers them (at most 16 input
channels), and for the horizontal MAC (``Plan::Hmac``, its estimate in
:mod:`.poplibs_mac_estimates`), over every partition, so that a product's Poplibs plan
can be read off (``docs/planner.md``, which argues why the candidates left out, the
vertical MAC (:func:`~.poplibs_mac_estimates.vmac_floor`), SLIC, the outer product and
AMP groupings below 16 input channels, cannot be cheaper for its rows). The horizontal
MAC is costed with the release's estimates (:data:`~.poplibs_release.MAC_ESTIMATES`);
HALF partials, 7eac0f26's, are searched when planning as that release only. Derived
from the source, not a port.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from ipusim.machine_copies import transform_factor
from poplar_api.poplin import amp
from poplar_api.poplin.conv_planner import amp_unit_options
from poplar_api.poplin.estimators import (
    EXCHANGE_SCALE,
    outer_product_cycles,
    reduce_add_cycles,
    single_input_reduce,
)
from poplar_api.poplin.poplibs_amp_estimates import (
    amp_1x1_inner,
    amp_padding_estimate,
    amp_partial_cycles,
)
from poplar_api.poplin.poplibs_mac_estimates import hmac_partial_cycles
from poplar_api.poplin.poplibs_release import (
    DEFAULT_RELEASE,
    amp_common_path_estimate,
    broadcasts_before_loop,
    pads_serial_splits,
)
from poplar_api.popops.dynamic_slice import slice_1d_estimate
from poplar_api.popops.estimators import binary_op_1d_in_place
from poplar_api.types import FLOAT, HALF

__all__ = [
    "MatmulCandidates",
    "Product",
    "amp_vertex_types",
    "costs",
    "describe",
    "partitions",
    "poplibs_matmul_plan",
]

#: ``getWeightsPerConvUnit``: the AMP's input channels per group with a full load
#: (chain of 4 times 4 HALF or 2 FLOAT elements).
WEIGHTS_PER_CONV_UNIT = {"half": 16, "float": 8}
#: The AMP's conv units for ``(input, partials)`` types (``getNumConvUnits`` of the
#: targets ipusim models: 8 for HALF inputs with FLOAT partials, as
#: :func:`~poplar_api.poplin.conv_planner.amp_unit_options` gives them).
CONV_COEFF_LOAD_BYTES_PER_CYCLE = amp.AMP_COEFF_LOAD_BYTES_PER_CYCLE


def vertex_types(
    k: int, units: int, mac: bool, half_units: int = 0
) -> list[tuple[str, tuple[int, int], int, str]]:
    """``(method, (inChansPerGroup, partialChansPerGroup), convUnits, partials type)`` of
    the candidates searched, in ``sortConvVertexTypeCandidates``' order (most MACs a
    cycle first, then least padding, then smaller partials):

    * with ``half_units`` (the target's conv units for HALF partials) and at most 16
      input channels, the AMP with HALF partials (``getConvVertexAMPCandidates`` for an
      output type smaller than the partials, a 1x1 kernel and ``K`` within one group of
      16): ``half_units`` units grouping the partials by them, then 8 units grouping
      them by 8 (``half_units`` > 8), or by 16 (``half_units`` = 8);
    * the AMP with FLOAT partials (:func:`amp_vertex_types`);
    * with ``mac``, the horizontal MAC (``getConvVertexHMACCandidates``, FLOAT
      partials): input groupings from 2 up to ``K`` rounded to 2 in steps of 2, each
      only where it lowers the number of groups, one partial channel per group, by
      their padding of the input channels, then grouping (the ``operator<`` order
      ``std::sort`` leaves among equals)."""
    w = WEIGHTS_PER_CONV_UNIT["half"]
    half: list[tuple[str, tuple[int, int], int, str]] = []
    if half_units and k <= w:
        half.append(("AMP", (w, half_units), half_units, "half"))
        if half_units > 8:
            half.append(("AMP", (w, 8), 8, "half"))
        else:
            half.append(("AMP", (w, w), half_units, "half"))
    out = half + [("AMP", groups, units, "float") for groups in amp_vertex_types(units)]
    if not mac:
        return out
    rounded = -(-k // 2) * 2
    hmac, previous = [], 0
    for icg in range(2, rounded + 1, 2):
        groups = -(-rounded // icg)
        if groups != previous:
            hmac.append((-(-k // icg) * icg - k, icg))
            previous = groups
    return out + [("HMAC", (icg, 1), units, "float") for _, icg in sorted(hmac)]


def amp_vertex_types(units: int) -> list[tuple[int, int]]:
    """``(inChansPerGroup, partialChansPerGroup)`` of the AMP candidates with a full
    input grouping for HALF inputs, in ``getConvVertexAMPCandidates``' order
    (``ConvVertexType.cpp``): partials grouped by the conv units, then by the weights
    per conv unit when that is larger."""
    w = WEIGHTS_PER_CONV_UNIT["half"]
    out = [(w, units)]
    if w > units:
        out.append((w, w))
    return out


@functools.lru_cache(maxsize=256)
def _splits(grains: int, tiles: int) -> tuple[np.ndarray, np.ndarray]:
    """``(split, grains per part)`` of every smallest divisor of ``grains`` grains up to
    ``tiles`` parts (``ceildivConstrainDivisor``: ``split`` is the least giving its
    ``ceil(grains / split)``)."""
    s = np.arange(1, min(grains, tiles) + 1, dtype=np.int64)
    per = -(-grains // s)
    keep = np.concatenate(([True], per[1:] != per[:-1]))
    return s[keep], per[keep]


def _exchange(elements: np.ndarray, size: int, target: Any, rate_multiplier: Any = 1) -> Any:
    """``ExchangeEstimator``: ``ceil(16 * bytes / (round(16 E) * multiplier))``."""
    scaled = max(1, round(float(target.getExchangeBytesPerCycle()) * EXCHANGE_SCALE))
    return -(-(elements * size * EXCHANGE_SCALE) // (scaled * np.asarray(rate_multiplier)))


def _reduce_plan(depth: int) -> list[int]:
    """``getMultiStageReducePlan`` with ``enableMultiStageReduce`` (the default): 3 stages
    from a depth of 125, 2 from 16, each split by ``getMultiStageReducePlanAndCost``."""
    stages = 3 if depth >= 125 else 2 if depth >= 16 else 1
    return _reduce_plan_and_cost(depth, stages)[0]


def _reduce_plan_and_cost(depth: int, stages: int) -> tuple[list[int], float]:
    if stages == 1:
        return [], float(depth)
    down = int(float(depth) ** ((stages - 1.0) / stages))
    down_plan, down_cost = _reduce_plan_and_cost(down, stages - 1)
    down_cost += depth / down
    up_plan, up_cost = _reduce_plan_and_cost(down + 1, stages - 1)
    up_cost += depth / (down + 1)
    if down_cost < up_cost:
        return [down, *down_plan], down_cost
    return [down + 1, *up_plan], up_cost


def _reduce_exchange_later_stages(outputs: np.ndarray, depth: int, size: int, target: Any) -> Any:
    """The exchange of every reduction stage after the first (``addExchangeCycleEstimates``'
    ``partialSumExchangeCycleEstimate`` of the tiles' partial sums ``outputs``)."""
    cycles = np.zeros(np.shape(outputs), np.int64)
    if depth <= 1:
        return cycles
    remaining, out, first = depth, outputs, True
    for d in _reduce_plan(depth):
        if not first:
            cycles = cycles + _exchange(out, size, target)
        this = -(-remaining // d)
        out = -(-out // this)
        remaining = -(-remaining // this)
        first = False
    if remaining > 1 and not first:
        cycles = cycles + _exchange(out, size, target)
    return cycles


def _cast_cycles(n: Any, partials_vw: int, out_vw: int, workers: int) -> Any:
    """``estimateCastCycles`` of ``n`` outputs."""
    per = -(-n // workers)
    return (np.maximum(-(-per // partials_vw), -(-per // out_vw)) + 26) * workers


def _reduce_cycles(outputs: np.ndarray, depth: int, psz: int, osz: int, target: Any) -> Any:
    """``estimateConvReduceCycles`` (one input-channel pass, defaults: multi-stage on,
    fast reduce off) of ``outputs`` per tile over ``depth`` parts."""
    workers = target.getNumWorkerContexts()
    if depth == 1:
        if psz == osz:
            return np.zeros(np.shape(outputs), np.int64)
        return _cast_cycles(outputs, 8 // psz, 8 // osz, workers)
    bank = int(target.config.memory.bank_bytes)
    tile_bytes = target.getBytesPerTile()
    remaining, size = depth, outputs * depth
    cycles = np.zeros(np.shape(outputs), np.int64)

    def stage(size: np.ndarray, depth_here: int, out_size: int) -> Any:
        single = single_input_reduce(size, depth_here, psz, bank, tile_bytes)
        return reduce_add_cycles(depth_here - single.astype(np.int64), size, psz, out_size,
                                 workers, single_input=single)  # fmt: skip

    for d in _reduce_plan(depth):
        this = -(-remaining // d)
        remaining = -(-remaining // this)
        size = -(-size // this)
        cycles = cycles + stage(size, this, osz if remaining == 1 else psz)
    if remaining > 1:
        size = -(-size // remaining)
        cycles = cycles + stage(size, remaining, osz)
    return cycles


def _per_depth(values: np.ndarray, depth: np.ndarray, fn: Any) -> np.ndarray:
    """``fn(values[depth == d], d)`` for every distinct ``d``, put back in place."""
    out = np.zeros(values.shape, np.int64)
    for d in np.unique(depth).tolist():
        at = depth == d
        out[at] = fn(values[at], int(d))
    return out


def _slice(elements: np.ndarray, serial: np.ndarray, vector_width: int, workers: int) -> Any:
    """``addDynamicSliceEstimate``: ``getDynamicSlice1DEstimate`` of ``ceil(elements /
    serial)`` elements, 0 without a serial split."""
    cycles = slice_1d_estimate(-(-elements // serial), 1, workers, vector_width, False)
    return np.where(serial > 1, cycles, 0)


@dataclass(frozen=True)
class Product:
    """A ``(G, M, K, N)`` HALF product with FLOAT partials as one operand order and AMP
    vertex type plan it: the convolution's field ``F``, channel grains and groupings."""

    dims: tuple[int, int, int, int]
    target: Any
    swapped: bool
    groups: tuple[int, int]
    conv_pass: str = "NONE_MATMUL"
    units: int = 8
    #: The Poplibs release planned as (:mod:`.poplibs_release`).
    release: str = DEFAULT_RELEASE
    method: str = "AMP"
    partials: str = "float"
    #: ``fieldGrainSize`` where the plan sets it (a joint fully-connected plan: the
    #: forward input grouping), else 0: :attr:`field_grain` derives it.
    grain: int = 0
    #: A pass of a joint fully-connected plan (``isJointPlan`` of
    #: ``addTransformCycleEstimate``; :mod:`.poplibs_fc_joint_model`).
    joint: bool = False
    #: ``LinearizeTileOrder::STANDARD``: inputs shared by a supertile's pair of tiles
    #: exchange at twice the rate (``ExchangeEstimator``); not in a joint plan's backward
    #: and weight-update passes (``FC_BWD_AS_CONV``, ``FC_WU``).
    standard_order: bool = True

    @property
    def partials_size(self) -> int:
        return FLOAT.size if self.partials == "float" else HALF.size

    @property
    def field_grain(self) -> int:
        """``fieldGrainSize`` (``createPlan``): 2 when the partials are grouped by an odd
        number of channels and the field is even (so that the HALF output has an even
        number of elements on each tile), else 1; :attr:`grain` where set."""
        if self.grain:
            return self.grain
        return 2 if self.groups[1] % 2 and self.field % 2 == 0 else 1

    @property
    def field(self) -> int:
        return self.dims[3] if self.swapped else self.dims[1]

    @property
    def out_chans(self) -> int:
        return self.dims[1] if self.swapped else self.dims[3]

    @property
    def grains(self) -> tuple[int, int]:
        """``(output, input)`` channel grains (``calculatePaddedParams``)."""
        icg, ocg = self.groups
        return -(-self.out_chans // ocg), -(-self.dims[2] // icg)


@dataclass
class MatmulCandidates:
    """Partitions of one :class:`Product` with Poplibs' estimates (equal-length arrays).

    Attributes
    ----------
    splits
        ``convGroupSplit``, ``fieldSplit``, ``outChanSplit.parallel``,
        ``outChanSplit.serial``, ``inChanSplit.parallel``, ``inChanSplit.serial`` by
        those names (``batchSplit`` is 1: the batch is in the field).
    broadcast
        ``broadcastInputBeforeLoop``.
    cycles, temp_bytes
        ``totalCycles`` and ``totalTempBytes``.
    terms
        The terms of one iteration's cycles by name (``serial once``: those after the
        loop).
    ok
        With :func:`costs`' ``keep_all``, whether the pruning constraint on the partial
        sums holds.
    """

    splits: dict[str, np.ndarray]
    broadcast: np.ndarray
    cycles: np.ndarray
    temp_bytes: np.ndarray
    terms: dict[str, np.ndarray]
    ok: np.ndarray | None = None


#: Convolution passes costed flattened (:mod:`.poplibs_conv_model`; TRAINING_FWD regroups).
CONV_PASSES = ("NONE", "INFERENCE_FWD", "TRAINING_BWD", "TRAINING_FWD")
SPLIT_NAMES = ("convGroupSplit", "fieldSplit", "outChanSplit.parallel", "outChanSplit.serial",
               "inChanSplit.parallel", "inChanSplit.serial")  # fmt: skip


def _transforms(p: Product, used: np.ndarray) -> dict[str, np.ndarray]:
    """``addTransformCycleEstimate``'s itemised cycles and bytes per tile (default
    options, a matMul or fully-connected pass planned alone, or a convolution of
    :data:`CONV_PASSES` flattened, :mod:`.poplibs_conv_model`): ``in``, ``w``, ``out``
    copy-plus-exchange cycles and ``in_bytes``, ``w_bytes``, ``out_bytes``. The
    operands and output are rearranged when the operand order is not the pass's
    (``swapOperands != isMatmulOrFullyConnectedLayer``: a product unswapped, a
    convolution swapped, which for a flattened convolution also flattens its field into
    the output channels, ``outChanFlattenDims``, rearranging weights and output)."""
    g, _, k, _ = p.dims
    icg, ocg = p.groups
    co_g, ci_g = p.grains
    target = p.target
    size = HALF.size  # inputBytesPerElement is the output type's size
    memcpy = target.getDataPathWidth() // 8
    xbpc = target.getExchangeBytesPerCycle()
    pad_in, pad_partial = k % icg != 0, p.out_chans % ocg != 0
    wu, bwd = p.conv_pass == "FC_TRAINING_WU", p.conv_pass == "FC_TRAINING_BWD"
    fc = p.conv_pass.startswith("FC_")
    if not fc and p.conv_pass not in ("NONE_MATMUL", *CONV_PASSES):
        raise ValueError(f"poplibs_matmul_model: pass {p.conv_pass!r} is not modelled (hint: "
                         f"NONE_MATMUL, an FC_ pass or one of {CONV_PASSES})")  # fmt: skip
    moved = p.swapped != (fc or p.conv_pass == "NONE_MATMUL")
    re_in = moved or pad_in or wu or (bwd and not p.joint)
    re_w = moved or pad_in or pad_partial
    re_out = moved or pad_partial or (wu and not p.joint)
    regroup = not fc and ocg != WEIGHTS_PER_CONV_UNIT["half"]
    regroup_w = p.conv_pass == "TRAINING_FWD" and ocg % 16 != 0 and not re_w  # regroupWeights
    _, f1 = transform_factor("half", k * p.out_chans)
    _, o1 = transform_factor("half", p.out_chans)
    f1, o1 = int(f1), int(o1)
    zero = np.zeros(used.shape, np.int64)

    def per_tile(elements: int) -> np.ndarray:
        return -(-(elements * size) // used)

    def copy(b: np.ndarray, rate: int, f: int) -> np.ndarray:
        return -(-(b * 5) // (rate * f))

    def xch(b: np.ndarray) -> np.ndarray:
        return np.ceil(b / xbpc).astype(np.int64)

    field = -(-p.field // p.field_grain) * p.field_grain  # (whole field grains)
    in_b = per_tile(field * ci_g * icg * g) if re_in else zero
    w_b = per_tile(ci_g * icg * co_g * ocg * g) if re_w else zero
    out_b = -(-(field * co_g * ocg * g) // used) * size
    rate = min(memcpy, size)
    out = zero
    if re_out:
        out = copy(out_b, rate, o1) + xch(out_b)
    elif regroup:
        out = copy(out_b, min(memcpy, ocg * size), o1)
    else:
        out_b = zero
    w_r = -(-(ci_g * icg * co_g * ocg * g) // used) * size if regroup_w else zero  # (not sent)
    return {
        "in": copy(in_b, rate, f1) + xch(in_b) if re_in else zero,
        "w": copy(w_b, rate, f1) + xch(w_b) if re_w else copy(w_r, min(memcpy, ocg * size), o1),
        "out": out, "in_bytes": in_b, "w_bytes": w_b + w_r, "out_bytes": out_b,
    }  # fmt: skip


def _tile_field(p: Product, fs: Any) -> Any:
    """A tile's field positions under ``fieldSplit`` ``fs``: whole field grains."""
    fg = p.field_grain
    grains = -(-p.field // fg)
    return -(-grains // fs) * fg


def max_macs_per_cycle(p: Product) -> int:
    """``getMaxMACsPerCyclePerTile``: the AMP's conv units times its 4 HALF input loads,
    the HALF vector width (4) for the MAC vertices."""
    return p.units * 4 if p.method == "AMP" else 4


def partial_cycles(p: Product, ft: Any, cit: Any, cot: Any, gt: Any) -> Any:
    """``addPartialCalcCycleEstimate`` of tiles with ``ft`` positions, ``cit`` input and
    ``cot`` output channels and ``gt`` groups: the AMP's as ``p.release`` estimates it
    (:func:`~.poplibs_amp_estimates.amp_partial_cycles`: ``ConvPartial1x1Out`` with a full
    input grouping, else ``ConvPartialnx1``), the horizontal MAC's estimate
    (:mod:`.poplibs_mac_estimates`) for ``"HMAC"``, ``getOuterProductCycleEstimate`` of a
    worker's ``ceil(ft / W)`` positions times ``W`` for ``"OUTER_PRODUCT"`` (HALF: a
    joint plan's batch-1 weight update)."""
    icg, ocg = p.groups
    workers = p.target.getNumWorkerContexts()
    if p.method == "HMAC":
        return hmac_partial_cycles(ft, cit, cot, gt, icg, workers, p.release)
    if p.method == "OUTER_PRODUCT":  # one worker's share of the field, times the workers
        return outer_product_cycles(False, -(-ft // workers), cot * gt, ocg) * workers
    return amp_partial_cycles(ft, cit, cot, gt, icg, ocg, p.units, p.partials == "float",
                              amp_common_path_estimate(p.release), workers)  # fmt: skip


def costs(
    p: Product,
    splits: dict[str, np.ndarray],
    tile: dict[str, np.ndarray] | None = None,
    keep_all: bool = False,
) -> MatmulCandidates:
    """Poplibs' ``addEstimates`` of :class:`Product` ``p`` for every partition of
    ``splits`` (arrays by :data:`SPLIT_NAMES`), each with ``broadcastInputBeforeLoop``
    0 and, where the split allows it (output channels serially, input channels not),
    also 1 (see the module docstring), less those the pruning constraint on the partial
    sums rules out. ``tile`` gives a tile's ``gt``, ``ft``, ``cit``, ``cot`` where the
    plan derives them otherwise (a joint plan's passes, :mod:`.poplibs_fc_joint_model`);
    ``keep_all`` keeps every partition (the plain ones, then those that can broadcast,
    in order) and gives the constraint as ``ok``."""
    target = p.target
    g, _, _, _ = p.dims
    icg, ocg = p.groups
    co_g, ci_g = p.grains
    workers = target.getNumWorkerContexts()
    gs, fs = splits["convGroupSplit"], splits["fieldSplit"]
    po, so = splits["outChanSplit.parallel"], splits["outChanSplit.serial"]
    pi, si = splits["inChanSplit.parallel"], splits["inChanSplit.serial"]
    serial = so * si
    used = gs * fs * po * pi
    gt, ft = -(-g // gs), _tile_field(p, fs)
    cot, cit = -(-co_g // (po * so)) * ocg, -(-ci_g // (pi * si)) * icg
    if tile is not None:
        gt, ft, cot, cit = tile["gt"], tile["ft"], tile["cot"], tile["cit"]
    psz, isz = p.partials_size, HALF.size
    # exchange (addExchangeCycleEstimates)
    inputs, weights, outputs = ft * cit * gt, cit * cot * gt, ft * cot * gt
    share = target.getTilesPerSharedExchangeBus() if p.standard_order else 1
    mult = np.where((share > 1) & (po % share == 0), 2, 1)
    x_in = _exchange(inputs - inputs // po, isz, target, mult)
    x_w = _exchange(weights - weights // fs, isz, target)
    x_p = _exchange(outputs, psz, target)
    later = lambda o, d: _reduce_exchange_later_stages(o, d, psz, target)  # noqa: E731
    x_p = x_p + _per_depth(outputs, pi, later)
    tr = _transforms(p, used)
    # the partial sums (addPartialCalcCycleEstimate) and the AMP's kernel padding
    # (addTileLevelTransformEstimates)
    compute = partial_cycles(p, ft, cit, cot, gt)
    pad, pad_bytes = 0, 0
    if p.method == "AMP" and icg != WEIGHTS_PER_CONV_UNIT["half"]:
        on_ipu = max(amp_unit_options(HALF, FLOAT if p.partials == "float" else HALF, target))
        height = WEIGHTS_PER_CONV_UNIT["half"] // (on_ipu // p.units) // icg
        xbpc = target.getExchangeBytesPerCycle()
        pad, pad_bytes = amp_padding_estimate(height, 1, 1, 1, [1, 1], [1, ft], 1, cit, cot, gt,
                                              isz, xbpc, mult)  # fmt: skip
    # the reduction or cast (addReduceCycleEstimate), deferred past an input-channel loop
    red_out = -(-outputs // pi)
    reduce = _per_depth(red_out, pi, lambda o, d: _reduce_cycles(o, d, psz, isz, target))
    reduce = np.where((pi == 1) & (si > 1), 0, reduce)
    # a serial loop's slices, update and accumulation (addDynamicSliceEstimate, ...)
    w_tile = -(-(g * ci_g * icg * co_g * ocg) // used)
    in_tile = -(-(g * p.field * ci_g * icg) // used)
    slices = _slice(w_tile, serial, 4, workers) + _slice(in_tile, si, 4, workers)
    update = _slice(red_out, so, 2, workers)
    add = np.zeros(red_out.shape, np.int64)
    if (si > 1).any():
        uniq, inv = np.unique(red_out, return_inverse=True)
        per = [binary_op_1d_in_place("ADD", "float", int(o), workers, 2) for o in uniq.tolist()]
        add = np.where(si > 1, np.array(per, np.int64)[inv.ravel()], 0)
    once = np.where(si > 1, _cast_cycles(red_out, 2, 4, workers), 0)
    per_iter = (x_in + x_w + x_p + tr["in"] + tr["w"] + tr["out"] + compute + reduce
                + slices + update + add + pad)  # fmt: skip
    # temporary bytes (addConvTempMemoryEstimate, totalTempBytes)
    conv_in, conv_rest = isz * inputs, isz * weights + psz * outputs + pad_bytes
    red_bytes = np.where(pi > 1, -(-outputs // pi) * pi * psz, 0)
    in_place_bytes = np.where(si > 1, red_out * psz, 0)
    t_rest = np.maximum(tr["w_bytes"], tr["out_bytes"])
    temp = (np.maximum.reduce([2 * np.maximum(tr["in_bytes"], t_rest), conv_in + conv_rest,
                               red_bytes]) + in_place_bytes)  # fmt: skip
    # a fully-connected pass planned alone rearranges its weights before a serial loop
    # slices them (addRearrangeBeforeSliceEstimate): exchange plus one cycle an element
    fc = p.conv_pass.startswith("FC_") and not p.joint
    rb = np.where(fc & (serial > 1), _exchange(w_tile, isz, target) + w_tile, 0)
    rb_bytes = np.where(fc & (serial > 1), w_tile * isz, 0)
    once = once + rb
    temp = np.maximum(temp - in_place_bytes, rb_bytes) + rb_bytes + in_place_bytes
    cycles = per_iter * serial + once
    # broadcastInputBeforeLoop: the inputs' rearrangement and exchange once, before an
    # output-channel loop, their bytes live through it
    can = (so > 1) & (si == 1) & broadcasts_before_loop(p.release)
    b_cycles = (per_iter - x_in - tr["in"]) * serial + x_in + tr["in"] + once
    b_temp = (
        tr["in_bytes"]
        + conv_in
        + rb_bytes
        + np.maximum.reduce([2 * t_rest, conv_rest, red_bytes, rb_bytes])
    )
    terms = {"input exchange": x_in, "weight exchange": x_w, "partials exchange": x_p,
             "transform": tr["in"] + tr["w"] + tr["out"], "compute": compute, "reduce": reduce,
             "serial": slices + update + add, "serial once": once, "padding": pad}  # fmt: skip
    # the pruning constraint: total MACs over the conv units' rate bounds the tiles'
    # partial-sum cycles from below (constructModel)
    macs = g * p.field * co_g * ocg * ci_g * icg
    ok = macs // max_macs_per_cycle(p) <= used * compute * serial
    keep = np.ones(ok.shape, bool) if keep_all else ok
    pick = np.concatenate([np.flatnonzero(keep), np.flatnonzero(keep & can)])
    n_plain = int(keep.sum())
    bcast = np.zeros(pick.size, bool)
    bcast[n_plain:] = True
    return MatmulCandidates(
        {k: splits[k][pick] for k in SPLIT_NAMES},
        bcast,
        np.where(bcast, b_cycles[pick], cycles[pick]),
        np.where(bcast, b_temp[pick], temp[pick]),
        {k: np.broadcast_to(v, ok.shape)[pick] for k, v in terms.items()},
        ok[pick] if keep_all else None,
    )


def partitions(p: Product, out_serial: int = 1, in_serial: int = 1) -> dict[str, np.ndarray]:
    """Every partition with the given serial splits (one of them 1): parallel splits
    whose products with the serial ones are smallest divisors of their grains
    (``ceildivConstrainDivisor`` of ``parallel * serial``), the parallel splits' product
    at most the tiles (``getUsedTiles``)."""
    tiles = p.target.getNumTiles()
    co_g, ci_g = p.grains
    gs, _ = _splits(p.dims[0], tiles)
    fs, _ = _splits(-(-p.field // p.field_grain), tiles)
    to, _ = _splits(co_g, co_g)
    ti, _ = _splits(ci_g, ci_g)
    po = to[to % out_serial == 0] // out_serial
    pi = ti[ti % in_serial == 0] // in_serial
    grids = np.meshgrid(gs, fs, po[po <= tiles], pi[pi <= tiles], indexing="ij")
    g_, f_, o_, i_ = (x.ravel() for x in grids)
    ok = g_ * f_ * o_ * i_ <= tiles
    n = int(ok.sum())
    return {
        "convGroupSplit": g_[ok], "fieldSplit": f_[ok],
        "outChanSplit.parallel": o_[ok], "outChanSplit.serial": np.full(n, out_serial),
        "inChanSplit.parallel": i_[ok], "inChanSplit.serial": np.full(n, in_serial),
    }  # fmt: skip


def _iteration_floors(p: Product) -> dict[str, int]:
    """Lower bounds of one iteration's cycles of any partition with a serial split over
    the output (``"out"``) or input (``"in"``) channels: the partial sums of one
    position and one group of each kind, the dynamic slices (and update or in-place
    addition) of one element, and, over the output channels, the least reduction or
    cast (``getReduceCycleEstimate``'s 32 or 20 + 33 / W cycles a worker, the cast's
    27); every other term is at least 0."""
    one = {k: np.ones(1, np.int64) for k in SPLIT_NAMES}
    q = Product((1, 1, p.groups[0], p.groups[1]), p.target, False, p.groups, p.conv_pass,
                p.units, p.release, p.method, p.partials)  # fmt: skip
    compute = int(costs(q, one).terms["compute"][0])
    w = p.target.getNumWorkerContexts()
    elem, two = np.ones(1, np.int64), np.full(1, 2, np.int64)
    half, flt = int(_slice(elem, two, 4, w)[0]), int(_slice(elem, two, 2, w)[0])
    add = binary_op_1d_in_place("ADD", "float", 1, w, 2)
    least_reduce = min(32 * w, 20 * w + 33, 27 * w)
    return {"out": compute + half + flt + least_reduce, "in": compute + 2 * half + add}


def _prune(p: Product, splits: dict[str, np.ndarray], limit: float, bound: int) -> dict:
    """``splits`` less the partitions that cannot be taken: those whose partial sums alone
    (their cycles times the serial split, a lower bound of the total) exceed ``limit``,
    or whose inputs, weights and partials of a tile alone (a lower bound of the
    temporary bytes) exceed ``bound``."""
    g = p.dims[0]
    icg, ocg = p.groups
    co_g, ci_g = p.grains
    so, si = splits["outChanSplit.serial"], splits["inChanSplit.serial"]
    gt, ft = -(-g // splits["convGroupSplit"]), _tile_field(p, splits["fieldSplit"])
    cot = -(-co_g // (splits["outChanSplit.parallel"] * so)) * ocg
    cit = -(-ci_g // (splits["inChanSplit.parallel"] * si)) * icg
    temp = HALF.size * (ft * cit + cit * cot) * gt + p.partials_size * ft * cot * gt
    if p.method == "AMP" and p.partials == "float":
        common = amp_common_path_estimate(p.release)
        inner_z = amp_1x1_inner(ft, p.target.getNumWorkerContexts(), True, common)
        # the partial sums' estimate without its per-group overheads: at least this
        lower = gt * (cit // icg) * (cot // ocg) * -(-ocg // p.units) * inner_z * so * si
    else:  # (the estimate itself: cheap)
        lower = partial_cycles(p, ft, cit, cot, gt) * so * si
    keep = (temp <= bound) & (lower <= limit)
    return {k: v[keep] for k, v in splits.items()}


def _serial_pool(
    p: Product, kind: str, first: int, last: int, limit: float, bound: int
) -> MatmulCandidates | None:
    """The candidates of every ``kind`` ("out" or "in") serial split from ``first`` to
    ``last`` that :func:`_prune` keeps, costed together."""
    chans = p.out_chans if kind == "out" else p.dims[2]
    counts = [s for s in range(first, last + 1) if pads_serial_splits(p.release) or chans % s == 0]
    if not counts:
        return None
    parts = [partitions(p, s, 1) if kind == "out" else partitions(p, 1, s) for s in counts]
    joined = _prune(p, {k: np.concatenate([x[k] for x in parts]) for k in SPLIT_NAMES},
                    limit, bound)  # fmt: skip
    if not joined["fieldSplit"].size:
        return None
    return costs(p, joined)


#: Serial splits costed together in one call of :func:`costs`.
SERIAL_CHUNK = 24


def _best(c: MatmulCandidates, bound: int) -> int | None:
    """The candidate ``minimize({cycles, bytes})`` takes within ``bound`` bytes, or None."""
    fits = c.temp_bytes <= bound
    if not fits.any():
        return None
    key = np.where(fits, c.cycles, np.iinfo(np.int64).max)
    at = np.flatnonzero(key == key.min())
    return int(at[np.argmin(c.temp_bytes[at])])


def poplibs_matmul_plan(
    dims: tuple[int, int, int, int],
    target: Any,
    conv_pass: str = "NONE_MATMUL",
    proportion: float = 0.6,
    units: int = 8,
    swaps: tuple[bool, ...] = (True, False),
    release: str = DEFAULT_RELEASE,
    mac: bool = True,
    half_units: int | None = None,
) -> dict[str, Any]:
    """The plan Poplibs' ``createPlan`` picks for a product planned alone among the
    candidates this module models: both operand orders, swapped first, each vertex type
    of :func:`vertex_types` in Poplibs' order (with ``mac``, the horizontal MAC's, each
    searched only when the MAC vertices' bound ``G M K N / (4 T)`` is below the best
    cost found, as none can be strictly cheaper otherwise; ``half_units``, by default
    the target's conv units for HALF partials, gives the AMP with HALF partials of a
    product of at most 16 input channels, only when planning as 7eac0f26, whose
    estimates they are), every partition with one pass or a
    serial split over the output or the input channels, the least ``(cycles, temporary
    bytes)`` within ``proportion`` of the tile's bytes (``choosePlan``), a later vertex
    type or order replacing an earlier only when strictly lower
    (``PlanningObjective::lowerCost``). Serial splits are searched while ``S`` times
    a lower bound of one iteration (:func:`_iteration_floors`) is within the best cost
    found (so the best of each operand order in ``forms`` is of the candidates searched:
    serial plans of the later order that cannot beat the earlier's best are not costed).

    Returns the plan's ``swapped``, ``method`` (``"AMP"`` or ``"HMAC"``), ``groups``,
    ``units``, ``partials`` (``"float"`` or ``"half"``), splits (by :data:`SPLIT_NAMES`),
    ``broadcast``, ``cost`` ``(cycles, bytes)``, ``terms``, ``ties`` (how many
    candidates of its search share its cost: popsolver's order picks between them),
    ``one_pass``: the best one-pass plan's cost, and ``forms``: the best cost of each
    operand order (by ``swapped``). ``swaps`` are the operand orders searched (one when
    a ``planConstraints`` ``transform.swapOperands`` forces it). ``release`` is the
    Poplibs release planned as (:mod:`.poplibs_release`: its serial splits and broadcast).
    """
    if not swaps:
        raise ValueError(
            f"poplibs_matmul_plan: swaps={swaps!r} names no operand order; give at least "
            "one of True (swapped) and False (unswapped)"
        )
    bound = int(target.getBytesPerTile() * proportion)
    if not amp_common_path_estimate(release):  # (the HALF partials' are 7eac0f26's)
        half_units = 0
    elif half_units is None:  # (getNumConvUnits of HALF inputs with HALF partials)
        half_units = max(amp_unit_options(HALF, HALF, target))
    best: dict[str, Any] | None = None
    best_one: tuple[int, int] | None = None
    forms: dict[bool, tuple[int, int]] = {}
    shape = tuple(int(x) for x in dims)
    mac_floor = int(np.prod(shape)) // (4 * target.getNumTiles())
    for swapped in swaps:
        for method, groups, u, partials in vertex_types(shape[2], units, mac, half_units):
            limit = (best or {}).get("cost", (np.inf,))[0]
            if method != "AMP" and mac_floor >= limit:
                continue  # (the MAC vertices' bound: none can be strictly cheaper)
            p = Product(shape, target, swapped, groups, conv_pass, u, release, method,
                        partials)  # fmt: skip
            pools = [costs(p, _prune(p, partitions(p), np.inf if method == "AMP" else limit,
                                     bound))]  # fmt: skip
            j = _best(pools[0], bound)
            one = None if j is None else (int(pools[0].cycles[j]), int(pools[0].temp_bytes[j]))
            if one is not None and (best_one is None or one < best_one):
                best_one = one
            floors = _iteration_floors(p)
            limit = (best or {}).get("cost", (None,))[0]
            limit = min(x for x in (limit, one and one[0], np.iinfo(np.int64).max) if x)
            co_g, ci_g = p.grains
            for kind, grains in (("out", co_g), ("in", ci_g)):
                first = 2
                while first <= grains and first * floors[kind] <= limit:
                    last = min(grains, first + SERIAL_CHUNK - 1, limit // floors[kind])
                    c = _serial_pool(p, kind, first, last, limit, bound)
                    first = last + 1
                    if c is None:
                        continue
                    pools.append(c)
                    k = _best(c, bound)
                    if k is not None:
                        limit = min(limit, int(c.cycles[k]))
            c = MatmulCandidates(
                {k: np.concatenate([x.splits[k] for x in pools]) for k in SPLIT_NAMES},
                np.concatenate([x.broadcast for x in pools]),
                np.concatenate([x.cycles for x in pools]),
                np.concatenate([x.temp_bytes for x in pools]),
                {k: np.concatenate([x.terms[k] for x in pools]) for k in pools[0].terms},
            )
            j = _best(c, bound)
            if j is None:
                continue
            cost = (int(c.cycles[j]), int(c.temp_bytes[j]))
            forms[swapped] = min(forms.get(swapped, cost), cost)
            if best is None or cost < best["cost"]:
                ties = int(((c.cycles == cost[0]) & (c.temp_bytes == cost[1])).sum())
                best = {
                    "swapped": swapped, "method": method, "groups": groups, "cost": cost,
                    "ties": ties, "units": u, "partials": partials,
                    "broadcast": bool(c.broadcast[j]),
                    "splits": {k: int(c.splits[k][j]) for k in SPLIT_NAMES},
                    "terms": {k: int(v[j]) for k, v in c.terms.items()},
                }  # fmt: skip
    if best is None:
        raise ValueError(f"poplibs_matmul_plan: no plan of {dims} fits")
    best["one_pass"], best["forms"] = best_one, forms
    return best


def describe(plan: dict[str, Any]) -> str:
    """A :func:`poplibs_matmul_plan` result as ``docs/planner.md`` states it: operand
    order, partition (``fieldSplit``, ``outChanSplit.parallel``, ``inChanSplit.parallel``),
    serial passes, the AMP's groupings, and the estimated cycles and temporary bytes."""
    s = plan["splits"]
    text = "swapped" if plan["swapped"] else "unswapped"
    times = " \N{MULTIPLICATION SIGN} "
    parts = [f"field {s['fieldSplit']}", f"Co {s['outChanSplit.parallel']}",
             f"Ci {s['inChanSplit.parallel']}"]  # fmt: skip
    if s["convGroupSplit"] > 1:
        parts.append(f"G {s['convGroupSplit']}")
    text += ", " + times.join(parts)
    for key, what in (("outChanSplit.serial", "output"), ("inChanSplit.serial", "input")):
        if s[key] > 1:
            text += f" in {s[key]} {what}-channel passes"
    if plan["broadcast"]:
        text += ", inputs broadcast before the loop"
    cycles, temp = plan["cost"]
    icg, ocg = plan["groups"]
    vertex = f"{plan['method']} {icg} / {ocg}"
    if plan.get("partials", "float") != "float":
        vertex += f" ({plan['units']} units, {plan['partials']} partials)"
    return f"{text}, {vertex}, {cycles:,} cycles / {temp:,} B"
