"""The terms of every FLOAT AMP partition computed in one compiled pass
(:func:`~poplar_api.poplin.poplibs_float_terms.partition_terms`, as
:func:`~poplar_api.poplin.poplibs_float_conv2d.form_costs` packs its constants) are those
of the numpy form they replace: the exchanges (``_exchange``), the input range
(``_input_range``), the transforms, the kernel's padding
(:func:`~poplar_api.poplin.poplibs_amp_estimates.amp_padding_estimate`), the least
partial sums (with :func:`~poplar_api.poplin.poplibs_float_partials._nx1_floor`) and the
temporary bytes, each computed here on arrays of every partition. The cases cover every
form and swapped form of convolutions of several shapes, every AMP candidate, floors and
full costs, the transforms asked for or not, skipped terms, and channels given per
partition (a serial split's iterations costed together), padded to the groupings and not.
"""

from __future__ import annotations

import numpy as np
import pytest

from poplar_api import FLOAT, Graph, IPUModel, poplin
from poplar_api.poplin import poplibs_float_conv2d as pfc
from poplar_api.poplin.poplibs_amp_estimates import amp_padding_estimate
from poplar_api.poplin.poplibs_conv2d_model import _input_range
from poplar_api.poplin.poplibs_float_candidates import (
    FLOAT_LOAD_ELEMS,
    FLOAT_WEIGHTS_PER_CONV_UNIT,
    amp_candidates,
)
from poplar_api.poplin.poplibs_float_partials import _nx1_floor
from poplar_api.poplin.poplibs_float_terms import ROWS
from poplar_api.poplin.poplibs_matmul_model import _exchange


