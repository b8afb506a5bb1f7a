"""The convolution partials' products (poplar_api.poplin.conv_chain): one defined order.

Each product must be a chain of float32 fused multiply-adds over the input channels in
order, starting from zero, added to the partial sums in the order of the input groups
and kernel positions, for groups of any shape: checked against that chain worked out
here in exact rational arithmetic, rounded once per step, so no expected value comes
from the host's BLAS (whose order of summation depends on its build and processor).
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import numpy as np
import pytest

from poplar_api.poplin import conv_chain
from poplar_api.poplin.conv_chain import IN_CHANS, OUT_CHANS, chain_product, chain_products
from poplar_api.poplin.conv_vertices import _products


def _round32(q: Fraction) -> np.float32:
    """``q`` rounded to the nearest float32 (ties to even), once."""
    near = np.float32(float(q))  # float64 then float32: two roundings, corrected below
    if Fraction(float(near)) == q or not np.isfinite(near):
        return near
    up = np.nextafter(near, np.float32(np.inf))
    down = np.nextafter(near, np.float32(-np.inf))
    candidates = [down, near, up]
    errors = [abs(Fraction(float(c)) - q) for c in candidates]
    best = min(errors)
    ties = [c for c, e in zip(candidates, errors, strict=True) if e == best]
    if len(ties) == 1:
        return ties[0]
    return next(c for c in ties if not int(np.asarray(c).view(np.int32)) & 1)


def _fma(a: np.float32, b: np.float32, c: np.float32) -> np.float32:
    return _round32(Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c)))


def _geometry(
    rows: int, nig: int, nk: int, ncg: int = 1, nog: int = 1, shift: bool = False,
    oc: int = OUT_CHANS, ic: int = IN_CHANS, straight: bool = False,
):  # fmt: skip
    """A class geometry: kernel position ``k`` reads input rows ``i_r`` (in reverse
    order, or ``straight``: input row ``r`` to output row ``r``) and adds to output rows
    ``o_r`` (``shift``: each position's rows moved by ``k``), groups of ``oc`` output
    and ``ic`` input channels."""
    out_rows = rows + (nk - 1 if shift else 0)
    in_rows = rows + (nk - 1 if shift else 0)
    pos = []
    for k in range(nk):
        o = np.arange(rows) + (k if shift else 0)
        i = (np.arange(rows) if straight else np.arange(rows)[::-1]) + (k if shift else 0)
        pos.append((o.astype(np.int64), i.astype(np.int64)))
    return SimpleNamespace(
        ncg=ncg, nog=nog, nig=nig, nk=nk, in_rows=in_rows, out_rows=out_rows,
        ic=ic, oc=oc, rows=pos,
    )  # fmt: skip


def _operands(geo, lead: tuple[int, ...], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and weights of the class, of magnitudes spread over 16 binades and both
    signs, as strided views (every other vertex of a larger array)."""
    rng = np.random.default_rng(seed)

    def draw(shape):
        big = (*shape[:-2], 2 * shape[-2], shape[-1])
        scale = np.exp2(rng.integers(-8, 8, big))
        return (rng.standard_normal(big) * scale).astype(np.float32)[..., ::2, :]

    x = draw((*lead, geo.ncg * geo.nig, geo.in_rows * geo.ic))
    w = draw((*lead, geo.ncg * geo.nog * geo.nig, geo.nk * geo.oc * geo.ic))
    return x, w


def _slices(x, w, geo):
    """Yield ``(lead index, cg, og, ig, k, x slice, w slice)`` in the order of the sums."""
    lead = x.shape[:-2]
    xs = x.reshape(*lead, geo.ncg, geo.nig, geo.in_rows, geo.ic)
    ws = w.reshape(*lead, geo.ncg, geo.nog, geo.nig, geo.nk, geo.oc, geo.ic)
    for at in np.ndindex(*lead):
        for cg in range(geo.ncg):
            for og in range(geo.nog):
                for ig in range(geo.nig):
                    for k, (o_r, i_r) in enumerate(geo.rows):
                        yield at, cg, og, ig, k, o_r, xs[at][cg, ig][i_r], ws[at][cg, og, ig, k]


def _by_exact_chain(x, w, geo) -> np.ndarray:
    """The partial sums as chains of correctly rounded fused multiply-adds, each slice's
    products added by numpy's indexed addition (a repeated output row gets its last
    product only, as ``compute_one``'s ``acc[o_r] += ...`` gives it)."""
    lead = x.shape[:-2]
    acc = np.zeros((*lead, geo.ncg, geo.nog, geo.out_rows, geo.oc), np.float32)
    for at, cg, og, _, _, o_r, xa, wa in _slices(x, w, geo):
        acc[at][cg, og][o_r] += _exact_product(xa, wa)
    return acc.reshape(*lead, geo.ncg * geo.nog, geo.out_rows * geo.oc)


def _exact_product(xa: np.ndarray, wa: np.ndarray) -> np.ndarray:
    """``xa @ wa.T``, each element the chain from zero over the inner positions in order,
    every step one correctly rounded float32 fused multiply-add."""
    out = np.zeros((xa.shape[0], wa.shape[0]), np.float32)
    for r in range(xa.shape[0]):
        for o in range(wa.shape[0]):
            s = np.float32(0)
            for t in range(xa.shape[1]):
                s = _fma(xa[r, t], wa[o, t], s)
            out[r, o] = s
    return out


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.int32)


