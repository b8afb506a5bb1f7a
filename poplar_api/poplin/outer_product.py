"""The ``poplin::OuterProduct`` vertex and the convolution pass that runs on it.

Poplibs (graphcore/poplibs at ``7eac0f26``) has a fifth convolution method besides the
AMP, SLIC and the horizontal and vertical MACs: the outer product
(``Plan::OuterProduct``). It applies to a convolution with one input channel and a
1-wide kernel, as the weight update of a fully-connected layer of batch 1 is once its
operands are swapped (``getFullyConnectedWUMethod`` in ``lib/poplin/ConvModel.cpp``
picks it for the joint plan when the weight update has one input channel and the
forward pass one output channel per group). Each output is one product, so there is
nothing to accumulate and the output is written in the input type.

* **The vertex** (``lib/poplin/codelets/OuterProduct.cpp``): ``in`` is ``width``
  field positions, ``weights`` ``numChanGroups * chansPerGroup`` channels and ``out``
  one vector per channel group of ``width * chansPerGroup`` elements, channels
  innermost: ``out[g][c + x * chansPerGroup] = in[x] * weights[c + g *
  chansPerGroup]``, one rounding per product in the vertex's type.
* **Its estimate** (``getOuterProductCycleEstimate``, ``lib/poplin/PerformanceEstimation.hpp``):
  :func:`outer_product_cycles`, a fast unrolled path for groups of at least 6 (FLOAT)
  or 12 (HALF) channels that the repeat counter and load stride allow, else a slow one.
* **The pass** (``createOuterProductVertex`` and its caller in
  ``lib/poplin/ConvVertices.cpp``): per tile block and conv group, the block's output
  field split between the worker contexts (``splitRegionsBetweenWorkers`` with grain 1),
  one vertex per worker piece; the output is laid out ``[G][Co / cpg][field][cpg]``
  (the partials' shape of ``createPartialsTensor``) with output channels padded to the
  group size. The planner's cost of a tile (``addPartialCalcCycleEstimate``'s outer
  product case) is the estimate of one worker's share times the worker contexts.

ipusim runs the pass for a matMul whose plan's method is ``"OUTER_PRODUCT"``
(:mod:`.matmul`; a pass of a fully-connected layer's joint plan, :mod:`.fc_joint`).
Differences kept: only input and output of one type (Poplibs casts HALF operands to a
FLOAT vertex when the output is FLOAT; the joint plans that pick the outer product have
one type).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import numpy as np

from poplar_api.codelet import FieldBatch, Input, Output, Vector, VectorList, Vertex
from poplar_api.graph import Graph, Segments
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import OUTER_PRODUCT, ConvPlan
from poplar_api.poplin.estimators import outer_product_cycles
from poplar_api.popops.layout import _spans
from poplar_api.program import Execute
from poplar_api.program import Sequence as ProgramSequence
from poplar_api.tensor import Tensor, concat
from poplar_api.types import FLOAT, HALF, UNSIGNED_INT, Type

__all__ = ["OUTER_PRODUCT", "outer_product_conv", "outer_product_cycles", "outer_product_vertex"]


class _OuterProduct(Vertex):
    """``out[g][c + x cpg] = in[x] * weights[c + g cpg]`` (one rounding per product)."""

    #: Whether the vertex is ``OuterProduct<float>`` (else ``<half>``).
    is_float: bool = True

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        a, w, out = batches["in"], batches["weights"], batches["out"]
        cpg_b = batches["chansPerGroup"]
        cpg = cpg_b.data[cpg_b.offsets[:-1]].astype(np.int64)
        width = np.diff(a.offsets)
        groups = np.diff(out.offsets)
        inner = np.diff(out.inner_offsets)
        owner = np.repeat(np.arange(num_vertices), groups)
        ok = (cpg >= 1) & (np.diff(w.offsets) >= groups * cpg)
        bad = np.flatnonzero(inner != width[owner] * cpg[owner])
        ok[owner[bad]] = False
        sel = np.flatnonzero(ok[owner])  # inner vectors of the vertices that run
        sizes = inner[sel]
        pos = _spans(out.inner_offsets[sel], sizes)
        v = np.repeat(owner[sel], sizes)
        e = pos - np.repeat(out.inner_offsets[sel], sizes)
        g = np.repeat(sel - out.offsets[owner[sel]], sizes)
        x, c = e // cpg[v], e % cpg[v]
        # HALF operands are exact in float32, so their float32 product rounds once
        # (to half) when stored, as the vertex's half multiply does
        prod = a.data[a.offsets[v] + x] * w.data[w.offsets[v] + c + g * cpg[v]]
        out.data[pos] = prod
        return ok

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        width = int(sizes["in"])
        out = [int(n) for n in sizes["out"]]
        if not out or width == 0:
            return outer_product_cycles(cls.is_float, width, 0, 1)
        cpg = out[0] // width
        return outer_product_cycles(cls.is_float, width, len(out) * cpg, cpg)


@cache
def outer_product_vertex(t: Type) -> type:
    """The ``poplin::OuterProduct<t>`` vertex class (``t`` FLOAT or HALF)."""
    if t not in (FLOAT, HALF):
        raise ValueError(f"outer_product_vertex: type {t.name}; Poplibs has float and half")
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": _OuterProduct.__doc__,
        "typeName": f"poplin::OuterProduct<{t.name}>",
        "is_float": t == FLOAT,
        "in": Input(Vector(t)),
        "weights": Input(Vector(t)),
        "out": Output(VectorList(t)),
        "chansPerGroup": Input(UNSIGNED_INT),
    }
    return type(f"OuterProduct_{t.name}", (_OuterProduct,), attrs)


def _worker_pieces(lo: np.ndarray, hi: np.ndarray, workers: int) -> tuple[np.ndarray, ...]:
    """``(block, begin, end)`` of every non-empty worker piece of the ranges ``[lo, hi)``
    (``splitRegionsBetweenWorkers`` with grain 1: ``ceil(size / workers)`` per worker)."""
    size = hi - lo
    per = -(-size // workers)
    k = np.arange(workers)
    begin = lo[:, None] + k[None, :] * per[:, None]
    end = np.minimum(begin + per[:, None], hi[:, None])
    keep = end > begin
    block = np.broadcast_to(np.arange(lo.size)[:, None], keep.shape)
    return block[keep], begin[keep], end[keep]


def outer_product_conv(
    graph: Graph,
    acts: Tensor,
    weights: Tensor,
    params: ConvParams,
    plan: ConvPlan,
    prog: ProgramSequence,
    name: str,
) -> Tensor:
    """Run the convolution ``params`` (one input channel, 1-wide kernel, batch 1) of
    ``acts`` ``[G, field, 1]`` and ``weights`` ``[G, Co, 1]`` with ``plan`` (method
    ``"OUTER_PRODUCT"``) on OuterProduct vertices; return the output ``[G, Co, field]``
    (``out[g, c, x] = acts[g, x, 0] * weights[g, c, 0]``)."""
    t = params.inputType
    if params.outputType != t or params.inputChannelsPerConvGroup != 1 or params.batchSize != 1:
        raise ValueError(
            f"outer_product_conv: {params} needs one input channel, batch 1 and the output "
            f"type of the input (got output {params.outputType.name})"
        )
    if plan.serial != 1:
        raise ValueError(f"outer_product_conv: {plan} has {plan.serial} serial passes; required 1")
    n_g, n_f = int(acts.shape()[0]), int(acts.shape()[1])
    n_co = int(weights.shape()[1])
    cpg = int(plan.out_chans_per_group)
    bg, _, bf, bco, _ = (int(b) for b in plan.blocks)
    if bco % cpg and plan.parts[3] > 1:
        raise ValueError(
            f"outer_product_conv: plan's output-channel block {bco} is not a multiple of "
            f"chansPerGroup {cpg} (the planner's grain)"
        )
    cog = -(-n_co // cpg)
    tiles = np.asarray(plan.tiles).reshape(plan.parts)[:, 0, :, :, 0]
    out = graph.addVariable(t, [n_g, cog, n_f, cpg], f"{name}/out")
    gi = np.arange(n_g) // bg
    ki = (np.arange(cog) * cpg) // bco
    fi = np.arange(n_f) // bf
    tile_of = tiles[gi[:, None, None], fi[None, None, :], ki[None, :, None]]
    graph.mapElements(out, np.repeat(tile_of.reshape(-1), cpg))
    w = weights.reshape([n_g, n_co])
    if cog * cpg > n_co:  # Poplibs pads the output channels to the group size
        pad = graph.addConstant(t, [n_g, cog * cpg - n_co], 0.0, f"{name}/padding")
        graph.setTileMapping(pad, int(tiles.reshape(-1)[0]))
        w = concat([w, pad], 1)
    a = acts.reshape([n_g * n_f])
    # blocks: (conv group, field part, channel part), then worker pieces of the field
    pg, pf, pco = tiles.shape
    g_lo = np.arange(pg) * bg
    grid = np.meshgrid(np.arange(pg), np.arange(pf), np.arange(pco), indexing="ij")
    bgi, bfi, bci = (x.reshape(-1) for x in grid)
    f_lo, f_hi = bfi * bf, np.minimum((bfi + 1) * bf, n_f)
    c_lo, c_hi = bci * bco, np.minimum((bci + 1) * bco, cog * cpg)
    live = (f_hi > f_lo) & (c_hi > c_lo) & (g_lo[bgi] < n_g)
    blk, x_lo, x_hi = _worker_pieces(
        f_lo[live], f_hi[live], graph.getTarget().getNumWorkerContexts()
    )
    blk = np.flatnonzero(live)[blk]
    # one vertex per worker piece and conv group of its block
    per_g = np.minimum(g_lo[bgi[blk]] + bg, n_g) - g_lo[bgi[blk]]
    vb = np.repeat(np.arange(blk.size), per_g)
    g = g_lo[bgi[blk]][vb] + (np.arange(vb.size) - np.repeat(np.cumsum(per_g) - per_g, per_g))
    b = blk[vb]
    x0, x1 = x_lo[vb], x_hi[vb]
    c0, c1 = c_lo[b], c_hi[b]
    k0, nk = c0 // cpg, -(-(c1 - c0) // cpg)
    vtiles = tiles[bgi[b], bfi[b], bci[b]]
    width = x1 - x0
    # out pieces: for each vertex, its groups k0 .. k0 + nk - 1 over field [x0, x1)
    kv = np.repeat(np.arange(g.size), nk)
    kk = np.repeat(k0, nk) + (np.arange(kv.size) - np.repeat(np.cumsum(nk) - nk, nk))
    o_begin = ((g[kv] * cog + kk) * n_f + x0[kv]) * cpg
    o_len = width[kv] * cpg
    cs = graph.addComputeSet(f"{name}/Convolve")  # Poplibs: the convolveCS
    chans = graph.addConstant(UNSIGNED_INT, [g.size], np.full(g.size, cpg), f"{name}/chansPerGroup")
    graph.mapElements(chans, vtiles)
    cycles = outer_product_cycles(t == FLOAT, width, nk * cpg, np.full(g.size, cpg))
    conn = {
        "in": Segments(a.elements(_spans(g * n_f + x0, width)), width),
        "weights": Segments(w.flatten().elements(_spans(g * cog * cpg + c0, nk * cpg)), nk * cpg),
        "out": Segments(out.flatten().elements(_spans(o_begin, o_len)), o_len, nk),
        "chansPerGroup": chans,
    }
    graph.addVertices(cs, outer_product_vertex(t), vtiles, conn, perfEstimates=cycles)
    prog.add(Execute(cs))
    view = out.dimShuffle([0, 1, 3, 2]).reshape([n_g, cog * cpg, n_f])
    return view.slice(0, n_co, 1) if cog * cpg > n_co else view
