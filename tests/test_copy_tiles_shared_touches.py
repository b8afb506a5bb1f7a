"""A copy's destination tiles, whether each source element is on its destination's
tile, and its id arrays' spans in one compiled pass (``copies.copy_tiles``) against
numpy's gathers, min and max, and the spans a copy's
lowering keeps; the tile of each run of a field held as reference runs
(``FieldTable.run_tiles``) against a search per run; and a copy lowered in two
programs: one touch record, marked once by liveness, with the live ranges of marking
every node."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from codelets_common import tiny_graph

from poplar_api import FLOAT
from poplar_api import program as prog
from poplar_api.lowering import liveness as liveness_mod
from poplar_api.lowering.context import Lowered, Storage
from poplar_api.lowering.copies import copy_tiles
from poplar_api.lowering.emission import HostIO
from poplar_api.lowering.field_tables import FieldTable
from poplar_api.lowering.pipeline import emit


def test_copy_tiles_match_numpy_for_arrays_and_ranges():
    rng = np.random.default_rng(7)
    # int16, the tile arrays of every device up to 32,767 tiles (graph_state.tile_dtype);
    # int32 would compile the pass once more in every process without a disk cache
    tile = rng.integers(0, 1472, 5000).astype(np.int16)
    n = 700
    sides = [
        rng.integers(0, 5000, n).astype(np.int64),  # a gather, ids repeating
        range(100, 100 + n),  # consecutive ids
        range(4999, 4999 - 3 * n, -3),  # a reversed view with a stride
    ]
    for s_ids in sides:
        for d_ids in sides:
            found = copy_tiles(tile, s_ids, d_ids)
            want_s = tile[np.asarray(s_ids)].astype(np.int32)
            want_d = tile[np.asarray(d_ids)].astype(np.int32)
            assert found.d_tile.dtype == np.int32
            np.testing.assert_array_equal(found.d_tile, want_d)
            np.testing.assert_array_equal(found.local, want_s == want_d)
            assert found.count == int((want_s == want_d).sum())
            for ids, span in ((s_ids, found.s_span), (d_ids, found.d_span)):
                if isinstance(ids, range):
                    assert span is None  # (a range's span needs no pass)
                else:
                    assert span == (int(ids.min()), int(ids.max()) + 1)


def test_copy_tiles_refuses_sides_of_different_lengths():
    with pytest.raises(ValueError, match="3 source ids against 2 destination ids"):
        copy_tiles(np.zeros(10, np.int16), range(3), range(2))


def test_run_tiles_match_a_search_per_run():
    rng = np.random.default_rng(3)
    for _ in range(20):
        vertices = int(rng.integers(1, 40))
        per_vertex = rng.integers(0, 5, vertices)  # runs per vertex, some vertices empty
        lengths = rng.integers(1, 9, int(per_vertex.sum()))  # runs of 1 to 8 ids
        refs = np.zeros(vertices, np.int64)  # each vertex's references: its runs'
        np.add.at(refs, np.repeat(np.arange(vertices), per_vertex), lengths)
        bounds = np.concatenate(([0], np.cumsum(refs)))
        begin = rng.integers(0, 10_000, lengths.size)
        ft = FieldTable(None, None, bounds, None, np.arange(vertices), None,
                        (begin, begin + lengths))  # fmt: skip
        vtiles = rng.integers(0, 1472, vertices).astype(np.int16)
        at = np.cumsum(lengths) - lengths  # the reference each run starts at
        want = vtiles[np.searchsorted(bounds, at, side="right") - 1]
        got = ft.run_tiles(vtiles)
        assert got.dtype == vtiles.dtype
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, np.repeat(vtiles, per_vertex))


def _copy_in_two_programs():
    g = tiny_graph()
    a = g.addVariable(FLOAT, [6, 8], "a")
    pad = g.addVariable(FLOAT, [6, 8], "pad")
    between = g.addVariable(FLOAT, [4], "between")  # in the span, never read
    b = g.addVariable(FLOAT, [8, 12], "b")
    for t in (a, pad, between, b):
        g.setTileMapping(t, 0)
    g.setTileMapping(b[4:], 1)
    from poplar_api import concat

    source = concat([a, pad], 1).transpose()  # ids alternating between two variables
    copy_prog = prog.Copy(source, b)
    programs = [prog.Sequence([copy_prog]), prog.Sequence([copy_prog])]
    return g, programs


def test_a_copy_in_two_programs_is_marked_once_with_the_same_live_ranges(monkeypatch):
    g, programs = _copy_in_two_programs()
    state = g._state
    emitted = emit(state, programs, Lowered(Storage(state)), HostIO())
    records = [parts for parts in emitted.accesses.touches.values() if len(parts) == 2]
    assert len(records) == 2  # the copy's node in each program
    first, second = records
    assert all(x[1] is y[1] for x, y in zip(first, second, strict=True))  # one record
    assert not isinstance(first[0][1], tuple)  # the source: ids of two variables
    marked = []
    real_mark = liveness_mod.VariableIndex.mark

    def counting_mark(self, parts):
        marked.append(sum(np.asarray(p).size for _, p in parts if not isinstance(p, tuple)))
        return real_mark(self, parts)

    monkeypatch.setattr(liveness_mod.VariableIndex, "mark", counting_mark)
    shared = liveness_mod.liveness(state, emitted.program, emitted.accesses)
    once = sum(marked)
    # the same accesses with every node's parts copies of their own: each node marked
    apart = copy.copy(emitted.accesses)
    object.__setattr__(
        apart, "touches", {k: copy.deepcopy(v) for k, v in emitted.accesses.touches.items()}
    )
    marked.clear()
    separate = liveness_mod.liveness(state, emitted.program, apart)
    assert once + first[0][1].size == sum(marked)  # the source's ids marked once less
    np.testing.assert_array_equal(shared.first, separate.first)
    np.testing.assert_array_equal(shared.last, separate.last)
    np.testing.assert_array_equal(shared.always, separate.always)
    # the variables the copy touches: a, pad and b, not the one lying between them
    names = [v.name for v in state.variables]
    touched = {names[v] for v in np.flatnonzero(shared.last >= 0).tolist()}
    assert touched == {"a", "pad", "b"}


def test_a_copys_id_spans_are_kept_from_its_tiles_pass(monkeypatch):
    """The spans of a copy's id arrays come from the pass that finds its tiles: no
    separate pass over the ids (``runs.span``) for the overlap check or liveness."""
    from poplar_api.lowering import runs

    g, programs = _copy_in_two_programs()
    state = g._state
    spans = []
    real_span = runs.span

    def counting_span(ids):
        spans.append(np.asarray(ids).size)
        return real_span(ids)

    monkeypatch.setattr(runs, "span", counting_span)
    em_spans = {}
    from poplar_api.lowering import emission

    real_keep = emission.Emission.keep_span

    def keep(self, ids, span):
        em_spans[id(ids)] = (ids, span)
        real_keep(self, ids, span)

    monkeypatch.setattr(emission.Emission, "keep_span", keep)
    emit(state, programs, Lowered(Storage(state)), HostIO())
    source = next(ids for ids, _ in em_spans.values() if ids.size == 96)
    assert em_spans[id(source)][1] == (int(source.min()), int(source.max()) + 1)
    assert 96 not in spans  # the source's ids were never read for their span apart
