"""``ipusim config show|list`` and loading presets from an installed wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from ipusim.cli import main
from ipusim.config import config_hash, load_config

ROOT = Path(__file__).resolve().parents[1]


def split_show_output(out: str) -> tuple[dict, str]:
    """The YAML part and the hash of ``config show`` output."""
    body, _, last = out.rstrip("\n").rpartition("\n")
    assert last.startswith("hash: "), last
    return yaml.safe_load(body), last.removeprefix("hash: ")


def test_show_prints_the_resolved_config_and_its_hash(capsys):
    assert main(["config", "show", "mk2"]) == 0
    captured = capsys.readouterr()
    data, digest = split_show_output(captured.out)
    expected = load_config("mk2")
    assert digest == config_hash(expected)
    assert load_config(data) == expected
    assert data["tile"]["tiles_per_ipu"] == 1472
    assert data["memory"]["tile_memory_bytes"] == 624 * 1024
    assert captured.err == ""


def test_show_applies_set_overrides(capsys):
    argv = ["config", "show", "tiny", "--set", "num_ipus=2", "--set", "tile.clock_hz=1 GHz"]
    assert main(argv) == 0
    data, digest = split_show_output(capsys.readouterr().out)
    assert data["num_ipus"] == 2
    assert data["tile"]["clock_hz"] == 1e9
    expected = load_config("tiny", {"num_ipus": 2, "tile.clock_hz": 1e9})
    assert digest == config_hash(expected)
    assert digest != config_hash(load_config("tiny"))


def test_show_a_yaml_path(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text("extends: tiny\nsync: {min_sync_delay_cycles: 0}\n", encoding="utf-8")
    assert main(["config", "show", str(path)]) == 0
    data, _ = split_show_output(capsys.readouterr().out)
    assert data["sync"]["min_sync_delay_cycles"] == 0
    assert data["tile"]["tiles_per_ipu"] == 8


def test_list_shows_every_preset_with_its_description(capsys):
    assert main(["config", "list"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()}
    for name in ("mk1", "mk2", "bow", "tiny"):
        assert load_config(name).description in lines[name]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["config", "show", "mk3"], ["unknown preset 'mk3'", "mk2", "tiny"]),
        (["config", "show", "tiny", "--set", "tile.clock_hx=1 GHz"], ["did you mean"]),
        (["config", "show", "tiny", "--set", "num_ipus"], ["'num_ipus'", "PATH=VALUE"]),
        (["config", "show", "tiny", "--set", "memory.bank_bytes=64G"], ["'64G'", "ambiguous"]),
    ],
)
def test_errors_go_to_stderr_with_status_2_and_no_traceback(capsys, argv, words):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "Traceback" not in captured.err
    for word in words:
        assert word in captured.err


def test_usage_errors_return_2(capsys):
    assert main(["config"]) == 2
    assert main(["no-such-command"]) == 2
    assert "usage" in capsys.readouterr().err


def _python_m_ipusim(*args: str) -> subprocess.CompletedProcess:
    """``python -m ipusim ARGS`` in a new interpreter, its output captured."""
    return subprocess.run(
        [sys.executable, "-m", "ipusim", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_python_m_ipusim_config_show():
    result = _python_m_ipusim("config", "show", "mk2")
    assert result.returncode == 0, result.stderr
    _, digest = split_show_output(result.stdout)
    assert digest == config_hash(load_config("mk2"))


def test_python_m_ipusim_error_has_no_traceback():
    result = _python_m_ipusim("config", "show", "nope.yaml")
    assert result.returncode == 2
    assert "nope.yaml" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_presets_load_by_name_from_an_installed_wheel(tmp_path):
    site = tmp_path / "site"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--target", site, ROOT],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if build.returncode != 0 and "hatchling" in build.stderr and "No matching" in build.stderr:
        pytest.skip("hatchling (the build backend) cannot be fetched here")
    assert build.returncode == 0, build.stderr
    assert (site / "ipusim" / "configs" / "mk2.yaml").is_file()
    code = textwrap.dedent(
        """\
        from pathlib import Path
        import ipusim
        from ipusim.config import list_presets, load_config, preset_path
        site = Path(ipusim.__file__).resolve().parents[1]
        print(site)
        print(preset_path("bow").resolve().relative_to(site))
        print(",".join(list_presets()))
        print(load_config("bow").tile.clock_hz, load_config("tiny").tile.tiles_per_ipu)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(site)}
    run = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    where, preset, names, values = run.stdout.splitlines()
    assert Path(where) == site.resolve()
    assert preset == str(Path("ipusim") / "configs" / "bow.yaml")
    assert {"mk1", "mk2", "bow", "tiny"} <= set(names.split(","))
    assert values == f"{1.85e9} 8"
