"""The compiled kernels are typed once for the calls the simulator makes.

Numba compiles a kernel once per distinct tuple of argument types: an int32 and an
int64 array, a read-only and a writable one, or the constant ``0`` (typed as the
literal ``Literal[int](0)``) and an ``int64`` each give another specialisation, which
costs its compile time (0.3-3 s of CPU each) in every process that has no disk cache
yet: a fresh clone's first test run, a new sweep or Dask worker.

These checks type a kernel's callers afresh (an uncached copy of the caller, so that
Numba types every call inside it instead of loading the caller's machine code) and
look at the specialisations its callees got.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from numba.core import types

from ipusim.tile import first_fit
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.types import FLOAT


def _literal_signatures(dispatcher) -> list[tuple]:
    """The signatures of ``dispatcher`` that hold a literal (constant) type."""
    return [sig for sig in dispatcher.signatures if any(isinstance(t, types.Literal) for t in sig)]


def test_first_fit_is_called_with_an_int64_start_from_every_path():
    """``_after_packed`` scans from address 0 (no packed prefix) or from the packed
    prefix's aligned top: both paths call ``_first_fit`` with one ``int64`` start, so
    the placement compiles one ``_first_fit``, never one more for the constant 0."""
    caller = numba.njit(first_fit._after_packed.py_func)  # uncached: typed here
    n = 4
    starts = np.array([0, 8, 16, 40], np.int64)
    ends = np.array([8, 16, 20, 48], np.int64)
    los = np.zeros(n, np.int64)
    his = np.full(n, 9, np.int64)
    # no prefix: the plain first fit from 0 finds the gap at 20..40
    assert caller(starts, ends, los, his, n, 16, 4, 0, 9, 0, 0, 4) == 20
    # a prefix of 2 blocks ending at 16, alignment 8: scanned from 16, the gap at 24
    assert caller(starts, ends, los, his, n, 16, 8, 0, 9, 2, 16, 4) == 24
    # an alignment that is not a multiple of the minimum: every block scanned
    assert caller(starts, ends, los, his, n, 16, 6, 0, 9, 2, 16, 4) == 24
    # the joint fit of a group of live ranges starts its candidate at 0 as well
    joint = numba.njit(first_fit._joint_fit.py_func)  # uncached: typed here
    lo = np.zeros(2, np.int64)
    hi = np.full(2, 9, np.int64)
    after = np.array([1, -1], np.int64)
    assert joint(starts, ends, los, his, n, 16, 4, lo, hi, 0, after) == 20
    assert joint(starts, ends, los, his, n, 24, 8, lo, hi, 0, after) == 48
    assert _literal_signatures(first_fit._first_fit) == []
    int64 = types.int64
    called = {sig[4:] for sig in first_fit._first_fit.signatures}
    assert called == {(int64,) * 6}


def test_the_intrinsics_bounds_check_is_inlined_not_compiled_per_constant():
    """The vector loads and stores check their indices with ``_check`` inlined, so
    the constants 2 and 4 of the float2 and half4 accesses compile no copies of it,
    and an access outside the field still raises ``IndexError``."""
    from poplar_api import ipu_intrinsics as intr

    before = len(intr._check.signatures)
    a = np.arange(8, dtype=np.float32)
    assert intr.load_float2(a, 3) == (6.0, 7.0)
    assert intr.load_half4(a, 1) == (4.0, 5.0, 6.0, 7.0)
    intr.store_float2(a, 0, (np.float32(9), np.float32(8)))
    assert a[:2].tolist() == [9.0, 8.0]
    with pytest.raises(IndexError, match="outside the field"):
        intr.load_float2(a, 4)
    assert len(intr._check.signatures) == before == 0


def test_the_intrinsics_are_cached_on_disk():
    """Every intrinsic keeps its machine code in Numba's disk cache, as the other
    kernels do, so a process that compiles a driver or a counted kernel calling it
    loads the intrinsic instead of compiling it again (a dispatcher without a disk
    cache has no cache path)."""
    from poplar_api import ipu_intrinsics as intr

    uncached = [f.__name__ for f in intr.INSTRUCTIONS if f.stats.cache_path is None]
    assert uncached == []


def _read_only(dispatcher, arg: int) -> set[bool]:
    """Whether argument ``arg`` is a read-only array, over the signatures of
    ``dispatcher`` compiled (or loaded) in this process."""
    return {not sig[arg].mutable for sig in dispatcher.signatures}


def test_run_starts_gets_read_only_ids_from_writable_and_read_only_arrays():
    """``as_runs`` hands ``_run_starts`` read-only C-contiguous ids whatever the caller
    passed (a tensor's index is read-only, a vertex field's ids are not, a view's may
    be strided): one specialisation."""
    from poplar_api import run_ids

    ids = np.r_[np.arange(100, 140), np.arange(7, 47)].astype(np.int64)
    frozen = ids.copy()
    frozen.flags.writeable = False
    strided = np.repeat(ids, 2)[::2]  # the same ids, a stride of 16 bytes (a view's)
    assert not strided.flags.c_contiguous
    for given in (ids, frozen, strided):
        runs = run_ids.as_runs(given)
        assert runs is not None and runs.starts.tolist() == [0, 40]
        assert runs.firsts.tolist() == [100, 7]
    assert ids.flags.writeable  # the caller's array is left as it was
    layouts = {(sig[0].mutable, sig[0].layout) for sig in run_ids._run_starts.signatures}
    assert layouts == {(False, "C")}


def test_take_gets_read_only_ids_for_views_with_and_without_an_index():
    """``Tensor.elements`` of many positions, of a tensor whose ids follow from its
    start and of one with an index of its own, passes ``_take`` read-only ids both
    times (one specialisation, not one more for a writable empty array)."""
    from poplar_api import FLOAT, Graph, IPUModel, tensor_views

    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    t = graph.addVariable(FLOAT, [400], "t")
    gathered = t.elements(np.arange(399, 99, -2))  # 150 positions, not a run
    again = gathered.elements(np.arange(140, 0, -1))
    assert again.numElements() == 140
    assert _read_only(tensor_views._take, 0) == {True}


def test_the_id_passes_get_read_only_contiguous_ids_however_the_ids_come():
    """The id passes of the lowering (span, consecutive ids, marking) take the ids
    writeable, read-only or strided, and give the same answers as numpy, with one
    read-only C-contiguous type each (a strided or writeable argument would be another
    specialisation to compile and load)."""
    from poplar_api.lowering import runs

    base = np.r_[np.arange(50, 90), np.arange(3, 13)].astype(np.int64)
    frozen = base.copy()
    frozen.flags.writeable = False
    strided = np.repeat(base, 2)[::2]  # the same ids, a stride of 16 bytes
    assert not strided.flags.c_contiguous
    for given in (base, frozen, strided):
        assert runs.span(given) == (int(base.min()), int(base.max()) + 1)
        assert runs.as_index(given[:40]) == slice(50, 90)
        lo, hi = runs.span(given)
        marked = np.zeros(hi - lo, bool)
        assert runs.mark_new(given, lo, marked) == 0
        assert runs.mark_new(given[:5], lo, marked) == 5  # set already
        hits = runs.marked_refs(given, lo, marked)
        np.testing.assert_array_equal(hits, np.flatnonzero(np.isin(base, base)))
    assert base.flags.writeable  # the caller's array is left as it was
    for kernel in (runs._span, runs._consecutive, runs._mark_new, runs._marked_refs):
        layouts = {(sig[0].mutable, sig[0].layout) for sig in kernel.signatures}
        assert layouts == {(False, "C")}, (kernel.__name__, layouts)


def test_the_field_pieces_get_read_only_bounds_however_the_table_holds_them():
    """A field table's ``bounds`` are its writeable offsets, or for a vector list a
    read-only array made once: the passes finding a field's remote reads take them
    read-only either way (one specialisation each, not one more per flavour)."""
    from poplar_api.lowering import pieces, strided

    ids = np.array([0, 1, 2, 9, 10, 5, 6, 7, 8, 3], np.int32)  # as the lowering passes them
    owner = np.repeat(np.arange(4, dtype=np.int16), 3)  # 12 elements, 3 per tile
    vtiles = np.array([3, 0, 1], np.int64)
    bounds = np.array([0, 3, 5, 10], np.int64)
    frozen = bounds.copy()
    frozen.flags.writeable = False
    found = []
    for given in (bounds, frozen):
        into = pieces.Pieces(ids.size)
        strided.field_pieces(ids, given, vtiles, owner, into, strided.StridedPieces())
        found.append([a.tolist() for a in into.arrays()])
        found.append([a.tolist() for a in pieces.field_pieces(ids, given, vtiles, owner)])
    # vertex 0 on tile 3 reads 0..2 (tile 0); vertex 1 on tile 0 reads 9 (tile 3) and
    # 10 (tile 3); vertex 2 on tile 1 reads 5 (its own), 6..8 (tile 2) and 3 (its own)
    expected = [[0, 9, 6], [3, 2, 3], [3, 0, 1]]
    assert found == [expected] * 4
    assert bounds.flags.writeable  # the caller's array is left as it was
    assert _read_only(pieces._field_pieces, 2) == {True}
    assert _read_only(strided._field_pieces, 1) == {True}


def test_the_separable_ids_check_gets_read_only_ids_from_writable_and_read_only_ids():
    """``separable_ids`` hands its compiled check the ids read-only whether the caller's
    ids are writable or not (one specialisation, not one more for writable ids), and
    leaves the caller's array writable."""
    from poplar_api.poplin import conv_ids

    ids = (np.arange(4)[:, None] * 10 + np.arange(3)[None, :]).astype(np.int64)
    frozen = ids.copy()
    frozen.flags.writeable = False
    for given in (ids, frozen):
        sep = conv_ids.separable_ids(given)
        assert sep is not None
        np.testing.assert_array_equal(sep.tables[0][:, None] + sep.tables[1][None, :], ids)
    broken = ids.copy()
    broken[2, 1] += 1
    broken.flags.writeable = False
    assert conv_ids.separable_ids(broken) is None  # one id off the sum
    assert ids.flags.writeable
    assert _read_only(conv_ids._is_separable, 0) == {True}


