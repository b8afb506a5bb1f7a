"""Copies by index as two strided views (``poplar_api.lowering.affine_copy``).

Each case builds index arrays of a known strided layout (transposes, strided blocks,
reversed axes, sources read twice, the two sides overlapping in one image) and checks
that the view copy leaves the image exactly as numpy's indexed copy
``image[dst] = image[src]`` does; layouts that are not strided, or whose destination
names an element twice, are refused. A replicated graph's transposed copy is checked
per replica against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Engine, Graph, IPUModel, poputil
from poplar_api import program as prog
from poplar_api.lowering import affine_copy as ac


def _layout(base: int, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    ids = np.full(shape, base, np.int64)
    for axis, (n, s) in enumerate(zip(shape, strides, strict=True)):
        dims = [1] * len(shape)
        dims[axis] = n
        ids += (np.arange(n, dtype=np.int64) * s).reshape(dims)
    return ids.reshape(-1)


def _check(src: np.ndarray | slice, dst: np.ndarray | slice) -> None:
    views = ac.affine_copy(src, dst)
    assert views is not None
    size = 1 + max(int(ac._ids(w).max()) for w in (src, dst))
    image = np.random.default_rng(0).integers(0, 2**32, size, dtype=np.uint32)
    want = image.copy()
    want[dst] = want[src]
    got = image.copy()
    views.copy(got)
    np.testing.assert_array_equal(got, want)


CASES = {
    # the first layer's weight gradient of the MLP step: [784, 128] read transposed
    # into runs of 8 spaced 1,024 apart
    "transpose": (
        _layout(12_560, (128, 784), (1, 128)),
        _layout(114_330, (128, 98, 8), (8, 1024, 1)),
    ),
    "block to strided": (slice(5, 5 + 64 * 80), _layout(9_000, (64, 80), (100, 1))),
    "reversed axes": (_layout(40_000, (50, 100), (-100, -1)), _layout(100, (50, 100), (1, 50))),
    "source read twice": (
        _layout(30_000, (2, 64, 40), (0, 40, 1)),
        _layout(0, (2, 64, 40), (2560, 1, 64)),
    ),
    "overlapping sides": (_layout(1_000, (90, 60), (60, 1)), _layout(1_030, (90, 60), (1, 90))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_view_copy_equals_numpys_indexed_copy(case):
    src, dst = CASES[case]
    _check(src, dst)


def test_overlap_reads_the_source_first():
    # the destination is the source shifted by one: an element-by-element loop in
    # order would carry the first value through; numpy's indexed copy does not
    n = 8_192
    src, dst = _layout(0, (n,), (2,)), _layout(2, (n,), (2,))
    _check(src, dst)


@pytest.mark.parametrize(
    "src, dst",
    [
        (_layout(1, (8_192,), (1,)), _layout(0, (8_192,), (3,))),  # dst steps past src
        (_layout(0, (8_192,), (3,)), _layout(2, (8_192,), (1,))),  # src steps past dst
        (slice(1, 8_193), _layout(0, (8_192,), (2,))),
    ],
)
def test_overlap_of_one_axis_with_other_strides(src, dst):
    # one axis each, both ascending, of different steps: numpy's assignment between
    # two such views does not copy through a temporary (it leaves one-dimensional
    # overlap of one direction to its inner loop, which is right only for equal
    # steps), so the source must be read before it is written over
    _check(src, dst)


@pytest.mark.parametrize(
    "src, dst",
    [
        (np.arange(5_000), np.random.default_rng(1).permutation(5_000)),  # not strided
        (_layout(0, (100, 50), (50, 1)), _layout(0, (100, 50), (1, 1))),  # dst repeats
        (_layout(0, (100, 50), (50, 1)), _layout(0, (100, 50), (0, 1))),  # dst repeats
        (np.arange(100), np.arange(100, 200)),  # short: stays indexed
        (slice(0, 10_000), slice(20_000, 30_000)),  # two blocks: numpy copies them
        (_layout(0, (1000, 6), (10, 1)), _layout(0, (1500, 4), (5, 1))),  # axes cross
    ],
)
def test_refused_layouts(src, dst):
    assert ac.affine_copy(src, dst) is None


def test_replicated_transposed_copy_per_replica(monkeypatch):
    """A replicated graph's copy of a ``[64, 80]`` matrix into its transpose's layout
    (5,120 elements, so it is strided): each replica's result is numpy's transpose of
    its own values, on a later run too; every replica is copied by the compiled pass,
    which makes no views."""
    made = []
    real = ac.AffineCopy.views
    monkeypatch.setattr(ac.AffineCopy, "views", lambda self, im: made.append(1) or real(self, im))
    m = IPUModel("tiny")
    r = 4
    m.numIPUs = r
    device = m.createDevice()
    g = Graph(device.getTarget(), replication_factor=r)
    a = g.addVariable(FLOAT, [64, 80], "a")
    b = g.addVariable(FLOAT, [80, 64], "b")
    poputil.mapTensorLinearly(g, a)
    poputil.mapTensorLinearly(g, b)
    for t in (a, b):
        g.createHostWrite(t.name, t)
        g.createHostRead(t.name, t)
    e = Engine(g, prog.Copy(a.transpose(), b))
    e.load(device)
    rng = np.random.default_rng(2)
    for _ in range(2):
        values = rng.standard_normal((r, 64, 80)).astype(np.float32)
        e.writeTensor("a", values)
        e.run(0)
        got = e.readTensor("b").reshape(r, 80, 64)
        np.testing.assert_array_equal(got, values.transpose(0, 2, 1))
    assert not made


def _random_copies(rng: np.random.Generator, count: int) -> list[ac.AffineCopy]:
    """Strided copies of 1 to 5 axes (negative strides, sources read twice, sides that
    overlap or not) that ``affine_copy`` takes."""
    found: list[ac.AffineCopy] = []
    while len(found) < count:
        axes = 5 if rng.random() < 0.1 else int(rng.integers(1, 5))
        shape = tuple(int(n) for n in rng.integers(1, 12, axes))
        if np.prod(shape) < ac.MIN_ELEMENTS:
            continue
        order = rng.permutation(len(shape))  # the destination: a permuted C layout
        d_strides = [0] * len(shape)
        step = int(rng.choice([1, 1, 2]))
        for axis in order[::-1]:
            d_strides[axis] = step * int(rng.choice([1, -1]))
            step *= shape[axis]
        s_strides = [int(v) for v in rng.integers(-3000, 3001, len(shape))]
        s_base = int(rng.integers(40_000, 300_000))
        d_base = int(rng.integers(0, 100_000))
        src = _layout(s_base, shape, tuple(s_strides))
        dst = _layout(d_base, shape, tuple(d_strides))
        if min(src.min(), dst.min()) < 0:
            continue
        copy = ac.affine_copy(src, dst)
        if copy is not None:
            found.append(copy)
    return found


@pytest.mark.parametrize("dtype", [np.uint32, np.uint16, np.uint8])
def test_copy_rows_equals_numpys_indexed_copy_in_every_row(dtype):
    """``copy_rows``, by its compiled pass or through each row's views, leaves every
    replica's image as numpy's indexed copy ``row[dst] = row[src]`` does, on random
    strided copies of every kind the pass is given (and of those it is not: sides
    that overlap, too many axes), with one replica and with three."""
    rng = np.random.default_rng(7)
    compiled = 0
    for trial, copy in enumerate(_random_copies(rng, 120)):
        s_ids = _layout(copy.src_base, copy.shape, copy.src_strides)
        d_ids = _layout(copy.dst_base, copy.shape, copy.dst_strides)
        size = 1 + int(max(s_ids.max(), d_ids.max())) + int(rng.integers(0, 50))
        rows = 1 + 2 * (trial % 2)
        full = rng.integers(0, np.iinfo(dtype).max, (rows, size), dtype=dtype, endpoint=True)
        want = full.copy()
        for row in want:
            row[d_ids] = row[s_ids]
        copy.copy_rows(full)
        np.testing.assert_array_equal(full, want, err_msg=f"copy {trial}: {copy}")
        compiled += copy.compiled
    assert 25 < compiled < 100  # (both paths taken)


def test_a_transpose_of_short_destination_runs_is_compiled():
    """The MLP step's activations copy (``[128, 98, 8]``, destination runs of 8, the
    source's of 128) is a copy the compiled pass takes, ordered by the source."""
    copy = ac.affine_copy(*CASES["transpose"])
    assert copy is not None and copy.compiled
    shape, s_strides, _ = copy._pass
    assert s_strides[-1] == 1 and shape[-1] == 128


