"""Machine runs checked against hand-computed timelines."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.dataplane import ScriptedDataPlane
from ipusim.errors import (
    HostLinkError,
    IpusimError,
    IRValidationError,
    RunAborted,
    SimulationTimeout,
)
from ipusim.machine import Machine
from tests.conftest import ROUND_TINY, ROUND_TINY_SYNC_DELAYS, round_tiny_superstep

# ROUND_TINY (hand-workable tiny machine) plus round global-sync and host-link numbers.
ROUND = {
    **ROUND_TINY,
    "sync.global_sync_cycles": 600,
    "sync.host_sync_cycles": 40,
    "host.bandwidth_bytes_per_s": 8e9,  # 8 bytes per cycle at 1 GHz
    "host.latency_s": 100e-9,  # 100 cycles
}
DELAYS = np.array(ROUND_TINY_SYNC_DELAYS)


def tiny(**extra):
    return load_config("tiny", overrides={**ROUND, **extra})


@pytest.mark.parametrize("granularity", ["ipu", "tile"])
def test_superstep_by_hand(granularity):
    trace = Machine(tiny(**{"sim.granularity": granularity})).run(round_tiny_superstep())
    comp, sync, ex = trace.records
    expected_compute = np.array([120, 180, 0, 0, 0, 50, 0, 0])
    np.testing.assert_array_equal(comp.tile_cycles, expected_compute)
    np.testing.assert_array_equal(comp.active_cycles, [70, 30, 0, 0, 0, 50, 0, 0])
    assert (comp.first_cycle, comp.last_cycle) == (0, 180)
    # the last tile arrives at 180; tile i leaves at 180 + delay[i]
    exits = 180 + DELAYS
    np.testing.assert_array_equal(sync.tile_cycles, exits - expected_compute)
    assert (sync.first_cycle, sync.last_cycle) == (0, 191)
    # 100 bytes at 4 B/cycle = 25, + fixed 2, + ceil(0.5 * distance(0,7)=4) = 2 -> 29
    np.testing.assert_array_equal(ex.tile_cycles, [29, 0, 0, 0, 0, 0, 0, 29])
    assert (ex.first_cycle, ex.last_cycle) == (183, 191 + 29)
    assert trace.total_cycles == 220
    totals = trace.totals
    assert totals["compute"] == 350
    assert totals["compute_active"] == 150
    assert totals["sync"] == int((exits - expected_compute).sum()) == 1146
    assert totals["internal_exchange"] == 58
    assert totals["host_exchange"] == totals["global_exchange"] == 0
    assert trace.simulated_seconds == pytest.approx(220e-9)


def test_sync_without_relative_delay():
    cfg = tiny(**{"sync.relative_delay": "none"})
    prog = ir.Sequence(
        [
            ir.Compute(name="cs", vertex_tile=[2], vertex_cycles=[5]),  # tile 2: 30 cycles
            ir.Sync(name="s"),
        ]
    )
    trace = Machine(cfg).run(prog)
    # every tile leaves at 30 + 3 (min delay only)
    np.testing.assert_array_equal(trace.records[1].tile_cycles, [33, 33, 3, 33, 33, 33, 33, 33])
    assert trace.total_cycles == 33


def test_external_and_host_sync_two_ipus():
    cfg = tiny(num_ipus=2)
    prog = ir.Sequence(
        [
            ir.Compute(name="cs", vertex_tile=[9], vertex_multi=[True], vertex_cycles=[100]),
            ir.Sync(name="ext", sync_kind="external"),
            ir.Sync(name="host", sync_kind="host"),
        ]
    )
    trace = Machine(cfg).run(prog)
    delays16 = np.tile(DELAYS, 2)
    # external: release at max(100) + 600, tile i leaves at 700 + delay
    ext_exit = 700 + delays16
    arrival = np.zeros(16, np.int64)
    arrival[9] = 100
    np.testing.assert_array_equal(trace.records[1].tile_cycles, ext_exit - arrival)
    # host: the last tile arrives at 700 + 11, + 40 host sync cycles, + delay
    host_exit = 711 + 40 + delays16
    np.testing.assert_array_equal(trace.records[2].tile_cycles, host_exit - ext_exit)
    assert trace.total_cycles == 711 + 40 + 11


def test_internal_sync_is_per_ipu():
    cfg = tiny(num_ipus=2)
    prog = ir.Sequence(
        [ir.Compute(name="cs", vertex_tile=[9], vertex_cycles=[50]), ir.Sync(name="s")]
    )
    trace = Machine(cfg).run(prog)
    end = trace.tile_end_cycles
    np.testing.assert_array_equal(end[:8], DELAYS)  # IPU 0 never waited for IPU 1
    np.testing.assert_array_equal(end[8:], 300 + DELAYS)  # 6 * 50 on tile 9


def _copy(name, tiles, nbytes):
    return ir.StreamCopy(name=name, direction="host_to_device", tile=tiles, num_bytes=nbytes)


def test_stream_copy_alone():
    # 800 bytes over 4 tiles of IPU 0: link busy 800/8 = 100 cycles after 100 latency;
    # per tile 200 B / 4 B per cycle = 50 cycles, below the link time
    trace = Machine(tiny()).run(_copy("in", [0, 1, 2, 3], [200] * 4))
    np.testing.assert_array_equal(trace.records[0].tile_cycles, [200] * 8)
    assert trace.totals["host_exchange"] == 8 * 200


@pytest.mark.parametrize("granularity", ["ipu", "tile"])
def test_host_link_shared_by_two_ipus(granularity):
    cfg = tiny(num_ipus=2, **{"sim.granularity": granularity})
    # IPU 0: 800 bytes (100 link cycles), IPU 1: 1600 bytes (200 link cycles), together.
    # After the 100-cycle latency both share the link: IPU 0 is done after 2*100 more
    # (t=300); IPU 1 then has 100 left alone -> t=400.
    step = _copy("in", [0, 1, 2, 3, 8, 9, 10, 11], [200] * 4 + [400] * 4)
    trace = Machine(cfg).run(step)
    np.testing.assert_array_equal(trace.tile_end_cycles, [300] * 8 + [400] * 8)


def test_stream_copy_tile_bandwidth_floor():
    # all 800 bytes to one tile: the link is done after 100 latency + 100 work, but the
    # tile takes 4 bytes per cycle once data flows: 100 latency + 800 / 4 = 300
    trace = Machine(tiny()).run(_copy("in", [5], [800]))
    assert trace.total_cycles == 300


def test_empty_stream_copy_takes_no_time():
    prog = ir.Sequence(
        [ir.Compute(name="cs", vertex_tile=[3], vertex_cycles=[2]), _copy("none", [], [])]
    )
    rec = Machine(tiny()).run(prog).records[1]
    # no tile takes part: the record sits where the compute step (6 x 2 cycles) ended
    assert rec.cycles == 0 and rec.first_cycle == rec.last_cycle == 12
    assert int(rec.tile_cycles.sum()) == 0


def test_stream_copy_over_limit_is_an_error():
    cfg = tiny(**{"host.max_copy_bytes": 1000})
    with pytest.raises(HostLinkError, match="big-in"):
        Machine(cfg).run(_copy("big-in", [0, 1], [600, 600]))


def test_global_exchange_two_ipus():
    cfg = tiny(
        num_ipus=2,
        **{
            "links.bandwidth_bytes_per_s": 2e9,  # 2 bytes per cycle
            "links.links_between_neighbours": 1,
            "links.hop_latency_cycles": 10,
        },
    )
    step = ir.GlobalExchange(name="g", src_tile=[0], dst_tile=[8], num_bytes=[100])
    trace = Machine(cfg).run(step)
    # 100 bytes over one hop at 2 B/cycle = 50 (the tiles' 4 B/cycle is faster), + 10
    np.testing.assert_array_equal(trace.tile_end_cycles, [60] * 16)
    assert trace.totals["global_exchange"] == 16 * 60


def test_control_flow_and_effects():
    a = ir.Compute(name="a", effect=1, vertex_tile=[0], vertex_cycles=[1])
    b = ir.Compute(name="b", effect=2, vertex_tile=[0], vertex_cycles=[2])
    c = ir.Compute(name="c", effect=3, vertex_tile=[0], vertex_cycles=[3])
    prog = ir.Sequence(
        [
            ir.Repeat(2, a),
            ir.If(7, b, c),
            ir.RepeatWhile(condition=a, predicate=8, body=b),
            ir.Switch(9, [(0, a), (5, c)], default=b),
        ]
    )
    for granularity in ("ipu", "tile"):
        dp = ScriptedDataPlane({7: [0], 8: [1, 1, 0], 9: [5]})
        trace = Machine(tiny(**{"sim.granularity": granularity})).run(prog, data_plane=dp)
        # a a | else c | (a, true, b) (a, true, b) (a, false) | case 5: c
        assert dp.applied == [1, 1, 3, 1, 2, 1, 2, 1, 3]
        assert [r.name for r in trace.records] == ["a", "a", "c", "a", "b", "a", "b", "a", "c"]
        # one tile, one context: 6 x estimate each
        assert trace.total_cycles == 6 * (1 + 1 + 3 + 1 + 2 + 1 + 2 + 1 + 3)


def test_call_and_entries():
    f = ir.Compute(name="f", vertex_tile=[1], vertex_cycles=[4])
    prog = ir.Program(entries=(ir.Call(0), ir.Sequence([ir.Call(0), ir.Call(0)])), functions=(f,))
    m = Machine(tiny())
    assert m.run(prog, entry=0).total_cycles == 24
    assert m.run(prog, entry=1).total_cycles == 48
    with pytest.raises(IpusimError, match="entry 2"):
        m.run(prog, entry=2)


def test_timeout_keeps_partial_trace():
    step = ir.Compute(name="slow", vertex_tile=[0], vertex_cycles=[100])  # 600 cycles
    with pytest.raises(SimulationTimeout, match="max_cycles=1,000") as info:
        Machine(tiny()).run(ir.Repeat(5, step), max_cycles=1000)
    partial = info.value.trace
    assert not partial.complete
    assert [r.name for r in partial.records] == ["slow", "slow"]  # 1200 > 1000 at step 2
    assert partial.total_cycles == 1200
    assert isinstance(info.value, TimeoutError)


@pytest.mark.parametrize("granularity", ["ipu", "tile"])
def test_timeout_at_a_sync_release(granularity):
    # tile 0 computes for 600 cycles; the sync releases tile t at 600 + DELAYS[t], so
    # tiles 2.. pass 605 there, whichever group arrives last
    step = ir.Compute(name="slow", vertex_tile=[0], vertex_cycles=[100])
    prog = ir.Sequence([step, ir.Sync(name="sync", sync_kind="internal"), step])
    machine = Machine(tiny(**{"sim.granularity": granularity}))
    message = r"reached 611 in sync step 'sync' \(step 1\)"
    with pytest.raises(SimulationTimeout, match=message) as info:
        machine.run(prog, max_cycles=605)
    partial = info.value.trace
    assert [r.name for r in partial.records] == ["slow", "sync"]
    np.testing.assert_array_equal(partial.tile_end_cycles, 600 + DELAYS)
    assert machine.run(prog, max_cycles=603 + 600).total_cycles == 603 + 600


class _AbortAt:
    """Applies effects in order; effect ``stop`` raises RunAborted."""

    def __init__(self, stop: int) -> None:
        self.stop = stop
        self.applied: list[int] = []

    def apply(self, effect: int) -> None:
        self.applied.append(effect)
        if effect == self.stop:
            raise RunAborted(f"effect {effect} aborted the run")

    def predicate(self, predicate: int) -> int:
        return 1


@pytest.mark.parametrize("granularity", ["ipu", "tile"])
def test_abort_stops_every_group_at_the_failing_step(granularity):
    cfg = tiny(num_ipus=2, **{"sim.granularity": granularity})
    tpi = cfg.tile.tiles_per_ipu
    # IPU 1 is the slower: 6 x 700 cycles against 6 x 500 on IPU 0
    work = ir.Compute(name="work", effect=1, vertex_tile=[0, 1, tpi], vertex_cycles=[10, 500, 700])
    stop = ir.Compute(name="stop", effect=2, vertex_tile=[0], vertex_cycles=[1])
    after = ir.Compute(name="after", effect=3, vertex_tile=[tpi], vertex_cycles=[5])
    dp = _AbortAt(stop=2)
    with pytest.raises(RunAborted, match="effect 2") as info:
        Machine(cfg).run(ir.Sequence([work, stop, after]), data_plane=dp)
    assert dp.applied == [1, 2]  # nothing after the abort, whichever group ran ahead
    partial = info.value.trace
    assert [(r.name, r.first_cycle, r.last_cycle) for r in partial.records] == [
        ("work", 0, 4200),
        ("stop", 4200, 4200),
    ]
    want = np.zeros(2 * tpi, np.int64)
    want[[0, 1, tpi]] = [60, 3000, 4200]  # every tile up to the abort
    np.testing.assert_array_equal(partial.tile_end_cycles, want)


@pytest.mark.parametrize("granularity", ["ipu", "tile"])
def test_the_first_step_past_max_cycles_in_simulated_time_is_reported(granularity):
    cfg = tiny(num_ipus=2, **{"sim.granularity": granularity})
    tpi = cfg.tile.tiles_per_ipu
    # IPU 1 receives 800 bytes on one tile (100 latency + the tile's 800 / 4 = 200
    # cycles, above the link's 100), then starts b at cycle 300 and passes 3,000 there;
    # IPU 0 would pass it only at its 51st a (60 cycles each), which starts at cycle
    # 3,000: later in simulated time
    copy = _copy("in", [tpi], [800])
    b = ir.Compute(name="b", vertex_tile=[tpi + 1], vertex_cycles=[1000])  # 6,000
    a = ir.Compute(name="a", vertex_tile=[0], vertex_cycles=[10])
    with pytest.raises(SimulationTimeout, match=r"reached 6,300 in compute step 'b' \(step 1\)"):
        Machine(cfg).run(ir.Sequence([copy, b] + [a] * 100), max_cycles=3000)


def test_predicate_without_data_plane_is_clear():
    with pytest.raises(IpusimError, match="predicate 4"):
        Machine(tiny()).run(ir.If(4, ir.Sequence()))


def test_deterministic():
    m = Machine(tiny(num_ipus=2))
    prog = ir.Sequence([round_tiny_superstep(), _copy("in", [0, 9], [64, 64]), ir.Sync(name="x")])
    assert m.run(prog).fingerprint() == m.run(prog).fingerprint()


# ------------------------------------------------------------------ validation
def test_ir_validation_lists_every_problem():
    bad = ir.Sequence(
        [
            ir.Compute(name="cs1", vertex_tile=[0, 99], vertex_cycles=[1, 2]),
            ir.Compute(name="cs2", vertex_tile=[0, 1], vertex_cycles=[1]),
            ir.Compute(name="cs3", vertex_tile=[0], vertex_cycles=[-5]),
            ir.Exchange(name="ex1", src_tile=[0], dst_tile=[9], num_bytes=[4]),
            ir.Repeat(-1, ir.Sequence()),
            ir.Call(3),
        ]
    )
    with pytest.raises(IRValidationError) as info:
        Machine(tiny(num_ipus=2)).run(bad)
    text = str(info.value)
    assert len(info.value.problems) == 6
    assert "'cs1'" in text and "tile 99" in text and "[0, 16)" in text
    assert "'cs2'" in text and "vertex_tile=2" in text and "vertex_cycles=1" in text
    assert "'cs3'" in text and "-5" in text
    assert "'ex1'" in text and "0->9" in text and "GlobalExchange" in text
    assert "count -1" in text
    assert "function 3" in text
    assert isinstance(info.value, ValueError)


def test_ir_validation_of_each_array_check():
    """Every compiled array check names its step, field, index and value."""
    bad = ir.Sequence(
        [
            ir.Compute(name="types", vertex_tile=[0, 1], vertex_cycles=[1, 1], vertex_type=[0, 2]),
            ir.Exchange(name="neg", src_tile=[0, 1], dst_tile=[1, 2], num_bytes=[4, -3]),
            ir.Exchange(name="far", src_tile=[0, -1, 3], dst_tile=[1, 2, 40], num_bytes=[1, 1, 1]),
            ir.Exchange(
                name="totals",
                tile=[3, 5, 3],
                bytes_sent=[1, 1, 1],
                bytes_received=[1, 1, 1],
                messages_sent=[1, 1, 1],
                messages_received=[1, 1, 1],
                max_distance=[0, 0, 0],
            ),
            ir.GlobalExchange(name="local", src_tile=[0, 2], dst_tile=[9, 3], num_bytes=[8, 8]),
        ]
    )
    with pytest.raises(IRValidationError) as info:
        Machine(tiny(num_ipus=2)).run(bad)
    problems = info.value.problems
    assert len(problems) == 6
    assert "'types' field 'vertex_type': type index 2 is out of range [0, 1)" in problems[0]
    assert "'neg' field 'num_bytes': value -3 at index 1 is negative" in problems[1]
    assert "'far' field 'src_tile': tile -1 at index 1" in problems[2]
    assert "'far' field 'dst_tile': tile 40 at index 2" in problems[3]
    assert "(1 bad entry)" in problems[3]
    assert "'totals' field 'tile': a tile is listed more than once" in problems[4]
    assert "'local' field 'dst_tile': transfer 1 (2->3) stays on one IPU" in problems[5]


def test_prepare_checks_a_program_once():
    """A checked program is not checked again; another program object is."""
    m = Machine(tiny())
    good = ir.Program(entries=(ir.Compute(name="cs", vertex_tile=[0], vertex_cycles=[4]),))
    assert m.prepare(good) is good
    assert m.run(good).total_cycles == m.run(good).total_cycles > 0
    bad = ir.Program(entries=(ir.Compute(name="cs", vertex_tile=[99], vertex_cycles=[4]),))
    for _ in range(2):
        with pytest.raises(IRValidationError, match="tile 99"):
            m.run(bad)


def test_recursive_function_rejected():
    prog = ir.Program(entries=(ir.Call(0),), functions=(ir.Call(1), ir.Sequence([ir.Call(0)])))
    with pytest.raises(IRValidationError, match="recursion"):
        Machine(tiny()).run(prog)


def test_ir_counts_must_be_whole_numbers():
    with pytest.raises(IRValidationError, match=r"1\.5 is not a whole number"):
        ir.Compute(name="cs", vertex_tile=[0], vertex_cycles=[1.5])


def test_fused_sync_release_equals_release_then_move():
    """The machine's compiled sync release (stock controller) moves clocks exactly as
    ``sync_release`` followed by a settle does (random clocks, delays and extras)."""
    from ipusim.machine_groups import _move, _release
    from ipusim.sync.controller import sync_release

    rng = np.random.default_rng(21)
    for trial in range(30):
        n = int(rng.integers(1, 40))
        clock = rng.integers(0, 10_000, n).astype(np.int64)
        delays = rng.integers(0, 50, n).astype(np.int64)
        extra = int(rng.integers(0, 300))
        want_clock, want_spent = clock.copy(), np.zeros(n, np.int64)
        want = _move(want_clock, sync_release(clock, delays, extra), want_spent)
        got_clock, got_spent = clock.copy(), np.zeros(n, np.int64)
        got = _release(got_clock, delays, extra, got_spent)
        assert tuple(map(int, got)) == tuple(map(int, want)), trial
        assert got_clock.tolist() == want_clock.tolist(), trial
        assert got_spent.tolist() == want_spent.tolist(), trial
        # by hand: every tile leaves at the latest arrival + extra + its delay
        assert got_clock.tolist() == (clock.max() + extra + delays).tolist(), trial


def _loop_body(seed: int) -> list[ir.Step]:
    """Compute with uneven estimates on two IPUs, per-IPU sync, exchange, a host copy
    onto both IPUs, an external and a host sync: steps whose per-tile arrays the run
    fills in (syncs, the copy) besides steps with costs of their own."""
    rng = np.random.default_rng(seed)
    tiles = np.arange(16)
    return [
        ir.Compute(name="cs", vertex_tile=tiles, vertex_cycles=rng.integers(5, 90, 16)),
        ir.Sync(name="internal", sync_kind="internal"),
        ir.Exchange(name="ex", src_tile=[0, 9], dst_tile=[3, 14], num_bytes=[64, 96]),
        _copy("in", [1, 2, 10], [40, 80, 120]),
        ir.Sync(name="external", sync_kind="external"),
        ir.Compute(name="cs2", vertex_tile=[4, 12], vertex_cycles=[30, 70]),
        ir.Sync(name="host", sync_kind="host"),
    ]


@pytest.mark.parametrize("granularity", ["ipu", "tile"])
@pytest.mark.parametrize("replicas", [1, 2])
def test_a_loop_keeps_its_records_values_and_shares_their_arrays(granularity, replicas):
    """A loop run with ``Repeat`` gives the records of the same steps unrolled as
    distinct step objects (whose arrays cannot be shared), and its repeated iterations
    share their per-tile arrays instead of keeping one each."""
    iterations = 12
    cfg = tiny(num_ipus=2, **{"sim.granularity": granularity})
    body = _loop_body(3)
    if replicas == 2:  # one IPU a replica: the steps name replica 0's tiles
        body = [
            ir.Compute(name="cs", vertex_tile=[0, 5], vertex_cycles=[9, 40]),
            ir.Sync(name="internal"),
            _copy("in", [2], [48]),
            ir.Sync(name="host", sync_kind="host"),
        ]
    loop = ir.Program(entries=(ir.Repeat(iterations, ir.Sequence(body)),), replicas=replicas)
    unrolled_steps = [dataclasses.replace(s) for _ in range(iterations) for s in body]
    unrolled = ir.Program(entries=(ir.Sequence(unrolled_steps),), replicas=replicas)
    a, b = Machine(cfg).run(loop), Machine(cfg).run(unrolled)
    assert len(a.records) == len(b.records) == iterations * len(body)
    for ra, rb in zip(a.records, b.records, strict=True):
        assert (ra.kind, ra.name, ra.first_cycle, ra.last_cycle) == (
            rb.kind, rb.name, rb.first_cycle, rb.last_cycle,
        )  # fmt: skip
        np.testing.assert_array_equal(ra.tile_cycles, rb.tile_cycles)
        if ra.active_cycles is not None or rb.active_cycles is not None:
            np.testing.assert_array_equal(ra.active_cycles, rb.active_cycles)
    assert a.tile_end_cycles.tolist() == b.tile_end_cycles.tolist()
    for position, step in enumerate(body):
        own = [r.tile_cycles for r in a.records[position :: len(body)]]
        distinct = {id(arr) for arr in own}
        # every iteration after the first two is the same as the one before
        assert len(distinct) <= 2, (step.name, len(distinct))
    assert len({id(r.tile_cycles) for r in b.records if r.kind == "sync"}) == sum(
        1 for r in b.records if r.kind == "sync"
    )
