"""Checks of meaning: inputs that parse but mean nothing are refused, naming where.

Measured profiles (negative or decreasing cycles, a phase longer than the run, a
balance above 100 %), experiment files (every problem of a file in one pass, grids
sized before they are expanded) and ``ipusim report`` (a malformed profile is reported
before matplotlib is asked for).
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ipusim import cli, report
from ipusim.measured import (
    MeasuredProfile,
    MeasuredProfileError,
    MeasuredStep,
    read_measurements_csv,
    read_poplar_json,
    read_profile,
    read_summary,
)
from ipusim.sweep import grid
from ipusim.sweep.experiment import ExperimentError, load_experiment
from ipusim.sweep.points import expand_points
from tests.test_measured import SDK1

SUM = Path(__file__).resolve().parent / "data" / "calibrate_sum.py"

EXECUTION = {
    "simulation": {
        "cycles": 200,
        "tileCycles": {"compute": 400, "sync": 80},
        "steps": [
            {"type": "OnTileExecute", "name": "a", "cyclesFrom": 0, "cyclesTo": 100},
            {"type": "Sync", "name": "s", "cyclesFrom": 100, "cyclesTo": 130},
            {"type": "OnTileExecute", "name": "b", "cyclesFrom": 130, "cyclesTo": 200},
        ],
    }
}


def changed(path: str, value) -> dict:
    """EXECUTION with the field at dotted ``path`` (list indices as numbers) set."""
    data = copy.deepcopy(EXECUTION)
    *parents, last = [int(p) if p.isdigit() else p for p in path.split(".")]
    node = data
    for key in parents:
        node = node[key]
    node[last] = value
    return data


# ------------------------------------------------------------- execution profiles
def test_a_valid_profile_reads():
    profile = read_poplar_json(EXECUTION, num_tiles=4)
    assert profile.phases == {"total": 200.0, "compute": 100.0, "sync": 20.0}
    assert [s.cycles for s in profile.steps] == [100.0, 30.0, 70.0]


@pytest.mark.parametrize(
    ("path", "value", "expected"),
    [
        ("simulation.cycles", -1, r"'simulation.cycles' is -1; required a number of cycles >= 0"),
        ("simulation.tileCycles.compute", -4, r"'simulation.tileCycles.compute' is -4.*>= 0"),
        (
            "simulation.tileCycles.compute",
            [100, -1, 100, 100],
            r"'simulation.tileCycles.compute\[1\]' is -1 \(1 such tile\(s\)\)",
        ),
        ("simulation.tileCycles.sync", [True, False, True, True], "not a list of numbers"),
        ("simulation.steps.1.cyclesTo", 90, r"steps\[1\]: cyclesTo 90 < cyclesFrom 100"),
        (
            "simulation.steps.2.cyclesFrom",
            50,
            r"steps\[2\]: cyclesFrom 50 is before simulation.steps\[1\].cyclesFrom 100.*never "
            r"decrease",
        ),
        ("simulation.steps.0.cyclesFrom", -10, r"steps\[0\].cyclesFrom' is -10"),
        (
            "simulation.tileCycles.compute",
            4000,
            r"tile average of phase 'compute' is 1,000 cycles, more than the run's total of 200",
        ),
    ],
)
def test_an_execution_profile_that_means_nothing_is_refused(path, value, expected):
    with pytest.raises(MeasuredProfileError, match=expected):
        read_poplar_json(changed(path, value), num_tiles=4)


@settings(max_examples=60, deadline=None)
@given(
    durations=st.lists(st.integers(0, 10**9), min_size=1, max_size=12),
    gaps=st.lists(st.integers(0, 10**6), min_size=12, max_size=12),
    back=st.integers(1, 10**6),
    where=st.integers(0, 11),
)
def test_steps_in_order_read_and_a_step_going_back_is_refused(durations, gaps, back, where):
    """Hypothesis: steps laid out in order (any gaps) read with cycles = to - from; a
    step moved to start before the one before it is refused, naming both."""
    steps, start = [], 0
    for k, d in enumerate(durations):
        start += gaps[k]
        steps.append({"type": "Sync", "name": f"s{k}", "cyclesFrom": start, "cyclesTo": start + d})
        start += d
    profile = {"simulation": {"cycles": start, "steps": steps}}
    assert [s.cycles for s in read_poplar_json(profile).steps] == [float(d) for d in durations]
    k = where % len(steps)
    if k == 0:
        return
    earlier = steps[k - 1]["cyclesFrom"] - back
    steps[k]["cyclesFrom"] = earlier
    steps[k]["cyclesTo"] = max(earlier, 0) + durations[k]
    with pytest.raises(MeasuredProfileError, match=rf"steps\[{k}\]"):
        read_poplar_json(profile)


# ------------------------------------------------------------------------ summaries
@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        (
            "12,000 (approx",
            "-12,000 (approx",
            r"line 8: .*found -12,000; required a number of cycles >= 0",
        ),
        (
            "Total tile balance:                             50.0%",
            "Total tile balance: 150.0%",
            "0-100%",
        ),
        (
            "        1,000        1,200        200",
            "        1,000          900        200",
            r"line 19: .*the step ends \('to'\) before it starts",
        ),
        (
            "2  OnTileExecute         1,200",
            "2  OnTileExecute           500",
            r"line 20: .*starts before the step on line 19",
        ),
        (
            "Total sync cycles:                              6",
            "Total sync cycles:                              60,000",
            r"phase 'sync' is 15,000 cycles, more than the run's total of 12,000",
        ),
    ],
)
def test_a_summary_that_means_nothing_is_refused(old, new, expected):
    assert old in SDK1
    with pytest.raises(MeasuredProfileError, match=expected):
        read_summary(SDK1.replace(old, new), "s.txt")


def test_the_unchanged_summary_reads():
    profile = read_summary(SDK1, "s.txt")
    assert profile.phases["sync"] == 6 / 4 and profile.metrics["tile_balance"] == 0.5


# ------------------------------------------------------------- measurements and objects
def test_a_negative_cycle_count_in_measurements_csv_is_refused(tmp_path):
    header = "id,source,device,sdk,workload,parameters,metric,value,unit,notes\n"
    path = tmp_path / "m.csv"
    path.write_text(header + "a,s,d,k,w,,delta,-3,percent,\n" + "b,s,d,k,w,,block,-5,cycles,\n")
    with pytest.raises(
        MeasuredProfileError, match=r"line 3, row id 'b'.*-5 cycles; required a count >= 0"
    ):
        read_measurements_csv(path)
    path.write_text(header + "a,s,d,k,w,,delta,-3,percent,\n")
    assert read_measurements_csv(path)[0].value == -3.0  # a difference may be negative


@pytest.mark.parametrize(
    ("phases", "steps", "expected"),
    [
        ({"total": -1.0}, (), r"phase 'total' is -1.0; required a finite number of cycles >= 0"),
        ({"total": float("nan")}, (), r"phase 'total' is nan"),
        ({"total": 5.0}, (MeasuredStep("a", "Sync", -2.0),), r"step 0 \('a', Sync\) has -2.0"),
    ],
)
def test_a_measured_profile_object_checks_its_numbers(phases, steps, expected):
    with pytest.raises(MeasuredProfileError, match=expected):
        MeasuredProfile(source="x", format="csv", phases=phases, steps=steps)


# --------------------------------------------------------------------- experiments
def test_every_problem_of_an_experiment_file_in_one_pass(tmp_path):
    """Schema problems (an unknown key, a bad mode, repeats 0, an endless range) and
    deeper ones (a missing workload file, a value the config refuses, an unknown field)
    are all listed by one load, each at its place in the file."""
    path = tmp_path / "exp.yaml"
    path.write_text(
        "name: e\n"
        "workloads:\n"
        "  - {spec: tut.py, colour: red}\n"
        "  - {spec: nope.py}\n"
        "repeats: 0\n"
        "mode: zap\n"
        "axes:\n"
        "  - {path: workload.rows, range: {start: 0, stop: 1.0e+308, step: 1.0e-308}}\n"
        "  - {path: exchange.bytes_per_cycle, values: [1, -3]}\n"
        "  - {path: tile.nope, values: [1]}\n"
    )
    with pytest.raises(ExperimentError) as info:
        load_experiment(path)
    found = "\n".join(info.value.problems)
    for expected in (
        "workloads[0].colour: unknown key",
        "axes[0]: range from 0 to 1e+308 by 1e-308 has too many values",
        "mode: found 'zap'",
        "repeats: found 0",
        "workloads[1].spec: workload file 'nope.py' not found",
        "axes[1] (exchange.bytes_per_cycle): value -3 is rejected",
        "axes[2] (tile.nope): 'tile.nope' is not a config field",
    ):
        assert expected in found
    assert len(info.value.problems) == 7


def test_a_dropped_workload_axis_does_not_make_up_a_missing_parameter(tmp_path):
    """An axis refused by the schema still counts as giving its parameter: no second,
    false problem 'needs rows'."""
    (tmp_path / "w.py").write_text("def workload(device, rows):\n    pass\n")
    data = {
        "name": "e",
        "workloads": [{"spec": "w.py"}],
        "axes": [{"path": "workload.rows", "values": []}],
    }
    with pytest.raises(ExperimentError) as info:
        load_experiment(data, base_dir=tmp_path)
    assert len(info.value.problems) == 1 and "axes[0].values" in info.value.problems[0]


def test_a_huge_grid_is_refused_before_it_is_built(tmp_path):
    (tmp_path / "w.py").write_text("def workload(device, rows=1, cols=1):\n    pass\n")
    data = {
        "name": "e",
        "workloads": [{"spec": "w.py"}],
        "axes": [
            {"path": "workload.rows", "range": {"start": 0, "stop": 100_000}},
            {"path": "workload.cols", "range": {"start": 0, "stop": 100_000}},
        ],
    }
    with pytest.raises(ExperimentError, match=r"10,000,000,000 points .*at most 1,000,000"):
        load_experiment(data, base_dir=tmp_path)  # counted from the axis lengths, not built


def test_expand_points_sizes_the_grid_first(tmp_path, monkeypatch):
    (tmp_path / "w.py").write_text("def workload(device, rows=1):\n    pass\n")
    exp = load_experiment(
        {
            "name": "e",
            "workloads": [{"spec": "w.py"}],
            "axes": [{"path": "workload.rows", "values": [1, 2, 3]}],
            "repeats": 2,
        },
        base_dir=tmp_path,
    )
    monkeypatch.setattr(grid, "MAX_POINTS", 5)

    def never(*args):
        raise AssertionError("the grid was expanded")

    monkeypatch.setattr("ipusim.sweep.points._combinations", never)
    with pytest.raises(
        ExperimentError, match=r"6 points \(1 workload\(s\) x 3 axis values x 2 repeat"
    ):
        expand_points(exp)


# ------------------------------------------------------------------------- report
def test_report_names_a_malformed_profile_before_asking_for_matplotlib(
    tmp_path, monkeypatch, capsys
):
    """Without matplotlib, a malformed profile is still reported as what it is."""

    def missing():
        raise report.ReportError("plots need matplotlib")

    monkeypatch.setattr(report, "require_matplotlib", missing)
    d = tmp_path / "p"
    d.mkdir()
    (d / "execution.json").write_text(json.dumps(changed("simulation.steps.1.cyclesTo", 5)))
    assert cli.main(["report", str(d)]) == 2
    err = capsys.readouterr().err
    assert "cyclesTo 5 < cyclesFrom 100" in err and "matplotlib" not in err
    (d / "execution.json").write_text(json.dumps(EXECUTION))
    (d / "profile.json").write_text(
        json.dumps({"target": {"bytesPerTile": -1}, "memory": {"byTile": {"total": [1]}}})
    )
    assert cli.main(["report", str(d)]) == 2
    err = capsys.readouterr().err
    assert "'target.bytesPerTile': found -1" in err and "matplotlib" not in err
    (d / "profile.json").unlink()
    assert cli.main(["report", str(d)]) == 2
    assert "plots need matplotlib" in capsys.readouterr().err


# ------------------------------------------------------------ command-line numbers
@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["compare", "a", "b", "--tiles", "-3"], "argument --tiles: found -3; required at least 1"),
        (["compare", "a", "b", "--tiles", "0"], "argument --tiles: found 0; required at least 1"),
        (
            ["compare", "a", "b", "--fail-above", "nan"],
            "argument --fail-above: found nan; required a finite percentage >= 0",
        ),
        (["compare", "a", "b", "--fail-above", "-1"], "found -1; required a finite percentage"),
        (["compare", "a", "b", "--steps", "-5"], "argument --steps: found -5; required N >= 0"),
        (
            ["calibrate", "--param", "x", "--pair", "a=b", "--max-evaluations", "0"],
            "argument --max-evaluations: found 0; required at least 1",
        ),
        (["calibrate", "--param", "x", "--pair", "a=b", "--tiles", "-1"], "--tiles: found -1"),
    ],
)
def test_numbers_on_the_command_line_are_checked_before_any_work(argv, expected, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


# ------------------------------------------------------- anything in, one error out
_NUMBERS = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=4),
    st.lists(st.integers(-5, 5), max_size=4),
)
_STEP = st.dictionaries(
    st.sampled_from(["type", "name", "cycles", "cyclesFrom", "cyclesTo", "program"]), _NUMBERS
)
_TILE_CYCLES = st.dictionaries(st.sampled_from(["compute", "sync", "activeCompute", "x"]), _NUMBERS)
_SIMULATION = st.dictionaries(
    st.sampled_from(["cycles", "tileCycles", "steps"]),
    st.one_of(_NUMBERS, st.lists(_STEP, max_size=4), _TILE_CYCLES),
)
_TARGET = st.dictionaries(st.sampled_from(["numTiles", "clockFrequency", "type"]), _NUMBERS)


@settings(max_examples=150, deadline=None)
@given(
    profile=st.one_of(
        st.fixed_dictionaries({"simulation": _SIMULATION}),
        st.fixed_dictionaries(
            {
                "executionProfile": st.fixed_dictionaries({"simulation": _SIMULATION}),
                "graphProfile": st.fixed_dictionaries({"target": _TARGET}),
            }
        ),
        _NUMBERS,
    ),
    tiles=st.one_of(st.none(), st.integers(-3, 10)),
)
def test_any_execution_profile_is_read_or_refused_with_a_measured_profile_error(profile, tiles):
    """Hypothesis: whatever the structure, the reader answers a MeasuredProfileError,
    never a TypeError or KeyError from inside, or a profile whose numbers mean cycles:
    finite, not negative, no phase average above the total."""
    try:
        result = read_poplar_json(profile, num_tiles=tiles)
    except MeasuredProfileError:
        return
    values = [*result.phases.values(), *(s.cycles for s in result.steps)]
    assert all(math.isfinite(v) and v >= 0 for v in values)
    assert all(v <= result.phases["total"] + 0.5 for v in result.phases.values())


_AXIS_NUMBER = st.one_of(
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 1e308, -1e308, 5e-324, 2**64]),
)
_AXIS = st.one_of(
    st.fixed_dictionaries(
        {"path": st.sampled_from(["workload.n", "exchange.bytes_per_cycle", "config"]),
         "range": st.fixed_dictionaries({"start": _AXIS_NUMBER, "stop": _AXIS_NUMBER},
                                        optional={"step": _AXIS_NUMBER})}
    ),
    st.fixed_dictionaries(
        {"path": st.sampled_from(["tile.tiles_per_ipu", "workload.n"]),
         "geomspace": st.fixed_dictionaries({"start": _AXIS_NUMBER, "stop": _AXIS_NUMBER,
                                             "num": _AXIS_NUMBER})}
    ),
    st.fixed_dictionaries(
        {"path": st.sampled_from(["tile.clock_hz", "workload.n", "config", "nope.x"]),
         "values": st.lists(st.one_of(_AXIS_NUMBER, st.text(max_size=5)), max_size=4)}
    ),
)  # fmt: skip


@settings(max_examples=100, deadline=None)
@given(
    axes=st.lists(_AXIS, max_size=3),
    extra=st.dictionaries(
        st.sampled_from(["mode", "repeats", "config", "bogus"]),
        st.one_of(_AXIS_NUMBER, st.sampled_from(["zip", "product", "tiny", "nope"])),
    ),
)
def test_any_experiment_is_loaded_or_refused_with_an_experiment_error(axes, extra):
    """Hypothesis: huge, empty, infinite or negative ranges and values, and keys of the
    wrong type, come out as one ExperimentError listing the problems."""
    data = {"name": "e", "workloads": [{"spec": str(SUM)}], "axes": axes, **extra}
    try:
        load_experiment(data)
    except ExperimentError as exc:
        assert exc.problems


@pytest.mark.parametrize("reader", [read_poplar_json, read_profile])
def test_a_profile_that_is_not_a_path_nor_a_dict_is_named(reader):
    with pytest.raises(MeasuredProfileError, match=r"found NoneType None; required a path"):
        reader(None)


@pytest.mark.parametrize("name", ["execution.json", "deep.json"])
def test_a_json_profile_nested_too_deeply_is_not_called_cbor(tmp_path, name):
    # Its RecursionError fell into the CBOR decoder's catch-all: "not valid CBOR".
    path = tmp_path / name
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(MeasuredProfileError, match="nested too deeply to read") as info:
        read_profile(path)
    assert "CBOR" not in str(info.value)


def test_an_experiment_nested_too_deeply_is_not_called_a_machine_config(tmp_path):
    path = tmp_path / "deep.yaml"
    path.write_text("name: " + "[" * 10_000 + "]" * 10_000 + "\n")
    with pytest.raises(ExperimentError, match="nested too deeply to read") as info:
        load_experiment(path)
    assert "machine config (" not in str(info.value)
