"""Bad machine configs: every one is refused at load with a message naming the file,
the field path (or line and key), the value found and what is required.

Classes: values beyond physical bounds, duplicate YAML keys, booleans where numbers
are expected, contradictory fields, YAML alias bombs and other hostile YAML.
"""

from __future__ import annotations

import math
import textwrap
import time

import numpy as np
import pytest
from annotated_types import Le
from pydantic import BaseModel

from ipusim.cli import main
from ipusim.config import MachineConfig, load_config, load_yaml_text
from ipusim.config_limits import MAX_CLOCK_HZ, MAX_CYCLES, MAX_SECONDS
from tests.conftest import config_problems

INT64_MAX = np.iinfo(np.int64).max


def write(tmp_path, text: str, name: str = "bad.yaml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


# ------------------------------------------------------------------ physical bounds
@pytest.mark.parametrize(
    ("section", "field", "text", "found", "bound"),
    [
        ("host", "latency_s", "1e300 s", "1e+300", "less than or equal to 1"),
        ("host", "latency_s", "1.0e+300", "1e+300", "less than or equal to 1"),
        ("sync", "host_sync_cycles", str(10**30), str(10**30), f"or equal to {MAX_CYCLES}"),
        ("sync", "min_sync_delay_cycles", str(10**30), str(10**30), f"or equal to {MAX_CYCLES}"),
        ("links", "hop_latency_cycles", str(2**41), str(2**41), f"or equal to {MAX_CYCLES}"),
        ("tile", "clock_hz", "1e20 Hz", "1e+20", "less than or equal to 100000000000"),
        ("host", "bandwidth_bytes_per_s", "1e30 B/s", "1e+30", "or equal to 1000000000000000"),
        ("links", "bandwidth_bytes_per_s", "1e30 B/s", "1e+30", "or equal to 1000000000000000"),
        ("host", "bandwidth_bytes_per_s", "1 B/s", "1.0", "greater than or equal to 1000000"),
        ("tile", "tiles_per_ipu", "-3", "-3", "greater than or equal to 1"),
        ("tile", "tiles_per_ipu", "1000000000", "1000000000", "less than or equal to 65536"),
        ("memory", "load_bytes_per_cycle", "1000000", "1000000", "less than or equal to 1024"),
        ("sync", "global_sync_ns_per_hop", "1.0e+12", "1000000000000.0", "equal to 1000000000"),
    ],
)
def test_value_beyond_its_physical_bound(tmp_path, section, field, text, found, bound):
    path = write(tmp_path, f"extends: tiny\n{section}:\n  {field}: {text}\n")
    (line,) = config_problems(path)
    assert line.startswith(f"{path}: {section}.{field}: found ")
    assert found in line and bound in line


def test_bound_reasoning_is_in_the_message(tmp_path):
    path = write(tmp_path, "extends: tiny\ntile:\n  clock_hz: 1e20 Hz\n")
    (line,) = config_problems(path)
    assert "100 GHz" in line and "no clocked logic runs faster" in line


def test_every_numeric_field_has_an_upper_bound():
    """Each int/float field of every section carries ``le`` (optional ones included)."""
    missing = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, info in model.model_fields.items():
            annotation = info.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{prefix}{name}.")
                continue
            args = set(getattr(annotation, "__args__", ())) - {type(None)}
            numeric = annotation in (int, float) or (args and args <= {int, float})
            if numeric and not any(isinstance(m, Le) for m in info.metadata):
                missing.append(f"{prefix}{name}")

    walk(MachineConfig, "")
    assert missing == []


def test_derived_cycles_stay_inside_int64_at_the_bounds():
    """At the largest latency and clock allowed, the derived cycle counts fit in int64."""
    cfg = load_config(
        "tiny",
        {
            "tile.clock_hz": MAX_CLOCK_HZ,
            "host.latency_s": MAX_SECONDS,
            "sync.global_sync_ns_per_hop": 1e9,
            "num_ipus": 1024,
        },
    )
    assert cfg.host_latency_cycles == 100_000_000_000  # 1 s at 100 GHz
    assert cfg.global_sync_cycles == math.ceil(1.0 * 100e9 * (1 + 512 // 2) * 2)
    assert cfg.global_sync_cycles < INT64_MAX // (1 << 16)  # 65536 such syncs still fit


def test_a_transfer_too_long_for_int64_is_refused():
    (line,) = config_problems(
        "tiny",
        {"host.max_copy_bytes": "1 TiB", "host.bandwidth_bytes_per_s": "1 MB/s",
         "tile.clock_hz": "100 GHz"},
    )  # fmt: skip
    assert line.startswith("<overrides>: host.bandwidth_bytes_per_s: found host.max_copy_bytes")
    assert "1099511627776" in line and "2^48 cycles" in line


def test_exchange_rate_too_small_for_int64_is_refused():
    (line,) = config_problems("tiny", {"exchange.bytes_per_cycle": 1e-300})
    assert line.startswith("<overrides>: exchange.bytes_per_cycle: found exchange.bytes_per")
    assert "1e-300" in line and "65536" in line and "2^48 cycles" in line


@pytest.mark.parametrize("text", ["1e400 Hz", "1e1000000000 Hz", "1e-1000000000 Hz"])
def test_numbers_out_of_range_are_refused_without_computing_them(text):
    (line,) = config_problems("tiny", {"tile.clock_hz": text})
    assert line.startswith("<overrides>: tile.clock_hz: ")
    assert repr(text) in line and "1e308" in line


def test_a_huge_integer_for_a_float_quantity_is_a_config_error():
    (line,) = config_problems("tiny", {"tile.clock_hz": 10**400})
    assert "tile.clock_hz" in line and "magnitude below 1e308" in line


def test_an_integer_too_long_to_read(tmp_path):
    path = write(tmp_path, "extends: tiny\nnum_ipus: " + "1" * 5000 + "\n")
    (line,) = config_problems(path)
    assert line.startswith(f"{path}: a value cannot be read") and "4300 digits" in line


# ---------------------------------------------------------------- duplicate keys
@pytest.mark.parametrize(
    ("text", "key", "line", "first"),
    [
        ("extends: tiny\nnum_ipus: 1\nnum_ipus: 2\n", "num_ipus", 3, 2),
        (
            "extends: tiny\ntile:\n  clock_hz: 1 GHz\n  columns: 2\n  clock_hz: 2 GHz\n",
            "tile.clock_hz",
            5,
            3,
        ),
        ("extends: tiny\nsync: {}\nsync: {min_sync_delay_cycles: 3}\n", "sync", 3, 2),
        (
            "extends: tiny\nprovenance:\n  steps:\n  - before: {a: 1, a: 2}\n",
            "provenance.steps[0].before.a",
            4,
            4,
        ),
    ],
)
def test_duplicate_keys_name_file_line_and_key(tmp_path, text, key, line, first):
    path = write(tmp_path, text)
    (problem,) = config_problems(path)
    assert problem.startswith(f"{path}: line {line}, column ")
    assert f"duplicate key '{key}' (first at line {first}, column " in problem
    assert "silently keep the last" in problem


def test_merge_keys_may_override_without_being_duplicates(tmp_path):
    path = write(
        tmp_path,
        """\
        extends: tiny
        sync: &sync {min_sync_delay_cycles: 3, max_relative_delay_cycles: 4}
        host:
          bandwidth_bytes_per_s: 8 GB/s
          max_copy_bytes: 1 MiB
        code:
          <<: {worker_stack_bytes: 80, supervisor_stack_bytes: 96}
          worker_stack_bytes: 88
        """,
    )
    cfg = load_config(path)
    assert cfg.sync.min_sync_delay_cycles == 3 and cfg.sync.max_relative_delay_cycles == 4
    assert cfg.code.worker_stack_bytes == 88  # the explicit key wins over the merged one
    assert cfg.code.supervisor_stack_bytes == 96


# -------------------------------------------------------------- booleans for numbers
@pytest.mark.parametrize(
    ("path", "text", "found"),
    [
        ("tile.tiles_per_ipu", "yes", "True"),
        ("num_ipus", "on", "True"),
        ("tile.clock_hz", "true", "True"),
        ("exchange.bytes_per_cycle", "no", "False"),
        ("sync.global_sync_cycles", "off", "False"),  # optional int
    ],
)
def test_booleans_are_not_numbers(tmp_path, path, text, found):
    section, _, field = path.rpartition(".")
    body = f"{field}: {text}\n" if not section else f"{section}:\n  {field}: {text}\n"
    file = write(tmp_path, "extends: tiny\n" + body)
    (line,) = config_problems(file)
    assert line.startswith(f"{file}: {path}: found {found}")
    assert "expected a number" in line and "yes/no/on/off/true/false" in line


def test_literal_enums_keep_their_messages(tmp_path):
    file = write(tmp_path, "extends: tiny\nsync:\n  relative_delay: no\n")
    (line,) = config_problems(file)
    assert line.startswith(f"{file}: sync.relative_delay: found False")
    assert "'auto' or 'none'" in line


# ----------------------------------------------------------- contradictory fields
def test_columns_beyond_the_tiles():
    (line,) = config_problems("tiny", {"tile.columns": 9})
    assert line.startswith("<overrides>: tile.columns: found tile.columns = 9 with tile.")
    assert "tile.tiles_per_ipu = 8" in line and "at most 8 columns" in line


def test_bank_not_dividing_a_region():
    (line,) = config_problems("tiny", {"memory.bank_bytes": "24 KiB"})
    assert line.startswith("<overrides>: memory.bank_bytes: found memory.bank_bytes = 24576")
    assert "memory.non_interleaved_bytes (16384) is not a multiple" in line
    assert "memory.interleaved_bytes (49152)" not in line  # 48 KiB = 2 x 24 KiB


def test_bank_larger_than_both_regions():
    (line,) = config_problems("tiny", {"memory.bank_bytes": "64 KiB"})
    assert "memory.non_interleaved_bytes (16384) is not a multiple" in line
    assert "memory.interleaved_bytes (49152) is not a multiple" in line


@pytest.mark.parametrize(("value", "hint"), [(12, "e.g. 8 or 16"), (3, "e.g. 2 or 4")])
def test_alignment_must_be_a_power_of_two(value, hint):
    (line,) = config_problems("tiny", {"memory.alignment_bytes": value})
    assert line.startswith(f"<overrides>: memory.alignment_bytes: found {value}; expected a pow")
    assert hint in line


def test_controller_tile_beyond_the_tiles():
    (line,) = config_problems("tiny", {"sync.controller_tile": 8})
    assert line.startswith("<overrides>: sync.controller_tile: found 8")
    assert "tile.tiles_per_ipu (8)" in line


def test_too_many_tiles_over_all_ipus():
    (line,) = config_problems(
        "tiny", {"tile.tiles_per_ipu": 65536, "num_ipus": 1024, "tile.columns": 2}
    )
    assert line.startswith("<overrides>: num_ipus: found num_ipus = 1024 x tile.tiles_per_ipu")
    assert "67,108,864 tiles" in line and "at most 2,097,152" in line


def test_a_chassis_holds_whole_cards():
    (line,) = config_problems("m2000", {"sync.ipus_per_card": 3})
    # the preset sets ipus_per_chassis, the override ipus_per_card
    assert "m2000.yaml: sync.ipus_per_chassis: found 4 with sync.ipus_per_card = 3;" in line
    assert "a multiple of ipus_per_card (a chassis holds whole cards)" in line


def test_a_rack_holds_whole_chassis():
    (line,) = config_problems("pod64", {"sync.ipus_per_chassis": 6})
    assert line.startswith("<overrides>: sync.ipus_per_chassis: found 6 with links.gw_links")
    assert "ipus_per_rack = 64" in line and "a divisor of" in line


def test_the_presets_pass_every_check():
    from ipusim.config import list_presets

    for name in list_presets():
        assert load_config(name).name == name


# ------------------------------------------------------------------- hostile YAML
BOMB = "extends: tiny\na: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi", strict=True)
)


def test_a_nine_level_alias_bomb_is_refused_before_expansion(tmp_path):
    assert BOMB.count("*") == 72  # 9 levels of 9: 9^9 = 387,420,489 strings expanded
    path = write(tmp_path, BOMB)
    start = time.perf_counter()
    (line,) = config_problems(path)
    assert time.perf_counter() - start < 60  # expanding would take minutes and gigabytes
    assert line.startswith(f"{path}: line ")
    assert "expands to more than 100,000 values" in line and "alias bomb" in line


def test_an_alias_bomb_in_a_set_override_is_an_error(capsys):
    bomb = "{a: &a [x, x, x, x, x, x, x, x, x], " + ", ".join(
        f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]"
        for p, n in zip("abcdefgh", "bcdefghi", strict=True)
    )
    assert main(["config", "show", "tiny", "--set", f"provenance={bomb}}}"]) == 2
    err = capsys.readouterr().err
    assert "--set provenance: line 1" in err and "alias bomb" in err
    assert "Traceback" not in err


