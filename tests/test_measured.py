"""Readers of measured profiles: Poplar summaries (both layouts), execution profiles,
traces and the calibration CSV."""

from __future__ import annotations

import io
import json
from pathlib import Path

import cbor2
import numpy as np
import pytest

from ipusim.errors import IpusimError
from ipusim.measured import (
    PHASES,
    MeasuredProfileError,
    measured_from_trace,
    profile_from_points,
    read_measurements_csv,
    read_poplar_json,
    read_profile,
    read_summary,
)

DATA = Path(__file__).parent / "data" / "calibration"
IPUMODEL = DATA / "tut7_10000x1000_mk2_ipumodel_sdk2.txt"
HARDWARE = DATA / "tut7_10000x1000_mk2_hardware.txt"

# An SDK 1.x layout summary (totals over tiles), 4 tiles.
SDK1 = """\
Target:
  Type:                   IPU_MODEL (test)
  Total Tiles:            4
  Clock Speed (approx):   1,000.0 MHz
Graph:
  Number of vertices:     3
Execution:
  Total cycles:                                   12,000 (approx. 12.0 microseconds)
  Total compute cycles (including idle threads):  4,000
  Total compute cycles (excluding idle threads):  2,000
  Total IPU exchange cycles:                      1,002
  Total global exchange cycles:                   0
  Total host exchange cycles:                     40,000
  Total sync cycles:                              6
  Total tile balance:                             50.0%
  Steps:
        #  type                   from           to     cycles  tiles tile bal thread/data bal  name
        0  OnTileExecute             0        1,000      1,000      4   100.0%           50.0%  cs a
        1  Sync                  1,000        1,200        200      4   100.0%               -  sync
        2  OnTileExecute         1,200        1,500        300      2    50.0%           40.0%  cs a
"""


# ------------------------------------------------------------------------ summaries
def test_sdk2_ipu_model_summary_numbers_equal_the_file() -> None:
    p = read_profile(IPUMODEL)
    assert p.format == "summary-sdk2"
    assert p.phases == {
        "total": 6_681_766,
        "compute": 3_801.8,
        "compute_active": 3_717.6,
        "internal_exchange": 8_697.4,
        "global_exchange": 0.0,
        "host_exchange": 6_663_550.8,
        "sync": 1_134.8,
    }
    assert p.clock_hz == pytest.approx(6_681_766 / 5_023.9e-6)
    assert p.num_tiles is None and p.steps == () and p.source == str(IPUMODEL)


def test_sdk2_hardware_summary_has_no_compute_active() -> None:
    p = read_summary(HARDWARE.read_text(), source="hw")
    assert p.phases == {
        "total": 25_444_984,
        "compute": 28_300.3,
        "internal_exchange": 8_743.1,
        "global_exchange": 0.0,
        "host_exchange": 2_641_488.4,
        "sync": 135_849.6,
    }
    assert p.clock_hz == pytest.approx(25_444_984 / 19_131.6e-6)
    assert p.source == "hw"


def test_sdk1_totals_become_tile_averages_and_steps_are_read() -> None:
    p = read_summary(SDK1)
    assert p.format == "summary-sdk1"
    assert p.num_tiles == 4 and p.clock_hz == 1e9 and p.target_type == "IPU_MODEL"
    assert p.phases == {
        "total": 12_000,  # the run's total is not divided
        "compute": 1_000,
        "compute_active": 500,
        "internal_exchange": 250.5,
        "global_exchange": 0,
        "host_exchange": 10_000,
        "sync": 1.5,
    }
    assert p.metrics == {"tile_balance": 0.5}
    assert [(s.name, s.type, s.cycles) for s in p.steps] == [
        ("cs a", "OnTileExecute", 1000),
        ("sync", "Sync", 200),
        ("cs a", "OnTileExecute", 300),
    ]
    frame = p.frame()
    assert list(frame["kind"]) == ["phase"] * 7 + ["step"] * 3 + ["metric"]
    assert frame.loc[frame["name"] == "sync", "value"].tolist() == [1.5, 200.0]


