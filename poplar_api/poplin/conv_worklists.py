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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from poplar_api.poplin.conv_estimator_common import CountLists

__all__ = ["TileGeometry", "Worklists", "relative_dim_key", "relative_key", "tile_geometry"]

#: Entry ranges (kernel positions x workers) from which a tile's equal count lists
#: are found and shared (:func:`_shared_count_lists`); fewer are sliced one by one.
SHARE_MIN_RANGES = 64


@dataclass
class TileGeometry:
    """A tile's piece of a convolution.

    Attributes
    ----------
    window
        Per field dimension ``(begin, end)`` of the input indices read.
    out_shape, in_shape
        Field shapes of the output block and of the input window (without batch).
    entries
        Every worklist entry's ``(outRow, num, inRow)``, flat, in the order of kernel
        position, then worker (the worklists one after another).
    entry_bounds
        Entry ``entry_bounds[k * workers + w]`` is the first of kernel position ``k``'s
        worker ``w`` (one bound more than lists).
    workers
        Worker contexts the entries are split over.
    partitions
        ``partitions[w][k]``: the ``num`` of each entry of worker ``w`` at kernel
        position ``k`` (the estimators' ``workerPartitions``); equal lists are one
        object, so they are read only.
    in_stride, out_stride
        Row strides of consecutive elements of an entry.
    positions
        Output positions that read at least one real input (MAC positions per kernel
        position, summed).
    """

    window: list[tuple[int, int]]
    out_shape: list[int]
    in_shape: list[int]
    entries: np.ndarray
    entry_bounds: list[int]
    workers: int
    partitions: list[list[list[int]]]
    in_stride: int
    out_stride: int
    positions: int

    @property
    def worklists(self) -> Worklists:
        """``kernelPositions x workers`` lists of flat ``(outRow, num, inRow)`` triples
        (slices of :attr:`entries`, made when read)."""
        return Worklists(self.entries, self.entry_bounds, self.workers)


