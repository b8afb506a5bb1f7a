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
from typing import Any

import numpy as np

from poplar_api.graph import Graph, Segments
from poplar_api.graph_connections import RunSegments
from poplar_api.poplin.conv_blocks import Assembler, block_table, ids_view, pattern
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
    partials: Tensor,
    out_var: Tensor,
    plan: ConvPlan,
    rng: list,
    prog: ProgramSequence,
    name: str,
) -> None:
    """Sum the input-channel parts of ``partials`` ``[pci, G, B, *O, Co]`` into
    ``out_var`` ``[G, B, *O, Co]`` (blocks ``rng`` of ``plan``) in one compute set,
    mapping each output element where it is reduced."""
    cs = graph.addComputeSet(f"{name}/Reduce")
    p_type, o_type = partials.elementType(), out_var.elementType()
    bank, tile_bytes = memory_elements(graph.getTarget())
    pci = plan.parts[-1]
    shape = tuple(out_var.shape())
    if tuple(partials.shape()) != (pci, *shape):
        raise ValueError(f"conv reduce: partials {partials.shape()} do not match {shape}")
    total = math.prod(shape)
    # blocks of [G, B, *O, Co] in row-major order; per block the tiles of its parts
    _, lo, hi = block_table(rng[:-1])
    block_tiles = plan.tiles.reshape(-1, pci).astype(np.int64)
    ext = np.maximum(hi - lo, 0)
    size = ext.prod(1)
    chunk = -(-size // pci)
    # vertices: block after block, chunk after chunk (those with elements)
    nonempty = np.where(size > 0, -(-size // np.maximum(chunk, 1)), 0)
    first = np.cumsum(nonempty) - nonempty
    nv = int(nonempty.sum())
    out_st = np.array(np.empty(shape, np.int8).strides, np.int64)  # element strides
    tiles_all = np.empty(total, np.int64)
    groups = []  # (vertex ids, own part, block bases, chunk pattern) per shape and chunk
    v_tiles = np.empty(nv, np.int64)
    _, cls_first, cls_of = np.unique(ext, axis=0, return_index=True, return_inverse=True)
    cls_of = cls_of.reshape(-1)
    for c, f in enumerate(cls_first.tolist()):
        n = int(size[f])
        if n == 0:
            continue
        members = np.flatnonzero(cls_of == c)
        rel, _ = pattern(out_st, [([0] * len(shape), ext[f].tolist())])
        base = lo[members] @ out_st
        step = int(chunk[f])
        for p in range(int(nonempty[f])):
            part = rel[p * step : min((p + 1) * step, n)]
            tile = block_tiles[members, p]
            tiles_all[(base[:, None] + part).reshape(-1)] = np.repeat(tile, part.size)
            groups.append((first[members] + p, p, base, part))
            v_tiles[first[members] + p] = tile
    if nv:
        sizes = np.empty(nv, np.int64)
        for vid, _, _, part in groups:
            sizes[vid] = part.size
        single = np.asarray(
            single_input_reduce(sizes, pci, p_type.size, bank, tile_bytes, plan.fast_reduce)
        ).reshape(-1)
        rank = np.empty(nv, np.int64)  # place of each vertex among those of its variant
        for use_single in (False, True):
            sel = np.flatnonzero(single == use_single)
            rank[sel] = np.arange(sel.size)
        part_rows = np.arange(pci, dtype=np.int64) * total
        # the vertices' fields gathered straight from the element ids (one pattern plus
        # a base per block of a group; no positions made first and looked up again)
        out_ids = np.ascontiguousarray(out_var.index).reshape(-1)
        part_ids = np.ascontiguousarray(partials.index).reshape(-1)
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
            for vid, p, base, rel in groups:
                if bool(single[vid[0]]) != use_single:  # a group's vertices share a size
                    continue
                at, s = rank[vid], rel.size
                outs.gather(at, out_ids, base, rel, np.array([s], np.int64))
                rows = part_rows[part_rows != p * total] if use_single else part_rows
                stacked = (rows[:, None] + rel[None, :]).reshape(-1)
                if use_single:
                    own.gather(at, part_ids, base + p * total, rel, np.array([s], np.int64))
                    parts.gather(at, part_ids, base, stacked, np.array([s * (pci - 1)], np.int64))
                else:
                    parts.gather(at, part_ids, base, stacked, np.full(pci, s, np.int64))
            connections = {"out": _vector(outs, out_var, out_ids)}
            if use_single:
                connections["initialPartial"] = _vector(own, partials, part_ids)
                connections["partials"] = _vector(parts, partials, part_ids)
            else:
                pf = parts.run_field((part_ids,)) or parts.field()
                connections["partials"] = pf.segments(partials, 0, sel.size)
            graph.addVertices(cs, cls, v_tiles[sel], connections)
    graph.mapElements(out_var, tiles_all.reshape(shape))
    prog.add(Execute(cs))


def _vector(asm: Assembler, t: Tensor, ids: np.ndarray) -> Segments | RunSegments:
    """The Vector field of ``asm``'s vertices (one piece each), gathered from ``ids``
    (element ids of ``t``): as the runs its rows were found in, where they were (no
    array of every id made and converted; the graph keeps a piece within one run as
    that run, any other as its ids), else as the ids."""
    field = asm.run_field((ids,))
    if field is not None:
        return RunSegments(t, field.runs, field.sizes)
    field = asm.field()
    return Segments(ids_view(t, field.flat), field.sizes)


__all__ = ["memory_elements", "reduce_partials"]
