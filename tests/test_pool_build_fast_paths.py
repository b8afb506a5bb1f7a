"""Fast paths of building a pooling pass, each against the computation it replaces.

* Partitions whose output ranges differ by a shift share one worked-out geometry, moved:
  compared with working every range's geometry out on its own.
* The positions of many boxes in a layout, one pattern per box shape: compared with
  ``numpy.ravel_multi_index`` of each box's indices.
* ``getTileToMap`` over all partitions in one compiled pass: compared with counting
  each partition's tiles by ``numpy.unique`` and taking them in sorted order, as
  Poplibs' ``getTileToMap`` (``lib/popnn/Pooling.cpp`` at graphcore/poplibs
  ``7eac0f26``) describes it.
* The last write to a position wins: compared with a Python loop.
* Operands laid out alike share their windows: compared with each one's found alone.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.popnn.pool_parts import box_positions, choose_tiles, put_in_order
from poplar_api.popnn.pool_plan import _Builder, _bwd_pass, _Dim, _fwd_pass, _ranges

_FIELDS = ("in_box", "empty", "partial", "out_lo", "out_shape", "in_lo", "in_shape",
           "init_info", "in_slice")  # fmt: skip
_ARRAYS = ("start_pos", "base", "work_list", "row_sizes", "out_sorted", "n_sorted")


def _dims(rng: np.random.Generator) -> list[_Dim]:
    dims = []
    for _ in range(int(rng.integers(1, 3))):
        size, kernel = int(rng.integers(4, 13)), int(rng.integers(1, 4))
        stride = int(rng.integers(1, 3))
        lower, upper = (int(x) for x in rng.integers(-1, 2, 2))
        if size + lower + upper < kernel:
            lower = upper = 0
        dims.append(_Dim(size, kernel, stride, lower, upper))
    return dims


@pytest.mark.parametrize("seed", range(24))
def test_shifted_geometries_equal_those_worked_out_alone(seed: int) -> None:
    rng = np.random.default_rng(seed)
    dims = _dims(rng)
    ps = _fwd_pass(dims) if seed % 2 == 0 else _bwd_pass(dims)
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    shared = _Builder(graph, "pool", FLOAT, "max", ps, 4)
    alone = _Builder(graph, "pool", FLOAT, "max", ps, 4)
    split = [int(rng.integers(1, s + 1)) for s in ps.out_shape]
    ranges = [_ranges(s, k) for s, k in zip(ps.out_shape, split, strict=True)]
    nb = int(rng.integers(1, 4))
    shifted = 0
    for combo in np.ndindex(*split):
        begin = [ranges[d][i][0] for d, i in enumerate(combo)]
        end = [ranges[d][i][1] for d, i in enumerate(combo)]
        if any(b >= e for b, e in zip(begin, end, strict=True)):
            continue
        got = shared.geometry(nb, begin, end)
        want = alone._new_geometry(nb, begin, end)
        shifted += got.shape_id != len(shared._relative) - 1
        for name in _FIELDS:
            assert getattr(got, name) == getattr(want, name), (name, begin, end)
        for name in _ARRAYS:
            a, b = getattr(got, name), getattr(want, name)
            assert (a is None) == (b is None), name
            if a is not None:
                np.testing.assert_array_equal(a, b, err_msg=name)
        assert got.bounds == want.bounds
    if seed == 0:
        assert shifted, "no range shared another's geometry: the test proves nothing"


@pytest.mark.parametrize("seed", range(10))
def test_box_positions_equal_each_box_raveled(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nd = int(rng.integers(1, 5))
    layout = tuple(int(x) for x in rng.integers(1, 7, nd))
    strides = np.cumprod((1, *layout[::-1]))[::-1][1:].astype(np.int64)
    n = int(rng.integers(0, 40))
    lo = np.array([[int(rng.integers(0, s)) for s in layout] for _ in range(n)], np.int64)
    lo = lo.reshape(n, nd)
    shape = np.array([[int(rng.integers(0, s - a + 1)) for s, a in zip(layout, row, strict=True)]
                      for row in lo], np.int64).reshape(n, nd)  # fmt: skip
    got, sizes = box_positions(strides, lo @ strides, shape)
    want = [
        np.ravel_multi_index(tuple(a[:, None] + np.indices(s).reshape(nd, -1)), layout)
        if np.prod(s) else np.zeros(0, np.int64)
        for a, s in zip(lo, shape, strict=True)
    ]  # fmt: skip
    np.testing.assert_array_equal(sizes, [w.size for w in want])
    np.testing.assert_array_equal(got, np.concatenate([np.zeros(0, np.int64), *want]))


def _tile_to_map(owner: np.ndarray, boxes: list[np.ndarray], n: int) -> np.ndarray:
    """``getTileToMap`` one partition at a time: its tiles counted and sorted (most
    elements first, then the tile with fewest elements of ``owner`` mapped), the first
    not yet taken; when all are taken the first free tile in that order."""
    order = np.argsort(np.bincount(owner, minlength=n), kind="stable")
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    taken: set[int] = set()
    chosen = []
    for box in boxes:
        tiles, counts = np.unique(box, return_counts=True)
        ranked = sorted(zip((-counts).tolist(), rank[tiles].tolist(), strict=True))
        best = next((r for _, r in ranked if r not in taken), None)
        if best is None:
            best = next((r for r in range(n) if r not in taken), 0)
        taken.add(best)
        chosen.append(int(order[best]))
    return np.array(chosen, np.int64)


@pytest.mark.parametrize("seed", range(10))
def test_tile_choice_equals_counting_each_partition(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 12))
    owner = rng.integers(0, n, int(rng.integers(20, 200)))
    boxes = [
        rng.choice(owner, int(rng.integers(0, 12))) for _ in range(int(rng.integers(1, 2 * n)))
    ]
    sizes = np.array([b.size for b in boxes], np.int64)
    got = choose_tiles(owner, np.concatenate([np.zeros(0, np.int64), *boxes]), sizes, n)
    np.testing.assert_array_equal(got, _tile_to_map(owner, boxes, n))


def test_put_in_order_keeps_the_last_write() -> None:
    rng = np.random.default_rng(3)
    out = rng.integers(0, 9, 50)
    pos = rng.integers(0, 50, 400)
    values = rng.integers(100, 200, 400)
    want = out.copy()
    for p, v in zip(pos.tolist(), values.tolist(), strict=True):
        want[p] = v
    put_in_order(out, pos, values)
    np.testing.assert_array_equal(out, want)


def test_in_memory_reads_every_element_of_a_view_where_it_lies():
    """pool_parts.in_memory: ``memory[first + i @ strides]`` is ``a[i]`` for every index
    of views of every kind (transposed, axes split, sliced with steps or from an
    offset, reversed), of an array owning its memory and of a view of another dtype
    (copied); a view is read in its owner's memory, not copied."""
    from poplar_api.popnn.pool_parts import in_memory

    base = np.arange(7 * 6 * 10, dtype=np.int64) * 3 + 5
    cube = base.reshape(7, 6, 10)
    views = [
        cube, cube.transpose(2, 0, 1), cube.reshape(7, 3, 2, 10).transpose(0, 2, 3, 1),
        cube[1:6:2, ::-1, 3:], cube[2:, 1], cube.transpose(1, 2, 0)[::2, 4:, ::-3],
        base.copy(), cube.astype(np.int32).transpose(1, 0, 2),
    ]  # fmt: skip
    for a in views:
        memory, strides, first = in_memory(a)
        index = np.indices(a.shape).reshape(a.ndim, -1).T
        assert memory[first + index @ strides].tolist() == a.reshape(-1).tolist()
        if a.base is base:  # (numpy keeps the owner as the base of a view of a view)
            assert np.shares_memory(memory, base) and memory.size == base.size


