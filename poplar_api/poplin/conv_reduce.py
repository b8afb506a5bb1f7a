"""The reduction of a convolution's input-channel-split partials: poplin ``ReduceAdd``.

When a plan splits the input channels over ``pci`` tiles, each of them holds one partial
sum of every output of its block. Poplibs sums them in one compute set
(``convolutionReduction`` and ``reduce`` in ``lib/poplin/ConvReduce.cpp`` at
graphcore/poplibs 7eac0f26): the outputs of a block are cut into ``pci`` chunks, chunk
``p`` reduced on the tile of ci-part ``p``, which already holds that part's partials.
Per vertex, Poplibs picks the ``ReduceAdd`` variant (:func:`~poplar_api.poplin.
estimators.single_input_reduce`): the single-input vertex reads the tile's own partial
as ``initialPartial`` and the ``pci - 1`` exchanged ones as one region (with
``enableFastReduce`` from interleaved memory, ``constrainPartials``); otherwise every
partial is an input of the several-input vertex. Poplibs makes one vertex per tile over
all the tile's regions; here a tile has one vertex per output block it reduces, and the
choice is made per vertex. Blocks of one shape are planned together (one index pattern
plus a base per block, :mod:`~poplar_api.poplin.conv_blocks`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from poplar_api.graph import Graph, Segments
from poplar_api.graph_connections import RunSegments
from poplar_api.poplin.conv_blocks import Assembler, block_table, ids_view, pattern
from poplar_api.poplin.conv_ids import SeparableIds, first_rows, piece_positions, separable_ids
from poplar_api.poplin.conv_kernel_split import partial_part_tiles
from poplar_api.poplin.conv_layout import GroupedView
from poplar_api.poplin.conv_planner import ConvPlan
from poplar_api.poplin.estimators import single_input_reduce
from poplar_api.poplin.vertices import reduce_add_vertex
from poplar_api.program import Execute
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor


def memory_elements(target: Any) -> tuple[int, int]:
    """``(memory element bytes, tile bytes)`` of ``target``: what Poplibs reads from
    ``Target::getMemoryElementOffsets`` for the single-input size rule."""
    return int(target.config.memory.bank_bytes), int(target.getBytesPerTile())


def reduce_partials(
    graph: Graph,
    partials: Tensor | GroupedView,
    out_var: Tensor,
    plan: ConvPlan,
    rng: list,
    prog: ProgramSequence,
    name: str,
) -> None:
    """Sum the parts of ``partials`` ``[P, G, B, *O, Co]`` into ``out_var`` ``[G, B, *O,
    Co]`` (blocks ``rng`` of ``plan``) in one compute set, mapping each output element
    where it is reduced. The parts are the input-channel parts, or with a kernel split
    (:mod:`.conv_kernel_split`) the input-channel times the kernel parts, part ``ic K +
    k`` (Poplibs' ``getPartialIndex``): chunk ``p`` of a block is reduced on the tile of
    its part ``p``.

    The vertices' fields are computed from the ids' tables where the ids are a sum of
    one term per dimension (:mod:`~poplar_api.poplin.conv_ids`; a
    :class:`~poplar_api.poplin.conv_layout.GroupedView` of partials gives its tables,
    and no array of every partial's id is made), else gathered from the ids."""
    cs = graph.addComputeSet(f"{name}/Reduce")
    carrier = partials.var if isinstance(partials, GroupedView) else partials
    p_type, o_type = carrier.elementType(), out_var.elementType()
    bank, tile_bytes = memory_elements(graph.getTarget())
    pci = plan.parts[-1] * plan.kernel_split  # (the partials' parts)
    shape = tuple(out_var.shape())
    if tuple(partials.shape()) != (pci, *shape):
        raise ValueError(f"conv reduce: partials {partials.shape()} do not match {shape}")
    total = math.prod(shape)
    # blocks of [G, B, *O, Co] in row-major order; per block the tiles of its parts
    _, lo, hi = block_table(rng[:-1])
    block_tiles = partial_part_tiles(plan)
    ext = np.maximum(hi - lo, 0)
    size = ext.prod(1)
    chunk = -(-size // pci)
    # vertices: block after block, chunk after chunk (those with elements)
    nonempty = np.where(size > 0, -(-size // np.maximum(chunk, 1)), 0)
    first = np.cumsum(nonempty) - nonempty
    nv = int(nonempty.sum())
    out_st = np.array(np.empty(shape, np.int8).strides, np.int64)  # element strides
    tiles_all = np.empty(total, np.int64)
    # per shape and chunk: vertex ids, own part, block bases, chunk pattern, the blocks'
    # first positions and the chunk's positions in a block
    groups = []
    v_tiles = np.empty(nv, np.int64)
    cls_first, cls_of = first_rows(ext)
    for c, f in enumerate(cls_first.tolist()):
        n = int(size[f])
        if n == 0:
            continue
        members = np.flatnonzero(cls_of == c)
        piece = [([0] * len(shape), ext[f].tolist())]
        rel, _ = pattern(out_st, piece)
        rel_pos = piece_positions(piece)
        base = lo[members] @ out_st
        step = int(chunk[f])
        for p in range(int(nonempty[f])):
            cut = slice(p * step, min((p + 1) * step, n))
            part = rel[cut]
            tile = block_tiles[members, p]
            tiles_all[(base[:, None] + part).reshape(-1)] = np.repeat(tile, part.size)
            groups.append((first[members] + p, p, base, part, lo[members], rel_pos[cut]))
            v_tiles[first[members] + p] = tile
    if nv:
        sizes = np.empty(nv, np.int64)
        for vid, _, _, part, _, _ in groups:
            sizes[vid] = part.size
        single = np.asarray(
            single_input_reduce(sizes, pci, p_type.size, bank, tile_bytes, plan.fast_reduce)
        ).reshape(-1)
        rank = np.empty(nv, np.int64)  # place of each vertex among those of its variant
        for use_single in (False, True):
            sel = np.flatnonzero(single == use_single)
            rank[sel] = np.arange(sel.size)
        # the vertices' fields gathered straight from the element ids (one pattern plus
        # a base per block of a group; no positions made first and looked up again)
        out_ids = np.ascontiguousarray(out_var.index).reshape(-1)
        part_src, part_sep, out_sep = _sources(partials, out_ids, shape, len(groups))
        rows_at = np.arange(pci, dtype=np.int64)
        for use_single in (False, True):
            sel = np.flatnonzero(single == use_single)
            if not sel.size:
                continue
            cls = reduce_add_vertex(
                p_type, o_type, single_input=use_single,
                constrain_partials=use_single and plan.fast_reduce,
            )  # fmt: skip
            graph.addCodelets(cls)
            outs, own, parts = Assembler(sel.size), Assembler(sel.size), Assembler(sel.size)
            for vid, p, base, rel, block_lo, pos in groups:
                if bool(single[vid[0]]) != use_single:  # a group's vertices share a size
                    continue
                at, s = rank[vid], rel.size
                one = np.array([s], np.int64)
                _put(outs, at, out_ids, base, rel, one, out_sep, block_lo, pos)
                rows = rows_at[rows_at != p] if use_single else rows_at
                # positions in the partials: the part's row, then the block's
                part_lo = np.concatenate([np.zeros((at.size, 1), np.int64), block_lo], 1)
                own_pos = np.concatenate([np.zeros((s, 1), np.int64), pos], 1)
                if use_single:
                    own_lo = part_lo + np.eye(1, part_lo.shape[1], dtype=np.int64) * p
                    _put(own, at, part_src, base + p * total, rel, one, part_sep, own_lo, own_pos)
                    many = np.array([s * (pci - 1)], np.int64)
                else:
                    many = np.full(pci, s, np.int64)
                if part_sep is None:
                    stacked = (rows[:, None] * total + rel[None, :]).reshape(-1)
                    parts.gather(at, _array(part_src), base, stacked, many)
                else:
                    parts.gather_rows(at, part_src, base, rel, many, part_sep, part_lo, own_pos,
                                      rows, total)  # fmt: skip
            connections = {"out": _vector(outs, out_var, out_ids)}
            if use_single:
                connections["initialPartial"] = _vector(own, carrier, part_src)
                connections["partials"] = _vector(parts, carrier, part_src)
            else:
                pf = parts.run_field(_ids_of(part_src)) or parts.field()
                connections["partials"] = pf.segments(carrier, 0, sel.size)
            graph.addVertices(cs, cls, v_tiles[sel], connections)
    graph.mapElements(out_var, tiles_all.reshape(shape))
    prog.add(Execute(cs))


#: Elements of the partials per group of reduction vertices (blocks of one shape, one
#: chunk) from which their fields are computed from the ids' tables: finding a group's
#: blocks in the tables costs about 0.1 ms (:meth:`SeparableIds.blocks`), gathering
#: from an array of every id some nanoseconds an element, and making that array some
#: more (a small CNN's reductions of a few thousand partials took twice as long from
#: the tables, a 64-channel convolution's 4 million partials half as long).
TABLES_MIN_ELEMENTS = 8192


def _sources(
    partials: Tensor | GroupedView, out_ids: np.ndarray, shape: tuple, groups: int
) -> tuple[np.ndarray | Callable[[], np.ndarray], SeparableIds | None, SeparableIds | None]:
    """What the reduction's fields are gathered from: ``(partials' ids, their tables,
    the output's tables)``; the tables (None: gathered from the ids) where the partials
    have at least :data:`TABLES_MIN_ELEMENTS` a group and their ids are a sum of one
    term per dimension. The partials' ids are then a function that makes them (only a
    block the tables cannot give reads them), else an array."""
    size = math.prod(partials.shape())
    if size < TABLES_MIN_ELEMENTS * groups:
        if isinstance(partials, GroupedView):
            return partials.ids.flat(), None, None
        return np.ascontiguousarray(partials.index).reshape(-1), None, None
    out_sep = separable_ids(out_ids.reshape(shape))
    if isinstance(partials, GroupedView):
        return partials.ids.flat, partials.ids, out_sep
    ids = np.ascontiguousarray(partials.index).reshape(-1)
    return ids, separable_ids(ids.reshape(partials.shape())), out_sep


def _put(
    asm: Assembler, at: np.ndarray, source: np.ndarray | Callable[[], np.ndarray],
    base: np.ndarray, rel: np.ndarray, sizes: np.ndarray, sep: SeparableIds | None,
    block_lo: np.ndarray, positions: np.ndarray,
) -> None:  # fmt: skip
    """``asm.gather`` of ``source[base[k] + rel]`` for vertices ``at``, the ids computed
    from ``sep`` where given (blocks beginning at ``block_lo``, reading ``positions``
    from there: the multi-dimensional forms of ``base`` and ``rel``)."""
    if sep is None:
        asm.gather(at, _array(source), base, rel, sizes)
    else:
        asm.gather_separable(at, source, base, rel, sizes, sep, block_lo, positions)


def _array(source: np.ndarray | Callable[[], np.ndarray]) -> np.ndarray:
    """``source`` as an array (made when a function)."""
    return source() if callable(source) else source


def _ids_of(source: np.ndarray | Callable[[], np.ndarray]) -> tuple[np.ndarray, ...]:
    """``source`` as :meth:`Assembler.run_field`'s ``ids_of`` (a function making the
    ids has no array to name: its rows' ids are computed)."""
    return () if callable(source) else (source,)


def _vector(
    asm: Assembler, t: Tensor, ids: np.ndarray | Callable[[], np.ndarray]
) -> Segments | RunSegments:
    """The Vector field of ``asm``'s vertices (one piece each), gathered from ``ids``
    (element ids of ``t``, or computed from their tables): as the runs its rows were
    found in, where they were (no array of every id made and converted; the graph keeps
    a piece within one run as that run, any other as its ids), else as the ids."""
    field = asm.run_field(_ids_of(ids))
    if field is not None:
        return RunSegments(t, field.runs, field.sizes)
    field = asm.field()
    return Segments(ids_view(t, field.flat), field.sizes)


__all__ = ["memory_elements", "reduce_partials"]
