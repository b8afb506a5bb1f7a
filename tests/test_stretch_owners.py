"""The owner of each stretch between owner changes, as the merge of received ranges
reads it (``received.stretch_owners``, kept per element space by ``OwnerCache``).

Checked against numpy: the stretch an id lies in is the number of changes at or
before it, and that stretch's owner is the id's own; the merge gives the same
intervals, counts, distances and sender pairs whether it makes the stretch owners
itself or is given the planner's.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.lowering import received, runs
from poplar_api.lowering.exchange import OwnerCache


@pytest.mark.parametrize("dtype", [np.int16, np.int32])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_stretch_owner_of_every_id_is_its_owner(seed, dtype):
    rng = np.random.default_rng(seed)
    owner = np.repeat(rng.integers(-1, 9, 60), rng.integers(1, 12, 60)).astype(dtype)
    changes = runs.change_points(owner, owner.size)
    found = received.stretch_owners(owner, changes)
    assert found.dtype == owner.dtype
    assert found.size == changes.size + 1
    stretch = np.searchsorted(changes, np.arange(owner.size), side="right")
    assert np.array_equal(found[stretch], owner)


def test_stretch_owners_of_one_owner_and_of_nothing():
    owner = np.full(7, 3, np.int16)
    assert received.stretch_owners(owner, runs.change_points(owner, 7)).tolist() == [3]
    empty = np.zeros(0, np.int16)
    assert received.stretch_owners(empty, np.zeros(0, np.int64)).size == 0


def test_owner_cache_keeps_one_array_per_space():
    owner = np.array([0, 0, 1, 1, 1, 2, 0], np.int16)
    cache = OwnerCache()
    first = cache.stretch_owners_of(2, owner, owner.size)
    assert first.tolist() == [0, 1, 2, 0]
    assert cache.stretch_owners_of(2, owner, owner.size) is first
    assert cache.changes[2].tolist() == [2, 5, 6]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_merge_with_given_stretch_owners_equals_merge_without(seed):
    rng = np.random.default_rng(seed)
    tiles, space = 10, 400
    owner = np.resize(np.repeat(rng.integers(0, tiles, 50), rng.integers(1, 16, 50)), space)
    owner = owner.astype(np.int16)
    changes = runs.change_points(owner, space)
    stride = space + 1
    n = 300
    dst, begin = rng.integers(0, tiles, n), rng.integers(0, space - 12, n)
    length = rng.integers(1, 12, n)
    lo = np.sort(dst * stride + begin)
    length = length[np.argsort(dst * stride + begin)]
    coords = (np.arange(tiles) // 2, np.arange(tiles) % 2)
    out = []
    for given in (None, received.stretch_owners(owner, changes)):
        pairs = (np.zeros(tiles * tiles, np.uint8), np.zeros(tiles, np.int64))
        found = received.merge_received(
            lo.copy(), length, stride, changes, owner, coords, tiles, pairs, stretch_owner=given
        )
        out.append([*found, pairs[1]])
    for x, y in zip(*out, strict=True):
        assert np.array_equal(x, y)
    # the senders each tile receives from, by numpy: the owners of its received ids
    want = np.zeros(tiles, np.int64)
    for t in range(tiles):
        mine = (lo // stride) == t
        ids = [np.arange(x, x + k) for x, k in zip(lo[mine] % stride, length[mine], strict=True)]
        if ids:
            want[t] = np.unique(owner[np.concatenate(ids)]).size
    assert out[0][-1].tolist() == want.tolist()
