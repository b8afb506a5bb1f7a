"""Kernel splits over tiles: Poplibs' ``kernelSplit`` of the outer kernel dimension.

A plan with ``kernel_split`` ``K > 1`` (:class:`~poplar_api.poplin.conv_planner.ConvPlan`)
gives each of its blocks ``(G, B, *field, Co, Ci)`` to ``K`` tiles, tile ``k`` computing
the partial sums of the kernel rows of part ``k`` (the outer kernel dimension only: the
inner one "the implementation doesn't support splitting", ``constructModel`` in
``lib/poplin/ConvModel.cpp`` at graphcore/poplibs ``7eac0f26``). What Poplibs does there
(``lib/poplin/Convolution.cpp``):

* the kernel rows of part ``k`` begin at ``getParallelSplitBegin(k, rows, K)``: ``rows /
  K`` a part, the last ``rows mod K`` parts one more;
* the tile of block ``(g, b, *f, co, ci)`` and kernel part ``k`` is
  ``linearizeConvIndices``': conv group, input-channel part, kernel part, batch, field,
  output-channel part, the output channels innermost (:func:`kernel_block_tiles`);
* each tile's sub-convolution (``getSubConvolution``) reads only the input rows its kernel
  rows meet (its window, with the halo of its own rows) and its weights' rows;
* the partials get one leading dimension of ``inChanSplit.parallel x K`` parts, part
  ``ic K + k`` (``getPartialIndex``), reduced into the output as the input-channel
  partials are (``convolutionReduction``): the kernel split is another dimension of the
  partials' reduction.

ipusim runs a kernel part as the convolution of its rows (:func:`kernel_part_params`:
the same output, the padded input shifted by the rows left out, with signed padding), so
its vertices, worklists, estimates and input windows are those of an ordinary plan of
that convolution (:mod:`.conv_blocks`), written into the part's rows of the partials
(:mod:`.conv`);
:mod:`.conv_reduce` sums the ``Ci x K`` parts. The operands are laid out for it by
:mod:`.conv_layout` (an input block spread over the tiles of its output-channel and
kernel parts, a weight on a tile of its kernel row's part). The kernel's truncation,
dilation and padding and the input's transforms carry over (a part's kernel keeps its
rows' truncation; the padding moves into the input's shift; a kernel flipped in the outer
dimension, which the kernel transform applies last, keeps its flip, its part's rows lying
as far from the other end of the transformed kernel); not supported: a flip of the input
in the outer dimension, and a part whose rows are all truncated (:func:`check_kernel_split`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.poplin.conv_params import ConvParams

__all__ = [
    "check_kernel_split",
    "kernel_block_tiles",
    "kernel_part_params",
    "kernel_ranges",
    "largest_kernel_part",
    "part_plan",
    "partial_part_tiles",
]


def kernel_ranges(rows: int, split: int) -> list[tuple[int, int]]:
    """The kernel rows ``[begin, end)`` of each of ``split`` parts: Poplibs'
    ``getParallelSplitBegin`` (``rows // split`` a part, the last ``rows % split`` parts
    one row more)."""
    size, rem = divmod(int(rows), int(split))

    def begin(i: int) -> int:
        return i * size + (i - min(i, split - rem))

    return [(begin(i), begin(i + 1)) for i in range(split)]


def check_kernel_split(params: ConvParams, split: int) -> None:
    """Raise a :class:`GraphError` unless ipusim can run ``params`` with its outer
    kernel dimension split ``split`` ways (module docstring)."""
    it = params.inputTransform
    rows = int(params.kernelShape[0])
    why = []
    if not 1 <= split <= rows:
        why.append(f"a kernel split of {split} (1 to the {rows} kernel rows allowed)")
    elif any(_kept(params, k0, k1)[2] <= 0 for k0, k1 in kernel_ranges(rows, split)):
        why.append(f"a part of the {split} has only truncated kernel rows")
    if it.flip[0]:
        why.append("an input flip in dimension 0")
    if why:
        raise GraphError(
            f"kernel split of {params}: " + "; ".join(why) + " (hint: plan it without a "
            "kernel split, or with fewer parts)"
        )


def _kept(params: ConvParams, k0: int, k1: int) -> tuple[int, int, int]:
    """``(truncationLower, truncationUpper, kept rows)`` of the kernel rows ``[k0, k1)``
    of the outer dimension under the kernel's truncation."""
    kt = params.kernelTransform
    rows = int(params.kernelShape[0])
    lo = min(max(int(kt.truncationLower[0]) - k0, 0), k1 - k0)
    hi = min(max(k1 - (rows - int(kt.truncationUpper[0])), 0), k1 - k0)
    return lo, hi, k1 - k0 - lo - hi


