"""Poplar's program API: Block, Switch, Copy overloads, WriteUndef, Call and bad input.

Values are checked against numpy or counted by hand; block cycles against the
machine's own step records (``engine.getTrace().records``), summed here per tile.
Every graph runs on the 8-tile ``tiny`` preset.
"""

from __future__ import annotations

import jsonschema
import numpy as np
import pytest
from codelets_common import Bump, loaded, mapped, tiny_graph, vertex_on

from ipusim.config import load_config, with_overrides
from ipusim.profile.execution import schema
from poplar_api import FLOAT, INT, Engine, Graph, IPUModel, concat
from poplar_api import program as prog
from poplar_api.errors import EngineError, GraphError, GraphValidationError, PoplarError

# ------------------------------------------------------------------- helpers


def counter(g: Graph, name: str, tile: int, value: int = 0):
    t = g.addVariable(INT, [], name)
    g.setTileMapping(t, tile)
    g.setInitialValue(t, value)
    g.createHostRead(name, t)
    g.createHostWrite(name + "-w", t)
    return t


def bump(g: Graph, c, tile: int, cycles: int, name: str):
    """A compute set of one Bump vertex on ``tile`` with ``cycles`` thread cycles."""
    cs = g.addComputeSet(name)
    vertex_on(g, cs, Bump, {"c": c}, tile=tile, cycles=cycles)
    return cs


def run(g: Graph, program, options=None, device=None, runs: int = 1) -> Engine:
    e = loaded(g, program, device, options)
    for _ in range(runs):
        e.run(0)
    return e


def problems(g: Graph, program) -> list[str]:
    with pytest.raises(GraphValidationError) as info:
        Engine(g, program)
    return info.value.problems


# -------------------------------------------------------------------- Block


def _pipeline(g: Graph):
    """Repeat 3 x [Block stage1 (op1 on tile 0, op2 on tile 1), Block other (op3)]."""
    a, b, c = counter(g, "a", 0), counter(g, "b", 1), counter(g, "c", 2)
    op1, op2, op3 = bump(g, a, 0, 12, "op1"), bump(g, b, 1, 30, "op2"), bump(g, c, 2, 7, "op3")
    stage = prog.Block(prog.Sequence(prog.Execute(op1), prog.Execute(op2)), "stage1")
    other = prog.Block(prog.Execute(op3), "other")
    return prog.Repeat(3, prog.Sequence(stage, other))


def _clock_before(records, k: int) -> np.ndarray:
    """Each tile's clock when step ``k`` starts: the tile cycles of the steps before it."""
    out = np.zeros_like(records[0].tile_cycles)
    for rec in records[:k]:
        out = out + rec.tile_cycles
    return out


def test_block_records_match_the_step_cycles_of_the_block():
    g = tiny_graph()
    e = run(g, _pipeline(g), {"profiler.blocks.filter": "stage.*"})
    assert [int(e.readTensor(n)) for n in "abc"] == [3, 3, 3]
    recs = e.getTrace().records
    # all vertices local; every run ends with an internal sync
    assert [r.name for r in recs] == ["op1", "op2", "op3"] * 3 + ["EndOfRun/Sync"]
    blocks = e.getBlockRecords()
    assert {b["name"] for b in blocks} == {"stage1"}
    for k in range(3):
        steps = recs[3 * k : 3 * k + 2]  # op1, op2 of iteration k
        per_tile = steps[0].tile_cycles + steps[1].tile_cycles
        start = _clock_before(recs, 3 * k)
        mine = [b for b in blocks if b["execution"] == k]
        assert [b["tile"] for b in mine] == np.flatnonzero(per_tile).tolist() == [0, 1]
        for b in mine:
            t = b["tile"]
            assert b["cycles"] == int(per_tile[t]) > 0
            assert b["cyclesFrom"] == int(start[t])
            assert b["cyclesTo"] == int(start[t] + per_tile[t])
    # op1: 12 thread cycles -> 6 contexts x 12 = 72 tile cycles; op2: 6 x 30 = 180
    assert [b["cycles"] for b in blocks if b["execution"] == 0] == [72, 180]
    assert e.getBlockRecords(tile=1) == [b for b in blocks if b["tile"] == 1]


