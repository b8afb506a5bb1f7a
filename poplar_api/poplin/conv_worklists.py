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
from dataclasses import dataclass, field
from typing import overload

import numba
import numpy as np

from poplar_api.poplin.conv_estimator_common import CountLists

__all__ = [
    "NUM_CLASSES",
    "TileGeometry",
    "Worklists",
    "relative_dim_key",
    "relative_key",
    "tile_geometry",
]

#: Entry ranges (kernel positions x workers) from which a tile's equal count lists
#: are found and shared (:func:`_shared_count_lists`); fewer are sliced one by one.
SHARE_MIN_RANGES = 64
#: The key of a geometry's :class:`CountLists` ``derived`` entry that lists its kernel
#: positions of the same lists, when the lists are shared (:func:`_shared_count_lists`).
COLUMNS = "columns"
#: The columns of :attr:`TileGeometry.num_classes`.
NUM_CLASSES = ("num 0", "num 1", "num 2", "num >= 3", "sum of num - 3")


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
        worker ``w`` (one bound more than lists; int64, so not a list of int objects
        that Python's cyclic garbage collector walks while the geometry lives).
    workers
        Worker contexts the entries are split over.
    num_classes
        ``int64[ranges, 5]``: of range ``k * workers + w``'s entries, how many have a
        ``num`` of 0, 1, 2 and at least 3, and the sum of ``num - 3`` over the last
        (:data:`NUM_CLASSES`: what a ``ConvPartialnx1`` worker's cycles read of them).
    in_stride, out_stride
        Row strides of consecutive elements of an entry.
    positions
        Output positions that read at least one real input (MAC positions per kernel
        position, summed).
    derived
        Values an estimator derived from the geometry alone, by the estimator's key
        (a plan's candidates estimate the same geometry many times).
    """

    window: list[tuple[int, int]]
    out_shape: list[int]
    in_shape: list[int]
    entries: np.ndarray
    entry_bounds: np.ndarray
    workers: int
    num_classes: np.ndarray
    in_stride: int
    out_stride: int
    positions: int
    derived: dict = field(default_factory=dict, repr=False, compare=False)
    _partitions: CountLists | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def partitions(self) -> CountLists:
        """``partitions[w][k]``: the ``num`` of each entry of worker ``w`` at kernel
        position ``k`` (the estimators' ``workerPartitions``), made when first read
        (the ``ConvPartialnx1`` estimate of one kernel row's weights reads the counts
        as arrays instead, :func:`~.conv_vertex_estimates.nx1_slowest`; the lowering
        reads the worklists); equal lists are one object, so they are read only."""
        if self._partitions is None:
            nw = self.workers
            per_pair, columns = _shared_count_lists(
                np.diff(self.entry_bounds), self.entries[1::3], nw
            )
            partitions = CountLists(per_pair[w::nw] for w in range(nw))
            if columns is not None:
                partitions.derived[COLUMNS] = columns
            self._partitions = partitions
        return self._partitions

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

    def __init__(self, entries: np.ndarray, bounds: np.ndarray, workers: int) -> None:
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
        nw, flat = self._workers, self._entries
        b = (3 * self._bounds[k * nw : (k + 1) * nw + 1]).tolist()
        return [flat[b[i] : b[i + 1]] for i in range(nw)]


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
    subs = [np.ascontiguousarray(m[:, lo:hi], np.int64)
            for m, (lo, hi) in zip(maps, out_ranges, strict=True)]  # fmt: skip
    kshape = np.array([s.shape[0] for s in subs], np.int64)
    oshape = np.array([s.shape[1] for s in subs], np.int64)
    soff = np.zeros(len(subs) + 1, np.int64)
    soff[1:] = np.cumsum(kshape * oshape)
    flat = np.concatenate([s.reshape(-1) for s in subs])
    nw = num_workers
    window_a, entries, cnt, classes, positions, steps, err = _geometry(
        flat, soff, kshape, oshape, np.int64(batch), np.int64(nw)
    )
    if err[0] == 1:
        raise ValueError(
            "conv worklists: kernel positions need different strides "
            f"({int(err[1])}, {int(err[2])}) vs ({int(err[3])}, {int(err[4])}); this "
            "transform is not supported"
        )
    if err[0] == 2:
        raise ValueError(
            f"conv worklists: the active outputs of inner kernel index {int(err[1])} "
            f"step by {int(err[2])} at output {int(err[3])}, not by {int(err[4])}; a "
            "worklist row needs evenly spaced outputs: this transform is not supported"
        )
    window = [(a, b) for a, b in window_a.tolist()]
    out_shape = [hi - lo for lo, hi in out_ranges]
    # entry ranges per (kernel position, worker), index k * workers + w: the lists of
    # counts per range (TileGeometry.partitions) and the worklists are made only when
    # asked for (the planner's estimates need the counts alone, most as arrays)
    bounds = np.zeros(cnt.size + 1, np.int64)  # (an array: no int object per range)
    np.cumsum(cnt, out=bounds[1:])
    return TileGeometry(
        window=window,
        out_shape=out_shape,
        in_shape=[hi - lo for lo, hi in window],
        entries=entries,
        entry_bounds=bounds,
        workers=nw,
        num_classes=classes,
        in_stride=int(steps[1]) if steps[2] else 1,
        out_stride=int(steps[0]) if steps[2] else 1,
        positions=int(positions),
    )


@numba.njit(cache=True, nogil=True)
def _geometry(subs, soff, kshape, oshape, batch, nw):  # pragma: no cover - compiled
    """The compiled part of :func:`tile_geometry`: dimension ``d``'s map of the block
    (``int64[kshape[d], oshape[d]]``, input index or -1) at ``subs[soff[d]:]``.

    Returns ``(window [n, 2], entries (outRow, num, inRow) flat, entries per (kernel
    position, worker), the classes of each range's entries' num (:data:`NUM_CLASSES`),
    positions, (out step, in step, found), error)``; ``error[0]`` is 1 when kernel
    positions step differently (then ``error[1:]``: that step pair, and the first), 2
    when a kernel index's active outputs are not evenly spaced (its index, the step
    found, the output, the step)."""
    n = kshape.shape[0]
    last = n - 1
    err = np.zeros(5, np.int64)
    steps = np.zeros(3, np.int64)
    window = np.zeros((n, 2), np.int64)
    for d in range(n):
        found = False
        lo = np.int64(0)
        hi = np.int64(0)
        for i in range(soff[d], soff[d + 1]):
            v = subs[i]
            if v >= 0:
                if not found or v < lo:
                    lo = v
                if not found or v > hi:
                    hi = v
                found = True
        if found:
            window[d, 0] = lo
            window[d, 1] = hi + 1
    # per dimension and kernel index: the active outputs (at soff[d] + off), their count
    koff = np.zeros(n + 1, np.int64)
    for d in range(n):
        koff[d + 1] = koff[d] + kshape[d]
    act = np.empty(soff[n], np.int64)
    cnt_d = np.zeros(koff[n], np.int64)
    off_d = np.zeros(koff[n], np.int64)
    for d in range(n):
        pos = 0
        for kk in range(kshape[d]):
            off_d[koff[d] + kk] = pos
            base = soff[d] + kk * oshape[d]
            for o in range(oshape[d]):
                if subs[base + o] >= 0:
                    act[soff[d] + pos] = o
                    pos += 1
            cnt_d[koff[d] + kk] = pos - off_d[koff[d] + kk]
    kstride = np.ones(n, np.int64)
    for d in range(n - 2, -1, -1):
        kstride[d] = kstride[d + 1] * kshape[d + 1]
    num_k = kstride[0] * kshape[0]
    out_strides = np.ones(n, np.int64)
    in_strides = np.ones(n, np.int64)
    for d in range(n - 2, -1, -1):
        out_strides[d] = out_strides[d + 1] * oshape[d + 1]
        in_strides[d] = in_strides[d + 1] * (window[d + 1, 1] - window[d + 1, 0])
    out_field = out_strides[0] * oshape[0]
    in_field = in_strides[0] * (window[0, 1] - window[0, 0])
    # every kernel position's active rows and elements per row
    total = np.zeros(num_k, np.int64)
    per_row = np.zeros(num_k, np.int64)
    alive = np.zeros(num_k, np.bool_)
    positions = np.int64(0)
    for k in range(num_k):
        live = True
        rows = batch
        for d in range(n):
            c = cnt_d[koff[d] + (k // kstride[d]) % kshape[d]]
            if c <= 0:
                live = False
            if d < last:
                rows *= c
        p = cnt_d[koff[last] + (k // kstride[last]) % kshape[last]]
        per_row[k] = p
        if live:
            alive[k] = True
            total[k] = rows * p
            positions += rows * p
    # the inner dimension's steps: the first two active outputs of each live kernel
    # position's inner kernel index, the same for all; then every active output of
    # those inner kernel indices at that step
    marked = np.zeros(kshape[last], np.bool_)
    for k in range(num_k):
        if alive[k] and per_row[k] >= 2:
            kin = (k // kstride[last]) % kshape[last]
            at = soff[last] + off_d[koff[last] + kin]
            o_a = act[at]
            o_b = act[at + 1]
            row = soff[last] + kin * oshape[last]
            o_s = o_b - o_a
            i_s = subs[row + o_b] - subs[row + o_a]
            if steps[2] == 0:
                steps[0] = o_s
                steps[1] = i_s
                steps[2] = 1
            elif o_s != steps[0] or i_s != steps[1]:
                err[0] = 1
                err[1] = o_s
                err[2] = i_s
                err[3] = steps[0]
                err[4] = steps[1]
                break
            marked[kin] = True
    if err[0] == 0 and steps[2] == 1:
        for kin in range(kshape[last]):
            if not marked[kin]:
                continue
            at = soff[last] + off_d[koff[last] + kin]
            for j in range(cnt_d[koff[last] + kin] - 1):
                if act[at + j + 1] - act[at + j] != steps[0]:
                    err[0] = 2
                    err[1] = kin
                    err[2] = act[at + j + 1] - act[at + j]
                    err[3] = act[at + j]
                    err[4] = steps[0]
                    break
            if err[0] != 0:
                break
    cnt = np.zeros(num_k * nw, np.int64)
    classes = np.zeros((num_k * nw, 5), np.int64)
    if err[0] != 0:
        return window, np.zeros(0, np.int64), cnt, classes, positions, steps, err
    # per (kernel position, worker): the rows its contiguous range of elements touches
    n_entries = 0
    for k in range(num_k):
        pr = max(per_row[k], 1)
        for w in range(nw):
            beg = (w * total[k]) // nw
            end = ((w + 1) * total[k]) // nw
            if end > beg:
                cnt[k * nw + w] = (end - 1) // pr - beg // pr + 1
                n_entries += cnt[k * nw + w]
    entries = np.empty(3 * n_entries, np.int64)
    e = 0
    for k in range(num_k):
        p = per_row[k]
        kin = (k // kstride[last]) % kshape[last]
        inner_at = soff[last] + off_d[koff[last] + kin]
        inner_row = soff[last] + kin * oshape[last]
        for w in range(nw):
            beg = (w * total[k]) // nw
            end = ((w + 1) * total[k]) // nw
            first = beg // max(p, 1)
            for j in range(cnt[k * nw + w]):
                r = first + j
                x0 = max(beg, r * p) - r * p
                x1 = min(end, (r + 1) * p) - r * p
                o_inner = act[inner_at + x0]
                o_row = o_inner
                i_row = subs[inner_row + o_inner] - window[last, 0]
                for d in range(n - 2, -1, -1):  # unravel r over [batch, *counts], last first
                    kd = (k // kstride[d]) % kshape[d]
                    c = cnt_d[koff[d] + kd]
                    i_d = r % c
                    r = r // c
                    o_loc = act[soff[d] + off_d[koff[d] + kd] + i_d]
                    o_row += o_loc * out_strides[d]
                    i_row += (subs[soff[d] + kd * oshape[d] + o_loc] - window[d, 0]) * in_strides[d]
                entries[3 * e] = o_row + r * out_field
                entries[3 * e + 1] = x1 - x0
                entries[3 * e + 2] = i_row + r * in_field
                c = min(x1 - x0, 3)
                classes[k * nw + w, c] += 1
                if c == 3:
                    classes[k * nw + w, 4] += x1 - x0 - 3
                e += 1
    return window, entries, cnt, classes, positions, steps, err


def _shared_count_lists(
    cnt: np.ndarray, num: np.ndarray, nw: int
) -> tuple[list[list[int]], list[tuple[int, int]] | None]:
    """The entry counts of every entry range (``cnt[i]`` entries of sizes ``num``, one
    range after another) as lists; past :data:`SHARE_MIN_RANGES` ranges one list per
    distinct range, shared by the ranges that have it: a large kernel has thousands of
    ranges and a few distinct ones, and the lists are read, never changed (making one
    per range was most of a plan's estimate, in allocation and garbage collection).

    With the lists shared, also the kernel positions' columns (range ``k nw + w`` is
    worker ``w``'s at position ``k``) that hold the same list objects, each as a
    position that has it and how many do (:data:`COLUMNS`), else None."""
    if not cnt.size:
        return [], None
    width = int(cnt.max())
    if width == 0:  # no range has entries (a block that reads only padding)
        return [[]] * cnt.size, None
    # few ranges, or a few long ones: slicing costs less than finding the equal ones
    if cnt.size <= SHARE_MIN_RANGES or cnt.size * width > 4 * num.size + 4096:
        nums = num.astype(np.int64).tolist()
        bounds = [0, *np.cumsum(cnt).tolist()]
        return [nums[a:b] for a, b in itertools.pairwise(bounds)], None
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
    return [lists[i] for i in which.tolist()], _columns(which.reshape(-1, nw))


def _columns(which: np.ndarray) -> list[tuple[int, int]]:
    """The distinct rows of ``which`` (a row a kernel position, the index of each
    worker's list), each as ``(a row that has it, rows that have it)``."""
    order = np.lexsort(which.T)
    ordered = which[order]
    first = np.ones(order.size, bool)
    first[1:] = (ordered[1:] != ordered[:-1]).any(1)
    starts = np.flatnonzero(first)
    counts = np.diff(np.append(starts, order.size))
    return list(zip(order[starts].tolist(), counts.tolist(), strict=True))


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
