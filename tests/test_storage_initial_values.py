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


def test_blocks_overlap_as_a_map_of_their_ids_finds() -> None:
    """``_blocks_overlap`` (the non-empty blocks sorted by start) against marking every
    block's ids: random blocks, some empty, nested, touching or repeated."""
    rng = np.random.default_rng(7)
    outcomes = set()
    for trial in range(400):
        n = int(rng.integers(1, 8))
        begins = rng.integers(0, 60, n)
        lengths = rng.integers(0, 12, n) * (rng.random(n) < 0.85)
        if rng.random() < 0.3:  # blocks laid end to end: touching, never overlapping
            lengths = rng.integers(1, 6, n)
            begins = np.concatenate(([0], np.cumsum(lengths)[:-1]))[rng.permutation(n)]
        marks = np.zeros(200, np.int64)
        for b, k in zip(begins.tolist(), lengths.tolist(), strict=True):
            marks[b : b + k] += 1
        want = bool((marks > 1).any())
        outcomes.add(want)
        assert context._blocks_overlap(begins.tolist(), lengths.tolist()) is want, trial
    assert outcomes == {True, False}


def test_overlapping_blocks_of_initial_values_keep_the_last_value(monkeypatch) -> None:
    """Ranges of ids (a variable's values set twice, another variable's between, an
    empty variable's): not written in one scatter when two share ids; the later value
    wins."""
    g = tiny_graph()
    a = g.addVariable(FLOAT, [8], "a")
    b = g.addVariable(FLOAT, [4], "b")
    z = g.addVariable(FLOAT, [0], "z")
    for t in (a, b):
        g.setTileMapping(t, 2)
    g.setInitialValue(a, np.arange(8, dtype=np.float32))
    g.setInitialValue(b, np.full(4, 9, np.float32))
    g.setInitialValue(z, np.zeros(0, np.float32))
    g.setInitialValue(a, np.arange(8, dtype=np.float32) + 10)  # a's range again
    state = g._state
    assert all(type(ids) is range for _, ids, _ in state.initial_parts)
    together = []
    write = context.Storage._write_together
    monkeypatch.setattr(
        context.Storage, "_write_together", lambda s, *a: together.append(write(s, *a)) or False
    )
    image = Storage(state).full[4][0].view(np.float32)
    assert together == [False]  # an element written twice: part by part
    np.testing.assert_array_equal(image[a._start : a._start + 8], np.arange(8) + 10)
    np.testing.assert_array_equal(image[b._start : b._start + 4], np.full(4, 9, np.float32))