def test_block_records_are_in_the_execution_profile_and_follow_runs():
    g = tiny_graph()
    e = run(g, _pipeline(g), {"profiler.blocks.filter": "stage1|other"}, runs=2)
    profile = e.getExecutionProfile()
    jsonschema.Draft202012Validator(schema("execution_profile")).validate(dict(profile))
    blocks = profile["lightweightProfile"]["blocks"]
    assert blocks == e.getBlockRecords()
    first = [b for b in blocks if b["run"] == 0]
    second = [b for b in blocks if b["run"] == 1]
    # 3 iterations x (stage1 on tiles 0 and 1 + other on tile 2)
    assert [b["name"] for b in first] == ["stage1", "stage1", "other"] * 3
    assert [b["tile"] for b in first] == [0, 1, 2] * 3
    run0 = profile["runs"][0]["cyclesTo"]
    assert [b["cyclesFrom"] - run0 for b in second] == [b["cyclesFrom"] for b in first]
    # the program field numbers the block node as the graph profile's program list does
    programs = e.getGraphProfile()["programs"]
    assert all(0 <= b["program"] < len(programs) for b in blocks)


def test_block_filter_matches_whole_names_and_unselected_blocks_record_nothing():
    g = tiny_graph()
    program = _pipeline(g)
    assert run(g, program).getBlockRecords() == []
    assert run(g, program, {"profiler.blocks.filter": "stage"}).getBlockRecords() == []
    names = {
        b["name"] for b in run(g, program, {"profiler.blocks.filter": "oth.*"}).getBlockRecords()
    }
    assert names == {"other"}


def test_nested_blocks_outer_first_and_inner_within():
    g = tiny_graph()
    a, b = counter(g, "a", 0), counter(g, "b", 0)
    inner = prog.Block(prog.Execute(bump(g, b, 0, 20, "op2")), "inner")
    outer = prog.Block(prog.Sequence(prog.Execute(bump(g, a, 0, 10, "op1")), inner), "outer")
    e = run(g, prog.Repeat(2, outer), {"profiler.blocks.filter": "outer|inner"})
    blocks = e.getBlockRecords()
    assert [b["name"] for b in blocks] == ["outer", "inner", "outer", "inner"]
    for out, inn in (blocks[0:2], blocks[2:4]):
        assert out["cyclesFrom"] < inn["cyclesFrom"] and inn["cyclesTo"] == out["cyclesTo"]
        assert (out["cycles"], inn["cycles"]) == (6 * 10 + 6 * 20, 6 * 20)


def test_programs_filter_adds_implicit_blocks():
    g = tiny_graph()
    e = run(g, _pipeline(g), {"profiler.programs.filter": "op3"})
    blocks = e.getBlockRecords()
    recs = e.getTrace().records
    op3 = [k for k, r in enumerate(recs) if r.name == "op3"]
    assert [b["name"] for b in blocks] == ["op3"] * 3
    for b, k in zip(blocks, op3, strict=True):
        assert b["tile"] == 2
        assert b["cycles"] == int(recs[k].tile_cycles[2]) == 6 * 7
        assert b["cyclesFrom"] == int(_clock_before(recs, k)[2])


def test_block_records_identical_at_tile_granularity():
    def blocks(granularity: str):
        cfg = with_overrides(load_config("tiny"), {"sim.granularity": granularity})
        g = Graph(IPUModel(cfg).createDevice().getTarget())
        device = IPUModel(cfg).createDevice()
        return run(g, _pipeline(g), {"profiler.blocks.filter": ".*"}, device).getBlockRecords()

    assert blocks("tile") == blocks("ipu")


def test_block_on_cpu_device_runs_its_program():
    from poplar_api import Device

    g = tiny_graph()
    e = run(g, _pipeline(g), {"profiler.blocks.filter": ".*"}, Device.createCPUDevice("tiny"))
    assert [int(e.readTensor(n)) for n in "abc"] == [3, 3, 3]
    assert e.getBlockRecords() == []  # no cycles without a model


# ------------------------------------------------------------------- Switch


