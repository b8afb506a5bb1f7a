"""The import rules of DESIGN §2, and no import cycles between modules.

Layers: popart_api on poplar_api on ipusim. ipusim never imports poplar_api or
popart_api; poplar_api never imports popart_api, nor simpy (the machine's event engine).
Within and between the three packages no module may import itself back through a chain
of imports: the module graph is built from the source with :mod:`ast`, counting
relative imports and imports inside functions (they run too, only later); imports under
``if TYPE_CHECKING:`` are for annotations only and never run, so they are left out of
the cycle check (but not of the layer rules).
"""

from __future__ import annotations

import ast
import collections
import functools
import itertools
import pathlib
import subprocess
import sys
import textwrap

import pytest
from source_trees import parsed

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("ipusim", "poplar_api", "popart_api")

#: (package, package it must never import), DESIGN §2.
FORBIDDEN = (
    ("ipusim", "poplar_api"),
    ("ipusim", "popart_api"),
    ("poplar_api", "popart_api"),
    ("poplar_api", "simpy"),
)

#: Imports known to close a cycle, left out of the cycle check until the modules are
#: reshaped. Each is an import made inside a function, from a lower module up to the one
#: that uses it. ipusim has none, and no ipusim import may be added here.
KEPT_CYCLE_EDGES: frozenset[tuple[str, str]] = frozenset(
    {
        # Remote buffers fit written values with the engine's converter, and check replica
        # indices with the stream helpers (which import the lowering, which imports remote).
        ("poplar_api.remote", "poplar_api.engine"),
        ("poplar_api.remote", "poplar_api.streams"),
        ("poplar_api.remote", "poplar_api.graph"),
        # Programs name the graph's compute sets, streams and functions.
        ("poplar_api.program", "poplar_api.graph"),
        # The bulk methods of a Graph make vertex references of the Graph module.
        ("poplar_api.graph_bulk", "poplar_api.graph"),
        # popops::encodeOneHot is Poplibs' popops name; ipusim implements it with the
        # losses that use it (popnn.onehot, which builds on popops).
        ("poplar_api.popops", "poplar_api.popnn.onehot"),
        # The pipeline and the training step call each other's helpers.
        ("popart_api.training", "popart_api.pipeline"),
    }
)