def kernel_part_params(params: ConvParams, k0: int, k1: int) -> ConvParams:
    """The convolution of the kernel rows ``[k0, k1)`` of the outer dimension: the same
    output (every output position reads the same transformed input positions as
    before with those rows), the kernel ``k1 - k0`` rows (truncated where the whole
    kernel is, dilated alike, without its padding), the transformed input shifted by
    where the part's first kept row lies in the whole transformed kernel and cut by the
    rest (signed padding: a negative one drops transformed positions; a flipped kernel's
    part from the other end)."""
    kt, it = params.kernelTransform, params.inputTransform
    dil = int(kt.dilation[0])
    lo, hi, kept = _kept(params, k0, k1)
    # the part's first kept row in the whole transformed kernel, and both kernels' sizes
    offset = int(kt.paddingLower[0]) + (max(k0, int(kt.truncationLower[0]))
                                        - int(kt.truncationLower[0])) * dil  # fmt: skip
    whole = params.getTransformedKernelSize(0)
    part = (kept - 1) * dil + 1
    if kt.flip[0]:  # (flipped last: the part's rows lie as far from the other end)
        offset = whole - offset - part
    pl, pu = list(it.paddingLower), list(it.paddingUpper)
    pl[0] -= offset
    pu[0] -= whole - offset - part
    ker = dataclasses.asdict(kt)
    for key, value in (("truncationLower", lo), ("truncationUpper", hi), ("paddingLower", 0),
                       ("paddingUpper", 0)):  # fmt: skip
        ker[key] = [value, *ker[key][1:]]
    sub = ConvParams(
        params.inputType, params.batchSize, list(params.inputFieldShape),
        [k1 - k0, *params.kernelShape[1:]], params.inputChannelsPerConvGroup,
        params.outputChannelsPerConvGroup, params.numConvGroups,
        inputTransform={**dataclasses.asdict(it), "paddingLower": pl, "paddingUpper": pu},
        kernelTransform=ker,
        outputTransform=dataclasses.asdict(params.outputTransform),
        outputType=params.outputType, _signed=True,
    )  # fmt: skip
    assert sub.getOutputFieldShape() == params.getOutputFieldShape(), (sub, params)
    return sub


def largest_kernel_part(params: ConvParams, split: int) -> ConvParams:
    """:func:`kernel_part_params` of the part with the most kernel rows (the last of
    them): the convolution a kernel-split plan is searched and costed for."""
    ranges = kernel_ranges(params.kernelShape[0], split)
    k0, k1 = max(ranges, key=lambda r: (r[1] - r[0], r[0]))
    return kernel_part_params(params, k0, k1)


def kernel_block_tiles(
    parts: tuple[int, ...], split: int, num_tiles: int, tiles_per_ipu: int
) -> np.ndarray:
    """``int64[split, *parts]``: the tile of each kernel part and block ``(G, B, *field,
    Co, Ci)``, in Poplibs' order (``linearizeConvIndices``: ``((((g Pci + ci) K + k) Pb +
    b) Pf + f) Pco + co``); on several IPUs spread evenly in that order."""
    nd = len(parts)
    used = int(np.prod(parts)) * split
    order = [parts[0], parts[-1], split, *parts[1:-1]]  # G, Ci, K, B, *field, Co
    if num_tiles != tiles_per_ipu:
        linear = np.arange(used, dtype=np.int64) * num_tiles // used
    else:
        linear = np.arange(used, dtype=np.int64)
    grid = linear.reshape(order)  # [G, Ci, K, B, *field, Co]
    grid = np.moveaxis(grid, 1, -1)  # [G, K, B, *field, Co, Ci]
    return np.ascontiguousarray(np.moveaxis(grid, 1, 0)).reshape(split, *parts[:nd])


def part_plan(plan: Any, k: int) -> Any:
    """The plan of kernel part ``k`` of ``plan``: its blocks on that part's tiles, no
    kernel split (what :mod:`.conv_blocks` lowers)."""
    return dataclasses.replace(plan, tiles=plan.tiles[k], kernel_split=1)


def partial_part_tiles(plan: Any) -> np.ndarray:
    """``int64[blocks, Pci K]``: per output block ``(G, B, *field, Co)`` (row-major) the
    tile of each of its partials' parts, part ``ic K + k`` (Poplibs' ``getPartialIndex``)."""
    tiles = np.asarray(plan.tiles, np.int64)
    if plan.kernel_split == 1:
        return tiles.reshape(-1, plan.parts[-1])
    by_block = np.moveaxis(tiles, 0, -1)  # [G, B, *field, Co, Ci, K]
    return by_block.reshape(-1, plan.parts[-1] * plan.kernel_split)
