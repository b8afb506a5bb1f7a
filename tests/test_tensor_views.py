"""Tensor views: every view op agrees with the same op written in numpy.

A tensor over ``np.arange(n).reshape(shape)`` has element id == row-major position, so
after any chain of views its index array must equal the numpy expression applied to
that arange. The numpy side of each op is written here independently of the
implementation (take/concatenate/tile/repeat/explicit permutations).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from poplar_api.errors import PoplarError, TensorError, TensorIndexError, TypeMismatchError
from poplar_api.tensor import MAX_NAME_LENGTH, Interval, Tensor, append, concat
from poplar_api.types import FLOAT, HALF, INT

GRAPH = object()


def make(shape: tuple[int, ...], name: str = "t", graph: object = GRAPH, etype=FLOAT):
    ref = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    return Tensor(graph, etype, ref, name), ref


def along(d: int, item) -> tuple:
    """Index tuple selecting ``item`` in dimension ``d`` and everything elsewhere."""
    return (slice(None),) * d + (item,)


# ----------------------------------------------------------------------------------
# One view op each: draw parameters, apply to the Tensor and to the numpy reference.
# Each returns (tensor, reference) or None when the op does not apply to this shape.


def draw_range(data, ref):
    """A dimension ``d`` of ``ref`` and a range ``b <= e`` of its indices."""
    d = data.draw(st.integers(0, ref.ndim - 1))
    b = data.draw(st.integers(0, ref.shape[d]))
    e = data.draw(st.integers(b, ref.shape[d]))
    return d, b, e


def op_slice(data, t, ref):
    if ref.ndim == 0:
        return None
    d, b, e = draw_range(data, ref)
    form = data.draw(st.sampled_from(["ints", "interval"]))
    view = t.slice(b, e, d) if form == "ints" else t.slice(Interval(b, e), dimension=d)
    return view, np.take(ref, np.arange(b, e, dtype=np.int64), axis=d)


def op_slice_multi(data, t, ref):
    if ref.ndim == 0:
        return None
    bs = [data.draw(st.integers(0, s)) for s in ref.shape]
    es = [data.draw(st.integers(b, s)) for b, s in zip(bs, ref.shape, strict=True)]
    expected = ref[np.ix_(*[np.arange(b, e) for b, e in zip(bs, es, strict=True)])]
    return t.slice(bs, es), expected


def op_slices(data, t, ref):
    if ref.ndim == 0:
        return None
    d, b, e = draw_range(data, ref)
    parts = t.slices([Interval(0, b), (b, e), Interval(e, ref.shape[d])], d)
    # Three consecutive slices joined again give back the whole tensor.
    assert [p.dim(d) for p in parts] == [b, e - b, ref.shape[d] - e]
    return concat(parts, d), ref


def op_index_int(data, t, ref):
    if ref.ndim == 0 or ref.shape[0] == 0:
        return None
    i = data.draw(st.integers(-ref.shape[0], ref.shape[0] - 1))
    return t[i], np.take(ref, i, axis=0)


@st.composite
def _basic_key(draw, shape):
    """A valid basic index: items for the leading dims (optionally then ``...``), or
    ``...`` then items for the trailing dims; ``None`` may go anywhere."""
    k = draw(st.integers(0, len(shape)))
    trailing = draw(st.booleans())
    items = []
    for size in shape[len(shape) - k :] if trailing else shape[:k]:
        if size > 0 and draw(st.booleans()):
            items.append(draw(st.integers(-size, size - 1)))
        else:
            bound = st.none() | st.integers(-size - 2, size + 2)
            step = draw(st.sampled_from([None, 1, 2, -1, -3]))
            items.append(slice(draw(bound), draw(bound), step))
    if trailing:
        items.insert(0, Ellipsis)
    elif draw(st.booleans()):
        items.append(Ellipsis)
    if draw(st.booleans()):
        items.insert(draw(st.integers(0, len(items))), None)
    return tuple(items)


def op_getitem(data, t, ref):
    key = data.draw(_basic_key(ref.shape))
    return t[key], ref[key]


def op_reshape(data, t, ref):
    dims = data.draw(st.permutations(list(ref.shape)))
    ones = data.draw(st.integers(0, 2))
    new = list(dims) + [1] * ones
    new = data.draw(st.permutations(new))
    return t.reshape(new), np.reshape(ref, new)


def op_flatten(data, t, ref):
    if ref.ndim == 0 or data.draw(st.booleans()):
        return t.flatten(), ref.ravel()
    b = data.draw(st.integers(0, ref.ndim - 1))
    e = data.draw(st.integers(b + 1, ref.ndim))
    shape = ref.shape
    merged = (*shape[:b], math.prod(shape[b:e]), *shape[e:])
    return t.flatten(b, e), ref.reshape(merged)


def op_transpose(data, t, ref):
    if ref.ndim != 2:
        return None
    return t.transpose(), ref.T


def op_dim_shuffle(data, t, ref):
    perm = data.draw(st.permutations(range(ref.ndim)))
    return t.dimShuffle(perm), np.transpose(ref, perm)


def op_dim_roll(data, t, ref):
    if ref.ndim == 0:
        return None
    i = data.draw(st.integers(0, ref.ndim - 1))
    j = data.draw(st.integers(0, ref.ndim - 1))
    perm = [k for k in range(ref.ndim) if k != i]
    perm.insert(j, i)
    return t.dimRoll(i, j), np.transpose(ref, perm)


def op_dim_shuffle_partial(data, t, ref):
    if ref.ndim == 0:
        return None
    src = data.draw(st.lists(st.integers(0, ref.ndim - 1), max_size=ref.ndim, unique=True))
    dst = data.draw(
        st.lists(st.integers(0, ref.ndim - 1), min_size=len(src), max_size=len(src), unique=True)
    )
    # Written out: place each source dimension at its destination, fill the rest in order.
    order: list[int | None] = [None] * ref.ndim
    for s, d in zip(src, dst, strict=True):
        order[d] = s
    rest = iter(k for k in range(ref.ndim) if k not in src)
    perm = [next(rest) if o is None else o for o in order]
    return t.dimShufflePartial(src, dst), np.transpose(ref, perm)


def op_reverse(data, t, ref):
    if ref.ndim == 0:
        return None
    d = data.draw(st.integers(0, ref.ndim - 1))
    return t.reverse(d), ref[along(d, slice(None, None, -1))]


def op_subsample(data, t, ref):
    if ref.ndim == 0:
        return None
    d = data.draw(st.integers(0, ref.ndim - 1))
    s = data.draw(st.integers(1, 4))
    return t.subSample(s, d), np.take(ref, np.arange(0, ref.shape[d], s, dtype=np.int64), axis=d)


def op_broadcast(data, t, ref):
    if ref.ndim == 0 or ref.size > 200:
        return None
    d = data.draw(st.integers(0, ref.ndim - 1))
    n = data.draw(st.integers(0, 3))
    reps = [1] * ref.ndim
    reps[d] = n
    return t.broadcast(n, d), np.tile(ref, reps)


def op_upsample(data, t, ref):
    if ref.ndim == 0 or ref.size > 200:
        return None
    d = data.draw(st.integers(0, ref.ndim - 1))
    s = data.draw(st.integers(0, 3))
    return t.upsample(s, d), np.repeat(ref, s, axis=d)


def op_expand(data, t, ref):
    if ref.ndim >= 5:
        return None
    idx = data.draw(st.lists(st.integers(0, ref.ndim), max_size=2))
    expected = ref
    for i in sorted(idx, reverse=True):
        expected = np.expand_dims(expected, i)
    return t.expand(idx), expected


def op_squeeze(data, t, ref):
    ones = [i for i, s in enumerate(ref.shape) if s == 1]
    sel = data.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    return t.squeeze(sel), np.squeeze(ref, axis=tuple(sel))


def op_concat(data, t, ref):
    if ref.ndim == 0 or ref.size > 200:
        return None
    d = data.draw(st.integers(0, ref.ndim - 1))
    flipped = ref[along(d, slice(None, None, -1))]
    if data.draw(st.booleans()):
        return concat(t, t.reverse(d), d), np.concatenate([ref, flipped], axis=d)
    return concat([t, t.reverse(d), t], d), np.concatenate([ref, flipped, ref], axis=d)


def op_append(data, t, ref):
    if ref.ndim == 0 or ref.size > 200:
        return None
    d = data.draw(st.integers(0, ref.ndim - 1))
    if ref.shape[d] == 0:
        return None
    row = t.slice(0, 1, d).squeeze([d])
    return append(t, row, d), np.concatenate([ref, np.take(ref, [0], axis=d)], axis=d)


OPS = [
    op_slice,
    op_slice_multi,
    op_slices,
    op_index_int,
    op_getitem,
    op_reshape,
    op_flatten,
    op_transpose,
    op_dim_shuffle,
    op_dim_roll,
    op_dim_shuffle_partial,
    op_reverse,
    op_subsample,
    op_broadcast,
    op_upsample,
    op_expand,
    op_squeeze,
    op_concat,
    op_append,
]

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=4).map(tuple)


def check_matches(t: Tensor, expected: np.ndarray) -> None:
    assert t.shape() == list(expected.shape)
    assert t.rank() == expected.ndim
    assert t.numElements() == expected.size
    assert t.index.dtype == np.int64
    np.testing.assert_array_equal(t.index, expected)
    np.testing.assert_array_equal(t.flat_index(), expected.reshape(-1))
    assert not t.index.flags.writeable
    assert not t.flat_index().flags.writeable
    flat = expected.reshape(-1)
    assert t.containsAliases() == (np.unique(flat).size != flat.size)
    consecutive = flat.size < 2 or all(b == a + 1 for a, b in itertools.pairwise(flat))
    assert t.isContiguous() == consecutive


@settings(max_examples=300, deadline=None)
@given(shape=shapes, data=st.data())
def test_random_view_chains_match_numpy(shape, data) -> None:
    t, ref = make(shape, "base")
    for _ in range(data.draw(st.integers(1, 5))):
        op = data.draw(st.sampled_from(OPS))
        result = op(data, t, ref)
        if result is None:
            continue
        t, ref = result
        check_matches(t, ref)
        assert t.elementType() is FLOAT
        assert t.graph is GRAPH
        assert t.name.startswith(("base", "concat(", "append("))
        assert len(t.name) <= MAX_NAME_LENGTH + len("base.(...)")


@settings(max_examples=100, deadline=None)
@given(shape=shapes.filter(lambda s: len(s) >= 1), data=st.data())
def test_iteration_yields_rows(shape, data) -> None:
    t, ref = make(shape)
    rows = list(t)
    assert len(rows) == len(t) == shape[0]
    for row, expected in zip(rows, ref, strict=True):
        np.testing.assert_array_equal(row.index, expected)


# ----------------------------------------------------------------------------------
# Tutorial uses.


def test_tut1_multi_dimensional_slice() -> None:
    v3, _ = make((4, 4), "v3")
    view = v3.slice([1, 1], [2, 4])
    # Row 1, columns 1..3 of a 4x4 row-major arange: 1*4+1 .. 1*4+3.
    np.testing.assert_array_equal(view.index, [[5, 6, 7]])
    assert view.name == "v3.slice([1,1],[2,4])"
    assert view.numElements() == 3


def test_tut2_transpose() -> None:
    v2, _ = make((2, 2), "v2")
    np.testing.assert_array_equal(v2.transpose().index, [[0, 2], [1, 3]])
    assert v2.transpose().name == "v2.transpose()"


def test_tut3_vertex_inputs() -> None:
    v1, _ = make((4,), "v1")
    # Vertex i reads v1.slice(i, 4) and writes v2[i].
    assert [v.index.tolist() for v in (v1.slice(i, 4) for i in range(4))] == [
        [0, 1, 2, 3],
        [1, 2, 3],
        [2, 3],
        [3],
    ]
    assert v1[2].rank() == 0 and int(v1[2].index) == 2
    assert v1[2].name == "v1[2]"


def test_tut7_row_segment() -> None:
    matrix, _ = make((3, 10), "matrix")
    seg = matrix[2][4:7]
    # Row 2 starts at id 20; columns 4..6.
    np.testing.assert_array_equal(seg.index, [24, 25, 26])
    assert seg.isContiguous()


# ----------------------------------------------------------------------------------
# Views do not copy; the index is read-only; the caller's array is untouched.


@pytest.mark.parametrize(
    "view",
    [
        lambda t: t.slice(1, 3, 1),
        lambda t: t.transpose(),
        lambda t: t.dimShuffle([1, 0]),
        lambda t: t.reverse(0),
        lambda t: t.subSample(2, 1),
        lambda t: t.expand([0, 2]),
        lambda t: t[1],
        lambda t: t[..., ::-2],
        lambda t: t.reshape([2, 8]),
        lambda t: t.flatten(),
        lambda t: t.slice(0, 1).broadcast(5, 0),
        lambda t: t.slice(0, 1).squeeze([0]),
        lambda t: t.slice(1, 3, 1).transpose().reverse(1),
    ],
)
def test_views_share_the_base_index(view) -> None:
    t, _ = make((4, 4))
    v = view(t)
    assert np.shares_memory(v.index, t.index)


def test_index_is_read_only_and_callers_array_is_untouched() -> None:
    ids = np.arange(6, dtype=np.int64).reshape(2, 3)
    t = Tensor(GRAPH, INT, ids, "x")
    assert ids.flags.writeable
    with pytest.raises(ValueError):
        t.index[0, 0] = 5
    with pytest.raises(ValueError):
        t.transpose().index[0, 0] = 5


def test_flat_index_is_cached_and_int64() -> None:
    t, _ = make((3, 4))
    v = t.transpose()
    assert v.flat_index() is v.flat_index()
    assert v.flat_index().dtype == np.int64
    np.testing.assert_array_equal(v.flat_index(), [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11])


def test_constructor_accepts_other_integer_dtypes() -> None:
    t = Tensor(GRAPH, HALF, np.array([[3, 4]], dtype=np.uint16), "h")
    assert t.index.dtype == np.int64
    assert t.shape() == [1, 2]


# ----------------------------------------------------------------------------------
# Queries.


def test_broadcast_tiles_whole_tensor_and_upsample_repeats_elements() -> None:
    t, _ = make((2, 3))
    # [[0,1,2],[3,4,5]] broadcast twice along dim 1: each row repeated end to end.
    np.testing.assert_array_equal(t.broadcast(2, 1).index, [[0, 1, 2, 0, 1, 2], [3, 4, 5, 3, 4, 5]])
    # upsample repeats each element in place (Poplar's example).
    np.testing.assert_array_equal(t.upsample(2, 1).index, [[0, 0, 1, 1, 2, 2], [3, 3, 4, 4, 5, 5]])
    assert t.broadcast(2, 1).containsAliases()
    assert not t.broadcast(1, 1).containsAliases()


def test_expand_and_squeeze_positions() -> None:
    t, _ = make((2, 3))
    # Indices are positions in the original dimensions: before dim 0 and before "dim 2"
    # (the end); repeating an index inserts two singleton dimensions there.
    assert t.expand([0, 2]).shape() == [1, 2, 3, 1]
    assert t.expand([1, 1]).shape() == [2, 1, 1, 3]
    assert t.expand([0, 2]).squeeze([0, 3]).shape() == [2, 3]


def test_contiguity() -> None:
    t, _ = make((2, 3))
    assert t.isContiguous()
    assert t[1].isContiguous()
    assert not t.transpose().isContiguous()
    assert not t.reverse(1).isContiguous()
    assert t.slice(0, 0, 1).isContiguous()  # empty


def test_intersects_with() -> None:
    t, _ = make((4, 4))
    assert t[0].intersectsWith(t.transpose()[0])  # share element 0
    assert not t[0].intersectsWith(t[1])
    other, _ = make((4, 4), graph=object())
    assert not t.intersectsWith(other)


def test_equality_is_same_elements_same_shape() -> None:
    t, _ = make((3, 3))
    assert t.slice(0, 2) == t[0:2]
    assert hash(t.slice(0, 2)) == hash(t[0:2])
    assert t != t.reverse(0)
    assert t.flatten() != t
    other, _ = make((3, 3), graph=object())
    assert t != other


def test_repr_and_len() -> None:
    t, _ = make((3, 2), "w")
    assert repr(t) == "Tensor('w', FLOAT, shape=[3, 2])"
    assert len(t) == 3
    assert bool(make((0,))[0])  # empty tensors are still valid references


def test_interval_accessors() -> None:
    iv = Interval(2, 7)
    assert (iv.begin(), iv.end(), iv.size()) == (2, 7, 5)
    assert iv == Interval(2, 7) and iv != Interval(2, 8)
    assert repr(iv) == "Interval(2, 7)"


def test_long_view_chains_keep_short_names() -> None:
    t, _ = make((2, 2), "weights")
    for _ in range(40):
        t = t.transpose()
    # The name keeps the root and the most recent ops, within the length limit.
    assert t.name.startswith("weights.(...).transpose()")
    assert len(t.name) <= MAX_NAME_LENGTH


def test_concat_names_and_single_tensor() -> None:
    a, _ = make((2,), "a")
    assert concat([a]) is a
    b = Tensor(GRAPH, FLOAT, np.array([7, 8]), "b")
    joined = concat(a, b)
    assert joined.name == "concat(a,b)"
    np.testing.assert_array_equal(joined.index, [0, 1, 7, 8])
    np.testing.assert_array_equal(concat([a, b], 0).index, [0, 1, 7, 8])


# ----------------------------------------------------------------------------------
# Errors: raised at the call, naming the tensor, the argument and the valid range.

V3_LABEL = "tensor 'v3' (shape [4,4], float)"


def v3() -> Tensor:
    return make((4, 4), "v3")[0]


@pytest.mark.parametrize(
    ("call", "error", "fragments"),
    [
        (lambda t: t.slice(2, 5, 1), TensorIndexError, ["[2, 5)", "dimension 1", "<= 4"]),
        (lambda t: t.slice(3, 2), TensorIndexError, ["[3, 2)", "begin <= end"]),
        (lambda t: t.slice(0, 1, 2), TensorIndexError, ["dimension 2", "0..1"]),
        (lambda t: t.slice(-1, 2), TensorIndexError, ["[-1, 2)"]),
        (lambda t: t.slice([0], [1]), TensorError, ["one begin and one end per dimension"]),
        (lambda t: t.slice([0, 0], [1, 9]), TensorIndexError, ["[0, 9)", "dimension 1"]),
        (lambda t: t.slice(1), TypeMismatchError, ["needs an end"]),
        (lambda t: t.slice(0.5, 2), TypeMismatchError, ["slice begin", "float"]),
        (lambda t: t[4], TensorIndexError, ["index 4", "-4..3"]),
        (lambda t: t[0, -5], TensorIndexError, ["index -5", "dimension 1"]),
        (lambda t: t[0, 0, 0], TensorIndexError, ["3 dimensions", "rank 2"]),
        (lambda t: t[[0, 1]], TypeMismatchError, ["list", "no gather"]),
        (lambda t: t[::0], TensorError, ["step of 0"]),
        (lambda t: t.reshape([3, 5]), TensorError, ["16 elements", "[3,5]"]),
        (lambda t: t.reshape([-1, 4]), TensorError, [">= 0"]),
        (lambda t: t.dimShuffle([0, 0]), TensorError, ["[0, 0]", "permutation"]),
        (lambda t: t.dimShuffle([0, 2]), TensorError, ["[0, 2]", "0..1"]),
        (lambda t: t.dimRoll(2), TensorIndexError, ["dimIdx 2", "0..1"]),
        (lambda t: t.flatten(1, 1), TensorIndexError, ["flatten(1, 1)", "dimBegin < dimEnd"]),
        (lambda t: t.flatten(0, 3), TensorIndexError, ["dimEnd 3", "0..2"]),
        (lambda t: t.expand([3]), TensorIndexError, ["expand index 3", "0..2"]),
        (lambda t: t.squeeze([1]), TensorError, ["dimension 1 has size 4"]),
        (lambda t: t.broadcast(-1, 0), TensorError, ["N must be >= 0", "-1"]),
        (lambda t: t.broadcast(2, 5), TensorIndexError, ["dim 5", "0..1"]),
        (lambda t: t.subSample(0, 0), TensorError, ["stride must be >= 1"]),
        (lambda t: t.upsample(-2, 1), TensorError, ["scale must be >= 0"]),
        (lambda t: t.reverse(2), TensorIndexError, ["dimension 2", "0..1"]),
        (lambda t: t.dim(2), TensorIndexError, ["dimension 2", "0..1"]),
        (lambda t: append(t, t, 0), TensorError, ["rank 1"]),
    ],
)
def test_errors_name_the_tensor(call, error, fragments) -> None:
    with pytest.raises(error) as err:
        call(v3())
    msg = str(err.value)
    assert V3_LABEL in msg
    for fragment in fragments:
        assert fragment in msg
    assert isinstance(err.value, PoplarError)


def test_transpose_of_rank_3_names_tensor_and_hints() -> None:
    t, _ = make((2, 3, 4), "cube")
    with pytest.raises(TensorError) as err:
        t.transpose()
    msg = str(err.value)
    assert "'cube'" in msg and "[2,3,4]" in msg and "rank 3" in msg and "dimShuffle" in msg


def test_concat_shape_mismatch() -> None:
    a, _ = make((2, 3), "a")
    b, _ = make((2, 4), "b")
    with pytest.raises(TensorError) as err:
        concat([a, b], 0)
    msg = str(err.value)
    assert "'a'" in msg and "'b'" in msg and "[2,3]" in msg and "[2,4]" in msg
    # Along dimension 1 the same pair is compatible: 3 + 4 columns.
    assert concat([a, b], 1).shape() == [2, 7]


def test_concat_rank_mismatch() -> None:
    a, _ = make((2, 3), "a")
    b, _ = make((6,), "b")
    with pytest.raises(TensorError, match="'b'"):
        concat(a, b)


def test_concat_type_mismatch_names_both() -> None:
    a, _ = make((2,), "a", etype=FLOAT)
    b, _ = make((2,), "b", etype=INT)
    with pytest.raises(TypeMismatchError) as err:
        concat(a, b)
    msg = str(err.value)
    assert "'a'" in msg and "'b'" in msg and "float" in msg and "int" in msg


def test_concat_of_different_graphs_names_both() -> None:
    g1, g2 = object(), object()
    a, _ = make((2,), "a", graph=g1)
    b, _ = make((2,), "b", graph=g2)
    with pytest.raises(TensorError) as err:
        concat([a, b])
    msg = str(err.value)
    assert "'a'" in msg and "'b'" in msg and "different graphs" in msg
    assert repr(g1) in msg and repr(g2) in msg


def test_concat_argument_errors() -> None:
    a, _ = make((2,), "a")
    with pytest.raises(TensorError, match="empty"):
        concat([])
    with pytest.raises(TypeMismatchError, match="item 1"):
        concat([a, "b"])  # type: ignore[list-item]
    with pytest.raises(TypeMismatchError, match="second argument"):
        concat(a, 0)  # type: ignore[arg-type]
    scalar = a[0]
    with pytest.raises(TensorIndexError, match="rank 0"):
        concat([scalar, scalar])


def test_rank_0_has_no_length() -> None:
    s = make((3,), "s")[0][1]
    with pytest.raises(TensorError, match="rank-0"):
        len(s)
    with pytest.raises(TensorError, match="rank-0"):
        list(s)


@pytest.mark.parametrize(
    ("args", "error", "fragment"),
    [
        ((GRAPH, FLOAT, np.array([0.5, 1.5]), "f"), TypeMismatchError, "dtype float64"),
        ((GRAPH, FLOAT, np.array([0, -3]), "neg"), TensorError, "found -3"),
        ((GRAPH, "float", np.array([0]), "x"), TypeMismatchError, "element_type"),
        ((GRAPH, FLOAT, np.array([0]), 7), TypeMismatchError, "name must be a str"),
    ],
)
def test_constructor_errors(args, error, fragment) -> None:
    with pytest.raises(error, match=fragment):
        Tensor(*args)


def test_interval_rejects_reversed_range() -> None:
    with pytest.raises(TensorError, match=r"Interval\(3, 1\)"):
        Interval(3, 1)


def test_concat_of_interleaved_consecutive_runs() -> None:
    """Tensors of consecutive ids that are not one run (constants made in turn with
    others) join to exactly their ids in order, keeping the other dimensions."""
    starts, rows = [10, 0, 40, 7, 30], [2, 1, 0, 3, 1]
    parts = [
        Tensor._consecutive(GRAPH, FLOAT, s, (r, 2), f"c{s}")
        for s, r in zip(starts, rows, strict=True)
    ]
    joined = concat(parts)
    expected = np.concatenate(
        [np.arange(s, s + 2 * r).reshape(r, 2) for s, r in zip(starts, rows, strict=True)]
    )
    assert joined.shape() == [7, 2]
    np.testing.assert_array_equal(joined._index, expected)
    np.testing.assert_array_equal(concat(parts[3:]).flat_index(), [7, 8, 9, 10, 11, 12, 30, 31])
