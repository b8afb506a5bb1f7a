"""The Poplibs convolution partial-sum vertices: AMP (``ConvPartial1x1Out``,
``ConvPartialnx1``), the horizontal MAC (``ConvPartialHorizontalMac``) and the vertical
MAC for depthwise half convolutions (``ConvPartialVerticalMac``).

Every vertex computes, on one tile, partial sums of a piece of a convolution::

    out[cg, og][outRow + j * outStride] += in[cg, ig][inRow + j * inStride] @ W[cg, og, ig][k].T

for each worklist entry ``(outRow, num, inRow)`` of kernel position ``k``
(``j < num``), summed over input-channel groups ``ig`` and kernel positions, after
zeroing ``out``. Each product's float32 operations, and so its bits, are defined by
:mod:`poplar_api.poplin.conv_chain` (fused multiply-adds over the input channels in
order, independent of the host's BLAS).

``in`` vectors are ``[inRows, inChans]`` (the tile's input window, rows = batch x field
positions, channels innermost), ``weights`` vectors are
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
from dataclasses import dataclass
from typing import Any

import numpy as np

from poplar_api.codelet import FieldBatch, Input, MultiVertex, Output, Vector, VectorList
from poplar_api.codelet_base import RUN_REPLICAS
from poplar_api.field_images import ImageField
from poplar_api.poplin.conv_access import _accesses, _gather, _scatter, _segment_rows
from poplar_api.poplin.conv_chain import chain_product, chain_products
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT, UNSIGNED_SHORT, Type

__all__ = ["PARAMS", "compute_one", "conv_vertex"]

#: Order of the ``params`` field.
PARAMS = (
    "numConvGroups", "numOutGroups", "numInGroups", "kernelPositions",
    "inRows", "outRows", "inStride", "outStride",
)  # fmt: skip

#: The fields, in the order the kernel's helpers take them.
FIELDS = ("in", "weights", "out", "worklists", "params")

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
    #: The runner hands the fields where they lie in every replica's image
    #: (:class:`~poplar_api.field_images.ImageField`; see :func:`_run_in_place`).
    readsImages: bool = True

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        """Run every vertex of the batch, vertices of one geometry together.

        Vertices whose params, vector counts, vector sizes and worklists are equal
        (those of one tile geometry, and the copies of a vertex in every replica when
        the replicas run as one batch) do the same products on different data: they
        run as one class (:func:`_run_class`), every product computed in the order
        :mod:`~poplar_api.poplin.conv_chain` defines, which :func:`compute_one` follows
        too, so the values are those of running the vertices one by one. A vertex
        whose fields are not regular (wrong counts, sizes or rows) is run alone by
        :func:`compute_one`, which says which. When the batch is the copies of the same
        vertices in every replica (``RUN_REPLICAS``), the classes are found on replica
        0's vertices only (:func:`_replica_zero`) and each class runs every replica's
        copies: the same classes, in the same order, as planning the whole batch.
        """
        fields = tuple(batches[f] for f in FIELDS)
        if num_vertices and any(isinstance(f, ImageField) for f in fields):
            if _run_in_place(fields, num_vertices):
                return np.ones(num_vertices, dtype=bool)
            packed = tuple(f.packed() if isinstance(f, ImageField) else f for f in fields)
            ok = cls._run_packed(packed, num_vertices)
            if isinstance(fields[2], ImageField):  # (the runner stores no in-place output)
                fields[2].store_packed(packed[2])
            return ok
        return cls._run_packed(fields, num_vertices)

    @staticmethod
    def _run_packed(fields: tuple[FieldBatch, ...], num_vertices: int) -> np.ndarray:
        """``computeBatch`` of packed fields."""
        ok = np.ones(num_vertices, dtype=bool)
        if num_vertices == 0:
            return ok
        regular, classes = _plan(fields, num_vertices, RUN_REPLICAS.get())
        for members, first in classes:
            if not _run_class(fields, members, first):
                regular[members] = False
        for v in np.flatnonzero(~regular):
            ok[v] = compute_one(fields, int(v))
        return ok


#: Plans of earlier executions: ``(layout arrays, worklists, params, replicas, vertices,
#: (regular, classes))`` by the ids of the layout arrays (kept alive by the entry), and
#: the bytes of the worklists and params they keep (cleared past :data:`_PLANS_BYTES`).
_PLANS: dict[tuple[int, ...], tuple] = {}
_PLANS_KEPT = 256
_PLANS_BYTES = 64 << 20
_plans_bytes = [0]


def _plan(fields: tuple[FieldBatch, ...], num_vertices: int, replicas: int) -> tuple:
    """``(regular, classes)`` of the batch (see ``computeBatch``).

    Made once per layout: a compute set's runner hands every execution the same offset
    arrays, and the classes depend only on them and on the contents of ``worklists``
    and ``params`` (compared with the last plan's, since a program could write them),
    so a later execution of the same compute set reuses the plan.
    """
    layout = tuple(a for f in fields for a in (f.offsets, f.inner_offsets))
    key = tuple(id(a) for a in layout)
    wl, pr = fields[3].data, fields[4].data
    hit = _PLANS.get(key)
    if (
        hit is not None
        and all(a is b for a, b in zip(hit[0], layout, strict=True))
        and hit[3:5] == (replicas, num_vertices)
        and np.array_equal(hit[1], wl)
        and np.array_equal(hit[2], pr)
    ):
        regular, classes = hit[5]
        return regular.copy(), classes
    first_replica = _replica_zero(fields, num_vertices, replicas)
    if first_replica is None:
        regular, classes = _classes(fields, num_vertices)
    else:  # planned on replica 0, run for every replica's copies
        n = num_vertices // replicas
        regular, classes = _classes(first_replica, n)
        shifts = np.arange(replicas, dtype=np.int64)[:, None] * n
        regular = np.tile(regular, replicas)
        classes = [((m[None, :] + shifts).reshape(-1), f) for m, f in classes]
    size = wl.nbytes + pr.nbytes
    if size > _PLANS_BYTES // 4:  # (a plan this large is not kept)
        return regular, classes
    if len(_PLANS) >= _PLANS_KEPT or _plans_bytes[0] + size > _PLANS_BYTES:
        _PLANS.clear()
        _SHAPES.clear()
        _plans_bytes[0] = 0
    _plans_bytes[0] += size
    _PLANS[key] = (layout, wl.copy(), pr.copy(), replicas, num_vertices, (regular.copy(), classes))
    if len(_SHAPES) >= _PLANS_KEPT:  # (entries of plans replaced under their key)
        _SHAPES.clear()
    _SHAPES[id(classes)] = (classes, None)  # its geometries, once asked for
    return regular, classes


def _replica_zero(
    fields: tuple[FieldBatch, ...], n: int, replicas: int
) -> tuple[FieldBatch, ...] | None:
    """Replica 0's part of a batch of ``replicas`` copies of the same vertices (see
    ``RUN_REPLICAS``), when what the classes are planned from is equal in every replica:
    the layout of every field (replica ``r``'s vectors are replica 0's, shifted) and the
    contents of ``worklists`` and ``params`` (inputs, so a program could make them
    differ). None otherwise: then the classes are found over the whole batch."""
    if replicas <= 1 or n % replicas:
        return None
    k = n // replicas
    part = []
    for f in fields:
        outer = f.offsets[:-1].reshape(replicas, k)
        step = int(f.offsets[k])
        if not (outer - outer[:1] == np.arange(replicas)[:, None] * step).all():
            return None
        if f.inner_offsets is None:
            part.append(FieldBatch(f.data[:step], f.offsets[: k + 1]))
            continue
        inner = f.inner_offsets[:-1].reshape(replicas, step)
        size = int(f.inner_offsets[step])
        if not (inner - inner[:1] == np.arange(replicas)[:, None] * size).all():
            return None
        part.append(FieldBatch(f.data[:size], f.offsets[: k + 1], f.inner_offsets[: step + 1]))
    for f, p in zip(fields[3:], part[3:], strict=True):  # worklists and params
        if f.data.size != p.data.size * replicas:
            return None
        if not (f.data.reshape(replicas, -1) == p.data).all():
            return None
    return tuple(part)


def compute_one(fields: tuple[FieldBatch, ...], v: int) -> bool:
    """Vertex ``v`` of the batch alone (``fields``: in, weights, out, worklists,
    params); whether its fields were valid. The reference of :func:`_run_class`."""
    a, b, c, wl, pr = fields
    p = pr.data[pr.offsets[v] : pr.offsets[v + 1]].astype(np.int64)
    if p.size != len(PARAMS):
        return False
    ncg, nog, nig, nk, in_rows, out_rows = (int(x) for x in p[:6])
    ins, ws, outs, wls = _inner(a, v), _inner(b, v), _inner(c, v), _inner(wl, v)
    if (
        len(ins) != ncg * nig
        or len(outs) != ncg * nog
        or len(ws) != ncg * nog * nig
        or len(wls) % max(nk, 1)
        or min(in_rows, out_rows) < 0
    ):
        return False
    rows, ok = _rows_of(wl, v, wls, nk, p)
    if not ok:
        return False
    for cg in range(ncg):
        for og in range(nog):
            dst = outs[cg * nog + og]
            if out_rows == 0 or dst.size % out_rows:
                return False
            oc = dst.size // out_rows
            acc = np.zeros((out_rows, oc), np.float32)
            for ig in range(nig):
                x = ins[cg * nig + ig]
                if in_rows == 0 or x.size % in_rows:
                    return False
                ic = x.size // in_rows
                x2 = x.reshape(in_rows, ic).astype(np.float32)
                w = ws[(cg * nog + og) * nig + ig]
                if w.size != nk * oc * ic:
                    return False
                w3 = w.reshape(nk, oc, ic).astype(np.float32)
                for k, (o_r, i_r) in enumerate(rows):
                    if o_r.size:
                        acc[o_r] += chain_product(x2[i_r], w3[k])
            dst[:] = acc.reshape(-1)
    return True


def _classes(fields: tuple[FieldBatch, ...], n: int) -> tuple[np.ndarray, list]:
    """Which vertices may run stacked, and their classes ``(members, first)``:
    vertices of equal params, vector counts, inner sizes and worklist contents."""
    a, b, c, wl, pr = fields
    regular = np.diff(pr.offsets) == len(PARAMS)
    classes: list[tuple[np.ndarray, int]] = []
    idx = np.flatnonzero(regular)
    if idx.size == 0:
        return regular, classes
    params = pr.data[pr.offsets[idx][:, None] + np.arange(len(PARAMS))].astype(np.int64)
    counts = [np.diff(f.offsets)[idx] for f in (a, b, c, wl)]
    wl_lo = np.zeros(pr.offsets.size - 1, np.int64)
    wl_lo[idx] = wl.inner_offsets[wl.offsets[idx]]
    wl_len = wl.inner_offsets[wl.offsets[idx] + counts[3]] - wl_lo[idx]
    shape = np.column_stack([params, *counts, wl_len])
    for members, first in _equal_rows(shape, idx):
        row = shape[np.searchsorted(idx, first)]
        if members.size == 1:
            classes.append((members, first))
            continue
        parts = []
        for f, count in zip((a, b, c, wl), row[8:12], strict=True):
            seg = _segment_rows(f, members, int(count))
            parts.append(f.inner_offsets[seg + 1] - f.inner_offsets[seg])
        parts.append(wl.data[wl_lo[members][:, None] + np.arange(int(row[12]))])
        key = np.concatenate([p.astype(np.int64, copy=False) for p in parts], axis=1)
        classes += _equal_rows(key, members)
    return regular, classes


def _equal_rows(key: np.ndarray, members: np.ndarray) -> list[tuple[np.ndarray, int]]:
    """``members`` split by equal rows of ``key``: rows hashed to one 64-bit number
    (a sort of wide rows costs far more), then every row compared with its class's
    first, so a hash collision only costs an exact ``np.unique``."""
    weights = np.random.default_rng(len(PARAMS)).integers(1, 2**62, key.shape[1], np.int64)
    with np.errstate(over="ignore"):
        hashed = (key.view(np.uint64) * weights.view(np.uint64)).sum(axis=1, dtype=np.uint64)
    _, first, inv = np.unique(hashed, return_index=True, return_inverse=True)
    inv = inv.reshape(-1)
    if not np.array_equal(key, key[first[inv]]):  # a collision: exact rows
        _, first, inv = np.unique(key, axis=0, return_index=True, return_inverse=True)
        inv = inv.reshape(-1)
    order = np.argsort(inv, kind="stable")
    cuts = np.flatnonzero(np.diff(inv[order])) + 1
    return [(members[part], int(members[first[inv[part[0]]]])) for part in np.split(order, cuts)]


@dataclass(frozen=True)
class _Geometry:
    """What every vertex of a class shares: its params, vector sizes and rows."""

    ncg: int
    nog: int
    nig: int
    in_rows: int
    out_rows: int
    ic: int
    oc: int
    nk: int
    rows: list

    @property
    def in_size(self) -> int:
        return self.in_rows * self.ic

    @property
    def out_size(self) -> int:
        return self.out_rows * self.oc

    @property
    def weight_size(self) -> int:
        return self.nk * self.oc * self.ic


def _sizes(f: Any, v: int) -> np.ndarray:
    """Sizes of vertex ``v``'s inner vectors (``f``: packed or in place)."""
    lo, hi = int(f.offsets[v]), int(f.offsets[v + 1])
    return np.diff(f.inner_offsets[lo : hi + 1])


