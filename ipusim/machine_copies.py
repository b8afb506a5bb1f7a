"""Cycles of Poplar's runtime on-tile copy vertices (gather and scatter).

Poplar makes data contiguous for a vertex's ``Vector`` fields by on-tile copies it
inserts itself: a compute set of copy vertices (``poplar_rt::`` vertex types, such as
``StridedCopyDA32``, ``DstStridedCopyDA32``, ``DstLongStridedCopy``, ``ShortMemcpy``,
``Memcpy64Bit``, named in the Poplar user guide's memory report and in the SDK 1.x
profiles of thorbenlouw/lbm-graphcore ``experiments/halo-exchange-approaches``), a
few per tile, one per worker. Two kinds are told apart, because Poplar uses different
vertices for them and H measures both:

* **gather**: strided source regions into one contiguous buffer (H's ``pre``, before the
  compute set: the worker's rows of the image into its ``in`` field);
* **scatter**: a contiguous buffer out to strided destination regions (H's ``post``,
  after it: the ``out`` field back into the image rows).

A copy vertex runs on one worker context; its thread cycles are a fixed part (vertex
entry, reading its state), a part per region (the loop set-up of each contiguous piece)
and the bytes at the rate of the load/store path: Colossus' ``ldst64pace`` loads 64 bits
and stores 64 bits in one instruction (the Tile Vertex ISA; Poplibs' estimators price
loops built on it at one instruction per 8 bytes, e.g. ``BitwiseNot`` in
``popopsCycleEstimators.cpp``), so a copy moves ``min(memory.load_bytes_per_cycle,
memory.store_bytes_per_cycle)`` bytes per thread cycle (8 on every preset, the store
side). The rate is the ISA's, not fitted; the fixed and per-region parts
(``code.copy_{gather,scatter}_{fixed,region}_cycles``) are fitted on H's copy rows
(docs/calibration.md, "On-tile copies"). The measured difference between ``float``
and ``half4`` copies of the same rows on one IPU is one thread cycle per 8.0 bytes
(``pre``), the rate of the ISA.

They are applied when a graph is built or a program compiled (Poplar decides its copy
vertices when it compiles), so ``ipusim calibrate``, which re-times a lowered program,
cannot fit them; ``examples/calibration/_fit_hardware.py copies`` fits them on the
workload's geometry.

**The ``Copy`` program's on-tile part** (:func:`on_tile_copy_vertices`) is made of the
same kind of vertices: the elements a ``Copy`` moves within a tile form pieces (runs
contiguous on both sides), a tile's bytes are split between its worker contexts in
chunks of whole 64-bit words (one copy vertex per worker, as the SDK 1.x profiles
above show, so the chunks split pieces where they fall), and each vertex is costed by
``code.copy_estimate``:

* ``planner`` (the default): modelled on Poplibs' planner estimate of the copies that
  rearrange operands (graphcore/poplibs 7eac0f26, ``lib/poplin/ConvModel.cpp``, the
  ``inputsCopyCycles``/``weightsCopyCycles`` estimates with
  ``target.getMemcpyBytesPerCycle()``), but not equal to it: Poplibs moves
  ``min(memcpy bytes per cycle, element bytes)`` per cycle scaled by 4/5 or 3/5
  (``getScaleFactorForTransform``), 3.2 B a cycle for FLOAT, where this rule moves each
  contiguous piece at ``min(memcpy bytes per cycle, piece bytes)`` (the copy vertices do
  not know the element type yet): each piece moves at the ``ldst64pace`` rate,
  at least one thread cycle a piece, no per-region part; the planner has no fixed
  part either, but a vertex has one (its entry, reading its state, its exit): the
  scatter's fixed part of the H fit, the one without the gather's unexplained extra
  ("H with the runtime copy vertices" in docs/calibration.md);
* ``runtime``: the H fit above (fixed + regions x per region + the moves), a region
  being a strided run of pieces (one length, constant strides on both sides), the kind
  a gather where the tile's source side has more runs than its destination side;
* ``poplibs``: Poplibs' ``LongMemcpy`` estimate (``popopsCycleEstimators.cpp``,
  ``BroadcastSelectorSelectCycles``: 11 + 1 thread cycles per vertex, then per row
  ``12 + 23 + bytes / 4 + (bytes % 4) * 5``), each piece a row.

H's rows are the only measured on-tile copies, and they are not ``Copy`` programs:
Poplar's copies for a vertex's ``Vector`` fields, contiguous rows of about 200 bytes.
A ``Copy`` that rearranges an operand (a matMul's, say) moves many pieces of a few
bytes, for which the per-row part fitted on H (48 thread cycles a row) would cost
several times the copy's bytes; Poplibs' planner, which prices those very copies,
charges a cycle a piece. So the planner is the default for ``Copy`` programs, and
:func:`copy_vertex_cycles` (H's copies) keeps the fit.
"""

