"""The example scripts under ``examples/`` imported as modules, for tests.

The examples are scripts, not a package: each is imported from its file, once per
test session, under a module name made from its path (``poplar/prefetch.py`` ->
``example_poplar_prefetch``). The module is registered in ``sys.modules`` before it
runs, as an import would, so that its dataclasses and codelets resolve their module.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

__all__ = ["EXAMPLES", "load_example"]

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
