"""No inert knob: every timing field of the machine config changes the cycles of a
program that exercises it.

Every field of :class:`ipusim.config.MachineConfig` is either listed in ``KNOBS`` with a
program and two values, or in ``NOT_TIMING`` with the reason it cannot change a cycle
count (a size that only decides where data is placed, a name, a simulation setting, a
component selector with one implementation). A field added to the config and listed in
neither makes ``test_every_field_is_classified`` fail, so a new knob cannot be inert
without anyone noticing.

For each knob the program runs on the ``tiny`` machine (or a few IPUs of it) with the
two values, and the cycles (the total and every phase's sum) must differ: being read is
not enough.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.config_sections import CountedConfig, leaf_paths
from ipusim.machine import Machine
from ipusim.tile.banks import PlacedData
from ipusim.tile.counted import OP_CLASSES, CountedCompute, CountedExecution, CountedPart

# ----------------------------------------------------------------------- programs


def superstep() -> ir.Node:
    """Compute (worker and multi-vertices), an internal sync, an exchange.

    The exchange sends 100 bytes from tile 0 to tile 7 (layout distance 4 in two
    columns), and tiles 4 and 6 each broadcast 200 bytes to the tile pair (2, 3): the
    pair's receive side is the slowest part unless the pair shares its bus.
    """
    compute = ir.Compute(
        name="cs",
        vertex_tile=[0] * 7 + [1, 5],
        vertex_cycles=[10] * 7 + [30, 50],
        vertex_multi=[False] * 8 + [True],
    )
    exchange = ir.Exchange(
        name="ex",
        src_tile=[0, 4, 4, 6, 6],
        dst_tile=[7, 2, 3, 2, 3],
        num_bytes=[100, 200, 200, 200, 200],
        message=[0, 1, 1, 2, 2],
    )
    return ir.Sequence([compute, ir.Sync(name="sync", sync_kind="internal"), exchange])


def external_sync() -> ir.Node:
    """Uneven compute on two IPUs, then an external sync of both."""
    compute = ir.Compute(name="cs", vertex_tile=[0, 9], vertex_cycles=[10, 40])
    return ir.Sequence([compute, ir.Sync(name="ext", sync_kind="external")])


def host_sync() -> ir.Node:
    return ir.Sequence([ir.Sync(name="host", sync_kind="host")])


def stream_copies() -> ir.Node:
    """Each of two IPUs copies 128 KiB from the host at the same time, 16 KiB to each
    tile (so the host link, not the tiles' exchange ports, sets the time)."""
    copy = ir.StreamCopy(
        name="in",
        direction="host_to_device",
        tile=np.arange(16),
        num_bytes=np.full(16, 16384),
        stream="s",
    )
    return ir.Sequence([ir.Sync(name="host", sync_kind="host"), copy])


def remote_copy() -> ir.Node:
    copy = ir.RemoteBufferCopy(
        name="rb", direction="host_to_device", tile=[0], num_bytes=[65536], stream="rb"
    )
    return ir.Sequence([copy])


def global_exchange(src_ipu: int, dst_ipu: int) -> Callable[[], ir.Node]:
    """1 MiB from the 8 tiles of one IPU to the 8 tiles of another, 128 KiB per tile
    (so the links, not the tiles' exchange ports, set the time)."""

    def program() -> ir.Node:
        tiles = np.arange(8)
        return ir.Sequence(
            [
                ir.GlobalExchange(
                    name="gx",
                    src_tile=8 * src_ipu + tiles,
                    dst_tile=8 * dst_ipu + tiles,
                    num_bytes=np.full(8, 1 << 17),
                )
            ]
        )

    return program


def all_reduce() -> ir.Node:
    return ir.Sequence(
        [ir.Collective(name="ar", op="all_reduce", groups=((0, 1),), num_bytes=(1 << 16,))]
    )


def global_fan_out() -> ir.Node:
    """Tile 0 of IPU 0 sends 64 messages of 64 B to the tiles of IPU 1: the sending
    tile, not the link, sets the time."""
    return ir.Sequence(
        [
            ir.GlobalExchange(
                name="gx",
                src_tile=np.zeros(64, np.int64),
                dst_tile=8 + np.arange(64) % 8,
                num_bytes=np.full(64, 64),
            )
        ]
    )


def spread_all_reduce() -> ir.Node:
    """An all-reduce of 64 KiB held by all 8 tiles of each member (8 messages per ring
    transfer): the links, not the tiles, set the time."""
    return ir.Sequence(
        [
            ir.Collective(
                name="ar",
                op="all_reduce",
                groups=((0, 1),),
                num_bytes=(1 << 16,),
                max_tile_bytes=(1 << 13,),
                member_tiles=(8,),
            )
        ]
    )


def counted_compute() -> ir.Node:
    """A counted compute set: a worker vertex whose kernel ran one block of one
    operation of every priced class 100 times (not an ``rpt`` body, no ``delay``), and
    a multi-vertex of two such workers."""
    profile = np.ones((1, len(OP_CLASSES)), np.int64)
    for marker in ("rpt_body", "delay"):
        if marker in OP_CLASSES:
            profile[0, OP_CLASSES.index(marker)] = 0
    worker = CountedPart.of(np.array([0]), "worker", 1, profile, np.array([[100]]))
    multi = CountedPart.of(np.array([1]), "multi", 2, profile, np.array([[100], [50]]))
    step = CountedCompute(
        name="counted",
        vertex_tile=[0, 1],
        vertex_cycles=[0, 0],
        vertex_multi=[False, True],
    )
    step.counted.put(CountedExecution(static=np.zeros(2, np.int64), parts=(worker, multi)))
    return ir.Sequence([step])


def counted_loads() -> ir.Node:
    """A counted multi-vertex whose six workers each ran 100 64-bit loads: 4,800 bytes
    loaded in about 650 tile cycles of issue."""
    profile = np.zeros((1, len(OP_CLASSES)), np.int64)
    profile[0, OP_CLASSES.index("load_64")] = 1
    part = CountedPart.of(np.array([0]), "multi", 6, profile, np.full((6, 1), 100))
    step = CountedCompute(name="loads", vertex_tile=[0], vertex_cycles=[0], vertex_multi=[True])
    step.counted.put(CountedExecution(static=np.zeros(1, np.int64), parts=(part,)))
    return ir.Sequence([step])


def counted_dual_loads() -> ir.Node:
    """A counted multi-vertex whose six workers each ran 100 ``ld2x64pace``, reading a
    32 KiB block that memory placement put at the start of the interleaved region: one
    element of two 16 KiB banks on ``tiny``, or two elements of four 8 KiB banks."""
    profile = np.zeros((1, len(OP_CLASSES)), np.int64)
    profile[0, OP_CLASSES.index("load_2x64")] = 1
    part = CountedPart.of(np.array([0]), "multi", 6, profile, np.full((6, 1), 100))
    step = CountedCompute(name="dual", vertex_tile=[0], vertex_cycles=[0], vertex_multi=[True])
    step.counted.put(CountedExecution(static=np.zeros(1, np.int64), parts=(part,)))
    one = np.ones(1, np.int64)
    step.placement.data = PlacedData(0 * one, one, 0 * one, one << 15, one << 15, 0 * one)
    return ir.Sequence([step])


# --------------------------------------------------------------------- the knobs


@dataclass(frozen=True)
class Knob:
    """A program and two values of one field whose cycles must differ."""

    program: Callable[[], ir.Node]
    values: tuple[Any, Any]
    base: dict[str, Any] = field(default_factory=dict)


TWO = {"num_ipus": 2}
LADDER8 = {"num_ipus": 8, "links.topology": "ladder"}
RACKS = {"num_ipus": 8, "links.gw_links.ipus_per_rack": 4, "links.topology": "line"}
CUSTOM = {"num_ipus": 4, "links.topology": "custom"}

KNOBS: dict[str, Knob] = {
    "num_ipus": Knob(external_sync, (2, 8)),
    "tile.tiles_per_ipu": Knob(superstep, (8, 16)),
    "tile.clock_hz": Knob(stream_copies, (1.33e9, 1.85e9), TWO),
    "tile.worker_contexts": Knob(superstep, (6, 4)),
    "tile.vertex_launch_cycles": Knob(superstep, (0, 7)),
    "tile.multi_vertex_launch_cycles": Knob(superstep, (0, 44)),
    "tile.columns": Knob(superstep, (2, 1), {"exchange.cycles_per_hop": 3.0}),
    "memory.load_bytes_per_cycle": Knob(counted_loads, (16, 1)),
    "memory.store_bytes_per_cycle": Knob(all_reduce, (8, 1), TWO),
    "memory.bank_conflicts": Knob(counted_dual_loads, (False, True)),
    "memory.bank_bytes": Knob(counted_dual_loads, (16384, 8192), {"memory.bank_conflicts": True}),
    "exchange.bytes_per_cycle": Knob(superstep, (4, 8)),
    "exchange.fixed_latency_cycles": Knob(superstep, (0, 100)),
    "exchange.cycles_per_hop": Knob(superstep, (0.0, 3.0)),
    "exchange.cycles_per_message": Knob(superstep, (0.0, 2.28)),
    "exchange.tiles_per_shared_bus": Knob(superstep, (1, 2)),
    "exchange.model": Knob(superstep, ("static", "phase")),
    "sync.min_sync_delay_cycles": Knob(superstep, (15, 0)),
    "sync.relative_delay": Knob(superstep, ("auto", "none")),
    "sync.max_relative_delay_cycles": Knob(superstep, (111, 0)),
    "sync.controller_tile": Knob(superstep, (0, 2)),
    "sync.global_sync_cycles": Knob(external_sync, (None, 600), TWO),
    "sync.global_sync_ns_per_hop": Knob(external_sync, (15.0, 30.0), TWO),
    "sync.ipus_per_card": Knob(external_sync, (2, 8), {"num_ipus": 8}),
    "sync.ipus_per_chassis": Knob(
        external_sync, (None, 4), {"num_ipus": 8, "sync.chassis_hop_ns": 100.0}
    ),
    "sync.chassis_hop_ns": Knob(
        external_sync, (None, 100.0), {"num_ipus": 8, "sync.ipus_per_chassis": 4}
    ),
    "sync.host_sync_cycles": Knob(host_sync, (0, 372)),
    "host.bandwidth_bytes_per_s": Knob(stream_copies, (20e9, 8e9), TWO),
    "host.latency_s": Knob(stream_copies, (0.0, 2e-6), TWO),
    "host.ipus_per_link": Knob(stream_copies, (None, 1), TWO),
    "host.copy_begin_s": Knob(stream_copies, (0.0, 60e-6), TWO),
    "host.copy_end_s": Knob(stream_copies, (0.0, 60e-6), TWO),
    "host.prepare_bandwidth_bytes_per_s": Knob(stream_copies, (None, 2e9), TWO),
    "links.bandwidth_bytes_per_s": Knob(global_exchange(0, 1), (14.6e9, 64e9), TWO),
    "links.links_between_neighbours": Knob(global_exchange(0, 1), (1, 2), TWO),
    "links.links_within_card": Knob(global_exchange(0, 1), (None, 4), TWO),
    "links.topology": Knob(global_exchange(0, 2), ("ring", "full"), {"num_ipus": 4}),
    "links.hop_latency_cycles": Knob(global_exchange(0, 1), (0, 100), TWO),
    "links.message_overhead_bytes": Knob(global_exchange(0, 1), (0, 4096), TWO),
    "links.torus": Knob(global_exchange(0, 6), (False, True), LADDER8),
    "links.edges": Knob(
        global_exchange(0, 2), (((0, 1), (1, 2), (2, 3)), ((0, 2), (0, 1), (2, 3))), CUSTOM
    ),
    "links.gw_links.ipus_per_gateway": Knob(global_exchange(1, 5), (4, 1), RACKS),
    "links.gw_links.topology": Knob(
        global_exchange(0, 8),
        ("ring", "line"),
        {**RACKS, "num_ipus": 12, "links.gw_links.hop_latency_s": 2e-6},
    ),
    "links.gw_links.bandwidth_bytes_per_s": Knob(global_exchange(0, 4), (12.5e9, 25e9), RACKS),
    "links.gw_links.links_between_racks": Knob(global_exchange(0, 4), (1, 2), RACKS),
    "links.gw_links.hop_latency_s": Knob(global_exchange(0, 4), (0.0, 2e-6), RACKS),
    "links.gw_links.ipus_per_rack": Knob(global_exchange(0, 4), (None, 4), {"num_ipus": 8}),
    "remote.bandwidth_bytes_per_s": Knob(remote_copy, (15.75e9, 4e9)),
    "remote.latency_s": Knob(remote_copy, (1e-6, 0.0)),
    "remote.model": Knob(remote_copy, ("streaming_memory", "host_link")),
    "code.copy_estimate": Knob(lambda: None, ("planner", "poplibs")),  # a Poplar copy, below
    # runtime gather/scatter copy vertices, applied when a graph is built: below
    "code.copy_gather_fixed_cycles": Knob(lambda: None, (150.0, 20.0)),
    "code.copy_gather_region_cycles": Knob(lambda: None, (47.8, 5.0)),
    "code.copy_scatter_fixed_cycles": Knob(lambda: None, (21.1, 90.0)),
    "code.copy_scatter_region_cycles": Knob(lambda: None, (40.7, 5.0)),
    # the plans poplin makes when a graph is built: tests/test_poplibs_release.py
    "software.poplibs_release": Knob(lambda: None, ("7eac0f26", "f927358")),
    **{
        f"counted.{name}": Knob(counted_compute, (1.0, 4.0))
        for name in CountedConfig.model_fields
        if name.endswith("_cycles")
    },
    "counted.pairing": Knob(counted_compute, (0.0, 1.0)),
    "counted.worker_entry_cycles": Knob(counted_compute, (6.0, 20.0)),
    "counted.supervisor_cycles": Knob(counted_compute, (11.0, 40.0)),
}

#: Fields whose mechanism covers several kinds of step, each further kind shown by its
#: own program (the one in ``KNOBS`` shows the first).
FURTHER: dict[str, tuple[Knob, ...]] = {
    "exchange.cycles_per_message": (
        Knob(global_fan_out, (0.0, 2.28), TWO),  # the tiles of a global exchange
        Knob(all_reduce, (0.0, 2.28), TWO),  # the tiles of a collective's ring steps
    ),
    "links.message_overhead_bytes": (Knob(spread_all_reduce, (0, 51), TWO),),
    "links.links_within_card": (Knob(spread_all_reduce, (None, 4), TWO),),  # a collective
}

NOT_TIMING: dict[str, str] = {
    "name": "a label",
    "description": "a label",
    "arch": "the Poplar target name a device reports",
    "provenance": "where fitted values came from; no effect by definition",
    "sim.granularity": "how the run is split into SimPy processes; the trace is identical "
    "(tests/test_granularity.py)",
    "tile.model": "component selector with one implementation (barrel)",
    "sync.model": "component selector with one implementation (controller)",
    "host.model": "component selector with one implementation (shared_link)",
    "links.model": "component selector with one implementation (topology)",
    "links.routing": "which copies may cross intermediate IPUs: off makes a copy between "
    "non-neighbours an error, never a slower copy",
    "host.max_copy_bytes": "a limit: a larger stream copy is an error",
    "tile.peak_flops_per_cycle_fp16": "reported by Target for fraction-of-peak figures; the "
    "cycles come from vertex estimates or counts",
    "tile.peak_flops_per_cycle_fp32": "as peak_flops_per_cycle_fp16",
    "memory.tile_memory_bytes": "a size: where data is placed, and out-of-memory errors",
    "memory.non_interleaved_bytes": "a size: where data is placed",
    "memory.interleaved_bytes": "a size: where data is placed",
    "memory.alignment_bytes": "a size: where data is placed",
    **{
        f"code.{name}": "a size of compiled code or state: tile memory only"
        for name in (
            "vertex_header_bytes",
            "field_pointer_bytes",
            "vector_size_bytes",
            "vectorlist_descriptor_bytes",
            "vertex_code_bytes",
            "control_code_base_bytes",
            "control_code_bytes_per_step",
            "exchange_code_base_bytes",
            "exchange_code_bytes_per_message",
            "host_exchange_code_bytes",
            "worker_stack_bytes",
            "supervisor_stack_bytes",
        )
    },
}


def test_every_field_is_classified() -> None:
    fields = set(leaf_paths())
    both = set(KNOBS) & set(NOT_TIMING)
    assert not both, f"listed as knob and as not timing: {sorted(both)}"
    missing = fields - set(KNOBS) - set(NOT_TIMING)
    assert not missing, (
        f"config fields with no program showing their effect on cycles: {sorted(missing)}; "
        "add each to KNOBS (a program it changes) or NOT_TIMING (why it cannot)"
    )
    stale = (set(KNOBS) | set(NOT_TIMING)) - fields
    assert not stale, f"listed fields the config no longer has: {sorted(stale)}"


def _cycles(path: str, value: Any, knob: Knob) -> tuple[int, tuple[tuple[str, int], ...]]:
    cfg = load_config("tiny", overrides={**knob.base, path: value})
    trace = Machine(cfg).run(knob.program())
    return trace.total_cycles, tuple(sorted(trace.totals.items()))


#: Knobs applied when a graph is built, each shown on a Poplar program by its own test.
BUILD_KNOBS = (
    "code.copy_estimate",
    *(f"code.copy_{k}_{p}_cycles" for k in ("gather", "scatter") for p in ("fixed", "region")),
    "software.poplibs_release",
)


@pytest.mark.parametrize("path", sorted(p for p in KNOBS if p not in BUILD_KNOBS))
def test_knob_changes_cycles(path: str) -> None:
    knob = KNOBS[path]
    a, b = (_cycles(path, value, knob) for value in knob.values)
    assert a != b, f"{path}: {knob.values[0]!r} and {knob.values[1]!r} give the same cycles {a}"


@pytest.mark.parametrize(
    "path,k", [(path, k) for path, knobs in sorted(FURTHER.items()) for k in range(len(knobs))]
)
def test_knob_changes_each_kind_of_step_it_covers(path: str, k: int) -> None:
    knob = FURTHER[path][k]
    a, b = (_cycles(path, value, knob) for value in knob.values)
    assert a != b, f"{path}: {knob.values[0]!r} and {knob.values[1]!r} give the same cycles {a}"


def test_copy_estimate_changes_an_on_tile_copy() -> None:
    from test_on_tile_copies import copy_total_cycles

    totals = [
        copy_total_cycles({"code.copy_estimate": v}, 16) for v in KNOBS["code.copy_estimate"].values
    ]
    # one region of 64 B in chunks of ceil(64 / (6 x 8)) x 8 = 16 B: four workers of
    # 16 B each; the tile takes its slowest worker's thread cycles x 6; the planner rule
    # moves 16 floats (a multiple of FLOAT's granularity 2) at min(8, 4) x 4 / 5 B a cycle
    cfg = load_config("tiny").code
    planner = round(cfg.copy_scatter_fixed_cycles) + 16 * 5 // (4 * 4)
    poplibs = 12 + 35 + 16 // 4
    assert totals[1] - totals[0] == 6 * (poplibs - planner)


@pytest.mark.parametrize("path", BUILD_KNOBS[1:-1])
def test_runtime_copy_fields_change_the_halo_copies(path: str) -> None:
    """The gather (``pre``) and scatter (``post``) copy vertices of the H blur workload
    on ``tiny`` take the config's copy fields when the graph is built."""
    from pathlib import Path

    from ipusim.runner import run_workload

    workload = str(Path(__file__).resolve().parents[1] / "examples/calibration/h_gaussian_blur.py")
    phase = "pre" if "gather" in path else "post"
    got = [
        run_workload(workload, load_config("tiny", {path: value})).metrics[f"phase_cycles.{phase}"]
        for value in KNOBS[path].values
    ]
    assert got[0] != got[1], f"{path}: {KNOBS[path].values} give the same {phase} cycles {got[0]}"