def _switch_graph(make):
    g = tiny_graph()
    ctl = counter(g, "ctl", 0)
    hits = [counter(g, f"h{k}", k + 1) for k in range(3)]
    # case k runs on tile k + 1 with 10 * (k + 1) thread cycles
    bodies = [prog.Execute(bump(g, hits[k], k + 1, 10 * (k + 1), f"case{k}")) for k in range(3)]
    return g, make(ctl, bodies)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda c, b: prog.Switch(c, [(0, b[0]), (5, b[1])], b[2]), id="list+default"),
        pytest.param(lambda c, b: prog.Switch(c, {0: b[0], 5: b[1]}, b[2], "sw"), id="dict"),
        pytest.param(lambda c, b: prog.Switch(c, b[2]).add(0, b[0]).add(5, b[1]), id="add"),
        pytest.param(
            lambda c, b: prog.Switch(c, "sw").add(0, b[0]).add(5, b[1]),
            id="no-default",
        ),
    ],
)
def test_switch_takes_the_branch_of_each_value_and_its_timing(make):
    g, sw = _switch_graph(make)
    has_default = sw.defaultCaseBody.children() != [] or isinstance(
        sw.defaultCaseBody, prog.Execute
    )
    e = loaded(g, sw)
    expected = np.zeros(3, int)
    for value in (5, 0, 7, 5, -1):
        e.writeTensor("ctl-w", np.array([value], np.int32))
        e.run(0)
        branch = {0: 0, 5: 1}.get(value, 2 if has_default else None)
        computes = [r for r in e.getTrace().records if r.kind == "compute"]
        if branch is None:
            assert computes == []
            continue
        expected[branch] += 1
        [rec] = computes
        assert rec.name == f"case{branch}"
        busy = np.flatnonzero(rec.tile_cycles).tolist()
        assert busy == [branch + 1]
        assert int(rec.tile_cycles[branch + 1]) == 6 * 10 * (branch + 1)
    assert [int(e.readTensor(f"h{k}")) for k in range(3)] == expected.tolist()


def test_switch_with_bounds_checking_stops_on_an_unknown_value():
    g, sw = _switch_graph(
        lambda c, b: prog.Switch.switchWithBoundsChecking(c, [(0, b[0]), (1, b[1])], "guard")
    )
    e = loaded(g, sw)
    e.writeTensor("ctl-w", np.array([1], np.int32))
    e.run(0)
    assert int(e.readTensor("h1")) == 1
    e.writeTensor("ctl-w", np.array([9], np.int32))
    with pytest.raises(EngineError) as info:
        e.run(0)
    msg = str(info.value)
    assert "'ctl'" in msg and "value 9" in msg and "[0, 1]" in msg


def test_switch_bad_input():
    g = tiny_graph()
    ctl = counter(g, "ctl", 0)
    with pytest.raises(GraphError, match=r"case value 3 is already present"):
        prog.Switch(ctl, [(3, prog.Sequence()), (3, prog.Sequence())])
    with pytest.raises(GraphError, match=r"case value 1.5 \(float\) must be an int"):
        prog.Switch(ctl).add(1.5, prog.Sequence())
    with pytest.raises(GraphError, match="int32 range"):
        prog.Switch(ctl).add(2**31, prog.Sequence())
    f = mapped(g, FLOAT, [], "fctl", tile=0)
    [p] = problems(g, prog.Switch(f, {1: prog.Sequence()}))
    assert "'fctl'" in p and "float" in p and "integral" in p
    v = mapped(g, INT, [2], "vctl", tile=0)
    [p] = problems(g, prog.Switch(v, {1: prog.Sequence()}))
    assert "'vctl'" in p and "2 elements" in p and "scalar" in p


# --------------------------------------------------------------------- Copy


def _floats(g: Graph, name: str, n: int, tile: int, values=None, read: bool = True):
    t = g.addVariable(FLOAT, [n], name)
    g.setTileMapping(t, tile)
    if values is not None:
        g.setInitialValue(t, values)
    if read:
        g.createHostRead(name, t)
    return t


def test_copy_tensor_to_tensor_overloads():
    g = tiny_graph()
    x = np.arange(6, dtype=np.float32) * 0.5 - 1
    src = _floats(g, "src", 6, 0, x)
    d1, d2 = _floats(g, "d1", 6, 0), _floats(g, "d2", 6, 3)
    d3 = mapped(g, FLOAT, [2, 3], "d3", tile=3)
    g.createHostRead("d3", d3)
    seq = prog.Sequence(
        prog.Copy(src, d1),
        prog.Copy(src, d2, True, "to-d2"),  # dontOutline, debugContext
        prog.Copy(src.reverse(0), d3, dontOutline=False, debugContext="rev"),  # [6] -> [2, 3]
        prog.Copy(d1, d1),  # the same view: allowed
    )
    e = run(g, seq)
    np.testing.assert_array_equal(e.readTensor("d1"), x)
    np.testing.assert_array_equal(e.readTensor("d2"), x)
    np.testing.assert_array_equal(e.readTensor("d3"), x[::-1].reshape(2, 3))
    names = [r.name for r in e.getTrace().records]
    assert "to-d2/Exchange" in names and "rev/Exchange" in names


