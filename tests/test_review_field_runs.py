"""A vector list tabled as runs (``FieldTable.ref_runs``) plans the exchanges its ids
plan when one vertex's vectors read consecutive remote ids: as ids they make one piece
(``pieces.field_pieces`` joins a vertex's consecutive remote ids), as runs one piece per
vector; the exchange planner merges each destination's intervals, so the compiled
program and its cycles must be the same, with and without the owner stretches (a
space several times the elements read)."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT
from tests import test_field_runs as fr


def _adjacent_pieces() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vertex 0 (tile 0) reads ids 20-29 and 30-39 (tile 1's) as two vectors; vertex
    1 (tile 3) reads 40-49 and 50-59 (tile 2's) and then 0-9 (tile 0's)."""
    flat = np.concatenate([np.arange(20, 40), np.arange(40, 60), np.arange(0, 10)])
    sizes = np.array([10, 10, 10, 10, 10])
    vectors = np.array([2, 3])
    tiles = np.array([0, 3])
    return flat, sizes, vectors, tiles


@pytest.mark.parametrize(("ipus", "replicas"), [(1, 1), (2, 1), (1, 2)])
@pytest.mark.parametrize("n", [160, 4000])
def test_consecutive_vectors_of_one_vertex_exchange_as_their_ids(
    ipus, replicas, n, monkeypatch
) -> None:
    monkeypatch.setattr(fr, "_pieces", _adjacent_pieces)
    monkeypatch.setattr(fr, "N", n)
    ft, ir_runs, trace_runs, got_runs, _ = fr._compiled(FLOAT, ipus, replicas, False, monkeypatch)
    ft_ids, ir_ids, trace_ids, got_ids, _ = fr._compiled(FLOAT, ipus, replicas, True, monkeypatch)
    assert ft.ref_runs is not None and ft_ids.ref_runs is None
    np.testing.assert_array_equal(got_runs, got_ids)
    assert trace_runs == trace_ids
    assert ir_runs == ir_ids
