"""Exchange planning: totals per tile, computed by hand on the tiny machine."""

from __future__ import annotations

import numpy as np

from poplar_api import FLOAT, HALF, Graph, IPUModel
from poplar_api.lowering.exchange import ExchangePlanner


def planner_and_graph():
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    f = graph.addVariable(FLOAT, [10], "f")
    h = graph.addVariable(HALF, [4], "h")
    return graph, ExchangePlanner(graph.getTarget(), graph._state), f, h


def test_each_element_received_once_and_sent_once():
    _graph, planner, f, _ = planner_and_graph()
    ids = f.flat_index()
    # tile 2 needs f[0..3] (owned by tile 0) twice over, plus f[5] (tile 1)
    planner.add(FLOAT, 2, ids[[0, 1, 2, 3, 0, 1, 5]], np.array([0, 0, 0, 0, 0, 0, 1]))
    # tile 3 needs f[0], f[1] (tile 0): a broadcast of elements tile 2 also receives
    planner.add(FLOAT, 3, ids[[0, 1]], np.array([0, 0]))
    ex = planner.build("ex", 0)
    assert ex.tile.tolist() == [0, 1, 2, 3]
    # tile 0 sends f[0..3] once (16 bytes) as one run; tile 1 sends f[5] (4 bytes)
    assert ex.bytes_sent.tolist() == [16, 4, 0, 0]
    assert ex.messages_sent.tolist() == [1, 1, 0, 0]
    # tile 2 receives 5 distinct floats in two runs (f[0..3] from 0, f[5] from 1)
    assert ex.bytes_received.tolist() == [0, 0, 20, 8]
    assert ex.messages_received.tolist() == [0, 0, 2, 1]
    # tiny layout: 2 columns of 4; tile t at (t // 4, t % 4): d(0,2)=2, d(1,2)=1, d(0,3)=3
    assert ex.max_distance.tolist() == [3, 1, 2, 3]


def test_local_references_are_free_and_types_are_sized():
    _graph, planner, _, h = planner_and_graph()
    ids = h.flat_index()
    planner.add(HALF, 4, ids, np.array([4, 4, 6, 6]))  # two local, two from tile 6
    ex = planner.build("ex", 0)
    assert ex.tile.tolist() == [4, 6]
    assert ex.bytes_received.tolist() == [4, 0]  # two halves
    assert ex.bytes_sent.tolist() == [0, 4]


def test_grouped_references():
    _graph, planner, f, _ = planner_and_graph()
    ids = f.flat_index()
    src = np.array([0, 0, 1, 1])
    dst = np.array([5, 6, 5, 1])  # the last is local
    planner.add_grouped(FLOAT, ids[:4], src, dst)
    ex = planner.build("ex", 0)
    got = dict(zip(ex.tile.tolist(), ex.bytes_received.tolist(), strict=True))
    assert got == {0: 0, 1: 0, 5: 8, 6: 4}


def test_nothing_remote_gives_no_exchange():
    _graph, planner, f, _ = planner_and_graph()
    planner.add(FLOAT, 3, f.flat_index()[:2], np.array([3, 3]))
    assert planner.build("ex", 0) is None