def test_copy_stream_overloads():
    g = tiny_graph()
    t = _floats(g, "t", 4, 1)
    out = _floats(g, "out", 4, 2, read=False)
    size = counter(g, "n", 1, 3)
    h2d = g.addHostToDeviceFIFO("in", FLOAT, 4)
    d2h = g.addDeviceToHostFIFO("back", FLOAT, 4)
    partial = _floats(g, "partial", 4, 1, np.full(4, -1.0))
    seq = prog.Sequence(
        prog.Copy(h2d, t, False, "feed"),  # optimiseMemory, debugContext
        prog.Copy(t, out),
        prog.Copy(out, d2h, optimiseMemory=True),
        prog.Copy(h2d, partial, size),  # only the first n (= 3) elements
    )
    e = loaded(g, seq)
    feed = np.array([1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5, 8.5], np.float32)
    back = np.zeros(4, np.float32)
    e.connectStream("in", feed)
    e.connectStream("back", back)
    e.run(0)
    np.testing.assert_array_equal(e.readTensor("t"), feed[:4])
    np.testing.assert_array_equal(back, feed[:4])
    np.testing.assert_array_equal(e.readTensor("partial"), [5.5, 6.5, 7.5, -1.0])
    e.writeTensor("n-w", np.array([9], np.int32))
    with pytest.raises(EngineError, match=r"'n' holds 9; it must be in \[0, 4\]"):
        e.run(0)


def test_copy_errors_name_both_tensors():
    g = tiny_graph()
    a = _floats(g, "a", 4, 0)
    b = _floats(g, "b", 4, 0)
    k = g.addConstant(FLOAT, [4], 1.0, "k")
    g.setTileMapping(k, 0)
    i = mapped(g, INT, [4], "i", tile=0)
    c6 = _floats(g, "c6", 6, 0)
    h2d = g.addHostToDeviceFIFO("in", FLOAT, 4)
    found = problems(
        g,
        prog.Sequence(
            prog.Copy(a, k),  # into a constant
            prog.Copy(a[0:3], a[1:4]),  # overlapping
            prog.Copy(a, i),  # types
            prog.Copy(a, c6),  # sizes
            prog.Copy(h2d, k),  # stream into a constant
        ),
    )
    const, overlap, types, sizes, stream = found
    assert "'a'" in const and "constant 'k'" in const and "variable" in const
    assert "'a[0:3]'" in overlap or ("a" in overlap and "overlap" in overlap)
    assert "3 of 3 element(s)" not in overlap and "2 of 3 element(s)" in overlap
    assert "'a'" in types and "'i'" in types and "element types differ" in types
    assert "'c6'" in sizes and "4 elements" in sizes and "6 elements" in sizes
    assert "stream 'in'" in stream and "constant 'k'" in stream
    with pytest.raises(GraphError, match="fits no Copy overload"):
        prog.Copy(a, b, 3.5)
    with pytest.raises(GraphError, match=r"no such copy.*RemoteBuffer"):
        prog.Copy(a, "buffer")


def test_copy_into_views_around_a_constant():
    """A destination whose ids span a constant without holding any of its elements is
    no constant's (checked by ids, not by their span); one holding an element is."""
    g = tiny_graph()
    src = _floats(g, "src", 8, 0)
    x = _floats(g, "x", 4, 1)
    k = g.addConstant(FLOAT, [4], 1.0, "k")
    g.setTileMapping(k, 0)
    y = _floats(g, "y", 4, 2)
    around = concat([y[::-1], x])  # ids on both sides of k's, out of order
    Engine(g, prog.Copy(src, around))  # compiles: no problem
    (const,) = problems(g, prog.Copy(src, concat([y[::-1], x[:3], k[2:3]])))
    assert "constant 'k'" in const


def test_copy_with_a_tensor_of_another_graph():
    g, other = tiny_graph(), tiny_graph()
    a = _floats(g, "a", 4, 0)
    x = _floats(other, "x", 4, 0)
    [p] = problems(g, prog.Copy(x, a))
    assert "'x'" in p or "x" in p
    assert "tensor of this graph" in p


# --------------------------------------------------------------- WriteUndef


def _undef_graph(with_undef: bool):
    """A and B (16 floats each, tile 2) are live one after the other; A twice."""
    g = tiny_graph()
    x = np.arange(16, dtype=np.float32)
    src = [g.addConstant(FLOAT, [16], x * (k + 1), f"src{k}") for k in range(3)]
    for s in src:
        g.setTileMapping(s, 2)
    a, b = _floats(g, "A", 16, 2, read=False), _floats(g, "B", 16, 2, read=False)
    outs = [_floats(g, f"out{k}", 16, 2) for k in range(3)]
    steps = [prog.Copy(src[0], a), prog.Copy(a, outs[0])]
    steps += [prog.WriteUndef(a)] if with_undef else []
    steps += [prog.Copy(src[1], b), prog.Copy(b, outs[1])]
    steps += [prog.Copy(src[2], a), prog.Copy(a, outs[2])]
    return g, prog.Sequence(steps), x


