"""Library-built graphs on the fast paths: connections kept as runs, estimates in bulk.

* A small convolution (forward, with an input-channel reduction) and a max pool with
  its gradient are built by poplin and popnn; every scalar or vector field of their
  vertices whose connected element ids are consecutive must be held as a run (what a
  hand-built graph gets from ``addVertex`` of a variable's slice), and the worklist and
  parameter constants must be such runs.
* The pooling estimate computed for a whole worklist at once
  (``estimators.pooling_cycles_of_arrays``) must equal the one-at-a-time formula of
  Poplibs' ``getPoolingCycles`` (``lib/popnn/PerformanceEstimation.hpp``,
  graphcore/poplibs @7eac0f26, cited in ``docs/estimators.md``), written out below from
  that source, for random worklists.
* The convolution worklists built for all kernel positions and workers at once
  (``conv_worklists.tile_geometry``) must be Poplibs' ``partitionConvPartialByWorker``
  (``lib/poplin/ConvUtilInternal.cpp``), written out below one element at a time.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel, poplin
from poplar_api import program as prog
from poplar_api.popnn import PoolingType, PoolParams, pooling
from poplar_api.popnn.estimators import pooling_cycles_of_arrays
from poplar_api.poputil import mapTensorLinearly

# ------------------------------------------------------------------------------- runs


def _library_graph() -> Graph:
    """A conv whose input channels are split over tiles (so a Reduce follows), then a
    2x2 max pool of its output and the pool's input gradient."""
    graph = Graph(IPUModel("ipu2").createDevice().getTarget())
    poplin.addCodelets(graph)
    params = poplin.ConvParams(FLOAT, 2, [8, 8], [3, 3], 64, 16)
    options = {"planConstraints": '{"method": "AMP", "transform": {"expandDims": []}}'}
    seq = prog.Sequence()
    x = poplin.createInput(graph, params, "x", options)
    w = poplin.createWeights(graph, params, "w", options)
    y = poplin.convolution(graph, x, w, params, False, seq, "fwd", options)
    out_field = params.getOutputFieldShape()
    pp = PoolParams(PoolingType.MAX, out_field, [2, 2], [2, 2], [0, 0], [0, 0], 16, 2, FLOAT)
    pooled = pooling.pool(graph, pp, y, seq)
    grad = graph.addVariable(FLOAT, pooled.shape(), "dPooled")
    mapTensorLinearly(graph, grad)
    pooling.poolInputGradient(graph, pp, y, pooled, grad, False, seq)
    return graph


def _consecutive(ids: np.ndarray) -> bool:
    flat = np.asarray(ids).reshape(-1)
    return flat.size > 0 and bool((np.diff(flat) == 1).all())


@pytest.fixture(scope="module")
def vertices() -> list:
    graph = _library_graph()
    return list(graph._state.vertices)  # the vertex table, read only


def test_library_graph_has_the_vertices_checked(vertices: list) -> None:
    names = {v.vtype.name for v in vertices}
    assert any(n.startswith("poplin::ConvPartial") for n in names), names
    assert any(n.startswith("poplin::ReduceAdd") for n in names), names
    assert any(n.startswith("popnn::MaxPooling<") for n in names), names
    assert any(n.startswith("popnn::MaxPoolingGrad<") for n in names), names


def test_consecutive_connections_are_runs(vertices: list) -> None:
    as_ids = []
    runs = 0
    for v in vertices:
        for name, value in v.fields.items():
            if isinstance(value, list):  # a VectorList: one id array per vector
                continue
            if isinstance(value, range):
                runs += 1
            elif value is not None and _consecutive(value):
                as_ids.append(f"{v.vtype.name}.{name}")
    assert as_ids == [], f"consecutive connections kept as id arrays: {sorted(set(as_ids))}"
    assert runs > 0