def test_round32_is_one_rounding() -> None:
    # 1 + 2**-24 + 2**-60: float64 rounds it to 1 + 2**-24 (a float32 tie, to even: 1.0);
    # rounded once it is above the tie, so 1 + 2**-23
    q = 1 + Fraction(1, 2**24) + Fraction(1, 2**60)
    assert _round32(q) == np.float32(1 + 2**-23)
    assert _round32(1 + Fraction(1, 2**24)) == np.float32(1.0)


@pytest.mark.parametrize(
    "rows, nig, nk, ncg, nog, shift, lead, oc, ic",
    [
        (9, 2, 1, 1, 1, False, (3,), 8, 8),
        (2, 2, 1, 1, 1, False, (2, 3), 8, 8),
        (4, 1, 3, 1, 2, True, (2,), 8, 8),
        (5, 2, 2, 2, 1, True, (2, 2), 8, 8),
        (1, 2, 1, 1, 1, False, (3,), 8, 8),  # one row (a BLAS gemv)
        (2, 1, 1, 1, 1, False, (2, 2), 1, 10),  # the MLP step's other classes
        (1, 1, 1, 1, 1, False, (2,), 1, 128),
        (3, 2, 2, 1, 2, True, (2,), 4, 3),
        (2, 1, 1, 1, 1, False, (2,), 8, 40),  # (BLAS's small kernel from 32)
        (1, 1, 1, 1, 1, False, (2, 10), 1, 16),  # one slice per vertex: eight at a time
        (2, 1, 1, 1, 1, False, (9,), 3, 5),
        (3, 1, 1, 1, 1, False, (4, 4), 8, 8),
    ],
)
def test_pass_is_the_fma_chain(rows, nig, nk, ncg, nog, shift, lead, oc, ic) -> None:
    geo = _geometry(rows, nig, nk, ncg, nog, shift, oc, ic)
    x, w = _operands(geo, lead, seed=rows * 10 + nk + ic)
    two = lead if len(lead) == 2 else (1, *lead)
    # NaN where nothing is stored: every output element must be (rows no position
    # adds to stay 0, as in _products)
    got = np.full((*two, ncg * nog, geo.out_rows * oc), np.nan, np.float32)
    xs = x.reshape(*two, ncg, nig, geo.in_rows, ic)
    ws = w.reshape(*two, ncg, nog, nig, nk, oc, ic)
    o_rows = np.concatenate([o for o, _ in geo.rows]).astype(np.intp)
    i_rows = np.concatenate([i for _, i in geo.rows]).astype(np.intp)
    k_start = np.arange(nk + 1, dtype=np.intp) * rows
    conv_chain._run(xs, ws, o_rows, i_rows, k_start, got)
    want = _by_exact_chain(x, w, geo)
    np.testing.assert_array_equal(_bits(got.reshape(want.shape)), _bits(want))
    # and through the partials' entry point, as the vertices call it
    np.testing.assert_array_equal(_bits(_products(x, w, geo)), _bits(want))


