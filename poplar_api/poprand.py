"""poprand: random tensors (uniform, normal, truncated normal, bernoulli), dropout, seeds.

Signatures follow Poplibs' ``poprand`` (``include/poprand/RandomGen.hpp``):
``uniform(graph, seed, seedModifier, reference, type, minVal, maxVal, prog)`` and so on.
The result is a clone of ``reference`` (same shape and tile mapping); on every tile that
holds part of it one MultiVertex (``poprand::Uniform<float>``, ``poprand::Normal<half>``,
...) generates the tile's elements, as ``lib/poprand/RandomGen.cpp`` does. Estimates are
those of ``lib/poprand/poprandCycleEstimators.cpp`` (graphcore/poplibs @7eac0f26).

Seeds, as Poplar has them
-------------------------
Each tile has hardware seed state (Poplar: ``getHwSeeds`` returns it as an
``UNSIGNED_INT [numTiles, numWorkerContexts, 4]`` tensor). A generator vertex draws
from its tile's state and advances it. With a ``seed`` tensor (2 UNSIGNED_INT
elements), a function runs as ``RandomGen.cpp`` does: save the hardware seeds, run
:func:`setSeed` (one ``poprand::SetSeed`` vertex per tile, seeded from ``seed``,
``seedModifier`` and the tile id), generate, restore the saved seeds. So the same seed
and seedModifier give the same numbers on every run, and calls with a seed leave the
unseeded stream untouched. With ``seed=None`` the vertices use (and advance) whatever
the state is: successive calls and successive runs give new numbers.

What ipusim's generator guarantees
----------------------------------
It is not the IPU's hardware generator: the values differ from a real IPU's. What holds:
the distributions (uniform in range, normal with the mean and standard deviation,
truncated normal within ``alpha`` standard deviations, Bernoulli with the probability
quantised to 1/65536 as the hardware's), and determinism — the numbers are a function
of the graph (mapping included) and the seed state only, identical on every engine and
run that starts from the same state. The scheme, restated so a test can check it:

* ``setSeed`` on tile ``t`` sets the tile's 24 state words (6 workers x 4) to
  ``SeedSequence([seed0, seed1, seedModifier ^ 0x55555555, (t << 4) ^ 0xAAAAAAA0])
  .generate_state(24)`` (the two modifiers are those Poplibs passes to ``SetSeed``);
* a generator vertex over ``n`` elements makes
  ``g = Generator(Philox(SeedSequence(state)))``, draws the tile's elements in
  element order (``g.random(n)``; ``g.standard_normal(n)`` for normal kinds), then
  replaces the state by ``g.integers(0, 2**32, 24)``;
* the state at load is ``SeedSequence([0x1F2E3D4C, t]).generate_state(24)`` per tile.

Poplar's ``getHwSeeds`` / ``setHwSeeds`` (``poplar/RandomSeed.hpp``) are here too,
as on-tile copies of the state (the top-level package is not poprand's to extend).
The state is a hidden per-tile variable of 96 bytes, added to a graph by its first
random function; it shows in memory reports as ``poprand/hwSeeds``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from poplar_api import program as _program
from poplar_api.codelet import InOut, Input, MultiVertex, Output, Vector
from poplar_api.errors import GraphError, TypeMismatchError
from poplar_api.graph import Graph, Segments
from poplar_api.library_checks import check_graph
from poplar_api.popnn.mapping import check_sequence
from poplar_api.tensor import Tensor
from poplar_api.types import FLOAT, HALF, INT, UNSIGNED_INT, Type

__all__ = [
    "SEED_WORDS_PER_WORKER",
    "addCodelets",
    "bernoulli",
    "dropout",
    "getHwSeeds",
    "normal",
    "setHwSeeds",
    "setSeed",
    "truncatedNormal",
    "uniform",
]

#: Seed words per worker context in the hardware seed state (Poplar's last dimension).
SEED_WORDS_PER_WORKER = 4
#: Probability resolution of the hardware mask instructions (``f32v2rmask``):
#: ``RandomGen.cpp`` sets ``prob`` to ``unsigned(p * 65536)``.
PROB_SCALE = 65536
#: ``seedModifierUser`` and ``seedModifierHw`` constants of ``RandomGen.cpp`` ``setSeed``.
_USER_XOR = 0x55555555
_HW_XOR = 0xAAAAAAA0
#: Entropy word of the load-time state (ipusim's choice).
_LOAD_WORD = 0x1F2E3D4C


# ----------------------------------------------------------------------- estimators
# graphcore/poplibs @7eac0f266ced5b064b3284a3cd90d491745b387c,
# lib/poprand/poprandCycleEstimators.cpp. The integer divisions are C++'s, kept in
# the source's order (``4 * (n + vw - 1) / vw`` is not ``4 * ceil(n / vw)``).


def estimate_uniform(type_: Type, n: int, workers: int, data_path_width: int = 64) -> int:
    """``Uniform`` estimator (float/half; int with ``scale != 0``, the non-full range).

    The source's float/half "vector width" is ``dataPathWidth / 2`` (float) or
    ``/ 4`` (half), i.e. 32 and 16 on a 64-bit path; carried over as written.
    """
    cycles = 4
    if type_ == INT:
        return cycles + 22 * workers + 6 * (n // 2) + (n % 2) * 2
    vw = data_path_width // (2 if type_ == FLOAT else 4)
    cycles += 4 * (n + vw - 1) // vw
    if type_ == FLOAT:
        return cycles + 22 * workers + (n % vw != 0) * 4
    return cycles + 24 * workers + (n % vw != 0) * 12


def estimate_uniform_int_full_range(n: int, workers: int) -> int:
    """``Uniform<int>`` estimator when ``scale == 0`` (the whole 32-bit range)."""
    return 4 + 22 * workers + n // 2


def estimate_normal(type_: Type, n: int, workers: int, data_path_width: int = 64) -> int:
    """``Normal`` estimator."""
    vw = data_path_width // (32 if type_ == FLOAT else 16)
    cycles = 4 + 4 * (n + vw - 1) // vw
    if type_ == FLOAT:
        return cycles + 22 * workers + (n % vw != 0) * 3
    return cycles + 24 * workers + (n % vw != 0) * 12


def estimate_truncated_normal(
    type_: Type, n: int, iterations: int, workers: int, data_path_width: int = 64
) -> int:
    """``TruncatedNormal`` estimator (``iterations`` from the vertex state)."""
    vw = data_path_width // (32 if type_ == FLOAT else 16)
    if type_ == FLOAT:
        return (
            4 + 26 * workers + (11 * iterations + 5) * (n + vw - 1) // vw
            + (n % vw != 0) * (13 * iterations + 2)
        )  # fmt: skip
    return (
        4 + 28 * workers + (12 * iterations + 5) * (n + vw - 1) // vw
        + (n % vw != 0) * (12 * iterations + 10)
    )  # fmt: skip


def estimate_bernoulli(type_: Type, n: int, workers: int, data_path_width: int = 64) -> int:
    """``Bernoulli`` estimator (the source's width: ``dataPathWidth / (half ? 4 : 2)``)."""
    half = type_ == HALF
    vw = data_path_width // (4 if half else 2)
    cycles = 4 + (n + vw - 1) // vw
    if half:
        return cycles + 21 * workers + (n % vw != 0) * 9
    return cycles + 23 * workers + (n % vw != 0)


def estimate_dropout(type_: Type, n: int, workers: int, data_path_width: int = 64) -> int:
    """``Dropout`` estimator."""
    vw = data_path_width // (32 if type_ == FLOAT else 16)
    return (
        6 + 24 * workers + 2 * (n + vw - 1) // vw
        + (n % vw != 0) * (1 if type_ == FLOAT else 9)
    )  # fmt: skip


def estimate_set_seed(workers: int) -> int:
    """``SetSeed`` estimator."""
    return 14 + 27 * workers


def truncated_normal_iterations(alpha: float) -> int:
    """``RandomGen.cpp`` ``truncatedNormal``: ``ceil(-4 / log10(erfc(alpha / sqrt 2)))``."""
    return math.ceil(-4.0 / math.log10(math.erfc(alpha / math.sqrt(2.0))))


# ------------------------------------------------------------------------- the state


def _state_words(target: Any) -> int:
    return target.getNumWorkerContexts() * SEED_WORDS_PER_WORKER


def load_state(tile: int, words: int) -> np.ndarray:
    """Seed state of root ``tile`` when the engine is loaded."""
    return np.random.SeedSequence([_LOAD_WORD, int(tile)]).generate_state(words, np.uint32)


def modifier_words(modifier: int, tile: int) -> tuple[int, int]:
    """``(seedModifierUser, seedModifierHw)`` Poplibs' ``setSeed`` gives root ``tile``."""
    return (int(modifier) ^ _USER_XOR) & 0xFFFFFFFF, ((int(tile) << 4) ^ _HW_XOR) & 0xFFFFFFFF


def _seed_words(seed: np.ndarray, user: int, hw: int, words: int) -> np.ndarray:
    entropy = [int(seed[0]), int(seed[1]), int(user), int(hw)]
    return np.random.SeedSequence(entropy).generate_state(words, np.uint32)


def set_seed_state(seed: np.ndarray, modifier: int, tile: int, words: int) -> np.ndarray:
    """State words :func:`setSeed` gives root ``tile``."""
    return _seed_words(seed, *modifier_words(modifier, tile), words)


def _top(graph: Graph) -> Graph:
    """The graph over every tile of one replica (top-level tile numbering)."""
    return graph.getTopLevelGraph().getReplicatedGraph()


def _hw_seeds(graph: Graph) -> Tensor:
    """The graph's hidden hardware-seed variable, ``[numTiles, W, 4]`` over every tile
    of the device (one replica's), made on first use."""
    cache = graph.libraryCache("poprand")
    t = cache.get("hwSeeds")
    if t is None:
        top = _top(graph)
        target = graph.getRootTarget()
        tiles, workers = target.getNumTiles(), target.getNumWorkerContexts()
        words = workers * SEED_WORDS_PER_WORKER
        t = top.addVariable(
            UNSIGNED_INT, [tiles, workers, SEED_WORDS_PER_WORKER], "poprand/hwSeeds"
        )
        top.mapElements(t, np.repeat(np.arange(tiles), words))
        top.setInitialValue(t, np.stack([load_state(i, words) for i in range(tiles)]))
        cache["hwSeeds"] = t
    return t


def _tile_states(graph: Graph, tiles: np.ndarray) -> Tensor:
    """The seed state of each of ``tiles`` (this graph's numbering), one row each."""
    hw = _hw_seeds(graph)
    words = hw.numElements() // max(hw.dim(0), 1)
    roots = graph.rootTiles()[tiles]
    return hw.flatten().elements(roots[:, None] * words + np.arange(words))


def _local_tiles(graph: Graph, t: Tensor, what: str) -> np.ndarray:
    """This graph's tile of every element of ``t``; unmapped elements and elements on
    tiles outside a virtual graph are errors."""
    tiles = graph.elementTiles(t)
    if tiles.size and int(tiles.min()) < 0:
        first = int(np.flatnonzero(tiles < 0)[0])
        why = "is not mapped to a tile" if tiles[first] == -1 else "is outside this graph's tiles"
        raise GraphError(
            f"{what}: element {first} of tensor '{t.name}' {why}; hint: map it to this "
            "graph's tiles with graph.setTileMapping first"
        )
    return tiles


def _clone(graph: Graph, t: Tensor, type_: Type, name: str, what: str) -> Tensor:
    """A new variable of ``t``'s shape and ``type_``, mapped element by element like ``t``."""
    tiles = _local_tiles(graph, t, what)
    out = graph.addVariable(type_, t.shape(), name)
    graph.mapElements(out, tiles)
    return out


def getHwSeeds(graph: Graph, prog: _program.Sequence, debugName: str = "") -> Tensor:
    """Poplar's ``getHwSeeds``: a copy of every tile's seed state, ``[numTiles, W, 4]``.

    The copy is mapped like the state (each tile's words on the tile), so the
    ``Copy`` added to ``prog`` needs no exchange.
    """
    check_graph(graph, "getHwSeeds")
    check_sequence(prog, "getHwSeeds")
    state = _hw_seeds(graph)
    top = _top(graph)
    saved = _clone(top, state, UNSIGNED_INT, debugName or "getHwSeeds/seeds", "getHwSeeds")
    prog.add(_program.Copy(state, saved))
    return saved


def setHwSeeds(graph: Graph, hwSeeds: Tensor, prog: _program.Sequence, debugName: str = "") -> None:
    """Poplar's ``setHwSeeds``: restore the state from a :func:`getHwSeeds` tensor.

    Raises
    ------
    TypeMismatchError
        ``hwSeeds`` is not UNSIGNED_INT of shape ``[numTiles, W, 4]``.
    """
    check_graph(graph, "setHwSeeds")
    check_sequence(prog, "setHwSeeds")
    state = _hw_seeds(graph)
    if not graph.owns(hwSeeds):
        raise GraphError(f"setHwSeeds: hwSeeds must be a Tensor of this graph, got {hwSeeds!r}")
    if hwSeeds.elementType() != UNSIGNED_INT or hwSeeds.shape() != state.shape():
        raise TypeMismatchError(
            f"setHwSeeds: hwSeeds '{hwSeeds.name}' is {hwSeeds.elementType().name} "
            f"{hwSeeds.shape()}; it must be unsigned int {state.shape()} "
            f"(numTiles, workers, 4); hint: pass the tensor getHwSeeds returned"
        )
    prog.add(_program.Copy(hwSeeds, state))


# -------------------------------------------------------------------------- vertices


def _generator(state: np.ndarray) -> np.random.Generator:
    """The generator a vertex makes from its tile's state words."""
    return np.random.Generator(np.random.Philox(np.random.SeedSequence(state.tolist())))


def _truncate(gen: np.random.Generator, x: np.ndarray, alpha: float, iterations: int):
    """``truncNormal``: redraw out-of-range values ``iterations - 1`` more times, then
    replace what is left by a triangular draw on ``[-alpha, alpha]``."""
    bad = np.abs(x) > alpha
    for _ in range(max(iterations - 1, 0)):
        if not bad.any():
            break
        x[bad] = gen.standard_normal(int(bad.sum()))
        bad = np.abs(x) > alpha
    tri = alpha * (gen.random(x.size) - 0.5 + gen.random(x.size) - 0.5)
    return np.where(bad, tri, x)


class _RandomVertex(MultiVertex):
    """One tile's generator: ``out`` from the tile's ``seeds`` state (advanced)."""

    kind = "uniform"

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        out, seeds, params = batches["out"], batches["seeds"], batches["params"]
        out_type = cls.types[0]
        for v in range(num_vertices):
            ss = slice(seeds.offsets[v], seeds.offsets[v + 1])
            os_ = slice(out.offsets[v], out.offsets[v + 1])
            p = params.data[params.offsets[v] : params.offsets[v + 1]].astype(np.float64)
            n = os_.stop - os_.start
            gen = _generator(seeds.data[ss])
            gaussian = cls.kind in ("normal", "truncated")
            draws = gen.standard_normal(n) if gaussian else gen.random(n)
            if cls.kind == "truncated":
                draws = _truncate(gen, draws, float(p[2]), int(p[3]))
            nxt = gen.integers(0, 2**32, ss.stop - ss.start, dtype=np.uint64)
            seeds.data[ss] = nxt.astype(np.uint32)
            if cls.kind == "uniform":
                lo, hi = p[0], p[1]
                if out_type == INT:
                    vals = np.minimum(np.floor(draws * (hi - lo + 1)) + lo, hi)
                else:
                    lo_t = float(np.asarray(lo, out_type.numpy))
                    hi_t = float(np.asarray(hi, out_type.numpy))
                    vals = np.clip(lo + (hi - lo) * draws, lo_t, hi_t)
            elif cls.kind in ("normal", "truncated"):
                vals = p[0] + p[1] * draws
            elif cls.kind == "bernoulli":
                vals = (draws < p[0] / PROB_SCALE).astype(np.float64)
            else:  # dropout
                keep = draws < p[0] / PROB_SCALE
                vals = np.where(keep, batches["in"].data[os_].astype(np.float64) * p[1], 0.0)
            out.data[os_] = vals

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        n, w = int(sizes["out"]), target.getNumWorkerContexts()
        t, dpw = cls.types[0], target.getDataPathWidth()
        if cls.kind == "uniform":
            return estimate_uniform(t, n, w, dpw)
        if cls.kind == "normal":
            return estimate_normal(t, n, w, dpw)
        if cls.kind == "bernoulli":
            return estimate_bernoulli(t, n, w, dpw)
        if cls.kind == "dropout":
            return estimate_dropout(t, n, w, dpw)
        # truncated normal: the iterations are vertex state; _generate sets the
        # estimate per vertex, this is the estimate at Poplibs' default alpha 2
        return estimate_truncated_normal(t, n, truncated_normal_iterations(2.0), w, dpw)


_NAMES = {
    "uniform": "Uniform",
    "normal": "Normal",
    "truncated": "TruncatedNormal",
    "bernoulli": "Bernoulli",
    "dropout": "Dropout",
}
_CLASSES: dict[tuple[str, Type], type] = {}


def _vertex(kind: str, type_: Type) -> type:
    """``poprand::<Kind><type>`` (a MultiVertex, as in ``lib/poprand/codelets``)."""
    cls = _CLASSES.get((kind, type_))
    if cls is None:
        attrs: dict[str, Any] = {
            "typeName": f"poprand::{_NAMES[kind]}<{type_.name}>",
            "__doc__": f"{_NAMES[kind]} random values of {type_.name} on one tile.",
            "__module__": __name__,
            "kind": kind,
            "types": (type_,),
            "seeds": InOut(Vector(UNSIGNED_INT)),
            "params": Input(Vector(FLOAT)),
            "out": Output(Vector(type_)),
        }
        if kind == "dropout":
            attrs["in_"] = Input(Vector(type_))
        cls = type(f"Poprand_{_NAMES[kind]}_{type_.constant}", (_RandomVertex,), attrs)
        _CLASSES[(kind, type_)] = cls
    return cls


class SetSeedVertex(MultiVertex):
    """``poprand::SetSeed``: the tile's seed state from the master seed and modifiers.

    ``modifiers`` holds the vertex state ``(seedModifierUser, seedModifierHw)``.
    """

    typeName = "poprand::SetSeed"
    seed = Input(Vector(UNSIGNED_INT))
    modifiers = Input(Vector(UNSIGNED_INT))
    seeds = InOut(Vector(UNSIGNED_INT))

    @classmethod
    def computeBatch(cls, batches, num_vertices, num_workers):
        seed, mods, seeds = batches["seed"], batches["modifiers"], batches["seeds"]
        for v in range(num_vertices):
            s = seed.data[seed.offsets[v] : seed.offsets[v] + 2]
            user, hw = mods.data[mods.offsets[v] : mods.offsets[v] + 2]
            ss = slice(seeds.offsets[v], seeds.offsets[v + 1])
            seeds.data[ss] = _seed_words(s, int(user), int(hw), ss.stop - ss.start)

    @classmethod
    def getCycleEstimate(cls, sizes, target) -> int:
        return estimate_set_seed(target.getNumWorkerContexts())


# ------------------------------------------------------------------------- functions


def _check_seed(graph: Graph, seed: object, fn: str) -> None:
    """``seedTensorChecks`` (RandomGen.cpp): rank 1, 2 elements, UNSIGNED_INT; mapped."""
    if not graph.owns(seed):
        raise GraphError(f"{fn}: seed must be None or a Tensor of this graph, got {seed!r}")
    if seed.elementType() != UNSIGNED_INT or seed.shape() != [2]:
        raise TypeMismatchError(
            f"{fn}: seed '{seed.name}' is {seed.elementType().name} {seed.shape()}; it must "
            f"hold 2 unsigned int elements (shape [2]); hint: "
            f"graph.addVariable(UNSIGNED_INT, [2])"
        )
    tiles = graph.elementTiles(seed)
    if (tiles == -1).any():
        first = int(np.flatnonzero(tiles == -1)[0])
        raise GraphError(
            f"{fn}: seed: element {first} of tensor '{seed.name}' is not mapped to a tile; "
            "hint: map it with graph.setTileMapping first"
        )


def _check_modifier(modifier: object, fn: str) -> int:
    if isinstance(modifier, bool) or not isinstance(modifier, int | np.integer):
        raise GraphError(f"{fn}: seedModifier must be an int, got {modifier!r}")
    if not 0 <= int(modifier) <= 0xFFFFFFFF:
        raise GraphError(
            f"{fn}: seedModifier {modifier} is outside the uint32 range 0..{0xFFFFFFFF}"
        )
    return int(modifier)


def setSeed(
    graph: Graph,
    masterSeed: Tensor,
    seedModifier: int,
    prog: _program.Sequence,
    debugName: str = "",
) -> None:
    """Seed every tile's generator from ``masterSeed`` and ``seedModifier``.

    As ``RandomGen.cpp`` ``setSeed``: one ``poprand::SetSeed`` vertex on every tile of
    the graph, with ``seedModifierUser = seedModifier ^ 0x55555555`` and
    ``seedModifierHw = (tile << 4) ^ 0xAAAAAAA0``. Later unseeded random functions
    draw from the new state.

    Raises
    ------
    TypeMismatchError
        ``masterSeed`` is not 2 UNSIGNED_INT elements.
    GraphError
        A bad graph, program or modifier, or an unmapped seed.
    """
    check_graph(graph, "setSeed")
    check_sequence(prog, "setSeed")
    _check_seed(graph, masterSeed, "setSeed")
    modifier = _check_modifier(seedModifier, "setSeed")
    name = debugName or "setMasterSeed"
    cs = graph.addComputeSet(name)
    count = graph.getTarget().getNumTiles()
    local = np.arange(count, dtype=np.int64)
    roots = graph.rootTiles()
    mods = np.array([modifier_words(modifier, t) for t in roots.tolist()], np.uint32)
    const = graph.addConstant(UNSIGNED_INT, [count, 2], mods.astype(np.uint32), f"{name}/mods")
    graph.mapElements(const, np.repeat(local, 2))
    conns = {
        "seed": masterSeed.expand([0]).broadcast(count, 0),
        "modifiers": const,
        "seeds": _tile_states(graph, local),
    }
    graph.addVertices(cs, SetSeedVertex, local, conns)
    prog.add(_program.Execute(cs))


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
    estimate: Any = None,
) -> Tensor:
    check_graph(graph, fn)
    if not graph.owns(reference):
        raise GraphError(f"{fn}: reference must be a Tensor of this graph, got {reference!r}")
    check_sequence(prog, fn)
    modifier = _check_modifier(modifier, fn)
    if seed is not None:
        _check_seed(graph, seed, fn)
    name = debugName or fn
    out = _clone(graph, reference, type_, f"{name}/out", fn)
    tiles = graph.elementTiles(reference)
    order = np.argsort(tiles, kind="stable")
    used, starts = np.unique(tiles[order], return_index=True)
    groups = np.split(order, starts[1:])
    if seed is not None:
        saved = getHwSeeds(graph, prog, f"{name}/savedHwSeeds")
        setSeed(graph, seed, modifier, prog, f"{name}/setSeed")
    param_const = graph.addConstant(
        FLOAT,
        [used.size, len(params)],
        np.tile(np.asarray(params, np.float32), (used.size, 1)),
        f"{name}/params",
    )
    graph.mapElements(param_const, np.repeat(used, len(params)))
    cls = _vertex(kind, type_)
    cs = graph.addComputeSet(name)
    sizes = np.fromiter((pos.size for pos in groups), np.int64, len(groups))
    positions = np.concatenate(groups) if groups else np.zeros(0, np.int64)
    conns: dict[str, Any] = {
        "seeds": _tile_states(graph, used),
        "params": param_const,
        "out": Segments(out.flatten().elements(positions), sizes),
    }
    if source is not None:
        conns["in"] = Segments(source.flatten().elements(positions), sizes)
    estimates = None if estimate is None else [estimate(int(n)) for n in sizes.tolist()]
    graph.addVertices(cs, cls, used, conns, estimates)
    prog.add(_program.Execute(cs))
    if seed is not None:
        setHwSeeds(graph, saved, prog, f"{name}/restoreHwSeeds")
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
    """Uniform values in ``[minVal, maxVal]`` (INT: integers ``minVal..maxVal``).

    Raises
    ------
    TypeMismatchError
        ``type`` is not FLOAT, HALF or INT.
    GraphError
        ``minVal > maxVal``; for INT a range outside int32.
    """
    _check_type(type, (FLOAT, HALF, INT), "uniform")
    if not float(minVal) <= float(maxVal):
        raise GraphError(f"uniform: minVal {minVal} must not exceed maxVal {maxVal}")
    estimate = None
    if type == INT:
        lo, hi = math.ceil(float(minVal)), math.floor(float(maxVal))
        if lo < -(2**31) or hi > 2**31 - 1:
            raise GraphError(
                f"uniform: range [{minVal}, {maxVal}] is outside int32 "
                f"[{-(2**31)}, {2**31 - 1}]; Poplibs rejects it (range for uniform "
                f"distribution invalid)"
            )
        minVal, maxVal = float(minVal), float(maxVal)
        if maxVal - minVal + 1 == 2**32:  # source: scale == 0, the whole range
            workers = graph.getTarget().getNumWorkerContexts()

            def estimate(n: int) -> int:
                return estimate_uniform_int_full_range(n, workers)

    params = [float(minVal), float(maxVal)]
    return _generate(
        graph, "uniform", "uniform", seed, seedModifier, reference, type, params, prog,
        debugName, estimate=estimate,
    )  # fmt: skip


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
    _check_type(type, (FLOAT, HALF), "normal")
    if float(stdDev) < 0:
        raise GraphError(f"normal: stdDev {stdDev} must be >= 0")
    params = [float(mean), float(stdDev)]
    return _generate(
        graph, "normal", "normal", seed, seedModifier, reference, type, params, prog, debugName
    )


