"""Structure rules of the code base (DESIGN §2 and §5): module size budget, libraries
on the Graph's public API only."""

from __future__ import annotations

import ast
import pathlib
import shutil
import subprocess

import pytest
from source_trees import parsed

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("ipusim", "poplar_api", "popart_api")
#: Lines a product module may have.
BUDGET = 800
#: Modules allowed over the budget (at most 4, none over 1,000 lines), each with the
#: reason it is kept whole.
KEEP: dict[str, str] = {}
#: Library code: Poplibs, GCL and PopART build graphs only through the public API.
LIBRARIES = (
    "poplar_api/popops",
    "poplar_api/poplin",
    "poplar_api/popnn",
    "poplar_api/poprand.py",
    "poplar_api/poputil.py",
    "poplar_api/gcl.py",
    "popart_api",
)
#: Private members of Graph and Tensor objects (and their state) that library code must
#: not use.
PRIVATE_GRAPH_MEMBERS = frozenset({
    "_state", "_tiles", "_tile_lo", "_root_tiles", "_wide", "_parent", "_top",
    "_num_tiles", "_from_state", "_of_ids", "_new", "_consecutive", "_index", "_start",
    "_ix", "_graph", "_check_vertex", "_refuse_on_parent", "_root_tile",
    "_connect_field", "_vertex_type", "_id_index", "_flat_ids", "_add", "_mapping_tiles",
    "_derive", "_label", "_root", "_flat",
})  # fmt: skip


def product_modules() -> list[pathlib.Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def line_count(path: pathlib.Path) -> int:
    return len(path.read_text().splitlines())


def test_modules_within_budget() -> None:
    over = {str(p.relative_to(ROOT)): n for p in product_modules() if (n := line_count(p)) > BUDGET}
    unexplained = {k: v for k, v in over.items() if k not in KEEP}
    assert unexplained == {}, f"modules over {BUDGET} lines (split or keep-list): {unexplained}"
    assert len(KEEP) <= 4
    assert all(n <= 1000 for n in over.values()), over
    stale = sorted(set(KEEP) - set(over))
    assert stale == [], f"keep-list entries no longer over budget: {stale}"


def library_files() -> list[pathlib.Path]:
    found: list[pathlib.Path] = []
    for lib in LIBRARIES:
        path = ROOT / lib
        found += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return found


def private_uses(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """``obj._name`` attribute uses of the Graph's private members in ``path``, other
    than on ``self`` (a class's own members may share a name)."""
    tree = parsed(path)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE_GRAPH_MEMBERS:
            owner = node.value
            if isinstance(owner, ast.Name) and owner.id in ("self", "cls"):
                continue
            hits.append(f"{path.relative_to(root)}:{node.lineno} .{node.attr}")
    return hits


def test_libraries_use_only_the_public_graph_api() -> None:
    files = library_files()
    hits = [h for p in files for h in private_uses(p)]
    assert len(files) > 20
    assert hits == [], "library code touches the Graph's private state:\n" + "\n".join(hits)


def test_private_use_check_finds_a_use(tmp_path: pathlib.Path) -> None:
    bad = tmp_path / "lib.py"
    bad.write_text("def f(graph):\n    return graph._state.space\n\nclass A:\n    _state = 1\n")
    assert private_uses(bad, tmp_path) == ["lib.py:2 ._state"]


def tracked_links(root: pathlib.Path = ROOT) -> list[str] | None:
    """Paths git tracks as symbolic links under ``root`` (mode 120000), or None when
    ``root`` is not a git checkout or git is missing (a source archive)."""
    try:
        listed = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-s", "-z"],
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return None
    entries = (e.split("\t", 1) for e in listed.split("\0") if e)
    return sorted(path for info, path in entries if info.split()[0] == "120000")


def test_the_tree_tracks_no_symbolic_links() -> None:
    # a tracked link (a .venv pointing at another checkout's venv) points nowhere in
    # a fresh clone and shadows the venv `make` would create there
    links = tracked_links()
    if links is None:
        pytest.skip("not a git checkout")
    assert links == [], f"symbolic links tracked by git: {links}"


def test_tracked_link_check_finds_a_link(tmp_path: pathlib.Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    (tmp_path / "a.py").write_text("")
    (tmp_path / ".venv").symlink_to(tmp_path / "elsewhere")
    subprocess.run([*git, "add", "-f", "a.py", ".venv"], check=True)
    assert tracked_links(tmp_path) == [".venv"]
