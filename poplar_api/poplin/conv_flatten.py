"""Poplibs' ``flattenDims`` transform after a partial expansion: the batch (and every other
dimension that can be) folded into the innermost flattenable field dimension.

graphcore/poplibs ``7eac0f26`` plans each candidate ``expandDims`` set and then flattens
(``calculateFlattenedParams``, ``lib/poplin/ConvModel.cpp``): the batch is always a
candidate (Poplibs' dimension 0), a field dimension ``d`` (Poplibs' ``d + 1``) when
``dimCanBeFlattened`` holds (its transformed kernel one wide, no truncation, dilation,
padding or flip of the input, no truncation, stride or padding of the output: an expanded
dimension, for one); with two or more candidates each is folded into the innermost one,
whose size becomes their product and every other their 1. ``convolutionPreprocess``
(``lib/poplin/Convolution.cpp``, ``doFlatten``) folds the tensors the same way
(``flattenDims`` of ``lib/poplin/ConvTransforms.cpp``: dimension ``from`` outer, ``to``
inner), from the innermost candidate outwards, so a position of the flattened dimension
is the row-major index of the candidates' positions, the batch outermost.

Poplibs' plan constraints have no ``flattenDims`` key (``getPlanConstraints`` writes
``expandDims`` and ``outChanFlattenDims``; ``flattenDims`` is derived): the flattening
follows from the dimensions expanded. ipusim derives it the same way for a partial
expansion (:func:`~poplar_api.poplin.conv_params.expand_dims` of some dimensions) and
accepts ``transform.flattenDims`` ``[]`` to run the expanded convolution unflattened.

Tensors use ipusim's canonical order ``[G, B, C, *field]`` (activations and outputs),
so Poplibs' flatten dimension ``p`` is axis 1 (``p == 0``) or ``2 + p``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.poplin.conv_kernel_split import kernel_block_tiles
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import ConvPlan, block_tiles

__all__ = [
    "flatten_dims",
    "flatten_ids",
    "flatten_tensor",
    "flattened_params",
    "layout_plan",
    "unflatten_tensor",
]


def _can_be_flattened(params: ConvParams, d: int) -> bool:
    """Poplibs' ``dimCanBeFlattened`` of field dimension ``d``."""
    it, ot = params.inputTransform, params.outputTransform
    moved = (it.truncationLower, it.truncationUpper, it.paddingLower, it.paddingUpper,
             ot.truncationLower, ot.truncationUpper, ot.paddingLower, ot.paddingUpper)  # fmt: skip
    return (
        params.getTransformedKernelSize(d) == 1
        and params.kernelShape[d] == 1
        and not any(v[d] for v in moved)
        and it.dilation[d] == 1
        and not it.flip[d]
        and ot.stride[d] == 1
    )


def flatten_dims(params: ConvParams) -> tuple[int, ...]:
    """Poplibs' ``flattenDims`` of ``params`` (``calculateFlattenedParams`` without
    ``outChanFlattenDims``): 0 for the batch, ``d + 1`` for each field dimension ``d``
    that can be flattened, ascending, the last the one folded into; empty when fewer
    than two. (Here a kernel wider than one position truncated to one is not flattened:
    ipusim's lowering keeps such a kernel.)"""
    dims = [0] if params.batchSize > 0 else []
    dims += [d + 1 for d in range(params.getNumFieldDims()) if _can_be_flattened(params, d)]
    return tuple(dims) if len(dims) > 1 else ()


def _check(params: ConvParams, dims: Sequence[int]) -> tuple[int, ...]:
    dims = tuple(int(d) for d in dims)
    want = flatten_dims(params)
    if dims and dims != want:
        raise GraphError(
            f"convolution: flattenDims={list(dims)} for {params}; Poplibs flattens "
            f"{list(want)} (the batch as 0, field dimension d as d + 1: those "
            f"dimCanBeFlattened allows), hint: [] keeps the convolution unflattened"
        )
    return dims


