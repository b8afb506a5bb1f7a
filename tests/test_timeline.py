"""The Chrome trace-event timeline of a run, checked against hand-worked timelines."""

from __future__ import annotations

import json

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.errors import IpusimError, SimulationTimeout
from ipusim.machine import Machine
from ipusim.profile.timeline import TraceViewError, choose_tiles, trace_events, write_timeline
from tests.conftest import ROUND_TINY, ROUND_TINY_SYNC_DELAYS, round_tiny_superstep

# ROUND_TINY: 1 GHz, so 1 cycle = 0.001 us; tile i is [0,1,2,3,1,2,3,4][i] hops from
# the sync controller (tile 0), its sync delay 3 + 2 * hops.
ROUND = ROUND_TINY
DELAYS = np.array(ROUND_TINY_SYNC_DELAYS)
US = 1e-3  # microseconds per cycle at 1 GHz


@pytest.fixture(scope="module")
def trace():
    """``round_tiny_superstep`` run on ROUND_TINY (its compute step of program 3)."""
    return Machine(load_config("tiny", overrides=ROUND)).run(round_tiny_superstep(program_id=3))


def x_events(data, pid=None, tid=None):
    return [
        e
        for e in data["traceEvents"]
        if e["ph"] == "X" and (pid is None or e["pid"] == pid) and (tid is None or e["tid"] == tid)
    ]


def test_written_file_is_valid_trace_event_json(trace, tmp_path):
    path = write_timeline(trace, tmp_path / "timeline.json")
    data = json.loads(path.read_text())
    assert data["displayTimeUnit"] == "ns"
    events = data["traceEvents"]
    assert events
    for e in events:
        assert {"name", "ph", "pid", "tid"} <= e.keys()
        assert e["ph"] in {"X", "M", "C"}
        if e["ph"] == "X":
            assert {"ts", "dur", "cat", "args"} <= e.keys()
            assert e["dur"] >= 0 and e["ts"] >= 0
        elif e["ph"] == "C":
            assert "ts" in e and isinstance(e["args"]["active tiles"], int)
        else:
            assert "args" in e
    # metadata first, then the timed events in time order
    kinds = [e["ph"] == "M" for e in events]
    first_timed = kinds.index(False)
    assert all(kinds[:first_timed]) and not any(kinds[first_timed:])
    ts = [e["ts"] for e in events[first_timed:]]
    assert ts == sorted(ts)


def test_steps_thread_has_one_event_per_record_laid_end_to_end(trace):
    data = trace_events(trace)
    steps = x_events(data, pid=0, tid=0)
    assert [e["name"] for e in steps] == ["cs", "sync", "ex"]
    assert [e["cat"] for e in steps] == ["compute", "sync", "exchange"]
    assert [e["args"]["phase"] for e in steps] == ["compute", "sync", "internal_exchange"]
    assert steps[0]["args"]["program_id"] == 3
    # own spans: compute [0, 180); sync [0, 180 + 11 = 191); exchange from tile 0's
    # release 183 to tile 7's release 191 + 29 = 220
    spans = [(e["args"]["first_cycle"], e["args"]["last_cycle"]) for e in steps]
    assert spans == [(0, 180), (0, 191), (183, 220)]
    # end to end: [0,180), [180,191), [191,220); the sync overlaps the compute by 180,
    # the exchange the sync by 191 - 183 = 8
    assert [e["args"]["cycles"] for e in steps] == [180, 11, 29]
    assert [e["args"]["overlapped"] for e in steps] == [0, 180, 8]
    assert [e["ts"] for e in steps] == pytest.approx([0.0, 180 * US, 191 * US])
    assert [e["dur"] for e in steps] == pytest.approx([180 * US, 11 * US, 29 * US])


def test_tile_slices_by_hand(trace):
    data = trace_events(trace, tiles=[0, 7])
    t0 = x_events(data, pid=0, tid=1)
    # tile 0: compute [0,120), sync until 180 + 3 = 183, exchange [183, 183 + 29)
    assert [(e["name"], e["ts"], e["dur"]) for e in t0] == [
        ("cs", pytest.approx(0.0), pytest.approx(120 * US)),
        ("sync", pytest.approx(120 * US), pytest.approx(63 * US)),
        ("ex", pytest.approx(183 * US), pytest.approx(29 * US)),
    ]
    t7 = x_events(data, pid=0, tid=8)
    # tile 7 does no compute: sync [0, 191), exchange [191, 220)
    assert [(e["name"], e["ts"], e["dur"]) for e in t7] == [
        ("sync", pytest.approx(0.0), pytest.approx(191 * US)),
        ("ex", pytest.approx(191 * US), pytest.approx(29 * US)),
    ]
    names = {
        (e["tid"], e["args"]["name"]) for e in data["traceEvents"] if e["name"] == "thread_name"
    }
    assert names == {(0, "steps"), (1, "tile 0"), (8, "tile 7")}


