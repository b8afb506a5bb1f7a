"""Convolution partial vertices reading every replica's memory image in place.

The kernel receives its fields as :class:`~poplar_api.field_images.ImageField` (the
replicas' images and replica 0's element ids); each replica's values must be those of
running its vertices alone on packed fields (:func:`compute_one`), bit for bit, and the
formula's in float64, whatever the layout: vectors lying regularly (strided views),
vectors in any order (an index), elements scattered one by one, weights shared by every
vertex, replicas whose worklists differ (the packed path), FLOAT and HALF.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_conv_vertices import FIELDS, WORKERS, _batches, _copy, _reference, _vertex

from poplar_api import field_images
from poplar_api.codelet_base import RUN_REPLICAS
from poplar_api.field_images import ImageAccess, ImageField
from poplar_api.fields import FieldBatch
from poplar_api.lowering import runs
from poplar_api.poplin import conv_access, conv_vertices
from poplar_api.poplin.conv_vertices import compute_one, conv_vertex
from poplar_api.types import FLOAT, HALF

R = 3
RAW = {4: np.uint32, 2: np.uint16}


def _geometries(rng) -> list[dict]:
    """Replica 0's vertices: two classes of several vertices, and single ones."""
    shared = _vertex(rng, 1, 2, 2, 3, 7, 8, 4)
    wide = _vertex(rng, 2, 3, 1, 1, 5, 16, 16)
    out = [_vertex(rng, 1, 2, 2, 3, 7, 8, 4, wls=shared["worklists"]) for _ in range(4)]
    out += [_vertex(rng, 2, 3, 1, 1, 5, 16, 16, wls=wide["worklists"]) for _ in range(3)]
    out += [
        _vertex(rng, 1, 1, 3, 2, 9, 4, 8, in_stride=2),  # strided input rows
        _vertex(rng, 1, 1, 1, 1, 1, 1, 5),  # one row, one channel
    ]
    many = _vertex(rng, 1, 1, 1, 2, 30, 8, 4, runs=12)  # rows out of order
    return [*out, many]


def _replica(rng, first: list[dict], shared_weights: bool) -> list[dict]:
    """``first``'s geometry and worklists with new values (the same weights in every
    vertex of a geometry when ``shared_weights``)."""
    out = []
    for v in first:
        new = {
            "params": v["params"].copy(),
            "worklists": [w.copy() for w in v["worklists"]],
            "in": [rng.standard_normal(x.size) for x in v["in"]],
            "weights": [rng.standard_normal(x.size) for x in v["weights"]],
            "out": [np.full(x.size, np.nan) for x in v["out"]],
        }
        out.append(new)
    if shared_weights:
        by_shape: dict[tuple, list] = {}
        for v in out:
            key = tuple(x.size for x in v["weights"]) + tuple(v["params"])
            v["weights"] = by_shape.setdefault(key, v["weights"])
    return out


def _ids(batch: FieldBatch, layout: str, rng, share: bool) -> tuple[np.ndarray, int]:
    """Element ids of the packed positions of ``batch`` and the size of the id space.

    ``regular``: in packed order after a gap; ``strided``: every third id; ``blocks``:
    each inner vector a run, the vectors in random order with gaps; ``scattered``: every
    element anywhere. ``share``: inner vectors of equal contents (shared weights) get
    the same ids."""
    n = batch.data.size
    if layout == "scattered":
        ids = rng.permutation(n + 50)[:n]
    elif layout == "regular":
        ids = np.arange(n) + 17
    elif layout == "strided":  # every third element: views would change the products
        ids = np.arange(n) * 3 + 2
    else:
        inner = batch.offsets if batch.inner_offsets is None else batch.inner_offsets
        sizes = np.diff(inner)
        order = rng.permutation(sizes.size)
        starts = np.zeros(sizes.size, np.int64)
        at = 5
        for j in order:
            starts[j] = at
            at += int(sizes[j]) + int(rng.integers(0, 4))
        ids = np.repeat(starts - inner[:-1], sizes) + np.arange(n)
    if share and batch.inner_offsets is not None:
        inner = batch.inner_offsets
        seen: dict[bytes, int] = {}
        for j in range(inner.size - 1):
            lo, hi = inner[j], inner[j + 1]
            key = batch.data[lo:hi].tobytes() + str(hi - lo).encode()
            first = seen.setdefault(key, j)
            ids[lo:hi] = ids[inner[first] : inner[first] + hi - lo]
    return ids.astype(np.int32), int(ids.max()) + 1