def test_take_gets_read_only_positions_from_writable_and_read_only_positions():
    """``Tensor.elements`` of many positions hands ``_take`` the positions read-only
    whether the caller's array is writable or not (one specialisation), leaving the
    caller's array writable."""
    from poplar_api import FLOAT, Graph, IPUModel, tensor_views

    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    t = graph.addVariable(FLOAT, [400], "t")
    view = t.elements(np.arange(399, -1, -1))  # a view with an index of its own
    positions = np.arange(300, 100, -1)  # 200 positions, many enough to be gathered
    frozen = positions.copy()
    frozen.flags.writeable = False
    for given in (positions, frozen):
        got = view.elements(given)
        assert got.numElements() == 200
        # view's position p is t's element 399 - p
        assert np.array_equal(got.flat_index() - t.flat_index()[0], 399 - positions)
    assert positions.flags.writeable
    assert _read_only(tensor_views._take, 2) == {True}


def test_spread_by_use_hands_its_pass_a_read_only_block_map():
    """``spread_by_use`` gives ``_spread`` the block of each element read-only whether
    the caller's map is an int64 array it may write or a read-only one (one
    specialisation), with the same tiles either way."""
    from poplar_api.poplin import conv_layout

    block = np.repeat(np.arange(3, dtype=np.int64), 8)  # 3 blocks of 8 elements
    users = np.array([[0, 1], [2, 3], [4, 5]], np.int64)
    frozen, frozen_users = block.copy(), users.copy()
    frozen.flags.writeable = frozen_users.flags.writeable = False
    got = [
        conv_layout.spread_by_use(b, u, 2, 4).tolist()
        for b, u in ((block, users), (frozen, frozen_users))
    ]
    # each block's 8 elements in two chunks of 4 (grain 2, at least 4), one per user
    expected = [t for b in range(3) for t in [2 * b] * 4 + [2 * b + 1] * 4]
    assert got == [expected, expected]
    assert block.flags.writeable and users.flags.writeable
    assert _read_only(conv_layout._spread, 0) == {True}
    assert _read_only(conv_layout._spread, 1) == {True}  # the users too


