"""``touched_keys`` of a compute set reads a compacted element space's tiles as runs:
the same keys and counts as from the tile array, and the space stays compact (its
array, as large as the space, is not made again)."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from poplar_api.graph_state import _Space
from poplar_api.lowering.computeset import interleaved_keys, touched_keys
from poplar_api.lowering.variable_marks import (
    DENSE_SLACK,
    DENSE_SPAN,
    key_totals,
    variable_tile_counts,
)


class _Field(SimpleNamespace):
    def touched(self):
        return self.held


def _field(size: int, held, direction: str) -> _Field:
    spec = SimpleNamespace(direction=direction, interleaved=direction == "in")
    return _Field(size=size, type="f", held=held, spec=spec)


def _setup(seed: int):
    """A space of 3,000 elements over 16 tiles in runs (some unmapped), 30 variables,
    and a table of four fields: ids, id runs, in, out and inout."""
    rng = np.random.default_rng(seed)
    nt = 16
    space = _Space(nt)
    sizes = rng.integers(20, 200, 30)
    space.allocate_many(sizes, list(range(100, 130)))
    n = space.size
    tile = np.resize(np.repeat(rng.integers(-1, nt, 60), rng.integers(1, 120, 60)), n)
    space.tile[:n] = tile
    bases = np.asarray(space.var_bases, np.int64)
    var_ids = np.asarray(space.var_ids, np.int64)
    begin = np.sort(rng.choice(n - 50, 12, replace=False))
    runs_held = (begin, begin + rng.integers(1, 50, 12))
    fields = [
        _field(400, rng.integers(0, n, 400), "in"),
        _field(1, runs_held, "inout"),
        _field(90, rng.integers(0, n, 90), "out"),
        _field(0, np.zeros(0, np.int64), "in"),
    ]
    table = SimpleNamespace(groups=[SimpleNamespace(fields=fields)])
    state = SimpleNamespace(space=lambda t: space)
    variables = SimpleNamespace(
        arrays=lambda t: (bases, var_ids),
        variables_of=lambda t, ids: var_ids[np.searchsorted(bases, ids, side="right") - 1],
    )
    return space, tile.copy(), table, state, variables, nt


def _numpy_keys(fields, tile, bases, var_ids, nt, directions):
    ids = []
    for ft in fields:
        if ft.size and ft.spec.direction in directions:
            h = ft.held
            ids.append(np.concatenate([np.arange(b, e) for b, e in zip(*h, strict=True)])
                       if isinstance(h, tuple) else h)  # fmt: skip
    ids = np.concatenate(ids)
    keys = var_ids[np.searchsorted(bases, ids, side="right") - 1] * nt + tile[ids]
    return np.unique(keys, return_counts=True)


@pytest.mark.parametrize("seed", range(4))
def test_touched_keys_of_a_compacted_space_keep_it_compact(seed: int) -> None:
    space, tile, table, state, variables, nt = _setup(seed)
    bases, var_ids = variables.arrays("f")
    fields = table.groups[0].fields
    want = [*_numpy_keys(fields, tile, bases, var_ids, nt, ("in", "inout")),
            *_numpy_keys(fields, tile, bases, var_ids, nt, ("out", "inout"))]  # fmt: skip
    before = touched_keys(table, state, variables, nt)
    space.compact()
    assert space.held_runs() is not None
    after = touched_keys(table, state, variables, nt)
    assert space.held_runs() is not None  # still runs: the array was not made again
    for b, a, w in zip(before, after, want, strict=True):
        assert a.dtype == b.dtype == np.int64
        assert a.tolist() == b.tolist() == w.tolist()


def test_counts_from_runs_equal_counts_from_the_array() -> None:
    """variable_tile_counts given a space's tiles as runs gives the array's keys and
    counts, stretch for stretch (ids in any order, runs of ids across tile runs)."""
    space, tile, table, _, variables, nt = _setup(7)
    bases, var_ids = variables.arrays("f")
    space.compact()
    for ft in table.groups[0].fields:
        got = variable_tile_counts(ft.held, space.held_runs(), bases, var_ids, nt)
        want = variable_tile_counts(ft.held, tile, bases, var_ids, nt)
        for g, w in zip(got, want, strict=True):
            assert g.tolist() == w.tolist()


def test_interleaved_keys_of_a_compacted_space_keep_it_compact() -> None:
    """interleaved_keys (the fields declared interleaved: here the ``in`` ones) reads
    a compacted space's tiles without making the array again: numpy's keys."""
    space, tile, table, state, variables, nt = _setup(11)
    bases, var_ids = variables.arrays("f")
    want = _numpy_keys(table.groups[0].fields, tile, bases, var_ids, nt, ("in",))[0]
    assert interleaved_keys(table, state, variables, nt).tolist() == want.tolist()
    space.compact()
    assert interleaved_keys(table, state, variables, nt).tolist() == want.tolist()
    assert space.held_runs() is not None


@pytest.mark.parametrize("seed", range(6))
def test_key_totals_equal_numpys_unique_and_sums_dense_and_sorted(seed: int) -> None:
    """key_totals gives np.unique's distinct keys and the counts summed per key, both
    when it adds the keys in a bin each of their span and when the span is too wide
    and it sorts them (keys repeat, in any order, with counts of 1 and more)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 5_000))
    for span in (n // 3 + 1, DENSE_SPAN * n + DENSE_SLACK, 10 * (DENSE_SPAN * n + DENSE_SLACK)):
        keys = int(rng.integers(0, 1 << 40)) + rng.integers(0, span, n)
        keys[rng.integers(0, n)] = keys.min() + span - 1  # the span exactly
        counts = rng.integers(1, 1_000, n)
        distinct, inverse = np.unique(keys, return_inverse=True)
        want = np.zeros(distinct.size, np.int64)
        np.add.at(want, inverse, counts)
        got = key_totals(keys, counts)
        assert [g.dtype for g in got] == [np.int64, np.int64]
        assert got[0].tolist() == distinct.tolist()
        assert got[1].tolist() == want.tolist()
    assert [g.size for g in key_totals(np.zeros(0, np.int64), np.zeros(0, np.int64))] == [0, 0]
