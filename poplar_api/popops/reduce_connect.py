"""How Poplibs connects the reductions of one tile (``connectReductions``).

Restates ``lib/popops/reduction/ReductionConnection.cpp`` (graphcore/poplibs at
``7eac0f266ced5b064b3284a3cd90d491745b387c``) for the shapes ipusim's planner makes.
A tile's work is a tuple of *regions*: ``(w, rows, inner)`` = ``w`` adjacent output
columns, each reducing ``rows`` partials, laid out in runs of ``inner`` consecutive
elements of one column (Poplibs' ``innerFactor``; 1 for intermediate stages). The
result is a :class:`TileTemplate`: the vertices of the tile, each with the tile-local
element references of its outputs and partials, its specialisation and its cycle
estimate, memoised per distinct tuple of regions so that the tiles of one layout
share one template (the per-tile work is then numpy indexing, :mod:`.reduce_plan`).

The rules restated, in Poplibs' order:

* ``dividePartials`` / ``splitOutputRegionsForWorkers``: regions with ``inner == 1``
  are cut into at most the free workers' count of pieces on grain boundaries
  (``poputil::splitRegions``); the grain is ``findGrainSizeForOp`` (the vector width,
  twice it for ADD and SQUARE_ADD).
* ``connectLargeInnerFactorReductions``: ``inner > 1``, one run per column, more than
  one column: columns split over workers (``findSplitsBetweenWorkers``), one vertex
  per split of single-output reductions.
* ``connectSmallInnerFactorReductions``: ``inner > 1`` and several runs per column:
  column splits (``getAllowedColumnSplits``), a first compute set reducing the runs
  to ``w · inner`` partials, a second reducing each column's ``inner`` partials.
* otherwise fewer reductions than workers: ``splitTwoStageReductionsBetweenWorkers``
  splits the rows (``splitRowsToWorkers``) over the free workers when the rough cycle
  model says it pays, with a second compute set combining the pieces; else
  ``distributeReductionsBetweenWorkers`` gives each worker one vertex.
* ``getReductionVertexSpecialisation`` picks ALL_REGIONS_CONTINUOUS, then
  SCALAR_OUTPUT_SINGLE_INPUT, then STRIDED_REDUCE, else SCALAR_OUTPUT_REGIONS (all
  outputs single elements) or DEFAULT (:func:`choose_specialisation`).

Not modelled: ``connectProblemColumnCountReductions`` (2- and 3-column regions whose
width is not a multiple of the vector width take the general path), the VectorList
size limit (``vectorListMaxSize``), ``findMultiVertexPlan`` (a worker's reductions
make one vertex) and STRIDED_REDUCE_OUTER.
"""

from __future__ import annotations

import bisect
import functools
import math
from dataclasses import dataclass

import numpy as np

from poplar_api.popops import reduce_estimators as est
from poplar_api.popops.reduce_vertices import Operation
from poplar_api.types import FLOAT, HALF, Type

__all__ = [
    "Ctx",
    "TVertex",
    "TileTemplate",
    "choose_specialisation",
    "connect_tile",
    "split_regions",
    "vertex_cycles",
]

ALL = "ALL_REGIONS_CONTINUOUS"
SSI = "SCALAR_OUTPUT_SINGLE_INPUT"
STRIDED = "STRIDED_REDUCE"
SOR = "SCALAR_OUTPUT_REGIONS"
DEFAULT = "DEFAULT"
_ADDS = (Operation.ADD, Operation.SQUARE_ADD)
_CONTINUOUS_OPS = (Operation.ADD, Operation.SQUARE_ADD, Operation.MAX, Operation.MIN)
_LOGICAL = (Operation.LOGICAL_AND, Operation.LOGICAL_OR)
#: ``getAtomicStoreGranularity`` of every IPU: 4 bytes.
ATOMIC_BYTES = 4


@dataclass(frozen=True)
class Ctx:
    """What a tile's connection depends on besides its regions.

    ``in_type`` is the type of the partials read from the stage's source,
    ``part_type`` the type of on-tile second-stage partials, ``out_type`` the type of
    the stage's destination; ``uses_input`` is Poplibs' ``reductionUsesInput``;
    ``split`` enables the worker split of ``inner == 1`` regions.
    """

    op: Operation
    update: bool
    scaled: bool
    in_type: Type
    part_type: Type
    out_type: Type
    uses_input: bool
    split: bool
    workers: int
    scale: float = 1.0


