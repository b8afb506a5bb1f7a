"""Vertex classes and graph helpers that many Poplar-API tests use.

A test file imports what it needs (``from codelets_common import Bump, tiny_graph``);
a vertex whose body is what a test is about stays in that test file. Everything here
runs on the 8-tile ``tiny`` preset.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from poplar_api import FLOAT, INT, ComputeSet, Device, Engine, Graph, IPUModel, Tensor, VertexRef
from poplar_api.codelet import InOut, Input, Output, Vector, VectorList, Vertex

__all__ = [
    "Bump",
    "CopyVec",
    "Gather",
    "ListSums",
    "Scale",
    "ScaleBy",
    "ShiftBy",
    "SumVertex",
    "loaded",
    "mapped",
    "owners",
    "read_floats",
    "tiny_device",
    "tiny_graph",
    "variables",
    "vertex_on",
]


class Bump(Vertex):
    """``c += 1`` on one INT: a vertex whose runs can be counted from its output."""

    c = InOut(INT)

    @staticmethod
    def compute(c):
        c[0] += 1
        return True


class SumVertex(Vertex):
    """``out = sum(in)``: a vector in, a scalar out (the vertex of the Poplar tutorials)."""

    in_ = Input(Vector(FLOAT))
    out = Output(FLOAT)

    @staticmethod
    def compute(in_, out):
        s = 0.0
        for i in range(in_.shape[0]):
            s += in_[i]
        out[0] = s
        return True


class Scale(Vertex):
    """``out = 2 * in`` elementwise (a worker vertex); it has no cycle estimator, so a
    test sets an estimate or leaves it missing."""

    in_ = Input(Vector(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(in_, out):
        for i in range(in_.shape[0]):
            out[i] = 2.0 * in_[i]
        return True


class ScaleBy(Vertex):
    """``out[i] = in[i] * k`` with a scalar field ``k``: vector, scalar and output
    fields on one vertex type."""

    in_ = Input(Vector(FLOAT))
    k = Input(FLOAT)
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(in_, k, out):
        for i in range(in_.shape[0]):
            out[i] = in_[i] * k[0]
        return True


class ShiftBy(ScaleBy):
    """``out[i] = in[i] + k``: the fields of :class:`ScaleBy` (inherited), another
    vertex type."""

    @staticmethod
    def compute(in_, k, out):
        for i in range(in_.shape[0]):
            out[i] = in_[i] + k[0]
        return True


class ListSums(Vertex):
    """``out[k]`` = sum of vector ``k`` of ``in``: a vertex with a ``VectorList`` field."""

    in_ = Input(VectorList(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(in_, out):
        for k in range(len(in_)):
            s = 0.0
            vec = in_[k]
            for i in range(vec.shape[0]):
                s += vec[i]
            out[k] = s
        return True


class Gather(Vertex):
    """Reads a list of vectors into a vector and computes nothing: a vertex whose
    connections, rows and tiles (not its values) are what a test looks at."""

    parts = Input(VectorList(FLOAT))
    out = Output(Vector(FLOAT))

    @staticmethod
    def compute(parts, out):
        return True


class CopyVec(Vertex):
    """``dst = src``, one numpy copy for every vertex of the type."""

    src = Input(Vector(FLOAT))
    dst = Output(Vector(FLOAT))

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        batches["dst"].data[:] = batches["src"].data


def tiny_device() -> Device:
    """A fresh device of the ``tiny`` preset (one IPU, 8 tiles)."""
    return IPUModel("tiny").createDevice()


def tiny_graph() -> Graph:
    """An empty graph for the ``tiny`` preset's target."""
    return Graph(tiny_device().getTarget())


def mapped(graph: Graph, type_: Any, shape: list[int], name: str, tile: int = 0) -> Tensor:
    """A new variable of ``graph``, all of it mapped to ``tile``."""
    tensor = graph.addVariable(type_, shape, name)
    graph.setTileMapping(tensor, tile)
    return tensor


def variables(
    graph: Graph, names: Iterable[str], tile: int = 0, n: int = 4, type_: Any = FLOAT
) -> list[Tensor]:
    """One new ``type_[n]`` variable per name (``"abc"`` gives a, b and c), each mapped
    whole to ``tile``."""
    return [mapped(graph, type_, [n], name, tile) for name in names]


def vertex_on(
    graph: Graph,
    compute_set: ComputeSet,
    vertex: Any,
    fields: Mapping[str, Any],
    tile: int,
    cycles: int,
) -> VertexRef:
    """A vertex of type ``vertex`` connected to ``fields``, added to ``compute_set``
    on ``tile`` with a cycle estimate of ``cycles``."""
    v = graph.addVertex(compute_set, vertex, fields)
    graph.setTileMapping(v, tile)
    graph.setPerfEstimate(v, cycles)
    return v


def read_floats(engine: Engine, reads: Mapping[str, Tensor]) -> dict[str, np.ndarray]:
    """Each host-readable tensor of ``reads`` (handle -> tensor) read from ``engine``
    into a float32 array of the tensor's shape."""
    out = {}
    for name, t in reads.items():
        buf = np.zeros(t.shape(), np.float32)
        engine.readTensor(name, buf)
        out[name] = buf
    return out


def loaded(
    graph: Graph,
    programs: Any,
    device: Device | None = None,
    options: Mapping[str, Any] | None = None,
) -> Engine:
    """An engine for ``graph`` and ``programs``, loaded on ``device`` (a new tiny
    device when None), not yet run."""
    engine = Engine(graph, programs, options)
    engine.load(device or tiny_device())
    return engine


def owners(state: Any, ids: np.ndarray) -> list[int]:
    """The variables owning ``ids``, looked up id by id in the variables' id ranges (a
    reference for what liveness marks)."""
    found = set()
    for vid, var in enumerate(state.variables):
        if ((ids >= var.base) & (ids < var.base + var.size)).any():
            found.add(vid)
    return sorted(found)
