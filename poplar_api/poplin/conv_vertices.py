"""The Poplibs convolution partial-sum vertices: AMP (``ConvPartial1x1Out``,
``ConvPartialnx1``), the horizontal MAC (``ConvPartialHorizontalMac``) and the vertical
MAC for depthwise half convolutions (``ConvPartialVerticalMac``).

Every vertex computes, on one tile, partial sums of a piece of a convolution::

    out[cg, og][outRow + j * outStride] += in[cg, ig][inRow + j * inStride] @ W[cg, og, ig][k].T

for each worklist entry ``(outRow, num, inRow)`` of kernel position ``k``
(``j < num``), summed over input-channel groups ``ig`` and kernel positions, after
zeroing ``out``. ``in`` vectors are ``[inRows, inChans]`` (the tile's input window,
rows = batch x field positions, channels innermost), ``weights`` vectors are
``[kernelPositions, outChans, inChans]`` and ``out`` vectors ``[outRows, outChans]``.

Fields, in Poplibs' names where Poplibs has the field:

``in``, ``weights``, ``out``
    Vector lists, indexed ``cg * numInGroups + ig``, ``(cg * numOutGroups + og) *
    numInGroups + ig`` and ``cg * numOutGroups + og``. A group may hold fewer channels
    than the vertex's nominal group size (the last channels of a layer): the estimate
    counts the nominal (padded) size, as Poplibs pads channels for the AMP.
``worklists``
    ``kernelPositions * numWorkers`` vectors (``k * numWorkers + w``) of
    ``(outRow, num, inRow)`` triples, counted in rows (Poplibs counts bytes and stores
    ``num - 3``; a documented difference in encoding only).
``params``
    The scalars Poplibs gives as separate fields: ``numConvGroups, numOutGroups,
    numInGroups, kernelPositions, inRows, outRows, inStride, outStride``.

The cycle estimate of each vertex is set by :mod:`poplar_api.poplin.conv` from
its worklists with the Poplibs estimators (``amp.conv_partial_1x1_cycles``,
``conv_estimators``); the vertex classes carry no size-only estimator, since the
estimate depends on the worklist contents.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.codelet import FieldBatch, Input, MultiVertex, Output, Vector, VectorList
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT, UNSIGNED_SHORT, Type

__all__ = ["PARAMS", "conv_vertex"]

#: Order of the ``params`` field.
PARAMS = (
    "numConvGroups", "numOutGroups", "numInGroups", "kernelPositions",
    "inRows", "outRows", "inStride", "outStride",
)  # fmt: skip

#: Vertex families and their Poplibs template names.
METHODS = ("AMP_1x1", "AMP", "HMAC", "VMAC")


def _inner(batch: FieldBatch, v: int) -> list[np.ndarray]:
    assert batch.inner_offsets is not None
    lo, hi = int(batch.offsets[v]), int(batch.offsets[v + 1])
    bounds = batch.inner_offsets[lo : hi + 1]
    return [batch.data[bounds[i] : bounds[i + 1]] for i in range(hi - lo)]


def expand_entries(triples: np.ndarray, in_stride: int, out_stride: int) -> tuple:
    """``(out_rows, in_rows)`` of every field position of a flat ``(outRow, num, inRow)`` list."""
    t = np.asarray(triples, np.int64).reshape(-1, 3)
    nums = t[:, 1]
    total = int(nums.sum())
    if total == 0:
        empty = np.zeros(0, np.int64)
        return empty, empty
    starts = np.repeat(np.cumsum(nums) - nums, nums)
    j = np.arange(total, dtype=np.int64) - starts
    out_rows = np.repeat(t[:, 0], nums) + j * out_stride
    in_rows = np.repeat(t[:, 2], nums) + j * in_stride
    return out_rows, in_rows


#: Expanded worklists by content (vertices of one tile geometry share theirs, and
#: every execution of a compute set asks again); cleared when it grows past this.
_ROWS: dict[tuple, tuple[list, bool]] = {}
_ROWS_KEPT = 4096


def _rows_of(wl: FieldBatch, v: int, wls: list[np.ndarray], nk: int, p: np.ndarray) -> tuple:
    """Vertex ``v``'s ``(out_rows, in_rows)`` per kernel position and whether every row
    lies inside its field (``p``: the vertex's params), from its worklists ``wls``."""
    lo, hi = int(wl.offsets[v]), int(wl.offsets[v + 1])
    bounds = wl.inner_offsets[lo : hi + 1]
    data = wl.data[bounds[0] : bounds[-1]]
    key = (data.dtype.str, data.tobytes(), np.diff(bounds).tobytes(), nk, p.tobytes())
    found = _ROWS.get(key)
    if found is not None:
        return found
    in_rows, out_rows, in_stride, out_stride = (int(x) for x in p[4:8])
    workers = len(wls) // max(nk, 1)
    rows, ok = [], True
    for k in range(nk):
        parts = [wls[k * workers + w] for w in range(workers)]
        flat = np.concatenate(parts) if parts else np.zeros(0)
        o_r, i_r = expand_entries(flat, in_stride, out_stride)
        if o_r.size and (
            o_r.min() < 0 or o_r.max() >= out_rows or i_r.min() < 0 or i_r.max() >= in_rows
        ):
            ok = False
        rows.append((o_r, i_r))
    if len(_ROWS) >= _ROWS_KEPT:
        _ROWS.clear()
    _ROWS[key] = rows, ok
    return rows, ok


class _ConvPartialBase(MultiVertex):
    """Shared compute of the conv partial vertices (see the module docstring)."""

    method: str = "AMP"

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        a, b, c, wl, pr = (batches[f] for f in ("in", "weights", "out", "worklists", "params"))
        ok = np.ones(num_vertices, dtype=bool)
        for v in range(num_vertices):
            p = pr.data[pr.offsets[v] : pr.offsets[v + 1]].astype(np.int64)
            if p.size != len(PARAMS):
                ok[v] = False
                continue
            ncg, nog, nig, nk, in_rows, out_rows = (int(x) for x in p[:6])
            ins, ws, outs, wls = _inner(a, v), _inner(b, v), _inner(c, v), _inner(wl, v)
            if (
                len(ins) != ncg * nig
                or len(outs) != ncg * nog
                or len(ws) != ncg * nog * nig
                or len(wls) % max(nk, 1)
                or min(in_rows, out_rows) < 0
            ):
                ok[v] = False
                continue
            rows, ok[v] = _rows_of(wl, v, wls, nk, p)
            if not ok[v]:
                continue
            for cg in range(ncg):
                for og in range(nog):
                    dst = outs[cg * nog + og]
                    if out_rows == 0 or dst.size % out_rows:
                        ok[v] = False
                        break
                    oc = dst.size // out_rows
                    acc = np.zeros((out_rows, oc), np.float32)
                    for ig in range(nig):
                        x = ins[cg * nig + ig]
                        if in_rows == 0 or x.size % in_rows:
                            ok[v] = False
                            break
                        ic = x.size // in_rows
                        x2 = x.reshape(in_rows, ic).astype(np.float32)
                        w = ws[(cg * nog + og) * nig + ig]
                        if w.size != nk * oc * ic:
                            ok[v] = False
                            break
                        w3 = w.reshape(nk, oc, ic).astype(np.float32)
                        for k, (o_r, i_r) in enumerate(rows):
                            if o_r.size:
                                acc[o_r] += x2[i_r] @ w3[k].T
                    dst[:] = acc.reshape(-1)
        return ok


def _b(flag: bool) -> str:
    return "true" if flag else "false"


def conv_vertex(method: str, fp_type: Type, accum_type: Type, limited: bool = True,
                num_conv_units: int = 8, conv_input_load_elems: int = 2,
                conv_groups_per_group: int = 4) -> type:  # fmt: skip
    """The vertex class of a conv partial family and instantiation.

    One class per distinct vertex name: arguments a family ignores are dropped before
    the cached lookup, so every way of asking for one instantiation gives one class.

    Parameters
    ----------
    method
        ``"AMP_1x1"`` (``poplin::ConvPartial1x1Out``), ``"AMP"``
        (``poplin::ConvPartialnx1``), ``"HMAC"`` (``poplin::ConvPartialHorizontalMac``)
        or ``"VMAC"`` (``poplin::ConvPartialVerticalMac``, HALF inputs only).
    fp_type, accum_type
        Input and partials types.
    limited
        Whether worklists fit 16-bit entries (Poplibs' ``useLimitedVer``).
    num_conv_units, conv_input_load_elems
        AMP template arguments (ignored by the MAC families).
    conv_groups_per_group
        VMAC template argument (4, 8 or 16).
    """
    if method not in ("AMP_1x1", "AMP"):
        num_conv_units, conv_input_load_elems = 8, 2
    if method != "VMAC":
        conv_groups_per_group = 4
    return _conv_vertex(
        method, fp_type, accum_type, bool(limited), int(num_conv_units),
        int(conv_input_load_elems), int(conv_groups_per_group),
    )  # fmt: skip


@functools.cache
def _conv_vertex(method: str, fp_type: Type, accum_type: Type, limited: bool,
                 num_conv_units: int, conv_input_load_elems: int,
                 conv_groups_per_group: int) -> type:  # fmt: skip
    if method not in METHODS:
        raise ValueError(f"conv_vertex: method={method!r}; required one of {METHODS}")
    for t, what in ((fp_type, "fp_type"), (accum_type, "accum_type")):
        if t not in (FLOAT, HALF):
            raise ValueError(f"conv_vertex: {what}={t!r}; required FLOAT or HALF")
    fp, acc = fp_type.name, accum_type.name
    if method == "VMAC":
        if fp_type != HALF or conv_groups_per_group not in (4, 8, 16):
            raise ValueError(
                f"conv_vertex: VMAC needs HALF inputs and 4, 8 or 16 conv groups per group; "
                f"got {fp_type.name}, {conv_groups_per_group}"
            )
        name = f"poplin::ConvPartialVerticalMac<{fp},{acc},{_b(limited)},{conv_groups_per_group}>"
    elif method == "HMAC":
        name = f"poplin::ConvPartialHorizontalMac<{fp},{acc},{_b(limited)}>"
    else:
        family = "ConvPartial1x1Out" if method == "AMP_1x1" else "ConvPartialnx1"
        name = (
            f"poplin::{family}<{fp},{acc},{_b(limited)},true,{num_conv_units},"
            f"{conv_input_load_elems},false>"
        )
    wl_type = UNSIGNED_SHORT if limited else UNSIGNED_INT
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"{name}: convolution partial sums (see poplar_api.poplin.conv_vertices).",
        "typeName": name,
        "method": method,
        "in_": Input(VectorList(fp_type)),
        "weights": Input(VectorList(fp_type)),
        "out": Output(VectorList(accum_type)),
        "worklists": Input(VectorList(wl_type)),
        "params": Input(Vector(INT)),
    }
    cls_name = (
        f"Conv_{method}_{fp_type.constant}_{accum_type.constant}_{int(limited)}_"
        f"{num_conv_units}_{conv_groups_per_group}"
    )
    return type(cls_name, (_ConvPartialBase,), attrs)