def _geometry(fields: tuple, first: int) -> _Geometry | None:
    """The geometry of vertex ``first`` when it may run stacked (None when it is not
    regular: then :func:`compute_one` runs it, saying why). ``fields``: ``in``,
    ``weights`` and ``out`` packed or in place, ``worklists`` and ``params`` packed."""
    a, b, c, wl, pr = fields
    p = pr.data[pr.offsets[first] : pr.offsets[first + 1]].astype(np.int64)
    ncg, nog, nig, nk, in_rows, out_rows = (int(x) for x in p[:6])
    if min(in_rows, out_rows) <= 0 or min(ncg, nog, nig) <= 0:
        return None
    ins, ws, outs = (_sizes(f, first) for f in (a, b, c))
    wls = _inner(wl, first)
    if (
        ins.size != ncg * nig
        or outs.size != ncg * nog
        or ws.size != ncg * nog * nig
        or len(wls) % max(nk, 1)
    ):
        return None
    if (ins != ins[0]).any() or (outs != outs[0]).any():
        return None  # channel groups of different sizes: one by one
    in_size, out_size = int(ins[0]), int(outs[0])
    if in_size % in_rows or out_size % out_rows:
        return None
    ic, oc = in_size // in_rows, out_size // out_rows
    if (ws != nk * oc * ic).any():
        return None
    rows, ok = _rows_of(wl, first, wls, nk, p)
    if not ok:
        return None
    return _Geometry(ncg, nog, nig, in_rows, out_rows, ic, oc, nk, rows)