def _image_fields(replicas: list[dict], layout: str, fp, rng, share=False, out=np.float32) -> dict:
    """The replicas' packed batches laid out in per-field images (every replica the
    same ids), as ``ImageField``s; ``out`` is the type of the partial sums."""
    packed = [_batches(vs, fp) for vs in replicas]
    types = {"in": fp, "weights": fp, "out": out}
    fields = {}
    for name in FIELDS:
        first = packed[0][name]
        ids, space = _ids(first, layout, rng, share and name == "weights")
        dtype = np.dtype(types.get(name, first.data.dtype))
        raw = RAW.get(dtype.itemsize, np.uint16)
        image = np.zeros((len(replicas), space), raw)
        typed = image.view(dtype)
        for r, batch in enumerate(packed):
            typed[r, ids] = batch[name].data.astype(dtype)
        kernel = np.float32 if dtype.kind == "f" else dtype
        fields[name] = ImageField(
            image, dtype, ids, first.offsets, first.inner_offsets, np.dtype(kernel)
        )
    return fields


def _run(cls, fields: dict, n: int) -> np.ndarray:
    token = RUN_REPLICAS.set(fields["in"].replicas)
    try:
        return cls.computeBatch(fields, n, WORKERS)
    finally:
        RUN_REPLICAS.reset(token)


def _check(cls, replicas: list[dict], fields: dict, fp, out_type) -> None:
    """Each replica's ``out`` in the image: bit for bit the vertices run alone on its
    packed fields, and the formula's values."""
    out = fields["out"]
    for r, vertices in enumerate(replicas):
        one = _copy(_batches(vertices, fp))
        ok = [compute_one(tuple(one[f] for f in FIELDS), v) for v in range(len(vertices))]
        assert ok == [True] * len(vertices)
        want = one["out"].data.astype(out_type)
        got = out.image[r].view(out_type)[out.ids]
        np.testing.assert_array_equal(got, want)
        for v, vertex in enumerate(vertices):
            lo, hi = out.offsets[v], out.offsets[v + 1]
            for j, ref in zip(range(lo, hi), _reference(vertex, fp), strict=True):
                seg = got[out.inner_offsets[j] : out.inner_offsets[j + 1]].astype(np.float64)
                tol = 2e-2 if out_type == np.float16 else 1e-4
                np.testing.assert_allclose(seg, ref, rtol=tol, atol=tol * np.abs(ref).max())


@pytest.mark.parametrize("pieces", [False, True])
@pytest.mark.parametrize("layout", ["regular", "strided", "blocks", "scattered"])
@pytest.mark.parametrize("fp", [np.float32, np.float16])
def test_each_replica_computes_its_own_values_in_place(monkeypatch, layout, fp, pieces):
    if pieces:  # every class cut where its vectors stop lying evenly spaced
        monkeypatch.setattr(conv_access, "_PIECE_ELEMENTS", 0)
    rng = np.random.default_rng(5)
    first = _geometries(rng)
    replicas = [_replica(rng, first, shared_weights=False) for _ in range(R)]
    fields = _image_fields(replicas, layout, fp, rng, out=fp)
    packed = []
    monkeypatch.setattr(
        ImageField, "packed", lambda self: packed.append(1) or pytest.fail("packed")
    )
    accum = FLOAT if fp is np.float32 else HALF
    cls = conv_vertex("AMP", FLOAT if fp is np.float32 else HALF, accum)
    ok = _run(cls, fields, R * len(first))
    assert ok.tolist() == [True] * (R * len(first)) and not packed
    _check(cls, replicas, fields, fp, fp)
    assert not np.array_equal(fields["out"].image[0], fields["out"].image[1])


def test_weights_shared_by_every_vertex_are_read_where_they_lie():
    rng = np.random.default_rng(9)
    first = _geometries(rng)[:7]  # two classes
    replicas = [_replica(rng, first, shared_weights=True) for _ in range(R)]
    fields = _image_fields(replicas, "blocks", np.float32, rng, share=True)
    ids = fields["weights"].ids
    assert np.unique(ids).size < ids.size  # vertices read the same elements
    cls = conv_vertex("AMP", FLOAT, FLOAT)
    assert _run(cls, fields, R * len(first)).all()
    _check(cls, replicas, fields, np.float32, np.float32)