class Worklists(Sequence[list[np.ndarray]]):
    """The worklists of a :class:`TileGeometry` by kernel position: item ``k`` is the
    list of its workers' flat ``(outRow, num, inRow)`` triples. Only the lists read
    are made (the planner's estimates read the number of kernel positions, and the
    first position's lists of a 1x1 kernel)."""

    __slots__ = ("_bounds", "_entries", "_workers")

    def __init__(self, entries: np.ndarray, bounds: list[int], workers: int) -> None:
        self._entries, self._bounds, self._workers = entries, bounds, workers

    def __len__(self) -> int:
        return (len(self._bounds) - 1) // self._workers

    @overload
    def __getitem__(self, k: int) -> list[np.ndarray]: ...

    @overload
    def __getitem__(self, k: slice) -> list[list[np.ndarray]]: ...

    def __getitem__(self, k: int | slice) -> list[np.ndarray] | list[list[np.ndarray]]:
        if isinstance(k, slice):
            return [self[i] for i in range(*k.indices(len(self)))]
        n = len(self)
        if not -n <= k < n:
            raise IndexError(f"kernel position {k} of {n}")
        k %= n
        b, nw, flat = self._bounds, self._workers, self._entries
        return [flat[3 * b[i] : 3 * b[i + 1]] for i in range(k * nw, (k + 1) * nw)]


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
    nw = num_workers
    # per dimension and kernel index: the active outputs (one ragged array, offsets)
    act, off, cnt_d = [], [], []
    for sd in sub:
        ok = sd >= 0
        act.append(np.nonzero(ok)[1])  # row-major: kernel index major, outputs ascending
        c = ok.sum(1)
        cnt_d.append(c)
        off.append(np.concatenate(([0], np.cumsum(c)[:-1])))
    # every kernel position (row-major over the kernel dims) and its active counts
    kidx = np.unravel_index(np.arange(int(np.prod(kshape))), kshape)
    counts = np.stack([cnt_d[d][kidx[d]] for d in range(n)])  # [n, K]
    live = counts.min(0) > 0
    per_row = counts[-1]
    rows = batch * np.prod(counts[:-1], 0) if n > 1 else np.full(live.size, batch)
    total = np.where(live, rows * per_row, 0)
    positions = int(total.sum())
    # the inner dimension's steps (one out and one in stride for every kernel position):
    # the first two active outputs of each kernel position's inner kernel index
    steps = np.flatnonzero(live & (per_row >= 2))
    in_step = out_step = None
    if steps.size:
        first_at = off[-1][kidx[-1][steps]]
        o_a, o_b = act[-1][first_at], act[-1][first_at + 1]
        kin_s = kidx[-1][steps]
        o_s = o_b - o_a
        i_s = sub[-1][kin_s, o_b] - sub[-1][kin_s, o_a]
        out_step, in_step = int(o_s[0]), int(i_s[0])
        bad = np.flatnonzero((o_s != out_step) | (i_s != in_step))
        if bad.size:
            j = int(bad[0])
            raise ValueError(
                "conv worklists: kernel positions need different strides "
                f"({int(o_s[j])}, {int(i_s[j])}) vs ({out_step}, {in_step}); this transform "
                "is not supported"
            )
        # every active output of those inner kernel indices steps by out_step, not only
        # the first two (a worklist entry covers a row of outputs at one stride)
        kin_u = np.unique(kin_s)
        gaps = cnt_d[-1][kin_u] - 1
        seg = np.repeat(np.arange(kin_u.size), gaps)
        at = off[-1][kin_u][seg] + np.arange(seg.size) - np.repeat(np.cumsum(gaps) - gaps, gaps)
        uneven = np.flatnonzero(act[-1][at + 1] - act[-1][at] != out_step)
        if uneven.size:
            u = int(uneven[0])
            raise ValueError(
                f"conv worklists: the active outputs of inner kernel index {int(kin_u[seg[u]])} "
                f"step by {int(act[-1][at[u] + 1] - act[-1][at[u]])} at output "
                f"{int(act[-1][at[u]])}, not by {out_step}; a worklist row needs evenly "
                "spaced outputs: this transform is not supported"
            )
    # per (kernel position, worker): the rows its contiguous range of elements touches
    wv = np.arange(nw, dtype=np.int64)
    beg = (wv[None, :] * total[:, None]) // nw  # [K, W]
    end = ((wv[None, :] + 1) * total[:, None]) // nw
    pr = np.maximum(per_row, 1)[:, None]
    first = beg // pr
    cnt = np.where(end > beg, (end - 1) // pr - first + 1, 0).reshape(-1)
    pair = np.repeat(np.arange(cnt.size), cnt)  # (k, w) of every entry
    k_e = pair // nw
    r = (
        np.repeat(first.reshape(-1), cnt)
        + np.arange(int(cnt.sum()))
        - np.repeat(np.cumsum(cnt) - cnt, cnt)
    )
    p_e = per_row[k_e]
    x0 = np.maximum(beg.reshape(-1)[pair], r * p_e) - r * p_e
    x1 = np.minimum(end.reshape(-1)[pair], (r + 1) * p_e) - r * p_e
    kin = kidx[-1][k_e]
    o_inner = act[-1][off[-1][kin] + x0]
    o_row = o_inner.astype(np.int64)
    i_row = (sub[-1][kin, o_inner] - window[-1][0]).astype(np.int64)
    for d in range(n - 2, -1, -1):  # unravel r over [batch, *counts[:-1]], last first
        c = counts[d][k_e]
        i_d = r % c
        r = r // c
        kd = kidx[d][k_e]
        o_loc = act[d][off[d][kd] + i_d]
        o_row = o_row + o_loc * int(out_strides[d])
        i_row = i_row + (sub[d][kd, o_loc] - window[d][0]) * int(in_strides[d])
    o_row = o_row + r * out_field
    i_row = i_row + r * in_field
    num = x1 - x0
    entries = np.stack([o_row, num, i_row], 1).astype(np.int64)
    # entry ranges per (kernel position, worker), index k * workers + w: one list of
    # counts per range made in one pass (the estimators read them per worker), the
    # worklists only when asked for (the planner's estimates need the counts alone)
    bounds = [0, *np.cumsum(cnt).tolist()]
    per_pair = _shared_count_lists(cnt, num)
    return TileGeometry(
        window=window,
        out_shape=out_shape,
        in_shape=in_shape,
        entries=entries.reshape(-1),
        entry_bounds=bounds,
        workers=nw,
        partitions=CountLists(per_pair[w::nw] for w in range(nw)),
        in_stride=1 if in_step is None else in_step,
        out_stride=1 if out_step is None else out_step,
        positions=positions,
    )


def _shared_count_lists(cnt: np.ndarray, num: np.ndarray) -> list[list[int]]:
    """The entry counts of every entry range (``cnt[i]`` entries of sizes ``num``, one
    range after another) as lists; past :data:`SHARE_MIN_RANGES` ranges one list per
    distinct range, shared by the ranges that have it: a large kernel has thousands of
    ranges and a few distinct ones, and the lists are read, never changed (making one
    per range was most of a plan's estimate, in allocation and garbage collection)."""
    if not cnt.size:
        return []
    width = int(cnt.max())
    if width == 0:  # no range has entries (a block that reads only padding)
        return [[]] * cnt.size
    # few ranges, or a few long ones: slicing costs less than finding the equal ones
    if cnt.size <= SHARE_MIN_RANGES or cnt.size * width > 4 * num.size + 4096:
        nums = num.astype(np.int64).tolist()
        bounds = [0, *np.cumsum(cnt).tolist()]
        return [nums[a:b] for a, b in itertools.pairwise(bounds)]
    pair = np.repeat(np.arange(cnt.size), cnt)
    padded = np.full((cnt.size, width), -1, np.int64)  # counts are >= 0
    padded[pair, np.arange(num.size) - np.repeat(np.cumsum(cnt) - cnt, cnt)] = num
    order = np.lexsort(padded.T)  # equal rows next to each other
    ordered = padded[order]
    first = np.ones(order.size, bool)
    first[1:] = (ordered[1:] != ordered[:-1]).any(1)
    which = np.empty(order.size, np.int64)
    which[order] = np.cumsum(first) - 1
    lists = [[x for x in row if x >= 0] for row in ordered[first].tolist()]
    return [lists[i] for i in which.tolist()]


def relative_key(
    batch: int, dim_keys: list[tuple[int, tuple[int, bytes]]]
) -> tuple[tuple, list[int]]:
    """A block's geometry key up to a shift of its input window, and the window's first
    input index per dimension, from its batch size and its field ranges' parts
    (:func:`relative_dim_key`): blocks whose input indices differ by a shift (away from
    the padding) share their worklists, partitions and vertex kind, so
    :func:`tile_geometry` runs once for them."""
    return (batch, tuple(k for _, k in dim_keys)), [first for first, _ in dim_keys]


def relative_dim_key(m: np.ndarray, lo: int, hi: int) -> tuple[int, tuple[int, bytes]]:
    """One field dimension's part of :func:`relative_key` for outputs ``lo .. hi - 1``
    of its map ``m``: ``(first input index, key)`` (the same for every block with that
    range, so a caller may make it once per range)."""
    s = m[:, lo:hi]
    ok = s >= 0
    first = int(s[ok].min()) if ok.any() else 0
    return first, (hi - lo, np.where(ok, s - first, -1).tobytes())
