"""The poplin codelets: the per-tile partial matmul and the reduction of K-split partials.

Both are :class:`~poplar_api.codelet.MultiVertex` library vertices with a vectorised
numpy ``computeBatch`` (no Numba compile) and a ``getCycleEstimate`` from
:mod:`poplar_api.poplin.estimators`. One class exists per element-type combination,
named as Poplar templates are (``poplin::MatMulPartial<half,float>``).

``MatMulPartial`` fields: ``in`` (the ``[m, k]`` block of the left operand, row-major),
``weights`` (the ``[k, n]`` block of the right operand, row-major) and ``out`` (the
``[m, n]`` result). The block shape is not stored: ``m, k, n`` follow from the three
field sizes (``m^2 = |in| |out| / |weights|``, and likewise for ``k`` and ``n``), which
are checked to be consistent.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.codelet import FieldBatch, InOut, Input, MultiVertex, Output, Vector, VectorList
from poplar_api.poplin.estimators import matmul_partial_cycles, reduce_add_cycles
from poplar_api.types import FLOAT, HALF, Type

#: Element types a matmul operand, partial or output may have.
MATMUL_TYPES = (FLOAT, HALF)


def block_dims(
    in_elems: Any, weights_elems: Any, out_elems: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(m, k, n, ok)`` of partial matmul blocks from their field sizes (arrays).

    ``ok`` is False where the sizes are not those of ``[m,k] x [k,n] -> [m,n]`` with
    positive ``m, k, n``.
    """
    a = np.asarray(in_elems, np.int64)
    b = np.asarray(weights_elems, np.int64)
    c = np.asarray(out_elems, np.int64)
    positive = (a > 0) & (b > 0) & (c > 0)
    safe_a, safe_b, safe_c = (np.where(positive, x, 1) for x in (a, b, c))
    m = np.rint(np.sqrt(safe_a * safe_c / safe_b)).astype(np.int64)
    k = np.rint(np.sqrt(safe_a * safe_b / safe_c)).astype(np.int64)
    n = np.rint(np.sqrt(safe_b * safe_c / safe_a)).astype(np.int64)
    ok = positive & (m * k == a) & (k * n == b) & (m * n == c)
    return m, k, n, ok


def _gather(batch: FieldBatch, rows: np.ndarray, length: int) -> np.ndarray:
    """``data[offsets[v] : offsets[v] + length]`` for each vertex ``v`` in ``rows``."""
    return batch.offsets[rows][:, None] + np.arange(length, dtype=np.int64)[None, :]


class _MatMulPartialBase(MultiVertex):
    """``out = in @ weights`` on one tile, accumulated in float32 (see module docstring)."""

    #: ``(input type, output type)``; a tuple, since a bare Type attribute reads as a field.
    element_types: tuple[Type, Type] = (FLOAT, FLOAT)

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        a, b, c = batches["in"], batches["weights"], batches["out"]
        m, k, n, ok = block_dims(np.diff(a.offsets), np.diff(b.offsets), np.diff(c.offsets))
        shapes = np.stack([m, k, n], axis=1)[ok]
        good = np.flatnonzero(ok)
        if good.size == 0:
            return ok
        uniq, inverse = np.unique(shapes, axis=0, return_inverse=True)
        inverse = inverse.reshape(-1)
        for s, (bm, bk, bn) in enumerate(uniq.tolist()):
            rows = good[inverse == s]
            lhs = a.data[_gather(a, rows, bm * bk)].reshape(-1, bm, bk).astype(np.float32)
            rhs = b.data[_gather(b, rows, bk * bn)].reshape(-1, bk, bn).astype(np.float32)
            c.data[_gather(c, rows, bm * bn)] = np.matmul(lhs, rhs).reshape(rows.size, -1)
        return ok

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        m, k, n, ok = block_dims(sizes["in"], sizes["weights"], sizes["out"])
        if not bool(ok):
            raise ValueError(
                f"field sizes in={sizes['in']}, weights={sizes['weights']}, out={sizes['out']} "
                f"are not those of an [m,k] x [k,n] -> [m,n] block with m, k, n >= 1"
            )
        return matmul_partial_cycles(
            int(m),
            int(k),
            int(n),
            cls.element_types[0].size,
            target.getFpFlopsPerCycle(cls.element_types[0]),
            target.getNumWorkerContexts(),
        )