@dataclass(frozen=True)
class TVertex:
    """One vertex of a tile template.

    ``kind`` is ``single`` (source to destination, the reduction's params),
    ``first`` (source to the tile's temporary partials, the bare operation) or
    ``second`` (temporary partials to destination). ``outs`` are tile-local column
    indices (destination) or temporary indices; ``plen`` the partials per output;
    ``prefs`` offsets into the tile's partials (source) or temporary indices.
    """

    cs: int
    kind: str
    spec: str
    cycles: int
    outs: np.ndarray
    plen: np.ndarray
    prefs: np.ndarray


@dataclass(frozen=True)
class TileTemplate:
    """The vertices of one tile layout and the temporary partials it needs."""

    temp_size: int
    vertices: tuple[TVertex, ...]

    @property
    def num_cs(self) -> int:
        return 1 + max((v.cs for v in self.vertices), default=0)


def grain_for_op(t: Type, op: Operation) -> int:
    """``findGrainSizeForOp``: the vector width, twice it for ADD and SQUARE_ADD."""
    vw = max(1, 8 // t.size)
    return 2 * vw if op in _ADDS else vw


def split_regions(
    intervals: list[tuple[int, int]], grain: int, max_parts: int, min_elems: int = 1
) -> list[list[tuple[int, int]]]:
    """``poputil::splitRegions`` (lib/poputil/Util.cpp ``splitRegionsAux``): cut the
    intervals into at most ``max_parts`` partitions of whole grains, in order."""
    total = sum(e - b for b, e in intervals)
    if total == 0:
        return []
    num_grains = -(-total // grain)
    max_grains = -(-num_grains // max(1, max_parts))
    if min_elems:
        min_grains = -(-min_elems // grain)
        most = max(1, num_grains // min_grains)
        max_grains = max(max_grains, -(-num_grains // most))
    count = -(-num_grains // max_grains)
    parts: list[list[tuple[int, int]]] = []
    it, offset = 0, 0
    for v in range(count):
        lo = (v * num_grains) // count * grain
        hi = min(total, ((v + 1) * num_grains) // count * grain)
        size = hi - lo
        part = []
        while size > 0:
            b, e = intervals[it]
            if offset == e - b:
                it, offset = it + 1, 0
                b, e = intervals[it]
            take = min(size, e - b - offset)
            part.append((b + offset, b + offset + take))
            offset += take
            size -= take
        parts.append(part)
    return parts


def _ops_per_cycle(out_size: int, t: Type, op: Operation) -> int:
    """``opsPerCycle`` (ReductionConnection.cpp): rough elements per cycle."""
    vw = max(1, 8 // t.size)
    if op in _ADDS and t in (HALF, FLOAT):
        vw *= 2
    w = vw
    while w > 0:
        if out_size == w:
            return vw
        w //= 2
    w = vw
    while w > 0:
        if out_size % w == 0:
            return w
        w //= 2
    return 1


def _approx_cycles(w: int, rows: int, ctx: Ctx) -> int:
    """``approximateCyclesForReduction``."""
    return math.ceil(w * rows / _ops_per_cycle(w, ctx.out_type, ctx.op))


def _split_two_stage(regs: list[tuple], ctx: Ctx, workers: int) -> list[int]:
    """``splitTwoStageReductionsBetweenWorkers`` (no VectorList limit)."""
    approx = [30 + _approx_cycles(r[1], r[2], ctx) for r in regs]
    base = [_approx_cycles(r[1], r[2], ctx) for r in regs]
    max_split = [min(r[2] // 2, a // 4) for r, a in zip(regs, approx, strict=True)]
    splits = [1] * len(regs)
    free = workers - len(regs) if workers > len(regs) else 0
    before = max(approx)
    while free > 0:
        i = int(np.argmax(approx))
        if splits[i] + 1 >= max_split[i]:
            break
        after = (60 if splits[i] + 1 > 1 else 30) + base[i] // (splits[i] + 1)
        if not after < approx[i]:
            break
        approx[i] = after
        splits[i] += 1
        free -= 1
    return [1] * len(regs) if max(approx) == before else splits


def _split_rows(rows: int, n: int, grain: int) -> list[int]:
    """``splitRowsToWorkers``."""
    if rows <= 3 or n <= 1:
        return [rows]
    per = -(-rows // n)
    count = min(rows // 2, -(-rows // per))
    split = [grain * (rows // (count * grain))] * count
    plus = rows % (count * grain)
    for i in range(plus // grain):
        split[i] += grain
    split[-1] += plus % grain
    return split


def _distribute(regs: list[tuple], ctx: Ctx, workers: int) -> list[int]:
    """``distributeReductionsBetweenWorkers``: the worker of every reduction."""
    cycles = [_approx_cycles(r[1], r[2], ctx) for r in regs]
    mean = sum(cycles) / len(cycles)
    tol = max(8.0, 0.1 * mean)
    lo = int(mean - tol) if mean > tol else 0
    hi = int(mean + tol)
    if all(lo <= c <= hi for c in cycles) and workers:
        per, extra = divmod(len(regs), workers)
        out = []
        for i in range(workers):
            out += [i] * (per + (i < extra))
        return out[: len(regs)]
    order = sorted(range(len(regs)), key=lambda i: cycles[i])
    load: list[int] = []
    out = [0] * len(regs)
    for i in order:
        if len(load) < workers:
            out[i] = len(load)
            load.append(cycles[i])
        else:
            k = int(np.argmin(load))
            out[i] = k
            load[k] += cycles[i]
    return out


def _find_max_splits(workers: int, total: int, to_split: int) -> int:
    """``findMaxSplits``."""
    splits = 1
    while splits * to_split + (total - to_split) <= workers:
        splits += 1
    return splits if splits == 1 else splits - 1


def _splits_between_workers(max_splits: int, outputs: int) -> list[int]:
    """``findSplitsBetweenWorkers``: the last output index of every split."""
    splits = min(max_splits, outputs)
    th = [outputs // splits + (j < outputs % splits) for j in range(splits)]
    largest = th[0]
    for j in range(splits, 0, -1):
        removed = False
        for k in range(j - 1):
            if j - 1 < len(th) and th[j - 1] + th[k] == largest:
                th[k] += th[j - 1]
                th.pop()
                removed = True
                break
        if not removed:
            break
    th[0] -= 1
    for j in range(1, len(th)):
        th[j] += th[j - 1]
    return th


def choose_specialisation(
    ctx: Ctx,
    kind: str,
    widths: list[int],
    per_out: list[int],
    *,
    contiguous: bool,
    cheap: bool,
    regular: bool,
    adjacent: bool = False,
) -> str:
    """``getReductionVertexSpecialisation`` for a vertex of ``len(widths)`` regions.

    ``widths[r]`` outputs each reducing ``per_out[r]`` partial elements;
    ``contiguous``: the vertex's partials are one contiguous block; ``cheap``: no
    partial piece after a misaligned one (``partialsCopyIsCheap``); ``regular``:
    strided rows of one source (``RegularPartials``)."""
    op = ctx.op
    if kind == "second" and op is Operation.SQUARE_ADD:
        op = Operation.ADD
    p_type = ctx.part_type if kind == "second" else ctx.in_type
    o_type = ctx.part_type if kind == "first" else ctx.out_type
    update_or_scale = kind != "first" and (ctx.update or ctx.scaled)
    uses_input = ctx.uses_input and kind != "second"
    copy_ok = contiguous or cheap or not uses_input
    if op in _CONTINUOUS_OPS and all(w == 1 for w in widths) and len(set(per_out)) == 1 and copy_ok:
        return ALL
    if op in _ADDS and len(widths) == 1 and widths[0] == 1 and not update_or_scale:
        ok = (p_type.size % ATOMIC_BYTES == 0) if regular else cheap
        if ok:
            return SSI
    w0 = widths[0]
    # several regions qualify when they are adjacent pieces with equal rows
    one_pattern = len(widths) == 1 or (adjacent and len(set(per_out)) == 1)
    strided = (
        one_pattern
        and (w0 * o_type.size) % ATOMIC_BYTES == 0
        and (sum(widths) * p_type.size) % 8 == 0
        and (((w0 * p_type.size) % ATOMIC_BYTES == 0) if regular else (cheap or not uses_input))
    )
    if strided:
        if o_type in (FLOAT, HALF) and op in _CONTINUOUS_OPS:
            return STRIDED
        return DEFAULT
    return SOR if all(w == 1 for w in widths) else DEFAULT


def vertex_cycles(
    ctx: Ctx, kind: str, spec: str, widths: list[int], per_out: list[int], pieces: list[list[int]]
) -> int:
    """The Poplibs estimate of one vertex (``getCycleEstimateForReduceVertex``).

    ``pieces[r]`` are the sizes of region ``r``'s partial vectors."""
    op = ctx.op
    if kind == "second" and op is Operation.SQUARE_ADD:
        op = Operation.ADD
    p_type = ctx.part_type if kind == "second" else ctx.in_type
    o_type = ctx.part_type if kind == "first" else ctx.out_type
    update = ctx.update and kind != "first"
    dpw = est.data_path_elems(p_type.size)
    acc_vw = est.acc_vector_width(p_type.size, p_type.is_floating)
    accumulator = op in _ADDS
    op_vw = acc_vw if accumulator else max(1, 8 // p_type.size)
    if op in _LOGICAL:
        sizes = [s for p in pieces for s in p]
        return est.generic_reduce_non_vectorised(sizes, conv=int(p_type != o_type))
    if spec == ALL:
        return est.all_regions_continuous(
            len(widths), per_out[0], acc_vw=acc_vw, dpw=dpw, update=update
        )
    if spec == SSI:
        return est.scalar_output_single_input(
            per_out[0], op_vw=op_vw, dpw=dpw, out_is_float=o_type == FLOAT
        )
    if spec == STRIDED:
        return est.strided_reduce(
            sum(widths),
            per_out[0],
            partials_half=p_type == HALF,
            out_half=o_type == HALF,
            op_name=op.name,
            op_vw=op_vw,
            dpw=dpw,
            update=update,
        )
    return est.generic_reduce_regions(
        widths,
        pieces,
        op_vw=op_vw,
        dpw=dpw,
        out_vw=max(1, 8 // o_type.size),
        accumulator=accumulator,
        update=update,
    )


def _misaligned_follow(pieces: list[int], size: int) -> bool:
    """Whether a piece follows a misaligned one (``partialsCopyIsCheap`` false)."""
    return any((p * size) % ATOMIC_BYTES for p in pieces[:-1])


class _TileBuilder:
    """Collects the vertices of one template."""

    def __init__(self, ctx: Ctx, base: np.ndarray) -> None:
        self.ctx = ctx
        self.base = base  # offset of every local column's first partial
        self.temp = 0
        self.vertices: list[TVertex] = []

    def add(
        self,
        cs: int,
        kind: str,
        outs: np.ndarray,
        plen: np.ndarray,
        prefs: np.ndarray,
        widths: list[int],
        *,
        contiguous: bool,
        regular: bool,
        piece_sizes: list[list[int]],
        adjacent: bool = False,
    ) -> None:
        ctx = self.ctx
        starts = [0]
        for w in widths[:-1]:
            starts.append(starts[-1] + w)
        plen_list = plen.tolist()
        per_out = [plen_list[i] for i in starts]
        p_size = (ctx.part_type if kind == "second" else ctx.in_type).size
        flat_pieces = [s for p in piece_sizes for s in p]
        cheap = not _misaligned_follow(flat_pieces, p_size)
        spec = choose_specialisation(
            ctx,
            kind,
            widths,
            per_out,
            contiguous=contiguous,
            cheap=cheap,
            regular=regular,
            adjacent=adjacent,
        )
        cycles = vertex_cycles(ctx, kind, spec, widths, per_out, piece_sizes)
        self.vertices.append(TVertex(cs, kind, spec, int(cycles), outs, plen, prefs))

    def refs(self, c0: int, w: int, r0: int, r1: int) -> np.ndarray:
        """Source offsets of columns ``c0..c0+w`` rows ``r0..r1``, per output."""
        return (self.base[c0 : c0 + w, None] + np.arange(r0, r1)[None, :]).reshape(-1)


@functools.lru_cache(maxsize=4096)
def connect_tile(regions: tuple[tuple[int, int, int], ...], ctx: Ctx) -> TileTemplate:
    """The vertices Poplibs' ``connectReductions`` puts on a tile with ``regions``.

    ``regions`` are ``(w, rows, inner)`` in the tile's column order; local column
    ``j`` has its partials at offsets ``base[j] .. base[j] + rows``.
    """
    widths = [r[0] for r in regions]
    col_rows = np.repeat([r[1] for r in regions], widths).astype(np.int64)
    base = np.concatenate([[0], np.cumsum(col_rows)[:-1]]).astype(np.int64)
    tb = _TileBuilder(ctx, base)
    starts = np.concatenate([[0], np.cumsum(widths)[:-1]]).astype(np.int64).tolist()
    subs = [(c0, w, rows, inner) for c0, (w, rows, inner) in zip(starts, regions, strict=True)]
    workers = ctx.workers
    if ctx.split:
        other = [s for s in subs if s[3] != 1 or (ctx.uses_input and s[1] == 3)]
        simple = [s for s in subs if s not in other]
        if simple:
            parts = max(workers - len(other), 1)
            grain = grain_for_op(ctx.in_type, ctx.op)
            # splitRegions cuts within the intervals, never across two of them
            pieces = [iv for p in split_regions([(s[0], s[0] + s[1]) for s in simple], grain,
                                                parts) for iv in p]  # fmt: skip
            firsts = [s[0] for s in simple]
            subs = other + [
                (b, e - b, simple[bisect.bisect_right(firsts, b) - 1][2], 1) for b, e in pieces
            ]
    remaining = workers
    # connectLargeInnerFactorReductions
    large = [s for s in subs if s[3] != 1 and s[2] == s[3] and s[1] != 1]
    rest = [s for s in subs if s not in large]
    if large:
        max_splits = _find_max_splits(remaining, len(subs), len(large))
        for c0, w, rows, _ in large:
            th = _splits_between_workers(max_splits, w)
            lo = 0
            for hi in th:
                n = hi + 1 - lo
                outs = np.arange(c0 + lo, c0 + hi + 1, dtype=np.int64)
                tb.add(0, "single", outs, np.full(n, rows, np.int64),
                       tb.refs(c0 + lo, n, 0, rows), [1] * n, contiguous=True,
                       regular=True, piece_sizes=[[rows]] * n)  # fmt: skip
                remaining = max(remaining - 1, 0)
                lo = hi + 1
    # connectSmallInnerFactorReductions
    small = [s for s in rest if s[3] != 1 and s[1] != 1]
    rest = [s for s in rest if s not in small]
    if small:
        to_use = _find_max_splits(remaining, len(small) + len(rest), len(small))
        vw_in = max(1, 8 // ctx.in_type.size)
        impl = []
        for c0, w, rows, inner in small:
            n_split = 1
            for i in range(2, to_use + 1):
                if w % i == 0 and (w * inner // i) % vw_in == 0:
                    n_split = i
            ow = w // n_split
            impl += [(c0 + j * ow, ow, rows, inner) for j in range(n_split)]
        remaining = max(remaining - len(impl), 0)
        for c0, ow, rows, inner in impl:
            outer = rows // inner
            t0 = tb.temp
            tb.temp += ow * inner
            # output (column j, run element i) reduces rows o*inner + i, o < outer
            j = np.arange(ow)[:, None, None]
            i = np.arange(inner)[None, :, None]
            o = np.arange(outer)[None, None, :]
            prefs = (base[c0 + j] + o * inner + i).reshape(-1)
            tb.add(0, "first", t0 + np.arange(ow * inner, dtype=np.int64),
                   np.full(ow * inner, outer, np.int64), prefs, [ow * inner],
                   contiguous=False, regular=True,
                   piece_sizes=[[ow * inner] * outer])  # fmt: skip
            tb.add(1, "second", np.arange(c0, c0 + ow, dtype=np.int64),
                   np.full(ow, inner, np.int64), t0 + np.arange(ow * inner, dtype=np.int64),
                   [1] * ow, contiguous=True, regular=False,
                   piece_sizes=[[inner]] * ow)  # fmt: skip
    if rest:
        if len(rest) < remaining:
            splits = _split_two_stage(rest, ctx, remaining)
        else:
            splits = [1] * len(rest)
        if any(s > 1 for s in splits) or len(rest) < remaining:
            singles = [r for r, s in zip(rest, splits, strict=True) if s == 1]
            for reg in singles:
                _single(tb, [reg])
            for (c0, w, rows, inner), s in zip(rest, splits, strict=True):
                if s == 1:
                    continue
                vw_in = max(1, 8 // ctx.in_type.size)
                per = _split_rows(rows, s, vw_in if w == 1 else 1)
                t0 = tb.temp
                tb.temp += w * len(per)
                r0 = 0
                for k, n in enumerate(per):
                    tb.add(0, "first", t0 + k * w + np.arange(w, dtype=np.int64),
                           np.full(w, n, np.int64), tb.refs(c0, w, r0, r0 + n), [w],
                           contiguous=w == 1 and inner == rows and ctx.uses_input,
                           regular=ctx.uses_input,
                           piece_sizes=[[w * inner] * max(1, n // inner)])  # fmt: skip
                    r0 += n
                k = len(per)
                prefs = (t0 + np.arange(k)[None, :] * w + np.arange(w)[:, None]).reshape(-1)
                tb.add(1, "second", np.arange(c0, c0 + w, dtype=np.int64),
                       np.full(w, k, np.int64), prefs, [w], contiguous=w == 1,
                       regular=False, piece_sizes=[[w * k]])  # fmt: skip
        else:
            assign = _distribute(rest, ctx, remaining)
            for worker in sorted(set(assign)):
                mine = [r for r, a in zip(rest, assign, strict=True) if a == worker]
                _single(tb, mine)
    return TileTemplate(tb.temp, tuple(tb.vertices))


def _shape(tb: _TileBuilder, regs: list[tuple[int, int, int, int]]) -> dict:
    """The facts :func:`choose_specialisation` needs about single-stage ``regs``."""
    widths = [r[1] for r in regs]
    adjacent = all(regs[i][0] + regs[i][1] == regs[i + 1][0] for i in range(len(regs) - 1))
    pieces = [[w * inner] * max(1, rows // inner) for _, w, rows, inner in regs]
    runs_whole = all(w == 1 and inner == rows for _, w, rows, inner in regs)
    p_size = tb.ctx.in_type.size
    return {
        "widths": widths,
        "per_out": [r[2] for r in regs],
        "contiguous": adjacent and runs_whole and tb.ctx.uses_input,
        "cheap": not _misaligned_follow([x for p in pieces for x in p], p_size),
        "regular": tb.ctx.uses_input,
        "adjacent": adjacent and all(r[3] == 1 for r in regs),
        "pieces": pieces,
    }


def _spec(tb: _TileBuilder, regs: list[tuple[int, int, int, int]]) -> str:
    f = _shape(tb, regs)
    return choose_specialisation(
        tb.ctx, "single", f["widths"], f["per_out"], contiguous=f["contiguous"],
        cheap=f["cheap"], regular=f["regular"], adjacent=f["adjacent"],
    )  # fmt: skip


def _cost(spec: str, n: int) -> int:
    """``getReductionCost``: memory plus base cycle cost of a vertex of ``n`` regions."""
    if spec in (DEFAULT, SOR):
        return 8 * n + 20 + 2
    return 12


def _multi_vertex_plan(tb: _TileBuilder, regs: list, threshold: int | None) -> tuple:
    """``findMultiVertexPlan``: ranges of ``regs`` whose specialisation has no
    per-reduction cost (ALL_REGIONS_CONTINUOUS, STRIDED_REDUCE) grown greedily; with a
    length threshold (``threshold`` None) short ranges go back as remaining, with a
    cost threshold the plan falls back to one vertex when the ranges cost more."""
    plan: list[list] = []
    remaining: list = []
    total = 0
    i = 0
    while i < len(regs):
        start = i
        spec = _spec(tb, regs[i : i + 1])
        end = len(regs)
        for j in range(i + 1, len(regs)):
            cand = _spec(tb, regs[start : j + 1])
            if cand in (ALL, STRIDED):
                i, spec = j, cand
            else:
                end = j
                break
        rng = regs[start:end]
        if threshold is not None:
            plan.append(rng)
            total += _cost(spec, len(rng))
            if total > threshold:
                return [regs], []
        elif spec in (ALL, STRIDED) and len(rng) >= 12 // 8:
            plan.append(rng)
        else:
            remaining += rng
        i = max(i + 1, end) if end > i + 1 else i + 1
    return plan, remaining


def _single(tb: _TileBuilder, regs: list[tuple[int, int, int, int]]) -> None:
    """The single-stage vertices of one worker's ``regs`` = (c0, w, rows, inner)
    (``createVertex``: ``findVertexPlan`` may make several vertices)."""
    plan = [regs]
    if _spec(tb, regs) in (DEFAULT, SOR) and len(regs) > 1:
        plan, remaining = _multi_vertex_plan(tb, regs, None)
        if remaining:
            whole = _cost(_spec(tb, remaining), len(remaining))
            more, _ = _multi_vertex_plan(tb, remaining, whole)
            plan += more
    for rng in plan:
        _one_vertex(tb, rng)


def _one_vertex(tb: _TileBuilder, regs: list[tuple[int, int, int, int]]) -> None:
    f = _shape(tb, regs)
    outs = np.concatenate([np.arange(c0, c0 + w, dtype=np.int64) for c0, w, _, _ in regs])
    plen = np.concatenate([np.full(w, rows, np.int64) for _, w, rows, _ in regs])
    prefs = np.concatenate([tb.refs(c0, w, 0, rows) for c0, w, rows, _ in regs])
    tb.add(0, "single", outs, plen, prefs, f["widths"], contiguous=f["contiguous"],
           regular=f["regular"], piece_sizes=f["pieces"], adjacent=f["adjacent"])  # fmt: skip
