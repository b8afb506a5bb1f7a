"""What a ``Copy`` records for liveness: one run for a side whose ids' span lies in a
single variable (liveness asks only which variables own the elements), the ids
otherwise; either way the variables liveness marks are those owning the ids, checked
against a lookup of each id's variable. Also the spans the lowering keeps per id array
against numpy's min and max."""

from __future__ import annotations

import numpy as np
from codelets_common import owners, tiny_graph

from poplar_api import FLOAT, concat
from poplar_api import program as prog
from poplar_api.lowering.context import Lowered, Storage
from poplar_api.lowering.emission import Emission, HostIO
from poplar_api.lowering.pipeline import emit


def test_copy_sides_recorded_as_a_run_only_within_one_variable():
    g = tiny_graph()
    a = g.addVariable(FLOAT, [4, 6], "a")
    b = g.addVariable(FLOAT, [6, 4], "b")
    c = g.addVariable(FLOAT, [2, 4], "c")
    d = g.addVariable(FLOAT, [8, 4], "d")
    for t in (a, b, c, d):
        g.setTileMapping(t, 0)
    one = prog.Copy(a.transpose(), b)  # a transposed view: ids out of order, one variable
    two = prog.Copy(concat([b, c], 0).transpose(), d.transpose().reshape([4, 8]))
    emitted = emit(g._state, [prog.Sequence([one, two])], Lowered(Storage(g._state)), HostIO())
    parts = [p for node in emitted.accesses.touches.values() for _, p in node]
    runs = [p for p in parts if isinstance(p, tuple)]
    ids = [np.asarray(p) for p in parts if not isinstance(p, tuple)]
    # a's transposed view and b (consecutive ids) are runs; the transposed concat of b
    # and c spans two variables and stays ids; d's transposed view lies in d alone
    assert len(runs) == 3 and len(ids) == 1
    assert ids[0].tolist() == concat([b, c], 0).transpose().flat_index().tolist()
    index = emitted.accesses  # the variables each node marks equal those owning its ids
    em_index = Emission(g._state, Lowered(Storage(g._state)), HostIO()).variables
    for (typ, part), tensor in zip(
        [x for node in index.touches.values() for x in node],
        [a.transpose(), b, concat([b, c], 0).transpose(), d.transpose()],
        strict=True,
    ):
        marked = em_index.mark([(typ, part)]).tolist()
        assert marked == owners(g._state, np.asarray(tensor.flat_index())), tensor


def test_span_of_id_arrays_and_ranges_kept_per_array():
    g = tiny_graph()
    em = Emission(g._state, Lowered(Storage(g._state)), HostIO())
    rng = np.random.default_rng(0)
    ids = rng.permutation(np.arange(10, 90)).astype(np.int64)
    assert em.span(ids) == (int(ids.min()), int(ids.max()) + 1)
    assert em.span(ids) is em.span(ids)  # kept
    assert em.span(range(5, 12)) == (5, 12)
