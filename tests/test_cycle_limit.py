"""The cycle limit (engine option ``debug.maxCycles``) ends an endless device loop.

A ``RepeatWhileTrue`` whose predicate never becomes false runs forever on a real IPU;
on the IPU Model the limit stops it with a :class:`SimulationTimeout` naming the limit,
and the partial trace and execution profile of the cycles run so far are kept.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import Bump

from ipusim.errors import IpusimError, SimulationTimeout
from poplar_api import INT, Engine, Graph, IPUModel
from poplar_api import program as prog
from poplar_api.errors import EngineError

#: Cycles of one loop iteration's vertex (the perf estimate); large enough that the
#: loop crosses the limit after a few hundred iterations whatever else a step costs.
VERTEX_CYCLES = 50


def endless_loop(options: dict[str, str] | None = None) -> tuple[Engine, Graph]:
    """An engine whose program 0 increments a counter while a flag that stays 1 is set."""
    graph = Graph(IPUModel("tiny").createDevice().getTarget())
    graph.addCodelets(Bump)
    count = graph.addVariable(INT, [], "count")
    flag = graph.addVariable(INT, [], "flag")
    for t in (count, flag):
        graph.setTileMapping(t, 0)
    graph.setInitialValue(count, 0)
    graph.setInitialValue(flag, 1)  # never changed: the loop never ends
    graph.createHostRead("count", count)
    cs = graph.addComputeSet("body")
    v = graph.addVertex(cs, "Bump", {"c": count})
    graph.setTileMapping(v, 0)
    graph.setPerfEstimate(v, VERTEX_CYCLES)
    program = prog.RepeatWhileTrue(prog.Sequence(), flag, prog.Execute(cs))
    return Engine(graph, program, options), graph


def test_max_cycles_ends_an_endless_loop_with_the_partial_profile():
    limit = 20_000
    engine, _ = endless_loop({"debug.maxCycles": str(limit)})
    engine.load(IPUModel("tiny").createDevice())
    with pytest.raises(SimulationTimeout) as info:
        engine.run(0)
    message = str(info.value)
    assert f"debug.maxCycles={limit:,}" in message
    assert "RepeatWhileTrue" in message and "getExecutionProfile" in message
    assert isinstance(info.value, IpusimError) and isinstance(info.value, TimeoutError)

    trace = engine.getTrace()
    assert trace is not None and trace is info.value.trace
    assert trace.complete is False
    # the run stopped in the step that took a tile past the limit, not much later
    end = int(trace.tile_end_cycles.max())
    assert limit < end <= limit + 10 * VERTEX_CYCLES
    # every iteration ran its vertex once (the data plane ran along with the clock)
    computes = [r for r in trace.records if r.kind == "compute"]
    assert len(computes) >= limit // (10 * VERTEX_CYCLES)
    assert int(engine.readTensor("count")) == len(computes)

    profile = engine.getExecutionProfile()
    steps = profile["simulation"]["steps"]
    assert len(steps) == len(trace.records)
    assert steps[-1]["cyclesTo"] == max(s["cyclesTo"] for s in steps) > limit


def test_max_cycles_is_validated():
    with pytest.raises(EngineError, match=r"debug.maxCycles.*'-5'.*non-negative integer"):
        endless_loop({"debug.maxCycles": "-5"})
    with pytest.raises(EngineError, match=r"debug.maxCycles.*'lots'.*unlimited"):
        endless_loop({"debug.maxCycles": "lots"})


def test_a_limit_the_run_stays_under_changes_nothing():
    """A finite program under the limit runs exactly as without it."""

    def run(options: dict[str, str]) -> tuple[int, np.ndarray]:
        graph = Graph(IPUModel("tiny").createDevice().getTarget())
        graph.addCodelets(Bump)
        count = graph.addVariable(INT, [], "count")
        graph.setTileMapping(count, 0)
        graph.setInitialValue(count, 0)
        graph.createHostRead("count", count)
        cs = graph.addComputeSet("body")
        v = graph.addVertex(cs, "Bump", {"c": count})
        graph.setTileMapping(v, 0)
        graph.setPerfEstimate(v, VERTEX_CYCLES)
        engine = Engine(graph, prog.Repeat(3, prog.Execute(cs)), options)
        engine.load(IPUModel("tiny").createDevice())
        engine.run(0)
        return int(engine.readTensor("count")), engine.getTrace().tile_end_cycles

    count_free, cycles_free = run({})
    count_limited, cycles_limited = run({"debug.maxCycles": "1000000"})
    assert count_free == count_limited == 3
    np.testing.assert_array_equal(cycles_free, cycles_limited)
