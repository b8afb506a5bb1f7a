"""The poplin reduction of split partial sums: ``poplin::ReduceAdd``.

A :class:`~poplar_api.codelet.MultiVertex` library vertex with a vectorised numpy
``computeBatch`` and a ``getCycleEstimate`` from :mod:`poplar_api.poplin.estimators`;
one class exists per element-type combination, named as Poplar templates are
(``poplin::ReduceAdd<float,float>``). Convolutions and matMul use it when the input
channels are split over tiles, and to cast float partials to a HALF output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from poplar_api.codelet import FieldBatch, InOut, Input, MultiVertex, Output, Vector, VectorList
from poplar_api.poplin.estimators import reduce_add_cycles
from poplar_api.types import FLOAT, HALF, Type

#: Element types a matmul operand, partial or output may have.
MATMUL_TYPES = (FLOAT, HALF)


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


_REDUCE = {
    (p, o, u): _make_reduce(p, o, u)
    for p in MATMUL_TYPES
    for o in MATMUL_TYPES
    for u in (False, True)
}


def reduce_add_vertex(partials_type: Type, out_type: Type, update: bool = False) -> type:
    """The ReduceAdd (or scaled-update) class for partials and output element types."""
    return _REDUCE[(partials_type, out_type, update)]


__all__ = ["MATMUL_TYPES", "reduce_add_vertex"]
