"""The compiled passes that cost a ``Copy``'s on-tile pieces (ipusim.machine_copies)
against references written out here with Python's integer division: a piece's
granularity (whole elements, a multiple of the type's granule) and a tile's cut into
worker chunks, each segment's moves, Poplibs' memcpy rows and planner bytes. The
passes use masks and shifts where the sizes and the rate are powers of two; the
references divide, whatever the values."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.machine_copies import _chunk_walk, _granular_pieces


def _granular_reference(nbytes: np.ndarray, size: int, grain: int) -> tuple[np.ndarray, int]:
    """Per piece whether its length in elements is a multiple of ``grain``, up to the
    first piece that is not whole elements (its index, else -1)."""
    four = np.zeros(nbytes.size, bool)
    for k, x in enumerate(nbytes.tolist()):
        if x % size:
            return four[:k], k
        four[k] = (x // size) % grain == 0
    return four, -1


@pytest.mark.parametrize("size, grain", [(1, 4), (2, 4), (4, 2), (4, 4), (8, 4), (3, 2), (4, 3)])
def test_granular_pieces_match_division(size: int, grain: int) -> None:
    rng = np.random.default_rng(size * 10 + grain)
    for trial in range(200):
        n = int(rng.integers(0, 40))
        nbytes = rng.integers(1, 6 * size * grain, n).astype(np.int64) * size
        if trial % 3 == 0 and n:  # a piece that is not whole elements, somewhere
            nbytes[int(rng.integers(0, n))] += 1 if size > 1 else 0
        four, bad = _granular_pieces(nbytes, size, grain)
        want, want_bad = _granular_reference(nbytes, size, grain)
        assert bad == want_bad
        stop = n if bad < 0 else bad
        np.testing.assert_array_equal(four[:stop], want[:stop])


def _walk_reference(tile, nbytes, fresh, weight, contexts: int, rate: int) -> tuple:
    """Each tile's bytes cut into chunks of ``ceil(bytes / (contexts * 8)) * 8``, a
    vertex per chunk: ``(tile, first piece, moves, memcpy, setups, weighed)`` lists."""
    out: list[list[int]] = [[], [], [], [], [], []]
    tiles = tile.tolist()
    k, n = 0, len(tiles)
    while k < n:
        j = k
        while j < n and tiles[j] == tiles[k]:
            j += 1
        total = int(nbytes[k:j].sum())
        chunk = -(-total // (contexts * 8)) * 8
        offset = limit = 0
        for p in range(k, j):
            x, end = offset, offset + int(nbytes[p])
            while x < end:
                starts = x == limit
                if starts:
                    limit += chunk
                    for col, value in zip(out, (tiles[p], p, 0, 0, 1, 0), strict=True):
                        col.append(value)
                elif x == offset and fresh[p]:
                    out[4][-1] += 1
                y = min(end, limit)
                seg = y - x
                out[2][-1] += -(-seg // rate)
                out[3][-1] += 35 + seg // 4 + (seg % 4) * 5
                out[5][-1] += seg * int(weight[p])
                x = y
            offset = end
        k = j
    return tuple(np.asarray(col, np.int64) for col in out)


@pytest.mark.parametrize("rate", [1, 2, 3, 6, 8, 16])
def test_chunk_walk_matches_division(rate: int) -> None:
    rng = np.random.default_rng(rate)
    for trial in range(150):
        n = int(rng.integers(0, 50))
        tile = np.sort(rng.integers(0, 5, n)).astype(np.int64)
        big = 4 if trial % 2 else 400  # pieces of a few bytes, or longer than chunks
        nbytes = rng.integers(1, big, n).astype(np.int64)
        fresh = rng.random(n) < 0.5
        weight = rng.integers(1, 30, n).astype(np.int64)
        contexts = int(rng.integers(1, 7))
        got = _chunk_walk(tile, nbytes, fresh, weight, contexts, rate)
        want = _walk_reference(tile, nbytes, fresh, weight, contexts, rate)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
