"""Poplibs' planner estimates of the MAC vertices' partial sums for a matMul product.

The planner (graphcore/poplibs ``7eac0f26``, ``addPartialCalcCycleEstimate`` in
``lib/poplin/ConvModel.cpp``) prices a tile's partial sums with the functions of
``lib/poplin/PerformanceEstimation.hpp``. For the convolution a matMul product becomes
(batch flattened into a 1-D field, ``calculateFlattenedParams``: batch 1, a 1-wide
kernel, no dilation, stride or padding), HALF inputs and FLOAT partials, they reduce
to the closed forms below, over a tile's ``ft`` field positions, ``cit`` input and
``cot`` output channels and ``gt`` conv groups (each padded to its grouping). ``W`` is
the worker contexts. Derived from the source, not a port. The constants below are
7eac0f26's; planned as ``f927358`` the same forms take that release's
(:data:`~.poplibs_release.MAC_ESTIMATES`, which cites where they differ): its
horizontal MAC has no 1x1 path (a run starts at 19 and a position costs ``7 + D``, a
worker starts at 16, the overhead is 63 with no retention term, the partials are always
zeroed, and ``D`` is ``7 + icg / 4`` or ``7 + icg``), and its vertical MAC's worker,
supervisor, zeroing and reduction constants differ.

Horizontal MAC (``Plan::Hmac``; ``inChansPerGroup`` ``icg``, one partial channel per
group with FLOAT partials):

* ``use1x1Implementation``: ``canUseHorizontalMac1x1Vertex`` (batch 1, 1x1 kernel,
  dilation equal to stride, a 1-D field, no padding) and
  ``horizontalMacHas1x1Specialisation`` (FLOAT partials, HALF inputs): always here;
* ``estimateConvPartialHorizontalMacInnerLoopCycles``: one output row
  (``numOutRows`` = the batch, 1) split ``rowSplitFactor = W / gcd(W, 1) = W`` ways,
  so the one worker partition it builds has a single run of ``ceil(ft / W)`` positions;
  ``getConvPartialHorizontalMacSupervisorInnerLoopCycleEstimate`` then counts ``W``
  times that worker (one used context: the least worker is 0):
  ``W (16 + 16 - 15 + 13 + 1 + s (2 + D))`` for ``s > 0`` positions (the 1x1 path with
  one output channel per group, ``getConvPartialHorizontalMacCycleEstimate``; ``7``
  instead of the run's cycles when ``s = 0``);
* ``D = getDenseDotProductCycles(4, false, true, icg)``: ``7 + icg / 4 - 1`` when 4
  divides ``icg``, ``7 + 1 + icg - 1`` when 2 does, else ``7 + 1 + 2 icg - 1``;
* ``getConvPartialHorizontalMacSupervisorOuterLoopCycleEstimate``:
  ``convHorizontalMacOverhead`` (65 - 10) ``+ W zeroPartialsRetentionSavings`` (9)
  ``+ W convHzmacWorkerRetentionSavings`` (15, the 1x1 path) ``+ CG (23 + IG (15 + OG
  (10 + inner)))`` with ``IG = ceil(cit / icg)``, ``OG = cot``, ``CG = gt``;
* plus ``estimateZeroSupervisorCycles`` unless the tile has one input group (the
  non-zeroing 1x1 path): ``(ceil(ceil(ft / W) / 2) + 14 - 9) W OG CG``
  (``getZeroSupervisorVertexCycleEstimate``, FLOAT partials, 64-bit data path).

Vertical MAC (``Plan::Vmac``; 4 conv groups per group for HALF inputs with FLOAT
partials, one input and one output channel per group; no plan when a tile has more
than one output channel):

* ``estimateConvPartialVerticalMacInnerLoopCycles``: ``ft`` rows of the 1-wide kernel,
  split ``r = W / gcd(W, ft)`` ways, ``m = ceil(ft r / W)`` part rows, one worker list of
  ``m // r + (1 if m % r else 0) x (m % r)`` entries of 1 kernel position:
  ``W (19 + n (7 + 5 + 3))`` for ``n`` entries (``getConvPartialVerticalMacCycleEstimate``,
  4 conv groups: ``getVerticalMacDotProductCycles`` of size 1 is 3);
* ``getConvPartialVerticalMacSupervisorOuterLoopCycleEstimate``: ``61 + 14 + 26 + CG
  (zero + 32 + IG (24 + inner) + reduction)``, ``zero = 4 + ceil(ft / 2)``,
  ``reduction = 9 + ((7 + 2 + 2 (W - 1)) ceil(ft / W)) // 4``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.poplin.poplibs_release import DEFAULT_RELEASE, mac_estimates

__all__ = ["hmac_dense_dot", "hmac_partial_cycles", "vmac_partial_cycles"]

#: ``getConvVertexVMACCandidates``: conv groups per group of the vertical MAC for HALF
#: inputs with FLOAT partials (the HALF vector width, 4; 8 and 16 only for HALF partials).
VMAC_GROUPS = 4


def hmac_dense_dot(icg: int, release: str = DEFAULT_RELEASE) -> int:
    """``getDenseDotProductCycles`` of ``icg`` HALF inputs into a FLOAT partial as
    ``release``'s planner estimates it (:attr:`~.poplibs_release.MacEstimates.hmac_dot`)."""
    four, other, odd = mac_estimates(release).hmac_dot
    if icg % 4 == 0:
        return four + icg // 4
    if icg % 2 == 0:
        return other + icg
    return other + odd * icg


