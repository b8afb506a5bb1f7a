"""Host reads and writes (Engine.writeTensor/readTensor) take time on the host link,
and the host's own work around a stream copy (StreamCopyBegin/End) takes time in the
total but in no phase."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.machine import Machine
from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog

# 1 GHz, 8 bytes per cycle over the host link, 100 cycles of latency, 40 per host sync,
# no host work around a copy
ROUND = {
    "host.copy_begin_s": 0.0,
    "host.copy_end_s": 0.0,
    "tile.clock_hz": 1e9,
    "host.bandwidth_bytes_per_s": 8e9,
    "host.latency_s": 100e-9,
    "sync.host_sync_cycles": 40,
    "sync.relative_delay": "none",
    "sync.min_sync_delay_cycles": 0,
}


def engine_with(per_tile: int, tiles: int = 4, **extra) -> Engine:
    """An engine whose tensor 'w' has ``per_tile`` floats on each of ``tiles`` tiles."""
    device = IPUModel(load_config("tiny", {**ROUND, **extra})).createDevice()
    graph = Graph(device.getTarget())
    w = graph.addVariable(FLOAT, [tiles * per_tile], "w")
    for tile in range(tiles):
        graph.setTileMapping(w[tile * per_tile : (tile + 1) * per_tile], tile)
    graph.createHostWrite("w", w)
    graph.createHostRead("w", w)
    engine = Engine(graph, [prog.Sequence()])
    engine.load(device)
    return engine


def test_write_and_read_take_link_time() -> None:
    engine = engine_with(per_tile=100)  # 400 bytes on each of 4 tiles: 1600 bytes
    values = np.arange(400, dtype=np.float32)
    engine.writeTensor("w", values)
    np.testing.assert_array_equal(engine.readTensor("w"), values)
    write, read = engine.getHostTransferTraces()
    for trace, name in ((write, "writeTensor('w')"), (read, "readTensor('w')")):
        sync, copy = trace.records
        assert (sync.kind, copy.kind, copy.name) == ("sync", "stream_copy", name)
        # the host sync releases every tile 40 cycles after the last arrives (all at 0)
        assert sync.last_cycle == 40
        # latency 100, then 1600 bytes at 8 per cycle (the busiest tile needs 400 / 4)
        assert copy.last_cycle - sync.last_cycle == 100 + 1600 // 8
        assert trace.totals["host_exchange"] > 0
    engine.resetExecutionProfile()
    assert engine.getHostTransferTraces() == []


def test_busiest_tile_sets_the_time_when_the_link_is_fast() -> None:
    engine = engine_with(per_tile=1000, tiles=2, **{"host.bandwidth_bytes_per_s": 1e12})
    engine.writeTensor("w", np.zeros(2000, np.float32))
    sync, copy = engine.getHostTransferTraces()[0].records
    # 4000 bytes per tile at 4 bytes per cycle; the link moves them in 8 cycles
    assert copy.last_cycle - sync.last_cycle == 100 + 4000 // 4


def test_a_transfer_over_the_copy_limit_is_split_into_whole_tiles() -> None:
    engine = engine_with(per_tile=100, **{"host.max_copy_bytes": 1000})
    engine.writeTensor("w", np.zeros(400, np.float32))
    records = engine.getHostTransferTraces()[0].records
    copies = [r for r in records if r.kind == "stream_copy"]
    # 4 tiles of 400 bytes, at most 1000 bytes per copy: tiles (0, 1) and (2, 3)
    assert [r.name for r in copies] == ["writeTensor('w')/0", "writeTensor('w')/1"]
    assert copies[1].last_cycle - copies[0].last_cycle == 100 + 800 // 8


def test_cpu_device_has_no_host_transfer_time() -> None:
    from poplar_api import Device

    device = Device.createCPUDevice()
    graph = Graph(device.getTarget())
    w = graph.addVariable(FLOAT, [4], "w")
    graph.setTileMapping(w, 0)
    graph.createHostWrite("w", w)
    engine = Engine(graph, [prog.Sequence()])
    engine.load(device)
    engine.writeTensor("w", np.ones(4, np.float32))
    assert engine.getHostTransferTraces() == []


@pytest.mark.parametrize("per_tile", [1, 64])
def test_run_traces_are_unchanged_by_host_transfers(per_tile: int) -> None:
    engine = engine_with(per_tile=per_tile)
    engine.writeTensor("w", np.zeros(4 * per_tile, np.float32))
    engine.run(0)
    assert len(engine.getTraces()) == 1
    assert len(engine.getHostTransferTraces()) == 1


def copy_program(direction: str, prefetch: bool = False) -> ir.Node:
    """A host sync and a copy of 400 bytes to or from each of tiles 0 and 1."""
    copy = ir.StreamCopy(name="c", direction=direction, tile=[0, 1], num_bytes=[400, 400],
                         stream="s", prefetch=prefetch)  # fmt: skip
    return ir.Sequence([ir.Sync(name="h", sync_kind="host"), copy])


@pytest.mark.parametrize(
    ("extra", "direction", "host_work"),
    [
        ({"host.copy_begin_s": 1e-6}, "host_to_device", 1000),
        ({"host.copy_end_s": 2e-6}, "device_to_host", 2000),
        # 800 bytes at 1 byte per cycle: before the data phase into the device ...
        ({"host.prepare_bandwidth_bytes_per_s": 1e9}, "host_to_device", 800),
        # ... after it out of the device
        ({"host.prepare_bandwidth_bytes_per_s": 1e9}, "device_to_host", 800),
    ],
)
def test_host_work_is_in_the_total_and_in_no_phase(extra, direction, host_work) -> None:
    plain = Machine(load_config("tiny", ROUND)).run(copy_program(direction))
    trace = Machine(load_config("tiny", {**ROUND, **extra})).run(copy_program(direction))
    # the copy alone: latency 100 + max(800 bytes / 8, busiest tile 400 / 4) = 200
    assert plain.total_cycles == 40 + 200
    assert trace.total_cycles == plain.total_cycles + host_work
    assert trace.totals == plain.totals  # the tiles' phases do not hold the host's work
    copy = trace.records[1]
    assert copy.last_cycle - copy.first_cycle == 200 + host_work


def test_a_prefetched_copy_was_prepared_in_the_background() -> None:
    """Two copies of one stream with prefetch: the second waits for no preparation
    (the host prepared and sent its data after the first ended), only its End."""
    cfg = load_config("tiny", {**ROUND, "host.copy_begin_s": 1e-6, "host.copy_end_s": 5e-7})
    one = copy_program("host_to_device", prefetch=True)
    trace = Machine(cfg).run(ir.Sequence([one, one]))
    first, second = (r for r in trace.records if r.kind == "stream_copy")
    assert first.last_cycle - first.first_cycle == 1000 + 200 + 500
    # the second copy's data was prepared (1000) and sent (100 + 800 / 8) from the first
    # copy's end; after its host sync (40) the second copy waits 1200 - 40 = 1160 for
    # it, then the host's End (500)
    assert second.last_cycle - second.first_cycle == 1160 + 500


@pytest.mark.parametrize("prefetch", [False, True])
def test_host_work_is_the_same_at_tile_granularity(prefetch: bool) -> None:
    extra = {**ROUND, "host.copy_begin_s": 1e-6, "host.copy_end_s": 5e-7, "num_ipus": 2}
    one = copy_program("host_to_device", prefetch=prefetch)
    program = ir.Sequence([one, one, copy_program("device_to_host")])
    traces = [
        Machine(load_config("tiny", {**extra, "sim.granularity": g})).run(program)
        for g in ("ipu", "tile")
    ]
    assert traces[0].fingerprint() == traces[1].fingerprint()
    assert traces[0].total_cycles > 3 * 1500
