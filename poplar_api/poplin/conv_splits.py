"""The splits the convolution planner costs: options per dimension, the feasible
combinations and the input window of each block size.

A split of the dimensions ``(G, B, *field, Co, Ci)`` gives each dimension a number of
parts; the planner (:mod:`~poplar_api.poplin.conv_planner`) costs every split whose
parts multiply to at most the tile count. Planning a small convolution on 1,472 tiles
makes a few thousand to some 50,000 such splits per vertex family, and the planner
runs for every family and both forms of every pass, so the two per-split walks here
(the feasible combinations in the row-major order of the full product, and the
largest input window of each block size) are compiled loops rather than a chain of
numpy calls per dimension or per block size.

A build plans many convolutions of the same shapes (every method, both forms, the
refined candidates' estimates): a dimension's options and a convolution's dimension
maps are kept for the process (read only), until :func:`clear`
(:func:`~poplar_api.poplin.shared_plans.clear` clears them with the plans).
"""

from __future__ import annotations

import functools
from collections import OrderedDict

import numba
import numpy as np

from poplar_api.poplin.conv_params import ConvParams, dim_maps

__all__ = [
    "MAX_CANDIDATES",
    "MAX_KEPT",
    "MAX_OPTIONS",
    "clear",
    "enumerate_splits",
    "feasible",
    "kept_dim_maps",
    "options",
    "windows",
]

#: Most options per split dimension (geometric subset beyond).
MAX_OPTIONS = 400
#: Most candidates costed at once.
MAX_CANDIDATES = 400_000
#: Dimensions' options and convolutions' dimension maps kept (least recently used
#: dropped first).
MAX_KEPT = 1024

_MAPS: OrderedDict[tuple, list[np.ndarray]] = OrderedDict()


def kept_dim_maps(params: ConvParams) -> list[np.ndarray]:
    """:func:`~poplar_api.poplin.conv_params.dim_maps` of ``params`` (read only), made
    once for the process per convolution (``params.key()``, which holds every field and
    transform the maps read)."""
    key = params.key()
    maps = _MAPS.get(key)
    if maps is None:
        maps = dim_maps(params)
        for m in maps:
            m.setflags(write=False)
        _MAPS[key] = maps
        if len(_MAPS) > MAX_KEPT:
            _MAPS.popitem(last=False)
    else:
        _MAPS.move_to_end(key)
    return maps


def clear() -> None:
    """Forget the options and dimension maps kept."""
    _MAPS.clear()
    options.cache_clear()


