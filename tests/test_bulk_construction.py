"""Library calls that build or compile large graphs run with Python's cyclic garbage
collector paused and resume it as it was: enabled again after the call (also after an
exception), left alone when the caller had paused it. An engine's run has the collector
walk only the objects the run makes, and leaves every object collectable after it."""

from __future__ import annotations

import gc
import weakref

import numba
import numpy as np
import pytest

from poplar_api import INT, Engine, Graph, IPUModel, poplin, popnn
from poplar_api import program as prog
from poplar_api.executable import compile_programs
from poplar_api.graph_bulk import bulk_construction, collect_new_objects_only


@bulk_construction
def _report() -> bool:
    return gc.isenabled()


@bulk_construction
def _fail() -> None:
    raise ValueError("inside")


@pytest.fixture
def collector():
    """The collector's state is restored whatever a test does."""
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_paused_during_the_call_and_resumed_after(collector):
    gc.enable()
    assert _report() is False
    assert gc.isenabled()


def test_resumed_after_an_exception(collector):
    gc.enable()
    with pytest.raises(ValueError, match="inside"):
        _fail()
    assert gc.isenabled()


def test_a_caller_that_paused_it_keeps_it_paused(collector):
    gc.disable()
    assert _report() is False
    assert not gc.isenabled()


@pytest.mark.parametrize(
    "fn",
    [
        poplin.convolution,
        poplin.calculateWeightDeltas,
        poplin.matMul,
        popnn.pooling.pool,
        popnn.nonLinearityInputGradient,
        compile_programs,
    ],
)
def test_the_large_library_calls_pause_it(fn):
    assert getattr(fn, "__wrapped__", None) is not None, fn.__name__
    assert fn.__wrapped__.__name__ == fn.__name__


class _Cycle:
    """An object in a reference cycle (freed by the cyclic collector only)."""

    def __init__(self) -> None:
        self.me = self


def _fresh_kernel():
    """A function Numba has not compiled (a new one each call, not cached on disk)."""

    def add_one(x):
        return x + 1

    return numba.njit(add_one)


def test_a_numba_compile_in_a_paused_call_frees_the_young_cyclic_garbage(collector):
    # the compiler's own cyclic garbage goes with the cycles made before the compile
    gc.enable()
    refs = {}

    @bulk_construction
    def build() -> tuple[bool, bool]:
        cycle = _Cycle()
        refs["cycle"] = weakref.ref(cycle)
        del cycle
        kept = refs["cycle"]() is not None  # paused: nothing collects it yet
        assert _fresh_kernel()(np.int64(2)) == 3  # compiled here
        return kept, refs["cycle"]() is None

    assert build() == (True, True)
    assert gc.isenabled()


def test_a_numba_compile_leaves_a_collector_the_caller_paused_alone(collector):
    gc.disable()
    cycle = _Cycle()
    ref = weakref.ref(cycle)
    del cycle

    @bulk_construction
    def build() -> None:
        assert _fresh_kernel()(np.int64(2)) == 3

    build()
    assert _fresh_kernel()(np.int64(4)) == 5
    assert ref() is not None
    assert not gc.isenabled()


def test_a_block_freezes_the_objects_before_it_and_unfreezes_them_after(collector):
    gc.enable()
    assert gc.get_freeze_count() == 0
    garbage = _Cycle()
    dead = weakref.ref(garbage)
    del garbage
    with collect_new_objects_only():
        assert gc.get_freeze_count() > 0
        gc.collect()  # walks the block's own objects: the older cycle stays
        assert dead() is not None
    assert gc.get_freeze_count() == 0
    gc.collect()
    assert dead() is None  # collectable again after the block


def test_a_block_leaves_frozen_objects_and_a_paused_collector_alone(collector):
    gc.disable()
    with collect_new_objects_only():
        assert gc.get_freeze_count() == 0
    gc.enable()
    gc.freeze()
    try:
        count = gc.get_freeze_count()
        with collect_new_objects_only():
            pass
        assert gc.get_freeze_count() == count  # the caller's freeze is kept
    finally:
        gc.unfreeze()


def test_an_engine_run_freezes_older_objects_only_while_it_runs(collector):
    gc.enable()
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    v = graph.addVariable(INT, [3], "v")
    graph.setTileMapping(v, 1)
    graph.setInitialValue(v, np.array([4, 5, 6], np.int32))
    engine = Engine(graph, prog.Copy(v, graph.addDeviceToHostFIFO("out", INT, 3)))
    engine.load(device)
    frozen = []
    engine.connectStreamToCallback(
        "out", lambda a: frozen.append((a.tolist(), gc.get_freeze_count()))
    )
    engine.run(0)
    assert frozen[0][0] == [4, 5, 6] and frozen[0][1] > 0
    assert gc.get_freeze_count() == 0


def test_garbage_made_between_an_engines_runs_is_collected(collector):
    """Only an engine's first run freezes the objects before it: a freeze at every run
    would move the cycles made between runs out of the young generations each time
    and hand them back to the oldest, where a loop of short runs never collects them
    (all 300 stayed alive)."""
    gc.enable()
    device = IPUModel("tiny").createDevice()
    graph = Graph(device.getTarget())
    v = graph.addVariable(INT, [3], "v")
    graph.setTileMapping(v, 1)
    engine = Engine(graph, prog.Copy(v, graph.addDeviceToHostFIFO("out", INT, 3)))
    engine.load(device)
    engine.connectStreamToCallback("out", lambda a: None)
    frozen = []
    original = gc.freeze
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(gc, "freeze", lambda: frozen.append(1) or original())
        refs = []
        for _ in range(300):
            garbage = _Cycle()
            refs.append(weakref.ref(garbage))
            del garbage
            engine.run(0)
    assert len(frozen) == 1  # the first run's
    assert sum(r() is not None for r in refs) < 100  # collected as without any freeze