@pytest.mark.parametrize(
    ("prefix", "fields"),
    [
        ("poplin::ConvPartial", ("params",)),
        ("popnn::MaxPooling<", ("startPos", "offsetBase", "params")),
        ("popnn::MaxPoolingGrad<", ("startPos", "offsetBase", "params")),
    ],
)
def test_constants_of_library_vertices_are_runs(vertices: list, prefix: str, fields) -> None:
    checked = [v for v in vertices if v.vtype.name.startswith(prefix)]
    assert checked
    for v in checked:
        for name in fields:
            assert isinstance(v.fields[name], range), (v.vtype.name, name, v.fields[name])


# -------------------------------------------------------------------------- estimates


def get_pooling_cycles(
    init_info, cpg_d, ngm1, start_pos, work_list, is_max, is_bwd, workers
) -> int:
    """``getPoolingCycles`` (PerformanceEstimation.hpp, poplibs @7eac0f26), statement
    by statement, unpack costs 0: each worker zeroes its share of the outputs, then
    walks its rows; the supervisor waits for the slowest and adds its own 7 + 6."""
    num_chan_groups = ngm1 + 1
    max_cycles = 0
    for w in range(workers):
        cycles = 4  # load vertex state
        cycles += 2  # get worker id
        cycles += 2  # unpack out pointer and init info
        cycles += 7  # divide init work
        cycles += 2  # unpack and check remainder
        num_elems = init_info * cpg_d // workers
        extra = 1 if w < ((init_info - num_elems * workers) & 0xFFFFFFFF) else 0
        cycles += (4 + num_elems + extra) * num_chan_groups  # zero / -inf the outputs
        cycles += 5 + 1  # unpack start positions, zero-length check
        num_rows = start_pos[0] if w == 0 else start_pos[w] - start_pos[w - 1]
        if num_rows == 0:
            max_cycles = max(max_cycles, cycles + 1)
            continue
        cycles += 2 + (1 if is_max else 2)  # per-kind set-up
        if is_bwd:
            cycles += 6
        cycles += 3 + 2 + 1  # row loop set-up
        first = 0 if w == 0 else start_pos[w - 1]
        for row in work_list[first : first + num_rows]:
            cycles += 13  # row set-up: offsets, bases
            for e in range(0, len(row), 3):
                n = row[e + 2]
                if is_bwd:
                    inner = 7 + 5 * n
                elif is_max:
                    inner = 4 + 3 * n
                else:
                    inner = 5 + 3 * n
                per_group = 1 + cpg_d * (2 + inner + 1) + 1
                cycles += 20 + num_chan_groups * per_group
                cycles += (num_chan_groups - 1) * (4 + (2 if is_bwd else 0))
                cycles += 3
            cycles += 2
        max_cycles = max(max_cycles, cycles + 1)
    return 7 + max_cycles * 6 + 6


