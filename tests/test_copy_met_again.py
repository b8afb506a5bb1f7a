"""A ``Copy`` program met again while lowering (the same object in two places, as a
training and an evaluation program share a forward pass) is checked and planned once:
each occurrence gets steps of its own, equal to those of a separate ``Copy`` of the
same tensors, and its own effect (``poplar_api.lowering.copies``)."""

from __future__ import annotations

import dataclasses

import numpy as np
from codelets_common import tiny_device, tiny_graph

from ipusim import ir
from poplar_api import FLOAT, Engine, Graph
from poplar_api import program as prog
from poplar_api.lowering import copies
from poplar_api.lowering.context import Lowered, Storage
from poplar_api.lowering.emission import HostIO
from poplar_api.lowering.pipeline import emit


def _copy_graph() -> tuple[Graph, object, object]:
    """``src`` over tiles 0 and 1, ``dst`` (its elements in another order) over tiles 1
    and 2: some elements stay on their tile, the rest are exchanged."""
    g = tiny_graph()
    src = g.addVariable(FLOAT, [4, 6], "src")
    dst = g.addVariable(FLOAT, [6, 4], "dst")
    g.setTileMapping(src[:2], 0)
    g.setTileMapping(src[2:], 1)
    g.setTileMapping(dst[:3], 1)
    g.setTileMapping(dst[3:], 2)
    g.setInitialValue(src, np.arange(24, dtype=np.float32).reshape(4, 6))
    g.createHostRead("dst", dst)
    return g, src, dst.transpose()


def _programs(g: Graph, src, view, shared: bool) -> list:
    """Two entry programs, the first with the copy twice; ``shared``: one ``Copy``
    object in all three places, else a new one in each."""
    one = prog.Copy(src, view)

    def copy() -> prog.Copy:
        return one if shared else prog.Copy(src, view)

    return [prog.Sequence([copy(), copy()]), prog.Sequence([copy()])]


def _fields(step: ir.Step) -> list:
    """A step's class and field values (arrays as lists) but its program id (each
    ``Copy`` object has its own)."""
    values = [type(step).__name__]
    for f in dataclasses.fields(step):
        if f.name == "program_id":
            continue
        v = getattr(step, f.name)
        values.append((f.name, v.tolist() if isinstance(v, np.ndarray) else v))
    return values


def _steps(shared: bool) -> tuple[list[ir.Step], int]:
    g, src, view = _copy_graph()
    lowered = Lowered(Storage(g._state))
    emitted = emit(g._state, _programs(g, src, view, shared), lowered, HostIO())
    assert not emitted.problems
    return ir.iter_steps(emitted.program), len(lowered.effects)


def test_a_copy_met_again_has_the_steps_and_effects_of_separate_copies(monkeypatch):
    planned = []
    plan = copies._planned_copy_steps
    monkeypatch.setattr(copies, "_planned_copy_steps", lambda *a: planned.append(1) or plan(*a))
    steps, effects = _steps(shared=True)
    assert len(planned) == 1  # planned once, for three occurrences
    want, want_effects = _steps(shared=False)
    assert len(planned) == 4
    assert [_fields(s) for s in steps] == [_fields(s) for s in want]
    kinds = [type(s).__name__ for s in steps]
    assert kinds.count("Exchange") == 3 and kinds.count("Compute") == 3  # exchanged and local
    assert effects == want_effects == 3
    # each occurrence's steps are objects of their own (the effects differ)
    assert len({id(s) for s in steps}) == len(steps)
    carrying = [s for s in steps if s.effect is not None]
    assert len({s.effect for s in carrying}) == 3
    # the occurrences of one program share its program id (the entry's sync is 1)
    assert {s.program_id for s in steps if "Copy" in s.name} == {0}


def test_a_copy_met_again_copies_and_costs_as_separate_copies():
    results = []
    for shared in (True, False):
        g, src, view = _copy_graph()
        engine = Engine(g, _programs(g, src, view, shared))
        engine.load(tiny_device())
        engine.run(0)
        got = engine.readTensor("dst")
        np.testing.assert_array_equal(got, np.arange(24, dtype=np.float32).reshape(4, 6).T)
        cycles = [(r.name, r.first_cycle, r.last_cycle) for r in engine.getTrace().records]
        memory = {k: v.tolist() for k, v in engine.memory.by_category.items()}
        results.append((cycles, memory))
    assert results[0] == results[1]
