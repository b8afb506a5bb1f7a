"""Poplibs' reduction plan: on-tile stage, intermediate stages, final stage.

Restates ``reduceFirstDim2D`` (``lib/popops/reduction/Reduction.cpp``),
``ReductionPlan.cpp`` and ``ReductionStages.cpp`` of graphcore/poplibs at
``7eac0f266ced5b064b3284a3cd90d491745b387c`` for a reduction viewed as
``[rows, columns]`` (``mangleTo2D``: one column per output):

* every column on one tile (``getMaxTileSpread == 1``): ``inputToOutputNoExchange``,
  one on-tile stage writing the output (a new output is mapped with its column);
* otherwise, when some tile holds more than one element of a column,
  ``inputToIntermediateNoExchange`` reduces each column's elements on each tile to
  one partial (the accumulate type: FLOAT for a HALF ADD, SQUARE_ADD or MUL); else
  the input is the first set of intermediate partials;
* then, while ``calculateNextStep`` says so (the partials occupy at most 3/4 of the
  tiles or some output has at least ``2·sqrt(tilesPerIPU)`` sources, and there are
  more than 64 partials per output), ``intermediateToIntermediate`` spreads the
  partials over all tiles from a start tile chosen by hashing the shapes
  (``getStartTile``, boost ``hash_combine``), each tile reducing a piece of rows of
  an output interval (``calculateSplit``);
* ``intermediateToOutput`` reduces at the output's tiles; a new output is mapped
  linearly with at least ``4·vectorWidth`` elements per tile (``calcLinearTileMapping``).

Each stage connects its tiles with :func:`.reduce_connect.connect_tile`. Not
modelled: the column reordering of ``findCommonColumnOrder``, the pre-exchange cast
of HALF partials, ``shouldReduceAtDestination`` (an output given to
``reduceWithOutput`` is always reduced where it is mapped) and the remapping of a
one-element-per-tile HALF output.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from poplar_api.popops.layout import _readonly, tile_groups
from poplar_api.popops.reduce_connect import Ctx, connect_tile, grain_for_op, split_regions
from poplar_api.popops.reduce_vertices import Operation, reduce_vertex
from poplar_api.types import FLOAT, HALF, Type

__all__ = ["Partials", "accumulate_type", "stable_order", "start_tile"]

#: ``reductionFactorThresholdToAddMoreStages`` (ReductionPlan.hpp).
THRESHOLD = 64
_MASK = (1 << 64) - 1


def _hash_combine(seed: int, value: int) -> int:
    """boost ``hash_combine`` on a 64-bit ``size_t`` (integers hash to themselves)."""
    value &= _MASK
    return (seed ^ (value + 0x9E3779B9 + ((seed << 6) & _MASK) + (seed >> 2))) & _MASK


_OP_CODES = {
    Operation.ADD: 0,
    Operation.MUL: 1,
    Operation.MIN: 2,
    Operation.MAX: 3,
    Operation.LOGICAL_AND: 4,
    Operation.LOGICAL_OR: 5,
    Operation.SQUARE_ADD: 6,
}


def start_tile(
    in_shape: list[int], out_shape: list[int], op: Operation, update: bool, scaled: bool,
    stage: int, idx: int, tiles: int,
) -> int:  # fmt: skip
    """``getStartTile``: the first tile of intermediate stage ``stage``."""
    seed = 0x9E3779B9
    for v in [*in_shape, *out_shape]:
        seed = _hash_combine(seed, int(v))
    for v in (_OP_CODES[op], int(update), int(scaled), idx, stage):
        seed = _hash_combine(seed, v)
    return seed % tiles


def accumulate_type(t: Type, op: Operation) -> Type:
    """``parseOptions``: FLOAT partials for a HALF ADD, SQUARE_ADD or MUL."""
    if t == HALF and op in (Operation.ADD, Operation.SQUARE_ADD, Operation.MUL):
        return FLOAT
    return t


@dataclass
class Partials:
    """Intermediate partials: element ``i`` is flat position ``pos[i]`` of ``tensor``,
    on tile ``tile[i]``, for output column ``col[i]``."""

    tensor: Any
    col: np.ndarray
    tile: np.ndarray
    pos: np.ndarray
    type: Type


@dataclass
class Stage:
    """One stage's work: groups (tile, column) sorted by tile then region order,
    each with ``glen`` partials at ``src`` positions ``gpos`` (concatenated), written
    to ``dest`` position ``gdest``; regions ``(tile, first group, w, rows, inner)``."""

    g_tile: np.ndarray
    g_len: np.ndarray
    g_dest: np.ndarray
    gpos: np.ndarray
    r_tile: np.ndarray
    r_first: np.ndarray
    r_w: np.ndarray
    r_rows: np.ndarray
    r_inner: np.ndarray


def stable_order(keys: np.ndarray) -> np.ndarray:
    """``np.argsort(keys, kind="stable")``. Keys in ``[0, 2**16)`` (tiles, or tile and
    column of a reduction's elements) are sorted as 16-bit integers, which numpy sorts
    by radix: the same order, several times faster than its timsort of 64-bit keys
    (a 200,000-element input's group order in 2 ms instead of 14)."""
    if keys.size and int(keys.min()) >= 0 and int(keys.max()) < 1 << 16:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    return np.argsort(keys, kind="stable")


def _group_regions(g_tile: np.ndarray, g_col: np.ndarray, g_len: np.ndarray,
                   g_inner: np.ndarray) -> tuple[np.ndarray, ...]:  # fmt: skip
    """Regions: runs of groups on one tile with consecutive columns, equal partial
    counts and inner factors."""
    n = g_tile.size
    new = np.ones(n, bool)
    if n > 1:
        new[1:] = (
            (g_tile[1:] != g_tile[:-1])
            | (g_col[1:] != g_col[:-1] + 1)
            | (g_len[1:] != g_len[:-1])
            | (g_inner[1:] != g_inner[:-1])
        )
    first = np.flatnonzero(new)
    w = np.diff(np.append(first, n))
    return g_tile[first], first, w, g_len[first], g_inner[first]


def run_stage(
    graph: Any, stages: Any, name: str, stage: Stage, ctx: Ctx, src: Any, dest: Any
) -> None:
    """Connect every tile of ``stage`` (``connectReductions``) into one or two
    compute sets of ``stages``; vertices read ``src`` (flat) and write ``dest``."""
    g_start = np.concatenate([[0], np.cumsum(stage.g_len)[:-1]]).astype(np.int64)
    # the regions of each tile, as a key
    t_first = np.r_[0, np.flatnonzero(np.diff(stage.r_tile)) + 1]
    t_end = np.append(t_first[1:], stage.r_tile.size)
    tiles = stage.r_tile[t_first]
    ga = stage.r_first[t_first]
    # the tiles of each distinct list of regions (width, rows, inner factor): one
    # template each
    if stage.r_tile.size:
        regions = np.stack([stage.r_w, stage.r_rows, stage.r_inner], 1).astype(np.int64)
        keys = tile_groups(regions, t_first, t_end - t_first)
    else:
        keys = {(): [0]}
    templates = {key: connect_tile(key, ctx) for key in keys}
    num_cs = max(t.num_cs for t in templates.values())
    temp_sizes = np.zeros(tiles.size, np.int64)
    for key, ks in keys.items():
        temp_sizes[ks] = templates[key].temp_size
    temp = None
    temp_base = np.concatenate([[0], np.cumsum(temp_sizes)[:-1]]).astype(np.int64)
    if temp_sizes.sum():
        temp = graph.addVariable(ctx.part_type, [int(temp_sizes.sum())], f"{name}/partials")
        graph.mapElements(temp, np.repeat(tiles, temp_sizes))
    css = [stages.next(f"{name}/Reduce" if i == 0 else f"{name}/Reduce_Second_Stage")
           for i in range(num_cs)]  # fmt: skip
    # per (compute set, vertex kind): tiles, classes, outputs, partial lengths/positions
    batches: dict[tuple[int, str], list] = {}
    for key, ks in keys.items():
        ks_arr = np.asarray(ks, np.int64)
        t_tiles = tiles[ks_arr]
        gfirst = ga[ks_arr]
        pfirst = g_start[gfirst]
        tbase = temp_base[ks_arr]
        for v in templates[key].vertices:
            if v.kind == "second":
                parts = tbase[:, None] + v.prefs[None, :]
            else:
                parts = stage.gpos[pfirst[:, None] + v.prefs[None, :]]
            if v.kind == "first":
                outs = tbase[:, None] + v.outs[None, :]
            else:
                outs = stage.g_dest[gfirst[:, None] + v.outs[None, :]]
            p_type = ctx.part_type if v.kind == "second" else ctx.in_type
            o_type = ctx.part_type if v.kind == "first" else ctx.out_type
            op = ctx.op
            if v.kind == "second" and op is Operation.SQUARE_ADD:
                op = Operation.ADD
            final = v.kind != "first"
            cls = reduce_vertex(
                op, p_type, o_type, final and ctx.update, final and ctx.scaled, v.spec
            )
            batches.setdefault((v.cs, v.kind), []).append(
                (t_tiles, cls, outs, v.plen, parts, v.cycles)
            )
    for (cs_i, kind), items in sorted(batches.items(), key=lambda kv: kv[0]):
        _add(graph, css[cs_i], kind, items, src, dest, temp, ctx)


def _add(graph: Any, cs: Any, kind: str, items: list, src: Any, dest: Any, temp: Any,
         ctx: Ctx) -> None:  # fmt: skip
    """One ``addVertices`` call for a batch of template instances."""
    from poplar_api.graph import Segments

    tiles, classes, outs, plens, parts, cycles = [], [], [], [], [], []
    for t_tiles, cls, o, plen, p, cyc in items:
        n = t_tiles.size
        tiles.append(t_tiles)
        classes += [cls] * n
        outs.append(o.reshape(-1))
        plens.append(np.tile(plen, n))
        parts.append(p.reshape(-1))
        cycles.append(np.full(n, cyc, np.int64))
    tile_arr = np.concatenate(tiles)
    per_vertex = np.concatenate([np.full(t.size, o.shape[1], np.int64) for t, _, o, *_ in items])
    source = temp if kind == "second" else src
    target = temp if kind == "first" else dest
    conns: dict[str, Any] = {
        "partials": Segments(
            source.elements(np.concatenate(parts)), np.concatenate(plens), per_vertex
        ),
        "out": Segments(target.elements(np.concatenate(outs)), per_vertex),
    }
    if kind != "first" and ctx.scaled:
        uniq, inv = np.unique(tile_arr, return_inverse=True)
        const = graph.addConstant(FLOAT, [uniq.size], ctx.scale, f"{cs.name}/scale")
        graph.mapElements(const, uniq)
        conns["k"] = const.elements(inv)
    graph.addVertices(cs, classes, tile_arr, conns, perfEstimates=np.concatenate(cycles))


def on_tile_stage(
    graph: Any, stages: Any, name: str, src: Any, pos: np.ndarray, tiles: np.ndarray,
    num_tiles: int, ctx: Ctx, dest: Any | None, dest_pos: np.ndarray | None,
) -> Partials | None:  # fmt: skip
    """``inputToOutputNoExchange`` (``dest`` given: column ``c`` written at
    ``dest_pos[c]``) or ``inputToIntermediateNoExchange`` (returns the partials).

    ``pos``/``tiles``: ``[columns, rows]`` input positions and their tiles."""
    s_pos, g_tile, g_col, g_len, inner = input_groups(pos, tiles)
    r_tile, r_first, r_w, r_rows, r_inner = _group_regions(g_tile, g_col, g_len, inner)
    count = g_len.size
    if dest is None:
        part_t = ctx.out_type
        out = graph.addVariable(part_t, [count], f"{name}/partials")
        graph.mapElements(out, g_tile)
        g_dest = np.arange(count, dtype=np.int64)
    else:
        out = dest
        g_dest = dest_pos[g_col]
    stage = Stage(g_tile, g_len, g_dest, s_pos, r_tile, r_first, r_w, r_rows, r_inner)
    run_stage(graph, stages, name, stage, ctx, src, out)
    if dest is not None:
        return None
    return Partials(out, g_col, g_tile, np.arange(count, dtype=np.int64), ctx.out_type)


def input_groups(pos: np.ndarray, tiles: np.ndarray) -> tuple[np.ndarray, ...]:
    """The groups (tile, column) of an on-tile stage's inputs ``pos``/``tiles``
    (``[columns, rows]``; ``pos`` a permutation of the input's flat positions):
    ``(positions sorted by tile and column, each in memory order; each group's tile,
    column, length and inner factor)``, a group's inner factor being its length over
    its runs of consecutive positions when every run has that length, else 1."""
    n_out, n_red = pos.shape
    key_m = np.empty(pos.size, np.int64)  # each element's key at its memory position
    _memory_keys(_readonly(pos.reshape(n_out, n_red)), _readonly(tiles.reshape(n_out, n_red)),
                 key_m)  # fmt: skip
    span = (int(tiles.max()) + 1) * n_out if tiles.size else 0  # keys are below it
    if span <= 2 * pos.size + 4096:  # (stable: each group's elements in memory order)
        s_pos = np.empty(pos.size, np.int64)
        _counting_order(key_m, np.zeros(span + 1, np.int64), s_pos)
    else:
        s_pos = stable_order(key_m)
    room = np.empty((2, s_pos.size), np.int64)
    count = _groups(key_m, _readonly(s_pos), room[0], room[1])
    first, inner = room[0, :count].copy(), room[1, :count].copy()
    g_tile, g_col = np.divmod(key_m[s_pos[first]], n_out)
    return s_pos, g_tile, g_col, np.diff(np.append(first, s_pos.size)), inner


@numba.njit(cache=True, nogil=True)
def _counting_order(keys, count, out):  # pragma: no cover - compiled
    """``out`` = ``np.argsort(keys, kind="stable")`` for keys ``0 <= key <
    count.size - 1`` (``count`` zeros): a counting sort, some half the instructions of
    numpy's radix sort of 16-bit keys and for keys of any span it has room for."""
    for k in range(keys.size):  # (indices >= 0 as unsigned: no test for a negative one)
        count[np.uint64(keys[k] + 1)] += 1
    for j in range(1, count.size):
        count[j] += count[j - 1]
    for k in range(keys.size):
        c = np.uint64(keys[k])
        out[np.uint64(count[c])] = k
        count[c] += 1


@numba.njit(cache=True, nogil=True)
def _memory_keys(pos, tiles, key_m):  # pragma: no cover - compiled
    """``key_m[pos[c, r]] = tiles[c, r] * columns + c``: each input element's tile and
    column as one key, at its memory position."""
    n_out = pos.shape[0]
    for c in range(n_out):
        for r in range(pos.shape[1]):
            key_m[pos[c, r]] = tiles[c, r] * n_out + c


@numba.njit(cache=True, nogil=True)
def _groups(key_m, s_pos, first, inner):  # pragma: no cover - compiled
    """The groups of equal keys along ``s_pos`` (the positions sorted by key): writes
    each one's first index and inner factor (its length over its runs of consecutive
    positions when every run has that length, else 1); returns how many there are.
    One pass: each run's length is compared with the group's first run's as the run
    ends (no second walk over the group to check the factor its run count gives)."""
    n = s_pos.size
    g = 0
    k = 0
    while k < n:
        prev = s_pos[k]
        key = key_m[np.uint64(prev)]  # (positions >= 0 index as unsigned)
        a = k
        run_start = k
        f = -1  # the length of every run so far; 0 once two differ
        k += 1
        while k < n:
            p = s_pos[k]
            if key_m[np.uint64(p)] != key:
                break
            if p != prev + 1:  # a run ends before k
                if f < 0:
                    f = k - run_start
                elif f != k - run_start:
                    f = 0
                run_start = k
            prev = p
            k += 1
        if f < 0:
            f = k - run_start
        elif f != k - run_start:
            f = 0
        first[g] = a
        inner[g] = f if f > 0 else 1
        g += 1
    return g


def _column_sets(ip: Partials, n_out: int) -> tuple[np.ndarray, ...]:
    """Sort partials by (column, tile); per column: first index, depth, tile-set id."""
    order = np.lexsort((ip.tile, ip.col))
    col, tile = ip.col[order], ip.tile[order]
    depth = np.bincount(col, minlength=n_out)
    cstart = np.concatenate([[0], np.cumsum(depth)[:-1]]).astype(np.int64)
    # a 64-bit fingerprint of each column's tile set
    t1 = tile.astype(np.uint64) + np.uint64(1)
    mix = (t1 * np.uint64(0x9E3779B97F4A7C15)) ^ (t1 << np.uint64(29))
    h = np.zeros(n_out, np.uint64)
    np.add.at(h, col, mix)
    h ^= depth.astype(np.uint64) << np.uint64(48)
    return order, cstart, depth, h


def next_step(ip: Partials, n_out: int, tiles_per_ipu: int) -> str:
    """``calculateNextStep``: ``intermediate`` or ``output``."""
    depth = np.bincount(ip.col, minlength=n_out)
    used = np.unique(ip.tile).size
    if depth.max() < 2 * math.sqrt(tiles_per_ipu) and used > tiles_per_ipu * 3 // 4:
        return "output"
    if ip.col.size > n_out * THRESHOLD:
        return "intermediate"
    return "output"


def _calculate_split(offs: np.ndarray, depth: np.ndarray, width: np.ndarray, grain: int,
                     n_out: int, pieces: int) -> list[tuple[int, int, int]]:  # fmt: skip
    """``calculateSplit``: (begin, end, row splits N) of every piece of output."""
    total = int((depth * width).sum())
    avg = int(math.sqrt(total // n_out))
    factor = (int(width.min()) // grain) // max(avg, 1)
    min_cols = max(grain, factor * grain)
    parts = split_regions(list(zip(offs.tolist(), (offs + width).tolist(), strict=True)),
                          grain, pieces, min_cols)  # fmt: skip
    ideal = max(1, total // pieces)
    out = []
    for part in parts:
        for b, e in part:
            k = int(np.searchsorted(offs, b, side="right")) - 1
            d, cols = int(depth[k]), e - b
            n = max(1, d * cols // ideal)
            if d * cols // n < THRESHOLD:
                n = max(1, d * cols // THRESHOLD)
            if d // n < 2:
                n = max(1, d // 2)
            out.append((b, e, n))
    return out


def intermediate_stage(
    graph: Any, stages: Any, name: str, ip: Partials, n_out: int, ctx: Ctx, first_tile: int,
) -> Partials:  # fmt: skip
    """``intermediateToIntermediate``: spread the partials' reduction over all tiles."""
    num_tiles = graph.getTarget().getNumTiles()
    order, cstart, depth, h = _column_sets(ip, n_out)
    cols = np.flatnonzero(depth)
    # output intervals: runs of consecutive columns with one tile set
    new = np.r_[True, (np.diff(cols) != 1) | (h[cols[1:]] != h[cols[:-1]])]
    offs = cols[new]
    width = np.diff(np.append(np.flatnonzero(new), cols.size))
    d = depth[offs]
    grain = grain_for_op(ctx.in_type, ctx.op)
    # mergeOutputRegionsThatSplitGrainSize
    if offs.size > 1:
        subword = (offs[1:] * ip.type.size) % 4 != 0
        merge = (offs[1:] % grain != 0) & ~subword & (d[1:] == d[:-1])
        keep = np.r_[True, ~merge]
        ends = np.append(offs[1:], offs[-1] + width[-1])
        idx = np.flatnonzero(keep)
        width = np.append(offs[idx[1:]], ends[-1]) - offs[idx]
        offs, d = offs[idx], d[idx]
    splits = _calculate_split(offs, d, width, grain, n_out, num_tiles)
    # round-robin pieces of rows over the tiles from the start tile
    red_tile, red_b, red_e, red_r0, red_r1 = [], [], [], [], []
    tile = first_tile
    for b, e, n in splits:
        k = int(np.searchsorted(offs, b, side="right")) - 1
        dd = int(d[k])
        rf = max(2, -(-dd // n))
        for i in range(-(-dd // rf)):
            red_tile.append(tile)
            red_b.append(b)
            red_e.append(e)
            red_r0.append(i * rf)
            red_r1.append(min((i + 1) * rf, dd))
            tile = (tile + 1) % num_tiles
    rt = np.asarray(red_tile, np.int64)
    order_r = stable_order(rt)
    rt = rt[order_r]
    rb, re_ = np.asarray(red_b)[order_r], np.asarray(red_e)[order_r]
    r0, r1 = np.asarray(red_r0)[order_r], np.asarray(red_r1)[order_r]
    w = re_ - rb
    rows = r1 - r0
    g_col = np.concatenate([np.arange(b, e) for b, e in zip(rb.tolist(), re_.tolist(),
                                                             strict=True)])  # fmt: skip
    g_tile = np.repeat(rt, w)
    g_r0, g_len = np.repeat(r0, w), np.repeat(rows, w)
    starts = cstart[g_col] + g_r0
    gpos = ip.pos[order][_ranges(starts, g_len)]
    out = graph.addVariable(ctx.out_type, [g_col.size], f"{name}/partials")
    graph.mapElements(out, g_tile)
    r_first = np.concatenate([[0], np.cumsum(w)[:-1]]).astype(np.int64)
    stage = Stage(g_tile, g_len, np.arange(g_col.size, dtype=np.int64), gpos, rt, r_first,
                  w, rows, np.ones_like(w))  # fmt: skip
    run_stage(graph, stages, name, stage, ctx, ip.tensor, out)
    return Partials(out, g_col, g_tile, np.arange(g_col.size, dtype=np.int64), ctx.out_type)


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + n)`` for every (s, n)."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    offs = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    return np.repeat(starts - offs, lengths) + np.arange(total)


def output_stage(
    graph: Any, stages: Any, name: str, ip: Partials, n_out: int, ctx: Ctx, dest: Any,
    out_tiles: np.ndarray,
) -> None:  # fmt: skip
    """``intermediateToOutput``: reduce every output's partials on its tile."""
    order, cstart, depth, h = _column_sets(ip, n_out)
    cols = np.arange(n_out, dtype=np.int64)
    o = np.lexsort((cols, out_tiles))
    t_sorted, c_sorted = out_tiles[o], cols[o]
    new = np.r_[True, (t_sorted[1:] != t_sorted[:-1]) | (np.diff(c_sorted) != 1)
                | (h[c_sorted[1:]] != h[c_sorted[:-1]])]  # fmt: skip
    g_len = depth[c_sorted]
    gpos = ip.pos[order][_ranges(cstart[c_sorted], g_len)]
    first = np.flatnonzero(new)
    w = np.diff(np.append(first, n_out))
    stage = Stage(t_sorted, g_len, c_sorted, gpos, t_sorted[first], first, w,
                  g_len[first], np.ones_like(w))  # fmt: skip
    run_stage(graph, stages, name, stage, ctx, ip.tensor, dest)