def truncatedNormal(
    graph: Graph,
    seed: Tensor | None,
    seedModifier: int,
    reference: Tensor,
    type: Type,
    mean: float,
    stdDev: float,
    alpha: float,
    prog: _program.Sequence,
    debugName: str = "",
) -> Tensor:
    """Normal values truncated to ``mean ± alpha·stdDev`` (float or half).

    As the ``TruncatedNormal`` codelet: out-of-range draws are redrawn up to
    ``iterations`` times in all (``ceil(-4 / log10(erfc(alpha/√2)))``, so at most a
    1e-4 chance to be left), then replaced by a triangular draw on the interval.
    """
    _check_type(type, (FLOAT, HALF), "truncatedNormal")
    if float(stdDev) < 0 or not float(alpha) > 0:
        raise GraphError(f"truncatedNormal: stdDev {stdDev} must be >= 0 and alpha {alpha} > 0")
    iterations = truncated_normal_iterations(float(alpha))
    target = graph.getTarget() if isinstance(graph, Graph) else None
    workers = target.getNumWorkerContexts() if target else 6
    dpw = target.getDataPathWidth() if target else 64

    def estimate(n: int) -> int:
        return estimate_truncated_normal(type, n, iterations, workers, dpw)

    params = [float(mean), float(stdDev), float(alpha), float(iterations)]
    return _generate(
        graph, "truncatedNormal", "truncated", seed, seedModifier, reference, type, params,
        prog, debugName, estimate=estimate,
    )  # fmt: skip


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
    """1 with probability ``prob`` (quantised to ``floor(prob·65536)/65536``), else 0."""
    _check_type(type, (FLOAT, HALF, INT), "bernoulli")
    if not 0.0 <= float(prob) <= 1.0:
        raise GraphError(f"bernoulli: prob {prob} must be in [0, 1]")
    params = [float(int(float(prob) * PROB_SCALE))]
    return _generate(
        graph, "bernoulli", "bernoulli", seed, seedModifier, reference, type, params,
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
    """``input x scale`` where kept (probability ``keepProbability``), else 0.

    The result has ``input``'s type and ``reference``'s mapping. As Poplibs, a keep
    probability that quantises to 65536/65536 drops nothing: the result is then a
    copy of ``input`` (``poputil::duplicate``) and no random vertex runs.

    Raises
    ------
    GraphError
        Shapes differ, ``keepProbability`` is outside [0, 1], or a tile holds more
        elements than the codelet's repeat count allows.
    """
    fn = "dropout"
    check_graph(graph, fn)
    if not isinstance(input, Tensor) or not isinstance(reference, Tensor):
        raise GraphError(f"{fn}: input and reference must be Tensors, got {input!r}")
    _check_type(input.elementType(), (FLOAT, HALF), fn)
    if input.shape() != reference.shape():
        raise GraphError(
            f"{fn}: input '{input.name}' {input.shape()} and reference '{reference.name}' "
            f"{reference.shape()} must have the same shape"
        )
    if not 0.0 <= float(keepProbability) <= 1.0:
        raise GraphError(f"{fn}: keepProbability {keepProbability} must be in [0, 1]")
    prob_hw = int(float(keepProbability) * PROB_SCALE)
    if prob_hw == PROB_SCALE:
        check_sequence(prog, fn)
        out = _clone(graph, input, input.elementType(), f"{debugName or fn}/out", fn)
        prog.add(_program.Copy(input, out))
        return out
    target = graph.getTarget()
    limit = 4095 * target.getNumWorkerContexts() * (2 if input.elementType() == FLOAT else 4)
    counts = np.bincount(_local_tiles(graph, reference, fn))
    if counts.size and counts.max() > limit:
        tile = int(np.argmax(counts))
        raise GraphError(
            f"{fn}: tile {tile} holds {int(counts.max())} elements of reference "
            f"'{reference.name}'; the Dropout codelet takes at most {limit} "
            f"(rptCountMax x workers x vector width); hint: spread reference over more tiles"
        )
    params = [float(prob_hw), float(scale)]
    return _generate(
        graph, fn, "dropout", seed, seedModifier, reference, input.elementType(), params,
        prog, debugName, source=input,
    )  # fmt: skip


def _check_type(type_: object, allowed: tuple[Type, ...], fn: str) -> None:
    if type_ not in allowed:
        raise TypeMismatchError(
            f"{fn}: type {getattr(type_, 'name', type_)} is not supported; use one of "
            f"{', '.join(t.name for t in allowed)}"
        )


def addCodelets(graph: Graph) -> None:
    """Register the poprand vertices with ``graph`` (``poprand::addCodelets``).

    Every generator (``poprand::Uniform<float>``, ``poprand::Normal<half>``, ...,
    ``poprand::Dropout<T>``) of every type Poplibs instantiates, and
    ``poprand::SetSeed``. The random functions register what they use as they add
    vertices, so this is optional; afterwards the vertices can also be added by their
    Poplar names. Calling it again is harmless.

    Raises
    ------
    GraphError
        ``graph`` is not a poplar_api Graph.
    """
    check_graph(graph, "poprand.addCodelets")
    classes: list[type] = [SetSeedVertex]
    for kind in _NAMES:
        types = (FLOAT, HALF, INT) if kind in ("uniform", "bernoulli") else (FLOAT, HALF)
        classes.extend(_vertex(kind, t) for t in types)
    graph.addCodelets(classes)