@pytest.mark.parametrize("seed", range(40))
def test_pooling_estimate_of_arrays_is_the_formula(seed: int) -> None:
    rng = np.random.default_rng(seed)
    workers = 6
    rows = int(rng.integers(0, 20))
    per_worker = np.bincount(rng.integers(0, workers, rows), minlength=workers)
    start_pos = np.cumsum(per_worker)
    work_list = [
        [int(x) for _ in range(int(rng.integers(1, 6))) for x in rng.integers(0, 300, 3)]
        for _ in range(rows)
    ]
    init_info = int(rng.integers(0, 500))
    cpg_d = int(rng.integers(1, 9))
    ngm1 = int(rng.integers(0, 4))
    kind = int(rng.integers(0, 3))
    is_max, is_bwd = kind != 0, kind == 2
    row_entries = np.array([len(r) // 3 for r in work_list], np.int64)
    entry_n = np.array([r[e + 2] for r in work_list for e in range(0, len(r), 3)], np.int64)
    got = pooling_cycles_of_arrays(
        init_info, cpg_d, ngm1, start_pos, row_entries, entry_n,
        is_max=is_max, is_bwd=is_bwd, workers=workers,
    )  # fmt: skip
    want = get_pooling_cycles(
        init_info, cpg_d, ngm1, start_pos.tolist(), work_list, is_max, is_bwd, workers
    )
    assert got == want


def test_pooling_estimate_unsigned_wrap() -> None:
    # initInfo * chansPerGroupD // W * W > initInfo: the unsigned difference wraps, so
    # every worker zeroes one more element: 6 workers, initInfo 4, chansPerGroupD 8
    # -> share 5, 4 - 30 wraps; each worker: 17 + (4 + 5 + 1) + 6 = 33, no rows
    got = pooling_cycles_of_arrays(
        4, 8, 0, np.zeros(6, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64),
        is_max=True, is_bwd=False, workers=6,
    )  # fmt: skip
    assert got == 7 + (33 + 1) * 6 + 6


# --------------------------------------------------------------------- conv worklists


def _map(size: int, out: int, stride: int, dil: int, pad: int, k: int) -> np.ndarray:
    """Input index read by output ``o`` at kernel index ``j``: ``o*stride + j*dil - pad``
    (-1 where that lands in the padding)."""
    j = np.arange(k)[:, None]
    o = np.arange(out)[None, :]
    i = o * stride + j * dil - pad
    return np.where((i >= 0) & (i < size), i, -1)


def partition_by_worker(maps, batch, ranges, workers):
    """``partitionConvPartialByWorker`` (poplibs @7eac0f26, lib/poplin/ConvUtilInternal.cpp)
    one element at a time: per kernel position, the active output rows (batch x outer
    positions) times the active elements of a row are cut into ``workers`` equal
    contiguous ranges; each range gives one ``(outRow, num, inRow)`` entry per row it
    touches, rows numbered in the block's output and the input window."""
    sub = [m[:, a:b] for m, (a, b) in zip(maps, ranges, strict=True)]
    window = []
    for s in sub:
        v = s[s >= 0]
        window.append((int(v.min()), int(v.max()) + 1) if v.size else (0, 0))
    out_shape = [b - a for a, b in ranges]
    in_shape = [b - a for a, b in window]
    result = []
    for kpos in np.ndindex(*[m.shape[0] for m in maps]):
        active = [
            [o for o in range(s.shape[1]) if s[k, o] >= 0] for s, k in zip(sub, kpos, strict=True)
        ]
        rows = [(b, *outer) for b in range(batch) for outer in itertools.product(*active[:-1])]
        row_len = len(active[-1])
        elems = [(row, x) for row in rows for x in range(row_len)] if row_len else []
        per_worker = []
        for w in range(workers):
            lo, hi = w * len(elems) // workers, (w + 1) * len(elems) // workers
            entries = []
            for row, x in elems[lo:hi]:
                if entries and entries[-1][0] == row:
                    entries[-1][1] += 1
                    continue
                entries.append([row, 1, x])
            flat = []
            for row, num, x in entries:
                b, outer = row[0], row[1:]
                o_pos = [*outer, active[-1][x]]
                i_pos = [sub[d][kpos[d], o_pos[d]] - window[d][0] for d in range(len(maps))]
                out_row = int(np.ravel_multi_index([b, *o_pos], [batch, *out_shape]))
                in_row = int(np.ravel_multi_index([b, *i_pos], [batch, *in_shape]))
                flat += [out_row, num, in_row]
            per_worker.append(flat)
        result.append(per_worker)
    return result


@pytest.mark.parametrize("seed", range(30))
def test_conv_worklists_are_partition_by_worker(seed: int) -> None:
    from poplar_api.poplin.conv_worklists import tile_geometry

    rng = np.random.default_rng(seed)
    nd = int(rng.integers(1, 4))
    maps, ranges = [], []
    for _ in range(nd):
        size, k = int(rng.integers(3, 9)), int(rng.integers(1, 4))
        stride, dil = (1, 1) if seed < 10 else (int(rng.integers(1, 3)), int(rng.integers(1, 3)))
        dil = dil if dil * (k - 1) < size else 1  # the kernel fits the field
        pad = int(rng.integers(0, 2))
        out = (size + 2 * pad - dil * (k - 1) - 1) // stride + 1
        maps.append(_map(size, out, stride, dil, pad, k))
        a = int(rng.integers(0, out))
        ranges.append((a, int(rng.integers(a + 1, out + 1))))
    batch, workers = int(rng.integers(1, 4)), int(rng.integers(1, 7))
    geom = tile_geometry(maps, batch, ranges, workers)
    want = partition_by_worker(maps, batch, ranges, workers)
    got = [[w.tolist() for w in per_k] for per_k in geom.worklists]
    assert got == want
    assert len(geom.worklists) == len(want)
    assert [w.tolist() for w in geom.worklists[-1]] == want[-1]
    # the estimators' counts: worker w's entry sizes at each kernel position
    counts = [[per_k[w][1::3] for per_k in want] for w in range(workers)]
    assert geom.partitions == counts
    # one element apart: the first two of a kernel position's entries of 2 or more
    # elements (the same for every kernel position in these transforms)
    steps = {(int(np.diff(np.flatnonzero(m[k] >= 0)[:2])[0]),
              int(np.diff(m[k][m[k] >= 0][:2])[0]))
             for m in [maps[-1][:, ranges[-1][0]: ranges[-1][1]]]
             for k in range(m.shape[0]) if np.count_nonzero(m[k] >= 0) >= 2}  # fmt: skip
    assert {(geom.out_stride, geom.in_stride)} == (steps or {(1, 1)})


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ([0, -1, 1, 2], "step by 1 at output 2, not by 2"),  # outputs 0, 2, 3
        ([0, 1, -1, -1, 2], "step by 3 at output 1, not by 1"),  # outputs 0, 1, 4
    ],
)
def test_conv_worklists_refuse_unevenly_spaced_outputs(row: list[int], message: str) -> None:
    """A worklist entry covers a row of outputs at one stride: a kernel position whose
    active outputs are not evenly spaced (beyond its first two) is refused, not made
    into worklists that skip or repeat outputs."""
    from poplar_api.poplin.conv_worklists import tile_geometry

    maps = [np.array([row])]
    with pytest.raises(ValueError, match=message):
        tile_geometry(maps, 1, [(0, len(row))], 6)
    even = [np.array([[0, -1, 1, -1, 2]])]  # outputs 0, 2, 4
    assert tile_geometry(even, 1, [(0, 5)], 6).out_stride == 2