@pytest.mark.parametrize("seed", range(8))
def test_operands_laid_out_alike_share_their_windows(seed: int) -> None:
    """A pass's operands whose positions are laid out alike take the windows found for
    the first of them: each operand's windows equal those found for it alone, and
    operands of another window, shape or order of positions are not given another's,
    nor views of one memory at another start or with other strides."""
    from poplar_api.popnn.pool_plan import _Operand

    rng = np.random.default_rng(seed)
    dims = _dims(rng)
    ps = _bwd_pass(dims) if seed % 2 else _fwd_pass(dims)
    cpg, groups, batch = 4, int(rng.integers(1, 3)), int(rng.integers(1, 4))
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    builder = _Builder(graph, "pool", FLOAT, "max", ps, cpg)
    split = [int(rng.integers(1, groups + 1)), int(rng.integers(1, batch + 1))]
    split += [int(rng.integers(1, s + 1)) for s in ps.out_shape]
    parts = builder._partitions(batch, groups, split)
    operands = []
    for window, field in (("in", ps.in_shape), ("out", ps.out_shape)):
        shape = [batch, groups * cpg, *field]
        n = int(np.prod(shape))
        for order in (np.arange(n), np.arange(n), rng.permutation(n), np.arange(n)[::-1]):
            pos = np.swapaxes(order.astype(np.int64).reshape(shape), 0, 1)
            operands.append(_Operand("f", None, pos, window))
        both = rng.permutation(2 * n)  # one memory: two views at other starts
        for half in (both[:n], both[n:]):
            operands.append(_Operand("f", None, np.swapaxes(half.reshape(shape), 0, 1), window))
        one = rng.permutation(n)  # one memory and start: two views of other strides
        swapped = np.swapaxes(one.reshape(shape), 0, 1)
        operands.append(_Operand("f", None, swapped, window))
        operands.append(_Operand("f", None, one.reshape(swapped.shape), window))
    made: list[tuple] = []
    for o in operands:
        got_pos, got_sizes = builder._windows(o, parts, made)
        want_pos, want_sizes = builder._windows(o, parts)
        np.testing.assert_array_equal(got_pos, want_pos)
        np.testing.assert_array_equal(got_sizes, want_sizes)
    assert len(made) == 14  # the second arange of each window shared the first's