def test_sdk1_totals_need_a_tile_count() -> None:
    text = SDK1.split("Graph:")[0].replace("  Total Tiles:            4\n", "") + (
        "Execution:\n" + SDK1.split("Execution:\n")[1]
    )
    with pytest.raises(MeasuredProfileError, match=r"--tiles") as err:
        read_summary(text, source="s.txt")
    assert "s.txt, line 6" in str(err.value)  # the first total (compute) names its line
    p = read_summary(text, num_tiles=8)
    assert p.phases["compute"] == 500 and p.num_tiles == 8
    with pytest.raises(MeasuredProfileError, match=r"says 4 tiles but 8 were given"):
        read_summary(SDK1, num_tiles=8)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("", r"<text>: the summary is empty"),
        ("Target:\n  Total Tiles: 4\n", r"no 'Execution:' section in 2 line"),
        ("Execution:\n\n  Programs executed:\n", r"has no phase line"),
        (
            "Execution:\n  Total cycles:  12,x00 (approx 1.0 microseconds)\n",
            r"line 2: 'Total cycles:  12,x00 .*': expected a number .* found '12,x00'",
        ),
        (
            "Execution:\n  Total cycles: 10\n  Tile average sync cycles: 1.0\n"
            "  Tile average sync cycles: 2.0\n",
            r"line 4: .*duplicated phase 'sync' \(first on line 3\)",
        ),
        (
            "Execution:\n  Total cycles: 10\n  Total tile balance: 83.9\n",
            r"line 3: .*expected a percentage",
        ),
        (
            "Target:\n  Total Tiles: 4\nExecution:\n  Total cycles: 10\n  Steps:\n"
            "    #  type  from  to  cycles  tiles  tile bal  thread/data bal  name\n"
            "    0  Sync  0  10  ten  4  1.0%  -  s\n",
            r"line 7: '0  Sync  0  10  ten.*': expected a steps row",
        ),
        ("Target:\n  Total Tiles: many\nExecution:\n  Total cycles: 1\n", r"line 2: .*tile"),
    ],
)
def test_malformed_summaries_name_the_line(text: str, pattern: str) -> None:
    with pytest.raises(MeasuredProfileError, match=pattern) as err:
        read_summary(text)
    assert isinstance(err.value, IpusimError) and isinstance(err.value, ValueError)


