"""The exchange code per message on the tiles of global exchanges and collectives, and the
link overhead of a collective's messages (docs/machine.md, "IPU-Links" and
"Collectives").

Expected cycles are written out here from the documented rules, independently of
ipusim.exchange.links and ipusim.exchange.collectives.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.errors import IRValidationError
from ipusim.exchange.links import global_exchange_cost
from ipusim.machine import Machine
from ipusim.timing import TimingModel

PER_MESSAGE = 2.28  # cycles of exchange code per message


def _gx_config(per_message: float):
    return load_config(
        "tiny",
        overrides={
            "num_ipus": 2,
            "links.hop_latency_cycles": 50,
            "exchange.cycles_per_message": per_message,
        },
    )


def _fan_out() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Tile 0 of IPU 0 sends 64 messages of 64 B, 8 to each tile of IPU 1, and one empty
    transfer (no message); tile 1 sends one message of 4 B to tile 8."""
    src = np.array([0] * 64 + [0, 1], np.int64)
    dst = np.array([8 + k % 8 for k in range(64)] + [9, 8], np.int64)
    nbytes = np.array([64] * 64 + [0, 4], np.int64)
    return src, dst, nbytes


def _gx_expected(cfg) -> int:
    """The busiest tile (tile 0: 4,096 B, 64 messages) against the one hop's bytes."""
    per_cycle = cfg.link_bytes_per_cycle
    link = math.ceil(round((64 * 64 + 4) / per_cycle, 9))
    tile0 = 4096 // 4 + math.ceil(round(cfg.exchange.cycles_per_message * 64, 9))
    # tile 8 receives 9 messages of 516 B: far below tile 0
    return max(link, tile0) + cfg.links.hop_latency_cycles


@pytest.mark.parametrize("per_message", [0.0, PER_MESSAGE, 100.0])
def test_a_global_exchange_tile_pays_its_exchange_code_per_message(per_message: float) -> None:
    cfg = _gx_config(per_message)
    cost = global_exchange_cost(cfg, *_fan_out())
    assert cost.cycles == _gx_expected(cfg)
    # the simulated run (the link fabric) takes as long as the estimate
    src, dst, nbytes = _fan_out()
    step = ir.GlobalExchange(name="gx", src_tile=src, dst_tile=dst, num_bytes=nbytes)
    trace = Machine(cfg).run(ir.Sequence([step]))
    (rec,) = [r for r in trace.records if r.name == "gx"]
    assert rec.cycles == _gx_expected(cfg)
    assert TimingModel(cfg).cost(step).cycles == _gx_expected(cfg)


def test_the_per_message_cycles_move_a_tile_bound_global_exchange() -> None:
    base, charged = (
        global_exchange_cost(_gx_config(v), *_fan_out()).cycles for v in (0.0, PER_MESSAGE)
    )
    assert charged - base == math.ceil(PER_MESSAGE * 64)


# ------------------------------------------------------------------ collectives
def _ring_config(per_message: float = 0.0, overhead: int = 0):
    return load_config(
        "mk2",
        overrides={
            "num_ipus": 4,
            "links.topology": "ring",
            "exchange.cycles_per_message": per_message,
            "links.message_overhead_bytes": overhead,
        },
    )


def _all_reduce(nbytes: int, tile_bytes: int, tiles: int, algorithm: str = "ring"):
    return ir.Collective(
        name="ar",
        op="all_reduce",
        groups=((0, 1, 2, 3),),
        num_bytes=(nbytes,),
        max_tile_bytes=(tile_bytes,),
        member_tiles=(tiles,),
        algorithm=algorithm,
    )


def _ring_expected(cfg, nbytes: int, tile_bytes: int, tiles: int, directions: int = 1) -> int:
    """4 members, all-reduce: 6 steps of sync + max(latency + (chunk + overhead x tiles) /
    link, on-chip + exchange code of 2 messages per direction), 3 reductions."""
    n = 4
    chunk = math.ceil(math.ceil(nbytes / n) / directions)
    rate = cfg.link_bytes_per_cycle
    link = cfg.links.hop_latency_cycles + (chunk + cfg.links.message_overhead_bytes * tiles) / rate
    tile_part = math.ceil(tile_bytes / n)
    on_chip = math.ceil(tile_part / cfg.exchange.bytes_per_cycle) + math.ceil(
        round(cfg.exchange.cycles_per_message * 2 * directions, 9)
    )
    step = cfg.global_sync_cycles + max(math.ceil(round(link, 6)), on_chip)
    return 2 * (n - 1) * step + (n - 1) * math.ceil(tile_part / cfg.memory.store_bytes_per_cycle)


def _run(cfg, step) -> int:
    (rec,) = [r for r in Machine(cfg).run(ir.Sequence([step])).records if r.name == "ar"]
    return rec.cycles


@pytest.mark.parametrize("algorithm,directions", [("ring", 1), ("bidirectional_ring", 2)])
def test_ring_steps_pay_the_exchange_code_of_their_messages(algorithm, directions) -> None:
    """The data on one tile: the tile, not the link, sets each ring step."""
    nbytes = 40_000
    for per_message in (0.0, PER_MESSAGE):
        cfg = _ring_config(per_message)
        step = _all_reduce(nbytes, nbytes, 1, algorithm)
        want = _ring_expected(cfg, nbytes, nbytes, 1, directions)
        assert _run(cfg, step) == want
        assert TimingModel(cfg).cost(step).cycles == want
    moved = _run(_ring_config(PER_MESSAGE), step) - _run(_ring_config(0.0), step)
    assert moved == 6 * math.ceil(PER_MESSAGE * 2 * directions)


def test_ring_transfers_carry_the_overhead_of_one_message_per_tile() -> None:
    """8 MB spread over 1,000 tiles: every ring transfer is 1,000 messages, each with 51 B
    of link overhead on the hop."""
    nbytes, tile_bytes, tiles = 8_000_000, 8_000, 1000
    cfg = _ring_config(overhead=51)
    step = _all_reduce(nbytes, tile_bytes, tiles)
    want = _ring_expected(cfg, nbytes, tile_bytes, tiles)
    assert _run(cfg, step) == want
    cost = TimingModel(cfg).cost(step)
    assert cost.cycles == want
    assert cost.link_bytes[(0, 1)] == 6 * (nbytes // 4 + 51 * tiles)
    assert want > _ring_expected(_ring_config(), nbytes, tile_bytes, tiles)


def test_member_tiles_must_be_one_count_per_group() -> None:
    step = ir.Collective(
        name="ar", op="all_reduce", groups=((0, 1),), num_bytes=(64,), member_tiles=(0,)
    )
    with pytest.raises(IRValidationError, match="member_tiles"):
        Machine(_ring_config()).run(ir.Sequence([step]))
