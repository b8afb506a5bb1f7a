"""Fill the bytecode caches once, in two processes, before the test workers start.

With ``pytest -n 2`` each worker imports every test module, and in a checkout whose
caches are empty (a fresh clone, CI) each of them rewrote the asserts of all 269 test
modules (pytest's assertion rewriting: about 9 s of CPU) and compiled the project's
modules to bytecode on its own, both at the same time, before either could run a
test. Here the pytest process that starts the workers does that work first, split
between itself and one child process so that both cores work, and the workers then
load the cached files as they do in any later run.

The rewritten modules are made by pytest's own rewriting (``_rewrite_test``) and
written by its own writer (``_write_pyc``), the files and names pytest's import hook
reads, so a worker gets the code it would have made itself; the project's modules go
through :mod:`compileall` into the bytecode cache the import system reads. Both
checks are by content or time stamp, as in the import system, and a file already
cached is not redone, so a run with warm caches only reads the cache headers. These
are pytest internals: if they change, or anything here fails, nothing is cached and
the workers rewrite and compile as before.
"""

from __future__ import annotations

import compileall
import fnmatch
import importlib.util
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
#: The packages whose modules the tests import.
PACKAGES = ("ipusim", "poplar_api", "popart_api")


class _Trace:
    """The ``state`` that pytest's ``_write_pyc`` reports its errors to."""

    @staticmethod
    def trace(message: str) -> None:
        pass


def _rewritten_pyc(path: Path) -> Path:
    """Where pytest's import hook reads the rewritten module of ``path``."""
    from _pytest.assertion import rewrite

    return rewrite.get_cache_dir(path) / (path.name[:-3] + rewrite.PYC_TAIL)


def _is_current(path: Path) -> bool:
    """Whether the rewritten module of ``path`` is cached for its present text (the
    header test of pytest's ``_read_pyc``: magic number, checked-hash flags, hash)."""
    try:
        with open(_rewritten_pyc(path), "rb") as cached:
            header = cached.read(16)
        source = path.read_bytes()
    except OSError:
        return False
    return (
        len(header) == 16
        and header[:4] == importlib.util.MAGIC_NUMBER
        and header[4:8] == b"\x03\x00\x00\x00"
        and header[8:16] == importlib.util.source_hash(source)[:8]
    )


def rewrite_and_compile(tests: Iterable[str], packages: Iterable[str]) -> None:
    """Rewrite and cache the test modules ``tests`` (paths) that are not cached, and
    compile the project modules under the directories ``packages``."""
    from _pytest.assertion import rewrite

    for name in tests:
        path = Path(name)
        if _is_current(path):
            continue
        source_hash, code = rewrite._rewrite_test(path, None)
        pyc = _rewritten_pyc(path)
        pyc.parent.mkdir(parents=True, exist_ok=True)
        rewrite._write_pyc(_Trace(), code, source_hash, pyc)  # type: ignore[arg-type]
    for package in packages:
        compileall.compile_dir(package, quiet=2)


def _skipped_folder(path: Path, norecurse: Sequence[str], in_venvs: bool) -> bool:
    """Whether pytest's collection does not enter the folder ``path`` (its
    ``pytest_ignore_collect``): ``__pycache__``, a folder a ``norecursedirs`` pattern
    names (hidden ones, ``node_modules``, ``build``, ...), or a virtual environment
    unless ``--collect-in-virtualenv``."""
    from _pytest.main import _in_venv
    from _pytest.pathlib import fnmatch_ex

    return (
        path.name == "__pycache__"
        or any(fnmatch_ex(pattern, path) for pattern in norecurse)
        or (not in_venvs and _in_venv(path))
    )


def selected_modules(config: Any) -> list[Path]:
    """The test modules the run's arguments name (files, or directories searched as
    pytest's collection searches them: not in the folders it skips, such as a
    checkout's ``.venv`` with its thousands of third-party test modules)."""
    patterns = config.getini("python_files")
    norecurse = config.getini("norecursedirs") or []
    in_venvs = bool(getattr(config.option, "collect_in_virtualenv", False))
    found: set[Path] = set()
    for arg in config.args:
        path = Path(arg.split("::")[0])
        path = path if path.is_absolute() else Path(config.invocation_params.dir) / path
        if path.is_file():
            found.add(path.resolve())
            continue
        for folder, dirs, files in os.walk(path):  # (nothing for a missing path)
            dirs[:] = [d for d in dirs if not _skipped_folder(Path(folder, d), norecurse, in_venvs)]
            found.update(
                Path(folder, name).resolve()
                for name in files
                if name.endswith(".py") and any(fnmatch.fnmatch(name, p) for p in patterns)
            )
    return sorted(found)


def starts_workers(config: Any) -> bool:
    """Whether this pytest process starts test workers (``-n``, not a worker itself)."""
    return (
        not hasattr(config, "workerinput")
        and bool(getattr(config.option, "numprocesses", None))
        and getattr(config.option, "dist", "no") != "no"
    )


def before_workers(config: Any, packages: Sequence[str] = PACKAGES) -> None:
    """In the pytest process that starts test workers, cache what each worker would
    otherwise rewrite and compile on its own (see the module's text): the test modules
    the run's arguments name and the modules of ``packages`` (names under the root)."""
    if (
        not starts_workers(config)
        or config.getvalue("assertmode") != "rewrite"
        or config.getini("enable_assertion_pass_hook")  # rewritten with the hook: not here
        or sys.dont_write_bytecode
    ):
        return
    try:
        tests = [str(p) for p in selected_modules(config) if not _is_current(p)]
        folders = [str(ROOT / name) for name in packages]
        if not tests:
            return
        env = dict(os.environ)  # the child writes where this process writes
        env.pop("PYTHONPYCACHEPREFIX", None)
        if sys.pycache_prefix:
            env["PYTHONPYCACHEPREFIX"] = sys.pycache_prefix
        child = subprocess.Popen(
            [sys.executable, __file__, *tests[1::2], "--", *folders[1::2]],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        try:
            rewrite_and_compile(tests[::2], folders[::2])
        finally:
            child.wait()
    except Exception:  # the workers rewrite and compile for themselves
        return


if __name__ == "__main__":
    args = sys.argv[1:]
    cut = args.index("--") if "--" in args else len(args)
    rewrite_and_compile(args[:cut], args[cut + 1 :])
