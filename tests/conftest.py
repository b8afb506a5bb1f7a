"""Shared test fixtures."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from ipusim.config import MachineConfig

# A small machine with round numbers: 8 tiles in 2 columns (4 rows), 1 GHz clock,
# 4 exchange bytes per cycle, 4 host bytes per cycle, 8 link bytes per cycle.
BASE_CONFIG: dict[str, Any] = {
    "name": "test-small",
    "num_ipus": 1,
    "tile": {
        "tiles_per_ipu": 8,
        "clock_hz": 1e9,
        "worker_contexts": 6,
        "peak_flops_per_cycle_fp32": 16,
        "peak_flops_per_cycle_fp16": 64,
        "columns": 2,
    },
    "memory": {
        "tile_memory_bytes": 65536,
        "non_interleaved_bytes": 32768,
        "interleaved_bytes": 32768,
        "bank_bytes": 16384,
    },
    "exchange": {"bytes_per_cycle": 4.0},
    "sync": {"relative_delay": "none"},
    "host": {"bandwidth_bytes_per_s": 4e9, "max_copy_bytes": 1 << 20},
    "links": {"bandwidth_bytes_per_s": 8e9, "topology": "ring"},
}


def _merge(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


def build_config(**overrides: Any) -> MachineConfig:
    """``BASE_CONFIG`` with nested overrides, e.g. ``build_config(tile={"columns": 4})``."""
    return MachineConfig.model_validate(_merge(BASE_CONFIG, overrides))


@pytest.fixture
def make_config() -> Callable[..., MachineConfig]:
    """Factory fixture: ``make_config(num_ipus=4, links={"topology": "line"})``."""
    return build_config
