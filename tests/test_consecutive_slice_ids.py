"""Slicing a tensor of consecutive ids gives the ids of the slice only.

A slice of a large weight (a serial convolution's per-iteration weights) used to be
a numpy view of the ids of the whole tensor, keeping them all alive; the ids are now
made for the selection alone. Checked against numpy basic indexing of the full id
array.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel
from poplar_api.tensor_views import _block_ids

KEYS_2D = [
    (slice(None), slice(2, 5)),
    (slice(1, None, 2), Ellipsis),
    (Ellipsis, -1),
    (None, slice(None, None, -1), 3),
    (2, slice(None)),
    (slice(0, 0),),
]


@pytest.mark.parametrize("key", KEYS_2D)
def test_block_ids_match_numpy(key):
    shape, start = (6, 7), 40
    full = key if Ellipsis in key else (*key, Ellipsis)
    expected = (start + np.arange(42)).reshape(shape)[full]
    got = _block_ids(start, shape, full)
    assert isinstance(got, np.ndarray) and got.dtype == np.int64
    assert got.shape == expected.shape
    assert np.array_equal(got, expected)
    assert not got.flags.writeable


def test_block_ids_rank0_and_3d():
    assert _block_ids(9, (), (Ellipsis,)).tolist() == 9
    ref = (5 + np.arange(60)).reshape(3, 4, 5)
    key = (slice(None), 1, slice(1, 4), None)
    assert np.array_equal(_block_ids(5, (3, 4, 5), key), ref[key])


def test_slice_of_variable_keeps_only_its_ids():
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    graph.addVariable(FLOAT, [10], "before")  # the variable's ids do not start at 0
    w = graph.addVariable(FLOAT, [1, 300, 200], "w")
    part = w[:, 100:200]
    ids = part.flat_index()
    base = np.asarray(w.flat_index()).reshape(1, 300, 200)
    assert np.array_equal(ids, base[:, 100:200].reshape(-1))
    held = part._index if part._index.base is None else part._index.base
    assert held.size == 100 * 200  # not the 60,000 ids of w