def test_affine_copy_hands_its_passes_read_only_ids():
    """``affine_copy`` hands ``_split`` and ``_on_grid`` read-only ids whether the
    caller's index arrays are writable, read-only or int32 (one specialisation each),
    with the same copy every time."""
    from poplar_api.lowering import affine_copy

    src = (np.arange(64)[:, None] + 64 * np.arange(128)).reshape(-1)  # [128, 64] transposed
    dst = np.arange(src.size, dtype=np.int64)
    assert src.flags.writeable and dst.flags.writeable
    got = affine_copy.affine_copy(src, dst)
    ro_src, ro_dst = src.copy(), dst.copy()
    ro_src.flags.writeable = ro_dst.flags.writeable = False
    assert got is not None and affine_copy.affine_copy(ro_src, ro_dst) == got
    assert affine_copy.affine_copy(src.astype(np.int32), dst) == got
    assert src.flags.writeable and dst.flags.writeable  # the caller's arrays are untouched
    assert _read_only(affine_copy._split, 0) == _read_only(affine_copy._on_grid, 0) == {True}


def test_the_assembled_rows_are_gathered_from_a_read_only_source():
    """``Assembler`` hands ``_gather_rows`` its source (the ids gathered, or the piece
    sizes) read-only whether the caller's array is writable or not (one
    specialisation), with the same field either way."""
    from poplar_api.poplin import conv_blocks

    source = np.arange(100, 120, dtype=np.int64)
    frozen = source.copy()
    frozen.flags.writeable = False
    fields = []
    for given in (source, frozen):
        asm = conv_blocks.Assembler(3)
        sizes = np.array([2, 1], np.int64)
        asm.gather(np.array([2, 0]), given, np.array([5, 1]), np.array([0, 1, 4]), sizes)
        asm.add(np.array([1]), np.array([[7, 8, 9]], np.int64), sizes)
        field = asm.field()
        fields.append((field.flat.tolist(), field.sizes.tolist()))
    # vertex 0: source[1 + (0, 1, 4)], vertex 1: (7, 8, 9), vertex 2: source[5 + ...]
    expected = ([101, 102, 105, 7, 8, 9, 105, 106, 109], [2, 1] * 3)
    assert fields == [expected, expected]
    assert source.flags.writeable
    assert _read_only(conv_blocks._gather_rows, 0) == {True}


