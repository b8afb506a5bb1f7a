"""Fast paths of library-built graphs, each against the computation it replaces.

* ``Tensor.elements`` of many positions gathers ids, checks positions and finds runs of
  positions and of ids in one compiled pass: compared with numpy's lookup of
  ``flat_index()`` and the consecutive-id rule written out here.
* A VectorList's ids that are mostly runs are found as runs on the ids as given, in the
  type the graph keeps: compared with narrowing every id first and finding runs then.
* Convolution operands are mapped in their memory order: compared with mapping the
  canonical view by the canonical tiles, as the layouts did before.
* A convolution's partial-sum fields are gathered from the operands' element ids:
  compared with gathering positions and looking each up in the operand's ids.
* The reduction of input-channel partials connects each output to the partials at its
  own position: written out from the definition of the reduction.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.errors import TensorIndexError
from poplar_api.graph_connections import _list_ids, list_block_ids
from poplar_api.poplin import conv_layout
from poplar_api.poplin.conv import _plan, _ranges, parse_options
from poplar_api.poplin.conv_blocks import Assembler, plan_partials, runs_between
from poplar_api.poplin.conv_layout import (
    grouped_input,
    grouped_output,
    grouped_weights,
    input_tiles,
    input_tiles_in_memory_order,
    map_grouped_output,
    partial_chans_per_group,
    spread_by_use,
    weight_tiles,
)
from poplar_api.poplin.conv_params import dim_maps, expand_all_dims
from poplar_api.poplin.conv_reduce import reduce_partials
from poplar_api.run_ids import RunIds, as_runs


def _graph(preset: str = "ipu2") -> Graph:
    return Graph(IPUModel(preset).createDevice().getTarget())


# ------------------------------------------------------------------ Tensor.elements
def _parents(graph: Graph) -> dict:
    var = graph.addVariable(FLOAT, [6, 50], "v")
    return {"consecutive": var, "permuted": var.transpose(), "reversed": var.reverse(1)}


def _expected_start(parent, positions: np.ndarray, ids: np.ndarray) -> int:
    """The first id when the view is known to be consecutive, else -1: positions in one
    ascending run of a consecutive parent, or ids ascending consecutive otherwise
    (scattered positions of a consecutive parent are not marked)."""
    pos_run = bool((np.diff(positions.astype(np.int64)) == 1).all())
    id_run = bool((np.diff(ids) == 1).all())
    if parent._start >= 0 and not pos_run:
        return -1
    return int(ids[0]) if id_run else -1


@pytest.mark.parametrize("parent", ["consecutive", "permuted", "reversed"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "uint16", ">i8"])
@pytest.mark.parametrize("kind", ["scattered", "run", "ids run"])
def test_elements_of_many_positions_match_numpy(parent, dtype, kind):
    graph = _graph("ipu1")
    t = _parents(graph)[parent]
    n = t.numElements()
    rng = np.random.default_rng(5)
    if kind == "scattered":
        pos = rng.integers(0, n, size=(9, 13))
    elif kind == "run":
        pos = np.arange(40, 40 + 117).reshape(9, 13)
    else:  # positions whose ids are consecutive in the permuted/reversed parents
        flat = t.flat_index()
        order = np.argsort(flat, kind="stable")
        pos = order[100:217].reshape(9, 13)
    pos = pos.astype(np.dtype(dtype))
    view = t.elements(pos)
    want = t.flat_index()[pos.astype(np.int64)]
    assert view.shape() == [9, 13]
    np.testing.assert_array_equal(view.index, want)
    assert view._start == _expected_start(t, pos.reshape(-1), want.reshape(-1))


def test_elements_out_of_range_names_the_first_position():
    graph = _graph("ipu1")
    t = _parents(graph)["permuted"]
    pos = np.arange(100, dtype=np.int64)
    pos[70], pos[80] = 300, -1
    with pytest.raises(TensorIndexError, match=r"indices\[70\] = 300 is out of range"):
        t.elements(pos)


# ------------------------------------------------------------------ list-block runs
@pytest.mark.parametrize("kind", ["runs", "scattered"])
def test_list_block_ids_equal_narrowed_ids_kept_as_runs(kind):
    graph = _graph("ipu1")
    var = graph.addVariable(FLOAT, [4000], "v")
    rng = np.random.default_rng(2)
    if kind == "runs":  # runs of 16 at random starts
        starts = rng.integers(0, 4000 - 16, size=60)
        ids = (starts[:, None] + np.arange(16)).reshape(-1)
    else:
        ids = rng.integers(0, 4000, size=900)
    t = var.elements(ids)
    got = list_block_ids(graph, t, t.flat_index())
    # before: every id narrowed to int32, then the list block found its runs
    narrowed = _list_ids(graph, t, t.flat_index())
    want = as_runs(narrowed)
    if want is None:
        assert isinstance(got, np.ndarray) and got.dtype == narrowed.dtype
        np.testing.assert_array_equal(got, narrowed)
    else:
        assert isinstance(got, RunIds) and got.dtype == want.dtype == np.int32
        np.testing.assert_array_equal(got.starts, want.starts)
        np.testing.assert_array_equal(got.firsts, want.firsts)
        assert got.size == want.size
        np.testing.assert_array_equal(np.asarray(got), narrowed)


# ------------------------------------------------------------------ operand layouts
LAYOUTS = [
    ("ipu2", poplin.ConvParams(FLOAT, 4, [12, 12], [3, 3], 16, 24, 1)),
    ("ipu1", poplin.ConvParams(HALF, 2, [9, 7], [3, 2], 8, 12, 3, stride=[2, 1])),
    ("ipu2", poplin.ConvParams(FLOAT, 2, [6, 6], [1, 1], 64, 32, 1)),
]


@pytest.mark.parametrize("preset,params", LAYOUTS)
def test_operands_mapped_in_memory_order_as_their_canonical_views_were(preset, params):
    new, old = _graph(preset), _graph(preset)
    opts = parse_options(None, "test")
    plan = _plan(new, params, opts)
    x = grouped_input(new, params, plan, "x")
    w = grouped_weights(new, params, plan, "w")
    # before: the canonical views mapped with the canonical tiles
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    field = [int(f) for f in params.inputFieldShape]
    nd = len(field)
    x_mem = x.dimShuffle([0, 1, *range(3, 3 + nd), 2])  # [G, B, *F, Ci], same elements
    x_old = old.addVariable(params.inputType, x.shape(), "x")
    old.mapElements(x_old.dimShuffle([0, 1, *range(3, 3 + nd), 2]), input_tiles(plan, params))
    w_old = old.addVariable(params.inputType, w.shape(), "w")
    old.mapElements(w_old, weight_tiles(plan, params))
    # each element of the canonical views on the same tile both ways
    np.testing.assert_array_equal(
        new.elementTiles(x_mem),
        old.elementTiles(x_old.dimShuffle([0, 1, *range(3, 3 + nd), 2])),
    )
    np.testing.assert_array_equal(new.elementTiles(w), old.elementTiles(w_old))
    assert x.shape() == [g, b, ci, *field]


def _input_tiles_by_block_array(plan, params):
    """The input's tiles as the layout computed them before: the block of every element
    made as an array, then :func:`spread_by_use`."""
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    fshape = [int(x) for x in params.inputFieldShape]
    icg = np.gcd(ci, max(plan.in_chans_per_group, 1))
    parts = [int(p) for p in plan.parts]
    ktot = int(np.prod(params.kernelShape)) if plan.expanded else 1
    grid = np.indices([g, ci // icg, b, *fshape, icg])
    gi = np.minimum(grid[0] // plan.blocks[0], parts[0] - 1)
    bi = np.minimum(grid[2] // plan.blocks[1], parts[1] - 1)
    chan = grid[1] * icg + grid[-1]
    block = gi * parts[1] + bi
    for d, f in enumerate(fshape):
        block = block * parts[2 + d] + np.minimum(grid[3 + d] * parts[2 + d] // f, parts[2 + d] - 1)
    block = block * parts[-1] + np.minimum(chan * ktot // plan.blocks[-1], parts[-1] - 1)
    users = np.moveaxis(plan.tiles, -2, -1).reshape(-1, parts[-2])
    min_elems = -(-128 // int(params.inputType.size))
    return spread_by_use(block, users, icg, min_elems)


TILES = [
    *LAYOUTS,
    (
        "ipu2",
        poplin.ConvParams(
            FLOAT, 8, [32, 32], [3, 3], 64, 64, 1, paddingLower=[1, 1], paddingUpper=[1, 1]
        ),
    ),
    ("ipu1", poplin.ConvParams(HALF, 3, [17], [3], 12, 20, 1)),
]


@pytest.mark.parametrize("preset,params", TILES)
@pytest.mark.parametrize("expand", [False, True])
def test_input_tiles_equal_the_block_array_spread(preset, params, expand):
    graph = _graph(preset)
    dims = "[0, 1]" if expand and params.getNumFieldDims() == 2 else "[]"
    if expand and params.getNumFieldDims() == 1:
        dims = "[0]"
    opts = parse_options({"planConstraints": f'{{"transform": {{"expandDims": {dims}}}}}'}, "t")
    plan = _plan(graph, params, opts)
    eff = expand_all_dims(params) if plan.expanded else params
    np.testing.assert_array_equal(
        input_tiles_in_memory_order(plan, eff), _input_tiles_by_block_array(plan, eff)
    )
    # the plan's tile table reaches both passes read-only however it is held (a
    # writable table would be a second specialisation of each to compile)
    for kernel, arg in ((conv_layout._spread_terms, 4), (conv_layout._spread, 1)):
        assert {not sig[arg].mutable for sig in kernel.signatures} == {True}, kernel


def _weight_tiles_by_block_array(plan, params):
    """The weights' tiles as the layout computed them before: the block of every weight
    (memory order ``[G, Co / ocg, Ci / icg, *K, ocg, icg]``) made as an array from its
    indices, then :func:`spread_by_use`."""
    from poplar_api.poplin.conv_layout import _weight_groups
    from poplar_api.poplin.conv_params import expand_dims, expanded_kernel_offsets
    from poplar_api.poplin.conv_serial import co_ranges, iteration_chans

    g, co, ci, kernel, ocg, icg = _weight_groups(params, plan)
    parts = [int(p) for p in plan.parts]
    eff = expand_dims(params, plan.expanded_dims) if plan.expanded else params
    eci = int(eff.inputChannelsPerConvGroup)
    ktot = int(np.prod(kernel))
    kk = (expanded_kernel_offsets(params, plan.expanded_dims).reshape(-1) if plan.expanded
          else np.zeros(ktot, np.int64))  # fmt: skip
    cor = co_ranges(plan, co)
    nk = len(kernel)
    grid = np.indices([g, co // ocg, ci // icg, *kernel, ocg, icg])
    kflat = np.ravel_multi_index(tuple(grid[3 : 3 + nk]), kernel) if nk else 0
    chan_out = grid[1] * ocg + grid[3 + nk]
    chan_in = grid[2] * icg + grid[4 + nk]
    co_block = np.zeros(co, np.int64)
    for k, (_, o0, o1) in enumerate(cor):
        co_block[o0:o1] = k
    ce = chan_in * (eci // ci) + kk[kflat]
    per = iteration_chans(plan, eci, "in")
    ci_block = np.minimum(ce % per // plan.blocks[-1], parts[-1] - 1)
    g_block = np.minimum(grid[0] // plan.blocks[0], parts[0] - 1)
    block = (g_block * len(cor) + co_block[chan_out]) * parts[-1] + ci_block
    tiles = np.moveaxis(plan.tiles, [0, -2, -1], [0, 1, 2]).reshape(
        parts[0], parts[-2], parts[-1], -1
    )
    users = tiles[:, [oi for oi, _, _ in cor]].reshape(-1, tiles.shape[-1])
    return spread_by_use(block, users, ocg * icg, -(-256 // int(params.inputType.size)))


@pytest.mark.parametrize("preset,params", TILES)
@pytest.mark.parametrize("expand", [False, True])
def test_weight_tiles_equal_the_block_array_spread(preset, params, expand):
    """The weights' tiles from the block's three terms in one compiled pass
    (``_spread_weight_terms``) against the block of every weight made as an array and
    spread by :func:`spread_by_use`."""
    graph = _graph(preset)
    dims = "[0, 1]" if expand and params.getNumFieldDims() == 2 else "[]"
    if expand and params.getNumFieldDims() == 1:
        dims = "[0]"
    opts = parse_options({"planConstraints": f'{{"transform": {{"expandDims": {dims}}}}}'}, "t")
    plan = _plan(graph, params, opts)
    assert plan.kernel_split == 1
    np.testing.assert_array_equal(
        conv_layout.weight_tiles_in_memory_order(plan, params),
        _weight_tiles_by_block_array(plan, params),
    )


# ------------------------------------------------------------------ partial-sum fields
FIELDS = [
    (
        "ipu2",
        poplin.ConvParams(
            FLOAT, 2, [10, 10], [3, 3], 8, 16, 1, paddingLower=[1, 1], paddingUpper=[1, 1]
        ),
    ),
    ("ipu1", poplin.ConvParams(HALF, 2, [9, 9], [3, 3], 8, 8, 2, stride=[2, 2])),
    ("ipu2", poplin.ConvParams(FLOAT, 1, [4, 4], [1, 1], 512, 16, 1)),
]


DIRECT = parse_options({"planConstraints": '{"transform": {"expandDims": []}}'}, "test")


def _partials(graph, params, plan, act_src, ker_src, dst_src):
    """The partial-sum vertices planned from ``act_src`` ``[G, B, Ci, *F]``, ``ker_src``
    ``[G, Co, Ci, *K]`` and ``dst_src`` (ids or positions of the operands)."""
    need_reduce = plan.parts[-1] > 1 or plan.partials_type != params.outputType
    nd = params.getNumFieldDims()
    act_src = act_src.transpose([0, 1, *range(3, 3 + nd), 2])
    ker_src = ker_src.transpose([0, *range(3, 3 + nd), 1, 2])
    rng = _ranges(plan, params)
    return plan_partials(graph, plan, params, rng, act_src, ker_src, dst_src, need_reduce,
                         "c", plan.partials_type, params.inputType)  # fmt: skip


@pytest.mark.parametrize("preset,params", FIELDS)
def test_partial_fields_from_ids_equal_positions_looked_up(preset, params):
    """Gathering ids equals gathering positions, then each position's id (the old path),
    with a destination whose ids are not in row-major order (a grouped layout)."""
    graph = _graph(preset)
    plan = _plan(graph, params, DIRECT)
    act = graph.addVariable(params.inputType, params.inputShape(), "x")
    g, b, ci = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    act = act.reshape([b, g, ci, *params.inputFieldShape]).dimShuffle(
        [1, 0, 2, *range(3, 3 + params.getNumFieldDims())]
    )
    ker = graph.addVariable(params.inputType, params.weightsShape(), "w")
    co = params.outputChannelsPerConvGroup
    cpg = partial_chans_per_group(plan.method, co, plan.out_chans_per_group)
    need_reduce = plan.parts[-1] > 1 or plan.partials_type != params.outputType
    lead = [plan.parts[-1]] if need_reduce else []
    _, dst = grouped_output(graph, FLOAT, lead, g, b, params.getOutputFieldShape(), co, cpg, "d")
    assert not dst.index.flags.c_contiguous or cpg == 1

    def positions(t):
        return np.arange(t.numElements(), dtype=np.int64).reshape(t.shape())

    by_ids = _partials(graph, params, plan, act.index, ker.index, dst.index)
    by_pos = _partials(graph, params, plan, positions(act), positions(ker), positions(dst))
    for name, t in (("ins", act), ("ws", ker), ("outs", dst)):
        a, p = getattr(by_ids, name), getattr(by_pos, name)
        got = a.flat if a.runs is None else np.asarray(a.runs)  # ids found as runs
        pos = p.flat if p.runs is None else np.asarray(p.runs)
        np.testing.assert_array_equal(got, t.flat_index()[pos], err_msg=name)
        np.testing.assert_array_equal(a.sizes, p.sizes)
        np.testing.assert_array_equal(a.vectors, p.vectors)


def test_expanded_zeros_read_the_constant_on_their_own_tile():
    """An im2col pass lowered without rearranging (as a serial split lowers its parts):
    each zero the vertices read is the zero constant of the vertex's tile, and the
    output equals numpy's."""
    from poplar_api import Engine
    from poplar_api.poplin.conv import _canonical_act, _conv, _public_act
    from tests.test_poplin_conv import ref_conv

    params = poplin.ConvParams(FLOAT, 2, [6, 6], [3, 3], 4, 8, 1,
                               paddingLower=[1, 1], paddingUpper=[1, 1])  # fmt: skip
    device = IPUModel("ipu1").createDevice()
    graph = Graph(device.getTarget())
    opts = parse_options({"planConstraints": '{"transform": {"expandDims": [0, 1]}}'}, "t")
    plan = _plan(graph, params, opts)
    assert plan.expanded
    x = graph.addVariable(FLOAT, params.inputShape(), "x")
    graph.mapElements(x, 0)
    w = graph.addVariable(FLOAT, params.weightsShape(), "w")
    graph.mapElements(w, 1)
    seq = prog.Sequence()
    act = _canonical_act(x, 1, params.inputChannelsPerConvGroup)
    y = _public_act(_conv(graph, act, w, params, opts, seq, "c"))
    st = graph._state
    zeros_read = 0
    for vid in range(graph.getNumVertices()):
        inst = st.vertices[vid]
        if "in" not in inst.fields:
            continue
        ids = np.concatenate([np.asarray(v) for v in inst.fields["in"]])
        const = ids >= x.numElements() + w.numElements()  # not an operand's element
        zeros_read += int(const.sum())
        if const.any():
            tiles = st.spaces[4].tile[ids[const]]
            assert (tiles == inst.tile).all()
    assert zeros_read > 0
    graph.createHostWrite("x", x)
    graph.createHostWrite("w", w)
    graph.createHostRead("y", y)
    rng = np.random.default_rng(3)
    xv = rng.standard_normal(params.inputShape()).astype(np.float32)
    wv = rng.standard_normal(params.weightsShape()).astype(np.float32)
    eng = Engine(graph, seq)
    eng.load(device)
    eng.writeTensor("x", xv)
    eng.writeTensor("w", wv)
    eng.run(0)
    out = np.zeros(params.outputShape(), np.float32)
    eng.readTensor("y", out)
    np.testing.assert_allclose(out, ref_conv(xv, wv, params), rtol=1e-5, atol=1e-4)