def test_replicas_whose_worklists_differ_run_packed_with_their_own_values(monkeypatch):
    rng = np.random.default_rng(13)
    first = _geometries(rng)
    replicas = [_replica(rng, first, shared_weights=False) for _ in range(R)]
    wls = replicas[1][0]["worklists"]  # replica 1's first vertex: two lists swapped
    i, j = next(
        (i, j)
        for i in range(len(wls))
        for j in range(i + 1, len(wls))
        if i // WORKERS == j // WORKERS
        and wls[i].size == wls[j].size
        and not np.array_equal(wls[i], wls[j])
    )
    wls[i], wls[j] = wls[j], wls[i]
    fields = _image_fields(replicas, "blocks", np.float32, rng)
    calls = []
    real = ImageField.packed
    monkeypatch.setattr(ImageField, "packed", lambda self: calls.append(1) or real(self))
    cls = conv_vertex("AMP", FLOAT, FLOAT)
    assert _run(cls, fields, R * len(first)).all()
    assert len(calls) == len(FIELDS)  # every field packed, as the runner packed them
    _check(cls, replicas, fields, np.float32, np.float32)


def test_an_irregular_vertex_runs_packed_and_says_so():
    rng = np.random.default_rng(17)
    first = _geometries(rng)[:4]
    first[2]["worklists"] = [w.copy() for w in first[2]["worklists"]]
    nonempty = next(i for i, w in enumerate(first[2]["worklists"]) if w.size)
    first[2]["worklists"][nonempty][0] = 99  # an output row past the vertex's rows
    replicas = [_replica(rng, first, shared_weights=False) for _ in range(R)]
    fields = _image_fields(replicas, "regular", np.float32, rng)
    before = fields["out"].image.copy()
    ok = _run(conv_vertex("AMP", FLOAT, FLOAT), fields, R * len(first))
    assert ok.tolist() == [True, True, False, True] * R
    out = fields["out"]
    v2 = out.ids[out.inner_offsets[out.offsets[2]] : out.inner_offsets[out.offsets[3]]]
    np.testing.assert_array_equal(out.image[:, v2], before[:, v2])  # nothing written


def test_an_access_is_a_view_exactly_when_its_ids_are_affine():
    ids = np.array([40, 41, 42, 50, 51, 52, 60, 61, 62, 70, 71, 72], np.int32)
    image = np.arange(2 * 100, dtype=np.uint32).reshape(2, 100)
    f = ImageField(image, np.dtype(np.uint32), ids, np.array([0, 4]), np.arange(0, 13, 3),
                   np.dtype(np.uint32))  # fmt: skip
    starts = np.array([[0, 3], [6, 9]])
    acc = f.access(starts, 3)
    assert acc == ImageAccess((2, 2, 3), 40, (20, 10, 1))
    np.testing.assert_array_equal(f.read(acc), image[:, ids].reshape(2, 2, 2, 3))
    f.write(acc, np.full((2, 2, 2, 3), 7, np.uint32), distinct=True)
    assert (image[:, ids] == 7).all() and image.sum() == 7 * 24 + (
        np.arange(200).sum() - np.arange(200).reshape(2, 100)[:, ids].sum()
    )
    bent = ids.copy()
    bent[4] = 99
    g = ImageField(image, np.dtype(np.uint32), bent, f.offsets, f.inner_offsets,
                   np.dtype(np.uint32))  # fmt: skip
    acc = g.access(starts, 3)
    assert acc.strides is None
    np.testing.assert_array_equal(acc.index, bent)
    np.testing.assert_array_equal(g.read(acc), image[:, bent].reshape(2, 2, 2, 3))


def _piece_accesses_by_every_id(f: ImageField, starts, size: int, cuts: list[int]) -> list:
    """``ImageField.piece_accesses`` as it was first written: every block's ids
    gathered and compared (the reference of the version that counts breaks)."""
    m, count = starts.shape
    ids = f.ids[starts[:, :, None] + np.arange(size)]
    fits = (np.diff(ids, axis=2) == 1).reshape(m, -1).all(axis=1)
    first = ids[:, :, 0].astype(np.int64)
    lo, hi = np.asarray(cuts[:-1], np.int64), np.asarray(cuts[1:], np.int64)
    piece = np.repeat(np.arange(lo.size), hi - lo)
    base = first[lo, 0]
    member = np.where(hi - lo > 1, first[np.minimum(lo + 1, m - 1), 0] - base, 0)
    block = first[lo, 1] - base if count > 1 else np.zeros(lo.size, np.int64)
    at = np.arange(m, dtype=np.int64) - lo[piece]
    guess = base[piece][:, None] + (at * member[piece])[:, None]
    guess = guess + np.arange(count)[None, :] * block[piece][:, None]
    fits &= (guess == first).all(axis=1)
    fits = np.logical_and.reduceat(fits, lo)
    found = []
    for k in range(lo.size):
        shape = (int(hi[k] - lo[k]), count, size)
        if fits[k]:
            found.append(ImageAccess(shape, int(base[k]), (int(member[k]), int(block[k]), 1)))
        else:
            found.append(ImageAccess(shape, index=ids[lo[k] : hi[k]].reshape(-1)))
    return found


