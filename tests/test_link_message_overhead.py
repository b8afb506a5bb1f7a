"""IPU-Link message overhead: every message takes ``links.message_overhead_bytes`` of
link capacity on its hop besides its payload, in the cost model and on the fabric."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ipusim import ir
from ipusim.config import load_config
from ipusim.exchange.links import global_exchange_cost
from ipusim.machine import Machine

BANDWIDTH = 16e9  # bytes per second, one link, one direction
OVERHEAD = 96  # bytes per message


def _cfg(overhead: int):
    return load_config(
        "tiny",
        overrides={
            "num_ipus": 2,
            "links.bandwidth_bytes_per_s": BANDWIDTH,
            "links.links_between_neighbours": 1,
            "links.hop_latency_cycles": 50,
            "links.message_overhead_bytes": overhead,
        },
    )


def _transfers(messages: int, payload: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``messages`` transfers of ``payload`` bytes from IPU 0 to IPU 1 (tile i -> tile 8 + i,
    cycling over the 8 tiles), plus one empty transfer (no message)."""
    src = np.arange(messages) % 8
    dst = 8 + src
    nbytes = np.full(messages, payload)
    return (
        np.append(src, 0).astype(np.int64),
        np.append(dst, 9).astype(np.int64),
        np.append(nbytes, 0).astype(np.int64),
    )


def _expected(cfg, messages: int, payload: int) -> int:
    """Written out: the one hop carries payload + overhead per message at the link rate;
    the tiles' side (bytes per tile at the exchange rate) is not the limit here."""
    per_cycle = BANDWIDTH / cfg.tile.clock_hz
    link = math.ceil(messages * (payload + cfg.links.message_overhead_bytes) / per_cycle)
    tile_bytes = math.ceil(messages / 8) * payload
    tiles = math.ceil(tile_bytes / cfg.exchange.bytes_per_cycle)
    return max(link, tiles) + cfg.links.hop_latency_cycles


@pytest.mark.parametrize("messages,payload", [(8, 4096), (64, 64), (200, 16)])
def test_cost_charges_the_overhead_per_message(messages: int, payload: int) -> None:
    cfg = _cfg(OVERHEAD)
    cost = global_exchange_cost(cfg, *_transfers(messages, payload))
    assert cost.cycles == _expected(cfg, messages, payload)
    assert cost.link_bytes[(0, 1)] == messages * (payload + OVERHEAD)


def test_overhead_zero_is_payload_only() -> None:
    cfg = _cfg(0)
    cost = global_exchange_cost(cfg, *_transfers(64, 64))
    assert cost.link_bytes[(0, 1)] == 64 * 64
    assert cost.cycles == _expected(cfg, 64, 64)


@pytest.mark.parametrize("messages,payload", [(8, 4096), (200, 16)])
def test_fabric_charges_the_same_overhead(messages: int, payload: int) -> None:
    """The simulated exchange (the shared link fabric) takes as long as the cost model."""
    cfg = _cfg(OVERHEAD)
    src, dst, nbytes = _transfers(messages, payload)
    program = ir.Sequence(
        [ir.GlobalExchange(name="gx", src_tile=src, dst_tile=dst, num_bytes=nbytes)]
    )
    trace = Machine(cfg).run(program)
    rec = next(r for r in trace.records if r.name == "gx")
    assert int(rec.tile_cycles.max()) == _expected(cfg, messages, payload)


def test_more_messages_of_the_same_bytes_take_longer() -> None:
    cfg = _cfg(OVERHEAD)
    one = global_exchange_cost(cfg, *_transfers(8, 1024)).cycles
    many = global_exchange_cost(cfg, *_transfers(128, 64)).cycles
    assert many > one
