"""The device image's initial values: parts of one element size written in one
scatter (ranges of ids made with ``arange``, id arrays as they are) give what writing
each part's values at its ids one by one gives (``poplar_api.lowering.context``)."""

from __future__ import annotations

import numpy as np
from codelets_common import tiny_graph

from poplar_api import FLOAT, INT
from poplar_api.lowering import context
from poplar_api.lowering.context import RAW_DTYPES, Storage


def test_ranges_and_id_arrays_of_one_size_are_written_as_part_by_part(monkeypatch):
    g = tiny_graph()
    a = g.addVariable(FLOAT, [6], "a")  # consecutive ids: a range
    b = g.addVariable(FLOAT, [4, 3], "b")
    c = g.addVariable(INT, [5], "c")  # same element size, another type
    for t in (a, b, c):
        g.setTileMapping(t, 1)
    g.setInitialValue(a, np.linspace(-1, 1, 6, dtype=np.float32))
    g.setInitialValue(b.transpose(), np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5)
    g.setInitialValue(c, np.array([3, -7, 11, 0, 2**30], np.int32))
    state = g._state
    kinds = {type(ids).__name__ for _, ids, _ in state.initial_parts}
    assert kinds == {"range", "ndarray"}  # both kinds in one group
    together = []
    write = context.Storage._write_together
    monkeypatch.setattr(
        context.Storage, "_write_together", lambda s, *a: together.append(write(s, *a)) or True
    )
    images = Storage(state).full
    assert together == [True]  # one scatter of every part
    want = {size: np.zeros_like(image) for size, image in images.items()}
    for t, ids, values in state.initial_parts:  # each value at its id, in turn
        raw = np.asarray(values, t.numpy).reshape(-1).view(RAW_DTYPES[t.size])
        for i, v in zip(list(ids), raw.tolist(), strict=True):
            want[t.size][0, i] = v
    for size, image in images.items():
        np.testing.assert_array_equal(image, want[size])