def test_the_machine_advances_its_clocks_by_read_only_cycles_on_any_machine():
    """A compute set's per-tile cycles are a cost array the timing model shares (made
    read-only) on a machine of many tiles and the cost's own array on a small one: the
    machine adds either to its clocks through one compiled ``_advance``."""
    from ipusim import machine
    from poplar_api import FLOAT, Engine, Graph, IPUModel, popops
    from poplar_api import program as prog

    for preset in ("tiny", "ipu2"):  # 8 tiles, 1472 tiles
        device = IPUModel(preset).createDevice()
        graph = Graph(device.getTarget())
        a = graph.addVariable(FLOAT, [4, 16], "a")
        for row in range(4):
            graph.setTileMapping(a[row], row)
        seq = prog.Sequence()
        popops.addInPlace(graph, a, a, seq)  # one compute set on tiles 0-3
        out = graph.addDeviceToHostFIFO("out", FLOAT, 64)
        seq.add(prog.Copy(a, out))
        engine = Engine(graph, seq)
        engine.load(device)
        got = np.zeros(64, np.float32)
        engine.connectStream("out", got)
        engine.run(0)
        assert not got.any()  # a variable never written reads as zeros: 0 + 0
    assert _read_only(machine._advance, 1) == {True}


def test_a_field_is_filled_from_read_only_joined_ids_however_they_were_joined():
    """The ids of a field's listed vertices come joined into a new array or as a
    read-only view of the graph's own: ``fill_field`` hands ``_fill_field`` them
    read-only either way (one specialisation), with the same field."""
    from poplar_api.lowering import runs

    offsets = np.array([0, 3, 5, 7], np.int64)
    begin = np.array([10, -1, 40], np.int64)  # vertex 1 listed, the others runs
    joined = np.array([7, 3], np.int64)
    frozen = joined.copy()
    frozen.flags.writeable = False
    for given in (joined, frozen):
        ids = np.empty(7, np.int64)
        runs.fill_field(ids, offsets, begin, -1, np.array([1], np.int64), given)
        assert ids.tolist() == [10, 11, 12, 7, 3, 40, 41]
    assert joined.flags.writeable
    assert _read_only(runs._fill_field, 5) == {True}


