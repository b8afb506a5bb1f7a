"""``reduce_plan._groups`` (an on-tile reduction stage's groups and inner factors, in
one pass) against the two-pass walk it replaced, restated in Python, on random keys
and orders, and ``input_groups`` against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.popops import reduce_plan


def _two_pass(key_m: np.ndarray, s_pos: np.ndarray) -> tuple[list[int], list[int]]:
    """The groups' first indices and inner factors as the replaced kernel found them:
    count the group's runs, take its length over the count when it divides, then walk
    the group again and fall back to 1 unless every run has that length."""
    firsts, inners = [], []
    n, k = s_pos.size, 0
    while k < n:
        key = key_m[s_pos[k]]
        a, k, runs = k, k + 1, 1
        while k < n and key_m[s_pos[k]] == key:
            if s_pos[k] != s_pos[k - 1] + 1:
                runs += 1
            k += 1
        f = (k - a) // runs if (k - a) % runs == 0 else 1
        start = a
        for j in range(a + 1, k + 1):
            if f == 1:
                break
            if j == k or s_pos[j] != s_pos[j - 1] + 1:
                if j - start != f:
                    f = 1
                start = j
        firsts.append(a)
        inners.append(f)
    return firsts, inners


def _case(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Keys by memory position in runs (as tiles and columns lie), and the positions
    sorted stably by key."""
    n = int(rng.integers(1, 400))
    run = int(rng.integers(1, 9))
    keys = np.repeat(rng.integers(0, int(rng.integers(1, 12)), -(-n // run)), run)[:n]
    if rng.random() < 0.3:  # some runs of another length
        cut = rng.integers(0, n, int(rng.integers(1, 4)))
        keys[cut] = rng.integers(0, 12, cut.size)
    key_m = keys.astype(np.int64)
    s_pos = np.argsort(key_m, kind="stable").astype(np.int64)
    return key_m, s_pos


@pytest.mark.parametrize("seed", range(3))
def test_groups_match_the_two_pass_walk(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(400):
        key_m, s_pos = _case(rng)
        room = np.full((2, s_pos.size), -7, np.int64)
        frozen = s_pos.view()
        frozen.flags.writeable = False
        count = reduce_plan._groups(key_m, frozen, room[0], room[1])
        want_first, want_inner = _two_pass(key_m, s_pos)
        assert room[0, :count].tolist() == want_first
        assert room[1, :count].tolist() == want_inner


@pytest.mark.parametrize("counting", [True, False])
def test_input_groups_of_random_reductions(counting: bool, monkeypatch) -> None:
    """Groups (tile, column) with their lengths; an inner factor divides its group's
    length, and is the common length of the group's runs of consecutive positions;
    the positions in stable key order whether counted (keys of a span the counts
    have room for) or sorted (numpy's stable sort, keys spanning too far)."""
    if not counting:
        monkeypatch.setattr(reduce_plan, "_counting_order", None)  # (must not be called)
    rng = np.random.default_rng(9)
    for _ in range(60):
        n_out, n_red = int(rng.integers(1, 12)), int(rng.integers(1, 40))
        pos = rng.permutation(n_out * n_red).reshape(n_out, n_red).astype(np.int64)
        if rng.random() < 0.5:  # columns of consecutive positions, as a layout gives
            pos = np.arange(n_out * n_red, dtype=np.int64).reshape(n_red, n_out).T.copy()
        tiles = (pos // int(rng.integers(1, 30))) % 4
        if not counting:  # keys spanning more than twice the elements and 4096
            tiles = tiles + 4096 + 2 * pos.size
        s_pos, g_tile, g_col, g_len, inner = reduce_plan.input_groups(pos, tiles)
        key = (tiles * n_out + np.arange(n_out)[:, None]).reshape(-1)
        key_m = np.empty(pos.size, np.int64)
        key_m[pos.reshape(-1)] = key
        np.testing.assert_array_equal(s_pos, np.argsort(key_m, kind="stable"))
        uniq, counts = np.unique(key_m, return_counts=True)
        np.testing.assert_array_equal(g_tile * n_out + g_col, uniq)
        np.testing.assert_array_equal(g_len, counts)
        assert ((g_len % inner) == 0).all()
        _, want_inner = _two_pass(key_m, s_pos)
        np.testing.assert_array_equal(inner, want_inner)