# ------------------------------------------------------------------ reduction fields
def test_reduction_connects_each_output_to_its_partials():
    params = poplin.ConvParams(FLOAT, 1, [4, 4], [1, 1], 512, 16, 1)
    graph = _graph("ipu2")
    opts = parse_options(None, "t")
    plan = _plan(graph, params, opts)
    pci = plan.parts[-1]
    assert pci > 1
    g, b, co = 1, 1, 16
    field = params.getOutputFieldShape()
    _, out_var = grouped_output(graph, FLOAT, [], g, b, field, co, 1, "out")
    _, partials = grouped_output(graph, FLOAT, [pci], g, b, field, co, 1, "partials")
    seq = prog.Sequence()
    first = graph.getNumVertices()
    reduce_partials(graph, partials, out_var, plan, _ranges(plan, params), seq, "r")
    # position of every id in the output and in each part of the partials
    out_pos = {int(i): k for k, i in enumerate(out_var.flat_index())}
    total = out_var.numElements()
    part_pos = {int(i): k for k, i in enumerate(partials.flat_index())}
    seen = np.zeros(total, np.int64)
    tiles = graph.elementTiles(out_var)
    st = graph._state
    for vid in range(first, graph.getNumVertices()):
        inst = st.vertices[vid]
        fields = inst.fields
        out = np.concatenate([np.atleast_1d(np.asarray(v)) for v in _vectors(fields["out"])])
        pos = np.array([out_pos[int(i)] for i in out])
        seen[pos] += 1
        assert (tiles[pos] == inst.tile).all()
        parts = [np.asarray(v) for v in _vectors(fields["partials"])]
        got = np.concatenate(parts) if parts else np.zeros(0, np.int64)
        got_pos = np.array([part_pos[int(i)] for i in got])
        if "initialPartial" in fields:
            own = np.asarray(_vectors(fields["initialPartial"])[0])
            own_pos = np.array([part_pos[int(i)] for i in own])
            p = int(own_pos[0]) // total
            np.testing.assert_array_equal(own_pos, p * total + pos)
            rows = [r for r in range(pci) if r != p]
        else:
            rows = list(range(pci))
        want = np.concatenate([r * total + pos for r in rows])
        np.testing.assert_array_equal(got_pos, want)
    np.testing.assert_array_equal(seen, np.ones(total, np.int64))


