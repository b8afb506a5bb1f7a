"""Machine configs: presets against ipu_facts, extends/overrides, hashing and errors."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from ipusim.config import (
    MachineConfig,
    config_hash,
    config_to_yaml,
    list_presets,
    load_config,
    preset_path,
    with_overrides,
)
from ipusim.errors import ConfigError, IpusimError
from tests.conftest import config_problems

KIB = 1024


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# Presets against ipu_facts.md ------------------------------------------------------------
def test_presets_are_listed_and_found():
    assert {"mk1", "mk2", "bow", "tiny"} <= set(list_presets())
    for name in ("mk1", "mk2", "bow", "tiny"):
        path = preset_path(name)
        assert path.is_file() and path.name == f"{name}.yaml"


def test_mk1_matches_facts():
    cfg = load_config("mk1")
    assert (cfg.name, cfg.arch) == ("mk1", "ipu1")
    assert cfg.tile.tiles_per_ipu == 1216
    assert cfg.tile.clock_hz == 1.6e9
    assert cfg.memory.tile_memory_bytes == 256 * KIB
    assert cfg.memory.non_interleaved_bytes == 128 * KIB
    assert cfg.memory.interleaved_bytes == 128 * KIB
    assert cfg.memory.bank_bytes == 16 * KIB
    assert (cfg.tile.peak_flops_per_cycle_fp32, cfg.tile.peak_flops_per_cycle_fp16) == (16, 64)
    # the published 64 GB/s per link (C) is kept in the uncalibrated baseline; the preset
    # has the rate fitted on the 16-IPU H rows (docs/calibration.md)
    baseline = load_config(Path(__file__).parents[1] / "examples/calibration/baseline/mk1.yaml")
    assert baseline.links.bandwidth_bytes_per_s == 64e9
    assert cfg.links.bandwidth_bytes_per_s == 15.602e9
    assert cfg.host.bandwidth_bytes_per_s == 16e9
    assert cfg.sync.controller_tile == 1216 // 2


def test_mk2_matches_facts():
    cfg = load_config("mk2")
    assert (cfg.name, cfg.arch) == ("mk2", "ipu2")
    assert cfg.tile.tiles_per_ipu == 1472
    assert cfg.tile.clock_hz == pytest.approx(1.33e9, rel=1e-12)
    assert cfg.tile.worker_contexts == 6
    # the regions' address ranges: 0x4C000-0x80000 and 0x80000-0xE8000
    assert cfg.memory.tile_memory_bytes == 0xE8000 - 0x4C000 == 624 * KIB
    assert cfg.memory.non_interleaved_bytes == 0x80000 - 0x4C000 == 208 * KIB
    assert cfg.memory.interleaved_bytes == 0xE8000 - 0x80000 == 416 * KIB
    assert cfg.memory.bank_bytes == 16 * KIB
    assert (cfg.tile.peak_flops_per_cycle_fp32, cfg.tile.peak_flops_per_cycle_fp16) == (32, 128)
    # poplibs' link model: 128 Gibit/s x 0.85
    assert cfg.links.bandwidth_bytes_per_s == pytest.approx(128 * 2**30 / 8 * 0.85, rel=1e-12)
    # host bandwidth and latency are fitted to hardware measurements; the record says so
    steps = {tuple(s["parameters"]): s for s in cfg.provenance["steps"]}
    fitted = {**steps[("host.latency_s",)]["after"], **steps[
        ("host.bandwidth_bytes_per_s", "sync.host_sync_cycles")]["after"]}  # fmt: skip
    assert cfg.host.bandwidth_bytes_per_s == fitted["host.bandwidth_bytes_per_s"]
    assert cfg.host.latency_s == fitted["host.latency_s"]
    assert cfg.sync.host_sync_cycles == fitted["sync.host_sync_cycles"]
    assert cfg.host.bandwidth_bytes_per_s < 32e9  # below PCIe Gen4 x16's 32 GB/s per direction
    assert cfg.host.max_copy_bytes == 128 * 2**20
    assert cfg.sync.controller_tile == 1472 // 2
    # farthest tile: 15 + 111 = 126 cycles, the reported maximum
    assert cfg.sync.min_sync_delay_cycles + cfg.sync.max_relative_delay_cycles == 126
    # derived global sync, one IPU: ceil(15 ns * 1.33 GHz * 1 hop * 2) = ceil(39.9) = 40
    assert cfg.global_sync_cycles == 40


def test_bow_extends_mk2():
    bow, mk2 = load_config("bow"), load_config("mk2")
    assert (bow.name, bow.arch) == ("bow", "ipu21")
    assert bow.tile.clock_hz == pytest.approx(1.85e9, rel=1e-12)
    assert bow.global_sync_cycles == 600
    assert bow.links.bandwidth_bytes_per_s == 512e9 / 8
    assert bow.memory == mk2.memory
    assert bow.tile.tiles_per_ipu == 1472
    # 348.6 TFLOPS / (1472 tiles * 1.85 GHz) = 128.0 flop per cycle per tile
    assert round(348.6e12 / (1472 * 1.85e9)) == bow.tile.peak_flops_per_cycle_fp16


def test_tiny_is_a_small_mk2():
    tiny, mk2 = load_config("tiny"), load_config("mk2")
    assert tiny.name == "tiny"
    assert tiny.tile.tiles_per_ipu == 8
    assert tiny.tile.columns == 2
    assert tiny.tile.worker_contexts == 6
    assert tiny.tile.clock_hz == mk2.tile.clock_hz
    assert tiny.memory.tile_memory_bytes == 64 * KIB
    assert tiny.memory.non_interleaved_bytes == 16 * KIB
    assert tiny.memory.interleaved_bytes == 48 * KIB
    assert tiny.sync.controller_tile == 0
    assert tiny.num_tiles == 8


@pytest.mark.parametrize("name", ["mk1", "mk2", "bow", "tiny"])
def test_every_preset_is_consistent(name):
    cfg = load_config(name)
    mem = cfg.memory
    assert mem.non_interleaved_bytes + mem.interleaved_bytes == mem.tile_memory_bytes
    assert cfg.exchange.bytes_per_cycle == 4
    assert cfg.description


@pytest.mark.parametrize("name", ["mk1", "mk2", "bow", "tiny"])
def test_every_preset_value_says_where_it_comes_from(name):
    lines = preset_path(name).read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#"), "header comment"
    if "provenance:" in (line.split("#")[0].strip() for line in lines):  # a fit record, not values
        lines = lines[: [ln.split("#")[0].strip() for ln in lines].index("provenance:")]
    for line in lines:
        match = re.match(r"^\s*(\w+):\s*[^\s#]", line)  # 'key: value' lines
        if match is None or match.group(1) in ("name", "description", "extends"):
            continue
        comment = line.partition("#")[2]
        assert re.search(
            r"estimate|sources.md|simulation setting|one chip|docs/machine.md|remote buffers share",
            comment,
        ), line


# Extends and overrides ---------------------------------------------------------------------
def test_extends_chain_merges_recursively_and_child_wins(tmp_path, monkeypatch):
    write(
        tmp_path / "base" / "middle.yaml",
        """\
        extends: mk2
        name: middle
        tile: {clock_hz: 1 GHz, columns: 8}
        """,
    )
    child = write(
        tmp_path / "exp" / "child.yaml",
        """\
        extends: ../base/middle.yaml   # relative to this file
        name: child
        tile: {columns: 4}
        sync: {min_sync_delay_cycles: 3}
        """,
    )
    monkeypatch.chdir(tmp_path / "base")  # the working directory must not matter
    cfg = load_config(child)
    mk2 = load_config("mk2")
    assert cfg.name == "child"
    assert cfg.tile.columns == 4  # child over middle
    assert cfg.tile.clock_hz == 1e9  # middle over mk2
    assert cfg.tile.tiles_per_ipu == 1472  # from mk2
    assert cfg.sync.min_sync_delay_cycles == 3
    assert cfg.sync.max_relative_delay_cycles == mk2.sync.max_relative_delay_cycles
    assert cfg.memory == mk2.memory
    assert load_config(str(child)) == cfg


def test_mapping_source_may_extend_a_preset():
    cfg = load_config({"extends": "tiny", "num_ipus": 4, "links": {"topology": "line"}})
    assert cfg.num_ipus == 4 and cfg.num_tiles == 4 * 8
    assert cfg.links.topology == "line"
    assert cfg.links.bandwidth_bytes_per_s == load_config("tiny").links.bandwidth_bytes_per_s


def test_overrides_are_dotted_and_applied_after_extends(tmp_path):
    child = write(tmp_path / "c.yaml", "extends: tiny\nsync: {min_sync_delay_cycles: 9}\n")
    cfg = load_config(
        child,
        {"sync.min_sync_delay_cycles": 0, "num_ipus": 2, "memory.bank_bytes": "4 KiB"},
    )
    assert cfg.sync.min_sync_delay_cycles == 0
    assert cfg.num_ipus == 2
    assert cfg.memory.bank_bytes == 4 * KIB


def test_with_overrides_revalidates():
    tiny = load_config("tiny")
    faster = with_overrides(tiny, {"tile.clock_hz": "2 GHz"})
    assert faster.tile.clock_hz == 2e9
    assert faster.host_bytes_per_cycle == pytest.approx(tiny.host.bandwidth_bytes_per_s / 2e9)
    assert tiny.tile.clock_hz != 2e9  # the original is untouched
    with pytest.raises(ConfigError) as info:
        with_overrides(tiny, {"memory.interleaved_bytes": "40 KiB"})  # 16 + 40 != 64 KiB
    (line,) = info.value.problems
    assert line.startswith("<overrides>: memory:")
    assert str(48 * KIB) not in line  # the new value is reported, not the old one
    assert str(40 * KIB) in line


def test_with_overrides_unknown_path_names_the_closest_key():
    with pytest.raises(ConfigError) as info:
        with_overrides(load_config("tiny"), {"sync.min_sync_delay_cyles": 1})
    (line,) = info.value.problems
    assert "sync.min_sync_delay_cyles" in line
    assert "did you mean 'sync.min_sync_delay_cycles'" in line


def test_override_key_in_the_wrong_section_points_to_the_right_one():
    (line,) = config_problems("tiny", {"tile.bank_bytes": 4096})
    assert "did you mean 'memory.bank_bytes'" in line


@pytest.mark.parametrize(
    ("path", "hint"),
    [
        # "valid keys of 'nope': " listed nothing
        ("nope.x", "no section 'nope'; valid keys of the top level: name, description, arch"),
        ("tile.clock_hz.x", "'tile.clock_hz' is a field, not a section: it has no key 'x'"),
    ],
)
def test_an_override_path_past_a_field_or_unknown_section_is_explained(path, hint):
    (line,) = config_problems("tiny", {path: 1})
    assert hint in line


def test_a_section_given_as_a_field_lists_its_fields():
    # calibrate --param tile answered "did you mean 'tile'?"
    from ipusim.calibration_fit import CalibrationError, resolve_parameters

    with pytest.raises(CalibrationError, match="'tile' is a section, not a field; its fields: "):
        resolve_parameters(load_config("tiny"), ["tile"])


# Hash and YAML --------------------------------------------------------------------------------
def test_hash_is_stable_and_follows_values():
    h = config_hash(load_config("mk2"))
    assert re.fullmatch(r"[0-9a-f]{16}", h)
    assert config_hash(load_config("mk2")) == h
    assert config_hash(load_config({"extends": "mk2"})) == h
    changed = with_overrides(load_config("mk2"), {"sync.min_sync_delay_cycles": 16})
    assert config_hash(changed) != h
    # the same clock written two ways is the same machine
    a = with_overrides(load_config("mk2"), {"tile.clock_hz": "1600 MHz"})
    b = with_overrides(load_config("mk2"), {"tile.clock_hz": 1.6e9})
    assert config_hash(a) == config_hash(b)
    assert config_hash(load_config("mk2")) != config_hash(load_config("bow"))


def test_hash_ignores_labels_only():
    cfg = load_config("tiny")
    renamed = with_overrides(cfg, {"name": "other", "description": "same machine"})
    assert config_hash(renamed) == config_hash(cfg)


@pytest.mark.parametrize("name", ["mk1", "mk2", "bow", "tiny"])
def test_yaml_round_trip(name):
    cfg = load_config(name)
    text = config_to_yaml(cfg)
    again = load_config(yaml.safe_load(text))
    assert again == cfg
    assert config_hash(again) == config_hash(cfg)
    assert "extends" not in text


# Bad configs: every problem named with file, field path and value ---------------------------
@pytest.mark.parametrize(
    ("section", "key_value", "required"),
    [
        # an unknown key names the closest valid key
        pytest.param("tile", "clock_hx: 1.6 GHz", ["did you mean 'tile.clock_hz'"], id="typo"),
        pytest.param("tile", "tiles_per_ipu: many", ["integer"], id="wrong-type"),
        # the accepted forms of a size are listed
        pytest.param("memory", "bank_bytes: 64G", ["ambiguous", "KiB"], id="ambiguous-unit"),
    ],
)
def test_bad_value_names_file_field_and_value(tmp_path, section, key_value, required):
    key, value = key_value.split(": ")
    bad = write(tmp_path / "bad.yaml", f"extends: tiny\n{section}:\n  {key_value}\n")
    (line,) = config_problems(bad)
    for fragment in (str(bad), f"{section}.{key}", f"'{value}'", *required):
        assert fragment in line


@pytest.mark.parametrize(
    ("section", "values", "required"),
    [
        pytest.param("exchange", {"bytes_per_cycle": -4}, ["-4", "greater than 0"], id="range"),
        # the controller tile must be on the chip
        pytest.param("sync", {"controller_tile": 8}, ["found 8", "0..7"], id="controller-tile"),
    ],
)
def test_bad_value_in_a_mapping_names_field_and_value(section, values, required):
    (line,) = config_problems({"extends": "tiny", section: values})
    (key,) = values
    assert line.startswith(f"<mapping>: {section}.{key}: ")
    for fragment in required:
        assert fragment in line


def test_memory_regions_must_add_up(tmp_path):
    bad = write(
        tmp_path / "mem.yaml",
        """\
        extends: tiny
        memory:
          non_interleaved_bytes: 16 KiB
          interleaved_bytes: 40 KiB
        """,
    )
    (line,) = config_problems(bad)
    assert line.startswith(f"{bad}: memory:")
    # 16 KiB + 40 KiB = 57344, tile memory 64 KiB = 65536
    for number in (16 * KIB, 40 * KIB, 16 * KIB + 40 * KIB, 64 * KIB):
        assert str(number) in line


def test_yaml_syntax_error_gives_the_line(tmp_path):
    bad = write(
        tmp_path / "syntax.yaml",
        """\
        extends: tiny
        tile:
          columns: 4
         clock_hz: [1 GHz
        """,
    )
    (line,) = config_problems(bad)
    assert str(bad) in line
    assert "YAML syntax error" in line
    match = re.search(r"line (\d+)", line)
    assert match is not None and int(match.group(1)) in (3, 4, 5), line


def test_unknown_preset_lists_the_presets():
    (line,) = config_problems("mk3")
    assert "'mk3'" in line
    for name in ("mk1", "mk2", "bow", "tiny"):
        assert name in line
    with pytest.raises(ConfigError, match="'mk9'"):
        preset_path("mk9")


def test_unknown_preset_in_extends_names_the_file(tmp_path):
    bad = write(tmp_path / "ext.yaml", "extends: mk7\n")
    (line,) = config_problems(bad)
    assert line.startswith(f"{bad}: extends: unknown preset 'mk7'")
    assert "mk2" in line


def test_extends_cycle_names_the_chain(tmp_path):
    a = write(tmp_path / "a.yaml", "extends: b.yaml\n")
    b = write(tmp_path / "b.yaml", "extends: sub/c.yaml\n")
    c = write(tmp_path / "sub" / "c.yaml", "extends: ../a.yaml\n")
    (line,) = config_problems(a)
    assert "cycle" in line
    assert f"{a} -> {b} -> {c} -> {a}" in line


def test_missing_file():
    (line,) = config_problems("/nonexistent/dir/machine.yaml")
    assert "/nonexistent/dir/machine.yaml" in line
    assert "not found" in line


def test_top_level_must_be_a_mapping(tmp_path):
    bad = write(tmp_path / "list.yaml", "- 1\n- 2\n")
    (line,) = config_problems(bad)
    assert str(bad) in line and "[1, 2]" in line and "mapping" in line


def test_two_problems_in_one_file_are_both_reported(tmp_path):
    bad = write(
        tmp_path / "two.yaml",
        """\
        extends: tiny
        num_ipus: 0
        host:
          latency_s: 12 furlongs
        """,
    )
    problems = config_problems(bad)
    assert len(problems) == 2
    assert any("num_ipus" in p and "found 0" in p for p in problems)
    assert any("host.latency_s" in p and "'12 furlongs'" in p for p in problems)
    assert all(p.startswith(str(bad)) for p in problems)


def test_cross_checks_run_even_when_other_sections_are_bad():
    problems = config_problems(
        {
            "extends": "tiny",
            "tile": {"clock_hz": "fast"},  # tile invalid: controller check is skipped
            "memory": {"interleaved_bytes": "8 KiB"},  # 16 + 8 != 64 KiB
        }
    )
    assert len(problems) == 2
    assert any(p.startswith("<mapping>: tile.clock_hz") and "'fast'" in p for p in problems)
    assert any(p.startswith("<mapping>: memory:") and str(8 * KIB) in p for p in problems)


def test_problem_lines_name_the_file_that_set_the_value(tmp_path):
    base = write(tmp_path / "base.yaml", "extends: tiny\nexchange: {fixed_latency_cycles: -1}\n")
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nnum_ipus: 0\n")
    problems = config_problems(child)
    assert any(p.startswith(f"{base}: exchange.fixed_latency_cycles") for p in problems)
    assert any(p.startswith(f"{child}: num_ipus") for p in problems)


def test_config_error_is_not_a_pydantic_error():
    with pytest.raises(ConfigError) as info:
        load_config({"extends": "tiny", "num_ipus": "two"})
    err = info.value
    assert isinstance(err, IpusimError) and isinstance(err, ValueError)
    assert not isinstance(err, ValidationError)
    assert err.__cause__ is None
    assert err.__context__ is None or err.__suppress_context__
    assert "num_ipus" in str(err) and "'two'" in str(err)


def test_machine_config_model_still_validates_directly():
    data = yaml.safe_load(config_to_yaml(load_config("tiny")))
    data["memory"]["tile_memory_bytes"] = "128 KiB"
    with pytest.raises(ValidationError, match="memory regions do not add up"):
        MachineConfig.model_validate(data)
