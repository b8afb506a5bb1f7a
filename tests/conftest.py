"""Shared test fixtures."""

from __future__ import annotations

import copy
import os
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnx_data
import pytest
from bytecode_warmup import before_workers

from ipusim import ir
from ipusim.config import MachineConfig, load_config
from ipusim.errors import ConfigError


def _keep_bytecode_out_of_the_tree() -> None:
    """Cache compiled bytecode under ``.pytest_cache/pycache`` when the environment
    asks Python not to write it (``PYTHONDONTWRITEBYTECODE``).

    The suite starts hundreds of Python processes (the two test workers, every script
    and command a test runs as a user would); without a bytecode cache each of them
    compiles every module it imports from source again, about 1.4 s of CPU a process,
    and each worker rewrites the asserts of every test module again. The setting's
    purpose, no ``__pycache__`` beside the sources, is kept: the cache goes under
    pytest's own cache directory (``PYTHONPYCACHEPREFIX``), which the processes started
    from here inherit. A prefix the user set is left as it is.
    """
    if not sys.dont_write_bytecode:
        return
    prefix = os.environ.get("PYTHONPYCACHEPREFIX")
    if not prefix:
        prefix = str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "pycache")
        _link_installed_bytecode(Path(prefix))
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False


def _link_installed_bytecode(prefix: Path) -> None:
    """Give a new bytecode prefix the bytecode the interpreter already has for the
    standard library and the installed packages.

    Under a prefix Python looks for every module's bytecode there only, so in a fresh
    checkout each of the first processes (pytest and its two workers, started
    together) compiled the library modules they import (Numba, NumPy, SciPy, pandas,
    pytest...) from source again, although their ``__pycache__`` holds it. Each such
    file is linked (hard, else symbolic) to where the prefix looks for it, once, by
    the process that makes the prefix; the project's modules are not there and are
    compiled into the prefix as before. A file is only used when it matches its
    source (Python checks the source's time and size), as in place.
    """
    done = prefix / ".installed-bytecode"
    if done.exists() or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    libraries = {
        Path(sysconfig.get_path(kind)).resolve()
        for kind in ("stdlib", "platstdlib", "purelib", "platlib")
    }
    tail = f".{sys.implementation.cache_tag}.pyc"
    # the library folders as the import system spells them (a linked venv: unresolved)
    tops = dict.fromkeys(
        os.path.abspath(entry) for entry in sys.path if entry and Path(entry).resolve() in libraries
    )
    for top in tops:
        for folder, dirs, _files in os.walk(top):
            if folder == top:  # not the standard library's own tests or another installation
                dirs[:] = [d for d in dirs if d not in ("test", "idlelib", "site-packages")]
            if "__pycache__" not in dirs:
                continue
            dirs.remove("__pycache__")
            cached = os.path.join(folder, "__pycache__")
            target = prefix / os.path.relpath(folder, os.sep)
            for name in os.listdir(cached):
                if not name.endswith(tail) or name.count(".") != 2:
                    continue  # another interpreter's, or optimised (.opt-1) bytecode
                source, dest = os.path.join(cached, name), target / name
                try:
                    target.mkdir(parents=True, exist_ok=True)
                    try:
                        os.link(source, dest)
                    except FileExistsError:
                        continue
                    except OSError:  # another file system
                        os.symlink(source, dest)
                except FileExistsError:
                    continue
                except OSError:
                    return  # an unwritable cache: the modules are compiled as before
    prefix.mkdir(parents=True, exist_ok=True)
    done.touch()


_keep_bytecode_out_of_the_tree()


def _driver_cache_under_pytest_cache() -> None:
    """Keep the disk cache of compiled vertex drivers (``poplar_api.driver_cache``)
    under ``.pytest_cache/ipusim`` unless the user chose a place (``IPUSIM_CACHE_DIR``).

    The suite then neither reads nor fills the user's own cache, and its two workers
    and every process a test starts (they inherit the variable) share one cache that
    lasts from one run of the suite to the next.
    """
    os.environ.setdefault(
        "IPUSIM_CACHE_DIR", str(Path(__file__).resolve().parents[1] / ".pytest_cache" / "ipusim")
    )


