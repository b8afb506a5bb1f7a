"""A long compile names its steps on the progress line and counts the programs it lowers
with a tqdm meter; nested stages are shown after the stage they are part of."""

from __future__ import annotations

import contextlib
import time

import numpy as np
import pytest

from ipusim import progress
from ipusim.progress import activity
from poplar_api import FLOAT, INT, Engine, Graph, IPUModel, popops
from poplar_api import program as prog
from poplar_api.lowering import emit as emit_module


@pytest.fixture
def fast(monkeypatch):
    """Lines after 0.05 s, refreshed every 0.02 s."""
    monkeypatch.setattr(progress, "ACTIVITY_DELAY", 0.05)
    monkeypatch.setattr(progress, "REFRESH_SECONDS", 0.02)


def _program(graph: Graph) -> tuple[prog.Program, int]:
    """A program with every kind of nesting the emitter walks (Sequence, Repeat, If,
    Switch, RepeatWhileTrue, Block, a function called twice, a WriteUndef), and the
    number of program nodes in it counted by hand (each call's function once)."""
    v = graph.addVariable(FLOAT, [8], "v")
    graph.setTileMapping(v, 0)
    flag = graph.addVariable(INT, [], "flag")
    graph.setTileMapping(flag, 1)

    def double(name: str) -> prog.Sequence:  # a Sequence holding one Execute: 2 nodes
        seq = prog.Sequence()
        popops.mulInPlace(graph, v, 2.0, seq, name)
        return seq

    fn = graph.addFunction(double("fn"))  # its program: 2 nodes, lowered once
    top = prog.Sequence(
        prog.Repeat(3, double("rep")),  # 1 + 2
        prog.If(flag, double("then"), double("else")),  # 1 + 2 + 2
        prog.Switch(flag, [(0, double("c0")), (1, prog.Call(fn))], double("dflt")),  # 1+2+1+2
        prog.RepeatWhileTrue(prog.Sequence(), flag, double("body")),  # 1 + 1 + 2
        prog.Block(prog.Call(fn), "blk"),  # 1 + 1
        prog.WriteUndef(v),  # 1
        prog.Call(fn),  # 1
    )  # the Sequence itself: 1; the function's body: 2
    return top, 1 + 3 + 5 + 6 + 4 + 2 + 1 + 1 + 2


def test_count_programs_is_the_emitters_count_of_lowered_programs(monkeypatch):
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    top, by_hand = _program(graph)
    assert emit_module.count_programs([top], graph._state.functions) == by_hand
    lowered = []
    original = emit_module.Emitter.lower

    def lower(self, p):  # every program the emitter lowers, as it lowers it
        lowered.append(p)
        return original(self, p)

    monkeypatch.setattr(emit_module.Emitter, "lower", lower)
    Engine(graph, [top])
    assert len(lowered) == by_hand


def test_the_compile_names_its_steps_and_its_meter_reaches_the_total(monkeypatch):
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    top, by_hand = _program(graph)
    seen = []
    original = progress.activity

    @contextlib.contextmanager
    def recording(label, status=None, total=None, unit="step"):
        with original(label, status, total, unit) as step:
            done = [0]

            def counted(n: int = 1) -> None:
                done[0] += n
                step(n)

            yield counted
            seen.append((label, total, done[0]))

    monkeypatch.setattr(progress, "activity", recording)
    Engine(graph, [top])
    labels = [s[0] for s in seen]
    assert labels == [
        "validate",
        "emit",
        "liveness",
        "memory placement",
        "Graph compilation",
    ]
    assert seen[1] == ("emit", by_hand, by_hand)


def test_a_counted_stage_shows_a_tqdm_meter_after_its_outer_stage(fast, monkeypatch, capsys):
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    with activity("TrainingSession.prepareDevice"):
        with activity("Graph compilation"), activity("emit", total=40, unit="programs") as step:
            step(10)
            time.sleep(0.15)
            line = progress._ACTIVITY.get()._text()
        time.sleep(0.1)
        after = progress._ACTIVITY.get()._text()
    assert line.startswith(
        "TrainingSession.prepareDevice: Graph compilation: emit 10/40 programs |"
    )
    assert "|" in line.split("programs ", 1)[1]  # the bar
    assert "programs" not in after and "emit" not in after  # the stage and its meter end
    err = capsys.readouterr().err
    assert "emit 10/40 programs" in err  # shown while it ran


def test_a_count_past_the_total_widens_it_and_an_unshown_count_does_nothing(monkeypatch):
    monkeypatch.setenv(progress.PROGRESS_ENV, "0")
    with activity("work", total=3) as step:
        step(5)  # nothing shown: the count is a no-op
    count = progress._Count(3, "step")
    count(5)
    assert count.meter().startswith("5/5 step |")


def test_prepare_device_names_lowering_and_the_backward_pass(monkeypatch):
    pytest.importorskip("onnx")
    import popart_api as popart

    builder = popart.Builder()
    x = builder.addInputTensor(popart.TensorInfo("FLOAT", [2, 4]), "x")
    w = builder.addInitializedInputTensor(np.ones((4, 3), np.float32), "w")
    y = builder.aiOnnx.matmul([x, w])
    loss = builder.aiGraphcore.l1loss([y], 0.1)
    seen = []
    original = progress.activity

    @contextlib.contextmanager
    def recording(label, status=None, total=None, unit="step"):
        seen.append((label, total))
        with original(label, status, total, unit) as step:
            yield step

    monkeypatch.setattr(progress, "activity", recording)
    session = popart.TrainingSession(
        fnModel=builder.getModelProto(),
        dataFlow=popart.DataFlow(1, {loss: popart.AnchorReturnType("All")}),
        loss=loss,
        optimizer=popart.ConstSGD(0.01),
        deviceInfo=popart.DeviceManager().createIpuModelDevice({"numIPUs": 1, "tilesPerIPU": 4}),
    )
    session.prepareDevice()
    labels = [s[0] for s in seen]
    assert labels[:3] == [
        "TrainingSession.prepareDevice",
        "lower nodes",
        "backward pass and optimizer",
    ]
    assert seen[1] == ("lower nodes", 2)  # the model's two nodes
    assert labels[-1] == "Engine load" and "Graph compilation" in labels
