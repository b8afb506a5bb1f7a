"""ipusim stops numpy advising huge pages only where the kernel's policy stalls."""

from __future__ import annotations

import numpy as np
import pytest

import ipusim


@pytest.mark.parametrize(
    ("policy", "env", "disabled"),
    [
        ("always defer defer+madvise [madvise] never\n", None, True),
        ("always defer [defer+madvise] madvise never\n", None, True),
        ("always [defer] defer+madvise madvise never\n", None, False),
        ("[always] defer defer+madvise madvise never\n", None, False),
        ("always defer defer+madvise [madvise] never\n", "1", False),
    ],
)
def test_hugepage_advice_follows_the_defrag_policy(
    tmp_path, monkeypatch, policy: str, env: str | None, disabled: bool
) -> None:
    defrag = tmp_path / "defrag"
    defrag.write_text(policy)
    calls: list[bool] = []
    monkeypatch.setattr(ipusim, "THP_DEFRAG", defrag)
    monkeypatch.setattr(ipusim.sys, "platform", "linux")
    monkeypatch.setattr(np._core.multiarray, "_set_madvise_hugepage", calls.append)
    if env is None:
        monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    else:
        monkeypatch.setenv("NUMPY_MADVISE_HUGEPAGE", env)
    ipusim._numpy_hugepages()
    assert calls == ([False] if disabled else [])


def test_no_policy_file_changes_nothing(tmp_path, monkeypatch) -> None:
    calls: list[bool] = []
    monkeypatch.setattr(ipusim, "THP_DEFRAG", tmp_path / "missing")
    monkeypatch.setattr(np._core.multiarray, "_set_madvise_hugepage", calls.append)
    monkeypatch.delenv("NUMPY_MADVISE_HUGEPAGE", raising=False)
    ipusim._numpy_hugepages()
    assert calls == []