@pytest.mark.parametrize("seed", range(40))
def test_piece_accesses_are_those_of_every_blocks_ids(seed):
    """Pieces of members whose blocks are laid out affinely (views) or not (a block
    broken by one id, a member out of step, ids shuffled), int32 and int64 ids, blocks
    of one element and more, one vector a member and several: the accesses found by
    counting breaks between neighbouring ids are those of gathering every block."""
    rng = np.random.default_rng(seed)
    m, count, size = int(rng.integers(1, 12)), int(rng.integers(1, 4)), int(rng.integers(1, 7))
    member, block = int(rng.integers(size * count, 40)), size + int(rng.integers(0, 3))
    cuts = sorted({0, m, *rng.integers(1, m + 1, int(rng.integers(0, 4))).tolist()})
    pos = np.arange(m * count * size).reshape(m, count, size)
    ids = np.empty(pos.size, np.int64)
    for k in range(len(cuts) - 1):  # each piece affine, from a base of its own
        rows = slice(cuts[k], cuts[k + 1])
        at = np.arange(cuts[k + 1] - cuts[k])[:, None, None] * member
        base = 1000 * k + int(rng.integers(0, 50))
        ids[pos[rows]] = base + at + np.arange(count)[:, None] * block + np.arange(size)
    how = rng.integers(0, 4)
    if how == 1:  # a block broken by one id
        ids[int(rng.integers(0, ids.size))] += int(rng.integers(1, 5)) * 7919
    elif how == 2:  # a member out of its piece's step
        ids[pos[int(rng.integers(0, m))]] += 3
    elif how == 3:
        ids = rng.permutation(ids)
    ids = ids.astype(np.int32 if seed % 2 else np.int64)
    image = np.zeros((2, int(ids.max()) + 1), np.uint32)
    f = ImageField(image, np.dtype(np.uint32), ids, np.arange(m + 1) * count,
                   np.arange(m * count + 1) * size, np.dtype(np.uint32))  # fmt: skip
    starts = np.arange(m * count).reshape(m, count) * size
    got = f.piece_accesses(starts, size, cuts)
    want = _piece_accesses_by_every_id(f, starts, size, cuts)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g.shape, g.base, g.strides) == (w.shape, w.base, w.strides)
        assert (g.index is None) == (w.index is None)
        if w.index is not None:
            assert g.index.dtype == w.index.dtype
            np.testing.assert_array_equal(g.index, w.index)


def test_a_view_is_made_once_per_access_and_kind_and_shows_the_image_now(monkeypatch):
    ids = np.array([40, 41, 42, 50, 51, 52, 60, 61, 62, 70, 71, 72], np.int32)
    image = np.arange(2 * 100, dtype=np.uint32).reshape(2, 100)
    f = ImageField(image, np.dtype(np.uint32), ids, np.array([0, 4]), np.arange(0, 13, 3),
                   np.dtype(np.uint32))  # fmt: skip
    acc = f.access(np.array([[0, 3], [6, 9]]), 3)
    read = f._view(acc, False)
    assert f.read(acc) is read and not read.flags.writeable
    store = f.store_view(acc, distinct=True)
    assert store is not read and store.flags.writeable  # writeable: a view of its own
    assert f.store_view(acc, distinct=True) is store
    image[1, 50] = 12345  # the image written since: the kept view shows it
    assert f.read(acc)[1, 0, 1, 0] == 12345
    other = f.access(np.array([[3, 6]]), 3)  # another access: another view
    np.testing.assert_array_equal(f.read(other), image[:, ids[3:9]].reshape(2, 1, 2, 3))
    monkeypatch.setattr(field_images, "VIEWS_KEPT", 2)  # the cache is bounded
    f.read(f.access(np.array([[0, 6]]), 3))
    assert len(f.__dict__["_views"]) <= 2


