"""Strip the outputs of notebooks before they are committed, or check that they are.

Usage::

    python examples/notebooks/strip.py                 # strip every notebook here
    python examples/notebooks/strip.py a.ipynb b.ipynb # strip these
    python examples/notebooks/strip.py --check         # exit 1 if one is not stripped

Stripping empties every code cell's outputs, sets its execution count to none and
drops the run-time cell metadata Jupyter adds (``execution``, ``collapsed``,
``scrolled``); the cell tags (the ``parameters`` tag) and everything else stay. A
notebook that is already stripped is not rewritten. ``tests/test_notebooks.py`` runs
the same check.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import nbformat

#: Cell metadata keys written by a notebook front end while running or viewing cells.
RUNTIME_METADATA = ("execution", "collapsed", "scrolled")

HERE = Path(__file__).resolve().parent


def problems(nb: nbformat.NotebookNode) -> list[str]:
    """What keeps ``nb`` from being stripped, one line per cell (empty when stripped)."""
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        what = []
        if cell.get("outputs"):
            what.append(f"{len(cell.outputs)} output(s)")
        if cell.get("execution_count") is not None:
            what.append(f"execution count {cell.execution_count}")
        what += [f"metadata '{k}'" for k in RUNTIME_METADATA if k in cell.get("metadata", {})]
        if what:
            found.append(f"cell {index}: {', '.join(what)}")
    return found


def strip(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with every code cell's outputs, execution count and run-time metadata
    removed (changed in place and returned)."""
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        cell.outputs = []
        cell.execution_count = None
        for key in RUNTIME_METADATA:
            cell.metadata.pop(key, None)
    return nb


def main(argv: Sequence[str] | None = None) -> int:
    """Strip (or ``--check``) the notebooks named, default every one next to this file."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path, help="default: *.ipynb here")
    parser.add_argument("--check", action="store_true", help="only report; exit 1 if any")
    args = parser.parse_args(argv)
    paths = args.notebooks or sorted(HERE.glob("*.ipynb"))
    dirty = 0
    for path in paths:
        if not path.is_file():
            print(f"{path}: no such notebook", file=sys.stderr)
            return 2
        nb = nbformat.read(path, as_version=4)
        found = problems(nb)
        if not found:
            continue
        dirty += 1
        if args.check:
            print(f"{path}: not stripped: {'; '.join(found)}", file=sys.stderr)
        else:
            nbformat.write(strip(nb), path)
            print(f"{path}: stripped")
    if args.check and dirty:
        print(f"run: python {Path(__file__).name} to strip them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
