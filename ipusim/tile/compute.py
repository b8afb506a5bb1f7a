"""Time of one compute set on every tile: barrel-scheduled worker contexts.

A tile runs ``W = worker_contexts`` contexts round-robin, each issuing once every ``W``
tile cycles even when it runs alone. Worker-vertex estimates are therefore in *thread*
cycles and are spread over the contexts: vertex after vertex (in the order they appear
in the compute set) goes to the context that frees first. Multi-vertex (supervisor)
estimates are already in *tile* cycles and occupy every context. So a tile takes

``W * max(context load) + Σ (multi-vertex estimate + launch)``

which is what the IPU Model reports as a tile's compute-set time. The per-vertex
assignment is a Numba kernel, O(vertices * contexts).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numba
import numpy as np

from ipusim import ir
from ipusim.config import TileConfig
from ipusim.errors import IRValidationError

__all__ = ["ComputeCost", "compute_cost"]

_INT64 = np.dtype(np.int64)
_BOOL = np.dtype(np.bool_)


@dataclass(frozen=True)
class ComputeCost:
    """Per-tile cost of one compute set.

    A run keeps the cost of every distinct compute set, so only the per-tile cycles
    are held; the assignment's details are worked out again when first asked for.

    Attributes
    ----------
    tile_cycles
        int64[num_tiles]: tile cycles the compute set takes on each tile.
    active_cycles
        int64[num_tiles]: sum of the vertex estimates on the tile, plus the launch
        cycles of each vertex (the IPU Model's "excluding idle threads").
    context_load
        int64[num_tiles, worker_contexts]: thread cycles of worker vertices assigned
        to each context.
    multi_cycles
        int64[num_tiles]: sum of multi-vertex tile cycles (plus launch) on the tile.
    vertex_count
        int64[num_tiles]: vertices on the tile.
    vertex_context
        int32[num_vertices]: context each worker vertex ran on; -1 for multi-vertices.
    """

    tile_cycles: np.ndarray
    active_cycles: np.ndarray
    #: what the assignment is made from: (tile config, tiles, vertex arrays); None
    #: for a cost made by another compute model, which has no assignment details
    inputs: tuple[TileConfig, int, np.ndarray, np.ndarray, np.ndarray] | None = field(
        default=None, repr=False
    )

    @cached_property
    def _assignment(self) -> tuple[np.ndarray, ...]:
        """(context load, multi cycles, vertex count, vertex context)."""
        if self.inputs is None:
            raise AttributeError(
                "this ComputeCost has no assignment details (it was made without "
                "`inputs`, e.g. by another compute model): only tile_cycles and "
                "active_cycles are known"
            )
        load, multi, _, count, context, _, _ = _run(*self.inputs)
        return load, multi, count, context

    @property
    def context_load(self) -> np.ndarray:
        return self._assignment[0]

    @property
    def multi_cycles(self) -> np.ndarray:
        return self._assignment[1]

    @property
    def vertex_count(self) -> np.ndarray:
        return self._assignment[2]

    @property
    def vertex_context(self) -> np.ndarray:
        return self._assignment[3]


@numba.njit(cache=True)
def _assign_vertices(
    num_tiles: int,
    num_contexts: int,
    launch: int,
    multi_launch: int,
    vertex_tile: np.ndarray,
    vertex_cycles: np.ndarray,
    vertex_multi: np.ndarray,
):  # pragma: no cover - compiled; exercised through compute_cost
    load = np.zeros((num_tiles, num_contexts), dtype=np.int64)
    multi = np.zeros(num_tiles, dtype=np.int64)
    active = np.zeros(num_tiles, dtype=np.int64)
    count = np.zeros(num_tiles, dtype=np.int64)
    context = np.empty(vertex_tile.shape[0], dtype=np.int32)
    cycles = np.zeros(num_tiles, dtype=np.int64)
    for v in range(vertex_tile.shape[0]):  # checked first: nothing is assigned if one is bad
        if not 0 <= vertex_tile[v] < num_tiles or vertex_cycles[v] < 0:
            return load, multi, active, count, context, cycles, v
    most = np.zeros(num_tiles, dtype=np.int64)  # the most loaded context of each tile
    # contexts 0 .. filled[t] - 1 of tile t hold work, the others none (while no worker
    # vertex of no cost has come, filled[t] >= 0): the next vertex goes to filled[t]
    filled = np.zeros(num_tiles, dtype=np.int64)
    for v in range(vertex_tile.shape[0]):
        t = vertex_tile[v]
        cost = vertex_cycles[v] + (multi_launch if vertex_multi[v] else launch)
        active[t] += cost
        count[t] += 1
        if vertex_multi[v]:
            multi[t] += cost
            context[v] = -1
        else:
            k = filled[t]
            if 0 <= k < num_contexts:  # an empty context, the first: no search
                best = k
                filled[t] = k + 1 if cost > 0 else -1
            else:
                best = 0
                for c in range(1, num_contexts):
                    if load[t, c] < load[t, best]:
                        best = c
            load[t, best] += cost
            context[v] = best
            most[t] = max(most[t], load[t, best])
    for t in range(num_tiles):
        cycles[t] = num_contexts * most[t] + multi[t]
    return load, multi, active, count, context, cycles, -1


@numba.njit(cache=True)
def _tile_costs(
    num_tiles: int,
    num_contexts: int,
    launch: int,
    multi_launch: int,
    vertex_tile: np.ndarray,
    vertex_cycles: np.ndarray,
    vertex_multi: np.ndarray,
):  # pragma: no cover - compiled; exercised through compute_cost
    """``(active, cycles, bad)`` of :func:`_assign_vertices` alone, for a compute set
    costed for the first time (the details are :func:`_assign_vertices`', when asked).

    While no tile has more worker vertices than contexts, each vertex lands on a context
    of no load (a fresh one, or, after a vertex of no cost, the least loaded, which has
    none since fewer vertices than contexts came before it), so a tile's most loaded
    context holds its costliest worker vertex: one pass finds it, with no context loads
    kept. The first tile to get one vertex more (or a negative cost) sends the whole
    compute set through the assignment itself. The same values either way.
    """
    active = np.zeros(num_tiles, dtype=np.int64)
    cycles = np.zeros(num_tiles, dtype=np.int64)
    for v in range(vertex_tile.shape[0]):  # checked first: nothing is assigned if one is bad
        if not 0 <= vertex_tile[v] < num_tiles or vertex_cycles[v] < 0:
            return active, cycles, v
    most = np.zeros(num_tiles, dtype=np.int64)  # the most loaded context of each tile
    multi = np.zeros(num_tiles, dtype=np.int64)
    count = np.zeros(num_tiles, dtype=np.int64)  # worker vertices of each tile so far
    simple = True
    for v in range(vertex_tile.shape[0]):
        t = vertex_tile[v]
        cost = vertex_cycles[v] + (multi_launch if vertex_multi[v] else launch)
        active[t] += cost
        if vertex_multi[v]:
            multi[t] += cost
            continue
        count[t] += 1
        if count[t] > num_contexts or cost < 0:
            simple = False
            break
        most[t] = max(most[t], cost)
    if not simple:
        _, _, active, _, _, cycles, _ = _assign_vertices(
            num_tiles, num_contexts, launch, multi_launch, vertex_tile, vertex_cycles,
            vertex_multi,
        )  # fmt: skip
        return active, cycles, -1
    for t in range(num_tiles):
        cycles[t] = num_contexts * most[t] + multi[t]
    return active, cycles, -1


def _validate(
    num_tiles: int, vertex_tile: np.ndarray, vertex_cycles: np.ndarray, vertex_multi: np.ndarray
) -> list[str]:
    """Problems of the arrays' shapes and types (values are checked by the kernel)."""
    problems: list[str] = []
    if num_tiles < 0:
        problems.append(f"compute_cost: num_tiles must be >= 0, got {num_tiles}")
    arrays = {
        "vertex_tile": vertex_tile,
        "vertex_cycles": vertex_cycles,
        "vertex_multi": vertex_multi,
    }
    for name, arr in arrays.items():
        if arr.ndim != 1:
            problems.append(f"compute_cost: '{name}' must be 1-D, got shape {arr.shape}")
    lengths = {name: arr.shape[0] if arr.ndim else 0 for name, arr in arrays.items()}
    if len(set(lengths.values())) > 1:
        problems.append(
            f"compute_cost: vertex arrays differ in length {lengths}; one entry per vertex "
            "is required"
        )
    if problems:
        return problems
    for name in ("vertex_tile", "vertex_cycles"):
        arr = arrays[name]
        if arr.size and not np.issubdtype(arr.dtype, np.integer):
            problems.append(f"compute_cost: '{name}' must be integers, got dtype {arr.dtype}")
    return problems


def _value_problems(
    num_tiles: int, vertex_tile: np.ndarray, vertex_cycles: np.ndarray
) -> list[str]:
    """Every vertex on a tile outside the machine or with a negative estimate."""
    problems: list[str] = []
    bad_tile = np.flatnonzero((vertex_tile < 0) | (vertex_tile >= num_tiles))
    if bad_tile.size:
        v = int(bad_tile[0])
        problems.append(
            f"compute_cost: vertex {v} is on tile {int(vertex_tile[v])}, outside "
            f"[0, {num_tiles}) ({bad_tile.size} vertex(es) out of range)"
        )
    bad_cycles = np.flatnonzero(vertex_cycles < 0)
    if bad_cycles.size:
        v = int(bad_cycles[0])
        problems.append(
            f"compute_cost: vertex {v} has a negative cycle estimate {int(vertex_cycles[v])}; "
            "estimates must be >= 0"
        )
    return problems


def compute_cost(
    tile_cfg: TileConfig,
    num_tiles: int,
    vertex_tile: np.ndarray,
    vertex_cycles: np.ndarray,
    vertex_multi: np.ndarray,
) -> ComputeCost:
    """Cost of one compute set on every tile.

    Parameters
    ----------
    tile_cfg
        Tile section of the machine config (``worker_contexts``,
        ``vertex_launch_cycles``, ``multi_vertex_launch_cycles``).
    num_tiles
        Tiles covered by the result arrays; vertex tile ids index into them.
    vertex_tile
        int[num_vertices]: tile of each vertex. Vertices of different tiles may be
        interleaved; within a tile, array order is the assignment order.
    vertex_cycles
        int[num_vertices]: estimate of each vertex, in thread cycles for worker vertices
        and in tile cycles for multi-vertices.
    vertex_multi
        bool[num_vertices]: True for multi-vertices (occupy all contexts).

    Returns
    -------
    ComputeCost
        Per-tile cycles, load of each context and the context of each vertex. Tiles
        without vertices get zeros.

    Raises
    ------
    IRValidationError
        If the arrays differ in length, a tile id is out of range or an estimate is
        negative.
    """
    vertex_tile = np.asarray(vertex_tile)
    vertex_cycles = np.asarray(vertex_cycles)
    vertex_multi = np.asarray(vertex_multi)
    if not (  # an IR step's arrays: nothing to check here
        vertex_tile.dtype == _INT64
        and vertex_cycles.dtype == _INT64
        and vertex_multi.dtype == _BOOL
        and vertex_tile.ndim == vertex_cycles.ndim == vertex_multi.ndim == 1
        and vertex_tile.shape == vertex_cycles.shape == vertex_multi.shape
        and num_tiles >= 0
    ):
        problems = _validate(num_tiles, vertex_tile, vertex_cycles, vertex_multi)
        if problems:
            raise IRValidationError(problems)
    inputs = (
        tile_cfg,
        num_tiles,
        ir.read_only(vertex_tile.astype(np.int64, copy=False)),
        ir.read_only(vertex_cycles.astype(np.int64, copy=False)),
        ir.read_only(vertex_multi.astype(np.bool_, copy=False)),
    )
    active, tile_cycles, bad = _first_costs(*inputs)
    if bad >= 0:
        raise IRValidationError(_value_problems(num_tiles, inputs[2], inputs[3]))
    return ComputeCost(tile_cycles=tile_cycles, active_cycles=active, inputs=inputs)


def _run(
    tile_cfg: TileConfig,
    num_tiles: int,
    vertex_tile: np.ndarray,
    vertex_cycles: np.ndarray,
    vertex_multi: np.ndarray,
) -> tuple[np.ndarray, ...]:
    return _assign_vertices(
        num_tiles,
        tile_cfg.worker_contexts,
        tile_cfg.vertex_launch_cycles,
        tile_cfg.multi_vertex_launch_cycles,
        vertex_tile,
        vertex_cycles,
        vertex_multi,
    )


def _first_costs(
    tile_cfg: TileConfig,
    num_tiles: int,
    vertex_tile: np.ndarray,
    vertex_cycles: np.ndarray,
    vertex_multi: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    return _tile_costs(
        num_tiles,
        tile_cfg.worker_contexts,
        tile_cfg.vertex_launch_cycles,
        tile_cfg.multi_vertex_launch_cycles,
        vertex_tile,
        vertex_cycles,
        vertex_multi,
    )