class _Doubles(Vertex):
    """``out = 2 a`` element by element: a loop whose cycles counted mode counts."""

    a = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(a, out):
        for i in range(a.shape[0]):
            out[i] = a[i] + a[i]
        return True


def test_counted_cycles_reach_the_machine_read_only():
    """A counted compute set's per-tile cycles are the counting's own (writeable)
    array; the machine still adds them to its clocks through the one read-only
    ``_advance``, and the counted cycles, doubled values and clocks are unchanged."""
    from ipusim import machine
    from poplar_api import DeviceManager, Engine, Graph, TargetType
    from poplar_api import program as prog
    from poplar_api.counted import vertexCycles

    device = DeviceManager("tiny", 1).getDevices(TargetType.IPU, 1)[0]
    assert device.attach()
    graph = Graph(device.getTarget())
    graph.addCodelets(_Doubles)
    a = graph.addVariable(FLOAT, [4, 8], "a")
    out = graph.addVariable(FLOAT, [4, 8], "out")
    cs = graph.addComputeSet("doubles")
    for tile in range(4):
        graph.setTileMapping(a[tile], tile)
        graph.setTileMapping(out[tile], tile)
        v = graph.addVertex(cs, "_Doubles", {"a": a[tile], "out": out[tile]})
        graph.setTileMapping(v, tile)
    values = np.arange(32, dtype=np.float32)
    graph.setInitialValue(a, values.reshape(4, 8))
    graph.createHostRead("out", out)
    with vertexCycles("counted"):
        engine = Engine(graph, prog.Execute(cs))
    engine.load(device)
    engine.run()
    got = np.zeros(32, np.float32)
    engine.readTensor("out", got)
    assert np.array_equal(got, 2 * values)
    assert _read_only(machine._advance, 1) == {True}


