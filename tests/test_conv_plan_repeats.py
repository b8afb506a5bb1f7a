"""Large kernels in the planner's estimates: kernel positions whose workers have the
same entry counts are costed once, and a tile's count lists are shared between the
entry ranges that have the same counts.

The ``ConvPartialnx1`` estimate is checked against its per-position formula written
here (``getConvPartialnx1SupervisorCycleEstimate``, graphcore/poplibs 7eac0f26: each
kernel position adds ``max(W * slowest worker, W * fastest worker + 9)`` per pass, the
fastest counted as 0 with fewer than ``W`` contexts); the shared count lists against
the slices of the entry counts they stand for.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from poplar_api.poplin.conv_estimators import conv_partial_nx1_cycles, nx1_worker_cycles
from poplar_api.poplin.conv_params import ConvParams, dim_maps
from poplar_api.poplin.conv_worklists import COLUMNS, _shared_count_lists, tile_geometry
from poplar_api.types import FLOAT

W = 6
KW = dict(
    num_conv_groups=1,
    num_out_groups=2,
    num_in_groups=3,
    kernel_outer_elems=1,
    filter_height=1,
    in_chans_per_group=8,
    out_chans_per_group=16,
    weight_bytes_per_conv_unit=32,
    num_conv_units=8,
    coeff_load_bytes_per_cycle=16,
    num_worker_contexts=W,
    float_activations=False,
    float_partials=True,
)


def _reference(parts: list[list[list[int]]], kernel: int) -> int:
    """The estimate with every kernel position's workers costed one position at a time."""
    base = conv_partial_nx1_cycles(
        [[[] for _ in range(kernel)] for _ in range(W)], kernel_inner_elems=kernel, **KW
    )
    empty = nx1_worker_cycles([], False, True, 8)
    passes = KW["out_chans_per_group"] // KW["num_conv_units"]
    og, ig = KW["num_out_groups"], KW["num_in_groups"]
    delta = 0
    for k in range(kernel):
        cycles = [nx1_worker_cycles(p[k], False, True, 8) for p in parts]
        hi = W * max(cycles, default=0)
        lo = W * min(cycles) if len(cycles) == W else 0
        delta += max(hi, lo + 9) - max(W * empty, W * empty + 9)
    return base + ig * og * delta * passes


@pytest.mark.parametrize("contexts", [W, 4])
def test_repeated_kernel_positions_cost_as_each_position(contexts: int) -> None:
    rng = np.random.default_rng(7)
    kernel = 40
    patterns = [[int(x) for x in rng.integers(0, 9, size=rng.integers(0, 3))] for _ in range(5)]
    choice = rng.integers(0, len(patterns), size=(contexts, kernel))
    parts = [[list(patterns[i]) for i in row] for row in choice.tolist()]
    got = conv_partial_nx1_cycles(parts, kernel_inner_elems=kernel, **KW)
    assert got == _reference(parts, kernel)


def test_no_contexts_cost_the_tag_at_every_position() -> None:
    kernel = 12
    empty = conv_partial_nx1_cycles([], kernel_inner_elems=kernel, **KW)
    one = conv_partial_nx1_cycles([[[] for _ in range(kernel)]], kernel_inner_elems=kernel, **KW)
    # one idle context: each position costs max(W * its cycles, 9) instead of 9
    worker = W * nx1_worker_cycles([], False, True, 8)
    passes, groups = 2, KW["num_out_groups"] * KW["num_in_groups"]
    assert one - empty == groups * kernel * passes * (max(worker, 9) - 9)


@pytest.mark.parametrize("seed", range(4))
def test_shared_count_lists_are_the_ranges_counts(seed: int) -> None:
    rng = np.random.default_rng(seed)
    cnt = rng.integers(0, 4, size=300)
    num = rng.integers(0, 5, size=int(cnt.sum()))
    got, _ = _shared_count_lists(cnt, num, W)
    bounds = np.concatenate(([0], np.cumsum(cnt)))
    assert got == [num[a:b].tolist() for a, b in itertools.pairwise(bounds)]
    # equal ranges share one list
    by_value: dict[tuple[int, ...], int] = {}
    for lst in got:
        assert by_value.setdefault(tuple(lst), id(lst)) == id(lst)


