"""Sweeps over the tile count get their tile layout derived, and a sweep report keeps
only the rows of the experiment as last run unless ``--all-versions`` is given."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from ipusim import cli
from ipusim.config import config_hash, load_config, with_overrides
from ipusim.sweep import ExperimentError, ResultStore, expand_points, load_experiment
from ipusim.sweep.analysis import load_results

WORKLOAD = Path(__file__).parent / "data" / "calibrate_sum.py"


def tile_experiment(values, base="tiny", **config_set):
    return {
        "name": "tiles",
        "workloads": [{"spec": str(WORKLOAD), "params": {"n": 16}}],
        "config": {"base": base, "set": config_set},
        "axes": [{"path": "tile.tiles_per_ipu", "values": values}],
    }


def test_a_tile_count_axis_keeps_the_column_count_down_to_one_tile_per_column():
    # tiny: 2 columns; mk2: 16 columns (sync controller set onto the smaller chips).
    for base, columns, values in (("tiny", 2, [1, 2, 8, 32]), ("mk2", 16, [4, 16, 64])):
        extra = {"sync.controller_tile": 0} if base == "mk2" else {}
        points = expand_points(load_experiment(tile_experiment(values, base, **extra)))
        found = {p.axes["tile.tiles_per_ipu"]: p.machine.tile.columns for p in points}
        assert found == {n: min(n, columns) for n in values}
        assert all(p.machine.sync.controller_tile == 0 for p in points)


def test_a_chip_too_small_for_the_sync_controller_gets_it_on_its_middle_tile():
    # mk2's controller sits on tile 736 of 1472; 1000 tiles keep it there.
    values = [8, 100, 736, 737, 1000]
    points = expand_points(load_experiment(tile_experiment(values, "mk2")))
    found = {p.axes["tile.tiles_per_ipu"]: p.machine.sync.controller_tile for p in points}
    assert found == {8: 4, 100: 50, 736: 368, 737: 736, 1000: 736}


def test_points_that_fit_the_base_layout_keep_their_config_hash():
    points = expand_points(load_experiment(tile_experiment([2, 8])))
    tiny = load_config("tiny")
    for point in points:
        plain = with_overrides(tiny, {"tile.tiles_per_ipu": point.axes["tile.tiles_per_ipu"]})
        assert point.config_hash == config_hash(plain)


def test_an_explicit_column_count_is_kept_and_checked_against_the_tile_count():
    points = expand_points(load_experiment(tile_experiment([4, 8], **{"tile.columns": 4})))
    assert [p.machine.tile.columns for p in points] == [4, 4]
    with pytest.raises(ExperimentError) as info:
        load_experiment(tile_experiment([2, 8], **{"tile.columns": 4}))
    text = str(info.value)
    assert "tile.columns = 4 with tile.tiles_per_ipu = 2" in text


# -------------------------------------------------------------------- versions in a report
BROKEN = """
def workload(device, n: int = 16):
    raise RuntimeError("version 1 is broken")
"""


def write(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_report_shows_the_current_version_unless_asked(tmp_path, capsys):
    spec = tmp_path / "my_workload.py"
    spec.write_text(BROKEN)
    exp = write(
        tmp_path / "exp.yaml",
        {
            "name": "versions",
            "workloads": [{"spec": "my_workload.py", "params": {"n": 16}}],
            "config": "tiny",
        },
    )
    out = tmp_path / "out"
    assert cli.main(["sweep", str(exp), "--out", str(out), "--no-progress"]) == 1
    shutil.copy(WORKLOAD, spec)  # the fixed workload: a new version, a new key
    assert cli.main(["sweep", str(exp), "--out", str(out), "--no-progress"]) == 0
    assert len(ResultStore(out).done_keys()) == 2
    capsys.readouterr()

    assert cli.main(["sweep", "report", str(out), "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert f"sweep {out}: 1 points, 1 ok, 0 failed" in text
    assert "version 1 is broken" not in text
    assert "1 stored row(s) of earlier versions" in text and "--all-versions" in text

    assert cli.main(["sweep", "report", str(out), "--no-plots", "--all-versions"]) == 0
    text = capsys.readouterr().out
    assert f"sweep {out}: 2 points, 1 ok, 1 failed" in text
    assert "version 1 is broken" in text and "earlier versions" not in text

    current = load_results(out)
    assert list(current["status"]) == ["ok"] and current.attrs["other_versions"] == 1
    assert sorted(load_results(out, all_versions=True)["status"]) == ["error", "ok"]
