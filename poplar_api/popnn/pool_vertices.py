"""Pooling vertices: ``popnn::MaxPooling``, ``SumPooling``, ``MaxPoolingGrad``,
``MaxPoolingGradientScale`` and ``SelectiveScaling``, vectorised ``computeBatch``.

The fields follow ``lib/popnn/codelets`` (graphcore/poplibs @7eac0f26): ``in``,
``out``, ``startPos`` (cumulative worklist rows per worker), ``offsetBase`` (the
``(out, in)`` base offset of each row), ``workList`` (one vector of
``(outOffset, inOffset, numElementsM1)`` triples per row; offsets are relative to the
row's base, modulo 2**16 as unsigned shorts) and, for the gradients, ``fwdActsIn`` /
``fwdActsOut``. Poplar keeps the scalar vertex state (``initInfo``,
``numChanGroupsM1``, ``chansPerGroupDM1``, strides and slice sizes) in the vertex;
ipusim has no scalar state, so it is one constant field ``params`` holding
``(initInfo, numChanGroupsM1, chansPerGroup, inStride, outStride, inSliceSize,
outSliceSize)`` with strides in field positions and channels unscaled, and
``SumPooling``'s ``scale`` is a one-element constant field.

Element ``c`` of channel group ``cg`` at field position ``p`` of a window is
``cg x sliceSize + p x chansPerGroup + c``, as in the codelets. The estimates are set
per vertex with ``setPerfEstimate`` from the worklists (``getPoolingCycles``), because
they depend on field values rather than sizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector, VectorList, Vertex
from poplar_api.types import FLOAT, HALF, UNSIGNED_INT, UNSIGNED_SHORT, Type

__all__ = ["KINDS", "pool_vertex", "selective_scaling_vertex"]

#: Vertex kinds and their Poplibs names.
KINDS = {
    "max": "MaxPooling",
    "sum": "SumPooling",
    "maxGrad": "MaxPoolingGrad",
    "maxGradScale": "MaxPoolingGradientScale",
}


def _pairs(batches: dict, v: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(outIdx, inIdx, params)`` of vertex ``v``: every (output, input) element pair
    its worklist visits, as indices into its ``out`` and ``in`` vectors."""
    par = batches["params"]
    p = par.data[par.offsets[v] : par.offsets[v + 1]].astype(np.int64)
    _, ngm1, cpg, in_step, out_step, in_slice, out_slice = p.tolist()
    sp = batches["startPos"]
    rows_total = int(sp.data[sp.offsets[v + 1] - 1]) if sp.offsets[v + 1] > sp.offsets[v] else 0
    ob = batches["offsetBase"]
    base = ob.data[ob.offsets[v] : ob.offsets[v] + 2 * rows_total].astype(np.int64)
    wl = batches["workList"]
    first = int(wl.offsets[v])
    lo, hi = int(wl.inner_offsets[first]), int(wl.inner_offsets[first + rows_total])
    trip = wl.data[lo:hi].astype(np.int64).reshape(-1, 3)
    lengths = np.diff(wl.inner_offsets[first : first + rows_total + 1]) // 3
    row = np.repeat(np.arange(rows_total), lengths)
    out0 = (trip[:, 0] + base[2 * row]) & 0xFFFF
    in0 = (trip[:, 1] + base[2 * row + 1]) & 0xFFFF
    n = trip[:, 2] + 1
    entry = np.repeat(np.arange(n.size), n)
    f = np.arange(entry.size) - np.repeat(np.cumsum(n) - n, n)
    out_pos = out0[entry] + f * out_step
    in_pos = in0[entry] + f * in_step
    cg = np.arange(ngm1 + 1)[:, None, None]
    c = np.arange(cpg)[None, None, :]
    out_idx = (cg * out_slice + out_pos[None, :, None] * cpg + c).ravel()
    in_idx = (cg * in_slice + in_pos[None, :, None] * cpg + c).ravel()
    return out_idx, in_idx, p


