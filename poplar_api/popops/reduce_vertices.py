"""The reduction vertices (``popops::Reduce...``) and how a vertex is specialised.

One vertex class per operation, partials type, output type, update/scale flags and
specialisation, generated on first use and named as Poplibs names them
(``lib/popops/reduction/``): each output element reduces its VectorList of partials
(scaled, and added to the output for an update). The kernels run in numpy over every
vertex of a compute set at once (:func:`segment_reduce`); cycle estimates come from
:mod:`.reduce_estimators`. :func:`_specialisation` restates
``getReductionVertexSpecialisation``.
"""

from __future__ import annotations

import enum
import itertools
from typing import Any

import numba
import numpy as np

from poplar_api.codelet import InOut, Input, Output, Vector, VectorList, Vertex
from poplar_api.errors import GraphError
from poplar_api.popops import reduce_estimators as est
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT, Type

__all__ = ["Operation", "reduce_vertex", "segment_reduce"]


class Operation(enum.Enum):
    """Reduction operation (``popops::Operation``)."""

    ADD = "ADD"
    MUL = "MUL"
    MAX = "MAX"
    MIN = "MIN"
    SQUARE_ADD = "SQUARE_ADD"
    LOGICAL_AND = "LOGICAL_AND"
    LOGICAL_OR = "LOGICAL_OR"


_ARITHMETIC_TYPES = (FLOAT, HALF, INT, UNSIGNED_INT)
_LOGICAL_OPS = (Operation.LOGICAL_AND, Operation.LOGICAL_OR)
_SCALABLE_OPS = (Operation.ADD, Operation.SQUARE_ADD)


_SPECIALISATIONS = (
    "DEFAULT",
    "SCALAR_OUTPUT_REGIONS",
    "SCALAR_OUTPUT_SINGLE_INPUT",
    "ALL_REGIONS_CONTINUOUS",
)

#: ``getReductionVertexOpName`` (reduction/ReductionVertex.hpp).
_VERTEX_OP_NAMES = {
    Operation.ADD: "ReduceAdd",
    Operation.SQUARE_ADD: "ReduceSquareAdd",
    Operation.MUL: "ReduceMul",
    Operation.MIN: "ReduceMin",
    Operation.MAX: "ReduceMax",
    Operation.LOGICAL_AND: "ReduceAnd",
    Operation.LOGICAL_OR: "ReduceOr",
}


def _identity(op: Operation, dtype: np.dtype) -> Any:
    """Value of a reduction over no elements."""
    if op in (Operation.ADD, Operation.SQUARE_ADD):
        return 0
    if op is Operation.MUL:
        return 1
    if op is Operation.LOGICAL_AND:
        return True
    if op is Operation.LOGICAL_OR:
        return False
    big = np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).max
    small = -np.inf if np.issubdtype(dtype, np.floating) else np.iinfo(dtype).min
    return small if op is Operation.MAX else big


_UFUNCS = {
    Operation.ADD: np.add,
    Operation.SQUARE_ADD: np.add,
    Operation.MUL: np.multiply,
    Operation.MAX: np.maximum,
    Operation.MIN: np.minimum,
    Operation.LOGICAL_AND: np.logical_and,
    Operation.LOGICAL_OR: np.logical_or,
}


#: Longest segment :func:`_short_sums` adds: numpy's float reduction adds fewer than 8
#: elements after the first one by one, from -0.0 (``pairwise_sum`` in
#: ``numpy/_core/src/umath/loops_utils.h.src``), and 8 or more in eight lanes.
SHORT = 8


@numba.njit(cache=True, nogil=True)
def _short_sums(values, bounds, out):  # pragma: no cover - compiled
    """``np.add.reduceat`` of float32 ``values`` over segments of at most :data:`SHORT`
    elements, as numpy adds them: a segment of one element is that element (a
    signalling NaN kept as it is); a longer one is its first element plus the sum,
    from -0.0, of the others in order; an empty one is 0."""
    for j in range(out.size):
        a, b = bounds[j], bounds[j + 1]
        if b - a <= 1:
            out[j] = values[a] if b > a else np.float32(0.0)
            continue
        rest = np.float32(-0.0)
        for i in range(a + 1, b):
            rest += values[i]
        out[j] = values[a] + rest