def _vectors(value) -> list:
    """A field's connection as a list of id arrays (a Vector field is one)."""
    if isinstance(value, list):
        return value
    return [np.asarray(value)]


# ------------------------------------------------------------------ fields as runs
def _assembler(seed: int) -> Assembler:
    """Rows of three shapes over one source, interleaved in vertex order: runs inside
    rows, runs going on from one vertex into the next, and single ids."""
    rng = np.random.default_rng(seed)
    source = np.arange(1000, 5000, dtype=np.int64)
    source[2004:2010] = rng.permutation(source[2004:2010])  # a scattered stretch
    asm = Assembler(9)
    asm.gather(
        np.array([0, 1, 2]), source, np.array([0, 40, 80]), np.arange(40), np.array([25, 15])
    )  # fmt: skip  (0 -> 1 -> 2: one run on)
    asm.gather(np.array([4, 6]), source, np.array([300, 2000]), np.r_[0:16, 32:48],
               np.array([32]))  # fmt: skip
    asm.gather(np.array([3, 5, 7]), source, np.array([120, 700, 2050]),
               np.r_[0:10, 30:40], np.array([10, 10]))  # fmt: skip
    asm.gather(np.array([8]), source, np.array([0]), np.zeros(0, np.int64), np.array([0]))
    return asm


