"""Pooling planning (``lib/popnn/PoolVertices.cpp``): pass geometry, partitions over
the tiles, worklists and the vertices of one pass.

A pass is split into partitions (channel groups x batch x output field ranges, see
:func:`_splits`); each partition becomes one supervisor vertex on the tile chosen by
``getTileToMap`` (introspective mapping). Everything of a partition but its channel
groups and tile — the worklist rows, the field windows, the constants' values and the
cycle estimate — depends only on its batch size and output field range, so it is
computed once per distinct range (:class:`_Geometry`) and shared by the partitions of
every channel-group range; ranges that differ only by a shift (away from the padding)
share one worked-out geometry, moved. The partitions are kept as columns
(:mod:`poplar_api.popnn.pool_parts`): their windows' positions are gathered one
pattern per shape, and their tiles chosen in one compiled pass. The vertices, their
constants and estimates are then added in partition order.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from poplar_api import program as _program
from poplar_api.errors import GraphError
from poplar_api.graph import Graph, Segments
from poplar_api.popnn import estimators as est
from poplar_api.popnn import pool_vertices as pv
from poplar_api.popnn.mapping import local_tiles
from poplar_api.popnn.pool_parts import (
    Parts,
    box_positions,
    box_values,
    choose_tiles,
    in_memory,
    internal_layout,
    put_in_order,
    spans,
)
from poplar_api.tensor import Tensor
from poplar_api.types import UNSIGNED_INT, UNSIGNED_SHORT, Type

#: Maximum channel grains per group (``maxGrainsPerChanGroup`` of ``getPlan``).
MAX_GRAINS_PER_GROUP = 8


@dataclass(frozen=True)
class _Dim:
    """One field dimension of the forward pooling."""

    size: int  # input size
    kernel: int
    stride: int
    lower: int  # padding (> 0) or truncation (< 0)
    upper: int

    @property
    def out(self) -> int:
        return (self.size + self.lower + self.upper - self.kernel) // self.stride + 1

    @property
    def valid_in(self) -> tuple[int, int]:
        """Range of input indices not truncated away."""
        return max(0, -self.lower), self.size - max(0, -self.upper)


# ----------------------------------------------------------------- pass geometry


@dataclass
class _Pass:
    """A pooling pass as a convolution-shaped loop: for pass output index ``x`` and
    kernel index ``k`` of each dim, ``valid[d][x, k]`` and the pass input index
    ``src[d][x, k]``; innermost steps ``out_step`` / ``in_step`` per worklist element."""

    out_shape: list[int]
    in_shape: list[int]
    kernel: list[int]
    valid: list[np.ndarray]
    src: list[np.ndarray]
    out_step: int
    in_step: int


def _fwd_pass(dims: list[_Dim]) -> _Pass:
    valid, src = [], []
    for d in dims:
        x = np.arange(d.out)[:, None]
        k = np.arange(d.kernel)[None, :]
        i = x * d.stride + k - d.lower
        a, b = d.valid_in
        valid.append((i >= a) & (i < b))
        src.append(i)
    return _Pass(
        [d.out for d in dims], [d.size for d in dims], [d.kernel for d in dims],
        valid, src, 1, dims[-1].stride,
    )  # fmt: skip


def _bwd_pass(dims: list[_Dim]) -> _Pass:
    valid, src = [], []
    for d in dims:
        x = np.arange(d.size)[:, None]
        k = np.arange(d.kernel)[None, :]
        t = x + d.lower - k
        o = np.floor_divide(t, d.stride)
        a, b = d.valid_in
        valid.append((x >= a) & (x < b) & (t % d.stride == 0) & (o >= 0) & (o < d.out))
        src.append(o)
    return _Pass(
        [d.size for d in dims], [d.out for d in dims], [d.kernel for d in dims],
        valid, src, dims[-1].stride, 1,
    )  # fmt: skip


def _chans_per_group(channels: int, grain: int) -> int:
    """Largest divisor of ``channels`` up to ``MAX_GRAINS_PER_GROUP`` grains, preferring
    multiples of ``grain``."""
    limit = MAX_GRAINS_PER_GROUP * grain
    divisors = [c for c in range(1, min(channels, limit) + 1) if channels % c == 0]
    whole = [c for c in divisors if c % grain == 0]
    return max(whole) if whole else max(divisors)


def _splits(num_tiles: int, sizes: list[int]) -> list[int]:
    """Greedy split of ``sizes`` (chan groups, batch, field dims) over the tiles."""
    out, rem = [], num_tiles
    for s in sizes:
        k = max(1, min(s, rem))
        out.append(k)
        rem //= k
    return out


def _ranges(size: int, split: int) -> list[tuple[int, int]]:
    return [((i * size) // split, ((i + 1) * size) // split) for i in range(split)]


@dataclass
class _Operand:
    """A tensor, the positions of its flattened elements in internal layout
    ``[channels, batch, *field]``, and the window (``"in"`` or ``"out"`` of the pass) a
    vertex field takes from it.

    ``pos`` None: the tensor is ``[batch, channels, *field]`` and its layout is that
    shape's, as :func:`.pool_parts.internal_layout` gives it (with ``fold_batch``, the
    batch folded into the channels), known by its strides: no array of the positions
    is made unless :meth:`positions` is asked for."""

    field: str
    tensor: Tensor
    pos: np.ndarray | None
    window: str
    fold_batch: bool = False

    @property
    def shape(self) -> tuple[int, ...]:
        """The internal layout's shape."""
        if self.pos is not None:
            return self.pos.shape
        return internal_layout(self.tensor.shape(), self.fold_batch)[0]

    def strides(self) -> list[int]:
        """The internal layout's strides in the tensor's flat positions (``pos`` None)."""
        return internal_layout(self.tensor.shape(), self.fold_batch)[1]

    def positions(self) -> np.ndarray:
        """The positions of the tensor's flattened elements in internal layout."""
        if self.pos is not None:
            return self.pos
        pos = np.arange(self.tensor.numElements(), dtype=np.int64).reshape(self.tensor.shape())
        if self.fold_batch:  # gatherDimsTransformIn: batch folded into the channels
            return pos.reshape(pos.shape[0] * pos.shape[1], 1, *pos.shape[2:])
        return np.swapaxes(pos, 0, 1)


