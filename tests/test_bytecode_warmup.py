"""The bytecode caches filled before the test workers start (``bytecode_warmup``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from _pytest.assertion import rewrite
from bytecode_warmup import _is_current, _rewritten_pyc, before_workers, rewrite_and_compile

SOURCE = """
def test_sum():
    values = [1, 2, 3]
    assert sum(values) == 6, values


def test_nested():
    assert {"a": [1, 2]} != {"a": [1, 3]}
"""


@pytest.fixture
def prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A bytecode prefix of the test's own, as the suite's processes use one."""
    folder = tmp_path / "pycache"
    monkeypatch.setattr(sys, "pycache_prefix", str(folder))
    return folder


def test_the_cached_module_is_the_one_pytest_reads_and_would_make(
    tmp_path: Path, prefix: Path, pytestconfig: pytest.Config
) -> None:
    module = tmp_path / "test_sample.py"
    module.write_text(SOURCE)
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "mod.py").write_text("X = 1\n")
    assert not _is_current(module)

    rewrite_and_compile([str(module)], [str(package)])

    pyc = _rewritten_pyc(module)
    assert pyc.is_relative_to(prefix) and pyc.name.endswith(rewrite.PYC_TAIL)
    loaded = rewrite._read_pyc(module, pyc)  # pytest's own reader accepts it
    assert loaded is not None
    _, made = rewrite._rewrite_test(module, pytestconfig)  # what its import hook makes
    assert loaded == made  # same bytecode, constants, names and lines
    assert _is_current(module)
    # the project module's bytecode, where the import system looks for it
    cached = Path(importlib.util.cache_from_source(str(package / "mod.py")))
    assert cached.is_relative_to(prefix) and cached.exists()


def test_a_changed_module_is_rewritten_again(tmp_path: Path, prefix: Path) -> None:
    module = tmp_path / "test_sample.py"
    module.write_text(SOURCE)
    rewrite_and_compile([str(module)], [])
    module.write_text(SOURCE.replace("== 6", "== 7"))
    assert not _is_current(module)
    rewrite_and_compile([str(module)], [])
    assert _is_current(module)
    assert rewrite._read_pyc(module, _rewritten_pyc(module)) is not None


def _config(tmp_path: Path, **option: object) -> SimpleNamespace:
    """A stand-in for pytest's config with the fields ``before_workers`` reads."""
    values = {"numprocesses": 2, "dist": "load", **option}
    return SimpleNamespace(
        option=SimpleNamespace(**values),
        args=[str(tmp_path)],
        invocation_params=SimpleNamespace(dir=tmp_path),
        getini=lambda name: ["test_*.py"] if name == "python_files" else False,
        getvalue=lambda name: "rewrite",
    )


def test_only_the_process_that_starts_workers_fills_the_cache(tmp_path: Path, prefix: Path) -> None:
    modules = [tmp_path / "test_one.py", tmp_path / "sub" / "test_two.py"]
    modules[1].parent.mkdir()
    for module in modules:
        module.write_text(SOURCE)
    (tmp_path / "helper.py").write_text(SOURCE)  # not a test module: not rewritten
    before_workers(_config(tmp_path, numprocesses=None), packages=())  # no workers
    before_workers(_config(tmp_path, dist="no"), packages=())
    worker = _config(tmp_path)
    worker.workerinput = {}
    before_workers(worker, packages=())
    assert not any(_is_current(module) for module in modules)
    before_workers(_config(tmp_path), packages=())  # one module here, one in a child
    assert all(_is_current(module) for module in modules)
    assert not _rewritten_pyc(tmp_path / "helper.py").exists()


def test_folders_pytest_does_not_collect_from_are_not_rewritten(
    tmp_path: Path, prefix: Path
) -> None:
    """A directory argument (``pytest -n 2 .``) is searched as pytest's collection
    searches it: not in the folders its ``norecursedirs`` patterns name (hidden ones,
    ``node_modules``, ...), in a virtual environment (a ``pyvenv.cfg``: a checkout's
    ``.venv``, or one named otherwise, holds thousands of third-party test modules) nor
    in ``__pycache__``; their test modules are not rewritten nor cached."""
    kept = [tmp_path / "test_one.py", tmp_path / "sub" / "test_two.py"]
    skipped = [
        tmp_path / ".venv" / "lib" / "test_hidden.py",
        tmp_path / "env" / "lib" / "test_in_venv.py",
        tmp_path / "node_modules" / "test_module.py",
        tmp_path / "sub" / "build" / "test_built.py",
    ]
    for module in kept + skipped:
        module.parent.mkdir(parents=True, exist_ok=True)
        module.write_text(SOURCE)
    (tmp_path / "env" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    config = _config(tmp_path)
    defaults = [".*", "build", "node_modules", "venv", "*.egg", "dist"]
    config.getini = lambda name: {"python_files": ["test_*.py"], "norecursedirs": defaults}.get(
        name, False
    )
    before_workers(config, packages=())
    assert all(_is_current(module) for module in kept)
    assert not any(_rewritten_pyc(module).exists() for module in skipped)
