"""The sections of a machine config: frozen pydantic models, one per hardware component.

Every field is typed, ranged (:mod:`ipusim.config_limits`) and documented, with its unit
in its name; quantities may be written with units ("624 KiB", "1.33 GHz", see
:mod:`ipusim.units`). :class:`MachineConfig` joins the sections and runs the checks
between them. The dotted-path helpers at the end (:func:`leaf_paths`,
:func:`section_model`, :func:`suggest_path`) let overrides, sweeps and calibration name
fields the way a YAML file does.
"""

from __future__ import annotations

import difflib
import functools
import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from ipusim.config_base import Section as _Section
from ipusim.config_code import CodeConfig
from ipusim.config_host import HostConfig
from ipusim.config_limits import (
    MAX_BYTES_PER_S,
    MAX_CLOCK_HZ,
    MAX_CYCLES,
    MAX_SECONDS,
    MAX_TILE_MEMORY_BYTES,
    MIN_BYTES_PER_S,
    MIN_CLOCK_HZ,
    cross_problems,
)
from ipusim.config_software import SoftwareConfig
from ipusim.errors import short_repr as _show
from ipusim.units import Bytes, BytesPerSecond, Hertz, Seconds

__all__ = [
    "CodeConfig",
    "CountedConfig",
    "ExchangeConfig",
    "GWLinksConfig",
    "HostConfig",
    "LinksConfig",
    "MachineConfig",
    "MemoryConfig",
    "RemoteConfig",
    "SimConfig",
    "SoftwareConfig",
    "SyncConfig",
    "TileConfig",
    "field_description",
    "leaf_paths",
    "section_model",
    "suggest_path",
]


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
    bank_conflicts: bool = Field(
        default=False,
        description="Charge the bank conflicts of counted ld2x64pace/ld2xst64pace from "
        "where memory placement put the data they read and write (docs/machine.md).",
    )

    @model_serializer(mode="wrap")
    def _without_default_switch(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Dumps leave ``bank_conflicts`` out while it is off, so configs that never set
        it keep their content hash."""
        values = handler(self)
        if isinstance(values, dict) and not values.get("bank_conflicts", False):
            values.pop("bank_conflicts", None)
        return values

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
    ipus_per_card: int = Field(
        default=2,
        ge=1,
        le=65536,
        description="Consecutive IPUs behind one sync hop (a card); the cards of a chassis "
        "are chained (ipusim.sync.placement).",
    )
    ipus_per_chassis: int | None = Field(
        default=None,
        ge=1,
        le=65536,
        description="Consecutive IPUs per chassis (IPU-Machine), chained by Sync-Links: "
        "whole cards (a multiple of ipus_per_card), a divisor of "
        "links.gw_links.ipus_per_rack; None: one chassis per rack.",
    )
    chassis_hop_ns: float | None = Field(
        default=None,
        ge=0,
        le=1e9,
        description="Sync latency of one hop between chassis; None: global_sync_ns_per_hop.",
    )
    host_sync_cycles: int = Field(
        default=0, ge=0, le=MAX_CYCLES, description="Extra cycles of a host sync; at most 2^40."
    )
    model: str = Field(
        default="controller",
        description="Sync timing component (ipusim.timing.components('sync')).",
    )

    @model_serializer(mode="wrap")
    def _without_default_placement(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Dumps leave the placement fields out while they hold their defaults, so
        configs that never set them keep their content hash."""
        values = handler(self)
        if isinstance(values, dict):
            for name, default in _SYNC_PLACEMENT.items():
                if values.get(name, default) == default:
                    values.pop(name, None)
        return values


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
    links_within_card: int | None = Field(
        default=None,
        ge=1,
        le=64,
        description="Parallel links of the hop joining the two IPUs of a card (IPUs 2k "
        "and 2k + 1, Poplibs' pairing), at most 64; null: links_between_neighbours.",
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
    message_overhead_bytes: int = Field(
        default=0,
        ge=0,
        le=1 << 20,
        description="Link capacity one message (a tile-to-tile transfer of a global "
        "exchange) takes on every hop beyond its payload: packet headers and the gap "
        "between messages, in bytes; at most 1 MiB.",
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

    @model_serializer(mode="wrap")
    def _without_default_card_links(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Dumps leave ``links_within_card`` out while it is unset, so configs that never
        set it keep their content hash."""
        values = handler(self)
        if isinstance(values, dict) and values.get("links_within_card") is None:
            values.pop("links_within_card", None)
        return values

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


def _issue(default: float, what: str) -> Any:
    """A counted-execution cost: thread cycles one operation of a class takes."""
    return Field(default=default, ge=0.0, le=10_000.0, description=f"Thread cycles per {what}.")


class CountedConfig(_Section):
    """Counted execution: what the operations a vertex's kernel executes cost on a
    worker context (docs/counted_cycles.md).

    Every ``*_cycles`` field is the issue cost, in *thread* cycles (a worker context
    issues once every ``tile.worker_contexts`` tile cycles), of one operation of its
    class. Operations are split over the worker's two pipelines: the main one
    (integer, load/store, control) and the floating-point one; ``pairing`` is the
    fraction of the shorter pipeline's instructions that issue in the same cycle as
    an instruction of the other (a 64-bit instruction bundle). The defaults are the
    Colossus worker issue rules (one instruction per thread cycle, grade A), estimates
    where no figure is published, and ``pairing`` and ``float_div_cycles`` fitted with
    ``ipusim.calibrate`` (docs/counted_cycles.md); the presets of every generation use
    them (the worker ISA is the same on ipu1, ipu2 and ipu21).
    """

    load_narrow_cycles: float = _issue(1.0, "8- or 16-bit load (ldz8, ldz16)")
    load_32_cycles: float = _issue(1.0, "32-bit load (ld32)")
    load_64_cycles: float = _issue(1.0, "64-bit load (ld64)")
    store_narrow_cycles: float = _issue(
        3.0, "8- or 16-bit store (estimate: read-modify-write of a 32-bit word)"
    )
    store_32_cycles: float = _issue(1.0, "32-bit store (st32)")
    store_64_cycles: float = _issue(1.0, "64-bit store (st64)")
    int_alu_cycles: float = _issue(1.0, "integer add, subtract, logic or shift")
    int_mul_cycles: float = _issue(1.0, "integer multiply (mul)")
    int_div_cycles: float = _issue(
        30.0, "integer divide or modulo (estimate: no divider, a library routine)"
    )
    int_compare_cycles: float = _issue(1.0, "integer compare (cmpeq, cmpslt, ...)")
    float_arith_cycles: float = _issue(1.0, "float32 add, subtract or multiply (f32add, ...)")
    half_arith_cycles: float = _issue(1.0, "float16 add, subtract or multiply")
    double_arith_cycles: float = _issue(
        1.0,
        "float64 operation (estimate: priced as the float the C++ codelet would use; "
        "the IPU has no fp64 hardware)",
    )
    float_div_cycles: float = _issue(
        7.496,
        "float divide (estimate: fitted, docs/counted_cycles.md: the D pi loop; Poplibs' "
        "vectorised divide estimator has 10 cycles per 2 floats)",
    )
    load_2x64_cycles: float = _issue(
        1.0, "dual 64-bit load from two addresses in one instruction (ld2x64pace)"
    )
    load_2x64_store_64_cycles: float = _issue(
        1.0, "dual 64-bit load and a 64-bit store in one instruction (ld2xst64pace)"
    )
    float2_arith_cycles: float = _issue(
        1.0, "two-float vector operation (f32v2add, f32v2axpy, ...)"
    )
    half4_arith_cycles: float = _issue(1.0, "four-half vector operation (f16v4add, f16v4mul, ...)")
    rpt_cycles: float = _issue(
        1.0, "rpt (hardware repeat loop set-up; its iterations cost nothing more)"
    )
    float_compare_cycles: float = _issue(1.0, "float compare (f32cmplt, ...)")
    convert_cycles: float = _issue(1.0, "integer/float conversion (f32toi32, ...)")
    branch_cycles: float = _issue(1.0, "conditional branch (brz, brnz, brnzdec)")
    loop_backedge_cycles: float = _issue(
        1.0, "iteration of a counted loop (brnzdec: decrement, test and branch back)"
    )
    math_call_cycles: float = _issue(
        6.0, "transcendental (exp, log, tanh, sqrt; estimate from Poplibs' exp/tanh estimators)"
    )
    call_cycles: float = _issue(10.0, "call of a separately compiled function (estimate)")
    array_op_cycles: float = _issue(
        1.0, "whole-array expression in a kernel (estimate: counted once, not per element)"
    )
    pairing: float = Field(
        default=0.496,
        ge=0.0,
        le=1.0,
        description="Fraction of the shorter pipeline's instructions bundled with the other "
        "pipeline's (0: single issue, 1: perfect dual issue; estimate: fitted, "
        "docs/counted_cycles.md: tutorial 7's hardware compute).",
    )
    worker_entry_cycles: float = Field(
        default=6.0,
        ge=0.0,
        le=1_000_000.0,
        description="Thread cycles of a worker vertex's entry and exit (estimate: loading "
        "the field pointers from vertex state, the return).",
    )
    supervisor_cycles: float = Field(
        default=11.0,
        ge=0.0,
        le=1_000_000.0,
        description="Tile cycles a multi-vertex's supervisor adds to its slowest worker "
        "times the contexts (A: Poplibs' basic supervisor overhead, 11 cycles).",
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
    software: SoftwareConfig = SoftwareConfig()
    counted: CountedConfig = CountedConfig()
    provenance: dict[str, Any] | None = Field(
        default=None,
        description="Where the values came from (written by ipusim calibrate); no effect.",
    )

    @model_validator(mode="after")
    def _cross_checks(self) -> MachineConfig:
        problems = cross_problems(
            self.num_ipus, self.tile, self.memory, self.exchange, self.sync, self.host, self.links
        )
        if problems:
            raise ValueError("; ".join(f"{'.'.join(path)}: {msg}" for path, msg in problems))
        return self

    @model_serializer(mode="wrap")
    def _without_default_counted(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Dumps leave ``counted`` and ``software`` out while they hold the defaults, so
        configs that never set them keep their content hash."""
        values = handler(self)
        if isinstance(values, dict) and self.counted == _DEFAULT_COUNTED:
            values.pop("counted", None)
        if isinstance(values, dict) and self.software == SoftwareConfig():
            values.pop("software", None)
        return values

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
    def card_link_bytes_per_cycle(self) -> float | None:
        """Bandwidth of the IPU-Link hop joining the two IPUs of a card (all its parallel
        links, one direction) in bytes per cycle; None: as any other hop
        (:attr:`link_bytes_per_cycle`)."""
        links = self.links
        if links.links_within_card is None:
            return None
        return links.bandwidth_bytes_per_s * links.links_within_card / self.tile.clock_hz

    @property
    def global_sync_cycles(self) -> int:
        """Extra cycles of an external sync of every IPU: the config value or the path
        of the sync by placement (:mod:`ipusim.sync.placement`)."""
        from ipusim.sync.placement import external_sync_cycles

        return external_sync_cycles(self)


_DEFAULT_COUNTED = CountedConfig()
#: The sync fields of the placement path (ipusim.sync.placement) and their defaults.
_SYNC_PLACEMENT = {"ipus_per_card": 2, "ipus_per_chassis": None, "chassis_hop_ns": None}


# The schema, for suggestions and dotted paths ---------------------------------------------
def section_model(path: tuple[str, ...]) -> type[BaseModel] | None:
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


def leaf_paths() -> list[str]:
    """Every dotted field path of MachineConfig (``tile.clock_hz``, ``num_ipus``, ...)."""
    return list(_leaf_paths())


@functools.cache
def _leaf_paths() -> tuple[str, ...]:
    """The leaf paths, walked once per process (the models do not change)."""
    out: list[str] = []

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                walk(annotation, f"{prefix}{name}.")
            else:
                out.append(f"{prefix}{name}")

    walk(MachineConfig, "")
    return tuple(out)


def suggest_path(path: tuple[str, ...], top_extra: tuple[str, ...] = ()) -> str:
    """A 'did you mean' hint for an unknown key at ``path`` (closest valid key); a path
    naming a section, or going on past a field or an unknown section, says so."""
    name = ".".join(path)
    if path and section_model(path) is not None:
        fields = [leaf for leaf in leaf_paths() if leaf.startswith(name + ".")]
        more = ", ..." if len(fields) > 6 else ""
        return f"'{name}' is a section, not a field; its fields: {', '.join(fields[:6])}{more}"
    known = next(k for k in range(len(path) - 1, -1, -1) if section_model(path[:k]) is not None)
    if known < len(path) - 1:  # path[known] is not a section: the first part in error
        head = ".".join(path[: known + 1])
        if head in leaf_paths():
            return f"'{head}' is a field, not a section: it has no key '{path[known + 1]}'"
        return f"no section '{head}'; " + suggest_path(path[: known + 1], top_extra)
    parent = path[:-1]
    model = section_model(parent)
    siblings = list(model.model_fields) if model is not None else []
    if not parent:
        siblings += list(top_extra)
    match = difflib.get_close_matches(path[-1], siblings, n=1, cutoff=0.6)
    if match:
        return f"did you mean '{'.'.join((*parent, match[0]))}'?"
    leaves = leaf_paths()
    same_name = [leaf for leaf in leaves if leaf.rsplit(".", 1)[-1] == path[-1]]
    match = same_name[:1] or difflib.get_close_matches(".".join(path), leaves, n=1, cutoff=0.6)
    if match:
        return f"did you mean '{match[0]}'?"
    where = f"'{'.'.join(parent)}'" if parent else "the top level"
    return f"valid keys of {where}: {', '.join(siblings)}"


def field_description(path: tuple[str, ...]) -> str:
    model = section_model(path[:-1])
    if model is None or not path:
        return ""
    field = model.model_fields.get(path[-1])
    if field is None:
        return ""
    return field.description or ""
