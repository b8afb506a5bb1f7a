"""The syntax trees of the project's source files, parsed once per test process.

Several checks read every module of ``ipusim``, ``poplar_api`` and ``popart_api``
(``test_ir_walk``: control-node dispatches and restated vocabularies;
``test_layering``: the imports; ``test_structure``: uses of the Graph's private
members). Each parsed every file again, about 2,000 parses of some 250 files in one
process running the three. :func:`parsed` keeps a file's tree for its present text
(modification time and size, as the import system checks a cached module), so a file
changed during the session is parsed again. The trees are shared: a check reads them
and must not change them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

__all__ = ["parsed"]


@functools.cache
def _parsed(path: Path, stamp: tuple[int, int]) -> ast.Module:
    """The tree of ``path`` as it is at ``stamp`` (modification time in ns, size)."""
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def parsed(path: Path) -> ast.Module:
    """The syntax tree of the Python file ``path`` (shared; do not modify it).

    Parameters
    ----------
    path
        A source file.

    Returns
    -------
    ast.Module
        Its tree, parsed once per process for each version of the file.
    """
    stat = path.stat()
    return _parsed(Path(path), (stat.st_mtime_ns, stat.st_size))