@dataclass
class _Geometry:
    """What a partition of one batch size and output field range needs, whatever its
    channel groups and tile: field windows, worklists, average-pooling scales and the
    cycle estimate per channel-group count."""

    in_box: list[tuple[int, int]]
    empty: bool = True
    partial: bool = False  # the entries do not cover the whole output window
    out_lo: list[int] = field(default_factory=list)
    out_shape: list[int] = field(default_factory=list)
    in_lo: list[int] = field(default_factory=list)
    in_shape: list[int] = field(default_factory=list)
    start_pos: np.ndarray | None = None
    base: np.ndarray | None = None
    work_list: np.ndarray | None = None
    bounds: list[tuple[int, int]] = field(default_factory=list)
    #: elements of each worklist row (``end - begin`` of ``bounds``)
    row_sizes: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    init_info: int = 0
    in_slice: int = 0
    out_sorted: np.ndarray | None = None
    n_sorted: np.ndarray | None = None
    avg: tuple[float, np.ndarray | None, list[tuple[int, int]]] | None = None
    estimates: dict[int, int] = field(default_factory=dict)
    #: geometries of one range shape share this number (and their worklists, shapes
    #: and estimates); only their origins differ
    shape_id: int = -1


@dataclass
class _Vertex:
    """A planned pooling vertex: its tile, estimate, the positions of its operand
    fields, its constants and, when its outputs' counts differ, the connections of its
    ``SelectiveScaling`` vertex."""

    tile: int
    estimate: int
    pos: dict[str, np.ndarray] = field(default_factory=dict)
    #: constants, by field (while planning: their indices in the pass's constant list)
    consts: dict[str, Any] = field(default_factory=dict)
    work_list: Any = None
    rows: list[tuple[int, int]] = field(default_factory=list)
    scaling: dict[str, Any] | None = None


