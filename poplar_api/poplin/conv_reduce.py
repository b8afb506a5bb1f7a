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
choice is made per vertex.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from poplar_api.graph import Graph, Segments
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
    nd = len(rng) - 4
    pci = plan.parts[-1]
    out_pos = np.arange(out_var.numElements(), dtype=np.int64).reshape(out_var.shape())
    part_pos = np.arange(partials.numElements(), dtype=np.int64).reshape(partials.shape())
    tiles_all = np.empty(out_pos.shape, np.int64)
    v_tiles: list[int] = []
    v_parts: list[np.ndarray] = []  # [pci, size] positions in the partials, per vertex
    v_outs: list[np.ndarray] = []
    v_own: list[int] = []  # the row of the partials already on the vertex's tile
    for block in itertools.product(*[list(enumerate(r)) for r in rng[:-1]]):
        ix = tuple(i for i, _ in block)
        (g0, g1), (b0, b1) = block[0][1], block[1][1]
        osl = tuple(slice(lo, hi) for _, (lo, hi) in block[2 : 2 + nd])
        co0, co1 = block[-1][1]
        box = (slice(g0, g1), slice(b0, b1), *osl, slice(co0, co1))
        flat_out = out_pos[box].reshape(-1)
        flat_parts = part_pos[(slice(None), *box)].reshape(pci, -1)
        tiles = plan.tiles[ix].reshape(-1)
        n = flat_out.size
        c = -(-n // pci)
        flat_tiles = np.empty(n, np.int64)
        for p in range(pci):
            lo, hi = min(p * c, n), min((p + 1) * c, n)
            flat_tiles[lo:hi] = tiles[p]
            if hi <= lo:
                continue
            v_parts.append(flat_parts[:, lo:hi])
            v_outs.append(flat_out[lo:hi])
            v_tiles.append(int(tiles[p]))
            v_own.append(p)
        tiles_all[box] = flat_tiles.reshape(tiles_all[box].shape)
    if v_tiles:
        sizes = np.fromiter((x.shape[1] for x in v_parts), np.int64, len(v_parts))
        single = np.asarray(
            single_input_reduce(sizes, pci, p_type.size, bank, tile_bytes, plan.fast_reduce)
        ).reshape(-1)
        v_tile_arr = np.asarray(v_tiles, np.int64)
        for use_single in (False, True):
            sel = np.flatnonzero(single == use_single)
            if not sel.size:
                continue
            cls = reduce_add_vertex(
                p_type, o_type, single_input=use_single,
                constrain_partials=use_single and plan.fast_reduce,
            )  # fmt: skip
            graph.addCodelets(cls)
            outs = np.concatenate([v_outs[i] for i in sel])
            connections: dict[str, Segments] = {"out": Segments(out_var.elements(outs), sizes[sel])}
            if use_single:
                own = np.concatenate([v_parts[i][v_own[i]] for i in sel])
                others = np.concatenate(
                    [np.delete(v_parts[i], v_own[i], axis=0).reshape(-1) for i in sel]
                )
                connections["initialPartial"] = Segments(partials.elements(own), sizes[sel])
                connections["partials"] = Segments(
                    partials.elements(others), sizes[sel] * (pci - 1)
                )
            else:
                parts = np.concatenate([v_parts[i].reshape(-1) for i in sel])
                connections["partials"] = Segments(
                    partials.elements(parts), np.repeat(sizes[sel], pci),
                    np.full(sel.size, pci, np.int64),
                )  # fmt: skip
            graph.addVertices(cs, cls, v_tile_arr[sel], connections)
    graph.mapElements(out_var, tiles_all)
    prog.add(Execute(cs))


__all__ = ["memory_elements", "reduce_partials"]