def test_the_run_search_and_the_bus_walk_are_inlined_into_their_passes():
    """The binary search over runs (``_last_at_or_before``) and the walk to a tile's
    bus partner (``bus_pair``, shared with ``strided.pair_common``) are inlined into
    the passes that call them, so they compile no versions of their own (there were
    two of the search: writeable runs with the constant 0 from ``take_run_ranges``,
    read-only runs from ``_run_ranges``). ``pair_overlap`` joins touching ranges in
    its own loops (no helper to compile twice, for the constant first range 0 and a
    later one). The passes still give the ids and overlaps worked out by hand (the
    passes as cached: typing uncached copies here would compile three large passes in
    every run of the suite)."""
    from poplar_api.lowering import bus, runs

    assert not hasattr(bus, "_joined")
    for helper in (runs._last_at_or_before, bus.bus_pair):
        assert helper.targetoptions.get("inline") == "always", helper.__name__
    # runs: positions 0..3 hold ids 10..13, positions 4..7 ids 100..103
    starts = np.array([0, 4], np.int64)
    firsts = np.array([10, 100], np.int64)
    begins = np.array([1, 3], np.int64)
    ends = np.array([3, 7], np.int64)
    out = np.zeros(6, np.int64)
    assert runs.take_run_ranges(starts, firsts, 8, begins, ends, out, 0) == 6
    assert out.tolist() == [11, 12, 13, 100, 101, 102]
    lo, hi = runs.run_ranges(starts, firsts, 8, begins, ends)
    assert list(zip(lo.tolist(), hi.tolist(), strict=True)) == [(11, 13), (13, 14), (100, 103)]
    # tile 0 receives [0, 3) and [3, 8) (touching: joined), tile 1 [2, 6): 4 in common
    tile = np.array([0, 0, 1], np.int64)
    common = np.zeros(4, np.int64)
    bus.pair_overlap(tile, np.array([0, 3, 2], np.int64), np.array([3, 8, 6], np.int64), 4, common)
    assert common.tolist() == [4, 4, 0, 0]
    assert runs._last_at_or_before.signatures == []
    assert bus.bus_pair.signatures == []
    assert len(bus.pair_overlap.signatures) == 1


def test_an_image_fields_ids_are_read_only_however_they_were_made():
    """An :class:`ImageField` keeps its ids read-only and contiguous (a view of
    writeable ids, the caller's array left as it was), so the replicas' gathers and
    ReduceAdd's sums over images one signature. ReduceAdd over the images of
    two replicas, from writeable ids, gives the sums worked out with numpy."""
    from poplar_api.codelet_base import RUN_REPLICAS
    from poplar_api.field_images import ImageField
    from poplar_api.poplin import vertices as poplin_vertices

    ids = np.array([5, 0, 3, 1, 4, 2], np.int32)  # two partials of 3 in a space of 6
    out_ids = np.array([2, 0, 1], np.int32)
    rng = np.random.default_rng(3)
    partials = rng.standard_normal((2, 6)).astype(np.float32)
    field = ImageField(
        partials.view(np.uint32), np.dtype(np.float32), ids, np.array([0, 2]),
        np.array([0, 3, 6]), np.dtype(np.float32),
    )  # fmt: skip
    assert not field.ids.flags.writeable and field.ids.tolist() == ids.tolist()
    assert ids.flags.writeable  # the caller's array is left as it was
    image = np.zeros((2, 3), np.float32)
    out = ImageField(
        image.view(np.uint32), np.dtype(np.float32), out_ids, np.array([0, 3]), None,
        np.dtype(np.float32),
    )  # fmt: skip
    cls = poplin_vertices.reduce_add_vertex(FLOAT, FLOAT, update=False)
    token = RUN_REPLICAS.set(2)
    try:
        assert cls.computeBatch({"partials": field, "out": out}, 2, 6).all()
    finally:
        RUN_REPLICAS.reset(token)
    for r in range(2):
        p = partials[r][ids].astype(np.float64)
        want = (p[:3] + p[3:]).astype(np.float32)
        assert image[r][out_ids].tolist() == want.tolist()
    assert len(poplin_vertices._sum_segments.signatures) == 1