#: The geometries of a kept plan's classes (None until asked for), by the plan's list
#: of classes (kept with it, so its id names it; entered by :func:`_plan` as it keeps
#: the plan and cleared with the plans): a plan is reused only for the same layout and
#: the same worklists and params (:func:`_plan`), from which alone the geometries
#: follow. A plan not kept (too large) has no entry: its classes are new on every run.
_SHAPES: dict[int, tuple[list, list | None]] = {}


def _shapes(fields: tuple, classes: list) -> list:
    """:func:`_geometry` of each class of ``classes`` (found by :func:`_plan` for
    ``fields``), found once per kept plan."""
    hit = _SHAPES.get(id(classes))
    kept = hit is not None and hit[0] is classes
    if kept and hit[1] is not None:
        return hit[1]
    shapes = [_geometry(fields, v) for _, v in classes]
    if kept:
        _SHAPES[id(classes)] = (classes, shapes)
    return shapes


def _products(x: np.ndarray, w: np.ndarray, geo: _Geometry) -> np.ndarray:
    """``[*lead, ncg * nog, out_size]`` float32 partial sums of a class from its inputs
    ``x`` (``[*lead, ncg * nig, in_size]``) and weights ``w`` (``[*lead, ncg * nog *
    nig, weight_size]``), ``lead`` being ``(vertices,)`` or ``(replicas, vertices)``:
    every vertex's products in the order :mod:`~poplar_api.poplin.conv_chain` defines
    (HALF operands widened to float32, exactly), by its compiled pass over the class."""
    done = chain_products(x.astype(np.float32, copy=False), w.astype(np.float32, copy=False), geo)
    assert done is not None  # (float32 operands and a new array: the pass applies)
    return done