@functools.lru_cache(maxsize=MAX_KEPT)
def options(size: int, max_parts: int, grain: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """``(parts, block)`` options of a dimension: blocks in multiples of ``grain`` (kept
    for the process, read only)."""
    units = -(-size // grain)
    s = np.arange(1, max(1, min(units, max_parts)) + 1, dtype=np.int64)
    per = -(-units // s)  # non-increasing in s: its distinct values where it steps down
    block_units = per[np.concatenate(([True], per[1:] != per[:-1]))]
    block = np.minimum(block_units * grain, size)
    parts = -(-size // block)
    keep = parts <= max_parts
    parts, block = parts[keep], block[keep]
    if parts.size > MAX_OPTIONS:
        pick = np.unique(np.round(np.geomspace(1, parts.size, MAX_OPTIONS)).astype(int) - 1)
        parts, block = parts[pick], block[pick]
    parts.setflags(write=False)
    block.setflags(write=False)
    return parts, block


def feasible(opts: list[tuple[np.ndarray, np.ndarray]], tiles: int) -> list[np.ndarray]:
    """Option indices (one array per dimension) of every split whose parts multiply to
    at most ``tiles``, in the row-major order of the full product of the options (the
    first dimension's options all taken; a prefix whose product exceeds ``tiles`` is
    left at once, so the infeasible part of the product is never made)."""
    parts = [np.asarray(p, np.int64).reshape(-1) for p, _ in opts]
    starts = np.zeros(len(parts) + 1, np.int64)
    starts[1:] = np.cumsum([p.size for p in parts])
    flat = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    ascending = np.array([bool((p[1:] >= p[:-1]).all()) for p in parts], np.bool_)
    rows = _feasible_rows(flat, starts, ascending, np.int64(tiles))
    return list(rows)


@numba.njit(cache=True, nogil=True)
def _feasible_rows(parts, starts, ascending, tiles):  # pragma: no cover - compiled
    """``int64[dims, splits]``: :func:`feasible` over the options of every dimension,
    dimension ``d``'s parts at ``parts[starts[d]:starts[d + 1]]`` (an odometer over
    the option indices, counted in a first pass and written in a second; past the
    first option over ``tiles`` of an ``ascending`` dimension no later one fits)."""
    nd = starts.shape[0] - 1
    sizes = starts[1:] - starts[:-1]
    out = np.empty((nd, 0), np.int64)
    total = 0
    for fill in range(2):
        if fill:
            out = np.empty((nd, total), np.int64)
        row = 0
        pos = np.zeros(nd, np.int64)
        used = np.ones(nd + 1, np.int64)
        d = 0
        pos[0] = -1
        while d >= 0:
            pos[d] += 1
            if pos[d] >= sizes[d]:
                d -= 1
                continue
            u = used[d] * parts[starts[d] + pos[d]]
            if d > 0 and u > tiles:
                if ascending[d]:
                    pos[d] = sizes[d]  # (the rest are larger)
                continue
            used[d + 1] = u
            if d == nd - 1:
                if fill:
                    for k in range(nd):
                        out[k, row] = pos[k]
                row += 1
            else:
                d += 1
                pos[d] = -1
        total = row
    return out


def enumerate_splits(
    sizes: list[int], grains: list[int], tiles: int, co_unsplit: bool = False
) -> tuple[list[np.ndarray], list[np.ndarray], list[tuple[np.ndarray, np.ndarray]]]:
    """``(parts, blocks, options)`` of every split of the dimensions ``(G, B, *field, Co,
    Ci)`` whose parts multiply to at most ``tiles`` (blocks in multiples of ``grains``;
    with ``co_unsplit`` the output channels are one block); ``options`` per dimension
    the distinct blocks and each split's index into them."""
    opts = [options(s, tiles, g) for s, g in zip(sizes, grains, strict=True)]
    if co_unsplit:
        opts[-2] = (np.ones(1, np.int64), np.full(1, sizes[-2], np.int64))
    idx = feasible(opts, tiles)
    while idx[0].size > MAX_CANDIDATES:  # thin the largest option list
        i = int(np.argmax([o[0].size for o in opts]))
        opts[i] = (opts[i][0][::2], opts[i][1][::2])
        idx = feasible(opts, tiles)
    parts = [opts[i][0][idx[i]] for i in range(len(opts))]
    blocks = [opts[i][1][idx[i]] for i in range(len(opts))]
    return parts, blocks, [(opts[i][1], idx[i]) for i in range(len(opts))]


def windows(maps: list[np.ndarray], blocks: np.ndarray, d: int) -> np.ndarray:
    """Largest input window (elements of dimension ``d``) over the blocks of each size:
    for block size ``b``, the outputs cut into ``[0, b), [b, 2b), ...``, the widest
    range of input indices any chunk reads (0 when no chunk reads a real input).

    Raises
    ------
    ValueError
        If a block size is below 1: the outputs cannot be cut into empty or negative
        chunks (the compiled walk would never advance).
    """
    blocks = np.asarray(blocks, np.int64).reshape(-1)
    if blocks.size and int(blocks.min()) < 1:
        raise ValueError(
            f"windows: every block size must be at least 1, got blocks={blocks.tolist()} "
            f"(smallest {int(blocks.min())})"
        )
    m = maps[d]
    if m.shape[1] == 0:
        return np.zeros(blocks.size, np.int64)
    return _window_rows(np.ascontiguousarray(m, np.int64), blocks)


@numba.njit(cache=True, nogil=True)
def _window_rows(m, blocks):  # pragma: no cover - compiled
    """:func:`windows` of the map ``m`` (``int64[kernel, outputs]``, -1 where an output
    reads padding): each output's greatest (``small``, -1 when it reads only padding)
    and least (``big``) input index, then the widest range a chunk reads; a one-to-one
    map (one kernel index reading consecutive inputs) gives the block itself."""
    nk, n_out = m.shape
    small = np.full(n_out, -1, np.int64)
    big = np.full(n_out, 9223372036854775807, np.int64)  # (int64 max)
    every = True
    for k in range(nk):
        for o in range(n_out):
            v = m[k, o]
            if v >= 0:
                if v > small[o]:
                    small[o] = v
                if v < big[o]:
                    big[o] = v
            else:
                every = False
    if nk == 1 and every:
        steps = True
        for o in range(1, n_out):
            if big[o] - big[o - 1] != 1:
                steps = False
                break
        if steps:  # one-to-one: the block itself
            return np.minimum(blocks, n_out)
    out = np.zeros(blocks.shape[0], np.int64)
    for i in range(blocks.shape[0]):
        b = blocks[i]
        best = 0
        a = 0
        while a < n_out:
            e = min(a + b, n_out)
            hi = small[a]
            lo = big[a]
            for j in range(a + 1, e):
                if small[j] > hi:
                    hi = small[j]
                if big[j] < lo:
                    lo = big[j]
            if hi >= 0 and hi - lo + 1 > best:
                best = hi - lo + 1
            a = e
        out[i] = best
    return out
