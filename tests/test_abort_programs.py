"""Abort, AbortOnCondition, ErrorProgram, AssumeEqualAcrossReplicas, CrossReplicaCopy.

Runs stop with ``ApplicationRuntimeError`` carrying the message and the partial
trace; the steps each program adds are counted from the machine's step records.
Graphs run on the 8-tile ``tiny`` preset.
"""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import Bump, loaded, mapped, tiny_graph, vertex_on

from ipusim.errors import IpusimError
from poplar_api import BOOL, FLOAT, INT, Device, Engine
from poplar_api import program as prog
from poplar_api.errors import (
    ApplicationRuntimeError,
    EngineError,
    GraphError,
    GraphValidationError,
)


def setup():
    g = tiny_graph()
    c = mapped(g, INT, [], "c", tile=3)
    g.setInitialValue(c, 0)
    g.createHostRead("c", c)
    cs = g.addComputeSet("bump")
    vertex_on(g, cs, Bump, {"c": c}, tile=3, cycles=60)
    flag = mapped(g, BOOL, [], "flag", tile=5)
    g.createHostWrite("flag", flag)
    return g, c, cs, flag


def steps(e: Engine) -> list[tuple[str, str]]:
    return [(r.step.kind, r.step.name) for r in e.getTrace().records]


def test_abort_stops_the_run_with_message_and_partial_trace():
    g, _c, cs, _ = setup()
    body = prog.Sequence(
        prog.Execute(cs), prog.Execute(cs), prog.Abort("model diverged", "stop"), prog.Execute(cs)
    )
    e = loaded(g, body)
    with pytest.raises(ApplicationRuntimeError) as info:
        e.run(0)
    err = info.value
    assert err.message == "model diverged"
    assert "stop" in err.program and "Abort" in err.program
    assert isinstance(err, EngineError) and isinstance(err, IpusimError)
    assert "model diverged" in str(err) and "partial profile is kept" in str(err)
    trace = e.getTrace()
    assert err.trace is trace and trace.complete is False
    assert f"{trace.total_cycles:,} cycles" in str(err)
    assert trace.total_cycles > 2 * 60  # two executions of the compute set were timed
    assert [s for s in steps(e) if s[0] == "compute"] == [("compute", "bump")] * 2
    assert steps(e)[-1] == ("sync", "stop/Abort")
    assert int(e.readTensor("c")) == 2  # the third Execute never ran
    e.getExecutionProfile()  # the partial run is profiled


def test_abort_without_message_and_on_the_cpu_device():
    g, _c, cs, _ = setup()
    e = loaded(g, prog.Sequence(prog.Execute(cs), prog.Abort()), Device.createCPUDevice())
    with pytest.raises(ApplicationRuntimeError, match=r"Abort#\d+ stopped the run \(no message\)"):
        e.run(0)
    assert int(e.readTensor("c")) == 1 and e.getTrace() is None


@pytest.mark.parametrize("taken", [False, True])
def test_abort_on_condition(taken):
    g, _c, cs, flag = setup()
    body = prog.Sequence(
        prog.Execute(cs), prog.AbortOnCondition(flag, "flag was set", "check"), prog.Execute(cs)
    )
    e = loaded(g, body)
    e.writeTensor("flag", np.array(taken))
    if taken:
        with pytest.raises(ApplicationRuntimeError, match=r"'check' stopped the run: flag was set"):
            e.run(0)
        assert int(e.readTensor("c")) == 1
        syncs = [name for kind, name in steps(e) if kind == "sync"]
        assert syncs[-2:] == ["Sync", "check/Abort"]  # the predicate's sync, then the abort
    else:
        e.run(0)
        assert int(e.readTensor("c")) == 2
        assert e.getTrace().complete
        # the predicate's sync, then the sync that ends every run
        assert [name for kind, name in steps(e) if kind == "sync"] == ["Sync", "EndOfRun/Sync"]


def test_abort_on_condition_in_a_loop_reports_where_it_stopped():
    g, c, cs, _ = setup()
    done = mapped(g, BOOL, [], "done", tile=3)
    limit = g.addConstant(INT, [], 3, "limit")
    g.setTileMapping(limit, 3)
    from poplar_api import popops

    check = prog.Sequence()
    reached = popops.gteq(g, c, limit, check, "reached")
    check.add(prog.Copy(reached, done))
    loop = prog.Repeat(10, prog.Sequence(prog.Execute(cs), check, prog.AbortOnCondition(done)))
    e = loaded(g, loop)
    with pytest.raises(ApplicationRuntimeError):
        e.run(0)
    assert int(e.readTensor("c")) == 3


def test_error_program_prints_message_and_tensor_then_stops(capsys):
    g, _c, cs, _ = setup()
    x = mapped(g, FLOAT, [3], "x", tile=2)
    g.setInitialValue(x, [1.5, 2.0, -3.0])
    body = prog.Sequence(prog.Execute(cs), prog.ErrorProgram("bad values", x), prog.Execute(cs))
    e = loaded(g, body)
    with pytest.raises(ApplicationRuntimeError, match=r"ErrorProgram#\d+ stopped the run: bad"):
        e.run(0)
    assert capsys.readouterr().out.splitlines() == ["bad values", "x: {1.5,2,-3}"]
    kinds = [k for k, _ in steps(e)]
    assert kinds[-3:] == ["sync", "exchange", "stream_copy"]  # a PrintTensor's steps
    assert int(e.readTensor("c")) == 1


def test_assume_equal_across_replicas_is_inert():
    g, c, cs, _flag = setup()
    plain = loaded(g, prog.Sequence(prog.Execute(cs)))
    plain.run(0)
    e = loaded(g, prog.Sequence(prog.AssumeEqualAcrossReplicas(c), prog.Execute(cs)))
    e.run(0)
    assert steps(e) == steps(plain)
    assert e.getTrace().total_cycles == plain.getTrace().total_cycles
    assert int(e.readTensor("c")) == 1


def test_cross_replica_copy_on_an_unreplicated_graph_is_refused():
    g, c, _cs, _ = setup()
    d = mapped(g, INT, [], "d", tile=0)
    p = prog.CrossReplicaCopy(c, d, {0: 0})
    assert p.replicaMap == {0: 0}
    with pytest.raises(GraphValidationError, match=r"CrossReplicaCopy.*'c' to 'd'.*not replicated"):
        Engine(g, p)


def test_bad_arguments_name_what_is_wrong():
    g, c, _cs, _ = setup()
    with pytest.raises(GraphError, match=r"Abort: message 3 \(int\) must be a str"):
        prog.Abort(3)
    with pytest.raises(GraphError, match=r"AbortOnCondition: predicate 1 \(int\) must be a Tensor"):
        prog.AbortOnCondition(1)
    with pytest.raises(GraphError, match=r"ErrorProgram: debugTensor None"):
        prog.ErrorProgram("m", None)
    with pytest.raises(GraphError, match=r"replicaMap \[0\] must map source replica"):
        prog.CrossReplicaCopy(c, c, [0])
    with pytest.raises(GraphError, match=r"AssumeEqualAcrossReplicas: expected a Tensor"):
        prog.AssumeEqualAcrossReplicas("c")
    vec = mapped(g, BOOL, [2], "vec", tile=0)
    with pytest.raises(GraphValidationError, match=r"predicate tensor 'vec' has 2 elements"):
        Engine(g, prog.AbortOnCondition(vec))
