"""Edge cases of the copy and view fast paths, against brute-force definitions written
here: whether a ``Copy``'s two sides are the same view and how many element ids they
share (``Tensor._flat_ids``' ranges of consecutive ids, id arrays, empty sides),
``Tensor.elements`` of more than 64 positions (checked and gathered in one compiled
pass) against ``flat_index()[idx]``, and the on-tile part of a ``Copy`` of every
Poplar element type priced at that type's rate (Poplibs' ``getScaleFactorForTransform``
granularity and element bytes)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from test_on_tile_copies_planner import _copy_vertices, entry

from ipusim.config import load_config
from poplar_api import (
    BOOL,
    CHAR,
    FLOAT,
    HALF,
    INT,
    SHORT,
    UNSIGNED_CHAR,
    UNSIGNED_INT,
    UNSIGNED_SHORT,
    Graph,
)
from poplar_api import program as prog
from poplar_api.lowering.copies import _same_or_overlap


def _ids(x: np.ndarray | range) -> np.ndarray:
    return np.asarray(list(x) if isinstance(x, range) else x, np.int64)


@pytest.mark.parametrize("seed", range(40))
def test_same_or_overlap_matches_sets(seed: int) -> None:
    rng = np.random.default_rng(seed)

    def side():
        kind = rng.integers(0, 4)
        start = int(rng.integers(0, 40))
        n = int(rng.integers(0, 12))
        if kind == 0:
            return range(start, start + n)
        if kind == 1:  # a view of one element, or none
            return range(start, start + min(n, 1))
        if kind == 2:
            return rng.permutation(np.arange(start, start + n)).astype(np.int64)
        return rng.integers(0, 50, n).astype(np.int64)

    s, d = side(), side()
    same, overlap = _same_or_overlap(s, d)
    si, di = _ids(s), _ids(d)
    assert same == np.array_equal(si, di)
    if not same:
        assert overlap == np.intersect1d(si, di).size


def test_copy_between_interleaved_views_is_allowed_and_overlapping_ones_are_not() -> None:
    from poplar_api import Engine, IPUModel

    device = IPUModel(load_config("tiny")).createDevice()
    graph = Graph(device.getTarget())
    a = graph.addVariable(FLOAT, [20], "a")
    graph.setTileMapping(a, 0)
    # even and odd positions: spans overlap, ids do not
    Engine(graph, prog.Copy(a.slice(0, 20).subSample(2, 0), a.slice(1, 20).subSample(2, 0)))
    with pytest.raises(Exception, match="overlap"):
        Engine(graph, prog.Copy(a.slice(0, 10), a.slice(5, 15)))


@pytest.mark.parametrize("start", [None, 3])
def test_elements_of_many_positions_gathers_flat_index(start: int | None) -> None:
    from poplar_api import IPUModel

    graph = Graph(IPUModel(load_config("tiny")).createDevice().getTarget())
    base = graph.addVariable(FLOAT, [10, 30], "v")
    t = base if start is None else base.transpose()  # consecutive ids, or a permutation
    flat = t.flat_index()
    n = flat.size
    rng = np.random.default_rng(1)
    cases = [
        np.arange(5, 105),  # a run of positions
        np.arange(5, 105)[::-1].copy(),
        rng.integers(0, n, 200),
        rng.integers(0, n, (10, 10)).astype(np.int32),
        np.arange(100, dtype=np.uint16),
        np.arange(100, dtype=">i8"),
    ]
    for idx in cases:
        got = t.elements(idx)
        assert got.shape() == list(idx.shape)
        assert np.array_equal(got.flat_index(), flat[np.asarray(idx, np.int64).reshape(-1)])
    for bad in (np.r_[np.arange(80), n], np.r_[np.arange(80), -1]):
        with pytest.raises(Exception, match="out of range"):
            t.elements(bad)
    huge = np.arange(80, dtype=np.uint64)
    huge[7] = np.uint64(2**63 + 5)  # wraps to a negative int64: still out of range
    with pytest.raises(Exception, match=r"indices\[7\]"):
        t.elements(huge)


BYTES = {"float": 4, "half": 2, "int": 4, "unsigned int": 4, "short": 2}
BYTES |= {"unsigned short": 2, "char": 1, "unsigned char": 1, "bool": 1}


@pytest.mark.parametrize(
    "typ", [FLOAT, HALF, INT, UNSIGNED_INT, SHORT, UNSIGNED_SHORT, CHAR, UNSIGNED_CHAR, BOOL]
)
@pytest.mark.parametrize("n", [96, 98])
def test_on_tile_copy_of_every_type_at_its_rate(typ, n: int) -> None:
    size = BYTES[typ.name]
    total = n * size
    grain = 2 if typ.name == "float" else 4
    f1 = 4 if n % grain == 0 else 3
    chunk = math.ceil(total / (6 * 8)) * 8
    want = sorted(
        (0, entry() + math.ceil(Fraction(min(chunk, total - k) * 5, min(8, size) * f1)))
        for k in range(0, total, chunk)
    )
    assert _copy_vertices(typ, n) == want