class _ReduceAddBase(MultiVertex):
    """``out = sum(partials)`` (or ``out += scale * sum`` when ``update``), float64 sum."""

    update: bool = False
    #: ``(partials type, output type)``.
    element_types: tuple[Type, Type] = (FLOAT, FLOAT)

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        p, out = batches["partials"], batches["out"]
        out_len = np.diff(out.offsets)
        inner_len = np.diff(p.inner_offsets)
        owner = np.repeat(np.arange(num_vertices, dtype=np.int64), np.diff(p.offsets))
        ok = np.ones(num_vertices, dtype=bool)
        bad = inner_len != out_len[owner]
        ok[owner[bad]] = False
        # element e of inner vector j adds into out element offsets[owner(j)] + e
        elem_vec = np.repeat(np.arange(inner_len.size, dtype=np.int64), inner_len)
        pos = np.arange(p.data.size, dtype=np.int64) - p.inner_offsets[elem_vec]
        target = out.offsets[owner[elem_vec]] + pos
        keep = ok[owner[elem_vec]]
        sums = np.bincount(target[keep], weights=p.data[keep], minlength=out.data.size)
        if cls.update:
            scale = np.repeat(batches["scale"].data.astype(np.float64), out_len)
            result = out.data.astype(np.float64) + scale * sums
        else:
            result = sums
        has_out = np.repeat(ok, out_len)
        out.data[has_out] = result[has_out]
        return ok

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        return reduce_add_cycles(
            len(sizes["partials"]),
            int(sizes["out"]),
            cls.element_types[0].size,
            cls.element_types[1].size,
            target.getNumWorkerContexts(),
            update=cls.update,
        )


def _tname(t: Type) -> str:
    return t.name


def _make_partial(in_type: Type, out_type: Type) -> type:
    name = f"MatMulPartial_{in_type.constant}_{out_type.constant}"
    attrs = {
        "__module__": __name__,
        "__doc__": f"Partial matmul, {in_type.name} inputs, {out_type.name} output.",
        "typeName": f"poplin::MatMulPartial<{_tname(in_type)},{_tname(out_type)}>",
        "element_types": (in_type, out_type),
        "in_": Input(Vector(in_type)),
        "weights": Input(Vector(in_type)),
        "out": Output(Vector(out_type)),
    }
    return type(name, (_MatMulPartialBase,), attrs)


def _make_reduce(partials_type: Type, out_type: Type, update: bool) -> type:
    kind = "ReduceAddScaledUpdate" if update else "ReduceAdd"
    name = f"{kind}_{out_type.constant}_{partials_type.constant}"
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"{kind}: {partials_type.name} partials into {out_type.name} output.",
        "typeName": f"poplin::{kind}<{_tname(out_type)},{_tname(partials_type)}>",
        "update": update,
        "element_types": (partials_type, out_type),
        "partials": Input(VectorList(partials_type)),
        "out": (InOut if update else Output)(Vector(out_type)),
    }
    if update:
        attrs["scale"] = Input(FLOAT)
    return type(name, (_ReduceAddBase,), attrs)


_PARTIAL = {(i, o): _make_partial(i, o) for i in MATMUL_TYPES for o in MATMUL_TYPES}
_REDUCE = {
    (p, o, u): _make_reduce(p, o, u)
    for p in MATMUL_TYPES
    for o in MATMUL_TYPES
    for u in (False, True)
}


def matmul_partial_vertex(in_type: Type, out_type: Type) -> type:
    """The MatMulPartial class for input and output element types (FLOAT or HALF)."""
    return _PARTIAL[(in_type, out_type)]


def reduce_add_vertex(partials_type: Type, out_type: Type, update: bool = False) -> type:
    """The ReduceAdd (or scaled-update) class for partials and output element types."""
    return _REDUCE[(partials_type, out_type, update)]


__all__ = ["MATMUL_TYPES", "block_dims", "matmul_partial_vertex", "reduce_add_vertex"]
