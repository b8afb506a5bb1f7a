"""Machine configuration: frozen pydantic models, one per hardware component, and their loader.

Every field carries its unit in its name; YAML files may write quantities with units
("624 KiB", "1.33 GHz", "64 GB/s", "2 us", see :mod:`ipusim.units`). Presets live as
YAML in ``configs/`` (``ipusim/configs`` in an installed wheel); a file may
``extends: <preset or path>`` another and override some of its fields.

:func:`load_config` turns a preset name, a YAML path or a mapping into a
:class:`MachineConfig`; every problem of a bad config is reported at once in one
:class:`~ipusim.errors.ConfigError`, one line per problem naming the file, the dotted
field path, the value found and what was expected.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from ipusim.errors import ConfigError
from ipusim.units import Bytes, BytesPerSecond, Hertz, Seconds

__all__ = [
    "CodeConfig",
    "ExchangeConfig",
    "GWLinksConfig",
    "HostConfig",
    "LinksConfig",
    "MachineConfig",
    "MemoryConfig",
    "RemoteConfig",
    "SimConfig",
    "SyncConfig",
    "TileConfig",
    "config_hash",
    "config_to_yaml",
    "list_presets",
    "load_config",
    "load_yaml_text",
    "preset_path",
    "with_overrides",
]


# Physical bounds ---------------------------------------------------------------------------
# Every numeric field has an upper bound (and a lower one where zero or tiny values would
# break the arithmetic), chosen far outside any real machine so that no plausible config
# is refused, yet close enough that the derived integers (cycles from seconds, bytes over
# bandwidths) stay far inside int64 (2^63 ~ 9.2e18). The reasoning is in each field's
# description, which every error message about the field repeats.

#: Fixed cycle counts (latencies, delays): 2^40 cycles is about 18 minutes at 1 GHz,
#: beyond any latency of a real machine; 2^23 steps of it still fit in int64.
MAX_CYCLES = 1 << 40
#: Tile clock: no clocked logic runs at 100 GHz (IPUs run at 1.3-1.85 GHz); at least 1 MHz.
MAX_CLOCK_HZ = 100e9
MIN_CLOCK_HZ = 1e6
#: Latencies: one transfer never takes a second; 1 s x 100 GHz = 1e11 cycles.
MAX_SECONDS = 1.0
#: Bandwidths: 1 PB/s is 1000x the fastest chip-to-chip link; 1 MB/s is slower than
#: any host or IPU link ever built (PCIe 1.0 x1 moves 250 MB/s).
MAX_BYTES_PER_S = 1e15
MIN_BYTES_PER_S = 1e6
#: Tile memory: a tile addresses its memory with 32-bit pointers, so at most 4 GiB.
MAX_TILE_MEMORY_BYTES = 1 << 32
#: One host copy or buffer: 1 TiB, more than the host memory of any IPU server.
MAX_COPY_BYTES = 1 << 40
#: Tiles over all IPUs: 2^21 (a 1024-IPU Mk2 pod has 1,507,328); beyond it the
#: per-tile arrays of one step alone would take gigabytes.
MAX_TOTAL_TILES = 1 << 21
#: Longest host copy or whole-IPU link transfer a config may imply, in cycles: it keeps
#: every sum of transfer cycles of a run inside int64.
MAX_TRANSFER_CYCLES = 1 << 48


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_for_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """Refuse ``true``/``yes``/``on`` where a number is expected.

        Python's ``bool`` is an ``int`` and YAML 1.1 reads ``yes``, ``no``, ``on``,
        ``off``, ``true`` and ``false`` as booleans, so without this check
        ``tiles_per_ipu: yes`` would silently become 1 tile.
        """
        if isinstance(value, bool) and info.field_name is not None:
            annotation = cls.model_fields[info.field_name].annotation
            if _is_numeric(annotation):
                raise ValueError(
                    f"found {value!r} (a boolean); expected a number; hint: YAML reads "
                    f"yes/no/on/off/true/false as booleans, write the number instead"
                )
        return value


def _is_numeric(annotation: Any) -> bool:
    """Whether a field annotation is ``int``, ``float`` or an optional one of them."""
    if annotation in (int, float):
        return True
    args = getattr(annotation, "__args__", ())
    return bool(args) and all(a in (int, float, type(None)) for a in args)


class TileConfig(_Section):
    """Tile processor: count, clock and the barrel-scheduled worker contexts."""

    tiles_per_ipu: int = Field(
        ge=1, le=65536, description="Tiles on one IPU; 1..65536 (Mk2 has 1472)."
    )
    clock_hz: Hertz = Field(
        ge=MIN_CLOCK_HZ,
        le=MAX_CLOCK_HZ,
        description="Tile clock frequency in Hz; 1 MHz..100 GHz (no clocked logic runs "
        "faster; IPUs run at 1.3-1.85 GHz).",
    )
    worker_contexts: int = Field(
        default=6, ge=1, le=64, description="Worker contexts (barrel slots)."
    )
    vertex_launch_cycles: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Refinement: extra thread cycles per worker-vertex launch. 0 reproduces "
        "the IPU Model.",
    )
    multi_vertex_launch_cycles: int = Field(
        default=0,
        ge=0,
        le=1_000_000,
        description="Refinement: extra tile cycles per multi-vertex (supervisor) launch. 0 "
        "reproduces the IPU Model.",
    )
    peak_flops_per_cycle_fp32: int = Field(
        ge=1, le=1 << 16, description="Peak fp32 flop per cycle per tile; at most 65536."
    )
    peak_flops_per_cycle_fp16: int = Field(
        ge=1, le=1 << 16, description="Peak fp16 flop per cycle per tile; at most 65536."
    )
    columns: int = Field(
        default=16,
        ge=1,
        le=65536,
        description="Physical layout: tiles are numbered column by column; at most "
        "tiles_per_ipu (the last column may be partly filled).",
    )
    model: str = Field(
        default="barrel",
        description="Compute timing component (see ipusim.timing.components('compute')).",
    )


class MemoryConfig(_Section):
    """Tile memory: the interleaved and non-interleaved regions and their banks."""

    tile_memory_bytes: Bytes = Field(
        ge=1,
        le=MAX_TILE_MEMORY_BYTES,
        description="Memory per tile in bytes; at most 4 GiB (32-bit tile addresses).",
    )
    non_interleaved_bytes: Bytes = Field(
        ge=0,
        le=MAX_TILE_MEMORY_BYTES,
        description="Non-interleaved region (code and data); a multiple of bank_bytes.",
    )
    interleaved_bytes: Bytes = Field(
        ge=0,
        le=MAX_TILE_MEMORY_BYTES,
        description="Interleaved region (data only); a multiple of bank_bytes.",
    )
    bank_bytes: Bytes = Field(
        ge=1,
        le=MAX_TILE_MEMORY_BYTES,
        description="Memory element (bank) size in bytes; divides both regions.",
    )
    alignment_bytes: Bytes = Field(
        default=8,
        ge=1,
        le=1 << 16,
        description="Minimum alignment of data; a power of two, at most 64 KiB.",
    )
    load_bytes_per_cycle: int = Field(
        default=16, ge=1, le=1024, description="Peak load bandwidth per tile; at most 1 KiB."
    )
    store_bytes_per_cycle: int = Field(
        default=8, ge=1, le=1024, description="Peak store bandwidth per tile; at most 1 KiB."
    )

    @field_validator("alignment_bytes")
    @classmethod
    def _alignment_power_of_two(cls, value: int) -> int:
        """Alignments are powers of two: addresses are aligned by clearing low bits."""
        if value & (value - 1):
            below = 1 << (value.bit_length() - 1)
            raise ValueError(
                f"found {value}; expected a power of two (1, 2, 4, 8, ...), e.g. {below} "
                f"or {below * 2}"
            )
        return value


class ExchangeConfig(_Section):
    """On-chip (internal) exchange fabric."""

    bytes_per_cycle: float = Field(
        gt=0,
        le=1024,
        description="Exchange bytes per cycle per tile; at most 1024 (a tile's exchange "
        "port moves a few words per cycle); a whole tile memory must move in 2^48 cycles.",
    )
    fixed_latency_cycles: int = Field(
        default=0, ge=0, le=MAX_CYCLES, description="Fixed cycles per exchange; at most 2^40."
    )
    cycles_per_hop: float = Field(
        default=0.0,
        ge=0,
        le=1e6,
        description="Extra cycles per unit of layout distance to the farthest peer; at most 1e6.",
    )
    cycles_per_message: float = Field(
        default=0.0,
        ge=0,
        le=1e6,
        description="Cycles a tile spends setting up each message it sends or receives "
        "(exchange code per contiguous region); at most 1e6.",
    )
    tiles_per_shared_bus: int = Field(default=1, ge=1, le=2, description="Tiles sharing a bus.")
    model: str = Field(
        default="static",
        description="On-chip exchange timing component (ipusim.timing.components('exchange')).",
    )


class SyncConfig(_Section):
    """Sync controller and its per-tile delays."""

    min_sync_delay_cycles: int = Field(
        default=0, ge=0, le=MAX_CYCLES, description="Minimum sync delay of any tile; at most 2^40."
    )
    relative_delay: Literal["auto", "none"] = Field(
        default="auto", description="'auto': delay grows with distance to the controller."
    )
    max_relative_delay_cycles: int = Field(
        default=0, ge=0, le=MAX_CYCLES, description="Delay of the farthest tile; at most 2^40."
    )
    controller_tile: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Tile nearest the sync controller; below tile.tiles_per_ipu.",
    )
    global_sync_cycles: int | None = Field(
        default=None,
        ge=0,
        le=MAX_CYCLES,
        description="Extra cycles of an external sync; None: derived; at most 2^40.",
    )
    global_sync_ns_per_hop: float = Field(
        default=15.0,
        ge=0,
        le=1e9,
        description="Used when global_sync_cycles is None; at most 1e9 ns (a latency "
        "is under 1 s).",
    )
    host_sync_cycles: int = Field(
        default=0, ge=0, le=MAX_CYCLES, description="Extra cycles of a host sync; at most 2^40."
    )
    model: str = Field(
        default="controller",
        description="Sync timing component (ipusim.timing.components('sync')).",
    )


class HostConfig(_Section):
    """Host link (PCIe or RoCE) shared by the IPUs of a machine."""

    bandwidth_bytes_per_s: BytesPerSecond = Field(
        ge=MIN_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="Host link bandwidth, one direction; 1 MB/s..1 PB/s (no host link is "
        "slower than PCIe 1.0 x1 or 1000x faster than PCIe 5).",
    )
    latency_s: Seconds = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        description="Latency of one host transfer; at most 1 s (1e11 cycles at 100 GHz).",
    )
    max_copy_bytes: Bytes = Field(
        ge=1, le=MAX_COPY_BYTES, description="Largest single stream copy; at most 1 TiB."
    )
    ipus_per_link: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="IPUs sharing one host link: IPU i uses link i // ipus_per_link (an "
        "IPU-Machine's gateway serves its own IPUs); None: one link for the whole machine.",
    )
    model: str = Field(
        default="shared_link",
        description="Host link timing component (ipusim.timing.components('host')).",
    )


class GWLinksConfig(_Section):
    """GW-Links: the second tier of the IPU-Fabric, joining racks through IPU-Gateways.

    The IPUs are split into racks (IPU-Link domains) of ``ipus_per_rack`` consecutive
    IPUs, each wired by ``links.topology``; the gateway of every group of
    ``ipus_per_gateway`` IPUs (one IPU-Machine) is joined to the gateway at the same place
    of the neighbouring racks. Unset ``ipus_per_rack``: one rack, no GW-Links.
    """

    ipus_per_rack: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description="IPUs of one rack (IPU-Link domain); null: the whole machine is one "
        "rack and has no GW-Links; 1..1024 (an IPU-POD64 rack has 64).",
    )
    ipus_per_gateway: int = Field(
        default=4,
        ge=1,
        le=1024,
        description="IPUs behind one IPU-Gateway (one IPU-Machine, 4 on an IPU-M2000 or "
        "Bow-2000); divides ipus_per_rack; the first of them holds the GW-Links.",
    )
    topology: Literal["ring", "line", "full"] = Field(
        default="ring",
        description="How racks are joined: 'ring' (east-west loop), 'line' or 'full' "
        "(switched GW-Links: every rack reaches every other in one hop).",
    )
    bandwidth_bytes_per_s: BytesPerSecond = Field(
        default=12.5e9,
        ge=MIN_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="Bandwidth of one GW-Link, one direction; 1 MB/s..1 PB/s (a GW-Link "
        "is 100 Gbit/s Ethernet: 12.5 GB/s).",
    )
    links_between_racks: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Parallel GW-Links per gateway between two neighbouring racks; at "
        "most 64 (a gateway has 2 GW-Link ports).",
    )
    hop_latency_s: Seconds = Field(
        default=0.0,
        ge=0,
        le=MAX_SECONDS,
        description="Latency of one GW-Link hop; at most 1 s (1e11 cycles at 100 GHz).",
    )

    @field_validator("ipus_per_gateway")
    @classmethod
    def _gateway_divides_rack(cls, value: int, info: ValidationInfo) -> int:
        """A rack holds whole IPU-Machines."""
        rack = info.data.get("ipus_per_rack")
        if rack is not None and rack % value:
            raise ValueError(
                f"found {value} with links.gw_links.ipus_per_rack = {rack}; expected a "
                f"divisor of ipus_per_rack (a rack holds whole IPU-Machines); hint: 4 IPUs "
                f"per IPU-M2000 or Bow-2000"
            )
        return value


class LinksConfig(_Section):
    """IPU-Links between the IPUs of a machine, and the GW-Links between racks."""

    bandwidth_bytes_per_s: BytesPerSecond = Field(
        ge=MIN_BYTES_PER_S,
        le=MAX_BYTES_PER_S,
        description="Bandwidth of one link, one direction; 1 MB/s..1 PB/s.",
    )
    links_between_neighbours: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Parallel links per hop; at most 64 (an IPU has 10 links).",
    )
    topology: Literal["ring", "line", "full", "ladder", "custom"] = Field(
        default="ring",
        description="IPU-Link wiring of one rack: ring, line, full, ladder (two columns "
        "of IPUs joined by rungs; links.torus: true closes the columns into loops, the "
        "IPU-POD 2D torus) or custom (links.edges).",
    )
    hop_latency_cycles: int = Field(
        default=0, ge=0, le=MAX_CYCLES, description="Latency per hop; at most 2^40."
    )
    model: str = Field(
        default="topology",
        description="IPU-Link timing component (ipusim.timing.components('links')).",
    )
    torus: bool = Field(
        default=False,
        description="Ladder only: also join the two ends of each column (IPU-POD 2D torus).",
    )
    edges: tuple[tuple[int, int], ...] = Field(
        default=(),
        description="Custom only: IPU-Link pairs [[a, b], ...] of one rack, IPU ids of the "
        "rack (0-based), each pair once, no IPU joined to itself.",
    )
    routing: bool = Field(
        default=True,
        description="true: copies are routed through other IPUs on the shortest path; "
        "false: only direct neighbours may exchange.",
    )
    gw_links: GWLinksConfig = GWLinksConfig()

    @field_validator("torus")
    @classmethod
    def _torus_needs_a_ladder(cls, value: bool, info: ValidationInfo) -> bool:
        topology = info.data.get("topology")
        if value and topology is not None and topology != "ladder":
            raise ValueError(
                f"found true with links.topology = {topology!r}; expected false: only a "
                f"ladder has column ends to join; hint: set links.torus: false (a ring is "
                f"already closed) or links.topology: ladder"
            )
        return value

    @field_validator("edges", mode="before")
    @classmethod
    def _edges_are_pairs(cls, value: Any, info: ValidationInfo) -> Any:
        """Pairs of distinct non-negative IPU ids, each pair once (range: cross check)."""
        topology = info.data.get("topology")
        if value is None:
            value = ()
        if not isinstance(value, list | tuple):
            raise ValueError(
                f"found {_show(value)}; expected a list of IPU pairs, e.g. [[0, 1], [1, 2]]"
            )
        if value and topology is not None and topology != "custom":
            raise ValueError(
                f"found {len(value)} edge(s) with links.topology = {topology!r}; expected "
                f"no edges: only links.topology: custom reads them; hint: set "
                f"links.topology: custom or remove links.edges"
            )
        seen: dict[tuple[int, int], int] = {}
        for index, pair in enumerate(value):
            ok = (
                isinstance(pair, list | tuple)
                and len(pair) == 2
                and all(isinstance(x, int) and not isinstance(x, bool) for x in pair)
            )
            if not ok:
                raise ValueError(
                    f"edge {index}: found {_show(pair)}; expected a pair of IPU ids [a, b] "
                    f"(two integers)"
                )
            a, b = pair
            if a < 0 or b < 0:
                raise ValueError(f"edge {index}: found [{a}, {b}]; expected IPU ids >= 0 (0-based)")
            if a == b:
                raise ValueError(
                    f"edge {index}: found [{a}, {b}], an IPU joined to itself; expected two "
                    f"different IPUs; hint: remove the self-loop"
                )
            key = (min(a, b), max(a, b))
            if key in seen:
                raise ValueError(
                    f"edge {index}: found [{a}, {b}], already given as edge {seen[key]}; "
                    f"expected each pair once (links are bidirectional); hint: raise "
                    f"links.links_between_neighbours for more parallel links"
                )
            seen[key] = index
        return tuple((int(a), int(b)) for a, b in value)


class RemoteConfig(_Section):
    """Remote buffers in Streaming Memory, reached through the host link."""

    bandwidth_bytes_per_s: BytesPerSecond = Field(
        default=15.75e9,
        gt=0,
        le=1e13,
        description="Streaming Memory bandwidth of one IPU, one direction "
        "(remote.model: streaming_memory).",
    )
    latency_s: Seconds = Field(
        default=1e-6,
        ge=0,
        le=1.0,
        description="Latency of one Streaming Memory transfer (remote.model: streaming_memory).",
    )
    model: str = Field(
        default="host_link",
        description="Remote-buffer timing component (ipusim.timing.components('remote')).",
    )


class CodeConfig(_Section):
    """What the graph compiler puts in tile memory and the cost of the copies it inserts.

    Sizes of compiled code, stacks and vertex state, and the cycles of the on-tile copy
    vertex Poplar inserts for copies within a tile. None is published; every value is an
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
        default=8, ge=0, le=1 << 20, description="Exchange code per message sent or received."
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
    copy_vertex_fixed_cycles: int = Field(
        default=13, ge=0, le=1 << 20, description="Fixed thread cycles of an on-tile copy vertex."
    )