def test_piece_runs_and_transfer_counts_get_read_only_contiguous_ids():
    """The test for runs of a connection's pieces (``piece_runs``) and the count of a
    transfer's elements and messages per tile (``_transfer_counts``) take their ids
    read-only (and contiguous) whether the caller's are writeable, read-only or
    strided: one signature each, with the answers worked out by hand."""
    from poplar_api import graph_connections, tensor_views
    from poplar_api.lowering import runs

    ids = np.array([4, 5, 6, 9, 1, 2], np.int64)
    frozen = ids.copy()
    frozen.flags.writeable = False
    begins, sizes = np.array([0, 3, 4], np.int64), np.array([3, 1, 2], np.int64)
    strided = np.repeat(ids, 2)[::2]
    for given in (ids, frozen, strided):
        runs_of = graph_connections._runs_of(given, begins, sizes)
        assert runs_of.tolist() == [True, True, True]
    assert graph_connections._runs_of(ids, np.array([2]), np.array([2])).tolist() == [False]
    owner = np.array([0, 1, 1, 0, 0, 0, 1, 1, 1, 0], np.int16)
    for given in (ids, frozen, strided):
        elements, messages = runs.transfer_counts(given, owner, 2)
        # ids 4 5 | 6 | 9 | 1 2 on tiles 0 0 | 1 | 0 | 1 1: runs of both kinds
        assert elements.tolist() == [3, 3] and messages.tolist() == [2, 2]
    assert ids.flags.writeable
    assert {(not s[0].mutable, s[0].layout) for s in tensor_views.piece_runs.signatures} == {
        (True, "C")
    }
    assert {(not s[0].mutable, s[0].layout) for s in runs._transfer_counts.signatures} == {
        (True, "C")
    }


def test_merge_received_without_pairs_shares_the_planners_compiled_pass():
    """Without a pair map the merge passes an empty one of the planners' type (uint8
    stamps), so a call without pairs and the planners' calls with their maps share one
    compiled pass for a space's int16 tiles; the elements and messages (runs of one
    owner) are those worked out by hand."""
    from poplar_api.lowering import received, runs

    owner = np.array([0, 0, 1, 1, 1, 2, 2, 0, 0, 0], np.int16)
    changes = runs.change_points(owner, owner.size)
    stride = owner.size + 1
    # tile 0 asks for ids 5..7 (owners 2 2 0: 2 messages), tile 1 for 2..5 (1 1 1 2: 2)
    lo = np.array([0 * stride + 5, 1 * stride + 2], np.int64)
    length = np.array([3, 4], np.int64)
    zeros = np.zeros(3, np.int64)
    a, b, tile, elements, messages, _ = received.merge_received(
        lo, length, stride, changes, owner, (zeros, zeros), 3
    )
    assert (a.tolist(), b.tolist(), tile.tolist()) == ([5, 2], [8, 6], [0, 1])
    assert elements.tolist() == [3, 4, 0] and messages.tolist() == [2, 2, 0]
    seen, senders = np.zeros(9, np.uint8), np.zeros(3, np.int64)
    received.merge_received(lo, length, stride, changes, owner, (zeros, zeros), 3, (seen, senders))
    assert senders.tolist() == [2, 2, 0]  # tile 0 from tiles 2 and 0, tile 1 from 1 and 2
    at = received._merge_received.py_func.__code__.co_varnames.index("pairs")
    maps = {sig[at].dtype for sig in received._merge_received.signatures}
    assert maps == {types.uint8}


def test_exchange_tile_cycles_take_the_received_bytes_as_float64_either_way():
    """The received bytes are int64 totals, or float64 where bus sharing takes a part
    off; the per-tile formula gets them as float64 both times (one compiled
    ``_tile_cycles``), with the cycles of the module's formula worked out in numpy."""
    from ipusim.config import load_config
    from ipusim.exchange import internal

    cfg = load_config("tiny")
    ex = cfg.exchange
    active = np.array([True, True, False, True] + [False] * (cfg.num_tiles - 4))
    n = cfg.num_tiles
    sent = np.zeros(n, np.int64)
    sent[:4] = [40, 0, 0, 7]
    received = np.zeros(n, np.int64)
    received[:4] = [0, 45, 9, 3]
    msg_sent = (sent > 0).astype(np.int64)
    msg_received = (received > 0).astype(np.int64)
    distance = np.zeros(n, np.int64)
    distance[:4] = [1, 1, 0, 2]

    def ceil9(q):
        return np.ceil(np.rint(q * 1e9) / 1e9).astype(np.int64)

    for given in (received, received - 0.5):
        got = internal._cycles(cfg, active, sent, given, msg_sent, msg_received, distance)
        want = (
            ceil9(np.maximum(sent, given) / ex.bytes_per_cycle)
            + ex.fixed_latency_cycles
            + ceil9(ex.cycles_per_hop * distance)
            + ceil9(ex.cycles_per_message * (msg_sent + msg_received))
        )
        assert got.tolist() == np.where(active, want, 0).tolist()
    assert {sig[3].dtype for sig in internal._tile_cycles.signatures} == {types.float64}