class _Pool(MultiVertex):
    kind = "max"

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        out_b, in_b = batches["out"], batches["in"]
        for v in range(num_vertices):
            out = out_b.data[out_b.offsets[v] : out_b.offsets[v + 1]]
            src = in_b.data[in_b.offsets[v] : in_b.offsets[v + 1]]
            oi, ii, _ = _pairs(batches, v)
            if cls.kind == "max":
                acc = np.full(out.size, -np.inf, np.float64)
                np.maximum.at(acc, oi, src[ii])
                if cls.is_half:  # no infinity in half: the lowest finite value
                    acc[np.isneginf(acc)] = np.finfo(np.float16).min
                out[:] = acc
            elif cls.kind == "sum":
                sc = batches["scale"]
                acc = np.zeros(out.size, np.float64)
                np.add.at(acc, oi, src[ii])
                out[:] = acc * float(sc.data[sc.offsets[v]])
            elif cls.kind == "maxGrad":
                fin, fout = batches["fwdActsIn"], batches["fwdActsOut"]
                a_in = fin.data[fin.offsets[v] : fin.offsets[v + 1]]
                a_out = fout.data[fout.offsets[v] : fout.offsets[v + 1]]
                acc = np.zeros(out.size, np.float64)
                hit = a_in[oi] == a_out[ii]
                np.add.at(acc, oi[hit], src[ii[hit]])
                out[:] = acc
            else:  # maxGradScale: 1 / (number of inputs equal to the maximum)
                fout = batches["fwdActsOut"]
                a_out = fout.data[fout.offsets[v] : fout.offsets[v + 1]]
                acc = np.zeros(out.size, np.float64)
                np.add.at(acc, oi, (a_out[oi] == src[ii]).astype(np.float64))
                nz = acc != 0
                acc[nz] = 1.0 / acc[nz]
                out[:] = acc


_CACHE: dict[tuple[str, Type], type] = {}


def pool_vertex(kind: str, type_: Type) -> type:
    """``popnn::<KINDS[kind]><type>``: a supervisor (MultiVertex) pooling a tile slice."""
    key = (kind, type_)
    cls = _CACHE.get(key)
    if cls is None:
        attrs: dict[str, Any] = {
            "typeName": f"popnn::{KINDS[kind]}<{type_.name}>",
            "__doc__": f"{KINDS[kind]} over the worklists of one tile.",
            "__module__": __name__,
            "kind": kind,
            "is_half": type_ == HALF,
            "out": Output(Vector(type_)),
            "in_": Input(Vector(type_)),
            "startPos": Input(Vector(UNSIGNED_SHORT)),
            "offsetBase": Input(Vector(UNSIGNED_SHORT)),
            "workList": Input(VectorList(UNSIGNED_SHORT)),
            "params": Input(Vector(UNSIGNED_INT)),
        }
        if kind == "sum":
            attrs["scale"] = Input(type_)
        if kind == "maxGrad":
            attrs["fwdActsIn"] = Input(Vector(type_))
        if kind in ("maxGrad", "maxGradScale"):
            attrs["fwdActsOut"] = Input(Vector(type_))
        cls = type(f"Popnn{KINDS[kind]}_{type_.constant}", (_Pool,), attrs)
        _CACHE[key] = cls
    return cls


class _SelectiveScaling(Vertex):
    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        wl, io, par = batches["scaleWorklist"], batches["inOut"], batches["params"]
        for v in range(num_vertices):
            cpg = int(par.data[par.offsets[v] + 1])
            lo, hi = int(wl.offsets[v]), int(wl.offsets[v + 1])
            trip = wl.data[wl.inner_offsets[lo] : wl.inner_offsets[hi]].astype(np.int64)
            trip = trip.reshape(-1, 3)
            n = trip[:, 1]
            entry = np.repeat(np.arange(n.size), n)
            pos = trip[entry, 0] + np.arange(entry.size) - np.repeat(np.cumsum(n) - n, n)
            scale = trip[entry, 2].astype(np.float64)
            for g in range(int(io.offsets[v]), int(io.offsets[v + 1])):
                seg = io.data[io.inner_offsets[g] : io.inner_offsets[g + 1]]
                idx = (pos[:, None] * cpg + np.arange(cpg)[None, :]).ravel()
                seg[idx] = seg[idx] / np.repeat(scale, cpg)


def selective_scaling_vertex(type_: Type) -> type:
    """``popnn::SelectiveScaling<type>``: divide runs of outputs by their kernel-position
    counts (``scaleWorklist``: per worker ``(begin, size, scale)`` triples; ``params``
    holds ``(numChanGroups, chansPerGroup)``)."""
    key = ("selectiveScaling", type_)
    cls = _CACHE.get(key)
    if cls is None:
        attrs: dict[str, Any] = {
            "typeName": f"popnn::SelectiveScaling<{type_.name}>",
            "__doc__": "Scale average-pooling outputs that have differing counts.",
            "__module__": __name__,
            "scaleWorklist": Input(VectorList(UNSIGNED_SHORT)),
            "inOut": InOut(VectorList(type_)),
            "params": Input(Vector(UNSIGNED_INT)),
        }
        cls = type(f"PopnnSelectiveScaling_{type_.constant}", (_SelectiveScaling,), attrs)
        _CACHE[key] = cls
    return cls


def all_classes() -> list[type]:
    """Every pooling vertex class for FLOAT and HALF (for ``addCodelets``)."""
    out = [pool_vertex(k, t) for k in KINDS for t in (FLOAT, HALF)]
    return out + [selective_scaling_vertex(t) for t in (FLOAT, HALF)]
