"""``poplin::ReduceAdd`` summing every replica's partials where they lie.

With the replicas run as one batch the several-input ReduceAdd receives its fields as
:class:`~poplar_api.field_images.ImageField` (every replica's image, replica 0's element
ids). Each replica's outputs must be, bit for bit, those of the same vertices run on
that replica's packed fields alone, and the float64 sum of the partials rounded once
(twice for a HALF output: to the float32 kernel dtype, then to HALF, as stored), with
different data in every replica, partials scattered or in blocks, FLOAT and HALF, the
scaled-update variant, and a vertex whose partial has the wrong length (refused in
every replica, nothing written). HALF partials run packed.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api.codelet_base import RUN_REPLICAS
from poplar_api.field_images import ImageField
from poplar_api.fields import FieldBatch
from poplar_api.poplin import vertices as poplin_vertices
from poplar_api.poplin.vertices import reduce_add_vertex
from poplar_api.types import FLOAT, HALF

R = 3
RAW = {4: np.uint32, 2: np.uint16}
#: (partials per vertex, output length) of replica 0's vertices
SHAPES = [(3, 5), (1, 4), (4, 1), (2, 7), (5, 3)]


def _layout(sizes: list[int], how: str, rng) -> tuple[np.ndarray, int]:
    """Element ids of packed positions whose vectors have ``sizes`` elements:
    ``scattered`` anywhere, ``blocks`` each vector a run, in random order with gaps."""
    n = int(sum(sizes))
    if how == "scattered":
        ids = rng.permutation(n + 40)[:n]
    else:
        starts, at = np.zeros(len(sizes), np.int64), 3
        for j in rng.permutation(len(sizes)):
            starts[j] = at
            at += sizes[j] + int(rng.integers(0, 3))
        ids = np.concatenate([np.arange(s, s + k) for s, k in zip(starts, sizes, strict=True)])
    return ids.astype(np.int32), int(ids.max()) + 1


def _field(values: list[np.ndarray], ids, space, dtype, offsets, inner) -> ImageField:
    """Every replica's packed ``values`` laid out at ``ids`` in an image of ``dtype``."""
    image = np.zeros((len(values), space), RAW[np.dtype(dtype).itemsize])
    for r, v in enumerate(values):
        image[r].view(dtype)[ids] = v.astype(dtype)
    return ImageField(image, np.dtype(dtype), ids, offsets, inner, np.dtype(np.float32))


def _packed(field: ImageField, r: int) -> FieldBatch:
    """Replica ``r``'s field packed in the kernel dtype, as the runner packs one replica."""
    data = field.image[r].view(field.dtype)[field.ids].astype(np.float32)
    return FieldBatch(data, field.offsets, field.inner_offsets)


def _case(pt, ot, update: bool, how: str, seed: int, wrong: bool = False):
    """ImageFields of ``R`` replicas' ReduceAdd vertices (different data in each)."""
    rng = np.random.default_rng(seed)
    lengths = [[k] * m for m, k in SHAPES]
    if wrong:
        lengths[1][0] += 1  # vertex 1's partial is one element too long
    inner_sizes = [k for ks in lengths for k in ks]
    inner = np.concatenate(([0], np.cumsum(inner_sizes))).astype(np.int64)
    outer = np.concatenate(([0], np.cumsum([m for m, _ in SHAPES]))).astype(np.int64)
    out_offsets = np.concatenate(([0], np.cumsum([k for _, k in SHAPES]))).astype(np.int64)
    p_ids, p_space = _layout(inner_sizes, how, rng)
    o_ids, o_space = _layout([k for _, k in SHAPES], how, rng)
    scale = 2.0 ** rng.integers(-8, 8, (R, 1))
    partials = [
        rng.standard_normal(inner[-1]) * scale[r] * 2.0 ** rng.integers(-12, 12, inner[-1])
        for r in range(R)
    ]
    outs = [rng.standard_normal(out_offsets[-1]) for _ in range(R)]
    fields = {
        "partials": _field(partials, p_ids, p_space, pt, outer, inner),
        "out": _field(outs, o_ids, o_space, ot, out_offsets, None),
    }
    if update:
        s_ids = rng.permutation(len(SHAPES) + 9)[: len(SHAPES)].astype(np.int32)
        scales = [rng.standard_normal(len(SHAPES)) for _ in range(R)]
        fields["scale"] = _field(
            scales, s_ids, len(SHAPES) + 9, np.float32, np.arange(len(SHAPES) + 1), None
        )
    return fields


