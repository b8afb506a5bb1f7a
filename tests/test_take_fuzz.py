"""``tensor_views._take`` (the gather behind ``Tensor.elements`` of many positions)
against the loop it replaced, restated in numpy: the ids gathered, the first position
out of range, and whether the positions and the ids are ascending consecutive runs."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel, tensor_views
from poplar_api.errors import TensorIndexError


def _reference(src: np.ndarray, start: int, pos: np.ndarray, n: int) -> tuple:
    """What the one-loop ``_take`` returned, and the ids it wrote (None past an error)."""
    bad = np.flatnonzero((pos < 0) | (pos >= n))
    if bad.size:
        return (int(bad[0]), False, False), None
    ids = start + pos if start >= 0 else src[pos]
    pos_run = bool((np.diff(pos) == 1).all())
    id_run = bool((np.diff(ids) == 1).all())
    return (-1, pos_run, id_run), ids


def _positions(rng: np.random.Generator, n: int) -> np.ndarray:
    size = int(rng.integers(0, 300))
    kind = int(rng.integers(0, 5))
    if kind == 0:  # an ascending run, sometimes running past the end
        first = int(rng.integers(-2, n + 2))
        return np.arange(first, first + size, dtype=np.int64)
    if kind == 1:  # a run broken once
        pos = np.arange(size, dtype=np.int64) + int(rng.integers(0, max(1, n - size)))
        if size > 2:
            pos[int(rng.integers(1, size))] += int(rng.integers(1, 3))
        return pos
    pos = rng.integers(0, n, size).astype(np.int64)
    if kind == 2 and size:  # one position out of range, anywhere
        pos[int(rng.integers(0, size))] = int(rng.choice([-1, -7, n, n + 5]))
    return pos


@pytest.mark.parametrize("seed", range(4))
def test_take_matches_the_one_loop_gather_on_random_positions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    take = tensor_views._compiled_take()
    for _ in range(300):
        n = int(rng.integers(1, 400))
        if rng.random() < 0.3:  # ids in one run of a variable
            src = np.arange(n, dtype=np.int64) + int(rng.integers(0, 50))
        else:
            src = rng.permutation(n * 2)[:n].astype(np.int64)
        src.flags.writeable = False
        start = int(rng.integers(0, 100)) if rng.random() < 0.3 else -1
        pos = _positions(rng, n)
        frozen = pos.view()
        frozen.flags.writeable = False
        out = np.full(pos.size, -99, np.int64)
        want, ids = _reference(src, start, pos, n)
        got = take(src if start < 0 else tensor_views._NO_IDS, start, frozen, n, out)
        assert tuple(got) == want, (n, start, pos.tolist())
        if ids is not None:
            np.testing.assert_array_equal(out, ids)


def test_elements_of_many_positions_keeps_its_views_and_errors() -> None:
    """Through ``Tensor.elements``: the ids, runs kept as runs and the first position
    out of range named, as before."""
    rng = np.random.default_rng(5)
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    t = graph.addVariable(FLOAT, [20, 30], "t").dimShuffle([1, 0])
    for _ in range(50):
        pos = rng.integers(0, 600, int(rng.integers(65, 500)))
        np.testing.assert_array_equal(t.elements(pos).flat_index(), t.flat_index()[pos])
    run = t.flatten().slice(0, 600).elements(np.arange(100, 300))
    np.testing.assert_array_equal(run.flat_index(), t.flat_index()[100:300])
    strided = graph.addVariable(FLOAT, [300, 20], "s").dimShuffle([1, 0])[3]  # strided ids
    assert not strided.flat_index().flags.c_contiguous
    broadcast = graph.addVariable(FLOAT, [3], "b")[1:2].broadcast(300, 0)  # stride 0
    for _ in range(20):
        pos = rng.integers(0, 300, int(rng.integers(65, 400)))
        np.testing.assert_array_equal(
            broadcast.elements(pos).flat_index(), broadcast.flat_index()[pos]
        )
        np.testing.assert_array_equal(strided.elements(pos).flat_index(), strided.flat_index()[pos])
        np.testing.assert_array_equal(
            t.elements(pos[::2]).flat_index(), t.flat_index()[pos[::2]]
        )  # strided positions
    v = graph.addVariable(FLOAT, [500], "v")
    assert v.elements(np.arange(3, 203))._start == v._start + 3
    bad = np.arange(100)
    bad[71] = 600
    with pytest.raises(TensorIndexError, match=r"indices\[71\] = 600"):
        t.elements(bad)
