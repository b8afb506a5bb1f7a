"""Segments of a replicated run that every replica's IPU runs alike, run once.

Between the items where an IPU meets others or a shared link, a replica's copy of an
IPU whose tile clocks equal those another replica's copy started the segment from
takes that group's result instead of running the steps (``ipusim.machine_replicas``).
The trace must be the one of every group running every step: the same fingerprint
(every record's cycles and per-tile arrays, the blocks, the final clocks) with the
segments taken and with them off, when the replicas' clocks stay equal and when the
host links make them differ (then the IPUs whose clocks differ run the steps).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ipusim.config import with_overrides
from ipusim.machine import Machine
from ipusim.machine_replicas import ReplicaSteps

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def mlp():
    """Two steps of the data-parallel MLP on 4 replicas (16 tiles per IPU): its engine."""
    sys.path.insert(0, str(ROOT / "examples" / "multi_ipu"))
    import data_parallel_mlp as dp
    import mnist

    images, labels = mnist.load_digits_as_mnist()
    quiet = {"out": lambda line: None, "hidden": 16}
    return dp.run(
        dp.create_device(4, 16), images, labels, replicas=4, batch=4, steps=2, **quiet
    ).engine


def _count(monkeypatch) -> dict[str, int]:
    """Count the segments taken and refused (clocks differ) as the run goes."""
    seen = {"taken": 0, "refused": 0}
    real = ReplicaSteps._take_segment

    def take(self, g, start):
        known = (start, g.ipu % self.replica_ipus) in self._segments
        end = real(self, g, start)
        if known:
            seen["taken" if end != start else "refused"] += 1
        return end

    monkeypatch.setattr(ReplicaSteps, "_take_segment", take)
    return seen


def _timing_run(engine, cfg):
    """The engine's program on a machine of ``cfg``, the predicates answered by the
    engine and no effect applied (the timing alone); every IPU's group runs (no
    lockstep of the replicas: segments are how groups of replicas that may differ
    share their work)."""
    from poplar_api import engine as engine_module

    class TimingOnly(engine_module._EngineDataPlane):
        def apply(self, effect: int) -> None:
            pass

    plane = TimingOnly(engine._lowered, True, engine._host, engine._state)
    machine = Machine(cfg)
    machine.replica_lockstep = False
    return machine.run(engine.ir_program, data_plane=plane)


def test_the_trace_is_the_same_with_segments_taken(mlp, monkeypatch):
    cfg = mlp._machine.config
    seen = _count(monkeypatch)
    taken = _timing_run(mlp, cfg)
    assert seen["taken"] >= 3 * 2  # three other replicas, more than one segment each
    monkeypatch.setattr(ReplicaSteps, "_segment_table", lambda self, shared: None)
    alone = _timing_run(mlp, cfg)
    assert taken.fingerprint() == alone.fingerprint()
    assert taken.total_cycles == alone.total_cycles
    np.testing.assert_array_equal(taken.tile_end_cycles, alone.tile_end_cycles)
    # and as the engine's own runs recorded it (effects applied)
    assert mlp.getTrace().fingerprint() == alone.fingerprint()


def test_replicas_whose_clocks_differ_run_the_steps(mlp, monkeypatch):
    """Three IPUs on one host link and the fourth on its own: the fourth's copies end
    earlier, so its clocks differ from the others' and it runs the segments itself."""
    cfg = with_overrides(mlp._machine.config, {"host.ipus_per_link": 3})
    seen = _count(monkeypatch)
    taken = _timing_run(mlp, cfg)
    assert seen["taken"] and seen["refused"]
    ends = taken.tile_end_cycles.reshape(4, -1)
    assert not np.array_equal(ends[3], ends[0])  # the replicas did not stay alike
    monkeypatch.setattr(ReplicaSteps, "_segment_table", lambda self, shared: None)
    assert _timing_run(mlp, cfg).fingerprint() == taken.fingerprint()


def test_segments_are_off_where_groups_are_not_whole_ipus(mlp, monkeypatch):
    """Granularity ``tile`` (every tile a group) gives the same trace, without segments."""
    cfg = with_overrides(mlp._machine.config, {"sim.granularity": "tile"})
    seen = _count(monkeypatch)
    tiles = _timing_run(mlp, cfg)
    assert seen == {"taken": 0, "refused": 0}
    assert tiles.fingerprint() == _timing_run(mlp, mlp._machine.config).fingerprint()


def test_a_segment_is_dropped_once_every_replica_reached_it(mlp, monkeypatch):
    kept = []
    real = ReplicaSteps._segment_table

    def table(self, shared):
        found = real(self, shared)
        if found is not None:
            kept.append(found)
        return found

    monkeypatch.setattr(ReplicaSteps, "_segment_table", table)
    _timing_run(mlp, mlp._machine.config)
    assert len(kept) == 1 and kept[0] == {}  # every segment kept was dropped again


def test_blocks_of_a_replicated_loop(monkeypatch):
    """A replicated loop in a block (a stream copy in, a compute set, an on-chip copy,
    a stream copy out): every replica's block clocks as without segments."""
    from poplar_api import FLOAT, Engine, Graph, IPUModel, popops
    from poplar_api import program as prog
    from poplar_api.popops import expr

    model = IPUModel("tiny")
    model.numIPUs = 4
    device = model.createDevice()
    g = Graph(device.getTarget(), replication_factor=4)
    x = g.addVariable(FLOAT, [64], "x")
    g.setTileMapping(x, 0)
    y = g.addVariable(FLOAT, [64], "y")
    g.setTileMapping(y, 3)
    body = prog.Sequence(prog.Copy(g.addHostToDeviceFIFO("in", FLOAT, 64), x))
    popops.mapInPlace(g, expr.Mul(expr._1, expr.Const(2.0)), [x], body)
    body.add(prog.Copy(x, y))
    body.add(prog.Copy(y, g.addDeviceToHostFIFO("out", FLOAT, 64)))
    options = {"profiler.blocks.filter": "step"}
    engine = Engine(g, prog.Repeat(3, prog.Block(body, "step")), options)
    engine.load(device)
    data = np.arange(4 * 3 * 64, dtype=np.float32).reshape(4, -1)
    out = np.zeros((4, 3 * 64), np.float32)
    engine.connectStream("in", data)
    engine.connectStream("out", out)
    engine.run(0)
    np.testing.assert_array_equal(out, 2 * data)
    seen = _count(monkeypatch)
    taken = _timing_run(engine, engine._machine.config)
    assert len(taken.blocks) == 3 and seen["taken"]
    monkeypatch.setattr(ReplicaSteps, "_segment_table", lambda self, shared: None)
    assert _timing_run(engine, engine._machine.config).fingerprint() == taken.fingerprint()
    assert engine.getTrace().fingerprint() == taken.fingerprint()
