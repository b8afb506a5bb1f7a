"""Bank conflicts of counted dual-access instructions (``memory.bank_conflicts``,
ipusim.tile.banks): the expected extra cycles from where the data lies, worked out by
hand here, on a machine program and on a Poplar program whose memory is placed."""

from __future__ import annotations

import numpy as np
import pytest
from examples_common import load_example

from ipusim import ir
from ipusim.config import load_config
from ipusim.machine import Machine
from ipusim.tile.banks import PlacedData
from ipusim.tile.counted import OP_CLASSES, CountedCompute, CountedExecution, CountedPart
from poplar_api import FLOAT, DeviceManager, Engine, Graph, TargetType
from poplar_api import program as prog

KIB = 1024
#: tiny: a 16 KiB non-interleaved region (bank 0), a 48 KiB interleaved one (banks 1-3)
ON = {"memory.bank_conflicts": True}


def blocks(*rows: tuple[int, int, int, int, int]) -> PlacedData:
    """Blocks on tile 0: ``(region, offset, size, read, written)`` each."""
    cols = np.array(rows, np.int64).T
    return PlacedData(np.zeros(len(rows), np.int64), *cols)


def dual_step(op: str, placed: PlacedData, runs: int = 100) -> ir.Sequence:
    """One worker vertex on tile 0 that ran ``runs`` ``op`` instructions."""
    profile = np.zeros((1, len(OP_CLASSES)), np.int64)
    profile[0, OP_CLASSES.index(op)] = 1
    part = CountedPart.of(np.array([0]), "worker", 1, profile, np.full((1, 1), runs))
    step = CountedCompute(name="cs", vertex_tile=[0], vertex_cycles=[0], vertex_multi=[False])
    step.counted.put(CountedExecution(static=np.zeros(1, np.int64), parts=(part,)))
    step.placement.data = placed
    return ir.Sequence([step])


def extra_cycles(op: str, placed: PlacedData, **overrides) -> int:
    """Tile 0's cycles with the conflicts charged, less without."""
    got = []
    for switch in (False, True):
        cfg = load_config("tiny", {"memory.bank_conflicts": switch, **overrides})
        got.append(int(Machine(cfg).run(dual_step(op, placed)).records[0].tile_cycles[0]))
    return got[1] - got[0]


def test_data_read_from_one_bank_makes_every_dual_load_wait_a_cycle() -> None:
    # 8 KiB read in the non-interleaved region, one bank: both loads always meet
    assert extra_cycles("load_2x64", blocks((0, 0, 8 * KIB, 8 * KIB, 0))) == 100


def test_reads_spread_over_banks_collide_by_the_sum_of_squared_shares() -> None:
    # 32 KiB in the interleaved region from offset 8 KiB: element 0 (banks 1, 2) holds
    # 24 KiB, split evenly between its two banks; the 8 KiB past it lie in bank 3, the
    # last of tiny's three interleaved banks, which has no partner
    p = np.array([12, 12, 8]) / 32
    placed = blocks((1, 8 * KIB, 32 * KIB, 32 * KIB, 0))
    assert extra_cycles("load_2x64", placed) == int(np.ceil(100 * (p**2).sum()))
    # an interleaved element is a pair of banks: half the loads of one element collide
    assert extra_cycles("load_2x64", blocks((1, 0, 16 * KIB, 16 * KIB, 0))) == 50


def test_the_odd_bank_at_the_end_of_the_interleaved_region_is_an_element_alone() -> None:
    # tiny's interleaved region is three banks: the third (its last 16 KiB) has no
    # partner to alternate words with, so data read from it make every dual load wait
    assert extra_cycles("load_2x64", blocks((1, 32 * KIB, 16 * KIB, 16 * KIB, 0))) == 100
    # with 8 KiB banks the region is three whole pairs: the same data spread over two
    assert extra_cycles("load_2x64", blocks((1, 32 * KIB, 16 * KIB, 16 * KIB, 0)),
                        **{"memory.bank_bytes": 8 * KIB}) == 50  # fmt: skip


def test_smaller_banks_spread_the_same_data_wider() -> None:
    placed = blocks((1, 0, 32 * KIB, 32 * KIB, 0))
    assert extra_cycles("load_2x64", placed) == 50  # one element of two 16 KiB banks
    assert extra_cycles("load_2x64", placed, **{"memory.bank_bytes": 8 * KIB}) == 25


@pytest.mark.parametrize(
    ("written_region", "expected"),
    [(1, 100), (0, 200)],  # the store in another bank; in the loads' bank
)
def test_the_store_of_a_dual_load_store_collides_too(written_region, expected) -> None:
    # both loads from the non-interleaved bank 0 (one extra cycle); the store to the
    # interleaved region (a bank of its own) or to bank 0 too (two extra cycles)
    placed = blocks((0, 0, 4 * KIB, 4 * KIB, 0), (written_region, 8 * KIB, 4 * KIB, 0, 4 * KIB))
    assert extra_cycles("load_2x64_store_64", placed) == expected