def test_tile_slices_are_cumulative_tile_cycles(trace):
    """Independent check: tile t starts record k at the sum of its earlier cycles."""
    data = trace_events(trace, tiles=range(8))
    cycles = np.stack([r.tile_cycles for r in trace.records])  # [records, tiles]
    starts = np.cumsum(cycles, axis=0) - cycles
    np.testing.assert_array_equal(cycles.sum(axis=0), trace.tile_end_cycles)
    for t in range(8):
        got = x_events(data, pid=0, tid=t + 1)
        ran = np.flatnonzero(cycles[:, t] > 0)
        assert [e["args"]["step"] for e in got] == ran.tolist()
        assert [e["args"]["first_cycle"] for e in got] == starts[ran, t].tolist()
        assert [e["args"]["cycles"] for e in got] == cycles[ran, t].tolist()
        assert [e["ts"] for e in got] == pytest.approx((starts[ran, t] * US).tolist())
    assert data["otherData"]["tile_clocks_match"] is True


def test_default_tiles_are_busiest_in_compute_plus_tile_0(trace):
    # compute cycles per tile: [120, 180, 0, 0, 0, 50, 0, 0]
    assert choose_tiles(trace).tolist() == [0, 1, 5]
    assert choose_tiles(trace, max_tiles=1).tolist() == [0, 1]
    assert choose_tiles(trace, max_tiles=0).tolist() == [0]
    data = trace_events(trace, max_tiles=2)
    assert data["otherData"]["tiles"] == [0, 1]
    assert {e["tid"] for e in x_events(data)} == {0, 1, 2}


def test_active_tiles_counter(trace):
    data = trace_events(trace)
    counter = [e for e in data["traceEvents"] if e["ph"] == "C"]
    # the compute step: tiles 0, 1, 5 busy from 0; nothing computes after 180
    assert [(e["ts"], e["args"]["active tiles"]) for e in counter] == [
        (pytest.approx(0.0), 3),
        (pytest.approx(180 * US), 0),
    ]


def test_one_process_per_ipu():
    cfg = load_config("tiny", overrides={**ROUND, "num_ipus": 2})
    compute = ir.Compute(name="c", vertex_tile=[1, 9, 10], vertex_cycles=[10, 20, 30])
    program = ir.Sequence([compute, ir.Sync(name="s", sync_kind="external")])
    trace = Machine(cfg).run(program)
    data = trace_events(trace)
    names = {
        e["pid"]: e["args"]["name"] for e in data["traceEvents"] if e["name"] == "process_name"
    }
    assert names == {0: "IPU 0", 1: "IPU 1"}
    for pid in (0, 1):
        assert [e["name"] for e in x_events(data, pid=pid, tid=0)] == ["c", "s"]
    # compute: IPU 0 has one busy tile (1), IPU 1 two (tiles 9 and 10)
    samples = [(e["pid"], e["args"]["active tiles"]) for e in data["traceEvents"] if e["ph"] == "C"]
    assert sorted(samples) == [(0, 0), (0, 1), (1, 0), (1, 2)]
    # tile 10 computes 6 * 30 = 180 cycles, in process 1, thread 11
    t10 = x_events(data, pid=1, tid=11)
    assert t10[0]["args"]["cycles"] == 180


@pytest.mark.parametrize(
    ("tiles", "needle"), [([3, 8], "tile 8 is out of range [0, 8)"), ([1.5], "integer")]
)
def test_bad_tiles_are_a_clear_error(trace, tiles, needle):
    with pytest.raises(
        TraceViewError, match=needle.replace("[", r"\[").replace(")", r"\)")
    ) as info:
        trace_events(trace, tiles=tiles)
    assert isinstance(info.value, IpusimError) and isinstance(info.value, ValueError)


def test_negative_max_tiles_is_an_error(trace):
    with pytest.raises(TraceViewError, match="max_tiles"):
        trace_events(trace, max_tiles=-1)


def test_incomplete_run_keeps_only_the_slices_that_ran():
    cfg = load_config("tiny", overrides={**ROUND, "sim.granularity": "tile"})
    # tile t: one worker vertex of 10 t + 1 cycles -> 6 (10 t + 1) tile cycles per run
    compute = ir.Compute(name="c", vertex_tile=np.arange(8), vertex_cycles=10 * np.arange(8) + 1)
    with pytest.raises(SimulationTimeout) as info:
        Machine(cfg).run(ir.Repeat(10, compute), max_cycles=500)
    trace = info.value.trace
    assert not trace.complete
    data = trace_events(trace, tiles=range(8))
    per_run = 6 * (10 * np.arange(8) + 1)
    for t in range(8):
        got = x_events(data, pid=0, tid=t + 1)
        # every slice a tile ran is one full run of the compute set, back to back,
        # and together they reach the tile's final clock
        assert [e["args"]["first_cycle"] for e in got] == [k * per_run[t] for k in range(len(got))]
        assert len(got) * per_run[t] == trace.tile_end_cycles[t]