def _run(cls, fields: dict, n: int) -> np.ndarray:
    token = RUN_REPLICAS.set(R)
    try:
        return cls.computeBatch(fields, n, 6)
    finally:
        RUN_REPLICAS.reset(token)


@pytest.mark.parametrize("update", [False, True])
@pytest.mark.parametrize("how", ["scattered", "blocks"])
@pytest.mark.parametrize(
    ("pt", "ot"), [(np.float32, np.float32), (np.float32, np.float16), (np.float16, np.float16)]
)
def test_each_replica_sums_its_own_partials_in_place(monkeypatch, pt, ot, how, update):
    types = {np.float32: FLOAT, np.float16: HALF}
    cls = reduce_add_vertex(types[pt], types[ot], update=update)
    fields = _case(pt, ot, update, how, seed=7)
    n = len(SHAPES)
    before = [f.image.copy() for f in fields.values()]
    alone = []  # each replica's vertices run on its packed fields
    for r in range(R):
        one = {k: _packed(f, r) for k, f in fields.items()}
        assert cls.computeBatch(one, n, 6).all()
        alone.append(one["out"].data.astype(ot))
    in_place = []
    real = poplin_vertices._reduce_in_place
    monkeypatch.setattr(
        poplin_vertices, "_reduce_in_place", lambda *a: in_place.append(real(*a)) or in_place[-1]
    )
    assert _run(cls, fields, n * R).all()
    assert (in_place[0] is not None) == (pt == np.float32)  # HALF partials run packed
    out = fields["out"]
    for r in range(R):
        got = out.image[r].view(ot)[out.ids]
        assert got.tobytes() == alone[r].tobytes(), f"replica {r}"
        # the formula: float64 sums of the (kernel dtype) partials, rounded as stored
        p = fields["partials"].image[r].view(pt)[fields["partials"].ids].astype(np.float64)
        inner, outer = fields["partials"].inner_offsets, fields["partials"].offsets
        want = []
        for v in range(n):
            vecs = [p[inner[j] : inner[j + 1]] for j in range(outer[v], outer[v + 1])]
            total = np.zeros(vecs[0].size)
            for vec in vecs:
                total = total + vec
            want.append(total)
        want = np.concatenate(want)
        if update:
            old = before[1][r].view(ot)[out.ids].astype(np.float32).astype(np.float64)
            sc = fields["scale"].image[r].view(np.float32)[fields["scale"].ids]
            want = old + np.repeat(sc.astype(np.float64), np.diff(out.offsets)) * want
        assert got.tobytes() == want.astype(np.float32).astype(ot).tobytes(), f"replica {r}"
    # nothing but the outputs was written
    for (name, f), image in zip(fields.items(), before, strict=True):
        if name != "out":
            assert np.array_equal(f.image, image)


def test_a_partial_of_the_wrong_length_is_refused_in_every_replica():
    cls = reduce_add_vertex(FLOAT, FLOAT)
    fields = _case(np.float32, np.float32, False, "scattered", seed=3, wrong=True)
    out = fields["out"]
    before = out.image.copy()
    ok = _run(cls, fields, len(SHAPES) * R)
    assert ok.tolist() == [v != 1 for v in range(len(SHAPES))] * R
    lo, hi = out.offsets[1], out.offsets[2]
    untouched = out.ids[lo:hi]
    assert np.array_equal(out.image[:, untouched], before[:, untouched])
    assert not np.array_equal(out.image, before)  # the other vertices wrote


def test_replicated_matmul_reductions_equal_each_replica_run_alone(monkeypatch):
    """A replicated matMul whose input channels are split over tiles (ReduceAdd of the
    partial sums) equals each replica run alone, and the packed path."""
    from test_replica_images import _matmul_engine

    from poplar_api import FLOAT as F

    rng = np.random.default_rng(31)
    x = rng.standard_normal((4, 4, 600)).astype(np.float32)
    w = rng.standard_normal((4, 600, 6)).astype(np.float32)
    calls = []
    real = poplin_vertices._reduce_in_place
    monkeypatch.setattr(
        poplin_vertices, "_reduce_in_place", lambda *a: calls.append(real(*a)) or calls[-1]
    )
    together = _matmul_engine(4, F, x, w)
    assert calls and all(c is not None for c in calls)  # the reductions ran in place
    alone = np.stack([_matmul_engine(1, F, x[r : r + 1], w[r : r + 1])[0] for r in range(4)])
    assert together.tobytes() == alone.tobytes()
    monkeypatch.setattr(poplin_vertices._ReduceAddBase, "readsImages", False)
    assert _matmul_engine(4, F, x, w).tobytes() == together.tobytes()


