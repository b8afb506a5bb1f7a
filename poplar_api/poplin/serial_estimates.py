"""What a serial split adds to a convolution plan's cost, as Poplibs' planner estimates it.

Poplibs' planner (``lib/poplin/ConvModel.cpp`` at graphcore/poplibs ``7eac0f26``,
``constructModel`` and ``addEstimates``) splits a convolution serially at the IPU level
in one of two ways, never both (``m.equal(min(inChanSplit.serial,
outChanSplit.serial), 1)``):

* over the **output channels** (``outChanSplit.serial``): each of ``S`` iterations
  computes ``Co / S`` output channels and writes them into the output
  (``addDynamicUpdateEstimate``);
* over the **input channels** (``inChanSplit.serial``; never in a joint plan of a
  fully-connected layer): each iteration convolves ``Ci / S`` input channels and adds its
  partial sums to those of the earlier iterations in the partials type
  (``addInPlaceEstimate``: ``getBinaryOp1DInPlaceEstimate`` of an ``ADD`` over the tile's
  outputs); the cast to the output type is made once, after the loop
  (``addOutputCastEstimate``, ``estimateCastCycles``), and the accumulated partials are
  temporary bytes beside one iteration's (``addInPlaceTempBytes``).

Each iteration also slices its weights (and, split over input channels, its inputs)
dynamically (``addDynamicSliceEstimate``: ``getDynamicSlice1DEstimate`` of the tile's
share of the whole convolution's weights, ``ceil(weights / tiles)``, divided by ``S``).
``addEstimates`` multiplies one iteration's cycles, these included, by ``S`` and adds the
once-only terms. The functions here give those terms for arrays of candidates.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from poplar_api.popops.dynamic_slice import slice_1d_estimate
from poplar_api.popops.estimators import binary_op_1d_in_place_array
from poplar_api.types import HALF, Type

__all__ = ["MAX_SERIAL", "serial_chans", "serial_options", "serial_terms", "split_params"]

#: Largest serial split tried (of either kind).
MAX_SERIAL = 16


def serial_options(channels: int) -> list[int]:
    """Serial splits tried for a dimension of ``channels``: its divisors ``S`` from 2 to
    :data:`MAX_SERIAL`, so every iteration has the same channels (Poplibs allows any
    split up to the number of channel grains, ``constructModel``)."""
    return [s for s in range(2, min(MAX_SERIAL, channels) + 1) if channels % s == 0]


def serial_chans(chans: int, serial: int, grain: int) -> int:
    """The channels of one iteration of a ``serial``-way split of ``chans`` channels in
    Poplibs' runs of it (``getOutChansPerSerialSplit`` / ``getInChansPerSerialSplit`` in
    ``lib/poplin/Convolution.cpp`` at graphcore/poplibs ``7eac0f26``): the channel grains
    (of ``grain`` channels, at most ``chans``) shared out ``serial`` ways, rounded up, so
    every iteration but the last has this many channels and the last the rest."""
    if serial == 1:
        return int(chans)
    grain = min(int(grain), max(int(chans), 1))
    grains = -(-int(chans) // grain)
    return -(-grains // int(serial)) * grain


def _slice_cycles(elements: np.ndarray, serial: int, type_: Type, target: Any) -> np.ndarray:
    """``addDynamicSliceEstimate``: ``getDynamicSlice1DEstimate`` of ``ceil(elements /
    serial)`` elements of ``type_`` (one sub-element), 0 without a serial split."""
    if serial == 1:
        return np.zeros(np.shape(elements), np.int64)
    vw = 4 if type_.size == 1 else target.getDataPathWidth() // (16 if type_ == HALF else 32)
    region = -(-np.asarray(elements, np.int64) // serial)
    return slice_1d_estimate(region, 1, target.getNumWorkerContexts(), vw, type_.size == 1)


def serial_terms(
    params: Any,
    cat: dict[str, np.ndarray],
    serial: int,
    kind: str,
    partials: Type,
    target: Any,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(cycles per iteration, cycles once, temporary bytes)`` a serial split adds to
    the candidates ``cat`` (one iteration's splits, :func:`~.conv_planner._candidates`)
    of ``params`` (the whole convolution) split ``serial`` ways over ``kind`` ("in" or
    "out") channels.

    Per iteration: the dynamic slice of the weights (both kinds) and of the inputs
    ("in"), the dynamic update of the outputs ("out"), the in-place addition of the
    partials ("in"); once: the cast of the accumulated partials ("in"); bytes: the
    accumulated partials ("in"). A tile's outputs are its block's partials (output
    channels padded to the vertex's partial grouping) over its input-channel parts
    (``addPartialsPerTile``, ``outputsPerLevel``).

    Parameters
    ----------
    params
        The whole convolution's parameters (``ConvParams``).
    cat
        One iteration's candidate columns: ``used`` tiles, ``blocks``, ``parts`` and the
        partial grouping ``ocg``, one row per candidate.
    serial
        The number of iterations.
    kind
        "in" or "out": the channels split serially.
    partials
        The partials' type.
    target
        The target (worker contexts, vector widths).

    Returns
    -------
    tuple of numpy.ndarray
        Per candidate: cycles per iteration, cycles once after the loop, temporary bytes
        (int64 each).
    """
    used = cat["used"]
    workers = target.getNumWorkerContexts()
    g, kpos = params.numConvGroups, int(np.prod(params.kernelShape))
    ci, co = params.inputChannelsPerConvGroup, params.outputChannelsPerConvGroup
    weights = -(-(g * kpos * ci * co) // used)
    in_elems = g * params.batchSize * int(np.prod(params.inputFieldShape)) * ci
    inputs = -(-in_elems // used)
    blocks, ocg = cat["blocks"], cat["ocg"]
    positions = np.prod(blocks[:, 1:-2], axis=1)
    padded_co = -(-blocks[:, -2] // ocg) * ocg
    outputs = -(-(blocks[:, 0] * positions * padded_co) // cat["parts"][:, -1])
    per_iter = _slice_cycles(weights, serial, params.inputType, target)
    zero = np.zeros(used.shape, np.int64)
    if kind == "out":
        per_iter = per_iter + _slice_cycles(outputs, serial, partials, target)
        return per_iter, zero, zero
    per_iter = per_iter + _slice_cycles(inputs, serial, params.inputType, target)
    pvw = target.getVectorWidth(partials)
    add = binary_op_1d_in_place_array("ADD", partials.name.lower(), outputs, workers, pvw)
    per_worker = -(-outputs // workers)
    ovw = target.getVectorWidth(params.outputType)
    cast = workers * (np.maximum(-(-per_worker // pvw), -(-per_worker // ovw)) + 26)
    return per_iter + add, cast, outputs * partials.size


def split_params(
    params: Any,
    kind: str,
    serial: int,
    output_type: Type | None = None,
    chans: int | None = None,
) -> Any:
    """The convolution of one iteration of a ``serial``-way split over ``kind`` ("in" or
    "out") channels: ``params`` with ``1 / serial`` of those channels, or ``chans`` of
    them when given (a split whose last iteration is padded, :func:`serial_chans`), and
    ``output_type`` as its output type when given."""
    sub = copy.copy(params)
    attr = "inputChannelsPerConvGroup" if kind == "in" else "outputChannelsPerConvGroup"
    per = int(getattr(params, attr)) // serial if chans is None else int(chans)
    object.__setattr__(sub, attr, per)
    if output_type is not None:
        object.__setattr__(sub, "outputType", output_type)
    return sub
