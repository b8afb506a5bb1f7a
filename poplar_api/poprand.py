"""poprand: random tensors (uniform, normal, bernoulli) and dropout.

Signatures follow Poplar's ``poprand``: ``uniform(graph, seed, seedModifier, reference,
type, minVal, maxVal, prog)`` and so on. The result has ``reference``'s shape and tile
mapping; the values are generated on the tiles where ``reference`` lives, one
MultiVertex per tile.

Determinism: the value of the element at flat position ``p`` of ``reference`` depends
only on ``(seed, seedModifier, p)``. Positions are cut into blocks of
:data:`BLOCK` elements; block ``b`` draws from
``numpy.random.Generator(Philox(SeedSequence([seed0, seed1, seedModifier, b])))``, so the
same seed gives the same values whatever the mapping, and another modifier gives other
values.

``seed`` is either a mapped 2-element UNSIGNED_INT tensor, read at run time (changing
its value changes the numbers), or None. With None the fixed seed ``(0, 0)`` is used:
unlike the hardware, whose generator state advances, every run and every call with the
same modifier then gives the same values; pass a seed tensor (or another modifier) to
vary them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poplar_api import program as _program
from poplar_api.codelet import Input, MultiVertex, Output, Vector
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph
from poplar_api.popnn.mapping import check_sequence, clone_like, element_tiles, place, view
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT, Type

__all__ = ["BLOCK", "bernoulli", "dropout", "normal", "reference_values", "uniform"]

#: Elements per independently seeded block of positions.
BLOCK = 4096

#: Cycles per 64-bit output vector (derived; the formula sheet has no poprand entry):
#: uniform = random instruction + scale-and-shift (2); normal = the hardware's
#: Gaussian instruction + scale-and-shift + conversion (3); bernoulli = random +
#: compare + select (3); dropout = random + compare + multiply + select (4).
CYCLES_PER_VECTOR = {"uniform": 2, "normal": 3, "bernoulli": 3, "dropout": 4}


def reference_values(
    kind: str, seed: tuple[int, int], modifier: int, positions: np.ndarray, params: Any
) -> np.ndarray:
    """The float64 draws at ``positions``: uniform in [0, 1) or standard normal.

    ``kind`` is ``"normal"`` for Gaussian draws, anything else for uniform ones;
    ``params`` is unused (kept so the signature matches the vertex's call).
    """
    positions = np.asarray(positions, np.int64)
    out = np.empty(positions.size, np.float64)
    blocks = positions // BLOCK
    for b in np.unique(blocks).tolist():
        words = [int(seed[0]), int(seed[1]), int(modifier) & 0xFFFFFFFF, int(b)]
        gen = np.random.Generator(np.random.Philox(np.random.SeedSequence(words)))
        draw = gen.standard_normal(BLOCK) if kind == "normal" else gen.random(BLOCK)
        sel = blocks == b
        out[sel] = draw[positions[sel] % BLOCK]
    return out


def _transform(kind: str, draws: np.ndarray, params: np.ndarray, out_type: Type) -> np.ndarray:
    if kind == "uniform":
        lo, hi = float(params[0]), float(params[1])
        if out_type == INT:
            return np.floor(draws * (hi - lo + 1) + lo)
        return lo + (hi - lo) * draws
    if kind == "normal":
        return float(params[0]) + float(params[1]) * draws
    return (draws < float(params[0])).astype(np.float64)  # bernoulli / dropout keep mask


class _RandomVertex(MultiVertex):
    kind = "uniform"

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        out = batches["out"]
        seeds = batches["seed"].data.reshape(num_vertices, 2)
        pos_batch = batches["positions"]
        params = batches["params"]
        for v in range(num_vertices):
            header = pos_batch.data[pos_batch.offsets[v] : pos_batch.offsets[v + 1]]
            pairs = header[1:].astype(np.int64).reshape(-1, 2)
            positions = np.concatenate([np.arange(s, s + n) for s, n in pairs] or [[]])
            draws = reference_values(cls.kind, tuple(seeds[v]), int(header[0]), positions, None)
            p = params.data[params.offsets[v] : params.offsets[v + 1]]
            values = _transform(cls.kind, draws, p, cls.types[0])
            sl = slice(out.offsets[v], out.offsets[v + 1])
            if cls.kind == "dropout":
                values = np.where(values > 0, batches["in"].data[sl] * float(p[1]), 0)
            out.data[sl] = values

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        workers = target.getNumWorkerContexts()
        vw = max(1, 8 // cls.types[0].size)
        per_worker = -(-int(sizes["out"]) // workers)
        supervisor = target.config.tile.supervisor_overhead_cycles
        return workers * (16 + -(-per_worker // vw) * CYCLES_PER_VECTOR[cls.kind]) + supervisor


_CLASSES: dict[tuple[str, Type], type] = {}


def _vertex(kind: str, type_: Type) -> type:
    cls = _CLASSES.get((kind, type_))
    if cls is None:
        attrs: dict[str, Any] = {
            "typeName": f"poprand::{kind.title()}Supervisor<{type_.name}>",
            "__module__": __name__,
            "kind": kind,
            "types": (type_,),
            "seed": Input(Vector(UNSIGNED_INT)),
            "positions": Input(Vector(UNSIGNED_INT)),
            "params": Input(Vector(FLOAT)),
            "out": Output(Vector(type_)),
        }
        if kind == "dropout":
            attrs["in_"] = Input(Vector(type_))
        cls = type(f"Random_{kind}_{type_.constant}", (_RandomVertex,), attrs)
        _CLASSES[(kind, type_)] = cls
    return cls


def _intervals(pos: np.ndarray) -> np.ndarray:
    """(start, length) pairs of the runs of consecutive values in sorted ``pos``."""
    if pos.size == 0:
        return np.zeros(0, np.int64)
    cuts = np.flatnonzero(np.diff(pos) != 1) + 1
    starts = pos[np.concatenate(([0], cuts))]
    lengths = np.diff(np.concatenate(([0], cuts, [pos.size])))
    return np.stack([starts, lengths], axis=1).reshape(-1)


def _generate(
    graph: Graph,
    fn: str,
    kind: str,
    seed: Tensor | None,
    modifier: int,
    reference: Tensor,
    type_: Type,
    params: list[float],
    prog: _program.Sequence,
    debugName: str,
    source: Tensor | None = None,
) -> Tensor:
    if not isinstance(graph, Graph):
        raise GraphError(f"{fn}: graph must be a poplar_api Graph, got {type(graph).__name__}")
    if not isinstance(reference, Tensor) or reference.graph is not graph._state:
        raise GraphError(f"{fn}: reference must be a Tensor of this graph, got {reference!r}")
    check_sequence(prog, fn)
    if isinstance(modifier, bool) or not isinstance(modifier, int | np.integer):
        raise GraphError(f"{fn}: seedModifier must be an int, got {modifier!r}")
    allowed = (FLOAT, HALF) if kind in ("normal", "dropout") else (FLOAT, HALF, INT)
    if type_ not in allowed:
        raise TypeMismatchError(
            f"{fn}: type {getattr(type_, 'name', type_)} is not supported; use one of "
            f"{', '.join(t.name for t in allowed)}"
        )
    if seed is not None:
        if not isinstance(seed, Tensor) or seed.graph is not graph._state:
            raise GraphError(f"{fn}: seed must be None or a Tensor of this graph, got {seed!r}")
        if seed.elementType() != UNSIGNED_INT or seed.numElements() != 2:
            raise TypeMismatchError(
                f"{fn}: seed '{seed.name}' is {seed.elementType().name} {seed.shape()}; it "
                f"must hold 2 unsigned int elements"
            )
        element_tiles(graph, seed, f"{fn}: seed")
    name = debugName or f"poprand/{kind}"
    out = clone_like(graph, reference, type_, f"{name}/out", fn)
    tiles = element_tiles(graph, reference, fn)
    order = np.argsort(tiles, kind="stable")
    used, starts = np.unique(tiles[order], return_index=True)
    groups = np.split(order, starts[1:])
    state = graph._state
    param_const = graph.addConstant(
        FLOAT, [used.size, len(params)], np.tile(np.asarray(params, np.float32), (used.size, 1))
    )
    state.space(FLOAT).tile[param_const.flat_index()] = np.repeat(used, len(params))
    headers = [np.concatenate(([modifier & 0xFFFFFFFF], _intervals(g))) for g in groups]
    pos_const = graph.addConstant(
        UNSIGNED_INT, [sum(h.size for h in headers)], np.concatenate(headers), f"{name}/positions"
    )
    lengths = [h.size for h in headers]
    state.space(UNSIGNED_INT).tile[pos_const.flat_index()] = np.repeat(used, lengths)
    if seed is None:
        seed_const = graph.addConstant(UNSIGNED_INT, [used.size, 2], 0, f"{name}/seed")
        state.space(UNSIGNED_INT).tile[seed_const.flat_index()] = np.repeat(used, 2)
    cls = _vertex(kind, type_)
    cs = graph.addComputeSet(f"{name}/Random")
    out_ids = out.flat_index()
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    for i, (tile, pos) in enumerate(zip(used.tolist(), groups, strict=True)):
        conns: dict[str, Any] = {
            "seed": seed.flatten() if seed is not None else seed_const[i],
            "positions": pos_const.slice(int(bounds[i]), int(bounds[i + 1])),
            "params": param_const[i],
            "out": view(graph, type_, out_ids[pos], name),
        }
        if source is not None:
            conns["in"] = view(graph, type_, source.flat_index()[pos], name)
        place(graph, graph.addVertex(cs, cls, conns), tile)
    prog.add(_program.Execute(cs))
    return out


def uniform(
    graph: Graph,
    seed: Tensor | None,
    seedModifier: int,
    reference: Tensor,
    type: Type,
    minVal: float,
    maxVal: float,
    prog: _program.Sequence,
    debugName: str = "",
) -> Tensor:
    """Uniform values in ``[minVal, maxVal)`` (INT: integers in ``[minVal, maxVal]``)."""
    if not float(minVal) <= float(maxVal):
        raise GraphError(f"uniform: minVal {minVal} must not exceed maxVal {maxVal}")
    params = [float(minVal), float(maxVal)]
    return _generate(
        graph, "uniform", "uniform", seed, seedModifier, reference, type, params, prog, debugName
    )


def normal(
    graph: Graph,
    seed: Tensor | None,
    seedModifier: int,
    reference: Tensor,
    type: Type,
    mean: float,
    stdDev: float,
    prog: _program.Sequence,
    debugName: str = "",
) -> Tensor:
    """Gaussian values with ``mean`` and standard deviation ``stdDev`` (float or half)."""
    if float(stdDev) < 0:
        raise GraphError(f"normal: stdDev {stdDev} must be >= 0")
    params = [float(mean), float(stdDev)]
    return _generate(
        graph, "normal", "normal", seed, seedModifier, reference, type, params, prog, debugName
    )


def bernoulli(
    graph: Graph,
    seed: Tensor | None,
    seedModifier: int,
    reference: Tensor,
    type: Type,
    prob: float,
    prog: _program.Sequence,
    debugName: str = "",
) -> Tensor:
    """1 with probability ``prob``, else 0."""
    if not 0.0 <= float(prob) <= 1.0:
        raise GraphError(f"bernoulli: prob {prob} must be in [0, 1]")
    return _generate(
        graph, "bernoulli", "bernoulli", seed, seedModifier, reference, type, [float(prob)],
        prog, debugName,
    )  # fmt: skip


def dropout(
    graph: Graph,
    seed: Tensor | None,
    seedModifier: int,
    input: Tensor,
    reference: Tensor,
    keepProbability: float,
    scale: float,
    prog: _program.Sequence,
    debugName: str = "",
) -> Tensor:
    """``input x scale`` where a uniform draw is below ``keepProbability``, else 0.

    The result has ``input``'s type and ``reference``'s mapping; ``reference`` must
    have ``input``'s shape.
    """
    if not isinstance(input, Tensor) or not isinstance(reference, Tensor):
        raise GraphError(f"dropout: input and reference must be Tensors, got {input!r}")
    if input.shape() != reference.shape():
        raise GraphError(
            f"dropout: input '{input.name}' {input.shape()} and reference '{reference.name}' "
            f"{reference.shape()} must have the same shape"
        )
    if not 0.0 <= float(keepProbability) <= 1.0:
        raise GraphError(f"dropout: keepProbability {keepProbability} must be in [0, 1]")
    params = [float(keepProbability), float(scale)]
    return _generate(
        graph, "dropout", "dropout", seed, seedModifier, reference, input.elementType(), params,
        prog, debugName, source=input,
    )  # fmt: skip
