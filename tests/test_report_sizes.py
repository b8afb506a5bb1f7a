"""``ipusim report`` refuses, before reading it, a profile too large to parse in the
memory free now (issue 32, sizes refused before work): one line, status 2, no file
written."""

from __future__ import annotations

import json

from ipusim import report
from ipusim.cli import main

EXECUTION = {
    "profilerMode": "IPU_MODEL",
    "simulation": {
        "cycles": 10,
        "tileCycles": {"compute": 10},
        "steps": [{"type": "OnTileExecute", "name": "a", "cyclesFrom": 0, "cyclesTo": 10}],
    },
}


def test_a_profile_too_large_for_free_memory_is_refused_before_reading(
    tmp_path, monkeypatch, capsys
):
    d = tmp_path / "profiles"
    d.mkdir()
    path = d / "execution.json"
    path.write_text(json.dumps(EXECUTION))
    size = path.stat().st_size
    # free memory just below what parsing the file needs (8 bytes per file byte)
    monkeypatch.setattr(report, "_available_memory", lambda: 8 * size - 1)

    def no_parse(*args, **kwargs):
        raise AssertionError("the profile was read")

    monkeypatch.setattr(report.json, "load", no_parse)
    assert main(["report", str(d), "--no-plots"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    assert str(path) in err[0]
    assert f"{size:,} bytes" in err[0] and f"{8 * size:,} bytes" in err[0]
    assert sorted(p.name for p in d.iterdir()) == ["execution.json"]  # nothing written


def test_a_profile_that_fits_is_read(tmp_path, monkeypatch, capsys):
    d = tmp_path / "profiles"
    d.mkdir()
    path = d / "execution.json"
    path.write_text(json.dumps(EXECUTION))
    monkeypatch.setattr(report, "_available_memory", lambda: 8 * path.stat().st_size)
    assert main(["report", str(d), "--no-plots"]) == 0


def test_unknown_free_memory_does_not_refuse(tmp_path, monkeypatch):
    d = tmp_path / "profiles"
    d.mkdir()
    (d / "execution.json").write_text(json.dumps(EXECUTION))
    monkeypatch.setattr(report, "_available_memory", lambda: None)
    assert main(["report", str(d), "--no-plots"]) == 0