class SimConfig(_Section):
    """Simulation settings that do not change results."""

    granularity: Literal["ipu", "tile"] = Field(
        default="ipu", description="'tile': every tile is its own SimPy process (same trace)."
    )


class MachineConfig(_Section):
    """A whole machine: IPUs, their tiles and the links between them."""

    name: str = "custom"
    description: str = ""
    arch: Literal["ipu1", "ipu2", "ipu21", "custom"] = "custom"
    num_ipus: int = Field(
        default=1,
        ge=1,
        le=1024,
        description="IPUs of the machine; 1..1024 (the largest IPU-POD has 1024).",
    )
    tile: TileConfig
    memory: MemoryConfig
    exchange: ExchangeConfig
    sync: SyncConfig = SyncConfig()
    host: HostConfig
    links: LinksConfig
    remote: RemoteConfig = RemoteConfig()
    code: CodeConfig = CodeConfig()
    sim: SimConfig = SimConfig()
    provenance: dict[str, Any] | None = Field(
        default=None,
        description="Where the values came from (written by ipusim calibrate); no effect.",
    )

    @model_validator(mode="after")
    def _cross_checks(self) -> MachineConfig:
        problems = _cross_problems(
            self.num_ipus, self.tile, self.memory, self.exchange, self.sync, self.host, self.links
        )
        if problems:
            raise ValueError("; ".join(f"{'.'.join(path)}: {msg}" for path, msg in problems))
        return self

    # Derived quantities -------------------------------------------------------------
    @property
    def num_tiles(self) -> int:
        """Tiles over all IPUs."""
        return self.num_ipus * self.tile.tiles_per_ipu

    @property
    def host_bytes_per_cycle(self) -> float:
        """Host link bandwidth in bytes per tile clock cycle."""
        return self.host.bandwidth_bytes_per_s / self.tile.clock_hz

    @property
    def host_latency_cycles(self) -> int:
        """Host transfer latency in tile clock cycles."""
        return math.ceil(self.host.latency_s * self.tile.clock_hz)

    @property
    def link_bytes_per_cycle(self) -> float:
        """Bandwidth of one IPU-Link hop (all parallel links) in bytes per cycle."""
        return (
            self.links.bandwidth_bytes_per_s
            * self.links.links_between_neighbours
            / self.tile.clock_hz
        )

    @property
    def global_sync_cycles(self) -> int:
        """Extra cycles of an external sync: the config value or the hop formula."""
        if self.sync.global_sync_cycles is not None:
            return self.sync.global_sync_cycles
        hops = 1 + (self.num_ipus // 2) // 2
        ns = self.sync.global_sync_ns_per_hop * 1e-9
        return math.ceil(round(ns * self.tile.clock_hz * hops * 2, 9))


# Cross checks between sections ---------------------------------------------------------
def _memory_regions_problem(mem: MemoryConfig) -> str | None:
    """Why the two memory regions do not fill the tile memory exactly, or ``None``."""
    total = mem.non_interleaved_bytes + mem.interleaved_bytes
    if total == mem.tile_memory_bytes:
        return None
    return (
        f"memory regions do not add up: non_interleaved_bytes ({mem.non_interleaved_bytes}) "
        f"+ interleaved_bytes ({mem.interleaved_bytes}) = {total}, but tile_memory_bytes is "
        f"{mem.tile_memory_bytes}; expected the two regions to add up to the tile memory"
    )


def _controller_tile_problem(tile: TileConfig, sync: SyncConfig) -> str | None:
    """Why the sync controller tile is off the chip, or ``None``."""
    if sync.controller_tile < tile.tiles_per_ipu:
        return None
    return (
        f"found {sync.controller_tile}; expected a tile below tile.tiles_per_ipu "
        f"({tile.tiles_per_ipu}), i.e. 0..{tile.tiles_per_ipu - 1}"
    )


def _banks_problem(mem: MemoryConfig) -> str | None:
    """Why the memory regions are not made of whole banks, or ``None``.

    Memory is placed bank by bank; a region that is not a whole number of banks (or a
    bank larger than a region) has no meaning on the chip.
    """
    bad = [
        f"{name} ({size}) is not a multiple of it"
        for name, size in (
            ("memory.non_interleaved_bytes", mem.non_interleaved_bytes),
            ("memory.interleaved_bytes", mem.interleaved_bytes),
        )
        if size % mem.bank_bytes
    ]
    if not bad:
        return None
    return (
        f"found memory.bank_bytes = {mem.bank_bytes}, but {' and '.join(bad)}; expected "
        f"both regions to be whole numbers of banks; hint: a bank is 16 KiB on Mk1/Mk2"
    )


def _columns_problem(tile: TileConfig) -> str | None:
    """Why the tile layout has empty columns, or ``None``."""
    if tile.columns <= tile.tiles_per_ipu:
        return None
    return (
        f"found tile.columns = {tile.columns} with tile.tiles_per_ipu = {tile.tiles_per_ipu}; "
        f"expected at most {tile.tiles_per_ipu} columns (a column holds at least one tile)"
    )


def _total_tiles_problem(num_ipus: int, tile: TileConfig) -> str | None:
    """Why the machine has more tiles than can be simulated, or ``None``."""
    total = num_ipus * tile.tiles_per_ipu
    if total <= MAX_TOTAL_TILES:
        return None
    return (
        f"found num_ipus = {num_ipus} x tile.tiles_per_ipu = {tile.tiles_per_ipu} = {total:,} "
        f"tiles; expected at most {MAX_TOTAL_TILES:,} tiles over all IPUs (a 1024-IPU Mk2 "
        f"pod has 1,507,328)"
    )


def _transfer_problems(
    tile: TileConfig,
    memory: MemoryConfig | None,
    exchange: ExchangeConfig | None,
    host: HostConfig | None,
    links: LinksConfig | None,
) -> list[tuple[tuple[str, ...], str]]:
    """Transfers whose cycle counts would leave int64 headroom (field path, message).

    Exchanging a whole tile memory, the longest host copy (``host.max_copy_bytes`` at
    the host bandwidth) and moving a whole IPU's memory over one IPU-Link hop (or one
    GW-Link hop, when racks are set) must each take at most :data:`MAX_TRANSFER_CYCLES`,
    so that the sums of a run stay inside int64.
    """
    out: list[tuple[tuple[str, ...], str]] = []
    if memory is not None and exchange is not None:
        cycles = memory.tile_memory_bytes / exchange.bytes_per_cycle
        if cycles > MAX_TRANSFER_CYCLES:
            out.append(
                (
                    ("exchange", "bytes_per_cycle"),
                    f"found exchange.bytes_per_cycle = {exchange.bytes_per_cycle:g}: "
                    f"exchanging memory.tile_memory_bytes = {memory.tile_memory_bytes} would "
                    f"take {cycles:.3g} cycles; expected at most 2^48 cycles",
                )
            )
    if host is not None:
        cycles = host.max_copy_bytes / host.bandwidth_bytes_per_s * tile.clock_hz
        if cycles > MAX_TRANSFER_CYCLES:
            out.append(
                (
                    ("host", "bandwidth_bytes_per_s"),
                    f"found host.max_copy_bytes = {host.max_copy_bytes} at "
                    f"host.bandwidth_bytes_per_s = {host.bandwidth_bytes_per_s:g} and "
                    f"tile.clock_hz = {tile.clock_hz:g}: one copy would take {cycles:.3g} "
                    f"cycles; expected at most 2^48 cycles; hint: lower max_copy_bytes or "
                    f"raise the bandwidth",
                )
            )
    if memory is not None and links is not None:
        ipu_bytes = memory.tile_memory_bytes * tile.tiles_per_ipu
        per_cycle = links.bandwidth_bytes_per_s * links.links_between_neighbours
        cycles = ipu_bytes / per_cycle * tile.clock_hz
        if cycles > MAX_TRANSFER_CYCLES:
            out.append(
                (
                    ("links", "bandwidth_bytes_per_s"),
                    f"found links.bandwidth_bytes_per_s = {links.bandwidth_bytes_per_s:g}: "
                    f"moving one IPU's memory ({ipu_bytes:,} bytes = tile.tiles_per_ipu x "
                    f"memory.tile_memory_bytes) over a hop would take {cycles:.3g} cycles at "
                    f"tile.clock_hz = {tile.clock_hz:g}; expected at most 2^48 cycles",
                )
            )
        gw = links.gw_links
        cycles = ipu_bytes / (gw.bandwidth_bytes_per_s * gw.links_between_racks) * tile.clock_hz
        if gw.ipus_per_rack is not None and cycles > MAX_TRANSFER_CYCLES:
            out.append(
                (
                    ("links", "gw_links", "bandwidth_bytes_per_s"),
                    f"found links.gw_links.bandwidth_bytes_per_s = "
                    f"{gw.bandwidth_bytes_per_s:g}: moving one IPU's memory "
                    f"({ipu_bytes:,} bytes) over a GW-Link hop would take {cycles:.3g} "
                    f"cycles at tile.clock_hz = {tile.clock_hz:g}; expected at most 2^48 "
                    f"cycles",
                )
            )
    return out


def _topology_problems(num_ipus: int, links: LinksConfig) -> list[tuple[tuple[str, ...], str]]:
    """Why the IPU-Links or GW-Links cannot wire ``num_ipus`` IPUs (field path, message).

    Racks must be whole, a ladder needs two full columns, custom edges must name IPUs of
    a rack, and with routing on every IPU must reach every other.
    """
    out: list[tuple[tuple[str, ...], str]] = []
    gw = links.gw_links
    rack = num_ipus if gw.ipus_per_rack is None else min(gw.ipus_per_rack, num_ipus)
    per_rack = gw.ipus_per_rack
    if per_rack is not None and num_ipus > per_rack and num_ipus % per_rack:
        racks = -(-num_ipus // per_rack)
        out.append(
            (
                ("links", "gw_links", "ipus_per_rack"),
                f"found {per_rack} with num_ipus = {num_ipus}; expected racks of equal "
                f"size: num_ipus a multiple of ipus_per_rack; hint: num_ipus = "
                f"{(racks - 1) * per_rack} or {racks * per_rack}",
            )
        )
        return out
    if links.topology == "ladder" and rack > 1 and rack % 2:
        where = "num_ipus" if rack == num_ipus else "links.gw_links.ipus_per_rack"
        out.append(
            (
                ("links", "topology"),
                f"found 'ladder' with {rack} IPUs per rack ({where}); expected an even "
                f"number: a ladder has two columns, IPUs 2r and 2r + 1 forming rung r; "
                f"hint: use an even {where} or links.topology: ring",
            )
        )
    if links.topology == "custom":
        bad = [(a, b) for a, b in links.edges if max(a, b) >= rack]
        if bad:
            a, b = bad[0]
            out.append(
                (
                    ("links", "edges"),
                    f"found edge [{a}, {b}] with {rack} IPUs per rack; expected IPU ids "
                    f"0..{rack - 1} (edges name the IPUs of one rack, every rack is wired "
                    f"alike); hint: remove the edge or raise num_ipus",
                )
            )
    if out or not links.routing or links.topology != "custom" or num_ipus == 1:
        return out
    from ipusim.exchange.topology import components, wiring

    groups = components(wiring(num_ipus, links))
    if len(groups) > 1:
        shown = "; ".join(_show(sorted(g), 40) for g in groups[:3])
        more = f" and {len(groups) - 3} more" if len(groups) > 3 else ""
        out.append(
            (
                ("links", "edges"),
                f"found {len(links.edges)} edge(s) leaving the IPUs in {len(groups)} "
                f"unconnected groups ({shown}{more}); expected every IPU to reach every "
                f"other with links.routing: true; hint: add an edge joining the groups, or "
                f"set links.routing: false to allow copies between direct neighbours only",
            )
        )
    return out


def _cross_problems(
    num_ipus: int | None,
    tile: TileConfig | None,
    memory: MemoryConfig | None,
    exchange: ExchangeConfig | None,
    sync: SyncConfig | None,
    host: HostConfig | None,
    links: LinksConfig | None,
) -> list[tuple[tuple[str, ...], str]]:
    """Every problem between fields of the sections given (None: invalid on its own).

    Returns ``(field path, message)`` pairs; each message names both fields and values.
    """
    out: list[tuple[tuple[str, ...], str]] = []

    def add(path: tuple[str, ...], message: str | None) -> None:
        if message is not None:
            out.append((path, message))

    if memory is not None:
        regions = _memory_regions_problem(memory)
        add(("memory",), regions)
        if regions is None:  # one memory-layout problem at a time: the sum first
            add(("memory", "bank_bytes"), _banks_problem(memory))
    if tile is not None:
        add(("tile", "columns"), _columns_problem(tile))
        if num_ipus is not None:
            add(("num_ipus",), _total_tiles_problem(num_ipus, tile))
        if sync is not None:
            add(("sync", "controller_tile"), _controller_tile_problem(tile, sync))
        out += _transfer_problems(tile, memory, exchange, host, links)
    if links is not None and num_ipus is not None:
        out += _topology_problems(num_ipus, links)
    return out


# Presets --------------------------------------------------------------------------------
_YAML_SUFFIXES = (".yaml", ".yml")
_MAPPING_LABEL = "<mapping>"
_OVERRIDES_LABEL = "<overrides>"
_HASH_EXCLUDED = ("name", "description", "provenance")


def _preset_dirs() -> list[Path]:
    """Directories holding preset YAML files, most preferred first.

    An installed wheel carries the presets as ``ipusim/configs``; a source checkout
    (or an editable install) has them in ``configs/`` next to the package directory.
    The checkout's directory is used only beside ``pyproject.toml``, so that an unrelated
    ``configs/`` next to an installed package (in site-packages) is never read.
    """
    package_dir = Path(__file__).resolve().parent
    dirs = [package_dir / "configs"]
    if (package_dir.parent / "pyproject.toml").is_file():
        dirs.append(package_dir.parent / "configs")
    return [d for d in dirs if d.is_dir()]


def list_presets() -> list[str]:
    """Names of the preset machine configs (``mk1``, ``mk2``, ...), sorted."""
    names = {path.stem for directory in _preset_dirs() for path in directory.glob("*.yaml")}
    return sorted(names)


def preset_path(name: str) -> Path:
    """Path of the YAML file of preset ``name``.

    Raises
    ------
    ConfigError
        ``name`` is not a preset; the message lists the presets.
    """
    if name and "/" not in name and os.sep not in name:
        for directory in _preset_dirs():
            path = directory / f"{name}.yaml"
            if path.is_file():
                return path
    raise ConfigError([_unknown_preset(name, "preset")])


def _unknown_preset(name: object, where: str) -> str:
    presets = ", ".join(list_presets()) or "(none found)"
    return (
        f"{where}: unknown preset {name!r}; expected one of: {presets} "
        f"(or a path to a YAML file ending in .yaml)"
    )


# Reading and merging ----------------------------------------------------------------------
_Layer = tuple[str, dict[str, Any]]


def _looks_like_path(text: str) -> bool:
    return text.endswith(_YAML_SUFFIXES) or "/" in text or os.sep in text


def _show(value: Any, limit: int = 60) -> str:
    """Short ``repr`` of a value for an error line."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: Most nodes a YAML config may expand to, counting every alias as a copy of its anchor.
#: A preset has a few hundred; a "billion laughs" alias bomb has 10^9.
MAX_YAML_NODES = 100_000
#: Deepest nesting of mappings and lists in a YAML config (a preset nests 4 deep).
MAX_YAML_DEPTH = 64

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _YamlInputError(Exception):
    """A YAML document that parses but is refused (duplicate key, alias bomb, ...)."""

    def __init__(self, where: yaml.Mark | None, message: str) -> None:
        super().__init__(message)
        self.where = where
        self.message = message


def _mark_text(mark: yaml.Mark | None) -> str:
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"


def _check_nodes(root: yaml.Node) -> None:
    """Refuse duplicate keys, recursive aliases, deep nesting and alias bombs.

    Runs on the composed node graph, before any Python object is built: an alias is
    one shared node there, so the expanded size of the document (every alias counted as
    a full copy, memoised per node) is found in time linear in the file, and a bomb is
    refused without ever being expanded.
    """
    sizes: dict[int, int] = {}
    active: set[int] = set()

    def walk(node: yaml.Node, path: str, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise _YamlInputError(
                node.start_mark,
                f"{path or 'top level'}: an alias refers to a node that contains it "
                f"(a recursive structure); expected a tree of mappings, lists and values",
            )
        if depth > MAX_YAML_DEPTH:
            raise _YamlInputError(
                node.start_mark,
                f"{path or 'top level'}: nested more than {MAX_YAML_DEPTH} levels deep; "
                f"expected a machine config (a few levels of sections)",
            )
        active.add(key)
        size = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, yaml.Mark] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.tag != _MERGE_TAG:
                    name = (key_node.tag, key_node.value)
                    if name in seen:
                        where = f"{path}." if path else ""
                        raise _YamlInputError(
                            key_node.start_mark,
                            f"duplicate key '{where}{key_node.value}' (first at "
                            f"{_mark_text(seen[name])}); expected each key once per mapping "
                            f"(YAML would silently keep the last value); hint: delete or "
                            f"merge one of them",
                        )
                    seen[name] = key_node.start_mark
                child = f"{path}.{key_node.value}" if path else str(key_node.value)
                if not isinstance(key_node, yaml.ScalarNode):
                    child = f"{path}.<key>" if path else "<key>"
                size += walk(key_node, child, depth + 1) + walk(value_node, child, depth + 1)
        elif isinstance(node, yaml.SequenceNode):
            for index, item in enumerate(node.value):
                size += walk(item, f"{path}[{index}]", depth + 1)
        if size > MAX_YAML_NODES:
            raise _YamlInputError(
                node.start_mark,
                f"{path or 'top level'}: the document expands to more than "
                f"{MAX_YAML_NODES:,} values (aliases counted as copies: an alias bomb?); "
                f"expected a machine config (a preset has a few hundred values)",
            )
        active.discard(key)
        sizes[key] = size
        return size

    walk(root, "", 0)


def load_yaml_text(text: str, label: str) -> Any:
    """Parse YAML ``text`` like :func:`yaml.safe_load`, refusing what a config never holds.

    PyYAML silently keeps the last of two equal keys and expands aliases without limit;
    a config with either is almost certainly a mistake (or an attack), so both are
    refused, as are recursive aliases and nesting deeper than :data:`MAX_YAML_DEPTH`.

    Parameters
    ----------
    text
        The YAML document.
    label
        The file (or ``--set`` item) named in messages.

    Returns
    -------
    Any
        The parsed document (``None`` for an empty one).

    Raises
    ------
    yaml.YAMLError
        A YAML syntax error.
    ConfigError
        A duplicate key, an alias bomb, a recursive alias, too deep nesting or a number
        too long to read; the message names ``label``, the line and the key path.
    """
    loader = yaml.SafeLoader(text)
    try:
        try:
            node = loader.get_single_node()
        except RecursionError:
            raise ConfigError(
                [
                    f"{label}: nested too deeply to read; expected a machine config (a few "
                    f"levels of sections)"
                ]
            ) from None
        if node is None:
            return None
        try:
            _check_nodes(node)
        except _YamlInputError as exc:
            raise ConfigError([f"{label}: {_mark_text(exc.where)}: {exc.message}"]) from None
        try:
            return loader.construct_document(node)
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise ConfigError(
                [f"{label}: a value cannot be read ({exc}); expected a number of usual size"]
            ) from None
    finally:
        loader.dispose()


def _read_yaml(path: Path, label: str) -> dict[str, Any]:
    """Parse one YAML config file into a dict, or raise a one-problem ConfigError."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(
            [
                f"{label}: file not found; expected a YAML machine config or a preset name "
                f"({', '.join(list_presets())})"
            ]
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError([f"{label}: cannot read the file ({exc})"]) from None
    try:
        data = load_yaml_text(text, label)
    except yaml.YAMLError as exc:
        raise ConfigError([_yaml_problem(label, exc)]) from None
    if not isinstance(data, dict):
        found = "an empty file" if data is None else f"{_show(data)} ({type(data).__name__})"
        raise ConfigError(
            [
                f"{label}: top level: found {found}; expected a mapping of config sections "
                f"(name, tile, memory, exchange, sync, host, links, ...)"
            ]
        )
    return data


def _yaml_problem(label: str, exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "?"
    problem = getattr(exc, "problem", None) or str(exc)
    context = getattr(exc, "context", None)
    detail = f"{context}, {problem}" if context else problem
    return (
        f"{label}: {where}: YAML syntax error: {detail}; expected valid YAML "
        f"(check indentation, a ':' after each key and closed quotes/brackets)"
    )


def _extends_target(value: Any, base_dir: Path, label: str) -> tuple[Path, str]:
    """Resolve an ``extends`` value to a file path and a label for messages."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            [
                f"{label}: extends: found {_show(value)}; expected a preset name "
                f"({', '.join(list_presets())}) or a path to a YAML file"
            ]
        )
    if _looks_like_path(value):
        path = Path(value).expanduser()
        if not path.is_absolute():
            path = Path(os.path.normpath(base_dir / path))
        if not path.is_file():
            raise ConfigError(
                [
                    f"{label}: extends: found {value!r}, but {path} is not a file; expected a "
                    f"preset name or a path relative to the extending file"
                ]
            )
        return path, str(path)
    try:
        path = preset_path(value)
    except ConfigError:
        raise ConfigError([_unknown_preset(value, f"{label}: extends")]) from None
    return path, str(path)


def _resolve_layers(
    data: dict[str, Any], label: str, base_dir: Path, chain: list[tuple[Path, str]]
) -> list[_Layer]:
    """Follow the ``extends`` chain of ``data``; layers come back base first."""
    data = dict(data)
    if "extends" not in data:
        return [(label, data)]
    parent_path, parent_label = _extends_target(data.pop("extends"), base_dir, label)
    resolved = parent_path.resolve()
    for seen_path, _ in chain:
        if seen_path == resolved:
            names = [lbl for _, lbl in chain] + [parent_label]
            raise ConfigError(
                [
                    f"{label}: extends: cycle {' -> '.join(names)}; expected a chain of "
                    f"'extends' that ends in a file without 'extends'"
                ]
            )
    parent = _read_yaml(parent_path, parent_label)
    chain = [*chain, (resolved, parent_label)]
    return [*_resolve_layers(parent, parent_label, parent_path.parent, chain), (label, data)]


def _layers_from_source(source: str | os.PathLike[str] | Mapping[str, Any]) -> list[_Layer]:
    if isinstance(source, Mapping):
        data = copy.deepcopy(dict(source))
        return _resolve_layers(data, _MAPPING_LABEL, Path.cwd(), [])
    if isinstance(source, str) and not _looks_like_path(source):
        if source in list_presets():
            path = preset_path(source)
        elif Path(source).is_file():
            path = Path(source)
        else:
            raise ConfigError([_unknown_preset(source, "config")])
    elif isinstance(source, str | os.PathLike):
        path = Path(source)
    else:
        raise ConfigError(
            [
                f"config: found {_show(source)} ({type(source).__name__}); expected a preset "
                f"name, a path to a YAML file or a mapping"
            ]
        )
    label = str(path)
    data = _read_yaml(path, label)
    return _resolve_layers(data, label, path.parent, [(path.resolve(), label)])


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive merge: mappings merge key by key, anything else in ``over`` wins."""
    out = dict(base)
    for key, value in over.items():
        if key == "provenance":  # a record of one file's values: never mixed with a base's
            out[key] = copy.deepcopy(value)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge(dict(out[key]), value)
        else:
            out[key] = copy.deepcopy(value)
    return out


# The schema, for suggestions and dotted paths ---------------------------------------------
def _section_model(path: tuple[str, ...]) -> type[BaseModel] | None:
    """The pydantic model found at ``path`` below MachineConfig, or ``None``."""
    model: type[BaseModel] = MachineConfig
    for part in path:
        field = model.model_fields.get(part)
        if field is None:
            return None
        annotation = field.annotation
        if not (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
            return None
        model = annotation
    return model


def _all_leaf_paths() -> list[str]:
    """Every dotted field path of MachineConfig (``tile.clock_hz``, ``num_ipus``, ...)."""
    out: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{prefix}{name}.")
            else:
                out.append(f"{prefix}{name}")

    walk(MachineConfig, "")
    return out


def _suggest(path: tuple[str, ...], top_extra: tuple[str, ...] = ()) -> str:
    """A 'did you mean' hint for an unknown key at ``path`` (closest valid key)."""
    parent = path[:-1]
    model = _section_model(parent)
    siblings = list(model.model_fields) if model is not None else []
    if not parent:
        siblings += list(top_extra)
    match = difflib.get_close_matches(path[-1], siblings, n=1, cutoff=0.6)
    if match:
        return f"did you mean '{'.'.join((*parent, match[0]))}'?"
    leaves = _all_leaf_paths()
    same_name = [leaf for leaf in leaves if leaf.rsplit(".", 1)[-1] == path[-1]]
    match = same_name[:1] or difflib.get_close_matches(".".join(path), leaves, n=1, cutoff=0.6)
    if match:
        return f"did you mean '{match[0]}'?"
    where = f"'{'.'.join(parent)}'" if parent else "the top level"
    return f"valid keys of {where}: {', '.join(siblings)}"


def _field_description(path: tuple[str, ...]) -> str:
    model = _section_model(path[:-1])
    if model is None or not path:
        return ""
    field = model.model_fields.get(path[-1])
    if field is None:
        return ""
    return field.description or ""


# Validation with readable problems ----------------------------------------------------------
_MISSING = object()


def _origin(layers: list[_Layer], path: tuple[str, ...]) -> str:
    """Label of the most derived layer that sets ``path`` (or a parent of it)."""
    for label, data in reversed(layers):
        node: Any = data
        for part in path:
            if not isinstance(node, Mapping):
                break
            if part not in node:
                node = _MISSING
                break
            node = node[part]
        if node is not _MISSING:
            return label
    return layers[-1][0]


def _problem_line(layers: list[_Layer], error: Mapping[str, Any]) -> str:
    path = tuple(str(part) for part in error["loc"])
    dotted = ".".join(path) or "top level"
    label = _origin(layers, path)
    kind = error["type"]
    value = error.get("input")
    description = _field_description(path)
    hint = f" ({dotted}: {description})" if description else ""
    if kind == "extra_forbidden":
        return (
            f"{label}: {dotted}: unknown key (found with value {_show(value)}); "
            f"{_suggest(path, ('extends',))}"
        )
    if kind == "missing":
        return f"{label}: {dotted}: missing required field; expected a value{hint}"
    message = str(error["msg"])
    if kind == "value_error":
        message = message.removeprefix("Value error, ")
        return f"{label}: {dotted}: {message}{hint}"
    message = message[:1].lower() + message[1:]
    return f"{label}: {dotted}: found {_show(value)}; {message}{hint}"


def _cross_check_lines(layers: list[_Layer], data: Mapping[str, Any]) -> list[str]:
    """Cross-section problems, for every section that is valid on its own."""

    def section(name: str, model: type[BaseModel]) -> Any:
        raw = data.get(name, {})
        try:
            return model.model_validate(raw)
        except ValidationError:
            return None

    num_ipus = data.get("num_ipus", 1)
    if isinstance(num_ipus, bool) or not isinstance(num_ipus, int) or num_ipus < 1:
        num_ipus = None
    problems = _cross_problems(
        num_ipus,
        section("tile", TileConfig),
        section("memory", MemoryConfig),
        section("exchange", ExchangeConfig),
        section("sync", SyncConfig),
        section("host", HostConfig),
        section("links", LinksConfig),
    )
    return [f"{_origin(layers, path)}: {'.'.join(path)}: {msg}" for path, msg in problems]


def _validate(layers: list[_Layer], problems: list[str] | None = None) -> MachineConfig:
    """Merge ``layers`` (base first) and validate; ``problems`` found earlier are added."""
    problems = list(problems or [])
    data: dict[str, Any] = {}
    for _, layer in layers:
        data = _merge(data, layer)
    try:
        cfg = MachineConfig.model_validate(data)
    except ValidationError as exc:
        found = [_problem_line(layers, err) for err in exc.errors() if err["loc"]]
        found += _cross_check_lines(layers, data)
        if not found:  # pragma: no cover - every root-level error is a cross check
            found = [f"{layers[-1][0]}: {err['msg']}" for err in exc.errors()]
        problems += found
    else:
        if not problems:
            return cfg
    source = next((label for label, _ in reversed(layers) if label != _OVERRIDES_LABEL), "")
    raise ConfigError(problems, header=f"invalid machine config {source}".rstrip())


def _overrides_layer(overrides: Mapping[str, Any]) -> tuple[_Layer, list[str]]:
    """A layer from dotted-path overrides, and one problem per unknown path."""
    leaves = set(_all_leaf_paths())
    problems = []
    nested: dict[str, Any] = {}
    for key, value in overrides.items():
        path = tuple(str(key).split("."))
        if ".".join(path) not in leaves and _section_model(path) is None:
            problems.append(
                f"{_OVERRIDES_LABEL}: {key}: unknown config path (found with value "
                f"{_show(value)}); {_suggest(path)}"
            )
            continue
        for part in reversed(path):
            value = {part: value}
        nested = _merge(nested, value)
    return (_OVERRIDES_LABEL, nested), problems


# Public API ---------------------------------------------------------------------------------
def load_config(
    source: str | os.PathLike[str] | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
) -> MachineConfig:
    """Load and validate a machine config.

    Parameters
    ----------
    source
        A preset name (``"mk2"``, see :func:`list_presets`), a path to a YAML file, or a
        mapping with the same content. ``extends: <preset or path>`` (a path relative to
        the extending file, or to the working directory for a mapping) merges the file
        over its base recursively, the extending file winning; chains are allowed.
    overrides
        Dotted paths and values, applied after ``extends``:
        ``{"sync.min_sync_delay_cycles": 0, "num_ipus": 2}``.

    Returns
    -------
    MachineConfig
        The frozen, validated config.

    Raises
    ------
    ConfigError
        Every problem found, one line each naming the file (or ``<mapping>``), the
        field path, the value found and what was expected.
    """
    layers = _layers_from_source(source)
    problems: list[str] = []
    if overrides:
        layer, problems = _overrides_layer(overrides)
        layers.append(layer)
    return _validate(layers, problems)


def with_overrides(cfg: MachineConfig, overrides: Mapping[str, Any]) -> MachineConfig:
    """A copy of ``cfg`` with dotted-path ``overrides`` applied and everything re-validated.

    Raises
    ------
    ConfigError
        An override path is unknown (the message names the closest valid path) or a
        value is invalid.
    """
    base = cfg.model_dump(mode="python")
    layers: list[_Layer] = [(f"<config {cfg.name!r}>", base)]
    layer, problems = _overrides_layer(overrides)
    layers.append(layer)
    return _validate(layers, problems)


def config_hash(cfg: MachineConfig) -> str:
    """Content hash of a config: 16 hex digits of the SHA-256 of its canonical JSON.

    ``name`` and ``description`` are left out: they label a machine but change no
    simulated number, so two configs with the same values share a hash.
    """
    values = cfg.model_dump(mode="json", exclude=set(_HASH_EXCLUDED))
    canonical = json.dumps(values, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def config_to_yaml(cfg: MachineConfig) -> str:
    """The resolved config as YAML (base units, model field order); loads back equal."""
    return yaml.safe_dump(
        cfg.model_dump(mode="json"), sort_keys=False, allow_unicode=True, width=100
    )
