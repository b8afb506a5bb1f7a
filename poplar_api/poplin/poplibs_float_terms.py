"""The terms Poplibs' ``addEstimates`` sums for every partition of a FLOAT AMP plan, in
one compiled pass.

:func:`~.poplibs_float_conv2d.form_costs` costs the partitions of one AMP candidate of
a form (a few dozen to a few hundred) or, for a serial form's bound, the partitions of
every iteration together (up to a few thousand). The terms every partition has (the
exchanges, the transforms, the kernel's padding to the weight height, the least partial
sums and the temporary bytes) were some 60 numpy operations a call, each a pass over
the partitions and an array, most of a call's time on so few partitions.
:func:`partition_terms` computes them partition by partition in one pass, with the same
integer arithmetic (int64, floor division, ceilings as ``-(-a // b)``; the exchange of a
transform's bytes ``ceil(b / E)`` in float64 as ``numpy.ceil`` does), so every term is
the numpy form's, value for value. The reduction and the partial sums' estimates, made
only for the partitions a limit leaves, stay with :func:`~.poplibs_float_conv2d.form_costs`.

What each term restates is in :mod:`.poplibs_float_conv2d`'s docstring: the exchange
``ExchangeEstimator`` (:func:`~.poplibs_matmul_model._exchange`), the input range
``getMaxInputRangeSize`` (:func:`~.poplibs_conv2d_model._input_range`), the padding
:func:`~.poplibs_amp_estimates.amp_padding_estimate` and the least ``ConvPartialnx1``
estimate :func:`~.poplibs_float_partials._nx1_floor`.
"""

from __future__ import annotations

import numba
import numpy as np

__all__ = ["ROWS", "partition_terms"]

#: The rows of :func:`partition_terms`' result, in order.
ROWS = ("bt", "ht", "wt", "kh", "cit", "cot", "used", "depth", "outputs", "red_out",
        "input exchange", "weight exchange", "partials exchange", "input transform",
        "weight transform", "output transform", "padding", "least", "bytes",
        "rate_macs")  # fmt: skip


def partition_terms(splits: np.ndarray, chans: np.ndarray, consts: np.ndarray,
                    xbpc: float) -> np.ndarray:  # fmt: skip
    """``int64[len(ROWS), n]``: the terms :data:`ROWS` of each of the ``n`` partitions.

    Parameters
    ----------
    splits
        ``int64[6, n]``: ``batchSplit``, ``fieldSplit[0]``, ``fieldSplit[1]``,
        ``kernelSplit[0]``, ``outChanSplit.parallel``, ``inChanSplit.parallel``.
    chans
        ``int64[2, n]``: each partition's input and output channels.
    consts
        ``int64[33]``, as :func:`~.poplibs_float_conv2d.form_costs` packs them: the
        AMP vertex (units, input and partial groupings, weight height), the element
        bytes, workers, batch, output field (2), kernel (2), input field (2), the tiles
        sharing an exchange bus, the exchange rate scaled by 16, ``floor``, the memory
        copy rate (bytes a cycle), whether the input, the weights and the output are
        transformed and whether the output is rearranged (else regrouped), the whole
        input range, whether each of the seven terms ``input exchange`` ... ``padding``
        is skipped (counted 0), :func:`~.poplibs_float_partials._nx1_floor_terms`'
        passes, innermost cycles and fixed cycles, and the FLOAT elements a load.
    xbpc
        Exchange bytes a cycle (a transform's bytes exchanged, ``ceil(b / xbpc)``).
    """
    return _terms(np.ascontiguousarray(splits, np.int64), np.ascontiguousarray(chans, np.int64),
                  np.ascontiguousarray(consts, np.int64), float(xbpc))  # fmt: skip


@numba.njit(cache=True, nogil=True)
def _scale(chans):  # pragma: no cover - compiled
    """``getScaleFactorForTransform(FLOAT, chans)``'s divisor."""
    return 4 if chans % 2 == 0 else 3