def test_a_recursive_alias_is_refused(tmp_path):
    path = write(tmp_path, "extends: tiny\nprovenance: &p {self: *p}\n")
    (line,) = config_problems(path)
    assert line.startswith(f"{path}: line 2, column ")
    assert "provenance.self" in line and "recursive structure" in line


def test_too_deep_nesting_is_refused(tmp_path):
    path = write(tmp_path, "extends: tiny\nprovenance: " + "[" * 100 + "]" * 100 + "\n")
    (line,) = config_problems(path)
    assert "nested more than 64 levels deep" in line


def test_nesting_beyond_the_parser_is_refused(tmp_path):
    path = write(tmp_path, "extends: tiny\nprovenance: " + "[" * 5000 + "]" * 5000 + "\n")
    (line,) = config_problems(path)
    assert line.startswith(f"{path}: nested too deeply to read")


def test_load_yaml_text_keeps_syntax_errors_and_small_aliases():
    assert load_yaml_text("a: &x [1, 2]\nb: *x\n", "t") == {"a": [1, 2], "b": [1, 2]}
    assert load_yaml_text("", "t") is None
    import yaml

    with pytest.raises(yaml.YAMLError):
        load_yaml_text("a: [1, 2\n", "t")


def test_duplicate_key_on_the_command_line_names_the_set_item(capsys):
    assert main(["config", "show", "tiny", "--set", "provenance={a: 1, a: 2}"]) == 2
    err = capsys.readouterr().err
    assert "--set provenance: line 1, column 8: duplicate key 'a'" in err
    assert "Traceback" not in err