def test_take_is_compiled_once_for_strided_ids_and_int32_positions():
    """``_take`` is compiled for one tuple of types, ids and positions read-only
    C-contiguous int64: C-contiguous and strided ids (a view's index may be strided)
    and int32 or strided positions reach it as such copies through
    ``Tensor.elements``, and no other tuple is compiled."""
    from poplar_api import FLOAT, Graph, IPUModel, tensor_views

    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    t = graph.addVariable(FLOAT, [20, 30], "t").dimShuffle([1, 0])  # ids not a run
    picked = np.arange(599, 99, -3)
    for positions in (picked, picked.astype(np.int32), picked[::2]):
        got = t.elements(positions).flat_index()
        np.testing.assert_array_equal(got, t.flat_index()[positions])
    strided = graph.addVariable(FLOAT, [30, 20], "s").dimShuffle([1, 0])[3]  # stride 160 B
    assert not strided.flat_index().flags.c_contiguous
    few = np.arange(29, 0, -1)  # (few positions take numpy's gather)
    for positions in (np.tile(few, 4), few):
        got = strided.elements(positions).flat_index()
        np.testing.assert_array_equal(got, strided.flat_index()[positions])
    ids = np.ascontiguousarray(t.flat_index())
    ids.flags.writeable = False
    frozen = picked.view()
    frozen.flags.writeable = False
    out = np.empty(picked.size, np.int64)
    assert tensor_views._compiled_take()(ids, -1, frozen, 600, out) == (-1, False, False)
    np.testing.assert_array_equal(out, t.flat_index()[picked])
    assert tensor_views._take.signatures == [tensor_views.TAKE_TYPES]


def test_the_replica_sum_gets_read_only_ids_however_the_blocks_hold_them():
    """A FLOAT all-reduce's pairs of ids come as slices, a tensor's read-only index or
    writable arrays: the sum and store passes get them read-only each way (one
    specialisation each), with the sums of the replicas added in order in float64."""
    from types import SimpleNamespace

    from poplar_api.gcl import CollectiveOperator
    from poplar_api.lowering import collective

    rng = np.random.default_rng(5)
    data = rng.standard_normal((3, 12)).astype(np.float32)
    frozen = np.array([9, 10, 11])
    frozen.flags.writeable = False
    blocks = [
        (np.array([0, 2, 4]), np.array([1, 3, 5])),  # writable
        (slice(6, 8), frozen[:2]),
        (frozen, slice(6, 9)),
    ]
    full = data.copy()
    collective._fused_sum(
        SimpleNamespace(full={4: full.view(np.uint8)}), blocks, CollectiveOperator.ADD
    )()
    want = data.copy()
    sums = [data[:, src].astype(np.float64).sum(axis=0) for src in ([0, 2, 4], [6, 7], [9, 10, 11])]
    for dst, total in zip(([1, 3, 5], [9, 10], [6, 7, 8]), sums, strict=True):
        want[:, dst] = total.astype(np.float32)
    np.testing.assert_array_equal(full, want)
    for kernel in (collective._replica_sum, collective._store_every_replica):
        assert _read_only(kernel, 1) == {True}, kernel.__name__