def test_distinct_accesses():
    distinct = conv_access._distinct
    assert distinct(ImageAccess((2, 3, 4), 0, (12, 4, 1)))
    assert distinct(ImageAccess((2, 3, 4), 0, (-20, 5, 1)))
    assert not distinct(ImageAccess((2, 3, 4), 0, (12, 3, 1)))  # rows overlap
    assert not distinct(ImageAccess((2, 3, 4), 0, (0, 4, 1)))  # a repeated block
    assert distinct(ImageAccess((1, 3, 4), 0, (0, 4, 1)))  # one block: stride unused


def _matmul_engine(
    replicas: int, dtype, x: np.ndarray, w: np.ndarray, options: dict | None = None
) -> np.ndarray:
    """``x @ w`` of every replica (``poplin.matMul`` on the ``tiny`` IPU Model, one IPU per
    replica, the convolution partial vertices), as the engine computes it."""
    from replica_harness import matmul_engine

    m, k, n = x.shape[1], x.shape[2], w.shape[2]
    e, device = matmul_engine(replicas, dtype, m, k, n, options)
    e.load(device)
    e.writeTensor("w", w if replicas > 1 else w[0])
    out = np.zeros((replicas, m * n), x.dtype)
    e.connectStream("in", x.reshape(replicas, -1))
    e.connectStream("out", out)
    e.run(0)
    return out.reshape(replicas, m, n)


@pytest.mark.parametrize("fp", [np.float32, np.float16])
def test_replicated_matmul_equals_each_replica_run_alone(monkeypatch, fp):
    from poplar_api import FLOAT as F
    from poplar_api import HALF as H

    dtype = F if fp is np.float32 else H
    rng = np.random.default_rng(23)
    x = rng.standard_normal((4, 12, 40)).astype(fp)
    w = rng.standard_normal((4, 40, 20)).astype(fp)
    together = _matmul_engine(4, dtype, x, w)
    alone = np.stack([_matmul_engine(1, dtype, x[r : r + 1], w[r : r + 1])[0] for r in range(4)])
    np.testing.assert_array_equal(together, alone)  # bit for bit
    want = np.einsum("rmk,rkn->rmn", x.astype(np.float64), w.astype(np.float64))
    tol = 2e-2 if fp is np.float16 else 1e-5
    np.testing.assert_allclose(together, want, rtol=tol, atol=tol * np.abs(want).max())
    # and as the fields packed by the runner give them
    monkeypatch.setattr(conv_vertices._ConvPartialBase, "readsImages", False)
    np.testing.assert_array_equal(_matmul_engine(4, dtype, x, w), together)


@pytest.mark.filterwarnings("ignore:overflow encountered in matmul:RuntimeWarning")
def test_a_partial_sum_overflowing_in_one_replica_stops_the_run_when_checked():
    from poplar_api import FLOAT as F
    from poplar_api.errors import FloatingPointException

    rng = np.random.default_rng(29)
    x = rng.standard_normal((4, 12, 40)).astype(np.float32)
    w = rng.standard_normal((4, 40, 20)).astype(np.float32)
    x[2, 3, :] = 1e30  # replica 2 only: its products overflow to infinities
    w[2] = np.abs(w[2]) + 1e10
    out = _matmul_engine(4, F, x, w)  # unchecked, the infinities are stored
    assert np.isinf(out[2, 3]).all() and np.isfinite(np.delete(out, 2, axis=0)).all()
    with pytest.raises(FloatingPointException, match=r"into its float field 'out'"):
        _matmul_engine(4, F, x, w, {"debug.floatingPointExceptions": "true"})


