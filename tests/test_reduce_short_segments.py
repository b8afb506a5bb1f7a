"""FLOAT sums over short segments (``popops`` Reduce vertices' kernel) in one compiled pass.

``segment_reduce`` adds segments of at most ``SHORT`` float32 elements by
``_short_sums``; its bits must be those of ``np.add.reduceat`` over the non-empty
segments (empty ones 0), the path it replaces and still takes for longer segments.
The reference is computed here with ``reduceat`` directly, on values where the order
and the first element's handling show: signed zeros, infinities, NaNs with payloads
(signalling ones too), subnormals and magnitudes 2**-30 to 2**30 apart.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.popops import reduce_vertices
from poplar_api.popops.reduce_vertices import SHORT, Operation, segment_reduce

SPECIAL = np.concatenate(
    (
        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38, -3.4e38], np.float32),
        np.array([0x7FC00001, 0xFFC00002, 0x7F800003, 0xFF800005], np.uint32).view(np.float32),
    )
)


def reference(op: Operation, data: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Each segment's sum as ``np.add.reduceat`` gives it, empty segments 0."""
    with np.errstate(all="ignore"):
        values = data * data if op is Operation.SQUARE_ADD else data
        lengths = np.diff(bounds)
        out = np.zeros(lengths.size, np.float32)
        full = lengths > 0
        if full.any():
            out[full] = np.add.reduceat(values, bounds[:-1][full])
    return out


def random_case(rng: np.random.Generator, longest: int) -> tuple[np.ndarray, np.ndarray]:
    lengths = rng.integers(0, longest + 1, int(rng.integers(1, 40)))
    data = rng.standard_normal(int(lengths.sum())) * np.exp2(rng.integers(-30, 31, lengths.sum()))
    data = data.astype(np.float32)
    pick = rng.random(data.size) < rng.random()
    data[pick] = rng.choice(SPECIAL, int(pick.sum()))
    return data, np.concatenate(([0], np.cumsum(lengths)))


@pytest.mark.parametrize("op", [Operation.ADD, Operation.SQUARE_ADD])
def test_short_sums_give_reduceats_bits(op):
    rng = np.random.default_rng(11)
    taken = 0
    for trial in range(3000):
        data, bounds = random_case(rng, SHORT if trial % 3 else SHORT + 4)
        with np.errstate(all="ignore"):
            got = segment_reduce(op, data, bounds)
        want = reference(op, data, bounds)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        taken += int(np.diff(bounds).max()) <= SHORT
    assert taken > 1000


def test_the_cases_where_the_order_shows():
    """One element is itself (a signalling NaN stays signalling); two negative zeros sum
    to a negative zero; nine elements are not one chain (numpy's eight lanes)."""
    snan = np.array([0x7F800003], np.uint32).view(np.float32)
    assert segment_reduce(Operation.ADD, snan, np.array([0, 1])).view(np.uint32)[0] == 0x7F800003
    zeros = np.array([-0.0, -0.0], np.float32)
    assert np.signbit(segment_reduce(Operation.ADD, zeros, np.array([0, 2]))[0])
    rng = np.random.default_rng(3)
    data = rng.standard_normal(9 * 500).astype(np.float32)
    bounds = np.arange(0, data.size + 1, 9)
    np.testing.assert_array_equal(
        segment_reduce(Operation.ADD, data, bounds).view(np.uint32),
        reference(Operation.ADD, data, bounds).view(np.uint32),
    )
    chain = np.empty(bounds.size - 1, np.float32)
    reduce_vertices._short_sums(data, bounds, chain)  # one chain: not reduceat's bits
    assert not np.array_equal(chain, reference(Operation.ADD, data, bounds))


def test_other_segments_go_through_reduceat():
    """Segments past the data's end, going backwards, or of other types keep the path
    they had (what ``reduceat`` does with them)."""
    data = np.arange(6, dtype=np.float32)
    past = segment_reduce(Operation.ADD, data, np.array([0, 2, 4]))  # the rest in the last
    np.testing.assert_array_equal(past, [1, 14])
    np.testing.assert_array_equal(
        segment_reduce(Operation.ADD, data.astype(np.float64), np.array([0, 3, 6])), [3, 12]
    )
    np.testing.assert_array_equal(segment_reduce(Operation.MAX, data, np.array([0, 3, 6])), [2, 5])
