"""docs/poplar_api.md lists every public name of ``poplar_api`` and its program module,
and every public method of ``Graph``, ``Tensor`` and ``Engine``.

The names are the identifiers inside backticks of the section "Names provided, module
by module" (so `` `Copy(src, dst)` `` counts for ``Copy``, ``src`` and ``dst``).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import poplar_api
from poplar_api import Engine, Graph, Tensor
from poplar_api import program as prog

DOC = Path(__file__).resolve().parents[1] / "docs" / "poplar_api.md"
SECTION = "## Names provided, module by module"


def documented_names() -> set[str]:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"{DOC} has no section {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    body = re.split(r"^## ", body, maxsplit=1, flags=re.MULTILINE)[0]
    names: set[str] = set()
    for code in re.findall(r"`([^`]+)`", body):
        names.update(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", code))
    return names


def public_methods(cls: type) -> list[str]:
    """Public attributes ``cls`` defines or inherits from its own package's bases (the
    Graph's bulk methods live in a base class of their own)."""
    own = [c for c in cls.__mro__ if c.__module__.startswith("poplar_api")]
    return sorted({name for c in own for name in vars(c) if not name.startswith("_")})


@pytest.mark.parametrize(
    ("what", "names"),
    [
        ("poplar_api.__all__", poplar_api.__all__),
        ("poplar_api.program.__all__", prog.__all__),
        ("Graph", public_methods(Graph)),
        ("Tensor", public_methods(Tensor)),
        ("Engine", public_methods(Engine)),
    ],
)
def test_every_public_name_is_documented(what, names):
    missing = [n for n in names if n not in documented_names()]
    assert not missing, f"{what}: {missing} are not listed in {DOC.name} ({SECTION!r})"


def test_the_section_links_to_the_library_sections():
    text = DOC.read_text(encoding="utf-8")
    body = text.split(SECTION, 1)[1]
    for anchor in ("#popops", "#popnn", "#poplin-convolutions-and-matrix-products"):
        assert f"]({anchor})" in body
    for heading in ("## popops", "## popnn", "## poplin"):
        assert heading in text  # the anchors point at existing sections
