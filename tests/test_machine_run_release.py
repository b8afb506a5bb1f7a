"""A finished machine run frees its state by reference counting.

A run's SimPy processes are generators of the run's own methods, so the run, its
environment and its processes refer to one another: state left for the cyclic collector
outlives the run (into the next one while every engine run froze the objects alive before
it, ``collect_new_objects_only``). These checks hold the collector
off and look at what a finished run still keeps alive.
"""

from __future__ import annotations

import gc
import weakref

import numpy as np
import pytest

from ipusim import ir
from ipusim import machine as machine_module
from ipusim.errors import SimulationTimeout
from ipusim.machine import Machine
from tests.conftest import round_tiny_superstep


class _Held:
    """An object a run holds until it is released."""


@pytest.fixture
def watched(monkeypatch):
    """Weak references to each run's clock array and to an object the run holds,
    taken as the run is released; the collector is off while the test
    runs. (SimPy's environment is a cycle of its own, through its bound event
    classes, and holds nothing of a run once the run has ended.)"""
    refs: list[weakref.ref] = []
    release = machine_module._Run.release

    def watch(run):
        refs.append(weakref.ref(run.clock))
        held = _Held()  # anything else the run holds to the end
        run.held = held
        refs.append(weakref.ref(held))
        release(run)

    monkeypatch.setattr(machine_module._Run, "release", watch)
    was = gc.isenabled()
    gc.disable()
    yield refs
    if was:
        gc.enable()


def test_a_finished_run_keeps_nothing_but_its_trace(watched, make_config):
    cfg = make_config()
    trace = Machine(cfg).run(round_tiny_superstep())
    assert trace.complete and trace.records
    assert len(watched) == 2
    assert [r() is None for r in watched] == [True, True]
    # the trace holds its own copy of the clocks
    assert isinstance(trace.tile_end_cycles, np.ndarray)
    assert trace.tile_end_cycles.max() > 0


def test_a_run_stopped_by_its_cycle_limit_is_released_too(watched, make_config):
    stopped = None
    try:
        Machine(make_config()).run(round_tiny_superstep(), max_cycles=1)
    except SimulationTimeout as exc:  # the partial trace comes with the error
        stopped = exc.trace
    assert stopped is not None and not stopped.complete
    # what the run held is freed; the error's traceback (frames and the error they
    # hold: a cycle) may keep locals of the run's frames until the collector runs
    assert watched[1]() is None


def test_records_filled_as_they_ran_share_their_final_arrays_from_run_to_run(make_config):
    """A sync's per-tile cycles, filled in as it runs, are shared read-only by the next
    runs that end with the same cycles; the array a record gave up is filled again by a
    later record (zeroed first): every record equals a fresh machine's."""
    cfg = make_config()
    node = round_tiny_superstep()
    compute = ir.Compute(name="cs", vertex_tile=[0, 5], vertex_cycles=[10, 90],
                         vertex_multi=[False, True])  # fmt: skip
    other = ir.Sequence([compute, ir.Sync(name="sync", sync_kind="internal")])
    machine = Machine(cfg)
    runs = [machine.run(node) for _ in range(3)]
    want = Machine(cfg).run(node)
    syncs = [i for i, r in enumerate(want.records) if r.kind == "sync"]
    assert syncs
    for trace in runs:
        for rec, ref in zip(trace.records, want.records, strict=True):
            np.testing.assert_array_equal(rec.tile_cycles, ref.tile_cycles)
    for i in syncs:
        first = runs[0].records[i].tile_cycles
        assert all(t.records[i].tile_cycles is first for t in runs[1:])
        assert not first.flags.writeable
    spares = [id(a) for a in machine._spare_cycles]
    assert len(spares) == len(syncs)  # given up by the second run, by the third again
    got = machine.run(other)
    fresh = Machine(cfg).run(other)
    assert fresh.total_cycles != want.total_cycles
    for rec, ref in zip(got.records, fresh.records, strict=True):
        np.testing.assert_array_equal(rec.tile_cycles, ref.tile_cycles)
    (sync,) = [r for r in got.records if r.kind == "sync"]
    assert id(sync.tile_cycles) in spares  # an array given up before, filled again
