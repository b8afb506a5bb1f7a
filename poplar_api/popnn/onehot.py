"""One-hot encoding (``popops::encodeOneHot``, used by popnn's losses).

As ``lib/popops/Encoding.cpp`` ``encodeOneHotBase`` (graphcore/poplibs @7eac0f26): a
new ``[numIndices, classes]`` tensor is spread over tiles in blocks (grains of the
output type's vector width; index groups over as many tiles as possible, the unused
tile factor splitting the classes, at least 4 grains per block), zeroed with
``popops.zero``, then one ``popops::EncodeOneHot<indexType,outType>`` vertex per block
sets its ones, and the result is copied into ``encoded``.

Out-of-range indices: ``MASKED_LABEL_CODE`` (``0xFFFFFFFF``; -1 for INT indices, which
compare as unsigned in the codelet) sets nothing, as in Poplibs: its row stays all
zeros, which is how ``calcLoss`` masks a label. **Deviation from Poplibs:** any other
index outside ``[0, classes)`` (including other negative INT indices) makes the run
fail with a :class:`~poplar_api.codelet.VertexError` naming the vertex type, the
field ``indices``, the offending value, its position in ``indices`` and the valid
range, where the Poplibs codelet silently writes an all-zero row. To that end each
vertex's ``params`` holds, besides the codelet's ``(offset, sliceLength)``, the number
of classes and the position of its first index (ipusim-only vertex state).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api import program as _program
from poplar_api.codelet import InOut, Input, MultiVertex, Vector, Vertex, VertexError
from poplar_api.errors import GraphError
from poplar_api.graph import Graph
from poplar_api.library_checks import check_element_type, check_graph
from poplar_api.popnn import estimators as est
from poplar_api.popnn.mapping import check_sequence
from poplar_api.popnn.vertices import MASKED_LABEL_CODE
from poplar_api.popops.elementwise import zero
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT, Type

__all__ = ["encodeOneHot", "one_hot_vertex"]

_CACHE: dict[tuple[Type, Type], type] = {}
#: ``minGrainsPerTile`` of ``encodeOneHotBase``.
_MIN_GRAINS_PER_TILE = 4


def _compute(cls, batches, num_vertices, num_workers):
    """Every vertex's ones at once (each index of vertex ``v`` is compared with ``v``'s
    own ``params``); the first bad index in vertex order raises, as vertex by vertex."""
    idx, out, par = batches["indices"], batches["out"], batches["params"]
    n = int(num_vertices)
    counts = np.diff(idx.offsets[: n + 1]).astype(np.int64)
    if n == 0 or int(counts.sum()) == 0:
        return
    params = par.data[par.offsets[:n, None] + np.arange(4)].astype(np.int64)
    offset, length, classes, first = params.T
    lo = int(idx.offsets[0])
    vertex = np.repeat(np.arange(n), counts)
    position = np.arange(vertex.size, dtype=np.int64) - (idx.offsets[vertex] - lo)
    ind = idx.data[lo : lo + vertex.size].astype(np.int64) & 0xFFFFFFFF
    bad = np.flatnonzero((ind >= classes[vertex]) & (ind != MASKED_LABEL_CODE))
    if bad.size:
        at = int(bad[0])
        v = int(vertex[at])
        _raise_bad_index(cls, int(ind[at]), int(first[v]) + int(position[at]), int(classes[v]))
    start = offset[vertex]
    hit = np.flatnonzero((ind >= start) & (ind < start + length[vertex]))
    v = vertex[hit]
    out.data[out.offsets[v] + position[hit] * length[v] + (ind[hit] - start[hit])] = 1


def _raise_bad_index(cls, value: int, position: int, classes: int) -> None:
    signed = cls.types[0] == INT
    shown = value - (1 << 32) if signed and value >= 1 << 31 else value
    masked = "-1 (MASKED_LABEL_CODE)" if signed else "MASKED_LABEL_CODE (0xFFFFFFFF)"
    raise VertexError(
        f"vertex type '{cls.typeName}': field 'indices' holds {shown} at position "
        f"{position}, outside the valid range [0, {classes}) of the {classes} classes "
        f"of the encoded tensor (and not {masked}, which gives an all-zero row); "
        f"hint: check the labels or indices written to the device",
        field="indices",
        index=position,
        size=classes,
    )


def _estimate(cls, sizes, target) -> int:
    return est.encode_one_hot(
        int(sizes["indices"]), index_unsigned=cls.types[0] == UNSIGNED_INT,
        out_half=cls.types[1] == HALF,
    )  # fmt: skip


def one_hot_vertex(index_type: Type, out_type: Type) -> type:
    """``popops::EncodeOneHot<indexType,outType>``.

    A supervisor (MultiVertex) for unsigned int -> half, which has an assembly
    version, else a worker vertex (``SupervisorVertexIf<hasAssembly>``). ``params``
    holds the vertex state ``(offset, sliceLength)`` and, for the range check, the
    number of classes and the position of the vertex's first index.
    """
    cls = _CACHE.get((index_type, out_type))
    if cls is None:
        multi = index_type == UNSIGNED_INT and out_type == HALF
        attrs: dict[str, Any] = {
            "typeName": f"popops::EncodeOneHot<{index_type.name},{out_type.name}>",
            "__doc__": "One-hot rows of a block of indices and classes.",
            "__module__": __name__,
            "types": (index_type, out_type),
            "indices": Input(Vector(index_type)),
            "params": Input(Vector(UNSIGNED_INT)),
            "out": InOut(Vector(out_type)),
            "computeBatch": classmethod(_compute),
            "getCycleEstimate": classmethod(_estimate),
        }
        name = f"EncodeOneHot_{index_type.constant}_{out_type.constant}"
        cls = type(name, (MultiVertex if multi else Vertex,), attrs)
        _CACHE[(index_type, out_type)] = cls
    return cls


def encodeOneHot(
    graph: Graph,
    indices: Tensor,
    encoded: Tensor,
    prog: _program.Sequence,
    debugName: str = "",
) -> None:
    """Write one-hot rows of ``indices`` into ``encoded`` (``[len(indices), classes]``).

    A ``MASKED_LABEL_CODE`` index gives an all-zero row. Unlike Poplibs (which writes
    an all-zero row), any other index outside ``[0, classes)`` makes ``Engine.run``
    raise :class:`~poplar_api.codelet.VertexError` naming the field ``indices``, the
    value, its position and the valid range.

    Raises
    ------
    GraphError
        ``encoded`` is not rank 2, ``indices`` not rank 1, or their rows differ.
    TypeMismatchError
        ``indices`` is not UNSIGNED_INT or INT, or ``encoded`` not float, half or int.
    """
    fn = "encodeOneHot"
    check_graph(graph, fn)
    check_sequence(prog, fn)
    for what, t in (("indices", indices), ("encoded", encoded)):
        if not graph.owns(t):
            raise GraphError(f"{fn}: {what} must be a Tensor of this graph, got {t!r}")
    if encoded.rank() != 2:
        raise GraphError(
            f"{fn}: encoded '{encoded.name}' has shape {encoded.shape()}; it must be 2-D "
            f"[numIndices, classes]"
        )
    if indices.rank() != 1:
        raise GraphError(
            f"{fn}: indices '{indices.name}' has shape {indices.shape()}; it must be 1-D; "
            f"hint: flatten it"
        )
    if encoded.dim(0) != indices.dim(0):
        raise GraphError(
            f"{fn}: encoded '{encoded.name}' has {encoded.dim(0)} rows but indices "
            f"'{indices.name}' has {indices.dim(0)} elements; they must match"
        )
    check_element_type(
        indices, "indices", (UNSIGNED_INT, INT), fn, "the index type must be unsigned int or int"
    )
    check_element_type(
        encoded,
        "encoded",
        (FLOAT, HALF, UNSIGNED_INT, INT),
        fn,
        "float, half, unsigned int or int is required",
    )
    out_type = encoded.elementType()
    name = debugName or fn
    target = graph.getTarget()
    num_tiles = target.getNumTiles()
    rows, classes = encoded.shape()
    one_hot = graph.addVariable(out_type, [rows, classes], f"{name}/encodedOut")
    grain = target.getVectorWidth(out_type)
    idx_grains = -(-rows // grain)
    idx_per_group = max(1, -(-idx_grains // num_tiles))
    idx_groups = -(-idx_grains // idx_per_group) if rows else 0
    batch_groups = max(num_tiles // max(idx_groups, 1), 1)
    cls_grains = -(-classes // grain)
    per_group = max(-(-cls_grains // batch_groups), _MIN_GRAINS_PER_TILE)
    blocks = []
    tile = 0
    for group in range(idx_groups):
        i0 = min(group * idx_per_group * grain, rows)
        i1 = min((group + 1) * idx_per_group * grain, rows)
        if i1 == i0:
            continue
        c = 0
        while c != classes:
            c1 = min(c + per_group * grain, classes)
            blocks.append((tile, i0, i1, c, c1))
            graph.setTileMapping(one_hot.slice([i0, c], [i1, c1]), tile)
            tile = (tile + 1) % num_tiles
            c = c1
    if not blocks:
        prog.add(_program.Copy(one_hot, encoded))
        return
    zero(graph, one_hot, prog, f"{name}/zero")
    params = np.array([[c0, c1 - c0, classes, i0] for _, i0, _, c0, c1 in blocks], np.uint32)
    const = graph.addConstant(UNSIGNED_INT, [len(blocks), 4], params, f"{name}/params")
    graph.mapElements(const, np.repeat([b[0] for b in blocks], 4))
    cls = one_hot_vertex(indices.elementType(), out_type)
    cs = graph.addComputeSet(f"{name}/OneHotEncode")
    conns = {
        "indices": [indices.slice(i0, i1) for _, i0, i1, _, _ in blocks],
        "params": const,
        "out": [one_hot.slice([i0, c0], [i1, c1]).flatten() for _, i0, i1, c0, c1 in blocks],
    }
    graph.addVertices(cs, cls, np.array([b[0] for b in blocks], np.int64), conns)
    prog.add(_program.Execute(cs))
    prog.add(_program.Copy(one_hot, encoded))