def test_conv_worklists_refuse_kernel_positions_of_different_strides() -> None:
    """Every worklist entry of a tile steps by one output and one input stride: kernel
    position 0 reads outputs 0, 1, 2, 3 (steps 1, 1), kernel position 1 outputs 0 and 2
    of inputs 0 and 1 (steps 2, 1), which is refused."""
    from poplar_api.poplin.conv_worklists import tile_geometry

    maps = [np.array([[0, 1, 2, 3], [0, -1, 1, -1]])]
    with pytest.raises(ValueError, match=r"different strides \(2, 1\) vs \(1, 1\)"):
        tile_geometry(maps, 1, [(0, 4)], 6)


def test_split_regions_repeated_calls_keep_every_argument_apart() -> None:
    """Regions [5, 3] in grains of 2 over 2 vertices: 4 grains, 2 each; with pieces
    of at most 2 elements the same vertices hold shorter pieces. Asked again (the
    result is reused) the answers stay apart, and a reused result cannot be changed."""
    from poplar_api.errors import GraphError
    from poplar_api.popops.layout import split_regions

    whole = (((0, 0, 4),), ((0, 4, 1), (1, 0, 3)))
    short = (((0, 0, 2), (0, 2, 2)), ((0, 4, 1), (1, 0, 2), (1, 2, 1)))
    for _ in range(2):
        assert split_regions([5, 3], 2, 2, 0) == whole
        assert split_regions([5, 3], 2, 2, 0, max_per_region=2) == short
    with pytest.raises(AttributeError):
        split_regions([5, 3], 2, 2, 0)[0].append((9, 9, 9))  # type: ignore[attr-defined]
    with pytest.raises(GraphError, match="grain must be >= 1"):
        split_regions([5, 3], 0, 2, 0)
