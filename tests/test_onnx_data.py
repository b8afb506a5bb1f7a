"""ONNX's node-test data generated once, before the test workers need it (``onnx_data``)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import onnx_data
import pytest

from popart_api import onnx_tests


@pytest.fixture
def empty_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty user cache, and no data directory chosen by the user."""
    if any(onnx_tests.package_data_dir().glob("test_*/model.onnx")):
        pytest.skip("this onnx ships its node-test data: nothing is generated")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(onnx_tests.DATA_ENV, raising=False)
    return tmp_path / "cache"


def test_the_expected_directory_is_where_the_data_is_generated(empty_cache: Path) -> None:
    # found without importing onnx or popart_api, it must be the directory that
    # test_onnx_backend's collection generates and locks
    assert onnx_data._expected_data_dir() == onnx_tests.cache_data_dir()
    assert onnx_tests.cache_data_dir().is_relative_to(empty_cache)


def test_nothing_is_generated_when_the_data_is_there(
    empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = onnx_tests.cache_data_dir() / "test_relu"
    case.mkdir(parents=True)
    (case / "model.onnx").write_bytes(b"")
    assert onnx_data._expected_data_dir() is None
    (case / "model.onnx").unlink()
    assert onnx_data._expected_data_dir() == onnx_tests.cache_data_dir()
    monkeypatch.setenv(onnx_tests.DATA_ENV, str(empty_cache))  # the user's choice
    assert onnx_data._expected_data_dir() is None


def _config(tmp_path: Path, module: str, **option: object) -> SimpleNamespace:
    """A stand-in for pytest's config with the fields ``before_workers`` reads."""
    (tmp_path / module).write_text("")
    values = {"numprocesses": 2, "dist": "load", **option}
    return SimpleNamespace(
        option=SimpleNamespace(**values),
        args=[str(tmp_path / module)],
        invocation_params=SimpleNamespace(dir=tmp_path),
        getini=lambda name: ["test_*.py"] if name == "python_files" else False,
    )


def test_started_only_by_the_process_that_starts_workers_of_the_onnx_tests(
    tmp_path: Path, empty_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[list[str]] = []
    monkeypatch.setattr(onnx_data.subprocess, "Popen", lambda args, **_: started.append(args))
    onnx_data.before_workers(_config(tmp_path, "test_other.py"))
    onnx_data.before_workers(_config(tmp_path, onnx_data.MODULE, numprocesses=None))
    worker = _config(tmp_path, onnx_data.MODULE)
    worker.workerinput = {}
    onnx_data.before_workers(worker)
    assert started == []
    onnx_data.before_workers(_config(tmp_path, onnx_data.MODULE))
    assert started == [[sys.executable, onnx_data.__file__, str(onnx_tests.cache_data_dir())]]


def test_the_lock_waits_for_the_process_holding_it(tmp_path: Path) -> None:
    data = tmp_path / "data"
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(onnx_data._lock_path(data))], stdout=subprocess.PIPE
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"locked\n"
    began = time.monotonic()
    with onnx_data.generation_lock(data):
        waited = time.monotonic() - began
    holder.wait()
    assert waited >= 0.4  # (most of the holder's 0.5 s after it said so)


#: A process holding a lock file for 0.5 s after saying so.
HOLD = """
import fcntl, sys, time
with open(sys.argv[1], "a") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    print("locked", flush=True)
    time.sleep(0.5)
"""
