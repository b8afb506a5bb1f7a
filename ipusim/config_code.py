"""The code section of a machine config: what the graph compiler puts in tile memory
and the cost of the on-tile copies it inserts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from ipusim.config_base import Section

__all__ = ["CodeConfig"]


def _copy_cycles(default: float, part: str, kind: str, rows: str) -> Any:
    """A thread-cycle part of one of Poplar's runtime copy vertices (ipusim.machine_copies)."""
    return Field(
        default=default,
        ge=0.0,
        le=1e6,
        description=f"Thread cycles, {part}, of a {kind} copy vertex (fitted, H {rows} rows).",
    )


class CodeConfig(Section):
    """What the graph compiler puts in tile memory and the cost of the copies it inserts.

    Sizes of compiled code, stacks and vertex state, and the cycles of the on-tile copy
    vertices Poplar inserts for copies within a tile. None is published; every value is an
    estimate (see the presets).
    """

    vertex_header_bytes: int = Field(
        default=4, ge=0, le=1 << 20, description="Vertex state header."
    )
    field_pointer_bytes: int = Field(
        default=4, ge=0, le=1 << 20, description="Vertex state per field (a pointer)."
    )
    vector_size_bytes: int = Field(
        default=4, ge=0, le=1 << 20, description="Extra state of a Vector field (size word)."
    )
    vectorlist_descriptor_bytes: int = Field(
        default=4, ge=0, le=1 << 20, description="State per inner vector of a VectorList."
    )
    vertex_code_bytes: int = Field(
        default=256, ge=0, le=1 << 24, description="Code of one vertex type on one tile."
    )
    control_code_base_bytes: int = Field(
        default=64, ge=0, le=1 << 24, description="Control code of every tile."
    )
    control_code_bytes_per_step: int = Field(
        default=16, ge=0, le=1 << 20, description="Control code per program step on a tile."
    )
    exchange_code_base_bytes: int = Field(
        default=16, ge=0, le=1 << 20, description="Exchange code per exchange per tile."
    )
    exchange_code_bytes_per_message: int = Field(
        default=8,
        ge=0,
        le=1 << 20,
        description="Exchange code per region a tile sends and per tile it receives from.",
    )
    host_exchange_code_bytes: int = Field(
        default=32, ge=0, le=1 << 20, description="Host exchange code per stream copy per tile."
    )
    worker_stack_bytes: int = Field(
        default=72, ge=0, le=1 << 20, description="Stack of one worker context."
    )
    supervisor_stack_bytes: int = Field(
        default=128, ge=0, le=1 << 20, description="Stack of the supervisor context."
    )
    copy_estimate: Literal["planner", "runtime", "poplibs"] = Field(
        default="planner",
        description="Cost of the Copy program's on-tile copy vertices (ipusim.machine_copies): "
        "'planner' (Poplibs' planner estimate, ConvModel.cpp addTransformCycleEstimate: "
        "min(memcpy bytes per cycle, element bytes) x 4/5 per thread cycle, x 3/5 where a "
        "piece's elements are not a multiple of 2 (FLOAT) or 4 (other types)), "
        "'runtime' (the copy_* fields below, fitted on H) or 'poplibs' (Poplibs' "
        "LongMemcpy estimate).",
    )
    # Poplar's runtime copy vertices that gather strided regions into a contiguous
    # buffer (pre) or scatter one into strided regions (post); ipusim.machine_copies.
    # Fitted on H's 12 pre/post rows (Mk1 hardware; the worker ISA is the same on every
    # generation): docs/calibration.md, "On-tile copies".
    copy_gather_fixed_cycles: float = _copy_cycles(150.0, "fixed", "gather", "pre")
    copy_gather_region_cycles: float = _copy_cycles(47.8, "per region", "gather", "pre")
    copy_scatter_fixed_cycles: float = _copy_cycles(21.1, "fixed", "scatter", "post")
    copy_scatter_region_cycles: float = _copy_cycles(40.7, "per region", "scatter", "post")