def _reference_sums(images, ids, offsets, inner, out_offsets, ok):
    """Every replica's float64 sums, vertex by vertex, partial after partial (the
    order of ``_sum_lists``), written out in Python."""
    sums = np.zeros((images.shape[0], out_offsets[-1]), np.float64)
    for r in range(images.shape[0]):
        for v in np.flatnonzero(ok):
            base = out_offsets[v]
            for j in range(offsets[v], offsets[v + 1]):
                for e in range(inner[j + 1] - inner[j]):
                    sums[r, base + e] += np.float64(images[r, ids[inner[j] + e]])
    return sums


def _order_sensitive_images(space: int, rng) -> np.ndarray:
    """``[R, space]`` float32 values of magnitudes 2**-30 to 2**30: float64 sums of a
    few of them depend on the order of the additions."""
    scale = np.exp2(rng.integers(-30, 31, (R, space)))
    return (rng.standard_normal((R, space)) * scale).astype(np.float32)


@pytest.mark.parametrize("seed", range(4))
def test_segments_sum_as_each_vertex_in_turn(seed):
    """``_segments`` + ``_sum_segments`` (the in-place ReduceAdd's sums) give the float64
    sums of each vertex's partials added in turn, bit for bit: partials scattered, one
    element read by two partials, a vertex refused (not ``ok``) adding nothing."""
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, 6, 40)  # partials per vertex
    sizes = rng.integers(1, 4, 40)  # output length per vertex
    offsets = np.concatenate(([0], np.cumsum(counts)))
    out_offsets = np.concatenate(([0], np.cumsum(sizes)))
    inner = np.concatenate(([0], np.cumsum(np.repeat(sizes, counts))))
    ids = rng.integers(0, 300, inner[-1]).astype(np.int32)  # repeats among them
    ok = rng.random(40) > 0.1
    images = _order_sensitive_images(300, rng)
    src, dst, lengths = poplin_vertices._segments(ids, offsets, inner, out_offsets, ok)
    got = np.zeros((R, out_offsets[-1]), np.float64)
    poplin_vertices._sum_segments(images, src, dst, lengths, got)
    want = _reference_sums(images, ids, offsets, inner, out_offsets, ok)
    assert got.tobytes() == want.tobytes()
    # the plan is kept for these arrays, and found again when ok changes
    assert poplin_vertices._segments(ids, offsets, inner, out_offsets, ok)[0] is src
    ok[np.flatnonzero(ok)[0]] = False
    again = poplin_vertices._segments(ids, offsets, inner, out_offsets, ok)
    assert again[0] is not src and int(again[2].sum()) < int(lengths.sum())


def _segments_by_elements(ids, offsets, inner, out_offsets, ok):
    """The segments found element by element: every element's (rank, output) sorted,
    runs where both its id and its output go on by one."""
    vertex = np.repeat(np.arange(ok.size), np.diff(offsets))
    rank = np.arange(vertex.size) - offsets[vertex]
    partial = np.repeat(np.arange(vertex.size), np.diff(inner))
    keep = ok[vertex[partial]]
    dst = (out_offsets[vertex[partial]] + np.arange(ids.size) - inner[partial])[keep]
    src = ids.astype(np.int64)[keep]
    order = np.lexsort((dst, rank[partial][keep]))
    src, dst = src[order], dst[order]
    first = np.flatnonzero((np.diff(src, prepend=-2) != 1) | (np.diff(dst, prepend=-2) != 1))
    return src[first], dst[first], np.diff(first, append=src.size)


