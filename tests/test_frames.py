"""pandas views and the HTML summary of a hand-built trace."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ipusim.profile.frames import STEP_COLUMNS, TILE_COLUMNS, steps_frame, tiles_frame, trace_html
from ipusim.profile.timeline import trace_events
from ipusim.trace import StepRecord, Trace

NEVER = np.iinfo(np.int64).max  # first_cycle of a step no tile took part in


def rec(index, kind, phase, name, first, last, cycles, active=None):
    return StepRecord(
        index=index,
        kind=kind,
        phase=phase,
        name=name,
        program_id=10 + index,
        first_cycle=first,
        last_cycle=last,
        tile_cycles=np.array(cycles, np.int64),
        active_cycles=None if active is None else np.array(active, np.int64),
    )


@pytest.fixture
def trace():
    # 2 IPUs of 2 tiles. Tile clocks: compute -> [10, 0, 30, 20]; a sync releases every
    # tile at 35 -> sync cycles [25, 35, 5, 15]; an exchange on tiles 1 and 3 of 12
    # cycles -> clocks [35, 47, 35, 47]; then a stream copy no tile took part in.
    records = [
        rec(0, "compute", "compute", "cs<1>", 0, 30, [10, 0, 30, 20], [8, 0, 25, 20]),
        rec(1, "sync", "sync", "sync", 0, 35, [25, 35, 5, 15]),
        rec(2, "exchange", "internal_exchange", "ex", 35, 47, [0, 12, 0, 12]),
        rec(3, "stream_copy", "host_exchange", "empty", NEVER, 0, [0, 0, 0, 0]),
    ]
    return Trace(
        config_name="hand",
        config_hash="0" * 16,
        clock_hz=1e9,
        num_tiles=4,
        tiles_per_ipu=2,
        records=records,
        tile_end_cycles=np.array([35, 47, 35, 47], np.int64),
    )


def test_steps_frame(trace):
    df = steps_frame(trace)
    assert tuple(df.columns) == STEP_COLUMNS
    assert df["index"].tolist() == [0, 1, 2, 3]
    assert df["kind"].tolist() == ["compute", "sync", "exchange", "stream_copy"]
    assert df["name"].tolist() == ["cs<1>", "sync", "ex", "empty"]
    assert df["program_id"].tolist() == [10, 11, 12, 13]
    assert df["first_cycle"].tolist()[:3] == [0, 0, 35]
    assert df["last_cycle"].tolist()[:3] == [30, 35, 47]
    # the empty stream copy has no span
    assert pd.isna(df.loc[3, "first_cycle"]) and pd.isna(df.loc[3, "last_cycle"])
    assert df["cycles"].tolist() == [30, 35, 12, 0]
    assert df["active_tiles"].tolist() == [3, 4, 2, 0]
    # sums 60, 80, 24, 0; maxima 30, 35, 12, 0
    assert df["total_tile_cycles"].tolist() == [60, 80, 24, 0]
    assert df["max_tile_cycles"].tolist() == [30, 35, 12, 0]
    # balance = mean / max: 15/30, 20/35, 6/12, and 0 when the max is 0
    assert df["tile_balance"].tolist() == pytest.approx([0.5, 20 / 35, 0.5, 0.0])
    assert df["active_cycles"].tolist() == [8 + 25 + 20, 0, 0, 0]


def test_steps_frame_of_an_empty_trace(trace):
    trace.records = []
    df = steps_frame(trace)
    assert len(df) == 0 and tuple(df.columns) == STEP_COLUMNS


def test_tiles_frame(trace):
    df = tiles_frame(trace)
    assert tuple(df.columns) == TILE_COLUMNS
    assert df["ipu"].tolist() == [0, 0, 1, 1]
    assert df["tile"].tolist() == [0, 1, 2, 3]
    assert df["compute"].tolist() == [10, 0, 30, 20]
    assert df["sync"].tolist() == [25, 35, 5, 15]
    assert df["internal_exchange"].tolist() == [0, 12, 0, 12]
    assert df["global_exchange"].tolist() == [0, 0, 0, 0]
    assert df["host_exchange"].tolist() == [0, 0, 0, 0]
    assert df["compute_active"].tolist() == [8, 0, 25, 20]
    assert df["end_cycle"].tolist() == [35, 47, 35, 47]
    # every tile's phases add up to its final clock
    phases = ["compute", "internal_exchange", "global_exchange", "host_exchange", "sync"]
    np.testing.assert_array_equal(df[phases].sum(axis=1), df["end_cycle"])


def test_trace_html(trace):
    text = trace_html(trace, head=2)
    assert text.startswith("<div>") and text.endswith("</div>")
    assert "<table" in text
    # totals over tiles: compute 60, sync 80, exchange 24; final clock 47
    for needle in (">60<", ">80<", ">24<", "47 (0.047 us)", "hand (4 tiles"):
        assert needle in text
    assert "cs&lt;1&gt;" in text and "cs<1>" not in text  # names are escaped
    assert ">sync<" in text and ">ex<" not in text  # only the first two steps
    assert "2 more step(s)" in text


def test_timeline_of_a_hand_built_trace(trace):
    data = trace_events(trace, tiles=[1, 2])
    assert data["otherData"]["tile_clocks_match"] is True
    x = [e for e in data["traceEvents"] if e["ph"] == "X"]
    # 4 records on each of 2 IPUs; tile 1: sync, exchange; tile 2: compute, sync
    assert sum(e["tid"] == 0 for e in x) == 8
    tile1 = [(e["name"], e["args"]["first_cycle"]) for e in x if e["tid"] == 2]
    tile2 = [(e["name"], e["args"]["first_cycle"]) for e in x if e["tid"] == 3]
    assert tile1 == [("sync", 0), ("ex", 35)]
    assert tile2 == [("cs<1>", 0), ("sync", 30)]
    assert all(e["dur"] >= 0 for e in x)