def _run_class(fields: tuple[FieldBatch, ...], members: np.ndarray, first: int) -> bool:
    """Run the vertices ``members`` (one class of :func:`_classes`, ``first`` one of
    them) as stacked products; False when they are not regular (then nothing is
    written and :func:`compute_one` runs each, saying why)."""
    a, b, c, _, _ = fields
    geo = _geometry(fields, first)
    if geo is None:
        return False
    x = _gather(a, members, geo.ncg * geo.nig, geo.in_size)
    w = _gather(b, members, geo.ncg * geo.nog * geo.nig, geo.weight_size)
    acc = _products(x, w, geo)
    _scatter(c, members, geo.ncg * geo.nog, acc.reshape(members.size, geo.ncg * geo.nog, -1))
    return True


#: Whether :func:`_run_in_place` reads an operand every replica holds alike in replica
#: 0 only (``ImageField.held_alike``; a switch for tests comparing it with the path
#: that reads every replica's copy).
SHARED_OPERANDS = True


def _run_in_place(fields: tuple[Any, ...], num_vertices: int) -> bool:
    """Run a batch whose fields lie in every replica's image (:class:`ImageField`, the
    layout replica 0's): classes planned on replica 0 (:func:`_plan`), each class's
    operands read through one view or index for every replica (:func:`_accesses`: the
    weights many vertices share are not copied per vertex where they lie regularly) and
    its partial sums stored where they lie (computed first where a class stores them
    over its own operands: :func:`~.conv_access._apart`). The products are those of
    the packed batch, slice for slice. False, having written nothing, when the batch is
    not such (worklists or params differ between replicas, a vertex is not regular):
    then it runs packed."""
    if not all(isinstance(f, ImageField) for f in fields):
        return False
    a, b, c, wl, pr = fields
    replicas, n = a.replicas, a.offsets.size - 1
    if num_vertices != n * replicas or any(
        f.replicas != replicas or f.offsets.size != n + 1 for f in fields
    ):
        return False
    lists, params = wl.first_replica(), pr.first_replica()
    if lists is None or params is None:  # they differ between replicas
        return False
    first = (a, b, c, lists, params)
    regular, classes = _plan(first, n, 1)
    if not regular.all():
        return False
    shapes = _shapes(first, classes)
    if any(geo is None for geo in shapes):
        return False
    # an operand every replica holds alike (a layer's weights, updated alike) is read
    # in replica 0 only, for every replica: one copy of it passes through the caches
    x_first, w_first = (SHARED_OPERANDS and f.held_alike() for f in (a, b))
    for geo, pieces in zip(shapes, _accesses(fields, classes, shapes), strict=True):
        for ax, bx, cx, distinct, apart in pieces:
            x = a.read_first(ax) if x_first else a.read(ax)
            w = b.read_first(bx) if w_first else b.read(bx)
            view = c.store_view(cx, distinct) if apart else None  # (else: read first)
            if view is not None and chain_products(x, w, geo, view) is not None:
                continue  # stored where the partials lie
            c.write(cx, _products(x, w, geo), distinct)
    return True


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
