"""The README's Python examples run and print what it says."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def total(lines: list[str]) -> str:
    """The total cycles of a summary's "Total cycles:" line."""
    line = next(x for x in lines if x.startswith("Total cycles:"))
    return line.split()[2].replace(",", "")


def test_readme_examples_run(tmp_path):
    blocks = python_blocks()
    assert len(blocks) == 2
    first = subprocess.run(
        [sys.executable, "-c", blocks[0]], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert first.returncode == 0, first.stderr
    # 1 + 2 + 3 + 4, as the comment in the README says
    assert first.stdout.splitlines()[0] == "y: {10}"
    # one worker vertex of 20 thread cycles on one tile: 6 x 20 tile cycles, shown as a
    # tile average over the 1,472 tiles of an ipu2 (the SDK 2.x/3.x layout)
    lines = [" ".join(line.split()) for line in first.stdout.splitlines()]
    average = 6 * 20 / 1472
    assert (
        f"Tile average compute cycles (including idle threads): {average:,.1f} "
        f"({average / int(total(lines)):.1%} of total)"
    ) in lines
    assert "SumVertex (1 instances): 20" in lines
    second = subprocess.run(
        [sys.executable, "-c", blocks[1]], capture_output=True, text=True, cwd=tmp_path, timeout=300
    )
    assert second.returncode == 0, second.stderr
    totals = second.stdout.split(" ", 1)[1]
    # tile 0: contexts [10, 20] -> 120; tile 1: [30] -> 180
    assert "'compute': 300" in totals and "'compute_active': 60" in totals
