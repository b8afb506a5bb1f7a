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

They are applied when a graph is built (Poplar decides its copy vertices when it
compiles), so ``ipusim calibrate``, which re-times a lowered program, cannot fit them;
``examples/calibration/_fit_hardware.py copies`` fits them on the workload's geometry.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import ArrayLike

from ipusim.config import MachineConfig

__all__ = ["COPY_KINDS", "copy_bytes_per_cycle", "copy_vertex_cycles"]

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