@numba.njit(cache=True, nogil=True)
def _copy(b, rate, f):  # pragma: no cover - compiled
    """A transform's copy cycles of ``b`` bytes."""
    return -(-(b * 5) // (rate * f))


@numba.njit(cache=True, nogil=True)
def _terms(splits, chans, k, xbpc):  # pragma: no cover - compiled
    """:func:`partition_terms`."""
    units, icg, ocg, height, size, workers = k[0], k[1], k[2], k[3], k[4], k[5]
    batch, out0, out1, k0, k1, in0, in1 = k[6], k[7], k[8], k[9], k[10], k[11], k[12]
    share, scaled, floor, memcpy = k[13], k[14], k[15] != 0, k[16]
    do_in, do_w, do_out, out_full, whole_in = k[17] != 0, k[18] != 0, k[19] != 0, k[20] != 0, k[21]
    skip = k[22:29] != 0  # (the terms skipped, in _TERMS' order)
    skip_in_x, skip_w_x, skip_p_x, skip_in_t = skip[0], skip[1], skip[2], skip[3]
    skip_w_t, skip_out_t, skip_pad = skip[4], skip[5], skip[6]
    passes, innermost, fixed, load_elems = k[29], k[30], k[31], k[32]
    n = splits.shape[1]
    out = np.zeros((20, n), np.int64)
    for j in range(n):
        bs, fh, fw, ks, po, pi = (splits[0, j], splits[1, j], splits[2, j], splits[3, j],
                                  splits[4, j], splits[5, j])  # fmt: skip
        ci, co = chans[0, j], chans[1, j]
        ci_g, co_g = -(-ci // icg), -(-co // ocg)
        bt = -(-batch // bs)
        ht, wt = -(-out0 // fh), -(-out1 // fw)
        kh = -(-k0 // ks)
        cit, cot = -(-ci_g // pi) * icg, -(-co_g // po) * ocg
        used = bs * fh * fw * ks * po * pi
        inputs = min(ht + kh - 1, in0) * min(wt + k1 - 1, in1) * bt * cit
        weights = kh * k1 * cit * cot
        outputs = ht * wt * bt * cot
        mult = 2 if share > 1 and po % share == 0 else 1
        x_in = 0 if floor else -(-((inputs - inputs // po) * size * 16) // (scaled * mult))
        x_w = -(-((weights - weights // (fh * fw * bs)) * size * 16) // scaled)
        depth = ks * pi
        x_p = -(-(outputs * size * 16) // scaled)
        f_io = _scale(ci * co)
        tr_in = tr_w = tr_out = in_b = w_b = out_b = 0
        if do_in:  # rearrangeInput
            in_b = -(-(whole_in * batch * ci_g * icg * size) // used)
            tr_in = _copy(in_b, min(memcpy, size), f_io) + np.int64(np.ceil(in_b / xbpc))
        if do_w:  # rearrangeWeights
            w_b = -(-(k0 * k1 * ci_g * icg * co_g * ocg * size) // used)
            tr_w = _copy(w_b, min(memcpy, size), f_io) + np.int64(np.ceil(w_b / xbpc))
        if do_out:  # rearrangeOutput, regroupOutput
            out_b = -(-(batch * out0 * out1 * co_g * ocg) // used) * size
            if out_full:
                tr_out = _copy(out_b, min(memcpy, size), _scale(co)) + np.int64(
                    np.ceil(out_b / xbpc)
                )
            else:
                tr_out = _copy(out_b, min(memcpy, ocg * size), _scale(co))
        pad = pad_bytes = 0
        if not floor and height != 1:  # amp_padding_estimate
            p = (height - max((k0 // ks) % height, (-(-k0 // ks)) % height)) % height
            kernel_zeros = ((kh + p) * k1 - kh * k1) * cit * cot
            input_zeros = bt * ((ht + p) * wt - ht * wt) * cit
            pad = -(-(kernel_zeros * size * 16) // scaled) + -(
                -(input_zeros * size * 16) // (scaled * mult)
            )
            pad_bytes = (kernel_zeros + input_zeros) * size
        # the least partial sums: the padded MACs over the AMP's rate and the used tiles,
        # and a ConvPartialnx1 tile's at least _nx1_floor
        rate_macs = batch * out0 * out1 * k0 * k1 * ci_g * icg * co_g * ocg
        rate_macs = rate_macs // (units * load_elems)
        least = -(-rate_macs // used)
        if not (height == 1 and batch == 1 and kh == 1 and k1 == 1 and ht == 1):
            outer = -(-kh // height)
            slowest = workers * (17 + 8 * -(-(bt * ht * wt) // workers))
            inner = outer * (14 + k1 * (12 + passes * innermost)) + outer * k1 * passes * slowest
            ig, og = cit // icg, cot // ocg
            least = max(least, fixed + og * 17 + (og - 1) * 6 + 1 + ig * (14 + og * (14 + inner)))
        conv = size * (inputs + weights + outputs) + pad_bytes
        red_out = -(-outputs // depth)
        red_bytes = red_out * depth * size if depth > 1 else 0
        out[0, j], out[1, j], out[2, j], out[3, j], out[4, j], out[5, j] = bt, ht, wt, kh, cit, cot
        out[6, j], out[7, j], out[8, j], out[9, j] = used, depth, outputs, red_out
        out[10, j] = 0 if skip_in_x else x_in
        out[11, j] = 0 if skip_w_x else x_w
        out[12, j] = 0 if skip_p_x else x_p
        out[13, j] = 0 if skip_in_t else tr_in
        out[14, j] = 0 if skip_w_t else tr_w
        out[15, j] = 0 if skip_out_t else tr_out
        out[16, j] = 0 if skip_pad else pad
        out[17, j] = least
        out[18, j] = max(2 * max(in_b, w_b, out_b), conv, red_bytes)
        out[19, j] = rate_macs
    return out
