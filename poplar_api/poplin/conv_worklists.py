"""Per-tile geometry of a convolution: input windows, worker partitions and worklists.

Given the per-dimension maps of :func:`~poplar_api.poplin.conv_params.dim_maps` (the
input index each kernel/output index pair reads), a tile's block of the output (a
batch range and one range per field dimension) determines:

* the input window: per dimension, the range of input indices any of its outputs read;
* for each kernel position, the outputs that read a real input, split over the worker
  contexts as Poplibs' ``partitionConvPartialByWorker`` (``lib/poplin/ConvUtilInternal.cpp``
  at graphcore/poplibs ``7eac0f26``) splits them: the kernel position's active output
  rows (batch x outer field positions) times the active elements of a row are cut into
  ``numWorkers`` equal contiguous ranges of elements, each range becoming one worklist
  entry per row it touches;
* the worklist entries ``(outRow, num, inRow)`` in rows of the tile's output block and
  input window, with one input and one output stride per tile.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

__all__ = ["TileGeometry", "tile_geometry"]


@dataclass
class TileGeometry:
    """A tile's piece of a convolution.

    Attributes
    ----------
    window
        Per field dimension ``(begin, end)`` of the input indices read.
    out_shape, in_shape
        Field shapes of the output block and of the input window (without batch).
    worklists
        ``kernelPositions x workers`` lists of flat ``(outRow, num, inRow)`` triples.
    partitions
        ``partitions[w][k]``: the ``num`` of each entry of worker ``w`` at kernel
        position ``k`` (the estimators' ``workerPartitions``).
    in_stride, out_stride
        Row strides of consecutive elements of an entry.
    positions
        Output positions that read at least one real input (MAC positions per kernel
        position, summed).
    """

    window: list[tuple[int, int]]
    out_shape: list[int]
    in_shape: list[int]
    worklists: list[list[np.ndarray]]
    partitions: list[list[list[int]]]
    in_stride: int
    out_stride: int
    positions: int


def _ap(idx: np.ndarray) -> int:
    """Step of an arithmetic progression of indices (1 for fewer than two)."""
    if idx.size < 2:
        return 1
    return int(idx[1] - idx[0])


def tile_geometry(
    maps: list[np.ndarray],
    batch: int,
    out_ranges: list[tuple[int, int]],
    num_workers: int,
) -> TileGeometry:
    """The geometry of one tile's output block (see the module docstring).

    Parameters
    ----------
    maps
        ``dim_maps(params)``: per dimension ``int64[kernelSize_d, outputSize_d]``.
    batch
        Batch elements in the block.
    out_ranges
        Per field dimension ``(begin, end)`` of the block's outputs.
    num_workers
        Worker contexts per tile.
    """
    n = len(maps)
    sub = [m[:, lo:hi] for m, (lo, hi) in zip(maps, out_ranges, strict=True)]
    window = []
    for s in sub:
        valid = s[s >= 0]
        window.append((int(valid.min()), int(valid.max()) + 1) if valid.size else (0, 0))
    out_shape = [hi - lo for lo, hi in out_ranges]
    in_shape = [hi - lo for lo, hi in window]
    kshape = [m.shape[0] for m in maps]
    out_strides = np.cumprod([1, *out_shape[::-1]])[::-1][1:]  # row strides of out field
    in_strides = np.cumprod([1, *in_shape[::-1]])[::-1][1:]
    out_field = int(np.prod(out_shape))
    in_field = int(np.prod(in_shape))
    worklists: list[list[np.ndarray]] = []
    partitions: list[list[list[int]]] = [[] for _ in range(num_workers)]
    in_step = out_step = None
    positions = 0
    for kidx in itertools.product(*[range(k) for k in kshape]):
        act = [np.flatnonzero(s[k] >= 0) for s, k in zip(sub, kidx, strict=True)]
        counts = [a.size for a in act]
        if min(counts) > 0:
            inner = act[-1]
            inner_in = sub[-1][kidx[-1], inner] - window[-1][0]
            if inner.size >= 2:
                o_s, i_s = int(inner[1] - inner[0]), int(inner_in[1] - inner_in[0])
                out_step = o_s if out_step is None else out_step
                in_step = i_s if in_step is None else in_step
                if (o_s, i_s) != (out_step, in_step) or _ap(inner) != o_s:
                    raise ValueError(
                        "conv worklists: kernel positions need different strides "
                        f"({o_s}, {i_s}) vs ({out_step}, {in_step}); this transform is "
                        "not supported"
                    )
            outer_shape = [batch, *counts[:-1]]
            rows = int(np.prod(outer_shape))
            per_row = counts[-1]
            total = rows * per_row
            positions += total
            # per worker the rows its contiguous range of elements touches, all at once
            wv = np.arange(num_workers, dtype=np.int64)
            beg, end = (wv * total) // num_workers, ((wv + 1) * total) // num_workers
            first = beg // per_row
            cnt = np.where(end > beg, (end - 1) // per_row - first + 1, 0)
            wid = np.repeat(wv, cnt)
            r = (
                np.repeat(first, cnt)
                + np.arange(int(cnt.sum()))
                - np.repeat(cnt.cumsum() - cnt, cnt)
            )
            x0 = np.maximum(beg[wid], r * per_row) - r * per_row
            x1 = np.minimum(end[wid], (r + 1) * per_row) - r * per_row
            idx = np.unravel_index(r, outer_shape)
            o_row = idx[0] * out_field + inner[x0]
            i_row = idx[0] * in_field + inner_in[x0]
            for d in range(n - 1):
                o_loc = act[d][idx[d + 1]]
                o_row = o_row + o_loc * int(out_strides[d])
                i_row = i_row + (sub[d][kidx[d], o_loc] - window[d][0]) * int(in_strides[d])
            entries = np.stack([o_row, x1 - x0, i_row], 1).astype(np.int64)
            cuts = cnt.cumsum()[:-1]
            nums = np.split(entries[:, 1], cuts)
            for w in range(num_workers):
                partitions[w].append(nums[w].tolist())
            worklists.append([e.reshape(-1) for e in np.split(entries, cuts)])
        else:
            for w in range(num_workers):
                partitions[w].append([])
            worklists.append([np.zeros(0, np.int64) for _ in range(num_workers)])
    return TileGeometry(
        window=window,
        out_shape=out_shape,
        in_shape=in_shape,
        worklists=worklists,
        partitions=partitions,
        in_stride=1 if in_step is None else in_step,
        out_stride=1 if out_step is None else out_step,
        positions=positions,
    )
