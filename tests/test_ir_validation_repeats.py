"""IR validation's repeated-tile check (``ir_validation._repeats``): a tile id in
``[0, limit)`` listed twice is found, ids outside are ignored, on the numpy path (up to
``_SMALL`` entries) and the compiled one alike."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.ir_validation import _SMALL, _repeats


def _reference(tiles: np.ndarray, limit: int) -> bool:
    seen: set[int] = set()
    for t in tiles.tolist():
        if 0 <= t < limit:
            if t in seen:
                return True
            seen.add(t)
    return False


@pytest.mark.parametrize("seed", range(8))
def test_repeats_against_a_set_on_both_paths(seed: int) -> None:
    rng = np.random.default_rng(seed)
    limit = int(rng.integers(1, 3_000))
    for n in (0, 1, limit // 2 + 1, limit, _SMALL + 7):
        distinct = rng.permutation(limit + 40)[: min(n, limit + 40)] - 20  # some outside
        tiles = np.resize(distinct, n)  # repeats once n passes limit + 40
        cases = [tiles]
        if n:
            once = distinct[(distinct >= 0) & (distinct < limit)]
            if once.size:
                twice = distinct.copy()
                twice[int(rng.integers(0, twice.size))] = once[int(rng.integers(0, once.size))]
                cases.append(twice)
            outside = distinct.copy()
            outside[: min(3, outside.size)] = [-5, limit, limit + 9][: min(3, outside.size)]
            cases += [outside, np.concatenate([outside, [-5, limit + 9]])]
        for case in cases:
            for dtype in (np.int64, np.int32):
                got = _repeats(case.astype(dtype), limit)
                assert got == _reference(case, limit), (n, limit, dtype)


def test_a_tile_listed_twice_is_found_and_tiles_outside_are_not_counted() -> None:
    assert _repeats(np.array([0, 5, 3, 5]), 8)
    assert not _repeats(np.array([0, 5, 3, 8, 8, -1, -1]), 8)
    assert not _repeats(np.zeros(0, np.int64), 8)
