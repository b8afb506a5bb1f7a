"""The README's Python examples run and print what it says."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_readme_examples_run(tmp_path):
    blocks = python_blocks()
    assert len(blocks) == 2
    first = subprocess.run(
        [sys.executable, "-c", blocks[0]], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert first.returncode == 0, first.stderr
    # 1 + 2 + 3 + 4, as the comment in the README says
    assert first.stdout.splitlines()[0] == "y: {10}"
    # one worker vertex of 20 thread cycles on one tile: 6 x 20 tile cycles
    assert "Total compute cycles (including idle threads): 120" in first.stdout
    second = subprocess.run(
        [sys.executable, "-c", blocks[1]], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert second.returncode == 0, second.stderr
    totals = second.stdout.split(" ", 1)[1]
    # tile 0: contexts [10, 20] -> 120; tile 1: [30] -> 180
    assert "'compute': 300" in totals and "'compute_active': 60" in totals
