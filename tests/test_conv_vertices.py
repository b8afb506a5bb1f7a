"""The convolution partial vertices' batched compute: vertices of one geometry run as
stacked products, with the values of running them one by one (bit for bit) and of
the formula of ``poplar_api.poplin.conv_vertices`` evaluated here in float64."""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.fields import FieldBatch
from poplar_api.poplin.conv_vertices import compute_one, conv_vertex
from poplar_api.types import FLOAT, HALF

WORKERS = 6
FIELDS = ("in", "weights", "out", "worklists", "params")


def _worklists(nk: int, out_rows: int, in_rows: int, in_stride: int, rng, runs=4) -> list:
    """``nk * WORKERS`` worklists: each kernel position covers every output row once,
    split in ``runs`` runs over the workers (some idle), reading rows shifted by ``k``."""
    lists = []
    for k in range(nk):
        cut_count = min(runs - 1, out_rows - 1)
        cuts = np.sort(rng.choice(np.arange(1, out_rows), size=cut_count, replace=False))
        pieces = np.split(np.arange(out_rows), cuts)
        per = [[] for _ in range(WORKERS)]
        for r, run in enumerate(pieces):
            first = int(run[0])
            start_in = min(first * in_stride + k, in_rows - 1 - (run.size - 1) * in_stride)
            per[(r * 2 + k) % WORKERS] += [first, run.size, start_in]
        lists += [np.asarray(p, np.int64) for p in per]
    return lists


def _vertex(rng, ncg, nog, nig, nk, out_rows, oc, ic, in_stride=1, last_ic=None, wls=None, runs=4):
    """One vertex's fields: params, in, weights, out, worklists."""
    in_rows = out_rows * in_stride + nk
    ics = [ic] * nig
    if last_ic is not None:
        ics[-1] = last_ic
    ins = [rng.standard_normal(in_rows * ics[ig]) for _ in range(ncg) for ig in range(nig)]
    ws = [
        rng.standard_normal(nk * oc * ics[ig])
        for _ in range(ncg)
        for _ in range(nog)
        for ig in range(nig)
    ]
    outs = [np.full(out_rows * oc, np.nan) for _ in range(ncg * nog)]
    if wls is None:
        wls = _worklists(nk, out_rows, in_rows, in_stride, rng, runs)
    params = np.array([ncg, nog, nig, nk, in_rows, out_rows, in_stride, 1])
    return {"params": params, "in": ins, "weights": ws, "out": outs, "worklists": wls}


def _pack_list(per_vertex: list[list[np.ndarray]], dtype) -> FieldBatch:
    counts = [len(v) for v in per_vertex]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    flat = [np.asarray(x, dtype) for v in per_vertex for x in v]
    sizes = [x.size for x in flat]
    inner = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    data = np.concatenate(flat) if flat else np.zeros(0, dtype)
    return FieldBatch(data.astype(dtype), offsets, inner)


def _batches(vertices: list[dict], fp=np.float32) -> dict[str, FieldBatch]:
    params = [v["params"] for v in vertices]
    lengths = [p.size for p in params]
    return {
        "in": _pack_list([v["in"] for v in vertices], fp),
        "weights": _pack_list([v["weights"] for v in vertices], fp),
        "out": _pack_list([v["out"] for v in vertices], np.float32),
        "worklists": _pack_list([v["worklists"] for v in vertices], np.uint16),
        "params": FieldBatch(
            np.concatenate(params).astype(np.int32),
            np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        ),
    }


def _copy(batches: dict[str, FieldBatch]) -> dict[str, FieldBatch]:
    return {k: FieldBatch(f.data.copy(), f.offsets, f.inner_offsets) for k, f in batches.items()}