class _Builder:
    """Adds one pooling pass (``tilePartitions`` and ``generateVertices``)."""

    def __init__(self, graph: Graph, name: str, typ: Type, kind: str, ps: _Pass, cpg: int):
        self.graph, self.name, self.typ, self.kind, self.ps = graph, name, typ, kind, ps
        self.cpg = cpg
        target = graph.getTarget()
        self.workers = target.getNumWorkerContexts()
        self.vw = target.getVectorWidth(typ)
        self.num_tiles = target.getNumTiles()
        # innermost dim: prefix counts and next valid index per kernel index
        v = ps.valid[-1].T.astype(np.int64)  # [K, Out]
        self.count = np.concatenate([np.zeros((v.shape[0], 1), np.int64), v.cumsum(1)], 1)
        nxt = np.full((v.shape[0], v.shape[1] + 1), v.shape[1], np.int64)
        for x in range(v.shape[1] - 1, -1, -1):
            nxt[:, x] = np.where(v[:, x] > 0, x, nxt[:, x + 1])
        self.next = nxt
        self.kidx = np.array(np.unravel_index(np.arange(int(math.prod(ps.kernel))), ps.kernel))
        self._geometries: dict[tuple, _Geometry] = {}
        #: geometries up to a shift: the first worked out, its output range's begin
        #: and its first input index per dimension
        self._relative: dict[tuple, tuple[_Geometry, list[int], list[int]]] = {}
        self._dim_keys: dict[tuple[int, int, int], tuple[int, tuple, bytes]] = {}

    # -------------------------------------------------------------- one partition
    def rows(self, nb: int, shape: list[int]) -> tuple[np.ndarray, ...]:
        """``partitionPartialByContext``: (context, batch, active row, xBegin, xEnd)."""
        row_len = shape[-1]
        active = int(math.prod(shape[:-1])) if len(shape) > 1 else 1
        total = nb * active * row_len
        c = np.arange(self.workers)
        e0, e1 = (c * total) // self.workers, ((c + 1) * total) // self.workers
        c, e0, e1 = c[e1 > e0], e0[e1 > e0], e1[e1 > e0]
        first, last = e0 // row_len, (e1 - 1) // row_len
        n = last - first + 1
        ctx = np.repeat(c, n)
        r = np.repeat(first, n) + np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
        xb = np.maximum(np.repeat(e0, n), r * row_len) - r * row_len
        xe = np.minimum(np.repeat(e1, n), (r + 1) * row_len) - r * row_len
        return ctx, r // active, r % active, xb, xe

    def entries(self, nb: int, begin: list[int], end: list[int]) -> dict[str, Any] | None:
        ps = self.ps
        shape = [e - b for b, e in zip(begin, end, strict=True)]
        ctx, bi, arow, xb, xe = self.rows(nb, shape)
        outer = (
            np.array(np.unravel_index(arow, shape[:-1]))
            if len(shape) > 1
            else np.zeros((0, arow.size), np.int64)
        )
        outer = outer + np.array(begin[:-1], np.int64)[:, None]
        kin = self.kidx[-1]
        ok = np.ones((arow.size, kin.size), bool)
        for d in range(len(shape) - 1):
            ok &= ps.valid[d][outer[d][:, None], self.kidx[d][None, :]]
        xg0, xg1 = xb + begin[-1], xe + begin[-1]
        cnt = self.count[kin[None, :], xg1[:, None]] - self.count[kin[None, :], xg0[:, None]]
        ok &= cnt > 0
        r, k = np.nonzero(ok)
        if r.size == 0:
            return None
        n = cnt[r, k]
        first = self.next[kin[k], xg0[r]]
        out_idx = [outer[d][r] for d in range(len(shape) - 1)] + [first]
        in_idx = [ps.src[d][outer[d][r], self.kidx[d][k]] for d in range(len(shape) - 1)]
        in_idx.append(ps.src[-1][first, kin[k]])
        out_w = [np.ones_like(n)] * (len(shape) - 1) + [(n - 1) * ps.out_step + 1]
        in_w = [np.ones_like(n)] * (len(shape) - 1) + [(n - 1) * ps.in_step + 1]
        return {"ctx": ctx[r], "row": r, "b": bi[r], "out": out_idx, "in": in_idx,
                "out_w": out_w, "in_w": in_w, "n": n, "slice": shape}  # fmt: skip

    @staticmethod
    def window(e: dict[str, Any], which: str, nb: int) -> tuple[list[int], list[int], np.ndarray]:
        """Bounding box ``(begin, shape)`` of the field the entries use and each entry's
        flat position in ``[batch, *box]``."""
        idx, w = e[which], e[f"{which}_w"]
        lo = [int(i.min()) for i in idx]
        hi = [int((i + ww).max()) for i, ww in zip(idx, w, strict=True)]
        shape = [h - low for low, h in zip(lo, hi, strict=True)]
        pos = np.ravel_multi_index(
            [e["b"]] + [i - low for i, low in zip(idx, lo, strict=True)], [nb, *shape]
        )
        return lo, shape, pos

    def worklists(self, e: dict[str, Any], out_pos: np.ndarray, in_pos: np.ndarray):
        """``createWorklists``: rows sorted by ``(out, in, n)``, ``startPos`` per worker,
        ``offsetBase`` per row and the row-relative triples, concatenated."""
        order = np.lexsort((e["n"], in_pos, out_pos, e["row"]))
        row, op, ip, n = e["row"][order], out_pos[order], in_pos[order], e["n"][order]
        ctx = e["ctx"][order]
        starts = np.flatnonzero(np.r_[True, row[1:] != row[:-1]])
        ends = np.r_[starts[1:], row.size]
        row_ctx = ctx[starts]
        start_pos = np.cumsum(np.bincount(row_ctx, minlength=self.workers))
        base = np.stack([op[starts], ip[starts]], 1).ravel()
        rel_o = op - np.repeat(op[starts], ends - starts)
        rel_i = ip - np.repeat(ip[starts], ends - starts)
        trip = (np.stack([rel_o, rel_i, n - 1], 1) & 0xFFFF).ravel()
        return start_pos, base, trip, 3 * starts, 3 * ends, op, n

    def geometry(self, nb: int, begin: list[int], end: list[int]) -> _Geometry:
        """The :class:`_Geometry` of a partition (made once per distinct range, and
        worked out once per range shape: see :meth:`_relative_key`)."""
        key = (nb, tuple(begin), tuple(end))
        geo = self._geometries.get(key)
        if geo is not None:
            return geo
        rkey, firsts = self._relative_key(nb, begin, end)
        same = self._relative.get(rkey)
        if same is None:
            geo = self._new_geometry(nb, begin, end)
            geo.shape_id = len(self._relative)
            self._relative[rkey] = (geo, begin, firsts)
        else:  # the same partition up to a shift of its output range and input box
            rep, begin0, firsts0 = same
            d_out = [b - b0 for b, b0 in zip(begin, begin0, strict=True)]
            d_in = [f - f0 for f, f0 in zip(firsts, firsts0, strict=True)]
            box = [(a + s, b + s) for (a, b), s in zip(rep.in_box, d_in, strict=True)]
            geo = replace(rep, in_box=box)
            if not rep.empty:  # (an empty partition has no windows)
                geo.out_lo = [x + s for x, s in zip(rep.out_lo, d_out, strict=True)]
                geo.in_lo = [x + s for x, s in zip(rep.in_lo, d_in, strict=True)]
        self._geometries[key] = geo
        return geo

    def _relative_key(self, nb: int, begin: list[int], end: list[int]) -> tuple[tuple, list[int]]:
        """A partition's geometry key up to a shift, and its first input index per
        dimension: partitions whose output ranges have the same length, the same valid
        kernel positions, and input indices that differ by one shift per dimension have
        the same worklists, window shapes and estimates (only the windows' origins
        move), as the padding does not reach them differently."""
        parts, firsts = [nb], []
        for d in range(len(begin)):
            dk = self._dim_keys.get((d, begin[d], end[d]))
            if dk is None:
                valid = self.ps.valid[d][begin[d] : end[d]]
                src = self.ps.src[d][begin[d] : end[d]]
                first = int(src[valid].min()) if valid.any() else 0
                rel = np.where(valid, src - first, -1)
                dk = self._dim_keys[(d, begin[d], end[d])] = (first, rel.shape, rel.tobytes())
            firsts.append(dk[0])
            parts.append(dk[1:])
        return tuple(parts), firsts

    def _new_geometry(self, nb: int, begin: list[int], end: list[int]) -> _Geometry:
        """The :class:`_Geometry` of a partition, worked out."""
        geo = _Geometry(self._input_box(begin, end))
        e = self.entries(nb, begin, end)
        if e is None:
            return geo
        geo.empty = False
        geo.out_lo, geo.out_shape, opos = self.window(e, "out", nb)
        geo.in_lo, geo.in_shape, ipos = self.window(e, "in", nb)
        geo.partial = int(math.prod(geo.out_shape)) != int(math.prod(e["slice"]))
        geo.init_info = nb * int(math.prod(geo.out_shape))
        geo.in_slice = nb * int(math.prod(geo.in_shape))
        if max(geo.init_info, geo.in_slice) > 0xFFFF:
            raise GraphError(
                f"{self.name}: a tile's pooling window has more than 65535 field "
                f"positions (unsigned short worklist offsets); use more tiles"
            )
        sp, base, trip, starts, ends, geo.out_sorted, geo.n_sorted = self.worklists(e, opos, ipos)
        geo.start_pos, geo.base, geo.work_list = sp, base, trip
        geo.bounds = list(zip(starts.tolist(), ends.tolist(), strict=True))
        geo.row_sizes = (ends - starts).astype(np.int64)
        return geo

    def estimate(self, geo: _Geometry, nchg: int) -> int:
        """``getPoolingCycles`` of a partition with ``nchg`` channel groups."""
        cycles = geo.estimates.get(nchg)
        if cycles is None:
            row_entries = geo.row_sizes // 3
            cycles = est.pooling_cycles_of_arrays(
                geo.init_info, -(-self.cpg // self.vw), nchg - 1, geo.start_pos, row_entries,
                geo.work_list[2::3], is_max=self.kind != "sum", is_bwd=self.kind == "maxGrad",
                workers=self.workers,
            )  # fmt: skip
            geo.estimates[nchg] = cycles
        return cycles

    def avg_scale(self, geo: _Geometry) -> tuple[float, np.ndarray | None, list[tuple[int, int]]]:
        """Per-output kernel-position counts of a partition: ``(scale, None, [])`` with a
        common ``1 / count``, or ``(1, scaleWorklist, per-worker bounds)`` for a
        ``SelectiveScaling`` vertex."""
        if geo.avg is not None:
            return geo.avg
        positions = geo.init_info
        # each entry covers the output range [out, out + outWidth) (createWorklists)
        width = (geo.n_sorted - 1) * self.ps.out_step + 1
        cover = np.zeros(positions + 1, np.int64)
        np.add.at(cover, geo.out_sorted, 1)
        np.add.at(cover, geo.out_sorted + width, -1)
        counts = np.cumsum(cover)[:-1]
        used = np.flatnonzero(counts)
        values = np.unique(counts[used])
        if values.size <= 1:
            geo.avg = (1.0 / float(values[0]) if values.size else 1.0), None, []
            return geo.avg
        # runs of equal count (interval_map regions), split over the workers
        runs = np.flatnonzero(np.r_[True, np.diff(counts) != 0])
        run_end = np.r_[runs[1:], counts.size]
        keep = counts[runs] != 0
        r0, r1 = runs[keep], run_end[keep]
        total = int((r1 - r0).sum())
        lists = []
        acc = np.r_[0, np.cumsum(r1 - r0)]
        for c in range(self.workers):
            lo_e, hi_e = (c * total) // self.workers, ((c + 1) * total) // self.workers
            lo_x, hi_x = np.maximum(lo_e, acc[:-1]), np.minimum(hi_e, acc[1:])
            hit = lo_x < hi_x
            trip = np.stack([r0 + lo_x - acc[:-1], hi_x - lo_x, counts[r0]], 1)[hit]
            lists.append(trip.ravel().astype(np.int64))
        bounds = np.r_[0, np.cumsum([x.size for x in lists])].tolist()
        geo.avg = 1.0, np.concatenate(lists), list(itertools.pairwise(bounds))
        return geo.avg

    def _input_box(self, begin: list[int], end: list[int]) -> list[tuple[int, int]]:
        """Input range of an output slice over all kernel positions (``getInputRange``)."""
        out = []
        for d in range(len(begin)):
            valid = self.ps.valid[d][begin[d] : end[d]]
            src = self.ps.src[d][begin[d] : end[d]][valid]
            out.append((int(src.min()), int(src.max()) + 1) if src.size else (0, 0))
        return out

    # ------------------------------------------------------------------ the pass
    def build(
        self,
        operands: list[_Operand],
        prog: _program.Sequence,
        intro: _Operand,
        avg: bool = False,
        scale_value: float = 1.0,
        intro_tiles: np.ndarray | None = None,
    ) -> None:
        """Add the pass: partitions, their tiles, vertices and constants, the zeroing
        of outputs no entry writes, and the compute sets to ``prog``.

        ``intro`` is the operand whose tensor's mapping chooses the tiles;
        ``intro_tiles``, when given, are
        :func:`.mapping.local_tiles` of that tensor as the caller has them already
        (read, not changed), so that they are not gathered again."""
        graph, ps, cpg, typ = self.graph, self.ps, self.cpg, self.typ
        chans, batch = operands[0].shape[:2]
        ng = chans // cpg
        split = _splits(self.num_tiles, [ng, batch, *ps.out_shape])
        # introspective tile choice (tilePartitions / getTileToMap)
        if intro_tiles is None:
            intro_tiles = local_tiles(graph, intro.tensor, self.name)
        cs_pool = graph.addComputeSet(f"{self.name}/Pool")
        self._cs_scale = None
        cls = pv.pool_vertex(self.kind, typ)
        out_op = next(o for o in operands if o.field == "out")
        parts = self._partitions(batch, ng, split)
        tiles = self._choose_tiles(intro, intro_tiles, parts)
        empty = parts.flags("empty")
        zero_required = bool(empty.any() or parts.flags("partial").any())
        kept = np.flatnonzero(~empty)
        mine = parts.take(kept)
        self._specs: list[tuple[Type, np.ndarray, int, str]] = []
        used = [mine.geos[i] for i in np.unique(mine.geo).tolist()]
        if avg and any(self.avg_scale(geo)[1] is not None for geo in used):
            # some outputs have fewer kernel positions: SelectiveScaling vertices too
            out_pos, out_tiles = self._add_each(cs_pool, cls, operands, mine, tiles[kept],
                                                scale_value)  # fmt: skip
        elif kept.size:
            out_pos, out_tiles = self._add_all(cs_pool, cls, operands, mine, tiles[kept], avg,
                                               scale_value)  # fmt: skip
        else:
            out_pos, out_tiles = np.zeros(0, np.int64), np.zeros(0, np.int64)
        if out_pos.size:
            mapped = local_tiles(graph, out_op.tensor, self.name)
            put_in_order(mapped, out_pos, out_tiles)  # a later partition wins
            graph.mapElements(out_op.tensor, mapped)
        if zero_required:
            from poplar_api.popops.elementwise import zero

            whole = out_op.tensor.elements(out_op.positions().ravel())
            zero(graph, whole, prog, f"{self.name}/zero")
        prog.add(_program.Execute(cs_pool))
        if self._cs_scale is not None:
            prog.add(_program.Execute(self._cs_scale))

    def _partitions(self, batch: int, ng: int, split: list[int]) -> Parts:
        """The partitions of the pass in Poplibs' order (batch, channel groups, field),
        those with an empty range left out, each with its :class:`_Geometry`."""
        field_ranges = [_ranges(s, k) for s, k in zip(self.ps.out_shape, split[2:], strict=True)]
        boxes = [
            ([field_ranges[d][i][0] for d, i in enumerate(combo)],
             [field_ranges[d][i][1] for d, i in enumerate(combo)])
            for combo in np.ndindex(*split[2:])
        ]  # fmt: skip
        boxes = [(b, e) for b, e in boxes if all(x < y for x, y in zip(b, e, strict=True))]
        b_ranges = np.array([r for r in _ranges(batch, split[1]) if r[1] > r[0]], np.int64)
        g_ranges = np.array([r for r in _ranges(ng, split[0]) if r[1] > r[0]], np.int64)
        geos: list[_Geometry] = []
        first_of: dict[int, int] = {}  # batch ranges of one size share their geometries
        for nb in np.unique(b_ranges[:, 1] - b_ranges[:, 0]).tolist():
            first_of[nb] = len(geos)
            geos += [self.geometry(nb, b, e) for b, e in boxes]
        nbox, ngr = len(boxes), len(g_ranges)
        per_batch = ngr * nbox
        first = np.array([first_of[int(b1 - b0)] for b0, b1 in b_ranges.tolist()], np.int64)
        geo = np.repeat(first, per_batch) + np.tile(np.arange(nbox), len(b_ranges) * ngr)
        return Parts(
            np.repeat(b_ranges[:, 0], per_batch), np.repeat(b_ranges[:, 1], per_batch),
            np.tile(np.repeat(g_ranges[:, 0], nbox), len(b_ranges)),
            np.tile(np.repeat(g_ranges[:, 1], nbox), len(b_ranges)),
            geo.astype(np.int64), geos,
        )  # fmt: skip

    def _choose_tiles(self, intro: _Operand, intro_tiles: np.ndarray, parts: Parts) -> np.ndarray:
        """``getTileToMap`` for each partition in turn (:func:`.pool_parts.choose_tiles`)
        over the elements of its input box (all its channels and batch elements) in
        ``intro``'s tensor, whose elements are on ``intro_tiles``: the tiles are read
        through the internal layout's strides as the boxes are placed."""
        cpg = self.cpg
        owner = np.ascontiguousarray(intro_tiles, np.int64).reshape(-1)
        if intro.pos is None:
            layout, strides = owner, np.array(intro.strides(), np.int64)
        else:  # positions given: the tiles in their layout
            layout = np.ascontiguousarray(owner[intro.pos])
            strides = np.array(layout.strides, np.int64) // layout.itemsize
        boxes = np.array([g.in_box for g in parts.geos], np.int64).reshape(len(parts.geos), -1, 2)
        box_lo, box_n = boxes[:, :, 0], boxes[:, :, 1] - boxes[:, :, 0]
        origins = parts.g0 * cpg * strides[0] + parts.b0 * strides[1]
        origins = origins + box_lo[parts.geo] @ strides[2:]
        shapes = np.concatenate([((parts.g1 - parts.g0) * cpg)[:, None],
                                 (parts.b1 - parts.b0)[:, None], box_n[parts.geo]], 1)  # fmt: skip
        tiles, sizes = box_values(layout.reshape(-1), strides, origins, shapes)
        return choose_tiles(owner, tiles, sizes, self.num_tiles)

    def _windows(
        self, o: _Operand, parts: Parts, made: list[tuple] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Positions of every partition's window of ``o`` (``[g, b, *box, c]`` of the
        internal layout), concatenated in partition order, and each one's size: one
        pattern per window shape placed at every partition's origin
        (:func:`.pool_parts.box_positions`).

        ``made``, when given, holds the windows of the pass's other operands (and gets
        this one's): an operand whose positions are laid out as one of those (a max
        pooling gradient's output and forward input, its gradient and forward output,
        each pair of one shape) takes that one's windows, not found again."""
        if o.pos is None:  # the tensor's own layout: the positions are placed at once
            s = o.strides()
            cpg = self.cpg
            strides = np.array([s[0] * cpg, *s[1:], s[0]], np.int64)
            memory, first = None, 0
            key = (o.window, tuple(strides.tolist()), first, o.tensor.numElements())
        else:  # read through the vertex layout's strides in the memory holding it
            memory, strides, first = in_memory(self._vertex_layout(o.pos))
            key = (o.window, tuple(strides.tolist()), first, memory.size)
        for other_key, other_memory, found in made or ():
            if other_key == key and (
                other_memory is memory  # (both None: two tensors' own layouts)
                or (memory is not None and other_memory is not None
                    and np.array_equal(other_memory, memory))
            ):  # fmt: skip
                return found
        found = self._placed_windows(o, parts, memory, strides, first)
        if made is not None:
            made.append((key, memory, found))
        return found

    def _placed_windows(
        self, o: _Operand, parts: Parts, memory: np.ndarray | None, strides: np.ndarray,
        first: int,
    ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """:meth:`_windows` of ``o`` laid out as ``memory``, ``strides`` and ``first``
        (:func:`.pool_parts.in_memory` of its vertex layout; ``memory`` None: the
        positions are those the strides give)."""
        out = o.window == "out"
        geos = parts.geos
        nd = len(self.ps.out_shape)
        lo = np.zeros((len(geos), nd), np.int64)
        shape = np.zeros((len(geos), nd), np.int64)
        for i, g in enumerate(geos):
            if not g.empty:
                lo[i] = g.out_lo if out else g.in_lo
                shape[i] = g.out_shape if out else g.in_shape
        origins = parts.g0 * strides[0] + parts.b0 * strides[1] + lo[parts.geo] @ strides[2:-1]
        n = len(parts)
        shapes = np.concatenate([(parts.g1 - parts.g0)[:, None], (parts.b1 - parts.b0)[:, None],
                                 shape[parts.geo], np.full((n, 1), self.cpg)], 1)  # fmt: skip
        pos, sizes = box_positions(strides, origins + first, shapes)
        return (pos if memory is None else memory[pos]), sizes

    def _add_each(self, cs, cls, operands, parts: Parts, tiles, scale_value):
        """Every partition's vertices one by one (:meth:`_add_one`): the path of a pass
        with ``SelectiveScaling`` vertices. Returns the output positions and tiles."""
        out_op = next(o for o in operands if o.field == "out")
        layouts = [self._vertex_layout(o.positions()) for o in operands]
        planned: list[_Vertex] = []
        out_pos: list[np.ndarray] = []
        columns = [c.tolist() for c in (parts.g0, parts.g1, parts.b0, parts.b1, tiles)]
        for geo, *row in zip(parts.geometries(), *columns, strict=True):
            g0, g1, b0, b1, tile = row
            v = _Vertex(tile, self.estimate(geo, g1 - g0))
            for o, vpos in zip(operands, layouts, strict=True):
                w = self._window(vpos, g0, g1, b0, b1, geo, o.window)
                v.pos[o.field] = w.ravel()
                if o is out_op:
                    out_pos.append(v.pos[o.field])
                    groups = [w[i].ravel() for i in range(w.shape[0])]
            self._constants(v, geo, groups, g1 - g0, out_op.tensor, True, scale_value)
            planned.append(v)
        self._make_constants(planned)
        for v in planned:
            self._add_one(cs, cls, operands, v)
        sizes = [a.size for a in out_pos]
        return np.concatenate(out_pos), np.repeat([v.tile for v in planned], sizes)

    def _add_all(self, cs, cls, operands, parts, tiles, avg, scale_value):
        """Every pooling vertex of the pass in one ``addVertices`` call, its constants in
        one ``addPackedConstants`` call (in Poplibs' order per vertex: ``startPos``,
        ``offsetBase``, worklist, parameters, scale). Returns the output positions and
        their tiles."""
        n, cpg, name, ps = len(parts), self.cpg, self.name, self.ps
        # a vertex's constants and estimate depend on its geometry and channel groups:
        # made once per distinct pair, each vertex's constants segments of their values
        nchg = parts.g1 - parts.g0
        pairs, first, pair_of = np.unique(
            parts.geo * (int(nchg.max()) + 1) + nchg, return_index=True, return_inverse=True
        )
        pair_of = pair_of.reshape(-1)
        arrays: list[np.ndarray] = []
        key_est = np.empty(pairs.size, np.int64)
        for u, f in enumerate(first.tolist()):
            geo, nc = parts.geos[int(parts.geo[f])], int(nchg[f])
            params = np.array([geo.init_info, nc - 1, cpg, ps.in_step, ps.out_step,
                               geo.in_slice * cpg, geo.init_info * cpg])  # fmt: skip
            arrays += [geo.start_pos, geo.base, geo.work_list, params]
            if self.kind == "sum":
                scale = self.avg_scale(geo)[0] if avg else scale_value
                arrays.append(np.asarray([scale]))
            key_est[u] = self.estimate(geo, nc)
        types = [UNSIGNED_SHORT, UNSIGNED_SHORT, UNSIGNED_SHORT, UNSIGNED_INT]
        names = [f"{name}/ContextStartPos", f"{name}/OffsetBase", f"{name}/worklist",
                 f"{name}/params"]  # fmt: skip
        if self.kind == "sum":
            types.append(self.typ)
            names.append(f"{name}/scale")
        per = len(types)
        flat_sizes = np.array([a.size for a in arrays], np.int64)
        key_sizes = flat_sizes.reshape(pairs.size, per)
        key_starts = (np.cumsum(flat_sizes) - flat_sizes).reshape(pairs.size, per)
        made = self.graph.addPackedConstants(
            types * n, key_sizes[pair_of].reshape(-1), np.concatenate(arrays), names * n,
            np.repeat(tiles, per), key_starts[pair_of].reshape(-1),
        )  # fmt: skip
        conns: dict[str, Any] = {}
        out_pos = out_sizes = None
        windows: list[tuple] = []  # operands laid out alike share their windows
        for o in operands:
            pos, sizes = self._windows(o, parts, windows)
            conns[o.field] = Segments(o.tensor.elements(pos), sizes)
            if o.field == "out":
                out_pos, out_sizes = pos, sizes
        base = np.arange(n, dtype=np.int64) * per  # constants per vertex

        def consts(which: int) -> Segments:
            return Segments(made.concat(base + which), made.numElements(base + which))

        conns["startPos"] = consts(0)
        conns["offsetBase"] = consts(1)
        # each vertex's worklist rows: its geometry's, segments of all geometries' rows
        rows = [g.row_sizes for g in parts.geos]
        geo_rows = np.array([r.size for r in rows], np.int64)
        vectors = geo_rows[parts.geo]
        at = (np.cumsum(geo_rows) - geo_rows)[parts.geo]
        row_sizes = np.concatenate(rows)[spans(at, vectors)]
        conns["workList"] = Segments(made.concat(base + 2), row_sizes, vectors)
        conns["params"] = consts(3)
        if self.kind == "sum":
            conns["scale"] = consts(4)
        self.graph.addVertices(cs, cls, tiles, conns, key_est[pair_of])
        return out_pos, np.repeat(tiles, out_sizes)

    def _constants(self, v: _Vertex, geo, groups, nchg, out, avg, scale_value) -> None:
        """The constants of one partition's vertices, in Poplibs' order: the worklist,
        parameters, the optional ``SelectiveScaling`` vertex's and the scale."""
        cpg = self.cpg
        params = [geo.init_info, nchg - 1, cpg, self.ps.in_step, self.ps.out_step,
                  geo.in_slice * cpg, geo.init_info * cpg]  # fmt: skip
        v.consts["startPos"] = self._const(UNSIGNED_SHORT, geo.start_pos, v.tile, "ContextStartPos")
        v.consts["offsetBase"] = self._const(UNSIGNED_SHORT, geo.base, v.tile, "OffsetBase")
        v.work_list = self._const(UNSIGNED_SHORT, geo.work_list, v.tile, "worklist")
        v.rows = geo.bounds
        v.consts["params"] = self._const(UNSIGNED_INT, params, v.tile, "params")
        scale = scale_value
        if avg:
            scale, data, bounds = self.avg_scale(geo)
            if data is not None:
                if self._cs_scale is None:
                    self._cs_scale = self.graph.addComputeSet(f"{self.name}/Scale")
                wl = self._const(UNSIGNED_SHORT, data, v.tile, "scaleWorklist")
                v.scaling = {
                    "scaleWorklist": wl,
                    "bounds": bounds,
                    "inOut": [out.elements(g) for g in groups],
                    "params": self._const(UNSIGNED_INT, [nchg, cpg], v.tile, "scalingParams"),
                }
        if self.kind == "sum":
            v.consts["scale"] = self._const(self.typ, [scale], v.tile, "scale")

    def _add_one(self, cs, cls, operands: list[_Operand], v: _Vertex) -> None:
        """One partition's vertices: the optional ``SelectiveScaling`` vertex (compute
        set ``Scale``), then the pooling vertex."""
        graph = self.graph
        if v.scaling is not None:
            vs = graph.addVertex(self._cs_scale, pv.selective_scaling_vertex(self.typ), v.scaling)
            graph.setTileMapping(vs, v.tile)
            graph.setPerfEstimate(vs, est.SELECTIVE_SCALING_CYCLES)
        conns: dict[str, Any] = {o.field: o.tensor.elements(v.pos[o.field]) for o in operands}
        conns["startPos"] = v.consts["startPos"]
        conns["offsetBase"] = v.consts["offsetBase"]
        conns["workList"] = [v.work_list.slice(a, b) for a, b in v.rows]
        conns["params"] = v.consts["params"]
        if "scale" in v.consts:
            conns["scale"] = v.consts["scale"]
        vertex = graph.addVertex(cs, cls, conns)
        graph.setTileMapping(vertex, v.tile)
        graph.setPerfEstimate(vertex, v.estimate)

    def _const(self, type_: Type, values: Any, tile: int, what: str) -> int:
        """A constant of the pass on ``tile``, made later with the others (its index)."""
        arr = values if type(values) is np.ndarray else np.asarray(values)
        self._specs.append((type_, arr, tile, f"{self.name}/{what}"))
        return len(self._specs) - 1

    def _make_constants(self, planned: list[_Vertex]) -> None:
        """Make the pass's constants in one ``addConstants`` call, in the order they
        were asked for, and put them in place of their indices in ``planned``."""
        if not self._specs:
            return
        types, values, tiles, names = zip(*self._specs, strict=True)
        shapes = [[a.size] for a in values]
        made = self.graph.addConstants(list(types), shapes, list(values), list(names), tiles)
        self._specs = []
        for v in planned:
            v.consts = {k: made[i] for k, i in v.consts.items()}
            v.work_list = made[v.work_list]
            if v.scaling is not None:
                wl = made[v.scaling["scaleWorklist"]]
                bounds = v.scaling.pop("bounds")
                v.scaling["scaleWorklist"] = [wl.slice(a, b) for a, b in bounds]
                v.scaling["params"] = made[v.scaling["params"]]

    def _vertex_layout(self, pos: np.ndarray) -> np.ndarray:
        """An internal-layout position array ``[C, B, *F]`` as ``[G, B, *F, cpg]`` (a
        view): the order of a vertex's positions, so each window is one slice."""
        cpg = self.cpg
        grouped = pos.reshape(pos.shape[0] // cpg, cpg, *pos.shape[1:])
        return grouped.transpose(0, *range(2, grouped.ndim), 1)

    def _window(self, layout, g0, g1, b0, b1, geo: _Geometry, which: str) -> np.ndarray:
        """Positions of ``[g, b, *box, c]`` (``layout``: :meth:`_vertex_layout`)."""
        lo, shape = (geo.out_lo, geo.out_shape) if which == "out" else (geo.in_lo, geo.in_shape)
        box = tuple(slice(a, a + s) for a, s in zip(lo, shape, strict=True))
        return layout[(slice(g0, g1), slice(b0, b1), *box)]


__all__ = ["MAX_GRAINS_PER_GROUP"]
