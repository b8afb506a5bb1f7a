"""What a compute set's fields record for liveness (``Emission.field_touched``): the
run of their span where it lies in a single variable, the ids or runs otherwise; the
variables liveness marks from each are those owning the field's ids, checked against a
lookup of each id's variable, on fuzzed views (transposed, sliced, concatenated)."""

from __future__ import annotations

import numpy as np
import pytest
from codelets_common import Scale, SumVertex, owners, tiny_graph, vertex_on

from poplar_api import FLOAT, concat
from poplar_api import program as prog
from poplar_api.lowering.context import Lowered, Storage
from poplar_api.lowering.emission import Emission, HostIO
from poplar_api.lowering.pipeline import emit


def _view(rng: np.random.Generator, tensors: list) -> object:
    """A 1-D view of 6 elements: of one variable (transposed, strided) or of several."""
    pick = rng.integers(0, len(tensors), int(rng.integers(1, 4)))
    parts = [tensors[int(k)].transpose().flatten() for k in pick]
    flat = concat(parts, 0) if len(parts) > 1 else parts[0]
    start = int(rng.integers(0, flat.numElements() - 6 + 1))
    return flat[start : start + 6] if rng.random() < 0.5 else flat[start::1][:6]


@pytest.mark.parametrize("seed", range(6))
def test_field_touches_mark_the_variables_owning_the_fields_ids(seed):
    rng = np.random.default_rng(seed)
    g = tiny_graph()
    g.addCodelets([SumVertex, Scale])
    tensors = [g.addVariable(FLOAT, [3, 4], f"v{k}") for k in range(5)]
    for t in tensors:
        g.setTileMapping(t, 0)
    outs = g.addVariable(FLOAT, [8], "outs")
    g.setTileMapping(outs, 0)
    cs = g.addComputeSet("cs")
    views = []
    pool = tensors[:1] if seed % 2 else tensors  # odd seeds: every view in one variable
    for k in range(8):
        view = _view(rng, pool)
        views.append(view)
        vertex_on(g, cs, SumVertex, {"in": view, "out": outs[k]}, 0, 10)
    emitted = emit(g._state, [prog.Execute(cs)], Lowered(Storage(g._state)), HostIO())
    parts = [x for node in emitted.accesses.touches.values() for x in node]
    index = Emission(g._state, Lowered(Storage(g._state)), HostIO()).variables
    field_ids = {
        "in": np.concatenate([np.asarray(v.flat_index()) for v in views]),
        "out": np.asarray(outs.flat_index()),
    }
    assert len(parts) == 2
    for (typ, part), ids in zip(parts, field_ids.values(), strict=True):
        assert index.mark([(typ, part)]).tolist() == owners(g._state, ids)
    if seed % 2:  # the views of one variable: recorded as its span
        assert isinstance(parts[0][1], tuple) and parts[0][1][0].size == 1


def test_a_field_within_one_variable_is_recorded_as_its_span():
    g = tiny_graph()
    a = g.addVariable(FLOAT, [4, 6], "a")
    b = g.addVariable(FLOAT, [2, 6], "b")
    for t in (a, b):
        g.setTileMapping(t, 0)
    em = Emission(g._state, Lowered(Storage(g._state)), HostIO())
    inside = np.asarray(a.transpose().flat_index()).astype(np.int32)
    across = np.asarray(concat([a, b], 0).transpose().flat_index()).astype(np.int32)
    begin, end = em.field_touched(FLOAT, inside)
    assert (begin.tolist(), end.tolist()) == ([int(inside.min())], [int(inside.max()) + 1])
    assert em.field_touched(FLOAT, across) is across
    runs = (np.array([3], np.int64), np.array([9], np.int64))
    assert em.field_touched(FLOAT, runs) is runs


@pytest.mark.parametrize("seed", range(6))
def test_in_one_variable_equals_a_mark_of_one_variable(seed):
    """``VariableIndex.in_one_variable`` against :meth:`VariableIndex.mark` of the run:
    fuzzed spaces with empty variables among them, runs inside one variable, across
    several, from or to a variable's edge."""
    from tests.test_review_lowering_kernels import _random_space

    rng, sizes, index, t, _, space = _random_space(seed, 80, 6, 2)
    bases = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    edges = [*bases.tolist(), space]
    for _ in range(300):
        lo = int(rng.choice(edges[:-1])) if rng.random() < 0.3 else int(rng.integers(0, space))
        hi = int(rng.integers(lo + 1, min(space, lo + 12) + 1))
        if rng.random() < 0.3:  # to the next variable's base exactly
            nxt = [e for e in edges if e > lo]
            hi = nxt[0] if nxt else hi
        block = (np.array([lo], np.int64), np.array([hi], np.int64))
        want = index.mark([(t, block)]).size == 1
        assert index.in_one_variable(t, lo, hi) == want, (lo, hi)