@pytest.mark.parametrize("rows, oc, ic", [(1, 8, 8), (9, 8, 8), (1, 1, 1), (3, 2, 33), (4, 8, 5)])
def test_one_slice_is_the_fma_chain(rows, oc, ic) -> None:
    # compute_one's product of a vertex run alone: the same chain, whatever the shape
    rng = np.random.default_rng(rows * 100 + oc + ic)
    x = rng.standard_normal((rows, ic)) * np.exp2(rng.integers(-8, 8, (rows, ic)))
    w = rng.standard_normal((oc, ic)) * np.exp2(rng.integers(-8, 8, (oc, ic)))
    x, w = x.astype(np.float32), w.astype(np.float32)
    got = chain_product(x, w)
    assert got.shape == (rows, oc) and got.dtype == np.float32
    np.testing.assert_array_equal(_bits(got), _bits(_exact_product(x, w)))


def test_the_chain_is_the_documented_order_not_another() -> None:
    # values where the order shows: in order, 1 + 2**24 rounds to 2**24 (a tie, to
    # even), and adding -2**24 gives 0; the last two summed first (or pairwise) give 1
    x = np.array([[1.0, 2.0**24, -(2.0**24)]], np.float32)
    w = np.ones((1, 3), np.float32)
    assert chain_product(x, w)[0, 0] == 0
    # a fused multiply-add rounds once: (1 + 2**-23)**2 - (1 + 2**-22) is 2**-46 exactly,
    # which a product rounded before the addition loses
    e = np.float32(1 + 2**-23)
    x = np.array([[np.float32(-(1 + 2**-22)), e]], np.float32)
    w = np.array([[1.0, e]], np.float32)
    assert chain_product(x, w)[0, 0] == np.float32(2.0**-46)


def test_repeated_output_rows_keep_the_indexed_additions_rule() -> None:
    # a kernel position adding twice to one output row: numpy's acc[o_r] += product
    # (compute_one's rule) keeps the last product; the pass keeps the same one
    geo = _geometry(4, nig=2, nk=2, shift=True)
    geo.rows = [
        (np.array([0, 1, 1, 2]), np.array([3, 2, 1, 0])),
        (np.array([2, 2, 2, 4]), np.array([0, 1, 2, 3])),
    ]
    x, w = _operands(geo, (3,), seed=17)
    got = chain_products(x, w, geo)
    np.testing.assert_array_equal(_bits(got), _bits(_by_exact_chain(x, w, geo)))
    rows = conv_chain._rows(geo)
    np.testing.assert_array_equal(rows[0], [0, 1, 2, 2, 4])
    np.testing.assert_array_equal(rows[1], [3, 1, 0, 2, 3])
    np.testing.assert_array_equal(rows[2], [0, 3, 5])


@pytest.mark.parametrize("lead", [(5,), (3, 4)])
def test_sums_stored_into_a_strided_view(lead) -> None:
    # where the partials lie in the replicas' images, the pass stores into a view of
    # them: the same bits as a new array, and nothing written outside the view
    geo = _geometry(9, nig=2, nk=1)
    x, w = _operands(geo, lead, seed=7)
    want = chain_products(x, w, geo)
    assert want is not None
    shape = (*lead, geo.ncg * geo.nog, geo.out_rows * geo.oc)
    image = np.full((*shape[:-2], 3 * shape[-2], shape[-1] + 5), -1, np.float32)
    out = image[..., ::3, 2 : 2 + shape[-1]]  # every third block, 2 elements in
    assert chain_products(x, w, geo, out) is out
    np.testing.assert_array_equal(_bits(out), _bits(want))
    outside = np.ones(image.shape, bool)
    outside[..., ::3, 2 : 2 + shape[-1]] = False
    assert (image[outside] == -1).all()
    # another dtype or shape is not stored into
    assert chain_products(x, w, geo, np.zeros(shape, np.float64)) is None
    assert chain_products(x, w, geo, np.zeros((*shape[:-1], 8), np.float32)) is None