@pytest.mark.parametrize("size", [5, 2 * runs.ROWS_APART])  # one index, or row by row
def test_first_replica_is_replica_0s_values_only_when_every_replica_holds_them(size):
    rng = np.random.default_rng(11)
    ids = rng.permutation(3 * size)[:size]
    image = np.tile(rng.integers(0, 1 << 30, 3 * size, dtype=np.uint32), (R, 1))
    offsets = np.array([0, size // 2, size])
    field = ImageField(image, np.dtype(np.float32), ids, offsets, None, np.dtype(np.float32))
    same = field.first_replica()
    assert same is not None
    np.testing.assert_array_equal(same.data, image[0, ids].view(np.float32))
    np.testing.assert_array_equal(same.offsets, offsets)
    image[R - 1, ids[-1]] ^= 1  # one bit of one element in the last replica
    assert field.first_replica() is None
    image[R - 1, ids[-1]] ^= 1
    image[R - 1, np.setdiff1d(np.arange(3 * size), ids)[0]] ^= 1  # not a field element
    assert field.first_replica() is not None


def _over_operands(
    over: str | None, shape: tuple[int, ...], members: int
) -> tuple[np.ndarray, list]:
    """A class of ``members`` vertices (``_vertex`` arguments ``shape``) laid out in one
    FLOAT image, every vertex's output over the first elements of its own ``over``
    vectors (``in`` or ``weights``; ``between``: in the gaps between the inputs; None:
    after every operand), run in place on ``R`` replicas; the outputs' values and
    which stores went through ``write``."""
    rng = np.random.default_rng(11)
    first = _vertex(rng, *shape)
    vertices = [first] + [_vertex(rng, *shape, wls=first["worklists"]) for _ in range(members - 1)]
    packed = _batches(vertices)
    sizes = {name: packed[name].data.size for name in ("in", "weights", "out")}
    per_in, per_out = sizes["in"] // members, sizes["out"] // members
    at = 10 + (per_in + per_out) * np.arange(members)[:, None]  # a gap after each input
    ids = {"in": (at + np.arange(per_in)).reshape(-1)}
    image_size = int(at[-1, 0]) + per_in + per_out + 10
    ids["weights"] = np.arange(sizes["weights"]) + image_size
    image_size += sizes["weights"]
    if over is None:
        ids["out"] = np.arange(sizes["out"]) + image_size
        image_size += sizes["out"]
    elif over == "between":  # in the gaps: the inputs' span, none of their elements
        ids["out"] = (at + per_in + np.arange(per_out)).reshape(-1)
    else:  # vertex v's output on the first elements of its own vectors of ``over``
        per = sizes[over] // members
        assert per >= per_out
        ids["out"] = ids[over][(np.arange(members) * per)[:, None] + np.arange(per_out)]
    image = np.zeros((R, image_size), np.uint32)
    typed = image.view(np.float32)
    for name in ("in", "weights"):
        typed[:, ids[name]] = rng.standard_normal((R, sizes[name])).astype(np.float32)
    fields = {}
    for name in FIELDS:
        b = packed[name]
        if name in ids:
            img, dt = image, np.dtype(np.float32)
        else:  # worklists and params: images of their own
            dt = b.data.dtype
            img = np.zeros((R, b.data.size), RAW.get(dt.itemsize, np.uint16))
            img.view(dt)[:] = b.data
            ids[name] = np.arange(b.data.size)
        kernel = np.dtype(np.float32) if dt.kind == "f" else dt
        at = ids[name].astype(np.int32).reshape(-1)
        fields[name] = ImageField(img, dt, at, b.offsets, b.inner_offsets, kernel)
    writes = []
    plain_write = ImageField.write

    def write(self, acc, values, distinct):
        writes.append(acc)
        plain_write(self, acc, values, distinct)

    cls = conv_vertex("AMP", FLOAT, FLOAT)
    try:
        ImageField.write = write
        assert _run(cls, fields, R * members).all()
    finally:
        ImageField.write = plain_write
    return typed[:, ids["out"].reshape(-1)].copy(), writes


@pytest.mark.parametrize("over", ["in", "weights"])
@pytest.mark.parametrize(
    "shape, members",
    [
        ((1, 1, 1, 1, 2, 3, 4), 8),  # one slice per vertex: eight vertices' chains at once
        ((1, 1, 1, 1, 2, 3, 4), 3),  # one slice per vertex, one vertex after another
        ((1, 2, 2, 2, 3, 8, 8), 4),  # 8x8 groups, two output groups per vertex
    ],
)
def test_partials_stored_over_their_own_operands_are_computed_first(over, shape, members):
    # a vertex may write its partials over its own inputs or weights: every sum is
    # that of the operands as they were before the vertex ran, as the packed fields
    # (copies) give it; a class whose outputs are apart is still stored in place
    apart, stored = _over_operands(None, shape, members)
    assert stored == []  # (stored where the partials lie, not through write)
    between, stored = _over_operands("between", shape, members)
    np.testing.assert_array_equal(between.view(np.int32), apart.view(np.int32))
    assert stored == []
    got, stored = _over_operands(over, shape, members)
    np.testing.assert_array_equal(got.view(np.int32), apart.view(np.int32))
    assert stored  # (computed, then written)
