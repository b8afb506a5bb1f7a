"""Batch kernels given every replica's copies of the same vertices at once (``RUN_REPLICAS``).

The convolution partial vertices plan their classes on replica 0's vertices when every
replica's plan inputs (layout, worklists, params) are equal, and on the whole batch
otherwise; either way each vertex's values are those of running it alone
(:func:`~poplar_api.poplin.conv_vertices.compute_one`), bit for bit, and the formula's
in float64. ``poplin::ReduceAdd`` sums against numpy.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_conv_vertices import (
    FIELDS,
    WORKERS,
    _batches,
    _copy,
    _reference,
    _vertex,
    _worklists,
)

from poplar_api.codelet_base import RUN_REPLICAS
from poplar_api.fields import FieldBatch
from poplar_api.poplin import conv_vertices
from poplar_api.poplin.conv_vertices import compute_one, conv_vertex
from poplar_api.poplin.vertices import reduce_add_vertex
from poplar_api.types import FLOAT

R = 3
#: The module's own class planner (counted in the tests).
CLASSES = conv_vertices._classes


def _replicas(rng, change: str = "") -> list[dict]:
    """R copies of four vertices: the same geometry and worklists, new data each."""
    shapes = [(1, 2, 2, 3, 7, 8, 4), (1, 2, 2, 3, 7, 8, 4), (2, 3, 1, 1, 5, 16, 16)]
    first = [_vertex(rng, *s) for s in shapes] + [_vertex(rng, 1, 1, 3, 2, 9, 4, 8, in_stride=2)]
    out = list(first)
    for _ in range(1, R):
        out += [
            {  # v's geometry and worklists, new values
                "params": v["params"].copy(),
                "worklists": [w.copy() for w in v["worklists"]],
                "in": [rng.standard_normal(x.size) for x in v["in"]],
                "weights": [rng.standard_normal(x.size) for x in v["weights"]],
                "out": [np.full(x.size, np.nan) for x in v["out"]],
            }
            for v in first
        ]
    v = out[len(first)]  # replica 1's first vertex
    if change == "split":  # its rows split otherwise (other worklist sizes)
        _, _, _, nk, in_rows, out_rows, in_stride, _ = (int(x) for x in v["params"])
        lists = _worklists(nk, out_rows, in_rows, in_stride, np.random.default_rng(99), runs=3)
        assert any(a.size != b.size for a, b in zip(lists, v["worklists"], strict=True))
        v["worklists"] = lists
    elif change == "swap":  # two workers' lists of one size swapped: other contents only
        wls = v["worklists"]
        i, j = next(
            (i, j)
            for i in range(len(wls))
            for j in range(i + 1, len(wls))
            if i // WORKERS == j // WORKERS  # one kernel position: the same rows in all
            and wls[i].size == wls[j].size
            and not np.array_equal(wls[i], wls[j])
        )
        wls[i], wls[j] = wls[j], wls[i]
    return out


def _run(batches, n: int, replicas: int, monkeypatch) -> tuple[np.ndarray, list[int]]:
    """computeBatch with ``RUN_REPLICAS = replicas``; (ok, vertex counts _classes saw)."""
    seen: list[int] = []

    def counting(fields, count):
        seen.append(count)
        return CLASSES(fields, count)

    monkeypatch.setattr(conv_vertices, "_classes", counting)
    token = RUN_REPLICAS.set(replicas)
    try:
        ok = conv_vertex("AMP", FLOAT, FLOAT).computeBatch(batches, n, WORKERS)
    finally:
        RUN_REPLICAS.reset(token)
    return ok, seen


@pytest.mark.parametrize("change", ["", "split", "swap"])
def test_replicas_planned_once_equal_vertex_by_vertex(monkeypatch, change):
    rng = np.random.default_rng(31)
    vertices = _replicas(rng, change)
    n = len(vertices)
    batches = _batches(vertices)
    one = _copy(batches)
    whole = _copy(batches)
    ok_one = [compute_one(tuple(one[f] for f in FIELDS), v) for v in range(n)]
    ok, seen = _run(batches, n, R, monkeypatch)
    ok_whole, seen_whole = _run(whole, n, 1, monkeypatch)
    assert ok.tolist() == ok_whole.tolist() == ok_one == [True] * n
    # planned on replica 0 alone, unless a replica's worklists differ
    assert seen == ([n] if change else [n // R]) and seen_whole == [n]
    np.testing.assert_array_equal(batches["out"].data, one["out"].data)  # bit for bit
    np.testing.assert_array_equal(whole["out"].data, one["out"].data)
    out = batches["out"]
    for v, vertex in enumerate(vertices):
        lo, hi = out.offsets[v], out.offsets[v + 1]
        for j, want in zip(range(lo, hi), _reference(vertex, np.float32), strict=True):
            got = out.data[out.inner_offsets[j] : out.inner_offsets[j + 1]]
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def _lists(vectors: list[list[np.ndarray]]) -> FieldBatch:
    counts = [len(v) for v in vectors]
    flat = [x for v in vectors for x in v]
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    inner = np.concatenate([[0], np.cumsum([x.size for x in flat])]).astype(np.int64)
    return FieldBatch(np.concatenate(flat).astype(np.float32), offsets, inner)


def test_reduce_add_sums_partials_and_refuses_a_wrong_length():
    rng = np.random.default_rng(5)
    sizes = [(3, 4), (1, 2), (5, 1), (2, 3)]  # (partials, elements) per vertex
    partials = [[rng.standard_normal(e).astype(np.float32) for _ in range(p)] for p, e in sizes]
    partials[3][1] = partials[3][1][:2]  # vertex 3: a partial shorter than its output
    out_len = [e for _, e in sizes]
    out = FieldBatch(
        np.full(sum(out_len), -7.0, np.float32),
        np.concatenate([[0], np.cumsum(out_len)]).astype(np.int64),
    )
    cls = reduce_add_vertex(FLOAT, FLOAT)
    ok = cls.computeBatch({"partials": _lists(partials), "out": out}, len(sizes), WORKERS)
    assert ok.tolist() == [True, True, True, False]
    for v in range(3):
        want = np.sum([p.astype(np.float64) for p in partials[v]], axis=0).astype(np.float32)
        got = out.data[out.offsets[v] : out.offsets[v + 1]]
        np.testing.assert_array_equal(got, want)
    assert (out.data[out.offsets[3] :] == -7.0).all()  # a refused vertex writes nothing


def test_single_input_reduce_add_adds_the_flat_partials_to_the_initial_one():
    rng = np.random.default_rng(6)
    elems, parts = [4, 0, 2], [3, 0, 5]
    flat = [
        rng.standard_normal(e * p).astype(np.float32) for e, p in zip(elems, parts, strict=True)
    ]
    init = [rng.standard_normal(e).astype(np.float32) for e in elems]

    def vec(arrays):
        offsets = np.concatenate([[0], np.cumsum([a.size for a in arrays])]).astype(np.int64)
        return FieldBatch(np.concatenate(arrays).astype(np.float32), offsets)

    out = vec([np.zeros(e, np.float32) for e in elems])
    cls = reduce_add_vertex(FLOAT, FLOAT, single_input=True)
    batches = {"partials": vec(flat), "initialPartial": vec(init), "out": out}
    assert cls.computeBatch(batches, 3, WORKERS).tolist() == [True, True, True]
    for v, (e, p) in enumerate(zip(elems, parts, strict=True)):
        rows = flat[v].astype(np.float64).reshape(p, e) if e else np.zeros((0, 0))
        want = (init[v].astype(np.float64) + rows.sum(axis=0)).astype(np.float32)
        np.testing.assert_array_equal(out.data[out.offsets[v] : out.offsets[v + 1]], want)


def test_every_replicas_elements_are_gathered_as_numpy_takes_them():
    from poplar_api.lowering.context import _gather_ids
    from poplar_api.lowering.runs import take_rows

    rng = np.random.default_rng(8)
    for dtype in (np.uint32, np.uint16, np.uint8):
        full = rng.integers(0, 200, (5, 97)).astype(dtype)
        # the ids as the runner hands them over (read-only, int32 for such an image)
        ix = _gather_ids(rng.integers(0, 97, 300), full.shape[1])
        assert ix.dtype == np.int32 and not ix.flags.writeable
        out = np.empty((5, ix.size), dtype)
        take_rows(full, ix, out)
        np.testing.assert_array_equal(out, full.take(ix, axis=1))


def test_gathers_and_stores_of_every_replica_share_one_compiled_version():
    """``take_rows`` and ``put_rows`` of the runner's argument types are one compiled
    pass (each version more is one more load per process): a store after a gather of
    the same types compiles nothing more, and both move what numpy moves."""
    from poplar_api.lowering import runs
    from poplar_api.lowering.context import _gather_ids

    rng = np.random.default_rng(12)
    for dtype in (np.uint32, np.uint16, np.uint8):
        full = rng.integers(0, 200, (4, 301)).astype(dtype)
        ix = _gather_ids(rng.permutation(301)[:120], full.shape[1])
        out = np.empty((4, ix.size), dtype)
        runs.take_rows(full, ix, out)
        np.testing.assert_array_equal(out, full[:, ix])
        known = len(runs._rows.signatures)
        values = rng.integers(0, 200, out.shape).astype(dtype)
        want = full.copy()
        want[:, ix] = values
        runs.put_rows(full, ix, values)
        np.testing.assert_array_equal(full, want)
        assert len(runs._rows.signatures) == known


def test_gathers_and_stores_of_every_replica_take_read_only_operands():
    """The one compiled pass of ``take_rows`` and ``put_rows`` writes an array in either
    direction, so the array a direction only reads may come read-only (a buffer of
    ``np.frombuffer``, a memory map): it is read as numpy reads it, and left as it was;
    and a replicated ``writeTensor`` of read-only values stores them."""
    from poplar_api import Engine, Graph, IPUModel
    from poplar_api import program as prog
    from poplar_api.lowering import runs
    from poplar_api.lowering.context import _gather_ids

    rng = np.random.default_rng(13)
    full = rng.integers(0, 200, (3, 64)).astype(np.uint32)
    ix = _gather_ids(rng.permutation(64)[:20], full.shape[1])
    frozen = full.copy()
    frozen.flags.writeable = False
    out = np.empty((3, ix.size), np.uint32)
    runs.take_rows(frozen, ix, out)
    np.testing.assert_array_equal(out, full[:, ix])
    values = np.frombuffer(rng.integers(0, 200, out.shape).astype(np.uint32).tobytes(), np.uint32)
    values = values.reshape(out.shape)
    assert not values.flags.writeable
    want = full.copy()
    want[:, ix] = values
    runs.put_rows(full, ix, values)
    np.testing.assert_array_equal(full, want)

    model = IPUModel()
    model.numIPUs, model.tilesPerIPU = 2, 4
    device = model.createDevice()
    g = Graph(device.getTarget(), replication_factor=2)
    a = g.addVariable(FLOAT, [8], "a")
    g.setTileMapping(a, 0)
    g.createHostWrite("b", a[::2])  # every other element: ids, not a block
    g.createHostRead("a-read", a)
    engine = Engine(g, prog.Sequence())
    engine.load(device)
    vals = np.arange(8, dtype=np.float32).reshape(2, 4)
    vals.flags.writeable = False
    engine.writeTensor("b", vals)
    got = np.asarray(engine.readTensor("a-read")).reshape(2, 8)
    np.testing.assert_array_equal(got[:, ::2], vals)


def test_every_replicas_elements_are_stored_as_numpy_stores_them():
    """``Storage.write_replicas`` of ``[replicas, n]`` values at an index (the compiled
    ``put_rows``) leaves every image as numpy's ``full[:, ix] = values`` does: ids of
    both widths, writeable or not, strided, repeated (the last value kept), every
    element size; one row of values for every replica and a block keep numpy."""
    from types import SimpleNamespace

    from poplar_api.lowering.context import Storage
    from poplar_api.types import BOOL, FLOAT, HALF, INT, UNSIGNED_CHAR

    rng = np.random.default_rng(9)
    r, size = 5, 997
    for t in (FLOAT, INT, HALF, UNSIGNED_CHAR, BOOL):
        space = SimpleNamespace(size=size)
        state = SimpleNamespace(spaces={t.size: space}, initial_parts=[])
        for trial in range(12):
            storage = Storage(state, r)
            full = storage.full[t.size]
            full[:] = rng.integers(0, 200, full.shape).astype(full.dtype)
            want = full.copy()
            n = int(rng.integers(1, 3000))
            ix = rng.integers(0, size, n).astype(np.int32 if trial % 2 else np.int64)
            if trial % 3 == 0:
                ix.flags.writeable = False
            if trial % 4 == 1:  # strided ids
                ix = np.repeat(ix, 2)[::2]
            values = rng.integers(0, 100, (r, n)).astype(t.numpy)
            want[:, ix] = values.view(full.dtype)
            storage.write_replicas(t, ix, values)
            np.testing.assert_array_equal(full, want, err_msg=f"{t.name} trial {trial}")
            one = values[0]  # one row for every replica
            want[:, ix] = one.view(full.dtype)[None, :]
            storage.write_replicas(t, ix, one)
            np.testing.assert_array_equal(full, want)
            if n >= 10:  # a block
                want[:, 10:20] = values[:, :10].view(full.dtype)
                storage.write_replicas(t, range(10, 20), values[:, :10])
                np.testing.assert_array_equal(full, want)


def _one_by_one(batches: dict[str, FieldBatch], n: int) -> np.ndarray:
    """``out`` of running each vertex alone on a copy of ``batches``."""
    one = _copy(batches)
    assert all(compute_one(tuple(one[f] for f in FIELDS), v) for v in range(n))
    return one["out"].data


def test_a_later_execution_reuses_the_plan_until_worklists_change(monkeypatch):
    rng = np.random.default_rng(41)
    vertices = _replicas(rng)
    n = len(vertices)
    batches = _batches(vertices)  # one layout (offset arrays), as a compute set's runner
    first = _copy(batches)
    ok, seen = _run(first, n, R, monkeypatch)
    assert ok.all() and seen == [n // R]
    np.testing.assert_array_equal(first["out"].data, _one_by_one(batches, n))
    again = _copy(batches)  # the same layout and worklists, new inputs
    for f in ("in", "weights"):
        again[f].data[:] = rng.standard_normal(again[f].data.size)
    ok, seen = _run(_copy(again), n, R, monkeypatch)
    assert ok.all() and seen == []  # the plan is reused
    reused = _copy(again)
    _run(reused, n, R, monkeypatch)
    np.testing.assert_array_equal(reused["out"].data, _one_by_one(again, n))
    # replica 1's first vertex: two workers' lists of one kernel position swapped in
    # place (same sizes, same offsets): the classes must be found again
    changed = _copy(again)
    wl = changed["worklists"]
    k = n // R  # replica 1's first vertex
    lists = [
        (wl.inner_offsets[j], wl.inner_offsets[j + 1])
        for j in range(wl.offsets[k], wl.offsets[k + 1])
    ]
    i, j = next(
        (i, j)
        for i in range(len(lists))
        for j in range(i + 1, len(lists))
        if i // WORKERS == j // WORKERS
        and lists[i][1] - lists[i][0] == lists[j][1] - lists[j][0]
        and not np.array_equal(wl.data[slice(*lists[i])], wl.data[slice(*lists[j])])
    )
    a, b = wl.data[slice(*lists[i])].copy(), wl.data[slice(*lists[j])].copy()
    wl.data[slice(*lists[i])], wl.data[slice(*lists[j])] = b, a
    want = _one_by_one(changed, n)
    ok, seen = _run(changed, n, R, monkeypatch)
    assert ok.all() and seen == [n]  # planned again, over the whole batch
    np.testing.assert_array_equal(changed["out"].data, want)