def _greedy_axes(ids: np.ndarray) -> list[int] | None:
    """The greedy split written with numpy's diff over every level (the reference)."""
    lengths, cur = [], ids
    while cur.size > 1:
        steps = np.diff(cur)
        other = np.flatnonzero(steps != steps[0])
        n = int(other[0]) + 1 if other.size else cur.size
        if cur.size % n:
            return None
        lengths.append(n)
        cur = cur[::n]
    return lengths


def _grid_strides(ids: np.ndarray, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides of ``ids`` over ``shape`` read off the reshaped grid and checked
    against the whole layout with numpy (the reference)."""
    grid = ids.reshape(shape)
    strides = []
    for axis, n in enumerate(shape):
        at = [0] * len(shape)
        at[axis] = 1
        strides.append(int(grid[tuple(at)]) - int(ids[0]) if n > 1 else 0)
    same = np.array_equal(_layout(int(ids[0]), shape, tuple(strides)), ids)
    return tuple(strides) if same else None


def test_split_and_check_agree_with_numpy_on_random_layouts():
    """The compiled split and grid check give numpy's answers: random strided layouts
    of 1 to 4 axes (negative and zero strides among them), some with one id moved."""
    rng = np.random.default_rng(3)
    moved = layouts = 0
    for trial in range(300):
        shape = tuple(int(n) for n in rng.integers(1, 9, int(rng.integers(1, 5))))
        strides = tuple(int(s) for s in rng.integers(-40, 41, len(shape)))
        ids = _layout(10_000, shape, strides)
        if rng.random() < 0.3 and ids.size > 1:
            ids[int(rng.integers(0, ids.size))] += int(rng.integers(1, 3))
            moved += 1
        ids = ac._ids(ids)  # held as affine_copy holds them
        assert ac._axes(ids) == _greedy_axes(ids), trial
        got = ac._strides(ids, shape)
        assert got == _grid_strides(ids, shape), trial
        layouts += got is not None
    assert moved > 50 and layouts > 150
