"""ONNX's node-test data, generated once per machine by one process, before the workers
need it.

The installed onnx (1.23) ships no node-test data: ``test_onnx_backend`` generates it
into the user cache when its module is collected (:func:`popart_api.onnx_tests.generate_data`,
about 10 s of CPU). With ``pytest -n 2`` both workers collect every module, so in a
checkout whose user cache lacks the data (a fresh machine, CI) both generated it, at
the same time. Here the pytest process that starts the workers starts one process that
generates it (:func:`before_workers`, not waited for: it runs beside the bytecode
warm-up), holding a lock on the directory; a worker's collection takes the same lock
(:func:`generation_lock`), so it waits for that process and reads what it wrote, or
generates the data itself when nothing else is (as before, if anything here fails).
"""

from __future__ import annotations

import fcntl
import importlib.metadata
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bytecode_warmup import selected_modules, starts_workers

#: The test module that needs the data.
MODULE = "test_onnx_backend.py"


def _lock_path(data_dir: Path) -> Path:
    return data_dir.with_name(data_dir.name + ".lock")


@contextmanager
def generation_lock(data_dir: Path) -> Iterator[None]:
    """Hold the lock of the data directory ``data_dir`` (a file beside it), waiting
    while another process holds it."""
    data_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(_lock_path(data_dir), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _expected_data_dir() -> Path | None:
    """Where the data will be generated, or None when no generation is expected: the
    user chose a directory (``IPUSIM_ONNX_NODE_DATA``), the onnx package ships the
    data, or the cache holds it. The same places as
    :func:`popart_api.onnx_tests.find_data_dir`, found without importing onnx or
    popart_api; a wrong answer costs a process or a generation, never a result."""
    if os.environ.get("IPUSIM_ONNX_NODE_DATA"):
        return None
    spec = importlib.util.find_spec("onnx")
    if spec is None or not spec.submodule_search_locations:
        return None
    shipped = Path(spec.submodule_search_locations[0], "backend", "test", "data", "node")
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    cache = Path(base, "ipusim", f"onnx-node-tests-{importlib.metadata.version('onnx')}")
    if any(shipped.glob("test_*/model.onnx")) or any(cache.glob("test_*/model.onnx")):
        return None
    return cache


def before_workers(config: Any) -> subprocess.Popen | None:
    """In the pytest process that starts the test workers, start the process that
    generates the data when the run collects :data:`MODULE` and the data is missing;
    the process, to be waited for at the end of the run, or None."""
    try:
        if not starts_workers(config) or not any(
            path.name == MODULE for path in selected_modules(config)
        ):
            return None
        data_dir = _expected_data_dir()
        if data_dir is None:
            return None
        return subprocess.Popen(
            [sys.executable, __file__, str(data_dir)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    except Exception:  # the workers generate it for themselves
        return None


if __name__ == "__main__":
    with generation_lock(Path(sys.argv[1])):  # before the imports: the workers wait
        from popart_api import onnx_tests

        onnx_tests.ensure_data_dir(generate=True)
