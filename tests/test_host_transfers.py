"""Host reads and writes (Engine.writeTensor/readTensor) take time on the host link."""

from __future__ import annotations

import numpy as np
import pytest

from ipusim.config import load_config
from poplar_api import FLOAT, Engine, Graph, IPUModel
from poplar_api import program as prog

# 1 GHz, 8 bytes per cycle over the host link, 100 cycles of latency, 40 per host sync
ROUND = {
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
