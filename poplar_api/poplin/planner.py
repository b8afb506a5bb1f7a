"""The matmul planner: how to split ``[G, M, K] x [G, K, N]`` over the tiles.

A plan cuts each of G, M, K and N into equal blocks (the last one possibly shorter:
block ``ceil(D / parts)``) and gives every ``(g, i, j, kk)`` block product to its own
tile. Candidates are every distinct block size of every dimension; all combinations
that fit in the tiles are costed at once with numpy:

* **exchange in**: bytes a tile receives, assuming the operands are laid out as
  :func:`~poplar_api.poplin.createMatMulInputLHS` / ``RHS`` lay them out (each operand
  block spread over the tiles that use it, so a tile already holds ``1/pN`` of its
  left block and ``1/pM`` of its right block), at ``getExchangeBytesPerCycle`` with
  the poplibs exchange estimator, plus a fixed sync + exchange overhead;
* **compute**: the MatMulPartial estimate of the block (times the groups per tile);
* **reduction** (only when K is split into ``pK > 1`` parts): each output block is
  cut into ``pK`` chunks, one per tile of its K-split, each receiving ``pK - 1``
  partial chunks (float) and running ReduceAdd, plus another sync + exchange overhead.

Candidates whose per-tile working set (operand blocks + result/partials) exceeds
``availableMemoryProportion`` of tile memory are dropped unless none fits, in which
case the one needing least memory per tile wins. Ties are broken deterministically by
fewer tiles, then fewer K parts, then ``(pG, pM, pN)`` in lexicographic order.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from poplar_api.errors import GraphError
from poplar_api.poplin.estimators import (
    exchange_cycles,
    matmul_partial_cycles,
    reduce_add_cycles,
)
from poplar_api.types import FLOAT, HALF, Type

#: Cycles charged per extra BSP phase (sync ~90 + exchange setup; ipu_facts "Planning
#: constants seen in poplibs": ~90 per internal sync, 100 fixed per exchange).
PHASE_OVERHEAD_CYCLES = 190
#: Default share of tile memory the matmul's temporaries may use (poplibs' default).
DEFAULT_AVAILABLE_MEMORY_PROPORTION = 0.6


def split_candidates(dim: int, max_parts: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct ``(parts, block)`` pairs for a dimension: ``block = ceil(dim / s)``.

    ``parts = ceil(dim / block)`` is the number of non-empty blocks; at most
    ``max_parts``. Sorted by increasing parts.
    """
    s = np.arange(1, max(1, min(dim, max_parts)) + 1, dtype=np.int64)
    block = np.unique(-(-dim // s))[::-1]
    parts = -(-dim // block)
    keep = parts <= max_parts
    return parts[keep], block[keep]


@dataclass(frozen=True)
class MatMulPlan:
    """A chosen split.

    Attributes
    ----------
    shape
        ``(G, M, K, N)``.
    parts
        ``(pG, pM, pK, pN)``: number of blocks per dimension.
    blocks
        ``(bG, bM, bK, bN)``: block sizes (last block may be shorter).
    tiles
        ``int64[pG, pM, pN, pK]``: tile (of the graph) of each block product.
    cost
        Estimated cycles by part: ``exchange``, ``compute``, ``reduce``, ``total``.
    memory_bytes
        Estimated per-tile working set of the largest block.
    """

    shape: tuple[int, int, int, int]
    parts: tuple[int, int, int, int]
    blocks: tuple[int, int, int, int]
    tiles: np.ndarray = field(compare=False, repr=False)
    cost: dict[str, int] = field(compare=False)
    memory_bytes: int = 0

    @property
    def num_tiles_used(self) -> int:
        return int(np.prod(self.parts))


def _memory_limit(target: Any, options: Mapping[str, Any]) -> float:
    raw = options.get("availableMemoryProportion", DEFAULT_AVAILABLE_MEMORY_PROPORTION)
    try:
        prop = float(raw)
    except (TypeError, ValueError):
        prop = -1.0
    if not 0.0 < prop <= 1.0:
        raise GraphError(
            f"matMul option availableMemoryProportion={raw!r} is invalid; it must be a "
            f"number in (0, 1], e.g. '0.6'"
        )
    return prop * target.getBytesPerTile()


def cost_candidates(
    shape: tuple[int, int, int, int],
    in_type: Type,
    out_type: Type,
    partials_type: Type,
    target: Any,
    num_tiles: int,
) -> dict[str, np.ndarray]:
    """Every candidate split with its cost parts (arrays of equal length)."""
    g, m, k, n = shape
    cands = [split_candidates(d, num_tiles) for d in (g, m, k, n)]
    grids = np.meshgrid(*[c[0] for c in cands], indexing="ij")
    blocks = np.meshgrid(*[c[1] for c in cands], indexing="ij")
    pg, pm, pk, pn = (x.reshape(-1) for x in grids)
    bg, bm, bk, bn = (x.reshape(-1) for x in blocks)
    used = pg * pm * pk * pn
    fit = used <= num_tiles
    pg, pm, pk, pn, bg, bm, bk, bn, used = (x[fit] for x in (pg, pm, pk, pn, bg, bm, bk, bn, used))
    workers = target.getNumWorkerContexts()
    rate = target.getExchangeBytesPerCycle()
    isz, osz, psz = in_type.size, out_type.size, partials_type.size
    peak = target.getFpFlopsPerCycle(in_type)
    # bytes received: the parts of the operand blocks not already on the tile
    recv = bg * isz * ((bm * bk * (pn - 1)) // pn + (bk * bn * (pm - 1)) // pm)
    exchange = exchange_cycles(recv, rate) + PHASE_OVERHEAD_CYCLES
    compute = bg * matmul_partial_cycles(bm, bk, bn, isz, peak, workers)
    split = pk > 1
    chunk = -(-(bm * bn) // pk)
    red_recv = bg * (pk - 1) * chunk * psz
    reduce = np.where(
        split,
        exchange_cycles(red_recv, rate)
        + PHASE_OVERHEAD_CYCLES
        + bg * reduce_add_cycles(pk, chunk, psz, osz, workers),
        0,
    )
    result_bytes = np.where(split, bm * bn * psz + (pk - 1) * chunk * psz, bm * bn * osz)
    memory = bg * ((bm * bk + bk * bn) * isz + result_bytes)
    return {
        "pg": pg, "pm": pm, "pk": pk, "pn": pn,
        "bg": bg, "bm": bm, "bk": bk, "bn": bn,
        "used": used, "exchange": exchange, "compute": compute, "reduce": reduce,
        "total": exchange + compute + reduce, "memory": memory,
    }  # fmt: skip


def plan_matmul(
    shape: tuple[int, int, int, int],
    in_type: Type,
    out_type: Type,
    target: Any,
    options: Mapping[str, Any] | None = None,
) -> MatMulPlan:
    """The cheapest split of a (grouped) matmul over the target's tiles.

    Parameters
    ----------
    shape
        ``(G, M, K, N)``, every entry >= 1.
    in_type, out_type
        Operand and result element types.
    target
        The graph's target (tiles, workers, exchange rate, peak flops, memory).
    options
        ``partialsType`` ("float" default, or "half"), ``availableMemoryProportion``.
    """
    options = dict(options or {})
    partials_type = partials_type_of(options, in_type)
    num_tiles = target.getNumTiles()
    c = cost_candidates(shape, in_type, out_type, partials_type, target, num_tiles)
    limit = _memory_limit(target, options)
    fits = c["memory"] <= limit
    if fits.any():
        keys = (c["pn"], c["pm"], c["pg"], c["pk"], c["used"], c["total"], ~fits)
    else:
        keys = (c["pn"], c["pm"], c["pg"], c["pk"], c["used"], c["total"], c["memory"])
    best = int(np.lexsort(keys)[0])
    parts = tuple(int(c[x][best]) for x in ("pg", "pm", "pk", "pn"))
    blocks = tuple(int(c[x][best]) for x in ("bg", "bm", "bk", "bn"))
    used = int(c["used"][best])
    # spread the used tiles evenly over the graph's tiles; K-split neighbours adjacent
    tiles = (np.arange(used, dtype=np.int64) * num_tiles // used).reshape(
        parts[0], parts[1], parts[3], parts[2]
    )
    cost = {x: int(c[x][best]) for x in ("exchange", "compute", "reduce", "total")}
    return MatMulPlan(
        shape=tuple(int(d) for d in shape),
        parts=parts,
        blocks=blocks,
        tiles=tiles,
        cost=cost,
        memory_bytes=int(c["memory"][best]),
    )


def partials_type_of(options: Mapping[str, Any], in_type: Type) -> Type:
    """Element type of K-split partials from the ``partialsType`` option (default float)."""
    raw = str(options.get("partialsType", "float")).lower()
    if raw == "float":
        return FLOAT
    if raw == "half":
        return HALF
    raise GraphError(
        f"matMul option partialsType={options.get('partialsType')!r} is invalid; use "
        f"'float' or 'half'"
    )


__all__ = ["MatMulPlan", "cost_candidates", "plan_matmul", "split_candidates"]