def hmac_partial_cycles(
    ft: Any, cit: Any, cot: Any, gt: Any, icg: int, workers: int, release: str = DEFAULT_RELEASE
) -> Any:
    """The horizontal MAC's partial sums of tiles with ``ft`` positions, ``cit`` input
    and ``cot`` output channels and ``gt`` conv groups (module docstring), as
    ``release``'s planner estimates them."""
    e = mac_estimates(release)
    ft, cit, cot, gt = (np.asarray(x, np.int64) for x in (ft, cit, cot, gt))
    s = -(-ft // workers)
    run = np.where(s == 0, 7, e.hmac_run + s * (e.hmac_position + hmac_dense_dot(icg, release)))
    inner = workers * (16 - e.hmac_retention + run + 16)
    nig = -(-cit // icg)
    zero = (-(-s // 2) + 14 - 9) * workers * cot * gt
    if e.hmac_skips_zeroing:
        zero = np.where(nig == 1, 0, zero)
    outer = e.hmac_overhead + workers * (9 + e.hmac_retention)
    return outer + gt * (23 + nig * (15 + cot * (10 + inner))) + zero


def vmac_partial_cycles(
    ft: Any, cit: Any, gt: Any, workers: int, release: str = DEFAULT_RELEASE
) -> Any:
    """The vertical MAC's partial sums of tiles with ``ft`` positions, ``cit`` input
    channels, one output channel and ``gt`` conv groups padded to
    :data:`VMAC_GROUPS` (module docstring), as ``release``'s planner estimates them."""
    e = mac_estimates(release)
    ft, cit, gt = (np.asarray(x, np.int64) for x in (ft, cit, gt))
    r = workers // np.gcd(workers, ft)
    m = -(-(ft * r) // workers)
    entries = m // r + m % r
    start, per_entry = e.vmac_worker
    inner = workers * (start + entries * per_entry)
    zero = 4 + -(-ft // e.vmac_zero_per_cycle)
    reduction = e.vmac_reduction + ((7 + 2 + 2 * (workers - 1)) * -(-ft // workers)) // 4
    ncg = -(-gt // VMAC_GROUPS)
    return e.vmac_supervisor + ncg * (zero + 32 + cit * (24 + inner) + reduction)


def _least_splits(grains: int) -> np.ndarray:
    """Every split of ``grains`` grains that is the least giving its block
    (``ceildivConstrainDivisor``)."""
    s = np.arange(1, grains + 1, dtype=np.int64)
    per = -(-grains // s)
    return s[np.concatenate(([True], per[1:] != per[:-1]))]


def vmac_floor(
    dims: tuple[int, int, int, int], target: Any, swapped: bool, release: str = DEFAULT_RELEASE
) -> int:
    """A lower bound of Poplibs' cost of any vertical-MAC plan of the HALF product
    ``dims`` ``(G, M, K, N)`` (FLOAT partials) in one operand order: the least partial
    sums over every partition, serial splits included. The vertex takes one output
    channel a tile (``addPartialCalcCycleEstimate`` has no plan otherwise; ``release``'s
    estimates, :mod:`.poplibs_release`), so the
    output channels are split ``Co`` ways; a partition of ``t`` parts in all needs at
    least ``S = ceil(t / tiles)`` serial passes, each paying the partial sums of its
    block (:func:`vmac_partial_cycles`), and every other term of the cost is at least
    0. The field is split in grains of 2 when even (``fieldGrainSize``: one partial
    channel per group)."""
    g, m, k, n = dims
    field, co = (n, m) if swapped else (m, n)
    grain = 2 if field % 2 == 0 else 1
    fgrains = -(-field // grain)
    tf, ti, tg = _least_splits(fgrains), _least_splits(k), _least_splits(-(-g // VMAC_GROUPS))
    f_, i_, g_ = (x.ravel() for x in np.meshgrid(tf, ti, tg, indexing="ij"))
    serial = np.maximum(1, -(-(f_ * i_ * g_ * co) // target.getNumTiles()))
    ft = -(-fgrains // f_) * grain
    cit = -(-k // i_)
    ggrains = -(-g // VMAC_GROUPS)
    gt = -(-ggrains // g_) * VMAC_GROUPS
    cycles = serial * vmac_partial_cycles(ft, cit, gt, target.getNumWorkerContexts(), release)
    return int(cycles.min())