def _placements(e: Engine, name: str):
    return [p for p in e.memory.placements if p.block.name == name and p.block.tile == 2]


def test_write_undef_lets_another_variable_share_the_memory():
    g, seq, x = _undef_graph(True)
    e = run(g, seq)
    for k in range(3):
        np.testing.assert_array_equal(e.readTensor(f"out{k}"), x * (k + 1))
    a_blocks, [b] = _placements(e, "A"), _placements(e, "B")
    assert len(a_blocks) == 2  # two live ranges
    a1, a2 = sorted(a_blocks, key=lambda p: p.block.live)
    assert a1.block.live[1] < b.block.live[0] <= b.block.live[1] < a2.block.live[0]
    assert (b.region, b.offset) == (a1.region, a1.offset)  # B reuses A's bytes
    # without the WriteUndef, A is live throughout and B needs 64 bytes of its own
    g2, seq2, _ = _undef_graph(False)
    plain = Engine(g2, seq2)
    [a_plain], [b_plain] = _placements(plain, "A"), _placements(plain, "B")
    assert b_plain.offset != a_plain.offset or b_plain.region != a_plain.region
    assert int(plain.memory.by_tile["total"][2] - e.memory.by_tile["total"][2]) == 16 * 4
    # the variable category counts A once either way
    np.testing.assert_array_equal(
        e.memory.by_category["variable"], plain.memory.by_category["variable"]
    )


def test_write_undef_costs_nothing_and_needs_a_tensor():
    g, seq, _ = _undef_graph(True)
    g2, seq2, _ = _undef_graph(False)
    assert run(g, seq).getTrace().total_cycles == run(g2, seq2).getTrace().total_cycles
    with pytest.raises(GraphError, match="expected a Tensor"):
        prog.WriteUndef("A")


# --------------------------------------------------------------------- Call


def _call_graph(calls: int):
    g = tiny_graph()
    c = counter(g, "c", 0)
    fn = g.addFunction(
        prog.Sequence(prog.Execute(bump(g, c, 0, 9, "f1")), prog.Execute(bump(g, c, 0, 4, "f2")))
    )
    return g, prog.Sequence([prog.Call(fn, f"call{k}") for k in range(calls)])


def test_call_twice_costs_twice_and_is_stored_once():
    (g1, once), (g2, twice) = _call_graph(1), _call_graph(2)
    e1, e2 = run(g1, once), run(g2, twice)
    assert (int(e1.readTensor("c")), int(e2.readTensor("c"))) == (2, 4)
    # the calls' steps, without the sync that ends each run
    r1, r2 = e1.getTrace().records[:-1], e2.getTrace().records[:-1]
    assert [r.name for r in r2] == ["f1", "f2", "f1", "f2"]
    c1 = sum(int(r.tile_cycles.sum()) for r in r1)
    c2 = sum(int(r.tile_cycles.sum()) for r in r2)
    assert c1 == 6 * 9 + 6 * 4 and c2 == 2 * c1  # 6 contexts x thread cycles, per call
    for category in ("controlCode", "vertexCode", "vertexInstanceState"):
        np.testing.assert_array_equal(
            e1.memory.by_category[category], e2.memory.by_category[category]
        )


# --------------------------------------------------------------- bad input


def test_programs_of_another_graph_are_named():
    g, other = tiny_graph(), tiny_graph()
    c = counter(other, "c", 0)
    cs = bump(other, c, 0, 3, "foreign")
    fn = other.addFunction(prog.Sequence())
    found = problems(g, prog.Sequence(prog.Execute(cs), prog.Call(fn)))
    assert len(found) == 2
    assert "compute set 'foreign'" in found[0] and "another graph" in found[0]
    assert "function 0" in found[1] and "another graph" in found[1]


def test_block_needs_a_name_and_a_program():
    with pytest.raises(GraphError, match="non-empty name") as info:
        prog.Block(prog.Sequence())
    assert isinstance(info.value, PoplarError) and isinstance(info.value, ValueError)
    with pytest.raises(GraphError, match="expected a program"):
        prog.Block("stage1", "stage1")


def test_bad_filter_regex_is_an_engine_error():
    g = tiny_graph()
    with pytest.raises(EngineError) as info:
        Engine(g, prog.Sequence(), {"profiler.blocks.filter": "stage("})
    assert "'profiler.blocks.filter'" in str(info.value) and "'stage('" in str(info.value)
