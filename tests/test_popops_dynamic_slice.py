"""popops.dynamicSlice / dynamicUpdate / createSliceableTensorFromSlice: values against
numpy, the vertices Poplibs' ``generateVertices`` chooses, and their estimates against
the formulas of graphcore/poplibs 7eac0f26 ``popopsCycleEstimators.cpp``
(``getDynamicSlice1DEstimate``, ``DynamicSlice2D``), restated here."""

from __future__ import annotations

import numpy as np
import pytest
from popops_harness import Harness

from poplar_api import FLOAT, HALF, UNSIGNED_INT, errors, poputil
from poplar_api import program as prog
from poplar_api.popops import addInPlace, remInPlace
from poplar_api.popops.dynamic_slice import (
    createSliceableTensorFromSlice,
    dynamicSlice,
    dynamicUpdate,
)

W = 6  # worker contexts of the tiny IPU Model


def _estimates(h: Harness) -> dict[str, list[int]]:
    state = h.graph._state
    out: dict[str, list[int]] = {}
    for v in state.vertices:
        if "Dynamic" in v.vtype.name:
            out.setdefault(v.vtype.name, []).append(int(v.perf_estimate))
    return out


def _one_d(region: int, num_sub: int, vw: int) -> int:
    """getDynamicSlice1DEstimate, non-8-bit: 11 + 1 + 6 + 1 + 6 supervisor cycles and
    per worker 39 + (24 + 2 * (ceil(region / 6) // vw)) * numSub."""
    per_worker = -(-region // W)
    return 25 + (39 + (24 + 2 * (per_worker // vw)) * num_sub) * W


@pytest.mark.parametrize("offset", [0, 2, 3])
def test_slice_and_update_of_a_sliceable_tensor_equal_numpy(offset):
    """A stash of 4 copies of a [5, 6] tensor: the slice at ``offset`` is that row;
    an update writes the row at ``offset``, the other rows keep their values."""
    h = Harness()
    rng = np.random.default_rng(offset)
    x = h.var(FLOAT, rng.standard_normal((5, 6)), "x")
    stash = createSliceableTensorFromSlice(h.graph, x.expand([0]), [0], [4], "stash")
    assert stash.shape() == [4, 5, 6]
    # every copy of an element sits on the element's tile
    tiles = h.graph.elementTiles(stash).reshape(4, 30)
    assert (tiles == h.graph.elementTiles(x).reshape(1, 30)).all()
    init = rng.standard_normal((4, 5, 6)).astype(np.float32)
    h.graph.createHostWrite("w-stash", stash)
    h.values["w-stash"] = init
    off = h.var(UNSIGNED_INT, [offset], "off", tile=0)
    got = dynamicSlice(h.graph, stash, off, [0], [1], h.seq, "restore")
    h.read(got, "got")
    zero = h.graph.addConstant(FLOAT, [5, 6], 0.0, "z")
    poputil.mapTensorLinearly(h.graph, zero)
    h.seq.add(prog.Copy(zero, x))
    dynamicUpdate(h.graph, stash, x.expand([0]), off, [0], [1], h.seq, "save")
    h.read(stash, "stash")
    out = h.run()
    np.testing.assert_array_equal(out["got"][0], init[offset])
    want = init.copy()
    want[offset] = 0.0
    np.testing.assert_array_equal(out["stash"], want)


def test_one_region_per_tile_gets_1d_vertices_with_poplibs_estimates():
    h = Harness()
    x = h.var(FLOAT, np.zeros(40), "x")  # linearly mapped: one region per tile
    stash = createSliceableTensorFromSlice(h.graph, x.expand([0]), [0], [3], "stash")
    off = h.var(UNSIGNED_INT, [0], "off", tile=0)
    dynamicSlice(h.graph, stash, off, [0], [1], h.seq, "restore")
    dynamicUpdate(h.graph, stash, x.expand([0]), off, [0], [1], h.seq, "save")
    regions = np.bincount(h.graph.elementTiles(x))
    regions = regions[regions > 0]
    est = _estimates(h)
    assert set(est) == {"popops::DynamicSlice1D<float>", "popops::DynamicUpdateSlice1D<float>"}
    want = sorted(_one_d(int(n), 1, 2) for n in regions)
    assert sorted(est["popops::DynamicSlice1D<float>"]) == want
    assert sorted(est["popops::DynamicUpdateSlice1D<float>"]) == want


def test_several_regions_per_tile_get_2d_vertices():
    """Two separate regions on each tile (columns interleaved over two tiles): worker
    vertices over the regions, values still numpy's; estimate 27 + per region
    (31 + 2 * ceil(size / 4)) * numSub + 13 for half."""
    h = Harness()
    base = h.graph.addVariable(HALF, [3, 4, 8], "base")
    # rows of 8: columns 0-3 on tile 0 and 4-7 on tile 1, for every one of the 12 rows
    h.graph.mapElements(base, np.tile(np.repeat([0, 1], 4), 12))
    vals = np.arange(96, dtype=np.float16).reshape(3, 4, 8)
    h.graph.createHostWrite("w-base", base)
    h.values["w-base"] = vals
    off = h.var(UNSIGNED_INT, [2], "off", tile=0)
    got = dynamicSlice(h.graph, base, off, [0], [2], h.seq, "slice")
    h.read(got, "got")
    out = h.run()
    np.testing.assert_array_equal(out["got"], vals[[2, 0]])  # rows past the end wrap
    est = _estimates(h)
    assert list(est) == ["popops::DynamicSlice2D<half>"]
    # each tile: 4 regions of 4 elements (one per row of the slice), 16 elements, grain 4
    # -> at most 16 / 8 = 2 vertices of 2 regions each
    per_vertex = 27 + 2 * ((31 + 2 * 1) * 2 + 13)
    assert est["popops::DynamicSlice2D<half>"] == [per_vertex] * 4


def test_counter_addressed_ring_buffer_in_a_repeat():
    """One save program in a Repeat: the counter (incremented modulo the depth, as
    PopART's StashOp does) addresses the stash, so 5 writes into 3 slots leave the last
    three values in slots 2, 0, 1."""
    h = Harness()
    x = h.var(FLOAT, np.zeros(8), "x")
    stash = createSliceableTensorFromSlice(h.graph, x.expand([0]), [0], [3], "stash")
    index = h.var(UNSIGNED_INT, [0], "index", tile=1)
    body = prog.Sequence()
    addInPlace(h.graph, x, 1.0, body)
    dynamicUpdate(h.graph, stash, x.expand([0]), index, [0], [1], body, "save")
    addInPlace(h.graph, index, 1, body)
    remInPlace(h.graph, index, 3, body)
    h.seq.add(prog.Repeat(5, body))
    h.read(stash, "stash")
    h.read(index, "index")
    out = h.run()
    np.testing.assert_array_equal(out["stash"][:, 0], [4.0, 5.0, 3.0])
    assert out["index"][0] == 5 % 3


def test_bad_arguments_are_named():
    h = Harness()
    x = h.var(FLOAT, np.zeros((2, 3)), "x")
    poputil.mapTensorLinearly(h.graph, x)
    off = h.var(FLOAT, [0], "off_f", tile=0)
    with pytest.raises(errors.TypeMismatchError, match="offset 'off_f' must be one UNSIGNED_INT"):
        dynamicSlice(h.graph, x, off, [0], [1], h.seq)
    good = h.var(UNSIGNED_INT, [0], "off", tile=0)
    with pytest.raises(errors.GraphError, match="exactly one dimension"):
        dynamicSlice(h.graph, x, good, [0, 1], [1, 1], h.seq)
    with pytest.raises(errors.TensorError, match="slice size 4"):
        dynamicSlice(h.graph, x, good, [1], [4], h.seq)
    with pytest.raises(errors.TensorError, match=r"required float \[1, 3\]"):
        dynamicUpdate(h.graph, x, x, good, [0], [1], h.seq)


def _field_forms(h: Harness, field: str) -> set[str]:
    """How the graph holds ``field`` of the dynamic slice vertices: "run" (a range of
    consecutive ids), "runs" (a list block's ids kept as runs) or "ids" (an id array)."""
    from poplar_api.run_ids import RunIds

    table = h.graph._state.vertices
    forms = set()
    for vid, v in enumerate(table):
        if "Dynamic" not in v.vtype.name:
            continue
        value = table.get_field(vid, field)
        if isinstance(value, range):
            forms.add("run")
            continue
        block, _ = table.block_of(vid)
        if block is not None and field in block.fields:
            forms.add("runs" if isinstance(block.fields[field][3], RunIds) else "ids")
        else:
            forms.add("ids")
    return forms


@pytest.mark.parametrize("interleaved", [False, True])
def test_slice_fields_of_contiguous_rows_are_runs(interleaved):
    """A stash of a tensor (one region per tile: 1D vertices; several: 2D): every
    field of the slice and update vertices is held as runs of consecutive ids, none as
    an array of one id per element."""
    h = Harness()
    x = h.graph.addVariable(FLOAT, [4, 96], "x")
    if interleaved:  # columns in blocks of 8 dealt round 4 tiles: 12 regions per tile
        h.graph.mapElements(x, np.tile(np.repeat(np.arange(4), 8), 12))
    else:
        poputil.mapTensorLinearly(h.graph, x)
    stash = createSliceableTensorFromSlice(h.graph, x.expand([0]), [0], [5], "stash")
    off = h.var(UNSIGNED_INT, [0], "off", tile=0)
    dynamicSlice(h.graph, stash, off, [0], [1], h.seq, "restore")
    dynamicUpdate(h.graph, stash, x.expand([0]), off, [0], [1], h.seq, "save")
    kind = "2D" if interleaved else "1D"
    assert {n.split("<")[0][-2:] for n in _estimates(h)} == {kind}
    want = {"runs"} if interleaved else {"run"}
    assert _field_forms(h, "baseT") == want
    assert _field_forms(h, "subT") == want


def test_slicing_and_updating_bounds_the_host_memory_per_element():
    """Slicing and updating a stash of 8 copies of 120,000 elements takes less than 16
    bytes of host memory per element of the stash at its peak (no array of positions or
    ids per element connected: the fields are found as runs)."""
    import tracemalloc

    h = Harness()
    m, copies = 120_000, 8
    x = h.graph.addVariable(FLOAT, [m], "x")
    poputil.mapTensorLinearly(h.graph, x)
    stash = createSliceableTensorFromSlice(h.graph, x.expand([0]), [0], [copies], "stash")
    off = h.var(UNSIGNED_INT, [0], "off", tile=0)
    dynamicSlice(h.graph, x.expand([0]), off, [0], [1], h.seq, "warm")  # kernels loaded
    for op in (
        lambda: dynamicSlice(h.graph, stash, off, [0], [1], h.seq, "restore"),
        lambda: dynamicUpdate(h.graph, stash, x.expand([0]), off, [0], [1], h.seq, "save"),
    ):
        tracemalloc.start()
        try:
            op()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 16 * copies * m, peak / (copies * m)


@pytest.mark.parametrize("dim,offset", [(0, 1), (1, 3), (2, 5)])
def test_slices_of_scattered_ids_equal_numpy(dim, offset):
    """A base whose elements lie in a random order of a variable's (no runs), mapped
    round 3 tiles, sliced 2 wide along ``dim`` at ``offset`` (wrapping past the end)
    and then updated there with other values: the slice and the updated base are
    numpy's."""
    h = Harness()
    rng = np.random.default_rng(dim)
    shape = [4, 6, 7]
    n = int(np.prod(shape))
    var = h.graph.addVariable(FLOAT, [n], "var")
    h.graph.mapElements(var, rng.integers(0, 3, n))
    base = var.elements(rng.permutation(n)).reshape(shape)
    init = rng.standard_normal(shape).astype(np.float32)
    h.graph.createHostWrite("w-base", base)
    h.values["w-base"] = init
    off = h.var(UNSIGNED_INT, [offset], "off", tile=0)
    got = dynamicSlice(h.graph, base, off, [dim], [2], h.seq, "slice")
    h.read(got, "got")
    size = [2 if i == dim else x for i, x in enumerate(shape)]
    new = rng.standard_normal(size).astype(np.float32)
    s = h.var(FLOAT, new, "s")
    dynamicUpdate(h.graph, base, s, off, [dim], [2], h.seq, "update")
    h.read(base, "base")
    out = h.run()
    rows = (offset + np.arange(2)) % shape[dim]
    np.testing.assert_array_equal(out["got"], np.take(init, rows, axis=dim))
    want = init.copy()
    index = [slice(None)] * 3
    index[dim] = rows
    want[tuple(index)] = new
    np.testing.assert_array_equal(out["base"], want)


def test_sliceable_tensor_along_an_inner_dimension():
    """createSliceableTensorFromSlice along dimension 1 of a [3, 1, 10] tensor mapped
    round 2 tiles in blocks of 5: 4 copies, shape [3, 4, 10]; each copy's element on the
    element's tile, and on a tile the copies of one region of the slice lie one after
    another (region after region in the order of the slice's ids, each region's block
    holding copy 0, then copy 1, ...): the ids as numpy lays them out."""
    h = Harness()
    s = h.graph.addVariable(FLOAT, [3, 1, 10], "s")
    tiles = np.tile(np.repeat([0, 1], 5), 3)  # regions of 5, alternately on tiles 0, 1
    h.graph.mapElements(s, tiles)
    stash = createSliceableTensorFromSlice(h.graph, s, [1], [4], "stash")
    assert stash.shape() == [3, 4, 10]
    got_tiles = h.graph.elementTiles(stash).reshape(3, 4, 10)
    assert (got_tiles == tiles.reshape(3, 1, 10)).all()
    ids = stash.flat_index().reshape(3, 4, 10)
    ids = ids - ids.min()
    # the 6 regions of 5 elements (flat order r = 0..5 of s): tile 0 holds r = 0, 2, 4,
    # tile 1 r = 1, 3, 5; tile 0's regions first, each a block of 4 copies x 5
    order = [0, 2, 4, 1, 3, 5]
    want = np.empty((3, 4, 10), np.int64)
    for r in range(6):
        a, half = divmod(r, 2)
        block = order.index(r) * 20
        for c in range(4):
            want[a, c, 5 * half : 5 * half + 5] = block + 5 * c + np.arange(5)
    np.testing.assert_array_equal(ids, want)