def _reference(vertex: dict, fp) -> list[np.ndarray]:
    """The module docstring's formula in float64, entry by entry."""
    ncg, nog, nig, nk, in_rows, out_rows, in_stride, out_stride = (int(x) for x in vertex["params"])
    workers = len(vertex["worklists"]) // nk
    outs = []
    for cg in range(ncg):
        for og in range(nog):
            oc = vertex["out"][cg * nog + og].size // out_rows
            out = np.zeros((out_rows, oc))
            for ig in range(nig):
                x = np.asarray(vertex["in"][cg * nig + ig], fp).astype(np.float64)
                x = x.reshape(in_rows, -1)
                w = np.asarray(vertex["weights"][(cg * nog + og) * nig + ig], fp)
                w = w.astype(np.float64).reshape(nk, oc, -1)
                for k in range(nk):
                    for wk in range(workers):
                        t = vertex["worklists"][k * workers + wk].reshape(-1, 3)
                        for out_row, num, in_row in t:
                            for j in range(num):
                                o, i = out_row + j * out_stride, in_row + j * in_stride
                                out[o] += w[k] @ x[i]
            outs.append(out.reshape(-1))
    return outs


@pytest.mark.parametrize("fp", [np.float32, np.float16])
def test_batched_vertices_match_one_by_one_and_the_formula(fp):
    rng = np.random.default_rng(31)
    shared = _vertex(rng, 1, 2, 2, 3, 7, 8, 4)
    vertices = []
    for _ in range(5):  # one geometry and worklist, new data: one stacked class
        v = _vertex(rng, 1, 2, 2, 3, 7, 8, 4, wls=shared["worklists"])
        vertices.append(v)
    vertices += [
        _vertex(rng, 2, 3, 1, 1, 5, 16, 16),  # 1x1, several conv groups
        _vertex(rng, 1, 1, 3, 2, 9, 4, 8, in_stride=2),  # strided input rows
        _vertex(rng, 1, 2, 2, 2, 6, 8, 8, last_ic=3),  # a short last channel group
        _vertex(rng, 1, 1, 1, 1, 1, 1, 5),  # one row, one channel: vector products
        _vertex(rng, 1, 1, 1, 2, 4, 8, 4),
    ]
    many = _vertex(rng, 1, 1, 1, 2, 30, 8, 4, runs=12)  # rows out of order: added by index
    vertices += [many, _vertex(rng, 1, 1, 1, 2, 30, 8, 4, wls=many["worklists"])]
    vertices.append(dict(vertices[0]))  # same geometry again, after others
    batches = _batches(vertices, fp)
    cls = conv_vertex("AMP", FLOAT if fp is np.float32 else HALF, FLOAT)
    one = _copy(batches)
    ok_one = [compute_one(tuple(one[f] for f in FIELDS), v) for v in range(len(vertices))]
    ok = cls.computeBatch(batches, len(vertices), WORKERS)
    assert ok.tolist() == ok_one == [True] * len(vertices)
    np.testing.assert_array_equal(batches["out"].data, one["out"].data)  # bit for bit
    out = batches["out"]
    for v, vertex in enumerate(vertices):
        lo, hi = out.offsets[v], out.offsets[v + 1]
        for j, want in zip(range(lo, hi), _reference(vertex, fp), strict=True):
            got = out.data[out.inner_offsets[j] : out.inner_offsets[j + 1]]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_irregular_vertices_are_refused_one_by_one():
    rng = np.random.default_rng(7)
    good = _vertex(rng, 1, 1, 1, 2, 6, 8, 8)
    bad_weights = _vertex(rng, 1, 1, 1, 2, 6, 8, 8, wls=good["worklists"])
    bad_weights["weights"] = [bad_weights["weights"][0][:-1]]
    bad_rows = _vertex(rng, 1, 1, 1, 2, 6, 8, 8, wls=good["worklists"])
    bad_rows["worklists"] = [w.copy() for w in good["worklists"]]
    nonempty = next(i for i, w in enumerate(bad_rows["worklists"]) if w.size)
    bad_rows["worklists"][nonempty][0] = 6  # output row 6 of 6 rows
    short_params = _vertex(rng, 1, 1, 1, 2, 6, 8, 8)
    short_params["params"] = short_params["params"][:7]
    vertices = [good, bad_weights, bad_rows, short_params, dict(good)]
    batches = _batches(vertices)
    cls = conv_vertex("AMP_1x1", FLOAT, FLOAT)
    ok = cls.computeBatch(batches, len(vertices), WORKERS)
    assert ok.tolist() == [True, False, False, False, True]
    out = batches["out"]
    first = out.data[out.inner_offsets[0] : out.inner_offsets[1]]
    np.testing.assert_allclose(first, _reference(good, np.float32)[0], rtol=1e-4, atol=1e-4)