def test_shared_count_lists_long_ranges_few_ranges_and_none() -> None:
    for cnt in (np.array([5000, 0, *[1] * 100]), np.array([3, 0, 1])):  # long; few
        num = np.arange(int(cnt.sum())) % 7
        bounds = np.concatenate(([0], np.cumsum(cnt)))
        want = [num[a:b].tolist() for a, b in itertools.pairwise(bounds)]
        assert _shared_count_lists(cnt, num, 1) == (want, None)
    assert _shared_count_lists(np.zeros(0, np.int64), np.zeros(0, np.int64), W) == ([], None)


def test_large_kernel_geometry_partitions_match_entries() -> None:
    # a 28x28 kernel over a 28x28 field padded by 1 (a weight update's shape): the
    # partitions are the entries' counts per worker and kernel position
    params = ConvParams(FLOAT, 1, [28, 28], [28, 28], 32, 8, paddingLower=1, paddingUpper=1)
    maps = dim_maps(params)
    geom = tile_geometry(maps, 1, [(0, 3), (0, 2)], W)
    entries = geom.entries.reshape(-1, 3)
    b = geom.entry_bounds
    for w in range(W):
        for k in (0, 1, 377, 783):
            i = k * W + w
            assert geom.partitions[w][k] == entries[b[i] : b[i + 1], 1].tolist()


@pytest.mark.parametrize("seed", range(4))
def test_shared_count_lists_columns_are_the_positions_of_the_same_lists(seed: int) -> None:
    # each kernel position's workers' lists, by object: the columns name one position
    # of each distinct tuple of objects and how many positions have it
    rng = np.random.default_rng(seed)
    kernel = 120
    patterns = rng.integers(0, 4, size=(4, W))  # (a few distinct positions)
    cnt = patterns[rng.integers(0, 4, size=kernel)].reshape(-1)
    num = np.concatenate([np.arange(c) % 3 for c in cnt]).astype(np.int64)
    lists, columns = _shared_count_lists(cnt, num, W)
    assert columns is not None
    by_objects: dict[tuple[int, ...], list[int]] = {}
    for k in range(kernel):
        by_objects.setdefault(tuple(id(lists[k * W + w]) for w in range(W)), []).append(k)
    got = {tuple(id(lists[k * W + w]) for w in range(W)): n for k, n in columns}
    assert got == {key: len(ks) for key, ks in by_objects.items()}
    assert sum(n for _, n in columns) == kernel


@pytest.mark.parametrize("seed", range(6))
def test_shared_geometry_estimates_as_unshared_lists(seed: int) -> None:
    # a weight update's large kernel: the estimate from the geometry's shared lists and
    # their columns (and again, kept with them) equals that of the same counts as
    # separate lists, for each activation and partials type and unit count
    rng = np.random.default_rng(seed)
    params = ConvParams(FLOAT, 1, [28, 28], [28, 28], 32, 8, paddingLower=1, paddingUpper=1)
    maps = dim_maps(params)
    lo0, lo1 = (int(x) for x in rng.integers(0, 3, size=2))
    hi0, hi1 = lo0 + int(rng.integers(1, 4)), lo1 + int(rng.integers(1, 4))
    geom = tile_geometry(maps, 1, [(lo0, hi0), (lo1, hi1)], W)
    assert COLUMNS in geom.partitions.derived  # (the shared path is taken)
    plain = [[list(lst) for lst in per_k] for per_k in geom.partitions]
    kw = {**KW, "kernel_outer_elems": 28}
    for fa, fp, units in itertools.product((False, True), (False, True), (8, 16)):
        args = {**kw, "float_activations": fa, "float_partials": fp, "num_conv_units": units,
                "out_chans_per_group": 16}  # fmt: skip
        want = conv_partial_nx1_cycles(plain, kernel_inner_elems=28, **args)
        assert conv_partial_nx1_cycles(geom.partitions, kernel_inner_elems=28, **args) == want
        assert conv_partial_nx1_cycles(geom.partitions, kernel_inner_elems=28, **args) == want


