"""The example scripts under ``examples/`` imported as modules, for tests.

The examples are scripts, not a package: each is imported from its file, once per
test session, under a module name made from its path (``poplar/prefetch.py`` ->
``example_poplar_prefetch``). The module is registered in ``sys.modules`` before it
runs, as an import would, so that its dataclasses and codelets resolve their module.

:func:`call_main` runs a script's ``main(argv)`` in the test's process, with what it
writes to stdout and stderr captured: for the variants of a command whose run as a
separate process (the user's path) is tested once elsewhere, it checks the same
lines without starting Python, importing the package and loading the compiled
kernels again.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import os
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType

__all__ = ["EXAMPLES", "MainRun", "call_main", "load_example"]

#: The repository's ``examples`` folder.
EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@cache
def load_example(relative: str) -> ModuleType:
    """Import ``examples/<relative>`` (e.g. ``"poplar/prefetch.py"``) once per session."""
    path = EXAMPLES / relative
    name = "example_" + relative.removesuffix(".py").replace("/", "_")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"cannot import {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class MainRun:
    """What a script's ``main`` returned and wrote (the fields of a finished process)."""

    returncode: int
    stdout: str
    stderr: str


def call_main(relative: str, *args: str, cwd: Path | None = None, status: int = 0) -> MainRun:
    """Run ``main([*args])`` of ``examples/<relative>`` in this process, from ``cwd``
    when given; check that it returns ``status``.

    stdout and stderr are captured as the script writes them (``print`` looks them up
    when it is called), so the lines are those the script prints when run as a user
    runs it.
    """
    module = load_example(relative)
    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = module.main(list(args))
    finally:
        os.chdir(here)
    run = MainRun(0 if code is None else int(code), out.getvalue(), err.getvalue())
    assert run.returncode == status, (
        f"{relative} {' '.join(args)} returned {run.returncode}\n"
        f"--- stdout ---\n{run.stdout[-3000:]}\n--- stderr ---\n{run.stderr[-5000:]}"
    )
    return run
