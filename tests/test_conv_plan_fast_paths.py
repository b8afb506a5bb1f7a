"""Fast paths of convolution planning, each against the computation it replaces.

* The best candidates are the first of ``numpy.lexsort`` of all of them, found by
  sorting only those whose primary key is among the smallest.
* Split rows laid out column after column hold the values of ``numpy.stack`` of the
  columns, and candidates joined in that layout those of ``numpy.concatenate``.
* The closed forms of every split computed in one compiled pass
  (:func:`~poplar_api.poplin.conv_closed_forms.closed_forms`) are those of the numpy
  form (the estimators' functions on arrays of every split), on the splits the planner
  makes for many convolutions, methods and machines, and on random splits with every
  combination of element sizes, reduction options and methods.
* A dimension's options are its distinct block sizes, largest first, found where the
  block size steps down: compared with ``numpy.unique`` of every block size.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import HALF, IPUModel
from poplar_api.poplin import conv_planner
from poplar_api.poplin.conv_closed_forms import AMP, HMAC, OUTER, VMAC, closed_forms
from poplar_api.poplin.conv_params import ConvParams
from poplar_api.poplin.conv_planner import _first_in_order, _join
from poplar_api.poplin.conv_splits import kept_dim_maps
from poplar_api.poplin.conv_splits import options as _options
from poplar_api.poplin.estimators import (
    exchange_cycles,
    outer_product_cycles,
    reduce_add_cycles,
    single_input_reduce,
)
from poplar_api.types import FLOAT


@pytest.mark.parametrize("seed", range(20))
@pytest.mark.parametrize("k", [1, 6])
def test_first_in_order_equals_the_full_lexsort(seed: int, k: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    spread = int(rng.integers(1, 20))  # few distinct values: many ties at every key
    keys = tuple(rng.integers(0, spread, n) for _ in range(4))
    np.testing.assert_array_equal(_first_in_order(keys, k), np.lexsort(keys)[:k])


def test_rows_and_joined_rows_hold_the_stacked_values() -> None:
    rng = np.random.default_rng(1)
    a = [rng.integers(0, 50, 40) for _ in range(6)]
    b = [rng.integers(0, 50, 7) for _ in range(6)]
    np.testing.assert_array_equal(np.array(a).T, np.stack(a, axis=1))
    want = np.concatenate([np.stack(a, axis=1), np.stack(b, axis=1)])
    np.testing.assert_array_equal(_join([np.array(a).T, np.array(b).T]), want)
    np.testing.assert_array_equal(_join([a[0], b[0]]), np.concatenate([a[0], b[0]]))


def _numpy_forms(method, parts, blocks, wins, c):
    """The closed forms as numpy operations on arrays of every split (the planner's
    form before they were compiled): the estimators' functions on arrays."""
    nd = len(wins)
    used = np.prod(np.stack(parts), axis=0) * c["kernel_split"]
    bg, bb, bo = blocks[0], blocks[1], blocks[2 : 2 + nd]
    bco, bci, pco, pci = blocks[-2], blocks[-1], parts[-2], parts[-1]
    p_field = np.prod(np.stack(parts[1 : 2 + nd]), axis=0)
    positions = bb * np.prod(np.stack(bo), axis=0) if nd else bb
    window = bb * np.prod(np.stack(wins), axis=0) if nd else bb
    kpos, workers, isz, psz = c["kpos"], c["workers"], c["isz"], c["psz"]
    in_elems = bg * window * bci
    w_elems = bg * bco * bci * kpos
    owned = bg * bci * c["in_elems"] // np.maximum(p_field, 1) // (pco * c["kernel_split"])
    recv = isz * (np.maximum(in_elems - owned, 0) + w_elems - w_elems // p_field)
    exchange = exchange_cycles(recv, c["exchange_rate"]) + c["phase"]
    rows = -(-positions // workers)
    icg, ocg, cgpg = c["icg"], c["ocg"], c["cgpg"]
    if method == AMP:
        compute = 50 + bg * -(-bci // icg) * -(-bco // ocg) * kpos * (
            62 + workers * (20 + rows * c["core"])
        )
    elif method == OUTER:
        chans = bg * -(-bco // ocg) * ocg
        op = outer_product_cycles(c["is_float"], rows, chans, np.full(chans.shape, ocg))
        compute = workers * op
    elif method == VMAC:
        compute = 100 + -(-bg // cgpg) * kpos * workers * (10 + rows * 3 * max(cgpg // 8, 1))
    else:
        compute = 50 + bg * kpos * workers * (16 + rows * (7 + bco * (2 + -(-bci // c["vw"]))))
    depth = pci * c["kernel_split"]
    chunk = -(-(bg * positions * bco) // depth)
    single = single_input_reduce(chunk, depth, psz, c["bank"], c["tile_bytes"], c["fast"])
    vertex = reduce_add_cycles(depth - single, chunk, psz, c["osz"], workers,
                               single_input=single, constrain_partials=c["fast"])  # fmt: skip
    red = exchange_cycles((depth - 1) * chunk * psz, c["exchange_rate"]) + c["phase"] + vertex
    reduce = np.where((depth > 1) | c["cast"], red, 0)
    per_worker = -(-chunk // workers)
    cast = workers * (np.maximum(-(-per_worker // c["pvw"]), -(-per_worker // c["ovw"])) + 26)
    reduce = np.where((depth == 1) & c["cast"], c["phase"] + cast, reduce)
    memory = isz * (in_elems + w_elems) + psz * bg * positions * bco
    return used, compute, exchange, reduce, memory


def _assert_forms_equal(method, parts, blocks, wins, consts):
    got = closed_forms(method, np.array(parts), np.array(blocks),
                       np.array(wins).reshape(len(wins), len(parts[0])), consts)  # fmt: skip
    want = _numpy_forms(method, parts, blocks, wins, consts)
    for name, g, w in zip(("used", "compute", "exchange", "reduce", "memory"), got, want,
                          strict=True):  # fmt: skip
        assert g.dtype == np.int64, name
        np.testing.assert_array_equal(g, w, err_msg=name)


#: Convolutions of every shape the planner meets: 2-D with padding and strides, 1-D
#: matMul products, depthwise (VMAC), large kernels (weight updates), a kernel split.
_CONVS = [
    (FLOAT, 32, [28, 28], [3, 3], 1, 8, 1, {"paddingLower": [1, 1], "paddingUpper": [1, 1]}),
    (FLOAT, 8, [14, 14], [14, 14], 32, 16, 1, {"paddingLower": [1, 1], "paddingUpper": [1, 1]}),
    (FLOAT, 1, [784], [1], 10, 32, 1, {}),
    (HALF, 4, [16, 16], [3, 3], 16, 16, 1, {"stride": [2, 2]}),
    (HALF, 2, [12, 12], [3, 3], 1, 1, 16, {"paddingLower": [1, 1], "paddingUpper": [1, 1]}),
    (HALF, 1, [64], [1], 1, 300, 1, {}),
    (FLOAT, 3, [9, 7], [5, 2], 6, 5, 2, {"paddingLower": [2, 0], "paddingUpper": [0, 1]}),
]


@pytest.mark.parametrize("conv", range(len(_CONVS)))
@pytest.mark.parametrize("preset,tiles", [("ipu2", 16), ("ipu2", 1472), ("ipu1", 64)])
def test_closed_forms_equal_the_numpy_form_on_the_planner_splits(conv, preset, tiles):
    """Every method's splits of the convolution as :func:`~.conv_planner._candidates`
    makes them (through the compiled pass) against the numpy form on the same splits."""
    in_t, batch, field, kernel, ci, co, groups, extra = _CONVS[conv]
    transform = {k: v for k, v in extra.items() if k != "stride"}
    stride = {"stride": extra["stride"]} if "stride" in extra else None
    params = ConvParams(in_t, batch, field, kernel, ci, co, groups, transform or None,
                        outputTransform=stride)  # fmt: skip
    model = IPUModel(preset)
    model.tilesPerIPU = tiles
    target = model.createDevice().getTarget()
    seen = []
    real = conv_planner.closed_forms

    def spy(method, parts, blocks, wins, consts):
        seen.append((method, parts.copy(), blocks.copy(), wins.copy(), dict(consts)))
        return real(method, parts, blocks, wins, consts)

    methods = [("AMP", None), "HMAC", ("HMAC", 2), (conv_planner.OUTER_PRODUCT, 4)]
    if conv_planner.vmac_groups(params):
        methods.append("VMAC")
    conv_planner.closed_forms = spy
    try:
        for partials in {in_t, FLOAT}:
            for m in methods:
                for fast, split in ((False, 1), (True, 1), (False, 2)):
                    if split > 1 and (len(kernel) < 2 or kernel[0] < 2):
                        continue
                    conv_planner._candidates(params, m, partials, target,
                                             kept_dim_maps(params), fast,
                                             kernel_split=split)  # fmt: skip
    finally:
        conv_planner.closed_forms = real
    assert {s[0] for s in seen} >= {AMP, HMAC, OUTER}
    for method, parts, blocks, wins, consts in seen:
        _assert_forms_equal(method, list(parts), list(blocks), list(wins), consts)


@pytest.mark.parametrize("seed", range(12))
def test_closed_forms_equal_the_numpy_form_on_random_splits(seed):
    """Random splits (1-D and 2-D fields) with every element size, reduction option,
    grouping and method, against the numpy form."""
    rng = np.random.default_rng(seed)
    n, nd = int(rng.integers(1, 400)), 1 + seed % 2
    parts = [rng.integers(1, 9, n) for _ in range(4 + nd)]
    blocks = [rng.integers(1, 70, n) for _ in range(4 + nd)]
    wins = [b + rng.integers(0, 4, n) for b in blocks[2 : 2 + nd]]
    for method in (AMP, OUTER, VMAC, HMAC):
        psz, osz = (2, 4)[seed % 2], (2, 4)[(seed // 2) % 2]
        consts = {
            "kernel_split": int(rng.integers(1, 4)), "kpos": int(rng.integers(1, 50)),
            "in_elems": int(rng.integers(1, 100_000)), "isz": int(rng.choice([2, 4])),
            "osz": osz, "psz": psz, "workers": int(rng.choice([6, 5])),
            "exchange_rate": float(rng.choice([4.0, 3.5, 8.0])), "phase": 190,
            "icg": int(rng.choice([1, 4, 8, 16])), "ocg": int(rng.choice([1, 4, 6, 8, 12, 16])),
            "cgpg": int(rng.choice([1, 4, 8, 16])), "core": int(rng.choice([4, 8])),
            "vw": int(rng.choice([2, 4])), "cast": bool(rng.integers(0, 2)),
            "bank": 16384, "tile_bytes": int(rng.choice([262144, 638976])),
            "fast": bool(rng.integers(0, 2)), "pvw": int(rng.choice([2, 4])),
            "ovw": int(rng.choice([2, 4])), "is_float": bool(rng.integers(0, 2)),
        }  # fmt: skip
        _assert_forms_equal(method, parts, blocks, wins, consts)


@pytest.mark.parametrize("size", [1, 7, 64, 784, 5000])
@pytest.mark.parametrize("grain", [1, 8, 16])
def test_options_are_the_distinct_block_sizes(size: int, grain: int) -> None:
    tiles = 1472
    units = -(-size // grain)
    blocks = np.unique(-(-units // np.arange(1, min(units, tiles) + 1)))[::-1] * grain
    blocks = np.minimum(blocks, size)
    parts = -(-size // blocks)
    keep = parts <= tiles
    parts, blocks = parts[keep], blocks[keep]
    if parts.size > 400:  # MAX_OPTIONS: a geometric subset
        pick = np.unique(np.round(np.geomspace(1, parts.size, 400)).astype(int) - 1)
        parts, blocks = parts[pick], blocks[pick]
    got = _options(size, tiles, grain)
    np.testing.assert_array_equal(got[0], parts)
    np.testing.assert_array_equal(got[1], blocks)
