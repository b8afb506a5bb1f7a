"""The two halves of the profile summary (``printGraphSummary``,
``printExecutionSummary``) make up ``printProfileSummary``; ``showPerIpuMemoryUsage``
gives each IPU's bytes, summing to the totals; ``colours`` bolds headings on a
terminal only."""

from __future__ import annotations

import io
import re

import numpy as np
import pytest

from poplar_api import FLOAT, Engine, Graph, IPUModel, printExecutionSummary, printGraphSummary
from poplar_api import program as prog
from poplar_api.profiling import printProfileSummary


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(scope="module")
def profiles():
    model = IPUModel("ipu2")
    model.numIPUs, model.tilesPerIPU = 2, 4
    device = model.createDevice()
    g = Graph(device.getTarget())
    x = g.addVariable(FLOAT, [8], "x")
    g.setTileMapping(x[:4], 0)
    g.setTileMapping(x[4:], 5)
    g.createHostWrite("x", x)
    engine = Engine(g, prog.Sequence(prog.Copy(x[:4], x[4:])))
    engine.load(device)
    engine.writeTensor("x", np.arange(8, dtype=np.float32))
    engine.run(0)
    return engine.getGraphProfile(), engine.getExecutionProfile()


def test_the_two_halves_make_the_whole_summary(profiles):
    gp, ep = profiles
    whole, graph_part, exec_part = io.StringIO(), io.StringIO(), io.StringIO()
    printProfileSummary(whole, gp, ep)
    printGraphSummary(graph_part, gp)
    printExecutionSummary(exec_part, gp, ep)
    assert graph_part.getvalue().startswith("Target:\n")
    assert "Execution:" not in graph_part.getvalue()
    assert exec_part.getvalue().startswith("Execution:\n")
    assert graph_part.getvalue() + exec_part.getvalue() == whole.getvalue()


def test_per_ipu_memory_sums_to_the_total(profiles):
    gp, _ = profiles
    out = io.StringIO()
    printGraphSummary(out, gp, {"showPerIpuMemoryUsage": "true"})
    text = out.getvalue()
    rows = re.findall(r"IPU (\d+): ([\d,]+) B / ([\d,]+) B, tile (\d+)", text)
    assert [int(r[0]) for r in rows] == [0, 1]
    total = int(re.search(r"Excluding gaps: +([\d,]+) B", text).group(1).replace(",", ""))
    assert sum(int(r[1].replace(",", "")) for r in rows) == total
    by_tile = np.asarray(gp["memory"]["byTile"]["totalIncludingGaps"])
    assert [int(r[3]) for r in rows] == [
        int(np.argmax(by_tile[:4])),
        4 + int(np.argmax(by_tile[4:])),
    ]


def test_colours_bold_the_headings_on_a_terminal_only(profiles):
    gp, ep = profiles
    term, plain = FakeTerminal(), io.StringIO()
    printProfileSummary(term, gp, ep, {"colours": "true"})
    printProfileSummary(plain, gp, ep, {"colours": "true"})
    assert "\x1b[1mTarget:\x1b[0m\n" in term.getvalue()
    assert "\x1b[1mExecution:\x1b[0m\n" in term.getvalue()
    assert "\x1b[" not in plain.getvalue()
    assert re.sub(r"\x1b\[[01]m", "", term.getvalue()) == plain.getvalue()
