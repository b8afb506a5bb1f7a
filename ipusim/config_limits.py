"""Limits of a machine config: the physical bounds of its fields and the checks between sections.

The bounds are far outside any real machine, so no plausible config is refused, yet
tight enough that every derived integer stays inside int64. The cross checks find
problems no single section can see (memory regions that do not add up, a sync
controller off the chip, transfers too long to count, links that leave IPUs unreachable);
they run when a :class:`~ipusim.config.MachineConfig` is built and, section by section,
when a bad file is reported.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ipusim.errors import short_repr as _show

if TYPE_CHECKING:  # the sections call the checks below, so they are named for annotations only
    from ipusim.config_sections import (
        ExchangeConfig,
        HostConfig,
        LinksConfig,
        MemoryConfig,
        SyncConfig,
        TileConfig,
    )

__all__ = [
    "MAX_BYTES_PER_S",
    "MAX_CLOCK_HZ",
    "MAX_COPY_BYTES",
    "MAX_CYCLES",
    "MAX_SECONDS",
    "MAX_TILE_MEMORY_BYTES",
    "MAX_TOTAL_TILES",
    "MAX_TRANSFER_CYCLES",
    "MIN_BYTES_PER_S",
    "MIN_CLOCK_HZ",
    "cross_problems",
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
        f"both regions to be whole numbers of banks; hint: the Mk1 and Mk2 presets' bank is "
        f"16 KiB"
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
        # the slowest IPU-Link hop: a card's hop may have fewer links than the others
        fewest = min(links.links_between_neighbours, links.links_within_card or 64)
        per_cycle = links.bandwidth_bytes_per_s * fewest
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


def _sync_placement_problem(sync: SyncConfig, links: LinksConfig | None) -> str | None:
    """Why the chassis of ``sync.ipus_per_chassis`` IPUs cannot hold whole cards or fill
    whole racks (the external sync's path by placement, :mod:`ipusim.sync.placement`)."""
    chassis = sync.ipus_per_chassis
    if chassis is None:
        return None
    card = sync.ipus_per_card
    if chassis % card:
        return (
            f"found {chassis} with sync.ipus_per_card = {card}; expected a multiple of "
            f"ipus_per_card (a chassis holds whole cards); hint: sync.ipus_per_card = 2 "
            f"or 4 with 4 IPUs per IPU-M2000 or Bow-2000"
        )
    rack = None if links is None else links.gw_links.ipus_per_rack
    if rack is not None and rack % chassis:
        return (
            f"found {chassis} with links.gw_links.ipus_per_rack = {rack}; expected a "
            f"divisor of ipus_per_rack (a rack holds whole chassis); hint: 4 IPUs per "
            f"IPU-M2000 or Bow-2000"
        )
    return None


def cross_problems(
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
    if sync is not None:
        add(("sync", "ipus_per_chassis"), _sync_placement_problem(sync, links))
    if links is not None and num_ipus is not None:
        out += _topology_problems(num_ipus, links)
    return out