def flattened_params(params: ConvParams, dims: Sequence[int]) -> ConvParams:
    """The convolution ``calculateFlattenedParams`` makes of ``params`` with
    ``flattenDims`` ``dims`` (:func:`flatten_dims`): the last dimension's size the product
    of all of theirs, each other's 1; kernels and transforms unchanged (a flattened
    dimension has none)."""
    dims = _check(params, dims)
    if not dims:
        return params
    batch, field = params.batchSize, [int(f) for f in params.inputFieldShape]
    sizes = [batch if p == 0 else field[p - 1] for p in dims]
    to = dims[-1]
    for p in dims[:-1]:
        if p == 0:
            batch = 1
        else:
            field[p - 1] = 1
    field[to - 1] = int(math.prod(sizes))
    it, kt, ot = params.inputTransform, params.kernelTransform, params.outputTransform
    as_dict = lambda t: {k: list(v) for k, v in vars(t).items()}  # noqa: E731
    return ConvParams(
        params.inputType,
        batch,
        field,
        list(params.kernelShape),
        params.inputChannelsPerConvGroup,
        params.outputChannelsPerConvGroup,
        params.numConvGroups,
        as_dict(it),
        as_dict(kt),
        as_dict(ot),
        outputType=params.outputType,
        _signed=True,
    )


def _order(shape: Sequence[int], dims: Sequence[int]) -> tuple[list[int], list[int]]:
    """``(perm, shape)``: the axes of ``[G, B, C, *field]`` (``shape``) with the
    flattened ones moved just before the one folded into, in order, and the flattened
    shape (the folded axis their product, the others 1) a row-major reshape of the
    permuted array gives."""
    axes = [1 if p == 0 else 2 + p for p in dims]
    to = axes[-1]
    perm = []
    for a in range(len(shape)):
        if a == to:
            perm += axes
        elif a not in axes:
            perm.append(a)
    flat = [1 if a in axes[:-1] else int(n) for a, n in enumerate(shape)]
    flat[to] = int(math.prod([shape[a] for a in axes]))
    return perm, flat


def flatten_ids(ids: np.ndarray, dims: Sequence[int]) -> np.ndarray:
    """Element ids (or positions) ``[G, B, C, *field]`` as the flattened convolution's
    (``doFlatten``); ``dims`` as :func:`flatten_dims`."""
    if not dims:
        return ids
    perm, flat = _order(ids.shape, dims)
    return ids.transpose(perm).reshape(flat)


def flatten_tensor(t: Any, dims: Sequence[int]) -> Any:
    """:func:`flatten_ids` of a Tensor ``[G, B, C, *field]`` (a view)."""
    if not dims:
        return t
    perm, flat = _order(t.shape(), dims)
    return t.dimShuffle(perm).reshape(flat)


def unflatten_tensor(t: Any, dims: Sequence[int], shape: Sequence[int]) -> Any:
    """The inverse of :func:`flatten_tensor`: the flattened convolution's ``t`` (e.g. its
    output ``[G, 1, Co, ...]``) as ``shape`` ``[G, B, C, *field]`` (a view; Poplibs'
    ``unflattenDims``)."""
    if not dims:
        return t
    perm, _ = _order(shape, dims)
    permuted = t.reshape([int(shape[a]) for a in perm])
    inverse = list(np.argsort(perm))
    return permuted.dimShuffle([int(a) for a in inverse])


def layout_plan(plan: ConvPlan, expanded: ConvParams, target: Any) -> ConvPlan:
    """``plan`` (of the expanded and flattened convolution) restated over the expanded,
    unflattened one ``expanded``, for the layout of the tensors ``createInput`` and
    ``createWeights`` make: the flattened dimension's parts are given to the flattened
    dimensions outermost first (the batch first, each as many as its size allows and the
    rest to the next), so the blocks are as many as the plan's or fewer; the tiles are
    the blocks' in Poplibs' order (:func:`~.conv_planner.block_tiles`). The operands are
    copied to the plan's own tiles before the vertices read them (an expanded plan
    rearranges both), so this sets only where that copy reads from; Poplibs' own layout
    of them (``createInputImpl``'s ``mapActivations`` of the original convolution) is not
    restated."""
    dims = plan.flatten_dims
    parts, blocks = list(plan.parts), list(plan.blocks)
    out = expanded.getOutputFieldShape()
    left = parts[1 + dims[-1]]
    for p in dims:
        n = int(expanded.batchSize if p == 0 else out[p - 1])
        part = max(1, min(n, left))
        left = max(1, left // part)
        blocks[1 + p] = -(-n // part)
        parts[1 + p] = -(-n // blocks[1 + p])
    n_tiles, per_ipu = target.getNumTiles(), target.getTilesPerIPU()
    if plan.kernel_split > 1:
        tiles = kernel_block_tiles(tuple(parts), plan.kernel_split, n_tiles, per_ipu)
    else:
        tiles = block_tiles(tuple(parts), n_tiles, per_ipu)
    return dataclasses.replace(plan, parts=tuple(parts), blocks=tuple(blocks), tiles=tiles,
                               flatten_dims=())  # fmt: skip
