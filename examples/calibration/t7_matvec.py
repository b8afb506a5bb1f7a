"""T7: Poplar tutorial 7 (matrix x vector, optimised) at 10000 x 1000 on a Mk2 IPU Model.

Rebuilds exactly what was run: the tutorial's own graph (``examples/tutorials/tut7.py``:
the cost model picks the column split, ``mulCS`` of dot-product vertices, ``reduceCS``
of reduce vertices, host FIFOs in and out) in one ``engine.run``. The IPU Model of the
tutorial has ``minIPUSyncDelay = 0`` and ``relativeSyncDelay = NO_DELAY``, hence
:data:`CONFIG_OVERRIDES`. The metrics are the lines of the "Execution" section of the
two measured summaries (``tut7_10000x1000_mk2_*.txt``): total cycles and tile averages.
The hardware summary is compared with the same simulated numbers: ipusim models the
IPU Model's vertex estimates, not the compiled C++ loop, nor ``StreamCopyBegin``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from ipusim.trace import Trace
from poplar_api import Device, Engine
from poplar_api.workload import Workload

CONFIG = "mk2"
CONFIG_OVERRIDES = {"sync.min_sync_delay_cycles": 0, "sync.relative_delay": "none"}
TEST_CONFIG = "tiny"

#: The two summaries (ids of the .txt files, not rows of measurements.csv).
POINTS: dict[str, dict] = {
    "T7.ipumodel": {"rows": 10000, "cols": 1000},
    "T7.hardware": {"rows": 10000, "cols": 1000},
}

_TUT7 = Path(__file__).resolve().parents[1] / "tutorials" / "tut7.py"


def _tut7():
    name = "tut7"
    module = sys.modules.get(name)
    if module is not None and getattr(module, "__file__", None) == str(_TUT7):
        return module
    spec = importlib.util.spec_from_file_location(name, _TUT7)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def metrics(engine: Engine, trace: Trace) -> dict[str, float]:
    """Total cycles and per-tile averages of each phase, as the summary prints them."""
    t, n = trace.totals, trace.num_tiles
    return {
        "total_cycles": float(trace.total_cycles),
        "tile_avg_compute_cycles": t["compute"] / n,
        "tile_avg_compute_cycles_excluding_idle": t["compute_active"] / n,
        "tile_avg_ipu_exchange_cycles": t["internal_exchange"] / n,
        "tile_avg_global_exchange_cycles": t["global_exchange"] / n,
        "tile_avg_host_exchange_cycles": t["host_exchange"] / n,
        "tile_avg_sync_cycles": t["sync"] / n,
    }


def workload(device: Device, rows: int = 100, cols: int = 50) -> Workload:
    """Tutorial 7's graph and program for a ``rows`` x ``cols`` matrix (see module doc)."""
    built = _tut7().workload(device, rows=rows, cols=cols)
    built.metrics = metrics
    return built