@pytest.mark.parametrize("seed", [0, 1])
def test_fields_found_as_runs_equal_the_ids_gathered(seed):
    ids = _assembler(seed).field()
    runs = _assembler(seed).run_field()
    assert runs is not None and runs.flat is None
    np.testing.assert_array_equal(np.asarray(runs.runs), ids.flat)
    want = as_runs(ids.flat) or RunIds(*_all_runs(ids.flat), ids.flat.size)
    np.testing.assert_array_equal(runs.runs.starts, want.starts)  # maximal runs
    np.testing.assert_array_equal(runs.runs.firsts, want.firsts)
    for name in ("sizes", "vectors", "at", "piece_at"):
        np.testing.assert_array_equal(getattr(runs, name), getattr(ids, name))


@pytest.mark.parametrize("seed", range(4))
def test_rows_of_random_runs_find_the_runs_of_their_ids(monkeypatch, seed):
    """Rows gathered from a source by a pattern find the maximal runs of the ids
    gathered: sources of random runs (some continuing where the pattern jumps, some
    repeating), patterns of random stretches (room for any number of runs)."""
    from poplar_api.poplin import conv_blocks

    monkeypatch.setattr(conv_blocks, "MIN_ELEMENTS_PER_RUN", 1)
    rng = np.random.default_rng(seed)
    blocks = [np.arange(a, a + int(rng.integers(1, 40))) for a in rng.integers(0, 600, 60)]
    source = np.concatenate(blocks).astype(np.int64)
    rel = np.cumsum(rng.choice([1] * 12 + [2, 5], 60)).astype(np.int64)
    members = rng.permutation(12)[:8]
    base = rng.integers(0, source.size - int(rel.max()), members.size)
    asm, again = Assembler(12), Assembler(12)
    for a in (asm, again):
        a.gather(members, source, base, rel, np.array([rel.size]))
    ids = asm.field()
    found = again.run_field()
    np.testing.assert_array_equal(np.asarray(found.runs), ids.flat)
    want = RunIds(*_all_runs(ids.flat), ids.flat.size)
    np.testing.assert_array_equal(found.runs.starts, want.starts)
    np.testing.assert_array_equal(found.runs.firsts, want.firsts)


