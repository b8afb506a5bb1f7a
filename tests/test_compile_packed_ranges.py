"""Exchange planning's packed ranges and the pieces of vertices that start with local
reads, each against a computation written out in the test."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.lowering import pieces, received, runs


def _python_pieces(ids_of, vtiles, owner):
    """Pieces (begin, length, dst) of each vertex's ids, one id at a time: a run of
    consecutive remote ids is one piece; a local id ends the run."""
    begin, length, dst = [], [], []
    for tile, ids in zip(vtiles, ids_of, strict=True):
        prev = None
        for i in ids:
            if owner[i] == tile:
                prev = None
                continue
            if prev is not None and i == prev + 1:
                length[-1] += 1
            else:
                begin.append(i)
                length.append(1)
                dst.append(tile)
            prev = i
    return begin, length, dst


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("by_run", [False, True])
def test_field_pieces_after_a_local_prefix(seed: int, by_run: bool) -> None:
    """Vertices whose first ids are on their own tile, then remote ones (and some all
    local, some all remote): the same pieces as the loop in the test, for fields of
    listed ids and of runs."""
    rng = np.random.default_rng(seed)
    tiles, space = 6, 400
    owner = np.repeat(rng.integers(0, tiles, 80), 5)[:space].astype(np.int16)  # tiles
    nv = 60
    vtiles = rng.integers(0, tiles, nv)
    starts = rng.integers(0, space - 30, nv)
    lengths = rng.integers(0, 30, nv)
    if by_run:
        ids_of = [list(range(s, s + n)) for s, n in zip(starts, lengths, strict=True)]
    else:  # scattered ids, each vertex's own tile's ids first
        ids_of = []
        for t, n in zip(vtiles, lengths, strict=True):
            own = np.flatnonzero(owner == t)
            local = rng.choice(own, min(int(rng.integers(0, 8)), own.size), replace=False)
            ids_of.append(local.tolist() + rng.integers(0, space, n).tolist())
    bounds = np.concatenate(([0], np.cumsum([len(x) for x in ids_of]))).astype(np.int64)
    flat = np.array([i for x in ids_of for i in x], np.int64)
    found = pieces.Pieces(8)  # grown as it goes
    if by_run:
        pieces.Pieces.field(found, np.zeros(0, np.int64), starts, bounds, vtiles, owner)
    else:
        pieces.Pieces.field(found, flat, np.zeros(0, np.int64), bounds, vtiles, owner)
    got = [a.tolist() for a in found.arrays()]
    assert got == [list(x) for x in _python_pieces(ids_of, vtiles, owner)]


@pytest.mark.parametrize("seed", range(4))
def test_merge_received_of_packed_keys_equals_element_sets(seed: int) -> None:
    """The merge reading packed keys gives each tile the union of its ranges, its
    messages (a run of one owner), the pairs and distances: counted from sets of
    elements in the test, and the same as the merge of two arrays."""
    rng = np.random.default_rng(seed)
    tiles, space = 10, 500
    owner = np.resize(np.repeat(rng.integers(0, tiles, 60), rng.integers(1, 12, 60)), space)
    owner = owner.astype(np.int16)  # a space's tiles, as the graph holds them
    changes = runs.change_points(owner, space)
    column, row = np.arange(tiles) // 2, np.arange(tiles) % 2
    m = 400
    dst = rng.integers(0, tiles, m)
    begin = rng.integers(0, space - 10, m)
    length = rng.integers(1, 10, m)
    stride = space + 1
    keys, rest, bits = received.sorted_keys(dst * stride + begin, length)
    assert bits > 0
    results = []
    for args in ((keys, rest, bits), (*received.unpack(keys, rest, bits), 0)):
        pairs = (np.zeros(tiles * tiles, np.uint8), np.zeros(tiles, np.int64))  # stamp 1
        out = received.merge_received(
            args[0], args[1], stride, changes, owner, (column, row), tiles, pairs, args[2]
        )
        results.append(([a.tolist() for a in out], pairs[0].tolist(), pairs[1].tolist()))
    assert results[0] == results[1]
    (a, b, receiver, elements, messages, distance), seen, senders = results[0]
    seen = np.array(seen).reshape(tiles, tiles)
    for t in range(tiles):
        ids = sorted(
            {
                i
                for x, n in zip(begin[dst == t], length[dst == t], strict=True)
                for i in range(x, x + n)
            }
        )
        got = [i for lo, hi, r in zip(a, b, receiver, strict=True) if r == t for i in range(lo, hi)]
        assert got == ids
        assert elements[t] == len(ids)
        starts = [
            k
            for k, i in enumerate(ids)
            if k == 0 or i != ids[k - 1] + 1 or owner[i] != owner[ids[k - 1]]
        ]
        assert messages[t] == len(starts)
        assert set(np.flatnonzero(seen[t]).tolist()) == {int(owner[i]) for i in ids}
        assert senders[t] == len({int(owner[i]) for i in ids})
    want = np.zeros(tiles, np.int64)
    for t in range(tiles):
        for s in np.flatnonzero(seen[t]):
            d = abs(column[t] - column[s]) + abs(row[t] - row[s])
            want[t], want[s] = max(want[t], d), max(want[s], d)
    assert distance == want.tolist()


def test_pair_map_turns_never_see_an_earlier_turns_pairs() -> None:
    """Planners take the one pair map in turn, 600 turns (past the 255 stamps of a
    uint8 map, so it is zeroed and the stamps restart): each turn marks random pairs,
    and the next turn finds none of them seen and its sender counts zero."""
    from poplar_api.lowering.exchange import OwnerCache

    owners = OwnerCache()
    n = 7
    rng = np.random.default_rng(3)
    for _ in range(600):
        seen, senders, stamp = owners.take_pairs(n)
        assert seen.size == n * n and 1 <= stamp <= 255
        assert not (seen == stamp).any() and not senders.any()
        marked = rng.choice(n * n, 10, replace=False)
        seen[marked] = stamp
        senders[marked // n] += 1
        owners.give_back_pairs((seen, senders, stamp))
    assert len(owners.free_pairs[n]) == 1


@pytest.mark.parametrize("seed", range(5))
def test_sent_by_cover_counts_owner_runs_of_the_union(seed: int) -> None:
    """Elements and messages each owner sends of overlapping, touching and repeated
    intervals: a message per run of consecutive ids of one owner in their union, the
    union taken as a set of ids in the test."""
    from poplar_api.lowering.exchange import _sent_by_cover

    rng = np.random.default_rng(seed)
    tiles, space = 8, 300
    owner = np.resize(np.repeat(rng.integers(0, tiles, 50), rng.integers(1, 9, 50)), space)
    owner = owner.astype(np.int32)
    m = int(rng.integers(1, 60))
    a = rng.integers(20, space - 30, m)
    b = a + rng.integers(1, 25, m)
    a[: m // 4] = b[m // 2 : m // 2 + m // 4]  # some intervals touch others
    b[: m // 4] = np.maximum(b[: m // 4], a[: m // 4] + 1)
    elements, messages = np.zeros(tiles, np.int64), np.zeros(tiles, np.int64)
    none = np.zeros(0, np.int64)  # no progressions (tests/test_strided_fields.py has them)
    _sent_by_cover(a, b, none, none, none, int(a.min()), int(b.max()), owner, elements, messages)
    ids = sorted({i for x, y in zip(a.tolist(), b.tolist(), strict=True) for i in range(x, y)})
    want_elements, want_messages = [0] * tiles, [0] * tiles
    for k, i in enumerate(ids):
        want_elements[owner[i]] += 1
        if k == 0 or i != ids[k - 1] + 1 or owner[i] != owner[ids[k - 1]]:
            want_messages[owner[i]] += 1
    assert elements.tolist() == want_elements
    assert messages.tolist() == want_messages