def test_rows_found_once_per_geometry() -> None:
    # a geometry's rows are worked out once and handed to every later call; another
    # geometry of the same sizes gets its own
    geo = _geometry(4, nig=1, nk=2, shift=True)
    rows = conv_chain._rows(geo)
    assert conv_chain._rows(geo) is rows
    np.testing.assert_array_equal(rows[0], [0, 1, 2, 3, 1, 2, 3, 4])
    np.testing.assert_array_equal(rows[1], [3, 2, 1, 0, 4, 3, 2, 1])
    np.testing.assert_array_equal(rows[2], [0, 4, 8])
    other = _geometry(4, nig=1, nk=2, shift=False)
    np.testing.assert_array_equal(conv_chain._rows(other)[0], [0, 1, 2, 3, 0, 1, 2, 3])
    x, w = _operands(geo, (3,), seed=5)
    for _ in range(2):  # the kept rows give the exact chain again
        got = chain_products(x, w, geo)
        np.testing.assert_array_equal(_bits(got), _bits(_by_exact_chain(x, w, geo)))


def test_writable_and_read_only_operands_share_a_signature() -> None:
    # the pass is compiled per argument types, and a writable array is another type than
    # a read-only one: the operands reach it read-only whatever the caller holds, with
    # the same sums, and no writable-operand signature is ever compiled
    geo = _geometry(4, nig=1, nk=1)
    x, w = _operands(geo, (3,), seed=11)
    x, w = np.ascontiguousarray(x), np.ascontiguousarray(w)
    assert x.flags.writeable and w.flags.writeable
    got = chain_products(x, w, geo)
    ro_x, ro_w = x.copy(), w.copy()
    ro_x.flags.writeable = ro_w.flags.writeable = False
    np.testing.assert_array_equal(_bits(chain_products(ro_x, ro_w, geo)), _bits(got))
    assert x.flags.writeable and w.flags.writeable  # the caller's arrays are untouched
    for sig in conv_chain._chain.signatures:
        assert not sig[0].mutable and not sig[1].mutable, sig[:2]


def test_contiguous_and_strided_operands_share_one_signature() -> None:
    # C-contiguous operands and output and strided ones (views of the replicas' images)
    # are other argument types to Numba: the pass is compiled for one signature of any
    # strides, which both reach with the same sums, and for no other
    geo = _geometry(4, nig=2, nk=2, shift=True)
    x, w = _operands(geo, (3, 2), seed=13)  # strided views
    assert not x.flags.c_contiguous and not w.flags.c_contiguous
    want = _by_exact_chain(x, w, geo)
    contiguous = chain_products(np.ascontiguousarray(x), np.ascontiguousarray(w), geo)
    strided = chain_products(x, w, geo)
    image = np.full((*want.shape[:-1], want.shape[-1] * 2), -1, np.float32)
    into = chain_products(x, np.ascontiguousarray(w), geo, image[..., ::2])
    for got in (contiguous, strided, into):
        np.testing.assert_array_equal(_bits(got), _bits(want))
    assert conv_chain._chain.signatures == [conv_chain.SIGNATURE.args]


def test_half_operands_are_widened_exactly() -> None:
    # HALF inputs and weights (read in their own dtype where the partials lie): the
    # products of their float32 values
    geo = _geometry(3, nig=1, nk=1, oc=4, ic=4)
    x, w = _operands(geo, (2,), seed=19)
    xh, wh = x.astype(np.float16), w.astype(np.float16)
    assert chain_products(xh, wh, geo) is None  # the pass itself takes float32 only
    want = _by_exact_chain(xh.astype(np.float32), wh.astype(np.float32), geo)
    np.testing.assert_array_equal(_bits(_products(xh, wh, geo)), _bits(want))


@pytest.mark.parametrize("vertices", [3, 8, 9, 17])
@pytest.mark.parametrize("oc, ic", [(8, 8), (2, 5)])
def test_negative_zero_sums_and_rows_not_added_to(vertices, oc, ic) -> None:
    # a chain that ends at -0 (a product below the smallest float32) is added to the
    # zeroed partial: +0; an output row no kernel position adds to stays +0; in every path
    geo = _geometry(3, nig=1, nk=1, oc=oc, ic=ic)
    geo.out_rows = 5
    geo.rows = [(np.array([4, 0, 2]), np.array([0, 1, 2]))]
    x = np.full((vertices, 1, 3 * ic), -(2.0**-100), np.float32)
    w = np.full((vertices, 1, oc * ic), 2.0**-100, np.float32)
    x[1::2, 0, :ic] = 1.5  # other vertices' row 0 sums are not zero
    got = chain_products(x, w, geo)
    want = _by_exact_chain(x, w, geo)
    assert not np.signbit(want).any()
    np.testing.assert_array_equal(_bits(got), _bits(want))