def test_read_profile_errors_for_missing_and_empty_files(tmp_path: Path) -> None:
    with pytest.raises(MeasuredProfileError, match=r"no such file"):
        read_profile(tmp_path / "nope.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(MeasuredProfileError, match=r"empty\.txt: the summary is empty"):
        read_profile(tmp_path / "empty.txt")
    with pytest.raises(MeasuredProfileError, match=r"without execution\.json"):
        read_profile(tmp_path)


# ------------------------------------------------------------------------ JSON
EXECUTION = {
    "simulation": {
        "cycles": 500,
        "tileCycles": {"compute": [100, 300], "activeCompute": [50, 50], "sync": [10, 20]},
        "steps": [
            {"type": "OnTileExecute", "program": 3, "name": "cs", "cyclesFrom": 0, "cyclesTo": 400},
            {"type": "Sync", "name": "s", "cycles": 100},
        ],
    }
}


def test_poplar_json_with_per_tile_arrays() -> None:
    p = read_poplar_json(EXECUTION)
    assert p.format == "poplar-json" and p.num_tiles == 2
    assert p.phases == {"total": 500, "compute": 200, "compute_active": 50, "sync": 15}
    assert [(s.name, s.type, s.cycles, s.program) for s in p.steps] == [
        ("cs", "OnTileExecute", 400, 3),
        ("s", "Sync", 100, None),
    ]


def test_json_errors_name_the_field(tmp_path: Path) -> None:
    with pytest.raises(MeasuredProfileError, match=r"missing field 'simulation\.cycles'"):
        read_poplar_json({"simulation": {"tileCycles": {}}})
    with pytest.raises(MeasuredProfileError, match=r"'simulation\.cycles' is 'many'"):
        read_poplar_json({"simulation": {"cycles": "many"}})
    sums = {"simulation": {"cycles": 5, "tileCycles": {"compute": 8}}}
    with pytest.raises(MeasuredProfileError, match=r"no tile count.*--tiles"):
        read_poplar_json(sums)
    assert read_poplar_json(sums, num_tiles=4).phases == {"total": 5, "compute": 2}
    bad = tmp_path / "execution.json"
    bad.write_text('{"simulation": {"cycles": 5,,}}')
    with pytest.raises(
        MeasuredProfileError, match=r"execution\.json, line 1 column \d+: not valid"
    ):
        read_profile(bad)
    step = {"simulation": {"cycles": 5, "steps": [{"type": "Sync", "name": "s"}]}}
    with pytest.raises(MeasuredProfileError, match=r"simulation\.steps\[0\] has neither"):
        read_poplar_json(step)


# ------------------------------------------------------------------------ round trip
@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory: pytest.TempPathFactory):
    """A small program on the tiny preset: host copy, exchange, two compute sets."""
    from codelets_common import SumVertex

    from poplar_api import FLOAT, Engine, Graph, IPUModel
    from poplar_api import program as prog

    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    graph.addCodelets(SumVertex)
    x = graph.addVariable(FLOAT, [16], "x")
    y = graph.addVariable(FLOAT, [4], "y")
    for t in range(4):
        graph.setTileMapping(x[4 * t : 4 * t + 4], t)
        graph.setTileMapping(y[t], 7 - t)
    cs = graph.addComputeSet("sum")
    for t in range(4):
        v = graph.addVertex(cs, "SumVertex", {"in": x[4 * t : 4 * t + 4], "out": y[t]})
        graph.setTileMapping(v, 7 - t)
        graph.setPerfEstimate(v, 20 + 10 * t)
    graph.createHostWrite("x", x)
    engine = Engine(graph, prog.Sequence(prog.Execute(cs), prog.Execute(cs)))
    engine.load(device)
    engine.writeTensor("x", np.arange(16, dtype=np.float32))
    engine.run(0)
    out = tmp_path_factory.mktemp("tiny_profile")
    for name, layout in (("summary.txt", "sdk1"), ("summary_sdk2.txt", "sdk2")):
        summary = io.StringIO()
        engine.printProfileSummary(summary, {"showExecutionSteps": "true", "summaryLayout": layout})
        (out / name).write_text(summary.getvalue())
    (out / "execution.json").write_text(json.dumps(engine.getExecutionProfile()))
    (out / "profile.json").write_text(json.dumps(engine.getGraphProfile()))
    return engine.getTrace(), out


def test_round_trip_three_readers_agree_with_the_trace(tiny_run) -> None:
    trace, out = tiny_run
    tiles = trace.num_tiles
    assert tiles == 8
    expected = {"total": float(trace.tile_end_cycles.max())}
    by_phase = {p: np.zeros(tiles, np.int64) for p in PHASES[1:]}
    for rec in trace.records:
        by_phase[rec.phase] += rec.tile_cycles
        if rec.active_cycles is not None:
            by_phase["compute_active"] += rec.active_cycles
    for phase, arr in by_phase.items():
        expected[phase] = arr.sum() / tiles
    assert expected["compute"] > 0 and expected["compute_active"] > 0

    from_trace = measured_from_trace(trace)
    from_summary = read_profile(out / "summary.txt")
    from_json = read_profile(out)  # execution.json + profile.json
    from_file = read_poplar_json(out / "execution.json")  # finds profile.json next to it
    assert from_trace.format == "ipusim-run" and from_summary.format == "summary-sdk1"
    assert from_json.format == "ipusim-json"
    for p in (from_trace, from_summary, from_json, from_file):
        assert p.phases == pytest.approx(expected), p.format
        assert p.num_tiles == 8 and p.clock_hz == pytest.approx(trace.clock_hz)
    ref = [(s.name, s.type, s.cycles) for s in from_json.steps]
    assert len(ref) == len(trace.records)
    assert [(s.name, s.type, s.cycles) for s in from_summary.steps] == ref
    assert [(s.name, s.type, s.cycles) for s in from_trace.steps] == ref
    assert sum(c for _, _, c in ref) == expected["total"]
    # SDK 2.x prints tile averages to one decimal
    from_sdk2 = read_profile(out / "summary_sdk2.txt")
    assert from_sdk2.format == "summary-sdk2"
    assert from_sdk2.phases == pytest.approx(expected, abs=0.05)


