"""Memory placement of compiled graphs on the tiny machine, checked against hand layouts.

The tiny machine: 8 tiles, 16 KiB non-interleaved + 48 KiB interleaved per tile,
alignment 8, six worker contexts. Data goes to the interleaved region first; code,
stacks and vertex state to the non-interleaved one.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import CopyVec, tiny_graph, variables
from examples_common import load_example

from ipusim.config import load_config
from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.codelet import Input, Output, Vector, Vertex
from poplar_api.errors import OutOfMemoryError, PoplarError

NUM_TILES = 8
#: Stack per tile: 6 workers and the supervisor.
#: Sizes of compiled code and state: the config's ``code`` section (estimates).
CODE = load_config("tiny").code
STACK = 6 * CODE.worker_stack_bytes + CODE.supervisor_stack_bytes


class AddVecM(Vertex):
    """``out = a + b``."""

    a = Input(Vector(FLOAT))
    b = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        batches["out"].data[:] = batches["a"].data + batches["b"].data


class ScaleM(Vertex):
    """``dst = 2 * src``; ``src`` is declared interleaved."""

    src = Input(Vector(FLOAT), interleaved=True)
    dst = Output(Vector(FLOAT))

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        batches["dst"].data[:] = 2 * batches["src"].data


@pytest.fixture
def graph() -> Graph:
    return tiny_graph()


def data_at(engine: Engine, tile: int) -> dict[str, tuple[str, int]]:
    """Region and offset of each variable or constant piece on ``tile``."""
    return {
        p.block.name: (p.region, p.offset)
        for p in engine.memory.placements
        if p.block.tile == tile and p.block.category in ("variable", "constant")
    }


def interleaved_at(**offsets: int) -> dict[str, tuple[str, int]]:
    """What :func:`data_at` gives for variables at these offsets of the interleaved region."""
    return {name: ("interleaved", offset) for name, offset in offsets.items()}


def test_alignment_gap_half_then_float(graph):
    (h,) = variables(graph, "h", 1, 3, HALF)  # 3 x 2 B = 6 B
    (f,) = variables(graph, "f", 1, 2, FLOAT)  # 2 x 4 B = 8 B
    graph.createHostRead("h", h)
    graph.createHostRead("f", f)
    e = Engine(graph, prog.Sequence())
    # h at 0..6, then 2 B of gap so that f starts at 8
    assert data_at(e, 1) == interleaved_at(h=0, f=8)
    assert e.memory.by_tile["interleaved"][1] == 6 + 8
    assert e.memory.by_tile["interleavedIncludingGaps"][1] == 8 + 8
    assert e.memory.by_category["variable"].tolist() == [0, 14, 0, 0, 0, 0, 0, 0]


def test_disjoint_variables_share_an_address(graph):
    a, b, c, d = variables(graph, "abcd", 0)
    # point 0: a -> b, point 1: c -> d (on-tile copies, one step each)
    e = Engine(graph, prog.Sequence([prog.Copy(a, b), prog.Copy(c, d)]))
    assert data_at(e, 0) == interleaved_at(a=0, b=16, c=0, d=16)
    assert e.memory.by_tile["interleaved"][0] == 32  # two 16 B ranges, each used twice
    assert e.memory.by_category["variable"][0] == 64
    lv = e.memory.liveness
    assert [n for n, _, _ in lv] == [
        "Copy a -> b/OnTileCopy", "Copy c -> d/OnTileCopy", "EndOfRun/Sync"
    ]  # fmt: skip
    assert [b for _, b, _ in lv] == [32, 32, 0]


def test_overlapping_variables_do_not_share(graph):
    a, b, c = variables(graph, "abc", 0)
    # a live at 0, b at 0..1, c at 1: c may reuse a's bytes but not b's
    e = Engine(graph, prog.Sequence([prog.Copy(a, b), prog.Copy(b, c)]))
    assert data_at(e, 0) == interleaved_at(a=0, b=16, c=0)


def test_variable_used_in_a_loop_is_live_over_the_loop(graph):
    a, b, c, d, x, y = variables(graph, "abcdxy", 0)
    body = prog.Sequence([prog.Copy(a, b), prog.Copy(c, d)])
    e = Engine(graph, prog.Sequence([prog.Repeat(3, body), prog.Copy(x, y)]))
    # a..d are all live over the whole loop (points 0..1): no sharing among them;
    # x, y (point 2) reuse the first bytes
    assert data_at(e, 0) == interleaved_at(a=0, b=16, c=32, d=48, x=0, y=16)


def test_host_readable_variable_is_always_live(graph):
    a, b, c, d = variables(graph, "abcd", 0)
    graph.createHostRead("c", c)
    e = Engine(graph, prog.Sequence([prog.Copy(a, b), prog.Copy(c, d)]))
    # c first (always live), a and b at point 0 after it; d (point 1) reuses a's bytes
    assert data_at(e, 0) == interleaved_at(c=0, a=16, b=32, d=16)
    lv = e.memory.liveness
    # a + b, then d, then nothing at the run's last sync (c is always live)
    assert [b for _, b, _ in lv] == [32, 16, 0]


def test_variable_of_two_entry_programs_is_always_live_and_a_functions_is_not(graph):
    a, b, c, p, q, r, s = variables(graph, "abcpqrs", 0)
    fn = graph.addFunction(prog.Copy(p, q))
    e = Engine(
        graph,
        [prog.Copy(a, b), prog.Sequence([prog.Copy(a, c), prog.Call(fn), prog.Copy(r, s)])],
    )
    # always live: a (two entries); b (point 0), c (point 1) and p (the call, point 2)
    # share the bytes after it, q (with p) takes the next; r and s (point 3) reuse both
    assert data_at(e, 0) == interleaved_at(a=0, b=16, c=16, p=16, q=32, r=16, s=32)


def test_variable_of_a_function_is_live_from_its_first_call_to_its_last(graph):
    p, q, x, y, z, w = variables(graph, "pqxyzw", 0)
    fn = graph.addFunction(prog.Copy(p, q))
    e = Engine(graph, prog.Sequence([prog.Call(fn), prog.Copy(x, y), prog.Call(fn),
                                     prog.Copy(z, w)]))  # fmt: skip
    # p and q (points 0 to 2: one address over both calls) share with neither x nor y
    # (point 1, between the calls); z and w (point 3, after the last call) reuse theirs
    assert data_at(e, 0) == interleaved_at(p=0, q=16, x=32, y=48, z=0, w=16)
    # the function's code is stored at its first call only
    twice = e.memory.by_category["controlCode"][0]
    once = Engine(graph, prog.Sequence([prog.Call(fn), prog.Copy(x, y), prog.Copy(z, w)]))
    assert twice == once.memory.by_category["controlCode"][0]


def test_undef_between_calls_lets_others_use_a_functions_variables_address(graph):
    p, q, x, y = variables(graph, "pqxy", 0)
    fn = graph.addFunction(prog.Copy(p, q))
    body = [prog.Call(fn), prog.WriteUndef(q), prog.Copy(x, y), prog.Call(fn)]
    e = Engine(graph, prog.Sequence(body))
    # q is undefined between the calls: two live ranges (points 0 and 2) at one address,
    # since the function's code addresses it, and free in between, so x (point 1) takes
    # it; p, never undefined, holds its bytes from the first call to the last
    assert data_at(e, 0) == interleaved_at(p=0, q=16, x=16, y=32)
    q_blocks = [pl for pl in e.memory.placements if pl.block.name == "q"]
    assert [pl.block.live[0] for pl in q_blocks] == [0, 2]
    assert {(pl.region, pl.offset) for pl in q_blocks} == {("interleaved", 16)}
    # q is counted once in the report's variable bytes: p, q, x and y of 16 B each
    assert e.memory.by_category["variable"][0] == 4 * 16


def test_a_functions_variable_keeps_its_address_free_over_every_range(graph):
    p, q, x, y, z, w = variables(graph, "pqxyzw", 0)
    fn = graph.addFunction(prog.Copy(p, q))
    body = [prog.Copy(x, y), prog.Call(fn), prog.WriteUndef(q), prog.Copy(y, z),
            prog.Call(fn), prog.Copy(z, w)]  # fmt: skip
    e = Engine(graph, prog.Sequence(body))
    # points: 0 x->y, 1 call, 2 y->z, 3 call, 4 z->w. x dies at 0, so p (1..3) takes 0;
    # z (2..4) takes 32 above p and y (0..2). q (ranges at 1 and 3) comes up at its last
    # range: it must avoid y (live with its first range) and p and z (live with its
    # second), so both ranges go to 48; w (4) reuses x's and p's bytes.
    assert data_at(e, 0) == interleaved_at(x=0, y=16, p=0, z=32, q=48, w=0)
    assert {pl.offset for pl in e.memory.placements if pl.block.name == "q"} == {48}


def test_interleaved_field_puts_its_data_in_the_interleaved_region(graph):
    graph.addCodelets(ScaleM)
    filler = graph.addVariable(FLOAT, [(48 * 1024 - 16) // 4], "filler")
    graph.setTileMapping(filler, 2)
    graph.createHostRead("filler", filler)  # always live: interleaved 0..49136
    x, y = variables(graph, "xy", 2)
    cs = graph.addComputeSet("scale")
    v = graph.addVertex(cs, ScaleM, {"src": x, "dst": y})
    graph.setTileMapping(v, 2)
    graph.setPerfEstimate(v, 10)
    e = Engine(graph, prog.Execute(cs))
    # x must be interleaved: it takes the last 16 B there. y may go anywhere and spills
    # to non-interleaved after the always-live code and state of tile 2:
    # stack, control (base + 2 steps: the compute and the run's last sync), vertex code,
    # vertex state (header + 2 vectors)
    control = CODE.control_code_base_bytes + 2 * CODE.control_code_bytes_per_step
    state = CODE.vertex_header_bytes + 2 * (CODE.field_pointer_bytes + CODE.vector_size_bytes)
    end_of_state = STACK + control + CODE.vertex_code_bytes + state
    y_offset = -(-end_of_state // 8) * 8
    assert data_at(e, 2) == {
        "filler": ("interleaved", 0),
        "x": ("interleaved", 48 * 1024 - 16),
        "y": ("nonInterleaved", y_offset),
    }


def test_interleaved_field_overflows_rather_than_spill(graph):
    graph.addCodelets(ScaleM)
    filler = graph.addVariable(FLOAT, [48 * 1024 // 4], "filler")
    graph.setTileMapping(filler, 2)
    graph.createHostRead("filler", filler)  # the whole interleaved region
    x, y = variables(graph, "xy", 2)
    cs = graph.addComputeSet("scale")
    v = graph.addVertex(cs, ScaleM, {"src": x, "dst": y})
    graph.setTileMapping(v, 2)
    graph.setPerfEstimate(v, 10)
    e = Engine(graph, prog.Execute(cs), {"debug.allowOutOfMemory": "true"})
    assert data_at(e, 2)["x"] == ("overflowed", 0)
    assert data_at(e, 2)["y"][0] == "nonInterleaved"
    assert e.memory.tiles_out_of_memory.tolist() == [2]
    assert e.memory.by_tile["overflowed"][2] == 16


def test_category_totals_of_a_compute_set(graph):
    graph.addCodelets(AddVecM)
    a, b, out = variables(graph, ["a", "b", "out"], 0)
    cs = graph.addComputeSet("add")
    v = graph.addVertex(cs, AddVecM, {"a": a, "b": b, "out": out})
    graph.setTileMapping(v, 0)
    graph.setPerfEstimate(v, 10)
    e = Engine(graph, prog.Execute(cs))
    m = e.memory
    zeros = np.zeros(NUM_TILES, np.int64)
    on0 = np.eye(NUM_TILES, dtype=np.int64)[0]
    state = CODE.vertex_header_bytes + 3 * (CODE.field_pointer_bytes + CODE.vector_size_bytes)  # 28
    expected = {
        "stack": np.full(NUM_TILES, STACK),
        # every tile has the base and the run's last sync; tile 0 runs the compute step
        "controlCode": CODE.control_code_base_bytes + CODE.control_code_bytes_per_step * (on0 + 1),
        "vertexCode": CODE.vertex_code_bytes * on0,
        "vertexInstanceState": state * on0,
        "variable": 3 * 16 * on0,
    }
    for category, want in expected.items():
        assert m.by_category[category].tolist() == want.tolist(), category
    for category in ("constant", "internalExchangeCode", "hostExchangeCode", "messageBuffer"):
        assert m.by_category.get(category, zeros).sum() == 0, category
    assert m.by_tile["total"].tolist() == sum(expected.values()).tolist()
    # non-interleaved: stack, control, code, state packed (all multiples of 8 but state)
    ni = STACK + CODE.control_code_base_bytes + 2 * CODE.control_code_bytes_per_step
    ni += CODE.vertex_code_bytes + state
    assert m.by_tile["nonInterleavedIncludingGaps"][0] == ni
    assert m.by_tile["interleavedIncludingGaps"][0] == 48
    assert m.by_compute_set["add"].tolist() == (state * on0).tolist()
    assert m.by_vertex_type["AddVecM"] == state + CODE.vertex_code_bytes
    assert not m.out_of_memory


def test_exchange_code_and_message_buffer(graph):
    graph.addCodelets(CopyVec)
    (src,) = variables(graph, ["src"], 0)
    (dst,) = variables(graph, ["dst"], 1)
    cs = graph.addComputeSet("pull")
    v = graph.addVertex(cs, CopyVec, {"src": src, "dst": dst})
    graph.setTileMapping(v, 1)
    graph.setPerfEstimate(v, 10)
    e = Engine(graph, prog.Execute(cs))
    m = e.memory
    # steps: sync (all tiles), exchange (tiles 0, 1), compute (tile 1), the run's last
    # sync (all tiles); the exchange sends the 4 contiguous elements from tile 0 as one
    # message, landing on tile 1
    steps = np.array([3, 4, 2, 2, 2, 2, 2, 2])
    assert (
        m.by_category["controlCode"].tolist()
        == (CODE.control_code_base_bytes + CODE.control_code_bytes_per_step * steps).tolist()
    )
    code = CODE.exchange_code_base_bytes + 1 * CODE.exchange_code_bytes_per_message
    assert m.by_category["internalExchangeCode"].tolist() == [code, code, 0, 0, 0, 0, 0, 0]
    assert m.by_category["messageBuffer"].tolist() == [0, 16, 0, 0, 0, 0, 0, 0]
    # src, dst and the buffer are live over the whole Execute: 3 x 16 B at each point
    assert [b for _, b, _ in m.liveness] == [48, 48, 48, 0]
    assert [n for n, _, _ in m.liveness] == [
        "pull/Sync",
        "pull/ExchangeIn",
        "pull",
        "EndOfRun/Sync",
    ]


def big_graph(graph: Graph) -> None:
    big = graph.addVariable(FLOAT, [20000], "big")  # 80000 B: more than a tile
    graph.setTileMapping(big, 3)
    graph.createHostWrite("big-write", big)
    graph.createHostRead("big-read", big)


def test_out_of_memory_error_names_tile_and_sizes(graph):
    big_graph(graph)
    with pytest.raises(OutOfMemoryError) as info:
        Engine(graph, prog.Sequence())
    err = info.value
    assert isinstance(err, MemoryError) and isinstance(err, PoplarError)
    # tile 3 needs its stack and control code (one step: the run's last sync) plus the
    # 80000 B that overflow
    need = STACK + CODE.control_code_base_bytes + CODE.control_code_bytes_per_step + 80000
    text = str(err)
    assert f"tile 3: needs {need} B ({need / 1024:.1f} KiB)" in text
    assert "capacity 65536 B (64.0 KiB)" in text
    assert "'big' 80000 B" in text
    assert "allowOutOfMemory" in text and "hint" in text
    assert err.report.tiles_out_of_memory.tolist() == [3]


def test_allow_out_of_memory_compiles_and_runs(graph):
    big_graph(graph)
    e = Engine(graph, prog.Sequence(), {"debug.allowOutOfMemory": "true"})
    m = e.memory
    assert m.out_of_memory
    assert m.tiles_out_of_memory.tolist() == [3]
    assert m.by_tile["overflowed"].tolist() == [0, 0, 0, 80000, 0, 0, 0, 0]
    control = CODE.control_code_base_bytes + CODE.control_code_bytes_per_step  # the last sync
    assert m.worst_tiles(1) == [(3, STACK + control + 80000, 65536)]
    assert m.variables_on_tile(3) == [("big", 80000)]
    e.load(IPUModel("tiny").createDevice())
    values = np.arange(20000, dtype=np.float32)
    e.writeTensor("big-write", values)
    e.run(0)
    np.testing.assert_array_equal(e.readTensor("big-read"), values)


@pytest.mark.parametrize("name", ["tut1", "tut3"])
def test_tutorials_fit(graph, name):
    built = load_example(f"tutorials/{name}.py").build(graph)
    program = built[0] if isinstance(built, tuple) else built
    m = Engine(graph, program).memory
    assert not m.out_of_memory
    assert (m.by_tile["totalIncludingGaps"] <= 65536).all()
    # every tile holds at least its stack and base control code
    assert (m.by_tile["total"] >= STACK + CODE.control_code_base_bytes).all()


def test_out_of_memory_message_lists_at_most_five_worst_tiles(graph):
    # tiles 0..5 each hold an always-live variable too big for the tile; tile 5's is
    # the biggest, so it is listed first; only five tiles are listed
    for tile in range(6):
        t = graph.addVariable(FLOAT, [17000 + 1000 * tile], f"big{tile}")
        graph.setTileMapping(t, tile)
        graph.createHostRead(f"big{tile}", t)
    with pytest.raises(OutOfMemoryError) as info:
        Engine(graph, prog.Sequence(), {"debug.allowOutOfMemory": "false"})
    lines = [ln for ln in str(info.value).splitlines() if ln.startswith("  tile ")]
    assert [ln.split(":")[0] for ln in lines] == [f"  tile {t}" for t in (5, 4, 3, 2, 1)]
    assert "6 of 8 tile(s) out of memory" in str(info.value)
    assert info.value.report.tiles_out_of_memory.tolist() == [0, 1, 2, 3, 4, 5]