from __future__ import annotations

from typing import Literal

import numba
import numpy as np
from numpy.typing import ArrayLike

from ipusim.config import MachineConfig

__all__ = [
    "COPY_KINDS",
    "copy_bytes_per_cycle",
    "copy_vertex_cycles",
    "on_tile_copy_vertices",
    "poplibs_memcpy_cycles",
]

#: The kinds of runtime copy vertex (module docstring).
COPY_KINDS = ("gather", "scatter")


def copy_bytes_per_cycle(cfg: MachineConfig) -> int:
    """Bytes a copy vertex moves per thread cycle: one 64-bit load and one 64-bit store
    per ``ldst64pace``, so the slower of the tile's load and store paths."""
    return int(min(cfg.memory.load_bytes_per_cycle, cfg.memory.store_bytes_per_cycle))


def copy_vertex_cycles(
    cfg: MachineConfig, region_bytes: ArrayLike, kind: Literal["gather", "scatter"]
) -> int:
    """Thread cycles of one runtime copy vertex moving ``region_bytes`` (one entry per
    contiguous region of its strided side) as a ``kind`` copy (``gather`` or
    ``scatter``): fixed + regions x per region + each region's bytes at
    :func:`copy_bytes_per_cycle`, rounded up per region (a region's last 64-bit
    access is a whole instruction).

    Raises
    ------
    ValueError
        ``kind`` is not a copy kind, or a region has a negative size.
    """
    if kind not in COPY_KINDS:
        raise ValueError(
            f"copy_vertex_cycles: kind={kind!r}; expected one of {', '.join(COPY_KINDS)} "
            "(gather: strided regions into a contiguous buffer; scatter: the reverse)"
        )
    b = np.asarray(region_bytes, np.int64).reshape(-1)
    if b.size and b.min() < 0:
        raise ValueError(
            f"copy_vertex_cycles: a region of {int(b.min())} bytes; sizes must be >= 0"
        )
    code = cfg.code
    if kind == "gather":
        fixed, per_region = code.copy_gather_fixed_cycles, code.copy_gather_region_cycles
    else:
        fixed, per_region = code.copy_scatter_fixed_cycles, code.copy_scatter_region_cycles
    rate = copy_bytes_per_cycle(cfg)
    moves = int((-(-b // rate)).sum())
    return round(fixed + b.size * per_region) + moves


def poplibs_memcpy_cycles(region_bytes: ArrayLike) -> int:
    """Thread cycles of one copy vertex moving ``region_bytes`` (one entry per row) by
    Poplibs' ``LongMemcpy`` estimate (graphcore/poplibs 7eac0f26,
    ``lib/popops/popopsCycleEstimators.cpp``, ``BroadcastSelectorSelectCycles``):
    ``11 + 1`` for the vertex, then ``12 + 23 + bytes // 4 + (bytes % 4) * 5`` per row."""
    b = np.asarray(region_bytes, np.int64).reshape(-1)
    return 12 + int((35 + b // 4 + (b % 4) * 5).sum())


@numba.njit(cache=True, nogil=True)
def _chunk_walk(tile, nbytes, fresh, contexts, rate):  # pragma: no cover - compiled
    # pieces sorted by tile; each tile's bytes cut into chunks of ceil(bytes / (contexts
    # * 8)) * 8, a vertex per chunk: its tile, its first piece, the thread cycles of its
    # moves at ``rate``, Poplibs' memcpy estimate of its segments and its region setups
    n = tile.size
    room = 0
    k = 0
    while k < n:  # at most ``contexts`` vertices per tile
        j = k
        while j < n and tile[j] == tile[k]:
            j += 1
        room += contexts
        k = j
    v_tile = np.empty(room, np.int64)
    v_row = np.empty(room, np.int64)
    moves = np.zeros(room, np.int64)
    memcpy = np.zeros(room, np.int64)
    setups = np.zeros(room, np.int64)
    m = 0
    k = 0
    while k < n:
        j = k
        total = 0
        while j < n and tile[j] == tile[k]:
            total += nbytes[j]
            j += 1
        chunk = -(-total // (contexts * 8)) * 8
        offset = 0
        current = -1
        for p in range(k, j):
            x = offset
            end = offset + nbytes[p]
            while x < end:
                v = x // chunk
                y = min(end, (v + 1) * chunk)
                if v != current:  # a vertex starts: it sets up its first region
                    current = v
                    v_tile[m] = tile[p]
                    v_row[m] = p
                    m += 1
                    setups[m - 1] += 1
                elif x == offset and fresh[p]:
                    setups[m - 1] += 1
                seg = y - x
                moves[m - 1] += -(-seg // rate)
                memcpy[m - 1] += 35 + seg // 4 + (seg % 4) * 5  # poplibs_memcpy_cycles
                x = y
            offset = end
        k = j
    return v_tile[:m], v_row[:m], moves[:m], memcpy[:m], setups[:m]


def on_tile_copy_vertices(
    cfg: MachineConfig,
    region_tile: ArrayLike,
    region_bytes: ArrayLike,
    gather: ArrayLike,
    new_region: ArrayLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The copy vertices of an on-tile copy: ``(vertex tile, thread cycles)``.

    Piece ``k`` (contiguous on both sides) lies on ``region_tile[k]`` and holds
    ``region_bytes[k]`` (> 0) bytes; ``gather[k]`` says whether its tile's copy is a
    gather (else a scatter); ``new_region[k]`` (default all True) whether the piece
    starts a region of its own, False where it continues a strided region (pieces of
    one length at constant source and destination strides, which one loop of a strided
    copy vertex walks). A tile's pieces, in the order given, are cut into one chunk per
    worker context of ``ceil(tile bytes / (contexts * 8)) * 8`` bytes (whole 64-bit
    words), so a chunk boundary splits the piece it falls in; each chunk is one vertex,
    costed by ``code.copy_estimate`` (module docstring): every piece moves at the rate,
    rounded up to whole cycles (at least one cycle a piece: ``min(memcpy bytes per
    cycle, piece bytes)`` per cycle; the module docstring says how this differs from
    Poplibs' planner),
    and ``runtime`` adds :func:`copy_vertex_cycles`' fixed and per-region parts.
    """
    tile = np.asarray(region_tile, np.int64).reshape(-1)
    nbytes = np.asarray(region_bytes, np.int64).reshape(-1)
    kind = np.asarray(gather, bool).reshape(-1)
    fresh = np.ones(tile.size, bool) if new_region is None else np.asarray(new_region, bool)
    if not tile.size:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    order = np.argsort(tile, kind="stable")
    tile, nbytes, kind, fresh = tile[order], nbytes[order], kind[order], fresh[order]
    contexts = int(cfg.tile.worker_contexts)
    v_tile, row, moves, memcpy, count = _chunk_walk(
        tile, nbytes, fresh, contexts, copy_bytes_per_cycle(cfg)
    )
    estimate = cfg.code.copy_estimate
    if estimate == "poplibs":
        return v_tile, 12 + memcpy
    if estimate == "planner":  # plus the vertex's entry and exit (module docstring)
        return v_tile, round(cfg.code.copy_scatter_fixed_cycles) + moves
    code = cfg.code
    is_gather = kind[row]
    fixed = np.where(is_gather, code.copy_gather_fixed_cycles, code.copy_scatter_fixed_cycles)
    per = np.where(is_gather, code.copy_gather_region_cycles, code.copy_scatter_region_cycles)
    cycles = np.rint(fixed + count * per).astype(np.int64) + moves
    return v_tile, cycles
