"""The convolution partials read their members' vectors as views of the batch where the
vectors lie one after another (per replica when the batch is replicas), and as copies
otherwise; either way the vectors are those the offsets name."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.codelet_base import RUN_REPLICAS
from poplar_api.fields import FieldBatch
from poplar_api.poplin.conv_vertices import _gather, _scatter


def _vector_list(starts: list[int], size: int, count: int, total: int) -> FieldBatch:
    """Vertices of ``count`` vectors of ``size`` elements each, vector ``j`` of the batch
    at ``starts[j]`` of a float32 array of ``total`` elements."""
    data = np.arange(total, dtype=np.float32) * 0.5
    n = len(starts) // count
    offsets = np.arange(n + 1, dtype=np.int64) * count
    inner = np.append(np.asarray(starts, np.int64), total)  # only the starts are read
    return FieldBatch(data, offsets, inner)


def _expected(batch: FieldBatch, members: np.ndarray, count: int, size: int) -> np.ndarray:
    rows = [
        batch.data[batch.inner_offsets[batch.offsets[v] + j] :][:size]
        for v in members.tolist()
        for j in range(count)
    ]
    return np.stack(rows).reshape(members.size, count, size)


def _gathered(batch, members, count, size, replicas, values=None):
    """``_gather``'s result, or with ``values`` what ``_scatter`` stores, with
    ``RUN_REPLICAS = replicas``."""
    token = RUN_REPLICAS.set(replicas)
    try:
        if values is None:
            return _gather(batch, members, count, size)
        return _scatter(batch, members, count, values)
    finally:
        RUN_REPLICAS.reset(token)


@pytest.mark.parametrize(
    ("layout", "replicas", "shared"),
    [
        ("packed", 1, True),  # every vector after the previous one
        ("packed", 3, True),
        ("per-replica", 3, True),  # packed within a replica, replicas 100 apart
        ("gaps", 1, False),  # a gap after each vector
        ("reversed", 3, False),  # vectors in the opposite order
    ],
)
def test_members_vectors_are_views_where_they_lie_in_order(layout, replicas, shared):
    size, count, per_replica = 4, 2, 3
    n = per_replica * replicas
    vectors = np.arange(n * count)
    if layout == "packed":
        starts = vectors * size
    elif layout == "per-replica":
        starts = (vectors // (per_replica * count)) * 100 + (vectors % (per_replica * count)) * size
    elif layout == "gaps":
        starts = vectors * (size + 1)
    else:
        starts = (n * count - 1 - vectors) * size
    batch = _vector_list(starts.tolist(), size, count, int(starts.max()) + size + 1)
    members = np.arange(n, dtype=np.int64)
    got = _gathered(batch, members, count, size, replicas)
    lead = (replicas, per_replica) if replicas > 1 else (n,)
    assert got.shape == (*lead, count, size)
    np.testing.assert_array_equal(
        got.reshape(n, count, size), _expected(batch, members, count, size)
    )
    assert np.shares_memory(got, batch.data) == shared
    # stored back: each vector's elements, and nothing else of the batch
    values = np.random.default_rng(7).standard_normal((n, count, size)).astype(np.float32)
    want = batch.data.copy()
    for i, v in enumerate(members.tolist()):
        for j in range(count):
            at = int(batch.inner_offsets[batch.offsets[v] + j])
            want[at : at + size] = values[i, j]
    _gathered(batch, members, count, size, replicas, values)
    np.testing.assert_array_equal(batch.data, want)


def test_a_members_subset_of_a_packed_batch_is_a_view_of_its_part():
    size, count = 3, 1
    batch = _vector_list(list(range(0, 30, size)), size, count, 31)
    members = np.array([2, 3, 4, 5], np.int64)
    got = _gathered(batch, members, count, size, 1)
    np.testing.assert_array_equal(got, _expected(batch, members, count, size))
    assert np.shares_memory(got, batch.data)
    assert not got.flags.writeable  # a kernel cannot write its inputs through the view