def test_single_accesses_and_unplaced_steps_never_wait() -> None:
    assert extra_cycles("load_64", blocks((0, 0, 8 * KIB, 8 * KIB, 0))) == 0
    step = dual_step("load_2x64", blocks((0, 0, 8, 8, 0)))
    step.body[0].placement.data = None
    cycles = Machine(load_config("tiny", ON)).run(step).records[0].tile_cycles[0]
    # a worker vertex alone on its tile: six tile cycles per thread cycle, no wait
    assert cycles == 6 * (100 + load_config("tiny").counted.worker_entry_cycles)


_TRIAD = load_example("poplar/counted_vector_kernel.py").VectorTriad


def triad_tile_cycles(n: int, memory: dict) -> tuple[int, list]:
    """Tile 0's compute cycles of the vector triad (``a = b + Q c``, one
    ``ld2x64pace`` and ``n / 2 - 1`` ``ld2xst64pace`` per worker) on one tile of
    ``tiny``, counted, and the placement of ``a``, ``b`` and ``c`` on it."""
    config = {"extends": "tiny", "memory": memory}
    device = DeviceManager(config, 1).getDevices(TargetType.IPU, 1)[0]
    device.attach()
    graph = Graph(device.getTarget())
    graph.addCodelets(_TRIAD)
    a, b, c = (graph.addVariable(FLOAT, [6, n], name) for name in "abc")
    cs = graph.addComputeSet("triad")
    for x in (a, b, c):
        graph.setTileMapping(x, 0)
    for w in range(6):
        v = graph.addVertex(cs, "VectorTriad", {"a": a[w], "b": b[w], "c": c[w]})
        graph.setTileMapping(v, 0)
    engine = Engine(graph, prog.Execute(cs), {"debug.vertexCycles": "counted"})
    engine.load(device)
    engine.run()
    trace = engine.getTraces()[-1]
    memory_report = engine.memory
    placed = [
        (p.block.name, p.region, p.offset)
        for p in memory_report.placements
        if p.block.tile == 0 and p.block.name in "abc"
    ]
    return int(next(r for r in trace.records if r.kind == "compute").tile_cycles[0]), placed


def test_a_poplar_program_is_charged_from_where_memory_placement_put_its_data() -> None:
    n = 64  # 6 x 64 floats: 1,536 bytes per variable, all three in interleaved element 0
    base, placed = triad_tile_cycles(n, {})
    assert sorted(p[:2] for p in placed) == [(x, "interleaved") for x in "abc"]
    assert max(p[2] for p in placed) + 1536 <= 32 * KIB
    charged, _ = triad_tile_cycles(n, {"bank_conflicts": True})
    # loads and stores alike spread over the element's two banks: p = q = 1/2
    two = 2 * 0.5**2
    three = 3 - 2 * (1 - 0.5**2 * 0.5)
    per_worker = two + (n // 2 - 1) * three
    assert charged - base == int(np.ceil(6 * per_worker))


@pytest.mark.parametrize("bank_kib", [16, 8])
def test_bank_shares_of_whole_elements_count_the_words_bank_of_places(bank_kib) -> None:
    """Blocks of whole elements: the bytes bank_shares puts in each bank are those of
    the 64-bit words bank_of (and MemorySpec.bank) places there, word by word."""
    from ipusim.tile.banks import bank_of, bank_shares
    from ipusim.tile.memory import INTERLEAVED as REGION_NAME
    from ipusim.tile.memory import MemorySpec

    memory = load_config("tiny", {"memory.bank_bytes": bank_kib * KIB}).memory
    spec = MemorySpec.from_config(memory)
    pair = 2 * bank_kib * KIB
    rows = [(0, 0, 16 * KIB, 16 * KIB, 0), (1, 0, pair, pair, 0), (1, pair, 48 * KIB - pair, 1, 0)]
    for region, offset, size, read, _ in rows:
        _, bank, got, _ = bank_shares(memory, blocks((region, offset, size, read, 0)))
        words = np.arange(offset, offset + size, 8)
        want = np.bincount([bank_of(memory, region, int(w)) for w in words]) * 8 * read / size
        assert dict(zip(bank.tolist(), got.tolist(), strict=True)) == {
            k: v for k, v in enumerate(want.tolist()) if v
        }
        if region == 1:
            assert [spec.bank(REGION_NAME, int(w)) for w in words[:4]] == [
                bank_of(memory, 1, int(w)) for w in words[:4]
            ]
