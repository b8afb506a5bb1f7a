"""A YAML text is parsed once per process and every reader gets its own copy
(``ipusim.config_files.load_yaml_text``): a change a caller makes never reaches the
next reader, an edited file is read again, and bad input is refused on every read."""

from __future__ import annotations

import pytest

from ipusim.config import load_config
from ipusim.config_files import _parsed_yaml_text, load_yaml_text
from ipusim.errors import ConfigError


def test_each_read_is_a_copy_the_caller_may_change():
    text = "tile:\n  clock_hz: 1.0e+9\n  sizes: &s [1, 2]\nalso: *s\n"
    first = load_yaml_text(text, "t")
    first["tile"]["sizes"].append(3)
    first["tile"]["clock_hz"] = 5
    second = load_yaml_text(text, "t")
    assert second == {"tile": {"clock_hz": 1e9, "sizes": [1, 2]}, "also": [1, 2]}
    # an alias stays one object inside a copy, as in a fresh parse
    assert second["also"] is second["tile"]["sizes"]
    assert second["tile"] is not first["tile"]


def test_a_text_is_parsed_once():
    text = "name: parsed-once-check\n"
    before = _parsed_yaml_text.cache_info()
    load_yaml_text(text, "t")
    load_yaml_text(text, "t")
    after = _parsed_yaml_text.cache_info()
    assert after.misses - before.misses == 1
    assert after.hits - before.hits == 1


def test_bad_input_is_refused_on_every_read():
    for _ in range(2):
        with pytest.raises(ConfigError, match="duplicate key 'a'"):
            load_yaml_text("a: 1\na: 2\n", "t")


def test_a_file_rewritten_with_the_same_size_is_read_again(tmp_path):
    path = tmp_path / "m.yaml"
    path.write_text("extends: tiny\ntile:\n  clock_hz: 1.0e+9\n", encoding="utf-8")
    assert load_config(str(path)).tile.clock_hz == 1e9
    path.write_text("extends: tiny\ntile:\n  clock_hz: 2.0e+9\n", encoding="utf-8")
    assert load_config(str(path)).tile.clock_hz == 2e9
