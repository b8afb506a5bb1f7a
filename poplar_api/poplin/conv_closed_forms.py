"""The planner's closed-form costs of candidate splits, every split in one compiled pass.

:func:`~poplar_api.poplin.conv_planner._candidates` costs every split of a method with
the closed forms the planner's module docstring states (the partial sums of the
largest block, the exchange of its input window and weights, the reduction or cast of
its partials, its temporary memory). A search costs a few dozen to some 50,000 splits
per method, and a build searches for a few dozen methods and forms: as a chain of
numpy operations (some 50 a method, each a pass over the splits and an array) the
fixed cost of the operations was most of the costing on the small tile counts, and the
arrays most of it on the large ones. :func:`closed_forms` walks the splits once and
computes every term of a split together, with the same integer arithmetic (int64,
floor division, the ceilings as ``-(-a // b)``), so the costs are those of the numpy
form, value for value.

The terms restate :func:`~poplar_api.poplin.estimators.exchange_cycles`,
:func:`~poplar_api.poplin.estimators.single_input_reduce`,
:func:`~poplar_api.poplin.estimators.reduce_add_cycles` (no scaled update) and
:func:`~poplar_api.poplin.estimators.outer_product_cycles` for one split at a time; a
test holds them to those functions.
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np

from poplar_api.poplin.estimators import (
    EXCHANGE_SCALE,
    REDUCE_ACC_VECTOR_WIDTH,
    SINGLE_INPUT_GRAIN,
)
from poplar_api.popops.layout import RPT_COUNT_MAX

__all__ = ["AMP", "HMAC", "OUTER", "VMAC", "closed_forms"]

#: Method codes of :func:`closed_forms`.
AMP, OUTER, VMAC, HMAC = 0, 1, 2, 3


def closed_forms(
    method: int,
    parts: np.ndarray,
    blocks: np.ndarray,
    wins: np.ndarray,
    consts: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(used, compute, exchange, reduce, memory)`` of every split (int64 arrays).

    Parameters
    ----------
    method
        :data:`AMP`, :data:`OUTER`, :data:`VMAC` or :data:`HMAC`.
    parts, blocks
        ``int64[dims, splits]``: per split dimension ``(G, B, *field, Co, Ci)`` the parts
        and block sizes of each split.
    wins
        ``int64[field dims, splits]``: the input window of each split's field blocks.
    consts
        The convolution's and target's values the terms read: ``kernel_split``,
        ``kpos`` (kernel positions), ``in_elems`` (batch times input field), ``isz``,
        ``osz``, ``psz`` (input, output and partials element bytes), ``workers``,
        ``exchange_rate`` (bytes a cycle), ``phase`` (cycles of an exchange phase),
        ``icg``, ``ocg``, ``cgpg``, ``core`` (AMP cycles a position), ``vw`` (the input
        vector width), ``cast`` (partials of another type than the output), ``bank``
        and ``tile_bytes``, ``fast`` (``enableFastReduce``), ``pvw`` and ``ovw`` (the
        partials' and output's vector widths), ``is_float`` (FLOAT inputs).
    """
    c = consts
    scaled = max(1, round(float(c["exchange_rate"]) * EXCHANGE_SCALE))
    psz = int(c["psz"])
    return _closed_forms(
        np.int64(method), np.ascontiguousarray(parts, np.int64),
        np.ascontiguousarray(blocks, np.int64), np.ascontiguousarray(wins, np.int64),
        np.array([c["kernel_split"], c["kpos"], c["in_elems"], c["isz"], c["osz"], psz,
                  c["workers"], scaled, c["phase"], c["icg"], c["ocg"], c["cgpg"], c["core"],
                  c["vw"], bool(c["cast"]), c["bank"], c["tile_bytes"], bool(c["fast"]),
                  c["pvw"], c["ovw"], bool(c["is_float"]), REDUCE_ACC_VECTOR_WIDTH[psz],
                  SINGLE_INPUT_GRAIN[psz], RPT_COUNT_MAX, EXCHANGE_SCALE], np.int64),
    )  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _closed_forms(method, parts, blocks, wins, k):  # pragma: no cover - compiled
    """:func:`closed_forms` with its constants in ``k`` (in the order it packs them)."""
    kernel_split, kpos, in_total, isz, osz, psz = k[0], k[1], k[2], k[3], k[4], k[5]
    workers, scaled, phase, icg, ocg, cgpg = k[6], k[7], k[8], k[9], k[10], k[11]
    core, vw, cast, bank, tile_bytes, fast = k[12], k[13], k[14] != 0, k[15], k[16], k[17] != 0
    pvw, ovw, is_float, acc_vw, grain, rpt = k[18], k[19], k[20] != 0, k[21], k[22], k[23]
    xscale = k[24]
    nsd, n = parts.shape
    nd = wins.shape[0]
    used = np.empty(n, np.int64)
    compute = np.empty(n, np.int64)
    exchange = np.empty(n, np.int64)
    reduce = np.empty(n, np.int64)
    memory = np.empty(n, np.int64)
    # the reduction's constants (reduce_add_cycles, no scaled update)
    load_elems = 8 // psz
    pf, of = psz == 4, osz == 4
    cpl = acc_vw // min(acc_vw, load_elems * (2 if fast else 1))
    outer = (8 if of else 7) if pf else (10 if of else 9)
    cpl_m = acc_vw // min(acc_vw, load_elems) + 1
    outer_m = (7 if pf else 9) if of else (6 if pf else 8)
    small_limit = (tile_bytes - bank) // 16
    for j in range(n):
        u = kernel_split
        for d in range(nsd):
            u *= parts[d, j]
        p_field = np.int64(1)
        for d in range(1, 2 + nd):
            p_field *= parts[d, j]
        bg, bb = blocks[0, j], blocks[1, j]
        bco, bci = blocks[nsd - 2, j], blocks[nsd - 1, j]
        pco, pci = parts[nsd - 2, j], parts[nsd - 1, j]
        positions = bb
        window = bb
        for d in range(nd):
            positions *= blocks[2 + d, j]
            window *= wins[d, j]
        in_elems = bg * window * bci
        w_elems = bg * bco * bci * kpos
        owned_in = bg * bci * in_total
        owned_in = owned_in // max(p_field, 1) // (pco * kernel_split)
        recv = isz * (max(in_elems - owned_in, 0) + w_elems - w_elems // p_field)
        exchange[j] = -(-(recv * xscale) // scaled) + phase
        rows = -(-positions // workers)
        if method == 0:  # AMP
            nig, nog = -(-bci // icg), -(-bco // ocg)
            compute[j] = 50 + bg * nig * nog * kpos * (62 + workers * (20 + rows * core))
        elif method == 1:  # the outer product
            chans = bg * -(-bco // ocg) * ocg
            groups = chans // ocg
            if is_float:
                quick = (ocg >= 6) and (ocg % 2 == 0) and (ocg // 2 - 3 <= rpt)
                per = 6 + (ocg - 6) // 2 if quick and ocg // 2 + 1 < 512 else 10 + ocg * 2
                op = 25 + groups * (11 + rows * per)
            else:
                quick = (ocg >= 12) and (ocg % 4 == 0) and (ocg // 4 - 3 <= rpt)
                per = 6 + (ocg - 12) // 4 if quick and ocg // 4 + 1 < 512 else 10 + (ocg * 5) // 2
                op = 25 + groups * (10 + rows * per)
            compute[j] = workers * op
        elif method == 2:  # VMAC
            ngg = -(-bg // cgpg)
            compute[j] = 100 + ngg * kpos * workers * (10 + rows * 3 * max(cgpg // 8, 1))
        else:  # HMAC
            compute[j] = 50 + bg * kpos * workers * (16 + rows * (7 + bco * (2 + -(-bci // vw))))
        depth = pci * kernel_split  # (the partials' parts: input channels x kernel)
        chunk = -(-(bg * positions * bco) // depth)
        if depth == 1 and cast:  # cast only (estimateCastCycles)
            per_worker = -(-chunk // workers)
            reduce[j] = phase + workers * (max(-(-per_worker // pvw), -(-per_worker // ovw)) + 26)
        elif depth > 1 or cast:
            red_recv = (depth - 1) * chunk * psz
            occupied = -(-(chunk * (depth - 1) * psz) // bank) * bank
            single = chunk % grain == 0 and (fast or occupied < small_limit)
            if single:
                p = depth - 1
                vectors = -(-chunk // acc_vw)
                per_worker = -(-vectors // workers)
                vertex = (20 + (cpl * p + outer) * per_worker) * workers + 33
            else:
                p = depth
                loops = chunk // acc_vw
                bit = 1
                while bit < acc_vw:
                    if chunk & bit != 0:
                        loops += 1
                    bit <<= 1
                base, rem = loops // workers, loops % workers
                ragged = rem != 0 and (chunk & (acc_vw - 1)) != 0
                if rem != 0 and not ragged:
                    base += 1
                extra = 2 * p + (13 if pf else 11) if ragged else 0
                vertex = (32 + extra + (cpl_m * p + outer_m) * base) * workers
            reduce[j] = -(-(red_recv * xscale) // scaled) + phase + vertex
        else:
            reduce[j] = 0
        used[j] = u
        memory[j] = isz * (in_elems + w_elems) + psz * bg * positions * bco
    return used, compute, exchange, reduce, memory
