"""Lower bounds of Poplibs' AMP plans of a 2-D convolution in each transformed form.

``createPlan`` (graphcore/poplibs ``7eac0f26``, ``lib/poplin/ConvPlan.cpp``) plans a
convolution of pass ``NONE`` over its level-0 transforms: ``swapOperands`` (unswapped
first), ``expandDims`` of the dimensions whose expansion changes the convolution,
``outChanFlattenDims`` of a swapped form's dimensions whose input is no larger than its
kernel, then ``calculateFlattenedParams``' flattening of the batch and every dimension
``dimCanBeFlattened`` accepts (``ConvModel.cpp``), and serial splits of the input or
output channels. :mod:`.poplibs_conv2d_model` restates the plain family (unswapped,
unexpanded, one pass); this module bounds every other AMP form from below
(:func:`amp_floors`), for the HALF 2-D convolutions that module covers (input padding
only, one conv group), so that where each bound passes the plain family's best, that best
is Poplibs' plan:

* **a serial split** ``S`` (any count up to the channel grains, the last iteration padded;
  ``ceil(ceil(g / S) / p) = ceil(g / (S p))``, so an iteration's tiles are those of the
  convolution with ``ceil(g / S)`` grains): ``S`` times the one-pass terms of that
  convolution but the output regroup and, over input channels, the reduction (and, over
  output channels, the inputs' exchange, which may be broadcast before the loop: once),
  the least over the partitions;
* **unswapped with ``expandDims``** of one dimension: the dimension's kernel moves into
  the input channels (``expandDim``: its input becomes the output, the channels times the
  kernel size, no padding), then the batch flattens into it; the plain family's one-pass
  terms of that convolution but the rearrangements the expansion adds, and its serial
  splits as above; of both dimensions: the product of ``B F`` positions, ``Ci kh kw`` input
  and ``Co`` output channels (:func:`~.poplibs_matmul_model.poplibs_matmul_plan`,
  unswapped, which leaves out the expanded operands' rearrangement);
* **swapped with every dimension flattened into the output channels**
  (``outChanFlattenDims``: ``expandDim`` of the unswapped form, the dimension into the
  batch, swapped back): the swapped form of that same product, costed whole;
* **the other swapped forms** keep, in each dimension not flattened, the activations as a
  kernel as wide as the field (or expand it into the input channels): the AMP estimate
  assumes every kernel position of a tile meets every output position of it, at least 4
  cycles an output position for 16 input channels and each pass of at most 16 output
  channels (:func:`~.poplibs_conv_model.swapped_partial_floor`'s argument), so at least
  ``4 P K ceil(Ci' / 16) ceil(Co' / 16) / T`` cycles of partial sums, ``P`` output positions,
  ``K`` kernel positions, ``Ci'``, ``Co'`` the channels of the form.

Derived from the source, not a port.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from ipusim.machine_copies import transform_factor
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.poplibs_conv2d_model import (
    AMP_GROUPINGS,
    _check,
    _partitions,
    family_costs,
    partial_sums,
)
from poplar_api.poplin.poplibs_matmul_model import poplibs_matmul_plan
from poplar_api.types import HALF

__all__ = ["amp_floors", "expanded_params"]

#: The terms an iteration of a serial plan is bounded by leaving out, by the kind of split:
#: the output regroup (it depends on the tiles of the whole convolution), over input
#: channels the reduction (estimated with the serial split), over output channels the
#: inputs' exchange (broadcast before the loop, or not: counted once).
_SERIAL_SKIP = {"in": ("transform", "reduce"), "out": ("transform", "input exchange")}


def _conv(batch: int, field: list[int], kernel: list[int], ci: int, co: int,
          pad: list[int]) -> ConvParams:  # fmt: skip
    return ConvParams(HALF, batch, field, kernel, ci, co, paddingLower=pad, paddingUpper=pad)


def expanded_params(params: ConvParams, dim: int) -> ConvParams:
    """The unswapped convolution of ``params`` with dimension ``dim`` expanded
    (``expandDim``) and the batch flattened into it (``calculateFlattenedParams``: the
    expanded dimension has a one-wide kernel and no padding, the other keeps its kernel)."""
    field = [int(x) for x in params.getOutputFieldShape()]
    kernel = [int(x) for x in params.kernelShape]
    pad = [int(x) for x in params.inputTransform.paddingLower]
    upper = [int(x) for x in params.inputTransform.paddingUpper]
    if pad != upper:
        raise ValueError(f"expanded_params: padding {pad} / {upper}: equal lower and upper "
                         "padding needed (hint: the model covers symmetric padding)")  # fmt: skip
    other = 1 - dim
    shape = [0, 0]
    shape[dim] = field[dim] * params.batchSize
    shape[other] = int(params.inputFieldShape[other])
    kern = [1, 1]
    kern[other] = kernel[other]
    pads = [0, 0]
    pads[other] = pad[other]
    ci = params.inputChannelsPerConvGroup * kernel[dim]
    return _conv(1, shape, kern, ci, params.outputChannelsPerConvGroup, pads)


def _family_floor(params: ConvParams, target: Any, limit: float, skip: tuple[str, ...] = ()) -> int:
    """The least cost over every partition and AMP grouping of the plain family of
    ``params`` with the ``skip`` terms left out (a partition whose lower bound passes
    ``limit`` counts as that bound)."""
    best = None
    for groups in AMP_GROUPINGS:
        c = family_costs(params, target, "AMP", groups, _partitions(params, target, "AMP", groups),
                         limit, skip)  # fmt: skip
        low = int(c["cycles"].min())
        best = low if best is None else min(best, low)
    assert best is not None
    return best


class _Iterations:
    """The one-pass terms of a serial plan's iteration (:func:`family_costs` of ``sub``
    with :data:`_SERIAL_SKIP`'s terms left out) over every partition, for any cap: the
    terms but the partial sums and the MAC inequality's least partial sums are computed
    once (one :func:`family_costs` of nothing costed, the skipped terms taken off), the
    partial-sum estimates of a partition once, when a cap first reaches it, and its
    cycles then its other terms plus them (:func:`partial_sums`; serial counts giving the
    same iteration share them; host time only)."""

    def __init__(self, sub: ConvParams, target: Any, groups: tuple[int, int], kind: str):
        self.sub, self.target, self.groups = sub, target, groups
        self.parts = _partitions(sub, target, "AMP", groups)
        whole = family_costs(sub, target, "AMP", groups, self.parts, -1)  # (nothing costed)
        #: a partition's cycles when not costed: its terms but the skipped ones, plus the
        #: least partial sums (the terms are summed: leaving one out is taking it off)
        self.low = whole["cycles"] - sum(whole[key] for key in _SERIAL_SKIP[kind])
        #: the MAC inequality's least partial sums (``compute`` of a partition not costed)
        self.least = whole["compute"]
        #: the inputs' exchange of each partition (added once over output channels)
        self.inputs = whole["input exchange"] if kind == "out" else 0
        self.exact = np.zeros(self.low.shape, np.int64)
        self.known = np.zeros(self.low.shape, bool)

    def costs(self, cap: float) -> tuple[np.ndarray, np.ndarray]:
        """Which partitions :func:`family_costs` with limit ``cap`` costs, and its cycles
        (the same values)."""
        costed = self.low <= cap
        need = costed & ~self.known
        if need.any():
            sub = {k: v[need] for k, v in self.parts.items()}
            compute = partial_sums(self.sub, self.target, "AMP", self.groups, sub)
            self.exact[need] = self.low[need] - self.least[need] + compute
            self.known |= need
        return costed, np.where(costed, self.exact, self.low)


def _serial_floor(
    params: ConvParams, target: Any, limit: float, extra: tuple[int, int] = (0, 0)
) -> int:
    """The least cost of a serial plan of the plain family of ``params`` (module
    docstring), over both kinds and every count, with ``extra`` the cycles of rearranging
    the inputs and the weights (an expanded form's): the weights' every iteration, the
    inputs' every iteration over input channels and, over output channels, at least once
    (``broadcastInputBeforeLoop`` moves their rearrangement before the loop with their
    exchange: ``ConvModel.cpp``, ``addEstimates``)."""
    best: int | None = None
    iterations: dict[tuple[int, int, str, int], _Iterations] = {}
    ci, co = params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup
    field = [int(x) for x in params.inputFieldShape]
    kernel = [int(x) for x in params.kernelShape]
    pad = [int(x) for x in params.inputTransform.paddingLower]
    for icg, ocg in AMP_GROUPINGS:
        for kind, chans, grain in (("in", ci, icg), ("out", co, ocg)):
            grains = -(-chans // grain)
            for s in range(2, grains + 1):
                sub_chans = -(-grains // s) * grain
                sub = _conv(params.batchSize, field, kernel,
                            sub_chans if kind == "in" else ci,
                            sub_chans if kind == "out" else co, pad)  # fmt: skip
                once = extra[0] if kind == "out" else 0
                each = extra[1] + (extra[0] if kind == "in" else 0)
                cap = ((limit if best is None else min(limit, best)) - once) / s - each
                key = (icg, ocg, kind, sub_chans)
                if key not in iterations:
                    iterations[key] = _Iterations(sub, target, (icg, ocg), kind)
                costed, costs = iterations[key].costs(cap)
                cycles = s * (costs + each) + once
                if kind == "out":  # (the inputs' exchange at least once, before the loop)
                    cycles = cycles + np.where(costed, iterations[key].inputs, 0)
                low = int(cycles.min())
                best = low if best is None else min(best, low)
    assert best is not None
    return best


def _rearrange_floor(params: ConvParams, target: Any, inputs: int, weights: int) -> int:
    """The least cycles of ``addTransformCycleEstimate``'s rearrangement of ``inputs`` and
    ``weights`` elements (``rearrangeInput``, ``rearrangeWeights``: an expanded form), on
    any number of tiles: each tensor's HALF bytes over the ``T`` tiles at most, copied at
    ``min(memcpy, 2)`` bytes a cycle times ``4 / 5`` (``3 / 5`` when the channels' product
    is no multiple of 4, ``getScaleFactorForTransform``) and exchanged."""
    tiles = target.getNumTiles()
    memcpy = target.getDataPathWidth() // 8
    xbpc = target.getExchangeBytesPerCycle()
    chans = params.inputChannelsPerConvGroup * params.outputChannelsPerConvGroup
    f1 = int(transform_factor("half", chans)[1])
    total = 0
    for elements in (inputs, weights):
        per_tile = -(-elements * HALF.size // tiles)
        total += -(-per_tile * 5 // (min(memcpy, HALF.size) * f1)) + int(np.ceil(per_tile / xbpc))
    return total


def _swapped_floor(params: ConvParams, target: Any) -> int:
    """The least partial sums of the swapped forms that flatten fewer than every dimension
    into the output channels (module docstring): per dimension ``d`` of ``n`` outputs and
    a kernel of ``k``, flattened: ``n`` times the output channels and ``k`` times the
    input channels; otherwise ``n`` output positions and ``n`` kernel positions (or, if
    expanded, ``n`` times the input channels: the same product); the batch is ``Co``."""
    tiles = target.getNumTiles()
    outs = [int(x) for x in params.getOutputFieldShape()]
    kernel = [int(x) for x in params.kernelShape]
    best: int | None = None
    for flat in itertools.product((False, True), repeat=2):
        if all(flat):
            continue
        positions, kpos = params.outputChannelsPerConvGroup, 1
        ci, co = params.inputChannelsPerConvGroup, params.batchSize
        for d in range(2):
            if flat[d]:
                co *= outs[d]
                ci *= kernel[d]
            else:
                positions *= outs[d]
                kpos *= outs[d]
        work = 4 * positions * kpos * -(-ci // 16) * -(-co // 16)
        cycles = work // tiles
        best = cycles if best is None else min(best, cycles)
    assert best is not None
    return best


def amp_floors(params: ConvParams, target: Any, limit: float) -> dict[str, int]:
    """Lower bounds of Poplibs' cost of the AMP plans of ``params`` by form (module
    docstring), each exact where below ``limit`` (the cost of a plan they must pass):
    ``"serial"``, ``"expanded d"`` (one pass; ``d`` 0 or 1), ``"expanded d serial"``,
    ``"expanded both"``, ``"swapped, flattened"``, ``"swapped, other"``."""
    _check(params, target)
    out = {"serial": _serial_floor(params, target, limit)}
    for d in range(2):
        if int(params.kernelShape[d]) == 1 and not params.inputTransform.paddingLower[d]:
            continue  # (expandingDimChangesParams: no such candidate)
        sub = expanded_params(params, d)
        # (the expansion rearranges the inputs and weights, once a pass or iteration)
        inputs = sub.batchSize * int(np.prod(sub.inputFieldShape)) * sub.inputChannelsPerConvGroup
        weights = (int(np.prod(sub.kernelShape)) * sub.inputChannelsPerConvGroup
                   * sub.outputChannelsPerConvGroup)  # fmt: skip
        each = (_rearrange_floor(sub, target, inputs, 0), _rearrange_floor(sub, target, 0, weights))
        rearr = sum(each)
        out[f"expanded {d}"] = _family_floor(sub, target, limit - rearr) + rearr
        out[f"expanded {d} serial"] = _serial_floor(sub, target, limit, each)
    positions = params.batchSize * int(np.prod(params.getOutputFieldShape()))
    k = params.inputChannelsPerConvGroup * int(np.prod(params.kernelShape))
    dims = (1, positions, k, params.outputChannelsPerConvGroup)
    both = _conv(1, [1, positions], [1, 1], k, params.outputChannelsPerConvGroup, [0, 0])
    for key, swap in (("expanded both", False), ("swapped, flattened", True)):
        plan = poplibs_matmul_plan(dims, target, "NONE", swaps=(swap,), release="7eac0f26")
        out[key] = int(plan["cost"][0])
    # (unswapped, the expansion rearranges the inputs and weights, which the product's
    # plan leaves out: at least their least cost on every pass)
    out["expanded both"] += _rearrange_floor(both, target, positions * k,
                                             k * params.outputChannelsPerConvGroup)  # fmt: skip
    out["swapped, other"] = _swapped_floor(params, target)
    return out