def test_cbor_profile_reads_like_json(tiny_run, tmp_path: Path) -> None:
    _, out = tiny_run
    for stem in ("execution", "profile"):
        data = json.loads((out / f"{stem}.json").read_text())
        with open(tmp_path / f"{stem}.cbor", "wb") as f:
            cbor2.dump(data, f)
    a, b = read_profile(out), read_profile(tmp_path)
    assert a.phases == b.phases and a.steps == b.steps and b.num_tiles == 8


# ------------------------------------------------------------------------ CSV
HEADER = "id,source,device,sdk,workload,parameters,metric,value,unit,notes\n"


def test_calibration_csv_rows(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_text(
        HEADER
        + 'X1.a,X,HW,3.2,w,"n=5;tiles=0,1;free text;op=a=b",tile_cycles,329,cycles,note\n'
        + "X1.b,X,HW,3.2,w,n=10,tile_cycles,330.5,cycles,\n"
        + 'Y1,Y,HW,3.2,w,,total_cycles,"1,000",cycles,\n'
    )
    points = read_measurements_csv(path)
    assert [(p.id, p.metric, p.value) for p in points] == [
        ("X1.a", "tile_cycles", 329.0),
        ("X1.b", "tile_cycles", 330.5),
        ("Y1", "total_cycles", 1000.0),
    ]
    assert points[0].parameters == {"n": "5", "tiles": "0,1", "op": "a=b", "note": "free text"}
    prof = profile_from_points(points, ["X1.*"])
    assert prof.metrics == {"tile_cycles[X1.a]": 329.0, "tile_cycles[X1.b]": 330.5}
    assert profile_from_points(points, ["Y*"]).metrics == {"total_cycles": 1000.0}
    with pytest.raises(MeasuredProfileError, match=r"no row id matches Z\*"):
        profile_from_points(points, ["Z*"])


@pytest.mark.parametrize(
    ("body", "pattern"),
    [
        ("id,source,value\nA,B,1\n", r"line 1: missing column\(s\) device, sdk, workload"),
        (HEADER + "A1,s,d,k,w,p,m,12x,cycles,n\n", r"line 2, row id 'A1', column 'value': '12x'"),
        (HEADER + "A1,s,d,k,w,p,m,1,c,n\nA1,s,d,k,w,p,m,2,c,n\n", r"id 'A1' repeats line 2"),
        (HEADER + "A1,s,d\n", r"row id 'A1': no value for column\(s\) sdk, workload"),
    ],
)
def test_malformed_csv_names_row_and_column(tmp_path: Path, body: str, pattern: str) -> None:
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(MeasuredProfileError, match=pattern):
        read_measurements_csv(path)


def test_calibration_csv_reads() -> None:
    path = Path(__file__).resolve().parent / "data" / "calibration" / "measurements.csv"
    if not path.exists():
        pytest.fail("tests/data/calibration/measurements.csv is missing")
    points = read_measurements_csv(path)
    assert len(points) == 292  # 252 + the 40 fully-connected rows of source J
    b1 = {p.id: p.value for p in points if p.id.startswith("B1.runA.tile")}
    assert b1 == {"B1.runA.tile0": 329, "B1.runA.tile1": 329, "B1.runA.tile2": 330}