@pytest.mark.parametrize("seed", range(12))
def test_tensor_layouts_give_the_windows_and_tiles_of_their_positions(seed: int) -> None:
    """An operand in its tensor's own layout (no positions given: read by its strides)
    has the windows, shares them with the same operands and chooses the tiles that the
    same operand given its positions (``np.arange`` of the tensor, transposed or with
    the batch folded into the channels, as the passes made them) has and chooses."""
    from poplar_api.popnn.pool_parts import internal_layout
    from poplar_api.popnn.pool_plan import _Operand

    rng = np.random.default_rng(seed)
    dims = _dims(rng)
    ps = _bwd_pass(dims) if seed % 2 else _fwd_pass(dims)
    fold = seed % 3 == 0
    cpg, groups, batch = 4, int(rng.integers(1, 3)), int(rng.integers(1, 4))
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    builder = _Builder(graph, "pool", FLOAT, "max", ps, cpg)
    lead = [batch, groups * cpg]  # the tensors' [batch, channels]
    if fold:  # (one batch element of groups of the batch x channels)
        groups, batch = groups * batch, 1
    split = [int(rng.integers(1, groups + 1)), int(rng.integers(1, batch + 1))]
    split += [int(rng.integers(1, s + 1)) for s in ps.out_shape]
    parts = builder._partitions(batch, groups, split)
    tensors, given, own = [], [], []
    for window, field in (("in", ps.in_shape), ("out", ps.out_shape), ("out", ps.out_shape)):
        t = graph.addVariable(FLOAT, [*lead, *field], f"t{len(tensors)}")
        pos = np.arange(t.numElements(), dtype=np.int64).reshape(t.shape())
        pos = pos.reshape(-1, 1, *field) if fold else np.swapaxes(pos, 0, 1)
        shape, strides = internal_layout(t.shape(), fold)
        assert shape == pos.shape
        index = np.indices(shape).reshape(len(shape), -1).T
        assert (index @ np.array(strides)).tolist() == pos.reshape(-1).tolist()
        tensors.append(t)
        given.append(_Operand("f", t, pos, window))
        own.append(_Operand("f", t, None, window, fold))
        assert own[-1].shape == pos.shape
        np.testing.assert_array_equal(own[-1].positions(), pos)
    made_given: list[tuple] = []
    made_own: list[tuple] = []
    for g, o in zip(given, own, strict=True):
        want = builder._windows(g, parts, made_given)
        got = builder._windows(o, parts, made_own)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    assert len(made_own) == len(made_given) == 2  # the two "out" operands share
    tiles = rng.integers(0, builder.num_tiles, tensors[0].numElements())
    np.testing.assert_array_equal(
        builder._choose_tiles(own[0], tiles, parts), builder._choose_tiles(given[0], tiles, parts)
    )


@pytest.mark.parametrize("seed", range(6))
def test_box_values_read_the_values_at_the_box_positions(seed: int) -> None:
    from poplar_api.popnn.pool_parts import box_values

    rng = np.random.default_rng(seed)
    layout = tuple(int(x) for x in rng.integers(1, 6, 3))
    strides = np.cumprod((1, *layout[::-1]))[::-1][1:].astype(np.int64)
    n = int(rng.integers(0, 30))
    lo = np.array([[int(rng.integers(0, s)) for s in layout] for _ in range(n)], np.int64)
    lo = lo.reshape(n, 3)
    shape = np.array([[int(rng.integers(0, s - a + 1)) for s, a in zip(layout, row, strict=True)]
                      for row in lo], np.int64).reshape(n, 3)  # fmt: skip
    values = rng.integers(-50, 50, int(np.prod(layout)))
    pos, sizes = box_positions(strides, lo @ strides, shape)
    got, got_sizes = box_values(values, strides, lo @ strides, shape)
    np.testing.assert_array_equal(got_sizes, sizes)
    np.testing.assert_array_equal(got, values[pos])


@pytest.mark.parametrize("seed", range(4))
def test_tile_counts_equal_bincount_and_stop_outside_the_tiles(seed: int) -> None:
    from poplar_api.popnn.pool_parts import _count, _readonly

    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 20))
    tiles = rng.integers(0, n, int(rng.integers(0, 500)))
    counts = np.zeros(n, np.int64)
    assert _count(_readonly(tiles), counts)
    np.testing.assert_array_equal(counts, np.bincount(tiles, minlength=n))
    for bad in (-1, n):
        assert not _count(_readonly(np.append(tiles, bad)), np.zeros(n, np.int64))
