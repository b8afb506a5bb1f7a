"""Shared helpers of the popops op tests: a small IPU Model graph with host I/O.

Not a test module (no ``test_`` prefix); imported by the popops op tests
(``test_popops_exprops.py``, ``test_popops_select_clamp.py``, the reduction tests)
and by the popnn tests that run a graph the same way.
"""

from __future__ import annotations

import numpy as np

from poplar_api import FLOAT, HALF, INT, UNSIGNED_INT, Engine, Graph, IPUModel, poputil
from poplar_api import program as prog
from poplar_api.program import Execute

#: W and the 64-bit vector width per type on the IPU Model targets.
W = 6
VW = {"float": 2, "half": 4, "int": 2, "unsigned int": 2, "bool": 8}


class Harness:
    """A graph on an IPU Model (``tiny`` by default), host-written inputs, host reads."""

    def __init__(self, model: str = "tiny") -> None:
        self.device = IPUModel(model).createDevice()
        self.graph = Graph(self.device.getTarget())
        self.seq = prog.Sequence()
        self.values: dict[str, np.ndarray] = {}
        self.reads: dict[str, object] = {}

    def var(self, type_, values, name: str, tile: int | None = None):
        values = np.asarray(values).astype(type_.numpy)
        t = self.graph.addVariable(type_, list(values.shape), name)
        if tile is None:
            poputil.mapTensorLinearly(self.graph, t)
        else:
            self.graph.setTileMapping(t, tile)
        self.graph.createHostWrite(f"w-{name}", t)
        self.values[f"w-{name}"] = values
        return t

    def read(self, t, name: str):
        self.graph.createHostRead(f"r-{name}", t)
        self.reads[name] = t
        return t

    def run(self) -> dict[str, np.ndarray]:
        self.engine = Engine(self.graph, self.seq)
        self.engine.load(self.device)
        for handle, values in self.values.items():
            self.engine.writeTensor(handle, values.reshape(-1))
        self.engine.run(0)
        out = {}
        for name, t in self.reads.items():
            buf = np.zeros(t.shape(), t.elementType().numpy)
            self.engine.readTensor(f"r-{name}", buf)
            out[name] = buf
        return out

    def vertex_names(self, cs_index: int | None = None) -> set[str]:
        """Vertex type names of the graph (or of the Execute at ``cs_index`` in seq)."""
        state = self.graph._state
        if cs_index is None:
            return {v.vtype.name for v in state.vertices}
        ex = self.seq.programs[cs_index]
        assert isinstance(ex, Execute)
        return {state.vertices[i].vtype.name for i in ex.computeSet.vertices}


def run_graph(
    graph: Graph,
    seq: prog.Program,
    device: object,
    inputs: dict[str, np.ndarray],
    outputs: dict[str, tuple[object, object]],
) -> tuple[dict[str, np.ndarray], Engine]:
    """Load ``graph`` and ``seq`` on ``device``, write ``inputs`` ({handle: array}), run
    program 0 once and read ``outputs`` ({handle: (shape, numpy dtype)}).

    Returns the arrays read, by handle, and the engine (for its profile).
    """
    engine = Engine(graph, seq)
    engine.load(device)
    for handle, value in inputs.items():
        engine.writeTensor(handle, value)
    engine.run(0)
    result = {}
    for handle, (shape, dtype) in outputs.items():
        buf = np.zeros(shape, dtype)
        engine.readTensor(handle, buf)
        result[handle] = buf
    return result, engine


def random_values(type_, shape, seed: int, low=None, high=None) -> np.ndarray:
    """Random values representable in ``type_`` (bool: random truth values)."""
    rng = np.random.default_rng(seed)
    if type_ in (FLOAT, HALF):
        x = rng.uniform(-4 if low is None else low, 4 if high is None else high, shape)
    elif type_ is INT:
        x = rng.integers(-1000 if low is None else low, 1000 if high is None else high, shape)
    elif type_ is UNSIGNED_INT:
        x = rng.integers(0 if low is None else low, 2000 if high is None else high, shape)
    else:
        x = rng.integers(0, 2, shape).astype(bool)
    return np.asarray(x).astype(type_.numpy)


def random_shape(seed: int, rank_max: int = 3, dim_max: int = 9) -> list[int]:
    rng = np.random.default_rng(1000 + seed)
    return [int(d) for d in rng.integers(1, dim_max + 1, int(rng.integers(1, rank_max + 1)))]


def ceil(a: int, b: int) -> int:
    return -(-int(a) // int(b))