@pytest.mark.parametrize("seed", range(40))
def test_segments_from_pieces_are_those_of_every_element(seed):
    """``_segments_of`` (pieces of consecutive ids) against the element-by-element
    reference: runs of ids broken at random, empty partials and vertices, vertices
    refused, int32 and int64 ids and output offsets, many ranks (past an int16's)."""
    rng = np.random.default_rng(seed)
    nv = int(rng.integers(1, 60))
    counts = rng.integers(0, 6, nv)
    if seed % 10 == 9:  # a vertex of more partials than an int16 numbers
        counts[0] = 33_000
    sizes = rng.integers(1, 5, nv)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    out_offsets = np.concatenate(([0], np.cumsum(sizes)))
    if seed % 4 == 1:  # offsets of either width give int64 positions
        out_offsets = out_offsets.astype(np.int32)
    lengths = np.repeat(sizes, counts)
    if seed % 3 == 0:  # empty partials (their vertex is then not ok: lengths differ)
        lengths = np.where(rng.random(lengths.size) < 0.1, 0, lengths)
    inner = np.concatenate(([0], np.cumsum(lengths)))
    vertex = np.repeat(np.arange(nv), counts)
    ok = (rng.random(nv) > 0.2) & (np.bincount(vertex, lengths != sizes[vertex], nv) == 0)
    n = int(inner[-1])
    ids = np.cumsum(np.where(rng.random(n) < 0.7, 1, rng.integers(-50, 50, n))) + 100
    ids = (ids - min(int(ids.min(initial=0)), 0)).astype(np.int32 if seed % 2 else np.int64)
    got = poplin_vertices._segments_of(ids, offsets, inner, out_offsets, ok)
    want = _segments_by_elements(ids, offsets, inner, out_offsets, ok)
    for a, b in zip(got, want, strict=True):
        assert a.dtype == np.int64 and a.tolist() == b.tolist()


def test_segments_of_split_matmul_partials_are_blocks():
    """Partials laid out as a split matMul lays them (per input-channel group one block
    of every output, in output order) sum as one run per group, in group order, with
    each output's additions in its partials' order (order-sensitive data)."""
    rng = np.random.default_rng(9)
    groups, outputs, per_vertex = 7, 64, 2  # vertices of 2 outputs, 7 partials each
    n = outputs // per_vertex
    block = np.arange(outputs).reshape(n, per_vertex)
    group_base = np.array([5, 200, 90, 400, 310, 600, 700])  # blocks in no order
    ids = (group_base[None, :, None] + block[:, None, :]).reshape(-1).astype(np.int32)
    offsets = np.arange(n + 1) * groups
    inner = np.arange(n * groups + 1) * per_vertex
    out_offsets = np.arange(n + 1) * per_vertex
    ok = np.ones(n, bool)
    src, dst, lengths = poplin_vertices._segments(ids, offsets, inner, out_offsets, ok)
    assert src.tolist() == group_base.tolist() and lengths.tolist() == [outputs] * groups
    assert dst.tolist() == [0] * groups
    images = _order_sensitive_images(800, rng)
    got = np.zeros((R, outputs), np.float64)
    poplin_vertices._sum_segments(images, src, dst, lengths, got)
    want = _reference_sums(images, ids, offsets, inner, out_offsets, ok)
    assert got.tobytes() == want.tobytes()
    reversed_groups = np.zeros_like(got)  # the data tells the order of the groups apart
    for g in reversed(group_base.tolist()):
        reversed_groups += images[:, g : g + outputs].astype(np.float64)
    assert reversed_groups.tobytes() != want.tobytes()


@pytest.mark.parametrize("wrong", [False, True])
def test_a_later_execution_reuses_the_layout_and_sums_its_new_values(wrong):
    """The layout (which vertices are ok, the ids their outputs own) is found once per
    set of id and offset arrays: a second execution with new values in every replica
    (the same arrays, as the runner hands them) gives each replica's packed run alone,
    a vertex refused on the first refused again, and finds nothing anew."""
    cls = reduce_add_vertex(FLOAT, FLOAT)
    fields = _case(np.float32, np.float32, False, "scattered", seed=5, wrong=wrong)
    n = len(SHAPES)
    p, out = fields["partials"], fields["out"]
    rng = np.random.default_rng(6)
    found = None
    for execution in range(2):
        if execution:  # new partials and outputs in every replica
            for f in (p, out):
                f.image.view(np.float32)[:, f.ids] = rng.standard_normal((R, f.ids.size))
        before = out.image.copy()
        alone = []
        for r in range(R):
            one = {k: _packed(f, r) for k, f in fields.items()}
            cls.computeBatch(one, n, 6)
            alone.append(one["out"].data.astype(np.float32))
        ok = _run(cls, fields, n * R)
        assert ok.tolist() == [not (wrong and v == 1) for v in range(n)] * R
        for r in range(R):
            got = out.image[r].view(np.float32)[out.ids]
            assert got.tobytes() == alone[r].tobytes(), f"execution {execution}, replica {r}"
        if wrong:  # the refused vertex's outputs are left as they were
            lo, hi = out.offsets[1], out.offsets[2]
            assert np.array_equal(out.image[:, out.ids[lo:hi]], before[:, out.ids[lo:hi]])
        layout = poplin_vertices._LAYOUTS[id(p.ids)][2]
        assert found is None or all(a is b for a, b in zip(layout, found, strict=True))
        found = layout
