"""Large copies planned and run a row at a time (``lowering.copies._copy_rows``).

A copy between two tensors of one leading dimension, whose rows go to tiles no other
row goes to, is planned row by row when it is large: a convolution's inputs broadcast
before a serial loop (one copy of the inputs per output-channel part) then never have
an array of every element's id made of their broadcast side. The steps, cycles and
values must be those of the copy planned whole; the size from which rows are taken is
lowered here so that small programs take them, and each program is run both ways."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, HALF, Engine, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.lowering import copies
from tests.test_conv_serial_broadcast import run_half

RNG = np.random.default_rng(5301)


def _broadcast_copy(rows_share_tiles: bool):
    """A ``[4, 6, 10]`` variable on tiles 0-2 (by its second dimension) copied into a
    ``[3, 4, 6, 10]`` one from the source broadcast 3 times: copy ``p`` on tiles
    ``2p .. 2p + 1`` (or, ``rows_share_tiles``, every copy on tiles 0-3), some of
    each on its source's tile. Returns the engine run and the source view."""
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    x = graph.addVariable(FLOAT, [4, 6, 10], "x")
    for j in range(6):
        graph.setTileMapping(x[:, j], j % 3)
    y = graph.addVariable(FLOAT, [3, 4, 6, 10], "y")
    for p in range(3):
        for i in range(4):
            tile = i if rows_share_tiles else 2 * p + i % 2
            graph.setTileMapping(y[p, i], tile)
    src = x.expand([0]).broadcast(3, 0)
    seq = prog.Sequence([prog.Copy(src, y, debugContext="bcast")])
    graph.createHostWrite("x", x)
    graph.createHostRead("y", y)
    engine = Engine(graph, seq)
    engine.load(device)
    values = RNG.uniform(-1, 1, (4, 6, 10)).astype(np.float32)
    engine.writeTensor("x", values)
    engine.run(0)
    return engine, src, values


def _records(engine) -> list[tuple]:
    return [(r.name, r.first_cycle, r.last_cycle) for r in engine.getTrace().records]


@pytest.mark.parametrize("share", [False, True])
def test_broadcast_copy_by_rows_matches_whole(share, monkeypatch) -> None:
    whole, whole_src, values = _broadcast_copy(share)
    np.testing.assert_array_equal(whole.readTensor("y"), np.broadcast_to(values, (3, 4, 6, 10)))
    assert whole_src._flat is not None  # (planned whole: the source's ids were made)
    monkeypatch.setattr(copies, "ROW_COPY_ELEMENTS", 1)
    rows, rows_src, values2 = _broadcast_copy(share)
    np.testing.assert_array_equal(rows.readTensor("y"), np.broadcast_to(values2, (3, 4, 6, 10)))
    assert _records(rows) == _records(whole)
    assert rows.getTrace().fingerprint() == whole.getTrace().fingerprint()
    names = [r.name for r in rows.getTrace().records]
    assert "bcast/OnTileCopy" in names and "bcast/Exchange" in names
    # rows on tiles of their own: the broadcast side is held as its one row only;
    # rows sharing tiles: planned whole, as before
    assert (rows_src._flat is None) is not share


@pytest.mark.parametrize(("m", "k", "n"), [(136, 128, 200)])
def test_serial_broadcast_by_rows_matches_whole(m, k, n, monkeypatch) -> None:
    """A HALF matMul whose plan broadcasts its inputs before a 3-pass loop over 2
    output-channel parts (``test_conv_serial_broadcast``): the same trace and values
    with the broadcast copy planned by rows."""
    plan = poplin.getPlan(Graph(IPUModel("tiny").createDevice().getTarget()), (1, m, k, n),
                          HALF, HALF)  # fmt: skip
    assert plan.broadcast and plan.parts[-2] > 1
    a = RNG.uniform(-1, 1, (m, k)).astype(np.float16)
    b = RNG.uniform(-1, 1, (k, n)).astype(np.float16)
    c1, e1 = run_half(a, b)
    monkeypatch.setattr(copies, "ROW_COPY_ELEMENTS", 1)
    by_rows = []
    plan_rows = copies._copy_rows

    def spy(em, s, d):
        rows = plan_rows(em, s, d)
        by_rows.append(rows is not None)
        return rows

    monkeypatch.setattr(copies, "_copy_rows", spy)
    c2, e2 = run_half(a, b)
    assert any(by_rows)  # the broadcast copy was planned by rows
    np.testing.assert_array_equal(c1, c2)
    assert _records(e1) == _records(e2)
    assert e1.getTrace().fingerprint() == e2.getTrace().fingerprint()