def test_weights_of_any_inner_stride() -> None:
    # the 8x8 path transposes weights rows of unit stride by vector shuffles, others
    # element by element: both give the chain
    geo = _geometry(5, nig=2, nk=2, shift=True)
    x, w = _operands(geo, (3,), seed=23)
    wide = np.repeat(w, 2, axis=-1)
    strided = wide[..., ::2]
    assert strided.strides[-1] == 8 and np.array_equal(strided, w)
    want = _by_exact_chain(x, w, geo)
    for weights in (w, strided):
        np.testing.assert_array_equal(_bits(chain_products(x, weights, geo)), _bits(want))


@pytest.mark.parametrize(
    "rows, nig, nk, ncg, nog, lead",
    [
        (9, 2, 1, 1, 1, (2, 3)),  # the MLP step's fully connected partials
        (1, 1, 1, 1, 1, (3,)),
        (2, 3, 2, 1, 1, (2, 2)),
        (5, 2, 3, 2, 2, (2,)),
        (12, 1, 2, 1, 2, (4,)),  # the most rows kept in registers
        (13, 2, 1, 1, 1, (3,)),  # one more: the scratch path
    ],
)
def test_rows_in_place_are_the_fma_chain(rows, nig, nk, ncg, nog, lead) -> None:
    # every kernel position adding input row r to output row r: the register path
    # (up to MAX_ROWS rows, unit inner strides) gives the exact chain, and so does the
    # scratch path it falls back to (an output or weights of another inner stride)
    geo = _geometry(rows, nig, nk, ncg, nog, straight=True)
    o_rows, i_rows, k_start = conv_chain._rows(geo)
    assert conv_chain._rows_in_place(o_rows, i_rows, k_start, rows)
    assert (rows <= conv_chain.MAX_ROWS) == (rows != 13)
    x, w = _operands(geo, lead, seed=rows * 7 + nig + nk)
    want = _bits(_by_exact_chain(x, w, geo))
    np.testing.assert_array_equal(_bits(chain_products(x, w, geo)), want)
    image = np.full((*want.shape[:-1], want.shape[-1] * 2), np.nan, np.float32)
    np.testing.assert_array_equal(_bits(chain_products(x, w, geo, image[..., ::2])), want)
    wide = np.repeat(w, 2, axis=-1)[..., ::2]
    assert wide.strides[-1] == 8
    np.testing.assert_array_equal(_bits(chain_products(x, wide, geo)), want)


def test_rows_in_place_found_only_where_every_position_maps_each_row_to_itself() -> None:
    # reversed input rows, shifted rows, a position with fewer rows: not in place
    cases = [
        (_geometry(4, 1, 2, straight=True), True),
        (_geometry(4, 1, 2), False),
        (_geometry(4, 1, 2, shift=True, straight=True), False),
    ]
    short = _geometry(4, 1, 2, straight=True)
    short.rows = [short.rows[0], (short.rows[1][0][:3], short.rows[1][1][:3])]
    cases.append((short, False))
    for geo, expected in cases:
        assert conv_chain._rows_in_place(*conv_chain._rows(geo), 4) is expected


@pytest.mark.parametrize("rows, nig", [(9, 2), (1, 1), (12, 3)])
def test_register_partials_start_from_zero(rows, nig) -> None:
    # chains that end at -0 (products below the smallest float32) added to the zeroed
    # partials: +0, as the scratch path and compute_one store them
    geo = _geometry(rows, nig, 1, straight=True)
    x = np.full((5, nig, rows * 8), -(2.0**-100), np.float32)
    w = np.full((5, nig, 64), 2.0**-100, np.float32)
    x[1::2, 0, :8] = 1.5  # other vertices' row 0 sums are not zero
    got = chain_products(x, w, geo)
    want = _by_exact_chain(x, w, geo)
    assert not np.signbit(want).any()
    np.testing.assert_array_equal(_bits(got), _bits(want))
