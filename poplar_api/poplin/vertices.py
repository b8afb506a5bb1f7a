"""The poplin reduction of split partial sums: ``poplin::ReduceAdd``.

:class:`~poplar_api.codelet.MultiVertex` library vertices with vectorised numpy
``computeBatch`` and ``getCycleEstimate`` from :mod:`poplar_api.poplin.estimators`,
one class per element types and variant, named as Poplar's templates are
(``poplin::ReduceAdd<out,partials,singleInput,constrainPartials>``, graphcore/poplibs
7eac0f26 ``lib/poplin/codelets/ReduceAdd.cpp``):

* several inputs (``singleInput`` false): ``partials`` is a list of one vector per
  partial;
* single input: the tile's own partial is ``initialPartial`` and the others one flat
  ``partials`` vector of ``numPartials * numElems`` elements (one exchanged region); with
  ``constrainPartials`` they are in interleaved memory, so the vertex loads two vectors
  a cycle (the ``enableFastReduce`` option).

Convolutions and matMul use them when the input channels are split over tiles
(:mod:`poplar_api.poplin.conv_reduce`).
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
    """``out = sum(partials)`` (or ``out += scale * sum`` when ``update``), float64 sum:
    the several-input ReduceAdd."""

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
        return _store(cls.update, batches, sums, out_len, ok)

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        return reduce_add_cycles(
            len(sizes["partials"]),
            int(sizes["out"]),
            cls.element_types[0].size,
            cls.element_types[1].size,
            target.getNumWorkerContexts(),
            update=cls.update,
            single_input=False,
        )


def _store(
    update: bool, batches: Mapping[str, FieldBatch], sums: np.ndarray, out_len: np.ndarray,
    ok: np.ndarray,
) -> np.ndarray:  # fmt: skip
    """Write the float64 ``sums`` to the ``out`` of the vertices ``ok`` (with ``update``,
    ``out += scale * sums``); return ``ok``."""
    out = batches["out"]
    if update:
        scale = np.repeat(batches["scale"].data.astype(np.float64), out_len)
        sums = out.data.astype(np.float64) + scale * sums
    has_out = np.repeat(ok, out_len)
    out.data[has_out] = sums[has_out]
    return ok


class _ReduceAddSingleBase(MultiVertex):
    """``out = initialPartial + sum(partials)``: the single-input ReduceAdd, float64 sum."""

    update: bool = False
    constrain: bool = False
    element_types: tuple[Type, Type] = (FLOAT, FLOAT)

    @classmethod
    def computeBatch(
        cls, batches: Mapping[str, FieldBatch], num_vertices: int, num_workers: int
    ) -> np.ndarray:
        p, init, out = batches["partials"], batches["initialPartial"], batches["out"]
        out_len = np.diff(out.offsets)
        p_len = np.diff(p.offsets)
        safe = np.maximum(out_len, 1)
        ok = (np.diff(init.offsets) == out_len) & (p_len % safe == 0)
        owner = np.repeat(np.arange(num_vertices, dtype=np.int64), p_len)
        pos = np.arange(p.data.size, dtype=np.int64) - p.offsets[owner]
        keep = ok[owner]
        target = out.offsets[owner] + pos % safe[owner]
        sums = np.bincount(target[keep], weights=p.data[keep], minlength=out.data.size)
        sums = sums + init.data.astype(np.float64)
        return _store(cls.update, batches, sums, out_len, ok)

    @classmethod
    def getCycleEstimate(cls, sizes: Mapping[str, Any], target: Any) -> int:
        n = int(sizes["out"])
        return reduce_add_cycles(
            int(sizes["partials"]) // max(n, 1),
            n,
            cls.element_types[0].size,
            cls.element_types[1].size,
            target.getNumWorkerContexts(),
            update=cls.update,
            single_input=True,
            constrain_partials=cls.constrain,
        )


def _tname(t: Type) -> str:
    return t.name


def _make_reduce(
    partials_type: Type, out_type: Type, update: bool, single: bool = False, constrain: bool = False
) -> type:
    kind = "ReduceAddScaledUpdate" if update else "ReduceAdd"
    variant = f"{str(single).lower()},{str(constrain).lower()}"
    name = f"{kind}_{out_type.constant}_{partials_type.constant}_{int(single)}{int(constrain)}"
    attrs: dict[str, Any] = {
        "__module__": __name__,
        "__doc__": f"{kind}: {partials_type.name} partials into {out_type.name} output"
        + (" (single input)." if single else "."),
        "typeName": f"poplin::{kind}<{_tname(out_type)},{_tname(partials_type)},{variant}>",
        "update": update,
        "element_types": (partials_type, out_type),
        "partials": Input(Vector(partials_type) if single else VectorList(partials_type)),
        "out": (InOut if update else Output)(Vector(out_type)),
    }
    if single:
        attrs["initialPartial"] = Input(Vector(partials_type))
        attrs["constrain"] = constrain
    if update:
        attrs["scale"] = Input(FLOAT)
    return type(name, (_ReduceAddSingleBase if single else _ReduceAddBase,), attrs)


#: (single input, constrain partials) of Poplibs' ReduceAdd templates.
_VARIANTS = ((False, False), (True, False), (True, True))
_REDUCE = {
    (p, o, u, si, c): _make_reduce(p, o, u, si, c)
    for p in MATMUL_TYPES
    for o in MATMUL_TYPES
    for u in (False, True)
    for si, c in _VARIANTS
}


def reduce_add_vertex(
    partials_type: Type,
    out_type: Type,
    update: bool = False,
    single_input: bool = False,
    constrain_partials: bool = False,
) -> type:
    """The ReduceAdd (or scaled-update) class for partials and output element types and
    the variant (``single_input``, ``constrain_partials``; see the module docstring)."""
    if constrain_partials and not single_input:
        raise ValueError(
            "reduce_add_vertex: constrain_partials=True needs single_input=True (Poplibs "
            "has no several-input ReduceAdd with constrained partials)"
        )
    return _REDUCE[(partials_type, out_type, update, single_input, constrain_partials)]


__all__ = ["MATMUL_TYPES", "reduce_add_vertex"]