def segment_reduce(op: Operation, data: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """Reduce ``data[bounds[j]:bounds[j+1]]`` for every ``j`` with ``op`` (vectorised).

    SQUARE_ADD squares the elements first; empty segments give the identity. A FLOAT
    sum whose segments are all short (:data:`SHORT`), such as a reduction's partials
    of one or two elements per output, is one compiled pass (:func:`_short_sums`)
    giving ``reduceat``'s bits: ``reduceat`` pays about 7 ns per segment, and a
    16-replica batch has 16 times the segments.
    """
    values = data * data if op is Operation.SQUARE_ADD else data
    lengths = np.diff(bounds)
    if (
        op in _SCALABLE_OPS
        and values.dtype == np.float32
        and values.ndim == 1
        and lengths.size
        and int(bounds[-1]) == values.size
        and int(lengths.min()) >= 0
        and int(lengths.max()) <= SHORT
    ):
        out = np.empty(lengths.size, np.float32)
        _short_sums(values, np.asarray(bounds, np.int64), out)
        return out
    result = np.full(lengths.size, _identity(op, data.dtype), dtype=data.dtype)
    nonempty = lengths > 0
    if nonempty.any():
        result[nonempty] = _UFUNCS[op].reduceat(values, bounds[:-1][nonempty])
    return result


class _ReduceBase(Vertex):
    """Shared kernel and estimator of the generated ``Reduce`` vertex classes."""

    op: Operation = Operation.ADD
    # (partials type, output type); a tuple, because a Type class attribute would be
    # taken for a field declaration.
    types: tuple[Type, Type] = (FLOAT, FLOAT)
    update: bool = False
    scaled: bool = False
    specialisation: str = "DEFAULT"

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        partials = batches["partials"]
        out = batches["out"]
        bounds = partials.inner_offsets
        if bounds.size - 1 != out.data.size:
            raise GraphError(
                f"vertex type {cls.typeName}: {bounds.size - 1} partial vectors for "
                f"{out.data.size} outputs; each output needs exactly one partial vector"
            )
        result = segment_reduce(cls.op, partials.data, bounds)
        if cls.scaled:
            per_vertex = np.diff(out.offsets)
            k = batches["k"].data
            result = result * np.repeat(k, per_vertex).astype(result.dtype, copy=False)
        if cls.update:
            out.data[:] = out.data + result
        else:
            out.data[:] = result

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        """The Poplibs estimator of this vertex's specialisation (reduce_estimators)."""
        lengths = [int(n) for n in sizes["partials"]]
        partials_type, out_type = cls.types
        p_size = partials_type.size
        dpw = est.data_path_elems(p_size)
        acc_vw = est.acc_vector_width(p_size, partials_type.is_floating)
        accumulator = cls.op in _SCALABLE_OPS  # isAccumOp: ADD and SQUARE_ADD
        op_vw = acc_vw if accumulator else target.getVectorWidth(partials_type)
        if cls.op in _LOGICAL_OPS:
            conv = int(partials_type != out_type)
            return est.generic_reduce_non_vectorised(lengths, conv=conv)
        if cls.specialisation == "SCALAR_OUTPUT_SINGLE_INPUT":
            return est.scalar_output_single_input(
                sum(lengths), op_vw=op_vw, dpw=dpw, out_is_float=out_type == FLOAT
            )
        if cls.specialisation == "ALL_REGIONS_CONTINUOUS":
            return est.all_regions_continuous(
                len(lengths), lengths[0], acc_vw=acc_vw, dpw=dpw, update=cls.update
            )
        return est.generic_reduce(
            lengths,
            op_vw=op_vw,
            dpw=dpw,
            out_vw=target.getVectorWidth(out_type),
            accumulator=accumulator,
            update=cls.update,
        )


_VERTEX_CLASSES: dict[tuple, type] = {}


def reduce_vertex(
    op: Operation,
    partials_type: Type,
    out_type: Type,
    update: bool,
    scaled: bool,
    specialisation: str,
) -> type:
    """The (cached) ``Reduce`` vertex class for one combination of template parameters.

    Fields: ``partials`` (VectorList, one vector per output), ``out`` (Vector; InOut when
    updating) and, when scaled, ``k`` (the FLOAT scale).
    """
    key = (op, partials_type, out_type, update, scaled, specialisation)
    cls = _VERTEX_CLASSES.get(key)
    if cls is not None:
        return cls
    # getReductionVertexName (reduction/ReductionVertex.hpp).
    op_name = _VERTEX_OP_NAMES[op]
    params = f"popops::{op_name},{partials_type.name},{out_type.name},{str(update).lower()}"
    if specialisation == "ALL_REGIONS_CONTINUOUS":
        kind = "ScaledContinuousReduce" if scaled else "ContinuousReduce"
        name = f"popops::{kind}<{params}>"
    else:
        kind = "ScaledReduce" if scaled else "Reduce"
        name = f"popops::{kind}<{params},popops::ReductionSpecialisation::{specialisation}>"
    namespace: dict[str, Any] = {
        "typeName": name,
        "op": op,
        "types": (partials_type, out_type),
        "update": update,
        "scaled": scaled,
        "specialisation": specialisation,
        "partials": Input(VectorList(partials_type)),
        "out": (InOut if update else Output)(Vector(out_type)),
        "__module__": __name__,
    }
    if scaled:
        namespace["k"] = Input(FLOAT)
    cls = type(f"Reduce_{len(_VERTEX_CLASSES)}", (_ReduceBase,), namespace)
    _VERTEX_CLASSES[key] = cls
    return cls


def _specialisation(
    op: Operation, lengths: list[int], out_ids: list[int], update: bool, scaled: bool
) -> str:
    """``getReductionVertexSpecialisation`` (reduction/ReductionConnection.cpp) for a
    vertex whose output regions are single elements with one partial region each.

    ALL_REGIONS_CONTINUOUS (ADD, SQUARE_ADD, MAX, MIN) when every output has the same
    number of partials and the outputs are contiguous; else SCALAR_OUTPUT_SINGLE_INPUT
    for one ADD/SQUARE_ADD output without update or scale; else SCALAR_OUTPUT_REGIONS
    (all output regions have one element). Not modelled: the partials-alignment test
    of ``allRegionsContinuous`` (partials are taken as cheap to gather) and the
    STRIDED_REDUCE forms, which need outputs of more than one element.
    """
    continuous_ops = (Operation.ADD, Operation.SQUARE_ADD, Operation.MAX, Operation.MIN)
    ids = sorted(out_ids)
    contiguous = all(b - a == 1 for a, b in itertools.pairwise(ids))
    if op in continuous_ops and lengths.count(lengths[0]) == len(lengths) and contiguous:
        return "ALL_REGIONS_CONTINUOUS"
    if op in _SCALABLE_OPS and len(lengths) == 1 and not update and not scaled:
        return "SCALAR_OUTPUT_SINGLE_INPUT"
    return "SCALAR_OUTPUT_REGIONS"