# ------------------------------------------------------------------ the import graph
def _module_names(root: pathlib.Path, packages: tuple[str, ...]) -> dict[str, pathlib.Path]:
    """Dotted module name -> file, for every module of ``packages`` below ``root``."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


#: Nodes that are or hold statements.
_HOLDERS = (ast.stmt, ast.excepthandler, ast.match_case)


def _is_type_checking(node: ast.AST) -> bool:
    """Whether ``node`` is an ``if TYPE_CHECKING:`` block."""
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST):
    """``(node, for annotations only)`` of every import statement in ``tree``.

    Imports are statements, so only statements (and the except handlers and match cases
    that hold them) are visited, breadth first in the order of :func:`ast.walk`; an
    import in the body of an ``if TYPE_CHECKING:`` block (at any depth) is for
    annotations only.
    """
    queue = collections.deque([(tree, False)])
    while queue:
        node, hidden = queue.popleft()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, hidden
            continue
        checking = _is_type_checking(node)
        for field, value in ast.iter_fields(node):
            if isinstance(value, list):
                inner = hidden or (checking and field == "body")
                queue.extend((child, inner) for child in value if isinstance(child, _HOLDERS))


def _imported_names(module: str, is_package: bool, tree: ast.AST, annotations: bool = True):
    """(dotted name, line) of everything a module imports; relative imports resolved.

    ``from a.b import c`` yields ``a.b.c`` (which :func:`import_graph` reads as module
    ``a.b.c`` when there is one, else as ``a.b``). Without ``annotations``, imports
    under ``if TYPE_CHECKING:`` are left out.
    """
    base = module.split(".") if is_package else module.split(".")[:-1]
    for node, hidden in _imports(tree):
        if hidden and not annotations:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        else:
            if node.level:
                anchor = base[: len(base) - (node.level - 1)]
                target = ".".join([*anchor, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                yield f"{target}.{alias.name}", node.lineno


@functools.cache
def _file_imports(
    module: str, path: pathlib.Path, stamp: tuple[int, int], annotations: bool
) -> tuple[tuple[str, int], ...]:
    """:func:`_imported_names` of the file ``path`` as it is at ``stamp`` (modification
    time, size): each file is parsed once per test process, not once per test."""
    tree = parsed(path)
    return tuple(_imported_names(module, path.name == "__init__.py", tree, annotations))


def file_imports(module: str, path: pathlib.Path, annotations: bool = True):
    """(dotted name, line) of everything module ``module`` (file ``path``) imports."""
    stat = path.stat()
    return _file_imports(module, path, (stat.st_mtime_ns, stat.st_size), annotations)


def import_graph(
    root: pathlib.Path = ROOT, packages: tuple[str, ...] = PACKAGES, annotations: bool = False
) -> dict[str, dict[str, int]]:
    """module -> {module of ``packages`` it imports: line of the first such import}.

    An import of ``a.b.c`` counts as one of the deepest module of the packages it
    names. ``annotations`` also counts imports under ``if TYPE_CHECKING:``.
    """
    files = _module_names(root, packages)
    graph: dict[str, dict[str, int]] = {}
    for module, path in files.items():
        edges: dict[str, int] = {}
        for name, line in file_imports(module, path, annotations):
            while name and name not in files:
                name = name.rpartition(".")[0]
            if name and name != module:
                edges.setdefault(name, line)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, ..., a]``) per strongly connected group of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            for target in targets:
                if target not in graph:
                    continue
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.add(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        groups.append(group)
    return [_cycle_in(graph, group) for group in groups]


def _cycle_in(graph: dict[str, dict[str, int]], group: set[str]) -> list[str]:
    """A shortest cycle through the first module of a strongly connected group."""
    start = min(group)
    previous = {start: ""}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for target in sorted(graph[node]):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if target in group and target not in previous:
                    previous[target] = node
                    nxt.append(target)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover


def _describe(graph: dict[str, dict[str, int]], cycle: list[str]) -> str:
    steps = [f"{a} (line {graph[a][b]}) -> {b}" for a, b in itertools.pairwise(cycle)]
    return "; ".join(steps)


# ----------------------------------------------------------------------- the rules
@pytest.mark.parametrize(("package", "forbidden"), FORBIDDEN)
def test_layers_import_downwards_only(package, forbidden):
    offenders = []
    for module, path in _module_names(ROOT, (package,)).items():
        for name, line in file_imports(module, path):
            if name.split(".")[0] == forbidden:
                offenders.append(f"{path.relative_to(ROOT)}:{line} imports {name}")
    assert offenders == [], f"{package} must never import {forbidden}:\n" + "\n".join(offenders)


def test_no_import_cycles():
    graph = import_graph()
    for source, target in KEPT_CYCLE_EDGES:
        graph.get(source, {}).pop(target, None)
    cycles = find_cycles(graph)
    assert cycles == [], "import cycles:\n" + "\n".join(_describe(graph, c) for c in cycles)


def test_every_kept_edge_is_still_an_import():
    graph = import_graph()
    stale = sorted(e for e in KEPT_CYCLE_EDGES if e[1] not in graph.get(e[0], {}))
    assert stale == [], f"no longer imported, remove from KEPT_CYCLE_EDGES: {stale}"


def test_the_machine_keeps_no_cycle_edges():
    assert [e for e in KEPT_CYCLE_EDGES if e[0].startswith("ipusim")] == []


def test_importing_the_machine_loads_no_poplar_api():
    code = "import sys, ipusim.machine, ipusim.cli; print('poplar_api' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


# -------------------------------------------------------- the checker finds cycles
def _write(root: pathlib.Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")


def test_cycles_through_relative_and_function_imports_are_found(tmp_path):
    _write(
        tmp_path,
        {
            "pkg/__init__.py": "",
            "pkg/a.py": "from . import b\n",
            "pkg/b.py": "def late():\n    from pkg.sub import c\n",
            "pkg/sub/__init__.py": "",
            "pkg/sub/c.py": "from ..a import thing\n",
            "pkg/d.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import e\n"
            ),
            "pkg/e.py": "import pkg.d\n",
        },
    )
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.a"] == {"pkg.b": 1}
    assert graph["pkg.b"] == {"pkg.sub.c": 2}
    assert graph["pkg.sub.c"] == {"pkg.a": 1}
    assert graph["pkg.d"] == {}  # annotations only
    assert find_cycles(graph) == [["pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"]]
    # counting annotation-only imports, d and e form a second cycle
    both = find_cycles(import_graph(tmp_path, ("pkg",), annotations=True))
    assert sorted(map(tuple, both)) == [
        ("pkg.a", "pkg.b", "pkg.sub.c", "pkg.a"),
        ("pkg.d", "pkg.e", "pkg.d"),
    ]


def test_an_acyclic_graph_has_no_cycles():
    graph = {"a": {"b": 1, "c": 1}, "b": {"c": 1}, "c": {}}
    assert find_cycles(graph) == []