@pytest.mark.parametrize("seed", range(6))
def test_feasible_splits_are_the_full_products_in_order(seed: int) -> None:
    # the splits whose parts multiply to at most ``tiles``, in the row-major order of
    # the full product of the options (each dimension's parts ascending, or not)
    from poplar_api.poplin.conv_splits import feasible as _feasible

    rng = np.random.default_rng(seed)
    tiles = int(rng.integers(8, 200))
    opts = []
    for d in range(4):
        parts = np.unique(rng.integers(1, 40, size=int(rng.integers(1, 9))))
        if d == 2 and seed % 2:
            parts = parts[::-1].copy()  # not ascending: the product is made
        opts.append((parts.astype(np.int64), parts.astype(np.int64)))
    grids = np.meshgrid(*[p for p, _ in opts], indexing="ij")
    ids = np.meshgrid(*[np.arange(p.size) for p, _ in opts], indexing="ij")
    ok = (grids[0] * grids[1] * grids[2] * grids[3] <= tiles).reshape(-1)
    got = _feasible(opts, tiles)
    for d in range(4):
        np.testing.assert_array_equal(got[d], ids[d].reshape(-1)[ok])


@pytest.mark.parametrize("seed", range(8))
def test_slowest_from_entry_classes_as_from_lists(seed: int) -> None:
    # random convolutions and tile blocks: the sum of the slowest contexts from the
    # geometry's classes of entry counts (nx1_slowest) equals the per-position formula
    # over its lists (_reference's), and the estimate given it equals the estimate of
    # the same counts as plain lists, for each activation and partials type and units
    from poplar_api.poplin.conv_vertex_estimates import nx1_slowest

    rng = np.random.default_rng(100 + seed)
    nd = int(rng.integers(1, 3))
    field = [int(x) for x in rng.integers(3, 30, size=nd)]
    kernel = [int(rng.integers(1, f + 1)) for f in field]
    pad = [int(x) for x in rng.integers(0, 3, size=nd)]
    stride = [int(x) for x in rng.integers(1, 3, size=nd)]
    params = ConvParams(FLOAT, int(rng.integers(1, 3)), field, kernel, 8, 16,
                        paddingLower=pad, paddingUpper=pad[::-1], stride=stride)  # fmt: skip
    maps = dim_maps(params)
    ranges = []
    for m in maps:
        lo = int(rng.integers(0, m.shape[1]))
        ranges.append((lo, int(rng.integers(lo + 1, m.shape[1] + 1))))
    contexts = int(rng.choice([W, 4, 1]))
    geom = tile_geometry(maps, int(rng.integers(1, params.batchSize + 1)), ranges, contexts)
    entries = geom.entries.reshape(-1, 3)[:, 1]
    for i in range(len(geom.entry_bounds) - 1):  # the classes are the entries'
        n = entries[geom.entry_bounds[i] : geom.entry_bounds[i + 1]]
        want = [*((n == c).sum() for c in (0, 1, 2)), (n >= 3).sum(), (n[n >= 3] - 3).sum()]
        assert geom.num_classes[i].tolist() == [int(x) for x in want]
    positions = int(np.prod(kernel))
    plain = [[list(lst) for lst in per_k] for per_k in geom.partitions]
    # (as many vertex contexts as the geometry's too: the fastest context counted)
    for fa, fp, units, w in itertools.product((False, True), (False, True), (8, 16),
                                              sorted({W, contexts})):  # fmt: skip
        want = 0
        for k in range(positions):
            cycles = [nx1_worker_cycles(p[k], fa, fp, units) for p in plain]
            lo = w * min(cycles) if len(cycles) >= w else 0
            want += max(w * max(cycles), lo + 9)
        assert nx1_slowest(geom, fa, fp, units, w) == want
        args = {**KW, "float_activations": fa, "float_partials": fp, "num_conv_units": units,
                "kernel_outer_elems": positions // kernel[-1],
                "num_worker_contexts": w}  # fmt: skip
        whole = conv_partial_nx1_cycles(plain, kernel_inner_elems=kernel[-1], **args)
        assert conv_partial_nx1_cycles(None, kernel_inner_elems=kernel[-1], slowest=want,
                                       **args) == whole  # fmt: skip
