"""Poplibs' estimate of the operand and output rearrangements of a matmul product.

``addTransformCycleEstimate`` (``lib/poplin/ConvModel.cpp`` at graphcore/poplibs
``7eac0f26``) charges a candidate plan for copying its operands and output into the
plan's layout: which tensors are rearranged depends on the operand order
(``swapOperands``), the padding of channels to the vertex groupings, the pass and
whether the fully-connected passes are planned jointly.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ipusim.machine_copies import transform_factor
from poplar_api.poplin.conv_params import ConvParams

__all__ = ["MATMUL_PASSES", "transform_estimates"]

#: The passes of a matmul product (Poplibs' ``isMatmulOrFullyConnectedLayer``).
MATMUL_PASSES = ("NONE_MATMUL", "FC_INFERENCE_FWD", "FC_TRAINING_FWD", "FC_TRAINING_BWD",
                 "FC_TRAINING_WU")  # fmt: skip


def transform_estimates(
    params: ConvParams,
    conv_pass: str | None,
    swapped: bool,
    icg: np.ndarray,
    ocg: np.ndarray,
    used: np.ndarray,
    target: Any,
    weights_per_conv_unit: int,
    joint: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """``(cycles, temporary bytes)`` of the operand and output rearrangements Poplibs'
    cost model charges a matmul product's candidates (``addTransformCycleEstimate``,
    ``lib/poplin/ConvModel.cpp`` at graphcore/poplibs 7eac0f26, default options).

    For every pass of a product (``isMatmulOrFullyConnectedLayer``) the input and the
    weights are rearranged unless the operands are swapped, and also when the input
    channels are not a multiple of the vertex's input grouping (``padInChannels``:
    input and weights) or the output channels not of its partials grouping
    (``padPartialChannels``: weights and output); the output unless swapped. The
    fully-connected passes add: ``FC_TRAINING_WU`` always rearranges its input, and its
    output unless planned jointly (``joint``); ``FC_TRAINING_BWD`` its input unless
    planned jointly. A plain product's output (``NONE_MATMUL``) is also regrouped (a
    copy on the tile) when its partials grouping is not ``weights_per_conv_unit``
    (``regroupOutput``, which does not apply to the fully-connected passes). Each
    rearrangement spreads its tensor's bytes (channels padded to the groupings) over
    the used tiles: a copy of ``5 / f`` cycles per ``min(memcpy, element)`` bytes (``f``
    4 or 3, :func:`ipusim.machine_copies.transform_factor`; memcpy bytes per cycle = the
    data path width)
    and an exchange at the target's rate; a regroup copies ``min(memcpy, group
    bytes)`` per cycle. The temporary bytes are twice the largest tensor's bytes per
    tile. Convolutions (other passes) are costed without it.
    """
    n = used.size
    if conv_pass not in MATMUL_PASSES:
        return np.zeros(n, np.int64), np.zeros(n, np.int64)
    g = params.numConvGroups
    field = params.batchSize * int(math.prod(params.getOutputFieldShape()))
    ci, co = params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup
    ci_p, co_p = -(-ci // icg) * icg, -(-co // ocg) * ocg
    in_b, out_b = params.outputType.size, params.outputType.size
    memcpy = max(target.getDataPathWidth() // 8, 1)
    xbpc = target.getExchangeBytesPerCycle()
    pad_in, pad_partial = ci % icg != 0, co % ocg != 0
    unswapped = not swapped
    wu, bwd = conv_pass == "FC_TRAINING_WU", conv_pass == "FC_TRAINING_BWD"
    re_in = unswapped | pad_in | wu | (bwd and not joint)
    re_w = unswapped | pad_in | pad_partial
    re_out = unswapped | pad_partial | (wu and not joint)
    regroup = (conv_pass == "NONE_MATMUL") & (ocg != weights_per_conv_unit)

    def per_tile(elements: np.ndarray, size: int) -> np.ndarray:
        return -(-(elements * size) // used)

    f0, f1 = transform_factor(params.inputType.name, ci * co)
    bpc = min(memcpy, in_b)
    in_t = per_tile(field * ci_p * g, in_b)
    w_t = per_tile(ci_p * co_p * g * int(math.prod(params.kernelShape)), in_b)
    out_t = -(-(field * co_p * g) // used) * out_b  # elements per tile, then bytes
    o0, o1 = transform_factor(params.outputType.name, co)
    move = lambda b, rate: -(-(b * f0) // (rate * f1))  # noqa: E731
    xch = lambda b: np.ceil(b / xbpc).astype(np.int64)  # noqa: E731
    cycles = np.where(re_in, move(in_t, bpc) + xch(in_t), 0)
    cycles = cycles + np.where(re_w, move(w_t, bpc) + xch(w_t), 0)
    out_copy = np.where(
        re_out,
        -(-(out_t * o0) // (min(memcpy, out_b) * o1)) + xch(out_t),
        np.where(regroup, -(-(out_t * o0) // (np.minimum(memcpy, ocg * out_b) * o1)), 0),
    )
    cycles = cycles + out_copy
    temp = 2 * np.maximum.reduce([np.where(re_in, in_t, 0), np.where(re_w, w_t, 0),
                                  np.where(re_out | regroup, out_t, 0)])  # fmt: skip
    return cycles.astype(np.int64), temp.astype(np.int64)
