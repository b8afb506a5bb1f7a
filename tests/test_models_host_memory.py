"""Host memory of large graphs: compact id tables that read back as the ids they hold.

A real model's convolutions connect hundreds of millions of element ids through
VectorList fields. The graph keeps a bulk-added VectorList block's ids as int32 when
its id space fits (half the bytes of int64), compute sets share a single such block
instead of copying it, and a session's variable tensors are consecutive views made
without an index array. Each must read back exactly what was connected.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from codelets_common import Gather

from poplar_api import FLOAT, ComputeSet, Graph, IPUModel, Tensor
from poplar_api.graph import Segments, variable_count, variable_tensors
from poplar_api.lowering.computeset import build_table


def _graph() -> Graph:
    g = Graph(IPUModel("ipu2").createDevice().getTarget())
    g.addCodelets([Gather])
    return g


def _scattered(rows: int, cols: int, other: int) -> tuple[Graph, ComputeSet, Tensor, Tensor]:
    """A graph, a compute set, the transpose of a ``rows x cols`` variable flattened
    (ids 0, cols, 2 cols, ...: no two consecutive) and another variable of ``other``
    elements, each mapped to one tile."""
    g = _graph()
    y = g.addVariable(FLOAT, [rows, cols], "y")
    z = g.addVariable(FLOAT, [other], "z")
    g.setTileMapping(y, 0)
    g.setTileMapping(z, 1)
    return g, g.addComputeSet("cs"), y.transpose().flatten(), z


def test_list_block_ids_are_int32_and_read_back_as_the_int64_ids_connected() -> None:
    g, cs, scattered, out = _scattered(4, 5, 2)
    sizes, vectors = [3, 2, 15], [2, 1]
    g.addVertices(cs, Gather, [0, 1], {"parts": Segments(scattered, sizes, vectors), "out": out})
    ids = scattered.flat_index()
    want = [[ids[0:3], ids[3:5]], [ids[5:20]]]  # the pieces in order, per vertex
    table = g._state.vertices
    (block,) = table.list_blocks
    # piece begins, piece ends and ids as int32 (vector offsets stay int64)
    assert [a.dtype for a in block.fields["parts"]] == [np.dtype(np.int64)] + [
        np.dtype(np.int32)
    ] * 3
    for k, vid in enumerate(range(block.first, block.first + block.n)):
        got = table.get_field(vid, "parts")
        assert [v.dtype for v in got] == [np.dtype(np.int64)] * len(want[k])
        assert all(not v.flags.writeable for v in got)
        assert [v.tolist() for v in got] == [w.tolist() for w in want[k]]
    # the compute set's table reads the block: every vertex's ids in vertex order
    (group,) = build_table(g._state, g._state.compute_sets[cs.id]).groups
    parts = next(ft for ft in group.fields if ft.spec.name == "parts")
    assert parts.ids.tolist() == ids.tolist()
    assert not parts.ids.flags.writeable
    # a field held as runs expands to int32 ids when they fit
    outs = next(ft for ft in group.fields if ft.spec.name == "out")
    assert outs.ids.dtype == np.int32
    assert outs.ids.tolist() == out.flat_index().tolist()  # one element per vertex


def test_variable_tensors_are_the_variables_ids_without_an_index_array() -> None:
    g = _graph()
    first = variable_count(g)
    a = g.addVariable(FLOAT, [3, 4], "a")
    b = g.addVariable(FLOAT, [5], "b")
    got = variable_tensors(g, first, variable_count(g))
    assert [t.shape() for t in got] == [[3, 4], [5]]
    assert got[0].flat_index().tolist() == a.flat_index().tolist()
    assert got[1].flat_index().tolist() == b.flat_index().tolist()


def test_pieces_that_are_not_runs_are_int32_and_read_back_as_int64() -> None:
    g, cs, scattered, parts = _scattered(4, 3, 4)
    sizes = [5, 7]
    g.addVertices(
        cs,
        Gather,
        [0, 1],
        {"parts": Segments(parts, [2, 2], [1, 1]), "out": Segments(scattered, sizes)},
    )
    ids = scattered.flat_index()
    table = g._state.vertices
    first = len(table) - 2
    assert [table.extra[first + k]["out"].dtype for k in range(2)] == [np.dtype(np.int32)] * 2
    for k, (a, b) in enumerate([(0, 5), (5, 12)]):
        got = table.get_field(first + k, "out")
        assert got.dtype == np.int64 and not got.flags.writeable
        assert got.tolist() == ids[a:b].tolist()


def test_placed_memory_report_keeps_its_blocks_in_narrow_columns() -> None:
    from ipusim.tile.memory import BlockTable, MemorySpec, allocate_table, plan

    rng = np.random.default_rng(3)
    n = 500
    table = BlockTable.concat(
        [
            BlockTable.rows("w", "variable", rng.integers(0, 8, n), rng.integers(0, 900, n), 4),
            BlockTable.rows("code", "controlCode", np.arange(8), np.full(8, 70_000), 1,
                            "nonInterleaved"),
            BlockTable.rows("act", "variable", rng.integers(0, 8, n), rng.integers(1, 50, n), 2,
                            live=(3, 9)),
        ]
    )  # fmt: skip
    spec = MemorySpec(65_536, 200_000, 16_384, 8)
    report = plan(spec, 8, table, [f"p{i}" for i in range(12)])
    blocks = report.blocks
    # every column reads back the values it was given, in fewer bytes
    for col in ("name", "category", "tile", "size", "element_bytes", "region", "live_first",
                "live_last", "always"):  # fmt: skip
        assert getattr(blocks, col).tolist() == getattr(table, col).tolist()
    assert blocks.tile.dtype == np.int8 and blocks.size.dtype == np.int32
    assert blocks.category.dtype == np.int8 and blocks.region.dtype == np.int8
    # tile int8, size int32, live_first int8: 6 bytes a block where int64 took 24
    assert sum(getattr(blocks, c).nbytes for c in ("tile", "size", "live_first")) == 6 * len(table)
    # the placement kept is the one the int64 table gets
    region, offset = allocate_table(spec, 8, table)
    assert report.block_region.tolist() == region.tolist()
    assert report.block_offset.tolist() == offset.tolist()
    assert report.block_region.dtype == np.int8
    # a 70,000-byte block in a 65,536-byte region overflowed: sizes above int16 stay exact
    assert int(blocks.size[blocks.category == blocks.categories.index("controlCode")][0]) == 70_000
    assert report.variables_on_tile(0) == sorted(
        report.variables_on_tile(0), key=lambda kv: (-kv[1], kv[0])
    )


def test_session_keeps_no_per_node_records_once_compiled() -> None:
    """The per-node records (each node's input and output tensors, with their index
    arrays) are what the training and pipelining builds read; a compiled session
    drops them and still runs. (That the training build, which reads them, still
    matches is the same ``run_model("resnet-tiny", train=True, tiles=16)`` call in
    tests/test_models.py, which checks its gradient too.)"""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples" / "models"))
    from run_model import build

    import popart_api as popart

    proto, inputs, outputs, _ = build("resnet-tiny", False)
    device = popart.DeviceManager().createIpuModelDevice({"numIPUs": 1, "tilesPerIPU": 16})
    session = popart.InferenceSession(
        fnModel=proto.SerializeToString(),
        dataFlow=popart.DataFlow(1, {o: popart.AnchorReturnType("ALL") for o in outputs}),
        deviceInfo=device,
    )
    session.prepareDevice()
    assert session.lowered.records == []
    session.weightsFromHost()
    anchors = session.initAnchorArrays()
    session.run(popart.PyStepIO(inputs, anchors))
    assert np.isfinite(anchors[outputs[0]]).all()


def _resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim")
def test_freed_heap_pages_go_back_to_the_system() -> None:
    """Arrays of a few hundred KiB come from glibc's heap once a freed large array has
    raised the mmap threshold; freeing every other one leaves their pages resident
    until :func:`release_free_heap` returns them."""
    from ipusim.host_heap import release_free_heap

    big = np.ones(40_000_000 // 8)  # mmapped; freeing it raises the mmap threshold
    del big
    arrays = [np.ones(1_000_000 // 8) for _ in range(300)]  # 300 MB from the heap
    del arrays[::2]  # 150 MB free, between live chunks: no trim of the heap's top
    before = _resident_bytes()
    if not release_free_heap():
        pytest.skip("this C library has no malloc_trim or had nothing to release")
    released = before - _resident_bytes()
    assert released > 100e6, f"{released / 1e6:.0f} MB released"
    assert all(float(a[-1]) == 1.0 for a in arrays)  # the live arrays are untouched