def _all_runs(flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every run's start and first id, written out (no limit on their number)."""
    starts = np.flatnonzero(np.r_[True, np.diff(flat) != 1])
    return starts, flat[starts]


def test_rows_with_negative_sources_are_not_found_as_runs():
    asm = Assembler(1)
    asm.gather(np.array([0]), np.array([5, -1, 7]), np.array([0]), np.arange(3), np.array([3]))
    assert asm.run_field() is None


def test_runs_between_equal_the_runs_of_the_slice():
    flat = _assembler(0).field().flat
    runs = RunIds(*_all_runs(flat), flat.size)
    for a, b in [(0, flat.size), (3, 70), (40, 41), (100, 180), (25, 200), (0, 15), (60, 62)]:
        got = runs_between(runs, a, b)
        want = as_runs(flat[a:b])
        if want is None:
            assert got is None
        else:
            np.testing.assert_array_equal(got.starts, want.starts)
            np.testing.assert_array_equal(got.firsts, want.firsts)
            assert got.size == want.size


def _vertex_class():
    from poplar_api.codelet import Input, VectorList, Vertex

    class RunsProbe(Vertex):
        a = Input(VectorList(FLOAT))

        @staticmethod
        def compute(a):  # pragma: no cover - compiled, never run here
            return True

    return RunsProbe


def test_run_segments_make_the_list_block_segments_make():
    from poplar_api.graph_connections import RunSegments, Segments

    cls = _vertex_class()
    blocks = []
    for kind in ("ids", "runs"):
        graph = _graph("ipu1")
        graph.addCodelets(cls)
        var = graph.addVariable(FLOAT, [400], "v")
        graph.mapElements(var, 0)
        flat = np.r_[0:100, 200:300, 150:160]
        sizes, vectors = np.array([50, 50, 100, 10]), np.array([1, 3])
        cs = graph.addComputeSet("cs")
        if kind == "ids":
            value = Segments(var.elements(flat), sizes, vectors)
        else:
            value = RunSegments(var, RunIds(*_all_runs(flat), flat.size), sizes, vectors)
        graph.addVertices(cs, cls, [0, 0], {"a": value})
        blocks.append(graph._state.vertices.list_blocks[-1].fields["a"])
    (o1, b1, e1, i1), (o2, b2, e2, i2) = blocks
    for x, y in ((o1, o2), (b1, b2), (e1, e2)):
        np.testing.assert_array_equal(x, y)
    assert isinstance(i1, RunIds) and isinstance(i2, RunIds) and i1.dtype == i2.dtype
    np.testing.assert_array_equal(i1.starts, i2.starts)
    np.testing.assert_array_equal(i1.firsts, i2.firsts)


def test_run_segments_outside_the_graph_name_the_field():
    from poplar_api.errors import GraphError
    from poplar_api.graph_connections import RunSegments

    cls = _vertex_class()
    graph = _graph("ipu1")
    graph.addCodelets(cls)
    var = graph.addVariable(FLOAT, [40], "v")
    graph.mapElements(var, 0)
    cs = graph.addComputeSet("cs")
    runs = RunIds(np.array([0]), np.array([30]), 20)  # ids 30..49 of 40
    with pytest.raises(GraphError, match=r"field 'a'.*ids in \[30, 50\), outside the 40"):
        graph.addVertices(cs, cls, [0], {"a": RunSegments(var, runs, [20])})
    with pytest.raises(GraphError, match="must cover the 20 ids"):
        RunSegments(var, runs, [10])


# ------------------------------------------------------------------ mappings, expansion
@pytest.mark.parametrize("lead,cpg", [([], 4), ([3], 8), ([2], 1)])
def test_grouped_output_mapped_in_memory_order_as_its_view_was(lead, cpg):
    new, old = _graph("ipu1"), _graph("ipu1")
    args = (FLOAT, lead, 2, 3, [5, 4], 16, cpg, "o")
    var, view = grouped_output(new, *args)
    old_var, old_view = grouped_output(old, *args)
    rng = np.random.default_rng(4)
    tiles = rng.integers(0, new.getTarget().getNumTiles(), size=view.shape())
    map_grouped_output(new, var, tiles, len(lead))
    old.mapElements(old_view, tiles)  # before: every element of the view looked up
    np.testing.assert_array_equal(new.elementTiles(view), tiles.reshape(-1))
    np.testing.assert_array_equal(new.elementTiles(var), old.elementTiles(old_var))


def test_map_elements_of_consecutive_ids_in_any_memory_order():
    from poplar_api.errors import GraphError

    graph = _graph("ipu1")
    var = graph.addVariable(FLOAT, [6, 10], "v")
    tiles = np.arange(60).reshape(10, 6).T  # a transposed (non-contiguous) array
    graph.mapElements(var, tiles)
    np.testing.assert_array_equal(graph.elementTiles(var), np.ascontiguousarray(tiles).reshape(-1))
    bad = tiles.copy()
    bad[2, 3] = graph.getTarget().getNumTiles()
    with pytest.raises(GraphError, match=r"tensor 'v'.*element 23 has tile"):
        graph.mapElements(var, bad.T.T)


EXPANDED = [
    poplin.ConvParams(FLOAT, 2, [6, 5], [3, 2], 3, 4, 1, paddingLower=[1, 0], paddingUpper=[1, 1]),
    poplin.ConvParams(FLOAT, 1, [9], [3], 2, 2, 2, stride=[2]),
]


@pytest.mark.parametrize("params", EXPANDED)
def test_expanded_input_ids_equal_a_gather_by_index_arrays(params):
    from poplar_api.poplin.conv_params import expanded_input_index

    g, b, c = params.numConvGroups, params.batchSize, params.inputChannelsPerConvGroup
    shape = [g, b, c, *params.inputFieldShape]
    ids = np.random.default_rng(1).permutation(int(np.prod(shape))).reshape(shape)
    # before: one index array per field dimension, every element gathered by all of them
    ot, n = params.outputTransform, params.getNumFieldDims()
    cols = []
    for d, m in enumerate(dim_maps(params)):
        inner = params.getOutputSize(d) - ot.paddingLower[d] - ot.paddingUpper[d]
        col = m[:, ot.paddingLower[d] : ot.paddingLower[d] + inner]
        shape = [1] * (2 * n)
        shape[d], shape[n + d] = col.shape
        cols.append(col.reshape(shape))
    valid = np.ones(np.broadcast_shapes(*[c.shape for c in cols]), bool)
    for c in cols:
        valid &= c >= 0
    want = ids[(slice(None), slice(None), slice(None), *[np.maximum(x, 0) for x in cols])]
    want = np.where(valid, want, -1).reshape(g, b, -1, *valid.shape[n:])
    np.testing.assert_array_equal(expanded_input_index(params, ids), want)
