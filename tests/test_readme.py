"""The README's Python examples run and print what it says.

Each block runs from a file in this process (its output captured): the values are
checked here against numbers worked out independently; test_docs_examples runs the same
blocks as a reader does, each in a Python process of its own, and compares the output
with the text the README shows.
"""

from __future__ import annotations

import contextlib
import io
import pathlib
import re
import runpy

README = pathlib.Path(__file__).resolve().parents[1] / "README.md"


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def total(lines: list[str]) -> str:
    """The total cycles of a summary's "Total cycles:" line."""
    line = next(x for x in lines if x.startswith("Total cycles:"))
    return line.split()[2].replace(",", "")


def run_block(block: str, path: pathlib.Path) -> str:
    """What ``block``, written to ``path`` and run as a script, prints."""
    path.write_text(block)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        runpy.run_path(str(path), run_name=f"readme_{path.stem}")
    return out.getvalue()


def test_readme_examples_run(tmp_path):
    blocks = python_blocks()
    assert len(blocks) == 2
    first = run_block(blocks[0], tmp_path / "first.py")
    # 1 + 2 + 3 + 4, as the comment in the README says
    assert first.splitlines()[0] == "y: {10}"
    # one worker vertex of 20 thread cycles on one tile: 6 x 20 tile cycles, shown as a
    # tile average over the 1,472 tiles of an ipu2 (the SDK 2.x/3.x layout)
    lines = [" ".join(line.split()) for line in first.splitlines()]
    average = 6 * 20 / 1472
    assert (
        f"Tile average compute cycles (including idle threads): {average:,.1f} "
        f"({average / int(total(lines)):.1%} of total)"
    ) in lines
    assert "SumVertex (1 instances): 20" in lines
    second = run_block(blocks[1], tmp_path / "second.py")
    totals = second.split(" ", 1)[1]
    # tile 0: contexts [10, 20] -> 120; tile 1: [30] -> 180
    assert "'compute': 300" in totals and "'compute_active': 60" in totals
