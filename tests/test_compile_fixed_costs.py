"""Compile paths that avoid per-op fixed costs (the PopART CNN's compile): each against
what it replaced or a count made in the test.

* liveness counts a ``WriteUndef``'s range of ids per variable without making the ids;
* a ``Copy``'s on-tile part refuses an element on no tile instead of indexing with it
  (the graph's validation then names the unmapped variable);
* the planner rule's per-piece weights of one element type, each ``5 / (rate * f1)``
  cycles per byte as a fraction, ``f1`` counted in the test.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from ipusim.config import load_config
from ipusim.machine_copies import ELEMENT_BYTES, _planner_weights, copy_bytes_per_cycle
from poplar_api.lowering.copies import on_tile_copy_steps
from tests.test_review_lowering_kernels import _index, _random_space


@pytest.mark.parametrize("seed", range(6))
def test_counts_of_a_range_equal_those_of_its_ids(seed):
    """Ranges of step 1 anywhere in a space of variables (empty ones among them): the
    variables and counts of the ids made as an array, and those counted in the test."""
    rng, _, index, t, owner_of, space = _random_space(seed, 200, 7, 2)
    starts = [0, space - 1, *rng.integers(0, space, 20).tolist()]
    for start in starts:
        stop = int(rng.integers(start + 1, space + 1))
        got = index.counts_of(t, range(start, stop))
        made = index.counts_of(t, np.arange(start, stop, dtype=np.int64))
        want_v, want_c = np.unique(owner_of[start:stop], return_counts=True)
        assert got[0].tolist() == made[0].tolist() == want_v.tolist()
        assert got[1].tolist() == made[1].tolist() == want_c.tolist()


@pytest.mark.parametrize("seed", range(4))
def test_counts_of_a_range_within_one_variable_equal_those_of_its_ids(seed):
    """A whole variable's range (an undef's), and ranges inside one variable, after empty
    variables or at either end of the space: the one variable and its count, as the ids
    made as an array give them and as counted in the test."""
    rng, sizes, index, t, owner_of, _ = _random_space(seed, 120, 7, 2)
    bases = np.concatenate(([0], np.cumsum(sizes)[:-1]))
    for vid in [*rng.integers(0, sizes.size, 40).tolist(), 0, sizes.size - 1]:
        if not sizes[vid]:
            continue
        base, size = int(bases[vid]), int(sizes[vid])
        lo = base + int(rng.integers(0, size))
        for start, stop in ((base, base + size), (lo, int(rng.integers(lo + 1, base + size + 1)))):
            got = index.counts_of(t, range(start, stop))
            made = index.counts_of(t, np.arange(start, stop, dtype=np.int64))
            want_v, want_c = np.unique(owner_of[start:stop], return_counts=True)
            assert got[0].tolist() == made[0].tolist() == want_v.tolist() == [vid]
            assert got[1].tolist() == made[1].tolist() == want_c.tolist()


def test_an_empty_range_owns_no_variable():
    index, t = _index(np.array([3, 2]))
    vids, counts = index.counts_of(t, range(4, 4))
    assert vids.size == counts.size == 0


def test_a_local_copy_element_on_no_tile_is_refused():
    cfg = load_config("tiny")
    d_tile = np.array([0, -1, 1], np.int32)
    with pytest.raises(ValueError, match="has no tile"):
        on_tile_copy_steps(cfg, range(0, 3), np.array([5, 6, 7]), d_tile, np.ones(3, bool), 4)


@pytest.mark.parametrize("name", ["float", "half", "char", "int"])
def test_one_types_weights_are_its_rate_per_byte(name):
    """Pieces of one type: each weight / scale is ``5 / (min(memcpy, size) * f1)``,
    ``f1`` 4 where the piece's elements are a multiple of 2 (FLOAT) or 4 (others),
    else 3; the scale is the least common multiple of the denominators present."""
    cfg = load_config("mk2")
    size = ELEMENT_BYTES[name]
    rng = np.random.default_rng(size)
    elements = rng.integers(1, 30, 500)
    weight, scale = _planner_weights(cfg, elements * size, name)
    grain = 2 if name == "float" else 4
    rate = min(copy_bytes_per_cycle(cfg), size)
    f1 = [4 if e % grain == 0 else 3 for e in elements.tolist()]
    assert scale == math.lcm(*{rate * f for f in f1})
    assert weight.dtype == np.int64
    for w, f in zip(weight.tolist(), f1, strict=True):
        assert Fraction(w, scale) == Fraction(5, rate * f)
