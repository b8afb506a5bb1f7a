"""How :class:`~poplar_api.field_images.ImageField` reaches every replica's elements:
its strided views (made on the image's buffer) are those ``as_strided`` makes, for any
strides, on contiguous images and others; a write converts and overflows as stored;
replica 0's worklists are taken only when every replica holds the same bits at the
field's ids, whatever lies between them; a plan's geometries are found once.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_conv_vertices import FIELDS
from test_replica_images import R, _geometries, _image_fields, _replica

from poplar_api.field_images import ImageAccess, ImageField
from poplar_api.poplin import conv_vertices


def _reference_view(image: np.ndarray, dtype, acc: ImageAccess) -> np.ndarray:
    typed = image.view(dtype)
    item = typed.itemsize
    return np.lib.stride_tricks.as_strided(
        typed.reshape(-1)[acc.base :] if typed.flags.c_contiguous else typed[0, acc.base :],
        shape=(image.shape[0], *acc.shape),
        strides=(typed.strides[0], *(s * item for s in acc.strides)),
    )


ACCESSES = [
    ImageAccess((4, 3), 10, (5, 1)),
    ImageAccess((2, 3, 4), 60, (-20, 5, 1)),  # members in falling order
    ImageAccess((3, 2, 4), 7, (9, 0, 1)),  # a block read by every member
    ImageAccess((1,), 99, (1,)),
]


@pytest.mark.parametrize("acc", ACCESSES)
@pytest.mark.parametrize("contiguous", [True, False])
def test_a_view_is_the_strided_view_of_every_replica(acc, contiguous):
    rng = np.random.default_rng(3)
    wide = rng.standard_normal((R, 250)).astype(np.float32).view(np.uint32)
    image = wide[:, :120] if not contiguous else np.ascontiguousarray(wide[:, :120])
    field = ImageField(image, np.dtype(np.float32), np.arange(4), np.array([0, 4]), None,
                       np.dtype(np.float32))  # fmt: skip
    want = _reference_view(image, np.float32, acc).copy()
    got = field.read(acc)
    np.testing.assert_array_equal(got, want)
    assert not got.flags.writeable
    # written through the view: exactly those elements change, in every replica
    if conv_vertices_distinct(acc):
        before = image.copy()
        values = rng.standard_normal(want.shape).astype(np.float32)
        field.write(acc, values, distinct=True)
        np.testing.assert_array_equal(field.read(acc), values)
        changed = image.view(np.float32) != before.view(np.float32)
        assert changed.sum() == values.size


def conv_vertices_distinct(acc: ImageAccess) -> bool:
    from poplar_api.poplin.conv_access import _distinct

    return _distinct(acc)


def test_a_half_write_overflows_to_infinity_and_a_float_write_keeps_its_bits():
    image = np.zeros((2, 16), np.uint16)
    field = ImageField(image, np.dtype(np.float16), np.arange(16), np.array([0, 16]), None,
                       np.dtype(np.float32))  # fmt: skip
    acc = ImageAccess((2, 4), 0, (8, 1))
    values = np.full((2, 2, 4), 1e6, np.float32)
    values[1, 0, 0] = 0.5
    field.write(acc, values, distinct=True)
    got = image.view(np.float16)
    assert np.isinf(got[0, [0, 1, 2, 3, 8, 9, 10, 11]]).all() and got[1, 0] == 0.5
    wide = np.zeros((2, 16), np.uint32)
    field = ImageField(wide, np.dtype(np.float32), np.arange(16), np.array([0, 16]), None,
                       np.dtype(np.float32))  # fmt: skip
    bits = np.array([0x7FC00001, 0x00000001, 0xFF800000, 0x3F800000] * 4, np.uint32)
    field.write(acc, bits.view(np.float32).reshape(2, 2, 4), distinct=True)
    np.testing.assert_array_equal(wide[:, [0, 1, 2, 3, 8, 9, 10, 11]], bits.reshape(2, 8))


@pytest.mark.parametrize("gap", [0, 3])  # the ids one block, or with elements between
def test_first_replica_looks_at_the_ids_only(gap):
    rng = np.random.default_rng(7)
    size = 40
    ids = (np.arange(size) + gap * (np.arange(size) // 10))[rng.permutation(size)] + 5
    image = np.tile(rng.integers(0, 1 << 30, 80, dtype=np.uint32), (R, 1))
    field = ImageField(image, np.dtype(np.float32), ids, np.array([0, size]), None,
                       np.dtype(np.float32))  # fmt: skip
    np.testing.assert_array_equal(field.first_replica().data, image[0, ids].view(np.float32))
    outside = np.setdiff1d(np.arange(80), ids)
    between = outside[(outside > ids.min()) & (outside < ids.max())]
    image[R - 1, outside[0]] ^= 1  # an element before the ids
    if gap:
        image[1, between[0]] ^= 4  # and one between them
    assert field.first_replica() is not None
    image[1, ids[size // 2]] ^= 1 << 20  # one id's bits in replica 1
    assert field.first_replica() is None


def _planned_fields(rng: np.random.Generator) -> tuple[list, tuple]:
    """Regular conv partials' geometries and their replicas' fields as ``_plan`` takes
    them (in, weights and out in place; worklists and params replica 0's)."""
    first = _geometries(rng)
    replicas = [_replica(rng, first, shared_weights=False) for _ in range(R)]
    fields = _image_fields(replicas, "regular", np.float32, rng, out=np.float32)
    a, b, c, wl, pr = (fields[f] for f in FIELDS)
    return first, (a, b, c, wl.first_replica(), pr.first_replica())


def test_a_plans_geometries_are_found_once_and_are_each_vertexs():
    first, packed = _planned_fields(np.random.default_rng(5))
    _, classes = conv_vertices._plan(packed, len(first), 1)
    shapes = conv_vertices._shapes(packed, classes)
    assert len(shapes) == len(classes) > 1
    for geo, (_, v) in zip(shapes, classes, strict=True):
        want = conv_vertices._geometry(packed, v)
        for name in ("ncg", "nog", "nig", "in_rows", "out_rows", "ic", "oc", "nk"):
            assert getattr(geo, name) == getattr(want, name)
        for (o_r, i_r), (wo, wi) in zip(geo.rows, want.rows, strict=True):
            np.testing.assert_array_equal(o_r, wo)
            np.testing.assert_array_equal(i_r, wi)
    assert conv_vertices._shapes(packed, classes) is shapes  # the same plan: kept
    assert conv_vertices._shapes(packed, list(classes)) is not shapes  # another: found


def test_the_geometries_of_a_plan_not_kept_are_not_kept(monkeypatch):
    """A plan too large to keep gives new classes on every run: their geometries are
    found, equal to those of a kept plan, and not kept (nothing would find them again,
    and they hold the plan's classes)."""
    first, packed = _planned_fields(np.random.default_rng(6))
    monkeypatch.setattr(conv_vertices, "_PLANS", {})
    monkeypatch.setattr(conv_vertices, "_SHAPES", {})
    monkeypatch.setattr(conv_vertices, "_plans_bytes", [0])
    monkeypatch.setattr(conv_vertices, "_PLANS_BYTES", 0)  # every plan too large to keep
    _, classes = conv_vertices._plan(packed, len(first), 1)
    shapes = conv_vertices._shapes(packed, classes)
    assert not conv_vertices._PLANS and not conv_vertices._SHAPES
    want = [conv_vertices._geometry(packed, v) for _, v in classes]
    assert [(g.ncg, g.nog, g.nig, g.in_rows, g.out_rows) for g in shapes] == [
        (g.ncg, g.nog, g.nig, g.in_rows, g.out_rows) for g in want
    ]


def test_tiled_offsets_are_each_replica_s_copy_shifted():
    """``tiled_offsets`` against the copies laid end to end, on fuzzed layouts: empty
    ones, vectors of no element, int32 or int64 offsets, one replica or several."""
    from poplar_api.field_images import tiled_offsets

    rng = np.random.default_rng(4)
    for _ in range(200):
        n = int(rng.integers(0, 30))
        offsets = np.concatenate(([0], np.cumsum(rng.integers(0, 5, n))))
        offsets = offsets.astype(rng.choice([np.int32, np.int64]))
        replicas = int(rng.integers(1, 6))
        step = int(offsets[-1])
        want = np.concatenate(
            [offsets[:-1].astype(np.int64) + r * step for r in range(replicas)]
            + [np.array([step * replicas], np.int64)]
        )
        got = tiled_offsets(offsets, replicas)
        assert got.dtype == np.int64 and got.tolist() == want.tolist()
