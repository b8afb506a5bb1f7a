"""A reshape of a tensor whose flat ids were made already (``flat_index``) is a view of
them instead of a second copy of its strided index: the same ids, read-only, the same
first id of a run, and views broadcast along a dimension (zero strides) reshaped as
before, checked against the same views reshaped without their flat ids made."""

from __future__ import annotations

import math

import numpy as np

from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT

GRAPH = object()


def _views() -> list:
    """(builder, shapes to reshape to): each builder makes the same view anew."""

    def base(shape):
        return Tensor(GRAPH, FLOAT, np.arange(math.prod(shape), dtype=np.int64).reshape(shape), "t")

    rng = np.random.default_rng(17)
    perm = rng.permutation(60)
    return [
        (lambda: base([3, 4, 5]).dimShuffle([2, 0, 1]), [[60], [5, 12], [10, 6], [5, 3, 4]]),
        (lambda: base([6, 10]).transpose(), [[60], [2, 5, 6], [10, 6]]),
        (lambda: base([6, 10]).slice(2, 8, 1), [[36], [6, 6], [3, 12]]),
        (lambda: base([8, 9]).subSample(2, 0).subSample(3, 1), [[12], [3, 4], [2, 6]]),
        (
            lambda: base([4, 1, 5]).broadcast(3, 1),
            [[60], [12, 5], [4, 15], [2, 2, 3, 5], [4, 3, 5, 1]],
        ),
        (lambda: base([60]).elements(perm).reshape([6, 10]).transpose(), [[60], [5, 12]]),
        (lambda: base([2, 3, 4, 5]).dimShuffle([3, 1, 0, 2]).slice(1, 4, 0), [[72], [6, 12]]),
    ]


def test_reshape_after_flat_ids_matches_reshape_without_them() -> None:
    hits = 0
    for make, shapes in _views():
        for shape in shapes:
            fresh, asked = make(), make()
            flat = asked.flat_index()  # the flat ids made first
            strided = not asked.index.flags.c_contiguous and 0 not in asked.index.strides
            a, b = fresh.reshape(shape), asked.reshape(shape)
            np.testing.assert_array_equal(b.index, a.index)
            np.testing.assert_array_equal(b.flat_index(), flat)
            assert not b.index.flags.writeable and not b.flat_index().flags.writeable
            assert b._start == a._start
            assert b.containsAliases() == a.containsAliases()
            assert b.isContiguous() == a.isContiguous()
            if 0 in asked.index.strides:  # broadcast: reshaped as before
                assert b.index.strides == a.index.strides
            if strided:  # a view of the flat ids, not a copy
                assert np.shares_memory(b.index, flat)
                hits += 1
            rows_a, rows_b = a._row_ids(), b._row_ids()
            if rows_a is not None and rows_b is not None:
                for ra, rb in zip(rows_a, rows_b, strict=True):
                    np.testing.assert_array_equal(np.asarray(ra), np.asarray(rb))
    assert hits > 10