_driver_cache_under_pytest_cache()

#: The process generating ONNX's node-test data (``onnx_data``), if one was started.
_ONNX_DATA = pytest.StashKey["subprocess.Popen | None"]()


def pytest_configure(config: pytest.Config) -> None:
    """Before test workers start, rewrite and cache the test modules and compile the
    project's modules once, in two processes (``bytecode_warmup``), instead of in
    every worker; and start generating ONNX's node-test data if it is missing
    (``onnx_data``), once, instead of in every worker."""
    config.stash[_ONNX_DATA] = onnx_data.before_workers(config)
    before_workers(config)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Wait for the process generating ONNX's node-test data, if one was started."""
    process = config.stash.get(_ONNX_DATA, None)
    if process is not None:
        process.wait()


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


def config_problems(source: Any, overrides: dict[str, Any] | None = None) -> list[str]:
    """The problems of the ``ConfigError`` that loading ``source`` (a preset name, a
    path or a dict) with ``overrides`` must raise; fails the test when it loads."""
    with pytest.raises(ConfigError) as info:
        load_config(source, overrides)
    return info.value.problems


#: Overrides of the ``tiny`` preset with round numbers, so that a timeline can be worked
#: out by hand: 1 GHz (1 cycle = 1 ns), 8 tiles in 2 columns of 4 (tile i at column
#: i // 4, row i % 4), sync controller at tile 0, so tile i is [0,1,2,3,1,2,3,4][i] hops
#: from it; exchange 4 bytes per cycle, 2 fixed cycles and 0.5 cycles per hop.
ROUND_TINY: dict[str, Any] = {
    "tile.clock_hz": 1e9,
    "tile.columns": 2,
    "tile.vertex_launch_cycles": 0,
    "sync.min_sync_delay_cycles": 3,
    "sync.max_relative_delay_cycles": 8,
    "sync.relative_delay": "auto",
    "sync.controller_tile": 0,
    "exchange.bytes_per_cycle": 4,
    "exchange.fixed_latency_cycles": 2,
    "exchange.cycles_per_hop": 0.5,
}
#: The sync delay of each tile under ``ROUND_TINY``: relative delay
#: ``round(8 * hops / 4) = 2 * hops``, so ``3 + 2 * hops``.
ROUND_TINY_SYNC_DELAYS = (3, 5, 7, 9, 5, 7, 9, 11)


def assert_same_timing(a: Any, b: Any) -> None:
    """Two traces of one program (e.g. run at two simulation granularities) end every
    tile at the same cycle and give every step the same cycles on every tile."""
    np.testing.assert_array_equal(a.tile_end_cycles, b.tile_end_cycles)
    assert [r.tile_cycles.tolist() for r in a.records] == [
        r.tile_cycles.tolist() for r in b.records
    ]


def round_tiny_superstep(program_id: int = -1) -> ir.Sequence:
    """One superstep for ``ROUND_TINY``: a compute set, an internal sync, an exchange.

    Tile 0 runs seven worker vertices of 10 cycles (contexts [20,10,10,10,10,10], so
    6 * 20 = 120), tile 1 one worker vertex of 30 (6 * 30 = 180), tile 5 a multi-vertex
    of 50 tile cycles; then tile 0 sends 100 bytes to tile 7 (25 cycles at 4 bytes per
    cycle, 2 fixed, ceil(0.5 * 4 hops) = 2: 29 cycles). ``program_id`` tags the compute
    step with a user-level program.
    """
    compute = ir.Compute(
        name="cs",
        vertex_tile=[0] * 7 + [1, 5],
        vertex_cycles=[10] * 7 + [30, 50],
        vertex_multi=[False] * 8 + [True],
        program_id=program_id,
    )
    sync = ir.Sync(name="sync", sync_kind="internal")
    exchange = ir.Exchange(name="ex", src_tile=[0], dst_tile=[7], num_bytes=[100])
    return ir.Sequence([compute, sync, exchange])
