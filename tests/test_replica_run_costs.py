"""A replicated program's per-tile step costs are made once per machine, not per run.

Replica 0's costs repeated for every replica are the same in every run of a program:
a later run's records share the first run's (read-only) arrays, and every record's
cycles equal the first run's.
"""

from __future__ import annotations

import numpy as np

from ipusim import ir
from poplar_api import FLOAT, Engine, Graph, IPUModel, popops, poputil
from poplar_api import program as prog


def _replicated_graph():
    """A 4-replica graph on the tiny 4-IPU model with a 40-element variable ``x`` spread
    over the tiles: (device, graph, x, an empty sequence)."""
    m = IPUModel("tiny")
    m.numIPUs = 4
    device = m.createDevice()
    g = Graph(device.getTarget(), replication_factor=4)
    popops.addCodelets(g)
    x = g.addVariable(FLOAT, [40], "x")
    poputil.mapTensorLinearly(g, x)
    return device, g, x, prog.Sequence()


def test_a_later_run_shares_the_first_runs_replicated_costs():
    device, g, x, seq = _replicated_graph()
    y = popops.map(g, popops.expr.Mul(popops.expr._1, 3.0), [x], seq)
    seq.add(prog.Copy(y, x))
    g.createHostWrite("x", x)
    g.createHostRead("x", x)
    e = Engine(g, seq)
    e.load(device)
    values = np.arange(160, dtype=np.float32).reshape(4, 40)
    e.writeTensor("x", values)
    e.run(0)
    first = e.getTrace()
    e.run(0)
    second = e.getTrace()
    np.testing.assert_array_equal(e.readTensor("x"), values * 9)
    local = [
        (a, b)
        for a, b in zip(first.records, second.records, strict=True)
        if isinstance(a.step, (ir.Compute, ir.Exchange))
    ]
    assert local and all(a.tile_cycles is b.tile_cycles for a, b in local)
    assert all(not a.tile_cycles.flags.writeable for a, _ in local)
    assert all(a.tile_cycles.size == 4 * 8 for a, _ in local)  # every replica's tiles
    assert [r.last_cycle - r.first_cycle for r in first.records] == [
        r.last_cycle - r.first_cycle for r in second.records
    ]


def test_which_ipus_take_part_in_a_local_step_is_found_once_per_machine():
    # a replicated local step's per-tile array is shared from run to run, and so is
    # the answer to which IPUs have cycles in it (a later run does not look again).
    # Every IPU's group runs: in lockstep with one IPU a replica only replica 0's runs,
    # and every local step spans it without asking
    device, g, x, seq = _replicated_graph()
    popops.mapInPlace(g, popops.expr.Mul(popops.expr._1, 3.0), [x], seq)
    e = Engine(g, seq)
    e.load(device)
    e._machine.replica_lockstep = False
    e.run(0)
    first = e.getTrace()
    kept = dict(e._machine._active_ipus)
    e.run(0)
    second = e.getTrace()
    computes = [r for r in first.records if isinstance(r.step, ir.Compute)]
    assert computes and all(id(r.tile_cycles) in kept for r in computes)
    for r in computes:  # every IPU runs its replica's vertices
        assert kept[id(r.tile_cycles)][1].tolist() == [True] * 4
    assert all(e._machine._active_ipus[k][1] is v[1] for k, v in kept.items())
    assert [(r.first_cycle, r.last_cycle) for r in first.records] == [
        (r.first_cycle, r.last_cycle) for r in second.records
    ]