def _numpy_rows(params, target, vertex, splits, rearrange, floor, skip, ci, co):
    """The terms as numpy operations on arrays of every partition (form_costs' form
    before they were compiled)."""
    units, icg, ocg = vertex
    height = FLOAT_WEIGHTS_PER_CONV_UNIT // icg
    size, workers = FLOAT.size, target.getNumWorkerContexts()
    out_shape = [int(x) for x in params.getOutputFieldShape()]
    kernel = [int(x) for x in params.kernelShape]
    ci_g, co_g = -(-ci // icg), -(-co // ocg)
    bs, fh, fw = splits["batchSplit"], splits["fieldSplit[0]"], splits["fieldSplit[1]"]
    ks = splits["kernelSplit[0]"]
    po, pi = splits["outChanSplit.parallel"], splits["inChanSplit.parallel"]
    bt = -(-params.batchSize // bs)
    ht, wt = -(-out_shape[0] // fh), -(-out_shape[1] // fw)
    kh = -(-kernel[0] // ks)
    cit, cot = -(-ci_g // pi) * icg, -(-co_g // po) * ocg
    used = bs * fh * fw * ks * po * pi
    inputs = _input_range(ht, kh, 0, params) * _input_range(wt, kernel[1], 1, params) * bt * cit
    weights = kh * kernel[1] * cit * cot
    outputs = ht * wt * bt * cot
    share = target.getTilesPerSharedExchangeBus()
    mult = np.where((share > 1) & (po % share == 0), 2, 1)
    x_in = _exchange(inputs - inputs // po, size, target, mult) * (not floor)
    x_w = _exchange(weights - weights // (fh * fw * bs), size, target)
    x_p = _exchange(outputs, size, target)
    memcpy, xbpc = target.getDataPathWidth() // 8, target.getExchangeBytesPerCycle()
    pad_in, pad_out = pfc._padded(ci, icg), pfc._padded(co, ocg)
    zero = np.zeros(used.shape, np.int64)

    def copy(b, rate, f):
        return -(-(b * 5) // (rate * f))

    def xch(b):
        return np.ceil(b / xbpc).astype(np.int64)

    whole_in = (int(_input_range(out_shape[0], kernel[0], 0, params))
                * int(_input_range(out_shape[1], kernel[1], 1, params)))  # fmt: skip
    f_io = pfc._scale(ci * co)
    tr_in = tr_w = tr_out = in_b = w_b = out_b = zero
    if rearrange[0] or (pad_in and not floor):
        in_b = -(-(whole_in * params.batchSize * ci_g * icg * size) // used)
        tr_in = copy(in_b, min(memcpy, size), f_io) + xch(in_b)
    if rearrange[1] or pad_in or pad_out:
        w_b = -(-(kernel[0] * kernel[1] * ci_g * icg * co_g * ocg * size) // used)
        tr_w = copy(w_b, min(memcpy, size), f_io) + xch(w_b)
    if rearrange[2] or pad_out or ocg != FLOAT_WEIGHTS_PER_CONV_UNIT:
        out_b = -(-(params.batchSize * out_shape[0] * out_shape[1] * co_g * ocg) // used) * size
        if rearrange[2] or pad_out:
            tr_out = copy(out_b, min(memcpy, size), pfc._scale(co)) + xch(out_b)
        else:
            tr_out = copy(out_b, min(memcpy, ocg * size), pfc._scale(co))
    pad = pad_bytes = zero
    if not floor:
        pad, pad_bytes = amp_padding_estimate(
            height, kernel[0], ks, 1, [kh, kernel[1]], [ht, wt], bt, cit, cot, 1, size, xbpc, mult
        )
    rate_macs = (params.batchSize * out_shape[0] * out_shape[1] * kernel[0] * kernel[1]
                 * ci_g * icg * co_g * ocg) // (units * FLOAT_LOAD_ELEMS)  # fmt: skip
    least = -(-rate_macs // used)
    nx1 = _nx1_floor(vertex, bt * ht * wt, kh, kernel[1], cit, cot, workers)
    one = (height == 1) & (params.batchSize == 1) & (kh == 1) & (kernel[1] == 1) & (ht == 1)
    least = np.where(one, least, np.maximum(least, nx1))
    depth = ks * pi
    red_out = -(-outputs // depth)
    conv = size * (inputs + weights + outputs) + pad_bytes
    red_bytes = np.where(depth > 1, red_out * depth * size, 0)
    temp = np.maximum.reduce([2 * np.maximum.reduce([in_b, w_b, out_b]), conv, red_bytes])
    terms = {"input exchange": x_in, "weight exchange": x_w, "partials exchange": x_p,
             "input transform": tr_in, "weight transform": tr_w, "output transform": tr_out,
             "padding": pad}  # fmt: skip
    for key in skip:
        if key in terms:
            terms[key] = zero
    out = {"bt": bt, "ht": ht, "wt": wt, "kh": kh, "cit": cit, "cot": cot, "used": used,
           "depth": depth, "outputs": outputs, "red_out": red_out, **terms, "least": least,
           "bytes": temp, "rate_macs": rate_macs}  # fmt: skip
    return {k: np.broadcast_to(v, used.shape) for k, v in out.items()}


def _target(preset="mk2-ipumodel"):
    return Graph(IPUModel(preset).createDevice().getTarget()).getTarget()


def _conv(batch, field, ci, co, pad=1, kernel=3):
    return poplin.ConvParams(FLOAT, batch, field, [kernel, kernel], ci, co,
                             paddingLower=[pad, pad], paddingUpper=[pad, pad])  # fmt: skip


CONVS = {
    "conv1": _conv(32, [28, 28], 1, 8),
    "conv2": _conv(32, [14, 14], 8, 16),
    "odd channels": _conv(4, [14, 14], 6, 10),
    "5x5, batch 1": _conv(1, [8, 8], 4, 4, pad=2, kernel=5),
    "no padding": _conv(2, [9, 7], 12, 20, pad=0, kernel=2),
}


def _forms(params):
    params = pfc.canonical(params)
    for dims in pfc.FORMS.values():
        if all(pfc._expands(params, d) for d in dims):
            yield pfc.form_params(params, dims), (bool(dims), bool(dims), False)
    for flat in ((), (0,), (1,), (0, 1)):
        yield pfc.swapped_params(params, flat), (False, True, True)


def _assert_rows_equal(sub, target, vertex, splits, rearrange, floor, skip, ci, co):
    got = pfc._partition_rows(sub, target, vertex, splits, rearrange, floor, skip, ci, co)
    want = _numpy_rows(sub, target, vertex, splits, rearrange, floor, skip, ci, co)
    assert list(got) == list(ROWS)
    for k in ROWS:
        assert got[k].dtype == np.int64, k
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


@pytest.mark.parametrize("name", list(CONVS))
def test_terms_equal_the_numpy_form(name):
    target = _target()
    skips = [(), pfc._SERIAL_SKIP, (*pfc._SERIAL_SKIP, "input transform"),
             ("input exchange", "weight exchange", "partials exchange", "weight transform",
              "output transform", "padding")]  # fmt: skip
    for n, (sub, rearrange) in enumerate(_forms(CONVS[name])):
        ci, co = sub.inputChannelsPerConvGroup, sub.outputChannelsPerConvGroup
        for vertex in amp_candidates(target):
            splits = pfc._partitions(sub, target, vertex[1], vertex[2])
            for floor in (False, True):
                for other in (rearrange, (True, False, True), (False, False, False)):
                    skip = skips[(n + floor) % len(skips)]
                    _assert_rows_equal(sub, target, vertex, splits, other, floor, skip, ci, co)


@pytest.mark.parametrize("name", list(CONVS))
def test_terms_with_channels_per_partition_equal_the_numpy_form(name):
    """Channels given per partition (a serial split's iterations costed together), all
    padded to the groupings or none."""
    target = _target()
    rng = np.random.default_rng(len(name))
    for sub, rearrange in _forms(CONVS[name]):
        for vertex in amp_candidates(target):
            _, icg, ocg = vertex
            splits = pfc._partitions(sub, target, icg, ocg)
            n = len(splits["batchSplit"])
            for padded in (False, True):
                ci = icg * rng.integers(1, 5, n) - (icg > 1 and padded)
                co = ocg * rng.integers(1, 5, n) - padded
                for floor in (False, True):
                    _assert_rows_equal(sub, target, vertex, splits, rearrange, floor,
                                       pfc._SERIAL_SKIP, ci, co)  # fmt: skip
